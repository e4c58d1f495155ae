//! `ptemu simulate`: a trace through the tracer and the output unit into DIR.

use super::output::print;
use super::summary::{fail_on_operational_error, halt_note, warn_layout, write_output_state};
use super::Failure;
use indicatif::{HumanCount, ProgressBar, ProgressDrawTarget, ProgressStyle};
use ptemu::case::RunDir;
use ptemu::event_log::EventLog;
use ptemu::layout::Layout;
use ptemu::picture::Run;
use ptemu::regs::ctl_text::{apply_assignment, config_msr, parse_value, CtlDisplay};
use ptemu::report::{region_file_name, write_atomic, write_outputs_with};
use ptemu::simulate::fault::{Fault, Plan};
use ptemu::simulate::{self, Options, Outcome, RunInfo, SimError, SimReport, TruthSummary};
use ptemu::sources::{ErrorKind, Format, Input, ReadOptions};
use ptemu::CpuProfile;
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The Penn sample `ptemu simulate` runs without an input: the first 1,000 micro-ops of sjeng
/// (tests/data/penn/SOURCE.md).
const BUNDLED: &[u8] = include_bytes!("../../tests/data/penn/sjeng-1K.trace");
const BUNDLED_NAME: &str = "sjeng-1K.trace (bundled)";

/// The arguments of `ptemu simulate`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace file ("-" for stdin; gzip is detected by magic). Without it: the bundled sjeng-1K
    /// Penn sample.
    input: Option<PathBuf>,
    /// Format of INPUT: byu, byu-p2, penn, kaplan, gem5. Required with INPUT (the file's
    /// contents are not guessed); without INPUT the bundled sample is Penn.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// gem5 only: the other file of the pair (an instruction-fetch trace next to an elastic data
    /// trace).
    #[arg(long)]
    fetch_trace: Option<PathBuf>,
    /// Skip bad records and count them instead of stopping at the first.
    #[arg(long)]
    lenient: bool,
    /// Penn: do not synthesize the code image.
    #[arg(long)]
    no_image: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// The options `ptemu simulate` and `ptemu run` share: the layout, CPU and MSRs, the tracer,
/// faults, the outputs.
#[derive(clap::Args, Clone)]
pub struct RunArgs {
    /// Output layout (TOML, as `ptemu write` takes). Default: four 1 MiB ToPA regions with INT,
    /// END back to the table (`ptemu layout default` prints it).
    #[arg(long)]
    pub(super) layout: Option<PathBuf>,
    /// CPU profile, replacing the layout's: broadwell, skylake, goldmont, icelake, alderlake,
    /// sapphirerapids, generic-max.
    #[arg(long)]
    pub(super) cpu: Option<String>,
    /// The profile's errata, edited (CP2): comma-separated, `NAME` adds one, `-NAME` removes
    /// one, `none` removes all, e.g. `--errata -BDM70` or `--errata none,SKL014`. Applied after
    /// the layout's `errata` list. The names and what each does: spec/cpu-profiles.md; a wrong
    /// name is refused with the list.
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub(super) errata: Option<String>,
    /// IA32_RTIT_CTL field by its SDM name (any case), e.g. DisRETC=1, PSBFreq=1, MTCEn=1;
    /// raw=0x... sets the whole MSR. Repeatable, applied in order on top of the default TraceEn
    /// BranchEn User TSCEn (+ ToPA for a ToPA layout, + OS for CPL-0 BYU traces).
    #[arg(long, value_name = "KEY=VALUE")]
    pub(super) ctl: Vec<String>,
    /// Another configuration MSR written before CTL: CR3_MATCH, ADDR0_A ... ADDR3_B.
    #[arg(long, value_name = "NAME=VALUE")]
    pub(super) msr: Vec<String>,
    /// Tracer settings (TOML): clock, cycles_per_instruction, long_tnt, tsx, overflow,
    /// flush_bytes, packing (spec/generation.md).
    #[arg(long, value_name = "FILE")]
    pub(super) tracer_config: Option<PathBuf>,
    /// How packets are laid out: none (no PADs) or hardware (as Skylake and later lay them out,
    /// spec/hardware.md). Default: the CPU profile's.
    #[arg(long, value_name = "none|hardware")]
    pub(super) packing: Option<ptemu::packing::Packing>,
    /// Inject a fault: ovf[@N], wrap[@SIZE], stop[@SIZE], gap[@N], corrupt[@OFF],
    /// corrupt-silent[@OFF] (spec/truth.md). Repeatable; positions not given come from --seed.
    #[arg(long, value_name = "KIND[@WHERE]")]
    pub(super) fault: Vec<Fault>,
    /// Seed for fault positions not given.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Do not write the truth (faster on long runs; not with --fault).
    #[arg(long, conflicts_with = "fault")]
    pub(super) no_truth: bool,
    /// The truth's form (spec/truth.md TR9): bin, truth.bin (about a byte an instruction;
    /// `ptemu truth dump` prints it as JSON lines), or jsonl, truth.jsonl (one JSON line an
    /// instruction).
    #[arg(long, value_name = "bin|jsonl", default_value = "bin")]
    pub(super) truth_format: TruthFormat,
    /// Also write DIR/perf.data (and, for Penn input, DIR/image.elf) for Linux perf's Intel PT
    /// decoder (spec/perf-data.md).
    #[arg(long)]
    pub(super) perf_data: bool,
    /// Output directory.
    #[arg(long)]
    pub(super) out: PathBuf,
    /// Threads: 1 does everything on one; 2 or more read and map the input on a second thread,
    /// ahead of the tracer and output unit, and parse a Penn trace or decode a gem5 trace on N
    /// more (at most 16); the outputs are the same bytes. Default: the machine's cores.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) threads: Option<u16>,
    /// Print nothing on success.
    #[arg(long, short)]
    pub(super) quiet: bool,
}

pub fn run(a: Args) -> Result<(), Failure> {
    let opts = options(&a)?;
    let (input, fetch) = inputs(&a)?;
    let name = input.name().to_owned();
    let read = input.progress();
    let done = execute(
        &a.run,
        &opts,
        &name,
        read.total(),
        &|records| {
            if read.total().is_some() {
                read.consumed()
            } else {
                records
            }
        },
        |sink, spool, events, progress, _| {
            simulate::run_recording(&opts, input, fetch, sink, spool, events, progress)
        },
        &|_| (Vec::new(), None),
    )?;
    if !a.run.quiet {
        print(&summary(
            "simulate",
            &name,
            &a.run,
            &opts,
            &done.outcome,
            &done.report,
            done.truth.as_ref(),
        ))?;
    }
    let unit_result = fail_on_operational_error(&done.outcome.unit);
    done.staged.commit(&a.run.out)?;
    unit_result
}

/// The simulation's result, every output staged in DIR.
pub(super) struct Done {
    pub outcome: Outcome,
    pub report: SimReport,
    pub truth: Option<TruthSummary>,
    /// The outputs, to commit once the summary is out.
    pub staged: Staged,
}

/// What a run knows once its simulation is over: the file mappings for perf.data's MMAP2
/// records, and what report.json says of a traced program.
pub(super) type After = (Vec<ptemu::perf_data::Mapping>, Option<serde_json::Value>);

/// The staged file a simulation writes the stream to.
pub(super) type Sink = BufWriter<fs::File>;

/// What `ptemu simulate` and `ptemu run` do around the simulation: DIR staged (SIM-all or
/// nothing), the progress bar (`total` bytes, `position` from the records read), `simulate`
/// run into the staged sink, truth spool and event log, then the truth, perf.data (with the
/// file mappings `after` gives once the simulation is over), the report and every other file,
/// moved into place at once.
#[allow(clippy::type_complexity)]
pub(super) fn execute(
    r: &RunArgs,
    opts: &Options,
    name: &str,
    total: Option<u64>,
    position: &dyn Fn(u64) -> u64,
    simulate: impl FnOnce(
        Sink,
        Option<&mut dyn std::io::Write>,
        EventLog,
        &mut dyn FnMut(u64),
        &Path,
    ) -> Result<(Outcome, Sink), SimError>,
    after: &dyn Fn(&Path) -> After,
) -> Result<Done, Failure> {
    let out_error = |e: std::io::Error| Failure::output(format!("{}: writing outputs: {e}", r.out.display()));
    let dir = RunDir::create(&r.out).map_err(out_error)?;
    let create = |name: &str| {
        fs::File::create(dir.staged(name))
            .map(|f| BufWriter::with_capacity(1 << 20, f))
            .map_err(out_error)
    };
    let plan = plan(r);
    // With consumer-side faults the stored stream goes aside first; trace.pt is what the
    // consumer got (spec/truth.md FLT3, FLT5-FLT7).
    let full = if plan.changes_delivery() {
        "trace.full"
    } else {
        "trace.pt"
    };
    let sink = create(full)?;
    let mut spool = if r.no_truth {
        None
    } else {
        Some(create("truth.spool")?)
    };
    let events = EventLog::default().streaming_to(create("events.jsonl")?);

    // No bar over a traced program's own terminal output (`ptemu run`).
    let bar = progress_bar(r.quiet || opts.format == Format::Qemu, total);
    let started = std::time::Instant::now();
    let result = simulate(
        sink,
        spool.as_mut().map(|w| w as &mut dyn std::io::Write),
        events,
        &mut |records| {
            bar.set_message(format!("{} records", HumanCount(records)));
            bar.set_position(position(records));
        },
        dir.staging(),
    );
    bar.finish_and_clear();
    let run_info = RunInfo::now(started.elapsed().as_secs_f64());
    let sim_error = |e: SimError| match e {
        // Writing DIR failed, not the input: name DIR (a full disk, say).
        SimError::Sink(_) | SimError::Events(_) | SimError::Truth(_) => {
            Failure::output(format!("{}: {e}", r.out.display()))
        }
        // A file the source puts aside (`ptemu run`'s other threads) could not be written: the
        // run's own output failed, not the input.
        SimError::Source(s) if matches!(s.kind, ErrorKind::Write(_)) => Failure::output(s.to_string()),
        e => Failure::input(e.to_string()),
    };
    // On an error `dir` is dropped, which removes everything the run made.
    let (outcome, sink) = result.map_err(sim_error)?;
    sink.into_inner()
        .map_err(|e| out_error(e.into_error()))?
        .sync_all()
        .map_err(out_error)?;
    let truth = match spool {
        Some(w) => {
            w.into_inner().map_err(|e| out_error(e.into_error()))?;
            let run = opts.describe(&plan, name);
            Some(
                simulate::finish_truth(
                    &dir.staged(full),
                    &dir.staged("trace.pt"),
                    &dir.staged("truth.spool"),
                    &dir.staged(r.truth_format.file()),
                    &outcome,
                    &plan,
                    run,
                )
                .map_err(sim_error)?,
            )
        }
        None => None,
    };
    let (maps, program) = after(dir.staging());
    let perf = if r.perf_data {
        Some(write_perf_data(&dir, opts, &outcome, &plan, name, maps).map_err(out_error)?)
    } else {
        None
    };
    let (report, staged) = finish(
        dir,
        opts,
        &outcome,
        (run_info, layout_line(r, opts)),
        truth.as_ref(),
        perf.as_deref(),
        program,
    )
    .map_err(out_error)?;
    Ok(Done {
        outcome,
        report,
        truth,
        staged,
    })
}

/// Resolves the layout, CPU, CTL, other MSRs and tracer settings; every mistake is reported before
/// any input is read.
fn options(a: &Args) -> Result<Options, Failure> {
    let format = format_of(a)?;
    let mut opts = run_options(format, &a.run)?;
    opts.read = ReadOptions { lenient: a.lenient };
    opts.image &= !a.no_image;
    Ok(opts)
}

/// The input's format: `--format`, or Penn for the bundled sample.
fn format_of(a: &Args) -> Result<Format, Failure> {
    let format = match (&a.input, a.format) {
        (_, Some(f)) => f,
        (None, None) => Format::Penn,
        (Some(_), None) => {
            return Err(Failure::input(
                "--format is required with an INPUT (byu, byu-p2, penn, kaplan, gem5)",
            ))
        }
    };
    if a.input.is_none() && format != Format::Penn {
        return Err(Failure::input(
            "without an INPUT the bundled sample is Penn: --format penn",
        ));
    }
    Ok(format)
}

/// The simulation's options for `format` from the options `simulate` and `run` share; every
/// mistake is reported before any input is read.
pub(super) fn run_options(format: Format, r: &RunArgs) -> Result<Options, Failure> {
    let mut layout = match &r.layout {
        Some(p) => Layout::load(p).map_err(|e| Failure::input(e.to_string()))?,
        None => simulate::default_layout(),
    };
    if let Some(name) = &r.cpu {
        // SIM5: --cpu replaces the layout's profile (and its maxphyaddr/errata overrides).
        layout.cpu = CpuProfile::named(name).map_err(|e| Failure::input(format!("--cpu: {e}")))?;
    }
    if let Some(list) = &r.errata {
        for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
            layout.cpu.errata = layout
                .cpu
                .errata
                .edit(entry)
                .map_err(|e| Failure::input(format!("--errata: {e}")))?;
        }
    }
    if let Some(p) = &r.layout {
        // The picture of the run checks `opts.layout` again at the end (a static check, cheap).
        let _ = warn_layout(p, &layout);
    }
    let mut opts = Options::new(format, layout);
    for text in &r.ctl {
        opts.ctl = apply_assignment(opts.ctl, text).map_err(|e| Failure::input(format!("--ctl {e}")))?;
    }
    for text in &r.msr {
        opts.msrs.push(msr_assignment(text)?);
    }
    if let Some(p) = &r.tracer_config {
        opts.tracer = ptemu::config_file::load_tracer_config(p).map_err(|e| Failure::input(e.to_string()))?;
    }
    opts.tracer.packing = r.packing.or(opts.tracer.packing);
    if !opts.ctl.trace_en() {
        tracing::warn!(
            "IA32_RTIT_CTL.TraceEn=0: tracing is never enabled, so the run traces nothing and \
             trace.pt stays empty (drop --ctl TraceEn=0 to trace)"
        );
    }
    if opts.ctl.topa() != (opts.layout.scheme == ptemu::layout::Scheme::Topa) {
        tracing::warn!(
            "IA32_RTIT_CTL.ToPA={} but the layout's scheme is {}: the output MSRs are read as the \
             CTL value says (SIM5)",
            u8::from(opts.ctl.topa()),
            opts.layout.scheme
        );
    }
    opts.threads = r
        .threads
        .map(usize::from)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    opts.apply_faults(&plan(r), r.layout.is_some())
        .map_err(|e| Failure::input(e.to_string()))?;
    Ok(opts)
}

/// The layout the run used, in a line: its file, the default, or the ring a wrap or stop fault
/// made, and what it is (`Layout::summary`).
fn layout_line(r: &RunArgs, opts: &Options) -> String {
    let source = match &r.layout {
        Some(p) => p.display().to_string(),
        None if plan(r).makes_layout() => "the --fault layout".to_string(),
        None => "default layout".to_string(),
    };
    format!("{source}: {}", opts.layout.summary())
}

fn plan(r: &RunArgs) -> Plan {
    Plan {
        faults: r.fault.clone(),
        seed: r.seed,
    }
}

fn msr_assignment(text: &str) -> Result<(u32, u64), Failure> {
    let bad = || {
        Failure::input(format!(
            "--msr {text:?}: expected NAME=VALUE with NAME one of CR3_MATCH, ADDR0_A … ADDR3_B"
        ))
    };
    let (name, value) = text.split_once('=').ok_or_else(bad)?;
    let msr = config_msr(name).ok_or_else(bad)?;
    let value = parse_value(value).ok_or_else(bad)?;
    Ok((msr, value))
}

fn inputs(a: &Args) -> Result<(Input, Option<Input>), Failure> {
    let open = |p: &Path| Input::open(p).map_err(|e| Failure::input(e.to_string()));
    let input = match &a.input {
        Some(p) => open(p)?,
        None => {
            Input::from_bytes(BUNDLED_NAME, BUNDLED.to_vec()).map_err(|e| Failure::input(e.to_string()))?
        }
    };
    let fetch = a.fetch_trace.as_deref().map(open).transpose()?;
    Ok((input, fetch))
}

/// A records counter on stderr when it is a terminal (indicatif hides it otherwise).
fn progress_bar(quiet: bool, file_size: Option<u64>) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(file_size, ProgressDrawTarget::stderr());
    // A file of known size: how much of it is read, the rate and the time left. A pipe: records.
    let template = if file_size.is_some() {
        "{spinner} {percent:>3}% of {total_bytes} read ({binary_bytes_per_sec}), {msg}, {elapsed} elapsed, ETA {eta}"
    } else {
        "{spinner} {msg} read, {elapsed}"
    };
    bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Writes the image files, regions/ and report.json into the staging directory, then moves every
/// output into place at once; returns the report.
fn finish(
    dir: RunDir,
    opts: &Options,
    outcome: &Outcome,
    (run_info, layout): (RunInfo, String),
    truth: Option<&TruthSummary>,
    perf: Option<&str>,
    program: Option<serde_json::Value>,
) -> std::io::Result<(SimReport, Staged)> {
    let mut outputs = vec!["trace.pt", "events.jsonl"];
    let mut stale = vec![];
    if perf.is_some() {
        outputs.push("perf.data");
        if outcome.image.is_some() {
            outputs.push("image.elf");
        } else {
            stale.push("image.elf");
        }
    } else {
        stale.extend(["perf.data", "image.elf"]);
    }
    let ptxed = match &outcome.image {
        Some(img) => {
            write_atomic(&dir.staged("image.bin"), |w| w.write_all(&img.bytes))?;
            write_atomic(&dir.staged("image.json"), |w| {
                serde_json::to_writer(
                    &mut *w,
                    &serde_json::json!({ "base": format!("{:#x}", img.base) }),
                )?;
                w.write_all(b"\n")
            })?;
            outputs.extend(["image.bin", "image.json"]);
            Some(img.ptxed_command(
                &dir.final_path("trace.pt").display().to_string(),
                &dir.final_path("image.bin").display().to_string(),
                &opts.ptxed_config(),
            ))
        }
        // No stale image from an earlier run next to a trace it does not belong to.
        None => {
            stale.extend(["image.bin", "image.json"]);
            None
        }
    };
    let mut report = SimReport::new(outcome, opts, ptxed);
    report.run = Some(run_info);
    report.layout = Some(layout);
    if let Some(t) = truth {
        report.stats.trace_bytes = t.delivered;
    }
    report.truth = truth.map(TruthSummary::to_json);
    report.perf = perf.map(str::to_owned);
    report.program = program;
    for f in [TruthFormat::Bin, TruthFormat::Jsonl] {
        match truth {
            Some(t) if t.file == f.file() => outputs.push(f.file()),
            _ => stale.push(f.file()),
        }
    }
    write_outputs_with(dir.staging(), &outcome.unit, &outcome.mem, &report)?;
    outputs.extend(["regions", "report.json"]);
    // Code a real program wrote at run time, a file a version (`ptemu run`, QE17).
    if dir.staged("code").is_dir() {
        outputs.push("code");
    }
    // The picture replays the layout as its file programs it: not drawn when --ctl ToPA= says
    // otherwise (SIM5), rather than drawn wrong (spec/picture.md).
    if opts.ctl.topa() == (opts.layout.scheme == ptemu::layout::Scheme::Topa) {
        let run = Run::new(
            report.msr,
            outcome.unit.stats(),
            report.event_counts,
            report.events.clone(),
        );
        let picture = ptemu::picture::run_svg(&opts.layout, &ptemu::layout::check(&opts.layout), &run);
        write_atomic(&dir.staged("layout.svg"), |w| w.write_all(picture.as_bytes()))?;
        outputs.push("layout.svg");
    } else {
        stale.push("layout.svg");
    }
    Ok((report, Staged { dir, outputs, stale }))
}

/// Every output of a run, complete in the staging directory, waiting to be moved into place:
/// after the summary went out, so that a summary that cannot be written (a full stdout) leaves
/// DIR as it was (SIM7).
pub(super) struct Staged {
    dir: RunDir,
    outputs: Vec<&'static str>,
    stale: Vec<&'static str>,
}

impl Staged {
    /// The staging directory, where more outputs may be written before the commit.
    pub fn staging(&self) -> &Path {
        self.dir.staging()
    }

    /// One more output (a file or directory written into [`Staged::staging`]) to move into
    /// place.
    pub fn add_output(&mut self, name: &'static str) {
        self.outputs.push(name);
    }

    /// Moves every output into place (dropped instead, everything the run made is removed).
    pub fn commit(self, out: &Path) -> Result<(), Failure> {
        // The directories only some runs write (`ptemu run`): an earlier run's go.
        let stale_dirs: Vec<&str> = ["threads", "processes", "code"]
            .into_iter()
            .filter(|d| !self.outputs.contains(d))
            .collect();
        self.dir
            .commit_with_dirs(&self.outputs, &self.stale, &stale_dirs)
            .map_err(|e| Failure::input(format!("{}: writing outputs: {e}", out.display())))
    }
}

/// Writes DIR/image.elf (Penn) and DIR/perf.data into the staging directory (spec/perf-data.md);
/// returns the perf command that decodes it.
fn write_perf_data(
    dir: &RunDir,
    opts: &Options,
    outcome: &Outcome,
    plan: &Plan,
    name: &str,
    maps: Vec<ptemu::perf_data::Mapping>,
) -> std::io::Result<String> {
    ptemu::perf_data::write_run(
        dir.staging(),
        &dir.final_path(""),
        opts,
        outcome,
        plan,
        name,
        maps,
    )
}

/// The console summary of a `ptemu simulate` run.
pub(super) fn summary(
    command: &str,
    name: &str,
    a: &RunArgs,
    opts: &Options,
    run: &Outcome,
    r: &SimReport,
    truth: Option<&TruthSummary>,
) -> String {
    let mut text = String::new();
    let o = &mut text;
    let s = &r.stats;
    let layout = r.layout.clone().unwrap_or_else(|| layout_line(a, opts));
    outln!(
        o,
        "ptemu {command}: {name} ({}), cpu {}, {layout}",
        opts.format,
        r.cpu
    );
    outln!(
        o,
        "  IA32_RTIT_CTL {:#x}: {}",
        opts.ctl.bits(),
        CtlDisplay(opts.ctl)
    );
    outln!(
        o,
        "  input: {} records{}, {} events, {} instructions",
        s.records,
        if s.skipped_records > 0 {
            format!(" ({} skipped)", s.skipped_records)
        } else {
            String::new()
        },
        s.events,
        s.instructions
    );
    let packets: Vec<String> = s.packets.iter().map(|(k, n)| format!("{k} {n}")).collect();
    outln!(o, "  packets: {}", packets.join(", "));
    outln!(
        o,
        "  {} TNT bits, {} compressed returns, {} PSB+, {} overflows",
        s.tnt_bits,
        s.compressed_returns,
        s.psbs,
        s.overflows
    );
    if s.ptwrites_off > 0 {
        let how = if opts.layout.cpu.ebx().contains(ptemu::regs::Leaf14Ebx::PTWRITE) {
            "--ctl PTWEn=1 sends their data payloads"
        } else {
            "this CPU has no PTWRITE, CPUID.14H.0:EBX[4]=0: --cpu alderlake has it"
        };
        outln!(
            o,
            "  {} PTWRITE instructions sent no packet: PTWEn=0 ({how})",
            s.ptwrites_off
        );
    }
    outln!(
        o,
        "  bytes: {} generated ({:.3} per instruction), {} written, {} lost{}",
        s.output.bytes_in,
        s.bytes_per_instruction,
        s.output.bytes_written,
        s.output.bytes_lost,
        halt_note(&run.unit)
    );
    write_output_state(o, &run.events, &run.unit, &r.msr);
    let out = &a.out;
    outln!(o, "  files in {}:", out.display());
    match truth.filter(|_| s.trace_bytes != s.stored_bytes) {
        // A consumer-side fault changed what a reader gets: the file is the delivered stream.
        Some(t) => outln!(
            o,
            "    trace.pt      {} bytes (what a reader got of the {} bytes the output unit accepted: faults {})",
            s.trace_bytes,
            s.stored_bytes,
            t.faults().join(", ")
        ),
        None => outln!(
            o,
            "    trace.pt      {} bytes (every byte the output unit accepted)",
            s.trace_bytes
        ),
    }
    let regions: Vec<_> = run.unit.written_regions().collect();
    let names: Vec<String> = regions.iter().map(|&(b, _)| region_file_name(b)).collect();
    outln!(
        o,
        "    regions/      {} file(s): {}",
        regions.len(),
        names.join(" ")
    );
    outln!(o, "    report.json");
    outln!(
        o,
        "    layout.svg    the layout with the run drawn on it (spec/picture.md)"
    );
    if r.perf.is_some() {
        let elf = if run.image.is_some() { ", image.elf" } else { "" };
        outln!(o, "    perf.data{elf}");
    }
    if let Some(t) = truth {
        let c = &t.counts;
        let faults = t.faults();
        outln!(
            o,
            "    {:<13} {} instructions: {} required, {} optional, {} lost, {} undefined{}",
            t.file,
            c.instructions,
            c.required,
            c.optional,
            c.lost,
            c.undefined,
            if faults.is_empty() {
                String::new()
            } else {
                format!(" (faults: {})", faults.join(", "))
            }
        );
    }
    if let Some(img) = &run.image {
        outln!(
            o,
            "    image.bin     {} bytes at {:#x} (image.json)",
            img.bytes.len(),
            img.base
        );
    }
    if let Some(cmd) = &r.ptxed {
        outln!(o, "  replay with libipt's ptxed:");
        outln!(o, "    {cmd}");
    }
    match &r.perf {
        // Without instruction bytes perf has nothing to walk: it would list an error per branch.
        Some(_) if run.image.is_none() && opts.format != ptemu::sources::Format::Qemu => outln!(
            o,
            "  perf.data has no code image: {} input has no instruction bytes, so perf decodes no \
             instruction from it (Penn traces and `ptemu run` programs have them; spec/perf-data.md)",
            opts.format
        ),
        Some(cmd) => {
            outln!(o, "  decode with Linux perf (perf.data, spec/perf-data.md):");
            outln!(o, "    {cmd}");
        }
        None => {}
    }
    text
}

/// The form of the truth `simulate` writes (spec/truth.md TR9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TruthFormat {
    /// `truth.bin`: compact, about a byte an instruction.
    Bin,
    /// `truth.jsonl`: one JSON line a record.
    Jsonl,
}

impl TruthFormat {
    /// The file it is written to in DIR.
    pub fn file(self) -> &'static str {
        match self {
            TruthFormat::Bin => "truth.bin",
            TruthFormat::Jsonl => "truth.jsonl",
        }
    }
}
