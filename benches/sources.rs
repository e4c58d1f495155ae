//! `cargo xtask bench` (sources): parse rates of every trace reader on generated files, in MB/s
//! and records/s, against baselines run in the same process. Targets (issue 5): Penn text at
//! 500 MB/s or more per core; binary formats bound by memory bandwidth (reported as a ratio to
//! memcpy of the same bytes, and to a scan of the same file: every 8-byte word read through the
//! same mapped `Input`, run alternately with the reader so that both see the same machine); .gz
//! input <= 1.25x the time of inflating it alone (flate2, in the same process) on the same file (every format; gem5 itself writes its
//! traces gzip'd).
//!
//! Files are generated once into target/bench-data/ (10M Penn micro-ops, about 840 MB, and files
//! of a few hundred MB for the binary formats) and reused by later runs. Set
//! PTEMU_BENCH_SCALE=0.1 for a quick run on files a tenth the size. Without `--bench` (under
//! `cargo test --all-targets`) it is a smoke run on files a thousandth the size.

use flate2::{write::GzEncoder, Compression};
use ptemu::sources::fixed::{FixedReader, FixedRecord, BATCH};
use ptemu::sources::{self, byu, byu_p2, gem5, kaplan, penn, EventSource, Format, Input, ReadOptions};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn data_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// PTEMU_BENCH_SCALE, else 1 under `--bench`; `cargo test --all-targets` runs this binary without
/// `--bench`: a smoke run on files a thousandth the size, judging nothing.
fn scale() -> f64 {
    let bench = std::env::args().any(|a| a == "--bench");
    std::env::var("PTEMU_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if bench { 1.0 } else { 0.001 })
}

/// A generated file, made once.
fn file(format: Format, records: u64) -> PathBuf {
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

fn gzipped(path: &Path) -> PathBuf {
    let gz = path.with_extension("trace.gz");
    if !gz.exists() {
        eprintln!("compressing {} ...", gz.display());
        let tmp = gz.with_extension("tmp");
        let mut enc = GzEncoder::new(std::fs::File::create(&tmp).unwrap(), Compression::new(6));
        std::io::copy(&mut std::fs::File::open(path).unwrap(), &mut enc).unwrap();
        enc.finish().unwrap();
        std::fs::rename(&tmp, &gz).unwrap();
    }
    gz
}

fn open(path: &Path) -> Input {
    Input::open(path).unwrap()
}

/// The best of `runs` timings of `f`, which returns the records it read.
fn best(runs: usize, mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = (Duration::MAX, 0);
    for _ in 0..runs {
        let t = Instant::now();
        let n = black_box(f());
        let d = t.elapsed();
        if d < best.0 {
            best = (d, n);
        }
    }
    best
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn report(what: &str, bytes: u64, (d, records): (Duration, u64)) -> f64 {
    let rate = mbps(bytes, d);
    println!(
        "{what:<34} {:>8.1} MB/s {:>8.2} M records/s  ({records} records, {:.1} MB in {:.3} s)",
        rate,
        records as f64 / 1e6 / d.as_secs_f64(),
        bytes as f64 / 1e6,
        d.as_secs_f64()
    );
    rate
}

/// memcpy of `bytes` bytes in 64 MiB blocks: the memory-bandwidth baseline.
fn memcpy_rate(bytes: u64) -> f64 {
    let block = 64usize << 20;
    let src = vec![0x5au8; block];
    let mut dst = vec![0u8; block];
    let (d, _) = best(3, || {
        let mut left = bytes as usize;
        while left > 0 {
            let n = left.min(block);
            dst[..n].copy_from_slice(&src[..n]);
            black_box(&mut dst);
            left -= n;
        }
        0
    });
    mbps(bytes, d)
}

fn drain(src: &mut dyn EventSource) -> u64 {
    src.for_each_event(&mut |e| {
        black_box(e);
    })
    .unwrap()
}

fn penn(uops: u64) {
    let path = file(Format::Penn, uops);
    let bytes = std::fs::metadata(&path).unwrap().len();
    println!(
        "\n== Penn text: {uops} micro-ops, {:.0} MB ==",
        bytes as f64 / 1e6
    );
    let parse = report(
        "parse (UopReader)",
        bytes,
        best(3, || {
            let mut r = penn::UopReader::new(open(&path), ReadOptions::default());
            let mut n = 0;
            while let Some((_, u)) = r.next_uop().unwrap() {
                black_box(&u);
                n += 1;
            }
            n
        }),
    );
    report(
        "parse + group + map to events",
        bytes,
        best(3, || {
            drain(&mut penn::PennEvents::new(open(&path), ReadOptions::default()))
        }),
    );
    println!("penn parse: {parse:.0} MB/s (target >= 500 MB/s per core)");

    gz_against_inflate(Format::Penn, &path, |gz| {
        let mut r = penn::UopReader::new(open(gz), ReadOptions::default());
        let mut n = 0;
        while let Some((_, u)) = r.next_uop().unwrap() {
            black_box(&u);
            n += 1;
        }
        n
    });
}

/// The gzip'd `path` read by `read` against inflating it alone, in this process with the same
/// flate2 decoder into a sink (best of 3 each): like with like, no shell or process start.
fn gz_against_inflate(format: Format, path: &Path, mut read: impl FnMut(&Path) -> u64) {
    let gz = gzipped(path);
    let (ours, _) = best(3, || read(&gz));
    let (inflate, _) = best(3, || {
        let f = std::fs::File::open(&gz).expect("the gzip file");
        let mut d = flate2::read::MultiGzDecoder::new(std::io::BufReader::with_capacity(1 << 16, f));
        std::io::copy(&mut d, &mut std::io::sink()).expect("inflates")
    });
    println!(
        "{format} .gz: parse {:.3} s, inflate alone {:.3} s: ratio {:.2} (target <= 1.25)",
        ours.as_secs_f64(),
        inflate.as_secs_f64(),
        ours.as_secs_f64() / inflate.as_secs_f64()
    );
}

/// Every record of a gem5 trace; returns the count.
fn gem5_records(path: &Path) -> u64 {
    let mut r = gem5::Reader::new(open(path)).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        black_box(&rec);
        n += 1;
    }
    n
}

/// Every record of a binary-format file (plain or gzip'd), read as the benchmark reads that
/// format; returns the count.
fn read_records(format: Format, path: &Path) -> u64 {
    match format {
        Format::Byu => batched(byu::Reader::new(open(path))),
        Format::ByuP2 => batched(byu_p2::Reader::new(open(path))),
        Format::Kaplan => {
            let mut r = kaplan::Reader::new(open(path));
            let mut n = 0;
            while let Some(rec) = r.next_record().unwrap() {
                black_box(&rec);
                n += 1;
            }
            n
        }
        Format::Gem5 => gem5_records(path),
        other => unreachable!("{other} is text, measured by `penn`"),
    }
}

/// Reads every record of a fixed-record file in `read_batch` blocks of [`BATCH`]; returns the count.
fn batched<R: FixedRecord>(mut r: FixedReader<R>) -> u64 {
    let (mut batch, mut n) = (Vec::with_capacity(BATCH), 0);
    while r.read_batch(&mut batch, BATCH).unwrap() > 0 {
        black_box(&batch);
        n += batch.len() as u64;
    }
    n
}

/// The bandwidth bound of reading `path` the way the readers read it: every 8-byte word of the
/// file XOR-ed together through the same mapped [`Input`]; returns the words read.
fn scan(path: &Path) -> u64 {
    use std::io::BufRead;
    let mut input = open(path);
    let (mut x, mut words) = (0u64, 0);
    loop {
        let avail = input.fill_buf().unwrap();
        if avail.is_empty() {
            break;
        }
        for w in avail.chunks_exact(8) {
            x ^= u64::from_le_bytes(w.try_into().unwrap());
            words += 1;
        }
        let n = avail.len();
        input.consume(n);
    }
    black_box(x);
    words
}

/// The best of `runs` timings each of `read` and [`scan`] of `path`, run alternately.
fn best_with_scan(runs: usize, path: &Path, mut read: impl FnMut() -> u64) -> ((Duration, u64), Duration) {
    let (mut r, mut s) = ((Duration::MAX, 0), Duration::MAX);
    for _ in 0..runs {
        let one = best(1, &mut read);
        if one.0 < r.0 {
            r = one;
        }
        s = s.min(best(1, || scan(path)).0);
    }
    (r, s)
}

fn binary(memcpy: f64) {
    let s = scale();
    let sized = |n: f64| ((n * s) as u64).max(1000);
    let cases: [(Format, u64); 4] = [
        (Format::Byu, sized(50e6)),
        (Format::ByuP2, sized(25e6)),
        (Format::Kaplan, sized(40e3)),
        (Format::Gem5, sized(5e6)),
    ];
    for (format, records) in cases {
        let path = file(format, records);
        let bytes = std::fs::metadata(&path).unwrap().len();
        println!(
            "\n== {format}: {records} records, {:.0} MB ==",
            bytes as f64 / 1e6
        );
        let ((d, n), scanned) = best_with_scan(5, &path, || read_records(format, &path));
        let what = if matches!(format, Format::Byu | Format::ByuP2) {
            "read records (read_batch)"
        } else {
            "read records"
        };
        let rate = report(what, bytes, (d, n));
        let scan_rate = mbps(bytes, scanned);
        println!(
            "{format} read: {:.2}x memcpy ({memcpy:.0} MB/s), {:.2}x a scan of the mapped file ({scan_rate:.0} MB/s)",
            rate / memcpy,
            rate / scan_rate
        );
        report(
            "read + map to events",
            bytes,
            best(3, || {
                drain(
                    sources::open_events(format, open(&path), None, ReadOptions::default())
                        .unwrap()
                        .as_mut(),
                )
            }),
        );
        // Every format may come gzip'd (gem5 writes its traces that way: `*.proto.gz`).
        gz_against_inflate(format, &path, |gz| read_records(format, gz));
    }
}

fn main() {
    let s = scale();
    let memcpy = memcpy_rate(1 << 30);
    println!("memcpy baseline: {memcpy:.0} MB/s");
    penn(((10e6 * s) as u64).max(1000));
    binary(memcpy);
}
