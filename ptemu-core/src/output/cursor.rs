//! The write cursors: where the next byte goes, and what happens at each boundary.
//!
//! Both cursors copy the largest run that fits before the next boundary (region end, early-PMI
//! threshold, range end), so the cost per byte is one `memcpy` share.

use super::core::Core;
use super::event::EventKind;
use super::topa::{current_entry, EntryError, TopaEntry, MAX_INDEX};
use crate::memory::{MemError, PhysMemory};
use crate::rules::Rule;

/// Whether output goes on after a boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Output continues.
    Running,
    /// Output stopped (STOP or operational error); the MSRs were written back.
    Halted,
}

/// The internal ToPA state: proc_trace_table_base, _table_offset and _output_offset (§6.1),
/// plus the current entry.
#[derive(Clone, Debug)]
pub(super) struct TopaCursor {
    pub table: u64,
    pub index: u32,
    pub offset: u64,
    pub entry: TopaEntry,
    /// Offset of the next boundary: the region size, or the early-PMI threshold (P4).
    limit: u64,
    /// The region's INT PMI has already fired early (P4).
    pmi_done: bool,
    touched: bool,
}

impl TopaCursor {
    /// Makes `table[index]` current with `offset` (see [`current_entry`]); after an END hop the
    /// offset is 0.
    pub fn load<M: PhysMemory>(
        core: &Core,
        mem: &M,
        table: u64,
        index: u32,
        offset: u64,
    ) -> Result<Self, EntryError> {
        let c = current_entry(&core.cpu, mem, table, index)?;
        let offset = if c.hopped { 0 } else { offset };
        Ok(Self::at(core, c.table, c.index, c.entry, offset))
    }

    /// Region size of the current entry.
    pub fn size(&self) -> u64 {
        self.entry.region_size()
    }

    fn at(core: &Core, table: u64, index: u32, e: TopaEntry, offset: u64) -> Self {
        let size = e.region_size();
        let margin = u64::from(core.cpu.early_pmi_margin);
        let early = core.cpu.single_entry_topa() && e.int() && margin > 0;
        let limit = if early && offset < size {
            size.saturating_sub(margin).max(offset + 1).min(size)
        } else {
            size
        };
        TopaCursor {
            table,
            index,
            offset,
            entry: e,
            limit,
            pmi_done: false,
            touched: false,
        }
    }

    /// Writes `data` into the walk (W1, W2); returns the bytes not written if output halts.
    pub fn write<M: PhysMemory>(
        &mut self,
        core: &mut Core,
        mem: &mut M,
        mut data: &[u8],
    ) -> Result<Flow, MemError> {
        while !data.is_empty() {
            let n = ((self.limit - self.offset) as usize).min(data.len());
            let (base, size) = (self.entry.base(), self.size());
            core.store(
                mem,
                base + self.offset,
                &data[..n],
                (base, size),
                &mut self.touched,
            )?;
            self.offset += n as u64;
            data = &data[n..];
            if self.offset == self.limit && self.boundary(core, mem)? == Flow::Halted {
                core.stats.bytes_lost += data.len() as u64;
                return Ok(Flow::Halted);
            }
        }
        Ok(Flow::Running)
    }

    /// The early-PMI threshold (P4) or a full region (W3, S1, P1).
    fn boundary<M: PhysMemory>(&mut self, core: &mut Core, mem: &M) -> Result<Flow, MemError> {
        let size = self.size();
        if self.offset < size {
            self.pmi_done = true;
            self.limit = size;
            core.raise_pmi(Some(self.table), Some(self.index), Rule::P4);
            return Ok(Flow::Running);
        }
        let pmi_due = self.entry.int() && !self.pmi_done;
        if self.entry.stop() {
            core.stop(Some((self.table, self.index, size)), Rule::S1);
            if pmi_due {
                core.raise_pmi(Some(self.table), Some(self.index), Rule::S5);
            }
            return Ok(Flow::Halted);
        }
        let wraps = self.index == MAX_INDEX;
        let next = if wraps { 0 } else { self.index + 1 };
        // The next entry is read first: a host-memory error leaves the region's PMI and wrap
        // unraised, so the retry raises them once (spec/output.md, "Memory errors").
        let loaded = Self::load(core, mem, self.table, next, 0);
        if let Err(EntryError::Mem(e)) = loaded {
            return Err(e);
        }
        if pmi_due {
            core.raise_pmi(Some(self.table), Some(self.index), Rule::P1);
        }
        if wraps {
            core.event(EventKind::Wrap, Some(self.table), Some(0), Some(Rule::W5));
        }
        match loaded {
            Ok(c) => {
                *self = c;
                Ok(Flow::Running)
            }
            Err(EntryError::Mem(e)) => Err(e),
            Err(EntryError::Rule(v)) => {
                core.fail(v, true);
                Ok(Flow::Halted)
            }
        }
    }
}

/// The internal single-range state (R1–R3, R5), with the TGL052 aliasing when the profile has it.
#[derive(Clone, Debug)]
pub(super) struct RangeCursor {
    pub base: u64,
    pub mask: u64,
    pub offset: u64,
    /// TGL052 model: offsets past 4 KiB alias into the first 4 KiB of the range.
    alias_4k: bool,
    touched: bool,
}

impl RangeCursor {
    pub fn new(base: u64, mask: u64, offset: u64, alias_4k: bool) -> Self {
        RangeCursor {
            base,
            mask,
            offset,
            alias_4k,
            touched: false,
        }
    }

    /// Whether offsets past 4 KiB alias into the range's first 4 KiB (TGL052).
    pub fn aliases_4k(&self) -> bool {
        self.alias_4k
    }

    pub fn write<M: PhysMemory>(
        &mut self,
        core: &mut Core,
        mem: &mut M,
        mut data: &[u8],
    ) -> Result<(), MemError> {
        let size = self.mask + 1;
        while !data.is_empty() {
            let (addr, room) = if self.alias_4k {
                let low = self.offset & 0xfff;
                (self.base + low, 0x1000 - low)
            } else {
                (self.base + self.offset, size - self.offset)
            };
            let n = (room as usize).min(data.len());
            core.store(mem, addr, &data[..n], (self.base, size), &mut self.touched)?;
            self.offset += n as u64;
            data = &data[n..];
            if self.offset == size {
                self.offset = 0;
                core.event(EventKind::Wrap, None, None, Some(Rule::R3));
            }
        }
        Ok(())
    }
}
