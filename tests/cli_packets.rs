//! `ptemu dump` and `ptemu asm` on the inputs and outputs a shell gives them: FIFOs and devices
//! read as what they yield, every `--json` line an object, extra tokens refused with a short
//! message, and a closed stdout an error rather than a silent exit 0.

mod common;

use common::cli::{ptemu, s, text};
use std::path::{Path, PathBuf};

/// A trace to work on: the bundled sample simulated into `dir/sim`.
fn sample_trace(dir: &Path) -> PathBuf {
    let out = dir.join("sim");
    let o = ptemu(&["simulate", "--out", s(&out), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    out.join("trace.pt")
}

/// A FIFO at `dir/name` that a thread fills with `body` once opened.
fn fifo(dir: &Path, name: &str, body: Vec<u8>) -> (PathBuf, std::thread::JoinHandle<()>) {
    let path = dir.join(name);
    assert!(std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap()
        .success());
    let p = path.clone();
    let writer = std::thread::spawn(move || std::fs::write(p, body).unwrap());
    (path, writer)
}

#[test]
fn dump_and_asm_read_fifos_as_what_they_yield() {
    let dir = tempfile::tempdir().unwrap();
    let trace = sample_trace(dir.path());
    let bytes = std::fs::read(&trace).unwrap();
    let from_file = ptemu(&["dump", s(&trace)]);
    assert!(from_file.status.success());
    let (pipe, writer) = fifo(dir.path(), "t.fifo", bytes.clone());
    let from_fifo = ptemu(&["dump", s(&pipe)]);
    writer.join().unwrap();
    assert!(from_fifo.status.success(), "{}", text(&from_fifo.stderr));
    assert_eq!(text(&from_fifo.stdout), text(&from_file.stdout));
    let (pipe, writer) = fifo(dir.path(), "txt.fifo", from_file.stdout.clone());
    let out = dir.path().join("b.pt");
    let o = ptemu(&["asm", s(&pipe), "-o", s(&out)]);
    writer.join().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        bytes,
        "asm from a FIFO, byte-identical"
    );
}

#[test]
fn every_dump_json_line_is_a_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let trace = std::fs::read(sample_trace(dir.path())).unwrap();
    let cases = [
        ("nopsb.bin", b"abc".to_vec(), "no PSB"),
        (
            "prefix.pt",
            [b"xx".as_slice(), &trace].concat(),
            "before the first PSB",
        ),
    ];
    for (name, body, note) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let o = ptemu(&["dump", "--json", s(&path)]);
        let out = text(&o.stdout);
        for line in out.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(v.is_object(), "{line}");
        }
        let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert!(first["note"].as_str().unwrap().contains(note), "{first}");
        assert!(first["skipped"].as_u64().unwrap() > 0);
    }
}

#[test]
fn asm_refuses_extra_tokens_naming_the_line_and_quotes_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.pt");
    for bad in [
        "pad pad",
        "psb extra",
        "ptw 8: 0x1, ip, ip",
        "tsc 1, 2",
        "trig 0x1, ip, ip",
    ] {
        let src = dir.path().join("bad.txt");
        std::fs::write(&src, format!("psb\n{bad}\n")).unwrap();
        let o = ptemu(&["asm", s(&src), "-o", s(&out)]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("bad.txt:2"), "{bad}: {err}");
        assert!(!out.exists());
    }
    // A 16 MB bad line: the message quotes a few dozen characters of it, not the line.
    let src = dir.path().join("huge.txt");
    std::fs::write(&src, format!("tsc {}\n", "9".repeat(16 << 20))).unwrap();
    let o = ptemu(&["asm", s(&src), "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stderr.len() < 300, "{} bytes of message", o.stderr.len());
}

/// `>&-`: stdout closed. The runtime would put `/dev/null` there and the output vanish with exit
/// 0; each command that writes to stdout exits 2 naming it instead. `>/dev/null` stays fine.
#[test]
fn a_closed_stdout_is_an_error_not_a_silent_success() {
    let dir = tempfile::tempdir().unwrap();
    let trace = sample_trace(dir.path());
    let penn = "tests/data/penn/sjeng-1K.trace";
    let cases: [&[&str]; 3] = [
        &["dump", s(&trace)],
        &["stats", penn, "--format", "penn"],
        &["gen", "--format", "penn", "--records", "10", "-o", "-"],
    ];
    for args in cases {
        for (redirect, code) in [(">&-", 2), (">/dev/null", 0)] {
            let o = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("exec \"$0\" \"$@\" {redirect}"))
                .arg(env!("CARGO_BIN_EXE_ptemu"))
                .args(args)
                .output()
                .unwrap();
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(code), "{args:?} {redirect}: {err}");
            if code == 2 {
                assert!(err.contains("stdout: writing: Bad file descriptor"), "{err}");
            }
        }
    }
}

/// The text after the offset column of each line of a dump.
fn packet_columns(dump: &str) -> Vec<&str> {
    dump.lines().map(|l| l[16..].trim()).collect()
}

#[test]
fn asm_assembles_every_kind_of_libipt_golden_packet_and_dump_gives_the_same_text() {
    let golden = "tests/data/asm/libipt-golden.txt";
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.pt");
    let o = ptemu(&["asm", golden, "-o", s(&out)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let back = ptemu(&["dump", s(&out)]);
    assert!(back.status.success(), "{}", text(&back.stderr));
    let want = std::fs::read_to_string(golden).unwrap();
    assert_eq!(packet_columns(&text(&back.stdout)), packet_columns(&want));
    let kinds: std::collections::BTreeSet<&str> = packet_columns(&want)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert!(kinds.len() >= 28, "{kinds:?}");
}

#[test]
fn hw_repack_lays_out_a_trace_as_the_cpu_would_and_compare_measures_it() {
    let dir = tempfile::tempdir().unwrap();
    // The bundled sample as simulate writes it, repacked for skylake: the same packets, PADs
    // between them, and every PAD run is the one the layout predicts.
    let trace = sample_trace(dir.path());
    let out = dir.path().join("sky.pt");
    let o = ptemu(&["repack", s(&trace), "--cpu", "skylake", "-o", s(&out)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let packets_of = |p: &Path| -> Vec<String> {
        let o = ptemu(&["dump", s(p)]);
        assert!(o.status.success());
        packet_columns(&text(&o.stdout))
            .into_iter()
            .filter(|l| *l != "pad")
            .map(String::from)
            .collect()
    };
    assert_eq!(packets_of(&out), packets_of(&trace));
    let o = ptemu(&["repack", s(&out), "--compare", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["matched"], v["packets"], "{v}");
    // --packing none takes every PAD out again.
    let bare = dir.path().join("bare.pt");
    let o = ptemu(&["repack", s(&out), "--packing", "none", "-o", s(&bare)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = ptemu(&["dump", s(&bare)]);
    assert!(!text(&o.stdout).contains(" pad"), "PADs left");
    assert_eq!(packets_of(&bare), packets_of(&trace));
    // Bytes before the first PSB are skipped, and said so.
    let mut pre = vec![0x06u8, 0x06, 0x06];
    pre.extend(std::fs::read(&trace).unwrap());
    let pre_path = dir.path().join("pre.pt");
    std::fs::write(&pre_path, pre).unwrap();
    let o = ptemu(&["repack", s(&pre_path), "-o", s(&dir.path().join("pre-out.pt"))]);
    assert!(o.status.success());
    assert!(
        text(&o.stderr).contains("3 bytes before the first PSB skipped"),
        "{}",
        text(&o.stderr)
    );
    // Bad bytes: exit 2 naming the file and the offset, and no output file.
    let mut bytes = std::fs::read(&trace).unwrap();
    bytes.truncate(100);
    bytes.extend_from_slice(&[0x02, 0xff]);
    let bad = dir.path().join("bad.pt");
    std::fs::write(&bad, &bytes).unwrap();
    let never = dir.path().join("never.pt");
    let o = ptemu(&["repack", s(&bad), "-o", s(&never)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("bad.pt: at byte 0x"),
        "{}",
        text(&o.stderr)
    );
    assert!(!never.exists());
}

/// Issue 28: bytes that hold no PSB decode to nothing, which is a failure (exit 1) as bad bytes
/// are; an empty file is an empty trace (exit 0); --no-sync decodes what it can.
#[test]
fn dump_of_bytes_without_a_psb_exits_1_and_of_an_empty_file_0() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(
        &garbage,
        (0..4096u32).map(|i| (i * 37 + 11) as u8 | 1).collect::<Vec<u8>>(),
    )
    .unwrap();
    let o = ptemu(&["dump", s(&garbage)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("[no PSB in 4096 bytes"),
        "{}",
        text(&o.stdout)
    );
    assert!(
        text(&o.stderr).contains("garbage.bin: no PSB in 4096 bytes"),
        "{}",
        text(&o.stderr)
    );
    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let o = ptemu(&["dump", s(&empty)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = ptemu(&["dump", "--json", s(&garbage)]);
    assert_eq!(o.status.code(), Some(1));
}

/// Issue 28: logs carry colour escapes only on a terminal; piped (as here) they are plain text.
#[test]
fn logs_written_to_a_pipe_carry_no_colour_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = ptemu(&["-vvv", "simulate", "--out", s(&out), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let log = text(&o.stderr);
    assert!(
        log.contains("DEBUG") || log.contains("TRACE") || log.contains("INFO"),
        "no log lines: {log}"
    );
    assert!(!log.contains('\u{1b}'), "escape codes in piped logs: {log:?}");
}

/// `repack -o DIR` says DIR is a directory (not "Device or resource busy"), and a decode error
/// names its offset once.
#[test]
fn repack_to_a_directory_or_of_bad_bytes_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let o = ptemu(&["simulate", "--out", s(&out), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let trace = out.join("trace.pt");
    for target in [".", s(dir.path())] {
        let o = ptemu(&["repack", s(&trace), "-o", target]);
        assert_eq!(o.status.code(), Some(2));
        assert!(text(&o.stderr).contains("is a directory"), "{}", text(&o.stderr));
    }
    let mut bad = [0x02, 0x82].repeat(8);
    bad.extend_from_slice(&[0x02, 0x23, 0x02, 0x02]);
    let bad_pt = dir.path().join("bad.pt");
    std::fs::write(&bad_pt, bad).unwrap();
    let o = ptemu(&["repack", s(&bad_pt), "-o", s(&dir.path().join("r.pt"))]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert_eq!(e.matches("byte 0x12").count(), 1, "{e}");
}

/// Issue 39: `repack` streams: 40 MiB of PADs (about 42 bytes a byte before: 1.68 GB) take no
/// more memory than the mapped input and a little more, for the write and the compare.
#[test]
fn repack_streams_in_memory_flat_with_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let pads = dir.path().join("pads.pt");
    std::fs::write(&pads, vec![0u8; 40 << 20]).unwrap();
    for extra in [&["-o", "OUT"][..], &["--compare"][..]] {
        let out = dir.path().join("r.pt");
        let args: Vec<&str> = extra
            .iter()
            .map(|a| if *a == "OUT" { s(&out) } else { a })
            .collect();
        let (ok, peak) = common::cli::peak_rss(
            std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"))
                .args(["repack", s(&pads), "--no-sync"])
                .args(&args),
        );
        assert!(ok, "{extra:?}");
        assert!(
            peak < 100 << 20,
            "{extra:?}: peak RSS {} MiB for a 40 MiB input",
            peak >> 20
        );
    }
}
