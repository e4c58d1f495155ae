//! libipt 2.1.2 (crates.io `libipt-sys`, raw FFI) as an oracle: its packet decoder's view of a
//! byte stream, converted to ptemu packets. The safe `libipt` wrapper is not used (pt-packets.md §7:
//! it panics on CFE/EVD and truncates TNT-64).

#![allow(non_upper_case_globals)] // bindgen names libipt's C enum constants in lower case

use libipt_sys::*;
use ptemu::packet::{IpPayload, Ipc, Packet, PtwSize, Tnt};

/// A libipt decode failure: the offset and libipt's (positive) error code.
#[derive(Debug, PartialEq, Eq)]
pub struct LibiptError {
    pub offset: u64,
    pub code: i32,
}

/// A `pt_config` over all of `buf` (which must outlive any decoder made from it).
pub fn config_for(buf: &mut [u8]) -> pt_config {
    // SAFETY: pt_config is a plain C struct; zero is its documented initial state (pt_config_init,
    // a static inline the bindings lack, does exactly this plus `size`); `end` is one past `buf`.
    unsafe {
        let mut config: pt_config = std::mem::zeroed();
        config.size = std::mem::size_of::<pt_config>();
        config.begin = buf.as_mut_ptr();
        config.end = buf.as_mut_ptr().add(buf.len());
        config
    }
}

/// Decodes `bytes` from offset 0 with `pt_pkt_next`; returns (packet, size) pairs.
pub fn decode(bytes: &[u8]) -> Result<Vec<(Packet, usize)>, LibiptError> {
    let mut buf = bytes.to_vec();
    buf.push(0); // libipt needs a non-empty buffer; the extra PAD is dropped below
    let mut out = Vec::new();
    let config = config_for(&mut buf);
    // SAFETY: `buf` outlives the decoder.
    unsafe {
        let dec = pt_pkt_alloc_decoder(&config);
        assert!(!dec.is_null());
        let rc = pt_pkt_sync_set(dec, 0);
        assert!(rc >= 0, "sync_set: {rc}");
        let mut offset = 0u64;
        loop {
            let mut pkt: pt_packet = std::mem::zeroed();
            let rc = pt_pkt_next(dec, &mut pkt, std::mem::size_of::<pt_packet>());
            if rc == -(pt_error_code_pte_eos as i32) {
                break;
            }
            if rc < 0 {
                pt_pkt_free_decoder(dec);
                return Err(LibiptError { offset, code: -rc });
            }
            offset += u64::from(pkt.size);
            out.push((convert(&pkt), usize::from(pkt.size)));
        }
        pt_pkt_free_decoder(dec);
    }
    assert_eq!(out.pop(), Some((Packet::Pad, 1)), "the guard PAD");
    Ok(out)
}

/// Decodes the non-empty `bytes` from offset 0 with `pt_pkt_next` up to the end or the first
/// error, with nothing appended: the (packet, size) pairs before it, and the error if one stopped it.
/// `raw` keeps libipt's own packets, for fields the conversion would hide.
pub fn decode_prefix(bytes: &[u8]) -> (Vec<(Packet, usize, pt_packet)>, Option<LibiptError>) {
    assert!(!bytes.is_empty(), "libipt needs a non-empty buffer");
    let mut buf = bytes.to_vec();
    let mut out = Vec::new();
    let config = config_for(&mut buf);
    // SAFETY: `buf` outlives the decoder.
    unsafe {
        let dec = pt_pkt_alloc_decoder(&config);
        assert!(!dec.is_null());
        assert!(pt_pkt_sync_set(dec, 0) >= 0);
        let mut offset = 0u64;
        let error = loop {
            let mut pkt: pt_packet = std::mem::zeroed();
            let rc = pt_pkt_next(dec, &mut pkt, std::mem::size_of::<pt_packet>());
            if rc == -(pt_error_code_pte_eos as i32) {
                break None;
            }
            if rc < 0 {
                break Some(LibiptError { offset, code: -rc });
            }
            offset += u64::from(pkt.size);
            out.push((convert(&pkt), usize::from(pkt.size), pkt));
        };
        pt_pkt_free_decoder(dec);
        (out, error)
    }
}

fn ip(p: &pt_packet_ip) -> IpPayload {
    IpPayload {
        ipc: Ipc::from_bits(p.ipc as u8).expect("libipt returned a valid ipc"),
        raw: p.ip,
    }
}

/// libipt's packet as a ptemu packet.
///
/// SAFETY (inside): each union member read is the one libipt fills for `type_`.
pub fn convert(p: &pt_packet) -> Packet {
    // SAFETY: each union member read is the one libipt fills for `type_`.
    unsafe {
        let pl = &p.payload;
        match p.type_ {
            pt_packet_type_ppt_pad => Packet::Pad,
            pt_packet_type_ppt_psb => Packet::Psb,
            pt_packet_type_ppt_psbend => Packet::PsbEnd,
            pt_packet_type_ppt_ovf => Packet::Ovf,
            pt_packet_type_ppt_stop => Packet::TraceStop,
            pt_packet_type_ppt_fup => Packet::Fup(ip(&pl.ip)),
            pt_packet_type_ppt_tip => Packet::Tip(ip(&pl.ip)),
            pt_packet_type_ppt_tip_pge => Packet::TipPge(ip(&pl.ip)),
            pt_packet_type_ppt_tip_pgd => Packet::TipPgd(ip(&pl.ip)),
            pt_packet_type_ppt_tnt_8 => Packet::Tnt8(Tnt {
                bits: pl.tnt.payload,
                count: pl.tnt.bit_size,
            }),
            pt_packet_type_ppt_tnt_64 => Packet::Tnt64(Tnt {
                bits: pl.tnt.payload,
                count: pl.tnt.bit_size,
            }),
            pt_packet_type_ppt_mode => match pl.mode.leaf {
                pt_mode_leaf_pt_mol_exec => {
                    let e = pl.mode.bits.exec;
                    Packet::ModeExec {
                        csl: e.csl() != 0,
                        csd: e.csd() != 0,
                        if_: e.iflag() != 0,
                    }
                }
                _ => {
                    let t = pl.mode.bits.tsx;
                    Packet::ModeTsx {
                        intx: t.intx() != 0,
                        abrt: t.abrt() != 0,
                    }
                }
            },
            pt_packet_type_ppt_pip => Packet::Pip {
                cr3: pl.pip.cr3,
                nr: pl.pip.nr() != 0,
            },
            pt_packet_type_ppt_vmcs => Packet::Vmcs { base: pl.vmcs.base },
            pt_packet_type_ppt_cbr => Packet::Cbr { ratio: pl.cbr.ratio },
            pt_packet_type_ppt_tsc => Packet::Tsc { tsc: pl.tsc.tsc },
            pt_packet_type_ppt_tma => Packet::Tma {
                ctc: pl.tma.ctc,
                fc: pl.tma.fc,
            },
            pt_packet_type_ppt_mtc => Packet::Mtc { ctc: pl.mtc.ctc },
            pt_packet_type_ppt_cyc => Packet::Cyc { value: pl.cyc.value },
            pt_packet_type_ppt_mnt => Packet::Mnt {
                payload: pl.mnt.payload,
            },
            pt_packet_type_ppt_exstop => Packet::Exstop {
                ip: pl.exstop.ip() != 0,
            },
            pt_packet_type_ppt_mwait => Packet::Mwait {
                hints: pl.mwait.hints,
                ext: pl.mwait.ext,
            },
            pt_packet_type_ppt_pwre => Packet::Pwre {
                state: pl.pwre.state,
                sub_state: pl.pwre.sub_state,
                hw: pl.pwre.hw() != 0,
            },
            pt_packet_type_ppt_pwrx => {
                let x = &pl.pwrx;
                let wake = (x.interrupt() as u8) | (x.store() as u8) << 2 | (x.autonomous() as u8) << 3;
                Packet::Pwrx {
                    last: x.last,
                    deepest: x.deepest,
                    wake,
                }
            }
            pt_packet_type_ppt_ptw => Packet::Ptw {
                size: if pl.ptw.plc == 0 {
                    PtwSize::Four
                } else {
                    PtwSize::Eight
                },
                payload: pl.ptw.payload,
                ip: pl.ptw.ip() != 0,
            },
            pt_packet_type_ppt_cfe => Packet::Cfe {
                ty: pl.cfe.type_ as u8,
                vector: pl.cfe.vector,
                ip: pl.cfe.ip() != 0,
            },
            pt_packet_type_ppt_evd => Packet::Evd {
                ty: pl.evd.type_ as u8,
                payload: pl.evd.payload,
            },
            other => panic!("libipt packet type {other} not converted"),
        }
    }
}
