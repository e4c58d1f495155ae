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
use iced_x86::{Code, Decoder, DecoderOptions, Register};
use ptemu_wire::flow::Last;
use ptemu_wire::system::{is_exception, Execution, Registers, Transfer};
use rustc_hash::FxHashMap;

/// One instruction of a translated block, at the block's reported address.
#[derive(Clone, Copy, Debug)]
struct Insn {
    /// Its offset from the block's start.
    offset: u32,
    len: u8,
    kind: Kind,
    /// A direct branch's target, as an offset from the block's reported start.
    target: u64,
    /// It is a MOV to CR3.
    cr3_write: bool,
}

/// A translated block's instructions, classified once.
#[derive(Clone, Debug)]
pub struct BlockCode {
    reported: u64,
    insns: Vec<Insn>,
    last: Last,
    /// Why its bytes are not 64-bit code (a block of the firmware's, run before long mode):
    /// an error only if it runs traced.
    bad: Option<String>,
    /// Every instruction's length.
    lens: Box<[u8]>,
    /// How it ends, where an execution of it that ran whole is one block step of the tracer
    /// (BLK1): its last instruction a near branch or none, no MOV to CR3 in it, no far
    /// transfer, no REP string instruction at its end. The direct target is the reported
    /// one's offset from `reported`.
    step_end: Option<BlockEnd>,
}

impl BlockCode {
    /// Its MOVs to CR3 among its first `n` instructions.
    pub fn cr3_writes(&self, n: u32) -> u64 {
        self.insns.iter().take(n as usize).filter(|i| i.cr3_write).count() as u64
    }

    /// The block at `reported` whose instructions start at `offsets` in `code`; `last` is its
    /// flow's kind of last instruction. `Err`: bytes that do not decode.
    pub fn new(reported: u64, offsets: &[u32], code: &[u8], last: Last) -> BlockCode {
        match Self::decoded(reported, offsets, code, last) {
            Ok(b) => b,
            Err(e) => BlockCode {
                reported,
                insns: Vec::new(),
                last,
                bad: Some(e),
                lens: Box::new([]),
                step_end: None,
            },
        }
    }

    fn decoded(reported: u64, offsets: &[u32], code: &[u8], last: Last) -> Result<BlockCode, String> {
        let mut insns = Vec::with_capacity(offsets.len());
        for (k, &o) in offsets.iter().enumerate() {
            let end = offsets.get(k + 1).map_or(code.len(), |&n| n as usize);
            let bytes = code
                .get(o as usize..end)
                .ok_or("an instruction past its block's code")?;
            let ip = reported.wrapping_add(u64::from(o));
            let i = classify(ip, bytes)?;
            let d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
            insns.push(Insn {
                offset: o,
                len: i.len,
                kind: i.kind,
                target: i.target.wrapping_sub(reported),
                cr3_write: d.code() == Code::Mov_cr_r64 && d.op0_register() == Register::CR3,
            });
        }
        let lens = insns.iter().map(|i| i.len).collect();
        let step_end = match insns.last() {
            _ if last != Last::Near || insns.iter().any(|i| i.cr3_write) => None,
            Some(i) => match i.kind {
                Kind::Plain => Some(BlockEnd::FallThrough),
                Kind::Conditional => Some(BlockEnd::Conditional { target: i.target }),
                Kind::Jump => Some(BlockEnd::Jump { target: i.target }),
                Kind::Call => Some(BlockEnd::Call { target: i.target }),
                Kind::IndirectJump => Some(BlockEnd::IndirectJump),
                Kind::IndirectCall => Some(BlockEnd::IndirectCall),
                Kind::Return => Some(BlockEnd::Return),
                _ => None,
            },
            None => None,
        };
        Ok(BlockCode {
            reported,
            insns,
            last,
            bad: None,
            lens,
            step_end,
        })
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
                out.define(Block::new(at, &b.lens, end).map_err(|e| e.to_string())?);
                let id = self.defined;
                self.defined += 1;
                self.steps.insert((block, at), id);
                id
            }
        };
        self.last_step[k] = (at, id);
        Ok(id)
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
        let delta = e.at.wrapping_sub(b.reported);
        let nregs = next.and_then(|n| n.regs);
        let transfer = nregs.map(|r| r.transfer).unwrap_or(Transfer::Next);
        // Where the block's last instruction went: the next block, or, where an event came
        // after the block ran whole, the instruction the event came before.
        let successor = match transfer {
            Transfer::Async { from, cut: false, .. } => Some(from),
            _ => next.map(|n| n.at),
        };
        let cpl = |r: Option<Registers>| r.map(|r| (r.cs & 3) as u8);
        let whole = e.retired as usize == b.insns.len();
        // A whole execution of a block that ends near (or not at all) is one step (BLK1).
        let step = match (b.step_end, successor) {
            (Some(end), Some(to)) if whole && !e.faulted => Some((end, to)),
            _ => None,
        };
        if let Some((end, to)) = step {
            let id = self.step_id(e.block, e.at, b, end, out)?;
            out.exec(id, to, b.insns.len());
            self.instructions += b.insns.len() as u64;
        }
        let insns = if step.is_some() { &[][..] } else { &b.insns[..] };
        for (k, i) in insns.iter().enumerate().take(e.retired as usize) {
            let ip = e.at.wrapping_add(u64::from(i.offset));
            let len = i.len;
            let after = ip.wrapping_add(u64::from(len));
            let last = whole && k + 1 == b.insns.len();
            if i.kind == Kind::RepString {
                // Another iteration comes next: the instruction has not retired yet.
                if last && successor == Some(ip) {
                    self.rep_iterations += 1;
                    continue;
                }
            }
            if last && successor.is_none() && i.kind != Kind::Plain {
                // The vCPU's last: where it went is not known (the machine stopped there).
                continue;
            }
            if !last || successor.is_none() {
                self.instructions += 1;
                self.cr3_writes += u64::from(i.cr3_write);
                out.event(if i.cr3_write {
                    Event::Cr3Write {
                        ip,
                        len,
                        cr3: nregs.map_or(0, |r| r.cr3),
                    }
                } else {
                    Event::Retire { ip, len }
                });
                continue;
            }
            let to = successor.expect("checked");
            let target = i.target.wrapping_add(b.reported).wrapping_add(delta);
            let far = |kind: FarKind| -> Result<Event, EventError> {
                let cpl = cpl(nregs)
                    .ok_or_else(|| format!("a far transfer at {ip:#x} into a block with no registers"))?;
                Ok(Event::far(kind, ip, to, cpl, ExecMode::Bits64))
            };
            self.instructions += 1;
            let ev = match (i.kind, b.last) {
                (_, Last::Sysret) => {
                    self.far += 1;
                    far(FarKind::Sysret)?
                }
                (Kind::Conditional, _) => Event::CondBranch {
                    ip,
                    len,
                    target,
                    taken: to == target && to != after,
                },
                (Kind::Jump, _) => Event::Jump { ip, target },
                (Kind::Call, _) => Event::Call { ip, len, target },
                (Kind::IndirectJump, _) => Event::IndirectJump { ip, target: to },
                (Kind::IndirectCall, _) => Event::IndirectCall { ip, len, target: to },
                (Kind::Return, _) => Event::Return { ip, target: to },
                (Kind::Syscall, _) => {
                    self.far += 1;
                    self.syscalls += 1;
                    far(FarKind::Syscall)?
                }
                (Kind::Iret, _) => {
                    self.far += 1;
                    far(FarKind::Iret)?
                }
                (Kind::Far, _) => {
                    self.far += 1;
                    far(FarKind::FarBranch)?
                }
                (Kind::SoftwareInterrupt(vector), _) => {
                    self.far += 1;
                    far(FarKind::SoftwareInterrupt { vector })?
                }
                _ if i.cr3_write => {
                    self.cr3_writes += 1;
                    Event::Cr3Write {
                        ip,
                        len,
                        cr3: nregs.map_or(0, |r| r.cr3),
                    }
                }
                _ => Event::Retire { ip, len },
            };
            out.event(ev);
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

    /// The events of `execs` in order (the last one's too), block steps expanded.
    fn events(code: &[BlockCode], execs: &[Execution]) -> (Vec<Event>, VcpuEvents) {
        let mut v = VcpuEvents::default();
        let mut out = Steps::default();
        for e in execs {
            v.push(*e, code, &mut out).unwrap();
        }
        v.finish(code, &mut out).unwrap();
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
        let mut handler = exec(2, KERNEL, 1);
        handler.regs = regs(
            KERNEL,
            0x10,
            Transfer::Async {
                vector: 0xec,
                from: 0x1007,
                cut: false,
            },
        );
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
        let mut v = VcpuEvents::default();
        let mut out = Steps::default();
        for e in [
            exec(0, 0x1000, 2),
            exec(1, 0x1017, 1),
            exec(0, 0x7000, 2),
            exec(1, 0x7017, 1),
            exec(0, 0x1000, 2),
        ] {
            v.push(e, &code, &mut out).unwrap();
        }
        v.finish(&code, &mut out).unwrap();
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
        let mut handler = exec(1, KERNEL, 1);
        handler.regs = regs(
            KERNEL,
            0x10,
            Transfer::Async {
                vector: 14,
                from: 0x1000,
                cut: true,
            },
        );
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
