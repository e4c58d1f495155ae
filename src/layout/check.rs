//! Static validation of a layout against its CPU profile (`ptemu layout check`).

use super::{Layout, Scheme};
use crate::memory::SparseMemory;
use crate::output::{check_entry, check_range, current_entry, EntryError, TopaEntry, Violation, MAX_INDEX};
use crate::regs::check::check_write;
use crate::regs::{Errata, GpFault, MaskPtrs, Msr, OutputBase, RegisterFile};
use crate::rules::Rule;
use std::collections::{BTreeMap, BTreeSet};

/// What `layout check` found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// WRMSRs that would #GP when the layout is programmed.
    pub faults: Vec<GpFault>,
    /// Operational errors: in the output MSRs, or in entries (raised when the walk reaches them).
    pub violations: Vec<Violation>,
    /// Not errors, but likely mistakes (output over a table, a walk into unlisted memory, errata).
    pub warnings: Vec<String>,
    /// The walk from the starting entry, as (table, index) pairs, END entries included.
    pub walk: Vec<(u64, u32)>,
}

impl CheckReport {
    /// No #GP and no operational error.
    pub fn is_ok(&self) -> bool {
        self.faults.is_empty() && self.violations.is_empty()
    }
}

/// Validates `layout`: the WRMSRs that program it, every listed entry, and the walk from the
/// starting entry as the output unit would make it.
pub fn check(layout: &Layout) -> CheckReport {
    let mut report = CheckReport::default();
    let cpu = &layout.cpu;
    let regs = RegisterFile::default();
    for (msr, value) in [
        (Msr::OutputBase, layout.base),
        (Msr::OutputMaskPtrs, layout.mask_ptrs),
        (Msr::Ctl, layout.enable_ctl().bits()),
    ] {
        if let Err(f) = check_write(cpu, &regs, msr, value) {
            report.faults.push(f);
        }
    }
    let ptrs = MaskPtrs::from(layout.mask_ptrs | MaskPtrs::LOWER_MASK);
    match layout.scheme {
        Scheme::SingleRange => match check_range(OutputBase::from(layout.base), ptrs) {
            Ok(r) if cpu.has(Errata::TGL052) && r.mask >= 0x1000 => report.warnings.push(format!(
                "[{}] the range is {:#x} bytes: with this erratum output past 4 KiB aliases into the first 4 KiB",
                Rule::TGL052,
                r.mask + 1
            )),
            Ok(_) => {}
            Err(v) => report.violations.push(v),
        },
        Scheme::Topa => check_topa(layout, ptrs, &mut report),
    }
    report
}

fn check_topa(layout: &Layout, ptrs: MaskPtrs, report: &mut CheckReport) {
    let cpu = &layout.cpu;
    let entries = layout.entries();
    let mut found: BTreeSet<(u64, u32, Rule)> = BTreeSet::new();
    for t in &layout.tables {
        for (i, e) in t.entries.iter().enumerate() {
            let index = t.first_index + i as u32;
            if let Err(v) = check_entry(cpu, t.base, index, TopaEntry::from(e.raw)) {
                found.insert((t.base, index, v.rule));
                let message = format!("{} (line {})", v.message, e.line);
                report.violations.push(Violation { message, ..v });
            }
        }
    }
    if layout.base & 0xfff != 0 {
        let msg = format!("OUTPUT_BASE {:#x} is not 4 KiB aligned", layout.base);
        report.violations.push(Violation::in_msrs(Rule::T3, msg));
        return;
    }
    // The walk, with the unit's own step (`current_entry`) over the tables placed in memory: at
    // most one visit per entry, plus the way out.
    let mut mem = SparseMemory::new();
    if layout.place_tables(&mut mem).is_err() {
        return; // parse refuses tables past the top of the address space
    }
    let unlisted = |report: &mut CheckReport, table: u64, index: u32| {
        if !entries.contains_key(&(table + 8 * u64::from(index))) {
            report.warnings.push(format!(
                "the walk reaches table {table:#x} entry {index}, which the layout does not list (memory reads as 0 there: a 4K region at 0x0)"
            ));
            return true;
        }
        false
    };
    let (mut table, mut index) = (layout.base, ptrs.mask_or_table_offset());
    let mut offset = u64::from(ptrs.output_offset());
    let mut visited = BTreeSet::new();
    let mut regions: BTreeMap<u64, u64> = BTreeMap::new();
    while visited.insert((table, index)) {
        report.walk.push((table, index));
        let mut off_the_list = unlisted(report, table, index);
        let c = match current_entry(cpu, &mem, table, index) {
            Ok(c) => c,
            Err(EntryError::Rule(v)) => {
                if !found.contains(&(v.table.unwrap_or(0), v.index.unwrap_or(0), v.rule)) {
                    report.violations.push(v);
                }
                break;
            }
            Err(EntryError::Mem(e)) => {
                report.warnings.push(e.to_string());
                break;
            }
        };
        if c.hopped {
            if !visited.insert((c.table, 0)) {
                break;
            }
            report.walk.push((c.table, 0));
            off_the_list = unlisted(report, c.table, 0);
            offset = 0;
        }
        let size = c.entry.region_size();
        if offset >= size {
            let msg = format!("OutputOffset {offset:#x} is not below the region size {size:#x}");
            report.violations.push(Violation::at_entry(
                Rule::E1c,
                c.table,
                c.index,
                c.entry.bits(),
                msg,
            ));
            break;
        }
        offset = 0;
        regions.insert(c.entry.base(), size);
        if c.entry.stop() || off_the_list {
            break; // STOP ends the walk; past unlisted memory every entry is a 4K region at 0
        }
        (table, index) = (c.table, if c.index == MAX_INDEX { 0 } else { c.index + 1 });
    }
    for (&pa, _) in entries.iter() {
        if let Some((&base, &size)) = regions.range(..=pa).next_back() {
            if pa < base + size {
                report.warnings.push(format!(
                    "ToPA entry at {pa:#x} lies inside output region {base:#x}+{size:#x}: trace output will overwrite it"
                ));
            }
        }
    }
}
