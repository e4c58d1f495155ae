//! Fixed-size binary records (the BYU formats): a framer that counts records and offsets, a
//! streaming reader over one reused buffer, a writer of the same bytes, and the macro that makes a
//! bit-field layout a [`FixedRecord`].

use crate::sources::error::{ErrorKind, Position, Result, SourceError};
use crate::sources::Input;
use std::io::{self, BufRead, Read, Write};

/// Reads up to `buf.len()` bytes: fewer only at the end of the input. (Interrupted reads never
/// get here: `Input` reads again.)
pub(crate) fn fill(input: &mut Input, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
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
        self.position_back(len, 0)
    }

    /// The position of the record `back` records before the one read last.
    pub(crate) fn position_back(&self, len: usize, back: usize) -> Position {
        let back = back as u64;
        Position::Record {
            index: self.index.saturating_sub(back),
            offset: self.offset.saturating_sub((back + 1) * len as u64),
        }
    }

    /// Replaces `out` with up to `max` records decoded straight from the input's buffer by
    /// [`FixedRecord::decode_all`] (a block decode, no copy for a mapped file); `scratch` (one
    /// record long) serves a record that straddles buffer fills. Returns how many were read: 0 at
    /// a clean end.
    pub(crate) fn batch<R: FixedRecord>(
        &mut self,
        max: usize,
        out: &mut Vec<R>,
        scratch: &mut [u8],
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
            R::decode_all(&avail[..n * len], out);
            self.input.consume(n * len);
            self.index += n as u64;
            self.offset += (n * len) as u64;
            return Ok(n);
        }
        if max > 0 && self.next(scratch)? {
            out.push(R::decode(scratch));
            return Ok(1);
        }
        Ok(0)
    }

    /// Fills `buf` with the next record; `Ok(false)` at a clean end of input.
    #[inline]
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

/// A record of fixed size, stored as bytes on disk (the BYU formats).
pub trait FixedRecord: Copy {
    /// Bytes per record (at most [`MAX_RECORD_LEN`]).
    const LEN: usize;
    /// Decodes `bytes` (exactly `LEN` long).
    fn decode(bytes: &[u8]) -> Self;
    /// Encodes into `out` (exactly `LEN` long).
    fn encode(&self, out: &mut [u8]);
    /// Appends the records of `bytes` (a whole number of records) to `out`, the same records
    /// [`FixedRecord::decode`] gives one at a time. A format may override it with a faster block
    /// decode.
    #[inline]
    fn decode_all(bytes: &[u8], out: &mut Vec<Self>) {
        decode_each(bytes, out)
    }
}

/// [`FixedRecord::decode_all`] one record at a time: the default, and the fallback of a block
/// decoder.
#[inline]
pub(crate) fn decode_each<R: FixedRecord>(bytes: &[u8], out: &mut Vec<R>) {
    out.extend(bytes.chunks_exact(R::LEN).map(R::decode));
}

/// Records per [`FixedReader::read_batch`] call that the BYU mappings use, and a good block for
/// any caller: one tight read of the input's buffer, then the mapping, instead of a call per
/// record, and the decoded block (2 KB of 6-byte records, 3 KB of 12-byte ones) stays in L1.
/// Blocks of 4096 records spill out of it and read at 0.54-0.69x a scan of the file instead of
/// 0.9-1.0x (sources bench, November 2026).
pub const BATCH: usize = 256;

/// The largest fixed record length a [`FixedReader`] supports.
pub const MAX_RECORD_LEN: usize = 16;

/// Streams fixed-size records from an [`Input`] through one reused buffer.
#[derive(Debug)]
pub struct FixedReader<R> {
    framer: Framer,
    buf: [u8; MAX_RECORD_LEN],
    record: std::marker::PhantomData<R>,
}

impl<R: FixedRecord> FixedReader<R> {
    /// A reader at the start of `input`.
    pub fn new(input: Input) -> Self {
        const { assert!(R::LEN <= MAX_RECORD_LEN) };
        FixedReader {
            framer: Framer::new(input),
            buf: [0; MAX_RECORD_LEN],
            record: std::marker::PhantomData,
        }
    }

    /// The next record, or `None` at the end. A short tail is a [`ErrorKind::Truncated`] error.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<R>> {
        let buf = &mut self.buf[..R::LEN];
        if !self.framer.next(buf)? {
            return Ok(None);
        }
        Ok(Some(R::decode(buf)))
    }

    /// Replaces `out` with up to `max` records (fewer at the end of a buffer fill; 0 at the end
    /// of the input): the fast way through a large file, the same records as
    /// [`FixedReader::next_record`] and the same errors.
    pub fn read_batch(&mut self, out: &mut Vec<R>, max: usize) -> Result<usize> {
        self.framer.batch(max, out, &mut self.buf[..R::LEN])
    }

    /// The input's name.
    pub fn name(&self) -> &str {
        self.framer.input.name()
    }

    /// The position of the record returned last.
    pub fn position(&self) -> Position {
        self.framer.position(R::LEN)
    }

    /// An error about the record returned last: the input's name and its position.
    pub fn error_here(&self, kind: ErrorKind, message: String) -> SourceError {
        SourceError::at(self.name(), self.position(), kind, message)
    }

    /// An error about the record `back` records before the one returned last (0: that one; a
    /// record of the last [`FixedReader::read_batch`] is `batch.len() - 1 - i` back).
    pub fn error_back(&self, back: usize, kind: ErrorKind, message: String) -> SourceError {
        SourceError::at(
            self.name(),
            self.framer.position_back(R::LEN, back),
            kind,
            message,
        )
    }

    /// Records read so far (including a truncated one).
    pub fn records(&self) -> u64 {
        self.framer.index
    }
}

/// Writes fixed-size records, the same bytes the reader reads.
#[derive(Debug)]
pub struct FixedWriter<W: Write, R> {
    out: W,
    record: std::marker::PhantomData<R>,
}

impl<W: Write, R: FixedRecord> FixedWriter<W, R> {
    /// A writer into `out`.
    pub fn new(out: W) -> Self {
        FixedWriter {
            out,
            record: std::marker::PhantomData,
        }
    }

    /// Appends one record.
    pub fn write(&mut self, r: &R) -> io::Result<()> {
        let mut buf = [0u8; MAX_RECORD_LEN];
        r.encode(&mut buf[..R::LEN]);
        self.out.write_all(&buf[..R::LEN])
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Implements [`FixedRecord`] for a record type with `from_bytes([u8; LEN])` and
/// `to_bytes() -> [u8; LEN]` (the modular-bitfield layouts of both BYU formats).
macro_rules! fixed_record {
    ($record:ty, $len:expr $(, decode_all = $decode_all:path)?) => {
        impl $crate::sources::fixed::FixedRecord for $record {
            const LEN: usize = $len;
            #[inline]
            fn decode(bytes: &[u8]) -> Self {
                <$record>::from_bytes(bytes.try_into().expect("one record long"))
            }
            #[inline]
            fn encode(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_bytes())
            }
            $(
                #[inline]
                fn decode_all(bytes: &[u8], out: &mut Vec<Self>) {
                    $decode_all(bytes, out)
                }
            )?
        }
    };
}
pub(crate) use fixed_record;

/// Checks a format's [`FixedRecord::decode_all`] (its block decoder) against
/// [`FixedRecord::decode`] one record at a time, on the whole records of `bytes`, appended after
/// `head`: the one check of every block decoder's tests.
#[cfg(test)]
pub(crate) fn check_decode_all<R>(
    bytes: &[u8],
    head: R,
) -> std::result::Result<(), proptest::test_runner::TestCaseError>
where
    R: FixedRecord + PartialEq + std::fmt::Debug,
{
    let bytes = &bytes[..bytes.len() / R::LEN * R::LEN];
    let want: Vec<R> = bytes.chunks_exact(R::LEN).map(R::decode).collect();
    let mut got = vec![head];
    R::decode_all(bytes, &mut got);
    proptest::prop_assert_eq!(&got[0], &head);
    proptest::prop_assert_eq!(&got[1..], &want[..]);
    Ok(())
}
