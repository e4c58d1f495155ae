//! `ptemu run` as a library call: a real x86-64 program under `qemu-x86_64` with ptemu's QEMU
//! plugin (`ptemu-qemu`), traced as [`crate::simulate`] traces a file (spec/qemu.md, "The
//! library call"). [`record`] finds QEMU, the plugin and the program (a `#!` script's
//! interpreter as the kernel does), makes DIR, starts QEMU, traces the main thread as its
//! stream arrives, then every other thread (QE15) and every forked child (QE18) into a case of
//! its own, with the code the program wrote (QE17) and, with perf.data, one of every thread
//! (PD7), and returns what it recorded, typed ([`Recording`]).
//!
//! ```no_run
//! use ptemu::program::{self, RecordError, RecordOptions};
//!
//! let options = RecordOptions::new(vec!["/bin/true".into()], "out");
//! match program::record(&options) {
//!     Ok(r) => println!(
//!         "exit {}: {} instructions, {} more threads, {} children",
//!         r.exit_code(),
//!         r.instructions(),
//!         r.threads.len(),
//!         r.processes.traced.len()
//!     ),
//!     Err(RecordError::NotFound(m)) => eprintln!("{m}"),
//!     Err(e) => eprintln!("not recorded: {e}"),
//! }
//! ```
//!
//! One file a concept: `find` (QEMU, the plugin, PROGRAM), `interpreter` (`#!`),
//! `qemu` (the QEMU process and the plugin's channel), `children` (the fork descriptor and the
//! children's streams), `forks` (each child traced), `threads`, `written` (code written at run
//! time), `process` (what a process's case says of it), `record` (the whole run).

mod children;
mod error;
pub(crate) mod find;
mod forks;
mod interpreter;
mod process;
mod qemu;
mod record;
mod threads;
mod written;

pub use children::Limits;
pub use error::RecordError;
pub use find::PLUGIN_FILE;
pub use forks::{ProcessCase, Processes};
pub use qemu::{describe, exit_code};
pub use record::{record, record_staged, StagedRecording};
pub use threads::ThreadCase;

use crate::case::CaseOptions;
use crate::simulate::{self, Options, Outcome, SimReport, TruthSummary};
use crate::sources::qemu::Sideband;
use crate::sources::Format;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};

/// Where warnings go as they happen (a forked child not traced, code/ that could not be
/// written): each is a sentence without a prefix. They are also kept in
/// [`Recording::warnings`].
pub type WarningSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Told how far the main pass has come: the program's block executions traced so far (about
/// every [`simulate::PROGRESS_EVERY`] events), and once more with `None` when it is over.
pub type ProgressSink = Arc<dyn Fn(Option<u64>) + Send + Sync>;

/// What to record and how: the options `ptemu run` takes.
#[derive(Clone)]
#[non_exhaustive]
pub struct RecordOptions {
    /// The simulation's options (layout, CPU, CTL, MSRs, tracer settings, threads); the format
    /// must be [`Format::Qemu`]. OS = 1 is refused (QE6).
    pub simulate: Options,
    /// DIR and what it holds besides the trace: the truth's form, perf.data, faults.
    pub case: CaseOptions,
    /// The QEMU user-mode emulator; `None`: `qemu-x86_64` on the PATH.
    pub qemu: Option<PathBuf>,
    /// ptemu's QEMU plugin; `None`: `$PTEMU_QEMU_PLUGIN`, else [`PLUGIN_FILE`] next to the
    /// running executable or in `../lib/ptemu/` from it.
    pub plugin: Option<PathBuf>,
    /// What forked children may cost (QE19).
    pub limits: Limits,
    /// PROGRAM and its arguments; PROGRAM is found on the PATH as a shell finds it (QE11).
    pub command: Vec<OsString>,
    /// The standard descriptors (bit k: descriptor k) to close for the program, those that
    /// were closed when the caller started (QE11); 0: the program gets the caller's.
    pub closed_std: u8,
    /// Where warnings go as they happen; `None`: only [`Recording::warnings`].
    pub on_warning: Option<WarningSink>,
    /// Told how the main pass goes (`ptemu run`'s progress on a terminal); `None`: nothing.
    pub on_progress: Option<ProgressSink>,
}

ptemu_core::with_setters!(RecordOptions {
    with_simulate => simulate: Options,
    with_case => case: CaseOptions,
    with_qemu => qemu: Option<PathBuf>,
    with_plugin => plugin: Option<PathBuf>,
    with_limits => limits: Limits,
    with_closed_std => closed_std: u8,
    with_on_warning => on_warning: Option<WarningSink>,
    with_on_progress => on_progress: Option<ProgressSink>,
});

impl RecordOptions {
    /// `command` traced into `out` as `ptemu run --out OUT -- COMMAND` does: the default
    /// layout and CTL, truth.bin, no perf.data, QEMU and the plugin found, the default limits.
    pub fn new(command: Vec<OsString>, out: impl Into<PathBuf>) -> Self {
        RecordOptions {
            simulate: Options::new(Format::Qemu, simulate::default_layout()),
            case: CaseOptions::new(out),
            qemu: None,
            plugin: None,
            limits: Limits::default(),
            command,
            closed_std: 0,
            on_warning: None,
            on_progress: None,
        }
    }
}

impl std::fmt::Debug for RecordOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOptions")
            .field("simulate", &self.simulate)
            .field("case", &self.case)
            .field("qemu", &self.qemu)
            .field("plugin", &self.plugin)
            .field("limits", &self.limits)
            .field("command", &self.command)
            .field("closed_std", &self.closed_std)
            .field("on_warning", &self.on_warning.as_ref().map(|_| "a sink"))
            .finish()
    }
}

/// What a recording produced: the program's end, its main thread's case (DIR), every other
/// thread's and every forked child's, and what was said on the way.
#[derive(Debug)]
#[non_exhaustive]
pub struct Recording {
    /// The program's name, as the summary and the truth name it (PROGRAM's file name).
    pub name: String,
    /// PROGRAM, as found.
    pub program: PathBuf,
    /// What QEMU ran: PROGRAM, or a script's interpreter (QE11).
    pub executable: PathBuf,
    /// How the program ended (QE11: `ptemu run` exits with [`exit_code`] of it).
    pub exit: ExitStatus,
    /// DIR.
    pub out: PathBuf,
    /// The main thread's simulation: the output unit, its events, what the reader counted.
    pub outcome: Outcome,
    /// DIR's report.json, as first written (the children are added to its `program` after).
    pub report: SimReport,
    /// DIR's truth, if written.
    pub truth: Option<TruthSummary>,
    /// What the plugin said of the main thread's process besides its events: file mappings,
    /// threads, forks, execs, written code.
    pub sideband: Sideband,
    /// The other threads, each a case in DIR/threads/ (QE15).
    pub threads: Vec<ThreadCase>,
    /// The forked children, each a case in DIR/processes/ (QE18, QE19).
    pub processes: Processes,
    /// The program that replaced this one by execve, where the trace ends (QE9).
    pub replaced_by: Option<String>,
    /// Every warning, in order, as [`RecordOptions::on_warning`] was given them.
    pub warnings: Vec<String>,
}

impl Recording {
    /// The exit status a shell gives for the program's end (QE11).
    pub fn exit_code(&self) -> u8 {
        exit_code(self.exit)
    }

    /// The instructions the main thread ran, as its truth counts them.
    pub fn instructions(&self) -> u64 {
        self.outcome.source.count("instructions")
    }
}

/// The warnings of one recording: handed on as they come, and kept.
struct Warnings {
    sink: Option<WarningSink>,
    kept: Mutex<Vec<String>>,
}

impl Warnings {
    fn new(sink: Option<WarningSink>) -> Self {
        Warnings {
            sink,
            kept: Mutex::new(Vec::new()),
        }
    }

    fn warn(&self, text: String) {
        if let Some(sink) = &self.sink {
            sink(&text);
        }
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(text);
    }

    fn into_vec(self) -> Vec<String> {
        self.kept.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}
