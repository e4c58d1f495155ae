//! Single-range output configuration (pt-output.md §7, R1–R7).

use super::violation::Violation;
use crate::regs::{MaskPtrs, OutputBase};
use crate::rules::Rule;

/// A validated single output range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeConfig {
    /// First byte of the range: `OUTPUT_BASE & !mask` (R1).
    pub base: u64,
    /// `MASK_PTRS[31:0]`, low 7 bits always 1; the range is `mask + 1` bytes (R2).
    pub mask: u64,
    /// Offset of the next byte, 0..=mask.
    pub offset: u64,
}

/// Checks the single-range MSRs as TraceEn 0->1 does (R4a, R4b, R4c).
pub fn check_range(base: OutputBase, ptrs: MaskPtrs) -> Result<RangeConfig, Violation> {
    let mask = u64::from(ptrs.range_mask());
    let fail = |rule, msg| Err(Violation::in_msrs(rule, msg));
    if (mask + 1) & mask != 0 {
        return fail(
            Rule::R4a,
            format!("mask {mask:#x} is not contiguous ones from bit 0"),
        );
    }
    let base = base.address();
    if base & mask != 0 {
        return fail(
            Rule::R4b,
            format!("base {base:#x} is not aligned to the range size {:#x}", mask + 1),
        );
    }
    let offset = u64::from(ptrs.output_offset());
    if offset > mask {
        return fail(
            Rule::R4c,
            format!("OutputOffset {offset:#x} is past the mask {mask:#x}"),
        );
    }
    Ok(RangeConfig { base, mask, offset })
}
