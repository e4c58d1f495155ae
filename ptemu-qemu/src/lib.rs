//! ptemu's QEMU TCG plugin: loaded by `qemu-x86_64` (user mode), it sends every block the guest
//! translates and each thread's executions of them, the files its code runs from and what the
//! program does that the trace must know of (system calls, threads, signal handlers, code no
//! file holds) to `ptemu run`, over the socket `ptemu run` names with `fd=N` (spec/qemu.md). The
//! stream's format is the `ptemu-wire` crate's; the events and the trace are made on the
//! other side, so the guest runs on while the tracer works on another core. A forked child hands
//! the socket of its own stream over through the fork descriptor `forks=M` (QE18, QE19).
//!
//! ```text
//! qemu-x86_64 -plugin target/release/libptemu_qemu.so,fd=3,forks=4 PROGRAM   # as ptemu run starts it
//! ```

mod api;
mod death;
mod maps;
mod system;

use api::{Api, PluginId, QemuInfo, Tb, CB_NO_REGS};
use ptemu_wire::{DeathCause, DeathNote, FaultNote, HandlerNote, NoteKind, Writer};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// The plugin API version the plugin declares; QEMU reads it after loading the library and
/// refuses one outside what it supports (QE23): QEMU 7.2 takes only 1, QEMU 10.0 takes 2 to 4.
/// Every function the plugin calls has the same signature in versions 1 and 2, so the library
/// declares 1, and `choose_api_version` makes it 2 or 4 when it loads into a QEMU that has
/// those versions' functions. An `AtomicI32` is an `int` in memory, so QEMU reads it as one.
#[no_mangle]
#[used]
pub static qemu_plugin_version: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

/// The plugin API version for the QEMU the library is loaded into: 4 where QEMU exports
/// `qemu_plugin_read_memory_vaddr`, which version 4 (QEMU 9.2) added and system mode reads the
/// guest's IDT and stack with (QE25); 2 where it exports only `qemu_plugin_scoreboard_new`,
/// which version 2 (QEMU 9.0) added (system mode then refuses to start, naming the function);
/// else 1.
fn api_version_of_host() -> c_int {
    let has = |name: &CStr| {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the whole process.
        !unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }.is_null()
    };
    if has(c"qemu_plugin_read_memory_vaddr") {
        4
    } else if has(c"qemu_plugin_scoreboard_new") {
        2
    } else {
        1
    }
}

/// Runs from `.init_array` while QEMU loads the library, before QEMU reads
/// [`qemu_plugin_version`]: sets it to the host's version ([`api_version_of_host`]).
extern "C" fn choose_api_version() {
    qemu_plugin_version.store(api_version_of_host(), Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static CHOOSE_API_VERSION: extern "C" fn() = choose_api_version;

/// Executed blocks a thread gathers before they go to the socket (4 bytes each: 256 KiB). On the
/// `qemu_run` bench's gzip, 64 KiB cost 0.08-0.12 s more CPU (four times the writes and the
/// reader's wake-ups); 1 MiB measured the same as 256 KiB.
const IDS: usize = 1 << 16;

/// The most vCPUs (guest threads alive at once) the plugin keeps apart; QEMU gives a new thread
/// the lowest index above every live one.
const MAX_VCPUS: usize = 1024;

/// Set once the plugin must not write again: the program was refused, this is a forked child,
/// or `ptemu run` went away. Checked first by every callback.
static OFF: AtomicBool = AtomicBool::new(false);

static API: OnceLock<Api> = OnceLock::new();

/// What every thread shares (QE15): the socket, the record of translated blocks and file
/// mappings, and the notes about the whole process. Taken when a block is translated and when a
/// thread sends its chunk, never for an execution.
struct Shared {
    fd: c_int,
    writer: Writer,
    maps: maps::Known,
    /// Executions of the threads that ended and whose slots other threads took.
    executed: u64,
    /// The descriptor a forked child hands its own stream's socket to `ptemu run` through
    /// (QE18, QE19), if `ptemu run` gave one: a datagram socket no other process can reach.
    fork_fd: Option<c_int>,
    /// Every process record sent so far (blocks, mappings, handlers): a forked child's stream
    /// starts with them, so that its blocks keep their ids (QE18).
    history: Vec<u8>,
    /// The signal handlers installed (QE16, QE21): each with the signals it handles (a bit each)
    /// and its restorer (where it returns to, the first word of the signal frame).
    handlers: Vec<Handler>,
    /// The fault handlers' first blocks translated: first instruction id and address (QE21).
    handler_blocks: Vec<(u64, u64)>,
}

/// A signal handler the program installed (QE21).
#[derive(Clone, Copy, Debug)]
struct Handler {
    entry: u64,
    signals: u64,
    restorer: u64,
    /// SA_SIGINFO: QEMU writes the siginfo into the frame only then.
    siginfo: bool,
}

/// SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV, SIGSYS: the signals an instruction raises (QE21).
const FAULT_SIGNALS: u64 = 1 << 4 | 1 << 5 | 1 << 7 | 1 << 8 | 1 << 11 | 1 << 31;

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// The socket's descriptor, readable without [`SHARED`]'s lock: a forked child whose copy of the
/// lock is held (by a thread the child does not have) closes it (QE18).
static FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The fork descriptor (QE19), or -1: closed with [`FD`] by a child that is not traced.
static FORK_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// One guest thread's state, in the slot of its vCPU index. The first fields are all a block's
/// execution touches (`on_exec`): it stores the block's index and counts while `len < limit`;
/// everything else a thread must do between two blocks sets `limit` to 0, so that the next
/// execution takes the slow path (`on_exec_slow`) and does it there: the start of a thread, the
/// QE7 note that a system call returned, a full buffer, a slot another thread may take over,
/// the executions of a fault's handler held back until its signal frame is found (QE21).
struct Thread {
    /// Indices stored in `ids`.
    len: u32,
    /// `IDS`, or 0 when the next execution must take the slow path.
    limit: u32,
    /// Instructions executed (the blocks' instruction counts: REP iterations each), by the
    /// plugin's count (QE15).
    executed: u64,
    /// `IDS` indices of the blocks executed since the last chunk (allocated when the slot is
    /// first used, kept when another thread takes the slot over), or null.
    ids: *mut u32,
    /// Its tid (0: the slot holds no thread).
    tid: u64,
    /// Its notes, sent in chunks behind a thread record after its executions.
    writer: Writer,
    /// A fork or clone3 in flight (its return tells parent from child).
    forking: bool,
    /// The system call that returned, until the next block runs (QE7).
    returned: Option<u64>,
    /// Its exit began and its count went out (QE15); an exit that QEMU restarts (a signal came)
    /// goes on counting in the same slot.
    ended: bool,
    /// The executions from a fault handler's first block on, held back until a memory access
    /// finds its signal frame (QE21): the fault's note must come before them.
    held: Vec<u64>,
    /// The vCPU's `CPUX86State`, as its blocks' callback saw it (QE22), or 0.
    env: usize,
}

impl Thread {
    /// A slot with no thread.
    const EMPTY: Thread = Thread {
        len: 0,
        limit: 0,
        executed: 0,
        ids: std::ptr::null_mut(),
        tid: 0,
        writer: Writer::chunks(),
        forking: false,
        returned: None,
        ended: false,
        held: Vec::new(),
        env: 0,
    };

    /// The slot made empty, keeping its buffer.
    fn clear(&mut self) {
        let ids = self.ids;
        *self = Thread { ids, ..Thread::EMPTY };
    }

    /// The blocks executed since the last chunk.
    fn ids(&mut self) -> &mut [u32] {
        if self.ids.is_null() {
            return &mut [];
        }
        // SAFETY: `ids` holds `IDS` indices, `len` of them stored; the slot's thread alone
        // touches it (see `Slot`).
        unsafe { std::slice::from_raw_parts_mut(self.ids, self.len as usize) }
    }

    /// A note of this thread's, after every block it stored: those go into the writer first
    /// (as a batch record) when there are any, so that a chunk, the writer's records and then
    /// the stored indices, keeps the order things happened in.
    fn put_note(&mut self, kind: NoteKind, value: u64, text: &str) {
        self.seal();
        self.writer.note(kind, value, text);
    }

    /// The stored indices moved into the writer as a batch record.
    fn seal(&mut self) {
        if self.len > 0 {
            let mut writer = std::mem::replace(&mut self.writer, Writer::chunks());
            writer.exec_blocks(self.ids());
            self.writer = writer;
            self.len = 0;
        }
    }
}

/// Threads holding executions back (QE21): while there are any, every block translated gets the
/// memory callbacks that look for the signal frame (the handler's blocks after its first, whose
/// accesses may be the first to reach the frame).
static HOLDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The most executions a thread holds back looking for a fault's signal frame (QE21): past
/// them it writes them and `ptemu run` refuses the handler (QE16).
const MAX_HELD: usize = 256;

/// QE22: what each slot's thread is doing, for the thread a signal kills the process from:
/// [`RUNNING`] guest code (or about to), [`IN_SYSCALL`] from a system call's start to the next
/// block (its stream ends in the call), [`STOPPED`] by the process's death (it runs no more).
static STATE: [std::sync::atomic::AtomicU8; MAX_VCPUS] =
    [const { std::sync::atomic::AtomicU8::new(RUNNING) }; MAX_VCPUS];
const RUNNING: u8 = 0;
const IN_SYSCALL: u8 = 1;
const STOPPED: u8 = 2;

/// SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV: the signals for which QEMU 7.2
/// stops every other vCPU (`stop_all_tasks`, its `core_dump_signal` list) before it kills the
/// process (QE22). SIGXCPU, SIGXFSZ and SIGSYS also dump core on Linux, but QEMU does not stop
/// the other vCPUs for them: their buffers must not be touched then (those threads still run).
const CORE_SIGNALS: u64 = 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 11;

/// A thread that must run no more (the process is dying, QE22): it waits for the signal that
/// kills it.
fn park() -> ! {
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}

/// QE22: QEMU is about to kill the process with signal `sig` (its default action), from this
/// thread. Everything the plugin holds goes out now: this thread's executions with a note of
/// where it is (`Killed`: the faulting instruction, or the one a signal came before) and, when
/// QEMU stopped the other vCPUs first (a signal that dumps core), theirs with a note of where
/// each stopped (`Stopped`).
///
/// # Safety
/// Only from QEMU's `kill` of its own process (`death::hook_kill`), on the dying thread.
unsafe fn on_death(sig: c_int) {
    if OFF.load(Ordering::Relaxed) {
        return;
    }
    let Some(me) = death::VCPU.with(std::cell::Cell::get) else {
        return;
    };
    let mut guard = shared();
    let Some(sh) = guard.as_mut() else { return };
    // SAFETY: this thread's own slot.
    let t = unsafe { &mut *SLOTS[me as usize].0.get() };
    let fault = death::LAST_FAULT
        .with(std::cell::Cell::get)
        .filter(|f| f.executed == t.executed);
    // The instructions the thread's blocks began since this signal was sent to it: the reader
    // knows whether that is within its last block.
    let sent = death::LAST_SENT
        .with(std::cell::Cell::get)
        .filter(|s| s.sig == sig)
        .map(|s| t.executed.wrapping_sub(s.executed));
    let cause = match (fault, sent) {
        (Some(f), _) => DeathCause::Fault {
            code: f.code,
            addr: f.addr,
        },
        (None, Some(since)) => DeathCause::Sent(since),
        (None, None) => DeathCause::Unknown,
    };
    last_words(t, me as usize, NoteKind::Killed, sig, cause, sh);
    if sig < 64 && CORE_SIGNALS & (1 << sig) != 0 {
        for (k, slot) in SLOTS.iter().enumerate() {
            if k == me as usize || STATE[k].load(Ordering::Relaxed) != RUNNING {
                continue;
            }
            // SAFETY: QEMU's stop_all_tasks holds every other vCPU outside guest code (and its
            // callbacks) now; a thread in a system call is IN_SYSCALL, and one that comes to
            // a system call's callbacks after this finds STOPPED and parks.
            let o = unsafe { &mut *slot.0.get() };
            if o.tid == 0 || o.ended {
                continue;
            }
            STATE[k].store(STOPPED, Ordering::Relaxed);
            last_words(o, k, NoteKind::Stopped, sig, DeathCause::Unknown, sh);
        }
    }
    OFF.store(true, Ordering::Relaxed);
}

/// QE22: thread `t` (slot `k`) sends what it holds; unless it is in a system call, its last
/// block's execution goes in a note of `kind` with the RIP of its vCPU: the signal, the block's
/// index and what `cause` says: a host fault's `si_code` and address, `sent` and the
/// instructions begun since, or `- -`.
fn last_words(t: &mut Thread, k: usize, kind: NoteKind, sig: c_int, cause: DeathCause, sh: &mut Shared) {
    t.release_handler_exec();
    let in_call = t.returned.is_some() || STATE[k].load(Ordering::Relaxed) == IN_SYSCALL;
    if !in_call && t.len > 0 {
        if let Some(rip) = death::rip(t.env, |a| sh.maps.read_u64(a)) {
            t.len -= 1;
            // SAFETY: within the `len + 1` indices stored.
            let index = unsafe { *t.ids.add(t.len as usize) };
            let note = DeathNote {
                signo: sig as u32,
                block: index,
                cause,
            };
            t.put_note(kind, rip, &note.text());
        }
    }
    sh.send(Some(t));
}

/// The plugin's count of the executions of slot `vcpu`'s thread, read by that thread (QE22).
pub(crate) fn executed_by(vcpu: u32) -> u64 {
    SLOTS.get(vcpu as usize).map_or(u64::MAX, |s| {
        // SAFETY: called on the slot's own thread (a signal handler interrupting its guest code).
        unsafe { (*s.0.get()).executed }
    })
}

/// A vCPU's slot. Only the vCPU's own thread touches it, but for `on_exit` (the process's end)
/// and a forked child (which has one thread), both under the conditions they state.
struct Slot(UnsafeCell<Thread>);

// SAFETY: see `Slot`: one thread at a time.
unsafe impl Sync for Slot {}

static SLOTS: [Slot; MAX_VCPUS] = [const { Slot(UnsafeCell::new(Thread::EMPTY)) }; MAX_VCPUS];

/// The calling vCPU's thread state, if tracing is on.
///
/// # Safety
/// Only from a callback of vCPU `vcpu`, on its own thread (see [`Slot`]).
#[inline(always)]
unsafe fn thread(vcpu: c_uint) -> Option<&'static mut Thread> {
    if OFF.load(Ordering::Relaxed) {
        return None;
    }
    let Some(slot) = SLOTS.get(vcpu as usize) else {
        if let Some(sh) = shared().as_mut() {
            sh.note(
                NoteKind::Failure,
                u64::from(vcpu),
                &format!("more than {MAX_VCPUS} threads at once"),
                true,
            );
        }
        return None;
    };
    // SAFETY: the caller's contract.
    let t = unsafe { &mut *slot.0.get() };
    if t.tid != 0 && t.ended {
        // SAFETY: gettid has no preconditions.
        if unsafe { libc::gettid() } as u64 == t.tid {
            t.ended = false;
        } else {
            // Another thread has the vCPU index of one that exited.
            if let Some(sh) = shared().as_mut() {
                sh.executed += t.executed;
            }
            t.clear();
        }
    }
    if t.tid == 0 {
        death::VCPU.with(|c| c.set(Some(vcpu)));
        STATE[vcpu as usize].store(RUNNING, Ordering::Relaxed);
        // SAFETY: gettid has no preconditions.
        t.tid = unsafe { libc::gettid() } as u64;
        if t.ids.is_null() {
            t.ids = Box::into_raw(vec![0u32; IDS].into_boxed_slice()).cast::<u32>();
        }
    }
    Some(t)
}

/// Sends `parts` to `fd` one after another, in one gathering write when the socket takes them
/// whole; false when `ptemu run` is gone (the program runs on, untraced).
fn send_parts(fd: c_int, parts: &[&[u8]]) -> bool {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 4];
    let mut n = 0;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        if n == iov.len() {
            return parts.iter().all(|p| send_all(fd, p));
        }
        iov[n] = libc::iovec {
            iov_base: p.as_ptr().cast_mut().cast(),
            iov_len: p.len(),
        };
        n += 1;
    }
    let mut at = 0;
    while at < n {
        // SAFETY: a message of `n - at` valid buffers; MSG_NOSIGNAL: a closed peer is EPIPE, not
        // a signal.
        let sent = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov[at..].as_mut_ptr();
            msg.msg_iovlen = (n - at) as _;
            libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL)
        };
        if sent < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            OFF.store(true, Ordering::Relaxed);
            return false;
        }
        // A short write: on from where it stopped.
        let mut sent = sent as usize;
        while at < n && sent >= iov[at].iov_len {
            sent -= iov[at].iov_len;
            at += 1;
        }
        if at < n {
            // SAFETY: within the buffer: `sent` is less than its length.
            iov[at].iov_base = unsafe { iov[at].iov_base.cast::<u8>().add(sent) }.cast();
            iov[at].iov_len -= sent;
        }
    }
    true
}

/// Sends `bytes` to `fd`; false when `ptemu run` is gone (the program runs on, untraced; in
/// system mode, the machine).
pub(crate) fn send_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: a valid buffer; MSG_NOSIGNAL: a closed peer is EPIPE, not a signal.
        let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            OFF.store(true, Ordering::Relaxed);
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

impl Shared {
    /// Sends what the process's writer holds, then `thread`'s chunk: blocks always reach the
    /// stream before any execution of theirs.
    fn send(&mut self, thread: Option<&mut Thread>) {
        let fd = self.fd;
        let mut ok = true;
        let history = &mut self.history;
        let keep = self.fork_fd.is_some();
        self.writer.take_chunk(0, &mut |b: &[u8]| {
            if keep {
                history.extend_from_slice(b);
            }
            ok = ok && send_all(fd, b);
        });
        if let Some(t) = thread {
            // Its records (notes, and the blocks stored before each, `Thread::put_note`), then
            // the blocks it executed since: one write, those indices not copied.
            let tid = t.tid;
            let mut writer = std::mem::replace(&mut t.writer, Writer::chunks());
            writer.take_chunk_with(tid, t.ids(), &mut |parts| ok = ok && send_parts(fd, parts));
            t.writer = writer;
            t.len = 0;
        }
    }

    /// QE18, in a forked child: a stream of its own, on a new socket whose other end goes to
    /// `ptemu run` through the fork descriptor (QE19), starting with the process records so far;
    /// false if it cannot be made.
    fn fork_stream(&mut self) -> bool {
        let Some(forks) = self.fork_fd else {
            return false;
        };
        let Some(fd) = hand_over_socket(forks) else {
            return false;
        };
        // SAFETY: closing this process's copy of the parent's socket.
        unsafe { libc::close(self.fd) };
        self.fd = fd;
        FD.store(fd, Ordering::Relaxed);
        // Its count is its own: the parent's ended threads are not its.
        self.executed = 0;
        let mut magic = Writer::new();
        let mut ok = true;
        magic.take(&mut |b| ok = ok && send_all(fd, b));
        ok && send_all(fd, &self.history)
    }

    /// A note about the whole process, sent at once; with `stop`, the last thing the plugin
    /// sends.
    fn note(&mut self, kind: NoteKind, value: u64, text: &str, stop: bool) {
        self.writer.note(kind, value, text);
        self.send(None);
        if stop {
            OFF.store(true, Ordering::Relaxed);
        }
    }
}

fn shared() -> std::sync::MutexGuard<'static, Option<Shared>> {
    // A panic while holding it cannot leave the writer worse than half a record, which `ptemu
    // run` reports: poisoning is ignored.
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

impl Thread {
    /// Sends this thread's chunk (with the process's records before it).
    fn send(&mut self) {
        if let Some(sh) = shared().as_mut() {
            sh.send(Some(self));
        }
    }

    /// A note of this thread's, sent at once; with `stop`, the last thing the plugin sends.
    fn note(&mut self, kind: NoteKind, value: u64, text: &str, stop: bool) {
        self.put_note(kind, value, text);
        self.send();
        if stop {
            OFF.store(true, Ordering::Relaxed);
        }
    }

    /// QE21: the executions held back, stored now: after the fault's note, or without one
    /// when no frame was found before the thread made a system call, ended or held
    /// [`MAX_HELD`] (`ptemu run` refuses the handler then, as QE16 says). Sends nothing (its
    /// callers may hold the lock): a full buffer goes into the writer.
    fn release_handler_exec(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        for &data in &held {
            if self.len as usize >= IDS {
                self.seal();
            }
            // SAFETY: `thread` allocated `IDS` indices, and `len < IDS` now.
            unsafe { *self.ids.add(self.len as usize) = data as u32 };
            self.len += 1;
            self.executed += data >> 32;
        }
        self.held = held;
        self.held.clear();
        HOLDING.fetch_sub(1, Ordering::Relaxed);
    }

    /// The thread's last chunk: its count of executions so far (QE15). Its next execution, if
    /// QEMU restarts the exit, takes the slow path, which tells it from another thread that got
    /// its vCPU index.
    fn end(&mut self, sh: &mut Shared) {
        if self.ended {
            return;
        }
        self.release_handler_exec();
        let n = self.executed;
        self.put_note(NoteKind::ThreadEnd, n, "");
        sh.send(Some(self));
        self.ended = true;
        self.limit = 0;
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
    if target == "x86_64" && info.system_emulation {
        let arg = |k: usize| {
            // SAFETY: QEMU's contract: `argc` C strings.
            let c = unsafe { CStr::from_ptr(*argv.add(k)) };
            c.to_string_lossy().into_owned()
        };
        let args: Vec<String> = (0..usize::try_from(argc).unwrap_or(0)).map(arg).collect();
        // SAFETY: QEMU's install contract, passed on.
        return unsafe { system::install(id, info, &args) };
    }
    if target != "x86_64" || info.system_emulation {
        // On stderr: QEMU's system emulator shows the plugin's own output only with `-d plugin`.
        eprintln!(
            "ptemu-qemu: traces x86_64 programs in user mode (qemu-x86_64), not {target}{} \
             (plugin API version {}, QEMU's {}..={})",
            if info.system_emulation {
                " system emulation"
            } else {
                ""
            },
            qemu_plugin_version.load(Ordering::Relaxed),
            info.version_min,
            info.version_cur,
        );
        return 1;
    }
    let mut fd = None;
    let mut fork_fd = None;
    for k in 0..usize::try_from(argc).unwrap_or(0) {
        // SAFETY: QEMU's contract: `argc` C strings.
        let arg = unsafe { CStr::from_ptr(*argv.add(k)) }.to_string_lossy();
        match arg.split_once('=') {
            Some(("fd", n)) => fd = n.parse::<c_int>().ok(),
            Some(("forks", n)) => match n.parse::<c_int>() {
                Ok(n) => fork_fd = Some(n),
                Err(_) => {
                    api.print(&format!("ptemu-qemu: forks={n}: not a descriptor number"));
                    return 1;
                }
            },
            _ => {
                api.print(&format!(
                    "ptemu-qemu: unknown argument {arg:?} (expected fd=N and forks=M)"
                ));
                return 1;
            }
        }
    }
    let Some(fd) = fd else {
        api.print("ptemu-qemu: no fd=N argument: the plugin is started by `ptemu run`, which passes it");
        return 1;
    };
    // The socket moves out of the guest's way, close-on-exec so that it does not reach a
    // program the guest execs.
    // SAFETY: fcntl on a descriptor number; a bad one fails with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        api.print(&format!(
            "ptemu-qemu: fd={fd}: {}",
            std::io::Error::last_os_error()
        ));
        return 1;
    }
    let fd = high_fd(fd);
    let fork_fd = match fork_fd {
        // SAFETY: fcntl on a descriptor number; a bad one fails with EBADF.
        Some(f) if unsafe { libc::fcntl(f, libc::F_GETFD) } < 0 => {
            api.print(&format!(
                "ptemu-qemu: forks={f}: {}",
                std::io::Error::last_os_error()
            ));
            return 1;
        }
        Some(f) => Some(high_fd(f)),
        None => None,
    };
    FORK_FD.store(fork_fd.unwrap_or(-1), Ordering::Relaxed);
    // QE22: the plugin's last words when a signal kills the program (none in a static QEMU).
    death::hook_kill(on_death);
    let mut writer = Writer::new();
    // The magic goes at once: `ptemu run` knows the plugin loaded.
    writer.take(&mut |b| {
        send_all(fd, b);
    });
    FD.store(fd, Ordering::Relaxed);
    *shared() = Some(Shared {
        fd,
        writer,
        maps: maps::Known::default(),
        executed: 0,
        fork_fd,
        history: Vec::new(),
        handlers: Vec::new(),
        handler_blocks: Vec::new(),
    });
    // SAFETY: registering callbacks of the documented signatures with QEMU's own id.
    unsafe {
        (api.register_tb_trans)(id, on_translate);
        (api.register_syscall)(id, on_syscall);
        (api.register_syscall_ret)(id, on_syscall_ret);
        (api.register_atexit)(id, on_exit, std::ptr::null_mut());
    }
    0
}

/// A block was translated: it goes into the process's records with its instructions' bytes,
/// and gets the execution callback with its first id and count.
unsafe extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    if OFF.load(Ordering::Relaxed) {
        return;
    }
    let mut guard = shared();
    let Some(sh) = guard.as_mut() else { return };
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
        match sh.maps.locate(vaddr, host, last + 1) {
            Ok(new) => {
                for m in new {
                    sh.writer.map(&m);
                }
            }
            Err((addr, what)) => {
                sh.note(NoteKind::Failure, addr, &what, true);
                return;
            }
        }
        let distances: Vec<u64> = starts.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        let code = sh.maps.read_code(vaddr, last + ptemu_wire::MAX_INSN_LEN);
        if code.len() <= last {
            sh.note(
                NoteKind::Failure,
                vaddr,
                "the translated code cannot be read",
                true,
            );
            return;
        }
        let index = sh.writer.blocks();
        if index > u64::from(u32::MAX) {
            sh.note(
                NoteKind::Failure,
                vaddr,
                "more blocks translated than a 32-bit index names",
                true,
            );
            return;
        }
        sh.writer.block(vaddr, &distances, &code);
        let fault_handler = sh
            .handlers
            .iter()
            .any(|h| h.entry == vaddr && h.signals & FAULT_SIGNALS != 0);
        if fault_handler || HOLDING.load(Ordering::Relaxed) > 0 {
            // QE21: the blocks of a fault's handler find the signal frame through their memory
            // accesses (QEMU 7.2 shows no registers); the executions wait for it.
            for &insn in &insns {
                (api.register_mem)(
                    insn,
                    on_handler_mem,
                    CB_NO_REGS,
                    api::MEM_RW,
                    block_data(index as u32, n),
                );
            }
        }
        if fault_handler {
            sh.handler_blocks.push((index, vaddr));
            (api.register_tb_exec)(tb, on_handler_exec, CB_NO_REGS, block_data(index as u32, n));
            return;
        }
        // One callback a block (QE13): QEMU runs a block's instructions one after another to
        // its end, but for a fault, so its index says what ran.
        (api.register_tb_exec)(
            tb,
            death::exec_callback(),
            CB_NO_REGS,
            block_data(index as u32, n),
        );
    }
}

/// A block's index (its order of translation, the low 32 bits) and instruction count (the
/// high ones), as its callback's data.
fn block_data(index: u32, n: usize) -> *mut c_void {
    (u64::from(index) | (n as u64) << 32) as usize as *mut c_void
}

/// A block starts executing: its index goes into the thread's buffer (QE13). A store and an
/// increment; everything else waits for the slow path (see `Thread`).
///
/// QEMU calls it through `death::exec_callback`, which passes TCG's env register as `env`
/// (QE22): kept by the slow path.
pub(crate) unsafe extern "C" fn on_exec(vcpu: c_uint, data: *mut c_void, env: usize) {
    if let Some(slot) = SLOTS.get(vcpu as usize) {
        // SAFETY: a callback of `vcpu`, on its thread (see `Slot`).
        let t = unsafe { &mut *slot.0.get() };
        if t.len < t.limit {
            let data = data as usize as u64;
            // SAFETY: `len < limit <= IDS`: within the buffer (`limit` is `IDS` only once it is
            // allocated).
            unsafe { *t.ids.add(t.len as usize) = data as u32 };
            t.len += 1;
            t.executed += data >> 32;
            return;
        }
    }
    // SAFETY: the same callback.
    unsafe { on_exec_slow(vcpu, data, env) }
}

/// `on_exec` where no env register is known (a host other than x86-64): QE22 has no RIP.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe extern "C" fn on_exec_no_env(vcpu: c_uint, data: *mut c_void) {
    // SAFETY: the same callback.
    unsafe { on_exec(vcpu, data, 0) }
}

/// `on_exec` when the thread has something to do first: start, say that a system call returned
/// (QE7), send a full buffer, or find that another thread has the vCPU index (QE15).
///
/// # Safety
/// Only from `on_exec` (a callback of `vcpu`, on its thread).
#[cold]
#[inline(never)]
unsafe fn on_exec_slow(vcpu: c_uint, data: *mut c_void, env: usize) {
    // SAFETY: the caller's contract.
    let Some(t) = (unsafe { thread(vcpu) }) else {
        // Not traced any more: the program runs on, its blocks stored and dropped.
        if let Some(slot) = SLOTS.get(vcpu as usize) {
            // SAFETY: as in `on_exec`.
            let t = unsafe { &mut *slot.0.get() };
            if !t.ids.is_null() {
                t.len = 0;
                t.limit = IDS as u32;
            }
        }
        return;
    };
    if t.env == 0 {
        // QE22: where this vCPU's registers are; QEMU's handlers are installed by now.
        t.env = env;
        death::hook_host_faults();
    }
    let data = data as usize as u64;
    if !t.held.is_empty() {
        // QE21: a fault's handler runs on, its frame not found yet (the limit stays 0).
        t.held.push(data);
        if t.held.len() >= MAX_HELD {
            t.release_handler_exec();
            t.limit = IDS as u32;
        }
        return;
    }
    if let Some(num) = t.returned.take() {
        // QE7: the call returned and the program runs on: said at once.
        t.note(NoteKind::Returned, num, "", false);
        STATE[vcpu as usize].store(RUNNING, Ordering::Relaxed);
    }
    if t.len as usize >= IDS {
        t.send();
    }
    // SAFETY: `thread` allocated `IDS` indices, and `len < IDS` now.
    unsafe { *t.ids.add(t.len as usize) = data as u32 };
    t.len += 1;
    t.executed += data >> 32;
    t.limit = IDS as u32;
}

/// QE21: the first block of a fault signal's handler starts: its execution and the ones after
/// it are held back until a memory access finds the signal frame (`on_handler_mem`), so the
/// fault's note precedes them in the stream.
unsafe extern "C" fn on_handler_exec(vcpu: c_uint, data: *mut c_void) {
    // SAFETY: a callback of `vcpu`, on its thread.
    let Some(t) = (unsafe { thread(vcpu) }) else {
        return;
    };
    // A handler entered again before the frame of the first was found: that one is given up.
    t.release_handler_exec();
    if let Some(num) = t.returned.take() {
        t.note(NoteKind::Returned, num, "", false);
    }
    t.held.push(data as usize as u64);
    HOLDING.fetch_add(1, Ordering::Relaxed);
    // The blocks after it are held too: the slow path holds them.
    t.limit = 0;
}

/// Where the fields QE21 reads lie in the signal frame QEMU 7.2 writes for an x86-64 guest (its
/// `rt_sigframe`, as Linux lays it out), from the frame's start, the handler's stack pointer at
/// entry: the restorer, `uc_mcontext.rsp`, `.rip`, `.cr2` and `.fpregs`, `siginfo`'s `si_signo` and
/// `si_code` (QEMU writes the siginfo only for an SA_SIGINFO handler: zeros otherwise); the FP
/// state follows the siginfo at this offset.
const FRAME_RESTORER: u64 = 0;
const FRAME_RSP: u64 = 8 + 40 + 15 * 8;
const FRAME_RIP: u64 = 8 + 40 + 16 * 8;
const FRAME_CR2: u64 = 8 + 40 + 22 * 8;
const FRAME_FPREGS: u64 = 8 + 40 + 23 * 8;
const FRAME_SIGNO: u64 = 8 + 304;
const FRAME_CODE: u64 = FRAME_SIGNO + 8;
const FRAME_FPSTATE: u64 = 448;

/// How far from a handler's memory access its signal frame is looked for (QE21).
const FRAME_REACH: u64 = 4096;

/// QE21: a memory access of a block that runs while the thread holds its executions back from a
/// fault handler's entry on: the signal frame is looked for near it, and found, it goes out as
/// a note before the executions.
unsafe extern "C" fn on_handler_mem(vcpu: c_uint, _info: u32, vaddr: u64, _data: *mut c_void) {
    // SAFETY: a callback of `vcpu`, on its thread.
    let Some(t) = (unsafe { thread(vcpu) }) else {
        return;
    };
    let Some(&entry_block) = t.held.first() else {
        return;
    };
    let mut guard = shared();
    let Some(sh) = guard.as_mut() else { return };
    let index = u64::from(entry_block as u32);
    let Some(&(_, entry)) = sh.handler_blocks.iter().find(|b| b.0 == index) else {
        return;
    };
    let handlers: Vec<Handler> = sh.handlers.iter().copied().filter(|h| h.entry == entry).collect();
    if let Some(f) = find_frame(&sh.maps, vaddr, &handlers) {
        // The word below the interrupted stack pointer: what a RET just before the signal
        // would have popped (QE21 tells a fault from a signal sent after a RET by it).
        let below = f.rsp.checked_sub(8).and_then(|a| sh.maps.read_u64(a));
        let note = FaultNote {
            signo: f.signo,
            code: f.code,
            addr: f.addr,
            handler: entry,
            below,
        };
        t.put_note(NoteKind::Fault, f.rip, &note.text());
        drop(guard);
        t.release_handler_exec();
        t.limit = IDS as u32;
    }
}

/// A signal frame found (QE21).
struct Frame {
    rip: u64,
    rsp: u64,
    signo: u32,
    code: i32,
    addr: u64,
}

/// QE21: the signal frame near `access`, a memory access of the handler's first block: a frame
/// is where a restorer of `handlers` is followed, at the offsets QEMU writes, by an FP state
/// pointer to where QEMU puts the FP state (and, for an SA_SIGINFO handler, a siginfo of a
/// signal it handles). The frame the access lies in (the handler reads its siginfo or
/// context) if there is one, else the lowest at or above `access - 8` (a push's store lies 8
/// below the stack pointer at entry, which is the frame's start), within [`FRAME_REACH`]: a
/// stale frame of an earlier signal deeper down the stack is below the handler's accesses.
/// Its signal number and `si_code` are 0 when QEMU wrote no siginfo (a handler without
/// SA_SIGINFO: that part of the frame is the stack's old bytes).
fn find_frame(maps: &maps::Known, access: u64, handlers: &[Handler]) -> Option<Frame> {
    let lo = access.checked_sub(FRAME_REACH / 2)? & !7;
    let hi = access.checked_add(FRAME_REACH)?;
    // Page by page: a page that cannot be read (the stack's end) leaves zeros, which match no
    // restorer.
    let len = (hi + FRAME_SIGNO + 32 - lo) as usize;
    let mut window = vec![0u8; len];
    let mut at = 0usize;
    while at < len {
        let addr = lo + at as u64;
        let n = ((0x1000 - (addr & 0xfff)) as usize).min(len - at);
        let got = maps.read_code(addr, n);
        window[at..at + got.len()].copy_from_slice(&got);
        at += n;
    }
    let u64_at = |off: u64| -> u64 {
        let o = off as usize;
        u64::from_le_bytes(window[o..o + 8].try_into().expect("8 bytes"))
    };
    let frame_at = |off: u64| -> Option<Frame> {
        let restorer = u64_at(off + FRAME_RESTORER);
        if restorer == 0 || u64_at(off + FRAME_FPREGS) != lo + off + FRAME_FPSTATE {
            return None;
        }
        let signo = u64_at(off + FRAME_SIGNO) as u32;
        let code = (u64_at(off + FRAME_CODE) & 0xffff_ffff) as u32 as i32;
        let h = handlers.iter().find(|h| {
            h.restorer == restorer
                && (!h.siginfo || (signo < 64 && h.signals & (1 << signo) & FAULT_SIGNALS != 0))
        })?;
        let (signo, code) = if h.siginfo { (signo, code) } else { (0, 0) };
        Some(Frame {
            rip: u64_at(off + FRAME_RIP),
            rsp: u64_at(off + FRAME_RSP),
            signo,
            code,
            addr: u64_at(off + FRAME_CR2),
        })
    };
    let (mut inside, mut above) = (None, None);
    let mut off = 0;
    while lo + off < hi {
        let f = lo + off;
        if let Some(frame) = frame_at(off) {
            if f <= access && access < f + FRAME_FPSTATE {
                inside = Some(frame);
            } else if f + 8 >= access && above.is_none() {
                above = Some(frame);
            }
        }
        off += 8;
    }
    inside.or(above)
}

const SYS_EXIT: i64 = 60;
const SYS_CLOSE: i64 = 3;
const SYS_RT_SIGACTION: i64 = 13;
const SYS_DUP2: i64 = 33;
const SYS_DUP3: i64 = 292;
const SYS_CLOSE_RANGE: i64 = 436;
const SYS_SHUTDOWN: i64 = 48;
const SYS_CLONE: i64 = 56;
const SYS_FORK: i64 = 57;
const SYS_VFORK: i64 = 58;
const SYS_EXECVE: i64 = 59;
const SYS_EXECVEAT: i64 = 322;
const SYS_CLONE3: i64 = 435;
const SA_SIGINFO: u64 = 4;
const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_syscall(
    _id: PluginId,
    vcpu: c_uint,
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
    // SAFETY: a callback of `vcpu`, on its thread.
    let Some(t) = (unsafe { thread(vcpu) }) else {
        return;
    };
    // QE7: everything up to this SYSCALL goes out now, with the note that it began. QEMU 7.2
    // calls no plugin callback when a signal kills the program, so a stream cut by a kill ends
    // at a system call exactly when the program was in one (`ptemu run` refuses the other case).
    // The thread's records change only under the lock here: at the process's exit `on_exit`
    // ends every thread while the others may still be in a system call (QE15).
    let mut guard = shared();
    let Some(sh) = guard.as_mut() else { return };
    if OFF.load(Ordering::Relaxed) {
        return;
    }
    if STATE[vcpu as usize].load(Ordering::Relaxed) == STOPPED {
        // QE22: the process is dying and this thread's trace ends before this call.
        drop(guard);
        park();
    }
    STATE[vcpu as usize].store(IN_SYSCALL, Ordering::Relaxed);
    death::prove_env(t.env, num, a1, a2, |a| sh.maps.read_u64(a));
    t.release_handler_exec();
    t.put_note(NoteKind::Syscall, num as u64, "");
    if num == SYS_EXIT {
        // The thread leaves (exit_group ends the process: its threads end in `on_exit`): its
        // last chunk. Its slot goes to the next thread QEMU gives this vCPU index.
        t.end(sh);
        return;
    }
    sh.send(Some(&mut *t));
    let ours = sh.fd as u64;
    let forks = sh.fork_fd.map_or(ours, |f| f as u64);
    let (low, high) = (ours.min(forks), ours.max(forks));
    // Everything below writes the thread's records with the lock held (see above).
    let fail = |t: &mut Thread, sh: &mut Shared, value: u64, why: &str| {
        t.put_note(NoteKind::Failure, value, why);
        sh.send(Some(t));
        OFF.store(true, Ordering::Relaxed);
    };
    match num {
        SYS_CLOSE if a1 == ours || a1 == forks => fail(t, sh, a1, "the program closed the plugin's socket"),
        SYS_DUP2 | SYS_DUP3 if a2 == ours || a2 == forks => {
            fail(t, sh, a2, "the program put another file on the plugin's socket")
        }
        SYS_SHUTDOWN if a1 == ours || a1 == forks => {
            fail(t, sh, a1, "the program shut the plugin's socket down")
        }
        SYS_CLOSE_RANGE if a1 <= high && low <= a2 => fail(
            t,
            sh,
            a1,
            "the program closed the descriptors the plugin's socket is among",
        ),
        SYS_CLONE | SYS_CLONE3 => {
            // clone3's flags are the first field of its clone_args.
            let flags = if num == SYS_CLONE {
                Some(a1)
            } else {
                sh.maps.read_u64(a1)
            };
            // QEMU runs a vfork as a fork; CLONE_VM alone is a thread (QE15).
            t.forking = flags.is_some_and(|f| f & CLONE_VM == 0 || f & CLONE_VFORK != 0);
        }
        // Everything was sent above: the child has nothing of the parent's left to send.
        SYS_FORK | SYS_VFORK => t.forking = true,
        SYS_EXECVE | SYS_EXECVEAT => {
            let path = sh.maps.read_str(if num == SYS_EXECVE { a1 } else { a2 });
            t.put_note(NoteKind::Exec, 0, &path.unwrap_or_default());
            sh.send(Some(t));
        }
        SYS_RT_SIGACTION if a2 != 0 => {
            // The new action's handler is its first field (0 and 1 are SIG_DFL and SIG_IGN),
            // its restorer the third: a signal's handler returns there (QE16).
            let handler = sh.maps.read_u64(a2);
            if a1 < 64 {
                let bit = 1u64 << a1;
                for old in &mut sh.handlers {
                    old.signals &= !bit;
                }
                if let Some(entry) = handler.filter(|&h| h > 1) {
                    let restorer = sh.maps.read_u64(a2 + 16).unwrap_or(0);
                    let siginfo = sh.maps.read_u64(a2 + 8).is_some_and(|f| f & SA_SIGINFO != 0);
                    match sh
                        .handlers
                        .iter_mut()
                        .find(|o| o.entry == entry && o.restorer == restorer && o.siginfo == siginfo)
                    {
                        Some(o) => o.signals |= bit,
                        None => sh.handlers.push(Handler {
                            entry,
                            signals: bit,
                            restorer,
                            siginfo,
                        }),
                    }
                }
            }
            if let Some(h) = handler.filter(|&h| h > 1) {
                let restorer = sh.maps.read_u64(a2 + 16).unwrap_or(0);
                // The text: the signal's number (a fault's handler is refused) and the
                // restorer.
                sh.writer
                    .note(NoteKind::Handler, h, &HandlerNote { signo: a1, restorer }.text());
            }
        }
        _ => {}
    }
}

unsafe extern "C" fn on_syscall_ret(_id: PluginId, vcpu: c_uint, num: i64, ret: i64) {
    if STATE
        .get(vcpu as usize)
        .is_some_and(|s| s.load(Ordering::Relaxed) == STOPPED)
    {
        // QE22: the process is dying; this thread's trace ends in the call.
        park();
    }
    // SAFETY: a callback of `vcpu`, on its thread.
    let Some(t) = (unsafe { thread(vcpu) }) else {
        return;
    };
    let forked = t.forking && matches!(num, SYS_CLONE | SYS_CLONE3 | SYS_FORK | SYS_VFORK);
    if forked {
        t.forking = false;
        if ret == 0 {
            // QE18, the child: a stream of its own, its one thread the one that forked. The
            // lock may be held by a thread of the parent that the child does not have: then
            // the child is not traced (the parent's report lists it), rather than stuck.
            let traced = match SHARED.try_lock() {
                Ok(mut g) => g.as_mut().is_some_and(Shared::fork_stream),
                Err(_) => false,
            };
            if !traced {
                OFF.store(true, Ordering::Relaxed);
                // SAFETY: closing the descriptors this process owns.
                unsafe {
                    libc::close(FD.load(Ordering::Relaxed));
                    let forks = FORK_FD.load(Ordering::Relaxed);
                    if forks >= 0 {
                        libc::close(forks);
                    }
                }
                return;
            }
            for (k, slot) in SLOTS.iter().enumerate() {
                if k != vcpu as usize {
                    // SAFETY: the child has no other thread (see `Slot`).
                    unsafe { (*slot.0.get()).clear() };
                }
            }
            // Its one thread's stream starts afresh (the parent sent its blocks before the
            // fork): its own tid and count; the host faults and sent signals noted are the
            // parent's (QE22: counted by the parent's count, one of them could match the
            // child's own count at its death).
            t.clear();
            death::forget_signals();
            // SAFETY: gettid has no preconditions.
            t.tid = unsafe { libc::gettid() } as u64;
            t.returned = Some(num as u64);
            return;
        }
    }
    let guard = shared();
    if guard.is_none() || OFF.load(Ordering::Relaxed) {
        // The process is exiting (`on_exit` took the records): nothing more goes out.
        return;
    }
    if matches!(num, SYS_CLONE | SYS_CLONE3) && ret > 0 && !forked {
        // A thread started (QE15): the parent says so in its chunk; the child's own chunks
        // start with its first block.
        t.put_note(NoteKind::Thread, ret as u64, "");
    }
    if forked && ret > 0 {
        t.put_note(NoteKind::Fork, ret as u64, "");
    }
    // QE7: said (and sent) when the next block runs, which takes the slow path for it: a stream
    // that ends without it ended inside the system call (a signal the call sent kills the
    // program as it returns, after this callback).
    t.returned = Some(num as u64);
    t.limit = 0;
    drop(guard);
}

unsafe extern "C" fn on_exit(_id: PluginId, _data: *mut c_void) {
    if OFF.load(Ordering::Relaxed) {
        return;
    }
    // QEMU 7.2 calls this after the other vCPUs run again (outside its exclusive section):
    // threads in a system call may still be in a callback. The records leave SHARED, so that a
    // callback that takes the lock after this finds none and writes nothing; one that holds it
    // now is done before this goes on.
    let Some(mut sh) = shared().take() else { return };
    OFF.store(true, Ordering::Relaxed);
    let mut total = 0;
    for slot in &SLOTS {
        // SAFETY: every thread that could touch its slot waits for the lock first (see
        // `on_syscall`, `on_syscall_ret`) and finds the records gone; no block runs with the
        // plugin's callbacks any more (QEMU flushed them before this).
        let t = unsafe { &mut *slot.0.get() };
        if t.tid != 0 {
            total += t.executed;
            t.end(&mut sh);
        }
    }
    sh.writer.end_with(total + sh.executed);
    sh.send(None);
}

/// QE19: a new stream socket for this process, its other end handed to `ptemu run` over the
/// fork descriptor `forks` (one datagram holding it, which the kernel stamps with this
/// process's pid and uid); ours close-on-exec at a high descriptor.
fn hand_over_socket(forks: c_int) -> Option<c_int> {
    let mut pair = [0 as c_int; 2];
    // SAFETY: plain socket calls on local buffers of the sizes passed.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        ) < 0
        {
            return None;
        }
        let [mine, theirs] = pair;
        let space = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as usize;
        // u64s: the control buffer must be aligned for cmsghdr.
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut byte = *b"F";
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>(), theirs);
        // Never blocked for good: a `ptemu run` that does not take the hand-over within 10 s
        // (or is gone) leaves the child untraced, running on.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let sent = loop {
            let n = libc::sendmsg(forks, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
            if n >= 0 {
                break n;
            }
            match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock if std::time::Instant::now() < deadline => {
                    let mut p = libc::pollfd {
                        fd: forks,
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    libc::poll(&mut p, 1, 100);
                }
                _ => break -1,
            }
        };
        libc::close(theirs);
        if sent != 1 {
            libc::close(mine);
            return None;
        }
        Some(high_fd(mine))
    }
}

/// `fd` moved out of the guest's way, to a high descriptor (programs use the low ones, and a
/// shell's `exec 4>file` would take it), close-on-exec; `fd` itself is closed.
fn high_fd(fd: c_int) -> c_int {
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
    // SAFETY: fcntl and close on descriptor numbers; a bad one fails with EBADF.
    unsafe {
        let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top);
        if moved < 0 {
            return fd;
        }
        libc::close(fd);
        moved
    }
}
