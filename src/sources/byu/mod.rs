//! BYU address traces, spec V1.0: 6-byte records of Pentium bus cycles (big-endian physical
//! address, byte enables, control byte), no header. The bus model and the mapping of bus cycles
//! to events are shared with [`super::byu_p2`].

mod block;
pub mod bus;
pub mod events;
pub(crate) mod flow;
pub mod gen;
pub mod read;
pub mod record;

pub use bus::{BusOp, DataKind, Machine};
pub use events::ByuEvents;
pub use flow::{ptw_payload, HLT_STATE, INTA_VECTOR};
pub use gen::generate;
pub use read::{Reader, Writer};
pub use record::{CycleType, Record, SpecialCycle, RECORD_LEN};
