//! MSR addresses of the trace-output unit (pt-output.md §1).

/// IA32_PERF_GLOBAL_STATUS: bit 55 is Trace_ToPA_PMI (read-only).
pub const IA32_PERF_GLOBAL_STATUS: u32 = 0x38e;
/// IA32_PERF_GLOBAL_STATUS_RESET (OVF_CTRL): writing 1 to bit 55 clears Trace_ToPA_PMI.
pub const IA32_PERF_GLOBAL_STATUS_RESET: u32 = 0x390;
/// IA32_PERF_GLOBAL_STATUS_SET: writing 1 to bit 55 sets Trace_ToPA_PMI.
pub const IA32_PERF_GLOBAL_STATUS_SET: u32 = 0x391;
/// IA32_RTIT_OUTPUT_BASE.
pub const IA32_RTIT_OUTPUT_BASE: u32 = 0x560;
/// IA32_RTIT_OUTPUT_MASK_PTRS.
pub const IA32_RTIT_OUTPUT_MASK_PTRS: u32 = 0x561;
/// IA32_RTIT_CTL.
pub const IA32_RTIT_CTL: u32 = 0x570;
/// IA32_RTIT_STATUS.
pub const IA32_RTIT_STATUS: u32 = 0x571;
/// IA32_RTIT_CR3_MATCH.
pub const IA32_RTIT_CR3_MATCH: u32 = 0x572;
/// IA32_RTIT_ADDR0_A; ADDRn_A is at `0x580 + 2n`, ADDRn_B at `0x581 + 2n`.
pub const IA32_RTIT_ADDR0_A: u32 = 0x580;
/// IA32_RTIT_ADDR0_B.
pub const IA32_RTIT_ADDR0_B: u32 = 0x581;

/// An MSR the output unit models, decoded from its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msr {
    /// IA32_RTIT_CTL.
    Ctl,
    /// IA32_RTIT_STATUS.
    Status,
    /// IA32_RTIT_OUTPUT_BASE.
    OutputBase,
    /// IA32_RTIT_OUTPUT_MASK_PTRS.
    OutputMaskPtrs,
    /// IA32_RTIT_CR3_MATCH.
    Cr3Match,
    /// IA32_RTIT_ADDRn_A (`b == false`) or `_B` (`b == true`).
    Addr {
        /// Range number, 0..=3.
        n: usize,
        /// The B (upper bound) register.
        b: bool,
    },
    /// IA32_PERF_GLOBAL_STATUS.
    PerfGlobalStatus,
    /// IA32_PERF_GLOBAL_STATUS_RESET.
    PerfGlobalStatusReset,
    /// IA32_PERF_GLOBAL_STATUS_SET.
    PerfGlobalStatusSet,
}

impl Msr {
    /// The ADDR0_A, ADDR0_B, ... ADDR3_B values a sequence of MSR writes (address, value) leaves:
    /// the last write of each wins, an unwritten one is 0. Other MSRs are passed over.
    pub fn addr_values(writes: impl IntoIterator<Item = (u32, u64)>) -> [u64; 8] {
        let mut v = [0; 8];
        for (addr, value) in writes {
            if let Some(Msr::Addr { n, b }) = Msr::from_address(addr) {
                v[2 * n + usize::from(b)] = value;
            }
        }
        v
    }

    /// Decodes an MSR address; `None` for MSRs outside the model.
    pub fn from_address(addr: u32) -> Option<Self> {
        Some(match addr {
            IA32_RTIT_CTL => Msr::Ctl,
            IA32_RTIT_STATUS => Msr::Status,
            IA32_RTIT_OUTPUT_BASE => Msr::OutputBase,
            IA32_RTIT_OUTPUT_MASK_PTRS => Msr::OutputMaskPtrs,
            IA32_RTIT_CR3_MATCH => Msr::Cr3Match,
            0x580..=0x587 => {
                let k = (addr - IA32_RTIT_ADDR0_A) as usize;
                Msr::Addr {
                    n: k / 2,
                    b: k % 2 == 1,
                }
            }
            IA32_PERF_GLOBAL_STATUS => Msr::PerfGlobalStatus,
            IA32_PERF_GLOBAL_STATUS_RESET => Msr::PerfGlobalStatusReset,
            IA32_PERF_GLOBAL_STATUS_SET => Msr::PerfGlobalStatusSet,
            _ => return None,
        })
    }

    /// The MSR address.
    pub fn address(self) -> u32 {
        match self {
            Msr::Ctl => IA32_RTIT_CTL,
            Msr::Status => IA32_RTIT_STATUS,
            Msr::OutputBase => IA32_RTIT_OUTPUT_BASE,
            Msr::OutputMaskPtrs => IA32_RTIT_OUTPUT_MASK_PTRS,
            Msr::Cr3Match => IA32_RTIT_CR3_MATCH,
            Msr::Addr { n, b } => IA32_RTIT_ADDR0_A + 2 * n as u32 + b as u32,
            Msr::PerfGlobalStatus => IA32_PERF_GLOBAL_STATUS,
            Msr::PerfGlobalStatusReset => IA32_PERF_GLOBAL_STATUS_RESET,
            Msr::PerfGlobalStatusSet => IA32_PERF_GLOBAL_STATUS_SET,
        }
    }

    /// The SDM name, e.g. `IA32_RTIT_CTL`.
    pub fn name(self) -> String {
        match self {
            Msr::Ctl => "IA32_RTIT_CTL".into(),
            Msr::Status => "IA32_RTIT_STATUS".into(),
            Msr::OutputBase => "IA32_RTIT_OUTPUT_BASE".into(),
            Msr::OutputMaskPtrs => "IA32_RTIT_OUTPUT_MASK_PTRS".into(),
            Msr::Cr3Match => "IA32_RTIT_CR3_MATCH".into(),
            Msr::Addr { n, b } => format!("IA32_RTIT_ADDR{n}_{}", if b { 'B' } else { 'A' }),
            Msr::PerfGlobalStatus => "IA32_PERF_GLOBAL_STATUS".into(),
            Msr::PerfGlobalStatusReset => "IA32_PERF_GLOBAL_STATUS_RESET".into(),
            Msr::PerfGlobalStatusSet => "IA32_PERF_GLOBAL_STATUS_SET".into(),
        }
    }
}
