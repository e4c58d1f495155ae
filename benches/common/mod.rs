//! What the tracer benches share: the tracer they measure, enabled on a 64 MiB single-range
//! ring (Ice Lake's layout; BranchEn, User, TSCEn, PSBFreq 0).
#![allow(dead_code)]

use ptemu::regs::RtitCtl;
use ptemu::tracer::{ExecMode, Tracer, TracerConfig};
use ptemu::{CpuProfile, OutputUnit, SparseMemory};

/// The ring's base.
pub const BASE: u64 = 0x1000_0000;
/// The ring's size.
pub const RING: u64 = 64 << 20;

/// The tracer, enabled on the ring.
pub fn tracer(mem: &mut SparseMemory) -> Tracer {
    let unit = OutputUnit::new(CpuProfile::named("icelake").unwrap());
    let mut t = Tracer::new(unit, TracerConfig::default());
    t.set_state(0x40_0000, 3, 0x1000, ExecMode::Bits64);
    t.wrmsr(mem, 0x560, BASE, 0x40_0000, 0).unwrap();
    t.wrmsr(mem, 0x561, RING - 1, 0x40_0000, 0).unwrap();
    let ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_branch_en(true)
        .with_user(true)
        .with_tsc_en(true);
    t.wrmsr(mem, 0x570, ctl.bits(), 0x40_0000, 0).unwrap();
    t
}
