//! libipt's .ptt suite turned on ptemu's tracer (issue 42 §2): for each test whose code and
//! flow the tracer can run, the tracer is driven with that code and flow and its packets are
//! compared with the ones the test's author wrote (spec/pttc-agreement.md says how, and what each
//! result means).
//!
//! A test is compiled with `ptemu::pttc::run` (the .bin, the .pt, the ptxed .exp). The flow is
//! ptxed's expected output: one IP per instruction, and bracketed events. Each instruction is
//! decoded from the .bin with iced-x86, and its successor in the flow makes it an [`Event`]. How
//! tracing starts and ends (a PSB+ holding FUP: tracing already on; TIP.PGE: a WRMSR enabling it;
//! FUP + TIP.PGD(): a WRMSR disabling it; TIP.PGD(IP): a branch out of an IP filter range;
//! TIP.PGD() after a branch: leaving the filter range or the traced CPL or CR3) is read from the
//! test's packets, as is the outcome of a last conditional branch whose successor the flow does
//! not show. Everything else comes from the code and the flow.

use super::trace::{TraceRig, ADDR0_A, ADDR0_B, CR3_MATCH, CTL};
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, Register};
use ptemu::packet::{text::to_text, IpPayload, LastIp, Packet, PacketDecoder, PtwSize};
use ptemu::pttc;
use ptemu::regs::RtitCtl;
use ptemu::tracer::{Backpressure, Event, ExecMode, FarKind, TracerConfig};
use std::fmt;
use std::path::Path;

/// What comparing one test gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The tracer's packets are the test's (after the normalisation [`normalise`] applies);
    /// the setting that differs from the default run, if one does.
    Same(String),
    /// They differ: the first packet that does.
    Differs(String),
    /// The tracer cannot be driven with the test's code and flow: why.
    NotRunnable(String),
}

impl Outcome {
    /// The table's word for it.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Same(_) => "same",
            Outcome::Differs(_) => "differs",
            Outcome::NotRunnable(_) => "not runnable",
        }
    }

    /// The setting, the first difference or the reason.
    pub fn note(&self) -> &str {
        match self {
            Outcome::Same(s) | Outcome::Differs(s) | Outcome::NotRunnable(s) => s,
        }
    }
}

/// A reason a test is not runnable (`Err` of the steps below).
struct Skip(String);

fn skip<T>(why: impl Into<String>) -> Result<T, Skip> {
    Err(Skip(why.into()))
}

/// One test's row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The .ptt file's stem.
    pub test: String,
    /// What the comparison gave.
    pub outcome: Outcome,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let note = self.outcome.note().replace('|', "\\|");
        write!(f, "| `{}` | {} | {} |", self.test, self.outcome.word(), note)
    }
}

/// Compares one .ptt file (see the module doc).
pub fn assess(ptt: &Path) -> Row {
    let test = ptt.file_stem().unwrap().to_string_lossy().into_owned();
    let outcome = match run(ptt) {
        Ok(outcome) => outcome,
        Err(Skip(why)) => Outcome::NotRunnable(why),
    };
    Row { test, outcome }
}

/// The table (header and one row per test) and the summary line, as spec/pttc-agreement.md holds
/// them.
pub fn table(rows: &[Row]) -> String {
    let count = |w: &str| rows.iter().filter(|r| r.outcome.word() == w).count();
    let mut s = format!(
        "{} tests: {} same, {} differ, {} not runnable.\n\n| test | result | setting, first difference, or why not runnable |\n| --- | --- | --- |\n",
        rows.len(),
        count("same"),
        count("differs"),
        count("not runnable")
    );
    for r in rows {
        s.push_str(&r.to_string());
        s.push('\n');
    }
    s
}

/// The packet kinds the tracer is driven to produce here, and why each other kind in a test's
/// stream makes it not runnable.
fn unrunnable_kind(p: &Packet) -> Option<&'static str> {
    Some(match p {
        Packet::Psb
        | Packet::PsbEnd
        | Packet::Fup(_)
        | Packet::ModeExec { .. }
        | Packet::Tnt8(_)
        | Packet::Tnt64(_)
        | Packet::Tip(_)
        | Packet::TipPge(_)
        | Packet::TipPgd(_)
        | Packet::Pip { .. }
        | Packet::Ovf
        | Packet::Ptw { .. }
        | Packet::Pad => return None,
        Packet::Tsc { .. }
        | Packet::Tma { .. }
        | Packet::Mtc { .. }
        | Packet::Cyc { .. }
        | Packet::Cbr { .. } => "timing packets: their values are the author's, not a clock's",
        Packet::ModeTsx { .. } => "TSX: the tracer models no transactions",
        Packet::TraceStop => "TraceStop without a stop range in the code's flow",
        Packet::Vmcs { .. } => "VMX (VMCS): no VMX transitions in the flow",
        Packet::Mwait { .. } | Packet::Pwre { .. } | Packet::Pwrx { .. } | Packet::Exstop { .. } => {
            "power events: no C-state entry or exit in the code's flow"
        }
        Packet::Mnt { .. } => "MNT: model-specific, the tracer sends none",
        Packet::Cfe { .. } | Packet::Evd { .. } => "Event Trace (CFE/EVD) shapes the flow does not give",
        Packet::Trig { .. } => "TRIG: the tracer models no triggers",
        _ => "packets the tracer does not generate",
    })
}

/// The test's .pt decoded, PADs included (an error: the stream a decoder must reject).
fn decode(bytes: &[u8]) -> Result<Vec<Packet>, String> {
    let mut d = PacketDecoder::new(bytes, 0);
    let mut out = Vec::new();
    while let Some(r) = d.next_packet() {
        match r {
            Ok((_, p)) => out.push(p),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(out)
}

/// The comparison form: PADs and timing packets dropped, IP packets by the IP they stand for
/// (their compression is the encoder's choice), a PSB+ as one item holding its packets sorted
/// (their order inside PSB+ is the implementation's).
pub fn normalise(packets: &[Packet]) -> Vec<String> {
    let mut last = LastIp::new();
    let mut out = Vec::new();
    let mut psb: Option<Vec<String>> = None;
    for p in packets {
        let item = match p {
            Packet::Pad
            | Packet::Tsc { .. }
            | Packet::Tma { .. }
            | Packet::Mtc { .. }
            | Packet::Cyc { .. }
            | Packet::Cbr { .. } => continue,
            Packet::Psb => {
                last.reset();
                psb = Some(Vec::new());
                continue;
            }
            // OVF3: last IP restarts.
            Packet::Ovf => {
                last.reset();
                "ovf".to_string()
            }
            Packet::PsbEnd => {
                let mut inside = psb.take().unwrap_or_default();
                inside.sort();
                out.push(format!("psb+{{{}}}", inside.join(", ")));
                continue;
            }
            _ => match p.ip_payload() {
                Some(ip) => ip_text(p.name(), &mut last, ip),
                None => to_text(p).split_whitespace().collect::<Vec<_>>().join(" "),
            },
        };
        match psb.as_mut() {
            Some(inside) => inside.push(item),
            None => out.push(item),
        }
    }
    if let Some(inside) = psb {
        out.push(format!("psb+{{{}}}…", inside.join(", ")));
    }
    out
}

fn ip_text(name: &str, last: &mut LastIp, ip: IpPayload) -> String {
    match last.apply(ip) {
        Some(v) => format!("{name}({v:#x})"),
        None => format!("{name}()"),
    }
}

fn ip_of(p: &Packet, last: &mut LastIp) -> Option<u64> {
    p.ip_payload().and_then(|ip| last.apply(ip))
}

/// One item of ptxed's expected output.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Insn(u64),
    Enabled,
    Disabled,
    Interrupt,
    ExecMode(ExecMode),
    Paging(u64),
    Ptwrite(u64),
    Overflow,
    EndOfTrace,
}

fn flow(exp: &str) -> Result<Vec<Item>, Skip> {
    let mut items = Vec::new();
    // `[block]` separates the block decoder's blocks: no event.
    for line in exp
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "[block]")
    {
        if line.starts_with('?') {
            return skip("speculative instructions (TSX) in the flow");
        }
        let item = match line {
            // `[resumed]`: enabled again where it was disabled.
            "[enabled]" | "[resumed]" => Item::Enabled,
            "[disabled]" => Item::Disabled,
            "[interrupt]" => Item::Interrupt,
            "[exec mode: 64-bit]" => Item::ExecMode(ExecMode::Bits64),
            "[exec mode: 32-bit]" => Item::ExecMode(ExecMode::Bits32),
            "[exec mode: 16-bit]" => Item::ExecMode(ExecMode::Bits16),
            "[end of trace]" => Item::EndOfTrace,
            "[overflow]" => Item::Overflow,
            _ if line.starts_with("[ptwrite: ") && line.ends_with(']') => {
                match u64::from_str_radix(&line[10..line.len() - 1], 16) {
                    Ok(v) => Item::Ptwrite(v),
                    Err(_) => return skip(format!("ptxed reports `{line}`")),
                }
            }
            _ if line.starts_with("[paging, cr3: ") && line.ends_with(']') => {
                match u64::from_str_radix(&line[14..line.len() - 1], 16) {
                    Ok(cr3) => Item::Paging(cr3),
                    Err(_) => return skip(format!("ptxed reports `{line}`")),
                }
            }
            _ if line.starts_with('[') => {
                return skip(format!("ptxed reports `{line}`, which the flow does not derive"))
            }
            _ => match u64::from_str_radix(line, 16) {
                Ok(ip) => Item::Insn(ip),
                Err(_) => return skip(format!("ptxed's output is not a flow (`{line}`)")),
            },
        };
        items.push(item);
    }
    Ok(items)
}

/// The CPU profile for the test's `cpu f/m` lines (the first one ptemu has a profile of), else
/// `generic-max`.
fn profile(source: &str) -> &'static str {
    for line in source.lines() {
        let Some(rest) = line.trim_start_matches(';').trim().strip_prefix("cpu ") else {
            continue;
        };
        let name = match rest.trim() {
            "6/61" | "6/71" | "6/79" | "6/86" => "broadwell",
            "6/78" | "6/94" | "6/85" | "6/142" | "6/158" => "skylake",
            "6/92" | "6/95" => "goldmont",
            "6/125" | "6/126" | "6/106" | "6/108" => "icelake",
            "6/151" | "6/154" => "alderlake",
            "6/143" => "sapphirerapids",
            _ => continue,
        };
        return name;
    }
    "generic-max"
}

/// How the test's stream ends.
enum End {
    /// FUP(x), TIP.PGD(): a WRMSR clearing TraceEn at x.
    Wrmsr(u64),
    /// TIP.PGD(x): a branch to x, out of the IP filter range.
    Filter(u64),
    /// TIP.PGD() after a branch: out of the filter range, or out of the traced CPL or CR3.
    Leave,
    /// FUP(from), TIP.PGD(to): an interrupt at `from` into code outside the IP filter range.
    AsyncFilter(u64, u64),
    /// Tracing stays on to the end of the stream.
    Eos,
}

/// What an instruction does to the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    Cond(u64),
    Jump(u64),
    Call(u64),
    Ret,
    IndJump,
    IndCall,
    Far(Far),
    MovCr3,
    Ptwrite(PtwSize),
}

/// A far transfer: towards the kernel (CPL 0) or back to user code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Far {
    Up(FarKindOf),
    Down(FarKindOf),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FarKindOf {
    Syscall,
    Sysret,
    SoftInt(u8),
    Iret,
    Branch,
}

fn kind(i: &Instruction) -> Result<Kind, Skip> {
    use Mnemonic as M;
    Ok(match i.mnemonic() {
        M::Syscall | M::Sysenter => Kind::Far(Far::Up(FarKindOf::Syscall)),
        M::Sysret | M::Sysretq | M::Sysexit | M::Sysexitq => Kind::Far(Far::Down(FarKindOf::Sysret)),
        M::Int => Kind::Far(Far::Up(FarKindOf::SoftInt(i.immediate8()))),
        M::Int3 => Kind::Far(Far::Up(FarKindOf::SoftInt(3))),
        M::Into => Kind::Far(Far::Up(FarKindOf::SoftInt(4))),
        M::Iret | M::Iretd | M::Iretq | M::Eretu | M::Erets => Kind::Far(Far::Down(FarKindOf::Iret)),
        M::Retf => Kind::Far(Far::Down(FarKindOf::Branch)),
        M::Ret => Kind::Ret,
        M::Vmlaunch | M::Vmresume | M::Vmcall => return skip("VMX transitions in the flow"),
        M::Mov if i.op0_register() == Register::CR3 => Kind::MovCr3,
        M::Ptwrite => Kind::Ptwrite(match (i.op0_register(), i.memory_size().size()) {
            (Register::None, 8) => PtwSize::Eight,
            (Register::None, _) => PtwSize::Four,
            (r, _) if r.size() == 8 => PtwSize::Eight,
            _ => PtwSize::Four,
        }),
        _ if i.is_jmp_far() || i.is_jmp_far_indirect() || i.is_call_far() || i.is_call_far_indirect() => {
            Kind::Far(Far::Up(FarKindOf::Branch))
        }
        _ if i.is_jcc_short_or_near() => Kind::Cond(i.near_branch_target()),
        _ if i.is_loop() || i.is_loopcc() || i.is_jcx_short() => return skip("LOOP/JCXZ in the flow"),
        _ if i.is_jmp_short_or_near() => Kind::Jump(i.near_branch_target()),
        _ if i.is_call_near() => Kind::Call(i.near_branch_target()),
        _ if i.is_jmp_near_indirect() => Kind::IndJump,
        _ if i.is_call_near_indirect() => Kind::IndCall,
        _ => Kind::Plain,
    })
}

/// The code, at `org`.
struct Code<'a> {
    bin: &'a [u8],
    org: u64,
}

impl Code<'_> {
    fn insn(&self, ip: u64) -> Result<(Instruction, Kind), Skip> {
        let off = ip.wrapping_sub(self.org);
        if off >= self.bin.len() as u64 {
            return skip(format!("the flow's IP {ip:#x} is outside the code"));
        }
        let mut d = Decoder::with_ip(64, &self.bin[off as usize..], ip, DecoderOptions::NONE);
        let i = d.decode();
        if i.is_invalid() {
            return skip(format!("no instruction iced-x86 decodes at {ip:#x}"));
        }
        Ok((i, kind(&i)?))
    }
}

fn org(source: &str) -> Result<u64, Skip> {
    for line in source.lines() {
        let l = line.trim();
        if l.starts_with("section") || l.starts_with("[section") {
            return skip("sections: code away from org");
        }
        if let Some(bits) = l.strip_prefix("bits ") {
            if bits.trim() != "64" {
                return skip(format!("{}-bit code", bits.trim()));
            }
        }
    }
    for line in source.lines() {
        if let Some(v) = line.trim().strip_prefix("org ") {
            let v = v.trim();
            let n = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            return n.map_err(|_| Skip(format!("org `{v}`")));
        }
    }
    skip("no org")
}

fn run(ptt: &Path) -> Result<Outcome, Skip> {
    let source = std::fs::read_to_string(ptt).map_err(|e| Skip(e.to_string()))?;
    let files = pttc::run(&ptt.to_string_lossy(), &source, &pttc::Options::default())
        .map_err(|e| Skip(format!("pttc refuses it: {e}")))?;
    let get = |suffix: &str| files.iter().find(|f| f.name.ends_with(suffix)).map(|f| &f.bytes);
    let pt = get(".pt").expect("pttc writes a .pt");
    let bin = get(".bin").expect("pttc writes a .bin");
    let theirs = decode(pt).map_err(|e| Skip(format!("ptemu's packet decoder refuses the stream ({e})")))?;
    if let Some(why) = theirs.iter().find_map(unrunnable_kind) {
        return skip(why);
    }
    let Some(exp) = get("-ptxed.exp") else {
        return skip("no ptxed flow (.exp(ptxed)) to drive the tracer with");
    };
    let code = Code {
        bin,
        org: org(&source)?,
    };
    let items = flow(&String::from_utf8_lossy(exp))?;
    let mut plan = plan(&theirs, &items, &code)?;
    let b = normalise(&theirs);
    let a = normalise(&plan.trace(profile(&source)));
    // PTEMU_AGREEMENT_SHOW=<test> prints both sequences (to study a difference).
    if std::env::var("PTEMU_AGREEMENT_SHOW").is_ok_and(|t| ptt.file_stem().is_some_and(|s| s == t.as_str())) {
        eprintln!("ptemu: {a:#?}\ntest: {b:#?}\nevents: {:#?}", plan.events);
    }
    if a == b {
        return Ok(Outcome::Same(String::new()));
    }
    // Return compression is allowed, never required: a test may show RETs the tracer would
    // compress as TIPs, which is what DisRETC = 1 gives.
    plan.ctl = plan.ctl.with_dis_retc(true);
    if normalise(&plan.trace(profile(&source))) == b {
        return Ok(Outcome::Same("with DisRETC = 1".into()));
    }
    let n = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let show = |v: &[String]| v.get(n).cloned().unwrap_or_else(|| "end".into());
    let mut note = format!("packet {}: ptemu `{}`, test `{}`", n + 1, show(&a), show(&b));
    // One documented disagreement undone, else two.
    let single = KNOWN.iter().find(|k| (k.undo)(&a) == b);
    let pair = || {
        KNOWN.iter().enumerate().find_map(|(i, k)| {
            KNOWN[i + 1..]
                .iter()
                .find(|l| (l.undo)(&(k.undo)(&a)) == b || (k.undo)(&(l.undo)(&a)) == b)
                .map(|l| (k, l))
        })
    };
    if let Some(known) = single {
        note.push_str(&format!("; the same {} ({})", known.what, known.id));
    } else if let Some((k, l)) = pair() {
        note.push_str(&format!(
            "; the same {} and {} ({}, {})",
            k.what, l.what, k.id, l.id
        ));
    }
    Ok(Outcome::Differs(note))
}

/// A documented disagreement (spec/pttc-agreement.md) that can be undone on ptemu's side to
/// show it is the only difference.
struct Known {
    id: &'static str,
    what: &'static str,
    undo: fn(&[String]) -> Vec<String>,
}

const KNOWN: &[Known] = &[
    Known {
        id: "D1",
        what: "with ptemu's MODE.Exec moved into the PSB+ before it",
        undo: mode_exec_into_psb,
    },
    Known {
        id: "D2",
        what: "without the PIP in ptemu's PSB+",
        undo: pip_out_of_psb,
    },
    Known {
        id: "D7",
        what: "without the MODE.Exec before ptemu's later TIP.PGEs",
        undo: mode_exec_before_pge_out,
    },
    Known {
        id: "D3",
        what: "without ptemu's PIPs",
        undo: |v| {
            pip_out_of_psb(v)
                .into_iter()
                .filter(|i| !i.starts_with("pip "))
                .collect()
        },
    },
];

/// D1: a FUP-less PSB+ followed by MODE.Exec, with the MODE.Exec inside.
fn mode_exec_into_psb(v: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in v {
        if let Some(prev) = out.last_mut() {
            if item.starts_with("mode.exec") && prev.starts_with("psb+{") && !prev.contains("fup(") {
                let mut inside: Vec<String> = prev[5..prev.len() - 1]
                    .split(", ")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                inside.push(item.clone());
                inside.sort();
                *prev = format!("psb+{{{}}}", inside.join(", "));
                continue;
            }
        }
        out.push(item.clone());
    }
    out
}

/// D7: a MODE.Exec right before a TIP.PGE, not right after a PSB+, left out.
fn mode_exec_before_pge_out(v: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, item) in v.iter().enumerate() {
        let before_pge = v.get(i + 1).is_some_and(|n| n.starts_with("tip.pge("));
        let after_psb = i > 0 && v[i - 1].starts_with("psb+{");
        if item.starts_with("mode.exec") && before_pge && !after_psb {
            continue;
        }
        out.push(item.clone());
    }
    out
}

/// D2: PIP left out of every PSB+.
fn pip_out_of_psb(v: &[String]) -> Vec<String> {
    v.iter()
        .map(|item| match item.strip_prefix("psb+{") {
            Some(rest) => {
                let inside: Vec<&str> = rest[..rest.len() - 1]
                    .split(", ")
                    .filter(|s| !s.is_empty() && !s.starts_with("pip "))
                    .collect();
                format!("psb+{{{}}}", inside.join(", "))
            }
            None => item.clone(),
        })
        .collect()
}

/// How to drive the tracer for one test.
struct Plan {
    /// Where tracing starts, and whether it is on there already (a PSB+ with FUP) or enabled
    /// there by a WRMSR.
    start: u64,
    already_on: bool,
    mode: ExecMode,
    cpl: u8,
    ctl: RtitCtl,
    /// ADDR0 as a filter range, inclusive.
    filter: Option<(u64, u64)>,
    cr3_filter: bool,
    /// Tracing is enabled at CPL 3 while only CPL 0 is traced, and a far transfer into the
    /// kernel at the start IP turns packets on (TIP.PGE by a context entry).
    enter_by_far: bool,
    events: Vec<Event>,
    /// A WRMSR clearing TraceEn at this IP ends the run.
    disable_at: Option<u64>,
    /// The first event is lost to an overflow.
    lost: bool,
    /// WRMSRs on the way: before the event at the index, TraceEn set (true) or cleared, at the IP.
    toggles: Vec<(usize, bool, u64)>,
}

const CR3: u64 = 0x1000;
const OTHER_CR3: u64 = 0x2000;

fn exec_mode(p: &Packet) -> Option<ExecMode> {
    match *p {
        Packet::ModeExec { csl: true, .. } => Some(ExecMode::Bits64),
        Packet::ModeExec { csd: true, .. } => Some(ExecMode::Bits32),
        Packet::ModeExec { .. } => Some(ExecMode::Bits16),
        _ => None,
    }
}

fn plan(theirs: &[Packet], items: &[Item], code: &Code) -> Result<Plan, Skip> {
    let pk: Vec<&Packet> = theirs.iter().filter(|p| **p != Packet::Pad).collect();
    if pk.first() != Some(&&Packet::Psb) {
        return skip("the stream does not begin with a PSB");
    }
    if pk.iter().filter(|p| ***p == Packet::Psb).count() > 1 {
        return skip("a second PSB+ at a place the author chose (the tracer's come by the PSB period)");
    }
    let Some(end_psb) = pk.iter().position(|p| **p == Packet::PsbEnd) else {
        return skip("a PSB+ without PSBEND (OVF ends it)");
    };
    let mut last = LastIp::new();
    let mut fup = None;
    let mut mode = ExecMode::Bits64;
    for p in &pk[1..end_psb] {
        match p {
            Packet::Fup(_) => fup = ip_of(p, &mut last),
            Packet::ModeExec { .. } => mode = exec_mode(p).unwrap(),
            Packet::Pip { .. } => return skip("PIP in PSB+: the author's CR3 and CPL are not in the flow"),
            _ => {}
        }
    }
    let mut rest = &pk[end_psb + 1..];
    if let (None, Some(p)) = (fup, rest.first()) {
        if let Some(m) = exec_mode(p) {
            mode = m;
            rest = &rest[1..];
        }
    }
    let body = pk.len() - rest.len();
    let (start, already_on, mut items, body) = match (fup, rest.first()) {
        (Some(ip), _) => (ip, true, items, body),
        (None, Some(Packet::TipPge(_))) => {
            let ip = ip_of(rest[0], &mut last).unwrap_or(0);
            match items.split_first() {
                Some((Item::Enabled, after)) => (ip, false, after, body + 1),
                _ => return skip("TIP.PGE without [enabled] at the start of the flow"),
            }
        }
        _ => return skip("tracing is neither on in the PSB+ (FUP) nor enabled by TIP.PGE after it"),
    };
    // How the stream ends, and the last TNT bit (a last conditional branch's outcome).
    let mut li = LastIp::new();
    let mut resolved = Vec::new();
    for p in &pk {
        if matches!(p, Packet::Psb | Packet::Ovf) {
            li.reset();
        }
        resolved.push(ip_of(p, &mut li));
    }
    let n = pk.len();
    let end = match pk[n - 1] {
        Packet::TipPgd(_) => match (resolved[n - 1], n >= 2 && matches!(pk[n - 2], Packet::Fup(_))) {
            (None, true) => End::Wrmsr(resolved[n - 2].unwrap_or(0)),
            (Some(x), false) => End::Filter(x),
            (None, false) => End::Leave,
            (Some(to), true) => End::AsyncFilter(resolved[n - 2].unwrap_or(0), to),
        },
        _ => End::Eos,
    };
    // Tracing disabled and enabled again on the way: by WRMSRs only (FUP(x), TIP.PGD(), then
    // TIP.PGE(y)): x for each disable (`None`: another mechanism), y for each enable.
    let middle = if matches!(end, End::Eos) { n } else { n - 1 };
    let mut mid_pgds = Vec::new();
    let mut mid_pges = Vec::new();
    for i in body.min(middle)..middle {
        match pk[i] {
            Packet::TipPgd(_) => mid_pgds.push(
                match (resolved[i], i > 0 && matches!(pk[i - 1], Packet::Fup(_))) {
                    (None, true) => resolved[i - 1],
                    _ => None,
                },
            ),
            Packet::TipPge(_) => mid_pges.push(resolved[i].unwrap_or(0)),
            _ => {}
        }
    }
    let fup_on_ptw = pk.iter().any(|p| matches!(p, Packet::Ptw { ip: true, .. }));
    let (mut d, mut e) = (0, 0);
    let mut toggles = Vec::new();
    let last_tnt = pk.iter().rev().find_map(|p| match p {
        Packet::Tnt8(t) | Packet::Tnt64(t) if t.count > 0 => Some(t.taken(t.count - 1)),
        _ => None,
    });
    let last_tip = pk.iter().zip(&resolved).rev().find_map(|(p, ip)| match p {
        Packet::Tip(_) => *ip,
        _ => None,
    });
    if let Some((Item::EndOfTrace, before)) = items.split_last() {
        if !matches!(end, End::Eos) {
            return skip("[end of trace] after a TIP.PGD");
        }
        items = before;
    }
    match (items.last(), &end) {
        (Some(Item::Disabled), End::Eos) => return skip("[disabled] without a TIP.PGD"),
        (Some(Item::Disabled), _) => items = &items[..items.len() - 1],
        (_, End::Eos) => {}
        _ => return skip("a TIP.PGD without [disabled] at the end of the flow"),
    }

    let mut events = Vec::new();
    let mut cur = start;
    // `[overflow]` first: the instruction at the start IP is lost to it (forced with
    // `TracerConfig::overflow_at`), the flow resumes at the next one.
    let mut lost = 0;
    if let Some((Item::Overflow, after)) = items.split_first() {
        let Some(Item::Insn(next)) = after.first() else {
            return skip("[overflow] not followed by an instruction");
        };
        if !already_on {
            return skip("[overflow] while tracing is off");
        }
        let (insn, k) = code.insn(start)?;
        if k != Kind::Plain || insn.next_ip() != *next {
            return skip("the instructions lost to the overflow are not one plain instruction");
        }
        events.push(Event::Retire {
            ip: start,
            len: insn.len() as u8,
        });
        lost = 1;
        cur = *next;
        items = after;
    }
    let mut cpl = 3u8;
    let mut ctl = RtitCtl::new().with_branch_en(true).with_user(true);
    let mut filter = None;
    let mut cr3_filter = false;
    // MOV CR3 runs at CPL 0, and sends PIP only with OS = 1 (PIP1).
    for item in items {
        if let Item::Insn(ip) = item {
            if code.insn(*ip).is_ok_and(|(_, k)| k == Kind::MovCr3) {
                cpl = 0;
                ctl = ctl.with_os(true).with_user(false);
            }
        }
    }
    let (mut lo, mut hi) = (start, start);
    let mut i = 0;
    let mut cur_mode = mode;
    // Return addresses of the calls in the flow, for a last RET whose target it does not show.
    let mut calls: Vec<u64> = Vec::new();
    while i < items.len() {
        let ip = match items[i] {
            Item::Insn(ip) => ip,
            Item::Interrupt => {
                // An asynchronous interrupt at the current IP, to the next instruction shown.
                let to = match (items.get(i + 1), &end) {
                    (Some(Item::Insn(to)), _) => *to,
                    (None, End::Wrmsr(x)) => *x,
                    (None, End::Eos) => match last_tip {
                        Some(x) => x,
                        None => return skip("[interrupt] at the end without a TIP"),
                    },
                    _ => return skip("[interrupt] not followed by an instruction"),
                };
                events.push(Event::far(
                    FarKind::Interrupt { vector: 0x20 },
                    cur,
                    to,
                    cpl,
                    cur_mode,
                ));
                cur = to;
                i += 1;
                continue;
            }
            Item::Disabled => {
                let Some(Some(x)) = mid_pgds.get(d) else {
                    return skip("tracing is disabled on the way other than by a WRMSR (FUP, TIP.PGD())");
                };
                if *x != cur {
                    return skip("the FUP of a disable is not where the flow is");
                }
                toggles.push((events.len(), false, *x));
                d += 1;
                i += 1;
                continue;
            }
            Item::Enabled => {
                let Some(&x) = mid_pges.get(e) else {
                    return skip("[enabled] without a TIP.PGE");
                };
                toggles.push((events.len(), true, x));
                cur = x;
                e += 1;
                i += 1;
                continue;
            }
            ref other => return skip(format!("{other:?} in the middle of the flow")),
        };
        if ip != cur {
            return skip(format!("the flow goes from {cur:#x} to {ip:#x} with no branch"));
        }
        let (insn, k) = code.insn(ip)?;
        let len = insn.len() as u8;
        let fall = insn.next_ip();
        lo = lo.min(ip);
        hi = hi.max(fall - 1);
        // The successor: the next instruction of the flow, after any mode change; at the end,
        // what the end of the stream says.
        let mut j = i + 1;
        let mut new_mode = cur_mode;
        let mut new_cr3 = None;
        let mut ptw = None;
        loop {
            match items.get(j) {
                Some(Item::ExecMode(m)) => new_mode = *m,
                Some(Item::Paging(c)) if k == Kind::MovCr3 => new_cr3 = Some(*c),
                Some(Item::Ptwrite(v)) if matches!(k, Kind::Ptwrite(_)) => ptw = Some(*v),
                _ => break,
            }
            j += 1;
        }
        let is_last = j >= items.len();
        let succ = match items.get(j) {
            Some(Item::Insn(n)) => Some(*n),
            Some(Item::Disabled) => match mid_pgds.get(d) {
                Some(Some(x)) => Some(*x),
                _ => return skip("tracing is disabled on the way other than by a WRMSR (FUP, TIP.PGD())"),
            },
            // An interrupt after the instruction: it went where the code says.
            Some(Item::Interrupt) => match k {
                Kind::Jump(t) | Kind::Call(t) => Some(t),
                Kind::Plain | Kind::MovCr3 | Kind::Ptwrite(_) => Some(fall),
                _ => return skip("an interrupt right after a branch whose target the flow does not show"),
            },
            Some(other) => return skip(format!("{other:?} in the middle of the flow")),
            None => match end {
                End::Wrmsr(x) | End::Filter(x) | End::AsyncFilter(x, _) => Some(x),
                End::Leave => None,
                End::Eos => match k {
                    Kind::Cond(t) => last_tnt.map(|taken| if taken { t } else { fall }),
                    Kind::Jump(t) | Kind::Call(t) => Some(t),
                    Kind::Ret | Kind::IndJump | Kind::IndCall | Kind::Far(_) => last_tip,
                    Kind::Plain | Kind::MovCr3 | Kind::Ptwrite(_) => Some(fall),
                },
            },
        };
        let leaving = is_last && matches!(end, End::Leave);
        if is_last && matches!(end, End::Filter(_) | End::Leave) {
            // The last branch leaves what is traced: which filter does it, by its kind.
            match k {
                Kind::Far(Far::Up(_)) if leaving => {}
                Kind::Far(Far::Down(_)) if leaving => {
                    ctl = RtitCtl::new().with_branch_en(true).with_os(true);
                    cpl = 0;
                }
                Kind::MovCr3 if leaving => {
                    ctl = RtitCtl::new()
                        .with_branch_en(true)
                        .with_os(true)
                        .with_cr3_filter(true);
                    cpl = 0;
                    cr3_filter = true;
                }
                Kind::Plain | Kind::MovCr3 | Kind::Ptwrite(_) | Kind::Far(_) => {
                    return skip("TIP.PGD after an instruction that cannot leave the filter range")
                }
                _ => filter = Some((0, 0)),
            }
        }
        let succ = match (succ, k) {
            (Some(s), _) => s,
            (None, Kind::Cond(t)) => match last_tnt {
                Some(true) => t,
                Some(false) => fall,
                None => return skip("a last conditional branch without a TNT bit"),
            },
            (None, Kind::Jump(t) | Kind::Call(t)) => t,
            (None, Kind::Ret) => match calls.last() {
                Some(&r) => r,
                None => return skip("a last RET whose call the flow does not show"),
            },
            (None, Kind::Far(_) | Kind::MovCr3 | Kind::Ptwrite(_)) => fall,
            (None, _) => return skip("the flow does not say where the last branch went"),
        };
        let ev = match k {
            Kind::Plain => {
                if succ != fall {
                    return skip(format!("the flow leaves {ip:#x} (no branch) for {succ:#x}"));
                }
                Event::Retire { ip, len }
            }
            Kind::Cond(t) => {
                if succ != t && succ != fall {
                    return skip(format!("the flow leaves the branch at {ip:#x} for {succ:#x}"));
                }
                Event::CondBranch {
                    ip,
                    len,
                    target: t,
                    taken: succ == t,
                }
            }
            Kind::Jump(t) | Kind::Call(t) if succ != t => {
                return skip(format!(
                    "the flow leaves the branch at {ip:#x} for {succ:#x}, not {t:#x}"
                ))
            }
            Kind::Jump(t) => Event::Jump { ip, target: t },
            Kind::Call(t) => Event::Call { ip, len, target: t },
            Kind::Ret => Event::Return { ip, target: succ },
            Kind::Ptwrite(size) => {
                if succ != fall {
                    return skip(format!("the flow leaves {ip:#x} (PTWRITE) for {succ:#x}"));
                }
                let Some(payload) = ptw else {
                    return skip("a PTWRITE without [ptwrite: …] after it");
                };
                ctl = ctl.with_ptw_en(true);
                Event::Ptwrite {
                    ip,
                    len,
                    payload,
                    size,
                }
            }
            Kind::IndJump => Event::IndirectJump { ip, target: succ },
            Kind::IndCall => Event::IndirectCall {
                ip,
                len,
                target: succ,
            },
            Kind::MovCr3 => {
                let cr3 = match (leaving, new_cr3) {
                    (true, _) => OTHER_CR3,
                    (false, Some(c)) => c,
                    (false, None) => CR3,
                };
                Event::Cr3Write { ip, len, cr3 }
            }
            Kind::Far(f) => {
                let (kind, to_cpl) = match f {
                    Far::Up(k) | Far::Down(k) => {
                        let kind = match k {
                            FarKindOf::Syscall => FarKind::Syscall,
                            FarKindOf::Sysret => FarKind::Sysret,
                            FarKindOf::SoftInt(v) => FarKind::SoftwareInterrupt { vector: v },
                            FarKindOf::Iret => FarKind::Iret,
                            FarKindOf::Branch => FarKind::FarBranch,
                        };
                        // Far transfers the flow traces through keep the CPL (the tests say
                        // none); the last one of a context exit goes to the other CPL.
                        let to = match (leaving, f) {
                            (true, Far::Up(_)) => 0,
                            (true, Far::Down(_)) => 3,
                            _ => cpl,
                        };
                        (kind, to)
                    }
                };
                Event::far(kind, ip, succ, to_cpl, new_mode)
            }
        };
        match ev {
            Event::Call { .. } | Event::IndirectCall { .. } => calls.push(fall),
            Event::Return { .. } => {
                calls.pop();
            }
            _ => {}
        }
        events.push(ev);
        cur = succ;
        cur_mode = new_mode;
        i = j;
    }
    if ctl.ptw_en() {
        ctl = ctl.with_fup_on_ptw(fup_on_ptw);
    }
    if d != mid_pgds.len() || e != mid_pges.len() {
        return skip("the flow's [disabled] and [enabled] are not the stream's TIP.PGD and TIP.PGE");
    }
    if let End::AsyncFilter(from, to) = end {
        if from != cur {
            return skip("the FUP of the disabling interrupt is not where the flow is");
        }
        events.push(Event::far(
            FarKind::Interrupt { vector: 0x20 },
            from,
            to,
            cpl,
            cur_mode,
        ));
        hi = hi.max(from);
        filter = Some((0, 0));
    }
    if let Some(f) = filter.as_mut() {
        *f = (lo, hi);
        let out = match end {
            End::Filter(x) | End::AsyncFilter(_, x) => x,
            _ => cur,
        };
        if (lo..=hi).contains(&out) {
            return skip(format!(
                "the branch out of the filter range goes to {out:#x}, inside the code it traces"
            ));
        }
        ctl = ctl.with_addr0_cfg(1);
    }
    if let End::Filter(_) = end {
        if filter.is_none() {
            return skip("TIP.PGD(IP) after a far transfer or MOV CR3");
        }
    }
    // A run that traces CPL 0 only and is not on in its PSB+ starts in user code: a far
    // transfer into the kernel is what enables it (the instruction is not in the flow).
    let enter_by_far = !already_on && cpl == 0 && !ctl.user() && !cr3_filter;
    Ok(Plan {
        start,
        already_on,
        mode,
        cpl: if enter_by_far { 3 } else { cpl },
        enter_by_far,
        ctl,
        filter,
        cr3_filter,
        events,
        disable_at: match end {
            End::Wrmsr(x) => Some(x),
            _ => None,
        },
        lost: lost > 0,
        toggles,
    })
}

impl Plan {
    /// Runs the tracer: enables it at the start (when tracing is on there already, then feeds
    /// indirect jumps to the start IP until the PSB period sends a PSB+, the point the test's
    /// stream begins at), feeds the events, ends as the test's stream ends. Returns the packets
    /// from the test's starting point on.
    fn trace(&self, cpu: &str) -> Vec<Packet> {
        let (packets, spin) = self.trace_with(cpu, None);
        if !self.lost {
            return packets;
        }
        // The buffer is full at the first event after the spin, and drains within an event:
        // that event is lost, OVF comes at the next (OVF1, OVF2).
        self.trace_with(cpu, Some(spin + 1)).0
    }

    /// [`Plan::trace`], with the internal buffer full at instruction `overflow_at`; also returns
    /// the instructions the PSB spin took.
    fn trace_with(&self, cpu: &str, overflow_at: Option<u64>) -> (Vec<Packet>, u64) {
        let mut cfg = TracerConfig::default().with_tsx(false);
        if let Some(n) = overflow_at {
            cfg = cfg
                .with_overflow(Some(Backpressure::new(256, 256, 1)))
                .with_overflow_at(vec![n]);
        }
        let mut rig = TraceRig::with_cpu(cpu, cfg);
        rig.tracer.set_state(self.start, self.cpl, CR3, self.mode);
        if let Some((a, b)) = self.filter {
            rig.wrmsr(ADDR0_A, a);
            rig.wrmsr(ADDR0_B, b);
        }
        if self.cr3_filter {
            rig.wrmsr(CR3_MATCH, CR3);
        }
        rig.wrmsr(super::trace::OUTPUT_BASE, super::trace::BASE);
        rig.wrmsr(super::trace::MASK_PTRS, super::trace::SIZE - 1);
        rig.ctl = self.ctl.with_trace_en(true);
        rig.tracer
            .wrmsr(&mut rig.mem, CTL, rig.ctl.bits(), self.start, 0)
            .expect("enable");
        if self.already_on {
            let psbs = rig.tracer.stats().psbs;
            let spin = Event::IndirectJump {
                ip: self.start,
                target: self.start,
            };
            while rig.tracer.stats().psbs == psbs {
                rig.ev(spin);
            }
        }
        let spun = rig.tracer.stats().instructions;
        if self.enter_by_far {
            rig.ev(Event::far(FarKind::Syscall, self.start, self.start, 0, self.mode));
        }
        for i in 0..=self.events.len() {
            for &(_, on, ip) in self.toggles.iter().filter(|t| t.0 == i) {
                let value = rig.ctl.with_trace_en(on).bits();
                rig.tracer.wrmsr(&mut rig.mem, CTL, value, ip, 0).expect("WRMSR");
            }
            if let Some(ev) = self.events.get(i) {
                rig.ev(*ev);
            }
        }
        match self.disable_at {
            Some(x) => {
                rig.stop_at(x);
            }
            None => rig.tracer.flush(&mut rig.mem).expect("flush"),
        }
        let mut packets = decode(&rig.bytes()).expect("the tracer's stream decodes");
        if self.already_on {
            let second = packets
                .iter()
                .enumerate()
                .filter(|(_, p)| **p == Packet::Psb)
                .nth(1)
                .map(|(i, _)| i)
                .expect("the second PSB");
            packets.drain(..second);
        }
        (packets, spun)
    }
}
