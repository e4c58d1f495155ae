//! `ptemu write`.

use super::Failure;
use ptemu::layout::Layout;
use ptemu::regs::msr::IA32_RTIT_CTL;
use ptemu::report::{region_file_name, write_outputs, Report};
use ptemu::{EventKind, OutputUnit, SparseMemory};
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
        print_summary(&layout, &unit, out);
    }
    Ok(())
}

fn print_summary(layout: &Layout, unit: &OutputUnit, out: &Path) {
    let r = Report::of(unit);
    let s = r.stats;
    println!("ptemu write: cpu {}, {:?} output", layout.cpu, layout.scheme);
    println!(
        "  bytes: {} in, {} written, {} lost{}",
        s.bytes_in,
        s.bytes_written,
        s.bytes_lost,
        if unit.registers().status.stopped() {
            " (stopped)"
        } else if unit.registers().status.error() {
            " (operational error)"
        } else {
            ""
        }
    );
    let count = |k| r.events.iter().filter(|e| e.kind == k).count();
    println!(
        "  events: {} PMI, {} wrap, {} stopped, {} error",
        count(EventKind::Pmi),
        count(EventKind::Wrap),
        count(EventKind::Stopped),
        count(EventKind::Error)
    );
    for e in &r.events {
        let place = match (e.table, e.index) {
            (Some(t), Some(i)) => format!("table {t:#x} entry {i:#x}"),
            _ => "range".to_string(),
        };
        let rule = e.rule.map_or(String::new(), |r| format!(" [{r}]"));
        println!(
            "    @{:>10}  {:<8} {place}{rule}",
            e.stream_offset,
            format!("{:?}", e.kind).to_lowercase()
        );
    }
    if let Some(v) = unit.last_violation() {
        println!("  error: {v}");
    }
    let m = r.msr;
    println!("  MSRs after TraceEn=0:");
    println!("    IA32_RTIT_CTL              {:#018x}", m.rtit_ctl);
    println!("    IA32_RTIT_STATUS           {:#018x}", m.rtit_status);
    println!("    IA32_RTIT_OUTPUT_BASE      {:#018x}", m.output_base);
    println!(
        "    IA32_RTIT_OUTPUT_MASK_PTRS {:#018x}  (index/mask {:#x}, offset {:#x})",
        m.output_mask_ptrs,
        (m.output_mask_ptrs >> 7) & 0x1ff_ffff,
        m.output_mask_ptrs >> 32
    );
    println!("    IA32_PERF_GLOBAL_STATUS    {:#018x}", m.perf_global_status);
    let regions: Vec<_> = unit.written_regions().collect();
    println!(
        "  {} region file(s) in {}:",
        regions.len(),
        out.join("regions").display()
    );
    for (base, size) in regions {
        println!("    {} ({} bytes)", region_file_name(base), size);
    }
    println!("  report: {}", out.join("report.json").display());
}
