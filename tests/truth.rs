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
    let small = "tests/data/truth/small-regions.toml";
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
