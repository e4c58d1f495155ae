//! libipt's .ptt tests as `ptemu verify` cases (spec/pttc.md, "`--case`"): for every .ptt with
//! an `.exp(ptxed)` section (read from `../shared/reference/libipt-tests`; skipped, saying so,
//! where that folder is absent) and every CPU its `; cpu` lines name (or none), `ptemu pttc
//! --case --cpu …` writes the case, and
//!
//! - `ptemu verify --events` accepts the `.exp(ptxed)` text itself (the truth is built from it),
//!   without the lines not compared (below);
//! - the libipt harness (examples/libipt_decode.rs, libipt 2.1.2) decodes the case as ptxed
//!   would with the test's options (`case_style`), and `ptemu verify --events` accepts its
//!   output;
//! - its output agrees with the `.exp(ptxed)` text by fields: instruction IPs (and `? `), event
//!   lines, error lines, `[end of trace]`; ptxed's `[block]`, sideband and statistics lines are
//!   not compared.
//!
//! The tests where the harness does not give what libipt's ptxed gives are listed, each with
//! its reason, in [`DISAGREE`] (and spec/pttc.md): the test fails when one of them agrees,
//! when another disagrees, or when verify's verdict on one changes.

mod common;

use common::cli::{ptemu, text};
use common::harness;
use common::ptt::{ptt_files, reference_dir};
use ptemu::pttc::case::{read_ptxed_line, PtxedLine};
use std::collections::BTreeMap;
use std::path::Path;

/// Why a run disagrees (spec/pttc.md lists the same).
mod why {
    /// Libipt 2.1.2 does not know the part: the harness prints ptxed's `config error: unknown cpu` and decodes without the part's errata workarounds, which this test is about.
    pub const UNKNOWN_CPU: &str = "libipt 2.1.2 does not know the part: the harness prints ptxed's `config error: unknown cpu` and decodes without the part's errata workarounds, which this test is about";
    /// TRIG packets: libipt 2.1.2 has no TRIG (an `unknown opcode` error) and no `trig` event.
    pub const TRIG: &str =
        "TRIG packets: libipt 2.1.2 has no TRIG (an `unknown opcode` error) and no `trig` event";
    /// Power events: the newer ptxed prints PWRE/PWRX C-states as the packet's fields plus 1, mod 16 (`pwre c1.0`, `pwrx int: c1 (c0)` for fields 0.15 and 0 (15)), libipt 2.1.2's harness prints the fields, as TR11's words do (`pwre c0.15`, `pwrx int: c0 (c15)`); libipt 2.1.2 reports a PWRE as soon as it reads it, ahead of the MWAIT and EXSTOP before it, which wait for their FUP, where the newer libipt reports those first; and before an overflow libipt 2.1.2 drops an MWAIT and EXSTOP whose FUP never comes.
    pub const POWER: &str = "power events: the newer ptxed prints PWRE/PWRX C-states as the packet's fields plus 1, mod 16 (`pwre c1.0`, `pwrx int: c1 (c0)` for fields 0.15 and 0 (15)), libipt 2.1.2's harness prints the fields, as TR11's words do (`pwre c0.15`, `pwrx int: c0 (c15)`); libipt 2.1.2 reports a PWRE as soon as it reads it, ahead of the MWAIT and EXSTOP before it, which wait for their FUP, where the newer libipt reports those first; and before an overflow libipt 2.1.2 drops an MWAIT and EXSTOP whose FUP never comes";
    /// FRED's ERETU/ERETS and the `swintr` event: newer than libipt 2.1.2, which decodes the flow otherwise.
    pub const NEWER_EVENTS: &str = "FRED's ERETU/ERETS and the `swintr` event: newer than libipt 2.1.2, which decodes the flow otherwise";
    /// APX's JMPABS: libipt 2.1.2 does not know the instruction.
    pub const JMPABS: &str = "APX's JMPABS: libipt 2.1.2 does not know the instruction";
    /// Perf_event sideband (`--pevent:*`, `--sb:*`): the code is mapped by the sideband's MMAP records and context switches; the harness reads no sideband, only the .bin at org.
    pub const SIDEBAND: &str = "perf_event sideband (`--pevent:*`, `--sb:*`): the code is mapped by the sideband's MMAP records and context switches; the harness reads no sideband, only the .bin at org";
    /// `--resync-on-error`: ptxed resynchronizes with `pt_insn_resync` (libipt 2.2), which libipt 2.1.2 lacks: the harness goes on at the next PSB and misses what ptxed recovers.
    pub const RESYNC: &str = "`--resync-on-error`: ptxed resynchronizes with `pt_insn_resync` (libipt 2.2), which libipt 2.1.2 lacks: the harness goes on at the next PSB and misses what ptxed recovers";
    /// The block decoder with `--block:end-on-call`: ptxed's block decoder reports the disable at the end of the block; the harness is libipt's instruction decoder.
    pub const BLOCKS: &str = "the block decoder with `--block:end-on-call`: ptxed's block decoder reports the disable at the end of the block; the harness is libipt's instruction decoder";
}

/// The runs (`test` for a test without `; cpu` lines, `test@f/m` otherwise) whose harness output
/// does not agree with the `.exp(ptxed)` text by fields: the run, why, and whether `ptemu verify
/// --events` accepts the harness's output all the same.
const DISAGREE: &[(&str, &str, bool)] = &[
    ("bdm70-tip_pgd-psb_fup-tip_pge@18/1", why::UNKNOWN_CPU, false),
    ("bdm70-tip_pgd-psb_fup-tip_pge@18/3", why::UNKNOWN_CPU, false),
    ("bdm70-tip_pgd-psb_fup-tip_pge@6/213", why::UNKNOWN_CPU, false),
    ("skd022@18/1", why::UNKNOWN_CPU, false),
    ("skd022@18/3", why::UNKNOWN_CPU, false),
    ("skd022@6/213", why::UNKNOWN_CPU, false),
    ("fup-tip-trig", why::TRIG, false),
    ("mode-trig-trig", why::TRIG, false),
    ("psb-fup-ptw-trig", why::TRIG, false),
    ("psb-fup-trig", why::TRIG, false),
    ("tip-trig", why::TRIG, false),
    ("tip_pge-trig", why::TRIG, false),
    ("tnt-trig", why::TRIG, false),
    ("trig", why::TRIG, false),
    ("mwait-pwre-exstop_ip-fup-ovf", why::POWER, false),
    ("mwait-pwre-exstop_ip-ovf", why::POWER, false),
    ("mwait-pwre-exstop_ip-pwre-pwrx", why::POWER, false),
    ("mwait-pwre-ovf", why::POWER, false),
    ("ovf-pwre-pwrx-tip_pge", why::POWER, false),
    ("pwre-exstop_ip-pwrx", why::POWER, false),
    ("tip_pgd-mwait-pwre-exstop-pwrx-tip_pge", why::POWER, false),
    ("tip_pgd-mwait-pwre-exstop_ip-pwre-pwrx", why::POWER, false),
    ("tip_pgd-mwait-pwre-exstop_ip-pwrx", why::POWER, false),
    ("tip_pge-pwre-pwrx-tip_pgd", why::POWER, false),
    ("ptet", why::NEWER_EVENTS, false),
    ("int-eretu", why::NEWER_EVENTS, false),
    ("int-eretu-cpl_0", why::NEWER_EVENTS, false),
    ("ptet-int-eretu", why::NEWER_EVENTS, false),
    ("ptet-int-int-erets-eretu", why::NEWER_EVENTS, false),
    ("ptet-int-iret-cpl_0", why::NEWER_EVENTS, false),
    ("ptet-int-iret-cpl_3", why::NEWER_EVENTS, false),
    ("tip-jmpabs", why::JMPABS, false),
    ("tip_pgd-jmpabs", why::JMPABS, false),
    ("pevent-comm_exec-mmap-tsc-iret", why::SIDEBAND, false),
    ("pevent-fork", why::SIDEBAND, false),
    ("pevent-mmap-tip_cached", why::SIDEBAND, false),
    ("pevent-mmap_secondary-tsc", why::SIDEBAND, false),
    ("pevent-split", why::SIDEBAND, false),
    ("pevent-tip_pgd-comm_exec-mmap-tsc-tip_pge", why::SIDEBAND, false),
    ("pevent-tip_pgd-mmap-tsc-tip_pge", why::SIDEBAND, false),
    ("pevent-tip_pgd-switch-tsc-tip_pge", why::SIDEBAND, false),
    ("pevent-tip_pgd-switch_cpu_wide-tsc-tip_pge", why::SIDEBAND, false),
    ("ptxed-resync-bad_query-fup-tip", why::RESYNC, false),
    ("ptxed-resync-bad_query-ovf", why::RESYNC, true),
    ("ptxed-resync-bad_query-tip", why::RESYNC, false),
    ("ptxed-resync-nomap-fup-tip", why::RESYNC, false),
    ("ptxed-resync-nomap-mode_exec-fup", why::RESYNC, false),
    ("ptxed-resync-nomap-mode_tsx-eos", why::RESYNC, false),
    ("ptxed-resync-nomap-mode_tsx-fup-tip", why::RESYNC, false),
    ("ptxed-resync-nomap-mode_tsx-tip_pgd", why::RESYNC, false),
    ("ptxed-resync-nomap-ovf-fup", why::RESYNC, false),
    ("ptxed-resync-nomap-psb", why::RESYNC, false),
    ("ptxed-resync-nomap-ptw-fup", why::RESYNC, false),
    ("ptxed-resync-nomap-ptw-tip", why::RESYNC, false),
    ("ptxed-resync-nomap-tip", why::RESYNC, false),
    ("ptxed-resync-nomap-tip_pgd", why::RESYNC, false),
    ("ptxed-resync-nomap-tip_pge", why::RESYNC, false),
    ("ptxed-resync-psb-bad_status-psb", why::RESYNC, false),
    ("ptxed-resync-psb-nomap-psb", why::RESYNC, false),
    ("ptxed-end_on_call-tip_pgd", why::BLOCKS, false),
];

/// The CPUs of a .ptt's `; cpu f/m` lines, as libipt's test.bash reads them.
fn cpus(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|l| {
            let l = l.trim_start_matches([' ', '\t']).strip_prefix(';')?;
            let l = l.trim_start_matches([' ', '\t']).strip_prefix("cpu")?;
            l.starts_with([' ', '\t'])
                .then(|| l.split_ascii_whitespace().next().map(str::to_string))?
        })
        .collect()
}

/// A line of ptxed's output as the comparison sees it; `None` for lines not compared.
fn field(line: &str) -> Option<String> {
    // libipt's test.bash compares with `diff -ub`: runs of blanks are equal.
    let line = line.split_ascii_whitespace().collect::<Vec<_>>().join(" ");
    let line = line.as_str();
    match read_ptxed_line(line) {
        // ptxed's statistics: the instruction count.
        PtxedLine::Other if line.starts_with("insn: ") => Some(line.to_string()),
        PtxedLine::Other => None,
        // An error with its IP, its kind and message; not the offset, where libipt stands
        // when it finds the error (libipt 2.1.2 often stands a packet further than the
        // libipt the .exp files were written for).
        PtxedLine::Error { .. } => Some(line.split_once(", ").map_or(line, |(_, rest)| rest).to_string()),
        l => Some(format!("{l:?}")),
    }
}

fn fields(text: &str) -> Vec<String> {
    text.lines().filter_map(field).collect()
}

/// The first place where `exp` and `got` differ by fields, described.
fn first_difference(exp: &str, got: &str) -> Option<String> {
    let (e, g) = (fields(exp), fields(got));
    let at = e
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(e.len().min(g.len()));
    (e.len() != g.len() || at < e.len()).then(|| {
        format!(
            "field {at}: expected {:?}, the harness gave {:?}",
            e.get(at),
            g.get(at)
        )
    })
}

#[test]
fn libipt_ptxed_expectations_are_verify_cases() {
    let Some(dir) = reference_dir() else { return };
    let files = ptt_files(&dir);
    let work = tempfile::tempdir().unwrap();
    let (mut tests, mut runs, mut exp_ok) = (0, 0, 0);
    let mut error_runs = Vec::new();
    let mut refused = BTreeMap::new();
    let mut disagree = BTreeMap::new();
    for ptt in &files {
        let source = std::fs::read_to_string(ptt).unwrap();
        if !source.contains("@pt .exp(ptxed)") {
            continue;
        }
        let stem = ptt.file_stem().unwrap().to_str().unwrap().to_string();
        if stem == "test_label_addr" || stem == "test_exp_labels" {
            continue; // libipt's pttc rejects these two too (tests/pttc.rs)
        }
        tests += 1;
        let cpus = cpus(&source);
        let runs_of: Vec<Option<&str>> = match cpus.is_empty() {
            true => vec![None],
            false => cpus.iter().map(|c| Some(c.as_str())).collect(),
        };
        for cpu in runs_of {
            let run = match cpu {
                Some(c) => format!("{stem}@{c}"),
                None => stem.clone(),
            };
            let out = work.path().join(run.replace('/', "_"));
            let mut args = vec![
                "pttc",
                ptt.to_str().unwrap(),
                "--case",
                "-o",
                out.to_str().unwrap(),
            ];
            if let Some(c) = cpu {
                args.extend(["--cpu", c]);
            }
            let o = ptemu(&args);
            assert!(o.status.success(), "{run}: {}", text(&o.stderr));
            runs += 1;
            let exp_name = match cpu {
                Some(c) => format!("{stem}-ptxed-cpu_{}.exp", c.replace('/', "_")),
                None => format!("{stem}-ptxed.exp"),
            };
            let exp_path = out.join(&exp_name);
            let exp = std::fs::read_to_string(&exp_path).unwrap();
            let case = out.to_str().unwrap();
            // The truth is the .exp's: verify accepts the .exp text, but for the lines not
            // compared (ptxed's sideband records start with an offset that reads as an IP).
            let kept: String = exp
                .lines()
                .filter(|l| field(l).is_some())
                .map(|l| format!("{l}\n"))
                .collect();
            let kept_path = out.join("exp-compared.txt");
            std::fs::write(&kept_path, kept).unwrap();
            let v = ptemu(&["verify", case, "--ips", kept_path.to_str().unwrap(), "--events"]);
            assert!(
                v.status.success(),
                "{run}: verify refuses the .exp(ptxed) its truth is made from: {}{}",
                text(&v.stdout),
                text(&v.stderr)
            );
            exp_ok += 1;
            let expects_error = exp
                .lines()
                .any(|l| matches!(read_ptxed_line(l), PtxedLine::Error { .. }));
            if expects_error {
                error_runs.push(run.clone());
            }
            let got = harness::decode_case(&out);
            let got_path = out.join("harness.txt");
            std::fs::write(&got_path, &got).unwrap();
            let v = ptemu(&["verify", case, "--ips", got_path.to_str().unwrap(), "--events"]);
            if !v.status.success() {
                assert_eq!(v.status.code(), Some(1), "{run}: {}", text(&v.stderr));
                refused.insert(run.clone(), format!("{}{}", text(&v.stdout), text(&v.stderr)));
            }
            if let Some(d) = first_difference(&exp, &got) {
                disagree.insert(run.clone(), d);
            }
        }
    }
    assert!(runs >= 150, "only {runs} runs");
    let stem = |run: &String| run.split('@').next().unwrap_or(run).to_string();
    let tests_disagreeing: std::collections::BTreeSet<String> = disagree.keys().map(stem).collect();
    let tests_refused: std::collections::BTreeSet<String> = refused.keys().map(stem).collect();
    println!(
        "pttc suite: {tests} tests, {runs} runs (one per `; cpu` line); verify accepts the .exp \
         text of {exp_ok} runs; the libipt harness agrees by fields on {} runs ({} tests on every \
         run) and verify accepts its output on {} runs ({} tests)",
        runs - disagree.len(),
        tests - tests_disagreeing.len(),
        runs - refused.len(),
        tests - tests_refused.len(),
    );
    println!(
        "pttc suite: {} runs expect a decode error; the harness agrees on {} of them, verify accepts {}",
        error_runs.len(),
        error_runs.iter().filter(|r| !disagree.contains_key(*r)).count(),
        error_runs.iter().filter(|r| !refused.contains_key(*r)).count()
    );
    for (run, why) in &disagree {
        println!("disagrees: {run}: {why}");
    }
    for (run, why) in &refused {
        println!("refused: {run}: {}", why.lines().next().unwrap_or(""));
    }
    let listed: BTreeMap<&str, bool> = DISAGREE.iter().map(|&(run, _, ok)| (run, ok)).collect();
    let mut wrong = Vec::new();
    for (run, why) in &disagree {
        if !listed.contains_key(run.as_str()) {
            wrong.push(format!("{run} disagrees and is not listed: {why}"));
        }
    }
    for (run, accepted) in &listed {
        if !disagree.contains_key(*run) {
            wrong.push(format!("{run} is listed but agrees now"));
        }
        if *accepted == refused.contains_key(*run) {
            wrong.push(format!(
                "{run}: verify {} its output, the list says otherwise",
                if *accepted { "refuses" } else { "accepts" }
            ));
        }
    }
    for (run, why) in &refused {
        if !listed.contains_key(run.as_str()) {
            wrong.push(format!("{run}: verify refuses the harness's output: {why}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `ptemu pttc --case --perf-data` (spec/pttc.md): each test's trace and code as a perf.data that
/// Linux perf decodes (`perf script --itrace=i0nse -F ip`, run where the case is), its output
/// checked by `ptemu verify` against the `.exp(ptxed)` truth, for the first CPU each test names.
/// The tests perf passes are listed in `tests/data/pttc/perf-passes.txt` (what perf 6.1 does with
/// libipt's tests: a measurement, regenerated with `PTEMU_UPDATE_PERF_PASSES=1`); the test fails
/// when that set changes either way, and when `--layout` does not give `ptemu write`'s outputs.
#[test]
fn pttc_perf_data_perf_decodes_libipts_tests() {
    let Some(dir) = reference_dir() else { return };
    let files = ptt_files(&dir);
    let work = tempfile::tempdir().unwrap();
    let mut passes = Vec::new();
    let mut cases = 0;
    for ptt in &files {
        let source = std::fs::read_to_string(ptt).unwrap();
        let stem = ptt.file_stem().unwrap().to_str().unwrap().to_string();
        if !source.contains("@pt .exp(ptxed)") || stem == "test_label_addr" || stem == "test_exp_labels" {
            continue;
        }
        let out = work.path().join(&stem);
        let o = ptemu(&[
            "pttc",
            ptt.to_str().unwrap(),
            "--case",
            "--perf-data",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{stem}: {}", text(&o.stderr));
        cases += 1;
        let perf = std::process::Command::new("perf")
            .args([
                "script",
                "-i",
                "perf.data",
                "--symfs",
                ".",
                "--itrace=i0nse",
                "-F",
                "ip",
            ])
            .current_dir(&out)
            .output()
            .expect("perf (Debian's linux-perf; cargo xtask test installs it)");
        let lines = text(&perf.stdout);
        let v = common::cli::ptemu_stdin(
            &["verify", out.to_str().unwrap(), "--ips", "-", "-q"],
            lines.as_bytes(),
        );
        if v.status.success() {
            passes.push(stem);
        }
    }
    let listed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pttc/perf-passes.txt");
    let got = passes.join("\n") + "\n";
    if std::env::var_os("PTEMU_UPDATE_PERF_PASSES").is_some() {
        std::fs::write(&listed, &got).unwrap();
    }
    let want = std::fs::read_to_string(&listed).unwrap();
    assert_eq!(got, want, "perf passes {} of {cases} cases", passes.len());
    assert!(passes.len() * 2 > cases, "{} of {cases}", passes.len());
    // --layout: the test's .pt through a ToPA ring, as `ptemu write` writes it.
    let ring = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ring-layout.toml");
    let out = work.path().join("layout");
    let o = ptemu(&[
        "pttc",
        dir.join("loop-tnt.ptt").to_str().unwrap(),
        "--layout",
        ring.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let written = out.join("loop-tnt-output");
    for f in ["regions", "report.json", "events.jsonl", "layout.svg"] {
        assert!(written.join(f).exists(), "{f}");
    }
    let pt = std::fs::read(out.join("loop-tnt.pt")).unwrap();
    let region = std::fs::read(written.join("regions/0x100000.bin")).unwrap();
    assert_eq!(region[..pt.len()], pt[..]);
}
