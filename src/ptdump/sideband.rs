//! perf_event sideband as libipt's `ptdump` shows it (`--pevent:primary FILE`, `--sb:compact`,
//! ...): the records of each `.sb` file, read with the file's perf configuration, printed between
//! the packets when the trace's time reaches theirs, in libipt-sb's record text.
//!
//! Written from libipt's behaviour (its `sideband/` and `pevent/` libraries and ptdump), not its
//! code:
//!
//! - A record's time is its `PERF_SAMPLE_TIME` sample converted to TSC with the file's
//!   time-zero, time-shift and time-mult (a time of 0 is TSC 0), less `--pevent:tsc-offset`; a
//!   record without a time sample has TSC 0.
//! - At every timing packet ptdump prints, before the packet's line, the records whose TSC is at
//!   most the trace's estimated time; after the trace, all the rest. Between files, the one whose
//!   next record is earliest goes first; on equal times the file that printed last keeps going
//!   (libipt's ordered list puts a re-added file before those of the same time), and before any
//!   record was printed the file named first on the command line goes first.
//! - Unlike ptdump, bytes that are not records are an error naming the file and the byte offset
//!   (ptdump stops reading such a file, silently when the record is cut by the end of the file);
//!   a record of type 0 ends the file when only zeros follow it (padding).

use std::fmt::Write as _;

use crate::perf_data::abi::*;

/// `PERF_RECORD_THROTTLE`.
const PERF_RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`.
const PERF_RECORD_UNTHROTTLE: u32 = 6;
/// `PERF_AUX_FLAG_TRUNCATED`.
const PERF_AUX_FLAG_TRUNCATED: u64 = 1;

/// A perf_event sideband file's configuration, as ptdump's `--pevent:*` options set it for the
/// files named after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeventConfig {
    /// `perf_event_attr.sample_type`: which samples follow each record (`--pevent:sample-type`).
    pub sample_type: u64,
    /// `perf_event_mmap_page.time_zero` (`--pevent:time-zero`).
    pub time_zero: u64,
    /// `perf_event_mmap_page.time_shift` (`--pevent:time-shift`).
    pub time_shift: u16,
    /// `perf_event_mmap_page.time_mult` (`--pevent:time-mult`).
    pub time_mult: u32,
    /// Records are shown this many TSC ticks earlier (`--pevent:tsc-offset`; a negative offset,
    /// as a two's complement value, shows them later).
    pub tsc_offset: u64,
}

impl Default for PeventConfig {
    fn default() -> Self {
        PeventConfig {
            sample_type: 0,
            time_zero: 0,
            time_shift: 0,
            time_mult: 1,
            tsc_offset: 0,
        }
    }
}

/// What a sideband line shows, as ptdump's `--sb:*` options say it. With neither `compact` nor
/// `verbose` the record itself is not printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrintFlags {
    /// One line per record (`--sb:compact`).
    pub compact: bool,
    /// The record's fields one per line (`--sb:verbose`).
    pub verbose: bool,
    /// The file name in front (`--sb:filename`).
    pub filename: bool,
    /// The record's byte offset in its file in front (`--sb:offset`).
    pub offset: bool,
    /// The record's TSC in front, when it has a time sample (`--sb:time`).
    pub time: bool,
}

impl PrintFlags {
    fn any(&self) -> bool {
        self.compact || self.verbose || self.filename || self.offset || self.time
    }
}

/// Bytes of a sideband file that are not perf_event records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbError {
    /// The file, as named on the command line.
    pub file: String,
    /// The byte offset of the record that is wrong.
    pub offset: u64,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for SbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: byte {}: {}", self.file, self.offset, self.what)
    }
}

impl std::error::Error for SbError {}

/// The samples a record carries (those its file's sample type asks for).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Samples {
    pid_tid: Option<(u32, u32)>,
    time: Option<u64>,
    id: Option<u64>,
    stream_id: Option<u64>,
    cpu: Option<u32>,
    identifier: Option<u64>,
}

/// A record's own fields.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    Mmap {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        filename: String,
    },
    Lost {
        id: u64,
        lost: u64,
    },
    Comm {
        pid: u32,
        tid: u32,
        comm: String,
    },
    /// EXIT and FORK.
    Task {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    Throttle {
        time: u64,
        id: u64,
        stream_id: u64,
    },
    Mmap2 {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        maj: u32,
        min: u32,
        ino: u64,
        ino_generation: u64,
        prot: u32,
        flags: u32,
        filename: String,
    },
    Aux {
        offset: u64,
        size: u64,
        flags: u64,
    },
    ItraceStart {
        pid: u32,
        tid: u32,
    },
    LostSamples {
        lost: u64,
    },
    Switch,
    SwitchCpuWide {
        pid: u32,
        tid: u32,
    },
    /// A type libipt does not decode: no fields, no samples.
    Unknown,
}

/// One record of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    offset: u64,
    ty: u32,
    misc: u16,
    tsc: u64,
    body: Body,
    samples: Samples,
}

/// The records of one perf_event sideband file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pevent {
    name: String,
    records: Vec<Record>,
}

/// Little-endian reads inside one record.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Fields<'_> {
    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes.get(self.pos..self.pos + 4)?;
        self.pos += 4;
        Some(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Option<u64> {
        let b = self.bytes.get(self.pos..self.pos + 8)?;
        self.pos += 8;
        Some(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A NUL-terminated string padded to 8 bytes (the NUL inside the record).
    fn string(&mut self) -> Option<String> {
        let rest = self.bytes.get(self.pos..)?;
        let n = rest.iter().position(|&b| b == 0)?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += (n + 1).div_ceil(8) * 8;
        Some(s)
    }
}

/// A perf time as TSC, as libipt converts it (time 0 stands for "no real time": TSC 0).
fn time_to_tsc(time: u64, c: &PeventConfig) -> Option<u64> {
    if time == 0 {
        return Some(0);
    }
    if c.time_mult == 0 {
        return None;
    }
    let t = time.wrapping_sub(c.time_zero);
    let mult = u64::from(c.time_mult);
    let shift = u32::from(c.time_shift);
    let quot = (t / mult).wrapping_shl(shift);
    let rem = (t % mult).wrapping_shl(shift) / mult;
    Some(quot.wrapping_add(rem))
}

/// The TSC at which a record is shown: its own, less the offset, without wrapping below 0 for a
/// positive offset.
fn offset_tsc(tsc: u64, offset: u64) -> u64 {
    if offset <= tsc {
        tsc - offset
    } else if offset as i64 >= 0 {
        0
    } else {
        tsc.wrapping_sub(offset)
    }
}

impl Pevent {
    /// Reads the records of `bytes`, the file `name`, with its configuration.
    pub fn read(name: &str, bytes: &[u8], c: &PeventConfig) -> Result<Pevent, SbError> {
        let mut records = Vec::new();
        let mut pos = 0usize;
        while pos < bytes.len() {
            let err = |what: String| SbError {
                file: name.to_string(),
                offset: pos as u64,
                what,
            };
            let Some(h) = bytes.get(pos..pos + 8) else {
                return Err(err(format!(
                    "a record header cut by the end of the file ({} of 8 bytes)",
                    bytes.len() - pos
                )));
            };
            let ty = u32::from_le_bytes(h[..4].try_into().expect("4 bytes"));
            let misc = u16::from_le_bytes(h[4..6].try_into().expect("2 bytes"));
            let size = usize::from(u16::from_le_bytes(h[6..8].try_into().expect("2 bytes")));
            if ty == 0 {
                if bytes[pos..].iter().all(|&b| b == 0) {
                    break;
                }
                return Err(err("a record of type 0 with data after it".into()));
            }
            if size < 8 {
                return Err(err(format!("record size {size} is less than its 8-byte header")));
            }
            let Some(rec) = bytes.get(pos..pos + size) else {
                return Err(err(format!(
                    "a record of {size} bytes cut by the end of the file ({} bytes left)",
                    bytes.len() - pos
                )));
            };
            let record = read_record(rec, ty, misc, c).map_err(err)?;
            records.push(Record {
                offset: pos as u64,
                ..record
            });
            pos += size;
        }
        Ok(Pevent {
            name: name.to_string(),
            records,
        })
    }

    /// How many records the file holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

fn type_name(ty: u32) -> &'static str {
    match ty {
        PERF_RECORD_MMAP => "MMAP",
        PERF_RECORD_LOST => "LOST",
        PERF_RECORD_COMM => "COMM",
        PERF_RECORD_EXIT => "EXIT",
        PERF_RECORD_THROTTLE => "THROTTLE",
        PERF_RECORD_UNTHROTTLE => "UNTHROTTLE",
        PERF_RECORD_FORK => "FORK",
        PERF_RECORD_MMAP2 => "MMAP2",
        PERF_RECORD_AUX => "AUX",
        PERF_RECORD_ITRACE_START => "ITRACE_START",
        PERF_RECORD_LOST_SAMPLES => "LOST_SAMPLES",
        PERF_RECORD_SWITCH => "SWITCH",
        PERF_RECORD_SWITCH_CPU_WIDE => "SWITCH_CPU_WIDE",
        _ => "UNKNOWN",
    }
}

/// One record (`rec`: its bytes, header included).
fn read_record(rec: &[u8], ty: u32, misc: u16, c: &PeventConfig) -> Result<Record, String> {
    let mut f = Fields { bytes: rec, pos: 8 };
    let short = || {
        format!(
            "PERF_RECORD_{} of {} bytes is too short for its fields",
            type_name(ty),
            rec.len()
        )
    };
    let body = match ty {
        PERF_RECORD_MMAP => {
            let (pid, tid) = (f.u32(), f.u32());
            let (addr, len, pgoff) = (f.u64(), f.u64(), f.u64());
            let (Some(pid), Some(tid), Some(addr), Some(len), Some(pgoff)) = (pid, tid, addr, len, pgoff)
            else {
                return Err(short());
            };
            let filename = f
                .string()
                .ok_or("PERF_RECORD_MMAP's file name has no NUL inside the record")?;
            Body::Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename,
            }
        }
        PERF_RECORD_LOST => match (f.u64(), f.u64()) {
            (Some(id), Some(lost)) => Body::Lost { id, lost },
            _ => return Err(short()),
        },
        PERF_RECORD_COMM => {
            let (Some(pid), Some(tid)) = (f.u32(), f.u32()) else {
                return Err(short());
            };
            let comm = f
                .string()
                .ok_or("PERF_RECORD_COMM's command has no NUL inside the record")?;
            Body::Comm { pid, tid, comm }
        }
        PERF_RECORD_EXIT | PERF_RECORD_FORK => match (f.u32(), f.u32(), f.u32(), f.u32(), f.u64()) {
            (Some(pid), Some(ppid), Some(tid), Some(ptid), Some(time)) => Body::Task {
                pid,
                ppid,
                tid,
                ptid,
                time,
            },
            _ => return Err(short()),
        },
        PERF_RECORD_THROTTLE | PERF_RECORD_UNTHROTTLE => match (f.u64(), f.u64(), f.u64()) {
            (Some(time), Some(id), Some(stream_id)) => Body::Throttle { time, id, stream_id },
            _ => return Err(short()),
        },
        PERF_RECORD_MMAP2 => {
            let (pid, tid, addr, len, pgoff) = (f.u32(), f.u32(), f.u64(), f.u64(), f.u64());
            let (maj, min, ino, ino_generation, prot, flags) =
                (f.u32(), f.u32(), f.u64(), f.u64(), f.u32(), f.u32());
            let (
                Some(pid),
                Some(tid),
                Some(addr),
                Some(len),
                Some(pgoff),
                Some(maj),
                Some(min),
                Some(ino),
                Some(ino_generation),
                Some(prot),
                Some(flags),
            ) = (
                pid,
                tid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                ino_generation,
                prot,
                flags,
            )
            else {
                return Err(short());
            };
            let filename = f
                .string()
                .ok_or("PERF_RECORD_MMAP2's file name has no NUL inside the record")?;
            Body::Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                ino_generation,
                prot,
                flags,
                filename,
            }
        }
        PERF_RECORD_AUX => match (f.u64(), f.u64(), f.u64()) {
            (Some(offset), Some(size), Some(flags)) => Body::Aux { offset, size, flags },
            _ => return Err(short()),
        },
        PERF_RECORD_ITRACE_START => match (f.u32(), f.u32()) {
            (Some(pid), Some(tid)) => Body::ItraceStart { pid, tid },
            _ => return Err(short()),
        },
        PERF_RECORD_LOST_SAMPLES => match f.u64() {
            Some(lost) => Body::LostSamples { lost },
            None => return Err(short()),
        },
        PERF_RECORD_SWITCH => Body::Switch,
        PERF_RECORD_SWITCH_CPU_WIDE => match (f.u32(), f.u32()) {
            (Some(pid), Some(tid)) => Body::SwitchCpuWide { pid, tid },
            _ => return Err(short()),
        },
        // libipt reads no fields and no samples of other types.
        _ => {
            return Ok(Record {
                offset: 0,
                ty,
                misc,
                tsc: 0,
                body: Body::Unknown,
                samples: Samples::default(),
            })
        }
    };
    let st = c.sample_type;
    let mut s = Samples::default();
    let samples_short = || {
        format!(
            "PERF_RECORD_{} of {} bytes ends inside the samples of sample type {st:#x}",
            type_name(ty),
            rec.len()
        )
    };
    if st & PERF_SAMPLE_TID != 0 {
        let (Some(pid), Some(tid)) = (f.u32(), f.u32()) else {
            return Err(samples_short());
        };
        s.pid_tid = Some((pid, tid));
    }
    if st & PERF_SAMPLE_TIME != 0 {
        s.time = Some(f.u64().ok_or_else(samples_short)?);
    }
    if st & PERF_SAMPLE_ID != 0 {
        s.id = Some(f.u64().ok_or_else(samples_short)?);
    }
    if st & PERF_SAMPLE_STREAM_ID != 0 {
        s.stream_id = Some(f.u64().ok_or_else(samples_short)?);
    }
    if st & PERF_SAMPLE_CPU != 0 {
        s.cpu = Some(f.u32().ok_or_else(samples_short)?);
        f.u32().ok_or_else(samples_short)?;
    }
    if st & PERF_SAMPLE_IDENTIFIER != 0 {
        s.identifier = Some(f.u64().ok_or_else(samples_short)?);
    }
    if f.pos != rec.len() {
        return Err(format!(
            "PERF_RECORD_{} is {} bytes, its fields and the samples of sample type {st:#x} {}",
            type_name(ty),
            rec.len(),
            f.pos
        ));
    }
    let tsc = match s.time {
        Some(t) => offset_tsc(
            time_to_tsc(t, c).ok_or("time-mult 0: the record's time cannot be converted to TSC")?,
            c.tsc_offset,
        ),
        None => 0,
    };
    Ok(Record {
        offset: 0,
        ty,
        misc,
        tsc,
        body,
        samples: s,
    })
}

impl Record {
    fn print(&self, file: &str, flags: &PrintFlags, out: &mut String) {
        match (flags.filename, flags.offset) {
            (true, true) => {
                let _ = write!(out, "{file}:{:016x}  ", self.offset);
            }
            (true, false) => {
                let _ = write!(out, "{file}  ");
            }
            (false, true) => {
                let _ = write!(out, "{:016x}  ", self.offset);
            }
            (false, false) => {}
        }
        if flags.time && self.samples.time.is_some() {
            let _ = write!(out, "{:016x}  ", self.tsc);
        }
        if flags.compact {
            self.compact(out);
        }
        if flags.verbose {
            self.verbose(out);
        }
        if flags.any() {
            out.push('\n');
        }
    }

    /// The record's name with its suffix (`.EXEC`, `.TRUNCATED`, `.IN`/`.OUT`).
    fn name(&self) -> String {
        let sfx = match (&self.body, self.ty) {
            (Body::Comm { .. }, _) if self.misc & MISC_BIT_13 != 0 => ".EXEC",
            (Body::Aux { flags, .. }, _) if flags & PERF_AUX_FLAG_TRUNCATED != 0 => ".TRUNCATED",
            (_, PERF_RECORD_SWITCH | PERF_RECORD_SWITCH_CPU_WIDE) => {
                if self.misc & MISC_BIT_13 != 0 {
                    ".OUT"
                } else {
                    ".IN"
                }
            }
            _ => "",
        };
        format!("PERF_RECORD_{}{sfx}", type_name(self.ty))
    }

    fn compact(&self, out: &mut String) {
        let name = self.name();
        let _ = match &self.body {
            Body::Unknown => write!(out, "UNKNOWN ({:x}, {:x})", self.ty, self.misc),
            Body::Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename,
            } => write!(
                out,
                "{name}  {pid:x}/{tid:x}, {addr:x}, {len:x}, {pgoff:x}, {filename}"
            ),
            Body::Lost { id, lost } => write!(out, "{name}  {id:x}, {lost:x}"),
            Body::Comm { pid, tid, comm } => write!(out, "{name}  {pid:x}/{tid:x}, {comm}"),
            Body::Task {
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => write!(out, "{name}  {pid:x}/{tid:x}, {ppid:x}/{ptid:x}, {time:x}"),
            Body::Throttle { time, id, stream_id } => {
                write!(out, "{name}  {time:x}, {id:x}, {stream_id:x}")
            }
            Body::Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                ino_generation,
                prot,
                flags,
                filename,
            } => write!(
                out,
                "{name}  {pid:x}/{tid:x}, {addr:x}, {len:x}, {pgoff:x}, {maj:x}, {min:x}, {ino:x}, \
                 {ino_generation:x}, {prot:x}, {flags:x}, {filename}"
            ),
            Body::Aux { offset, size, flags } => write!(out, "{name}  {offset:x}, {size:x}, {flags:x}"),
            Body::ItraceStart { pid, tid } => write!(out, "{name}  {pid:x}/{tid:x}"),
            Body::LostSamples { lost } => write!(out, "{name}  {lost:x}"),
            Body::Switch => write!(out, "{name}"),
            Body::SwitchCpuWide { pid, tid } => write!(out, "{name}  {pid:x}/{tid:x}"),
        };
        let s = &self.samples;
        out.push_str("  {");
        if let Some((pid, tid)) = s.pid_tid {
            let _ = write!(out, " {pid:x}/{tid:x}");
        }
        if let Some(t) = s.time {
            let _ = write!(out, " {t:x}");
        }
        if let Some(id) = s.id {
            let _ = write!(out, " {id:x}");
        }
        if let Some(cpu) = s.cpu {
            let _ = write!(out, " cpu-{cpu:x}");
        }
        if let Some(v) = s.stream_id {
            let _ = write!(out, " {v:x}");
        }
        if let Some(v) = s.identifier {
            let _ = write!(out, " {v:x}");
        }
        out.push_str(" }");
    }

    fn verbose(&self, out: &mut String) {
        /// A number in hex, as `%x` prints it.
        struct X<T>(T);
        impl<T: std::fmt::LowerHex> std::fmt::Display for X<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:x}", self.0)
            }
        }
        let name = if let Body::Unknown = self.body {
            "UNKNOWN".to_string()
        } else {
            self.name()
        };
        out.push_str(&name);
        let mut field = |k: &str, v: &dyn std::fmt::Display| {
            let _ = write!(out, "\n  {k}: {v}");
        };
        match &self.body {
            Body::Unknown => {
                field("type", &X(self.ty));
                field("misc", &X(self.misc));
            }
            Body::Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename,
            } => {
                field("pid", &X(pid));
                field("tid", &X(tid));
                field("addr", &X(addr));
                field("len", &X(len));
                field("pgoff", &X(pgoff));
                field("filename", filename);
            }
            Body::Lost { id, lost } => {
                field("id", &X(id));
                field("lost", &X(lost));
            }
            Body::Comm { pid, tid, comm } => {
                field("pid", &X(pid));
                field("tid", &X(tid));
                field("comm", comm);
            }
            Body::Task {
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                field("pid", &X(pid));
                field("ppid", &X(ppid));
                field("tid", &X(tid));
                field("ptid", &X(ptid));
                field("time", &X(time));
            }
            Body::Throttle { time, id, stream_id } => {
                field("time", &X(time));
                field("id", &X(id));
                field("stream_id", &X(stream_id));
            }
            Body::Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                ino_generation,
                prot,
                flags,
                filename,
            } => {
                field("pid", &X(pid));
                field("tid", &X(tid));
                field("addr", &X(addr));
                field("len", &X(len));
                field("pgoff", &X(pgoff));
                field("maj", &X(maj));
                field("min", &X(min));
                field("ino", &X(ino));
                field("ino_generation", &X(ino_generation));
                field("prot", &X(prot));
                field("flags", &X(flags));
                field("filename", filename);
            }
            Body::Aux { offset, size, flags } => {
                field("aux offset", &X(offset));
                field("aux size", &X(size));
                field("flags", &X(flags));
            }
            Body::ItraceStart { pid, tid } => {
                field("pid", &X(pid));
                field("tid", &X(tid));
            }
            Body::LostSamples { lost } => field("lost", &X(lost)),
            Body::Switch => {}
            Body::SwitchCpuWide { pid, tid } => {
                let pfx = if self.misc & MISC_BIT_13 != 0 {
                    "next"
                } else {
                    "prev"
                };
                field(&format!("{pfx} pid"), &X(pid));
                field(&format!("{pfx} tid"), &X(tid));
            }
        }
        let s = &self.samples;
        if let Some((pid, tid)) = s.pid_tid {
            field("pid", &X(pid));
            field("tid", &X(tid));
        }
        if let Some(t) = s.time {
            field("time", &X(t));
        }
        if let Some(v) = s.id {
            field("id", &X(v));
        }
        if let Some(v) = s.cpu {
            field("cpu", &X(v));
        }
        if let Some(v) = s.stream_id {
            field("stream id", &X(v));
        }
        if let Some(v) = s.identifier {
            field("identifier", &X(v));
        }
    }
}

/// The files of one dump, each at its next record, kept in libipt's order: by the next
/// record's TSC, a file put back before the files of the same TSC.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// (file, index of its next record), ordered.
    queue: Vec<(Pevent, usize)>,
    /// Files were given (ptdump then tracks time even without `--time`).
    loaded: bool,
    flags: PrintFlags,
}

impl Session {
    /// A session over `files` in command-line order, printing with `flags`.
    pub fn new(files: Vec<Pevent>, flags: PrintFlags) -> Session {
        let mut s = Session {
            queue: Vec::new(),
            loaded: !files.is_empty(),
            flags,
        };
        // libipt keeps the files as they were added, newest first, and moves them to the
        // ordered list in that order.
        for f in files.into_iter().rev() {
            s.put_back(f, 0);
        }
        s
    }

    /// Whether sideband files were given.
    pub fn loaded(&self) -> bool {
        self.loaded
    }

    fn put_back(&mut self, file: Pevent, next: usize) {
        let Some(r) = file.records.get(next) else {
            return;
        };
        let tsc = r.tsc;
        let at = self
            .queue
            .iter()
            .position(|(f, i)| tsc <= f.records[*i].tsc)
            .unwrap_or(self.queue.len());
        self.queue.insert(at, (file, next));
    }

    /// Prints into `out` the records whose TSC is at most `tsc`, in order.
    pub fn dump(&mut self, tsc: u64, out: &mut String) {
        while let Some((f, i)) = self.queue.first() {
            if tsc < f.records[*i].tsc {
                break;
            }
            let (f, i) = self.queue.remove(0);
            f.records[i].print(&f.name, &self.flags, out);
            self.put_back(f, i + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ty: u32, misc: u16, body: &[u8], samples: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        header(&mut v, ty, misc, 8 + body.len() + samples.len()).unwrap();
        v.extend_from_slice(body);
        v.extend_from_slice(samples);
        v
    }

    fn compact() -> PrintFlags {
        PrintFlags {
            compact: true,
            offset: true,
            ..Default::default()
        }
    }

    #[test]
    fn records_print_in_time_order_across_files() {
        let c = PeventConfig {
            sample_type: PERF_SAMPLE_TIME,
            ..Default::default()
        };
        let mut a = record(
            PERF_RECORD_ITRACE_START,
            0,
            &[1, 0, 0, 0, 2, 0, 0, 0],
            &5u64.to_le_bytes(),
        );
        a.extend(record(PERF_RECORD_SWITCH, MISC_BIT_13, &[], &9u64.to_le_bytes()));
        let b = record(
            PERF_RECORD_LOST_SAMPLES,
            0,
            &3u64.to_le_bytes(),
            &7u64.to_le_bytes(),
        );
        let a = Pevent::read("a.sb", &a, &c).unwrap();
        let b = Pevent::read("b.sb", &b, &c).unwrap();
        let mut s = Session::new(vec![a, b], compact());
        let mut out = String::new();
        s.dump(4, &mut out);
        assert_eq!(out, "");
        s.dump(7, &mut out);
        assert_eq!(
            out,
            "0000000000000000  PERF_RECORD_ITRACE_START  1/2  { 5 }\n\
             0000000000000000  PERF_RECORD_LOST_SAMPLES  3  { 7 }\n"
        );
        out.clear();
        s.dump(u64::MAX, &mut out);
        assert_eq!(out, "0000000000000018  PERF_RECORD_SWITCH.OUT  { 9 }\n");

        // On equal times the file named first goes first, and keeps going.
        let two = |n| {
            let mut v = record(PERF_RECORD_LOST_SAMPLES, 0, &[n; 8], &0u64.to_le_bytes());
            v.extend(record(
                PERF_RECORD_LOST_SAMPLES,
                0,
                &[n + 1; 8],
                &0u64.to_le_bytes(),
            ));
            Pevent::read("f", &v, &c).unwrap()
        };
        let flags = PrintFlags {
            compact: true,
            ..Default::default()
        };
        let mut s = Session::new(vec![two(2), two(4)], flags);
        out.clear();
        s.dump(0, &mut out);
        let lost: Vec<&str> = out.lines().map(|l| &l[26..28]).collect();
        assert_eq!(lost, ["20", "30", "40", "50"], "{out}");
    }

    #[test]
    fn time_conversion_and_offset() {
        let c = PeventConfig {
            time_zero: 10,
            time_shift: 2,
            time_mult: 3,
            ..Default::default()
        };
        // (17 - 10) = 7: 2 << 2 = 8, (1 << 2) / 3 = 1.
        assert_eq!(time_to_tsc(17, &c), Some(9));
        assert_eq!(time_to_tsc(0, &c), Some(0));
        assert_eq!(time_to_tsc(5, &PeventConfig { time_mult: 0, ..c }), None);
        assert_eq!(offset_tsc(5, 2), 3);
        assert_eq!(offset_tsc(1, 2), 0);
        assert_eq!(offset_tsc(1, (-2i64) as u64), 3);
    }

    #[test]
    fn verbose_fields() {
        let c = PeventConfig {
            sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_CPU,
            ..Default::default()
        };
        let mut body = vec![8, 0, 0, 0, 9, 0, 0, 0];
        let samples = [1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0];
        let f = record(PERF_RECORD_SWITCH_CPU_WIDE, MISC_BIT_13, &body, &samples);
        let p = Pevent::read("x", &f, &c).unwrap();
        let mut out = String::new();
        let flags = PrintFlags {
            verbose: true,
            time: true,
            ..Default::default()
        };
        Session::new(vec![p], flags).dump(0, &mut out);
        assert_eq!(
            out,
            "PERF_RECORD_SWITCH_CPU_WIDE.OUT\n  next pid: 8\n  next tid: 9\n  pid: 1\n  tid: 2\n  cpu: 3\n"
        );
        // A record whose size does not match its fields and samples.
        body.push(0);
        let f = record(PERF_RECORD_SWITCH_CPU_WIDE, 0, &body, &samples);
        let e = Pevent::read("x", &f, &c).unwrap_err();
        assert_eq!((e.file.as_str(), e.offset), ("x", 0));
    }

    #[test]
    fn bad_bytes_name_the_offset() {
        let c = PeventConfig::default();
        let mut f = record(PERF_RECORD_LOST, 0, &[0; 16], &[]);
        f.extend([1, 0, 0, 0, 0, 0, 64, 0]);
        let e = Pevent::read("f.sb", &f, &c).unwrap_err();
        assert_eq!(e.offset, 24);
        assert!(e.to_string().starts_with("f.sb: byte 24: "), "{e}");
        assert_eq!(Pevent::read("f.sb", &f[..27], &c).unwrap_err().offset, 24);
        // Zero padding ends the file; a record of type 0 with data after it is an error.
        let mut z = f[..24].to_vec();
        z.extend([0; 16]);
        assert_eq!(Pevent::read("f.sb", &z, &c).unwrap().len(), 1);
        z[30] = 1;
        assert_eq!(Pevent::read("f.sb", &z, &c).unwrap_err().offset, 24);
        // An MMAP whose name has no NUL.
        let m = record(PERF_RECORD_MMAP, 0, &[b'a'; 40], &[]);
        assert!(Pevent::read("m", &m, &c).unwrap_err().what.contains("NUL"));
    }
}
