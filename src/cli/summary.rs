//! The parts of the console summary that `ptemu write` and `ptemu simulate` share.

use ptemu::event_log::EventLog;
use ptemu::report::MsrSnapshot;
use ptemu::OutputUnit;

/// Appends to `o` the output events by kind and the first `listed` of them, the operational error
/// if any, and the MSRs after TraceEn=0.
pub fn write_output_state(o: &mut String, log: &EventLog, listed: usize, unit: &OutputUnit, m: &MsrSnapshot) {
    let counts = log.counts();
    outln!(
        o,
        "  output events: {} PMI, {} wrap, {} stopped, {} error",
        counts.pmi,
        counts.wrap,
        counts.stopped,
        counts.error
    );
    for e in log.first().iter().take(listed) {
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
    let shown = log.first().len().min(listed) as u64;
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
    outln!(
        o,
        "    IA32_RTIT_OUTPUT_MASK_PTRS {:#018x}  (index/mask {:#x}, offset {:#x})",
        m.output_mask_ptrs,
        (m.output_mask_ptrs >> 7) & 0x1ff_ffff,
        m.output_mask_ptrs >> 32
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
