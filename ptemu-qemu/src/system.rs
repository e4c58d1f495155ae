//! The plugin in QEMU's system emulator (issue 52; spec/qemu.md "Whole machines"): every block a
//! vCPU executes, at its real address. QEMU 10 reuses a translated block at every virtual address
//! that maps its physical page and tells the plugin the first translation's address; reading
//! `rip` in every block costs 3.6-4.2x QEMU alone. So the address is derived where the flow
//! tells it: after a fall-through or a direct branch the next block starts at a known address
//! (accepted when the block was last seen there, or reported there); after anything else
//! (an indirect branch, a far transfer, an interrupt or an exception: a block that is none of
//! the expected successors) a per-vCPU scoreboard flag makes a conditional callback read the
//! registers. `check=1` reads `rip` in every block as well and counts where the derived address
//! differs: the test of the design. At exit the counts go to stderr.

use crate::api::{PluginId, QemuInfo, Tb, TbInsn};
use iced_x86::{Decoder, DecoderOptions, FlowControl};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// `struct qemu_plugin_u64`: a scoreboard entry (passed by value).
#[repr(C)]
#[derive(Clone, Copy)]
struct ScoreU64 {
    score: *mut c_void,
    offset: usize,
}

/// glib's `GArray` and `GByteArray` heads (`data`, `len`), as QEMU hands them over.
#[repr(C)]
struct GArray {
    data: *mut u8,
    len: c_uint,
}

/// `qemu_plugin_reg_descriptor`.
#[repr(C)]
struct RegDescriptor {
    handle: *mut c_void,
    name: *const c_char,
    feature: *const c_char,
}

/// `QEMU_PLUGIN_CB_R_REGS`.
const CB_R_REGS: c_int = 1;
/// `QEMU_PLUGIN_COND_EQ`.
const COND_EQ: c_int = 2;

type VcpuCb = unsafe extern "C" fn(c_uint, *mut c_void);
type VcpuInitCb = unsafe extern "C" fn(PluginId, c_uint);
type TbTransCb = unsafe extern "C" fn(PluginId, *mut Tb);
type AtexitCb = unsafe extern "C" fn(PluginId, *mut c_void);

/// The version-2 functions system mode calls, resolved in QEMU's process.
#[derive(Clone, Copy)]
struct SysApi {
    register_vcpu_init: unsafe extern "C" fn(PluginId, VcpuInitCb),
    register_tb_trans: unsafe extern "C" fn(PluginId, TbTransCb),
    register_tb_exec: unsafe extern "C" fn(*mut Tb, VcpuCb, c_int, *mut c_void),
    register_tb_exec_cond: unsafe extern "C" fn(*mut Tb, VcpuCb, c_int, c_int, ScoreU64, u64, *mut c_void),
    register_atexit: unsafe extern "C" fn(PluginId, AtexitCb, *mut c_void),
    tb_n_insns: unsafe extern "C" fn(*const Tb) -> usize,
    tb_vaddr: unsafe extern "C" fn(*const Tb) -> u64,
    tb_get_insn: unsafe extern "C" fn(*const Tb, usize) -> *mut TbInsn,
    insn_vaddr: unsafe extern "C" fn(*const TbInsn) -> u64,
    insn_size: unsafe extern "C" fn(*const TbInsn) -> usize,
    insn_data: unsafe extern "C" fn(*const TbInsn, *mut c_void, usize) -> usize,
    scoreboard_new: unsafe extern "C" fn(usize) -> *mut c_void,
    scoreboard_find: unsafe extern "C" fn(*mut c_void, c_uint) -> *mut c_void,
    get_registers: unsafe extern "C" fn() -> *mut GArray,
    read_register: unsafe extern "C" fn(*mut c_void, *mut GArray) -> c_int,
    byte_array_new: unsafe extern "C" fn() -> *mut GArray,
    byte_array_set_size: unsafe extern "C" fn(*mut GArray, c_uint) -> *mut GArray,
}

impl SysApi {
    // Each transmute's target is the type of the field it fills.
    #[allow(clippy::missing_transmute_annotations)]
    fn resolve() -> Result<SysApi, String> {
        macro_rules! sym {
            ($name:literal) => {{
                let name = concat!($name, "\0");
                // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the whole process.
                let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
                if p.is_null() {
                    return Err(format!("QEMU does not export {}", $name));
                }
                // SAFETY: a function pointer of the signature the plugin API (version 2) and
                // glib document for it.
                unsafe { std::mem::transmute::<*mut c_void, _>(p) }
            }};
        }
        Ok(SysApi {
            register_vcpu_init: sym!("qemu_plugin_register_vcpu_init_cb"),
            register_tb_trans: sym!("qemu_plugin_register_vcpu_tb_trans_cb"),
            register_tb_exec: sym!("qemu_plugin_register_vcpu_tb_exec_cb"),
            register_tb_exec_cond: sym!("qemu_plugin_register_vcpu_tb_exec_cond_cb"),
            register_atexit: sym!("qemu_plugin_register_atexit_cb"),
            tb_n_insns: sym!("qemu_plugin_tb_n_insns"),
            tb_vaddr: sym!("qemu_plugin_tb_vaddr"),
            tb_get_insn: sym!("qemu_plugin_tb_get_insn"),
            insn_vaddr: sym!("qemu_plugin_insn_vaddr"),
            insn_size: sym!("qemu_plugin_insn_size"),
            insn_data: sym!("qemu_plugin_insn_data"),
            scoreboard_new: sym!("qemu_plugin_scoreboard_new"),
            scoreboard_find: sym!("qemu_plugin_scoreboard_find"),
            get_registers: sym!("qemu_plugin_get_registers"),
            read_register: sym!("qemu_plugin_read_register"),
            byte_array_new: sym!("g_byte_array_new"),
            byte_array_set_size: sym!("g_byte_array_set_size"),
        })
    }
}

/// How a translated block ends, for the address of the block after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Falls through, or a direct branch (`target` as reported; 0 when it has none), which may
    /// also fall through (`falls`).
    Known { target: u64, falls: bool },
    /// A REP string instruction at this reported address: QEMU runs it once an iteration, each
    /// a block execution of its own, so it may come next as well as the fall-through.
    Rep(u64),
    /// An indirect branch, a far transfer, an interrupt instruction, or bytes that do not
    /// decode as 64-bit code: the registers tell.
    Unknown,
}

/// What the plugin keeps of a translated block (leaked: QEMU may run it until the end).
struct TbInfo {
    /// The address QEMU reported (the first translation's).
    reported: u64,
    /// Its length in bytes.
    len: u64,
    exit: Exit,
    /// Its last instruction is a near CALL (direct or indirect): the address after the block is
    /// where the matching RET returns.
    calls: bool,
    /// Its last instruction is a near RET.
    returns: bool,
    /// The real address it was last executed at (0: never).
    last_seen: AtomicU64,
}

/// The return addresses a vCPU's shadow stack holds: a RET's target is predicted as the
/// address after the matching CALL, and accepted by the same rule as a direct branch's.
const SHADOW: usize = 64;

/// One vCPU's state, touched only on its own thread.
#[derive(Default)]
struct Vcpu {
    /// The shadow stack: return addresses of the CALLs not yet returned from, the latest at
    /// `depth - 1` (a ring: deeper calls push the oldest out).
    shadow: ShadowStack,
    /// The real start of the block running now, and its block (null before the first).
    at: u64,
    tb: usize,
    /// Register handles (rip), found at the vCPU's init.
    rip: usize,
    buf: usize,
    /// The `rip` the last register read gave.
    last_read: u64,
    /// Its scoreboard entry ([`flag`]), 0 until first used.
    flag: usize,
    /// The register reads made.
    reads: u64,
    blocks: u64,
    reads_needed: u64,
    mismatches: u64,
    first_mismatch: Option<(u64, u64, u64)>,
}

/// A ring of return addresses.
struct ShadowStack {
    at: [u64; SHADOW],
    depth: usize,
}

impl Default for ShadowStack {
    fn default() -> Self {
        ShadowStack {
            at: [0; SHADOW],
            depth: 0,
        }
    }
}

impl ShadowStack {
    fn push(&mut self, ret: u64) {
        self.at[self.depth % SHADOW] = ret;
        self.depth += 1;
    }

    /// The latest return address, taken off; `None` when the stack is empty (or was cut).
    fn pop(&mut self) -> Option<u64> {
        if self.depth == 0 {
            return None;
        }
        self.depth -= 1;
        Some(self.at[self.depth % SHADOW])
    }

    fn clear(&mut self) {
        self.depth = 0;
    }
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
            eprintln!("ptemu-qemu: {e} (system mode needs plugin API version 2)");
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
    let vcpus = (0..MAX_VCPUS).map(|_| UnsafeCell::new(Vcpu::default())).collect();
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
    let regs = unsafe { (s.api.get_registers)() };
    let mut rip = 0usize;
    if !regs.is_null() {
        // SAFETY: a GArray of reg descriptors.
        let (data, len) = unsafe { ((*regs).data.cast::<RegDescriptor>(), (*regs).len as usize) };
        for k in 0..len {
            // SAFETY: `k` below the array's length.
            let d = unsafe { &*data.add(k) };
            // SAFETY: QEMU names each register with a C string.
            if unsafe { CStr::from_ptr(d.name) }.to_bytes() == b"rip" {
                rip = d.handle as usize;
            }
        }
    }
    // SAFETY: on the vCPU's thread.
    let v = unsafe { vcpu(index) };
    v.rip = rip;
    // SAFETY: glib's constructor.
    v.buf = unsafe { (s.api.byte_array_new)() } as usize;
}

/// Classifies a block's last instruction (64-bit code).
fn exit_of(bytes: &[u8], ip: u64) -> Exit {
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = d.decode();
    if insn.is_invalid() {
        return Exit::Unknown;
    }
    if (insn.has_rep_prefix() || insn.has_repne_prefix()) && insn.is_string_instruction() {
        return Exit::Rep(ip);
    }
    match insn.flow_control() {
        FlowControl::Next => Exit::Known {
            target: 0,
            falls: true,
        },
        FlowControl::UnconditionalBranch | FlowControl::Call if !insn.is_jmp_far() && !insn.is_call_far() => {
            Exit::Known {
                target: insn.near_branch_target(),
                falls: false,
            }
        }
        FlowControl::ConditionalBranch => Exit::Known {
            target: insn.near_branch_target(),
            falls: true,
        },
        _ => Exit::Unknown,
    }
}

unsafe extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    let s = state();
    let api = s.api;
    // SAFETY: QEMU's translation-time API on the block it gives.
    let (n, reported) = unsafe { ((api.tb_n_insns)(tb), (api.tb_vaddr)(tb)) };
    if n == 0 {
        return;
    }
    // SAFETY: as above: the block's last instruction.
    let last = unsafe { (api.tb_get_insn)(tb, n - 1) };
    // SAFETY: the instruction QEMU just gave.
    let (last_ip, size) = unsafe { ((api.insn_vaddr)(last), (api.insn_size)(last)) };
    let mut bytes = [0u8; 16];
    // SAFETY: copies at most 16 bytes into `bytes`.
    let got = unsafe { (api.insn_data)(last, bytes.as_mut_ptr().cast(), size.min(16)) };
    let exit = exit_of(&bytes[..got], last_ip);
    let flow = Decoder::with_ip(64, &bytes[..got], last_ip, DecoderOptions::NONE)
        .decode()
        .flow_control();
    let info = Box::leak(Box::new(TbInfo {
        reported,
        len: last_ip + size as u64 - reported,
        exit,
        calls: matches!(flow, FlowControl::Call | FlowControl::IndirectCall),
        returns: flow == FlowControl::Return,
        last_seen: AtomicU64::new(0),
    }));
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

/// The block's real start, if the flow says it: one of the previous block's successors that
/// has the block's page offset and where it was reported or last executed.
fn derived(prev: Option<&TbInfo>, prev_at: u64, tb: &TbInfo) -> Option<u64> {
    let prev = prev?;
    let delta = prev_at.wrapping_sub(prev.reported);
    let mut candidates = [0u64; 2];
    match prev.exit {
        Exit::Known { target, falls } => {
            if target != 0 {
                candidates[0] = target.wrapping_add(delta);
            }
            if falls {
                candidates[1] = prev_at.wrapping_add(prev.len);
            }
        }
        Exit::Rep(ip) => {
            candidates[0] = ip.wrapping_add(delta);
            candidates[1] = prev_at.wrapping_add(prev.len);
        }
        Exit::Unknown => return None,
    }
    let seen = tb.last_seen.load(Ordering::Relaxed);
    candidates
        .into_iter()
        .find(|&c| c != 0 && (c == tb.reported || c == seen))
}

unsafe extern "C" fn on_exec(index: c_uint, data: *mut c_void) {
    let s = state();
    // SAFETY: QEMU runs it on the vCPU's thread; `data` is the block's leaked TbInfo.
    let (v, tb) = unsafe { (vcpu(index), &*data.cast::<TbInfo>()) };
    v.blocks += 1;
    // SAFETY: a previous block's leaked TbInfo, or null.
    let prev = unsafe { (v.tb as *const TbInfo).as_ref() };
    let mut guess = derived(prev, v.at, tb);
    if let Some(p) = prev.filter(|_| v.at != 0) {
        if p.calls {
            v.shadow.push(v.at.wrapping_add(p.len));
        } else if p.returns {
            let seen = tb.last_seen.load(Ordering::Relaxed);
            guess = v.shadow.pop().filter(|&c| c == tb.reported || c == seen);
        }
    }
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
    let want = u64::from(guess.is_none() || s.check);
    // SAFETY: on the vCPU's thread.
    *unsafe { flag(v, index) } = want;
}

unsafe extern "C" fn on_regs(index: c_uint, data: *mut c_void) {
    let s = state();
    // SAFETY: on the vCPU's thread; the block's TbInfo.
    let (v, tb) = unsafe { (vcpu(index), &*data.cast::<TbInfo>()) };
    // SAFETY: on the vCPU's thread.
    *unsafe { flag(v, index) } = 0;
    v.reads += 1;
    if v.rip == 0 || v.buf == 0 {
        return;
    }
    let buf = v.buf as *mut GArray;
    // SAFETY: glib's resize to empty, then QEMU appends the register's bytes.
    let rip = unsafe {
        (s.api.byte_array_set_size)(buf, 0);
        let n = (s.api.read_register)(v.rip as *mut c_void, buf);
        if n < 8 {
            return;
        }
        std::ptr::read_unaligned((*buf).data.cast::<u64>())
    };
    if v.at != 0 && v.at != rip {
        v.mismatches += 1;
        v.first_mismatch.get_or_insert((v.blocks, v.at, rip));
    }
    // Between the kernel's half and the user's (a system call, an interrupt, a return from
    // one: where a context switch may lie in between) the shadow stack starts again, so a RET
    // is never predicted from another address space's CALLs.
    if v.at == 0 && (rip ^ v.last_read) >> 63 != 0 {
        v.shadow.clear();
    }
    v.last_read = rip;
    v.at = rip;
    tb.last_seen.store(rip, Ordering::Relaxed);
}

unsafe extern "C" fn on_exit(_id: PluginId, _data: *mut c_void) {
    let s = state();
    let (mut blocks, mut needed, mut mismatches, mut reads) = (0, 0, 0, 0);
    let mut first = None;
    for v in &s.vcpus {
        // SAFETY: every vCPU stopped.
        let v = unsafe { &*v.get() };
        blocks += v.blocks;
        needed += v.reads_needed;
        mismatches += v.mismatches;
        reads += v.reads;
        first = first.or(v.first_mismatch);
    }
    eprintln!(
        "ptemu-qemu: system: {blocks} block executions, {needed} needing the registers, {mismatches} derived addresses not rip, {reads} register reads{}",
        match first {
            Some((k, at, rip)) => format!(" (first: block execution {k}, derived {at:#x}, rip {rip:#x})"),
            None => String::new(),
        }
    );
}
