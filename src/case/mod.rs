//! A run's output directory, its case: the outputs of one simulation (trace.pt, regions/,
//! report.json, events.jsonl, the truth, perf.data, the code image, layout.svg), written all or
//! nothing through a staging directory ([`RunDir`], spec/simulate.md SIM7), with what an
//! interrupted run removes ([`cleanup`]). [`write()`] is what `ptemu simulate` and each process
//! and thread of `ptemu run` ([`crate::program`]) do around the simulation.

pub mod cleanup;
mod dir;
mod files;
pub mod owner;

pub use dir::{Replacing, RunDir};
pub use files::Staged;

use crate::event_log::EventLog;
use crate::simulate::fault::Plan;
use crate::simulate::{self, Options, Outcome, RunInfo, SimError, SimReport, TruthSummary};
use crate::sources::ErrorKind;
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// The form of the truth a case holds (spec/truth.md TR9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TruthFormat {
    /// `truth.bin`: compact, about a byte an instruction.
    Bin,
    /// `truth.jsonl`: one JSON line a record.
    Jsonl,
}

impl TruthFormat {
    /// The file it is written to in DIR.
    pub fn file(self) -> &'static str {
        match self {
            TruthFormat::Bin => "truth.bin",
            TruthFormat::Jsonl => "truth.jsonl",
        }
    }
}

/// What a case holds besides the simulation's own outputs, and where it goes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CaseOptions {
    /// The output directory (DIR).
    pub out: PathBuf,
    /// The truth's form; `None`: no truth (`--no-truth`).
    pub truth: Option<TruthFormat>,
    /// Also write DIR/perf.data (and, for Penn input, DIR/image.elf), spec/perf-data.md.
    pub perf_data: bool,
    /// The faults injected, with the seed of positions not given (spec/truth.md FLT*).
    pub plan: Plan,
    /// The layout file the run's layout came from (`--layout`); `None`: the default layout, or
    /// the ring a wrap or stop fault makes. Only named in report.json's `layout` line.
    pub layout_file: Option<PathBuf>,
    /// Write into an `out` that holds files ptemu did not write (`--force`, SIM22): the
    /// same-named ones are replaced, nothing else is touched.
    pub force: bool,
}

ptemu_core::with_setters!(CaseOptions {
    with_force => force: bool,
    with_truth => truth: Option<TruthFormat>,
    with_perf_data => perf_data: bool,
    with_plan => plan: Plan,
    with_layout_file => layout_file: Option<PathBuf>,
});

impl CaseOptions {
    /// A case in `out` with truth.bin, no perf.data and no faults.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        CaseOptions {
            out: out.into(),
            truth: Some(TruthFormat::Bin),
            perf_data: false,
            plan: Plan::default(),
            layout_file: None,
            force: false,
        }
    }

    /// The layout the run used, in a line: its file, the default, or the ring a wrap or stop
    /// fault made, and what it is (`Layout::summary`).
    pub fn layout_line(&self, opts: &Options) -> String {
        let source = match &self.layout_file {
            Some(p) => p.display().to_string(),
            None if self.plan.makes_layout() => "the --fault layout".to_string(),
            None => "default layout".to_string(),
        };
        format!("{source}: {}", opts.layout.summary())
    }
}

/// Why a case could not be written. The message names the file or DIR.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaseError {
    /// The input, the run or the commit failed (exit code 2 in the CLI).
    #[error("{0}")]
    Input(String),
    /// Writing the outputs failed (a full disk, say): a run that meets it anywhere writes
    /// nothing.
    #[error("{0}")]
    Output(String),
}

/// What the simulation is told of its progress, and when it is over.
pub trait Progress {
    /// `records` read so far (every [`simulate::PROGRESS_EVERY`] events).
    fn update(&mut self, records: u64);
    /// The simulation is over (before the truth and the other files are written).
    fn done(&mut self) {}
}

/// No progress shown.
impl Progress for () {
    fn update(&mut self, _records: u64) {}
}

/// The staged file a simulation writes the stream to.
pub type Sink = BufWriter<fs::File>;

/// What a run knows once its simulation is over: the file mappings for perf.data's MMAP2
/// records, and what report.json says of a traced program.
pub type After = (Vec<crate::perf_data::Mapping>, Option<serde_json::Value>);

/// The simulation's result, every output staged in DIR.
#[derive(Debug)]
pub struct Written {
    /// What the simulation produced.
    pub outcome: Outcome,
    /// report.json as written.
    pub report: SimReport,
    /// The truth written, if any.
    pub truth: Option<TruthSummary>,
    /// The outputs, to commit ([`Staged::commit`]) once the summary is out.
    pub staged: Staged,
}

/// What `ptemu simulate` and `ptemu run` do around the simulation: DIR staged (SIM7, all or
/// nothing), `simulate` run into the staged sink, truth spool and event log (`progress` told
/// as it goes), then the truth, perf.data (with the file mappings `after` gives once the
/// simulation is over), the report and every other file, staged to be moved into place at once.
#[allow(clippy::type_complexity)]
pub fn write(
    c: &CaseOptions,
    opts: &Options,
    name: &str,
    progress: &mut dyn Progress,
    simulate: impl FnOnce(
        Sink,
        Option<&mut dyn std::io::Write>,
        EventLog,
        &mut dyn FnMut(u64),
        &Path,
    ) -> Result<(Outcome, Sink), SimError>,
    after: &dyn Fn(&Path) -> After,
) -> Result<Written, CaseError> {
    let out_error =
        |e: std::io::Error| CaseError::Output(format!("{}: writing outputs: {e}", c.out.display()));
    let dir = RunDir::create(&c.out, c.force).map_err(out_error)?;
    let create = |name: &str| {
        fs::File::create(dir.staged(name))
            .map(|f| BufWriter::with_capacity(1 << 20, f))
            .map_err(out_error)
    };
    let plan = &c.plan;
    // With consumer-side faults the stored stream goes aside first; trace.pt is what the
    // consumer got (spec/truth.md FLT3, FLT5-FLT7).
    let full = if plan.changes_delivery() {
        "trace.full"
    } else {
        "trace.pt"
    };
    let sink = create(full)?;
    let mut spool = match c.truth {
        None => None,
        Some(_) => Some(create("truth.spool")?),
    };
    let events = EventLog::default().streaming_to(create("events.jsonl")?);

    let started = std::time::Instant::now();
    let result = simulate(
        sink,
        spool.as_mut().map(|w| w as &mut dyn std::io::Write),
        events,
        &mut |records| progress.update(records),
        dir.staging(),
    );
    progress.done();
    let run_info = RunInfo::now(started.elapsed().as_secs_f64());
    let sim_error = |e: SimError| match e {
        // Writing DIR failed, not the input: name DIR (a full disk, say).
        SimError::Sink(_) | SimError::Events(_) | SimError::Truth(_) => {
            CaseError::Output(format!("{}: {e}", c.out.display()))
        }
        // A file the source puts aside (`ptemu run`'s other threads) could not be written: the
        // run's own output failed, not the input.
        SimError::Source(s) if matches!(s.kind, ErrorKind::Write(_)) => CaseError::Output(s.to_string()),
        e => CaseError::Input(e.to_string()),
    };
    // On an error `dir` is dropped, which removes everything the run made.
    let (outcome, sink) = result.map_err(sim_error)?;
    sink.into_inner()
        .map_err(|e| out_error(e.into_error()))?
        .sync_all()
        .map_err(out_error)?;
    let truth = match (spool, c.truth) {
        (Some(w), Some(format)) => {
            w.into_inner().map_err(|e| out_error(e.into_error()))?;
            let run = opts.describe(plan, name);
            Some(
                simulate::finish_truth(
                    &dir.staged(full),
                    &dir.staged("trace.pt"),
                    &dir.staged("truth.spool"),
                    &dir.staged(format.file()),
                    &outcome,
                    plan,
                    run,
                )
                .map_err(sim_error)?,
            )
        }
        _ => None,
    };
    let (maps, program) = after(dir.staging());
    let perf = if c.perf_data {
        Some(
            crate::perf_data::write_run(
                dir.staging(),
                &dir.final_path(""),
                opts,
                &outcome,
                crate::perf_data::AuxCuts::for_plan(plan),
                name,
                maps,
            )
            .map_err(out_error)?,
        )
    } else {
        None
    };
    let (report, staged) = files::finish(
        dir,
        opts,
        &outcome,
        (run_info, c.layout_line(opts)),
        truth.as_ref(),
        perf.as_deref(),
        program,
    )
    .map_err(out_error)?;
    Ok(Written {
        outcome,
        report,
        truth,
        staged,
    })
}
