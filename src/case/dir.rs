//! An output directory written all or nothing. A run writes its files into a staging directory
//! inside DIR (`DIR/.ptemu-staging-PID/`); only when every one is complete are they renamed into
//! place, replacing the earlier run's. On any failure, or a signal ([`super::cleanup`]), the
//! staging directory is removed, and so are DIR and its parents if the run created them: DIR is
//! as it was before the run.

use super::cleanup::{committing, remove_path, Registered};
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
}

impl RunDir {
    /// Creates `dir` (and missing parents) if needed, and an empty staging directory in it.
    pub fn create(dir: &Path) -> io::Result<RunDir> {
        let mut run = RunDir {
            dir: dir.to_path_buf(),
            staging: dir.join(format!(".ptemu-staging-{}", std::process::id())),
            created: Vec::new(),
            staging_guard: None,
            committed: false,
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
    /// the `stale` files of an earlier run that this run does not write. Nothing moves unless
    /// every destination can take its output: a directory where a file goes, or the reverse,
    /// fails the commit first.
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
        for name in stale {
            if let Ok(m) = fs::symlink_metadata(self.final_path(name)) {
                if m.is_dir() {
                    return Err(io::Error::other(format!(
                        "{} is a directory: not removed (nothing was written)",
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
            for name in stale {
                match fs::remove_file(self.final_path(name)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            for name in stale_dirs {
                let old = self.final_path(name);
                if fs::symlink_metadata(&old).is_ok_and(|m| m.is_dir()) {
                    fs::rename(&old, self.staged(&format!("{name}.old")))?;
                }
            }
            self.committed = true;
            fs::remove_dir_all(&self.staging)
        })
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
