//! BYU V1.0 records as tracer events (spec/mapping.md, "BYU V1.0").

use super::bus::{BusOp, DataKind};
use super::flow::{Flow, FlowCounts};
use super::read::Reader;
use super::record::{CycleType, Record};
use crate::sources::error::{ErrorKind, Result};
use crate::sources::fixed::BATCH;
use crate::sources::{EventSource, Input, ReadOptions, SourceStats, StartState};
use crate::tracer::{Event, ExecMode};

/// Where the BYU mappings are approximate (both formats).
pub const APPROXIMATIONS: [&str; 6] = [
    "IPs are physical addresses (linear = physical assumed); no paging or segment information exists",
    "a fetch unit is one pseudo-instruction: a sequential fetch is a Retire covering the fetched bytes, \
     a redirected one ends in an indirect jump (TIP); branch directions and direct branches are unknowable",
    "prefetch is not execution: fetches past a taken branch and refetches of cached code distort the flow",
    "data and I/O addresses go to PTWRITE payloads at the IP of the fetch unit in progress, not of the \
     accessing instruction",
    "an INTA becomes an interrupt with vector 0x20 (the real vector was on the data bus) from the end \
     of the last fetch unit to the next fetch; a return to the interrupted IP becomes an IRET",
    "HLT is a C1 sleep until the next bus cycle; the other special cycles have no PT equivalent",
];

/// Names of the per-cycle-type counts, by type value.
const TYPE_NAMES: [&str; 16] = [
    "type_0", "type_1", "type_2", "type_3", "type_4", "type_5", "type_6", "type_7", "type_8", "type_9",
    "type_10", "type_11", "type_12", "type_13", "type_14", "type_15",
];

/// The counts shared by both BYU formats, in report order.
pub(crate) fn flow_counts(c: &FlowCounts, invalid: u64) -> Vec<(&'static str, u64)> {
    vec![
        ("fetch", c.fetch),
        ("data_read", c.data_read),
        ("data_write", c.data_write),
        ("io", c.io),
        ("int_ack", c.int_ack),
        ("special", c.special),
        ("halt", c.halt),
        ("other", c.other),
        ("invalid", invalid),
        ("discontinuities", c.discontinuities),
        ("interrupts", c.interrupts),
        ("irets", c.irets),
    ]
}

/// The start state of a BYU trace: 32-bit protected mode, CPL 0 (whole-system trace), CR3 0.
pub(crate) const START: StartState = StartState {
    mode: ExecMode::Bits32,
    cpl: 0,
    cr3: 0,
};

/// The bus operation of a valid record; `None` for an invalid cycle type.
#[inline(always)]
pub fn bus_op(r: &Record) -> Option<BusOp> {
    let data = |kind| BusOp::Data {
        kind,
        addr: r.byte_addr(),
        len: r.byte_len(),
    };
    Some(match r.cycle_type() {
        CycleType::IntAck => BusOp::IntAck,
        CycleType::Special => BusOp::Special(r.special()?),
        CycleType::IoRead => data(DataKind::IoRead),
        CycleType::IoWrite => data(DataKind::IoWrite),
        CycleType::Fetch | CycleType::FetchNc => BusOp::Fetch {
            addr: r.byte_addr(),
            len: r.byte_len(),
        },
        CycleType::DataRead | CycleType::DataReadNc => data(DataKind::Read),
        CycleType::Writeback => data(DataKind::Writeback),
        CycleType::DataWrite => data(DataKind::Write),
        _ => return None,
    })
}

/// Bytes per fetch unit: the 8-byte bus quantum of a complete (L1-disabled) trace.
pub const QUANTUM: u64 = 8;

/// A 6-byte BYU trace as tracer events: fetch units of 8 bytes (the bus quantum).
#[derive(Debug)]
pub struct ByuEvents {
    reader: Reader,
    /// The records of the last [`Reader::read_batch`].
    batch: Vec<Record>,
    options: ReadOptions,
    flow: Flow,
    by_type: [u64; 16],
    invalid: u64,
    skipped: u64,
    done: bool,
}

impl ByuEvents {
    /// The events of `input`.
    pub fn new(input: Input, options: ReadOptions) -> Result<Self> {
        Ok(ByuEvents {
            reader: Reader::new(input),
            batch: Vec::with_capacity(BATCH),
            options,
            flow: Flow::new(QUANTUM),
            by_type: [0; 16],
            invalid: 0,
            skipped: 0,
            done: false,
        })
    }
}

impl EventSource for ByuEvents {
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
        let (by_type, invalid, skipped) = (&mut self.by_type, &mut self.invalid, &mut self.skipped);
        self.flow.batch(|flow| {
            for (i, r) in batch.iter().enumerate() {
                let t = r.cycle_type();
                by_type[usize::from(t.value())] += 1;
                // No cycles elapse in this format; a HLT still wakes (on a valid record only).
                // Mapping the op straight after decoding it lets the compiler fuse the two
                // matches into one jump.
                if t.is_valid() {
                    flow.elapse(0, out);
                }
                match bus_op(r) {
                    Some(op) => flow.apply(op, out),
                    None => {
                        *invalid += 1;
                        let err = reader.error_back(
                            n - 1 - i,
                            ErrorKind::BadField,
                            format!(
                                "invalid cycle type {} (control byte {:#04x}); the spec defines 1, 3, 5, 7, 8, 9, 12..15",
                                t.value(),
                                r.control
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
        let mut counts = flow_counts(self.flow.counts(), self.invalid);
        counts.extend(TYPE_NAMES.iter().zip(self.by_type).map(|(&n, v)| (n, v)));
        SourceStats {
            format: "byu",
            records: self.reader.records(),
            skipped: self.skipped,
            counts,
            approximations: APPROXIMATIONS.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{byu_p2, generate, Format};

    fn trace(format: Format, records: u64) -> Input {
        let mut bytes = Vec::new();
        generate(format, records, 7, &mut bytes, None).unwrap();
        Input::from_bytes("gen.tr", bytes).unwrap()
    }

    fn all_events(src: &mut dyn EventSource) -> Vec<Event> {
        let mut v = Vec::new();
        src.for_each_event(&mut |e| v.push(*e)).unwrap();
        v
    }

    /// The hot loops elapse cycles (and wake from HLT) before asking for the bus op, only for
    /// records that have one: the validity tests must agree with `bus_op` on every value.
    #[test]
    fn validity_tests_agree_with_bus_op() {
        for control in 0..=255u8 {
            for be in [0x00, 0xfb, 0xfe, 0xff] {
                let r = Record {
                    addr: 0x1000,
                    byte_enables: be,
                    control,
                };
                assert_eq!(
                    r.cycle_type().is_valid(),
                    bus_op(&r).is_some(),
                    "control {control:#x}"
                );
            }
        }
        for value in 0..=255u8 {
            let r = byu_p2::Record {
                addr: 0x1000,
                reqtype: byu_p2::ReqType(value),
                size: 4,
                attr: 0,
                proc_id: 0,
                time: 3,
            };
            assert_eq!(
                r.reqtype.index().is_some(),
                byu_p2::bus_op(&r).is_some(),
                "reqtype {value:#x}"
            );
        }
    }

    /// A lenient run skips an unknown record between a HLT and the next fetch without waking
    /// (p2AddrTr, where the wake carries the cycles of the record that ends the halt): the
    /// events are those of the trace without it.
    #[test]
    fn a_skipped_record_after_hlt_does_not_wake() {
        let record = |reqtype, addr, time| byu_p2::Record {
            addr,
            reqtype,
            size: 32,
            attr: 0,
            proc_id: 0,
            time,
        };
        let records = |with_unknown: bool| {
            let mut w = byu_p2::Writer::new(Vec::new());
            w.write(&record(byu_p2::ReqType::FETCH, 0x1000, 1)).unwrap();
            w.write(&record(byu_p2::ReqType::HALT, 0, 1)).unwrap();
            if with_unknown {
                w.write(&record(byu_p2::ReqType(0x7f), 0x2000, 5)).unwrap();
            }
            w.write(&record(byu_p2::ReqType::FETCH, 0x1040, 7)).unwrap();
            Input::from_bytes("hlt.tr", w.into_inner()).unwrap()
        };
        let lenient = ReadOptions { lenient: true };
        let mut with = byu_p2::ByuP2Events::new(records(true), lenient).unwrap();
        let mut without = byu_p2::ByuP2Events::new(records(false), lenient).unwrap();
        let events = all_events(&mut with);
        assert_eq!(events, all_events(&mut without));
        let wake = events.iter().find(|e| matches!(e, Event::Wake { .. }));
        assert!(
            matches!(wake, Some(Event::Wake { cycles, .. }) if *cycles == byu_p2::core_cycles(7)),
            "{events:?}"
        );
        assert_eq!(with.stats().skipped, 1);
    }

    /// The batched mapping (BATCH records per call) gives what mapping the records one at a time
    /// gives, across many batch boundaries.
    #[test]
    fn batches_map_like_one_record_at_a_time() {
        let records = 10 * BATCH as u64 + 77;
        let mut reader = Reader::new(trace(Format::Byu, records));
        let (mut flow, mut expected) = (Flow::new(QUANTUM), Vec::new());
        while let Some(r) = reader.next_record().unwrap() {
            flow.op(bus_op(&r).unwrap(), 0, &mut expected);
        }
        flow.finish(&mut expected);
        let src = ByuEvents::new(trace(Format::Byu, records), ReadOptions::default());
        assert_eq!(all_events(&mut src.unwrap()), expected);

        let mut reader = byu_p2::Reader::new(trace(Format::ByuP2, records));
        let (mut flow, mut expected) = (Flow::new(byu_p2::LINE), Vec::new());
        while let Some(r) = reader.next_record().unwrap() {
            let op = byu_p2::bus_op(&r).unwrap();
            flow.op(op, byu_p2::core_cycles(r.time), &mut expected);
        }
        flow.finish(&mut expected);
        let src = byu_p2::ByuP2Events::new(trace(Format::ByuP2, records), ReadOptions::default());
        assert_eq!(all_events(&mut src.unwrap()), expected);
    }
}
