//! ptemu's QEMU TCG plugin: loaded by `qemu-x86_64` (user mode), it sends every instruction the
//! guest translates and executes, the files its code runs from and what it does that the trace
//! cannot follow (threads, code no file holds) to `ptemu run`, over the socket `ptemu run`
//! names with `fd=N` (spec/qemu.md). The stream's format is `ptemu::sources::qemu::wire`; the
//! events and the trace are made on the other side, so the guest runs on while the tracer
//! works on another core.
//!
//! ```text
//! qemu-x86_64 -plugin target/release/libptemu_qemu.so,fd=3 PROGRAM   # as ptemu run starts it
//! ```

mod api;
mod maps;

use api::{Api, PluginId, QemuInfo, Tb, CB_NO_REGS};
use ptemu::sources::qemu::wire::{NoteKind, Writer};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The plugin API version the plugin is written against (QEMU checks it at load).
#[no_mangle]
#[used]
pub static qemu_plugin_version: c_int = 1;

/// Bytes gathered before they go to the socket.
const SEND_AT: usize = 1 << 16;

/// Set once the plugin must not write again: the program was refused (a thread), this is a
/// forked child, or `ptemu run` went away. Checked first by every callback.
static OFF: AtomicBool = AtomicBool::new(false);

static API: OnceLock<Api> = OnceLock::new();

/// The plugin's state. Only the guest's main thread touches it: every callback checks [`OFF`]
/// first, and a second thread sets OFF (on the main thread, in the clone system call or the new
/// vCPU's init, both before the new thread runs a guest instruction) before it can call back.
struct Global(UnsafeCell<Option<State>>);

// SAFETY: see `Global`: one thread at a time, ordered by thread creation.
unsafe impl Sync for Global {}

static STATE: Global = Global(UnsafeCell::new(None));

struct State {
    fd: c_int,
    writer: Writer,
    maps: maps::Known,
    /// A fork or clone3 in flight (its return tells parent from child).
    forking: bool,
    /// The system call that returned, until the next instruction runs (QE7).
    returned: Option<u64>,
}

/// The state, if tracing is on.
///
/// # Safety
/// Only from a callback on the main thread while [`OFF`] is clear (see [`Global`]).
unsafe fn state() -> Option<&'static mut State> {
    if OFF.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe { (*STATE.0.get()).as_mut() }
}

impl State {
    fn send(&mut self) {
        let fd = self.fd;
        self.writer.take(&mut |mut bytes: &[u8]| {
            while !bytes.is_empty() {
                // SAFETY: a valid buffer; MSG_NOSIGNAL: a closed peer is EPIPE, not a signal.
                let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
                if n < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    // ptemu run is gone: the program runs on, untraced.
                    OFF.store(true, Ordering::Relaxed);
                    return;
                }
                bytes = &bytes[n as usize..];
            }
        });
    }

    /// A note, sent at once; with `stop`, the last thing the plugin sends.
    fn note(&mut self, kind: NoteKind, value: u64, text: &str, stop: bool) {
        self.writer.note(kind, value, text);
        self.send();
        if stop {
            OFF.store(true, Ordering::Relaxed);
        }
    }
}

/// Called by QEMU when it loads the plugin: `fd=N` names the socket to write to.
///
/// # Safety
/// QEMU's contract: `info` is valid for the call, `argv` holds `argc` C strings.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const QemuInfo,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    let api = match Api::resolve() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ptemu-qemu: {e}");
            return 1;
        }
    };
    let api = *API.get_or_init(|| api);
    // SAFETY: QEMU's contract.
    let info = unsafe { &*info };
    // SAFETY: QEMU's contract: a C string.
    let target = unsafe { CStr::from_ptr(info.target_name) }.to_string_lossy();
    if target != "x86_64" || info.system_emulation {
        api.print(&format!(
            "ptemu-qemu: traces x86_64 programs in user mode (qemu-x86_64), not {target}{}",
            if info.system_emulation {
                " system emulation"
            } else {
                ""
            }
        ));
        return 1;
    }
    let mut fd = None;
    for k in 0..usize::try_from(argc).unwrap_or(0) {
        // SAFETY: QEMU's contract: `argc` C strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(k)) }.to_string_lossy();
        match arg.split_once('=') {
            Some(("fd", n)) => fd = n.parse::<c_int>().ok(),
            _ => {
                api.print(&format!("ptemu-qemu: unknown argument {arg:?} (expected fd=N)"));
                return 1;
            }
        }
    }
    let Some(fd) = fd else {
        api.print("ptemu-qemu: no fd=N argument: the plugin is started by `ptemu run`, which passes it");
        return 1;
    };
    // The socket moves out of the guest's way, to a high descriptor (programs use the low
    // ones, and a shell's `exec 4>file` would take it), close-on-exec so that it does not
    // reach a program the guest execs.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        (limit.rlim_cur.min(1 << 20) as c_int - 64).max(100)
    } else {
        100
    };
    // SAFETY: fcntl on a descriptor number; a bad one fails with EBADF.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top) };
    if moved < 0 {
        api.print(&format!(
            "ptemu-qemu: fd={fd}: {}",
            std::io::Error::last_os_error()
        ));
        return 1;
    }
    // SAFETY: the descriptor `ptemu run` passed, which the plugin owns.
    unsafe { libc::close(fd) };
    let fd = moved;
    let mut st = State {
        fd,
        writer: Writer::new(),
        maps: maps::Known::default(),
        forking: false,
        returned: None,
    };
    // The magic goes at once: `ptemu run` knows the plugin loaded.
    st.send();
    // SAFETY: install runs before any guest code, on the main thread.
    unsafe { *STATE.0.get() = Some(st) };
    // SAFETY: registering callbacks of the documented signatures with QEMU's own id.
    unsafe {
        (api.register_tb_trans)(id, on_translate);
        (api.register_vcpu_init)(id, on_vcpu_init);
        (api.register_syscall)(id, on_syscall);
        (api.register_syscall_ret)(id, on_syscall_ret);
        (api.register_atexit)(id, on_exit, std::ptr::null_mut());
    }
    0
}

/// A block was translated: it goes out with its instructions' bytes, each instruction gets the
/// execution callback with its id.
unsafe extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    // SAFETY: a callback on the main thread (see `Global`).
    let Some(st) = (unsafe { state() }) else { return };
    let api = API.get().expect("set at install");
    // SAFETY: `tb` is valid for the callback, and so are the handles it gives.
    unsafe {
        let n = (api.tb_n_insns)(tb);
        if n == 0 {
            return;
        }
        let vaddr = (api.tb_vaddr)(tb);
        let insns: Vec<_> = (0..n).map(|k| (api.tb_get_insn)(tb, k)).collect();
        let starts: Vec<u64> = insns.iter().map(|&i| (api.insn_vaddr)(i)).collect();
        let last = starts[n - 1].wrapping_sub(vaddr) as usize;
        let host = (api.insn_haddr)(insns[0]) as usize;
        // QE2: where each instruction starts is QEMU's; the bytes are read from guest memory
        // (QEMU 7.2 leaves some immediates out of its instruction data), and the length of each
        // is the decoder's on the other side.
        match st.maps.locate(vaddr, host, last + 1) {
            Ok(new) => {
                for m in new {
                    st.writer.map(&m);
                }
            }
            Err((addr, what)) => {
                st.note(NoteKind::AnonymousCode, addr, &what, true);
                return;
            }
        }
        let distances: Vec<u64> = starts.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        let code = st
            .maps
            .read_code(vaddr, last + ptemu::sources::qemu::wire::MAX_INSN_LEN);
        if code.len() <= last {
            st.note(
                NoteKind::Failure,
                vaddr,
                "the translated code cannot be read",
                true,
            );
            return;
        }
        let id = st.writer.block(vaddr, &distances, &code);
        // One callback a block (QE13): QEMU runs a block's instructions one after another to
        // its end, but for a fault, so its first id and count say what ran.
        (api.register_tb_exec)(tb, on_exec, CB_NO_REGS, block_data(id, n));
    }
}

/// Bits of a block callback's data that hold its instruction count (QEMU's blocks hold at most
/// 512).
const COUNT_BITS: u32 = 12;

/// A block's first instruction id and instruction count, as its callback's data.
fn block_data(first: u64, n: usize) -> *mut c_void {
    debug_assert!(n < 1 << COUNT_BITS);
    ((first << COUNT_BITS) | n as u64) as usize as *mut c_void
}

/// A block starts executing: its instructions' ids go into the stream.
unsafe extern "C" fn on_exec(_vcpu: c_uint, data: *mut c_void) {
    // SAFETY: a callback on the main thread (see `Global`).
    let Some(st) = (unsafe { state() }) else { return };
    if let Some(num) = st.returned.take() {
        st.note(NoteKind::Returned, num, "", false);
    }
    let data = data as usize as u64;
    st.writer
        .exec_block(data >> COUNT_BITS, data & ((1 << COUNT_BITS) - 1));
    if st.writer.pending() >= SEND_AT {
        st.send();
    }
}

unsafe extern "C" fn on_vcpu_init(_id: PluginId, vcpu: c_uint) {
    if vcpu == 0 {
        return;
    }
    // SAFETY: the new vCPU is made by the thread that cloned, before the new thread runs.
    if let Some(st) = unsafe { state() } {
        st.note(NoteKind::Thread, u64::from(vcpu), "a second vCPU", true);
    }
}

const SYS_CLOSE: i64 = 3;
const SYS_RT_SIGACTION: i64 = 13;
const SYS_DUP2: i64 = 33;
const SYS_DUP3: i64 = 292;
const SYS_CLOSE_RANGE: i64 = 436;
const SYS_CLONE: i64 = 56;
const SYS_FORK: i64 = 57;
const SYS_VFORK: i64 = 58;
const SYS_EXECVE: i64 = 59;
const SYS_EXECVEAT: i64 = 322;
const SYS_CLONE3: i64 = 435;
const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_syscall(
    _id: PluginId,
    _vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    _a3: u64,
    _a4: u64,
    _a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    // SAFETY: a callback on the main thread (see `Global`).
    let Some(st) = (unsafe { state() }) else { return };
    // QE7: everything up to this SYSCALL goes out now. QEMU 7.2 calls no plugin callback when
    // a signal kills the program, so a stream cut by a kill ends at a system call exactly when
    // the program was in one (`ptemu run` refuses the other case).
    st.writer.note(NoteKind::Syscall, num as u64, "");
    st.send();
    let ours = st.fd as u64;
    match num {
        SYS_CLOSE if a1 == ours => st.note(
            NoteKind::Failure,
            a1,
            "the program closed the plugin's socket",
            true,
        ),
        SYS_DUP2 | SYS_DUP3 if a2 == ours => st.note(
            NoteKind::Failure,
            a2,
            "the program put another file on the plugin's socket",
            true,
        ),
        SYS_CLOSE_RANGE if a1 <= ours && ours <= a2 => st.note(
            NoteKind::Failure,
            a1,
            "the program closed the descriptors the plugin's socket is among",
            true,
        ),
        SYS_CLONE | SYS_CLONE3 => {
            // clone3's flags are the first field of its clone_args.
            let flags = if num == SYS_CLONE {
                Some(a1)
            } else {
                st.maps.read_u64(a1)
            };
            match flags {
                // QEMU runs a vfork as a fork; CLONE_VM alone is a thread.
                Some(f) if f & CLONE_VM == 0 || f & CLONE_VFORK != 0 => st.forking = true,
                f => st.note(NoteKind::Thread, f.unwrap_or(0), "clone", true),
            }
        }
        // Everything was sent above: the child has nothing of the parent's left to send.
        SYS_FORK | SYS_VFORK => st.forking = true,
        SYS_EXECVE | SYS_EXECVEAT => {
            let path = st.maps.read_str(if num == SYS_EXECVE { a1 } else { a2 });
            st.note(NoteKind::Exec, 0, &path.unwrap_or_default(), false);
        }
        SYS_RT_SIGACTION if a2 != 0 => {
            // The new action's handler is its first field; 0 and 1 are SIG_DFL and SIG_IGN.
            if let Some(h) = st.maps.read_u64(a2).filter(|&h| h > 1) {
                st.writer.note(NoteKind::Handler, h, "");
            }
        }
        _ => {}
    }
}

unsafe extern "C" fn on_syscall_ret(_id: PluginId, _vcpu: c_uint, num: i64, ret: i64) {
    // SAFETY: a callback on the main thread (see `Global`).
    let Some(st) = (unsafe { state() }) else { return };
    if st.forking && matches!(num, SYS_CLONE | SYS_CLONE3 | SYS_FORK | SYS_VFORK) {
        st.forking = false;
        if ret == 0 {
            // The child: it is not traced; its copy of the socket closes.
            OFF.store(true, Ordering::Relaxed);
            // SAFETY: closing the descriptor this process owns.
            unsafe { libc::close(st.fd) };
            return;
        }
        if ret > 0 {
            st.writer.note(NoteKind::Fork, ret as u64, "");
        }
    }
    // QE7: said (and sent) when the next instruction runs: a stream that ends without it ended
    // inside the system call (a signal the call sent kills the program as it returns).
    st.returned = Some(num as u64);
}

unsafe extern "C" fn on_exit(_id: PluginId, _data: *mut c_void) {
    // SAFETY: at exit no other guest thread runs a callback that sees OFF clear.
    let Some(st) = (unsafe { state() }) else { return };
    st.writer.end();
    st.send();
    OFF.store(true, Ordering::Relaxed);
}
