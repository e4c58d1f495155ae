//! libipt in the loop: random packet sequences encoded by ptemu must decode in libipt 2.1.2's packet
//! decoder (`pt_pkt_next`) to the same packets, field for field and size for size, for every packet
//! type libipt knows. Documented difference (spec/packets.md): PWRE's HW bit.

mod common;

use common::libipt;
use common::packets::libipt_packet;
use proptest::prelude::*;
use ptemu::packet::{Packet, PacketEncoder};

fn encode_all(seq: &[Packet]) -> (Vec<u8>, Vec<usize>) {
    let mut enc = PacketEncoder::new();
    let mut bytes = Vec::new();
    let sizes = seq
        .iter()
        .map(|p| enc.encode_to_vec(p, &mut bytes).unwrap())
        .collect();
    (bytes, sizes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn libipt_decodes_ptemus_packets_to_the_same_fields(seq in prop::collection::vec(libipt_packet(false), 1..80)) {
        let (bytes, sizes) = encode_all(&seq);
        let theirs = libipt::decode(&bytes).map_err(|e| TestCaseError::fail(format!("libipt: {e:?} in {seq:?}")))?;
        let ours: Vec<(Packet, usize)> = seq.iter().copied().zip(sizes).collect();
        prop_assert_eq!(theirs, ours);
    }
}

#[test]
fn pwre_hw_bit_is_where_the_sdm_puts_it_not_where_libipt_reads_it() {
    // ptemu writes HW at byte 2 bit 7 (SDM 36-60, perf); libipt 2.1.2 reads bit 3, so it sees hw = 0.
    let p = Packet::Pwre {
        state: 1,
        sub_state: 0,
        hw: true,
    };
    let (bytes, _) = encode_all(&[p]);
    assert_eq!(bytes, [0x02, 0x22, 0x80, 0x10]);
    assert_eq!(
        libipt::decode(&bytes).unwrap(),
        vec![(
            Packet::Pwre {
                state: 1,
                sub_state: 0,
                hw: false
            },
            4
        )]
    );
}

#[test]
fn cyc_values_from_2_pow_61_are_beyond_libipts_reader() {
    // ptemu, like perf, encodes the full 64-bit count in up to 10 bytes; libipt 2.1.2 stops at 9.
    let (ok, _) = encode_all(&[Packet::Cyc { value: (1 << 61) - 1 }]);
    assert_eq!(ok.len(), 9);
    assert_eq!(
        libipt::decode(&ok).unwrap(),
        vec![(Packet::Cyc { value: (1 << 61) - 1 }, 9)]
    );
    let (wide, _) = encode_all(&[Packet::Cyc { value: 1 << 61 }]);
    assert_eq!(wide.len(), 10);
    assert_eq!(libipt::decode(&wide).unwrap_err().code, 5, "pte_bad_packet");
    assert_eq!(
        Packet::decode(&wide, None),
        Ok((Packet::Cyc { value: 1 << 61 }, 10))
    );
}

#[test]
fn libipt_refuses_what_ptemu_refuses() {
    // An unknown opcode and TMA with reserved bits: both decoders report an error at the same offset.
    for bad in [
        &[0x00u8, 0xc9][..],
        &[0x00, 0x02, 0x73, 0x00, 0x00, 0x01, 0x00, 0x00],
    ] {
        let e = libipt::decode(bad).unwrap_err();
        assert_eq!(e.offset, 1);
        let mut d = ptemu::packet::PacketDecoder::new(bad, 0);
        assert_eq!(d.next_packet().unwrap().unwrap().1, Packet::Pad);
        assert_eq!(d.next_packet().unwrap().unwrap_err().offset, 1);
    }
}
