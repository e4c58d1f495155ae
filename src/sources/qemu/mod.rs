//! Real programs run under QEMU: the stream the ptemu QEMU plugin (`ptemu-qemu/`) sends, both
//! sides of it ([`wire`]), and its mapping to tracer events ([`QemuEvents`]), which
//! `ptemu run` feeds to the simulation (spec/qemu.md).

pub(crate) use ptemu_wire::classify;
mod events;
pub mod wire;
pub mod written;

pub use classify::{classify, Insn, Kind};
pub use events::{QemuEvents, Sideband, ThreadSeen};

/// Where the model's SYSCALL goes: the kernel's entry point, which is not traced (QE6). Any
/// canonical kernel address serves: with OS = 0 it never reaches the stream.
pub const SYSCALL_ENTRY: u64 = 0xffff_ffff_8160_0000;

/// Where the model's SYSRET comes from, in the kernel (QE6).
pub const SYSRET_FROM: u64 = 0xffff_ffff_8160_0100;

/// CR3 of the traced process (the tracer's start state; PIP is not sent with OS = 0).
pub const QEMU_CR3: u64 = 0x1000;
