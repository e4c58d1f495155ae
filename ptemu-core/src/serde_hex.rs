//! Serializing 64-bit register values and addresses as `"0x..."` strings: JSON numbers above 2^53
//! are not exact in JavaScript or jq, and MSRs use all 64 bits (`IA32_PERF_GLOBAL_STATUS[55]`,
//! OutputOffset in MASK_PTRS\[63:32\]). For `#[serde(serialize_with = "...")]`.

use serde::Serializer;

/// `value` as a lowercase `"0x..."` string.
pub fn u64<S: Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{value:#x}"))
}

/// `Some(value)` as a `"0x..."` string, `None` as null.
pub fn option<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => u64(v, s),
        None => s.serialize_none(),
    }
}
