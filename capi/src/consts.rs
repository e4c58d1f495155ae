//! Register numbers and bit layouts a C emulator needs to program the unit (SDM Vol. 3C §33.2;
//! `spec/output.md`), checked against ptemu-core's own definitions by the tests below.

// `as u64` is what makes cbindgen write `(uint64_t)VALUE` in the header: without it a bit such
// as 1 << 55 is a plain (signed) literal in C.
#![allow(clippy::unnecessary_cast)]

/// IA32_PERF_GLOBAL_STATUS (0x38E).
pub const PTEMU_IA32_PERF_GLOBAL_STATUS: u32 = 0x38e;
/// IA32_PERF_GLOBAL_STATUS_RESET (0x390; write 1s to clear status bits).
pub const PTEMU_IA32_PERF_GLOBAL_STATUS_RESET: u32 = 0x390;
/// IA32_PERF_GLOBAL_STATUS_SET (0x391).
pub const PTEMU_IA32_PERF_GLOBAL_STATUS_SET: u32 = 0x391;
/// IA32_RTIT_OUTPUT_BASE (0x560).
pub const PTEMU_IA32_RTIT_OUTPUT_BASE: u32 = 0x560;
/// IA32_RTIT_OUTPUT_MASK_PTRS (0x561).
pub const PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS: u32 = 0x561;
/// IA32_RTIT_CTL (0x570).
pub const PTEMU_IA32_RTIT_CTL: u32 = 0x570;
/// IA32_RTIT_STATUS (0x571).
pub const PTEMU_IA32_RTIT_STATUS: u32 = 0x571;
/// IA32_RTIT_CR3_MATCH (0x572).
pub const PTEMU_IA32_RTIT_CR3_MATCH: u32 = 0x572;
/// IA32_RTIT_ADDR0_A (0x580); ADDRn_A is this + 2n, ADDRn_B this + 2n + 1.
pub const PTEMU_IA32_RTIT_ADDR0_A: u32 = 0x580;

/// IA32_PERF_GLOBAL_STATUS bit 55: a ToPA PMI is pending (P1).
pub const PTEMU_GLOBAL_STATUS_TOPA_PMI: u64 = 0x0080_0000_0000_0000 as u64;

/// IA32_RTIT_CTL bit 0: TraceEn.
pub const PTEMU_CTL_TRACE_EN: u64 = 0x1 as u64;
/// IA32_RTIT_CTL bit 2: OS (trace CPL 0).
pub const PTEMU_CTL_OS: u64 = 0x4 as u64;
/// IA32_RTIT_CTL bit 3: User (trace CPL > 0).
pub const PTEMU_CTL_USER: u64 = 0x8 as u64;
/// IA32_RTIT_CTL bit 8: ToPA output (else single range).
pub const PTEMU_CTL_TOPA: u64 = 0x100 as u64;
/// IA32_RTIT_CTL bit 10: TSCEn.
pub const PTEMU_CTL_TSC_EN: u64 = 0x400 as u64;
/// IA32_RTIT_CTL bit 11: DisRETC.
pub const PTEMU_CTL_DIS_RETC: u64 = 0x800 as u64;
/// IA32_RTIT_CTL bit 13: BranchEn.
pub const PTEMU_CTL_BRANCH_EN: u64 = 0x2000 as u64;

/// IA32_RTIT_STATUS bit 4: Error (an operational error stopped output, E3).
pub const PTEMU_STATUS_ERROR: u64 = 0x10 as u64;
/// IA32_RTIT_STATUS bit 5: Stopped (ToPA STOP or TraceStop).
pub const PTEMU_STATUS_STOPPED: u64 = 0x20 as u64;

/// ToPA entry bit 0: END (the base is the next table).
pub const PTEMU_TOPA_END: u64 = 0x1 as u64;
/// ToPA entry bit 2: INT (a PMI when the region fills).
pub const PTEMU_TOPA_INT: u64 = 0x4 as u64;
/// ToPA entry bit 4: STOP (output stops when the region fills).
pub const PTEMU_TOPA_STOP: u64 = 0x10 as u64;
/// ToPA entry bits 9:6 hold the size code: the region is 4 KiB << code.
pub const PTEMU_TOPA_SIZE_SHIFT: u32 = 6;

#[cfg(test)]
mod tests {
    use super::*;
    use ptemu_core::output::TopaEntry;
    use ptemu_core::regs::{msr, GlobalStatus, RtitCtl, RtitStatus};

    #[test]
    fn the_c_constants_are_ptemu_cores() {
        assert_eq!(PTEMU_IA32_PERF_GLOBAL_STATUS, msr::IA32_PERF_GLOBAL_STATUS);
        assert_eq!(
            PTEMU_IA32_PERF_GLOBAL_STATUS_RESET,
            msr::IA32_PERF_GLOBAL_STATUS_RESET
        );
        assert_eq!(
            PTEMU_IA32_PERF_GLOBAL_STATUS_SET,
            msr::IA32_PERF_GLOBAL_STATUS_SET
        );
        assert_eq!(PTEMU_IA32_RTIT_OUTPUT_BASE, msr::IA32_RTIT_OUTPUT_BASE);
        assert_eq!(PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, msr::IA32_RTIT_OUTPUT_MASK_PTRS);
        assert_eq!(PTEMU_IA32_RTIT_CTL, msr::IA32_RTIT_CTL);
        assert_eq!(PTEMU_IA32_RTIT_STATUS, msr::IA32_RTIT_STATUS);
        assert_eq!(PTEMU_IA32_RTIT_CR3_MATCH, msr::IA32_RTIT_CR3_MATCH);
        assert_eq!(PTEMU_IA32_RTIT_ADDR0_A, msr::IA32_RTIT_ADDR0_A);
        assert_eq!(PTEMU_GLOBAL_STATUS_TOPA_PMI, GlobalStatus::TRACE_TOPA_PMI.bits());
        let c = RtitCtl::new;
        assert_eq!(PTEMU_CTL_TRACE_EN, c().with_trace_en(true).bits());
        assert_eq!(PTEMU_CTL_OS, c().with_os(true).bits());
        assert_eq!(PTEMU_CTL_USER, c().with_user(true).bits());
        assert_eq!(PTEMU_CTL_TOPA, c().with_topa(true).bits());
        assert_eq!(PTEMU_CTL_TSC_EN, c().with_tsc_en(true).bits());
        assert_eq!(PTEMU_CTL_DIS_RETC, c().with_dis_retc(true).bits());
        assert_eq!(PTEMU_CTL_BRANCH_EN, c().with_branch_en(true).bits());
        assert_eq!(PTEMU_STATUS_ERROR, RtitStatus::new().with_error(true).bits());
        assert_eq!(PTEMU_STATUS_STOPPED, RtitStatus::new().with_stopped(true).bits());
        let r = TopaEntry::region(0x5000, 3);
        assert_eq!(
            r.with_int(true).bits(),
            0x5000 | 3 << PTEMU_TOPA_SIZE_SHIFT | PTEMU_TOPA_INT
        );
        assert_eq!(
            r.with_stop(true).bits(),
            0x5000 | 3 << PTEMU_TOPA_SIZE_SHIFT | PTEMU_TOPA_STOP
        );
        assert_eq!(TopaEntry::end_to(0x7000).bits(), 0x7000 | PTEMU_TOPA_END);
    }
}
