//! What a run removes if it is interrupted: the temporary files and directories it is writing,
//! and the directories it created for them. [`exit_on_signal`], called by the caller's signal
//! handling (the `ptemu` binary's thread for SIGINT, SIGTERM and SIGHUP), removes every
//! registered path (newest first), then ends the process with exit code 128 + the signal, as a
//! shell reports a process the signal killed. The library installs no signal handler itself.
//!
//! A run registers a path when it starts writing it ([`Registered::new`]) and the guard
//! unregisters it when the path is renamed into place or removed. Moving outputs into place runs
//! inside [`committing`], which a signal waits for: a run interrupted then ends complete.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

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

/// The process a signal is handed to before the cleanup: its pid (0: none) and a pidfd of it
/// (-1: none, or the kernel has no pidfds), which names that process and no other even after
/// its pid is given again.
static FORWARD_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static FORWARD_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// How long ptemu waits, after handing a signal on, for the process to end (QE20).
const FORWARD_WAIT_MS: i32 = 10_000;

/// From now on SIGINT, SIGTERM and SIGHUP sent to ptemu are handed to process `pid` (QEMU
/// under `ptemu run`), and ptemu waits for it to end (at most 10 s) before it cleans up and
/// ends (QE20); 0 once it has been waited for.
pub fn forward_signals_to(pid: u32) {
    use std::sync::atomic::Ordering::SeqCst;
    let pid = i32::try_from(pid).unwrap_or(0);
    let fd = if pid > 0 {
        // SAFETY: pidfd_open takes a pid and flags; a failure is -1.
        unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32 }
    } else {
        -1
    };
    FORWARD_PID.store(pid, SeqCst);
    let old = FORWARD_FD.swap(fd.max(-1), SeqCst);
    if old >= 0 {
        // SAFETY: a pidfd this function opened; a signal thread that still holds its number
        // gets EBADF (or another descriptor's error) and does nothing.
        unsafe { libc::close(old) };
    }
}

/// QE20: signal `sig` handed to the process [`forward_signals_to`] named, unless the kernel
/// sent it to the whole foreground process group (a terminal's Ctrl-C reached that process
/// too), then waits for that process to end, at most [`FORWARD_WAIT_MS`].
fn forward(sig: i32, from_terminal: bool) {
    use std::sync::atomic::Ordering::SeqCst;
    let (pid, fd) = (FORWARD_PID.load(SeqCst), FORWARD_FD.load(SeqCst));
    if pid <= 0 {
        return;
    }
    if fd >= 0 {
        if !from_terminal {
            // SAFETY: pidfd_send_signal with no siginfo; a process gone is ESRCH.
            unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, sig, std::ptr::null::<u8>(), 0) };
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; readable once the process has ended.
        unsafe { libc::poll(&mut p, 1, FORWARD_WAIT_MS) };
        return;
    }
    // No pidfds (a kernel before 5.3): by pid, while the main thread has not reaped it.
    if !from_terminal {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid, sig) };
    }
    for _ in 0..FORWARD_WAIT_MS / 10 {
        // SAFETY: signal 0 only asks whether the process is there.
        if unsafe { libc::kill(pid, 0) } != 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn pending() -> MutexGuard<'static, Vec<Pending>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a signal handler calls on SIGINT, SIGTERM or SIGHUP (`sig`; `from_terminal`: the
/// kernel sent it to the whole foreground process group, `si_code` SI_KERNEL): QE20, the
/// process [`forward_signals_to`] named (QEMU under `ptemu run`) is handed the signal and
/// waited for; then every registered path is removed, once no commit is under way, and the
/// process ends with 128 + `sig`.
pub fn exit_on_signal(sig: i32, from_terminal: bool) -> ! {
    forward(sig, from_terminal);
    let _commit = COMMIT.lock().unwrap_or_else(|e| e.into_inner());
    remove_all(&mut pending());
    std::process::exit(128 + sig);
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
