//! What the C API's tests share: a guest with a ToPA ring and a tracer enabled on it.
#![allow(dead_code)]

use ptemu_capi::*;
use std::ptr::null_mut;

/// The ToPA table's guest address.
pub const TABLE: u64 = 0x1000;
/// The ring's first region.
pub const RING: u64 = 0x10_0000;

/// A guest of 2 MiB with a ToPA ring of two 4 KiB regions (INT on the second, END back), a
/// tracer enabled on it, `feed` run, tracing disabled; the guest's bytes and the PMIs polled.
pub fn run(feed: impl Fn(*mut ptemu_tracer, *mut ptemu_memory)) -> (Vec<u8>, usize) {
    let mut guest = vec![0u8; 2 << 20];
    let put =
        |g: &mut Vec<u8>, pa: u64, v: u64| g[pa as usize..pa as usize + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut guest, TABLE, RING);
    put(&mut guest, TABLE + 8, (RING + 0x1000) | PTEMU_TOPA_INT);
    put(&mut guest, TABLE + 16, TABLE | PTEMU_TOPA_END);
    let (mut mem, mut t) = (null_mut(), null_mut());
    let mut pmis = 0;
    // SAFETY: the guest buffer outlives the memory object; every pointer is valid.
    unsafe {
        assert_eq!(
            ptemu_memory_new_buffer(0, guest.as_mut_ptr(), guest.len(), &mut mem),
            PTEMU_OK
        );
        assert_eq!(ptemu_tracer_new(c"skylake".as_ptr(), &mut t), PTEMU_OK);
        let ip = 0x40_1000;
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE, ip, 2),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f, ip, 2),
            PTEMU_OK
        );
        let ctl = PTEMU_CTL_TRACE_EN | PTEMU_CTL_TOPA | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, ctl, ip, 2),
            PTEMU_OK
        );
        feed(t, mem);
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, 0, ip, 2),
            PTEMU_OK
        );
        let (mut ev, mut got) = (ptemu_output_event::default(), true);
        while got {
            assert_eq!(ptemu_tracer_poll_event(t, &mut ev, &mut got), PTEMU_OK);
            if got && ev.kind == PTEMU_OUT_PMI {
                assert!(ev.has_entry && ev.table == TABLE && ev.index == 1, "{ev:?}");
                pmis += 1;
            }
        }
        ptemu_tracer_free(t);
        ptemu_memory_free(mem);
    }
    (guest, pmis)
}
