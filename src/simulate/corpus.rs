//! `ptemu corpus`: a ready decoder test suite (`spec/truth.md`, CORP rules). Every case is one
//! simulation of a generated Penn trace (or the bundled sjeng sample) with its CTL settings and
//! faults; each case directory holds what a decoder needs and the answer it must give.

use super::fault::{Fault, Plan};
use super::{finish_truth, Options, SimError};
use crate::event_log::EventLog;
use crate::layout::Layout;
use crate::regs::ctl_text::{apply_assignment, config_msr};
use crate::regs::CpuProfile;
use crate::sources::{Format, Input};
use crate::truth::Cause;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Micro-op records of the generated Penn input every case but `clean-sjeng` runs on (about
/// 13 KB of trace: enough for 4 KiB wraps, STOPs and gaps).
pub const RECORDS: u64 = 150_000;

/// The layout of the `gap` cases: sixteen 4 KiB regions with INT, END back to the table.
pub const GAP_LAYOUT: &str = include_str!("gap-layout.toml");

/// The bundled sjeng sample (tests/data/penn/SOURCE.md).
const SJENG: &[u8] = include_bytes!("../../tests/data/penn/sjeng-1K.trace");

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
    /// Run on the bundled sjeng sample instead of the generated input.
    pub sjeng: bool,
    /// Use [`GAP_LAYOUT`].
    pub small_regions: bool,
}

fn fault(kind: Cause, at: Option<u64>) -> Fault {
    Fault { kind, at }
}

/// The cases for `seed` (CORP1): clean runs over CTL settings and CPU styles, then every fault
/// kind at two or more positions drawn from the seed.
pub fn cases(seed: u64) -> Vec<CaseSpec> {
    let mut rng = crate::sources::rng::GenRng::new(seed ^ 0xc0_4b05);
    let base = CaseSpec {
        name: String::new(),
        about: "",
        ctl: vec![],
        msrs: vec![],
        cpu: "alderlake",
        faults: vec![],
        sjeng: false,
        small_regions: false,
    };
    let clean = |name: &str, about, ctl: &[&'static str], cpu| CaseSpec {
        name: name.into(),
        about,
        ctl: ctl.to_vec(),
        cpu,
        ..base.clone()
    };
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
            sjeng: true,
            ..clean(
                "clean-sjeng",
                "the bundled sjeng-1K sample (a real Penn trace)",
                &[],
                "alderlake",
            )
        },
    ];
    let faulty = |name: String, about, faults: Vec<Fault>| CaseSpec {
        name,
        about,
        faults,
        ..base.clone()
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
    v
}

/// What [`write_case`] wrote, for the manifest.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CaseSummary {
    /// Directory name.
    pub name: String,
    /// `clean`, or the fault kind (the first one's, for several).
    pub fault: String,
    /// Every fault with its position.
    pub faults: Vec<String>,
    /// What it checks.
    pub about: String,
    /// The truth's counts.
    pub truth: crate::truth::Counts,
    /// Bytes of trace.pt.
    pub trace_bytes: u64,
}

/// The generated Penn input of the corpus for `seed`.
pub fn input(seed: u64) -> Vec<u8> {
    let mut v = Vec::new();
    crate::sources::penn::generate(RECORDS, seed, &mut v).expect("writing to memory");
    v
}

fn setup(spec: &CaseSpec) -> Result<Options, String> {
    let mut layout = if spec.small_regions {
        Layout::parse(Path::new("<corpus gap layout>"), GAP_LAYOUT).map_err(|e| e.to_string())?
    } else {
        super::default_layout()
    };
    layout.cpu = CpuProfile::named(spec.cpu).map_err(|e| e.to_string())?;
    let mut opts = Options::new(Format::Penn, layout);
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

/// Runs `spec` on `input` (the generated trace) and writes the case into `dir` (CORP2):
/// trace.pt, image.bin, image.json, truth.jsonl, case.json.
pub fn write_case(spec: &CaseSpec, input: &[u8], seed: u64, dir: &Path) -> Result<CaseSummary, SimError> {
    let plan = Plan {
        faults: spec.faults.clone(),
        seed,
    };
    let mut opts = setup(spec).map_err(|e| SimError::Config(format!("corpus case {}: {e}", spec.name)))?;
    opts.apply_faults(&plan, false)?;
    let (name, bytes) = if spec.sjeng {
        ("sjeng-1K.trace (bundled)".to_string(), SJENG.to_vec())
    } else {
        (
            format!("penn gen --records {RECORDS} --seed {seed}"),
            input.to_vec(),
        )
    };
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
    let (outcome, sink) = super::run_recording(
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
    let run = opts.describe(&plan, &name);
    let summary = finish_truth(
        &path(full),
        &path("trace.pt"),
        &path("truth.spool"),
        &path("truth.jsonl"),
        &outcome,
        &plan,
        run.clone(),
    )?;
    let img = outcome.image.as_ref().expect("Penn input builds an image");
    let write_json = |file: &str, v: &serde_json::Value| -> io::Result<()> {
        let mut text = serde_json::to_string_pretty(v)?;
        text.push('\n');
        fs::write(path(file), text)
    };
    let case = CaseSummary {
        name: spec.name.clone(),
        fault: fault_name(spec),
        faults: summary.faults(),
        about: spec.about.into(),
        truth: summary.counts,
        trace_bytes: summary.delivered,
    };
    // case.json: the manifest's entry for the case, and how to run a decoder on it.
    let timing = opts.ptxed_timing();
    let mut json = serde_json::to_value(&case).map_err(|e| SimError::Truth(e.into()))?;
    json["seed"] = seed.into();
    json["run"] = run;
    json["packing"] = serde_json::json!(opts.tracer.packing_on(&opts.layout.cpu));
    json["timing"] = serde_json::json!(timing);
    json["ptxed"] = img.ptxed_command("trace.pt", "image.bin", timing).into();
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
    spec.faults
        .first()
        .map_or("clean".into(), |f| f.kind.name().to_string())
}
