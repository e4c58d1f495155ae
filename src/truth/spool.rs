//! The facts of a run, spooled to a file as they come (memory stays flat however long the run),
//! read back once the damage is known. A private format: a tag byte, then varints, each number
//! written as its difference from the one before it of its kind (an IP from the last IP, an
//! offset from the last offset), so an instruction takes a few bytes. A block execution taken
//! in one step (TR14, [`Fact::Exec`]) is one record naming its block, whose description
//! ([`Writer::blocks`]) comes before the first record that names it; [`Reader`] gives its
//! instructions back one by one, as [`Fact::expand`] does.

use crate::packet::{Packet, MAX_PACKET_LEN};
use crate::tracer::{Block, BlockEnd, BranchFact, Carrier, Fact, Loss, Timing};
use prost::encoding::encode_varint;
use std::collections::VecDeque;
use std::io::{self, Read, Write};

const INSN: u8 = 1;
const ENABLE: u8 = 2;
const DISABLE: u8 = 3;
const ASYNC: u8 = 4;
const OVERFLOW: u8 = 5;
const PSB: u8 = 6;
const MARK: u8 = 7;
const TIME: u8 = 8;
/// A block's description (TR14): the next index of the table.
const BLOCK: u8 = 9;
/// An execution of a block: flags (the carrier's kind, `SAME_CARRIER`, `TAKEN`, `NEXT`), the
/// block's index, the execution's offset, the carrier, the successor when the block's end does
/// not give it.
const EXEC: u8 = 10;
const SAME_CARRIER: u8 = 0x08;
const TAKEN: u8 = 0x10;
const NEXT: u8 = 0x20;

/// How a block ends, as a byte of a [`BLOCK`] record (a target follows for 1-3).
pub(super) fn end_code(end: BlockEnd) -> (u8, Option<u64>) {
    match end {
        BlockEnd::Conditional { target } => (1, Some(target)),
        BlockEnd::Jump { target } => (2, Some(target)),
        BlockEnd::Call { target } => (3, Some(target)),
        BlockEnd::IndirectJump => (4, None),
        BlockEnd::IndirectCall => (5, None),
        BlockEnd::Return => (6, None),
        _ => (0, None),
    }
}

/// The end a table code of [`end_code`] stands for, its target read by `target` for 1-3;
/// `None` for a code no end has.
pub(super) fn end_from_code<E>(
    code: u8,
    target: impl FnOnce() -> Result<u64, E>,
) -> Result<Option<BlockEnd>, E> {
    Ok(Some(match code {
        0 => BlockEnd::FallThrough,
        1 => BlockEnd::Conditional { target: target()? },
        2 => BlockEnd::Jump { target: target()? },
        3 => BlockEnd::Call { target: target()? },
        4 => BlockEnd::IndirectJump,
        5 => BlockEnd::IndirectCall,
        6 => BlockEnd::Return,
        _ => return Ok(None),
    }))
}

/// Where an execution of `b` went, when its end says so without a record of it: the
/// fall-through or direct target, the taken target of a conditional branch when `taken`.
pub(super) fn implied_next(b: &Block, taken: bool) -> Option<u64> {
    match b.end() {
        BlockEnd::Conditional { target } if taken => Some(target),
        BlockEnd::Conditional { .. } => Some(b.fall_through()),
        BlockEnd::Jump { target } | BlockEnd::Call { target } => Some(target),
        BlockEnd::IndirectJump | BlockEnd::IndirectCall | BlockEnd::Return => None,
        _ => Some(b.fall_through()),
    }
}

/// The kind bits of a carrier in an instruction's or an execution's flags.
fn carrier_bits(c: Carrier) -> u8 {
    match c {
        Carrier::Packet { .. } => 0,
        Carrier::Lost(Loss::Overflow) => 0x20,
        Carrier::Lost(Loss::Stopped) => 0x40,
    }
}

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
    /// The blocks written ([`Writer::blocks`]), by index.
    blocks: Vec<Block>,
    /// The last execution's carrier.
    carrier: Option<Carrier>,
}

impl<W: Write> Writer<W> {
    /// A writer to `out` (it buffers: `out` need not).
    pub fn new(out: W) -> Self {
        Writer {
            out,
            buf: Vec::with_capacity(1 << 17),
            last: Last::default(),
            blocks: Vec::new(),
            carrier: None,
        }
    }

    /// Writes the blocks of `table` (the tracer's [`crate::tracer::Probe::blocks`]) past those
    /// written before: call it before writing facts drained after them, so that each
    /// [`Fact::Exec`] comes after its block (TR14).
    pub fn blocks(&mut self, table: &[Block]) -> io::Result<()> {
        for b in table.get(self.blocks.len()..).unwrap_or(&[]) {
            let buf = &mut self.buf;
            buf.push(BLOCK);
            encode_varint(zigzag(b.start().wrapping_sub(self.last.ip)), buf);
            self.last.ip = b.start();
            encode_varint(b.instructions() as u64, buf);
            buf.extend_from_slice(b.lengths());
            let (code, target) = end_code(b.end());
            buf.push(code);
            if let Some(t) = target {
                encode_varint(zigzag(t.wrapping_sub(b.start())), buf);
            }
            self.blocks.push(b.clone());
            if self.buf.len() >= 1 << 16 {
                self.out.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    /// Writes `f`.
    #[inline]
    pub fn write(&mut self, f: &Fact) -> io::Result<()> {
        let (b, last) = (&mut self.buf, &mut self.last);
        match *f {
            Fact::Exec {
                block,
                next,
                exec,
                carrier,
            } => {
                let Some(blk) = self.blocks.get(block as usize) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("fact spool: an execution of block {block}, not written before it"),
                    ));
                };
                let taken = matches!(blk.end(), BlockEnd::Conditional { target } if next == target);
                let implied = implied_next(blk, taken) == Some(next);
                let same = self.carrier == Some(carrier);
                self.carrier = Some(carrier);
                b.push(EXEC);
                b.push(
                    carrier_bits(carrier) >> 5
                        | if same { SAME_CARRIER } else { 0 }
                        | if taken { TAKEN } else { 0 }
                        | if implied { 0 } else { NEXT },
                );
                encode_varint(u64::from(block), b);
                last.off(b, exec);
                if let (false, Carrier::Packet { start, end }) = (same, carrier) {
                    last.off(b, start);
                    encode_varint(end.wrapping_sub(start), b);
                }
                if !implied {
                    encode_varint(zigzag(next.wrapping_sub(blk.fall_through())), b);
                }
            }
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
                let c = carrier_bits(carrier);
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
    /// The blocks read so far, by index.
    blocks: Vec<Block>,
    /// The last execution's carrier.
    carrier: Option<Carrier>,
    /// The instructions of the execution being given back.
    pending: VecDeque<Fact>,
}

/// The longest a fact can be: a tag, a byte, five varints (or a packet and three; or a block:
/// a tag, three varints, its lengths and a byte).
const MAX_FACT: usize = 2 + 5 * 10 + MAX_PACKET_LEN + MAX_BLOCK;

/// The most instructions a spooled block has (more is refused as damage).
const MAX_BLOCK: usize = 4096;

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
            blocks: Vec::new(),
            carrier: None,
            pending: VecDeque::new(),
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

    /// The next fact; `None` at the end of the spool. An execution of a block (TR14) is given
    /// as its instructions ([`Fact::expand`]).
    #[inline]
    pub fn next_fact(&mut self) -> io::Result<Option<Fact>> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Ok(Some(f));
            }
            match self.next_record()? {
                Some(f @ Fact::Exec { .. }) => {
                    let pending = &mut self.pending;
                    f.expand(&self.blocks, |i| pending.push_back(i));
                }
                f => return Ok(f),
            }
        }
    }

    /// The next fact as written: a block's execution whole (TR14), its block in
    /// [`Reader::blocks`]. Do not mix with [`Reader::next_fact`].
    pub fn next_unexpanded(&mut self) -> io::Result<Option<Fact>> {
        self.next_record()
    }

    /// The blocks read so far, by the index [`Fact::Exec`] names them by.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    fn byte(&mut self) -> io::Result<u8> {
        let k = *self.buf.get(self.pos).ok_or_else(cut)?;
        self.pos += 1;
        Ok(k)
    }

    /// A block record's body.
    fn block(&mut self) -> io::Result<()> {
        let start = self.ip()?;
        let n = self.varint()? as usize;
        if n > MAX_BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fact spool: a block of {n} instructions"),
            ));
        }
        let lens = self.buf.get(self.pos..self.pos + n).ok_or_else(cut)?.to_vec();
        self.pos += n;
        let code = self.byte()?;
        let end = end_from_code(code, || -> io::Result<u64> {
            Ok(start.wrapping_add(unzigzag(self.varint()?)))
        })?
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fact spool: block end {code}"),
            )
        })?;
        let b = Block::new(start, &lens, end)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("fact spool: {e}")))?;
        self.blocks.push(b);
        Ok(())
    }

    /// An execution record's body.
    fn exec(&mut self) -> io::Result<Fact> {
        let k = self.byte()?;
        let block = self.varint()?;
        let blk = self
            .blocks
            .get(block as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "fact spool: an unknown block"))?;
        let (implied, fall_through) = (implied_next(blk, k & TAKEN != 0), blk.fall_through());
        let exec = self.off()?;
        let carrier = match (k & SAME_CARRIER != 0, self.carrier) {
            (true, Some(c)) => c,
            (true, None) => return Err(cut()),
            (false, _) => match k & 3 {
                0 => {
                    let (start, end) = self.span()?;
                    Carrier::Packet { start, end }
                }
                1 => Carrier::Lost(Loss::Overflow),
                _ => Carrier::Lost(Loss::Stopped),
            },
        };
        self.carrier = Some(carrier);
        let next = match (k & NEXT != 0, implied) {
            (false, Some(n)) => n,
            _ => fall_through.wrapping_add(unzigzag(self.varint()?)),
        };
        Ok(Fact::Exec {
            block: block as u32,
            next,
            exec,
            carrier,
        })
    }

    /// The next record as written: an execution whole, a block's description read into the
    /// table.
    fn next_record(&mut self) -> io::Result<Option<Fact>> {
        loop {
            self.fill()?;
            if self.buf.get(self.pos) != Some(&BLOCK) {
                break;
            }
            self.pos += 1;
            self.block()?;
        }
        let Some(&tag) = self.buf.get(self.pos) else {
            return Ok(None);
        };
        self.pos += 1;
        let f = match tag {
            EXEC => self.exec()?,
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
