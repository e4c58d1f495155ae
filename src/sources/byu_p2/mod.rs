//! BYU `p2AddrTr` traces: 12-byte little-endian records of Pentium II/III bus requests with
//! time deltas (`byutr.h`). The mapping to events is the BYU one ([`super::byu`]) with 32-byte
//! fetch lines and time.

mod events;
mod gen;
mod read;
mod record;

pub use events::{bus_op, core_cycles, ByuP2Events, CORE_PER_BUS_CLOCK, LINE};
// The per-format generators are what `sources::generate` (`ptemu gen`) dispatches to, and what
// the tests call; `sources::generate` is the API.
#[doc(hidden)]
pub use gen::generate;
pub use read::{Reader, Writer};
pub use record::{Record, ReqType, RECORD_LEN, TIME_SENTINEL};
