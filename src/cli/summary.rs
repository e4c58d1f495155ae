//! The parts of the console summary that `ptemu write` and `ptemu simulate` share.

use super::Failure;
use ptemu::event_log::EventLog;
use ptemu::layout::{CheckReport, Layout};
use ptemu::regs::RtitCtl;
use ptemu::report::MsrSnapshot;
use ptemu::OutputUnit;
use std::path::Path;

/// The output events a summary lists one by one, in `write` and `simulate` alike; the rest are
/// counted, and all are in `events.jsonl`.
pub const LISTED_EVENTS: usize = 8;

/// Appends to `o` the output events by kind and the first [`LISTED_EVENTS`] of them, the
/// operational error if any, and the MSRs after TraceEn=0.
pub fn write_output_state(o: &mut String, log: &EventLog, unit: &OutputUnit, m: &MsrSnapshot) {
    let counts = log.counts();
    // A wrap event (W5, R3) is named only when there is one, beside the laps: an END ring comes
    // round without one, and "0 wrap" beside "4 laps" reads as a contradiction.
    let wraps = match counts.wrap {
        0 => String::new(),
        1 => ", 1 wrap-around of the walk (W5, R3)".to_string(),
        n => format!(", {n} wrap-arounds of the walk (W5, R3)"),
    };
    outln!(
        o,
        "  output events: {} PMI, {} stopped, {} error{wraps}",
        counts.pmi,
        counts.stopped,
        counts.error
    );
    let stats = unit.stats();
    if stats.bytes_overwritten > 0 {
        outln!(
            o,
            "  the regions hold {} bytes of the stream; {} older bytes were overwritten ({} lap{})",
            stats.bytes_written - stats.bytes_overwritten,
            stats.bytes_overwritten,
            stats.laps,
            if stats.laps == 1 { "" } else { "s" }
        );
    }
    for e in log.first().iter().take(LISTED_EVENTS) {
        let place = match (e.table, e.index) {
            (Some(t), Some(i)) => format!("table {t:#x} entry {i:#x}"),
            _ => "range".to_string(),
        };
        let rule = e.rule.map_or(String::new(), |r| format!(" [{r}]"));
        outln!(
            o,
            "    @{:>10}  {:<8} {place}{rule}",
            e.stream_offset,
            format!("{:?}", e.kind).to_lowercase()
        );
    }
    let shown = log.first().len().min(LISTED_EVENTS) as u64;
    if counts.total() > shown {
        outln!(o, "    ... {} more in events.jsonl", counts.total() - shown);
    }
    if let Some(v) = unit.last_violation() {
        outln!(o, "  error: {v}");
    }
    outln!(o, "  MSRs after TraceEn=0:");
    outln!(o, "    IA32_RTIT_CTL              {:#018x}", m.rtit_ctl);
    outln!(o, "    IA32_RTIT_STATUS           {:#018x}", m.rtit_status);
    outln!(o, "    IA32_RTIT_OUTPUT_BASE      {:#018x}", m.output_base);
    let ptrs = m.output_mask_ptrs;
    let fields = if RtitCtl::from(m.rtit_ctl).topa() {
        format!("table index {:#x}", (ptrs >> 7) & 0x1ff_ffff)
    } else {
        format!("range mask {:#x}", ptrs & 0xffff_ffff | 0x7f)
    };
    outln!(
        o,
        "    IA32_RTIT_OUTPUT_MASK_PTRS {ptrs:#018x}  ({fields}, offset {:#x})",
        ptrs >> 32
    );
    outln!(o, "    IA32_PERF_GLOBAL_STATUS    {:#018x}", m.perf_global_status);
}

/// How the unit stopped, for the bytes line: " (stopped)", " (operational error)" or nothing.
pub fn halt_note(unit: &OutputUnit) -> &'static str {
    let status = unit.registers().status;
    if status.stopped() {
        " (stopped)"
    } else if status.error() {
        " (operational error)"
    } else {
        ""
    }
}

/// Logs what `layout check` finds in the layout file at `path` before a run: the operational
/// errors its walk will meet and the likely mistakes (output over a table, a walk into unlisted
/// memory). #GP faults are not repeated: programming the layout reports them. Returns the
/// check's report, for the picture of the run.
pub fn warn_layout(path: &Path, layout: &Layout) -> CheckReport {
    let report = ptemu::layout::check(layout);
    for v in &report.violations {
        tracing::warn!("{}: operational error if reached: {v}", path.display());
    }
    for w in &report.warnings {
        tracing::warn!("{}: {w}", path.display());
    }
    report
}

/// Exit code 1 for a run the output unit ended in an operational error (STATUS.Error set): the
/// outputs are written, and the error is what the run found (README, exit codes).
pub fn fail_on_operational_error(unit: &OutputUnit) -> Result<(), Failure> {
    match unit.last_violation() {
        Some(v) if unit.registers().status.error() => Err(Failure::found(format!(
            "output stopped by an operational error: {v}"
        ))),
        _ => Ok(()),
    }
}

/// SIM22: the summary's line saying what the commit into `dir` replaces and removes, if it
/// replaces or removes anything (`simulate`, `run`, `write` and `corpus` end with it).
pub fn replacing_line(o: &mut String, r: &ptemu::case::Replacing, dir: &Path) {
    if let Some(line) = r.line(dir) {
        o.push_str(&format!("  {line}\n"));
    }
}
