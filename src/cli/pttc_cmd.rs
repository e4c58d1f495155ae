//! `ptemu pttc FILE.ptt [-o DIR] [--cpu f/m[/s]|none] [--case [--perf-data]] [--layout L]`: libipt's test compiler (spec/pttc.md).
//! Writes `<root>.bin`, `<root>.pt`, the `.exp` and the `.sb` files into DIR (default: the
//! current directory, as pttc), all or none (staged, then renamed into place), and lists them;
//! `--case` adds what makes DIR a case for `ptemu verify` (src/pttc/case.rs), `--perf-data` a
//! perf.data of it, `--layout` the .pt through an output unit as `ptemu write` writes it.

use super::output::{print, write_failure};
use super::Failure;
use ptemu::case::RunDir;
use ptemu::layout::Layout;
use ptemu::pttc::{self, Cpu, Options};
use std::path::{Path, PathBuf};

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
    /// records them, for `perf script -i DIR/perf.data --symfs DIR --itrace=i0nse -F ip`.
    #[arg(long, requires = "case")]
    perf_data: bool,
    /// Also put `<root>.pt` through the output unit programmed from LAYOUT (ToPA or single
    /// range), as `ptemu write` does, into `DIR/<root>-output/` (regions/, report.json,
    /// events.jsonl, layout.svg).
    #[arg(long, value_name = "LAYOUT.toml")]
    layout: Option<PathBuf>,
    /// Replace files of the same names in DIR that ptemu did not write (without it, such a
    /// file is refused and nothing is written; spec/simulate.md SIM22).
    #[arg(long)]
    force: bool,
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
    let mut case = Vec::new();
    let mut case_run = None;
    if args.case {
        let (files, run) = pttc::case_files(&path, &text, &compiled, given)
            .map_err(|e| Failure::input(e.located(&shown)))?;
        case = files;
        case_run = Some(run);
    }
    let files: Vec<&pttc::OutputFile> = compiled.files.iter().chain(&case).collect();
    // A bad layout is refused before anything is written.
    let layout = match &args.layout {
        Some(p) => Some(Layout::load(p).map_err(|e| Failure::input(e.to_string()))?),
        None => None,
    };
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown_out = out.display().to_string();
    let mut names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    // clap makes --perf-data require --case, which gives the run.
    if args.perf_data {
        names.extend(["perf.data", "image.elf"]);
    }
    let output_dir = args
        .layout
        .as_ref()
        .map(|_| format!("{}-output", pttc::file_root(&path_text(&args.file))));
    refuse_collisions(&shown, &out, &names, output_dir.as_deref())?;
    // All files or none: staged in DIR, renamed into place together (the layout's directory
    // with them).
    let dir = RunDir::create_shared(&out, args.force).map_err(|e| write_failure(&shown_out, e))?;
    for f in &files {
        std::fs::write(dir.staged(&f.name), &f.bytes)
            .map_err(|e| write_failure(&format!("{shown_out}/{}", f.name), e))?;
    }
    if let (true, Some(run)) = (args.perf_data, &case_run) {
        perf_data(&dir, &files, &compiled, run).map_err(|e| write_failure(&shown_out, e))?;
    }
    let mut result = Ok(());
    let mut committed: Vec<&str> = names.clone();
    if let (Some(path), Some(layout), Some(name)) = (&args.layout, &layout, &output_dir) {
        let root = pttc::file_root(&path_text(&args.file)).to_string();
        result = super::write_cmd::write_staged(
            path,
            layout,
            &dir.staged(&format!("{root}.pt")),
            &dir.staged(name),
            &out.join(name),
        )?;
        committed.push(name);
    }
    dir.commit(&committed, &[])
        .map_err(|e| write_failure(&shown_out, e))?;
    let mut listing = String::new();
    for name in &committed {
        outln!(listing, "{}", out.join(name).display());
    }
    print(&listing)?;
    result
}

/// Refuses, before anything is written, outputs that would land on one another (`trace.ptt
/// --case`: the test's `trace.pt` is the case's `trace.pt`; `image.ptt --case`: `image.bin`)
/// and outputs whose place in DIR holds what they cannot replace (a directory where a file
/// goes, a file where `<root>-output/` goes). Nothing is removed or overwritten to make room.
fn refuse_collisions(
    shown: &str,
    out: &Path,
    names: &[&str],
    output_dir: Option<&str>,
) -> Result<(), Failure> {
    let mut seen = std::collections::HashSet::new();
    let mut twice: Vec<&str> = Vec::new();
    for name in names.iter().copied().chain(output_dir) {
        if !seen.insert(name) && !twice.contains(&name) {
            twice.push(name);
        }
    }
    if !twice.is_empty() {
        return Err(Failure::input(format!(
            "{shown}: two outputs would be written to the same file ({}): pttc's files are named after the .ptt, --case and --perf-data add trace.pt, image.bin, image.json, case.json, truth.jsonl, perf.data and image.elf; rename the .ptt (nothing was written)",
            twice.join(", ")
        )));
    }
    for name in names {
        let p = out.join(name);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            return Err(Failure::input(format!(
                "{}: is a directory, not replaced by a file (nothing was written)",
                p.display()
            )));
        }
    }
    if let Some(name) = output_dir {
        let p = out.join(name);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| !m.is_dir()) {
            return Err(Failure::input(format!(
                "{}: is not a directory, not replaced by --layout's output directory (nothing was written)",
                p.display()
            )));
        }
    }
    Ok(())
}

fn path_text(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Writes `perf.data` and `image.elf` into the staged `dir` for a `--case` compile: the test's
/// `.pt` as one AUX buffer, its `.bin` as the ELF perf maps at the `org`, the CPU and the
/// address filter of `case.json` (spec/pttc.md).
fn perf_data(
    dir: &RunDir,
    files: &[&pttc::OutputFile],
    compiled: &pttc::Compiled,
    run: &pttc::case::CaseRun,
) -> std::io::Result<()> {
    use ptemu::perf_data::{self, Spec};
    use ptemu::regs::{CpuSignature, RtitCtl};
    let file = |name: &str| files.iter().find(|f| f.name == name).map(|f| &f.bytes[..]);
    let code = file("image.bin").unwrap_or_default();
    let image = perf_data::write_image_elf(dir.staging(), code, compiled.org)?;
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
