//! Synthetic `p2AddrTr` traces from the shared BYU bus [`Machine`], with time deltas.

use super::record::{Record, ReqType, TIME_SENTINEL};
use crate::sources::byu::{BusOp, DataKind, Machine, SpecialCycle};
use crate::sources::rng::GenRng;
use std::io::{self, Write};

/// The request type of a bus operation.
pub fn reqtype_of(op: BusOp) -> ReqType {
    match op {
        BusOp::Fetch { .. } => ReqType::FETCH,
        BusOp::Data { kind, .. } => match kind {
            DataKind::Read => ReqType::MEMREAD,
            DataKind::ReadInvalidate => ReqType::MEMREADINV,
            DataKind::Write | DataKind::Writeback => ReqType::MEMWRITE,
            DataKind::IoRead => ReqType::IOREAD,
            DataKind::IoWrite => ReqType::IOWRITE,
        },
        BusOp::IntAck => ReqType::INTA,
        BusOp::Special(s) => match s {
            SpecialCycle::Shutdown => ReqType::SHUTDOWN,
            SpecialCycle::Halt => ReqType::HALT,
            SpecialCycle::FlushAck => ReqType::FLUSHACK,
            SpecialCycle::Invalidate | SpecialCycle::WritebackInvalidate => ReqType::FLUSH,
            SpecialCycle::BranchTrace => ReqType::BRTRACEREC,
            SpecialCycle::Other(_) => ReqType::SYNC,
        },
        BusOp::Other => ReqType::DEFERREPLY,
    }
}

/// Writes `records` synthetic 12-byte records (single CPU, the first `time` the sentinel, as in
/// real traces); the same seed gives the same bytes.
pub fn generate(records: u64, seed: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut m = Machine::new(seed);
    let mut rng = GenRng::new(seed ^ 0x7032_6279_7500_0000);
    let mut buf = io::BufWriter::new(out);
    for i in 0..records {
        let op = if rng.chance(1) { BusOp::Other } else { m.next_op() };
        let (addr, size, attr) = match op {
            BusOp::Fetch { addr, .. } => (addr, 8, 3),
            BusOp::Data { kind, addr, len } => (addr, len, if kind.is_io() { 0 } else { 3 }),
            _ => (0, 0, 0),
        };
        let time = if i == 0 {
            TIME_SENTINEL
        } else if rng.chance(1) && rng.chance(20) {
            // A logic-analyser buffer drain: a long stall.
            20_000 + rng.below(50_000) as u32
        } else {
            7 + rng.below(if matches!(op, BusOp::Fetch { .. }) {
                40
            } else {
                500
            }) as u32
        };
        let r = Record {
            addr,
            reqtype: reqtype_of(op),
            size,
            attr,
            proc_id: 0,
            time,
        };
        buf.write_all(&r.to_bytes())?;
    }
    buf.flush()
}
