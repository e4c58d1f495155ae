//! `ptemu simulate --perf-data` (spec/perf-data.md) read by Linux perf's own Intel PT decoder
//! (Debian's `linux-perf`, which `cargo xtask test` installs): the second, independent oracle.

mod common;

use common::cli::{self, gen_penn, ptemu, s, text};
use common::insn;
use common::query::Timing;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SJENG: &str = "tests/data/penn/sjeng-1K.trace";
const GCC: &str = "tests/data/penn/gcc-1K.trace";

fn perf(dir: &Path, args: &[&str]) -> Output {
    Command::new("perf")
        .args(["script", "-i"])
        .arg(dir.join("perf.data"))
        .arg("--symfs")
        .arg(dir)
        .args(args)
        .output()
        .expect("perf (Debian's linux-perf; cargo xtask test installs it)")
}

/// What `perf report --header-only` says of DIR/perf.data (its warnings fail the test).
fn perf_header(dir: &Path) -> String {
    let o = Command::new("perf")
        .args(["report", "--header-only", "-i"])
        .arg(dir.join("perf.data"))
        .output()
        .expect("perf (Debian's linux-perf; cargo xtask test installs it)");
    assert!(
        !text(&o.stderr).to_lowercase().contains("warning"),
        "{}",
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// `ptemu simulate INPUT --perf-data` into a fresh directory.
fn simulate(root: &Path, name: &str, input: &str, extra: &[&str]) -> PathBuf {
    let out = root.join(name);
    let o = ptemu(
        &[
            &[
                "simulate",
                input,
                "--format",
                "penn",
                "--perf-data",
                "-q",
                "--out",
                s(&out),
            ],
            extra,
        ]
        .concat(),
    );
    assert!(o.status.success(), "{extra:?}: {}", text(&o.stderr));
    out
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

/// perf's instruction IPs and its error lines.
fn perf_ips(dir: &Path) -> (Vec<u64>, Vec<String>) {
    let o = perf(dir, &["--itrace=i0nse", "-F", "ip"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let errors = out
        .lines()
        .filter(|l| l.contains("trace error"))
        .map(str::to_owned)
        .collect();
    let ips = out
        .lines()
        .filter(|l| !l.contains("trace error"))
        .map(hex)
        .collect();
    (ips, errors)
}

fn truth_ips(dir: &Path) -> Vec<u64> {
    common::cli::truth_jsonl(dir)
        .lines()
        .filter(|l| l.contains("\"k\":\"insn\""))
        .map(|l| {
            let j: Value = serde_json::from_str(l).unwrap();
            hex(j["ip"].as_str().unwrap())
        })
        .collect()
}

fn generated(root: &Path, seed: u64) -> String {
    s(&gen_penn(root, 150_000, seed)).to_owned()
}

/// PD1: perf script lists exactly the input's instructions, with no instruction trace error,
/// for the bundled samples and generated traces (recursion past 64 calls) under RET compression
/// on and off, PSBFreq, TSC/MTC/CYC, TSC off, the three packet styles, AUX data in one buffer
/// per 4 KiB region (one AUXTRACE record per PMI, counted; also with PMIs at offsets that are
/// not multiples of 8), and an IP filter (its `filter` string).
#[test]
fn pd1_pd5_pd6_perf_script_gives_exactly_the_input_instructions() {
    let dir = tempfile::tempdir().unwrap();
    let gen = generated(dir.path(), 3);
    for (n, input) in [SJENG, GCC, gen.as_str()].iter().enumerate() {
        // An IP filter over the first 12 KiB of the input's code.
        let clean = simulate(dir.path(), &format!("base-{n}"), input, &[]);
        let image: Value = serde_json::from_slice(&fs::read(clean.join("image.json")).unwrap()).unwrap();
        let base = cli::hex(&image["base"]);
        let (a, b) = (
            format!("ADDR0_A={base:#x}"),
            format!("ADDR0_B={:#x}", base + 0x2fff),
        );
        let settings: &[&[&str]] = &[
            &[],
            &["--ctl", "DisRETC=1"],
            &[
                "--ctl",
                "PSBFreq=1",
                "--ctl",
                "MTCEn=1",
                "--ctl",
                "CYCEn=1",
                "--ctl",
                "MTCFreq=3",
            ],
            &["--ctl", "TSCEn=0"],
            &["--cpu", "skylake"],
            &["--cpu", "generic-max"],
            &["--layout", "src/simulate/gap-layout.toml"],
            &["--layout", "tests/data/perf/unaligned-layout.toml"],
            &["--ctl", "ADDR0_CFG=1", "--msr", &a, "--msr", &b],
        ];
        for (k, extra) in settings.iter().enumerate() {
            let out = simulate(dir.path(), &format!("run-{n}-{k}"), input, extra);
            // One AUX buffer per PMI, and one for the rest.
            let pmis = fs::read_to_string(out.join("events.jsonl"))
                .unwrap()
                .matches("\"pmi\"")
                .count();
            let dump = perf(&out, &["-D"]);
            let buffers = text(&dump.stdout).matches("PERF_RECORD_AUXTRACE ").count();
            assert_eq!(buffers, pmis + 1, "{input} {extra:?}");
            let (ips, errors) = perf_ips(&out);
            assert!(errors.is_empty(), "{input} {extra:?}: {errors:?}");
            let want = truth_ips(&out);
            assert!(want.len() > 50, "{input} {extra:?}: {} instructions", want.len());
            if let Some(i) = (0..ips.len().min(want.len())).find(|&i| ips[i] != want[i]) {
                panic!(
                    "{input} {extra:?}: instruction {i}: perf {:#x}, traced {:#x}",
                    ips[i], want[i]
                );
            }
            assert_eq!(ips.len(), want.len(), "{input} {extra:?}");
        }
    }
}

/// Whether an instruction flow shows a taken branch from `a` to `b`: the flow does not fall
/// through, or `a` is a CALL, JMP or RET (a call to the next instruction is one). A conditional
/// branch whose target is its fall-through looks the same taken or not.
fn visible(image: &[u8], base: u64, a: u64, b: u64) -> bool {
    let mut d = iced_x86::Decoder::with_ip(
        64,
        &image[(a - base) as usize..],
        a,
        iced_x86::DecoderOptions::NONE,
    );
    let i = d.decode();
    b != a + i.len() as u64
        || !matches!(
            i.flow_control(),
            iced_x86::FlowControl::Next | iced_x86::FlowControl::ConditionalBranch
        )
}

/// The taken branches of libipt's instruction flow: consecutive IPs where the second is not the
/// first's fall-through, or the first is a CALL, JMP or RET (iced-x86 decodes image.bin).
fn libipt_branches(dir: &Path) -> Vec<(u64, u64)> {
    let json: Value = serde_json::from_slice(&fs::read(dir.join("image.json")).unwrap()).unwrap();
    let base = cli::hex(&json["base"]);
    let image = fs::read(dir.join("image.bin")).unwrap();
    let clock = ptemu::TracerConfig::default().clock;
    let t = Timing {
        mtc_freq: 3,
        nom_freq: clock.nominal_ratio,
        art_eax: 1,
        art_ebx: clock.tsc_per_art,
    };
    let flow = insn::decode_case(
        &fs::read(dir.join("trace.pt")).unwrap(),
        &dir.join("image.bin"),
        base,
        t,
        dir,
    );
    assert_eq!(flow.error, None);
    flow.ips
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|&(a, b)| visible(&image, base, a, b))
        .collect()
}

/// PD2: `perf script --itrace=b` lists the same taken branches as libipt's instruction flow
/// (trace begin and end, with a zero side, aside, and taken conditional branches to their own
/// fall-through, which an instruction flow cannot show).
#[test]
fn pd2_perf_lists_the_branches_libipt_follows() {
    let dir = tempfile::tempdir().unwrap();
    let gen = generated(dir.path(), 5);
    for (n, (input, extra)) in [
        (SJENG, &[][..]),
        (gen.as_str(), &[][..]),
        (gen.as_str(), &["--ctl", "DisRETC=1"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let out = simulate(dir.path(), &format!("b-{n}"), input, extra);
        let json: Value = serde_json::from_slice(&fs::read(out.join("image.json")).unwrap()).unwrap();
        let base = cli::hex(&json["base"]);
        let image = fs::read(out.join("image.bin")).unwrap();
        let o = perf(&out, &["--itrace=b", "-F", "hw:ip,addr"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let perf: Vec<(u64, u64)> = text(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once("=>"))
            .map(|(a, b)| (hex(a), hex(b)))
            .filter(|&(a, b)| a != 0 && b != 0)
            .filter(|&(a, b)| visible(&image, base, a, b))
            .collect();
        let libipt = libipt_branches(&out);
        assert!(libipt.len() > 50, "{input}: {} branches", libipt.len());
        if let Some(i) = (0..perf.len().min(libipt.len())).find(|&i| perf[i] != libipt[i]) {
            panic!(
                "{input} {extra:?}: branch {i}: perf {:x?}, libipt {:x?} (of {} and {})",
                perf[i],
                libipt[i],
                perf.len(),
                libipt.len()
            );
        }
        assert_eq!(perf.len(), libipt.len(), "{input} {extra:?}");
    }
}

/// PD3: `perf report --stdio` and `perf script` read the file without a warning.
#[test]
fn pd3_perf_reads_the_file_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let out = simulate(dir.path(), "w", SJENG, &[]);
    let report = Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(out.join("perf.data"))
        .arg("--symfs")
        .arg(&out)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    let script = perf(&out, &["--itrace=i0nse", "-F", "ip"]);
    for (what, o) in [("report", &report), ("script", &script)] {
        let err = text(&o.stderr).to_lowercase();
        assert!(
            !err.contains("warning") && !err.contains("error"),
            "perf {what}: {err}"
        );
    }
    // The command the summary and report.json give is the one that decodes it.
    let r: Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
    let cmd = r["perf"].as_str().unwrap();
    let ran = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        ran.status.success() && text(&ran.stdout).lines().count() > 100,
        "{cmd}"
    );
    // A later run without a code image leaves no image.elf from this one.
    let o = ptemu(&[
        "simulate",
        SJENG,
        "--format",
        "penn",
        "--perf-data",
        "--no-image",
        "-q",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!out.join("image.elf").exists());
    assert!(
        cmd.starts_with("perf script -i /")
            && cmd.contains("perf.data --symfs /")
            && cmd.ends_with(" --itrace=i0nse -F ip"),
        "{cmd}"
    );
}

/// The AUXTRACE records of `dir/perf.data` as perf lists them (`perf script -D`): each one's
/// stream offset and size.
fn aux_records(dir: &Path) -> Vec<(u64, u64)> {
    let dump = perf(dir, &["-D"]);
    let field = |l: &str, name: &str| {
        // perf prints hex with 0x, and a zero as "0".
        let v = l.split(name).nth(1).unwrap().split_whitespace().next().unwrap();
        u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
    };
    text(&dump.stdout)
        .lines()
        .filter(|l| l.contains("PERF_RECORD_AUXTRACE "))
        .map(|l| (field(l, "offset: "), field(l, "size: ")))
        .collect()
}

/// The offset of every packet of `dir/trace.pt`, as `ptemu dump` lists them.
fn packet_starts(dir: &Path) -> Vec<u64> {
    let o = ptemu(&["dump", s(&dir.join("trace.pt"))]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap())
        .collect()
}

/// PD13 (issue 54 §6): an AUX buffer ends where a packet ends, as a driver that stops tracing
/// before it takes the data gets them: each PMI's cut goes back to the start of the packet that
/// holds it. Unpacked output (`--packing none`) through 4 KiB regions whose PMIs fall at offsets
/// that are not multiples of 8: some fall inside packets (the test can fail), every record
/// starts at a packet, the one that held its PMI, and perf gives exactly the instructions.
#[test]
fn pd13_aux_buffers_end_where_packets_end() {
    let dir = tempfile::tempdir().unwrap();
    let input = cli::generate(dir.path(), "penn", 1_000_000, 3).0;
    let out = simulate(
        dir.path(),
        "cut",
        s(&input),
        &[
            "--packing",
            "none",
            "--layout",
            "tests/data/perf/unaligned-layout.toml",
        ],
    );
    let pmis: Vec<u64> = fs::read_to_string(out.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"pmi\""))
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["stream_offset"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let starts = packet_starts(&out);
    let start_of = |at: u64| starts[starts.partition_point(|&p| p <= at) - 1];
    let inside = pmis.iter().filter(|&&c| start_of(c) != c).count();
    assert!(
        pmis.len() > 10 && inside >= 3,
        "{} PMIs, {inside} inside a packet",
        pmis.len()
    );
    let records = aux_records(&out);
    assert_eq!(records.len(), pmis.len() + 1);
    for (k, &(offset, _)) in records.iter().enumerate().skip(1) {
        assert_eq!(
            offset,
            start_of(pmis[k - 1]),
            "record {k} starts at its PMI's packet"
        );
    }
    let (ips, errors) = perf_ips(&out);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(ips, truth_ips(&out));
}

/// PD13: the corpus case `aux-split` cuts its AUX buffers inside a PSB, a FUP, a TIP and a TSC
/// on purpose, at the offsets `case.json`'s `aux_cuts` gives, with no padding between them: the
/// records' bytes joined are `trace.pt`. perf 6.1 (64-bit) does not join a packet split across
/// buffers and reports errors there, while libipt, reading the whole stream, passes.
#[test]
fn pd13_the_aux_split_case_splits_packets_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("corpus");
    let o = ptemu(&["corpus", s(&root), "--perf-data", "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let case = root.join("aux-split");
    let json: Value = serde_json::from_slice(&fs::read(case.join("case.json")).unwrap()).unwrap();
    let cuts: Vec<(u64, String)> = json["aux_cuts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["offset"].as_u64().unwrap(),
                c["inside"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let kinds: Vec<&str> = cuts.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(kinds, ["psb", "fup", "tip", "tsc"]);
    let starts = packet_starts(&case);
    for (at, kind) in &cuts {
        assert!(
            starts.binary_search(at).is_err(),
            "the cut at {at} is inside a {kind}"
        );
    }
    let records = aux_records(&case);
    let offsets: Vec<u64> = records.iter().map(|r| r.0).collect();
    let want: Vec<u64> = std::iter::once(0).chain(cuts.iter().map(|c| c.0)).collect();
    assert_eq!(offsets, want);
    for k in 0..records.len() - 1 {
        assert_eq!(
            records[k].0 + records[k].1,
            records[k + 1].0,
            "no padding between records"
        );
    }
    let (_, errors) = perf_ips(&case);
    assert!(
        !errors.is_empty(),
        "perf 6.1 joined the split packets: PD13's note is stale"
    );
    let lines = common::harness::decode_case(&case);
    let v = cli::ptemu_stdin(&["verify", s(&case), "--ips", "-"], lines.as_bytes());
    assert!(v.status.success(), "libipt: {}", text(&v.stderr));
}

/// PD12 (issue 54 §4c): a case decodes wherever it is copied. perf.data names the code
/// `/image.elf`, found under `--symfs CASE`: a run moved after writing (with an IP filter,
/// whose string names the image too, PD6) gives perf exactly its instructions at the new place,
/// and the summary's command carries `--symfs DIR`.
#[test]
fn pd12_a_copied_case_decodes_with_its_symfs() {
    let dir = tempfile::tempdir().unwrap();
    let clean = simulate(dir.path(), "base", SJENG, &[]);
    let image: Value = serde_json::from_slice(&fs::read(clean.join("image.json")).unwrap()).unwrap();
    let base = cli::hex(&image["base"]);
    let (a, b) = (
        format!("ADDR0_A={base:#x}"),
        format!("ADDR0_B={:#x}", base + 0x2fff),
    );
    for (name, extra) in [
        ("plain", &[][..]),
        (
            "filtered",
            &["--ctl", "ADDR0_CFG=1", "--msr", &a, "--msr", &b][..],
        ),
    ] {
        let written = simulate(dir.path(), name, SJENG, extra);
        let r: Value = serde_json::from_slice(&fs::read(written.join("report.json")).unwrap()).unwrap();
        let cmd = r["perf"].as_str().unwrap().to_owned();
        assert!(cmd.contains(&format!("--symfs {}", written.display())), "{cmd}");
        let moved = dir.path().join(format!("{name}-moved"));
        fs::rename(&written, &moved).unwrap();
        assert!(!written.exists());
        let (ips, errors) = perf_ips(&moved);
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let want = truth_ips(&moved);
        assert!(want.len() > 50, "{name}");
        assert_eq!(ips, want, "{name}: perf's instructions at the new place");
        // Without --symfs perf looks for /image.elf and fails: the option is what finds it.
        let o = Command::new("perf")
            .args(["script", "-i"])
            .arg(moved.join("perf.data"))
            .args(["--itrace=i0nse", "-F", "ip"])
            .output()
            .unwrap();
        assert!(text(&o.stdout).contains("Failed to get instruction"), "{name}");
    }
}

/// PD9, CP8: the file names the profile's CPU as perf's `HEADER_CPUID` feature, which perf reads
/// (`perf report --header-only`) and chooses its per-model workarounds by.
#[test]
fn pd9_cp8_perf_reads_the_profiles_cpu() {
    let dir = tempfile::tempdir().unwrap();
    for (cpu, id) in [
        ("goldmont", "GenuineIntel,6,92,9"),
        ("skylake", "GenuineIntel,6,94,3"),
    ] {
        let out = simulate(dir.path(), cpu, SJENG, &["--cpu", cpu]);
        let r: Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
        let sig = &r["cpu_signature"];
        assert_eq!(
            format!(
                "GenuineIntel,{},{},{}",
                sig["family"], sig["model"], sig["stepping"]
            ),
            id,
            "{cpu}"
        );
        let header = perf_header(&out);
        assert!(
            header.lines().any(|l| l == format!("# cpuid : {id}")),
            "{cpu}: {header}"
        );
    }
}

/// PD10: perf names the event (`perf evlist`: `intel_pt//u`, not "unknown attr type: 8"), knows
/// the file holds an AUX area trace (`perf script --itrace=b -F ip,addr` lists the branches
/// instead of refusing the field), and reads the AUXTRACE index as it reads perf record's.
#[test]
fn pd10_perf_names_the_event_and_takes_fields() {
    let dir = tempfile::tempdir().unwrap();
    let out = simulate(dir.path(), "ev", SJENG, &[]);
    let evlist = Command::new("perf")
        .args(["evlist", "-i"])
        .arg(out.join("perf.data"))
        .output()
        .unwrap();
    assert_eq!(
        text(&evlist.stdout).trim(),
        "intel_pt//u",
        "{}",
        text(&evlist.stderr)
    );
    assert!(
        !text(&evlist.stderr).contains("unknown attr type"),
        "{}",
        text(&evlist.stderr)
    );
    let b = perf(&out, &["--itrace=b", "-F", "ip,addr"]);
    assert!(b.status.success(), "{}", text(&b.stderr));
    let lines = text(&b.stdout);
    // Each taken branch of the truth, and the enable (`0 => first IP`) and the disable.
    let truth = ptemu(&["truth", "dump", s(&out), "-o", "-"]);
    let taken = text(&truth.stdout).matches("\"taken\":true").count();
    let arrows = lines.lines().filter(|l| l.contains("=>")).count();
    assert!(
        taken > 50 && arrows == taken + 2,
        "{taken} taken, {arrows} lines: {lines}"
    );
    let h = perf_header(&out);
    assert!(
        h.contains("# pmu mappings: intel_pt = 8") && h.contains("name = intel_pt//u"),
        "{h}"
    );
    assert!(
        !h.contains("missing features: AUXTRACE") && !h.contains(" AUXTRACE "),
        "{h}"
    );
}

/// PD3: an input without instruction bytes (BYU addresses) gives perf.data no code image, and
/// the summary says perf decodes no instruction from it instead of printing a command that
/// lists only errors.
#[test]
fn pd3_without_a_code_image_the_summary_says_perf_decodes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("b.byu");
    let o = ptemu(&[
        "gen",
        "--format",
        "byu",
        "--records",
        "3000",
        "--seed",
        "1",
        "-o",
        s(&input),
        "-q",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = dir.path().join("o");
    let o = ptemu(&[
        "simulate",
        s(&input),
        "--format",
        "byu",
        "--perf-data",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("perf.data has no code image: byu input has no instruction bytes"),
        "{stdout}"
    );
    assert!(!stdout.contains("decode with Linux perf"), "{stdout}");
    assert!(!out.join("image.elf").exists());
}

/// PD11: image.elf names the functions the code calls (`fn_<address>`), so `perf report` names the
/// traced code by function, as it does a real program's (sampling every 100 instructions).
#[test]
fn pd11_perf_report_names_the_traced_code_by_function() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_penn(dir.path(), 20_000, 5);
    let out = simulate(dir.path(), "sym", s(&input), &[]);
    let o = Command::new("perf")
        .args(["report", "--stdio", "--itrace=i100i", "-i"])
        .arg(out.join("perf.data"))
        .arg("--symfs")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report = text(&o.stdout);
    let rows: Vec<&str> = report.lines().filter(|l| l.contains("image.elf")).collect();
    let named = rows.iter().filter(|l| l.contains("[.] fn_")).count();
    assert!(rows.len() > 3 && named == rows.len(), "{report}");
}

/// PD4: on wrapped and STOPped runs perf's output (its errors included) passes `ptemu verify`:
/// it gives the recoverable part of the truth and nothing else.
#[test]
fn pd4_wrapped_and_stopped_runs_give_the_recoverable_truth() {
    let dir = tempfile::tempdir().unwrap();
    let gen = generated(dir.path(), 7);
    for fault in ["wrap@4096", "wrap@8192", "stop@4096", "stop@8192"] {
        let out = simulate(dir.path(), fault, &gen, &["--fault", fault]);
        let o = perf(&out, &["--itrace=i0nse", "-F", "ip"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let lines = out.join("perf.txt");
        fs::write(&lines, &o.stdout).unwrap();
        let v = ptemu(&["verify", s(&out), "--ips", s(&lines)]);
        assert!(
            v.status.success(),
            "{fault}: {}{}",
            text(&v.stdout),
            text(&v.stderr)
        );
    }
}
