//! Code the program wrote at run time (QE17): each version of each page a file of its own in
//! DIR/code/, mapped for perf and the libipt harness from the time the traced thread first ran
//! it; a rewritten page two threads ran is refused.

use super::threads::ThreadCase;
use super::RecordError;
use crate::perf_data::Mapping;
use crate::simulate;
use crate::sources::qemu::Sideband;
use std::path::Path;

/// One version of a page of code the program wrote (QE17), as the run writes it out.
pub(super) struct WrittenCode {
    pub version: u32,
    /// Its file (DIR/code/PAGE.VERSION.elf), where, and from when.
    pub mapping: Mapping,
}

/// The model's TSC once the traced thread has run `count` instructions: `ptemu run` makes no
/// cycles but the instructions' (CYCLES_PER_INSTRUCTION each) at a fixed core ratio.
fn tsc_after(opts: &simulate::Options, count: u64) -> u64 {
    let clock = crate::tracer::Clock::new(opts.tracer.clock);
    opts.tracer.clock.tsc_start.wrapping_add(
        clock.cycles_to_tsc(count.saturating_mul(u64::from(opts.tracer.cycles_per_instruction))),
    )
}

/// QE17: each version of each page of written code as a mapping of its file in DIR/code/: the
/// first version of a page from the start, each later one from halfway between the traced
/// thread's last run of the version before and its first run of this one (perf and the libipt
/// harness load it when their decoding reaches that time). A version this thread never ran
/// after another keeps the time of the one before.
pub(super) fn code_versions(out: &Path, s: &Sideband, opts: &simulate::Options) -> Vec<WrittenCode> {
    let mut v = Vec::with_capacity(s.code.len());
    // Each page's newest version so far.
    let mut newest = std::collections::HashMap::new();
    for c in &s.code {
        let before = newest.insert(c.page, c);
        let path = out.join("code").join(format!("{:x}.{}.elf", c.page, c.version));
        let path = std::path::absolute(&path).unwrap_or(path).display().to_string();
        let pgoff = crate::perf_data::elf::code_offset(c.page);
        let mut m = Mapping::new(path, c.page, c.bytes.len() as u64, pgoff);
        if let (Some(b), Some(first)) = (before, c.first) {
            let last = b.last.unwrap_or(0).min(first);
            m = m.at(tsc_after(opts, last + (first - last) / 2));
        }
        v.push(WrittenCode {
            version: c.version,
            mapping: m,
        });
    }
    v
}

/// [`code_versions`], with each version's file written into `staging/code/`.
pub(super) fn write_code(
    staging: &Path,
    out: &Path,
    s: &Sideband,
    opts: &simulate::Options,
) -> std::io::Result<Vec<WrittenCode>> {
    if s.code.is_empty() {
        return Ok(Vec::new());
    }
    let dir = staging.join("code");
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        s.code.iter().try_for_each(|c| {
            let (elf, _) = crate::perf_data::elf::image(&c.bytes, c.page);
            std::fs::write(dir.join(format!("{:x}.{}.elf", c.page, c.version)), elf)
        })
    });
    if let Err(e) = written {
        // No half of code/: the run says it has none.
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(code_versions(out, s, opts))
}

pub(super) fn code_json(code: &[WrittenCode]) -> serde_json::Value {
    serde_json::Value::Array(
        code.iter()
            .map(|c| {
                serde_json::json!({
                    "path": c.mapping.path,
                    "start": format!("{:#x}", c.mapping.addr),
                    "end": format!("{:#x}", c.mapping.addr + c.mapping.len),
                    "offset": format!("{:#x}", c.mapping.pgoff()),
                    "version": c.version,
                    "load_tsc": c.mapping.tsc.map(|t| format!("{t:#x}")),
                })
            })
            .collect(),
    )
}

/// The pages of written code with more than one version that the traced thread ran.
pub(super) fn rewritten_run(s: &Sideband) -> Vec<u64> {
    let mut pages: Vec<u64> = s
        .code
        .iter()
        .filter(|c| c.first.is_some() && s.code.iter().any(|o| o.page == c.page && o.version > 0))
        .map(|c| c.page)
        .collect();
    pages.sort_unstable();
    pages.dedup();
    pages
}

/// QE17: a page rewritten while it ran must have run in one thread only: decoders load each
/// version at a time, and each thread's trace has a clock of its own.
pub(super) fn shared_rewrites(main: &Sideband, threads: &[ThreadCase]) -> Result<(), RecordError> {
    let mut runs: Vec<(u64, u64)> = rewritten_run(main)
        .into_iter()
        .map(|p| (p, main.tid.unwrap_or(0)))
        .collect();
    runs.extend(
        threads
            .iter()
            .flat_map(|t| t.rewritten_run.iter().map(|&p| (p, t.tid))),
    );
    for &(page, tid) in &runs {
        if let Some(&(_, other)) = runs.iter().find(|&&(p, t)| p == page && t != tid) {
            return Err(RecordError::Refused(format!(
                "the program rewrote its code at {page:#x} and threads {tid} and {other} both ran it: \
                 decoders load each version of written code at the time it was written, and each \
                 thread's trace keeps a clock of its own, so that is not traced (QE17; code written \
                 once may run in any thread)"
            )));
        }
    }
    Ok(())
}
