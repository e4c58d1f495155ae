//! The plugin in QEMU's system emulator (issue 52; spec/qemu.md "Whole machines"): every block a
//! vCPU executes, at its real address (QE24), and the transfer it starts with (QE25).
//!
//! QEMU 10 reuses a translated block at every virtual address that maps its physical page and
//! tells the plugin the first translation's address; reading `rip` in every block costs 3.6-4.2x
//! QEMU alone. So the address is derived where the flow tells it (`flow`): after a fall-through,
//! a direct branch or a RET the shadow stack predicts, the next block starts at a known address
//! (accepted when the block was last seen there, or reported there); after anything else (an
//! indirect branch, a far transfer, an interrupt or an exception: a block that is none of the
//! expected successors), and after a block that writes CR3 or loads the IDT, a per-vCPU
//! scoreboard flag makes a conditional callback read the registers. There `entry` tells the
//! transfer: an exception or interrupt where the block is an IDT entry point (the IDT read from
//! guest memory where LIDT's operand says, again where an entry is certain and its vector
//! unknown), from the RIP of the frame the CPU pushed; a software interrupt; a far transfer by
//! the previous block's last instruction; or a near branch's target. `check=1` reads `rip` in
//! every block as well, counts where the derived address differs, and prints every exception
//! and interrupt found (the test compares them with QEMU's own `-d int` log). At exit the counts
//! go to stderr.

mod entry;
mod flow;
mod sysapi;

use crate::api::{PluginId, QemuInfo, Tb, TbInsn};
use entry::{classify, has_error_code, idt_descriptor, Entry, Handlers};
use flow::{derived, successors, Exit, Insn, ShadowStack, TbInfo};
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use sysapi::{GArray, RegDescriptor, ScoreU64, SysApi, CB_R_REGS, COND_EQ, MEM_R};

/// The registers the plugin reads, by their handles (0: QEMU has none of that name).
#[derive(Default)]
struct Regs {
    rip: usize,
    cs: usize,
    cr3: usize,
    rsp: usize,
    efer: usize,
}

/// What a vCPU's blocks began with (QE25), for the counts at exit.
#[derive(Default, Clone, Copy)]
struct Entries {
    /// Exceptions and interrupts, and of them those that stopped their block part-way.
    asynchronous: u64,
    cut: u64,
    soft: u64,
    far: u64,
    unexplained: u64,
    /// CR3 values taken (a new value at a read), and of them those not after a block that
    /// writes CR3.
    cr3: u64,
    cr3_elsewhere: u64,
    /// LIDTs executed, and reads of the IDT.
    lidt: u64,
    idt_reads: u64,
}

/// One vCPU's state, touched only on its own thread.
#[derive(Default)]
struct Vcpu {
    /// The shadow stack: return addresses of the CALLs not yet returned from.
    shadow: ShadowStack,
    /// The real start of the block running now, and its block (null before the first).
    at: u64,
    tb: usize,
    /// The same of the block before it.
    prev_at: u64,
    prev_tb: usize,
    regs: Regs,
    buf: usize,
    /// The `rip` the last register read gave.
    last_read: u64,
    /// Its scoreboard entry ([`flag`]), 0 until first used.
    flag: usize,
    /// EFER.LMA was seen set: the blocks are 64-bit code from here (a guest that leaves long
    /// mode again is not modelled).
    long_mode: bool,
    /// The CR3 last read.
    cr3: u64,
    /// The IDT (base, limit) the last LIDT loaded, its entry points, and the operand of a LIDT
    /// not yet read (`u64::MAX`: none).
    idt: Option<(u64, u16)>,
    handlers: Handlers,
    lidt_at: u64,
    entries: Entries,
    /// The register reads made.
    reads: u64,
    blocks: u64,
    reads_needed: u64,
    mismatches: u64,
    first_mismatch: Option<(u64, u64, u64)>,
}

/// The most vCPUs the plugin keeps apart.
const MAX_VCPUS: usize = 64;

struct State {
    api: SysApi,
    flag: *mut c_void,
    check: bool,
    vcpus: Vec<UnsafeCell<Vcpu>>,
}

// SAFETY: each `Vcpu` is touched only by its own vCPU's thread (QEMU runs a vCPU's callbacks on
// it), and at exit, after the vCPUs stopped; the scoreboard pointer is QEMU's, valid throughout.
unsafe impl Sync for State {}
// SAFETY: as above.
unsafe impl Send for State {}

static STATE: OnceLock<State> = OnceLock::new();

fn state() -> &'static State {
    STATE.get().expect("installed")
}

/// The vCPU's slot.
///
/// # Safety
/// Called on vCPU `vcpu`'s thread only (or after every vCPU stopped).
unsafe fn vcpu(vcpu: c_uint) -> &'static mut Vcpu {
    let s = state();
    // SAFETY: the caller's contract: one thread per slot.
    unsafe { &mut *s.vcpus[vcpu as usize % MAX_VCPUS].get() }
}

/// The vCPU's scoreboard flag (1: read the registers in this block), found once per vCPU: QEMU
/// moves a scoreboard only when it grows for a new vCPU, and every vCPU is created before any
/// runs (a vCPU plugged in later is not modelled). Looking it up in every block cost 13% of the
/// run (`qemu_plugin_scoreboard_find` and the glib calls under it).
///
/// # Safety
/// On vCPU `vcpu`'s thread, with `v` its slot.
unsafe fn flag(v: &mut Vcpu, vcpu: c_uint) -> &'static mut u64 {
    if v.flag == 0 {
        let s = state();
        // SAFETY: QEMU's scoreboard holds an entry of 8 bytes for every vCPU.
        v.flag = unsafe { (s.api.scoreboard_find)(s.flag, vcpu) } as usize;
    }
    // SAFETY: the entry, valid while the scoreboard does not move (above).
    unsafe { &mut *(v.flag as *mut u64) }
}

/// Installs the system-mode recording (arguments `check=0|1`).
///
/// # Safety
/// QEMU's install contract.
pub unsafe fn install(id: PluginId, _info: &QemuInfo, args: &[String]) -> c_int {
    let api = match SysApi::resolve() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ptemu-qemu: {e} (system mode needs plugin API version 4)");
            return 1;
        }
    };
    let mut check = false;
    for a in args {
        match a.as_str() {
            "check=1" => check = true,
            "check=0" => check = false,
            _ => {
                eprintln!("ptemu-qemu: unknown argument {a:?} in system mode (expected check=0|1)");
                return 1;
            }
        }
    }
    // SAFETY: an 8-byte entry a vCPU.
    let flag = unsafe { (api.scoreboard_new)(8) };
    let vcpus = (0..MAX_VCPUS)
        .map(|_| {
            UnsafeCell::new(Vcpu {
                lidt_at: u64::MAX,
                ..Vcpu::default()
            })
        })
        .collect();
    if STATE
        .set(State {
            api,
            flag,
            check,
            vcpus,
        })
        .is_err()
    {
        return 1;
    }
    // SAFETY: QEMU's API, called at install with our id and callbacks of the right types.
    unsafe {
        (api.register_vcpu_init)(id, on_vcpu_init);
        (api.register_tb_trans)(id, on_translate);
        (api.register_atexit)(id, on_exit, std::ptr::null_mut());
    }
    0
}

unsafe extern "C" fn on_vcpu_init(_id: PluginId, index: c_uint) {
    let s = state();
    // SAFETY: QEMU calls this on the vCPU's thread, where the registers can be listed.
    let list = unsafe { (s.api.get_registers)() };
    let mut regs = Regs::default();
    if !list.is_null() {
        // SAFETY: a GArray of reg descriptors.
        let (data, len) = unsafe { ((*list).data.cast::<RegDescriptor>(), (*list).len as usize) };
        for k in 0..len {
            // SAFETY: `k` below the array's length.
            let d = unsafe { &*data.add(k) };
            let h = d.handle as usize;
            // SAFETY: QEMU names each register with a C string.
            match unsafe { CStr::from_ptr(d.name) }.to_bytes() {
                b"rip" => regs.rip = h,
                b"cs" => regs.cs = h,
                b"cr3" => regs.cr3 = h,
                b"rsp" => regs.rsp = h,
                b"efer" => regs.efer = h,
                _ => {}
            }
        }
    }
    // SAFETY: on the vCPU's thread.
    let v = unsafe { vcpu(index) };
    v.regs = regs;
    // SAFETY: glib's constructor.
    v.buf = unsafe { (s.api.byte_array_new)() } as usize;
}

unsafe extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    let s = state();
    let api = s.api;
    // SAFETY: QEMU's translation-time API on the block it gives.
    let (n, reported) = unsafe { ((api.tb_n_insns)(tb), (api.tb_vaddr)(tb)) };
    if n == 0 {
        return;
    }
    let mut code = vec![[0u8; 16]; n];
    let mut got = vec![(0u64, 0u64, 0usize); n];
    let mut handles: Vec<*mut TbInsn> = Vec::with_capacity(n);
    for k in 0..n {
        // SAFETY: as above: the block's instruction k, below its count.
        let insn = unsafe { (api.tb_get_insn)(tb, k) };
        // SAFETY: the instruction QEMU just gave; copies at most 16 bytes into `code[k]`.
        got[k] = unsafe {
            let size = (api.insn_size)(insn);
            let len = (api.insn_data)(insn, code[k].as_mut_ptr().cast(), size.min(16));
            ((api.insn_vaddr)(insn), size as u64, len)
        };
        handles.push(insn);
    }
    let insns: Vec<Insn<'_>> = (0..n)
        .map(|k| Insn {
            ip: got[k].0,
            size: got[k].1,
            bytes: &code[k][..got[k].2],
        })
        .collect();
    for (k, i) in insns.iter().enumerate() {
        if flow::is_lidt(i) {
            // SAFETY: QEMU's API at translation time, on this block's instruction.
            unsafe { (api.register_mem)(handles[k], on_lidt, 0, MEM_R, std::ptr::null_mut()) };
        }
    }
    let info = Box::leak(Box::new(TbInfo::new(reported, &insns)));
    let data = (info as *mut TbInfo).cast::<c_void>();
    let entry = ScoreU64 {
        score: s.flag,
        offset: 0,
    };
    // SAFETY: QEMU's API at translation time; `data` lives for the process.
    unsafe {
        (api.register_tb_exec)(tb, on_exec, 0, data);
        (api.register_tb_exec_cond)(tb, on_regs, CB_R_REGS, COND_EQ, entry, 1, data);
    }
}

/// A LIDT's memory access: its operand is the lowest address it reads (the limit, then the
/// base); the block after it reads the descriptor there.
unsafe extern "C" fn on_lidt(index: c_uint, _info: u32, vaddr: u64, _data: *mut c_void) {
    // SAFETY: on the vCPU's thread.
    let v = unsafe { vcpu(index) };
    v.lidt_at = v.lidt_at.min(vaddr);
}

unsafe extern "C" fn on_exec(index: c_uint, data: *mut c_void) {
    let s = state();
    // SAFETY: QEMU runs it on the vCPU's thread; `data` is the block's leaked TbInfo.
    let (v, tb) = unsafe { (vcpu(index), &*data.cast::<TbInfo>()) };
    v.blocks += 1;
    // SAFETY: a previous block's leaked TbInfo, or null.
    let prev = unsafe { (v.tb as *const TbInfo).as_ref() };
    let mut guess = derived(prev, v.at, tb);
    let mut rereads = false;
    if let Some(p) = prev.filter(|_| v.at != 0) {
        if p.calls {
            v.shadow.push(v.at.wrapping_add(p.len));
        } else if p.returns {
            let seen = tb.last_seen.load(Ordering::Relaxed);
            guess = v.shadow.pop().filter(|&c| c == tb.reported || c == seen);
        }
        rereads = p.rereads;
    }
    v.prev_tb = v.tb;
    v.prev_at = v.at;
    v.tb = data as usize;
    match guess {
        Some(at) => {
            v.at = at;
            tb.last_seen.store(at, Ordering::Relaxed);
        }
        None => {
            v.reads_needed += 1;
            v.at = 0;
        }
    }
    let want = u64::from(guess.is_none() || rereads || s.check);
    // SAFETY: on the vCPU's thread.
    *unsafe { flag(v, index) } = want;
}

/// Reads a register of up to 8 bytes (`None`: QEMU has none of that name, or gave nothing).
///
/// # Safety
/// In a callback registered with `CB_R_REGS`, on the vCPU's thread whose `buf` this is.
unsafe fn read_reg(api: &SysApi, buf: usize, handle: usize) -> Option<u64> {
    if handle == 0 || buf == 0 {
        return None;
    }
    let buf = buf as *mut GArray;
    // SAFETY: glib's resize to empty, then QEMU appends the register's bytes.
    unsafe {
        (api.byte_array_set_size)(buf, 0);
        let n = (api.read_register)(handle as *mut c_void, buf);
        if n <= 0 {
            return None;
        }
        let mut word = [0u8; 8];
        let n = (n as usize).min(8);
        word[..n].copy_from_slice(std::slice::from_raw_parts((*buf).data, n));
        Some(u64::from_le_bytes(word))
    }
}

/// Reads `len` bytes of guest memory at virtual address `at` into `buf` (`false`: unmapped).
///
/// # Safety
/// In a vCPU callback, on the vCPU's thread whose `buf` this is.
unsafe fn read_memory(api: &SysApi, buf: usize, at: u64, len: usize) -> Option<&'static [u8]> {
    if buf == 0 {
        return None;
    }
    let b = buf as *mut GArray;
    // SAFETY: glib's resize to empty, then QEMU appends the bytes; the slice is read before the
    // buffer is used again.
    unsafe {
        (api.byte_array_set_size)(b, 0);
        if !(api.read_memory_vaddr)(at, b, len) || ((*b).len as usize) < len {
            return None;
        }
        Some(std::slice::from_raw_parts((*b).data, len))
    }
}

/// Reads the IDT the last LIDT loaded (`v.idt`) and takes its entry points.
fn read_idt(api: &SysApi, v: &mut Vcpu) {
    let Some((base, limit)) = v.idt else { return };
    let len = (usize::from(limit) + 1).min(256 * 16);
    v.entries.idt_reads += 1;
    // SAFETY: in the register callback, on the vCPU's thread.
    if let Some(table) = unsafe { read_memory(api, v.buf, base, len) } {
        v.handlers = Handlers::parse(table);
    }
}

unsafe extern "C" fn on_regs(index: c_uint, data: *mut c_void) {
    let s = state();
    let api = &s.api;
    // SAFETY: on the vCPU's thread; the block's TbInfo.
    let (v, tb) = unsafe { (vcpu(index), &*data.cast::<TbInfo>()) };
    // SAFETY: on the vCPU's thread.
    *unsafe { flag(v, index) } = 0;
    v.reads += 1;
    // SAFETY: in this CB_R_REGS callback, on the vCPU's thread (as for every read below).
    let Some(rip) = (unsafe { read_reg(api, v.buf, v.regs.rip) }) else {
        return;
    };
    let derived_at = v.at;
    if derived_at != 0 && derived_at != rip {
        v.mismatches += 1;
        v.first_mismatch.get_or_insert((v.blocks, derived_at, rip));
    }
    // SAFETY: a previous block's leaked TbInfo, or null.
    let prev = unsafe { (v.prev_tb as *const TbInfo).as_ref() };
    let rereads = prev.is_some_and(|p| p.rereads);
    if !v.long_mode {
        // SAFETY: as above.
        v.long_mode = unsafe { read_reg(api, v.buf, v.regs.efer) }.is_some_and(|e| e & 1 << 10 != 0);
    }
    if v.lidt_at != u64::MAX {
        let at = std::mem::replace(&mut v.lidt_at, u64::MAX);
        v.entries.lidt += 1;
        // SAFETY: as above.
        if let Some(b) = unsafe { read_memory(api, v.buf, at, 10) } {
            let d: [u8; 10] = b.try_into().expect("10 bytes");
            v.idt = Some(idt_descriptor(&d));
            read_idt(api, v);
        }
    }
    if derived_at == 0 || rereads {
        // SAFETY: as above.
        if let Some(cr3) = unsafe { read_reg(api, v.buf, v.regs.cr3) } {
            if cr3 != v.cr3 {
                v.entries.cr3 += 1;
                if !rereads {
                    v.entries.cr3_elsewhere += 1;
                }
                v.cr3 = cr3;
            }
        }
    }
    if derived_at == 0 {
        // Between the kernel's half and the user's (a system call, an interrupt, a return from
        // one: where a context switch may lie in between) the shadow stack starts again, so a
        // RET is never predicted from another address space's CALLs.
        if (rip ^ v.last_read) >> 63 != 0 {
            v.shadow.clear();
        }
        if let Some(p) = prev.filter(|_| v.long_mode && v.prev_at != 0) {
            let e = entry_of(api, v, p, rip);
            count(v, e, s.check);
        }
    }
    v.last_read = rip;
    v.at = rip;
    tb.last_seen.store(rip, Ordering::Relaxed);
}

/// The transfer the block at `rip` starts with, after `prev` (QE25).
fn entry_of(api: &SysApi, v: &mut Vcpu, prev: &TbInfo, rip: u64) -> Entry {
    let mut vector = v.handlers.vector(rip);
    // Where the flow says the block cannot be the previous one's successor, it is an entry the
    // IDT must name: read it again (the kernel writes gates into a loaded IDT).
    if vector.is_none() && prev.exit != Exit::Unknown && !successors(prev, v.prev_at).contains(&rip) {
        read_idt(api, v);
        vector = v.handlers.vector(rip);
    }
    let frame_rip = vector.and_then(|vec| {
        // SAFETY: in the register callback, on the vCPU's thread.
        let rsp = unsafe { read_reg(api, v.buf, v.regs.rsp) }?;
        let at = rsp.wrapping_add(if has_error_code(vec) { 8 } else { 0 });
        // SAFETY: as above.
        let b = unsafe { read_memory(api, v.buf, at, 8) }?;
        Some(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    });
    classify(prev, v.prev_at, vector, frame_rip)
}

fn count(v: &mut Vcpu, e: Entry, check: bool) {
    let n = &mut v.entries;
    match e {
        Entry::Next => {}
        Entry::Far(_) => n.far += 1,
        Entry::SoftInt { vector, from } => {
            n.soft += 1;
            if check {
                eprintln!("ptemu-qemu: entry v={vector:02x} int from={from:#x}");
            }
        }
        Entry::Async { vector, from, cut } => {
            n.asynchronous += 1;
            n.cut += u64::from(cut);
            if check {
                eprintln!("ptemu-qemu: entry v={vector:02x} from={from:#x}");
            }
        }
        Entry::Unexplained { vector, frame_rip } => {
            n.unexplained += 1;
            if check {
                eprintln!("ptemu-qemu: unexplained entry v={vector:02x} frame rip {frame_rip:x?}");
            }
        }
    }
}

unsafe extern "C" fn on_exit(_id: PluginId, _data: *mut c_void) {
    let s = state();
    let (mut blocks, mut needed, mut mismatches, mut reads) = (0, 0, 0, 0);
    let mut first = None;
    let mut e = Entries::default();
    for v in &s.vcpus {
        // SAFETY: every vCPU stopped.
        let v = unsafe { &*v.get() };
        blocks += v.blocks;
        needed += v.reads_needed;
        mismatches += v.mismatches;
        reads += v.reads;
        first = first.or(v.first_mismatch);
        let n = v.entries;
        e.asynchronous += n.asynchronous;
        e.cut += n.cut;
        e.soft += n.soft;
        e.far += n.far;
        e.unexplained += n.unexplained;
        e.cr3 += n.cr3;
        e.cr3_elsewhere += n.cr3_elsewhere;
        e.lidt += n.lidt;
        e.idt_reads += n.idt_reads;
    }
    eprintln!(
        "ptemu-qemu: system: {blocks} block executions, {needed} needing the registers, {mismatches} derived addresses not rip, {reads} register reads{}",
        match first {
            Some((k, at, rip)) => format!(" (first: block execution {k}, derived {at:#x}, rip {rip:#x})"),
            None => String::new(),
        }
    );
    eprintln!(
        "ptemu-qemu: system entries: {} exceptions and interrupts ({} stopping their block part-way), {} software interrupts, {} far transfers, {} unexplained; {} CR3 values ({} not after a write), {} LIDTs, {} IDT reads",
        e.asynchronous, e.cut, e.soft, e.far, e.unexplained, e.cr3, e.cr3_elsewhere, e.lidt, e.idt_reads
    );
}
