//! A tracer on single-range output into sparse memory, for the generation tests.

use ptemu::packet::{Packet, PacketDecoder};
use ptemu::regs::RtitCtl;
use ptemu::tracer::{Event, ExecMode, FarKind, Tracer, TracerConfig};
use ptemu::{CpuProfile, OutputUnit, PhysMemory, SparseMemory};

pub const CTL: u32 = 0x570;
pub const STATUS: u32 = 0x571;
pub const OUTPUT_BASE: u32 = 0x560;
pub const MASK_PTRS: u32 = 0x561;
pub const CR3_MATCH: u32 = 0x572;
pub const ADDR0_A: u32 = 0x580;
pub const ADDR0_B: u32 = 0x581;
pub const ADDR1_A: u32 = 0x582;
pub const ADDR1_B: u32 = 0x583;

/// Output buffer: 16 MiB single range at 256 MiB.
pub const BASE: u64 = 0x1000_0000;
pub const SIZE: u64 = 16 << 20;
/// The IP of the WRMSR that enables tracing, and its length.
pub const WRMSR_IP: u64 = 0x40_0ff0;
pub const WRMSR_LEN: u8 = 2;

pub struct TraceRig {
    pub tracer: Tracer,
    pub mem: SparseMemory,
    pub ctl: RtitCtl,
}

impl TraceRig {
    pub fn new(cfg: TracerConfig) -> Self {
        Self::with_cpu("generic-max", cfg)
    }

    /// `cpu`: a profile name, then any erratum edits (CP2), e.g. `"skylake -BDM70"`.
    pub fn with_cpu(cpu: &str, cfg: TracerConfig) -> Self {
        let mut words = cpu.split_whitespace();
        let mut profile = CpuProfile::named(words.next().unwrap()).unwrap();
        for edit in words {
            profile.errata = profile.errata.edit(edit).unwrap();
        }
        let unit = OutputUnit::new(profile);
        let mut tracer = Tracer::new(unit, cfg);
        tracer.set_state(WRMSR_IP, 3, 0x1000, ExecMode::Bits64);
        TraceRig {
            tracer,
            mem: SparseMemory::new(),
            ctl: RtitCtl::new(),
        }
    }

    pub fn wrmsr(&mut self, msr: u32, value: u64) {
        self.tracer
            .wrmsr(&mut self.mem, msr, value, WRMSR_IP, WRMSR_LEN)
            .unwrap_or_else(|e| panic!("wrmsr {msr:#x} = {value:#x}: {e}"));
    }

    /// Programs single-range output and writes CTL = `ctl` | TraceEn.
    pub fn start(&mut self, ctl: RtitCtl) -> &mut Self {
        self.wrmsr(OUTPUT_BASE, BASE);
        self.wrmsr(MASK_PTRS, SIZE - 1);
        self.ctl = ctl.with_trace_en(true);
        self.wrmsr(CTL, self.ctl.bits());
        self
    }

    /// Programs ToPA output (one 1 MiB region at BASE, then END back to the table) and writes
    /// CTL = `ctl` | ToPA | TraceEn.
    pub fn start_topa(&mut self, ctl: RtitCtl) -> &mut Self {
        let table = BASE - 0x1000;
        let region = ptemu::output::TopaEntry::region(BASE, 8).bits();
        self.mem.write_u64(table, region).unwrap();
        self.mem
            .write_u64(table + 8, ptemu::output::TopaEntry::end_to(table).bits())
            .unwrap();
        self.wrmsr(OUTPUT_BASE, table);
        self.wrmsr(MASK_PTRS, 0x7f);
        self.ctl = ctl.with_topa(true).with_trace_en(true);
        self.wrmsr(CTL, self.ctl.bits());
        self
    }

    pub fn ev(&mut self, e: Event) -> &mut Self {
        self.tracer.event(&mut self.mem, &e).unwrap();
        self
    }

    pub fn evs(&mut self, es: &[Event]) -> &mut Self {
        for e in es {
            self.ev(*e);
        }
        self
    }

    /// Clears TraceEn (the WRMSR at `ip`).
    pub fn stop_at(&mut self, ip: u64) -> &mut Self {
        self.tracer
            .wrmsr(
                &mut self.mem,
                CTL,
                self.ctl.with_trace_en(false).bits(),
                ip,
                WRMSR_LEN,
            )
            .unwrap();
        self
    }

    /// Traces `events` from the start state `(cpl, cr3, mode)`: CTL = `ctl` | TraceEn by the
    /// WRMSR at WRMSR_IP, then every event, then TraceEn = 0 at the IP after the last one.
    /// Returns the bytes stored.
    pub fn trace_events(
        &mut self,
        (cpl, cr3, mode): (u8, u64, ExecMode),
        ctl: RtitCtl,
        events: &[Event],
    ) -> Vec<u8> {
        self.tracer.set_state(WRMSR_IP, cpl, cr3, mode);
        self.start(ctl);
        self.evs(events);
        let last = events.iter().fold(WRMSR_IP, |ip, e| e.next_ip(ip));
        self.stop_at(last);
        self.bytes()
    }

    /// Every byte the unit stored (single range, or the first ToPA region: base .. offset).
    pub fn bytes(&self) -> Vec<u8> {
        let offset = self.tracer.rdmsr(MASK_PTRS).unwrap() >> 32;
        let mut v = vec![0u8; offset as usize];
        self.mem.read(BASE, &mut v).unwrap();
        v
    }

    /// ptemu's decode of the stored bytes (this is for layout assertions; the oracle tests use
    /// libipt).
    pub fn packets(&self) -> Vec<Packet> {
        let bytes = self.bytes();
        let mut d = PacketDecoder::new(&bytes, 0);
        let mut out = Vec::new();
        while let Some(r) = d.next_packet() {
            let p = r.expect("valid stream").1;
            // The CPU's layout (spec/hardware.md) is not what these tests check.
            if p != Packet::Pad {
                out.push(p);
            }
        }
        out
    }

    /// Packet names, for shape assertions.
    pub fn names(&self) -> Vec<&'static str> {
        self.packets().iter().map(|p| p.name()).collect()
    }
}

/// A 64-bit far transfer without a CR3 change.
pub fn far(kind: FarKind, from: u64, to: u64, cpl: u8) -> Event {
    Event::far(kind, from, to, cpl, ExecMode::Bits64)
}
