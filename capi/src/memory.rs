//! Guest physical memory as the host gives it: read/write callbacks, or one host buffer.

use crate::status::*;
use ptemu_core::memory::{MemError, PhysMemory};
use std::ffi::c_void;

/// Reads `len` bytes of guest physical memory at `pa` into `buf`; returns 0 on success, anything
/// else if the range is not readable. It must return (no longjmp, no C++ exception through it) and
/// must not call ptemu on the unit or tracer whose call it serves.
#[allow(non_camel_case_types)]
pub type ptemu_read_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, pa: u64, buf: *mut u8, len: usize) -> i32>;

/// Writes `len` bytes from `data` to guest physical memory at `pa`; returns 0 on success,
/// anything else if the range is not writable, in which case it writes nothing (all or nothing).
/// The same rules as ptemu_read_fn.
#[allow(non_camel_case_types)]
pub type ptemu_write_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, pa: u64, data: *const u8, len: usize) -> i32>;

/// Guest physical memory: the host's callbacks or the host's buffer. Opaque.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug)]
pub struct ptemu_memory {
    backing: Backing,
}

#[derive(Clone, Copy, Debug)]
enum Backing {
    Callbacks {
        ctx: *mut c_void,
        read: unsafe extern "C" fn(*mut c_void, u64, *mut u8, usize) -> i32,
        write: unsafe extern "C" fn(*mut c_void, u64, *const u8, usize) -> i32,
    },
    Buffer {
        base: u64,
        ptr: *mut u8,
        len: usize,
    },
}

impl ptemu_memory {
    /// The byte range of the buffer `[pa, pa + len)` occupies, if inside it.
    fn span(base: u64, size: usize, pa: u64, len: usize) -> Option<usize> {
        let off = usize::try_from(pa.checked_sub(base)?).ok()?;
        (off.checked_add(len)? <= size).then_some(off)
    }
}

impl PhysMemory for ptemu_memory {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        let unmapped = MemError::Unmapped { pa, len: data.len() };
        match self.backing {
            Backing::Callbacks { ctx, write, .. } => {
                // SAFETY: the host gave `write` and `ctx` together and promised (ptemu_memory_new_callbacks)
                // that they stay valid while this memory lives; `data` is a live slice.
                let rc = unsafe { write(ctx, pa, data.as_ptr(), data.len()) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(unmapped)
                }
            }
            Backing::Buffer { base, ptr, len } => {
                let off = Self::span(base, len, pa, data.len()).ok_or(unmapped)?;
                // SAFETY: `ptr..ptr + len` is the host's writable buffer (ptemu_memory_new_buffer's
                // contract) and `off + data.len() <= len` was checked above.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.add(off), data.len()) };
                Ok(())
            }
        }
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let unmapped = MemError::Unmapped { pa, len: buf.len() };
        match self.backing {
            Backing::Callbacks { ctx, read, .. } => {
                // SAFETY: as for write: the host's callback and context, a live buffer.
                let rc = unsafe { read(ctx, pa, buf.as_mut_ptr(), buf.len()) };
                if rc == 0 {
                    Ok(())
                } else {
                    Err(unmapped)
                }
            }
            Backing::Buffer { base, ptr, len } => {
                let off = Self::span(base, len, pa, buf.len()).ok_or(unmapped)?;
                // SAFETY: inside the host's buffer, checked above.
                unsafe { std::ptr::copy_nonoverlapping(ptr.add(off), buf.as_mut_ptr(), buf.len()) };
                Ok(())
            }
        }
    }
}

/// Creates guest memory served by the host's callbacks. `ctx` is passed back to them untouched.
/// The callbacks and `ctx` must stay valid until ptemu_memory_free; they are called only from
/// inside ptemu calls that take this memory, on the calling thread. One memory object may serve
/// several units and tracers, on several threads at once if the callbacks are thread-safe.
///
/// # Safety
/// `out` must be NULL or point to writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn ptemu_memory_new_callbacks(
    ctx: *mut c_void,
    read: ptemu_read_fn,
    write: ptemu_write_fn,
    out: *mut *mut ptemu_memory,
) -> ptemu_status {
    guard(|| {
        let (Some(read), Some(write)) = (read, write) else {
            return Err(Failure::null("a callback"));
        };
        let backing = Backing::Callbacks { ctx, read, write };
        // SAFETY: forwarded contract.
        unsafe { hand_out(out, ptemu_memory { backing }) }
    })
}

/// Creates guest memory backed by the host buffer `buf` of `len` bytes, mapped at guest physical
/// address `base`. ptemu reads and writes the buffer in place and never frees it; it must stay
/// valid (and not be moved) until ptemu_memory_free. Accesses outside `[base, base + len)` fail
/// with PTEMU_ERR_MEMORY. Several units and tracers may share it; concurrent writes to the same
/// bytes from several threads are the host's to avoid.
///
/// # Safety
/// `buf` must point to `len` writable bytes; `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_memory_new_buffer(
    base: u64,
    buf: *mut u8,
    len: usize,
    out: *mut *mut ptemu_memory,
) -> ptemu_status {
    guard(|| {
        if buf.is_null() {
            return Err(Failure::null("buf"));
        }
        if len != 0 && base.checked_add(len as u64 - 1).is_none() {
            return Err(Failure::argument(format!(
                "a buffer of {len:#x} bytes at {base:#x} runs past the top of the address space"
            )));
        }
        let backing = Backing::Buffer { base, ptr: buf, len };
        // SAFETY: forwarded contract.
        unsafe { hand_out(out, ptemu_memory { backing }) }
    })
}

/// Frees a memory object (not the guest memory behind it). NULL is ignored.
///
/// # Safety
/// `mem` must be NULL or a pointer from a ptemu_memory_new_* call, not freed before.
#[no_mangle]
pub unsafe extern "C" fn ptemu_memory_free(mem: *mut ptemu_memory) {
    // SAFETY: forwarded contract (the ptemu_memory_new_* functions hand memory objects out).
    unsafe { take_back(mem) }
}

/// A copy of the memory behind a non-NULL pointer (only read, so several threads may share one).
///
/// # Safety
/// `mem` must be NULL or a live ptemu_memory.
pub(crate) unsafe fn memory(mem: *const ptemu_memory) -> Result<ptemu_memory, Failure> {
    // SAFETY: NULL or a live object, by the caller's contract.
    unsafe { mem.as_ref() }
        .copied()
        .ok_or_else(|| Failure::null("mem"))
}
