//! Penn lines parsed on threads of their own (SIM18, SIM19): parsing is most of a Penn run's time,
//! so with two threads or more it runs ahead of the grouping, mapping and tracing, and it is split
//! across workers.
//!
//! The workers take turns at the input: worker `k` of `n` holds it for blocks `k`, `k + n`,
//! `k + 2n`, ..., reads a block of whole lines (about [`BLOCK`] bytes) into its own buffer, hands
//! the input on to worker `k + 1` (a token ring: the input itself is the token, so the reads stay
//! in order) and parses the block with line numbers counted from its start, where the bytes are
//! still in its core's cache. The reader takes the parsed blocks back in order and numbers their
//! lines. It sees what a [`super::read::LineReader`] on its own thread gives: the same micro-ops
//! and line numbers, the same errors in the same order (a bad line, a line too long, a read error
//! at the line after the last whole one) and the same counts. After an error, later reads return
//! the end instead of reading on (simulate stops at the first error anyway). Bounded: each worker
//! holds one block and at most [`QUEUED`] + 1 parsed ones; micro-op buffers go back to be
//! reused. Interrupted reads never get here: [`Input`] reads again.

use super::parse::{LineError, MAX_LINE};
use super::read::{parse_or_blank, too_long};
use super::Uop;
use crate::sources::error::Result;
use crate::sources::{ErrorKind, Input, Position, ReadOptions, SourceError};
use std::io::{self, BufRead};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread;

/// Bytes per block (about 1,500 lines).
pub(super) const BLOCK: usize = 128 << 10;
/// Parsed blocks queued from each worker (one more waits in its blocked send).
const QUEUED: usize = 2;

/// What follows a block's bytes.
enum After {
    More,
    End,
    /// A read error after the block's whole lines (a part line before it is dropped, as the
    /// line reader never parses it).
    Error(io::Error),
}

/// A parsed block: its micro-ops and bad lines by line number within the block (from 1).
struct Parsed {
    uops: Vec<(u64, Uop)>,
    errors: Vec<(u64, LineError)>,
    lines: u64,
    after: After,
}

/// The reader's side of the parsing workers.
pub(super) struct Split {
    name: String,
    options: ReadOptions,
    /// The workers, joined when one is gone without its last word, to pass its panic on.
    threads: Vec<thread::JoinHandle<()>>,
    /// Parsed blocks from each worker, taken in turn.
    parsed: Vec<Receiver<Parsed>>,
    /// Spent micro-op buffers back to each worker.
    spent: Vec<SyncSender<Vec<(u64, Uop)>>>,
    /// The worker of the next block.
    turn: usize,
    current: Parsed,
    pos: usize,
    error_pos: usize,
    /// Lines of the blocks before `current`.
    base: u64,
    /// The line of the micro-op last returned, or of the bad line last skipped.
    line: u64,
    skipped: u64,
    done: bool,
}

impl std::fmt::Debug for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Split")
            .field("name", &self.name)
            .field("workers", &self.parsed.len())
            .field("line", &self.line)
            .finish()
    }
}

impl Split {
    /// Starts `workers` parsing threads (at least one) over `input`, or gives `input` back when
    /// no thread can be had. The threads end at the end of input, after a read error, or when
    /// this side is dropped (their next send fails; a read a worker is blocked in finishes
    /// first).
    pub(super) fn spawn(
        input: Input,
        options: ReadOptions,
        workers: usize,
    ) -> std::result::Result<Split, Input> {
        let workers = workers.max(1);
        let name = input.name().to_owned();
        let (mut turns_tx, mut turns_rx) = (Vec::new(), Vec::new());
        for _ in 0..workers {
            let (tx, rx) = sync_channel::<Token>(1);
            turns_tx.push(tx);
            turns_rx.push(Some(rx));
        }
        let first = turns_tx[0].clone();
        let mut parsed = Vec::new();
        let mut spent = Vec::new();
        let mut threads = Vec::new();
        for k in 0..workers {
            let (parsed_tx, parsed_rx) = sync_channel::<Parsed>(QUEUED);
            let (spent_tx, spent_rx) = sync_channel::<Vec<(u64, Uop)>>(QUEUED + 2);
            let turn = turns_rx[k].take().expect("one receiver per worker");
            let next = turns_tx[(k + 1) % workers].clone();
            let work = move || work(&turn, &next, &parsed_tx, &spent_rx);
            // A worker that cannot start: the ones started so far end when their turn channels
            // drop, and the input has not moved yet.
            let Ok(handle) = thread::Builder::new()
                .name(format!("ptemu-penn-parse-{k}"))
                .spawn(work)
            else {
                return Err(input);
            };
            threads.push(handle);
            parsed.push(parsed_rx);
            spent.push(spent_tx);
        }
        drop(turns_tx);
        let token = Token {
            input,
            carry: Vec::new(),
            ended: false,
        };
        if let Err(back) = first.send(token) {
            return Err(back.0.input);
        }
        Ok(Split {
            name,
            options,
            threads,
            parsed,
            spent,
            turn: 0,
            current: Parsed {
                uops: Vec::new(),
                errors: Vec::new(),
                lines: 0,
                after: After::More,
            },
            pos: 0,
            error_pos: 0,
            base: 0,
            line: 0,
            skipped: 0,
            done: false,
        })
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn line(&self) -> u64 {
        self.line
    }

    pub(super) fn skipped(&self) -> u64 {
        self.skipped
    }

    pub(super) fn lenient(&self) -> bool {
        self.options.lenient
    }

    pub(super) fn skip(&mut self, err: SourceError) -> Result<()> {
        self.options.skip(err, &mut self.skipped)
    }

    /// The next parsed micro-op, as [`super::read::LineReader::next_uop`] would return it.
    #[inline]
    pub(super) fn next_uop(&mut self) -> Result<Option<(u64, Uop)>> {
        if self.done {
            return Ok(None);
        }
        loop {
            let bad = self.current.errors.get(self.error_pos).map(|e| e.0);
            if let Some(&(rel, u)) = self.current.uops.get(self.pos) {
                if bad.is_none_or(|b| rel < b) {
                    self.pos += 1;
                    self.line = self.base + rel;
                    return Ok(Some((self.line, u)));
                }
            }
            match bad {
                Some(rel) => {
                    let spent = LineError {
                        kind: ErrorKind::BadField,
                        message: String::new(),
                    };
                    let e = std::mem::replace(&mut self.current.errors[self.error_pos].1, spent);
                    self.error_pos += 1;
                    self.line = self.base + rel;
                    let err = SourceError::at(&self.name, Position::Line(self.line), e.kind, e.message);
                    if let Err(err) = self.options.skip(err, &mut self.skipped) {
                        self.done = true;
                        return Err(err);
                    }
                }
                None => self.next_block()?,
            }
            if self.done {
                return Ok(None);
            }
        }
    }

    /// Moves past the current block: the next one in order, the end, or the read error that
    /// ended the input.
    #[cold]
    fn next_block(&mut self) -> Result<()> {
        self.base += self.current.lines;
        self.line = self.base;
        match std::mem::replace(&mut self.current.after, After::End) {
            After::More => {}
            After::End => {
                self.done = true;
                return Ok(());
            }
            After::Error(e) => {
                self.done = true;
                return Err(SourceError::io(
                    &self.name,
                    Some(Position::Line(self.base + 1)),
                    e,
                ));
            }
        }
        let Ok(next) = self.parsed[self.turn].recv() else {
            // A worker is gone without its last word: it panicked, or a neighbour did. The panic
            // goes on here, as it would on one thread. This worker is ending (its channel is
            // closed); the others are joined only when done: one may be blocked in a read.
            self.done = true;
            let mut threads = std::mem::take(&mut self.threads);
            let this = threads.remove(self.turn);
            for t in std::iter::once(this).chain(threads.into_iter().filter(|t| t.is_finished())) {
                if let Err(panic) = t.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            return Err(SourceError::io(
                &self.name,
                None,
                io::Error::other("a parsing thread stopped"),
            ));
        };
        let spent = std::mem::replace(&mut self.current, next);
        let _ = self.spent[self.turn].try_send(spent.uops);
        self.turn = (self.turn + 1) % self.parsed.len();
        self.pos = 0;
        self.error_pos = 0;
        Ok(())
    }
}

/// The input and the part line after the last block read, passed from worker to worker.
struct Token {
    input: Input,
    carry: Vec<u8>,
    /// The input ended (or failed) with the last block read.
    ended: bool,
}

/// A worker: waits for its turn at the input, reads a block, hands the input on, parses the
/// block and sends it to the reader; until the input ends or the reader or a neighbour is gone.
fn work(
    turn: &Receiver<Token>,
    next: &SyncSender<Token>,
    parsed: &SyncSender<Parsed>,
    spent: &Receiver<Vec<(u64, Uop)>>,
) {
    let mut bytes = Vec::with_capacity(BLOCK);
    while let Ok(mut token) = turn.recv() {
        if token.ended {
            // Passed round after the last block: every worker stops.
            let _ = next.send(token);
            return;
        }
        bytes.clear();
        bytes.append(&mut token.carry);
        let after = read_block(&mut token.input, &mut bytes, &mut token.carry);
        token.ended = !matches!(after, After::More);
        let last = token.ended;
        // The next worker may be gone only when the reader is: the block is parsed anyway.
        let _ = next.send(token);
        let uops = spent.try_recv().unwrap_or_default();
        let p = parse_block(&bytes, after, uops);
        if parsed.send(p).is_err() || last {
            return;
        }
    }
}

/// Reads the next block of whole lines into `bytes` (which starts with the part line carried
/// from the block before); the part line after it goes to `carry`.
fn read_block(input: &mut Input, bytes: &mut Vec<u8>, carry: &mut Vec<u8>) -> After {
    match fill(input, bytes) {
        After::More => cut(input, bytes, carry),
        After::Error(e) => {
            // Only whole lines go before the error.
            let whole = memchr::memrchr(b'\n', bytes).map_or(0, |nl| nl + 1);
            bytes.truncate(whole);
            After::Error(e)
        }
        After::End => After::End,
    }
}

/// Appends input to `bytes` until it holds [`BLOCK`] bytes or the input ends or fails.
fn fill(input: &mut Input, bytes: &mut Vec<u8>) -> After {
    while bytes.len() < BLOCK {
        let buf = match input.fill_buf() {
            Ok([]) => return After::End,
            Ok(b) => b,
            Err(e) => return After::Error(e),
        };
        let n = buf.len().min(BLOCK - bytes.len());
        bytes.extend_from_slice(&buf[..n]);
        input.consume(n);
    }
    After::More
}

/// Ends a full block after its last newline, the rest carried to the next block. A block without
/// a newline is one line longer than [`MAX_LINE`]: its first `MAX_LINE + 1` bytes stand for it
/// (the worker rejects it as too long) and the rest of it is read past.
fn cut(input: &mut Input, bytes: &mut Vec<u8>, carry: &mut Vec<u8>) -> After {
    if let Some(nl) = memchr::memrchr(b'\n', bytes) {
        carry.extend_from_slice(&bytes[nl + 1..]);
        bytes.truncate(nl + 1);
        return After::More;
    }
    bytes.truncate(MAX_LINE + 1);
    bytes.push(b'\n');
    loop {
        let buf = match input.fill_buf() {
            Ok([]) => return After::End,
            Ok(b) => b,
            Err(e) => {
                // The error is at this line, which was not whole: none of it is parsed.
                bytes.clear();
                return After::Error(e);
            }
        };
        if let Some(nl) = memchr::memchr(b'\n', buf) {
            input.consume(nl + 1);
            return After::More;
        }
        let n = buf.len();
        input.consume(n);
    }
}

/// A worker's parse of one block of whole lines (the last one may lack its newline at the end of
/// the input), `after` what follows it.
fn parse_block(bytes: &[u8], after: After, mut uops: Vec<(u64, Uop)>) -> Parsed {
    uops.clear();
    let mut errors = Vec::new();
    let (mut at, mut line) = (0, 0u64);
    while at < bytes.len() {
        let rest = &bytes[at..];
        let (len, next) = match memchr::memchr(b'\n', rest) {
            Some(nl) => (nl, at + nl + 1),
            None => (rest.len(), bytes.len()),
        };
        line += 1;
        let parsed = if len > MAX_LINE {
            Err(too_long())
        } else if let Some(u) = super::fast::parse_in(rest, len) {
            Ok(Some(u))
        } else {
            parse_or_blank(&rest[..len])
        };
        match parsed {
            Ok(Some(u)) => uops.push((line, u)),
            Ok(None) => {}
            Err(e) => errors.push((line, e)),
        }
        at = next;
    }
    Parsed {
        uops,
        errors,
        lines: line,
        after,
    }
}
