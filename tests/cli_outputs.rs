//! What `ptemu write` and `ptemu simulate` leave in DIR: region dumps that hold every byte the
//! output unit wrote, events streamed with flat memory, and, on any failure or signal, nothing
//! half-written and nothing the run made left behind.

mod common;

use common::cli::{ptemu, ptemu_spawn, s, text, write_args};
use common::stream;
use std::path::{Path, PathBuf};
use std::process::Output;

fn file(dir: &Path, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn write(layout: &Path, stream: &Path, out: &Path) -> Output {
    let mut args = write_args(layout, s(stream), out);
    args.push("--quiet");
    ptemu(&args)
}

/// Two entries with one region base, 8K then 4K with STOP (rule W1: each byte lands at the
/// current entry's Base plus the offset, within that entry's own size): the region file holds
/// the whole 8K region, whose second half received bytes, not the last entry's 4K.
#[test]
fn w1_a_region_named_twice_is_dumped_at_its_largest_size() {
    let dir = tempfile::tempdir().unwrap();
    let layout = file(
        dir.path(),
        "twice.toml",
        "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\n\
         entries = [\n  { region = 0x100000, size = \"8K\" },\n  { region = 0x100000, size = \"4K\", stop = true },\n\
         \x20 { end = 0x10000 },\n]\n",
    );
    let data = stream(0, 10_000);
    let st = file(dir.path(), "s.bin", &data);
    let out = dir.path().join("out");
    let o = write(&layout, &st, &out);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let region = std::fs::read(out.join("regions/0x100000.bin")).unwrap();
    assert_eq!(region.len(), 8192, "the 8K region, whole");
    // 8K through the first entry, then the rest over the start of the same region.
    assert_eq!(region[..10_000 - 8192], data[8192..]);
    assert_eq!(region[10_000 - 8192..], data[10_000 - 8192..8192]);
}

/// SIM7: a region file is sparse, written only where memory stored bytes: a 256 MiB single range
/// that received 18 bytes takes a page or so of disk, yet reads as the whole range (the stream,
/// then zeros), and a ToPA run's 1 MiB regions cost what they hold.
#[test]
fn sim7_region_files_are_sparse_a_large_range_costs_only_what_was_stored() {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let layout = file(
        dir.path(),
        "big.toml",
        "cpu = \"icelake\"\n[output]\nscheme = \"single-range\"\nbase = 0x100000000\nmask_ptrs = 0xfffffff\n",
    );
    let data = stream(0, 18);
    let st = file(dir.path(), "s.bin", &data);
    let out = dir.path().join("out");
    let o = write(&layout, &st, &out);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let path = out.join("regions/0x100000000.bin");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 256 << 20, "the whole range");
    // st_blocks counts 512-byte units: one 4 KiB page of data (a file system may add a few).
    assert!(
        meta.blocks() * 512 <= 64 << 10,
        "{} bytes allocated for 18 stored",
        meta.blocks() * 512
    );
    let mut f = std::fs::File::open(&path).unwrap();
    let mut head = vec![0u8; 8192];
    f.read_exact(&mut head).unwrap();
    assert_eq!(head[..18], data[..]);
    assert!(head[18..].iter().all(|&b| b == 0));
    for at in [1 << 20, (128 << 20) + 5, (256 << 20) - 4096] {
        let mut page = vec![1u8; 4096];
        f.seek(SeekFrom::Start(at)).unwrap();
        f.read_exact(&mut page).unwrap();
        assert!(page.iter().all(|&b| b == 0), "byte {at}");
    }
    // The default ToPA layout (1 MiB regions): 5000 bytes fill two pages of the first region.
    let layout = file(
        dir.path(),
        "topa.toml",
        "[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\n\
         entries = [\n  { region = 0x100000, size = \"1M\" },\n  { end = 0x10000 },\n]\n",
    );
    let data = stream(0, 5000);
    let st = file(dir.path(), "s2.bin", &data);
    let out = dir.path().join("out2");
    let o = write(&layout, &st, &out);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let path = out.join("regions/0x100000.bin");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 1 << 20);
    assert!(
        meta.blocks() * 512 <= 64 << 10,
        "{} bytes allocated for 5000 stored",
        meta.blocks() * 512
    );
    let region = std::fs::read(&path).unwrap();
    assert_eq!(region[..5000], data[..]);
    assert!(region[5000..].iter().all(|&b| b == 0));
}

/// Runs `ptemu ARGS` with `len` bytes of `byte` fed to stdin from a thread, and returns its exit
/// code and its own peak resident set in KiB (`wait4` reports the child's own usage; the stream is
/// made 64 KiB at a time, so the child does not start with a large parent's pages).
#[allow(clippy::zombie_processes)] // waited for by wait4, which clippy does not know
fn run_measured(args: &[&str], byte: u8, len: usize) -> (Option<i32>, i64) {
    use std::io::Write;
    let mut child = ptemu_spawn(args);
    let mut pipe = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let block = [byte; 1 << 16];
        (0..len / block.len()).try_for_each(|_| pipe.write_all(&block))
    });
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for this child, which is not waited for
    // elsewhere.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are live locals of the types wait4 writes.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    feeder.join().unwrap().unwrap();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, usage.ru_maxrss)
}

/// R3 (the single range wraps to offset 0 when full) a million times over: every wrap event is in
/// events.jsonl, the report keeps the first 1,000 and the counts, and memory stays flat in the
/// number of events (it grew by some 40 MB per million before events were streamed).
#[test]
fn sim13_r3_wrap_events_stream_to_events_jsonl_with_flat_memory() {
    let dir = tempfile::tempdir().unwrap();
    let layout = file(
        dir.path(),
        "tiny.toml",
        "cpu = \"icelake\"\n[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0x7f\n",
    );
    let mut peaks = Vec::new();
    for mib in [4usize, 64] {
        let out = dir.path().join(format!("out{mib}"));
        let mut args = write_args(&layout, "-", &out);
        args.push("-q");
        let (code, peak_kib) = run_measured(&args, 0x5a, mib << 20);
        assert_eq!(code, Some(0));
        peaks.push(peak_kib);
        let wraps = (mib << 20) as u64 / 128;
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(report["events_total"], wraps);
        assert_eq!(report["event_counts"]["wrap"], wraps);
        assert_eq!(report["events"].as_array().unwrap().len(), 1000);
        let jsonl = std::fs::read_to_string(out.join("events.jsonl")).unwrap();
        assert_eq!(jsonl.lines().count() as u64, wraps);
        let last: serde_json::Value = serde_json::from_str(jsonl.lines().last().unwrap()).unwrap();
        assert_eq!(last["rule"], "R3");
        assert_eq!(last["stream_offset"], wraps * 128);
    }
    assert!(
        peaks[1] < peaks[0] + 12 * 1024,
        "peak RSS {} KiB for 32K events, {} KiB for 512K",
        peaks[0],
        peaks[1]
    );
}

/// Every entry of `dir`, recursively, with each file's bytes: what a run may not change.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                all.push((p.clone(), None));
                todo.push(p);
            } else {
                all.push((p.clone(), Some(std::fs::read(&p).unwrap())));
            }
        }
    }
    all.sort();
    all
}

const PENN: &str = "tests/data/penn/sjeng-1K.trace";

/// A run that fails while writing its outputs (`trace.pt` is a directory, `regions` a file, the
/// input turns out bad halfway) leaves DIR exactly as it was: no new trace.pt beside the old
/// report.json, no replaced image.bin, no temporary file or directory.
#[test]
fn sim11_a_failed_run_leaves_the_output_directory_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = ptemu(&["simulate", PENN, "--format", "penn", "--out", s(&out), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut bad = std::fs::read(PENN).unwrap();
    bad.extend_from_slice(b"this is not a Penn line\n");
    let bad = file(dir.path(), "bad.trace", &bad);
    let other = file(
        dir.path(),
        "gcc.trace",
        std::fs::read("tests/data/penn/gcc-1K.trace").unwrap(),
    );

    // A simulate run into `out` that must fail with `needle` in its message and change nothing.
    let fails_unchanged = |input: &Path, needle: &str, what: &str| {
        let before = snapshot(&out);
        let o = ptemu(&["simulate", s(input), "--format", "penn", "--out", s(&out), "-q"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
        assert_eq!(snapshot(&out), before, "{what}");
    };
    fails_unchanged(&bad, "bad.trace: line 1001", "bad input after a thousand records");
    // regions/ replaced by a file: the commit fails before anything moves.
    std::fs::remove_dir_all(out.join("regions")).unwrap();
    std::fs::write(out.join("regions"), b"a file").unwrap();
    fails_unchanged(&other, "regions is not a directory", "regions as a file");
    // trace.pt as a directory; `ptemu write` the same way.
    std::fs::remove_file(out.join("regions")).unwrap();
    std::fs::remove_file(out.join("trace.pt")).unwrap();
    std::fs::create_dir(out.join("trace.pt")).unwrap();
    fails_unchanged(&other, "trace.pt is a directory", "trace.pt as a directory");
    std::fs::write(out.join("regions"), b"a file").unwrap();
    let layout = file(
        dir.path(),
        "l.toml",
        "[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0xfff\n",
    );
    let st = file(dir.path(), "s.bin", stream(0, 5000));
    let before = snapshot(&out);
    let o = write(&layout, &st, &out);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(snapshot(&out), before, "write, regions as a file");
}

/// Bad input with an `--out` whose directories do not exist yet: the run removes every directory
/// it created, parents included.
#[test]
fn sim11_a_failed_run_removes_the_directories_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = std::fs::read(PENN).unwrap();
    bad.extend_from_slice(b"garbage\n");
    let bad = file(dir.path(), "bad.trace", &bad);
    let out = dir.path().join("a/b/c");
    let o = ptemu(&["simulate", s(&bad), "--format", "penn", "--out", s(&out), "-q"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(!dir.path().join("a").exists(), "a/ was left behind");
    let layout = file(dir.path(), "bad.toml", "[output]\nscheme = \"nope\"\n");
    let st = file(dir.path(), "s.bin", stream(0, 100));
    let o = write(&layout, &st, &out);
    assert_eq!(o.status.code(), Some(2));
    assert!(!dir.path().join("a").exists(), "a/ was left behind by write");
    // The same run with good input creates them all and leaves no staging directory.
    let o = ptemu(&["simulate", PENN, "--format", "penn", "--out", s(&out), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        entries(&out),
        [
            ".ptemu-out",
            "events.jsonl",
            "image.bin",
            "image.json",
            "layout.svg",
            "regions",
            "report.json",
            "trace.pt",
            "truth.bin"
        ]
    );
}

/// SIGKILL cannot be caught, so a killed run leaves its staging directory; the next run in the
/// same DIR removes it (its process is gone) and leaves a live process's alone.
#[test]
fn sim12_a_killed_runs_staging_directory_is_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = out.join(format!(".ptemu-staging-{dead}"));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("trace.pt"), b"half").unwrap();
    let live = out.join(format!(".ptemu-staging-{}", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let o = ptemu(&["simulate", PENN, "--format", "penn", "--out", s(&out), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!stale.exists(), "the killed run's staging directory is gone");
    assert!(live.exists(), "a live process's staging directory stays");
}

/// Sends `signal` to `child` once `ready` holds (polled), and returns its exit code.
fn signal_when(child: &mut std::process::Child, signal: i32, ready: impl Fn() -> bool) -> Option<i32> {
    let start = std::time::Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the child never got ready"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended before the signal"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill has no memory-safety preconditions; the child has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    child.wait().unwrap().code()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// SIM12 from the first instruction of `main` on: a run started with SIGINT ignored (as a shell
/// starts `cmd &`) and interrupted before it made any output (blocked opening its input FIFO)
/// ends with 130 and writes nothing, instead of going on to the end.
#[test]
fn sim12_a_signal_before_any_output_ends_the_run_even_when_it_was_ignored() {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = dir.path().join("out");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"));
    cmd.args(["simulate", s(&fifo), "--format", "penn", "--out", s(&out), "-q"]);
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    // Ready when the signal thread runs, or after a second (before the fix it never did here).
    let started = std::time::Instant::now();
    let ready = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(Result::ok).any(|t| {
                    std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "ptemu-signals")
                })
            })
            .unwrap_or(false)
            || started.elapsed() > std::time::Duration::from_secs(1)
    };
    while !ready() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: kill has no memory-safety preconditions; the child has not been waited for.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    if child.try_wait().unwrap().is_none() {
        // Still running: give it its input (without blocking if it went away meanwhile).
        if let Ok(mut w) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
        {
            use std::io::Write;
            let _ = w.write_all(&std::fs::read(PENN).unwrap());
        }
    }
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(!out.exists(), "the interrupted run wrote {out:?}");
}

/// SIGINT, SIGTERM and SIGHUP while `simulate` and `write` are writing (their input pipe held
/// open) and while `gen` writes a large file: exit code 128 + the signal, and no temporary file,
/// staging directory or created directory left behind.
#[test]
fn sim12_a_signal_cleans_up_and_exits_128_plus_the_signal() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let layout = file(
        dir.path(),
        "l.toml",
        "[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0xfff\n",
    );
    let staging = |out: &Path| {
        std::fs::read_dir(out)
            .map(|mut d| {
                d.any(|e| {
                    e.unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with(".ptemu-staging-")
                })
            })
            .unwrap_or(false)
    };
    let sample = std::fs::read(PENN).unwrap();
    for (signal, cmd) in [
        (libc::SIGINT, "simulate"),
        (libc::SIGTERM, "write"),
        (libc::SIGHUP, "simulate"),
    ] {
        let out = dir.path().join(format!("new/{cmd}-{signal}"));
        let args: Vec<&str> = match cmd {
            "simulate" => vec!["simulate", "-", "--format", "penn", "--out", s(&out), "-q"],
            _ => [write_args(&layout, "-", &out), vec!["-q"]].concat(),
        };
        let mut child = ptemu_spawn(&args);
        // Part of the input, then the pipe stays open: the run waits with its outputs half made.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&sample[..sample.len() / 2]).unwrap();
        stdin.flush().unwrap();
        let code = signal_when(&mut child, signal, || staging(&out));
        drop(stdin);
        assert_eq!(code, Some(128 + signal), "{cmd}");
        assert!(
            !dir.path().join("new").exists(),
            "{cmd}: left {:?}",
            entries(dir.path())
        );
    }
    // gen to a file: the temporary file goes.
    let big = dir.path().join("big.trace");
    let mut child = ptemu_spawn(&["gen", "--format", "penn", "--records", "100000000", "-o", s(&big)]);
    let tmp_exists = || {
        entries(dir.path())
            .iter()
            .any(|n| n.starts_with("big.trace.tmp-"))
    };
    let code = signal_when(&mut child, libc::SIGTERM, tmp_exists);
    assert_eq!(code, Some(128 + libc::SIGTERM));
    assert_eq!(entries(dir.path()), ["l.toml"], "gen left files behind");
}

/// SIM11: the summary goes out before the outputs move into place, so a summary that cannot be
/// written (stdout on a full device) is exit 2 and leaves DIR as it was, for `simulate` and
/// `corpus` alike (issue 39).
#[test]
fn sim11_a_summary_that_cannot_be_written_leaves_dir_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["simulate", "--out"][..], &["corpus"][..]] {
        let out = dir.path().join(args[0]);
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"))
            .args(args)
            .arg(&out)
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("No space left"), "{}", text(&o.stderr));
        assert!(!out.exists(), "{args:?} left {}", out.display());
    }
}

/// Every entry of `dir` but ptemu's mark, with the bytes of its files.
fn user_view(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().into_string().unwrap();
            let bytes = e.path().is_file().then(|| std::fs::read(e.path()).unwrap());
            (name, bytes)
        })
        .filter(|(n, _)| n != ".ptemu-out")
        .collect();
    v.sort();
    v
}

/// `o` failed as bad input does (exit 2), its message holding `needle`.
fn refused(o: Output, needle: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "{err}");
}

fn simulate_into(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["simulate", PENN, "--format", "penn", "--out", s(out)];
    args.extend_from_slice(extra);
    ptemu(&args)
}

/// SIM22: a directory of the user's own files is not ptemu's: `simulate`, `write` and `corpus`
/// refuse it before they start (exit 2, the message names DIR, what it holds and `--force`),
/// and it is left exactly as it was.
#[test]
fn sim22_a_directory_of_someone_elses_files_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    file(&out, "notes.txt", "my notes");
    file(&out, "perf.data", "my own perf.data");
    let before = user_view(&out);
    let check = |o: Output, what: &str| {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(
            err.contains(&format!("{}:", out.display()))
                && err.contains("not written by ptemu")
                && err.contains("notes.txt, perf.data")
                && err.contains("--force"),
            "{what}: {err}"
        );
        assert_eq!(user_view(&out), before, "{what}");
        assert!(!out.join(".ptemu-out").exists(), "{what}");
    };
    check(simulate_into(&out, &["--perf-data", "-q"]), "simulate");
    let layout = file(
        dir.path(),
        "l.toml",
        "[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0xfff\n",
    );
    let st = file(dir.path(), "s.bin", stream(0, 5000));
    check(write(&layout, &st, &out), "write");
    check(ptemu(&["corpus", s(&out), "-q"]), "corpus");
}

/// SIM22: with `--force` ptemu writes its files into such a directory, replacing only the
/// same-named ones; a file it did not write is never removed, though the run does not write
/// it (perf.data without `--perf-data`), and the summary names what was replaced.
#[test]
fn sim22_force_replaces_only_the_same_named_files_and_removes_nothing_of_the_users() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    file(&out, "notes.txt", "my notes");
    file(&out, "perf.data", "my own perf.data");
    let o = simulate_into(&out, &["--force"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(out.join("perf.data")).unwrap(), b"my own perf.data");
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"my notes");
    assert!(out.join("trace.pt").is_file() && out.join(".ptemu-out").is_file());
    // Now the run writes perf.data: only with --force does it replace the user's.
    refused(
        simulate_into(&out, &["--perf-data", "-q"]),
        "perf.data was not written by ptemu",
    );
    assert_eq!(std::fs::read(out.join("perf.data")).unwrap(), b"my own perf.data");
    let o = simulate_into(&out, &["--perf-data", "--force"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("replaced files ptemu did not write (--force): perf.data"),
        "{}",
        text(&o.stdout)
    );
    assert_ne!(std::fs::read(out.join("perf.data")).unwrap(), b"my own perf.data");
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"my notes");
    // --force replaces files, never a directory of the user's.
    let other = dir.path().join("other");
    std::fs::create_dir_all(other.join("regions")).unwrap();
    file(&other.join("regions"), "kept.txt", "mine");
    refused(
        simulate_into(&other, &["--force", "-q"]),
        "is a directory ptemu did not write",
    );
    assert_eq!(std::fs::read(other.join("regions/kept.txt")).unwrap(), b"mine");
    // A mark that does not read is an error naming it; --force writes on as into a DIR of
    // someone else's.
    std::fs::write(out.join(".ptemu-out"), "not a mark\n").unwrap();
    refused(simulate_into(&out, &["-q"]), ".ptemu-out: line 1");
    let o = simulate_into(&out, &["-q", "--force"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"my notes");
}

/// SIM22: an earlier run's outputs are ptemu's: a run into its DIR replaces them and removes
/// those it does not write again (perf.data of a `--perf-data` run), and its summary says
/// which; a file the user put there afterwards under an output's name is neither removed nor
/// replaced.
#[test]
fn sim22_an_earlier_runs_outputs_are_replaced_and_the_summary_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = simulate_into(&out, &["--perf-data", "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(out.join("perf.data").is_file());
    file(&out, "notes.txt", "my notes");
    let o = simulate_into(&out, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(
        said.contains("held an earlier ptemu run's outputs: replaced trace.pt")
            && said.contains("removed perf.data"),
        "{said}"
    );
    assert!(!out.join("perf.data").exists());
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"my notes");
    // The user's own perf.data, put in afterwards: kept by a run that does not write one,
    // refused by one that does.
    file(&out, "perf.data", "my own perf.data");
    let o = simulate_into(&out, &["-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(out.join("perf.data")).unwrap(), b"my own perf.data");
    let before = user_view(&out);
    let o = simulate_into(&out, &["--perf-data", "-q"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(user_view(&out), before);
}

/// SIM22: a DIR written before the mark existed (a ptemu report.json beside regions/, no
/// `.ptemu-out`): the run replaces the entries it writes, removes none (one may be the
/// user's), and marks only its own.
#[test]
fn sim22_a_directory_written_before_the_mark_has_its_outputs_replaced_and_nothing_removed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = simulate_into(&out, &["--truth-format", "jsonl", "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_file(out.join(".ptemu-out")).unwrap();
    // Such a DIR may hold the user's files under the names of outputs.
    file(&out, "perf.data", "my own perf.data");
    let o = simulate_into(&out, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(
        said.contains("held an earlier ptemu run's outputs: replaced trace.pt"),
        "{said}"
    );
    assert!(!said.contains("removed"), "{said}");
    assert!(out.join(".ptemu-out").is_file() && out.join("truth.bin").is_file());
    assert_eq!(std::fs::read(out.join("perf.data")).unwrap(), b"my own perf.data");
    assert!(out.join("truth.jsonl").is_file());
    let mark = std::fs::read_to_string(out.join(".ptemu-out")).unwrap();
    assert!(
        !mark.contains("perf.data") && !mark.contains("truth.jsonl"),
        "{mark}"
    );
    // A corpus DIR from before the mark (its manifest.json is ptemu's): its cases are
    // replaced; the user's entries beside them stay.
    let corpus = dir.path().join("corpus");
    let o = ptemu(&["corpus", s(&corpus), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_file(corpus.join(".ptemu-out")).unwrap();
    file(&corpus, "notes.txt", "my notes");
    let o = ptemu(&["corpus", s(&corpus), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(corpus.join("notes.txt")).unwrap(), b"my notes");
    assert!(corpus.join(".ptemu-out").is_file() && corpus.join("clean-default/trace.pt").is_file());
    // A report.json that is not ptemu's makes no such directory.
    let other = dir.path().join("other");
    std::fs::create_dir_all(other.join("regions")).unwrap();
    file(&other, "report.json", "{\"msr\": 1}");
    let o = simulate_into(&other, &["-q"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
