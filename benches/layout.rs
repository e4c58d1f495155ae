//! `cargo xtask bench` (layout): how layout parsing grows with the number of entries. A layout of
//! N entries and one of 10·N, each with a bad last entry (so its line number must be found too),
//! are parsed; the time ratio is about 10 when parsing is linear (issue 21: the old per-entry
//! line recount made it about 100, 80k entries took 66 s). Target: ratio <= 20.
//! Without `--bench` (under `cargo test --all-targets`) a smoke run on small layouts.

use ptemu::layout::Layout;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

/// A ToPA layout of `n` 4K regions and an END, then an entry whose size is not a size.
fn layout_text(n: u64) -> String {
    let mut s =
        String::from("[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\nentries = [\n");
    for i in 0..n {
        s.push_str(&format!(
            "  {{ region = {:#x}, size = \"4K\" }},\n",
            0x100_0000 + i * 0x1000
        ));
    }
    s.push_str("  { end = 0x10000 },\n  { region = 0x1000, size = \"zz\" },\n]\n");
    s
}

/// The best of three parses of `text` (each must fail at its last entry).
fn parse_time(text: &str) -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let r = black_box(Layout::parse(Path::new("bench.toml"), text));
            let d = t.elapsed();
            assert!(r.is_err(), "the last entry is bad");
            d
        })
        .min()
        .unwrap()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n = if bench { 10_000 } else { 100 };
    let small = parse_time(&layout_text(n));
    let large = parse_time(&layout_text(10 * n));
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    println!(
        "layout parse: {n} entries {small:.2?}, {} entries {large:.2?}: ratio {ratio:.1} (linear 10, target <= 20){}",
        10 * n,
        if !bench || ratio <= 20.0 { "" } else { "  MISSED" }
    );
}
