//! Synthetic elastic traces for `ptemu gen --format gem5`: a seeded random program (functions
//! with loops, calls, a recursive function that nests deeper than 64, forward indirect jumps,
//! loads and stores on a few hot pages plus the stack) run until `records` dep records exist.
//! x86-like: several micro-op records may share a PC; COMP-only instructions are filtered now
//! and then (the next record carries the weight), as gem5's probe does.

use super::messages::{InstDepRecord, InstDepRecordHeader, Packet, PacketHeader, RecordType};
use super::read::Header;
use super::write::Writer;
use crate::sources::rng::GenRng;
use std::io::{self, Write};

/// Where the synthetic code lives, and the span of each function.
const CODE_BASE: u64 = 0x40_1000;
const FUNC_SPAN: u64 = 0x400;
const FUNCS: usize = 48;
/// Functions at or above this index call nothing.
const LEAVES: usize = 24;
/// The function that calls itself.
const RECURSIVE: usize = 20;
/// Top of the stack (grows down); hot data pages start at `DATA_BASE`.
const STACK_TOP: u64 = 0x7fff_ffff_e000;
const DATA_BASE: u64 = 0x60_0000;
/// Picoseconds per core cycle at 2 GHz, and gem5's tick rate.
const CYCLE_TICKS: u64 = 500;
const TICK_FREQ: u64 = 1_000_000_000_000;
/// The probe name gem5 gives the files.
const OBJ_ID: &str = "system.cpu.traceListener";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    Load,
    Store,
    Loop(usize),
    Indirect,
    Call(usize),
    Recurse,
    Ret,
    Restart,
}

struct Func {
    pcs: Vec<u64>,
    lens: Vec<u8>,
    kinds: Vec<Kind>,
}

fn build(rng: &mut GenRng) -> Vec<Func> {
    (0..FUNCS)
        .map(|f| {
            let n = 12 + rng.below(30) as usize;
            let mut pc = CODE_BASE + f as u64 * FUNC_SPAN;
            let (mut pcs, mut lens, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..n {
                let len = [1u8, 2, 3, 3, 4, 5, 5, 7][rng.below(8) as usize];
                pcs.push(pc);
                lens.push(len);
                pc += u64::from(len);
                let r = rng.below(100);
                kinds.push(match r {
                    _ if i == n - 1 => {
                        if f == 0 {
                            Kind::Restart
                        } else {
                            Kind::Ret
                        }
                    }
                    0..25 => Kind::Load,
                    25..35 => Kind::Store,
                    35..40 if i >= 2 => Kind::Loop(i - 1 - rng.below(i.min(6) as u64) as usize),
                    40..43 if i + 3 < n => Kind::Indirect,
                    _ => Kind::Plain,
                });
            }
            if f == 0 {
                kinds[1] = Kind::Call(RECURSIVE);
                kinds[2] = Kind::Call(1);
            } else if f == RECURSIVE {
                kinds[n / 2] = Kind::Recurse;
            } else if f < LEAVES && rng.chance(60) {
                let callee = f + 1 + rng.below((FUNCS - 1 - f).min(8) as u64) as usize;
                kinds[1 + rng.below(n as u64 - 2) as usize] = Kind::Call(callee);
            }
            Func { pcs, lens, kinds }
        })
        .collect()
}

/// The physical frame of a virtual page (a fixed scramble below 4 GiB).
fn frame(vpage: u64) -> u64 {
    let mut x = vpage.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    (x & 0xf_ffff).max(0x10)
}

fn phys(v: u64) -> u64 {
    frame(v >> 12) << 12 | (v & 0xfff)
}

struct Gen<'a, 'b> {
    rng: GenRng,
    deps: Writer<&'a mut dyn Write>,
    fetch: Option<Writer<&'b mut dyn Write>>,
    rec: InstDepRecord,
    written: u64,
    limit: u64,
    seq: u64,
    tick: u64,
    filtered: u32,
    last_mem: u64,
    last_block: u64,
    hot: [u64; 8],
}

impl Gen<'_, '_> {
    fn record(&mut self, pc: u64, kind: RecordType, vaddr: u64) -> io::Result<()> {
        self.seq += 1;
        let rng = &mut self.rng;
        let r = &mut self.rec;
        r.seq_num = self.seq;
        r.r#type = kind as i32;
        r.pc = Some(pc);
        r.rob_dep.clear();
        r.reg_dep.clear();
        r.weight = (self.filtered > 0).then_some(self.filtered);
        self.filtered = 0;
        let mem = kind != RecordType::Comp;
        (r.p_addr, r.v_addr, r.size, r.flags) = if mem {
            let size = [1, 2, 4, 8, 8, 8][rng.below(6) as usize];
            let v = vaddr & !(u64::from(size) - 1);
            (Some(phys(v)), Some(v), Some(size), Some(rng.below(4) as u32))
        } else {
            (None, None, None, None)
        };
        if mem && self.last_mem != 0 && self.seq - self.last_mem < 576 {
            r.rob_dep.push(self.last_mem);
        } else if !mem && self.seq > 1 && rng.chance(10) {
            r.rob_dep.push(self.seq - 1);
        }
        for _ in 0..rng.below(3) {
            if self.seq > 1 {
                r.reg_dep.push(self.seq - 1 - rng.below((self.seq - 1).min(20)));
            }
        }
        r.comp_delay = match kind {
            RecordType::Load if rng.chance(10) => 20_000 + CYCLE_TICKS * rng.below(200),
            _ => CYCLE_TICKS * rng.below(8),
        };
        if mem {
            self.last_mem = self.seq;
        }
        self.tick += r.comp_delay + CYCLE_TICKS;
        self.written += 1;
        self.deps.write_dep(&self.rec)
    }

    fn fetch_block(&mut self, pc: u64, force: bool) -> io::Result<()> {
        let block = pc & !63;
        if block == self.last_block && !force {
            return Ok(());
        }
        self.last_block = block;
        let Some(w) = self.fetch.as_mut() else {
            return Ok(());
        };
        w.write_packet(&Packet {
            tick: self.tick,
            cmd: 1,
            addr: phys(block),
            size: 64,
            flags: Some(0x100),
            pkt_id: None,
            pc: Some(pc),
        })
    }

    fn data_addr(&mut self) -> u64 {
        let slot = self.rng.below(8) as usize;
        if self.rng.chance(8) {
            self.hot[slot] = DATA_BASE + (self.rng.below(1 << 16) << 12);
        }
        self.hot[slot] + (self.rng.below(512) << 3)
    }

    fn done(&self) -> bool {
        self.written >= self.limit
    }
}

/// Writes `records` synthetic dep records (uncompressed; wrap `out` in a gzip encoder for `.gz`)
/// and, if `fetch_out` is given, the matching fetch trace. The same seed gives the same bytes.
pub fn generate(
    records: u64,
    seed: u64,
    out: &mut dyn Write,
    fetch_out: Option<&mut dyn Write>,
) -> io::Result<()> {
    let mut rng = GenRng::new(seed);
    let program = build(&mut rng);
    let deps = Writer::new(
        out,
        &Header::Dep(InstDepRecordHeader {
            obj_id: OBJ_ID.into(),
            ver: None,
            tick_freq: TICK_FREQ,
            window_size: 576,
        }),
    )?;
    let fetch = match fetch_out {
        Some(f) => Some(Writer::new(
            f,
            &Header::Fetch(PacketHeader {
                obj_id: OBJ_ID.into(),
                ver: None,
                tick_freq: TICK_FREQ,
                id_strings: Vec::new(),
            }),
        )?),
        None => None,
    };
    let mut g = Gen {
        rng,
        deps,
        fetch,
        rec: InstDepRecord::default(),
        written: 0,
        limit: records,
        seq: 0,
        tick: 0,
        filtered: 0,
        last_mem: 0,
        last_block: u64::MAX,
        hot: std::array::from_fn(|i| DATA_BASE + ((i as u64) << 12)),
    };
    let (mut f, mut i) = (0usize, 0usize);
    let mut stack: Vec<(usize, usize)> = Vec::new();
    let (mut rec_level, mut rec_target) = (0u64, 0u64);
    while !g.done() {
        let func = &program[f];
        let (pc, len, kind) = (func.pcs[i], func.lens[i], func.kinds[i]);
        g.fetch_block(pc, false)?;
        let sp = STACK_TOP - 8 * (stack.len() as u64 + 1);
        let mut next = (f, i + 1);
        match kind {
            Kind::Plain | Kind::Loop(_) | Kind::Indirect | Kind::Restart if g.rng.chance(20) => {
                g.seq += 1;
                g.filtered += 1;
            }
            Kind::Plain | Kind::Loop(_) | Kind::Indirect | Kind::Restart => {
                g.record(pc, RecordType::Comp, 0)?
            }
            Kind::Load | Kind::Store => {
                if g.rng.chance(30) {
                    g.record(pc, RecordType::Comp, 0)?;
                }
                let (t, v) = if g.rng.chance(25) {
                    (kind, sp - 8 * g.rng.below(8))
                } else {
                    (kind, g.data_addr())
                };
                let t = if t == Kind::Load {
                    RecordType::Load
                } else {
                    RecordType::Store
                };
                if !g.done() {
                    g.record(pc, t, v)?;
                }
            }
            Kind::Call(_) | Kind::Recurse => g.record(pc, RecordType::Store, sp)?,
            Kind::Ret => g.record(pc, RecordType::Load, sp + 8)?,
        }
        match kind {
            Kind::Loop(back) if g.rng.chance(70) => next = (f, back),
            Kind::Indirect => {
                let last = func.pcs.len() - 1;
                next = (f, (i + 2 + g.rng.below(4) as usize).min(last));
            }
            Kind::Call(callee) => {
                if callee == RECURSIVE {
                    rec_target = 1 + g.rng.below(100);
                }
                stack.push((f, i + 1));
                next = (callee, 0);
            }
            Kind::Recurse if rec_level < rec_target => {
                rec_level += 1;
                stack.push((f, i + 1));
                next = (f, 0);
            }
            // Deep enough: no more recursion until the next call from outside (loops that run
            // over the recursive call again must not grow the tree).
            Kind::Recurse => rec_target = 0,
            Kind::Ret => {
                if f == RECURSIVE {
                    rec_level = rec_level.saturating_sub(1);
                }
                next = stack.pop().unwrap_or((0, 0));
            }
            Kind::Restart => next = (0, 0),
            _ => {}
        }
        let fallthrough = pc + u64::from(len);
        let target = program[next.0].pcs[next.1];
        if target != fallthrough && g.rng.chance(25) {
            // A wrong-path fetch of the fall-through block before the redirect.
            g.fetch_block(fallthrough, true)?;
        }
        (f, i) = next;
    }
    g.deps.finish()?;
    if let Some(w) = g.fetch {
        w.finish()?;
    }
    Ok(())
}
