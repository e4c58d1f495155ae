//! Shared test rig: build tables in sparse memory, program the MSRs, write a stream, inspect.
#![allow(dead_code)]

pub mod boot;
pub mod cli;
pub mod golden;
/// The libipt decoder harness of examples/libipt_decode.rs (libipt's instruction decoder over a
/// case directory, told the part and the filter as ptxed is).
#[path = "../../examples/libipt_decode.rs"]
pub mod harness;
pub mod insn;
pub mod layouts;
pub mod libipt;
pub mod packets;
pub mod ptt;
pub mod qemu;
pub mod query;
pub mod sources;
pub mod trace;

use ptemu::output::TopaEntry;
use ptemu::regs::msr::*;
use ptemu::regs::{RegisterFile, RtitCtl};
use ptemu::{CpuProfile, EventKind, MsrError, OutputEvent, OutputUnit, PhysMemory, Rule, SparseMemory};

/// Byte `i` of the test stream.
pub fn stream_byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b1) >> 13) as u8 ^ (i as u8)
}

/// `len` stream bytes starting at stream offset `from`.
pub fn stream(from: u64, len: usize) -> Vec<u8> {
    (from..from + len as u64).map(stream_byte).collect()
}

pub fn region(base: u64, size_code: u8) -> u64 {
    TopaEntry::region(base, size_code).bits()
}
pub fn region_int(base: u64, size_code: u8) -> u64 {
    TopaEntry::region(base, size_code).with_int(true).bits()
}
pub fn region_stop(base: u64, size_code: u8) -> u64 {
    TopaEntry::region(base, size_code).with_stop(true).bits()
}
pub fn end(to: u64) -> u64 {
    TopaEntry::end_to(to).bits()
}

/// A unit, its memory, and a running stream offset.
pub struct Rig {
    pub unit: OutputUnit,
    pub mem: SparseMemory,
    pub sent: u64,
    pub ctl: RtitCtl,
}

impl Rig {
    pub fn new(cpu: &str) -> Self {
        Self::with(CpuProfile::named(cpu).unwrap())
    }

    pub fn with(cpu: CpuProfile) -> Self {
        let mut unit = OutputUnit::new(cpu);
        unit.track_regions(true);
        Rig {
            unit,
            mem: SparseMemory::new(),
            sent: 0,
            ctl: RtitCtl::new(),
        }
    }

    /// Writes raw entries at `table[first..]`.
    pub fn table(&mut self, table: u64, first: u32, entries: &[u64]) -> &mut Self {
        for (i, &e) in entries.iter().enumerate() {
            self.mem
                .write_u64(table + 8 * (u64::from(first) + i as u64), e)
                .unwrap();
        }
        self
    }

    pub fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrError> {
        self.unit.wrmsr(&mut self.mem, msr, value)
    }

    pub fn rdmsr(&self, msr: u32) -> u64 {
        self.unit.rdmsr(msr).unwrap()
    }

    /// Programs OUTPUT_BASE and MASK_PTRS for ToPA and sets TraceEn|ToPA|BranchEn.
    pub fn start_topa(&mut self, table: u64, index: u32, offset: u32) -> &mut Self {
        self.wrmsr(IA32_RTIT_OUTPUT_BASE, table).unwrap();
        self.wrmsr(
            IA32_RTIT_OUTPUT_MASK_PTRS,
            0x7f | u64::from(index) << 7 | u64::from(offset) << 32,
        )
        .unwrap();
        self.ctl = RtitCtl::new()
            .with_trace_en(true)
            .with_branch_en(true)
            .with_topa(true);
        self.wrmsr(IA32_RTIT_CTL, self.ctl.bits()).unwrap();
        self
    }

    /// Programs single-range output and sets TraceEn|BranchEn.
    pub fn start_range(&mut self, base: u64, mask_ptrs: u64) -> &mut Self {
        self.wrmsr(IA32_RTIT_OUTPUT_BASE, base).unwrap();
        self.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, mask_ptrs).unwrap();
        self.ctl = RtitCtl::new().with_trace_en(true).with_branch_en(true);
        self.wrmsr(IA32_RTIT_CTL, self.ctl.bits()).unwrap();
        self
    }

    /// Writes the next `len` stream bytes in one slice.
    pub fn write(&mut self, len: usize) -> &mut Self {
        let data = stream(self.sent, len);
        self.unit.write(&mut self.mem, &data).unwrap();
        self.sent += len as u64;
        self
    }

    /// Clears TraceEn (keeping the other CTL bits).
    pub fn disable(&mut self) -> &mut Self {
        let ctl = self.ctl.with_trace_en(false);
        self.wrmsr(IA32_RTIT_CTL, ctl.bits()).unwrap();
        self
    }

    /// Sets TraceEn again with the same CTL.
    pub fn enable(&mut self) -> &mut Self {
        self.wrmsr(IA32_RTIT_CTL, self.ctl.bits()).unwrap();
        self
    }

    pub fn regs(&self) -> RegisterFile {
        self.unit.registers()
    }

    pub fn events(&self) -> Vec<OutputEvent> {
        self.unit.events().to_vec()
    }

    /// Events as (kind, stream offset, rule id).
    pub fn event_list(&self) -> Vec<(EventKind, u64, &'static str)> {
        self.unit
            .events()
            .iter()
            .map(|e| (e.kind, e.stream_offset, e.rule.map_or("-", Rule::id)))
            .collect()
    }

    pub fn read(&self, pa: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mem.read(pa, &mut b).unwrap();
        b
    }

    /// (table/base, index-or-mask, offset) from the MSRs.
    pub fn position(&self) -> (u64, u32, u32) {
        let r = self.regs();
        (
            u64::from(r.output_base),
            r.mask_ptrs.mask_or_table_offset(),
            r.mask_ptrs.output_offset(),
        )
    }
}

/// Sparse memory with a hole: every access to `[from, to)` fails while `refuse` is set (a host
/// whose memory callback refuses), for the memory-error policies (spec/output.md).
pub struct Holey {
    pub mem: SparseMemory,
    pub hole: (u64, u64),
    pub refuse: bool,
}

impl Holey {
    /// Memory whose `len` bytes at `from` can be refused; `refuse` starts false.
    pub fn new(from: u64, len: u64) -> Self {
        Holey {
            mem: SparseMemory::new(),
            hole: (from, from + len),
            refuse: false,
        }
    }

    fn check(&self, pa: u64, len: usize) -> Result<(), ptemu::MemError> {
        let (from, to) = self.hole;
        if self.refuse && pa < to && pa.saturating_add(len as u64) > from {
            return Err(ptemu::MemError::Unmapped { pa, len });
        }
        Ok(())
    }
}

impl PhysMemory for Holey {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), ptemu::MemError> {
        self.check(pa, data.len())?;
        self.mem.write(pa, data)
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), ptemu::MemError> {
        self.check(pa, buf.len())?;
        self.mem.read(pa, buf)
    }
}
