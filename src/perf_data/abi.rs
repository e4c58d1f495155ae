//! The kernel's perf_event numbers both perf.data writers use (`include/uapi/linux/perf_event.h`,
//! `tools/perf/util/event.h`): record types, the `misc` bits and the `sample_type` bits. ptemu's
//! perf.data (the parent module) and `ptemu pttc`'s `@sb pevent-*` records take them, and the
//! record header and string layout, from here.

use byteorder::{WriteBytesExt, LE};
use std::io;

/// A record header; a size past its u16 field (a path or filter that long) is an error, never
/// a wrapped size that would make the file unreadable.
pub fn header(w: &mut Vec<u8>, kind: u32, misc: u16, size: usize) -> io::Result<()> {
    let size = u16::try_from(size).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a perf record of {size} bytes would pass 64 KiB (a path or filter too long)"),
        )
    })?;
    w.write_u32::<LE>(kind)?;
    w.write_u16::<LE>(misc)?;
    w.write_u16::<LE>(size)
}

/// A NUL-terminated string padded with NULs to a multiple of 8 bytes.
pub fn padded_str(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    while !v.len().is_multiple_of(8) {
        v.push(0);
    }
    v
}

/// `PERF_RECORD_MMAP`.
pub const PERF_RECORD_MMAP: u32 = 1;
/// `PERF_RECORD_LOST`.
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_COMM`.
pub const PERF_RECORD_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
pub const PERF_RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_FORK`.
pub const PERF_RECORD_FORK: u32 = 7;
/// `PERF_RECORD_MMAP2`.
pub const PERF_RECORD_MMAP2: u32 = 10;
/// `PERF_RECORD_AUX`.
pub const PERF_RECORD_AUX: u32 = 11;
/// `PERF_RECORD_ITRACE_START`.
pub const PERF_RECORD_ITRACE_START: u32 = 12;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_SWITCH`.
pub const PERF_RECORD_SWITCH: u32 = 14;
/// `PERF_RECORD_SWITCH_CPU_WIDE`.
pub const PERF_RECORD_SWITCH_CPU_WIDE: u32 = 15;
/// `PERF_RECORD_FINISHED_ROUND` (perf's own, not the kernel's).
pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_AUXTRACE_INFO` (perf's own).
pub const PERF_RECORD_AUXTRACE_INFO: u32 = 70;
/// `PERF_RECORD_AUXTRACE` (perf's own).
pub const PERF_RECORD_AUXTRACE: u32 = 71;

/// `PERF_RECORD_MISC_USER`.
pub const PERF_RECORD_MISC_USER: u16 = 2;
/// `PERF_RECORD_MISC_COMM_EXEC` and `PERF_RECORD_MISC_SWITCH_OUT` share this bit.
pub const MISC_BIT_13: u16 = 1 << 13;

/// `PERF_AUXTRACE_INTEL_PT`: the AUXTRACE_INFO type of Intel PT.
pub const PERF_AUXTRACE_INTEL_PT: u32 = 1;

/// `PERF_SAMPLE_IP`.
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`.
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ID`.
pub const PERF_SAMPLE_ID: u64 = 1 << 6;
/// `PERF_SAMPLE_CPU`.
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_STREAM_ID`.
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_IDENTIFIER`.
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;
