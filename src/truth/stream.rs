//! The truth classified as the run goes (spec/truth.md TR16): where no consumer-side damage can
//! come (no `wrap`, `gap`, `corrupt` or `corrupt-silent` fault), what decides an instruction's
//! class is only whether its carrier was stored, so `simulate` classifies the tracer's facts as
//! it drains them and writes `truth.bin`'s records straight away, with no spool and no second
//! pass over it. The header, which names the stored bytes, is known only at the end: the
//! records go to a body file, and [`assemble`] puts the header before them.
//!
//! A fact is classified once every byte it points into is known stored (its carrier's end, its
//! packet's) or output has stopped for good (then the stored count is final); the few facts
//! whose packets are still in the tracer's buffer when a batch ends wait for the next one.

use super::compact::{self, Encoder};
use super::record::Sink;
use super::{Classifier, Context, Counts, Delivery};
use crate::tracer::{Block, Carrier, Fact};
use std::io::{self, Read, Write};
use std::path::Path;

/// The byte of the stream that must be stored (or known lost) before `f` can be classified.
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
    /// Facts that wait until their bytes are stored, in order.
    deferred: Vec<Fact>,
    /// Output has stopped for good: the stored count is final.
    done: bool,
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
            deferred: Vec::new(),
            done: false,
        }
    }

    /// Classifies `facts` (drained from the tracer's probe, in order; `blocks` the table their
    /// executions name) with `stored` bytes of the stream stored so far; `done`: output has
    /// stopped, no byte more will be stored (a STOP, an operational error, the end of the run).
    pub fn facts(
        &mut self,
        facts: impl Iterator<Item = Fact>,
        blocks: &[Block],
        stored: u64,
        done: bool,
    ) -> io::Result<()> {
        if done && !self.done {
            self.done = true;
            self.classifier.set_stored(stored);
        }
        let horizon = if self.done { u64::MAX } else { stored };
        let mut k = 0;
        while let Some(f) = self.deferred.get(k) {
            if needs(f) > horizon {
                break;
            }
            self.classifier.fact(*f, blocks, &mut self.out)?;
            k += 1;
        }
        self.deferred.drain(..k);
        let mut facts = facts;
        if self.deferred.is_empty() {
            for f in facts.by_ref() {
                if needs(&f) > horizon {
                    self.deferred.push(f);
                    break;
                }
                self.classifier.fact(f, blocks, &mut self.out)?;
            }
        }
        self.deferred.extend(facts);
        Ok(())
    }

    /// The end of the run: every fact was given ([`Stream::facts`] with `done`); `truncated`:
    /// the stream was cut short (TR3). Writes the end record and the block table; the counts
    /// and the writer.
    pub fn finish(mut self, truncated: bool) -> io::Result<(Counts, W)> {
        if !self.done || !self.deferred.is_empty() {
            return Err(io::Error::other("the truth stream ended before its facts were classified"));
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
