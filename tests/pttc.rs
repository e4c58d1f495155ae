//! `ptemu pttc`: libipt's .ptt test files compiled as libipt's pttc compiles them.
//!
//! - every .ptt of libipt's tests (read from `../shared/reference/libipt-tests`; skipped, saying
//!   so, where that folder is absent) is written by the `ptemu pttc` binary, and its .bin is
//!   compared byte for byte with `yasm -f bin` of the same file where yasm is installed;
//! - the .pt bytes are compared with the packets libipt's pttc wrote for the same tests
//!   (tests/data/libipt-golden-packets.txt);
//! - the command line on small files of our own (tests/data/pttc/, see SOURCE.md there), and
//!   `--case` (tests/pttc_suite.rs runs it on libipt's tests).

mod common;

use common::cli::ptemu;
use common::ptt::{ptt_files, reference_dir};
use std::process::Command;

/// The two files libipt's own pttc rejects (its tests of its error paths), and the message.
fn pttc_rejects(stem: &str) -> Option<&'static str> {
    match stem {
        // `l2:` is the last line: no address follows it.
        "test_label_addr" => Some("has no address"),
        // Two lone labels over `nop` lines both take the name `nop` (see src/pttc/listing.rs).
        "test_exp_labels" => Some("is not unique"),
        _ => None,
    }
}

fn yasm_available() -> bool {
    Command::new("yasm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn libipt_tests_compile_and_their_bin_is_yasms() {
    let Some(dir) = reference_dir() else { return };
    let files = ptt_files(&dir);
    assert!(
        files.len() >= 200,
        "expected libipt's tests in {}, found {}",
        dir.display(),
        files.len()
    );
    let yasm = yasm_available();
    if !yasm {
        eprintln!("yasm is not on PATH: the .bin files are not compared (apt-get install yasm)");
    }
    let work = tempfile::tempdir().unwrap();
    let (mut written, mut compared, mut rejected) = (0, 0, 0);
    let mut mismatched = Vec::new();
    for ptt in &files {
        let stem = ptt.file_stem().unwrap().to_str().unwrap().to_string();
        let out = work.path().join(&stem);
        let o = ptemu(&["pttc", ptt.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        if let Some(message) = pttc_rejects(&stem) {
            assert_eq!(
                o.status.code(),
                Some(2),
                "{stem}: pttc rejects this file; ptemu must too"
            );
            assert!(
                stderr.contains(message) && stderr.contains(&format!("{stem}.ptt:")),
                "{stem}: {stderr}"
            );
            rejected += 1;
            continue;
        }
        assert!(o.status.success(), "{stem}: {stderr}");
        for name in [format!("{stem}.bin"), format!("{stem}.pt")] {
            assert!(out.join(&name).is_file(), "{stem}: {name} not written");
        }
        let listed = String::from_utf8_lossy(&o.stdout);
        let source = std::fs::read_to_string(ptt).unwrap();
        for tool in source.lines().filter_map(|l| l.split("@pt .exp(").nth(1)) {
            let tool = tool.split(')').next().unwrap();
            let name = if tool.is_empty() {
                format!("{stem}-.exp")
            } else {
                format!("{stem}-{tool}.exp")
            };
            assert!(
                out.join(&name).is_file() && listed.contains(&name),
                "{stem}: {name} not written"
            );
        }
        written += 1;
        if yasm {
            let theirs = work.path().join(format!("{stem}.yasm.bin"));
            let y = Command::new("yasm")
                .arg(ptt)
                .args(["-f", "bin", "-o"])
                .arg(&theirs)
                .output()
                .unwrap();
            assert!(
                y.status.success(),
                "{stem}: yasm failed: {}",
                String::from_utf8_lossy(&y.stderr)
            );
            compared += 1;
            if std::fs::read(&theirs).unwrap() != std::fs::read(out.join(format!("{stem}.bin"))).unwrap() {
                mismatched.push(stem);
            }
        }
    }
    println!(
        "pttc: {written} of {} files written, {rejected} rejected as libipt's pttc rejects them",
        files.len()
    );
    if yasm {
        println!(
            "pttc: {} of {compared} .bin files equal yasm's",
            compared - mismatched.len()
        );
    }
    assert!(mismatched.is_empty(), ".bin differs from yasm's: {mismatched:?}");
}

/// One test of the golden corpus: its name, its packets (bytes and ptdump's decode), and whether
/// the listing stops at a decode error (then only that prefix is known).
type GoldenTest = (&'static str, Vec<(Vec<u8>, &'static str)>, bool);

/// The golden corpus per test.
fn golden_packets() -> Vec<GoldenTest> {
    let mut tests: Vec<GoldenTest> = Vec::new();
    for l in common::golden::lines() {
        if tests.last().is_none_or(|t| t.0 != l.test) {
            tests.push((l.test, Vec::new(), false));
        }
        let t = tests.last_mut().unwrap();
        if t.2 {
            continue;
        }
        if l.error {
            t.2 = true;
            continue;
        }
        t.1.push((l.bytes, l.decode));
    }
    tests
}

#[test]
fn pt_bytes_are_the_packets_libipt_wrote() {
    let Some(dir) = reference_dir() else { return };
    let mut checked = 0;
    for (name, packets, truncated) in golden_packets() {
        let ptt = dir.join(format!("{name}.ptt"));
        let Ok(source) = std::fs::read_to_string(&ptt) else {
            continue;
        };
        let files = ptemu::pttc::run(ptt.to_str().unwrap(), &source, &Default::default()).unwrap();
        let pt = &files
            .iter()
            .find(|f| f.name == format!("{name}.pt"))
            .unwrap()
            .bytes;
        // The corpus leaves PADs out; a PAD (00) is the only packet that starts with a zero byte.
        let mut at = 0;
        for (bytes, decode) in &packets {
            while pt.get(at) == Some(&0) {
                at += 1;
            }
            let got = pt
                .get(at..at + bytes.len())
                .unwrap_or_else(|| panic!("{name}: .pt ends before {decode}"));
            // pttc leaves the vector of a CFE of an unknown type without one unset; ptemu writes 0.
            let n = if decode.starts_with("cfe") && decode.ends_with("type unknown") {
                3
            } else {
                bytes.len()
            };
            assert_eq!(
                &got[..n],
                &bytes[..n],
                "{name}: packet {decode} at offset {at:#x}"
            );
            at += bytes.len();
        }
        if !truncated {
            while pt.get(at) == Some(&0) {
                at += 1;
            }
            assert_eq!(at, pt.len(), "{name}: bytes after the last packet");
        }
        checked += 1;
    }
    println!("pttc: .pt bytes of {checked} tests equal libipt's golden packets");
    assert!(checked >= 200, "only {checked} tests compared");
}

/// The words after `; KEY ` on the lines of `source` (test.bash's `sed` for `; cpu` and
/// `; opt:ptdump` lines, split as the shell splits them).
fn directive_words(source: &str, key: &str) -> Vec<String> {
    let mut words = Vec::new();
    for line in source.lines() {
        let Some((_, rest)) = line.split_once(';') else {
            continue;
        };
        let Some(rest) = rest.trim_start_matches([' ', '\t']).strip_prefix(key) else {
            continue;
        };
        if rest.starts_with([' ', '\t']) {
            words.extend(rest.split_whitespace().map(str::to_string));
        }
    }
    words
}

/// `a` and `b` agree as `diff -ub` compares them: line by line, a run of blanks equal to any
/// other, blanks at the end of a line ignored.
fn same_as_diff_b(a: &str, b: &str) -> bool {
    let norm = |l: &str| {
        l.split_whitespace().collect::<Vec<_>>().join(" ")
            + if l.starts_with([' ', '\t']) && !l.trim().is_empty() {
                "<lead>"
            } else {
                ""
            }
    };
    a.lines().map(norm).eq(b.lines().map(norm))
}

/// The libipt tests whose ptdump output ptemu does not reproduce (spec/pttc.md, "ptdump's text").
const PTDUMP_DISAGREES: [&str; 0] = [];

/// The ptdump options test.bash makes of a sideband file pttc wrote, `<root>-<format>-<prio>`
/// then `,opt=val` pairs, then `.sb`: `--<format>:opt val` for each pair, then
/// `--<format>:<prio> FILE`.
fn sideband_options(root: &str, file: &str) -> Vec<String> {
    let base = file.strip_suffix(".sb").unwrap();
    let part = base.strip_prefix(&format!("{root}-")).unwrap_or(base);
    let (prefix, options) = part.split_once(',').unwrap_or((part, ""));
    let (rest, prio) = prefix.rsplit_once('-').unwrap();
    let format = rest.rsplit('-').next().unwrap();
    let mut args = Vec::new();
    for pair in options.split(',').filter(|p| !p.is_empty()) {
        let (opt, val) = pair.split_once('=').unwrap_or((pair, ""));
        args.push(format!("--{format}:{opt}"));
        if !val.is_empty() {
            args.push(val.to_string());
        }
    }
    args.push(format!("--{format}:{prio}"));
    args.push(file.to_string());
    args
}

/// libipt's script/test.bash for ptdump, with ptemu on both sides: every .ptt with an
/// `.exp(ptdump)` section is compiled by `ptemu pttc` (once per `; cpu` line, with `--cpu`), and
/// `ptemu dump --format ptdump` with the test's `; opt:ptdump` options and the `.sb` sideband
/// files pttc wrote (as test.bash passes them) must print the .exp, as `diff -ub` compares. The tests that disagree must be exactly [`PTDUMP_DISAGREES`]: a new
/// failure and a new agreement both fail here.
#[test]
fn ptdump_text_of_libipt_tests() {
    let Some(dir) = reference_dir() else { return };
    let work = tempfile::tempdir().unwrap();
    let (mut tests, mut runs, mut sideband_tests) = (0, 0, 0);
    let mut disagree = Vec::new();
    for ptt in ptt_files(&dir) {
        let source = std::fs::read_to_string(&ptt).unwrap();
        if !source.contains("@pt .exp(ptdump)") {
            continue;
        }
        let stem = ptt.file_stem().unwrap().to_str().unwrap().to_string();
        tests += 1;
        let mut cpus: Vec<Option<String>> = directive_words(&source, "cpu").into_iter().map(Some).collect();
        if cpus.is_empty() {
            cpus.push(None);
        }
        let opts = directive_words(&source, "opt:ptdump");
        let mut agrees = true;
        for cpu in &cpus {
            let out = work.path().join(&stem);
            let mut args = vec!["pttc", ptt.to_str().unwrap(), "-o", out.to_str().unwrap()];
            if let Some(c) = cpu {
                args.extend(["--cpu", c]);
            }
            let o = ptemu(&args);
            assert!(
                o.status.success(),
                "{stem}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let listed = String::from_utf8(o.stdout).unwrap();
            let exps: Vec<&str> = listed
                .lines()
                .filter(|f| f.contains(&format!("{stem}-ptdump")) && f.ends_with(".exp"))
                .collect();
            assert_eq!(exps.len(), 1, "{stem}: {listed}");
            let pt = out.join(format!("{stem}.pt"));
            let root = out.join(&stem);
            let sb: Vec<String> = listed
                .lines()
                .filter(|f| f.ends_with(".sb"))
                .flat_map(|f| sideband_options(root.to_str().unwrap(), f))
                .collect();
            sideband_tests += usize::from(!sb.is_empty());
            let mut args = vec!["dump", "--format", "ptdump"];
            if let Some(c) = cpu {
                args.extend(["--cpu", c]);
            }
            args.extend(opts.iter().map(String::as_str));
            args.extend(sb.iter().map(String::as_str));
            args.push(pt.to_str().unwrap());
            let o = ptemu(&args);
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(
                matches!(o.status.code(), Some(0 | 1)) && !stderr.contains("panicked"),
                "{stem}: {args:?}: {stderr}"
            );
            let expected = std::fs::read_to_string(exps[0]).unwrap();
            let got = String::from_utf8(o.stdout).unwrap();
            runs += 1;
            if !same_as_diff_b(&expected, &got) {
                agrees = false;
                if !PTDUMP_DISAGREES.contains(&stem.as_str()) {
                    eprintln!("{stem} {cpu:?}:\n--- expected\n{expected}+++ ptemu\n{got}");
                }
            }
        }
        if !agrees {
            disagree.push(stem);
        }
    }
    println!(
        "ptdump: {} of {tests} .exp(ptdump) tests identical ({runs} runs with their CPUs)",
        tests - disagree.len()
    );
    assert!(tests >= 200, "only {tests} tests with .exp(ptdump)");
    assert!(
        sideband_tests >= 12,
        "only {sideband_tests} runs with sideband files"
    );
    assert_eq!(disagree, PTDUMP_DISAGREES, "the tests that disagree changed");
}

#[test]
fn diff_b_comparison_can_fail() {
    assert!(same_as_diff_b("a  b\nc \n", "a b\nc\n"));
    assert!(!same_as_diff_b("ab\n", "a b\n"));
    assert!(!same_as_diff_b("a\n", "a\nb\n"));
    assert!(!same_as_diff_b(" a\n", "a\n"));
    assert_eq!(
        directive_words(
            "; cpu 6/92\n;  cpu 6/95 \n; cpu: 3\n; opt:ptdump --time  --no-tcal\n",
            "cpu"
        ),
        ["6/92", "6/95"]
    );
    assert_eq!(
        sideband_options(
            "/d/t",
            "/d/t-pevent-primary,sample-type=0x4,time-zero=0x0,time-shift=0x0,time-mult=0x1.sb"
        ),
        [
            "--pevent:sample-type",
            "0x4",
            "--pevent:time-zero",
            "0x0",
            "--pevent:time-shift",
            "0x0",
            "--pevent:time-mult",
            "0x1",
            "--pevent:primary",
            "/d/t-pevent-primary,sample-type=0x4,time-zero=0x0,time-shift=0x0,time-mult=0x1.sb"
        ]
    );
    assert_eq!(
        sideband_options("/d/t", "/d/t-raw-secondary.sb"),
        ["--raw:secondary", "/d/t-raw-secondary.sb"]
    );
}

fn data(name: &str) -> String {
    format!("{}/tests/data/pttc/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn cli_good_file() {
    let out = tempfile::tempdir().unwrap();
    let o = ptemu(&["pttc", &data("good.ptt"), "-o", out.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |n: &str| std::fs::read(out.path().join(n)).unwrap();
    // nop; jnz start (short, back 3); call done (near); ret.
    assert_eq!(read("good.bin"), [0x90, 0x75, 0xfd, 0xe8, 0, 0, 0, 0, 0xc3]);
    let mut pt = [0x02, 0x82].repeat(8);
    pt.extend([
        0x99, 0x01, 0x7d, 0x00, 0x20, 0, 0, 0, 0, 0x02, 0x23, 0x06, 0x2d, 0x08, 0x20, 0x01,
    ]);
    assert_eq!(read("good.pt"), pt);
    assert_eq!(
        String::from_utf8(read("good-ptdump.exp")).unwrap(),
        "0000000000000000 psb\n0000000000000012 fup 3: 0000000000002000\n000000000000001c tip 1: ????????????2008\nend 20\n"
    );
    assert_eq!(String::from_utf8(read("good-.exp")).unwrap(), "2000 1\n");
    // No temporary files are left behind; ptemu's mark names what it wrote (SIM22).
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 5);
    let mark = String::from_utf8(read(".ptemu-out")).unwrap();
    assert_eq!(
        mark.lines().skip(1).collect::<Vec<_>>(),
        ["good-.exp", "good-ptdump.exp", "good.bin", "good.pt"]
    );
    // --cpu adds pttc's suffix to the .exp names.
    let o = ptemu(&[
        "pttc",
        &data("good.ptt"),
        "-o",
        out.path().to_str().unwrap(),
        "--cpu",
        "6/142",
    ]);
    assert!(o.status.success());
    assert!(out.path().join("good-ptdump-cpu_6_142.exp").is_file());
    assert!(out.path().join("good--cpu_6_142.exp").is_file());
}

/// `--case` adds a case `ptemu verify` and the libipt harness read: the harness, told the CPU
/// and the filter of the `; cpu` and `; opt:ptxed` lines, prints the .exp(ptxed) text, and
/// verify accepts it and refuses it with one IP changed.
#[test]
fn cli_case_writes_a_verify_case() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("case");
    let o = ptemu(&["pttc", &data("case.ptt"), "--case", "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listed = String::from_utf8_lossy(&o.stdout);
    for name in [
        "case.bin",
        "case.pt",
        "case-ptxed.exp",
        "trace.pt",
        "image.bin",
        "image.json",
        "case.json",
        "truth.jsonl",
    ] {
        assert!(
            dir.join(name).is_file() && listed.contains(name),
            "{name} not written"
        );
    }
    assert_eq!(
        std::fs::read(dir.join("trace.pt")).unwrap(),
        std::fs::read(dir.join("case.pt")).unwrap()
    );
    assert_eq!(common::harness::case_cpu(&dir), Some((6, 142, 0)));
    let filter = common::harness::case_filter(&dir);
    assert_eq!((filter.cfg, filter.addr[0], filter.addr[1]), (1, 0x2000, 0x20ff));
    let got = common::harness::decode_case(&dir);
    let exp = std::fs::read_to_string(dir.join("case-ptxed.exp")).unwrap();
    assert_eq!(got, exp, "the harness prints what ptxed must");
    let verify = |text: &str| {
        let ips = out.path().join("ips.txt");
        std::fs::write(&ips, text).unwrap();
        ptemu(&[
            "verify",
            dir.to_str().unwrap(),
            "--ips",
            ips.to_str().unwrap(),
            "--events",
        ])
    };
    let v = verify(&got);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let v = verify(&got.replace("0000000000002004", "0000000000002002"));
    assert_eq!(v.status.code(), Some(1), "a changed IP is refused");
    let v = verify(&got.replace("[disabled, at: 0000000000002005]\n", ""));
    assert_eq!(v.status.code(), Some(1), "a missing event is refused");
}

/// `--case` without an .exp(ptxed) section is exit 2 naming the file, and writes nothing.
#[test]
fn cli_case_needs_an_exp_ptxed_section() {
    let out = tempfile::tempdir().unwrap();
    let o = ptemu(&[
        "pttc",
        &data("good.ptt"),
        "--case",
        "-o",
        out.path().to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("good.ptt: --case: the file has no .exp(ptxed) section"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

/// A bad `; opt:ptxed` option is exit 2 naming the file and line under `--case`, and writes
/// nothing; without `--case` the line is a comment, as for pttc.
#[test]
fn cli_case_bad_ptxed_option() {
    let out = tempfile::tempdir().unwrap();
    let ptt = out.path().join("bad.ptt");
    let text = std::fs::read_to_string(data("case.ptt")).unwrap();
    std::fs::write(
        &ptt,
        text.replace("--filter:addr0_a 0x2000", "--filter:addr0_a zz"),
    )
    .unwrap();
    let dir = out.path().join("o");
    let o = ptemu(&[
        "pttc",
        ptt.to_str().unwrap(),
        "--case",
        "-o",
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.ptt:3: opt:ptxed: --filter:addr0_a needs a number"),
        "{stderr}"
    );
    assert!(!dir.exists() || std::fs::read_dir(&dir).unwrap().count() == 0);
    let o = ptemu(&["pttc", ptt.to_str().unwrap(), "-o", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn fails_at(file: &str, line: usize, words: &str) {
    let out = tempfile::tempdir().unwrap();
    let o = ptemu(&["pttc", &data(file), "-o", out.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{file}: {stderr}");
    assert!(stderr.contains(&format!("{file}:{line}: ")), "{file}: {stderr}");
    assert!(stderr.contains(words), "{file}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "{file}: files written after an error"
    );
}

#[test]
fn cli_unknown_directive() {
    fails_at("unknown_directive.ptt", 5, "unknown directive 'frobnicate'");
}

#[test]
fn cli_missing_label() {
    fails_at("missing_label.ptt", 6, "undefined label 'nowhere'");
}

#[test]
fn cli_instruction_outside_the_subset() {
    fails_at("bad_insn.ptt", 4, "outside the supported subset");
}

#[test]
fn cli_bad_exp_reference() {
    fails_at("bad_exp.ptt", 8, "undefined label 'l2'");
}

#[test]
fn cli_missing_file() {
    let o = ptemu(&["pttc", "/nonexistent/x.ptt"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/x.ptt"));
}

/// `ptemu dump --format ptdump` with a sideband file of our own: records print before the timing
/// packet whose time reaches theirs, the `--pevent:*` values apply to the files named after them,
/// and bytes that are not records are exit 2 naming the file and the byte offset.
#[test]
fn cli_ptdump_sideband() {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("t.pt");
    let mut trace = [0x02, 0x82].repeat(8);
    trace.extend([0x19, 5, 0, 0, 0, 0, 0, 0, 0x02, 0x23]);
    std::fs::write(&pt, &trace).unwrap();
    // PERF_RECORD_LOST_SAMPLES (13): lost 7, time sample 3; then PERF_RECORD_SWITCH (14) at 9.
    let mut sb = vec![13, 0, 0, 0, 0, 0, 24, 0];
    sb.extend(7u64.to_le_bytes());
    sb.extend(3u64.to_le_bytes());
    sb.extend([14, 0, 0, 0, 0, 0x20, 16, 0]);
    sb.extend(9u64.to_le_bytes());
    let file = dir.path().join("t.sb");
    std::fs::write(&file, &sb).unwrap();
    let (f, p) = (file.to_str().unwrap(), pt.to_str().unwrap());
    let run = |extra: &[&str]| {
        let mut args = vec!["dump", "--format", "ptdump"];
        args.extend(extra);
        args.push(p);
        ptemu(&args)
    };
    let o = run(&[
        "--sb:compact",
        "--sb:offset",
        "--pevent:sample-type",
        "4",
        "--pevent:primary",
        f,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "0000000000000000  psb\n\
         0000000000000000  PERF_RECORD_LOST_SAMPLES  7  { 3 }\n\
         0000000000000010  tsc        5\n\
         0000000000000018  psbend\n\
         0000000000000018  PERF_RECORD_SWITCH.OUT  { 9 }\n"
    );
    // The last of --sb:compact and --sb:verbose wins.
    let o = run(&[
        "--sb:compact",
        "--sb:verbose",
        "--pevent:sample-type",
        "4",
        "--pevent:primary",
        f,
    ]);
    assert!(String::from_utf8(o.stdout)
        .unwrap()
        .contains("\nPERF_RECORD_LOST_SAMPLES\n  lost: 7\n  time: 3\n0000000000000010  tsc"));
    // --quiet prints no records.
    let o = run(&[
        "--quiet",
        "--sb:compact",
        "--pevent:sample-type",
        "4",
        "--pevent:primary",
        f,
    ]);
    assert!(o.status.success());
    assert_eq!(o.stdout, b"");
    // The sample type given after the file does not apply to it: the records are then 8 bytes
    // longer than their fields.
    let o = run(&["--sb:compact", "--pevent:primary", f, "--pevent:sample-type", "4"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{f}: byte 0: PERF_RECORD_LOST_SAMPLES")),
        "{stderr}"
    );
    assert_eq!(o.stdout, b"", "nothing printed before the error");
    // A record cut by the end of the file.
    std::fs::write(&file, &sb[..sb.len() - 3]).unwrap();
    let o = run(&["--sb:compact", "--pevent:sample-type", "4", "--pevent:primary", f]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{f}: byte 24: ")) && !stderr.contains("panicked"),
        "{stderr}"
    );
    // A missing file; a sideband option without --format ptdump.
    let o = run(&["--pevent:primary", "/nonexistent/x.sb"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/x.sb"));
    let o = ptemu(&["dump", "--sb:compact", p]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs --format ptdump"));
}

/// Sideband files stream: each file's records are read as the dump reaches them and merged by a
/// heap, so memory holds a record and a window per file, not every record (it was about 240
/// bytes a record). 100 files of 10,000 records (40 MB of sideband, a million records) dump in
/// time order, interleaved across the files, with a peak resident set far below the records'.
#[test]
#[allow(clippy::zombie_processes)] // waited for by wait4, which clippy does not know
fn cli_ptdump_sideband_streams_its_records() {
    use std::io::Read;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("t.pt");
    let mut trace = [0x02, 0x82].repeat(8);
    trace.extend([0x19, 5, 0, 0, 0, 0, 0, 0, 0x02, 0x23]);
    std::fs::write(&pt, &trace).unwrap();
    let (files, records) = (100u64, 10_000u64);
    let mut args: Vec<String> = [
        "dump",
        "--format",
        "ptdump",
        "--sb:compact",
        "--pevent:sample-type",
        "4",
    ]
    .map(String::from)
    .to_vec();
    for i in 0..files {
        // PERF_RECORD_AUX (11) with a time sample: record j of file i at time j * files + i + 1,
        // its AUX offset naming both.
        let mut sb = Vec::with_capacity((records * 40) as usize);
        for j in 0..records {
            sb.extend([11, 0, 0, 0, 0, 0, 40, 0]);
            sb.extend((j * files + i).to_le_bytes());
            sb.extend(64u64.to_le_bytes());
            sb.extend(0u64.to_le_bytes());
            sb.extend((j * files + i + 1).to_le_bytes());
        }
        let f = dir.path().join(format!("{i}.sb"));
        std::fs::write(&f, &sb).unwrap();
        args.push("--pevent:primary".into());
        args.push(f.to_str().unwrap().into());
    }
    args.push(pt.to_str().unwrap().into());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        // Check the order as it streams: one AUX line per record, offsets 0, 1, 2, ...
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        let offsets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("PERF_RECORD_AUX"))
            .map(|l| {
                let o = l.split_whitespace().nth(1).unwrap();
                u64::from_str_radix(o.trim_end_matches(','), 16).unwrap()
            })
            .collect();
        offsets
    });
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for this child, which is not waited for
    // elsewhere.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are live locals of the types wait4 writes.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let offsets = reader.join().unwrap();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    assert_eq!(offsets.len() as u64, files * records);
    assert!(
        offsets.iter().enumerate().all(|(k, &o)| o == k as u64),
        "not in time order"
    );
    // A million records held would be over 200 MB; streamed, the dump needs a few MB.
    assert!(
        usage.ru_maxrss < 48 << 10,
        "peak resident set {} KiB",
        usage.ru_maxrss
    );
}

/// The entries of `dir`, sorted, with the bytes of each file (`None` for a directory).
fn dir_state(dir: &std::path::Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = e
                .file_type()
                .unwrap()
                .is_file()
                .then(|| std::fs::read(e.path()).unwrap());
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

/// `trace.ptt --case` (the test's `trace.pt` is the case's) and `image.ptt --case` (`image.bin`)
/// are exit 2 naming the file that would be written twice, before anything is written: DIR
/// keeps exactly what it held, a `trace.pt` of someone else's included; a new DIR is not left.
#[test]
fn cli_case_outputs_that_collide_are_refused_before_anything_is_written() {
    let work = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data("case.ptt")).unwrap();
    for (stem, twice) in [("trace", "trace.pt"), ("image", "image.bin")] {
        let ptt = work.path().join(format!("{stem}.ptt"));
        std::fs::write(&ptt, &text).unwrap();
        let fresh = work.path().join(format!("{stem}-new"));
        let o = ptemu(&[
            "pttc",
            ptt.to_str().unwrap(),
            "--case",
            "-o",
            fresh.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{stem}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{stem}.ptt: two outputs would be written to the same file ({twice})"
            )) && stderr.contains("nothing was written"),
            "{stem}: {stderr}"
        );
        assert!(!fresh.exists(), "{stem}: {} was created", fresh.display());
        let kept = work.path().join(format!("{stem}-kept"));
        std::fs::create_dir(&kept).unwrap();
        std::fs::write(kept.join(twice), "not ptemu's").unwrap();
        std::fs::write(kept.join("notes.txt"), "mine").unwrap();
        let before = dir_state(&kept);
        let o = ptemu(&[
            "pttc",
            ptt.to_str().unwrap(),
            "--case",
            "-o",
            kept.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{stem}");
        assert_eq!(dir_state(&kept), before, "{stem}: DIR changed");
        // Without --case nothing collides.
        let o = ptemu(&["pttc", ptt.to_str().unwrap(), "-o", fresh.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "{stem}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// `--layout` writes `DIR/<root>-output/` with pttc's files, all or nothing: where a file
/// stands in its place, exit 2 naming it before anything is written (the file kept as it was);
/// a directory there from an earlier run is replaced whole.
#[test]
fn cli_layout_output_is_committed_with_the_files_or_not_at_all() {
    let work = tempfile::tempdir().unwrap();
    let ring = format!("{}/examples/ring-layout.toml", env!("CARGO_MANIFEST_DIR"));
    let dir = work.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("good-output"), "someone's file").unwrap();
    let before = dir_state(&dir);
    let run = || {
        ptemu(&[
            "pttc",
            &data("good.ptt"),
            "--layout",
            &ring,
            "-o",
            dir.to_str().unwrap(),
        ])
    };
    let o = run();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("good-output: is not a directory") && stderr.contains("nothing was written"),
        "{stderr}"
    );
    assert_eq!(dir_state(&dir), before, "DIR changed");
    // Once the place is free: every file and the directory, listed; an earlier run's directory
    // (ptemu's, SIM22) is replaced whole.
    std::fs::remove_file(dir.join("good-output")).unwrap();
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(dir.join("good-output/stale.txt"), "an earlier run's").unwrap();
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(
        listed.lines().last().unwrap().ends_with("good-output"),
        "{listed}"
    );
    for f in ["regions", "report.json", "events.jsonl", "layout.svg"] {
        assert!(dir.join("good-output").join(f).exists(), "{f}");
    }
    assert!(
        !dir.join("good-output/stale.txt").exists(),
        "the earlier directory is replaced whole"
    );
    let pt = std::fs::read(dir.join("good.pt")).unwrap();
    let region = std::fs::read(dir.join("good-output/regions/0x100000.bin")).unwrap();
    assert_eq!(region[..pt.len()], pt[..]);
    // No staging directory is left.
    assert!(dir_state(&dir)
        .iter()
        .all(|(n, _)| !n.starts_with(".ptemu-staging")));
}

/// SIM22: pttc writes its files where it is told, beside others' (as libipt's pttc does), but
/// never replaces a file it did not write: a `good.bin` of the user's is refused (exit 2,
/// nothing written) unless `--force`; its own files of an earlier run it replaces.
#[test]
fn sim22_pttc_replaces_only_its_own_files_unless_forced() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    std::fs::write(out.path().join("notes.txt"), "mine").unwrap();
    let o = ptemu(&["pttc", &data("good.ptt"), "-o", dir]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ptemu(&["pttc", &data("good.ptt"), "-o", dir]);
    assert!(
        o.status.success(),
        "a rerun replaces its own files: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::remove_file(out.path().join(".ptemu-out")).unwrap();
    std::fs::write(out.path().join("good.bin"), "my own").unwrap();
    let o = ptemu(&["pttc", &data("good.ptt"), "-o", dir]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("good.bin was not written by ptemu"), "{err}");
    assert_eq!(std::fs::read(out.path().join("good.bin")).unwrap(), b"my own");
    let o = ptemu(&["pttc", &data("good.ptt"), "-o", dir, "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(std::fs::read(out.path().join("good.bin")).unwrap(), b"my own");
    assert_eq!(std::fs::read(out.path().join("notes.txt")).unwrap(), b"mine");
}
