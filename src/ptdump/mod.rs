//! The text libipt's `ptdump` prints for a trace (`ptemu dump --format ptdump`): one line per
//! packet with ptdump's columns and spellings, its bracketed diagnostics, its last-IP, time and
//! calibration tracking, read the way libipt's packet decoder reads (module `read`) and timed
//! with libipt's arithmetic (module [`time`]). libipt's tests (`.ptt` files) state the exact
//! text in their `.exp(ptdump)` sections; spec/pttc.md says how many ptemu agrees with and why
//! the others differ. perf_event sideband files (`--pevent:primary FILE`, `--sb:compact`, ...)
//! are printed between the packets in time order (module [`sideband`]).

mod read;
pub mod sideband;
pub mod time;

use read::{Item, ReadErrata, ReadError};
use sideband::Session;
use std::io::{self, Write};
use time::{Tcal, Time, TimeConfig, TimeError, FCR_SHIFT};

use crate::packet::{IpPayload, Ipc, Packet, PtwSize};
use crate::pttc::Cpu;

/// What to print and how to decode, as ptdump's options say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The offset column (`--no-offset` clears it).
    pub show_offset: bool,
    /// The packet's bytes in hex (`--raw`).
    pub raw: bool,
    /// The IP each IP packet leaves in last IP (`--lastip`).
    pub lastip: bool,
    /// The execution mode at MODE.Exec (`--exec-mode`).
    pub exec_mode: bool,
    /// The estimated TSC at timing packets (`--time`).
    pub time: bool,
    /// The calibration at timing packets (`--tcal`).
    pub tcal: bool,
    /// Time and calibration as the change since the last one printed (`--time-delta`).
    pub time_delta: bool,
    /// Do not calibrate (`--no-tcal`).
    pub no_tcal: bool,
    /// A missing TSC is no error: time counts from 0 (`--no-wall-clock`).
    pub no_wall_clock: bool,
    /// An OVF keeps the calibration (`--keep-tcal-on-ovf`).
    pub keep_tcal_on_ovf: bool,
    /// Hide PADs (`--no-pad`).
    pub no_pad: bool,
    /// Hide timing packets (`--no-timing`).
    pub no_timing: bool,
    /// Hide CYCs and leave them out of time (`--no-cyc`).
    pub no_cyc: bool,
    /// Print diagnostics only (`--quiet`).
    pub quiet: bool,
    /// Decode from byte 0 instead of the first PSB (`--no-sync`).
    pub no_sync: bool,
    /// The CPU (`--cpu f/m[/s]`), whose errata change decoding; `None` for `--cpu none`.
    pub cpu: Option<Cpu>,
    /// IA32_RTIT_CTL.MTCFreq (`--mtc-freq`), nominal frequency (`--nom-freq`), CPUID.15H
    /// (`--cpuid-0x15.eax`, `--cpuid-0x15.ebx`).
    pub timing: TimeConfig,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            show_offset: true,
            raw: false,
            lastip: false,
            exec_mode: false,
            time: false,
            tcal: false,
            time_delta: false,
            no_tcal: false,
            no_wall_clock: false,
            keep_tcal_on_ovf: false,
            no_pad: false,
            no_timing: false,
            no_cyc: false,
            quiet: false,
            no_sync: false,
            cpu: None,
            timing: TimeConfig::default(),
        }
    }
}

/// The errata libipt knows for a CPU, the three that change ptdump's output: SKD007, SKZ84
/// (decoding) and SKL168 (calibration). `None` for a CPU libipt does not know.
fn errata(cpu: Cpu) -> Option<(ReadErrata, bool)> {
    let e = |skd007, skz84, skl168| Some((ReadErrata { skd007, skz84 }, skl168));
    match (cpu.family, cpu.model) {
        (6, 0x3d | 0x47 | 0x4f | 0x56) => e(false, false, false),
        (6, 0x4e | 0x5e | 0x8e | 0x9e | 0xa5 | 0xa6) => e(true, false, true),
        (6, 0x55 | 0x6a | 0x6c | 0x8f | 0xcf | 0xad | 0xae) | (0x13, 0x01) => e(false, true, false),
        (6, 0x66 | 0x7d | 0x7e | 0x8c | 0x8d | 0xa7 | 0xa8)
        | (6, 0x97 | 0x9a | 0xba | 0xb7 | 0xbf | 0xc5 | 0xc6 | 0xb5 | 0xaa | 0xac | 0xbd | 0xcc)
        | (6, 0xd5 | 0x5c | 0x5f | 0x7a | 0x86 | 0x96 | 0x9c | 0xb6 | 0xaf | 0xdd)
        | (0x12, 0x01 | 0x03) => e(false, false, false),
        _ => None,
    }
}

/// What a dump found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Packets printed (or, with `quiet`, decoded).
    pub packets: u64,
    /// Bytes that did not decode (each followed by a resync).
    pub decode_errors: u64,
}

/// Text gathered before it is written out.
const FLUSH: usize = 64 << 10;

/// The columns of one line, as ptdump fills them (widths include its buffers' limits).
#[derive(Default)]
struct Line {
    raw: String,
    opcode: &'static str,
    payload: String,
    /// The payload may be long (TNT bits, TRIG): ptdump's extended payload buffer.
    extended: bool,
    id: &'static str,
    tracking: String,
    skip: bool,
    skip_time: bool,
    skip_tcal: bool,
}

impl Line {
    fn clear(&mut self) {
        self.raw.clear();
        self.opcode = "";
        self.payload.clear();
        self.extended = false;
        self.id = "";
        self.tracking.clear();
        self.skip = false;
        self.skip_time = false;
        self.skip_tcal = false;
    }
}

/// Appends formatted text to a String (cannot fail).
macro_rules! put {
    ($s:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = write!($s, $($arg)*);
    }};
}

/// The state ptdump tracks across packets (reset at a resync).
#[derive(Default)]
struct Tracking {
    last_ip: Option<u64>,
    have_ip: bool,
    suppressed: bool,
    tcal: Tcal,
    time: Time,
    tsc: u64,
    fcr: u64,
    in_header: bool,
}

struct Dumper<'o> {
    o: &'o Options,
    sb: &'o mut Session,
    track_time: bool,
    errata: ReadErrata,
    cfg: TimeConfig,
    t: Tracking,
    text: String,
    line: Line,
}

impl Dumper<'_> {
    fn diag(&mut self, offset: u64, what: &str, why: Option<&str>) {
        match why {
            Some(why) => put!(self.text, "[{offset:x}: {what}: {why}]\n"),
            None => put!(self.text, "[{offset:x}: {what}]\n"),
        }
    }

    fn ip_payload(&mut self, ip: IpPayload) {
        let p = &mut self.line.payload;
        match ip.ipc {
            Ipc::Suppressed => p.push_str("0: ????????????????"),
            Ipc::Update16 => put!(p, "1: ????????????{:04x}", ip.raw),
            Ipc::Update32 => put!(p, "2: ????????{:08x}", ip.raw),
            Ipc::Update48 => put!(p, "4: ????{:012x}", ip.raw),
            Ipc::Sext48 => put!(p, "3: {:016x}", (((ip.raw << 16) as i64) >> 16) as u64),
            Ipc::Full => put!(p, "6: {:016x}", ip.raw),
        }
    }

    fn track_last_ip(&mut self, offset: u64, ip: IpPayload) {
        self.line.id = "ip";
        let prev = self.t.last_ip.unwrap_or(0);
        let keep = match ip.ipc {
            Ipc::Suppressed => {
                self.t.suppressed = true;
                None
            }
            Ipc::Update16 => Some(!0xffff),
            Ipc::Update32 => Some(!0xffff_ffff),
            Ipc::Update48 => Some(!0xffff_ffff_ffff),
            Ipc::Sext48 | Ipc::Full => Some(0),
        };
        if let Some(keep) = keep {
            let new = if ip.ipc == Ipc::Sext48 {
                (((ip.raw << 16) as i64) >> 16) as u64
            } else {
                (prev & keep) | (ip.raw & !keep)
            };
            self.t.last_ip = Some(new);
            self.t.have_ip = true;
            self.t.suppressed = false;
        }
        if !self.t.have_ip {
            self.line.tracking.push_str("<unavailable>");
            self.diag(offset, "error tracking last-ip", Some("no ip"));
        } else if self.t.suppressed {
            self.line.tracking.push_str("<suppressed>");
        } else {
            put!(self.line.tracking, "{:016x}", self.t.last_ip.unwrap_or(0));
        }
    }

    fn print_tcal(&mut self, offset: u64) {
        self.line.id = "fcr";
        let fcr = match self.t.tcal.fcr() {
            Ok(f) => f,
            Err(e) => {
                self.line.tracking.push_str("<unavailable>");
                self.diag(offset, "error printing time", Some(e.text()));
                return;
            }
        };
        let scale = (1u64 << FCR_SHIFT) as f64;
        let d = fcr as f64 / scale;
        if self.o.time_delta {
            let old = self.t.fcr as f64 / scale;
            put!(self.line.tracking, "{:+.3}", d - old);
            self.t.fcr = fcr;
        } else {
            put!(self.line.tracking, "{d:.3}");
        }
    }

    fn print_time(&mut self, offset: u64) {
        self.line.id = "tsc";
        let (tsc, status) = self.t.time.tsc();
        if let Err(e) = status {
            if !(e == TimeError::NoTime && self.o.no_wall_clock) {
                self.diag(offset, "error printing time", Some(e.text()));
                self.line.tracking.push_str("<unavailable>");
                return;
            }
        }
        if self.o.time_delta {
            let old = self.t.tsc;
            if old <= tsc {
                put!(self.line.tracking, "+{:x}", tsc - old);
            } else {
                put!(self.line.tracking, "-{:x}", old - tsc);
            }
            self.t.tsc = tsc;
        } else {
            put!(self.line.tracking, "{tsc:016x}");
        }
    }

    fn track_time(&mut self, offset: u64) {
        if self.o.tcal && !self.line.skip_tcal {
            self.print_tcal(offset);
        }
        if self.o.time && !self.line.skip_time {
            self.print_time(offset);
        }
        // The sideband records up to the time now known come before the packet's line.
        let (tsc, _) = self.t.time.tsc();
        self.sb.dump(tsc, &mut self.text);
    }

    fn calibrated(&mut self, offset: u64, r: Result<(), TimeError>) {
        if let Err(e) = r {
            self.diag(offset, "error calibrating time", Some(e.text()));
        }
    }

    fn updated(&mut self, offset: u64, r: Result<(), TimeError>) {
        if let Err(e) = r {
            self.diag(offset, "error updating time", Some(e.text()));
        }
    }

    fn timing(&mut self, offset: u64, p: &Packet) {
        let cfg = self.cfg;
        match *p {
            Packet::Tsc { tsc } => {
                if !self.o.no_tcal {
                    let r = if self.t.in_header {
                        self.t.tcal.header_tsc(tsc)
                    } else {
                        self.t.tcal.update_tsc(tsc);
                        Ok(())
                    };
                    self.calibrated(offset, r);
                }
                self.t.time.update_tsc(tsc);
            }
            Packet::Cbr { ratio } => {
                if !self.o.no_tcal {
                    let r = if self.t.in_header {
                        self.t.tcal.header_cbr(ratio, &cfg)
                    } else {
                        self.t.tcal.update_cbr(ratio, &cfg)
                    };
                    self.calibrated(offset, r);
                }
                let r = self.t.time.update_cbr(ratio);
                self.updated(offset, r);
                self.line.skip_time = true;
            }
            Packet::Tma { ctc, fc } => {
                let r = self.t.time.update_tma(ctc, fc, &cfg);
                self.updated(offset, r);
                self.line.skip_tcal = true;
            }
            Packet::Mtc { ctc } => {
                if !self.o.no_tcal {
                    let r = self.t.tcal.update_mtc(ctc, &cfg);
                    self.calibrated(offset, r);
                }
                let r = self.t.time.update_mtc(ctc, &cfg);
                self.updated(offset, r);
            }
            Packet::Cyc { value } => {
                let mut fcr = 0;
                if !self.o.no_tcal {
                    match self.t.tcal.fcr() {
                        Ok(f) => fcr = f,
                        Err(e) => self.diag(offset, "calibration error", Some(e.text())),
                    }
                    self.t.tcal.update_cyc(value);
                }
                match self.t.time.update_cyc(value, &cfg, fcr) {
                    Err(e) => self.diag(offset, "error updating time", Some(e.text())),
                    Ok(()) if fcr == 0 => self.diag(offset, "error updating time: no calibration", None),
                    Ok(()) => {}
                }
                self.line.skip_tcal = true;
            }
            _ => return,
        }
        self.track_time(offset);
    }

    /// Fills `self.line` for the packet.
    fn packet(&mut self, offset: u64, p: &Packet) {
        let o = self.o;
        let l = &mut self.line;
        match *p {
            Packet::Pad => {
                l.opcode = "pad";
                l.skip = o.no_pad;
            }
            Packet::Psb => {
                l.opcode = "psb";
                if self.track_time {
                    self.t.tcal.update_psb(&self.cfg);
                }
                self.t.in_header = true;
            }
            Packet::PsbEnd => {
                l.opcode = "psbend";
                self.t.in_header = false;
            }
            Packet::Ovf => {
                l.opcode = "ovf";
                if self.track_time {
                    if o.keep_tcal_on_ovf {
                        self.t.tcal.update_ovf();
                    } else {
                        self.t.tcal = Tcal::default();
                    }
                }
            }
            Packet::TraceStop => l.opcode = "stop",
            Packet::Fup(ip) | Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) => {
                l.opcode = match p {
                    Packet::Fup(_) => "fup",
                    Packet::Tip(_) => "tip",
                    Packet::TipPge(_) => "tip.pge",
                    _ => "tip.pgd",
                };
                self.ip_payload(ip);
                if o.lastip {
                    self.track_last_ip(offset, ip);
                }
            }
            Packet::Pip { cr3, nr } => {
                l.opcode = "pip";
                put!(l.payload, "{cr3:x}{}", if nr { ", nr" } else { "" });
                l.id = "cr3";
                put!(l.tracking, "{cr3:016x}");
            }
            Packet::Vmcs { base } => {
                l.opcode = "vmcs";
                put!(l.payload, "{base:x}");
                l.id = "vmcs";
                put!(l.tracking, "{base:016x}");
            }
            Packet::Tnt8(t) | Packet::Tnt64(t) => {
                l.opcode = if matches!(p, Packet::Tnt8(_)) {
                    "tnt.8"
                } else {
                    "tnt.64"
                };
                l.extended = true;
                for i in (0..t.count).rev() {
                    l.payload.push(if t.bits >> i & 1 != 0 { '!' } else { '.' });
                }
            }
            Packet::ModeExec { csl, csd, if_ } => {
                l.opcode = "mode.exec";
                let (d, s) = (if csd { "cs.d" } else { "" }, if csl { "cs.l" } else { "" });
                put!(
                    l.payload,
                    "{d}{}{s}{}{}",
                    if csd && csl { ", " } else { "" },
                    if if_ && (csd || csl) { ", " } else { "" },
                    if if_ { "if" } else { "" }
                );
                if o.exec_mode {
                    l.id = "em";
                    l.tracking.push_str(match (csl, csd) {
                        (true, false) => "64-bit",
                        (true, true) => "unknown",
                        (false, true) => "32-bit",
                        (false, false) => "16-bit",
                    });
                }
            }
            Packet::ModeTsx { intx, abrt } => {
                l.opcode = "mode.tsx";
                put!(
                    l.payload,
                    "{}{}{}",
                    if intx { "intx" } else { "" },
                    if intx && abrt { ", " } else { "" },
                    if abrt { "abrt" } else { "" }
                );
            }
            Packet::Tsc { tsc } => {
                l.opcode = "tsc";
                put!(l.payload, "{tsc:x}");
                l.skip = o.no_timing;
            }
            Packet::Cbr { ratio } => {
                l.opcode = "cbr";
                put!(l.payload, "{ratio:x}");
                l.skip = o.no_timing;
            }
            Packet::Tma { ctc, fc } => {
                l.opcode = "tma";
                put!(l.payload, "{ctc:x}, {fc:x}");
                l.skip = o.no_timing;
            }
            Packet::Mtc { ctc } => {
                l.opcode = "mtc";
                put!(l.payload, "{ctc:x}");
                l.skip = o.no_timing;
            }
            Packet::Cyc { value } => {
                l.opcode = "cyc";
                put!(l.payload, "{value:x}");
                l.skip = o.no_timing || o.no_cyc;
            }
            Packet::Mnt { payload } => {
                l.opcode = "mnt";
                put!(l.payload, "{payload:x}");
            }
            Packet::Exstop { ip } => {
                l.opcode = "exstop";
                if ip {
                    l.payload.push_str("ip");
                }
            }
            Packet::Mwait { hints, ext } => {
                l.opcode = "mwait";
                put!(l.payload, "{hints:08x}, {ext:08x}");
            }
            Packet::Pwre { state, sub_state, hw } => {
                l.opcode = "pwre";
                put!(
                    l.payload,
                    "c{}.{}{}",
                    (state + 1) & 0xf,
                    (sub_state + 1) & 0xf,
                    if hw { ", hw" } else { "" }
                );
            }
            Packet::Pwrx { last, deepest, wake } => {
                l.opcode = "pwrx";
                // Exactly one wake reason names it; none or several are "bad".
                let wr = match wake & 0x0d {
                    0x01 => "int",
                    0x04 => " st",
                    0x08 => " hw",
                    _ => "bad",
                };
                put!(l.payload, "{wr}: c{}, c{}", (last + 1) & 0xf, (deepest + 1) & 0xf);
            }
            Packet::Ptw { size, payload, ip } => {
                l.opcode = "ptw";
                let plc = match size {
                    PtwSize::Four => 0,
                    PtwSize::Eight => 1,
                };
                put!(l.payload, "{plc:x}: {payload:x}{}", if ip { ", ip" } else { "" });
            }
            Packet::Cfe { ty, vector, ip } => {
                l.opcode = "cfe";
                l.id = "type";
                l.tracking.push_str(match ty {
                    1 => "intr",
                    2 => "iret",
                    3 => "smi",
                    4 => "rsm",
                    5 => "sipi",
                    6 => "init",
                    7 => "vmentry",
                    8 => "vmexit",
                    9 => "vmexit_intr",
                    10 => "shutdown",
                    12 => "uintr",
                    13 => "uiret",
                    14 => "swintr",
                    15 => "syscall",
                    _ => "unknown",
                });
                let ip = if ip { ", ip" } else { "" };
                match ty {
                    1 | 9 | 12 | 14 => put!(l.payload, "{ty}: {vector}{ip}"),
                    5 => put!(l.payload, "{ty}: {vector:x}{ip}"),
                    _ => put!(l.payload, "{ty}{ip}"),
                }
            }
            Packet::Evd { ty, payload } => {
                l.opcode = "evd";
                put!(l.payload, "{ty}: {payload:x}");
                l.id = "type";
                l.tracking.push_str(match ty {
                    0 => "cr2",
                    1 => "vmxq",
                    2 => "vmxr",
                    _ => "unknown",
                });
            }
            Packet::Trig { trbv, ip, mult, icnt } => {
                l.opcode = "trig";
                l.extended = true;
                put!(
                    l.payload,
                    "{trbv:02x}{}{}",
                    if ip { ", ip" } else { "" },
                    if mult { ", mult" } else { "" }
                );
                if let Some(n) = icnt {
                    put!(l.payload, ", icnt: {n}");
                }
            }
            // The packet reader makes no others (BBP, BIP and BEP are unknown to libipt).
            _ => l.opcode = "<unknown>",
        }
        if self.track_time && !(matches!(p, Packet::Cyc { .. }) && o.no_cyc) {
            self.timing(offset, p);
        }
    }

    /// Writes the filled line, as ptdump lays its columns out.
    fn print_line(&mut self, offset: u64) {
        let l = &mut self.line;
        if l.skip || self.o.quiet {
            return;
        }
        // ptdump's buffers cut long fields.
        truncate(&mut l.payload, if l.extended { 47 } else { 24 });
        truncate(&mut l.tracking, 16);
        let t = &mut self.text;
        let mut sep = "";
        if self.o.show_offset {
            put!(t, "{offset:016x} ");
            sep = " ";
        }
        if !l.raw.is_empty() {
            put!(t, "{sep}{:<33}", l.raw);
            sep = " ";
        }
        if l.payload.is_empty() {
            put!(t, "{sep}{}", l.opcode);
        } else {
            put!(t, "{sep}{:<10}", l.opcode);
        }
        if !l.id.is_empty() {
            put!(t, " {:<25} {:<5}{}", l.payload, l.id, l.tracking);
        } else if !l.payload.is_empty() {
            put!(t, " {}", l.payload);
        }
        t.push('\n');
    }
}

fn truncate(s: &mut String, n: usize) {
    if s.len() > n {
        s.truncate(n);
    }
}

/// Prints `trace` as libipt's ptdump prints it, into `out`; returns what it found. Only a write
/// error on `out` is an error: bytes that do not decode are printed as ptdump prints them and
/// counted.
pub fn dump(trace: &[u8], o: &Options, out: &mut dyn Write) -> io::Result<Summary> {
    dump_with_sideband(trace, o, &mut Session::default(), out)
}

/// Like [`dump`], with the records of the sideband files of `sb` printed between the packets
/// when the trace's time reaches theirs, and the rest after the last packet.
pub fn dump_with_sideband(
    trace: &[u8],
    o: &Options,
    sb: &mut Session,
    out: &mut dyn Write,
) -> io::Result<Summary> {
    let track_time = o.time || o.tcal || sb.loaded();
    let mut d = Dumper {
        o,
        sb,
        track_time,
        errata: ReadErrata::default(),
        cfg: o.timing,
        t: Tracking::default(),
        text: String::with_capacity(FLUSH + 1024),
        line: Line::default(),
    };
    d.cfg.skl168 = false;
    if let Some(cpu) = o.cpu {
        match errata(cpu) {
            Some((read, skl168)) => {
                d.errata = read;
                d.cfg.skl168 = skl168;
            }
            None => d.diag(0, "failed to determine errata", Some("unknown cpu")),
        }
    }
    let mut summary = Summary::default();
    let start = if o.no_sync {
        Some(0)
    } else {
        read::sync_forward(trace, 0)
    };
    let Some(mut pos) = start else {
        drain(d.sb, &mut d.text, out)?;
        return Ok(summary);
    };
    let mut sync = pos;
    loop {
        if pos >= trace.len() {
            break;
        }
        let offset = pos as u64;
        match read::read_with_errata(trace, pos, d.errata) {
            Ok(r) => {
                summary.packets += 1;
                d.line.clear();
                if o.raw {
                    for b in trace.get(pos..pos + r.size).unwrap_or(&[]) {
                        put!(d.line.raw, "{b:02x}");
                    }
                }
                match r.item {
                    Item::Packet(p) => {
                        if p == Packet::Psb {
                            sync = pos;
                        }
                        d.packet(offset, &p);
                    }
                    Item::Invalid => d.line.opcode = "<invalid>",
                }
                d.print_line(offset);
                pos += r.advance;
            }
            // A packet cut by the end of the trace ends it, silently, as in ptdump.
            Err(ReadError::Eos) => break,
            Err(e) => {
                summary.decode_errors += 1;
                d.diag(offset, "error decoding packet", Some(e.text()));
                match read::resync(trace, pos, sync) {
                    Some(p) => {
                        pos = p;
                        sync = p;
                        d.t = Tracking::default();
                    }
                    None => break,
                }
            }
        }
        if d.text.len() >= FLUSH {
            out.write_all(d.text.as_bytes())?;
            d.text.clear();
        }
    }
    drain(d.sb, &mut d.text, out)?;
    Ok(summary)
}

/// After the trace: `text`, then every sideband record left, written out a [`FLUSH`] at a time.
fn drain(sb: &mut Session, text: &mut String, out: &mut dyn Write) -> io::Result<()> {
    while sb.dump_some(u64::MAX, text, FLUSH) {
        out.write_all(text.as_bytes())?;
        text.clear();
    }
    out.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::PSB_BYTES;

    fn text(trace: &[u8], o: &Options) -> String {
        let mut v = Vec::new();
        dump(trace, o, &mut v).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn columns_as_ptdump_lays_them_out() {
        let mut t = PSB_BYTES.to_vec();
        t.extend([0x99, 0x01, 0x02, 0x23, 0x3d, 0x34, 0x12, 0x0c]);
        assert_eq!(
            text(&t, &Options::default()),
            "0000000000000000  psb\n\
             0000000000000010  mode.exec  cs.l\n\
             0000000000000012  psbend\n\
             0000000000000014  fup        1: ????????????1234\n\
             0000000000000017  tnt.8      !.\n"
        );
        let o = Options {
            show_offset: false,
            lastip: true,
            ..Default::default()
        };
        assert!(text(&t, &o).contains("\nfup        1: ????????????1234       ip   0000000000001234\n"));
        // A suppressed IP before any IP: last IP is unavailable, with ptdump's diagnostic.
        let o = Options { no_sync: true, ..o };
        assert_eq!(
            text(&[0x01], &o),
            "[0: error tracking last-ip: no ip]\ntip.pgd    0: ????????????????       ip   <unavailable>\n"
        );
    }

    #[test]
    fn bad_bytes_are_reported_then_skipped_to_the_next_psb() {
        let mut t = PSB_BYTES.to_vec();
        t.push(0xc9);
        t.extend([0; 7]);
        t.extend(PSB_BYTES);
        let s = text(&t, &Options::default());
        assert_eq!(
            s,
            "0000000000000000  psb\n[10: error decoding packet: unknown opcode]\n0000000000000018  psb\n"
        );
    }

    #[test]
    fn unknown_cpu_is_a_diagnostic() {
        let o = Options {
            cpu: Some(Cpu::parse("0/0").unwrap()),
            ..Default::default()
        };
        assert_eq!(text(&[], &o), "[0: failed to determine errata: unknown cpu]\n");
    }
}
