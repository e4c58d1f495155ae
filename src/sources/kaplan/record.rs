//! The Kaplan page-image record: `C|F`, 4 hex digits, a 4096-byte page image, `W|R|N`, 4 hex
//! digits, and (unless `N`) the evicted page's 4096-byte image.

use std::io::{self, Write};

/// Bytes per page image.
pub const PAGE_SIZE: usize = 4096;
/// A tag byte and four hex digits.
pub const HEADER_LEN: usize = 5;
/// A record without eviction (`N`).
pub const SHORT_RECORD_LEN: usize = 2 * HEADER_LEN + PAGE_SIZE;
/// A record with an eviction (`W` or `R`).
pub const LONG_RECORD_LEN: usize = SHORT_RECORD_LEN + PAGE_SIZE;

/// A page evicted to make room for the fetched one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted<'a> {
    /// Its page number.
    pub page: u16,
    /// `W`: written while resident; `R`: only read.
    pub dirty: bool,
    /// Its image at eviction.
    pub image: &'a [u8; PAGE_SIZE],
}

/// One record, borrowing the reader's page buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// `C`: the first reference ever to the page (cold miss); `F`: a re-fault.
    pub compulsory: bool,
    /// The fetched page.
    pub page: u16,
    /// Its image at the reference.
    pub image: &'a [u8; PAGE_SIZE],
    /// The page LRU evicted, `None` (`N`) while memory was not yet full.
    pub evicted: Option<Evicted<'a>>,
}

/// Four lower-case hex digits.
pub fn hex4(v: u16) -> [u8; 4] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [12, 8, 4, 0].map(|s| DIGITS[usize::from(v >> s & 0xf)])
}

/// The value of four hex digits (either case), `None` if one is not a hex digit.
pub fn parse_hex4(b: &[u8]) -> Option<u16> {
    if b.len() != 4 {
        return None;
    }
    b.iter().try_fold(0u16, |acc, &c| {
        let d = (c as char).to_digit(16)?;
        Some(acc << 4 | d as u16)
    })
}

impl Record<'_> {
    /// The record's size on disk.
    pub fn len(&self) -> usize {
        if self.evicted.is_some() {
            LONG_RECORD_LEN
        } else {
            SHORT_RECORD_LEN
        }
    }

    /// Always false: a record is never empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the record's bytes (hex digits in lower case).
    pub fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&[if self.compulsory { b'C' } else { b'F' }])?;
        out.write_all(&hex4(self.page))?;
        out.write_all(self.image)?;
        match self.evicted {
            None => out.write_all(b"N0000"),
            Some(e) => {
                out.write_all(&[if e.dirty { b'W' } else { b'R' }])?;
                out.write_all(&hex4(e.page))?;
                out.write_all(e.image)
            }
        }
    }
}
