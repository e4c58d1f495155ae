//! IP compression (IPBytes) and the last-IP state shared by TIP, TIP.PGE, TIP.PGD and FUP
//! (pt-packets.md §2).

/// The IPBytes field: how much of the IP a packet carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Ipc {
    /// 000: no IP (suppressed); last IP unchanged.
    Suppressed = 0,
    /// 001: IP\[15:0\]; upper bits from last IP.
    Update16 = 1,
    /// 010: IP\[31:0\]; upper bits from last IP.
    Update32 = 2,
    /// 011: IP\[47:0\] sign-extended from bit 47.
    Sext48 = 3,
    /// 100: IP\[47:0\]; bits 63:48 from last IP.
    Update48 = 4,
    /// 110: the full 64-bit IP.
    Full = 6,
}

#[cfg(feature = "serde")]
impl serde::Serialize for Ipc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(*self as u8)
    }
}

impl Ipc {
    /// Decodes the 3-bit field; 5 and 7 are reserved.
    pub fn from_bits(v: u8) -> Option<Self> {
        Some(match v {
            0 => Ipc::Suppressed,
            1 => Ipc::Update16,
            2 => Ipc::Update32,
            3 => Ipc::Sext48,
            4 => Ipc::Update48,
            6 => Ipc::Full,
            _ => return None,
        })
    }

    /// Payload bytes the packet carries.
    #[inline(always)]
    pub const fn payload_len(self) -> usize {
        IPC_SHAPE[self as usize].len as usize
    }

    /// Mask of the payload bits.
    #[inline(always)]
    pub const fn mask(self) -> u64 {
        IPC_SHAPE[self as usize].mask
    }
}

/// How one IPBytes value rebuilds an IP, as table data so that the hot paths (encoder, decoder,
/// tracer) look it up instead of branching on the form: IP = (payload & mask) | (bit 47 of it
/// copied into `high`) | (last IP & keep).
#[derive(Clone, Copy)]
struct IpcShape {
    len: u8,
    mask: u64,
    keep: u64,
    /// The bits sign extension sets: 63:48 for sext-48, none for the other forms.
    high: u64,
}

/// `raw` with bits 63:48 set when the form sign-extends (sext-48) and bit 47 is set: fixed shifts
/// and masks, no shift by a variable count (two or three micro-ops each on x86 without BMI2).
#[inline(always)]
fn sign_extend(raw: u64, s: &IpcShape) -> u64 {
    raw | (((raw >> 47) & 1).wrapping_neg() & s.high)
}

/// Bits 63:48, which sext-48 fills from bit 47.
const SEXT48_HIGH: u64 = 0xffff_0000_0000_0000;

const fn shape(len: u8, keep: u64, high: u64) -> IpcShape {
    IpcShape {
        len,
        mask: if len == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * len)) - 1
        },
        keep,
        high,
    }
}

/// Indexed by the 3-bit IPBytes value; the reserved values 5 and 7 never index it (an [`Ipc`] cannot
/// hold them) and read as "suppressed".
const IPC_SHAPE: [IpcShape; 8] = [
    shape(0, u64::MAX, 0),
    shape(2, !0xffff, 0),
    shape(4, !0xffff_ffff, 0),
    shape(6, 0, SEXT48_HIGH),
    shape(6, !0xffff_ffff_ffff, 0),
    shape(0, u64::MAX, 0),
    shape(8, 0, 0),
    shape(0, u64::MAX, 0),
];

/// The IP field of an IP packet exactly as it sits in the packet: the compression and the payload
/// bits (only the low `ipc.payload_len()` bytes are meaningful).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct IpPayload {
    /// IPBytes.
    pub ipc: Ipc,
    /// Payload bits, zero-extended.
    pub raw: u64,
}

impl IpPayload {
    /// A suppressed IP.
    pub const SUPPRESSED: IpPayload = IpPayload {
        ipc: Ipc::Suppressed,
        raw: 0,
    };

    /// A payload with `raw` cut to what `ipc` carries.
    pub fn new(ipc: Ipc, raw: u64) -> Self {
        IpPayload {
            ipc,
            raw: raw & ipc.mask(),
        }
    }

    /// `ip` not compressed: sext-48 (IPBytes 3) when bits 63:48 copy bit 47 (a canonical
    /// 48-bit address), else the full 64 bits (IPBytes 6).
    #[inline]
    pub fn uncompressed(ip: u64) -> Self {
        if (((ip << 16) as i64) >> 16) as u64 == ip {
            IpPayload::new(Ipc::Sext48, ip)
        } else {
            IpPayload::new(Ipc::Full, ip)
        }
    }
}

/// Last-IP state: the IP of the last IP packet that carried one (SDM 36-38/39). Reset to 0 at PSB
/// and, as libipt does, at OVF.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastIp {
    ip: u64,
}

impl LastIp {
    /// Last IP = 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current last IP.
    pub fn get(&self) -> u64 {
        self.ip
    }

    /// Back to 0 (PSB, OVF).
    pub fn reset(&mut self) {
        self.ip = 0;
    }

    /// The IP `p` stands for against the current last IP, without updating it; `None` if suppressed.
    #[inline(always)]
    pub fn reconstruct(&self, p: IpPayload) -> Option<u64> {
        let mut next = *self;
        next.apply(p)
    }

    /// Reconstructs `p` and makes it the last IP.
    #[inline(always)]
    pub fn apply(&mut self, p: IpPayload) -> Option<u64> {
        self.update(p);
        (p.ipc != Ipc::Suppressed).then_some(self.ip)
    }

    /// [`LastIp::apply`] without the result: one table lookup, no branch on the form (a suppressed
    /// payload keeps every bit of last IP).
    #[inline(always)]
    pub fn update(&mut self, p: IpPayload) {
        let s = &IPC_SHAPE[p.ipc as usize];
        let payload = sign_extend(p.raw & s.mask, s);
        self.ip = payload | (self.ip & s.keep);
    }

    /// [`LastIp::update`] for a payload with no bits outside its form's mask (checked by the caller).
    #[inline(always)]
    pub(crate) fn update_fitting(&mut self, p: IpPayload) {
        let s = &IPC_SHAPE[p.ipc as usize];
        debug_assert_eq!(p.raw & !s.mask, 0);
        let payload = sign_extend(p.raw, s);
        self.ip = payload | (self.ip & s.keep);
    }

    /// The shortest payload that reproduces `ip` from the current last IP: update-16, -32, -48 when
    /// the upper bits match, else sext-48 for canonical IPs, else full (pt-packets.md §2).
    #[inline]
    pub fn compress(&self, ip: u64) -> IpPayload {
        let diff = ip ^ self.ip;
        let ipc = if diff >> 16 == 0 {
            Ipc::Update16
        } else if diff >> 32 == 0 {
            Ipc::Update32
        } else if diff >> 48 == 0 {
            Ipc::Update48
        } else {
            return IpPayload::uncompressed(ip);
        };
        IpPayload::new(ipc, ip)
    }

    /// [`LastIp::compress`] as Skylake and later hardware chooses: update-16 or update-32 when
    /// they fit, else not compressed ([`IpPayload::uncompressed`]); update-48 is never used
    /// (spec/hardware.md HW6).
    #[inline]
    pub fn compress_without_update48(&self, ip: u64) -> IpPayload {
        match self.compress(ip) {
            p if p.ipc == Ipc::Update48 => IpPayload::uncompressed(ip),
            p => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_picks_the_shortest_exact_form() {
        let mut l = LastIp::new();
        assert_eq!(l.compress(0x1234).ipc, Ipc::Update16);
        assert_eq!(l.compress(0x1234_5678).ipc, Ipc::Update32);
        assert_eq!(l.compress(0x7fff_1234_5678).ipc, Ipc::Update48);
        assert_eq!(l.compress(0xffff_8000_0000_1000).ipc, Ipc::Sext48);
        assert_eq!(l.compress(0x00cc_ffff_ffff_4000).ipc, Ipc::Full);
        l.apply(IpPayload::new(Ipc::Full, 0x00cc_0000_0000_0000));
        assert_eq!(l.compress(0x00cc_ffff_ffff_4000).ipc, Ipc::Update48);
        for ip in [
            0u64,
            1,
            0xffff_ffff_ffff_ffff,
            0x8000_0000_0000_0000,
            0x0000_8000_0000_0000,
        ] {
            let p = l.compress(ip);
            assert_eq!(l.reconstruct(p), Some(ip), "{ip:#x} via {p:?}");
        }
    }

    #[test]
    fn suppressed_leaves_last_ip_alone() {
        let mut l = LastIp::new();
        l.apply(IpPayload::new(Ipc::Sext48, 0xffff_ffff_1000));
        assert_eq!(l.get(), 0xffff_ffff_ffff_1000);
        assert_eq!(l.apply(IpPayload::SUPPRESSED), None);
        assert_eq!(l.get(), 0xffff_ffff_ffff_1000);
        assert_eq!(
            l.apply(IpPayload::new(Ipc::Update16, 0x2000)),
            Some(0xffff_ffff_ffff_2000)
        );
    }
}
