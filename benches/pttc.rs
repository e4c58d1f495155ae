//! `cargo xtask bench` (pttc): how `ptemu pttc` grows with the number of labels. A .ptt of N
//! labels, half of them jumps to the label before, N directive labels and an `.exp` line naming
//! a yasm and a directive label each, and one of 10·N, are compiled; the time ratio is about 10
//! when label lookup is linear (issue 50: labels were a list searched from the front, 100k
//! labels took 9.35 s, 66 s with the jumps and `.exp` references). Target: ratio <= 25 (a hash
//! map's cache misses grow with it; quadratic is 100).
//! Without `--bench` (under `cargo test --all-targets`) a smoke run on small files.

use ptemu::pttc::{compile, Options};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// `n` labels (every other one a jump back), `n` directive labels, an `.exp(ptdump)` line for
/// each naming both.
fn ptt(n: usize) -> String {
    let mut s = String::from("org 0x1000\nbits 64\n");
    for i in 0..n {
        if i % 2 == 1 {
            s.push_str(&format!("l{i}: jmp l{}\n", i - 1));
        } else {
            s.push_str(&format!("l{i}: nop\n"));
        }
    }
    for i in 0..n {
        s.push_str(&format!("; @pt p{i}: pad()\n"));
    }
    s.push_str("; @pt .exp(ptdump)\n");
    for i in 0..n {
        s.push_str(&format!(";%0l{i} %p{i}\n"));
    }
    s
}

/// The best of three compiles of `text` (each must give the .bin, the .pt and the .exp).
fn compile_time(text: &str) -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let r = black_box(compile("bench.ptt", text, &Options::default()));
            let d = t.elapsed();
            assert_eq!(r.expect("the file compiles").files.len(), 3);
            d
        })
        .min()
        .unwrap()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n = if bench { 10_000 } else { 100 };
    let small = compile_time(&ptt(n));
    let large = compile_time(&ptt(10 * n));
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    println!(
        "pttc labels: {n} labels {small:.2?}, {} labels {large:.2?}: ratio {ratio:.1} (linear 10, target <= 25){}",
        10 * n,
        if !bench || ratio <= 25.0 { "" } else { "  MISSED" }
    );
}
