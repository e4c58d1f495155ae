//! Property tests: random ToPA layouts (valid and invalid), starting positions, write slicings and
//! TraceEn toggles, and random single ranges, each run through the fast writer and through a simple
//! byte-at-a-time reference model written here from pt-output.md §6.5 and §7. Memory, events, MSRs
//! and byte counts must agree exactly.

mod common;
#[path = "common/output_model.rs"]
#[allow(dead_code)]
mod output_model;

use output_model::{run_both, Op};

use proptest::prelude::*;
use ptemu::output::{TopaEntry, MAX_INDEX};
use ptemu::regs::{CpuProfile, Errata, RtitCtl};

use std::collections::BTreeMap;

// ---- generators -----------------------------------------------------------------------------

const TABLES: [u64; 3] = [0x1000, 0x2000, 0x3000];
const HIGH: u64 = MAX_INDEX as u64 - 3; // entries MAX-3..=MAX exist in table 0, to reach the wrap

#[derive(Debug, Clone)]
struct TopaCase {
    cpu: &'static str,
    entries: BTreeMap<u64, u64>,
    start_table: u64,
    start_index: u64,
    start_offset: u64,
    ops: Vec<Op>,
}

fn entry_value() -> impl Strategy<Value = u64> {
    let region =
        (0u64..24, 0u8..3, any::<bool>(), prop::bool::weighted(0.15)).prop_map(|(slot, code, int, stop)| {
            // Regions at 0x100000 + slot * 16K: 4K and 8K ones are always aligned, 16K ones too.
            TopaEntry::region(0x10_0000 + slot * 0x4000, code)
                .with_int(int)
                .with_stop(stop)
                .bits()
        });
    let end = prop::sample::select(TABLES.to_vec()).prop_map(|t| TopaEntry::end_to(t).bits());
    let bad = prop_oneof![
        (0u64..5).prop_map(|b| TopaEntry::region(0x10_0000, 0).bits()
            | [1 << 1, 1 << 3, 1 << 5, 1 << 10, 1 << 11][b as usize]),
        Just(TopaEntry::region(0x10_1000, 2).bits()), // T4: 16K region on a 4K boundary
        Just(TopaEntry::end_to(0x1000).with_int(true).bits()), // T5
        Just(TopaEntry::region(1 << 45, 0).bits()),   // T7 on MAXPHYADDR 39 profiles
    ];
    prop_oneof![6 => region, 2 => end, 1 => bad]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0usize..20_000).prop_map(Op::Write),
        1 => Just(Op::Toggle),
    ];
    prop::collection::vec(op, 1..12)
}

fn topa_case() -> impl Strategy<Value = TopaCase> {
    (
        prop::sample::select(vec!["generic-max", "skylake", "broadwell"]),
        prop::collection::vec(prop::collection::vec(entry_value(), 1..6), 3),
        prop::collection::vec(entry_value(), 4),
        0usize..4,
        0u64..8,
        prop_oneof![4 => Just(0u64), 1 => 0u64..0x4100, 1 => 0xe00u64..0x1000],
        ops(),
        any::<(bool, bool, bool)>(),
    )
        .prop_map(|(cpu, mut tables, high, t, i, off, ops, (single, int, stop))| {
            if cpu == "broadwell" && single {
                // The layout single-entry parts require (T8), so that walks get going.
                let first = TopaEntry::region(0x10_0000, 0)
                    .with_int(int)
                    .with_stop(stop)
                    .bits();
                tables[0].splice(.., [first, TopaEntry::end_to(TABLES[0]).bits()]);
            }
            let mut entries = BTreeMap::new();
            for (k, list) in tables.iter().enumerate() {
                for (i, &e) in list.iter().enumerate() {
                    entries.insert(TABLES[k] + 8 * i as u64, e);
                }
            }
            for (k, &e) in high.iter().enumerate() {
                entries.insert(TABLES[0] + 8 * (HIGH + k as u64), e);
            }
            let (start_table, start_index) = if t == 3 {
                (TABLES[0], HIGH + (i % 4))
            } else {
                (TABLES[t], i)
            };
            let start_table = if off == 0x4000 {
                start_table | 0x80
            } else {
                start_table
            }; // sometimes T3
            TopaCase {
                cpu,
                entries,
                start_table,
                start_index,
                start_offset: off,
                ops,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// T1–T9, W1–W6, S1–S5, P1, P4, E1a–E1d, E3, EN3: random ToPA walks against the reference.
    #[test]
    fn t1_t9_w1_w6_s1_s5_p1_p4_e1_topa_walk_matches_the_byte_model(case in topa_case()) {
        let cpu = CpuProfile::named(case.cpu).unwrap();
        let ptrs = 0x7f | case.start_index << 7 | case.start_offset << 32;
        let ctl = RtitCtl::new().with_trace_en(true).with_topa(true).with_branch_en(true);
        run_both(cpu, case.entries, case.start_table, ptrs, ctl, &case.ops).map_err(TestCaseError::fail)?;
    }

    /// R1–R5, E1e, TGL052: random single ranges (valid and invalid) against the reference.
    #[test]
    fn r1_r5_e1e_tgl052_single_range_matches_the_byte_model(
        size_log in 7u32..15,
        bad_mask in prop::bool::weighted(0.1),
        misalign in prop::bool::weighted(0.1),
        offset_frac in 0u64..1100,
        tgl052 in any::<bool>(),
        ops in ops(),
    ) {
        let mut cpu = CpuProfile::named("alderlake").unwrap();
        if tgl052 { cpu.errata |= Errata::TGL052; }
        let size = 1u64 << size_log;
        let mask = if bad_mask { (size - 1) ^ 0x80 | 0x100 } else { size - 1 };
        let base = 0x100_0000 + if misalign { 0x80 } else { 0 };
        let offset = offset_frac * size / 1000; // up to 10% past the end: R4c
        let ptrs = mask | offset << 32;
        let ctl = RtitCtl::new().with_trace_en(true).with_branch_en(true);
        run_both(cpu, BTreeMap::new(), base, ptrs, ctl, &ops).map_err(TestCaseError::fail)?;
    }
}
