//! An output directory written all or nothing. A run writes its files into a staging directory
//! inside DIR (`DIR/.ptemu-staging-PID/`); only when every one is complete are they renamed into
//! place, replacing the earlier run's. On any failure, or a signal ([`super::cleanup`]), the
//! staging directory is removed, and so are DIR and its parents if the run created them: DIR is
//! as it was before the run. Only ptemu's own entries are ever replaced or removed (SIM22,
//! [`super::owner`]): DIR's mark names them, and a DIR of someone else's files is refused.

use super::cleanup::{committing, remove_path, Registered};
use super::owner::{mark_text, Owner, MARK};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// An output directory being written.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    staging: PathBuf,
    /// Directories this run created, outermost first.
    created: Vec<(PathBuf, Registered)>,
    staging_guard: Option<Registered>,
    committed: bool,
    /// What DIR held when the run began (SIM22).
    owner: Owner,
}

/// What a commit replaces and removes of an earlier run's outputs (SIM22), for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replacing {
    /// DIR held an earlier ptemu run's outputs.
    pub earlier: bool,
    /// Entries of DIR the run writes again.
    pub replaced: Vec<String>,
    /// An earlier run's entries the run does not write: removed.
    pub removed: Vec<String>,
    /// Entries that are not ptemu's, of the names of outputs: `--force` lets the run replace
    /// them (files only), and without it the commit refuses.
    pub forced: Vec<String>,
}

impl Replacing {
    /// The summary's line for it, if DIR held anything the run replaces or removes.
    pub fn line(&self, dir: &Path) -> Option<String> {
        if self.replaced.is_empty() && self.removed.is_empty() && self.forced.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.replaced.is_empty() {
            parts.push(format!("replaced {}", self.replaced.join(", ")));
        }
        if !self.removed.is_empty() {
            parts.push(format!(
                "removed {} (this run does not write them)",
                self.removed.join(", ")
            ));
        }
        if !self.forced.is_empty() {
            parts.push(format!(
                "replaced files ptemu did not write (--force): {}",
                self.forced.join(", ")
            ));
        }
        let whose = if self.earlier {
            "an earlier ptemu run's outputs"
        } else {
            "files of the same names"
        };
        Some(format!("{} held {whose}: {}", dir.display(), parts.join("; ")))
    }
}

impl RunDir {
    /// Creates `dir` (and missing parents) if needed, and an empty staging directory in it.
    /// A `dir` that holds entries and no mark of ptemu's is refused (SIM22), unless `force`.
    pub fn create(dir: &Path, force: bool) -> io::Result<RunDir> {
        Self::create_as(dir, force, false)
    }

    /// [`RunDir::create`] for a directory that may hold others' files beside the run's
    /// (`pttc`'s, which writes named files where it is told, as libipt's pttc does): only a
    /// same-named entry ptemu did not write is refused, at the commit, unless `force`.
    pub fn create_shared(dir: &Path, force: bool) -> io::Result<RunDir> {
        Self::create_as(dir, force, true)
    }

    fn create_as(dir: &Path, force: bool, shared: bool) -> io::Result<RunDir> {
        let mut run = RunDir {
            dir: dir.to_path_buf(),
            staging: dir.join(format!(".ptemu-staging-{}", std::process::id())),
            created: Vec::new(),
            staging_guard: None,
            committed: false,
            owner: Owner::default(),
        };
        let mut missing = Vec::new();
        let mut p = dir;
        while !p.as_os_str().is_empty() && fs::symlink_metadata(p).is_err() {
            missing.push(p.to_path_buf());
            match p.parent() {
                Some(parent) => p = parent,
                None => break,
            }
        }
        for d in missing.into_iter().rev() {
            match fs::create_dir(&d) {
                Ok(()) => {
                    let guard = Registered::created_dir(&d);
                    run.created.push((d, guard));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        if !fs::metadata(dir)?.is_dir() {
            return Err(io::Error::other("not a directory"));
        }
        run.owner = Owner::of(dir, force, shared)?;
        remove_path(&run.staging);
        run.staging_guard = Some(Registered::new(&run.staging));
        fs::create_dir(&run.staging)?;
        remove_stale_staging(dir);
        Ok(run)
    }

    /// Where output `name` is written until the commit.
    pub fn staged(&self, name: &str) -> PathBuf {
        self.staging.join(name)
    }

    /// The staging directory itself.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Where output `name` ends up.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Moves the staged `outputs` into DIR (a directory replaces the earlier one whole) and removes
    /// the `stale` files of an earlier run that this run does not write, if ptemu wrote them
    /// (SIM22); then marks DIR. Nothing moves unless every destination can take its output: a
    /// directory where a file goes, or the reverse, or an entry ptemu did not write (without
    /// `--force`), fails the commit first.
    pub fn commit(self, outputs: &[&str], stale: &[&str]) -> io::Result<()> {
        self.commit_with_dirs(outputs, stale, &[])
    }

    /// [`RunDir::commit`], also removing `stale_dirs`: directories of an earlier run that this
    /// run does not write (moved into the staging directory, which goes at the end).
    pub fn commit_with_dirs(
        mut self,
        outputs: &[&str],
        stale: &[&str],
        stale_dirs: &[&str],
    ) -> io::Result<()> {
        let plan = self.replacing(outputs, stale, stale_dirs);
        // The entries there that are not ptemu's: replaced only with --force, and only files.
        for name in &plan.forced {
            let path = self.final_path(name);
            let refusal = if !self.owner.forced {
                "was not written by ptemu: not replaced (nothing was written; pass --force to \
                 replace it)"
            } else if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                // --force replaces files of the same names, never a directory whole.
                "is a directory ptemu did not write: not replaced (nothing was written)"
            } else {
                continue;
            };
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} {refusal}", path.display()),
            ));
        }
        for name in outputs {
            let from = fs::symlink_metadata(self.staged(name))?;
            if let Ok(to) = fs::symlink_metadata(self.final_path(name)) {
                if to.is_dir() != from.is_dir() {
                    let what = if to.is_dir() {
                        "a directory"
                    } else {
                        "not a directory"
                    };
                    return Err(io::Error::other(format!(
                        "{} is {what}: not replaced (nothing was written)",
                        self.final_path(name).display()
                    )));
                }
            }
        }
        committing(|| {
            for name in outputs {
                let (from, to) = (self.staged(name), self.final_path(name));
                if from.is_dir() && to.exists() {
                    fs::rename(&to, self.staged(&format!("{name}.old")))?;
                }
                fs::rename(&from, &to)?;
            }
            for name in &plan.removed {
                let old = self.final_path(name);
                if fs::symlink_metadata(&old).is_ok_and(|m| m.is_dir()) {
                    fs::rename(&old, self.staged(&format!("{name}.old")))?;
                } else {
                    match fs::remove_file(old) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                        _ => {}
                    }
                }
            }
            // The mark names what is ptemu's now: this run's outputs, and the entries of an
            // earlier run that are still there (another command's, which this one leaves).
            let kept = self
                .owner
                .earlier
                .iter()
                .map(String::as_str)
                .filter(|n| !plan.removed.iter().any(|r| r == n))
                .filter(|n| fs::symlink_metadata(self.final_path(n)).is_ok());
            let text = mark_text(outputs.iter().copied().chain(kept));
            let tmp = self.staged(MARK);
            fs::write(&tmp, text)?;
            fs::rename(&tmp, self.final_path(MARK))?;
            self.committed = true;
            fs::remove_dir_all(&self.staging)
        })
    }

    /// What committing `outputs` (with an earlier run's `stale` files and `stale_dirs` this run
    /// does not write) replaces and removes in DIR (SIM22): only ever ptemu's own entries, and
    /// with `--force` the same-named entries of someone else's.
    pub fn replacing(&self, outputs: &[&str], stale: &[&str], stale_dirs: &[&str]) -> Replacing {
        let exists = |n: &str| fs::symlink_metadata(self.final_path(n)).is_ok();
        let mut r = Replacing {
            earlier: self.owner.held_outputs(),
            ..Replacing::default()
        };
        for &n in outputs.iter().filter(|n| exists(n)) {
            if self.owner.is_ours(n) {
                r.replaced.push(n.to_owned());
            } else {
                r.forced.push(n.to_owned());
            }
        }
        for &n in stale.iter().chain(stale_dirs) {
            if exists(n) && self.owner.may_remove(n) && !outputs.contains(&n) {
                r.removed.push(n.to_owned());
            }
        }
        r
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.committed {
            remove_path(&self.staging);
            for (d, _) in self.created.iter().rev() {
                let _ = fs::remove_dir(d);
            }
        }
    }
}

/// Removes the staging directories in `dir` left by runs that were killed (SIGKILL cannot be
/// caught): `.ptemu-staging-PID` whose process no longer exists. A live PID's is another run's
/// (or a process that reused the PID): it stays.
fn remove_stale_staging(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".ptemu-staging-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid <= 0 || pid as u32 == std::process::id() {
            continue;
        }
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            tracing::debug!("removing {} (left by a killed run)", entry.path().display());
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
