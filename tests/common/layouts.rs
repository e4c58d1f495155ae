//! Generated layout files for the property tests (`layout_props.rs`, `picture.rs`).

use proptest::prelude::*;
use ptemu::output::TopaEntry;

/// One ToPA entry as TOML: a region, an END, or raw bits.
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

/// A two-table ToPA layout file: random entries (regions, END, raw values), a start that may
/// lie past the listed entries or in an unlisted table.
pub fn layout_toml() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["skylake", "broadwell", "generic-max", "goldmont"]),
        prop::collection::vec(entry_toml(), 1..5),
        prop::collection::vec(entry_toml(), 1..5),
        0u64..4,
        prop_oneof![3 => Just(0u64), 1 => 0u64..0x5000],
        // The walk may start in a table the layout does not list (0x3000), and listed entries may
        // start past entry 0, so it runs through unlisted memory too.
        prop_oneof![4 => Just(0x1000u64), 1 => Just(0x2000u64), 1 => Just(0x3000u64)],
        (
            prop_oneof![3 => Just(0u32), 1 => 1u32..3],
            prop_oneof![3 => Just(0u32), 1 => 1u32..3],
        ),
    )
        .prop_map(|(cpu, a, b, index, offset, base, (first_a, first_b))| {
            format!(
                "cpu = \"{cpu}\"\n[output]\nscheme = \"topa\"\nbase = {base:#x}\nmask_ptrs = {:#x}\n\
                 [[table]]\nbase = 0x1000\nfirst_index = {first_a}\nentries = [\n  {}\n]\n\
                 [[table]]\nbase = 0x2000\nfirst_index = {first_b}\nentries = [\n  {}\n]\n",
                0x7f | index << 7 | offset << 32,
                a.join(",\n  "),
                b.join(",\n  ")
            )
        })
}
