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
use crate::sources::ring::{errors_kept, Blocks, Ending, Ring};
use crate::sources::SourceError;

/// Bytes per block of [`super::Gem5Events::decoded_ahead`] (about 10,000 dep records): a block
/// is a hand-off between threads, and each costs a wake-up, so they are few. Its decoded records
/// take about 0.5 MiB, and at most 512 errors are kept with them (SIM20).
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
    /// What follows: the end, the framing or read error that ends the reader, or more.
    ending: Ending<SourceError>,
    /// Where the parse stopped, once it held as many errors as it keeps, and what follows.
    rest: Option<(usize, Taken)>,
}

impl Decoded {
    /// No messages, and the end after them.
    fn empty() -> Decoded {
        Decoded {
            records: Vec::new(),
            errors: Vec::new(),
            messages: 0,
            ending: Ending::End,
            rest: None,
        }
    }
}

/// A trace's record messages, taken in blocks and decoded; each worker has its own records to
/// decode into.
#[derive(Clone)]
struct Messages {
    kind: TraceKind,
    name: String,
    /// Errors kept per block ([`errors_kept`]).
    errors_kept: usize,
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
        let keep = self.errors_kept;
        let each = |r: Result<Record<'_>>| {
            match r {
                Ok(record) => d.records.push(Slim::of(&record)),
                Err(e) => d.errors.push((n, Some(e))),
            }
            n += 1;
            d.errors.len() < keep
        };
        let start = after.start;
        let done = decode_block(
            self.kind,
            &self.name,
            bytes,
            start,
            &mut self.dep,
            &mut self.packet,
            each,
        );
        d.messages = n;
        if done < bytes.len() && d.errors.len() >= keep {
            let rest = Taken {
                start: start + done as u64,
                ending: after.ending,
            };
            d.rest = Some((done, rest));
            d.ending = Ending::More;
        } else {
            d.ending = after.ending;
        }
        d
    }

    fn rest(decoded: &mut Decoded) -> Option<(usize, Taken)> {
        decoded.rest.take()
    }
}

/// The mapping's side of the decoding workers.
pub(super) struct Ahead {
    name: String,
    ring: Ring<Messages>,
    current: Decoded,
    /// Messages of `current` returned so far, and its errors among them (the rest are records).
    pos: usize,
    error_pos: usize,
    /// Messages of the blocks before `current`.
    base: u64,
    done: bool,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("name", &self.name)
            .field("ring", &self.ring)
            .field("records", &self.records())
            .finish()
    }
}

impl Ahead {
    /// Starts decoding `reader` on `workers` new threads (at least one), or gives it back when
    /// no thread can be had. The threads end at the end of input, after a framing or read error,
    /// or when this side is dropped (their next send fails; a read a worker is blocked in
    /// finishes first).
    pub(super) fn spawn(
        reader: Box<Reader>,
        workers: usize,
        lenient: bool,
    ) -> std::result::Result<Ahead, Box<Reader>> {
        let name = reader.name().to_owned();
        let messages = Messages {
            kind: reader.kind(),
            name: name.clone(),
            errors_kept: errors_kept(lenient),
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
            error_pos: 0,
            base: 0,
            done: false,
        })
    }

    /// The reader's record count after the record last returned.
    pub(super) fn records(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The next record, as [`Reader::next_record`] would return it.
    #[inline]
    pub(super) fn next_record(&mut self) -> Result<Option<Slim>> {
        loop {
            if self.pos < self.current.messages {
                let i = self.pos;
                self.pos += 1;
                if let Some((at, error)) = self.current.errors.get_mut(self.error_pos) {
                    if *at == i {
                        self.error_pos += 1;
                        return Err(error.take().expect("each error is returned once"));
                    }
                }
                // Every message before this one was a record or one of the errors passed.
                return Ok(Some(self.current.records[i - self.error_pos]));
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
        let mut spent = std::mem::replace(&mut self.current, Decoded::empty());
        self.base += spent.messages as u64;
        self.pos = 0;
        self.error_pos = 0;
        let more = spent.ending.take().inspect_err(|_| self.done = true)?;
        if !more {
            self.done = true;
            return Ok(());
        }
        self.current = self
            .ring
            .next(Some(spent), &self.name)
            .inspect_err(|_| self.done = true)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::messages::{InstDepRecordHeader, RecordType};
    use super::super::read::Header;
    use super::super::write::Writer;
    use super::*;
    use crate::sources::Input;
    use prost::Message;

    /// A dep trace of `n` good records with a run of `zeros` zero bytes (each an empty message,
    /// which lacks the required fields) after every 1,000th.
    fn dense(n: u64, zeros: usize) -> Vec<u8> {
        let header = Header::Dep(InstDepRecordHeader {
            obj_id: "t".into(),
            ver: None,
            tick_freq: 1_000_000_000_000,
            window_size: 576,
        });
        let mut w = Writer::new(Vec::new(), &header).unwrap();
        let Header::Dep(h) = &header else { unreachable!() };
        let delimited = |n: usize| prost::length_delimiter_len(n) + n;
        let mut at = 4 + delimited(h.encoded_len());
        let mut runs = Vec::new();
        for i in 0..n {
            let r = InstDepRecord {
                seq_num: i,
                r#type: RecordType::Comp as i32,
                comp_delay: 500,
                pc: Some(0x1000 + 4 * (i % 300)),
                ..Default::default()
            };
            w.write_dep(&r).unwrap();
            at += delimited(r.encoded_len());
            if i % 1_000 == 999 {
                runs.push(at);
            }
        }
        let mut bytes = w.finish().unwrap();
        for at in runs.into_iter().rev() {
            bytes.splice(at..at, std::iter::repeat_n(0u8, zeros));
        }
        bytes
    }

    /// Every record or error text, with the record count after it, to the end or a framing error.
    fn all(mut next: impl FnMut() -> (Result<Option<Slim>>, u64)) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        loop {
            let (r, records) = next();
            match r {
                Ok(None) => return out,
                Ok(Some(s)) => out.push((format!("{s:?}"), records)),
                Err(e) => {
                    let last = !e.is_skippable();
                    out.push((e.to_string(), records));
                    if last {
                        return out;
                    }
                }
            }
        }
    }

    /// SIM20, the errors a worker keeps per block (`ERRORS_KEPT`, lenient; 1 when strict): the
    /// rest of a block is decoded on the mapping's side, with every error's text and offset and
    /// every record count as the reader on one thread gives them, however many times the rest is
    /// taken up.
    #[test]
    fn sim20_errors_past_the_kept_ones_read_as_on_one_thread() {
        let bytes = dense(5_000, 3 * crate::sources::ring::ERRORS_KEPT + 7);
        let mut here = Reader::new(Input::from_bytes("m", bytes.clone()).unwrap()).unwrap();
        let want = all(|| {
            let r = here.next_record().map(|r| r.map(|r| Slim::of(&r)));
            (r, here.records())
        });
        assert!(want.len() > 5 * (3 * crate::sources::ring::ERRORS_KEPT + 7));
        for lenient in [false, true] {
            for workers in 1..=3 {
                let reader = Box::new(Reader::new(Input::from_bytes("m", bytes.clone()).unwrap()).unwrap());
                let mut ahead = Ahead::spawn(reader, workers, lenient).unwrap();
                let got = all(|| {
                    let r = ahead.next_record();
                    (r, ahead.records())
                });
                assert!(got == want, "lenient {lenient}, {workers} workers");
            }
        }
    }
}
