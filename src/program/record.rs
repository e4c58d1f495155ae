//! The whole recording: the program's main pass under QEMU into DIR (traced as its stream
//! arrives), then its other threads and its forked children, each a case of its own.

use super::children::Children;
use super::find;
use super::forks::{note_processes, trace_children};
use super::interpreter::interpreter;
use super::process::{finish_process, mappings, program_json};
use super::qemu::{self, describe, qemu_version, refusal, Launch};
use super::threads::THREADS_SPOOL;
use super::written::{code_json, write_code};
use super::{RecordError, RecordOptions, Recording, Warnings};
use crate::case::cleanup::forward_signals_to;
use crate::case::Staged;
use crate::simulate;
use crate::sources::qemu::{QemuEvents, Sideband};
use crate::sources::Format;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex};

/// A recording whose every output is complete in DIR's staging directory: [`commit`] moves
/// them into place (dropped instead, nothing is written). `ptemu run` prints its summary in
/// between, as `ptemu simulate` does (SIM7).
///
/// [`commit`]: StagedRecording::commit
#[derive(Debug)]
pub struct StagedRecording {
    recording: Recording,
    staged: Staged,
}

impl StagedRecording {
    /// What was recorded.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// What [`StagedRecording::commit`] will replace and remove in DIR (SIM22).
    pub fn replacing(&self) -> crate::case::Replacing {
        self.staged.replacing()
    }

    /// Moves every output into DIR, replacing an earlier run's (its `threads/`, `processes/`
    /// and `code/` whole, QE18).
    pub fn commit(self) -> Result<Recording, RecordError> {
        self.staged
            .commit(&self.recording.out)
            .map_err(|e| RecordError::Output(e.to_string()))?;
        Ok(self.recording)
    }
}

/// The main pass's progress, handed to [`RecordOptions::on_progress`].
struct Told(Option<super::ProgressSink>);

impl crate::case::Progress for Told {
    fn update(&mut self, records: u64) {
        if let Some(f) = &self.0 {
            f(Some(records));
        }
    }

    fn done(&mut self) {
        if let Some(f) = &self.0 {
            f(None);
        }
    }
}

/// Records `o.command` under QEMU into `o.case.out`: [`record_staged`], then the commit.
pub fn record(o: &RecordOptions) -> Result<Recording, RecordError> {
    record_staged(o)?.commit()
}

/// Records `o.command` under QEMU, every output staged in DIR. Every mistake in the options,
/// a missing QEMU, plugin or program, is reported before DIR is made; QEMU starts once DIR is
/// made (QE11). The program's stdin, stdout and stderr are the caller's.
pub fn record_staged(o: &RecordOptions) -> Result<StagedRecording, RecordError> {
    let opts = &o.simulate;
    let Some((arg0, rest)) = o.command.split_first() else {
        return Err(RecordError::Input(
            "no PROGRAM to run: the command is empty".into(),
        ));
    };
    if opts.format != Format::Qemu {
        return Err(RecordError::Input(format!(
            "a recording's simulation options are of format qemu, not {}",
            opts.format
        )));
    }
    if opts.ctl.os() {
        // QE6: the kernel's code does not run under QEMU user mode.
        return Err(RecordError::Input(
            "--ctl OS=1: under qemu-x86_64 the kernel does not run (QEMU carries out system calls \
             itself), so there is no kernel code to trace: ptemu run traces user mode only"
                .into(),
        ));
    }
    let qemu = find::qemu(o.qemu.as_deref())?;
    let plugin = find::plugin(o.plugin.as_deref())?;
    let program = find::program(arg0)?;
    // What QEMU runs: the program, or a script's interpreter with the script, as the kernel
    // does for `#!` (qemu-x86_64 loads ELF files only).
    let (exe, argv0, before) = interpreter(arg0, &program)?;
    let name = Path::new(arg0).file_name().map_or_else(
        || arg0.to_string_lossy().into_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let case = &o.case;
    let warnings = Warnings::new(o.on_warning.clone());

    let (ours, theirs) =
        UnixStream::pair().map_err(|e| RecordError::Input(format!("a socket for the plugin: {e}")))?;
    // QE18, QE19: forked children hand their streams over through a descriptor only QEMU and
    // the processes it forks hold.
    let children = Children::new(o.limits)
        .map_err(|e| RecordError::Input(format!("a socket for forked children: {e}")))?;
    let mut cmd = qemu::command(&Launch {
        qemu: &qemu,
        plugin: &plugin,
        fd: theirs.as_raw_fd(),
        forks: children.plugin_fd(),
        exe: &exe,
        argv0: &argv0,
        before: &before,
        args: rest,
        closed: o.closed_std,
    })?;
    // QEMU starts once DIR is made (inside `case::write`): a DIR that cannot be written stops
    // the run before the program runs at all.
    let child: Mutex<Option<Child>> = Mutex::new(None);
    let status: Mutex<Option<ExitStatus>> = Mutex::new(None);
    // When the program ended: the children's deadline counts from there (QE19).
    let ended_at: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    let side = Arc::new(Mutex::new(Sideband::default()));

    let wait = || -> Result<ExitStatus, String> {
        if let Some(mut c) = child.lock().expect("not poisoned").take() {
            let s = c
                .wait()
                .map_err(|e| format!("{}: waiting for QEMU: {e}", qemu.display()))?;
            *status.lock().expect("not poisoned") = Some(s);
        }
        status
            .lock()
            .expect("not poisoned")
            .ok_or_else(|| "QEMU was not started".to_owned())
    };
    let mut progress = Told(o.on_progress.clone());
    let result = crate::case::write(
        case,
        opts,
        &name,
        &mut progress,
        |sink, spool, events, progress, staging| {
            // QE15: the other threads' records go aside, each traced after the program ends.
            let others = std::fs::File::create(staging.join(THREADS_SPOOL))
                .map_err(|e| refusal(&qemu, &format!("{}: {e}", staging.join(THREADS_SPOOL).display())))?;
            children.accept_into(staging);
            let started = cmd.spawn();
            children.started();
            let started = started.map_err(|e| refusal(&qemu, &format!("cannot start QEMU: {e}")))?;
            forward_signals_to(started.id());
            drop(theirs);
            *child.lock().expect("not poisoned") = Some(started);
            let source = QemuEvents::new(name.clone(), ours, side.clone())
                .spool_others_to(Box::new(std::io::BufWriter::with_capacity(1 << 20, others)));
            let out = simulate::run_source(opts, &name, Box::new(source), sink, spool, events, progress);
            // The stream ended: QEMU exited (or the program exec'd another, or this run failed
            // and closed its end, which stops the plugin and lets the program finish).
            let exit = wait().map_err(|m| refusal(&qemu, &m))?;
            forward_signals_to(0);
            *ended_at.lock().expect("not poisoned") = Some(std::time::Instant::now());
            let out = out?;
            let s = side.lock().expect("not poisoned");
            if !s.loaded {
                return Err(refusal(
                    &qemu,
                    &format!(
                        "{} did not load the plugin {} (plugin API version 1; {}); it {}; its message \
                         is above",
                        qemu.display(),
                        plugin.display(),
                        qemu_version(&qemu),
                        describe(exit)
                    ),
                ));
            }
            if out.0.source.count("instructions") == 0 && !exit.success() {
                return Err(refusal(
                    &qemu,
                    &format!(
                        "QEMU could not run {} (it {}; its message is above): nothing was traced",
                        exe.display(),
                        describe(exit)
                    ),
                ));
            }
            Ok(out)
        },
        &|staging| {
            let s = side.lock().expect("not poisoned");
            let exit = status.lock().expect("not poisoned").expect("waited");
            let code = match write_code(staging, &case.out, &s, opts) {
                Ok(c) => c,
                Err(e) => {
                    // After the simulation, `after` cannot fail the run: perf.data and libipt
                    // lack the written code, and the summary says why.
                    warnings.warn(format!("{}: writing code/: {e}", case.out.display()));
                    Vec::new()
                }
            };
            let mut maps = mappings(&s);
            maps.extend(code.iter().map(|c| c.mapping.clone()));
            let mut program = program_json(&o.command, &program, exit, &s);
            program["code"] = code_json(&code);
            (maps, Some(program))
        },
    );
    let mut done = match result {
        Ok(d) => d,
        Err(f) => {
            // Nothing is written; the program finishes untraced, then the error.
            let _ = wait();
            forward_signals_to(0);
            children.stop();
            return Err(f.into());
        }
    };
    let deadline = ended_at
        .lock()
        .expect("not poisoned")
        .unwrap_or_else(std::time::Instant::now)
        + o.limits.wait;
    let exit = status.lock().expect("not poisoned").expect("waited");
    let traced = finish_process(case, opts, &name, &side, &mut done)?;
    let (forks, pid) = {
        let s = side.lock().expect("not poisoned");
        let mut forks = s.forks.clone();
        forks.extend(traced.iter().flat_map(|t| t.forks.iter().copied()));
        (forks, s.tid)
    };
    let processes = trace_children(
        case,
        opts,
        &name,
        &children,
        deadline,
        pid,
        forks,
        &mut done.staged,
        &warnings,
    );
    children.stop();
    let processes = processes?;
    note_processes(done.staged.staging(), &processes)?;
    let sideband = std::mem::take(&mut *side.lock().expect("not poisoned"));
    let replaced_by = if sideband.ended {
        None
    } else {
        sideband.execs.last().cloned()
    };
    Ok(StagedRecording {
        recording: Recording {
            name,
            program,
            executable: exe,
            exit,
            out: case.out.clone(),
            outcome: done.outcome,
            report: done.report,
            truth: done.truth,
            sideband,
            threads: traced,
            processes,
            replaced_by,
            warnings: warnings.into_vec(),
        },
        staged: done.staged,
    })
}
