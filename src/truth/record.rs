//! The records of a truth, whatever its form on disk (TR1, TR2): what [`super::write()`]
//! classifies the run's facts into, what `truth.bin` ([`super::compact`]) and `truth.jsonl`
//! ([`super::json`]) hold, and what `verify` matches a decoder's output against.

use super::mark::Text;
use super::{Cause, Counts};
use crate::tracer::{Block, BlockEnd};
use std::io;

/// What a branch is (TR2's `"branch"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// A conditional branch.
    Cond,
    /// A direct jump.
    Jump,
    /// A direct call.
    Call,
    /// An indirect jump.
    IndJump,
    /// An indirect call.
    IndCall,
    /// A return.
    Ret,
    /// A far transfer (not an asynchronous one).
    Far,
}

impl BranchKind {
    /// Every kind, in the order of its code in `truth.bin`.
    pub const ALL: [BranchKind; 7] = [
        BranchKind::Cond,
        BranchKind::Jump,
        BranchKind::Call,
        BranchKind::IndJump,
        BranchKind::IndCall,
        BranchKind::Ret,
        BranchKind::Far,
    ];

    /// Its name in `truth.jsonl` (and in the tracer's facts).
    pub fn name(self) -> &'static str {
        match self {
            BranchKind::Cond => "cond",
            BranchKind::Jump => "jump",
            BranchKind::Call => "call",
            BranchKind::IndJump => "ind-jump",
            BranchKind::IndCall => "ind-call",
            BranchKind::Ret => "ret",
            BranchKind::Far => "far",
        }
    }

    /// The kind named `name`.
    #[inline]
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "cond" => BranchKind::Cond,
            "jump" => BranchKind::Jump,
            "call" => BranchKind::Call,
            "ind-jump" => BranchKind::IndJump,
            "ind-call" => BranchKind::IndCall,
            "ret" => BranchKind::Ret,
            "far" => BranchKind::Far,
            _ => return None,
        })
    }
}

/// The branch fields of an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    /// What it is.
    pub kind: BranchKind,
    /// Where the flow went (the fall-through of a conditional branch not taken).
    pub to: u64,
    /// Taken (always, but for a conditional branch not taken).
    pub taken: bool,
}

/// How a decoder must treat an instruction (TR2–TR5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// It must give it.
    Required,
    /// It may stop before it (TR3).
    Optional,
    /// It cannot recover it, and must skip it (TR4).
    Lost(Cause),
    /// It cannot know it: anything goes (TR5).
    Undefined(Cause),
}

/// One record of a truth, in stream order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// A traced instruction (TR2).
    Insn {
        /// Its index among every traced instruction, from 0.
        i: u64,
        /// Its IP.
        ip: u64,
        /// The branch it is, if it is one.
        branch: Option<Branch>,
        /// The delivered offset of its carrier, if delivered.
        off: Option<u64>,
        /// How a decoder must treat it.
        class: Class,
    },
    /// What follows, up to the next instruction a decoder recovers, is lost or undefined (TR4–TR7).
    Span {
        /// Why ([`Cause::undefined`] and [`Cause::error_required`] follow from it).
        cause: Cause,
        /// The index of the first instruction after it.
        first: u64,
        /// The delivered offset of the PSB a decoder synchronizes at again, if any.
        resume: Option<u64>,
    },
    /// TIP.PGE.
    Enable {
        /// The first traced IP.
        ip: u64,
        /// The packet's delivered offset.
        off: Option<u64>,
    },
    /// TIP.PGD.
    Disable {
        /// The packet's delivered offset.
        off: Option<u64>,
    },
    /// An asynchronous transfer: FUP + TIP.
    Async {
        /// Where the flow was interrupted.
        from: u64,
        /// Where it went.
        to: u64,
        /// The TIP's delivered offset.
        off: Option<u64>,
    },
    /// OVF.
    Overflow {
        /// The packet's delivered offset.
        off: Option<u64>,
    },
    /// An event from a packet that does not move the flow (TR11): MODE.Exec, PIP, PTW, CBR, a
    /// power event, Event Trace's CFE, ... It stands where its window ends, before the first
    /// instruction a decoder cannot reach without reading past its packet.
    Mark {
        /// ptxed's words for it ([`super::mark`]).
        text: Text,
        /// The IP it is bound to, when its packet has one.
        ip: Option<u64>,
        /// The packet's delivered offset.
        off: Option<u64>,
        /// How many instructions before this place a decoder may already report it: those a
        /// decoder reaches through the last packet before it.
        early: u64,
        /// It only restates what a decoder knows (a MODE.Exec that repeats the mode): a decoder
        /// may leave it out.
        restated: bool,
    },
    /// A timing packet (TSC, MTC, CYC) and the time it stands for (TR13). It stands before the
    /// first instruction a decoder reaches only past it, as a mark does.
    Time {
        /// The TSC it stands for.
        tsc: u64,
        /// How much later a decoder may make it (CYC after an MTC or TSC, TR13).
        slack: u64,
        /// The packet's delivered offset.
        off: Option<u64>,
    },
    /// The last record: what came before it.
    End {
        /// The counts of the records before it.
        counts: Counts,
    },
}

/// A whole execution of a block (TR14, TR15): its `n` instructions, `i` to `i + n - 1`, are the
/// block's, in order, the last one a branch toward `next` when the block ends in one; they share
/// a carrier offset and a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The index of its first instruction.
    pub i: u64,
    /// The block: its index in the table [`Sink::block`] gave.
    pub block: u32,
    /// How many instructions the block has.
    pub n: u32,
    /// Where the code went after it.
    pub next: u64,
    /// The delivered offset of its instructions' carrier, if delivered.
    pub off: Option<u64>,
    /// How a decoder must treat its instructions.
    pub class: Class,
}

impl Run {
    /// Its instructions' records, in order, given to `f` (`b`: its block).
    pub fn each_insn(&self, b: &Block, mut f: impl FnMut(Record)) {
        let mut ip = b.start();
        let lens = b.lengths();
        for (k, &len) in lens.iter().enumerate() {
            let last = k + 1 == lens.len();
            f(Record::Insn {
                i: self.i + k as u64,
                ip,
                branch: if last { branch_of(b, self.next) } else { None },
                off: self.off,
                class: self.class,
            });
            ip = ip.wrapping_add(u64::from(len));
        }
    }
}

/// The branch fields of the last instruction of an execution of `b` that went on at `next`.
pub fn branch_of(b: &Block, next: u64) -> Option<Branch> {
    let (kind, taken) = match b.end() {
        BlockEnd::Conditional { target } => (BranchKind::Cond, next == target),
        BlockEnd::Jump { .. } => (BranchKind::Jump, true),
        BlockEnd::Call { .. } => (BranchKind::Call, true),
        BlockEnd::IndirectJump => (BranchKind::IndJump, true),
        BlockEnd::IndirectCall => (BranchKind::IndCall, true),
        BlockEnd::Return => (BranchKind::Ret, true),
        _ => return None,
    };
    Some(Branch {
        kind,
        to: next,
        taken,
    })
}

/// Where records go: `truth.bin`'s encoder, `truth.jsonl`'s writer.
pub trait Sink {
    /// The header (TR1: sizes, damage, the run), before any record.
    fn header(&mut self, header: &serde_json::Value) -> io::Result<()>;
    /// The next block of the table [`Run`]s name (TR15), before the first run that names it.
    fn block(&mut self, b: &Block) -> io::Result<()>;
    /// The next record: a whole execution of a block.
    fn run(&mut self, r: &Run) -> io::Result<()>;
    /// The next record.
    fn record(&mut self, r: &Record) -> io::Result<()>;
    /// After the end record: flushes.
    fn finish(&mut self) -> io::Result<()>;
}

impl Counts {
    /// Counts `r` as [`Record::End`]'s counts count it.
    pub fn add(&mut self, r: &Record) {
        match r {
            Record::Insn { class, .. } => {
                self.instructions += 1;
                match class {
                    Class::Required => self.required += 1,
                    Class::Optional => self.optional += 1,
                    Class::Lost(_) => self.lost += 1,
                    Class::Undefined(_) => self.undefined += 1,
                }
            }
            Record::Span { .. } => self.spans += 1,
            _ => {}
        }
    }

    /// Counts the instructions of `r`.
    pub fn add_run(&mut self, r: &Run) {
        let n = u64::from(r.n);
        self.instructions += n;
        match r.class {
            Class::Required => self.required += n,
            Class::Optional => self.optional += n,
            Class::Lost(_) => self.lost += n,
            Class::Undefined(_) => self.undefined += n,
        }
    }

    /// The first count that differs from `other`'s: its name, ours, theirs.
    pub fn first_difference(&self, other: &Counts) -> Option<(&'static str, u64, u64)> {
        [
            ("instruction", self.instructions, other.instructions),
            ("required instruction", self.required, other.required),
            ("optional instruction", self.optional, other.optional),
            ("lost instruction", self.lost, other.lost),
            ("undefined instruction", self.undefined, other.undefined),
            ("span", self.spans, other.spans),
        ]
        .into_iter()
        .find(|p| p.1 != p.2)
    }
}

impl Cause {
    /// The cause named `name` (as [`Cause::name`] gives it).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}
