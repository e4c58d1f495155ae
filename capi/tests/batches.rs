//! Through the C API: events fed in batches (`ptemu_tracer_events`) leave the same bytes in a
//! host buffer as the same events fed one at a time, and the tracer's output events can be polled.

mod common;

use common::{run, RING};
use ptemu_capi::*;

/// The events: a conditional branch taken every third time, then an indirect jump back.
fn events() -> Vec<ptemu_event> {
    (0..5_000u64)
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
        .collect()
}

#[test]
fn p1_batched_events_write_what_single_events_write() {
    let evs = events();
    // SAFETY: the pointers run() hands over are live.
    let one = run(|t, mem| unsafe {
        for e in &evs {
            assert_eq!(ptemu_tracer_event(t, mem, e), PTEMU_OK);
        }
    });
    // SAFETY: as above; batches of uneven sizes.
    let batched = run(|t, mem| unsafe {
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
