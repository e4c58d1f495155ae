//! proptest strategies for packets and packet sequences.

use proptest::prelude::*;
use ptemu::packet::{IpPayload, Ipc, Packet, PtwSize, Tnt};

fn ipc() -> impl Strategy<Value = Ipc> {
    prop::sample::select(vec![
        Ipc::Suppressed,
        Ipc::Update16,
        Ipc::Update32,
        Ipc::Sext48,
        Ipc::Update48,
        Ipc::Full,
    ])
}

fn ip() -> impl Strategy<Value = IpPayload> {
    (ipc(), any::<u64>()).prop_map(|(c, raw)| IpPayload::new(c, raw))
}

fn tnt(max: u8) -> impl Strategy<Value = Tnt> {
    (1..=max, any::<u64>()).prop_map(|(count, b)| Tnt {
        bits: b & ((1u64 << count) - 1),
        count,
    })
}

/// CYC values up to `max_bits` wide, every width equally likely (so every encoded length occurs).
fn cyc_value(max_bits: u32) -> impl Strategy<Value = u64> {
    (0u32..=max_bits, any::<u64>())
        .prop_map(|(bits, v)| if bits == 64 { v } else { v & ((1u64 << bits) - 1) })
}

/// libipt 2.1.2 reads at most 8 CYC extension bytes: values below 2^61 (spec/packets.md).
pub const LIBIPT_CYC_BITS: u32 = 61;

/// Every packet libipt 2.1.2 knows (all but TRIG and the PEBS block packets), with `pwre_hw`
/// controlling whether PWRE's HW bit may be set (libipt reads a different bit).
pub fn libipt_packet(pwre_hw: bool) -> impl Strategy<Value = Packet> {
    packet(pwre_hw, LIBIPT_CYC_BITS)
}

fn packet(pwre_hw: bool, cyc_bits: u32) -> impl Strategy<Value = Packet> {
    let a = prop_oneof![
        Just(Packet::Pad),
        tnt(6).prop_map(Packet::Tnt8),
        tnt(47).prop_map(Packet::Tnt64),
        ip().prop_map(Packet::Tip),
        ip().prop_map(Packet::TipPge),
        ip().prop_map(Packet::TipPgd),
        ip().prop_map(Packet::Fup),
        (any::<u64>(), any::<bool>()).prop_map(|(c, nr)| Packet::Pip {
            cr3: c & 0x000f_ffff_ffff_ffe0,
            nr
        }),
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(csl, csd, if_)| Packet::ModeExec {
            csl,
            csd,
            if_
        }),
        (any::<bool>(), any::<bool>()).prop_map(|(intx, abrt)| Packet::ModeTsx { intx, abrt }),
        Just(Packet::TraceStop),
        any::<u8>().prop_map(|ratio| Packet::Cbr { ratio }),
        any::<u64>().prop_map(|t| Packet::Tsc { tsc: t >> 8 }),
        any::<u8>().prop_map(|ctc| Packet::Mtc { ctc }),
        (any::<u16>(), 0u16..0x200).prop_map(|(ctc, fc)| Packet::Tma { ctc, fc }),
        cyc_value(cyc_bits).prop_map(|value| Packet::Cyc { value }),
    ];
    let b = prop_oneof![
        any::<u64>().prop_map(|b| Packet::Vmcs {
            base: b & 0x000f_ffff_ffff_f000
        }),
        Just(Packet::Ovf),
        Just(Packet::Psb),
        Just(Packet::PsbEnd),
        any::<u64>().prop_map(|payload| Packet::Mnt { payload }),
        (any::<bool>(), any::<u64>(), any::<bool>()).prop_map(|(eight, p, ip)| if eight {
            Packet::Ptw {
                size: PtwSize::Eight,
                payload: p,
                ip,
            }
        } else {
            Packet::Ptw {
                size: PtwSize::Four,
                payload: p & 0xffff_ffff,
                ip,
            }
        }),
        any::<bool>().prop_map(|ip| Packet::Exstop { ip }),
        (any::<u32>(), any::<u32>()).prop_map(|(hints, ext)| Packet::Mwait { hints, ext }),
        (0u8..16, 0u8..16, any::<bool>()).prop_map(move |(state, sub_state, hw)| Packet::Pwre {
            state,
            sub_state,
            hw: hw && pwre_hw
        }),
        (0u8..16, 0u8..16, any::<u8>()).prop_map(|(last, deepest, w)| Packet::Pwrx {
            last,
            deepest,
            wake: w & 0x0d
        }),
        (0u8..32, any::<u8>(), any::<bool>()).prop_map(|(ty, vector, ip)| Packet::Cfe { ty, vector, ip }),
        (0u8..32, any::<u64>()).prop_map(|(ty, payload)| Packet::Evd { ty, payload }),
    ];
    prop_oneof![a, b]
}

/// Every packet type ptemu knows, as a sequence that is valid to decode: BIPs only inside a
/// BBP…BEP block, and blocks contain only BIPs.
pub fn any_sequence() -> impl Strategy<Value = Vec<Packet>> {
    let trig = (
        any::<u8>(),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(any::<u16>()),
    )
        .prop_map(|(trbv, ip, mult, icnt)| vec![Packet::Trig { trbv, ip, mult, icnt }]);
    let block = (
        any::<bool>(),
        0u8..32,
        prop::collection::vec((0u8..32, any::<u64>()), 0..4),
        any::<bool>(),
    )
        .prop_map(|(sz4, ty, items, ip)| {
            let mut v = vec![Packet::Bbp { sz4, ty }];
            v.extend(items.into_iter().map(|(id, p)| Packet::Bip {
                id,
                payload: if sz4 { p & 0xffff_ffff } else { p },
                sz4,
            }));
            v.push(Packet::Bep { ip });
            v
        });
    let single = packet(true, 64).prop_map(|p| vec![p]);
    prop::collection::vec(prop_oneof![8 => single, 1 => trig, 1 => block], 0..60)
        .prop_map(|groups| groups.into_iter().flatten().collect())
}

/// Every packet of `bytes` from offset 0, with its offset and length, PADs included (ptemu's
/// decoder; a byte that does not decode is an error naming it).
pub fn decoded(bytes: &[u8]) -> Result<Vec<(u64, Packet, usize)>, String> {
    let mut d = ptemu::packet::PacketDecoder::new(bytes, 0);
    let mut list = Vec::new();
    while let Some(r) = d.next_packet() {
        let (off, p) = r.map_err(|e| format!("decode: {e}"))?;
        list.push((off, p, (d.offset() - off) as usize));
    }
    Ok(list)
}
