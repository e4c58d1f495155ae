//! Reading and writing 12-byte `p2AddrTr` records: the fixed-record reader and writer shared
//! with the 6-byte format, and the block decode (one copy on a little-endian host).

use super::record::{Record, RECORD_LEN};
use crate::sources::fixed::{decode_each, fixed_record};

/// Streams 12-byte records from an [`crate::sources::Input`].
pub type Reader = crate::sources::fixed::FixedReader<Record>;

/// Writes 12-byte records, the same bytes the reader reads.
pub type Writer<W> = crate::sources::fixed::FixedWriter<W, Record>;

fixed_record!(Record, RECORD_LEN, decode_all = decode_all);

const _: () = assert!(std::mem::size_of::<Record>() == RECORD_LEN && std::mem::align_of::<Record>() == 4);

/// Appends the records of `bytes` (a whole number of 12-byte records) to `out`. On a
/// little-endian host a [`Record`] is its stored bytes (`repr(C)`, little-endian integers, no
/// padding, every byte value valid), so the block is one copy; elsewhere one record at a time.
#[inline]
fn decode_all(bytes: &[u8], out: &mut Vec<Record>) {
    debug_assert_eq!(bytes.len() % RECORD_LEN, 0);
    if cfg!(target_endian = "little") {
        let n = bytes.len() / RECORD_LEN;
        out.reserve(n);
        // SAFETY: `n` records are reserved; the copy writes `n * RECORD_LEN` bytes, exactly
        // those records (size_of::<Record>() == RECORD_LEN, asserted above), from `bytes`, which
        // holds at least that many and cannot overlap `out`'s spare capacity. Every byte
        // pattern is a valid `Record`, and on a little-endian host it is the record
        // `Record::from_bytes` gives (the tests check it).
        unsafe {
            let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, n * RECORD_LEN);
            out.set_len(out.len() + n);
        }
    } else {
        decode_each(bytes, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::fixed::check_decode_all;
    use proptest::prelude::*;

    proptest! {
        /// The block decode gives the records `from_bytes` gives one at a time, for any bytes and
        /// any count, appended after what `out` already held.
        #[test]
        fn block_decode_matches_from_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            check_decode_all(&bytes, Record::from_bytes(&[7; RECORD_LEN]))?;
        }
    }
}
