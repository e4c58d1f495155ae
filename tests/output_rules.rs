//! One or more tests per output rule of spec/output.md (ToPA, STOP, PMI, errors, single range).
//! Each test name starts with the rule IDs it checks.

mod common;

use common::*;
use ptemu::output::{TopaEntry, MAX_INDEX};
use ptemu::regs::msr::*;
use ptemu::regs::{CpuProfile, Errata, GlobalStatus, RtitCtl};
use ptemu::EventKind::*;
use ptemu::{OutputUnit, PhysMemory, SparseMemory};

const T: u64 = 0x1_0000; // table A
const U: u64 = 0x2_0000; // table B

#[test]
fn t1_w1_bytes_land_at_entry_base_plus_offset() {
    let mut r = Rig::new("skylake");
    r.table(
        T,
        0,
        &[
            region(0x10_0000, 0),
            region(0x20_0000, 0),
            region(0x30_0000, 1),
            end(T),
        ],
    );
    r.start_topa(T, 2, 0x10).write(100);
    assert_eq!(r.read(0x30_0010, 100), stream(0, 100));
    assert_eq!(r.read(0x30_0000, 0x10), vec![0; 0x10]);
    assert_eq!(r.position(), (T, 2, 0x10 + 100));
}

#[test]
fn t2_w5_wrap_after_index_2_pow_25_minus_1() {
    let mut r = Rig::new("generic-max");
    r.table(T, MAX_INDEX - 1, &[region(0x10_0000, 0), region(0x20_0000, 0)]);
    r.table(T, 0, &[region(0x30_0000, 0), end(T)]);
    r.start_topa(T, MAX_INDEX - 1, 0).write(3 * 4096 + 5);
    assert_eq!(r.event_list(), vec![(Wrap, 8192, "W5")]);
    assert_eq!(r.events()[0].index, Some(0));
    assert!(r.read(0x30_0005, 4091) == stream(8192 + 5, 4091));
    // entry 1 is END back to T, so the walk is in entry 0 again
    assert_eq!(r.read(0x30_0000, 5), stream(3 * 4096, 5));
    assert_eq!(r.position(), (T, 0, 5));
}

#[test]
fn t3_e1b_output_base_not_4k_aligned_is_error_at_enable() {
    let mut r = Rig::new("skylake");
    r.table(0x1000, 0, &[region(0x10_0000, 0)]);
    r.start_topa(0x1080, 0, 0).write(10);
    let regs = r.regs();
    assert!(regs.status.error() && !regs.status.trigger_en());
    assert_eq!(r.event_list(), vec![(Error, 0, "T3")]);
    assert_eq!(r.unit.stats().bytes_lost, 10);
    r.disable();
    assert_eq!(
        r.position(),
        (0x1080, 0, 0),
        "enable-time errors leave the MSRs as programmed"
    );
}

#[test]
fn t3_end_entry_size_bits_are_ignored() {
    let mut r = Rig::new("skylake");
    let end_with_size = TopaEntry::end_to(U).with_size(7).bits();
    r.table(T, 0, &[region(0x10_0000, 0), end_with_size])
        .table(U, 0, &[region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096 + 10);
    assert!(r.events().is_empty());
    assert_eq!(r.position(), (U, 0, 10));
}

#[test]
fn t4_e1b_region_misaligned_to_its_size_is_error_when_reached() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x10_1000, 1), end(T)]);
    r.start_topa(T, 0, 0).write(5000);
    assert_eq!(r.event_list(), vec![(Error, 4096, "T4")]);
    assert_eq!(r.unit.stats().bytes_written, 4096);
    assert_eq!(r.unit.stats().bytes_lost, 5000 - 4096);
    assert_eq!(
        r.position(),
        (T, 1, 0),
        "MSRs point at the offending entry with offset 0"
    );
    assert_eq!(r.read(0x10_1000, 16), vec![0; 16]);
}

#[test]
fn t5_e1d_end_with_int_or_stop_is_error() {
    for bad in [
        TopaEntry::end_to(T).with_int(true),
        TopaEntry::end_to(T).with_stop(true),
    ] {
        let mut r = Rig::new("skylake");
        r.table(T, 0, &[region(0x10_0000, 0), bad.bits()]);
        r.start_topa(T, 0, 0).write(4097);
        assert_eq!(r.event_list(), vec![(Error, 4096, "T5")]);
        assert_eq!(r.position(), (T, 1, 0));
    }
}

#[test]
fn t6_e1d_end_in_entry_zero_is_error() {
    // Start on an END in entry 0.
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[end(U)]).table(U, 0, &[region(0x10_0000, 0)]);
    r.start_topa(T, 0, 0);
    assert_eq!(r.event_list(), vec![(Error, 0, "T6")]);
    // An END pointing at a table whose entry 0 is END: the error is at the new table's entry 0.
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(U)])
        .table(U, 0, &[end(T)]);
    r.start_topa(T, 0, 0).write(4096);
    assert_eq!(r.event_list(), vec![(Error, 4096, "T6")]);
    assert_eq!(r.position(), (U, 0, 0));
}

#[test]
fn t6_self_referencing_end_table_cannot_loop_forever() {
    // A table of END entries pointing at itself: the first hop lands on END in entry 0.
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[end(T), end(T)]);
    r.start_topa(T, 1, 0).write(1 << 20);
    assert_eq!(r.event_list(), vec![(Error, 0, "T6")]);
    assert_eq!(
        r.position(),
        (T, 1, 0),
        "found at enable: the MSRs stay as programmed"
    );
    assert_eq!(r.unit.stats().bytes_lost, 1 << 20);
}

#[test]
fn t7_e1b_base_above_maxphyaddr_is_error() {
    let mut r = Rig::new("skylake"); // MAXPHYADDR 39
    r.table(T, 0, &[region(0x10_0000, 0), region(1 << 39, 0)]);
    r.start_topa(T, 0, 0).write(4097);
    assert_eq!(r.event_list(), vec![(Error, 4096, "T7")]);
    let mut r = Rig::new("generic-max"); // MAXPHYADDR 52: the same entry is fine
    r.table(T, 0, &[region(0x10_0000, 0), region(1 << 39, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4097);
    assert!(r.events().is_empty());
    assert_eq!(r.read(1 << 39, 1), stream(4096, 1));
}

#[test]
fn t8_single_entry_topa_needs_entry1_end_back_to_the_table() {
    // Broadwell: CPUID.14H.0:ECX[1] = 0.
    let mut ok = Rig::new("broadwell");
    ok.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    ok.start_topa(T, 0, 0).write(3 * 4096 + 1);
    assert!(ok.events().is_empty());
    assert_eq!(ok.read(0x10_0000, 1), stream(3 * 4096, 1));
    for (entry1, why) in [
        (end(U), "END elsewhere"),
        (region(0x20_0000, 0), "a second region"),
    ] {
        let mut r = Rig::new("broadwell");
        r.table(T, 0, &[region(0x10_0000, 0), entry1])
            .table(U, 0, &[region(0x30_0000, 0)]);
        r.start_topa(T, 0, 0).write(4097);
        assert_eq!(r.event_list(), vec![(Error, 4096, "T8")], "{why}");
    }
    let mut r = Rig::new("broadwell");
    r.table(T, 0, &[region(0x10_0000, 0), end(T), region(0x20_0000, 0)]);
    r.start_topa(T, 2, 0);
    assert_eq!(r.event_list(), vec![(Error, 0, "T8")], "no entry past 1");
}

#[test]
fn t9_entries_are_read_when_the_walk_reaches_them() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(100);
    // Re-point entry 1 while tracing: the unit has not read it yet, so the new value is used.
    r.table(T, 1, &[region(0x50_0000, 0)]);
    r.write(4096);
    assert_eq!(r.read(0x50_0000, 100), stream(4096, 100));
    assert_eq!(r.read(0x20_0000, 100), vec![0; 100]);
}

#[test]
fn w2_one_slice_straddles_several_regions() {
    let mut r = Rig::new("skylake");
    r.table(
        T,
        0,
        &[
            region(0x10_0000, 0),
            region(0x20_0000, 0),
            region(0x30_0000, 0),
            end(T),
        ],
    );
    r.start_topa(T, 0, 4000).write(96 + 4096 + 50);
    assert_eq!(r.read(0x10_0000 + 4000, 96), stream(0, 96));
    assert_eq!(r.read(0x20_0000, 4096), stream(96, 4096));
    assert_eq!(r.read(0x30_0000, 50), stream(96 + 4096, 50));
}

#[test]
fn w3_full_region_moves_the_walk_at_once() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096).disable();
    assert_eq!(r.position(), (T, 1, 0));
}

#[test]
fn w4_w6_end_hops_to_entry_zero_of_the_next_table_and_writes_nothing() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(U)])
        .table(U, 0, &[region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096 + 7);
    assert_eq!(r.position(), (U, 0, 7));
    assert_eq!(r.read(0x20_0000, 7), stream(4096, 7));
    assert_eq!(r.mem.read_u64(T + 8).unwrap(), end(U), "END entry untouched");
    assert_eq!(
        r.unit.written_regions().collect::<Vec<_>>(),
        vec![(0x10_0000, 4096), (0x20_0000, 4096)]
    );
    assert!(r.events().is_empty());
}

#[test]
fn w4_enable_on_an_end_entry_follows_it_and_resets_the_offset() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(U)])
        .table(U, 0, &[region(0x20_0000, 0)]);
    r.start_topa(T, 1, 0x123).write(1);
    assert_eq!(r.position(), (U, 0, 1));
}

#[test]
fn s1_s2_s3_stop_sets_stopped_and_msrs_point_one_past_the_end() {
    let mut r = Rig::new("skylake");
    r.table(
        T,
        0,
        &[
            region(0x10_0000, 0),
            region_stop(0x20_0000, 1),
            region(0x30_0000, 0),
        ],
    );
    r.start_topa(T, 0, 0).write(4096 + 8192 + 100);
    let regs = r.regs();
    assert!(regs.status.stopped() && !regs.status.trigger_en() && !regs.status.error());
    assert_eq!(r.event_list(), vec![(Stopped, 4096 + 8192, "S1")]);
    assert_eq!(
        r.read(0x20_0000, 8192),
        stream(4096, 8192),
        "output ends at the region's last byte"
    );
    assert_eq!(r.read(0x30_0000, 4), vec![0; 4], "nothing after the STOP");
    assert_eq!(r.unit.stats().bytes_lost, 100);
    r.disable();
    assert_eq!(
        r.position(),
        (T, 1, 8192),
        "S3: the STOP entry, OutputOffset = region size"
    );
}

#[test]
fn s4_reenable_while_stopped_produces_nothing() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region_stop(0x10_0000, 0)]);
    r.start_topa(T, 0, 0).write(4096).disable().enable().write(10);
    assert!(!r.regs().status.trigger_en());
    assert_eq!(r.unit.stats().bytes_lost, 10);
    assert_eq!(r.position(), (T, 0, 4096));
}

#[test]
fn s4_e1c_reenable_with_stopped_cleared_and_offset_at_size_is_error() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region_stop(0x10_0000, 0)]);
    r.start_topa(T, 0, 0).write(4096).disable();
    r.wrmsr(IA32_RTIT_STATUS, 0).unwrap();
    r.enable();
    assert_eq!(r.event_list().last().unwrap(), &(Error, 4096, "E1c"));
}

#[test]
fn s5_stop_and_int_stop_first_then_the_pmi() {
    let mut r = Rig::new("skylake");
    let e = TopaEntry::region(0x10_0000, 0)
        .with_int(true)
        .with_stop(true)
        .bits();
    r.table(T, 0, &[e]);
    r.start_topa(T, 0, 0).write(5000);
    assert_eq!(r.event_list(), vec![(Stopped, 4096, "S1"), (Pmi, 4096, "S5")]);
    assert!(r.regs().status.stopped());
    assert!(r.regs().global_status.contains(GlobalStatus::TRACE_TOPA_PMI));
}

#[test]
fn s6_ip_trace_stop_sets_stopped_and_writes_back_the_position() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(10);
    r.unit.trace_stop();
    r.write(5);
    assert_eq!(r.event_list(), vec![(Stopped, 10, "S6")]);
    assert!(r.regs().status.stopped());
    assert_eq!(r.position(), (T, 0, 10));
    assert_eq!(r.unit.stats().bytes_lost, 5);
}

#[test]
fn p1_int_region_raises_pmi_and_global_status_55_is_cleared_by_0x390() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096);
    assert_eq!(r.event_list(), vec![(Pmi, 4096, "P1")]);
    assert_eq!(r.rdmsr(IA32_PERF_GLOBAL_STATUS), 1 << 55);
    r.wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, 1 << 55).unwrap();
    assert_eq!(r.rdmsr(IA32_PERF_GLOBAL_STATUS), 0);
    r.wrmsr(IA32_PERF_GLOBAL_STATUS_SET, 1 << 55).unwrap();
    assert_eq!(r.rdmsr(IA32_PERF_GLOBAL_STATUS), 1 << 55);
    let ro = r.wrmsr(IA32_PERF_GLOBAL_STATUS, 0);
    assert!(
        matches!(&ro, Err(ptemu::MsrError::Gp(f)) if f.rule == ptemu::Rule::M2),
        "GLOBAL_STATUS itself is read-only: {ro:?}"
    );
}

#[test]
fn p2_output_continues_past_the_pmi() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region_int(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096 + 300);
    assert_eq!(r.read(0x20_0000, 300), stream(4096, 300));
}

#[test]
fn p3_two_int_regions_filling_back_to_back_give_two_pmis() {
    let mut r = Rig::new("skylake");
    r.table(
        T,
        0,
        &[region_int(0x10_0000, 0), region_int(0x20_0000, 0), end(T)],
    );
    r.start_topa(T, 0, 0).write(8192);
    assert_eq!(r.event_list(), vec![(Pmi, 4096, "P1"), (Pmi, 8192, "P1")]);
}

#[test]
fn p4_single_entry_pmi_fires_before_the_region_fills() {
    let mut r = Rig::new("broadwell");
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096 * 2);
    let margin = u64::from(r.unit.cpu().early_pmi_margin);
    assert_eq!(margin, 512);
    assert_eq!(
        r.event_list(),
        vec![(Pmi, 4096 - margin, "P4"), (Pmi, 2 * 4096 - margin, "P4")]
    );
    // A margin of 0 gives the PMI at the fill.
    let mut cpu = CpuProfile::named("broadwell").unwrap();
    cpu.early_pmi_margin = 0;
    let mut r = Rig::with(cpu);
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096);
    assert_eq!(r.event_list(), vec![(Pmi, 4096, "P1")]);
}

#[test]
fn p4_resuming_past_the_threshold_fires_on_the_first_byte() {
    let mut r = Rig::new("broadwell");
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 4000).write(1);
    assert_eq!(r.event_list(), vec![(Pmi, 1, "P4")]);
}

#[test]
fn p5_pmi_bit_is_set_when_the_disable_flush_completes() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096).disable();
    assert_eq!(r.rdmsr(IA32_PERF_GLOBAL_STATUS) >> 55 & 1, 1);
}

#[test]
fn p6_pend_topa_pmi_is_set_and_reinjected_on_enable() {
    let mut r = Rig::new("generic-max");
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.wrmsr(IA32_RTIT_OUTPUT_BASE, T).unwrap();
    r.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f).unwrap();
    r.ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_topa(true)
        .with_branch_en(true)
        .with_inject_psb_pmi_on_enable(true);
    r.enable().write(4096).disable();
    assert!(r.regs().status.pend_topa_pmi());
    r.enable();
    assert_eq!(r.event_list(), vec![(Pmi, 4096, "P1"), (Pmi, 4096, "P6")]);
    // Without the CTL bit nothing is pended.
    let mut r = Rig::new("generic-max");
    r.table(T, 0, &[region_int(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096).disable();
    assert!(!r.regs().status.pend_topa_pmi());
}

#[test]
fn p7_filled_regions_are_the_indexes_below_the_table_offset() {
    let mut r = Rig::new("skylake");
    let entries: Vec<u64> = (0..6)
        .map(|i| region(0x10_0000 + i * 0x1000, 0))
        .chain([end(T)])
        .collect();
    r.table(T, 0, &entries);
    r.start_topa(T, 0, 0).write(3 * 4096 + 10).disable();
    let (_, index, _) = r.position();
    assert_eq!(index, 3);
    for i in 0..u64::from(index) {
        assert_eq!(r.read(0x10_0000 + i * 0x1000, 4096), stream(i * 4096, 4096));
    }
}

#[test]
fn e1a_reserved_bit_in_an_entry_is_error_when_reached() {
    for bit in [1, 3, 5, 10, 11] {
        let mut r = Rig::new("skylake");
        r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0) | 1 << bit]);
        r.start_topa(T, 0, 0).write(4097);
        assert_eq!(r.event_list(), vec![(Error, 4096, "E1a")], "bit {bit}");
    }
}

#[test]
fn e1c_output_offset_not_below_the_region_size_is_error_at_enable() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 4096);
    assert_eq!(r.event_list(), vec![(Error, 0, "E1c")]);
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    r.start_topa(T, 0, 4095).write(1);
    assert!(r.events().is_empty());
}

#[test]
fn e2_errors_are_found_only_while_tracing_and_only_when_reached() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x10_0000, 0) | 1 << 1]);
    r.wrmsr(IA32_RTIT_OUTPUT_BASE, T).unwrap();
    r.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f).unwrap();
    assert!(!r.regs().status.error(), "nothing is checked with TraceEn=0");
    r.start_topa(T, 0, 0).write(4095);
    assert!(!r.regs().status.error(), "entry 1 is not current yet");
    r.write(1);
    assert!(r.regs().status.error());
}

#[test]
fn e3_error_stops_output_and_every_later_byte_is_lost() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), 1 << 3]);
    r.start_topa(T, 0, 0).write(4096).write(1000);
    let s = r.unit.stats();
    assert_eq!((s.bytes_in, s.bytes_written, s.bytes_lost), (5096, 4096, 1000));
    assert!(!r.unit.output_enabled());
    assert!(r.regs().status.error() && !r.regs().status.trigger_en());
}

#[test]
fn e4_recovery_clear_trace_en_fix_clear_error_and_resume_at_the_entry() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), 1 << 3, end(T)]);
    r.start_topa(T, 0, 0).write(4096).disable();
    assert_eq!(r.position(), (T, 1, 0));
    r.table(T, 1, &[region(0x20_0000, 0)]);
    r.wrmsr(IA32_RTIT_STATUS, 0).unwrap();
    r.enable().write(10);
    assert_eq!(r.read(0x20_0000, 10), stream(4096, 10));
}

#[test]
fn en1_sticky_error_keeps_output_off_until_status_is_cleared() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    r.wrmsr(IA32_RTIT_STATUS, 1 << 4).unwrap(); // Error left over from an earlier run
    r.start_topa(T, 0, 0).write(10);
    assert!(!r.regs().status.trigger_en());
    assert_eq!(r.unit.stats().bytes_lost, 10);
    r.disable();
    r.wrmsr(IA32_RTIT_STATUS, 0).unwrap();
    r.enable().write(10);
    assert!(r.regs().status.trigger_en());
    assert_eq!(r.read(0x10_0000, 10), stream(10, 10));
}

#[test]
fn en2_psb_is_due_on_enable_when_packet_byte_cnt_is_zero() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    assert!(r.unit.psb_due_on_enable());
    r.start_topa(T, 0, 0).write(100).disable();
    assert_eq!(r.regs().status.packet_byte_cnt(), 100);
    assert!(!r.unit.psb_due_on_enable());
    // Broadwell has no configurable PSB: always due.
    let mut b = Rig::new("broadwell");
    b.table(T, 0, &[region(0x10_0000, 0), end(T)]);
    b.start_topa(T, 0, 0).write(100);
    assert_eq!(b.regs().status.packet_byte_cnt(), 0);
    assert!(b.unit.psb_due_on_enable());
}

#[test]
fn en3_disable_writes_the_position_back_and_resume_continues_there() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(5000).disable();
    assert_eq!(r.position(), (T, 1, 5000 - 4096));
    assert!(!r.regs().status.trigger_en());
    r.enable().write(10);
    assert_eq!(r.read(0x20_0000 + 904, 10), stream(5000, 10));
}

#[test]
fn o5_full_circular_buffer_overwrites_without_error_or_loss() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(10 * 8192 + 17);
    assert!(r.events().is_empty());
    let s = r.unit.stats();
    assert_eq!((s.bytes_lost, s.bytes_written), (0, 10 * 8192 + 17));
    assert_eq!(r.read(0x10_0000, 17), stream(10 * 8192, 17));
}

/// O5 policy "Laps and overwrites" (spec/output.md): 40,000 bytes through a ring of two 4 KiB
/// regions enter entry 0 five times: four laps, and all but the last 8 KiB overwritten.
#[test]
fn o5_policy_a_circular_topa_counts_laps_and_overwritten_bytes() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(8192);
    let s = r.unit.stats();
    assert_eq!(
        (s.laps, s.bytes_overwritten),
        (0, 0),
        "a full ring, not yet lapped"
    );
    r.write(100);
    let s = r.unit.stats();
    assert_eq!((s.laps, s.bytes_overwritten), (1, 100), "counted mid-region");
    r.write(40_000 - 8292);
    let s = r.unit.stats();
    assert_eq!((s.laps, s.bytes_overwritten), (4, 40_000 - 8192));
    assert!(
        r.events().is_empty(),
        "laps are not wrap events (W5 is the index wrap)"
    );
}

/// O5 policy: turning TraceEn off and on resumes the same pass; a walk whose first table is left
/// behind counts laps of the tables it cycles through.
#[test]
fn o5_policy_laps_continue_across_disable_and_skip_a_prefix_table() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(5000);
    r.disable();
    r.enable().write(5000);
    let s = r.unit.stats();
    assert_eq!((s.laps, s.bytes_overwritten), (1, 10_000 - 8192));

    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), end(U)]).table(
        U,
        0,
        &[region(0x20_0000, 0), region(0x30_0000, 0), end(U)],
    );
    r.start_topa(T, 0, 0).write(4096 + 2 * 8192 + 10);
    let s = r.unit.stats();
    assert_eq!((s.laps, s.bytes_overwritten), (2, 8192 + 10));
}

/// R3 with the O5 policy: a single range started at offset 0x10 overwrites from its second pass
/// on, 0x10 bytes in; each later wrap is a lap.
#[test]
fn r3_policy_a_wrapping_single_range_counts_laps_and_overwritten_bytes() {
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0000, 0x10_0000_0fff).write(3 * 4096 + 5);
    let s = r.unit.stats();
    assert_eq!(s.bytes_written, 3 * 4096 + 5);
    assert_eq!((s.laps, s.bytes_overwritten), (3, 3 * 4096 + 5 - 4096));
}

#[test]
fn r1_r2_single_range_bytes_at_base_plus_offset() {
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0000, 0x10_0000_3fff).write(100); // 16 KiB range, offset 0x10
    assert_eq!(r.read(0x40_0010, 100), stream(0, 100));
    r.disable();
    assert_eq!(r.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0x74_0000_3fff);
}

#[test]
fn r3_r5_single_range_wraps_and_the_offset_stays_within_the_mask() {
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0000, 0xfff).write(3 * 4096 + 5);
    assert_eq!(
        r.event_list(),
        vec![(Wrap, 4096, "R3"), (Wrap, 8192, "R3"), (Wrap, 12288, "R3")]
    );
    assert!(r.events().iter().all(|e| e.table.is_none() && e.index.is_none()));
    r.disable();
    assert_eq!(r.regs().mask_ptrs.output_offset(), 5);
    assert_eq!(r.read(0x40_0000, 5), stream(3 * 4096, 5));
    assert_eq!(
        r.read(0x40_0005, 10),
        stream(2 * 4096 + 5, 10),
        "the last lap survives past the new offset"
    );
}

#[test]
fn r4a_e1e_non_contiguous_mask_is_error_at_enable() {
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0000, 0x2fff);
    assert_eq!(r.event_list(), vec![(Error, 0, "R4a")]);
}

#[test]
fn r4b_e1e_base_overlapping_the_mask_is_error_at_enable() {
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0800, 0xfff);
    assert_eq!(r.event_list(), vec![(Error, 0, "R4b")]);
}

#[test]
fn r4c_e1e_offset_past_the_mask_is_error_at_enable() {
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0000, 0x1000_0000_0fff);
    assert_eq!(r.event_list(), vec![(Error, 0, "R4c")]);
    let mut r = Rig::new("skylake");
    r.start_range(0x40_0000, 0x0fff_0000_0fff);
    assert!(r.events().is_empty(), "offset = mask is the last byte, legal");
}

#[test]
fn r6_linux_style_range_mask_is_size_minus_one() {
    let size: u64 = 64 << 10;
    let mut r = Rig::new("icelake");
    r.start_range(0x80_0000, ((size - 1) >> 7) << 7 | 0x7f)
        .write(size as usize + 1);
    assert_eq!(r.event_list(), vec![(Wrap, size, "R3")]);
}

#[test]
fn r7_m2_output_base_bits_6_0_gp_but_coarser_misalignment_is_an_operational_error() {
    let mut r = Rig::new("skylake");
    assert!(r.wrmsr(IA32_RTIT_OUTPUT_BASE, 0x40_0040).is_err());
    r.start_range(0x40_0080, 0xfff);
    assert_eq!(r.event_list(), vec![(Error, 0, "R4b")]);
}

#[test]
fn tgl052_single_range_over_4k_aliases_into_the_first_4k() {
    let mut cpu = CpuProfile::named("alderlake").unwrap();
    cpu.errata |= Errata::TGL052;
    let mut r = Rig::with(cpu);
    r.start_range(0x40_0000, 0x1fff).write(4096 + 10);
    assert_eq!(r.event_list(), vec![(Erratum, 0, "TGL052")]);
    assert_eq!(
        r.read(0x40_0000, 10),
        stream(4096, 10),
        "bytes past 4 KiB land in the first page"
    );
    assert_eq!(r.read(0x40_1000, 10), vec![0; 10]);
    r.disable();
    assert_eq!(
        r.regs().mask_ptrs.output_offset(),
        4096 + 10,
        "the offset counts normally"
    );
    // Off by default, and a 4 KiB range is unaffected.
    let mut r = Rig::new("alderlake");
    r.start_range(0x40_0000, 0x1fff).write(4096 + 10);
    assert_eq!(r.read(0x40_1000, 10), stream(4096, 10));
    let mut cpu = CpuProfile::named("alderlake").unwrap();
    cpu.errata |= Errata::TGL052;
    let mut r = Rig::with(cpu);
    r.start_range(0x40_0000, 0xfff).write(10);
    assert!(r.events().is_empty());
}

#[test]
fn m5_each_logical_processor_has_its_own_unit() {
    let mut mem = SparseMemory::new();
    mem.write_u64(T, region(0x10_0000, 0)).unwrap();
    mem.write_u64(T + 8, end(T)).unwrap();
    // Each unit programmed differently: single range for b, ToPA for a; each keeps its own
    // state however the other is driven.
    mem.write_u64(U, region(0x30_0000, 0)).unwrap();
    mem.write_u64(U + 8, end(U)).unwrap();
    let mut a = OutputUnit::new(CpuProfile::default());
    let mut b = OutputUnit::new(CpuProfile::default());
    a.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, T).unwrap();
    let topa = RtitCtl::new().with_trace_en(true).with_topa(true).bits();
    a.wrmsr(&mut mem, IA32_RTIT_CTL, topa).unwrap();
    a.write(&mut mem, &[1, 2, 3]).unwrap();
    // b, untouched so far, reads its reset values (a fresh unit's).
    let fresh = OutputUnit::new(CpuProfile::default());
    let regs = |u: &OutputUnit| {
        [
            IA32_RTIT_OUTPUT_BASE,
            IA32_RTIT_CTL,
            IA32_RTIT_OUTPUT_MASK_PTRS,
            IA32_RTIT_STATUS,
        ]
        .map(|m| u.rdmsr(m).unwrap())
    };
    assert_eq!(regs(&b), regs(&fresh), "b's MSRs");
    // b traces to its own table; a keeps its registers and its place.
    let a_before = regs(&a);
    b.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, U).unwrap();
    b.wrmsr(&mut mem, IA32_RTIT_CTL, topa).unwrap();
    b.write(&mut mem, &[9; 10]).unwrap();
    let a_after = regs(&a);
    assert_eq!(a_before, a_after, "a's registers moved when b traced");
    assert_eq!(
        a.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap() >> 32,
        3,
        "a's offset"
    );
    assert_eq!(
        b.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap() >> 32,
        10,
        "b's offset"
    );
    // a goes on where it was, into its own region.
    a.write(&mut mem, &[4]).unwrap();
    let byte = |pa| {
        let mut b = [0u8];
        mem.read(pa, &mut b).unwrap();
        b[0]
    };
    assert_eq!(byte(0x10_0003), 4);
    assert_eq!(byte(0x30_0000), 9);
}

#[test]
fn m7_reads_while_tracing_are_exact() {
    let mut r = Rig::new("skylake");
    r.table(T, 0, &[region(0x10_0000, 0), region(0x20_0000, 0), end(T)]);
    r.start_topa(T, 0, 0).write(4096 + 33);
    assert_eq!(r.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0x7f | 1 << 7 | 33 << 32);
    assert_eq!(r.rdmsr(IA32_RTIT_OUTPUT_BASE), T);
    assert_eq!(r.rdmsr(IA32_RTIT_STATUS) & 0b111, 0b100, "TriggerEn");
}

#[test]
fn policy_fabric_en_output_goes_to_the_transport_not_memory() {
    let mut r = Rig::new("generic-max"); // CPUID.14H.0:ECX[3]: trace transport
    r.ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_branch_en(true)
        .with_fabric_en(true);
    r.enable().write(5000);
    let s = r.unit.stats();
    assert_eq!((s.bytes_written, s.bytes_lost), (5000, 0));
    assert_eq!(r.mem.page_count(), 0, "nothing stored in memory");
    assert!(r.events().is_empty());
}

#[test]
fn policy_host_memory_errors_return_to_the_caller_and_keep_the_position() {
    use ptemu::{MemError, MmapMemory};
    let dir = tempfile::tempdir().unwrap();
    // Memory backs only the table and the first region; the second region is unbacked.
    let mut mem = MmapMemory::create(&dir.path().join("phys"), 0x10_0000, 0x2000).unwrap();
    mem.write_u64(0x10_0000, region(0x10_1000, 0)).unwrap();
    mem.write_u64(0x10_0008, region(0x40_0000, 0)).unwrap();
    let mut unit = OutputUnit::new(CpuProfile::named("skylake").unwrap());
    unit.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, 0x10_0000).unwrap();
    let ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_topa(true)
        .with_branch_en(true);
    unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits()).unwrap();
    let err = unit.write(&mut mem, &stream(0, 5000)).unwrap_err();
    assert_eq!(
        err,
        MemError::Unmapped {
            pa: 0x40_0000,
            len: 5000 - 4096
        }
    );
    let s = unit.stats();
    assert_eq!(
        (s.bytes_in, s.bytes_written, s.bytes_lost),
        (5000, 4096, 5000 - 4096)
    );
    let ptrs = unit.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap();
    assert_eq!(
        (ptrs >> 7 & 0x1ff_ffff, ptrs >> 32),
        (1, 0),
        "the position stays at the failed store"
    );
    assert!(
        !unit.registers().status.error(),
        "a host failure is not an operational error"
    );
}

#[test]
fn p6_policy_a_wrmsr_that_cannot_read_the_topa_table_changes_nothing() {
    // The table at T cannot be read: the enable fails before any change, PendTopaPMI included.
    let mut mem = Holey::new(T, 0x1000);
    mem.refuse = true;
    mem.mem.write_u64(T, region(0x10_0000, 0)).unwrap();
    mem.mem.write_u64(T + 8, end(T)).unwrap();
    let mut unit = OutputUnit::new(CpuProfile::named("generic-max").unwrap());
    unit.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, T).unwrap();
    unit.wrmsr(&mut mem, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f | 40 << 32)
        .unwrap();
    unit.wrmsr(&mut mem, IA32_RTIT_STATUS, 1 << 7).unwrap(); // PendTopaPMI
    let ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_topa(true)
        .with_branch_en(true)
        .with_inject_psb_pmi_on_enable(true);
    let before = unit.registers();
    let err = unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits()).unwrap_err();
    assert_eq!(
        err,
        ptemu::MsrError::Memory(ptemu::MemError::Unmapped { pa: T, len: 8 })
    );
    assert_eq!(unit.registers(), before, "the WRMSR did not happen");
    assert_eq!(unit.rdmsr(IA32_RTIT_CTL).unwrap(), 0);
    assert!(unit.events().is_empty(), "no P6 PMI: {:?}", unit.events());
    assert!(!unit.output_enabled());
    // Bytes written now are lost, and counted: tracing is off, as CTL says.
    unit.write(&mut mem, &stream(0, 10)).unwrap();
    assert_eq!(unit.stats().bytes_lost, 10);
    // The same WRMSR once the table reads: the enable happens, with its P6 PMI.
    mem.refuse = false;
    unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits()).unwrap();
    assert!(unit.registers().status.trigger_en());
    assert_eq!(
        unit.events().iter().map(|e| e.rule).collect::<Vec<_>>(),
        [Some(ptemu::Rule::P6)]
    );
    unit.write(&mut mem, &stream(0, 10)).unwrap();
    assert_eq!(
        mem.mem.read_u64(0x10_0000 + 40).unwrap(),
        u64::from_le_bytes(stream(0, 10)[..8].try_into().unwrap())
    );
}

/// Memory-error policy (spec/output.md): a write that cannot read the next ToPA entry stops there
/// without raising the full region's P1 PMI; once the entry reads, the retry raises it once
/// (before, each failed attempt raised it again).
#[test]
fn p1_policy_a_failed_read_of_the_next_entry_raises_the_pmi_once() {
    // Table at T: a 4 KiB INT region, then the next entry (T + 8) in a page that can be refused.
    let mut mem = Holey::new(T + 8, 8);
    mem.mem.write_u64(T, region_int(0x10_0000, 0)).unwrap();
    mem.mem.write_u64(T + 8, region(0x20_0000, 0)).unwrap();
    mem.mem.write_u64(T + 16, end(T)).unwrap();
    let mut unit = OutputUnit::new(CpuProfile::named("skylake").unwrap());
    unit.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, T).unwrap();
    let ctl = RtitCtl::new().with_trace_en(true).with_topa(true);
    unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits()).unwrap();
    mem.refuse = true;
    for _ in 0..3 {
        assert!(unit.write(&mut mem, &stream(0, 4096)).is_err());
    }
    mem.refuse = false;
    unit.write(&mut mem, &stream(0, 16)).unwrap();
    let pmis = unit
        .events()
        .iter()
        .filter(|e| e.rule == Some(ptemu::Rule::P1))
        .count();
    assert_eq!(pmis, 1, "{:?}", unit.events());
}
