//! `ptemu truth dump`: a truth as `truth.jsonl`'s lines (spec/truth.md TR9).

use super::output::{is_std, write_output};
use super::Failure;
use ptemu::truth::compact::Bytes;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The subcommands of `ptemu truth`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Print a truth (a case directory, truth.bin or truth.jsonl) as truth.jsonl's JSON lines:
    /// the header, one line a record, the end record. A damaged or cut file prints nothing and
    /// exits 2 with its byte offset.
    Dump {
        /// A case directory (its truth.bin, else truth.jsonl), or a truth file ("-" for stdin).
        truth: PathBuf,
        /// Where to write ("-", the default, for stdout).
        #[arg(short, long, default_value = "-")]
        output: PathBuf,
    },
}

/// The truth file of a case directory: `truth.bin`, else `truth.jsonl`; a file as it is. A
/// directory with neither is refused, saying what it is: a corpus (its `manifest.json`) names one
/// of its cases.
pub fn truth_file(case: &Path) -> Result<PathBuf, Failure> {
    if !case.is_dir() {
        return Ok(case.to_path_buf());
    }
    for name in ["truth.bin", "truth.jsonl"] {
        let file = case.join(name);
        if file.is_file() {
            return Ok(file);
        }
    }
    let shown = case.display();
    if case.join("manifest.json").is_file() {
        let example = first_case(case)
            .map(|c| format!(", for example {}", case.join(c).display()))
            .unwrap_or_default();
        return Err(Failure::input(format!(
            "{shown} is a corpus (it has manifest.json), not a case: name one of its cases{example}"
        )));
    }
    Err(Failure::input(format!(
        "{shown} holds neither truth.bin nor truth.jsonl: not a case directory ptemu wrote"
    )))
}

/// The first case (in name order) of a corpus directory: a subdirectory with a truth file.
fn first_case(corpus: &Path) -> Option<String> {
    let mut cases: Vec<String> = std::fs::read_dir(corpus)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let p = e.path();
            p.join("truth.bin").is_file() || p.join("truth.jsonl").is_file()
        })
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    cases.sort();
    cases.into_iter().next()
}

pub fn run(c: &Command) -> Result<(), Failure> {
    let Command::Dump { truth, output } = c;
    let path = truth_file(truth)?;
    let name = path.display().to_string();
    let failed = |e: std::io::Error| Failure::input(format!("{name}: {e}"));
    // A truth.bin file is mapped, not read: dumping one of any length takes flat memory.
    let mapped = if is_std(&path) {
        None
    } else {
        Bytes::map_if_compact(&path).map_err(failed)?
    };
    let compact = match mapped {
        Some(m) => m,
        None => {
            let mut v = Vec::new();
            if is_std(&path) {
                std::io::stdin().lock().read_to_end(&mut v).map_err(failed)?;
            } else {
                std::fs::File::open(&path)
                    .and_then(|mut f| f.read_to_end(&mut v))
                    .map_err(failed)?;
            }
            if v.starts_with(ptemu::truth::compact::MAGIC) {
                Bytes::Owned(v)
            } else {
                // A truth.jsonl: read whole and checked (TR1), then printed the same way.
                let mut enc = ptemu::truth::compact::Encoder::new(Vec::new());
                ptemu::truth::json::read(&name, v.as_slice(), &mut enc)
                    .map_err(|e| Failure::input(e.to_string()))?;
                Bytes::Owned(enc.into_inner())
            }
        }
    };
    // Checked whole before a byte is written: a damaged file writes nothing, and the message
    // names it.
    let checked = compact
        .check()
        .map_err(|e| Failure::input(format!("{name}: {e}")))?;
    write_output(output, |out| {
        ptemu::truth::json::from_compact(&compact, &checked, out)
    })
}
