//! Trace readers and writers for the seed formats, and their mapping to tracer events.
//!
//! One folder per format, read and write side by side: the record type, a streaming reader
//! (bounded memory, no allocation per record), a writer, a generator of synthetic files, and the
//! mapping of records to [`crate::tracer::Event`]s documented in `spec/mapping.md`.
//! Every reader takes an [`Input`]: a file or stdin, gzip detected by magic.

pub mod byu;
pub mod byu_p2;
pub mod error;
pub mod fixed;
pub mod gem5;
pub mod input;
pub mod kaplan;
mod map_guard;
pub mod penn;
pub mod qemu;
mod ring;
pub mod rng;
pub mod steps;
pub(crate) mod varint;

pub use error::{ErrorKind, Position, SourceError};
pub use input::{Input, InputProgress};

use crate::tracer::Event;
use std::fmt;
use std::str::FromStr;

/// The input format names: a contract used by `ptemu simulate --format` and `ptemu gen --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum Format {
    /// BYU address trace, spec V1.0: 6-byte records, big-endian physical address.
    #[cfg_attr(feature = "cli", value(name = "byu"))]
    #[serde(rename = "byu")]
    Byu,
    /// BYU `p2AddrTr`: 12-byte records, little-endian.
    #[cfg_attr(feature = "cli", value(name = "byu-p2"))]
    #[serde(rename = "byu-p2")]
    ByuP2,
    /// Penn CIS 501 x86 micro-op text trace.
    #[cfg_attr(feature = "cli", value(name = "penn"))]
    #[serde(rename = "penn")]
    Penn,
    /// Kaplan LRU page-image trace.
    #[cfg_attr(feature = "cli", value(name = "kaplan"))]
    #[serde(rename = "kaplan")]
    Kaplan,
    /// gem5 elastic data trace or instruction-fetch trace (told apart by the header).
    #[cfg_attr(feature = "cli", value(name = "gem5"))]
    #[serde(rename = "gem5")]
    Gem5,
    /// A real program run under QEMU with ptemu's plugin (`ptemu run`, spec/qemu.md): events
    /// from an emulator, not a file, so no `--format` takes it.
    #[cfg_attr(feature = "cli", value(skip))]
    #[serde(rename = "qemu")]
    Qemu,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 5] = [
        Format::Byu,
        Format::ByuP2,
        Format::Penn,
        Format::Kaplan,
        Format::Gem5,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Byu => "byu",
            Format::ByuP2 => "byu-p2",
            Format::Penn => "penn",
            Format::Kaplan => "kaplan",
            Format::Gem5 => "gem5",
            Format::Qemu => "qemu",
        }
    }

    /// The CPL the format's traced code runs at ([`EventSource::start_state`]): 0 for the BYU
    /// whole-system bus traces, 3 for the others.
    pub fn start_cpl(self) -> u8 {
        match self {
            Format::Byu | Format::ByuP2 => 0,
            Format::Penn | Format::Kaplan | Format::Gem5 | Format::Qemu => 3,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is not one of [`Format::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {name:?} (expected one of {})", Format::ALL.map(|f| f.name()).join(", "))]
#[non_exhaustive]
pub struct UnknownFormat {
    /// The name given.
    pub name: String,
}

impl FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> std::result::Result<Self, UnknownFormat> {
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownFormat { name: s.into() })
    }
}

/// Options every reader takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip bad records (those whose error [`SourceError::is_skippable`]) and count them, instead
    /// of stopping at the first.
    pub lenient: bool,
}

impl ReadOptions {
    /// The one `--lenient` rule every reader follows: a skippable error
    /// ([`SourceError::is_skippable`]) is counted in `skipped` and reading goes on (`Ok`) when
    /// lenient; any other error, or any error when strict, is returned.
    pub fn skip(&self, err: SourceError, skipped: &mut u64) -> error::Result<()> {
        if self.lenient && err.is_skippable() {
            *skipped += 1;
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// What a reader counted, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SourceStats {
    /// The format.
    pub format: &'static str,
    /// Records read (lines for text formats, messages for gem5), bad ones included.
    pub records: u64,
    /// Bad records skipped under `--lenient`.
    pub skipped: u64,
    /// Format-specific counts (branches by kind, loads, stores, faults, ...), in a fixed order.
    pub counts: Vec<(&'static str, u64)>,
    /// Where the mapping to PT is approximate, one sentence each (also in `spec/mapping.md`).
    pub approximations: Vec<&'static str>,
}

impl SourceStats {
    /// The count named `name`, or 0.
    pub fn count(&self, name: &str) -> u64 {
        self.counts
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |&(_, v)| v)
    }
}

pub use crate::tracer::StartState;

/// A trace mapped to tracer events: the reader's side of `ptemu simulate`.
pub trait EventSource {
    /// Appends the events of the next record or records to `out` and returns `Ok(true)`, or
    /// returns `Ok(false)` at the end of the input. May append nothing for a record that maps
    /// to no event. Never allocates per record once `out` has grown.
    fn next_events(&mut self, out: &mut Vec<Event>) -> error::Result<bool>;

    /// As [`EventSource::next_events`], into a batch that may also hold executions of blocks
    /// (spec/generation.md BLK1): a source that thinks in blocks gives them, described in the
    /// batch before their first execution; the default gives events only.
    fn next_steps(&mut self, out: &mut steps::Steps) -> error::Result<bool> {
        self.next_events(out.events_mut())
    }

    /// The state the traced code runs in.
    fn start_state(&self) -> StartState;

    /// Counts so far.
    fn stats(&self) -> SourceStats;

    /// Runs `f` on every remaining event, through one reused buffer (bounded memory), to the end
    /// of the input or the first error; returns how many events there were.
    fn for_each_event(&mut self, f: &mut dyn FnMut(&Event)) -> error::Result<u64> {
        let mut events = Vec::with_capacity(64);
        let mut n = 0;
        while self.next_events(&mut events)? {
            n += events.len() as u64;
            events.iter().for_each(&mut *f);
            events.clear();
        }
        Ok(n)
    }
}

/// Opens `input` as `format` and maps it to events. `fetch` is the other file of a gem5 pair
/// (an instruction-fetch trace next to an elastic data trace); other formats refuse it.
pub fn open_events(
    format: Format,
    input: Input,
    fetch: Option<Input>,
    options: ReadOptions,
) -> error::Result<Box<dyn EventSource + Send>> {
    if let (Some(f), false) = (&fetch, format == Format::Gem5) {
        return Err(SourceError {
            file: f.name().to_owned(),
            position: None,
            kind: ErrorKind::BadField,
            message: format!("a fetch trace goes with --format gem5 only, not {format}"),
        });
    }
    Ok(match format {
        Format::Byu => Box::new(byu::ByuEvents::new(input, options)?),
        Format::ByuP2 => Box::new(byu_p2::ByuP2Events::new(input, options)?),
        Format::Penn => Box::new(penn::PennEvents::new(input, options)),
        Format::Kaplan => Box::new(kaplan::KaplanEvents::new(input, options)?),
        Format::Gem5 => Box::new(gem5::Gem5Events::new(input, fetch, options)?),
        Format::Qemu => {
            return Err(SourceError {
                file: input.name().to_owned(),
                position: None,
                kind: ErrorKind::BadField,
                message: "QEMU events come from a running program: `ptemu run -- PROGRAM`".into(),
            })
        }
    })
}

/// Writes a synthetic `format` trace of `records` records (micro-op lines for Penn, messages for
/// gem5) for `seed`; for gem5, `fetch_out` receives the matching instruction-fetch trace. The
/// same arguments give the same bytes.
pub fn generate(
    format: Format,
    records: u64,
    seed: u64,
    out: &mut dyn std::io::Write,
    fetch_out: Option<&mut dyn std::io::Write>,
) -> std::io::Result<()> {
    if fetch_out.is_some() && format != Format::Gem5 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a fetch trace is generated with --format gem5 only, not {format}"),
        ));
    }
    match format {
        Format::Byu => byu::generate(records, seed, out),
        Format::ByuP2 => byu_p2::generate(records, seed, out),
        Format::Penn => penn::generate(records, seed, out),
        Format::Kaplan => kaplan::generate(records, seed, out),
        Format::Gem5 => gem5::generate(records, seed, out, fetch_out),
        Format::Qemu => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "QEMU events come from a running program (`ptemu run`), not from `ptemu gen`",
        )),
    }
}

/// Reads arbitrary bytes as `format` through its mapping to the end or the first error; the
/// first byte picks strict (even) or lenient (odd) reading, and for Penn and gem5 (bits 1-2) how
/// many workers, 1 to 3, parse the same bytes ahead (SIM19, SIM20; 0: none). The body of every
/// fuzz target (`fuzz/`, `cargo xtask fuzz`): whatever the bytes, this must return, never panic
/// or hang, and the workers must give what one thread gives (events, error text and stats).
#[doc(hidden)]
pub fn read_arbitrary(format: Format, data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let options = ReadOptions {
        lenient: mode & 1 == 1,
    };
    let input = || Input::from_bytes("fuzz", body.to_vec());
    let here = input().and_then(|i| open_events(format, i, None, options));
    let here = here.map(drained).map_err(|e| e.to_string());
    let workers = usize::from(mode >> 1 & 3);
    if workers == 0 {
        return;
    }
    let ahead: Box<dyn EventSource + Send> = match (format, input()) {
        (Format::Penn, Ok(i)) => Box::new(penn::PennEvents::parsed_ahead(i, options, workers)),
        (Format::Gem5, Ok(i)) => match gem5::Gem5Events::decoded_ahead(i, None, options, workers) {
            Ok(source) => Box::new(source),
            Err(e) => {
                assert_eq!(
                    here.err(),
                    Some(e.to_string()),
                    "gem5 opened by {workers} workers"
                );
                return;
            }
        },
        _ => return,
    };
    assert_eq!(here, Ok(drained(ahead)), "{workers} workers");
}

/// A digest of everything `source` maps to the end or its first error (memory stays flat, as
/// fuzz input may inflate a thousandfold), the error's text and its stats.
fn drained(mut source: Box<dyn EventSource + Send>) -> (u64, Option<String>, SourceStats) {
    use std::hash::{Hash, Hasher};
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    let error = source.for_each_event(&mut |e| e.hash(&mut digest)).err();
    (digest.finish(), error.map(|e| e.to_string()), source.stats())
}
