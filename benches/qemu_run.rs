//! `cargo xtask bench` (qemu_run): what `ptemu run` costs over QEMU alone (issue 41 §5,
//! spec/qemu.md "Cost"). `gzip -c` of an 8 MB text file, as `qemu-x86_64 gzip -c FILE` alone and
//! as `ptemu run --no-truth -- gzip -c FILE`, each the best of 3 by user + system CPU time (of the
//! whole process tree: QEMU with the plugin, and ptemu's reader and tracer threads); then once
//! with the truth, for the time and memory it adds. Prints the ratio (target <= 2, goal 1.3),
//! instructions per second, trace bytes per instruction and the truth's cost.
//!
//! The plugin's own cost (issue 51 §3, QE13), in the same run: QEMU with the yardstick, a C
//! plugin whose block callback only stores a u32 id in a buffer that goes to /dev/null
//! (`benches/data/store_ids.c`, built here with gcc), and QEMU with ptemu's plugin whose stream
//! a thread of this bench reads and throws away (its CPU time counted with QEMU's: it stands for
//! the reads `ptemu run` makes). Prints both against the yardstick (target <= 1.3).
//!
//! Where ptemu's own time goes (issue 51 §1, §3): the plugin's stream recorded once, then read
//! by the reader alone and by reader and tracer together, in nanoseconds a block execution.
//!
//! Without `--bench` (under `cargo test --all-targets`) a smoke run on 64 KiB, once each. Skips,
//! saying so, where qemu-x86_64, gzip or the plugin is missing (`cargo xtask bench` builds the
//! plugin first).

use ptemu::sources::qemu::wire;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// User + system CPU time of every child waited for so far.
fn children_cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// User + system CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// What the thread that takes the plugin's stream does with it.
#[derive(Clone, Copy, PartialEq)]
enum Take {
    /// Reads it and throws it away.
    Drop,
    /// Reads its records with `ptemu_wire::Reader::next_record` (the view `ptemu run`'s events
    /// take: each executed block an execution record).
    Records,
    /// Reads them with `Reader::next_batched` (executed blocks as batches of indices).
    Batches,
    /// Keeps it, in memory, for the stage measurements.
    Keep,
}

/// QEMU running gzip with ptemu's plugin, its stream taken by a thread of ours as `take` says:
/// QEMU's CPU time, the thread's, and the stream's bytes (with `Drop`) or the executed blocks
/// read (with `Batches`) or the execution records read (with `Records`).
fn plugin_drained(
    qemu: &Path,
    plugin: &Path,
    gzip: &Path,
    file: &Path,
    take: Take,
) -> (Duration, Duration, u64) {
    let (q, r, n, _) = plugin_stream(qemu, plugin, gzip, file, take);
    (q, r, n)
}

/// [`plugin_drained`], with the stream itself when `take` is [`Take::Keep`].
fn plugin_stream(
    qemu: &Path,
    plugin: &Path,
    gzip: &Path,
    file: &Path,
    take: Take,
) -> (Duration, Duration, u64, Vec<u8>) {
    let (mut ours, theirs) = UnixStream::pair().expect("a socket pair");
    let fd = theirs.as_raw_fd();
    // QEMU inherits its end (as `ptemu run` gives it, QE19).
    // SAFETY: fcntl on a descriptor we own.
    assert!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } == 0);
    let reader = std::thread::spawn(move || {
        let start = thread_cpu();
        let mut n = 0u64;
        let mut kept = Vec::new();
        if take == Take::Keep {
            ours.read_to_end(&mut kept).expect("the plugin's stream");
            n = kept.len() as u64;
        } else if take == Take::Drop {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match ours.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => n += k as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => panic!("reading the plugin's stream: {e}"),
                }
            }
        } else {
            let mut r = wire::Reader::new(ours);
            if take == Take::Records {
                while let Some(rec) = r.next_record().expect("a good stream") {
                    n += u64::from(matches!(rec, wire::Record::Exec { .. }));
                }
            } else {
                while let Some(rec) = r.next_batched().expect("a good stream") {
                    if let wire::Batched::Blocks(b) = rec {
                        n += b.len() as u64;
                    }
                }
            }
        }
        (thread_cpu() - start, n, kept)
    });
    let mut cmd = Command::new(qemu);
    cmd.arg("-plugin")
        .arg(format!("{},fd={fd}", plugin.display()))
        .arg(gzip)
        .arg("-c")
        .arg(file)
        .stdout(Stdio::null());
    let before = children_cpu();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    drop(theirs);
    let st = child.wait().expect("wait for QEMU");
    assert!(st.success(), "{cmd:?}: {st}");
    let qemu_cpu = children_cpu() - before;
    let (read_cpu, bytes, kept) = reader.join().expect("the reader");
    assert!(bytes > 8, "the plugin sent nothing");
    (qemu_cpu, read_cpu, bytes, kept)
}

/// Where `ptemu run --no-truth`'s own time goes, per executed block, on a stream recorded
/// once (no QEMU running beside it): the reader alone (`QemuEvents::next_steps`, the plugin's
/// batches walked into block executions, QE13), then reader and tracer as `ptemu run` drives
/// them (`simulate::run_source`, the reader on its own thread, BLK1). Each the best of
/// `rounds` by CPU time of this process.
fn stages(stream: &[u8], rounds: usize) {
    use ptemu::simulate::{self, Options};
    use ptemu::sources::qemu::{QemuEvents, Sideband};
    use ptemu::sources::steps::Steps;
    use ptemu::sources::{EventSource, Format};
    use std::sync::{Arc, Mutex};
    let source = |bytes: Vec<u8>| {
        QemuEvents::new(
            "gzip",
            std::io::Cursor::new(bytes),
            Arc::new(Mutex::new(Sideband::default())),
        )
    };
    let mut execs = 0u64;
    let mut reader = Duration::MAX;
    let mut both = Duration::MAX;
    for _ in 0..rounds {
        let mut src = source(stream.to_vec());
        let mut steps = Steps::default();
        let start = process_cpu();
        execs = 0;
        loop {
            steps.clear();
            if !src.next_steps(&mut steps).expect("a good stream") {
                break;
            }
            execs += (steps.len() - steps.events_len()) as u64;
        }
        reader = reader.min(process_cpu() - start);
        let src = source(stream.to_vec());
        let opts = Options::new(Format::Qemu, simulate::default_layout());
        let start = process_cpu();
        let _: (_, std::io::Sink) = simulate::run_source(
            &opts,
            "gzip",
            Box::new(src),
            std::io::sink(),
            None,
            ptemu::event_log::EventLog::new(16),
            &mut |_| {},
        )
        .expect("a good stream");
        both = both.min(process_cpu() - start);
    }
    let ns = |d: Duration| d.as_secs_f64() * 1e9 / execs.max(1) as f64;
    println!(
        "qemu_run: stages on the recorded stream ({execs} block executions): the reader alone {reader:.2?} CPU \
         ({:.1} ns a block), reader and tracer {both:.2?} ({:.1} ns a block; the tracer and the hand-off \
         {:.1})",
        ns(reader),
        ns(both),
        ns(both.saturating_sub(reader)),
    );
}

/// User + system CPU time of this process (all its threads).
fn process_cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

/// `benches/data/store_ids.c` built into `dir` (None, said, without gcc).
fn store_ids_plugin(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/store_ids.c");
    let so = dir.join("libstore_ids.so");
    let built = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-Wall", "-o"])
        .arg(&so)
        .arg(&src)
        .status();
    match built {
        Ok(st) if st.success() => Some(so),
        other => {
            println!("qemu_run: the C plugin that stores ids is not built (gcc: {other:?}): its comparison is skipped");
            None
        }
    }
}

/// Runs `cmd` (stdout to /dev/null); its CPU time and wall time.
fn measure(cmd: &mut Command) -> (Duration, Duration) {
    let before = children_cpu();
    let wall = Instant::now();
    let st = cmd
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let wall = wall.elapsed();
    assert!(st.success(), "{cmd:?}: {st}");
    (children_cpu() - before, wall)
}

/// A text file of `len` bytes that compresses about as well as base64 of random bytes (a fixed
/// generator: every run reads the same file).
fn input(dir: &Path, len: usize) -> PathBuf {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut text = Vec::with_capacity(len);
    while text.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push(if text.len() % 77 == 76 {
            b'\n'
        } else {
            ALPHABET[(x >> 58) as usize]
        });
    }
    let p = dir.join("input.txt");
    std::fs::write(&p, text).expect("write the input");
    p
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // Only the stages, on a stream recorded before (the plugin's bytes as it wrote them to
    // its socket): for measuring a change to the reader or the tracer without QEMU.
    if let Some(file) = std::env::var_os("PTEMU_BENCH_STREAM") {
        let stream = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", Path::new(&file).display()));
        let rounds = std::env::var("PTEMU_BENCH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(3);
        stages(&stream, rounds);
        return;
    }
    let ptemu = PathBuf::from(env!("CARGO_BIN_EXE_ptemu"));
    let plugin = ptemu.with_file_name("libptemu_qemu.so");
    let (Some(qemu), Some(gzip)) = (on_path("qemu-x86_64"), on_path("gzip")) else {
        println!(
            "qemu_run: skipped: qemu-x86_64 or gzip is not on the PATH (apt-get install qemu-user gzip)"
        );
        return;
    };
    if !plugin.is_file() {
        println!(
            "qemu_run: skipped: no plugin at {} (cargo build {}-p ptemu-qemu)",
            plugin.display(),
            if bench { "--release " } else { "" }
        );
        return;
    }
    let (len, rounds) = if bench { (8 << 20, 3) } else { (64 << 10, 1) };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = input(dir.path(), len);
    let out = dir.path().join("out");
    // Only record the plugin's stream of the bench's run, for `PTEMU_BENCH_STREAM` later (the
    // same stream for two builds' stages).
    if let Some(save) = std::env::var_os("PTEMU_BENCH_SAVE_STREAM") {
        let (_, _, _, stream) = plugin_stream(&qemu, &plugin, &gzip, &file, Take::Keep);
        std::fs::write(&save, &stream).unwrap_or_else(|e| panic!("{}: {e}", Path::new(&save).display()));
        println!(
            "qemu_run: the plugin's stream ({} bytes) saved to {}",
            stream.len(),
            Path::new(&save).display()
        );
        return;
    }
    let best = |make: &dyn Fn() -> Command| {
        (0..rounds)
            .map(|_| measure(&mut make()))
            .min()
            .expect("at least one round")
    };
    let (alone, _) = best(&|| {
        let mut c = Command::new(&qemu);
        c.arg(&gzip).arg("-c").arg(&file);
        c
    });
    // The plugin's own cost against the yardstick, in the same run (QE13).
    if let Some(store_ids) = store_ids_plugin(dir.path()) {
        let (yardstick, _) = best(&|| {
            let mut c = Command::new(&qemu);
            c.arg("-plugin").arg(&store_ids).arg(&gzip).arg("-c").arg(&file);
            c
        });
        let (q, r, bytes) = (0..rounds)
            .map(|_| plugin_drained(&qemu, &plugin, &gzip, &file, Take::Drop))
            .min_by_key(|&(q, r, _)| q + r)
            .expect("at least one round");
        let (y, a) = (yardstick.as_secs_f64(), alone.as_secs_f64());
        let total = (q + r).as_secs_f64();
        let ratio = total / y;
        println!(
            "qemu_run: the plugin's cost, gzip -c of {} KiB, CPU: QEMU alone {alone:.2?}; with the C plugin \
             that stores u32 ids {yardstick:.2?} ({:.2}x QEMU alone); with ptemu's plugin {q:.2?} + {r:.2?} \
             reading its {} MB stream = {:.2} s ({ratio:.2}x the C plugin's, target <= 1.3; QEMU's part {:.2}x; \
             above QEMU alone {:.2}x the C plugin's){}",
            len >> 10,
            y / a,
            bytes / 1_000_000,
            total,
            q.as_secs_f64() / y,
            (total - a) / (y - a).max(1e-9),
            if !bench || ratio <= 1.3 { "" } else { "  MISSED" }
        );
        // The reader's own cost on the same stream, both views, once each.
        let (_, records_cpu, records) = plugin_drained(&qemu, &plugin, &gzip, &file, Take::Records);
        let (_, batches_cpu, blocks) = plugin_drained(&qemu, &plugin, &gzip, &file, Take::Batches);
        let ns = |d: Duration| d.as_secs_f64() * 1e9 / blocks.max(1) as f64;
        println!(
            "qemu_run: reading the stream ({blocks} executed blocks): next_record {records_cpu:.2?} CPU \
             ({records} execution records, {:.1} ns a block), next_batched {batches_cpu:.2?} ({:.1} ns a block), \
             reading it alone {r:.2?} ({:.1} ns a block)",
            ns(records_cpu),
            ns(batches_cpu),
            ns(r),
        );
    }
    // Where ptemu's own time goes, on a stream recorded once.
    let (_, _, _, stream) = plugin_stream(&qemu, &plugin, &gzip, &file, Take::Keep);
    stages(&stream, rounds);
    drop(stream);
    let run = |truth: bool| {
        let mut c = Command::new(&ptemu);
        c.args(["run", "-q", "--out"])
            .arg(&out)
            .arg("--plugin")
            .arg(&plugin);
        if !truth {
            c.arg("--no-truth");
        }
        c.arg("--").arg(&gzip).arg("-c").arg(&file);
        c
    };
    let (traced, wall) = best(&|| run(false));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("report.json"))
            .expect("a JSON report");
    let insns = report["stats"]["instructions"].as_u64().unwrap_or(0);
    let bytes = report["stats"]["trace_bytes"].as_u64().unwrap_or(0);
    let (with_truth, _) = measure(&mut run(true));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("report.json"))
            .expect("a JSON report");
    let rss = report["run"]["peak_rss_bytes"].as_u64().unwrap_or(0);
    let ratio = traced.as_secs_f64() / alone.as_secs_f64();
    println!(
        "qemu_run: gzip -c of {} KiB: qemu-x86_64 alone {alone:.2?} CPU, ptemu run --no-truth {traced:.2?} \
         CPU ({wall:.2?} wall): ratio {ratio:.1} (target <= 2, goal 1.3){}",
        len >> 10,
        if !bench || ratio <= 2.0 { "" } else { "  MISSED" }
    );
    println!(
        "qemu_run: {insns} instructions, {:.0} M instructions/s of CPU, {:.3} trace bytes/instruction; \
         with the truth {with_truth:.2?} CPU (+{:.0}%), peak RSS {} MiB",
        insns as f64 / traced.as_secs_f64() / 1e6,
        bytes as f64 / insns.max(1) as f64,
        (with_truth.as_secs_f64() / traced.as_secs_f64() - 1.0) * 100.0,
        rss >> 20
    );
}
