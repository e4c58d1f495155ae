//! Layout files under random input: the parser never panics, and `layout check` agrees with the
//! output unit (a layout the check passes never raises an operational error when traced; a layout
//! whose starting entry the check rejects fails at enable with the same rule).

mod common;

use common::layouts::layout_toml;
use proptest::prelude::*;
use ptemu::layout::{self, Layout, WalkEnd};
use ptemu::{EventKind, OutputUnit, SparseMemory};
use std::path::Path;

/// An operational error where it was met: table, index, rule ID.
type Met = (Option<u64>, Option<u32>, String);

/// Writes 256 KiB through `layout` as `ptemu write` does: the #GP of programming it, or the
/// operational errors the walk met, as (table, index, rule).
fn write_errors(layout: &Layout) -> Result<Vec<Met>, String> {
    let mut mem = SparseMemory::new();
    let mut unit = OutputUnit::new(layout.cpu.clone());
    layout.apply(&mut unit, &mut mem).map_err(|e| e.to_string())?;
    unit.write(&mut mem, &vec![0u8; 256 << 10]).unwrap();
    Ok(unit
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .map(|e| (e.table, e.index, e.rule.unwrap().id().to_string()))
        .collect())
}

/// What the check reported, as (table, index, rule).
fn check_errors(report: &layout::CheckReport) -> Vec<Met> {
    report
        .violations
        .iter()
        .map(|v| (v.table, v.index, v.rule.id().to_string()))
        .collect()
}

/// T8: on a single-entry CPU a walk that starts in unlisted memory (a zero entry 0 is a 4K region
/// at 0x0) goes on to entry 1, zero too, which is not the END back to the table: `write` meets
/// that error, so the check reports it (it used to stop at the first unlisted entry and say ok).
#[test]
fn t8_the_check_walks_on_through_unlisted_memory_as_write_does() {
    let src = "cpu = \"broadwell\"\n[output]\nscheme = \"topa\"\nbase = 0x3000\n[[table]]\nbase = 0x1000\n\
               entries = [ { region = 0x100000, size = \"4K\" }, { end = 0x1000 } ]\n";
    let layout = Layout::parse(Path::new("t8.toml"), src).unwrap();
    let report = layout::check(&layout);
    let written = write_errors(&layout).unwrap();
    assert_eq!(written, [(Some(0x3000), Some(1), "T8".to_string())]);
    assert!(!report.is_ok());
    assert_eq!(check_errors(&report), written);
}

/// W1: output lands anywhere in a region, so a table under a 128M region at 0 is overwritten even
/// when a smaller region lies between them (only the nearest region below was compared).
#[test]
fn w1_a_table_under_a_large_region_behind_a_smaller_one_is_warned_of() {
    let src = "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\n\
               entries = [ { region = 0, size = \"128M\" }, { region = 0x8000, size = \"4K\" }, { end = 0x10000 } ]\n";
    let report = layout::check(&Layout::parse(Path::new("w1.toml"), src).unwrap());
    let overwrites = report
        .warnings
        .iter()
        .filter(|w| w.contains("will overwrite it"))
        .count();
    assert_eq!(overwrites, 3, "{:?}", report.warnings);
}

/// What the route of `layout check` says the unit does in the first `total` bytes: PMIs, and the
/// STOP or the error that ends output, as (stream offset, event kind, rule), sorted.
fn predicted_events(route: &layout::Route, total: u64) -> Vec<(u64, String, String)> {
    let mut out: Vec<(u64, String, String)> = route
        .pmis
        .iter()
        .map(|p| (p.at, "Pmi".to_string(), p.rule.id().to_string()))
        .collect();
    match route.end {
        WalkEnd::Stop => out.push((route.first_pass, "Stopped".into(), "S1".into())),
        WalkEnd::Error => out.push((route.first_pass, "Error".into(), String::new())),
        WalkEnd::Circular { .. } => {
            let lap = route.lap.unwrap();
            let mut start = route.first_pass;
            while lap > 0 && start < total {
                out.extend(
                    route
                        .lap_pmis
                        .iter()
                        .map(|p| (start + p.at, "Pmi".to_string(), p.rule.id().to_string())),
                );
                start += lap;
            }
        }
    }
    out.retain(|e| e.0 <= total);
    out.sort();
    out
}

/// The unit's PMI, Stopped and Error events after `total` bytes through `layout` (the error's rule
/// left out: the check names it, `e2_t8_t9_...` compares it).
fn unit_events(layout: &Layout, total: u64) -> Vec<(u64, String, String)> {
    let mut mem = SparseMemory::new();
    let mut unit = OutputUnit::new(layout.cpu.clone());
    layout.apply(&mut unit, &mut mem).unwrap();
    unit.write(&mut mem, &vec![0u8; total as usize]).unwrap();
    let mut out: Vec<_> = unit
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Pmi | EventKind::Stopped | EventKind::Error))
        .map(|e| {
            let rule = match e.kind {
                EventKind::Error => String::new(),
                _ => e.rule.unwrap().id().to_string(),
            };
            (e.stream_offset, format!("{:?}", e.kind), rule)
        })
        .collect();
    out.sort();
    out
}

/// S1, E3, O5, P1, P4, S5: the walk `layout check` describes holds what the unit writes: output
/// stops (STOP) or fails (error) after exactly `first_pass` bytes, a circular walk goes on, and
/// every PMI fires where the route says, in the first pass and each later lap.
#[test]
fn s1_e3_o5_p1_p4_s5_the_described_route_is_what_the_unit_does_on_the_demo_and_default() {
    for src in [
        include_str!("../examples/demo-layout.toml"),
        include_str!("../src/simulate/default-layout.toml"),
    ] {
        let layout = Layout::parse(Path::new("l.toml"), src).unwrap();
        let route = layout::check(&layout).route.unwrap();
        let total = route.first_pass + 2 * route.lap.unwrap_or(0) + 100;
        let predicted = predicted_events(&route, total);
        assert!(predicted.len() >= 3);
        assert_eq!(unit_events(&layout, total), predicted);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_arbitrary_text(s in "\\PC{0,300}") {
        let _ = Layout::parse(Path::new("fuzz.toml"), &s);
    }

    #[test]
    fn parser_never_panics_on_layout_shaped_text(s in "(cpu|\\[output\\]|\\[\\[table\\]\\]|scheme|base|entries|region|size|end|raw|first_index|mask_ptrs| |=|\"|\\{|\\}|\\[|\\]|,|\n|0x[0-9a-f]{1,17}|-?[0-9]{1,20}|4K|topa|single-range){0,60}") {
        let _ = Layout::parse(Path::new("fuzz.toml"), &s);
    }

    /// E2, T8, T9: the static check finds everything `write` meets: every #GP of programming the
    /// layout, and every operational error of the walk at its entry and rule (unless the check
    /// warns that output overwrites a table, which makes the walk depend on the bytes written):
    /// `layout::recheck`, which the `layout` fuzz target runs too.
    #[test]
    fn e2_t8_t9_layout_check_finds_everything_write_meets(src in layout_toml()) {
        let layout = Layout::parse(Path::new("p.toml"), &src).unwrap();
        if let Err(missed) = layout::recheck(&layout) {
            prop_assert!(false, "{}", missed);
        }
    }

    /// S1, E3, O5, P1, P4, S5 on generated layouts (every profile the generator picks, starts in
    /// unlisted memory, runs of unlisted entries): the route `layout check` prints predicts the
    /// unit's PMIs, STOP and error, by stream offset, over the first pass and two laps (256 KiB at
    /// most). Layouts that #GP or whose output overwrites a table are left out.
    #[test]
    fn s1_e3_o5_p1_p4_s5_layout_check_route_predicts_the_units_events(src in layout_toml()) {
        let layout = Layout::parse(Path::new("p.toml"), &src).unwrap();
        let report = layout::check(&layout);
        prop_assume!(report.faults.is_empty());
        prop_assume!(!report.warnings.iter().any(|w| w.contains("will overwrite it")));
        let route = report.route.unwrap();
        let total = (route.first_pass + 2 * route.lap.unwrap_or(0) + 1).min(256 << 10);
        prop_assert_eq!(unit_events(&layout, total), predicted_events(&route, total));
    }
}

proptest! {
    // Only circular walks over disjoint regions qualify (about 2% of generated layouts): every one
    // of the 128 cases counted reaches the assertion; the others are rejected (20,000 at most).
    #![proptest_config(ProptestConfig { cases: 128, max_global_rejects: 20_000, ..ProptestConfig::default() })]

    /// O5 policy "Laps and overwrites" against the route: on a circular walk over disjoint regions
    /// (no two share a byte, no run of unlisted entries), output holds the first pass (plus the
    /// start offset's bytes when the walk comes back to its first region) as distinct bytes; every
    /// byte past that overwrites one, a lap counts at the first overwrite and then each time the
    /// walk enters the lap's first region again. The unit's counts after T bytes, for T around
    /// each of those points, are those.
    #[test]
    fn o5_laps_and_overwrites_follow_the_route_of_a_circular_walk(src in layout_toml(), cut in 0u64..3) {
        let layout = Layout::parse(Path::new("p.toml"), &src).unwrap();
        let report = layout::check(&layout);
        // Most generated layouts do not qualify (errors, warnings, a STOP): rejected, so that
        // every case counted reaches the assertion.
        prop_assume!(report.faults.is_empty() && report.warnings.is_empty());
        let route = report.route.unwrap();
        let to = match route.end {
            WalkEnd::Circular { to } => Some(to),
            _ => None,
        };
        prop_assume!(to.is_some());
        let to = to.expect("assumed");
        prop_assume!(route.distinct == route.region_bytes && route.steps.iter().all(|s| s.1 == 0));
        let lap = route.lap.unwrap();
        let start_offset = (layout.mask_ptrs >> 32) & 0xffff_ffff;
        let first_is_region = route.steps[0].0 > 0;
        let distinct = route.first_pass + if to == 0 && first_is_region { start_offset } else { 0 };
        for t in [distinct, distinct + 1, route.first_pass + lap, route.first_pass + lap + 1, route.first_pass + 2 * lap + cut] {
            let t = t.min(256 << 10);
            let mut mem = SparseMemory::new();
            let mut unit = OutputUnit::new(layout.cpu.clone());
            layout.apply(&mut unit, &mut mem).unwrap();
            unit.write(&mut mem, &vec![0u8; t as usize]).unwrap();
            let s = unit.stats();
            let laps = if t <= distinct {
                0
            } else {
                1 + (1..).take_while(|k| route.first_pass + k * lap < t).count() as u64
            };
            prop_assert_eq!((s.laps, s.bytes_overwritten), (laps, t.saturating_sub(distinct)), "after {} bytes", t);
        }
    }
}
