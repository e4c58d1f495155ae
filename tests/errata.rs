//! CPU errata in the profiles (spec/cpu-profiles.md, "Errata", CP2-CP7): each modeled erratum's
//! shape appears in the stream, libipt told the part (its workaround on) decodes it so that
//! `ptemu verify` accepts it, and libipt not told the part shows why the workaround is needed.

mod common;

use common::cli::{gen_penn, ptemu, ptemu_stdin, s, text};
use ptemu::regs::{CpuProfile, Errata};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

use common::harness as libipt_decode;

/// `ptemu verify CASE --ips -` over `lines`: passed, and what it said.
fn verify(case: &Path, lines: &str) -> (bool, String) {
    let o = ptemu_stdin(&["verify", s(case), "--ips", "-"], lines.as_bytes());
    assert_ne!(o.status.code(), Some(2), "{}", text(&o.stderr));
    (
        o.status.success(),
        format!("{}{}", text(&o.stdout), text(&o.stderr)),
    )
}

/// `ptemu simulate INPUT --format penn ARGS --out DIR/NAME`; panics unless it succeeds.
fn simulate(dir: &Path, name: &str, input: &Path, args: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let o = ptemu(
        &[
            &["simulate", s(input), "--format", "penn", "-q", "--out", s(&out)],
            args,
        ]
        .concat(),
    );
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    out
}

fn report(case: &Path) -> Value {
    serde_json::from_slice(&fs::read(case.join("report.json")).unwrap()).unwrap()
}

/// The packets of `case`'s trace as `ptemu dump` prints them: one `name args` per packet.
fn packets(case: &Path) -> Vec<String> {
    let o = ptemu(&["dump", s(&case.join("trace.pt"))]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .collect()
}

/// libipt told the part (and the filter) gives every instruction `verify` wants; not told,
/// `verify` rejects what it gives. Returns libipt's lines when not told.
fn needs_the_workaround(case: &Path) -> String {
    let told = libipt_decode::decode_case(case);
    let (ok, said) = verify(case, &told);
    assert!(ok, "told the part: {said}");
    assert!(!told.contains("error"), "told the part: {told}");
    libipt_decode::decode_case_as(case, None)
}

const FILTER: [&str; 6] = [
    "--ctl",
    "ADDR0_CFG=1",
    "--msr",
    "ADDR0_A=0x400000",
    "--msr",
    "ADDR0_B=0x403fff",
];

/// CP1: a run says the part its CPU profile was read from (`report.json`'s `cpu_signature`,
/// which the libipt harness reads), and its ptxed command tells ptxed (`--cpu f/m/s`); a
/// profile of no real part says none. (CP3 shows what telling libipt changes.)
#[test]
fn cp1_a_run_names_its_part_and_decoders_are_told_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 2000, 1);
    let out = simulate(dir.path(), "skylake", &input, &["--cpu", "skylake"]);
    let r = report(&out);
    assert_eq!(
        r["cpu_signature"],
        serde_json::json!({"family": 6, "model": 0x5e, "stepping": 3})
    );
    assert_eq!(libipt_decode::case_cpu(&out), Some((6, 0x5e, 3)));
    assert!(
        r["ptxed"].as_str().unwrap().contains(" --cpu 6/94/3 "),
        "{}",
        r["ptxed"]
    );
    let out = simulate(dir.path(), "generic", &input, &["--cpu", "generic-max"]);
    assert_eq!(libipt_decode::case_cpu(&out), None);
    assert!(!report(&out)["ptxed"].as_str().unwrap().contains("--cpu"));
}

/// CP2: each profile carries its part's errata (libipt's `pt_cpu_errata` list), BDM106 and
/// TGL052 as before; `errata = [...]` and `--errata` edit them; a wrong name is an error that
/// names it; report.json lists them.
#[test]
fn cp2_errata_are_the_parts_and_edits_switch_them() {
    let of = |name: &str| CpuProfile::named(name).unwrap().errata;
    assert_eq!(of("broadwell"), Errata::BDM70 | Errata::BDM64 | Errata::BDM106);
    assert_eq!(
        of("skylake"),
        Errata::BDM70 | Errata::SKD007 | Errata::SKD010 | Errata::SKD022 | Errata::SKL014 | Errata::SKL168
    );
    assert_eq!(of("goldmont"), Errata::APL11 | Errata::APL12);
    assert_eq!(of("icelake"), Errata::BDM70 | Errata::SKL014 | Errata::SKD022);
    assert_eq!(of("alderlake"), Errata::BDM70 | Errata::SKD022 | Errata::APL11);
    assert_eq!(
        of("sapphirerapids"),
        Errata::BDM70 | Errata::SKD022 | Errata::SKZ84
    );
    assert_eq!(of("generic-max"), Errata::empty());
    let e = of("skylake");
    assert_eq!(e.edit("-bdm70").unwrap(), e - Errata::BDM70);
    assert_eq!(e.edit("none").unwrap(), Errata::empty());
    assert_eq!(e.edit("TGL052").unwrap(), e | Errata::TGL052);
    let err = e.edit("SKL999").unwrap_err().to_string();
    assert!(err.contains("SKL999") && err.contains("SKL014"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout.toml");
    let default = ptemu(&["layout", "default"]);
    let toml = text(&default.stdout).replace(
        "cpu = \"alderlake\"",
        "cpu = \"skylake\"\nerrata = [\"-SKL168\", \"TGL052\"]",
    );
    assert!(toml.contains("SKL168"));
    fs::write(&layout, &toml).unwrap();
    let input = gen_penn(dir.path(), 2000, 1);
    let out = simulate(
        dir.path(),
        "edited",
        &input,
        &["--layout", s(&layout), "--errata", "-BDM70,-SKD007"],
    );
    assert_eq!(
        report(&out)["errata"],
        serde_json::json!(["TGL052", "SKD010", "SKD022", "SKL014"])
    );
    let o = ptemu(&[
        "simulate",
        "-q",
        "--errata",
        "BDM71",
        "--out",
        s(&dir.path().join("x")),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains("--errata") && err.contains("BDM71") && err.contains("BDM70"),
        "{err}"
    );
    assert!(!dir.path().join("x").exists());
    let bad = toml.replace("\"-SKL168\"", "\"SKX1\"");
    let line = bad.lines().position(|l| l.contains("SKX1")).unwrap() + 1;
    fs::write(&layout, bad).unwrap();
    let o = ptemu(&["layout", "check", s(&layout)]);
    let err = text(&o.stderr);
    assert!(
        !o.status.success() && err.contains(&format!("layout.toml:{line}:")) && err.contains("SKX1"),
        "{err}"
    );
}

/// CP3, HW8: on the skylake profile (BDM70 on by default) every enable's PSB+ holds MODE.Exec
/// and FUP; libipt told the part decodes the run, not told it fails at the first enable; with
/// `--errata -BDM70` libipt decodes it told or not.
#[test]
fn cp3_bdm70_libipt_needs_its_workaround() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 4000, 2);
    // Every profile whose part has BDM70, in each packet style (broadwell's is the SDM's).
    for cpu in CpuProfile::NAMES {
        if !CpuProfile::named(cpu).unwrap().has(Errata::BDM70) {
            continue;
        }
        let out = simulate(dir.path(), cpu, &input, &["--cpu", cpu]);
        let p = packets(&out);
        let pge = p.iter().position(|p| p.starts_with("tip.pge")).unwrap();
        let psb = p[..pge].iter().rposition(|p| p == "psb").unwrap();
        let plus = &p[psb..pge];
        assert!(
            plus.iter().any(|p| p.starts_with("fup")) && plus.iter().any(|p| p.starts_with("mode.exec")),
            "{cpu}: {plus:?}"
        );
        let untold = needs_the_workaround(&out);
        assert!(
            untold.starts_with("error"),
            "{cpu}: {}",
            &untold[..untold.len().min(200)]
        );
    }
    let off = simulate(
        dir.path(),
        "off",
        &input,
        &["--cpu", "skylake", "--errata", "-BDM70"],
    );
    assert!(verify(&off, &libipt_decode::decode_case_as(&off, None)).0);
    assert!(verify(&off, &libipt_decode::decode_case(&off)).0);
}

/// CP4: on the skylake profile (SKL014 on) a direct JMP or CALL that leaves the IP filter range
/// sends TIP.PGD without an IP; libipt told the part and the filter binds it to the branch; told
/// the part but not the filter it cannot; without the erratum every such TIP.PGD has its IP.
#[test]
fn cp4_skl014_tip_pgd_without_ip_needs_the_workaround() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 20000, 3);
    // BDM70 off, so the enable shape needs no workaround and only SKL014's does.
    let args = [&FILTER[..], &["--cpu", "skylake", "--errata", "-BDM70"]].concat();
    let out = simulate(dir.path(), "skl014", &input, &args);
    let with = packets(&out).iter().filter(|p| *p == "tip.pgd 0").count();
    let args = [&FILTER[..], &["--cpu", "skylake", "--errata", "-BDM70,-SKL014"]].concat();
    let without = simulate(dir.path(), "plain", &input, &args);
    let plain = packets(&without).iter().filter(|p| *p == "tip.pgd 0").count();
    assert!(
        with > plain + 20,
        "{with} TIP.PGD without IP, {plain} without the erratum"
    );
    let untold = needs_the_workaround(&out);
    assert!(!verify(&out, &untold).0);
    // Told the part but not the filter: libipt's workaround cannot tell the branch left it.
    let trace = fs::read(out.join("trace.pt")).unwrap();
    let no_filter = libipt_decode::decode_with(
        &trace,
        &libipt_decode::case_sections(&out),
        libipt_decode::case_timing(&out),
        false,
        libipt_decode::case_cpu(&out),
    );
    assert!(!verify(&out, &no_filter).0);
    // Without the erratum, nothing to work around.
    assert!(verify(&without, &libipt_decode::decode_case_as(&without, None)).0);
}

/// A goldmont run of `input` with the tracer settings `cfg`, its errata edited by `errata`.
fn goldmont(dir: &Path, name: &str, input: &Path, cfg: &Path, errata: &str, extra: &[&str]) -> PathBuf {
    let args = ["--cpu", "goldmont", "--tracer-config", s(cfg), "--errata", errata];
    simulate(dir, name, input, &[extra, &args].concat())
}

/// CP5: on the goldmont profile (APL11) an overflow still on when TraceEn is cleared ends with
/// OVF, then TIP.PGD; libipt told the part takes it, not told it reports an error there.
#[test]
fn cp5_apl11_ovf_then_tip_pgd_at_the_disable() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 20000, 3);
    // A buffer that drains too slowly to ever recover: the overflow lasts to the end.
    let cfg = dir.path().join("slow.toml");
    fs::write(
        &cfg,
        "[overflow]\nbuffer_bytes = 256\ndrain_bytes = 1\nper_cycles = 64\n",
    )
    .unwrap();
    let run = |name: &str, errata: &str| goldmont(dir.path(), name, &input, &cfg, errata, &[]);
    let out = run("apl11", "none,APL11");
    let p = packets(&out);
    assert_eq!(p[p.len() - 2..], ["ovf", "tip.pgd 0"]);
    let untold = needs_the_workaround(&out);
    assert!(untold.contains("error"), "{untold}");
    let plain = run("plain", "none");
    assert_eq!(packets(&plain).last().unwrap(), "ovf");
}

/// CP6: on the goldmont profile (APL12) an overflow that resolves outside the filter range
/// (PacketEn=0) is followed by a FUP; libipt told the part skips it, not told it takes the FUP as
/// where tracing went on and leaves the flow. The FUP leaves no last IP (libipt's workaround
/// skips it without taking its IP): told the part, libipt reads the TIP.PGE after it right.
#[test]
fn cp6_apl12_fup_after_ovf_outside_the_filter_needs_the_workaround() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 20000, 3);
    let cfg = dir.path().join("ovf.toml");
    let at: Vec<String> = (300..13000).step_by(437).map(|i| i.to_string()).collect();
    fs::write(&cfg, format!("overflow_at = [{}]\n", at.join(", "))).unwrap();
    let run = |name: &str, errata: &str| goldmont(dir.path(), name, &input, &cfg, errata, &FILTER);
    let out = run("apl12", "none,APL12");
    let p = packets(&out);
    // The FUPs right after an OVF whose next TIP-class packet is a TIP.PGE: tracing was off.
    let spurious = (1..p.len())
        .filter(|&i| p[i - 1] == "ovf" && p[i].starts_with("fup"))
        .filter_map(|i| p[i + 1..].iter().find(|q| q.starts_with("tip")))
        .filter(|q| q.starts_with("tip.pge"))
        .count();
    assert!(spurious >= 5, "{spurious} FUPs after OVF outside the filter");
    let untold = needs_the_workaround(&out);
    assert!(!verify(&out, &untold).0);
    let plain = run("plain", "none");
    assert!(verify(&plain, &libipt_decode::decode_case_as(&plain, None)).0);
}

/// CP7: errata a profile carries but ptemu does not produce change no byte.
#[test]
fn cp7_carried_errata_change_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 4000, 4);
    for cpu in CpuProfile::NAMES {
        let carried = CpuProfile::named(cpu).unwrap().errata - Errata::MODELED;
        if carried.is_empty() {
            continue;
        }
        let carried: Vec<String> = carried.ids().iter().map(|id| format!("-{id}")).collect();
        let carried = carried.join(",");
        let with = simulate(dir.path(), &format!("{cpu}-with"), &input, &["--cpu", cpu]);
        let without = simulate(
            dir.path(),
            &format!("{cpu}-without"),
            &input,
            &["--cpu", cpu, "--errata", &carried],
        );
        assert_eq!(
            fs::read(with.join("trace.pt")).unwrap(),
            fs::read(without.join("trace.pt")).unwrap(),
            "{cpu}"
        );
        assert_ne!(report(&with)["errata"], report(&without)["errata"]);
    }
}
