//! Round trips over every packet type: encode -> decode -> encode is the identity, including TNT-64
//! with 47 bits and CYC at every length; and on any bytes at all (random, or a valid stream with
//! bytes changed and cut short), whatever the decoder accepts re-encodes and re-parses exactly.

mod common;

use common::packets::any_sequence;
use proptest::prelude::*;
use ptemu::packet::text::{parse_line, to_text, ParseState};
use ptemu::packet::{
    recheck, EncodeError, IpPayload, Ipc, Packet, PacketDecoder, PacketEncoder, Tnt, PSB_BYTES,
};

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Encode -> decode -> encode is the identity, and the decoder's last IP after each packet is
    /// the encoder's (IP packets apply their payload, PSB and OVF reset it; nothing else touches
    /// it).
    #[test]
    fn every_packet_type_round_trips(seq in any_sequence()) {
        let mut bytes = Vec::new();
        let mut enc = PacketEncoder::new();
        let mut last_ips = Vec::new();
        for p in &seq {
            enc.encode_to_vec(p, &mut bytes).unwrap();
            last_ips.push(enc.last_ip());
        }
        let mut d = PacketDecoder::new(&bytes, 0);
        let mut back = Vec::new();
        while let Some(r) = d.next_packet() {
            back.push(r.unwrap().1);
            prop_assert_eq!(Some(&d.last_ip()), last_ips.get(back.len() - 1), "after packet {}", back.len() - 1);
        }
        prop_assert_eq!(&back, &seq);
        let mut again = Vec::new();
        for p in &back {
            p.encode_to_vec(&mut again).unwrap();
        }
        prop_assert_eq!(again, bytes);
    }

    /// The stream encoder writes the bytes the per-packet one does, with any amount of spare room
    /// (its fast loop, its exact tail, or both), ends in the same last IP, and names the packet
    /// that did not fit.
    #[test]
    fn encode_all_writes_what_packet_by_packet_encoding_writes(
        seq in any_sequence(),
        slack in 0usize..40,
        short in 1usize..20,
    ) {
        let mut one = PacketEncoder::new();
        let mut expected = Vec::new();
        for p in &seq {
            one.encode_to_vec(p, &mut expected).unwrap();
        }
        let mut all = PacketEncoder::new();
        let mut out = vec![0u8; expected.len() + slack];
        let n = all.encode_all(&seq, &mut out).unwrap();
        prop_assert_eq!(&out[..n], &expected[..]);
        prop_assert_eq!(all.last_ip(), one.last_ip());

        if !seq.is_empty() {
            let cut = expected.len().saturating_sub(short);
            let mut small = vec![0u8; cut];
            let mut e = PacketEncoder::new();
            let err = e.encode_all(&seq, &mut small).unwrap_err();
            let mut fit = 0;
            let mut len = 0;
            for p in &seq {
                let mut b = Vec::new();
                p.encode_to_vec(&mut b).unwrap();
                if len + b.len() > cut {
                    break;
                }
                len += b.len();
                fit += 1;
            }
            prop_assert_eq!(err.0, fit);
            let is_too_small = matches!(err.1, EncodeError::BufferTooSmall { .. });
            prop_assert!(is_too_small);
            prop_assert_eq!(&small[..len], &expected[..len]);
        }
    }

    /// A packet that cannot be encoded, anywhere in the stream and with any spare room (so in any
    /// run of the fast loop or in the exact tail), is named by its index; the packets before it
    /// are in `out` and in last IP, counted from an encoder that already had a last IP.
    #[test]
    fn encode_all_names_a_bad_packet_wherever_it_is(
        seq in any_sequence(),
        at in any::<prop::sample::Index>(),
        slack in 0usize..40,
        first_ip in any::<u64>(),
    ) {
        let at = at.index(seq.len() + 1);
        let bad = Packet::Tnt8(Tnt { bits: 4, count: 2 });
        let mut with_bad = seq.clone();
        with_bad.insert(at, bad);
        let first = Packet::Tip(IpPayload::new(Ipc::Full, first_ip));
        let (mut one, mut all) = (PacketEncoder::new(), PacketEncoder::new());
        one.encode_to_vec(&first, &mut Vec::new()).unwrap();
        all.encode_to_vec(&first, &mut Vec::new()).unwrap();
        let mut expected = Vec::new();
        for p in &with_bad[..at] {
            one.encode_to_vec(p, &mut expected).unwrap();
        }
        let mut out = vec![0u8; expected.len() + slack];
        let err = all.encode_all(&with_bad, &mut out).unwrap_err();
        prop_assert_eq!(err.0, at);
        let is_bad_field = matches!(err.1, EncodeError::BadField { .. });
        prop_assert!(is_bad_field);
        prop_assert_eq!(&out[..expected.len()], &expected[..]);
        prop_assert_eq!(all.last_ip(), one.last_ip());
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Random bytes (sometimes behind a PSB, so the extended opcodes get their chance): the decoder
    /// never panics or stalls, and every packet it accepts re-encodes to the bytes it came from and
    /// assembles back from its text line (`recheck`; spec/packets.md, "Any bytes").
    #[test]
    fn any_bytes_decode_only_to_packets_that_re_encode_exactly(
        psb in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = if psb { PSB_BYTES.to_vec() } else { Vec::new() };
        bytes.extend_from_slice(&tail);
        recheck(&bytes).map_err(|m| TestCaseError::fail(m.to_string()))?;
    }

    /// A valid stream of every packet type with some bytes changed (one bit, or a whole random
    /// byte) and cut at a random point: what the decoder still accepts re-encodes exactly, so a
    /// corrupted stream is reported, never silently altered.
    #[test]
    fn corrupted_streams_decode_only_to_packets_that_re_encode_exactly(
        seq in any_sequence(),
        changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = Vec::new();
        let mut enc = PacketEncoder::new();
        for p in &seq {
            enc.encode_to_vec(p, &mut bytes).unwrap();
        }
        prop_assume!(!bytes.is_empty());
        for (at, v, one_bit) in changes {
            let i = at.index(bytes.len());
            bytes[i] = if one_bit { bytes[i] ^ (1 << (v % 8)) } else { v };
        }
        bytes.truncate(1 + cut.index(bytes.len()));
        let stats = recheck(&bytes).map_err(|m| TestCaseError::fail(m.to_string()))?;
        prop_assert!(stats.packets + stats.errors > 0);
    }
}

/// An IP near `last` (sharing its upper 64 - `width` bits, the rest random) or, at width 64, any IP.
fn ip_near(last: u64, width: u32, low: u64) -> u64 {
    let mask = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    (last & !mask) | (low & mask)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    /// TIP4 (spec/generation.md; pt-packets.md §2): `PacketEncoder::compress` gives a payload that rebuilds the IP exactly
    /// from the current last IP, and no form with a shorter payload would (what hardware picks);
    /// encoding it moves the encoder's last IP to the IP. The IPs are drawn close to last IP at
    /// every width, canonical and not, so every form is reached.
    #[test]
    fn tip4_compress_is_the_shortest_form_that_rebuilds_the_ip_from_any_last_ip(
        last in any::<u64>(),
        width in prop_oneof![Just(0u32), Just(8), Just(16), Just(17), Just(31), Just(32), Just(33), Just(47), Just(48), Just(49), Just(64)],
        low in any::<u64>(),
        sext in any::<bool>(),
    ) {
        let mut ip = ip_near(last, width, low);
        if sext {
            ip = (((ip << 16) as i64) >> 16) as u64;
        }
        let mut enc = PacketEncoder::new();
        enc.encode(&Packet::Fup(IpPayload::new(Ipc::Full, last)), &mut [0u8; 16]).unwrap();
        prop_assert_eq!(enc.last_ip().get(), last);
        let p = enc.compress(Some(ip));
        prop_assert_eq!(enc.last_ip().reconstruct(p), Some(ip), "{:?} from {:#x}", p, last);
        for shorter in [Ipc::Update16, Ipc::Update32, Ipc::Sext48, Ipc::Update48, Ipc::Full] {
            if shorter.payload_len() < p.ipc.payload_len() {
                let q = IpPayload::new(shorter, ip);
                prop_assert_ne!(enc.last_ip().reconstruct(q), Some(ip), "{:?} is shorter than {:?}", q, p);
            }
        }
        enc.encode(&Packet::Tip(p), &mut [0u8; 16]).unwrap();
        prop_assert_eq!(enc.last_ip().get(), ip);
        prop_assert_eq!(enc.compress(None), IpPayload::SUPPRESSED);
    }
}

/// `dump`'s hand-written text (`push_text`, `push_hex16`) against the formatting machinery: the
/// name padded with `{:<10} `, `write_args`, trailing spaces trimmed; offsets as `{:016x}`. Every
/// packet kind, every field value the generator makes.
#[test]
fn dump_text_by_hand_matches_the_formatting_machinery() {
    use ptemu::packet::text::{push_hex16, push_text, write_args};
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(&(any_sequence(), any::<u64>()), |(seq, offset)| {
            for p in &seq {
                let mut want = format!("{:<10} ", p.name());
                write_args(p, &mut want).unwrap();
                let mut got = String::from("x");
                push_text(p, &mut got);
                prop_assert_eq!(&got[1..], want.trim_end());
                let mut hex = String::new();
                push_hex16(&mut hex, offset);
                prop_assert_eq!(hex, format!("{offset:016x}"));
            }
            Ok(())
        })
        .unwrap();
}
