//! `ptemu pttc FILE.ptt [-o DIR] [--cpu f/m[/s]|none]`: libipt's test compiler (spec/pttc.md).
//! Writes `<root>.bin`, `<root>.pt`, the `.exp` and the `.sb` files into DIR (default: the
//! current directory, as pttc), each through a temporary name and a rename, and lists them.

use super::output::print;
use super::Failure;
use ptemu::pttc::{self, Cpu, Options};
use std::path::{Path, PathBuf};

/// The arguments.
#[derive(clap::Args)]
pub struct Args {
    /// The .ptt file.
    file: PathBuf,
    /// Where to write the files (default: the current directory, as pttc).
    #[arg(short, long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The CPU as family/model[/stepping] (decimal), or `none`: adds `-cpu_<f>_<m>[_<s>]` to the
    /// .exp file names, as pttc's --cpu does.
    #[arg(long, value_name = "f/m[/s]|none")]
    cpu: Option<String>,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<(), Failure> {
    let shown = args.file.display().to_string();
    let cpu = match args.cpu.as_deref() {
        None | Some("none") => None,
        Some(c) => Some(Cpu::parse(c).map_err(Failure::input)?),
    };
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
    let files = pttc::run(&path, &text, &Options { cpu }).map_err(|e| {
        if e.line > 0 {
            Failure::input(format!("{shown}:{}: {}", e.line, e.message))
        } else {
            Failure::input(format!("{shown}: {}", e.message))
        }
    })?;
    let dir = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::input(format!("{}: cannot create: {e}", dir.display())))?;
    }
    let mut listing = String::new();
    for f in &files {
        let to = dir.join(&f.name);
        write(&to, &f.bytes)?;
        outln!(listing, "{}", to.display());
    }
    print(&listing)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    ptemu::report::write_atomic(path, |w| w.write_all(bytes))
        .map_err(|e| Failure::input(format!("{}: cannot write: {e}", path.display())))
}
