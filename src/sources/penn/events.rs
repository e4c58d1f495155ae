//! Penn macro-ops to tracer events (`spec/mapping.md`, section Penn).

use super::{BranchKind, MacroOp, MacroOpReader, UopReader};
use crate::packet::PtwSize;
use crate::sources::error::Result;
use crate::sources::{
    ErrorKind, EventSource, Input, Position, ReadOptions, SourceError, SourceStats, StartState,
};
use crate::tracer::{Event, ExecMode, FarKind};

/// The CR3 ptemu gives the traced process (the trace has none): 4 KiB aligned, non-zero.
pub const PENN_CR3: u64 = 0x0010_0000;

/// The vector reported for an unrecorded asynchronous transfer under `--lenient` (the first
/// vector available to external interrupts).
pub const DISCONTINUITY_VECTOR: u8 = 0x20;

/// Counters, in report order.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    macro_ops: u64,
    cond_taken: u64,
    cond_not_taken: u64,
    jump: u64,
    call: u64,
    indirect_jump: u64,
    indirect_call: u64,
    ret: u64,
    loads: u64,
    stores: u64,
    ptwrite: u64,
    rep_iterations: u64,
    discontinuities: u64,
}

/// A Penn trace as tracer events: one event per macro-op (exact control flow).
#[derive(Debug)]
pub struct PennEvents {
    reader: MacroOpReader,
    counts: Counts,
    /// The previous macro-op.
    prev: Option<MacroOp>,
}

impl PennEvents {
    /// Maps the trace `input`.
    pub fn new(input: Input, options: ReadOptions) -> Self {
        Self::over(UopReader::new(input, options))
    }

    /// Maps the trace `input`, its lines parsed ahead on `workers` threads of their own
    /// ([`UopReader::parallel`]): the same events, errors and counts as [`PennEvents::new`].
    pub fn parsed_ahead(input: Input, options: ReadOptions, workers: usize) -> Self {
        Self::over(UopReader::parallel(input, options, workers))
    }

    fn over(uops: UopReader) -> Self {
        PennEvents {
            reader: MacroOpReader::new(uops),
            counts: Counts::default(),
            prev: None,
        }
    }

    /// The next macro-op with its event, or `None` at the end.
    pub fn next_macro_op(&mut self) -> Result<Option<(MacroOp, Option<Event>, Event)>> {
        loop {
            let Some(op) = self.reader.next_macro_op()? else {
                return Ok(None);
            };
            self.counts.loads += u64::from(op.loads);
            self.counts.stores += u64::from(op.stores);
            let mut before = None;
            if let Some(prev) = self.prev {
                let expected = prev.next_pc();
                if op.pc != expected {
                    if op.pc == prev.pc && prev.kind == BranchKind::None {
                        // A REP string instruction iterating: one instruction to PT.
                        self.counts.rep_iterations += 1;
                        self.prev = Some(op);
                        continue;
                    }
                    if !self.reader.uops().lenient() {
                        return Err(SourceError::at(
                            self.reader.uops().name(),
                            Position::Line(op.line),
                            ErrorKind::Inconsistent,
                            format!(
                                "PC {:x}, but the instruction at line {} (PC {:x}) continues at {:x}",
                                op.pc, prev.line, prev.pc, expected
                            ),
                        ));
                    }
                    self.counts.discontinuities += 1;
                    before = Some(Event::far(
                        FarKind::Interrupt {
                            vector: DISCONTINUITY_VECTOR,
                        },
                        expected,
                        op.pc,
                        3,
                        ExecMode::Bits64,
                    ));
                }
            }
            self.prev = Some(op);
            let event = self.event(&op);
            return Ok(Some((op, before, event)));
        }
    }

    fn event(&mut self, op: &MacroOp) -> Event {
        let c = &mut self.counts;
        c.macro_ops += 1;
        let (ip, len, target) = (op.pc, op.len, op.target);
        match op.kind {
            BranchKind::None if op.is_ptwrite_site() => {
                c.ptwrite += 1;
                Event::Ptwrite {
                    ip,
                    len,
                    payload: op.mem_addr.unwrap_or(0),
                    size: PtwSize::Eight,
                }
            }
            BranchKind::None => Event::Retire { ip, len },
            BranchKind::Conditional => {
                if op.taken {
                    c.cond_taken += 1;
                } else {
                    c.cond_not_taken += 1;
                }
                Event::CondBranch {
                    ip,
                    len,
                    target,
                    taken: op.taken,
                }
            }
            BranchKind::Jump => {
                c.jump += 1;
                Event::Jump { ip, target }
            }
            BranchKind::Call => {
                c.call += 1;
                Event::Call { ip, len, target }
            }
            BranchKind::IndirectJump => {
                c.indirect_jump += 1;
                Event::IndirectJump { ip, target }
            }
            BranchKind::IndirectCall => {
                c.indirect_call += 1;
                Event::IndirectCall { ip, len, target }
            }
            BranchKind::Return => {
                c.ret += 1;
                Event::Return { ip, target }
            }
        }
    }
}

/// Where the Penn mapping is approximate.
pub const PENN_APPROXIMATIONS: &[&str] = &[
    "data addresses reach the trace only as PTWRITE payloads of non-branch instructions of 5 or more \
     bytes (the instruction's first access); other loads and stores are counted but carry no packet",
    "the trace has no timing: the clock advances a fixed number of cycles per instruction",
];

impl PennEvents {
    /// Appends the events of the next macro-op to `out` ([`EventSource::next_events`]) and
    /// returns the macro-op, for callers that also want it (the code image); `None` at the end.
    pub fn push_macro_op(&mut self, out: &mut Vec<Event>) -> Result<Option<MacroOp>> {
        Ok(self.next_macro_op()?.map(|(op, before, event)| {
            out.extend(before);
            out.push(event);
            op
        }))
    }
}

impl EventSource for PennEvents {
    fn next_events(&mut self, out: &mut Vec<Event>) -> Result<bool> {
        Ok(self.push_macro_op(out)?.is_some())
    }

    fn start_state(&self) -> StartState {
        StartState {
            mode: ExecMode::Bits64,
            cpl: 3,
            cr3: PENN_CR3,
        }
    }

    fn stats(&self) -> SourceStats {
        let c = &self.counts;
        SourceStats {
            format: "penn",
            records: self.reader.uops().line(),
            skipped: self.reader.uops().skipped(),
            counts: {
                let mut v = vec![
                    ("uops", self.reader.uop_count()),
                    ("macro_ops", c.macro_ops),
                    ("cond_taken", c.cond_taken),
                    ("cond_not_taken", c.cond_not_taken),
                    ("jump", c.jump),
                    ("call", c.call),
                    ("indirect_jump", c.indirect_jump),
                    ("indirect_call", c.indirect_call),
                    ("return", c.ret),
                    ("loads", c.loads),
                    ("stores", c.stores),
                    ("ptwrite", c.ptwrite),
                    ("rep_iterations", c.rep_iterations),
                    ("discontinuities", c.discontinuities),
                ];
                // Only when it happened: the counts of whole traces stay as they were.
                if self.reader.cut_at().is_some() {
                    v.push(("cut_instruction_left_out", 1));
                }
                v
            },
            approximations: PENN_APPROXIMATIONS.to_vec(),
        }
    }
}
