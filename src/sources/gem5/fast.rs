//! The fast path for the two record messages: one pass over the wire format that fills the
//! record's fields and notes which are present, in place of a field scan plus prost's decode.
//!
//! It takes only the messages gem5 writes: every field a known one of its message with wire type
//! 0 (varint), each varint at most 8 bytes long (values below 2^56; gem5's addresses and PCs are
//! 48-bit). Anything else (an unknown field, a packed repeated field, a 9- or 10-byte varint, a
//! broken message) is declined, and the reader decodes the
//! message with prost as before, so every error still comes from one place. On what it takes it
//! yields exactly prost's record (later values of a field replace earlier ones, repeated fields
//! append, 32-bit fields keep the low 32 bits of the varint): `tests` checks that against prost
//! on generated valid and spoiled messages.

use super::messages::{InstDepRecord, Packet};
use crate::sources::varint::varint;

/// Decodes the message `buf[..len]` into `out` (which the caller has cleared); returns the field
/// numbers present (bit n = field n), or `None` when the message is not one the fast path takes.
/// Bytes of `buf` past `len` (the next messages, when decoding in place) may be loaded, never used.
#[inline]
pub(crate) fn dep_record(buf: &[u8], len: usize, out: &mut InstDepRecord) -> Option<u32> {
    // Scalars land in a slot per field number, so storing one is not a branch on the field; the
    // two repeated fields append in order.
    let mut slot = [0u64; 13];
    let present = walk(buf, len, 12, |field, v| match field {
        6 => out.rob_dep.push(v),
        8 => out.reg_dep.push(v),
        f => slot[usize::from(f)] = v,
    })?;
    let has = |f: u32| present & 1 << f != 0;
    out.seq_num = slot[1];
    out.r#type = slot[2] as i32;
    out.p_addr = has(3).then_some(slot[3]);
    out.size = has(4).then_some(slot[4] as u32);
    out.flags = has(5).then_some(slot[5] as u32);
    out.comp_delay = slot[7];
    out.weight = has(9).then_some(slot[9] as u32);
    out.pc = has(10).then_some(slot[10]);
    out.v_addr = has(11).then_some(slot[11]);
    out.asid = has(12).then_some(slot[12] as u32);
    Some(present)
}

/// [`dep_record`] for a packet-trace [`Packet`] (fields 1..=7).
#[inline]
pub(crate) fn packet(buf: &[u8], len: usize, out: &mut Packet) -> Option<u32> {
    let mut slot = [0u64; 8];
    let present = walk(buf, len, 7, |field, v| slot[usize::from(field)] = v)?;
    let has = |f: u32| present & 1 << f != 0;
    out.tick = slot[1];
    out.cmd = slot[2] as u32;
    out.addr = slot[3];
    out.size = slot[4] as u32;
    out.flags = has(5).then_some(slot[5] as u32);
    out.pkt_id = has(6).then_some(slot[6]);
    out.pc = has(7).then_some(slot[7]);
    Some(present)
}

/// Calls `each(field, value)` for the fields of `buf[..len]` in order; returns the field numbers
/// present, or `None` (possibly after some calls) unless every field is a one-byte key with wire
/// type 0 for a field in 1..=`max` and a varint of 1 to 8 bytes inside the message.
#[inline(always)]
fn walk(buf: &[u8], len: usize, max: u8, mut each: impl FnMut(u8, u64)) -> Option<u32> {
    let mut present = 0u32;
    let mut pos = 0;
    while pos < len {
        let field = key(buf[pos], max)?;
        let (v, next) = varint(buf, len, pos + 1)?;
        each(field, v);
        present |= 1 << field;
        pos = next;
    }
    Some(present)
}

/// The field number of `k` if it is a one-byte key with wire type 0 for a field in 1..=`max`.
#[inline(always)]
fn key(k: u8, max: u8) -> Option<u8> {
    let field = k >> 3;
    (k & 0x87 == 0 && (1..=max).contains(&field)).then_some(field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    use crate::sources::varint::tests::{put_varint, value_of_len};

    /// One field of a message as bytes: a key, a value, or a spoiler.
    #[derive(Debug, Clone)]
    enum Piece {
        Field { field: u8, len: u32, low: u64 },
        Packed { field: u8, values: Vec<u64> },
        Fixed64 { field: u8 },
        Junk(Vec<u8>),
    }

    fn piece(max_field: u8) -> impl Strategy<Value = Piece> {
        prop_oneof![
            12 => (1..=max_field, 1..=10u32, any::<u64>()).prop_map(|(field, len, low)| Piece::Field { field, len, low }),
            1 => (1..=max_field + 3, 1..=10u32, any::<u64>()).prop_map(|(field, len, low)| Piece::Field { field, len, low }),
            1 => (prop_oneof![Just(6u8), Just(8)], proptest::collection::vec(any::<u64>(), 0..4))
                .prop_map(|(field, values)| Piece::Packed { field, values }),
            1 => (1..=max_field).prop_map(|field| Piece::Fixed64 { field }),
            1 => proptest::collection::vec(any::<u8>(), 1..4).prop_map(Piece::Junk),
        ]
    }

    fn bytes(pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Field { field, len, low } => {
                    put_varint(&mut out, u64::from(*field) << 3);
                    put_varint(&mut out, value_of_len(*len, *low));
                }
                Piece::Packed { field, values } => {
                    let mut body = Vec::new();
                    for v in values {
                        put_varint(&mut body, *v);
                    }
                    put_varint(&mut out, u64::from(*field) << 3 | 2);
                    put_varint(&mut out, body.len() as u64);
                    out.extend(body);
                }
                Piece::Fixed64 { field } => {
                    put_varint(&mut out, u64::from(*field) << 3 | 1);
                    out.extend([7u8; 8]);
                }
                Piece::Junk(j) => out.extend(j),
            }
        }
        out
    }

    /// Whatever `fast` takes, prost decodes to the same record and the field scan finds the same
    /// fields; every message made only of known varint fields of at most 8 bytes is taken; bytes
    /// past the message (the next ones, in place) change nothing. `start` is a dirtied record the
    /// caller has cleared, as the reader does.
    fn agrees_with_prost<M: Message + Default + PartialEq + std::fmt::Debug>(
        pieces: &[Piece],
        max_field: u8,
        start: M,
        fast: impl Fn(&[u8], usize, &mut M) -> Option<u32>,
    ) -> Result<(), TestCaseError> {
        let body = bytes(pieces);
        let simple = pieces
            .iter()
            .all(|p| matches!(p, Piece::Field { field, len, .. } if *field <= max_field && *len <= 8));
        let mut tail = body.clone();
        tail.extend_from_slice(&[0xff; 64]);
        let mut with_tail = M::default();
        prop_assert_eq!(
            fast(&tail, body.len(), &mut with_tail),
            fast(&body, body.len(), &mut M::default())
        );
        let mut got = start;
        match fast(&body, body.len(), &mut got) {
            Some(present) => {
                let want = M::decode(&body[..]).expect("prost takes what the fast path takes");
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(&with_tail, &want);
                let scan = super::super::messages::scan_fields(&body).unwrap();
                prop_assert_eq!(present, scan.present);
            }
            None => prop_assert!(!simple, "declined a plain message: {:02x?}", body),
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn dep_record_agrees_with_prost(pieces in proptest::collection::vec(piece(12), 0..14)) {
            let mut start = InstDepRecord { rob_dep: vec![99], ..Default::default() };
            start.clear();
            agrees_with_prost(&pieces, 12, start, dep_record)?;
        }

        #[test]
        fn packet_agrees_with_prost(pieces in proptest::collection::vec(piece(7), 0..10)) {
            agrees_with_prost(&pieces, 7, Packet::default(), packet)?;
        }
    }
}
