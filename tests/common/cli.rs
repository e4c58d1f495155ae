//! Running the `ptemu` binary from the integration tests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `ptemu ARGS` and waits for it.
pub fn ptemu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(args)
        .output()
        .unwrap()
}

/// Starts `ptemu ARGS` with stdin piped (taken by the caller) and stdout and stderr discarded: for
/// tests that hold the pipe open, signal the child or wait for it their own way.
pub fn ptemu_spawn(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs `ptemu ARGS` with `input` on stdin and waits for it. A feeder thread writes stdin while
/// the output is read, so neither side can block the other; a command that stops reading early
/// (a bad record) closes the pipe, which is not an error here.
pub fn ptemu_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let body = input.to_vec();
    let feeder = std::thread::spawn(move || match stdin.write_all(&body) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("writing stdin: {e}"),
        _ => {}
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// Output bytes as text, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The arguments of `ptemu write --layout LAYOUT --stream STREAM --out OUT` (STREAM may be `-`);
/// the caller adds flags such as `-q`.
pub fn write_args<'a>(layout: &'a Path, stream: &'a str, out: &'a Path) -> Vec<&'a str> {
    vec![
        "write",
        "--layout",
        s(layout),
        "--stream",
        stream,
        "--out",
        s(out),
    ]
}

/// `ptemu gen` of `records` records of `format` into `dir/FORMAT-SEED.trace` (and, for gem5, the
/// fetch trace `dir/FORMAT-SEED.fetch`).
pub fn generate(dir: &Path, format: &str, records: u64, seed: u64) -> (PathBuf, PathBuf) {
    let file = dir.join(format!("{format}-{seed}.trace"));
    let fetch = dir.join(format!("{format}-{seed}.fetch"));
    let (records, seed) = (records.to_string(), seed.to_string());
    let mut args = vec![
        "gen",
        "--format",
        format,
        "--records",
        &records,
        "--seed",
        &seed,
        "-o",
        s(&file),
    ];
    if format == "gem5" {
        args.extend(["--fetch-trace", s(&fetch)]);
    }
    let o = ptemu(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    (file, fetch)
}

/// [`generate`] for Penn: the trace file.
pub fn gen_penn(dir: &Path, records: u64, seed: u64) -> PathBuf {
    generate(dir, "penn", records, seed).0
}

/// A `"0x..."` string of report.json or image.json (version 2) as its value; panics otherwise.
pub fn hex(v: &serde_json::Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{v} is not a \"0x...\" string"));
    u64::from_str_radix(s.strip_prefix("0x").expect("0x prefix"), 16).unwrap()
}

/// Runs `cmd` (stdout and stderr discarded) and returns whether it exited 0 and its peak RSS in
/// bytes (`wait4`'s `ru_maxrss`).
#[allow(dead_code)]
pub fn peak_rss(cmd: &mut Command) -> (bool, u64) {
    // Reaped by wait4 below, which also gives the peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for the child we spawned, with valid out-pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, usage.ru_maxrss as u64 * 1024)
}

/// A run directory's truth as `truth.jsonl`'s text: its `truth.bin` printed by `ptemu truth dump`
/// (spec/truth.md TR9), else its `truth.jsonl`.
#[allow(dead_code)]
pub fn truth_jsonl(dir: &std::path::Path) -> String {
    if dir.join("truth.bin").is_file() {
        let o = ptemu(&["truth", "dump", dir.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    } else {
        std::fs::read_to_string(dir.join("truth.jsonl")).unwrap()
    }
}
