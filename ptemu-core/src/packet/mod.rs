//! Intel PT packets, bit-exact: the [`Packet`] type, its encoder and decoder, last-IP compression,
//! and the text form (pt-packets.md §1–§4; choices in `spec/packets.md`).

mod check;
mod decode;
mod encode;
mod ip;
pub mod opcode;
pub mod text;

pub use check::{recheck, Mismatch, RecheckStats};
pub use decode::{find_psb, DecodeError, DecodeErrorKind, PacketDecoder};
pub use encode::{EncodeError, PacketEncoder};
pub use ip::{IpPayload, Ipc, LastIp};

/// The largest packet: PSB, 16 bytes.
pub const MAX_PACKET_LEN: usize = 16;

/// The 16 bytes of a PSB.
pub const PSB_BYTES: [u8; 16] = {
    let mut b = [opcode::EXT; 16];
    let mut i = 1;
    while i < 16 {
        b[i] = opcode::EXT_PSB;
        i += 2;
    }
    b
};

/// A run of TNT bits: `count` conditional-branch outcomes in the low bits of `bits`, the oldest in
/// bit `count - 1` and the youngest in bit 0 (1 = taken), as the packet holds them (SDM 36-37).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Tnt {
    /// The outcomes, oldest in the most significant of the `count` bits.
    pub bits: u64,
    /// How many: 1..=6 for TNT-8, 1..=47 for TNT-64.
    pub count: u8,
}

impl Tnt {
    /// Builds a TNT from outcomes listed oldest first.
    pub fn from_outcomes(taken: &[bool]) -> Self {
        let bits = taken.iter().fold(0u64, |acc, &t| acc << 1 | t as u64);
        Tnt {
            bits,
            count: taken.len() as u8,
        }
    }

    /// Outcome `i`, counting from the oldest (0).
    pub fn taken(&self, i: u8) -> bool {
        self.bits >> (self.count - 1 - i) & 1 == 1
    }
}

/// PTWRITE payload size (PayloadBytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum PtwSize {
    /// 00: 4 bytes.
    Four,
    /// 01: 8 bytes.
    Eight,
}

/// Every Intel PT packet (pt-packets.md §1). Field values are those the packet carries; IP packets
/// carry their compressed payload (see [`LastIp`] for the IP it stands for).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "packet"))]
#[non_exhaustive]
pub enum Packet {
    /// PAD `00`.
    #[cfg_attr(feature = "serde", serde(rename = "pad"))]
    Pad,
    /// Short TNT (1–6 bits).
    #[cfg_attr(feature = "serde", serde(rename = "tnt.8"))]
    Tnt8(Tnt),
    /// Long TNT `02 A3` (1–47 bits).
    #[cfg_attr(feature = "serde", serde(rename = "tnt.64"))]
    Tnt64(Tnt),
    /// TIP: target IP of an indirect branch, far transfer or uncompressed return.
    #[cfg_attr(feature = "serde", serde(rename = "tip"))]
    Tip(IpPayload),
    /// TIP.PGE: packet generation enabled at this IP.
    #[cfg_attr(feature = "serde", serde(rename = "tip.pge"))]
    TipPge(IpPayload),
    /// TIP.PGD: packet generation disabled.
    #[cfg_attr(feature = "serde", serde(rename = "tip.pgd"))]
    TipPgd(IpPayload),
    /// FUP: source IP of an asynchronous event.
    #[cfg_attr(feature = "serde", serde(rename = "fup"))]
    Fup(IpPayload),
    /// PIP `02 43`: CR3 (bits 51:5) and the non-root bit.
    #[cfg_attr(feature = "serde", serde(rename = "pip"))]
    Pip {
        /// CR3; bits 4:0 and 63:52 are not carried.
        cr3: u64,
        /// VMX non-root.
        nr: bool,
    },
    /// MODE.Exec `99 0x`.
    #[cfg_attr(feature = "serde", serde(rename = "mode.exec"))]
    ModeExec {
        /// CS.L.
        csl: bool,
        /// CS.D.
        csd: bool,
        /// RFLAGS.IF.
        #[cfg_attr(feature = "serde", serde(rename = "if"))]
        if_: bool,
    },
    /// MODE.TSX `99 2x`.
    #[cfg_attr(feature = "serde", serde(rename = "mode.tsx"))]
    ModeTsx {
        /// In a transaction.
        intx: bool,
        /// Transaction aborted.
        abrt: bool,
    },
    /// TraceStop `02 83`.
    #[cfg_attr(feature = "serde", serde(rename = "stop"))]
    TraceStop,
    /// CBR `02 03`: core:bus ratio.
    #[cfg_attr(feature = "serde", serde(rename = "cbr"))]
    Cbr {
        /// The ratio.
        ratio: u8,
    },
    /// TSC `19`: TSC\[55:0\].
    #[cfg_attr(feature = "serde", serde(rename = "tsc"))]
    Tsc {
        /// TSC bits 55:0.
        tsc: u64,
    },
    /// MTC `59`: CTC byte.
    #[cfg_attr(feature = "serde", serde(rename = "mtc"))]
    Mtc {
        /// (ART >> MTCFreq) & 0xFF.
        ctc: u8,
    },
    /// TMA `02 73`: CTC\[15:0\] and FastCounter\[8:0\].
    #[cfg_attr(feature = "serde", serde(rename = "tma"))]
    Tma {
        /// CTC bits 15:0.
        ctc: u16,
        /// Fast counter, 9 bits.
        fc: u16,
    },
    /// CYC: core cycles since the last CYC (variable length).
    #[cfg_attr(feature = "serde", serde(rename = "cyc"))]
    Cyc {
        /// Cycle count.
        value: u64,
    },
    /// VMCS `02 C8`: VMCS base (bits 51:12).
    #[cfg_attr(feature = "serde", serde(rename = "vmcs"))]
    Vmcs {
        /// Base address, 4 KiB aligned.
        base: u64,
    },
    /// OVF `02 F3`.
    #[cfg_attr(feature = "serde", serde(rename = "ovf"))]
    Ovf,
    /// PSB `02 82` ×8.
    #[cfg_attr(feature = "serde", serde(rename = "psb"))]
    Psb,
    /// PSBEND `02 23`.
    #[cfg_attr(feature = "serde", serde(rename = "psbend"))]
    PsbEnd,
    /// MNT `02 C3 88`: maintenance payload.
    #[cfg_attr(feature = "serde", serde(rename = "mnt"))]
    Mnt {
        /// 64-bit payload.
        payload: u64,
    },
    /// PTW `02 x2`: PTWRITE payload.
    #[cfg_attr(feature = "serde", serde(rename = "ptw"))]
    Ptw {
        /// Payload size.
        size: PtwSize,
        /// Payload (the low 4 bytes for [`PtwSize::Four`]).
        payload: u64,
        /// A FUP with the PTWRITE's IP follows.
        ip: bool,
    },
    /// EXSTOP `02 62` / `02 E2`.
    #[cfg_attr(feature = "serde", serde(rename = "exstop"))]
    Exstop {
        /// A FUP follows.
        ip: bool,
    },
    /// MWAIT `02 C2`.
    #[cfg_attr(feature = "serde", serde(rename = "mwait"))]
    Mwait {
        /// EAX hints.
        hints: u32,
        /// ECX extensions.
        ext: u32,
    },
    /// PWRE `02 22`: power entry.
    #[cfg_attr(feature = "serde", serde(rename = "pwre"))]
    Pwre {
        /// Resolved thread C-state field (MWAIT-hint convention: C-state − 1, mod 16).
        state: u8,
        /// Sub C-state field.
        sub_state: u8,
        /// Hardware-initiated (byte 2 bit 7, per the SDM and perf).
        hw: bool,
    },
    /// PWRX `02 A2`: power exit.
    #[cfg_attr(feature = "serde", serde(rename = "pwrx"))]
    Pwrx {
        /// Last core C-state field.
        last: u8,
        /// Deepest core C-state field.
        deepest: u8,
        /// Wake reason: bit 0 interrupt, bit 2 store to a monitored address, bit 3 hardware
        /// autonomous (bit 1 is reserved).
        wake: u8,
    },
    /// BBP `02 63`: block begin (PEBS via PT).
    #[cfg_attr(feature = "serde", serde(rename = "bbp"))]
    Bbp {
        /// Sz: 1 = 4-byte BIPs, 0 = 8-byte (perf's reading).
        sz4: bool,
        /// Block type, 5 bits.
        ty: u8,
    },
    /// BIP: block item, only inside a BBP…BEP block.
    #[cfg_attr(feature = "serde", serde(rename = "bip"))]
    Bip {
        /// Item ID, 5 bits.
        id: u8,
        /// Value (4 or 8 bytes, from the enclosing BBP).
        payload: u64,
        /// The block's items are 4 bytes.
        sz4: bool,
    },
    /// BEP `02 33` / `02 B3`: block end.
    #[cfg_attr(feature = "serde", serde(rename = "bep"))]
    Bep {
        /// A FUP follows.
        ip: bool,
    },
    /// CFE `02 13`: control-flow event.
    #[cfg_attr(feature = "serde", serde(rename = "cfe"))]
    Cfe {
        /// Event type, 5 bits.
        ty: u8,
        /// Vector.
        vector: u8,
        /// A FUP follows.
        ip: bool,
    },
    /// EVD `02 53`: event data.
    #[cfg_attr(feature = "serde", serde(rename = "evd"))]
    Evd {
        /// Data type, 6 bits.
        ty: u8,
        /// 64-bit payload.
        payload: u64,
    },
    /// TRIG `D9`: trigger.
    #[cfg_attr(feature = "serde", serde(rename = "trig"))]
    Trig {
        /// Trigger bit vector.
        trbv: u8,
        /// A FUP follows.
        ip: bool,
        /// More than one trigger fired.
        mult: bool,
        /// Instruction count, when valid.
        icnt: Option<u16>,
    },
}

impl Packet {
    /// The packet's name as the text form writes it (`tip.pge`, `tnt.8`, …).
    pub fn name(&self) -> &'static str {
        Packet::KIND_NAMES[self.kind_index()]
    }

    /// How many packet kinds there are.
    pub const KINDS: usize = 32;

    /// Every kind's name, indexed by [`Packet::kind_index`].
    pub const KIND_NAMES: [&'static str; Packet::KINDS] = [
        "pad",
        "tnt.8",
        "tnt.64",
        "tip",
        "tip.pge",
        "tip.pgd",
        "fup",
        "pip",
        "mode.exec",
        "mode.tsx",
        "stop",
        "cbr",
        "tsc",
        "mtc",
        "tma",
        "cyc",
        "vmcs",
        "ovf",
        "psb",
        "psbend",
        "mnt",
        "ptw",
        "exstop",
        "mwait",
        "pwre",
        "pwrx",
        "bbp",
        "bip",
        "bep",
        "cfe",
        "evd",
        "trig",
    ];

    /// The kinds ptemu decodes and encodes but never generates, named as in
    /// [`Packet::KIND_NAMES`]: no model stands behind MNT, BBP, BIP, BEP or TRIG.
    pub const NOT_GENERATED: [&'static str; 5] = ["mnt", "bbp", "bip", "bep", "trig"];

    /// Whether ptemu generates packets of kind `name` (one of [`Packet::KIND_NAMES`]): every
    /// packet the tracer emits (`tracer/`: TNT, IP packets, PSB+ and its context packets,
    /// timing, PTWRITE, power and Event Trace packets, OVF, TraceStop) and the PADs of the
    /// hardware packing (`packing/`), all but [`Packet::NOT_GENERATED`]. `ptemu corpus` must show
    /// every one (spec/truth.md, CORP1).
    pub fn is_generated(name: &str) -> bool {
        Self::KIND_NAMES.contains(&name) && !Self::NOT_GENERATED.contains(&name)
    }

    /// The kinds ptemu generates ([`Packet::is_generated`]), in [`Packet::KIND_NAMES`] order.
    pub fn generated_kinds() -> impl Iterator<Item = &'static str> {
        Self::KIND_NAMES.into_iter().filter(|k| Self::is_generated(k))
    }

    /// A dense index of the packet's kind, `0..Packet::KINDS`.
    pub const fn kind_index(&self) -> usize {
        match self {
            Packet::Pad => 0,
            Packet::Tnt8(_) => 1,
            Packet::Tnt64(_) => 2,
            Packet::Tip(_) => 3,
            Packet::TipPge(_) => 4,
            Packet::TipPgd(_) => 5,
            Packet::Fup(_) => 6,
            Packet::Pip { .. } => 7,
            Packet::ModeExec { .. } => 8,
            Packet::ModeTsx { .. } => 9,
            Packet::TraceStop => 10,
            Packet::Cbr { .. } => 11,
            Packet::Tsc { .. } => 12,
            Packet::Mtc { .. } => 13,
            Packet::Tma { .. } => 14,
            Packet::Cyc { .. } => 15,
            Packet::Vmcs { .. } => 16,
            Packet::Ovf => 17,
            Packet::Psb => 18,
            Packet::PsbEnd => 19,
            Packet::Mnt { .. } => 20,
            Packet::Ptw { .. } => 21,
            Packet::Exstop { .. } => 22,
            Packet::Mwait { .. } => 23,
            Packet::Pwre { .. } => 24,
            Packet::Pwrx { .. } => 25,
            Packet::Bbp { .. } => 26,
            Packet::Bip { .. } => 27,
            Packet::Bep { .. } => 28,
            Packet::Cfe { .. } => 29,
            Packet::Evd { .. } => 30,
            Packet::Trig { .. } => 31,
        }
    }

    /// The IP payload of TIP, TIP.PGE, TIP.PGD and FUP.
    pub fn ip_payload(&self) -> Option<IpPayload> {
        match *self {
            Packet::Tip(p) | Packet::TipPge(p) | Packet::TipPgd(p) | Packet::Fup(p) => Some(p),
            _ => None,
        }
    }
}
