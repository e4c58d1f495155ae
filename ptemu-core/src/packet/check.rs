//! The decoder checked against the encoder and the text form on any bytes at all: the body of the
//! `packets` fuzz target and of the arbitrary-bytes property tests (spec/packets.md, "Any bytes").

use super::text::{parse_line, to_text, ParseState};
use super::{Packet, PacketDecoder};
use std::fmt;

/// What [`recheck`] went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecheckStats {
    /// Packets decoded (each one re-encoded and re-parsed).
    pub packets: u64,
    /// Decode errors (each followed by a resync at the next PSB).
    pub errors: u64,
}

/// A packet the decoder accepted that the encoder or the text form does not give back.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mismatch {
    /// Byte offset of the packet.
    pub offset: u64,
    /// The packet as decoded.
    pub packet: Packet,
    /// What disagreed.
    pub what: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {:#x}, {:?}: {}", self.offset, self.packet, self.what)
    }
}

/// Decodes `data` from byte 0 to its end, as `ptemu dump --no-sync` does (a decode error resyncs
/// at the next PSB), and checks what the decoder accepted: each packet re-encodes to exactly the
/// bytes it was decoded from, its text line assembles back to the same packet, and the decoder
/// always moves forward. Whatever the bytes, it returns (no panic, no hang).
#[doc(hidden)]
pub fn recheck(data: &[u8]) -> Result<RecheckStats, Mismatch> {
    let mut d = PacketDecoder::new(data, 0);
    let mut st = ParseState::default();
    let mut stats = RecheckStats::default();
    let mut buf = [0u8; super::MAX_PACKET_LEN];
    while let Some(r) = d.next_packet() {
        let (offset, packet) = match r {
            Ok(x) => x,
            Err(_) => {
                stats.errors += 1;
                st = ParseState::default();
                if !d.resync() {
                    break;
                }
                continue;
            }
        };
        let fail = |what: String| Mismatch { offset, packet, what };
        let bytes = &data[offset as usize..d.offset() as usize];
        if bytes.is_empty() {
            return Err(fail("the decoder did not move".into()));
        }
        let n = packet
            .encode_into(&mut buf)
            .map_err(|e| fail(format!("does not re-encode: {e}")))?;
        if buf[..n] != *bytes {
            return Err(fail(format!(
                "re-encodes as {:02x?}, decoded from {bytes:02x?}",
                &buf[..n]
            )));
        }
        let line = to_text(&packet);
        match parse_line(&line, &mut st) {
            Ok(Some(back)) if back == packet => {}
            other => return Err(fail(format!("text `{line}` assembles to {other:?}"))),
        }
        stats.packets += 1;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recheck_counts_packets_and_resyncs_after_errors() {
        let mut bytes = super::super::PSB_BYTES.to_vec();
        bytes.extend_from_slice(&[0x00, 0x0c, 0xd9]); // PAD, TNT-8, truncated TRIG
        bytes.extend_from_slice(&super::super::PSB_BYTES);
        bytes.push(0x00);
        let stats = recheck(&bytes).unwrap();
        assert_eq!(
            stats,
            RecheckStats {
                packets: 5,
                errors: 1
            }
        );
    }

    #[test]
    fn a_mismatch_names_the_offset_and_the_packet() {
        let m = Mismatch {
            offset: 0x12,
            packet: Packet::Pad,
            what: "x".into(),
        };
        assert_eq!(m.to_string(), "at byte 0x12, Pad: x");
    }
}
