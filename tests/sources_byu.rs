//! The BYU readers (6-byte V1.0 and 12-byte p2AddrTr): records, errors, generators and the
//! mapping to tracer events, checked through the tracer and libipt's packet decoder.

mod common;

use common::sources::drain;

use common::trace::*;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use ptemu::regs::RtitCtl;
use ptemu::sources::byu::{self, CycleType, Record};
use ptemu::sources::byu_p2::{self, ReqType};
use ptemu::sources::{ErrorKind, EventSource, Input, ReadOptions, SourceError};
use ptemu::tracer::{Event, ExecMode, FarKind, TracerConfig};
use std::io::Write;

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/byu-p2/trace_small.tr");
const STRICT: ReadOptions = ReadOptions { lenient: false };
const LENIENT: ReadOptions = ReadOptions { lenient: true };

fn input(name: &str, bytes: Vec<u8>) -> Input {
    Input::from_bytes(name, bytes).unwrap()
}

fn byu_records(name: &str, bytes: Vec<u8>) -> Result<Vec<Record>, SourceError> {
    let mut r = byu::Reader::new(input(name, bytes));
    let mut v = Vec::new();
    while let Some(rec) = r.next_record()? {
        v.push(rec);
    }
    Ok(v)
}

fn p2_records(name: &str, bytes: Vec<u8>) -> Result<Vec<byu_p2::Record>, SourceError> {
    let mut r = byu_p2::Reader::new(input(name, bytes));
    let mut v = Vec::new();
    while let Some(rec) = r.next_record()? {
        v.push(rec);
    }
    Ok(v)
}

fn gen_byu(records: u64, seed: u64) -> Vec<u8> {
    let mut v = Vec::new();
    byu::generate(records, seed, &mut v).unwrap();
    v
}

fn gen_p2(records: u64, seed: u64) -> Vec<u8> {
    let mut v = Vec::new();
    byu_p2::generate(records, seed, &mut v).unwrap();
    v
}

#[test]
fn p2_sample_has_the_documented_record_counts() {
    // Re-derived with stdlib Python, independent of this crate:
    //   import struct, collections
    //   d = open('tests/data/byu-p2/trace_small.tr', 'rb').read()
    //   recs = [struct.unpack('<IBBBBI', d[i:i+12]) for i in range(0, len(d), 12)]
    //   collections.Counter(r[1] for r in recs)  -> {3: 579, 2: 212, 0: 165, 1: 33, 0x20: 6, 0x11: 5}
    //   recs[0][5] == 0xffffffff; {r[4] for r in recs} == {0}; min/max size 0 / 8
    let recs = p2_records("trace_small.tr", std::fs::read(SAMPLE).unwrap()).unwrap();
    assert_eq!(recs.len(), 1000);
    let count = |t: ReqType| recs.iter().filter(|r| r.reqtype == t).count();
    assert_eq!(count(ReqType::MEMWRITE), 579);
    assert_eq!(count(ReqType::MEMREADINV), 212);
    assert_eq!(count(ReqType::FETCH), 165);
    assert_eq!(count(ReqType::MEMREAD), 33);
    assert_eq!(count(ReqType::DEFERREPLY), 6);
    assert_eq!(count(ReqType::IOWRITE), 5);
    assert_eq!(recs[0].time, byu_p2::TIME_SENTINEL);
    assert!(recs.iter().all(|r| r.proc_id == 0));
    assert_eq!(recs.iter().map(|r| r.size).min(), Some(0));
    assert_eq!(recs.iter().map(|r| r.size).max(), Some(8));
    // 3 of the 5 I/O writes go to port 0x3d0 (VGA CRTC); two carry other address bits.
    assert_eq!(
        recs.iter()
            .filter(|r| r.reqtype == ReqType::IOWRITE && r.addr == 0x3d0)
            .count(),
        3
    );
    // The mapping's counts agree.
    let (_, stats) =
        drain(&mut byu_p2::ByuP2Events::new(input("s", std::fs::read(SAMPLE).unwrap()), STRICT).unwrap())
            .unwrap();
    assert_eq!(stats.records, 1000);
    assert_eq!(stats.count("MEMWRITE"), 579);
    assert_eq!(stats.count("fetch"), 165);
    assert_eq!(stats.count("data_write"), 579);
    assert_eq!(stats.count("data_read"), 212 + 33);
    assert_eq!(stats.count("io"), 5);
    assert_eq!(stats.count("other"), 6);
    assert_eq!(stats.count("time_sentinel"), 1);
}

#[test]
fn byu_record_fields_and_byte_enables() {
    let r = Record::from_bytes(&[0x12, 0x34, 0x56, 0x78, 0xc7, 0x9f]);
    assert_eq!(r.addr, 0x1234_5678, "big-endian address");
    assert_eq!(r.cycle_type(), CycleType::FetchNc);
    assert_eq!(r.control & 0xf, 0xf, "the low nibble is kept");
    assert_eq!(
        (r.byte_offset(), r.byte_len(), r.byte_addr()),
        (3, 3, 0x1234_567b)
    );
    assert_eq!(r.to_bytes(), [0x12, 0x34, 0x56, 0x78, 0xc7, 0x9f]);
    let all = Record::new(8, 0x00, CycleType::DataWrite);
    assert_eq!((all.byte_offset(), all.byte_len()), (0, 8));
    let upper = Record::new(8, 0x0f, CycleType::DataRead);
    assert_eq!(
        (upper.byte_offset(), upper.byte_len(), upper.byte_addr()),
        (4, 4, 12)
    );
    let valid: Vec<u8> = CycleType::ALL
        .iter()
        .filter(|t| t.is_valid())
        .map(|t| t.value())
        .collect();
    assert_eq!(valid, [1, 3, 5, 7, 8, 9, 12, 13, 14, 15]);
    assert_eq!(byu::byte_enables(3, 2), 0xe7);
    let p = byu_p2::Record::from_bytes(&[0x78, 0x56, 0x34, 0x12, 0x42, 8, 3, 1, 0x10, 0, 0, 0]);
    assert_eq!((p.addr, p.reqtype, p.time), (0x1234_5678, ReqType(0x42), 16));
    assert_eq!(p.to_bytes()[4], 0x42, "unknown reqtypes are kept");
}

#[test]
fn round_trips_give_the_same_records_and_bytes() {
    let hand: Vec<u8> = [
        Record::new(0x1000, 0x00, CycleType::FetchNc),
        Record::new(0x2000, 0xf0, CycleType::DataWrite),
        Record::new(0, 0xfb, CycleType::Special),
        Record::new(0x3d0, 0xfe, CycleType::IoWrite),
        Record::new(0x8, 0x00, CycleType::Invalid10),
    ]
    .iter()
    .flat_map(|r| r.to_bytes())
    .collect();
    for bytes in [hand, gen_byu(3000, 7)] {
        let recs = byu_records("a", bytes.clone()).unwrap();
        let mut w = byu::Writer::new(Vec::new());
        recs.iter().for_each(|r| w.write(r).unwrap());
        let again = w.into_inner();
        assert_eq!(again, bytes);
        assert_eq!(byu_records("b", again).unwrap(), recs);
    }
    for bytes in [std::fs::read(SAMPLE).unwrap(), gen_p2(3000, 7)] {
        let recs = p2_records("a", bytes.clone()).unwrap();
        let mut w = byu_p2::Writer::new(Vec::new());
        recs.iter().for_each(|r| w.write(r).unwrap());
        let again = w.into_inner();
        assert_eq!(again, bytes);
        assert_eq!(p2_records("b", again).unwrap(), recs);
    }
}

#[test]
fn generators_are_seeded_and_realistic() {
    assert_eq!(gen_byu(2000, 1), gen_byu(2000, 1));
    assert_ne!(gen_byu(2000, 1), gen_byu(2000, 2));
    assert_eq!(gen_p2(2000, 1), gen_p2(2000, 1));
    assert_ne!(gen_p2(2000, 1), gen_p2(2000, 2));
    let recs = byu_records("g", gen_byu(20_000, 3)).unwrap();
    assert_eq!(recs.len(), 20_000);
    let n = |t: CycleType| recs.iter().filter(|r| r.cycle_type() == t).count();
    assert!(n(CycleType::FetchNc) > 8000 && n(CycleType::DataWrite) > 1000);
    assert!(n(CycleType::IntAck) > 0 && n(CycleType::IoRead) > 0 && n(CycleType::Special) > 0);
    assert!(recs.iter().all(|r| r.cycle_type().is_valid()));
    let (_, stats) =
        drain(&mut byu::ByuEvents::new(input("g", gen_byu(20_000, 3)), STRICT).unwrap()).unwrap();
    assert!(stats.count("halt") > 0 && stats.count("interrupts") > 0 && stats.count("irets") > 0);
    let p2 = p2_records("g", gen_p2(5000, 3)).unwrap();
    assert_eq!(p2[0].time, byu_p2::TIME_SENTINEL);
    assert!(p2.iter().any(|r| r.reqtype == ReqType::INTA));
}

#[test]
fn generated_calls_nest_deeper_than_64_sometimes() {
    let mut m = byu::Machine::new(11);
    let mut deepest = 0;
    let mut returns_to_caller = 0;
    let mut prev_depth = 0;
    for _ in 0..200_000 {
        m.next_op();
        deepest = deepest.max(m.depth());
        returns_to_caller += usize::from(m.depth() < prev_depth);
        prev_depth = m.depth();
    }
    assert!(deepest > 64, "deepest nesting {deepest}");
    assert!(returns_to_caller > 1000, "{returns_to_caller} returns");
}

#[test]
fn gzip_is_read_whatever_the_name() {
    for (bytes, p2) in [(gen_byu(500, 5), false), (gen_p2(500, 5), true)] {
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        let z = gz.finish().unwrap();
        let inp = input("plain-name.tr", z.clone());
        assert!(inp.is_gzip());
        if p2 {
            assert_eq!(p2_records("x.tr", z).unwrap(), p2_records("y", bytes).unwrap());
        } else {
            assert_eq!(byu_records("x.tr", z).unwrap(), byu_records("y", bytes).unwrap());
        }
    }
}

#[test]
fn truncated_records_name_the_file_record_and_offset() {
    let mut b = gen_byu(10, 1);
    b.truncate(6 * 9 + 4);
    let e = byu_records("six.tr", b).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Truncated));
    let text = e.to_string();
    assert!(
        text.contains("six.tr") && text.contains("record 10") && text.contains("byte offset 54"),
        "{text}"
    );
    assert!(text.contains("4 of 6 bytes"), "{text}");
    let mut b = gen_p2(10, 1);
    b.truncate(12 * 3 + 11);
    let e = p2_records("twelve.tr", b.clone()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("twelve.tr") && text.contains("record 4") && text.contains("byte offset 36"),
        "{text}"
    );
    // Truncation is not skippable, even leniently.
    let e = drain(&mut byu_p2::ByuP2Events::new(input("twelve.tr", b), LENIENT).unwrap()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Truncated));
}

#[test]
fn bad_fields_fail_strictly_and_are_skipped_leniently() {
    let mut b = gen_byu(20, 1);
    b[6 * 4 + 5] = 0xa3; // record 5: cycle type 10 (a code write)
    let e = drain(&mut byu::ByuEvents::new(input("bad.tr", b.clone()), STRICT).unwrap()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::BadField));
    let text = e.to_string();
    assert!(
        text.contains("bad.tr") && text.contains("record 5 (byte offset 24)"),
        "{text}"
    );
    assert!(text.contains("invalid cycle type 10"), "{text}");
    let (_, stats) = drain(&mut byu::ByuEvents::new(input("bad.tr", b), LENIENT).unwrap()).unwrap();
    assert_eq!((stats.records, stats.skipped, stats.count("invalid")), (20, 1, 1));

    let mut b = gen_p2(20, 1);
    b[12 * 2 + 4] = 0x42;
    let e = drain(&mut byu_p2::ByuP2Events::new(input("bad12.tr", b.clone()), STRICT).unwrap()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("bad12.tr") && text.contains("record 3 (byte offset 24)"),
        "{text}"
    );
    assert!(text.contains("0x42"), "{text}");
    let (_, stats) = drain(&mut byu_p2::ByuP2Events::new(input("bad12.tr", b), LENIENT).unwrap()).unwrap();
    assert_eq!((stats.records, stats.skipped), (20, 1));
}

/// Byte addresses of the fetches, and the number of data and I/O accesses, from the records.
fn byu_fetches(bytes: &[u8]) -> (Vec<u64>, usize) {
    let recs = byu_records("f", bytes.to_vec()).unwrap();
    let fetches = recs
        .iter()
        .filter(|r| matches!(r.cycle_type(), CycleType::Fetch | CycleType::FetchNc))
        .map(|r| u64::from(r.byte_addr()))
        .collect();
    let data = recs
        .iter()
        .filter(|r| matches!(r.cycle_type().value(), 5 | 7 | 12..=15))
        .count();
    (fetches, data)
}

fn p2_fetches(bytes: &[u8]) -> (Vec<u64>, usize) {
    let recs = p2_records("f", bytes.to_vec()).unwrap();
    let fetches = recs
        .iter()
        .filter(|r| r.reqtype == ReqType::FETCH)
        .map(|r| u64::from(r.addr))
        .collect();
    let data = recs
        .iter()
        .filter(|r| matches!(r.reqtype.0, 0x01..=0x03 | 0x10 | 0x11))
        .count();
    (fetches, data)
}

/// The invariants of a BYU event stream: the IP chain is unbroken, every redirect (jump,
/// interrupt, IRET) goes to the next fetch address, one PTWRITE per data access.
fn check_flow(events: &[Event], fetches: &[u64], data: usize, stats: &ptemu::sources::SourceStats) {
    let mut ip: Option<u64> = None;
    let mut next_fetch = 0;
    let mut redirects = 0;
    // Accesses before the first fetch have no IP (they are at 0); the chain starts at the first fetch.
    let first = events
        .iter()
        .position(|e| {
            matches!(
                e,
                Event::Retire { .. } | Event::IndirectJump { .. } | Event::Far { .. }
            )
        })
        .unwrap();
    let first_ip = match events[first] {
        Event::Retire { ip, .. } | Event::IndirectJump { ip, .. } => ip,
        Event::Far { from, .. } => from,
        _ => unreachable!(),
    };
    let early_ok = |e: &Event| !matches!(*e, Event::Ptwrite { ip, .. } if ip != 0 && ip != first_ip);
    assert!(events[..first].iter().all(early_ok), "{:?}", &events[..first]);
    for (i, e) in events.iter().enumerate().skip(first) {
        let at = match *e {
            Event::Retire { ip, .. } | Event::Ptwrite { ip, .. } | Event::IndirectJump { ip, .. } => Some(ip),
            Event::Sleep { ip, .. } => Some(ip),
            Event::Far { from, .. } => Some(from),
            _ => None,
        };
        if let (Some(at), Some(cur)) = (at, ip) {
            assert_eq!(
                at, cur,
                "event {i} {e:?} starts where the previous one left the IP"
            );
        }
        if let Event::IndirectJump { target: to, .. } | Event::Far { to, .. } = *e {
            redirects += 1;
            let k = fetches[next_fetch..].iter().position(|&f| f == to);
            let k = k.unwrap_or_else(|| panic!("event {i} {e:?}: target is no later fetch"));
            next_fetch += k + 1;
        }
        if at.is_some() || ip.is_some() {
            ip = Some(e.next_ip(ip.or(at).unwrap()));
        }
    }
    assert_eq!(redirects, stats.count("discontinuities"));
    let ptw = events
        .iter()
        .filter(|e| matches!(e, Event::Ptwrite { .. }))
        .count();
    assert_eq!(ptw, data, "one PTWRITE per data or I/O access");
    assert_eq!(
        ptw as u64,
        stats.count("data_read") + stats.count("data_write") + stats.count("io")
    );
    let retired: u64 = events
        .iter()
        .filter(|e| matches!(e, Event::Retire { .. } | Event::IndirectJump { .. }))
        .count() as u64;
    assert!(retired <= fetches.len() as u64 && retired > 0);
}

#[test]
fn mapping_invariants_hold_on_generated_and_real_traces() {
    for seed in 0..4 {
        let b = gen_byu(4000, seed);
        let (events, stats) =
            drain(&mut byu::ByuEvents::new(input("g", b.clone()), STRICT).unwrap()).unwrap();
        let (fetches, data) = byu_fetches(&b);
        check_flow(&events, &fetches, data, &stats);
        let b = gen_p2(4000, seed);
        let (events, stats) =
            drain(&mut byu_p2::ByuP2Events::new(input("g", b.clone()), STRICT).unwrap()).unwrap();
        let (fetches, data) = p2_fetches(&b);
        check_flow(&events, &fetches, data, &stats);
        let cycles: u64 = events
            .iter()
            .filter_map(|e| if let Event::Cycles(c) = e { Some(*c) } else { None })
            .sum();
        let wake: u64 = events
            .iter()
            .filter_map(|e| {
                if let Event::Wake { cycles, .. } = e {
                    Some(*cycles)
                } else {
                    None
                }
            })
            .sum();
        let want: u64 = p2_records("g", b)
            .unwrap()
            .iter()
            .map(|r| byu_p2::core_cycles(r.time))
            .sum();
        assert_eq!(cycles + wake, want, "every delta becomes core cycles once");
    }
    let b = std::fs::read(SAMPLE).unwrap();
    let (events, stats) =
        drain(&mut byu_p2::ByuP2Events::new(input("s", b.clone()), STRICT).unwrap()).unwrap();
    let (fetches, data) = p2_fetches(&b);
    check_flow(&events, &fetches, data, &stats);
    assert!(stats.count("discontinuities") > 0);
}

#[test]
fn interrupts_and_halts_map_to_far_and_power_events() {
    let recs = [
        Record::new(0x1000, 0x00, CycleType::FetchNc),
        Record::new(0x1008, 0x00, CycleType::FetchNc),
        Record::new(0x2000, 0x00, CycleType::DataWrite),
        Record::new(0, 0xfe, CycleType::IntAck),
        Record::new(0, 0xfe, CycleType::IntAck),
        Record::new(0x9200, 0x00, CycleType::FetchNc),
        Record::new(0x1010, 0x00, CycleType::FetchNc),
        Record::new(0, 0xfb, CycleType::Special),
        Record::new(0x1018, 0x00, CycleType::FetchNc),
    ];
    let bytes: Vec<u8> = recs.iter().flat_map(|r| r.to_bytes()).collect();
    let (events, _) = drain(&mut byu::ByuEvents::new(input("h", bytes), STRICT).unwrap()).unwrap();
    let far = |kind, from, to| Event::far(kind, from, to, 0, ExecMode::Bits32);
    let ptw = Event::Ptwrite {
        ip: 0x1008,
        len: 0,
        payload: byu::ptw_payload(byu::DataKind::Write, 0x2000, 8),
        size: ptemu::packet::PtwSize::Eight,
    };
    assert_eq!(
        events,
        [
            Event::Retire { ip: 0x1000, len: 8 },
            ptw,
            Event::Retire { ip: 0x1008, len: 8 },
            far(
                FarKind::Interrupt {
                    vector: byu::INTA_VECTOR
                },
                0x1010,
                0x9200
            ),
            far(FarKind::Iret, 0x9200, 0x1010),
            Event::Retire { ip: 0x1010, len: 8 },
            Event::Sleep {
                ip: 0x1018,
                state: 0,
                sub_state: 0,
                hw: false
            },
            Event::Wake {
                last: 0,
                deepest: 0,
                wake: 1,
                cycles: 0
            },
            Event::Retire { ip: 0x1018, len: 8 },
        ]
    );
}

/// Runs events through the tracer (32-bit, CPL 0, every packet kind on) and returns the bytes.
fn trace(events: &[Event]) -> Vec<u8> {
    TraceRig::new(TracerConfig::default()).trace_events(
        (0, 0, ExecMode::Bits32),
        RtitCtl::new()
            .with_branch_en(true)
            .with_os(true)
            .with_user(true)
            .with_ptw_en(true)
            .with_fup_on_ptw(true)
            .with_pwr_evt_en(true)
            .with_event_en(true)
            .with_cyc_en(true)
            .with_tsc_en(true),
        events,
    )
}

#[test]
fn traced_events_decode_with_libipt() {
    let b = gen_byu(3000, 9);
    let (events, _) = drain(&mut byu::ByuEvents::new(input("g", b), STRICT).unwrap()).unwrap();
    let packets = common::libipt::decode(&trace(&events)).expect("libipt decodes the BYU stream");
    let tips = packets.iter().filter(|(p, _)| p.name() == "tip").count();
    let redirects = events
        .iter()
        .filter(|e| matches!(e, Event::IndirectJump { .. } | Event::Far { .. }))
        .count();
    assert_eq!(tips, redirects, "one TIP per redirect");
    assert!(packets.iter().any(|(p, _)| p.name() == "ptw"));
    assert!(packets.iter().any(|(p, _)| p.name() == "pwre"));
    let (events, _) =
        drain(&mut byu_p2::ByuP2Events::new(input("s", std::fs::read(SAMPLE).unwrap()), STRICT).unwrap())
            .unwrap();
    let packets = common::libipt::decode(&trace(&events)).expect("libipt decodes the p2 stream");
    assert!(packets.iter().any(|(p, _)| p.name() == "cyc"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), lenient: bool) {
        let n = bytes.len();
        let options = ReadOptions { lenient };
        let mut src = byu::ByuEvents::new(input("p", bytes.clone()), options).unwrap();
        let mut out = Vec::new();
        let mut calls = 0;
        while let Ok(true) = src.next_events(&mut out) {
            calls += 1;
            prop_assert!(calls <= n / 6 + 2);
        }
        let mut src = byu_p2::ByuP2Events::new(input("p", bytes), options).unwrap();
        let mut calls = 0;
        while let Ok(true) = src.next_events(&mut out) {
            calls += 1;
            prop_assert!(calls <= n / 12 + 2);
        }
    }
}

/// `read_batch` gives the same records and the same truncation error as `next_record`, also from
/// gzip input whose inflated chunks split records.
#[test]
fn batch_reading_matches_record_reading() {
    let gz = |b: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    // BYU: 400,001 records (2.4 MB, so inflated 1 MiB chunks end inside records), then a torn tail.
    let mut six = gen_byu(400_001, 3);
    six.extend_from_slice(&[1, 2, 3]);
    let mut p2 = gen_p2(200_001, 3);
    p2.extend_from_slice(&[1, 2, 3, 4, 5]);
    for bytes in [six.clone(), gz(&six)] {
        let one = byu_records("b", bytes.clone()).unwrap_err();
        let mut r = byu::Reader::new(Input::from_bytes("b", bytes).unwrap());
        let (mut batch, mut all) = (Vec::new(), Vec::new());
        let err = loop {
            match r.read_batch(&mut batch, 1000) {
                Ok(0) => panic!("a torn tail must be an error"),
                Ok(_) => all.extend_from_slice(&batch),
                Err(e) => break e,
            }
        };
        assert_eq!(all.len(), 400_001);
        assert_eq!(all, byu_records("b", six[..six.len() - 3].to_vec()).unwrap());
        assert_eq!(err.to_string(), one.to_string());
    }
    for bytes in [p2.clone(), gz(&p2)] {
        let mut r = byu_p2::Reader::new(Input::from_bytes("p", bytes).unwrap());
        let mut one = byu_p2::Reader::new(Input::from_bytes("p", p2.clone()).unwrap());
        let (mut batch, mut n) = (Vec::new(), 0);
        let err = loop {
            match r.read_batch(&mut batch, 777) {
                Ok(0) => panic!("a torn tail must be an error"),
                Ok(_) => {
                    for rec in &batch {
                        assert_eq!(Some(*rec), one.next_record().unwrap());
                        n += 1;
                    }
                }
                Err(e) => break e,
            }
        };
        assert_eq!(n, 200_001);
        assert!(
            err.to_string().contains("record 200002 (byte offset 2400012)"),
            "{err}"
        );
    }
}
