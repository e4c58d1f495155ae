//! The text form of packets, written by `ptemu dump` and read by `ptemu asm`.
//!
//! One packet per line: `name args`, optionally preceded by a 16-digit hex offset (ignored on
//! input); `#` starts a comment. Numbers are written in hex (`0x…`); `asm` also takes decimal. Every
//! field that reaches the bytes is in the text, so `dump` then `asm` reproduces a valid stream
//! byte for byte. The grammar, per packet, is in `spec/packets.md`.

use super::{IpPayload, Ipc, Packet, PtwSize, Tnt};
use std::fmt::{self, Write};

/// Writes the arguments of `p` (everything after the name).
pub fn write_args(p: &Packet, out: &mut impl Write) -> fmt::Result {
    let flag = |out: &mut dyn Write, on: bool, first: &mut bool, name: &str| -> fmt::Result {
        if on {
            if !*first {
                out.write_str(", ")?;
            }
            *first = false;
            out.write_str(name)?;
        }
        Ok(())
    };
    match *p {
        Packet::Pad | Packet::Psb | Packet::PsbEnd | Packet::Ovf | Packet::TraceStop => Ok(()),
        Packet::Tnt8(t) | Packet::Tnt64(t) => {
            for i in 0..t.count {
                out.write_char(if t.taken(i) { '!' } else { '.' })?;
            }
            Ok(())
        }
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => match ip.ipc {
            Ipc::Suppressed => out.write_str("0"),
            ipc => write!(out, "{}: {:#x}", ipc as u8, ip.raw),
        },
        Packet::Pip { cr3, nr } => write!(out, "{cr3:#x}{}", if nr { ", nr" } else { "" }),
        Packet::ModeExec { csl, csd, if_ } => {
            let mut first = true;
            flag(out, csl, &mut first, "cs.l")?;
            flag(out, csd, &mut first, "cs.d")?;
            flag(out, if_, &mut first, "if")
        }
        Packet::ModeTsx { intx, abrt } => {
            let mut first = true;
            flag(out, intx, &mut first, "intx")?;
            flag(out, abrt, &mut first, "abrt")
        }
        Packet::Cbr { ratio } => write!(out, "{ratio:#x}"),
        Packet::Tsc { tsc } => write!(out, "{tsc:#x}"),
        Packet::Mtc { ctc } => write!(out, "{ctc:#x}"),
        Packet::Tma { ctc, fc } => write!(out, "{ctc:#x}, {fc:#x}"),
        Packet::Cyc { value } => write!(out, "{value:#x}"),
        Packet::Vmcs { base } => write!(out, "{base:#x}"),
        Packet::Mnt { payload } => write!(out, "{payload:#x}"),
        Packet::Ptw { size, payload, ip } => {
            let n = if size == PtwSize::Four { 4 } else { 8 };
            write!(out, "{n}: {payload:#x}{}", if ip { ", ip" } else { "" })
        }
        Packet::Exstop { ip } | Packet::Bep { ip } => out.write_str(if ip { "ip" } else { "" }),
        Packet::Mwait { hints, ext } => write!(out, "{hints:#x}, {ext:#x}"),
        Packet::Pwre { state, sub_state, hw } => {
            write!(
                out,
                "c{}.{}{}",
                (state + 1) & 0xf,
                (sub_state + 1) & 0xf,
                if hw { ", hw" } else { "" }
            )
        }
        Packet::Pwrx { last, deepest, wake } => {
            write!(
                out,
                "c{}, c{}, wake {wake:#x}",
                (last + 1) & 0xf,
                (deepest + 1) & 0xf
            )
        }
        Packet::Bbp { sz4, ty } => write!(out, "{ty:#x}{}", if sz4 { ", sz4" } else { "" }),
        Packet::Bip { id, payload, .. } => write!(out, "{id:#x}: {payload:#x}"),
        Packet::Cfe { ty, vector, ip } => write!(out, "{ty:#x}: {vector:#x}{}", if ip { ", ip" } else { "" }),
        Packet::Evd { ty, payload } => write!(out, "{ty:#x}: {payload:#x}"),
        Packet::Trig { trbv, ip, mult, icnt } => {
            write!(out, "{trbv:#x}")?;
            if ip {
                out.write_str(", ip")?;
            }
            if mult {
                out.write_str(", mult")?;
            }
            if let Some(n) = icnt {
                write!(out, ", icnt {n:#x}")?;
            }
            Ok(())
        }
    }
}

/// The whole line body: name, padding and arguments.
pub fn to_text(p: &Packet) -> String {
    let mut s = String::with_capacity(32);
    push_text(p, &mut s);
    s
}

/// Appends the line body of `p` ([`to_text`]'s text) to `out` without allocating: the name padded
/// to 10 columns and a space, the arguments, no trailing space. The packets of a typical trace
/// (TNT, TIP, FUP, PAD, PSB, numbers) are written by hand; the rest through [`write_args`].
pub fn push_text(p: &Packet, out: &mut String) {
    let start = out.len();
    let name = p.name();
    out.push_str(name);
    for _ in name.len()..10 {
        out.push(' ');
    }
    out.push(' ');
    match *p {
        Packet::Pad | Packet::Psb | Packet::PsbEnd | Packet::Ovf | Packet::TraceStop => {}
        Packet::Tnt8(t) | Packet::Tnt64(t) => {
            let mut bits = [0u8; 64];
            let n = usize::from(t.count).min(64);
            for (i, b) in bits[..n].iter_mut().enumerate() {
                *b = if t.taken(i as u8) { b'!' } else { b'.' };
            }
            out.push_str(std::str::from_utf8(&bits[..n]).expect("ASCII"));
        }
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => match ip.ipc {
            Ipc::Suppressed => out.push('0'),
            ipc => {
                out.push(char::from(b'0' + ipc as u8));
                out.push_str(": ");
                push_hex(out, ip.raw);
            }
        },
        Packet::Cbr { ratio } => push_hex(out, u64::from(ratio)),
        Packet::Tsc { tsc } => push_hex(out, tsc),
        Packet::Mtc { ctc } => push_hex(out, u64::from(ctc)),
        Packet::Cyc { value } => push_hex(out, value),
        _ => write_args(p, out).expect("writing to a String"),
    }
    while out.len() > start && out.ends_with(' ') {
        out.pop();
    }
}

/// Appends `v` as `{:#x}` writes it: `0x` and the hex digits without leading zeros.
pub fn push_hex(out: &mut String, v: u64) {
    let digits = (64 - v.leading_zeros()).div_ceil(4).max(1) as usize;
    let mut buf = [0u8; 18];
    buf[0] = b'0';
    buf[1] = b'x';
    hex_digits(v, &mut buf[2..2 + digits]);
    out.push_str(std::str::from_utf8(&buf[..2 + digits]).expect("ASCII"));
}

/// Appends `v` as `{:016x}` writes it: 16 hex digits, zero-padded.
pub fn push_hex16(out: &mut String, v: u64) {
    let mut buf = [0u8; 16];
    hex_digits(v, &mut buf);
    out.push_str(std::str::from_utf8(&buf).expect("ASCII"));
}

/// The low `out.len()` hex digits of `v`, most significant first, lowercase.
fn hex_digits(mut v: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for d in out.iter_mut().rev() {
        *d = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// State the parser keeps between lines: whether a BBP block is open (and its item size).
#[derive(Clone, Copy, Debug, Default)]
pub struct ParseState {
    block: Option<bool>,
}

/// `s` as an error message quotes it: at most 40 characters, then `…` (a bad line may be huge).
fn clip(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// Decimal digits, or `0x` and hex digits: no sign, nothing else.
fn num(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (s, 10),
    };
    let r = if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        u64::from_str_radix(digits, radix).ok()
    } else {
        None
    };
    r.ok_or_else(|| format!("`{}` is not a number", clip(s)))
}

fn small<T: TryFrom<u64>>(s: &str, what: &str) -> Result<T, String> {
    let v = num(s)?;
    T::try_from(v).map_err(|_| format!("{what} {v:#x} is too large"))
}

/// `a: b` → (a, b).
fn pair(s: &str) -> Result<(&str, &str), String> {
    s.split_once(':')
        .map(|(a, b)| (a.trim(), b.trim()))
        .ok_or_else(|| format!("expected `a: b`, got `{}`", clip(s)))
}

fn cstate(s: &str) -> Result<u8, String> {
    let n: u8 = s
        .trim()
        .strip_prefix('c')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("`{}` is not a C-state (c0..c15)", clip(s)))?;
    if n > 15 {
        return Err(format!("`{}` is not a C-state (c0..c15)", clip(s)));
    }
    Ok((n + 15) & 0xf)
}

fn ip_payload(args: &str) -> Result<IpPayload, String> {
    if args.trim() == "0" {
        return Ok(IpPayload::SUPPRESSED);
    }
    let (ipc, raw) = pair(args)?;
    let ipc =
        Ipc::from_bits(small(ipc, "IPBytes")?).ok_or_else(|| format!("IPBytes {} is reserved", clip(ipc)))?;
    let raw = num(raw)?;
    if raw & !ipc.mask() != 0 {
        return Err(format!("payload {raw:#x} does not fit IPBytes {}", ipc as u8));
    }
    Ok(IpPayload { ipc, raw })
}

/// A line of the text form that is not a packet: what is wrong with it (the caller adds the file
/// and line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct TextError {
    /// What is wrong, in words.
    pub message: String,
}

/// Parses one line; `Ok(None)` for blank and comment lines (and dump's `[…]` annotations).
pub fn parse_line(line: &str, st: &mut ParseState) -> Result<Option<Packet>, TextError> {
    let Some((name, rest)) = split_line(line) else {
        return Ok(None);
    };
    let args = Args::new(name, rest);
    let text_error = |message| TextError { message };
    let p = match packet(&args, st).map_err(text_error)? {
        Some(p) => p,
        None => return Ok(None),
    };
    // The encoder checks the field ranges; report them here with the line.
    let mut buf = [0u8; super::MAX_PACKET_LEN];
    p.encode_into(&mut buf).map_err(|e| text_error(e.to_string()))?;
    Ok(Some(p))
}

/// The packet name and the rest of a line, without its comment and `dump`'s offset column;
/// `None` for a blank, comment-only or annotation (`[…]`) line.
fn split_line(line: &str) -> Option<(&str, &str)> {
    let line = line.split('#').next().unwrap_or("").trim();
    if line.is_empty() || line.starts_with('[') {
        return None;
    }
    let mut words = line.splitn(2, char::is_whitespace);
    let mut name = words.next().unwrap_or("");
    let mut rest = words.next().unwrap_or("").trim();
    if name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        // An offset column, as `dump` writes it.
        let mut w = rest.splitn(2, char::is_whitespace);
        name = w.next().unwrap_or("");
        rest = w.next().unwrap_or("").trim();
    }
    Some((name, rest))
}

/// A packet's name and its arguments: the text after the name, and its comma-separated items.
struct Args<'a> {
    name: &'a str,
    rest: &'a str,
    list: Vec<&'a str>,
}

impl<'a> Args<'a> {
    fn new(name: &'a str, rest: &'a str) -> Self {
        let list = rest.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        Args { name, rest, list }
    }

    /// Which of the `allowed` flag words appear among the items from `from` on (each at most once,
    /// nothing else).
    fn flags(&self, allowed: &[&str], from: usize) -> Result<Vec<bool>, String> {
        let given = &self.list[from.min(self.list.len())..];
        for f in given {
            if !allowed.contains(f) {
                return Err(format!("`{}` is not one of {allowed:?}", clip(f)));
            }
            if given.iter().filter(|g| *g == f).count() > 1 {
                return Err(format!("`{f}` is given twice"));
            }
        }
        Ok(allowed.iter().map(|a| given.contains(a)).collect())
    }

    /// Whether the one flag `word` is given among the items from `from` on.
    fn flag(&self, word: &str, from: usize) -> Result<bool, String> {
        Ok(self.flags(&[word], from)?[0])
    }

    /// The first item.
    fn first(&self) -> Result<&'a str, String> {
        self.list
            .first()
            .copied()
            .ok_or_else(|| format!("{} needs arguments", self.name))
    }

    /// The argument of a packet that takes exactly one.
    fn only(&self) -> Result<&'a str, String> {
        match self.list.len() {
            1 => Ok(self.list[0]),
            0 => Err(format!("{} needs an argument", self.name)),
            _ => Err(format!(
                "{} takes one argument, not `{}`",
                self.name,
                clip(self.rest)
            )),
        }
    }
}

/// The packet `args` names; `None` for an empty name.
fn packet(args: &Args<'_>, st: &mut ParseState) -> Result<Option<Packet>, String> {
    let (name, rest, list) = (args.name, args.rest, &args.list);
    if matches!(name, "pad" | "psb" | "psbend" | "ovf" | "stop") && !rest.is_empty() {
        return Err(format!("{name} takes no arguments, not `{}`", clip(rest)));
    }
    Ok(Some(match name {
        "pad" => Packet::Pad,
        "psb" => Packet::Psb,
        "psbend" => Packet::PsbEnd,
        "ovf" => Packet::Ovf,
        "stop" => Packet::TraceStop,
        "tnt.8" | "tnt.64" => tnt(name, rest)?,
        "tip" => Packet::Tip(ip_payload(rest)?),
        "tip.pge" => Packet::TipPge(ip_payload(rest)?),
        "tip.pgd" => Packet::TipPgd(ip_payload(rest)?),
        "fup" => Packet::Fup(ip_payload(rest)?),
        "pip" => Packet::Pip {
            cr3: num(args.first()?)?,
            nr: args.flag("nr", 1)?,
        },
        "mode.exec" => {
            let f = args.flags(&["cs.l", "cs.d", "if"], 0)?;
            Packet::ModeExec {
                csl: f[0],
                csd: f[1],
                if_: f[2],
            }
        }
        "mode.tsx" => {
            let f = args.flags(&["intx", "abrt"], 0)?;
            Packet::ModeTsx {
                intx: f[0],
                abrt: f[1],
            }
        }
        "cbr" => Packet::Cbr {
            ratio: small(args.only()?, "ratio")?,
        },
        "tsc" => Packet::Tsc {
            tsc: num(args.only()?)?,
        },
        "mtc" => Packet::Mtc {
            ctc: small(args.only()?, "ctc")?,
        },
        "tma" if list.len() == 2 => Packet::Tma {
            ctc: small(list[0], "ctc")?,
            fc: small(list[1], "fc")?,
        },
        "cyc" => Packet::Cyc {
            value: num(args.only()?)?,
        },
        "vmcs" => Packet::Vmcs {
            base: num(args.only()?)?,
        },
        "mnt" => Packet::Mnt {
            payload: num(args.only()?)?,
        },
        "ptw" => ptw(args)?,
        "exstop" => Packet::Exstop {
            ip: args.flag("ip", 0)?,
        },
        "bep" => {
            st.block = None;
            Packet::Bep {
                ip: args.flag("ip", 0)?,
            }
        }
        "mwait" if list.len() == 2 => Packet::Mwait {
            hints: small(list[0], "hints")?,
            ext: small(list[1], "ext")?,
        },
        "pwre" => pwre(args)?,
        "pwrx" if list.len() == 3 => {
            let wake = list[2].strip_prefix("wake").ok_or("pwrx takes cL, cD, wake N")?;
            Packet::Pwrx {
                last: cstate(list[0])?,
                deepest: cstate(list[1])?,
                wake: small(wake, "wake")?,
            }
        }
        "bbp" => {
            let sz4 = args.flag("sz4", 1)?;
            st.block = Some(sz4);
            Packet::Bbp {
                sz4,
                ty: small(args.first()?, "type")?,
            }
        }
        "bip" => {
            let sz4 = st.block.ok_or("bip outside a bbp block")?;
            let (id, payload) = pair(args.only()?)?;
            Packet::Bip {
                id: small(id, "id")?,
                payload: num(payload)?,
                sz4,
            }
        }
        "cfe" => {
            let (ty, vector) = pair(args.first()?)?;
            Packet::Cfe {
                ty: small(ty, "type")?,
                vector: small(vector, "vector")?,
                ip: args.flag("ip", 1)?,
            }
        }
        "evd" => {
            let (ty, payload) = pair(args.only()?)?;
            Packet::Evd {
                ty: small(ty, "type")?,
                payload: num(payload)?,
            }
        }
        "trig" => trig(args)?,
        "" => return Ok(None),
        other => {
            return Err(format!(
                "unknown packet `{}` (or wrong number of arguments)",
                clip(other)
            ))
        }
    }))
}

/// `tnt.8` or `tnt.64` with bits `!` (taken) and `.` (not taken).
fn tnt(name: &str, rest: &str) -> Result<Packet, String> {
    let mut taken = Vec::new();
    for c in rest.chars().filter(|c| !c.is_whitespace()) {
        match c {
            '!' => taken.push(true),
            '.' => taken.push(false),
            _ => return Err(format!("TNT bits are `!` (taken) and `.` (not taken), not `{c}`")),
        }
    }
    if taken.len() > 64 {
        return Err("too many TNT bits".into());
    }
    let t = Tnt::from_outcomes(&taken);
    Ok(if name == "tnt.8" {
        Packet::Tnt8(t)
    } else {
        Packet::Tnt64(t)
    })
}

/// `ptw 4|8: PAYLOAD[, ip]`.
fn ptw(args: &Args<'_>) -> Result<Packet, String> {
    let (n, payload) = pair(args.first()?)?;
    let size = match n {
        "4" => PtwSize::Four,
        "8" => PtwSize::Eight,
        _ => return Err(format!("PTW size is 4 or 8, not {}", clip(n))),
    };
    Ok(Packet::Ptw {
        size,
        payload: num(payload)?,
        ip: args.flag("ip", 1)?,
    })
}

/// `pwre cN.M[, hw]`.
fn pwre(args: &Args<'_>) -> Result<Packet, String> {
    let (state, sub) = args.first()?.split_once('.').ok_or("pwre takes cN.M")?;
    let sub: u8 = small(sub, "sub C-state")?;
    if sub > 15 {
        return Err(format!("sub C-state {sub} is not 0..15"));
    }
    Ok(Packet::Pwre {
        state: cstate(state)?,
        sub_state: (sub + 15) & 0xf,
        hw: args.flag("hw", 1)?,
    })
}

/// `trig TRBV[, ip][, mult][, icnt N]`.
fn trig(args: &Args<'_>) -> Result<Packet, String> {
    let list = &args.list;
    let mut icnt = None;
    let (mut ip, mut mult) = (false, false);
    for w in &list[1.min(list.len())..] {
        let word = w.split_whitespace().next().unwrap_or("");
        let twice = match word {
            "ip" => std::mem::replace(&mut ip, true),
            "mult" => std::mem::replace(&mut mult, true),
            "icnt" => icnt.is_some(),
            _ => false,
        };
        if twice {
            return Err(format!("`{word}` is given twice"));
        }
        match *w {
            "ip" | "mult" => {}
            w if w.starts_with("icnt") => icnt = Some(small(&w[4..], "icnt")?),
            w => return Err(format!("`{}` is not ip, mult or icnt N", clip(w))),
        }
    }
    Ok(Packet::Trig {
        trbv: small(args.first()?, "trbv")?,
        ip,
        mult,
        icnt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_a_few_shapes() {
        let mut st = ParseState::default();
        for line in [
            "psb",
            "tnt.8      !...!",
            "fup        3: 0xffffffff1000",
            "tip.pgd    0",
            "pip        0xafafa0, nr",
            "mode.exec  cs.l, if",
            "mode.tsx",
            "ptw        4: 0x90abcdef, ip",
            "pwre       c0.0, hw",
            "pwrx       c1, c6, wake 0x1",
            "cfe        0x3: 0xf0, ip",
            "trig       0xa1, ip, mult, icnt 0x17",
        ] {
            let p = parse_line(line, &mut st).unwrap().unwrap();
            assert_eq!(to_text(&p), line);
        }
        assert_eq!(
            parse_line("0000000000000010  psbend  # comment", &mut st).unwrap(),
            Some(Packet::PsbEnd)
        );
        assert!(
            parse_line("tnt.8 !!!!!!!", &mut st).is_err(),
            "seven bits do not fit TNT-8"
        );
        assert!(parse_line("bip 1: 2", &mut st).is_err());
        for extra in [
            "pad pad",
            "psb extra",
            "ovf 1",
            "ptw 8: 0x1, ip, ip",
            "mode.exec cs.l, cs.l",
            "tsc 1, 2",
            "cbr 3 4",
            "trig 0xa1, ip, ip",
            "trig 0xa1, icnt 1, icnt 2",
            "tsc +5",
            "tsc 0x+5",
        ] {
            assert!(parse_line(extra, &mut st).is_err(), "{extra}");
        }
        let long = format!("tsc {}", "9".repeat(1 << 20));
        let e = parse_line(&long, &mut st).unwrap_err();
        assert!(
            e.message.len() < 100,
            "the message quotes a clip of the token: {e}"
        );
        assert!(parse_line("tip 5: 0x10", &mut st).is_err());
    }
}
