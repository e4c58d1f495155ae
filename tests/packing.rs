//! The hardware layout (spec/hardware.md, HW1-HW5): packet sequences built here, laid out by
//! `ptemu::packing::Repacker`, against the bytes written out by hand from the rules.

mod common;

use ptemu::packet::{IpPayload, Ipc, Packet, Tnt};
use ptemu::packing::{agreement, Packing, Repacker, Shape};

/// Lays `packets` out with `packing`; the bytes.
fn lay(packing: Packing, packets: &[Packet]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut r = Repacker::new(packing);
    for p in packets {
        let mut b = Vec::new();
        p.encode_to_vec(&mut b).unwrap();
        r.push(&mut out, p, &b).unwrap();
    }
    r.finish(&mut out).unwrap();
    out
}

/// The bytes of `parts`: packets encoded, numbers as that many PADs.
#[derive(Clone)]
enum Part {
    P(Packet),
    Pad(usize),
}
use Part::{Pad, P};

fn bytes(parts: &[Part]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        match part {
            P(p) => {
                p.encode_to_vec(&mut out).unwrap();
            }
            Pad(n) => out.extend(std::iter::repeat_n(0u8, *n)),
        }
    }
    out
}

fn tnt() -> Packet {
    Packet::Tnt8(Tnt::from_outcomes(&[true]))
}
fn ip(ipc: Ipc, raw: u64) -> IpPayload {
    IpPayload::new(ipc, raw)
}
fn tip16() -> Packet {
    Packet::Tip(ip(Ipc::Update16, 0x1234))
}
fn tip32() -> Packet {
    Packet::Tip(ip(Ipc::Update32, 0x4012_3456))
}
const PIP: Packet = Packet::Pip {
    cr3: 0x1ee4_0000,
    nr: true,
};
const VMCS: Packet = Packet::Vmcs { base: 0x4_1670_d000 };
const CBR: Packet = Packet::Cbr { ratio: 0x26 };
const TSX: Packet = Packet::ModeTsx {
    intx: false,
    abrt: false,
};
const EXEC: Packet = Packet::ModeExec {
    csl: true,
    csd: false,
    if_: false,
};

/// Checks the layout of `packets` against `want` (then PADs to a 16-byte boundary: the data
/// ends as a disable ends it, HW4), and that the layout, read back, agrees with itself (every
/// PAD run predicted).
fn check(packets: &[Packet], want: &[Part]) {
    let got = lay(Packing::Hardware, packets);
    let mut want = bytes(want);
    want.resize(want.len().next_multiple_of(16), 0);
    assert_eq!(got, want);
    let list = common::packets::decoded(&got).unwrap();
    let a = agreement(Packing::Hardware, &list);
    assert_eq!(a.matched, a.packets, "{:?}", a.misses);
}

#[test]
fn hw1_psb_starts_at_an_8_byte_boundary() {
    check(
        &[Packet::Psb, Packet::PsbEnd, tnt(), Packet::Psb],
        &[
            P(Packet::Psb),
            P(Packet::PsbEnd),
            P(tnt()),
            Pad(5),
            P(Packet::Psb),
        ],
    );
}

#[test]
fn hw2_a_packet_that_would_cross_an_8_byte_boundary_starts_at_the_next() {
    // 5 TNTs, a 3-byte TIP fits exactly (5..8); then TNT at 8, 5-byte TIP at 9..14, TNT at 14,
    // and a 3-byte TIP would cross 16: it goes to 16.
    let ps = [
        tnt(),
        tnt(),
        tnt(),
        tnt(),
        tnt(),
        tip16(),
        tnt(),
        tip32(),
        tnt(),
        tip16(),
    ];
    check(
        &ps,
        &[
            P(tnt()),
            P(tnt()),
            P(tnt()),
            P(tnt()),
            P(tnt()),
            P(tip16()),
            P(tnt()),
            P(tip32()),
            P(tnt()),
            Pad(1),
            P(tip16()),
        ],
    );
}

#[test]
fn hw3_a_48_bit_payload_starts_at_an_8_byte_boundary_and_pads_its_unit() {
    let fup = Packet::Fup(ip(Ipc::Sext48, 0x42_1ddd));
    let tip = Packet::Tip(ip(Ipc::Sext48, 0x42_afb0));
    // FUP: header at 7, payload 8..14, PAD 14..16; TIP header at 23, payload at 24.
    check(
        &[fup, tip, tnt()],
        &[Pad(7), P(fup), Pad(2), Pad(7), P(tip), Pad(2), P(tnt())],
    );
    // PIP and VMCS have 2-byte headers; VMCS's payload is 5 bytes, 3 PADs end its unit.
    check(
        &[tnt(), PIP, VMCS, tnt()],
        &[
            P(tnt()),
            Pad(5),
            P(PIP),
            Pad(2),
            Pad(6),
            P(VMCS),
            Pad(3),
            P(tnt()),
        ],
    );
}

/// The end of every PSB+ in the traces: PIP's header before a unit, VMCS's the same one unit
/// later, CBR after VMCS's unit, PSBEND.
fn psb_plus_tail() -> Vec<Part> {
    vec![P(PIP), Pad(8), P(VMCS), Pad(3), P(CBR), P(Packet::PsbEnd)]
}

#[test]
fn hw3_hw5_psb_plus_without_fup_is_54_bytes_as_hardware_lays_it_out() {
    let ps = [Packet::Psb, TSX, PIP, VMCS, CBR, Packet::PsbEnd];
    check(
        &ps,
        &[vec![P(Packet::Psb), P(TSX), Pad(4)], psb_plus_tail()].concat(),
    );
    assert_eq!(
        lay(Packing::Hardware, &ps)[52..54],
        [0x02, 0x23],
        "PSBEND ends at 54"
    );
}

#[test]
fn hw5_mode_packets_sit_against_the_ip_packet_psb_plus_with_fup_is_70_bytes() {
    let fup = Packet::Fup(ip(Ipc::Sext48, 0x42_1ddd));
    let ps = [Packet::Psb, TSX, EXEC, fup, PIP, VMCS, CBR, Packet::PsbEnd];
    let head = vec![P(Packet::Psb), Pad(3), P(TSX), P(EXEC), P(fup), Pad(8)];
    check(&ps, &[head, psb_plus_tail()].concat());
    assert_eq!(
        lay(Packing::Hardware, &ps)[68..70],
        [0x02, 0x23],
        "PSBEND ends at 70"
    );
    // After PSBEND, MODE.Exec and TIP.PGE: MODE.Exec directly before the TIP.PGE header.
    let pge = Packet::TipPge(ip(Ipc::Sext48, 0xffff_81a0_0020));
    check(
        &[Packet::Psb, Packet::PsbEnd, EXEC, pge],
        &[P(Packet::Psb), P(Packet::PsbEnd), Pad(3), P(EXEC), P(pge), Pad(2)],
    );
}

#[test]
fn hw4_after_a_disable_the_data_ends_16_byte_aligned() {
    let pgd = Packet::TipPgd(IpPayload::SUPPRESSED);
    check(&[tnt(), pgd], &[P(tnt()), P(pgd), Pad(14)]);
    // A PSB right after a PSBEND comes from an enable after a disable: 16-byte aligned.
    check(
        &[Packet::Psb, Packet::PsbEnd, Packet::Psb],
        &[P(Packet::Psb), P(Packet::PsbEnd), Pad(14), P(Packet::Psb)],
    );
}

#[test]
fn packing_none_puts_no_pad_anywhere() {
    let fup = Packet::Fup(ip(Ipc::Sext48, 0x42_1ddd));
    let ps = [Packet::Psb, TSX, EXEC, fup, PIP, VMCS, CBR, Packet::PsbEnd, tnt()];
    let parts: Vec<Part> = ps.iter().map(|p| P(*p)).collect();
    assert_eq!(lay(Packing::None, &ps), bytes(&parts));
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// HW1-HW5 on any packet sequence: the laid-out stream holds the same packets for ptemu's
    /// decoder and for libipt's (0 errors), every PAD run in it is the one the layout predicts,
    /// and laying out its PAD-free packets again gives the same bytes.
    #[test]
    fn hw1_hw5_a_packed_stream_decodes_to_the_same_packets_and_repacks_to_itself(
        seq in prop::collection::vec(common::packets::libipt_packet(false), 0..80)
    ) {
        let seq: Vec<Packet> = seq.into_iter().filter(|p| *p != Packet::Pad).collect();
        let packed = lay(Packing::Hardware, &seq);
        let list = common::packets::decoded(&packed).unwrap();
        let ours: Vec<Packet> = list.iter().map(|x| x.1).filter(|p| *p != Packet::Pad).collect();
        prop_assert_eq!(&ours, &seq);
        let theirs: Vec<Packet> = common::libipt::decode(&packed)
            .map_err(|e| TestCaseError::fail(format!("libipt: {e:?}")))?
            .into_iter()
            .map(|x| x.0)
            .filter(|p| *p != Packet::Pad)
            .collect();
        prop_assert_eq!(&theirs, &seq);
        let a = agreement(Packing::Hardware, &list);
        prop_assert_eq!(a.matched, a.packets, "{:?}", a.misses);
        prop_assert_eq!(lay(Packing::Hardware, &ours), packed);
    }
}

/// Lays `packets` out as the tracer's fast path does: a plain packet through
/// `Repacker::place_plain` where it takes it (its PADs and bytes written by the caller), any
/// other packet, or one it refuses, through `Repacker::push`.
fn lay_placing(packing: Packing, packets: &[Packet]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut r = Repacker::new(packing);
    let mut placed = 0;
    for p in packets {
        let mut b = Vec::new();
        p.encode_to_vec(&mut b).unwrap();
        if Shape::of(p) == Shape::Plain {
            if let Some(pads) = r.place_plain(b.len(), *p == Packet::PsbEnd) {
                out.extend(std::iter::repeat_n(0u8, pads as usize));
                out.extend_from_slice(&b);
                placed += 1;
                continue;
            }
        }
        r.push(&mut out, p, &b).unwrap();
    }
    r.finish(&mut out).unwrap();
    (out, placed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// HW1-HW5: a plain packet placed by `place_plain` (the tracer's fast path for a TNT after
    /// a TNT) lands where `push` puts it, with the same PADs before it, and leaves the layout
    /// where `push` leaves it, for every packet sequence and both packings; it refuses a packet
    /// after a MODE (HW5) or after one that owes PADs (HW3, HW4), which `push` then places.
    #[test]
    fn hw1_hw5_a_plain_packet_placed_directly_is_where_push_puts_it(
        seq in prop::collection::vec(common::packets::libipt_packet(false), 0..80),
        tnts in prop::collection::vec(1u8..=6, 0..12),
    ) {
        let mut seq: Vec<Packet> = seq.into_iter().filter(|p| *p != Packet::Pad).collect();
        // Runs of TNTs, as the fast path sends them, among the random packets.
        for (k, n) in tnts.iter().enumerate() {
            let at = (k * 7) % (seq.len() + 1);
            let t = Packet::Tnt8(Tnt::from_outcomes(&vec![true; usize::from(*n)]));
            seq.splice(at..at, std::iter::repeat_n(t, usize::from(*n)));
        }
        for packing in [Packing::Hardware, Packing::None] {
            let (got, placed) = lay_placing(packing, &seq);
            prop_assert_eq!(got, lay(packing, &seq), "{:?}", packing);
            prop_assert!(tnts.is_empty() || placed > 0, "the direct placement was never taken");
        }
    }
}

/// The direct placement is taken where it may be and refused where it must be (HW3, HW5).
#[test]
fn hw3_hw5_place_plain_refuses_after_a_payload_and_a_mode() {
    let mut r = Repacker::new(Packing::Hardware);
    let mut out = Vec::new();
    assert_eq!(r.place_plain(1, false), Some(0));
    let fup = Packet::Fup(ip(Ipc::Sext48, 0x42_1ddd));
    let mut b = Vec::new();
    fup.encode_to_vec(&mut b).unwrap();
    r.push(&mut out, &fup, &b).unwrap();
    assert_eq!(
        r.place_plain(1, false),
        None,
        "a 48-bit payload owes the PADs of its unit"
    );
    let mut r = Repacker::new(Packing::Hardware);
    let mut b = Vec::new();
    EXEC.encode_to_vec(&mut b).unwrap();
    r.push(&mut out, &EXEC, &b).unwrap();
    assert_eq!(
        r.place_plain(1, false),
        None,
        "a MODE is held for the packet after it"
    );
    // 7 bytes in, a 2-byte packet goes to the next unit: one PAD before it (HW2).
    let mut r = Repacker::new(Packing::Hardware);
    for _ in 0..7 {
        assert_eq!(r.place_plain(1, false), Some(0));
    }
    assert_eq!(r.place_plain(2, false), Some(1));
    assert_eq!(r.position(), 10);
}
