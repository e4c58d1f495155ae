//! `ptemu simulate`: a trace through the tracer and the output unit into DIR.

use super::output::print;
use super::summary::{fail_on_operational_error, halt_note, replacing_line, warn_layout, write_output_state};
use super::Failure;
use indicatif::{HumanCount, ProgressBar, ProgressDrawTarget, ProgressStyle};
use ptemu::case::{CaseError, CaseOptions};
use ptemu::layout::Layout;
use ptemu::regs::ctl_text::{apply_assignment, config_msr, parse_value, CtlDisplay};
use ptemu::report::region_file_name;
use ptemu::simulate::fault::{Fault, Plan};
use ptemu::simulate::{self, Options, Outcome, SimReport, TruthSummary};
use ptemu::sources::{Format, Input, ReadOptions};
use ptemu::CpuProfile;
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
    /// END back to the table (`ptemu layout default` prints it); on a CPU whose ToPA takes one
    /// output region (`--cpu broadwell`), one 4 MiB region.
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
    /// Also write DIR/perf.data (and, for Penn input, DIR/image.elf, which perf finds with
    /// `--symfs DIR`) for Linux perf's Intel PT decoder (spec/perf-data.md).
    #[arg(long)]
    pub(super) perf_data: bool,
    /// Output directory.
    #[arg(long)]
    pub(super) out: PathBuf,
    /// Write into an OUT that holds files ptemu did not write: same-named ones are replaced,
    /// nothing else is touched (spec/simulate.md SIM22).
    #[arg(long)]
    pub(super) force: bool,
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
    let case = case_options(&a.run);
    let position = |records| {
        if read.total().is_some() {
            read.consumed()
        } else {
            records
        }
    };
    let mut bar = Bar {
        bar: progress_bar(a.run.quiet || opts.format == Format::Qemu, read.total()),
        position: &position,
    };
    let done = ptemu::case::write(
        &case,
        &opts,
        &name,
        &mut bar,
        |sink, spool, events, progress, _| {
            simulate::run_recording(&opts, input, fetch, sink, spool, events, progress)
        },
        &|_| (Vec::new(), None),
    );
    bar.bar.finish_and_clear();
    let done = done?;
    if !a.run.quiet {
        let mut text = summary(
            "simulate",
            &name,
            &case,
            &opts,
            &done.outcome,
            &done.report,
            done.truth.as_ref(),
        );
        replacing_line(&mut text, &done.staged.replacing(), &a.run.out);
        print(&text)?;
    }
    let unit_result = fail_on_operational_error(&done.outcome.unit);
    done.staged.commit(&a.run.out)?;
    unit_result
}

impl From<CaseError> for Failure {
    fn from(e: CaseError) -> Self {
        match e {
            CaseError::Output(m) => Failure::output(m),
            e => Failure::input(e.to_string()),
        }
    }
}

/// The outputs `simulate` and `run` write, from the options they share.
pub(super) fn case_options(r: &RunArgs) -> CaseOptions {
    CaseOptions::new(&r.out)
        .with_truth((!r.no_truth).then(|| r.truth_format.into()))
        .with_perf_data(r.perf_data)
        .with_plan(plan(r))
        .with_layout_file(r.layout.clone())
        .with_force(r.force)
}

/// The progress bar, told by the simulation: `position` gives its place from the records read.
struct Bar<'a> {
    bar: ProgressBar,
    position: &'a dyn Fn(u64) -> u64,
}

impl ptemu::case::Progress for Bar<'_> {
    fn update(&mut self, records: u64) {
        self.bar.set_message(format!("{} records", HumanCount(records)));
        self.bar.set_position((self.position)(records));
    }

    fn done(&mut self) {
        self.bar.finish_and_clear();
    }
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
    let cpu = match &r.cpu {
        Some(name) => Some(CpuProfile::named(name).map_err(|e| Failure::input(format!("--cpu: {e}")))?),
        None => None,
    };
    let mut layout = match (&r.layout, &cpu) {
        (Some(p), _) => Layout::load(p).map_err(|e| Failure::input(e.to_string()))?,
        // SIM2: the default layout suits the CPU (one ToPA region where it takes only one).
        (None, Some(cpu)) => simulate::default_layout_for(cpu),
        (None, None) => simulate::default_layout(),
    };
    if let Some(cpu) = cpu {
        // SIM5: --cpu replaces the layout's profile (and its maxphyaddr/errata overrides).
        layout.cpu = cpu;
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
    // TR16: with no consumer-side fault, truth.bin is classified as the run goes.
    opts.stream_truth = r.truth_format == TruthFormat::Bin && !plan(r).changes_delivery();
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

/// The console summary of a `ptemu simulate` run.
pub(super) fn summary(
    command: &str,
    name: &str,
    c: &CaseOptions,
    opts: &Options,
    run: &Outcome,
    r: &SimReport,
    truth: Option<&TruthSummary>,
) -> String {
    let mut text = String::new();
    let o = &mut text;
    let s = &r.stats;
    let layout = r.layout.clone().unwrap_or_else(|| c.layout_line(opts));
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
    let skipped = if s.skipped_records > 0 {
        format!(" ({} skipped)", s.skipped_records)
    } else {
        String::new()
    };
    let program = (opts.format == ptemu::sources::Format::Qemu)
        .then(|| r.input.counts.get("instructions").copied())
        .flatten();
    match program {
        // `ptemu run` (issue 54 §2): the program's instructions are the input's count, the
        // truth's and a decoder's; the tracer also steps the kernel's way back that the model
        // adds at each system call and signal, never traced.
        Some(program) if program != s.instructions => outln!(
            o,
            "  input: {} records{skipped}, {} events, {program} instructions of the program; the \
             tracer also stepped {} the model adds around system calls and signals (the \
             kernel's SYSRET or IRET back, a signal's interrupt: never traced), {} in all \
             (report.json stats.instructions)",
            s.records,
            s.events,
            s.instructions.saturating_sub(program),
            s.instructions
        ),
        _ => outln!(
            o,
            "  input: {} records{skipped}, {} events, {} instructions",
            s.records,
            s.events,
            s.instructions
        ),
    }
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
    let out = &c.out;
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
            "    {:<13} {} instructions: {} required, {} optional, {} lost, {} undefined{} (a \
             decoder must give the required ones and may give the optional ones)",
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
    // A decoder can walk this run's code: its image, or a real program's files.
    let decodable = run.image.is_some() || opts.format == ptemu::sources::Format::Qemu;
    match &r.perf {
        // Without instruction bytes perf has nothing to walk: it would list an error per branch.
        Some(_) if !decodable => outln!(
            o,
            "  perf.data has no code image: {} input has no instruction bytes, so perf decodes no \
             instruction from it (Penn traces and `ptemu run` programs have them; spec/perf-data.md)",
            opts.format
        ),
        Some(cmd) => {
            outln!(o, "  decode with Linux perf (perf.data, spec/perf-data.md):");
            outln!(o, "    {cmd}");
        }
        // Issue 54 §4: perf is a first-class path; say how to have it.
        None if decodable => outln!(
            o,
            "  decode with Linux perf: add --perf-data (DIR/perf.data for `perf script`, spec/perf-data.md)"
        ),
        None => {}
    }
    if decodable {
        outln!(
            o,
            "  decode with libipt, no ptxed needed (in ptemu's source tree): cargo run --release \
             --example libipt_decode -- {}",
            std::path::absolute(&c.out)
                .unwrap_or_else(|_| c.out.clone())
                .display()
        );
    }
    if truth.is_some() {
        outln!(
            o,
            "  check a decoder: DECODER ... | ptemu verify {} --ips -",
            c.out.display()
        );
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

impl From<TruthFormat> for ptemu::case::TruthFormat {
    fn from(f: TruthFormat) -> Self {
        match f {
            TruthFormat::Bin => ptemu::case::TruthFormat::Bin,
            TruthFormat::Jsonl => ptemu::case::TruthFormat::Jsonl,
        }
    }
}
