//! Reading and writing Kaplan records through two reused page buffers.

use super::record::{parse_hex4, Evicted, Record, HEADER_LEN, PAGE_SIZE};
use crate::sources::error::{ErrorKind, Position, Result, SourceError};
use crate::sources::fixed::fill;
use crate::sources::Input;
use std::io::{self, Write};

/// Streams records from an [`Input`]; each borrows the reader's two 4 KiB buffers.
#[derive(Debug)]
pub struct Reader {
    input: Input,
    image: Box<[u8; PAGE_SIZE]>,
    evicted: Box<[u8; PAGE_SIZE]>,
    index: u64,
    offset: u64,
    start: u64,
    failed: bool,
}

impl Reader {
    /// A reader at the start of `input`.
    pub fn new(input: Input) -> Reader {
        Reader {
            input,
            image: Box::new([0; PAGE_SIZE]),
            evicted: Box::new([0; PAGE_SIZE]),
            index: 0,
            offset: 0,
            start: 0,
            failed: false,
        }
    }

    /// The input's name.
    pub fn name(&self) -> &str {
        self.input.name()
    }

    /// The position of the record read last (or being read).
    pub fn position(&self) -> Position {
        Position::Record {
            index: self.index,
            offset: self.start,
        }
    }

    /// Records started so far (bad and truncated ones included).
    pub fn records(&self) -> u64 {
        self.index
    }

    fn error(&mut self, kind: ErrorKind, message: String) -> SourceError {
        if !matches!(kind, ErrorKind::BadField) {
            self.failed = true;
        }
        SourceError::at(self.input.name(), self.position(), kind, message)
    }

    /// Fills the fetched (`evicted` false) or evicted page buffer, or fails with `Truncated`.
    fn read_image(&mut self, evicted: bool, what: &str) -> Result<()> {
        let buf = if evicted {
            &mut self.evicted
        } else {
            &mut self.image
        };
        let got = fill(&mut self.input, &mut buf[..]);
        self.check(got, PAGE_SIZE, what)
    }

    fn check(&mut self, got: io::Result<usize>, len: usize, what: &str) -> Result<()> {
        let got = match got {
            Ok(n) => n,
            Err(e) => {
                self.failed = true;
                return Err(SourceError::io(self.input.name(), Some(self.position()), e));
            }
        };
        self.offset += got as u64;
        if got < len {
            return Err(self.error(
                ErrorKind::Truncated,
                format!("the file ends inside the {what}: {got} of {len} bytes"),
            ));
        }
        Ok(())
    }

    fn read_header(&mut self, what: &str) -> Result<[u8; HEADER_LEN]> {
        let mut h = [0u8; HEADER_LEN];
        let got = fill(&mut self.input, &mut h);
        self.check(got, HEADER_LEN, what)?;
        Ok(h)
    }

    /// The next record, or `None` at the end (or after an error that lost the framing).
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>> {
        if self.failed {
            return Ok(None);
        }
        self.start = self.offset;
        let mut h = [0u8; HEADER_LEN];
        let got = fill(&mut self.input, &mut h);
        if matches!(got, Ok(0)) {
            return Ok(None);
        }
        self.index += 1;
        self.check(got, HEADER_LEN, "fetched-page header (tag and page number)")?;
        let compulsory = match h[0] {
            b'C' => true,
            b'F' => false,
            t => {
                return Err(self.error(
                    ErrorKind::LostFraming,
                    format!("bad compulsory tag {:?} (expected 'C' or 'F')", t as char),
                ))
            }
        };
        let Some(page) = parse_hex4(&h[1..]) else {
            return Err(self.error(
                ErrorKind::LostFraming,
                format!(
                    "fetched page number {:?} is not 4 hex digits",
                    String::from_utf8_lossy(&h[1..])
                ),
            ));
        };
        self.read_image(false, "fetched page image")?;
        let e = self.read_header("eviction header (tag and evicted page number)")?;
        let dirty = match e[0] {
            b'N' => {
                if &e[1..] != b"0000" {
                    return Err(self.error(
                        ErrorKind::BadField,
                        format!(
                            "evicted page number {:?} after tag 'N' (no eviction) must be \"0000\"",
                            String::from_utf8_lossy(&e[1..])
                        ),
                    ));
                }
                return Ok(Some(Record {
                    compulsory,
                    page,
                    image: &self.image,
                    evicted: None,
                }));
            }
            b'W' => true,
            b'R' => false,
            t => {
                return Err(self.error(
                    ErrorKind::LostFraming,
                    format!(
                        "bad dirtiness tag {:?} (expected 'W', 'R' or 'N'); whether an evicted image follows is unknown",
                        t as char
                    ),
                ))
            }
        };
        let evicted_page = parse_hex4(&e[1..]);
        self.read_image(true, "evicted page image")?;
        let Some(evicted_page) = evicted_page else {
            return Err(self.error(
                ErrorKind::BadField,
                format!(
                    "evicted page number {:?} is not 4 hex digits",
                    String::from_utf8_lossy(&e[1..])
                ),
            ));
        };
        Ok(Some(Record {
            compulsory,
            page,
            image: &self.image,
            evicted: Some(Evicted {
                page: evicted_page,
                dirty,
                image: &self.evicted,
            }),
        }))
    }
}

/// Writes records, the same bytes the reader reads (hex digits in lower case).
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
    pub fn write(&mut self, r: &Record<'_>) -> io::Result<()> {
        r.write_to(&mut self.out)
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}
