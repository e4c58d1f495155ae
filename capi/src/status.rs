//! Return codes, the per-thread last error, and the guard that keeps panics on the Rust side.

use ptemu_core::output::MsrError;
use ptemu_core::rules::Rule;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// What a call did. Zero is success; positive values are architectural outcomes the emulator
/// handles (a #GP to inject, an MSR to handle elsewhere); negative values are errors.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ptemu_status {
    /// Success.
    PTEMU_OK = 0,
    /// The WRMSR or RDMSR raises #GP: inject it into the guest. ptemu_last_rule() names the rule
    /// (spec/output.md), ptemu_last_error() says why.
    PTEMU_GP = 1,
    /// The MSR is not one the PT output unit models: handle it elsewhere.
    PTEMU_NOT_MODELLED = 2,
    /// A required pointer argument was NULL.
    PTEMU_ERR_NULL = -1,
    /// An argument has a value the API does not accept (an unknown CPU profile, event kind,
    /// execution mode, ...).
    PTEMU_ERR_ARGUMENT = -2,
    /// A guest physical memory access failed (a callback returned non-zero, or an address outside
    /// the buffer).
    PTEMU_ERR_MEMORY = -3,
    /// ptemu hit an internal error (a bug); the object involved must not be used again.
    PTEMU_ERR_PANIC = -4,
}

pub use ptemu_status::*;

/// A failed call: its status and message.
pub(crate) struct Failure {
    pub status: ptemu_status,
    pub message: String,
    pub rule: Option<Rule>,
}

impl Failure {
    pub fn new(status: ptemu_status, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
            rule: None,
        }
    }

    pub fn null(what: &str) -> Self {
        Failure::new(PTEMU_ERR_NULL, format!("{what} is NULL"))
    }

    pub fn argument(message: impl Into<String>) -> Self {
        Failure::new(PTEMU_ERR_ARGUMENT, message)
    }
}

impl From<MsrError> for Failure {
    fn from(e: MsrError) -> Self {
        match &e {
            MsrError::Gp(gp) => Failure {
                status: PTEMU_GP,
                rule: Some(gp.rule),
                message: e.to_string(),
            },
            MsrError::NotModelled(_) => Failure::new(PTEMU_NOT_MODELLED, e.to_string()),
            _ => Failure::new(PTEMU_ERR_MEMORY, e.to_string()),
        }
    }
}

impl From<ptemu_core::memory::MemError> for Failure {
    fn from(e: ptemu_core::memory::MemError) -> Self {
        Failure::new(PTEMU_ERR_MEMORY, e.to_string())
    }
}

/// Hands `obj` to C through `out`, boxed: the pointer it writes is freed by [`take_back`].
/// Nothing is allocated when `out` is NULL.
///
/// # Safety
/// `out` must be NULL or writable.
pub(crate) unsafe fn hand_out<T>(out: *mut *mut T, obj: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null("out"));
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { out.write(Box::into_raw(Box::new(obj))) };
    Ok(())
}

/// Frees an object [`hand_out`] gave C; NULL is ignored.
///
/// # Safety
/// `p` must be NULL or a pointer from [`hand_out`], not freed before.
pub(crate) unsafe fn take_back<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: from Box::into_raw in hand_out, not freed before (the caller's contract).
        drop(unsafe { Box::from_raw(p) });
    }
}

thread_local! {
    /// The message and rule of this thread's last failed call.
    static LAST: RefCell<(CString, Option<Rule>)> = RefCell::new((CString::default(), None));
}

fn set_last(message: &str, rule: Option<Rule>) {
    // A message with a NUL in it is cut there: C reads up to the first NUL anyway.
    let text = CString::new(message.split('\0').next().unwrap_or("")).unwrap_or_default();
    // During thread teardown the slot may be gone: the message is lost, nothing panics.
    let _ = LAST.try_with(|l| *l.borrow_mut() = (text, rule));
}

/// Runs `body`, turning its failure or panic into a status and the thread's last error.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> ptemu_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => PTEMU_OK,
        Ok(Err(f)) => {
            set_last(&f.message, f.rule);
            f.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last(&format!("internal error (a ptemu bug): {what}"), None);
            PTEMU_ERR_PANIC
        }
    }
}

/// The NUL-terminated ID of `rule` ("T3", "E1e"...), static for the life of the program.
pub(crate) fn rule_cstr(rule: Rule) -> *const c_char {
    static IDS: OnceLock<Vec<(Rule, CString)>> = OnceLock::new();
    let ids = IDS.get_or_init(|| {
        Rule::ALL
            .iter()
            .map(|&r| (r, CString::new(r.id()).expect("rule IDs have no NUL")))
            .collect()
    });
    ids.iter()
        .find(|(r, _)| *r == rule)
        .map_or(std::ptr::null(), |(_, s)| s.as_ptr())
}

/// The message of this thread's last failed call ("" if none yet). The pointer stays valid until
/// the next failing call on this thread.
#[no_mangle]
pub extern "C" fn ptemu_last_error() -> *const c_char {
    LAST.try_with(|l| l.borrow().0.as_ptr()).unwrap_or(c"".as_ptr())
}

/// The rule ID (spec/output.md, e.g. "M4") of this thread's last PTEMU_GP, or NULL if the last
/// failed call was not a #GP. The string is static.
#[no_mangle]
pub extern "C" fn ptemu_last_rule() -> *const c_char {
    LAST.try_with(|l| l.borrow().1.map_or(std::ptr::null(), rule_cstr))
        .unwrap_or(std::ptr::null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: NUL-terminated, valid until the next failing call on this thread.
        unsafe { CStr::from_ptr(ptemu_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message_not_an_unwind_into_c() {
        let s = guard(|| panic!("the model broke"));
        assert_eq!(s, PTEMU_ERR_PANIC);
        assert!(last().contains("the model broke"), "{}", last());
        let s = guard(|| Err(Failure::argument("a\0b")));
        assert_eq!(s, PTEMU_ERR_ARGUMENT);
        assert_eq!(last(), "a", "a message is cut at a NUL");
        assert_eq!(guard(|| Ok(())), PTEMU_OK);
        assert_eq!(last(), "a", "success leaves the last error alone");
    }
}
