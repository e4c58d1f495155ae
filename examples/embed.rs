//! Embedding the output unit behind an emulator's MSR hooks: the guest programs a two-region ToPA
//! table, traces, takes the ToPA PMI, and reads back where the output stopped.
//!
//! Run with `cargo run --example embed`.

use ptemu::output::TopaEntry;
use ptemu::regs::msr::*;
use ptemu::regs::RtitCtl;
use ptemu::{CpuProfile, OutputUnit, PhysMemory, SparseMemory};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Guest physical memory: the emulator's, here a sparse map.
    let mut mem = SparseMemory::new();
    let table = 0x5000;
    mem.write_u64(table, TopaEntry::region(0x10_0000, 0).with_int(true).bits())?;
    mem.write_u64(table + 8, TopaEntry::region(0x20_0000, 1).bits())?;
    mem.write_u64(table + 16, TopaEntry::end_to(table).bits())?;

    // One unit per logical processor; the emulator forwards WRMSR/RDMSR to it.
    let mut cpu0 = OutputUnit::new(CpuProfile::named("icelake")?);
    cpu0.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, table)?;
    cpu0.wrmsr(&mut mem, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f)?;
    let ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_topa(true)
        .with_branch_en(true)
        .with_user(true);
    cpu0.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits())?;

    // A write that is not allowed while tracing is a #GP the emulator injects into the guest.
    if let Err(gp) = cpu0.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, 0x9000) {
        println!("guest WRMSR faults: {gp}");
    }

    // Packet bytes from the tracer (here: 6000 PAD bytes).
    cpu0.write(&mut mem, &[0u8; 6000])?;
    for e in cpu0.take_events() {
        println!(
            "event {:?} at stream byte {} [{}]",
            e.kind,
            e.stream_offset,
            e.rule.unwrap()
        );
    }
    println!("GLOBAL_STATUS = {:#x}", cpu0.rdmsr(IA32_PERF_GLOBAL_STATUS)?);

    // The PMI handler disables tracing and reads the output position (P7).
    cpu0.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.with_trace_en(false).bits())?;
    let ptrs = cpu0.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS)?;
    println!(
        "stopped at entry {} offset {:#x}",
        (ptrs >> 7) & 0x1ff_ffff,
        ptrs >> 32
    );
    Ok(())
}
