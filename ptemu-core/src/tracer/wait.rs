//! The facts the probe has, in order, some of them waiting for the TNT that will hold a pending
//! bit (spec/truth.md TR2, TR16). Every fact goes into one vector at its final place; the
//! instructions and executions waiting for bit `b` are one range of it (the bit is the probe's
//! chain from the first of them to the last, and a chain never comes back to a bit it left), so
//! the wait is a short queue of ranges, one per pending bit, and a TNT that goes out sets the
//! carrier of the ranges of its bits in place. Facts before the first range are finished; they
//! are taken from the front, which moves ahead, and the vector is compacted only once the part
//! taken is as long as the part left (a consumer that takes only some of the finished facts, as
//! `simulate`'s streamed truth does, does not move the others at each batch).

use super::probe::{Carrier, Fact};
use std::collections::VecDeque;

/// Facts taken from the probe ([`super::Probe::drain`]), in order.
pub type Drained<'a> = std::iter::Copied<std::slice::Iter<'a, Fact>>;

/// The facts waiting for pending bit `bit`: indices `first..=last` of [`Wait::facts`].
#[derive(Clone, Copy, Debug)]
struct Range {
    bit: u64,
    first: usize,
    last: usize,
}

/// Facts in order, the ones waiting for a TNT bit among them.
#[derive(Debug, Default)]
pub(super) struct Wait {
    facts: Vec<Fact>,
    /// The facts before it were taken.
    head: usize,
    /// The ranges of pending bits, in the order of their bits.
    ranges: VecDeque<Range>,
}

impl Wait {
    /// Adds `fact`, waiting for TNT bit `bit` (its carrier is set when that bit's TNT goes out
    /// or is lost, [`Wait::resolve`]) or finished (`None`: it goes out when the facts before
    /// it do). Bits come in increasing order.
    #[inline]
    pub(super) fn push(&mut self, fact: Fact, bit: Option<u64>) {
        let at = self.facts.len();
        self.facts.push(fact);
        if let Some(bit) = bit {
            match self.ranges.back_mut() {
                Some(r) if r.bit == bit => r.last = at,
                _ => {
                    debug_assert!(self.ranges.back().is_none_or(|r| r.bit < bit));
                    self.ranges.push_back(Range {
                        bit,
                        first: at,
                        last: at,
                    });
                }
            }
        }
    }

    /// Bits `from..to` are carried by `carrier` (a TNT, or lost): what waits for them is
    /// finished.
    #[inline]
    pub(super) fn resolve(&mut self, from: u64, to: u64, carrier: Carrier) {
        while let Some(r) = self.ranges.front() {
            if !(from..to).contains(&r.bit) {
                break;
            }
            for f in &mut self.facts[r.first..=r.last] {
                if let Fact::Insn { carrier: c, .. } | Fact::Exec { carrier: c, .. } = f {
                    *c = carrier;
                }
            }
            self.ranges.pop_front();
        }
    }

    /// Whether some fact waits for a bit.
    #[cfg(test)]
    fn waiting(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// The index past the finished facts.
    fn settled(&self) -> usize {
        self.ranges.front().map_or(self.facts.len(), |r| r.first)
    }

    /// Takes the finished facts, in order, as long as `take` holds for them.
    pub(super) fn drain_while(&mut self, mut take: impl FnMut(&Fact) -> bool) -> Drained<'_> {
        if self.head > 0 && self.head >= self.facts.len() - self.head {
            let n = self.head;
            self.facts.drain(..n);
            for r in &mut self.ranges {
                r.first -= n;
                r.last -= n;
            }
            self.head = 0;
        }
        let (from, settled) = (self.head, self.settled());
        let n = self.facts[from..settled]
            .iter()
            .position(|f| !take(f))
            .unwrap_or(settled - from);
        self.head += n;
        self.facts[from..from + n].iter().copied()
    }

    /// Takes the finished facts, in order.
    pub(super) fn drain(&mut self) -> Drained<'_> {
        self.drain_while(|_| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracer::probe::Loss;
    use proptest::prelude::*;

    /// The queue the probe had before TR16, as it was: facts after the first waiting one in a
    /// queue with their bits, every waiting fact looked at for each TNT.
    #[derive(Default)]
    struct Queue {
        ready: Vec<Fact>,
        waiting: VecDeque<(Fact, Option<u64>)>,
    }

    impl Queue {
        fn push(&mut self, fact: Fact, bit: Option<u64>) {
            if bit.is_none() && self.waiting.is_empty() {
                self.ready.push(fact);
            } else {
                self.waiting.push_back((fact, bit));
            }
        }

        fn resolve(&mut self, from: u64, to: u64, carrier: Carrier) {
            for (fact, bit) in self.waiting.iter_mut() {
                if let Some(b) = *bit {
                    if (from..to).contains(&b) {
                        if let Fact::Insn { carrier: c, .. } | Fact::Exec { carrier: c, .. } = fact {
                            *c = carrier;
                        }
                        *bit = None;
                    }
                }
            }
            while self.waiting.front().is_some_and(|(_, bit)| bit.is_none()) {
                let (f, _) = self.waiting.pop_front().expect("front exists");
                self.ready.push(f);
            }
        }
    }

    /// What the probe does: executions and instructions (waiting for the chain's bit when it
    /// is one, else carried already), other facts (PSB, a mark, an enable, a disable), bits
    /// added (the chain is the last), a packet that carries what follows (a TIP: the chain
    /// leaves its bit), TNTs that send some bits, and bits lost (OVF, a STOP, a disable), then
    /// drains.
    #[derive(Clone, Debug)]
    enum Op {
        Exec,
        Insn,
        Other,
        AddBit,
        Flow,
        Tnt {
            bits: u64,
        },
        Lost {
            overflow: bool,
        },
        Drain,
        /// A drain of the facts before the first with an offset of `at` or more.
        DrainBefore {
            at: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => Just(Op::Exec),
            2 => Just(Op::Insn),
            1 => Just(Op::Other),
            4 => Just(Op::AddBit),
            1 => Just(Op::Flow),
            2 => (1u64..8).prop_map(|bits| Op::Tnt { bits }),
            1 => any::<bool>().prop_map(|overflow| Op::Lost { overflow }),
            1 => Just(Op::Drain),
            1 => (0u64..600).prop_map(|at| Op::DrainBefore { at }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// TR2, TR16: the ranges give the same facts, with the same carriers, in the same
        /// order and at the same drains, as the queue of facts they replaced, whatever the
        /// order of TNTs, PSBs, marks, overflows and disables.
        #[test]
        fn tr2_tr16_the_ranges_give_what_the_queue_gave(ops in prop::collection::vec(op(), 0..300)) {
            let (mut wait, mut queue) = (Wait::default(), Queue::default());
            let (mut added, mut emitted, mut off) = (0u64, 0u64, 0u64);
            let mut n = 0u64;
            let (mut got, mut want) = (Vec::new(), Vec::new());
            // The probe's chain: the pending bit what comes next waits for, if any.
            let mut chain: Option<u64> = None;
            for op in ops {
                let carried = Carrier::Packet { start: off, end: off + 1 };
                let stand_in = Carrier::Lost(Loss::Stopped);
                match op {
                    Op::Exec | Op::Insn => {
                        let bit = chain;
                        let carrier = if bit.is_some() { stand_in } else { carried };
                        n += 1;
                        let fact = if matches!(op, Op::Exec) {
                            Fact::Exec { block: n as u32, next: n, exec: off, carrier }
                        } else {
                            Fact::Insn { ip: n, exec: off, carrier, branch: None }
                        };
                        wait.push(fact, bit);
                        queue.push(fact, bit);
                    }
                    Op::Other => {
                        wait.push(Fact::Psb { start: off }, None);
                        queue.push(Fact::Psb { start: off }, None);
                    }
                    Op::AddBit => {
                        chain = Some(added);
                        added += 1;
                    }
                    Op::Flow => chain = None,
                    Op::Tnt { bits } => {
                        let to = (emitted + bits).min(added);
                        off += 1;
                        let c = Carrier::Packet { start: off, end: off + 1 };
                        wait.resolve(emitted, to, c);
                        queue.resolve(emitted, to, c);
                        if chain.is_some_and(|b| b < to) {
                            chain = None;
                        }
                        emitted = to;
                    }
                    Op::Lost { overflow } => {
                        let why = if overflow { Loss::Overflow } else { Loss::Stopped };
                        wait.resolve(emitted, added, Carrier::Lost(why));
                        queue.resolve(emitted, added, Carrier::Lost(why));
                        chain = None;
                        emitted = added;
                    }
                    Op::Drain => {
                        got.extend(wait.drain());
                        want.append(&mut queue.ready);
                        prop_assert_eq!(&got, &want);
                    }
                    Op::DrainBefore { at } => {
                        let before = |f: &Fact| match *f {
                            Fact::Exec { exec, .. } | Fact::Insn { exec, .. } => exec < at,
                            Fact::Psb { start } => start < at,
                            _ => true,
                        };
                        got.extend(wait.drain_while(before));
                        let n = queue.ready.iter().position(|f| !before(f)).unwrap_or(queue.ready.len());
                        want.extend(queue.ready.drain(..n));
                        prop_assert_eq!(&got, &want);
                    }
                }
                off += 1;
                prop_assert_eq!(wait.waiting(), !queue.waiting.is_empty() && queue.waiting.iter().any(|w| w.1.is_some()));
            }
            wait.resolve(emitted, added, Carrier::Lost(Loss::Stopped));
            queue.resolve(emitted, added, Carrier::Lost(Loss::Stopped));
            got.extend(wait.drain());
            want.append(&mut queue.ready);
            prop_assert_eq!(got, want);
            prop_assert!(!wait.waiting());
        }
    }
}
