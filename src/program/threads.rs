//! A program's other threads (QE15): each read from the records the main pass put aside and
//! traced as a case of its own, `threads/<tid>/`; with perf.data, one of every thread (PD7).

use super::process::{killed_json, mappings, maps_json};
use super::written::{code_json, code_versions, rewritten_run};
use super::RecordError;
use crate::case::{CaseOptions, Staged};
use crate::perf_data::{self, Mapping};
use crate::simulate;
use crate::sources::qemu::{QemuEvents, Sideband, ThreadSeen};
use crate::sources::SourceError;
use std::sync::{Arc, Mutex};

/// Where the main pass puts the other threads' records, in the staging directory.
pub(super) const THREADS_SPOOL: &str = "threads.spool";

/// A thread traced in a pass of its own (QE15): its tid and what its case holds.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ThreadCase {
    /// Its tid.
    pub tid: u64,
    /// The thread that started it, when the stream said so.
    pub parent: Option<u64>,
    /// Its case, relative to its process's directory: `threads/<tid>`.
    pub dir: String,
    /// The instructions it ran (its truth's count when the truth is written).
    pub instructions: u64,
    /// The bytes of its trace.pt.
    pub trace_bytes: u64,
    /// The stream offsets of its ToPA PMIs.
    pub pmis: Vec<u64>,
    /// Every file mapping its code ran from.
    pub maps: Vec<Mapping>,
    /// Its written code's mappings (QE17), with this thread's load times.
    pub code: Vec<Mapping>,
    /// The pages of written code with several versions that it ran code of.
    pub rewritten_run: Vec<u64>,
    /// The children it forked (QE18).
    pub forks: Vec<u64>,
}

/// QE15: each thread but the main one, read from the records the main pass put aside and
/// traced as its own case, `DIR/threads/<tid>/`, with the options of the run (a perf.data of its
/// own only with `--perf-data`).
pub(super) fn trace_threads(
    case: &CaseOptions,
    opts: &simulate::Options,
    name: &str,
    threads: &[ThreadSeen],
    staged: &mut Staged,
) -> Result<Vec<ThreadCase>, RecordError> {
    let spool = staged.staging().join(THREADS_SPOOL);
    let mut cases = Vec::new();
    for t in threads {
        let mut args = case.clone();
        args.out = staged.staging().join("threads").join(t.tid.to_string());
        // One perf.data holds every thread (PD7), written once they are all traced.
        args.perf_data = false;
        let thread_name = format!("{name} (thread {})", t.tid);
        let side = Arc::new(Mutex::new(Sideband::default()));
        let done = crate::case::write(
            &args,
            opts,
            &thread_name,
            &mut (),
            |sink, truth, events, progress, _| {
                let file = std::fs::File::open(&spool).map_err(|e| {
                    simulate::SimError::Source(SourceError::io(&spool.display().to_string(), None, e))
                })?;
                let source = QemuEvents::for_thread(
                    thread_name.clone(),
                    std::io::BufReader::with_capacity(1 << 20, file),
                    side.clone(),
                    t.tid,
                );
                simulate::run_source(
                    opts,
                    &thread_name,
                    Box::new(source),
                    sink,
                    truth,
                    events,
                    progress,
                )
            },
            &|_| {
                let s = side.lock().expect("not poisoned");
                // The code files are the main case's (the same bytes: every pass reads every
                // block); the load times are this thread's.
                let code = code_versions(&case.out, &s, opts);
                let mut maps = mappings(&s);
                maps.extend(code.iter().map(|c| c.mapping.clone()));
                (
                    maps,
                    Some(serde_json::json!({
                        "tid": t.tid,
                        "parent": t.parent,
                        "maps": maps_json(&s),
                        "code": code_json(&code),
                        "forks": s.forks,
                        "execs": s.execs,
                        "killed": killed_json(&s),
                    })),
                )
            },
        )?;
        let s = side.lock().expect("not poisoned");
        cases.push(ThreadCase {
            tid: t.tid,
            parent: t.parent,
            dir: format!("threads/{}", t.tid),
            instructions: done.outcome.source.count("instructions"),
            trace_bytes: done.outcome.unit.stats().bytes_written,
            pmis: done.outcome.pmis.clone(),
            maps: mappings(&s),
            code: code_versions(&case.out, &s, opts)
                .into_iter()
                .map(|c| c.mapping)
                .collect(),
            rewritten_run: rewritten_run(&s),
            forks: s.forks.clone(),
        });
        drop(s);
        done.staged.commit(&args.out)?;
    }
    let _ = std::fs::remove_file(&spool);
    if !cases.is_empty() {
        staged.add_output("threads");
    }
    Ok(cases)
}

/// PD7: DIR/perf.data again, with every thread's trace in it.
pub(super) fn perf_data_of_threads(
    case: &CaseOptions,
    opts: &simulate::Options,
    name: &str,
    s: &Sideband,
    done: &crate::case::Written,
    threads: &[ThreadCase],
) -> Result<(), RecordError> {
    let staging = done.staged.staging();
    // The buffers are cut at the PMIs, as perf collects them, unless a fault changed what the
    // consumer got.
    let cuts = |pmis: &[u64]| {
        if !case.plan.changes_delivery() {
            pmis.to_vec()
        } else {
            Vec::new()
        }
    };
    let tid = |t: u64| u32::try_from(t).unwrap_or(u32::MAX);
    let pid = tid(s.tid.unwrap_or(0));
    let main = perf_data::ThreadTrace {
        tid: pid,
        parent: pid,
        path: staging.join("trace.pt"),
        cuts: cuts(&done.outcome.pmis),
    };
    let others: Vec<_> = threads
        .iter()
        .map(|t| perf_data::ThreadTrace {
            tid: tid(t.tid),
            parent: t.parent.map_or(pid, tid),
            path: staging.join(format!("threads/{}/trace.pt", t.tid)),
            cuts: cuts(&t.pmis),
        })
        .collect();
    // Every file any thread ran code from, once; each version of written code once, loaded
    // when the thread that ran it loaded it (QE17: one thread a rewritten page).
    let mut maps = mappings(s);
    maps.extend(code_versions(&case.out, s, opts).into_iter().map(|c| c.mapping));
    for m in threads.iter().flat_map(|t| t.maps.iter().chain(&t.code)) {
        match maps.iter_mut().find(|k| k.path == m.path && k.addr == m.addr) {
            Some(k) => k.tsc = k.tsc.or(m.tsc),
            None => maps.push(m.clone()),
        }
    }
    perf_data::write_process(&staging.join("perf.data"), opts, name, maps, pid, &main, &others)
        // As ever: a thread's perf.data that cannot be written fails its process's trace (a
        // child's is then listed as not traced), not as a full disk fails the run.
        .map_err(|e| RecordError::Input(format!("{}: writing perf.data: {e}", case.out.display())))
}
