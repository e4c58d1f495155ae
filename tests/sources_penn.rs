//! The Penn CIS 501 reader, writer, generator and mapping (`spec/mapping.md`, section Penn).

mod common;

use common::sources::drain;

use common::query::{error_name, Query, Timing};
use common::trace::TraceRig;
use flate2::{write::GzEncoder, Compression};
use proptest::prelude::*;
use ptemu::sources::penn::{
    self, BranchKind, MacroOp, MacroOpReader, PennEvents, Uop, UopReader, UopWriter, PARSE_BLOCK,
};
use ptemu::sources::{ErrorKind, EventSource, Input, ReadOptions, SourceError};
use ptemu::{Event, RtitCtl, TracerConfig};
use std::io::Write;

const SJENG: &str = "tests/data/penn/sjeng-1K.trace";
const GCC: &str = "tests/data/penn/gcc-1K.trace";
const HANDEDITED: &str = "tests/data/penn/CSC656-test-handedited.trace";

fn input(path: &str) -> Input {
    Input::open(std::path::Path::new(path)).unwrap()
}

fn bytes_input(name: &str, bytes: &[u8]) -> Input {
    Input::from_bytes(name, bytes.to_vec()).unwrap()
}

fn uops(mut r: UopReader) -> Result<Vec<Uop>, SourceError> {
    let mut v = Vec::new();
    while let Some((_, u)) = r.next_uop()? {
        v.push(u);
    }
    Ok(v)
}

fn macro_ops(i: Input, options: ReadOptions) -> Result<Vec<MacroOp>, SourceError> {
    let mut r = MacroOpReader::new(UopReader::new(i, options));
    let mut v = Vec::new();
    while let Some(m) = r.next_macro_op()? {
        v.push(m);
    }
    Ok(v)
}

fn generated(records: u64, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    penn::generate(records, seed, &mut out).unwrap();
    out
}

/// Figures derived independently of ptemu with awk over the sample files:
/// `awk '{u++} $1==1{m++} $13=="J"&&$7=="T"{ct++} $13=="J"&&$7=="N"{cn++}
///  $13=="JMP"&&$14=="JMP_IMM"{j++} $13=="CALL"&&$14=="JMP_IMM"{c++} $13=="JMP"&&$14=="JMP_REG"{ij++}
///  $13=="CALL"&&$14=="JMP_REG"{ic++} $13=="RET"&&$14=="JMP_REG"{r++} $8=="L"{l++} $8=="S"{s++}
///  END{print u, m, ct, cn, j, c, ij, ic, r, l, s}'`
/// sjeng-1K: 1000 750 56 92 20 9 2 0 8 166 78; gcc-1K: 1000 754 73 84 17 9 0 1 9 232 108.
#[test]
fn sample_counts_match_independent_figures() {
    for (path, expect) in [
        (SJENG, [1000, 750, 56, 92, 20, 9, 2, 0, 8, 166, 78]),
        (GCC, [1000, 754, 73, 84, 17, 9, 0, 1, 9, 232, 108]),
    ] {
        let mut ev = PennEvents::new(input(path), ReadOptions::default());
        drain(&mut ev).unwrap();
        let s = ev.stats();
        let got = [
            "uops",
            "macro_ops",
            "cond_taken",
            "cond_not_taken",
            "jump",
            "call",
            "indirect_jump",
            "indirect_call",
            "return",
            "loads",
            "stores",
        ]
        .map(|k| s.count(k));
        assert_eq!(got, expect, "{path}");
        assert_eq!(
            (s.records, s.skipped, s.count("discontinuities")),
            (1000, 0, 0),
            "{path}"
        );
    }
}

/// The course page's example: the first 14 lines of gcc-1K.
#[test]
fn gcc_sample_starts_with_the_documented_example() {
    let ops = macro_ops(input(GCC), ReadOptions::default()).unwrap();
    let first: Vec<(u64, u8, u32, BranchKind)> =
        ops[..10].iter().map(|m| (m.pc, m.len, m.uops, m.kind)).collect();
    assert_eq!(
        first,
        [
            (0x48d1de, 4, 2, BranchKind::None),
            (0x48d1e2, 7, 2, BranchKind::None),
            (0x48d1e9, 7, 1, BranchKind::None),
            (0x48d1f0, 3, 2, BranchKind::None),
            (0x48d1f3, 3, 1, BranchKind::None),
            (0x48d1f6, 3, 1, BranchKind::None),
            (0x48d1f9, 2, 1, BranchKind::Jump),
            (0x48d231, 3, 1, BranchKind::None),
            (0x48d234, 3, 1, BranchKind::None),
            (0x48d237, 2, 1, BranchKind::Conditional),
        ]
    );
    assert_eq!((ops[6].target, ops[6].taken), (0x48d231, true));
    assert_eq!(
        (ops[9].target, ops[9].taken, ops[9].next_pc()),
        (0x48d220, false, 0x48d239)
    );
    assert_eq!(ops[1].mem_addr, Some(0x7fffe7ff048));
    assert_eq!(ops[1].name.as_str(), "CMP");
}

#[test]
fn samples_and_generated_files_round_trip() {
    let gen = generated(20_000, 3);
    for (name, bytes) in [
        (SJENG, std::fs::read(SJENG).unwrap()),
        (GCC, std::fs::read(GCC).unwrap()),
        ("gen", gen),
    ] {
        let a = uops(UopReader::new(bytes_input(name, &bytes), ReadOptions::default())).unwrap();
        let mut w = UopWriter::new(Vec::new());
        for u in &a {
            w.write_uop(u).unwrap();
        }
        let text = w.finish().unwrap();
        let b = uops(UopReader::new(
            bytes_input("rewritten", &text),
            ReadOptions::default(),
        ))
        .unwrap();
        assert_eq!(a, b, "{name}");
        assert!(a.len() >= 1000);
    }
}

#[test]
fn generator_is_reproducible_seeded_and_consistent() {
    assert_eq!(generated(5000, 9), generated(5000, 9));
    assert_ne!(generated(5000, 9), generated(5000, 10));
    let text = generated(200_000, 4);
    let lines = text.iter().filter(|&&b| b == b'\n').count();
    assert!((200_000..=200_003).contains(&lines), "{lines} lines");
    // Strict reading checks the flow: every instruction continues at its target or fallthrough.
    let mut ev = PennEvents::new(bytes_input("gen", &text), ReadOptions::default());
    let (events, _) = drain(&mut ev).unwrap();
    let s = ev.stats();
    for k in [
        "cond_taken",
        "cond_not_taken",
        "jump",
        "call",
        "indirect_jump",
        "indirect_call",
        "return",
        "ptwrite",
    ] {
        assert!(s.count(k) > 100, "{k}: {}", s.count(k));
    }
    // One shape per PC, and calls nest deeper than the 64-entry return stack.
    let mut shapes = std::collections::HashMap::new();
    for m in macro_ops(bytes_input("gen", &text), ReadOptions::default()).unwrap() {
        let shape = (m.len, m.kind, m.uops);
        assert_eq!(*shapes.entry(m.pc).or_insert(shape), shape, "PC {:x}", m.pc);
    }
    let (mut depth, mut deepest) = (0i64, 0i64);
    for e in &events {
        match e {
            Event::Call { .. } | Event::IndirectCall { .. } => depth += 1,
            Event::Return { .. } => depth -= 1,
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    assert!(deepest > 64, "deepest call nesting {deepest}");
}

fn read_err(name: &str, text: &[u8], options: ReadOptions) -> SourceError {
    let mut ev = PennEvents::new(bytes_input(name, text), options);
    drain(&mut ev).expect_err("the input is bad")
}

fn assert_error(e: &SourceError, kind: fn(&ErrorKind) -> bool, expect: &str) {
    assert!(kind(&e.kind), "{e} ({:?})", e.kind);
    assert!(e.to_string().contains(expect), "{e:?} should contain {expect:?}");
}

const GOOD: &str = "1 400000 -1 -1 1 - - - 0 0 400003 0 ADD ADD\n";

#[test]
fn the_handedited_sample_is_rejected_at_line_6() {
    let e = read_err(
        HANDEDITED,
        &std::fs::read(HANDEDITED).unwrap(),
        ReadOptions::default(),
    );
    assert_error(
        &e,
        |k| matches!(k, ErrorKind::BadField),
        "CSC656-test-handedited.trace: line 6: field 7 (branch)",
    );
    // Leniently, the bad line and the JMP marked N are skipped and counted; its rewritten loop is
    // an unrecorded transfer, reported as a discontinuity.
    let mut ev = PennEvents::new(input(HANDEDITED), ReadOptions { lenient: true });
    drain(&mut ev).unwrap();
    let s = ev.stats();
    assert_eq!((s.records, s.skipped), (26, 3));
    assert!(s.count("discontinuities") >= 1);
}

#[test]
fn bad_input_names_file_and_line() {
    type Case = (&'static str, String, fn(&ErrorKind) -> bool, &'static str);
    let cases: [Case; 7] = [
        (
            "truncated.trace",
            format!("{GOOD}1 400003 -1 -1 1 - - - 0 0 400006"),
            |k| matches!(k, ErrorKind::BadField),
            "truncated.trace: line 2: expected 14 fields, found 11",
        ),
        (
            "long.trace",
            format!("{GOOD}{GOOD}1 {}\n", "f".repeat(5000)),
            |k| matches!(k, ErrorKind::LineTooLong),
            "long.trace: line 3: line longer than 1024 bytes",
        ),
        (
            "hex.trace",
            "1 40000z -1 -1 1 - - - 0 0 400003 0 ADD ADD\n".into(),
            |k| matches!(k, ErrorKind::BadField),
            "hex.trace: line 1: field 2 (PC)",
        ),
        (
            "jmpn.trace",
            format!("{GOOD}1 400003 -1 -1 -1 - N - 2 0 400005 400007 JMP JMP_IMM\n"),
            |k| matches!(k, ErrorKind::BadField),
            "jmpn.trace: line 2: field 7 (branch): an unconditional JMP marked N",
        ),
        (
            "len.trace",
            "1 400000 -1 -1 1 - - - 0 0 400000 0 ADD ADD\n".into(),
            |k| matches!(k, ErrorKind::BadField),
            "len.trace: line 1: field 11 (fallthrough PC)",
        ),
        (
            "uop.trace",
            format!("{GOOD}2 400004 -1 -1 1 - - - 0 0 400007 0 ADD ADD\n"),
            |k| matches!(k, ErrorKind::Inconsistent),
            "uop.trace: line 2: micro-op 2 at PC 400004",
        ),
        (
            "flow.trace",
            format!("{GOOD}1 400010 -1 -1 1 - - - 0 0 400013 0 ADD ADD\n"),
            |k| matches!(k, ErrorKind::Inconsistent),
            "flow.trace: line 2: PC 400010, but the instruction at line 1 (PC 400000) continues at 400003",
        ),
    ];
    for (name, text, kind, expect) in cases {
        let e = read_err(name, text.as_bytes(), ReadOptions::default());
        assert_error(&e, kind, expect);
    }
}

#[test]
fn lenient_skips_and_counts_bad_lines() {
    let text = format!(
        "{GOOD}1 400003 -1 -1 1 - ? - 0 0 400006 0 ADD ADD\n1 400003 -1 -1 1 - - - 0 0 400006 0 ADD ADD\n1 {}\n\
         1 400006 -1 -1 1 - - - 0 0 400009 0 ADD ADD\n",
        "f".repeat(3000)
    );
    let mut ev = PennEvents::new(
        bytes_input("l.trace", text.as_bytes()),
        ReadOptions { lenient: true },
    );
    let (events, _) = drain(&mut ev).unwrap();
    assert_eq!(events.len(), 3);
    let s = ev.stats();
    assert_eq!((s.records, s.skipped, s.count("macro_ops")), (5, 2, 3));
}

#[test]
fn gzip_is_recognised_by_magic_not_name() {
    let plain = std::fs::read(SJENG).unwrap();
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&plain).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("looks-plain.txt");
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let i = Input::open(&path).unwrap();
    assert!(i.is_gzip());
    let a = uops(UopReader::new(i, ReadOptions::default())).unwrap();
    let b = uops(UopReader::new(input(SJENG), ReadOptions::default())).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.len(), 1000);
    // A truncated gzip member is an error, not a silent end.
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&plain).unwrap();
    let mut z = gz.finish().unwrap();
    z.truncate(z.len() / 2);
    let e = uops(UopReader::new(bytes_input("cut.gz", &z), ReadOptions::default())).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
    assert!(e.to_string().starts_with("cut.gz: line "), "{e}");
}

#[test]
fn crlf_tabs_blank_lines_and_no_final_newline() {
    let text = "1\t400000\t-1\t-1\t1\t-\t-\t-\t0\t0\t400003\t0\tADD\tADD\r\n\n   \n1 400003 -1 -1 1 - - - 0 0 400006 0 ADD ADD";
    let ops = macro_ops(bytes_input("x", text.as_bytes()), ReadOptions::default()).unwrap();
    assert_eq!(
        ops.iter().map(|m| (m.pc, m.line)).collect::<Vec<_>>(),
        [(0x400000, 1), (0x400003, 4)]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes (and arbitrary edits of a real line) never panic and always end.
    #[test]
    fn arbitrary_input_never_panics(
        junk in proptest::collection::vec(any::<u8>(), 0..600),
        cut in 0usize..90,
        lenient: bool,
    ) {
        let mut text = std::fs::read(GCC).unwrap()[..900].to_vec();
        text.truncate(cut * 10);
        text.extend_from_slice(&junk);
        let mut ev = PennEvents::new(bytes_input("fuzz", &text), ReadOptions { lenient });
        let mut out = Vec::new();
        let mut steps = 0;
        while let Ok(true) = ev.next_events(&mut out) {
            steps += 1;
            prop_assert!(steps <= text.len() + 1);
        }
    }
}

/// The mapping through the tracer, checked by libipt's query decoder: every conditional branch's
/// outcome and every indirect target (returns included: DisRETC) comes back as the trace says.
fn replay_with_query_decoder(text: &[u8]) -> usize {
    let mut ev = PennEvents::new(bytes_input("q", text), ReadOptions::default());
    let start = ev.start_state();
    let (mut ops, mut events) = (Vec::new(), Vec::new());
    while let Some((op, before, event)) = ev.next_macro_op().unwrap() {
        assert!(before.is_none());
        events.push(event);
        ops.push(op);
    }
    let bytes = TraceRig::new(TracerConfig::default()).trace_events(
        (start.cpl, start.cr3, start.mode),
        RtitCtl::new()
            .with_branch_en(true)
            .with_user(true)
            .with_dis_retc(true)
            .with_psb_freq(1),
        &events,
    );
    let clock = TracerConfig::default().clock;
    let timing = Timing {
        mtc_freq: 3,
        nom_freq: clock.nominal_ratio,
        art_eax: 1,
        art_ebx: clock.tsc_per_art,
    };
    let mut q = Query::new(&bytes, timing).unwrap_or_else(|c| panic!("sync: {}", error_name(c)));
    let mut checked = 0;
    for op in &ops {
        while q.pending() {
            q.next_event().unwrap();
        }
        match op.kind {
            BranchKind::Conditional => {
                let taken = q
                    .cond()
                    .unwrap_or_else(|c| panic!("line {}: {}", op.line, error_name(c)));
                assert_eq!(taken, op.taken, "line {}", op.line);
                checked += 1;
            }
            BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return => {
                let to = q
                    .indirect()
                    .unwrap_or_else(|c| panic!("line {}: {}", op.line, error_name(c)));
                assert_eq!(to, Some(op.target), "line {}", op.line);
                checked += 1;
            }
            _ => {}
        }
    }
    assert!(common::libipt::decode(&bytes).is_ok());
    checked
}

#[test]
fn samples_replay_through_libipts_query_decoder() {
    // sjeng: 148 conditional + 2 indirect + 8 returns; gcc: 157 + 1 + 9.
    assert_eq!(replay_with_query_decoder(&std::fs::read(SJENG).unwrap()), 158);
    assert_eq!(replay_with_query_decoder(&std::fs::read(GCC).unwrap()), 167);
}

#[test]
fn generated_trace_replays_through_libipts_query_decoder() {
    assert!(replay_with_query_decoder(&generated(30_000, 21)) > 3000);
}

/// Everything a reader gives to the end or its first error: each (line, micro-op), then the
/// error's text, the last line number and the skipped count.
fn reading(mut r: UopReader) -> (Vec<(u64, Uop)>, Option<String>, u64, u64) {
    let mut got = Vec::new();
    let error = loop {
        match r.next_uop() {
            Ok(Some(u)) => got.push(u),
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        }
    };
    (got, error, r.line(), r.skipped())
}

/// Inserts `extra` before line `n` (1-based) of `text`.
fn insert_before_line(text: &mut Vec<u8>, n: usize, extra: &[u8]) {
    let at = if n == 1 {
        0
    } else {
        text.iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .nth(n - 2)
            .unwrap()
            .0
            + 1
    };
    text.splice(at..at, extra.iter().copied());
}

/// Compares [`UopReader::parallel`] with 1 to 3 workers with the reader on the caller's thread,
/// strict and lenient: the same micro-ops and line numbers, error text, last line and skipped
/// count.
fn assert_parallel_reads_as_here(what: &str, bytes: &[u8]) {
    for lenient in [false, true] {
        assert_parallel_opened_as_here(what, ReadOptions { lenient }, &|| bytes_input("t.trace", bytes));
    }
}

/// [`assert_parallel_reads_as_here`] over the inputs `open` makes, with `options`; returns what
/// the reader on the caller's thread read.
fn assert_parallel_opened_as_here(
    what: &str,
    options: ReadOptions,
    open: &dyn Fn() -> Input,
) -> (Vec<(u64, Uop)>, Option<String>, u64, u64) {
    let here = reading(UopReader::new(open(), options));
    for workers in 1..=3 {
        let split = reading(UopReader::parallel(open(), options, workers));
        assert!(
            here == split,
            "{what}, lenient {}, {workers} workers: {:?} vs {:?}",
            options.lenient,
            (&here.1, here.2, here.3, here.0.len()),
            (&split.1, split.2, split.3, split.0.len())
        );
    }
    here
}

/// SIM18, SIM19: lines parsed ahead, split across workers in blocks of `PARSE_BLOCK`, give what
/// the reader on the caller's thread gives: the same micro-ops and line numbers over many
/// blocks, blank and bad lines, the first error at its line after the micro-ops before it
/// (strict), the skipped count (lenient), gzip, and an empty file.
#[test]
fn sim18_lines_parsed_ahead_read_as_on_one_thread() {
    // About 4 blocks.
    let mut text = generated(PARSE_BLOCK as u64 / 20, 9);
    // A bad line (line 3001), blank lines and CRLF further on.
    insert_before_line(&mut text, 3001, b"this is not a micro-op\n\n\r\n");
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    assert_parallel_reads_as_here("text", &text);
    assert_parallel_reads_as_here("gzip", &gz);
    assert_parallel_reads_as_here("empty", b"");
    assert_parallel_reads_as_here("generated", &generated(3_000, 2));
    let strict = reading(UopReader::new(
        bytes_input("t.trace", &text),
        ReadOptions::default(),
    ));
    assert!(
        strict.1.as_deref().is_some_and(|e| e.contains("line 3001")),
        "{:?}",
        strict.1
    );
    assert!(strict.0.len() >= 3000);
    let lenient = reading(UopReader::ahead(
        bytes_input("t.trace", &text),
        ReadOptions { lenient: true },
    ));
    assert_eq!((lenient.1, lenient.3), (None, 1));
}

/// SIM19: where the blocks are cut does not show. Lines too long for the parser (2,000 bytes)
/// and longer than a block (300 KB more than a block, without a newline: read past by the worker
/// reading it), a bad line at a block's end, many bad lines in one block, a last line without its
/// newline, a last line too long without its newline: line numbers, errors and counts as on one
/// thread.
#[test]
fn sim19_blocks_cut_anywhere_read_as_on_one_thread() {
    // About 2 blocks.
    let base = generated(PARSE_BLOCK as u64 / 40, 5);
    let long = vec![b'7'; 2_000];
    let mut huge = vec![b'x'; PARSE_BLOCK + 300_000];
    huge.push(b'\n');
    let mut text = base.clone();
    insert_before_line(&mut text, 9_000, &huge);
    insert_before_line(&mut text, 2_500, &[&long[..], b"\n"].concat());
    for n in (1_000..1_100).step_by(7) {
        insert_before_line(&mut text, n, b"1 zz\n");
    }
    insert_before_line(&mut text, 40, b"\n\n\n");
    assert_parallel_reads_as_here("long lines", &text);
    let lenient = reading(UopReader::parallel(
        bytes_input("t.trace", &text),
        ReadOptions { lenient: true },
        2,
    ));
    assert_eq!(lenient.3, 2 + 15, "two lines too long, 15 bad");
    let strict = reading(UopReader::parallel(
        bytes_input("t.trace", &text),
        ReadOptions::default(),
        2,
    ));
    let first_bad = text.split(|&b| b == b'\n').position(|l| l == b"1 zz").unwrap() + 1;
    let expected = format!("line {first_bad}: field 2 (PC)");
    assert!(
        strict.1.as_deref().is_some_and(|e| e.contains(&expected)),
        "{:?}",
        strict.1
    );

    // Every cut point of a block: a bad line right before, at and after each offset near the
    // first block's end.
    let lines_before = base[..PARSE_BLOCK].iter().filter(|&&b| b == b'\n').count();
    for n in lines_before - 1..=lines_before + 2 {
        let mut t = base.clone();
        insert_before_line(&mut t, n, b"not a micro-op\n");
        assert_parallel_reads_as_here(&format!("bad line {n}"), &t);
    }
    // The end of the input inside a line: whole, too long, or a block of its own.
    let mut no_newline = base.clone();
    no_newline.pop();
    assert_parallel_reads_as_here("no final newline", &no_newline);
    let mut long_end = base.clone();
    long_end.extend_from_slice(&long);
    assert_parallel_reads_as_here("long last line", &long_end);
    let mut huge_end = base.clone();
    huge_end.extend_from_slice(&huge[..PARSE_BLOCK + 70_000]);
    assert_parallel_reads_as_here("huge last line", &huge_end);
}

/// SIM19: a trace dense with bad lines reads as on one thread, strict and lenient. A worker
/// keeps at most 512 bad lines of a block and leaves the rest to the reader's side, in steps of
/// as many; these runs hold thousands per block, so the rest is taken up several times.
#[test]
fn sim19_dense_errors_read_as_on_one_thread() {
    let mut text = generated(20_000, 7);
    for n in [15_000, 9_000, 3_000] {
        insert_before_line(&mut text, n, &b"x\n".repeat(n / 3 * 2));
    }
    assert_parallel_reads_as_here("dense", &text);
    let lenient = reading(UopReader::parallel(
        bytes_input("t.trace", &text),
        ReadOptions { lenient: true },
        2,
    ));
    assert_eq!(lenient.3, (15_000 + 9_000 + 3_000) / 3 * 2);
}

/// SIM19, the fuzz targets' check (`sources::read_arbitrary`): with 1 to 3 workers chosen by the
/// mode byte, the workers give what one thread gives, on the samples, a generated trace over
/// several blocks with bad lines and a long one, and one with a bad line only in a later block
/// (its line number is in the error).
#[test]
fn sim19_fuzz_body_compares_workers_with_one_thread() {
    let mut spoiled = generated(PARSE_BLOCK as u64 / 40, 8);
    insert_before_line(&mut spoiled, 700, b"1 zz\n\n");
    insert_before_line(&mut spoiled, 9_000, &[&[b'7'; 3_000][..], b"\n"].concat());
    let mut inputs: Vec<Vec<u8>> = [SJENG, GCC, HANDEDITED]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    inputs.push(spoiled.clone());
    inputs.push(spoiled[..spoiled.len() / 3].to_vec());
    let mut late = generated(PARSE_BLOCK as u64 / 40, 9);
    for n in [9_001, 12_003] {
        insert_before_line(&mut late, n, b"1 zz\n");
    }
    // One thread names the line of the first bad line of the later block; the workers are
    // compared with that (error text included) below.
    let err = ptemu::sources::open_events(
        ptemu::sources::Format::Penn,
        bytes_input("late", &late),
        None,
        ReadOptions::default(),
    )
    .and_then(|mut src| src.for_each_event(&mut |_| {}))
    .unwrap_err();
    assert!(err.to_string().contains("line 9001"), "{err}");
    inputs.push(late);
    for bytes in inputs {
        for mode in 0..8u8 {
            let data = [&[mode][..], &bytes].concat();
            ptemu::sources::read_arbitrary(ptemu::sources::Format::Penn, &data);
        }
    }
}

/// A reader that gives `ok` bytes of `bytes`, then fails; once interrupted at `interrupt_at`.
struct FailAfter {
    bytes: Vec<u8>,
    at: usize,
    ok: usize,
    interrupt_at: Option<usize>,
}

impl std::io::Read for FailAfter {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.interrupt_at.is_some_and(|i| self.at >= i) {
            self.interrupt_at = None;
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        if self.at >= self.ok.min(self.bytes.len()) && self.ok != usize::MAX {
            return Err(std::io::Error::other("the disk went away"));
        }
        let n = buf.len().min(self.ok.min(self.bytes.len()) - self.at).min(4096);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// SIM19: a read error mid-line is reported at the line after the last whole one, after every
/// micro-op before it, with the same text as on one thread, wherever the blocks were cut, strict
/// and lenient, also inside a line too long to parse (2,000 bytes) or longer than a block.
#[test]
fn sim19_a_read_error_comes_after_the_whole_lines_before_it() {
    // About 3 blocks.
    let lines = generated(PARSE_BLOCK as u64 / 30, 3);
    let whole = lines.iter().filter(|&&b| b == b'\n').count() as u64;
    let b = PARSE_BLOCK;
    let mut cases: Vec<(Vec<u8>, usize)> = [100, b, b + 50, 2 * b + 40_000]
        .iter()
        .map(|&ok| (lines.clone(), ok))
        .collect();
    for tail in [2_000, b + 300_000] {
        let mut b = lines.clone();
        b.extend(std::iter::repeat_n(b'7', tail));
        let ok = b.len();
        cases.push((b, ok));
    }
    for (bytes, ok) in cases {
        let input = || {
            let r = FailAfter {
                bytes: bytes.clone(),
                at: 0,
                ok,
                interrupt_at: None,
            };
            Input::from_reader("pipe", r).unwrap()
        };
        for lenient in [false, true] {
            let options = ReadOptions { lenient };
            let what = format!("error after {ok} bytes");
            let here = assert_parallel_opened_as_here(&what, options, &input);
            assert!(
                here.1
                    .as_deref()
                    .is_some_and(|e| e.contains("the disk went away")),
                "{:?}",
                here.1
            );
            if ok == bytes.len() {
                let expected = format!("line {}: the disk went away", whole + 1);
                assert!(
                    here.1.as_deref().is_some_and(|e| e.contains(&expected)),
                    "{:?}",
                    here.1
                );
                assert_eq!(here.3, 0, "nothing skipped");
            }
        }
    }
}

/// An interrupted read (EINTR) is read again by the input: every reader reads on, as on one
/// thread.
#[test]
fn sim19_an_interrupted_read_is_read_again() {
    let bytes = generated(2_000, 4);
    let input = |at: usize| {
        let r = FailAfter {
            bytes: bytes.clone(),
            at: 0,
            ok: usize::MAX,
            interrupt_at: Some(at),
        };
        Input::from_reader("pipe", r).unwrap()
    };
    let all = reading(UopReader::new(
        bytes_input("t.trace", &bytes),
        ReadOptions::default(),
    ));
    for at in [10, 70_000] {
        assert!(reading(UopReader::new(input(at), ReadOptions::default())) == all);
        for workers in 1..=2 {
            assert!(reading(UopReader::parallel(input(at), ReadOptions::default(), workers)) == all);
        }
    }
}

/// A reader that gives its bytes, then panics.
struct PanicAtEnd {
    bytes: Vec<u8>,
    at: usize,
}

impl std::io::Read for PanicAtEnd {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        assert!(self.at < self.bytes.len(), "the reader broke");
        let n = buf.len().min(self.bytes.len() - self.at).min(4096);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The text of a panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// SIM19: a panic on a parsing worker (here: in the input's read) goes on in the reader's
/// thread, as it would on one thread, instead of becoming an input error.
#[test]
fn sim19_a_worker_panic_goes_on_in_the_reader() {
    let bytes = generated(4_000, 6);
    for workers in [0, 1, 2, 3] {
        let input = Input::from_reader(
            "pipe",
            PanicAtEnd {
                bytes: bytes.clone(),
                at: 0,
            },
        )
        .unwrap();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let reader = if workers == 0 {
                UopReader::new(input, ReadOptions::default())
            } else {
                UopReader::parallel(input, ReadOptions::default(), workers)
            };
            reading(reader)
        }));
        let panic = run.expect_err("the panic reaches the reader");
        assert!(
            panic_text(&*panic).contains("the reader broke"),
            "{workers} workers"
        );
    }
}

/// A trace cut inside a branch instruction, before its branch micro-op (`head -n` of a
/// generated trace): the cut instruction is left out, the trace ends with the one before it, and
/// `simulate` runs (before, the code image refused the cut CALL as a NOP where a CALL was).
#[test]
fn a_trace_cut_inside_a_branch_ends_before_it() {
    let text = generated(4000, 1);
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    // Every cut: the last macro-op is whole, a cut non-branch, or a cut branch left out.
    let mut cut_branches = 0;
    for n in 2900..3100 {
        let cut: Vec<u8> = lines[..n].concat();
        let whole = macro_ops(bytes_input("cut", &text), ReadOptions::default()).unwrap();
        let got = macro_ops(bytes_input("cut", &cut), ReadOptions::default()).unwrap();
        let last = got.last().unwrap();
        let same = whole.iter().find(|m| m.line == last.line).unwrap();
        if last.kind != same.kind {
            panic!(
                "cut at {n}: the last instruction (line {}) changed kind",
                last.line
            );
        }
        let next_line = got.last().map(|m| m.line).unwrap();
        let left_out = whole.iter().any(|m| {
            m.line > next_line && m.line <= n as u64 && m.kind != ptemu::sources::penn::BranchKind::None
        });
        cut_branches += u32::from(left_out);
    }
    assert!(cut_branches > 10, "{cut_branches} cuts inside a branch");
    // simulate runs on such a cut, with one thread and with workers.
    let dir = tempfile::tempdir().unwrap();
    let n = (2900..3100)
        .find(|&n| {
            let cut: Vec<u8> = lines[..n].concat();
            let got = macro_ops(bytes_input("cut", &cut), ReadOptions::default()).unwrap();
            let whole = macro_ops(bytes_input("w", &text), ReadOptions::default()).unwrap();
            whole.iter().filter(|m| m.line <= n as u64).count() > got.len()
        })
        .unwrap();
    let path = dir.path().join("cut.trace");
    std::fs::write(&path, lines[..n].concat()).unwrap();
    for threads in ["1", "3"] {
        let out = dir.path().join(format!("o{threads}"));
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"))
            .args([
                "simulate",
                path.to_str().unwrap(),
                "--format",
                "penn",
                "-q",
                "--threads",
                threads,
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains("before its branch micro-op"));
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(
            report["input"]["counts"]["cut_instruction_left_out"], 1,
            "{threads} threads"
        );
    }
}
