//! The encoder: a packet into a caller's buffer, no allocation (pt-packets.md §1, §3).

use super::ip::{IpPayload, LastIp};
use super::opcode::*;
use super::{Packet, PtwSize, Tnt, MAX_PACKET_LEN, PSB_BYTES};

/// A packet that cannot be encoded as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A field is out of the range the packet can carry.
    #[error("{packet}: {field} = {value:#x} does not fit the packet")]
    BadField {
        /// Packet name.
        packet: &'static str,
        /// Field name.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// The output buffer is shorter than the packet.
    #[error("output buffer too small: need {need} bytes")]
    BufferTooSmall {
        /// Bytes the packet needs.
        need: usize,
    },
}

#[inline(always)]
fn check(ok: bool, p: &Packet, field: &'static str, value: u64) -> Result<(), EncodeError> {
    if ok {
        Ok(())
    } else {
        Err(bad_field(p, field, value))
    }
}

#[cold]
fn bad_field(p: &Packet, field: &'static str, value: u64) -> EncodeError {
    EncodeError::BadField {
        packet: p.name(),
        field,
        value,
    }
}

#[inline(always)]
fn put_le(buf: &mut [u8; MAX_PACKET_LEN], at: usize, v: u64, n: usize) {
    buf[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
}

/// TIP, TIP.PGE, TIP.PGD, FUP: header, payload, and the last-IP update once the packet is valid.
#[inline(always)]
fn ip_packet(
    buf: &mut [u8; MAX_PACKET_LEN],
    opcode: u8,
    ip: IpPayload,
    p: &Packet,
    last_ip: &mut LastIp,
) -> Result<usize, EncodeError> {
    check(ip.raw & !ip.ipc.mask() == 0, p, "ip payload", ip.raw)?;
    buf[0] = (ip.ipc as u8) << 5 | opcode;
    // One fixed 8-byte store; bytes past the payload are scratch (see `Packet::encode_into`).
    buf[1..9].copy_from_slice(&ip.raw.to_le_bytes());
    last_ip.update_fitting(ip);
    Ok(1 + ip.ipc.payload_len())
}

impl Packet {
    /// Encodes into a fixed buffer; returns the packet's length `n`. Bytes of `buf` past `n` may be
    /// overwritten with scratch values (fixed-size stores are faster than exact ones).
    #[inline(always)]
    pub fn encode_into(&self, buf: &mut [u8; MAX_PACKET_LEN]) -> Result<usize, EncodeError> {
        // A scratch last-IP: the compiler drops its updates.
        self.encode_tracking(buf, &mut LastIp::new())
    }

    /// [`Packet::encode_into`] that also updates `last_ip` in the same dispatch: IP packets apply
    /// their payload, PSB and OVF reset it.
    #[inline(always)]
    fn encode_tracking(
        &self,
        buf: &mut [u8; MAX_PACKET_LEN],
        last_ip: &mut LastIp,
    ) -> Result<usize, EncodeError> {
        // TNT-8 first, outside the dispatch: it is most of any branch trace, and a predictable
        // test-and-store beats an indirect jump through the packet table.
        if let Packet::Tnt8(t) = *self {
            return encode_tnt8(buf, t, self);
        }
        less_likely();
        Ok(match *self {
            Packet::Pad => {
                buf[0] = 0;
                1
            }
            Packet::Tnt8(t) => encode_tnt8(buf, t, self)?,
            Packet::Tnt64(t) => {
                check((1..=47).contains(&t.count), self, "count", t.count.into())?;
                check(t.bits >> t.count == 0, self, "bits", t.bits)?;
                buf[0] = EXT;
                buf[1] = EXT_TNT64;
                put_le(buf, 2, t.bits | 1 << t.count, 6);
                8
            }
            Packet::Tip(ip) => ip_packet(buf, TIP, ip, self, last_ip)?,
            Packet::TipPge(ip) => ip_packet(buf, TIP_PGE, ip, self, last_ip)?,
            Packet::TipPgd(ip) => ip_packet(buf, TIP_PGD, ip, self, last_ip)?,
            Packet::Fup(ip) => ip_packet(buf, FUP, ip, self, last_ip)?,
            Packet::Pip { cr3, nr } => {
                check(cr3 & !PIP_CR3_MASK == 0, self, "cr3", cr3)?;
                buf[0] = EXT;
                buf[1] = EXT_PIP;
                put_le(buf, 2, (cr3 >> 5) << 1 | nr as u64, 6);
                8
            }
            Packet::ModeExec { csl, csd, if_ } => {
                buf[0] = MODE;
                buf[1] = MODE_EXEC_LEAF | (if_ as u8) << 2 | (csd as u8) << 1 | csl as u8;
                2
            }
            Packet::ModeTsx { intx, abrt } => {
                buf[0] = MODE;
                buf[1] = MODE_TSX_LEAF | (abrt as u8) << 1 | intx as u8;
                2
            }
            Packet::TraceStop => ext(buf, EXT_STOP),
            Packet::Cbr { ratio } => {
                buf[..4].copy_from_slice(&[EXT, EXT_CBR, ratio, 0]);
                4
            }
            Packet::Tsc { tsc } => {
                check(tsc & !TSC_MASK == 0, self, "tsc", tsc)?;
                buf[0] = TSC;
                put_le(buf, 1, tsc, 7);
                8
            }
            Packet::Mtc { ctc } => {
                buf[0] = MTC;
                buf[1] = ctc;
                2
            }
            Packet::Tma { ctc, fc } => {
                check(fc & !TMA_FC_MASK == 0, self, "fc", fc.into())?;
                let [c0, c1] = ctc.to_le_bytes();
                buf[..7].copy_from_slice(&[EXT, EXT_TMA, c0, c1, 0, fc as u8, (fc >> 8) as u8]);
                7
            }
            Packet::Cyc { value } => encode_cyc(buf, value),
            Packet::Vmcs { base } => {
                check(base & !VMCS_BASE_MASK == 0, self, "base", base)?;
                buf[0] = EXT;
                buf[1] = EXT_VMCS;
                put_le(buf, 2, base >> 12, 5);
                7
            }
            Packet::Ovf => {
                last_ip.reset();
                ext(buf, EXT_OVF)
            }
            Packet::Psb => {
                last_ip.reset();
                *buf = PSB_BYTES;
                16
            }
            Packet::PsbEnd => ext(buf, EXT_PSBEND),
            Packet::Mnt { payload } => {
                buf[..3].copy_from_slice(&[EXT, EXT_MNT, MNT_LEAF]);
                put_le(buf, 3, payload, 8);
                11
            }
            Packet::Ptw { size, payload, ip } => {
                let (code, n) = match size {
                    PtwSize::Four => (0u8, 4),
                    PtwSize::Eight => (1, 8),
                };
                check(n == 8 || payload >> 32 == 0, self, "payload", payload)?;
                buf[0] = EXT;
                buf[1] = (ip as u8) << 7 | code << 5 | EXT_PTW;
                put_le(buf, 2, payload, n);
                2 + n
            }
            Packet::Exstop { ip } => ext(buf, EXT_EXSTOP | (ip as u8) << 7),
            Packet::Mwait { hints, ext: e } => {
                buf[0] = EXT;
                buf[1] = EXT_MWAIT;
                put_le(buf, 2, u64::from(hints) | u64::from(e) << 32, 8);
                10
            }
            Packet::Pwre { state, sub_state, hw } => {
                check(state & !C_STATE_MASK == 0, self, "state", state.into())?;
                check(
                    sub_state & !C_STATE_MASK == 0,
                    self,
                    "sub_state",
                    sub_state.into(),
                )?;
                buf[..4].copy_from_slice(&[EXT, EXT_PWRE, (hw as u8) << 7, state << 4 | sub_state]);
                4
            }
            Packet::Pwrx { last, deepest, wake } => {
                check(last & !C_STATE_MASK == 0, self, "last", last.into())?;
                check(deepest & !C_STATE_MASK == 0, self, "deepest", deepest.into())?;
                check(wake & !PWRX_WAKE_MASK == 0, self, "wake", wake.into())?;
                buf[..7].copy_from_slice(&[EXT, EXT_PWRX, last << 4 | deepest, wake, 0, 0, 0]);
                7
            }
            Packet::Bbp { sz4, ty } => {
                check(ty <= 0x1f, self, "type", ty.into())?;
                buf[..3].copy_from_slice(&[EXT, EXT_BBP, (sz4 as u8) << 7 | ty]);
                3
            }
            Packet::Bip { id, payload, sz4 } => {
                check(id <= 0x1f, self, "id", id.into())?;
                check(!sz4 || payload >> 32 == 0, self, "payload", payload)?;
                buf[0] = id << 3 | BIP_TAG;
                let n = if sz4 { 4 } else { 8 };
                put_le(buf, 1, payload, n);
                1 + n
            }
            Packet::Bep { ip } => ext(buf, EXT_BEP | (ip as u8) << 7),
            Packet::Cfe { ty, vector, ip } => {
                check(ty <= 0x1f, self, "type", ty.into())?;
                buf[..4].copy_from_slice(&[EXT, EXT_CFE, (ip as u8) << 7 | ty, vector]);
                4
            }
            Packet::Evd { ty, payload } => {
                check(ty <= 0x3f, self, "type", ty.into())?;
                buf[..3].copy_from_slice(&[EXT, EXT_EVD, ty]);
                put_le(buf, 3, payload, 8);
                11
            }
            Packet::Trig { trbv, ip, mult, icnt } => {
                buf[0] = TRIG;
                buf[1] = (ip as u8) << 7 | (icnt.is_some() as u8) << 6 | (mult as u8) << 5;
                buf[2] = trbv;
                match icnt {
                    Some(n) => {
                        put_le(buf, 3, n.into(), 2);
                        5
                    }
                    None => 3,
                }
            }
        })
    }

    /// Encodes into `out`; returns the packet's length `n`. When `out` has room for the largest
    /// packet (16 bytes), the packet is built in place and bytes `n..16` of `out` may be overwritten
    /// with scratch values: a stream writer's next packet overwrites them. Shorter buffers get
    /// exactly `n` bytes.
    #[inline(always)]
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if let Some(room) = out.first_chunk_mut::<MAX_PACKET_LEN>() {
            return self.encode_into(room);
        }
        let mut buf = [0u8; MAX_PACKET_LEN];
        let n = self.encode_into(&mut buf)?;
        let dst = out.get_mut(..n).ok_or(EncodeError::BufferTooSmall { need: n })?;
        dst.copy_from_slice(&buf[..n]);
        Ok(n)
    }

    /// Appends the encoding to `out`.
    pub fn encode_to_vec(&self, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        let mut buf = [0u8; MAX_PACKET_LEN];
        let n = self.encode_into(&mut buf)?;
        out.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// Marks the path that calls it as the less likely one, so the TNT-8 test stays its own branch
/// instead of merging into the packet dispatch (`std::hint::cold_path` needs Rust 1.95; our MSRV
/// is 1.88).
#[cold]
#[inline(always)]
fn less_likely() {}

/// The stop bit of a TNT-8 by its count: `1 << count` for a count in 1..=6, 0 for any other, so
/// that one compare, `bits < stop`, checks both limits.
const TNT8_STOP: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut count = 1;
    while count <= 6 {
        t[count] = 1 << count;
        count += 1;
    }
    t
};

/// TNT-8: the bits above a stop bit, then bit 0 clear (SDM 36-17).
#[inline(always)]
fn encode_tnt8(buf: &mut [u8; MAX_PACKET_LEN], t: Tnt, p: &Packet) -> Result<usize, EncodeError> {
    let stop = u64::from(TNT8_STOP[usize::from(t.count)]);
    if t.bits >= stop {
        return Err(tnt8_error(t, p));
    }
    buf[0] = ((t.bits | stop) << 1) as u8;
    Ok(1)
}

/// Which limit a TNT-8 broke.
#[cold]
fn tnt8_error(t: Tnt, p: &Packet) -> EncodeError {
    if (1..=6).contains(&t.count) {
        bad_field(p, "bits", t.bits)
    } else {
        bad_field(p, "count", t.count.into())
    }
}

#[inline(always)]
fn ext(buf: &mut [u8; MAX_PACKET_LEN], op: u8) -> usize {
    buf[0] = EXT;
    buf[1] = op;
    2
}

/// CYC: 5 value bits in byte 0 (bit 2 = more), then 7 bits per byte (bit 0 = more) (SDM 36-52).
#[inline(always)]
fn encode_cyc(buf: &mut [u8; MAX_PACKET_LEN], value: u64) -> usize {
    let mut v = value >> 5;
    buf[0] = ((value & 0x1f) as u8) << 3 | CYC_TAG | if v != 0 { CYC_MORE } else { 0 };
    let mut n = 1;
    while v != 0 {
        let more = v >> 7 != 0;
        buf[n] = ((v & 0x7f) as u8) << 1 | more as u8;
        v >>= 7;
        n += 1;
    }
    n
}

/// An encoder that keeps last-IP state: [`PacketEncoder::compress`] picks the shortest IP form that
/// reproduces an IP, as hardware does; encoding a packet updates the state (IP packets), and PSB and
/// OVF reset it.
#[derive(Clone, Debug, Default)]
pub struct PacketEncoder {
    last_ip: LastIp,
}

impl PacketEncoder {
    /// A fresh encoder (last IP = 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// The last-IP state.
    pub fn last_ip(&self) -> LastIp {
        self.last_ip
    }

    /// Forgets the last IP, as an OVF or PSB does: the next IP packet cannot be compressed.
    pub fn forget_last_ip(&mut self) {
        self.last_ip.reset();
    }

    /// The payload for `ip` (None: suppressed) against the current last IP.
    #[inline]
    pub fn compress(&self, ip: Option<u64>) -> IpPayload {
        ip.map_or(IpPayload::SUPPRESSED, |ip| self.last_ip.compress(ip))
    }

    /// `ip` compressed against the encoder's last IP without update-48
    /// ([`crate::packet::LastIp::compress_without_update48`]).
    pub fn compress_without_update48(&self, ip: u64) -> IpPayload {
        self.last_ip.compress_without_update48(ip)
    }

    /// Encodes `p` into `out` and tracks last IP. Like [`Packet::encode`], bytes past the packet
    /// (up to 16 in all) may be overwritten when `out` has room for 16.
    #[inline(always)]
    pub fn encode(&mut self, p: &Packet, out: &mut [u8]) -> Result<usize, EncodeError> {
        if let Some(room) = out.first_chunk_mut::<MAX_PACKET_LEN>() {
            return p.encode_tracking(room, &mut self.last_ip);
        }
        self.encode_exact(p, out)
    }

    /// [`PacketEncoder::encode`] into fewer than 16 bytes: staged, then copied. Out of line, so the
    /// in-place path keeps its registers.
    #[cold]
    #[inline(never)]
    fn encode_exact(&mut self, p: &Packet, out: &mut [u8]) -> Result<usize, EncodeError> {
        let (buf, n, last_ip) = self.stage(p)?;
        let dst = out.get_mut(..n).ok_or(EncodeError::BufferTooSmall { need: n })?;
        dst.copy_from_slice(&buf[..n]);
        self.last_ip = last_ip;
        Ok(n)
    }

    /// Encodes `packets` in order into `out` and tracks last IP; returns the bytes written. The
    /// stream form of [`PacketEncoder::encode`]: while 16 bytes per remaining packet surely fit, the
    /// loop skips the per-packet room test. On a packet that cannot be encoded (bad field, or `out`
    /// full), returns its index and the error; the packets before it are in `out` and in last IP.
    /// Like [`PacketEncoder::encode`], bytes past the written ones (up to 16 past the last packet's
    /// start) may be overwritten with scratch values.
    pub fn encode_all(&mut self, packets: &[Packet], out: &mut [u8]) -> Result<usize, (usize, EncodeError)> {
        let (mut pos, mut i) = (0, 0);
        let mut last_ip = self.last_ip;
        loop {
            let sure = packets.len().min(i + (out.len() - pos) / MAX_PACKET_LEN);
            if sure == i {
                break;
            }
            // The run's loop walks an output pointer, with no index or offset beside it: fewer
            // live values (a TNT-only stream went from 1.36 to 0.64 ns per packet).
            let run = &packets[i..sure];
            let start = out[pos..].as_mut_ptr();
            let mut dst = start;
            for p in run {
                // SAFETY: `dst + 16` stays inside `out`: the run started at `pos` with
                // `pos + 16 * run.len() <= out.len()` (the `sure` bound), and each packet before
                // this one advanced `dst` by at most 16. `start` comes from `out`, which nothing
                // else touches in the loop. (Checked slicing here costs two compares and
                // branches per packet, measurable on one-byte TNT packets.)
                let room = unsafe { &mut *dst.cast::<[u8; MAX_PACKET_LEN]>() };
                match p.encode_tracking(room, &mut last_ip) {
                    // SAFETY: `n <= 16`, inside `out` as above.
                    Ok(n) => dst = unsafe { dst.add(n) },
                    Err(e) => {
                        self.last_ip = last_ip;
                        // SAFETY: `p` is an element of `run`.
                        let k = unsafe { (p as *const Packet).offset_from(run.as_ptr()) } as usize;
                        return Err((i + k, e));
                    }
                }
            }
            // SAFETY: `dst` was advanced from `start` inside `out`.
            pos += unsafe { dst.offset_from(start) } as usize;
            i = sure;
        }
        self.last_ip = last_ip;
        for p in &packets[i..] {
            pos += self.encode(p, &mut out[pos..]).map_err(|e| (i, e))?;
            i += 1;
        }
        Ok(pos)
    }

    /// Encodes `p` at the end of `out` and tracks last IP.
    pub fn encode_to_vec(&mut self, p: &Packet, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        let (buf, n, last_ip) = self.stage(p)?;
        out.extend_from_slice(&buf[..n]);
        self.last_ip = last_ip;
        Ok(n)
    }

    /// Encodes into a scratch buffer against a copy of last IP, so a failure changes nothing.
    fn stage(&self, p: &Packet) -> Result<([u8; MAX_PACKET_LEN], usize, LastIp), EncodeError> {
        let mut buf = [0u8; MAX_PACKET_LEN];
        let mut last_ip = self.last_ip;
        let n = p.encode_tracking(&mut buf, &mut last_ip)?;
        Ok((buf, n, last_ip))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Ipc, Tnt};
    use super::*;

    fn bytes(p: Packet) -> Vec<u8> {
        let mut v = Vec::new();
        p.encode_to_vec(&mut v).unwrap();
        v
    }

    #[test]
    fn byte_layouts_match_the_golden_examples() {
        assert_eq!(
            bytes(Packet::Tnt8(Tnt::from_outcomes(&[
                true, false, false, false, true
            ]))),
            [0x62]
        );
        assert_eq!(
            bytes(Packet::Tip(IpPayload::new(Ipc::Sext48, 0xffff_ffff_1000))),
            [0x6d, 0x00, 0x10, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(
            bytes(Packet::Pip {
                cr3: 0xafafa0,
                nr: true
            }),
            [0x02, 0x43, 0xfb, 0xfa, 0x0a, 0, 0, 0]
        );
        assert_eq!(bytes(Packet::Cyc { value: 0x57 }), [0xbf, 0x04]);
        assert_eq!(bytes(Packet::Cyc { value: 0x1000 }), [0x07, 0x01, 0x02]);
        assert_eq!(
            bytes(Packet::Cyc { value: u64::MAX }),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0e]
        );
        assert_eq!(
            bytes(Packet::Tma { ctc: 0x12, fc: 0x34 }),
            [0x02, 0x73, 0x12, 0x00, 0x00, 0x34, 0x00]
        );
        assert_eq!(
            bytes(Packet::Vmcs { base: 0xabcd000 }),
            [0x02, 0xc8, 0xcd, 0xab, 0, 0, 0]
        );
        assert_eq!(
            bytes(Packet::Pwrx {
                last: 0,
                deepest: 5,
                wake: 1
            }),
            [0x02, 0xa2, 0x05, 0x01, 0, 0, 0]
        );
        assert_eq!(
            bytes(Packet::Cfe {
                ty: 3,
                vector: 0xf0,
                ip: true
            }),
            [0x02, 0x13, 0x83, 0xf0]
        );
        assert_eq!(
            bytes(Packet::Trig {
                trbv: 0xa1,
                ip: true,
                mult: true,
                icnt: Some(23)
            }),
            [0xd9, 0xe0, 0xa1, 0x17, 0x00]
        );
        assert_eq!(
            bytes(Packet::Ptw {
                size: PtwSize::Four,
                payload: 0x90abcdef,
                ip: true
            }),
            [0x02, 0x92, 0xef, 0xcd, 0xab, 0x90]
        );
        assert_eq!(
            bytes(Packet::Pwre {
                state: 0xf,
                sub_state: 0xf,
                hw: true
            }),
            [0x02, 0x22, 0x80, 0xff]
        );
    }

    #[test]
    fn the_encoder_tracks_last_ip_on_every_path_and_a_failure_changes_nothing() {
        let mut enc = PacketEncoder::new();
        let tip = Packet::Tip(IpPayload::new(Ipc::Sext48, 0x7fff_0000_1000));
        let mut short = [0u8; 7];
        assert_eq!(enc.encode(&tip, &mut short), Ok(7));
        assert_eq!(enc.last_ip().get(), 0x7fff_0000_1000);
        let bad = Packet::Fup(IpPayload {
            ipc: Ipc::Update16,
            raw: 0x1_0000,
        });
        assert!(enc.encode(&bad, &mut [0u8; 16]).is_err());
        assert!(enc.encode_to_vec(&bad, &mut Vec::new()).is_err());
        assert_eq!(
            enc.encode(&tip, &mut [0u8; 3]),
            Err(EncodeError::BufferTooSmall { need: 7 })
        );
        assert_eq!(
            enc.last_ip().get(),
            0x7fff_0000_1000,
            "failures leave last IP alone"
        );
        assert_eq!(enc.compress(Some(0x7fff_0000_2000)).ipc, Ipc::Update16);
        enc.encode_to_vec(&Packet::Ovf, &mut Vec::new()).unwrap();
        assert_eq!(enc.last_ip().get(), 0);
    }

    #[test]
    fn encode_all_names_the_bad_packet_and_keeps_what_came_before() {
        let tip = Packet::Tip(IpPayload::new(Ipc::Sext48, 0x7fff_0000_1000));
        let bad = Packet::Tnt8(Tnt { bits: 4, count: 2 });
        let mut enc = PacketEncoder::new();
        let mut out = [0u8; 64];
        assert_eq!(
            enc.encode_all(&[Packet::Pad, tip, bad, Packet::Pad], &mut out),
            Err((
                2,
                EncodeError::BadField {
                    packet: "tnt.8",
                    field: "bits",
                    value: 4
                }
            ))
        );
        assert_eq!(out[..8], [0x00, 0x6d, 0x00, 0x10, 0x00, 0x00, 0xff, 0x7f]);
        assert_eq!(enc.last_ip().get(), 0x7fff_0000_1000);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let mut b = [0u8; 16];
        assert!(Packet::Tnt8(Tnt { bits: 0, count: 7 })
            .encode_into(&mut b)
            .is_err());
        assert!(Packet::Tnt64(Tnt { bits: 0, count: 48 })
            .encode_into(&mut b)
            .is_err());
        assert!(Packet::Tnt8(Tnt { bits: 0, count: 0 })
            .encode_into(&mut b)
            .is_err());
        assert!(Packet::Tma { ctc: 0, fc: 0x200 }.encode_into(&mut b).is_err());
        assert!(Packet::Pip {
            cr3: 0x1001,
            nr: false
        }
        .encode_into(&mut b)
        .is_err());
        assert!(Packet::Tip(IpPayload {
            ipc: Ipc::Update16,
            raw: 0x1_0000
        })
        .encode_into(&mut b)
        .is_err());
        assert_eq!(
            Packet::Psb.encode(&mut [0u8; 15]),
            Err(EncodeError::BufferTooSmall { need: 16 })
        );
    }
}
