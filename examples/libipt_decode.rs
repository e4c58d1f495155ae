//! A decoder harness for `ptemu verify`: libipt's instruction-flow decoder over a case directory
//! (`ptemu corpus` or `ptemu simulate --out`), printing one line per instruction IP, a line
//! `error …` where decoding fails, and libipt's enable, disable, interrupt and overflow events in
//! ptxed's words (`[enabled, ip: …]`, `[interrupt, from: …, to: …]`, …, in order with the
//! instructions: what `ptemu verify --events` checks, TR10), the way a robust decoder goes on
//! after damage:
//!
//! - from the first PSB;
//! - after an error, on at the next PSB (`pt_insn_sync_forward`), except for an error inside a
//!   PSB+: libipt checks a PSB+ against the flow it follows and fails there when they disagree
//!   (a silently corrupted stream: "trace stream does not match query"); going forward would skip
//!   that very PSB, so decoding starts again at it (`pt_insn_sync_set`).
//!
//! ```text
//! cargo run --release --example libipt_decode -- CASE_DIR > ips.txt
//! ptemu verify CASE_DIR --ips ips.txt --events
//! cargo run --release --example libipt_decode -- CASE_DIR --time | ptemu verify CASE_DIR --ips - --time 0
//! ```
//!
//! The tests run the same code (tests/truth.rs), so the README's example is what CI checks.

#![allow(non_upper_case_globals)]

use libipt_sys::*;
use std::ffi::CString;
use std::fmt::Write as _;
use std::path::Path;

/// The timing parameters libipt needs to follow MTC and CYC.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// IA32_RTIT_CTL.MTCFreq.
    pub mtc_freq: u8,
    /// The nominal core:bus ratio.
    pub nom_freq: u8,
    /// CPUID.15H:EAX.
    pub cpuid_0x15_eax: u32,
    /// CPUID.15H:EBX.
    pub cpuid_0x15_ebx: u32,
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A file section of the code image: the file, the offset and size of the part mapped, and
/// the address it is mapped at.
#[derive(Clone, Debug)]
pub struct Section {
    /// The file.
    pub path: std::path::PathBuf,
    /// File offset of the part mapped.
    pub offset: u64,
    /// Its size (0: to the end of the file).
    pub size: u64,
    /// Where it is mapped.
    pub vaddr: u64,
    /// For code a program wrote while it ran (`ptemu run`, spec/qemu.md QE17): the time it was
    /// written, from which it replaces what was there; `None`: mapped from the start.
    pub load_tsc: Option<u64>,
    /// The address space it belongs to, by CR3 as PIP packets give it (`ptemu boot`'s user
    /// code, spec/qemu.md QE28); `None`: every address space's (libipt's `pt_asid_no_cr3`).
    pub cr3: Option<u64>,
}

fn hex_field(v: &serde_json::Value, what: &str) -> u64 {
    v.as_str()
        .and_then(|h| u64::from_str_radix(h.strip_prefix("0x")?, 16).ok())
        .unwrap_or_else(|| panic!("{what}: a \"0x...\" string"))
}

/// The code a case runs: `image.bin` at `image.json`'s base (a Penn trace), or the files
/// `report.json` lists under `program.maps` (a real program, `ptemu run`).
pub fn case_sections(case: &Path) -> Vec<Section> {
    if case.join("image.json").is_file() {
        let base = hex_field(&json(&case.join("image.json"))["base"], "image.json: base");
        return vec![Section {
            path: case.join("image.bin"),
            offset: 0,
            size: 0,
            vaddr: base,
            load_tsc: None,
            cr3: None,
        }];
    }
    let report = json(&case.join("report.json"));
    let maps = report["program"]["maps"]
        .as_array()
        .expect("no image.json, and report.json has no program.maps: a case without code");
    // The files the program ran code from, then each version of the code it wrote.
    let code = report["program"]["code"].as_array().cloned().unwrap_or_default();
    maps.iter()
        .chain(&code)
        .map(|m| {
            let (start, end) = (
                hex_field(&m["start"], "maps.start"),
                hex_field(&m["end"], "maps.end"),
            );
            Section {
                path: m["path"].as_str().expect("maps.path").into(),
                offset: hex_field(&m["offset"], "maps.offset"),
                size: end - start,
                vaddr: start,
                load_tsc: m
                    .get("load_tsc")
                    .filter(|t| !t.is_null())
                    .map(|t| hex_field(t, "load_tsc")),
                cr3: m
                    .get("cr3")
                    .filter(|t| !t.is_null())
                    .map(|t| hex_field(t, "maps.cr3")),
            }
        })
        .collect()
}

/// Decodes `CASE/trace.pt` over the case's code ([`case_sections`]), with the timing in
/// `case.json` (or that `ptemu simulate`'s report implies), into verify's lines.
pub fn decode_case(case: &Path) -> String {
    decode_case_timed(case, false)
}

/// [`decode_case`]; with `show_time`, each instruction line also has libipt's time for it
/// (`pt_insn_time`) as `tsc: HEX`, what `ptemu verify --time` reads (TR13).
pub fn decode_case_timed(case: &Path, show_time: bool) -> String {
    let trace = std::fs::read(case.join("trace.pt")).expect("trace.pt");
    decode_styled(
        &trace,
        &case_sections(case),
        case_timing(case),
        show_time,
        case_cpu(case),
        case_filter(case),
        case_style(case),
    )
}

/// How the harness decodes and prints beyond its defaults: for a `ptemu pttc --case` case,
/// as libipt's ptxed does with the test's options (spec/pttc.md, "`--case`").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// ptxed's way: after an error, on at the next PSB (`pt_insn_sync_forward`) only; an error
    /// as ptxed prints it (`[offset, ip: error: message]`, the IP being the instruction after
    /// the last one when that one decoded), `[end of trace]`, `? ` before a speculative
    /// instruction. Otherwise the harness's own way (the module doc).
    pub ptxed: bool,
    /// Event lines carry their IPs (ptxed's `--event:ip`).
    pub event_ip: bool,
    /// Ask libipt for tick events (`--event:tick`).
    pub tick: bool,
    /// Ask libipt for interrupt-flag events (`--event:iflags`).
    pub iflags: bool,
    /// Keep the timing calibration over an overflow (`--insn:keep-tcal-on-ovf`).
    pub keep_tcal: bool,
    /// Print no instruction or event, only errors (`--quiet`).
    pub quiet: bool,
    /// End with the instruction count, `insn: N.` (`--stat`, `--stat:insn`).
    pub stat_insn: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            ptxed: false,
            event_ip: true,
            tick: false,
            iflags: false,
            keep_tcal: false,
            quiet: false,
            stat_insn: false,
        }
    }
}

/// The style a case asks for: `case.json`'s `style` (written by `ptemu pttc --case`), else the
/// default.
pub fn case_style(case: &Path) -> Style {
    if !case.join("case.json").is_file() {
        return Style::default();
    }
    let c = &json(&case.join("case.json"))["style"];
    if c.is_null() {
        return Style::default();
    }
    let flag = |k: &str| c[k].as_bool().unwrap_or_else(|| panic!("case.json: style.{k}"));
    Style {
        ptxed: flag("ptxed"),
        event_ip: flag("event_ip"),
        tick: flag("tick"),
        iflags: flag("iflags"),
        keep_tcal: flag("keep_tcal"),
        quiet: flag("quiet"),
        stat_insn: flag("stat_insn"),
    }
}

/// [`decode_case`] told the CPU `cpu` instead of the case's (`None`: not told any).
pub fn decode_case_as(case: &Path, cpu: Option<(u16, u8, u8)>) -> String {
    let trace = std::fs::read(case.join("trace.pt")).expect("trace.pt");
    decode_filtered(
        &trace,
        &case_sections(case),
        case_timing(case),
        false,
        cpu,
        case_filter(case),
    )
}

/// The timing a case was traced with: `case.json`'s, or the default that `ptemu simulate`'s
/// report implies.
pub fn case_timing(case: &Path) -> Timing {
    let clock = ptemu::TracerConfig::default().clock;
    let mut t = Timing {
        mtc_freq: 3,
        nom_freq: clock.nominal_ratio,
        cpuid_0x15_eax: 1,
        cpuid_0x15_ebx: clock.tsc_per_art,
    };
    if case.join("case.json").is_file() {
        let c = &json(&case.join("case.json"))["timing"];
        if !c.is_null() {
            let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("case.json: timing.{k}"));
            t = Timing {
                mtc_freq: n("mtc_freq") as u8,
                nom_freq: n("nom_freq") as u8,
                cpuid_0x15_eax: n("cpuid_0x15_eax") as u32,
                cpuid_0x15_ebx: n("cpuid_0x15_ebx") as u32,
            };
        }
    }
    t
}

/// The part a case was traced on (`case.json`'s `run.cpu_signature`, or `report.json`'s
/// `cpu_signature`): family, model, stepping; none for a profile of no real part.
pub fn case_cpu(case: &Path) -> Option<(u16, u8, u8)> {
    let sig = if case.join("case.json").is_file() {
        json(&case.join("case.json"))["run"]["cpu_signature"].clone()
    } else {
        json(&case.join("report.json"))["cpu_signature"].clone()
    };
    let n = |k: &str| sig[k].as_u64();
    Some((n("family")? as u16, n("model")? as u8, n("stepping")? as u8))
}

/// The address-filter configuration a case was traced with, as libipt's `pt_config.addr_filter`
/// holds it: CTL\[47:32\] (ADDRn_CFG) and the ADDRn_A/B MSRs. A decoder needs it
/// for its SKL014 workaround (spec/cpu-profiles.md CP4), as ptxed takes `--filter:addrN_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddrFilter {
    /// CTL\[47:32\]: four 4-bit ADDRn_CFG fields.
    pub cfg: u64,
    /// ADDR0_A, ADDR0_B, ... ADDR3_B.
    pub addr: [u64; 8],
}

/// The address filter of a case (`case.json`'s `run.ctl` and `run.msrs`, or `report.json`'s
/// `ctl.value` and `msrs`).
pub fn case_filter(case: &Path) -> AddrFilter {
    let (ctl, msrs) = if case.join("case.json").is_file() {
        let run = json(&case.join("case.json"))["run"].clone();
        (hex_field(&run["ctl"], "run.ctl"), run["msrs"].clone())
    } else {
        let r = json(&case.join("report.json"));
        (hex_field(&r["ctl"]["value"], "ctl.value"), r["msrs"].clone())
    };
    let writes = msrs.as_array().into_iter().flatten().map(|m| {
        let msr = hex_field(&m["msr"], "msr");
        (u32::try_from(msr).unwrap_or(0), hex_field(&m["value"], "value"))
    });
    AddrFilter {
        cfg: (ctl >> 32) & 0xffff,
        addr: ptemu::regs::Msr::addr_values(writes),
    }
}

/// Tells libipt the part a trace was made on (family, model, stepping) and turns on its errata
/// workarounds for it, as ptxed's `--cpu` does (spec/cpu-profiles.md CP1); `None` tells nothing.
pub fn tell_cpu(c: &mut pt_config, cpu: Option<(u16, u8, u8)>) {
    if let Err(e) = try_tell_cpu(c, cpu) {
        panic!("pt_cpu_errata: {e}");
    }
}

/// [`tell_cpu`], giving libipt's error for a part it does not know (ptxed prints it as a
/// `config error` and goes on with the part set and no workarounds).
pub fn try_tell_cpu(c: &mut pt_config, cpu: Option<(u16, u8, u8)>) -> Result<(), String> {
    let Some((family, model, stepping)) = cpu else {
        return Ok(());
    };
    c.cpu.vendor = pt_cpu_vendor_pcv_intel;
    c.cpu.family = family;
    c.cpu.model = model;
    c.cpu.stepping = stepping;
    // SAFETY: both pointers are to fields of the live `c`.
    let rc = unsafe { pt_cpu_errata(&mut c.errata, &c.cpu) };
    match rc < 0 {
        true => Err(error_text(rc)),
        false => Ok(()),
    }
}

/// Tells libipt the address filter the trace was made with (for its SKL014 workaround, CP4),
/// as ptxed's `--filter:addrN_*` do.
pub fn tell_filter(c: &mut pt_config, filter: AddrFilter) {
    c.addr_filter.config.addr_cfg = filter.cfg;
    [
        c.addr_filter.addr0_a,
        c.addr_filter.addr0_b,
        c.addr_filter.addr1_a,
        c.addr_filter.addr1_b,
        c.addr_filter.addr2_a,
        c.addr_filter.addr2_b,
        c.addr_filter.addr3_a,
        c.addr_filter.addr3_b,
    ] = filter.addr;
}

/// The PSB whose PSB+ (up to its PSBEND) holds offset `at` in `buf`, if any.
fn psb_around(buf: &[u8], at: usize) -> Option<usize> {
    const PSB: [u8; 16] = [
        0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
    ];
    let p = (0..=at.min(buf.len().saturating_sub(16)))
        .rev()
        .find(|&i| buf[i..].starts_with(&PSB))?;
    // PSB+ is a few dozen bytes: its PSBEND (02 23) ends it.
    let end = buf[p + 16..]
        .windows(2)
        .take(128)
        .position(|w| w == [0x02, 0x23])?
        + p
        + 18;
    (at < end).then_some(p)
}

fn error_text(code: i32) -> String {
    // SAFETY: pt_errstr returns a static C string.
    unsafe { std::ffi::CStr::from_ptr(pt_errstr(-code as pt_error_code)) }
        .to_string_lossy()
        .into_owned()
}

/// Decodes `trace` over the raw image file `image` loaded at `base` (see the module doc).
pub fn decode_lines(trace: &[u8], image: &Path, base: u64, t: Timing) -> String {
    let section = Section {
        load_tsc: None,
        cr3: None,
        path: image.to_path_buf(),
        offset: 0,
        size: 0,
        vaddr: base,
    };
    decode_sections(trace, &[section], t)
}

/// Decodes `trace` over the file `sections` (see the module doc).
pub fn decode_sections(trace: &[u8], sections: &[Section], t: Timing) -> String {
    decode_sections_timed(trace, sections, t, false)
}

/// [`decode_sections`]; with `show_time`, libipt's time on each instruction line
/// ([`decode_case_timed`]).
pub fn decode_sections_timed(trace: &[u8], sections: &[Section], t: Timing, show_time: bool) -> String {
    decode_with(trace, sections, t, show_time, None)
}

/// [`decode_sections_timed`], told the CPU (family, model, stepping) as ptxed's `--cpu` tells
/// it: `pt_config.cpu` set and libipt's workarounds for that part's errata on
/// (`pt_cpu_errata`); `None`: a decoder that is not told the CPU.
pub fn decode_with(
    trace: &[u8],
    sections: &[Section],
    t: Timing,
    show_time: bool,
    cpu: Option<(u16, u8, u8)>,
) -> String {
    decode_filtered(trace, sections, t, show_time, cpu, AddrFilter::default())
}

/// [`decode_with`], told the address filter the trace was made with ([`case_filter`]).
pub fn decode_filtered(
    trace: &[u8],
    sections: &[Section],
    t: Timing,
    show_time: bool,
    cpu: Option<(u16, u8, u8)>,
    filter: AddrFilter,
) -> String {
    decode_styled(trace, sections, t, show_time, cpu, filter, Style::default())
}

/// [`decode_filtered`], decoding and printing in `style`.
pub fn decode_styled(
    trace: &[u8],
    sections: &[Section],
    t: Timing,
    show_time: bool,
    cpu: Option<(u16, u8, u8)>,
    filter: AddrFilter,
    style: Style,
) -> String {
    let mut buf = trace.to_vec();
    buf.push(0); // libipt wants a non-empty buffer; a PAD changes nothing
    let mut out = String::new();
    let eos = -(pt_error_code_pte_eos as i32);
    let names: Vec<CString> = sections
        .iter()
        .map(|s| CString::new(s.path.to_str().expect("a UTF-8 path")).expect("no NUL in the path"))
        .collect();
    // SAFETY: `buf` and `names` outlive the decoder; every out-pointer is a local of the size
    // passed.
    unsafe {
        let mut c: pt_config = std::mem::zeroed();
        c.size = std::mem::size_of::<pt_config>();
        c.begin = buf.as_mut_ptr();
        c.end = buf.as_mut_ptr().add(buf.len());
        c.mtc_freq = t.mtc_freq;
        c.nom_freq = t.nom_freq;
        c.cpuid_0x15_eax = t.cpuid_0x15_eax;
        c.cpuid_0x15_ebx = t.cpuid_0x15_ebx;
        tell_filter(&mut c, filter);
        match style.ptxed {
            true => {
                if let Err(e) = try_tell_cpu(&mut c, cpu) {
                    let _ = writeln!(out, "[0, 0: config error: {e}]");
                }
            }
            false => tell_cpu(&mut c, cpu),
        }
        // The instruction decoder's flags: bit 0 tick events, bit 1 keep the timing calibration
        // over an overflow, bit 2 iflags events.
        let flags = &mut c.flags as *mut pt_conf_flags as *mut u32;
        *flags |= u32::from(style.tick) | u32::from(style.keep_tcal) << 1 | u32::from(style.iflags) << 2;
        let dec = pt_insn_alloc_decoder(&c);
        assert!(!dec.is_null(), "pt_insn_alloc_decoder");
        let add = |s: &Section, name: &CString| {
            let file = std::fs::metadata(&s.path).map(|m| m.len()).unwrap_or(0);
            // A mapping may run past the file's end (its last page): libipt takes what is there.
            let size = match s.size {
                0 => file.saturating_sub(s.offset),
                n => n.min(file.saturating_sub(s.offset)),
            };
            // A section over an earlier one replaces it where they overlap; one of an address
            // space's is used only where the decoder's CR3 (from PIP) is that space's.
            let asid = s.cr3.map(|cr3| pt_asid {
                size: std::mem::size_of::<pt_asid>(),
                cr3,
                vmcs: u64::MAX,
            });
            let rc = pt_image_add_file(
                pt_insn_get_image(dec),
                name.as_ptr(),
                s.offset,
                size,
                asid.as_ref().map_or(std::ptr::null(), |a| a as *const pt_asid),
                s.vaddr,
            );
            assert!(
                rc >= 0,
                "pt_image_add_file {}: {}",
                s.path.display(),
                error_text(rc)
            );
        };
        for (s, name) in sections.iter().zip(&names) {
            if s.load_tsc.is_none() {
                add(s, name);
            }
        }
        // Code written later, loaded when libipt's time reaches the time it was written, as
        // perf applies a perf.data MMAP2 record (pt_insn_time: timing packets decoded so far).
        let mut later: Vec<(u64, usize)> = sections
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.load_tsc.map(|t| (t, k)))
            .collect();
        later.sort();
        let mut later = later.into_iter().peekable();
        if style.ptxed {
            let insns = decode_as_ptxed(dec, &mut out, style);
            pt_insn_free_decoder(dec);
            if style.stat_insn {
                let _ = writeln!(out, "insn: {insns}.");
            }
            return out;
        }
        // The PSB decoding last started again at, so an error there moves on.
        let mut restarted: Option<usize> = None;
        let mut status = pt_insn_sync_forward(dec);
        loop {
            if status < 0 {
                if status == eos {
                    break;
                }
                let _ = writeln!(out, "error {}", error_text(status));
                let mut at = 0u64;
                pt_insn_get_offset(dec, &mut at);
                status = match psb_around(&buf, at as usize) {
                    Some(p) if restarted != Some(p) => {
                        restarted = Some(p);
                        pt_insn_sync_set(dec, p as u64)
                    }
                    _ => pt_insn_sync_forward(dec),
                };
                continue;
            }
            while status >= 0 && status & pt_status_flag_pts_event_pending as i32 != 0 {
                let mut ev: pt_event = std::mem::zeroed();
                status = pt_insn_event(dec, &mut ev, std::mem::size_of::<pt_event>());
                if status >= 0 {
                    event_line(&mut out, &ev, style.event_ip);
                }
            }
            if status < 0 {
                continue;
            }
            if status & pt_status_flag_pts_eos as i32 != 0 {
                break;
            }
            if later.peek().is_some() {
                let (mut now, mut lost_mtc, mut lost_cyc) = (0u64, 0u32, 0u32);
                if pt_insn_time(dec, &mut now, &mut lost_mtc, &mut lost_cyc) >= 0 {
                    while let Some(&(_, k)) = later.peek().filter(|&&(t, _)| t <= now) {
                        add(&sections[k], &names[k]);
                        later.next();
                    }
                }
            }
            let mut insn: pt_insn = std::mem::zeroed();
            status = pt_insn_next(dec, &mut insn, std::mem::size_of::<pt_insn>());
            if status >= 0 {
                let (mut tsc, mut lost_mtc, mut lost_cyc) = (0u64, 0u32, 0u32);
                if show_time && pt_insn_time(dec, &mut tsc, &mut lost_mtc, &mut lost_cyc) >= 0 {
                    let _ = writeln!(out, "{:#x}  tsc: {tsc:x}", insn.ip);
                } else {
                    let _ = writeln!(out, "{:#x}", insn.ip);
                }
            }
        }
        pt_insn_free_decoder(dec);
    }
    out
}

/// Writes `ev` as ptxed prints an event with `--event:ip` (`spec/truth.md`, TR10, TR11): the
/// event's words, then its payload, then `ip:` (or `from:`/`to:`, `at:`) as 16 zero-padded hex
/// digits, each IP left out when libipt suppresses it. `[enabled, ip: …]` (`[resumed, …]` when
/// tracing resumes where it stopped), `[disabled]`, `[interrupt, from: …, to: …]`,
/// `[overflow]`, `[exec mode: 64-bit]`, `[paging, cr3: …]`, `[vmcs, base: …]`, `[begin
/// transaction]` / `[committed]` / `[aborted]`, `[stopped]`, `[ptwrite: …]`, `[cbr: …]`,
/// `[mwait …]`, `[pwre c…]`, `[pwrx …]`, `[exstop]`, `[tick]`, `[mnt: …]`, and the Event
/// Trace events. Status updates are not printed (ptxed leaves them out).
fn event_line(out: &mut String, ev: &pt_event, show_ip: bool) {
    let ip = |name: &str, v: u64| match show_ip {
        true => format!(", {name}: {v:016x}"),
        false => String::new(),
    };
    let shown = |name: &str, v: u64| {
        if ev.ip_suppressed() != 0 || !show_ip {
            String::new()
        } else {
            ip(name, v)
        }
    };
    if ev.status_update() != 0 {
        return;
    }
    // SAFETY: each arm reads the variant `type_` names.
    let line = unsafe {
        let v = &ev.variant;
        match ev.type_ {
            pt_event_type_ptev_enabled => {
                let e = &v.enabled;
                let word = if e.resumed() != 0 { "resumed" } else { "enabled" };
                format!("[{word}{}]", ip("ip", e.ip))
            }
            pt_event_type_ptev_disabled => format!("[disabled{}]", shown("ip", v.disabled.ip)),
            pt_event_type_ptev_async_disabled => {
                let e = &v.async_disabled;
                format!("[disabled{}{}]", ip("at", e.at), shown("ip", e.ip))
            }
            pt_event_type_ptev_async_branch => {
                let e = &v.async_branch;
                format!("[interrupt{}{}]", ip("from", e.from), shown("to", e.to))
            }
            pt_event_type_ptev_overflow => format!("[overflow{}]", shown("ip", v.overflow.ip)),
            pt_event_type_ptev_paging => {
                let e = &v.paging;
                let nr = if e.non_root() != 0 { ", nr" } else { "" };
                format!("[paging, cr3: {:016x}{nr}]", e.cr3)
            }
            pt_event_type_ptev_async_paging => {
                let e = &v.async_paging;
                let nr = if e.non_root() != 0 { ", nr" } else { "" };
                format!("[paging, cr3: {:016x}{nr}{}]", e.cr3, shown("ip", e.ip))
            }
            pt_event_type_ptev_exec_mode => {
                let e = &v.exec_mode;
                let mode = match e.mode {
                    pt_exec_mode_ptem_16bit => "16-bit",
                    pt_exec_mode_ptem_32bit => "32-bit",
                    pt_exec_mode_ptem_64bit => "64-bit",
                    _ => "unknown",
                };
                format!("[exec mode: {mode}{}]", shown("ip", e.ip))
            }
            pt_event_type_ptev_tsx => {
                let e = &v.tsx;
                let word = if e.aborted() != 0 {
                    "aborted"
                } else if e.speculative() != 0 {
                    "begin transaction"
                } else {
                    "committed"
                };
                format!("[{word}{}]", shown("ip", e.ip))
            }
            pt_event_type_ptev_stop => "[stopped]".to_string(),
            pt_event_type_ptev_vmcs => format!("[vmcs, base: {:016x}]", v.vmcs.base),
            pt_event_type_ptev_async_vmcs => {
                let e = &v.async_vmcs;
                format!("[vmcs, base: {:016x}{}]", e.base, shown("ip", e.ip))
            }
            pt_event_type_ptev_exstop => format!("[exstop{}]", shown("ip", v.exstop.ip)),
            pt_event_type_ptev_mwait => {
                let e = &v.mwait;
                format!("[mwait {:x} {:x}{}]", e.hints, e.ext, shown("ip", e.ip))
            }
            pt_event_type_ptev_pwre => {
                let e = &v.pwre;
                let hw = if e.hw() != 0 { " hw" } else { "" };
                format!("[pwre c{}.{}{hw}]", e.state, e.sub_state)
            }
            pt_event_type_ptev_pwrx => {
                let e = &v.pwrx;
                let why = if e.interrupt() != 0 {
                    "int: "
                } else if e.store() != 0 {
                    "st: "
                } else if e.autonomous() != 0 {
                    "hw: "
                } else {
                    ""
                };
                format!("[pwrx {why}c{} (c{})]", e.last, e.deepest)
            }
            pt_event_type_ptev_ptwrite => {
                let e = &v.ptwrite;
                format!("[ptwrite: {:x}{}]", e.payload, shown("ip", e.ip))
            }
            pt_event_type_ptev_tick => format!("[tick{}]", shown("ip", v.tick.ip)),
            pt_event_type_ptev_cbr => format!("[cbr: {:x}]", v.cbr.ratio),
            pt_event_type_ptev_mnt => format!("[mnt: {:x}]", v.mnt.payload),
            pt_event_type_ptev_iflags => {
                let e = &v.iflags;
                let word = if e.iflag() != 0 { "enabled" } else { "disabled" };
                format!("[interrupts {word}{}]", shown("ip", e.ip))
            }
            pt_event_type_ptev_interrupt => {
                let e = &v.interrupt;
                let cr2 = if e.has_cr2() != 0 {
                    format!(", cr2: {:016x}", e.cr2)
                } else {
                    String::new()
                };
                format!("[interrupt {}{cr2}{}]", e.vector, shown("ip", e.ip))
            }
            pt_event_type_ptev_iret => format!("[iret{}]", shown("ip", v.iret.ip)),
            pt_event_type_ptev_smi => format!("[smi{}]", shown("ip", v.smi.ip)),
            pt_event_type_ptev_rsm => format!("[rsm{}]", shown("ip", v.rsm.ip)),
            pt_event_type_ptev_sipi => format!("[sipi: {:x}]", v.sipi.vector),
            pt_event_type_ptev_init => format!("[init{}]", shown("ip", v.init.ip)),
            pt_event_type_ptev_vmentry => format!("[vmentry{}]", shown("ip", v.vmentry.ip)),
            pt_event_type_ptev_vmexit => {
                let e = &v.vmexit;
                let mut words = String::from("vmexit");
                if e.has_vector() != 0 {
                    let _ = write!(words, ", intr: {}", e.vector);
                }
                if e.has_vmxr() != 0 {
                    let _ = write!(words, ", vmxr: {:016x}", e.vmxr);
                }
                if e.has_vmxq() != 0 {
                    let _ = write!(words, ", vmxq: {:016x}", e.vmxq);
                }
                format!("[{words}{}]", shown("ip", e.ip))
            }
            pt_event_type_ptev_shutdown => format!("[shutdown{}]", shown("ip", v.shutdown.ip)),
            pt_event_type_ptev_uintr => format!("[uintr {}{}]", v.uintr.vector, shown("ip", v.uintr.ip)),
            pt_event_type_ptev_uiret => format!("[uiret{}]", shown("ip", v.uiret.ip)),
            t => format!("[event {t}]"),
        }
    };
    out.push_str(&line);
    out.push('\n');
}

/// The IP ptxed reports an error at after the instruction `insn` (ptxed's `diagnose_insn`):
/// the next instruction's (after its length, at a direct branch's target) when `insn` decoded
/// and the error is not about that instruction's own query, else `insn`'s.
fn error_ip(insn: &pt_insn, status: i32) -> u64 {
    if status == -(pt_error_code_pte_bad_query as i32) || insn.iclass == pt_insn_class_ptic_unknown {
        return insn.ip;
    }
    let bits = match insn.mode {
        pt_exec_mode_ptem_16bit => 16,
        pt_exec_mode_ptem_32bit => 32,
        _ => 64,
    };
    let raw = &insn.raw[..usize::from(insn.size).min(insn.raw.len())];
    let mut d = iced_x86::Decoder::with_ip(bits, raw, insn.ip, iced_x86::DecoderOptions::NONE);
    let i = d.decode();
    if i.is_invalid() {
        return insn.ip;
    }
    match i.op0_kind() {
        iced_x86::OpKind::NearBranch16 | iced_x86::OpKind::NearBranch32 | iced_x86::OpKind::NearBranch64 => {
            i.near_branch_target()
        }
        _ => insn.ip.wrapping_add(i.len() as u64),
    }
}

/// ptxed's loop over the instruction decoder (its `decode_insn` without `--resync-on-error`,
/// which libipt 2.1.2 has no `pt_insn_resync` for): synchronize forward; events, then
/// instructions; at an error print it and synchronize forward again; stop at the end of the
/// trace, or when synchronizing fails twice at the same place. Returns the instructions
/// decoded (ptxed's `insn` statistic).
///
/// # Safety
///
/// `dec` is a live instruction decoder.
unsafe fn decode_as_ptxed(dec: *mut pt_insn_decoder, out: &mut String, style: Style) -> u64 {
    // SAFETY: the caller's promise; every out-pointer is a local of the size passed.
    unsafe {
        let eos = -(pt_error_code_pte_eos as i32);
        let ignored = -(pt_error_code_pte_event_ignored as i32);
        let pending = pt_status_flag_pts_event_pending as i32;
        let offset = || {
            let mut at = 0u64;
            pt_insn_get_offset(dec, &mut at);
            at
        };
        let mut sync = 0u64;
        let mut insns = 0u64;
        loop {
            let mut insn: pt_insn = std::mem::zeroed();
            let mut status = pt_insn_sync_forward(dec);
            if status < 0 {
                if status == eos {
                    return insns;
                }
                let at = offset();
                let _ = writeln!(out, "[{at:x}, 0: sync error: {}]", error_text(status));
                if at <= sync {
                    return insns;
                }
                sync = at;
                continue;
            }
            loop {
                while status >= 0 && status & pending != 0 {
                    let mut ev: pt_event = std::mem::zeroed();
                    status = pt_insn_event(dec, &mut ev, std::mem::size_of::<pt_event>());
                    if status >= 0 && !style.quiet {
                        event_line(out, &ev, style.event_ip);
                    }
                }
                if status < 0 {
                    break;
                }
                if status & pt_status_flag_pts_eos as i32 != 0 {
                    if status & pt_status_flag_pts_ip_suppressed as i32 == 0 && !style.quiet {
                        out.push_str("[end of trace]\n");
                    }
                    return insns;
                }
                status = pt_insn_next(dec, &mut insn, std::mem::size_of::<pt_insn>());
                if status == ignored {
                    status = pending;
                    continue;
                }
                if status < 0 && insn.iclass == pt_insn_class_ptic_unknown {
                    break;
                }
                insns += 1;
                if !style.quiet {
                    let mark = if insn.speculative() != 0 { "? " } else { "" };
                    let _ = writeln!(out, "{mark}{:016x}", insn.ip);
                }
                if status < 0 {
                    break;
                }
            }
            if status == eos {
                return insns;
            }
            let _ = writeln!(
                out,
                "[{:x}, {:x}: error: {}]",
                offset(),
                error_ip(&insn, status),
                error_text(status)
            );
        }
    }
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let show_time = args.iter().any(|a| a == "--time");
    let no_cpu = args.iter().any(|a| a == "--no-cpu");
    let Some(case) = args.iter().find(|a| *a != "--time" && *a != "--no-cpu") else {
        eprintln!("usage: libipt_decode CASE_DIR [--time] [--no-cpu]  (a ptemu corpus case or simulate --out directory; --time: libipt's time on each instruction line, `tsc: HEX`; --no-cpu: do not tell libipt the part, so no errata workarounds)");
        std::process::exit(2);
    };
    let case = Path::new(&case);
    let lines = match no_cpu {
        true => decode_case_as(case, None),
        false => decode_case_timed(case, show_time),
    };
    use std::io::Write as _;
    // A reader that stops early (`| head`) ends the run quietly.
    let _ = std::io::stdout().lock().write_all(lines.as_bytes());
}
