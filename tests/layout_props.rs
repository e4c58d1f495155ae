//! Layout files under random input: the parser never panics, and `layout check` agrees with the
//! output unit (a layout the check passes never raises an operational error when traced; a layout
//! whose starting entry the check rejects fails at enable with the same rule).

use proptest::prelude::*;
use ptemu::layout::{self, Layout};
use ptemu::output::TopaEntry;
use ptemu::{EventKind, OutputUnit, SparseMemory};
use std::path::Path;

fn entry_toml() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..16, 0u8..3, any::<bool>(), prop::bool::weighted(0.1)).prop_map(|(slot, code, int, stop)| {
            let size = ["4K", "8K", "16K"][code as usize];
            format!("{{ region = {:#x}, size = \"{size}\", int = {int}, stop = {stop} }}", 0x10_0000 + slot * 0x4000)
        }),
        2 => prop::sample::select(vec![0x1000u64, 0x2000]).prop_map(|t| format!("{{ end = {t:#x} }}")),
        1 => any::<u64>().prop_map(|v| format!("{{ raw = \"{v:#x}\" }}")),
        1 => (0u64..16, 0u8..16).prop_map(|(slot, c)| format!("{{ raw = {} }}", TopaEntry::region(0x10_0000 + slot * 0x1000, c).bits())),
    ]
}

fn layout_toml() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["skylake", "broadwell", "generic-max", "goldmont"]),
        prop::collection::vec(entry_toml(), 1..5),
        prop::collection::vec(entry_toml(), 1..5),
        0u64..4,
        prop_oneof![3 => Just(0u64), 1 => 0u64..0x5000],
    )
        .prop_map(|(cpu, a, b, index, offset)| {
            format!(
                "cpu = \"{cpu}\"\n[output]\nscheme = \"topa\"\nbase = 0x1000\nmask_ptrs = {:#x}\n\
                 [[table]]\nbase = 0x1000\nentries = [\n  {}\n]\n[[table]]\nbase = 0x2000\nentries = [\n  {}\n]\n",
                0x7f | index << 7 | offset << 32,
                a.join(",\n  "),
                b.join(",\n  ")
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_arbitrary_text(s in "\\PC{0,300}") {
        let _ = Layout::parse(Path::new("fuzz.toml"), &s);
    }

    #[test]
    fn parser_never_panics_on_layout_shaped_text(s in "(cpu|\\[output\\]|\\[\\[table\\]\\]|scheme|base|entries|region|size|end|raw|first_index|mask_ptrs| |=|\"|\\{|\\}|\\[|\\]|,|\n|0x[0-9a-f]{1,17}|-?[0-9]{1,20}|4K|topa|single-range){0,60}") {
        let _ = Layout::parse(Path::new("fuzz.toml"), &s);
    }

    /// E2, T9: the static check and the unit agree on what an enable and a walk will meet.
    #[test]
    fn e2_t9_layout_check_agrees_with_the_unit(src in layout_toml()) {
        let layout = Layout::parse(Path::new("p.toml"), &src).unwrap();
        let report = layout::check(&layout);
        let mut mem = SparseMemory::new();
        let mut unit = OutputUnit::new(layout.cpu.clone());
        if layout.apply(&mut unit, &mut mem).is_err() {
            prop_assert!(!report.faults.is_empty(), "a #GP the check missed");
            return Ok(());
        }
        prop_assert!(report.faults.is_empty());
        unit.write(&mut mem, &vec![0u8; 256 << 10]).unwrap();
        let errors: Vec<_> = unit.events().iter().filter(|e| e.kind == EventKind::Error).collect();
        if report.is_ok() {
            prop_assert!(errors.is_empty(), "check passed but tracing raised {:?}", errors);
        }
        if let Some(e) = errors.first() {
            let rule = e.rule.unwrap();
            prop_assert!(report.violations.iter().any(|v| v.rule == rule), "unit raised {} the check did not report: {:?}", rule, report.violations);
        }
    }
}
