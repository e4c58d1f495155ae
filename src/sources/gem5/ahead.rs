//! gem5 records decoded on a thread of their own (SIM20): decoding the protobuf messages is most
//! of a gem5 run's time once the tracer's fast path takes its cycles, so with two threads or more
//! it runs ahead of the mapping, through a bounded queue of the few fields the mapping reads
//! ([`Slim`]: no repeated fields, so nothing is allocated per record).
//!
//! The mapping sees what the [`Reader`] on its own thread gives: the same records, the same
//! errors in the same order, and the same record count after each. After the end or an error that
//! ends the reader, the thread stops; when this side is dropped, its next send fails and it stops.
//! A chunk goes as soon as it holds an error, so an input that stalls after a bad record cannot
//! hold the error back; in strict mode the thread may have decoded up to a few chunks past it.

use super::messages::RecordType;
use super::read::{Reader, Record};
use crate::sources::error::Result;
use crate::sources::SourceError;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread;

/// Records per message.
const PER_CHUNK: usize = 1024;
/// Messages in flight.
const QUEUED: usize = 4;

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

/// One `next_record` of the reader: its outcome and the reader's record count after it.
struct Item {
    record: Result<Slim>,
    records: u64,
}

/// Items in reading order; `end`: the reader returned its end after them.
struct Chunk {
    items: Vec<Item>,
    end: bool,
}

/// The mapping's side of the decoding thread.
pub(super) struct Ahead {
    name: String,
    /// Joined when the thread is gone without its last word, to pass its panic on.
    thread: Option<thread::JoinHandle<()>>,
    chunks: Receiver<Chunk>,
    spent: SyncSender<Vec<Item>>,
    current: Chunk,
    pos: usize,
    records: u64,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("name", &self.name)
            .field("records", &self.records)
            .finish()
    }
}

impl Ahead {
    /// Starts decoding `reader` on a new thread, or gives it back when no thread can be had.
    pub(super) fn spawn(reader: Box<Reader>) -> std::result::Result<Ahead, Box<Reader>> {
        let name = reader.name().to_owned();
        let (full_tx, chunks) = sync_channel::<Chunk>(QUEUED);
        let (spent, spent_rx) = sync_channel::<Vec<Item>>(QUEUED + 2);
        // The reader goes over once the thread runs, so it is still here if none can be started.
        let (reader_tx, reader_rx) = sync_channel::<Box<Reader>>(1);
        let decode = move || {
            let Ok(mut reader) = reader_rx.recv() else { return };
            loop {
                let mut items = spent_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(PER_CHUNK));
                items.clear();
                let mut end = false;
                while items.len() < PER_CHUNK {
                    let record = match reader.next_record() {
                        Ok(Some(r)) => Ok(Slim::of(&r)),
                        Ok(None) => {
                            end = true;
                            break;
                        }
                        Err(e) => Err(e),
                    };
                    let error = record.is_err();
                    items.push(Item {
                        record,
                        records: reader.records(),
                    });
                    if error {
                        // Sent at once: an input that stalls next must not hold the error back.
                        break;
                    }
                }
                if full_tx.send(Chunk { items, end }).is_err() || end {
                    return;
                }
            }
        };
        let Ok(thread) = thread::Builder::new()
            .name("ptemu-gem5-decode".into())
            .spawn(decode)
        else {
            return Err(reader);
        };
        if let Err(back) = reader_tx.send(reader) {
            return Err(back.0);
        }
        Ok(Ahead {
            name,
            thread: Some(thread),
            chunks,
            spent,
            current: Chunk {
                items: Vec::new(),
                end: false,
            },
            pos: 0,
            records: 0,
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
            if let Some(item) = self.current.items.get_mut(self.pos) {
                self.pos += 1;
                self.records = item.records;
                // The item is spent: an error is moved out, a record copied.
                let placeholder = Ok(Slim::Fetch {
                    tick: 0,
                    pc: None,
                    addr: 0,
                });
                return std::mem::replace(&mut item.record, placeholder).map(Some);
            }
            if self.current.end {
                return Ok(None);
            }
            let Ok(next) = self.chunks.recv() else {
                // The thread is gone without its last word: its panic goes on here, as it would
                // on one thread.
                self.current.end = true;
                if let Some(Err(panic)) = self.thread.take().map(thread::JoinHandle::join) {
                    std::panic::resume_unwind(panic);
                }
                return Err(SourceError::io(
                    &self.name,
                    None,
                    std::io::Error::other("the decoding thread stopped"),
                ));
            };
            let spent = std::mem::replace(&mut self.current, next);
            let _ = self.spent.try_send(spent.items);
            self.pos = 0;
        }
    }
}
