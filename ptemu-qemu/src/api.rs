//! The few functions of QEMU's TCG plugin API (version 1, QEMU 4.2 to 8.x) the plugin calls,
//! declared here from the API's documented signatures and looked up in the QEMU executable at
//! load time (`dlsym`): the library has no undefined symbols, so it also links as a test.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// Looks function `$name` of QEMU's plugin API (or of glib, which QEMU links) up in the
/// process, as the field its value fills; a `return Err` from the caller naming it when QEMU
/// does not export it. Each use's SAFETY: the symbol has the signature the plugin API (or glib)
/// documents for it, which is the field's type.
macro_rules! qemu_fn {
    ($name:literal) => {{
        let name = concat!($name, "\0");
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the whole process.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
        if p.is_null() {
            return Err(format!("QEMU does not export {}", $name));
        }
        // SAFETY: a function pointer of the documented signature (see the macro's doc).
        unsafe { std::mem::transmute::<*mut std::ffi::c_void, _>(p) }
    }};
}
pub(crate) use qemu_fn;

/// The plugin's id, as QEMU gives it.
pub type PluginId = u64;

/// `qemu_info_t`: what QEMU tells the plugin at install.
#[repr(C)]
#[derive(Debug)]
pub struct QemuInfo {
    /// The guest architecture ("x86_64").
    pub target_name: *const c_char,
    /// Lowest plugin API version this QEMU supports.
    pub version_min: c_int,
    /// Its current plugin API version.
    pub version_cur: c_int,
    /// Whether QEMU emulates a whole system (not user mode).
    pub system_emulation: bool,
    /// In system emulation: the vCPUs the machine starts with (`-smp`), and the most it may
    /// have (the C struct's union; undefined in user mode).
    pub smp_vcpus: c_int,
    pub max_vcpus: c_int,
}

/// An opaque translation block.
#[repr(C)]
#[derive(Debug)]
pub struct Tb {
    _opaque: [u8; 0],
}

/// An opaque translated instruction.
#[repr(C)]
#[derive(Debug)]
pub struct TbInsn {
    _opaque: [u8; 0],
}

/// `QEMU_PLUGIN_CB_NO_REGS`.
pub const CB_NO_REGS: c_int = 0;

/// A translation callback.
pub type TbTransCb = unsafe extern "C" fn(PluginId, *mut Tb);
/// An execution callback (a block's or an instruction's): vCPU index and the data given.
pub type InsnExecCb = unsafe extern "C" fn(c_uint, *mut c_void);
/// A memory-access callback: vCPU index, the access's description, its guest address and the
/// data given.
pub type MemCb = unsafe extern "C" fn(c_uint, u32, u64, *mut c_void);
/// `QEMU_PLUGIN_MEM_RW`: reads and writes.
pub const MEM_RW: c_int = 3;
/// The at-exit callback.
pub type AtexitCb = unsafe extern "C" fn(PluginId, *mut c_void);
/// A system-call callback: number and eight arguments.
pub type SyscallCb = unsafe extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
/// A system-call return callback: number and result.
pub type SyscallRetCb = unsafe extern "C" fn(PluginId, c_uint, i64, i64);

/// The API functions, resolved.
#[derive(Debug, Clone, Copy)]
pub struct Api {
    pub register_tb_trans: unsafe extern "C" fn(PluginId, TbTransCb),
    pub register_tb_exec: unsafe extern "C" fn(*mut Tb, InsnExecCb, c_int, *mut c_void),
    pub register_mem: unsafe extern "C" fn(*mut TbInsn, MemCb, c_int, c_int, *mut c_void),
    pub register_atexit: unsafe extern "C" fn(PluginId, AtexitCb, *mut c_void),
    pub register_syscall: unsafe extern "C" fn(PluginId, SyscallCb),
    pub register_syscall_ret: unsafe extern "C" fn(PluginId, SyscallRetCb),
    pub tb_n_insns: unsafe extern "C" fn(*const Tb) -> usize,
    pub tb_vaddr: unsafe extern "C" fn(*const Tb) -> u64,
    pub tb_get_insn: unsafe extern "C" fn(*const Tb, usize) -> *mut TbInsn,
    pub insn_vaddr: unsafe extern "C" fn(*const TbInsn) -> u64,
    pub insn_haddr: unsafe extern "C" fn(*const TbInsn) -> *mut c_void,
    pub outs: unsafe extern "C" fn(*const c_char),
}

impl Api {
    /// Looks every function up in the process (QEMU exports them); the error names the first
    /// one missing.
    // Each transmute's target is the type of the field it fills.
    #[allow(clippy::missing_transmute_annotations)]
    pub fn resolve() -> Result<Api, String> {
        Ok(Api {
            register_tb_trans: qemu_fn!("qemu_plugin_register_vcpu_tb_trans_cb"),
            register_tb_exec: qemu_fn!("qemu_plugin_register_vcpu_tb_exec_cb"),
            register_mem: qemu_fn!("qemu_plugin_register_vcpu_mem_cb"),
            register_atexit: qemu_fn!("qemu_plugin_register_atexit_cb"),
            register_syscall: qemu_fn!("qemu_plugin_register_vcpu_syscall_cb"),
            register_syscall_ret: qemu_fn!("qemu_plugin_register_vcpu_syscall_ret_cb"),
            tb_n_insns: qemu_fn!("qemu_plugin_tb_n_insns"),
            tb_vaddr: qemu_fn!("qemu_plugin_tb_vaddr"),
            tb_get_insn: qemu_fn!("qemu_plugin_tb_get_insn"),
            insn_vaddr: qemu_fn!("qemu_plugin_insn_vaddr"),
            insn_haddr: qemu_fn!("qemu_plugin_insn_haddr"),
            outs: qemu_fn!("qemu_plugin_outs"),
        })
    }

    /// Prints `text` through QEMU (its log, stderr by default).
    pub fn print(&self, text: &str) {
        let mut s = text.replace('\0', " ");
        s.push('\n');
        s.push('\0');
        // SAFETY: a NUL-terminated string that lives across the call.
        unsafe {
            (self.outs)(
                CStr::from_bytes_until_nul(s.as_bytes())
                    .expect("NUL-terminated")
                    .as_ptr(),
            )
        }
    }
}
