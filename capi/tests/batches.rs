//! Through the C API: events fed in batches (`ptemu_tracer_events`) leave the same bytes in a
//! host buffer as the same events fed one at a time, and the tracer's output events can be polled.

use ptemu_capi::*;
use std::ptr::null_mut;

const TABLE: u64 = 0x1000;
const RING: u64 = 0x10_0000;

/// A guest of 2 MiB with a ToPA ring of two 4 KiB regions (INT on the second, END back), a
/// tracer enabled on it, `feed` run, tracing disabled; the guest's bytes and the PMIs polled.
fn run(feed: impl Fn(*mut ptemu_tracer, *mut ptemu_memory, &[ptemu_event])) -> (Vec<u8>, usize) {
    let mut guest = vec![0u8; 2 << 20];
    let put =
        |g: &mut Vec<u8>, pa: u64, v: u64| g[pa as usize..pa as usize + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut guest, TABLE, RING);
    put(&mut guest, TABLE + 8, (RING + 0x1000) | PTEMU_TOPA_INT);
    put(&mut guest, TABLE + 16, TABLE | PTEMU_TOPA_END);
    let events: Vec<ptemu_event> = (0..5_000u64)
        .flat_map(|i| {
            [
                ptemu_event {
                    kind: PTEMU_EV_COND_BRANCH,
                    ip: 0x40_1000,
                    len: 2,
                    target: 0x40_1010,
                    flags: if i % 3 == 0 { PTEMU_EVF_TAKEN } else { 0 },
                    ..Default::default()
                },
                ptemu_event {
                    kind: PTEMU_EV_INDIRECT_JUMP,
                    ip: 0x40_1010,
                    target: 0x40_1000,
                    ..Default::default()
                },
            ]
        })
        .collect();
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
        feed(t, mem, &events);
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

#[test]
fn p1_batched_events_write_what_single_events_write() {
    // SAFETY: the pointers run() hands over are live.
    let one = run(|t, mem, evs| unsafe {
        for e in evs {
            assert_eq!(ptemu_tracer_event(t, mem, e), PTEMU_OK);
        }
    });
    // SAFETY: as above; batches of uneven sizes.
    let batched = run(|t, mem, evs| unsafe {
        for chunk in evs.chunks(777) {
            let mut fed = usize::MAX;
            assert_eq!(
                ptemu_tracer_events(t, mem, chunk.as_ptr(), chunk.len(), &mut fed),
                PTEMU_OK
            );
            assert_eq!(fed, chunk.len());
        }
    });
    assert!(one.1 >= 2, "the ring filled its INT region: {} PMIs", one.1);
    assert_eq!(batched.1, one.1);
    assert!(batched.0 == one.0, "the guest's bytes differ");
    assert_ne!(
        &one.0[RING as usize..RING as usize + 2],
        [0, 0],
        "trace in the ring"
    );
}
