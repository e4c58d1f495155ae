//! `report.json` and the region dumps of `ptemu write` (contract in the README).

use crate::event_log::EventLog;
use crate::memory::PhysMemory;
use crate::output::EventCounts;
use crate::output::{OutputEvent, OutputStats, OutputUnit};
use serde::Serialize;
use std::fs;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

/// The version of the `report.json` layout (README, "report.json"): 2 writes MSRs and addresses
/// as `"0x..."` strings (version 1, before the field existed, wrote JSON numbers).
pub const REPORT_VERSION: u32 = 2;

/// The MSRs as the report shows them (serialized as `"0x..."` strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MsrSnapshot {
    /// IA32_RTIT_CTL.
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub rtit_ctl: u64,
    /// IA32_RTIT_STATUS.
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub rtit_status: u64,
    /// IA32_RTIT_OUTPUT_BASE.
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub output_base: u64,
    /// IA32_RTIT_OUTPUT_MASK_PTRS.
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub output_mask_ptrs: u64,
    /// IA32_PERF_GLOBAL_STATUS.
    #[serde(serialize_with = "crate::serde_hex::u64")]
    pub perf_global_status: u64,
}

impl MsrSnapshot {
    /// The unit's MSRs now.
    pub fn of(unit: &OutputUnit) -> Self {
        let r = unit.registers();
        MsrSnapshot {
            rtit_ctl: r.ctl.bits(),
            rtit_status: r.status.bits(),
            output_base: u64::from(r.output_base),
            output_mask_ptrs: r.mask_ptrs.bits(),
            perf_global_status: r.global_status.bits(),
        }
    }
}

/// The whole `report.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// MSR values (after TraceEn=0 when written by `ptemu write`).
    pub msr: MsrSnapshot,
    /// The first events, in order (every one in `events.jsonl`).
    pub events: Vec<OutputEvent>,
    /// Every event, counted by kind.
    pub event_counts: EventCounts,
    /// How many events there were in all.
    pub events_total: u64,
    /// Byte counts.
    pub stats: OutputStats,
}

impl Report {
    /// Snapshot of `unit` now, with the events it still holds (none drained).
    pub fn of(unit: &OutputUnit) -> Self {
        let mut log = EventLog::new(usize::MAX);
        for e in unit.events() {
            // Without a writer, recording cannot fail.
            let _ = log.record(e);
        }
        Report::with_log(unit, &log)
    }

    /// Snapshot of `unit` now, with the events of `log` (the unit drained into it).
    pub fn with_log(unit: &OutputUnit, log: &EventLog) -> Self {
        Report {
            version: REPORT_VERSION,
            msr: MsrSnapshot::of(unit),
            events: log.first().to_vec(),
            event_counts: log.counts(),
            events_total: log.counts().total(),
            stats: unit.stats(),
        }
    }
}

/// Writes `path` through a temporary sibling and a rename, so no reader sees half a file.
pub fn write_atomic(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    write_file_atomic(path, |f| {
        let mut w = io::BufWriter::new(f);
        fill(&mut w)?;
        w.flush()
    })
}

/// [`write_atomic`] with the file itself to fill (it may seek and set its length).
fn write_file_atomic(path: &Path, fill: impl FnOnce(&mut fs::File) -> io::Result<()>) -> io::Result<()> {
    let tmp = tmp_sibling(path);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        fill(&mut f)?;
        f.sync_all()
    })();
    match result.and_then(|_| fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The temporary name [`write_atomic`] writes `path` under: `NAME.tmp-PID` beside it.
pub fn tmp_sibling(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// File name of a region dump: its base in lowercase hex, `0x100000.bin`.
pub fn region_file_name(base: u64) -> String {
    format!("{base:#x}.bin")
}

/// Copies `size` bytes of `mem` from `base` to `out`, 1 MiB at a time.
pub fn copy_region<M: PhysMemory>(mem: &M, base: u64, size: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(size as usize)];
    let mut done = 0u64;
    while done < size {
        let n = buf.len().min((size - done) as usize);
        mem.read(base + done, &mut buf[..n]).map_err(io::Error::other)?;
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// Copies `size` bytes of `mem` from `base` into `file` as a sparse file: what `mem` stored is
/// written, up to 1 MiB at a time, and every page it never stored (`may_hold_data` false) is a
/// hole the file seeks over, so a 4 GiB region that received 18 bytes takes one page of disk. A
/// reader sees the same `size` bytes as [`copy_region`] writes (holes read as zeros).
pub fn copy_region_sparse<M: PhysMemory>(
    mem: &M,
    base: u64,
    size: u64,
    file: &mut fs::File,
) -> io::Result<()> {
    const PAGE: u64 = 4096;
    const CHUNK: u64 = 1 << 20;
    let mut buf = Vec::new();
    let mut done = 0u64;
    while done < size {
        // The run of pages from `done` that are all stored or all not (a stored run at most
        // CHUNK long).
        let page = |at: u64| (PAGE - (base.wrapping_add(at) % PAGE)).min(size - at);
        let stored = mem.may_hold_data(base.wrapping_add(done), page(done));
        let mut n = page(done);
        while done + n < size && (!stored || n < CHUNK) {
            let step = page(done + n);
            if mem.may_hold_data(base.wrapping_add(done + n), step) != stored {
                break;
            }
            n += step;
        }
        if stored {
            buf.resize(n as usize, 0);
            mem.read(base.wrapping_add(done), &mut buf)
                .map_err(io::Error::other)?;
            file.write_all(&buf)?;
        } else {
            file.seek(io::SeekFrom::Start(done + n))?;
        }
        done += n;
    }
    file.set_len(size)
}

/// Writes `dir/report.json` ([`Report::of`] the unit) and `dir/regions/`; see
/// [`write_outputs_with`].
pub fn write_outputs<M: PhysMemory>(dir: &Path, unit: &OutputUnit, mem: &M) -> io::Result<()> {
    write_outputs_with(dir, unit, mem, &Report::of(unit))
}

/// Writes `dir/report.json` (`report`) and `dir/regions/` (one file per region that received
/// bytes, sparse: [`copy_region_sparse`]), replacing an earlier `regions/` only once the new one is complete.
pub fn write_outputs_with<M: PhysMemory, R: Serialize>(
    dir: &Path,
    unit: &OutputUnit,
    mem: &M,
    report: &R,
) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let regions = dir.join("regions");
    let staging = tmp_sibling(&regions);
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir(&staging)?;
    for (base, size) in unit.written_regions() {
        let path = staging.join(region_file_name(base));
        write_file_atomic(&path, |f| copy_region_sparse(mem, base, size, f))?;
    }
    if regions.exists() {
        fs::remove_dir_all(&regions)?;
    }
    fs::rename(&staging, &regions)?;
    write_atomic(&dir.join("report.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, report)?;
        w.write_all(b"\n")
    })
}
