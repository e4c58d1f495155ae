//! What the plugin tells of a block in QEMU's system emulator where it read the registers
//! (spec/qemu.md QE24, QE25, QE26): the block's real start, CS and CR3, and the transfer it
//! starts with, as a registers record (tag 9) in its vCPU's chunk, right after the block's
//! index; and [`Replay`], which follows each vCPU's blocks again from the stream, by the same
//! [`crate::flow`] rules the plugin derived them with, to every block execution's real start.

use crate::flow::{BlockFlow, Insn, Tracker};

/// The transfer a block starts with, where the registers were read (QE25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transfer {
    /// The previous block's end leads here (a fall-through, a near branch or RET), or the
    /// block was read for another reason (a CR3 write before it, `check=1`).
    Next,
    /// A far transfer by the previous block's last instruction (SYSCALL, SYSRET, IRET, a far
    /// branch).
    Far,
    /// INT n, INT3, INTO or INT1 at `from`.
    SoftInt {
        /// The vector.
        vector: u8,
        /// The INT's address.
        from: u64,
    },
    /// An exception or interrupt, from the frame's RIP `from`; `cut`: the previous block
    /// stopped there, before its end: by this exception (a fault: the instruction at `from`
    /// started and did not retire), or, for an interrupt (which QEMU takes between blocks
    /// only), where QEMU had ended it first ([`is_exception`]).
    Async {
        /// The vector.
        vector: u8,
        /// The frame's RIP.
        from: u64,
        /// The previous block stopped at `from`.
        cut: bool,
    },
    /// The previous block stopped before its instruction at `at` (this block's start), with no
    /// transfer: QEMU ended it early, after a store into the page of the code it ran.
    Split {
        /// Where the previous block stopped and this one starts.
        at: u64,
    },
    /// An IDT entry point whose frame fits no instruction the previous block could have
    /// stopped at or gone to.
    Unexplained {
        /// The vector.
        vector: u8,
    },
}

/// The most vCPUs a machine's stream may name (the plugin's own bound).
pub const MAX_VCPUS: usize = 64;

/// Whether `vector` is an exception's (0-31 but NMI's, 2), which an instruction raises, not an
/// interrupt's.
pub fn is_exception(vector: u8) -> bool {
    vector < 32 && vector != 2
}

/// A registers record: what the plugin read in a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registers {
    /// The block's real start.
    pub rip: u64,
    /// CS's selector (CPL: its low two bits).
    pub cs: u64,
    /// CR3.
    pub cr3: u64,
    /// EFER.LMA was seen set on this vCPU (the transfer is told in long mode only).
    pub long_mode: bool,
    /// The transfer the block starts with.
    pub transfer: Transfer,
}

impl Registers {
    /// The record's fields after its tag: rip, cs, cr3, the transfer's kind (0 next, 1 far,
    /// 2 software interrupt, 3 exception or interrupt, 4 the same stopping its block part-way,
    /// 5 unexplained, 6 a split; + 8 in long mode), its vector and its address (0 where it has
    /// none).
    pub(crate) fn fields(&self) -> [u64; 6] {
        let (kind, vector, from) = match self.transfer {
            Transfer::Next => (0, 0, 0),
            Transfer::Far => (1, 0, 0),
            Transfer::SoftInt { vector, from } => (2, vector, from),
            Transfer::Async { vector, from, cut } => (3 + u64::from(cut), vector, from),
            Transfer::Unexplained { vector } => (5, vector, 0),
            Transfer::Split { at } => (6, 0, at),
        };
        let mode = if self.long_mode { 8 } else { 0 };
        [self.rip, self.cs, self.cr3, kind | mode, vector.into(), from]
    }

    /// The record of its fields (as [`Registers::fields`] gives them), or why they are none.
    pub(crate) fn from_fields(f: [u64; 6]) -> Result<Registers, String> {
        let [rip, cs, cr3, kind, vector, from] = f;
        let v = u8::try_from(vector).map_err(|_| format!("vector {vector}"))?;
        let transfer = match kind & 7 {
            0 => Transfer::Next,
            1 => Transfer::Far,
            2 => Transfer::SoftInt { vector: v, from },
            3 | 4 => Transfer::Async {
                vector: v,
                from,
                cut: kind & 7 == 4,
            },
            5 => Transfer::Unexplained { vector: v },
            6 => Transfer::Split { at: from },
            k => return Err(format!("a transfer of kind {k}")),
        };
        if kind > 15 {
            return Err(format!("a transfer of kind {kind}"));
        }
        Ok(Registers {
            rip,
            cs,
            cr3,
            long_mode: kind & 8 != 0,
            transfer,
        })
    }
}

/// One block execution, as [`Replay`] gives it: the vCPU, the block's index, its real start,
/// and how many of its instructions ran (all but where a fault stopped it: then the faulting
/// one is the first that did not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Execution {
    /// The vCPU (from 0).
    pub vcpu: u32,
    /// The block's index.
    pub block: u32,
    /// Its real start.
    pub at: u64,
    /// Its instructions.
    pub len: u32,
    /// The instructions of it that retired.
    pub retired: u32,
    /// A fault stopped it at its instruction `retired`, which started and did not retire. Where
    /// `retired` is below `len` without it, QEMU ended the block there before its end: a
    /// [`Transfer::Split`], or an interrupt that came after QEMU had ended it.
    pub faulted: bool,
    /// What the plugin read in it, if it read the registers there: the transfer it starts with.
    pub regs: Option<Registers>,
}

/// One vCPU's replay state.
#[derive(Debug, Default)]
struct VcpuWalk {
    tracker: Tracker,
    /// Where this vCPU last ran each block (0: never), by index.
    seen: Vec<u64>,
    /// The execution before the current one, held back until the current one's registers (if
    /// any) tell whether a fault stopped it.
    held: Option<Execution>,
    /// The block running now and its start (0: waiting for its registers record).
    current: Option<(u32, u64)>,
    /// Its registers record, if one came.
    regs: Option<Registers>,
}

/// Follows each vCPU's blocks from the stream's records: feed it every block record
/// ([`Replay::block`]), the vCPU of each chunk ([`Replay::vcpu`]), every executed block index
/// ([`Replay::exec`]) and every registers record ([`Replay::registers`]); each block execution
/// comes out through the callback two blocks behind (whether a fault stopped it is told by
/// the next block's registers), and the last ones at [`Replay::finish`].
#[derive(Debug, Default)]
pub struct Replay {
    blocks: Vec<BlockFlow>,
    vcpus: Vec<VcpuWalk>,
    at: usize,
}

impl Replay {
    /// A new replay.
    pub fn new() -> Self {
        Self::default()
    }

    /// A block record: its reported address, each instruction's offset and the code.
    pub fn block(&mut self, vaddr: u64, offsets: &[u32], code: &[u8]) {
        let insns: Vec<Insn<'_>> = offsets
            .iter()
            .enumerate()
            .map(|(k, &o)| {
                let end = offsets.get(k + 1).map_or(code.len(), |&n| n as usize);
                let bytes = &code[o as usize..end];
                Insn {
                    ip: vaddr.wrapping_add(u64::from(o)),
                    size: bytes.len() as u64,
                    bytes,
                }
            })
            .collect();
        self.blocks.push(BlockFlow::new(vaddr, &insns));
    }

    /// The records after this are vCPU `vcpu`'s. `Err`: a vCPU above [`MAX_VCPUS`] (the
    /// plugin keeps no more apart), whose state the reader would have to hold.
    pub fn vcpu(&mut self, vcpu: u32) -> Result<(), String> {
        if vcpu as usize >= MAX_VCPUS {
            return Err(format!("vCPU {vcpu}: the plugin keeps at most {MAX_VCPUS} apart"));
        }
        let k = vcpu as usize;
        if self.vcpus.len() <= k {
            self.vcpus.resize_with(k + 1, VcpuWalk::default);
        }
        self.at = k;
        Ok(())
    }

    /// Block `index` (below the block records fed so far) executed on the current vCPU.
    /// `Err`: the block before it on this vCPU has no start (its registers record is missing).
    pub fn exec(&mut self, index: u32, out: &mut impl FnMut(Execution)) -> Result<(), String> {
        let vcpu = self.at as u32;
        let blocks = &self.blocks;
        let Some(w) = self.vcpus.get_mut(self.at) else {
            return Err("an executed block before any vCPU's chunk".into());
        };
        let Some(tb) = blocks.get(index as usize) else {
            return Err(format!(
                "vCPU {vcpu}: block {index} executed before its block record"
            ));
        };
        if let Some(e) = w.held.take() {
            out(e);
        }
        if let Some((b, at)) = w.current {
            if at == 0 {
                return Err(format!(
                    "vCPU {vcpu}: block {b} ran with no start: its registers record is missing"
                ));
            }
            w.held = Some(whole(vcpu, b, at, w.regs.take(), blocks));
        }
        if w.seen.len() < blocks.len() {
            w.seen.resize(blocks.len(), 0);
        }
        let prev = w.current.map(|(b, _)| &blocks[b as usize]);
        let step = w.tracker.exec(prev, tb, w.seen[index as usize]);
        let at = step.at.unwrap_or(0);
        if at != 0 {
            w.seen[index as usize] = at;
        }
        w.current = Some((index, at));
        Ok(())
    }

    /// A registers record for the block the current vCPU executed last. A fault or split it
    /// names stops the block before, which was held back for this.
    pub fn registers(&mut self, r: &Registers) -> Result<(), String> {
        let vcpu = self.at as u32;
        let blocks = &self.blocks;
        let Some(w) = self.vcpus.get_mut(self.at) else {
            return Err("a registers record before any vCPU's chunk".into());
        };
        let Some((b, _)) = w.current else {
            return Err(format!("vCPU {vcpu}: a registers record before any block"));
        };
        w.tracker.read(r.rip);
        w.seen[b as usize] = r.rip;
        w.current = Some((b, r.rip));
        w.regs = Some(*r);
        let stopped = match r.transfer {
            Transfer::Async {
                from,
                cut: true,
                vector,
            } => Some((from, is_exception(vector))),
            Transfer::Split { at } => Some((at, false)),
            _ => None,
        };
        if let Some((from, faulted)) = stopped {
            let Some(h) = w.held.as_mut() else {
                return Err(format!(
                    "vCPU {vcpu}: a block stopped part-way with no block before it"
                ));
            };
            let starts = &blocks[h.block as usize].starts;
            let off = from.wrapping_sub(h.at);
            let k = starts.iter().position(|&s| u64::from(s) == off).ok_or_else(|| {
                format!(
                    "vCPU {vcpu}: a block stopped at {from:#x}, no instruction of the block at {:#x}",
                    h.at
                )
            })?;
            h.retired = k as u32;
            h.faulted = faulted;
        }
        Ok(())
    }

    /// The last executions of every vCPU.
    pub fn finish(&mut self, out: &mut impl FnMut(Execution)) {
        for (k, w) in self.vcpus.iter_mut().enumerate() {
            if let Some(e) = w.held.take() {
                out(e);
            }
            if let Some((b, at)) = w.current.take() {
                if at != 0 {
                    out(whole(k as u32, b, at, w.regs.take(), &self.blocks));
                }
            }
        }
    }

    /// The blocks fed so far.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Block `index`'s flow, if fed.
    pub fn flow(&self, index: u32) -> Option<&BlockFlow> {
        self.blocks.get(index as usize)
    }

    /// The block the current vCPU is running (its index), if any.
    pub fn current(&self) -> Option<u32> {
        self.vcpus.get(self.at)?.current.map(|(b, _)| b)
    }
}

fn whole(vcpu: u32, block: u32, at: u64, regs: Option<Registers>, blocks: &[BlockFlow]) -> Execution {
    Execution {
        regs,
        vcpu,
        block,
        at,
        len: blocks[block as usize].starts.len() as u32,
        retired: blocks[block as usize].starts.len() as u32,
        faulted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QE26: a stream that names what it never sent is an error, never a panic: an execution
    /// before any vCPU, a block never recorded, a vCPU above the bound, a registers record
    /// before any block; a fault then shortens the held execution.
    #[test]
    fn qe26_the_replay_refuses_what_the_stream_never_sent() {
        let mut r = Replay::new();
        let mut out = |_e: Execution| {};
        assert!(r.exec(0, &mut out).is_err());
        assert!(r.vcpu(MAX_VCPUS as u32).is_err());
        r.vcpu(0).unwrap();
        assert!(r.exec(0, &mut out).is_err());
        let regs = Registers {
            rip: 0x1000,
            cs: 0x10,
            cr3: 0,
            long_mode: true,
            transfer: Transfer::Next,
        };
        assert!(r.registers(&regs).is_err());
        // Two blocks: mov rax, [rbx]; jmp rax, then the #PF handler at 0x9000.
        r.block(0x1000, &[0, 3], &[0x48, 0x8b, 0x03, 0xff, 0xe0]);
        r.block(0x9000, &[0], &[0x90]);
        let mut got = Vec::new();
        r.exec(0, &mut |e| got.push(e)).unwrap();
        r.registers(&regs).unwrap();
        r.exec(1, &mut |e| got.push(e)).unwrap();
        let fault = Registers {
            rip: 0x9000,
            transfer: Transfer::Async {
                vector: 14,
                from: 0x1000,
                cut: true,
            },
            ..regs
        };
        r.registers(&fault).unwrap();
        r.finish(&mut |e| got.push(e));
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].at, got[0].retired, got[0].faulted), (0x1000, 0, true));
        assert_eq!((got[1].at, got[1].retired, got[1].faulted), (0x9000, 1, false));
        let bad = Registers {
            transfer: Transfer::Split { at: 0x1001 },
            ..fault
        };
        r.vcpu(1).unwrap();
        r.exec(0, &mut |_| {}).unwrap();
        r.registers(&regs).unwrap();
        r.exec(1, &mut |_| {}).unwrap();
        assert!(
            r.registers(&bad).is_err(),
            "a split at no instruction of the block"
        );
    }
}
