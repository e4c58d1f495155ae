//! `cargo xtask bench` (qemu_run): what `ptemu run` costs over QEMU alone (issue 41 §5,
//! spec/qemu.md "Cost"). `gzip -c` of an 8 MB text file, as `qemu-x86_64 gzip -c FILE` alone and
//! as `ptemu run --no-truth -- gzip -c FILE`, each the best of 3 by user + system CPU time (of the
//! whole process tree: QEMU with the plugin, and ptemu's reader and tracer threads); then once
//! with the truth, for the time and memory it adds. Prints the ratio (target <= 2, goal 1.3),
//! instructions per second, trace bytes per instruction and the truth's cost.
//!
//! Without `--bench` (under `cargo test --all-targets`) a smoke run on 64 KiB, once each. Skips,
//! saying so, where qemu-x86_64, gzip or the plugin is missing (`cargo xtask bench` builds the
//! plugin first).

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
