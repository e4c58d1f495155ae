//! The fast path against the general one: the same event streams, under random settings, through
//! a tracer with the fast path and one without, must leave the same bytes in memory, the same
//! registers, statistics and PacketEn; and, with the truth recorder on, the same facts (TR16).

use super::*;
use crate::memory::SparseMemory;
use crate::packet::PtwSize;
use crate::regs::CpuProfile;
use proptest::prelude::*;

const BASE: u64 = 0x10_0000;
const RING: u64 = 16 << 10;

/// Code in a few 4 KiB pages, so returns match calls and filter ranges cut through it.
fn code_ip() -> impl Strategy<Value = u64> {
    (0u64..4, 0u64..0x1000).prop_map(|(page, off)| 0x40_0000 + page * 0x1000 + off)
}

fn event() -> impl Strategy<Value = Event> {
    let common = prop_oneof![
        (code_ip(), 1u8..16).prop_map(|(ip, len)| Event::Retire { ip, len }),
        (code_ip(), 1u8..7, code_ip(), any::<bool>()).prop_map(|(ip, len, target, taken)| {
            Event::CondBranch {
                ip,
                len,
                target,
                taken,
            }
        }),
        (code_ip(), code_ip()).prop_map(|(ip, target)| Event::Jump { ip, target }),
        (code_ip(), prop_oneof![Just(0u8), 2u8..8], code_ip()).prop_map(|(ip, len, target)| Event::Call {
            ip,
            len,
            target
        }),
        (code_ip(), code_ip()).prop_map(|(ip, target)| Event::IndirectJump { ip, target }),
        (code_ip(), 2u8..8, code_ip()).prop_map(|(ip, len, target)| Event::IndirectCall { ip, len, target }),
        (code_ip(), code_ip()).prop_map(|(ip, target)| Event::Return { ip, target }),
    ];
    let rare = prop_oneof![
        (code_ip(), code_ip(), 0u8..4, any::<bool>()).prop_map(|(from, to, cpl, cr3)| {
            Event::Far {
                kind: FarKind::Interrupt { vector: 0x20 },
                from,
                to,
                cpl: if cpl == 0 { 0 } else { 3 },
                mode: ExecMode::Bits64,
                cr3: cr3.then_some(0x2000),
            }
        }),
        (code_ip(), 1u8..4, prop_oneof![Just(0x1000u64), Just(0x2000)])
            .prop_map(|(ip, len, cr3)| Event::Cr3Write { ip, len, cr3 }),
        (code_ip(), 1u8..4, any::<bool>()).prop_map(|(ip, len, value)| Event::SetIf { ip, len, value }),
        (code_ip(), any::<u64>()).prop_map(|(ip, payload)| Event::Ptwrite {
            ip,
            len: 5,
            payload,
            size: PtwSize::Eight,
        }),
        (0u64..5000).prop_map(Event::Cycles),
    ];
    prop_oneof![30 => common, 1 => rare]
}

/// Events where most returns go back to their call (so RET compression is exercised, and call
/// depths pass 64 now and then), the rest as [`event`] makes them.
fn stream() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((event(), 0u8..8), 0..3000).prop_map(|raw| {
        let mut calls: Vec<u64> = Vec::new();
        raw.into_iter()
            .map(|(e, pick)| match e {
                Event::Call { ip, len, .. } | Event::IndirectCall { ip, len, .. } if len > 0 => {
                    calls.push(ip + u64::from(len));
                    e
                }
                Event::Return { ip, .. } if pick > 0 => Event::Return {
                    ip,
                    target: calls.pop().unwrap_or(ip),
                },
                e => e,
            })
            .collect()
    })
}

/// CTL settings: which features are on (some keep the fast path out, some not).
fn ctl() -> impl Strategy<Value = (RtitCtl, Option<(u64, u64)>)> {
    (
        any::<[bool; 10]>(),
        0u8..4,
        prop::option::of((0u64..0x2000, 0u64..0x2000)),
    )
        .prop_map(|(f, psb, range)| {
            let mut c = RtitCtl::new()
                .with_trace_en(true)
                .with_branch_en(true)
                .with_user(true)
                .with_os(f[0])
                .with_tsc_en(f[1])
                .with_dis_retc(f[2])
                .with_mtc_en(f[3])
                .with_cyc_en(f[4])
                .with_dis_tnt(f[5] && f[6])
                .with_cr3_filter(f[7])
                .with_ptw_en(f[8])
                .with_fup_on_ptw(f[9])
                .with_psb_freq(psb);
            let range = range.map(|(a, n)| (0x40_0000 + a, 0x40_0000 + a + n));
            if let Some(cfg) = range.map(|_| if f[6] { 1 } else { 2 }) {
                c = c.with_addr0_cfg(cfg);
            }
            (c, range)
        })
}

/// How `run` hands the events to the tracer.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// One `event` call each, fast path off.
    General,
    /// One `event` call each.
    OneByOne,
    /// `events` calls over chunks of up to 7 events (runs that start and end anywhere).
    Batches,
}

/// What a run leaves: the trace bytes, the MSRs, statistics, PacketEn, the core clock and the
/// truth's facts (with the recorder on).
type Left = (Vec<u8>, Vec<u64>, TracerStats, bool, u64, Vec<Fact>);

/// Runs `events` in `mode`; the state a decoder and a user can see, the core clock (seen in the
/// trace only through a TSC after the cycles passed), and with `truth` the recorder's facts.
fn run(
    mode: Mode,
    (long_tnt, truth): (bool, bool),
    ctl: RtitCtl,
    range: Option<(u64, u64)>,
    events: &[Event],
) -> Left {
    let mut mem = SparseMemory::new();
    let unit = OutputUnit::new(CpuProfile::named("generic-max").unwrap());
    let mut t = Tracer::new(
        unit,
        TracerConfig {
            long_tnt,
            flush_bytes: 256,
            ..TracerConfig::default()
        },
    );
    t.fast_path = mode != Mode::General;
    t.set_state(0x40_0000, 3, 0x1000, ExecMode::Bits64);
    t.wrmsr(&mut mem, 0x560, BASE, 0, 0).unwrap();
    t.wrmsr(&mut mem, 0x561, RING - 1, 0, 0).unwrap();
    t.wrmsr(&mut mem, 0x572, 0x1000, 0, 0).unwrap();
    if let Some((a, b)) = range {
        t.wrmsr(&mut mem, 0x580, a, 0, 0).unwrap();
        t.wrmsr(&mut mem, 0x581, b, 0, 0).unwrap();
    }
    if truth {
        t.record_truth();
    }
    t.wrmsr(&mut mem, 0x570, ctl.bits(), 0x40_0000, 2).unwrap();
    if mode == Mode::Batches {
        for chunk in events.chunks(7) {
            t.events(&mut mem, chunk).unwrap();
        }
    } else {
        for e in events {
            t.event(&mut mem, e).unwrap();
        }
    }
    t.wrmsr(&mut mem, 0x570, 0, 0x40_0100, 2).unwrap();
    let mut bytes = vec![0u8; RING as usize];
    mem.read(BASE, &mut bytes).unwrap();
    let msrs = [0x560, 0x561, 0x570, 0x571]
        .iter()
        .map(|&m| t.rdmsr(m).unwrap())
        .collect();
    let facts = match t.probe_mut() {
        Some(p) => {
            p.finish();
            p.drain().collect()
        }
        None => Vec::new(),
    };
    (bytes, msrs, t.stats(), t.packet_en(), t.clock().cycles(), facts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The fast path leaves what the general path leaves; with the truth recorder on (TR16),
    /// the same facts too.
    #[test]
    fn the_fast_path_one_by_one_and_in_batches_leaves_what_the_general_path_leaves(
        (ctl, range) in ctl(),
        long_tnt in any::<bool>(),
        truth in any::<bool>(),
        events in stream(),
    ) {
        let general = run(Mode::General, (long_tnt, truth), ctl, range, &events);
        for mode in [Mode::OneByOne, Mode::Batches] {
            let fast = run(mode, (long_tnt, truth), ctl, range, &events);
            prop_assert_eq!(&fast.1, &general.1, "MSRs");
            prop_assert_eq!(&fast.2, &general.2, "statistics");
            prop_assert_eq!(fast.3, general.3, "PacketEn");
            prop_assert_eq!(fast.4, general.4, "core cycles");
            prop_assert!(fast.0 == general.0, "the trace bytes differ");
            // TR16: the fast path's instructions are the general path's facts.
            prop_assert_eq!(&fast.5, &general.5, "the truth's facts");
        }
    }
}
