//! Packets read as libipt's packet decoder reads them (what `ptdump` prints from): lenient where
//! ptemu's own decoder checks reserved bits, BBP/BIP/BEP unknown, a packet cut by the end of the
//! buffer the end of the trace, and the two errata that change what is read (SKD007, SKZ84).
//! Synchronisation searches for a PSB the way libipt does (aligned 8-byte words of the PSB
//! pattern, the PSB that ends a run of them).

use crate::packet::{IpPayload, Ipc, Packet, PtwSize, Tnt, PSB_BYTES};

/// Why bytes did not give a packet, as libipt's error codes name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The packet runs past the end of the buffer (libipt: end of trace stream).
    Eos,
    /// No packet starts with these bytes.
    BadOpcode,
    /// The opcode is known, the payload is not valid.
    BadPacket,
}

impl ReadError {
    /// libipt's text for the error.
    pub fn text(self) -> &'static str {
        match self {
            ReadError::Eos => "reached end of trace stream",
            ReadError::BadOpcode => "unknown opcode",
            ReadError::BadPacket => "unknown packet",
        }
    }
}

/// What was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A packet.
    Packet(Packet),
    /// Bytes libipt reports as `<invalid>` (a TMA with reserved bits set under SKZ84).
    Invalid,
}

/// The errata that change what libipt reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadErrata {
    /// SKD007: an OVF overwrites the second byte of a 2-byte CYC.
    pub skd007: bool,
    /// SKZ84: a TMA with reserved bits set is corrupt; skipped as 8 invalid bytes.
    pub skz84: bool,
}

/// One read: the item, how far the decoder moves, and how many bytes from the start belong to
/// what is printed (they differ only for SKD007's OVF, printed at the CYC's offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The item.
    pub item: Item,
    /// Bytes consumed.
    pub advance: usize,
    /// Bytes shown as the packet's raw bytes.
    pub size: usize,
}

fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x))
}

/// `n` bytes at `at`, or end of stream.
fn take(buf: &[u8], at: usize, n: usize) -> Result<&[u8], ReadError> {
    buf.get(at..at + n).ok_or(ReadError::Eos)
}

fn tnt(payload: u64) -> Result<Tnt, ReadError> {
    if payload < 2 {
        return Err(ReadError::BadPacket);
    }
    let count = 63 - payload.leading_zeros() as u8;
    Ok(Tnt {
        bits: payload & !(1u64 << count),
        count,
    })
}

fn packet(p: Packet, n: usize) -> Result<Read, ReadError> {
    Ok(Read {
        item: Item::Packet(p),
        advance: n,
        size: n,
    })
}

/// Reads the packet at `pos` of `buf` (`pos < buf.len()`).
pub fn read(buf: &[u8], pos: usize, errata: ReadErrata) -> Result<Read, ReadError> {
    let b = &buf[pos..];
    let opc = b[0];
    match opc {
        0x00 => packet(Packet::Pad, 1),
        0x99 => {
            let p = take(b, 0, 2)?;
            let bits = p[1] & 0x1f;
            let m = match p[1] & 0xe0 {
                0x00 => Packet::ModeExec {
                    csl: bits & 1 != 0,
                    csd: bits & 2 != 0,
                    if_: bits & 4 != 0,
                },
                0x20 => Packet::ModeTsx {
                    intx: bits & 1 != 0,
                    abrt: bits & 2 != 0,
                },
                _ => return Err(ReadError::BadPacket),
            };
            packet(m, 2)
        }
        0x59 => packet(
            Packet::Mtc {
                ctc: take(b, 0, 2)?[1],
            },
            2,
        ),
        0x19 => packet(
            Packet::Tsc {
                tsc: le(&take(b, 0, 8)?[1..]),
            },
            8,
        ),
        0xd9 => {
            let p = take(b, 0, 3)?;
            let icntv = p[1] & 0x40 != 0;
            let icnt = if icntv {
                Some(le(&take(b, 3, 2)?[..2]) as u16)
            } else {
                None
            };
            packet(
                Packet::Trig {
                    trbv: p[2],
                    ip: p[1] & 0x80 != 0,
                    mult: p[1] & 0x20 != 0,
                    icnt,
                },
                if icntv { 5 } else { 3 },
            )
        }
        0x02 => read_ext(b),
        _ if opc & 0x03 == 0x03 => read_cyc(buf, pos, errata),
        _ if opc & 0x01 == 0 => packet(Packet::Tnt8(tnt(u64::from(opc >> 1))?), 1),
        _ if matches!(opc & 0x1f, 0x1d | 0x0d | 0x11 | 0x01) => {
            let ipc = Ipc::from_bits(opc >> 5).ok_or(ReadError::BadPacket)?;
            let n = ipc.payload_len();
            let ip = IpPayload::new(ipc, le(take(b, 1, n)?));
            let p = match opc & 0x1f {
                0x1d => Packet::Fup(ip),
                0x0d => Packet::Tip(ip),
                0x11 => Packet::TipPge(ip),
                _ => Packet::TipPgd(ip),
            };
            packet(p, 1 + n)
        }
        _ => Err(ReadError::BadOpcode),
    }
}

fn read_ext(b: &[u8]) -> Result<Read, ReadError> {
    let ext = *b.get(1).ok_or(ReadError::Eos)?;
    match ext {
        0x82 => {
            let p = take(b, 0, 16)?;
            if p != PSB_BYTES {
                return Err(ReadError::BadPacket);
            }
            packet(Packet::Psb, 16)
        }
        0xf3 => packet(Packet::Ovf, 2),
        0x23 => packet(Packet::PsbEnd, 2),
        0x83 => packet(Packet::TraceStop, 2),
        0x03 => packet(
            Packet::Cbr {
                ratio: take(b, 0, 4)?[2],
            },
            4,
        ),
        0x73 => {
            let p = take(b, 0, 7)?;
            let fc = u16::from(p[5]) | u16::from(p[6]) << 8;
            if fc & !0x1ff != 0 || p[4] != 0 {
                return Err(ReadError::BadPacket);
            }
            packet(
                Packet::Tma {
                    ctc: u16::from(p[2]) | u16::from(p[3]) << 8,
                    fc,
                },
                7,
            )
        }
        0x43 => {
            let v = le(&take(b, 0, 8)?[2..]);
            packet(
                Packet::Pip {
                    cr3: (v >> 1) << 5,
                    nr: v & 1 != 0,
                },
                8,
            )
        }
        0xc8 => packet(
            Packet::Vmcs {
                base: le(&take(b, 0, 7)?[2..]) << 12,
            },
            7,
        ),
        0x62 | 0xe2 => packet(Packet::Exstop { ip: ext & 0x80 != 0 }, 2),
        0xc2 => {
            let p = take(b, 0, 10)?;
            packet(
                Packet::Mwait {
                    hints: le(&p[2..6]) as u32,
                    ext: le(&p[6..10]) as u32,
                },
                10,
            )
        }
        0x22 => {
            let p = take(b, 0, 4)?;
            packet(
                Packet::Pwre {
                    state: p[3] >> 4,
                    sub_state: p[3] & 0xf,
                    hw: p[2] & 0x08 != 0,
                },
                4,
            )
        }
        0xa2 => {
            let p = take(b, 0, 7)?;
            packet(
                Packet::Pwrx {
                    last: p[2] >> 4,
                    deepest: p[2] & 0xf,
                    wake: p[3] & 0x0f,
                },
                7,
            )
        }
        0xa3 => packet(Packet::Tnt64(tnt(le(&take(b, 0, 8)?[2..]))?), 8),
        0x13 => {
            let p = take(b, 0, 4)?;
            packet(
                Packet::Cfe {
                    ty: p[2] & 0x1f,
                    vector: p[3],
                    ip: p[2] & 0x80 != 0,
                },
                4,
            )
        }
        0x53 => {
            let p = take(b, 0, 11)?;
            packet(
                Packet::Evd {
                    ty: p[2] & 0x1f,
                    payload: le(&p[3..11]),
                },
                11,
            )
        }
        0xc3 => match *b.get(2).ok_or(ReadError::Eos)? {
            0x88 => packet(
                Packet::Mnt {
                    payload: le(&take(b, 0, 11)?[3..]),
                },
                11,
            ),
            _ => Err(ReadError::BadOpcode),
        },
        _ if ext & 0x1f == 0x12 => {
            let (size, n) = match (ext >> 5) & 3 {
                0 => (PtwSize::Four, 4),
                1 => (PtwSize::Eight, 8),
                _ => return Err(ReadError::BadPacket),
            };
            packet(
                Packet::Ptw {
                    size,
                    payload: le(take(b, 2, n)?),
                    ip: ext & 0x80 != 0,
                },
                2 + n,
            )
        }
        _ => Err(ReadError::BadOpcode),
    }
}

/// A CYC as libipt reads it: any number of extension bytes while the value fits 64 bits.
fn read_cyc(buf: &[u8], pos: usize, errata: ReadErrata) -> Result<Read, ReadError> {
    let b = &buf[pos..];
    let mut value = u64::from(b[0] >> 3);
    let mut more = b[0] & 0x04 != 0;
    let mut shift = 5u32;
    let mut n = 1;
    while more {
        let x = *b.get(n).ok_or(ReadError::Eos)?;
        n += 1;
        more = x & 1 != 0;
        let bits = u64::from(x >> 1) << shift;
        shift += 7;
        if shift > 64 {
            return Err(ReadError::BadPacket);
        }
        value |= bits;
    }
    // SKD007: a 2-byte CYC whose second byte reads as an extended opcode, followed by what reads
    // as OVF's second byte, is an OVF that overwrote the CYC: report the OVF (at the CYC's
    // offset, as libipt does) and skip the CYC's first byte.
    if errata.skd007 && n == 2 && value & !0x1f == 0x20 && b.get(2) == Some(&0xf3) {
        return Ok(Read {
            item: Item::Packet(Packet::Ovf),
            advance: 3,
            size: 2,
        });
    }
    packet(Packet::Cyc { value }, n)
}

/// Reads like [`read`], with SKZ84's reading of a bad TMA.
pub fn read_with_errata(buf: &[u8], pos: usize, errata: ReadErrata) -> Result<Read, ReadError> {
    match read(buf, pos, errata) {
        Err(ReadError::BadPacket) if errata.skz84 && buf[pos] == 0x02 && buf.get(pos + 1) == Some(&0x73) => {
            Ok(Read {
                item: Item::Invalid,
                advance: 8,
                size: 8,
            })
        }
        r => r,
    }
}

/// The 8-byte words of the PSB pattern, as they read from memory at the two possible alignments.
const PSB_WORDS: [u64; 2] = [0x8202_8202_8202_8202, 0x0282_0282_0282_0282];

/// The PSB libipt finds from the aligned word at `at`: the one that ends the run of `02 82` pairs
/// the word is part of.
fn psb_ending_run(buf: &[u8], at: usize) -> Option<usize> {
    let mut pos = at;
    if buf[pos] != 0x02 {
        pos += 1;
    }
    while pos + 1 < buf.len() && buf[pos] == 0x02 && buf[pos + 1] == 0x82 {
        pos += 2;
    }
    let start = pos.checked_sub(16)?;
    (buf.get(start..start + 16)? == PSB_BYTES).then_some(start)
}

/// The first PSB libipt's forward search finds, starting at `from`; `None` at the end.
pub fn sync_forward(buf: &[u8], from: usize) -> Option<usize> {
    let mut pos = from.div_ceil(8) * 8;
    loop {
        let word = buf.get(pos..pos + 8)?;
        let at = pos;
        pos += 8;
        let v = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        if !PSB_WORDS.contains(&v) {
            continue;
        }
        if let Some(psb) = psb_ending_run(buf, at) {
            if psb >= from {
                return Some(psb);
            }
        }
    }
}

/// Where libipt's packet decoder resynchronises after an error at `pos`, the last PSB it synced
/// at being `sync`: from the PSB's end if the error is at the PSB, else from up to 15 bytes
/// before the error (a PSB partly read as the payload of a bad packet is found again).
pub fn resync(buf: &[u8], pos: usize, sync: usize) -> Option<usize> {
    let pos = if pos == sync { pos + 16 } else { pos };
    let from = pos - pos.min(15);
    sync_forward(buf, from.min(buf.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_ptemu_refuses() {
        // PWRE with libipt's hardware bit (byte 2, bit 3).
        let r = read(&[0x02, 0x22, 0x08, 0x00], 0, ReadErrata::default()).unwrap();
        assert_eq!(
            r.item,
            Item::Packet(Packet::Pwre {
                state: 0,
                sub_state: 0,
                hw: true
            })
        );
        // A non-minimal CYC.
        let r = read(&[0x07, 0x00], 0, ReadErrata::default()).unwrap();
        assert_eq!((r.item, r.advance), (Item::Packet(Packet::Cyc { value: 0 }), 2));
        // BBP is unknown to libipt.
        assert_eq!(
            read(&[0x02, 0x63, 0x00], 0, ReadErrata::default()),
            Err(ReadError::BadOpcode)
        );
        // A cut packet is the end of the stream.
        assert_eq!(read(&[0x19, 1, 2], 0, ReadErrata::default()), Err(ReadError::Eos));
    }

    #[test]
    fn errata_change_the_reading() {
        let e = ReadErrata {
            skd007: true,
            skz84: true,
        };
        let r = read(&[0xf7, 0x02, 0xf3], 0, e).unwrap();
        assert_eq!((r.item, r.advance, r.size), (Item::Packet(Packet::Ovf), 3, 2));
        let tma = [0x02, 0x73, 1, 1, 1, 1, 0, 0];
        assert_eq!(read_with_errata(&tma, 0, e).unwrap().item, Item::Invalid);
        assert_eq!(
            read_with_errata(&tma, 0, ReadErrata::default()),
            Err(ReadError::BadPacket)
        );
    }

    #[test]
    fn sync_finds_the_psb_that_ends_a_run() {
        let mut v = vec![0u8; 3];
        v.extend_from_slice(&PSB_BYTES);
        v.extend_from_slice(&[0x02, 0x82]);
        v.extend_from_slice(&[0; 8]);
        assert_eq!(sync_forward(&v, 0), Some(5));
        assert_eq!(sync_forward(&v, 6), None);
        assert_eq!(sync_forward(&PSB_BYTES[..15], 0), None);
    }
}
