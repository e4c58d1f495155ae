//! Blocks (spec/generation.md BLK1-BLK5): executions of blocks against the events they stand
//! for. Random blocks and executions, under random settings (CTL features on and off, IP
//! filters and TraceStop ranges, long TNT, the truth recorder, two CPUs), fed as blocks and as
//! their events one by one, must leave the same bytes in memory, the same registers,
//! statistics, PacketEn and clock. (The events one by one are the reference: the fast path
//! they may take is checked against the general one in ptemu-core's own tests.)

use proptest::prelude::*;
use ptemu::tracer::Fact;
use ptemu::tracer::{Block, BlockEnd, BlockError, BlockExec, ExecMode, TracerStats};
use ptemu::truth::{compact, spool, Cause, Context, Damage, Delivery};
use ptemu::MemError;
use ptemu::{CpuProfile, Event, OutputUnit, PhysMemory, RtitCtl, SparseMemory, Tracer, TracerConfig};

const BASE: u64 = 0x10_0000;
const RING: u64 = 64 << 10;

/// Code in a few 4 KiB pages near each other, and now and then far away (so that IP packets
/// take every size, and PSBs fall due on the one-step path too).
fn code_ip() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..4, 0u64..0x1000).prop_map(|(page, off)| 0x40_0000 + page * 0x1000 + off),
        1 => (0u64..1 << 36).prop_map(|a| 0x40_0000 + a),
    ]
}

/// A block; now and then its direct target is its own fall-through (a zero-length CALL, a Jcc
/// to the next instruction).
fn block() -> impl Strategy<Value = Block> {
    let kind = 0u8..7;
    (
        code_ip(),
        prop::collection::vec(1u8..16, 1..12),
        kind,
        code_ip(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(start, lens, kind, target, to_next)| {
            let next = start + lens.iter().map(|&l| u64::from(l)).sum::<u64>();
            let target = if to_next { next } else { target };
            let end = match kind {
                0 => BlockEnd::FallThrough,
                1 => BlockEnd::Conditional { target },
                2 => BlockEnd::Jump { target },
                3 => BlockEnd::Call { target },
                4 => BlockEnd::IndirectJump,
                5 => BlockEnd::IndirectCall,
                _ => BlockEnd::Return,
            };
            Block::new(start, &lens, end).unwrap()
        })
}

/// Blocks, and executions of them where most returns go back to their call; each execution's
/// `next` one its block can go to.
fn program() -> impl Strategy<Value = (Vec<Block>, Vec<BlockExec>)> {
    prop::collection::vec(block(), 1..24).prop_flat_map(|blocks| {
        let n = blocks.len();
        let raw = prop::collection::vec((0..n, any::<bool>(), code_ip(), 0u8..8), 0..3000);
        (Just(blocks), raw).prop_map(|(blocks, raw)| {
            let mut calls: Vec<u64> = Vec::new();
            let execs = raw
                .into_iter()
                .map(|(k, taken, anywhere, pick)| {
                    let b = &blocks[k];
                    let next = match b.end() {
                        BlockEnd::FallThrough => b.fall_through(),
                        BlockEnd::Conditional { target } => {
                            if taken {
                                target
                            } else {
                                b.fall_through()
                            }
                        }
                        BlockEnd::Jump { target } => target,
                        BlockEnd::Call { target } => {
                            calls.push(b.fall_through());
                            target
                        }
                        BlockEnd::IndirectCall => {
                            calls.push(b.fall_through());
                            anywhere
                        }
                        BlockEnd::Return if pick > 0 => calls.pop().unwrap_or(anywhere),
                        _ => anywhere,
                    };
                    BlockExec {
                        block: k as u32,
                        next,
                    }
                })
                .collect();
            (blocks, execs)
        })
    })
}

/// BLK5: blocks laid out one after another (now and then a gap, near or far), whose direct
/// targets are other blocks' starts (now and then somewhere else), and a walk through them:
/// each execution goes where its block can, mostly to a block's start, so that the executions
/// make long chains (each going on at the next one's start), with breaks where a successor is
/// no block's start.
fn walk() -> impl Strategy<Value = (Vec<Block>, Vec<BlockExec>)> {
    let shape = (
        prop::collection::vec(1u8..16, 1..12),
        0u8..7,
        prop_oneof![8 => Just(0u64), 1 => 1u64..64, 1 => 1u64..1 << 36],
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.1),
    );
    prop::collection::vec(shape, 1..24).prop_flat_map(|shapes| {
        let mut ip = 0x40_0000u64;
        let starts: Vec<u64> = shapes
            .iter()
            .map(|(lens, _, gap, _, _)| {
                let start = ip + gap;
                ip = start + lens.iter().map(|&l| u64::from(l)).sum::<u64>();
                start
            })
            .collect();
        let blocks: Vec<Block> = shapes
            .iter()
            .zip(&starts)
            .map(|((lens, kind, _, to, elsewhere), &start)| {
                let target = if *elsewhere {
                    0x40_0000 + to.index(1 << 20) as u64
                } else {
                    starts[to.index(starts.len())]
                };
                let end = match kind {
                    0 => BlockEnd::FallThrough,
                    1 => BlockEnd::Conditional { target },
                    2 => BlockEnd::Jump { target },
                    3 => BlockEnd::Call { target },
                    4 => BlockEnd::IndirectJump,
                    5 => BlockEnd::IndirectCall,
                    _ => BlockEnd::Return,
                };
                Block::new(start, lens, end).unwrap()
            })
            .collect();
        let n = blocks.len();
        let raw = prop::collection::vec((any::<bool>(), 0..n, 0u8..8), 0..3000);
        (Just(blocks), raw).prop_map(|(blocks, raw)| {
            let at = |ip: u64| blocks.iter().position(|b| b.start() == ip);
            let mut calls: Vec<u64> = Vec::new();
            let mut k = 0;
            let mut execs = Vec::with_capacity(raw.len());
            for (taken, anywhere, pick) in raw {
                let b = &blocks[k];
                let far = blocks[anywhere].start();
                let next = match b.end() {
                    BlockEnd::FallThrough => b.fall_through(),
                    BlockEnd::Conditional { target } if taken => target,
                    BlockEnd::Conditional { .. } => b.fall_through(),
                    BlockEnd::Jump { target } => target,
                    BlockEnd::Call { target } => {
                        calls.push(b.fall_through());
                        target
                    }
                    BlockEnd::IndirectCall => {
                        calls.push(b.fall_through());
                        far
                    }
                    BlockEnd::Return if pick > 0 => calls.pop().unwrap_or(far),
                    _ => far,
                };
                execs.push(BlockExec {
                    block: k as u32,
                    next,
                });
                // Where no block starts there, the walk goes on elsewhere: a break in the chain.
                k = at(next).unwrap_or(anywhere);
            }
            (blocks, execs)
        })
    })
}

fn ctl() -> impl Strategy<Value = (RtitCtl, Option<(u64, u64)>)> {
    // The features that keep the one-step path out are each on in a fifth of the cases, so
    // that both it and the per-instruction path are exercised.
    let (even, rare) = (|| prop::bool::weighted(0.5), || prop::bool::weighted(0.2));
    (
        [even(), even(), rare(), rare(), rare(), rare(), even(), even()],
        0u8..4,
        prop::option::weighted(0.2, (0u64..0x4000, 0u64..0x2000)),
    )
        .prop_map(|(f, psb, range)| {
            let mut c = user_branches()
                .with_tsc_en(f[0])
                .with_dis_retc(f[1])
                .with_mtc_en(f[2])
                .with_cyc_en(f[3])
                .with_dis_tnt(f[4] && f[5])
                .with_psb_freq(psb);
            let range = range.map(|(a, n)| (0x40_0000 + a, 0x40_0000 + a + n));
            if range.is_some() {
                c = c.with_addr0_cfg(if f[6] { 1 } else { 2 });
            }
            (c, range)
        })
}

#[derive(Clone, Copy, PartialEq)]
enum Feed {
    /// Each execution's events, one `event` call each: the reference.
    Events,
    /// `feed_blocks` over chunks of up to 13 executions.
    Blocks,
    /// `feed_chain` over the chains in chunks of up to 13 executions (BLK5).
    Chain,
}

type Seen = (
    Vec<u8>,
    Vec<u64>,
    TracerStats,
    bool,
    u64,
    Vec<ptemu::OutputEvent>,
    Vec<ptemu::tracer::Fact>,
    String,
);

/// Whether `got` leaves what `reference` leaves: the MSRs, statistics, PacketEn, core cycles,
/// the output unit's events (PMIs), the truth's facts and lines, and the trace bytes.
fn same_as(got: &Seen, reference: &Seen) -> Result<(), TestCaseError> {
    prop_assert_eq!(&got.1, &reference.1, "MSRs");
    prop_assert_eq!(&got.2, &reference.2, "statistics");
    prop_assert_eq!(got.3, reference.3, "PacketEn");
    prop_assert_eq!(got.4, reference.4, "core cycles");
    prop_assert_eq!(&got.5, &reference.5, "the output unit's events (PMIs)");
    prop_assert!(got.6 == reference.6, "the truth differs");
    prop_assert!(got.7 == reference.7, "truth.jsonl differs");
    prop_assert!(got.0 == reference.0, "the trace bytes differ");
    Ok(())
}

/// Feeds `p` as `feed` says on CPU `cpu` (`skylake` lays packets out as the hardware does;
/// `generic-max` has every feature, DisTNT among them).
fn run(
    feed: Feed,
    cpu: &str,
    (long_tnt, truth, flush_bytes): (bool, bool, usize),
    ctl: RtitCtl,
    range: Option<(u64, u64)>,
    p: &(Vec<Block>, Vec<BlockExec>),
) -> Seen {
    let (blocks, execs) = p;
    let mut mem = SparseMemory::new();
    let mut cfg = TracerConfig::default();
    cfg.long_tnt = long_tnt;
    cfg.flush_bytes = flush_bytes;
    let mut t = tracing(&mut mem, cpu, cfg, ctl, range, 0x40_0000);
    // The truth recorder from the enable's packets on: the enable itself is not an execution.
    if truth {
        t.record_truth();
    }
    // Both feed the executions in chunks of 13 with a flush after each (a flush can leave a
    // PSB+ due for what comes next), then the same tail of events, whose packets show the
    // IP and the return stack the executions left.
    let mut evs = Vec::new();
    for chunk in execs.chunks(13) {
        match feed {
            Feed::Events => {
                for x in chunk {
                    evs.clear();
                    blocks[x.block as usize].events_into(x.next, &mut evs);
                    for e in &evs {
                        t.event(&mut mem, e).unwrap();
                    }
                }
            }
            Feed::Blocks => t.feed_blocks(&mut mem, blocks, chunk).unwrap(),
            Feed::Chain => {
                let mut rest = chunk;
                while !rest.is_empty() {
                    // The longest chain: each execution going on at the next one's start.
                    let len = 1 + rest
                        .windows(2)
                        .take_while(|w| w[0].next == blocks[w[1].block as usize].start())
                        .count();
                    let ids: Vec<u32> = rest[..len].iter().map(|x| x.block).collect();
                    t.feed_chain(&mut mem, blocks, &ids, rest[len - 1].next).unwrap();
                    rest = &rest[len..];
                }
            }
        }
        t.flush(&mut mem).unwrap();
    }
    let tail = [
        Event::Return {
            ip: 0x40_3000,
            target: 0x40_3100,
        },
        Event::Return {
            ip: 0x40_3100,
            target: 0x40_3200,
        },
        Event::IndirectJump {
            ip: 0x40_3200,
            target: 0x40_0000,
        },
    ];
    t.events(&mut mem, &tail).unwrap();
    t.wrmsr(&mut mem, 0x570, 0, 0x40_0100, 2).unwrap();
    let mut bytes = vec![0u8; RING as usize];
    mem.read(BASE, &mut bytes).unwrap();
    let msrs = [0x560, 0x561, 0x570, 0x571]
        .iter()
        .map(|&m| t.rdmsr(m).unwrap())
        .collect();
    // TR14: the facts as the probe gives them (an execution on the one-step path is one),
    // spooled and classified as `simulate` does; and expanded into instructions.
    let (facts, json) = match t.probe_mut() {
        Some(p) => {
            p.finish();
            let raw: Vec<Fact> = p.drain().collect();
            let mut spool = spool::Writer::new(Vec::new());
            spool.blocks(p.blocks()).unwrap();
            let mut facts = Vec::new();
            let mut psbs = Vec::new();
            for f in &raw {
                spool.write(f).unwrap();
                f.expand(p.blocks(), |i| facts.push(i));
                if let Fact::Psb { start } = f {
                    psbs.push(*start);
                }
            }
            let spool = spool.finish().unwrap();
            let stored = t.stats().bytes;
            // Damage to the stream somewhere (from the executions' packets themselves), so that
            // runs are lost, undefined and optional too (TR3-TR7).
            let damage = match (stored, t.stats().instructions as usize) {
                (0..=8, _) | (_, 0) => Vec::new(),
                (n, k) => {
                    let from = (n * (k as u64 % 7 + 1)) / 9;
                    let cause = Cause::ALL[k % Cause::ALL.len()];
                    vec![Damage {
                        cause,
                        from,
                        to: (from + 3).min(n),
                    }]
                }
            };
            let ctx = Context {
                stored,
                damage,
                delivery: Delivery::whole(stored),
                psbs,
                truncated: false,
                run: serde_json::json!({}),
            };
            let mut out = Vec::new();
            ptemu::truth::write(&spool[..], &ctx, &mut out).unwrap();
            // TR15: `truth.bin` (runs where the executions were one step each), dumped, is
            // `truth.jsonl` byte for byte.
            let mut bin = Vec::new();
            ptemu::truth::write_compact(&spool[..], &ctx, &mut bin).unwrap();
            let bin = compact::Bytes::Owned(bin);
            let checked = bin.check().unwrap();
            let mut dumped = Vec::new();
            ptemu::truth::json::from_compact(&bin, &checked, &mut dumped).unwrap();
            assert!(dumped == out, "TR15: truth.bin dumped is not truth.jsonl");
            (facts, String::from_utf8(out).unwrap())
        }
        None => (Vec::new(), String::new()),
    };
    let pmis = t.drain_output_events().collect();
    (
        bytes,
        msrs,
        t.stats(),
        t.packet_en(),
        t.clock().cycles(),
        pmis,
        facts,
        json,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// BLK3: the block path leaves what the per-instruction path leaves.
    #[test]
    fn blk3_blk4_blocks_leave_what_their_events_leave(
        (ctl, range) in ctl(),
        long_tnt in any::<bool>(),
        flush_bytes in prop_oneof![Just(1usize), Just(64), Just(256), Just(1024)],
        truth in prop::bool::weighted(0.1),
        skylake in any::<bool>(),
        p in program(),
    ) {
        let (cpu, ctl) = if skylake { ("skylake", ctl.with_dis_tnt(false)) } else { ("generic-max", ctl) };
        let reference = run(Feed::Events, cpu, (long_tnt, truth, flush_bytes), ctl, range, &p);
        let blocks = run(Feed::Blocks, cpu, (long_tnt, truth, flush_bytes), ctl, range, &p);
        same_as(&blocks, &reference)?;
    }

    /// TR14, BLK3: with the truth on, executions on the one-step path are one fact each, and
    /// they stand for exactly the instruction facts the events give: spooled and classified,
    /// the same `truth.jsonl` line for line (settings as above: packing, PSBFreq, long TNT,
    /// hand-off sizes, IP filters and TraceStop, MTC, CYC, DisTNT, RET compression).
    #[test]
    fn tr14_blk3_the_truth_of_blocks_is_the_truth_of_their_events(
        (ctl, range) in ctl(),
        long_tnt in any::<bool>(),
        flush_bytes in prop_oneof![Just(1usize), Just(64), Just(256), Just(1024)],
        skylake in any::<bool>(),
        p in program(),
    ) {
        let (cpu, ctl) = if skylake { ("skylake", ctl.with_dis_tnt(false)) } else { ("generic-max", ctl) };
        let reference = run(Feed::Events, cpu, (long_tnt, true, flush_bytes), ctl, range, &p);
        let blocks = run(Feed::Blocks, cpu, (long_tnt, true, flush_bytes), ctl, range, &p);
        prop_assert!(blocks.0 == reference.0, "the trace bytes differ");
        prop_assert_eq!(&blocks.6, &reference.6, "the facts differ");
        prop_assert_eq!(&blocks.7, &reference.7, "truth.jsonl differs");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// BLK5: executions fed as chains leave what the same executions leave fed one by one as
    /// their events (the reference) and as block executions, under the same random settings.
    #[test]
    fn blk5_a_chain_leaves_what_its_executions_leave(
        (ctl, range) in ctl(),
        long_tnt in any::<bool>(),
        flush_bytes in prop_oneof![Just(1usize), Just(64), Just(256), Just(1024)],
        truth in prop::bool::weighted(0.1),
        skylake in any::<bool>(),
        p in walk(),
    ) {
        let (cpu, ctl) = if skylake { ("skylake", ctl.with_dis_tnt(false)) } else { ("generic-max", ctl) };
        let reference = run(Feed::Events, cpu, (long_tnt, truth, flush_bytes), ctl, range, &p);
        let chain = run(Feed::Chain, cpu, (long_tnt, truth, flush_bytes), ctl, range, &p);
        same_as(&chain, &reference)?;
        let blocks = run(Feed::Blocks, cpu, (long_tnt, truth, flush_bytes), ctl, range, &p);
        prop_assert!(chain.0 == blocks.0, "the trace bytes differ from feed_blocks'");
    }
}

/// BLK5, BLK2: a chain naming a block not given is refused before anything is traced, with
/// the index of the first such id; an execution that goes where its block cannot (its
/// successor the next one's start, or the chain's `next` for the last) is refused with its
/// index, the executions before it traced; with a setting that keeps the one-step path out
/// (a TraceStop range far away) as with one that lets it in.
#[test]
fn blk5_a_chain_refuses_what_feed_blocks_refuses() {
    for range in [false, true] {
        let mut mem = SparseMemory::new();
        let (ctl, stop) = if range {
            (user_branches().with_addr0_cfg(2), Some((0x90_0000, 0x90_0fff)))
        } else {
            (user_branches(), None)
        };
        let mut t = tracing(&mut mem, "skylake", TracerConfig::default(), ctl, stop, 0x40_0000);
        let blocks = [
            Block::new(0x40_0000, &[2, 2], BlockEnd::Jump { target: 0x40_0100 }).unwrap(),
            Block::new(0x40_0100, &[1], BlockEnd::Conditional { target: 0x40_0000 }).unwrap(),
        ];
        let e = t
            .feed_chain(&mut mem, &blocks, &[0, 1, 2, 0], 0x40_0100)
            .unwrap_err();
        assert_eq!(
            e,
            BlockError::Unknown {
                index: 2,
                block: 2,
                blocks: 2
            }
        );
        assert_eq!(t.stats().instructions, 0, "nothing traced");
        // 0 -> 1 -> 0 -> 1, then block 1 to 0x40_0200, which it cannot reach.
        let e = t
            .feed_chain(&mut mem, &blocks, &[0, 1, 0, 1], 0x40_0200)
            .unwrap_err();
        assert!(
            matches!(
                e,
                BlockError::Successor {
                    index: 3,
                    next: 0x40_0200,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            t.stats().instructions,
            2 + 1 + 2,
            "the executions before it traced"
        );
        // Block 1 taken to block 0, then block 0 going on at block 0's start: its JMP goes
        // elsewhere.
        let e = t
            .feed_chain(&mut mem, &blocks, &[1, 0, 0], 0x40_0100)
            .unwrap_err();
        assert!(
            matches!(
                e,
                BlockError::Successor {
                    index: 1,
                    next: 0x40_0000,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(t.stats().instructions, 5 + 1);
        // Block 1 going on at its own start: neither its target nor its fall-through.
        let e = t
            .feed_chain(&mut mem, &blocks, &[0, 1, 1], 0x40_0101)
            .unwrap_err();
        assert!(matches!(e, BlockError::Successor { index: 1, .. }), "{e}");
        assert_eq!(t.stats().instructions, 6 + 2);
        t.feed_chain(&mut mem, &blocks, &[0, 1], 0x40_0101).unwrap();
        assert_eq!(t.stats().instructions, 8 + 3);
    }
}

/// TR14, BLK4: with the truth on, an execution the one-step path takes is one fact, naming its
/// block by its place in the probe's table (each block recorded once, the first time it runs),
/// however many instructions it has: no instruction fact at all under the one-step settings.
#[test]
fn tr14_an_execution_on_the_one_step_path_is_one_fact() {
    let mut mem = SparseMemory::new();
    let mut t = tracing_user(&mut mem, "skylake", 1024);
    t.record_truth();
    let blocks = vec![
        Block::new(0x40_0000, &[2, 3, 4], BlockEnd::Conditional { target: 0x40_0000 }).unwrap(),
        Block::new(0x40_0009, &[5], BlockEnd::IndirectJump).unwrap(),
    ];
    let mut execs = Vec::new();
    for i in 0..1000u64 {
        execs.push(BlockExec {
            block: 0,
            next: if i % 3 == 0 { 0x40_0009 } else { 0x40_0000 },
        });
        if i % 3 == 0 {
            execs.push(BlockExec {
                block: 1,
                next: 0x40_0000,
            });
        }
    }
    t.feed_blocks(&mut mem, &blocks, &execs).unwrap();
    let p = t.probe_mut().unwrap();
    p.finish();
    let facts: Vec<Fact> = p.drain().collect();
    let runs = facts.iter().filter(|f| matches!(f, Fact::Exec { .. })).count();
    let insns = facts.iter().filter(|f| matches!(f, Fact::Insn { .. })).count();
    assert_eq!((runs, insns), (execs.len(), 0));
    assert_eq!(
        p.blocks(),
        &blocks[..],
        "each block recorded once, in the order first run"
    );
    let mut expanded = 0;
    for f in &facts {
        f.expand(p.blocks(), |i| {
            expanded += matches!(i, Fact::Insn { .. }) as usize
        });
    }
    assert_eq!(expanded as u64, t.stats().instructions);
}

/// BLK1: a block's events: a retirement of each instruction but the last, then the last one's
/// branch toward where the execution went.
#[test]
fn blk1_a_block_stands_for_its_instructions() {
    let b = Block::new(0x1000, &[3, 2, 6], BlockEnd::Conditional { target: 0x2000 }).unwrap();
    assert_eq!(
        (b.last_ip(), b.fall_through(), b.instructions()),
        (0x1005, 0x100b, 3)
    );
    let mut evs = Vec::new();
    b.events_into(0x2000, &mut evs);
    assert_eq!(
        evs,
        [
            Event::Retire { ip: 0x1000, len: 3 },
            Event::Retire { ip: 0x1003, len: 2 },
            Event::CondBranch {
                ip: 0x1005,
                len: 6,
                target: 0x2000,
                taken: true
            },
        ]
    );
    evs.clear();
    b.events_into(0x100b, &mut evs);
    assert!(matches!(evs[2], Event::CondBranch { taken: false, .. }));
    assert_eq!(
        Block::new(0, &[], BlockEnd::Return),
        Err(BlockError::Empty { start: 0 })
    );
    assert_eq!(
        Block::new(0, &[1, 16], BlockEnd::Return),
        Err(BlockError::Length {
            start: 0,
            index: 1,
            len: 16
        })
    );
}

/// BLK2: an execution that names a block not given, or goes where its block cannot, is an
/// error naming its index, the executions before it traced and none after; with a tracing
/// setting that keeps the one-step path out (a TraceStop range far away) as with one that
/// lets it in.
#[test]
fn blk2_an_execution_its_block_cannot_make_is_refused_with_its_index() {
    for range in [false, true] {
        let mut mem = SparseMemory::new();
        let (ctl, stop) = if range {
            (user_branches().with_addr0_cfg(2), Some((0x90_0000, 0x90_0fff)))
        } else {
            (user_branches(), None)
        };
        let mut t = tracing(&mut mem, "skylake", TracerConfig::default(), ctl, stop, 0x40_0000);
        let blocks = [
            Block::new(0x40_0000, &[2, 2], BlockEnd::Jump { target: 0x40_0100 }).unwrap(),
            Block::new(0x40_0100, &[1], BlockEnd::FallThrough).unwrap(),
        ];
        let ok = BlockExec {
            block: 0,
            next: 0x40_0100,
        };
        let unknown = BlockExec { block: 2, next: 0 };
        let e = t.feed_blocks(&mut mem, &blocks, &[ok, unknown, ok]).unwrap_err();
        assert_eq!(
            e,
            BlockError::Unknown {
                index: 1,
                block: 2,
                blocks: 2
            }
        );
        assert_eq!(
            t.stats().instructions,
            2,
            "the execution before it is traced, none after"
        );
        let wrong = BlockExec {
            block: 1,
            next: 0x40_0200,
        };
        let e = t.feed_blocks(&mut mem, &blocks, &[ok, wrong]).unwrap_err();
        assert!(
            matches!(
                e,
                BlockError::Successor {
                    index: 1,
                    next: 0x40_0200,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(t.stats().instructions, 4);
        let right = BlockExec {
            block: 1,
            next: 0x40_0101,
        };
        t.feed_blocks(&mut mem, &blocks, &[ok, right]).unwrap();
        assert_eq!(t.stats().instructions, 7);
    }
}

/// BranchEn and User: what every test here traces with, and more with `with_*`.
fn user_branches() -> RtitCtl {
    RtitCtl::new()
        .with_trace_en(true)
        .with_branch_en(true)
        .with_user(true)
}

/// A tracer on `cpu` with `cfg`, tracing into the single-range ring with `ctl` (ADDR0 =
/// `range` when given), enabled by a WRMSR at `ip`.
fn tracing<M: PhysMemory>(
    mem: &mut M,
    cpu: &str,
    cfg: TracerConfig,
    ctl: RtitCtl,
    range: Option<(u64, u64)>,
    ip: u64,
) -> Tracer {
    let mut t = Tracer::new(OutputUnit::new(CpuProfile::named(cpu).unwrap()), cfg);
    t.set_state(0x40_0000, 3, 0x1000, ExecMode::Bits64);
    t.wrmsr(mem, 0x560, BASE, 0, 0).unwrap();
    t.wrmsr(mem, 0x561, RING - 1, 0, 0).unwrap();
    if let Some((a, b)) = range {
        t.wrmsr(mem, 0x580, a, 0, 0).unwrap();
        t.wrmsr(mem, 0x581, b, 0, 0).unwrap();
    }
    t.wrmsr(mem, 0x570, ctl.bits(), ip, 2).unwrap();
    t
}

/// [`tracing`] with BranchEn and User and hand-offs of `flush_bytes`.
fn tracing_user(mem: &mut SparseMemory, cpu: &str, flush_bytes: usize) -> Tracer {
    let mut cfg = TracerConfig::default();
    cfg.flush_bytes = flush_bytes;
    tracing(mem, cpu, cfg, user_branches(), None, 0x40_0000)
}

/// Disables tracing: the ring's bytes and the statistics.
fn finish(mut t: Tracer, mut mem: SparseMemory) -> (Vec<u8>, TracerStats) {
    t.wrmsr(&mut mem, 0x570, 0, 0x40_0100, 2).unwrap();
    let mut bytes = vec![0u8; RING as usize];
    mem.read(BASE, &mut bytes).unwrap();
    (bytes, t.stats())
}

/// BLK3, PSB2: a PSB+ already due when a feed begins (a `flush` sent a TNT that crossed the
/// PSB distance) goes out where the events put it, after the next instruction, not after the
/// next block (found in review: 3 of 1,500 prefixes differed).
#[test]
fn blk3_psb2_a_psb_due_when_a_feed_begins_goes_where_the_events_put_it() {
    let blocks = vec![
        Block::new(0x40_0000, &[2, 3], BlockEnd::Conditional { target: 0x40_0000 }).unwrap(),
        Block::new(0x40_1000, &[4], BlockEnd::IndirectJump).unwrap(),
        Block::new(0x40_2000, &[1, 1, 1, 1], BlockEnd::Jump { target: 0x40_3000 }).unwrap(),
    ];
    // A prefix: conditionals and indirect jumps to far-apart targets (TIP bytes).
    let mut prefix = Vec::new();
    for i in 0..3000u64 {
        if i % 4 == 3 {
            prefix.push(BlockExec {
                block: 1,
                next: 0x40_0000 + ((i * 0x1_2345) & 0xff_ffff),
            });
        } else {
            prefix.push(BlockExec {
                block: 0,
                next: if i % 3 == 0 { 0x40_0000 } else { 0x40_0005 },
            });
        }
    }
    let probe = [BlockExec {
        block: 2,
        next: 0x40_3000,
    }];
    let mut found = 0;
    for k in 1500..prefix.len() {
        let mut evs = Vec::new();
        let mut m1 = SparseMemory::new();
        let mut a = tracing_user(&mut m1, "generic-max", 1024);
        a.feed_blocks(&mut m1, &blocks, &prefix[..k]).unwrap();
        a.flush(&mut m1).unwrap();
        a.feed_blocks(&mut m1, &blocks, &probe).unwrap();
        let mut m2 = SparseMemory::new();
        let mut b = tracing_user(&mut m2, "generic-max", 1024);
        b.feed_blocks(&mut m2, &blocks, &prefix[..k]).unwrap();
        b.flush(&mut m2).unwrap();
        blocks[2].events_into(0x40_3000, &mut evs);
        b.events(&mut m2, &evs).unwrap();
        let (ra, rb) = (finish(a, m1), finish(b, m2));
        if ra != rb {
            found += 1;
        }
    }
    assert_eq!(found, 0, "prefixes whose block path differs from the events path");
}

/// A memory that refuses every store once `refuse` is set.
struct Refusing {
    mem: SparseMemory,
    refuse: bool,
}
impl PhysMemory for Refusing {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        if self.refuse {
            return Err(MemError::Unmapped { pa, len: data.len() });
        }
        self.mem.write(pa, data)
    }
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.mem.read(pa, buf)
    }
}

/// BLK3: a store that fails inside a block on the per-instruction path (an IP filter keeps the
/// one-step path out) loses its bytes, and the execution is still fed whole: `fed` executions
/// are that many blocks' instructions (found in review: 1 of 4 was traced).
#[test]
fn blk3_a_store_that_fails_inside_a_block_still_feeds_the_execution_whole() {
    let mut cfg = TracerConfig::default();
    cfg.flush_bytes = 1;
    let mut mem = Refusing {
        mem: SparseMemory::new(),
        refuse: false,
    };
    // IP filter: ADDR0 = [0x40_0000, 0x40_0001]: the block's second instruction leaves it.
    let filter = Some((0x40_0000, 0x40_0001));
    let ctl = user_branches().with_addr0_cfg(1);
    let mut t = tracing(&mut mem, "generic-max", cfg, ctl, filter, 0x3f_fffe);
    let blocks = [Block::new(0x40_0000, &[2, 2, 2, 2], BlockEnd::Jump { target: 0x40_0000 }).unwrap()];
    let before = t.stats().instructions;
    mem.refuse = true;
    let e = t
        .feed_blocks(
            &mut mem,
            &blocks,
            &[BlockExec {
                block: 0,
                next: 0x40_0000,
            }; 3],
        )
        .unwrap_err();
    let fed = match e {
        BlockError::Memory { fed, .. } => fed,
        e => panic!("{e}"),
    };
    let traced = t.stats().instructions - before;
    assert_eq!(traced, fed as u64 * 4, "`fed` executions were fed whole");
}
