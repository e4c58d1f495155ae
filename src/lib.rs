//! # ptemu — a hardware-accurate Intel Processor Trace output emulator
//!
//! The crate models the trace-output unit of an Intel processor as the SDM describes it:
//! the RTIT MSRs with their #GP rules ([`regs`]), ToPA tables and single-range output with STOP,
//! INT, END, wrap and operational errors ([`output`]), writing into simulated physical memory the
//! caller owns ([`memory`]). Every behaviour cites a rule ID ([`rules::Rule`]) documented in
//! `spec/output.md`. The [`tracer`] generates the packets ([`packet`]) from retired-instruction
//! and branch events, chosen and laid out with PADs as the CPU profile's hardware does
//! ([`packing`], `spec/hardware.md`). [`simulate`] runs the whole job on a trace file; [`truth`]
//! says what a correct decoder must recover from the result, faults included, and checks a
//! decoder's output against it (`spec/truth.md`).
pub mod config_file;
pub mod event_log;
pub mod image;
pub mod layout;
pub mod perf_data;
pub mod report;
pub mod simulate;
pub mod sources;
pub mod truth;

pub use ptemu_core::{memory, output, packet, packing, regs, rules, tracer};

pub use memory::{MemError, MmapMemory, PhysMemory, SparseMemory};
pub use output::{EventKind, MsrError, OutputEvent, OutputUnit};
pub use regs::{CpuProfile, RtitCtl};
pub use rules::Rule;
pub use tracer::{Event, Tracer, TracerConfig};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
