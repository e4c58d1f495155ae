//! Where a command's output goes: a file, written whole or not at all, or stdout for `-`; and how
//! a write failure reaches the user.

use super::Failure;
use ptemu::case::cleanup::Registered;
use ptemu::report::{tmp_sibling, write_atomic};
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// True for the path `-`: stdin as an input, stdout as an output.
pub fn is_std(path: &Path) -> bool {
    path == Path::new("-")
}

/// Whether descriptor 1 was closed when the process started, recorded before the Rust runtime
/// runs: the runtime then reopens a closed standard descriptor on `/dev/null`, after which a
/// closed stdout can no longer be told from a redirect to `/dev/null`.
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static RECORD_STDOUT: extern "C" fn() = record_stdout;

/// Runs from `.init_array`, before `main` and before the runtime touches the descriptors.
#[cfg(target_os = "linux")]
extern "C" fn record_stdout() {
    // SAFETY: F_GETFD on a descriptor number has no memory effects.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED_AT_START.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Fails when stdout is closed (`ptemu dump t.pt >&-`): the writes would otherwise vanish into
/// the `/dev/null` the runtime put there, and the command end with exit 0 having written nothing.
pub fn stdout_is_open() -> Result<(), Failure> {
    // SAFETY: F_GETFD on a descriptor number has no memory effects.
    let closed_now = unsafe { libc::fcntl(1, libc::F_GETFD) } == -1;
    if closed_now || STDOUT_CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(write_failure("stdout", io::Error::from_raw_os_error(libc::EBADF)));
    }
    Ok(())
}

/// Writes `fill`'s bytes to `path`: to stdout for `-` (streamed), else to a temporary sibling
/// renamed over `path` once complete, so a failure leaves no half-written file.
pub fn write_output(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), Failure> {
    let result = if is_std(path) {
        stdout_is_open()?;
        let mut out = BufWriter::new(io::stdout().lock());
        fill(&mut out).and_then(|()| out.flush())
    } else {
        // A directory cannot be replaced by a file: say so (the rename would say "Device or
        // resource busy" for `.`, "Is a directory" elsewhere).
        if path.is_dir() || path.file_name().is_none() {
            return Err(Failure::input(format!(
                "{}: is a directory, not a file to write",
                path.display()
            )));
        }
        // Removed on a signal while it is written.
        let _interrupted = Registered::new(&tmp_sibling(path));
        write_atomic(path, fill)
    };
    result.map_err(|e| write_failure(&path.display().to_string(), e))
}

/// A write error on `what`. A reader that closed the pipe (`ptemu dump … | head`) has all it
/// wanted: that ends the command quietly with exit code 0, as `cat` or `grep` users expect.
pub fn write_failure(what: &str, e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::reader_gone()
    } else {
        Failure::input(format!("{what}: writing: {e}"))
    }
}

/// Set once stdout's reader went away: later console output is dropped.
static STDOUT_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes a command's console output to stdout. A reader that went away (a closed pipe) has all
/// it wanted: the text, and any printed later, is dropped and the command goes on to the exit
/// status it earns (1 for a layout with an operational error, even piped into `true`). Any other
/// failed write is an error (a full disk), never a panic as with `println!`.
pub fn print(text: &str) -> Result<(), Failure> {
    use std::sync::atomic::Ordering;
    stdout_is_open()?;
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            Ok(())
        }
        r => r.map_err(|e| write_failure("stdout", e)),
    }
}

/// Writes `text` to stderr as it is. Never fails and never panics (`eprintln!` panics when stderr
/// is a closed pipe): a message nobody can read is dropped.
pub fn eprint_text(text: &str) {
    let _ = io::stderr().lock().write_all(text.as_bytes());
}
