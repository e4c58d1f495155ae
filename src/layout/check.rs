//! Static validation of a layout against its CPU profile (`ptemu layout check`).

use super::{Layout, Scheme};
use crate::output::{check_entry, check_range, TopaEntry, Violation, MAX_INDEX};
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
    // The walk, as the unit makes it: at most one visit per listed entry, plus the way out.
    let (mut table, mut index) = (layout.base, ptrs.mask_or_table_offset());
    let mut offset = u64::from(ptrs.output_offset());
    let mut visited = BTreeSet::new();
    let mut regions: BTreeMap<u64, u64> = BTreeMap::new();
    loop {
        if !visited.insert((table, index)) {
            break; // circular: the walk goes round for ever, which is fine
        }
        report.walk.push((table, index));
        let pa = table + 8 * u64::from(index);
        let listed = entries.get(&pa).copied();
        if listed.is_none() {
            report.warnings.push(format!(
                "the walk reaches table {table:#x} entry {index}, which the layout does not list (memory reads as 0 there: a 4K region at 0x0)"
            ));
        }
        let raw = listed.unwrap_or(0);
        let e = TopaEntry::from(raw);
        if let Err(v) = check_entry(cpu, table, index, e) {
            if !found.contains(&(table, index, v.rule)) {
                report.violations.push(v);
            }
            break;
        }
        if e.end() {
            (table, index, offset) = (e.base(), 0, 0);
            continue;
        }
        if offset >= e.region_size() {
            let msg = format!(
                "OutputOffset {offset:#x} is not below the region size {:#x}",
                e.region_size()
            );
            report
                .violations
                .push(Violation::at_entry(Rule::E1c, table, index, raw, msg));
            break;
        }
        offset = 0;
        regions.insert(e.base(), e.region_size());
        if e.stop() || listed.is_none() {
            break; // STOP ends the walk; past unlisted memory every entry is a 4K region at 0
        }
        index = if index == MAX_INDEX { 0 } else { index + 1 };
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
