//! Round trips over every packet type: encode -> decode -> encode is the identity, including TNT-64
//! with 47 bits and CYC at every length.

mod common;

use common::packets::any_sequence;
use proptest::prelude::*;
use ptemu::packet::text::{parse_line, to_text, ParseState};
use ptemu::packet::{Packet, PacketDecoder, Tnt};

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_type_round_trips(seq in any_sequence()) {
        let mut bytes = Vec::new();
        for p in &seq {
            p.encode_to_vec(&mut bytes).unwrap();
        }
        let mut d = PacketDecoder::new(&bytes, 0);
        let mut back = Vec::new();
        while let Some(r) = d.next_packet() {
            back.push(r.unwrap().1);
        }
        prop_assert_eq!(&back, &seq);
        let mut again = Vec::new();
        for p in &back {
            p.encode_to_vec(&mut again).unwrap();
        }
        prop_assert_eq!(again, bytes);
    }

    /// The text form: `dump`'s line for every packet assembles back to the same packet.
    #[test]
    fn every_packet_type_round_trips_through_text(seq in any_sequence()) {
        let mut st = ParseState::default();
        for p in &seq {
            let line = format!("{:016x}  {}", 0x1234, to_text(p));
            prop_assert_eq!(parse_line(&line, &mut st), Ok(Some(*p)), "{}", line);
        }
    }
}

#[test]
fn tnt64_with_47_bits_and_cyc_at_every_length_round_trip() {
    let t = Packet::Tnt64(Tnt {
        bits: (1 << 47) - 2,
        count: 47,
    });
    let mut b = Vec::new();
    t.encode_to_vec(&mut b).unwrap();
    assert_eq!(Packet::decode(&b, None), Ok((t, 8)));
    let mut lengths = std::collections::BTreeSet::new();
    for bits in 0..=64u32 {
        let value = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let p = Packet::Cyc { value };
        let mut b = Vec::new();
        let n = p.encode_to_vec(&mut b).unwrap();
        assert_eq!(Packet::decode(&b, None), Ok((p, n)), "{value:#x}");
        lengths.insert(n);
    }
    assert_eq!(
        lengths.into_iter().collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
}
