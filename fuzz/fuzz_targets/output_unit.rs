//! Fuzz target: the output unit over ToPA tables and MSR write sequences made from the input.
//! Part one: any MSR writes, reads and output writes in any order never panic or hang, every
//! refused WRMSR is a #GP naming its rule (or a host-memory error), and the byte counts add up.
//! Part two: a structured ToPA walk or single range (profile, tables of valid and invalid entries,
//! start, slicing, TraceEn toggles) lands exactly where the byte-at-a-time reference model of
//! `tests/common/output_model.rs` says: events, counts, MSRs and every byte of memory.
#![no_main]

#[path = "../../tests/common/output_model.rs"]
#[allow(dead_code)]
mod output_model;

use libfuzzer_sys::arbitrary::Unstructured;
use output_model::{run_both, Op};
use ptemu::output::{MsrError, TopaEntry, MAX_INDEX};
use ptemu::regs::msr::*;
use ptemu::regs::{CpuProfile, RtitCtl};
use ptemu::{OutputUnit, PhysMemory, SparseMemory};
use std::collections::BTreeMap;

/// The next byte of the input (0 once it runs out).
fn byte(u: &mut Unstructured) -> u8 {
    u.arbitrary().unwrap_or(0)
}

/// The next 8 bytes of the input as a number (0 once it runs out).
fn word(u: &mut Unstructured) -> u64 {
    u.arbitrary().unwrap_or(0)
}

const TABLES: [u64; 3] = [0x1000, 0x2000, 0x3000];
const PROFILES: [&str; 4] = ["generic-max", "skylake", "broadwell", "icelake"];
const MSRS: [u32; 6] = [
    IA32_RTIT_CTL,
    IA32_RTIT_STATUS,
    IA32_RTIT_OUTPUT_BASE,
    IA32_RTIT_OUTPUT_MASK_PTRS,
    IA32_PERF_GLOBAL_STATUS,
    IA32_RTIT_CR3_MATCH,
];

/// A ToPA entry: mostly well-formed regions and ENDs, sometimes any 64 bits.
fn entry(b: &mut Unstructured) -> u64 {
    let k = byte(b);
    match k % 8 {
        0..=4 => TopaEntry::region(0x10_0000 + u64::from(k >> 3) * 0x4000, byte(b) % 3)
            .with_int(byte(b) & 1 == 1)
            .with_stop(byte(b) % 6 == 0)
            .bits(),
        5 | 6 => TopaEntry::end_to(TABLES[usize::from(byte(b) % 3)]).bits(),
        _ => word(b),
    }
}

fn tables(b: &mut Unstructured) -> BTreeMap<u64, u64> {
    let mut entries = BTreeMap::new();
    for t in TABLES {
        for i in 0..u64::from(byte(b) % 6) {
            entries.insert(t + 8 * i, entry(b));
        }
    }
    for k in 0..u64::from(byte(b) % 3) {
        entries.insert(TABLES[0] + 8 * (u64::from(MAX_INDEX) - k), entry(b));
    }
    entries
}

fn any_sequence(b: &mut Unstructured) {
    let cpu = CpuProfile::named(PROFILES[usize::from(byte(b)) % 4]).unwrap();
    let mut mem = SparseMemory::new();
    for (pa, v) in tables(b) {
        mem.write_u64(pa, v).unwrap();
    }
    let mut unit = OutputUnit::new(cpu);
    let buf = output_model::stream(0, 1 << 14);
    let mut sent = 0u64;
    for _ in 0..byte(b) % 32 {
        match byte(b) % 4 {
            0 | 1 => {
                let msr = MSRS[usize::from(byte(b)) % MSRS.len()];
                let value = match byte(b) % 3 {
                    // TraceEn with ToPA or not and a few common bits, or any value at all.
                    0 => RtitCtl::new()
                        .with_trace_en(true)
                        .with_topa(byte(b) & 1 == 1)
                        .with_branch_en(true)
                        .bits(),
                    1 => u64::from(byte(b)) << (byte(b) % 64),
                    _ => word(b),
                };
                match unit.wrmsr(&mut mem, msr, value) {
                    Ok(()) | Err(MsrError::Memory(_)) => {}
                    Err(MsrError::Gp(gp)) => assert!(!gp.rule.id().is_empty()),
                    Err(e) => panic!("WRMSR {msr:#x} = {value:#x}: {e}"),
                }
            }
            2 => {
                let n = usize::from(byte(b)) * 64;
                let _ = unit.write(&mut mem, &buf[..n]);
                sent += n as u64;
            }
            _ => {
                let msr = MSRS[usize::from(byte(b)) % MSRS.len()];
                let _ = unit.rdmsr(msr);
            }
        }
        let s = unit.stats();
        assert_eq!(s.bytes_in, sent);
        assert_eq!(s.bytes_written + s.bytes_lost, s.bytes_in, "{s:?}");
        assert_eq!(unit.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap() & 0x7f, 0x7f);
    }
}

fn ops(b: &mut Unstructured) -> Vec<Op> {
    (0..1 + byte(b) % 10)
        .map(|_| match byte(b) % 7 {
            6 => Op::Toggle,
            _ => Op::Write(usize::from(byte(b)) * 80 + usize::from(byte(b) % 80)),
        })
        .collect()
}

fn against_the_model(b: &mut Unstructured) {
    if byte(b) % 4 == 0 {
        // Single range: 128 B .. 16 KiB, sometimes a bad mask, misaligned or past the end.
        let size = 1u64 << (7 + byte(b) % 8);
        let mask = if byte(b) % 10 == 0 {
            (size - 1) ^ 0x80 | 0x100
        } else {
            size - 1
        };
        let base = 0x100_0000 + if byte(b) % 10 == 0 { 0x80 } else { 0 };
        let offset = u64::from(byte(b)) * size / 240;
        let cpu = CpuProfile::named("alderlake").unwrap();
        let ctl = RtitCtl::new().with_trace_en(true).with_branch_en(true);
        let ops = ops(b);
        if let Err(m) = run_both(cpu, BTreeMap::new(), base, mask | offset << 32, ctl, &ops) {
            panic!("single range: {m}");
        }
        return;
    }
    let cpu = CpuProfile::named(PROFILES[usize::from(byte(b)) % 3]).unwrap();
    let entries = tables(b);
    let k = byte(b);
    let table = TABLES[usize::from(k % 3)] | if k % 17 == 0 { 0x80 } else { 0 };
    let index = if k % 5 == 0 {
        u64::from(MAX_INDEX) - u64::from(byte(b) % 3)
    } else {
        u64::from(byte(b) % 8)
    };
    let offset = match byte(b) % 4 {
        0 => u64::from(byte(b)) * 64,
        _ => 0,
    };
    let ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_topa(true)
        .with_branch_en(true);
    let ops = ops(b);
    if let Err(m) = run_both(cpu, entries, table, 0x7f | index << 7 | offset << 32, ctl, &ops) {
        panic!("ToPA: {m}");
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut b = Unstructured::new(data);
    if byte(&mut b) & 1 == 0 {
        any_sequence(&mut b);
    } else {
        against_the_model(&mut b);
    }
});
