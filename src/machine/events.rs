//! One vCPU's block executions as the tracer's events (QE27): each block's instructions at its
//! real start, the last one's successor the next block's start (or, where an exception or
//! interrupt came after the block, the instruction it came before), a MOV to CR3 with the value
//! the next block read, and the transfer the next block starts with: a far transfer by the
//! block's last instruction (SYSCALL, SYSRET, IRET, INT n, far branches) with the CPL of the CS
//! read there, and exceptions and interrupts from the frame's RIP (QE25). A REP string
//! instruction, which QEMU runs once an iteration, retires once, when it goes elsewhere.

use crate::sources::qemu::{classify, Kind};
use crate::sources::steps::Steps;
use crate::tracer::{Block, BlockEnd, Event, ExecMode, FarKind};
use ptemu_wire::flow::Last;
use ptemu_wire::system::{is_exception, Execution, Registers, Transfer};
use rustc_hash::FxHashMap;

/// One instruction of a translated block.
#[derive(Clone, Copy, Debug)]
struct Insn {
    /// Its offset from the block's start.
    offset: u32,
    len: u8,
    kind: Kind,
    /// It is a MOV to CR3.
    cr3_write: bool,
}

/// A translated block's instructions, classified once, and its bytes.
#[derive(Clone, Debug)]
pub struct BlockCode {
    insns: Vec<Insn>,
    lens: Box<[u8]>,
    /// Its bytes, as QEMU translated them (the code image's, QE28).
    code: Box<[u8]>,
    last: Last,
    /// Why its bytes are not 64-bit code (a block of the firmware's, run before long mode):
    /// an error only if it runs traced.
    bad: Option<String>,
    /// How it ends where its last instruction is a near branch or none (not a far transfer,
    /// not a REP string instruction): the tracer's block end ([`Block::events_into`] gives the
    /// events), a direct target as its offset from the block's start.
    near_end: Option<BlockEnd>,
    /// It holds a MOV to CR3.
    cr3: bool,
}

impl BlockCode {
    /// Its MOVs to CR3 among its first `n` instructions.
    pub fn cr3_writes(&self, n: u32) -> u64 {
        self.insns.iter().take(n as usize).filter(|i| i.cr3_write).count() as u64
    }

    /// Its bytes.
    pub fn code(&self) -> &[u8] {
        &self.code
    }

    /// The block at `reported` whose instructions start at `offsets` in `code`; `last` is its
    /// flow's kind of last instruction. Bytes that do not decode make a block that may not
    /// run traced.
    pub fn new(reported: u64, offsets: &[u32], code: &[u8], last: Last) -> BlockCode {
        let mut b = BlockCode {
            insns: Vec::with_capacity(offsets.len()),
            lens: Box::new([]),
            code: code.into(),
            last,
            bad: None,
            near_end: None,
            cr3: false,
        };
        let mut near_end = None;
        for (k, &o) in offsets.iter().enumerate() {
            let end = offsets.get(k + 1).map_or(code.len(), |&n| n as usize);
            let Some(bytes) = code.get(o as usize..end) else {
                b.bad = Some("an instruction past its block's code".into());
                return b;
            };
            let i = match classify(reported.wrapping_add(u64::from(o)), bytes) {
                Ok(i) => i,
                Err(e) => {
                    b.bad = Some(e);
                    return b;
                }
            };
            let target = i.target.wrapping_sub(reported);
            near_end = match i.kind {
                Kind::Plain => Some(BlockEnd::FallThrough),
                Kind::Conditional => Some(BlockEnd::Conditional { target }),
                Kind::Jump => Some(BlockEnd::Jump { target }),
                Kind::Call => Some(BlockEnd::Call { target }),
                Kind::IndirectJump => Some(BlockEnd::IndirectJump),
                Kind::IndirectCall => Some(BlockEnd::IndirectCall),
                Kind::Return => Some(BlockEnd::Return),
                _ => None,
            };
            b.cr3 |= i.cr3_write;
            b.insns.push(Insn {
                offset: o,
                len: i.len,
                kind: i.kind,
                cr3_write: i.cr3_write,
            });
        }
        b.lens = b.insns.iter().map(|i| i.len).collect();
        // SYSRET and SYSEXIT are plain to the classifier (user mode's), far here.
        b.near_end = near_end.filter(|_| last == Last::Near);
        b
    }

    /// The tracer's block of this one run at `at`, ending as `end` (its direct target an
    /// offset, as [`BlockCode::near_end`] keeps it).
    fn at(&self, at: u64, end: BlockEnd) -> Result<Block, EventError> {
        let end = match end {
            BlockEnd::Conditional { target } => BlockEnd::Conditional {
                target: at.wrapping_add(target),
            },
            BlockEnd::Jump { target } => BlockEnd::Jump {
                target: at.wrapping_add(target),
            },
            BlockEnd::Call { target } => BlockEnd::Call {
                target: at.wrapping_add(target),
            },
            other => other,
        };
        Block::new(at, &self.lens, end).map_err(|e| e.to_string())
    }
}

/// What went wrong: a transfer whose target block has no registers (never, from the plugin).
pub type EventError = String;

/// Turns one vCPU's executions, in order, into events and block steps.
#[derive(Debug, Default)]
pub struct VcpuEvents {
    /// The execution whose events wait for the next one's start.
    held: Option<Execution>,
    /// The tracer's blocks (its table's indices, in the order defined): where each translated
    /// block last ran as one, and every other (block, start) pair.
    last_step: Vec<(u64, u32)>,
    steps: FxHashMap<(u32, u64), u32>,
    defined: u32,
    /// Executions taken, and the instruction events given.
    pub instructions: u64,
    /// Exceptions and interrupts given.
    pub asynchronous: u64,
    /// Far transfers given (SYSCALL, SYSRET, IRET, INT n, far branches).
    pub far: u64,
    /// Executions a fault stopped (the faulting instruction started and did not retire).
    pub faults: u64,
    /// Iterations of REP string instructions that went on to another (QEMU's executions of
    /// one instruction that retires once, at its last).
    pub rep_iterations: u64,
    /// MOVs to CR3 given.
    pub cr3_writes: u64,
    /// SYSCALLs and SYSENTERs given.
    pub syscalls: u64,
}

impl VcpuEvents {
    /// The next execution of this vCPU (`code`: every block's code, by index): the events of
    /// the one before it go to `out`.
    pub fn push(&mut self, next: Execution, code: &[BlockCode], out: &mut Steps) -> Result<(), EventError> {
        if let Some(e) = self.held.take() {
            self.events(&e, Some(&next), code, out)?;
        }
        self.held = Some(next);
        Ok(())
    }

    /// The vCPU's last execution, with no successor: its instructions but the last's transfer.
    pub fn finish(&mut self, code: &[BlockCode], out: &mut Steps) -> Result<(), EventError> {
        if let Some(e) = self.held.take() {
            self.events(&e, None, code, out)?;
        }
        Ok(())
    }

    /// The tracer's block for `b` (translated block `block`) at `at`, defined in `out` the first
    /// time it runs there.
    fn step_id(
        &mut self,
        block: u32,
        at: u64,
        b: &BlockCode,
        end: BlockEnd,
        out: &mut Steps,
    ) -> Result<u32, EventError> {
        let k = block as usize;
        if self.last_step.len() <= k {
            self.last_step.resize(k + 1, (0, u32::MAX));
        }
        let (last_at, id) = self.last_step[k];
        if last_at == at && id != u32::MAX {
            return Ok(id);
        }
        let id = match self.steps.get(&(block, at)) {
            Some(&id) => id,
            None => {
                out.define(b.at(at, end)?);
                let id = self.defined;
                self.defined += 1;
                self.steps.insert((block, at), id);
                id
            }
        };
        self.last_step[k] = (at, id);
        Ok(id)
    }

    /// The events of an execution that is no block step: each instruction that ran, a
    /// continuing REP string instruction's none, and a last instruction's far transfer.
    fn instructions_of(
        &mut self,
        e: &Execution,
        b: &BlockCode,
        successor: Option<u64>,
        nregs: Option<Registers>,
        out: &mut Steps,
    ) -> Result<(), EventError> {
        let whole = e.retired as usize == b.insns.len();
        for (k, i) in b.insns.iter().enumerate().take(e.retired as usize) {
            let ip = e.at.wrapping_add(u64::from(i.offset));
            let len = i.len;
            let last = whole && k + 1 == b.insns.len();
            let far = match (last, successor, b.last, i.kind) {
                (false, ..) => None,
                // Another iteration comes next: the instruction has not retired yet.
                (true, Some(to), ..) if i.kind == Kind::RepString && to == ip => {
                    self.rep_iterations += 1;
                    continue;
                }
                // The vCPU's last, a branch, a far transfer or a REP string instruction: where it
                // went, and whether it retired, is not known (the machine stopped there).
                (true, None, ..) if i.kind != Kind::Plain || b.last != Last::Near => continue,
                (true, _, Last::Sysret, _) => Some(FarKind::Sysret),
                (true, _, _, Kind::Syscall) => {
                    self.syscalls += 1;
                    Some(FarKind::Syscall)
                }
                (true, _, _, Kind::Iret) => Some(FarKind::Iret),
                (true, _, _, Kind::Far) => Some(FarKind::FarBranch),
                (true, _, _, Kind::SoftwareInterrupt(vector)) => Some(FarKind::SoftwareInterrupt { vector }),
                _ => None,
            };
            self.instructions += 1;
            let ev = match far {
                Some(kind) => {
                    let (Some(to), Some(r)) = (successor, nregs) else {
                        return Err(format!(
                            "a far transfer at {ip:#x} into a block with no registers"
                        ));
                    };
                    self.far += 1;
                    Event::far(kind, ip, to, (r.cs & 3) as u8, ExecMode::Bits64)
                }
                None if i.cr3_write => {
                    self.cr3_writes += 1;
                    Event::Cr3Write {
                        ip,
                        len,
                        cr3: nregs.map_or(0, |r| r.cr3),
                    }
                }
                None => Event::Retire { ip, len },
            };
            out.event(ev);
        }
        Ok(())
    }

    fn events(
        &mut self,
        e: &Execution,
        next: Option<&Execution>,
        code: &[BlockCode],
        out: &mut Steps,
    ) -> Result<(), EventError> {
        let b = code
            .get(e.block as usize)
            .ok_or("an execution of a block with no code")?;
        if let Some(why) = &b.bad {
            return Err(format!("the block at {:#x} ran traced: {why}", e.at));
        }
        let nregs = next.and_then(|n| n.regs);
        let transfer = nregs.map(|r| r.transfer).unwrap_or(Transfer::Next);
        let cr3 = nregs.map_or(0, |r| r.cr3);
        // Where the block's last instruction went: the next block, or, where an event came
        // after the block ran whole, the instruction the event came before.
        let successor = match transfer {
            Transfer::Async { from, cut: false, .. } => Some(from),
            _ => next.map(|n| n.at),
        };
        let whole = e.retired as usize == b.insns.len();
        match (b.near_end, successor) {
            // A whole execution that ends near: one block step (BLK1), or, with a MOV to CR3
            // in it, the block's events with that retirement a CR3 write.
            (Some(end), Some(to)) if whole => {
                self.instructions += b.insns.len() as u64;
                if !b.cr3 {
                    let id = self.step_id(e.block, e.at, b, end, out)?;
                    out.exec(id, to, b.insns.len());
                } else {
                    let events = out.events_mut();
                    let from = events.len();
                    b.at(e.at, end)?.events_into(to, events);
                    for (ev, i) in events[from..].iter_mut().zip(&b.insns) {
                        if let (Event::Retire { ip, len }, true) = (*ev, i.cr3_write) {
                            self.cr3_writes += 1;
                            *ev = Event::Cr3Write { ip, len, cr3 };
                        }
                    }
                }
            }
            _ => self.instructions_of(e, b, successor, nregs, out)?,
        }
        self.faults += u64::from(e.faulted);
        // The transfer came from the next block's registers: both are there.
        if let (Some(r), Some(n)) = (nregs, next) {
            if let Transfer::Async { vector, from, .. } = r.transfer {
                let kind = if is_exception(vector) {
                    FarKind::Exception { vector, cr2: None }
                } else {
                    FarKind::Interrupt { vector }
                };
                self.asynchronous += 1;
                out.event(Event::far(kind, from, n.at, (r.cs & 3) as u8, ExecMode::Bits64));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: u64 = 0xffff_ffff_8100_0000;

    fn block(at: u64, insns: &[&[u8]], last: Last) -> BlockCode {
        let mut offsets = Vec::new();
        let mut code = Vec::new();
        for i in insns {
            offsets.push(code.len() as u32);
            code.extend_from_slice(i);
        }
        BlockCode::new(at, &offsets, &code, last)
    }

    fn exec(block: u32, at: u64, len: u32) -> Execution {
        Execution {
            vcpu: 0,
            block,
            at,
            len,
            retired: len,
            faulted: false,
            regs: None,
        }
    }

    fn regs(rip: u64, cs: u64, transfer: Transfer) -> Option<Registers> {
        Some(Registers {
            rip,
            cs,
            cr3: 0x1000,
            long_mode: true,
            transfer,
        })
    }

    /// An execution of the one-instruction kernel block `block` at [`KERNEL`], entered by
    /// exception or interrupt `vector` from `from` (`cut`: it stopped the block before).
    fn entry(block: u32, vector: u8, from: u64, cut: bool) -> Execution {
        Execution {
            regs: regs(KERNEL, 0x10, Transfer::Async { vector, from, cut }),
            ..exec(block, KERNEL, 1)
        }
    }

    /// The steps of `execs` in order (the last one's too).
    fn steps(code: &[BlockCode], execs: &[Execution]) -> (Steps, VcpuEvents) {
        let mut v = VcpuEvents::default();
        let mut out = Steps::default();
        for e in execs {
            v.push(*e, code, &mut out).unwrap();
        }
        v.finish(code, &mut out).unwrap();
        (out, v)
    }

    /// The events of `execs` in order (the last one's too), block steps expanded.
    fn events(code: &[BlockCode], execs: &[Execution]) -> (Vec<Event>, VcpuEvents) {
        let (out, v) = steps(code, execs);
        let mut events = Vec::new();
        out.expand_into(out.blocks(), &mut events);
        (events, v)
    }

    /// QE27: a block's instructions retire at its real start, its last one's branch goes to
    /// the next block's start; a block QEMU runs elsewhere than reported moves its direct
    /// targets with it (QE24); an interrupt after a block is FUP + TIP from the frame's RIP,
    /// the block's own branch going there.
    #[test]
    fn qe27_blocks_are_their_instructions_and_transfers() {
        // mov eax, 1; jne +0x10 (to 0x1017) | ret | the handler's nop.
        let code = [
            block(0x1000, &[&[0xb8, 1, 0, 0, 0], &[0x75, 0x10]], Last::Near),
            block(0x1017, &[&[0xc3]], Last::Near),
            block(KERNEL, &[&[0x90]], Last::Near),
        ];
        let (out, _) = events(
            &code,
            &[exec(0, 0x7000, 2), exec(1, 0x7017, 1), exec(0, 0x5000, 2)],
        );
        assert_eq!(
            &out[..3],
            &[
                Event::Retire { ip: 0x7000, len: 5 },
                Event::CondBranch {
                    ip: 0x7005,
                    len: 2,
                    target: 0x7017,
                    taken: true
                },
                Event::Return {
                    ip: 0x7017,
                    target: 0x5000
                },
            ]
        );
        // The branch falls through, and a timer interrupt (vector 0xec) comes before 0x1007.
        let handler = entry(2, 0xec, 0x1007, false);
        let (out, v) = events(&code, &[exec(0, 0x1000, 2), handler]);
        assert_eq!(
            &out[1..3],
            &[
                Event::CondBranch {
                    ip: 0x1005,
                    len: 2,
                    target: 0x1017,
                    taken: false
                },
                Event::far(
                    FarKind::Interrupt { vector: 0xec },
                    0x1007,
                    KERNEL,
                    0,
                    ExecMode::Bits64
                ),
            ]
        );
        assert_eq!((v.asynchronous, v.instructions), (1, 3));
    }

    /// QE27, BLK1: a whole execution of a block that ends near is one block step, one tracer
    /// block for each address the translated block ran at; the others are events.
    #[test]
    fn qe27_whole_near_executions_are_block_steps() {
        let code = [
            block(0x1000, &[&[0xb8, 1, 0, 0, 0], &[0x75, 0x10]], Last::Near),
            block(0x1017, &[&[0xc3]], Last::Near),
        ];
        let execs = [
            exec(0, 0x1000, 2),
            exec(1, 0x1017, 1),
            exec(0, 0x7000, 2),
            exec(1, 0x7017, 1),
            exec(0, 0x1000, 2),
        ];
        let (out, v) = steps(&code, &execs);
        assert_eq!(out.blocks().len(), 4, "two blocks at two addresses each");
        assert_eq!(out.blocks()[2].start(), 0x7000);
        let pieces: Vec<_> = out.pieces().collect();
        assert!(
            matches!(pieces[0], crate::sources::steps::Piece::Blocks { ids, .. } if ids == [0, 1, 2, 3]),
            "{pieces:?}"
        );
        // The last execution's branch went where no block tells: its first instruction only.
        assert!(
            matches!(
                pieces[1],
                crate::sources::steps::Piece::Events([Event::Retire { ip: 0x1000, len: 5 }])
            ),
            "{pieces:?}"
        );
        assert_eq!(v.instructions, 6 + 1);
    }

    /// QE27: a fault stops its block at the faulting instruction, which does not retire: FUP
    /// at it + TIP; a split (QEMU ended the block early) retires what ran and nothing else.
    #[test]
    fn qe27_faults_stop_a_block_and_splits_only_shorten_it() {
        let code = [
            block(0x1000, &[&[0x48, 0x8b, 0x03], &[0xc3]], Last::Near),
            block(KERNEL, &[&[0x90]], Last::Near),
            block(0x1003, &[&[0xc3]], Last::Near),
        ];
        let mut stopped = exec(0, 0x1000, 2);
        stopped.retired = 0;
        stopped.faulted = true;
        let handler = entry(1, 14, 0x1000, true);
        let (out, v) = events(&code, &[stopped, handler]);
        assert_eq!(
            out[0],
            Event::far(
                FarKind::Exception {
                    vector: 14,
                    cr2: None
                },
                0x1000,
                KERNEL,
                0,
                ExecMode::Bits64
            )
        );
        assert_eq!(v.faults, 1);
        let mut split = exec(0, 0x1000, 2);
        split.retired = 1;
        let mut rest = exec(2, 0x1003, 1);
        rest.regs = regs(0x1003, 0x33, Transfer::Split { at: 0x1003 });
        let (out, _) = events(&code, &[split, rest]);
        // The vCPU's last RET went where no block tells: it is not given.
        assert_eq!(out, [Event::Retire { ip: 0x1000, len: 3 }]);
    }

    /// QE27: a REP string instruction QEMU runs once an iteration retires once, at its last;
    /// SYSCALL is a far transfer to the kernel at the CPL of the CS read there; a MOV to CR3
    /// takes the value the next block read (PIP).
    #[test]
    fn qe27_rep_strings_retire_once_and_far_transfers_take_their_cpl() {
        let code = [
            block(0x2000, &[&[0xf3, 0xa4]], Last::Near),
            block(0x2002, &[&[0x0f, 0x05]], Last::Syscall),
            block(KERNEL, &[&[0x0f, 0x22, 0xd8], &[0xeb, 0x00]], Last::Near),
            block(KERNEL + 5, &[&[0x90]], Last::Near),
        ];
        let mut kernel = exec(2, KERNEL, 2);
        kernel.regs = regs(KERNEL, 0x10, Transfer::Far);
        let mut after = exec(3, KERNEL + 5, 1);
        after.regs = Some(Registers {
            cr3: 0x1234_5000,
            ..regs(KERNEL + 5, 0x10, Transfer::Next).unwrap()
        });
        let execs = [
            exec(0, 0x2000, 1),
            exec(0, 0x2000, 1),
            exec(0, 0x2000, 1),
            exec(1, 0x2002, 1),
            kernel,
            after,
        ];
        let (out, v) = events(&code, &execs);
        assert_eq!(
            &out[..4],
            &[
                Event::Retire { ip: 0x2000, len: 2 },
                Event::far(FarKind::Syscall, 0x2002, KERNEL, 0, ExecMode::Bits64),
                Event::Cr3Write {
                    ip: KERNEL,
                    len: 3,
                    cr3: 0x1234_5000
                },
                Event::Jump {
                    ip: KERNEL + 3,
                    target: KERNEL + 5
                },
            ]
        );
        assert_eq!((v.rep_iterations, v.far, v.cr3_writes), (2, 1, 1));
    }

    /// QE27: a MOV to CR3 in a block that ends near is a CR3 write among the block's events
    /// (no block step: the tracer's blocks hold no PIP).
    #[test]
    fn qe27_a_mov_to_cr3_in_a_near_block_is_its_cr3_write() {
        let code = [
            block(KERNEL, &[&[0x0f, 0x22, 0xd8], &[0xeb, 0x00]], Last::Near),
            block(KERNEL + 5, &[&[0x90]], Last::Near),
        ];
        let mut after = exec(1, KERNEL + 5, 1);
        after.regs = Some(Registers {
            cr3: 0x7000,
            ..regs(KERNEL + 5, 0x10, Transfer::Next).unwrap()
        });
        let (out, v) = steps(&code, &[exec(0, KERNEL, 2), after]);
        assert!(out.blocks().is_empty());
        assert_eq!(
            &out.events()[..2],
            &[
                Event::Cr3Write {
                    ip: KERNEL,
                    len: 3,
                    cr3: 0x7000
                },
                Event::Jump {
                    ip: KERNEL + 3,
                    target: KERNEL + 5
                },
            ]
        );
        assert_eq!((v.cr3_writes, v.instructions), (1, 3));
    }

    /// QE29: bytes that are no 64-bit code (the firmware's real-mode blocks) are refused only
    /// where such a block runs traced.
    #[test]
    fn qe29_real_mode_code_is_refused_only_when_traced() {
        let code = [block(0xffff_fff0, &[&[0xea, 0x5b, 0xe0, 0x00, 0xf0]], Last::Near)];
        let mut v = VcpuEvents::default();
        let mut out = Steps::default();
        v.push(exec(0, 0xffff_fff0, 1), &code, &mut out).unwrap();
        let e = v.finish(&code, &mut out).unwrap_err();
        assert!(e.contains("do not decode"), "{e}");
    }
}
