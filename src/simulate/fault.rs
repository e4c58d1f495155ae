//! Fault injection (`ptemu simulate --fault KIND[@WHERE]`, `spec/truth.md` FLT rules): each fault
//! is applied where the real one happens, and the truth says what it cost.
//!
//! - `ovf[@N]`: the tracer's internal buffer overflows at the N-th instruction (the back-pressure
//!   model, OVF1–OVF3): packets are dropped until it drains, then OVF and FUP / PSB+ TIP.PGE.
//! - `wrap[@SIZE]`: output goes to a circular ToPA of one SIZE region (END back to the table) and
//!   the consumer reads it once, at the end: `trace.pt` holds the newest SIZE bytes.
//! - `stop[@SIZE]`: output goes to one SIZE region with STOP: the trace ends where it fills.
//! - `gap[@N]`: the consumer missed the N-th PMI: the bytes of the region that PMI reported are not
//!   in `trace.pt`.
//! - `corrupt[@OFF]`: the first TNT or TIP packet at or after stream offset OFF starts with bytes
//!   that cannot decode (`02 02`, an extended opcode no PT packet uses).
//! - `corrupt-silent[@OFF]`: the first TNT-8 at or after OFF has its oldest branch bit flipped
//!   (else a TIP its low IP byte changed): the stream decodes, wrongly.
//!
//! Without WHERE a position comes from `--seed`.

use crate::layout::Layout;
use crate::packet::Packet;
use crate::packet::{find_psb, PacketDecoder};
use crate::regs::CpuProfile;
use crate::sources::rng::GenRng;
use crate::truth::{Cause, Damage, Delivery};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The bytes a `corrupt` fault writes: `02` then `02`, an extended opcode no packet has.
pub const UNDECODABLE: [u8; 2] = [0x02, 0x02];

/// The smallest ToPA region, and the default size of the `wrap` and `stop` buffers.
pub const MIN_REGION: u64 = 4096;

/// The largest ToPA region (4 KiB << 15): a larger `wrap` or `stop` buffer is several.
pub const MAX_REGION: u64 = 128 << 20;

/// The largest `wrap` or `stop` buffer.
pub const MAX_BUFFER: u64 = 1 << 30;

/// Why a fault cannot be requested or applied (FLT1): exit 2, nothing written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultError {
    /// Not one of the six kinds.
    #[error("unknown fault {0:?}: expected ovf, wrap, stop, gap, corrupt or corrupt-silent, optionally with @WHERE")]
    UnknownKind(String),
    /// WHERE is not a number.
    #[error("{fault:?}: {text:?} is not a number (decimal or 0x...)")]
    BadNumber {
        /// The fault as written.
        fault: String,
        /// The WHERE part.
        text: String,
    },
    /// A wrap or stop size that is not a ToPA region.
    #[error("{0}: the buffer size must be a power of two from 4096 to 1 GiB (4 KiB to 128 MiB: one ToPA region; more: a ring of 128 MiB regions)")]
    BadSize(Fault),
    /// An instruction or PMI number of 0.
    #[error("{0}: counts start at 1")]
    Zero(Fault),
    /// More than one of wrap, stop and gap.
    #[error("--fault {}: at most one of wrap, stop and gap per run", .0.join(", --fault "))]
    Combination(Vec<String>),
    /// wrap or stop with the user's own layout.
    #[error("--fault wrap and --fault stop set their own layout: drop --layout")]
    OwnLayout,
    /// The layout a wrap or stop fault builds is refused.
    #[error("--fault {0}: {1}")]
    Layout(Fault, String),
    /// No packet to corrupt at or after the offset.
    #[error(
        "--fault {fault}: no {what} packet at or after stream offset {from} (the stream has {len} bytes)"
    )]
    NoPacket {
        /// The fault.
        fault: Fault,
        /// The packets it looks for.
        what: &'static str,
        /// The offset.
        from: u64,
        /// The stream's length.
        len: u64,
    },
    /// The ring was never filled.
    #[error("--fault {fault}: the trace ({len} bytes) never filled the {size}-byte ring: a longer input or a smaller size")]
    RingNotFilled {
        /// The fault.
        fault: Fault,
        /// The stream's length.
        len: u64,
        /// The ring's size.
        size: u64,
    },
    /// No PMI fired.
    #[error("--fault {0}: no region filled (no PMI): a longer input or a layout with smaller INT regions")]
    NoPmi(Fault),
    /// Fewer PMIs than the one named.
    #[error("--fault {fault}: the run raised {pmis} PMI(s), not {n}")]
    FewPmis {
        /// The fault.
        fault: Fault,
        /// PMIs raised.
        pmis: usize,
        /// The PMI asked for.
        n: u64,
    },
    /// The STOP region never filled.
    #[error(
        "--fault stop: the trace ({0} bytes) never filled the STOP region: a longer input or a smaller size"
    )]
    StopNotFilled(u64),
    /// Two faults damage the same packet (one would undo or hide the other).
    #[error("--fault {first} and --fault {second} both damage the packet at stream offset {at}: one fault per packet")]
    SamePacket {
        /// The fault applied first.
        first: Fault,
        /// The one that met its damage.
        second: Fault,
        /// The packet's offset.
        at: u64,
    },
    /// The run traced no instruction from the overflow's on.
    #[error("ovf@{at}: the run traced no instruction from there on ({instructions} instructions in all)")]
    OvfNotReached {
        /// The instruction asked for.
        at: u64,
        /// Instructions the run had.
        instructions: u64,
    },
}

/// One requested fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Which.
    pub kind: Cause,
    /// Where (its meaning depends on the kind); `None`: chosen from the seed.
    pub at: Option<u64>,
}

impl FromStr for Fault {
    type Err = FaultError;

    fn from_str(s: &str) -> Result<Self, FaultError> {
        let (kind, at) = match s.split_once('@') {
            Some((k, w)) => (k, Some(w)),
            None => (s, None),
        };
        let kind = Cause::ALL
            .into_iter()
            .find(|c| c.name() == kind)
            .ok_or_else(|| FaultError::UnknownKind(kind.to_owned()))?;
        let at = at
            .map(|w| {
                crate::regs::ctl_text::parse_value(w).ok_or_else(|| FaultError::BadNumber {
                    fault: s.to_owned(),
                    text: w.to_owned(),
                })
            })
            .transpose()?;
        let f = Fault { kind, at };
        f.check()?;
        Ok(f)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(a) => write!(f, "{}@{a}", self.kind.name()),
            None => f.write_str(self.kind.name()),
        }
    }
}

impl Fault {
    fn check(&self) -> Result<(), FaultError> {
        match (self.kind, self.at) {
            (Cause::Wrap | Cause::Stop, Some(size))
                if size < MIN_REGION || !size.is_power_of_two() || size > MAX_BUFFER =>
            {
                Err(FaultError::BadSize(*self))
            }
            (Cause::Ovf | Cause::Gap, Some(0)) => Err(FaultError::Zero(*self)),
            _ => Ok(()),
        }
    }
}

/// The faults of a run, with the seed their positions come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The faults, in the order given.
    pub faults: Vec<Fault>,
    /// The seed for positions not given.
    pub seed: u64,
}

/// What the consumer received, and what that cost.
#[derive(Clone, Debug)]
pub struct Delivered {
    /// The bytes of `trace.pt`.
    pub bytes: Vec<u8>,
    /// Where each generated byte went.
    pub delivery: Delivery,
    /// The damage, in stream order.
    pub damage: Vec<Damage>,
    /// Each fault with the position it took (for `case.json` and the report).
    pub applied: Vec<(Fault, u64)>,
}

impl Plan {
    /// Checks that the faults can be combined (FLT1): at most one of `wrap`, `stop`, `gap`.
    pub fn validate(&self) -> Result<(), FaultError> {
        let buffer: Vec<String> = self
            .faults
            .iter()
            .filter(|f| matches!(f.kind, Cause::Wrap | Cause::Stop | Cause::Gap))
            .map(|f| f.to_string())
            .collect();
        if buffer.len() > 1 {
            return Err(FaultError::Combination(buffer));
        }
        Ok(())
    }

    fn rng(&self, salt: u64) -> GenRng {
        GenRng::new(self.seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// The layout a `wrap` or `stop` fault runs on (FLT3, FLT4), for `cpu`.
    pub fn layout(&self, cpu: &CpuProfile) -> Result<Option<Layout>, FaultError> {
        let Some(f) = self.faults.iter().find(|f| f.kind.makes_layout()) else {
            return Ok(None);
        };
        let size = f.at.unwrap_or(MIN_REGION);
        let flag = if f.kind == Cause::Stop {
            "stop = true"
        } else {
            "int = true"
        };
        // A ToPA region holds at most 128 MiB (a 4-bit size field): a larger buffer is a ring of
        // 128 MiB regions, INT (wrap) or STOP (stop) on the last. Each region is aligned to its
        // size (T2): from 1 MiB, or from its own size when larger.
        let region = size.min(MAX_REGION);
        let base = region.max(0x10_0000);
        let mut entries = String::new();
        for k in 0..size / region {
            let last = k + 1 == size / region;
            entries.push_str(&format!(
                "  {{ region = {:#x}, size = \"{}K\"{} }},\n",
                base + k * region,
                region / 1024,
                if last { format!(", {flag}") } else { String::new() }
            ));
        }
        let text = format!(
            "cpu = \"{}\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\nmask_ptrs = 0x7f\n\
             [[table]]\nbase = 0x10000\nentries = [\n{entries}  {{ end = 0x10000 }},\n]\n",
            cpu.name,
        );
        let mut layout = Layout::parse(Path::new("<fault layout>"), &text)
            .map_err(|e| FaultError::Layout(*f, e.to_string()))?;
        layout.cpu = cpu.clone();
        Ok(Some(layout))
    }

    /// The instructions (counting from 1) at which `ovf` faults begin (FLT2).
    pub fn overflows(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .faults
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kind == Cause::Ovf)
            .map(|(i, f)| f.at.unwrap_or_else(|| 64 + self.rng(i as u64).below(449)))
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether a fault (`wrap`, `stop`) replaces the layout with a buffer of its size.
    pub fn makes_layout(&self) -> bool {
        self.faults.iter().any(|f| f.kind.makes_layout())
    }

    /// Whether the consumer does not get the stream as stored (`wrap`, `gap`, `corrupt*`).
    pub fn changes_delivery(&self) -> bool {
        self.faults
            .iter()
            .any(|f| !matches!(f.kind, Cause::Ovf | Cause::Stop))
    }

    /// Applies the consumer-side faults to `full` (every stored byte): the bytes `trace.pt` gets,
    /// where they came from, and the damage (FLT3, FLT5–FLT7). `pmis`: stream offsets of the
    /// ToPA PMIs; `ring`: the circular buffer's size for `wrap`.
    pub fn deliver(&self, full: &[u8], pmis: &[u64]) -> Result<Delivered, FaultError> {
        let len = full.len() as u64;
        let mut bytes = full.to_vec();
        let mut damage: Vec<Damage> = Vec::new();
        let mut applied: Vec<(Fault, u64)> = Vec::new();
        let mut delivery = Delivery::whole(len);
        for (i, f) in self.faults.iter().enumerate() {
            let mut rng = self.rng(i as u64);
            match f.kind {
                Cause::Ovf | Cause::Stop => {}
                Cause::Corrupt | Cause::CorruptSilent => {
                    let from = f.at.unwrap_or_else(|| len / 4 + rng.below((len / 2).max(1)));
                    // FLT1: packets are found in the stream as stored, so an earlier fault's
                    // damage does not hide the packets after it; a packet whose bytes an earlier
                    // fault changed is passed over, and two faults on one packet (a second flip
                    // of the same bit undoes the first) are refused.
                    let silent = f.kind == Cause::CorruptSilent;
                    let no_packet = |from| FaultError::NoPacket {
                        fault: *f,
                        what: if silent { "TNT-8 or TIP" } else { "TNT or TIP" },
                        from,
                        len,
                    };
                    let mut search = from;
                    let (at, n) = loop {
                        let (at, p) = target(full, search, silent).ok_or_else(|| no_packet(from))?;
                        let at64 = at as u64;
                        let hit = damage.iter().zip(&applied).find(|(d, _)| {
                            matches!(d.cause, Cause::Corrupt | Cause::CorruptSilent)
                                && d.from <= at64
                                && at64 < d.to
                        });
                        match hit {
                            Some((d, &(first, _))) if d.from == at64 => {
                                return Err(FaultError::SamePacket {
                                    first,
                                    second: *f,
                                    at: at64,
                                })
                            }
                            Some((d, _)) => search = d.to,
                            None => {
                                let n = damage_packet(&mut bytes, at, p, silent)
                                    .ok_or_else(|| no_packet(from))?;
                                break (at64, n);
                            }
                        }
                    };
                    damage.push(Damage {
                        cause: f.kind,
                        from: at,
                        to: at + n,
                    });
                    applied.push((*f, at));
                }
                Cause::Wrap => {
                    let size = f.at.unwrap_or(MIN_REGION);
                    if len <= size {
                        return Err(FaultError::RingNotFilled { fault: *f, len, size });
                    }
                    damage.push(Damage {
                        cause: Cause::Wrap,
                        from: 0,
                        to: len - size,
                    });
                    delivery = Delivery {
                        segments: vec![(len - size, len, 0)],
                    };
                    applied.push((*f, size));
                }
                Cause::Gap => {
                    if pmis.is_empty() {
                        return Err(FaultError::NoPmi(*f));
                    }
                    let n = f.at.unwrap_or_else(|| 1 + rng.below(pmis.len() as u64));
                    let Some(&to) = pmis.get(n as usize - 1) else {
                        return Err(FaultError::FewPmis {
                            fault: *f,
                            pmis: pmis.len(),
                            n,
                        });
                    };
                    let from = if n >= 2 { pmis[n as usize - 2] } else { 0 };
                    damage.push(Damage {
                        cause: Cause::Gap,
                        from,
                        to,
                    });
                    delivery = Delivery {
                        segments: vec![(0, from, 0), (to, len, from)],
                    };
                    applied.push((*f, n));
                }
            }
        }
        damage.sort_by_key(|d| d.from);
        let mut out = Vec::with_capacity(delivery.len() as usize);
        for &(a, b, _) in &delivery.segments {
            out.extend_from_slice(&bytes[a as usize..b as usize]);
        }
        Ok(Delivered {
            bytes: out,
            delivery,
            damage,
            applied,
        })
    }
}

/// The first packet of `clean` (the stream as stored) at or after `from` that the fault damages:
/// for `corrupt` a TNT or TIP, for `corrupt-silent` a TNT-8, else a TIP; its offset and packet.
fn target(clean: &[u8], from: u64, silent: bool) -> Option<(usize, Packet)> {
    // Packets are found from the last PSB at or before `from` (a decoder in sync there).
    let mut sync = find_psb(clean, 0)?;
    while let Some(p) = find_psb(clean, sync + 1) {
        if p as u64 > from {
            break;
        }
        sync = p;
    }
    let wanted: &[fn(&Packet) -> bool] = if silent {
        &[
            |p| matches!(p, Packet::Tnt8(t) if t.count > 0),
            |p| matches!(p, Packet::Tip(ip) if ip.ipc != crate::packet::Ipc::Suppressed),
        ]
    } else {
        &[|p| {
            matches!(p, Packet::Tnt8(t) if t.count > 0)
                || matches!(p, Packet::Tnt64(_))
                || matches!(p, Packet::Tip(ip) if ip.ipc != crate::packet::Ipc::Suppressed)
        }]
    };
    wanted.iter().find_map(|ok| first_packet(clean, sync, from, *ok))
}

/// Damages packet `p` at `at` in `bytes`: the number of bytes changed from `at` on (the damage
/// ends at the last byte that changed), or `None` when nothing changed (a `02` over a PSB's own
/// `02`).
fn damage_packet(bytes: &mut [u8], at: usize, p: Packet, silent: bool) -> Option<u64> {
    let end = (at + UNDECODABLE.len()).min(bytes.len());
    let before = bytes[at..end].to_vec();
    if silent {
        match p {
            // The oldest bit sits just below the stop bit.
            Packet::Tnt8(t) => bytes[at] ^= 1 << t.count,
            _ => bytes[at + 1] ^= 0x40,
        }
    } else {
        let n = UNDECODABLE.len().min(bytes.len() - at);
        bytes[at..at + n].copy_from_slice(&UNDECODABLE[..n]);
    }
    let last = (at..end).filter(|&i| bytes[i] != before[i - at]).max()?;
    Some((last + 1 - at) as u64)
}

/// The first packet at or after `from` (outside PSB+) that `ok` accepts, decoding from the PSB at
/// `sync`.
fn first_packet(bytes: &[u8], sync: usize, from: u64, ok: fn(&Packet) -> bool) -> Option<(usize, Packet)> {
    let mut dec = PacketDecoder::new(&bytes[sync..], sync as u64);
    let mut in_psb = false;
    while let Some(Ok((off, p))) = dec.next_packet() {
        match p {
            Packet::Psb => in_psb = true,
            Packet::PsbEnd => in_psb = false,
            _ => {}
        }
        if off >= from && !in_psb && ok(&p) {
            return Some((off as usize, p));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_with_and_without_a_position() {
        assert_eq!(
            "ovf@100".parse::<Fault>().unwrap(),
            Fault {
                kind: Cause::Ovf,
                at: Some(100)
            }
        );
        assert_eq!(
            "corrupt-silent".parse::<Fault>().unwrap().kind,
            Cause::CorruptSilent
        );
        assert_eq!("wrap@0x2000".parse::<Fault>().unwrap().at, Some(0x2000));
        assert!("flood"
            .parse::<Fault>()
            .unwrap_err()
            .to_string()
            .contains("unknown fault"));
        assert!("wrap@5000"
            .parse::<Fault>()
            .unwrap_err()
            .to_string()
            .contains("power of two"));
        assert!("gap@x"
            .parse::<Fault>()
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        assert!("ovf@0"
            .parse::<Fault>()
            .unwrap_err()
            .to_string()
            .contains("start at 1"));
    }

    #[test]
    fn flt1_at_most_one_buffer_fault() {
        let plan = Plan {
            faults: vec!["wrap".parse().unwrap(), "gap".parse().unwrap()],
            seed: 0,
        };
        assert!(plan.validate().unwrap_err().to_string().contains("at most one"));
    }
}
