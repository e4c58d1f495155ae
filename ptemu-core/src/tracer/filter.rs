//! Filtering: ContextEn (CPL and CR3), FilterEn (the ADDRn ranges) and PacketEn
//! (spec/generation.md, filtering rules).

use super::*;

/// The CR3 bits CR3 filtering compares with IA32_RTIT_CR3_MATCH: 63:5 (bits 4:0 are ignored).
pub(super) const CR3_MATCH_MASK: u64 = !0x1f;

impl Tracer {
    #[inline]
    pub(super) fn context_en(&self) -> bool {
        let level = if self.arch.cpl == 0 {
            self.ctl.os()
        } else {
            self.ctl.user()
        };
        level && (!self.ctl.cr3_filter() || self.arch.cr3 & CR3_MATCH_MASK == self.cr3_match)
    }

    #[inline]
    pub(super) fn filter_en(&self, ip: u64) -> bool {
        self.filter_ranges.is_empty() || in_any(&self.filter_ranges, ip)
    }

    /// PacketEn at `ip` in the current context (FLT1, FLT2).
    #[inline]
    pub(super) fn packet_en_at(&self, ip: u64) -> bool {
        self.triggered && self.ctl.branch_en() && self.context_en() && self.filter_en(ip)
    }
}

pub(super) fn in_any(ranges: &[(u64, u64)], ip: u64) -> bool {
    ranges.iter().any(|&(a, b)| a <= ip && ip <= b)
}
