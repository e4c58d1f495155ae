//! Bus operations common to both BYU formats, and the synthetic machine their generators share.

use super::record::SpecialCycle;
use crate::sources::rng::GenRng;

/// What a data-side bus cycle did (also the `kind` field of the PTWRITE payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataKind {
    /// Memory read.
    Read = 1,
    /// Memory read for ownership (p2 `MEMREADINV`).
    ReadInvalidate = 2,
    /// Memory write.
    Write = 3,
    /// Cache-line write-back.
    Writeback = 4,
    /// I/O port read.
    IoRead = 5,
    /// I/O port write.
    IoWrite = 6,
}

impl DataKind {
    /// Whether this is an I/O port access.
    pub fn is_io(self) -> bool {
        matches!(self, DataKind::IoRead | DataKind::IoWrite)
    }

    /// Whether this is a memory write or write-back.
    pub fn is_write(self) -> bool {
        matches!(self, DataKind::Write | DataKind::Writeback)
    }
}

/// One bus cycle, independent of the record layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BusOp {
    /// An instruction fetch of `len` bytes from byte address `addr`.
    Fetch {
        /// First requested byte.
        addr: u32,
        /// Bytes requested.
        len: u8,
    },
    /// A data or I/O access of `len` bytes at byte address (or port) `addr`.
    Data {
        /// Which access.
        kind: DataKind,
        /// First requested byte, or the port.
        addr: u32,
        /// Bytes requested.
        len: u8,
    },
    /// An interrupt acknowledge cycle.
    IntAck,
    /// A special bus cycle.
    Special(SpecialCycle),
    /// A cycle with no architectural meaning (p2 deferred reply, central agent response, ...).
    Other,
}

const CODE_BASE: u32 = 0x0010_0000;
const FUNC_SIZE: u32 = 0x400;
const FUNCS: u64 = 64;
const HANDLER_BASE: u32 = 0x0000_9000;
const DATA_BASE: u32 = 0x0040_0000;
const PAGES: usize = 16;
const PORTS: [u32; 4] = [0x20, 0x60, 0x3d4, 0x3d5];

/// A synthetic whole-system workload seen from the bus: sequential fetch runs, loops, nested
/// calls (sometimes recursing deeper than 64), interrupts with handlers, data accesses with page
/// reuse, port I/O and a few special cycles (HLT woken by an interrupt).
#[derive(Debug)]
pub struct Machine {
    rng: GenRng,
    pc: u32,
    func_end: u32,
    stack: Vec<(u32, u32)>,
    loop_at: Option<(u32, u32, u32)>,
    recurse: u32,
    handler: Option<(u32, u32, u32)>,
    pages: [u32; PAGES],
    queue: std::collections::VecDeque<BusOp>,
}

impl Machine {
    /// A machine seeded with `seed`.
    pub fn new(seed: u64) -> Machine {
        let mut rng = GenRng::new(seed);
        let mut pages = [0; PAGES];
        for p in &mut pages {
            *p = DATA_BASE + (rng.below(1024) as u32) * 0x1000;
        }
        let mut m = Machine {
            rng,
            pc: 0,
            func_end: 0,
            stack: Vec::new(),
            loop_at: None,
            recurse: 0,
            handler: None,
            pages,
            queue: Default::default(),
        };
        m.enter_function(0);
        m
    }

    fn enter_function(&mut self, f: u64) {
        let base = CODE_BASE + f as u32 * FUNC_SIZE;
        self.pc = base + self.rng.below(16) as u32;
        self.func_end = base + FUNC_SIZE - 0x40;
        self.loop_at = None;
    }

    fn call(&mut self, f: u64) {
        self.stack.push((self.pc, self.func_end));
        self.enter_function(f);
    }

    fn ret(&mut self) {
        match self.stack.pop() {
            Some((pc, end)) => {
                self.pc = pc;
                self.func_end = end;
                self.loop_at = None;
            }
            None => {
                let f = self.rng.below(FUNCS);
                self.enter_function(f);
            }
        }
    }

    /// Calls in progress (the nesting depth of the code fetched last).
    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// The next bus cycle.
    pub fn next_op(&mut self) -> BusOp {
        if let Some(op) = self.queue.pop_front() {
            return op;
        }
        let roll = self.rng.below(1000);
        match roll {
            0..=599 => self.fetch(),
            600..=939 => self.data(),
            940..=954 => {
                let port = PORTS[self.rng.below(PORTS.len() as u64) as usize];
                let kind = if self.rng.chance(50) {
                    DataKind::IoRead
                } else {
                    DataKind::IoWrite
                };
                BusOp::Data {
                    kind,
                    addr: port,
                    len: 1,
                }
            }
            955..=962 if self.handler.is_none() => self.interrupt(false),
            963..=964 if self.handler.is_none() => self.interrupt(true),
            965 => BusOp::Special(if self.rng.chance(50) {
                SpecialCycle::FlushAck
            } else {
                SpecialCycle::WritebackInvalidate
            }),
            _ => self.fetch(),
        }
    }

    /// An interrupt (after a HLT when `halt`): two INTA cycles, then the handler's fetches.
    fn interrupt(&mut self, halt: bool) -> BusOp {
        let vector = 0x20 + self.rng.below(16) as u32;
        let entry = HANDLER_BASE + vector * 0x100;
        self.handler = Some((self.pc, self.func_end, 2 + self.rng.below(12) as u32));
        self.pc = entry;
        self.func_end = entry + 0xc0;
        self.loop_at = None;
        self.queue.push_back(BusOp::IntAck);
        if halt {
            self.queue.push_front(BusOp::IntAck);
            BusOp::Special(SpecialCycle::Halt)
        } else {
            BusOp::IntAck
        }
    }

    fn data(&mut self) -> BusOp {
        if self.rng.chance(2) {
            let i = self.rng.below(PAGES as u64) as usize;
            self.pages[i] = DATA_BASE + (self.rng.below(1024) as u32) * 0x1000;
        }
        // Locality: the first pages of the working set are the hot ones.
        let i = (self.rng.below(PAGES as u64) * self.rng.below(PAGES as u64) / PAGES as u64) as usize;
        let len = 1u8 << self.rng.below(4);
        let addr = self.pages[i] + (self.rng.below(4096 / u64::from(len)) as u32) * u32::from(len);
        let kind = match self.rng.below(100) {
            0..=49 => DataKind::Read,
            50..=54 => DataKind::ReadInvalidate,
            55..=95 => DataKind::Write,
            _ => DataKind::Writeback,
        };
        let len = if kind == DataKind::Writeback { 8 } else { len };
        let addr = if kind == DataKind::Writeback {
            addr & !7
        } else {
            addr
        };
        BusOp::Data { kind, addr, len }
    }

    fn fetch(&mut self) -> BusOp {
        let addr = self.pc;
        let len = 8 - (addr & 7) as u8;
        self.pc = addr + u32::from(len);
        self.after_fetch();
        BusOp::Fetch { addr, len }
    }

    /// Control flow after a fetched quantum.
    fn after_fetch(&mut self) {
        if let Some((pc, end, left)) = self.handler {
            if left == 0 {
                self.handler = None;
                self.pc = pc;
                self.func_end = end;
            } else {
                self.handler = Some((pc, end, left - 1));
            }
            return;
        }
        if self.recurse > 0 && self.rng.chance(50) {
            self.recurse -= 1;
            let f = u64::from((self.func_end - CODE_BASE) / FUNC_SIZE);
            self.call(f);
            return;
        }
        if let Some((start, end, iters)) = self.loop_at {
            if self.pc >= end {
                if iters > 0 {
                    self.pc = start;
                    self.loop_at = Some((start, end, iters - 1));
                } else {
                    self.loop_at = None;
                }
                return;
            }
        }
        let roll = self.rng.below(100);
        if self.pc >= self.func_end || (roll < 6 && !self.stack.is_empty()) {
            self.ret();
        } else if roll < 12 && self.stack.len() < 40 {
            let f = self.rng.below(FUNCS);
            self.call(f);
        } else if roll < 13 && self.stack.len() < 8 {
            // Recursion: this function calls itself 65..96 deep.
            self.recurse = 65 + self.rng.below(32) as u32;
        } else if roll < 20 && self.loop_at.is_none() {
            let start = self.pc;
            let end = start + 8 * (2 + self.rng.below(8) as u32);
            self.loop_at = Some((start, end, 1 + self.rng.below(8) as u32));
        }
    }
}
