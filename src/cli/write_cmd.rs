//! `ptemu write`.

use super::output::print;
use super::summary::{fail_on_operational_error, halt_note, replacing_line, warn_layout, write_output_state};
use super::Failure;
use ptemu::case::RunDir;
use ptemu::event_log::EventLog;
use ptemu::layout::Layout;
use ptemu::picture::Run as PictureRun;
use ptemu::regs::msr::IA32_RTIT_CTL;
use ptemu::report::{region_file_name, write_atomic, write_outputs_with, Report};
use ptemu::{OutputUnit, SparseMemory};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Size of the slices handed to the output unit.
const CHUNK: usize = 64 << 10;

pub fn run(
    layout_path: &Path,
    stream_path: &Path,
    out: &Path,
    force: bool,
    quiet: bool,
) -> Result<(), Failure> {
    let layout = Layout::load(layout_path).map_err(|e| Failure::input(e.to_string()))?;
    let summary = write_stream(layout_path, &layout, stream_path, out, force)?;
    if !quiet {
        print(&summary.0)?;
    }
    summary.1
}

/// `ptemu write` without its console summary, into a directory staged by the caller (`ptemu
/// pttc --layout`, which commits it with its other files): `stream_path` through the output
/// unit programmed from `layout` (read from `layout_path`) into `into`, a directory created here
/// (messages name it `shown`). The outer error is a failure (nothing must be committed); the
/// inner one the command's result once every output is written (exit 1 for an operational
/// error).
pub fn write_staged(
    layout_path: &Path,
    layout: &Layout,
    stream_path: &Path,
    into: &Path,
    shown: &Path,
) -> Result<Result<(), Failure>, Failure> {
    let mut run = Run::start(layout_path, layout, stream_path)?;
    std::fs::create_dir(into)
        .map_err(|e| Failure::input(format!("{}: writing outputs: {e}", shown.display())))?;
    run.write_into(layout, into, shown)?;
    Ok(fail_on_operational_error(&run.unit))
}

/// The outputs `ptemu write` writes into its directory.
const OUTPUTS: [&str; 4] = ["events.jsonl", "regions", "report.json", "layout.svg"];

/// A `ptemu write` run: the stream, and the output unit programmed from the layout.
struct Run {
    check: ptemu::layout::CheckReport,
    input: Box<dyn Read>,
    stream_path: std::path::PathBuf,
    mem: SparseMemory,
    unit: OutputUnit,
    log: EventLog,
}

impl Run {
    /// Logs what `layout check` finds, opens the stream and programs the MSRs.
    fn start(layout_path: &Path, layout: &Layout, stream_path: &Path) -> Result<Run, Failure> {
        let check = warn_layout(layout_path, layout);
        let input: Box<dyn Read> = if stream_path == Path::new("-") {
            Box::new(io::stdin().lock())
        } else {
            let f = File::open(stream_path)
                .map_err(|e| Failure::input(format!("{}: cannot open stream: {e}", stream_path.display())))?;
            Box::new(f)
        };
        let mut mem = SparseMemory::new();
        let mut unit = OutputUnit::new(layout.cpu.clone());
        unit.track_regions(true);
        layout
            .apply(&mut unit, &mut mem)
            .map_err(|e| Failure::input(format!("{}: programming the MSRs: {e}", layout_path.display())))?;
        Ok(Run {
            check,
            input,
            stream_path: stream_path.to_path_buf(),
            mem,
            unit,
            log: EventLog::default(),
        })
    }

    /// Writes the stream through the unit and the outputs into `dir`, which exists (messages
    /// name it `out`); gives the report written.
    fn write_into(&mut self, layout: &Layout, dir: &Path, out: &Path) -> Result<Report, Failure> {
        let out_error = |e: io::Error| Failure::input(format!("{}: writing outputs: {e}", out.display()));
        let events_file = File::create(dir.join("events.jsonl")).map_err(out_error)?;
        let mut log = EventLog::default().streaming_to(io::BufWriter::new(events_file));
        let mut buf = vec![0u8; CHUNK];
        let mut offset = 0u64;
        let (unit, mem) = (&mut self.unit, &mut self.mem);
        loop {
            let n = match self.input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Failure::input(format!(
                        "{}: read error at byte {offset}: {e}",
                        self.stream_path.display()
                    )))
                }
            };
            unit.write(mem, &buf[..n])
                .map_err(|e| Failure::input(format!("stream byte {offset}: {e}")))?;
            log.absorb(unit).map_err(out_error)?;
            offset += n as u64;
        }
        let ctl = unit.registers().ctl.with_trace_en(false);
        unit.wrmsr(mem, IA32_RTIT_CTL, ctl.bits())
            .map_err(|e| Failure::input(format!("disabling tracing: {e}")))?;
        log.absorb(unit).and_then(|()| log.flush()).map_err(out_error)?;
        let report = Report::with_log(unit, &log);
        let picture = ptemu::picture::run_svg(layout, &self.check, &PictureRun::of(&report));
        write_outputs_with(dir, unit, mem, &report)
            .and_then(|()| write_atomic(&dir.join("layout.svg"), |w| w.write_all(picture.as_bytes())))
            .map_err(out_error)?;
        self.log = log;
        Ok(report)
    }
}

/// Writes `out`; gives the console summary and the command's result after it (an operational
/// error is exit 1 once every output is written).
fn write_stream(
    layout_path: &Path,
    layout: &Layout,
    stream_path: &Path,
    out: &Path,
    force: bool,
) -> Result<(String, Result<(), Failure>), Failure> {
    let mut run = Run::start(layout_path, layout, stream_path)?;
    let out_error = |e: io::Error| Failure::input(format!("{}: writing outputs: {e}", out.display()));
    let dir = RunDir::create(out, force).map_err(out_error)?;
    let report = run.write_into(layout, dir.staging(), out)?;
    let replacing = dir.replacing(&OUTPUTS, &[], &[]);
    dir.commit(&OUTPUTS, &[]).map_err(out_error)?;
    let mut text = summary(layout, &run.unit, &run.log, &report, out);
    replacing_line(&mut text, &replacing, out);
    Ok((text, fail_on_operational_error(&run.unit)))
}

/// The console summary of a `ptemu write` run.
fn summary(layout: &Layout, unit: &OutputUnit, log: &EventLog, r: &Report, out: &Path) -> String {
    let mut text = String::new();
    let o = &mut text;
    let s = r.stats;
    outln!(o, "ptemu write: cpu {}, {} output", layout.cpu, layout.scheme);
    outln!(
        o,
        "  bytes: {} in, {} written, {} lost{}",
        s.bytes_in,
        s.bytes_written,
        s.bytes_lost,
        halt_note(unit)
    );
    write_output_state(o, log, unit, &r.msr);
    let regions: Vec<_> = unit.written_regions().collect();
    outln!(
        o,
        "  {} region file(s) in {}:",
        regions.len(),
        out.join("regions").display()
    );
    for (base, size) in regions {
        outln!(o, "    {} ({} bytes)", region_file_name(base), size);
    }
    outln!(o, "  report: {}", out.join("report.json").display());
    outln!(o, "  picture: {}", out.join("layout.svg").display());
    text
}
