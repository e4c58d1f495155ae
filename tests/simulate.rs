//! `ptemu simulate` end to end (spec/simulate.md): the CLI's `trace.pt` and `image.bin` replayed
//! by libipt's instruction-flow decoder, every format read back by libipt's packet decoder, the
//! region files against `trace.pt` (stitched, and through wraps), the report's counts against
//! independently derived figures, `--ctl` and bad input (exit 2, position, no partial files).

mod common;

use common::cli::{generate, hex, ptemu, ptemu_stdin, s, text};
use common::insn::{self, expected_pcs, macro_ops};
use common::query::Timing;
use proptest::prelude::*;
use serde_json::Value;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

const SJENG: &str = "tests/data/penn/sjeng-1K.trace";
const GCC: &str = "tests/data/penn/gcc-1K.trace";
const BAD_PENN: &str = "tests/data/penn/CSC656-test-handedited.trace";
const GEM5_DEP: &str = "tests/data/gem5/system.cpu.traceListener.deptrace.proto.gz";
const GEM5_FETCH: &str = "tests/data/gem5/system.cpu.traceListener.fetchtrace.proto.gz";
const BYU_P2: &str = "tests/data/byu-p2/trace_small.tr";

/// One successful `ptemu simulate` run into a fresh directory.
struct Run {
    _dir: tempfile::TempDir,
    out: PathBuf,
    report: Value,
    trace: Vec<u8>,
    stdout: String,
}

impl Run {
    fn stat(&self, key: &str) -> u64 {
        self.report["stats"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("stats.{key} in {}", self.report))
    }

    fn packets(&self, name: &str) -> u64 {
        self.report["stats"]["packets"][name].as_u64().unwrap_or(0)
    }
}

fn simulate(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = ptemu(&[&["simulate", "--out", s(&out)], args].concat());
    assert!(o.status.success(), "ptemu simulate {args:?}: {}", text(&o.stderr));
    let report = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
    let trace = fs::read(out.join("trace.pt")).unwrap();
    Run {
        _dir: dir,
        out,
        report,
        trace,
        stdout: text(&o.stdout),
    }
}

fn timing() -> Timing {
    let clock = ptemu::TracerConfig::default().clock;
    Timing {
        mtc_freq: 3,
        nom_freq: clock.nominal_ratio,
        art_eax: 1,
        art_ebx: clock.tsc_per_art,
    }
}

/// libipt's instruction flow over DIR/trace.pt and DIR/image.bin (at image.json's base) must be
/// the trace's macro-op PCs, exactly; returns how many instructions it decoded.
fn replays(run: &Run, penn_text: &[u8]) -> usize {
    let json: Value = serde_json::from_slice(&fs::read(run.out.join("image.json")).unwrap()).unwrap();
    let base = hex(&json["base"]);
    assert_eq!(hex(&run.report["image"]["base"]), base);
    let flow = insn::decode_case(&run.trace, &run.out.join("image.bin"), base, timing(), &run.out);
    let want = expected_pcs(&macro_ops(penn_text));
    if let Some(n) = (0..want.len().min(flow.ips.len())).find(|&n| want[n] != flow.ips[n]) {
        panic!(
            "instruction {n}: decoded {:#x}, traced {:#x}",
            flow.ips[n], want[n]
        );
    }
    assert_eq!(
        flow.error,
        None,
        "libipt error after {} instructions",
        flow.ips.len()
    );
    assert_eq!(flow.ips.len(), want.len());
    // The command printed and reported is the one that replays these files.
    let ptxed = run.report["ptxed"].as_str().unwrap();
    let tail = format!(
        "--pt {} --raw {}:{base:#x}",
        s(&run.out.join("trace.pt")),
        s(&run.out.join("image.bin"))
    );
    assert!(
        ptxed.starts_with("ptxed --insn-decoder") && ptxed.ends_with(&tail),
        "{ptxed}"
    );
    assert!(run.stdout.contains(ptxed), "{}", run.stdout);
    // CP1: ptxed is told the part, so it applies that part's errata workarounds.
    if let Some((f, m, st)) = common::harness::case_cpu(&run.out) {
        assert!(ptxed.contains(&format!("--cpu {f}/{m}/{st} ")), "{ptxed}");
    }
    flow.ips.len()
}

/// Four 4 KiB ToPA regions (INT on two), END back to the table; the walk starts at `offset` in
/// the first region, so even a short trace crosses a region boundary.
fn small_regions_layout(dir: &Path, offset: u32, regions: usize) -> PathBuf {
    let mut entries = String::new();
    for i in 0..regions {
        entries.push_str(&format!(
            "  {{ region = {:#x}, size = \"4K\", int = {} }},\n",
            0x100000 + 0x1000 * i,
            i % 2 == 0
        ));
    }
    let text = format!(
        "cpu = \"alderlake\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\nmask_ptrs = \"{:#x}\"\n\
         [[table]]\nbase = 0x10000\nentries = [\n{entries}  {{ end = 0x10000 }},\n]\n",
        (u64::from(offset) << 32) | 0x7f
    );
    let path = dir.join(format!("layout-{offset:x}-{regions}.toml"));
    fs::write(&path, text).unwrap();
    path
}

/// Checks the region files of a [`small_regions_layout`] run against `trace.pt`: stream byte k
/// went to ring position (offset + k) mod (regions × 4 KiB), so each position holds the last
/// byte written there (0 if none), and a region never reached has no file. Returns whether the
/// output wrapped.
fn regions_match_trace(run: &Run, offset: u64, regions: u64) -> bool {
    let ring = regions * 0x1000;
    let n = run.trace.len() as u64;
    assert_eq!(run.stat("bytes_written"), n);
    let mut mem = vec![None; ring as usize];
    for (k, &b) in run.trace.iter().enumerate() {
        mem[((offset + k as u64) % ring) as usize] = Some(b);
    }
    for r in 0..regions {
        let file = run.out.join(format!("regions/{:#x}.bin", 0x100000 + 0x1000 * r));
        let slice = &mem[(r * 0x1000) as usize..((r + 1) * 0x1000) as usize];
        if slice.iter().all(Option::is_none) {
            assert!(!file.exists(), "{} was never reached", file.display());
            continue;
        }
        let got = fs::read(&file).unwrap();
        let want: Vec<u8> = slice.iter().map(|b| b.unwrap_or(0)).collect();
        assert!(got == want, "{} differs from trace.pt", file.display());
    }
    let wrapped = offset + n > ring;
    if !wrapped {
        // Nothing wrapped: the region files stitched in ToPA order, from the start offset, are
        // trace.pt.
        let mut stitched = Vec::new();
        for r in 0..regions {
            if let Ok(b) = fs::read(run.out.join(format!("regions/{:#x}.bin", 0x100000 + 0x1000 * r))) {
                stitched.extend(b);
            }
        }
        assert_eq!(&stitched[offset as usize..(offset + n) as usize], &run.trace[..]);
    }
    wrapped
}

// ---------------------------------------------------------------------------------------------
// Replay of the Penn samples through the CLI

#[test]
fn sim1_sim3_samples_replay_with_ret_compression_and_the_report_counts_them() {
    for (path, insns, cond) in [(SJENG, 750, 148), (GCC, 754, 157)] {
        let r = simulate(&[path, "--format", "penn"]);
        assert_eq!(replays(&r, &fs::read(path).unwrap()), insns);
        // Counts derived independently (awk over the samples, tests/sources_penn.rs).
        assert_eq!((r.stat("records"), r.stat("instructions")), (1000, insns as u64));
        assert_eq!(
            r.report["input"]["counts"]["macro_ops"].as_u64(),
            Some(insns as u64)
        );
        let compressed = r.stat("compressed_returns");
        assert!(compressed > 0);
        assert_eq!(r.stat("tnt_bits"), cond + compressed);
        assert_eq!(
            (r.stat("psbs"), r.packets("psb"), r.packets("tip.pge")),
            (1, 1, 1)
        );
        assert_eq!(r.stat("trace_bytes"), r.trace.len() as u64);
        let bpi = r.report["stats"]["bytes_per_instruction"].as_f64().unwrap();
        assert!((bpi - r.stat("bytes_in") as f64 / insns as f64).abs() < 1e-9);
        assert_eq!(
            r.report["ctl"]["fields"],
            "TraceEn=1 User=1 ToPA=1 TSCEn=1 BranchEn=1"
        );
    }
}

#[test]
fn sim3_samples_replay_without_ret_compression() {
    for (path, cond, tips) in [(SJENG, 148, 10), (GCC, 157, 10)] {
        let r = simulate(&[path, "--format", "penn", "--ctl", "DisRETC=1"]);
        replays(&r, &fs::read(path).unwrap());
        // Without compression: a TNT bit per conditional branch, a TIP per indirect branch and
        // return (sjeng 2 + 8, gcc 1 + 9).
        assert_eq!(
            (r.stat("tnt_bits"), r.stat("compressed_returns"), r.packets("tip")),
            (cond, 0, tips)
        );
    }
}

fn cycles_config(dir: &Path) -> PathBuf {
    let p = dir.join("tracer.toml");
    fs::write(&p, "cycles_per_instruction = 20\n").unwrap();
    p
}

#[test]
fn sim3_sim9_samples_replay_with_timing_packets_and_psb_every_2k() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cycles_config(dir.path());
    for path in [SJENG, GCC] {
        // With timing, PTWRITEs and 20 cycles per instruction the samples pass 2 KiB.
        let r = simulate(&[
            path,
            "--format",
            "penn",
            "--ctl",
            "PSBFreq=0",
            "--ctl",
            "mtcen=1",
            "--ctl",
            "MTCFreq=3",
            "--ctl",
            "CYCEn=1",
            "--ctl",
            "PTWEn=1",
            "--ctl",
            "FUPonPTW=1",
            "--tracer-config",
            s(&cfg),
        ]);
        replays(&r, &fs::read(path).unwrap());
        assert!(
            r.trace.len() > 2048 && r.stat("psbs") >= 2,
            "{}",
            r.report["stats"]
        );
        assert!(r.packets("mtc") > 0 && r.packets("cyc") > 0 && r.packets("ptw") > 50);
        assert!(r.report["ptxed"]
            .as_str()
            .unwrap()
            .contains("--mtc-freq 3 --nom-freq 24"));
    }
}

#[test]
fn sim7_sim8_samples_replay_through_a_multi_region_topa() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = cycles_config(dir.path());
    for path in [SJENG, GCC] {
        // Plain: 64 bytes before the first region boundary.
        let layout = small_regions_layout(dir.path(), 0xfc0, 4);
        let r = simulate(&[path, "--format", "penn", "--layout", s(&layout)]);
        replays(&r, &fs::read(path).unwrap());
        assert!(!regions_match_trace(&r, 0xfc0, 4));
        assert_eq!(fs::read_dir(r.out.join("regions")).unwrap().count(), 2);
        // With timing and PTWRITE (about 1.7 KiB), from 0xe00: a PMI as region 0 fills.
        let layout = small_regions_layout(dir.path(), 0xe00, 4);
        let r = simulate(&[
            path,
            "--format",
            "penn",
            "--layout",
            s(&layout),
            "--ctl",
            "PTWEn=1",
            "--ctl",
            "MTCEn=1",
            "--ctl",
            "MTCFreq=3",
            "--ctl",
            "CYCEn=1",
            "--tracer-config",
            s(&cfg),
        ]);
        replays(&r, &fs::read(path).unwrap());
        assert!(!regions_match_trace(&r, 0xe00, 4));
        assert!(r.stat("pmis") >= 1, "{}", r.report["events"]);
    }
}

#[test]
fn sim6_a_wrapped_buffer_still_gives_the_whole_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (gen, _) = generate(dir.path(), "penn", 60_000, 3);
    let layout = small_regions_layout(dir.path(), 0, 2);
    let r = simulate(&[
        s(&gen),
        "--format",
        "penn",
        "--layout",
        s(&layout),
        "--ctl",
        "PTWEn=1",
    ]);
    assert!(
        regions_match_trace(&r, 0, 2),
        "8 KiB must wrap: {} bytes",
        r.trace.len()
    );
    // Region 0 has INT: a PMI each time the walk fills it.
    assert!(r.stat("pmis") >= 2, "{}", r.report["stats"]);
    replays(&r, &fs::read(&gen).unwrap());
}

/// SIM2, T8 (issue 54 §3): the default layout suits every CPU profile: its walk has no
/// operational error and wraps forever (a ring of four regions where ToPA takes many output
/// entries, one region where it takes one: Broadwell). A Broadwell run of more than 1 MiB of
/// trace, which the four-region ring stopped with an operational error at 1 MiB, keeps every
/// byte.
#[test]
fn sim2_t8_the_default_layout_suits_every_cpu_profile() {
    for name in ptemu::regs::CpuProfile::NAMES {
        let cpu = ptemu::regs::CpuProfile::named(name).unwrap();
        let layout = ptemu::simulate::default_layout_for(&cpu);
        let check = ptemu::layout::check(&layout);
        assert!(check.is_ok(), "{name}: {:?} {:?}", check.faults, check.violations);
        assert_eq!(layout.cpu, cpu, "{name}");
        assert_eq!(layout.tables.len(), 1, "{name}");
        // `ptemu layout default --cpu NAME` prints that layout.
        let o = ptemu(&["layout", "default", "--cpu", name]);
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        let printed =
            ptemu::layout::Layout::parse(std::path::Path::new("printed"), &text(&o.stdout)).unwrap();
        assert_eq!(printed.cpu, cpu, "{name}");
        assert_eq!(
            printed.tables[0].entries.len(),
            layout.tables[0].entries.len(),
            "{name}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (byu, _) = generate(dir.path(), "byu", 3_000_000, 1);
    let r = simulate(&[s(&byu), "--format", "byu", "--cpu", "broadwell", "--no-truth"]);
    assert!(
        r.trace.len() > 1 << 20,
        "{} bytes: more than a 1 MiB region",
        r.trace.len()
    );
    assert_eq!(
        r.report["event_counts"]["error"], 0,
        "{}",
        r.report["event_counts"]
    );
    assert_eq!(r.stat("bytes_lost"), 0, "{}", r.report["stats"]);
    assert_eq!(r.stat("bytes_written"), r.trace.len() as u64);
    assert!(r.stdout.contains("1 x 4M region"), "{}", r.stdout);
}

#[test]
fn sim2_the_bundled_sample_is_sjeng() {
    let bundled = simulate(&[]);
    let file = simulate(&[SJENG, "--format", "penn"]);
    assert_eq!(bundled.trace, file.trace);
    replays(&bundled, &fs::read(SJENG).unwrap());
    // The default CPU (alderlake) lays packets out and chooses them as hardware does
    // (spec/hardware.md), and the report says so; --packing none takes the PADs out.
    assert_eq!(bundled.report["cpu"], "alderlake");
    assert_eq!(bundled.report["packing"], "hardware");
    assert_eq!(bundled.report["style"], "icelake");
    let plain = simulate(&["--packing", "none"]);
    assert_eq!(plain.report["packing"], "none");
    assert!(plain.trace.len() < bundled.trace.len());
    replays(&plain, &fs::read(SJENG).unwrap());
    for want in [
        "packets: ",
        "bytes per instruction",
        "PMI",
        "IA32_RTIT_STATUS",
        "trace.pt",
        "ptxed --insn-decoder",
        // Issue 54 §4: perf, the libipt harness and verify are offered beside ptxed.
        "decode with Linux perf: add --perf-data",
        "--example libipt_decode -- ",
        "| ptemu verify ",
    ] {
        let shown = bundled.stdout.contains(want)
            || bundled
                .stdout
                .contains(&want.replace("bytes per instruction", "per instruction"));
        assert!(shown, "{want:?} missing from:\n{}", bundled.stdout);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    /// Generated traces (whose calls nest beyond the 64-entry return stack) replay through the
    /// CLI in every mode.
    #[test]
    fn sim3_generated_traces_replay_through_the_cli(seed in any::<u64>(), variant in 0usize..4) {
        let dir = tempfile::tempdir().unwrap();
        let (gen, _) = generate(dir.path(), "penn", 30_000, seed);
        let ctl: &[&str] = match variant {
            0 => &[],
            1 => &["--ctl", "DisRETC=1"],
            2 => &["--ctl", "MTCEn=1", "--ctl", "MTCFreq=3", "--ctl", "CYCEn=1"],
            _ => &["--ctl", "PTWEn=1", "--ctl", "FUPonPTW=1"],
        };
        let r = simulate(&[&[s(&gen), "--format", "penn"], ctl].concat());
        prop_assert!(replays(&r, &fs::read(&gen).unwrap()) > 10_000);
    }
}

// ---------------------------------------------------------------------------------------------
// Every format: libipt reads trace.pt, the regions hold it

fn packet_decodes(run: &Run) -> usize {
    let packets = common::libipt::decode(&run.trace)
        .unwrap_or_else(|e| panic!("libipt on {}: {e:?}", run.out.display()));
    assert!(packets.len() > 10);
    packets.len()
}

#[test]
fn sim1_sim6_sim7_every_format_sample_gives_a_trace_libipt_reads_and_the_regions_hold() {
    let dir = tempfile::tempdir().unwrap();
    let layout = small_regions_layout(dir.path(), 0, 16);
    let cases: [&[&str]; 4] = [
        &[SJENG, "--format", "penn", "--ctl", "PTWEn=1"],
        &[GCC, "--format", "penn", "--no-image"],
        &[
            GEM5_DEP,
            "--format",
            "gem5",
            "--fetch-trace",
            GEM5_FETCH,
            "--ctl",
            "PTWEn=1",
        ],
        &[BYU_P2, "--format", "byu-p2", "--ctl", "PTWEn=1"],
    ];
    for args in cases {
        let r = simulate(&[args, &["--layout", s(&layout)]].concat());
        packet_decodes(&r);
        regions_match_trace(&r, 0, 16);
        assert_eq!(
            r.out.join("image.bin").exists(),
            args[2] == "penn" && args.len() == 5
        );
    }
}

#[test]
fn sim6_sim7_every_format_generated_gives_a_trace_libipt_reads_and_the_regions_hold() {
    let dir = tempfile::tempdir().unwrap();
    let layout = small_regions_layout(dir.path(), 0, 32);
    let mut wrapped = 0;
    let mut whole = 0;
    for f in ["byu", "byu-p2", "penn", "kaplan", "gem5"] {
        let (file, fetch) = generate(dir.path(), f, 20_000, 5);
        let mut args = vec![
            s(&file),
            "--format",
            f,
            "--layout",
            s(&layout),
            "--ctl",
            "PTWEn=1",
        ];
        if f == "gem5" {
            args.extend(["--fetch-trace", s(&fetch)]);
        }
        let r = simulate(&args);
        packet_decodes(&r);
        assert!(r.stat("records") >= 20_000, "{f}");
        if regions_match_trace(&r, 0, 32) {
            wrapped += 1;
        } else {
            whole += 1;
        }
    }
    assert!(
        whole > 0,
        "at least one format must fit, to check plain stitching"
    );
    assert!(
        wrapped > 0,
        "at least one format must wrap, to check stitching across laps"
    );
}

#[test]
fn sim9_stdin_and_gzip_give_the_same_trace() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&fs::read(SJENG).unwrap()).unwrap();
    let gz = gz.finish().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = ptemu_stdin(
        &["simulate", "-", "--format", "penn", "-q", "--out", s(&out)],
        &gz,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "-q prints nothing");
    let file = simulate(&[SJENG, "--format", "penn"]);
    assert_eq!(fs::read(out.join("trace.pt")).unwrap(), file.trace);
    assert_eq!(
        fs::read(out.join("image.bin")).unwrap(),
        fs::read(file.out.join("image.bin")).unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// --ctl, --msr, --cpu

#[test]
fn sim5_ctl_raw_field_names_and_a_topa_override_are_honoured() {
    let a = simulate(&[SJENG, "--format", "penn", "--ctl", "raw=0x2d09"]);
    let b = simulate(&[SJENG, "--format", "penn", "--ctl", "DISRETC=true"]);
    assert_eq!(a.report["ctl"]["value"], "0x2d09");
    assert_eq!(a.report["ctl"], b.report["ctl"]);
    assert_eq!(a.trace, b.trace);
    // The MSR after TraceEn=0 is the written value without TraceEn.
    assert_eq!(a.report["msr"]["rtit_ctl"], "0x2d08");
    // ToPA=0 over the default ToPA layout is honoured: single-range output at OUTPUT_BASE
    // (0x10000, 128 bytes), the same packets.
    let range = simulate(&[SJENG, "--format", "penn", "--ctl", "ToPA=0", "--ctl", "DisRETC=1"]);
    assert_eq!(range.trace, b.trace);
    assert_eq!(range.report["msr"]["rtit_ctl"], "0x2c08");
    let regions: Vec<_> = fs::read_dir(range.out.join("regions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(regions, ["0x10000.bin"]);
}

#[test]
fn sim4_ip_filtering_through_msr_and_addr_cfg() {
    // ADDR0 covers nothing of the trace: with FilterEn nothing after the enable is traced.
    let r = simulate(&[
        SJENG,
        "--format",
        "penn",
        "--msr",
        "ADDR0_A=0x1000",
        "--msr",
        "ia32_rtit_addr0_b=0x1fff",
        "--ctl",
        "ADDR0_CFG=1",
    ]);
    assert_eq!(
        (r.packets("tip.pge"), r.stat("tnt_bits")),
        (0, 0),
        "{}",
        r.report["stats"]
    );
    assert_eq!(r.packets("psb"), 1);
}

fn fails(args: &[&str], out: &Path) -> String {
    let o = ptemu(&[&["simulate", "--out", s(out)], args].concat());
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    text(&o.stderr)
}

#[test]
fn sim4_sim5_an_illegal_ctl_is_a_gp_naming_its_rule_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // Skylake has no PTWRITE (CPUID.14H.0:EBX[4] = 0).
    let e = fails(
        &[SJENG, "--format", "penn", "--cpu", "skylake", "--ctl", "PTWEn=1"],
        &out,
    );
    assert!(
        e.contains("#GP") && e.contains("PTWEn") && e.contains("[rule M2]"),
        "{e}"
    );
    assert!(!out.exists(), "nothing may be left behind");
    // An MTCFreq the CPU does not list.
    let e = fails(
        &[
            SJENG,
            "--format",
            "penn",
            "--ctl",
            "MTCEn=1",
            "--ctl",
            "MTCFreq=15",
        ],
        &out,
    );
    assert!(
        e.contains("#GP") && e.contains("MTCFreq=15") && e.contains("[rule M"),
        "{e}"
    );
    for (bad, says) in [
        ("Trace=1", "not an IA32_RTIT_CTL field"),
        ("PSBFreq=16", "4 bit(s) wide"),
        ("OS", "expected KEY=VALUE"),
    ] {
        let e = fails(&[SJENG, "--format", "penn", "--ctl", bad], &out);
        assert!(e.contains(says), "{bad}: {e}");
    }
    let e = fails(&[SJENG, "--format", "penn", "--cpu", "pentium"], &out);
    assert!(e.contains("pentium") && e.contains("skylake"), "{e}");
    let e = fails(&[SJENG, "--format", "penn", "--msr", "ADDR9_A=1"], &out);
    assert!(e.contains("CR3_MATCH"), "{e}");
    assert!(!out.exists());
}

// ---------------------------------------------------------------------------------------------
// Bad input

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn sim10_bad_input_exits_2_with_its_position_and_leaves_no_partial_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let e = fails(&[BAD_PENN, "--format", "penn"], &out);
    assert!(e.contains("CSC656-test-handedited.trace: line 6"), "{e}");
    assert!(!out.exists(), "a directory the run created is removed again");

    // A truncated BYU record, a gem5 file with the wrong magic, a bad layout line.
    let (byu, _) = generate(dir.path(), "byu", 100, 1);
    let mut b = fs::read(&byu).unwrap();
    b.truncate(b.len() - 2);
    fs::write(&byu, b).unwrap();
    let e = fails(&[s(&byu), "--format", "byu"], &out);
    assert!(e.contains("byu-1.trace") && e.contains("record 100"), "{e}");
    let gem5 = dir.path().join("t.gem5");
    fs::write(&gem5, b"gemX\x00\x01\x02").unwrap();
    let e = fails(&[s(&gem5), "--format", "gem5"], &out);
    assert!(e.contains("t.gem5") && e.contains("magic"), "{e}");
    let layout = dir.path().join("bad.toml");
    fs::write(
        &layout,
        "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = \"zz\"\n",
    )
    .unwrap();
    let e = fails(&[SJENG, "--format", "penn", "--layout", s(&layout)], &out);
    assert!(e.contains("bad.toml:4"), "{e}");
    assert!(!out.exists());

    // Into a directory holding an earlier run: the failure changes nothing there.
    let good = simulate(&[SJENG, "--format", "penn"]);
    let before: Vec<_> = files_in(&good.out)
        .into_iter()
        .map(|f| (f.clone(), fs::read(good.out.join(&f)).ok()))
        .collect();
    fails(&[BAD_PENN, "--format", "penn"], &good.out);
    let after: Vec<_> = files_in(&good.out)
        .into_iter()
        .map(|f| (f.clone(), fs::read(good.out.join(&f)).ok()))
        .collect();
    assert_eq!(before, after);
    assert_eq!(
        files_in(&good.out),
        [
            ".ptemu-out",
            "events.jsonl",
            "image.bin",
            "image.json",
            "layout.svg",
            "regions",
            "report.json",
            "trace.pt",
            "truth.bin"
        ]
    );
}

#[test]
fn sim10_lenient_skips_the_bad_line_and_counts_it() {
    let r = simulate(&[BAD_PENN, "--format", "penn", "--lenient", "--no-image"]);
    assert!(r.stat("skipped_records") >= 1, "{}", r.report["stats"]);
    packet_decodes(&r);
}

#[test]
fn sim1_the_start_cpl_of_each_format_is_the_one_its_reader_reports() {
    use ptemu::sources::{self, Format, Input, ReadOptions};
    for f in Format::ALL {
        let (mut main, mut fetch) = (Vec::new(), Vec::new());
        sources::generate(
            f,
            200,
            1,
            &mut main,
            (f == Format::Gem5).then_some(&mut fetch as &mut dyn Write),
        )
        .unwrap();
        let fetch = (f == Format::Gem5).then(|| Input::from_bytes("f", fetch).unwrap());
        let src = sources::open_events(
            f,
            Input::from_bytes("m", main).unwrap(),
            fetch,
            ReadOptions::default(),
        )
        .unwrap();
        assert_eq!(src.start_state().cpl, f.start_cpl(), "{f}");
    }
}

/// Issue 28 item 8: an empty trace is a valid, empty run in every format that has no header
/// (exit 0, a warning, no instruction, no code image); gem5's files always start with its magic,
/// so a 0-byte file is refused as not a gem5 trace.
#[test]
fn an_empty_trace_is_an_empty_run_in_every_headerless_format() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.trace");
    fs::write(&empty, b"").unwrap();
    for format in ["penn", "byu", "byu-p2", "kaplan"] {
        let out = dir.path().join(format);
        let o = ptemu(&["simulate", s(&empty), "--format", format, "--out", s(&out), "-q"]);
        assert_eq!(o.status.code(), Some(0), "{format}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("no instructions"),
            "{format}: no warning"
        );
        let report: Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(report["stats"]["instructions"], 0, "{format}");
        assert!(!out.join("image.bin").exists(), "{format}: an image of nothing");
    }
    let o = ptemu(&[
        "simulate",
        s(&empty),
        "--format",
        "gem5",
        "--out",
        s(&dir.path().join("g")),
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("magic"));
}

/// Every file under `dir`, by its path relative to `dir`, with its bytes; report.json without its
/// `run` part (seconds and peak RSS of the process).
fn outputs(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
                continue;
            }
            let mut bytes = fs::read(&p).unwrap();
            if p.file_name().unwrap() == "report.json" {
                let mut v: Value = serde_json::from_slice(&bytes).unwrap();
                v.as_object_mut().unwrap().remove("run");
                bytes = serde_json::to_vec(&v).unwrap();
            }
            files.insert(p.strip_prefix(dir).unwrap().to_path_buf(), bytes);
        }
    }
    files
}

/// SIM18: reading on a second thread hands the tracer the same batches: every output file
/// (trace.pt, regions/, events.jsonl, truth.jsonl, image, perf.data, report.json but its timing)
/// is the same bytes with 1, 2 and 3 threads, for every format, with faults, a wrapping single
/// range, and a file long enough for many chunks (16 batches of 256 events each); a bad input
/// fails the same way.
#[test]
fn sim18_threads_give_the_same_bytes_and_the_same_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (byu, _) = generate(dir.path(), "byu", 200_000, 3);
    let (kaplan, _) = generate(dir.path(), "kaplan", 300, 3);
    let (penn, _) = generate(dir.path(), "penn", 150_000, 3);
    let cases: Vec<Vec<&str>> = vec![
        vec![SJENG, "--format", "penn", "--perf-data"],
        vec![
            s(&penn),
            "--format",
            "penn",
            "--fault",
            "ovf",
            "--fault",
            "corrupt",
            "--ctl",
            "PTWEn=1",
        ],
        vec![GEM5_DEP, "--format", "gem5", "--fetch-trace", GEM5_FETCH],
        vec![BYU_P2, "--format", "byu-p2", "--ctl", "ToPA=0"],
        vec![s(&byu), "--format", "byu", "--ctl", "PSBFreq=1"],
        vec![s(&kaplan), "--format", "kaplan"],
        vec![BAD_PENN, "--format", "penn", "--lenient", "--no-image"],
    ];
    for case in &cases {
        let mut runs = Vec::new();
        for threads in ["1", "2", "3"] {
            // One path for all (perf.data and the reports hold it); each run replaces the last.
            let out = dir.path().join("out");
            let o = ptemu(
                &[
                    &["simulate", "-q", "--out", s(&out), "--threads", threads],
                    &case[..],
                ]
                .concat(),
            );
            assert!(
                o.status.success(),
                "{case:?} --threads {threads}: {}",
                text(&o.stderr)
            );
            runs.push(outputs(&out));
        }
        assert!(runs[0].len() >= 5, "{case:?}: {:?}", runs[0].keys());
        for (k, r) in runs.iter().enumerate().skip(1) {
            assert_eq!(
                r.keys().collect::<Vec<_>>(),
                runs[0].keys().collect::<Vec<_>>(),
                "{case:?}"
            );
            for (path, bytes) in &runs[0] {
                assert!(
                    r[path] == *bytes,
                    "{case:?}: {} differs with {} threads",
                    path.display(),
                    k + 1
                );
            }
        }
    }
    let out = dir.path().join("bad");
    let one = ptemu(&[
        "simulate",
        BAD_PENN,
        "--format",
        "penn",
        "--threads",
        "1",
        "--out",
        s(&out),
    ]);
    let two = ptemu(&[
        "simulate",
        BAD_PENN,
        "--format",
        "penn",
        "--threads",
        "2",
        "--out",
        s(&out),
    ]);
    assert_eq!(one.status.code(), Some(2));
    assert_eq!(
        (two.status.code(), text(&two.stderr)),
        (Some(2), text(&one.stderr))
    );
    assert!(!out.exists());
}

/// A writer that always fails: a full disk under the truth spool.
struct Full;

impl Write for Full {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("disk full"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// SIM18, errors: a reading error after an error on the tracer's side (the truth spool's disk is
/// full) does not replace it with two threads: the whole batches before a bad line are traced
/// first, as on one thread, so both report the full disk; with a good input too.
#[test]
fn sim18_a_tracer_side_error_is_not_replaced_by_a_later_reading_error() {
    use ptemu::event_log::EventLog;
    use ptemu::simulate::{default_layout, run_recording, Options};
    use ptemu::sources::{Format, Input};
    let sjeng = fs::read(SJENG).unwrap();
    let mut bad = sjeng.clone();
    bad.extend_from_slice(b"this is not a micro-op\n");
    for bytes in [sjeng, bad] {
        let mut errors = Vec::new();
        for threads in [1, 2, 3] {
            let input = Input::from_bytes("t.trace", bytes.clone()).unwrap();
            let opts = Options::new(Format::Penn, default_layout()).with_threads(threads);
            let r = run_recording(
                &opts,
                input,
                None,
                Vec::new(),
                Some(&mut Full),
                EventLog::default(),
                &mut |_| {},
            );
            errors.push(r.map(drop).expect_err("the spool fails").to_string());
        }
        assert!(errors[0].contains("disk full"), "{errors:?}");
        assert!(errors.iter().all(|e| *e == errors[0]), "{errors:?}");
    }
}
