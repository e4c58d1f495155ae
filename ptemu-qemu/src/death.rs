//! QE22: what the plugin learns when a signal kills the program. QEMU 7.2 runs no plugin
//! callback then (its `dump_core_and_abort` sets the signal's default action and sends it to
//! its own process with libc's `kill`), so the plugin takes three things from QEMU's process
//! itself:
//!
//! - **The call that kills.** QEMU's own entry for `kill` in its global offset table points at
//!   [`hooked_kill`], which runs the plugin's last words (the caller's `on_death`) when QEMU sends
//!   its own process a signal whose action is the default, then calls libc's `kill`.
//! - **Where each thread is.** TCG's generated code keeps the vCPU's `CPUX86State` in RBP (its
//!   `TCG_AREG0` on an x86-64 host) when it calls a block's callback; the state begins with the
//!   16 general registers and RIP. The callback's entry `ptemu_exec_entry` passes RBP on and
//!   the slow path keeps it; a system call proves it once a process (`regs[RAX]`, `regs[RDI]`,
//!   `regs[RSI]` are the call's number and first two arguments, which QEMU passes the plugin
//!   from there).
//! - **The address a fault touched.** The host's SIGSEGV or SIGBUS that a guest access raises
//!   reaches [`on_host_fault`] first, which notes its `si_code` and address and hands it on to
//!   QEMU's handler.
//!
//! All of it is read in QEMU's process by QEMU's rules: nothing is written anywhere but the
//! plugin's socket (no core file, no file in the program's directory).

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// libc's `kill`, as QEMU's global offset table held it (0: not hooked).
static REAL_KILL: AtomicUsize = AtomicUsize::new(0);

/// Whether a system call showed that the captured pointers are the vCPUs' states (QE22).
pub static ENV_PROVEN: AtomicBool = AtomicBool::new(false);

/// Offset of RIP in `CPUX86State` (after the 16 general registers).
const ENV_RIP: usize = 16 * 8;

/// The `on_death` hook: called with the signal, on the thread QEMU kills the process from.
static ON_DEATH: AtomicUsize = AtomicUsize::new(0);

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".globl ptemu_exec_entry",
    ".hidden ptemu_exec_entry",
    ".type ptemu_exec_entry,@function",
    "ptemu_exec_entry:",
    // The third argument: TCG's env register at the call (QE22).
    "mov rdx, rbp",
    "jmp {exec}",
    ".size ptemu_exec_entry, . - ptemu_exec_entry",
    exec = sym crate::on_exec,
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `on_exec` with RBP as its third argument: the callback QEMU calls for every block.
    pub fn ptemu_exec_entry(vcpu: std::ffi::c_uint, data: *mut c_void);
}

/// The callback to register for a block's execution.
pub fn exec_callback() -> crate::api::InsnExecCb {
    #[cfg(target_arch = "x86_64")]
    {
        ptemu_exec_entry
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        crate::on_exec_no_env
    }
}

/// QE22: the state pointer a block's callback saw, proven by the system call `num(a1, a2)`
/// this thread makes now: the words there are the registers QEMU read the call from.
pub fn prove_env(env: usize, num: i64, a1: u64, a2: u64, read: impl Fn(u64) -> Option<u64>) {
    if env == 0 || ENV_PROVEN.load(Ordering::Relaxed) {
        return;
    }
    let reg = |k: usize| read((env + 8 * k) as u64);
    if reg(0) == Some(num as u64) && reg(7) == Some(a1) && reg(6) == Some(a2) {
        ENV_PROVEN.store(true, Ordering::Relaxed);
    }
}

/// The guest RIP in the state at `env`, once proven: where the thread is (its next instruction
/// not run, or the faulting one).
pub fn rip(env: usize, read: impl Fn(u64) -> Option<u64>) -> Option<u64> {
    if env == 0 || !ENV_PROVEN.load(Ordering::Relaxed) {
        return None;
    }
    read((env + ENV_RIP) as u64)
}

/// A host fault noted on this thread (QE22).
#[derive(Clone, Copy, Debug)]
pub struct HostFault {
    /// Its `si_code`: SEGV_MAPERR, SEGV_ACCERR, SI_KERNEL (a #GP), BUS_ADRERR...
    pub code: c_int,
    /// The address it touched (a guest address: x86-64 guests run at guest base 0).
    pub addr: u64,
    /// The instructions the thread's blocks had begun when it came (`Thread::executed`).
    pub executed: u64,
}

/// A SIGSEGV or SIGBUS another thread or process sent this thread (`si_code` <= 0: `kill`,
/// `tgkill`, `sigqueue`), not a fault (QE22).
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// The signal.
    pub sig: c_int,
    /// The instructions the thread's blocks had begun when it came (`Thread::executed`).
    pub executed: u64,
}

thread_local! {
    /// The last host fault (SIGSEGV or SIGBUS with `si_code` > 0) on this thread (QE22).
    pub static LAST_FAULT: Cell<Option<HostFault>> = const { Cell::new(None) };
    /// The last SIGSEGV or SIGBUS sent to this thread (QE22).
    pub static LAST_SENT: Cell<Option<Sent>> = const { Cell::new(None) };
    /// The vCPU slot of this thread, when it has one.
    pub static VCPU: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Forgets the host fault and the sent signal noted on this thread (a forked child's, which
/// are the parent's, QE22).
pub fn forget_signals() {
    LAST_FAULT.with(|f| f.set(None));
    LAST_SENT.with(|f| f.set(None));
}

/// QEMU's handlers of SIGSEGV and SIGBUS, which [`on_host_fault`] hands on to.
static QEMU_SEGV: AtomicUsize = AtomicUsize::new(0);
static QEMU_BUS: AtomicUsize = AtomicUsize::new(0);
static FAULTS_HOOKED: AtomicBool = AtomicBool::new(false);

/// QE22: the host's fault signals come to [`on_host_fault`] first. Done once, from a block's
/// callback (QEMU has installed its handlers by then; it never changes them for these two).
pub fn hook_host_faults() {
    if FAULTS_HOOKED.swap(true, Ordering::Relaxed) {
        return;
    }
    for (sig, keep) in [(libc::SIGSEGV, &QEMU_SEGV), (libc::SIGBUS, &QEMU_BUS)] {
        // SAFETY: sigaction reads and writes the structs it is given.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_flags & libc::SA_SIGINFO == 0 {
                // Not QEMU's three-argument handler: left alone.
                continue;
            }
            let mut new = old;
            new.sa_sigaction = on_host_fault as *const () as usize;
            // The old action is boxed for good: the handler reads it.
            keep.store(Box::into_raw(Box::new(old)) as usize, Ordering::Relaxed);
            if libc::sigaction(sig, &new, std::ptr::null_mut()) != 0 {
                keep.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// QE22: a host SIGSEGV or SIGBUS: noted for this thread, a fault (`si_code` > 0, the kernel's)
/// apart from one sent (`si_code` <= 0, as QEMU tells them apart), then QEMU's handler (which
/// turns a guest access's into the guest's signal and queues a sent one).
extern "C" fn on_host_fault(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel's siginfo for a fault signal.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as u64) };
    // The thread's count grows with every block it starts: the same count at its death says
    // the fault came in its last block.
    let executed = VCPU.with(Cell::get).map_or(u64::MAX, crate::executed_by);
    if code > 0 {
        LAST_FAULT.with(|f| f.set(Some(HostFault { code, addr, executed })));
    } else {
        LAST_SENT.with(|f| f.set(Some(Sent { sig, executed })));
    }
    let keep = if sig == libc::SIGSEGV {
        &QEMU_SEGV
    } else {
        &QEMU_BUS
    };
    let old = keep.load(Ordering::Relaxed) as *const libc::sigaction;
    if old.is_null() {
        return;
    }
    // SAFETY: QEMU's SA_SIGINFO handler, called as the kernel would have.
    unsafe {
        type Handler = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
        let f = std::mem::transmute::<usize, Handler>((*old).sa_sigaction);
        f(sig, info, ctx);
    }
}

/// QE22: QEMU's `kill` entry points at [`hooked_kill`] from now on, which calls `on_death`
/// before it kills. False when QEMU has no such entry (a static build: a program a fault kills
/// is then refused as QE7 says).
pub fn hook_kill(on_death: unsafe fn(c_int)) -> bool {
    ON_DEATH.store(on_death as *const () as usize, Ordering::Relaxed);
    let Some(slot) = got_slot(b"kill") else {
        return false;
    };
    let page = slot & !4095;
    // SAFETY: the slot is QEMU's own GOT entry for kill, a pointer-sized word in its RELRO
    // page: made writable for the store, then read-only again.
    unsafe {
        if libc::mprotect(page as *mut c_void, 4096, libc::PROT_READ | libc::PROT_WRITE) != 0 {
            return false;
        }
        let p = slot as *mut usize;
        REAL_KILL.store(p.read(), Ordering::Relaxed);
        p.write(hooked_kill as *const () as usize);
        libc::mprotect(page as *mut c_void, 4096, libc::PROT_READ);
    }
    true
}

/// SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGWINCH: signals whose
/// default action does not end the process (QEMU sends itself SIGSTOP for a guest's SIGTSTP).
const NOT_FATAL: u64 = 1 << 17 | 1 << 18 | 1 << 19 | 1 << 20 | 1 << 21 | 1 << 22 | 1 << 23 | 1 << 28;

/// QEMU's `kill`: when it sends its own process a signal whose action is the default and ends
/// it (it is dying of it, `dump_core_and_abort`), the plugin's last words go first (QE22).
extern "C" fn hooked_kill(pid: libc::pid_t, sig: c_int) -> c_int {
    // SAFETY: getpid and sigaction have no preconditions beyond valid pointers.
    let dying = unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        (0..64).contains(&sig)
            && NOT_FATAL & (1 << sig) == 0
            && pid == libc::getpid()
            && libc::sigaction(sig, std::ptr::null(), &mut act) == 0
            && act.sa_sigaction == libc::SIG_DFL
    };
    let hook = ON_DEATH.load(Ordering::Relaxed);
    if dying && hook != 0 {
        // SAFETY: the function `hook_kill` was given.
        unsafe {
            let f = std::mem::transmute::<usize, unsafe fn(c_int)>(hook);
            f(sig);
        }
    }
    // SAFETY: libc's kill, as QEMU's table held it.
    unsafe {
        type Kill = extern "C" fn(libc::pid_t, c_int) -> c_int;
        let real = std::mem::transmute::<usize, Kill>(REAL_KILL.load(Ordering::Relaxed));
        real(pid, sig)
    }
}

/// The address of the main program's (QEMU's) GOT entry for the function `name`.
fn got_slot(name: &[u8]) -> Option<usize> {
    struct Main {
        base: usize,
        phdr: *const libc::Elf64_Phdr,
        phnum: usize,
    }
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr's contract; the first object is the main program.
        unsafe {
            let m = &mut *data.cast::<Option<Main>>();
            *m = Some(Main {
                base: (*info).dlpi_addr as usize,
                phdr: (*info).dlpi_phdr,
                phnum: usize::from((*info).dlpi_phnum),
            });
        }
        1
    }
    let mut main: Option<Main> = None;
    // SAFETY: the callback writes the Option it is given.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut main).cast()) };
    let m = main?;
    // SAFETY: the loaded program's headers and dynamic section, as the dynamic linker mapped
    // them; every table is read within the sizes the dynamic section gives.
    unsafe {
        let phdrs = std::slice::from_raw_parts(m.phdr, m.phnum);
        let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
        let at = |v: u64| -> usize {
            // The dynamic linker may have relocated the table addresses in place.
            if (v as usize) < m.base {
                m.base + v as usize
            } else {
                v as usize
            }
        };
        let mut d = (m.base + dynamic.p_vaddr as usize) as *const [u64; 2];
        let (mut jmprel, mut relsz, mut symtab, mut strtab, mut strsz) = (0, 0, 0, 0, 0);
        loop {
            let [tag, val] = d.read();
            match tag {
                0 => break,
                23 => jmprel = at(val),
                2 => relsz = val as usize,
                6 => symtab = at(val),
                5 => strtab = at(val),
                10 => strsz = val as usize,
                _ => {}
            }
            d = d.add(1);
        }
        if jmprel == 0 || symtab == 0 || strtab == 0 {
            return None;
        }
        for k in 0..relsz / 24 {
            let rela = (jmprel + 24 * k) as *const u64;
            let (offset, info) = (rela.read(), rela.add(1).read());
            // R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT.
            if !matches!(info & 0xffff_ffff, 6 | 7) {
                continue;
            }
            let sym = symtab + 24 * (info >> 32) as usize;
            let st_name = (sym as *const u32).read() as usize;
            if st_name + name.len() >= strsz {
                continue;
            }
            let s = std::slice::from_raw_parts((strtab + st_name) as *const u8, name.len() + 1);
            if &s[..name.len()] == name && s[name.len()] == 0 {
                return Some(m.base + offset as usize);
            }
        }
        None
    }
}
