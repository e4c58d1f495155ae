//! `p2AddrTr` records as tracer events (spec/mapping.md, "BYU p2AddrTr").

use super::read::Reader;
use super::record::{Record, ReqType, TIME_SENTINEL};
use crate::sources::byu::{flow_counts, BusOp, DataKind, Flow, SpecialCycle, APPROXIMATIONS, START};
use crate::sources::error::{ErrorKind, Result};
use crate::sources::fixed::BATCH;
use crate::sources::{EventSource, Input, ReadOptions, SourceStats, StartState};
use crate::tracer::Event;

/// Core cycles per bus clock: a Pentium II at 400 MHz on its 100 MHz bus.
pub const CORE_PER_BUS_CLOCK: u64 = 4;
/// Bytes per fetch unit: the 32-byte cache line a Pentium II fills (L1 on).
pub const LINE: u64 = 32;

/// What the p2 mapping adds to the BYU approximations.
const P2_APPROXIMATIONS: [&str; 3] = [
    "time deltas are bus clocks turned into core cycles at a fixed 4:1 ratio; the 0xFFFFFFFF sentinel \
     adds no time",
    "fetch units are 32-byte cache lines: a later fetch in the line of the previous one, or the first \
     byte of the next line, is sequential; anything else is a redirect",
    "all agents (proc) go into one stream",
];

/// The bus operation of a record; `None` for an unknown request type.
#[inline(always)]
pub fn bus_op(r: &Record) -> Option<BusOp> {
    let data = |kind| BusOp::Data {
        kind,
        addr: r.addr,
        len: r.size,
    };
    Some(match r.reqtype {
        ReqType::FETCH => BusOp::Fetch {
            addr: r.addr,
            len: r.size,
        },
        ReqType::MEMREAD => data(DataKind::Read),
        ReqType::MEMREADINV => data(DataKind::ReadInvalidate),
        ReqType::MEMWRITE => data(DataKind::Write),
        ReqType::IOREAD => data(DataKind::IoRead),
        ReqType::IOWRITE => data(DataKind::IoWrite),
        ReqType::INTA => BusOp::IntAck,
        ReqType::HALT => BusOp::Special(SpecialCycle::Halt),
        ReqType::SHUTDOWN => BusOp::Special(SpecialCycle::Shutdown),
        ReqType::FLUSH => BusOp::Special(SpecialCycle::Invalidate),
        ReqType::FLUSHACK => BusOp::Special(SpecialCycle::FlushAck),
        ReqType::BRTRACEREC => BusOp::Special(SpecialCycle::BranchTrace),
        ReqType::SYNC | ReqType::STOPCLKACK | ReqType::SMIACK => {
            BusOp::Special(SpecialCycle::Other(r.reqtype.0))
        }
        ReqType::DEFERREPLY | ReqType::CNTRLAGNTRES => BusOp::Other,
        _ => return None,
    })
}

/// The core cycles a `time` field stands for.
pub fn core_cycles(time: u32) -> u64 {
    if time == TIME_SENTINEL {
        0
    } else {
        u64::from(time) * CORE_PER_BUS_CLOCK
    }
}

/// A `p2AddrTr` trace as tracer events.
#[derive(Debug)]
pub struct ByuP2Events {
    reader: Reader,
    /// The records of the last [`Reader::read_batch`].
    batch: Vec<Record>,
    options: ReadOptions,
    flow: Flow,
    by_type: [u64; ReqType::DEFINED.len()],
    unknown: u64,
    sentinels: u64,
    first_proc: Option<u8>,
    other_proc: u64,
    skipped: u64,
    done: bool,
}

impl ByuP2Events {
    /// The events of `input`.
    pub fn new(input: Input, options: ReadOptions) -> Result<Self> {
        Ok(ByuP2Events {
            reader: Reader::new(input),
            batch: Vec::with_capacity(BATCH),
            options,
            flow: Flow::new(LINE),
            by_type: [0; ReqType::DEFINED.len()],
            unknown: 0,
            sentinels: 0,
            first_proc: None,
            other_proc: 0,
            skipped: 0,
            done: false,
        })
    }
}

impl EventSource for ByuP2Events {
    fn next_events(&mut self, out: &mut Vec<Event>) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        if self.reader.read_batch(&mut self.batch, BATCH)? == 0 {
            self.flow.finish(out);
            self.done = true;
            return Ok(true);
        }
        let n = self.batch.len();
        let (batch, reader, options) = (&self.batch, &mut self.reader, &self.options);
        let (by_type, unknown, skipped) = (&mut self.by_type, &mut self.unknown, &mut self.skipped);
        let (sentinels, first_proc, other_proc) =
            (&mut self.sentinels, &mut self.first_proc, &mut self.other_proc);
        self.flow.batch(|flow| {
            for (i, r) in batch.iter().enumerate() {
                if r.time == TIME_SENTINEL {
                    *sentinels += 1;
                }
                if *first_proc.get_or_insert(r.proc_id) != r.proc_id {
                    *other_proc += 1;
                }
                match r.reqtype.index() {
                    Some(i) => {
                        by_type[i] += 1;
                        flow.elapse(core_cycles(r.time), out);
                    }
                    None => *unknown += 1,
                }
                // Mapping the op straight after decoding it lets the compiler fuse the two matches.
                match bus_op(r) {
                    Some(op) => flow.apply(op, out),
                    None => {
                        let err = reader.error_back(
                            n - 1 - i,
                            ErrorKind::BadField,
                            format!(
                                "unknown reqtype {:#04x} (byutr.h defines 00..03, 10, 11, 20..23, 31..37)",
                                r.reqtype.0
                            ),
                        );
                        options.skip(err, skipped)?;
                    }
                }
            }
            Ok(true)
        })
    }

    fn start_state(&self) -> StartState {
        START
    }

    fn stats(&self) -> SourceStats {
        let mut counts = flow_counts(self.flow.counts(), self.unknown);
        counts.push(("time_sentinel", self.sentinels));
        counts.push(("other_proc", self.other_proc));
        counts.extend(ReqType::DEFINED.iter().zip(self.by_type).map(|(d, v)| (d.1, v)));
        let mut approximations = APPROXIMATIONS.to_vec();
        approximations.extend(P2_APPROXIMATIONS);
        SourceStats {
            format: "byu-p2",
            records: self.reader.records(),
            skipped: self.skipped,
            counts,
            approximations,
        }
    }
}
