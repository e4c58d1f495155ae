//! A byte-at-a-time reference model of the output unit, written from pt-output.md §6.5 and §7,
//! and the comparison of a run through it with a run through `OutputUnit` (`run_both`). Shared by
//! `tests/output_props.rs` (random cases from proptest) and the `output_unit` fuzz target (cases
//! from fuzzer bytes), each including this file with `#[path]`.

use ptemu::output::{TopaEntry, MAX_INDEX};
use ptemu::regs::msr::*;
use ptemu::regs::{CpuProfile, Errata, RtitCtl};
use ptemu::{EventKind, OutputUnit, PhysMemory, Rule, SparseMemory};
use std::collections::BTreeMap;

/// `a == b`, or an error naming both (and the context given).
macro_rules! check_eq {
    ($a:expr, $b:expr $(,)?) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{} = {:?}, the model has {:?}", stringify!($a), a, b));
        }
    }};
    ($a:expr, $b:expr, $($ctx:tt)+) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{} = {:?}, the model has {:?} ({})", stringify!($a), a, b, format!($($ctx)+)));
        }
    }};
}

/// Stream byte `i`: a pattern whose bytes differ from their neighbours.
pub fn stream_byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b1) >> 13) as u8 ^ (i as u8)
}

/// `len` stream bytes starting at stream offset `from`.
pub fn stream(from: u64, len: usize) -> Vec<u8> {
    (from..from + len as u64).map(stream_byte).collect()
}

/// What a case does after the enable.
#[derive(Debug, Clone)]
pub enum Op {
    Write(usize),
    Toggle,
}

// ---- the reference model --------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct Ev(EventKind, u64, Option<u64>, Option<u32>, &'static str);

/// Byte-at-a-time model of the output unit. Memory is a map of bytes; ToPA entries are read from
/// the map of table entries the test placed.
struct Reference {
    cpu: CpuProfile,
    entries: BTreeMap<u64, u64>,
    mem: BTreeMap<u64, u8>,
    // MSR images
    base: u64,
    ptrs: u64,
    stopped: bool,
    error: bool,
    pmi: bool,
    // internal state while output is on: (table, index, offset) or single-range offset
    on: bool,
    topa: bool,
    table: u64,
    index: u64,
    offset: u64,
    early_at: Option<u64>,
    pmi_done: bool,
    written: u64,
    lost: u64,
    events: Vec<Ev>,
    // laps and overwrites (spec/output.md "Laps and overwrites"): bytes stored over a byte already
    // in `mem`; the (region, next address) of the visit in progress; the region of the first
    // overwrite, entering which again is a lap
    overwritten: u64,
    laps: u64,
    visit: Option<(u64, u64)>,
    lap_mark: Option<u64>,
}

fn rule_of(cpu: &CpuProfile, table: u64, index: u64, raw: u64) -> Option<&'static str> {
    let e = TopaEntry::from(raw);
    let size = 4096u64 << ((raw >> 6) & 0xf);
    let base = raw & !0xfff;
    if raw & (1 << 1 | 1 << 3 | 1 << 5 | 3 << 10) != 0 {
        return Some("E1a");
    }
    if raw >> cpu.maxphyaddr != 0 {
        return Some("T7");
    }
    if e.end() && (e.int() || e.stop()) {
        return Some("T5");
    }
    if e.end() && index == 0 {
        return Some("T6");
    }
    if !e.end() && !base.is_multiple_of(size) {
        return Some("T4");
    }
    if cpu.single_entry_topa() && !(index == 0 || (index == 1 && e.end() && base == table)) {
        return Some("T8");
    }
    None
}

impl Reference {
    fn new(cpu: CpuProfile, entries: BTreeMap<u64, u64>) -> Self {
        Reference {
            cpu,
            entries,
            mem: BTreeMap::new(),
            base: 0,
            ptrs: 0x7f,
            stopped: false,
            error: false,
            pmi: false,
            on: false,
            topa: false,
            table: 0,
            index: 0,
            offset: 0,
            early_at: None,
            pmi_done: false,
            overwritten: 0,
            laps: 0,
            visit: None,
            lap_mark: None,
            written: 0,
            lost: 0,
            events: vec![],
        }
    }

    fn entry(&self, table: u64, index: u64) -> u64 {
        *self.entries.get(&(table + 8 * index)).unwrap_or(&0)
    }

    fn ev(&mut self, k: EventKind, t: Option<u64>, i: Option<u64>, r: &'static str) {
        self.events.push(Ev(k, self.written, t, i.map(|i| i as u32), r));
    }

    fn error(&mut self, t: Option<u64>, i: Option<u64>, r: &'static str, point: bool) {
        self.error = true;
        self.on = false;
        if let (true, Some(t), Some(i)) = (point, t, i) {
            self.base = t;
            self.ptrs = 0x7f | i << 7;
        }
        self.ev(EventKind::Error, t, i, r);
    }

    fn cur(&self) -> u64 {
        self.entry(self.table, self.index)
    }

    /// Makes (table, index) current; returns false after raising an error.
    fn load(&mut self, table: u64, index: u64, offset: u64, point: bool) -> bool {
        let raw = self.entry(table, index);
        if let Some(r) = rule_of(&self.cpu, table, index, raw) {
            self.error(Some(table), Some(index), r, point);
            return false;
        }
        let (mut t, mut i, mut off, mut raw) = (table, index, offset, raw);
        if raw & 1 == 1 {
            t = raw & !0xfff;
            i = 0;
            off = 0;
            raw = self.entry(t, 0);
            if let Some(r) = rule_of(&self.cpu, t, 0, raw) {
                self.error(Some(t), Some(0), r, point);
                return false;
            }
        }
        (self.table, self.index, self.offset) = (t, i, off);
        let size = 4096u64 << ((raw >> 6) & 0xf);
        let margin = u64::from(self.cpu.early_pmi_margin);
        self.pmi_done = false;
        self.early_at = (self.cpu.single_entry_topa() && raw & 4 != 0 && margin > 0)
            .then(|| size.saturating_sub(margin).max(off + 1).min(size))
            .filter(|&t| t < size);
        true
    }

    fn enable(&mut self, ctl: RtitCtl) {
        if self.stopped || self.error {
            return;
        }
        self.on = true;
        self.topa = ctl.topa();
        if self.topa {
            if self.base & 0xfff != 0 {
                self.error(None, None, "T3", false);
                return;
            }
            let (index, offset) = ((self.ptrs >> 7) & 0x1ff_ffff, self.ptrs >> 32);
            if !self.load(self.base, index, offset, false) {
                return;
            }
            let size = 4096u64 << ((self.cur() >> 6) & 0xf);
            if self.offset >= size {
                self.error(Some(self.table), Some(self.index), "E1c", false);
            }
        } else {
            let mask = (self.ptrs & 0xffff_ffff) | 0x7f;
            let off = self.ptrs >> 32;
            let rule = if (mask + 1) & mask != 0 {
                Some("R4a")
            } else if self.base & mask != 0 {
                Some("R4b")
            } else if off > mask {
                Some("R4c")
            } else {
                None
            };
            if let Some(r) = rule {
                self.error(None, None, r, false);
                return;
            }
            self.offset = off;
            if self.cpu.errata.contains(Errata::TGL052) && mask > 0xfff {
                self.ev(EventKind::Erratum, None, None, "TGL052");
            }
        }
    }

    fn disable(&mut self) {
        if self.on {
            if self.topa {
                self.base = self.table;
                self.ptrs = 0x7f | self.index << 7 | self.offset << 32;
            } else {
                self.ptrs = (self.ptrs & 0xffff_ffff) | self.offset << 32;
            }
        }
        self.on = false;
    }

    fn byte(&mut self, b: u8) {
        if !self.on {
            self.lost += 1;
            return;
        }
        if !self.topa {
            let mask = (self.ptrs & 0xffff_ffff) | 0x7f;
            let alias = self.cpu.errata.contains(Errata::TGL052) && mask > 0xfff;
            let at = if alias { self.offset & 0xfff } else { self.offset };
            self.store(self.base & !mask, (self.base & !mask) + at, b);
            self.offset += 1;
            if self.offset == mask + 1 {
                self.offset = 0;
                self.ev(EventKind::Wrap, None, None, "R3");
            }
            return;
        }
        let raw = self.cur();
        let size = 4096u64 << ((raw >> 6) & 0xf);
        self.store(raw & !0xfff, (raw & !0xfff) + self.offset, b);
        self.offset += 1;
        let (t, i) = (Some(self.table), Some(self.index));
        if self.early_at == Some(self.offset) {
            self.pmi_done = true;
            self.pmi = true;
            self.ev(EventKind::Pmi, t, i, "P4");
        }
        if self.offset < size {
            return;
        }
        let int_due = raw & 4 != 0 && !self.pmi_done;
        if raw & 16 != 0 {
            self.stopped = true;
            self.on = false;
            self.base = self.table;
            self.ptrs = 0x7f | self.index << 7 | size << 32;
            self.ev(EventKind::Stopped, t, i, "S1");
            if int_due {
                self.pmi = true;
                self.ev(EventKind::Pmi, t, i, "S5");
            }
            return;
        }
        if int_due {
            self.pmi = true;
            self.ev(EventKind::Pmi, t, i, "P1");
        }
        let next = if self.index == u64::from(MAX_INDEX) {
            self.ev(EventKind::Wrap, t, Some(0), "W5");
            0
        } else {
            self.index + 1
        };
        self.load(self.table, next, 0, true);
    }

    /// Stores one stream byte of the region based at `region`, counting overwrites and laps.
    fn store(&mut self, region: u64, pa: u64, b: u8) {
        if self.visit != Some((region, pa)) && self.lap_mark == Some(region) {
            self.laps += 1;
        }
        if self.mem.insert(pa, b).is_some() {
            self.overwritten += 1;
            if self.lap_mark.is_none() {
                self.lap_mark = Some(region);
                self.laps += 1;
            }
        }
        self.visit = Some((region, pa + 1));
        self.written += 1;
    }

    fn status(&self) -> u64 {
        let mut s = (self.on as u64) << 2 | (self.error as u64) << 4 | (self.stopped as u64) << 5;
        if self.cpu.leaf14_0.ebx & 2 != 0 {
            s |= (self.written & 0x1_ffff) << 32;
        }
        s
    }
}

// ---- both, compared ------------------------------------------------------------------------

/// Runs `ops` through the output unit and through the reference from the same start, and compares
/// events, byte counts, MSRs and every byte of memory; the first difference is the error.
pub fn run_both(
    cpu: CpuProfile,
    entries: BTreeMap<u64, u64>,
    base: u64,
    ptrs: u64,
    ctl: RtitCtl,
    ops: &[Op],
) -> Result<(), String> {
    let mut mem = SparseMemory::new();
    for (&pa, &v) in &entries {
        mem.write_u64(pa, v).unwrap();
    }
    let mut unit = OutputUnit::new(cpu.clone());
    let mut model = Reference::new(cpu, entries.clone());
    unit.wrmsr(&mut mem, IA32_RTIT_OUTPUT_BASE, base).unwrap();
    unit.wrmsr(&mut mem, IA32_RTIT_OUTPUT_MASK_PTRS, ptrs).unwrap();
    (model.base, model.ptrs) = (base, ptrs | 0x7f);
    unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits()).unwrap();
    model.enable(ctl);
    let mut sent = 0u64;
    for op in ops {
        match *op {
            Op::Write(n) => {
                unit.write(&mut mem, &stream(sent, n)).unwrap();
                for i in sent..sent + n as u64 {
                    model.byte(stream_byte(i));
                }
                sent += n as u64;
            }
            Op::Toggle => {
                unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.with_trace_en(false).bits())
                    .unwrap();
                model.disable();
                unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.bits()).unwrap();
                model.enable(ctl);
            }
        }
    }
    unit.wrmsr(&mut mem, IA32_RTIT_CTL, ctl.with_trace_en(false).bits())
        .unwrap();
    model.disable();

    let got: Vec<Ev> = unit
        .events()
        .iter()
        .map(|e| {
            Ev(
                e.kind,
                e.stream_offset,
                e.table,
                e.index,
                e.rule.map_or("-", Rule::id),
            )
        })
        .collect();
    check_eq!(&got, &model.events);
    let s = unit.stats();
    check_eq!(
        (s.bytes_in, s.bytes_written, s.bytes_lost),
        (sent, model.written, model.lost)
    );
    check_eq!((s.bytes_overwritten, s.laps), (model.overwritten, model.laps));
    check_eq!(unit.rdmsr(IA32_RTIT_OUTPUT_BASE).unwrap(), model.base);
    check_eq!(unit.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS).unwrap(), model.ptrs);
    check_eq!(unit.rdmsr(IA32_RTIT_STATUS).unwrap(), model.status());
    check_eq!(
        unit.rdmsr(IA32_PERF_GLOBAL_STATUS).unwrap() >> 55,
        model.pmi as u64
    );
    // Every byte the model wrote is in memory, and nothing else was written.
    for (&pa, &b) in &model.mem {
        let mut got = [0u8];
        mem.read(pa, &mut got).unwrap();
        check_eq!(got[0], b, "byte at {:#x}", pa);
    }
    let mut pages: Vec<u64> = model
        .mem
        .keys()
        .chain(entries.keys())
        .map(|pa| pa >> 12)
        .collect();
    pages.dedup();
    pages.sort_unstable();
    pages.dedup();
    check_eq!(mem.page_count(), pages.len(), "no stray writes");
    Ok(())
}
