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
fn is_ours_to_skip(name: &str) -> bool {
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
    /// DIR had a mark: an earlier run's outputs are there.
    pub marked: bool,
    /// `--force` was given for a DIR of someone else's files.
    pub forced: bool,
}

impl Owner {
    /// Reads DIR's mark; refuses (with the reason) a non-empty DIR without one unless `force`
    /// or `shared` (a directory a command writes named files into among others', as `pttc`
    /// does: then only a same-named entry that is not ptemu's is refused, at the commit).
    pub fn of(dir: &Path, force: bool, shared: bool) -> io::Result<Owner> {
        match fs::read_to_string(dir.join(MARK)) {
            Ok(text) => {
                return match parse(&text, &dir.join(MARK)) {
                    Ok(owner) => Ok(Owner {
                        forced: force,
                        ..owner
                    }),
                    // A mark that does not read: with --force, as a DIR without one.
                    Err(_) if force => Ok(Owner {
                        unmarked: unmarked_run(dir).unwrap_or_default(),
                        forced: true,
                        ..Owner::default()
                    }),
                    Err(e) => Err(io::Error::new(
                        e.kind(),
                        format!("{e} (nothing was written; pass --force to write into it as into a DIR ptemu did not write)"),
                    )),
                };
            }
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{}: {e}", dir.join(MARK).display()),
                ))
            }
            Err(_) => {}
        }
        if let Some(unmarked) = unmarked_run(dir) {
            return Ok(Owner {
                unmarked,
                marked: true,
                forced: force,
                ..Owner::default()
            });
        }
        let foreign: Vec<String> = fs::read_dir(dir)?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !is_ours_to_skip(n))
            .collect();
        if foreign.is_empty() || force || shared {
            return Ok(Owner {
                forced: force && !foreign.is_empty(),
                ..Owner::default()
            });
        }
        let mut shown: Vec<&str> = foreign.iter().map(String::as_str).collect();
        shown.sort_unstable();
        let more = shown.len().saturating_sub(3);
        shown.truncate(3);
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "not written by ptemu (it holds {}{} and no {MARK}): nothing was written; name a new \
                 or empty directory, or pass --force to write ptemu's files into it (files of the \
                 same names are replaced, nothing else is touched)",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
        ))
    }

    /// Whether the run may replace DIR's entry `name`, which exists: ptemu's own, or (with
    /// `--force`, or in a DIR written before the mark) one of the same name.
    pub fn may_replace(&self, name: &str) -> bool {
        self.forced || self.earlier.contains(name) || self.unmarked.contains(name)
    }

    /// Whether the run may remove DIR's entry `name`, an earlier run's output it does not write
    /// again (never on `--force` alone: only what ptemu wrote).
    pub fn may_remove(&self, name: &str) -> bool {
        self.earlier.contains(name)
    }
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
        marked: true,
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
        assert!(o.marked);
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
