//! `perf.data` output (`spec/perf-data.md`): a file Linux perf's own Intel PT decoder reads, so
//! `perf script` and the tools built on perf.data decode ptemu's traces.
//!
//! The layout follows perf's `tools/perf/util/header.c` (`struct perf_file_header`,
//! `struct perf_file_attr`), `include/uapi/linux/perf_event.h` (`struct perf_event_attr`, the
//! `PERF_RECORD_*` records) and `tools/perf/util/intel-pt.h` (the `AUXTRACE_INFO` private
//! fields). Everything is little-endian, as perf writes it on x86.

pub mod abi;
pub mod cuts;
pub mod elf;

use crate::regs::{CpuSignature, RtitCtl};
use crate::report::write_atomic;
use crate::simulate::fault::Plan;
use crate::simulate::{Options, Outcome};
use crate::sources::Format;
use abi::*;
use byteorder::{WriteBytesExt, LE};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// `PERFILE2`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PERFILE2");
/// The PMU type number the file gives the intel_pt event (its `attr.type`, and the AUXTRACE_INFO
/// field perf matches it with). Any number above the fixed types works; 8 is what Linux gives
/// intel_pt on most machines.
pub const PMU_TYPE: u32 = 8;
/// `sizeof(struct perf_event_attr)` written (PERF_ATTR_SIZE_VER7).
pub const ATTR_SIZE: usize = 128;
/// `sizeof(struct perf_file_header)`.
const FILE_HEADER_SIZE: u64 = 104;
/// The header feature bit of the CPU's identity string (perf's `HEADER_CPUID`).
const HEADER_CPUID: u32 = 9;
/// The header feature bit of the events' names (perf's `HEADER_EVENT_DESC`).
const HEADER_EVENT_DESC: u32 = 12;
/// The header feature bit of the PMUs' names by type number (perf's `HEADER_PMU_MAPPINGS`).
const HEADER_PMU_MAPPINGS: u32 = 16;
/// The header feature bit of the index of AUXTRACE records (perf's `HEADER_AUXTRACE`).
const HEADER_AUXTRACE: u32 = 18;
/// The id of the intel_pt event.
const EVENT_ID: u64 = 1;

/// The IA32_RTIT_CTL fields perf's intel_pt event carries in `attr.config`, at the same bit
/// positions (the PMU's `format/` directory: cyc 1, pwr_evt 4, fup_on_ptw 5, mtc 9, tsc 10,
/// noretcomp 11, ptw 12, branch 13, mtc_period 14-17, cyc_thresh 19-22, psb_period 24-27).
const CONFIG_FROM_CTL: u64 = 1 << 1
    | 1 << 4
    | 1 << 5
    | 1 << 9
    | 1 << 10
    | 1 << 11
    | 1 << 12
    | 1 << 13
    | 0xf << 14
    | 0xf << 19
    | 0xf << 24;

/// What goes into a perf.data file besides the trace bytes.
#[derive(Clone, Debug)]
pub struct Spec {
    /// IA32_RTIT_CTL as the trace was made with.
    pub ctl: RtitCtl,
    /// TSC:ART ratio (CPUID.15H EBX/EAX).
    pub tsc_ctc: (u32, u32),
    /// The nominal (max non-turbo) ratio.
    pub max_nonturbo_ratio: u8,
    /// Process the trace belongs to, and its main thread's tid.
    pub pid: u32,
    /// The process's other threads, each with the thread that started it (PD7): a FORK and a
    /// COMM record each, and their traces in AUX buffers of their own.
    pub threads: Vec<(u32, u32)>,
    /// Its command name.
    pub comm: String,
    /// The code image: path as the MMAP2 record names it, load address, length, file offset.
    pub image: Option<Mapping>,
    /// More files mapped into the process (a real program's executable, `ld.so`, libraries:
    /// `ptemu run`), an MMAP2 record each after the image's.
    pub maps: Vec<Mapping>,
    /// The TSC when tracing started: the sideband records carry it as perf time (PD5).
    pub start_tsc: u64,
    /// The address filters, in the form `perf record --filter` takes (`filter A/SIZE@FILE`,
    /// `tracestop A/SIZE@FILE`, comma-separated), or empty.
    pub filter: String,
    /// The traced CPU's signature, written as the `HEADER_CPUID` feature (PD9): perf chooses
    /// its per-model decoder workarounds by it.
    pub cpu: Option<CpuSignature>,
}

/// A file mapped into the traced process (an MMAP2 record).
#[derive(Clone, Debug)]
pub struct Mapping {
    /// The path perf opens.
    pub path: String,
    /// Load address.
    pub addr: u64,
    /// Mapped length.
    pub len: u64,
    /// File offset of `addr`.
    pgoff: u64,
    /// The TSC when it was mapped, for code mapped while the program ran (QE17, PD8); none:
    /// mapped before tracing started.
    pub tsc: Option<u64>,
}

impl Mapping {
    /// The file offset of `addr`.
    pub fn pgoff(&self) -> u64 {
        self.pgoff
    }

    /// `path` mapped at `addr` for `len` bytes from file offset `pgoff`.
    pub fn new(path: String, addr: u64, len: u64, pgoff: u64) -> Self {
        Mapping {
            path,
            addr,
            len,
            pgoff,
            tsc: None,
        }
    }

    /// This mapping, made when the TSC was `tsc`.
    pub fn at(mut self, tsc: u64) -> Self {
        self.tsc = Some(tsc);
        self
    }
}

/// The `perf_event_attr` of the intel_pt event (`ATTR_SIZE` bytes).
fn attr(spec: &Spec) -> Vec<u8> {
    let mut a = Vec::with_capacity(ATTR_SIZE);
    let ctl = spec.ctl;
    let config = 1 | (ctl.bits() & CONFIG_FROM_CTL);
    // disabled(0), exclude_user(4), exclude_kernel(5), exclude_hv(6), sample_id_all(18): perf
    // orders events (which its Intel PT decoder requires) only with sample_id_all.
    let flags: u64 = 1 | u64::from(!ctl.user()) << 4 | u64::from(!ctl.os()) << 5 | 1 << 6 | 1 << 18;
    let time = if timed(spec) { PERF_SAMPLE_TIME } else { 0 };
    let sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | time | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;
    let mut put = |v: u64| a.write_u64::<LE>(v).expect("to memory");
    put(u64::from(PMU_TYPE) | (ATTR_SIZE as u64) << 32); // type, size
    put(config);
    put(1); // sample_period
    put(sample_type);
    put(0); // read_format
    put(flags);
    a.resize(ATTR_SIZE, 0);
    a
}

/// perf's TSC-to-time conversion: time = (TSC * mult) >> shift, so the TSC runs at mult / 2^shift
/// GHz; with the nominal ratio at 100 MHz a bus tick, mult = 2^shift / (ratio / 10).
const TIME_SHIFT: u64 = 32;

/// The perf time of the TSC when tracing started (`(tsc * mult) >> shift`, TIME_ZERO 0).
fn perf_time(spec: &Spec) -> u64 {
    tsc_time(spec, spec.start_tsc)
}

/// The perf time of TSC `tsc`.
fn tsc_time(spec: &Spec, tsc: u64) -> u64 {
    ((u128::from(tsc) * u128::from(time_mult(spec.max_nonturbo_ratio))) >> TIME_SHIFT) as u64
}

fn time_mult(nominal_ratio: u8) -> u64 {
    (10u64 << TIME_SHIFT) / u64::from(nominal_ratio.max(1))
}

/// The AUXTRACE_INFO record: perf's intel_pt parameters (`intel-pt.h`'s INTEL_PT_* order).
fn auxtrace_info(spec: &Spec) -> io::Result<Vec<u8>> {
    let priv_fields: [u64; 17] = [
        u64::from(PMU_TYPE),
        TIME_SHIFT,
        time_mult(spec.max_nonturbo_ratio),
        0, // TIME_ZERO
        1, // CAP_USER_TIME_ZERO
        // The *_BIT fields are masks of attr.config bits (perf_pmu__format_bits), not indices.
        1 << 10,   // TSC_BIT
        1 << 11,   // NORETCOMP_BIT
        0,         // HAVE_SCHED_SWITCH
        0,         // SNAPSHOT_MODE
        0,         // PER_CPU_MMAPS: per-thread buffers
        1 << 9,    // MTC_BIT
        0xf << 14, // MTC_FREQ_BITS
        u64::from(spec.tsc_ctc.0),
        u64::from(spec.tsc_ctc.1),
        1 << 1, // CYC_BIT
        u64::from(spec.max_nonturbo_ratio),
        spec.filter.len() as u64, // FILTER_STR_LEN, then the string, NUL-padded to 8 bytes
    ];
    let filter = if spec.filter.is_empty() {
        Vec::new()
    } else {
        padded_str(&spec.filter)
    };
    let size = 8 + 8 + 8 * priv_fields.len() + filter.len();
    let mut r = Vec::with_capacity(size);
    header(&mut r, PERF_RECORD_AUXTRACE_INFO, 0, size)?;
    r.write_u32::<LE>(PERF_AUXTRACE_INTEL_PT).expect("to memory");
    r.write_u32::<LE>(0).expect("to memory");
    for v in priv_fields {
        r.write_u64::<LE>(v).expect("to memory");
    }
    r.extend_from_slice(&filter);
    Ok(r)
}

/// The `filter` string for IA32_RTIT_CTL's ADDRn_CFG and the ADDRn_A/B values `msrs` writes
/// (FilterEn ranges as `filter`, TraceStop ranges as `tracestop`), as `perf record` leaves it: in
/// offsets of the mapped file (`image`), each range cut to the part of the image it covers.
pub fn filter_string(ctl: RtitCtl, msrs: &[(u32, u64)], image: &Mapping) -> String {
    let mut parts = Vec::new();
    let addr = crate::regs::Msr::addr_values(msrs.iter().copied());
    let last = image.addr + image.len.max(1) - 1;
    for n in 0..4u32 {
        let kind = match ctl.addr_cfg(n as usize) {
            1 => "filter",
            2 => "tracestop",
            _ => continue,
        };
        let (a, b) = (
            addr[2 * n as usize].max(image.addr),
            addr[2 * n as usize + 1].min(last),
        );
        if a <= b {
            let start = image.pgoff + (a - image.addr);
            parts.push(format!("{kind} {start:#x}/{:#x}@{}", b - a + 1, image.path));
        }
    }
    parts.join(",")
}

/// With TSCEn the samples have a time (PD5): perf decodes in time order; without it (no TSC in
/// the trace) perf decodes timeless.
fn timed(spec: &Spec) -> bool {
    spec.ctl.tsc_en()
}

/// The size of the `sample_id` trailer: TID, TIME (when [`timed`]), CPU, IDENTIFIER.
fn sample_id_size(spec: &Spec) -> usize {
    if timed(spec) {
        32
    } else {
        24
    }
}

/// The `sample_id` trailer of a non-sample record (`sample_id_all`, in `sample_type` order: TID,
/// TIME when [`timed`], CPU, IDENTIFIER), for the main thread.
fn sample_id(r: &mut Vec<u8>, spec: &Spec) {
    sample_id_of(r, spec, spec.pid);
}

/// [`sample_id`] for thread `tid`.
fn sample_id_of(r: &mut Vec<u8>, spec: &Spec, tid: u32) {
    sample_id_at(r, spec, tid, spec.start_tsc);
}

/// [`sample_id_of`] at the time of TSC `tsc`.
fn sample_id_at(r: &mut Vec<u8>, spec: &Spec, tid: u32, tsc: u64) {
    for v in [spec.pid, tid] {
        r.write_u32::<LE>(v).expect("to memory");
    }
    if timed(spec) {
        r.write_u64::<LE>(tsc_time(spec, tsc)).expect("to memory");
    }
    r.write_u64::<LE>(0).expect("to memory"); // cpu, res
    r.write_u64::<LE>(EVENT_ID).expect("to memory");
}

/// COMM, MMAP2 and ITRACE_START for the traced process.
fn sideband(spec: &Spec) -> io::Result<Vec<u8>> {
    let mut r = Vec::new();
    let comm = padded_str(&spec.comm);
    header(
        &mut r,
        PERF_RECORD_COMM,
        0,
        8 + 8 + comm.len() + sample_id_size(spec),
    )?;
    r.write_u32::<LE>(spec.pid).expect("to memory");
    r.write_u32::<LE>(spec.pid).expect("to memory");
    r.extend_from_slice(&comm);
    sample_id(&mut r, spec);
    for m in spec.image.iter().chain(&spec.maps).filter(|m| m.tsc.is_none()) {
        mmap2(&mut r, spec, m)?;
    }
    // PD7: each other thread as perf records one that starts while it records: FORK (pid, ppid,
    // tid, ptid, time), then COMM.
    for &(tid, parent) in &spec.threads {
        header(&mut r, PERF_RECORD_FORK, 0, 8 + 16 + 8 + sample_id_size(spec))?;
        for v in [spec.pid, spec.pid, tid, parent] {
            r.write_u32::<LE>(v).expect("to memory");
        }
        r.write_u64::<LE>(if timed(spec) { perf_time(spec) } else { 0 })
            .expect("to memory");
        sample_id_of(&mut r, spec, tid);
        header(
            &mut r,
            PERF_RECORD_COMM,
            0,
            8 + 8 + comm.len() + sample_id_size(spec),
        )?;
        r.write_u32::<LE>(spec.pid).expect("to memory");
        r.write_u32::<LE>(tid).expect("to memory");
        r.extend_from_slice(&comm);
        sample_id_of(&mut r, spec, tid);
    }
    for tid in std::iter::once(spec.pid).chain(spec.threads.iter().map(|t| t.0)) {
        header(&mut r, PERF_RECORD_ITRACE_START, 0, 16 + sample_id_size(spec))?;
        r.write_u32::<LE>(spec.pid).expect("to memory");
        r.write_u32::<LE>(tid).expect("to memory");
        sample_id_of(&mut r, spec, tid);
    }
    Ok(r)
}

/// The MMAP2 record of `m`, at its time (or tracing's start).
fn mmap2(r: &mut Vec<u8>, spec: &Spec, m: &Mapping) -> io::Result<()> {
    let name = padded_str(&m.path);
    header(
        r,
        PERF_RECORD_MMAP2,
        PERF_RECORD_MISC_USER,
        8 + 8 + 24 + 24 + 8 + name.len() + sample_id_size(spec),
    )?;
    for v in [spec.pid, spec.pid] {
        r.write_u32::<LE>(v).expect("to memory");
    }
    for v in [m.addr, m.len, m.pgoff] {
        r.write_u64::<LE>(v).expect("to memory");
    }
    r.extend_from_slice(&[0; 24]); // maj, min, ino, ino_generation
    r.write_u32::<LE>(5).expect("to memory"); // PROT_READ | PROT_EXEC
    r.write_u32::<LE>(2).expect("to memory"); // MAP_PRIVATE
    r.extend_from_slice(&name);
    sample_id_at(r, spec, spec.pid, m.tsc.unwrap_or(spec.start_tsc));
    Ok(())
}

/// PD8: the mappings made while the program ran (code it wrote), in time order, after the AUX
/// data and closed by a FINISHED_ROUND: perf has queued every AUX buffer when it reaches them,
/// and decodes each thread up to a record's time before it applies the record.
fn later_maps(spec: &Spec) -> io::Result<Vec<u8>> {
    let mut later: Vec<&Mapping> = spec.maps.iter().filter(|m| m.tsc.is_some()).collect();
    if later.is_empty() {
        return Ok(Vec::new());
    }
    later.sort_by_key(|m| m.tsc);
    let mut r = Vec::new();
    for m in later {
        mmap2(&mut r, spec, m)?;
    }
    header(&mut r, PERF_RECORD_FINISHED_ROUND, 0, 8)?;
    Ok(r)
}

/// One thread's trace for [`write_threads`]: its tid, the stream, and its AUX buffers' lengths
/// (as [`chunks`] makes them).
#[allow(missing_debug_implementations)] // a reader of any kind
pub struct AuxTrace<'a> {
    /// The thread's tid.
    pub tid: u32,
    /// Its trace bytes, read in order.
    pub trace: &'a mut dyn Read,
    /// Its AUX buffers' lengths.
    pub chunks: Vec<u64>,
    /// Each buffer padded to 8 bytes with zeros (PADs), as `perf record` pads AUX data: right
    /// where every buffer ends at a packet's end. False for buffers cut inside packets
    /// ([`AuxCuts::InsidePackets`]), where a PAD would land inside a packet: only the last is
    /// padded.
    pub pad_each: bool,
}

impl AuxTrace<'_> {
    /// The bytes that follow the AUXTRACE header of buffer `k` (of length `n`): `n` padded to 8
    /// where [`AuxTrace::pad_each`] (or the last buffer) says so.
    fn padded(&self, k: usize, n: u64) -> u64 {
        if self.pad_each || k + 1 == self.chunks.len() {
            n.div_ceil(8) * 8
        } else {
            n
        }
    }
}

/// The AUX buffers of a `len`-byte stream cut at each of `cuts` (stream offsets, in order; the
/// packet boundaries [`cuts::at_packet_starts`] gives, PD13), empty buffers dropped. Each is
/// padded to 8 bytes where it is written ([`AuxTrace::pad_each`]).
pub fn chunks(len: u64, cuts: &[u64]) -> Vec<u64> {
    let mut v = Vec::new();
    let mut at = 0;
    for &c in cuts {
        if c > at && c < len {
            v.push(c - at);
            at = c;
        }
    }
    if len > at {
        v.push(len - at);
    }
    v
}

/// How a run's trace is cut into AUX buffers (PD1, PD13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuxCuts {
    /// One buffer: a fault changed what the consumer got (`wrap`, `gap`, `corrupt*`).
    Whole,
    /// A buffer per region a ToPA PMI reported, each cut moved back to a packet's start, as a
    /// driver that stops tracing before it takes the data gets them.
    AtPmis,
    /// Inside packets on purpose ([`cuts::inside_packets`]): the corpus case `aux-split`.
    InsidePackets,
}

impl AuxCuts {
    /// [`AuxCuts::Whole`] when `plan` changes what the consumer got, else [`AuxCuts::AtPmis`].
    pub fn for_plan(plan: &Plan) -> Self {
        if plan.changes_delivery() {
            AuxCuts::Whole
        } else {
            AuxCuts::AtPmis
        }
    }

    /// The offsets the buffers of `trace_path`'s stream are cut at, for the PMIs at `pmis`.
    pub fn offsets(self, trace_path: &Path, pmis: &[u64]) -> io::Result<Vec<u64>> {
        if self == AuxCuts::Whole || (self == AuxCuts::AtPmis && pmis.is_empty()) {
            return Ok(Vec::new());
        }
        let file = fs::File::open(trace_path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the file is the run's own trace.pt, written and closed before, which nothing
        // changes while it is mapped (the staging directory is ptemu's).
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(match self {
            AuxCuts::InsidePackets => cuts::inside_packets(&map).into_iter().map(|c| c.0).collect(),
            _ => cuts::at_packet_starts(&map, pmis),
        })
    }
}

/// Writes a perf.data file to `out`: the file header, the intel_pt attribute, then AUXTRACE_INFO,
/// the sideband records and one AUXTRACE record per chunk of `trace` (read from it in order;
/// `chunks` are the lengths, summing to the trace's length, cut where [`chunks`] makes them);
/// each buffer is padded to 8 bytes with PADs, as perf pads AUX data.
pub fn write<R: Read, W: Write + ?Sized>(
    spec: &Spec,
    trace: &mut R,
    chunks: &[u64],
    out: &mut W,
) -> io::Result<()> {
    write_threads(
        spec,
        &mut [AuxTrace {
            tid: spec.pid,
            trace,
            chunks: chunks.to_vec(),
            pad_each: true,
        }],
        out,
    )
}

/// [`write()`] for a process of several threads (PD7): the main thread's trace first, then each
/// of `spec.threads`' in its own AUX buffers (their own `idx`, tagged with the thread's tid), as
/// perf records a per-thread recording.
pub fn write_threads<W: Write + ?Sized>(
    spec: &Spec,
    traces: &mut [AuxTrace<'_>],
    out: &mut W,
) -> io::Result<()> {
    let mut records = auxtrace_info(spec)?;
    records.extend(sideband(spec)?);
    header(&mut records, PERF_RECORD_FINISHED_ROUND, 0, 8)?;
    let later = later_maps(spec)?;
    let attrs_offset = FILE_HEADER_SIZE;
    let attr_size = ATTR_SIZE as u64 + 16;
    let ids_offset = attrs_offset + attr_size;
    let data_offset = ids_offset + 8;
    // Where each AUXTRACE record will be, and its header's size, for the AUXTRACE feature's
    // index (PD10); its data, padded to 8 bytes, follows the header. The later maps follow the
    // last one.
    let mut index = Vec::new();
    let mut at = data_offset + records.len() as u64;
    for t in traces.iter() {
        for (k, &n) in t.chunks.iter().enumerate() {
            index.push((at, 48));
            at += 48 + t.padded(k, n);
        }
    }
    let data_size = at + later.len() as u64 - data_offset;
    let features = features(spec, &index);
    let mut h = Vec::with_capacity(data_offset as usize);
    for v in [
        MAGIC,
        FILE_HEADER_SIZE,
        attr_size,
        attrs_offset,
        attr_size,
        data_offset,
        data_size,
        0,
        0,
    ] {
        h.write_u64::<LE>(v)?;
    }
    let mut bits = [0u64; 4];
    for (bit, _) in &features {
        bits[(bit / 64) as usize] |= 1 << (bit % 64);
    }
    for b in bits {
        h.write_u64::<LE>(b)?;
    }
    h.extend_from_slice(&attr(spec));
    h.write_u64::<LE>(ids_offset)?;
    h.write_u64::<LE>(8)?;
    h.write_u64::<LE>(EVENT_ID)?;
    out.write_all(&h)?;
    out.write_all(&records)?;
    let mut buf = vec![0u8; 1 << 16];
    for (idx, t) in traces.iter_mut().enumerate() {
        let mut offset = 0u64;
        for k in 0..t.chunks.len() {
            let n = t.chunks[k];
            let padded = t.padded(k, n);
            let mut r = Vec::with_capacity(48);
            header(&mut r, PERF_RECORD_AUXTRACE, 0, 48)?;
            for v in [padded, offset, spec.start_tsc] {
                r.write_u64::<LE>(v)?;
            }
            // idx, tid, cpu, reserved. CPU 0, not -1 (a per-thread buffer): with TIME, perf
            // 6.1 crashes on a per-thread buffer (PD5). Each thread is a queue of its own by
            // its idx (PD7).
            for v in [idx as u32, t.tid, 0, 0] {
                r.write_u32::<LE>(v)?;
            }
            out.write_all(&r)?;
            let mut left = n;
            while left > 0 {
                let k = left.min(buf.len() as u64) as usize;
                t.trace.read_exact(&mut buf[..k])?;
                out.write_all(&buf[..k])?;
                left -= k as u64;
            }
            out.write_all(&[0; 8][..(padded - n) as usize])?;
            offset += n;
        }
    }
    out.write_all(&later)?;
    // The feature sections follow the data: one (offset, size) pair per feature bit set, in
    // bit order, then their contents.
    let mut at = data_offset + data_size + 16 * features.len() as u64;
    let mut index = Vec::with_capacity(16 * features.len());
    for (_, body) in &features {
        index.write_u64::<LE>(at)?;
        index.write_u64::<LE>(body.len() as u64)?;
        at += body.len() as u64;
    }
    out.write_all(&index)?;
    for (_, body) in &features {
        out.write_all(body)?;
    }
    out.flush()
}

/// The header features written, each its bit and its section's bytes, in bit order (PD9, PD10);
/// `index` is each AUXTRACE record's file offset and header size (perf checks it is the
/// header's).
fn features(spec: &Spec, index: &[(u64, u64)]) -> Vec<(u32, Vec<u8>)> {
    let mut f = Vec::new();
    if let Some(cpu) = spec.cpu {
        // What perf's x86 get_cpuid() gives: vendor, family, model, stepping, in decimal.
        let id = format!("GenuineIntel,{},{},{}", cpu.family, cpu.model, cpu.stepping);
        f.push((HEADER_CPUID, header_string(&id)));
    }
    // The event's name, as `perf record -e intel_pt//u` leaves it: its attr, its ids, its name.
    let mut desc = Vec::new();
    desc.extend_from_slice(&1u32.to_le_bytes());
    desc.extend_from_slice(&(ATTR_SIZE as u32).to_le_bytes());
    desc.extend_from_slice(&attr(spec));
    desc.extend_from_slice(&1u32.to_le_bytes());
    desc.extend_from_slice(&header_string(&event_name(spec)));
    desc.extend_from_slice(&EVENT_ID.to_le_bytes());
    f.push((HEADER_EVENT_DESC, desc));
    // The PMU the event's type number is: perf names type 8 by it.
    let mut pmus = Vec::new();
    pmus.extend_from_slice(&1u32.to_le_bytes());
    pmus.extend_from_slice(&PMU_TYPE.to_le_bytes());
    pmus.extend_from_slice(&header_string("intel_pt"));
    f.push((HEADER_PMU_MAPPINGS, pmus));
    // Where the AUXTRACE records are, as perf record indexes them: perf then knows the file
    // holds an AUX area trace (and lets `perf script -F` name fields its synthesized events have).
    let mut aux = Vec::with_capacity(8 + 16 * index.len());
    aux.extend_from_slice(&(index.len() as u64).to_le_bytes());
    for &(offset, size) in index {
        aux.extend_from_slice(&offset.to_le_bytes());
        aux.extend_from_slice(&size.to_le_bytes());
    }
    f.push((HEADER_AUXTRACE, aux));
    f
}

/// The event's name as perf writes it for `-e intel_pt//` with its privilege modifiers: `u`
/// when only user code is traced, `k` when only the kernel's.
pub fn event_name(spec: &Spec) -> String {
    let m = match (spec.ctl.user(), spec.ctl.os()) {
        (true, false) => "u",
        (false, true) => "k",
        _ => "",
    };
    format!("intel_pt//{m}")
}

/// A string as perf's header features hold one: its length (the string, its NUL and the
/// padding to a multiple of 64 bytes) as a u32, then those bytes.
fn header_string(s: &str) -> Vec<u8> {
    let len = (s.len() + 1).div_ceil(64) * 64;
    let mut v = Vec::with_capacity(4 + len);
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
    v.resize(4 + len, 0);
    v
}

/// The name perf.data gives `image.elf`: a path at the root, which perf resolves under `--symfs
/// CASE` (`CASE/image.elf`), so a case decodes wherever it is copied (PD12).
pub const IMAGE_ELF: &str = "/image.elf";

/// perf's option that finds `image.elf` in `case` (PD12): `--symfs CASE`, quoted for a shell.
pub fn symfs_option(case: &Path) -> io::Result<String> {
    // Components again: no trailing `/` (perf joins `/image.elf` to it).
    let dir: PathBuf = std::path::absolute(case)?.components().collect();
    Ok(format!(
        "--symfs {}",
        crate::image::quote(&dir.display().to_string())
    ))
}

/// Writes `code`, loaded at `base`, as `staged/image.elf` ([`elf::image`]); gives the mapping
/// that names it as [`IMAGE_ELF`], found by perf under `--symfs` of the case directory
/// (`ptemu simulate --perf-data`, `ptemu pttc --perf-data`).
pub fn write_image_elf(staged: &Path, code: &[u8], base: u64) -> io::Result<Mapping> {
    let (elf, pgoff) = elf::image(code, base);
    fs::write(staged.join("image.elf"), elf)?;
    Ok(Mapping::new(IMAGE_ELF.to_owned(), base, code.len() as u64, pgoff))
}

/// Writes `staged/image.elf` (when the run has a code image) and `staged/perf.data` for the run
/// whose `trace.pt` is in `staged`, a directory to be renamed to `final_dir` (perf finds
/// `image.elf` there by `--symfs`, PD12); returns the perf command that decodes it. `ptemu
/// simulate --perf-data` and `ptemu corpus --perf-data` (spec/perf-data.md).
pub fn write_run(
    staged: &Path,
    final_dir: &Path,
    opts: &Options,
    outcome: &Outcome,
    aux: AuxCuts,
    name: &str,
    maps: Vec<Mapping>,
) -> io::Result<String> {
    let image = match &outcome.image {
        Some(img) => Some(write_image_elf(staged, &img.bytes, img.base)?),
        None => None,
    };
    let filter = image
        .as_ref()
        .map_or(String::new(), |m| filter_string(opts.ctl, &opts.msrs, m));
    let symfs = match image {
        Some(_) => format!(" {}", symfs_option(final_dir)?),
        None => String::new(),
    };
    let spec = Spec {
        filter,
        image,
        ..process_spec(opts, name, maps, 1000, Vec::new())
    };
    let trace_path = staged.join("trace.pt");
    let len = fs::metadata(&trace_path)?.len();
    // One AUX buffer per region a PMI reported, as perf collects them; the rest after the last.
    let chunks = chunks(len, &aux.offsets(&trace_path, &outcome.pmis)?);
    let mut trace = io::BufReader::new(fs::File::open(&trace_path)?);
    write_atomic(&staged.join("perf.data"), |w| {
        let mut aux_trace = AuxTrace {
            tid: spec.pid,
            trace: &mut trace,
            chunks,
            pad_each: aux != AuxCuts::InsidePackets,
        };
        write_threads(&spec, std::slice::from_mut(&mut aux_trace), w)
    })?;
    // `e` shows perf's error lines, so the output goes into `ptemu verify` as it is (a decoder
    // that hides its errors fails a damaged case, TR6). A real program's trace decodes against
    // its own files: perf names their symbols.
    let fields = if opts.format == Format::Qemu {
        "--itrace=i0nse -F ip,sym"
    } else {
        "--itrace=i0nse -F ip"
    };
    Ok(format!(
        "perf script -i {}{symfs} {fields}",
        crate::image::quote(
            &std::path::absolute(final_dir.join("perf.data"))?
                .display()
                .to_string()
        )
    ))
}

/// The spec of a process's perf.data: `pid` and its other `threads` (tid, parent), `maps` the
/// files its code ran from; no code image, no filter.
fn process_spec(opts: &Options, name: &str, maps: Vec<Mapping>, pid: u32, threads: Vec<(u32, u32)>) -> Spec {
    let clock = &opts.tracer.clock;
    Spec {
        filter: String::new(),
        ctl: opts.ctl,
        tsc_ctc: (clock.tsc_per_art, 1),
        max_nonturbo_ratio: clock.nominal_ratio,
        start_tsc: clock.tsc_start,
        maps,
        pid,
        threads,
        comm: Path::new(name)
            .file_name()
            .map_or("ptemu".into(), |n| n.to_string_lossy().chars().take(15).collect()),
        image: None,
        cpu: opts.layout.cpu.signature,
    }
}

/// A thread's trace for [`write_process`]: its tid, the thread that started it, its `trace.pt`
/// and the stream offsets of its PMIs (where its AUX buffers are cut).
#[derive(Clone, Debug)]
pub struct ThreadTrace {
    /// Its tid.
    pub tid: u32,
    /// The thread that started it.
    pub parent: u32,
    /// Its trace.
    pub path: std::path::PathBuf,
    /// Its PMIs' stream offsets.
    pub cuts: Vec<u64>,
}

/// `perf.data` for a traced process of several threads (`ptemu run`, PD6), written to `out`:
/// process `pid`, whose main thread's trace is `main`, and its other `threads`, every one
/// decodable with `perf script --tid`.
pub fn write_process(
    out: &Path,
    opts: &Options,
    name: &str,
    maps: Vec<Mapping>,
    pid: u32,
    main: &ThreadTrace,
    threads: &[ThreadTrace],
) -> io::Result<()> {
    let spec = process_spec(
        opts,
        name,
        maps,
        pid,
        threads.iter().map(|t| (t.tid, t.parent)).collect(),
    );
    let mut readers = Vec::new();
    for t in std::iter::once(main).chain(threads) {
        let len = fs::metadata(&t.path)?.len();
        let cuts = AuxCuts::AtPmis.offsets(&t.path, &t.cuts)?;
        readers.push((
            t.tid,
            io::BufReader::new(fs::File::open(&t.path)?),
            chunks(len, &cuts),
        ));
    }
    let mut traces: Vec<AuxTrace<'_>> = readers
        .iter_mut()
        .map(|(tid, r, c)| AuxTrace {
            tid: *tid,
            trace: r,
            chunks: std::mem::take(c),
            pad_each: true,
        })
        .collect();
    write_atomic(out, |w| write_threads(&spec, &mut traces, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &str) -> Spec {
        Spec {
            ctl: RtitCtl::new()
                .with_trace_en(true)
                .with_branch_en(true)
                .with_user(true),
            tsc_ctc: (100, 1),
            max_nonturbo_ratio: 24,
            start_tsc: 0x1_0000_0000,
            pid: 1000,
            threads: Vec::new(),
            comm: "t".into(),
            image: Some(Mapping::new(path.into(), 0x400000, 0x2000, 0x1000)),
            maps: Vec::new(),
            filter: String::new(),
            cpu: Some(CpuSignature {
                family: 6,
                model: 92,
                stepping: 9,
            }),
        }
    }

    #[test]
    fn chunks_are_cut_where_told_and_empty_ones_dropped() {
        assert_eq!(chunks(100, &[]), vec![100]);
        assert_eq!(chunks(100, &[35, 64, 64, 99]), vec![35, 29, 35, 1]);
        assert_eq!(chunks(100, &[100, 200]), vec![100]);
        assert_eq!(chunks(0, &[8]), Vec::<u64>::new());
    }

    #[test]
    fn the_file_reads_back_record_by_record() {
        let trace = [0x99u8; 21];
        let mut out = Vec::new();
        write(&spec("/x/image.elf"), &mut &trace[..], &[16, 5], &mut out).unwrap();
        let u64_at = |o: usize| u64::from_le_bytes(out[o..o + 8].try_into().unwrap());
        assert_eq!(u64_at(0), MAGIC);
        assert_eq!((u64_at(8), u64_at(16)), (104, 144));
        let (data, size) = (u64_at(40) as usize, u64_at(48) as usize);
        let end = data + size;
        // PD9, PD10: the features CPUID, EVENT_DESC, PMU_MAPPINGS and AUXTRACE, their sections
        // after the data, one after the other to the end of the file.
        let bits = 1 << 9 | 1 << 12 | 1 << 16 | 1 << 18;
        assert_eq!([u64_at(72), u64_at(80), u64_at(88), u64_at(96)], [bits, 0, 0, 0]);
        let section = |k: usize| (u64_at(end + 16 * k) as usize, u64_at(end + 16 * k + 8) as usize);
        let mut next = end + 64;
        for k in 0..4 {
            assert_eq!(section(k).0, next, "feature {k}");
            next += section(k).1;
        }
        assert_eq!(next, out.len());
        let u32_at = |o: usize| u32::from_le_bytes(out[o..o + 4].try_into().unwrap());
        let (cpuid, _) = section(0);
        assert_eq!(u32_at(cpuid), 64);
        assert_eq!(&out[cpuid + 4..cpuid + 24], b"GenuineIntel,6,92,9\0");
        // EVENT_DESC: 1 event, its attr, 1 id, its name, the id.
        let (desc, _) = section(1);
        assert_eq!((u32_at(desc), u32_at(desc + 4)), (1, ATTR_SIZE as u32));
        assert_eq!(
            out[desc + 8..desc + 8 + ATTR_SIZE],
            attr(&spec("/x/image.elf"))[..]
        );
        let name = desc + 8 + ATTR_SIZE + 4;
        assert_eq!(&out[name + 4..name + 16], b"intel_pt//u\0");
        // PMU_MAPPINGS: type 8 is intel_pt.
        let (pmus, _) = section(2);
        assert_eq!((u32_at(pmus), u32_at(pmus + 4)), (1, PMU_TYPE));
        assert_eq!(&out[pmus + 12..pmus + 21], b"intel_pt\0");
        // AUXTRACE: each entry the offset of an AUXTRACE record and its header's size.
        let (aux, _) = section(3);
        assert_eq!(u64_at(aux), 2);
        for e in 0..2 {
            let (offset, size) = (u64_at(aux + 8 + 16 * e) as usize, u64_at(aux + 16 + 16 * e));
            assert_eq!((u32_at(offset), size), (PERF_RECORD_AUXTRACE, 48), "entry {e}");
        }
        // Every record is a multiple of 8 and the AUXTRACE data follows its header.
        let mut at = data;
        let mut kinds = vec![];
        while at < end {
            let kind = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
            let len = usize::from(u16::from_le_bytes([out[at + 6], out[at + 7]]));
            assert_eq!(len % 8, 0, "record {kind} at {at}");
            kinds.push(kind);
            at += len;
            if kind == PERF_RECORD_AUXTRACE {
                at += u64_at(at - 40) as usize;
            }
        }
        assert_eq!(at, end);
        assert_eq!(kinds, [70, 3, 10, 12, 68, 71, 71]);
    }

    #[test]
    fn a_path_too_long_for_a_record_is_an_error_not_a_broken_file() {
        let long = format!("/{}", "a".repeat(70_000));
        let e = write(&spec(&long), &mut &[0u8; 8][..], &[8], &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("64 KiB"), "{e}");
    }

    #[test]
    fn filters_are_file_offsets_cut_to_the_image() {
        let ctl = RtitCtl::new()
            .with_addr0_cfg(1)
            .with_addr1_cfg(2)
            .with_addr2_cfg(1);
        let m = Mapping::new("/i.elf".into(), 0x400000, 0x2000, 0x1000);
        let msrs = [
            (0x580, 0x3ff000),
            (0x581, 0x400fff),
            (0x582, 0x401000),
            (0x583, 0x401003),
            (0x584, 0x500000),
            (0x585, 0x500fff),
        ];
        assert_eq!(
            filter_string(ctl, &msrs, &m),
            "filter 0x1000/0x1000@/i.elf,tracestop 0x2000/0x4@/i.elf"
        );
    }
}
