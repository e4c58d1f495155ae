//! What a user is shown (issue 28): summaries that say what the output unit did (laps, bytes
//! overwritten, PTWRITEs PTWEn=0 dropped), `layout check`'s walk, exit codes after operational
//! errors, report.json's version-2 form, `gen`'s summary, and the wording of messages
//! (spec/simulate.md SIM14-SIM17, spec/output.md "layout check describes the walk").

mod common;

use common::cli::{generate, hex, ptemu, s, text, write_args};
use common::stream;
use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

const SJENG: &str = "tests/data/penn/sjeng-1K.trace";

/// The root of the project (for the example layouts).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A layout file `name` with `body` in `dir`.
fn layout(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, body).unwrap();
    p
}

/// `ptemu simulate` of `records` generated Penn micro-ops (seed 1) through
/// `examples/ring-layout.toml` with `extra` arguments, into `dir/out`: the directory and stdout.
fn ring_run(dir: &Path, records: u64, extra: &[&str]) -> (PathBuf, String) {
    let (trace, _) = generate(dir, "penn", records, 1);
    let out = dir.join("out");
    let l = root().join("examples/ring-layout.toml");
    let args = [
        "simulate",
        s(&trace),
        "--format",
        "penn",
        "--layout",
        s(&l),
        "--out",
        s(&out),
    ];
    let o = ptemu(&[&args[..], extra].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    (out, text(&o.stdout))
}

fn report(out: &Path) -> Value {
    serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap()
}

/// A Skylake ToPA layout of one table at 0x10000 (the walk's start) with `entries` (TOML).
fn skylake_topa(entries: &str) -> String {
    format!(
        "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\nentries = [ {entries} ]\n"
    )
}

/// Two 4 KiB regions, END back to the table: an 8 KiB ring.
const RING_8K: &str =
    r#"{ region = 0x100000, size = "4K" }, { region = 0x101000, size = "4K" }, { end = 0x10000 }"#;

/// The second region (8K at 0x101000) is not aligned to its size: T4 when the walk reaches it.
const T4_SECOND: &str =
    r#"{ region = 0x100000, size = "4K" }, { region = 0x101000, size = "8K" }, { end = 0x10000 }"#;

/// SIM14 (O5 policy "Laps and overwrites"): 40,000 bytes through an 8 KiB ring, the issue's case.
/// The counts in report.json and the console line match a byte model: each stream byte goes to
/// ring address `i mod 8192`, an overwrite when the address already holds one; a lap each time
/// the walk comes back to the region where the first overwrite happened.
#[test]
fn sim14_write_reports_laps_and_overwritten_bytes_of_a_circular_topa() {
    let dir = tempfile::tempdir().unwrap();
    let l = layout(dir.path(), "ring.toml", &skylake_topa(RING_8K));
    let st = dir.path().join("s.bin");
    fs::write(&st, stream(0, 40_000)).unwrap();
    let out = dir.path().join("out");
    let o = ptemu(&write_args(&l, s(&st), &out));
    assert!(o.status.success(), "{}", text(&o.stderr));

    let mut held: HashMap<u64, ()> = HashMap::new();
    let (mut overwritten, mut laps, mut mark, mut last_region) = (0u64, 0u64, None, None);
    for i in 0..40_000u64 {
        let addr = i % 8192;
        let region = addr / 4096;
        if last_region != Some(region) && mark == Some(region) {
            laps += 1;
        }
        if held.insert(addr, ()).is_some() {
            overwritten += 1;
            if mark.is_none() {
                mark = Some(region);
                laps += 1;
            }
        }
        last_region = Some(region);
    }
    assert_eq!((overwritten, laps), (31_808, 4));
    let r = report(&out);
    assert_eq!(r["stats"]["bytes_overwritten"], overwritten);
    assert_eq!(r["stats"]["laps"], laps);
    assert_eq!(
        r["event_counts"]["wrap"], 0,
        "END back to the table is not a W5 wrap"
    );
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains(
            "the regions hold 8192 bytes of the stream; 31808 older bytes were overwritten (4 laps)"
        ),
        "{stdout}"
    );
}

/// SIM14: `write` lists the first few output events, as `simulate` does, then how many more
/// `events.jsonl` holds (a 12 KiB ring with INT on each region made 1,000 lines); an END ring's
/// laps come with no "0 wrap" beside them.
#[test]
fn sim14_write_lists_a_few_events_then_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let ring = r#"{ region = 0x100000, size = "4K", int = true }, { region = 0x101000, size = "4K", int = true }, { region = 0x102000, size = "4K", int = true }, { end = 0x10000 }"#;
    let l = layout(dir.path(), "ring.toml", &skylake_topa(ring));
    let st = dir.path().join("s.bin");
    fs::write(&st, stream(0, 400_000)).unwrap();
    let out = dir.path().join("out");
    let o = ptemu(&write_args(&l, s(&st), &out));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    let listed = stdout.lines().filter(|l| l.trim_start().starts_with('@')).count();
    let pmis = report(&out)["event_counts"]["pmi"].as_u64().unwrap();
    assert_eq!(pmis, 400_000 / 4096);
    assert_eq!(listed, 8, "{stdout}");
    assert!(
        stdout.contains(&format!("... {} more in events.jsonl", pmis - 8)),
        "{stdout}"
    );
    let jsonl = fs::read_to_string(out.join("events.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count() as u64, pmis);
    assert!(
        stdout.contains(&format!("output events: {pmis} PMI, 0 stopped, 0 error\n")),
        "{stdout}"
    );
    assert!(!stdout.contains("wrap"), "{stdout}");
}

/// SIM14: under consumer-side faults the summary and report.json describe the files on disk and
/// the layout the run used: `--fault wrap@4096` runs on a 4 KiB ring and trace.pt holds 4096
/// bytes; `--fault gap@1` leaves a shorter file; the stored stream's size stands beside, named
/// as such.
#[test]
fn sim14_the_summary_describes_the_files_and_the_layout_under_faults() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, _) = generate(dir.path(), "penn", 60_000, 1);
    let ring = root().join("examples/ring-layout.toml");
    for (fault, layout, source) in [
        (
            "wrap@4096",
            None,
            "the --fault layout: ToPA, 1 x 4K region, INT, circular",
        ),
        ("gap@1", Some(s(&ring)), "ToPA, 4 x 4K regions, INT, circular"),
    ] {
        let out = dir.path().join(fault);
        let mut args = vec![
            "simulate",
            s(&trace),
            "--format",
            "penn",
            "--fault",
            fault,
            "--out",
            s(&out),
        ];
        if let Some(l) = layout {
            args.extend(["--layout", l]);
        }
        let o = ptemu(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let stdout = text(&o.stdout);
        let on_disk = fs::metadata(out.join("trace.pt")).unwrap().len();
        let r = report(&out);
        assert_eq!(r["stats"]["trace_bytes"], on_disk, "{fault}");
        let stored = r["stats"]["stored_bytes"].as_u64().unwrap();
        assert!(stored > on_disk, "{fault}: {stored} stored, {on_disk} on disk");
        assert!(
            r["layout"].as_str().unwrap().ends_with(source),
            "{fault}: {}",
            r["layout"]
        );
        let first = stdout.lines().next().unwrap();
        assert!(first.ends_with(source), "{fault}: {first}");
        assert!(
            stdout.contains(&format!(
                "trace.pt      {on_disk} bytes (what a reader got of the {stored} bytes the output unit accepted: faults {fault}"
            )),
            "{fault}: {stdout}"
        );
    }
}

/// SIM14: PTWRITE instructions with PTWEn=0 are counted and the summary says how to send them;
/// with PTWEn=1 there is no such line and the PTW packets are there.
#[test]
fn sim14_the_summary_says_when_ptwen_0_dropped_ptwrites() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = dir.path().join(format!("out{}", extra.len()));
        let o = ptemu(&[&["simulate", SJENG, "--format", "penn", "--out", s(&out)], extra].concat());
        assert!(o.status.success(), "{}", text(&o.stderr));
        (text(&o.stdout), report(&out))
    };
    let (stdout, r) = run(&[]);
    let off = r["stats"]["ptwrites_off"].as_u64().unwrap();
    assert!(off > 0, "sjeng-1K has PTWRITE-mapped accesses");
    assert!(
        stdout.contains(&format!(
            "{off} PTWRITE instructions sent no packet: PTWEn=0 (--ctl PTWEn=1 sends their data payloads)"
        )),
        "{stdout}"
    );
    let (stdout, r) = run(&["--ctl", "PTWEn=1"]);
    assert_eq!(r["stats"]["ptwrites_off"], 0);
    assert_eq!(r["stats"]["packets"]["ptw"], off);
    assert!(!stdout.contains("PTWEn=0"), "{stdout}");
    // Code the IP filter leaves out would send nothing with PTWEn=1 either: not counted.
    let (stdout, r) = run(&[
        "--msr",
        "ADDR0_A=0x1",
        "--msr",
        "ADDR0_B=0x2",
        "--ctl",
        "ADDR0_CFG=1",
    ]);
    assert_eq!(r["stats"]["ptwrites_off"], 0);
    assert!(!stdout.contains("PTWRITE instructions"), "{stdout}");
    // A CPU without PTWRITE: no advice to set a bit that would #GP.
    let (stdout, _) = run(&["--cpu", "skylake", "--no-image"]);
    assert!(stdout.contains("this CPU has no PTWRITE"), "{stdout}");
}

/// SIM15: `write` logs what `layout check` finds before writing (here an entry the walk reaches
/// that is an operational error, T4, and a walk into unlisted memory), writes every output, and
/// exits 1 because output stopped in an operational error. `simulate` does the same.
#[test]
fn sim15_write_and_simulate_warn_first_and_exit_1_after_an_operational_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = layout(dir.path(), "t4.toml", &skylake_topa(T4_SECOND));
    let st = dir.path().join("s.bin");
    fs::write(&st, stream(0, 10_000)).unwrap();
    let out = dir.path().join("out");
    let o = ptemu(&write_args(&bad, s(&st), &out));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("operational error if reached") && stderr.contains("T4"),
        "{stderr}"
    );
    assert!(
        stderr.contains("output stopped by an operational error"),
        "{stderr}"
    );
    let r = report(&out);
    assert_eq!(r["event_counts"]["error"], 1);
    assert_eq!(r["stats"]["bytes_written"], 4096);

    let unlisted = layout(
        dir.path(),
        "unlisted.toml",
        &skylake_topa("{ region = 0x100000, size = \"4K\" }"),
    );
    let o = ptemu(&write_args(&unlisted, s(&st), &dir.path().join("out2")));
    assert!(
        o.status.success(),
        "a warning is not an error: {}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains("which the layout does not list"),
        "{}",
        text(&o.stderr)
    );

    // simulate: the bad entry first, so the error comes at enable (T4 on the first entry).
    let at_enable = layout(
        dir.path(),
        "t4-first.toml",
        &skylake_topa("{ region = 0x101000, size = \"8K\" }, { end = 0x10000 }"),
    );
    let o = ptemu(&[
        "simulate",
        SJENG,
        "--format",
        "penn",
        "--layout",
        s(&at_enable),
        "--out",
        s(&dir.path().join("sim")),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("T4"), "{}", text(&o.stderr));
    assert!(
        dir.path().join("sim/report.json").is_file(),
        "the outputs are written"
    );
}

/// SIM16: report.json version 2: every MSR and address a "0x..." string, exact above 2^53 where
/// JSON numbers are not (IA32_PERF_GLOBAL_STATUS[55] after a PMI; OutputOffset in MASK_PTRS[63:32]).
#[test]
fn sim16_report_json_writes_msrs_and_addresses_as_hex_strings() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = ring_run(dir.path(), 20_000, &["--ctl", "PTWEn=1"]);
    let r = report(&out);
    assert_eq!(r["version"], 2);
    for k in [
        "rtit_ctl",
        "rtit_status",
        "output_base",
        "output_mask_ptrs",
        "perf_global_status",
    ] {
        assert!(
            r["msr"][k].as_str().is_some_and(|v| v.starts_with("0x")),
            "msr.{k} = {}",
            r["msr"][k]
        );
    }
    assert_eq!(hex(&r["msr"]["perf_global_status"]), 1 << 55, "a PMI fired");
    assert_eq!(r["ctl"]["value"], "0x3509");
    assert_eq!(r["image"]["base"], "0x400000");
    assert_eq!(r["events"][0]["table"], "0x10000");
    let image: Value = serde_json::from_slice(&fs::read(out.join("image.json")).unwrap()).unwrap();
    assert_eq!(image["base"], "0x400000");
    let first: Value = serde_json::from_str(
        fs::read_to_string(out.join("events.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first, r["events"][0]);
}

/// SIM17: the main job (`cargo xtask simulate` without arguments: 600,000 generated Penn micro-ops
/// through `examples/ring-layout.toml`, xtask's `MAIN_JOB_RECORDS`) shows the output unit at work:
/// PMIs and laps, in the summary and the report.
#[test]
fn sim17_the_main_job_shows_pmis_and_laps() {
    let dir = tempfile::tempdir().unwrap();
    let (out, stdout) = ring_run(dir.path(), 600_000, &[]);
    let r = report(&out);
    // The numbers the README quotes for the main job.
    assert_eq!(
        (&r["stats"]["pmis"], &r["stats"]["laps"]),
        (&Value::from(14), &Value::from(3))
    );
    assert!(stdout.contains("output events: 14 PMI"), "{stdout}");
    assert!(
        stdout.contains(
            "the regions hold 16384 bytes of the stream; 41104 older bytes were overwritten (3 laps)"
        ),
        "{stdout}"
    );
    let readme = fs::read_to_string(root().join("README.md"))
        .unwrap()
        .replace('\n', " ");
    assert!(readme.contains("the 14 PMIs") && readme.contains("41104 older bytes were overwritten (3 laps)"));
    let xtask = fs::read_to_string(root().join("xtask/src/main.rs")).unwrap();
    assert!(
        xtask.contains("MAIN_JOB_RECORDS: &str = \"600000\""),
        "the test mirrors the main job"
    );
}

/// The layout check describes the walk (spec/output.md): steps with sizes and flags, how it ends
/// (circular with the bytes per lap, a STOP with the bytes before it, an operational error), where
/// PMIs fire; single range: base, size, mask. The numbers are those the route property test
/// (tests/layout_props.rs) checks against the output unit.
#[test]
fn o5_s1_e3_layout_check_prints_the_walk_its_capacity_and_pmis() {
    let check = |p: &Path| {
        let o = ptemu(&["layout", "check", s(p)]);
        (o.status.code(), text(&o.stdout))
    };
    let (code, out) = check(&root().join("src/simulate/default-layout.toml"));
    assert_eq!(code, Some(0));
    for want in [
        "ok (ToPA output, cpu alderlake)",
        "#1   0x10000[0x0]         region 0x100000 1M INT",
        "#5   0x10000[0x4]         END -> table 0x10000",
        "circular: after #5 the walk returns to #1; each lap writes 4M (4194304 bytes)",
        "PMIs: 4 per lap, at bytes 1048576 (#1, P1), 2097152 (#2, P1), 3145728 (#3, P1), 4194304 (#4, P1) into each lap",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
    let (code, out) = check(&root().join("examples/demo-layout.toml"));
    assert_eq!(code, Some(0));
    for want in [
        "(after the wrap, W5)",
        "stops: output stops when #6 is full, after 96K (98304 bytes) from the start offset (S1)",
        "PMIs: 3, at bytes 12288 (#2, P1), 32768 (#5, P1), 98304 (#6, S5)",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
    let dir = tempfile::tempdir().unwrap();
    let range = layout(
        dir.path(),
        "range.toml",
        "cpu = \"icelake\"\n[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0x10_0000_3fff\n",
    );
    let (code, out) = check(&range);
    assert_eq!(code, Some(0));
    assert!(out.contains("ok (single-range output, cpu icelake)"), "{out}");
    assert!(
        out.contains(
            "range: base 0x200000, size 16K (16384 bytes), mask 0x3fff, output starts at offset 0x10"
        ),
        "{out}"
    );
    assert!(
        out.contains("after 16368 bytes from the start offset, then every 16K"),
        "{out}"
    );
    let t4 = layout(dir.path(), "t4.toml", &skylake_topa(T4_SECOND));
    // Two entries naming one base: a lap writes 8K into 4K of memory (the check warns; stderr).
    let aliased = layout(
        dir.path(),
        "aliased.toml",
        &skylake_topa("{ region = 0x100000, size = \"4K\", int = true }, { region = 0x100000, size = \"4K\", int = true }, { end = 0x10000 }"),
    );
    let o = ptemu(&["layout", "check", s(&aliased)]);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(
        stdout.contains("each lap writes 8K (8192 bytes)")
            && stdout.contains("so they hold at most 4K (4096 bytes)"),
        "{stdout}"
    );
    assert!(
        (stdout.clone() + &stderr)
            .contains("regions of the walk overlap: 8192 bytes of regions cover 4096 bytes"),
        "{stdout}{stderr}"
    );
    let (code, out) = check(&t4);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("ends at #2 after 4K (4096 bytes) from the start offset: the entry there is an operational error (E3)"),
        "{out}"
    );
}

/// `ptemu gen` ends with one line: records (Penn lines as written), seed, bytes, file; `-q` is
/// silent; `--help` says a Penn trace may end past N.
#[test]
fn gen_prints_a_summary_line_and_its_help_explains_penn_records() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("p.trace");
    let o = ptemu(&["gen", "--format", "penn", "--records", "1000", "-o", s(&f)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let body = fs::read(&f).unwrap();
    let lines = body.iter().filter(|&&b| b == b'\n').count();
    assert!(lines >= 1000);
    assert_eq!(
        text(&o.stdout),
        format!(
            "ptemu gen: {lines} penn records (seed 1), {} bytes, to {}\n",
            body.len(),
            f.display()
        )
    );
    let o = ptemu(&["gen", "--format", "byu", "--records", "10", "-q", "-o", s(&f)]);
    assert!(o.status.success() && o.stdout.is_empty() && o.stderr.is_empty());
    let o = ptemu(&["gen", "--format", "byu", "--records", "10", "-o", "-"]);
    assert_eq!(o.stdout.len(), 60, "the trace alone on stdout");
    assert!(
        text(&o.stderr).contains("ptemu gen: 10 byu records"),
        "{}",
        text(&o.stderr)
    );
    let help = text(&ptemu(&["gen", "--help"]).stdout);
    assert!(help.contains("may end a few lines past N"), "{help}");
}

/// Messages name things as the SDM and the user do: `write`'s scheme and single-range mask, one
/// list of profiles for `--cpu`, gem5's magic in hex both ways, `--format` needed with INPUT.
#[test]
fn messages_use_sdm_names_and_list_things_once() {
    let dir = tempfile::tempdir().unwrap();
    let range = layout(
        dir.path(),
        "range.toml",
        "cpu = \"icelake\"\n[output]\nscheme = \"single-range\"\nbase = 0x200000\nmask_ptrs = 0x3fff\n",
    );
    let st = dir.path().join("s.bin");
    fs::write(&st, stream(0, 100)).unwrap();
    let o = ptemu(&write_args(&range, s(&st), &dir.path().join("out")));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("ptemu write: cpu icelake, single-range output"),
        "{stdout}"
    );
    assert!(stdout.contains("(range mask 0x3fff, offset 0x64)"), "{stdout}");
    let o = ptemu(&write_args(
        &layout(dir.path(), "ring.toml", &skylake_topa(RING_8K)),
        s(&st),
        &dir.path().join("out2"),
    ));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("skylake, ToPA output") && stdout.contains("(table index 0x0, offset 0x64)"),
        "{stdout}"
    );

    let o = ptemu(&["simulate", "--cpu", "pentium", "--out", s(&dir.path().join("x"))]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr).matches("broadwell").count(),
        1,
        "{}",
        text(&o.stderr)
    );

    let junk = dir.path().join("junk.gem5");
    fs::write(&junk, b"xyz!rest").unwrap();
    let o = ptemu(&["stats", s(&junk), "--format", "gem5"]);
    assert!(
        text(&o.stderr).contains("expected the magic \"gem5\" (67 65 6d 35), found 78 79 7a 21"),
        "{}",
        text(&o.stderr)
    );

    let help = text(&ptemu(&["simulate", "--help"]).stdout);
    assert!(
        help.contains("[<INPUT> --format <FORMAT>]") && help.contains("Required with INPUT"),
        "{help}"
    );
}

/// `ptemu ARGS` with stdout, and stderr too when `stderr_also`, a pipe whose reader is gone
/// before it starts (`… | true`): its exit code.
fn exit_into_closed_pipe(args: &[&str], stderr_also: bool) -> Option<i32> {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"));
    cmd.args(args).stdout(writer.try_clone().unwrap());
    if stderr_also {
        cmd.stderr(writer);
    } else {
        cmd.stderr(std::process::Stdio::null());
    }
    cmd.status().unwrap().code()
}

/// SIM21: no output channel panics (exit 101) and a closed stdout hides no failure. With
/// stdout and stderr into a pipe whose reader is gone (`2>&1 | true`), each command exits with the
/// status it earned: 2 for a missing input, 1 for a layout or a write that ends in an operational
/// error, 0 for a clean one; with stdout alone closed, the same.
#[test]
fn sim21_closed_pipes_keep_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let bad = layout(dir.path(), "t4.toml", &skylake_topa(T4_SECOND));
    let good = layout(dir.path(), "ring.toml", &skylake_topa(RING_8K));
    let st = dir.path().join("s.bin");
    fs::write(&st, stream(0, 10_000)).unwrap();
    let out = dir.path().join("out");
    let nosuch = dir.path().join("nosuch");
    for stderr_also in [true, false] {
        let cases: [(Vec<&str>, i32); 5] = [
            (
                vec!["simulate", s(&nosuch), "--format", "penn", "--out", s(&out)],
                2,
            ),
            (vec!["layout", "check", s(&bad)], 1),
            (vec!["layout", "check", s(&good)], 0),
            (write_args(&bad, s(&st), &out), 1),
            (write_args(&good, s(&st), &out), 0),
        ];
        for (args, want) in cases {
            assert_eq!(
                exit_into_closed_pipe(&args, stderr_also),
                Some(want),
                "{args:?} (stderr too: {stderr_also})"
            );
        }
    }
}

/// SIM5: `--ctl TraceEn=0` runs (a user may want the empty case) but warns that nothing is
/// traced; the default CTL does not warn.
#[test]
fn sim5_ctl_traceen_0_warns_that_nothing_is_traced() {
    let dir = tempfile::tempdir().unwrap();
    let sjeng = root().join(SJENG);
    for (extra, warns) in [(&["--ctl", "TraceEn=0"][..], true), (&[][..], false)] {
        let out = dir.path().join(format!("o{warns}"));
        let args = [
            &["simulate", s(&sjeng), "--format", "penn", "-q", "--out", s(&out)][..],
            extra,
        ]
        .concat();
        let o = ptemu(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(
            text(&o.stderr).contains("TraceEn=0: tracing is never enabled"),
            warns,
            "{}",
            text(&o.stderr)
        );
        assert_eq!(fs::metadata(out.join("trace.pt")).unwrap().len() == 0, warns);
    }
}

/// Issue 54 §10: each message says what it is about. `verify` of a corpus's root names it a
/// corpus and a case to give (no "line 0"); `run` without `--` before the program hints it; a
/// single range whose register write faults (M2) is not described as if it worked; a walk of
/// one step says "1 step" (PIC9's rule for counts); an empty input warns as ptemu's messages do;
/// an MTCFreq that CPUID does not allow lists the values it does (M2).
#[test]
fn m2_r1_sim2_messages_say_what_they_are_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A corpus: its manifest and a case with a truth.
    let corpus = d.join("corpus");
    fs::create_dir_all(corpus.join("clean-b")).unwrap();
    fs::create_dir_all(corpus.join("clean-a")).unwrap();
    fs::write(corpus.join("manifest.json"), "{}").unwrap();
    for case in ["clean-a", "clean-b"] {
        fs::write(corpus.join(case).join("truth.jsonl"), "{\"truth\":1}\n").unwrap();
    }
    let verify = |case: &Path| {
        let o = ptemu(&["verify", s(case), "--ips", s(&d.join("none.txt"))]);
        assert_eq!(o.status.code(), Some(2));
        text(&o.stderr)
    };
    let err = verify(&corpus);
    assert!(
        err.contains("is a corpus (it has manifest.json), not a case")
            && err.contains(&format!("for example {}", corpus.join("clean-a").display())),
        "{err}"
    );
    assert!(!err.contains("line 0"), "{err}");
    let err = verify(d);
    assert!(err.contains("holds neither truth.bin nor truth.jsonl"), "{err}");
    let err = verify(&d.join("missing"));
    assert!(
        err.contains("missing: No such file") && !err.contains("line 0"),
        "{err}"
    );

    let o = ptemu(&["run", "--out", s(&d.join("r2")), "ls", "-l"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains("unexpected argument 'ls'")
            && err.contains(
                "tip: the program and its arguments come after `--`: ptemu run [OPTIONS] --out DIR -- ls"
            ),
        "{err}"
    );
    assert!(!d.join("r2").exists());

    let faulting = layout(
        d,
        "range.toml",
        "cpu = \"skylake\"\n[output]\nscheme = \"single-range\"\nbase = 0x4000000000000000\nmask_ptrs = 0x1fff\n",
    );
    let o = ptemu(&["layout", "check", s(&faulting)]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1));
    assert!(out.contains("#GP: IA32_RTIT_OUTPUT_BASE"), "{out}");
    assert!(
        out.contains("range: none: the #GP above refuses the write"),
        "{out}"
    );
    assert!(!out.contains("range: base"), "{out}");

    let one = layout(
        d,
        "one.toml",
        &skylake_topa("{ region = 0x100000, size = \"4K\", stop = true }"),
    );
    let out = text(&ptemu(&["layout", "check", s(&one)]).stdout);
    assert!(out.contains("walk (1 step):"), "{out}");

    let empty = d.join("empty.byu");
    fs::write(&empty, b"").unwrap();
    let o = ptemu(&["simulate", "--format", "byu", s(&empty), "--out", s(&d.join("e"))]);
    let err = text(&o.stderr);
    assert!(
        err.starts_with(&format!(
            "ptemu: warning: {}: the input has no instructions",
            empty.display()
        )),
        "{err}"
    );

    let o = ptemu(&[
        "simulate",
        "--ctl",
        "MTCEn=1",
        "--ctl",
        "MTCFreq=1",
        "--out",
        s(&d.join("m")),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains("MTCFreq=1 not allowed (allowed: 0, 3, 6, 9, by CPUID.14H.1:EAX[31:16] = 0x0249)"),
        "{err}"
    );
}
