//! Reading and writing 6-byte BYU records: a streaming reader over one reused buffer.

use super::record::{Record, RECORD_LEN};
use crate::sources::error::{ErrorKind, Position, Result, SourceError};
use crate::sources::Input;
use std::io::{self, BufRead, Read, Write};

/// Reads up to `buf.len()` bytes: fewer only at the end of the input.
pub(crate) fn fill(input: &mut Input, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A fixed-size record framer: counts records and offsets, reports a short tail as truncated.
#[derive(Debug)]
pub(crate) struct Framer {
    pub(crate) input: Input,
    /// Records started so far (the 1-based index of the last one).
    pub(crate) index: u64,
    /// Byte offset of the next record.
    pub(crate) offset: u64,
}

impl Framer {
    pub(crate) fn new(input: Input) -> Framer {
        Framer {
            input,
            index: 0,
            offset: 0,
        }
    }

    /// The position of the record read last.
    pub(crate) fn position(&self, len: usize) -> Position {
        Position::Record {
            index: self.index,
            offset: self.offset.saturating_sub(len as u64),
        }
    }

    /// Replaces `out` with up to `max` records decoded by `decode` straight from the input's
    /// buffer (a tight loop, no copy for a mapped file); `scratch` (one record long) serves a
    /// record that straddles buffer fills. Returns how many were read: 0 at a clean end.
    pub(crate) fn batch<R>(
        &mut self,
        max: usize,
        out: &mut Vec<R>,
        scratch: &mut [u8],
        decode: impl Fn(&[u8]) -> R,
    ) -> Result<usize> {
        out.clear();
        let len = scratch.len();
        let avail = match self.input.fill_buf() {
            Ok(b) => b,
            Err(e) => {
                let pos = Position::Record {
                    index: self.index + 1,
                    offset: self.offset,
                };
                return Err(SourceError::io(self.input.name(), Some(pos), e));
            }
        };
        let n = (avail.len() / len).min(max);
        if n > 0 {
            out.extend(avail[..n * len].chunks_exact(len).map(&decode));
            self.input.consume(n * len);
            self.index += n as u64;
            self.offset += (n * len) as u64;
            return Ok(n);
        }
        if max > 0 && self.next(scratch)? {
            out.push(decode(scratch));
            return Ok(1);
        }
        Ok(0)
    }

    /// Fills `buf` with the next record; `Ok(false)` at a clean end of input.
    pub(crate) fn next(&mut self, buf: &mut [u8]) -> Result<bool> {
        // Fast path: the whole record is in the input's buffer (always, for a mapped file).
        match self.input.fill_buf() {
            Ok(avail) if avail.len() >= buf.len() => {
                buf.copy_from_slice(&avail[..buf.len()]);
                self.input.consume(buf.len());
                self.index += 1;
                self.offset += buf.len() as u64;
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) => {
                let pos = Position::Record {
                    index: self.index + 1,
                    offset: self.offset,
                };
                return Err(SourceError::io(self.input.name(), Some(pos), e));
            }
        }
        let pos = Position::Record {
            index: self.index + 1,
            offset: self.offset,
        };
        let got = fill(&mut self.input, buf).map_err(|e| SourceError::io(self.input.name(), Some(pos), e))?;
        if got == 0 {
            return Ok(false);
        }
        self.index += 1;
        if got < buf.len() {
            return Err(SourceError::at(
                self.input.name(),
                pos,
                ErrorKind::Truncated,
                format!(
                    "the file ends inside the record: {got} of {} bytes (file length {} is not a multiple of {})",
                    buf.len(),
                    self.offset + got as u64,
                    buf.len()
                ),
            ));
        }
        self.offset += buf.len() as u64;
        Ok(true)
    }
}

/// Streams 6-byte records from an [`Input`] through one reused buffer.
#[derive(Debug)]
pub struct Reader {
    framer: Framer,
    buf: [u8; RECORD_LEN],
}

impl Reader {
    /// A reader at the start of `input`.
    pub fn new(input: Input) -> Reader {
        Reader {
            framer: Framer::new(input),
            buf: [0; RECORD_LEN],
        }
    }

    /// The next record, or `None` at the end. A short tail is a [`ErrorKind::Truncated`] error.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        if !self.framer.next(&mut self.buf)? {
            return Ok(None);
        }
        Ok(Some(Record::from_bytes(&self.buf)))
    }

    /// Replaces `out` with up to `max` records (fewer at the end of a buffer fill; 0 at the end
    /// of the input): the fast way through a large file, the same records as
    /// [`Reader::next_record`] and the same errors.
    pub fn read_batch(&mut self, out: &mut Vec<Record>, max: usize) -> Result<usize> {
        self.framer.batch(max, out, &mut self.buf, |b| {
            Record::from_bytes(b.try_into().expect("chunks are one record long"))
        })
    }

    /// The input's name.
    pub fn name(&self) -> &str {
        self.framer.input.name()
    }

    /// The position of the record returned last.
    pub fn position(&self) -> Position {
        self.framer.position(RECORD_LEN)
    }

    /// Records read so far (including a truncated one).
    pub fn records(&self) -> u64 {
        self.framer.index
    }
}

/// Writes 6-byte records, the same bytes the reader reads.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    /// A writer into `out`.
    pub fn new(out: W) -> Self {
        Writer { out }
    }

    /// Appends one record.
    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        self.out.write_all(&r.to_bytes())
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}
