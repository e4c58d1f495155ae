//! Faults at their limits (spec/truth.md FLT1, FLT3, FLT4): `wrap` and `stop` buffers of every
//! size the help promises, and two faults on one packet. libipt's decoder is the oracle.

mod common;

use common::cli::{ptemu, s, text};
use ptemu::simulate::fault::{Fault, Plan};
use std::path::{Path, PathBuf};

/// libipt's instruction decoder over a case directory (examples/libipt_decode.rs).
#[path = "../examples/libipt_decode.rs"]
#[allow(dead_code)]
mod libipt_decode;

/// A Kaplan trace of `records` records: about 49 bytes of trace a record (page images go out
/// as PTWRITEs and TIPs), so megabytes come fast.
fn kaplan(dir: &Path, records: u64) -> PathBuf {
    let p = dir.join(format!("k{records}.trace"));
    let o = ptemu(&[
        "gen",
        "--format",
        "kaplan",
        "--records",
        &records.to_string(),
        "--seed",
        "1",
        "-o",
        s(&p),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    p
}

fn verify_libipt(case: &Path) {
    let lines = libipt_decode::decode_case(case);
    let o = common::cli::ptemu_stdin(&["verify", s(case), "--ips", "-"], lines.as_bytes());
    assert!(o.status.success(), "{}: {}", case.display(), text(&o.stdout));
}

/// FLT3, FLT4: 4 KiB and 2 MiB rings and STOP buffers fill and decode; a 1 GiB one is a ring of
/// eight 128 MiB regions (the largest a ToPA entry holds), which the layout check accepts, and a
/// trace too short for it says so (not an internal layout message).
#[test]
fn flt3_flt4_buffers_of_every_size_the_help_promises() {
    let dir = tempfile::tempdir().unwrap();
    let input = kaplan(dir.path(), 50_000);
    for (fault, size) in [
        ("wrap", 4096u64),
        ("wrap", 2 << 20),
        ("stop", 4096),
        ("stop", 2 << 20),
    ] {
        let out = dir.path().join(format!("{fault}-{size}"));
        let spec = format!("{fault}@{size}");
        let o = ptemu(&[
            "simulate",
            s(&input),
            "--format",
            "kaplan",
            "--out",
            s(&out),
            "-q",
            "--fault",
            &spec,
        ]);
        assert!(o.status.success(), "{spec}: {}", text(&o.stderr));
        let len = std::fs::metadata(out.join("trace.pt")).unwrap().len();
        assert_eq!(len, size, "{spec}: trace.pt holds the ring or the STOP region");
    }
    let cpu = ptemu::CpuProfile::named("alderlake").unwrap();
    for kind in ["wrap", "stop"] {
        let fault: Fault = format!("{kind}@{}", 1u64 << 30).parse().unwrap();
        let plan = Plan {
            faults: vec![fault],
            seed: 1,
        };
        let layout = plan.layout(&cpu).unwrap().expect("a layout");
        let report = ptemu::layout::check(&layout);
        assert!(report.is_ok(), "{kind}@1G: {report:?}");
        let out = dir.path().join(format!("{kind}-1g"));
        let o = ptemu(&[
            "simulate",
            s(&input),
            "--format",
            "kaplan",
            "--out",
            s(&out),
            "-q",
            "--fault",
            &format!("{kind}@1073741824"),
        ]);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            text(&o.stderr).contains("never filled"),
            "{kind}@1G: {}",
            text(&o.stderr)
        );
    }
}

/// FLT1: two faults on one packet are refused (a second flip of the same bit would undo the
/// first while the truth listed two damages); a fault whose packet an earlier one damaged goes to
/// the next packet, and the decoder still passes.
#[test]
fn flt1_flt6_flt7_tr6_two_faults_on_one_packet_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("p.trace");
    let o = ptemu(&[
        "gen",
        "--format",
        "penn",
        "--records",
        "20000",
        "--seed",
        "3",
        "-o",
        s(&input),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = dir.path().join("o");
    for pair in [
        ["corrupt-silent@100", "corrupt-silent@100"],
        ["corrupt@100", "corrupt@100"],
        ["corrupt@100", "corrupt-silent@100"],
    ] {
        let o = ptemu(&[
            "simulate",
            s(&input),
            "--format",
            "penn",
            "--out",
            s(&out),
            "-q",
            "--fault",
            pair[0],
            "--fault",
            pair[1],
        ]);
        assert_eq!(o.status.code(), Some(2), "{pair:?}");
        assert!(
            text(&o.stderr).contains("one fault per packet"),
            "{pair:?}: {}",
            text(&o.stderr)
        );
        assert!(!out.exists());
    }
    let o = ptemu(&[
        "simulate",
        s(&input),
        "--format",
        "penn",
        "--out",
        s(&out),
        "-q",
        "--fault",
        "corrupt@100",
        "--fault",
        "corrupt@101",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let head: serde_json::Value =
        serde_json::from_str(common::cli::truth_jsonl(&out).lines().next().unwrap()).unwrap();
    let damage = head["damage"].as_array().unwrap();
    assert_eq!(damage.len(), 2, "{damage:?}");
    assert!(
        damage[1]["from"].as_u64() >= damage[0]["generated_to"].as_u64(),
        "{damage:?}"
    );
    verify_libipt(&out);
}
