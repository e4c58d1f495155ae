//! The truth classified as the run goes (spec/truth.md TR16): where no consumer-side damage can
//! come (no `wrap`, `gap`, `corrupt` or `corrupt-silent` fault), what decides an instruction's
//! class is only whether its carrier was stored, so `simulate` classifies the tracer's facts as
//! it drains them and writes `truth.bin`'s records straight away, with no spool and no second
//! pass over it. The header, which names the stored bytes, is known only at the end: the
//! records go to a body file, and [`assemble`] puts the header before them.
//!
//! A fact is classified once every byte it points into is known stored (its carrier's end, its
//! packet's) or output has stopped for good (then the stored count is final); the few facts
//! whose packets are still in the tracer's buffer when a batch ends wait in the probe for the
//! next one ([`Stream::takes`]).

use super::compact::{self, Encoder};
use super::record::Sink;
use super::{Classifier, Context, Counts, Delivery};
use crate::tracer::{Block, Carrier, Fact};
use std::io::{self, Read, Write};
use std::path::Path;

/// The byte of the stream that must be stored (or known lost) before `f` can be classified.
#[inline]
fn needs(f: &Fact) -> u64 {
    match *f {
        Fact::Insn {
            carrier: Carrier::Packet { end, .. },
            ..
        }
        | Fact::Exec {
            carrier: Carrier::Packet { end, .. },
            ..
        }
        | Fact::Enable { end, .. }
        | Fact::Disable { end, .. }
        | Fact::Async { end, .. }
        | Fact::Overflow { end, .. }
        | Fact::Mark { end, .. } => end,
        Fact::Time { start, .. } => start + 1,
        Fact::Insn { .. } | Fact::Exec { .. } | Fact::Psb { .. } => 0,
    }
}

/// Classifies facts as they come and writes `truth.bin`'s records (TR16).
#[derive(Debug)]
pub struct Stream<W: Write> {
    classifier: Classifier,
    out: Encoder<W>,
    /// Output has stopped for good: the stored count is final.
    done: bool,
    /// The facts whose bytes reach no further than this can be classified.
    horizon: u64,
}

impl<W: Write> Stream<W> {
    /// A stream of a run's records to `out` (buffer it), without the header.
    pub fn new(out: W) -> Self {
        let ctx = Context {
            stored: u64::MAX,
            damage: Vec::new(),
            delivery: Delivery::whole(u64::MAX),
            psbs: Vec::new(),
            truncated: false,
            run: serde_json::Value::Null,
        };
        Stream {
            classifier: Classifier::new(&ctx),
            out: Encoder::new(out),
            done: false,
            horizon: 0,
        }
    }

    /// `stored` bytes of the stream are stored so far; `done`: output has stopped, no byte
    /// more will be stored (a STOP, an operational error, the end of the run). The caller then
    /// takes the facts from the probe while [`Stream::takes`] holds (the others wait there, in
    /// order, for a later call).
    pub fn stored(&mut self, stored: u64, done: bool) {
        if done && !self.done {
            self.done = true;
            self.classifier.set_stored(stored);
        }
        self.horizon = if self.done { u64::MAX } else { stored };
    }

    /// Whether `f` can be classified now ([`Stream::stored`]).
    #[inline]
    pub fn takes(&self, f: &Fact) -> bool {
        needs(f) <= self.horizon
    }

    /// Classifies `facts`, which it takes ([`Stream::takes`]), in order (drained from the
    /// tracer's probe; `blocks` the table their executions name).
    pub fn facts(&mut self, facts: impl Iterator<Item = Fact>, blocks: &[Block]) -> io::Result<()> {
        for f in facts {
            debug_assert!(self.takes(&f));
            self.classifier.fact(f, blocks, &mut self.out)?;
        }
        Ok(())
    }

    /// The end of the run: every fact was given, the last ones after output stopped for good
    /// ([`Stream::stored`] with `done`); `truncated`: the stream was cut short (TR3). Writes
    /// the end record and the block table; the counts and the writer.
    pub fn finish(mut self, truncated: bool) -> io::Result<(Counts, W)> {
        if !self.done {
            return Err(io::Error::other("the truth stream ended before output did"));
        }
        let counts = self.classifier.finish(truncated, &mut self.out)?;
        self.out.finish()?;
        Ok((counts, self.out.into_inner()))
    }
}

/// Writes `truth.bin` to `out`: the header of the run `ctx` describes, then the records of
/// `body` (what a [`Stream`] wrote), whose last 8 bytes (the block table's offset, counted from
/// the body's start) move by the header's length.
pub fn assemble(body: &Path, ctx: &Context, out: &Path) -> io::Result<()> {
    let header = compact::header_bytes(&super::header(ctx))?;
    let mut input = std::fs::File::open(body)?;
    let len = input.metadata()?.len();
    let records = len.checked_sub(8).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: a truth body of {len} bytes", body.display()),
        )
    })?;
    let mut file = std::fs::File::create(out)?;
    file.write_all(&header)?;
    let copied = io::copy(&mut (&mut input).take(records), &mut file)?;
    let mut at = [0u8; 8];
    input.read_exact(&mut at)?;
    if copied != records {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{}: cut short at byte {copied}", body.display()),
        ));
    }
    let at = u64::from_le_bytes(at) + header.len() as u64;
    file.write_all(&at.to_le_bytes())?;
    file.flush()
}
