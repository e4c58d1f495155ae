//! `ptemu write`.

use super::output::print;
use super::summary::{halt_note, write_output_state};
use super::Failure;
use ptemu::layout::Layout;
use ptemu::regs::msr::IA32_RTIT_CTL;
use ptemu::report::{region_file_name, write_outputs, Report};
use ptemu::{OutputUnit, SparseMemory};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Size of the slices handed to the output unit.
const CHUNK: usize = 64 << 10;

pub fn run(layout_path: &Path, stream_path: &Path, out: &Path, quiet: bool) -> Result<(), Failure> {
    let layout = Layout::load(layout_path).map_err(|e| Failure::input(e.to_string()))?;
    let mut input: Box<dyn Read> = if stream_path == Path::new("-") {
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
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Failure::input(format!(
                    "{}: read error at byte {offset}: {e}",
                    stream_path.display()
                )))
            }
        };
        unit.write(&mut mem, &buf[..n])
            .map_err(|e| Failure::input(format!("stream byte {offset}: {e}")))?;
        offset += n as u64;
    }
    let ctl = unit.registers().ctl.with_trace_en(false);
    unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits())
        .map_err(|e| Failure::input(format!("disabling tracing: {e}")))?;
    write_outputs(out, &unit, &mem)
        .map_err(|e| Failure::input(format!("{}: writing outputs: {e}", out.display())))?;
    if !quiet {
        print(&summary(&layout, &unit, out))?;
    }
    Ok(())
}

/// The console summary of a `ptemu write` run.
fn summary(layout: &Layout, unit: &OutputUnit, out: &Path) -> String {
    let mut text = String::new();
    let o = &mut text;
    let r = Report::of(unit);
    let s = r.stats;
    outln!(o, "ptemu write: cpu {}, {:?} output", layout.cpu, layout.scheme);
    outln!(
        o,
        "  bytes: {} in, {} written, {} lost{}",
        s.bytes_in,
        s.bytes_written,
        s.bytes_lost,
        halt_note(unit)
    );
    write_output_state(o, &r.events, usize::MAX, unit, &r.msr);
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
    text
}
