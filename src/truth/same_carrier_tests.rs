//! TR16: the classifier's step for an instruction or an execution of the last carrier
//! ([`Classifier::same_carrier`]) writes the bytes its general steps write, on random runs of
//! instructions and executions with marks, times, enables, disables, PSBs and overflows between
//! them, carriers lost to an overflow or a STOP, the stored bytes cut short, damage of every
//! consumer-side cause, and the stored count set late (as the streamed truth sets it).

use super::compact::Encoder;
use super::record::Sink;
use super::{Cause, Classifier, Context, Damage, Delivery};
use crate::packet::Packet;
use crate::tracer::{Block, BlockEnd, BranchFact, Carrier, Fact, Loss, Timing};
use proptest::prelude::*;

/// A step of the run.
#[derive(Clone, Debug)]
enum Op {
    /// The next facts are carried by a new packet of `len` bytes, `gap` bytes on.
    Packet { gap: u64, len: u64 },
    /// The next facts are carried by nothing (lost).
    Lost { overflow: bool },
    /// The next facts are carried by the carrier before the last (no tracer goes back to one,
    /// but the classifier does not count on it).
    Again,
    /// An execution of block `k`.
    Exec { k: usize, taken: bool },
    /// An instruction (a conditional branch when `cond`).
    Insn { cond: bool },
    /// A mark, a time, an enable, a disable, a PSB, an overflow: a packet of its own.
    Other { kind: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..4, 1u64..4).prop_map(|(gap, len)| Op::Packet { gap, len }),
        1 => any::<bool>().prop_map(|overflow| Op::Lost { overflow }),
        1 => Just(Op::Again),
        12 => (0usize..4, any::<bool>()).prop_map(|(k, taken)| Op::Exec { k, taken }),
        4 => any::<bool>().prop_map(|cond| Op::Insn { cond }),
        2 => (0u8..7).prop_map(|kind| Op::Other { kind }),
    ]
}

fn blocks() -> Vec<Block> {
    vec![
        Block::new(0x1000, &[2, 3], BlockEnd::Conditional { target: 0x2000 }).unwrap(),
        Block::new(0x2000, &[4], BlockEnd::Return).unwrap(),
        Block::new(0x1005, &[1, 1, 1], BlockEnd::Jump { target: 0x1000 }).unwrap(),
        Block::new(0x1000, &[2, 3, 1], BlockEnd::FallThrough).unwrap(),
    ]
}

/// The facts of `ops`, in order; the last byte of the stream they reach.
fn facts(ops: &[Op], blocks: &[Block]) -> (Vec<Fact>, u64) {
    let (mut at, mut carrier, mut exec, mut ip) = (0u64, Carrier::Lost(Loss::Stopped), 0u64, 0x1000u64);
    let mut before = carrier;
    let mut out = Vec::new();
    for op in ops {
        exec += 1;
        match *op {
            Op::Packet { gap, len } => {
                at += gap;
                before = carrier;
                carrier = Carrier::Packet {
                    start: at,
                    end: at + len,
                };
                at += len;
            }
            Op::Lost { overflow } => {
                before = carrier;
                carrier = Carrier::Lost(if overflow { Loss::Overflow } else { Loss::Stopped })
            }
            Op::Again => std::mem::swap(&mut carrier, &mut before),
            Op::Exec { k, taken } => {
                let b = &blocks[k];
                let next = match b.end() {
                    BlockEnd::Conditional { target } if taken => target,
                    BlockEnd::Jump { target } => target,
                    BlockEnd::Return => 0x1005,
                    _ => b.fall_through(),
                };
                out.push(Fact::Exec {
                    block: k as u32,
                    next,
                    exec,
                    carrier,
                });
                ip = next;
            }
            Op::Insn { cond } => {
                let branch = cond.then_some(BranchFact {
                    kind: "cond",
                    to: ip + 2,
                    taken: false,
                });
                out.push(Fact::Insn {
                    ip,
                    exec,
                    carrier,
                    branch,
                });
                ip += 2;
            }
            Op::Other { kind } => {
                let (start, end) = (at, at + 2);
                at += 2;
                out.push(match kind {
                    0 => Fact::Mark {
                        packet: Packet::TraceStop,
                        status: false,
                        ip: None,
                        start,
                        end,
                    },
                    1 => Fact::Mark {
                        packet: Packet::Exstop { ip: true },
                        status: false,
                        ip: Some(ip),
                        start,
                        end,
                    },
                    2 => Fact::Time {
                        tsc: exec * 100,
                        slack: 0,
                        kind: Timing::Tsc,
                        start,
                    },
                    3 => Fact::Enable { ip, start, end },
                    4 => Fact::Disable { start, end },
                    5 => Fact::Psb { start },
                    _ => Fact::Overflow { start, end },
                });
            }
        }
    }
    (out, at)
}

/// `truth.bin`'s records of `facts` classified as `ctx` says (the stored count set before the
/// fact at `late`, as the streamed truth sets it, when given), with or without
/// [`Classifier::same_carrier`].
fn bytes(
    facts: &[Fact],
    blocks: &[Block],
    ctx: &Context,
    late: Option<(usize, u64)>,
    general_only: bool,
) -> Vec<u8> {
    let mut out = Encoder::new(Vec::new());
    let mut c = Classifier::new(ctx);
    c.general_only = general_only;
    for (k, f) in facts.iter().enumerate() {
        if let Some((at, stored)) = late {
            if at == k {
                c.set_stored(stored);
            }
        }
        c.fact(*f, blocks, &mut out).unwrap();
    }
    c.finish(late.is_some(), &mut out).unwrap();
    out.finish().unwrap();
    out.into_inner()
}

const CAUSES: [Cause; 4] = [Cause::Wrap, Cause::Gap, Cause::Corrupt, Cause::CorruptSilent];

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// TR16 (TR3-TR7, TR11, TR13): the same bytes with and without the step for the last
    /// carrier's instructions and executions.
    #[test]
    fn tr16_the_last_carriers_step_writes_what_the_general_steps_write(
        ops in prop::collection::vec(op(), 0..200),
        cut in 0u64..=100,
        damage in prop::option::of((0usize..4, 0u64..100, 1u64..20)),
        late in prop::option::of(0usize..200),
    ) {
        let blocks = blocks();
        let (facts, len) = facts(&ops, &blocks);
        let stored = len * cut / 100;
        let psbs: Vec<u64> = facts.iter().filter_map(|f| match *f { Fact::Psb { start } => Some(start), _ => None }).collect();
        let damage: Vec<Damage> = damage
            .into_iter()
            .map(|(c, from, n)| Damage { cause: CAUSES[c], from: from * len / 100, to: from * len / 100 + n })
            .collect();
        // The streamed truth: no damage, every byte delivered, the stored count known late.
        let (ctx, late) = match late {
            Some(at) if damage.is_empty() => (
                Context {
                    stored: u64::MAX,
                    damage: Vec::new(),
                    delivery: Delivery::whole(u64::MAX),
                    psbs: psbs.clone(),
                    truncated: false,
                    run: serde_json::Value::Null,
                },
                Some((at.min(facts.len()), stored)),
            ),
            _ => (
                Context {
                    stored,
                    damage,
                    delivery: Delivery::whole(stored),
                    psbs,
                    truncated: stored < len,
                    run: serde_json::Value::Null,
                },
                None,
            ),
        };
        let fast = bytes(&facts, &blocks, &ctx, late, false);
        let general = bytes(&facts, &blocks, &ctx, late, true);
        prop_assert!(fast == general, "{} bytes against the general steps' {}", fast.len(), general.len());
    }
}
