//! QE22: the end of a thread's stream when a signal killed the program: the plugin's last note
//! names the block whose execution began last and where the thread's RIP was, and the trace ends
//! there as real hardware with User=1, OS=0 ends it: the faulting instruction does not retire
//! (FUP at it, TIP.PGD as the exception leaves user mode, PGD2), or the thread was interrupted
//! before the instruction it would have run next.

use super::{fault_kind, interrupted_at, QemuEvents, FAULT_SIGNALS};
use crate::sources::error::{ErrorKind, Result};
use crate::sources::qemu::classify::{Insn, Kind};
use crate::sources::qemu::wire::{DeathCause, DeathNote};
use crate::sources::qemu::SYSCALL_ENTRY;
use crate::sources::steps::Steps;
use crate::tracer::{Event, ExecMode, FarKind};
use std::io::Read;

/// SIGSEGV, SIGBUS: the signals of a memory access (QE22's instruction fetch at RIP).
const ACCESS_SIGNALS: u64 = 1 << 7 | 1 << 11;

/// SI_KERNEL: the `si_code` of a host fault that was a #GP (a non-canonical address).
const SI_KERNEL: i32 = 0x80;

/// Whether an execution of a block whose last instruction is `last` and first instruction is
/// at `first` may go on at `rip`, an instruction of the block (QE22): its branch target, its
/// first (a loop, a RET or indirect branch), or a REP string instruction's next iteration.
fn may_go_to(last: Insn, first: u64, rip: u64) -> bool {
    match last.kind {
        Kind::Conditional | Kind::Jump | Kind::Call => rip == last.target,
        Kind::RepString => rip == last.ip,
        Kind::Return | Kind::IndirectJump | Kind::IndirectCall | Kind::Far | Kind::Iret => rip == first,
        _ => false,
    }
}

impl<R: Read> QemuEvents<R> {
    /// QE22: the thread's last note: the program died of a signal from this thread (`killed`)
    /// or while it was stopped, with its RIP at `rip` and the block whose execution began last
    /// named in `text`. Its trace ends there:
    ///
    /// - a fault (the killing thread, a fault signal, RIP an instruction of the block that its
    ///   last instruction cannot go to, or that a host fault in the block shows to be one): the
    ///   instructions before it retire, it does not, and the exception leaves user mode at it;
    /// - the block ran to its end and went to RIP (a thread stopped, a signal another process
    ///   sent, one the note says was sent to the thread during that block, an instruction
    ///   fetch that faulted): its last instruction goes there and the trace
    ///   leaves user mode before RIP, with the fetch's #PF for SIGSEGV or SIGBUS, else an
    ///   interrupt; a SYSCALL the thread was in, or an INT that trapped into the kernel (RIP
    ///   its next instruction), is the trace's end (QE7);
    /// - anything else (RIP inside the block where only a fault may stop it, but no fault
    ///   explains it; a fault signal at an instruction the block may also have gone to with no
    ///   host fault to tell) is refused.
    pub(super) fn died(
        &mut self,
        killed: bool,
        rip: u64,
        text: &str,
        out: &mut Steps,
        at: u64,
    ) -> Result<()> {
        let bad = |this: &Self, what: String| Err(this.error(at, ErrorKind::Inconsistent, what));
        let Some(d) = DeathNote::parse(text) else {
            return Err(self.error(
                at,
                ErrorKind::BadField,
                format!(
                    "the plugin's note of the program's death reads {text:?}: not a signal, block and fault"
                ),
            ));
        };
        let Some(t) = self.translated.get(d.block as usize).copied() else {
            return bad(
                self,
                format!(
                    "the program died in block {}, which was never translated",
                    d.block
                ),
            );
        };
        let (first, ids) = (t.first as usize, usize::from(t.ids));
        let whole = ids - usize::from(ids > 1 && self.table[first + ids - 1].kind == Kind::Undone);
        let last = self.table[first + whole - 1];
        let start = self.table[first].ip;
        let inside = (0..whole).find(|&j| self.table[first + j].ip == rip);
        // Sent during the last block (0 instructions begun since) or as its callback ran (its
        // own): QEMU took it to the guest at the next block's start.
        let sent = matches!(d.cause, DeathCause::Sent(n) if n == 0 || n == u64::from(t.ids));
        let host = match d.cause {
            DeathCause::Fault { code, addr } => Some((code, addr)),
            _ => None,
        };
        let fault = killed && !sent && d.signo < 64 && FAULT_SIGNALS & (1 << d.signo) != 0;
        let goes = inside.is_some_and(|_| may_go_to(last, start, rip));
        let at_its_syscall = inside == Some(whole - 1) && last.kind == Kind::Syscall;
        if killed {
            self.side.lock().expect("not poisoned").killed = Some((d.signo, rip));
        }
        // The held instructions of the block before ran: this one began after them (QE21).
        self.release_held(out);
        match inside {
            Some(j) if fault && (!goes || host.is_some()) => {
                // The instructions before the faulting one ran; it did not.
                self.entered = false;
                if j > 0 {
                    self.run_ids(u64::from(t.first), j as u64, out, at)?;
                }
                self.step(self.table[first + j], out, at)?;
                self.pending = None;
                self.pending_id = None;
                self.counts.signals += 1;
                let (code, cr2) = match host {
                    Some((code, addr)) => (code, addr),
                    // A SIGSEGV QEMU raised without a host fault: a #GP (a privileged
                    // instruction); the others' exceptions do not depend on it.
                    None => (SI_KERNEL, 0),
                };
                out.event(Event::far(
                    fault_kind(d.signo, code, cr2),
                    rip,
                    SYSCALL_ENTRY,
                    0,
                    ExecMode::Bits64,
                ));
                Ok(())
            }
            Some(_) if fault => bad(
                self,
                format!(
                    "the program died of signal {} at {rip:#x}, the first instruction of its last block, \
                     where that block also goes: whether it faulted there or the signal came from \
                     another process after the block ran is not known (QE22)",
                    d.signo
                ),
            ),
            Some(_) if !(goes || at_its_syscall) => bad(
                self,
                format!(
                    "the program died while this thread was at {rip:#x}, inside the block that began \
                     last, where no fault stopped it: what ran is not known (QE22)"
                ),
            ),
            _ => {
                // The block ran to its end (or up to the SYSCALL it is in) and went to RIP.
                self.run_ids(u64::from(t.first), ids as u64, out, at)?;
                // In the kernel: a SYSCALL in its system call, or an INT (INT3, INT1, INTO) that
                // trapped, RIP after it: the trace ends with its transfer there (QE7, TIP3,
                // PGD2), when the stream ends.
                let in_kernel = match last.kind {
                    Kind::Syscall => rip == last.next() || rip == last.ip,
                    Kind::SoftwareInterrupt(_) => rip == last.next(),
                    _ => false,
                };
                if in_kernel {
                    self.entered = true;
                    return Ok(());
                }
                if let Some(b) = self.pending_block.take() {
                    self.resolve_block(b, rip, out, at)?;
                } else if let Some(p) = self.pending.take() {
                    if !(p.kind == Kind::RepString && p.ip == rip) {
                        self.resolve(p, rip, out, at)?;
                    }
                }
                self.pending = None;
                self.pending_id = None;
                let event = if fault && ACCESS_SIGNALS & (1 << d.signo) != 0 {
                    // Fetching the instruction at RIP faulted.
                    let cr2 = host.map_or(rip, |h| h.1);
                    Event::far(
                        FarKind::Exception {
                            vector: 14,
                            cr2: Some(cr2),
                        },
                        rip,
                        SYSCALL_ENTRY,
                        0,
                        ExecMode::Bits64,
                    )
                } else {
                    interrupted_at(rip)
                };
                out.event(event);
                Ok(())
            }
        }
    }
}
