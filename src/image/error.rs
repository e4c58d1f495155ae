//! Why a code image cannot be made: each problem names the trace lines involved.

use super::encode::{Shape, ShapeError};

/// One problem found while building a code image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// One PC executed as two different instructions.
    #[error("line {line}: PC {pc:x} is a {other}, but line {first_line} made it a {first}")]
    Conflict {
        /// The PC.
        pc: u64,
        /// The line that first showed it, and its shape there.
        first_line: u64,
        /// The shape at `first_line`.
        first: Shape,
        /// The line with the other shape.
        line: u64,
        /// The other shape.
        other: Shape,
    },
    /// Two executed instructions share bytes.
    #[error(
        "line {other_line}: PC {other_pc:x} is inside the {len}-byte instruction at {pc:x} (line {line})"
    )]
    Overlap {
        /// The lower instruction's PC and its line.
        pc: u64,
        /// Its line.
        line: u64,
        /// Its length.
        len: u8,
        /// The instruction starting inside it.
        other_pc: u64,
        /// Its line.
        other_line: u64,
    },
    /// The instruction cannot be encoded in its traced length.
    #[error("line {line}: PC {pc:x}: {error}")]
    Encode {
        /// Its PC.
        pc: u64,
        /// The line that first showed it.
        line: u64,
        /// Why.
        error: ShapeError,
    },
    /// The executed code spans more bytes than the limit.
    #[error(
        "the code spans {:#x} bytes ({low:x}, line {}, to {high:x}, line {}), over the limit of {limit:#x}",
        .high - .low,
        .lines.0,
        .lines.1
    )]
    TooLarge {
        /// The lowest PC.
        low: u64,
        /// One past the last instruction byte.
        high: u64,
        /// The limit in bytes.
        limit: u64,
        /// The lines of the lowest and of the highest instruction.
        lines: (u64, u64),
    },
    /// More distinct instructions than the builder keeps (its memory bound).
    #[error("line {line}: more than {limit} distinct instructions, the most an image is built from")]
    TooMany {
        /// The bound.
        limit: u64,
        /// The line of the first instruction past it.
        line: u64,
    },
    /// No instruction at all.
    #[error("no instruction to put in the image")]
    Empty,
}

/// Every problem found (the first [`ImageErrors::KEPT`] of them), and how many there were. Its
/// message lists the first ten.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", summary(*.total, .errors))]
#[non_exhaustive]
pub struct ImageErrors {
    /// The problems kept, in the order found.
    pub errors: Vec<ImageError>,
    /// How many were found in all.
    pub total: u64,
}

impl ImageErrors {
    /// How many problems are kept.
    pub const KEPT: usize = 100;

    pub(crate) fn push(&mut self, e: ImageError) {
        self.total += 1;
        if self.errors.len() < Self::KEPT {
            self.errors.push(e);
        }
    }
}

/// The count of problems and the first ten of `errors`.
fn summary(total: u64, errors: &[ImageError]) -> String {
    let mut s = format!("{total} problem(s) making the code image");
    for e in errors.iter().take(10) {
        s.push_str(&format!("\n  {e}"));
    }
    if total > 10 {
        s.push_str(&format!("\n  ... and {} more", total - 10));
    }
    s
}
