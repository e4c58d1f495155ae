//! The tracer's input: architectural events, independent of any trace format.
//!
//! Every instruction event carries the IP of the instruction itself; the tracer derives the
//! current IP from it, so a FUP or TIP.PGE can name the right address.

use crate::packet::PtwSize;

/// The execution mode a MODE.Exec packet reports (CS.L, CS.D).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum ExecMode {
    /// 16-bit code: CS.L = 0, CS.D = 0.
    Bits16,
    /// 32-bit code (or compatibility mode): CS.L = 0, CS.D = 1.
    Bits32,
    /// 64-bit code: CS.L = 1, CS.D = 0.
    #[default]
    Bits64,
}

impl ExecMode {
    /// (CS.L, CS.D).
    pub fn csl_csd(self) -> (bool, bool) {
        match self {
            ExecMode::Bits16 => (false, false),
            ExecMode::Bits32 => (false, true),
            ExecMode::Bits64 => (true, false),
        }
    }
}

/// The architectural state a trace starts in, for [`crate::Tracer::set_state`] before TraceEn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartState {
    /// Execution mode of the traced code.
    pub mode: ExecMode,
    /// CPL of the traced code.
    pub cpl: u8,
    /// CR3 of the traced address space.
    pub cr3: u64,
}

/// What kind of far transfer (SDM Table 36-50 cases 10–13; pt-packets.md §5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FarKind {
    /// External interrupt, NMI, trap: asynchronous, FUP(next IP) + TIP.
    Interrupt {
        /// Vector (for Event Trace's CFE).
        vector: u8,
    },
    /// Fault-class exception: FUP(faulting IP) + TIP; `cr2` for #PF (Event Trace's EVD).
    Exception {
        /// Vector.
        vector: u8,
        /// The faulting linear address of a #PF.
        cr2: Option<u64>,
    },
    /// INT n / INT3 / INTO: FUP(the INT's IP) + TIP.
    SoftwareInterrupt {
        /// Vector.
        vector: u8,
    },
    /// SYSCALL / SYSENTER: a far branch, TIP only.
    Syscall,
    /// SYSRET / SYSEXIT: TIP only.
    Sysret,
    /// IRET: TIP only.
    Iret,
    /// Far CALL, JMP or RET: TIP only.
    FarBranch,
    /// VM exit: asynchronous, FUP + TIP.
    VmExit,
    /// VM entry (VMLAUNCH/VMRESUME) into the guest whose VMCS is at `vmcs`: VMCS + TIP.
    VmEntry {
        /// Physical address of the VMCS (4 KiB aligned).
        vmcs: u64,
    },
}

impl FarKind {
    /// Asynchronous kinds get a FUP with their source IP before the TIP (SDM 36-36 Table 36-15).
    pub fn is_async(self) -> bool {
        matches!(
            self,
            FarKind::Interrupt { .. }
                | FarKind::Exception { .. }
                | FarKind::SoftwareInterrupt { .. }
                | FarKind::VmExit
        )
    }
}

/// One architectural event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// An instruction that does not branch retired; the IP moves to `ip + len`.
    Retire {
        /// The instruction's IP.
        ip: u64,
        /// Its length in bytes.
        len: u8,
    },
    /// A conditional branch (Jcc, JCXZ, LOOP) retired.
    CondBranch {
        /// The branch's IP.
        ip: u64,
        /// Its length (the fall-through is `ip + len`).
        len: u8,
        /// The taken target.
        target: u64,
        /// Taken or not.
        taken: bool,
    },
    /// A direct near JMP.
    Jump {
        /// The jump's IP.
        ip: u64,
        /// Target.
        target: u64,
    },
    /// A direct near CALL; pushes `ip + len` on the return-compression stack unless it is a
    /// zero-length call (`target == ip + len`).
    Call {
        /// The call's IP.
        ip: u64,
        /// Its length.
        len: u8,
        /// Target.
        target: u64,
    },
    /// An indirect near JMP.
    IndirectJump {
        /// The jump's IP.
        ip: u64,
        /// Target.
        target: u64,
    },
    /// An indirect near CALL; pushes `ip + len`.
    IndirectCall {
        /// The call's IP.
        ip: u64,
        /// Its length.
        len: u8,
        /// Target.
        target: u64,
    },
    /// A near RET.
    Return {
        /// The RET's IP.
        ip: u64,
        /// Where it returned to.
        target: u64,
    },
    /// A far transfer: interrupt, exception, SYSCALL/SYSRET, IRET, far branch, VM exit/entry.
    Far {
        /// Which.
        kind: FarKind,
        /// The FUP IP for asynchronous kinds (next IP for interrupts and traps, the faulting or INT
        /// instruction for faults and software interrupts), else the branching instruction's IP.
        from: u64,
        /// The target.
        to: u64,
        /// CPL after the transfer.
        cpl: u8,
        /// Execution mode after the transfer.
        mode: ExecMode,
        /// CR3 after the transfer, when it changes (task switch, VM exit/entry).
        cr3: Option<u64>,
    },
    /// STI, CLI, POPF: RFLAGS.IF changes (reported by MODE.Exec when Event Trace is on).
    SetIf {
        /// The instruction's IP.
        ip: u64,
        /// Its length.
        len: u8,
        /// New IF.
        value: bool,
    },
    /// MOV to CR3.
    Cr3Write {
        /// The MOV's IP.
        ip: u64,
        /// Its length.
        len: u8,
        /// The new CR3.
        cr3: u64,
    },
    /// PTWRITE.
    Ptwrite {
        /// The PTWRITE's IP.
        ip: u64,
        /// Its length.
        len: u8,
        /// Operand.
        payload: u64,
        /// Operand size.
        size: PtwSize,
    },
    /// A successful MWAIT (before the C-state entry).
    Mwait {
        /// The MWAIT's IP.
        ip: u64,
        /// Its length.
        len: u8,
        /// EAX hints.
        hints: u8,
        /// ECX extensions (bits 1:0).
        ext: u8,
    },
    /// Entry into a C-state deeper than C0.0 at `ip` (the next instruction to execute).
    Sleep {
        /// IP at which execution stopped.
        ip: u64,
        /// Target C-state (PWRE.Resolved state).
        state: u8,
        /// Target sub-state.
        sub_state: u8,
        /// Hardware-initiated (PWRE.HW).
        hw: bool,
    },
    /// Wake-up back to C0 after `cycles` core cycles asleep.
    Wake {
        /// Last core C-state.
        last: u8,
        /// Deepest core C-state.
        deepest: u8,
        /// Wake reason bits (PWRX byte 3).
        wake: u8,
        /// Cycles spent asleep (the clock advances, no CYC covers it).
        cycles: u64,
    },
    /// Core cycles elapse (beyond one per instruction event).
    Cycles(u64),
    /// The core:bus ratio changes (CBR).
    CoreRatio(u8),
}

impl Event {
    /// A far transfer that leaves CR3 as it is ([`Event::Far`] with `cr3: None`).
    pub fn far(kind: FarKind, from: u64, to: u64, cpl: u8, mode: ExecMode) -> Event {
        Event::Far {
            kind,
            from,
            to,
            cpl,
            mode,
            cr3: None,
        }
    }

    /// The IP after the event; `current` for events that do not move it (cycles, ratio, wake):
    /// exactly those whose [`Event::ip`] is `None`.
    pub fn next_ip(&self, current: u64) -> u64 {
        let after = |ip: u64, len: u8| ip.wrapping_add(u64::from(len));
        match *self {
            Event::Retire { ip, len }
            | Event::SetIf { ip, len, .. }
            | Event::Cr3Write { ip, len, .. }
            | Event::Ptwrite { ip, len, .. }
            | Event::Mwait { ip, len, .. } => after(ip, len),
            Event::CondBranch {
                ip,
                len,
                target,
                taken,
            } => {
                if taken {
                    target
                } else {
                    after(ip, len)
                }
            }
            Event::Jump { target, .. }
            | Event::Call { target, .. }
            | Event::IndirectJump { target, .. }
            | Event::IndirectCall { target, .. }
            | Event::Return { target, .. } => target,
            Event::Far { to, .. } => to,
            Event::Sleep { ip, .. } => ip,
            Event::Wake { .. } | Event::Cycles(_) | Event::CoreRatio(_) => current,
        }
    }

    /// The IP the event happens at (the instruction's IP; a far transfer's `from`); `None` for
    /// events that are not tied to an IP (cycles, ratio, wake).
    pub fn ip(&self) -> Option<u64> {
        match *self {
            Event::Retire { ip, .. }
            | Event::SetIf { ip, .. }
            | Event::Cr3Write { ip, .. }
            | Event::Ptwrite { ip, .. }
            | Event::Mwait { ip, .. }
            | Event::CondBranch { ip, .. }
            | Event::Jump { ip, .. }
            | Event::Call { ip, .. }
            | Event::IndirectJump { ip, .. }
            | Event::IndirectCall { ip, .. }
            | Event::Return { ip, .. }
            | Event::Sleep { ip, .. } => Some(ip),
            Event::Far { from, .. } => Some(from),
            Event::Wake { .. } | Event::Cycles(_) | Event::CoreRatio(_) => None,
        }
    }

    /// Whether the event retires an instruction (advances the clock by `cycles_per_instruction`).
    pub fn is_instruction(&self) -> bool {
        !matches!(
            self,
            Event::Sleep { .. } | Event::Wake { .. } | Event::Cycles(_) | Event::CoreRatio(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ptemu simulate` tracks the flow by the last event at an IP of each batch: that only holds
    /// if exactly the events without an IP leave it where it was.
    #[test]
    fn next_ip_ignores_the_current_ip_exactly_for_events_at_an_ip() {
        let all = [
            Event::Retire { ip: 0x10, len: 3 },
            Event::CondBranch {
                ip: 0x10,
                len: 2,
                target: 0x40,
                taken: true,
            },
            Event::CondBranch {
                ip: 0x10,
                len: 2,
                target: 0x40,
                taken: false,
            },
            Event::Jump {
                ip: 0x10,
                target: 0x40,
            },
            Event::Call {
                ip: 0x10,
                len: 5,
                target: 0x40,
            },
            Event::IndirectJump {
                ip: 0x10,
                target: 0x40,
            },
            Event::IndirectCall {
                ip: 0x10,
                len: 2,
                target: 0x40,
            },
            Event::Return {
                ip: 0x10,
                target: 0x40,
            },
            Event::far(
                FarKind::Interrupt { vector: 0x20 },
                0x10,
                0x40,
                0,
                ExecMode::Bits64,
            ),
            Event::SetIf {
                ip: 0x10,
                len: 1,
                value: true,
            },
            Event::Cr3Write {
                ip: 0x10,
                len: 3,
                cr3: 0x1000,
            },
            Event::Ptwrite {
                ip: 0x10,
                len: 5,
                payload: 7,
                size: PtwSize::Eight,
            },
            Event::Mwait {
                ip: 0x10,
                len: 3,
                hints: 0,
                ext: 0,
            },
            Event::Sleep {
                ip: 0x10,
                state: 1,
                sub_state: 0,
                hw: false,
            },
            Event::Wake {
                last: 1,
                deepest: 1,
                wake: 1,
                cycles: 100,
            },
            Event::Cycles(100),
            Event::CoreRatio(20),
        ];
        for ev in all {
            let moved = ev.next_ip(0x1234) == ev.next_ip(0x9999);
            assert_eq!(moved, ev.ip().is_some(), "{ev:?}");
            if ev.ip().is_none() {
                assert_eq!(ev.next_ip(0x1234), 0x1234, "{ev:?}");
            }
        }
    }
}
