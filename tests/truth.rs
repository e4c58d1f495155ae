//! Ground truth, faults and `ptemu verify` (spec/truth.md) against libipt's instruction decoder.

mod common;

use common::cli::{ptemu, ptemu_stdin, s, text};
use common::insn;
use common::query::Timing;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

fn timing() -> Timing {
    let clock = ptemu::TracerConfig::default().clock;
    Timing {
        mtc_freq: 3,
        nom_freq: clock.nominal_ratio,
        art_eax: 1,
        art_ebx: clock.tsc_per_art,
    }
}

fn gen_penn(dir: &Path, records: u64, seed: u64) -> PathBuf {
    let file = dir.join(format!("penn-{seed}.trace"));
    let o = ptemu(&[
        "gen",
        "--format",
        "penn",
        "--records",
        &records.to_string(),
        "--seed",
        &seed.to_string(),
        "-o",
        s(&file),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    file
}

/// libipt's output over a case directory, as `ptemu verify` reads it.
fn libipt_lines(case: &Path) -> String {
    let json: Value = serde_json::from_slice(&fs::read(case.join("image.json")).unwrap()).unwrap();
    let base = json["base"].as_u64().unwrap();
    let trace = fs::read(case.join("trace.pt")).unwrap();
    insn::decode_lines(&trace, &case.join("image.bin"), base, timing())
}

fn verify(case: &Path, lines: &str) -> (bool, String) {
    let o = ptemu_stdin(&["verify", s(case), "--ips", "-"], lines.as_bytes());
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{}",
        text(&o.stderr)
    );
    (
        o.status.success(),
        format!("{}{}", text(&o.stdout), text(&o.stderr)),
    )
}

fn simulate(input: &Path, out: &Path, extra: &[&str]) {
    let o = ptemu(
        &[
            &["simulate", s(input), "--format", "penn", "--out", s(out), "-q"],
            extra,
        ]
        .concat(),
    );
    assert!(o.status.success(), "{extra:?}: {}", text(&o.stderr));
}

/// FLT2-FLT7, TR2-TR8: every fault kind on one generated Penn trace; libipt's instruction
/// decoder (resynchronizing at the next PSB after an error) is a correct decoder, so `verify`
/// accepts its output, and each fault made instructions lost or undefined.
#[test]
fn tr8_flt2_flt7_libipt_passes_verify_on_every_fault_kind() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 250_000, 7);
    let small = "src/simulate/gap-layout.toml";
    for (fault, class) in [
        (&[][..], ""),
        (&["--fault", "ovf@20000"][..], "lost"),
        (&["--fault", "wrap@8192"][..], "lost"),
        (&["--fault", "stop@8192"][..], "lost"),
        (&["--fault", "gap@2", "--layout", small][..], "undefined"),
        (&["--fault", "corrupt@9000"][..], "lost"),
        (&["--fault", "corrupt-silent@9000"][..], "undefined"),
    ] {
        let out = dir.path().join("out");
        let _ = fs::remove_dir_all(&out);
        simulate(&input, &out, fault);
        let (ok, msg) = verify(&out, &libipt_lines(&out));
        assert!(ok, "{fault:?}: {msg}");
        let report: Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
        let counts = &report["truth"]["counts"];
        match class {
            "" => assert_eq!(counts["required"], counts["instructions"], "{fault:?}"),
            c => assert!(counts[c].as_u64().unwrap() > 0, "{fault:?}: {counts}"),
        }
    }
}

/// libipt's output over a corpus case, with the timing its case.json names.
fn case_lines(case: &Path) -> String {
    let c: Value = serde_json::from_slice(&fs::read(case.join("case.json")).unwrap()).unwrap();
    let json: Value = serde_json::from_slice(&fs::read(case.join("image.json")).unwrap()).unwrap();
    let base = json["base"].as_u64().unwrap();
    let t = &c["timing"];
    let timing = if t.is_null() {
        timing()
    } else {
        Timing {
            mtc_freq: t["mtc_freq"].as_u64().unwrap() as u8,
            nom_freq: t["nom_freq"].as_u64().unwrap() as u8,
            art_eax: t["cpuid_0x15_eax"].as_u64().unwrap() as u32,
            art_ebx: t["cpuid_0x15_ebx"].as_u64().unwrap() as u32,
        }
    };
    let trace = fs::read(case.join("trace.pt")).unwrap();
    insn::decode_lines(&trace, &case.join("image.bin"), base, timing)
}

/// CORP1, CORP2, TR8: the corpus has at least 20 cases covering clean CTL settings and every
/// fault kind, each with its files; libipt passes `verify` on every case, and fails it once one
/// IP is changed or one line removed.
#[test]
fn corp1_corp2_tr8_libipt_passes_every_corpus_case_and_a_changed_or_missing_line_fails() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("corpus");
    let o = ptemu(&["corpus", s(&root), "--seed", "3", "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let manifest: Value = serde_json::from_slice(&fs::read(root.join("manifest.json")).unwrap()).unwrap();
    let cases = manifest["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let kinds: std::collections::BTreeSet<&str> =
        cases.iter().map(|c| c["fault"].as_str().unwrap()).collect();
    for k in ["clean", "ovf", "wrap", "stop", "gap", "corrupt", "corrupt-silent"] {
        assert!(kinds.contains(k), "no {k} case in {kinds:?}");
    }
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let case = root.join(name);
        for f in ["trace.pt", "image.bin", "image.json", "truth.jsonl", "case.json"] {
            assert!(case.join(f).is_file(), "{name}/{f}");
        }
        let lines = case_lines(&case);
        let (ok, msg) = verify(&case, &lines);
        assert!(ok, "{name}: {msg}");
        let ips: Vec<&str> = lines.lines().filter(|l| l.starts_with("0x")).collect();
        assert!(ips.len() > 100, "{name}: {} instructions", ips.len());
        // One IP changed (the last: required, or an optional one that must then be right).
        let last = lines
            .lines()
            .collect::<Vec<_>>()
            .iter()
            .rposition(|l| l.starts_with("0x"))
            .unwrap();
        let changed: String = lines
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i == last {
                    "0x1\n".to_string()
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let (ok, msg) = verify(&case, &changed);
        assert!(!ok, "{name}: a changed IP was accepted");
        assert!(msg.contains("0x1"), "{name}: {msg}");
        // One line removed (the first instruction, which every case requires).
        let first = lines.lines().position(|l| l.starts_with("0x")).unwrap();
        let removed: String = lines
            .lines()
            .enumerate()
            .filter(|&(i, _)| i != first)
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        assert!(!verify(&case, &removed).0, "{name}: a missing line was accepted");
    }
}

/// CORP3: the same seed writes the same bytes; another seed, other faults.
#[test]
fn corp3_same_seed_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let read_all = |root: &Path| -> Vec<(String, Vec<u8>)> {
        let mut v = Vec::new();
        for e in walk(root) {
            v.push((
                e.strip_prefix(root).unwrap().display().to_string(),
                fs::read(&e).unwrap(),
            ));
        }
        v.sort();
        v
    };
    let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
    for (d, seed) in [(&a, "5"), (&b, "5"), (&c, "6")] {
        let o = ptemu(&["corpus", s(d), "--seed", seed, "-q"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert_eq!(read_all(&a), read_all(&b));
    assert_ne!(read_all(&a), read_all(&c));
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk(&p));
        } else {
            v.push(p);
        }
    }
    v
}
