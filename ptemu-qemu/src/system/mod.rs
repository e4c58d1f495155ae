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
mod sysapi;

use crate::api::{PluginId, QemuInfo, Tb, TbInsn};
use entry::{classify, has_error_code, idt_descriptor, Entry, Handlers};
use ptemu_wire::flow::{self, successors, BlockFlow, Exit, Insn, Tracker};
use ptemu_wire::system::{Registers, Transfer};
use ptemu_wire::Writer;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::sync::OnceLock;
use sysapi::{GArray, RegDescriptor, ScoreU64, SysApi, CB_R_REGS, COND_EQ, INLINE_STORE, MEM_R};

/// The registers the plugin reads, by their handles (0: QEMU has none of that name).
#[derive(Default)]
struct Regs {
    rip: usize,
    cs: usize,
    cr3: usize,
    rsp: usize,
    efer: usize,
}

/// A struct of `u64` counts that adds another of its kind field by field.
macro_rules! counts {
    ($(#[$m:meta])* struct $name:ident { $($(#[$fm:meta])* $f:ident,)* }) => {
        $(#[$m])*
        #[derive(Default, Clone, Copy)]
        struct $name { $($(#[$fm])* $f: u64,)* }

        impl std::ops::AddAssign for $name {
            fn add_assign(&mut self, o: $name) {
                $(self.$f += o.$f;)*
            }
        }
    };
}

counts! {
    /// What a vCPU ran and what its blocks began with (QE24, QE25), for the counts at exit.
    struct Counts {
        /// Block executions, those the flow gave no start, the derived starts that were not
        /// `rip` (`check=1`), and register reads.
        blocks,
        reads_needed,
        mismatches,
        reads,
        /// With a stream: the instructions of the blocks executed, each whole.
        instructions,
        /// Exceptions and interrupts, and of them those that stopped their block part-way.
        asynchronous,
        cut,
        soft,
        far,
        unexplained,
        /// CR3 values taken (a new value at a read), and of them those not after a block that
        /// writes CR3.
        cr3,
        cr3_elsewhere,
        /// LIDTs executed, and reads of the IDT.
        lidt,
        idt_reads,
        /// Blocks split part-way with no transfer (QEMU stopped them early), and blocks at an
        /// instruction inside the previous one that its indirect or far end went to.
        split,
        inside,
        /// Blocks after one that did not reach its last instruction with neither a fault nor
        /// a split found (never expected).
        unreached,
    }
}

/// What the plugin keeps of a translated block (leaked: QEMU may run it until the end).
struct TbInfo {
    flow: BlockFlow,
    /// Its index in the stream (QE26).
    index: u32,
    /// Where each vCPU last executed it (0: never), each slot written by its own vCPU only, so
    /// that the reader of the stream derives the same starts from one vCPU's blocks alone.
    seen: Box<[AtomicU64]>,
}

/// One vCPU's state, touched only on its own thread.
#[derive(Default)]
struct Vcpu {
    /// The walk through its blocks (QE24).
    tracker: Tracker,
    /// The block running now, and the one before it (null before the first).
    tb: usize,
    prev_tb: usize,
    regs: Regs,
    buf: usize,
    /// With a stream (QE26): the indices of the blocks executed since the last record, and the
    /// records of the vCPU's chunk not yet sent.
    indices: Vec<u32>,
    chunk: Option<Writer>,
    /// Its scoreboard entries ([`flag`], [`done`]), 0 until first used.
    flag: usize,
    done: usize,
    /// The block before the one running now reached its last instruction.
    prev_reached: bool,

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
    counts: Counts,
    /// The first derived start that was not `rip`: (block execution, derived, rip).
    first_mismatch: Option<(u64, u64, u64)>,
}

/// The most vCPUs the plugin keeps apart (a machine with more is refused at install).
const MAX_VCPUS: usize = ptemu_wire::system::MAX_VCPUS;

/// Executed blocks a vCPU gathers before its chunk goes out (4 bytes each), and the most bytes
/// of other records it holds.
const IDS: usize = 1 << 16;
const CHUNK: usize = 1 << 18;

/// The stream (QE26): the socket ptemu gave, and the records of translated blocks, sent before
/// any chunk that follows them (under the lock, so that a block's record precedes every
/// execution of it).
struct Out {
    fd: c_int,
    shared: Mutex<SharedOut>,
}

struct SharedOut {
    writer: Writer,
    /// The magic and the first records went out.
    started: bool,
    /// A write failed: nothing more is sent.
    broken: bool,
}

/// What [`send_shared`] writes after the block records: given the shared writer and the sender.
type SendMore<'a> = dyn FnMut(&mut Writer, &mut dyn FnMut(&[u8])) + 'a;

/// Sends the block records not yet sent (the magic first, the first time; then behind a thread
/// record of 0), then what `more` writes, all under the lock; nothing once a write failed.
fn send_shared(out: &Out, more: &mut SendMore<'_>) {
    let mut sh = out.shared.lock().unwrap_or_else(|p| p.into_inner());
    let SharedOut {
        writer,
        started,
        broken,
    } = &mut *sh;
    let mut ok = !*broken;
    let mut send = |b: &[u8]| ok = ok && crate::send_all(out.fd, b);
    if !*started {
        writer.take(&mut send);
        *started = true;
    } else {
        writer.take_chunk(0, &mut send);
    }
    more(writer, &mut send);
    *broken = !ok;
}

/// Sends vCPU `index`'s chunk (its pending indices first made a batch record), after the
/// block records it may name.
fn send_chunk(out: &Out, v: &mut Vcpu, index: c_uint) {
    let Some(chunk) = v.chunk.as_mut() else { return };
    chunk.exec_blocks(&v.indices);
    v.indices.clear();
    send_shared(out, &mut |_, send| chunk.take_chunk(u64::from(index) + 1, send));
}

struct State {
    api: SysApi,
    flag: *mut c_void,
    /// A per-vCPU scoreboard entry the last instruction of every block sets to the block's
    /// mark (its index + 1) before it runs: whether a block reached its last instruction
    /// (QE25's splits).
    done: *mut c_void,
    check: bool,
    /// The vCPUs QEMU said it may run (`seen` slots a block).
    slots: usize,
    /// The stream to ptemu (`fd=N`), if any: the socket and the block records not yet sent.
    out: Option<Out>,
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

/// The vCPU's mark of the last block that reached its last instruction, found as [`flag`] is.
///
/// # Safety
/// As for [`flag`].
unsafe fn done(v: &mut Vcpu, vcpu: c_uint) -> &'static mut u64 {
    if v.done == 0 {
        let s = state();
        // SAFETY: QEMU's scoreboard holds an entry of 8 bytes for every vCPU.
        v.done = unsafe { (s.api.scoreboard_find)(s.done, vcpu) } as usize;
    }
    // SAFETY: the entry, valid while the scoreboard does not move.
    unsafe { &mut *(v.done as *mut u64) }
}

/// Installs the system-mode recording (arguments `check=0|1`).
///
/// # Safety
/// QEMU's install contract.
pub unsafe fn install(id: PluginId, info: &QemuInfo, args: &[String]) -> c_int {
    let api = match SysApi::resolve() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ptemu-qemu: {e} (system mode needs plugin API version 4)");
            return 1;
        }
    };
    let mut check = false;
    let mut fd = None;
    for a in args {
        match a.as_str() {
            "check=1" => check = true,
            "check=0" => check = false,
            _ => match a.strip_prefix("fd=").map(str::parse::<c_int>) {
                Some(Ok(n)) if n >= 0 => fd = Some(n),
                _ => {
                    eprintln!("ptemu-qemu: unknown argument {a:?} in system mode (expected check=0|1, fd=N)");
                    return 1;
                }
            },
        }
    }
    let out = fd.map(|fd| Out {
        fd,
        shared: Mutex::new(SharedOut {
            writer: Writer::new(),
            started: false,
            broken: false,
        }),
    });
    let streams = out.is_some();
    if info.max_vcpus as usize > MAX_VCPUS || info.max_vcpus < 0 {
        eprintln!(
            "ptemu-qemu: a machine of up to {} vCPUs: system mode keeps at most {MAX_VCPUS} apart",
            info.max_vcpus
        );
        return 1;
    }
    // SAFETY: an 8-byte entry a vCPU, each.
    let (flag, done) = unsafe { ((api.scoreboard_new)(8), (api.scoreboard_new)(8)) };

    let vcpus = (0..MAX_VCPUS)
        .map(|_| {
            UnsafeCell::new(Vcpu {
                lidt_at: u64::MAX,
                chunk: streams.then(Writer::chunks),
                ..Vcpu::default()
            })
        })
        .collect();
    if STATE
        .set(State {
            api,
            flag,
            done,
            check,
            slots: (info.max_vcpus.max(1) as usize).min(MAX_VCPUS),
            out,
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
    let mut index = 0;
    if let Some(out) = &s.out {
        let distances: Vec<u64> = insns.windows(2).map(|w| w[1].ip.wrapping_sub(w[0].ip)).collect();
        let code: Vec<u8> = insns.iter().flat_map(|i| i.bytes.iter().copied()).collect();
        let mut sh = out.shared.lock().unwrap_or_else(|p| p.into_inner());
        index = sh.writer.blocks() as u32;
        sh.writer.block(reported, &distances, &code);
    }
    let info = Box::leak(Box::new(TbInfo {
        index,
        flow: BlockFlow::new(reported, &insns),
        seen: (0..s.slots).map(|_| AtomicU64::new(0)).collect(),
    }));
    let data = (info as *mut TbInfo).cast::<c_void>();
    let entry = ScoreU64 {
        score: s.flag,
        offset: 0,
    };
    let mark = ScoreU64 {
        score: s.done,
        offset: 0,
    };
    // SAFETY: QEMU's API at translation time; `data` lives for the process.
    unsafe {
        (api.register_insn_inline)(handles[n - 1], INLINE_STORE, mark, u64::from(index) + 1);

        (api.register_tb_exec)(tb, on_exec, 0, data);
        (api.register_tb_exec_cond)(tb, on_regs, CB_R_REGS, COND_EQ, entry, 1, data);
    }
}

/// Where vCPU `index` last ran `tb`: its own slot (QEMU numbers vCPUs below the count it gave
/// at install, which sized the slots). A clamp, not a modulo: this runs in every block, and a
/// modulo by a count known only at run time is a division.
#[inline(always)]
fn seen_slot(tb: &TbInfo, index: c_uint) -> &AtomicU64 {
    &tb.seen[(index as usize).min(tb.seen.len() - 1)]
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
    v.counts.blocks += 1;
    // SAFETY: a previous block's leaked TbInfo, or null.
    let prev = unsafe { (v.tb as *const TbInfo).as_ref() };
    let slot = seen_slot(tb, index);
    let step = v
        .tracker
        .exec(prev.map(|p| &p.flow), &tb.flow, slot.load(Ordering::Relaxed));
    // SAFETY: on the vCPU's thread.
    let mark = unsafe { done(v, index) };
    v.prev_reached = prev.is_some_and(|p| *mark == u64::from(p.index) + 1);
    *mark = 0;
    v.prev_tb = v.tb;
    v.tb = data as usize;
    if let Some(out) = &s.out {
        v.counts.instructions += tb.flow.starts.len() as u64;
        v.indices.push(tb.index);
        if v.indices.len() >= IDS {
            send_chunk(out, v, index);
        }
    }
    match step.at {
        Some(at) => slot.store(at, Ordering::Relaxed),
        None => v.counts.reads_needed += 1,
    }
    let want = u64::from(step.read || s.check);
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
    v.counts.idt_reads += 1;
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
    v.counts.reads += 1;
    // SAFETY: in this CB_R_REGS callback, on the vCPU's thread (as for every read below).
    let Some(rip) = (unsafe { read_reg(api, v.buf, v.regs.rip) }) else {
        return;
    };
    if !v.long_mode {
        // SAFETY: as above.
        v.long_mode = unsafe { read_reg(api, v.buf, v.regs.efer) }.is_some_and(|e| e & 1 << 10 != 0);
    }
    // Outside long mode `rip` is an offset from CS's base, not the linear address QEMU reports
    // blocks at: there (the firmware's hand-off, which is not traced) the reported address is
    // taken as the block's start.
    let rip = if v.long_mode { rip } else { tb.flow.reported };
    let derived_at = v.tracker.at();
    if derived_at != 0 && derived_at != rip {
        v.counts.mismatches += 1;
        v.first_mismatch.get_or_insert((v.counts.blocks, derived_at, rip));
    }
    // SAFETY: a previous block's leaked TbInfo, or null.
    let prev = unsafe { (v.prev_tb as *const TbInfo).as_ref() };
    let rereads = prev.is_some_and(|p| p.flow.rereads);
    if v.lidt_at != u64::MAX {
        let at = std::mem::replace(&mut v.lidt_at, u64::MAX);
        v.counts.lidt += 1;
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
                v.counts.cr3 += 1;
                if !rereads {
                    v.counts.cr3_elsewhere += 1;
                }
                v.cr3 = cr3;
            }
        }
    }
    let prev_at = v.tracker.prev_at();
    v.tracker.read(rip);
    let slot = seen_slot(tb, index);
    slot.store(rip, Ordering::Relaxed);
    let mut transfer = Transfer::Next;
    if derived_at == 0 {
        if let Some(p) = prev.filter(|_| prev_at != 0) {
            let reached = v.prev_reached;
            let e = if v.long_mode {
                entry_of(api, v, &p.flow, prev_at, rip, reached)
            } else {
                // Before long mode (the firmware's hand-off, not traced) only where a block
                // stopped is told, so that the instructions are counted right; the IDT and the
                // frames are real mode's or the 32-bit boot code's.
                match classify(&p.flow, prev_at, rip, reached, None, None) {
                    split @ Entry::Split { .. } => split,
                    _ => Entry::Next,
                }
            };
            count(v, e, s.check);
            let off = rip.wrapping_sub(prev_at);
            if matches!(e, Entry::Next | Entry::Far(_)) && off > 0 && off < p.flow.len {
                v.counts.inside += 1;
            }
            if !reached && matches!(e, Entry::Next | Entry::Far(_)) {
                v.counts.unreached += 1;
            }
            transfer = match e {
                Entry::Next => Transfer::Next,
                Entry::Far(_) => Transfer::Far,
                Entry::SoftInt { vector, from } => Transfer::SoftInt { vector, from },
                Entry::Async { vector, from, cut } => Transfer::Async { vector, from, cut },
                Entry::Unexplained { vector, .. } => Transfer::Unexplained { vector },
                Entry::Split { at } => Transfer::Split { at },
            };
        }
    }
    if let Some(out) = &s.out {
        // SAFETY: as above.
        let cs = unsafe { read_reg(api, v.buf, v.regs.cs) }.unwrap_or(0);
        let r = Registers {
            rip,
            cs,
            cr3: v.cr3,
            long_mode: v.long_mode,
            transfer,
        };
        if let Some(chunk) = v.chunk.as_mut() {
            chunk.exec_blocks(&v.indices);
            v.indices.clear();
            chunk.registers(&r);
            if chunk.pending() >= CHUNK {
                send_chunk(out, v, index);
            }
        }
    }
}

/// The transfer the block at `rip` starts with, after `prev` (QE25).
fn entry_of(api: &SysApi, v: &mut Vcpu, prev: &BlockFlow, prev_at: u64, rip: u64, reached: bool) -> Entry {
    let mut vector = v.handlers.vector(rip);
    // Where the flow says the block cannot be the previous one's successor, it is an entry the
    // IDT must name: read it again (the kernel writes gates into a loaded IDT). A start inside
    // the previous block that did not reach its end is a split, no entry.
    let split = !reached && rip.wrapping_sub(prev_at) < prev.len;
    if vector.is_none() && !split && prev.exit != Exit::Unknown && !successors(prev, prev_at).contains(&rip) {
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
    classify(prev, prev_at, rip, reached, vector, frame_rip)
}

fn count(v: &mut Vcpu, e: Entry, check: bool) {
    let n = &mut v.counts;
    match e {
        Entry::Next => {}
        Entry::Far(_) => n.far += 1,
        Entry::Split { .. } => n.split += 1,
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
    let mut first = None;
    let mut e = Counts::default();
    for (k, v) in s.vcpus.iter().enumerate() {
        // SAFETY: every vCPU stopped.
        let v = unsafe { &mut *v.get() };
        if let Some(out) = &s.out {
            send_chunk(out, v, k as c_uint);
        }
        first = first.or(v.first_mismatch);
        e += v.counts;
    }
    if let Some(out) = &s.out {
        send_shared(out, &mut |writer, send| {
            writer.end_with(e.instructions);
            writer.take_chunk(0, send);
        });
    }
    eprintln!(
        "ptemu-qemu: system: {} block executions, {} needing the registers, {} derived addresses not rip, {} register reads{}",
        e.blocks,
        e.reads_needed,
        e.mismatches,
        e.reads,
        match first {
            Some((k, at, rip)) => format!(" (first: block execution {k}, derived {at:#x}, rip {rip:#x})"),
            None => String::new(),
        }
    );
    eprintln!(
        "ptemu-qemu: system entries: {} exceptions and interrupts ({} stopping their block part-way), {} software interrupts, {} far transfers, {} unexplained, {} blocks stopped early with no transfer, {} at an instruction of the block before that its end went to, {} after a block that stopped early unexplained; {} CR3 values ({} not after a write), {} LIDTs, {} IDT reads",
        e.asynchronous, e.cut, e.soft, e.far, e.unexplained, e.split, e.inside, e.unreached, e.cr3, e.cr3_elsewhere, e.lidt, e.idt_reads
    );
}
