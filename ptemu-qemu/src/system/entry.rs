//! Which transfer a block begins with (QE25), where the flow of the block before it does not
//! say: an exception or interrupt (the block is the entry point the IDT names for a vector, and
//! the frame the CPU pushed on the stack names where it came from), a software interrupt, a far
//! transfer by the previous block's last instruction (SYSCALL, SYSRET, IRET, a far branch), or a
//! near indirect branch's target.

use ptemu_wire::flow::{successors, BlockFlow, Exit, Last};

/// The vectors whose exceptions push an error code (SDM Vol. 3A 6.15): #DF, #TS, #NP, #SS,
/// #GP, #PF, #AC, #CP, #VC, #SX. The frame's RIP is then 8 bytes above the stack pointer.
pub(super) fn has_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10 | 11 | 12 | 13 | 14 | 17 | 21 | 29 | 30)
}

/// The entry points of an IDT: each present gate's handler and its vector, by address.
#[derive(Default)]
pub(super) struct Handlers {
    by_address: Vec<(u64, u8)>,
}

impl Handlers {
    /// The handlers of a 64-bit IDT's bytes (16 bytes a gate, vector 0 first; a gate whose
    /// present bit is clear has none).
    pub fn parse(table: &[u8]) -> Handlers {
        let mut by_address: Vec<(u64, u8)> = table
            .chunks_exact(16)
            .take(256)
            .enumerate()
            .filter(|(_, g)| g[5] & 0x80 != 0)
            .map(|(v, g)| {
                let word =
                    |k: usize, n: usize| g[k..k + n].iter().rev().fold(0u64, |a, &b| a << 8 | u64::from(b));
                (word(0, 2) | word(6, 2) << 16 | word(8, 4) << 32, v as u8)
            })
            .collect();
        by_address.sort_unstable();
        Handlers { by_address }
    }

    /// The vector whose entry point is `rip` (the lowest, if several share it).
    pub fn vector(&self, rip: u64) -> Option<u8> {
        let k = self.by_address.partition_point(|&(a, _)| a < rip);
        self.by_address
            .get(k)
            .filter(|&&(a, _)| a == rip)
            .map(|&(_, v)| v)
    }
}

/// The IDT base and limit of a LIDT operand in 64-bit mode (2 bytes of limit, 8 of base).
pub(super) fn idt_descriptor(b: &[u8; 10]) -> (u64, u16) {
    let limit = u16::from_le_bytes([b[0], b[1]]);
    let base = u64::from_le_bytes(b[2..10].try_into().expect("8 bytes"));
    (base, limit)
}

/// The transfer a block starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// The block the previous one's end leads to: a fall-through, a near branch (direct or
    /// indirect) or a RET.
    Next,
    /// A far transfer by the previous block's last instruction (SYSCALL, SYSRET, IRET, a far
    /// branch).
    Far(Last),
    /// INT n, INT3, INTO or INT1 at `from`, the previous block's last instruction.
    SoftInt { vector: u8, from: u64 },
    /// An exception or an interrupt, from the frame's RIP: the faulting instruction, or the
    /// one the interrupt came before. `cut`: that is inside the previous block, which stopped
    /// there (a fault: QEMU takes interrupts between blocks only).
    Async { vector: u8, from: u64, cut: bool },
    /// The previous block stopped before its instruction at `at`, the block's start, with no
    /// transfer: QEMU ended it early (after a store into the page of the code it runs, which it
    /// translates again), and the instructions from `at` on run in this block.
    Split { at: u64 },
    /// The entry point of `vector`, with a frame that names no instruction the previous block
    /// could have stopped or gone to.
    Unexplained { vector: u8, frame_rip: Option<u64> },
}

/// The transfer a block at `rip` starts with, after `prev` ran at `prev_at`: `vector` is the
/// vector whose entry point the block's start is, if any, and `frame_rip` the RIP of the frame
/// on the stack there (read only for an entry point); `reached`: the previous block reached its
/// last instruction (an inline store before it says). A start inside the previous block, at one
/// of its instructions, where that block did not reach its last, is a split.
pub(super) fn classify(
    prev: &BlockFlow,
    prev_at: u64,
    rip: u64,
    reached: bool,
    vector: Option<u8>,
    frame_rip: Option<u64>,
) -> Entry {
    let end = prev_at.wrapping_add(prev.len);
    let Some(vector) = vector else {
        let inside = rip.wrapping_sub(prev_at);
        if !reached && inside > 0 && inside < prev.len && prev.starts.contains(&(inside as u16)) {
            return Entry::Split { at: rip };
        }
        return match prev.last {
            Last::Syscall | Last::Sysret | Last::Iret | Last::Far => Entry::Far(prev.last),
            _ => Entry::Next,
        };
    };
    let Some(f) = frame_rip else {
        return Entry::Unexplained {
            vector,
            frame_rip: None,
        };
    };
    if prev.last == Last::SoftInt(vector) && f == end {
        return Entry::SoftInt {
            vector,
            from: prev_at.wrapping_add(prev.last_start()),
        };
    }
    let goes = prev.exit == Exit::Unknown || successors(prev, prev_at).contains(&f);
    if reached && goes && f != 0 {
        // The block ran to its end and went to `f`, where the event came.
        return Entry::Async {
            vector,
            from: f,
            cut: false,
        };
    }
    let inside = f.wrapping_sub(prev_at);
    let at_insn = inside < prev.len && prev.starts.contains(&(inside as u16));
    // Not reached: the block stopped at `f`, by this exception, or (an interrupt, which QEMU
    // takes between blocks only) where QEMU had ended it. Reached: only its last instruction
    // can have faulted.
    if at_insn && (!reached || inside == prev.last_start()) {
        Entry::Async {
            vector,
            from: f,
            cut: true,
        }
    } else {
        Entry::Unexplained {
            vector,
            frame_rip: Some(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(handler: u64) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0..2].copy_from_slice(&(handler as u16).to_le_bytes());
        g[2..4].copy_from_slice(&0x10u16.to_le_bytes());
        g[5] = 0x8e;
        g[6..8].copy_from_slice(&((handler >> 16) as u16).to_le_bytes());
        g[8..12].copy_from_slice(&((handler >> 32) as u32).to_le_bytes());
        g
    }

    /// QE25: an IDT's gates name each vector's entry point; a gate not present names none.
    #[test]
    fn qe25_the_idt_names_each_vectors_entry_point() {
        let mut table = Vec::new();
        table.extend(gate(0xffff_ffff_8100_0000));
        table.extend([0u8; 16]);
        table.extend(gate(0xffff_ffff_8100_0040));
        let h = Handlers::parse(&table);
        assert_eq!(h.vector(0xffff_ffff_8100_0000), Some(0));
        assert_eq!(h.vector(0xffff_ffff_8100_0040), Some(2));
        assert_eq!(h.vector(0xffff_ffff_8100_0020), None);
        let mut d = [0u8; 10];
        d[0..2].copy_from_slice(&0xfffu16.to_le_bytes());
        d[2..].copy_from_slice(&0xfffffe0000000000u64.to_le_bytes());
        assert_eq!(idt_descriptor(&d), (0xfffffe0000000000, 0xfff));
        assert!(has_error_code(14) && !has_error_code(32) && !has_error_code(3));
    }

    fn block(at: u64, code: &[&[u8]]) -> BlockFlow {
        BlockFlow::of_instructions(at, code)
    }

    /// QE25: the frame tells a fault inside the block before (cut short) from an interrupt
    /// between blocks, and an INT from an exception; a frame that fits neither is unexplained.
    #[test]
    fn qe25_the_frame_names_where_an_entry_came_from() {
        // mov rax, [rbx] (3 bytes); add rax, 1 (4 bytes); jne +0x10 (2 bytes), at 0x7000.
        let b = block(
            0x7000,
            &[&[0x48, 0x8b, 0x03], &[0x48, 0x83, 0xc0, 0x01], &[0x75, 0x10]],
        );
        let c = |f| {
            classify(
                &b,
                0x7000,
                0xffff_ffff_8100_0000,
                f == 0x7009 || f == 0x7019,
                Some(14),
                Some(f),
            )
        };
        assert_eq!(
            c(0x7003),
            Entry::Async {
                vector: 14,
                from: 0x7003,
                cut: true
            }
        );
        assert_eq!(
            c(0x7009),
            Entry::Async {
                vector: 14,
                from: 0x7009,
                cut: false
            },
            "the fall-through"
        );
        assert_eq!(
            c(0x7019),
            Entry::Async {
                vector: 14,
                from: 0x7019,
                cut: false
            },
            "the branch's target"
        );
        assert!(matches!(c(0x7004), Entry::Unexplained { .. }), "mid-instruction");
        assert!(matches!(c(0x9000), Entry::Unexplained { .. }), "not a successor");
        // nop; jne back to the nop: a timer interrupt after the block ran whole and looped.
        let looping = block(0x7000, &[&[0x90], &[0x75, 0xfd]]);
        assert_eq!(
            classify(
                &looping,
                0x7000,
                0xffff_ffff_8100_0000,
                true,
                Some(0xec),
                Some(0x7000)
            ),
            Entry::Async {
                vector: 0xec,
                from: 0x7000,
                cut: false
            },
            "the loop's start is a successor"
        );
        assert_eq!(
            classify(
                &looping,
                0x7000,
                0xffff_ffff_8100_0000,
                false,
                Some(0xec),
                Some(0x7001)
            ),
            Entry::Async {
                vector: 0xec,
                from: 0x7001,
                cut: true
            },
            "QEMU ended the block after the nop, then the interrupt came"
        );
        let int3 = block(0x7000, &[&[0x90], &[0xcc]]);
        assert_eq!(
            classify(&int3, 0x7000, 0xffff_ffff_8100_0000, true, Some(3), Some(0x7002)),
            Entry::SoftInt {
                vector: 3,
                from: 0x7001
            }
        );
        let syscall = block(0x7000, &[&[0x0f, 0x05]]);
        assert_eq!(
            classify(&syscall, 0x7000, 0xffff_ffff_8120_0000, true, None, None),
            Entry::Far(Last::Syscall)
        );
        assert_eq!(
            classify(&b, 0x7000, 0x7007, false, None, None),
            Entry::Split { at: 0x7007 },
            "stopped after its second instruction, no transfer"
        );
        assert_eq!(classify(&b, 0x7000, 0x7009, true, None, None), Entry::Next);
        let jmp = block(0x7000, &[&[0xff, 0xe0]]);
        let looped = block(0x7000, &[&[0x90], &[0xff, 0xe0]]);
        assert_eq!(
            classify(&looped, 0x7000, 0x7001, true, None, None),
            Entry::Next,
            "an indirect jump to its own block's second instruction"
        );
        assert_eq!(
            classify(&looped, 0x7000, 0x7001, false, None, None),
            Entry::Split { at: 0x7001 },
            "stopped before its jump"
        );
        assert_eq!(classify(&jmp, 0x7000, 0x1234, true, None, None), Entry::Next);
        assert_eq!(
            classify(&jmp, 0x7000, 0xffff_ffff_8100_0000, true, Some(32), Some(0x5555)),
            Entry::Async {
                vector: 32,
                from: 0x5555,
                cut: false
            },
            "after an indirect branch the frame names its target"
        );
    }
}
