//! `cargo xtask bench` (verify): how `ptemu verify`'s matcher grows with the number of undefined
//! spans (TR5, TR8), and how fast it walks a long truth of blocks (TR15, issue 51 §5).
//!
//! Spans: a truth of N silent corruptions (an undefined span of two instructions, then three
//! required ones) and a decoder's output that prints two wrong IPs inside each span, then the
//! three it must give, is checked at 500 and 5,000 spans; the time ratio is about 10 when the
//! check is linear. Issue 39: every undefined span was carried on to the end of the output, so
//! each line cost one step per span passed (20,000 spans x 20,000 lines took 131 s). Target:
//! ratio <= 20.
//!
//! Blocks: a `truth.bin` of 10 M executions of 4,096 blocks (about 55 M instructions, the blocks
//! bench's gzip-like mix: 1 to 10 instructions, 72% ending in a Jcc, a carrier offset changing
//! every few executions, a time record every 500) and a decoder's output of its IPs (`0x…`, one
//! a line) in target/bench-data/verify-blocks/. Measured in this process: the whole-file check
//! (`Pattern::open`) and the match with the block walk (`check_with`) against the walk one step a
//! line (`check_per_instruction`), alternately; then `ptemu verify` itself on a quarter of the
//! truth and on all of it: wall time, CPU time and peak RSS (flat: the same for both). Target: 100 M
//! instructions/s, flat memory. `PTEMU_VERIFY_BEFORE=PATH` runs that `ptemu` binary on the same
//! files too (an older build, to compare). Without `--bench` (under `cargo test --all-targets`)
//! a smoke run on small truths.

use ptemu::tracer::{Block, BlockEnd};
use ptemu::truth::compact::Encoder;
use ptemu::truth::record::{Class, Record, Run, Sink};
use ptemu::truth::verify::{check, check_per_instruction, check_with, Options, Pattern};
use ptemu::truth::Counts;
use std::fmt::Write;
use std::hint::black_box;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Required instructions after each span.
const AFTER: u64 = 3;
/// Undefined instructions in each span.
const INSIDE: u64 = 2;
/// Wrong IPs the decoder prints inside each span.
const WRONG: u64 = 2;

/// A truth of `n` undefined spans and the decoder output that passes it.
fn case(n: u64) -> (String, String) {
    let mut truth = String::from("{\"truth\":1,\"truncated\":false}\n");
    let mut out = String::new();
    let (mut i, mut required) = (0u64, 0u64);
    // A small LCG: wrong IPs that do not repeat the truth's.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..n {
        writeln!(
            truth,
            "{{\"k\":\"span\",\"class\":\"undefined\",\"cause\":\"corrupt-silent\",\"first\":{i},\"error\":\"allowed\",\"resume\":null}}"
        )
        .unwrap();
        for _ in 0..INSIDE {
            writeln!(
                truth,
                "{{\"k\":\"insn\",\"i\":{i},\"ip\":\"{:#x}\",\"off\":null,\"undefined\":\"corrupt-silent\"}}",
                0x40_0000 + i * 4
            )
            .unwrap();
            i += 1;
        }
        for _ in 0..WRONG {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            writeln!(out, "{:#x}", 0x7000_0000 + (x >> 40)).unwrap();
        }
        for _ in 0..AFTER {
            let ip = 0x40_0000 + i * 4;
            writeln!(
                truth,
                "{{\"k\":\"insn\",\"i\":{i},\"ip\":\"{ip:#x}\",\"off\":{i}}}"
            )
            .unwrap();
            writeln!(out, "{ip:#x}").unwrap();
            i += 1;
            required += 1;
        }
    }
    writeln!(
        truth,
        "{{\"k\":\"end\",\"counts\":{{\"instructions\":{i},\"required\":{required},\"optional\":0,\"lost\":0,\"undefined\":{},\"spans\":{n}}}}}",
        i - required
    )
    .unwrap();
    (truth, out)
}

/// The best of `rounds` checks of the output against the truth (each must pass).
fn check_time(n: u64, rounds: usize) -> Duration {
    let (truth, out) = case(n);
    let p = Pattern::read("bench.jsonl", truth.as_bytes()).expect("a valid truth");
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            let v = black_box(check(&p, out.as_bytes()).unwrap());
            let d = t.elapsed();
            assert!(v.divergence.is_none(), "{:?}", v.divergence);
            d
        })
        .min()
        .unwrap()
}

/// A small generator (xorshift), so the bench needs no crate and is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Blocks of the truth.
const BLOCKS: usize = 4096;

/// The blocks, laid out one after another from 0x40_0000 (a block's fall-through is the next
/// one's start), with the blocks bench's mix of ends.
fn blocks(rng: &mut Rng) -> Vec<Block> {
    let mut starts = Vec::with_capacity(BLOCKS);
    let mut lens = Vec::with_capacity(BLOCKS);
    let mut at = 0x40_0000u64;
    for _ in 0..BLOCKS {
        let insns = 1 + (rng.next() % 10) as usize;
        let l: Vec<u8> = (0..insns).map(|_| 1 + (rng.next() % 5) as u8).collect();
        starts.push(at);
        at += l.iter().map(|&x| u64::from(x)).sum::<u64>();
        lens.push(l);
    }
    (0..BLOCKS)
        .map(|k| {
            let other = starts[(rng.next() % BLOCKS as u64) as usize];
            let end = match rng.next() % 1000 {
                0..=723 => BlockEnd::Conditional { target: other },
                724..=838 => BlockEnd::Jump { target: other },
                839..=906 => BlockEnd::Call { target: other },
                907..=974 => BlockEnd::Return,
                _ => BlockEnd::FallThrough,
            };
            Block::new(starts[k], &lens[k], end).unwrap()
        })
        .collect()
}

/// Writes `ip` as `0x…` and a newline.
fn write_ip(out: &mut impl std::io::Write, ip: u64) -> std::io::Result<()> {
    let mut b = [0u8; 19];
    let mut k = b.len() - 1;
    b[k] = b'\n';
    let mut v = ip;
    loop {
        k -= 1;
        b[k] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    b[k - 2] = b'0';
    b[k - 1] = b'x';
    out.write_all(&b[k - 2..])
}

/// A `truth.bin` of `n` executions of the blocks (all required, no damage) in `dir`, and the
/// decoder output that passes it; (the truth, the output, its instructions).
fn block_case(dir: &Path, n: u64) -> (PathBuf, PathBuf, u64) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let table = blocks(&mut rng);
    let index: std::collections::HashMap<u64, usize> =
        table.iter().enumerate().map(|(k, b)| (b.start(), k)).collect();
    let (truth, ips) = (dir.join("truth.bin"), dir.join("ips.txt"));
    let mut enc = Encoder::new(BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(&truth).unwrap(),
    ));
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&ips).unwrap());
    enc.header(&serde_json::json!({"truth": 2, "truncated": false, "run": {}}))
        .unwrap();
    for b in &table {
        enc.block(b).unwrap();
    }
    let (mut i, mut off, mut k, mut tsc) = (0u64, 100u64, 0usize, 0x1_0000_0000u64);
    let mut calls: Vec<u64> = Vec::new();
    for e in 0..n {
        let b = &table[k];
        let next = match b.end() {
            BlockEnd::Conditional { target } if !rng.next().is_multiple_of(3) => target,
            BlockEnd::Conditional { .. } | BlockEnd::FallThrough => b.fall_through(),
            BlockEnd::Jump { target } => target,
            BlockEnd::Call { target } => {
                calls.push(b.fall_through());
                target
            }
            _ => calls.pop().unwrap_or(table[0].start()),
        };
        // A TNT every six conditional branches or so, a TIP at every other transfer the
        // decoder cannot follow alone.
        if !matches!(
            b.end(),
            BlockEnd::Conditional { .. } | BlockEnd::Jump { .. } | BlockEnd::Call { .. }
        ) || rng.next().is_multiple_of(6)
        {
            off += 1 + rng.next() % 6;
        }
        if e % 500 == 499 {
            tsc += 0x400;
            enc.record(&Record::Time {
                tsc,
                slack: 0,
                off: Some(off),
            })
            .unwrap();
        }
        let run = Run {
            i,
            block: k as u32,
            n: b.instructions() as u32,
            next,
            off: Some(off),
            class: Class::Required,
        };
        enc.run(&run).unwrap();
        let mut ip = b.start();
        for &len in b.lengths() {
            write_ip(&mut out, ip).unwrap();
            ip += u64::from(len);
        }
        i += u64::from(run.n);
        k = match index.get(&next).copied() {
            Some(x) if !rng.next().is_multiple_of(4) => x,
            _ => (rng.next() % BLOCKS as u64) as usize,
        };
    }
    let counts = Counts {
        instructions: i,
        required: i,
        ..Counts::default()
    };
    enc.record(&Record::End { counts }).unwrap();
    enc.finish().unwrap();
    enc.into_inner().into_inner().unwrap();
    out.into_inner().unwrap();
    (truth, ips, i)
}

/// Seconds to check the truth whole (`Pattern::open`), and to match the output with the block
/// walk or one step a line.
fn in_process(truth: &Path, ips: &Path, walk: bool) -> (f64, f64) {
    let t = Instant::now();
    let p = Pattern::open(truth).unwrap();
    let open = t.elapsed().as_secs_f64();
    let out = BufReader::with_capacity(1 << 16, std::fs::File::open(ips).unwrap());
    let t = Instant::now();
    let v = if walk {
        check_with(&p, out, Options::default())
    } else {
        check_per_instruction(&p, out, Options::default())
    }
    .unwrap();
    let matched = t.elapsed().as_secs_f64();
    assert!(v.divergence.is_none(), "{:?}", v.divergence);
    assert_eq!(v.ips, p.instructions);
    (open, matched)
}

/// `ptemu verify` (the binary `exe`) on the case: wall seconds, CPU seconds (user and system)
/// and its peak RSS in bytes (its own, from `wait4`). On a loaded machine the CPU time is the
/// steadier figure; the wall time shows the two cores used at once.
#[allow(clippy::zombie_processes)] // waited for by wait4, which clippy does not know
fn ptemu_verify(exe: &Path, truth: &Path, ips: &Path) -> (f64, f64, u64) {
    let t = Instant::now();
    let child = std::process::Command::new(exe)
        .arg("verify")
        .arg(truth)
        .arg("--ips")
        .arg(ips)
        .arg("-q")
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for this child, which is not waited for
    // elsewhere.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are live locals of the types wait4 writes.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(pid, child.id() as i32);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "ptemu verify failed"
    );
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    (secs, cpu, usage.ru_maxrss as u64 * 1024)
}

/// The block truth: in-process rates, then `ptemu verify` on a quarter and on all of it.
fn blocks_bench(bench: bool) {
    let n = if bench { 10_000_000 } else { 20_000 };
    let root = Path::new("target/bench-data/verify-blocks");
    let (truth, ips, insns) = block_case(&root.join("full"), n);
    let (qtruth, qips, qinsns) = block_case(&root.join("quarter"), n / 4);
    let rate = |secs: f64| insns as f64 / secs / 1e6;
    let (mut open, mut walk, mut step) = (f64::MAX, f64::MAX, f64::MAX);
    for round in 0..if bench { 3 } else { 1 } {
        let (o, w) = in_process(&truth, &ips, true);
        (open, walk) = (open.min(o), walk.min(w));
        if round < 2 {
            step = step.min(in_process(&truth, &ips, false).1);
        }
    }
    let size = std::fs::metadata(&truth).unwrap().len();
    println!(
        "verify, blocks: {n} executions, {insns} instructions ({:.2} a block), truth.bin {:.3} bytes/instruction",
        insns as f64 / n as f64,
        size as f64 / insns as f64
    );
    println!(
        "  checked whole {:.0} M insn/s; matched with the block walk {:.0} M insn/s, one step a line {:.1} M insn/s ({:.1}x); both {:.0} M insn/s (target 100){}",
        rate(open),
        rate(walk),
        rate(step),
        step / walk,
        rate(open + walk),
        if !bench || rate(open + walk) >= 100.0 { "" } else { "  MISSED" }
    );
    let mut exes = vec![("this build", PathBuf::from(env!("CARGO_BIN_EXE_ptemu")))];
    if let Some(before) = std::env::var_os("PTEMU_VERIFY_BEFORE") {
        exes.push(("PTEMU_VERIFY_BEFORE", PathBuf::from(before)));
    }
    for (name, exe) in &exes {
        let (mut qs, mut fs, mut fcpu, mut qrss, mut frss) = (f64::MAX, f64::MAX, f64::MAX, 0, 0);
        for _ in 0..if bench { 2 } else { 1 } {
            let (s, _, r) = ptemu_verify(exe, &qtruth, &qips);
            (qs, qrss) = (qs.min(s), qrss.max(r));
            let (s, cpu, r) = ptemu_verify(exe, &truth, &ips);
            (fs, fcpu, frss) = (fs.min(s), fcpu.min(cpu), frss.max(r));
        }
        let flat = frss <= qrss + (8 << 20);
        println!(
            "  ptemu verify ({name}): {qinsns} instructions {qs:.2} s ({:.0} M insn/s), peak RSS {:.1} MiB; {insns}: {fs:.2} s ({:.0} M insn/s; CPU {fcpu:.2} s), peak RSS {:.1} MiB ({}flat){}",
            qinsns as f64 / qs / 1e6,
            qrss as f64 / 1048576.0,
            insns as f64 / fs / 1e6,
            frss as f64 / 1048576.0,
            if flat { "" } else { "not " },
            if !bench || flat || *name != "this build" { "" } else { "  MISSED" }
        );
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    blocks_bench(bench);
    let (n, rounds) = if bench { (500, 3) } else { (50, 1) };
    let small = check_time(n, rounds);
    let large = check_time(10 * n, rounds);
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    let lines = 10 * n * (WRONG + AFTER);
    println!(
        "verify: {n} undefined spans {small:.2?}, {} spans ({lines} lines) {large:.2?}: ratio {ratio:.1} (linear 10, target <= 20){}",
        10 * n,
        if !bench || ratio <= 20.0 { "" } else { "  MISSED" }
    );
}
