//! Blocks (spec/generation.md BLK1-BLK5): straight-line code an emulator describes once (where
//! it starts, its instructions' lengths, how it ends) and then executes many times, each
//! execution one step that names where the code went next ([`Tracer::feed_blocks`]).
//!
//! A block's instructions but the last cannot branch, so all a block's packets sit at its last
//! instruction: the tracer takes a whole execution in one step wherever the per-instruction
//! rules leave nothing to do in between (the fast path's settings), and hands every other
//! execution to the per-instruction path as the events it stands for ([`Block::events_into`]),
//! which stays the reference: both write the same bytes.

use super::{Event, Tracer};
use crate::memory::{MemError, PhysMemory};

/// How a block ends: the kind of its last instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BlockEnd {
    /// The last instruction does not branch: the block falls through (an emulator ended it at
    /// a page or a size limit, or before an instruction it runs on its own).
    FallThrough,
    /// A conditional branch (Jcc, JrCXZ, LOOPcc) to `target`.
    Conditional {
        /// The taken target.
        target: u64,
    },
    /// A direct near JMP.
    Jump {
        /// Its target.
        target: u64,
    },
    /// A direct near CALL.
    Call {
        /// Its target.
        target: u64,
    },
    /// An indirect near JMP.
    IndirectJump,
    /// An indirect near CALL.
    IndirectCall,
    /// A near RET.
    Return,
}

impl std::fmt::Display for BlockEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            BlockEnd::FallThrough => write!(f, "no branch"),
            BlockEnd::Conditional { target } => write!(f, "a conditional branch to {target:#x}"),
            BlockEnd::Jump { target } => write!(f, "a JMP to {target:#x}"),
            BlockEnd::Call { target } => write!(f, "a CALL to {target:#x}"),
            BlockEnd::IndirectJump => write!(f, "an indirect JMP"),
            BlockEnd::IndirectCall => write!(f, "an indirect CALL"),
            BlockEnd::Return => write!(f, "a RET"),
        }
    }
}

/// A block of straight-line code: its start, every instruction's length, how it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    start: u64,
    last_ip: u64,
    end: BlockEnd,
    /// The last instruction's length (kept beside the rest: the one-step path reads only this
    /// record).
    last_len: u8,
    lens: Box<[u8]>,
}

/// A block or an execution of one that cannot be traced, or a store that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// A block with no instruction.
    #[error("the block at {start:#x} has no instruction")]
    Empty {
        /// The block's start.
        start: u64,
    },
    /// An instruction of a length no x86 instruction has.
    #[error("instruction {index} of the block at {start:#x} is {len} bytes long (x86: 1 to 15)")]
    Length {
        /// The block's start.
        start: u64,
        /// The instruction's index in the block.
        index: usize,
        /// Its length.
        len: u8,
    },
    /// An execution of a block the table does not have (the executions before it were fed).
    #[error("execution {index}: block {block} is not among the {blocks} blocks given")]
    Unknown {
        /// The execution's index.
        index: usize,
        /// The block it names.
        block: u32,
        /// How many blocks there are.
        blocks: usize,
    },
    /// An execution that goes where its block cannot (BLK2; the executions before it were fed).
    #[error("execution {index}: the block at {start:#x} cannot go on at {next:#x} (it ends with {end})")]
    Successor {
        /// The execution's index.
        index: usize,
        /// The block's start.
        start: u64,
        /// Where the execution says it went.
        next: u64,
        /// How the block ends.
        end: BlockEnd,
    },
    /// Host memory refused a store: the executions before `fed` were fed whole (the last of them
    /// is the one whose bytes could not all be stored: they count as lost), the others were
    /// not.
    #[error("after {fed} executions: {error}")]
    Memory {
        /// Executions fed.
        fed: usize,
        /// The store that failed.
        error: MemError,
    },
}

impl Block {
    /// The block at `start` of instructions of lengths `lens` (the last one's included), ending
    /// as `end` says.
    pub fn new(start: u64, lens: &[u8], end: BlockEnd) -> Result<Block, BlockError> {
        if lens.is_empty() {
            return Err(BlockError::Empty { start });
        }
        if let Some((index, &len)) = lens.iter().enumerate().find(|(_, &l)| !(1..=15).contains(&l)) {
            return Err(BlockError::Length { start, index, len });
        }
        let before: u64 = lens[..lens.len() - 1].iter().map(|&l| u64::from(l)).sum();
        let last_ip = start.wrapping_add(before);
        let last_len = lens[lens.len() - 1];
        Ok(Block {
            start,
            lens: lens.into(),
            end,
            last_ip,
            last_len,
        })
    }

    /// Its first instruction's address.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Its instructions' lengths, in order.
    pub fn lengths(&self) -> &[u8] {
        &self.lens
    }

    /// How many instructions it has.
    pub fn instructions(&self) -> usize {
        self.lens.len()
    }

    /// Its last instruction's address.
    pub fn last_ip(&self) -> u64 {
        self.last_ip
    }

    /// The address after its last instruction.
    #[inline]
    pub fn fall_through(&self) -> u64 {
        self.last_ip.wrapping_add(u64::from(self.last_len))
    }

    /// How it ends.
    pub fn end(&self) -> BlockEnd {
        self.end
    }

    /// BLK2: whether an execution may go on at `next`: the fall-through after a block that
    /// does not branch, the target or the fall-through after a conditional branch, the target
    /// of a direct JMP or CALL, anywhere after an indirect branch or a RET.
    pub fn can_go_to(&self, next: u64) -> bool {
        match self.end {
            BlockEnd::FallThrough => next == self.fall_through(),
            BlockEnd::Conditional { target } => next == target || next == self.fall_through(),
            BlockEnd::Jump { target } | BlockEnd::Call { target } => next == target,
            BlockEnd::IndirectJump | BlockEnd::IndirectCall | BlockEnd::Return => true,
        }
    }

    /// BLK1: the events one execution that goes on at `next` stands for, appended to `out`:
    /// a retirement of each instruction but the last, then the last one's event. A conditional
    /// branch whose target is its fall-through is taken when it goes there.
    pub fn events_into(&self, next: u64, out: &mut Vec<Event>) {
        let mut ip = self.start;
        for &len in &self.lens[..self.lens.len() - 1] {
            out.push(Event::Retire { ip, len });
            ip = ip.wrapping_add(u64::from(len));
        }
        out.push(self.last_event(next));
    }

    /// The event of the last instruction of an execution that goes on at `next`.
    #[inline]
    pub(super) fn last_event(&self, next: u64) -> Event {
        let (ip, len) = (self.last_ip, self.last_len);
        match self.end {
            BlockEnd::FallThrough => Event::Retire { ip, len },
            BlockEnd::Conditional { target } => Event::CondBranch {
                ip,
                len,
                target,
                taken: next == target,
            },
            BlockEnd::Jump { target } => Event::Jump { ip, target },
            BlockEnd::Call { target } => Event::Call { ip, len, target },
            BlockEnd::IndirectJump => Event::IndirectJump { ip, target: next },
            BlockEnd::IndirectCall => Event::IndirectCall {
                ip,
                len,
                target: next,
            },
            BlockEnd::Return => Event::Return { ip, target: next },
        }
    }
}

/// One execution of a block: which (its index in the table) and where the code went next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct BlockExec {
    /// Where the code went after the block: the next block's start.
    pub next: u64,
    /// The block's index in the table given with it.
    pub block: u32,
}

/// BLK2: execution `x` (at `index` of its batch) checked: its block, or why it cannot be traced.
#[inline]
pub(super) fn checked<'a>(blocks: &'a [Block], x: &BlockExec, index: usize) -> Result<&'a Block, BlockError> {
    let b = blocks.get(x.block as usize).ok_or(BlockError::Unknown {
        index,
        block: x.block,
        blocks: blocks.len(),
    })?;
    if !b.can_go_to(x.next) {
        return Err(BlockError::Successor {
            index,
            start: b.start,
            next: x.next,
            end: b.end,
        });
    }
    Ok(b)
}

impl Tracer {
    /// Traces `execs`, executions of the blocks in `blocks`, as [`Tracer::feed`] traces the
    /// events they stand for ([`Block::events_into`]): the same bytes, PMIs, statistics and
    /// truth (BLK3). Each execution is checked as it comes (BLK2): one that names a block not in
    /// `blocks` or goes where its block cannot is an error naming its index, the executions
    /// before it traced (feed the rest again from there once the caller has mended it). A
    /// whole execution is one step wherever the per-instruction rules have nothing to do inside
    /// a block (BLK4); elsewhere its events go through the per-instruction path.
    pub fn feed_blocks<M: PhysMemory>(
        &mut self,
        mem: &mut M,
        blocks: &[Block],
        execs: &[BlockExec],
    ) -> Result<(), BlockError> {
        let mut events = std::mem::take(&mut self.block_events);
        let mut result = Ok(());
        let mut rest = execs;
        while let Some(x) = rest.first() {
            let index = execs.len() - rest.len();
            // A PSB+ or a hand-off already due (after a `flush`, say) goes out after the next
            // instruction on the per-instruction path: this execution takes that path.
            let due = self.hot.psb_bytes >= self.psb_interval() || self.hot.len >= self.cfg.flush_bytes;
            let (fed, bad) = if self.fast_blocks && !due {
                let (done, bad) = self.fast_blocks(blocks, rest, index);
                rest = &rest[done..];
                let fed = if done > 0 {
                    self.after_fast_run(mem)
                } else {
                    Ok(())
                };
                (fed, bad)
            } else {
                match checked(blocks, x, index) {
                    Ok(b) => {
                        events.clear();
                        b.events_into(x.next, &mut events);
                        rest = &rest[1..];
                        (self.feed_whole(mem, &events), None)
                    }
                    Err(e) => (Ok(()), Some(e)),
                }
            };
            if let Err(error) = fed {
                result = Err(BlockError::Memory {
                    fed: execs.len() - rest.len(),
                    error,
                });
                break;
            }
            if let Some(e) = bad {
                result = Err(e);
                break;
            }
        }
        self.block_events = events;
        result
    }

    /// Traces executions given as a chain (BLK5): execution `k` is of block `ids[k]` and goes
    /// on at the start of block `ids[k + 1]`, the last one at `next`. The same bytes, PMIs,
    /// statistics and truth as [`Tracer::feed_blocks`] on the executions this names, and the
    /// same checks (BLK2): an id that is not in `blocks` is an error naming its index with
    /// nothing traced; an execution that goes where its block cannot, an error naming its
    /// index with the executions before it traced. An emulator that gives its executions as the
    /// blocks it ran, one after another, hands them over as they come: 4 bytes an execution
    /// instead of an execution record, and one look at each block for both its step and the
    /// step before it.
    pub fn feed_chain<M: PhysMemory>(
        &mut self,
        mem: &mut M,
        blocks: &[Block],
        ids: &[u32],
        next: u64,
    ) -> Result<(), BlockError> {
        if let Some(index) = ids.iter().position(|&b| b as usize >= blocks.len()) {
            return Err(BlockError::Unknown {
                index,
                block: ids[index],
                blocks: blocks.len(),
            });
        }
        let successor = |k: usize| ids.get(k + 1).map_or(next, |&b| blocks[b as usize].start);
        let mut done = 0;
        while done < ids.len() {
            let due = self.hot.psb_bytes >= self.psb_interval() || self.hot.len >= self.cfg.flush_bytes;
            if self.fast_blocks && !due && self.probe.is_none() {
                let (n, bad) = self.fast_chain(blocks, &ids[done..], next, done);
                done += n;
                if n > 0 {
                    self.after_fast_run(mem)
                        .map_err(|error| BlockError::Memory { fed: done, error })?;
                }
                if let Some(e) = bad {
                    return Err(e);
                }
            } else {
                // Everything else, as the executions it stands for, a few at a time.
                const AT_ONCE: usize = 64;
                let mut execs = [BlockExec { next: 0, block: 0 }; AT_ONCE];
                let n = (ids.len() - done).min(AT_ONCE);
                for (j, x) in execs[..n].iter_mut().enumerate() {
                    *x = BlockExec {
                        next: successor(done + j),
                        block: ids[done + j],
                    };
                }
                self.feed_blocks(mem, blocks, &execs[..n]).map_err(|e| match e {
                    BlockError::Successor {
                        index,
                        start,
                        next,
                        end,
                    } => BlockError::Successor {
                        index: index + done,
                        start,
                        next,
                        end,
                    },
                    BlockError::Memory { fed, error } => BlockError::Memory {
                        fed: fed + done,
                        error,
                    },
                    other => other,
                })?;
                done += n;
            }
        }
        Ok(())
    }

    /// An execution's events, all of them: a store that fails part-way loses its bytes (as
    /// [`Tracer::feed`] counts them) and the rest of the execution is still traced, so that an
    /// execution is fed whole or not at all; the first failure is returned.
    fn feed_whole<M: PhysMemory>(&mut self, mem: &mut M, events: &[Event]) -> Result<(), MemError> {
        let mut rest = events;
        let mut first = None;
        while !rest.is_empty() {
            match self.feed(mem, rest) {
                Ok(()) => break,
                Err(e) => {
                    first.get_or_insert(e.error);
                    rest = &rest[e.fed.max(1)..];
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
