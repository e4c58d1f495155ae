//! # ptemu — a hardware-accurate Intel Processor Trace output emulator
//!
//! ptemu models the trace-output unit of an Intel processor as the SDM describes it, and drives
//! it with the packets real hardware would write for existing execution traces. Two crates:
//!
//! - **`ptemu-core`** (re-exported here as [`regs`], [`output`], [`memory`], [`packet`],
//!   [`packing`], [`tracer`], [`rules`]): the model alone, for an emulator to embed. No files,
//!   formats or command line; its dependencies are modular-bitfield, bitflags and thiserror (and,
//!   as default features, memmap2 and tracing).
//! - **`ptemu`** (this crate): the trace readers and the jobs on top of the model.
//!
//! ```text
//! sources (BYU, BYU-p2, Penn, Kaplan, gem5 readers; a program under QEMU -> tracer::Event)
//!   -> tracer (events -> packets, the hardware's rules)  -> packet (encode / decode)
//!   -> packing (PADs as the CPU lays them out)          -> output (ToPA / single range, regs: MSRs)
//!   -> memory (the caller's physical memory)
//! results read by: simulate (the whole job), truth (what a decoder must recover), perf_data,
//! image (a code image for Penn traces), report, event_log
//! ```
//!
//! ## Where to start
//!
//! - Output only (a driver's or hypervisor's ToPA handling): [`OutputUnit`]: `wrmsr` the RTIT
//!   MSRs, `write` packet bytes, read what landed in your [`PhysMemory`].
//! - Events to packets to memory (an emulator's retired instructions): [`Tracer`], as below and
//!   in `examples/embed.rs` (a guest driver with PMIs handled by the SDM's algorithm).
//! - A trace file to a PT buffer, with the truth a decoder must give: [`simulate::run`] (what
//!   `ptemu simulate` does), [`truth`] and [`perf_data`].
//! - A real program under QEMU to its trace, a case per thread and forked child:
//!   [`program::record`] (what `ptemu run` does).
//! - Layout files ([`layout`]): ToPA tables and single ranges as TOML, checked against the
//!   rules ([`layout::check`]).
//!
//! Every behaviour of the output unit cites a rule ([`Rule`]) of `spec/output.md`; packet
//! generation follows `spec/generation.md`; DESIGN.md says what lives where.
//!
//! ```
//! use ptemu::output::TopaEntry;
//! use ptemu::packet::{Packet, PacketDecoder};
//! use ptemu::regs::msr::{IA32_RTIT_CTL, IA32_RTIT_OUTPUT_BASE, IA32_RTIT_OUTPUT_MASK_PTRS};
//! use ptemu::{CpuProfile, Event, OutputUnit, PhysMemory, RtitCtl, SparseMemory, Tracer, TracerConfig};
//!
//! let mut mem = SparseMemory::new();
//! // A ToPA table at 0x1000: one 4 KiB region at 0x10_0000, then END back to the table.
//! mem.write_u64(0x1000, TopaEntry::region(0x10_0000, 0).bits()).unwrap();
//! mem.write_u64(0x1008, TopaEntry::end_to(0x1000).bits()).unwrap();
//!
//! let cpu = CpuProfile::named("skylake").unwrap();
//! let mut t = Tracer::new(OutputUnit::new(cpu), TracerConfig::default());
//! let ip = 0x40_1000;
//! t.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, 0x1000, ip, 2).unwrap();
//! t.wrmsr(&mut mem, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f, ip, 2).unwrap(); // entry 0, offset 0
//! let ctl = RtitCtl::new().with_trace_en(true).with_topa(true).with_branch_en(true).with_user(true);
//! t.wrmsr(&mut mem, IA32_RTIT_CTL, u64::from(ctl), ip, 2).unwrap();
//!
//! // A user-mode loop: a taken conditional branch, then a return.
//! t.event(&mut mem, &Event::CondBranch { ip: 0x40_1002, len: 2, target: 0x40_1000, taken: true }).unwrap();
//! t.event(&mut mem, &Event::Return { ip: 0x40_1004, target: 0x40_2000 }).unwrap();
//! t.wrmsr(&mut mem, IA32_RTIT_CTL, 0, 0x40_2000, 2).unwrap(); // TraceEn = 0 flushes
//!
//! let written = t.unit().stats().bytes_written as usize;
//! let mut trace = vec![0u8; written];
//! mem.read(0x10_0000, &mut trace).unwrap();
//! let mut dec = PacketDecoder::new(&trace, 0);
//! let mut packets = Vec::new();
//! while let Some(p) = dec.next_packet() {
//!     packets.push(p.unwrap().1);
//! }
//! assert_eq!(packets[0], Packet::Psb);
//! assert!(packets.iter().any(|p| matches!(p, Packet::Tnt8(_))));
//! assert!(packets.iter().any(|p| matches!(p, Packet::Tip(_))));
//! ```
#![warn(missing_docs)]

pub mod case;
pub mod config_file;
pub mod event_log;
pub mod image;
pub mod layout;
pub mod machine;
pub mod perf_data;
pub mod picture;
pub mod program;
pub mod ptdump;
pub mod pttc;
pub mod report;
pub mod simulate;
pub mod sources;
pub mod truth;

pub use ptemu_core::{memory, output, packet, packing, regs, rules, serde_hex, tracer};

pub use memory::{MemError, MmapMemory, PhysMemory, SparseMemory};
pub use output::{EventKind, MsrError, OutputEvent, OutputUnit};
pub use regs::{CpuProfile, RtitCtl};
pub use rules::Rule;
pub use tracer::{Event, Tracer, TracerConfig};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
