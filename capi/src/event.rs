//! The events an emulator feeds (`ptemu_event`, the vocabulary of `tracer::Event`) and the events
//! the output unit reports (`ptemu_output_event`).

use crate::status::*;
use ptemu_core::output::{EventKind, OutputEvent};
use ptemu_core::packet::PtwSize;
use ptemu_core::tracer::{Event, ExecMode, FarKind};
use std::ffi::c_char;

/// A non-branch instruction retired: `ip`, `len`.
pub const PTEMU_EV_RETIRE: u32 = 1;
/// A conditional branch: `ip`, `len`, `target`, PTEMU_EVF_TAKEN in `flags`.
pub const PTEMU_EV_COND_BRANCH: u32 = 2;
/// A direct near JMP: `ip`, `target`.
pub const PTEMU_EV_JUMP: u32 = 3;
/// A direct near CALL: `ip`, `len`, `target`.
pub const PTEMU_EV_CALL: u32 = 4;
/// An indirect near JMP: `ip`, `target`.
pub const PTEMU_EV_INDIRECT_JUMP: u32 = 5;
/// An indirect near CALL: `ip`, `len`, `target`.
pub const PTEMU_EV_INDIRECT_CALL: u32 = 6;
/// A near RET: `ip`, `target`.
pub const PTEMU_EV_RETURN: u32 = 7;
/// A far transfer of kind `far_kind`: `ip` is the source (the FUP IP for asynchronous kinds),
/// `target` the destination, `cpl` and `mode` the state after it, `value` the new CR3 when
/// PTEMU_EVF_CR3 is set, `vector` the vector (interrupts, exceptions, INT n), `extra` CR2 (a #PF
/// with PTEMU_EVF_CR2) or the VMCS pointer (VM entry).
pub const PTEMU_EV_FAR: u32 = 8;
/// STI/CLI/POPF: `ip`, `len`, the new IF as PTEMU_EVF_IF.
pub const PTEMU_EV_SET_IF: u32 = 9;
/// MOV to CR3: `ip`, `len`, `value` the new CR3.
pub const PTEMU_EV_CR3_WRITE: u32 = 10;
/// PTWRITE: `ip`, `len`, `value` the payload (8 bytes with PTEMU_EVF_PTW64, else 4).
pub const PTEMU_EV_PTWRITE: u32 = 11;
/// A successful MWAIT: `ip`, `len`, `a` the EAX hints, `b` the ECX extensions.
pub const PTEMU_EV_MWAIT: u32 = 12;
/// Entry into a C-state at `ip`: `a` the state, `b` the sub-state, PTEMU_EVF_HW.
pub const PTEMU_EV_SLEEP: u32 = 13;
/// Wake-up: `a` the last C-state, `b` the deepest, `c` the wake reasons, `value` the cycles asleep.
pub const PTEMU_EV_WAKE: u32 = 14;
/// `value` core cycles elapse.
pub const PTEMU_EV_CYCLES: u32 = 15;
/// The core:bus ratio becomes `a`.
pub const PTEMU_EV_CORE_RATIO: u32 = 16;

/// `flags`: a conditional branch was taken.
pub const PTEMU_EVF_TAKEN: u8 = 1;
/// `flags`: a far transfer loads the CR3 in `value`.
pub const PTEMU_EVF_CR3: u8 = 2;
/// `flags`: the new RFLAGS.IF of PTEMU_EV_SET_IF.
pub const PTEMU_EVF_IF: u8 = 4;
/// `flags`: an 8-byte PTWRITE operand.
pub const PTEMU_EVF_PTW64: u8 = 8;
/// `flags`: a hardware-initiated C-state entry (PTEMU_EV_SLEEP).
pub const PTEMU_EVF_HW: u8 = 16;
/// `flags`: a page fault's CR2 is in `extra` (PTEMU_FAR_EXCEPTION).
pub const PTEMU_EVF_CR2: u8 = 32;

/// `far_kind`: external interrupt, NMI or trap.
pub const PTEMU_FAR_INTERRUPT: u32 = 1;
/// `far_kind`: a fault-class exception.
pub const PTEMU_FAR_EXCEPTION: u32 = 2;
/// `far_kind`: INT n, INT3, INTO.
pub const PTEMU_FAR_SOFTWARE_INTERRUPT: u32 = 3;
/// `far_kind`: SYSCALL or SYSENTER.
pub const PTEMU_FAR_SYSCALL: u32 = 4;
/// `far_kind`: SYSRET or SYSEXIT.
pub const PTEMU_FAR_SYSRET: u32 = 5;
/// `far_kind`: IRET.
pub const PTEMU_FAR_IRET: u32 = 6;
/// `far_kind`: far CALL, JMP or RET.
pub const PTEMU_FAR_BRANCH: u32 = 7;
/// `far_kind`: VM exit.
pub const PTEMU_FAR_VM_EXIT: u32 = 8;
/// `far_kind`: VM entry (VMLAUNCH, VMRESUME) with the VMCS pointer in `extra`.
pub const PTEMU_FAR_VM_ENTRY: u32 = 9;

/// `mode`: 16-bit code.
pub const PTEMU_MODE_16: u8 = 16;
/// `mode`: 32-bit code or compatibility mode.
pub const PTEMU_MODE_32: u8 = 32;
/// `mode`: 64-bit code.
pub const PTEMU_MODE_64: u8 = 64;

/// One architectural event. Zero-initialize it, set `kind`, then the fields that kind uses (the
/// PTEMU_EV_* constants say which); the others are ignored.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct ptemu_event {
    /// PTEMU_EV_*.
    pub kind: u32,
    /// PTEMU_FAR_* for PTEMU_EV_FAR.
    pub far_kind: u32,
    /// The instruction's IP (for PTEMU_EV_FAR: the source).
    pub ip: u64,
    /// The branch target (for PTEMU_EV_FAR: the destination).
    pub target: u64,
    /// CR3, the PTWRITE payload, or cycles, as the kind says.
    pub value: u64,
    /// CR2 or the VMCS pointer, for PTEMU_EV_FAR.
    pub extra: u64,
    /// The instruction's length in bytes, 1 to 15, for the kinds that name `len` (else
    /// PTEMU_ERR_ARGUMENT).
    pub len: u8,
    /// PTEMU_EVF_* bits.
    pub flags: u8,
    /// CPL after a far transfer.
    pub cpl: u8,
    /// PTEMU_MODE_* after a far transfer.
    pub mode: u8,
    /// Vector of an interrupt, exception or INT n.
    pub vector: u8,
    /// Small operand (MWAIT hints, C-state, last C-state, core ratio).
    pub a: u8,
    /// Small operand (MWAIT extensions, sub-state, deepest C-state).
    pub b: u8,
    /// Small operand (wake reasons).
    pub c: u8,
}

/// The execution mode a PTEMU_MODE_* value names.
pub(crate) fn mode(m: u8) -> Result<ExecMode, Failure> {
    match m {
        PTEMU_MODE_16 => Ok(ExecMode::Bits16),
        PTEMU_MODE_32 => Ok(ExecMode::Bits32),
        PTEMU_MODE_64 => Ok(ExecMode::Bits64),
        _ => Err(Failure::argument(format!(
            "mode {m} is not PTEMU_MODE_16, _32 or _64"
        ))),
    }
}

fn far_kind(e: &ptemu_event) -> Result<FarKind, Failure> {
    let vector = e.vector;
    Ok(match e.far_kind {
        PTEMU_FAR_INTERRUPT => FarKind::Interrupt { vector },
        PTEMU_FAR_EXCEPTION => FarKind::Exception {
            vector,
            cr2: (e.flags & PTEMU_EVF_CR2 != 0).then_some(e.extra),
        },
        PTEMU_FAR_SOFTWARE_INTERRUPT => FarKind::SoftwareInterrupt { vector },
        PTEMU_FAR_SYSCALL => FarKind::Syscall,
        PTEMU_FAR_SYSRET => FarKind::Sysret,
        PTEMU_FAR_IRET => FarKind::Iret,
        PTEMU_FAR_BRANCH => FarKind::FarBranch,
        PTEMU_FAR_VM_EXIT => FarKind::VmExit,
        PTEMU_FAR_VM_ENTRY => FarKind::VmEntry { vmcs: e.extra },
        k => {
            return Err(Failure::argument(format!(
                "far_kind {k} is not a PTEMU_FAR_* value"
            )))
        }
    })
}

/// The kinds whose `len` is an instruction's length (1..=15).
const WITH_LEN: [u32; 8] = [
    PTEMU_EV_RETIRE,
    PTEMU_EV_COND_BRANCH,
    PTEMU_EV_CALL,
    PTEMU_EV_INDIRECT_CALL,
    PTEMU_EV_SET_IF,
    PTEMU_EV_CR3_WRITE,
    PTEMU_EV_PTWRITE,
    PTEMU_EV_MWAIT,
];

/// The tracer event `e` describes.
pub(crate) fn to_event(e: &ptemu_event) -> Result<Event, Failure> {
    let (ip, len, target, flag) = (e.ip, e.len, e.target, |f: u8| e.flags & f != 0);
    if WITH_LEN.contains(&e.kind) && !(1..=15).contains(&len) {
        return Err(Failure::argument(format!(
            "len {len} is not an instruction length (1..=15)"
        )));
    }
    Ok(match e.kind {
        PTEMU_EV_RETIRE => Event::Retire { ip, len },
        PTEMU_EV_COND_BRANCH => Event::CondBranch {
            ip,
            len,
            target,
            taken: flag(PTEMU_EVF_TAKEN),
        },
        PTEMU_EV_JUMP => Event::Jump { ip, target },
        PTEMU_EV_CALL => Event::Call { ip, len, target },
        PTEMU_EV_INDIRECT_JUMP => Event::IndirectJump { ip, target },
        PTEMU_EV_INDIRECT_CALL => Event::IndirectCall { ip, len, target },
        PTEMU_EV_RETURN => Event::Return { ip, target },
        PTEMU_EV_FAR => {
            if e.cpl > 3 {
                return Err(Failure::argument(format!("cpl {} is not 0..=3", e.cpl)));
            }
            Event::Far {
                kind: far_kind(e)?,
                from: ip,
                to: target,
                cpl: e.cpl,
                mode: mode(e.mode)?,
                cr3: flag(PTEMU_EVF_CR3).then_some(e.value),
            }
        }
        PTEMU_EV_SET_IF => Event::SetIf {
            ip,
            len,
            value: flag(PTEMU_EVF_IF),
        },
        PTEMU_EV_CR3_WRITE => Event::Cr3Write {
            ip,
            len,
            cr3: e.value,
        },
        PTEMU_EV_PTWRITE => Event::Ptwrite {
            ip,
            len,
            payload: e.value,
            size: if flag(PTEMU_EVF_PTW64) {
                PtwSize::Eight
            } else {
                PtwSize::Four
            },
        },
        PTEMU_EV_MWAIT => Event::Mwait {
            ip,
            len,
            hints: e.a,
            ext: e.b,
        },
        PTEMU_EV_SLEEP => Event::Sleep {
            ip,
            state: e.a,
            sub_state: e.b,
            hw: flag(PTEMU_EVF_HW),
        },
        PTEMU_EV_WAKE => Event::Wake {
            last: e.a,
            deepest: e.b,
            wake: e.c,
            cycles: e.value,
        },
        PTEMU_EV_CYCLES => Event::Cycles(e.value),
        PTEMU_EV_CORE_RATIO => Event::CoreRatio(e.a),
        k => {
            return Err(Failure::argument(format!(
                "event kind {k} is not a PTEMU_EV_* value"
            )))
        }
    })
}

/// A ToPA PMI (IA32_PERF_GLOBAL_STATUS[55] set, P1).
pub const PTEMU_OUT_PMI: u32 = 1;
/// Output stopped: ToPA STOP (S1) or TraceStop (S6).
pub const PTEMU_OUT_STOPPED: u32 = 2;
/// An operational error (E3).
pub const PTEMU_OUT_ERROR: u32 = 3;
/// The output wrapped (W5, R3).
pub const PTEMU_OUT_WRAP: u32 = 4;
/// An erratum of the CPU profile applies from now on.
pub const PTEMU_OUT_ERRATUM: u32 = 5;

/// One event of the output unit.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ptemu_output_event {
    /// PTEMU_OUT_* (0: a kind newer than this header).
    pub kind: u32,
    /// Whether `table` and `index` name a ToPA entry (false for single-range output).
    pub has_entry: bool,
    /// The ToPA entry's index.
    pub index: u32,
    /// The ToPA table's base.
    pub table: u64,
    /// Stream bytes written to memory when it happened.
    pub stream_offset: u64,
    /// The rule behind it (spec/output.md, e.g. "P1"), a static string; NULL if none.
    pub rule: *const c_char,
}

impl Default for ptemu_output_event {
    fn default() -> Self {
        ptemu_output_event {
            kind: 0,
            has_entry: false,
            index: 0,
            table: 0,
            stream_offset: 0,
            rule: std::ptr::null(),
        }
    }
}

/// `e` for C.
pub(crate) fn to_c(e: &OutputEvent) -> ptemu_output_event {
    let kind = match e.kind {
        EventKind::Pmi => PTEMU_OUT_PMI,
        EventKind::Stopped => PTEMU_OUT_STOPPED,
        EventKind::Error => PTEMU_OUT_ERROR,
        EventKind::Wrap => PTEMU_OUT_WRAP,
        EventKind::Erratum => PTEMU_OUT_ERRATUM,
        _ => 0,
    };
    ptemu_output_event {
        kind,
        has_entry: e.table.is_some() && e.index.is_some(),
        index: e.index.unwrap_or(0),
        table: e.table.unwrap_or(0),
        stream_offset: e.stream_offset,
        rule: e.rule.map_or(std::ptr::null(), rule_cstr),
    }
}
