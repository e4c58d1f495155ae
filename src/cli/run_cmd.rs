//! `ptemu run`: a real program under `qemu-x86_64` with ptemu's plugin, traced as `simulate`
//! traces a file (spec/qemu.md).

use super::output::eprint_text;
use super::run_children::{Children, Limits};
use super::simulate_cmd::{case_options, run_options, summary, RunArgs};
use super::summary::fail_on_operational_error;
use super::Failure;
use ptemu::case::{Staged, Written};
use ptemu::perf_data::{self, Mapping};
use ptemu::simulate;
use ptemu::sources::qemu::{QemuEvents, Sideband, ThreadSeen};
use ptemu::sources::{Format, SourceError};
use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};

/// The plugin's file name, as Cargo builds it.
pub const PLUGIN_FILE: &str = "libptemu_qemu.so";

/// The arguments of `ptemu run`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// The QEMU user-mode emulator for x86-64 programs. Default: qemu-x86_64 on the PATH.
    #[arg(long, value_name = "PATH")]
    qemu: Option<PathBuf>,
    /// ptemu's QEMU plugin. Default: $PTEMU_QEMU_PLUGIN, else libptemu_qemu.so next to the
    /// ptemu executable or in ../lib/ptemu/ from it (where the README's install puts it).
    #[arg(long, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// The most forked child processes traced at the same time (QE19); one more is exit 2.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_children: u32,
    /// The most bytes of the plugin's stream one forked child may send (QE19): a number with
    /// an optional K, M or G (binary multiples); more is exit 2.
    #[arg(long, value_name = "SIZE", default_value = "64G", value_parser = parse_size)]
    max_stream_bytes: u64,
    /// How long, after the program ended, to wait for forked children that run on (QE19);
    /// children still running then are exit 2.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    wait_children: u64,
    /// The program to trace and its arguments (after `--`); found on the PATH as a shell finds
    /// it.
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    command: Vec<OsString>,
}

pub fn run(a: Args) -> Result<(), Failure> {
    let opts = run_options(Format::Qemu, &a.run)?;
    if opts.ctl.os() {
        // QE6: the kernel's code does not run under QEMU user mode.
        return Err(Failure::input(
            "--ctl OS=1: under qemu-x86_64 the kernel does not run (QEMU carries out system calls \
             itself), so there is no kernel code to trace: ptemu run traces user mode only",
        ));
    }
    let qemu = find_qemu(a.qemu.as_deref())?;
    let plugin = find_plugin(a.plugin.as_deref())?;
    let (arg0, rest) = a.command.split_first().expect("clap requires PROGRAM");
    let program = find_program(arg0)?;
    // What QEMU runs: the program, or a script's interpreter with the script, as the kernel
    // does for `#!` (qemu-x86_64 loads ELF files only).
    let (exe, argv0, before) = interpreter(arg0, &program)?;
    let name = Path::new(arg0).file_name().map_or_else(
        || arg0.to_string_lossy().into_owned(),
        |n| n.to_string_lossy().into_owned(),
    );

    let (ours, theirs) =
        UnixStream::pair().map_err(|e| Failure::input(format!("a socket for the plugin: {e}")))?;
    let fd = theirs.as_raw_fd();
    // QE18, QE19: forked children hand their streams over through a descriptor only QEMU and
    // the processes it forks hold.
    let children = Children::new(Limits {
        open: a.max_children as usize,
        bytes: a.max_stream_bytes,
        wait: std::time::Duration::from_secs(a.wait_children),
    })
    .map_err(|e| Failure::input(format!("a socket for forked children: {e}")))?;
    let forks = children.plugin_fd();
    let closed = super::closed_at_start();
    // SAFETY: getpid has no preconditions.
    let ptemu_pid = unsafe { libc::getpid() };
    let mut cmd = Command::new(&qemu);
    cmd.arg("-0").arg(&argv0);
    cmd.arg("-plugin").arg(plugin_arg(&plugin, fd, forks)?);
    cmd.arg(&exe).args(before).args(rest);
    // SAFETY: only fcntl, prctl, getppid and close, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The plugin's ends of the sockets stay open in QEMU (both are made close-on-exec).
            for f in [fd, forks] {
                if libc::fcntl(f, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // QE20: QEMU ends with ptemu, even when ptemu is killed without a chance to say so.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // ptemu ended before the death signal was set: QEMU would run on, unwatched.
            if libc::getppid() != ptemu_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // QE11: a standard descriptor closed when ptemu started is closed for the program.
            for k in 0..3 {
                if closed & (1 << k) != 0 {
                    libc::close(k);
                }
            }
            Ok(())
        });
    }
    // QEMU starts once DIR is made (inside `execute`): a DIR that cannot be written stops the
    // run before the program runs at all.
    let child: Mutex<Option<Child>> = Mutex::new(None);
    let status: Mutex<Option<ExitStatus>> = Mutex::new(None);
    // When the program ended: the children's deadline counts from there (QE19).
    let ended_at: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    let side = Arc::new(Mutex::new(Sideband::default()));

    let wait = || -> Result<ExitStatus, Failure> {
        if let Some(mut c) = child.lock().expect("not poisoned").take() {
            let s = c
                .wait()
                .map_err(|e| Failure::input(format!("{}: waiting for QEMU: {e}", qemu.display())))?;
            *status.lock().expect("not poisoned") = Some(s);
        }
        status
            .lock()
            .expect("not poisoned")
            .ok_or_else(|| Failure::input("QEMU was not started"))
    };
    let result = ptemu::case::write(
        &case_options(&a.run),
        &opts,
        &name,
        &mut (),
        |sink, spool, events, progress, staging| {
            // QE15: the other threads' records go aside, each traced after the program ends.
            let others = std::fs::File::create(staging.join(THREADS_SPOOL))
                .map_err(|e| refusal(&qemu, &format!("{}: {e}", staging.join(THREADS_SPOOL).display())))?;
            children.accept_into(staging);
            let started = cmd.spawn();
            children.started();
            let started = started.map_err(|e| refusal(&qemu, &format!("cannot start QEMU: {e}")))?;
            ptemu::case::cleanup::forward_signals_to(started.id());
            drop(theirs);
            *child.lock().expect("not poisoned") = Some(started);
            let source = QemuEvents::new(name.clone(), ours, side.clone())
                .spool_others_to(Box::new(std::io::BufWriter::with_capacity(1 << 20, others)));
            let out = simulate::run_source(&opts, &name, Box::new(source), sink, spool, events, progress);
            // The stream ended: QEMU exited (or the program exec'd another, or this run failed
            // and closed its end, which stops the plugin and lets the program finish).
            let exit = wait().map_err(|f| refusal(&qemu, f.message()))?;
            ptemu::case::cleanup::forward_signals_to(0);
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
            let code = match write_code(staging, &a.run.out, &s, &opts) {
                Ok(c) => c,
                Err(e) => {
                    // After the simulation, `after` cannot fail the run: perf.data and libipt
                    // lack the written code, and the summary says why.
                    eprint_text(&format!(
                        "ptemu: warning: {}: writing code/: {e}\n",
                        a.run.out.display()
                    ));
                    Vec::new()
                }
            };
            let mut maps = mappings(&s);
            maps.extend(code.iter().map(|c| c.mapping.clone()));
            let mut program = program_json(&a.command, &program, exit, &s);
            program["code"] = code_json(&code);
            (maps, Some(program))
        },
    );
    let mut done = match result.map_err(Failure::from) {
        Ok(d) => d,
        Err(f) => {
            // Nothing is written; the program finishes untraced, then the error.
            let _ = wait();
            ptemu::case::cleanup::forward_signals_to(0);
            children.stop();
            return Err(f);
        }
    };
    let deadline = ended_at
        .lock()
        .expect("not poisoned")
        .unwrap_or_else(std::time::Instant::now)
        + std::time::Duration::from_secs(a.wait_children);
    let exit = status.lock().expect("not poisoned").expect("waited");
    let traced = finish_process(&a.run, &case_options(&a.run), &opts, &name, &side, &mut done)?;
    let (forks, pid) = {
        let s = side.lock().expect("not poisoned");
        let mut forks = s.forks.clone();
        forks.extend(traced.iter().flat_map(|t| t.forks.iter().copied()));
        (forks, s.tid)
    };
    let processes = trace_children(
        &a.run,
        &opts,
        &name,
        &children,
        deadline,
        pid,
        forks,
        &mut done.staged,
    );
    children.stop();
    let processes = processes?;
    note_processes(done.staged.staging(), &processes)?;
    if !a.run.quiet {
        let mut text = summary(
            "run",
            &name,
            &case_options(&a.run),
            &opts,
            &done.outcome,
            &done.report,
            done.truth.as_ref(),
        );
        let s = side.lock().expect("not poisoned");
        program_lines(&mut text, exit, &s, &opts);
        thread_lines(&mut text, &a.run.out, &traced);
        process_lines(&mut text, &a.run.out, &processes);
        // On stderr: stdout is the program's, and `ptemu run -- ls > list` must hold what
        // `ls > list` holds (as `time` and `strace` report on stderr).
        eprint_text(&text);
    }
    done.staged.commit(&a.run.out)?;
    if let Err(f) = fail_on_operational_error(&done.outcome.unit) {
        // The exit status is the program's (QE11); the output unit's error is said all the same.
        eprint_text(&format!("ptemu: warning: {}\n", f.message()));
    }
    match exit_code(exit) {
        0 => Ok(()),
        n => Err(Failure::status(n)),
    }
}

/// One version of a page of code the program wrote (QE17), as the run writes it out.
struct WrittenCode {
    version: u32,
    /// Its file (DIR/code/PAGE.VERSION.elf), where, and from when.
    mapping: Mapping,
}

/// The model's TSC once the traced thread has run `count` instructions: `ptemu run` makes no
/// cycles but the instructions' (CYCLES_PER_INSTRUCTION each) at a fixed core ratio.
fn tsc_after(opts: &simulate::Options, count: u64) -> u64 {
    let clock = ptemu::tracer::Clock::new(opts.tracer.clock);
    opts.tracer.clock.tsc_start.wrapping_add(
        clock.cycles_to_tsc(count.saturating_mul(u64::from(opts.tracer.cycles_per_instruction))),
    )
}

/// QE17: each version of each page of written code as a mapping of its file in DIR/code/: the
/// first version of a page from the start, each later one from halfway between the traced
/// thread's last run of the version before and its first run of this one (perf and the libipt
/// harness load it when their decoding reaches that time). A version this thread never ran
/// after another keeps the time of the one before.
fn code_versions(out: &Path, s: &Sideband, opts: &simulate::Options) -> Vec<WrittenCode> {
    let mut v = Vec::with_capacity(s.code.len());
    // Each page's newest version so far.
    let mut newest = std::collections::HashMap::new();
    for c in &s.code {
        let before = newest.insert(c.page, c);
        let path = out.join("code").join(format!("{:x}.{}.elf", c.page, c.version));
        let path = std::path::absolute(&path).unwrap_or(path).display().to_string();
        let pgoff = ptemu::perf_data::elf::code_offset(c.page);
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
fn write_code(
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
            let (elf, _) = ptemu::perf_data::elf::image(&c.bytes, c.page);
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

fn code_json(code: &[WrittenCode]) -> serde_json::Value {
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

/// After a process's main pass (`done`, staged): its other threads, each a case (QE15), the
/// rewritten-code rule (QE17), and with --perf-data one perf.data of every thread (PD7).
fn finish_process(
    run: &RunArgs,
    case: &ptemu::case::CaseOptions,
    opts: &simulate::Options,
    name: &str,
    side: &Mutex<Sideband>,
    done: &mut Written,
) -> Result<Vec<ThreadCase>, Failure> {
    let threads = side.lock().expect("not poisoned").threads.clone();
    let traced = trace_threads(run, case, opts, name, &threads, &mut done.staged)?;
    let s = side.lock().expect("not poisoned");
    shared_rewrites(&s, &traced)?;
    if case.perf_data && !traced.is_empty() {
        perf_data_of_threads(run, opts, name, &s, done, &traced)?;
    }
    Ok(traced)
}

/// A forked child traced (QE18).
struct ProcessCase {
    pid: u64,
    /// Its directory in DIR (`processes/PID`, or `processes/PID.N` for the N+1-th process the
    /// system gave that pid).
    case: String,
    parent: Option<u64>,
    instructions: u64,
    threads: usize,
}

/// What the children came to: those traced, and the forks no stream came for.
struct Processes {
    traced: Vec<ProcessCase>,
    /// Every fork not traced (those that failed included).
    missing: Vec<u64>,
    /// The children whose streams could not be traced, and why.
    failed: Vec<(u64, String)>,
}

/// QE18: every forked child (and theirs), once each has ended, traced from its stream as a
/// process of its own: `DIR/processes/<pid>/`, the layout of DIR. Waits for the children as
/// `strace -f` does, until `deadline` (QE19): a child that runs on after the program keeps the
/// run waiting.
#[allow(clippy::too_many_arguments)]
fn trace_children(
    run: &RunArgs,
    opts: &simulate::Options,
    name: &str,
    children: &Children,
    deadline: std::time::Instant,
    pid: Option<u64>,
    forks: Vec<u64>,
    staged: &mut Staged,
) -> Result<Processes, Failure> {
    let mut expected: Vec<(u64, Option<u64>)> = forks.into_iter().map(|p| (p, pid)).collect();
    let mut traced: Vec<ProcessCase> = Vec::new();
    let mut failed: Vec<(u64, String)> = Vec::new();
    // Streams that ended whose process no traced process has said it forked yet: a
    // grandchild's stream can end before its parent's is traced.
    let mut waiting: Vec<(PathBuf, u64)> = Vec::new();
    let refuse = |failed: &mut Vec<(u64, String)>, pid: u64, why: String| {
        eprint_text(&format!(
            "ptemu: warning: forked child {pid}: not traced: {why}\n"
        ));
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
            match trace_child(run, opts, name, &stream, p, staged.staging(), &expected, seen) {
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
                    refuse(&mut failed, p, f.message().to_owned());
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
        eprint_text(&format!(
            "ptemu: warning: {more} more hand-overs of forked children's streams were refused (QE19)\n"
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
    let mut r = ptemu::sources::qemu::wire::Reader::new(std::io::BufReader::new(f));
    while let Ok(Some(rec)) = r.next_record() {
        if let ptemu::sources::qemu::wire::Record::Thread { tid } = rec {
            if tid != 0 {
                return Some(tid);
            }
        }
    }
    None
}

/// The children a stream's process said it forked (its fork notes), read without tracing it.
fn stream_forks(path: &Path) -> Vec<u64> {
    use ptemu::sources::qemu::wire::{NoteKind, Reader, Record};
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
    run: &RunArgs,
    opts: &simulate::Options,
    name: &str,
    stream: &Path,
    pid: u64,
    staging: &Path,
    expected: &[(u64, Option<u64>)],
    reused: usize,
) -> Result<(ProcessCase, Vec<u64>), Failure> {
    // The `reused`-th process the system gave this pid (0: the first).
    let parent = expected
        .iter()
        .filter(|e| e.0 == pid)
        .nth(reused)
        .and_then(|e| e.1);
    let case = if reused == 0 {
        format!("processes/{pid}")
    } else {
        format!("processes/{pid}.{reused}")
    };
    let mut args = case_options(run);
    args.out = staging.join(&case);
    let child_name = format!("{name} (process {pid})");
    let side = Arc::new(Mutex::new(Sideband::default()));
    let mut done = ptemu::case::write(
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
                })),
            )
        },
    )?;
    let threads = finish_process(run, &args, opts, &child_name, &side, &mut done)?;
    let instructions = done.outcome.source.count("instructions");
    done.staged.commit(&args.out)?;
    let mut forks = side.lock().expect("not poisoned").forks.clone();
    forks.extend(threads.iter().flat_map(|t| t.forks.iter().copied()));
    Ok((
        ProcessCase {
            pid,
            case,
            parent,
            instructions,
            threads: threads.len(),
        },
        forks,
    ))
}

/// DIR's report.json, staged, with the children traced (`program.processes`) and those no
/// stream came for (`program.forks_not_traced`).
fn note_processes(staging: &Path, p: &Processes) -> Result<(), Failure> {
    let path = staging.join("report.json");
    let fail = |e: String| Failure::input(format!("{}: {e}", path.display()));
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
    ptemu::report::write_atomic(&path, |w| {
        serde_json::to_writer_pretty(&mut *w, &report)?;
        std::io::Write::write_all(w, b"\n")
    })
    .map_err(|e| fail(e.to_string()))
}

fn process_lines(o: &mut String, out: &Path, p: &Processes) {
    if !p.traced.is_empty() {
        outln!(
            o,
            "  processes: {} forked child process(es), each a run of its own in {}/processes/<pid>/ (QE18):",
            p.traced.len(),
            out.display()
        );
        for c in &p.traced {
            outln!(
                o,
                "    process {}: {} instructions in its main thread{}",
                c.pid,
                c.instructions,
                if c.threads > 0 {
                    format!(", {} more thread(s)", c.threads)
                } else {
                    String::new()
                }
            );
        }
    }
    for (pid, why) in &p.failed {
        outln!(o, "  not traced: forked child {pid}: {why}");
    }
    let never: Vec<String> = p
        .missing
        .iter()
        .filter(|m| !p.failed.iter().any(|f| f.0 == **m))
        .map(u64::to_string)
        .collect();
    if !never.is_empty() {
        outln!(
            o,
            "  not traced: {} forked child process(es) that never ran under the plugin (pids {}): \
             killed or exec'd before their first block, or forked while another thread was sending",
            never.len(),
            never.join(", ")
        );
    }
}

/// Where the main pass puts the other threads' records, in the staging directory.
const THREADS_SPOOL: &str = "threads.spool";

/// A thread traced in a pass of its own: its tid and what its case holds.
struct ThreadCase {
    tid: u64,
    parent: Option<u64>,
    instructions: u64,
    trace_bytes: u64,
    pmis: Vec<u64>,
    maps: Vec<Mapping>,
    /// Its written code's mappings (QE17), with this thread's load times.
    code: Vec<Mapping>,
    /// The pages of written code with several versions that it ran code of.
    rewritten_run: Vec<u64>,
    /// The children it forked (QE18).
    forks: Vec<u64>,
}

/// QE15: each thread but the main one, read from the records the main pass put aside and
/// traced as its own case, `DIR/threads/<tid>/`, with the options of the run (a perf.data of its
/// own only with `--perf-data`).
fn trace_threads(
    run: &RunArgs,
    case: &ptemu::case::CaseOptions,
    opts: &simulate::Options,
    name: &str,
    threads: &[ThreadSeen],
    staged: &mut Staged,
) -> Result<Vec<ThreadCase>, Failure> {
    let spool = staged.staging().join(THREADS_SPOOL);
    let mut cases = Vec::new();
    for t in threads {
        let mut args = case.clone();
        args.out = staged.staging().join("threads").join(t.tid.to_string());
        // One perf.data holds every thread (PD7), written once they are all traced.
        args.perf_data = false;
        let thread_name = format!("{name} (thread {})", t.tid);
        let side = Arc::new(Mutex::new(Sideband::default()));
        let done = ptemu::case::write(
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
                let code = code_versions(&run.out, &s, opts);
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
                    })),
                )
            },
        )?;
        let s = side.lock().expect("not poisoned");
        cases.push(ThreadCase {
            tid: t.tid,
            parent: t.parent,
            instructions: done.outcome.source.count("instructions"),
            trace_bytes: done.outcome.unit.stats().bytes_written,
            pmis: done.outcome.pmis.clone(),
            maps: mappings(&s),
            code: code_versions(&run.out, &s, opts)
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
fn perf_data_of_threads(
    run: &RunArgs,
    opts: &simulate::Options,
    name: &str,
    s: &Sideband,
    done: &Written,
    threads: &[ThreadCase],
) -> Result<(), Failure> {
    let staging = done.staged.staging();
    // The buffers are cut at the PMIs, as perf collects them, unless a fault changed what the
    // consumer got.
    let cuts = |pmis: &[u64]| {
        if run.fault.is_empty() {
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
    maps.extend(code_versions(&run.out, s, opts).into_iter().map(|c| c.mapping));
    for m in threads.iter().flat_map(|t| t.maps.iter().chain(&t.code)) {
        match maps.iter_mut().find(|k| k.path == m.path && k.addr == m.addr) {
            Some(k) => k.tsc = k.tsc.or(m.tsc),
            None => maps.push(m.clone()),
        }
    }
    perf_data::write_process(&staging.join("perf.data"), opts, name, maps, pid, &main, &others)
        .map_err(|e| Failure::input(format!("{}: writing perf.data: {e}", run.out.display())))
}

/// The pages of written code with more than one version that the traced thread ran.
fn rewritten_run(s: &Sideband) -> Vec<u64> {
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
fn shared_rewrites(main: &Sideband, threads: &[ThreadCase]) -> Result<(), Failure> {
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
            return Err(Failure::input(format!(
                "the program rewrote its code at {page:#x} and threads {tid} and {other} both ran it: \
                 decoders load each version of written code at the time it was written, and each \
                 thread's trace keeps a clock of its own, so that is not traced (QE17; code written \
                 once may run in any thread)"
            )));
        }
    }
    Ok(())
}

fn thread_lines(o: &mut String, out: &Path, cases: &[ThreadCase]) {
    if cases.is_empty() {
        return;
    }
    outln!(
        o,
        "  threads: {} more, each a case of its own in {}/threads/<tid>/ (QE15):",
        cases.len(),
        out.display()
    );
    for c in cases {
        outln!(
            o,
            "    thread {}: {} instructions, {} trace bytes",
            c.tid,
            c.instructions,
            c.trace_bytes
        );
    }
}

/// A refusal or failure of the run, as a source error naming QEMU.
fn refusal(qemu: &Path, message: &str) -> simulate::SimError {
    simulate::SimError::Source(SourceError::io(
        &qemu.display().to_string(),
        None,
        std::io::Error::other(message.to_owned()),
    ))
}

/// The exit status a shell gives for the program's end: its code, or 128 + the signal.
pub fn exit_code(s: ExitStatus) -> u8 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}

fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".into(),
    }
}

/// `-plugin PATH,fd=N,forks=M` (QEMU splits the option at commas).
fn plugin_arg(plugin: &Path, fd: i32, forks: i32) -> Result<OsString, Failure> {
    if plugin.as_os_str().as_encoded_bytes().contains(&b',') {
        return Err(Failure::input(format!(
            "{}: QEMU reads -plugin options up to a comma: the plugin's path must have none",
            plugin.display()
        )));
    }
    let mut s = plugin.as_os_str().to_owned();
    s.push(format!(",fd={fd},forks={forks}"));
    Ok(s)
}

fn qemu_version(qemu: &Path) -> String {
    Command::new(qemu)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "version unknown".into())
}

/// `--qemu`, or qemu-x86_64 on the PATH; missing: exit 2 with the command that installs it.
fn find_qemu(given: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(p) = given {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(Failure::input(format!(
                "--qemu {}: no such executable",
                p.display()
            )))
        };
    }
    on_path(OsStr::new("qemu-x86_64")).ok_or_else(|| {
        Failure::input(
            "qemu-x86_64 is not on the PATH: install QEMU's user-mode emulators with \
             `apt-get install qemu-user` (Debian, Ubuntu), or name one with --qemu PATH",
        )
    })
}

/// `--plugin`, `$PTEMU_QEMU_PLUGIN`, or next to this executable; missing: exit 2 with the
/// command that builds it.
fn find_plugin(given: Option<&Path>) -> Result<PathBuf, Failure> {
    let exists = |p: &Path| p.is_file();
    if let Some(p) = given {
        return if exists(p) {
            Ok(p.to_path_buf())
        } else {
            Err(Failure::input(format!("--plugin {}: no such file", p.display())))
        };
    }
    if let Some(p) = std::env::var_os("PTEMU_QEMU_PLUGIN") {
        let p = PathBuf::from(p);
        return if exists(&p) {
            Ok(p)
        } else {
            Err(Failure::input(format!(
                "PTEMU_QEMU_PLUGIN={}: no such file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().ok().and_then(|e| e.canonicalize().ok());
    let dir = exe.as_deref().and_then(Path::parent);
    let candidates: Vec<PathBuf> = dir
        .map(|d| vec![d.join(PLUGIN_FILE), d.join("../lib/ptemu").join(PLUGIN_FILE)])
        .unwrap_or_default();
    if let Some(p) = candidates.iter().find(|p| exists(p)) {
        return Ok(p.clone());
    }
    let place = dir.map_or_else(
        || "the ptemu executable's folder".into(),
        |d| d.display().to_string(),
    );
    Err(Failure::input(format!(
        "ptemu's QEMU plugin ({PLUGIN_FILE}) is not installed: build it with \
         `cargo build --release -p ptemu-qemu --manifest-path {}/Cargo.toml` and copy \
         target/release/{PLUGIN_FILE} to {place} (or give --plugin PATH)",
        env!("CARGO_MANIFEST_DIR")
    )))
}

/// PROGRAM as a shell finds it: a name with a slash as it is, else the first match on the PATH;
/// not found: 127, found but not runnable: 126, with the shell's words.
fn find_program(arg0: &OsStr) -> Result<PathBuf, Failure> {
    let shown = arg0.to_string_lossy();
    let path = if arg0.as_encoded_bytes().contains(&b'/') {
        PathBuf::from(arg0)
    } else {
        on_path(arg0).ok_or_else(|| Failure::with_code(127, format!("{shown}: command not found")))?
    };
    let meta = std::fs::metadata(&path).map_err(|e| {
        Failure::with_code(
            if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            },
            format!("{shown}: {}", plain(&e)),
        )
    })?;
    if meta.is_dir() {
        return Err(Failure::with_code(126, format!("{shown}: Is a directory")));
    }
    if !is_executable(&path) {
        return Err(Failure::with_code(126, format!("{shown}: Permission denied")));
    }
    Ok(path)
}

/// What QEMU must run for `program` (found from `arg0`): an ELF file itself (`argv[0]` as
/// given), or for a `#!` script what the kernel runs (QE11): its interpreter with the line's
/// optional argument and the script, and when the interpreter is a script itself, its own
/// interpreter in turn (at most 5 deep, as Linux's exec); anything else: 126, as a shell says.
fn interpreter(arg0: &OsStr, program: &Path) -> Result<(PathBuf, OsString, Vec<OsString>), Failure> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let shown = arg0.to_string_lossy();
    let mut file = program.to_path_buf();
    let mut argv0 = arg0.to_owned();
    let mut before: Vec<OsString> = Vec::new();
    for depth in 0..=5 {
        let mut head = [0u8; SHEBANG_BUF];
        let mut n = 0;
        std::fs::File::open(&file)
            .and_then(|mut f| {
                // What the kernel reads: the first 256 bytes, or all of a shorter file.
                while n < head.len() {
                    match f.read(&mut head[n..])? {
                        0 => break,
                        k => n += k,
                    }
                }
                Ok(())
            })
            .map_err(|e| {
                let e = plain(&e);
                if depth == 0 {
                    Failure::with_code(126, format!("{shown}: {e}"))
                } else {
                    Failure::with_code(126, format!("{shown}: {}: bad interpreter: {e}", file.display()))
                }
            })?;
        if head[..n].starts_with(b"\x7fELF") {
            return Ok((file, argv0, before));
        }
        let not_exec = || {
            if depth == 0 {
                Failure::with_code(
                    126,
                    format!("{shown}: cannot execute binary file: Exec format error"),
                )
            } else {
                Failure::with_code(
                    126,
                    format!("{shown}: {}: bad interpreter: Exec format error", file.display()),
                )
            }
        };
        let (interp, arg) = shebang(&head).ok_or_else(not_exec)?;
        let interp = PathBuf::from(OsStr::from_bytes(&interp));
        if let Err(e) = std::fs::metadata(&interp) {
            return Err(Failure::with_code(
                126,
                format!("{shown}: {}: bad interpreter: {}", interp.display(), plain(&e)),
            ));
        }
        if !is_executable(&interp) {
            return Err(Failure::with_code(
                126,
                format!(
                    "{shown}: {}: bad interpreter: Permission denied",
                    interp.display()
                ),
            ));
        }
        // The kernel's new arguments: the interpreter, its argument, the script, and what
        // came after the script.
        let mut args: Vec<OsString> = arg
            .map(|a| OsStr::from_bytes(&a).to_owned())
            .into_iter()
            .collect();
        args.push(file.into_os_string());
        args.append(&mut before);
        before = args;
        argv0 = interp.clone().into_os_string();
        file = interp;
    }
    Err(Failure::with_code(
        126,
        format!("{shown}: Too many levels of symbolic links"),
    ))
}

/// The bytes of a file's start that Linux's exec reads for a `#!` line.
const SHEBANG_BUF: usize = 256;

/// The interpreter and optional argument of a `#!` line in `buf` (a file's first
/// [`SHEBANG_BUF`] bytes, zero past its end), as Linux's binfmt_script parses them: the line
/// ends at the first newline, or where the buffer does if the interpreter's name ends inside
/// it; only spaces and tabs separate (a carriage return is part of the name); the name ends at
/// a space, tab or NUL; the argument is the rest, without the spaces and tabs around it, up to
/// a NUL. `None` where the kernel refuses the file (ENOEXEC).
fn shebang(buf: &[u8; SHEBANG_BUF]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    if !buf.starts_with(b"#!") {
        return None;
    }
    let spacetab = |c: u8| c == b' ' || c == b'\t';
    let last = SHEBANG_BUF - 1;
    let non_spacetab = |from: usize, to: usize| (from..=to).find(|&k| !spacetab(buf[k]));
    let terminator = |from: usize, to: usize| (from..=to).find(|&k| spacetab(buf[k]) || buf[k] == 0);
    let mut end = match buf.iter().position(|&c| c == b'\n') {
        Some(k) => k,
        None => {
            let first = non_spacetab(2, last)?;
            // No later space, tab or NUL: the interpreter's name would be cut.
            terminator(first, last)?;
            last
        }
    };
    while end > 2 && spacetab(buf[end - 1]) {
        end -= 1;
    }
    let name = non_spacetab(2, end).filter(|&k| k != end)?;
    let sep = terminator(name, end);
    let arg = sep.filter(|&k| buf[k] != 0).and_then(|k| non_spacetab(k, end));
    // The kernel puts a NUL at `end` and at the separator: each string stops at its first NUL.
    let cut = |from: usize, to: usize| {
        let s = &buf[from..to];
        s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())].to_vec()
    };
    let name_bytes = cut(name, sep.unwrap_or(end));
    let arg = arg.filter(|&k| k < end).map(|k| cut(k, end));
    Some((name_bytes, arg))
}

/// An I/O error's text without Rust's "(os error N)".
fn plain(e: &std::io::Error) -> String {
    let t = e.to_string();
    t.split(" (os error").next().unwrap_or(&t).to_owned()
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn on_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// perf's MMAP2 records: every file mapping the program's code ran from.
fn mappings(s: &Sideband) -> Vec<Mapping> {
    s.maps
        .iter()
        .map(|m| Mapping::new(m.path.clone(), m.start, m.end - m.start, m.offset))
        .collect()
}

fn program_json(command: &[OsString], program: &Path, exit: ExitStatus, s: &Sideband) -> serde_json::Value {
    serde_json::json!({
        "command": command.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>(),
        "path": program.display().to_string(),
        "exit_status": exit_code(exit),
        "signal": exit.signal(),
        "executions": s.executed,
        "exited": s.ended,
        "maps": maps_json(s),
        "forks_not_traced": s.forks,
        "execs": s.execs,
        "tid": s.tid,
        "threads": s.threads.iter().map(|t| serde_json::json!({
            "tid": t.tid,
            "parent": t.parent,
            "case": format!("threads/{}", t.tid),
        })).collect::<Vec<_>>(),
    })
}

fn maps_json(s: &Sideband) -> Vec<serde_json::Value> {
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

fn program_lines(o: &mut String, exit: ExitStatus, s: &Sideband, opts: &simulate::Options) {
    outln!(
        o,
        "  program: {}, {} file mappings ran code (report.json: program.maps)",
        describe(exit),
        s.maps.len()
    );
    if !s.code.is_empty() {
        let mut pages: Vec<u64> = s.code.iter().map(|c| c.page).collect();
        pages.sort_unstable();
        pages.dedup();
        outln!(
            o,
            "  code written at run time: {} page(s), {} version(s) (at most {}), in code/ (report.json: program.code, QE17)",
            pages.len(),
            s.code.len(),
            ptemu::sources::qemu::written::MAX_VERSIONS
        );
        if s.code.len() > pages.len() && !opts.ctl.cyc_en() {
            outln!(
                o,
                "  note: the program rewrote code it had run: decoders load each version at the time it was \
                 written, which a trace without CYC packets does not tell them finely enough: trace with \
                 --ctl CYCEn=1 for perf and libipt to replay it"
            );
        }
    }
    if !s.ended {
        if let Some(e) = s.execs.last() {
            outln!(
                o,
                "  the program called execve({e}): the trace ends there, the new program ran untraced"
            );
        }
    }
}

/// A byte count: digits with an optional K, M, G or T (binary multiples: 1K = 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((k, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "{text:?}: a size is a number with an optional K, M, G or T"
                    ))
                }
            };
            (&t[..k], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: a size is a number with an optional K, M, G or T"))?;
    n.checked_mul(1u64 << shift)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?}: a size from 1 byte to 2^64 - 1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &[u8]) -> Option<(String, Option<String>)> {
        let mut buf = [0u8; SHEBANG_BUF];
        let n = text.len().min(SHEBANG_BUF);
        buf[..n].copy_from_slice(&text[..n]);
        shebang(&buf).map(|(i, a)| {
            (
                String::from_utf8(i).unwrap(),
                a.map(|a| String::from_utf8(a).unwrap()),
            )
        })
    }

    /// QE11: a `#!` line as Linux's binfmt_script reads it.
    #[test]
    fn qe11_a_shebang_line_is_parsed_as_the_kernel_parses_it() {
        let s = |i: &str, a: Option<&str>| Some((i.to_owned(), a.map(str::to_owned)));
        assert_eq!(line(b"#!/bin/sh\necho\n"), s("/bin/sh", None));
        assert_eq!(line(b"#!/bin/sh -x\n"), s("/bin/sh", Some("-x")));
        assert_eq!(line(b"#! \t/bin/sh  -a b \t\n"), s("/bin/sh", Some("-a b")));
        // No newline at all: the line is the file.
        assert_eq!(line(b"#!/bin/sh"), s("/bin/sh", None));
        assert_eq!(line(b"#!/bin/sh -e"), s("/bin/sh", Some("-e")));
        // A carriage return is part of the name (the kernel then finds no such file).
        assert_eq!(line(b"#!/bin/echo\r\n"), s("/bin/echo\r", None));
        // A NUL ends the name, and there is no argument.
        assert_eq!(line(b"#!/bin/sh\0 -x\n"), s("/bin/sh", None));
        // No name: refused.
        assert_eq!(line(b"#!\n"), None);
        assert_eq!(line(b"#!   \n"), None);
        assert_eq!(line(b"echo\n"), None);
        // A name that does not end inside the 256 bytes the kernel reads would be cut: refused;
        // one that does keeps its argument up to there.
        let long = [b"#!/".as_slice(), &[b'a'; 300]].concat();
        assert_eq!(line(&long), None);
        let cut = [b"#!/bin/sh ".as_slice(), &[b'b'; 300]].concat();
        assert_eq!(line(&cut), s("/bin/sh", Some(&"b".repeat(SHEBANG_BUF - 11))));
    }

    #[test]
    fn sizes_take_binary_multiples() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16k"), Ok(16 << 10));
        assert_eq!(parse_size("64G"), Ok(64 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("").is_err());
    }
}
