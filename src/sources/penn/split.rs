//! Penn lines parsed on threads of their own (SIM18, SIM19): parsing is most of a Penn run's time,
//! so with two threads or more it runs ahead of the grouping, mapping and tracing, and it is split
//! across the workers of a [`Ring`].
//!
//! Each worker, in its turn at the input, reads a block of whole lines (about [`BLOCK`] bytes)
//! and parses it with line numbers counted from its start. The reader takes the parsed blocks
//! back in order and numbers their lines. It sees what a [`super::read::LineReader`] on its own
//! thread gives: the same micro-ops and line numbers, the same errors in the same order (a bad
//! line, a line too long, a read error at the line after the last whole one) and the same counts.
//! After an error, later reads return the end instead of reading on (simulate stops at the first
//! error anyway). Micro-op buffers go back to be reused. Interrupted reads never get here:
//! [`Input`] reads again.

use super::parse::{LineError, MAX_LINE};
use super::read::{parse_or_blank, too_long};
use super::Uop;
use crate::sources::error::Result;
use crate::sources::ring::{errors_kept, Blocks, Ending, Ring};
use crate::sources::{ErrorKind, Input, Position, ReadOptions, SourceError};
use std::io::{self, BufRead};

/// Bytes per block of [`super::UopReader::parallel`] (about 6,000 lines): a block is a hand-off
/// between threads, and each costs a wake-up (tens of microseconds on a VM), so they are few.
pub const BLOCK: usize = 512 << 10;

/// What follows a block's bytes; a read error comes after the block's whole lines (a part line
/// before it is dropped, as the line reader never parses it).
type After = Ending<io::Error>;

/// A parsed block: its micro-ops and bad lines by line number within the block (from 1).
struct Parsed {
    uops: Vec<(u64, Uop)>,
    errors: Vec<(u64, LineError)>,
    lines: u64,
    /// What follows: the end, the read error, or more.
    after: After,
    /// Where the parse stopped, once it held as many errors as it keeps, and what follows.
    rest: Option<(usize, After)>,
}

impl Parsed {
    /// No lines, and the end after them.
    fn empty() -> Parsed {
        Parsed {
            uops: Vec::new(),
            errors: Vec::new(),
            lines: 0,
            after: Ending::End,
            rest: None,
        }
    }
}

/// The input and the part line after the last block read, passed from worker to worker.
struct Token {
    input: Input,
    carry: Vec<u8>,
}

/// Penn lines, read in blocks of whole lines and parsed; errors kept per block
/// ([`errors_kept`]).
#[derive(Clone, Copy)]
struct Lines {
    errors_kept: usize,
}

impl Blocks for Lines {
    type Token = Token;
    type After = After;
    type Parsed = Parsed;

    fn read(&mut self, token: &mut Token, bytes: &mut Vec<u8>) -> After {
        bytes.append(&mut token.carry);
        read_block(&mut token.input, bytes, &mut token.carry)
    }

    fn last(after: &After) -> bool {
        after.is_last()
    }

    fn parse(&mut self, bytes: &[u8], after: After, spent: Option<Parsed>) -> Parsed {
        parse_block(
            bytes,
            after,
            spent.unwrap_or_else(Parsed::empty),
            self.errors_kept,
        )
    }

    fn rest(parsed: &mut Parsed) -> Option<(usize, After)> {
        parsed.rest.take()
    }
}

/// The reader's side of the parsing workers.
pub(super) struct Split {
    name: String,
    options: ReadOptions,
    ring: Ring<Lines>,
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
            .field("ring", &self.ring)
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
        let name = input.name().to_owned();
        let token = Token {
            input,
            carry: Vec::new(),
        };
        let lines = Lines {
            errors_kept: errors_kept(options.lenient),
        };
        let ring = Ring::spawn(lines, token, workers, "ptemu-penn-parse").map_err(|t| t.input)?;
        Ok(Split {
            name,
            options,
            ring,
            current: Parsed {
                after: Ending::More,
                ..Parsed::empty()
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
        let more = self.current.after.take().map_err(|e| {
            self.done = true;
            SourceError::io(&self.name, Some(Position::Line(self.base + 1)), e)
        })?;
        if !more {
            self.done = true;
            return Ok(());
        }
        let spent = std::mem::replace(&mut self.current, Parsed::empty());
        self.current = self
            .ring
            .next(Some(spent), &self.name)
            .inspect_err(|_| self.done = true)?;
        self.pos = 0;
        self.error_pos = 0;
        Ok(())
    }
}

/// Reads the next block of whole lines into `bytes` (which starts with the part line carried
/// from the block before); the part line after it goes to `carry`.
fn read_block(input: &mut Input, bytes: &mut Vec<u8>, carry: &mut Vec<u8>) -> After {
    match fill(input, bytes) {
        Ending::More => cut(input, bytes, carry),
        Ending::Error(e) => {
            // Only whole lines go before the error.
            let whole = memchr::memrchr(b'\n', bytes).map_or(0, |nl| nl + 1);
            bytes.truncate(whole);
            Ending::Error(e)
        }
        Ending::End => Ending::End,
    }
}

/// Appends input to `bytes` until it holds [`BLOCK`] bytes or the input ends or fails.
fn fill(input: &mut Input, bytes: &mut Vec<u8>) -> After {
    while bytes.len() < BLOCK {
        let buf = match input.fill_buf() {
            Ok([]) => return Ending::End,
            Ok(b) => b,
            Err(e) => return Ending::Error(e),
        };
        let n = buf.len().min(BLOCK - bytes.len());
        bytes.extend_from_slice(&buf[..n]);
        input.consume(n);
    }
    Ending::More
}

/// Ends a full block after its last newline, the rest carried to the next block. A block without
/// a newline is one line longer than [`MAX_LINE`]: its first `MAX_LINE + 1` bytes stand for it
/// (the worker rejects it as too long) and the rest of it is read past.
fn cut(input: &mut Input, bytes: &mut Vec<u8>, carry: &mut Vec<u8>) -> After {
    if let Some(nl) = memchr::memrchr(b'\n', bytes) {
        carry.extend_from_slice(&bytes[nl + 1..]);
        bytes.truncate(nl + 1);
        return Ending::More;
    }
    bytes.truncate(MAX_LINE + 1);
    bytes.push(b'\n');
    loop {
        let buf = match input.fill_buf() {
            Ok([]) => return Ending::End,
            Ok(b) => b,
            Err(e) => {
                // The error is at this line, which was not whole: none of it is parsed.
                bytes.clear();
                return Ending::Error(e);
            }
        };
        if let Some(nl) = memchr::memchr(b'\n', buf) {
            input.consume(nl + 1);
            return Ending::More;
        }
        let n = buf.len();
        input.consume(n);
    }
}

/// A worker's parse of one block of whole lines (the last one may lack its newline at the end of
/// the input), `after` what follows it; it stops after `errors_kept` bad lines, leaving the rest.
fn parse_block(bytes: &[u8], after: After, spent: Parsed, errors_kept: usize) -> Parsed {
    let (mut uops, mut errors) = (spent.uops, spent.errors);
    uops.clear();
    errors.clear();
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
        if errors.len() == errors_kept && at < bytes.len() {
            return Parsed {
                uops,
                errors,
                lines: line,
                after: Ending::More,
                rest: Some((at, after)),
            };
        }
    }
    Parsed {
        uops,
        errors,
        lines: line,
        after,
        rest: None,
    }
}
