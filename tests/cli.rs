//! The `ptemu` binary: `write` and `layout check` on real files, the report.json contract, and
//! bad input (clear message naming the file and line, non-zero exit, no half-written output).

mod common;

use common::cli::{hex, ptemu, ptemu_stdin, s, text, write_args};
use common::stream;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Self {
        Case {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn file(&self, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    }
    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }
    fn write(&self, layout: &Path, stream: &Path) -> Output {
        let out = self.out();
        let mut args = write_args(layout, s(stream), &out);
        args.push("--quiet");
        ptemu(&args)
    }
}

fn demo_layout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-layout.toml")
}

#[test]
fn write_demo_layout_follows_the_report_contract() {
    let c = Case::new();
    let data = stream(0, 100 << 10);
    let st = c.file("stream.bin", &data);
    let o = c.write(&demo_layout(), &st);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(c.out().join("report.json")).unwrap()).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&report),
        [
            "event_counts",
            "events",
            "events_total",
            "msr",
            "stats",
            "version"
        ]
    );
    assert_eq!(report["version"], 2);
    assert_eq!(
        report["event_counts"],
        serde_json::json!({"pmi": 3, "stopped": 1, "error": 0, "wrap": 1, "erratum": 0})
    );
    assert_eq!(report["events_total"], 5);
    assert_eq!(
        keys(&report["msr"]),
        [
            "output_base",
            "output_mask_ptrs",
            "perf_global_status",
            "rtit_ctl",
            "rtit_status"
        ]
    );
    assert_eq!(
        keys(&report["stats"]),
        [
            "bytes_in",
            "bytes_lost",
            "bytes_overwritten",
            "bytes_written",
            "laps"
        ]
    );
    let events = report["events"].as_array().unwrap();
    for e in events {
        assert_eq!(keys(e), ["index", "kind", "rule", "stream_offset", "table"]);
    }
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["pmi", "wrap", "pmi", "stopped", "pmi"]);
    assert_eq!(events[1]["rule"], "W5");
    assert_eq!(events[3]["stream_offset"], 98304);
    // events.jsonl: every event, one JSON object a line, the same as the report's first ones.
    let lines: Vec<Value> = std::fs::read_to_string(c.out().join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(&lines, events);
    assert_eq!(report["stats"]["bytes_lost"], 4096);
    // S3: MSRs after TraceEn=0 point at the STOP entry, one past its end; TraceEn clear, ToPA kept.
    // Version 2: every MSR and table address a "0x..." string, exact above 2^53 (GLOBAL_STATUS[55]).
    assert_eq!(report["msr"]["output_base"], "0x10000");
    assert_eq!(
        hex(&report["msr"]["output_mask_ptrs"]),
        0x7f | 1 << 7 | 0x10000 << 32
    );
    assert_eq!(hex(&report["msr"]["rtit_ctl"]) & 1, 0);
    assert_eq!(hex(&report["msr"]["rtit_status"]) & 0x30, 0x20, "Stopped");
    assert_eq!(report["msr"]["perf_global_status"], "0x80000000000000");
    assert_eq!(events[0]["table"], "0x20000");
    // regions/: one whole file per region that received bytes, in stream order of the walk.
    let mut names: Vec<String> = std::fs::read_dir(c.out().join("regions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "0x100000.bin",
            "0x102000.bin",
            "0x104000.bin",
            "0x110000.bin",
            "0x120000.bin"
        ]
    );
    let walk = [
        (0x100000, 4096),
        (0x102000, 8192),
        (0x104000, 4096),
        (0x110000, 16384),
        (0x120000, 65536),
    ];
    let mut at = 0;
    for (base, size) in walk {
        let bytes = std::fs::read(c.out().join(format!("regions/{base:#x}.bin"))).unwrap();
        assert_eq!(bytes.len(), size);
        assert!(bytes == data[at..at + size], "region {base:#x}");
        at += size;
    }
}

#[test]
fn write_single_range_dumps_the_range() {
    let c = Case::new();
    let layout = c.file(
        "range.toml",
        "cpu = \"icelake\"\n[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0x1fff\n",
    );
    let st = c.file("s.bin", stream(0, 10_000));
    let o = c.write(&layout, &st);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let region = std::fs::read(c.out().join("regions/0x200000.bin")).unwrap();
    assert_eq!(region.len(), 0x2000);
    assert_eq!(region[..10_000 - 0x2000], stream(0x2000, 10_000 - 0x2000)[..]);
    let report: Value = serde_json::from_slice(&std::fs::read(c.out().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["events"][0]["kind"], "wrap");
    assert_eq!(report["events"][0]["table"], Value::Null);
    assert_eq!(
        hex(&report["msr"]["output_mask_ptrs"]),
        0x1fff | (10_000 - 0x2000) << 32
    );
}

#[test]
fn layout_check_accepts_the_demo_and_names_rules_in_bad_layouts() {
    let o = ptemu(&["layout", "check", s(&demo_layout())]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let c = Case::new();
    let bad = c.file(
        "bad.toml",
        r#"cpu = "skylake"
[output]
scheme = "topa"
base = 0x10000
[[table]]
base = 0x10000
entries = [
  { region = 0x100000, size = "4K" },
  { region = 0x101000, size = "8K" },
  { end = 0x20000 },
]
[[table]]
base = 0x20000
entries = [ { end = 0x10000 } ]
"#,
    );
    let o = ptemu(&["layout", "check", s(&bad)]);
    assert_eq!(o.status.code(), Some(1));
    let out = text(&o.stdout);
    assert!(out.contains("[T4]") && out.contains("line 9"), "{out}");
    assert!(out.contains("[T6]"), "{out}");
    let single = c.file(
        "bdw.toml",
        "cpu = \"broadwell\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\nentries = [ { region = 0x100000, size = \"4K\" }, { region = 0x200000, size = \"4K\" } ]\n",
    );
    let o = ptemu(&["layout", "check", s(&single)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("[T8]"), "{}", text(&o.stdout));
}

#[test]
fn layout_check_warns_when_output_would_overwrite_a_table() {
    let c = Case::new();
    let l = c.file(
        "overlap.toml",
        "[output]\nscheme = \"topa\"\nbase = 0x100000\n[[table]]\nbase = 0x100000\nentries = [ { region = 0x100000, size = \"8K\" }, { end = 0x100000 } ]\n",
    );
    let o = ptemu(&["layout", "check", s(&l)]);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("will overwrite"), "{}", text(&o.stdout));
}

fn assert_bad_input(o: &Output, needles: &[&str]) {
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout {} stderr {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let err = text(&o.stderr);
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
}

#[test]
fn bad_layouts_are_rejected_with_file_and_line() {
    let c = Case::new();
    let st = c.file("s.bin", [0u8; 16]);
    let cases: [(&str, &str, &[&str]); 7] = [
        ("syntax.toml", "[output\nscheme = 1\n", &["syntax.toml:1"]),
        ("cpu.toml", "cpu = \"pentium\"\n[output]\nscheme = \"topa\"\nbase = 0\n", &["cpu.toml:1", "unknown CPU profile"]),
        (
            "size.toml",
            "[output]\nscheme = \"topa\"\nbase = 0x1000\n[[table]]\nbase = 0x1000\nentries = [\n  { region = 0x100000, size = \"5K\" },\n]\n",
            &["size.toml:7", "5K"],
        ),
        ("field.toml", "[output]\nscheme = \"topa\"\nbase = 0\nbogus = 1\n", &["field.toml:4", "bogus"]),
        ("scheme.toml", "[output]\nscheme = \"fabric\"\nbase = 0\n", &["scheme.toml:2"]),
        (
            "twice.toml",
            "[output]\nscheme = \"topa\"\nbase = 0x1000\n[[table]]\nbase = 0x1000\nentries = [ { end = 0x2000 } ]\n[[table]]\nbase = 0x1000\nentries = [\n { end = 0x3000 } ]\n",
            &["twice.toml:10", "also given on line 6"],
        ),
        ("gp.toml", "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x8000000000\n", &["gp.toml", "#GP", "M2", "MAXPHYADDR"]),
    ];
    for (name, body, needles) in cases {
        let l = c.file(name, body);
        let o = c.write(&l, &st);
        assert_bad_input(&o, needles);
        assert!(
            !c.out().join("report.json").exists(),
            "{name}: no output on failure"
        );
    }
    let o = c.write(&c.dir.path().join("missing.toml"), &st);
    assert_bad_input(&o, &["missing.toml", "cannot read"]);
    let o = c.write(&demo_layout(), &c.dir.path().join("nostream.bin"));
    assert_bad_input(&o, &["nostream.bin", "cannot open stream"]);
}

#[test]
fn raw_entries_accept_values_past_i64_as_strings() {
    let c = Case::new();
    let l = c.file(
        "raw.toml",
        "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x1000\n[[table]]\nbase = 0x1000\nentries = [ { region = 0x100000, size = \"4K\" }, { raw = \"0xffff000000100000\" } ]\n",
    );
    let o = ptemu(&["layout", "check", s(&l)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).contains("[E1a]") || text(&o.stdout).contains("[T7]"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn dump_then_asm_is_byte_identical_and_json_and_lastip_work() {
    use ptemu::packet::{IpPayload, Ipc, Packet, PacketEncoder, Tnt};
    let mut enc = PacketEncoder::new();
    let mut bytes = Vec::new();
    let seq = [
        Packet::Psb,
        Packet::ModeExec {
            csl: true,
            csd: false,
            if_: false,
        },
        Packet::Fup(IpPayload::new(Ipc::Sext48, 0xffff_ffff_1000)),
        Packet::PsbEnd,
        Packet::Tnt8(Tnt::from_outcomes(&[true, false, true])),
        Packet::Tip(IpPayload::new(Ipc::Update16, 0x2000)),
        Packet::Cyc { value: 0x1234 },
        Packet::Trig {
            trbv: 1,
            ip: false,
            mult: true,
            icnt: Some(7),
        },
        Packet::Bbp { sz4: true, ty: 3 },
        Packet::Bip {
            id: 2,
            payload: 0xdead,
            sz4: true,
        },
        Packet::Bep { ip: false },
        Packet::TipPgd(IpPayload::SUPPRESSED),
    ];
    for p in &seq {
        enc.encode_to_vec(p, &mut bytes).unwrap();
    }
    let c = Case::new();
    let pt = c.file("t.pt", &bytes);
    let o = ptemu(&["dump", s(&pt), "--lastip"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let listing = text(&o.stdout);
    assert!(listing.contains("# ip 0xffffffffffff2000"), "{listing}");
    let txt = c.file("t.txt", &listing);
    let back = c.dir.path().join("back.pt");
    let o = ptemu(&["asm", s(&txt), "-o", s(&back)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&back).unwrap(), bytes);
    let o = ptemu(&["dump", s(&pt), "--json", "--lastip"]);
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), seq.len());
    assert_eq!(lines[2]["packet"], "fup");
    assert_eq!(lines[2]["ipc"], 3);
    assert_eq!(lines[2]["ip"].as_u64(), Some(0xffff_ffff_ffff_1000));
    assert_eq!(lines[5]["offset"], 16 + 2 + 7 + 2 + 1);
}

#[test]
fn dump_and_asm_pipe_through_stdin_and_stdout() {
    let c = Case::new();
    let pt = c.dir.path().join("t.pt");
    let o = ptemu(&["simulate", "--out", s(&c.out())]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::copy(c.out().join("trace.pt"), &pt).unwrap();
    let listing = ptemu(&["dump", s(&pt)]);
    assert!(listing.status.success(), "{}", text(&listing.stderr));
    let o = ptemu_stdin(&["asm", "-", "-o", "-"], &listing.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        o.stdout,
        std::fs::read(&pt).unwrap(),
        "dump | asm - -o - gives the bytes back"
    );
}

/// `ptemu dump big.pt | head`: when the reader closes the pipe, dump stops at once, prints no error
/// and exits 0.
#[test]
fn dump_into_a_closed_pipe_stops_quietly() {
    use std::io::Read;
    let c = Case::new();
    let mut bytes = ptemu::packet::PSB_BYTES.to_vec();
    bytes.resize(200_000, 0); // PADs: 200k lines of text, far more than a pipe buffer holds
    let pt = c.file("pads.pt", &bytes);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(["dump", s(&pt)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert!(
        text(&first).starts_with("0000000000000000  psb"),
        "{}",
        text(&first)
    );
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "", "no error for a closed pipe");
}

/// Every command that prints: a reader that went away ends it quietly (exit 0, nothing on stderr);
/// a full device is an error naming stdout (exit 2); never a panic (exit 101).
#[test]
fn console_output_to_a_closed_pipe_or_a_full_device_never_panics() {
    use std::process::{Command, Stdio};
    let c = Case::new();
    let out = c.out();
    let penn = "tests/data/penn/sjeng-1K.trace";
    let demo = demo_layout();
    let stream = c.file("s.bin", [0x5a; 4096]);
    let pt = c.file("p.pt", ptemu::packet::PSB_BYTES);
    let commands: [Vec<&str>; 6] = [
        vec!["stats", "--format", "penn", penn],
        vec!["layout", "default"],
        vec!["layout", "check", s(&demo)],
        vec!["simulate", "--out", s(&out)],
        write_args(&demo, s(&stream), &out),
        vec!["dump", s(&pt)],
    ];
    for args in &commands {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ptemu"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // no reader left: the first write fails with EPIPE
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stderr), "", "{args:?}");

        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_ptemu"))
            .args(args)
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("stdout: writing:"),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn dump_shows_bad_bytes_with_their_offset_and_resyncs() {
    let c = Case::new();
    let mut bytes = vec![
        0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
    ];
    bytes.extend_from_slice(&[0x00, 0xc9, 0x00]);
    bytes.extend_from_within(..16);
    bytes.push(0x19); // truncated TSC
    let pt = c.file("bad.pt", &bytes);
    let o = ptemu(&["dump", s(&pt)]);
    assert_eq!(o.status.code(), Some(1));
    let out = text(&o.stdout);
    assert!(
        out.contains("0000000000000011  [error at byte 0x11: unknown opcode]"),
        "{out}"
    );
    assert!(out.contains("[resynced at 0000000000000013]"), "{out}");
    assert!(
        out.contains("0000000000000023  [error at byte 0x23: truncated packet"),
        "{out}"
    );
    assert!(text(&o.stderr).contains("2 decode error(s)"));
    let o = ptemu(&["dump", s(&c.file("none.pt", [0x00, 0x00])), "--no-sync"]);
    assert!(o.status.success());
    assert_eq!(text(&o.stdout).lines().count(), 2);
}

#[test]
fn asm_errors_name_the_file_and_line() {
    let c = Case::new();
    let txt = c.file("bad.txt", "psb\npsbend\ntnt.8 !!!!!!!\n");
    let o = ptemu(&["asm", s(&txt), "-o", s(&c.dir.path().join("x.pt"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("bad.txt:3:"), "{}", text(&o.stderr));
    assert!(!c.dir.path().join("x.pt").exists());
}

#[test]
fn layout_errata_key_adds_an_erratum_and_refuses_unknown_ones() {
    let c = Case::new();
    let l = c.file(
        "tgl.toml",
        "cpu = \"alderlake\"\nerrata = [\"TGL052\"]\n[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0x1fff\n",
    );
    let o = ptemu(&["layout", "check", s(&l)]);
    assert!(o.status.success());
    assert!(
        text(&o.stdout).contains("warning: [TGL052]"),
        "{}",
        text(&o.stdout)
    );
    let st = c.file("s.bin", stream(0, 5000));
    let o = c.write(&l, &st);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(c.out().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["events"][0]["kind"], "erratum");
    let bad = c.file(
        "bad.toml",
        "errata = [\"XYZ1\"]\n[output]\nscheme = \"topa\"\nbase = 0\n",
    );
    assert_bad_input(
        &ptemu(&["layout", "check", s(&bad)]),
        &["bad.toml:1", "unknown erratum"],
    );
}
