//! Whose files an output directory holds (spec/simulate.md SIM22): every DIR ptemu commits
//! gets a mark, `DIR/.ptemu-out`, naming the entries ptemu wrote there. A later run replaces
//! or removes only those; a non-empty directory without the mark is refused unless the user
//! passes `--force`, and even then only the entries the run writes are replaced.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

/// The mark's file name, in DIR.
pub const MARK: &str = ".ptemu-out";

/// The mark's first line.
const HEADER: &str =
    "ptemu output directory: the entries below are ptemu's, replaced or removed by its next run here";

/// Names of DIR's entries that are not outputs: the mark and the staging directories.
fn not_an_output(name: &str) -> bool {
    name == MARK || name.starts_with(".ptemu-staging-")
}

/// What DIR held when a run began.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// The entries an earlier ptemu run wrote (its mark's names); empty for a new or empty DIR.
    pub earlier: BTreeSet<String>,
    /// In a DIR written before the mark existed: the entries with the names of a run's outputs,
    /// which the run may replace with its own but never removes, nor marks as ptemu's.
    pub unmarked: BTreeSet<String>,
    /// `--force` was given: same-named files that are not ptemu's may be replaced.
    pub forced: bool,
}

impl Owner {
    /// Reads DIR's mark; refuses (with the reason) a non-empty DIR without one unless `force`
    /// or `shared` (a directory a command writes named files into among others', as `pttc`
    /// does: then only a same-named entry that is not ptemu's is refused, at the commit).
    pub fn of(dir: &Path, force: bool, shared: bool) -> io::Result<Owner> {
        let path = dir.join(MARK);
        let owner = match fs::read_to_string(&path) {
            Ok(text) => match parse(&text, &path) {
                Ok(owner) => owner,
                // A mark that does not read: with --force, as a DIR without one.
                Err(_) if force => Owner {
                    unmarked: unmarked_run(dir).unwrap_or_default(),
                    ..Owner::default()
                },
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "{e} (nothing was written; pass --force to write into it as into a DIR \
                             ptemu did not write)"
                        ),
                    ))
                }
            },
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
            }
            Err(_) => match unmarked_run(dir) {
                Some(unmarked) => Owner {
                    unmarked,
                    ..Owner::default()
                },
                None if force || shared => Owner::default(),
                None => {
                    refuse_foreign(dir)?;
                    Owner::default()
                }
            },
        };
        Ok(Owner {
            forced: force,
            ..owner
        })
    }

    /// Whether DIR held an earlier ptemu run's outputs (marked, or from before the mark).
    pub fn held_outputs(&self) -> bool {
        !self.earlier.is_empty() || !self.unmarked.is_empty()
    }

    /// Whether DIR's entry `name` is ptemu's to replace: an earlier run's, marked or not.
    pub fn is_ours(&self, name: &str) -> bool {
        self.earlier.contains(name) || self.unmarked.contains(name)
    }

    /// Whether the run may replace DIR's entry `name`, which exists: ptemu's own, or (with
    /// `--force`) one of the same name.
    pub fn may_replace(&self, name: &str) -> bool {
        self.forced || self.is_ours(name)
    }

    /// Whether the run may remove DIR's entry `name`, an earlier run's output it does not write
    /// again (never on `--force` alone, nor in a DIR from before the mark: only what ptemu's
    /// mark says it wrote).
    pub fn may_remove(&self, name: &str) -> bool {
        self.earlier.contains(name)
    }
}

/// Refuses `dir` if it holds an entry that is not ptemu's, naming up to three of them.
fn refuse_foreign(dir: &Path) -> io::Result<()> {
    let mut foreign: Vec<String> = fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !not_an_output(n))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort_unstable();
    let more = foreign.len().saturating_sub(3);
    foreign.truncate(3);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "not written by ptemu (it holds {}{more} and no {MARK}): nothing was written; name a \
             new or empty directory, or pass --force to write ptemu's files into it (files of the \
             same names are replaced, nothing else is touched)",
            foreign.join(", ")
        ),
    ))
}

/// The entries a `simulate`, `run` or `write` DIR holds: what such a DIR written before the
/// mark existed may have had.
const RUN_OUTPUTS: [&str; 14] = [
    "trace.pt",
    "events.jsonl",
    "perf.data",
    "image.elf",
    "image.bin",
    "image.json",
    "truth.bin",
    "truth.jsonl",
    "regions",
    "report.json",
    "code",
    "layout.svg",
    "threads",
    "processes",
];

/// A DIR that an earlier ptemu (before SIM22's mark) wrote: no mark, but a `report.json`
/// that is ptemu's (its `msr` and `stats` objects) beside `regions/`. Its entries of
/// [`RUN_OUTPUTS`]' names may be that run's or the user's: the next run replaces those it
/// writes and removes none.
fn unmarked_run(dir: &Path) -> Option<BTreeSet<String>> {
    if let Some(cases) = unmarked_corpus(dir) {
        return Some(cases);
    }
    if !dir.join("regions").is_dir() {
        return None;
    }
    let text = fs::read(dir.join("report.json")).ok()?;
    let report: serde_json::Value = serde_json::from_slice(&text).ok()?;
    if !(report.get("msr")?.is_object() && report.get("stats")?.is_object()) {
        return None;
    }
    Some(
        RUN_OUTPUTS
            .iter()
            .filter(|n| fs::symlink_metadata(dir.join(n)).is_ok())
            .map(|n| n.to_string())
            .collect(),
    )
}

/// A `ptemu corpus` DIR written before the mark: a `manifest.json` that is ptemu's (its
/// `ptemu` and `cases` fields); its entries are the manifest and the directories of the cases
/// it names (names without a `/`).
fn unmarked_corpus(dir: &Path) -> Option<BTreeSet<String>> {
    let text = fs::read(dir.join("manifest.json")).ok()?;
    let manifest: serde_json::Value = serde_json::from_slice(&text).ok()?;
    manifest.get("ptemu")?;
    let mut names: BTreeSet<String> = manifest
        .get("cases")?
        .as_array()?
        .iter()
        .filter_map(|c| c.get("name")?.as_str())
        .filter(|n| !n.is_empty() && !n.contains('/') && *n != "." && *n != "..")
        .filter(|n| dir.join(n).is_dir())
        .map(str::to_owned)
        .collect();
    names.insert("manifest.json".into());
    Some(names)
}

fn parse(text: &str, path: &Path) -> io::Result<Owner> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: line 1: not a ptemu output mark", path.display()),
        ));
    }
    let mut earlier = BTreeSet::new();
    for (k, line) in lines.enumerate() {
        if line.is_empty() || line.contains('/') || line == "." || line == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: line {}: {line:?} is not an entry's name",
                    path.display(),
                    k + 2
                ),
            ));
        }
        earlier.insert(line.to_owned());
    }
    Ok(Owner {
        earlier,
        ..Owner::default()
    })
}

/// The mark naming `names`, as its file holds it.
pub fn mark_text<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let mut text = format!("{HEADER}\n");
    for n in names {
        text.push_str(n);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim22_a_mark_reads_back_as_written() {
        let text = mark_text(["trace.pt", "regions", "report.json"]);
        let o = parse(&text, Path::new("x")).unwrap();
        assert!(o.held_outputs());
        assert_eq!(o.earlier.len(), 3);
        assert!(o.may_replace("trace.pt") && o.may_remove("regions"));
        assert!(!o.may_replace("notes.txt") && !o.may_remove("notes.txt"));
    }

    #[test]
    fn sim22_a_mark_with_a_path_or_another_header_is_refused() {
        for bad in [
            "something else\ntrace.pt\n",
            &format!("{HEADER}\n../x\n"),
            &format!("{HEADER}\n\n"),
        ] {
            let e = parse(bad, Path::new("DIR/.ptemu-out")).unwrap_err();
            assert!(e.to_string().starts_with("DIR/.ptemu-out: line "), "{e}");
        }
    }
}
