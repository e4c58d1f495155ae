//! IA32_RTIT_STATUS (MSR 0x571), bit-exact (pt-output.md §3).

use modular_bitfield::prelude::*;

/// IA32_RTIT_STATUS: tracing state written by the processor.
#[bitfield]
#[repr(u64)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RtitStatus {
    /// Bit 0: the current IP is inside a tracing range.
    pub filter_en: bool,
    /// Bit 1: the context (CPL, CR3) is traced.
    pub context_en: bool,
    /// Bit 2: TraceEn=1 and neither Stopped nor Error.
    pub trigger_en: bool,
    #[skip]
    __: B1,
    /// Bit 4: an operational error happened.
    pub error: bool,
    /// Bit 5: ToPA STOP or IP TraceStop happened.
    pub stopped: bool,
    /// Bit 6: a PSB is pending (PSB/PMI preservation).
    pub pend_psb: bool,
    /// Bit 7: a ToPA PMI is pending (PSB/PMI preservation).
    pub pend_topa_pmi: bool,
    #[skip]
    __: B24,
    /// Bits 48:32: packet bytes sent, used to schedule PSBs.
    pub packet_byte_cnt: B17,
    #[skip]
    __: B15,
}

impl RtitStatus {
    /// Bits 3, 31:8 and 63:49, reserved on every CPU.
    pub const ALWAYS_RESERVED: u64 = 1 << 3 | 0xff_ffff << 8 | 0x7fff << 49;
    /// FilterEn, ContextEn and TriggerEn: processor-written, WRMSR ignores them.
    pub const WRITE_IGNORED: u64 = 0b111;
    /// Mask of the 17-bit PacketByteCnt field.
    pub const PACKET_BYTE_CNT_MASK: u64 = 0x1_ffff << 32;

    /// The raw MSR value.
    pub fn bits(self) -> u64 {
        u64::from(self)
    }
}
