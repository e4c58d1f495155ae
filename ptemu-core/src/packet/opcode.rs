//! Packet opcodes and field masks, named once for the encoder, the decoder and the tracer
//! (SDM Vol. 3C §33.4.2; every value in `spec/packets.md`).
//!
//! A packet starts with one opcode byte ([`PAD`], [`TSC`], [`MTC`], [`MODE`], [`TRIG`], an IP
//! packet's low five bits, a CYC or TNT-8 shape) or with [`EXT`] and a second opcode byte
//! (`EXT_*`).

/// PAD: one zero byte.
pub const PAD: u8 = 0x00;
/// The first byte of every extended (two-byte opcode) packet.
pub const EXT: u8 = 0x02;
/// TSC, followed by the 7-byte TSC value.
pub const TSC: u8 = 0x19;
/// MTC, followed by the 8-bit CTC value.
pub const MTC: u8 = 0x59;
/// MODE; the leaf is in bits 7:5 of the next byte ([`MODE_EXEC_LEAF`], [`MODE_TSX_LEAF`]).
pub const MODE: u8 = 0x99;
/// TRIG (trigger tracing).
pub const TRIG: u8 = 0xd9;

/// The bits of an IP packet's header byte that name it; bits 7:5 are IPBytes.
pub const IP_OPCODE_MASK: u8 = 0x1f;
/// TIP.
pub const TIP: u8 = 0x0d;
/// TIP.PGE.
pub const TIP_PGE: u8 = 0x11;
/// TIP.PGD.
pub const TIP_PGD: u8 = 0x01;
/// FUP.
pub const FUP: u8 = 0x1d;

/// CYC: bits 1:0 of the first byte set.
pub const CYC_TAG: u8 = 0x03;
/// CYC: bit 2 of the first byte, more bytes follow.
pub const CYC_MORE: u8 = 0x04;
/// BIP inside a BBP block: bits 2:0 of the first byte.
pub const BIP_TAG: u8 = 0x04;
/// The bits of a first byte [`BIP_TAG`] is compared with.
pub const BIP_TAG_MASK: u8 = 0x07;

/// TNT-8 (and, in a BBP block, BIP): bit 0 of the first byte clear.
pub const TNT8_BIT0: u8 = 0x01;

/// The bits of MODE's payload byte that hold the leaf (7:5).
pub const MODE_LEAF_MASK: u8 = 0xe0;
/// MODE leaf 0 (MODE.Exec), in bits 7:5 of the payload byte.
pub const MODE_EXEC_LEAF: u8 = 0x00;
/// MODE leaf 1 (MODE.TSX), in bits 7:5 of the payload byte.
pub const MODE_TSX_LEAF: u8 = 0x20;

/// PSB's second byte (the pattern repeats `02 82` eight times).
pub const EXT_PSB: u8 = 0x82;
/// PSBEND.
pub const EXT_PSBEND: u8 = 0x23;
/// OVF.
pub const EXT_OVF: u8 = 0xf3;
/// TraceStop.
pub const EXT_STOP: u8 = 0x83;
/// Long TNT (TNT-64).
pub const EXT_TNT64: u8 = 0xa3;
/// PIP.
pub const EXT_PIP: u8 = 0x43;
/// CBR.
pub const EXT_CBR: u8 = 0x03;
/// TMA.
pub const EXT_TMA: u8 = 0x73;
/// VMCS.
pub const EXT_VMCS: u8 = 0xc8;
/// MNT, followed by [`MNT_LEAF`].
pub const EXT_MNT: u8 = 0xc3;
/// MNT's third byte.
pub const MNT_LEAF: u8 = 0x88;
/// EXSTOP ([`EXT_IP_BIT`] set: EXSTOP.IP).
pub const EXT_EXSTOP: u8 = 0x62;
/// MWAIT.
pub const EXT_MWAIT: u8 = 0xc2;
/// PWRE.
pub const EXT_PWRE: u8 = 0x22;
/// PWRX.
pub const EXT_PWRX: u8 = 0xa2;
/// BBP.
pub const EXT_BBP: u8 = 0x63;
/// BEP ([`EXT_IP_BIT`] set: BEP.IP).
pub const EXT_BEP: u8 = 0x33;
/// CFE.
pub const EXT_CFE: u8 = 0x13;
/// EVD.
pub const EXT_EVD: u8 = 0x53;
/// PTW: bits 4:0 of the second byte ([`EXT_PTW_MASK`]); bits 6:5 PayloadBytes, bit 7 IP.
pub const EXT_PTW: u8 = 0x12;
/// The bits of the second byte [`EXT_PTW`] is compared with.
pub const EXT_PTW_MASK: u8 = 0x1f;
/// Bit 7 of the second byte of EXSTOP, BEP and PTW: a FUP with the IP follows.
pub const EXT_IP_BIT: u8 = 0x80;

/// PIP's CR3 field: CR3 bits 51:5 (the packet holds bits 51:5 in its payload's bits 47:1).
pub const PIP_CR3_MASK: u64 = 0x000f_ffff_ffff_ffe0;
/// VMCS's base: bits 51:12 of the VMCS pointer.
pub const VMCS_BASE_MASK: u64 = 0x000f_ffff_ffff_f000;
/// TSC's payload: the low 56 bits of the time-stamp counter.
pub const TSC_MASK: u64 = (1 << 56) - 1;
/// TMA's FastCounter: 9 bits.
pub const TMA_FC_MASK: u16 = 0x1ff;
/// A C-state or sub-state field of PWRE and PWRX: 4 bits.
pub const C_STATE_MASK: u8 = 0x0f;
/// PWRX's wake reasons: bits 0 (interrupt), 2 (store to monitored address) and 3 (HW autonomous).
pub const PWRX_WAKE_MASK: u8 = 0x0d;
