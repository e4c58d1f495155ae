//! `ptemu pttc FILE.ptt [-o DIR] [--cpu f/m[/s]|none] [--case [--perf-data]] [--layout L]`: libipt's test compiler (spec/pttc.md).
//! Writes `<root>.bin`, `<root>.pt`, the `.exp` and the `.sb` files into DIR (default: the
//! current directory, as pttc), all or none (staged, then renamed into place), and lists them;
//! `--case` adds what makes DIR a case for `ptemu verify` (src/pttc/case.rs), `--perf-data` a
//! perf.data of it, `--layout` the .pt through an output unit as `ptemu write` writes it.

use super::output::{print, write_failure};
use super::run_dir::RunDir;
use super::Failure;
use ptemu::layout::Layout;
use ptemu::pttc::{self, Cpu, Options};
use std::path::PathBuf;

/// The arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The .ptt file.
    file: PathBuf,
    /// Where to write the files (default: the current directory, as pttc).
    #[arg(short, long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The CPU as family/model[/stepping] (numbers as C reads them: decimal, 0x hex, 0 octal), or `none`: adds `-cpu_<f>_<m>[_<s>]` to the
    /// .exp file names, as pttc's --cpu does.
    #[arg(long, value_name = "f/m[/s]|none")]
    cpu: Option<String>,
    /// Also write what makes DIR a case for `ptemu verify` and the libipt harness: trace.pt,
    /// image.bin, image.json, case.json and truth.jsonl (from the .exp(ptxed) section).
    #[arg(long)]
    case: bool,
    /// With --case: also write perf.data and image.elf, the test's trace and code as perf
    /// records them, for `perf script -i DIR/perf.data --itrace=i0nse -F ip`.
    #[arg(long, requires = "case")]
    perf_data: bool,
    /// Also put `<root>.pt` through the output unit programmed from LAYOUT (ToPA or single
    /// range), as `ptemu write` does, into `DIR/<root>-output/` (regions/, report.json,
    /// events.jsonl, layout.svg).
    #[arg(long, value_name = "LAYOUT.toml")]
    layout: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<(), Failure> {
    let shown = args.file.display().to_string();
    let given = match args.cpu.as_deref() {
        None => None,
        Some("none") => Some(None),
        Some(c) => Some(Some(Cpu::parse(c).map_err(Failure::input)?)),
    };
    let cpu = given.flatten();
    let bytes =
        std::fs::read(&args.file).map_err(|e| Failure::input(format!("{shown}: cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        Failure::input(format!("{shown}:{line}: not UTF-8 text"))
    })?;
    let path = args.file.to_string_lossy();
    let compiled =
        pttc::compile(&path, &text, &Options { cpu }).map_err(|e| Failure::input(e.located(&shown)))?;
    let mut files = compiled.files.clone();
    let mut case_run = None;
    if args.case {
        let (case, run) = pttc::case_files(&path, &text, &compiled, given)
            .map_err(|e| Failure::input(e.located(&shown)))?;
        files.extend(case);
        case_run = Some(run);
    }
    // A bad layout is refused before anything is written.
    let layout = match &args.layout {
        Some(p) => Some(Layout::load(p).map_err(|e| Failure::input(e.to_string()))?),
        None => None,
    };
    // All files or none: staged in DIR, renamed into place together.
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown_out = out.display().to_string();
    let dir = RunDir::create(&out).map_err(|e| write_failure(&shown_out, e))?;
    for f in &files {
        std::fs::write(dir.staged(&f.name), &f.bytes)
            .map_err(|e| write_failure(&format!("{shown_out}/{}", f.name), e))?;
    }
    let mut names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    // clap makes --perf-data require --case, which gives the run.
    if let (true, Some(run)) = (args.perf_data, &case_run) {
        perf_data(&dir, &files, &compiled, run).map_err(|e| write_failure(&shown_out, e))?;
        names.extend(["perf.data", "image.elf"]);
    }
    dir.commit(&names, &[])
        .map_err(|e| write_failure(&shown_out, e))?;
    let mut listing = String::new();
    for name in &names {
        outln!(listing, "{}", out.join(name).display());
    }
    print(&listing)?;
    match (&args.layout, layout) {
        (Some(path), Some(layout)) => {
            let root = pttc::file_root(&path_text(&args.file)).to_string();
            let output = out.join(format!("{root}-output"));
            let result =
                super::write_cmd::write_through(path, &layout, &out.join(format!("{root}.pt")), &output);
            print(&format!("{}\n", output.display()))?;
            result
        }
        _ => Ok(()),
    }
}

fn path_text(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Writes `perf.data` and `image.elf` into the staged `dir` for a `--case` compile: the test's
/// `.pt` as one AUX buffer, its `.bin` as the ELF perf maps at the `org`, the CPU and the
/// address filter of `case.json` (spec/pttc.md).
fn perf_data(
    dir: &RunDir,
    files: &[pttc::OutputFile],
    compiled: &pttc::Compiled,
    run: &pttc::case::CaseRun,
) -> std::io::Result<()> {
    use ptemu::perf_data::{self, Spec};
    use ptemu::regs::{CpuSignature, RtitCtl};
    let file = |name: &str| files.iter().find(|f| f.name == name).map(|f| &f.bytes[..]);
    let code = file("image.bin").unwrap_or_default();
    let image = perf_data::write_image_elf(dir.staging(), &dir.final_path(""), code, compiled.org)?;
    let ctl = RtitCtl::from(run.ctl)
        .with_trace_en(true)
        .with_branch_en(true)
        .with_user(true)
        .with_os(true);
    let spec = Spec {
        filter: perf_data::filter_string(ctl, &run.msrs, &image),
        ctl,
        tsc_ctc: (1, 1),
        max_nonturbo_ratio: 1,
        pid: 1000,
        threads: Vec::new(),
        comm: run.name.chars().take(15).collect(),
        image: Some(image),
        maps: Vec::new(),
        start_tsc: 0,
        cpu: run.cpu.map(|c| CpuSignature {
            family: c.family,
            model: c.model,
            stepping: c.stepping,
        }),
    };
    let trace = file("trace.pt").unwrap_or_default();
    let mut w = std::io::BufWriter::new(std::fs::File::create(dir.staged("perf.data"))?);
    perf_data::write(
        &spec,
        &mut &trace[..],
        &perf_data::chunks(trace.len() as u64, &[]),
        &mut w,
    )?;
    std::io::Write::flush(&mut w)
}
