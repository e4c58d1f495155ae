//! `ptemu layout check` and `ptemu layout draw`.

use super::output::{print, write_output};
use super::Failure;
use ptemu::layout::{self, CheckReport, Layout, Route, Scheme, WalkEnd};
use ptemu::output::{check_range, TopaEntry, MAX_INDEX};
use ptemu::picture::size_text;
use ptemu::regs::{MaskPtrs, OutputBase};
use std::path::Path;

pub fn check(path: &Path) -> Result<(), Failure> {
    let layout = Layout::load(path).map_err(|e| Failure::input(e.to_string()))?;
    let report = layout::check(&layout);
    let name = path.display();
    let mut text = String::new();
    let o = &mut text;
    for f in &report.faults {
        outln!(o, "{name}: {f}");
    }
    for v in &report.violations {
        outln!(o, "{name}: operational error when reached: {v}");
    }
    for w in &report.warnings {
        outln!(o, "{name}: warning: {w}");
    }
    if report.is_ok() {
        outln!(o, "{name}: ok ({} output, cpu {})", layout.scheme, layout.cpu);
    }
    text.push_str(&describe(&layout, &report));
    if report.is_ok() {
        print(&text)
    } else {
        print(&text)?;
        Err(Failure::found(format!(
            "{name}: {} #GP fault(s), {} operational error(s)",
            report.faults.len(),
            report.violations.len()
        )))
    }
}

/// Writes the SVG of the layout at `path` (with what `layout check` finds marked) to `output`.
/// A layout with #GP faults or operational errors is drawn too: the picture shows them.
pub fn draw(path: &Path, output: &Path) -> Result<(), Failure> {
    let layout = Layout::load(path).map_err(|e| Failure::input(e.to_string()))?;
    let report = layout::check(&layout);
    let svg = ptemu::picture::layout_svg(&layout, &report);
    write_output(output, |w| w.write_all(svg.as_bytes()))
}

/// The walk, in words: each step with its region (size, INT, STOP) or END, then how it ends (the
/// bytes before a STOP or an error, or per lap of a circular buffer) and where the PMIs fire; for
/// single range, the range (spec/output.md, policy "layout check describes the walk").
pub fn describe(layout: &Layout, report: &CheckReport) -> String {
    let mut text = String::new();
    let o = &mut text;
    match layout.scheme {
        Scheme::SingleRange => describe_range(o, layout, report),
        Scheme::Topa => {
            if let Some(route) = &report.route {
                describe_topa(o, layout, &report.walk, route);
            }
        }
    }
    text
}

/// Walk steps listed in full up to this many; longer walks show the first and last ones.
const LISTED_STEPS: usize = 24;
/// PMI positions listed up to this many.
const LISTED_PMIS: usize = 8;

fn bytes_text(n: u64) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} ({n} bytes)", size_text(n))
    } else {
        format!("{n} bytes")
    }
}

fn describe_topa(o: &mut String, layout: &Layout, walk: &[(u64, u32)], route: &Route) {
    let entries = layout.entries();
    let ptrs = layout.mask_ptrs;
    outln!(
        o,
        "  start: table {:#x} entry {:#x}, offset {:#x}",
        layout.base,
        (ptrs >> 7) & 0x1ff_ffff,
        ptrs >> 32
    );
    let steps = if walk.len() == 1 { "step" } else { "steps" };
    outln!(o, "  walk ({} {steps}):", walk.len());
    let shown = |k: usize| walk.len() <= LISTED_STEPS || k < LISTED_STEPS - 4 || k >= walk.len() - 4;
    for (k, &(t, i)) in walk.iter().enumerate() {
        if !shown(k) {
            if shown(k - 1) {
                outln!(o, "    ... {} more steps", walk.len() - LISTED_STEPS);
            }
            continue;
        }
        let raw = entries.get(&(t + 8 * u64::from(i))).copied();
        let e = TopaEntry::from(raw.unwrap_or(0));
        let what = if e.end() {
            format!("END -> table {:#x}", e.base())
        } else {
            let flags = [(e.int(), " INT"), (e.stop(), " STOP")]
                .iter()
                .filter(|f| f.0)
                .map(|f| f.1)
                .collect::<String>();
            format!("region {:#x} {}{flags}", e.base(), size_text(e.region_size()))
        };
        let unlisted = if raw.is_none() {
            "  (unlisted: reads as 0)"
        } else {
            ""
        };
        // The W5 wrap: from entry 2^25-1, or from the end of a run of unlisted entries reaching it.
        let wrapped = k > 0 && i == 0 && {
            let (pt, pi) = walk[k - 1];
            let skipped = route.steps.get(k - 1).map_or(0, |s| s.1);
            pt == t && (pi == MAX_INDEX || (skipped > 0 && pi + skipped == MAX_INDEX))
        };
        let wrap = if wrapped { "  (after the wrap, W5)" } else { "" };
        let skipped = route.steps.get(k).map_or(0, |s| s.1);
        let more = if skipped > 0 {
            format!(", then {skipped} more unlisted entries like it")
        } else {
            String::new()
        };
        let at = format!("{t:#x}[{i:#x}]");
        outln!(o, "    #{:<3} {at:<20} {what}{unlisted}{more}{wrap}", k + 1);
    }
    let step = |k: usize| format!("#{}", k + 1);
    match route.end {
        WalkEnd::Stop => outln!(
            o,
            "  stops: output stops when {} is full, after {} from the start offset (S1); later bytes are lost",
            step(walk.len() - 1),
            bytes_text(route.first_pass)
        ),
        WalkEnd::Error => {
            let at = match walk.len().checked_sub(1) {
                None => "the start (the output MSRs)".to_string(),
                Some(k) => {
                    let (t, i) = walk[k];
                    let e = TopaEntry::from(entries.get(&(t + 8 * u64::from(i))).copied().unwrap_or(0));
                    if e.end() {
                        format!("{} (the entry its END leads to)", step(k))
                    } else {
                        step(k)
                    }
                }
            };
            outln!(
                o,
                "  ends at {at} after {} from the start offset: the entry there is an operational error (E3) or cannot be read; later bytes are lost",
                bytes_text(route.first_pass)
            )
        }
        WalkEnd::Circular { to } => {
            let lap = route.lap.unwrap_or(0);
            let overlap = if route.distinct < route.region_bytes {
                format!(
                    "; the regions overlap, so they hold at most {} of the stream",
                    bytes_text(route.distinct)
                )
            } else {
                String::new()
            };
            outln!(
                o,
                "  circular: after {} the walk returns to {}; each lap writes {}, the first pass from the start offset {}; then output overwrites the oldest bytes (O5){overlap}",
                step(walk.len() - 1),
                step(to),
                bytes_text(lap),
                bytes_text(route.first_pass)
            );
        }
    }
    let list = |pmis: &[ptemu::layout::PmiAt]| {
        let mut items: Vec<String> = pmis
            .iter()
            .take(LISTED_PMIS)
            .map(|p| format!("{} ({}, {})", p.at, step(p.step), p.rule))
            .collect();
        if pmis.len() > LISTED_PMIS {
            items.push(format!("... {} more", pmis.len() - LISTED_PMIS));
        }
        items.join(", ")
    };
    let first = if route.pmis.is_empty() {
        "none".to_string()
    } else {
        format!("{}, at bytes {}", route.pmis.len(), list(&route.pmis))
    };
    match (&route.lap, route.lap_pmis == route.pmis) {
        (Some(_), true) if !route.pmis.is_empty() => {
            let n = route.pmis.len();
            outln!(
                o,
                "  PMIs: {n} per lap, at bytes {} into each lap",
                list(&route.pmis)
            )
        }
        (Some(_), _) => {
            outln!(o, "  PMIs in the first pass: {first}");
            let lap = if route.lap_pmis.is_empty() {
                "none".to_string()
            } else {
                format!(
                    "{}, at bytes {} into the lap",
                    route.lap_pmis.len(),
                    list(&route.lap_pmis)
                )
            };
            outln!(o, "  PMIs in each later lap: {lap}");
        }
        (None, _) => outln!(o, "  PMIs: {first}"),
    }
}

fn describe_range(o: &mut String, layout: &Layout, report: &CheckReport) {
    if !report.faults.is_empty() {
        // The register write that would set the range up faults (M2): there is no range.
        outln!(
            o,
            "  range: none: the #GP above refuses the write, so tracing never starts and nothing is written"
        );
        return;
    }
    let ptrs = MaskPtrs::from(layout.mask_ptrs | MaskPtrs::LOWER_MASK);
    let Ok(r) = check_range(OutputBase::from(layout.base), ptrs) else {
        return;
    };
    let size = r.mask + 1;
    outln!(
        o,
        "  range: base {:#x}, size {}, mask {:#x}, output starts at offset {:#x}",
        r.base,
        bytes_text(size),
        r.mask,
        r.offset
    );
    outln!(
        o,
        "  circular: output wraps to the base when the range is full (R3), after {} from the start offset, then every {}; single-range output raises no ToPA PMIs",
        bytes_text(size - r.offset),
        bytes_text(size)
    );
    if layout.cpu.has(ptemu::regs::Errata::TGL052) && size > 0x1000 {
        outln!(
            o,
            "  with the TGL052 erratum every byte lands in the first 4K of the range (base + offset mod 4K): it holds at most 4096 bytes of the stream"
        );
    }
}

/// `ptemu layout default [--cpu P]`: the layout `simulate` uses without `--layout` (SIM2), on
/// CPU P when given: the four-region ring, or one region where P's ToPA takes only one (T8),
/// with P as its `cpu`.
pub fn default(cpu: Option<&str>) -> Result<(), Failure> {
    let Some(name) = cpu else {
        return print(ptemu::simulate::DEFAULT_LAYOUT);
    };
    let profile = ptemu::CpuProfile::named(name).map_err(|e| Failure::input(format!("--cpu: {e}")))?;
    let text: String = ptemu::simulate::default_layout_text(&profile)
        .lines()
        .map(|l| {
            if l.starts_with("cpu = ") {
                format!("cpu = \"{name}\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    print(&text)
}
