//! A machine traced (QE27, QE28, QE29): the plugin's stream followed on this thread, each
//! vCPU's executions turned into the tracer's events ([`VcpuEvents`]) and handed, in batches
//! over a bounded channel, to that vCPU's own logical processor: a thread that runs the
//! tracer, output unit and truth of its case, `DIR/cpu<N>/`, as `ptemu simulate` runs them. A
//! vCPU is traced from its first block in long mode (QE29); the code every traced block ran is
//! kept by address space ([`CodeSpaces`]) and written to `DIR/code/`, which each case's
//! report names, per CR3 where it is user code.

use super::events::{BlockCode, VcpuEvents};
use super::flow::{MachineFlow, Watch};
use super::image::{space_of, CodeFile, CodeSpaces};
use super::{BootOptions, MachineError};
use crate::case::{self, CaseOptions, RunDir};
use crate::simulate::{self, Options, SimReport};
use crate::sources::steps::Steps;
use crate::sources::{self, EventSource, SourceStats, StartState};
use crate::tracer::{Event, ExecMode};
use ptemu_wire::flow::BlockFlow;
use ptemu_wire::system::Execution;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

/// Events a batch holds before it goes to its vCPU's tracer.
const BATCH: usize = 1 << 14;
/// Batches on their way to one vCPU's tracer at once (the bound on the memory between them).
const IN_FLIGHT: usize = 8;

/// What to boot, trace, and where.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MachineOptions {
    /// The machine.
    pub boot: BootOptions,
    /// The simulation's options for every vCPU (layout, CPU, CTL, MSRs, tracer settings).
    pub simulate: Options,
    /// DIR and what each vCPU's case holds besides its trace (the truth's form).
    pub case: CaseOptions,
    /// Where each vCPU's tracing starts (QE29).
    pub start: TraceStart,
}

/// Where a vCPU's tracing starts: its TraceEn WRMSR comes right before this block (QE29).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceStart {
    /// Its first block in long mode (the code before is the firmware's and the boot loader's,
    /// in real and protected mode, which the model does not trace).
    #[default]
    LongMode,
    /// Its first block at CPL 3 (in long mode): the kernel's boot left out, the machine traced
    /// from the first user code on, kernel and user.
    User,
}

impl std::str::FromStr for TraceStart {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "long-mode" => Ok(TraceStart::LongMode),
            "user" => Ok(TraceStart::User),
            _ => Err(format!("{s:?}: long-mode or user")),
        }
    }
}

/// One vCPU's case.
#[derive(Debug)]
#[non_exhaustive]
pub struct VcpuCase {
    /// The vCPU (from 0).
    pub vcpu: u32,
    /// Its case, relative to DIR: `cpu<N>`.
    pub dir: String,
    /// Instructions it ran from its tracing start (the truth holds those the CPL filter lets through).
    pub instructions: u64,
    /// Block executions before its tracing started (QE29), not traced.
    pub untraced_blocks: u64,
    /// The instructions of those executions that ran (a faulting one counted: it started).
    pub untraced_instructions: u64,
    /// The MOVs to CR3 among them.
    pub untraced_cr3_writes: u64,
    /// What its traced executions held, as its events counted them.
    pub events: super::events::VcpuEvents,
    /// The bytes of its trace.pt.
    pub trace_bytes: u64,
    /// Its report.json.
    pub report: SimReport,
}

/// What a traced machine produced.
#[derive(Debug)]
#[non_exhaustive]
pub struct MachineRecording {
    /// DIR.
    pub out: PathBuf,
    /// What the stream held, counted ([`MachineFlow`]).
    pub flow: MachineFlow,
    /// Every vCPU's case, by index.
    pub vcpus: Vec<VcpuCase>,
    /// The code files in DIR/code/.
    pub code: Vec<CodeFile>,
    /// Code bytes executed with two values at one address of one space (QE28).
    pub code_conflicts: u64,
    /// The first few of those bytes: their space (the CR3's PIP bits; `None`: the kernel's)
    /// and address.
    pub conflict_sites: Vec<(Option<u64>, u64)>,
    /// Address spaces with code: the kernel's and one a user CR3.
    pub spaces: usize,
}

impl MachineOptions {
    /// The machine of `boot`, each vCPU simulated with `simulate`, into `case`'s DIR.
    pub fn new(boot: BootOptions, simulate: Options, case: CaseOptions) -> Self {
        MachineOptions {
            boot,
            simulate,
            case,
            start: TraceStart::default(),
        }
    }
}

ptemu_core::with_setters!(MachineOptions {
    with_start => start: TraceStart,
});

impl MachineRecording {
    /// Every vCPU's traced instructions.
    pub fn instructions(&self) -> u64 {
        self.vcpus.iter().map(|v| v.instructions).sum()
    }
}

/// A message to a vCPU's tracer.
enum Msg {
    /// Tracing starts in this state (the vCPU's first long-mode block).
    Start(StartState),
    /// Events and block steps, and how many instructions retire in them.
    Steps(Steps, u64),
}

/// One vCPU on the stream's side.
struct VcpuFeed {
    events: VcpuEvents,
    started: bool,
    untraced: u64,
    untraced_instructions: u64,
    untraced_cr3_writes: u64,
    cr3: u64,
    /// Where each block was last placed in the code image, and in which space.
    placed: Vec<(u64, Option<u64>)>,
    batch: Steps,
    /// The instructions its events had given when the last batch went.
    sent: u64,
    tx: Option<SyncSender<Msg>>,
    back: Receiver<Steps>,
}

impl VcpuFeed {
    fn send(&mut self, msg: Msg) -> Result<(), String> {
        match &self.tx {
            Some(tx) => tx
                .send(msg)
                .map_err(|_| "a vCPU's tracer stopped early".to_string()),
            None => Ok(()),
        }
    }

    fn flush(&mut self) -> Result<(), String> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let fresh = self.back.try_recv().unwrap_or_default();
        let full = std::mem::replace(&mut self.batch, fresh);
        let n = self.events.instructions - self.sent;
        self.sent = self.events.instructions;
        self.send(Msg::Steps(full, n))
    }
}

/// The stream's side: every block's code, every vCPU's feed, the code image.
struct Demux {
    code: Vec<BlockCode>,
    vcpus: Vec<VcpuFeed>,
    image: CodeSpaces,
    start: TraceStart,
    /// User code is kept per CR3: PIP packets tell a decoder the CR3 (OS=1); without them
    /// (OS=0) one space holds all (QE28).
    per_cr3: bool,
}

impl Watch for Demux {
    fn block(&mut self, vaddr: u64, offsets: &[u32], code: &[u8], flow: &BlockFlow) -> Result<(), String> {
        self.code.push(BlockCode::new(vaddr, offsets, code, flow.last));
        Ok(())
    }

    fn exec(&mut self, e: &Execution) -> Result<(), String> {
        let Some(v) = self.vcpus.get_mut(e.vcpu as usize) else {
            return Err(format!(
                "vCPU {} ran, the machine has {} (-smp)",
                e.vcpu,
                self.vcpus.len()
            ));
        };
        if let Some(r) = e.regs {
            v.cr3 = r.cr3;
        }
        if !v.started {
            match e.regs {
                Some(r) if r.long_mode && (self.start == TraceStart::LongMode || r.cs & 3 == 3) => {
                    v.started = true;
                    v.send(Msg::Start(StartState {
                        mode: ExecMode::Bits64,
                        cpl: (r.cs & 3) as u8,
                        cr3: r.cr3,
                    }))?;
                }
                _ => {
                    v.untraced += 1;
                    v.untraced_instructions += u64::from(e.retired) + u64::from(e.faulted);
                    if let Some(b) = self.code.get(e.block as usize) {
                        v.untraced_cr3_writes += b.cr3_writes(e.retired);
                    }
                    return Ok(());
                }
            }
        }
        let space = space_of(e.at, v.cr3).filter(|_| self.per_cr3);
        if v.placed.len() < self.code.len() {
            v.placed.resize(self.code.len(), (0, None));
        }
        if v.placed[e.block as usize] != (e.at, space) {
            v.placed[e.block as usize] = (e.at, space);
            self.image.place(space, e.at, self.code[e.block as usize].code());
        }
        v.events.push(*e, &self.code, &mut v.batch)?;
        if v.batch.len() >= BATCH {
            v.flush()?;
        }
        Ok(())
    }
}

/// One vCPU's events, as its tracer's source.
struct MachineSource {
    rx: Receiver<Msg>,
    back: SyncSender<Steps>,
    start: StartState,
    instructions: u64,
    pending: Option<Msg>,
    /// The blocks defined so far, kept for a caller that takes events alone (`next_events`;
    /// a boot's run takes steps).
    table: Vec<crate::tracer::Block>,
}

impl MachineSource {
    /// Waits for the vCPU's start (or the end of the stream, with no instruction traced).
    fn new(rx: Receiver<Msg>, back: SyncSender<Steps>) -> Self {
        let mut s = MachineSource {
            rx,
            back,
            start: StartState {
                mode: ExecMode::Bits64,
                cpl: 0,
                cr3: 0,
            },
            instructions: 0,
            pending: None,
            table: Vec::new(),
        };
        match s.rx.recv() {
            Ok(Msg::Start(st)) => s.start = st,
            Ok(other) => s.pending = Some(other),
            Err(_) => {}
        }
        s
    }
}

impl EventSource for MachineSource {
    fn next_events(&mut self, out: &mut Vec<Event>) -> sources::error::Result<bool> {
        // Only a caller that takes events alone comes here: the block steps expanded.
        let mut steps = Steps::default();
        let more = self.next_steps(&mut steps)?;
        self.table.extend_from_slice(steps.blocks());
        steps.expand_into(&self.table, out);
        Ok(more)
    }

    fn next_steps(&mut self, out: &mut Steps) -> sources::error::Result<bool> {
        loop {
            let msg = match self.pending.take() {
                Some(m) => m,
                None => match self.rx.recv() {
                    Ok(m) => m,
                    Err(_) => return Ok(false),
                },
            };
            match msg {
                Msg::Start(_) => continue,
                Msg::Steps(mut v, n) => {
                    self.instructions += n;
                    out.append(&mut v);
                    let _ = self.back.try_send(v);
                    return Ok(true);
                }
            }
        }
    }

    fn start_state(&self) -> StartState {
        self.start
    }

    fn stats(&self) -> SourceStats {
        SourceStats {
            format: "qemu-system",
            records: self.instructions,
            skipped: 0,
            counts: vec![("instructions", self.instructions)],
            approximations: Vec::new(),
        }
    }
}

/// Boots the machine of `o`, traces every vCPU into `DIR/cpu<N>/` and writes `DIR/code/` and
/// `DIR/machine.json`; all of DIR or nothing (SIM7).
pub fn trace(o: &MachineOptions) -> Result<MachineRecording, MachineError> {
    let out = &o.case.out;
    let out_error = |e: std::io::Error| MachineError::Output(format!("{}: {e}", out.display()));
    let dir = RunDir::create(out, o.case.force).map_err(out_error)?;
    let smp = o.boot.smp.max(1) as usize;
    let code_files: Arc<Mutex<Vec<CodeFile>>> = Arc::default();
    let mut feeds = Vec::with_capacity(smp);
    let mut ends = Vec::with_capacity(smp);
    for _ in 0..smp {
        let (tx, rx) = sync_channel(IN_FLIGHT);
        let (back_tx, back) = sync_channel(IN_FLIGHT + 1);
        feeds.push(VcpuFeed {
            events: VcpuEvents::default(),
            started: false,
            untraced: 0,
            untraced_instructions: 0,
            untraced_cr3_writes: 0,
            cr3: 0,
            placed: Vec::new(),
            batch: Steps::default(),
            sent: 0,
            tx: Some(tx),
            back,
        });
        ends.push((rx, back_tx));
    }
    let staging = dir.staging().to_path_buf();
    // Absolute: the reports name the files wherever a decoder runs from.
    let final_code = std::path::absolute(dir.final_path("")).map_err(out_error)?;
    let (flow, cases) = std::thread::scope(|scope| {
        let mut threads = Vec::with_capacity(smp);
        for (k, (rx, back)) in ends.into_iter().enumerate() {
            let mut args = o.case.clone();
            args.out = staging.join(format!("cpu{k}"));
            args.perf_data = false;
            args.force = false;
            let opts = &o.simulate;
            let code_files = code_files.clone();
            let final_code = final_code.clone();
            threads.push(scope.spawn(move || {
                let name = format!("cpu{k}");
                let done = case::write(
                    &args,
                    opts,
                    &name,
                    &mut (),
                    |sink, truth, events, progress, _| {
                        let source = MachineSource::new(rx, back);
                        simulate::run_source(opts, &name, Box::new(source), sink, truth, events, progress)
                    },
                    &|_| {
                        let files = code_files.lock().unwrap_or_else(|p| p.into_inner());
                        (Vec::new(), Some(code_json(&files, &final_code, k)))
                    },
                );
                (args.out, done)
            }));
        }
        let mut demux = Demux {
            code: Vec::new(),
            vcpus: feeds,
            image: CodeSpaces::default(),
            start: o.start,
            per_cr3: o.simulate.ctl.os(),
        };
        let followed = super::launch::run(&o.boot, &mut demux).and_then(|flow| {
            for (k, v) in demux.vcpus.iter_mut().enumerate() {
                let mut ev = std::mem::take(&mut v.batch);
                v.events
                    .finish(&demux.code, &mut ev)
                    .map_err(|m| MachineError::Stream {
                        path: o.boot.qemu.clone(),
                        message: format!("vCPU {k}: {m}"),
                    })?;
                v.batch = ev;
                v.flush().map_err(MachineError::Launch)?;
            }
            let files = demux.image.write(&staging).map_err(out_error)?;
            *code_files.lock().unwrap_or_else(|p| p.into_inner()) = files;
            Ok(flow)
        });
        let untraced: Vec<(u64, u64, u64, super::events::VcpuEvents)> = demux
            .vcpus
            .iter_mut()
            .map(|v| {
                (
                    v.untraced,
                    v.untraced_instructions,
                    v.untraced_cr3_writes,
                    std::mem::take(&mut v.events),
                )
            })
            .collect();
        let image = std::mem::take(&mut demux.image);
        // The channels close: each tracer ends its run.
        demux.vcpus.clear();
        let cases: Vec<_> = threads
            .into_iter()
            .map(|t| t.join().expect("a vCPU's tracer does not panic"))
            .collect();
        (followed.map(|f| (f, untraced, image)), cases)
    });
    let (flow, untraced, image) = flow?;
    let mut vcpus = Vec::with_capacity(smp);
    for (k, ((case_out, done), (blocks, insns, cr3, events))) in cases.into_iter().zip(untraced).enumerate() {
        let done = done.map_err(|e| MachineError::Output(format!("cpu{k}: {e}")))?;
        vcpus.push(VcpuCase {
            vcpu: k as u32,
            dir: format!("cpu{k}"),
            instructions: done.outcome.source.count("instructions"),
            untraced_blocks: blocks,
            untraced_instructions: insns,
            untraced_cr3_writes: cr3,
            events,
            trace_bytes: done.outcome.unit.stats().bytes_written,
            report: done.report,
        });
        done.staged
            .commit(&case_out)
            .map_err(|e| MachineError::Output(format!("cpu{k}: {e}")))?;
    }
    let code = code_files.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let recording = MachineRecording {
        out: out.clone(),
        flow,
        vcpus,
        code,
        code_conflicts: image.conflicts,
        conflict_sites: image.first_conflicts.clone(),
        spaces: image.spaces(),
    };
    let json = machine_json(&recording, o);
    std::fs::write(
        dir.staged("machine.json"),
        serde_json::to_string_pretty(&json).expect("JSON") + "\n",
    )
    .map_err(out_error)?;
    let mut outputs: Vec<String> = vec!["machine.json".into(), "code".into()];
    outputs.extend(recording.vcpus.iter().map(|v| v.dir.clone()));
    let names: Vec<&str> = outputs.iter().map(String::as_str).collect();
    dir.commit(&names, &[]).map_err(out_error)?;
    Ok(recording)
}

/// A vCPU case's `program` block in its report: the machine's code files, as `program.maps`
/// (each with its CR3 where it is one address space's), at their final paths.
fn code_json(files: &[CodeFile], dir: &Path, vcpu: usize) -> serde_json::Value {
    let maps: Vec<serde_json::Value> = files
        .iter()
        .map(|f| {
            serde_json::json!({
                "path": dir.join(&f.path).display().to_string(),
                "start": format!("{:#x}", f.start),
                "end": format!("{:#x}", f.start + f.size),
                "offset": format!("{:#x}", f.offset),
                "cr3": f.cr3.map(|c| format!("{c:#x}")),
            })
        })
        .collect();
    serde_json::json!({ "machine": { "vcpu": vcpu }, "maps": maps })
}

fn machine_json(r: &MachineRecording, o: &MachineOptions) -> serde_json::Value {
    let f = &r.flow;
    serde_json::json!({
        "kernel": o.boot.kernel.display().to_string(),
        "initrd": o.boot.initrd.as_ref().map(|i| i.display().to_string()),
        "append": o.boot.append,
        "smp": o.boot.smp,
        "memory_mib": o.boot.memory_mib,
        "qemu": o.boot.qemu.display().to_string(),
        "exit": f.status.and_then(|s| s.code()),
        "panicked": f.panicked,
        "stream_bytes": f.stream_bytes,
        "instructions": r.instructions(),
        "code": {
            "files": r.code.len(),
            "conflicts": r.code_conflicts,
            "first_conflicts": r.conflict_sites.iter().map(|&(cr3, at)| serde_json::json!({
                "cr3": cr3.map(|c| format!("{c:#x}")),
                "at": format!("{at:#x}"),
            })).collect::<Vec<_>>(),
            "spaces": r.spaces,
        },
        "vcpus": r.vcpus.iter().zip(&f.vcpus).map(|(c, v)| serde_json::json!({
            "dir": c.dir,
            "instructions": c.instructions,
            "untraced_blocks": c.untraced_blocks,
            "untraced_instructions": c.untraced_instructions,
            "untraced_cr3_writes": c.untraced_cr3_writes,
            "cr3_writes": c.events.cr3_writes,
            "syscalls": c.events.syscalls,
            "asynchronous": c.events.asynchronous,
            "traced_faults": c.events.faults,
            "rep_iterations": c.events.rep_iterations,
            "store_restarts": v.store_restarts,
            "trace_bytes": c.trace_bytes,
            "blocks": v.blocks,
            "faults": v.faults,
            "splits": v.splits,
            "entries": v.entries.len(),
            "far": v.far,
            "cr3_values": v.cr3_values,
        })).collect::<Vec<_>>(),
    })
}
