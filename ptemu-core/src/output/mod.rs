//! The trace-output unit: ToPA and single-range output into physical memory.
//!
//! [`OutputUnit`] is driven through `wrmsr`/`rdmsr` (as an emulator's MSR hooks would) and fed the
//! packet byte stream with [`OutputUnit::write`]. It writes through any [`crate::memory::PhysMemory`].

mod core;
mod cursor;
mod event;
mod footprint;
mod range;
pub mod topa;
mod unit;
mod violation;

pub use event::{EventCounts, EventKind, OutputEvent};
pub use range::{check_range, RangeConfig};
pub use topa::{check_entry, current_entry, CurrentEntry, EntryError, TopaEntry, MAX_INDEX};
pub use unit::{MsrError, OutputStats, OutputUnit, ResetKind};
pub use violation::Violation;
