//! Penn lines parsed on a thread of their own (SIM18): parsing is most of a Penn run's time, so
//! with two threads or more it runs ahead of the grouping, mapping and tracing, through a bounded
//! queue of parsed micro-ops. The reader sees what a [`super::read::LineReader`] on its own
//! thread gives: the same micro-ops and line numbers, its first error after the micro-ops before
//! it, and the same counts at the end. Two differences, neither reaching a run's outputs: the
//! skipped count read mid-run (for progress) is the parser's, up to a chunk ahead; and after the
//! error, later reads return the end instead of reading on.

use super::read::LineReader;
use super::Uop;
use crate::sources::error::Result;
use crate::sources::{ReadOptions, SourceError};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread;

/// Micro-ops per message (about 120 KiB).
const PER_CHUNK: usize = 1024;
/// Messages in flight: the parser runs at most this far ahead.
const CHUNKS_QUEUED: usize = 4;

/// Parsed lines and where the parser stood after them.
struct Chunk {
    uops: Vec<(u64, Uop)>,
    /// Lines read after the last of `uops` (blank and skipped lines included).
    lines: u64,
    /// Lines the parser skipped so far (lenient).
    skipped: u64,
    /// After `uops`: more to come, the end of input, or the error that ended it.
    next: Result<bool>,
}

/// The consumer's side of the parsing thread.
pub(super) struct Ahead {
    name: String,
    options: ReadOptions,
    chunks: Receiver<Chunk>,
    spent: SyncSender<Vec<(u64, Uop)>>,
    current: Chunk,
    pos: usize,
    /// The line of the micro-op last returned (or the parser's count once a chunk is spent).
    line: u64,
    /// Records the grouping layer rejected (lenient), on top of the parser's.
    rejected: u64,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("name", &self.name)
            .field("line", &self.line)
            .finish()
    }
}

impl Ahead {
    /// Starts parsing `lines` on a new thread, or gives `lines` back when no thread can be had.
    /// The thread ends at the end of input, at its first error, or when this side is dropped (its
    /// next send fails; a read it is blocked in finishes first).
    pub(super) fn spawn(lines: LineReader) -> std::result::Result<Ahead, LineReader> {
        let (name, options) = (lines.name().to_owned(), lines.options());
        let (full_tx, chunks) = sync_channel::<Chunk>(CHUNKS_QUEUED);
        let (spent, spent_rx) = sync_channel::<Vec<(u64, Uop)>>(CHUNKS_QUEUED + 2);
        // The reader goes over once the thread runs, so it is still here if none can be started.
        let (lines_tx, lines_rx) = sync_channel::<LineReader>(1);
        let parse = move || {
            let Ok(mut lines) = lines_rx.recv() else { return };
            loop {
                let mut uops = spent_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(PER_CHUNK));
                uops.clear();
                let mut next = Ok(true);
                while uops.len() < PER_CHUNK {
                    match lines.next_uop() {
                        Ok(Some(u)) => uops.push(u),
                        Ok(None) => {
                            next = Ok(false);
                            break;
                        }
                        Err(e) => {
                            next = Err(e);
                            break;
                        }
                    }
                }
                let go_on = matches!(next, Ok(true));
                let chunk = Chunk {
                    uops,
                    lines: lines.line(),
                    skipped: lines.skipped(),
                    next,
                };
                if full_tx.send(chunk).is_err() || !go_on {
                    return;
                }
            }
        };
        if thread::Builder::new()
            .name("ptemu-penn-parse".into())
            .spawn(parse)
            .is_err()
        {
            return Err(lines);
        }
        if let Err(back) = lines_tx.send(lines) {
            return Err(back.0);
        }
        Ok(Ahead {
            name,
            options,
            chunks,
            spent,
            current: Chunk {
                uops: Vec::new(),
                lines: 0,
                skipped: 0,
                next: Ok(true),
            },
            pos: 0,
            line: 0,
            rejected: 0,
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn line(&self) -> u64 {
        self.line
    }

    pub(super) fn skipped(&self) -> u64 {
        self.current.skipped + self.rejected
    }

    pub(super) fn lenient(&self) -> bool {
        self.options.lenient
    }

    pub(super) fn skip(&mut self, err: SourceError) -> Result<()> {
        self.options.skip(err, &mut self.rejected)
    }

    /// The next parsed micro-op, as [`LineReader::next_uop`] would return it.
    #[inline]
    pub(super) fn next_uop(&mut self) -> Result<Option<(u64, Uop)>> {
        loop {
            if let Some(&u) = self.current.uops.get(self.pos) {
                self.pos += 1;
                self.line = u.0;
                return Ok(Some(u));
            }
            self.line = self.current.lines;
            match std::mem::replace(&mut self.current.next, Ok(false)) {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) => return Err(e),
            }
            let Ok(next) = self.chunks.recv() else {
                // The parser is gone without its last word: it panicked.
                return Err(SourceError::io(
                    &self.name,
                    None,
                    std::io::Error::other("the parsing thread stopped"),
                ));
            };
            let spent = std::mem::replace(&mut self.current, next);
            let _ = self.spent.try_send(spent.uops);
            self.pos = 0;
        }
    }
}
