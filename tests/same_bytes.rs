//! No behaviour change across refactors: the CLI's outputs on the bundled samples have the same
//! bytes as the binary that wrote `tests/data/same-bytes/digests.txt` (SHA-256 of every file each
//! run writes). A change that alters an output on purpose regenerates the digests with
//! `PTEMU_UPDATE_SAME_BYTES=1 cargo test --test same_bytes` and says why in its commit.

mod common;

use common::cli::{generate, ptemu, s, text};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The committed digests.
const DIGESTS: &str = "tests/data/same-bytes/digests.txt";

/// Absolute output paths are padded to this length: report.json names the output directory (its
/// perf command), and a file's bytes must not depend on the temporary directory's length (which
/// may differ by machine).
const OUT_PATH_LEN: usize = 160;

/// `name -> digest` of every file under `dir` (relative names), with the temporary directory's
/// path `tmp` (in report.json's commands, truth.jsonl's input, perf.data) replaced by `#`s and
/// report.json without its `run` (seconds, peak RSS).
fn digests(run: &str, dir: &Path, tmp: &Path, out: &mut BTreeMap<String, String>) {
    let mut files = Vec::new();
    collect(dir, &mut files);
    let abs = std::path::absolute(tmp).unwrap();
    let abs = abs.to_str().unwrap().as_bytes().to_vec();
    for f in files {
        let mut bytes = std::fs::read(&f).unwrap();
        if f.file_name().unwrap() == "report.json" {
            // The run's time and memory differ run to run.
            let mut report: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            if let Some(m) = report.as_object_mut() {
                m.remove("run");
            }
            bytes = serde_json::to_vec_pretty(&report).unwrap();
        }
        replace_all(&mut bytes, &abs);
        let name = f.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
        let hex: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.insert(format!("{run}/{name}"), hex);
    }
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, files);
        } else {
            files.push(p);
        }
    }
}

/// Replaces every occurrence of `needle` in `bytes` with `#`s (same length).
fn replace_all(bytes: &mut [u8], needle: &[u8]) {
    let mut i = 0;
    while i + needle.len() <= bytes.len() {
        if &bytes[i..i + needle.len()] == needle {
            bytes[i..i + needle.len()].fill(b'#');
            i += needle.len();
        } else {
            i += 1;
        }
    }
}

/// An output directory under `root` whose absolute path is [`OUT_PATH_LEN`] bytes long.
fn out_dir(root: &Path, run: &str) -> PathBuf {
    let base = std::path::absolute(root).unwrap().join(run);
    let len = base.to_str().unwrap().len();
    assert!(
        len + 2 < OUT_PATH_LEN,
        "temporary directory path too long: {}",
        base.display()
    );
    let mut name = base.into_os_string();
    name.push("-");
    name.push("x".repeat(OUT_PATH_LEN - len - 1));
    PathBuf::from(name)
}

fn run_ok(args: &[&str]) {
    let o = ptemu(args);
    assert!(o.status.success(), "ptemu {args:?}: {}", text(&o.stderr));
}

#[test]
fn outputs_on_the_bundled_samples_keep_their_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let data = Path::new("tests/data");
    let mut all = BTreeMap::new();
    let mut simulate = |run: &str, args: &[&str]| {
        let out = out_dir(root, run);
        let mut full = vec!["simulate", "--out", s(&out)];
        full.extend_from_slice(args);
        run_ok(&full);
        digests(run, &out, root, &mut all);
    };
    simulate("default", &["--perf-data"]);
    let gcc = data.join("penn/gcc-1K.trace");
    simulate(
        "gcc-skylake",
        &[
            "--format",
            "penn",
            s(&gcc),
            "--cpu",
            "skylake",
            "--ctl",
            "DisRETC=1",
            "--ctl",
            "PSBFreq=1",
            "--ctl",
            "MTCEn=1",
            "--ctl",
            "CYCEn=1",
        ],
    );
    simulate(
        "gcc-faults",
        &[
            "--format",
            "penn",
            s(&gcc),
            "--fault",
            "ovf",
            "--fault",
            "corrupt",
            "--seed",
            "3",
        ],
    );
    let p2 = data.join("byu-p2/trace_small.tr");
    simulate("byu-p2", &["--format", "byu-p2", s(&p2)]);
    let dep = data.join("gem5/system.cpu.traceListener.deptrace.proto.gz");
    let fetch = data.join("gem5/system.cpu.traceListener.fetchtrace.proto.gz");
    simulate(
        "gem5",
        &[
            "--format",
            "gem5",
            s(&dep),
            "--fetch-trace",
            s(&fetch),
            "--cpu",
            "broadwell",
        ],
    );
    let layout = data.join("perf/unaligned-layout.toml");
    simulate("penn-layout", &["--layout", s(&layout), "--perf-data"]);
    let gen = root.join("gen");
    std::fs::create_dir_all(&gen).unwrap();
    for (format, records) in [
        ("byu", 20_000),
        ("kaplan", 3_000),
        ("gem5", 5_000),
        ("penn", 60_000),
    ] {
        let (file, fetch) = generate(&gen, format, records, 11);
        let mut args = vec!["--format", format, s(&file)];
        if format == "gem5" {
            args.extend(["--fetch-trace", s(&fetch)]);
        }
        simulate(&format!("gen-{format}"), &args);
    }
    let penn = gen.join("penn-11.trace");
    simulate(
        "gen-penn-wrap",
        &[
            "--format",
            "penn",
            s(&penn),
            "--fault",
            "wrap",
            "--fault",
            "corrupt-silent",
            "--seed",
            "5",
        ],
    );
    digests("gen", &gen, root, &mut all);
    let corpus = out_dir(root, "corpus");
    run_ok(&["corpus", s(&corpus), "--seed", "2"]);
    digests("corpus", &corpus, root, &mut all);
    let written = out_dir(root, "write");
    let stream = root.join("stream.bin");
    std::fs::write(
        &stream,
        (0..100 * 1024u32)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let o = ptemu(&[
        "write",
        "--layout",
        "examples/demo-layout.toml",
        "--stream",
        s(&stream),
        "--out",
        s(&written),
    ]);
    assert!(o.status.code() == Some(0), "{}", text(&o.stderr));
    digests("write", &written, root, &mut all);
    let tmp_path = std::path::absolute(root).unwrap().to_str().unwrap().to_owned();
    let mut stdout = |name: &str, args: &[&str]| {
        let mut o = ptemu(args);
        assert!(o.status.success(), "ptemu {args:?}: {}", text(&o.stderr));
        replace_all(&mut o.stdout, tmp_path.as_bytes());
        let hex: String = Sha256::digest(&o.stdout)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        all.insert(format!("{name}/stdout"), hex);
    };
    let gem5_trace = out_dir(root, "gen-gem5").join("trace.pt");
    stdout("dump", &["dump", s(&out_dir(root, "default").join("trace.pt"))]);
    stdout("dump-gem5", &["dump", s(&gem5_trace)]);
    stdout("asm", &["asm", "tests/data/asm/libipt-golden.txt", "-o", "-"]);
    stdout(
        "repack",
        &["repack", s(&gem5_trace), "--packing", "hardware", "-o", "-"],
    );
    stdout("repack-compare", &["repack", s(&gem5_trace), "--compare"]);
    stdout(
        "gen-byu-p2",
        &[
            "gen",
            "--format",
            "byu-p2",
            "--records",
            "5000",
            "--seed",
            "4",
            "-o",
            "-",
        ],
    );
    for (format, file) in [("byu-p2", &p2), ("penn", &gcc), ("gem5", &dep)] {
        stdout(
            &format!("stats-{format}"),
            &["stats", "--format", format, s(file)],
        );
    }
    stdout("layout-check", &["layout", "check", "examples/demo-layout.toml"]);

    let got: String = all.iter().map(|(k, v)| format!("{v}  {k}\n")).collect();
    if std::env::var_os("PTEMU_UPDATE_SAME_BYTES").is_some() {
        std::fs::write(DIGESTS, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(DIGESTS).unwrap();
    let changed: Vec<&str> = got
        .lines()
        .filter(|l| !want.lines().any(|w| w == *l))
        .chain(want.lines().filter(|w| !got.lines().any(|l| l == *w)))
        .collect();
    assert!(
        changed.is_empty(),
        "outputs changed (digest  run/file):\n{}",
        changed.join("\n")
    );
}
