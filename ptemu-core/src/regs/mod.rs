//! The trace-output unit's registers: MSR layouts, CPU profiles and the #GP rules.

pub mod check;
pub mod cpu;
pub mod ctl;
pub mod ctl_text;
pub mod fault;
pub mod msr;
pub mod output;
pub mod perf;
pub mod status;

pub use cpu::{
    CpuProfile, CpuSignature, CpuidRegs, Errata, Leaf14Ebx, Leaf14Ecx, PacketStyle, UnknownErratum,
};
pub use ctl::RtitCtl;
pub use fault::{GpFault, GpReason};
pub use msr::Msr;
pub use output::{Cr3Match, MaskPtrs, OutputBase};
pub use perf::GlobalStatus;
pub use status::RtitStatus;

/// The architectural values of the output unit's MSRs, as RDMSR would return them with TraceEn=0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterFile {
    /// IA32_RTIT_CTL.
    pub ctl: RtitCtl,
    /// IA32_RTIT_STATUS.
    pub status: RtitStatus,
    /// IA32_RTIT_OUTPUT_BASE.
    pub output_base: OutputBase,
    /// IA32_RTIT_OUTPUT_MASK_PTRS.
    pub mask_ptrs: MaskPtrs,
    /// IA32_RTIT_CR3_MATCH.
    pub cr3_match: Cr3Match,
    /// IA32_RTIT_ADDRn_A / _B, indexed `[n][0 = A, 1 = B]`: plain 64-bit canonical linear addresses
    /// (RIP when CPUID.14H.0:ECX\[31\]=0), no sub-fields.
    pub addr: [[u64; 2]; 4],
    /// IA32_PERF_GLOBAL_STATUS (bit 55 only).
    pub global_status: GlobalStatus,
}

impl Default for RegisterFile {
    fn default() -> Self {
        RegisterFile {
            ctl: RtitCtl::new(),
            status: RtitStatus::new(),
            output_base: OutputBase::new(),
            mask_ptrs: MaskPtrs::new().with_lower_mask(0x7f),
            cr3_match: Cr3Match::new(),
            addr: [[0; 2]; 4],
            global_status: GlobalStatus::empty(),
        }
    }
}
