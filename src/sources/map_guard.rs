//! Reading a mapped file that another process shrinks, without dying of SIGBUS.
//!
//! A plain input file is read through a memory map (no copy). If another process truncates the
//! file meanwhile, touching a mapped page past the new end raises SIGBUS, which kills the process
//! by default. The guard installs a SIGBUS handler (once, chaining to the default action for any
//! fault outside a guarded map) that maps a page of zeros over the faulting page and marks the
//! map as hit; the reader then reports the file as changed at its next buffer fill instead of
//! handing on those zeros as data. A file that shrinks inside its last page raises no fault, so
//! the reader also compares the file's size with the map's at the end of input.
//!
//! The handler is async-signal-safe: it reads atomics and calls `mmap`, nothing else.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// How many maps can be guarded at once; a file opened beyond that is read, not mapped.
const SLOTS: usize = 16;

/// Start and end addresses of each guarded map (0, 0: free).
static START: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static END: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Whether a fault was taken in each map.
static HIT: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// The slot claims (a slot is claimed before its addresses are published).
static TAKEN: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// The name of each guarded map's file (never touched by the handler).
static NAMES: Mutex<[Option<String>; SLOTS]> = Mutex::new([const { None }; SLOTS]);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The SIGBUS action before ours (written once, before the handler is installed), restored for a
/// fault outside every guarded map so the program's own handler or the default action takes it.
#[cfg(unix)]
static PREVIOUS: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

/// A guarded map's slot: the map at `[start, start + len)` is watched until this is dropped
/// (drop it before unmapping).
#[derive(Debug)]
pub(crate) struct Guard {
    slot: usize,
}

impl Guard {
    /// Guards the map of the file `name` at `start` of `len` bytes; `None` when no guard can be
    /// had (no free slot, or the handler could not be installed): read the file instead of
    /// mapping it.
    pub(crate) fn new(name: &str, start: *const u8, len: usize) -> Option<Guard> {
        install();
        if !INSTALLED.load(Ordering::Acquire) || len == 0 {
            return None;
        }
        let slot = (0..SLOTS).find(|&i| {
            TAKEN[i]
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        HIT[slot].store(false, Ordering::Relaxed);
        if let Ok(mut names) = NAMES.lock() {
            names[slot] = Some(name.to_owned());
        }
        END[slot].store(start as usize + len, Ordering::Release);
        START[slot].store(start as usize, Ordering::Release);
        Some(Guard { slot })
    }

    /// Whether a page past the file's end was touched (the file shrank under the map).
    #[inline]
    pub(crate) fn hit(&self) -> bool {
        HIT[self.slot].load(Ordering::Relaxed)
    }
}

/// Whether the guarded map of the file `name` took a fault past the file's end: what a reader
/// read from it since may be zeros, not the file's bytes ([`super::SourceError::at`] says so).
pub(crate) fn shrunk_while_read(name: &str) -> bool {
    let Ok(names) = NAMES.lock() else {
        return false;
    };
    (0..SLOTS).any(|i| HIT[i].load(Ordering::Acquire) && names[i].as_deref() == Some(name))
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut names) = NAMES.lock() {
            names[self.slot] = None;
        }
        START[self.slot].store(0, Ordering::Release);
        END[self.slot].store(0, Ordering::Release);
        TAKEN[self.slot].store(false, Ordering::Release);
    }
}

#[cfg(unix)]
fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: a zeroed sigaction is a valid starting value; the handler is an
        // `extern "C" fn(c_int, *mut siginfo_t, *mut c_void)` as SA_SIGINFO requires.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                return;
            }
            let _ = PREVIOUS.set(previous);
            if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Ordering::Release);
            }
        }
    });
}

#[cfg(not(unix))]
fn install() {}

#[cfg(unix)]
extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for i in 0..SLOTS {
        let (start, end) = (START[i].load(Ordering::Acquire), END[i].load(Ordering::Acquire));
        if start != 0 && (start..end).contains(&addr) {
            let page = addr & !(PAGE.load(Ordering::Relaxed) - 1);
            // SAFETY: the page lies inside a live read-only file map this process owns (its slot
            // is cleared before the map is dropped); a private zero page replaces it in place.
            let p = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    PAGE.load(Ordering::Relaxed),
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                HIT[i].store(true, Ordering::Release);
                return;
            }
        }
    }
    // Not a guarded map: the action before ours (the default, or the program's own handler),
    // which the faulting access now takes again.
    // SAFETY: sigaction is async-signal-safe; PREVIOUS was set before this handler was installed.
    unsafe {
        match PREVIOUS.get() {
            Some(previous) => libc::sigaction(libc::SIGBUS, previous, std::ptr::null_mut()),
            None => libc::signal(libc::SIGBUS, libc::SIG_DFL) as libc::c_int,
        };
    }
}
