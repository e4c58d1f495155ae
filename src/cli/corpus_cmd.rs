//! `ptemu corpus DIR [--seed S] [--perf-data]`: a decoder test suite, one directory per case
//! (spec/truth.md).

use super::output::print;
use super::summary::replacing_line;
use super::Failure;
use ptemu::case::RunDir;
use ptemu::simulate::corpus::{self, CaseSummary};
use std::path::PathBuf;

/// The arguments of `ptemu corpus`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory: DIR/<case>/ for each case, DIR/manifest.json.
    dir: PathBuf,
    /// Seed of the generated input and of the fault positions (same seed, same bytes).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write each case's perf.data and image.elf, for Linux perf's decoder
    /// (spec/perf-data.md); perf finds image.elf with `--symfs CASE`, wherever the case is
    /// copied (PD12).
    #[arg(long)]
    perf_data: bool,
    /// Write into a DIR that holds files ptemu did not write: same-named ones are replaced,
    /// nothing else is touched (spec/simulate.md SIM22).
    #[arg(long)]
    force: bool,
    /// Print nothing on success.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: &Args) -> Result<(), Failure> {
    let out_error = |e: std::io::Error| Failure::input(format!("{}: {e}", a.dir.display()));
    let dir = RunDir::create(&a.dir, a.force).map_err(out_error)?;
    let input = corpus::input(a.seed);
    let specs = corpus::cases(a.seed);
    let mut cases: Vec<CaseSummary> = Vec::new();
    for spec in &specs {
        let final_dir = dir.final_path(&spec.name);
        let perf = a.perf_data.then_some(final_dir.as_path());
        let c = corpus::write_case_to(spec, &input, a.seed, &dir.staged(&spec.name), perf)
            .map_err(|e| Failure::input(format!("case {}: {e}", spec.name)))?;
        cases.push(c);
    }
    let manifest = serde_json::json!({
        "ptemu": env!("CARGO_PKG_VERSION"),
        "truth_version": ptemu::truth::VERSION,
        "seed": a.seed,
        "input": format!("ptemu gen --format penn --records {} --seed {}", corpus::RECORDS, a.seed),
        "perf_data": a.perf_data,
        "cases": cases,
    });
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| out_error(e.into()))? + "\n";
    std::fs::write(dir.staged("manifest.json"), text).map_err(out_error)?;
    let mut outputs: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    outputs.push("manifest.json");
    if !a.quiet {
        let mut o = String::new();
        outln!(
            o,
            "ptemu corpus: {} cases in {} (seed {})",
            cases.len(),
            a.dir.display(),
            a.seed
        );
        outln!(
            o,
            "  {:<22} {:<15} {:>7} {:>8} {:>6} {:>6} {:>6}  faults",
            "case",
            "fault",
            "bytes",
            "required",
            "opt",
            "lost",
            "undef"
        );
        for c in &cases {
            outln!(
                o,
                "  {:<22} {:<15} {:>7} {:>8} {:>6} {:>6} {:>6}  {}",
                c.name,
                c.fault,
                c.trace_bytes,
                c.truth.required,
                c.truth.optional,
                c.truth.lost,
                c.truth.undefined,
                c.faults.join(" ")
            );
        }
        outln!(
            o,
            "  each case: trace.pt, image.bin, image.json, truth.jsonl, case.json (with its ptxed command){}",
            if a.perf_data { ", perf.data, image.elf" } else { "" }
        );
        outln!(
            o,
            "  check a decoder: DECODER ... | ptemu verify {}/<case> --ips -",
            a.dir.display()
        );
        replacing_line(&mut o, &dir.replacing(&outputs, &[], &[]), &a.dir);
        print(&o)?;
    }
    // After the summary: one that cannot be written (a full stdout) leaves DIR as it was.
    dir.commit(&outputs, &[]).map_err(out_error)
}
