//! `@pt` directives: each one's arguments read as pttc reads them, and the bytes libipt's encoder
//! writes for it. Most become a [`Packet`] encoded by ptemu's encoder; the rest are raw bytes:
//! `raw-N`, and the few encodings ptemu's [`Packet`] cannot hold (an empty TNT, and PWRE with the
//! hardware bit, which libipt sets at bit 3 of byte 2 where ptemu, after the SDM, uses bit 7).

use super::ctext::{self, first_number, num, strtoull, to_u64, to_uint, Strtok};
use super::listing::Labels;
use crate::packet::opcode::{EXT, EXT_TNT64, PIP_CR3_MASK, TSC_MASK, VMCS_BASE_MASK};

/// Where libipt puts PWRE's hardware bit: bit 3 of byte 2 (spec/packets.md: the SDM and ptemu
/// use bit 7).
const LIBIPT_PWRE_HW: u8 = 1 << 3;
use crate::packet::{IpPayload, Ipc, Packet, PtwSize, Tnt};

/// What a directive writes to the .pt file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Emit {
    /// A packet, encoded by ptemu's encoder.
    Packet(Packet),
    /// Bytes as they are.
    Raw(Vec<u8>),
}

impl Emit {
    /// The bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Emit::Packet(p) => {
                let mut v = Vec::with_capacity(16);
                p.encode_to_vec(&mut v)
                    .map_err(|e| format!("encoder error: {e}"))?;
                Ok(v)
            }
            Emit::Raw(b) => Ok(b.clone()),
        }
    }
}

/// A no-argument packet's payload must be empty.
fn empty(payload: &str) -> Result<(), String> {
    if payload.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected argument '{payload}'"))
    }
}

/// A cursor over a payload for the directives pttc reads token by token (mode.exec, cfe, evd,
/// trig): spaces and tabs are skipped before each token.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn skip_blanks(&mut self) {
        self.rest = self.rest.trim_start_matches([' ', '\t']);
    }

    fn token(&mut self, t: &str) -> bool {
        self.skip_blanks();
        match self.rest.strip_prefix(t) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    /// `, word` or nothing: whether `word` follows a comma; a comma with anything else after it
    /// is an error.
    fn flag(&mut self, word: &str) -> Result<bool, String> {
        if !self.token(",") {
            return Ok(false);
        }
        match self.token(word) {
            true => Ok(true),
            false => Err(format!("bad argument, expected \"{word}\"")),
        }
    }

    /// An unsigned number prefix (`strtoull` base 0), at most `bits` wide.
    fn uint(&mut self, bits: u32, what: &str) -> Result<u64, String> {
        let (v, n, overflow) =
            strtoull(self.rest, 0).ok_or_else(|| format!("expected {bits}-bit unsigned integer '{what}'"))?;
        if overflow || (bits < 64 && v >> bits != 0) {
            return Err(format!("'{what}' is too big"));
        }
        self.rest = &self.rest[n..];
        Ok(v)
    }
}

/// An optional last argument that can only be `word`: whether it is there.
fn optional_word(token: Option<&str>, word: &str) -> Result<bool, String> {
    match token {
        None => Ok(false),
        Some(t) if t == word => Ok(true),
        Some(other) => Err(format!("unexpected argument '{other}', expected \"{word}\"")),
    }
}

fn ip_packet(payload: &str, labels: &Labels) -> Result<IpPayload, String> {
    let mut t = Strtok::new(payload);
    let ipc_tok = t.next(" :").ok_or("missing ip compression")?;
    let ipc_val = to_uint(ipc_tok, 32).map_err(|e| format!("bad ip compression '{ipc_tok}': {e}"))?;
    let ipc = u8::try_from(ipc_val)
        .ok()
        .and_then(Ipc::from_bits)
        .ok_or_else(|| format!("bad ip compression {ipc_val}: must be 0, 1, 2, 3, 4 or 6"))?;
    let addr_tok = t.next(" :").ok_or("missing ip")?;
    let ip = match addr_tok.strip_prefix('%') {
        Some(label) => labels
            .get(label)
            .ok_or_else(|| format!("undefined label '{label}'"))?,
        None => to_u64(addr_tok, 0).map_err(|e| format!("bad ip '{addr_tok}': {e}"))?,
    };
    if let Some(extra) = t.next(" ") {
        return Err(format!("trailing argument '{extra}'"));
    }
    // libipt writes the low bytes the compression keeps.
    Ok(IpPayload::new(ipc, ip))
}

fn tnt_bits(payload: &str) -> Result<(u64, u32), String> {
    let mut bits = 0u64;
    let mut count = 0u32;
    for c in payload.chars() {
        if c == '.' || (c.is_ascii() && super::ctext::is_c_space(c as u8)) {
            continue;
        }
        count += 1;
        bits <<= 1;
        match c {
            't' => bits |= 1,
            'n' => {}
            _ => {
                return Err(format!(
                    "unexpected character '{c}': expected 't', 'n', '.' or blanks"
                ))
            }
        }
    }
    Ok((bits, count))
}

/// A C-state `c<n>[.<m>]`: the packet's fields are n - 1 and m - 1, modulo 16.
fn c_state(token: Option<&str>, sub_allowed: bool) -> Result<(u8, u8), String> {
    let t = token.ok_or("missing C-state")?;
    let t = t.trim_start();
    let rest = t
        .strip_prefix('c')
        .ok_or_else(|| format!("bad C-state '{t}': expected c<state>[.<sub>]"))?;
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = digits(rest);
    let major: u64 = rest[..n].parse().map_err(|_| format!("bad C-state '{t}'"))?;
    let mut minor = 0u64;
    if let Some(sub) = rest[n..].strip_prefix('.') {
        let m = digits(sub);
        if m > 0 {
            if !sub_allowed {
                return Err(format!("C-state '{t}' cannot have a sub C-state"));
            }
            minor = sub[..m].parse().map_err(|_| format!("bad sub C-state '{t}'"))?;
        }
    }
    if major >= 0xf || minor >= 0xf {
        return Err(format!("C-state '{t}' out of range"));
    }
    Ok((
        (major as u8).wrapping_sub(1) & 0xf,
        (minor as u8).wrapping_sub(1) & 0xf,
    ))
}

/// The bytes of `@pt name(payload)`.
pub fn packet(name: &str, payload: &str, labels: &Labels) -> Result<Emit, String> {
    let p = match name {
        "psb" => empty(payload).map(|_| Packet::Psb)?,
        "psbend" => empty(payload).map(|_| Packet::PsbEnd)?,
        "pad" => empty(payload).map(|_| Packet::Pad)?,
        "ovf" => empty(payload).map(|_| Packet::Ovf)?,
        "stop" => empty(payload).map(|_| Packet::TraceStop)?,
        "tnt" | "tnt64" => {
            let (bits, count) = tnt_bits(payload)?;
            let long = name == "tnt64";
            let max = if long { 47 } else { 6 };
            if count > max {
                return Err(format!("{count} bits do not fit a {name} packet (at most {max})"));
            }
            if count == 0 {
                // Only the stop bit: libipt writes it; ptemu's Tnt has no empty form.
                return Ok(Emit::Raw(if long {
                    vec![EXT, EXT_TNT64, 1, 0, 0, 0, 0, 0]
                } else {
                    // A TNT-8 byte: bit 0 clear, the stop bit (bit 1) and no bits below it.
                    vec![0b10]
                }));
            }
            let t = Tnt {
                bits,
                count: count as u8,
            };
            if long {
                Packet::Tnt64(t)
            } else {
                Packet::Tnt8(t)
            }
        }
        "tip" => Packet::Tip(ip_packet(payload, labels)?),
        "tip.pge" => Packet::TipPge(ip_packet(payload, labels)?),
        "tip.pgd" => Packet::TipPgd(ip_packet(payload, labels)?),
        "fup" => Packet::Fup(ip_packet(payload, labels)?),
        "mode.exec" => {
            let mut c = Cursor { rest: payload };
            let (csl, csd) = if c.token("64bit") {
                (true, false)
            } else if c.token("32bit") {
                (false, true)
            } else if c.token("16bit") {
                (false, false)
            } else {
                return Err("bad argument, expected \"16bit\", \"32bit\" or \"64bit\"".into());
            };
            let if_ = c.flag("if")?;
            Packet::ModeExec { csl, csd, if_ }
        }
        "mode.tsx" => {
            let (intx, abrt) = match payload {
                "begin" => (true, false),
                "abort" => (false, true),
                "commit" => (false, false),
                _ => return Err("argument must be one of \"begin\", \"abort\" or \"commit\"".into()),
            };
            Packet::ModeTsx { intx, abrt }
        }
        "pip" => {
            let mut t = Strtok::new(payload);
            let cr3 = num(t.next(" ,"), 64, "cr3")?;
            let nr = optional_word(t.next(" ,"), "nr")?;
            Packet::Pip {
                cr3: cr3 & PIP_CR3_MASK,
                nr,
            }
        }
        "tsc" => Packet::Tsc {
            tsc: first_number(payload, 64, "tsc")? & TSC_MASK,
        },
        "cbr" => Packet::Cbr {
            ratio: first_number(payload, 8, "ratio")? as u8,
        },
        "tma" => {
            let mut t = Strtok::new(payload);
            let mut field = |delims: &str, what: &str| -> Result<u16, String> {
                let tok = t.next(delims).ok_or_else(|| format!("missing {what}"))?;
                // strtol: a signed number, all of the token.
                let (neg, body) = match tok.trim_start().strip_prefix('-') {
                    Some(b) => (true, b),
                    None => (
                        false,
                        tok.trim_start().strip_prefix('+').unwrap_or(tok.trim_start()),
                    ),
                };
                let v = to_u64(body, 0).map_err(|e| format!("bad {what} '{tok}': {e}"))?;
                if !neg && v > 0xffff {
                    return Err(format!("{what} '{tok}' is too big"));
                }
                Ok(if neg { (v as u16).wrapping_neg() } else { v as u16 })
            };
            let ctc = field(",", "ctc")?;
            let fc = field(" ,", "fc")?;
            if let Some(extra) = t.next(" ") {
                return Err(format!("trailing argument '{extra}'"));
            }
            if fc > 0x1ff {
                return Err(format!("fc {fc:#x} does not fit 9 bits"));
            }
            Packet::Tma { ctc, fc }
        }
        "mtc" => Packet::Mtc {
            ctc: first_number(payload, 8, "ctc")? as u8,
        },
        "cyc" => Packet::Cyc {
            value: first_number(payload, 64, "cycles")?,
        },
        "vmcs" => Packet::Vmcs {
            base: first_number(payload, 64, "base")? & VMCS_BASE_MASK,
        },
        "mnt" => Packet::Mnt {
            payload: first_number(payload, 64, "payload")?,
        },
        "exstop" => match payload {
            "ip" => Packet::Exstop { ip: true },
            "" => Packet::Exstop { ip: false },
            _ => return Err(format!("unexpected argument '{payload}', expected \"ip\"")),
        },
        "mwait" => {
            let mut t = Strtok::new(payload);
            let first = t.next(",").filter(|s| !s.is_empty());
            let hints = num(first, 32, "hints")? as u32;
            let ext = num(t.next(" ,"), 32, "extensions")? as u32;
            if let Some(extra) = t.next(" ") {
                return Err(format!("trailing argument '{extra}'"));
            }
            Packet::Mwait { hints, ext }
        }
        "pwre" => {
            let mut t = Strtok::new(payload);
            let (state, sub_state) = c_state(t.next(" , "), true)?;
            let hw = optional_word(t.next(" ,"), "hw")?;
            let pwre = Emit::Packet(Packet::Pwre {
                state,
                sub_state,
                hw: false,
            });
            if hw {
                // libipt's hardware bit, where ptemu (after the SDM) writes bit 7.
                let mut v = pwre.bytes()?;
                v[2] |= LIBIPT_PWRE_HW;
                return Ok(Emit::Raw(v));
            }
            return Ok(pwre);
        }
        "pwrx" => {
            let mut t = Strtok::new(payload);
            let wake = match t.next(":") {
                Some("int") => 0x1,
                Some("st") => 0x4,
                Some("hw") => 0x8,
                Some(other) => return Err(format!("bad wake reason '{other}': expected int, st or hw")),
                None => return Err("missing wake reason".into()),
            };
            let (last, _) = c_state(t.next(" ,"), false)?;
            let (deepest, _) = c_state(t.next(" ,"), false)?;
            Packet::Pwrx { last, deepest, wake }
        }
        "ptw" => {
            let mut t = Strtok::new(payload);
            let plc = num(t.next(":"), 8, "payload size")?;
            let value = num(t.next(", "), 64, "payload")?;
            let ip = optional_word(t.next(" "), "ip")?;
            let (size, payload) = match plc {
                0 => (PtwSize::Four, value & 0xffff_ffff),
                1 => (PtwSize::Eight, value),
                _ => return Err(format!("payload size {plc} must be 0 or 1")),
            };
            Packet::Ptw { size, payload, ip }
        }
        "cfe" => {
            let mut c = Cursor { rest: payload };
            let ty = c.uint(8, "type")? as u8;
            let vector = if c.token(":") {
                c.uint(8, "vector")? as u8
            } else {
                match ty {
                    0x01 | 0x05 | 0x09 | 0x0c | 0x0e => {
                        return Err(format!("type {ty} needs a 'vector' argument"))
                    }
                    _ => 0,
                }
            };
            let ip = c.flag("ip")?;
            Packet::Cfe {
                ty: ty & 0x1f,
                vector,
                ip,
            }
        }
        "evd" => {
            let mut c = Cursor { rest: payload };
            let ty = c.uint(8, "type")? as u8;
            if !c.token(":") {
                return Err("bad argument, expected ':' separator".into());
            }
            let payload = c.uint(64, "payload")?;
            Packet::Evd {
                ty: ty & 0x1f,
                payload,
            }
        }
        "trig" => {
            let mut c = Cursor { rest: payload };
            let trbv = c.uint(8, "trbv")? as u8;
            let (mut ip, mut mult, mut icnt) = (false, false, None);
            while c.token(",") {
                if c.token("ip") {
                    ip = true;
                } else if c.token("mult") {
                    mult = true;
                } else if c.token("icnt") {
                    if !c.token(":") {
                        return Err("expected ':' after 'icnt'".into());
                    }
                    icnt = Some(c.uint(16, "icnt")? as u16);
                }
            }
            Packet::Trig { trbv, ip, mult, icnt }
        }
        _ => match ctext::raw_le(name, payload) {
            Some(raw) => return raw.map(Emit::Raw),
            None => return Err(format!("unknown directive '{name}'")),
        },
    };
    Ok(Emit::Packet(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(name: &str, payload: &str) -> Vec<u8> {
        let mut labels = Labels::default();
        labels.add("l1", 0x100000).unwrap();
        packet(name, payload, &labels).unwrap().bytes().unwrap()
    }

    fn fails(name: &str, payload: &str) -> bool {
        packet(name, payload, &Labels::default()).is_err()
    }

    #[test]
    fn packets_as_libipt_encodes_them() {
        assert_eq!(bytes("psb", ""), [2, 0x82].repeat(8));
        assert_eq!(bytes("fup", "3: %l1"), [0x7d, 0, 0, 0x10, 0, 0, 0]);
        assert_eq!(bytes("fup", "1: %l1"), [0x3d, 0, 0]);
        assert_eq!(bytes("tip.pgd", "0: 0"), [0x01]);
        assert_eq!(bytes("tnt", "t.t"), [0x0e]);
        assert_eq!(bytes("tnt", "tnnt"), [0x32]);
        assert_eq!(bytes("mode.exec", "64bit"), [0x99, 0x01]);
        assert_eq!(bytes("mode.exec", "32bit, if"), [0x99, 0x06]);
        assert_eq!(bytes("mode.tsx", "abort"), [0x99, 0x22]);
        assert_eq!(
            bytes("pip", "0xcdef000, nr"),
            [0x02, 0x43, 0x01, 0xef, 0xcd, 0, 0, 0]
        );
        assert_eq!(bytes("tsc", "0x1"), [0x19, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes("tma", "0x12, 0x34"), [0x02, 0x73, 0x12, 0, 0, 0x34, 0]);
        assert_eq!(bytes("pwre", "c0.0, hw"), [0x02, 0x22, 0x08, 0xff]);
        assert_eq!(bytes("pwre", "c1.0"), [0x02, 0x22, 0x00, 0x0f]);
        assert_eq!(bytes("pwrx", "int: c1, c6"), [0x02, 0xa2, 0x05, 0x01, 0, 0, 0]);
        assert_eq!(bytes("mwait", "5, 0"), [0x02, 0xc2, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            bytes("ptw", "0: 0x11223344aabbccdd, ip"),
            [0x02, 0x92, 0xdd, 0xcc, 0xbb, 0xaa]
        );
        assert_eq!(bytes("cfe", "2, ip"), [0x02, 0x13, 0x82, 0]);
        assert_eq!(bytes("evd", "1: 5"), [0x02, 0x53, 1, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes("trig", "1, ip, icnt: 7"), [0xd9, 0xc0, 1, 7, 0]);
        assert_eq!(bytes("raw-16", "0x1234"), [0x34, 0x12]);
        assert_eq!(bytes("tnt", ""), [0x02]);
    }

    #[test]
    fn bad_arguments() {
        assert!(fails("psb", "x"));
        assert!(fails("tnt", "ttttttt"));
        assert!(fails("tnt", "tx"));
        assert!(fails("tip", "5: 0"));
        assert!(fails("tip", "3: %nowhere"));
        assert!(fails("tip", "3"));
        assert!(fails("mode.exec", "8bit"));
        assert!(fails("mode.tsx", "begin "));
        assert!(fails("tma", "1, 0x200"));
        assert!(fails("cbr", "256"));
        assert!(fails("ptw", "2: 1"));
        assert!(fails("cfe", "1"));
        assert!(fails("frob", ""));
    }
}
