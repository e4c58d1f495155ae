//! The instructions the .ptt tests use, read from yasm syntax and encoded with iced-x86 the way
//! yasm encodes them (the shortest immediate form, the accumulator form of `add`/`cmp`, `int3` as
//! `CC` but `int 3` as `CD 03`).

use iced_x86::{Code, Encoder, Instruction, MemoryOperand, Register};

/// A branch's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchKind {
    /// `jmp`.
    Jmp,
    /// `call` (always near: yasm has no short call).
    Call,
    /// A conditional jump: its short and near forms for 64-bit and 32-bit code.
    Jcc(Cond),
}

/// The condition of a conditional jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// `jo`.
    O,
    /// `jno`.
    No,
    /// `jb`, `jc`, `jnae`.
    B,
    /// `jae`, `jnb`, `jnc`.
    Ae,
    /// `je`, `jz`.
    E,
    /// `jne`, `jnz`.
    Ne,
    /// `jbe`, `jna`.
    Be,
    /// `ja`, `jnbe`.
    A,
    /// `js`.
    S,
    /// `jns`.
    Ns,
    /// `jp`, `jpe`.
    P,
    /// `jnp`, `jpo`.
    Np,
    /// `jl`, `jnge`.
    L,
    /// `jge`, `jnl`.
    Ge,
    /// `jle`, `jng`.
    Le,
    /// `jg`, `jnle`.
    G,
}

/// Where a branch goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A label of the file.
    Label(String),
    /// An absolute address.
    Abs(u64),
}

/// An arithmetic instruction with an immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AluOp {
    /// `add`.
    Add,
    /// `cmp`.
    Cmp,
}

/// One instruction of the subset.
#[derive(Clone, Debug, PartialEq)]
pub enum Insn {
    /// No operands: `nop`, `hlt`, `ret`, `syscall`, ...
    Plain(&'static str),
    /// `int N`.
    Int(u8),
    /// `jmp` / `call` / `jcc` to a label or an address.
    Branch(BranchKind, Target),
    /// `jmp REG` / `call REG`.
    Indirect {
        /// `call` rather than `jmp`.
        call: bool,
        /// The register.
        reg: Register,
    },
    /// `jmp far [REG]` / `call far [REG]`.
    Far {
        /// `call` rather than `jmp`.
        call: bool,
        /// The base register.
        base: Register,
    },
    /// `mov REG, IMM`.
    MovImm(Register, u64),
    /// `mov REG, [BASE]`.
    MovLoad(Register, Register),
    /// `mov CRn, REG`.
    MovCr(Register, Register),
    /// `add|cmp REG, IMM`.
    Alu(AluOp, Register, u64),
    /// `test [BASE], REG`.
    TestMem(Register, Register),
}

const PLAIN: &[&str] = &[
    "nop", "hlt", "ret", "int3", "syscall", "sysret", "sysenter", "sysexit", "iret", "iretd", "iretq",
    "vmlaunch", "vmresume", "vmcall", "sti", "cli", "leave", "cpuid", "mwait", "monitor", "pause", "ud2",
    "clc", "stc", "cld", "std", "int1", "into",
];

fn cond(mnemonic: &str) -> Option<Cond> {
    Some(match mnemonic {
        "jo" => Cond::O,
        "jno" => Cond::No,
        "jb" | "jc" | "jnae" => Cond::B,
        "jae" | "jnb" | "jnc" => Cond::Ae,
        "je" | "jz" => Cond::E,
        "jne" | "jnz" => Cond::Ne,
        "jbe" | "jna" => Cond::Be,
        "ja" | "jnbe" => Cond::A,
        "js" => Cond::S,
        "jns" => Cond::Ns,
        "jp" | "jpe" => Cond::P,
        "jnp" | "jpo" => Cond::Np,
        "jl" | "jnge" => Cond::L,
        "jge" | "jnl" => Cond::Ge,
        "jle" | "jng" => Cond::Le,
        "jg" | "jnle" => Cond::G,
        _ => return None,
    })
}

/// A general-purpose register's name (64- or 32-bit).
fn gpr(name: &str) -> Option<Register> {
    const R64: [(&str, Register); 16] = [
        ("rax", Register::RAX),
        ("rcx", Register::RCX),
        ("rdx", Register::RDX),
        ("rbx", Register::RBX),
        ("rsp", Register::RSP),
        ("rbp", Register::RBP),
        ("rsi", Register::RSI),
        ("rdi", Register::RDI),
        ("r8", Register::R8),
        ("r9", Register::R9),
        ("r10", Register::R10),
        ("r11", Register::R11),
        ("r12", Register::R12),
        ("r13", Register::R13),
        ("r14", Register::R14),
        ("r15", Register::R15),
    ];
    const R32: [(&str, Register); 8] = [
        ("eax", Register::EAX),
        ("ecx", Register::ECX),
        ("edx", Register::EDX),
        ("ebx", Register::EBX),
        ("esp", Register::ESP),
        ("ebp", Register::EBP),
        ("esi", Register::ESI),
        ("edi", Register::EDI),
    ];
    let name = name.to_ascii_lowercase();
    R64.iter()
        .chain(R32.iter())
        .find(|(n, _)| *n == name)
        .map(|&(_, r)| r)
}

fn control_register(name: &str) -> Option<Register> {
    Some(match name.to_ascii_lowercase().as_str() {
        "cr0" => Register::CR0,
        "cr2" => Register::CR2,
        "cr3" => Register::CR3,
        "cr4" => Register::CR4,
        "cr8" => Register::CR8,
        _ => return None,
    })
}

/// `[REG]`, the one memory form of the subset.
fn memory(op: &str) -> Option<Register> {
    let inner = op.strip_prefix('[')?.strip_suffix(']')?.trim();
    let inner = inner
        .strip_prefix("qword")
        .or(inner.strip_prefix("dword"))
        .unwrap_or(inner);
    gpr(inner.trim())
}

fn number(op: &str) -> Result<u64, String> {
    super::parse::parse_number(op).ok_or_else(|| format!("bad immediate '{op}'"))
}

/// Reads an instruction (`mnemonic operands`), or says why it is outside the subset.
pub fn parse_insn(text: &str) -> Result<Insn, String> {
    let (word, rest) = match text.find(|c: char| c.is_whitespace()) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, ""),
    };
    let mnemonic = word.to_ascii_lowercase();
    let ops: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(',').map(str::trim).collect()
    };
    let unsupported = || format!("instruction outside the supported subset: '{}'", text.trim());
    if let Some(&p) = PLAIN.iter().find(|&&p| p == mnemonic) {
        return if ops.is_empty() {
            Ok(Insn::Plain(p))
        } else {
            Err(unsupported())
        };
    }
    let target = |op: &str| -> Result<Target, String> {
        if op.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
            number(op).map(Target::Abs)
        } else if super::parse::is_identifier(op) && gpr(op).is_none() {
            Ok(Target::Label(op.to_string()))
        } else {
            Err(unsupported())
        }
    };
    match (mnemonic.as_str(), ops.as_slice()) {
        ("int", [n]) => {
            let v = number(n)?;
            u8::try_from(v)
                .map(Insn::Int)
                .map_err(|_| format!("int: vector {n} does not fit a byte"))
        }
        ("jmp" | "call", [op]) => {
            let call = mnemonic == "call";
            let lower = op.to_ascii_lowercase();
            if let Some(far) = lower.strip_prefix("far") {
                return memory(far.trim())
                    .map(|base| Insn::Far { call, base })
                    .ok_or_else(unsupported);
            }
            if let Some(reg) = gpr(op) {
                return Ok(Insn::Indirect { call, reg });
            }
            let kind = if call { BranchKind::Call } else { BranchKind::Jmp };
            Ok(Insn::Branch(kind, target(op)?))
        }
        (m, [op]) if let Some(c) = cond(m) => Ok(Insn::Branch(BranchKind::Jcc(c), target(op)?)),
        ("mov", [dst, src]) => {
            if let Some(cr) = control_register(dst) {
                return gpr(src).map(|r| Insn::MovCr(cr, r)).ok_or_else(unsupported);
            }
            let reg = gpr(dst).ok_or_else(unsupported)?;
            if let Some(base) = memory(src) {
                return Ok(Insn::MovLoad(reg, base));
            }
            Ok(Insn::MovImm(reg, number(src).map_err(|_| unsupported())?))
        }
        ("add" | "cmp", [dst, src]) => {
            let op = if mnemonic == "add" { AluOp::Add } else { AluOp::Cmp };
            let reg = gpr(dst).ok_or_else(unsupported)?;
            Ok(Insn::Alu(op, reg, number(src).map_err(|_| unsupported())?))
        }
        ("test", [dst, src]) => {
            let base = memory(dst).ok_or_else(unsupported)?;
            gpr(src).map(|r| Insn::TestMem(base, r)).ok_or_else(unsupported)
        }
        _ => Err(unsupported()),
    }
}

/// The byte length of a branch's near form (rel32).
pub fn near_len(kind: BranchKind) -> u64 {
    match kind {
        BranchKind::Jmp | BranchKind::Call => 5,
        BranchKind::Jcc(_) => 6,
    }
}

fn jcc_code(c: Cond, short: bool, bits: u32) -> Code {
    use Code::*;
    let table: [[Code; 4]; 16] = [
        [Jo_rel8_64, Jo_rel32_64, Jo_rel8_32, Jo_rel32_32],
        [Jno_rel8_64, Jno_rel32_64, Jno_rel8_32, Jno_rel32_32],
        [Jb_rel8_64, Jb_rel32_64, Jb_rel8_32, Jb_rel32_32],
        [Jae_rel8_64, Jae_rel32_64, Jae_rel8_32, Jae_rel32_32],
        [Je_rel8_64, Je_rel32_64, Je_rel8_32, Je_rel32_32],
        [Jne_rel8_64, Jne_rel32_64, Jne_rel8_32, Jne_rel32_32],
        [Jbe_rel8_64, Jbe_rel32_64, Jbe_rel8_32, Jbe_rel32_32],
        [Ja_rel8_64, Ja_rel32_64, Ja_rel8_32, Ja_rel32_32],
        [Js_rel8_64, Js_rel32_64, Js_rel8_32, Js_rel32_32],
        [Jns_rel8_64, Jns_rel32_64, Jns_rel8_32, Jns_rel32_32],
        [Jp_rel8_64, Jp_rel32_64, Jp_rel8_32, Jp_rel32_32],
        [Jnp_rel8_64, Jnp_rel32_64, Jnp_rel8_32, Jnp_rel32_32],
        [Jl_rel8_64, Jl_rel32_64, Jl_rel8_32, Jl_rel32_32],
        [Jge_rel8_64, Jge_rel32_64, Jge_rel8_32, Jge_rel32_32],
        [Jle_rel8_64, Jle_rel32_64, Jle_rel8_32, Jle_rel32_32],
        [Jg_rel8_64, Jg_rel32_64, Jg_rel8_32, Jg_rel32_32],
    ];
    let col = match (bits, short) {
        (64, true) => 0,
        (64, false) => 1,
        (_, true) => 2,
        (_, false) => 3,
    };
    table[c as usize][col]
}

/// Encodes a branch at `ip` to `target`, short (rel8) or near (rel32).
pub fn encode_branch(
    kind: BranchKind,
    short: bool,
    ip: u64,
    target: u64,
    bits: u32,
) -> Result<Vec<u8>, String> {
    if bits == 16 {
        return Err("branches in 16-bit code are outside the supported subset".into());
    }
    let b64 = bits == 64;
    let code = match (kind, short, b64) {
        (BranchKind::Jmp, true, true) => Code::Jmp_rel8_64,
        (BranchKind::Jmp, true, false) => Code::Jmp_rel8_32,
        (BranchKind::Jmp, false, true) => Code::Jmp_rel32_64,
        (BranchKind::Jmp, false, false) => Code::Jmp_rel32_32,
        (BranchKind::Call, _, true) => Code::Call_rel32_64,
        (BranchKind::Call, _, false) => Code::Call_rel32_32,
        (BranchKind::Jcc(c), s, _) => jcc_code(c, s, bits),
    };
    let target = if b64 { target } else { target & 0xffff_ffff };
    let ins = Instruction::with_branch(code, target).map_err(|e| e.to_string())?;
    encode(&ins, ip, bits)
}

fn encode(ins: &Instruction, ip: u64, bits: u32) -> Result<Vec<u8>, String> {
    let mut e = Encoder::new(bits);
    e.encode(ins, ip).map_err(|err| err.to_string())?;
    Ok(e.take_buffer())
}

fn fits_i8(v: u64) -> bool {
    (v as i64) >= -128 && (v as i64) <= 127
}

fn fits_i32(v: u64) -> bool {
    (v as i64) >= i64::from(i32::MIN) && (v as i64) <= i64::from(i32::MAX)
}

/// A 32-bit register's immediate: an unsigned 32-bit value, or a negative one sign-extended
/// from 32 bits; anything wider is refused, never cut.
fn imm32(imm: u64, what: &str) -> Result<u32, String> {
    u32::try_from(imm)
        .ok()
        .or_else(|| fits_i32(imm).then_some(imm as u32))
        .ok_or_else(|| format!("{what}: immediate {imm:#x} does not fit 32 bits"))
}

/// Encodes an instruction other than a branch to a label or address (those depend on where they
/// sit: [`encode_branch`]).
pub fn encode_fixed(insn: &Insn, bits: u32) -> Result<Vec<u8>, String> {
    let b64 = bits == 64;
    let wide = |r: Register| r.is_gpr64();
    let check_reg = |r: Register| -> Result<(), String> {
        if r.is_gpr64() && !b64 {
            Err(format!("register {r:?} needs bits 64"))
        } else {
            Ok(())
        }
    };
    let err = |e: iced_x86::IcedError| e.to_string();
    let ins = match *insn {
        Insn::Plain(m) => {
            let code = match (m, bits) {
                ("nop", 16) => Code::Nopw,
                ("nop", _) => Code::Nopd,
                ("hlt", _) => Code::Hlt,
                ("ret", 64) => Code::Retnq,
                ("ret", 32) => Code::Retnd,
                ("ret", _) => Code::Retnw,
                ("int3", _) => Code::Int3,
                ("int1", _) => Code::Int1,
                ("into", 64) => return Err("into is invalid in 64-bit code".into()),
                ("into", _) => Code::Into,
                ("syscall", _) => Code::Syscall,
                ("sysret", _) => Code::Sysretd,
                ("sysenter", _) => Code::Sysenter,
                ("sysexit", _) => Code::Sysexitd,
                ("iret", 16) => Code::Iretw,
                ("iret" | "iretd", _) => Code::Iretd,
                ("iretq", 64) => Code::Iretq,
                ("iretq", _) => return Err("iretq needs bits 64".into()),
                ("vmlaunch", _) => Code::Vmlaunch,
                ("vmresume", _) => Code::Vmresume,
                ("vmcall", _) => Code::Vmcall,
                ("sti", _) => Code::Sti,
                ("cli", _) => Code::Cli,
                ("leave", 64) => Code::Leaveq,
                ("leave", 32) => Code::Leaved,
                ("leave", _) => Code::Leavew,
                ("cpuid", _) => Code::Cpuid,
                ("mwait", _) => Code::Mwait,
                ("monitor", 64) => Code::Monitorq,
                ("monitor", 32) => Code::Monitord,
                ("monitor", _) => Code::Monitorw,
                ("pause", _) => Code::Pause,
                ("ud2", _) => Code::Ud2,
                ("clc", _) => Code::Clc,
                ("stc", _) => Code::Stc,
                ("cld", _) => Code::Cld,
                ("std", _) => Code::Std,
                _ => return Err(format!("'{m}' is outside the supported subset")),
            };
            Instruction::with(code)
        }
        Insn::Int(n) => Instruction::with1(Code::Int_imm8, n as u32).map_err(err)?,
        Insn::Branch(..) => return Err("internal: a branch is not a fixed instruction".into()),
        Insn::Indirect { call, reg } => {
            check_reg(reg)?;
            let code = match (call, wide(reg)) {
                (false, true) => Code::Jmp_rm64,
                (true, true) => Code::Call_rm64,
                (false, false) if !b64 => Code::Jmp_rm32,
                (true, false) if !b64 => Code::Call_rm32,
                _ => {
                    return Err(format!(
                        "{reg:?}: an indirect branch in 64-bit code takes a 64-bit register"
                    ))
                }
            };
            Instruction::with1(code, reg).map_err(err)?
        }
        Insn::Far { call, base } => {
            check_reg(base)?;
            let code = if call { Code::Call_m1632 } else { Code::Jmp_m1632 };
            Instruction::with1(code, MemoryOperand::with_base(base)).map_err(err)?
        }
        Insn::MovImm(reg, imm) => {
            check_reg(reg)?;
            if wide(reg) {
                if fits_i32(imm) {
                    Instruction::with2(Code::Mov_rm64_imm32, reg, imm as i64).map_err(err)?
                } else {
                    Instruction::with2(Code::Mov_r64_imm64, reg, imm).map_err(err)?
                }
            } else {
                Instruction::with2(Code::Mov_r32_imm32, reg, imm32(imm, "mov")?).map_err(err)?
            }
        }
        Insn::MovLoad(reg, base) => {
            check_reg(reg)?;
            check_reg(base)?;
            let code = if wide(reg) {
                Code::Mov_r64_rm64
            } else {
                Code::Mov_r32_rm32
            };
            Instruction::with2(code, reg, MemoryOperand::with_base(base)).map_err(err)?
        }
        Insn::MovCr(cr, reg) => {
            check_reg(reg)?;
            let code = if b64 { Code::Mov_cr_r64 } else { Code::Mov_cr_r32 };
            if b64 != wide(reg) {
                return Err(format!("mov {cr:?}: the register must be {bits}-bit"));
            }
            Instruction::with2(code, cr, reg).map_err(err)?
        }
        Insn::Alu(op, reg, imm) => {
            check_reg(reg)?;
            let acc = reg == Register::RAX || reg == Register::EAX;
            let code = match (op, wide(reg), fits_i8(imm), acc) {
                (AluOp::Add, true, true, _) => Code::Add_rm64_imm8,
                (AluOp::Add, true, false, true) => Code::Add_RAX_imm32,
                (AluOp::Add, true, false, false) => Code::Add_rm64_imm32,
                (AluOp::Add, false, true, _) => Code::Add_rm32_imm8,
                (AluOp::Add, false, false, true) => Code::Add_EAX_imm32,
                (AluOp::Add, false, false, false) => Code::Add_rm32_imm32,
                (AluOp::Cmp, true, true, _) => Code::Cmp_rm64_imm8,
                (AluOp::Cmp, true, false, true) => Code::Cmp_RAX_imm32,
                (AluOp::Cmp, true, false, false) => Code::Cmp_rm64_imm32,
                (AluOp::Cmp, false, true, _) => Code::Cmp_rm32_imm8,
                (AluOp::Cmp, false, false, true) => Code::Cmp_EAX_imm32,
                (AluOp::Cmp, false, false, false) => Code::Cmp_rm32_imm32,
            };
            if wide(reg) && !fits_i32(imm) {
                return Err(format!(
                    "immediate {imm:#x} does not fit a sign-extended 32-bit field"
                ));
            }
            if fits_i8(imm) || wide(reg) {
                Instruction::with2(code, reg, imm as i64 as i32).map_err(err)?
            } else {
                Instruction::with2(code, reg, imm32(imm, "add/cmp")?).map_err(err)?
            }
        }
        Insn::TestMem(base, reg) => {
            check_reg(base)?;
            check_reg(reg)?;
            let code = if wide(reg) {
                Code::Test_rm64_r64
            } else {
                Code::Test_rm32_r32
            };
            Instruction::with2(code, MemoryOperand::with_base(base), reg).map_err(err)?
        }
    };
    encode(&ins, 0, bits)
}

/// yasm's NOP padding for `ALIGN` in `bits`-bit code: runs of its 15-byte NOP, then one NOP for
/// the rest.
pub fn nop_fill(len: u64, bits: u32) -> Vec<u8> {
    const NOP64: [&[u8]; 16] = [
        &[],
        &[0x90],
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
        &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[
            0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
        &[
            0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00,
        ],
    ];
    const NOP32: [&[u8]; 9] = [
        &[],
        &[0x90],
        &[0x66, 0x90],
        &[0x8d, 0x76, 0x00],
        &[0x8d, 0x74, 0x26, 0x00],
        &[0x90, 0x8d, 0x74, 0x26, 0x00],
        &[0x8d, 0xb6, 0x00, 0x00, 0x00, 0x00],
        &[0x8d, 0xb4, 0x26, 0x00, 0x00, 0x00, 0x00],
        &[0x90, 0x8d, 0xb4, 0x26, 0x00, 0x00, 0x00, 0x00],
    ];
    const NOP16: [&[u8]; 9] = [
        &[],
        &[0x90],
        &[0x89, 0xf6],
        &[0x8d, 0x74, 0x00],
        &[0x8d, 0xb4, 0x00, 0x00],
        &[0x90, 0x8d, 0xb4, 0x00, 0x00],
        &[0x89, 0xf6, 0x8d, 0xbd, 0x00, 0x00],
        &[0x8d, 0x74, 0x00, 0x8d, 0xbd, 0x00, 0x00],
        &[0x8d, 0xb4, 0x00, 0x00, 0x8d, 0xbd, 0x00, 0x00],
    ];
    let one = |n: usize| -> Vec<u8> {
        match bits {
            64 => NOP64[n].to_vec(),
            _ if n <= 8 => (if bits == 32 { NOP32[n] } else { NOP16[n] }).to_vec(),
            // 9..15 bytes: a short jump over NOPs.
            _ => {
                let mut v = vec![0xeb, (n - 2) as u8];
                v.resize(n, 0x90);
                v
            }
        }
    };
    let mut out = Vec::with_capacity(len as usize);
    let mut left = len as usize;
    while left > 15 {
        out.extend(one(15));
        left -= 15;
    }
    out.extend(one(left));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> Vec<u8> {
        encode_fixed(&parse_insn(text).unwrap(), 64).unwrap()
    }

    #[test]
    fn encodings_match_yasm() {
        assert_eq!(bytes("nop"), [0x90]);
        assert_eq!(bytes("int 3"), [0xcd, 0x03]);
        assert_eq!(bytes("int3"), [0xcc]);
        assert_eq!(bytes("iret"), [0xcf]);
        assert_eq!(bytes("sysret"), [0x0f, 0x07]);
        assert_eq!(bytes("jmp far [rax]"), [0xff, 0x28]);
        assert_eq!(bytes("call far [rax]"), [0xff, 0x18]);
        assert_eq!(bytes("jmp rax"), [0xff, 0xe0]);
        assert_eq!(bytes("call rbx"), [0xff, 0xd3]);
        assert_eq!(bytes("mov rax, 0x0"), [0x48, 0xc7, 0xc0, 0, 0, 0, 0]);
        assert_eq!(
            bytes("mov rax, 0xffffffff"),
            [0x48, 0xb8, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(bytes("mov rax, [rbx]"), [0x48, 0x8b, 0x03]);
        assert_eq!(bytes("mov cr3, rax"), [0x0f, 0x22, 0xd8]);
        assert_eq!(bytes("add rax, 0x1"), [0x48, 0x83, 0xc0, 0x01]);
        assert_eq!(bytes("cmp rax, 0x100"), [0x48, 0x3d, 0x00, 0x01, 0, 0]);
        assert_eq!(bytes("test [rax], rbx"), [0x48, 0x85, 0x18]);
        assert_eq!(bytes("mwait"), [0x0f, 0x01, 0xc9]);
        assert_eq!(bytes("vmresume"), [0x0f, 0x01, 0xc3]);
    }

    #[test]
    fn branches() {
        let k = BranchKind::Jcc(Cond::E);
        assert_eq!(encode_branch(k, true, 0x1032, 0x1000, 64).unwrap(), [0x74, 0xcc]);
        assert_eq!(
            encode_branch(BranchKind::Call, false, 0x1003, 0xa000, 64).unwrap(),
            [0xe8, 0xf8, 0x8f, 0, 0]
        );
        assert!(encode_branch(BranchKind::Jmp, true, 0, 0x1000, 64).is_err());
    }

    #[test]
    fn outside_the_subset() {
        assert!(parse_insn("movsb").is_err());
        assert!(parse_insn("mov rax, rbx").is_err());
        assert!(parse_insn("nop rax").is_err());
        assert!(parse_insn("int 256").is_err());
    }

    #[test]
    fn nop_fill_lengths() {
        for bits in [16, 32, 64] {
            for n in 0..40 {
                assert_eq!(nop_fill(n, bits).len() as u64, n);
            }
        }
    }
}
