//! Round trips over every packet type: encode -> decode -> encode is the identity, including TNT-64
//! with 47 bits and CYC at every length.

mod common;

use common::packets::any_sequence;
use proptest::prelude::*;
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
