//! The #GP rules of WRMSR/RDMSR (M1–M7, BDM106) and a differential property test of IA32_RTIT_CTL
//! writes against an independent, KVM-style statement of the same rules.

mod common;

use common::Rig;
use proptest::prelude::*;
use ptemu::output::ResetKind;
use ptemu::regs::msr::*;
use ptemu::regs::{CpuProfile, CpuidRegs, Errata, GpReason, RtitCtl};
use ptemu::{MsrError, Rule};

fn gp_rule(r: Result<(), MsrError>) -> Option<&'static str> {
    match r {
        Ok(()) => None,
        Err(MsrError::Gp(f)) => Some(f.rule.id()),
        Err(e) => panic!("expected #GP, got {e}"),
    }
}

fn ctl(rig: &mut Rig, v: u64) -> Option<&'static str> {
    gp_rule(rig.wrmsr(IA32_RTIT_CTL, v))
}

const RTIT_MSRS: [u32; 6] = [
    IA32_RTIT_CTL,
    IA32_RTIT_STATUS,
    IA32_RTIT_OUTPUT_BASE,
    IA32_RTIT_OUTPUT_MASK_PTRS,
    IA32_RTIT_CR3_MATCH,
    IA32_RTIT_ADDR0_A,
];

#[test]
fn m1_without_pt_every_rtit_msr_gps() {
    let mut cpu = CpuProfile::named("skylake").unwrap();
    cpu.pt_supported = false;
    let mut r = Rig::with(cpu);
    for msr in RTIT_MSRS {
        assert_eq!(gp_rule(r.wrmsr(msr, 0)), Some("M1"), "{msr:#x}");
        assert!(matches!(r.unit.rdmsr(msr), Err(MsrError::Gp(f)) if f.rule == Rule::M1));
    }
    assert_eq!(
        r.unit.rdmsr(IA32_PERF_GLOBAL_STATUS),
        Ok(0),
        "perfmon MSRs are not PT's"
    );
}

#[test]
fn m1_msrs_exist_only_with_their_cpuid_bits() {
    let mut cpu = CpuProfile::named("skylake").unwrap();
    cpu.leaf14_0.ecx = 0; // no ToPA, no single range
    cpu.leaf14_0.ebx &= !1; // no CR3 filtering
    let mut r = Rig::with(cpu);
    assert_eq!(gp_rule(r.wrmsr(IA32_RTIT_OUTPUT_BASE, 0)), Some("M1"));
    assert_eq!(gp_rule(r.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0)), Some("M1"));
    assert_eq!(gp_rule(r.wrmsr(IA32_RTIT_CR3_MATCH, 0)), Some("M1"));
    // ADDRn exist for n < RANGECNT: 2 on Skylake, 0 on Broadwell.
    let mut r = Rig::new("skylake");
    assert_eq!(gp_rule(r.wrmsr(IA32_RTIT_ADDR0_A + 3, 0x1000)), None);
    assert_eq!(gp_rule(r.wrmsr(IA32_RTIT_ADDR0_A + 4, 0x1000)), Some("M1"));
    let mut b = Rig::new("broadwell");
    assert_eq!(gp_rule(b.wrmsr(IA32_RTIT_ADDR0_A, 0)), Some("M1"));
    assert_eq!(
        gp_rule(b.wrmsr(IA32_RTIT_CR3_MATCH, 0x1000)),
        None,
        "Broadwell has CR3 filtering"
    );
    assert!(matches!(r.unit.rdmsr(0x10), Err(MsrError::NotModelled(0x10))));
}

#[test]
fn m2_ctl_reserved_bits_gp() {
    let mut r = Rig::new("generic-max");
    for bit in [18, 23, 28, 29, 30, 48, 54, 57, 63] {
        assert_eq!(ctl(&mut r, 1 << bit), Some("M2"), "bit {bit}");
    }
    assert_eq!(r.rdmsr(IA32_RTIT_CTL), 0, "a faulting write changes nothing");
}

#[test]
fn m2_ctl_feature_bits_need_their_cpuid_bit() {
    let c = RtitCtl::new;
    let gated = [
        ("CYCEn", c().with_cyc_en(true)),
        ("PwrEvtEn", c().with_pwr_evt_en(true)),
        ("FUPonPTW", c().with_fup_on_ptw(true)),
        ("FabricEn", c().with_fabric_en(true)),
        ("MTCEn", c().with_mtc_en(true)),
        ("PTWEn", c().with_ptw_en(true)),
        ("EventEn", c().with_event_en(true)),
        ("DisTNT", c().with_dis_tnt(true)),
        ("InjectPsbPmiOnEnable", c().with_inject_psb_pmi_on_enable(true)),
    ];
    let mut bdw = Rig::new("broadwell");
    let mut max = Rig::new("generic-max");
    for (name, v) in gated {
        match bdw.wrmsr(IA32_RTIT_CTL, v.bits()) {
            Err(MsrError::Gp(f)) => {
                assert_eq!(f.rule, Rule::M2);
                assert!(
                    matches!(f.reason, GpReason::Unsupported { field, .. } if field == name),
                    "{name}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(ctl(&mut max, v.bits()), None, "{name} on generic-max");
    }
    // Always-writable bits: OS, User, TSCEn, DisRETC, BranchEn; CR3Filter with EBX[0].
    let ok = c()
        .with_os(true)
        .with_user(true)
        .with_tsc_en(true)
        .with_dis_retc(true)
        .with_branch_en(true);
    assert_eq!(ctl(&mut bdw, ok.with_cr3_filter(true).bits()), None);
    let mut skl = Rig::new("skylake");
    assert_eq!(
        ctl(&mut skl, c().with_ptw_en(true).bits()),
        Some("M2"),
        "Skylake has no PTWRITE"
    );
    assert_eq!(
        ctl(&mut skl, c().with_cyc_en(true).with_mtc_en(true).bits()),
        None
    );
}

#[test]
fn m2_ctl_encodings_are_checked_against_the_cpuid_bitmaps() {
    let c = RtitCtl::new;
    let mut skl = Rig::new("skylake"); // MTC 0x0249, CYC 0x3fff, PSB 0x003f
    assert_eq!(ctl(&mut skl, c().with_mtc_freq(3).bits()), None);
    assert_eq!(ctl(&mut skl, c().with_mtc_freq(1).bits()), Some("M2"));
    assert_eq!(ctl(&mut skl, c().with_cyc_thresh(13).bits()), None);
    assert_eq!(ctl(&mut skl, c().with_cyc_thresh(14).bits()), Some("M2"));
    assert_eq!(ctl(&mut skl, c().with_psb_freq(5).bits()), None);
    assert_eq!(ctl(&mut skl, c().with_psb_freq(6).bits()), Some("M2"));
    let mut adl = Rig::new("alderlake"); // CYC 0x003f
    assert_eq!(ctl(&mut adl, c().with_cyc_thresh(6).bits()), Some("M2"));
    let mut bdw = Rig::new("broadwell"); // no MTC, no PSB/CYC: fields reserved, 0 fine
    assert_eq!(ctl(&mut bdw, c().with_psb_freq(1).bits()), Some("M2"));
    assert_eq!(ctl(&mut bdw, 0), None);
}

#[test]
fn m2_ctl_addr_cfg_needs_a_range_and_a_defined_encoding() {
    let c = RtitCtl::new;
    let mut skl = Rig::new("skylake"); // RANGECNT 2
    assert_eq!(
        ctl(&mut skl, c().with_addr0_cfg(2).with_addr1_cfg(1).bits()),
        None
    );
    assert_eq!(ctl(&mut skl, c().with_addr0_cfg(3).bits()), Some("M2"));
    assert_eq!(ctl(&mut skl, c().with_addr2_cfg(1).bits()), Some("M2"));
}

#[test]
fn m2_ctl_output_scheme_needs_its_cpuid_bit() {
    let c = || RtitCtl::new().with_trace_en(true).with_branch_en(true);
    let mut bdw = Rig::new("broadwell"); // ToPA only
    assert_eq!(
        ctl(&mut bdw, c().bits()),
        Some("M2"),
        "single range without ECX[2]"
    );
    assert_eq!(ctl(&mut bdw, c().with_topa(true).bits()), None);
    let mut cpu = CpuProfile::named("skylake").unwrap();
    cpu.leaf14_0.ecx = 0x4; // single range only
    let mut r = Rig::with(cpu);
    assert_eq!(ctl(&mut r, RtitCtl::new().with_topa(true).bits()), Some("M2"));
}

#[test]
fn bdm106_broadwell_trace_en_needs_branch_en() {
    let topa = RtitCtl::new().with_trace_en(true).with_topa(true);
    let mut bdw = Rig::new("broadwell");
    assert_eq!(ctl(&mut bdw, topa.bits()), Some("BDM106"));
    assert_eq!(
        ctl(&mut bdw, topa.with_trace_en(false).bits()),
        None,
        "only when setting TraceEn"
    );
    let mut skl = Rig::new("skylake");
    assert_eq!(ctl(&mut skl, topa.bits()), None);
}

#[test]
fn m2_status_reserved_and_gated_bits() {
    let mut skl = Rig::new("skylake");
    for bit in [3, 8, 31, 49, 63] {
        assert_eq!(
            gp_rule(skl.wrmsr(IA32_RTIT_STATUS, 1 << bit)),
            Some("M2"),
            "bit {bit}"
        );
    }
    assert_eq!(
        gp_rule(skl.wrmsr(IA32_RTIT_STATUS, 1 << 6)),
        Some("M2"),
        "PendPSB needs EBX[6]"
    );
    assert_eq!(
        gp_rule(skl.wrmsr(IA32_RTIT_STATUS, 0x1_ffff << 32 | 1 << 4 | 1 << 5)),
        None
    );
    let mut adl = Rig::new("alderlake");
    assert_eq!(gp_rule(adl.wrmsr(IA32_RTIT_STATUS, 1 << 6 | 1 << 7)), None);
    let mut bdw = Rig::new("broadwell");
    assert_eq!(
        gp_rule(bdw.wrmsr(IA32_RTIT_STATUS, 1 << 32)),
        Some("M2"),
        "PacketByteCnt needs EBX[1]"
    );
}

#[test]
fn m2_status_processor_written_bits_are_ignored() {
    let mut r = Rig::new("skylake");
    r.wrmsr(IA32_RTIT_STATUS, 0b111 | 1 << 5).unwrap();
    assert_eq!(r.rdmsr(IA32_RTIT_STATUS), 1 << 5);
}

#[test]
fn m2_output_and_filter_msr_values() {
    let mut skl = Rig::new("skylake"); // MAXPHYADDR 39, 48-bit linear
    assert_eq!(gp_rule(skl.wrmsr(IA32_RTIT_OUTPUT_BASE, 1 << 39)), Some("M2"));
    assert_eq!(gp_rule(skl.wrmsr(IA32_RTIT_OUTPUT_BASE, (1 << 39) - 128)), None);
    assert_eq!(gp_rule(skl.wrmsr(IA32_RTIT_OUTPUT_BASE, 0x40)), Some("R7"));
    assert_eq!(gp_rule(skl.wrmsr(IA32_RTIT_CR3_MATCH, 0x1010)), Some("M2"));
    assert_eq!(gp_rule(skl.wrmsr(IA32_RTIT_CR3_MATCH, 0x1020)), None);
    assert_eq!(
        gp_rule(skl.wrmsr(IA32_RTIT_ADDR0_A, 0x0000_8000_0000_0000)),
        Some("M2")
    );
    assert_eq!(gp_rule(skl.wrmsr(IA32_RTIT_ADDR0_A, 0xffff_8000_0000_0000)), None);
    assert_eq!(
        gp_rule(skl.wrmsr(IA32_RTIT_ADDR0_B, 0x00ff_0000_0000_0000)),
        Some("M2")
    );
    let mut spr = Rig::new("sapphirerapids"); // 57-bit linear
    assert_eq!(gp_rule(spr.wrmsr(IA32_RTIT_ADDR0_B, 0x00ff_0000_0000_0000)), None);
    assert_eq!(
        gp_rule(spr.wrmsr(IA32_RTIT_OUTPUT_BASE, 1 << 51)),
        None,
        "MAXPHYADDR 52"
    );
    skl.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x1_0000_0000).unwrap();
    assert_eq!(
        skl.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS),
        0x1_0000_007f,
        "bits 6:0 read as ones"
    );
}

#[test]
fn m3_config_msr_writes_while_tracing_gp() {
    let mut r = Rig::new("skylake");
    r.table(0x1000, 0, &[common::region(0x10_0000, 0), common::end(0x1000)]);
    r.start_topa(0x1000, 0, 0);
    for msr in [
        IA32_RTIT_STATUS,
        IA32_RTIT_OUTPUT_BASE,
        IA32_RTIT_OUTPUT_MASK_PTRS,
        IA32_RTIT_CR3_MATCH,
        IA32_RTIT_ADDR0_A,
    ] {
        assert_eq!(gp_rule(r.wrmsr(msr, 0)), Some("M3"), "{msr:#x}");
    }
    let on = r.ctl;
    assert_eq!(ctl(&mut r, on.with_os(true).bits()), Some("M3"));
    assert_eq!(
        ctl(&mut r, on.bits()),
        None,
        "rewriting the current value does not fault"
    );
    assert_eq!(
        gp_rule(r.wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, 1 << 55)),
        None,
        "perfmon MSRs are not PT configuration"
    );
}

#[test]
fn m4_a_write_clearing_trace_en_may_change_other_bits() {
    let mut r = Rig::new("skylake");
    r.table(0x1000, 0, &[common::region(0x10_0000, 0), common::end(0x1000)]);
    r.start_topa(0x1000, 0, 0);
    assert_eq!(ctl(&mut r, RtitCtl::new().with_os(true).bits()), None);
    assert_eq!(r.rdmsr(IA32_RTIT_CTL), RtitCtl::new().with_os(true).bits());
}

#[test]
fn m6_cold_reset_clears_all_and_warm_reset_keeps_msrs_with_ip_filtering() {
    let mut r = Rig::new("skylake"); // EBX[2] = 1
    r.table(0x1000, 0, &[common::region(0x10_0000, 0), common::end(0x1000)]);
    r.wrmsr(IA32_RTIT_CR3_MATCH, 0x5000).unwrap();
    r.start_topa(0x1000, 0, 0).write(10);
    r.unit.reset(ResetKind::Warm);
    assert_eq!(r.rdmsr(IA32_RTIT_CTL), r.ctl.with_trace_en(false).bits());
    assert_eq!(r.rdmsr(IA32_RTIT_CR3_MATCH), 0x5000);
    assert_eq!(
        r.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS),
        0x7f | 10 << 32,
        "position written back"
    );
    r.unit.reset(ResetKind::Cold);
    assert_eq!(r.rdmsr(IA32_RTIT_CR3_MATCH), 0);
    assert_eq!(r.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0x7f);
    let mut b = Rig::new("broadwell"); // EBX[2] = 0: warm reset clears all
    b.wrmsr(IA32_RTIT_CR3_MATCH, 0x5000).unwrap();
    b.unit.reset(ResetKind::Warm);
    assert_eq!(b.rdmsr(IA32_RTIT_CR3_MATCH), 0);
}

// ---- differential property test -------------------------------------------------------------

/// The CTL #GP rules restated as "allowed bits" per CPUID capability, the way KVM's
/// `update_intel_pt_cfg`/`vmx_rtit_ctl_check` phrase them, written independently of ptemu's code.
fn reference_ctl_gp(cpu: &CpuProfile, old: u64, v: u64) -> bool {
    let (ebx, ecx) = (cpu.leaf14_0.ebx, cpu.leaf14_0.ecx);
    let (l1a, l1b) = (cpu.leaf14_1.eax, cpu.leaf14_1.ebx);
    if old & 1 == 1 && v & 1 == 1 && old != v {
        return true;
    }
    let mut allowed: u64 = 1 | 1 << 2 | 1 << 3 | 1 << 10 | 1 << 11 | 1 << 13;
    let caps: [(bool, u64); 10] = [
        (ebx & 1 != 0, 1 << 7),
        (ebx & 2 != 0, 1 << 1 | 0xf << 19 | 0xf << 24),
        (ebx & 8 != 0, 1 << 9 | 0xf << 14),
        (ebx & 16 != 0, 1 << 12 | 1 << 5),
        (ebx & 32 != 0, 1 << 4),
        (ebx & 64 != 0, 1 << 56),
        (ebx & 128 != 0, 1 << 31),
        (ebx & 256 != 0, 1 << 55),
        (ecx & 1 != 0, 1 << 8),
        (ecx & 8 != 0, 1 << 6),
    ];
    for (have, bits) in caps {
        if have {
            allowed |= bits;
        }
    }
    for n in 0..(l1a & 7) as u64 {
        allowed |= 0xf << (32 + 4 * n);
    }
    if v & !allowed != 0 {
        return true;
    }
    let field = |shift: u32| (v >> shift & 0xf) as u32;
    if ebx & 8 != 0 && (l1a >> 16) >> field(14) & 1 == 0 {
        return true;
    }
    if ebx & 2 != 0 && ((l1b & 0xffff) >> field(19) & 1 == 0 || (l1b >> 16) >> field(24) & 1 == 0) {
        return true;
    }
    if (0..4).any(|n| field(32 + 4 * n) > 2) {
        return true;
    }
    if v & 1 == 1 && v & (1 << 8 | 1 << 6) == 0 && ecx & 4 == 0 {
        return true;
    }
    v & 1 == 1 && v & 1 << 13 == 0 && cpu.errata.contains(Errata::BDM106)
}

fn any_profile() -> impl Strategy<Value = CpuProfile> {
    let named = prop::sample::select(CpuProfile::NAMES.to_vec()).prop_map(|n| CpuProfile::named(n).unwrap());
    let random = (any::<u16>(), 0u32..16, 0u32..5, any::<u32>(), any::<bool>()).prop_map(
        |(ebx, ecx, ranges, bitmaps, bdm)| {
            let mut cpu = CpuProfile::named("generic-max").unwrap();
            cpu.leaf14_0 = CpuidRegs {
                eax: 1,
                ebx: u32::from(ebx) & 0x1ff,
                ecx,
                edx: 0,
            };
            // Encoding 0 is allowed in every bitmap of every real part.
            cpu.leaf14_1 = CpuidRegs {
                eax: (bitmaps & 0xffff_0000) | 1 << 16 | ranges,
                ebx: bitmaps.rotate_left(7) | 0x0001_0001,
                ecx: 0,
                edx: 0,
            };
            cpu.errata = if bdm { Errata::BDM106 } else { Errata::empty() };
            cpu
        },
    );
    prop_oneof![named, random]
}

/// CTL values that hit the interesting fields often: a few random bits over a random base.
fn ctl_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| a & b & b.rotate_left(17) & 0x00ff_ffff_ffff_ffff),
        (0u64..1 << 16, 0u64..1 << 16)
            .prop_map(|(lo, fields)| lo | (fields & 0x0fff) << 14 | (fields >> 12) << 32),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// M2, M3, M4, BDM106: every CTL write faults exactly when the reference says so, and a
    /// faulting write leaves the register unchanged.
    #[test]
    fn m2_m3_m4_bdm106_ctl_gp_matches_the_reference(cpu in any_profile(), old in ctl_value(), v in ctl_value()) {
        let mut r = Rig::with(cpu.clone());
        let old = if r.wrmsr(IA32_RTIT_CTL, old).is_ok() { old } else { 0 };
        if old == 0 { r.wrmsr(IA32_RTIT_CTL, 0).unwrap(); }
        let got = r.wrmsr(IA32_RTIT_CTL, v);
        prop_assert_eq!(got.is_err(), reference_ctl_gp(&cpu, old, v), "old {:#x} new {:#x} -> {:?}", old, v, got);
        prop_assert_eq!(r.rdmsr(IA32_RTIT_CTL), if got.is_err() { old } else { v });
    }

    /// M2: STATUS writes fault exactly on reserved or ungated bits; bits 2:0 are ignored.
    #[test]
    fn m2_status_gp_matches_the_reference(cpu in any_profile(), v in any::<u64>()) {
        let mut r = Rig::with(cpu.clone());
        let mut writable: u64 = 0b111 | 1 << 4 | 1 << 5;
        if cpu.leaf14_0.ebx & 64 != 0 { writable |= 0b11 << 6; }
        if cpu.leaf14_0.ebx & 2 != 0 { writable |= 0x1_ffff << 32; }
        let got = r.wrmsr(IA32_RTIT_STATUS, v);
        prop_assert_eq!(got.is_err(), v & !writable != 0);
        prop_assert_eq!(r.rdmsr(IA32_RTIT_STATUS), if got.is_err() { 0 } else { v & !0b111 });
    }
}
