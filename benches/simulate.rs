//! `cargo xtask bench` (simulate): end-to-end Penn text -> PT through the `ptemu simulate` binary
//! (reader, grouping, code image, tracer, output unit, trace.pt, regions, report) on generated
//! 1M- and 20M-micro-op files: input MB/s, micro-ops/s and peak RSS for both sizes. Targets
//! (issue 6): >= 300 MB/s of Penn text per core; peak RSS flat in trace length (<= 64 MiB plus the
//! simulated buffers, here the default layout's 4 MiB).
//!
//! The baseline, run in the same process on the same file: parsing alone (`UopReader`), so the
//! ratio shows what grouping, image synthesis, tracing and output cost on top of reading.
//!
//! Packing (issue 22): the default CPU's hardware layout against `--packing none` on the 1M-uop
//! Penn file and on a BYU file five times its record count (packet-dense), run alternately, best
//! of each. Target: at most 1.10x.
//!
//! The main measures run with `--no-truth`; the ground truth's cost (spec/truth.md, on by default)
//! is one more line: the 1M-uop file with and without it, alternately.
//!
//! Files are generated once into target/bench-data/ (the 20M file is about 1.7 GB);
//! PTEMU_BENCH_SCALE=0.1 makes them a tenth the size. `cargo test --all-targets` runs this binary
//! without `--bench`: a smoke run on small files that checks the report, judging nothing.

use ptemu::sources::penn::UopReader;
use ptemu::sources::{self, Format, Input, ReadOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Peak RSS allowed beyond the simulated buffers.
const RSS_BUDGET: u64 = 64 << 20;
/// The default layout's regions.
const BUFFERS: u64 = 4 << 20;
/// Target input rate.
const TARGET_MB_S: f64 = 300.0;
/// The most the hardware layout (spec/hardware.md) may cost over none (issue 22).
const PACKING_COST: f64 = 1.10;
/// Issue 40: `simulate` with the truth at most this times the time without it.
const TRUTH_COST: f64 = 1.25;
/// Issue 40: the truth at most this many bytes an instruction on disk.
const TRUTH_BYTES: f64 = 2.0;
/// Issue 29: end-to-end speed-ups of `--threads` (the machine's cores) over `--threads 1` of the
/// same build: BYU, Penn, gem5.
const THREAD_TARGETS: [(Format, f64); 3] = [(Format::Byu, 2.5), (Format::Penn, 1.5), (Format::Gem5, 1.5)];

/// Seconds with the arguments `a` and with `b` on the same file, best of `runs` each, run
/// alternately so that drift of the machine hits both; and the trace bytes of each.
fn alternate(input: &Path, format: Format, runs: usize, a: &[&str], b: &[&str]) -> ((f64, u64), (f64, u64)) {
    let out = data_dir().join(format!("simulate-pair-{format}"));
    let (mut first, mut second) = ((f64::MAX, 0), (f64::MAX, 0));
    for _ in 0..runs {
        for (extra, best) in [(a, &mut first), (b, &mut second)] {
            let (secs, report) = simulate(input, format, &out, extra);
            let bytes = report["stats"]["trace_bytes"].as_u64().unwrap();
            if secs < best.0 {
                *best = (secs, bytes);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    (first, second)
}

fn data_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A generated file of `records` records of `format`, made once (the sources bench shares it).
fn generated(format: Format, records: u64) -> PathBuf {
    let path = data_dir().join(format!("{format}-{records}.trace"));
    if !path.exists() {
        eprintln!("generating {} ...", path.display());
        let tmp = path.with_extension("tmp");
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).unwrap());
        sources::generate(format, records, 1, &mut out, None).unwrap();
        drop(out);
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// A generated gem5 pair of `records` dep records (and its fetch trace), made once.
fn generated_gem5(records: u64) -> (PathBuf, PathBuf) {
    let path = data_dir().join(format!("gem5-{records}.trace"));
    let fetch = data_dir().join(format!("gem5-{records}.fetch"));
    if !path.exists() || !fetch.exists() {
        eprintln!("generating {} ...", path.display());
        let (mut main, mut f) = (Vec::new(), Vec::new());
        sources::generate(Format::Gem5, records, 1, &mut main, Some(&mut f)).unwrap();
        std::fs::write(&fetch, f).unwrap();
        std::fs::write(&path, main).unwrap();
    }
    (path, fetch)
}

/// The commit issue 29's targets are measured against.
const BASELINE_COMMIT: &str = "e9f9b8056404422130501eace524465180187807";
/// [`BASELINE_COMMIT`] as the issue writes it.
const BASELINE_SHORT: &str = "e9f9b80";

/// `ptemu` as of [`BASELINE_COMMIT`], built once into target/bench-baseline/ from a git worktree
/// of this repository; `None` (and why, on stderr) without git or the commit.
fn baseline_binary() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/bench-baseline");
    let tree = dir.join(BASELINE_SHORT);
    let bin = dir.join("target/release/ptemu");
    if bin.exists() {
        return Some(bin);
    }
    let run = |cmd: &mut Command| cmd.status().map(|s| s.success()).unwrap_or(false);
    if !tree.exists()
        && !run(Command::new("git")
            .current_dir(root)
            .args(["worktree", "add", "--detach", "--force"])
            .arg(&tree)
            .arg(BASELINE_COMMIT))
    {
        eprintln!("no baseline: cannot make a git worktree of {BASELINE_SHORT}");
        return None;
    }
    eprintln!("building ptemu at {BASELINE_SHORT} (once) ...");
    let built = run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&tree)
            .args(["build", "--release", "--quiet", "--bin", "ptemu", "--target-dir"])
            .arg(dir.join("target")),
    );
    if !built {
        eprintln!("no baseline: building {BASELINE_SHORT} failed");
        return None;
    }
    Some(bin)
}

/// Wall seconds of one `bin simulate` run on `input` of `format` with `extra` arguments.
fn simulate_with(bin: &Path, input: &Path, format: Format, out: &Path, extra: &[&str]) -> f64 {
    let t = Instant::now();
    let o = Command::new(bin)
        .args(["simulate", "--format", &format.to_string(), "-q", "--out"])
        .arg(out)
        .args(extra)
        .arg(input)
        .output()
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    secs
}

/// Issue 29: each format with `--threads N` (the cores, at least 2) against `--threads 1` of
/// this build and against [`BASELINE_COMMIT`]'s binary (judged against the latter when it could
/// be built, as the issue states its targets; a same-build ratio cannot pass N on N cores),
/// alternately, best of `runs`; and the threaded run's peak RSS.
fn threads(records: u64, runs: usize, bench: bool, judged: &dyn Fn(bool) -> &'static str) -> Vec<Value> {
    // Building the baseline takes minutes: only for a measurement, not a smoke run.
    let baseline = if bench { baseline_binary() } else { None };
    let cores = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2)
        .to_string();
    let mut rows = Vec::new();
    for (format, target) in THREAD_TARGETS {
        let (input, fetch) = match format {
            Format::Byu => (generated(format, records * 4), None),
            Format::Gem5 => {
                let (i, f) = generated_gem5(records);
                (i, Some(f))
            }
            _ => (generated(format, records), None),
        };
        let fetch_args: Vec<&str> = fetch
            .as_deref()
            .map_or(vec![], |f| vec!["--fetch-trace", f.to_str().unwrap()]);
        let one = [&["--no-truth", "--threads", "1"][..], &fetch_args].concat();
        let many = [&["--no-truth", "--threads", &cores][..], &fetch_args].concat();
        let out = data_dir().join(format!("simulate-threads-{format}"));
        let (mut best1, mut best_n, mut best_old, mut rss) = (f64::MAX, f64::MAX, f64::MAX, 0u64);
        for _ in 0..runs {
            if let Some(bin) = &baseline {
                best_old = best_old.min(simulate_with(bin, &input, format, &out, &fetch_args));
            }
            let (s1, _) = simulate(&input, format, &out, &one);
            let (sn, report) = simulate(&input, format, &out, &many);
            best1 = best1.min(s1);
            if sn < best_n {
                best_n = sn;
                rss = report["run"]["peak_rss_bytes"].as_u64().unwrap_or(0);
            }
        }
        let _ = std::fs::remove_dir_all(&out);
        let speedup = best1 / best_n;
        let over_old = baseline.as_ref().map(|_| best_old / best_n);
        let verdict = match over_old {
            Some(r) => format!(
                "{r:.2}x over {BASELINE_SHORT} ({best_old:.3} s): target >= {target:.1}x: {}",
                judged(r >= target)
            ),
            None => {
                format!("target >= {target:.1}x over {BASELINE_SHORT}: not measured (no baseline binary)")
            }
        };
        println!(
            "threads, {format} ({} MB): 1 thread {best1:.3} s, {cores} threads {best_n:.3} s: {speedup:.2}x \
             over one thread; {verdict}; peak RSS {:.1} MiB (target <= {} MiB + {} MiB buffers: {})",
            std::fs::metadata(&input).unwrap().len() / 1_000_000,
            rss as f64 / 1048576.0,
            RSS_BUDGET >> 20,
            BUFFERS >> 20,
            judged(rss <= RSS_BUDGET + BUFFERS)
        );
        rows.push(serde_json::json!({"format": format, "one_thread_seconds": best1,
            "threads": cores, "threaded_seconds": best_n, "speedup_over_one_thread": speedup,
            "baseline": BASELINE_SHORT, "baseline_seconds": over_old.map(|_| best_old),
            "speedup_over_baseline": over_old, "target": target, "peak_rss_bytes": rss}));
    }
    rows
}

/// One `ptemu simulate` run on `input` of `format` with `extra` arguments: wall seconds of the
/// whole process, and its report.
fn simulate(input: &Path, format: Format, out: &Path, extra: &[&str]) -> (f64, Value) {
    let secs = simulate_with(Path::new(env!("CARGO_BIN_EXE_ptemu")), input, format, out, extra);
    let report = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    (secs, report)
}

/// Parsing alone, in this process: seconds.
fn parse_only(input: &Path) -> f64 {
    let t = Instant::now();
    let mut r = UopReader::new(Input::open(input).unwrap(), ReadOptions::default());
    let mut n = 0u64;
    while r.next_uop().unwrap().is_some() {
        n += 1;
    }
    std::hint::black_box(n);
    t.elapsed().as_secs_f64()
}

struct Measured {
    uops: u64,
    mb: f64,
    secs: f64,
    baseline_secs: f64,
    rss: u64,
    instructions: u64,
    trace_bytes: u64,
}

fn measure(uops: u64, runs: usize) -> Measured {
    let input = generated(Format::Penn, uops);
    let mb = std::fs::metadata(&input).unwrap().len() as f64 / 1e6;
    let out = data_dir().join(format!("simulate-out-{uops}"));
    let mut best: Option<(f64, Value)> = None;
    let mut baseline = f64::MAX;
    for _ in 0..runs {
        // Alternate with the baseline so drift of the machine hits both.
        baseline = baseline.min(parse_only(&input));
        // The trace pipeline alone; what the ground truth adds is measured apart (truth_cost).
        let (secs, report) = simulate(&input, Format::Penn, &out, &["--no-truth"]);
        if best.as_ref().is_none_or(|(b, _)| secs < *b) {
            best = Some((secs, report));
        }
    }
    let (secs, report) = best.unwrap();
    let stats = &report["stats"];
    let rss = report["run"]["peak_rss_bytes"].as_u64().unwrap_or(0);
    // The generator ends on an instruction boundary: up to 3 lines more than asked.
    let records = stats["records"].as_u64().unwrap();
    assert!((uops..=uops + 3).contains(&records), "every line read: {records}");
    assert!(stats["instructions"].as_u64().unwrap() > uops / 2);
    let _ = std::fs::remove_dir_all(&out);
    Measured {
        uops: records,
        mb,
        secs,
        baseline_secs: baseline,
        rss,
        instructions: stats["instructions"].as_u64().unwrap(),
        trace_bytes: stats["trace_bytes"].as_u64().unwrap(),
    }
}

fn scale() -> f64 {
    std::env::var("PTEMU_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (small, large, runs) = if bench {
        let s = scale();
        (
            ((1e6 * s) as u64).max(1000),
            ((20e6 * s) as u64).max(1000),
            (5, 2),
        )
    } else {
        (20_000, 100_000, (1, 1))
    };
    println!("== ptemu simulate, Penn text -> PT, default layout ==");
    let mut rows = Vec::new();
    for (uops, n) in [(small, runs.0), (large, runs.1)] {
        let m = measure(uops, n);
        let rate = m.mb / m.secs;
        println!(
            "{:>9} uops {:>8.1} MB: {:>6.3} s  {:>6.1} MB/s  {:>5.2} M uops/s  peak RSS {:>5.1} MiB  \
             ({} instructions, {} trace bytes; parse alone {:.1} MB/s, end to end {:.2}x of it)",
            m.uops,
            m.mb,
            m.secs,
            rate,
            m.uops as f64 / m.secs / 1e6,
            m.rss as f64 / 1048576.0,
            m.instructions,
            m.trace_bytes,
            m.mb / m.baseline_secs,
            m.baseline_secs / m.secs,
        );
        rows.push((m, rate));
    }
    let (a, b) = (&rows[0], &rows[1]);
    let slowest = a.1.min(b.1);
    let rss_max = a.0.rss.max(b.0.rss);
    let flat = b.0.rss <= a.0.rss + (8 << 20);
    let judged = |ok: bool| match (bench, ok) {
        (false, _) => "not judged in a smoke run",
        (true, true) => "met",
        (true, false) => "NOT met",
    };
    println!(
        "input rate: {slowest:.0} MB/s at the slower size (target >= {TARGET_MB_S:.0} MB/s: {})",
        judged(slowest >= TARGET_MB_S)
    );
    println!(
        "peak RSS: {:.1} MiB and {:.1} MiB (target <= {} MiB + {} MiB buffers and flat: {})",
        a.0.rss as f64 / 1048576.0,
        b.0.rss as f64 / 1048576.0,
        RSS_BUDGET >> 20,
        BUFFERS >> 20,
        judged(flat && rss_max <= RSS_BUDGET + BUFFERS)
    );
    let mut packing = Vec::new();
    for (format, records) in [(Format::Penn, small), (Format::Byu, small * 5)] {
        let input = generated(format, records);
        let ((packed, packed_bytes), (plain, plain_bytes)) = alternate(
            &input,
            format,
            runs.0,
            &["--no-truth", "--packing", "hardware"],
            &["--no-truth", "--packing", "none"],
        );
        println!(
            "packing, {format}: hardware layout {packed:.3} s ({packed_bytes} trace bytes), none \
             {plain:.3} s ({plain_bytes}): {:.3}x (target <= {PACKING_COST:.2}x: {})",
            packed / plain,
            judged(packed / plain <= PACKING_COST)
        );
        packing.push(serde_json::json!({"format": format, "hardware_seconds": packed,
            "none_seconds": plain, "ratio": packed / plain}));
    }
    let thread_rows = threads(small * 5, runs.0, bench, &judged);
    // The ground truth (spec/truth.md TR9), on by default: what it costs over --no-truth, and
    // its size on disk (issue 40: at most 1.25x the time, 2 bytes an instruction).
    let mut truth_rows = Vec::new();
    for (format, records) in [(Format::Penn, small * 5), (Format::Byu, small * 20)] {
        let input = generated(format, records);
        let ((with, _), (without, _)) = alternate(&input, format, runs.0, &[], &["--no-truth"]);
        let out = data_dir().join(format!("simulate-truth-{format}"));
        let (_, report) = simulate(&input, format, &out, &[]);
        let bytes = std::fs::metadata(out.join("truth.bin")).unwrap().len();
        let insns = report["truth"]["counts"]["instructions"].as_u64().unwrap().max(1);
        let _ = std::fs::remove_dir_all(&out);
        let per = bytes as f64 / insns as f64;
        println!(
            "truth.bin, {format} {records} records: {with:.3} s with it, {without:.3} s without: {:.2}x (target <= {TRUTH_COST:.2}x: {}); {per:.2} bytes an instruction (target <= {TRUTH_BYTES:.1}: {})",
            with / without,
            judged(with / without <= TRUTH_COST),
            judged(per <= TRUTH_BYTES)
        );
        truth_rows.push(
            serde_json::json!({"format": format.to_string(), "records": records,
            "with_seconds": with, "without_seconds": without, "ratio": with / without,
            "bytes": bytes, "instructions": insns, "bytes_per_instruction": per}),
        );
    }
    if bench {
        let json = serde_json::json!({
            "truth": truth_rows,
            "packing": packing,
            "threads": thread_rows,
            "sizes": rows.iter().map(|(m, rate)| serde_json::json!({
                "uops": m.uops, "input_mb": m.mb, "seconds": m.secs, "mb_per_s": rate,
                "uops_per_s": m.uops as f64 / m.secs, "peak_rss_bytes": m.rss,
                "parse_only_mb_per_s": m.mb / m.baseline_secs,
            })).collect::<Vec<_>>(),
        });
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-simulate.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    } else {
        println!("  (smoke run: use `cargo xtask bench` for the measurement)");
    }
}
