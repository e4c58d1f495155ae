//! What a command removes if it is interrupted: the temporary files and directories it is
//! writing, and the directories it created for them. SIGINT, SIGTERM and SIGHUP remove every
//! registered path (newest first), then end the process with exit code 128 + the signal, as a
//! shell reports a process the signal killed.
//!
//! A command registers a path when it starts writing it ([`Registered::new`]) and the guard
//! unregisters it when the path is renamed into place or removed. Moving outputs into place runs
//! inside [`committing`], which a signal waits for: a run interrupted then ends complete.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

/// A path to remove on a signal.
struct Pending {
    id: u64,
    path: PathBuf,
    /// A directory the command created for its outputs: removed only if empty by then.
    only_if_empty: bool,
}

/// Paths to remove on a signal, oldest first.
static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
/// Held while outputs are moved into place.
static COMMIT: Mutex<()> = Mutex::new(());
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static INSTALL: Once = Once::new();

/// The process a signal is handed to before the cleanup (0: none).
static FORWARD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// From now on SIGINT, SIGTERM and SIGHUP are handed to process `pid` (QEMU under `ptemu run`)
/// before ptemu cleans up and ends; 0 once it has been waited for (its pid may be reused).
pub fn forward_signals_to(pid: u32) {
    FORWARD.store(
        i32::try_from(pid).unwrap_or(0),
        std::sync::atomic::Ordering::SeqCst,
    );
}

fn pending() -> MutexGuard<'static, Vec<Pending>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the thread that cleans up on SIGINT, SIGTERM and SIGHUP (once per process); `run`
/// calls it first, so a signal at any moment ends the process with 128 + N, whatever the
/// disposition it inherited (a shell starts background jobs with SIGINT ignored). If the handler
/// cannot be installed the signals keep their default action (no cleanup, but no harm).
pub fn install() {
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("ptemu-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    // QE20: the traced program (QEMU) is handed the signal before ptemu ends.
                    let pid = FORWARD.load(std::sync::atomic::Ordering::SeqCst);
                    if pid > 0 {
                        // SAFETY: kill has no memory preconditions.
                        unsafe { libc::kill(pid, sig) };
                    }
                    let _commit = COMMIT.lock().unwrap_or_else(|e| e.into_inner());
                    remove_all(&mut pending());
                    std::process::exit(128 + sig);
                }
            });
    });
}

/// Removes every path, newest first: a file, a directory tree, or (for a directory the command
/// created) the directory if it is empty.
fn remove_all(list: &mut Vec<Pending>) {
    while let Some(p) = list.pop() {
        if p.only_if_empty {
            let _ = std::fs::remove_dir(&p.path);
        } else {
            remove_path(&p.path);
        }
    }
}

/// Removes a file or a whole directory tree, if there.
pub fn remove_path(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// A path to remove if the command is interrupted; dropping the guard forgets it (the path is
/// then the command's to keep or remove).
#[derive(Debug)]
pub struct Registered {
    id: u64,
}

impl Registered {
    /// Registers `path`, a file or a directory tree the command is writing.
    pub fn new(path: &Path) -> Registered {
        Registered::push(path, false)
    }

    /// Registers `dir`, a directory the command created to hold its outputs: removed on a
    /// signal only if empty by then (after the newer paths in it are gone).
    pub fn created_dir(dir: &Path) -> Registered {
        Registered::push(dir, true)
    }

    fn push(path: &Path, only_if_empty: bool) -> Registered {
        install();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        pending().push(Pending {
            id,
            path: path.to_path_buf(),
            only_if_empty,
        });
        Registered { id }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        pending().retain(|p| p.id != self.id);
    }
}

/// Runs `f` (moving outputs into place) with signals held off until it returns.
pub fn committing<T>(f: impl FnOnce() -> T) -> T {
    let _commit = COMMIT.lock().unwrap_or_else(|e| e.into_inner());
    f()
}
