//! How a CPU lays packets out in its output: the PAD bytes real hardware puts between packets
//! (spec/hardware.md, rules HW1–HW6). The tracer asks where each packet goes as it generates it;
//! [`Repacker`] lays out a stream of packets given whole (`ptemu repack`).
//!
//! Positions are stream positions: bytes since the start of the stream the tracer hands to the
//! output unit (the output unit puts byte N at region base + N for an aligned start, so a stream
//! position and its physical address agree modulo 16).

mod repack;

pub use repack::{agreement, repack, Agreement, AgreementMeter, Repacker, SliceWriter};

use crate::packet::{Ipc, Packet, PtwSize};

/// How packets are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Packing {
    /// Packets back to back, no PAD (the SDM's minimum; `generic-max`, `broadwell`, `goldmont`).
    #[default]
    None,
    /// The layout measured on Skylake-class hardware (HW1–HW5): 8-byte units, payload-aligned
    /// 48- and 64-bit values, 16-byte alignment after a disable.
    Hardware,
}

impl Packing {
    /// The names `--packing` takes.
    pub const NAMES: &'static [&'static str] = &["none", "hardware"];

    /// The name of this packing.
    pub fn name(self) -> &'static str {
        match self {
            Packing::None => "none",
            Packing::Hardware => "hardware",
        }
    }
}

/// A packing name that is not one of [`Packing::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown packing `{name}` (known: {})", Packing::NAMES.join(", "))]
#[non_exhaustive]
pub struct UnknownPacking {
    /// The name given.
    pub name: String,
}

impl std::str::FromStr for Packing {
    type Err = UnknownPacking;

    /// The packing called `name` (one of [`Packing::NAMES`]).
    fn from_str(name: &str) -> Result<Self, UnknownPacking> {
        match name {
            "none" => Ok(Packing::None),
            "hardware" => Ok(Packing::Hardware),
            _ => Err(UnknownPacking { name: name.into() }),
        }
    }
}

/// The bytes hardware packs into: packets do not cross one (HW2), PSB starts on one (HW1).
pub const UNIT: u64 = 8;

/// The alignment after a disable (HW4).
pub const DISABLE_ALIGN: u64 = 16;

/// How a packet is placed (HW1–HW6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// PSB: starts at a unit boundary (HW1).
    Psb,
    /// A packet whose payload is a 48- or 64-bit value after `header` bytes: the payload starts
    /// at a unit boundary and the rest of its last unit is PAD (HW3).
    Payload {
        /// Header bytes before the payload.
        header: u8,
    },
    /// MODE.Exec or MODE.TSX: directly against the IP packet that follows it (HW5).
    Mode,
    /// TIP.PGD without an IP: the next packet, or the end of the data, is 16-byte aligned (HW4).
    Disable,
    /// Any other packet: does not cross a unit boundary; one longer than a unit starts on a
    /// boundary (HW2).
    Plain,
}

impl Shape {
    /// The shape of `p`.
    #[inline]
    pub fn of(p: &Packet) -> Shape {
        match p {
            Packet::Psb => Shape::Psb,
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip)
                if ip.ipc.payload_len() >= 6 =>
            {
                Shape::Payload { header: 1 }
            }
            Packet::TipPgd(ip) if ip.ipc == Ipc::Suppressed => Shape::Disable,
            Packet::Pip { .. } | Packet::Vmcs { .. } => Shape::Payload { header: 2 },
            Packet::Ptw {
                size: PtwSize::Eight, ..
            } => Shape::Payload { header: 2 },
            Packet::Mnt { .. } => Shape::Payload { header: 3 },
            Packet::Bip { sz4: false, .. } => Shape::Payload { header: 1 },
            Packet::ModeExec { .. } | Packet::ModeTsx { .. } => Shape::Mode,
            _ => Shape::Plain,
        }
    }

    /// Whether MODE packets before a packet of this shape are glued to it (HW5): the IP packets
    /// with a payload-aligned IP.
    pub fn takes_modes(self, p: &Packet) -> bool {
        matches!(self, Shape::Payload { header: 1 })
            && matches!(
                p,
                Packet::Tip(_) | Packet::TipPge(_) | Packet::TipPgd(_) | Packet::Fup(_)
            )
    }
}

/// PADs to reach the next multiple of `align` from `pos` (0 when on one).
#[inline(always)]
pub fn to_boundary(pos: u64, align: u64) -> u64 {
    pos.wrapping_neg() & (align - 1)
}

impl Packing {
    /// PAD bytes before a packet of `shape` and `len` bytes, with `glued` bytes of MODE packets
    /// placed directly before it (HW5), at stream position `pos`: the PADs go before the MODE
    /// bytes.
    #[inline]
    pub fn pads_before(self, pos: u64, shape: Shape, len: usize, glued: usize) -> u64 {
        if self == Packing::None {
            return 0;
        }
        let len = len as u64;
        let glued = glued as u64;
        match shape {
            Shape::Psb => self.pads_before_psb(pos, false),
            Shape::Payload { header } => to_boundary(pos + glued + u64::from(header), UNIT),
            Shape::Mode | Shape::Disable | Shape::Plain => {
                let all = glued + len;
                let off = pos & (UNIT - 1);
                if all > UNIT {
                    to_boundary(pos, UNIT)
                } else if off + all > UNIT {
                    UNIT - off
                } else {
                    0
                }
            }
        }
    }

    /// PAD bytes after a packet of `shape` that ends at stream position `end` (HW3, HW4).
    #[inline]
    pub fn pads_after(self, end: u64, shape: Shape) -> u64 {
        match (self, shape) {
            (Packing::None, _) => 0,
            (_, Shape::Payload { .. }) => to_boundary(end, UNIT),
            (_, Shape::Disable) => to_boundary(end, DISABLE_ALIGN),
            _ => 0,
        }
    }

    /// PAD bytes when tracing is disabled (TraceEn 1 -> 0) with the stream at `end`: the output
    /// ends 16-byte aligned (HW4).
    #[inline]
    pub fn pads_at_disable(self, end: u64) -> u64 {
        match self {
            Packing::None => 0,
            Packing::Hardware => to_boundary(end, DISABLE_ALIGN),
        }
    }

    /// PAD bytes before a PSB at `pos`: a unit boundary (HW1). A PSB right after a PSBEND (with
    /// no packet between) can only come from an enable, so tracing was disabled in between and
    /// the output was 16-byte aligned then (HW4): `after_psbend` asks for that alignment.
    #[inline]
    pub fn pads_before_psb(self, pos: u64, after_psbend: bool) -> u64 {
        match (self, after_psbend) {
            (Packing::None, _) => 0,
            (_, false) => to_boundary(pos, UNIT),
            (_, true) => to_boundary(pos, DISABLE_ALIGN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_boundary_counts_up_to_the_next_multiple() {
        assert_eq!(to_boundary(0, 8), 0);
        assert_eq!(to_boundary(1, 8), 7);
        assert_eq!(to_boundary(7, 8), 1);
        assert_eq!(to_boundary(17, 16), 15);
    }
}
