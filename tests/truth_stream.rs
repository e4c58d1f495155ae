//! TR16: the truth classified as the run goes is, byte for byte, the truth classified from the
//! spool after the run, on every seed format and the faults a streamed run can have (an overflow,
//! a STOP), with timing packets, PTWRITEs and marks.

mod common;

use common::cli::generate;
use ptemu::simulate::{self, fault::Plan, Options};
use ptemu::sources::{Format, Input};
use std::io::{BufWriter, Write};
use std::path::Path;

/// `truth.bin` of `input` simulated with `opts` and `faults`, the truth streamed or spooled.
fn truth_bin(
    dir: &Path,
    input: &Path,
    format: Format,
    faults: &[&str],
    ctl: &[&str],
    stream: bool,
) -> Vec<u8> {
    let sub = dir.join(if stream { "stream" } else { "spool" });
    std::fs::create_dir_all(&sub).unwrap();
    let plan = Plan {
        faults: faults.iter().map(|f| f.parse().unwrap()).collect(),
        seed: 1,
    };
    assert!(
        !plan.changes_delivery(),
        "only runs without consumer-side damage stream"
    );
    let mut opts = Options::new(format, simulate::default_layout()).with_stream_truth(stream);
    for text in ctl {
        opts.ctl = ptemu::regs::ctl_text::apply_assignment(opts.ctl, text).unwrap();
    }
    opts.apply_faults(&plan, false).unwrap();
    let path = |f: &str| sub.join(f);
    let sink = BufWriter::new(std::fs::File::create(path("trace.pt")).unwrap());
    let mut spool = BufWriter::new(std::fs::File::create(path("truth.spool")).unwrap());
    let (outcome, sink) = simulate::run_recording(
        &opts,
        Input::open(input).unwrap(),
        None,
        sink,
        Some(&mut spool as &mut dyn Write),
        Default::default(),
        &mut |_| {},
    )
    .unwrap();
    sink.into_inner().unwrap();
    spool.into_inner().unwrap();
    assert_eq!(outcome.streamed_truth.is_some(), stream);
    let summary = simulate::finish_truth(
        &path("trace.pt"),
        &path("trace.pt"),
        &path("truth.spool"),
        &path("truth.bin"),
        &outcome,
        &plan,
        opts.describe(&plan, "input"),
    )
    .unwrap();
    if let Some(counts) = outcome.streamed_truth {
        assert_eq!(counts, summary.counts);
    }
    assert!(!path("truth.spool").exists(), "the spool or body is removed");
    std::fs::read(path("truth.bin")).unwrap()
}

/// TR16: streamed and spooled, the same `truth.bin`, for BYU, Penn and Kaplan traces, clean,
/// with an overflow, cut by a STOP (the facts after the cut classified once output stopped),
/// with MTC and CYC (the per-instruction path) and with PTWRITE marks.
#[test]
fn tr16_the_truth_classified_as_the_run_goes_is_the_spooled_truth() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, Format, &[&str], &[&str])] = &[
        ("byu", Format::Byu, &[], &[]),
        ("byu", Format::Byu, &["stop@4096"], &[]),
        ("byu", Format::Byu, &["ovf"], &["MTCEn=1"]),
        ("penn", Format::Penn, &[], &[]),
        ("penn", Format::Penn, &["ovf@5000", "ovf@20000"], &[]),
        ("penn", Format::Penn, &["stop@4096"], &["PSBFreq=3"]),
        ("penn", Format::Penn, &[], &["CYCEn=1", "MTCEn=1"]),
        ("kaplan", Format::Kaplan, &[], &["PTWEn=1"]),
        ("kaplan", Format::Kaplan, &["stop@4096"], &[]),
    ];
    for (k, &(name, format, faults, ctl)) in cases.iter().enumerate() {
        let (input, _) = generate(dir.path(), name, 60_000, k as u64 + 1);
        let case = dir.path().join(format!("case-{k}"));
        let spooled = truth_bin(&case, &input, format, faults, ctl, false);
        let streamed = truth_bin(&case, &input, format, faults, ctl, true);
        assert!(
            streamed == spooled,
            "case {k} ({name} {faults:?} {ctl:?}): the streamed truth.bin differs ({} bytes, spooled {})",
            streamed.len(),
            spooled.len()
        );
    }
}
