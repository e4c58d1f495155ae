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

/// One perf_event sideband file, its records checked and then read again one at a time as the
/// dump reaches them: memory holds a window of the file and the record at hand, not its records.
pub struct Pevent {
    name: String,
    config: PeventConfig,
    bytes: Bytes,
    /// How many records the file holds.
    count: usize,
    /// Where its records end: the end of the file, or where zero padding starts.
    end: u64,
}

impl std::fmt::Debug for Pevent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pevent")
            .field("name", &self.name)
            .field("records", &self.count)
            .field("end", &self.end)
            .finish()
    }
}

/// Bytes of a regular file read at a time (at least; one record may take more).
const WINDOW: usize = 16 << 10;

/// Where a file's bytes come from.
enum Bytes {
    /// Held in memory (bytes given, or a pipe read to its end).
    Held(Vec<u8>),
    /// A regular file of `len` bytes, read through `window` (its bytes from `at`).
    File {
        file: std::fs::File,
        len: u64,
        at: u64,
        window: Vec<u8>,
    },
}

impl Bytes {
    fn len(&self) -> u64 {
        match self {
            Bytes::Held(v) => v.len() as u64,
            Bytes::File { len, .. } => *len,
        }
    }

    /// Up to `n` bytes from `pos` (fewer at the end).
    fn get(&mut self, pos: u64, n: usize) -> std::io::Result<&[u8]> {
        let len = self.len();
        let n = n.min(len.saturating_sub(pos) as usize);
        match self {
            Bytes::Held(v) => Ok(&v[pos as usize..pos as usize + n]),
            Bytes::File { file, at, window, .. } => {
                let inside = pos >= *at && pos + n as u64 <= *at + window.len() as u64;
                if !inside {
                    use std::os::unix::fs::FileExt;
                    let want = n.max(WINDOW).min((len - pos) as usize);
                    window.resize(want, 0);
                    file.read_exact_at(window, pos).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            std::io::Error::other(
                                "the file changed size while it was read: another process truncated it",
                            )
                        } else {
                            e
                        }
                    })?;
                    *at = pos;
                }
                let from = (pos - *at) as usize;
                Ok(&window[from..from + n])
            }
        }
    }

    /// Gives back the window's memory (the file is read again from where it is next needed).
    fn release(&mut self) {
        if let Bytes::File { window, at, .. } = self {
            *window = Vec::new();
            *at = 0;
        }
    }
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
    /// Reads the records of `bytes`, the file `name`, with its configuration: every record is
    /// checked now (bytes that are not records are an error naming the byte); the dump reads
    /// them again one at a time.
    pub fn read(name: &str, bytes: &[u8], c: &PeventConfig) -> Result<Pevent, SbError> {
        Pevent::check(name, Bytes::Held(bytes.to_vec()), c)
    }

    /// [`Pevent::read`] for a regular file, which stays open: the dump reads its records again
    /// a window at a time, so memory does not grow with the file.
    pub fn open(name: &str, file: std::fs::File, c: &PeventConfig) -> Result<Pevent, SbError> {
        let len = file.metadata().map_err(|e| SbError {
            file: name.to_string(),
            offset: 0,
            what: format!("cannot read: {e}"),
        })?;
        let bytes = Bytes::File {
            file,
            len: len.len(),
            at: 0,
            window: Vec::new(),
        };
        Pevent::check(name, bytes, c)
    }

    fn check(name: &str, bytes: Bytes, c: &PeventConfig) -> Result<Pevent, SbError> {
        let mut p = Pevent {
            name: name.to_string(),
            config: *c,
            end: bytes.len(),
            bytes,
            count: 0,
        };
        let mut pos = 0;
        while let Some((_, next)) = p.record_at(pos)? {
            p.count += 1;
            pos = next;
        }
        p.bytes.release();
        Ok(p)
    }

    /// The record at `pos` and where the next one starts; `None` at the end of the records
    /// (the end of the file, or zero padding: a record of type 0 with only zeros after it).
    fn record_at(&mut self, pos: u64) -> Result<Option<(Record, u64)>, SbError> {
        if pos >= self.end {
            return Ok(None);
        }
        let err = |what: String| SbError {
            file: self.name.clone(),
            offset: pos,
            what,
        };
        let io = |e: std::io::Error| err(format!("cannot read: {e}"));
        let left = self.end - pos;
        let h = self.bytes.get(pos, 8).map_err(io)?;
        if h.len() < 8 {
            return Err(err(format!(
                "a record header cut by the end of the file ({left} of 8 bytes)"
            )));
        }
        let ty = u32::from_le_bytes(h[..4].try_into().expect("4 bytes"));
        let misc = u16::from_le_bytes(h[4..6].try_into().expect("2 bytes"));
        let size = usize::from(u16::from_le_bytes(h[6..8].try_into().expect("2 bytes")));
        if ty == 0 {
            let mut at = pos;
            while at < self.end {
                let chunk = self.bytes.get(at, WINDOW).map_err(io)?;
                if chunk.iter().any(|&b| b != 0) {
                    return Err(err("a record of type 0 with data after it".into()));
                }
                at += chunk.len() as u64;
            }
            self.end = pos;
            return Ok(None);
        }
        if size < 8 {
            return Err(err(format!("record size {size} is less than its 8-byte header")));
        }
        let rec = self.bytes.get(pos, size).map_err(io)?;
        if rec.len() < size {
            return Err(err(format!(
                "a record of {size} bytes cut by the end of the file ({left} bytes left)"
            )));
        }
        let record = read_record(rec, ty, misc, &self.config).map_err(err)?;
        Ok(Some((
            Record {
                offset: pos,
                ..record
            },
            pos + size as u64,
        )))
    }

    /// How many records the file holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// An error if the file's size is not what it was when it was checked (another process
    /// changed it while it was read).
    fn unchanged(&self) -> Result<(), SbError> {
        let Bytes::File { file, len, .. } = &self.bytes else {
            return Ok(());
        };
        let now = file.metadata().map(|m| m.len()).unwrap_or(0);
        if now != *len {
            return Err(SbError {
                file: self.name.clone(),
                offset: now.min(*len),
                what: format!(
                    "the file changed size while it was read ({len} bytes when opened, {now} now): \
                     another process truncated or rewrote it"
                ),
            });
        }
        Ok(())
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

/// A file of the dump at its next record.
#[derive(Debug)]
struct Cursor {
    file: Pevent,
    record: Option<Record>,
    /// Where the record after it starts.
    next: u64,
}

/// The files of one dump, each at its next record, merged in libipt's order: by the next
/// record's TSC, a file put back before the files of the same TSC. A heap keyed by (TSC, the
/// latest put back first) does what libipt's ordered list does, in log(files) a record; each
/// file holds one record and a window of its bytes.
#[derive(Debug, Default)]
pub struct Session {
    files: Vec<Cursor>,
    /// (TSC, the inverse of when it was put back, file), the least first.
    queue: std::collections::BinaryHeap<std::cmp::Reverse<(u64, std::cmp::Reverse<u64>, usize)>>,
    /// How many times a file was put back.
    stamp: u64,
    /// Files were given (ptdump then tracks time even without `--time`).
    loaded: bool,
    flags: PrintFlags,
    /// The first file that could not be read again as it was checked.
    failed: Option<SbError>,
}

impl Session {
    /// A session over `files` in command-line order, printing with `flags`.
    pub fn new(files: Vec<Pevent>, flags: PrintFlags) -> Session {
        let mut s = Session {
            loaded: !files.is_empty(),
            flags,
            ..Session::default()
        };
        s.files = files
            .into_iter()
            .map(|file| Cursor {
                file,
                record: None,
                next: 0,
            })
            .collect();
        // libipt keeps the files as they were added, newest first, and moves them to the
        // ordered list in that order.
        for i in (0..s.files.len()).rev() {
            s.put_back(i);
        }
        s
    }

    /// Whether sideband files were given.
    pub fn loaded(&self) -> bool {
        self.loaded
    }

    /// File `i` moves to its next record and into the queue (before the files of the same TSC).
    fn put_back(&mut self, i: usize) {
        let c = &mut self.files[i];
        match c.file.record_at(c.next) {
            Ok(Some((r, next))) => {
                self.stamp += 1;
                self.queue
                    .push(std::cmp::Reverse((r.tsc, std::cmp::Reverse(self.stamp), i)));
                c.record = Some(r);
                c.next = next;
            }
            Ok(None) => {
                c.record = None;
                c.file.bytes.release();
            }
            Err(e) => {
                c.record = None;
                c.file.bytes.release();
                self.failed.get_or_insert(e);
            }
        }
    }

    /// Prints into `out` the records whose TSC is at most `tsc`, in order.
    pub fn dump(&mut self, tsc: u64, out: &mut String) {
        self.dump_some(tsc, out, usize::MAX);
    }

    /// [`Session::dump`] until `out` holds `max` bytes or more: whether records up to `tsc` are
    /// left (the caller writes `out` away and calls again).
    pub fn dump_some(&mut self, tsc: u64, out: &mut String, max: usize) -> bool {
        while let Some(&std::cmp::Reverse((t, _, i))) = self.queue.peek() {
            if tsc < t {
                return false;
            }
            if out.len() >= max {
                return true;
            }
            self.queue.pop();
            let c = &self.files[i];
            if let Some(r) = &c.record {
                r.print(&c.file.name, &self.flags, out);
            }
            self.put_back(i);
        }
        false
    }

    /// After the dump: an error if a file could not be read again as it was when checked (it
    /// changed while it was read); its records from there on were not printed.
    pub fn finish(&self) -> Result<(), SbError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.files.iter().try_for_each(|c| c.file.unchanged())
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

    /// The heap prints in the order of libipt's ordered list (the linear queue ptemu kept
    /// before: a file put back goes before the files of the same TSC), on files whose times
    /// tie, repeat and go backwards, dumped up to times that rise unevenly.
    #[test]
    fn the_heap_merges_in_libipts_order() {
        let c = PeventConfig {
            sample_type: PERF_SAMPLE_TIME,
            ..Default::default()
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..50 {
            let files: Vec<Vec<u64>> = (0..1 + next(6))
                .map(|_| (0..next(12)).map(|_| 1 + next(10)).collect())
                .collect();
            let pevents = files.iter().enumerate().map(|(i, times)| {
                let bytes: Vec<u8> = times
                    .iter()
                    .flat_map(|t| record(PERF_RECORD_LOST_SAMPLES, 0, &[0; 8], &t.to_le_bytes()))
                    .collect();
                Pevent::read(&format!("{i}"), &bytes, &c).unwrap()
            });
            let flags = PrintFlags {
                filename: true,
                offset: true,
                ..Default::default()
            };
            let mut s = Session::new(pevents.collect(), flags);
            // The reference: libipt's list, (file, record) kept sorted by insertion.
            let mut queue: Vec<(usize, usize)> = Vec::new();
            let put = |queue: &mut Vec<(usize, usize)>, f: usize, k: usize| {
                if let Some(&t) = files[f].get(k) {
                    let at = queue
                        .iter()
                        .position(|&(g, j)| t <= files[g][j])
                        .unwrap_or(queue.len());
                    queue.insert(at, (f, k));
                }
            };
            for f in (0..files.len()).rev() {
                put(&mut queue, f, 0);
            }
            let mut tsc = 0;
            while tsc < 12 {
                let mut out = String::new();
                s.dump(tsc, &mut out);
                let mut want = String::new();
                while let Some(&(f, k)) = queue.first() {
                    if tsc < files[f][k] {
                        break;
                    }
                    queue.remove(0);
                    want.push_str(&format!("{f}:{:016x}  \n", k * 24));
                    put(&mut queue, f, k + 1);
                }
                assert_eq!(out, want, "{files:?} at {tsc}");
                tsc += next(3);
            }
            assert!(s.finish().is_ok());
        }
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
