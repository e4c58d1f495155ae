//! The facts of a run, spooled to a file as they come (memory stays flat however long the run),
//! read back once the damage is known. A private binary format: a tag byte, then little-endian
//! fields.

use crate::tracer::{BranchFact, Carrier, Fact, Loss};
use byteorder::{ReadBytesExt, WriteBytesExt, LE};
use std::io::{self, Read, Write};

const INSN: u8 = 1;
const ENABLE: u8 = 2;
const DISABLE: u8 = 3;
const ASYNC: u8 = 4;
const OVERFLOW: u8 = 5;
const PSB: u8 = 6;

const BRANCH_KINDS: [&str; 7] = ["cond", "jump", "call", "ind-jump", "ind-call", "ret", "far"];

/// Writes `f` in the spool format.
pub fn write_fact<W: Write + ?Sized>(w: &mut W, f: &Fact) -> io::Result<()> {
    match *f {
        Fact::Insn {
            ip,
            exec,
            carrier,
            branch,
        } => {
            w.write_u8(INSN)?;
            w.write_u64::<LE>(ip)?;
            w.write_u64::<LE>(exec)?;
            match carrier {
                Carrier::Packet { start, end } => {
                    w.write_u8(0)?;
                    w.write_u64::<LE>(start)?;
                    w.write_u64::<LE>(end)?;
                }
                Carrier::Lost(l) => w.write_u8(if l == Loss::Overflow { 1 } else { 2 })?,
            }
            match branch {
                None => w.write_u8(0),
                Some(b) => {
                    let k = BRANCH_KINDS.iter().position(|&k| k == b.kind).unwrap_or(0);
                    w.write_u8(1 + k as u8 + if b.taken { 0x80 } else { 0 })?;
                    w.write_u64::<LE>(b.to)
                }
            }
        }
        Fact::Enable { ip, start, end } => {
            w.write_u8(ENABLE)?;
            w.write_u64::<LE>(ip)?;
            two(w, start, end)
        }
        Fact::Disable { start, end } => {
            w.write_u8(DISABLE)?;
            two(w, start, end)
        }
        Fact::Async { from, to, start, end } => {
            w.write_u8(ASYNC)?;
            w.write_u64::<LE>(from)?;
            w.write_u64::<LE>(to)?;
            two(w, start, end)
        }
        Fact::Overflow { start, end } => {
            w.write_u8(OVERFLOW)?;
            two(w, start, end)
        }
        Fact::Psb { start } => {
            w.write_u8(PSB)?;
            w.write_u64::<LE>(start)
        }
    }
}

fn two<W: Write + ?Sized>(w: &mut W, a: u64, b: u64) -> io::Result<()> {
    w.write_u64::<LE>(a)?;
    w.write_u64::<LE>(b)
}

/// Reads the next fact; `None` at the end of the spool.
pub fn read_fact<R: Read>(r: &mut R) -> io::Result<Option<Fact>> {
    let tag = match r.read_u8() {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    let f = match tag {
        INSN => {
            let ip = r.read_u64::<LE>()?;
            let exec = r.read_u64::<LE>()?;
            let carrier = match r.read_u8()? {
                0 => Carrier::Packet {
                    start: r.read_u64::<LE>()?,
                    end: r.read_u64::<LE>()?,
                },
                1 => Carrier::Lost(Loss::Overflow),
                _ => Carrier::Lost(Loss::Stopped),
            };
            let branch = match r.read_u8()? {
                0 => None,
                b => Some(BranchFact {
                    kind: BRANCH_KINDS[usize::from((b & 0x7f) - 1).min(BRANCH_KINDS.len() - 1)],
                    taken: b & 0x80 != 0,
                    to: r.read_u64::<LE>()?,
                }),
            };
            Fact::Insn {
                ip,
                exec,
                carrier,
                branch,
            }
        }
        ENABLE => Fact::Enable {
            ip: r.read_u64::<LE>()?,
            start: r.read_u64::<LE>()?,
            end: r.read_u64::<LE>()?,
        },
        DISABLE => Fact::Disable {
            start: r.read_u64::<LE>()?,
            end: r.read_u64::<LE>()?,
        },
        ASYNC => Fact::Async {
            from: r.read_u64::<LE>()?,
            to: r.read_u64::<LE>()?,
            start: r.read_u64::<LE>()?,
            end: r.read_u64::<LE>()?,
        },
        OVERFLOW => Fact::Overflow {
            start: r.read_u64::<LE>()?,
            end: r.read_u64::<LE>()?,
        },
        PSB => Fact::Psb {
            start: r.read_u64::<LE>()?,
        },
        t => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fact spool: unknown tag {t}"),
            ))
        }
    };
    Ok(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_reads_back_as_written() {
        let facts = [
            Fact::Insn {
                ip: 0x401000,
                exec: 7,
                carrier: Carrier::Packet { start: 3, end: 5 },
                branch: Some(BranchFact {
                    kind: "ind-call",
                    to: 0x402000,
                    taken: true,
                }),
            },
            Fact::Insn {
                ip: 1,
                exec: 2,
                carrier: Carrier::Lost(Loss::Overflow),
                branch: Some(BranchFact {
                    kind: "cond",
                    to: 9,
                    taken: false,
                }),
            },
            Fact::Insn {
                ip: 1,
                exec: 2,
                carrier: Carrier::Lost(Loss::Stopped),
                branch: None,
            },
            Fact::Enable {
                ip: 4,
                start: 5,
                end: 6,
            },
            Fact::Disable { start: 5, end: 6 },
            Fact::Async {
                from: 1,
                to: 2,
                start: 3,
                end: 4,
            },
            Fact::Overflow { start: 8, end: 9 },
            Fact::Psb { start: 10 },
        ];
        let mut buf = Vec::new();
        for f in &facts {
            write_fact(&mut buf, f).unwrap();
        }
        let mut r = &buf[..];
        for f in &facts {
            assert_eq!(read_fact(&mut r).unwrap().as_ref(), Some(f));
        }
        assert_eq!(read_fact(&mut r).unwrap(), None);
    }
}
