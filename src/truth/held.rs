//! The records the classifier holds back until it knows whether lost instructions follow them
//! (spec/truth.md TR3: the instructions reached through the last two carriers are optional
//! before a loss). Almost all of them are executions of blocks (TR14) and instructions, so an
//! item is one of those, in a few words; the rare other records (a mark, a time, an enable)
//! wait in a queue beside them, the item only keeping their place.

use super::record::{Branch, Class, Record, Run, Sink};
use super::Counts;
use std::collections::VecDeque;
use std::io;

/// A held execution or instruction, or the place of a held record.
#[derive(Clone, Copy, Debug)]
pub(super) enum Item {
    /// A whole execution of a block (its class is set when it is written).
    Run(Run),
    /// An instruction (its class is set when it is written).
    Insn {
        /// Its index.
        i: u64,
        /// Its IP.
        ip: u64,
        /// The branch it is, if it is one.
        branch: Option<Branch>,
        /// Its carrier's delivered offset.
        off: Option<u64>,
    },
    /// The next record of [`Held`]'s queue of others.
    Other,
}

impl Item {
    /// Writes it, an execution or an instruction, of `class`, counted in `c` (the place of
    /// another record writes nothing: its record is [`Held`]'s).
    pub(super) fn write<S: Sink + ?Sized>(self, class: Class, out: &mut S, c: &mut Counts) -> io::Result<()> {
        match self {
            Item::Run(run) => {
                let run = Run { class, ..run };
                c.add_run(&run);
                out.run(&run)
            }
            Item::Insn { i, ip, branch, off } => {
                let r = Record::Insn {
                    i,
                    ip,
                    branch,
                    off,
                    class,
                };
                c.add(&r);
                out.record(&r)
            }
            Item::Other => Ok(()),
        }
    }
}

/// Items held back, in order (TR3).
#[derive(Debug, Default)]
pub(super) struct Held {
    /// A queue: [`Held::flush`] takes the first items without moving the others.
    items: VecDeque<Item>,
    /// The records of the [`Item::Other`]s, in order.
    others: VecDeque<Record>,
}

impl Held {
    /// How many items it holds.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds nothing.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Holds an execution or an instruction.
    #[inline]
    pub(super) fn push(&mut self, item: Item) {
        debug_assert!(!matches!(item, Item::Other));
        self.items.push_back(item);
    }

    /// Holds a record that is not an instruction.
    pub(super) fn push_record(&mut self, r: Record) {
        self.items.push_back(Item::Other);
        self.others.push_back(r);
    }

    /// The last held item that is the instruction (or the execution starting with the
    /// instruction) of index `i`.
    pub(super) fn find(&self, i: u64) -> Option<usize> {
        self.items
            .iter()
            .rposition(|x| matches!(*x, Item::Insn { i: k, .. } | Item::Run(Run { i: k, .. }) if k == i))
    }

    /// Holds record `r` before the item at `k`.
    pub(super) fn insert_record(&mut self, k: usize, r: Record) {
        let before = self.items.range(..k).filter(|x| matches!(x, Item::Other)).count();
        self.items.insert(k, Item::Other);
        self.others.insert(before, r);
    }

    /// Writes the first `n` items, instructions and executions required or optional.
    pub(super) fn flush<S: Sink + ?Sized>(
        &mut self,
        n: usize,
        optional: bool,
        out: &mut S,
        c: &mut Counts,
    ) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        let class = if optional {
            Class::Optional
        } else {
            Class::Required
        };
        for item in self.items.drain(..n) {
            if let Item::Other = item {
                let r = self
                    .others
                    .pop_front()
                    .ok_or_else(|| io::Error::other("a held record's place without its record"))?;
                c.add(&r);
                out.record(&r)?;
            } else {
                item.write(class, out, c)?;
            }
        }
        Ok(())
    }
}
