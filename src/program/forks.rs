//! Forked children (QE18, QE19): each child's stream, once it has ended, traced as a process of
//! its own into `processes/<pid>/` with DIR's layout, grandchildren too; the streams that cannot
//! be traced listed with why.

use super::children::Children;
use super::process::{finish_process, killed_json, mappings, maps_json};
use super::threads::{ThreadCase, THREADS_SPOOL};
use super::written::{code_json, write_code};
use super::{RecordError, Warnings};
use crate::case::{CaseOptions, Staged};
use crate::simulate;
use crate::sources::qemu::{QemuEvents, Sideband};
use crate::sources::SourceError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A forked child traced (QE18).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProcessCase {
    /// Its pid.
    pub pid: u64,
    /// Its directory in DIR (`processes/PID`, or `processes/PID.N` for the N+1-th process the
    /// system gave that pid).
    pub case: String,
    /// The traced process that forked it.
    pub parent: Option<u64>,
    /// The instructions its main thread ran.
    pub instructions: u64,
    /// The bytes of its main thread's trace.pt.
    pub trace_bytes: u64,
    /// Its other threads, each a case in its directory's `threads/`.
    pub threads: Vec<ThreadCase>,
}

/// What the children came to: those traced, and the forks no stream came for.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Processes {
    /// Every child traced, grandchildren included, in the order they were traced.
    pub traced: Vec<ProcessCase>,
    /// Every fork not traced (those that failed included).
    pub missing: Vec<u64>,
    /// The children whose streams could not be traced, and why.
    pub failed: Vec<(u64, String)>,
}

/// QE18: every forked child (and theirs), once each has ended, traced from its stream as a
/// process of its own: `DIR/processes/<pid>/`, the layout of DIR. Waits for the children as
/// `strace -f` does, until `deadline` (QE19): a child that runs on after the program keeps the
/// run waiting.
#[allow(clippy::too_many_arguments)]
pub(super) fn trace_children(
    case: &CaseOptions,
    opts: &simulate::Options,
    name: &str,
    children: &Children,
    deadline: std::time::Instant,
    pid: Option<u64>,
    forks: Vec<u64>,
    staged: &mut Staged,
    warnings: &Warnings,
) -> Result<Processes, RecordError> {
    let mut expected: Vec<(u64, Option<u64>)> = forks.into_iter().map(|p| (p, pid)).collect();
    let mut traced: Vec<ProcessCase> = Vec::new();
    let mut failed: Vec<(u64, String)> = Vec::new();
    // Streams that ended whose process no traced process has said it forked yet: a
    // grandchild's stream can end before its parent's is traced.
    let mut waiting: Vec<(PathBuf, u64)> = Vec::new();
    let refuse = |failed: &mut Vec<(u64, String)>, pid: u64, why: String| {
        warnings.warn(format!("forked child {pid}: not traced: {why}"));
        failed.push((pid, why));
    };
    loop {
        for stream in children.ended(deadline)? {
            let sender = u64::from(stream.sender);
            // QE19: a stream is the process that handed it over, as the kernel names it.
            match stream_pid(&stream.path) {
                // It ran no block under the plugin (killed or exec'd at once).
                None => {}
                Some(p) if p != sender => refuse(
                    &mut failed,
                    sender,
                    format!("its stream says it is process {p}: refused (QE19)"),
                ),
                Some(p) => {
                    waiting.push((stream.path, p));
                    continue;
                }
            }
            let _ = std::fs::remove_file(&stream.path);
        }
        // Each stream whose process a traced process forked, until no more can be.
        while let Some(k) = waiting
            .iter()
            .position(|(_, p)| expected.iter().any(|e| e.0 == *p))
        {
            let (stream, p) = waiting.remove(k);
            // A pid the system gave again (a child that ended, then another): as many streams
            // of it as forks of it were noted, each a case of its own (`processes/PID.N/` from
            // the second on).
            let forked = expected.iter().filter(|e| e.0 == p).count();
            let seen =
                traced.iter().filter(|c| c.pid == p).count() + failed.iter().filter(|f| f.0 == p).count();
            if seen >= forked {
                refuse(
                    &mut failed,
                    p,
                    "a second stream of the same process: refused (QE19)".into(),
                );
                let _ = std::fs::remove_file(&stream);
                continue;
            }
            match trace_child(case, opts, name, &stream, p, staged.staging(), &expected, seen) {
                Ok(case) => {
                    expected.extend(case.1.iter().map(|&c| (c, Some(case.0.pid))));
                    traced.push(case.0);
                }
                // Writing the outputs failed (a full disk): the run fails, nothing is written.
                Err(f) if f.is_output() => return Err(f),
                // One child that cannot be traced does not cost the program its trace: it is
                // listed as not traced, with why (QE18); the children it said it forked are
                // still its, and traced.
                Err(f) => {
                    expected.extend(stream_forks(&stream).into_iter().map(|c| (c, Some(p))));
                    refuse(&mut failed, p, f.to_string());
                }
            }
            let _ = std::fs::remove_file(&stream);
        }
        let missing = expected
            .iter()
            .filter(|e| !traced.iter().any(|c| c.pid == e.0) && !failed.iter().any(|f| f.0 == e.0))
            .count();
        if missing == 0 {
            break;
        }
        // A child forked just before its parent ended may not have handed its stream over
        // yet; once no process holds the fork descriptor, none can.
        let before = children.count();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while children.count() == before && !children.closed() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if children.count() == before {
            break;
        }
    }
    for (stream, p) in waiting {
        refuse(
            &mut failed,
            p,
            "no traced process forked it: refused (QE19)".into(),
        );
        let _ = std::fs::remove_file(&stream);
    }
    let (refused, more) = children.refused();
    for (p, why) in refused {
        refuse(&mut failed, u64::from(p), format!("{why} (QE19)"));
    }
    if more > 0 {
        warnings.warn(format!(
            "{more} more hand-overs of forked children's streams were refused (QE19)"
        ));
    }
    if !traced.is_empty() {
        staged.add_output("processes");
    }
    let missing = expected
        .iter()
        .map(|e| e.0)
        .filter(|p| !traced.iter().any(|c| c.pid == *p))
        .collect();
    Ok(Processes {
        traced,
        missing,
        failed,
    })
}

/// The first thread a child's stream names: the child's pid (its one thread's tid).
fn stream_pid(path: &Path) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    let mut r = crate::sources::qemu::wire::Reader::new(std::io::BufReader::new(f));
    while let Ok(Some(rec)) = r.next_record() {
        if let crate::sources::qemu::wire::Record::Thread { tid } = rec {
            if tid != 0 {
                return Some(tid);
            }
        }
    }
    None
}

/// The children a stream's process said it forked (its fork notes), read without tracing it.
fn stream_forks(path: &Path) -> Vec<u64> {
    use crate::sources::qemu::wire::{NoteKind, Reader, Record};
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut r = Reader::new(std::io::BufReader::new(f));
    let mut forks = Vec::new();
    while let Ok(Some(rec)) = r.next_record() {
        if let Record::Note {
            kind: NoteKind::Fork,
            value,
            ..
        } = rec
        {
            forks.push(value);
        }
    }
    forks
}

/// The stream of child `pid` (its first thread, [`stream_pid`]) traced into
/// `staging/processes/<pid>/` (its threads and perf.data as for the program). Returns the case
/// and the children it forked.
#[allow(clippy::too_many_arguments)]
fn trace_child(
    case: &CaseOptions,
    opts: &simulate::Options,
    name: &str,
    stream: &Path,
    pid: u64,
    staging: &Path,
    expected: &[(u64, Option<u64>)],
    reused: usize,
) -> Result<(ProcessCase, Vec<u64>), RecordError> {
    // The `reused`-th process the system gave this pid (0: the first).
    let parent = expected
        .iter()
        .filter(|e| e.0 == pid)
        .nth(reused)
        .and_then(|e| e.1);
    let dir = if reused == 0 {
        format!("processes/{pid}")
    } else {
        format!("processes/{pid}.{reused}")
    };
    let mut args = case.clone();
    args.out = staging.join(&dir);
    let child_name = format!("{name} (process {pid})");
    let side = Arc::new(Mutex::new(Sideband::default()));
    let mut done = crate::case::write(
        &args,
        opts,
        &child_name,
        &mut (),
        |sink, truth, events, progress, staging| {
            let io = |p: &Path, e: std::io::Error| {
                simulate::SimError::Source(SourceError::io(&p.display().to_string(), None, e))
            };
            let file = std::fs::File::open(stream).map_err(|e| io(stream, e))?;
            let others = std::fs::File::create(staging.join(THREADS_SPOOL))
                .map_err(|e| io(&staging.join(THREADS_SPOOL), e))?;
            let source = QemuEvents::new(
                child_name.clone(),
                std::io::BufReader::with_capacity(1 << 20, file),
                side.clone(),
            )
            .spool_others_to(Box::new(std::io::BufWriter::with_capacity(1 << 20, others)));
            simulate::run_source(opts, &child_name, Box::new(source), sink, truth, events, progress)
        },
        &|staging| {
            let s = side.lock().expect("not poisoned");
            let code = write_code(staging, &args.out, &s, opts).unwrap_or_default();
            let mut maps = mappings(&s);
            maps.extend(code.iter().map(|c| c.mapping.clone()));
            (
                maps,
                Some(serde_json::json!({
                    "pid": pid,
                    "parent": parent,
                    "tid": s.tid,
                    "exited": s.ended,
                    "maps": maps_json(&s),
                    "code": code_json(&code),
                    "threads": s.threads.iter().map(|t| serde_json::json!({
                        "tid": t.tid,
                        "parent": t.parent,
                        "case": format!("threads/{}", t.tid),
                    })).collect::<Vec<_>>(),
                    "forks": s.forks,
                    "execs": s.execs,
                    "killed": killed_json(&s),
                })),
            )
        },
    )?;
    let threads = finish_process(&args, opts, &child_name, &side, &mut done)?;
    let instructions = done.outcome.source.count("instructions");
    let trace_bytes = done.outcome.unit.stats().bytes_written;
    done.staged.commit(&args.out)?;
    let mut forks = side.lock().expect("not poisoned").forks.clone();
    forks.extend(threads.iter().flat_map(|t| t.forks.iter().copied()));
    Ok((
        ProcessCase {
            pid,
            case: dir,
            parent,
            instructions,
            trace_bytes,
            threads,
        },
        forks,
    ))
}

/// DIR's report.json, staged, with the children traced (`program.processes`) and those no
/// stream came for (`program.forks_not_traced`).
pub(super) fn note_processes(staging: &Path, p: &Processes) -> Result<(), RecordError> {
    let path = staging.join("report.json");
    let fail = |e: String| RecordError::Output(format!("{}: {e}", path.display()));
    let mut report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).map_err(|e| fail(e.to_string()))?)
            .map_err(|e| fail(e.to_string()))?;
    report["program"]["processes"] = serde_json::Value::Array(
        p.traced
            .iter()
            .map(|c| {
                serde_json::json!({
                    "pid": c.pid,
                    "parent": c.parent,
                    "case": c.case,
                })
            })
            .collect(),
    );
    report["program"]["forks_not_traced"] = serde_json::json!(p.missing);
    report["program"]["forks_refused"] = serde_json::Value::Array(
        p.failed
            .iter()
            .map(|(pid, why)| serde_json::json!({ "pid": pid, "why": why }))
            .collect(),
    );
    crate::report::write_atomic(&path, |w| {
        serde_json::to_writer_pretty(&mut *w, &report)?;
        std::io::Write::write_all(w, b"\n")
    })
    .map_err(|e| fail(e.to_string()))
}
