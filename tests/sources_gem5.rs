//! gem5 elastic traces: the reader on the real samples, round trips, the generator, bad input,
//! and the mapping to tracer events (checked through the tracer and libipt's packet decoder).

mod common;

use common::sources::drain;

use common::trace::TraceRig;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use prost::Message;
use ptemu::regs::RtitCtl;
use ptemu::sources::gem5::{
    generate, Gem5Events, Header, InstDepRecord, InstDepRecordHeader, Packet, Reader, Record, RecordType,
    TraceKind, Writer, DECODE_BLOCK, MAX_MESSAGE,
};
use ptemu::sources::{ErrorKind, EventSource, Input, ReadOptions, SourceError};
use ptemu::tracer::{Event, ExecMode, TracerConfig};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

const DEP: &str = "tests/data/gem5/system.cpu.traceListener.deptrace.proto.gz";
const FETCH: &str = "tests/data/gem5/system.cpu.traceListener.fetchtrace.proto.gz";

fn open(path: &str) -> Reader {
    Reader::new(Input::open(Path::new(path)).unwrap()).unwrap()
}

fn reader_of(name: &str, bytes: Vec<u8>) -> Result<Reader, SourceError> {
    Reader::new(Input::from_bytes(name, bytes)?)
}

/// Every record of `r`, owned.
fn dep_records(r: &mut Reader) -> Vec<InstDepRecord> {
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        let Record::Dep(d) = rec else {
            panic!("a packet in a dep trace")
        };
        v.push(d.clone());
    }
    v
}

fn packets(r: &mut Reader) -> Vec<Packet> {
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        let Record::Fetch(p) = rec else {
            panic!("a dep record in a fetch trace")
        };
        v.push(p.clone());
    }
    v
}

// The sample figures below were derived independently of this crate: a 30-line Python script
// using only the standard library (gzip + a hand-written varint/protobuf field walker) counted the
// messages, the `type` values (field 2), the records holding field 9 (weight) and field 10 (pc),
// the fetch packets' (cmd, size, flags) triples and whether their ticks are monotonic. They agree
// with trace-formats.md §5.3 and the sample's SOURCE.txt. The same script grouped consecutive equal
// pcs (107 926 instructions), counted the groups whose next pc is not 1..=15 bytes ahead (12 578)
// and summed the weights (19 855).

#[test]
fn dep_sample_counts() {
    let mut r = open(DEP);
    assert_eq!(r.kind(), TraceKind::Dep);
    let Header::Dep(h) = r.header().clone() else {
        unreachable!()
    };
    assert_eq!(
        (h.obj_id.as_str(), h.tick_freq, h.window_size, h.ver),
        ("system.cpu.traceListener", 1_000_000_000_000, 576, None)
    );
    let mut types: HashMap<i32, u64> = HashMap::new();
    let (mut n, mut weight, mut pc) = (0u64, 0u64, 0u64);
    while let Some(Record::Dep(d)) = r.next_record().unwrap() {
        n += 1;
        *types.entry(d.r#type).or_default() += 1;
        weight += u64::from(d.weight.is_some());
        pc += u64::from(d.pc.is_some());
    }
    assert_eq!(n, 183_286);
    assert_eq!(r.records(), 183_286);
    assert_eq!(types[&(RecordType::Comp as i32)], 137_110);
    assert_eq!(types[&(RecordType::Load as i32)], 35_247);
    assert_eq!(types[&(RecordType::Store as i32)], 10_929);
    assert_eq!(types.len(), 3);
    assert_eq!((weight, pc), (19_540, 183_286));
    assert_eq!(r.offset(), 4_866_914, "the uncompressed size in SOURCE.md");
}

#[test]
fn fetch_sample_counts() {
    let mut r = open(FETCH);
    assert_eq!(r.kind(), TraceKind::Fetch);
    let Header::Fetch(h) = r.header().clone() else {
        unreachable!()
    };
    assert_eq!(
        (h.obj_id.as_str(), h.tick_freq),
        ("system.cpu.traceListener", 1_000_000_000_000)
    );
    assert!(h.id_strings.is_empty());
    let ps = packets(&mut r);
    assert_eq!(ps.len(), 25_471);
    assert!(ps
        .iter()
        .all(|p| p.cmd == 1 && p.size == 64 && p.flags == Some(0x100) && p.pc.is_some()));
    assert!(ps.windows(2).all(|w| w[0].tick <= w[1].tick), "ticks monotonic");
    assert_eq!(r.offset(), 636_276);
}

#[test]
fn first_records_decode_as_documented() {
    let d = dep_records(&mut open(DEP));
    let brief = |r: &InstDepRecord| {
        (
            r.seq_num,
            r.pc.unwrap(),
            r.r#type,
            r.comp_delay,
            r.rob_dep.clone(),
            r.reg_dep.clone(),
        )
    };
    let (comp, store) = (RecordType::Comp as i32, RecordType::Store as i32);
    assert_eq!(brief(&d[0]), (1, 0x7fff_f7dd_7c30, comp, 16000, vec![], vec![]));
    assert_eq!(brief(&d[1]), (2, 0x7fff_f7dd_7c33, comp, 0, vec![1], vec![]));
    assert_eq!(brief(&d[3]), (4, 0x7fff_f7dd_7c33, store, 1500, vec![], vec![3]));
    assert_eq!(
        (d[3].p_addr, d[3].size, d[3].flags),
        (Some(0x2de58), Some(8), Some(2))
    );
    assert_eq!(d[0].weight, None);

    let f = packets(&mut open(FETCH));
    let brief = |p: &Packet| (p.tick, p.addr, p.size, p.pc.unwrap());
    assert_eq!(brief(&f[0]), (0, 0x4c00, 64, 0x7fff_f7dd_7c30));
    assert_eq!(brief(&f[2]), (13500, 0x4c40, 64, 0x7fff_f7dd_7c3b));
    assert_eq!(brief(&f[3]), (18000, 0x5980, 64, 0x7fff_f7dd_89b0));
}

/// Copies every record of `r` through a [`Writer`].
fn rewrite(r: &mut Reader) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), r.header()).unwrap();
    while let Some(rec) = r.next_record().unwrap() {
        w.write_record(rec).unwrap();
    }
    w.finish().unwrap()
}

/// Reads `a` and `b` in lockstep; returns the number of records, asserting they are equal.
fn assert_same_records(mut a: Reader, mut b: Reader) -> u64 {
    assert_eq!(a.header(), b.header());
    let mut n = 0;
    loop {
        let x = a.next_record().unwrap().map(owned);
        let y = b.next_record().unwrap().map(owned);
        assert_eq!(x, y, "record {}", n + 1);
        if x.is_none() {
            return n;
        }
        n += 1;
    }
}

#[derive(Debug, PartialEq)]
enum Owned {
    Dep(InstDepRecord),
    Fetch(Packet),
}

fn owned(r: Record<'_>) -> Owned {
    match r {
        Record::Dep(d) => Owned::Dep(d.clone()),
        Record::Fetch(p) => Owned::Fetch(p.clone()),
    }
}

#[test]
fn samples_round_trip() {
    for (path, records) in [(DEP, 183_286), (FETCH, 25_471)] {
        let bytes = rewrite(&mut open(path));
        let again = reader_of("rewritten", bytes.clone()).unwrap();
        assert_eq!(assert_same_records(open(path), again), records, "{path}");
        // gem5 wrote exactly what prost writes: the re-encoding is byte-identical.
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut Input::open(Path::new(path)).unwrap(), &mut raw).unwrap();
        assert_eq!(bytes, raw, "{path}");
    }
}

fn gen_bytes(records: u64, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let (mut dep, mut fetch) = (Vec::new(), Vec::new());
    generate(records, seed, &mut dep, Some(&mut fetch)).unwrap();
    (dep, fetch)
}

#[test]
fn generated_traces_read_back_and_round_trip() {
    let (dep, fetch) = gen_bytes(20_000, 7);
    let mut r = reader_of("gen.dep", dep.clone()).unwrap();
    assert_eq!(r.kind(), TraceKind::Dep);
    let recs = dep_records(&mut r);
    assert_eq!(recs.len(), 20_000);
    assert!(recs.windows(2).all(|w| w[0].seq_num < w[1].seq_num));
    assert!(recs.iter().all(|d| d
        .rob_dep
        .iter()
        .chain(&d.reg_dep)
        .all(|&s| s >= 1 && s < d.seq_num)));
    let count = |t: RecordType| recs.iter().filter(|d| d.r#type == t as i32).count();
    assert!(
        count(RecordType::Load) > 1000 && count(RecordType::Store) > 1000 && count(RecordType::Comp) > 5000
    );
    assert!(recs.iter().any(|d| d.weight.is_some()));
    let mut f = reader_of("gen.fetch", fetch.clone()).unwrap();
    assert_eq!(f.kind(), TraceKind::Fetch);
    let ps = packets(&mut f);
    assert!(ps.len() > 1000);
    assert!(ps.windows(2).all(|w| w[0].tick <= w[1].tick));
    assert!(ps.iter().all(|p| p.size == 64 && p.addr % 64 == 0 && p.cmd == 1));

    for bytes in [dep, fetch] {
        let copy = rewrite(&mut reader_of("gen", bytes.clone()).unwrap());
        assert_eq!(copy, bytes);
        assert_same_records(reader_of("a", bytes).unwrap(), reader_of("b", copy).unwrap());
    }
}

#[test]
fn generator_is_reproducible_and_seeded() {
    assert_eq!(gen_bytes(3000, 42), gen_bytes(3000, 42));
    let (a, fa) = gen_bytes(3000, 42);
    let (b, fb) = gen_bytes(3000, 43);
    assert_ne!(a, b);
    assert_ne!(fa, fb);
    let mut only = Vec::new();
    generate(3000, 42, &mut only, None).unwrap();
    assert_eq!(only, a, "the fetch trace does not change the dep trace");
}

#[test]
fn generated_calls_nest_deeper_than_64() {
    // Each call or recursion pushes with a STORE at a falling stack address; the lowest address
    // tells the deepest nesting (8 bytes a frame below 0x7fff_ffff_e000).
    let (dep, _) = gen_bytes(100_000, 3);
    let recs = dep_records(&mut reader_of("gen", dep).unwrap());
    let lowest = recs
        .iter()
        .filter(|d| d.r#type == RecordType::Store as i32)
        .filter_map(|d| d.v_addr)
        .filter(|&v| v > 0x7fff_0000_0000)
        .min()
        .unwrap();
    assert!(
        (0x7fff_ffff_e000 - lowest) / 8 > 64,
        "deepest frame at {lowest:#x}"
    );
}

// ---- bad input ----

fn dep_header() -> Header {
    Header::Dep(InstDepRecordHeader {
        obj_id: "t".into(),
        ver: None,
        tick_freq: 1_000_000_000_000,
        window_size: 576,
    })
}

fn comp(seq: u64, pc: u64) -> InstDepRecord {
    InstDepRecord {
        seq_num: seq,
        r#type: RecordType::Comp as i32,
        comp_delay: 500,
        pc: Some(pc),
        ..Default::default()
    }
}

/// A dep trace of `records`; also returns the byte offset each record's length prefix sits at.
fn dep_trace(records: &[InstDepRecord]) -> (Vec<u8>, Vec<u64>) {
    let mut w = Writer::new(Vec::new(), &dep_header()).unwrap();
    for r in records {
        w.write_dep(r).unwrap();
    }
    let bytes = w.finish().unwrap();
    let Header::Dep(h) = dep_header() else {
        unreachable!()
    };
    let mut at = 4 + delimited(h.encoded_len());
    let offsets = records
        .iter()
        .map(|r| {
            let here = at;
            at += delimited(r.encoded_len());
            here
        })
        .collect();
    assert_eq!(at, bytes.len() as u64);
    (bytes, offsets)
}

/// A message of `n` bytes with its varint length prefix.
fn delimited(n: usize) -> u64 {
    (prost::length_delimiter_len(n) + n) as u64
}

/// The first error of reading everything.
fn read_all_err(name: &str, bytes: Vec<u8>) -> SourceError {
    let mut r = match reader_of(name, bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    loop {
        match r.next_record() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("no error"),
            Err(e) => return e,
        }
    }
}

fn assert_error(e: &SourceError, kind: fn(&ErrorKind) -> bool, name: &str, position: &str) {
    let text = e.to_string();
    assert!(kind(&e.kind), "{text}: {:?}", e.kind);
    assert!(text.starts_with(&format!("{name}: {position}: ")), "{text}");
}

#[test]
fn wrong_magic() {
    let (mut bytes, _) = dep_trace(&[comp(1, 0x1000)]);
    bytes[3] = b'6';
    let e = read_all_err("m.trace", bytes);
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::BadMagic),
        "m.trace",
        "byte offset 0",
    );
    let e = read_all_err("short.trace", b"ge".to_vec());
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::BadMagic),
        "short.trace",
        "byte offset 0",
    );
}

#[test]
fn truncated_varint_and_body() {
    let (mut bytes, _) = dep_trace(&[comp(1, 0x1000)]);
    let end = bytes.len();
    bytes.push(0x85); // a length prefix cut after its first byte
    let e = read_all_err("v.trace", bytes.clone());
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::Truncated),
        "v.trace",
        &format!("byte offset {end}"),
    );
    assert!(!e.is_skippable());

    bytes.pop();
    bytes.extend([0x05, 0x08, 0x02]); // 5 bytes announced, 2 present
    let e = read_all_err("b.trace", bytes);
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::Truncated),
        "b.trace",
        &format!("byte offset {end}"),
    );
    assert!(e.message.contains("5-byte message"), "{e}");
}

#[test]
fn bad_enum_and_missing_field_are_skippable() {
    let mut bad = comp(2, 0x1004);
    bad.r#type = 7;
    let (bytes, at) = dep_trace(&[comp(1, 0x1000), bad, comp(3, 0x1008)]);
    let e = read_all_err("e.trace", bytes.clone());
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::BadField),
        "e.trace",
        &format!("byte offset {}", at[1]),
    );
    assert!(e.message.contains("type 7"), "{e}");
    assert!(e.is_skippable());

    // A record without comp_delay (field 7): hand-built, seq 2 / COMP only.
    let (mut bytes, at) = dep_trace(&[comp(1, 0x1000)]);
    let end = bytes.len() as u64;
    bytes.extend([0x04, 0x08, 0x02, 0x10, 0x03]);
    let e = read_all_err("f.trace", bytes);
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::BadField),
        "f.trace",
        &format!("byte offset {end}"),
    );
    assert!(e.message.contains("required field(s) 7"), "{e}");
    assert!(at[0] < end);
}

#[test]
fn overlong_length_loses_framing() {
    let (mut bytes, _) = dep_trace(&[comp(1, 0x1000)]);
    let end = bytes.len();
    let mut len = MAX_MESSAGE + 1;
    while len >= 0x80 {
        bytes.push(len as u8 | 0x80);
        len >>= 7;
    }
    bytes.push(len as u8);
    let e = read_all_err("l.trace", bytes.clone());
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::LostFraming),
        "l.trace",
        &format!("byte offset {end}"),
    );
    assert!(!e.is_skippable());
    // Even lenient mapping stops there.
    let mut ev = Gem5Events::new(Input::from_bytes("l.trace", bytes).unwrap(), None, lenient()).unwrap();
    let err = drain(&mut ev).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("l.trace: byte offset {end}: ")),
        "{err}"
    );
}

/// After an error that loses the framing the reader stays at its end: a well-formed message right
/// behind the bad length prefix is not read as the next record.
#[test]
fn reader_returns_nothing_after_losing_the_framing() {
    let (mut bytes, _) = dep_trace(&[comp(1, 0x1000)]);
    let mut len = MAX_MESSAGE + 1;
    while len >= 0x80 {
        bytes.push(len as u8 | 0x80);
        len >>= 7;
    }
    bytes.push(len as u8);
    let (next, at) = dep_trace(&[comp(2, 0x2000)]);
    bytes.extend_from_slice(&next[at[0] as usize..]);
    let mut r = Reader::new(Input::from_bytes("l.trace", bytes).unwrap()).unwrap();
    assert!(matches!(r.next_record(), Ok(Some(_))));
    let e = r.next_record().unwrap_err();
    assert!(matches!(e.kind, ErrorKind::LostFraming), "{e}");
    assert!(matches!(r.next_record(), Ok(None)));
    assert!(matches!(r.next_record(), Ok(None)));
}

#[test]
fn gzip_by_magic_and_plain_files() {
    let (bytes, _) = dep_trace(&[comp(1, 0x1000), comp(2, 0x1003)]);
    let dir = tempfile::tempdir().unwrap();
    let plain: PathBuf = dir.path().join("trace.gz"); // the name lies: it is not gzip
    std::fs::write(&plain, &bytes).unwrap();
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes).unwrap();
    let zipped: PathBuf = dir.path().join("x.txt");
    std::fs::write(&zipped, gz.finish().unwrap()).unwrap();
    for (path, gzip) in [(&plain, false), (&zipped, true)] {
        let input = Input::open(path).unwrap();
        assert_eq!(input.is_gzip(), gzip);
        let recs = dep_records(&mut Reader::new(input).unwrap());
        assert_eq!(recs, vec![comp(1, 0x1000), comp(2, 0x1003)]);
    }
}

fn lenient() -> ReadOptions {
    ReadOptions { lenient: true }
}

#[test]
fn lenient_skips_a_bad_message() {
    let mut bad = comp(2, 0x1004);
    bad.r#type = 9;
    let (bytes, at) = dep_trace(&[comp(1, 0x1000), bad, comp(3, 0x1004)]);
    let strict = |b: Vec<u8>| {
        Gem5Events::new(
            Input::from_bytes("s.trace", b).unwrap(),
            None,
            ReadOptions::default(),
        )
    };
    let err = drain(&mut strict(bytes.clone()).unwrap()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("s.trace: byte offset {}: ", at[1])),
        "{err}"
    );

    let mut ev = Gem5Events::new(Input::from_bytes("s.trace", bytes).unwrap(), None, lenient()).unwrap();
    let (events, _) = drain(&mut ev).unwrap();
    let stats = ev.stats();
    assert_eq!((stats.records, stats.skipped, stats.count("comp")), (3, 1, 2));
    let instructions: Vec<_> = events.iter().filter(|e| e.is_instruction()).collect();
    assert_eq!(
        instructions,
        [
            &Event::Retire { ip: 0x1000, len: 4 },
            &Event::Retire { ip: 0x1004, len: 4 }
        ]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn arbitrary_bytes_after_magic_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400), lenient_mode: bool) {
        let mut bytes = b"gem5".to_vec();
        bytes.extend(&tail);
        if let Ok(mut r) = reader_of("p", bytes.clone()) {
            for _ in 0..=tail.len() {
                match r.next_record() {
                    Ok(None) => break,
                    Ok(Some(_)) => {}
                    Err(e) if e.is_skippable() => {}
                    Err(_) => { prop_assert!(r.next_record().unwrap().is_none()); break; }
                }
            }
            prop_assert!(matches!(r.next_record(), Ok(None) | Err(_)));
        }
        if let Ok(mut ev) = Gem5Events::new(Input::from_bytes("p", bytes).unwrap(), None, ReadOptions { lenient: lenient_mode }) {
            let mut out = Vec::new();
            let mut calls = 0;
            while let Ok(true) = ev.next_events(&mut out) {
                calls += 1;
                prop_assert!(calls <= tail.len() + 2, "does not terminate");
            }
        }
    }
}

// ---- the mapping ----

/// Checks the mapping's invariants; returns (ptwrites, discontinuities, instructions). Every
/// instruction starts where the previous one left the IP (`flow`); the Ptwrites of one instruction
/// and its jump all carry the instruction's IP (`start`).
fn check_invariants(events: &[Event], strict_flow: bool) -> (u64, u64, u64) {
    let (mut ptw, mut jumps, mut instr) = (0, 0, 0);
    let mut flow: Option<u64> = None;
    let mut start = 0;
    let mut after_ptwrite = false;
    let mut new_instruction = |ip: u64, flow: Option<u64>, start: &mut u64| {
        assert!(
            !strict_flow || flow.is_none_or(|f| f == ip),
            "flow {flow:x?} vs instruction at {ip:#x}"
        );
        *start = ip;
        instr += 1;
    };
    for e in events {
        match *e {
            Event::Ptwrite { ip, len, .. } => {
                if !(after_ptwrite && ip == start) {
                    new_instruction(ip, flow, &mut start);
                }
                assert_eq!(ip, start, "Ptwrite IP is the instruction's IP");
                assert!((1..=15).contains(&len));
                ptw += 1;
                after_ptwrite = true;
                flow = Some(ip + u64::from(len));
            }
            Event::IndirectJump { ip, target } => {
                if !(after_ptwrite && ip == start) {
                    new_instruction(ip, flow, &mut start);
                }
                assert!(
                    !(1..=15).contains(&target.wrapping_sub(ip)),
                    "a jump is a discontinuity"
                );
                jumps += 1;
                after_ptwrite = false;
                flow = Some(target);
            }
            Event::Retire { ip, len } => {
                new_instruction(ip, flow, &mut start);
                assert!((1..=15).contains(&len));
                after_ptwrite = false;
                flow = Some(ip + u64::from(len));
            }
            Event::Cycles(n) => assert!(n > 0),
            other => panic!("unexpected {other:?}"),
        }
    }
    (ptw, jumps, instr)
}

#[test]
fn dep_sample_maps_to_consistent_events() {
    let input = Input::open(Path::new(DEP)).unwrap();
    let fetch = Input::open(Path::new(FETCH)).unwrap();
    let mut ev = Gem5Events::new(input, Some(fetch), ReadOptions::default()).unwrap();
    let start = ev.start_state();
    assert_eq!((start.mode, start.cpl), (ExecMode::Bits64, 3));
    let (events, _) = drain(&mut ev).unwrap();
    let (ptw, jumps, instr) = check_invariants(&events, true);
    let s = ev.stats();
    assert_eq!(s.records, 183_286 + 25_471);
    assert_eq!(s.skipped, 0);
    assert_eq!(
        (
            s.count("comp"),
            s.count("load"),
            s.count("store"),
            s.count("fetch")
        ),
        (137_110, 35_247, 10_929, 25_471)
    );
    assert_eq!(ptw, 35_247 + 10_929, "one Ptwrite per load and store");
    // From the independent Python walk (see the comment above dep_sample_counts).
    assert_eq!((s.count("instructions"), instr), (107_926, 107_926));
    assert_eq!((s.count("discontinuities"), jumps), (12_578, 12_578));
    assert_eq!(s.count("filtered_weight"), 19_855);
    assert_eq!(s.approximations.len(), 4);
    // Ticks → cycles at 2 GHz: the sum of comp_delay / 500 ps.
    let mut total_delay = 0u64;
    let mut r = open(DEP);
    while let Some(Record::Dep(d)) = r.next_record().unwrap() {
        total_delay += d.comp_delay;
    }
    let cycles: u64 = events
        .iter()
        .map(|e| if let Event::Cycles(n) = e { *n } else { 0 })
        .sum();
    assert_eq!(cycles, total_delay / 500);
}

/// The pair is told apart by the headers: given the other way round (the fetch trace as the input,
/// the dep trace with `--fetch-trace`) it maps to the same events and counts; two traces of one
/// kind are refused, naming the second file and the header's offset.
#[test]
fn a_gem5_pair_is_taken_either_way_round_and_two_of_one_kind_are_refused() {
    let run = |main: &str, other: &str| {
        let mut ev = Gem5Events::new(
            Input::open(Path::new(main)).unwrap(),
            Some(Input::open(Path::new(other)).unwrap()),
            ReadOptions::default(),
        )
        .unwrap();
        let (events, _) = drain(&mut ev).unwrap();
        (events, ev.stats().counts)
    };
    let (ev_dep_first, counts_dep_first) = run(DEP, FETCH);
    let (ev_fetch_first, counts_fetch_first) = run(FETCH, DEP);
    assert_eq!(counts_dep_first, counts_fetch_first);
    assert!(ev_dep_first == ev_fetch_first, "the same events either way round");
    for (a, b, kind) in [
        (DEP, DEP, "an elastic data trace"),
        (FETCH, FETCH, "an instruction-fetch trace"),
    ] {
        let e = Gem5Events::new(
            Input::open(Path::new(a)).unwrap(),
            Some(Input::open(Path::new(b)).unwrap()),
            ReadOptions::default(),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(&format!("{b}: byte offset 4: ")), "{text}");
        assert!(text.contains(kind), "{text}");
        assert!(matches!(e.kind, ErrorKind::BadMagic), "{e:?}");
    }
}

#[test]
fn indirect_jump_targets_are_the_next_pc() {
    let recs = dep_records(&mut open(DEP));
    let mut ev = Gem5Events::new(Input::open(Path::new(DEP)).unwrap(), None, ReadOptions::default()).unwrap();
    let (events, _) = drain(&mut ev).unwrap();
    // The distinct pcs in order, and the jumps' (from, to) pairs.
    let mut pcs: Vec<u64> = recs.iter().map(|d| d.pc.unwrap()).collect();
    pcs.dedup();
    let expected: Vec<(u64, u64)> = pcs
        .windows(2)
        .filter(|w| !(1..=15).contains(&w[1].wrapping_sub(w[0])))
        .map(|w| (w[0], w[1]))
        .collect();
    let jumps: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match *e {
            Event::IndirectJump { ip, target } => Some((ip, target)),
            _ => None,
        })
        .collect();
    assert_eq!(jumps, expected);
}

#[test]
fn fetch_trace_alone_maps() {
    let mut ev = Gem5Events::new(
        Input::open(Path::new(FETCH)).unwrap(),
        None,
        ReadOptions::default(),
    )
    .unwrap();
    let (events, _) = drain(&mut ev).unwrap();
    // Not strict: a sequential fetch more than 15 bytes on gets the default length (documented).
    let (ptw, jumps, instr) = check_invariants(&events, false);
    let s = ev.stats();
    assert_eq!((s.records, s.count("fetch"), ptw), (25_471, 25_471, 0));
    assert_eq!(s.count("discontinuities"), jumps);
    assert_eq!(s.count("instructions"), instr);
    assert!(jumps > 0 && jumps < instr);
    // The last fetch tick at 2 GHz.
    let last = packets(&mut open(FETCH)).last().unwrap().tick;
    let cycles: u64 = events
        .iter()
        .map(|e| if let Event::Cycles(n) = e { *n } else { 0 })
        .sum();
    assert_eq!(cycles, last / 500);
}

/// The first `limit` events through the tracer (user tracing, PTWRITE and CYC on); libipt's
/// packet decoder must read the result without an error.
fn trace_through_libipt(src: &mut dyn EventSource, limit: usize) -> usize {
    let start = src.start_state();
    let mut events = Vec::new();
    let mut batch = Vec::new();
    while events.len() < limit && src.next_events(&mut batch).unwrap() {
        events.append(&mut batch);
    }
    events.truncate(limit);
    let n = events.len();
    let bytes = TraceRig::new(TracerConfig::default()).trace_events(
        (start.cpl, start.cr3, start.mode),
        RtitCtl::new()
            .with_branch_en(true)
            .with_user(true)
            .with_ptw_en(true)
            .with_fup_on_ptw(true)
            .with_cyc_en(true),
        &events,
    );
    let packets = common::libipt::decode(&bytes).expect("libipt decodes the stream");
    assert!(packets.len() > n / 10, "{} packets for {n} events", packets.len());
    n
}

#[test]
fn dep_sample_events_trace_to_a_stream_libipt_reads() {
    let mut ev = Gem5Events::new(Input::open(Path::new(DEP)).unwrap(), None, ReadOptions::default()).unwrap();
    assert!(trace_through_libipt(&mut ev, 20_000) >= 20_000);
}

#[test]
fn generated_events_trace_to_a_stream_libipt_reads() {
    let (dep, fetch) = gen_bytes(10_000, 11);
    let mut ev = Gem5Events::new(
        Input::from_bytes("gen.dep", dep).unwrap(),
        Some(Input::from_bytes("gen.fetch", fetch.clone()).unwrap()),
        ReadOptions::default(),
    )
    .unwrap();
    let n = trace_through_libipt(&mut ev, usize::MAX);
    assert!(n > 10_000);
    let s = ev.stats();
    assert_eq!(s.count("load") + s.count("store") + s.count("comp"), 10_000);
    assert!(s.count("discontinuities") > 100 && s.count("filtered_weight") > 100);
    let mut only_fetch = Gem5Events::new(
        Input::from_bytes("gen.fetch", fetch).unwrap(),
        None,
        ReadOptions::default(),
    )
    .unwrap();
    trace_through_libipt(&mut only_fetch, usize::MAX);
}

/// Everything a source maps to the end or its first error, the error's text, and its stats then.
fn mapped(mut ev: Gem5Events) -> (Vec<Event>, Option<String>, ptemu::sources::SourceStats) {
    let mut all = Vec::new();
    let err = ev
        .for_each_event(&mut |e| all.push(*e))
        .err()
        .map(|e| e.to_string());
    (all, err, ev.stats())
}

/// `Gem5Events` over the pair `open` makes, decoded ahead by `workers`, or read here.
fn gem5_events(
    open: &dyn Fn() -> (Input, Option<Input>),
    options: ReadOptions,
    workers: Option<usize>,
) -> Gem5Events {
    let (input, companion) = open();
    match workers {
        Some(n) => Gem5Events::decoded_ahead(input, companion, options, n).unwrap(),
        None => Gem5Events::new(input, companion, options).unwrap(),
    }
}

/// SIM20: what `open`'s inputs map to decoded ahead by 1, 2 or 3 workers is what they map to read
/// here (events, error text, stats); returns the latter.
fn assert_ahead_maps_as_here(
    what: &str,
    options: ReadOptions,
    open: &dyn Fn() -> (Input, Option<Input>),
) -> (Vec<Event>, Option<String>, ptemu::sources::SourceStats) {
    let here = mapped(gem5_events(open, options, None));
    for workers in 1..=3 {
        let ahead = mapped(gem5_events(open, options, Some(workers)));
        assert!(
            here == ahead,
            "{what}, lenient {}, {workers} workers: {:?} vs {:?}",
            options.lenient,
            (&here.1, here.0.len(), &here.2),
            (&ahead.1, ahead.0.len(), &ahead.2)
        );
    }
    here
}

/// SIM20: a gem5 trace decoded ahead by 1 to 3 workers maps as on one thread: the same events,
/// error text and stats (records, skipped, counts), strict and lenient, over several blocks,
/// for a dep and fetch pair, a fetch trace alone, a bad record in the middle, lost framing at
/// the end, and a trace without records.
#[test]
fn sim20_gem5_decoded_ahead_maps_as_on_one_thread() {
    // About 3 blocks each.
    let n = DECODE_BLOCK as u64 / 4;
    let (dep, fetch) = gen_bytes(n, 11);
    let mut records: Vec<InstDepRecord> = (0..n).map(|i| comp(i, 0x1000 + 4 * (i % 300))).collect();
    let (bad_at, lost_at) = (n as usize / 2, n as usize * 2 / 3);
    records[bad_at].r#type = 7;
    let (bad, _) = dep_trace(&records);
    assert!(bad.len() > 2 * DECODE_BLOCK);
    let (mut lost, _) = dep_trace(&records[..lost_at]);
    lost.extend([0xff, 0xff, 0xff, 0xff, 0x7f]);
    let (empty, _) = dep_trace(&[]);
    // (what, main trace, companion)
    type Case<'a> = (&'a str, Vec<u8>, Option<Vec<u8>>);
    let cases: Vec<Case> = vec![
        ("pair", dep.clone(), Some(fetch.clone())),
        ("fetch alone", fetch.clone(), None),
        ("bad record", bad, None),
        ("lost framing", lost, None),
        ("empty", empty, None),
    ];
    for (what, main, companion) in cases {
        for lenient in [false, true] {
            let options = ReadOptions { lenient };
            let here = assert_ahead_maps_as_here(what, options, &|| {
                let input = Input::from_bytes("m.trace", main.clone()).unwrap();
                let companion = companion
                    .clone()
                    .map(|c| Input::from_bytes("c.trace", c).unwrap());
                (input, companion)
            });
            if what == "bad record" {
                assert_eq!(here.1.is_some(), !lenient, "{:?}", here.1);
                assert_eq!(here.2.skipped, u64::from(lenient));
            }
            if what == "lost framing" {
                assert!(here.1.is_some(), "lost framing is an error even when lenient");
            }
        }
    }
}

/// Bytes, then a read error (a pipe that breaks), or a panic.
struct Breaks {
    bytes: std::io::Cursor<Vec<u8>>,
    panics: bool,
}

impl std::io::Read for Breaks {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = std::io::Read::read(&mut self.bytes, out)?;
        assert!(n > 0 || !self.panics, "the reader broke");
        if n == 0 {
            return Err(std::io::Error::other("pipe broke"));
        }
        Ok(n)
    }
}

/// SIM20: decoded ahead as on one thread also for a read error mid-file (strict and lenient)
/// and gzip'd traces (a pair, and one cut short); a panic in the decoding thread goes on in the
/// mapping's thread.
#[test]
fn sim20_read_errors_gzip_and_panics_as_on_one_thread() {
    let (dep, fetch) = gen_bytes(DECODE_BLOCK as u64 / 9, 11);
    let cut = dep.len() * 2 / 3;
    let gz = |b: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let mut gz_cut = gz(&dep);
    gz_cut.truncate(gz_cut.len() * 2 / 3);
    for lenient in [false, true] {
        let options = ReadOptions { lenient };
        for what in ["broken", "gzip pair", "gzip cut"] {
            let here = assert_ahead_maps_as_here(what, options, &|| match what {
                "broken" => {
                    let r = Breaks {
                        bytes: std::io::Cursor::new(dep[..cut].to_vec()),
                        panics: false,
                    };
                    (Input::from_reader("m", r).unwrap(), None)
                }
                "gzip pair" => (
                    Input::from_bytes("m", gz(&dep)).unwrap(),
                    Some(Input::from_bytes("c", gz(&fetch)).unwrap()),
                ),
                _ => (Input::from_bytes("m", gz_cut.clone()).unwrap(), None),
            });
            assert_eq!(here.1.is_some(), what != "gzip pair", "{what}: {:?}", here.1);
        }
    }
    let r = Breaks {
        bytes: std::io::Cursor::new(dep[..cut].to_vec()),
        panics: true,
    };
    let ev = Gem5Events::decoded_ahead(
        Input::from_reader("m", r).unwrap(),
        None,
        ReadOptions::default(),
        2,
    )
    .unwrap();
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || mapped(ev)))
        .expect_err("the panic goes on");
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
    assert!(text.is_some_and(|t| t.contains("the reader broke")));
}

/// A bad record, then an input that stalls (a pipe whose writer waits): the error arrives while
/// the input stalls, decoded ahead as on one thread.
struct Stalls {
    bytes: std::io::Cursor<Vec<u8>>,
    wait: std::sync::mpsc::Receiver<()>,
    /// The most bytes a read gives.
    most: usize,
}

impl std::io::Read for Stalls {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let most = out.len().min(self.most);
        let n = std::io::Read::read(&mut self.bytes, &mut out[..most])?;
        if n == 0 {
            let _ = self.wait.recv();
        }
        Ok(n)
    }
}

/// SIM20: an error a decoding worker found is not held back by an input that stalls after it,
/// whether the input came in one read or in reads of 7 bytes (the bad record's block then holds
/// the one message that ran past the buffer).
#[test]
fn sim20_an_error_before_a_stall_arrives() {
    let mut records: Vec<InstDepRecord> = (0..100).map(|i| comp(i, 0x1000 + 4 * (i % 30))).collect();
    records[50].r#type = 7;
    let (bad, offsets) = dep_trace(&records);
    // The input stalls right after the bad record, or a record later.
    let cases = [(offsets[51], usize::MAX), (offsets[51], 7), (offsets[52], 7)];
    for ((end, most), workers) in cases
        .into_iter()
        .flat_map(|c| [(c, None), (c, Some(1)), (c, Some(2))])
    {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let bad = bad[..end as usize].to_vec();
        std::thread::spawn(move || {
            let r = Stalls {
                bytes: std::io::Cursor::new(bad),
                wait,
                most,
            };
            let input = Input::from_reader("m", r).unwrap();
            let ev = match workers {
                Some(n) => Gem5Events::decoded_ahead(input, None, ReadOptions::default(), n).unwrap(),
                None => Gem5Events::new(input, None, ReadOptions::default()).unwrap(),
            };
            let _ = done_tx.send(mapped(ev).1);
        });
        let got = done_rx.recv_timeout(std::time::Duration::from_secs(20));
        drop(release);
        let error = got.expect("the error arrives while the input stalls");
        assert!(
            error.is_some_and(|e| e.contains("type 7")),
            "workers {workers:?}, stall at {end}, reads of {most}"
        );
    }
}

/// Bytes in reads of a few sizes in turn, so that the input's buffer often ends inside a message
/// (or its length prefix).
struct Chops {
    bytes: std::io::Cursor<Vec<u8>>,
    sizes: Vec<usize>,
    next: usize,
}

impl std::io::Read for Chops {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let size = self.sizes[self.next % self.sizes.len()];
        self.next += 1;
        let n = size.min(out.len());
        std::io::Read::read(&mut self.bytes, &mut out[..n])
    }
}

/// SIM20: blocks cut anywhere decode as on one thread. The input comes in reads of 1 to 300
/// bytes, so messages and their length prefixes run past the input's buffer (a block then takes
/// the one message, framed as the reader frames it), or of 1 MiB (the trace is longer than a
/// block, which the block size then cuts); messages of 1 and 2-byte prefixes, one
/// prefix padded to a longer varint than it needs (the offsets after it move by a byte), bad
/// records before and after it (their offsets are in the error text), and a trace cut inside a
/// message at the end; 1 to 3 workers, strict and lenient, plain and gzip'd.
#[test]
fn sim20_blocks_cut_anywhere_decode_as_on_one_thread() {
    let n = 24_000;
    let mut records: Vec<InstDepRecord> = (0..n).map(|i| comp(i, 0x1000 + 4 * (i % 300))).collect();
    for i in (7..n).step_by(97) {
        // About 170 bytes: a two-byte length prefix.
        records[i as usize].rob_dep = (0..40).map(|d| 1_000_000 + d).collect();
    }
    records[1_000].r#type = 7;
    records[9_000].r#type = 9;
    let (trace, offsets) = dep_trace(&records);
    // With reads of 1 MiB, the block size cuts it.
    assert!(trace.len() > DECODE_BLOCK, "{}", trace.len());
    // Record 1,500's one-byte length prefix, written in two bytes.
    let at = offsets[1_500] as usize;
    let len = trace[at];
    assert!(len < 0x80);
    let mut padded = trace[..at].to_vec();
    padded.extend([len | 0x80, 0x00]);
    padded.extend(&trace[at + 1..]);
    let mut cut = padded.clone();
    cut.truncate(cut.len() - 5);
    let gz = |b: &[u8]| {
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    const SIZES: [&[usize]; 3] = [&[1, 2, 3], &[7, 300, 13, 1, 64], &[1 << 20]];
    for (what, bytes) in [("padded", padded), ("cut", cut)] {
        for sizes in SIZES {
            for gzip in [false, true] {
                let body = if gzip { gz(&bytes) } else { bytes.clone() };
                for lenient in [false, true] {
                    let options = ReadOptions { lenient };
                    let here = assert_ahead_maps_as_here(what, options, &|| {
                        let r = Chops {
                            bytes: std::io::Cursor::new(body.clone()),
                            sizes: sizes.to_vec(),
                            next: 0,
                        };
                        (Input::from_reader("m", r).unwrap(), None)
                    });
                    let error = here.1.unwrap_or_default();
                    if lenient {
                        assert_eq!(here.2.skipped, 2, "{what}");
                        assert_eq!(error.contains("runs past the end"), what == "cut", "{error}");
                    } else {
                        assert!(error.contains("type 7"), "{error}");
                    }
                }
            }
        }
    }
}

/// Everything `open`'s input maps to, decoded ahead by `workers` or read here, or the error that
/// stops it opening.
fn mapped_or_not(
    open: &dyn Fn() -> Input,
    options: ReadOptions,
    workers: Option<usize>,
) -> Result<(Vec<Event>, Option<String>, ptemu::sources::SourceStats), String> {
    let events = match workers {
        Some(n) => Gem5Events::decoded_ahead(open(), None, options, n),
        None => Gem5Events::new(open(), None, options),
    };
    events.map(mapped).map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// SIM20: a spoiled trace (bytes overwritten anywhere, the header and length prefixes
    /// included, and cut short anywhere), in reads of any sizes, maps decoded ahead by 1 to 3
    /// workers as on one thread: the same events, error text and stats, strict and lenient.
    #[test]
    fn sim20_spoiled_traces_decode_ahead_as_on_one_thread(
        seed in 0u64..1_000,
        spoils in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 0..6),
        keep in 0.3f64..=1.0,
        sizes in proptest::collection::vec(1usize..400, 1..5),
        lenient: bool,
    ) {
        let (mut bytes, _) = gen_bytes(1_500, seed);
        for (at, b) in spoils {
            let i = ((bytes.len() as f64 * at) as usize).min(bytes.len() - 1);
            bytes[i] = b;
        }
        bytes.truncate((bytes.len() as f64 * keep) as usize);
        let open = || {
            let r = Chops {
                bytes: std::io::Cursor::new(bytes.clone()),
                sizes: sizes.clone(),
                next: 0,
            };
            Input::from_reader("m", r).unwrap()
        };
        let options = ReadOptions { lenient };
        let here = mapped_or_not(&open, options, None);
        for workers in 1..=3 {
            let ahead = mapped_or_not(&open, options, Some(workers));
            prop_assert!(here == ahead, "{} workers: {:?} vs {:?}", workers,
                here.as_ref().map(|h| (&h.1, h.0.len(), &h.2)),
                ahead.as_ref().map(|h| (&h.1, h.0.len(), &h.2)));
        }
    }
}

/// SIM20: a trace dense with bad messages (runs of zero bytes: each an empty message, which lacks
/// the required fields) maps decoded ahead as on one thread, strict and lenient. A worker keeps
/// at most 512 errors of a block and leaves the rest to the mapping's side, in steps of as many;
/// the runs hold thousands of errors per block, so the rest is taken up several times.
#[test]
fn sim20_dense_errors_decode_ahead_as_on_one_thread() {
    let records: Vec<InstDepRecord> = (0..6_000).map(|i| comp(i, 0x1000 + 4 * (i % 300))).collect();
    let (trace, offsets) = dep_trace(&records);
    let mut bytes = Vec::new();
    let mut from = 0;
    for (k, &at) in offsets.iter().step_by(1_500).enumerate().skip(1) {
        bytes.extend(&trace[from..at as usize]);
        bytes.extend(std::iter::repeat_n(0u8, 3_000 * k));
        from = at as usize;
    }
    bytes.extend(&trace[from..]);
    // Also through a mapped file, whose buffer is the whole rest of the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dense.trace");
    std::fs::write(&file, &bytes).unwrap();
    for mapped in [false, true] {
        for lenient in [false, true] {
            let options = ReadOptions { lenient };
            let here = assert_ahead_maps_as_here("zeros", options, &|| match mapped {
                true => (Input::open(&file).unwrap(), None),
                false => (Input::from_bytes("m", bytes.clone()).unwrap(), None),
            });
            if lenient {
                assert_eq!(here.2.skipped, 3_000 * (1 + 2 + 3));
            } else {
                assert!(here.1.is_some_and(|e| e.contains("lacks required")));
            }
        }
    }
}

/// SIM20, the fuzz targets' check (`sources::read_arbitrary`): with 1 to 3 workers chosen by the
/// mode byte, the workers give what one thread gives, on the sample pair, a generated trace, and
/// both spoiled at a few places and cut short.
#[test]
fn sim20_fuzz_body_compares_workers_with_one_thread() {
    let sample = std::fs::read(DEP).unwrap();
    let (generated, _) = gen_bytes(3_000, 4);
    let mut inputs = vec![sample, generated.clone()];
    for at in [10, 500, 20_000] {
        let mut b = generated.clone();
        b[at] ^= 0x5a;
        inputs.push(b);
    }
    inputs.push(generated[..generated.len() / 2].to_vec());
    for bytes in inputs {
        for mode in 0..8u8 {
            let data = [&[mode][..], &bytes].concat();
            ptemu::sources::read_arbitrary(ptemu::sources::Format::Gem5, &data);
        }
    }
}
