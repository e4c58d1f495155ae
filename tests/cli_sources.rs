//! `ptemu gen` and `ptemu stats` on every format: generated files read back, stdin and stdout, gzip, and bad
//! input (exit 2, the file and position in the message, no output file left behind).

mod common;

use common::cli::{ptemu, ptemu_spawn, ptemu_stdin, s, text};
use serde_json::Value;

fn stats_json(args: &[&str]) -> Value {
    let o = ptemu(&[&["stats", "--json"], args].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

const FORMATS: [&str; 5] = ["byu", "byu-p2", "penn", "kaplan", "gem5"];

/// `ptemu gen` of `records` records of `format` from `seed`, gzip'd if `gz`; the output option is
/// the caller's.
fn gen_args(format: &'static str, records: &'static str, seed: &'static str, gz: bool) -> Vec<&'static str> {
    let mut args = vec!["gen", "--format", format, "--records", records, "--seed", seed];
    if gz {
        args.push("--gzip");
    }
    args
}

#[test]
fn gen_then_stats_for_every_format() {
    let dir = tempfile::tempdir().unwrap();
    for f in FORMATS {
        let a = dir.path().join(format!("{f}.a"));
        let b = dir.path().join(format!("{f}.b"));
        let z = dir.path().join(format!("{f}.z"));
        for (path, seed, gz) in [(&a, "7", false), (&b, "7", false), (&z, "7", true)] {
            let mut args = vec![
                "gen",
                "--format",
                f,
                "--records",
                "3000",
                "--seed",
                seed,
                "-o",
                s(path),
            ];
            if gz {
                args.push("--gzip");
            }
            let o = ptemu(&args);
            assert!(o.status.success(), "{f}: {}", text(&o.stderr));
        }
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{f}: same seed, same bytes"
        );
        assert_eq!(&std::fs::read(&z).unwrap()[..2], &[0x1f, 0x8b]);
        let plain = stats_json(&[s(&a), "--format", f]);
        let zipped = stats_json(&[s(&z), "--format", f]);
        assert_eq!(plain, zipped, "{f}: gzip is transparent");
        assert_eq!(plain["format"], f);
        assert_eq!(plain["skipped"], 0);
        assert!(plain["events"].as_u64().unwrap() > 1000, "{f}: {plain}");
        // Records: micro-op lines for penn, messages (header included? no: records) otherwise.
        let records = plain["records"].as_u64().unwrap();
        assert!(records >= 3000, "{f}: {records} records");
        // No temporary files are left next to the outputs.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names.iter().all(|n| !n.to_string_lossy().contains(".tmp-")),
            "{names:?}"
        );
    }
}

#[test]
fn gem5_pair_and_fetch_trace_rules() {
    let dir = tempfile::tempdir().unwrap();
    let dep = dir.path().join("dep.gz");
    let fetch = dir.path().join("fetch.gz");
    let o = ptemu(&[
        "gen",
        "--format",
        "gem5",
        "--records",
        "2000",
        "-o",
        s(&dep),
        "--fetch-trace",
        s(&fetch),
        "--gzip",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = stats_json(&[s(&dep), "--format", "gem5", "--fetch-trace", s(&fetch)]);
    assert!(v["counts"]["fetch"].as_u64().unwrap() > 0, "{v}");
    // The pair either way round: the headers tell which is which.
    let swapped = stats_json(&[s(&fetch), "--format", "gem5", "--fetch-trace", s(&dep)]);
    assert_eq!(swapped["counts"], v["counts"]);
    // Two traces of one kind: refused, naming the second file.
    let o = ptemu(&["stats", s(&dep), "--format", "gem5", "--fetch-trace", s(&dep)]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains(&format!("{}: byte offset 4:", s(&dep))), "{err}");
    assert!(
        err.contains("one elastic data trace and one instruction-fetch trace"),
        "{err}"
    );
    // A fetch trace with another format is refused, and nothing is written.
    let out = dir.path().join("penn.trace");
    let o = ptemu(&[
        "gen",
        "--format",
        "penn",
        "--records",
        "10",
        "-o",
        s(&out),
        "--fetch-trace",
        s(&fetch),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--fetch-trace goes with --format gem5 only"));
    assert!(!out.exists());
}

#[test]
fn gen_to_stdout_writes_the_same_bytes_as_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for f in FORMATS {
        for gz in [false, true] {
            let file = dir.path().join(format!("{f}.{gz}"));
            let args = gen_args(f, "500", "9", gz);
            let to_file = ptemu(&[&args[..], &["-o", s(&file)]].concat());
            assert!(to_file.status.success(), "{f}: {}", text(&to_file.stderr));
            let to_stdout = ptemu(&[&args[..], &["-o", "-"]].concat());
            assert!(to_stdout.status.success(), "{f}: {}", text(&to_stdout.stderr));
            assert_eq!(to_stdout.stdout, std::fs::read(&file).unwrap(), "{f} gzip={gz}");
        }
    }
    assert!(!std::path::Path::new("-").exists(), "no file named '-'");
    // One trace fits on stdout: the gem5 fetch trace must go to a file.
    let o = ptemu(&[
        "gen",
        "--format",
        "gem5",
        "--records",
        "10",
        "-o",
        "-",
        "--fetch-trace",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--fetch-trace -"), "{}", text(&o.stderr));
}

#[test]
fn stats_reads_stdin() {
    let sample = std::fs::read("tests/data/penn/sjeng-1K.trace").unwrap();
    let o = ptemu_stdin(&["stats", "-", "--format", "penn", "--json"], &sample);
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["records"].as_u64(), v["counts"]["macro_ops"].as_u64()),
        (Some(1000), Some(750))
    );
}

/// `-` reads stdin for every format, plain or gzip'd (detected by magic there too), with the same
/// report as the file; a bad record read from stdin is named as `-` with its position.
#[test]
fn stats_reads_stdin_for_every_format() {
    let dir = tempfile::tempdir().unwrap();
    for f in FORMATS {
        for gz in [false, true] {
            let file = dir.path().join(format!("{f}.{gz}"));
            let args = gen_args(f, "300", "5", gz);
            assert!(
                ptemu(&[&args[..], &["-o", s(&file)]].concat()).status.success(),
                "{f}"
            );
            let from_file = stats_json(&[s(&file), "--format", f]);
            let bytes = std::fs::read(&file).unwrap();
            let o = ptemu_stdin(&["stats", "-", "--format", f, "--json"], &bytes);
            assert!(o.status.success(), "{f} gzip={gz}: {}", text(&o.stderr));
            let from_stdin: Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(from_stdin["records"], from_file["records"], "{f} gzip={gz}");
            assert_eq!(from_stdin["counts"], from_file["counts"], "{f} gzip={gz}");
        }
    }
    // Cut short on stdin: the error names `-` and where the input ends.
    let file = dir.path().join("byu.cut");
    assert!(
        ptemu(&["gen", "--format", "byu", "--records", "10", "-o", s(&file)])
            .status
            .success()
    );
    let bytes = std::fs::read(&file).unwrap();
    let o = ptemu_stdin(&["stats", "-", "--format", "byu"], &bytes[..bytes.len() - 2]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("-: record 10 (byte offset 54)"), "{err}");
}

fn assert_bad(args: &[&str], needles: &[&str]) {
    let o = ptemu(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    let err = text(&o.stderr);
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
}

#[test]
fn bad_input_exits_2_with_file_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, body: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let penn = "tests/data/penn/CSC656-test-handedited.trace";
    assert_bad(
        &["stats", penn, "--format", "penn"],
        &[penn, "line 6: field 7 (branch)"],
    );
    let v = stats_json(&[penn, "--format", "penn", "--lenient"]);
    assert_eq!(v["skipped"], 3);

    let byu = file("cut.byu", &[0, 0, 0x10, 0, 0, 0x90, 0, 0, 0x10]);
    assert_bad(
        &["stats", s(&byu), "--format", "byu"],
        &["cut.byu", "record 2 (byte offset 6)"],
    );
    let p2 = file("cut.p2", &[0u8; 13]);
    assert_bad(
        &["stats", s(&p2), "--format", "byu-p2"],
        &["cut.p2", "record 2 (byte offset 12)"],
    );
    let gem5 = file("bad.gem5", b"gem6\x00");
    assert_bad(
        &["stats", s(&gem5), "--format", "gem5"],
        &["bad.gem5", "byte offset 0"],
    );
    let mut kaplan = b"C0001".to_vec();
    kaplan.extend_from_slice(&[0u8; 4096]);
    kaplan.extend_from_slice(b"N0001");
    let k = file("n.kaplan", &kaplan);
    assert_bad(
        &["stats", s(&k), "--format", "kaplan"],
        &["n.kaplan", "record 1 (byte offset 0)", "0000"],
    );
    assert_bad(
        &["stats", "/nonexistent/trace", "--format", "penn"],
        &["/nonexistent/trace"],
    );
}

/// The ways a gzip file can be broken: a bad CRC, a bad size, the 8-byte trailer cut off, bytes
/// after the member, and a second member cut short (`cat a.gz; head -c 30 b.gz`).
fn broken_gzips(a: &[u8], b: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut crc = a.to_vec();
    let n = crc.len();
    crc[n - 8] ^= 1;
    let mut size = a.to_vec();
    size[n - 1] ^= 1;
    vec![
        ("bad CRC", crc),
        ("bad size", size),
        ("trailer cut off", a[..n - 8].to_vec()),
        (
            "garbage after the member",
            [a, b"garbage after the member"].concat(),
        ),
        ("second member cut short", [a, &b[..30]].concat()),
    ]
}

/// Every format refuses a broken gzip file, named, with exit 2, from a file and from stdin: one
/// reading path keeps the decompressor's error (it used to be dropped for Penn and gem5, which
/// reported the records before the break as the whole trace).
#[test]
fn broken_gzip_is_refused_for_every_format() {
    let dir = tempfile::tempdir().unwrap();
    for f in FORMATS {
        let mut members = Vec::new();
        for seed in ["1", "2"] {
            let path = dir.path().join(format!("{f}.{seed}.gz"));
            let args = gen_args(f, "1000", seed, true);
            assert!(ptemu(&[&args[..], &["-o", s(&path)]].concat()).status.success());
            members.push(std::fs::read(&path).unwrap());
        }
        for (what, body) in broken_gzips(&members[0], &members[1]) {
            let path = dir.path().join(format!("{f}.broken.gz"));
            std::fs::write(&path, &body).unwrap();
            let o = ptemu(&["stats", s(&path), "--format", f]);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{f}, {what}: {err}");
            assert!(err.contains("broken.gz"), "{f}, {what}: {err}");
            let o = ptemu_stdin(&["stats", "-", "--format", f], &body);
            assert_eq!(
                o.status.code(),
                Some(2),
                "{f}, {what}, stdin: {}",
                text(&o.stderr)
            );
            let run = dir.path().join("run");
            let o = ptemu(&["simulate", s(&path), "--format", f, "--out", s(&run), "-q"]);
            assert_eq!(
                o.status.code(),
                Some(2),
                "{f}, {what}, simulate: {}",
                text(&o.stderr)
            );
            assert!(!run.exists(), "{f}, {what}: simulate left {}", run.display());
        }
    }
}

/// A gzip error on stdin is reported when the bad bytes arrive, not when the writer closes the
/// pipe: the writer here keeps it open until ptemu has exited.
#[test]
fn a_bad_gzip_on_stdin_is_reported_while_the_pipe_is_still_open() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.gz");
    let args = gen_args("penn", "1000", "1", true);
    assert!(ptemu(&[&args[..], &["-o", s(&path)]].concat()).status.success());
    let mut body = std::fs::read(&path).unwrap();
    let n = body.len();
    body[n - 8] ^= 1;
    let mut child = ptemu_spawn(&["stats", "-", "--format", "penn"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).unwrap();
    stdin.flush().unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(stdin);
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("ptemu still waits for stdin to close after a bad CRC")
    });
    assert_eq!(status.code(), Some(2));
}
