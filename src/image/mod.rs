//! Code-image synthesis (`spec/image.md`): from the executed instructions of a trace that has
//! every PC, length, branch kind and direct target (Penn CIS 501), a flat image of real x86-64
//! instructions of exactly the traced lengths, so that an instruction-flow decoder (libipt,
//! `ptxed`) can follow ptemu's PT output and give back the traced PC sequence.
//!
//! - [`ImageBuilder`] collects executed instructions as [`Shape`]s at their PCs (a Penn trace's
//!   come from `sources::penn::MacroOp::shape`), checks that each PC keeps one [`Shape`] and that no
//!   two instructions overlap, then encodes them ([`encode`]) into a [`CodeImage`];
//! - [`CodeImage::ptxed_command`] gives the command line that replays a trace over the image.

pub mod encode;
mod error;
mod ptxed;

pub use encode::{Shape, ShapeError};
pub use error::{ImageError, ImageErrors};
pub use ptxed::{quote, PtxedConfig, PtxedTiming};

use rustc_hash::FxHashMap;

/// The byte between executed instructions: `INT3` (`CC`), so a decoder that strays off the
/// traced path stops at a trap instead of running through NOPs.
pub const GAP_BYTE: u8 = 0xCC;

/// The default largest image: 256 MiB.
pub const DEFAULT_LIMIT: u64 = 256 << 20;

/// A flat code image: `bytes` loaded at linear address `base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeImage {
    /// The address of `bytes[0]`.
    pub base: u64,
    /// The code, gaps filled with [`GAP_BYTE`].
    pub bytes: Vec<u8>,
}

impl CodeImage {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// The bytes of the instruction of `len` bytes at `pc`, if inside the image.
    pub fn at(&self, pc: u64, len: u8) -> Option<&[u8]> {
        let start = usize::try_from(pc.checked_sub(self.base)?).ok()?;
        self.bytes.get(start..start + usize::from(len))
    }
}

/// Where a PC's shape was first seen.
#[derive(Clone, Copy, Debug)]
struct Site {
    line: u64,
    shape: Shape,
}

/// Collects executed instructions and builds their [`CodeImage`]. The span and the number of
/// distinct instructions are checked as they grow: once either is past its bound the builder is
/// refused ([`ImageBuilder::is_refused`]), keeps nothing more, and a caller can stop at once.
#[derive(Debug)]
pub struct ImageBuilder {
    sites: FxHashMap<u64, Site>,
    errors: ImageErrors,
    limit: u64,
    /// The lowest PC and its line.
    low: (u64, u64),
    /// One past the highest instruction byte, and its line.
    high: (u64, u64),
    refused: bool,
}

/// Bytes of image span per distinct instruction the builder keeps at most: an image of `limit`
/// bytes is built from at most `limit / SPAN_PER_SITE` instructions (4 Mi for the default), which
/// bounds the builder's memory to about 1.5 times the image's own size (408 MB peak measured at the
/// default bound, hash-table growth included).
pub const SPAN_PER_SITE: u64 = 64;

impl Default for ImageBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// `a` and `b` at one PC as one shape: equal, or a NOP and a PTWRITE of the same length (a
/// PTWRITE, since the mapping traces only some executions of it as PTWRITE).
fn merge(a: Shape, b: Shape) -> Option<Shape> {
    match (a, b) {
        _ if a == b => Some(a),
        (Shape::Nop { len: x }, Shape::Ptwrite { len: y })
        | (Shape::Ptwrite { len: x }, Shape::Nop { len: y })
            if x == y =>
        {
            Some(Shape::Ptwrite { len: x })
        }
        _ => None,
    }
}

impl ImageBuilder {
    /// An empty builder with the [`DEFAULT_LIMIT`].
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_LIMIT)
    }

    /// An empty builder refusing images larger than `limit` bytes.
    pub fn with_limit(limit: u64) -> Self {
        ImageBuilder {
            sites: FxHashMap::default(),
            errors: ImageErrors {
                errors: Vec::new(),
                total: 0,
            },
            limit,
            low: (u64::MAX, 0),
            high: (0, 0),
            refused: false,
        }
    }

    /// Whether the image is already refused (too large, or too many instructions): nothing added
    /// from now on changes that, and [`ImageBuilder::build`] returns the error.
    pub fn is_refused(&self) -> bool {
        self.refused
    }

    /// Adds an instruction of `shape` at `pc`, seen at trace line `line`. A different shape at
    /// the same PC is recorded as a [`ImageError::Conflict`] (reported by [`ImageBuilder::build`]).
    pub fn add_shape(&mut self, line: u64, pc: u64, shape: Shape) {
        if self.refused {
            return;
        }
        match self.sites.get_mut(&pc) {
            None => {
                if !self.grow(line, pc, shape) {
                    return;
                }
                self.sites.insert(pc, Site { line, shape });
            }
            Some(site) => match merge(site.shape, shape) {
                Some(s) => site.shape = s,
                None => self.errors.push(ImageError::Conflict {
                    pc,
                    first_line: site.line,
                    first: site.shape,
                    line,
                    other: shape,
                }),
            },
        }
    }

    /// Takes a new PC into the span and the count; `false` (and refused) past either bound.
    fn grow(&mut self, line: u64, pc: u64, shape: Shape) -> bool {
        if pc < self.low.0 {
            self.low = (pc, line);
        }
        let end = pc.saturating_add(u64::from(shape.size()));
        if end > self.high.0 {
            self.high = (end, line);
        }
        let error = if self.high.0.saturating_sub(self.low.0) > self.limit {
            ImageError::TooLarge {
                low: self.low.0,
                high: self.high.0,
                limit: self.limit,
                lines: (self.low.1, self.high.1),
            }
        } else if self.sites.len() as u64 >= (self.limit / SPAN_PER_SITE).max(1) {
            ImageError::TooMany {
                limit: (self.limit / SPAN_PER_SITE).max(1),
                line,
            }
        } else {
            return true;
        };
        self.errors.push(error);
        self.refused = true;
        self.sites = FxHashMap::default();
        false
    }

    /// Distinct PCs so far.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The image, or every problem found: conflicts, overlaps, instructions that cannot be
    /// encoded in their length, a span over the limit.
    pub fn build(self) -> Result<CodeImage, ImageErrors> {
        let ImageBuilder {
            sites,
            mut errors,
            limit,
            refused,
            ..
        } = self;
        if refused {
            return Err(errors);
        }
        let mut sites: Vec<(u64, Site)> = sites.into_iter().collect();
        sites.sort_unstable_by_key(|(pc, _)| *pc);
        let (Some(&(low, first)), Some(&(last_pc, last))) = (sites.first(), sites.last()) else {
            errors.push(ImageError::Empty);
            return Err(errors);
        };
        for w in sites.windows(2) {
            let ((pc, a), (other_pc, b)) = (w[0], w[1]);
            if pc + u64::from(a.shape.size()) > other_pc {
                errors.push(ImageError::Overlap {
                    pc,
                    line: a.line,
                    len: a.shape.size(),
                    other_pc,
                    other_line: b.line,
                });
            }
        }
        if errors.total > 0 {
            return Err(errors);
        }
        // Sorted and without overlaps: the last instruction ends the image.
        let high = last_pc.saturating_add(u64::from(last.shape.size()));
        if high - low > limit {
            errors.push(ImageError::TooLarge {
                low,
                high,
                limit,
                lines: (first.line, last.line),
            });
            return Err(errors);
        }
        let mut bytes = vec![GAP_BYTE; (high - low) as usize];
        for (pc, s) in &sites {
            match encode::encode(s.shape, *pc) {
                Ok(b) => {
                    let at = (pc - low) as usize;
                    bytes[at..at + b.len()].copy_from_slice(&b);
                }
                Err(error) => errors.push(ImageError::Encode {
                    pc: *pc,
                    line: s.line,
                    error,
                }),
            }
        }
        if errors.total > 0 {
            return Err(errors);
        }
        Ok(CodeImage { base: low, bytes })
    }
}
