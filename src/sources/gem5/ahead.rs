//! gem5 records decoded on threads of their own (SIM20): decoding the protobuf messages is most
//! of a gem5 run's time once the tracer's fast path takes its cycles, so with two threads or more
//! it runs ahead of the mapping, split across the workers of a [`Ring`].
//!
//! Each worker, in its turn at the input, takes a block of whole messages (about [`BLOCK`] bytes:
//! [`Reader::take_block`], which frames them as the reader does and stops short of a read that
//! could wait) and decodes it into the few fields the mapping reads ([`Slim`]: no repeated
//! fields, so nothing is allocated per record). The mapping sees what the [`Reader`] on its own
//! thread gives: the same records, the same errors in the same order (a bad message where it is,
//! a framing or read error after the messages before it), and the same record count after each.
//! A block is never held back while the input waits, so an input that stalls after a bad record
//! cannot hold the error back; in strict mode the workers may have decoded a few blocks past it.

use super::messages::{InstDepRecord, Packet, RecordType};
use super::read::{decode_block, Reader, Record, TraceKind};
use crate::sources::error::Result;
use crate::sources::ring::{Blocks, Ending, Ring};
use crate::sources::SourceError;

/// Bytes per block of [`super::Gem5Events::decoded_ahead`] (about 10,000 dep records): a block is a hand-off between threads, and each
/// costs a wake-up, so they are few; its decoded records stay near a MiB.
pub const BLOCK: usize = 256 << 10;

/// The fields of a record the mapping reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slim {
    /// A dependency-trace node.
    Dep {
        /// [`RecordType`] (`Invalid` for a value that is none).
        kind: RecordType,
        pc: Option<u64>,
        comp_delay: u64,
        weight: Option<u32>,
        /// The virtual address, else the physical one.
        addr: Option<u64>,
    },
    /// A packet-trace request.
    Fetch { tick: u64, pc: Option<u64>, addr: u64 },
}

impl Slim {
    /// The fields of `r`.
    #[inline]
    pub(super) fn of(r: &Record<'_>) -> Slim {
        match r {
            Record::Dep(d) => Slim::Dep {
                kind: RecordType::try_from(d.r#type).unwrap_or(RecordType::Invalid),
                pc: d.pc,
                comp_delay: d.comp_delay,
                weight: d.weight,
                addr: d.v_addr.or(d.p_addr),
            },
            Record::Fetch(p) => Slim::Fetch {
                tick: p.tick,
                pc: p.pc,
                addr: p.addr,
            },
        }
    }
}

/// A block's read: the input offset of its first byte, and how it ended.
struct Taken {
    start: u64,
    /// The framing or read error after the block's messages ends the reader.
    ending: Ending<SourceError>,
}

/// A decoded block: its good records, and its bad messages by index among its messages.
struct Decoded {
    records: Vec<Slim>,
    errors: Vec<(usize, Option<SourceError>)>,
    messages: usize,
    ending: Ending<SourceError>,
}

impl Decoded {
    /// No messages, and the end after them.
    fn empty() -> Decoded {
        Decoded {
            records: Vec::new(),
            errors: Vec::new(),
            messages: 0,
            ending: Ending::End,
        }
    }
}

/// A trace's record messages, taken in blocks and decoded; each worker has its own records to
/// decode into.
#[derive(Clone)]
struct Messages {
    kind: TraceKind,
    name: String,
    dep: InstDepRecord,
    packet: Packet,
}

impl Blocks for Messages {
    type Token = Box<Reader>;
    type After = Taken;
    type Parsed = Decoded;

    fn read(&mut self, reader: &mut Box<Reader>, bytes: &mut Vec<u8>) -> Taken {
        let start = reader.offset();
        let ending = match reader.take_block(bytes, BLOCK) {
            Ok(true) => Ending::More,
            Ok(false) => Ending::End,
            Err(e) => Ending::Error(e),
        };
        Taken { start, ending }
    }

    fn last(after: &Taken) -> bool {
        after.ending.is_last()
    }

    fn parse(&mut self, bytes: &[u8], after: Taken, spent: Option<Decoded>) -> Decoded {
        let mut d = spent.unwrap_or_else(Decoded::empty);
        d.records.clear();
        d.errors.clear();
        let mut n = 0;
        let each = |r: Result<Record<'_>>| {
            match r {
                Ok(record) => d.records.push(Slim::of(&record)),
                Err(e) => d.errors.push((n, Some(e))),
            }
            n += 1;
        };
        decode_block(
            self.kind,
            &self.name,
            bytes,
            after.start,
            &mut self.dep,
            &mut self.packet,
            each,
        );
        d.messages = n;
        d.ending = after.ending;
        d
    }
}

/// The mapping's side of the decoding workers.
pub(super) struct Ahead {
    name: String,
    ring: Ring<Messages>,
    current: Decoded,
    /// Messages of `current` returned so far, and its good records and errors among them.
    pos: usize,
    record_pos: usize,
    error_pos: usize,
    /// Messages of the blocks before `current`.
    base: u64,
    records: u64,
    done: bool,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("name", &self.name)
            .field("ring", &self.ring)
            .field("records", &self.records)
            .finish()
    }
}

impl Ahead {
    /// Starts decoding `reader` on `workers` new threads (at least one), or gives it back when
    /// no thread can be had. The threads end at the end of input, after a framing or read error,
    /// or when this side is dropped (their next send fails; a read a worker is blocked in
    /// finishes first).
    pub(super) fn spawn(reader: Box<Reader>, workers: usize) -> std::result::Result<Ahead, Box<Reader>> {
        let name = reader.name().to_owned();
        let messages = Messages {
            kind: reader.kind(),
            name: name.clone(),
            dep: InstDepRecord::default(),
            packet: Packet::default(),
        };
        let ring = Ring::spawn(messages, reader, workers, "ptemu-gem5-decode")?;
        Ok(Ahead {
            name,
            ring,
            current: Decoded {
                ending: Ending::More,
                ..Decoded::empty()
            },
            pos: 0,
            record_pos: 0,
            error_pos: 0,
            base: 0,
            records: 0,
            done: false,
        })
    }

    /// The reader's record count after the record last returned.
    pub(super) fn records(&self) -> u64 {
        self.records
    }

    /// The next record, as [`Reader::next_record`] would return it.
    #[inline]
    pub(super) fn next_record(&mut self) -> Result<Option<Slim>> {
        loop {
            if self.pos < self.current.messages {
                let i = self.pos;
                self.pos += 1;
                self.records = self.base + self.pos as u64;
                if let Some((at, error)) = self.current.errors.get_mut(self.error_pos) {
                    if *at == i {
                        self.error_pos += 1;
                        if let Some(e) = error.take() {
                            return Err(e);
                        }
                    }
                }
                let record = self.current.records[self.record_pos];
                self.record_pos += 1;
                return Ok(Some(record));
            }
            if self.done {
                return Ok(None);
            }
            self.next_block()?;
        }
    }

    /// Moves past the current block: the next one in order, the end, or the framing or read
    /// error that ended the input.
    #[cold]
    fn next_block(&mut self) -> Result<()> {
        self.base += self.current.messages as u64;
        self.records = self.base;
        let more = self.current.ending.take().inspect_err(|_| self.done = true)?;
        if !more {
            self.done = true;
            return Ok(());
        }
        let spent = std::mem::replace(&mut self.current, Decoded::empty());
        self.current = self
            .ring
            .next(Some(spent), &self.name)
            .inspect_err(|_| self.done = true)?;
        self.pos = 0;
        self.record_pos = 0;
        self.error_pos = 0;
        Ok(())
    }
}
