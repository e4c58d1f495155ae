//! The functions of QEMU's plugin API (version 4, QEMU 9.2 and later) and glib that system mode
//! calls, resolved in QEMU's process, and the C types they take.

use crate::api::{qemu_fn, PluginId, Tb, TbInsn};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// `struct qemu_plugin_u64`: a scoreboard entry (passed by value).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ScoreU64 {
    pub score: *mut c_void,
    pub offset: usize,
}

/// glib's `GArray` and `GByteArray` heads (`data`, `len`), as QEMU hands them over.
#[repr(C)]
pub(super) struct GArray {
    pub data: *mut u8,
    pub len: c_uint,
}

/// `qemu_plugin_reg_descriptor`.
#[repr(C)]
pub(super) struct RegDescriptor {
    pub handle: *mut c_void,
    pub name: *const c_char,
    pub feature: *const c_char,
}

/// `QEMU_PLUGIN_CB_R_REGS`.
pub(super) const CB_R_REGS: c_int = 1;
/// `QEMU_PLUGIN_INLINE_STORE_U64`.
pub(super) const INLINE_STORE: c_int = 1;
/// `QEMU_PLUGIN_MEM_R`.
pub(super) const MEM_R: c_int = 1;
/// A memory callback: vCPU, the access's info, its virtual address, the registration's data.
pub(super) type MemCb = unsafe extern "C" fn(c_uint, u32, u64, *mut c_void);
/// `QEMU_PLUGIN_COND_EQ`.
pub(super) const COND_EQ: c_int = 2;

pub(super) type VcpuCb = unsafe extern "C" fn(c_uint, *mut c_void);
pub(super) type VcpuInitCb = unsafe extern "C" fn(PluginId, c_uint);
pub(super) type TbTransCb = unsafe extern "C" fn(PluginId, *mut Tb);
pub(super) type AtexitCb = unsafe extern "C" fn(PluginId, *mut c_void);

/// The version-2 functions system mode calls, resolved in QEMU's process.
#[derive(Clone, Copy)]
pub(super) struct SysApi {
    pub register_vcpu_init: unsafe extern "C" fn(PluginId, VcpuInitCb),
    pub register_tb_trans: unsafe extern "C" fn(PluginId, TbTransCb),
    pub register_tb_exec: unsafe extern "C" fn(*mut Tb, VcpuCb, c_int, *mut c_void),
    pub register_tb_exec_cond:
        unsafe extern "C" fn(*mut Tb, VcpuCb, c_int, c_int, ScoreU64, u64, *mut c_void),
    pub register_atexit: unsafe extern "C" fn(PluginId, AtexitCb, *mut c_void),
    pub tb_n_insns: unsafe extern "C" fn(*const Tb) -> usize,
    pub tb_vaddr: unsafe extern "C" fn(*const Tb) -> u64,
    pub tb_get_insn: unsafe extern "C" fn(*const Tb, usize) -> *mut TbInsn,
    pub insn_vaddr: unsafe extern "C" fn(*const TbInsn) -> u64,
    pub insn_size: unsafe extern "C" fn(*const TbInsn) -> usize,
    pub insn_data: unsafe extern "C" fn(*const TbInsn, *mut c_void, usize) -> usize,
    pub scoreboard_new: unsafe extern "C" fn(usize) -> *mut c_void,
    pub scoreboard_find: unsafe extern "C" fn(*mut c_void, c_uint) -> *mut c_void,
    pub get_registers: unsafe extern "C" fn() -> *mut GArray,
    pub read_register: unsafe extern "C" fn(*mut c_void, *mut GArray) -> c_int,
    pub byte_array_new: unsafe extern "C" fn() -> *mut GArray,
    pub byte_array_set_size: unsafe extern "C" fn(*mut GArray, c_uint) -> *mut GArray,
    pub register_mem: unsafe extern "C" fn(*mut TbInsn, MemCb, c_int, c_int, *mut c_void),
    pub read_memory_vaddr: unsafe extern "C" fn(u64, *mut GArray, usize) -> bool,
    pub register_insn_inline: unsafe extern "C" fn(*mut TbInsn, c_int, ScoreU64, u64),
}

impl SysApi {
    // Each transmute's target is the type of the field it fills.
    #[allow(clippy::missing_transmute_annotations)]
    pub fn resolve() -> Result<SysApi, String> {
        Ok(SysApi {
            register_vcpu_init: qemu_fn!("qemu_plugin_register_vcpu_init_cb"),
            register_tb_trans: qemu_fn!("qemu_plugin_register_vcpu_tb_trans_cb"),
            register_tb_exec: qemu_fn!("qemu_plugin_register_vcpu_tb_exec_cb"),
            register_tb_exec_cond: qemu_fn!("qemu_plugin_register_vcpu_tb_exec_cond_cb"),
            register_atexit: qemu_fn!("qemu_plugin_register_atexit_cb"),
            tb_n_insns: qemu_fn!("qemu_plugin_tb_n_insns"),
            tb_vaddr: qemu_fn!("qemu_plugin_tb_vaddr"),
            tb_get_insn: qemu_fn!("qemu_plugin_tb_get_insn"),
            insn_vaddr: qemu_fn!("qemu_plugin_insn_vaddr"),
            insn_size: qemu_fn!("qemu_plugin_insn_size"),
            insn_data: qemu_fn!("qemu_plugin_insn_data"),
            scoreboard_new: qemu_fn!("qemu_plugin_scoreboard_new"),
            scoreboard_find: qemu_fn!("qemu_plugin_scoreboard_find"),
            get_registers: qemu_fn!("qemu_plugin_get_registers"),
            read_register: qemu_fn!("qemu_plugin_read_register"),
            byte_array_new: qemu_fn!("g_byte_array_new"),
            byte_array_set_size: qemu_fn!("g_byte_array_set_size"),
            register_mem: qemu_fn!("qemu_plugin_register_vcpu_mem_cb"),
            read_memory_vaddr: qemu_fn!("qemu_plugin_read_memory_vaddr"),
            register_insn_inline: qemu_fn!("qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu"),
        })
    }
}
