//! The decoder: bytes to packets, with the byte offset of every error and forward resync to the
//! next PSB (pt-packets.md §1, §3).

use super::ip::{IpPayload, Ipc, LastIp};
use super::opcode::*;
use super::{Packet, PtwSize, Tnt, PSB_BYTES};
use std::fmt;

/// Why bytes are not a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The packet runs past the end of the buffer.
    Truncated {
        /// Bytes the packet needs.
        need: usize,
    },
    /// No packet starts with these bytes.
    BadOpcode,
    /// The opcode is known but the packet is malformed.
    BadPacket(&'static str),
}

/// A decode error and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct DecodeError {
    /// Byte offset of the packet that failed.
    pub offset: u64,
    /// What is wrong.
    pub kind: DecodeErrorKind,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {:#x}: ", self.offset)?;
        match self.kind {
            DecodeErrorKind::Truncated { need } => write!(f, "truncated packet (needs {need} bytes)"),
            DecodeErrorKind::BadOpcode => write!(f, "unknown opcode"),
            DecodeErrorKind::BadPacket(why) => write!(f, "bad packet: {why}"),
        }
    }
}

type R = Result<(Packet, usize), DecodeErrorKind>;

#[inline(always)]
fn need(buf: &[u8], n: usize) -> Result<(), DecodeErrorKind> {
    if buf.len() < n {
        Err(DecodeErrorKind::Truncated { need: n })
    } else {
        Ok(())
    }
}

#[inline(always)]
fn le(buf: &[u8], at: usize, n: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&buf[at..at + n]);
    u64::from_le_bytes(b)
}

#[inline(always)]
fn rsvd(ok: bool, why: &'static str) -> Result<(), DecodeErrorKind> {
    if ok {
        Ok(())
    } else {
        Err(DecodeErrorKind::BadPacket(why))
    }
}

/// What the first byte of a packet says (pt-packets.md §1a: exact bytes first, then CYC, TNT, IP).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Pad,
    Ext,
    Tsc,
    Mtc,
    Mode,
    Trig,
    Cyc,
    /// TNT-8, or a BIP inside a block (`xxxxx100`).
    Tnt,
    Ip,
    Bad,
}

const fn class_of(b: u8) -> Class {
    match b {
        PAD => Class::Pad,
        EXT => Class::Ext,
        TSC => Class::Tsc,
        MTC => Class::Mtc,
        MODE => Class::Mode,
        TRIG => Class::Trig,
        _ if b & CYC_TAG == CYC_TAG => Class::Cyc,
        _ if b & TNT8_BIT0 == 0 => Class::Tnt,
        _ if matches!(b & IP_OPCODE_MASK, TIP | TIP_PGE | TIP_PGD | FUP) => Class::Ip,
        _ => Class::Bad,
    }
}

static CLASS: [Class; 256] = {
    let mut t = [Class::Bad; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = class_of(i as u8);
        i += 1;
    }
    t
};

impl Packet {
    /// Decodes the packet at the start of `buf`; returns it and its length.
    ///
    /// `block` is `Some(sz4)` inside a BBP…BEP block, where BIP packets replace TNT-shaped bytes.
    #[inline(always)]
    pub fn decode(buf: &[u8], block: Option<bool>) -> R {
        let b0 = *buf.first().ok_or(DecodeErrorKind::Truncated { need: 1 })?;
        match CLASS[usize::from(b0)] {
            Class::Tnt => {
                if let Some(sz4) = block {
                    if b0 & BIP_TAG_MASK == BIP_TAG {
                        let n = if sz4 { 4 } else { 8 };
                        need(buf, 1 + n)?;
                        return Ok((
                            Packet::Bip {
                                id: b0 >> 3,
                                payload: le(buf, 1, n),
                                sz4,
                            },
                            1 + n,
                        ));
                    }
                }
                // The highest set bit is the stop bit; the TNT bits sit below it, above bit 0.
                let count = 6 - b0.leading_zeros() as u8;
                let bits = u64::from(b0 >> 1) & ((1 << count) - 1);
                Ok((Packet::Tnt8(Tnt { bits, count }), 1))
            }
            Class::Ip => decode_ip(b0, buf).map(|(p, _, n)| (p, n)),
            Class::Cyc => decode_cyc(buf),
            Class::Pad => Ok((Packet::Pad, 1)),
            Class::Ext => decode_ext(buf),
            Class::Tsc => {
                need(buf, 8)?;
                Ok((Packet::Tsc { tsc: le(buf, 1, 7) }, 8))
            }
            Class::Mtc => {
                need(buf, 2)?;
                Ok((Packet::Mtc { ctc: buf[1] }, 2))
            }
            Class::Mode => {
                need(buf, 2)?;
                let b1 = buf[1];
                match b1 & MODE_LEAF_MASK {
                    MODE_EXEC_LEAF => {
                        rsvd(b1 & 0x18 == 0, "MODE.Exec reserved bits")?;
                        Ok((
                            Packet::ModeExec {
                                csl: b1 & 1 != 0,
                                csd: b1 & 2 != 0,
                                if_: b1 & 4 != 0,
                            },
                            2,
                        ))
                    }
                    MODE_TSX_LEAF => {
                        rsvd(b1 & 0x1c == 0, "MODE.TSX reserved bits")?;
                        Ok((
                            Packet::ModeTsx {
                                intx: b1 & 1 != 0,
                                abrt: b1 & 2 != 0,
                            },
                            2,
                        ))
                    }
                    _ => Err(DecodeErrorKind::BadPacket("MODE leaf")),
                }
            }
            Class::Trig => {
                need(buf, 3)?;
                let b1 = buf[1];
                rsvd(b1 & 0x1f == 0, "TRIG reserved bits")?;
                let (ip, icntv, mult) = (b1 & 0x80 != 0, b1 & 0x40 != 0, b1 & 0x20 != 0);
                let icnt = if icntv {
                    need(buf, 5)?;
                    Some(le(buf, 3, 2) as u16)
                } else {
                    None
                };
                Ok((
                    Packet::Trig {
                        trbv: buf[2],
                        ip,
                        mult,
                        icnt,
                    },
                    if icntv { 5 } else { 3 },
                ))
            }
            Class::Bad => Err(DecodeErrorKind::BadOpcode),
        }
    }
}

/// TIP, TIP.PGE, TIP.PGD or FUP with header byte `b0` at the start of `buf`: the packet, its
/// payload and its length.
#[inline(always)]
fn decode_ip(b0: u8, buf: &[u8]) -> Result<(Packet, IpPayload, usize), DecodeErrorKind> {
    let ipc = Ipc::from_bits(b0 >> 5).ok_or(DecodeErrorKind::BadPacket("reserved IPBytes"))?;
    let n = ipc.payload_len();
    let raw = match buf.get(1..9) {
        // One 8-byte load, masked to the payload.
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")) & ipc.mask(),
        None => {
            need(buf, 1 + n)?;
            le(buf, 1, n)
        }
    };
    let ip = IpPayload { ipc, raw };
    let p = match b0 & IP_OPCODE_MASK {
        TIP => Packet::Tip(ip),
        TIP_PGE => Packet::TipPge(ip),
        TIP_PGD => Packet::TipPgd(ip),
        _ => Packet::Fup(ip),
    };
    Ok((p, ip, 1 + n))
}

/// EXSTOP with its IP bit.
const EXSTOP_IP: u8 = EXT_EXSTOP | EXT_IP_BIT;
/// BEP with its IP bit.
const BEP_IP: u8 = EXT_BEP | EXT_IP_BIT;

fn decode_ext(buf: &[u8]) -> R {
    need(buf, 2)?;
    let b1 = buf[1];
    match b1 {
        EXT_PSB => {
            need(buf, 16)?;
            rsvd(buf[..16] == PSB_BYTES, "PSB pattern")?;
            Ok((Packet::Psb, 16))
        }
        EXT_PSBEND => Ok((Packet::PsbEnd, 2)),
        EXT_OVF => Ok((Packet::Ovf, 2)),
        EXT_STOP => Ok((Packet::TraceStop, 2)),
        EXT_TNT64 => {
            need(buf, 8)?;
            let v = le(buf, 2, 6);
            rsvd(v > 1, "TNT-64 without TNT bits")?;
            let count = 63 - v.leading_zeros() as u8;
            Ok((
                Packet::Tnt64(Tnt {
                    bits: v & ((1 << count) - 1),
                    count,
                }),
                8,
            ))
        }
        EXT_PIP => {
            need(buf, 8)?;
            let p = le(buf, 2, 6);
            Ok((
                Packet::Pip {
                    cr3: (p >> 1) << 5,
                    nr: p & 1 != 0,
                },
                8,
            ))
        }
        EXT_CBR => {
            need(buf, 4)?;
            rsvd(buf[3] == 0, "CBR reserved byte")?;
            Ok((Packet::Cbr { ratio: buf[2] }, 4))
        }
        EXT_TMA => {
            need(buf, 7)?;
            rsvd(buf[4] == 0 && buf[6] & 0xfe == 0, "TMA reserved bits")?;
            Ok((
                Packet::Tma {
                    ctc: le(buf, 2, 2) as u16,
                    fc: u16::from(buf[5]) | u16::from(buf[6] & 1) << 8,
                },
                7,
            ))
        }
        EXT_VMCS => {
            need(buf, 7)?;
            Ok((
                Packet::Vmcs {
                    base: le(buf, 2, 5) << 12,
                },
                7,
            ))
        }
        EXT_MNT => {
            need(buf, 3)?;
            if buf[2] != MNT_LEAF {
                return Err(DecodeErrorKind::BadOpcode);
            }
            need(buf, 11)?;
            Ok((
                Packet::Mnt {
                    payload: le(buf, 3, 8),
                },
                11,
            ))
        }
        EXT_EXSTOP | EXSTOP_IP => Ok((
            Packet::Exstop {
                ip: b1 & EXT_IP_BIT != 0,
            },
            2,
        )),
        EXT_MWAIT => {
            need(buf, 10)?;
            Ok((
                Packet::Mwait {
                    hints: le(buf, 2, 4) as u32,
                    ext: le(buf, 6, 4) as u32,
                },
                10,
            ))
        }
        EXT_PWRE => {
            need(buf, 4)?;
            rsvd(buf[2] & 0x7f == 0, "PWRE reserved bits")?;
            Ok((
                Packet::Pwre {
                    state: buf[3] >> 4,
                    sub_state: buf[3] & C_STATE_MASK,
                    hw: buf[2] & 0x80 != 0,
                },
                4,
            ))
        }
        EXT_PWRX => {
            need(buf, 7)?;
            rsvd(buf[3] & 0xf2 == 0 && buf[4..7] == [0, 0, 0], "PWRX reserved bits")?;
            Ok((
                Packet::Pwrx {
                    last: buf[2] >> 4,
                    deepest: buf[2] & C_STATE_MASK,
                    wake: buf[3],
                },
                7,
            ))
        }
        EXT_BBP => {
            need(buf, 3)?;
            rsvd(buf[2] & 0x60 == 0, "BBP reserved bits")?;
            Ok((
                Packet::Bbp {
                    sz4: buf[2] & 0x80 != 0,
                    ty: buf[2] & 0x1f,
                },
                3,
            ))
        }
        EXT_BEP | BEP_IP => Ok((
            Packet::Bep {
                ip: b1 & EXT_IP_BIT != 0,
            },
            2,
        )),
        EXT_CFE => {
            need(buf, 4)?;
            rsvd(buf[2] & 0x60 == 0, "CFE reserved bits")?;
            Ok((
                Packet::Cfe {
                    ty: buf[2] & 0x1f,
                    vector: buf[3],
                    ip: buf[2] & 0x80 != 0,
                },
                4,
            ))
        }
        EXT_EVD => {
            need(buf, 11)?;
            rsvd(buf[2] & 0xc0 == 0, "EVD reserved bits")?;
            Ok((
                Packet::Evd {
                    ty: buf[2],
                    payload: le(buf, 3, 8),
                },
                11,
            ))
        }
        _ if b1 & EXT_PTW_MASK == EXT_PTW => {
            let (size, n) = match (b1 >> 5) & 3 {
                0 => (PtwSize::Four, 4),
                1 => (PtwSize::Eight, 8),
                _ => return Err(DecodeErrorKind::BadPacket("reserved PTW PayloadBytes")),
            };
            need(buf, 2 + n)?;
            Ok((
                Packet::Ptw {
                    size,
                    payload: le(buf, 2, n),
                    ip: b1 & EXT_IP_BIT != 0,
                },
                2 + n,
            ))
        }
        _ => Err(DecodeErrorKind::BadOpcode),
    }
}

#[inline(always)]
fn decode_cyc(buf: &[u8]) -> R {
    let b0 = buf[0];
    let mut value = u64::from(b0 >> 3);
    if b0 & CYC_MORE == 0 {
        return Ok((Packet::Cyc { value }, 1));
    }
    let mut shift = 5;
    let mut n = 1;
    loop {
        let b = *buf.get(n).ok_or(DecodeErrorKind::Truncated { need: n + 1 })?;
        n += 1;
        let bits = u64::from(b >> 1);
        if shift >= 64 || (shift > 57 && bits >> (64 - shift) != 0) {
            return Err(DecodeErrorKind::BadPacket("CYC value wider than 64 bits"));
        }
        value |= bits << shift;
        shift += 7;
        if b & 1 == 0 {
            // Hardware writes the shortest form; a zero last byte would not round-trip.
            rsvd(bits != 0, "non-minimal CYC")?;
            return Ok((Packet::Cyc { value }, n));
        }
    }
}

/// Offset of the first PSB at or after `from`, if any.
pub fn find_psb(buf: &[u8], from: usize) -> Option<usize> {
    let hay = buf.get(from..)?;
    let mut i = 0;
    while i + 16 <= hay.len() {
        match hay[i..].iter().position(|&b| b == EXT) {
            Some(p) if i + p + 16 <= hay.len() => {
                if hay[i + p..i + p + 16] == PSB_BYTES {
                    return Some(from + i + p);
                }
                i += p + 1;
            }
            _ => return None,
        }
    }
    None
}

/// Walks a buffer packet by packet, tracking BBP blocks and last IP; after an error, [`resync`]
/// moves to the next PSB.
///
/// [`resync`]: PacketDecoder::resync
#[derive(Clone, Debug)]
pub struct PacketDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
    block: Option<bool>,
    last_ip: LastIp,
}

impl<'a> PacketDecoder<'a> {
    /// A decoder at byte 0 of `buf`; `base` is added to reported offsets.
    pub fn new(buf: &'a [u8], base: u64) -> Self {
        PacketDecoder {
            buf,
            pos: 0,
            base,
            block: None,
            last_ip: LastIp::new(),
        }
    }

    /// Byte offset of the next packet (including `base`).
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Last IP after the packets decoded so far.
    pub fn last_ip(&self) -> LastIp {
        self.last_ip
    }

    /// Moves to the first PSB at or after the current position; false (and at the end) if none.
    pub fn sync_forward(&mut self) -> bool {
        match find_psb(self.buf, self.pos) {
            Some(p) => {
                self.pos = p;
                self.block = None;
                true
            }
            None => {
                self.pos = self.buf.len();
                false
            }
        }
    }

    /// After an error: moves to the next PSB after the failing byte.
    pub fn resync(&mut self) -> bool {
        self.pos = (self.pos + 1).min(self.buf.len());
        self.sync_forward()
    }

    /// Decodes the next packet: `None` at the end, else the offset and the packet or the error
    /// (the position stays at the failing packet; call [`PacketDecoder::resync`]).
    #[inline(always)]
    pub fn next_packet(&mut self) -> Option<Result<(u64, Packet), DecodeError>> {
        let b0 = *self.buf.get(self.pos)?;
        let offset = self.offset();
        // Fast path for the commonest packet: every even byte but PAD (0x00) and the extended
        // opcode (0x02) is a TNT-8, outside a block (where 0bxxxxx100 may be a BIP).
        if b0 & 1 == 0 && b0 > 2 && self.block.is_none() {
            self.pos += 1;
            let count = 6 - b0.leading_zeros() as u8;
            let bits = u64::from(b0 >> 1) & ((1 << count) - 1);
            return Some(Ok((offset, Packet::Tnt8(Tnt { bits, count }))));
        }
        // The IP packets next, decoded here so that last IP is updated without a second dispatch
        // on the decoded packet.
        if CLASS[usize::from(b0)] == Class::Ip {
            return Some(match decode_ip(b0, &self.buf[self.pos..]) {
                Ok((p, ip, n)) => {
                    self.pos += n;
                    self.last_ip.update(ip);
                    Ok((offset, p))
                }
                Err(kind) => Err(DecodeError { offset, kind }),
            });
        }
        Some(match Packet::decode(&self.buf[self.pos..], self.block) {
            Ok((p, n)) => {
                self.pos += n;
                match p {
                    Packet::Bbp { sz4, .. } => self.block = Some(sz4),
                    Packet::Bep { .. } | Packet::Psb | Packet::Ovf => {
                        self.block = None;
                        if !matches!(p, Packet::Bep { .. }) {
                            self.last_ip.reset();
                        }
                    }
                    // IP packets took the branch above; nothing else touches last IP.
                    _ => {}
                }
                Ok((offset, p))
            }
            Err(kind) => Err(DecodeError { offset, kind }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TNT-8 fast path of `next_packet` gives what the full decoder gives for every first
    /// byte, and steps aside inside a block (BIP) and for PAD and extended opcodes.
    #[test]
    fn next_packet_fast_path_agrees_with_decode_for_every_first_byte() {
        for b0 in 0..=255u8 {
            let mut buf = [0u8; 32];
            buf[0] = b0;
            let mut d = PacketDecoder::new(&buf, 0);
            let fast = d.next_packet().unwrap().map(|(_, p)| p).ok();
            let full = Packet::decode(&buf, None).ok().map(|(p, _)| p);
            assert_eq!(fast, full, "{b0:#04x}");
        }
        // In a block, 0x04 is a BIP, not a TNT.
        let mut d = PacketDecoder::new(&[0x02, 0x63, 0x00, 0x04, 1, 2, 3, 4, 5, 6, 7, 8], 0);
        assert!(matches!(d.next_packet(), Some(Ok((0, Packet::Bbp { .. })))));
        assert!(
            matches!(d.next_packet(), Some(Ok((3, Packet::Bip { .. })))),
            "BIP in a block"
        );
    }

    #[test]
    fn finds_psb_after_garbage() {
        let mut v = vec![0x02, 0x82, 0x02, 0x00, 0x02];
        v.extend_from_slice(&PSB_BYTES);
        assert_eq!(find_psb(&v, 0), Some(5));
        assert_eq!(find_psb(&v, 6), None);
        assert_eq!(find_psb(&PSB_BYTES[..15], 0), None);
    }

    #[test]
    fn errors_carry_offsets_and_resync_skips_to_the_next_psb() {
        let mut v = vec![0x00, 0xc9, 0x00];
        v.extend_from_slice(&PSB_BYTES);
        v.push(0x19);
        let mut d = PacketDecoder::new(&v, 0x100);
        assert_eq!(d.next_packet().unwrap().unwrap(), (0x100, Packet::Pad));
        let e = d.next_packet().unwrap().unwrap_err();
        assert_eq!((e.offset, e.kind), (0x101, DecodeErrorKind::BadOpcode));
        assert!(d.resync());
        assert_eq!(d.next_packet().unwrap().unwrap(), (0x103, Packet::Psb));
        let e = d.next_packet().unwrap().unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Truncated { need: 8 });
        assert!(!d.resync());
        assert!(d.next_packet().is_none());
    }

    #[test]
    fn malformed_packets_are_refused() {
        let bad = |b: &[u8]| Packet::decode(b, None).unwrap_err();
        assert_eq!(
            bad(&[0xad, 0, 0, 0, 0, 0, 0]),
            DecodeErrorKind::BadPacket("reserved IPBytes")
        );
        assert_eq!(
            bad(&[0x02, 0x73, 0, 0, 1, 0, 0]),
            DecodeErrorKind::BadPacket("TMA reserved bits")
        );
        assert_eq!(
            bad(&[0x02, 0xa3, 1, 0, 0, 0, 0, 0]),
            DecodeErrorKind::BadPacket("TNT-64 without TNT bits")
        );
        assert_eq!(bad(&[0x07, 0x00]), DecodeErrorKind::BadPacket("non-minimal CYC"));
        assert_eq!(
            bad(&[0x02, 0xd2, 0, 0, 0, 0]),
            DecodeErrorKind::BadPacket("reserved PTW PayloadBytes")
        );
        assert_eq!(bad(&[0xc9]), DecodeErrorKind::BadOpcode);
        assert_eq!(
            bad(&[0x02, 0x82, 0x02, 0x82]),
            DecodeErrorKind::Truncated { need: 16 }
        );
    }
}
