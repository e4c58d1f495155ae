//! libipt's instruction-flow decoder (`pt_insn_*`, raw FFI through libipt-sys) over a trace and
//! a raw code image file: the instruction IPs it follows and the events it reports.

#![allow(non_upper_case_globals)]

use super::query::Timing;
use libipt_sys::*;
use ptemu::sources::penn::{BranchKind, MacroOp, MacroOpReader, UopReader};
use ptemu::sources::{Input, ReadOptions};
use std::ffi::CString;
use std::path::Path;

/// An event from `pt_insn_event`, reduced to what the tests compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IEvent {
    Enabled {
        ip: u64,
    },
    Disabled {
        ip: Option<u64>,
    },
    AsyncDisabled {
        at: u64,
    },
    Ptwrite {
        ip: Option<u64>,
        payload: u64,
    },
    /// Timing and status events (tick, CBR, exec mode, ...): only their type.
    Other(u32),
}

/// What the decoder produced before its end of stream or first error.
#[derive(Debug, Default)]
pub struct Flow {
    /// The IP of every instruction, in order.
    pub ips: Vec<u64>,
    /// Every event, with the index in `ips` of the instruction it came before.
    pub events: Vec<(usize, IEvent)>,
    /// libipt's error code, if decoding stopped on one (not at the end of the stream).
    pub error: Option<i32>,
}

fn event(ev: &pt_event) -> IEvent {
    // SAFETY: each union member read is the one libipt fills for `type_`.
    unsafe {
        let v = &ev.variant;
        let suppressed = ev.ip_suppressed() != 0;
        match ev.type_ {
            pt_event_type_ptev_enabled => IEvent::Enabled { ip: v.enabled.ip },
            pt_event_type_ptev_disabled => IEvent::Disabled {
                ip: (!suppressed).then_some(v.disabled.ip),
            },
            pt_event_type_ptev_async_disabled => IEvent::AsyncDisabled {
                at: v.async_disabled.at,
            },
            pt_event_type_ptev_ptwrite => IEvent::Ptwrite {
                ip: (!suppressed).then_some(v.ptwrite.ip),
                payload: v.ptwrite.payload,
            },
            other => IEvent::Other(other),
        }
    }
}

/// Decodes `trace` with the instruction-flow decoder over the raw image file `image` loaded at
/// `base`, from the first PSB to the end.
pub fn decode(trace: &[u8], image: &Path, base: u64, t: Timing) -> Flow {
    decode_with(trace, image, base, t, None, super::harness::AddrFilter::default())
}

/// [`decode`] of a simulate run's `trace`, told the part and the address filter in its
/// `case` directory (the errata workarounds on, CP1, CP4).
pub fn decode_case(trace: &[u8], image: &Path, base: u64, t: Timing, case: &Path) -> Flow {
    decode_with(
        trace,
        image,
        base,
        t,
        super::harness::case_cpu(case),
        super::harness::case_filter(case),
    )
}

fn decode_with(
    trace: &[u8],
    image: &Path,
    base: u64,
    t: Timing,
    cpu: Option<(u16, u8, u8)>,
    filter: super::harness::AddrFilter,
) -> Flow {
    let mut buf = trace.to_vec();
    buf.push(0); // libipt wants a non-empty buffer; a PAD changes nothing
    let mut c = super::libipt::config_for(&mut buf);
    super::harness::tell_filter(&mut c, filter);
    super::harness::tell_cpu(&mut c, cpu);
    c.mtc_freq = t.mtc_freq;
    c.nom_freq = t.nom_freq;
    c.cpuid_0x15_eax = t.art_eax;
    c.cpuid_0x15_ebx = t.art_ebx;
    let name = CString::new(image.to_str().unwrap()).unwrap();
    let mut flow = Flow::default();
    let eos = -(pt_error_code_pte_eos as i32);
    // SAFETY: `buf` and `name` outlive the decoder; every out-pointer is a local of the size
    // passed.
    unsafe {
        let dec = pt_insn_alloc_decoder(&c);
        assert!(!dec.is_null());
        let img = pt_insn_get_image(dec);
        // A size of 0 would load nothing (libipt only ever shortens the size to the file's).
        let size = std::fs::metadata(image).unwrap().len();
        let rc = pt_image_add_file(img, name.as_ptr(), 0, size, std::ptr::null(), base);
        assert!(rc >= 0, "pt_image_add_file: {rc}");
        let mut status = pt_insn_sync_forward(dec);
        'run: while status >= 0 {
            while status & pt_status_flag_pts_event_pending as i32 != 0 {
                let mut ev: pt_event = std::mem::zeroed();
                status = pt_insn_event(dec, &mut ev, std::mem::size_of::<pt_event>());
                if status < 0 {
                    break 'run;
                }
                flow.events.push((flow.ips.len(), event(&ev)));
            }
            if status & pt_status_flag_pts_eos as i32 != 0 {
                status = eos;
                break;
            }
            let mut insn: pt_insn = std::mem::zeroed();
            status = pt_insn_next(dec, &mut insn, std::mem::size_of::<pt_insn>());
            if status < 0 {
                break;
            }
            flow.ips.push(insn.ip);
        }
        if status < 0 && status != eos {
            flow.error = Some(-status);
        }
        pt_insn_free_decoder(dec);
    }
    flow
}

/// The macro-ops of a Penn trace.
pub fn macro_ops(text: &[u8]) -> Vec<MacroOp> {
    let input = Input::from_bytes("t", text.to_vec()).unwrap();
    let mut r = MacroOpReader::new(UopReader::new(input, ReadOptions::default()));
    let mut v = Vec::new();
    while let Some(m) = r.next_macro_op().unwrap() {
        v.push(m);
    }
    v
}

/// The PCs a decoder must report: every macro-op, a REP instruction's repeats (the same
/// non-branch PC again) once.
pub fn expected_pcs(ops: &[MacroOp]) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    let mut prev: Option<&MacroOp> = None;
    for op in ops {
        if !prev.is_some_and(|p| p.pc == op.pc && p.kind == BranchKind::None) {
            v.push(op.pc);
        }
        prev = Some(op);
    }
    v
}
