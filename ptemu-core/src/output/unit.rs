//! [`OutputUnit`]: the MSR interface and the byte sink of one logical processor's trace output.

use super::core::Core;
use super::cursor::{Flow, RangeCursor, TopaCursor};
use super::event::{EventKind, OutputEvent};
use super::range::check_range;
use super::topa::EntryError;
use super::violation::Violation;
use crate::memory::{MemError, PhysMemory};
use crate::regs::check::{check_present, check_write};
use crate::regs::{
    CpuProfile, Errata, GlobalStatus, GpFault, Leaf14Ebx, MaskPtrs, Msr, OutputBase, RegisterFile, RtitCtl,
    RtitStatus,
};
use crate::rules::Rule;
use std::collections::BTreeMap;

/// A failed `wrmsr` or `rdmsr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MsrError {
    /// The access raised #GP.
    #[error(transparent)]
    Gp(#[from] GpFault),
    /// The MSR is not one the output unit models; the caller should handle it elsewhere.
    #[error("MSR {0:#x} is not modelled by the PT output unit")]
    NotModelled(u32),
    /// Reading a ToPA entry at enable failed in host memory.
    #[error(transparent)]
    Memory(#[from] MemError),
}

/// Byte counts of the stream handed to [`OutputUnit::write`], and how often output came back over
/// bytes it had written (spec/output.md, "Laps and overwrites").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct OutputStats {
    /// Bytes handed in.
    pub bytes_in: u64,
    /// Bytes stored (or sent to the trace transport with FabricEn=1).
    pub bytes_written: u64,
    /// Bytes dropped because output was off (TraceEn=0, Stopped, Error) or halted mid-write.
    pub bytes_lost: u64,
    /// Stored bytes that landed on memory this unit had already written; `bytes_written -
    /// bytes_overwritten` addresses hold stream bytes.
    pub bytes_overwritten: u64,
    /// Laps: 1 when output first lands on bytes it wrote before (a circular ToPA or a single range
    /// coming round), plus 1 each time output later enters the region where that happened.
    pub laps: u64,
}

/// Which reset (M6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetKind {
    /// Clears every MSR.
    Cold,
    /// Clears only TraceEn if CPUID.14H.0:EBX\[2\]=1, otherwise every MSR.
    Warm,
}

/// Where output goes while TriggerEn=1.
enum Sink {
    Topa(TopaCursor),
    Range(RangeCursor),
    /// FabricEn=1: the trace transport subsystem, outside ptemu's memory.
    Transport,
}

/// The trace-output unit of one logical processor (M5): its MSRs, its internal output state, and
/// the byte sink. It never owns memory: every call that touches memory takes it.
pub struct OutputUnit {
    core: Core,
    sink: Option<Sink>,
}

impl OutputUnit {
    /// A unit in reset state for `cpu`.
    pub fn new(cpu: CpuProfile) -> Self {
        OutputUnit {
            core: Core {
                cpu,
                regs: RegisterFile::default(),
                events: Vec::new(),
                stats: OutputStats::default(),
                regions: None,
                last_violation: None,
                footprint: Default::default(),
            },
            sink: None,
        }
    }

    /// The CPU profile.
    pub fn cpu(&self) -> &CpuProfile {
        &self.core.cpu
    }

    /// WRMSR: applies every #GP rule, then the write. TraceEn 0->1 loads and checks the output
    /// state (reading the current ToPA entry from `mem`); 1->0 writes it back to the MSRs.
    ///
    /// A write that fails changes nothing: a #GP (M2, M3), and also a host-memory error while
    /// reading the ToPA table at enable, which comes before any change (the WRMSR did not happen:
    /// TraceEn stays 0, no event, no PMI; spec/output.md, "Memory errors").
    pub fn wrmsr<M: PhysMemory>(&mut self, mem: &mut M, msr: u32, value: u64) -> Result<(), MsrError> {
        let which = Msr::from_address(msr).ok_or(MsrError::NotModelled(msr))?;
        check_write(&self.core.cpu, &self.core.regs, which, value)?;
        let regs = &mut self.core.regs;
        match which {
            Msr::Ctl => {
                let ctl = RtitCtl::from(value);
                match (regs.ctl.trace_en(), ctl.trace_en()) {
                    (false, true) => {
                        let output = self.prepare_enable(mem, ctl)?;
                        self.core.regs.ctl = ctl;
                        self.enable(output);
                    }
                    (true, false) => {
                        regs.ctl = ctl;
                        self.flush();
                    }
                    _ => regs.ctl = ctl,
                }
            }
            Msr::Status => {
                let keep = regs.status.bits() & RtitStatus::WRITE_IGNORED;
                regs.status = RtitStatus::from(value & !RtitStatus::WRITE_IGNORED | keep);
            }
            Msr::OutputBase => regs.output_base = OutputBase::from(value),
            Msr::OutputMaskPtrs => regs.mask_ptrs = MaskPtrs::from(value | MaskPtrs::LOWER_MASK),
            Msr::Cr3Match => regs.cr3_match = value.into(),
            Msr::Addr { n, b } => regs.addr[n][b as usize] = value,
            // Read-only: `check_write` has already raised #GP.
            Msr::PerfGlobalStatus => {}
            Msr::PerfGlobalStatusReset => {
                regs.global_status.remove(GlobalStatus::from_bits_truncate(value));
            }
            Msr::PerfGlobalStatusSet => regs.global_status.insert(GlobalStatus::from_bits_truncate(value)),
        }
        Ok(())
    }

    /// RDMSR. Reads are exact at any time: ptemu updates STATUS and OUTPUT_* synchronously (M7 policy).
    pub fn rdmsr(&self, msr: u32) -> Result<u64, MsrError> {
        let which = Msr::from_address(msr).ok_or(MsrError::NotModelled(msr))?;
        check_present(&self.core.cpu, which, None)?;
        let regs = self.registers();
        Ok(match which {
            Msr::Ctl => regs.ctl.bits(),
            Msr::Status => regs.status.bits(),
            Msr::OutputBase => u64::from(regs.output_base),
            Msr::OutputMaskPtrs => regs.mask_ptrs.bits(),
            Msr::Cr3Match => regs.cr3_match.into(),
            Msr::Addr { n, b } => regs.addr[n][b as usize],
            Msr::PerfGlobalStatus => regs.global_status.bits(),
            Msr::PerfGlobalStatusReset | Msr::PerfGlobalStatusSet => 0,
        })
    }

    /// The MSR values as RDMSR returns them now, including the live output position.
    pub fn registers(&self) -> RegisterFile {
        let mut regs = self.core.regs.clone();
        match &self.sink {
            Some(Sink::Topa(c)) => {
                regs.output_base = OutputBase::from(c.table);
                regs.mask_ptrs = MaskPtrs::topa(c.index, c.offset as u32);
            }
            Some(Sink::Range(c)) => regs.mask_ptrs = regs.mask_ptrs.with_output_offset(c.offset as u32),
            Some(Sink::Transport) | None => {}
        }
        regs
    }

    /// Writes packet bytes through the output (W1, W2, R1). Bytes are dropped, and counted as lost,
    /// while TriggerEn=0. An `Err` means host memory refused a store; the bytes before it landed.
    pub fn write<M: PhysMemory>(&mut self, mem: &mut M, data: &[u8]) -> Result<(), MemError> {
        let core = &mut self.core;
        core.stats.bytes_in += data.len() as u64;
        let before = core.stats.bytes_written;
        let result = match &mut self.sink {
            None => {
                core.stats.bytes_lost += data.len() as u64;
                Ok(())
            }
            Some(Sink::Transport) => {
                core.stats.bytes_written += data.len() as u64;
                Ok(())
            }
            Some(Sink::Range(c)) => c.write(core, mem, data),
            Some(Sink::Topa(c)) => match c.write(core, mem, data) {
                Ok(Flow::Halted) => {
                    self.sink = None;
                    Ok(())
                }
                Ok(Flow::Running) => Ok(()),
                Err(e) => Err(e),
            },
        };
        let written = core.stats.bytes_written - before;
        if result.is_err() {
            core.stats.bytes_lost += data.len() as u64 - written;
        }
        if core.cpu.ebx().contains(Leaf14Ebx::PSB_CYC) {
            // Q10 policy: PacketByteCnt counts written bytes modulo 2^17.
            let cnt = (u64::from(core.regs.status.packet_byte_cnt()) + written) & 0x1_ffff;
            core.regs.status.set_packet_byte_cnt(cnt as u32);
        }
        result
    }

    /// IP TraceStop (S6): sets Stopped, clears TriggerEn; the output position is written back.
    pub fn trace_stop(&mut self) {
        if !self.core.regs.status.trigger_en() {
            return;
        }
        self.flush_position();
        self.core.stop(None, Rule::S6);
    }

    /// EN2: whether the tracer must emit a PSB+ now that TraceEn went 0->1: PacketByteCnt = 0, or
    /// the CPU has no configurable PSB (CPUID.14H.0:EBX\[1\]=0).
    pub fn psb_due_on_enable(&self) -> bool {
        !self.core.cpu.ebx().contains(Leaf14Ebx::PSB_CYC) || self.core.regs.status.packet_byte_cnt() == 0
    }

    /// Whether output is on (STATUS.TriggerEn).
    pub fn output_enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Events so far.
    pub fn events(&self) -> &[OutputEvent] {
        &self.core.events
    }

    /// Removes the events so far, in order, keeping the storage for the next ones: a long run
    /// drains them as it goes (into ptemu's `EventLog`, say) to keep memory flat.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, OutputEvent> {
        self.core.events.drain(..)
    }

    /// Takes the events so far, leaving none.
    pub fn take_events(&mut self) -> Vec<OutputEvent> {
        std::mem::take(&mut self.core.events)
    }

    /// Byte counts, laps and overwrites since the unit was made (resets keep them).
    pub fn stats(&self) -> OutputStats {
        let (laps, bytes_overwritten) = self.core.footprint.totals();
        OutputStats {
            laps,
            bytes_overwritten,
            ..self.core.stats
        }
    }

    /// The last operational error, with its details.
    pub fn last_violation(&self) -> Option<&Violation> {
        self.core.last_violation.as_ref()
    }

    /// Starts (or stops) recording which output regions receive bytes.
    pub fn track_regions(&mut self, on: bool) {
        self.core.regions = on.then(BTreeMap::new);
    }

    /// Output regions that received bytes, as (base, size), when tracking is on.
    pub fn written_regions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.core.regions.iter().flatten().map(|(&b, &s)| (b, s))
    }

    /// Cold or warm reset (M6).
    pub fn reset(&mut self, kind: ResetKind) {
        let keeps = self.core.cpu.ebx().contains(Leaf14Ebx::IP_FILTER);
        if kind == ResetKind::Warm && keeps {
            self.flush();
            self.core.regs.ctl.set_trace_en(false);
        } else {
            self.sink = None;
            self.core.regs = RegisterFile::default();
        }
    }

    /// The output TraceEn 0->1 with `ctl` starts, found before anything changes: the only step of
    /// an enable that can fail in host memory is reading the starting ToPA entry. `None` when
    /// Stopped or Error is set (S4, EN1: they are sticky; TriggerEn stays 0 and nothing is
    /// checked); `Some(Err)` for an operational error (E2).
    fn prepare_enable<M: PhysMemory>(
        &self,
        mem: &M,
        ctl: RtitCtl,
    ) -> Result<Option<Result<Sink, Violation>>, MemError> {
        let core = &self.core;
        let status = core.regs.status;
        if status.stopped() || status.error() {
            return Ok(None);
        }
        Ok(Some(if ctl.fabric_en() {
            Ok(Sink::Transport)
        } else if ctl.topa() {
            match Self::enable_topa(core, mem) {
                Err(EntryError::Mem(e)) => return Err(e),
                Err(EntryError::Rule(v)) => Err(v),
                Ok(sink) => Ok(sink),
            }
        } else {
            check_range(core.regs.output_base, core.regs.mask_ptrs).map(|r| {
                let alias = core.cpu.has(Errata::TGL052) && r.mask >= 0x1000;
                Sink::Range(RangeCursor::new(r.base, r.mask, r.offset, alias))
            })
        }))
    }

    /// TraceEn 0->1 (EN2, E2, §6.5 `on_enable`) with the output [`OutputUnit::prepare_enable`]
    /// found.
    fn enable(&mut self, output: Option<Result<Sink, Violation>>) {
        let Some(sink) = output else {
            return;
        };
        let core = &mut self.core;
        let status = core.regs.status;
        core.regs.status.set_trigger_en(true);
        if status.pend_topa_pmi() && core.regs.ctl.inject_psb_pmi_on_enable() {
            core.raise_pmi(None, None, Rule::P6);
        }
        match sink {
            Ok(s) => {
                if matches!(&s, Sink::Range(c) if c.aliases_4k()) {
                    core.event(EventKind::Erratum, None, None, Some(Rule::TGL052));
                }
                self.sink = Some(s);
            }
            Err(v) => core.fail(v, false),
        }
    }

    fn enable_topa<M: PhysMemory>(core: &Core, mem: &M) -> Result<Sink, EntryError> {
        let base = core.regs.output_base.address();
        if base & 0xfff != 0 {
            let msg = format!("OUTPUT_BASE {base:#x} is not 4 KiB aligned");
            return Err(EntryError::Rule(Violation::in_msrs(Rule::T3, msg)));
        }
        let ptrs = core.regs.mask_ptrs;
        let (index, offset) = (ptrs.mask_or_table_offset(), u64::from(ptrs.output_offset()));
        let c = TopaCursor::load(core, mem, base, index, offset)?;
        if c.offset >= c.size() {
            let msg = format!(
                "OutputOffset {:#x} is not below the region size {:#x}",
                c.offset,
                c.size()
            );
            return Err(EntryError::Rule(Violation::at_entry(
                Rule::E1c,
                c.table,
                c.index,
                c.entry.bits(),
                msg,
            )));
        }
        Ok(Sink::Topa(c))
    }

    /// TraceEn 1->0 (EN3): writes the output position back and clears TriggerEn.
    fn flush(&mut self) {
        self.flush_position();
        self.core.regs.status.set_trigger_en(false);
    }

    fn flush_position(&mut self) {
        self.core.regs = self.registers();
        self.sink = None;
    }
}

impl std::fmt::Debug for OutputUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputUnit")
            .field("cpu", &self.core.cpu.name)
            .field("regs", &self.registers())
            .field("output_enabled", &self.output_enabled())
            .finish()
    }
}
