//! Layout files: a CPU profile, the initial output MSRs and ToPA tables to place in memory.
//!
//! The TOML contract is documented in the README; [`Layout::parse`] reads it, [`Layout::apply`]
//! places the tables and programs the MSRs, [`check`] validates a layout statically.

mod check;
mod parse;
mod route;

pub use check::{check, recheck, CheckReport};
pub use parse::{EntrySpec, LayoutError, Scheme, TableSpec};
pub use route::{PmiAt, Route, WalkEnd};

use crate::memory::PhysMemory;
use crate::output::{OutputUnit, MAX_INDEX};
use crate::regs::msr::{IA32_RTIT_CTL, IA32_RTIT_OUTPUT_BASE, IA32_RTIT_OUTPUT_MASK_PTRS, IA32_RTIT_STATUS};
use crate::regs::{CpuProfile, RtitCtl};
use crate::MsrError;
use std::collections::BTreeMap;

/// A parsed, resolved layout.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The CPU profile, with `maxphyaddr` and `errata` overrides applied.
    pub cpu: CpuProfile,
    /// Output scheme.
    pub scheme: Scheme,
    /// Initial IA32_RTIT_OUTPUT_BASE.
    pub base: u64,
    /// Initial IA32_RTIT_OUTPUT_MASK_PTRS.
    pub mask_ptrs: u64,
    /// ToPA tables, in file order.
    pub tables: Vec<TableSpec>,
}

impl Layout {
    /// The layout in a line: the scheme, the regions the walk visits (ToPA) or the range,
    /// INT and STOP, and how output ends (circular, a STOP, an operational error).
    pub fn summary(&self) -> String {
        let layout = self;
        use crate::layout::{Scheme, WalkEnd};
        use crate::output::TopaEntry;
        use crate::picture::size_text;
        if layout.scheme == Scheme::SingleRange {
            let size = (layout.mask_ptrs & 0xffff_ffff | 0x7f) + 1;
            return format!(
                "single range of {} at {:#x}, circular (R3)",
                size_text(size),
                layout.base
            );
        }
        let report = crate::layout::check(layout);
        let entries = layout.entries();
        let (mut sizes, mut int, mut stop) = (Vec::new(), false, false);
        for &(t, i) in &report.walk {
            let e = TopaEntry::from(entries.get(&(t + 8 * u64::from(i))).copied().unwrap_or(0));
            if !e.end() {
                sizes.push(e.region_size());
                int |= e.int();
                stop |= e.stop();
            }
        }
        let regions = match sizes.as_slice() {
            [] => "no region".to_string(),
            [one] => format!("1 x {} region", size_text(*one)),
            [first, ..] if sizes.iter().all(|s| s == first) => {
                format!("{} x {} regions", sizes.len(), size_text(*first))
            }
            _ => format!(
                "{} regions ({} in all)",
                sizes.len(),
                size_text(sizes.iter().sum())
            ),
        };
        let tables = match layout.tables.len() {
            1 => String::new(),
            n => format!(" in {n} tables"),
        };
        let flags: String = [(int, ", INT"), (stop, ", STOP")]
            .iter()
            .filter(|f| f.0)
            .map(|f| f.1)
            .collect();
        let end = match report.route.map(|r| r.end) {
            Some(WalkEnd::Circular { .. }) => ", circular",
            Some(WalkEnd::Stop) => ", stops when full",
            Some(WalkEnd::Error) => ", ends in an operational error",
            None => "",
        };
        format!("ToPA, {regions}{tables}{flags}{end}")
    }

    /// Every listed entry as (physical address, raw value), in address order.
    pub fn entries(&self) -> BTreeMap<u64, u64> {
        let mut m = BTreeMap::new();
        for t in &self.tables {
            for (i, e) in t.entries.iter().enumerate() {
                m.insert(t.base + 8 * (u64::from(t.first_index) + i as u64), e.raw);
            }
        }
        m
    }

    /// Writes every table entry into `mem`.
    pub fn place_tables<M: PhysMemory>(&self, mem: &mut M) -> Result<(), crate::MemError> {
        for (pa, value) in self.entries() {
            mem.write_u64(pa, value)?;
        }
        Ok(())
    }

    /// The IA32_RTIT_CTL value that starts tracing with this layout: TraceEn, BranchEn (which BDM106
    /// parts require) and ToPA for the ToPA scheme.
    pub fn enable_ctl(&self) -> RtitCtl {
        RtitCtl::new()
            .with_trace_en(true)
            .with_branch_en(true)
            .with_topa(self.scheme == Scheme::Topa)
    }

    /// The MSR writes that come before IA32_RTIT_CTL (EN1), in order: STATUS = 0, OUTPUT_BASE,
    /// OUTPUT_MASK_PTRS.
    pub fn output_msrs(&self) -> [(u32, u64); 3] {
        [
            (IA32_RTIT_STATUS, 0),
            (IA32_RTIT_OUTPUT_BASE, self.base),
            (IA32_RTIT_OUTPUT_MASK_PTRS, self.mask_ptrs),
        ]
    }

    /// Places the tables, then programs the MSRs in the order EN1 asks: [`Layout::output_msrs`],
    /// and IA32_RTIT_CTL last, which enables tracing.
    pub fn apply<M: PhysMemory>(&self, unit: &mut OutputUnit, mem: &mut M) -> Result<(), MsrError> {
        self.place_tables(mem)?;
        for (msr, value) in self.output_msrs() {
            unit.wrmsr(mem, msr, value)?;
        }
        unit.wrmsr(mem, IA32_RTIT_CTL, self.enable_ctl().bits())
    }
}

/// Index of the last entry a table block may list.
const LAST_INDEX: u64 = MAX_INDEX as u64;
