//! What a traced process's case says of it: after its main pass, its other threads (QE15), the
//! rewritten-code rule (QE17) and perf.data of every thread (PD7); its file mappings (QE12) and
//! report.json's `program`.

use super::threads::{perf_data_of_threads, trace_threads, ThreadCase};
use super::written::shared_rewrites;
use super::RecordError;
use crate::case::{CaseOptions, Written};
use crate::perf_data::Mapping;
use crate::simulate;
use crate::sources::qemu::Sideband;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Mutex;

/// After a process's main pass (`done`, staged): its other threads, each a case (QE15), the
/// rewritten-code rule (QE17), and with --perf-data one perf.data of every thread (PD7).
pub(super) fn finish_process(
    case: &CaseOptions,
    opts: &simulate::Options,
    name: &str,
    side: &Mutex<Sideband>,
    done: &mut Written,
) -> Result<Vec<ThreadCase>, RecordError> {
    let threads = side.lock().expect("not poisoned").threads.clone();
    let traced = trace_threads(case, opts, name, &threads, &mut done.staged)?;
    let s = side.lock().expect("not poisoned");
    shared_rewrites(&s, &traced)?;
    if case.perf_data && !traced.is_empty() {
        perf_data_of_threads(case, opts, name, &s, done, &traced)?;
    }
    Ok(traced)
}

/// perf's MMAP2 records: every file mapping the program's code ran from.
pub(super) fn mappings(s: &Sideband) -> Vec<Mapping> {
    s.maps
        .iter()
        .map(|m| Mapping::new(m.path.clone(), m.start, m.end - m.start, m.offset))
        .collect()
}

pub(super) fn program_json(
    command: &[OsString],
    program: &Path,
    exit: ExitStatus,
    s: &Sideband,
) -> serde_json::Value {
    serde_json::json!({
        "command": command.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>(),
        "path": program.display().to_string(),
        "exit_status": super::qemu::exit_code(exit),
        "signal": exit.signal(),
        "executions": s.executed,
        "exited": s.ended,
        "maps": maps_json(s),
        "forks_not_traced": s.forks,
        "execs": s.execs,
        "tid": s.tid,
        "killed": killed_json(s),
        "threads": s.threads.iter().map(|t| serde_json::json!({
            "tid": t.tid,
            "parent": t.parent,
            "case": format!("threads/{}", t.tid),
        })).collect::<Vec<_>>(),
    })
}

/// QE22: the signal that killed the program from this thread, and where the thread was (its
/// trace's last instruction, which did not complete), or null.
pub(super) fn killed_json(s: &Sideband) -> serde_json::Value {
    s.killed.map_or(
        serde_json::Value::Null,
        |(signal, ip)| serde_json::json!({ "signal": signal, "ip": format!("{ip:#x}") }),
    )
}

pub(super) fn maps_json(s: &Sideband) -> Vec<serde_json::Value> {
    s.maps
        .iter()
        .map(|m| {
            serde_json::json!({
                "path": m.path,
                "start": format!("{:#x}", m.start),
                "end": format!("{:#x}", m.end),
                "offset": format!("{:#x}", m.offset),
            })
        })
        .collect()
}
