//! IA32_RTIT_OUTPUT_BASE (0x560) and IA32_RTIT_OUTPUT_MASK_PTRS (0x561), bit-exact (pt-output.md §4).

use modular_bitfield::prelude::*;

/// The largest ToPA entry index, the width of MASK_PTRS' index field (bits 31:7, 25 bits): a table
/// holds at most 2^25 entries (T2, W5).
pub const MAX_INDEX: u32 = (1 << 25) - 1;

/// IA32_RTIT_OUTPUT_BASE: the ToPA table base or the single-range base.
#[bitfield]
#[repr(u64)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct OutputBase {
    /// Bits 6:0: reserved, #GP if set (R7).
    pub reserved: B7,
    /// Bits 63:7: BasePhysAddr >> 7 (bits at or above MAXPHYADDR #GP).
    pub base_hi: B57,
}

impl OutputBase {
    /// The physical address the register holds.
    pub fn address(self) -> u64 {
        u64::from(self) & !0x7f
    }
}

/// IA32_RTIT_OUTPUT_MASK_PTRS: the single-range mask, or the ToPA entry index, plus the output offset.
#[bitfield]
#[repr(u64)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct MaskPtrs {
    /// Bits 6:0: always read as 0x7F; writes ignored.
    pub lower_mask: B7,
    /// Bits 31:7: mask bits 31:7 (single range) or the current entry index (ToPA).
    pub mask_or_table_offset: B25,
    /// Bits 63:32: byte offset of the next write.
    pub output_offset: B32,
}

impl MaskPtrs {
    /// The value bits 6:0 always read as.
    pub const LOWER_MASK: u64 = 0x7f;

    /// Builds the register from a ToPA entry index and an output offset.
    pub fn topa(index: u32, output_offset: u32) -> Self {
        Self::new()
            .with_lower_mask(0x7f)
            .with_mask_or_table_offset(index & MAX_INDEX)
            .with_output_offset(output_offset)
    }

    /// The single-range mask, MSR bits 31:0 (R1).
    pub fn range_mask(self) -> u32 {
        (u64::from(self) as u32) | 0x7f
    }

    /// The raw MSR value.
    pub fn bits(self) -> u64 {
        u64::from(self)
    }
}

/// IA32_RTIT_CR3_MATCH (0x572): the CR3 value CR3 filtering compares against.
#[bitfield]
#[repr(u64)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cr3Match {
    /// Bits 4:0: reserved, #GP if set.
    pub reserved: B5,
    /// Bits 63:5: CR3 bits 63:5.
    pub cr3_hi: B59,
}
