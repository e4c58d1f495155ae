//! # ptemu-core — the model of Intel Processor Trace output
//!
//! The part of ptemu an emulator embeds: no files, formats or command line, only the model.
//!
//! ```text
//! Event --> tracer --> packet (encode) --> packing (PADs) --> output (ToPA / single range) --> memory
//!             ^                                                  ^
//!             |                                                  |
//!       TracerConfig                                   regs: the RTIT MSRs, CpuProfile
//! ```
//!
//! - [`output::OutputUnit`] is the trace-output unit alone: program it through
//!   [`OutputUnit::wrmsr`](output::OutputUnit::wrmsr) as an emulator's MSR hook would, give it
//!   packet bytes with [`OutputUnit::write`](output::OutputUnit::write), and it stores them
//!   through ToPA tables or a single range into any [`memory::PhysMemory`] (yours: the library
//!   never owns guest memory), with STOP, INT (PMI), END, wrap and operational errors as the SDM
//!   says. Start here to test a driver's or a hypervisor's ToPA handling.
//! - [`tracer::Tracer`] goes one step earlier: give it retired-instruction and branch
//!   [`tracer::Event`]s and it makes the packets real hardware would (TNT, TIP, FUP, PSB+, MODE,
//!   timing, PTWRITE, overflow), lays them out as the CPU profile does, and feeds its own output
//!   unit. Start here to produce a trace from an emulator's execution.
//! - [`packet`] encodes and decodes every packet byte-exactly; [`regs`] holds the MSR layouts,
//!   their #GP checks and the CPU profiles ([`regs::CpuProfile`]); [`rules::Rule`] names the rule
//!   of `spec/output.md` behind every behaviour.
//!
//! Features: `mmap` ([`memory::MmapMemory`], default), `tracing` (debug logs, default), `serde`
//! (Serialize/Deserialize on packets, events and settings).
//!
//! ```
//! use ptemu_core::memory::{PhysMemory, SparseMemory};
//! use ptemu_core::output::OutputUnit;
//! use ptemu_core::regs::{msr, CpuProfile, RtitCtl};
//!
//! let mut mem = SparseMemory::new();
//! // A single-range buffer of 4 KiB at 0x10_0000.
//! let mut unit = OutputUnit::new(CpuProfile::named("skylake").unwrap());
//! unit.wrmsr(&mut mem, msr::IA32_RTIT_OUTPUT_BASE, 0x10_0000).unwrap();
//! unit.wrmsr(&mut mem, msr::IA32_RTIT_OUTPUT_MASK_PTRS, 0xfff).unwrap();
//! let ctl = RtitCtl::new().with_trace_en(true).with_branch_en(true).with_user(true);
//! unit.wrmsr(&mut mem, msr::IA32_RTIT_CTL, u64::from(ctl)).unwrap();
//! unit.write(&mut mem, &[0x02, 0x82, 0x02, 0x82]).unwrap();
//! let mut buf = [0u8; 4];
//! mem.read(0x10_0000, &mut buf).unwrap();
//! assert_eq!(buf, [0x02, 0x82, 0x02, 0x82]);
//! ```

pub mod memory;
pub mod output;
pub mod packet;
pub mod packing;
pub mod regs;
pub mod rules;
#[cfg(feature = "serde")]
pub mod serde_hex;
mod setters;
pub mod tracer;

#[cfg(feature = "mmap")]
pub use memory::MmapMemory;
pub use memory::{MemError, PhysMemory, SparseMemory};
pub use output::{EventKind, MsrError, OutputEvent, OutputUnit};
pub use regs::{CpuProfile, RtitCtl};
pub use rules::Rule;
pub use tracer::{Block, BlockEnd, BlockError, BlockExec, Event, Tracer, TracerConfig};
