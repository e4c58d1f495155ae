//! libipt's query decoder (`pt_qry_*`, raw FFI through libipt-sys) over a byte stream: the oracle
//! for generation. Events that only restate status (PSB+), timing and mode events are skipped by
//! `next_event`; everything else is returned for the caller to match against its input.

#![allow(non_upper_case_globals)]

use libipt_sys::*;

/// An event from `pt_qry_event`, reduced to what the tests compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QEvent {
    Enabled { ip: u64 },
    Disabled { ip: Option<u64> },
    AsyncDisabled { at: u64, ip: Option<u64> },
    AsyncBranch { from: u64, to: u64 },
    Paging { cr3: u64 },
    AsyncPaging { cr3: u64 },
    Overflow { ip: Option<u64> },
    Stop,
    Ptwrite { ip: Option<u64>, payload: u64 },
    Mwait { hints: u32, ext: u32 },
    Pwre { state: u8, sub_state: u8 },
    Pwrx { last: u8, deepest: u8 },
    Exstop { ip: Option<u64> },
    Interrupt { vector: u8, cr2: Option<u64> },
    Iret,
    Other(u32),
}

pub struct Query {
    dec: *mut pt_query_decoder,
    _buf: Vec<u8>,
    pub status: i32,
}

/// Timing parameters libipt needs to follow MTC/CYC (pt-packets.md §5.7).
#[derive(Clone, Copy)]
pub struct Timing {
    pub mtc_freq: u8,
    pub nom_freq: u8,
    pub art_eax: u32,
    pub art_ebx: u32,
}

impl Query {
    /// A decoder synced forward to the first PSB; `Err` with libipt's code if that fails.
    pub fn new(bytes: &[u8], t: Timing) -> Result<Self, i32> {
        let mut buf = bytes.to_vec();
        buf.push(0); // libipt wants a non-empty buffer; a PAD changes nothing
        let mut c = super::libipt::config_for(&mut buf);
        // SAFETY: `buf` moves into the Query and lives as long as the decoder (its heap block
        // does not move with the Vec).
        unsafe {
            c.mtc_freq = t.mtc_freq;
            c.nom_freq = t.nom_freq;
            c.cpuid_0x15_eax = t.art_eax;
            c.cpuid_0x15_ebx = t.art_ebx;
            let dec = pt_qry_alloc_decoder(&c);
            assert!(!dec.is_null());
            let mut q = Query {
                dec,
                _buf: buf,
                status: 0,
            };
            let mut ip = 0u64;
            q.status = pt_qry_sync_forward(dec, &mut ip);
            if q.status < 0 {
                return Err(q.status);
            }
            Ok(q)
        }
    }

    pub fn pending(&self) -> bool {
        self.status >= 0 && self.status & pt_status_flag_pts_event_pending as i32 != 0
    }

    pub fn eos(&self) -> bool {
        self.status == -(pt_error_code_pte_eos as i32)
            || (self.status >= 0 && self.status & pt_status_flag_pts_eos as i32 != 0)
    }

    /// `pt_qry_cond_branch`.
    pub fn cond(&mut self) -> Result<bool, i32> {
        let mut taken = 0;
        // SAFETY: valid decoder and out-pointer.
        let rc = unsafe { pt_qry_cond_branch(self.dec, &mut taken) };
        if rc < 0 {
            return Err(rc);
        }
        self.status = rc;
        Ok(taken != 0)
    }

    /// `pt_qry_indirect_branch`; `None` when the IP is suppressed.
    pub fn indirect(&mut self) -> Result<Option<u64>, i32> {
        let mut ip = 0;
        // SAFETY: valid decoder and out-pointer.
        let rc = unsafe { pt_qry_indirect_branch(self.dec, &mut ip) };
        if rc < 0 {
            return Err(rc);
        }
        self.status = rc;
        Ok((rc & pt_status_flag_pts_ip_suppressed as i32 == 0).then_some(ip))
    }

    /// The next pending event that is not a status update, timing or mode event; `None` when no
    /// event is pending.
    pub fn next_event(&mut self) -> Result<Option<QEvent>, i32> {
        while self.pending() {
            // SAFETY: pt_event is plain data; libipt fills the union member for `type_`.
            unsafe {
                let mut ev: pt_event = std::mem::zeroed();
                let rc = pt_qry_event(self.dec, &mut ev, std::mem::size_of::<pt_event>());
                if rc < 0 {
                    return Err(rc);
                }
                self.status = rc;
                if ev.status_update() != 0 {
                    continue;
                }
                let ipo = |ip: u64| (ev.ip_suppressed() == 0).then_some(ip);
                let v = &ev.variant;
                let e = match ev.type_ {
                    pt_event_type_ptev_enabled => QEvent::Enabled { ip: v.enabled.ip },
                    pt_event_type_ptev_disabled => QEvent::Disabled {
                        ip: ipo(v.disabled.ip),
                    },
                    pt_event_type_ptev_async_disabled => QEvent::AsyncDisabled {
                        at: v.async_disabled.at,
                        ip: ipo(v.async_disabled.ip),
                    },
                    pt_event_type_ptev_async_branch => QEvent::AsyncBranch {
                        from: v.async_branch.from,
                        to: v.async_branch.to,
                    },
                    pt_event_type_ptev_paging => QEvent::Paging { cr3: v.paging.cr3 },
                    pt_event_type_ptev_async_paging => QEvent::AsyncPaging {
                        cr3: v.async_paging.cr3,
                    },
                    pt_event_type_ptev_overflow => QEvent::Overflow {
                        ip: ipo(v.overflow.ip),
                    },
                    pt_event_type_ptev_stop => QEvent::Stop,
                    pt_event_type_ptev_ptwrite => QEvent::Ptwrite {
                        ip: ipo(v.ptwrite.ip),
                        payload: v.ptwrite.payload,
                    },
                    pt_event_type_ptev_mwait => QEvent::Mwait {
                        hints: v.mwait.hints,
                        ext: v.mwait.ext,
                    },
                    pt_event_type_ptev_pwre => QEvent::Pwre {
                        state: v.pwre.state,
                        sub_state: v.pwre.sub_state,
                    },
                    pt_event_type_ptev_pwrx => QEvent::Pwrx {
                        last: v.pwrx.last,
                        deepest: v.pwrx.deepest,
                    },
                    pt_event_type_ptev_exstop => QEvent::Exstop { ip: ipo(v.exstop.ip) },
                    pt_event_type_ptev_interrupt => QEvent::Interrupt {
                        vector: v.interrupt.vector,
                        cr2: (v.interrupt.has_cr2() != 0).then_some(v.interrupt.cr2),
                    },
                    pt_event_type_ptev_iret => QEvent::Iret,
                    pt_event_type_ptev_exec_mode
                    | pt_event_type_ptev_tsx
                    | pt_event_type_ptev_tick
                    | pt_event_type_ptev_cbr
                    | pt_event_type_ptev_mnt => continue,
                    other => QEvent::Other(other),
                };
                return Ok(Some(e));
            }
        }
        Ok(None)
    }
}

impl Drop for Query {
    fn drop(&mut self) {
        // SAFETY: allocated by pt_qry_alloc_decoder, freed once.
        unsafe { pt_qry_free_decoder(self.dec) }
    }
}

/// libipt's error name for a negative code.
pub fn error_name(code: i32) -> String {
    // SAFETY: pt_errstr returns a static C string.
    unsafe {
        std::ffi::CStr::from_ptr(pt_errstr(-code as pt_error_code))
            .to_string_lossy()
            .into_owned()
    }
}
