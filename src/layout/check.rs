//! Static validation of a layout against its CPU profile (`ptemu layout check`).

use super::route::{route, Route, WalkEnd};
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
    /// ToPA: how the walk ends, the bytes it holds, where PMIs fire.
    pub route: Option<Route>,
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
                report.violations.push(v.with_message(message));
            }
        }
    }
    if layout.base & 0xfff != 0 {
        let msg = format!("OUTPUT_BASE {:#x} is not 4 KiB aligned", layout.base);
        report.violations.push(Violation::in_msrs(Rule::T3, msg));
        report.route = Some(route(layout, &[], WalkEnd::Error));
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
    let mut end = None;
    // The walk goes on through unlisted memory too (it reads as 0 there: a 4K region at 0x0), as
    // the unit's does, so an error past it is found (T8 at an unlisted entry 1, say).
    while visited.insert((table, index)) {
        report.walk.push((table, index));
        let listed = !unlisted(report, table, index);
        let c = match current_entry(cpu, &mem, table, index) {
            Ok(c) => c,
            Err(EntryError::Rule(v)) => {
                if !found.contains(&(v.table.unwrap_or(0), v.index.unwrap_or(0), v.rule)) {
                    report.violations.push(v);
                }
                end = Some(WalkEnd::Error);
                break;
            }
            Err(EntryError::Mem(e)) => {
                report.warnings.push(e.to_string());
                end = Some(WalkEnd::Error);
                break;
            }
        };
        let mut current_listed = listed;
        if c.hopped {
            if !visited.insert((c.table, 0)) {
                (table, index) = (c.table, 0);
                break;
            }
            report.walk.push((c.table, 0));
            current_listed = !unlisted(report, c.table, 0);
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
            end = Some(WalkEnd::Error);
            break;
        }
        offset = 0;
        let kept = regions.entry(c.entry.base()).or_insert(size);
        *kept = (*kept).max(size);
        if c.entry.stop() {
            end = Some(WalkEnd::Stop); // STOP ends the walk
            break;
        }
        let next = if c.index == MAX_INDEX { 0 } else { c.index + 1 };
        index = if current_listed || cpu.single_entry_topa() {
            next
        } else {
            // Unlisted entries of one table all read as the same zero entry, which was just
            // taken: on a multi-entry CPU the walk meets nothing new before the next listed
            // entry, or the wrap to entry 0 (W5).
            next_listed(&entries, c.table, c.index).unwrap_or(0)
        };
        table = c.table;
    }
    // Otherwise the walk came back to (table, index), an entry it had taken.
    let end = end.unwrap_or_else(|| WalkEnd::Circular {
        to: report.walk.iter().position(|&s| s == (table, index)).unwrap_or(0),
    });
    let r = route(layout, &report.walk, end);
    if r.region_bytes > r.distinct {
        report.warnings.push(format!(
            "regions of the walk overlap: {} bytes of regions cover {} bytes of memory, so the buffer holds at most {} distinct bytes of the stream",
            r.region_bytes, r.distinct, r.distinct
        ));
    }
    report.route = Some(r);
    // Output overwrites a table entry that lies inside any region the walk writes (regions merged
    // into disjoint spans first, so a large region below a small one is not missed).
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (&base, &size) in &regions {
        let end = base.saturating_add(size);
        match spans.last_mut() {
            Some(last) if base <= last.1 => last.1 = last.1.max(end),
            _ => spans.push((base, end)),
        }
    }
    for (&pa, _) in entries.iter() {
        let k = spans.partition_point(|&(base, _)| base <= pa);
        if k > 0 && pa < spans[k - 1].1 {
            let (base, end) = spans[k - 1];
            report.warnings.push(format!(
                "ToPA entry at {pa:#x} lies inside output span {base:#x}..{end:#x}: trace output will overwrite it"
            ));
        }
    }
}

/// The index of the first listed entry of `table` after `index`, if any.
fn next_listed(entries: &BTreeMap<u64, u64>, table: u64, index: u32) -> Option<u32> {
    let from = table + 8 * (u64::from(index) + 1);
    let to = table + 8 * (u64::from(MAX_INDEX) + 1);
    entries
        .range(from..to)
        .map(|(&pa, _)| pa - table)
        .find(|off| off % 8 == 0)
        .map(|off| (off / 8) as u32)
}

/// What [`recheck`] found that [`check`] missed, in words.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
#[non_exhaustive]
pub struct CheckMissed(pub String);

/// The property `layout check` keeps, for fuzzing: programs `layout` and writes 256 KiB through
/// the output unit as `ptemu write` does, and fails naming what the write met that [`check`] did
/// not report (a #GP, or an operational error at its entry and rule). Only when the check warns
/// that output overwrites a table may the write meet more.
#[doc(hidden)]
pub fn recheck(layout: &Layout) -> Result<(), CheckMissed> {
    let report = check(layout);
    let mut mem = SparseMemory::new();
    let mut unit = crate::OutputUnit::new(layout.cpu.clone());
    if let Err(e) = layout.apply(&mut unit, &mut mem) {
        if report.faults.is_empty() {
            return Err(CheckMissed(format!(
                "programming it failed ({e}), the check found no #GP"
            )));
        }
        return Ok(());
    }
    if !report.faults.is_empty() {
        return Err(CheckMissed(format!(
            "the check found {:?}, programming it succeeded",
            report.faults
        )));
    }
    unit.write(&mut mem, &vec![0u8; 256 << 10])
        .map_err(|e| CheckMissed(e.to_string()))?;
    if report.warnings.iter().any(|w| w.contains("will overwrite it")) {
        return Ok(());
    }
    for e in unit
        .events()
        .iter()
        .filter(|e| e.kind == crate::output::EventKind::Error)
    {
        let met = report
            .violations
            .iter()
            .any(|v| (v.table, v.index, Some(v.rule)) == (e.table, e.index, e.rule));
        if !met {
            return Err(CheckMissed(format!(
                "write met {e:?}; the check reported {:?}",
                report.violations
            )));
        }
    }
    Ok(())
}
