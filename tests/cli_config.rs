//! Configuration input (layout files, tracer configs) that is hostile or simply wrong: exit 2
//! with the file and the line or field, never a panic, never unbounded memory or time.

mod common;

use common::cli::{ptemu, s, text, write_args};
use std::path::{Path, PathBuf};

fn file(dir: &Path, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// `ptemu ARGS` exits 2 with every needle in its message.
fn refused(args: &[&str], needles: &[&str]) {
    let o = ptemu(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
    }
}

const TOPA_HEAD: &str = "[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\n";

/// A layout through `check`, `write` and `simulate`: each exits 2 naming the file and line.
fn refused_everywhere(dir: &Path, layout: &Path, needles: &[&str]) {
    let st = file(dir, "s.bin", [0u8; 64]);
    let out = dir.join("out");
    refused(&["layout", "check", s(layout)], needles);
    refused(&write_args(layout, s(&st), &out), needles);
    refused(&["simulate", "--layout", s(layout), "--out", s(&out)], needles);
    assert!(!out.exists());
}

#[test]
fn a_non_ascii_size_is_an_error_naming_its_line_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for size in ["é", "4é", "éK", "", "K", "-4K", "+4K", "4 K"] {
        let body = format!("{TOPA_HEAD}entries = [\n  {{ region = 0x100000, size = \"{size}\" }},\n]\n");
        let layout = file(dir.path(), "size.toml", body);
        refused_everywhere(dir.path(), &layout, &["size.toml:7", "is not one of 4K"]);
    }
}

#[test]
fn numbers_take_no_sign_and_no_stray_prefix_and_say_when_they_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    for base in ["\"0x+10000\"", "\"+65536\"", "\"0x\"", "\"-1\"", "\"0x-1\""] {
        let body = format!("[output]\nscheme = \"topa\"\nbase = {base}\n");
        let layout = file(dir.path(), "num.toml", body);
        refused_everywhere(dir.path(), &layout, &["num.toml:3", "is not a number"]);
    }
    let body = format!("{TOPA_HEAD}entries = [ {{ raw = 99999999999999999999 }} ]\n");
    let layout = file(dir.path(), "big.toml", body);
    refused_everywhere(dir.path(), &layout, &["big.toml:6", "does not fit in 64 bits"]);
    // u64 values past i64 are still taken, as integers or strings.
    for raw in ["18446744073709551615", "\"0xffffffffffffffff\""] {
        let body = format!("{TOPA_HEAD}entries = [ {{ raw = {raw} }} ]\n");
        let layout = file(dir.path(), "max.toml", body);
        let o = ptemu(&["layout", "check", s(&layout)]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "an operational error, found: {}",
            text(&o.stderr)
        );
    }
}

/// A layout of 100,000 entries is refused at the right line of its last entry (line numbers come
/// from a binary search over line starts counted once; how parse time grows is measured by
/// `cargo xtask bench`, benches/layout.rs: the old per-entry recount took 49 s in release here).
#[test]
fn a_layout_of_100k_entries_names_the_line_of_its_last_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut body = String::from(TOPA_HEAD);
    body.push_str("entries = [\n");
    for i in 0..100_000u64 {
        body.push_str(&format!(
            "  {{ region = {:#x}, size = \"4K\" }},\n",
            0x100_0000 + i * 0x1000
        ));
    }
    body.push_str("  { end = 0x10000 },\n  { region = 0x1000, size = \"zz\" },\n]\n");
    let layout = file(dir.path(), "big.toml", body);
    // The last line is bad: its line number is the proof the lines were counted right.
    refused(&["layout", "check", s(&layout)], &["big.toml:100008"]);
}

#[test]
fn config_files_are_bounded_and_read_from_fifos() {
    refused(
        &["layout", "check", "/dev/zero"],
        &["/dev/zero", "larger than 8 MiB"],
    );
    refused(
        &[
            "simulate",
            "--tracer-config",
            "/dev/zero",
            "--out",
            "/nonexistent/x",
        ],
        &["/dev/zero", "larger than 8 MiB"],
    );
    // A FIFO reads as what it yields, not as its size of 0.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("layout.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, "[output]\nscheme = \"topa\"\nbase = zz\n"))
    };
    refused(&["layout", "check", s(&fifo)], &["layout.fifo:3"]);
    writer.join().unwrap().unwrap();
}

/// The clock and every size in a tracer config are checked against their ranges before anything
/// is read or written: zero ratios, a TSC:ART ratio outside 2..=512 (TMA.FC holds 9 bits) and
/// sizes that would exhaust memory are refused, naming the file and the field.
#[test]
fn tracer_settings_out_of_range_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cases = [
        ("[clock]\ncore_ratio = 0\n", "clock.core_ratio = 0"),
        ("[clock]\nnominal_ratio = 0\n", "clock.nominal_ratio = 0"),
        ("[clock]\ntsc_per_art = 0\n", "clock.tsc_per_art = 0"),
        ("[clock]\ntsc_per_art = 1\n", "clock.tsc_per_art = 1"),
        ("[clock]\ntsc_per_art = 513\n", "clock.tsc_per_art = 513"),
        (
            "[clock]\ntsc_per_art = 4294967295\n",
            "clock.tsc_per_art = 4294967295",
        ),
        (
            "flush_bytes = 1000000000000000\n",
            "flush_bytes = 1000000000000000",
        ),
        ("cycles_per_instruction = 0\n", "cycles_per_instruction = 0"),
        (
            "[overflow]\nbuffer_bytes = 4294967295\ndrain_bytes = 1\nper_cycles = 1\n",
            "overflow.buffer_bytes",
        ),
        (
            "[overflow]\nbuffer_bytes = 512\ndrain_bytes = 1\nper_cycles = 0\n",
            "overflow.per_cycles = 0",
        ),
        // Instruction numbers count from 1, as for `--fault ovf@N` (issue 39).
        ("overflow_at = [5, 0]\n", "overflow_at = 0"),
        ("[clock]\ncore_ratio = 300\n", "cfg.toml:2"),
        ("flush_bytes = -1\n", "cfg.toml:1"),
    ];
    for (body, needle) in cases {
        let cfg = file(dir.path(), "cfg.toml", body);
        refused(
            &["simulate", "--tracer-config", s(&cfg), "--out", s(&out)],
            &["cfg.toml", needle],
        );
        assert!(!out.exists(), "{body}");
    }
    // The edges of the ranges run.
    let cfg = file(
        dir.path(),
        "cfg.toml",
        "flush_bytes = 1048576\n[clock]\ntsc_per_art = 512\ncore_ratio = 1\nnominal_ratio = 255\n",
    );
    let o = ptemu(&[
        "simulate",
        "--tracer-config",
        s(&cfg),
        "--out",
        s(&out),
        "-q",
        "--ctl",
        "MTCEn=1",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// Issue 39: a layout at the size limit (8 MiB, some 200,000 entries) parses in bounded memory
/// (about 50 bytes a byte; 64 MiB took 5.2 GB before the limit came down), and one byte past the
/// limit is refused.
#[test]
fn a_layout_at_the_size_limit_parses_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "[output]\nscheme = \"topa\"\nbase = 0x10000\nmask_ptrs = 0x7f\n[[table]]\nbase = 0x10000\nentries = [\n",
    );
    let tail = "  { end = 0x10000 },\n]\n";
    let limit = ptemu::config_file::MAX_CONFIG_BYTES as usize;
    let mut k = 0u64;
    loop {
        let line = format!(
            "  {{ region = {:#x}, size = \"4K\" }},\n",
            0x1_0000_0000u64 + k * 0x1000
        );
        if text.len() + line.len() + tail.len() > limit {
            break;
        }
        text.push_str(&line);
        k += 1;
    }
    text.push_str(tail);
    let at_limit = file(dir.path(), "limit.toml", &text);
    let (ok, peak) = common::cli::peak_rss(std::process::Command::new(env!("CARGO_BIN_EXE_ptemu")).args([
        "layout",
        "check",
        s(&at_limit),
    ]));
    assert!(ok, "the layout at the limit was refused");
    assert!(peak < 1 << 30, "{k} entries: peak RSS {} MiB", peak >> 20);
    text.insert_str(0, "# one byte too many\n");
    let over = file(dir.path(), "over.toml", &text);
    refused(&["layout", "check", s(&over)], &["larger than 8 MiB"]);
}
