//! The inputs of the corpus cases that need more than the generated Penn trace (spec/truth.md,
//! CORP1): the Penn trace with interrupts, and a hand-made BYU bus trace of a small 32-bit
//! program with interrupts, IRETs and HLTs, with its code image.

use crate::image::{CodeImage, GAP_BYTE};
use crate::sources::byu::{CycleType, Record, SpecialCycle};
use crate::sources::rng::GenRng;

/// The generated Penn trace `penn` with one macro-op in every `every` or so left out, at places
/// drawn from `seed`: only a non-branch instruction whose neighbours have other PCs, so each
/// place is a control-flow break that the Penn reader with `--lenient` maps to an asynchronous
/// transfer (FUP at the left-out instruction, TIP to the next one: spec/mapping.md, Penn) and
/// never to a REP iteration. Returns the trace and how many macro-ops were left out.
pub fn penn_with_interrupts(penn: &[u8], seed: u64, every: u64) -> (Vec<u8>, u64) {
    // Macro-ops as (first byte, end byte, PC, is a branch): a line with uop counter 1 starts one.
    let mut ops: Vec<(usize, usize, &[u8], bool)> = Vec::new();
    let mut at = 0;
    for line in penn.split_inclusive(|&b| b == b'\n') {
        let mut fields = line.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty());
        let (counter, pc) = (fields.next().unwrap_or(b""), fields.next().unwrap_or(b""));
        let branch = fields.nth(4).is_some_and(|f| f != b"-");
        match ops.last_mut() {
            Some(op) if counter != b"1" => {
                op.1 = at + line.len();
                op.3 |= branch;
            }
            _ => ops.push((at, at + line.len(), pc, branch)),
        }
        at += line.len();
    }
    let mut rng = GenRng::new(seed ^ 0x1e4e_0b5e);
    let mut out = Vec::with_capacity(penn.len());
    let (mut next_drop, mut dropped, mut from) = (every / 2 + rng.below(every), 0u64, 0usize);
    for i in 1..ops.len().saturating_sub(1) {
        let (start, end, pc, branch) = ops[i];
        if (i as u64) < next_drop
            || branch
            || ops[i - 1].2 == pc
            || ops[i + 1].2 == pc
            || ops[i - 1].2 == ops[i + 1].2
        {
            continue;
        }
        out.extend_from_slice(&penn[from..start]);
        from = end;
        dropped += 1;
        next_drop = i as u64 + every / 2 + rng.below(every);
    }
    out.extend_from_slice(&penn[from..]);
    (out, dropped)
}

/// Where the BYU program's loop is.
pub const BYU_MAIN: u64 = 0x1000;
/// Where its interrupt handler is.
pub const BYU_HANDLER: u64 = 0x9000;

/// An 8-byte NOP in 32-bit code (`nop dword [eax+eax*1+0]`): one whole 8-byte fetch unit, the
/// pseudo-instruction the BYU mapping makes of a unit the flow runs through.
const NOP8: [u8; 8] = [0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00];
/// `jmp eax`: an indirect jump, as the BYU mapping reports a redirect (TIP).
const JMP_EAX: [u8; 2] = [0xff, 0xe0];
/// `iretd`: the return from the handler (a far transfer, TIP).
const IRET: [u8; 1] = [0xcf];

/// A BYU V1.0 bus trace of a small program and its code image (32-bit code at CPL 0, as the BYU
/// mapping reads every trace: spec/mapping.md). The loop at [`BYU_MAIN`] runs two 8-byte units
/// and a `jmp eax` back, `loops` times; at places drawn from `seed` an interrupt (two INTA
/// cycles) enters the handler at [`BYU_HANDLER`] (one unit, then `iretd` back to the
/// interrupted IP), and now and then the loop halts (a HLT special cycle: PWRE, EXSTOP and,
/// when the interrupt wakes it, PWRX). Every fetch is a whole aligned unit, so each unit is one
/// instruction of the image.
pub fn byu_program(loops: u64, seed: u64) -> (Vec<u8>, CodeImage) {
    let mut rng = GenRng::new(seed ^ 0x0b40_9a11);
    let fetch = |a: u64| Record::new(a as u32, 0x00, CycleType::FetchNc);
    let mut recs: Vec<Record> = Vec::new();
    let interrupt = |recs: &mut Vec<Record>| {
        recs.push(Record::new(0, 0x00, CycleType::IntAck));
        recs.push(Record::new(0, 0x00, CycleType::IntAck));
        recs.push(fetch(BYU_HANDLER));
        recs.push(fetch(BYU_HANDLER + 8));
    };
    for _ in 0..loops {
        recs.push(fetch(BYU_MAIN));
        if rng.chance(4) {
            // HLT at the end of the first unit; the interrupt wakes it and returns there.
            recs.push(Record::new(
                0,
                SpecialCycle::Halt.byte_enables(),
                CycleType::Special,
            ));
            interrupt(&mut recs);
        }
        recs.push(fetch(BYU_MAIN + 8));
        if rng.chance(10) {
            // An interrupt after the second unit, returning to the jump.
            interrupt(&mut recs);
        }
        recs.push(fetch(BYU_MAIN + 16));
    }
    recs.push(fetch(BYU_MAIN));
    let bytes = recs.iter().flat_map(|r| r.to_bytes()).collect();
    let mut code = vec![GAP_BYTE; (BYU_HANDLER + 16 - BYU_MAIN) as usize];
    let mut put = |at: u64, insn: &[u8]| {
        let i = (at - BYU_MAIN) as usize;
        code[i..i + insn.len()].copy_from_slice(insn);
    };
    put(BYU_MAIN, &NOP8);
    put(BYU_MAIN + 8, &NOP8);
    put(BYU_MAIN + 16, &JMP_EAX);
    put(BYU_HANDLER, &NOP8);
    put(BYU_HANDLER + 8, &IRET);
    (
        bytes,
        CodeImage {
            base: BYU_MAIN,
            bytes: code,
        },
    )
}

/// `ptwrite eax` in 32-bit code (`F3 0F AE /4`): the Kaplan handler's first instruction, 4
/// bytes as the Kaplan mapping has it.
const PTWRITE_EAX: [u8; 4] = [0xf3, 0x0f, 0xae, 0xe0];

/// A Kaplan page-fault trace of `faults` faults of a one-page memory over 32 pages drawn from
/// `seed`, and its code image (the handler at [`crate::sources::kaplan::HANDLER_IP`]: `ptwrite
/// eax` of the evicted page, then `iretd`; the faulting instruction never retires, so the image
/// needs no code there). Every fault evicts the page before, so the handler is always those two
/// instructions: the trace starts with a record that fills the memory without a fault of its
/// own, which the Kaplan reader finds inconsistent (it evicts a page never loaded) and, read with
/// `--lenient`, skips, keeping its effect on the resident set (spec/mapping.md, Kaplan). A
/// fault without an eviction would send the IRET from the handler's first byte: two
/// instructions at one IP, which no code image holds.
pub fn kaplan_faults(faults: u64, seed: u64) -> (Vec<u8>, CodeImage) {
    use crate::sources::kaplan::{HANDLER_IP, PAGE_SIZE};
    let hex4 = |v: u16| format!("{v:04x}").into_bytes();
    let mut out = Vec::new();
    let mut record = |tag: u8, page: u16, evict: u8, evicted: u16| {
        for (t, p) in [(tag, page), (evict, evicted)] {
            out.push(t);
            out.extend(hex4(p));
            out.extend(std::iter::repeat_n(p as u8, PAGE_SIZE));
        }
    };
    record(b'C', 1, b'W', 2);
    let mut rng = GenRng::new(seed ^ 0x004a_91a4);
    let (mut resident, mut seen) = (1u16, std::collections::BTreeSet::from([1u16]));
    for _ in 0..faults {
        let page = loop {
            let p = 1 + rng.below(32) as u16;
            if p != resident {
                break p;
            }
        };
        let tag = if seen.insert(page) { b'C' } else { b'F' };
        let evict = if rng.chance(40) { b'W' } else { b'R' };
        record(tag, page, evict, resident);
        resident = page;
    }
    let mut code = PTWRITE_EAX.to_vec();
    code.extend(IRET);
    (
        out,
        CodeImage {
            base: HANDLER_IP,
            bytes: code,
        },
    )
}
