//! The facts of a run, spooled to a file as they come (memory stays flat however long the run),
//! read back once the damage is known. A private format: a tag byte, then varints, each number
//! written as its difference from the one before it of its kind (an IP from the last IP, an
//! offset from the last offset), so an instruction takes a few bytes.

use crate::packet::{Packet, MAX_PACKET_LEN};
use crate::tracer::{BranchFact, Carrier, Fact, Loss, Timing};
use prost::encoding::encode_varint;
use std::io::{self, Read, Write};

const INSN: u8 = 1;
const ENABLE: u8 = 2;
const DISABLE: u8 = 3;
const ASYNC: u8 = 4;
const OVERFLOW: u8 = 5;
const PSB: u8 = 6;
const MARK: u8 = 7;
const TIME: u8 = 8;

const BRANCH_KINDS: [&str; 7] = ["cond", "jump", "call", "ind-jump", "ind-call", "ret", "far"];

/// A difference of two wrapping `u64`s, as a varint of its signed value.
fn zigzag(v: u64) -> u64 {
    crate::sources::varint::zigzag(v as i64)
}

fn unzigzag(v: u64) -> u64 {
    crate::sources::varint::unzigzag(v) as u64
}

/// The numbers each fact is written relative to.
#[derive(Clone, Copy, Debug, Default)]
struct Last {
    ip: u64,
    off: u64,
    tsc: u64,
}

impl Last {
    fn ip(&mut self, b: &mut Vec<u8>, ip: u64) {
        encode_varint(zigzag(ip.wrapping_sub(self.ip)), b);
        self.ip = ip;
    }

    fn off(&mut self, b: &mut Vec<u8>, off: u64) {
        encode_varint(zigzag(off.wrapping_sub(self.off)), b);
        self.off = off;
    }
}

/// Writes facts in the spool format.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
    last: Last,
}

impl<W: Write> Writer<W> {
    /// A writer to `out` (it buffers: `out` need not).
    pub fn new(out: W) -> Self {
        Writer {
            out,
            buf: Vec::with_capacity(1 << 17),
            last: Last::default(),
        }
    }

    /// Writes `f`.
    #[inline]
    pub fn write(&mut self, f: &Fact) -> io::Result<()> {
        let (b, last) = (&mut self.buf, &mut self.last);
        match *f {
            Fact::Insn {
                ip,
                exec,
                carrier,
                branch,
            } => {
                let k = branch.map_or(0, |b| {
                    1 + BRANCH_KINDS.iter().position(|&k| k == b.kind).unwrap_or(0) as u8
                        + if b.taken { 0x10 } else { 0 }
                });
                let c = match carrier {
                    Carrier::Packet { .. } => 0,
                    Carrier::Lost(Loss::Overflow) => 0x20,
                    Carrier::Lost(Loss::Stopped) => 0x40,
                };
                b.push(INSN);
                b.push(k | c);
                last.ip(b, ip);
                last.off(b, exec);
                if let Carrier::Packet { start, end } = carrier {
                    last.off(b, start);
                    encode_varint(end.wrapping_sub(start), b);
                }
                if let Some(br) = branch {
                    encode_varint(zigzag(br.to.wrapping_sub(ip)), b);
                }
            }
            Fact::Enable { ip, start, end } => {
                b.push(ENABLE);
                last.ip(b, ip);
                last.off(b, start);
                encode_varint(end.wrapping_sub(start), b);
            }
            Fact::Disable { start, end } => {
                b.push(DISABLE);
                last.off(b, start);
                encode_varint(end.wrapping_sub(start), b);
            }
            Fact::Async { from, to, start, end } => {
                b.push(ASYNC);
                last.ip(b, from);
                last.ip(b, to);
                last.off(b, start);
                encode_varint(end.wrapping_sub(start), b);
            }
            Fact::Overflow { start, end } => {
                b.push(OVERFLOW);
                last.off(b, start);
                encode_varint(end.wrapping_sub(start), b);
            }
            Fact::Psb { start } => {
                b.push(PSB);
                last.off(b, start);
            }
            Fact::Time {
                tsc,
                slack,
                kind,
                start,
            } => {
                b.push(TIME);
                encode_varint(zigzag(tsc.wrapping_sub(last.tsc)), b);
                last.tsc = tsc;
                let k = match kind {
                    Timing::Tsc => 0,
                    Timing::Mtc => 1,
                    Timing::Cyc => 2,
                };
                b.push(k);
                encode_varint(slack, b);
                last.off(b, start);
            }
            Fact::Mark {
                packet,
                status,
                ip,
                start,
                end,
            } => {
                let mut bytes = [0u8; MAX_PACKET_LEN];
                let n = packet.encode_into(&mut bytes).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("fact spool: {packet:?}: {e}"))
                })?;
                b.push(MARK);
                b.push(n as u8 | if ip.is_some() { 0x80 } else { 0 } | if status { 0x40 } else { 0 });
                b.extend_from_slice(&bytes[..n]);
                if let Some(ip) = ip {
                    last.ip(b, ip);
                }
                last.off(b, start);
                encode_varint(end.wrapping_sub(start), b);
            }
        }
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Passes what is buffered on to the writer (after each batch of events: a write error, a
    /// full disk, shows at the batch it happened in, not at the end of the run).
    pub fn pass_on(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is buffered and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads facts back.
#[derive(Debug)]
pub struct Reader<R: Read> {
    input: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    last: Last,
}

/// The longest a fact can be: a tag, a byte, five varints (or a packet and three).
const MAX_FACT: usize = 2 + 5 * 10 + MAX_PACKET_LEN;

fn cut() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "fact spool: a fact cut short")
}

impl<R: Read> Reader<R> {
    /// A reader of `input`.
    pub fn new(input: R) -> Self {
        Reader {
            input,
            buf: Vec::with_capacity(1 << 17),
            pos: 0,
            eof: false,
            last: Last::default(),
        }
    }

    /// Makes sure a whole fact is buffered, unless the input ends first.
    fn fill(&mut self) -> io::Result<()> {
        if self.buf.len() - self.pos >= MAX_FACT || self.eof {
            return Ok(());
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        let have = self.buf.len();
        self.buf.resize(1 << 17, 0);
        let mut n = have;
        while n < self.buf.len() {
            match self.input.read(&mut self.buf[n..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.buf.truncate(n);
        Ok(())
    }

    fn varint(&mut self) -> io::Result<u64> {
        let (v, next) = crate::sources::varint::read(&self.buf, self.pos, 10).ok_or_else(cut)?;
        self.pos = next;
        Ok(v)
    }

    fn ip(&mut self) -> io::Result<u64> {
        self.last.ip = self.last.ip.wrapping_add(unzigzag(self.varint()?));
        Ok(self.last.ip)
    }

    fn off(&mut self) -> io::Result<u64> {
        self.last.off = self.last.off.wrapping_add(unzigzag(self.varint()?));
        Ok(self.last.off)
    }

    fn span(&mut self) -> io::Result<(u64, u64)> {
        let start = self.off()?;
        Ok((start, start.wrapping_add(self.varint()?)))
    }

    /// The next fact; `None` at the end of the spool.
    #[inline]
    pub fn next_fact(&mut self) -> io::Result<Option<Fact>> {
        self.fill()?;
        let Some(&tag) = self.buf.get(self.pos) else {
            return Ok(None);
        };
        self.pos += 1;
        let f = match tag {
            INSN => {
                let k = *self.buf.get(self.pos).ok_or_else(cut)?;
                self.pos += 1;
                let ip = self.ip()?;
                let exec = self.off()?;
                let carrier = match k & 0x60 {
                    0 => {
                        let (start, end) = self.span()?;
                        Carrier::Packet { start, end }
                    }
                    0x20 => Carrier::Lost(Loss::Overflow),
                    _ => Carrier::Lost(Loss::Stopped),
                };
                let branch = match k & 0xf {
                    0 => None,
                    b => Some(BranchFact {
                        kind: BRANCH_KINDS[usize::from(b - 1).min(BRANCH_KINDS.len() - 1)],
                        taken: k & 0x10 != 0,
                        to: ip.wrapping_add(unzigzag(self.varint()?)),
                    }),
                };
                Fact::Insn {
                    ip,
                    exec,
                    carrier,
                    branch,
                }
            }
            ENABLE => {
                let ip = self.ip()?;
                let (start, end) = self.span()?;
                Fact::Enable { ip, start, end }
            }
            DISABLE => {
                let (start, end) = self.span()?;
                Fact::Disable { start, end }
            }
            ASYNC => {
                let from = self.ip()?;
                let to = self.ip()?;
                let (start, end) = self.span()?;
                Fact::Async { from, to, start, end }
            }
            OVERFLOW => {
                let (start, end) = self.span()?;
                Fact::Overflow { start, end }
            }
            PSB => Fact::Psb { start: self.off()? },
            TIME => {
                self.last.tsc = self.last.tsc.wrapping_add(unzigzag(self.varint()?));
                let k = *self.buf.get(self.pos).ok_or_else(cut)?;
                self.pos += 1;
                Fact::Time {
                    tsc: self.last.tsc,
                    kind: match k {
                        0 => Timing::Tsc,
                        1 => Timing::Mtc,
                        _ => Timing::Cyc,
                    },
                    slack: self.varint()?,
                    start: self.off()?,
                }
            }
            MARK => {
                let k = *self.buf.get(self.pos).ok_or_else(cut)?;
                let n = usize::from(k & 0x3f);
                let bytes = self.buf.get(self.pos + 1..self.pos + 1 + n).ok_or_else(cut)?;
                let (packet, len) = Packet::decode(bytes, None)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("fact spool: {e:?}")))?;
                if len != n {
                    return Err(cut());
                }
                self.pos += 1 + n;
                let ip = if k & 0x80 != 0 { Some(self.ip()?) } else { None };
                let (start, end) = self.span()?;
                Fact::Mark {
                    packet,
                    status: k & 0x40 != 0,
                    ip,
                    start,
                    end,
                }
            }
            t => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("fact spool: unknown tag {t}"),
                ))
            }
        };
        Ok(Some(f))
    }
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
            Fact::Mark {
                packet: Packet::Ptw {
                    size: crate::packet::PtwSize::Eight,
                    payload: 0x6025c8,
                    ip: true,
                },
                status: false,
                ip: Some(0x400000),
                start: 11,
                end: 21,
            },
            Fact::Time {
                tsc: 0x1_0000_1234,
                slack: 0,
                kind: Timing::Tsc,
                start: 30,
            },
            Fact::Time {
                tsc: 0x1_0000_1000,
                slack: 7,
                kind: Timing::Cyc,
                start: 33,
            },
            Fact::Mark {
                packet: Packet::Cbr { ratio: 0x24 },
                status: true,
                ip: None,
                start: 21,
                end: 25,
            },
        ];
        let mut w = Writer::new(Vec::new());
        for f in &facts {
            w.write(f).unwrap();
        }
        let buf = w.finish().unwrap();
        let mut r = Reader::new(&buf[..]);
        for f in &facts {
            assert_eq!(r.next_fact().unwrap().as_ref(), Some(f));
        }
        assert_eq!(r.next_fact().unwrap(), None);
        // Cut anywhere: an error or fewer facts, never a panic.
        for n in 0..buf.len() {
            let mut r = Reader::new(&buf[..n]);
            while let Ok(Some(_)) = r.next_fact() {}
        }
    }
}
