//! `report.json` of `ptemu simulate`: the contract of `ptemu write` (MSRs, events, byte counts)
//! plus what the reader and the tracer counted.

use super::{Options, Outcome};
use crate::output::EventCounts;
use crate::output::{OutputEvent, OutputStats};
use crate::regs::ctl_text::CtlDisplay;
use crate::report::MsrSnapshot;
use serde::Serialize;
use std::collections::BTreeMap;

/// The whole `report.json` of `ptemu simulate`.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// [`crate::report::REPORT_VERSION`].
    pub version: u32,
    /// MSR values after the disabling WRMSR.
    pub msr: MsrSnapshot,
    /// The first output events (PMI, wrap, stopped, error), in order; every one is in
    /// `events.jsonl`.
    pub events: Vec<OutputEvent>,
    /// Every output event, counted by kind.
    pub event_counts: EventCounts,
    /// How many output events there were in all.
    pub events_total: u64,
    /// Counts.
    pub stats: SimStats,
    /// The input as the reader saw it.
    pub input: SourceSummary,
    /// The CPU profile.
    pub cpu: String,
    /// The profile's part (family, model, stepping): what a decoder is told for its errata
    /// workarounds (spec/cpu-profiles.md CP1).
    pub cpu_signature: Option<crate::regs::CpuSignature>,
    /// The run's errata (spec/cpu-profiles.md CP2): the profile's, as edited.
    pub errata: Vec<&'static str>,
    /// How packets were laid out (spec/hardware.md HW1-HW5): the profile's, or the override.
    pub packing: crate::packing::Packing,
    /// Which packets were chosen (spec/hardware.md HW6-HW11): the profile's, or the override.
    pub style: crate::regs::PacketStyle,
    /// IA32_RTIT_CTL as the enabling WRMSR wrote it, and as fields.
    pub ctl: CtlSummary,
    /// The other MSRs written before CTL (ADDRn, CR3_MATCH), as `case.json`'s `run.msrs`: what a
    /// decoder's address-filter configuration comes from (CP4, SKL014).
    pub msrs: Vec<serde_json::Value>,
    /// The code image (Penn input): base and size.
    pub image: Option<ImageSummary>,
    /// The `ptxed` command that replays `trace.pt` over `image.bin`.
    pub ptxed: Option<String>,
    /// How the run went as a process (set by the CLI).
    pub run: Option<RunInfo>,
    /// The layout the run used, in a line: where it came from (its file, `default layout`, or
    /// `the --fault layout` a wrap or stop made) and [`crate::layout::Layout::summary`] (set by
    /// the CLI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// The ground truth's counts and the faults applied (`spec/truth.md`), when it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truth: Option<serde_json::Value>,
    /// The perf command that decodes DIR/perf.data (`--perf-data`, spec/perf-data.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perf: Option<String>,
    /// The traced program of `ptemu run` (spec/qemu.md): command, exit status, the files its
    /// code ran from, what was not traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<serde_json::Value>,
}

/// The process side of a run, for sizing and benchmarks.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RunInfo {
    /// Wall-clock seconds from opening the input to the end of the simulation (before the output
    /// files are written).
    pub seconds: f64,
    /// The process's peak resident set (Linux `VmHWM`), when known.
    pub peak_rss_bytes: Option<u64>,
}

impl RunInfo {
    /// `seconds`, with the peak resident set read now.
    pub fn now(seconds: f64) -> Self {
        RunInfo {
            seconds,
            peak_rss_bytes: peak_rss_bytes(),
        }
    }
}

/// The peak resident set of this process (`VmHWM` in `/proc/self/status`), or `None` where there is
/// no such file.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// IA32_RTIT_CTL of a run.
#[derive(Clone, Debug, Serialize)]
pub struct CtlSummary {
    /// The raw value (serialized as `"0x..."`).
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub value: u64,
    /// Its non-zero fields, `TraceEn=1 BranchEn=1 ...`.
    pub fields: String,
}

/// Where the code image sits.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ImageSummary {
    /// Linear address of `image.bin`'s first byte (serialized as `"0x..."`).
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// The counts in `stats`.
#[derive(Clone, Debug, Serialize)]
pub struct SimStats {
    /// Bytes handed to, written by and lost in the output unit.
    #[serde(flatten)]
    pub output: OutputStats,
    /// Input records read (lines, records or messages), bad ones included.
    pub records: u64,
    /// Bad records skipped (`--lenient`).
    pub skipped_records: u64,
    /// Events the tracer handled.
    pub events: u64,
    /// Instructions among them.
    pub instructions: u64,
    /// Packets generated, by type (non-zero only).
    pub packets: BTreeMap<&'static str, u64>,
    /// TNT bits (conditional branches and compressed returns).
    pub tnt_bits: u64,
    /// Returns sent as a TNT bit.
    pub compressed_returns: u64,
    /// PSB+ sequences.
    pub psbs: u64,
    /// Overflows (OVF packets).
    pub overflows: u64,
    /// PTWRITE instructions that sent no PTW packet because PTWEn was 0.
    pub ptwrites_off: u64,
    /// ToPA PMIs raised.
    pub pmis: u64,
    /// Wraps of the output (W5, R3).
    pub wraps: u64,
    /// Bytes in `trace.pt`: what a reader got (the CLI sets it after consumer-side faults).
    pub trace_bytes: u64,
    /// Bytes the output unit accepted: the stream as stored, before consumer-side faults
    /// (`wrap`, `gap`, `corrupt*`) changed what a reader gets.
    pub stored_bytes: u64,
    /// Generated bytes per instruction.
    pub bytes_per_instruction: f64,
}

/// The reader's view of the input.
#[derive(Clone, Debug, Serialize)]
pub struct SourceSummary {
    /// The format.
    pub format: &'static str,
    /// Format-specific counts (branches by kind, loads, stores, ...).
    pub counts: BTreeMap<&'static str, u64>,
    /// Where the mapping to PT is approximate (`spec/mapping.md`).
    pub approximations: Vec<&'static str>,
}

impl SimReport {
    /// The report of `outcome`, run with `opts`; `ptxed` is the replay command when there is an
    /// image.
    pub fn new(outcome: &Outcome, opts: &Options, ptxed: Option<String>) -> Self {
        let t = &outcome.tracer;
        let unit = &outcome.unit;
        let log = &outcome.events;
        let counts = log.counts();
        SimReport {
            version: crate::report::REPORT_VERSION,
            msr: MsrSnapshot::of(unit),
            events: log.first().to_vec(),
            event_counts: counts,
            events_total: counts.total(),
            stats: SimStats {
                output: unit.stats(),
                records: outcome.source.records,
                skipped_records: outcome.source.skipped,
                events: t.events,
                instructions: t.instructions,
                packets: t.packets_by_name(),
                tnt_bits: t.tnt_bits,
                compressed_returns: t.compressed_returns,
                psbs: t.psbs,
                overflows: t.overflows,
                ptwrites_off: t.ptwrites_off,
                pmis: counts.pmi,
                wraps: counts.wrap,
                trace_bytes: outcome.trace_bytes,
                stored_bytes: outcome.trace_bytes,
                bytes_per_instruction: if t.instructions == 0 {
                    0.0
                } else {
                    t.bytes as f64 / t.instructions as f64
                },
            },
            input: SourceSummary {
                format: outcome.source.format,
                counts: outcome.source.counts.iter().copied().collect(),
                approximations: outcome.source.approximations.clone(),
            },
            cpu: opts.layout.cpu.name.clone(),
            cpu_signature: opts.layout.cpu.signature,
            errata: opts.layout.cpu.errata.ids(),
            packing: opts.tracer.packing_on(&opts.layout.cpu),
            style: opts.tracer.style_on(&opts.layout.cpu),
            msrs: opts.msrs_json(),
            ctl: CtlSummary {
                value: opts.ctl.bits(),
                fields: CtlDisplay(opts.ctl).to_string(),
            },
            image: outcome.image.as_ref().map(|i| ImageSummary {
                base: i.base,
                size: i.bytes.len() as u64,
            }),
            ptxed,
            run: None,
            layout: None,
            truth: None,
            perf: None,
            program: None,
        }
    }
}
