//! The ToPA PMI bit of IA32_PERF_GLOBAL_STATUS (0x38E) and its RESET/SET companions (0x390/0x391).

use bitflags::bitflags;

bitflags! {
    /// The bits of IA32_PERF_GLOBAL_STATUS that ptemu models.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct GlobalStatus: u64 {
        /// Bit 55: Trace_ToPA_PMI, set when a ToPA INT region fills (P1).
        const TRACE_TOPA_PMI = 1 << 55;
    }
}
