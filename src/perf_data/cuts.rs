//! Where a trace is cut into AUX buffers (PD1, PD13). A driver takes the trace from the output
//! unit after it stopped tracing (Linux's `intel_pt_interrupt` calls `pt_config_stop` before it
//! hands the AUX data on), so every buffer ends where a packet ends: the cuts a PMI gives are
//! moved back to the start of the packet that holds them ([`at_packet_starts`]). perf 6.1 on a
//! 64-bit build cannot take a packet split across two buffers (it reads the packet's rest as new
//! packets: spec/perf-data.md, PD13), so a cut inside a packet is made only on purpose, for the
//! corpus case that asks a decoder to join buffers ([`inside_packets`]).

use crate::packet::{Packet, PacketDecoder, PSB_BYTES};
use memchr::memmem;

/// Each cut (an offset into `trace`, in increasing order) moved back to the start of the packet
/// it falls inside; a cut at a packet's start stays. The packets are found by decoding from the
/// last PSB at or before the cut, so the work is a PSB period per cut, not the whole trace. A
/// cut with no PSB before it, or in bytes that do not decode, stays where it is: no packet
/// boundary is known there (its buffer's padding may then fall inside a packet; the PMI cuts of
/// ptemu's own streams always find one). Cuts that come to the same offset are given once.
pub fn at_packet_starts(trace: &[u8], cuts: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(cuts.len());
    for &cut in cuts {
        let c = usize::try_from(cut).unwrap_or(usize::MAX).min(trace.len());
        let at = packet_start(trace, c).unwrap_or(c) as u64;
        if out.last() != Some(&at) {
            out.push(at);
        }
    }
    out
}

/// The start of the packet that holds byte `c` (or starts at it), decoding from the last PSB
/// that starts at or before `c`; `None` when there is none or the bytes do not decode.
fn packet_start(trace: &[u8], c: usize) -> Option<usize> {
    if c == trace.len() {
        return Some(c);
    }
    let psb = last_psb_at_or_before(trace, c)?;
    let mut d = PacketDecoder::new(&trace[psb..], psb as u64);
    loop {
        let (start, _) = d.next_packet()?.ok()?;
        let end = d.offset() as usize;
        if end > c {
            return Some(start as usize);
        }
    }
}

/// The offset of the last PSB that starts at or before `c`.
fn last_psb_at_or_before(trace: &[u8], c: usize) -> Option<usize> {
    let end = (c + PSB_BYTES.len()).min(trace.len());
    memmem::rfind(&trace[..end], &PSB_BYTES)
}

/// Where the corpus case `aux-split` cuts its AUX buffers, inside packets on purpose (PD13):
/// inside the first PSB after byte 1024, inside the FUP of that PSB's PSB+, inside the first
/// TIP after that PSB+, and inside the TSC of the next PSB+ (each as many bytes in as
/// half the packet's length); with the kind of packet each splits. Fewer where the trace ends
/// first.
pub fn inside_packets(trace: &[u8]) -> Vec<(u64, &'static str)> {
    let mut cuts = Vec::new();
    let mut want: &[&str] = &["psb", "fup", "tip", "tsc"];
    let mut d = PacketDecoder::new(trace, 0);
    if !d.sync_forward() {
        return cuts;
    }
    // Whether the packets seen are inside a PSB+ (a PSB, up to its PSBEND).
    let mut in_psb_plus = false;
    while let Some(Ok((start, p))) = d.next_packet() {
        let len = d.offset() - start;
        match p {
            Packet::Psb => in_psb_plus = true,
            Packet::PsbEnd => in_psb_plus = false,
            _ => {}
        }
        let Some(&next) = want.first() else { break };
        // The FUP and the TSC are those of a PSB+; the PSB and the TIP any after byte 1024.
        let fits = match next {
            "psb" => start >= 1024,
            "fup" | "tsc" => in_psb_plus,
            _ => !in_psb_plus,
        };
        if fits && p.name() == next && len >= 2 {
            cuts.push((start + len / 2, next));
            want = &want[1..];
        }
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{IpPayload, Ipc, PacketEncoder};

    fn stream(packets: &[Packet]) -> (Vec<u8>, Vec<u64>) {
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        let mut e = PacketEncoder::new();
        for p in packets {
            starts.push(bytes.len() as u64);
            e.encode_to_vec(p, &mut bytes).unwrap();
        }
        (bytes, starts)
    }

    fn tip(ip: u64) -> IpPayload {
        IpPayload {
            ipc: Ipc::Sext48,
            raw: ip,
        }
    }

    /// PD13: every cut goes back to the start of its packet; one at a start or at the end
    /// stays; cuts that meet are given once; no PSB before a cut leaves it.
    #[test]
    fn pd13_cuts_move_to_the_start_of_their_packet() {
        let (bytes, s) = stream(&[
            Packet::Psb,
            Packet::Fup(tip(0x40_1000)),
            Packet::PsbEnd,
            Packet::Tip(tip(0x40_2000)),
            Packet::Pad,
            Packet::Tip(tip(0x40_3000)),
        ]);
        let n = bytes.len() as u64;
        assert_eq!(
            at_packet_starts(&bytes, &[3, s[1] + 2, s[3] + 1, s[4]]),
            [0, s[1], s[3], s[4]]
        );
        assert_eq!(at_packet_starts(&bytes, &[s[5] + 1, n]), [s[5], n]);
        assert_eq!(at_packet_starts(&bytes, &[s[3] + 1, s[3] + 2]), [s[3]]);
        let tail = &bytes[s[3] as usize..];
        assert_eq!(
            at_packet_starts(tail, &[1]),
            [1],
            "no PSB: no packet boundary known"
        );
    }

    /// PD13: the split case's cuts each fall inside a packet of the kind it names.
    #[test]
    fn pd13_inside_packets_splits_a_psb_a_fup_a_tip_and_a_tsc() {
        let mut packets = vec![Packet::Pad; 1030];
        for k in 0..3 {
            packets.extend([
                Packet::Psb,
                Packet::Tsc {
                    tsc: 0x1_0000_0000 + k,
                },
                Packet::Fup(tip(0x40_1000)),
                Packet::PsbEnd,
                Packet::Tip(tip(0x40_2000 + k)),
            ]);
        }
        let (bytes, s) = stream(&packets);
        let cuts = inside_packets(&bytes);
        let kinds: Vec<&str> = cuts.iter().map(|c| c.1).collect();
        assert_eq!(kinds, ["psb", "fup", "tip", "tsc"]);
        for (at, kind) in cuts {
            let k = s.iter().rposition(|&x| x <= at).unwrap();
            assert!(s[k] < at, "{kind} at {at} is inside a packet");
            assert_eq!(packets[k].name(), kind);
        }
    }
}
