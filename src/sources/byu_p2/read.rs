//! Reading and writing 12-byte `p2AddrTr` records through one reused buffer.

use super::record::{Record, RECORD_LEN};
use crate::sources::byu::read::Framer;
use crate::sources::error::{Position, Result};
use crate::sources::Input;
use std::io::{self, Write};

/// Streams 12-byte records from an [`Input`].
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

    /// The next record, or `None` at the end; a short tail is a `Truncated` error.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        if !self.framer.next(&mut self.buf)? {
            return Ok(None);
        }
        Ok(Some(Record::from_bytes(&self.buf)))
    }

    /// Replaces `out` with up to `max` records (fewer at the end of a buffer fill; 0 at the end
    /// of the input): the same records and errors as [`Reader::next_record`], decoded in a tight
    /// loop straight from the input's buffer.
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

/// Writes 12-byte records, the same bytes the reader reads.
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
