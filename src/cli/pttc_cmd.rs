//! `ptemu pttc FILE.ptt [-o DIR] [--cpu f/m[/s]|none]`: libipt's test compiler (spec/pttc.md).
//! Writes `<root>.bin`, `<root>.pt`, the `.exp` and the `.sb` files into DIR (default: the
//! current directory, as pttc), all or none (staged, then renamed into place), and lists them;
//! `--case` adds what makes DIR a case for `ptemu verify` (src/pttc/case.rs).

use super::output::{print, write_failure};
use super::run_dir::RunDir;
use super::Failure;
use ptemu::pttc::{self, Cpu, Options};
use std::path::PathBuf;

/// The arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The .ptt file.
    file: PathBuf,
    /// Where to write the files (default: the current directory, as pttc).
    #[arg(short, long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The CPU as family/model[/stepping] (numbers as C reads them: decimal, 0x hex, 0 octal), or `none`: adds `-cpu_<f>_<m>[_<s>]` to the
    /// .exp file names, as pttc's --cpu does.
    #[arg(long, value_name = "f/m[/s]|none")]
    cpu: Option<String>,
    /// Also write what makes DIR a case for `ptemu verify` and the libipt harness: trace.pt,
    /// image.bin, image.json, case.json and truth.jsonl (from the .exp(ptxed) section).
    #[arg(long)]
    case: bool,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<(), Failure> {
    let shown = args.file.display().to_string();
    let given = match args.cpu.as_deref() {
        None => None,
        Some("none") => Some(None),
        Some(c) => Some(Some(Cpu::parse(c).map_err(Failure::input)?)),
    };
    let cpu = given.flatten();
    let bytes =
        std::fs::read(&args.file).map_err(|e| Failure::input(format!("{shown}: cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        Failure::input(format!("{shown}:{line}: not UTF-8 text"))
    })?;
    let path = args.file.to_string_lossy();
    let compiled =
        pttc::compile(&path, &text, &Options { cpu }).map_err(|e| Failure::input(e.located(&shown)))?;
    let mut files = compiled.files.clone();
    if args.case {
        files.extend(
            pttc::case_files(&path, &text, &compiled, given)
                .map_err(|e| Failure::input(e.located(&shown)))?,
        );
    }
    // All files or none: staged in DIR, renamed into place together.
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    let shown_out = out.display().to_string();
    let dir = RunDir::create(&out).map_err(|e| write_failure(&shown_out, e))?;
    for f in &files {
        std::fs::write(dir.staged(&f.name), &f.bytes)
            .map_err(|e| write_failure(&format!("{shown_out}/{}", f.name), e))?;
    }
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    dir.commit(&names, &[])
        .map_err(|e| write_failure(&shown_out, e))?;
    let mut listing = String::new();
    for f in &files {
        outln!(listing, "{}", out.join(&f.name).display());
    }
    print(&listing)
}
