//! Base-128 varints, the integers of protobuf's wire format (and of the QEMU plugin's stream):
//! one decoder for the gem5 reader's length prefixes and the QEMU stream's fields ([`Varint`],
//! a byte at a time), gem5's field walks ([`read`]) and the fast path's word-at-a-time form
//! ([`varint`]), which the tests hold to the general one. Writers use prost's `encode_varint`.

/// A signed value as the unsigned one protobuf's `sint` fields carry: small magnitudes, either
/// sign, stay small (0, -1, 1, -2 … become 0, 1, 2, 3 …).
#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The signed value [`zigzag`] made `v` from.
#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A varint of 1 to 8 bytes at `pos` that ends before `end`: its value and the position after it;
/// `None` if it is longer or runs past `end`. With 8 bytes of `buf` in reach, the end is found and
/// the 7-bit groups packed without a loop or a branch on the length, one-byte varints included (a
/// test for those first mispredicts on gem5's mix of short and long fields).
#[inline(always)]
pub(crate) fn varint(buf: &[u8], end: usize, pos: usize) -> Option<(u64, usize)> {
    if pos >= end {
        return None;
    }
    if let Some(word) = buf.get(pos..).and_then(|b| b.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*word);
        let ends = !w & 0x8080_8080_8080_8080;
        let len = ends.trailing_zeros() as usize / 8 + 1;
        return (ends != 0 && pos + len <= end).then(|| (pack7(w & (u64::MAX >> (64 - 8 * len))), pos + len));
    }
    varint_bytewise(&buf[..end], pos)
}

/// The 7-bit groups of up to 8 varint bytes (little-endian in `w`, continuation bits included),
/// packed into one value: pairs of groups, then pairs of pairs, then the two halves.
#[inline(always)]
fn pack7(w: u64) -> u64 {
    let x = w & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// [`varint`] one byte at a time (within 8 bytes of the end of `buf`).
#[cold]
fn varint_bytewise(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    read(buf, pos, 8)
}

/// A varint of at most `max_bytes` bytes (10 hold any 64-bit value) at `pos`, one byte at a time:
/// its value and the position after it; `None` if it is longer or runs past the end of `buf`.
pub(crate) fn read(buf: &[u8], pos: usize, max_bytes: usize) -> Option<(u64, usize)> {
    let mut v = Varint::default();
    for (i, &b) in buf.get(pos..)?.iter().take(max_bytes).enumerate() {
        if v.push(b) {
            return Some((v.value, pos + i + 1));
        }
    }
    None
}

/// A varint taken one byte at a time (the QEMU stream's, shared with its crate).
pub(crate) use ptemu_wire::Varint;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Appends the varint of `v`.
    pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A value whose varint is `len` bytes long (1..=10).
    pub(crate) fn value_of_len(len: u32, low: u64) -> u64 {
        if len >= 10 {
            return 1 << 63 | low;
        }
        let top = 1u64 << (7 * (len - 1));
        if len == 1 {
            low & 0x7f
        } else {
            top | (low % top)
        }
    }

    #[test]
    fn varint_reads_every_length_like_the_bytewise_form() {
        for len in 1..=10u32 {
            for low in [0u64, 1, 0x55, 0x1234_5678_9abc_def0, u64::MAX] {
                let v = value_of_len(len, low);
                for pad in [0usize, 3, 12] {
                    let mut buf = Vec::new();
                    put_varint(&mut buf, v);
                    assert_eq!(buf.len() as u32, len);
                    buf.extend(std::iter::repeat_n(0xaa, pad));
                    let fast = varint(&buf, len as usize, 0);
                    assert_eq!(
                        varint(&buf, buf.len(), 0),
                        fast,
                        "bytes past the end are not used"
                    );
                    let slow = varint_bytewise(&buf, 0);
                    assert_eq!(
                        read(&buf, 0, 10),
                        Some((v, len as usize)),
                        "the general form reads all"
                    );
                    assert_eq!(fast, slow, "len {len} value {v:#x} pad {pad}");
                    if len <= 8 {
                        assert_eq!(fast, Some((v, len as usize)));
                    } else {
                        assert_eq!(fast, None, "9- and 10-byte varints are declined");
                    }
                }
            }
        }
        assert_eq!(varint(&[0x80, 0x80], 2, 0), None, "runs past the end");
        let eight = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0];
        assert_eq!(varint(&eight, 7, 0), None, "ends past `end`, inside `buf`");
        assert_eq!(varint(&eight, 8, 0), Some(((1 << 50) - 1, 8)));
    }
}
