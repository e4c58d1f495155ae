//! The mapping of gem5 elastic traces to tracer events (`spec/mapping.md`, section gem5).
//!
//! Dep trace: consecutive records with the same pc are one instruction. When the next pc is
//! known the instruction is emitted: one `Ptwrite` per load/store at its IP, then a `Retire` (no
//! memory access) or, when the next pc is not 1..=15 bytes ahead, an `IndirectJump` to it.
//! `comp_delay` ticks become `Cycles` at [`CORE_HZ`]. A fetch trace alone maps the same way, one
//! "instruction" per fetch pc, ticks by difference; given next to a dep trace it is only read
//! and counted.

use super::ahead::{Ahead, Slim};
use super::messages::RecordType;
use super::read::{Reader, TraceKind};
use crate::packet::PtwSize;
use crate::sources::error::{ErrorKind, Position, Result, SourceError};
use crate::sources::{EventSource, Input, ReadOptions, SourceStats, StartState};
use crate::tracer::{Event, ExecMode};

/// The core clock ticks are converted at: 2 GHz, gem5's default `--cpu-clock`.
pub const CORE_HZ: u64 = 2_000_000_000;
/// The length given to an instruction whose length cannot be inferred (the next pc is not
/// 1..=15 bytes ahead, or there is none): 4 bytes.
pub const DEFAULT_LEN: u8 = 4;
/// CR3 of the traced address space (gem5 records none): a fixed 4 KiB-aligned value.
pub const START_CR3: u64 = 0x0010_0000;

const APPROXIMATIONS: [&str; 4] = [
    "Branch kinds are unknown without the binary: every pc discontinuity becomes an indirect jump (TIP), no TNT, and not-taken branches are invisible.",
    "COMP nodes without dependents are filtered out of the dep trace, so short forward paths are hidden and inferred instruction lengths can span several instructions.",
    "The fetch trace is block-granular and includes wrong-path fetches; mapped alone, each fetch pc stands for the instructions of its block.",
    "Ticks become core cycles at a fixed 2 GHz: comp_delay (dep trace) or tick differences (fetch trace), remainders carried.",
];

/// Indices into the counts, in report order.
const NAMES: [&str; 9] = [
    "comp",
    "load",
    "store",
    "invalid",
    "fetch",
    "instructions",
    "discontinuities",
    "filtered_weight",
    "no_pc",
];
const COMP: usize = 0;
const LOAD: usize = 1;
const STORE: usize = 2;
const INVALID: usize = 3;
const FETCH: usize = 4;
const INSTRUCTIONS: usize = 5;
const DISCONTINUITIES: usize = 6;
const FILTERED: usize = 7;
const NO_PC: usize = 8;

/// The main trace's records: read here, or decoded ahead by workers (SIM20).
#[derive(Debug)]
enum Main {
    Here(Box<Reader>),
    Ahead(Box<Ahead>),
}

impl Main {
    #[inline]
    fn next_record(&mut self) -> Result<Option<Slim>> {
        match self {
            Main::Here(r) => Ok(r.next_record()?.map(|r| Slim::of(&r))),
            Main::Ahead(a) => a.next_record(),
        }
    }

    fn records(&self) -> u64 {
        match self {
            Main::Here(r) => r.records(),
            Main::Ahead(a) => a.records(),
        }
    }
}

/// A gem5 dep trace (or fetch trace) as tracer events.
#[derive(Debug)]
pub struct Gem5Events {
    main: Main,
    companion: Option<Reader>,
    options: ReadOptions,
    tick_freq: u64,
    /// Ticks × CORE_HZ not yet converted to whole cycles.
    carry: u128,
    last_tick: Option<u64>,
    /// The pending instruction: IP, memory payloads, and (fetch mode) its fetch block.
    ip: Option<u64>,
    payloads: Vec<u64>,
    block: u64,
    skipped: u64,
    counts: [u64; NAMES.len()],
    finished: bool,
}

impl Gem5Events {
    /// Maps `input` (a dep trace, or a fetch trace alone); `fetch` is the other trace of a pair,
    /// read next to the dep trace (counted, not mapped). The pair is told apart by the headers,
    /// so it may be given either way round (a fetch trace as `input`, the dep trace as `fetch`);
    /// two traces of one kind are an error naming the second file.
    pub fn new(input: Input, fetch: Option<Input>, options: ReadOptions) -> Result<Self> {
        Self::open(input, fetch, options, None)
    }

    /// [`Gem5Events::new`] with the main trace decoded ahead of the mapping, split across
    /// `workers` threads of their own that take turns reading blocks of messages and decode them
    /// side by side (SIM20): the same events, errors and counts.
    pub fn decoded_ahead(
        input: Input,
        fetch: Option<Input>,
        options: ReadOptions,
        workers: usize,
    ) -> Result<Self> {
        Self::open(input, fetch, options, Some(workers))
    }

    /// Opens the pair; `ahead`: the workers to decode the main trace on, if any.
    fn open(input: Input, fetch: Option<Input>, options: ReadOptions, ahead: Option<usize>) -> Result<Self> {
        let mut main = Reader::new(input)?;
        let mut companion = fetch.map(Reader::new).transpose()?;
        if let Some(other) = companion.as_mut() {
            match (main.kind(), other.kind()) {
                (TraceKind::Dep, TraceKind::Fetch) => {}
                (TraceKind::Fetch, TraceKind::Dep) => std::mem::swap(&mut main, other),
                (kind, _) => {
                    let (name, what) = match kind {
                        TraceKind::Dep => ("an elastic data trace", "InstDepRecordHeader"),
                        TraceKind::Fetch => ("an instruction-fetch trace", "PacketHeader"),
                    };
                    return Err(SourceError::at(
                        other.name(),
                        Position::Byte(4),
                        ErrorKind::BadMagic,
                        format!(
                            "its header ({what}) makes it {name}, like {}: a gem5 pair is one \
                             elastic data trace and one instruction-fetch trace",
                            main.name()
                        ),
                    ));
                }
            }
        }
        let tick_freq = main.header().tick_freq().max(1);
        let main = Box::new(main);
        let main = match ahead {
            // No thread to be had: read here.
            Some(workers) => Ahead::spawn(main, workers, options.lenient)
                .map_or_else(Main::Here, |a| Main::Ahead(Box::new(a))),
            None => Main::Here(main),
        };
        Ok(Gem5Events {
            tick_freq,
            main,
            companion,
            options,
            carry: 0,
            last_tick: None,
            ip: None,
            payloads: Vec::new(),
            block: 0,
            skipped: 0,
            counts: [0; NAMES.len()],
            finished: false,
        })
    }

    /// Core cycles for `ticks` more ticks.
    fn cycles(&mut self, ticks: u64, out: &mut Vec<Event>) {
        self.carry += u128::from(ticks) * u128::from(CORE_HZ);
        let n = self.carry / u128::from(self.tick_freq);
        self.carry %= u128::from(self.tick_freq);
        if n > 0 {
            out.push(Event::Cycles(u64::try_from(n).unwrap_or(u64::MAX)));
        }
    }

    /// Emits the pending instruction, given where execution goes next (`None`: the end).
    /// `sequential` overrides the 1..=15-byte rule (fetch mode: the next fetch continues the block).
    fn finish_instruction(&mut self, next: Option<u64>, sequential: Option<bool>, out: &mut Vec<Event>) {
        let Some(ip) = self.ip.take() else { return };
        self.counts[INSTRUCTIONS] += 1;
        let distance = next.map(|n| n.wrapping_sub(ip));
        let near = distance.is_some_and(|d| (1..=15).contains(&d));
        let jump = next.is_some() && !sequential.unwrap_or(near);
        let len = if near {
            distance.unwrap_or(0) as u8
        } else {
            DEFAULT_LEN
        };
        for &payload in &self.payloads {
            out.push(Event::Ptwrite {
                ip,
                len,
                payload,
                size: PtwSize::Eight,
            });
        }
        match next {
            Some(target) if jump => {
                self.counts[DISCONTINUITIES] += 1;
                out.push(Event::IndirectJump { ip, target });
            }
            _ if self.payloads.is_empty() => out.push(Event::Retire { ip, len }),
            _ => {}
        }
        self.payloads.clear();
    }

    /// One dep record's or fetch packet's events.
    fn map(&mut self, out: &mut Vec<Event>) -> Result<bool> {
        let record = match self.main.next_record()? {
            Some(r) => r,
            None => return Ok(false),
        };
        match record {
            Slim::Dep {
                kind,
                pc,
                comp_delay: delay,
                weight,
                addr: payload,
            } => {
                self.counts[match kind {
                    RecordType::Comp => COMP,
                    RecordType::Load => LOAD,
                    RecordType::Store => STORE,
                    RecordType::Invalid => INVALID,
                }] += 1;
                self.counts[FILTERED] += u64::from(weight.unwrap_or(0));
                match pc {
                    Some(pc) if Some(pc) != self.ip => {
                        self.finish_instruction(Some(pc), None, out);
                        self.ip = Some(pc);
                    }
                    Some(_) => {}
                    None => self.counts[NO_PC] += 1,
                }
                self.cycles(delay, out);
                if matches!(kind, RecordType::Load | RecordType::Store) && self.ip.is_some() {
                    self.payloads.extend(payload);
                }
            }
            Slim::Fetch { tick, pc, addr } => {
                self.counts[FETCH] += 1;
                let elapsed = self.last_tick.map_or(0, |t| tick.saturating_sub(t));
                self.last_tick = Some(tick);
                match pc {
                    Some(pc) if Some(pc) != self.ip => {
                        let block = addr & !63;
                        let follows = block == self.block || block == self.block.wrapping_add(64);
                        let ahead = self.ip.is_some_and(|ip| pc > ip);
                        self.finish_instruction(Some(pc), Some(follows && ahead), out);
                        self.ip = Some(pc);
                        self.block = block;
                    }
                    Some(_) => {}
                    None => self.counts[NO_PC] += 1,
                }
                self.cycles(elapsed, out);
            }
        }
        Ok(true)
    }

    /// Reads the companion fetch trace to its end, counting it.
    fn drain_companion(&mut self) -> Result<()> {
        while let Some(reader) = self.companion.as_mut() {
            match reader.next_record() {
                Ok(Some(_)) => self.counts[FETCH] += 1,
                Ok(None) => break,
                Err(e) => self.options.skip(e, &mut self.skipped)?,
            }
        }
        Ok(())
    }
}

impl EventSource for Gem5Events {
    fn next_events(&mut self, out: &mut Vec<Event>) -> Result<bool> {
        if self.finished {
            return Ok(false);
        }
        loop {
            match self.map(out) {
                Ok(true) => return Ok(true),
                Ok(false) => break,
                Err(e) => self.options.skip(e, &mut self.skipped)?,
            }
        }
        self.finish_instruction(None, None, out);
        self.drain_companion()?;
        self.finished = true;
        Ok(true)
    }

    fn start_state(&self) -> StartState {
        StartState {
            mode: ExecMode::Bits64,
            cpl: 3,
            cr3: START_CR3,
        }
    }

    fn stats(&self) -> SourceStats {
        SourceStats {
            format: "gem5",
            records: self.main.records() + self.companion.as_ref().map_or(0, Reader::records),
            skipped: self.skipped,
            counts: NAMES.iter().copied().zip(self.counts).collect(),
            approximations: APPROXIMATIONS.to_vec(),
        }
    }
}
