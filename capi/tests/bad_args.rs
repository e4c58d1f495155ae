//! Bad arguments through the C API (NULL pointers, an unknown CPU profile, bad MSRs, malformed
//! events, memory the guest does not have) give status codes and a last-error message, never a
//! crash; the same calls with good arguments work, so each check can fail.

use ptemu_capi::*;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: ptemu_last_error returns a NUL-terminated string valid until the next failing call.
    unsafe { CStr::from_ptr(ptemu_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn last_rule() -> Option<String> {
    let p = ptemu_last_rule();
    // SAFETY: NULL or a static NUL-terminated string.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A 1 MiB guest buffer at physical 0 and its memory object.
struct Guest {
    _buf: Vec<u8>,
    mem: *mut ptemu_memory,
}

impl Guest {
    fn new() -> Guest {
        let mut buf = vec![0u8; 1 << 20];
        let mut mem = null_mut();
        // SAFETY: `buf` outlives `mem` (both in Guest; Drop frees mem first).
        let s = unsafe { ptemu_memory_new_buffer(0, buf.as_mut_ptr(), buf.len(), &mut mem) };
        assert_eq!(s, PTEMU_OK);
        Guest { _buf: buf, mem }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // SAFETY: from ptemu_memory_new_buffer, freed once.
        unsafe { ptemu_memory_free(self.mem) };
    }
}

#[test]
fn null_pointers_are_errors_naming_the_argument() {
    let mut unit = null_mut();
    // SAFETY: every pointer is NULL or valid; the NULLs are the point of the test.
    unsafe {
        assert_eq!(ptemu_unit_new(null(), &mut unit), PTEMU_ERR_NULL);
        assert!(last_error().contains("cpu"), "{}", last_error());
        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), null_mut()), PTEMU_ERR_NULL);
        assert!(last_error().contains("out"));
        assert_eq!(ptemu_tracer_new(c"skylake".as_ptr(), null_mut()), PTEMU_ERR_NULL);

        let g = Guest::new();
        let mut v = 0u64;
        assert_eq!(
            ptemu_unit_wrmsr(null_mut(), g.mem, PTEMU_IA32_RTIT_CTL, 0),
            PTEMU_ERR_NULL
        );
        assert!(last_error().contains("unit"));
        assert_eq!(
            ptemu_unit_rdmsr(null_mut(), PTEMU_IA32_RTIT_CTL, &mut v),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_tracer_rdmsr(null_mut(), PTEMU_IA32_RTIT_CTL, &mut v),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_flush(null_mut(), g.mem), PTEMU_ERR_NULL);
        assert_eq!(ptemu_tracer_stats(null_mut(), null_mut()), PTEMU_ERR_NULL);

        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), &mut unit), PTEMU_OK);
        assert_eq!(
            ptemu_unit_wrmsr(unit, null_mut(), PTEMU_IA32_RTIT_CTL, 0),
            PTEMU_ERR_NULL
        );
        assert!(last_error().contains("mem"));
        assert_eq!(
            ptemu_unit_rdmsr(unit, PTEMU_IA32_RTIT_CTL, null_mut()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_unit_write(unit, g.mem, null(), 5), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_unit_write(unit, g.mem, null(), 0),
            PTEMU_OK,
            "an empty write is fine"
        );
        let mut got = false;
        let mut ev = ptemu_output_event::default();
        assert_eq!(ptemu_unit_poll_event(unit, null_mut(), &mut got), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_poll_event(unit, &mut ev, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_poll_event(unit, &mut ev, &mut got), PTEMU_OK);
        assert!(!got);
        ptemu_unit_free(unit);

        let mut mem = null_mut();
        assert_eq!(
            ptemu_memory_new_buffer(0, null_mut(), 10, &mut mem),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_memory_new_callbacks(null_mut(), None, None, &mut mem),
            PTEMU_ERR_NULL
        );
        assert!(mem.is_null(), "nothing is created on failure");
        // Freeing NULL is a no-op.
        ptemu_unit_free(null_mut());
        ptemu_tracer_free(null_mut());
        ptemu_memory_free(null_mut());
    }
}

#[test]
fn an_unknown_cpu_profile_is_an_argument_error_listing_the_known_ones() {
    let mut t = null_mut();
    // SAFETY: valid pointers.
    let s = unsafe { ptemu_tracer_new(c"pentium".as_ptr(), &mut t) };
    assert_eq!(s, PTEMU_ERR_ARGUMENT);
    assert!(t.is_null());
    let e = last_error();
    assert!(e.contains("pentium") && e.contains("skylake"), "{e}");
    // SAFETY: a static string.
    let names = unsafe { CStr::from_ptr(ptemu_cpu_profiles()) }.to_str().unwrap();
    assert!(names.split(',').any(|n| n == "icelake"), "{names}");
}

#[test]
fn m_rules_a_bad_msr_write_is_a_gp_with_its_rule_and_an_unknown_msr_is_not_modelled() {
    let g = Guest::new();
    let mut unit = null_mut();
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), &mut unit), PTEMU_OK);
        // Reserved bit 63 of IA32_RTIT_CTL.
        assert_eq!(
            ptemu_unit_wrmsr(unit, g.mem, PTEMU_IA32_RTIT_CTL, 1 << 63),
            PTEMU_GP
        );
        let rule = last_rule().expect("a #GP names its rule");
        assert!(rule.starts_with('M') || rule.starts_with('R'), "{rule}");
        assert!(!last_error().is_empty());
        let mut v = 7u64;
        assert_eq!(ptemu_unit_rdmsr(unit, PTEMU_IA32_RTIT_CTL, &mut v), PTEMU_OK);
        assert_eq!(v, 0, "a faulting write changes nothing");
        assert_eq!(ptemu_unit_wrmsr(unit, g.mem, 0x10, 0), PTEMU_NOT_MODELLED);
        assert_eq!(last_rule(), None, "not a #GP");
        assert_eq!(ptemu_unit_rdmsr(unit, 0x10, &mut v), PTEMU_NOT_MODELLED);
        // A good write after the bad ones.
        assert_eq!(
            ptemu_unit_wrmsr(unit, g.mem, PTEMU_IA32_RTIT_OUTPUT_BASE, 0x1000),
            PTEMU_OK
        );
        ptemu_unit_free(unit);
    }
}

#[test]
fn malformed_events_are_refused_whole_and_nothing_is_fed() {
    let g = Guest::new();
    let mut t = null_mut();
    let good = ptemu_event {
        kind: PTEMU_EV_RETIRE,
        ip: 0x40_1000,
        len: 2,
        ..Default::default()
    };
    let bad_kind = ptemu_event { kind: 999, ..good };
    let bad_far = ptemu_event {
        kind: PTEMU_EV_FAR,
        far_kind: 77,
        mode: PTEMU_MODE_64,
        ..good
    };
    let bad_mode = ptemu_event {
        kind: PTEMU_EV_FAR,
        far_kind: PTEMU_FAR_SYSCALL,
        mode: 48,
        ..good
    };
    let bad_cpl = ptemu_event {
        kind: PTEMU_EV_FAR,
        far_kind: PTEMU_FAR_SYSCALL,
        mode: PTEMU_MODE_64,
        cpl: 4,
        ..good
    };
    let mut stats = ptemu_stats::default();
    // SAFETY: valid pointers throughout (but the one NULL `evs` with n > 0, the point).
    unsafe {
        assert_eq!(ptemu_tracer_new(c"icelake".as_ptr(), &mut t), PTEMU_OK);
        for (e, words) in [
            (bad_kind, "kind 999"),
            (bad_far, "far_kind 77"),
            (bad_mode, "mode 48"),
            (bad_cpl, "cpl 4"),
        ] {
            let batch = [good, good, e];
            assert_eq!(
                ptemu_tracer_events(t, g.mem, batch.as_ptr(), 3, null_mut()),
                PTEMU_ERR_ARGUMENT
            );
            assert!(last_error().contains(words), "{} lacks {words}", last_error());
            assert!(last_error().contains("event 2"), "{}", last_error());
        }
        // Across the API's inner batches of 64: a bad event at 80 stops all 100 from being fed.
        let mut long = vec![good; 100];
        long[80] = bad_kind;
        assert_eq!(
            ptemu_tracer_events(t, g.mem, long.as_ptr(), 100, null_mut()),
            PTEMU_ERR_ARGUMENT
        );
        assert!(last_error().contains("event 80"), "{}", last_error());
        assert_eq!(
            ptemu_tracer_events(t, g.mem, null(), 2, null_mut()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_stats(t, &mut stats), PTEMU_OK);
        assert_eq!(stats.events, 0, "a refused batch feeds nothing");
        assert_eq!(
            ptemu_tracer_set_state(t, 0, 9, 0, PTEMU_MODE_64),
            PTEMU_ERR_ARGUMENT
        );
        assert_eq!(ptemu_tracer_set_state(t, 0, 3, 0, 7), PTEMU_ERR_ARGUMENT);
        assert_eq!(ptemu_tracer_event(t, g.mem, &good), PTEMU_OK);
        assert_eq!(ptemu_tracer_stats(t, &mut stats), PTEMU_OK);
        assert_eq!(stats.events, 1);
        ptemu_tracer_free(t);
    }
}

unsafe extern "C" fn refuse_read(_: *mut c_void, _: u64, _: *mut u8, _: usize) -> i32 {
    -1
}

unsafe extern "C" fn refuse_write(_: *mut c_void, _: u64, _: *const u8, _: usize) -> i32 {
    -1
}

#[test]
fn memory_the_guest_does_not_have_is_a_memory_error() {
    let mut mem = null_mut();
    let mut unit = null_mut();
    // SAFETY: valid pointers and callbacks throughout.
    unsafe {
        assert_eq!(
            ptemu_memory_new_callbacks(null_mut(), Some(refuse_read), Some(refuse_write), &mut mem),
            PTEMU_OK
        );
        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), &mut unit), PTEMU_OK);
        // Enabling ToPA output reads the first table entry (at 0x1000): the callback refuses.
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, 0x1000),
            PTEMU_OK
        );
        let ctl = PTEMU_CTL_TRACE_EN | PTEMU_CTL_TOPA | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, ctl),
            PTEMU_ERR_MEMORY
        );
        assert!(last_error().contains("0x1000"), "{}", last_error());
        ptemu_unit_free(unit);
        ptemu_memory_free(mem);

        // A buffer at 0x10_0000 of 4 KiB: single-range output just past it.
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            ptemu_memory_new_buffer(0x10_0000, buf.as_mut_ptr(), buf.len(), &mut mem),
            PTEMU_OK
        );
        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), &mut unit), PTEMU_OK);
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, 0x10_1000),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0xfff),
            PTEMU_OK
        );
        let ctl = PTEMU_CTL_TRACE_EN | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;
        assert_eq!(ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, ctl), PTEMU_OK);
        let data = [0x02u8, 0x82];
        assert_eq!(ptemu_unit_write(unit, mem, data.as_ptr(), 2), PTEMU_ERR_MEMORY);
        // And inside it, the bytes land in the host's buffer.
        assert_eq!(ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, 0), PTEMU_OK);
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, 0x10_0000),
            PTEMU_OK
        );
        assert_eq!(ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, ctl), PTEMU_OK);
        assert_eq!(ptemu_unit_write(unit, mem, data.as_ptr(), 2), PTEMU_OK);
        assert_eq!(&buf[..2], &data);
        ptemu_unit_free(unit);
        ptemu_memory_free(mem);

        assert_eq!(
            ptemu_memory_new_buffer(u64::MAX - 10, buf.as_mut_ptr(), 4096, &mut mem),
            PTEMU_ERR_ARGUMENT
        );
    }
}

/// What the callback test's callback sees.
struct Seen {
    unit: *mut ptemu_unit,
    wraps: u32,
    /// OUTPUT_MASK_PTRS read from inside the callback, through the API, on the same unit.
    ptrs: Vec<u64>,
}

unsafe extern "C" fn count(ctx: *mut c_void, e: *const ptemu_output_event) {
    // SAFETY: ctx is the test's Seen; e is valid during the call; calling back into the API on
    // the same unit is allowed (events are delivered after the call lets go of it).
    unsafe {
        let seen = &mut *(ctx as *mut Seen);
        if (*e).kind == PTEMU_OUT_WRAP {
            seen.wraps += 1;
            let mut v = 0;
            assert_eq!(
                ptemu_unit_rdmsr(seen.unit, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, &mut v),
                PTEMU_OK
            );
            seen.ptrs.push(v);
        }
    }
}

#[test]
fn r3_output_events_reach_the_poll_queue_or_the_callback() {
    let mut buf = vec![0u8; 4096];
    let (mut mem, mut unit) = (null_mut(), null_mut());
    // SAFETY: valid pointers; the counter outlives the unit.
    unsafe {
        assert_eq!(
            ptemu_memory_new_buffer(0, buf.as_mut_ptr(), buf.len(), &mut mem),
            PTEMU_OK
        );
        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), &mut unit), PTEMU_OK);
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, 0),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f),
            PTEMU_OK
        );
        let ctl = PTEMU_CTL_TRACE_EN | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;
        assert_eq!(ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, ctl), PTEMU_OK);
        // 200 bytes through a 128-byte range: one wrap (R3), polled.
        let data = [0u8; 200];
        assert_eq!(ptemu_unit_write(unit, mem, data.as_ptr(), 200), PTEMU_OK);
        let (mut ev, mut got) = (ptemu_output_event::default(), false);
        assert_eq!(ptemu_unit_poll_event(unit, &mut ev, &mut got), PTEMU_OK);
        assert!(got);
        assert_eq!(ev.kind, PTEMU_OUT_WRAP);
        assert!(!ev.has_entry, "single range: no ToPA entry");
        assert_eq!(CStr::from_ptr(ev.rule).to_str().unwrap(), "R3");
        assert_eq!(ptemu_unit_poll_event(unit, &mut ev, &mut got), PTEMU_OK);
        assert!(!got);
        // With a callback, the next wrap goes there and not to the queue.
        let mut seen = Seen {
            unit,
            wraps: 0,
            ptrs: Vec::new(),
        };
        let ctx = &mut seen as *mut Seen as *mut c_void;
        assert_eq!(ptemu_unit_set_event_fn(unit, Some(count), ctx), PTEMU_OK);
        assert_eq!(ptemu_unit_write(unit, mem, data.as_ptr(), 200), PTEMU_OK);
        assert_eq!(seen.wraps, 2, "256 bytes in, then 144 more: two more wraps");
        // Delivered after the write: the MSRs already hold its end (offset 400 mod 128 = 16).
        assert_eq!(seen.ptrs, [16 << 32 | 0x7f, 16 << 32 | 0x7f]);
        assert_eq!(ptemu_unit_poll_event(unit, &mut ev, &mut got), PTEMU_OK);
        assert!(!got);
        ptemu_unit_free(unit);
        ptemu_memory_free(mem);
    }
}
