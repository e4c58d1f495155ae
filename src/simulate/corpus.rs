//! `ptemu corpus`: a ready decoder test suite (`spec/truth.md`, CORP rules). Every case is one
//! simulation of a generated Penn trace (the bundled sjeng sample, the Penn trace with
//! interrupts, or a hand-made BYU program: [`CaseInput`]) with its CTL settings, packet style and
//! faults; each case directory holds what a decoder needs and the answer it must give.

pub mod inputs;

use super::fault::{Fault, Plan};
use super::{finish_truth, Options, SimError};
use crate::event_log::EventLog;
use crate::image::CodeImage;
use crate::layout::Layout;
use crate::packet::{Packet, PacketDecoder};
use crate::regs::ctl_text::{apply_assignment, config_msr};
use crate::regs::CpuProfile;
use crate::sources::{Format, Input, ReadOptions};
use crate::tracer::{Backpressure, TracerConfig};
use crate::truth::Cause;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Micro-op records of the generated Penn input every case but `clean-sjeng` runs on (about
/// 13 KB of trace: enough for 4 KiB wraps, STOPs and gaps).
pub const RECORDS: u64 = 150_000;

/// The layout of the `gap` cases: sixteen 4 KiB regions with INT, END back to the table.
pub const GAP_LAYOUT: &str = include_str!("gap-layout.toml");

/// The bundled sjeng sample (tests/data/penn/SOURCE.md).
const SJENG: &[u8] = include_bytes!("../../tests/data/penn/sjeng-1K.trace");

/// Loops of the BYU program ([`inputs::byu_program`]) of the `*-power` cases.
pub const BYU_LOOPS: u64 = 3000;

/// Page faults in the Kaplan trace of the `*-page-faults` cases ([`inputs::kaplan_faults`]).
pub const KAPLAN_FAULTS: u64 = 400;

/// A macro-op in about this many is left out of the generated Penn trace of the
/// `*-interrupts` cases ([`inputs::penn_with_interrupts`]).
pub const INTERRUPT_EVERY: u64 = 400;

/// Micro-op lines of the generated Penn trace the clean cases and the faults under other packet
/// styles run on ([`CaseSpec::records`]): about 27,000 instructions, enough for 4 KiB wraps,
/// STOPs and gaps, and a quarter of the time.
pub const SHORT: u64 = 40_000;

/// The first `records` micro-op lines of the Penn trace `penn`, and a few more up to the next
/// instruction, so that its last instruction is whole.
pub fn penn_prefix(penn: &[u8], records: u64) -> &[u8] {
    let mut at = 0;
    for (i, line) in penn.split_inclusive(|&b| b == b'\n').enumerate() {
        if i as u64 >= records && line.starts_with(b"1 ") {
            break;
        }
        at += line.len();
    }
    &penn[..at]
}

/// What a case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseInput {
    /// The generated Penn trace ([`input`]).
    Penn,
    /// The bundled sjeng-1K sample (a real Penn trace).
    Sjeng,
    /// The generated Penn trace with a macro-op left out every [`INTERRUPT_EVERY`] or so, read
    /// with `--lenient`: each break is an asynchronous transfer, FUP + TIP (an interrupt).
    PennInterrupts,
    /// The BYU bus trace of [`inputs::byu_program`]: 32-bit code at CPL 0 with interrupts,
    /// IRETs and HLTs, and its code image.
    ByuProgram,
    /// The Kaplan page-fault trace of [`inputs::kaplan_faults`], read with `--lenient`: 32-bit
    /// code whose page faults a handler logs with PTWRITE, and its code image.
    KaplanFaults,
}

/// One case of the corpus.
#[derive(Clone, Debug)]
pub struct CaseSpec {
    /// Directory name.
    pub name: String,
    /// What it checks, in a sentence.
    pub about: &'static str,
    /// IA32_RTIT_CTL assignments on top of simulate's default (SIM1).
    pub ctl: Vec<&'static str>,
    /// Other MSRs (`NAME=VALUE`).
    pub msrs: Vec<&'static str>,
    /// The CPU profile.
    pub cpu: &'static str,
    /// The faults.
    pub faults: Vec<Fault>,
    /// The input.
    pub input: CaseInput,
    /// Use [`GAP_LAYOUT`].
    pub small_regions: bool,
    /// Tracer settings (`--tracer-config`): long TNT.
    pub tracer: TracerConfig,
    /// ADDR0 is one byte at the function entry the input reaches last for the first time (up
    /// to 90% of the run), for an `ADDR0_CFG=2` TraceStop late in the trace.
    pub addr0_at_late_ip: bool,
    /// Run on the first this many micro-op lines of the generated Penn trace (cut at an
    /// instruction boundary) instead of all [`RECORDS`]: the cases that need no long stream.
    pub records: Option<u64>,
    /// Edits to the profile's errata, as `--errata` takes them (CP2); empty: the profile's.
    pub errata: &'static str,
    /// Cut the AUX buffers inside packets on purpose (PD13, `aux-split`): `case.json`'s
    /// `aux_cuts` names the offsets, and perf.data's AUXTRACE records split there.
    pub split_aux: bool,
}

impl CaseSpec {
    /// A clean run of the generated Penn trace on Alder Lake with simulate's default CTL.
    pub fn new(name: impl Into<String>, about: &'static str) -> Self {
        CaseSpec {
            name: name.into(),
            about,
            ctl: vec![],
            msrs: vec![],
            cpu: "alderlake",
            faults: vec![],
            input: CaseInput::Penn,
            small_regions: false,
            tracer: TracerConfig::default(),
            addr0_at_late_ip: false,
            records: None,
            errata: "",
            split_aux: false,
        }
    }
}

fn fault(kind: Cause, at: Option<u64>) -> Fault {
    Fault { kind, at }
}

/// The cases for `seed` (CORP1): clean runs over CTL settings, CPU styles and inputs that make
/// every packet kind of [`covered_kinds`], then every fault kind at two or more positions
/// drawn from the seed, every fault kind under the Skylake and the SDM packet style with other
/// CTL settings, and faults combined with interrupts, long TNTs and power events.
pub fn cases(seed: u64) -> Vec<CaseSpec> {
    let mut rng = crate::sources::rng::GenRng::new(seed ^ 0xc0_4b05);
    let clean = |name: &str, about, ctl: &[&'static str], cpu| CaseSpec {
        ctl: ctl.to_vec(),
        cpu,
        records: Some(SHORT),
        ..CaseSpec::new(name, about)
    };
    let long_tnt = TracerConfig::default().with_long_tnt(true);
    let mut v = vec![
        clean(
            "clean-default",
            "simulate's default CTL: TraceEn BranchEn User TSCEn ToPA, RET compression on",
            &[],
            "alderlake",
        ),
        clean(
            "clean-no-retc",
            "DisRETC=1: every RET sends a TIP",
            &["DisRETC=1"],
            "alderlake",
        ),
        clean(
            "clean-psbfreq",
            "PSBFreq=3: a PSB+ every 16 KiB instead of 2 KiB",
            &["PSBFreq=3"],
            "alderlake",
        ),
        clean(
            "clean-no-tsc",
            "TSCEn=0: no TSC in PSB+",
            &["TSCEn=0"],
            "alderlake",
        ),
        clean(
            "clean-mtc",
            "MTCEn=1 MTCFreq=3: MTC packets between the others",
            &["MTCEn=1", "MTCFreq=3"],
            "alderlake",
        ),
        clean(
            "clean-cyc",
            "CYCEn=1 with MTC: CYC before TNT and TIP",
            &["CYCEn=1", "MTCEn=1", "MTCFreq=3"],
            "alderlake",
        ),
        clean(
            "clean-ptwrite",
            "PTWEn=1 FUPonPTW=1: the Penn reader's PTWRITEs (spec/mapping.md) send PTW, each with a FUP",
            &["PTWEn=1", "FUPonPTW=1"],
            "alderlake",
        ),
        clean("clean-skylake", "Skylake's packet style and PADs", &[], "skylake"),
        clean("clean-sdm", "the SDM's packet style, no PADs", &[], "generic-max"),
        CaseSpec {
            msrs: vec!["ADDR0_A=0x400000", "ADDR0_B=0x402fff"],
            ..clean(
                "clean-ip-filter",
                "ADDR0_CFG=1 over part of the code: TIP.PGD and TIP.PGE as the flow leaves and enters",
                &["ADDR0_CFG=1"],
                "alderlake",
            )
        },
        CaseSpec {
            input: CaseInput::Sjeng,
            ..clean(
                "clean-sjeng",
                "the bundled sjeng-1K sample (a real Penn trace)",
                &[],
                "alderlake",
            )
        },
        CaseSpec {
            tracer: long_tnt.clone(),
            ..clean(
                "clean-long-tnt",
                "long TNT (tracer setting long_tnt): TNT-64 packets of up to 47 outcomes",
                &[],
                "alderlake",
            )
        },
        CaseSpec {
            addr0_at_late_ip: true,
            ..clean(
                "clean-tracestop",
                "ADDR0_CFG=2: a TraceStop where the flow first calls a late function; nothing after it",
                &["ADDR0_CFG=2"],
                "alderlake",
            )
        },
        CaseSpec {
            input: CaseInput::PennInterrupts,
            ..clean(
                "clean-interrupts",
                "interrupts in user code (the Penn trace with breaks, --lenient) under Event Trace: CFE, FUP and TIP",
                &["EventEn=1"],
                "generic-max",
            )
        },
        CaseSpec {
            input: CaseInput::ByuProgram,
            ..clean(
                "clean-power",
                "32-bit code at CPL 0 (a BYU bus trace) with interrupts, IRETs and HLTs: MODE.Exec 32-bit, PIP, CFE, PWRE, EXSTOP, PWRX",
                &["PwrEvtEn=1", "EventEn=1"],
                "generic-max",
            )
        },
        CaseSpec {
            input: CaseInput::KaplanFaults,
            ..clean(
                "clean-page-faults",
                "32-bit page faults (a Kaplan trace) under Event Trace, the handler logging with PTWRITE: EVD, CFE, PTW, PIP",
                &["OS=1", "EventEn=1", "PTWEn=1"],
                "generic-max",
            )
        },
    ];
    let faulty = |name: String, about, faults: Vec<Fault>| CaseSpec {
        faults,
        ..CaseSpec::new(name, about)
    };
    for i in 0..2 {
        let at = 1000 + rng.below(60_000);
        v.push(faulty(
            format!("ovf-{}", i + 1),
            "an internal buffer overflow: OVF, then the flow resumes",
            vec![fault(Cause::Ovf, Some(at))],
        ));
    }
    let (a, b) = (1000 + rng.below(30_000), 40_000 + rng.below(40_000));
    v.push(faulty(
        "ovf-twice".into(),
        "two overflows",
        vec![fault(Cause::Ovf, Some(a)), fault(Cause::Ovf, Some(b))],
    ));
    for size in [4096u64, 8192] {
        v.push(faulty(
            format!("wrap-{}k", size / 1024),
            "a circular buffer overwritten before it was read: sync at the first surviving PSB",
            vec![fault(Cause::Wrap, Some(size))],
        ));
        v.push(faulty(
            format!("stop-{}k", size / 1024),
            "a ToPA STOP region filled: the trace ends at the region's end, inside a packet only if one straddles it",
            vec![fault(Cause::Stop, Some(size))],
        ));
    }
    for n in [1u64, 2] {
        v.push(CaseSpec {
            small_regions: true,
            ..faulty(
                format!("gap-{n}"),
                "a consumer missed a PMI: one 4 KiB region's bytes are missing",
                vec![fault(Cause::Gap, Some(n))],
            )
        });
    }
    for i in 0..2 {
        let at = 500 + rng.below(10_000);
        v.push(faulty(
            format!("corrupt-{}", i + 1),
            "bytes that cannot decode: report an error, resync at the next PSB",
            vec![fault(Cause::Corrupt, Some(at))],
        ));
        let at = 500 + rng.below(10_000);
        v.push(faulty(
            format!("corrupt-silent-{}", i + 1),
            "a TNT bit flipped: the stream decodes, wrongly, up to the next PSB",
            vec![fault(Cause::CorruptSilent, Some(at))],
        ));
    }
    let (o, c) = (1000 + rng.below(20_000), 6000 + rng.below(4000));
    v.push(faulty(
        "ovf-and-corrupt".into(),
        "an overflow and, later, undecodable bytes",
        vec![fault(Cause::Ovf, Some(o)), fault(Cause::Corrupt, Some(c))],
    ));
    // Every fault under the two other packet styles, each with CTL settings of its own: Skylake
    // (PADs, OVF then PSB+) without RET compression, the SDM's (no PADs, OVF then FUP) with MTC
    // and CYC; on the shorter input, so 4 KiB buffers.
    let short = |spec: CaseSpec| CaseSpec {
        records: Some(SHORT),
        ..spec
    };
    for (style, cpu, ctl) in [
        ("skylake", "skylake", &["DisRETC=1"][..]),
        ("sdm", "generic-max", &["MTCEn=1", "MTCFreq=3", "CYCEn=1"][..]),
    ] {
        let mut styled = |kind: Cause, at: Option<u64>, about: &'static str| {
            v.push(short(CaseSpec {
                cpu,
                ctl: ctl.to_vec(),
                small_regions: kind == Cause::Gap,
                ..faulty(format!("{}-{style}", kind.name()), about, vec![fault(kind, at)])
            }));
        };
        styled(
            Cause::Ovf,
            Some(1000 + rng.below(20_000)),
            "an overflow under another packet style and CTL",
        );
        styled(
            Cause::Wrap,
            Some(4096),
            "a 4 KiB circular buffer under another packet style and CTL",
        );
        styled(
            Cause::Stop,
            Some(4096),
            "a 4 KiB STOP region under another packet style and CTL",
        );
        styled(
            Cause::Gap,
            Some(1),
            "a missed PMI under another packet style and CTL",
        );
        styled(
            Cause::Corrupt,
            Some(500 + rng.below(3000)),
            "undecodable bytes under another packet style and CTL",
        );
        styled(
            Cause::CorruptSilent,
            Some(500 + rng.below(3000)),
            "a flipped TNT bit under another packet style and CTL",
        );
    }
    // Faults together with the packets of the clean cases above.
    v.push(short(CaseSpec {
        input: CaseInput::PennInterrupts,
        cpu: "generic-max",
        ctl: vec!["EventEn=1"],
        ..faulty(
            "ovf-interrupts".into(),
            "an overflow among interrupts under Event Trace",
            vec![fault(Cause::Ovf, Some(1000 + rng.below(20_000)))],
        )
    }));
    v.push(short(CaseSpec {
        tracer: long_tnt,
        ..faulty(
            "corrupt-long-tnt".into(),
            "undecodable bytes in a trace of long TNTs",
            vec![fault(Cause::Corrupt, Some(500 + rng.below(3000)))],
        )
    }));
    v.push(CaseSpec {
        input: CaseInput::ByuProgram,
        cpu: "generic-max",
        ctl: vec!["PwrEvtEn=1", "EventEn=1"],
        ..faulty(
            "ovf-power".into(),
            "an overflow in 32-bit code with interrupts, HLTs and power events",
            vec![fault(Cause::Ovf, Some(500 + rng.below(5_000)))],
        )
    });
    v.extend(erratum_cases());
    // Last, drawing nothing from the seed: the cases before it keep their bytes.
    v.push(CaseSpec {
        split_aux: true,
        records: Some(SHORT),
        ..CaseSpec::new(
            "aux-split",
            "a clean stream whose AUX buffers (perf.data, case.json's aux_cuts) are cut inside a PSB, a FUP, a TIP and a TSC: a decoder fed buffer by buffer must join them (perf 6.1 does not)",
        )
    });
    v
}

/// One case per erratum ptemu produces (spec/cpu-profiles.md, CP3-CP6), each on a profile
/// that has it and with only that erratum on, so its shape is the only one in the stream: a
/// decoder told the part (`case.json`'s `cpu`, `cpu_signature`, `errata`) must pass them.
fn erratum_cases() -> Vec<CaseSpec> {
    let filter = |spec: CaseSpec| CaseSpec {
        ctl: vec!["ADDR0_CFG=1"],
        msrs: vec!["ADDR0_A=0x400000", "ADDR0_B=0x403fff"],
        ..spec
    };
    let erratum = |name: &str, about, cpu, errata| CaseSpec {
        cpu,
        errata,
        records: Some(SHORT),
        ..CaseSpec::new(name, about)
    };
    // Forced overflows every 437 instructions, most resolving while the flow is outside ADDR0.
    let overflows: Vec<u64> = (300..13_000).step_by(437).collect();
    vec![
        erratum(
            "erratum-bdm70",
            "BDM70 on Broadwell: each enable's PSB+ holds MODE.Exec and a FUP, which leaves no last IP (libipt and perf skip it)",
            "broadwell",
            "none,BDM70",
        ),
        filter(erratum(
            "erratum-skl014",
            "SKL014 on Skylake: a direct JMP or CALL that leaves the ADDR0 filter sends TIP.PGD without an IP",
            "skylake",
            "none,SKL014",
        )),
        CaseSpec {
            // Never overflows by itself; forced full late, it drains too slowly to recover.
            tracer: TracerConfig::default()
                .with_overflow(Some(Backpressure::new(4096, 1, 16)))
                .with_overflow_at(vec![20_000]),
            ..erratum(
                "erratum-apl11",
                "APL11 on Goldmont: an overflow still on when tracing stops ends with OVF, then TIP.PGD (perf 6.1 has no workaround)",
                "goldmont",
                "none,APL11",
            )
        },
        CaseSpec {
            tracer: TracerConfig::default().with_overflow_at(overflows),
            ..filter(erratum(
                "erratum-apl12",
                "APL12 on Goldmont: an overflow that resolves outside the ADDR0 filter is followed by a FUP (perf 6.1 has no workaround)",
                "goldmont",
                "none,APL12",
            ))
        },
    ]
}

/// The command that decodes a case's perf.data, run in the case directory (`case.json`'s
/// `perf`, with `ptemu corpus --perf-data`; `--symfs .` finds its `/image.elf`, PD12); its
/// output, errors included, goes into `ptemu verify`.
pub const PERF_COMMAND: &str = "perf script -i perf.data --symfs . --itrace=i0nse -F ip";

/// What [`write_case`] wrote, for the manifest.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CaseSummary {
    /// Directory name.
    pub name: String,
    /// `clean`, `erratum` (a clean run whose CPU erratum is the point), or the fault kind (the first
    /// one's, for several).
    pub fault: String,
    /// Every fault with its position.
    pub faults: Vec<String>,
    /// What it checks.
    pub about: String,
    /// The input the case ran on.
    pub input: String,
    /// The CPU profile (and so the packet style).
    pub cpu: String,
    /// The truth's counts.
    pub truth: crate::truth::Counts,
    /// Bytes of trace.pt.
    pub trace_bytes: u64,
    /// Packets in trace.pt by kind ([`packet_counts`]).
    pub packets: BTreeMap<&'static str, u64>,
    /// What a decoder meets, from the truth ([`event_counts`]).
    pub events: BTreeMap<String, u64>,
    /// Whether the case has `perf.data` (and `image.elf`), `ptemu corpus --perf-data`.
    pub perf_data: bool,
}

/// The generated Penn input of the corpus for `seed`.
pub fn input(seed: u64) -> Vec<u8> {
    let mut v = Vec::new();
    crate::sources::penn::generate(RECORDS, seed, &mut v).expect("writing to memory");
    v
}

/// The packet kinds ptemu generates ([`Packet::is_generated`]) that no input ptemu reads can make, each with
/// why: the tracer emits them for events no reader produces (spec/truth.md, CORP1).
pub const NOT_FROM_ANY_INPUT: [(&str, &str); 2] = [
    (
        "vmcs",
        "sent at a VM entry (FarKind::VmEntry) and in PSB+ in VMX non-root; no reader produces VM entries or exits",
    ),
    (
        "mwait",
        "sent for a successful MWAIT (Event::Mwait); no reader produces one (BYU's HLT is a sleep without MWAIT)",
    ),
];

/// The packet kinds the corpus must contain (CORP1): every kind ptemu generates
/// ([`Packet::generated_kinds`]) but those of [`NOT_FROM_ANY_INPUT`].
pub fn covered_kinds() -> Vec<&'static str> {
    Packet::generated_kinds()
        .filter(|k| NOT_FROM_ANY_INPUT.iter().all(|(n, _)| n != k))
        .collect()
}

/// Packets of each kind in `trace` (CORP1), by [`Packet::name`], as ptemu's packet decoder
/// reads it: from the first PSB and, after bytes that do not decode, from the next PSB (as
/// `ptemu dump` does). Bytes before the first PSB (of a wrapped buffer) and a damaged packet
/// are not counted.
pub fn packet_counts(trace: &[u8]) -> BTreeMap<&'static str, u64> {
    let mut counts = [0u64; Packet::KINDS];
    let mut d = PacketDecoder::new(trace, 0);
    let mut synced = d.sync_forward();
    while synced {
        match d.next_packet() {
            None => break,
            Some(Ok((_, p))) => counts[p.kind_index()] += 1,
            Some(Err(_)) => synced = d.resync(),
        }
    }
    Packet::KIND_NAMES
        .into_iter()
        .zip(counts)
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// What a decoder meets in a case (CORP1), counted from its `truth.jsonl`: the traced
/// branches by kind (`cond`, `jump`, `call`, `ind-jump`, `ind-call`, `ret`, `far`) and the
/// other facts (`enable`, `disable`, `async`, `overflow`), TR2, and the marks by their first
/// word (`mark.ptwrite`, `mark.exec`, `mark.pwre`, ...), TR11.
pub fn event_counts(truth: &Path) -> io::Result<BTreeMap<String, u64>> {
    let value = |line: &str, key: &str| -> Option<String> {
        let at = line.find(key)? + key.len();
        Some(line[at..].split('"').next()?.to_string())
    };
    let mut counts = BTreeMap::new();
    for line in io::BufReader::new(fs::File::open(truth)?).lines() {
        let line = line?;
        let event = match value(&line, "\"k\":\"").as_deref() {
            Some("insn") => value(&line, "\"branch\":\""),
            Some(k @ ("enable" | "disable" | "async" | "overflow")) => Some(k.to_string()),
            // A mark (TR11) by its first word: `ptwrite`, `pwre`, `exec` (mode), `interrupt`
            // (Event Trace's), `iret`, `stopped`, ...
            Some("mark") => value(&line, "\"event\":\"").map(|w| {
                let w = w.split([':', ',', ' ']).next().unwrap_or_default();
                format!("mark.{w}")
            }),
            _ => None,
        };
        if let Some(e) = event {
            *counts.entry(e).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

/// The function entry (the target of a direct CALL) the Penn trace `penn` reaches for the first
/// time last, among those first reached in its first 90%: a TraceStop there ends the trace late
/// (`clean-tracestop`). A call target, because a TraceStop entered by a not-taken Jcc or by
/// straight-line code is sent as TIP.PGD(IP) after the flow (FLT3), which libipt 2.1.2 binds to
/// a later branch: it decodes past the stop (spec/truth.md, CORP1).
fn late_call_target(penn: &[u8]) -> Option<u64> {
    let mut first: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let (mut n, mut after_call) = (0usize, false);
    for line in penn.split(|&b| b == b'\n') {
        let f: Vec<&[u8]> = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        if f.len() < 13 || f[0] != b"1" {
            continue;
        }
        let pc = u64::from_str_radix(std::str::from_utf8(f[1]).ok()?, 16).ok()?;
        if after_call {
            first.entry(pc).or_insert(n);
        }
        after_call = f[12] == b"CALL";
        n += 1;
    }
    first
        .into_iter()
        .filter(|&(_, i)| i <= n / 10 * 9)
        .max_by_key(|&(pc, i)| (i, pc))
        .map(|(pc, _)| pc)
}

fn setup(spec: &CaseSpec, format: Format) -> Result<Options, String> {
    let mut layout = if spec.small_regions {
        Layout::parse(Path::new("<corpus gap layout>"), GAP_LAYOUT).map_err(|e| e.to_string())?
    } else {
        super::default_layout()
    };
    layout.cpu = CpuProfile::named(spec.cpu).map_err(|e| e.to_string())?;
    for entry in spec.errata.split(',').filter(|e| !e.trim().is_empty()) {
        layout.cpu.errata = layout.cpu.errata.edit(entry).map_err(|e| e.to_string())?;
    }
    let mut opts = Options::new(format, layout).with_tracer(spec.tracer.clone());
    for a in &spec.ctl {
        opts.ctl = apply_assignment(opts.ctl, a).map_err(|e| e.to_string())?;
    }
    for m in &spec.msrs {
        let (name, value) = m.split_once('=').ok_or("NAME=VALUE")?;
        let msr = config_msr(name).ok_or("an MSR name")?;
        let value = crate::regs::ctl_text::parse_value(value).ok_or("a value")?;
        opts.msrs.push((msr, value));
    }
    Ok(opts)
}

/// The input of `spec`: its name, format, bytes, whether it is read with `--lenient`, and the
/// code image when the input does not build its own (only Penn input does).
fn case_input(spec: &CaseSpec, penn: &[u8], seed: u64) -> (String, Format, Vec<u8>, bool, Option<CodeImage>) {
    let mut generated = format!("penn gen --records {RECORDS} --seed {seed}");
    let penn = match spec.records {
        Some(n) => {
            let cut = penn_prefix(penn, n);
            generated += &format!(", its first {} lines", cut.split(|&b| b == b'\n').count() - 1);
            cut
        }
        None => penn,
    };
    match spec.input {
        CaseInput::Penn => (generated, Format::Penn, penn.to_vec(), false, None),
        CaseInput::Sjeng => (
            "sjeng-1K.trace (bundled)".into(),
            Format::Penn,
            SJENG.to_vec(),
            false,
            None,
        ),
        CaseInput::PennInterrupts => {
            let (bytes, n) = inputs::penn_with_interrupts(penn, seed, INTERRUPT_EVERY);
            (
                format!("{generated}, {n} macro-ops left out (interrupts), read with --lenient"),
                Format::Penn,
                bytes,
                true,
                None,
            )
        }
        CaseInput::ByuProgram => {
            let (bytes, image) = inputs::byu_program(BYU_LOOPS, seed);
            (
                format!("byu: the corpus's 32-bit program, {BYU_LOOPS} loops, seed {seed}"),
                Format::Byu,
                bytes,
                false,
                Some(image),
            )
        }
        CaseInput::KaplanFaults => {
            let (bytes, image) = inputs::kaplan_faults(KAPLAN_FAULTS, seed);
            (
                format!(
                    "kaplan: the corpus's page-fault trace, {KAPLAN_FAULTS} faults, seed {seed}, read with --lenient (its first record fills the memory)"
                ),
                Format::Kaplan,
                bytes,
                true,
                Some(image),
            )
        }
    }
}

/// Runs `spec` on `input` (the generated trace) and writes the case into `dir` (CORP2):
/// trace.pt, image.bin, image.json, truth.jsonl, case.json.
pub fn write_case(spec: &CaseSpec, input: &[u8], seed: u64, dir: &Path) -> Result<CaseSummary, SimError> {
    write_case_to(spec, input, seed, dir, None)
}

/// [`write_case`], and with `perf_data` (the directory `dir` will be renamed to, where perf
/// finds `image.elf`) also `perf.data` and `image.elf` (spec/perf-data.md).
pub fn write_case_to(
    spec: &CaseSpec,
    input: &[u8],
    seed: u64,
    dir: &Path,
    perf_data: Option<&Path>,
) -> Result<CaseSummary, SimError> {
    let plan = Plan {
        faults: spec.faults.clone(),
        seed,
    };
    let (name, format, bytes, lenient, own_image) = case_input(spec, input, seed);
    let config = |e: String| SimError::Config(format!("corpus case {}: {e}", spec.name));
    let mut opts = setup(spec, format).map_err(config)?;
    opts.read = ReadOptions { lenient };
    if spec.addr0_at_late_ip {
        let ip = late_call_target(&bytes).ok_or_else(|| config("no instruction for ADDR0".into()))?;
        opts.msrs.push((crate::regs::msr::IA32_RTIT_ADDR0_A, ip));
        opts.msrs.push((crate::regs::msr::IA32_RTIT_ADDR0_B, ip));
    }
    opts.apply_faults(&plan, false)?;
    let input = Input::from_bytes(&name, bytes)?;
    fs::create_dir_all(dir).map_err(SimError::Truth)?;
    let path = |f: &str| dir.join(f);
    let full = if plan.changes_delivery() {
        "trace.full"
    } else {
        "trace.pt"
    };
    let create = |p: PathBuf| fs::File::create(p).map(|f| BufWriter::with_capacity(1 << 16, f));
    let sink = create(path(full)).map_err(SimError::Truth)?;
    let mut spool = create(path("truth.spool")).map_err(SimError::Truth)?;
    let (mut outcome, sink) = super::run_recording(
        &opts,
        input,
        None,
        sink,
        Some(&mut spool as &mut dyn Write),
        EventLog::default(),
        &mut |_| {},
    )?;
    sink.into_inner().map_err(|e| SimError::Truth(e.into_error()))?;
    spool.into_inner().map_err(|e| SimError::Truth(e.into_error()))?;
    if outcome.image.is_none() {
        outcome.image = own_image;
    }
    let mut run = opts.describe(&plan, &name);
    run["lenient"] = lenient.into();
    let summary = finish_truth(
        &path(full),
        &path("trace.pt"),
        &path("truth.spool"),
        &path("truth.jsonl"),
        &outcome,
        &plan,
        run.clone(),
    )?;
    let img = outcome.image.as_ref().expect("every case input has a code image");
    let write_json = |file: &str, v: &serde_json::Value| -> io::Result<()> {
        let mut text = serde_json::to_string_pretty(v)?;
        text.push('\n');
        fs::write(path(file), text)
    };
    let trace = fs::read(path("trace.pt")).map_err(SimError::Truth)?;
    let case = CaseSummary {
        name: spec.name.clone(),
        fault: fault_name(spec),
        faults: summary.faults(),
        about: spec.about.into(),
        input: name.clone(),
        cpu: spec.cpu.into(),
        truth: summary.counts,
        trace_bytes: summary.delivered,
        packets: packet_counts(&trace),
        events: event_counts(&path("truth.jsonl")).map_err(SimError::Truth)?,
        perf_data: perf_data.is_some(),
    };
    // case.json: the manifest's entry for the case, and how to run a decoder on it.
    let timing = opts.ptxed_timing();
    let mut json = serde_json::to_value(&case).map_err(|e| SimError::Truth(e.into()))?;
    json["seed"] = seed.into();
    json["run"] = run;
    json["tracer"] = serde_json::to_value(&opts.tracer).map_err(|e| SimError::Truth(e.into()))?;
    json["packing"] = serde_json::json!(opts.tracer.packing_on(&opts.layout.cpu));
    json["timing"] = serde_json::json!(timing);
    json["ptxed"] = img
        .ptxed_command("trace.pt", "image.bin", &opts.ptxed_config())
        .into();
    let aux = if spec.split_aux {
        // Where the buffers are cut, and inside which packet: for a harness that feeds a
        // decoder buffer by buffer as perf.data holds them (PD13).
        json["aux_cuts"] = crate::perf_data::cuts::inside_packets(&trace)
            .into_iter()
            .map(|(at, inside)| serde_json::json!({ "offset": at, "inside": inside }))
            .collect();
        crate::perf_data::AuxCuts::InsidePackets
    } else {
        crate::perf_data::AuxCuts::for_plan(&plan)
    };
    if let Some(final_dir) = perf_data {
        crate::perf_data::write_run(dir, final_dir, &opts, &outcome, aux, &name, vec![])
            .map_err(SimError::Truth)?;
        // Relative to the case directory, as the ptxed command: no path in case.json (CORP3).
        json["perf"] = PERF_COMMAND.into();
    }
    (|| -> io::Result<()> {
        fs::write(path("image.bin"), &img.bytes)?;
        write_json(
            "image.json",
            &serde_json::json!({ "base": format!("{:#x}", img.base) }),
        )?;
        write_json("case.json", &json)
    })()
    .map_err(SimError::Truth)?;
    Ok(case)
}

fn fault_name(spec: &CaseSpec) -> String {
    match spec.faults.first() {
        Some(f) => f.kind.name().to_string(),
        None if !spec.errata.is_empty() => "erratum".into(),
        None => "clean".into(),
    }
}
