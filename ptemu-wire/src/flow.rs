//! The flow of a vCPU's blocks in QEMU's system emulator (spec/qemu.md QE24, QE25), which the
//! plugin follows as the blocks run and the reader of its stream follows again, by the same
//! code: what a translated block tells of the block after it (how it ends, the successors its
//! end allows, its instruction starts, the kind of its last instruction, whether it writes CR3
//! or loads the IDT), and a [`Tracker`] that derives each block's real start from the one
//! before it and a shadow stack of CALLs, where the registers need not be read.

use crate::classify::{is_cr3_write, is_sysret, kind_of, Kind};
use iced_x86::{Decoder, DecoderOptions, Instruction, InstructionInfoFactory, Mnemonic, OpAccess};
use ptemu_core::tracer::RetStack;

/// How a translated block ends, for the address of the block after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Falls through, or a direct branch (`target` as reported; 0 when it has none), which may
    /// also fall through (`falls`).
    Known {
        /// The direct branch's target as reported (0: none).
        target: u64,
        /// It may fall through.
        falls: bool,
    },
    /// A REP string instruction at this reported address: QEMU runs it once an iteration, each
    /// a block execution of its own, so it may come next as well as the fall-through.
    Rep(u64),
    /// An indirect branch, a far transfer, an interrupt instruction, or bytes that do not
    /// decode as 64-bit code: the registers tell.
    Unknown,
}

/// The kind of a block's last instruction, for the transfer the next block begins with (QE25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last {
    /// SYSCALL or SYSENTER.
    Syscall,
    /// SYSRET or SYSEXIT.
    Sysret,
    /// IRET.
    Iret,
    /// INT n, INT3, INTO or INT1 (the vector it raises).
    SoftInt(u8),
    /// A far JMP, CALL or RET.
    Far,
    /// Anything else (a near branch, a plain instruction, HLT).
    Near,
}

/// What a translated block tells of the flow.
#[derive(Clone, Debug)]
pub struct BlockFlow {
    /// The address QEMU reported (the first translation's).
    pub reported: u64,
    /// Its length in bytes.
    pub len: u64,
    /// How it ends.
    pub exit: Exit,
    /// Its last instruction is a near CALL (direct or indirect): the address after the block is
    /// where the matching RET returns.
    pub calls: bool,
    /// Its last instruction is a near RET.
    pub returns: bool,
    /// Its last instruction's kind.
    pub last: Last,
    /// Each instruction's start, as an offset from the block's.
    pub starts: Box<[u16]>,
    /// It writes CR3 or loads the IDT: the block after it reads the registers.
    pub rereads: bool,
    /// It is one instruction that writes memory: the block QEMU makes to run a store again
    /// after the store changed the code of the block it was in (QE26).
    pub single_store: bool,
}

/// One instruction of a block being translated: its address, its size as QEMU gives it, and
/// its bytes (as far as QEMU gave them, at most 16).
#[derive(Clone, Copy, Debug)]
pub struct Insn<'a> {
    /// Its address as QEMU reports it.
    pub ip: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its bytes.
    pub bytes: &'a [u8],
}

fn decode(i: &Insn<'_>) -> Instruction {
    Decoder::with_ip(64, i.bytes, i.ip, DecoderOptions::NONE).decode()
}

/// Whether the instruction is LIDT (whose operand the plugin reads, QE25).
pub fn is_lidt(i: &Insn<'_>) -> bool {
    decode(i).mnemonic() == Mnemonic::Lidt
}

impl BlockFlow {
    /// What a block of these instructions (in order, at least one) tells; `reported` is its
    /// start as QEMU gives it.
    pub fn new(reported: u64, insns: &[Insn<'_>]) -> BlockFlow {
        let last = insns.last().expect("a block has an instruction");
        let mut rereads = false;
        let mut starts = Vec::with_capacity(insns.len());
        let mut li = Instruction::default();
        for i in insns {
            starts.push(i.ip.wrapping_sub(reported) as u16);
            li = decode(i);
            rereads |= is_cr3_write(&li) || li.mnemonic() == Mnemonic::Lidt;
        }
        let (exit, last_kind, kind) = end_of(&li);
        BlockFlow {
            reported,
            len: last.ip.wrapping_add(last.size).wrapping_sub(reported),
            exit,
            calls: matches!(kind, Some(Kind::Call | Kind::IndirectCall)),
            returns: kind == Some(Kind::Return),
            last: last_kind,
            starts: starts.into_boxed_slice(),
            rereads,
            single_store: insns.len() == 1 && writes_memory(&li),
        }
    }

    /// A block of these consecutive instructions' bytes from `at` (tests, and any reader that
    /// has them one by one).
    #[doc(hidden)]
    pub fn of_instructions(at: u64, code: &[&[u8]]) -> BlockFlow {
        let mut ip = at;
        let insns: Vec<Insn<'_>> = code
            .iter()
            .map(|b| {
                let i = Insn {
                    ip,
                    size: b.len() as u64,
                    bytes: b,
                };
                ip = ip.wrapping_add(b.len() as u64);
                i
            })
            .collect();
        BlockFlow::new(at, &insns)
    }

    /// The offset of the block's last instruction.
    pub fn last_start(&self) -> u64 {
        u64::from(*self.starts.last().unwrap_or(&0))
    }
}

fn writes_memory(i: &Instruction) -> bool {
    InstructionInfoFactory::new()
        .info(i)
        .used_memory()
        .iter()
        .any(|m| {
            matches!(
                m.access(),
                OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite
            )
        })
}

/// How a block whose last instruction is `i` ends, the kind of that instruction for the next
/// block's transfer, and its class ([`kind_of`]; `None`: bytes that do not decode as 64-bit
/// code).
fn end_of(i: &Instruction) -> (Exit, Last, Option<Kind>) {
    if i.is_invalid() {
        return (Exit::Unknown, Last::Near, None);
    }
    if is_sysret(i) {
        return (Exit::Unknown, Last::Sysret, Some(Kind::Plain));
    }
    let (kind, target) = kind_of(i);
    let (exit, last) = match kind {
        Kind::Plain | Kind::Undone => (
            Exit::Known {
                target: 0,
                falls: true,
            },
            Last::Near,
        ),
        Kind::RepString => (Exit::Rep(i.ip()), Last::Near),
        Kind::Conditional => (Exit::Known { target, falls: true }, Last::Near),
        Kind::Jump | Kind::Call => (Exit::Known { target, falls: false }, Last::Near),
        Kind::IndirectJump | Kind::IndirectCall | Kind::Return => (Exit::Unknown, Last::Near),
        Kind::Syscall => (Exit::Unknown, Last::Syscall),
        Kind::SoftwareInterrupt(v) => (Exit::Unknown, Last::SoftInt(v)),
        Kind::Far => (Exit::Unknown, Last::Far),
        Kind::Iret => (Exit::Unknown, Last::Iret),
    };
    (exit, last, Some(kind))
}

/// The addresses the block after `prev` (which ran at `prev_at`) may start at by `prev`'s own
/// end (0: none); empty for an unknown exit.
pub fn successors(prev: &BlockFlow, prev_at: u64) -> [u64; 2] {
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
        Exit::Unknown => {}
    }
    candidates
}

/// The block's real start, if the flow says it: one of the previous block's successors that
/// is where the block was reported or where this vCPU last executed it (`seen`).
fn derived(prev: Option<&BlockFlow>, prev_at: u64, tb: &BlockFlow, seen: u64) -> Option<u64> {
    let prev = prev?;
    successors(prev, prev_at)
        .into_iter()
        .find(|&c| c != 0 && (c == tb.reported || c == seen))
}

/// What [`Tracker::exec`] found of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Its real start, where the flow gives it.
    pub at: Option<u64>,
    /// The registers are to be read in it: no start, or the block before it wrote CR3 or
    /// loaded the IDT.
    pub read: bool,
}

/// One vCPU's walk through its blocks: the real start of each, where the flow gives it (QE24).
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    /// The real start of the block running now (0: not known until the registers are read),
    /// and of the one before it.
    at: u64,
    prev_at: u64,
    /// Return addresses of the CALLs not yet returned from: the tracer's own 64-entry ring
    /// (the oldest dropped when full), a RET's target predicted from it and accepted by the
    /// rule a direct branch's is.
    shadow: RetStack,
    /// The `rip` the last register read gave.
    last_read: u64,
}

impl Tracker {
    /// Block `tb` starts after `prev` (`None`: the vCPU's first); `seen` is where this vCPU last
    /// ran `tb` (0: never).
    pub fn exec(&mut self, prev: Option<&BlockFlow>, tb: &BlockFlow, seen: u64) -> Step {
        let mut guess = derived(prev, self.at, tb, seen);
        let mut rereads = false;
        if let Some(p) = prev.filter(|_| self.at != 0) {
            if p.calls {
                self.shadow.push(self.at.wrapping_add(p.len));
            } else if p.returns {
                guess = self.shadow.pop().filter(|&c| c == tb.reported || c == seen);
            }
            rereads = p.rereads;
        }
        self.prev_at = self.at;
        self.at = guess.unwrap_or(0);
        Step {
            at: guess,
            read: guess.is_none() || rereads,
        }
    }

    /// The registers read in the block running now gave `rip`, its real start. Between the
    /// kernel's half and the user's (a system call, an interrupt, a return from one: where a
    /// context switch may lie in between) the shadow stack starts again, so that a RET is never
    /// predicted from another address space's CALLs.
    pub fn read(&mut self, rip: u64) {
        if self.at == 0 && (rip ^ self.last_read) >> 63 != 0 {
            self.shadow.clear();
        }
        self.last_read = rip;
        self.at = rip;
    }

    /// The real start of the block running now (0: not known yet).
    pub fn at(&self) -> u64 {
        self.at
    }

    /// The real start of the block before it (0: not known).
    pub fn prev_at(&self) -> u64 {
        self.prev_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(at: u64, code: &[&[u8]]) -> BlockFlow {
        BlockFlow::of_instructions(at, code)
    }

    /// QE25: a block's last instruction names the transfer the next block starts with.
    #[test]
    fn qe25_a_blocks_last_instruction_names_its_transfer() {
        let nop: &[u8] = &[0x90];
        assert_eq!(block(0x1000, &[nop, &[0x0f, 0x05]]).last, Last::Syscall);
        assert_eq!(block(0x1000, &[&[0x48, 0x0f, 0x07]]).last, Last::Sysret);
        assert_eq!(block(0x1000, &[&[0x48, 0xcf]]).last, Last::Iret);
        assert_eq!(block(0x1000, &[&[0xcc]]).last, Last::SoftInt(3));
        assert_eq!(block(0x1000, &[&[0xcd, 0x80]]).last, Last::SoftInt(0x80));
        assert_eq!(block(0x1000, &[&[0xcb]]).last, Last::Far);
        assert_eq!(block(0x1000, &[&[0xc3]]).last, Last::Near);
        assert!(block(0x1000, &[&[0xc3]]).returns);
        assert!(!block(0x1000, &[&[0x48, 0xcf]]).returns);
        // mov cr3, rax; then a jmp: the next block reads CR3.
        let b = block(0x2000, &[&[0x0f, 0x22, 0xd8], &[0xeb, 0x00]]);
        assert!(b.rereads);
        assert_eq!(&*b.starts, &[0, 3]);
        assert_eq!(b.len, 5);
        assert!(!block(0x2000, &[&[0x0f, 0x20, 0xd8]]).rereads, "a read of CR3");
        // lidt [rax]
        assert!(block(0x2000, &[&[0x0f, 0x01, 0x18]]).rereads);
    }

    /// QE24: the successors of a block that ran elsewhere than reported move with it.
    #[test]
    fn qe24_successors_move_with_the_block() {
        // jne +0x10 at 0x1000 (2 bytes): target 0x1012, fall-through 0x1002.
        let b = block(0x1000, &[&[0x75, 0x10]]);
        assert_eq!(successors(&b, 0x1000), [0x1012, 0x1002]);
        assert_eq!(successors(&b, 0x5000), [0x5012, 0x5002]);
        assert_eq!(successors(&block(0x1000, &[&[0xff, 0xe0]]), 0x1000), [0, 0]);
    }
}
