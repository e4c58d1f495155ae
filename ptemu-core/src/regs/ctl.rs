//! IA32_RTIT_CTL (MSR 0x570), bit-exact (pt-output.md §2).

use modular_bitfield::prelude::*;

/// IA32_RTIT_CTL: the trace control register. All bits reset to 0.
#[bitfield]
#[repr(u64)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RtitCtl {
    /// Bit 0: master enable.
    pub trace_en: bool,
    /// Bit 1: CYC packets.
    pub cyc_en: bool,
    /// Bit 2: trace at CPL 0.
    pub os: bool,
    /// Bit 3: trace at CPL > 0.
    pub user: bool,
    /// Bit 4: power event packets.
    pub pwr_evt_en: bool,
    /// Bit 5: FUP after each PTW.
    pub fup_on_ptw: bool,
    /// Bit 6: output to the trace transport subsystem.
    pub fabric_en: bool,
    /// Bit 7: CR3 filtering.
    pub cr3_filter: bool,
    /// Bit 8: 1 = ToPA output, 0 = single-range output.
    pub topa: bool,
    /// Bit 9: MTC packets.
    pub mtc_en: bool,
    /// Bit 10: TSC packets.
    pub tsc_en: bool,
    /// Bit 11: disable RET compression.
    pub dis_retc: bool,
    /// Bit 12: PTWRITE packets.
    pub ptw_en: bool,
    /// Bit 13: COFI packets.
    pub branch_en: bool,
    /// Bits 17:14: MTC frequency encoding.
    pub mtc_freq: B4,
    #[skip]
    __: B1,
    /// Bits 22:19: CYC threshold encoding.
    pub cyc_thresh: B4,
    #[skip]
    __: B1,
    /// Bits 27:24: PSB frequency encoding.
    pub psb_freq: B4,
    #[skip]
    __: B3,
    /// Bit 31: Event Trace packets.
    pub event_en: bool,
    /// Bits 35:32: ADDR0 range configuration.
    pub addr0_cfg: B4,
    /// Bits 39:36: ADDR1 range configuration.
    pub addr1_cfg: B4,
    /// Bits 43:40: ADDR2 range configuration.
    pub addr2_cfg: B4,
    /// Bits 47:44: ADDR3 range configuration.
    pub addr3_cfg: B4,
    #[skip]
    __: B7,
    /// Bit 55: disable TNT packets.
    pub dis_tnt: bool,
    /// Bit 56: PSB and PMI preservation on enable.
    pub inject_psb_pmi_on_enable: bool,
    #[skip]
    __: B7,
}

impl RtitCtl {
    /// Bits no CPU defines: 18, 23, 30:28, 54:48, 63:57.
    pub const ALWAYS_RESERVED: u64 = 1 << 18 | 1 << 23 | 0b111 << 28 | 0x7f << 48 | 0x7f << 57;

    /// The ADDRn_CFG field for range `n` (0..=3).
    pub fn addr_cfg(&self, n: usize) -> u8 {
        match n {
            0 => self.addr0_cfg(),
            1 => self.addr1_cfg(),
            2 => self.addr2_cfg(),
            _ => self.addr3_cfg(),
        }
    }

    /// The raw MSR value.
    pub fn bits(self) -> u64 {
        u64::from(self)
    }
}
