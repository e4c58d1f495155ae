//! Through the C API (BLK1-BLK5): a table of blocks (`ptemu_blocks_add`) and their executions
//! (`ptemu_tracer_feed_blocks`, or as chains `ptemu_tracer_feed_chain`) leave the same bytes
//! and PMIs in a host buffer as the events they stand for fed with `ptemu_tracer_events`; a bad
//! block or execution is refused with its index, nothing of the call fed.

mod common;

use common::run;
use ptemu_capi::*;
use ptemu_core::tracer::{Block, BlockEnd, Event};
use std::ptr::null_mut;

/// A block as C describes it: start, lengths, PTEMU_BLOCK_* kind, target.
type CBlock = (u64, Vec<u8>, u32, u64);

/// The blocks, and executions as (block, next).
fn program() -> (Vec<CBlock>, Vec<(u32, u64)>) {
    let blocks = vec![
        (0x40_1000, vec![3, 2, 2], PTEMU_BLOCK_CONDITIONAL, 0x40_1100),
        (0x40_1007, vec![5], PTEMU_BLOCK_CALL, 0x40_2000),
        (0x40_2000, vec![1, 4], PTEMU_BLOCK_RETURN, 0),
        (0x40_100c, vec![2], PTEMU_BLOCK_INDIRECT_JUMP, 0),
        (0x40_1100, vec![4, 4], PTEMU_BLOCK_JUMP, 0x40_1000),
    ];
    let mut execs = Vec::new();
    for i in 0..40_000u64 {
        if i % 3 == 0 {
            execs.push((0, 0x40_1100));
            execs.push((4, 0x40_1000));
        } else {
            execs.push((0, 0x40_1007));
            execs.push((1, 0x40_2000));
            execs.push((2, 0x40_100c));
            execs.push((3, 0x40_1000));
        }
    }
    (blocks, execs)
}

/// The Rust block of a C description.
fn rust_block(b: &CBlock) -> Block {
    let end = match b.2 {
        PTEMU_BLOCK_CONDITIONAL => BlockEnd::Conditional { target: b.3 },
        PTEMU_BLOCK_CALL => BlockEnd::Call { target: b.3 },
        PTEMU_BLOCK_JUMP => BlockEnd::Jump { target: b.3 },
        PTEMU_BLOCK_RETURN => BlockEnd::Return,
        _ => BlockEnd::IndirectJump,
    };
    Block::new(b.0, &b.1, end).unwrap()
}

/// A C event of a Rust one (the kinds a block's events have).
fn c_event(e: &Event) -> ptemu_event {
    let d = ptemu_event::default();
    match *e {
        Event::Retire { ip, len } => ptemu_event {
            kind: PTEMU_EV_RETIRE,
            ip,
            len,
            ..d
        },
        Event::CondBranch {
            ip,
            len,
            target,
            taken,
        } => ptemu_event {
            kind: PTEMU_EV_COND_BRANCH,
            ip,
            len,
            target,
            flags: if taken { PTEMU_EVF_TAKEN } else { 0 },
            ..d
        },
        Event::Jump { ip, target } => ptemu_event {
            kind: PTEMU_EV_JUMP,
            ip,
            target,
            ..d
        },
        Event::Call { ip, len, target } => ptemu_event {
            kind: PTEMU_EV_CALL,
            ip,
            len,
            target,
            ..d
        },
        Event::IndirectJump { ip, target } => ptemu_event {
            kind: PTEMU_EV_INDIRECT_JUMP,
            ip,
            target,
            ..d
        },
        Event::Return { ip, target } => ptemu_event {
            kind: PTEMU_EV_RETURN,
            ip,
            target,
            ..d
        },
        e => panic!("not a block's event: {e:?}"),
    }
}

/// A table of `blocks` made through the C API, with the ids it gave.
fn c_table(blocks: &[CBlock]) -> (*mut ptemu_blocks, Vec<u32>) {
    let mut table = null_mut();
    let mut ids = Vec::new();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(ptemu_blocks_new(&mut table), PTEMU_OK);
        for b in blocks {
            let mut id = u32::MAX;
            assert_eq!(
                ptemu_blocks_add(table, b.0, b.1.as_ptr(), b.1.len(), b.2, b.3, &mut id),
                PTEMU_OK
            );
            ids.push(id);
        }
    }
    (table, ids)
}

/// The reference: the executions `execs` of `blocks` fed as their events, through
/// `ptemu_tracer_events` in pieces.
fn events_run(blocks: &[CBlock], execs: &[(u32, u64)]) -> (Vec<u8>, usize) {
    let mut events = Vec::new();
    for &(k, next) in execs {
        rust_block(&blocks[k as usize]).events_into(next, &mut events);
    }
    let c_events: Vec<ptemu_event> = events.iter().map(c_event).collect();
    // SAFETY: the pointers run() hands over are live.
    run(|t, mem| unsafe {
        for chunk in c_events.chunks(500) {
            assert_eq!(
                ptemu_tracer_events(t, mem, chunk.as_ptr(), chunk.len(), null_mut()),
                PTEMU_OK
            );
        }
    })
}

#[test]
fn blk3_blocks_through_c_write_what_their_events_write() {
    let (blocks, execs) = program();
    let reference = events_run(&blocks, &execs);
    let (table, ids) = c_table(&blocks);
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    let c_execs: Vec<ptemu_block_exec> = execs
        .iter()
        .map(|&(block, next)| ptemu_block_exec { next, block })
        .collect();
    // SAFETY: as above, and the table is live.
    let blocked = run(|t, mem| unsafe {
        for chunk in c_execs.chunks(777) {
            let mut fed = usize::MAX;
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, table, chunk.as_ptr(), chunk.len(), &mut fed),
                PTEMU_OK
            );
            assert_eq!(fed, chunk.len());
        }
    });
    // SAFETY: made by ptemu_blocks_new, freed once.
    unsafe { ptemu_blocks_free(table) };
    assert!(
        reference.1 >= 2,
        "the ring filled its INT region: {} PMIs",
        reference.1
    );
    assert_eq!(blocked.1, reference.1, "PMIs");
    assert!(blocked.0 == reference.0, "the guest's bytes differ");
}

/// BLK5: the program's executions are one chain (each goes on at the next one's block's
/// start); fed through `ptemu_tracer_feed_chain` in pieces, they write what their events write;
/// an unknown id feeds nothing, a successor a block cannot go to is refused at its index.
#[test]
fn blk5_chains_through_c_write_what_their_events_write() {
    let (blocks, execs) = program();
    let reference = events_run(&blocks, &execs);
    let (table, _) = c_table(&blocks);
    for w in execs.windows(2) {
        assert_eq!(w[0].1, blocks[w[1].0 as usize].0, "one chain");
    }
    // SAFETY: as above, and the table is live.
    let chained = run(|t, mem| unsafe {
        for chunk in execs.chunks(777) {
            let ids: Vec<u32> = chunk.iter().map(|x| x.0).collect();
            let next = chunk.last().unwrap().1;
            let mut fed = usize::MAX;
            assert_eq!(
                ptemu_tracer_feed_chain(t, mem, table, ids.as_ptr(), ids.len(), next, &mut fed),
                PTEMU_OK
            );
            assert_eq!(fed, ids.len());
        }
    });
    assert_eq!(chained.1, reference.1, "PMIs");
    assert!(chained.0 == reference.0, "the guest's bytes differ");
    // SAFETY: as above.
    run(|t, mem| unsafe {
        let mut fed = usize::MAX;
        assert_eq!(
            ptemu_tracer_feed_chain(t, mem, table, [0u32, 4, 9].as_ptr(), 3, 0, &mut fed),
            PTEMU_ERR_ARGUMENT
        );
        assert_eq!(fed, 0, "an unknown id: nothing fed");
        // Block 0 going on at block 1's start (taken: 0x401100), then block 1's CALL going on
        // at 0x401007, not its target.
        assert_eq!(
            ptemu_tracer_feed_chain(t, mem, table, [0u32, 4, 0, 1].as_ptr(), 4, 0x40_1007, &mut fed),
            PTEMU_ERR_ARGUMENT
        );
        assert_eq!(fed, 3, "the executions before the bad one fed");
        let msg = std::ffi::CStr::from_ptr(ptemu_last_error())
            .to_string_lossy()
            .into_owned();
        assert!(msg.contains("execution 3") && msg.contains("0x401007"), "{msg}");
        assert_eq!(
            ptemu_tracer_feed_chain(t, mem, table, std::ptr::null(), 2, 0, &mut fed),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_tracer_feed_chain(t, mem, null_mut(), [0u32].as_ptr(), 1, 0, &mut fed),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_tracer_feed_chain(t, mem, table, std::ptr::null(), 0, 0, &mut fed),
            PTEMU_OK
        );
    });
    // SAFETY: made by ptemu_blocks_new, freed once.
    unsafe { ptemu_blocks_free(table) };
}

#[test]
fn blk1_blk2_bad_blocks_and_executions_are_refused_with_their_index() {
    let (blocks, _) = program();
    let (table, _) = c_table(&blocks);
    let mut id = 0;
    // SAFETY: valid pointers; the refusals write nothing.
    unsafe {
        assert_eq!(
            ptemu_blocks_add(table, 0, [1u8].as_ptr(), 0, PTEMU_BLOCK_RETURN, 0, &mut id),
            PTEMU_ERR_ARGUMENT
        );
        assert_eq!(
            ptemu_blocks_add(table, 0, [16u8].as_ptr(), 1, PTEMU_BLOCK_RETURN, 0, &mut id),
            PTEMU_ERR_ARGUMENT
        );
        assert_eq!(
            ptemu_blocks_add(table, 0, [1u8].as_ptr(), 1, 99, 0, &mut id),
            PTEMU_ERR_ARGUMENT
        );
        assert_eq!(
            ptemu_blocks_add(table, 0, std::ptr::null(), 1, PTEMU_BLOCK_RETURN, 0, &mut id),
            PTEMU_ERR_NULL
        );
    }
    let ok = ptemu_block_exec {
        next: 0x40_1100,
        block: 0,
    };
    let bad = [
        ok,
        ptemu_block_exec {
            next: 0x40_9999,
            block: 4,
        },
        ok,
    ];
    let unknown = [ptemu_block_exec { next: 0, block: 9 }];
    let (first, after) = (
        // SAFETY: the pointers run() hands over are live.
        run(|t, mem| unsafe {
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, table, &ok, 1, null_mut()),
                PTEMU_OK
            );
        }),
        // SAFETY: the pointers run() hands over are live.
        run(|t, mem| unsafe {
            let mut fed = usize::MAX;
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, table, bad.as_ptr(), 3, &mut fed),
                PTEMU_ERR_ARGUMENT
            );
            assert_eq!(fed, 1, "the execution before the bad one is fed, none after");
            let msg = std::ffi::CStr::from_ptr(ptemu_last_error())
                .to_string_lossy()
                .into_owned();
            assert!(
                msg.contains("execution 1") && msg.contains("0x409999") && msg.contains("a JMP to 0x401000"),
                "{msg}"
            );
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, table, unknown.as_ptr(), 1, &mut fed),
                PTEMU_ERR_ARGUMENT
            );
            assert_eq!(fed, 0);
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, null_mut(), bad.as_ptr(), 2, &mut fed),
                PTEMU_ERR_NULL
            );
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, table, std::ptr::null(), 2, &mut fed),
                PTEMU_ERR_NULL
            );
            assert_eq!(
                ptemu_tracer_feed_blocks(t, mem, table, std::ptr::null(), 0, &mut fed),
                PTEMU_OK
            );
        }),
    );
    assert!(
        first == after,
        "a call refused at execution 1 fed execution 0 and nothing else"
    );
    // SAFETY: made by ptemu_blocks_new, freed once.
    unsafe { ptemu_blocks_free(table) };
}
