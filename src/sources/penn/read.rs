//! Streaming lines to [`Uop`]s: lines are split with `memchr` inside the input's buffer and parsed
//! in place; only a line that straddles two buffer fills is copied (into one reused buffer).

use super::parse::{is_blank, parse_line, LineError, MAX_LINE};
use super::Uop;
use crate::sources::error::Result;
use crate::sources::{ErrorKind, Input, Position, ReadOptions, SourceError};
use std::io::BufRead;

/// Reads a Penn trace one micro-op at a time: on the caller's thread ([`UopReader::new`]) or
/// parsed ahead on threads of their own ([`UopReader::parallel`], `super::split`).
#[derive(Debug)]
pub struct UopReader {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Here(LineReader),
    Ahead(super::split::Split),
}

impl UopReader {
    /// A reader over `input`, parsing on the caller's thread.
    pub fn new(input: Input, options: ReadOptions) -> Self {
        UopReader {
            inner: Inner::Here(LineReader::new(input, options)),
        }
    }

    /// A reader over `input` whose lines are parsed on a thread of its own, ahead of the caller,
    /// through a bounded queue: the same micro-ops, line numbers, errors (in order) and counts.
    pub fn ahead(input: Input, options: ReadOptions) -> Self {
        Self::parallel(input, options, 1)
    }

    /// [`UopReader::ahead`] with the parsing split across `workers` threads that take turns
    /// reading blocks of lines and parse them side by side (`super::split`): the same micro-ops,
    /// line numbers, errors (in order) and counts.
    pub fn parallel(input: Input, options: ReadOptions, workers: usize) -> Self {
        let inner = match super::split::Split::spawn(input, options, workers) {
            Ok(split) => Inner::Ahead(split),
            // No thread to be had: read here.
            Err(input) => Inner::Here(LineReader::new(input, options)),
        };
        UopReader { inner }
    }

    /// The input's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Here(r) => r.name(),
            Inner::Ahead(a) => a.name(),
        }
    }

    /// The 1-based number of the line last read.
    pub fn line(&self) -> u64 {
        match &self.inner {
            Inner::Here(r) => r.line,
            Inner::Ahead(a) => a.line(),
        }
    }

    /// Bad lines skipped under `lenient`.
    pub fn skipped(&self) -> u64 {
        match &self.inner {
            Inner::Here(r) => r.skipped,
            Inner::Ahead(a) => a.skipped(),
        }
    }

    /// [`ReadOptions::skip`] with this reader's count (also used by the grouping layer for the
    /// records it rejects): `Ok` when a lenient reader skips `err`.
    pub(crate) fn skip(&mut self, err: SourceError) -> Result<()> {
        match &mut self.inner {
            Inner::Here(r) => r.options.skip(err, &mut r.skipped),
            Inner::Ahead(a) => a.skip(err),
        }
    }

    /// Whether bad records are skipped.
    pub fn lenient(&self) -> bool {
        match &self.inner {
            Inner::Here(r) => r.options.lenient,
            Inner::Ahead(a) => a.lenient(),
        }
    }

    /// The next micro-op and its line number, `None` at the end of the input.
    #[inline]
    pub fn next_uop(&mut self) -> Result<Option<(u64, Uop)>> {
        match &mut self.inner {
            Inner::Here(r) => r.next_uop(),
            Inner::Ahead(a) => a.next_uop(),
        }
    }
}

/// The line splitter and parser.
#[derive(Debug)]
pub(super) struct LineReader {
    input: Input,
    options: ReadOptions,
    /// Lines read so far (the number of the line last returned or rejected).
    line: u64,
    /// Part of a line that straddles buffer fills.
    spill: Vec<u8>,
    skipped: u64,
}

/// One step of the line splitter.
enum Step {
    /// A parsed line (or `None` for a blank line).
    Line(std::result::Result<Option<Uop>, LineError>),
    /// End of input.
    End,
    /// Bytes were moved to the spill buffer; read on.
    More,
}

impl LineReader {
    /// A reader over `input`.
    pub(super) fn new(input: Input, options: ReadOptions) -> Self {
        LineReader {
            input,
            options,
            line: 0,
            spill: Vec::with_capacity(MAX_LINE + 1),
            skipped: 0,
        }
    }

    /// The input's name.
    pub(super) fn name(&self) -> &str {
        self.input.name()
    }

    /// The next micro-op and its line number, `None` at the end of the input.
    #[inline]
    pub(super) fn next_uop(&mut self) -> Result<Option<(u64, Uop)>> {
        // The common case in place: a whole line in the buffer that the fast path takes.
        if self.spill.is_empty() {
            if let Ok(buf) = self.input.fill_buf() {
                if let Some(nl) = memchr::memchr(b'\n', buf) {
                    if let Some(uop) = super::fast::parse_in(buf, nl) {
                        self.input.consume(nl + 1);
                        self.line += 1;
                        return Ok(Some((self.line, uop)));
                    }
                }
            }
        }
        self.next_uop_slow()
    }

    /// [`LineReader::next_uop`] for everything else: lines across buffer fills, blank, bad and
    /// over-long lines, the last line without its newline, read errors.
    #[inline(never)]
    fn next_uop_slow(&mut self) -> Result<Option<(u64, Uop)>> {
        loop {
            match self.step()? {
                Step::More => {}
                Step::End => return Ok(None),
                Step::Line(Ok(None)) => {}
                Step::Line(Ok(Some(uop))) => return Ok(Some((self.line, uop))),
                Step::Line(Err(e)) => {
                    let err =
                        SourceError::at(self.input.name(), Position::Line(self.line), e.kind, e.message);
                    self.options.skip(err, &mut self.skipped)?;
                }
            }
        }
    }

    fn io_error(&self, e: std::io::Error) -> SourceError {
        SourceError::io(self.input.name(), Some(Position::Line(self.line + 1)), e)
    }

    fn step(&mut self) -> Result<Step> {
        let buf = match self.input.fill_buf() {
            Ok(b) => b,
            Err(e) => return Err(self.io_error(e)),
        };
        if buf.is_empty() {
            if self.spill.is_empty() {
                return Ok(Step::End);
            }
            // A last line without its newline.
            self.line += 1;
            let parsed = parse_or_blank(&self.spill);
            self.spill.clear();
            return Ok(Step::Line(parsed));
        }
        match memchr::memchr(b'\n', buf) {
            Some(nl) if self.spill.is_empty() => {
                let parsed = if nl > MAX_LINE {
                    Err(too_long())
                } else {
                    parse_or_blank(&buf[..nl])
                };
                self.input.consume(nl + 1);
                self.line += 1;
                Ok(Step::Line(parsed))
            }
            Some(nl) => {
                let fits = self.spill.len() + nl <= MAX_LINE;
                if fits {
                    self.spill.extend_from_slice(&buf[..nl]);
                }
                self.input.consume(nl + 1);
                self.line += 1;
                let parsed = if fits {
                    parse_or_blank(&self.spill)
                } else {
                    Err(too_long())
                };
                self.spill.clear();
                Ok(Step::Line(parsed))
            }
            None => {
                let n = buf.len();
                if self.spill.len() + n > MAX_LINE {
                    self.input.consume(n);
                    // A read error before the line's end is at this line: not counted yet.
                    self.skip_rest_of_line()?;
                    self.line += 1;
                    self.spill.clear();
                    return Ok(Step::Line(Err(too_long())));
                }
                self.spill.extend_from_slice(buf);
                self.input.consume(n);
                Ok(Step::More)
            }
        }
    }

    /// Discards input up to and including the next newline (after an over-long line).
    fn skip_rest_of_line(&mut self) -> Result<()> {
        loop {
            let buf = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) => return Err(self.io_error(e)),
            };
            if buf.is_empty() {
                return Ok(());
            }
            if let Some(nl) = memchr::memchr(b'\n', buf) {
                self.input.consume(nl + 1);
                return Ok(());
            }
            let n = buf.len();
            self.input.consume(n);
        }
    }
}

/// The exact parser, for the lines the in-place fast path of [`LineReader::next_uop`] did not take
/// (declined, or split across buffer fills: one per fill at most).
pub(super) fn parse_or_blank(line: &[u8]) -> std::result::Result<Option<Uop>, LineError> {
    match parse_line(line) {
        Ok(u) => Ok(Some(u)),
        Err(_) if is_blank(line) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn too_long() -> LineError {
    LineError {
        kind: ErrorKind::LineTooLong,
        message: format!("line longer than {MAX_LINE} bytes"),
    }
}
