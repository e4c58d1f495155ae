//! What the walk `layout check` found holds: the bytes before a STOP or an operational error, the
//! bytes per lap of a circular buffer, and the byte positions where ToPA PMIs fire
//! (spec/output.md, policy "layout check describes the walk").

use super::Layout;
use crate::output::{TopaEntry, MAX_INDEX};
use crate::regs::CpuProfile;
use crate::rules::Rule;
use std::collections::BTreeMap;

/// How the walk from the starting entry ends: a walk has no other way to end, so the enum is
/// exhaustive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// The last step is a STOP region: output stops when it is full (S1).
    Stop,
    /// The last step cannot become current (an operational error, E3, or unreadable memory):
    /// output stops there.
    Error,
    /// After the last step the walk returns to step `to` (0-based): a circular buffer (O5).
    Circular {
        /// The step the walk returns to.
        to: usize,
    },
}

/// A ToPA PMI the walk raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmiAt {
    /// Stream bytes written when it fires.
    pub at: u64,
    /// The walk step (0-based) whose INT region raises it.
    pub step: usize,
    /// P1 (region full), P4 (early, single-entry ToPA) or S5 (with STOP).
    pub rule: Rule,
}

/// The bytes each part of the walk holds, and where its PMIs fire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// How the walk ends.
    pub end: WalkEnd,
    /// Per walk step: the bytes output writes there in the first pass (0 for END entries and an
    /// entry in error; the first region counts from the start offset), and the unlisted entries
    /// after it the walk passes through, each a 4K region at 0x0 (a run of zero entries on a
    /// multi-entry CPU).
    pub steps: Vec<(u64, u32)>,
    /// Bytes from the start offset to the STOP, the error, or the return to step `to`.
    pub first_pass: u64,
    /// Circular buffers: the bytes of each later lap (from step `to` round to it again).
    pub lap: Option<u64>,
    /// PMIs of the first pass, at stream offsets from the start.
    pub pmis: Vec<PmiAt>,
    /// Circular buffers: the PMIs of each later lap, at offsets from the lap's start.
    pub lap_pmis: Vec<PmiAt>,
    /// Bytes of memory the walk's regions cover (their union): less than the sum of their sizes
    /// when regions overlap, and then all output can hold.
    pub distinct: u64,
    /// The sum of the sizes of the regions the walk enters (each entry once).
    pub region_bytes: u64,
}

/// The route of `walk` (as `layout check` found it, ending as `end`) through `layout`'s tables.
pub fn route(layout: &Layout, walk: &[(u64, u32)], end: WalkEnd) -> Route {
    let cpu = &layout.cpu;
    let entries = layout.entries();
    let entry =
        |(t, i): (u64, u32)| TopaEntry::from(entries.get(&(t + 8 * u64::from(i))).copied().unwrap_or(0));
    let start_offset = (layout.mask_ptrs >> 32) & 0xffff_ffff;
    let mut steps = Vec::with_capacity(walk.len());
    for (k, &(t, i)) in walk.iter().enumerate() {
        let e = entry((t, i));
        let in_error = end == WalkEnd::Error && k + 1 == walk.len();
        if e.end() || in_error {
            steps.push((0, 0));
            continue;
        }
        let offset = if k == 0 { start_offset } else { 0 };
        let next = match end {
            _ if k + 1 < walk.len() => Some(walk[k + 1]),
            WalkEnd::Circular { to } => walk.get(to).copied(),
            _ => None,
        };
        let skipped = skipped_after(cpu, &entries, (t, i), next);
        steps.push((e.region_size().saturating_sub(offset), skipped));
    }
    let bytes = |s: &(u64, u32)| s.0 + 4096 * u64::from(s.1);
    let first_pass = steps.iter().map(bytes).sum();
    let mut pmis = Vec::new();
    let mut at = 0;
    for (k, s) in steps.iter().enumerate() {
        let e = entry(walk[k]);
        if s.0 > 0 {
            let offset = e.region_size() - s.0;
            pmis.extend(pmi(cpu, e, offset).map(|(rel, rule)| PmiAt {
                at: at + rel,
                step: k,
                rule,
            }));
        }
        at += bytes(s);
    }
    let (lap, lap_pmis) = match end {
        WalkEnd::Circular { to } => {
            let mut lap_pmis = Vec::new();
            let mut at = 0;
            for (k, s) in steps.iter().enumerate().skip(to) {
                let e = entry(walk[k]);
                if e.end() {
                    continue;
                }
                lap_pmis.extend(pmi(cpu, e, 0).map(|(rel, rule)| PmiAt {
                    at: at + rel,
                    step: k,
                    rule,
                }));
                at += e.region_size() + 4096 * u64::from(s.1);
            }
            (Some(at), lap_pmis)
        }
        _ => (None, Vec::new()),
    };
    // The memory the regions cover, each entry once (a run of unlisted entries: 4K at 0x0 each).
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut region_bytes = 0u64;
    for (k, s) in steps.iter().enumerate() {
        let e = entry(walk[k]);
        if s.0 > 0 {
            spans.push((e.base(), e.base().saturating_add(e.region_size())));
            region_bytes += e.region_size();
        }
        if s.1 > 0 {
            spans.push((0, 4096));
            region_bytes += 4096 * u64::from(s.1);
        }
    }
    spans.sort_unstable();
    let mut distinct = 0u64;
    let mut reach = 0u64;
    for (a, b) in spans {
        let a = a.max(reach);
        if b > a {
            distinct += b - a;
            reach = b;
        }
    }
    Route {
        end,
        steps,
        first_pass,
        lap,
        pmis,
        lap_pmis,
        distinct,
        region_bytes,
    }
}

/// Unlisted entries the walk passes through after the unlisted `step` of a multi-entry CPU before
/// `next` (the next listed entry, or entry 0 after the wrap at 2^25-1, W5).
fn skipped_after(
    cpu: &CpuProfile,
    entries: &BTreeMap<u64, u64>,
    step: (u64, u32),
    next: Option<(u64, u32)>,
) -> u32 {
    let (t, i) = step;
    if cpu.single_entry_topa() || entries.contains_key(&(t + 8 * u64::from(i))) {
        return 0;
    }
    match next {
        Some((nt, j)) if nt == t && j > i => j - i - 1,
        Some((nt, 0)) if nt == t => MAX_INDEX - i,
        _ => 0,
    }
}

/// The PMI of region `e` entered at `offset`, as (bytes written into it when it fires, rule):
/// early by the profile's margin on single-entry ToPA (P4), when full otherwise (P1, or S5 with
/// STOP); none without INT.
fn pmi(cpu: &CpuProfile, e: TopaEntry, offset: u64) -> Option<(u64, Rule)> {
    if !e.int() {
        return None;
    }
    let size = e.region_size();
    let margin = u64::from(cpu.early_pmi_margin);
    if cpu.single_entry_topa() && margin > 0 && offset < size {
        let limit = size.saturating_sub(margin).max(offset + 1).min(size);
        if limit < size {
            return Some((limit - offset, Rule::P4));
        }
    }
    Some((size - offset, if e.stop() { Rule::S5 } else { Rule::P1 }))
}
