//! A batch of the tracer's input in the order it happened: events one instruction each, and
//! executions of blocks (spec/generation.md BLK1), each a whole block in one step. A source that
//! thinks in blocks (`ptemu run`'s QEMU stream) fills one with [`Steps::exec`] where it can and
//! with events elsewhere; every other source gives events only ([`EventSource::next_steps`]).
//! A stretch of executions is a chain (BLK5): the blocks that ran, one after another, each
//! going on at the next one's start and the last where the stretch says.
//!
//! [`EventSource::next_steps`]: super::EventSource::next_steps

use crate::tracer::{Block, Event};

/// Events and block executions, in order, and the blocks first described in the batch.
#[derive(Debug, Default, Clone)]
pub struct Steps {
    events: Vec<Event>,
    /// The executions' blocks (BLK5).
    execs: Vec<u32>,
    /// Where the last execution so far went on.
    last_next: u64,
    /// Blocks described in this batch, to be added to the table before its first execution:
    /// the table's next indices, in order.
    blocks: Vec<Block>,
    /// The batch as pairs of a stretch of events and then one of executions: where each pair
    /// but the last (open) one ends, in `events` and `execs`, and where its last execution
    /// went on.
    bounds: Vec<(usize, usize, u64)>,
    /// Instructions the executions stand for.
    exec_instructions: u64,
}

/// One stretch of a batch.
#[derive(Debug, Clone, Copy)]
pub enum Piece<'a> {
    /// Events, one instruction each.
    Events(&'a [Event]),
    /// Executions of blocks, as a chain (BLK5): each of `ids[k]`, going on at the start of
    /// `ids[k + 1]`, the last at `next`.
    Blocks {
        /// The blocks that ran, in order.
        ids: &'a [u32],
        /// Where the last one went on.
        next: u64,
    },
}

impl Steps {
    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.events.clear();
        self.execs.clear();
        self.blocks.clear();
        self.bounds.clear();
        self.exec_instructions = 0;
    }

    /// Where the open pair's executions begin.
    #[inline]
    fn open_execs(&self) -> usize {
        self.bounds.last().map_or(0, |b| b.1)
    }

    /// The events vector to append to, after everything in the batch so far.
    #[inline]
    pub fn events_mut(&mut self) -> &mut Vec<Event> {
        if self.execs.len() > self.open_execs() {
            self.bounds
                .push((self.events.len(), self.execs.len(), self.last_next));
        }
        &mut self.events
    }

    /// Appends one event.
    #[inline]
    pub fn event(&mut self, e: Event) {
        self.events_mut().push(e);
    }

    /// Appends events.
    #[inline]
    pub fn extend_events(&mut self, events: &[Event]) {
        self.events_mut().extend_from_slice(events);
    }

    /// Inserts `events` at `mark`, an index into the events (as [`Steps::events_len`] gave it),
    /// with no execution after it: they go in before the events at and after `mark`.
    pub fn insert_events(&mut self, mark: usize, events: Vec<Event>) {
        self.events_mut();
        debug_assert!(self.bounds.last().is_none_or(|b| b.0 <= mark) && mark <= self.events.len());
        self.events.splice(mark..mark, events);
    }

    /// The events, for a batch that holds no execution.
    pub fn into_events(self) -> Vec<Event> {
        debug_assert!(self.execs.is_empty());
        self.events
    }

    /// The events so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Where the events after the last execution begin (the events' length when the batch
    /// ends with an execution).
    pub fn trailing_events_start(&self) -> usize {
        if self.execs.len() > self.open_execs() {
            self.events.len()
        } else {
            self.bounds.last().map_or(0, |b| b.0)
        }
    }

    /// Moves the events from `cut` on (all after the last execution) to the end of `into`.
    pub fn take_events_from(&mut self, cut: usize, into: &mut Vec<Event>) {
        debug_assert!(cut >= self.trailing_events_start());
        into.extend(self.events.drain(cut..));
    }

    /// Appends an execution of block `block` (of `instructions` instructions) that went on at
    /// `next`: the start of the block of the execution appended after it, if one is (BLK5).
    #[inline]
    pub fn exec(&mut self, block: u32, next: u64, instructions: usize) {
        self.execs.push(block);
        self.last_next = next;
        self.exec_instructions += instructions as u64;
    }

    /// Appends executions of the blocks `blocks`, one after another (BLK5: each went on at the
    /// next one's start), the last one at `next`; `instructions` in all.
    #[inline]
    pub fn exec_chain(&mut self, blocks: &[u32], next: u64, instructions: u64) {
        if !blocks.is_empty() {
            self.execs.extend_from_slice(blocks);
            self.last_next = next;
            self.exec_instructions += instructions;
        }
    }

    /// Describes the table's next block (its index: the number of blocks described before).
    pub fn define(&mut self, block: Block) {
        self.blocks.push(block);
    }

    /// Moves everything of `other` after what this batch holds, in order (its blocks described
    /// after this batch's), leaving `other` empty.
    pub fn append(&mut self, other: &mut Steps) {
        if self.is_empty() && self.blocks.is_empty() {
            std::mem::swap(self, other);
            other.clear();
            return;
        }
        self.blocks.append(&mut other.blocks);
        for p in other.pieces() {
            match p {
                Piece::Events(e) => self.extend_events(e),
                Piece::Blocks { ids, next } => self.exec_chain(ids, next, 0),
            }
        }
        self.exec_instructions += other.exec_instructions;
        other.clear();
    }

    /// The blocks first described in this batch, in order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The events so far (a mark for [`Steps::insert_events`]).
    #[inline]
    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    /// Events and executions so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.events.len() + self.execs.len()
    }

    /// Whether the batch holds no event and no execution.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Instructions so far: an event is one, an execution its block's.
    #[inline]
    pub fn instructions(&self) -> u64 {
        self.events.len() as u64 + self.exec_instructions
    }

    /// The batch's stretches, in order (empty ones left out).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> + '_ {
        let last = (self.events.len(), self.execs.len(), self.last_next);
        let mut from = (0, 0);
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(last))
            .flat_map(move |(e, x, next)| {
                let pair = [
                    Piece::Events(&self.events[from.0..e]),
                    Piece::Blocks {
                        ids: &self.execs[from.1..x],
                        next,
                    },
                ];
                from = (e, x);
                pair
            })
            .filter(|p| match p {
                Piece::Events(e) => !e.is_empty(),
                Piece::Blocks { ids, .. } => !ids.is_empty(),
            })
    }

    /// Every step as events, the executions expanded by `table` (which holds the blocks this
    /// batch describes too), appended to `out`.
    pub fn expand_into(&self, table: &[Block], out: &mut Vec<Event>) {
        for p in self.pieces() {
            match p {
                Piece::Events(e) => out.extend_from_slice(e),
                Piece::Blocks { ids, next } => {
                    for (k, &b) in ids.iter().enumerate() {
                        let after = ids.get(k + 1).map_or(next, |&a| table[a as usize].start());
                        table[b as usize].events_into(after, out);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracer::BlockEnd;

    fn kinds(s: &Steps) -> Vec<(char, usize)> {
        s.pieces()
            .map(|p| match p {
                Piece::Events(e) => ('e', e.len()),
                Piece::Blocks { ids, .. } => ('b', ids.len()),
            })
            .collect()
    }

    #[test]
    fn blk1_pieces_keep_the_order_events_and_executions_came_in() {
        let mut s = Steps::default();
        let r = Event::Retire { ip: 1, len: 1 };
        s.exec(0, 0, 2);
        s.event(r);
        s.event(r);
        s.exec(0, 0, 2);
        s.exec(0, 0, 2);
        s.event(r);
        assert_eq!(kinds(&s), [('b', 1), ('e', 2), ('b', 2), ('e', 1)]);
        assert_eq!(s.instructions(), 3 + 6);
        let mark = s.events_len();
        s.event(r);
        s.insert_events(mark, vec![Event::Retire { ip: 9, len: 1 }]);
        assert_eq!(kinds(&s), [('b', 1), ('e', 2), ('b', 2), ('e', 3)]);
        s.clear();
        assert!(s.is_empty() && s.pieces().next().is_none());
    }

    /// BLK1: a batch appended to another keeps its pieces in order, its blocks after the
    /// other's, and its instructions.
    #[test]
    fn blk1_an_appended_batch_follows_the_first() {
        let r = Event::Retire { ip: 1, len: 1 };
        let b = Block::new(0x100, &[2], BlockEnd::FallThrough).unwrap();
        let mut a = Steps::default();
        a.event(r);
        a.exec(0, 0x100, 2);
        let mut c = Steps::default();
        c.define(b.clone());
        c.exec(0, 8, 2);
        c.event(r);
        a.append(&mut c);
        assert!(c.is_empty());
        assert_eq!(kinds(&a), [('e', 1), ('b', 2), ('e', 1)]);
        assert_eq!((a.instructions(), a.blocks().len()), (6, 1));
        let mut empty = Steps::default();
        let mut d = Steps::default();
        d.define(b);
        d.exec(0, 8, 2);
        empty.append(&mut d);
        assert_eq!((empty.instructions(), empty.blocks().len()), (2, 1));
    }

    #[test]
    fn blk1_expanded_executions_are_their_blocks_events() {
        let b = Block::new(0x100, &[2, 3], BlockEnd::Jump { target: 0x100 }).unwrap();
        let mut s = Steps::default();
        s.define(b.clone());
        s.event(Event::Retire { ip: 0x50, len: 1 });
        s.exec(0, 0x100, 2);
        let mut out = Vec::new();
        s.expand_into(std::slice::from_ref(&b), &mut out);
        assert_eq!(
            out,
            [
                Event::Retire { ip: 0x50, len: 1 },
                Event::Retire { ip: 0x100, len: 2 },
                Event::Jump {
                    ip: 0x102,
                    target: 0x100
                }
            ]
        );
    }
}
