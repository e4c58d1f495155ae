//! Laying out whole packets (`ptemu repack`), and measuring how well a packing predicts the PAD
//! runs of a stream that already has them (`cargo xtask hwcheck`).

use super::{Packing, Shape};
use crate::packet::Packet;
use std::io::{self, Write};

/// The longest run of MODE packets held for the packet they are glued to (HW5): MODE.TSX and
/// MODE.Exec, two bytes each, and room for repeats.
const MAX_HELD: usize = 16;

/// Lays out packets given one at a time, as `packing` says, writing the bytes to a sink. PADs in
/// the input are the caller's to drop. The tracer keeps one as it generates (a copy marks a
/// point to return to).
#[derive(Clone, Copy, Debug)]
pub struct Repacker {
    packing: Packing,
    /// Stream position of the next byte written.
    pos: u64,
    /// MODE packets waiting for the packet that follows them (HW5).
    held: [u8; MAX_HELD],
    held_len: usize,
    /// The shape of the last packet written, whose PADs after it are not yet written.
    last: Option<Shape>,
    /// The last packet was a PSBEND.
    after_psbend: bool,
}

/// PAD bytes before a packet of `shape` and `len` bytes with `glued` MODE bytes before it, at
/// `pos`; `after_psbend`: the packet before it was a PSBEND.
fn before(packing: Packing, after_psbend: bool, pos: u64, shape: Shape, len: usize, glued: usize) -> u64 {
    match shape {
        Shape::Psb => packing.pads_before_psb(pos, after_psbend),
        _ => packing.pads_before(pos, shape, len, glued),
    }
}

const PADS: [u8; 16] = [0; 16];

impl Repacker {
    /// A repacker starting at stream position 0.
    pub fn new(packing: Packing) -> Self {
        Repacker {
            packing,
            pos: 0,
            held: [0; MAX_HELD],
            held_len: 0,
            last: None,
            after_psbend: false,
        }
    }

    /// Stream position of the next byte.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The layout it applies.
    pub fn packing(&self) -> Packing {
        self.packing
    }

    /// Forgets what is held and owed (the output was lost: STOP or an error), keeping the
    /// position.
    pub fn drop_pending(&mut self) {
        self.held_len = 0;
        self.last = None;
        self.after_psbend = false;
    }

    fn pads<W: Write + ?Sized>(&mut self, out: &mut W, n: u64) -> io::Result<()> {
        let mut left = n;
        while left > 0 {
            let k = left.min(PADS.len() as u64);
            out.write_all(&PADS[..k as usize])?;
            left -= k;
        }
        self.pos += n;
        Ok(())
    }

    fn bytes<W: Write + ?Sized>(&mut self, out: &mut W, b: &[u8]) -> io::Result<()> {
        out.write_all(b)?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// The PADs owed after the last packet (HW3, HW4).
    fn settle<W: Write + ?Sized>(&mut self, out: &mut W) -> io::Result<()> {
        if let Some(shape) = self.last.take() {
            let n = self.packing.pads_after(self.pos, shape);
            self.pads(out, n)?;
        }
        Ok(())
    }

    /// Writes the held MODE packets as packets of their own (nothing followed that takes them).
    fn release<W: Write + ?Sized>(&mut self, out: &mut W) -> io::Result<()> {
        let held = self.held;
        let mut at = 0;
        while at < self.held_len {
            let n = 2; // MODE packets are two bytes
            let pads = self.packing.pads_before(self.pos, Shape::Mode, n, 0);
            self.pads(out, pads)?;
            self.bytes(out, &held[at..at + n])?;
            at += n;
        }
        self.held_len = 0;
        Ok(())
    }

    /// Places a packet of the plain shape (HW2), `len` bytes, where [`Repacker::push`] would
    /// put it, when that takes nothing but its PADs before it: no MODE is held (HW5) and the
    /// last packet owes no PADs after it (HW3, HW4). Returns those PADs, with the repacker
    /// moved past the packet (`psbend`: it is a PSBEND), for the caller to write the PADs and
    /// then the packet; `None`, with nothing changed, when the general path must place it.
    #[inline(always)]
    pub fn place_plain(&mut self, len: usize, psbend: bool) -> Option<u64> {
        if self.held_len != 0 || matches!(self.last, Some(Shape::Payload { .. } | Shape::Disable)) {
            return None;
        }
        let pads = self.packing.pads_before(self.pos, Shape::Plain, len, 0);
        self.pos += pads + len as u64;
        self.last = Some(Shape::Plain);
        self.after_psbend = psbend;
        Some(pads)
    }

    /// Writes packet `p`, whose encoding is `bytes`, with the PADs the packing puts before it.
    pub fn push<W: Write + ?Sized>(&mut self, out: &mut W, p: &Packet, bytes: &[u8]) -> io::Result<()> {
        let shape = Shape::of(p);
        self.settle(out)?;
        if shape == Shape::Mode && self.packing != Packing::None {
            if self.held_len + bytes.len() > MAX_HELD {
                self.release(out)?;
            }
            self.held[self.held_len..self.held_len + bytes.len()].copy_from_slice(bytes);
            self.held_len += bytes.len();
            self.after_psbend = false;
            return Ok(());
        }
        let glued = if self.held_len > 0 && shape.takes_modes(p) {
            self.held_len
        } else {
            self.release(out)?;
            0
        };
        let pads = before(
            self.packing,
            self.after_psbend,
            self.pos,
            shape,
            bytes.len(),
            glued,
        );
        self.pads(out, pads)?;
        let held = self.held;
        self.bytes(out, &held[..glued])?;
        self.held_len = 0;
        self.bytes(out, bytes)?;
        self.after_psbend = *p == Packet::PsbEnd;
        self.last = Some(shape);
        Ok(())
    }

    /// The end of the data: what is still held, the PADs owed after the last packet, then PADs
    /// to a 16-byte boundary, as a disable ends the output (HW4: a stream ends at a disable, and
    /// real buffers are multiples of 16 bytes long).
    pub fn finish<W: Write + ?Sized>(&mut self, out: &mut W) -> io::Result<()> {
        self.release(out)?;
        self.settle(out)?;
        let n = self.packing.pads_at_disable(self.pos);
        self.pads(out, n)
    }
}

/// Lays out again the packets of a stream (`data`, decoded into `packets`: offsets and lengths,
/// PADs included, which are dropped) as `packing` says, into `out` (`ptemu repack`).
pub fn repack<W: Write + ?Sized>(
    packing: Packing,
    data: &[u8],
    packets: &[(u64, Packet, usize)],
    out: &mut W,
) -> io::Result<()> {
    let mut r = Repacker::new(packing);
    for &(offset, p, len) in packets {
        if p != Packet::Pad {
            let at = offset as usize;
            r.push(out, &p, &data[at..at + len])?;
        }
    }
    r.finish(out)
}

/// A [`Write`] into a fixed buffer from `*len` on, moving `*len`; an error once it is full.
#[derive(Debug)]
pub struct SliceWriter<'a> {
    /// The buffer.
    pub buf: &'a mut [u8],
    /// Bytes of it in use.
    pub len: &'a mut usize,
}

impl Write for SliceWriter<'_> {
    #[inline]
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let end = *self.len + b.len();
        let room = self
            .buf
            .get_mut(*self.len..end)
            .ok_or_else(|| io::Error::new(io::ErrorKind::WriteZero, "packet buffer full"))?;
        room.copy_from_slice(b);
        *self.len = end;
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How well a packing predicts the PAD runs of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Agreement {
    /// Packets other than PAD.
    pub packets: u64,
    /// Of them, those whose run of PADs before them the packing predicts exactly.
    pub matched: u64,
    /// The first few packets it does not: (offset, packet name, PADs seen, PADs predicted).
    pub misses: Vec<(u64, &'static str, u64, u64)>,
    /// Misses per packet name.
    pub missed_by_kind: std::collections::BTreeMap<&'static str, u64>,
}

/// How many misses [`Agreement::misses`] lists.
const LISTED_MISSES: usize = 20;

/// Compares `packing` with the PADs of a stream: `packets` are its packets in order with their
/// offsets and lengths, PADs included. Each prediction starts where the stream's previous packet
/// ended, so one miss does not shift the rest; the first packet, with nothing before it, is not
/// counted.
pub fn agreement(packing: Packing, packets: &[(u64, Packet, usize)]) -> Agreement {
    let mut m = AgreementMeter::new(packing);
    for &(off, p, len) in packets {
        m.push(off, p, len);
    }
    m.finish()
}

/// [`agreement`] one packet at a time, in bounded memory (the MODE packets waiting for the
/// packet they go with, at most a few).
#[derive(Debug)]
pub struct AgreementMeter {
    packing: Packing,
    a: Agreement,
    /// End and shape of the packet before.
    prev: Option<(u64, Shape)>,
    after_psbend: bool,
    /// MODE packets waiting for the next packet (HW5: placed together with it).
    modes: Vec<(u64, Packet, usize)>,
}

impl AgreementMeter {
    /// A meter for `packing`, before any packet.
    pub fn new(packing: Packing) -> Self {
        AgreementMeter {
            packing,
            a: Agreement::default(),
            prev: None,
            after_psbend: false,
            modes: Vec::new(),
        }
    }

    /// The next packet of the stream (PADs are passed over).
    pub fn push(&mut self, off: u64, p: Packet, len: usize) {
        if p == Packet::Pad {
            return;
        }
        let shape = Shape::of(&p);
        if shape == Shape::Mode {
            self.modes.push((off, p, len));
            return;
        }
        let modes = std::mem::take(&mut self.modes);
        if !modes.is_empty() && shape.takes_modes(&p) && self.packing != Packing::None {
            // A run of MODE packets and the packet after them are placed together (HW5).
            let glued: usize = modes.iter().map(|m| m.2).sum();
            for (k, &(o, q, l)) in modes.iter().enumerate() {
                let target = (k == 0).then_some((shape, len, glued));
                self.visit(o, q, l, Some(target));
            }
            self.visit(off, p, len, Some(None));
        } else {
            for &(o, q, l) in &modes {
                self.visit(o, q, l, None);
            }
            self.visit(off, p, len, None);
        }
        self.modes = modes;
        self.modes.clear();
    }

    /// What it found; packets still waiting are counted alone.
    pub fn finish(mut self) -> Agreement {
        for (o, q, l) in std::mem::take(&mut self.modes) {
            self.visit(o, q, l, None);
        }
        self.a
    }

    /// One packet: `glue` is `None` for a packet placed alone, `Some(Some(target))` for the first
    /// of a glued group (the PADs before it are the group's, sized by the target's shape and
    /// length and the modes' bytes), `Some(None)` for the others of the group (no PADs).
    fn visit(&mut self, off: u64, p: Packet, len: usize, glue: Option<Option<(Shape, usize, usize)>>) {
        let shape = Shape::of(&p);
        if let Some((end, prev_shape)) = self.prev {
            let packing = self.packing;
            let after = packing.pads_after(end, prev_shape);
            let at = end + after;
            let before = match glue {
                Some(Some((target, target_len, glued))) => {
                    before(packing, self.after_psbend, at, target, target_len, glued)
                }
                Some(None) => 0,
                None => before(packing, self.after_psbend, at, shape, len, 0),
            };
            let a = &mut self.a;
            a.packets += 1;
            let (seen, predicted) = (off - end, after + before);
            if predicted == seen {
                a.matched += 1;
            } else {
                *a.missed_by_kind.entry(p.name()).or_default() += 1;
                if a.misses.len() < LISTED_MISSES {
                    a.misses.push((off, p.name(), seen, predicted));
                }
            }
        }
        self.after_psbend = p == Packet::PsbEnd;
        self.prev = Some((off + len as u64, shape));
    }
}
