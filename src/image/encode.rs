//! Real x86-64 encodings of an exact length for each instruction shape (`spec/image.md`).
//!
//! Each helper encodes a base form with iced-x86, pads it to the requested length with
//! harmless legacy prefixes placed in front, and decodes the result back with iced-x86 to check
//! the length, the flow-control kind and (for direct branches) the target before returning it.

use iced_x86::{
    Code, Decoder, DecoderOptions, Encoder, FlowControl, Instruction, MemoryOperand, Mnemonic, Register,
};
use std::fmt;
use std::ops::RangeInclusive;

/// The longest x86 instruction.
pub const MAX_LEN: u8 = 15;

/// Padding prefix for NOPs: the operand-size override (`66`), as in the SDM's recommended
/// multi-byte NOPs.
pub const NOP_PAD: u8 = 0x66;

/// Padding prefix for branches and PTWRITE: the CS segment override (`2E`), ignored in 64-bit
/// mode (on a Jcc it is the old "not taken" hint; on `FF /2`, `FF /4` it is not NOTRACK, which is
/// `3E`; PTWRITE must not carry `66`).
pub const BRANCH_PAD: u8 = 0x2E;

/// The shape of one executed instruction: what the image must encode at its PC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A non-branch: a NOP.
    Nop {
        /// Length.
        len: u8,
    },
    /// A non-branch traced as PTWRITE: `PTWRITE r/m64`.
    Ptwrite {
        /// Length.
        len: u8,
    },
    /// A conditional branch: `JNE`.
    Cond {
        /// Length.
        len: u8,
        /// Taken target.
        target: u64,
    },
    /// A direct JMP.
    Jump {
        /// Length.
        len: u8,
        /// Target.
        target: u64,
    },
    /// A direct CALL.
    Call {
        /// Length.
        len: u8,
        /// Target.
        target: u64,
    },
    /// An indirect JMP (`FF /4`).
    IndirectJump {
        /// Length.
        len: u8,
    },
    /// An indirect CALL (`FF /2`).
    IndirectCall {
        /// Length.
        len: u8,
    },
    /// A near RET.
    Return {
        /// Length.
        len: u8,
    },
}

impl Shape {
    /// The instruction's length in bytes.
    pub fn size(&self) -> u8 {
        match *self {
            Shape::Nop { len }
            | Shape::Ptwrite { len }
            | Shape::Cond { len, .. }
            | Shape::Jump { len, .. }
            | Shape::Call { len, .. }
            | Shape::IndirectJump { len }
            | Shape::IndirectCall { len }
            | Shape::Return { len } => len,
        }
    }

    /// The lengths this shape can be encoded in (a direct branch also needs its target in reach).
    pub fn lengths(&self) -> RangeInclusive<u8> {
        match self {
            Shape::Nop { .. } | Shape::Return { .. } => 1..=MAX_LEN,
            Shape::Ptwrite { .. } | Shape::Call { .. } => 5..=MAX_LEN,
            Shape::Cond { .. }
            | Shape::Jump { .. }
            | Shape::IndirectJump { .. }
            | Shape::IndirectCall { .. } => 2..=MAX_LEN,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Shape::Nop { .. } => "NOP",
            Shape::Ptwrite { .. } => "PTWRITE",
            Shape::Cond { .. } => "Jcc",
            Shape::Jump { .. } => "JMP",
            Shape::Call { .. } => "CALL",
            Shape::IndirectJump { .. } => "indirect JMP",
            Shape::IndirectCall { .. } => "indirect CALL",
            Shape::Return { .. } => "RET",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} bytes", self.name(), self.size())?;
        match self {
            Shape::Cond { target, .. } | Shape::Jump { target, .. } | Shape::Call { target, .. } => {
                write!(f, " to {target:#x}")
            }
            _ => Ok(()),
        }
    }
}

/// Why a shape cannot be encoded (named apart from [`crate::packet::EncodeError`], which is about
/// packets).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// No encoding of this kind has this length.
    #[error("no {shape} encoding: lengths {}..={} only", shape.lengths().start(), shape.lengths().end())]
    Length {
        /// The shape.
        shape: Shape,
    },
    /// The target is out of reach of the displacement that fits the length.
    #[error("{shape} at {pc:#x}: the target is out of reach of a {disp_bytes}-byte displacement")]
    Reach {
        /// The shape.
        shape: Shape,
        /// The branch's PC.
        pc: u64,
        /// Displacement bytes available.
        disp_bytes: u8,
    },
    /// iced-x86 refused the instruction, or its decode did not match (an internal error).
    #[error("encoder: {0}")]
    Encoder(String),
}

/// Encodes `shape` at `pc`: exactly `shape.size()` bytes, checked by decoding them back.
pub fn encode(shape: Shape, pc: u64) -> Result<Vec<u8>, ShapeError> {
    let len = shape.size();
    if !shape.lengths().contains(&len) {
        return Err(ShapeError::Length { shape });
    }
    let bytes = match shape {
        Shape::Nop { len } => nop_bytes(len)?,
        Shape::Ptwrite { len } => ptwrite_bytes(len)?,
        Shape::Cond { len, target } => {
            let (code, base) = if len < 6 {
                (Code::Jne_rel8_64, 2)
            } else {
                (Code::Jne_rel32_64, 6)
            };
            direct(shape, pc, target, code, base)?
        }
        Shape::Jump { len, target } => {
            let (code, base) = if len < 5 {
                (Code::Jmp_rel8_64, 2)
            } else {
                (Code::Jmp_rel32_64, 5)
            };
            direct(shape, pc, target, code, base)?
        }
        Shape::Call { target, .. } => direct(shape, pc, target, Code::Call_rel32_64, 5)?,
        Shape::IndirectJump { len } => indirect(Code::Jmp_rm64, len)?,
        Shape::IndirectCall { len } => indirect(Code::Call_rm64, len)?,
        Shape::Return { len } => padded(BRANCH_PAD, len, &plain(Code::Retnq)?, 0)?,
    };
    verify(shape, pc, &bytes)?;
    Ok(bytes)
}

fn iced(e: impl fmt::Display) -> ShapeError {
    ShapeError::Encoder(e.to_string())
}

fn plain(code: Code) -> Result<Instruction, ShapeError> {
    Ok(Instruction::with(code))
}

fn assemble(i: &Instruction, ip: u64) -> Result<Vec<u8>, ShapeError> {
    let mut e = Encoder::new(64);
    e.encode(i, ip).map_err(iced)?;
    Ok(e.take_buffer())
}

/// `pad` repeated in front of `i` encoded at `ip + pads`, to `len` bytes in all; `base` is the
/// length of `i`'s encoding (fixed by its code, whatever its IP).
fn padded_to(pad: u8, len: u8, base: u8, i: &Instruction, ip: u64) -> Result<Vec<u8>, ShapeError> {
    let pads = len
        .checked_sub(base)
        .ok_or_else(|| ShapeError::Encoder(format!("base form of {base} bytes > {len}")))?;
    let mut out = vec![pad; usize::from(pads)];
    out.extend(assemble(i, ip.wrapping_add(u64::from(pads)))?);
    Ok(out)
}

/// [`padded_to`] for an instruction without IP-relative operands (measured at IP 0).
fn padded(pad: u8, len: u8, i: &Instruction, ip: u64) -> Result<Vec<u8>, ShapeError> {
    let base = assemble(i, 0)?.len() as u8;
    padded_to(pad, len, base, i, ip)
}

/// Memory operands of growing size: (encoded ModRM+SIB+disp bytes, operand).
fn mem_forms() -> [(u8, MemoryOperand); 4] {
    [
        (2, MemoryOperand::with_base_displ_size(Register::RAX, 0x10, 1)),
        (
            3,
            MemoryOperand::with_base_index_scale_displ_size(Register::RAX, Register::RCX, 1, 0x10, 1),
        ),
        (5, MemoryOperand::with_base_displ_size(Register::RAX, 0x1000, 8)),
        (
            6,
            MemoryOperand::with_base_index_scale_displ_size(Register::RAX, Register::RCX, 1, 0x1000, 8),
        ),
    ]
}

/// The longest operand form that fits in `room` bytes after the opcode, or `None` (register).
fn best_mem(room: u8) -> Option<(u8, MemoryOperand)> {
    mem_forms().into_iter().rev().find(|(n, _)| *n <= room)
}

/// A NOP of `len` bytes (1..=15): `90`, `66 90`, or `0F 1F /0` with a growing memory operand,
/// then `66` prefixes.
pub fn nop(len: u8) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::Nop { len }, 0)
}

fn nop_bytes(len: u8) -> Result<Vec<u8>, ShapeError> {
    let shape = Shape::Nop { len };
    let i = match len {
        0 | 16.. => return Err(ShapeError::Length { shape }),
        1 => plain(Code::Nopd)?,
        2 => plain(Code::Nopw)?,
        3 => Instruction::with1(Code::Nop_rm32, MemoryOperand::with_base(Register::RAX)).map_err(iced)?,
        _ => {
            let (_, m) = best_mem(len - 2).expect("a form of 2 bytes fits");
            Instruction::with1(Code::Nop_rm32, m).map_err(iced)?
        }
    };
    padded(NOP_PAD, len, &i, 0)
}

/// `PTWRITE r/m64` (`F3 REX.W 0F AE /4`) of `len` bytes (5..=15): `ptwrite rax` for 5, then
/// growing memory operands, then `2E` prefixes.
pub fn ptwrite(len: u8) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::Ptwrite { len }, 0)
}

fn ptwrite_bytes(len: u8) -> Result<Vec<u8>, ShapeError> {
    let shape = Shape::Ptwrite { len };
    if !(5..=MAX_LEN).contains(&len) {
        return Err(ShapeError::Length { shape });
    }
    let i = match best_mem(len - 4) {
        Some((_, m)) => Instruction::with1(Code::Ptwrite_rm64, m),
        None => Instruction::with1(Code::Ptwrite_rm64, Register::RAX),
    }
    .map_err(iced)?;
    padded(BRANCH_PAD, len, &i, 0)
}

/// An indirect `FF /2` or `FF /4` of `len` bytes (2..=15): a register for 2, then growing
/// memory operands, then `2E` prefixes.
fn indirect(code: Code, len: u8) -> Result<Vec<u8>, ShapeError> {
    let i = match best_mem(len - 1) {
        Some((_, m)) => Instruction::with1(code, m),
        None => Instruction::with1(code, Register::RAX),
    }
    .map_err(iced)?;
    padded(BRANCH_PAD, len, &i, 0)
}

/// An indirect JMP (`FF /4`) of `len` bytes (2..=15).
pub fn indirect_jump(len: u8) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::IndirectJump { len }, 0)
}

/// An indirect CALL (`FF /2`) of `len` bytes (2..=15).
pub fn indirect_call(len: u8) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::IndirectCall { len }, 0)
}

/// A RET of `len` bytes (1..=15): `C3` after `2E` prefixes.
pub fn ret(len: u8) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::Return { len }, 0)
}

/// `JNE` at `pc` to `target` in `len` bytes (2..=15): `75 rel8` for 2..=5, `0F 85 rel32` for
/// 6..=15, behind `2E` prefixes.
pub fn jcc(pc: u64, len: u8, target: u64) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::Cond { len, target }, pc)
}

/// `JMP` at `pc` to `target` in `len` bytes (2..=15): `EB rel8` for 2..=4, `E9 rel32` for
/// 5..=15, behind `2E` prefixes.
pub fn jmp(pc: u64, len: u8, target: u64) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::Jump { len, target }, pc)
}

/// `CALL` at `pc` to `target` in `len` bytes (5..=15): `E8 rel32` behind `2E` prefixes.
pub fn call(pc: u64, len: u8, target: u64) -> Result<Vec<u8>, ShapeError> {
    encode(Shape::Call { len, target }, pc)
}

/// A direct branch `code` (base form of `base` bytes) at `pc` to `target`, padded to the shape's
/// length; `Reach` if the displacement does not fit.
fn direct(shape: Shape, pc: u64, target: u64, code: Code, base: u8) -> Result<Vec<u8>, ShapeError> {
    let len = shape.size();
    let disp = target.wrapping_sub(pc.wrapping_add(u64::from(len))) as i64;
    let disp_bytes = if base == 2 { 1 } else { 4 };
    let fits = if disp_bytes == 1 {
        i8::try_from(disp).is_ok()
    } else {
        i32::try_from(disp).is_ok()
    };
    if !fits {
        return Err(ShapeError::Reach {
            shape,
            pc,
            disp_bytes,
        });
    }
    let i = Instruction::with_branch(code, target).map_err(iced)?;
    padded_to(BRANCH_PAD, len, base, &i, pc)
}

/// Decodes `bytes` at `pc` with iced-x86 and checks they are one instruction of the shape.
pub fn verify(shape: Shape, pc: u64, bytes: &[u8]) -> Result<(), ShapeError> {
    let mut d = Decoder::with_ip(64, bytes, pc, DecoderOptions::NONE);
    let i = d.decode();
    let bad = |why: &str| {
        Err(ShapeError::Encoder(format!(
            "{shape} at {pc:#x}: {bytes:02x?} {why}"
        )))
    };
    if i.is_invalid() {
        return bad("do not decode");
    }
    if i.len() != usize::from(shape.size()) || bytes.len() != usize::from(shape.size()) {
        return bad(&format!("decode to {} bytes", i.len()));
    }
    let (flow, target) = match shape {
        Shape::Nop { .. } => (FlowControl::Next, None),
        Shape::Ptwrite { .. } => (FlowControl::Next, None),
        Shape::Cond { target, .. } => (FlowControl::ConditionalBranch, Some(target)),
        Shape::Jump { target, .. } => (FlowControl::UnconditionalBranch, Some(target)),
        Shape::Call { target, .. } => (FlowControl::Call, Some(target)),
        Shape::IndirectJump { .. } => (FlowControl::IndirectBranch, None),
        Shape::IndirectCall { .. } => (FlowControl::IndirectCall, None),
        Shape::Return { .. } => (FlowControl::Return, None),
    };
    if i.flow_control() != flow {
        return bad(&format!("decode as {:?}", i.flow_control()));
    }
    let mnemonic_ok = match shape {
        Shape::Nop { .. } => i.mnemonic() == Mnemonic::Nop,
        Shape::Ptwrite { .. } => i.code() == Code::Ptwrite_rm64,
        _ => true,
    };
    if !mnemonic_ok {
        return bad(&format!("decode as {:?}", i.code()));
    }
    if let Some(t) = target {
        if i.near_branch_target() != t {
            return bad(&format!("branch to {:#x}", i.near_branch_target()));
        }
    }
    Ok(())
}
