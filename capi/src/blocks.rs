//! Blocks through the C API (spec/generation.md BLK1-BLK4): a table of blocks an emulator
//! describes once ([`ptemu_blocks`]), and executions of them fed to a tracer
//! ([`ptemu_tracer_feed_blocks`]), the twin of `Tracer::feed_blocks`.

use crate::status::{guard, Failure, PTEMU_ERR_MEMORY};
use crate::{live, memory::ptemu_memory, ptemu_tracer, put, with_tracer};
use ptemu_core::tracer::{Block, BlockEnd, BlockError, BlockExec, Tracer};

/// The last instruction does not branch: the block falls through.
pub const PTEMU_BLOCK_FALL_THROUGH: u32 = 0;
/// A conditional branch (Jcc, JrCXZ, LOOPcc) to `target`.
pub const PTEMU_BLOCK_CONDITIONAL: u32 = 1;
/// A direct near JMP to `target`.
pub const PTEMU_BLOCK_JUMP: u32 = 2;
/// A direct near CALL to `target`.
pub const PTEMU_BLOCK_CALL: u32 = 3;
/// An indirect near JMP.
pub const PTEMU_BLOCK_INDIRECT_JUMP: u32 = 4;
/// An indirect near CALL.
pub const PTEMU_BLOCK_INDIRECT_CALL: u32 = 5;
/// A near RET.
pub const PTEMU_BLOCK_RETURN: u32 = 6;

/// A table of blocks, described once and executed many times (ptemu_blocks_add). Opaque. It
/// may be shared by tracers on several threads; it must not change while a feed uses it:
/// ptemu_blocks_add during one (from a callback, or another thread) is refused.
#[derive(Debug, Default)]
pub struct ptemu_blocks {
    blocks: std::sync::RwLock<Vec<Block>>,
}

/// One execution of a block: its id in the table (what ptemu_blocks_add gave) and where the
/// code went after it (the next block's start). The layout of Rust's `BlockExec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ptemu_block_exec {
    /// Where the code went after the block.
    pub next: u64,
    /// The block's id.
    pub block: u32,
}

// A C array of executions is read as Rust's, in place.
const _: () = {
    assert!(std::mem::size_of::<ptemu_block_exec>() == std::mem::size_of::<BlockExec>());
    assert!(std::mem::align_of::<ptemu_block_exec>() == std::mem::align_of::<BlockExec>());
    assert!(std::mem::offset_of!(ptemu_block_exec, next) == std::mem::offset_of!(BlockExec, next));
    assert!(std::mem::offset_of!(ptemu_block_exec, block) == std::mem::offset_of!(BlockExec, block));
};

/// Makes an empty table of blocks into `*out` (free it with ptemu_blocks_free).
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_blocks_new(out: *mut *mut ptemu_blocks) -> crate::ptemu_status {
    guard(|| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { put(out, Box::into_raw(Box::default())) }
    })
}

/// Frees a table of blocks (NULL: nothing).
///
/// # Safety
/// `b` must be NULL or a table from ptemu_blocks_new, not used after.
#[no_mangle]
pub unsafe extern "C" fn ptemu_blocks_free(b: *mut ptemu_blocks) {
    if !b.is_null() {
        // SAFETY: made by Box::into_raw in ptemu_blocks_new, freed once by contract.
        drop(unsafe { Box::from_raw(b) });
    }
}

/// Adds the block at `start` whose `n` instructions have the lengths `lens` (the last one's
/// included), ending as `end` says (a PTEMU_BLOCK_* kind; `target` for CONDITIONAL, JUMP and
/// CALL, ignored otherwise), and stores its id in `*id` (ids count from 0, in the order blocks
/// are added). PTEMU_ERR_ARGUMENT for no instruction, a length outside 1-15, an unknown kind,
/// more than 2^32 blocks, or a table a feed is using.
///
/// # Safety
/// `b` must be NULL or live; `lens` NULL or `n` readable bytes; `id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_blocks_add(
    b: *mut ptemu_blocks,
    start: u64,
    lens: *const u8,
    n: usize,
    end: u32,
    target: u64,
    id: *mut u32,
) -> crate::ptemu_status {
    guard(|| {
        // SAFETY: NULL or live by contract.
        let table = unsafe { live(b, "blocks")? };
        if lens.is_null() {
            return Err(Failure::null("lens"));
        }
        if id.is_null() {
            return Err(Failure::null("id"));
        }
        // SAFETY: non-NULL and `n` readable bytes by contract.
        let lens = unsafe { std::slice::from_raw_parts(lens, n) };
        let end = match end {
            PTEMU_BLOCK_FALL_THROUGH => BlockEnd::FallThrough,
            PTEMU_BLOCK_CONDITIONAL => BlockEnd::Conditional { target },
            PTEMU_BLOCK_JUMP => BlockEnd::Jump { target },
            PTEMU_BLOCK_CALL => BlockEnd::Call { target },
            PTEMU_BLOCK_INDIRECT_JUMP => BlockEnd::IndirectJump,
            PTEMU_BLOCK_INDIRECT_CALL => BlockEnd::IndirectCall,
            PTEMU_BLOCK_RETURN => BlockEnd::Return,
            k => {
                return Err(Failure::argument(format!(
                    "block end kind {k} is not a PTEMU_BLOCK_* kind"
                )))
            }
        };
        let Ok(mut blocks) = table.blocks.try_write() else {
            return Err(Failure::argument(
                "the table is in use by a feed (ptemu_tracer_feed_blocks): add blocks between feeds",
            ));
        };
        let next = u32::try_from(blocks.len())
            .map_err(|_| Failure::argument("a table holds at most 2^32 blocks"))?;
        let block = Block::new(start, lens, end).map_err(|e| Failure::argument(e.to_string()))?;
        blocks.push(block);
        // SAFETY: non-NULL and writable by contract.
        unsafe { put(id, next) }
    })
}

/// Feeds `n` executions of the blocks of `blocks`, the twin of `Tracer::feed_blocks`: the same
/// bytes as the events they stand for, one step an execution where no per-instruction rule
/// applies (BLK3, BLK4), and stores in `*fed` (unless NULL) how many were fed: `n` on PTEMU_OK.
/// Each execution is checked as it is taken (BLK2): one that names a block the table does not
/// have or goes where its block cannot is PTEMU_ERR_ARGUMENT with its index in the message,
/// `*fed` that index (the executions before it were fed, none after). PTEMU_ERR_MEMORY when
/// `mem` refuses a store: the executions before `*fed` were fed whole (the last of them is the
/// one whose bytes could not all be stored: they count in bytes_lost), the others were not.
///
/// # Safety
/// `t` and `mem` must be NULL or live; `blocks` NULL or live; `execs` NULL or `n` readable
/// executions; `fed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_feed_blocks(
    t: *mut ptemu_tracer,
    mem: *mut ptemu_memory,
    blocks: *const ptemu_blocks,
    execs: *const ptemu_block_exec,
    n: usize,
    fed: *mut usize,
) -> crate::ptemu_status {
    // SAFETY: forwarded contracts (`execs` has the layout of `BlockExec`: checked at compile
    // time above).
    unsafe {
        feed_table(
            t,
            mem,
            blocks,
            (execs.cast::<BlockExec>(), n, "execs"),
            fed,
            |t, m, b, execs| fed_or_failure(t.feed_blocks(m, b, execs), n, true),
        )
    }
}

/// A feed's result for C: how many executions were fed (all `n`, or those before the failure)
/// and the failure (`before_unknown`: whether those before an unknown block were fed, as by
/// `feed_blocks`; a chain feeds none then).
fn fed_or_failure(r: Result<(), BlockError>, n: usize, before_unknown: bool) -> (usize, Result<(), Failure>) {
    match r {
        Ok(()) => (n, Ok(())),
        Err(BlockError::Memory { fed, error }) => {
            let message = format!("execution {}: {error}", fed.saturating_sub(1));
            (fed, Err(Failure::new(PTEMU_ERR_MEMORY, message)))
        }
        Err(e @ BlockError::Successor { index, .. }) => (index, Err(Failure::argument(e.to_string()))),
        Err(e @ BlockError::Unknown { index, .. }) => {
            let done = if before_unknown { index } else { 0 };
            (done, Err(Failure::argument(e.to_string())))
        }
        Err(e) => (0, Err(Failure::argument(e.to_string()))),
    }
}

/// What both feeds do around the feed itself: `*fed` (unless NULL) set to 0, then to how many
/// were fed; the table and the `n` items at `items` (`what`, named when NULL) checked; the
/// table held for the whole feed (ptemu_blocks_add is refused meanwhile); `feed` given the
/// tracer, the memory, the blocks and the items, and returning how many it fed and how it went.
///
/// # Safety
/// As for the feeds: `t` and `mem` NULL or live, `blocks` NULL or live, `items` NULL or `n`
/// readable items, `fed` NULL or writable.
unsafe fn feed_table<T>(
    t: *mut ptemu_tracer,
    mem: *mut ptemu_memory,
    blocks: *const ptemu_blocks,
    (items, n, what): (*const T, usize, &'static str),
    fed: *mut usize,
    feed: impl FnOnce(&mut Tracer, &mut ptemu_memory, &[Block], &[T]) -> (usize, Result<(), Failure>),
) -> crate::ptemu_status {
    let report = |k: usize| {
        if !fed.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { fed.write(k) };
        }
    };
    report(0);
    guard(|| {
        // SAFETY: NULL or live by contract (only read).
        let Some(table) = (unsafe { blocks.as_ref() }) else {
            return Err(Failure::null("blocks"));
        };
        if n > 0 && items.is_null() {
            return Err(Failure::null(what));
        }
        let items: &[T] = if n == 0 {
            &[]
        } else {
            // SAFETY: non-NULL and `n` readable items by contract.
            unsafe { std::slice::from_raw_parts(items, n) }
        };
        let blocks = table.blocks.read().unwrap_or_else(|p| p.into_inner());
        let mut done = 0;
        // SAFETY: forwarded contracts.
        let r = unsafe {
            with_tracer(t, mem, |t, m| {
                let (k, r) = feed(t, m, &blocks, items);
                done = k;
                r
            })
        };
        report(done);
        r
    })
}

/// Feeds `n` executions of the blocks of `blocks` given as a chain, the twin of
/// `Tracer::feed_chain` (BLK5): execution `k` is of block `ids[k]` and goes on at the start of
/// block `ids[k + 1]`, the last one at `next`; the same bytes as `ptemu_tracer_feed_blocks` of
/// those executions. Stores in `*fed` (unless NULL) how many were fed: `n` on PTEMU_OK. An id
/// the table does not have is PTEMU_ERR_ARGUMENT with its index in the message and nothing
/// fed (`*fed` 0); an execution that goes where its block cannot, PTEMU_ERR_ARGUMENT with its
/// index in the message and `*fed` that index (the executions before it were fed, none after).
/// PTEMU_ERR_MEMORY as for `ptemu_tracer_feed_blocks`.
///
/// # Safety
/// `t` and `mem` must be NULL or live; `blocks` NULL or live; `ids` NULL or `n` readable ids;
/// `fed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_feed_chain(
    t: *mut ptemu_tracer,
    mem: *mut ptemu_memory,
    blocks: *const ptemu_blocks,
    ids: *const u32,
    n: usize,
    next: u64,
    fed: *mut usize,
) -> crate::ptemu_status {
    // SAFETY: forwarded contracts.
    unsafe {
        feed_table(t, mem, blocks, (ids, n, "ids"), fed, |t, m, b, ids| {
            fed_or_failure(t.feed_chain(m, b, ids, next), n, false)
        })
    }
}
