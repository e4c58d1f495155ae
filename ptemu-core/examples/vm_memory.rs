//! A rust-vmm VMM's guest memory as the PT output unit's physical memory (feature `vm-memory`):
//! the guest's ToPA table and regions live in a `GuestMemoryMmap`, which the tracer writes
//! through directly. Run with `cargo run -p ptemu-core --features vm-memory --example vm_memory`.

use ptemu_core::output::{OutputUnit, TopaEntry};
use ptemu_core::regs::msr::{IA32_RTIT_CTL, IA32_RTIT_OUTPUT_BASE, IA32_RTIT_OUTPUT_MASK_PTRS};
use ptemu_core::regs::{CpuProfile, RtitCtl};
use ptemu_core::tracer::{Event, Tracer, TracerConfig};
use ptemu_core::PhysMemory;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The guest's ToPA table and its two 4 KiB regions (INT on the second, END back to the table).
pub const TABLE: u64 = 0x1_0000;
/// The first region.
pub const REGION: u64 = 0x2_0000;

/// Programs a ToPA ring in `mem`, traces `loops` iterations of a small loop into it, and returns
/// the bytes the output unit stored and the final IA32_RTIT_OUTPUT_MASK_PTRS.
pub fn trace_into<M: PhysMemory>(mem: &mut M, loops: u64) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    mem.write_u64(TABLE, TopaEntry::region(REGION, 0).bits())?;
    mem.write_u64(
        TABLE + 8,
        TopaEntry::region(REGION + 0x1000, 0).with_int(true).bits(),
    )?;
    mem.write_u64(TABLE + 16, TopaEntry::end_to(TABLE).bits())?;
    let mut t = Tracer::new(
        OutputUnit::new(CpuProfile::named("icelake")?),
        TracerConfig::default(),
    );
    let ip = 0x40_1000;
    t.wrmsr(mem, IA32_RTIT_OUTPUT_BASE, TABLE, ip, 2)?;
    t.wrmsr(mem, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f, ip, 2)?;
    let ctl = RtitCtl::new()
        .with_topa(true)
        .with_branch_en(true)
        .with_user(true);
    t.wrmsr(mem, IA32_RTIT_CTL, ctl.with_trace_en(true).bits(), ip, 2)?;
    for i in 0..loops {
        t.event(
            mem,
            &Event::CondBranch {
                ip,
                len: 2,
                target: ip,
                taken: i % 3 != 0,
            },
        )?;
        t.event(
            mem,
            &Event::IndirectJump {
                ip: ip + 2,
                target: ip,
            },
        )?;
    }
    t.wrmsr(mem, IA32_RTIT_CTL, ctl.bits(), ip, 2)?;
    Ok((
        t.unit().stats().bytes_written,
        t.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS)?,
    ))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The VMM's guest memory: 1 MiB of RAM at guest physical 0.
    let mut guest = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)])?;
    let (written, ptrs) = trace_into(&mut guest, 500)?;
    let first: [u8; 2] = guest.read_obj(GuestAddress(REGION))?;
    println!("{written} bytes of trace in the guest's ToPA ring; OUTPUT_MASK_PTRS = {ptrs:#x}");
    println!(
        "the first region starts {:02x} {:02x} (a PSB)",
        first[0], first[1]
    );
    Ok(())
}
