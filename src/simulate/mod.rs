//! The whole job of `ptemu simulate`, as a library call: a trace reader ([`crate::sources`]) feeds
//! the tracer ([`crate::tracer`]), whose packets go through the output unit ([`crate::output`])
//! into simulated memory, while a [`Tee`] copies every byte the unit accepted to a sink
//! (`trace.pt`). For Penn input the executed instructions also build a [`CodeImage`].
//!
//! Rules and policies (IDs `SIM*`): `spec/simulate.md`.

pub mod corpus;
mod deliver;
pub mod fault;
mod feed;
mod report;

pub use deliver::{finish_truth, TruthSummary};

pub use report::{peak_rss_bytes, RunInfo, SimReport, SimStats, SourceSummary};

use crate::event_log::EventLog;
use crate::image::{CodeImage, ImageBuilder, ImageErrors, PtxedTiming};
use crate::layout::{Layout, Scheme};
use crate::memory::{MemError, SparseMemory, Tee};
use crate::output::EventKind;
use crate::output::{MsrError, OutputUnit};
use crate::regs::check::check_write;
use crate::regs::msr::IA32_RTIT_CTL;
use crate::regs::{Msr, RtitCtl};
use crate::sources::penn::PennEvents;
use crate::sources::steps::{Piece, Steps};
use crate::sources::{self, Format, Input, ReadOptions, SourceError, SourceStats};
use crate::tracer::{Block, BlockError, Fact, Tracer, TracerConfig, TracerStats};
use feed::Feed;
use std::io::{self, Write};
use std::path::Path;

/// The layout used without `--layout` (SIM2): four 1 MiB INT regions, END back to the table.
pub const DEFAULT_LAYOUT: &str = include_str!("default-layout.toml");

/// The length given to the WRMSR instructions that enable and disable tracing (SIM3).
pub const WRMSR_LEN: u8 = 2;

/// How often (in events) the progress callback runs.
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// The layout used without `--layout` on a CPU whose ToPA holds one output region (SIM2, T8):
/// one 4 MiB INT region, END back to the table.
pub const DEFAULT_SINGLE_REGION_LAYOUT: &str = include_str!("default-layout-single.toml");

/// [`DEFAULT_LAYOUT`], parsed.
pub fn default_layout() -> Layout {
    Layout::parse(Path::new("<default layout>"), DEFAULT_LAYOUT).expect("the built-in layout parses")
}

/// The text of [`default_layout_for`]'s layout (its `cpu` line the built-in one's).
pub fn default_layout_text(cpu: &crate::regs::CpuProfile) -> &'static str {
    if cpu.single_entry_topa() {
        DEFAULT_SINGLE_REGION_LAYOUT
    } else {
        DEFAULT_LAYOUT
    }
}

/// The default layout for `cpu` (SIM2), with `cpu` as its profile: [`DEFAULT_LAYOUT`]'s ring
/// of four regions where ToPA takes many output entries, [`DEFAULT_SINGLE_REGION_LAYOUT`]'s one
/// region where it takes one (T8: Broadwell), so that every profile's default runs without an
/// operational error.
pub fn default_layout_for(cpu: &crate::regs::CpuProfile) -> Layout {
    let mut layout = Layout::parse(Path::new("<default layout>"), default_layout_text(cpu))
        .expect("the built-in layout parses");
    layout.cpu = cpu.clone();
    layout
}

/// The IA32_RTIT_CTL `ptemu simulate` starts from (SIM1): TraceEn, BranchEn, User, TSCEn,
/// PSBFreq 0, ToPA when the layout's scheme is ToPA, and OS as well when the format's code runs
/// at CPL 0 (the BYU whole-system traces, of which a User-only filter would trace nothing).
pub fn default_ctl(scheme: Scheme, format: Format) -> RtitCtl {
    RtitCtl::new()
        .with_trace_en(true)
        .with_branch_en(true)
        .with_user(true)
        .with_os(format.start_cpl() == 0)
        .with_tsc_en(true)
        .with_topa(scheme == Scheme::Topa)
}

/// The most workers a run starts to parse a Penn trace or decode a gem5 one, whatever
/// [`Options::threads`] asks for (SIM19, SIM20): each holds a block and its parsed records, and
/// more than the cores only take turns.
pub const MAX_PARSE_WORKERS: usize = 16;

/// What to simulate, besides the input.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// The input format.
    pub format: Format,
    /// Output layout and CPU profile.
    pub layout: Layout,
    /// IA32_RTIT_CTL as written by the enabling WRMSR.
    pub ctl: RtitCtl,
    /// Other configuration MSRs (CR3_MATCH, ADDRn_A/B), written before CTL, in order.
    pub msrs: Vec<(u32, u64)>,
    /// Tracer settings (clock, TNT size, back-pressure).
    pub tracer: TracerConfig,
    /// Reader options (`--lenient`).
    pub read: ReadOptions,
    /// Build the code image of a Penn trace.
    pub image: bool,
    /// Threads (SIM18-SIM20): 1 reads, maps and traces on the calling thread; 2 or more read
    /// and map on a second thread, ahead of the tracer, parse a Penn trace on as many more (at
    /// most [`MAX_PARSE_WORKERS`]) and decode a gem5 trace on as many (SIM20). The outputs are
    /// the same bytes either way.
    pub threads: usize,
    /// Classify the truth as the run goes (spec/truth.md TR16): the facts writer then receives
    /// `truth.bin`'s records (without the header, [`crate::truth::stream`]), not a spool, and
    /// [`Outcome::streamed_truth`] their counts. Only for a run with no consumer-side fault.
    pub stream_truth: bool,
}

ptemu_core::with_setters!(Options {
    with_ctl => ctl: RtitCtl,
    with_msrs => msrs: Vec<(u32, u64)>,
    with_tracer => tracer: TracerConfig,
    with_read => read: ReadOptions,
    with_image => image: bool,
    with_threads => threads: usize,
    with_stream_truth => stream_truth: bool,
});

impl Options {
    /// `format` through `layout`, with the default CTL for its scheme and a code image for Penn.
    pub fn new(format: Format, layout: Layout) -> Self {
        Options {
            format,
            ctl: default_ctl(layout.scheme, format),
            layout,
            msrs: Vec::new(),
            tracer: TracerConfig::default(),
            read: ReadOptions::default(),
            image: format == Format::Penn,
            threads: 1,
            stream_truth: false,
        }
    }

    /// Checks the tracer settings against their ranges ([`TracerConfig::validate`]), before any
    /// input is opened.
    pub fn validate(&self) -> Result<(), SimError> {
        self.tracer
            .validate()
            .map_err(|e| SimError::Config(e.to_string()))
    }

    /// The MSRs written before CTL, as `report.json`'s `msrs` and `case.json`'s `run.msrs` list
    /// them: `{"msr": "0x580", "value": "0x..."}` each.
    pub fn msrs_json(&self) -> Vec<serde_json::Value> {
        self.msrs
            .iter()
            .map(|(m, v)| serde_json::json!({"msr": format!("{m:#x}"), "value": format!("{v:#x}")}))
            .collect()
    }

    /// What ptxed is told to decode this run's trace: the timing, the CPU, the address filter.
    pub fn ptxed_config(&self) -> crate::image::PtxedConfig {
        crate::image::PtxedConfig {
            timing: self.ptxed_timing(),
            cpu: self.layout.cpu.signature,
            filter_cfg: (self.ctl.bits() >> 32) & 0xffff,
            filter_addr: crate::regs::Msr::addr_values(self.msrs.iter().copied()),
        }
    }

    /// The `ptxed` timing options a decoder needs for this CTL: with MTC or CYC on.
    pub fn ptxed_timing(&self) -> Option<PtxedTiming> {
        (self.ctl.mtc_en() || self.ctl.cyc_en()).then(|| PtxedTiming {
            mtc_freq: self.ctl.mtc_freq(),
            nom_freq: self.tracer.clock.nominal_ratio,
            cpuid_0x15_eax: 1,
            cpuid_0x15_ebx: self.tracer.clock.tsc_per_art,
        })
    }
}

/// Why a simulation could not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The input is bad (the error names the file and position).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A configuration MSR write raised #GP or failed (the error names the rule).
    #[error("{msr}: {error}")]
    Msr {
        /// The MSR's name.
        msr: String,
        /// What went wrong.
        error: MsrError,
    },
    /// Simulated memory refused a store.
    #[error("output store failed: {0}")]
    Memory(#[from] MemError),
    /// The Penn code image has conflicts (each names its line).
    #[error("{name}: the code image cannot be built:\n{errors}")]
    Image {
        /// The input's name.
        name: String,
        /// Every conflict.
        errors: ImageErrors,
    },
    /// Writing the byte sink failed.
    #[error("writing trace bytes: {0}")]
    Sink(#[from] io::Error),
    /// A tracer setting is out of its range ([`TracerConfig::validate`]).
    #[error("tracer settings: {0}")]
    Config(String),
    /// Writing the event stream failed.
    #[error("writing output events: {0}")]
    Events(io::Error),
    /// A fault cannot be applied to this run (FLT1–FLT7).
    #[error(transparent)]
    Fault(#[from] fault::FaultError),
    /// Writing the ground truth failed.
    #[error("writing the ground truth: {0}")]
    Truth(io::Error),
    /// The reader thread could not be started.
    #[error("starting the reader thread: {0}")]
    Thread(io::Error),
    /// The source's executions of blocks cannot be traced (BLK2): a source's own error.
    #[error("the source's block executions: {0}")]
    Blocks(BlockError),
}

/// What a simulation produced.
#[derive(Debug)]
pub struct Outcome {
    /// The output unit after the disabling WRMSR (registers, byte counts, regions); its events
    /// were drained into `events` as the run went.
    pub unit: OutputUnit,
    /// Every output event: counted, the first kept, all streamed where the log says.
    pub events: EventLog,
    /// The simulated memory holding the ToPA tables and the regions.
    pub mem: SparseMemory,
    /// What the tracer generated.
    pub tracer: TracerStats,
    /// What the reader counted.
    pub source: SourceStats,
    /// The code image (Penn input, [`Options::image`]).
    pub image: Option<CodeImage>,
    /// Bytes copied to the sink: every byte the unit accepted.
    pub trace_bytes: u64,
    /// Stream offsets of the ToPA PMIs (the first [`MAX_PMIS`]), for the `gap` fault.
    pub pmis: Vec<u64>,
    /// Start offsets of every PSB, when the truth was recorded.
    pub psbs: Vec<u64>,
    /// Whether output stopped or failed (STOP, TraceStop, an operational error): the stream may
    /// end inside a packet.
    pub truncated: bool,
    /// The truth's counts when it was classified as the run went ([`Options::stream_truth`]):
    /// the facts writer holds `truth.bin`'s records, for [`crate::truth::stream::assemble`].
    pub streamed_truth: Option<crate::truth::Counts>,
}

/// PMI offsets kept in [`Outcome::pmis`].
pub const MAX_PMIS: usize = 1 << 20;

/// Runs the simulation: programs the output MSRs from the layout, enables tracing with a WRMSR
/// just before the first traced instruction (SIM3), feeds every event, disables tracing with a
/// WRMSR at the IP after the last one, and copies every accepted byte to `sink`. The output
/// unit's events are drained into `events` after every batch, so memory stays flat however many
/// there are. `progress` runs every [`PROGRESS_EVERY`] events with the records read so far.
pub fn run<W: Write>(
    opts: &Options,
    input: Input,
    fetch: Option<Input>,
    sink: W,
    events_log: EventLog,
    progress: &mut dyn FnMut(u64),
) -> Result<(Outcome, W), SimError> {
    run_recording(opts, input, fetch, sink, None, events_log, progress)
}

/// [`run`], recording the ground truth (`spec/truth.md`) when `facts` is given: the tracer's
/// facts are spooled there as the run goes ([`crate::truth::spool`]), for
/// [`crate::truth::write`] once the damage is known.
pub fn run_recording<W: Write>(
    opts: &Options,
    input: Input,
    fetch: Option<Input>,
    sink: W,
    facts: Option<&mut dyn Write>,
    events_log: EventLog,
    progress: &mut dyn FnMut(u64),
) -> Result<(Outcome, W), SimError> {
    opts.validate()?;
    let name = input.name().to_owned();
    let feed = match opts.format {
        // SIM18, SIM19: with a second thread, Penn lines are parsed ahead, split across as many
        // workers as threads (parsing is most of the time): the same events either way.
        Format::Penn if opts.threads >= 2 => Feed::Penn(
            Box::new(PennEvents::parsed_ahead(
                input,
                opts.read,
                opts.threads.min(MAX_PARSE_WORKERS),
            )),
            opts.image.then(ImageBuilder::new),
        ),
        Format::Penn => Feed::Penn(
            Box::new(PennEvents::new(input, opts.read)),
            opts.image.then(ImageBuilder::new),
        ),
        // SIM20: with a second thread, gem5 messages are decoded ahead, split across as many
        // workers as threads.
        Format::Gem5 if opts.threads >= 2 => Feed::Other(Box::new(sources::gem5::Gem5Events::decoded_ahead(
            input,
            fetch,
            opts.read,
            opts.threads.min(MAX_PARSE_WORKERS),
        )?)),
        f => Feed::Other(sources::open_events(f, input, fetch, opts.read)?),
    };
    run_feed(opts, &name, feed, sink, facts, events_log, progress)
}

/// [`run_recording`] with the events of `source` (an emulator's, such as `ptemu run`'s QEMU
/// plugin stream) instead of a trace file; `name` names the input in the log.
pub fn run_source<W: Write>(
    opts: &Options,
    name: &str,
    source: Box<dyn sources::EventSource + Send>,
    sink: W,
    facts: Option<&mut dyn Write>,
    events_log: EventLog,
    progress: &mut dyn FnMut(u64),
) -> Result<(Outcome, W), SimError> {
    opts.validate()?;
    run_feed(opts, name, Feed::Other(source), sink, facts, events_log, progress)
}

fn run_feed<W: Write>(
    opts: &Options,
    name: &str,
    feed: Feed,
    sink: W,
    facts: Option<&mut dyn Write>,
    mut events_log: EventLog,
    progress: &mut dyn FnMut(u64),
) -> Result<(Outcome, W), SimError> {
    let name = name.to_owned();
    let mut unit = OutputUnit::new(opts.layout.cpu.clone());
    unit.track_regions(true);
    let mut tracer = Tracer::new(unit, opts.tracer.clone());
    let mut facts = facts.map(|w| {
        if opts.stream_truth {
            Truth::Stream(Box::new(crate::truth::stream::Stream::new(w)))
        } else {
            Truth::Spool(crate::truth::spool::Writer::new(w))
        }
    });
    if facts.is_some() {
        tracer.record_truth();
    }
    let mut cut = Cuts::default();
    let mut psbs = Vec::new();
    // The tables go in before the tee, which must see output bytes only.
    let mut plain = SparseMemory::new();
    opts.layout.place_tables(&mut plain)?;
    let mut mem = Tee::new(plain, sink);
    configure(opts, &mut tracer, &mut mem)?;
    tracing::info!(
        input = %name,
        format = %opts.format,
        cpu = %opts.layout.cpu.name,
        ctl = format_args!("{:#x}", opts.ctl.bits()),
        "simulating"
    );

    let start = feed.source().start_state();
    let mut ip: Option<u64> = None;
    let mut count = 0u64;
    // The blocks the source described so far (BLK1), indexed as its executions name them.
    let mut table: Vec<Block> = Vec::new();
    let mut batch = |steps: &Steps| -> Result<(), SimError> {
        table.extend_from_slice(steps.blocks());
        for piece in steps.pieces() {
            match piece {
                Piece::Events(events) => {
                    let mut rest = events;
                    if ip.is_none() {
                        if let Some(k) = rest.iter().position(|ev| ev.ip().is_some()) {
                            tracer.events(&mut mem, &rest[..k])?;
                            rest = &rest[k..];
                            let first = rest[0].ip().expect("found by its IP");
                            enable_before(opts, &mut tracer, &mut mem, start, first)?;
                            ip = Some(first);
                        }
                    }
                    tracer.events(&mut mem, rest)?;
                    if ip.is_some() {
                        // An event at an IP moves it wherever the IP was before (`Event::next_ip`),
                        // so the last such event of the batch says where the flow is.
                        if let Some(last) = rest.iter().rfind(|ev| ev.ip().is_some()) {
                            ip = Some(last.next_ip(0));
                        }
                    }
                }
                Piece::Blocks { ids, next } => {
                    if ip.is_none() {
                        let first = table.get(ids[0] as usize).map_or(0, |b| b.start());
                        enable_before(opts, &mut tracer, &mut mem, start, first)?;
                    }
                    tracer
                        .feed_chain(&mut mem, &table, ids, next)
                        .map_err(|e| match e {
                            BlockError::Memory { error, .. } => SimError::Memory(error),
                            e => SimError::Blocks(e),
                        })?;
                    ip = Some(next);
                }
            }
        }
        count += steps.len() as u64;
        // Before the enable nothing is stored, and nothing has stopped.
        let stored = ip.map(|_| mem.copied());
        spool_facts(&mut tracer, &mut facts, &mut psbs, stored, false)?;
        events_log
            .extend(tracer.drain_output_events().inspect(|e| cut.note(e)))
            .map_err(SimError::Events)
    };
    // SIM18: reading on its own thread when there are two or more; the same batches either way.
    let feed = feed.drive(&name, opts.threads, &mut batch, progress)?;
    if let Some(last) = ip {
        ctl_write(&mut tracer, &mut mem, opts.ctl.with_trace_en(false).bits(), last)?;
        tracing::debug!(
            ip = format_args!("{last:#x}"),
            "tracing disabled after the last instruction"
        );
    } else {
        tracing::warn!("{name}: the input has no instructions: nothing was traced");
    }
    if let Some(at) = tracer.unforced_overflow() {
        return Err(SimError::Fault(fault::FaultError::OvfNotReached {
            at,
            instructions: tracer.stats().instructions,
        }));
    }
    if let Some(p) = tracer.probe_mut() {
        p.finish();
    }
    // Nothing more is stored after the disabling WRMSR: the stored count is final.
    spool_facts(&mut tracer, &mut facts, &mut psbs, Some(mem.copied()), true)?;
    let mut stream = None;
    match facts {
        Some(Truth::Spool(w)) => {
            w.finish().map_err(SimError::Truth)?;
        }
        Some(Truth::Stream(s)) => stream = Some(s),
        None => {}
    }
    let source = feed.source().stats();
    let image = match feed {
        // An empty trace is a valid, empty run: no instruction, no image (and no ptxed command).
        Feed::Penn(_, Some(b)) if !b.is_empty() || b.is_refused() => {
            Some(b.build().map_err(|errors| SimError::Image { name, errors })?)
        }
        _ => None,
    };
    let trace_bytes = mem.copied();
    tracing::info!(
        events = count,
        instructions = tracer.stats().instructions,
        trace_bytes,
        output_events = events_log.counts().total(),
        "simulated"
    );
    let (mem, sink) = mem.finish()?;
    let stats = tracer.stats();
    let mut unit = tracer.into_unit();
    events_log
        .extend(unit.drain_events().inspect(|e| cut.note(e)))
        .and_then(|()| events_log.flush())
        .map_err(SimError::Events)?;
    let Cuts { pmis, truncated } = cut;
    let streamed_truth = match stream {
        Some(s) => Some(s.finish(truncated).map_err(SimError::Truth)?.0),
        None => None,
    };
    Ok((
        Outcome {
            unit,
            events: events_log,
            mem,
            tracer: stats,
            source,
            image,
            trace_bytes,
            pmis,
            psbs,
            truncated,
            streamed_truth,
        },
        sink,
    ))
}

/// What the output events say about the stream: where PMIs fired (for `gap`), and whether it was
/// cut short (a ToPA STOP or an operational error; a TraceStop ends it on purpose).
#[derive(Default)]
struct Cuts {
    pmis: Vec<u64>,
    truncated: bool,
}

impl Cuts {
    fn note(&mut self, e: &crate::output::OutputEvent) {
        match e.kind {
            EventKind::Pmi if self.pmis.len() < MAX_PMIS => self.pmis.push(e.stream_offset),
            EventKind::Stopped if e.rule != Some(crate::Rule::S6) => self.truncated = true,
            EventKind::Error => self.truncated = true,
            _ => {}
        }
    }
}

/// Enables tracing just before the first instruction, at `first` (the WRMSR that sets TraceEn
/// is the instruction before it), in the state the source's code runs in.
fn enable_before<M: crate::PhysMemory>(
    opts: &Options,
    tracer: &mut Tracer,
    mem: &mut M,
    start: sources::StartState,
    first: u64,
) -> Result<(), SimError> {
    let at = first.wrapping_sub(u64::from(WRMSR_LEN));
    tracer.set_state(at, start.cpl, start.cr3, start.mode);
    ctl_write(tracer, mem, opts.ctl.bits(), at)?;
    tracing::debug!(
        ip = format_args!("{first:#x}"),
        "tracing enabled before the first instruction"
    );
    Ok(())
}

/// Where the tracer's facts go: a spool, classified after the run, or classified as they come
/// (TR16).
enum Truth<'a> {
    Spool(crate::truth::spool::Writer<&'a mut dyn Write>),
    /// Boxed: the classifier's state is several times the spool writer's.
    Stream(Box<crate::truth::stream::Stream<&'a mut dyn Write>>),
}

/// Moves the tracer's finished facts to the spool, or classifies them (TR16: `stored` bytes
/// stored so far, `None` before tracing was enabled; `last`: the run is over, no byte more
/// will be stored), keeping the PSB offsets.
fn spool_facts(
    tracer: &mut Tracer,
    facts: &mut Option<Truth<'_>>,
    psbs: &mut Vec<u64>,
    stored: Option<u64>,
    last: bool,
) -> Result<(), SimError> {
    // Output that stopped after the enable (ToPA STOP, an operational error, TraceStop) stays
    // stopped: only a WRMSR starts it again, and a run writes none between its enable and its
    // end.
    let stopped = last || (stored.is_some() && !tracer.unit().output_enabled());
    let stored = stored.unwrap_or(0);
    let (Some(truth), Some(probe)) = (facts.as_mut(), tracer.probe_mut()) else {
        return Ok(());
    };
    match truth {
        Truth::Spool(w) => {
            // The blocks the facts name come before them (TR14).
            w.blocks(probe.blocks()).map_err(SimError::Truth)?;
            for f in probe.drain() {
                if let Fact::Psb { start } = f {
                    psbs.push(start);
                }
                w.write(&f).map_err(SimError::Truth)?;
            }
            w.pass_on().map_err(SimError::Truth)
        }
        Truth::Stream(s) => {
            s.stored(stored, stopped);
            let (blocks, facts) = probe.blocks_and_drain_while(|f| s.takes(f));
            let facts = facts.inspect(|f| {
                if let Fact::Psb { start } = *f {
                    psbs.push(start);
                }
            });
            s.facts(facts, blocks).map_err(SimError::Truth)
        }
    }
}

/// Writes STATUS, OUTPUT_BASE, MASK_PTRS and the other
/// configuration MSRs; then checks the CTL value against the CPU (M-rules) so that a bad `--ctl`
/// fails before any input is read (SIM4).
fn configure<M: crate::PhysMemory>(opts: &Options, tracer: &mut Tracer, mem: &mut M) -> Result<(), SimError> {
    for &(msr, value) in opts.layout.output_msrs().iter().chain(&opts.msrs) {
        tracer
            .wrmsr(mem, msr, value, 0, 0)
            .map_err(|error| msr_error(msr, error))?;
    }
    let unit = tracer.unit();
    check_write(unit.cpu(), &unit.registers(), Msr::Ctl, opts.ctl.bits())
        .map_err(|gp| msr_error(IA32_RTIT_CTL, gp.into()))
}

fn ctl_write<M: crate::PhysMemory>(
    tracer: &mut Tracer,
    mem: &mut M,
    value: u64,
    ip: u64,
) -> Result<(), SimError> {
    tracer
        .wrmsr(mem, IA32_RTIT_CTL, value, ip, WRMSR_LEN)
        .map_err(|error| msr_error(IA32_RTIT_CTL, error))
}

fn msr_error(msr: u32, error: MsrError) -> SimError {
    SimError::Msr {
        msr: Msr::from_address(msr).map_or_else(|| format!("MSR {msr:#x}"), |m| m.name()),
        error,
    }
}
