//! `cargo xtask bench` (verify): how `ptemu verify`'s matcher grows with the number of undefined
//! spans (TR5, TR8). A truth of N silent corruptions (an undefined span of two instructions,
//! then three required ones) and a decoder's output that prints two wrong IPs inside each span,
//! then the three it must give, is checked at 500 and 5,000 spans; the time ratio is about 10 when
//! the check is linear. Issue 39: every undefined span was carried on to the end of the output,
//! so each line cost one step per span passed (20,000 spans x 20,000 lines took 131 s).
//! Target: ratio <= 20. Without `--bench` (under `cargo test --all-targets`) a smoke run on a
//! small truth.

use ptemu::truth::verify::{check, Pattern};
use std::fmt::Write;
use std::hint::black_box;
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

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
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
