//! BYU address traces, spec V1.0: 6-byte records of Pentium bus cycles (big-endian physical
//! address, byte enables, control byte), no header. The bus model and the mapping of bus cycles
//! to events are shared with [`super::byu_p2`].

mod block;
mod bus;
mod events;
mod flow;
mod gen;
mod read;
mod record;

pub use bus::{BusOp, DataKind, Machine};
pub use events::{bus_op, ByuEvents, APPROXIMATIONS, QUANTUM};
pub(crate) use events::{flow_counts, START};
pub(crate) use flow::Flow;
pub use flow::{ptw_payload, HLT_STATE, INTA_VECTOR};
// The per-format generators are what `sources::generate` (`ptemu gen`) dispatches to, and what
// the tests call; `sources::generate` is the API.
#[doc(hidden)]
pub use gen::{byte_enables, generate, record_of};
pub use read::{Reader, Writer};
pub use record::{CycleType, Record, SpecialCycle, RECORD_LEN};
