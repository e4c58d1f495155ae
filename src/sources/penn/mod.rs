//! Penn CIS 501 x86 micro-op traces (Milo Martin, 2010–2011): one text line per micro-op, 14
//! whitespace-separated fields; micro-ops group into x86 macro-ops by their uop counter.
//!
//! - [`UopReader`] streams lines into [`Uop`]s; [`MacroOpReader`] groups them into
//!   [`MacroOp`]s and classifies branches (`trace-formats.md` §3.2);
//! - [`UopWriter`] writes the same text back; [`generate`] writes synthetic traces;
//! - [`PennEvents`] maps macro-ops to tracer events (`spec/mapping.md`).

mod events;
mod fast;
mod gen;
mod macro_op;
mod parse;
mod read;
mod split;
mod write;

pub use events::PennEvents;
// The per-format generators are what `sources::generate` (`ptemu gen`) dispatches to, and what
// the tests call; `sources::generate` is the API.
#[doc(hidden)]
pub use gen::generate;
pub use macro_op::{BranchKind, MacroOp, MacroOpReader};
pub use parse::MAX_LINE;
pub use read::UopReader;
pub use split::BLOCK as PARSE_BLOCK;
pub use write::UopWriter;

use std::fmt;

/// Field 6: whether the micro-op reads or writes the condition codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlagsUse {
    /// `-`.
    None,
    /// `R`: reads the flags.
    Read,
    /// `W`: writes the flags.
    Write,
}

/// Field 7: branch outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchOutcome {
    /// `-`: not a branch micro-op.
    None,
    /// `T`: taken to the target PC.
    Taken,
    /// `N`: not taken, falls through.
    NotTaken,
}

/// Field 8: memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemAccess {
    /// `-`.
    None,
    /// `L`: load.
    Load,
    /// `S`: store.
    Store,
}

/// A short opcode name stored inline (fields 13 and 14), so a record needs no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mnemonic {
    len: u8,
    bytes: [u8; Mnemonic::CAPACITY],
}

impl Mnemonic {
    /// The longest name accepted (the course's C parser reads at most 11 and 22 characters).
    pub const CAPACITY: usize = 23;

    /// The name from `s`, or `None` if it is empty, longer than [`Mnemonic::CAPACITY`] or not
    /// printable ASCII.
    pub fn new(s: &[u8]) -> Option<Mnemonic> {
        if s.is_empty() || s.len() > Self::CAPACITY || !s.iter().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let mut bytes = [0; Self::CAPACITY];
        bytes[..s.len()].copy_from_slice(s);
        Some(Mnemonic {
            len: s.len() as u8,
            bytes,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only printable ASCII is ever stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for Mnemonic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for Mnemonic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of a Penn trace: one x86 micro-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Uop {
    /// Field 1: the micro-op's 1-based index inside its macro-op; 1 starts a new instruction.
    pub index: u32,
    /// Field 2: the macro-op's PC.
    pub pc: u64,
    /// Field 3: first source register, -1 for none.
    pub src1: i32,
    /// Field 4: second source register (the address base for loads and stores), -1 for none.
    pub src2: i32,
    /// Field 5: destination register, -1 for none.
    pub dest: i32,
    /// Field 6.
    pub flags: FlagsUse,
    /// Field 7.
    pub branch: BranchOutcome,
    /// Field 8.
    pub mem: MemAccess,
    /// Field 9: immediate (a displacement for branches, loads and SAVE_PC).
    pub immediate: i64,
    /// Field 10: the load or store address, 0 otherwise.
    pub mem_addr: u64,
    /// Field 11: the next instruction in memory (PC + length).
    pub fallthrough: u64,
    /// Field 12: the branch target, 0 for non-branches.
    pub target: u64,
    /// Field 13: the x86 instruction class (`J` is any Jcc).
    pub macro_name: Mnemonic,
    /// Field 14: the micro-op kind (`JMP_IMM`, `JMP_REG`, `LOAD`, ...).
    pub micro_name: Mnemonic,
}
