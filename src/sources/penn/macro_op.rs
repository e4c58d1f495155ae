//! Grouping micro-ops into x86 macro-ops and telling branch kinds apart (`trace-formats.md` §3.2).

use super::{BranchOutcome, FlagsUse, MemAccess, Mnemonic, Uop, UopReader};
use crate::image::Shape;
use crate::sources::error::Result;
use crate::sources::{ErrorKind, Position, SourceError};

/// What kind of control transfer a macro-op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// Not a branch.
    None,
    /// A conditional direct branch (Jcc, LOOP, JCXZ): a TNT bit.
    Conditional,
    /// An unconditional direct JMP.
    Jump,
    /// A direct CALL.
    Call,
    /// An indirect JMP.
    IndirectJump,
    /// An indirect CALL.
    IndirectCall,
    /// A RET.
    Return,
}

/// One x86 instruction: its micro-ops folded together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacroOp {
    /// The line of its first micro-op.
    pub line: u64,
    /// Its PC.
    pub pc: u64,
    /// Its length: fallthrough − PC (1..=15).
    pub len: u8,
    /// The next instruction in memory.
    pub fallthrough: u64,
    /// Micro-ops in it.
    pub uops: u32,
    /// Branch kind.
    pub kind: BranchKind,
    /// Taken (always true for unconditional kinds; false for non-branches).
    pub taken: bool,
    /// Branch target (for a conditional branch, also when not taken); 0 for non-branches.
    pub target: u64,
    /// Load micro-ops.
    pub loads: u32,
    /// Store micro-ops.
    pub stores: u32,
    /// The address of its first load or store.
    pub mem_addr: Option<u64>,
    /// The macro opcode (field 13).
    pub name: Mnemonic,
}

impl MacroOp {
    /// The PC of the instruction that executes next.
    pub fn next_pc(&self) -> u64 {
        if self.taken {
            self.target
        } else {
            self.fallthrough
        }
    }

    /// Whether the mapping reports it as a PTWRITE (its first data address as an 8-byte payload):
    /// a non-branch with a memory access, long enough for the 64-bit PTWRITE encoding
    /// (`F3 REX.W 0F AE /4`, at least 5 bytes). See `spec/mapping.md`.
    pub fn is_ptwrite_site(&self) -> bool {
        self.kind == BranchKind::None && self.mem_addr.is_some() && self.len >= 5
    }

    /// The shape of x86 instruction the code image needs at its PC (`spec/image.md`).
    pub fn shape(&self) -> Shape {
        let (len, target) = (self.len, self.target);
        match self.kind {
            BranchKind::None if self.is_ptwrite_site() => Shape::Ptwrite { len },
            BranchKind::None => Shape::Nop { len },
            BranchKind::Conditional => Shape::Cond { len, target },
            BranchKind::Jump => Shape::Jump { len, target },
            BranchKind::Call => Shape::Call { len, target },
            BranchKind::IndirectJump => Shape::IndirectJump { len },
            BranchKind::IndirectCall => Shape::IndirectCall { len },
            BranchKind::Return => Shape::Return { len },
        }
    }
}

/// Reads macro-ops: micro-ops grouped by their uop counter (index 1 starts an instruction).
#[derive(Debug)]
pub struct MacroOpReader {
    uops: UopReader,
    pending: Option<(u64, Uop)>,
    uop_count: u64,
    cut_at: Option<u64>,
}

/// Whether macro opcode `name` is a branch (its macro-op ends with a branch micro-op).
fn is_branch_name(name: &[u8]) -> bool {
    matches!(
        name,
        b"CALL" | b"RET" | b"JMP" | b"J" | b"JCXZ" | b"JECXZ" | b"JRCXZ"
    ) || name.starts_with(b"LOOP")
}

/// A macro-op being assembled.
struct Partial {
    op: MacroOp,
    last_index: u32,
    branch: Option<BranchUop>,
}

/// What classification needs of the branch micro-op (not the whole micro-op, to keep the copies
/// small).
#[derive(Clone, Copy)]
struct BranchUop {
    line: u64,
    taken: bool,
    reads_flags: bool,
    register_target: bool,
    target: u64,
}

impl MacroOpReader {
    /// Groups the micro-ops `uops` reads.
    pub fn new(uops: UopReader) -> Self {
        MacroOpReader {
            uops,
            pending: None,
            uop_count: 0,
            cut_at: None,
        }
    }

    /// The underlying line reader.
    pub fn uops(&self) -> &UopReader {
        &self.uops
    }

    /// Micro-ops grouped so far.
    pub fn uop_count(&self) -> u64 {
        self.uop_count
    }

    /// Reads the next micro-op into `pending` unless one waits there already (in place: a
    /// micro-op is 112 bytes, and grouping reads it by reference).
    #[inline]
    fn fill(&mut self) -> Result<()> {
        if self.pending.is_none() {
            self.pending = self.uops.next_uop()?;
            if self.pending.is_some() {
                self.uop_count += 1;
            }
        }
        Ok(())
    }

    fn error(&self, line: u64, kind: ErrorKind, message: String) -> SourceError {
        SourceError::at(self.uops.name(), Position::Line(line), kind, message)
    }

    /// The next macro-op, `None` at the end of the input. Under `lenient`, a macro-op that cannot
    /// be classified, or a micro-op that does not belong to its macro-op, is skipped and counted.
    pub fn next_macro_op(&mut self) -> Result<Option<MacroOp>> {
        loop {
            match self.assemble() {
                Ok(op) => return Ok(op),
                Err(e) => self.uops.skip(e)?,
            }
        }
    }

    fn assemble(&mut self) -> Result<Option<MacroOp>> {
        self.fill()?;
        let Some((line, first)) = &self.pending else {
            return Ok(None);
        };
        let line = *line;
        let len = first.fallthrough.wrapping_sub(first.pc);
        if !(1..=15).contains(&len) {
            let message = format!(
                "field 11 (fallthrough PC): {:x} - PC {:x} is not an x86 instruction length (1..15)",
                first.fallthrough, first.pc
            );
            self.pending = None;
            return Err(self.error(line, ErrorKind::BadField, message));
        }
        let mut part = Partial {
            op: MacroOp {
                line,
                pc: first.pc,
                len: len as u8,
                fallthrough: first.fallthrough,
                uops: 0,
                kind: BranchKind::None,
                taken: false,
                target: 0,
                loads: 0,
                stores: 0,
                mem_addr: None,
                name: first.macro_name,
            },
            last_index: first.index.wrapping_sub(1),
            branch: None,
        };
        loop {
            // The micro-op in `pending` belongs here (the first, or one whose index is not 1);
            // it is consumed whether it fits or not.
            let added = match &self.pending {
                Some((l, u)) => add(self.uops.name(), &mut part, *l, u),
                None => Ok(()),
            };
            self.pending = None;
            added?;
            self.fill()?;
            match &self.pending {
                Some((_, u)) if u.index != 1 => {}
                _ => break,
            }
        }
        if self.pending.is_none() && part.branch.is_none() && is_branch_name(part.op.name.as_bytes()) {
            // The trace ends inside a branch instruction, before its branch micro-op (a trace
            // cut with `head`): where it went is unknown, so it is not traced; the trace ends
            // with the instruction before it.
            tracing::warn!(
                line,
                pc = format_args!("{:x}", part.op.pc),
                "{}: the trace ends inside the {} at line {line}, before its branch micro-op: it is left out",
                self.uops.name(),
                part.op.name
            );
            self.cut_at = Some(line);
            return Ok(None);
        }
        self.classify(&mut part)?;
        Ok(Some(part.op))
    }

    /// The line of the branch instruction the trace ended inside, left out (see
    /// `spec/mapping.md`, Penn).
    pub fn cut_at(&self) -> Option<u64> {
        self.cut_at
    }

    fn classify(&self, part: &mut Partial) -> Result<()> {
        let Some(b) = part.branch else {
            return Ok(());
        };
        let op = &mut part.op;
        let name = op.name.as_bytes();
        let taken = b.taken;
        let kind = if b.register_target {
            match name {
                b"RET" => BranchKind::Return,
                b"CALL" => BranchKind::IndirectCall,
                _ => BranchKind::IndirectJump,
            }
        } else if b.reads_flags
            || name == b"J"
            || name.starts_with(b"LOOP")
            || matches!(name, b"JCXZ" | b"JECXZ" | b"JRCXZ")
            || (!taken && !matches!(name, b"JMP" | b"CALL" | b"RET"))
        {
            BranchKind::Conditional
        } else {
            match name {
                b"CALL" => BranchKind::Call,
                b"RET" => BranchKind::Return,
                _ => BranchKind::Jump,
            }
        };
        if kind != BranchKind::Conditional && !taken {
            return Err(self.error(
                b.line,
                ErrorKind::BadField,
                format!(
                    "field 7 (branch): an unconditional {} marked N (not taken)",
                    op.name
                ),
            ));
        }
        op.kind = kind;
        op.taken = taken;
        op.target = b.target;
        Ok(())
    }
}

/// Folds micro-op `u` (at `line` of the input `name`) into the macro-op being assembled.
fn add(name: &str, part: &mut Partial, line: u64, u: &Uop) -> Result<()> {
    let op = &mut part.op;
    if u.pc != op.pc || u.fallthrough != op.fallthrough || u.index != part.last_index.wrapping_add(1) {
        return Err(SourceError::at(
            name,
            Position::Line(line),
            ErrorKind::Inconsistent,
            format!(
                "micro-op {} at PC {:x} (fallthrough {:x}) does not continue the macro-op at line {} \
                 (micro-op {} at PC {:x}, fallthrough {:x})",
                u.index, u.pc, u.fallthrough, op.line, part.last_index, op.pc, op.fallthrough
            ),
        ));
    }
    part.last_index = u.index;
    op.uops += 1;
    match u.mem {
        MemAccess::Load => op.loads += 1,
        MemAccess::Store => op.stores += 1,
        MemAccess::None => {}
    }
    if u.mem != MemAccess::None && op.mem_addr.is_none() {
        op.mem_addr = Some(u.mem_addr);
    }
    if u.branch != BranchOutcome::None {
        if let Some(BranchUop { line: first, .. }) = part.branch {
            return Err(SourceError::at(
                name,
                Position::Line(line),
                ErrorKind::Inconsistent,
                format!(
                    "a second branch micro-op in the macro-op at line {} (first at line {first})",
                    op.line
                ),
            ));
        }
        part.branch = Some(BranchUop {
            line,
            taken: u.branch == BranchOutcome::Taken,
            reads_flags: u.flags == FlagsUse::Read,
            register_target: u.micro_name.as_bytes() == b"JMP_REG",
            target: u.target,
        });
    }
    Ok(())
}
