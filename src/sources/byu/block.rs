//! The block decoder of 6-byte BYU records: two records per 16-byte byte shuffle where the CPU
//! has SSSE3, one record at a time otherwise (and for the last one or two records). It gives
//! exactly the records [`Record::from_bytes`] gives one at a time (the tests check it on random
//! bytes).

use super::record::{Record, RECORD_LEN};
use crate::sources::fixed::decode_each;

const _: () = assert!(std::mem::size_of::<Record>() == 8 && std::mem::align_of::<Record>() == 4);

/// Appends the records of `bytes` (a whole number of 6-byte records) to `out`.
#[inline]
pub(crate) fn decode_all(bytes: &[u8], out: &mut Vec<Record>) {
    debug_assert_eq!(bytes.len() % RECORD_LEN, 0);
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3 (checked just above).
        let done = unsafe { shuffle_pairs(bytes, out) };
        return decode_each(&bytes[done..], out);
    }
    decode_each(bytes, out)
}

/// Decodes pairs of records while 16 bytes can be loaded (all but the last two records at
/// most); returns the bytes consumed (a multiple of 12). Each 16-byte load holds two records
/// and a part of a third; one shuffle puts both in `Record` layout: the address byte-swapped,
/// byte enables and control copied, padding zeroed.
///
/// # Safety
/// The CPU must support SSSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn shuffle_pairs(bytes: &[u8], out: &mut Vec<Record>) -> usize {
    use std::arch::x86_64::*;
    const PAIR: usize = 2 * RECORD_LEN;
    // Pairs whose 16-byte load stays inside `bytes`.
    let pairs = bytes.len().saturating_sub(16 - PAIR) / PAIR;
    out.reserve(2 * pairs);
    // Output byte i takes input byte MASK[i]; -1 (high bit set) writes 0.
    let mask = _mm_setr_epi8(3, 2, 1, 0, 4, 5, -1, -1, 9, 8, 7, 6, 10, 11, -1, -1);
    let src = bytes.as_ptr();
    let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    for k in 0..pairs {
        // SAFETY: the load reads bytes 12k..12k+16, inside `bytes` (the `pairs` bound); the
        // store writes records 2k and 2k+1 of the `2 * pairs` reserved above. Every byte pattern
        // is a valid `Record` (integer fields; the padding is written as zero).
        unsafe {
            let x = _mm_loadu_si128(src.add(PAIR * k).cast());
            _mm_storeu_si128(dst.add(16 * k).cast(), _mm_shuffle_epi8(x, mask));
        }
    }
    // SAFETY: the first `2 * pairs` spare records were written above.
    unsafe { out.set_len(out.len() + 2 * pairs) };
    PAIR * pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::fixed::check_decode_all;
    use proptest::prelude::*;

    proptest! {
        /// The block decoder (the shuffle where SSSE3 is present) gives the records `from_bytes`
        /// gives, for any bytes and any count, starting at any of the shuffle's record pairs,
        /// appended after what `out` already held.
        #[test]
        fn block_decoders_match_from_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..160),
            skip in 0usize..6,
        ) {
            let bytes = &bytes[(skip * RECORD_LEN).min(bytes.len())..];
            check_decode_all(bytes, Record::new(1, 2, super::super::CycleType::Fetch))?;
        }
    }

    /// A long block: every record in place, the tail records included.
    #[test]
    fn a_long_block_decodes_record_by_record() {
        let bytes: Vec<u8> = (0..RECORD_LEN * 1001).map(|i| (i * 37 + i / 7) as u8).collect();
        check_decode_all(&bytes, Record::new(1, 2, super::super::CycleType::Fetch)).unwrap();
    }
}
