//! The state the output unit's cursors share (profile, registers, events, counters, region
//! tracking), apart from [`super::OutputUnit`]'s MSR interface.

use super::event::{EventKind, OutputEvent};
use super::footprint::Footprint;
use super::unit::OutputStats;
use super::violation::Violation;
use crate::memory::{MemError, PhysMemory};
use crate::regs::{CpuProfile, GlobalStatus, MaskPtrs, OutputBase, RegisterFile};
use crate::rules::Rule;
use std::collections::BTreeMap;

/// State shared by the cursors: profile, registers, events, counters.
pub(super) struct Core {
    pub cpu: CpuProfile,
    pub regs: RegisterFile,
    pub events: Vec<OutputEvent>,
    pub stats: OutputStats,
    pub regions: Option<BTreeMap<u64, u64>>,
    pub last_violation: Option<Violation>,
    /// The bytes written so far, for the overwrite and lap counts.
    pub footprint: Footprint,
}

impl Core {
    pub fn event(&mut self, kind: EventKind, table: Option<u64>, index: Option<u32>, rule: Option<Rule>) {
        let stream_offset = self.stats.bytes_written;
        self.events.push(OutputEvent {
            kind,
            stream_offset,
            table,
            index,
            rule,
        });
    }

    /// A ToPA PMI (P1): GLOBAL_STATUS\[55\], PendTopaPMI with preservation on (P6), and an event.
    pub fn raise_pmi(&mut self, table: Option<u64>, index: Option<u32>, rule: Rule) {
        self.regs.global_status |= GlobalStatus::TRACE_TOPA_PMI;
        if self.regs.ctl.inject_psb_pmi_on_enable() {
            self.regs.status.set_pend_topa_pmi(true);
        }
        self.event(EventKind::Pmi, table, index, Some(rule));
    }

    /// Sets Stopped (S1, S6); `at` = (table, index, offset) written back to the MSRs (S3).
    pub fn stop(&mut self, at: Option<(u64, u32, u64)>, rule: Rule) {
        self.regs.status.set_stopped(true);
        self.regs.status.set_trigger_en(false);
        let (table, index) = match at {
            Some((table, index, offset)) => {
                self.regs.output_base = OutputBase::from(table);
                self.regs.mask_ptrs = MaskPtrs::topa(index, offset as u32);
                (Some(table), Some(index))
            }
            None => (None, None),
        };
        self.event(EventKind::Stopped, table, index, Some(rule));
    }

    /// An operational error (E3). With `point_msrs`, the MSRs are left at the offending entry with
    /// OutputOffset 0; otherwise (enable-time errors) they stay as programmed.
    pub fn fail(&mut self, v: Violation, point_msrs: bool) {
        self.regs.status.set_error(true);
        self.regs.status.set_trigger_en(false);
        if let (true, Some(table), Some(index)) = (point_msrs, v.table, v.index) {
            self.regs.output_base = OutputBase::from(table);
            self.regs.mask_ptrs = MaskPtrs::topa(index, 0);
        }
        #[cfg(feature = "tracing")]
        tracing::debug!(violation = %v, "operational error");
        self.event(EventKind::Error, v.table, v.index, Some(v.rule));
        self.last_violation = Some(v);
    }

    /// Stores one run of stream bytes and counts it; the first run into a region records the
    /// region (`touched` is the cursor's flag for its current region). Two entries may name the
    /// same base with different sizes: the largest size that received bytes is kept, so the
    /// region's dump covers every byte written through either.
    pub fn store<M: PhysMemory>(
        &mut self,
        mem: &mut M,
        pa: u64,
        run: &[u8],
        (base, size): (u64, u64),
        touched: &mut bool,
    ) -> Result<(), MemError> {
        mem.write(pa, run)?;
        self.footprint.record(base, pa, run.len() as u64);
        if !*touched {
            *touched = true;
            if let Some(r) = self.regions.as_mut() {
                let kept = r.entry(base).or_insert(size);
                *kept = (*kept).max(size);
            }
        }
        self.stats.bytes_written += run.len() as u64;
        Ok(())
    }
}
