//! Synthetic Penn traces with realistic structure: a static program of functions (loops, if/else,
//! direct and indirect calls, switch-style indirect jumps, a recursive function that sometimes
//! nests deeper than the 64-entry return stack), executed by a seeded interpreter. Every PC keeps
//! one shape, so the trace is a consistent execution of one program (a code image can be made
//! from it), and the control flow is exact: each instruction continues at its target or
//! fallthrough.

use super::{BranchOutcome, FlagsUse, MemAccess, Mnemonic, Uop, UopWriter};
use crate::sources::rng::GenRng;
use std::io::{self, Write};

/// Where the first function starts; functions sit `FUNC_STRIDE` bytes apart.
const CODE_BASE: u64 = 0x40_0000;
const FUNC_STRIDE: u64 = 0x400;
const FUNCS: usize = 24;
/// Data pages: `DATA_PAGES` pages from `DATA_BASE`.
const DATA_BASE: u64 = 0x60_0000;
const DATA_PAGES: u64 = 1024;
const STACK_TOP: u64 = 0x7fff_e7ff_f000;

#[derive(Clone, Debug)]
enum Shape {
    /// A non-branch; `mem` 0 none, 1 load, 2 store, 3 load-op, 4 read-modify-write.
    Plain { mem: u8 },
    /// CMP: writes the flags.
    Cmp,
    /// Jcc to an instruction index in the same function.
    Cond { to: usize },
    /// JMP to an instruction index in the same function.
    Jmp { to: usize },
    /// CALL a function.
    Call { callee: usize },
    /// CALL r15, to one of the callees.
    IndCall { callees: Vec<usize> },
    /// JMP [table], to one of the instruction indices.
    IndJmp { targets: Vec<usize> },
    /// RET.
    Ret,
}

#[derive(Clone, Debug)]
struct Insn {
    shape: Shape,
    pc: u64,
    len: u8,
}

/// The static program.
struct Program {
    funcs: Vec<Vec<Insn>>,
}

/// The index of the recursive function; its guard branch is at index 1, its self-call at 2.
const RECURSIVE: usize = FUNCS - 1;

impl Program {
    fn new(rng: &mut GenRng) -> Program {
        let mut funcs: Vec<Vec<Insn>> = (0..FUNCS).map(|f| Self::body(rng, f)).collect();
        for (f, body) in funcs.iter_mut().enumerate() {
            Self::layout(body, CODE_BASE + f as u64 * FUNC_STRIDE);
        }
        Program { funcs }
    }

    fn insn(shape: Shape) -> Insn {
        Insn { shape, pc: 0, len: 0 }
    }

    fn body(rng: &mut GenRng, f: usize) -> Vec<Insn> {
        if f == RECURSIVE {
            // plain; cmp; jcc -> the epilogue; call self; plain; ret
            let plain = |mem, len| Insn {
                shape: Shape::Plain { mem },
                pc: 0,
                len,
            };
            return vec![
                plain(2, 5),
                Self::insn(Shape::Cmp),
                Self::insn(Shape::Cond { to: 4 }),
                Self::insn(Shape::Call { callee: RECURSIVE }),
                plain(1, 4),
                Self::insn(Shape::Ret),
            ];
        }
        let later = |rng: &mut GenRng| f + 1 + rng.below((FUNCS - f - 1).max(1) as u64) as usize;
        if f == 0 {
            return Self::main_body(rng);
        }
        let n = 6 + rng.below(24) as usize;
        let mut body = Vec::with_capacity(n + 2);
        while body.len() < n {
            let i = body.len();
            let roll = rng.below(100);
            let shape = if roll < 60 || f + 1 >= FUNCS {
                Shape::Plain {
                    mem: if rng.chance(45) { 1 + rng.below(4) as u8 } else { 0 },
                }
            } else if roll < 84 {
                body.push(Self::insn(Shape::Cmp));
                // A loop back-edge or a forward skip (patched below when it points past the end).
                let to = if i > 0 && rng.chance(40) {
                    rng.below(i as u64) as usize
                } else {
                    usize::MAX
                };
                Shape::Cond { to }
            } else if roll < 87 {
                Shape::Call { callee: later(rng) }
            } else if roll < 88 {
                let k = 2 + rng.below(2) as usize;
                Shape::IndCall {
                    callees: (0..k).map(|_| later(rng)).collect(),
                }
            } else if roll < 91 {
                Shape::IndJmp { targets: vec![] }
            } else if roll < 99 {
                Shape::Jmp { to: usize::MAX }
            } else {
                Shape::Call { callee: RECURSIVE }
            };
            body.push(Self::insn(shape));
        }
        body.push(Self::insn(Shape::Ret));
        let last = body.len() - 1;
        for (i, insn) in body.iter_mut().enumerate() {
            let fwd = |rng: &mut GenRng| i + 1 + rng.below((last - i).max(1) as u64) as usize;
            match &mut insn.shape {
                Shape::Cond { to } | Shape::Jmp { to } if *to == usize::MAX => *to = fwd(rng).min(last),
                Shape::IndJmp { targets } => {
                    let k = 2 + rng.below(3) as usize;
                    *targets = (0..k).map(|_| fwd(rng).min(last)).collect();
                }
                _ => {}
            }
            if let Shape::Plain { mem } = insn.shape {
                insn.len = match mem {
                    0 => 2 + rng.below(3) as u8,
                    _ => 3 + rng.below(6) as u8,
                };
            }
        }
        body
    }

    /// main: a loop over calls (direct, indirect, recursive) with some work and branches between.
    fn main_body(rng: &mut GenRng) -> Vec<Insn> {
        let mut body = Vec::new();
        for k in 0..12 {
            body.push(Insn {
                shape: Shape::Plain { mem: 1 },
                pc: 0,
                len: 6,
            });
            body.push(Self::insn(Shape::Cmp));
            let skip_to = body.len() + 2;
            body.push(Self::insn(Shape::Cond { to: skip_to }));
            let callee = 1 + rng.below(FUNCS as u64 - 2) as usize;
            body.push(Self::insn(match k % 4 {
                0 => Shape::IndCall {
                    callees: vec![callee, 1 + rng.below(FUNCS as u64 - 2) as usize],
                },
                1 => Shape::Call { callee: RECURSIVE },
                _ => Shape::Call { callee },
            }));
        }
        body.push(Self::insn(Shape::Jmp { to: 0 }));
        body
    }

    /// Assigns PCs, choosing rel8 or rel32 branch forms until the layout is stable.
    fn layout(body: &mut [Insn], base: u64) {
        let mut long = vec![false; body.len()];
        loop {
            let mut pc = base;
            for (i, insn) in body.iter_mut().enumerate() {
                insn.pc = pc;
                insn.len = match insn.shape {
                    Shape::Plain { .. } => insn.len,
                    Shape::Cmp => 3,
                    Shape::Cond { .. } => [2, 6][usize::from(long[i])],
                    Shape::Jmp { .. } => [2, 5][usize::from(long[i])],
                    Shape::Call { .. } => 5,
                    Shape::IndCall { .. } => 3,
                    Shape::IndJmp { .. } => 7,
                    Shape::Ret => 1,
                };
                pc += u64::from(insn.len);
            }
            let mut changed = false;
            for i in 0..body.len() {
                if let Shape::Cond { to } | Shape::Jmp { to } = body[i].shape {
                    let disp = body[to].pc as i64 - (body[i].pc + u64::from(body[i].len)) as i64;
                    if !long[i] && i8::try_from(disp).is_err() {
                        long[i] = true;
                        changed = true;
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }
}

fn name(s: &str) -> Mnemonic {
    Mnemonic::new(s.as_bytes()).expect("generator names are short printable ASCII")
}

/// Emits micro-ops for executed instructions.
struct Emitter<'a, W: Write> {
    out: &'a mut UopWriter<W>,
    left: u64,
    rng: GenRng,
    /// Recently used data pages (locality).
    recent: [u64; 8],
}

struct UopSpec<'a> {
    macro_name: &'a str,
    micro_name: &'a str,
    src1: i32,
    src2: i32,
    dest: i32,
    flags: FlagsUse,
    branch: BranchOutcome,
    mem: MemAccess,
    immediate: i64,
    mem_addr: u64,
    target: u64,
}

impl<'a> UopSpec<'a> {
    fn op(macro_name: &'a str, micro_name: &'a str) -> Self {
        UopSpec {
            macro_name,
            micro_name,
            src1: -1,
            src2: -1,
            dest: -1,
            flags: FlagsUse::None,
            branch: BranchOutcome::None,
            mem: MemAccess::None,
            immediate: 0,
            mem_addr: 0,
            target: 0,
        }
    }
}

impl<W: Write> Emitter<'_, W> {
    fn data_addr(&mut self) -> u64 {
        let page = if self.rng.chance(85) {
            self.recent[self.rng.below(8) as usize]
        } else {
            let p = DATA_BASE + self.rng.below(DATA_PAGES) * 4096;
            self.recent[self.rng.below(8) as usize] = p;
            p
        };
        page + self.rng.below(512) * 8
    }

    /// Writes one macro-op's micro-ops, all of them (a trace ends on an instruction boundary);
    /// false once the record budget is spent.
    fn emit(&mut self, insn: &Insn, uops: &[UopSpec<'_>]) -> io::Result<bool> {
        let fallthrough = insn.pc + u64::from(insn.len);
        for (i, s) in uops.iter().enumerate() {
            self.left = self.left.saturating_sub(1);
            self.out.write_uop(&Uop {
                index: i as u32 + 1,
                pc: insn.pc,
                src1: s.src1,
                src2: s.src2,
                dest: s.dest,
                flags: s.flags,
                branch: s.branch,
                mem: s.mem,
                immediate: s.immediate,
                mem_addr: s.mem_addr,
                fallthrough,
                target: s.target,
                macro_name: name(s.macro_name),
                micro_name: name(s.micro_name),
            })?;
        }
        Ok(self.left > 0)
    }
}

/// One activation record of the interpreter.
struct Frame {
    func: usize,
    at: usize,
    /// Remaining self-calls of the recursive function.
    depth_left: u32,
}

/// Writes a synthetic trace of `records` micro-op lines for `seed`, rounded up to the end of the
/// instruction in progress (at most 3 more lines), so the last instruction is whole. The same
/// seed gives the same bytes.
pub fn generate(records: u64, seed: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut rng = GenRng::new(seed);
    let program = Program::new(&mut rng);
    let mut writer = UopWriter::new(out);
    let recent = std::array::from_fn(|i| DATA_BASE + i as u64 * 4096);
    let mut em = Emitter {
        out: &mut writer,
        left: records,
        rng,
        recent,
    };
    let mut stack = vec![Frame {
        func: 0,
        at: 0,
        depth_left: 0,
    }];
    while em.left > 0 && step(&program, &mut stack, &mut em)? {}
    writer.finish()?;
    Ok(())
}

/// Executes the instruction at the top frame: writes its micro-ops and moves the frame (or the
/// stack, for calls and returns) on. False once the record budget is spent.
fn step<W: Write>(program: &Program, stack: &mut Vec<Frame>, em: &mut Emitter<'_, W>) -> io::Result<bool> {
    let rsp = STACK_TOP - stack.len() as u64 * 64;
    let frame = stack.last_mut().expect("main never returns");
    let body = &program.funcs[frame.func];
    let insn = &body[frame.at];
    let ft = insn.pc + u64::from(insn.len);
    match &insn.shape {
        Shape::Plain { mem } => {
            let r = em.rng.below(16) as i32;
            let addr = em.data_addr();
            if !em.emit(insn, &plain_uops(*mem, r, addr, rsp))? {
                return Ok(false);
            }
            frame.at += 1;
        }
        Shape::Cmp => {
            let r = em.rng.below(16) as i32;
            if !em.emit(insn, &[cmp_uop(r)])? {
                return Ok(false);
            }
            frame.at += 1;
        }
        Shape::Cond { to } => {
            let taken = if frame.func == RECURSIVE {
                frame.depth_left == 0
            } else if *to < frame.at {
                em.rng.chance(75)
            } else {
                em.rng.chance(50)
            };
            if !em.emit(insn, &[cond_uop(taken, body[*to].pc, ft)])? {
                return Ok(false);
            }
            frame.at = if taken { *to } else { frame.at + 1 };
        }
        Shape::Jmp { to } => {
            if !em.emit(insn, &[jmp_uop(body[*to].pc, ft)])? {
                return Ok(false);
            }
            frame.at = *to;
        }
        Shape::Call { .. } | Shape::IndCall { .. } => {
            let (callee, indirect) = match &insn.shape {
                Shape::Call { callee } => (*callee, false),
                Shape::IndCall { callees } => (callees[em.rng.below(callees.len() as u64) as usize], true),
                _ => unreachable!("matched above"),
            };
            let target = program.funcs[callee][0].pc;
            if !em.emit(insn, &call_uops(indirect, target, ft, rsp))? {
                return Ok(false);
            }
            let depth_left = recursion_depth(&mut em.rng, callee, frame);
            frame.at += 1;
            stack.push(Frame {
                func: callee,
                at: 0,
                depth_left,
            });
        }
        Shape::IndJmp { targets } => {
            let to = targets[em.rng.below(targets.len() as u64) as usize];
            let slot = body[0].pc + 0x300 + (to as u64) * 8;
            if !em.emit(insn, &ind_jmp_uops(slot, body[to].pc))? {
                return Ok(false);
            }
            frame.at = to;
        }
        Shape::Ret => {
            let caller = &stack[stack.len() - 2];
            let target = program.funcs[caller.func][caller.at].pc;
            if !em.emit(insn, &ret_uops(rsp, target))? {
                return Ok(false);
            }
            stack.pop();
        }
    }
    Ok(true)
}

/// Self-calls left for a call into `callee` from `frame`: none outside the recursive function;
/// one fewer inside it; from elsewhere, mostly shallow (0..8) and now and then past the return
/// stack's depth (65..105), so RET compression meets its limit.
fn recursion_depth(rng: &mut GenRng, callee: usize, frame: &Frame) -> u32 {
    if callee != RECURSIVE {
        0
    } else if frame.func == RECURSIVE {
        frame.depth_left - 1
    } else if rng.chance(5) {
        65 + rng.below(40) as u32
    } else {
        rng.below(8) as u32
    }
}

/// A non-branch: a register ADD (`mem` 0), a load (1), a push-like store (2), a load-op (3) or a
/// read-modify-write INC (4 and up) of register `r`, data at `addr`, stack at `rsp`.
fn plain_uops(mem: u8, r: i32, addr: u64, rsp: u64) -> Vec<UopSpec<'static>> {
    match mem {
        0 => vec![UopSpec {
            src1: r,
            dest: r,
            flags: FlagsUse::Write,
            ..UopSpec::op("ADD", "ADD")
        }],
        1 => vec![UopSpec {
            src2: 5,
            dest: r,
            mem: MemAccess::Load,
            immediate: -24,
            mem_addr: addr,
            ..UopSpec::op("MOV", "LOAD")
        }],
        2 => vec![UopSpec {
            src1: r,
            src2: 4,
            mem: MemAccess::Store,
            mem_addr: rsp - 8,
            ..UopSpec::op("MOV", "STORE")
        }],
        3 => vec![
            UopSpec {
                src2: 5,
                dest: 45,
                mem: MemAccess::Load,
                mem_addr: addr,
                ..UopSpec::op("ADD", "LOAD")
            },
            UopSpec {
                src1: 45,
                src2: r,
                dest: r,
                flags: FlagsUse::Write,
                ..UopSpec::op("ADD", "ADD")
            },
        ],
        _ => vec![
            UopSpec {
                src2: 3,
                dest: 44,
                mem: MemAccess::Load,
                mem_addr: addr,
                ..UopSpec::op("INC", "LOAD")
            },
            UopSpec {
                src1: 44,
                dest: 44,
                flags: FlagsUse::Write,
                immediate: 1,
                ..UopSpec::op("INC", "ADD_IMM")
            },
            UopSpec {
                src1: 44,
                src2: 3,
                mem: MemAccess::Store,
                mem_addr: addr,
                ..UopSpec::op("INC", "STORE")
            },
        ],
    }
}

/// CMP of register `r` with an immediate: writes the flags.
fn cmp_uop(r: i32) -> UopSpec<'static> {
    UopSpec {
        src1: r,
        dest: 44,
        flags: FlagsUse::Write,
        immediate: 7,
        ..UopSpec::op("CMP", "SUB_IMM")
    }
}

/// Jcc to `target` (the instruction ends at `ft`).
fn cond_uop(taken: bool, target: u64, ft: u64) -> UopSpec<'static> {
    UopSpec {
        flags: FlagsUse::Read,
        branch: if taken {
            BranchOutcome::Taken
        } else {
            BranchOutcome::NotTaken
        },
        immediate: target as i64 - ft as i64,
        target,
        ..UopSpec::op("J", "JMP_IMM")
    }
}

/// A direct JMP to `target`.
fn jmp_uop(target: u64, ft: u64) -> UopSpec<'static> {
    UopSpec {
        branch: BranchOutcome::Taken,
        immediate: target as i64 - ft as i64,
        target,
        ..UopSpec::op("JMP", "JMP_IMM")
    }
}

/// CALL (direct, or through a register): save the PC, push it, jump.
fn call_uops(indirect: bool, target: u64, ft: u64, rsp: u64) -> [UopSpec<'static>; 4] {
    let jump = if indirect {
        UopSpec {
            src1: 15,
            branch: BranchOutcome::Taken,
            target,
            ..UopSpec::op("CALL", "JMP_REG")
        }
    } else {
        UopSpec {
            branch: BranchOutcome::Taken,
            immediate: target as i64 - ft as i64,
            target,
            ..UopSpec::op("CALL", "JMP_IMM")
        }
    };
    [
        UopSpec {
            dest: 44,
            ..UopSpec::op("CALL", "SAVE_PC")
        },
        UopSpec {
            src1: 4,
            dest: 4,
            immediate: 8,
            ..UopSpec::op("CALL", "SUB_IMM")
        },
        UopSpec {
            src1: 44,
            src2: 4,
            mem: MemAccess::Store,
            mem_addr: rsp - 8,
            ..UopSpec::op("CALL", "STORE")
        },
        jump,
    ]
}

/// An indirect JMP through the jump-table entry at `slot`.
fn ind_jmp_uops(slot: u64, target: u64) -> [UopSpec<'static>; 2] {
    [
        UopSpec {
            src2: 0,
            dest: 44,
            mem: MemAccess::Load,
            mem_addr: slot,
            ..UopSpec::op("JMP", "LOAD")
        },
        UopSpec {
            src1: 44,
            branch: BranchOutcome::Taken,
            target,
            ..UopSpec::op("JMP", "JMP_REG")
        },
    ]
}

/// RET: pop the return address, adjust RSP, jump.
fn ret_uops(rsp: u64, target: u64) -> [UopSpec<'static>; 3] {
    [
        UopSpec {
            src2: 4,
            dest: 44,
            mem: MemAccess::Load,
            mem_addr: rsp - 8 + 64,
            ..UopSpec::op("RET", "LOAD")
        },
        UopSpec {
            src1: 4,
            dest: 4,
            immediate: 8,
            ..UopSpec::op("RET", "ADD_IMM")
        },
        UopSpec {
            src1: 44,
            branch: BranchOutcome::Taken,
            target,
            ..UopSpec::op("RET", "JMP_REG")
        },
    ]
}
