//! Synthetic 6-byte BYU traces from the shared `Machine` bus model.

use super::bus::{BusOp, DataKind, Machine};
use super::record::{CycleType, Record};
use std::io::{self, Write};

/// Byte enables (levels, 0 = requested) for `len` bytes from offset `off` of a quantum.
pub fn byte_enables(off: u32, len: u8) -> u8 {
    let mask = if len >= 8 { 0xffu16 } else { (1u16 << len) - 1 };
    !((mask << off) as u8)
}

/// The 6-byte record of a bus operation (a complete trace: L1 disabled, so fetches and reads
/// are the non-cacheable types 9 and 13).
pub fn record_of(op: BusOp) -> Record {
    let split = |addr: u32, len: u8| {
        let off = addr & 7;
        let len = len.min(8 - off as u8);
        (addr & !7, byte_enables(off, len))
    };
    match op {
        BusOp::Fetch { addr, len } => {
            let (a, be) = split(addr, len);
            Record::new(a, be, CycleType::FetchNc)
        }
        BusOp::Data { kind, addr, len } => {
            let (a, be) = split(addr, len);
            let cycle = match kind {
                DataKind::Read => CycleType::DataReadNc,
                DataKind::ReadInvalidate => CycleType::DataRead,
                DataKind::Write => CycleType::DataWrite,
                DataKind::Writeback => CycleType::Writeback,
                DataKind::IoRead => CycleType::IoRead,
                DataKind::IoWrite => CycleType::IoWrite,
            };
            Record::new(a, be, cycle)
        }
        BusOp::IntAck => Record::new(0, 0xfe, CycleType::IntAck),
        BusOp::Special(s) => Record::new(0, s.byte_enables(), CycleType::Special),
        BusOp::Other => Record::new(0, 0xff, CycleType::Special),
    }
}

/// Writes `records` synthetic 6-byte records; the same seed gives the same bytes.
pub fn generate(records: u64, seed: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut m = Machine::new(seed);
    let mut buf = io::BufWriter::new(out);
    for _ in 0..records {
        buf.write_all(&record_of(m.next_op()).to_bytes())?;
    }
    buf.flush()
}
