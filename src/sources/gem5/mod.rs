//! gem5 elastic traces (`--elastic-trace-en`): the data-dependency trace (InstDepRecord) and the
//! instruction-fetch trace (Packet), protobuf messages behind the magic `gem5`, usually gzip'd.
//! `spec/mapping.md` (section gem5) documents the format and the mapping to tracer events.

mod ahead;
mod events;
mod fast;
mod gen;
mod messages;
mod read;
mod write;

pub use ahead::BLOCK as DECODE_BLOCK;
pub use events::Gem5Events;
// The per-format generators are what `sources::generate` (`ptemu gen`) dispatches to, and what
// the tests call; `sources::generate` is the API.
#[doc(hidden)]
pub use gen::generate;
pub use messages::{IdStringEntry, InstDepRecord, InstDepRecordHeader, Packet, PacketHeader, RecordType};
pub use read::{Header, Reader, Record, TraceKind, MAGIC, MAX_MESSAGE};
pub use write::Writer;
