//! The Kaplan page-image reader: records, errors, the LRU generator and the mapping to #PF
//! events, checked through the tracer and libipt's packet decoder.

mod common;

use common::sources::drain;

use common::trace::*;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use ptemu::regs::RtitCtl;
use ptemu::sources::kaplan::{self, Evicted, Record, PAGE_SIZE};
use ptemu::sources::{ErrorKind, EventSource, Input, ReadOptions, SourceError};
use ptemu::tracer::{Event, ExecMode, FarKind, TracerConfig};
use std::collections::HashMap;
use std::io::Write;

const STRICT: ReadOptions = ReadOptions { lenient: false };
const LENIENT: ReadOptions = ReadOptions { lenient: true };

/// An owned copy of a record: (compulsory, page, image, (evicted page, dirty, image)).
type Owned = (bool, u16, Vec<u8>, Option<(u16, bool, Vec<u8>)>);

fn input(name: &str, bytes: Vec<u8>) -> Input {
    Input::from_bytes(name, bytes).unwrap()
}

fn records(name: &str, bytes: Vec<u8>) -> Result<Vec<Owned>, SourceError> {
    let mut r = kaplan::Reader::new(input(name, bytes));
    let mut v = Vec::new();
    while let Some(rec) = r.next_record()? {
        v.push((
            rec.compulsory,
            rec.page,
            rec.image.to_vec(),
            rec.evicted.map(|e| (e.page, e.dirty, e.image.to_vec())),
        ));
    }
    Ok(v)
}

fn write(recs: &[Owned]) -> Vec<u8> {
    let mut w = kaplan::Writer::new(Vec::new());
    for (c, page, image, ev) in recs {
        let image: &[u8; PAGE_SIZE] = image.as_slice().try_into().unwrap();
        let evicted = ev.as_ref().map(|(p, d, im)| Evicted {
            page: *p,
            dirty: *d,
            image: im.as_slice().try_into().unwrap(),
        });
        w.write(&Record {
            compulsory: *c,
            page: *page,
            image,
            evicted,
        })
        .unwrap();
    }
    w.into_inner()
}

fn gen(records: u64, seed: u64) -> Vec<u8> {
    let mut v = Vec::new();
    kaplan::generate(records, seed, &mut v).unwrap();
    v
}

/// A hand-built file: C 0001 (N), C 0002 (N), F 0001 evicting 0002 dirty ("W").
fn hand() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(b"C0001");
    v.extend_from_slice(&[0x11; PAGE_SIZE]);
    v.extend_from_slice(b"N0000");
    v.extend_from_slice(b"C00AB");
    v.extend_from_slice(&[0x22; PAGE_SIZE]);
    v.extend_from_slice(b"N0000");
    v.extend_from_slice(b"Cbeef");
    v.extend_from_slice(&[0x33; PAGE_SIZE]);
    v.extend_from_slice(b"W00ab");
    v.extend_from_slice(&[0x44; PAGE_SIZE]);
    v
}

#[test]
fn hand_built_records_read_as_laid_out() {
    let recs = records("h", hand()).unwrap();
    assert_eq!(recs.len(), 3);
    assert_eq!(
        (recs[0].0, recs[0].1, recs[0].2[0], recs[0].3.is_none()),
        (true, 1, 0x11, true)
    );
    assert_eq!(recs[1].1, 0xab, "upper-case hex");
    let (_, page, image, ev) = &recs[2];
    assert_eq!((*page, image[4095]), (0xbeef, 0x33));
    let (ep, dirty, eimage) = ev.as_ref().unwrap();
    assert_eq!(
        (*ep, *dirty, eimage[0], eimage.len()),
        (0xab, true, 0x44, PAGE_SIZE)
    );
    assert_eq!(kaplan::SHORT_RECORD_LEN, 4106);
    assert_eq!(kaplan::LONG_RECORD_LEN, 8202);
}

#[test]
fn round_trips_give_the_same_records() {
    for bytes in [hand(), gen(300, 4)] {
        let recs = records("a", bytes.clone()).unwrap();
        let again = write(&recs);
        assert_eq!(records("b", again).unwrap(), recs);
    }
    let g = gen(300, 4);
    assert_eq!(
        write(&records("g", g.clone()).unwrap()),
        g,
        "generated files come back byte for byte"
    );
}

#[test]
fn generator_is_seeded() {
    assert_eq!(gen(200, 1), gen(200, 1));
    assert_ne!(gen(200, 1), gen(200, 2));
    assert_eq!(records("g", gen(500, 1)).unwrap().len(), 500);
}

#[test]
fn generator_output_obeys_lru() {
    // An independent LRU: last-use times in a map, the victim is the smallest time.
    for (seed, m) in [(1u64, kaplan::GEN_MEMORY_PAGES), (2, 8), (3, 100)] {
        let mut bytes = Vec::new();
        kaplan::generate_with(600, seed, m, &mut bytes).unwrap();
        let got = records("g", bytes).unwrap();
        let mut want = Vec::new();
        let mut last_use: HashMap<u16, u64> = HashMap::new();
        let mut dirty: HashMap<u16, bool> = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for (t, (page, w)) in kaplan::references(seed).enumerate() {
            if want.len() == got.len() {
                break;
            }
            if let std::collections::hash_map::Entry::Occupied(mut e) = last_use.entry(page) {
                e.insert(t as u64);
                *dirty.get_mut(&page).unwrap() |= w;
                continue;
            }
            let evicted = (last_use.len() == m).then(|| {
                let (&victim, _) = last_use.iter().min_by_key(|&(_, &t)| t).unwrap();
                last_use.remove(&victim);
                (victim, dirty.remove(&victim).unwrap())
            });
            want.push((seen.insert(page), page, evicted));
            last_use.insert(page, t as u64);
            dirty.insert(page, w);
        }
        let got: Vec<_> = got
            .iter()
            .map(|(c, p, _, e)| (*c, *p, e.as_ref().map(|e| (e.0, e.1))))
            .collect();
        assert_eq!(got, want, "seed {seed}, M = {m}");
        assert!(got.iter().any(|r| !r.0) && got.iter().any(|r| r.2.is_some_and(|e| e.1)));
        assert!(got.iter().any(|r| r.2.is_some_and(|e| !e.1)));
    }
}

#[test]
fn gzip_is_read_whatever_the_name() {
    let bytes = gen(50, 5);
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&bytes).unwrap();
    let z = gz.finish().unwrap();
    assert_eq!(records("pages.trace", z).unwrap(), records("x", bytes).unwrap());
}

fn err(name: &str, bytes: Vec<u8>) -> SourceError {
    records(name, bytes).unwrap_err()
}

#[test]
fn bad_input_names_file_record_and_offset() {
    let second = 4106; // offset of record 2 in hand()
    let third = 2 * 4106;
    let mut b = hand();
    b.truncate(third + 5 + 4096 + 5 + 100);
    let e = err("trunc.kt", b);
    assert!(matches!(e.kind, ErrorKind::Truncated));
    let t = e.to_string();
    assert!(
        t.contains("trunc.kt") && t.contains(&format!("record 3 (byte offset {third})")),
        "{t}"
    );
    assert!(t.contains("evicted page image: 100 of 4096"), "{t}");

    let mut b = hand();
    b.truncate(second + 5 + 10);
    let t = err("t2", b).to_string();
    assert!(
        t.contains("fetched page image: 10 of 4096") && t.contains("record 2"),
        "{t}"
    );

    let mut b = hand();
    b[second] = b'X';
    let e = err("tag.kt", b);
    assert!(matches!(e.kind, ErrorKind::LostFraming));
    let t = e.to_string();
    assert!(
        t.contains("tag.kt") && t.contains(&format!("record 2 (byte offset {second})")),
        "{t}"
    );
    assert!(t.contains("compulsory tag 'X'"), "{t}");

    let mut b = hand();
    b[second + 5 + 4096] = b'Q';
    let e = err("wrn.kt", b);
    assert!(matches!(e.kind, ErrorKind::LostFraming));
    assert!(
        e.to_string().contains("dirtiness tag 'Q'") && e.to_string().contains("record 2"),
        "{e}"
    );

    let mut b = hand();
    b[second + 5 + 4096 + 4] = b'7';
    let e = err("n.kt", b.clone());
    assert!(matches!(e.kind, ErrorKind::BadField));
    let t = e.to_string();
    assert!(
        t.contains("n.kt") && t.contains("record 2") && t.contains("\"0007\""),
        "{t}"
    );
    // Leniently the record is skipped and the next one read.
    let (events, stats) = drain(&mut kaplan::KaplanEvents::new(input("n.kt", b), LENIENT).unwrap()).unwrap();
    assert_eq!(
        (stats.records, stats.skipped),
        (3, 2),
        "the skip makes record 3's eviction inconsistent"
    );
    assert_eq!(events.len(), 2);

    let mut b = hand();
    b[second + 2] = b'g';
    let e = err("hex.kt", b);
    assert!(matches!(e.kind, ErrorKind::LostFraming));
    assert!(
        e.to_string().contains("\"0gAB\"") && e.to_string().contains("byte offset 4106"),
        "{e}"
    );
}

#[test]
fn inconsistent_sequences_fail_strictly_and_skip_leniently() {
    let mut b = hand();
    b[2 * 4106] = b'C'; // already C; make record 3 re-fault page 0001 tagged C
    b[2 * 4106 + 1..2 * 4106 + 5].copy_from_slice(b"0001");
    let e = drain(&mut kaplan::KaplanEvents::new(input("inc.kt", b.clone()), STRICT).unwrap()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Inconsistent));
    assert!(
        e.to_string().contains("inc.kt") && e.to_string().contains("record 3"),
        "{e}"
    );
    let (_, stats) = drain(&mut kaplan::KaplanEvents::new(input("inc.kt", b), LENIENT).unwrap()).unwrap();
    assert_eq!((stats.skipped, stats.count("inconsistent")), (1, 1));
}

#[test]
fn every_record_is_one_page_fault_with_cr2() {
    let bytes = gen(400, 6);
    let recs = records("g", bytes.clone()).unwrap();
    let (events, stats) = drain(&mut kaplan::KaplanEvents::new(input("g", bytes), STRICT).unwrap()).unwrap();
    let faults: Vec<u64> = events
        .iter()
        .filter_map(|e| match *e {
            Event::Far {
                kind: FarKind::Exception { vector: 14, cr2 },
                from,
                to,
                cpl: 0,
                ..
            } => {
                assert_eq!((from, to), (kaplan::FAULT_IP, kaplan::HANDLER_IP));
                cr2
            }
            _ => None,
        })
        .collect();
    let pages: Vec<u64> = recs.iter().map(|r| u64::from(r.1) << 12).collect();
    assert_eq!(faults, pages);
    let irets = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Far {
                    kind: FarKind::Iret,
                    ..
                }
            )
        })
        .count();
    assert_eq!(irets, recs.len());
    let ptws: Vec<u64> = events
        .iter()
        .filter_map(|e| {
            if let Event::Ptwrite { payload, .. } = e {
                Some(*payload)
            } else {
                None
            }
        })
        .collect();
    let evictions: Vec<u64> = recs
        .iter()
        .filter_map(|r| r.3.as_ref().map(|e| kaplan::evict_payload(e.0, e.1)))
        .collect();
    assert_eq!(ptws, evictions);
    assert_eq!(stats.count("compulsory") + stats.count("refault"), 400);
    assert_eq!(
        stats.count("evict_dirty") + stats.count("evict_clean"),
        evictions.len() as u64
    );
    assert_eq!(stats.count("no_evict"), kaplan::GEN_MEMORY_PAGES as u64);
}

#[test]
fn traced_events_decode_with_libipt() {
    let (events, _) =
        drain(&mut kaplan::KaplanEvents::new(input("g", gen(150, 8)), STRICT).unwrap()).unwrap();
    let mut r = TraceRig::new(TracerConfig::default());
    r.tracer.set_state(WRMSR_IP, 3, 0, ExecMode::Bits32);
    r.start(
        RtitCtl::new()
            .with_branch_en(true)
            .with_os(true)
            .with_user(true)
            .with_ptw_en(true)
            .with_event_en(true),
    );
    r.ev(Event::IndirectJump {
        ip: WRMSR_IP + u64::from(WRMSR_LEN),
        target: kaplan::FAULT_IP,
    });
    r.evs(&events);
    r.stop_at(kaplan::FAULT_IP);
    let packets = common::libipt::decode(&r.bytes()).expect("libipt decodes the Kaplan stream");
    let n = |name: &str| packets.iter().filter(|(p, _)| p.name() == name).count();
    assert_eq!(n("evd"), 150, "one CR2 per fault");
    assert_eq!(n("cfe"), 300, "a CFE for each #PF and each IRET");
    assert!(n("ptw") > 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn arbitrary_bytes_never_panic(
        head in proptest::sample::select(vec![&b"C0001"[..], b"F00ff", b"Xzz", b""]),
        body in proptest::collection::vec(any::<u8>(), 0..9000),
        wrn in proptest::sample::select(vec![&b"N0000"[..], b"W0001", b"R12", b"Nabcd"]),
        tail in proptest::collection::vec(any::<u8>(), 0..200),
        lenient: bool,
    ) {
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(&body);
        if body.len() >= PAGE_SIZE {
            bytes.truncate(head.len() + PAGE_SIZE);
            bytes.extend_from_slice(wrn);
        }
        bytes.extend_from_slice(&tail);
        let n = bytes.len();
        let mut src = kaplan::KaplanEvents::new(input("p", bytes), ReadOptions { lenient }).unwrap();
        let mut out = Vec::new();
        let mut calls = 0;
        while let Ok(true) = src.next_events(&mut out) {
            calls += 1;
            prop_assert!(calls <= n / kaplan::SHORT_RECORD_LEN + 1);
        }
    }
}
