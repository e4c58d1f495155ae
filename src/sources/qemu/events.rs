//! The plugin's stream mapped to tracer events (spec/qemu.md): each executed instruction's
//! outcome is read from the next one QEMU executed.

use super::classify::{classify, Insn, Kind};
use super::wire::Writer;
use super::wire::{FaultNote, FileMap, HandlerNote, NoteKind, Reader, Record, WireError};
use super::written::{CodeVersion, TooManyVersions, Written, MAX_VERSIONS};
use super::{QEMU_CR3, SYSCALL_ENTRY, SYSRET_FROM};
use crate::sources::error::{ErrorKind, Position, Result, SourceError};
use crate::sources::steps::Steps;
use crate::sources::{EventSource, SourceStats, StartState};
use crate::tracer::{Block, BlockEnd, Event, ExecMode, FarKind};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

mod death;

/// What the run learnt besides the events, for the summary, report.json and perf.data: shared
/// with the caller, since the source itself goes into the simulation.
#[derive(Clone, Debug, Default)]
pub struct Sideband {
    /// Every file mapping code ran from, in the order first executed.
    pub maps: Vec<FileMap>,
    /// Children the program forked (not traced, QE8).
    pub forks: Vec<u64>,
    /// The programs it tried to execve (QE9): the last one replaced it if the stream ended there.
    pub execs: Vec<String>,
    /// Whether the plugin wrote its end record (the program exited; no end: it was killed or
    /// replaced by execve).
    pub ended: bool,
    /// Instruction executions the plugin counted (REP iterations each), from its end record.
    pub executed: Option<u64>,
    /// Whether the plugin spoke at all (the stream's magic arrived): QEMU loaded it.
    pub loaded: bool,
    /// The thread this source traces (the first whose chunk came: the program's main thread).
    pub tid: Option<u64>,
    /// The program's other threads, in the order they first ran (QE15), with the thread that
    /// started each.
    pub threads: Vec<ThreadSeen>,
    /// Code written at run time, every version of every page, with when the traced thread ran
    /// it (QE17).
    pub code: Vec<CodeVersion>,
    /// The signal that killed the program from this thread and the thread's RIP then (QE22):
    /// the faulting instruction, or the one the signal came before.
    pub killed: Option<(u32, u64)>,
}

/// A thread of the program besides the one traced (QE15).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSeen {
    /// Its tid.
    pub tid: u64,
    /// The thread that started it, when the stream said so.
    pub parent: Option<u64>,
}

/// Where the records of the other threads go, for a pass of their own (QE15): the stream again,
/// without the traced thread's chunks.
struct Spool {
    writer: Writer,
    file: Box<dyn Write + Send>,
    /// Whose records the writer's last chunk holds.
    owner: Option<u64>,
    error: Option<std::io::Error>,
}

impl Spool {
    /// `rec`, whose chunk is `owner`'s (0: the process's), into the spool.
    fn forward(&mut self, owner: u64, rec: &Record<'_>) {
        if self.owner != Some(owner) {
            self.writer.thread(owner);
            self.owner = Some(owner);
        }
        match rec {
            Record::Block {
                vaddr, offsets, code, ..
            } => {
                let distances: Vec<u64> = offsets.windows(2).map(|w| u64::from(w[1] - w[0])).collect();
                self.writer.block(*vaddr, &distances, code);
            }
            Record::Exec { first, count } => self.writer.exec_block(*first, *count),
            Record::Map(m) => self.writer.map(m),
            Record::Note { kind, value, text } => self.writer.note(*kind, *value, text),
            Record::End { executed } => self.writer.end_with(*executed),
            Record::Registers(r) => self.writer.registers(r),
            Record::Thread { .. } => {}
        }
        if self.writer.pending() >= 1 << 16 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let (file, error) = (&mut self.file, &mut self.error);
        self.writer.take(&mut |b| {
            if error.is_none() {
                if let Err(e) = file.write_all(b) {
                    *error = Some(e);
                }
            }
        });
    }
}

/// rt_sigreturn's number.
const SYS_RT_SIGRETURN: u64 = 15;

/// SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV, SIGSYS: the signals an instruction raises.
const FAULT_SIGNALS: u64 = 1 << 4 | 1 << 5 | 1 << 7 | 1 << 8 | 1 << 11 | 1 << 31;

/// The interrupt vector a signal's delivery is traced with: Linux's RESCHEDULE_VECTOR, the
/// interrupt that makes a running thread enter the kernel and find its signal (QE16).
const SIGNAL_VECTOR: u8 = 0xfd;

/// The way out of user mode at `x`, the next instruction, which has not run: FUP, TIP.PGD.
fn interrupted_at(x: u64) -> Event {
    Event::far(
        FarKind::Interrupt {
            vector: SIGNAL_VECTOR,
        },
        x,
        SYSCALL_ENTRY,
        0,
        ExecMode::Bits64,
    )
}

/// The transfer into the kernel of an instruction that enters it (a SYSCALL, an INT), and the
/// one that comes back after it (QE6).
fn kernel_entry(kind: Kind) -> Option<(FarKind, FarKind)> {
    match kind {
        Kind::Syscall => Some((FarKind::Syscall, FarKind::Sysret)),
        Kind::SoftwareInterrupt(vector) => Some((FarKind::SoftwareInterrupt { vector }, FarKind::Iret)),
        _ => None,
    }
}

/// QE21: the exception a fault signal stands for, as Linux makes the signal from it: SIGFPE
/// #DE (0), SIGILL and SIGSYS #UD (6), SIGTRAP #BP (3), SIGSEGV with SI_KERNEL (0x80) #GP (13),
/// any other SIGSEGV (SEGV_MAPERR, SEGV_ACCERR, or no siginfo to tell) and SIGBUS a page fault
/// (14) at the frame's CR2.
fn fault_kind(signo: u32, code: i32, cr2: u64) -> FarKind {
    let (vector, cr2) = match signo {
        8 => (0, None),
        4 | 31 => (6, None),
        5 => (3, None),
        11 if code == 0x80 => (13, None),
        _ => (14, Some(cr2)),
    };
    FarKind::Exception { vector, cr2 }
}

/// A signal delivered after a branch whose outcome the handler's return tells (QE16).
#[derive(Debug)]
struct Suspended {
    /// The branch (or REP string instruction) the signal came after.
    insn: Insn,
    /// The handler.
    handler: u64,
    /// Handlers entered and not yet returned from.
    depth: u32,
    /// Where in the caller's events the handler's begin (no block execution comes after it
    /// while the signal is suspended).
    mark: usize,
    /// Whether a handler returned to its restorer since: a signal for sure. Needed after an
    /// indirect JMP, which may also be a jump into the handler's function (a PLT stub).
    confirmed: bool,
}

/// The most events a suspended signal's handler may make before it returns (QE16).
const MAX_SUSPENDED_EVENTS: usize = 1 << 22;

/// A QEMU plugin stream as an [`EventSource`].
pub struct QemuEvents<R> {
    name: String,
    reader: Reader<R>,
    table: Vec<Insn>,
    /// For each instruction id, the event it makes when it is plain.
    retire: Vec<Event>,
    /// For each instruction id, how many instructions from it on in its block are plain.
    stretch: Vec<u32>,
    /// For each instruction id, its written code's version plus one, or 0 (QE17).
    version: Vec<u32>,
    /// For each instruction id, its place in its block (0 for the first).
    position: Vec<u16>,
    /// The id of the pending instruction.
    pending_id: Option<usize>,
    /// Code written at run time (QE17).
    written: Written,
    /// Versions run in this batch, with the instruction (the source's, from 0) where (QE17).
    runs: Vec<(usize, u64)>,
    /// The batch's instructions before this source's call began.
    batch_base: u64,
    /// The model's instructions in the batches returned so far.
    model_instructions: u64,
    /// Whether the traced thread's count came (QE15).
    thread_ended: bool,
    pending: Option<Insn>,
    /// Signal handlers the program installed, each with the signals it handles (a bit each):
    /// a few, looked up on the way out of every RET and indirect branch, so a list, not a hash.
    handlers: Vec<(u64, u64)>,
    /// Where handlers return to (their `sa_restorer`, which makes the rt_sigreturn call).
    restorers: Vec<u64>,
    /// The system call the last SYSCALL made (the plugin's note).
    last_syscall: Option<u64>,
    /// A signal delivered after a branch, until its handler returns (QE16).
    suspended: Option<Suspended>,

    files: Vec<(FileMap, Option<memmap2::Mmap>)>,
    side: Arc<Mutex<Sideband>>,
    executions: u64,
    instructions: u64,
    counts: Counts,
    done: bool,
    /// Whether the plugin said that the SYSCALL the last block ends with began (QE7, QE13): a
    /// block's execution is told when it starts, so only this note says that a fault earlier
    /// in the block did not stop it first.
    entered: bool,
    scratch: Vec<u8>,
    starts: Vec<u32>,
    /// The thread traced: `None` until the first thread record (a stream without any is one
    /// thread's).
    mine: Option<u64>,
    /// Whose chunk the records being read belong to (0: the process's).
    current: u64,
    /// Every thread seen.
    seen: HashSet<u64>,
    /// The other threads' records, when wanted.
    spool: Option<Spool>,
    /// The blocks of straight-line code this source gives as executions (BLK1), in the order
    /// described: translated blocks whose instructions but the last are plain and whose last
    /// one is a near branch or plain (a block of written code, or ending at a system call, a
    /// REP string or a far transfer, goes instruction by instruction).
    blocks: Vec<Block>,
    /// For each instruction id: the translated block it starts plus one, when that is one of
    /// `blocks`; else 0.
    block_at: Vec<u32>,
    /// Every block the plugin translated, by its index in the stream's batches.
    translated: Vec<Translated>,
    /// The translated block whose execution as one of `blocks` is pending (its outcome comes
    /// with the next one); `pending` is `None` while it is set.
    pending_block: Option<u32>,
    /// A batch reused by [`EventSource::next_events`].
    expand: Steps,
    /// Whether a handler of a fault signal is installed: then the plain instructions of the
    /// last block run wait in `held` until the thread's next record shows that no fault
    /// stopped the block (QE21), and blocks go instruction by instruction.
    fault_handled: bool,
    /// The last block's plain instructions, held back (QE21).
    held: Vec<Event>,
}

/// A block the plugin translated, by its index in the stream's batches (QE13): all an execution
/// of it is read and resolved with, in one record (32 bytes: two a cache line, one load a block
/// on the hot path).
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct Translated {
    /// Its first instruction's address.
    start: u64,
    /// Where an execution goes by itself when its last instruction is no indirect branch or
    /// RET: the direct target, or the fall-through of a plain instruction (a conditional
    /// branch also goes to `start + len`, [`FALLS`]).
    way: u64,
    /// Its first instruction id.
    first: u32,
    /// The block this source gives whole executions of, plus one (0: none, BLK1).
    block: u32,
    /// The whole instructions' bytes (as a block: 0 otherwise).
    len: u16,
    /// How many ids an execution covers (a QE14 instruction into the next page included).
    ids: u16,
    /// Its whole instructions.
    whole: u16,
    /// [`FALLS`], [`INDIRECT`].
    flags: u8,
    /// The count of the source's statistics its last instruction adds to ([`Counts::ends`]).
    class: u8,
}

impl Translated {
    /// Whether an execution that ends in no indirect branch or RET goes on at `nx` by itself:
    /// its way, or its end for a conditional branch (whole addresses; without a branch on which
    /// way it went: a conditional branch's way is as hard to predict here as in the program).
    #[inline(always)]
    fn goes_to(&self, nx: u64) -> bool {
        (nx == self.way) | ((self.flags & FALLS != 0) & (nx == self.start + u64::from(self.len)))
    }

    /// Whether `nx` may be an instruction inside the block past its first (QE13: where QEMU
    /// gave the block up part-way): the cheap range test before the exact one.
    #[inline(always)]
    fn may_hold(&self, nx: u64) -> bool {
        nx.wrapping_sub(self.start).wrapping_sub(1) < u64::from(self.len) - 1
    }
}

/// [`Translated::flags`]: the last instruction is a conditional branch, which may also go on at
/// the block's end.
const FALLS: u8 = 1;
/// [`Translated::flags`]: the last instruction is an indirect branch or a RET: it goes anywhere
/// but a signal handler's first instruction or an instruction inside the block (QE13, QE16).
const INDIRECT: u8 = 2;

/// [`Counts::ends`]: a block whose last instruction is plain.
const END_NONE: u8 = 0;
/// [`Counts::ends`]: a conditional branch.
const END_CONDITIONAL: u8 = 1;
/// [`Counts::ends`]: a direct JMP or CALL.
const END_DIRECT: u8 = 2;
/// [`Counts::ends`]: an indirect JMP or CALL.
const END_INDIRECT: u8 = 3;
/// [`Counts::ends`]: a RET.
const END_RETURN: u8 = 4;

#[derive(Default, Clone, Copy)]
struct Counts {
    /// Whole blocks' executions by the class of their last instruction: [`END_NONE`],
    /// [`END_CONDITIONAL`], [`END_DIRECT`], [`END_INDIRECT`], [`END_RETURN`].
    ends: [u64; 5],
    blocks: u64,
    conditional: u64,
    direct: u64,
    indirect: u64,
    returns: u64,
    syscalls: u64,
    rep: u64,
    signals: u64,
    sigreturns: u64,
    unreturned: u64,
}

impl<R> std::fmt::Debug for QemuEvents<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QemuEvents")
            .field("name", &self.name)
            .field("translated", &self.table.len())
            .field("executions", &self.executions)
            .finish_non_exhaustive()
    }
}

impl<R: Read> QemuEvents<R> {
    /// Reads the stream `inner`; `name` names it in errors (the program); `side` receives the
    /// mappings and notes.
    pub fn new(name: impl Into<String>, inner: R, side: Arc<Mutex<Sideband>>) -> Self {
        QemuEvents {
            name: name.into(),
            reader: Reader::new(inner),
            table: Vec::new(),
            retire: Vec::new(),
            stretch: Vec::new(),
            version: Vec::new(),
            position: Vec::new(),
            pending_id: None,
            written: Written::default(),
            runs: Vec::new(),
            batch_base: 0,
            model_instructions: 0,
            thread_ended: false,
            pending: None,
            handlers: Vec::new(),
            restorers: Vec::new(),
            last_syscall: None,
            suspended: None,

            files: Vec::new(),
            side,
            executions: 0,
            instructions: 0,
            counts: Counts::default(),
            done: false,
            entered: false,
            scratch: Vec::new(),
            starts: Vec::new(),
            mine: None,
            current: 0,
            seen: HashSet::new(),
            spool: None,
            blocks: Vec::new(),
            block_at: Vec::new(),
            translated: Vec::new(),
            pending_block: None,
            expand: Steps::default(),
            fault_handled: false,
            held: Vec::new(),
        }
    }

    /// Traces thread `tid` of a stream that holds several (QE15): the other threads' records are
    /// read and passed over.
    pub fn for_thread(name: impl Into<String>, inner: R, side: Arc<Mutex<Sideband>>, tid: u64) -> Self {
        let mut s = Self::new(name, inner, side);
        s.mine = Some(tid);
        s
    }

    /// Writes every record but the traced thread's own into `file` as a stream of its own, for
    /// [`QemuEvents::for_thread`] to read each other thread from (QE15).
    pub fn spool_others_to(mut self, file: Box<dyn Write + Send>) -> Self {
        let mut writer = Writer::new();
        writer.thread(0);
        self.spool = Some(Spool {
            writer,
            file,
            owner: Some(0),
            error: None,
        });
        self
    }

    /// What an error names: the plugin's stream of the program, whose byte offsets it gives.
    fn stream_name(&self) -> String {
        format!("{} (the plugin's stream of its run)", self.name)
    }

    fn error(&self, offset: u64, kind: ErrorKind, message: impl Into<String>) -> SourceError {
        SourceError {
            file: self.stream_name(),
            position: Some(Position::Byte(offset)),
            kind,
            message: message.into(),
        }
    }

    fn wire_error(&self, e: WireError) -> SourceError {
        let kind = match e.io {
            Some(io) => ErrorKind::Io(io),
            None => ErrorKind::LostFraming,
        };
        SourceError {
            file: self.stream_name(),
            position: Some(Position::Byte(e.offset)),
            kind,
            message: e.message,
        }
    }

    /// QE5: the bytes QEMU translated must be the file's at that address; otherwise the code was
    /// written at run time and no decoder that reads the files could follow it.
    /// QE17: code in no file mapping is written code, whose versions the run writes out: its
    /// version's index plus one; 0 for a file's code.
    fn check_bytes(&mut self, ip: u64, bytes: &[u8], at: u64) -> Result<u32> {
        let Some((m, file)) = self.files.iter().find(|(m, _)| m.start <= ip && ip < m.end) else {
            return match self.written.add(ip, bytes) {
                Ok(v) => Ok(v as u32 + 1),
                Err(TooManyVersions(page)) => Err(self.error(
                    at,
                    ErrorKind::Inconsistent,
                    format!(
                        "the program wrote code into memory no file holds more than {MAX_VERSIONS} \
                         times (the next version, of the page at {page:#x}, would be one more): a \
                         trace keeps at most {MAX_VERSIONS} versions of written code, each a file \
                         in code/ and a mapping decoders load, and a decoder given only some would \
                         fail where the others ran, so that is not traced (QE17)"
                    ),
                )),
            };
        };
        let Some(data) = file else { return Ok(0) };
        let off = m
            .offset
            .checked_add(ip - m.start)
            .and_then(|o| usize::try_from(o).ok());
        if off.and_then(|o| data.get(o..o.checked_add(bytes.len())?)) != Some(bytes) {
            return Err(self.error(
                at,
                ErrorKind::Inconsistent,
                format!(
                    "the code QEMU ran at {ip:#x} is not what {} holds there: code rewritten in a \
                     file's mapping is not traced (QE17; code written into memory no file holds \
                     is)",
                    m.path
                ),
            ));
        }
        Ok(0)
    }

    fn add_map(&mut self, m: FileMap, at: u64) -> Result<()> {
        if let Some((old, _)) = self.files.iter().find(|(o, _)| {
            o.start < m.end
                && m.start < o.end
                && (o.path != m.path
                    || o.offset as i128 - o.start as i128 != m.offset as i128 - m.start as i128)
        }) {
            return Err(self.error(
                at,
                ErrorKind::Inconsistent,
                format!(
                    "{} mapped at {:#x}..{:#x} over {} at {:#x}..{:#x}: a file mapped over code \
                     another file held is not traced (QE5: a decoder keeps one file an address)",
                    m.path, m.start, m.end, old.path, old.start, old.end
                ),
            ));
        }
        if self.files.iter().any(|(o, _)| *o == m) {
            return Ok(());
        }
        let data = mapped_file(&m);
        self.side.lock().expect("not poisoned").maps.push(m.clone());
        self.files.push((m, data));
        Ok(())
    }

    /// Steps the flow to instruction `insn`, emitting the events of the one before it.
    #[inline]
    fn step(&mut self, insn: Insn, out: &mut Steps, at: u64) -> Result<()> {
        self.executions += 1;
        if insn.kind == Kind::Undone {
            // QE14: counted by the plugin, run by the next block.
            return Ok(());
        }
        if let Some(b) = self.pending_block.take() {
            self.resolve_block(b, insn.ip, out, at)?;
            self.pending = Some(insn);
            return Ok(());
        }
        if let Some(p) = self.pending {
            if p.kind == Kind::Plain && insn.ip == p.next() {
                // The common case, inside a block: on to the next instruction.
                self.instructions += 1;
                out.event(Event::Retire { ip: p.ip, len: p.len });
                self.pending = Some(insn);
                return Ok(());
            }
            if p.kind == Kind::RepString && p.ip == insn.ip {
                // QE4: one more iteration of the same REP instruction.
                return Ok(());
            }
            self.resolve(p, insn.ip, out, at)?;
        }
        self.pending = Some(insn);
        Ok(())
    }

    /// The events of `p`, which QEMU followed with the instruction at `nx` (QE3).
    fn resolve(&mut self, p: Insn, nx: u64, out: &mut Steps, at: u64) -> Result<()> {
        let (ip, len) = (p.ip, p.len);
        // QE16: a transfer to a signal handler that the instruction does not make is the signal
        // delivered after it. A branch that can go anywhere and goes to a handler is taken as
        // the branch (a call through a pointer): a signal there cannot be told from it.
        // Where the instruction could not have gone by itself (the cheap test first: most
        // instructions go where they must).
        let unusual = match p.kind {
            Kind::Plain | Kind::Undone | Kind::RepString => nx != p.next(),
            Kind::Conditional => nx != p.next() && nx != p.target,
            Kind::Jump | Kind::Call => nx != p.target,
            Kind::Syscall | Kind::SoftwareInterrupt(_) => nx != p.next(),
            Kind::Return | Kind::IndirectJump | Kind::IndirectCall | Kind::Far | Kind::Iret => true,
        };
        let handler = if unusual { self.handler(nx) } else { None };
        // A RET or JMP to a handler's first instruction is no program's way there: the signal
        // came after it.
        if handler.is_some()
            && !matches!(
                p.kind,
                Kind::Syscall | Kind::SoftwareInterrupt(_) | Kind::IndirectCall | Kind::Far | Kind::Iret
            )
        {
            return self.deliver(p, nx, out, at);
        }
        // A handler of a fault reached by anything but a SYSCALL that began: the fault may have
        // stopped the block part-way (QE13, QE16).
        let noted_syscall = p.kind == Kind::Syscall && self.last_syscall.is_some();
        if !noted_syscall && handler.is_some_and(|s| s & FAULT_SIGNALS != 0) {
            return Err(self.fault_handler(p.ip, nx, at));
        }
        // QE13: QEMU gives up a block at a store into the block's own page and runs it again
        // from the store; a branch that can go anywhere must not be taken for that.
        if matches!(
            p.kind,
            Kind::Return | Kind::IndirectJump | Kind::IndirectCall | Kind::Far | Kind::Iret
        ) && self.inside_own_block(nx)
        {
            return Err(self.error(
                at,
                ErrorKind::Inconsistent,
                format!(
                    "after the block that ends at {ip:#x} QEMU ran {nx:#x}, an instruction inside that \
                     block: it gave the block up part-way (code that writes the page it runs from) and \
                     what ran is not known (QE13)"
                ),
            ));
        }
        let unexplained = |this: &Self| {
            this.error(
                at,
                ErrorKind::Inconsistent,
                format!(
                    "after the instruction at {ip:#x} ({:?}) QEMU ran {nx:#x}, where that \
                     instruction does not go, and no signal handler is there (QE16): a transfer \
                     no instruction or signal explains is not traced",
                    p.kind
                ),
            )
        };
        self.instructions += 1;
        match p.kind {
            Kind::Plain | Kind::RepString | Kind::Undone => {
                if nx != p.next() {
                    return Err(unexplained(self));
                }
                self.counts.rep += u64::from(p.kind == Kind::RepString);
                out.event(Event::Retire { ip, len });
            }
            Kind::Conditional => {
                if nx != p.target && nx != p.next() {
                    return Err(unexplained(self));
                }
                self.counts.conditional += 1;
                out.event(Event::CondBranch {
                    ip,
                    len,
                    target: p.target,
                    taken: nx == p.target,
                });
            }
            Kind::Jump | Kind::Call => {
                if nx != p.target {
                    return Err(unexplained(self));
                }
                self.counts.direct += 1;
                out.event(if p.kind == Kind::Jump {
                    Event::Jump { ip, target: nx }
                } else {
                    Event::Call { ip, len, target: nx }
                });
            }
            Kind::IndirectJump => {
                self.counts.indirect += 1;
                out.event(Event::IndirectJump { ip, target: nx });
            }
            Kind::IndirectCall => {
                self.counts.indirect += 1;
                out.event(Event::IndirectCall { ip, len, target: nx });
            }
            Kind::Return => {
                self.counts.returns += 1;
                if let Some(s) = self.suspended.as_mut() {
                    s.confirmed |= self.restorers.contains(&nx);
                }
                out.event(Event::Return { ip, target: nx });
            }
            Kind::Syscall | Kind::SoftwareInterrupt(_) => {
                // QE16: a system call comes back after itself, at a signal handler (a signal
                // delivered on its way out), or, for rt_sigreturn, where the context it
                // restores says. One the plugin did not say began did not run (a fault before
                // it in its block): it goes nowhere else.
                let call = if p.kind == Kind::Syscall {
                    self.last_syscall.take()
                } else {
                    None
                };
                let began = call.is_some() || p.kind != Kind::Syscall;
                let sigreturn = call == Some(SYS_RT_SIGRETURN);
                let to_handler = began && nx != p.next() && handler.is_some();
                if nx != p.next() && !sigreturn && !to_handler {
                    return Err(unexplained(self));
                }
                self.counts.syscalls += 1;
                if to_handler {
                    self.counts.signals += 1;
                    if let Some(s) = self.suspended.as_mut() {
                        s.depth += 1;
                    }
                }
                // QE6: into the kernel, which is not traced, and back after the instruction.
                let (into, back) = kernel_entry(p.kind).expect("matched above");
                out.event(Event::far(into, ip, SYSCALL_ENTRY, 0, ExecMode::Bits64));
                out.event(Event::far(back, SYSRET_FROM, nx, 3, ExecMode::Bits64));
                if sigreturn {
                    self.counts.sigreturns += 1;
                    if let Some(s) = self.suspended.as_mut() {
                        s.depth -= 1;
                        if s.depth == 0 {
                            self.resume(nx, out, at)?;
                        }
                    }
                }
            }
            Kind::Far | Kind::Iret => {
                let kind = if p.kind == Kind::Iret {
                    FarKind::Iret
                } else {
                    FarKind::FarBranch
                };
                self.counts.indirect += 1;
                out.event(Event::far(kind, ip, nx, 3, ExecMode::Bits64));
            }
        }
        Ok(())
    }

    /// QE16: a signal delivered after `p` completed, while the program computed: its handler
    /// at `h` runs next. The interrupt comes at the instruction `p` went to: where `p` always
    /// goes, that is known now; after a branch or REP string instruction, it is the address the
    /// handler's rt_sigreturn comes back to, and everything until then waits in `out`.
    fn deliver(&mut self, p: Insn, h: u64, out: &mut Steps, at: u64) -> Result<()> {
        if self.handler(h).is_some_and(|s| s & FAULT_SIGNALS != 0) {
            return Err(self.fault_handler(p.ip, h, at));
        }
        self.counts.signals += 1;
        let went = match p.kind {
            Kind::Plain | Kind::Undone => Some(p.next()),
            Kind::Jump | Kind::Call => Some(p.target),
            _ => None,
        };
        match went {
            Some(x) => {
                self.resolve(p, x, out, at)?;
                out.event(interrupted_at(x));
                if let Some(s) = self.suspended.as_mut() {
                    s.depth += 1;
                }
            }
            None if self.suspended.is_some() => {
                return Err(self.error(
                    at,
                    ErrorKind::Inconsistent,
                    format!(
                        "a second signal arrived after the branch at {:#x}, inside the handler of a \
                         signal whose interrupted address is not known yet: not traced (QE16)",
                        p.ip
                    ),
                ));
            }
            None => {
                self.suspended = Some(Suspended {
                    insn: p,
                    handler: h,
                    depth: 1,
                    mark: out.events_len(),
                    confirmed: p.kind != Kind::IndirectJump,
                });
            }
        }
        // The kernel enters the handler: tracing comes back there.
        out.event(Event::far(FarKind::Iret, SYSRET_FROM, h, 3, ExecMode::Bits64));
        Ok(())
    }

    /// The signals the handler at `ip` handles, if one is there.
    #[inline]
    fn handler(&self, ip: u64) -> Option<u64> {
        self.handlers.iter().find(|h| h.0 == ip).map(|h| h.1)
    }

    fn fault_handler(&self, ip: u64, h: u64, at: u64) -> SourceError {
        self.error(
            at,
            ErrorKind::Inconsistent,
            format!(
                "after {ip:#x} the program ran {h:#x}, the handler of a signal an instruction raises \
                 (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP or SIGSYS): a fault may have stopped the \
                 block QEMU ran part-way, so what ran is unknown (QE16)"
            ),
        )
    }

    /// QE21: the plain instructions of the block that ran last, which a fault may have stopped
    /// part-way, are taken out of `out` (those after `from` and after a suspended signal's
    /// handler began) into `held`, until the thread's next record shows that it ran to its
    /// end. A block of written code is not held (the runs of its versions point into `out`).
    fn hold_last_block(&mut self, out: &mut Steps, from: usize) {
        let Some(id) = self.pending_id else { return };
        let pos = usize::from(self.position[id]);
        let first = id - pos;
        let floor = from
            .max(self.suspended.as_ref().map_or(0, |s| s.mark))
            .max(out.trailing_events_start());
        let events = out.events();
        // The block's plain instructions before the pending one are the last events, in order.
        let mut n = 0;
        while n < pos && events.len() - n > floor {
            let insn = self.table[first + pos - 1 - n];
            if events[events.len() - 1 - n]
                != (Event::Retire {
                    ip: insn.ip,
                    len: insn.len,
                })
            {
                break;
            }
            n += 1;
        }
        let cut = events.len() - n;
        let held_from = self.ordinal(out) - n as u64;
        if n == 0 || self.runs.iter().any(|r| r.1 >= held_from) {
            return;
        }
        out.take_events_from(cut, &mut self.held);
    }

    /// QE21: the held instructions ran after all: into `out`.
    #[inline]
    fn release_held(&mut self, out: &mut Steps) {
        if !self.held.is_empty() {
            out.extend_events(&self.held);
            self.held.clear();
        }
    }

    /// QE21: the plugin read the signal frame of a fault's handler: the instruction at `rip`,
    /// in the block that ran last, raised the fault (a kernel-made signal, `si_code` > 0) and
    /// did not complete; the instructions after it in the block did not run. The fault leaves
    /// user mode at it (FUP there, TIP.PGD) and tracing comes back at the handler (TIP.PGE).
    /// Anything else (a frame that names another instruction, a signal another process sent)
    /// is left to QE16, which refuses the handler.
    fn fault(&mut self, rip: u64, text: &str, out: &mut Steps) {
        // `below`: the word below the interrupted stack pointer (QEMU leaves it: the frame goes
        // below the red zone): what a RET just before the signal would have popped.
        let (
            Some(FaultNote {
                signo,
                code,
                addr,
                handler,
                below,
            }),
            Some(id),
        ) = (FaultNote::parse(text), self.pending_id)
        else {
            self.release_held(out);
            return;
        };
        let pos = usize::from(self.position[id]);
        let first = id - pos;
        let from = pos - self.held.len();
        let hit = (from..=pos).find(|&j| {
            let insn = self.table[first + j];
            insn.ip == rip && insn.kind != Kind::Undone
        });
        let Some(signals) = self.handler(handler) else {
            self.release_held(out);
            return;
        };
        // Without the siginfo (a handler without SA_SIGINFO) the signal may have come from
        // another process after the block ran to its end and went to `rip`: taken as the fault
        // only where the last instruction could not have gone there. A RET or indirect branch
        // is taken to go to no instruction of its own block but its first (one into the middle
        // of its block is QE13's store case, which is refused); a RET goes to its block's first
        // only if that is the word below the interrupted stack pointer, which it popped.
        let p = self.table[id];
        let could_go = match p.kind {
            Kind::Plain | Kind::Undone | Kind::RepString | Kind::Syscall | Kind::SoftwareInterrupt(_) => {
                rip == p.next()
            }
            Kind::Conditional => rip == p.next() || rip == p.target,
            Kind::Jump | Kind::Call => rip == p.target,
            Kind::Return => rip == self.table[first].ip && below.is_none_or(|w| w == rip),
            Kind::IndirectJump | Kind::IndirectCall | Kind::Far | Kind::Iret => rip == self.table[first].ip,
        };
        let made_by_kernel = if signo == 0 { !could_go } else { code > 0 };
        let (Some(j), true) = (hit, made_by_kernel) else {
            self.release_held(out);
            return;
        };
        let signo = match signals & FAULT_SIGNALS {
            _ if signo != 0 => signo,
            bits if bits.count_ones() == 1 => bits.trailing_zeros(),
            _ => 11,
        };
        self.held.truncate(j - from);
        self.instructions -= (pos - j) as u64;
        self.release_held(out);
        self.pending = None;
        self.pending_id = None;
        self.counts.signals += 1;
        let kind = fault_kind(signo, code, addr);
        out.event(Event::far(kind, rip, SYSCALL_ENTRY, 0, ExecMode::Bits64));
        // The kernel enters the handler: tracing comes back there.
        out.event(Event::far(
            FarKind::Iret,
            SYSRET_FROM,
            handler,
            3,
            ExecMode::Bits64,
        ));
    }

    /// Whether `nx` is an instruction of the block the pending instruction ends, other than its
    /// first (QE13).
    fn inside_own_block(&self, nx: u64) -> bool {
        let Some(id) = self.pending_id else { return false };
        let first = id - usize::from(self.position[id]);
        // A block's instructions lie one after another: outside its range, nx is not one.
        if first == id || nx <= self.table[first].ip || nx > self.table[id].ip {
            return false;
        }
        (first + 1..=id).any(|k| self.table[k].ip == nx)
    }

    /// QE16: the handler of the suspended signal returned to `x`: the interrupted instruction's
    /// outcome and the interrupt go in where the handler's events begin.
    fn resume(&mut self, x: u64, out: &mut Steps, at: u64) -> Result<()> {
        let s = self.suspended.take().expect("suspended");
        let p = s.insn;
        if !s.confirmed {
            return Err(self.unconfirmed(&s, at));
        }
        let mut head = Steps::default();
        if p.kind == Kind::RepString && x == p.ip {
            // Interrupted between iterations: the REP instruction has not retired; it goes on
            // after the handler.
        } else {
            let fits = match p.kind {
                Kind::Conditional => x == p.target || x == p.next(),
                Kind::RepString => x == p.next(),
                _ => true,
            };
            if !fits {
                return Err(self.error(
                    at,
                    ErrorKind::Inconsistent,
                    format!(
                        "the signal handler at {:#x} returned to {x:#x}, where the instruction it \
                         interrupted after ({:#x}, {:?}) does not go: the handler changed where the \
                         program resumes, so where that instruction went is unknown (QE16)",
                        s.handler, p.ip, p.kind
                    ),
                ));
            }
            self.resolve(p, x, &mut head, at)?;
        }
        head.event(interrupted_at(x));
        let head = head.into_events();
        self.shift_runs(self.ordinal_of_event(out, s.mark), head.len());
        out.insert_events(s.mark, head);
        Ok(())
    }

    /// The instructions `first..first + count` ran, one after another.
    #[inline]
    fn run_ids(&mut self, first: u64, count: u64, out: &mut Steps, at: u64) -> Result<()> {
        self.entered = false;
        let (mut id, end) = (first as usize, (first + count) as usize);
        while id < end {
            // BLK1: a whole block in one step where it is one (and no signal's handler is
            // being held back: those events go in where the handler's began, QE16).
            if let Some(t) = self.block_at[id].checked_sub(1) {
                let ids = usize::from(self.translated[t as usize].ids);
                if self.suspended.is_none()
                    && !self.fault_handled
                    && id + ids <= end
                    && self.begin_block(t, out, at)?
                {
                    id += ids;
                    continue;
                }
            }
            self.step(self.table[id], out, at)?;
            if self.table[id].kind != Kind::Undone {
                self.pending_id = Some(id);
            }
            // The plain instructions after it in its block are each followed by the next: their
            // events are copied, not worked out one by one.
            let n = (self.stretch[id] as usize).min(end - id);
            if self.version[id] != 0 {
                // When each version first and last ran (a run of one version keeps its first
                // and its latest entry): the load time lies between one version's last run and
                // the next one's first (QE17), however long the batch.
                let at = self.ordinal(out);
                for k in id..id + n.max(1) {
                    if let Some(v) = self.version[k].checked_sub(1) {
                        let (v, o) = (v as usize, at + (k - id) as u64);
                        match self.runs.as_mut_slice() {
                            [.., a, b] if a.0 == v && b.0 == v => b.1 = o,
                            _ => self.runs.push((v, o)),
                        }
                    }
                }
            }
            if n > 1 {
                out.extend_events(&self.retire[id..id + n - 1]);
                self.instructions += n as u64 - 1;
                self.executions += n as u64 - 1;
                self.pending = Some(self.table[id + n - 1]);
                self.pending_id = Some(id + n - 1);
            }
            id += n.max(1);
        }
        Ok(())
    }

    /// The executions of the blocks the plugin names by `indices` (a batch's, the first at
    /// stream offset `at`), one after another: each a whole block in one step where it is one
    /// (BLK1), else its instructions (`run_ids`).
    #[inline]
    fn run_indices(&mut self, indices: &[u32], at: u64, out: &mut Steps) -> Result<()> {
        self.entered = false;
        let chained = if self.pending.is_none() && self.suspended.is_none() {
            self.run_chain(indices, out)
        } else {
            0
        };
        for (k, &index) in indices.iter().enumerate().skip(chained) {
            let at = at + 4 * k as u64;
            let t = &self.translated[index as usize];
            let (block, first, ids) = (t.block, t.first, t.ids);
            if block != 0 && self.suspended.is_none() && self.begin_block(index, out, at)? {
                continue;
            }
            self.run_ids(u64::from(first), u64::from(ids), out, at)?;
        }
        Ok(())
    }

    /// BLK1, BLK5: the longest prefix of `indices` that are executions of whole blocks, each
    /// going where its block's last instruction goes by itself (what `begin_block` and
    /// `resolve_block` take without a second look), handed over as one chain; how many it
    /// took. The last one taken is pending, as after `begin_block`. Call with no instruction
    /// pending and no handler's events held back (QE16). Everything else is left to the
    /// per-execution path: a block that goes instruction by instruction, a successor its block
    /// does not go to by itself, an indirect branch to an instruction inside its own block or
    /// to a handler's first one.
    #[inline(always)]
    fn run_chain(&mut self, indices: &[u32], out: &mut Steps) -> usize {
        debug_assert!(self.pending.is_none() && self.suspended.is_none());
        const CHAIN: usize = 256;
        let mut chain = [0u32; CHAIN];
        let (mut n, mut taken) = (0, 0);
        let (mut instructions, mut executions) = (0u64, 0u64);
        // The executions' counts by the class of their last instruction, 12 bits each (a
        // chain holds at most 256).
        let mut ends = 0u64;
        let mut next = 0;
        let no_handlers = self.handlers.is_empty();
        let mut prev = self.pending_block.map(|q| self.translated[q as usize]);
        let mut last_index = 0;
        for &index in indices.iter().take(CHAIN) {
            let t = self.translated[index as usize];
            if t.block == 0 {
                break;
            }
            if let Some(q) = prev {
                let nx = t.start;
                let plain = if q.flags & INDIRECT != 0 {
                    // Conservatively: anything that may lie inside the block is left to
                    // `resolve_block`'s exact test.
                    (no_handlers || self.handler(nx).is_none()) && !q.may_hold(nx)
                } else {
                    q.goes_to(nx)
                };
                if !plain {
                    break;
                }
                ends += 1 << (12 * u32::from(q.class));
                instructions += u64::from(q.whole);
                chain[n] = q.block - 1;
                n += 1;
                next = nx;
            }
            executions += u64::from(t.ids);
            prev = Some(t);
            last_index = index;
            taken += 1;
        }
        if taken == 0 {
            return 0;
        }
        let last = prev.expect("an execution taken");
        self.pending_block = Some(last_index);
        self.pending_id = Some(last.first as usize + usize::from(last.whole) - 1);
        for (class, count) in self.counts.ends.iter_mut().enumerate() {
            *count += (ends >> (12 * class)) & 0xfff;
        }
        self.instructions += instructions;
        self.executions += executions;
        out.exec_chain(&chain[..n], next, instructions);
        taken
    }

    /// BLK1: the block translated last (instruction ids `first..`, its index `index` in the
    /// stream's batches), and as a block this source gives whole executions of when it is one:
    /// its instructions but the last are plain, the last one is plain or a near branch (a QE14
    /// instruction into the next page left out), and no file lacks its code (written code goes
    /// instruction by instruction, QE17).
    fn describe_block(&mut self, first: u32, index: u32, out: &mut Steps) -> Translated {
        let end = self.table.len();
        self.block_at.resize(end, 0);
        let ids = end - first as usize;
        let mut t = Translated {
            start: 0,
            way: 0,
            first,
            block: 0,
            len: 0,
            ids: ids as u16,
            whole: 0,
            flags: 0,
            class: END_NONE,
        };
        let first = first as usize;
        let whole = ids - usize::from(ids > 0 && self.table[end - 1].kind == Kind::Undone);
        if whole == 0 || self.version[first..end].iter().any(|&v| v != 0) {
            return t;
        }
        let insns = &self.table[first..first + whole];
        if insns[..whole - 1].iter().any(|i| i.kind != Kind::Plain) {
            return t;
        }
        let last = insns[whole - 1];
        let (ends, way, flags, class) = match last.kind {
            Kind::Plain => (BlockEnd::FallThrough, last.next(), 0, END_NONE),
            Kind::Conditional => (
                BlockEnd::Conditional { target: last.target },
                last.target,
                FALLS,
                END_CONDITIONAL,
            ),
            Kind::Jump => (BlockEnd::Jump { target: last.target }, last.target, 0, END_DIRECT),
            Kind::Call => (BlockEnd::Call { target: last.target }, last.target, 0, END_DIRECT),
            Kind::IndirectJump => (BlockEnd::IndirectJump, 0, INDIRECT, END_INDIRECT),
            Kind::IndirectCall => (BlockEnd::IndirectCall, 0, INDIRECT, END_INDIRECT),
            Kind::Return => (BlockEnd::Return, 0, INDIRECT, END_RETURN),
            _ => return t,
        };
        let lens: Vec<u8> = insns.iter().map(|i| i.len).collect();
        let (Ok(block), Ok(n), Ok(len)) = (
            Block::new(insns[0].ip, &lens, ends),
            u32::try_from(self.blocks.len() + 1),
            u16::try_from(last.next() - insns[0].ip),
        ) else {
            return t;
        };
        self.block_at[first] = index + 1;
        t = Translated {
            start: insns[0].ip,
            way,
            block: n,
            len,
            whole: whole as u16,
            flags,
            class,
            ..t
        };
        out.define(block.clone());
        self.blocks.push(block);
        t
    }

    /// BLK1: an execution of translated block `b` (one of `blocks`) begins: the step before it
    /// is resolved (it went to the block's start) and the block's execution is pending. False where the block must go
    /// instruction by instruction after all: the step before it delivered a signal whose
    /// handler's events are held back (QE16); no instruction is pending then. (A REP string
    /// instruction iterating cannot come before it: no block of plain code starts at one.)
    #[inline(always)]
    fn begin_block(&mut self, b: u32, out: &mut Steps, at: u64) -> Result<bool> {
        let info = self.translated[b as usize];
        if let Some(p) = self.pending.take() {
            if p.kind == Kind::Plain && info.start == p.next() {
                self.instructions += 1;
                out.event(Event::Retire { ip: p.ip, len: p.len });
            } else {
                self.resolve(p, info.start, out, at)?;
            }
        } else if let Some(q) = self.pending_block.take() {
            self.resolve_block(q, info.start, out, at)?;
        }
        if self.suspended.is_some() {
            // The block runs as the handler's first instructions: one by one, from no pending
            // instruction.
            return Ok(false);
        }
        self.executions += u64::from(info.ids);
        self.pending_id = Some(info.first as usize + usize::from(info.whole) - 1);
        self.pending_block = Some(b);
        Ok(true)
    }

    /// BLK1: the pending execution of block `b` went on at `nx`: one step where that is where
    /// its last instruction goes by itself (what [`QemuEvents::resolve`] takes without a second
    /// look); otherwise its instructions but the last retire and the last one is resolved as
    /// one instruction is, which finds the signal or refuses what cannot be traced.
    #[inline(always)]
    fn resolve_block(&mut self, b: u32, nx: u64, out: &mut Steps, at: u64) -> Result<()> {
        let info = &self.translated[b as usize];
        let plain = if info.flags & INDIRECT != 0 {
            (self.handlers.is_empty() || self.handler(nx).is_none())
                && !(info.may_hold(nx) && self.inside_own_block(nx))
        } else {
            info.goes_to(nx)
        };
        if plain {
            self.counts.ends[info.class as usize] += 1;
            let (whole, block) = (info.whole, info.block - 1);
            self.instructions += u64::from(whole);
            out.exec(block, nx, usize::from(whole));
            return Ok(());
        }
        self.go_off_block(b, nx, out, at)
    }

    /// The pending execution of block `b` went on at `nx`, where its last instruction does
    /// not go by itself: it is resolved instruction by instruction (`resolve_block`).
    #[inline(never)]
    fn go_off_block(&mut self, b: u32, nx: u64, out: &mut Steps, at: u64) -> Result<()> {
        self.open_block(b, out);
        let p = self.pending.take().expect("the block's last instruction");
        self.resolve(p, nx, out, at)
    }

    /// The pending execution of block `b`, instruction by instruction: its instructions but the
    /// last retire, and the last one is pending.
    fn open_block(&mut self, b: u32, out: &mut Steps) {
        let info = self.translated[b as usize];
        let first = info.first as usize;
        let last_id = first + usize::from(info.whole) - 1;
        out.extend_events(&self.retire[first..last_id]);
        self.instructions += (last_id - first) as u64;
        self.pending_id = Some(last_id);
        self.pending = Some(self.table[last_id]);
    }

    /// QE16: an indirect JMP to a handler's entry that no return to a restorer showed to be a
    /// signal: a jump into the handler's function (a PLT stub) looks the same.
    fn unconfirmed(&self, s: &Suspended, at: u64) -> SourceError {
        self.error(
            at,
            ErrorKind::Inconsistent,
            format!(
                "after the indirect JMP at {:#x} the program ran {:#x}, a signal handler's first \
                 instruction, and nothing showed whether a signal came or the JMP went there (a \
                 jump into the handler's function): not traced (QE16)",
                s.insn.ip, s.handler
            ),
        )
    }

    /// `n` events go in at instruction `mark`: the runs of written code after it move with them.
    fn shift_runs(&mut self, mark: u64, n: usize) {
        for r in &mut self.runs {
            if r.1 >= mark {
                r.1 += n as u64;
            }
        }
    }

    /// The source's instruction (from 0) that event `k` of `out` is, when only events follow it.
    fn ordinal_of_event(&self, out: &Steps, k: usize) -> u64 {
        self.ordinal(out) - (out.events_len() - k) as u64
    }

    /// The source's instruction (from 0) that the next step in `out` begins with: every event
    /// this source makes is an instruction (the kernel's SYSRET included), an execution its
    /// block's instructions, which is what the tracer's clock counts (QE17).
    #[inline]
    fn ordinal(&self, out: &Steps) -> u64 {
        self.model_instructions + (out.instructions() - self.batch_base)
    }

    /// QE7: the last instruction QEMU began, when the stream ends.
    fn finish(&mut self, out: &mut Steps) {
        if let Some(s) = self.suspended.take() {
            // QE16: the handler never returned (it exited, or jumped out with longjmp): the
            // instruction before the signal is traced as interrupted before it, as a stop
            // between blocks is (QE15).
            self.shift_runs(self.ordinal_of_event(out, s.mark), 1);
            out.insert_events(s.mark, vec![interrupted_at(s.insn.ip)]);
            self.counts.unreturned += 1;
        }
        if let Some(b) = self.pending_block.take() {
            self.open_block(b, out);
        }
        let Some(p) = self.pending.take() else { return };
        match kernel_entry(p.kind) {
            // A SYSCALL: exit, exit_group, a successful execve, or a signal the program sent
            // itself; an INT the program died in (QE22).
            Some((into, _)) if p.kind == Kind::Syscall || self.entered => {
                self.instructions += 1;
                self.counts.syscalls += 1;
                out.event(Event::far(into, p.ip, SYSCALL_ENTRY, 0, ExecMode::Bits64));
            }
            _ => {
                // The process was stopped there (a fault or a kill): the instruction did not
                // complete; the trace leaves user mode before it.
                out.event(Event::far(
                    FarKind::Interrupt { vector: 0 },
                    p.ip,
                    SYSCALL_ENTRY,
                    0,
                    ExecMode::Bits64,
                ));
            }
        }
    }

    /// A thread record: whose chunk follows (QE15).
    fn thread_record(&mut self, tid: u64) {
        self.current = tid;
        if tid == 0 || !self.seen.insert(tid) {
            return;
        }
        let mut side = self.side.lock().expect("not poisoned");
        match self.mine {
            None => {
                // The first thread to run is the program's main thread.
                self.mine = Some(tid);
                side.tid = Some(tid);
            }
            Some(m) if m == tid => side.tid = Some(tid),
            Some(_) => {
                if !side.threads.iter().any(|t| t.tid == tid) {
                    side.threads.push(ThreadSeen { tid, parent: None });
                }
            }
        }
    }

    /// Thread `tid` was started by the thread whose chunk is being read.
    fn thread_started(&mut self, tid: u64) {
        let parent = Some(self.current).filter(|&c| c != 0);
        let mut side = self.side.lock().expect("not poisoned");
        match side.threads.iter_mut().find(|t| t.tid == tid) {
            Some(t) => t.parent = t.parent.or(parent),
            None => side.threads.push(ThreadSeen { tid, parent }),
        }
    }

    fn note(&mut self, kind: NoteKind, value: u64, text: String, at: u64) -> Result<()> {
        let refuse = |this: &Self, what: String| Err(this.error(at, ErrorKind::Inconsistent, what));
        match kind {
            NoteKind::Thread => {
                self.thread_started(value);
                Ok(())
            }
            NoteKind::ThreadEnd => {
                self.thread_ended = true;
                if value != self.executions {
                    return refuse(
                        self,
                        format!(
                            "the plugin counted {value} executions of thread {}, the stream holds {}",
                            self.current, self.executions
                        ),
                    );
                }
                Ok(())
            }
            NoteKind::AnonymousCode => refuse(
                self,
                format!(
                    "the program ran code at {value:#x}, which no file holds ({text}): code written \
                     at run time is refused by this plugin's version: ptemu's own plugin sends its blocks (QE17)"
                ),
            ),
            NoteKind::Failure => refuse(self, format!("the QEMU plugin failed: {text}")),
            NoteKind::Syscall => {
                self.entered = true;
                self.last_syscall = Some(value);
                Ok(())
            }
            NoteKind::Returned => {
                self.entered = false;
                Ok(())
            }
            NoteKind::Handler => {
                // The text: the signal's number and the handler's restorer.
                let (signo, restorer) = HandlerNote::parse(&text);
                let bit = signo.filter(|&n| n < 64).map_or(0, |n| 1u64 << n);
                if let Some(r) = restorer.filter(|&r| r != 0) {
                    if !self.restorers.contains(&r) {
                        self.restorers.push(r);
                    }
                }
                match self.handlers.iter_mut().find(|h| h.0 == value) {
                    Some(h) => h.1 |= bit,
                    None => self.handlers.push((value, bit)),
                }
                self.fault_handled |= bit & FAULT_SIGNALS != 0;
                Ok(())
            }
            NoteKind::Fork => {
                self.side.lock().expect("not poisoned").forks.push(value);
                Ok(())
            }
            NoteKind::Exec => {
                self.side.lock().expect("not poisoned").execs.push(text);
                Ok(())
            }
            // A thread's own (QE21), taken where it is read: one in the process's records
            // says nothing of a thread.
            NoteKind::Fault | NoteKind::Killed | NoteKind::Stopped => Ok(()),
            // A kind a newer ptemu-wire knows and this reader does not.
            kind => refuse(self, format!("a note this ptemu does not know: {kind:?}")),
        }
    }
}

impl<R: Read> QemuEvents<R> {
    /// QE17: when the thread ran each version of written code it ran in this batch, as the
    /// model's count of instructions before the step where it ran.
    fn settle_runs(&mut self, out: &Steps) {
        for &(v, k) in &self.runs {
            self.written.ran(v, k);
        }
        self.runs.clear();
        self.model_instructions += out.instructions() - self.batch_base;
    }
}

impl<R: Read> EventSource for QemuEvents<R> {
    /// The steps as events: the executions of blocks expanded (BLK1).
    fn next_events(&mut self, out: &mut Vec<Event>) -> Result<bool> {
        let mut steps = std::mem::take(&mut self.expand);
        steps.clear();
        let r = self.next_steps(&mut steps);
        steps.expand_into(&self.blocks, out);
        self.expand = steps;
        r
    }

    fn next_steps(&mut self, out: &mut Steps) -> Result<bool> {
        self.batch_base = out.instructions();
        let r = self.next_events_unsettled(out);
        self.settle_runs(out);
        r
    }

    fn start_state(&self) -> StartState {
        self.start_state_of()
    }

    fn stats(&self) -> SourceStats {
        self.stats_of()
    }
}

impl<R: Read> QemuEvents<R> {
    fn next_events_unsettled(&mut self, out: &mut Steps) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        let from = out.len();
        let from_events = out.events_len();
        while out.len() == from || self.suspended.is_some() {
            if let Some(s) = &self.suspended {
                if out.events_len() - s.mark > MAX_SUSPENDED_EVENTS {
                    return Err(self.error(
                        self.reader.offset(),
                        ErrorKind::Inconsistent,
                        format!(
                            "the handler of a signal that arrived after the branch at {:#x} ran \
                             more than {MAX_SUSPENDED_EVENTS} events without returning: where the \
                             branch went is not known (QE16)",
                            s.insn.ip
                        ),
                    ));
                }
            }
            if !self.fault_handled && self.mine.is_none_or(|m| m == self.current) {
                // The hot path: the traced thread's executions, as long as they come (not
                // while a fault's handler is installed: each block is held then, QE21): a
                // batch's indices walked as they lie in what was read, else execution records.
                let mut indices = [0u32; 256];
                let (n, at) = self.reader.take_buffered_indices(&mut indices);
                if n > 0 {
                    self.run_indices(&indices[..n], at, out)?;
                    continue;
                }
                let mut n = 0;
                while n < 64 {
                    let at = self.reader.offset();
                    let Some((first, count)) = self.reader.buffered_exec() else {
                        break;
                    };
                    self.run_ids(first, count, out, at)?;
                    n += 1;
                }
                if n > 0 {
                    continue;
                }
            }
            let at = self.reader.offset();
            let rec = match self.reader.next_record() {
                Ok(r) => r,
                Err(e) => return Err(self.wire_error(e)),
            };
            let mine = self.mine.is_none_or(|m| m == self.current);
            // The common record first: the traced thread's blocks ran.
            if let (true, Some(Record::Exec { first, count })) = (mine, &rec) {
                let (first, count) = (*first, *count);
                self.release_held(out);
                self.run_ids(first, count, out, at)?;
                if self.fault_handled {
                    self.hold_last_block(out, from_events);
                }
                continue;
            }
            if let (Some(sp), Some(r)) = (self.spool.as_mut(), rec.as_ref()) {
                let process = matches!(r, Record::Block { .. } | Record::Map(_) | Record::End { .. });
                if process || !mine {
                    sp.forward(if process { 0 } else { self.current }, r);
                }
            }
            let rec = match rec {
                Some(Record::Thread { tid }) => {
                    self.thread_record(tid);
                    continue;
                }
                Some(Record::Exec { .. } | Record::Note { .. }) if !mine => {
                    if self.current == 0 {
                        // A note about the whole process concerns every thread.
                        if let Some(Record::Note { kind, value, text }) = rec {
                            self.note(kind, value, text, at)?;
                            continue;
                        }
                    }
                    if let Some(Record::Note {
                        kind: NoteKind::Thread,
                        value,
                        ..
                    }) = rec
                    {
                        self.thread_started(value);
                    }
                    continue;
                }
                r => r,
            };
            let ran_on = match &rec {
                None => true,
                Some(Record::Note { kind, .. }) => *kind != NoteKind::Fault,
                _ => false,
            };
            if ran_on {
                // The traced thread went on (or the stream ended): its last block ran to its
                // end (QE21).
                out.extend_events(&self.held);
                self.held.clear();
            }
            match rec {
                None => {
                    // QE7: without the end record the program was killed (or exec'd another);
                    // the plugin sends everything before each system call and right after it
                    // returns, so the stream holds all it ran only if it ended inside one.
                    let in_syscall =
                        self.entered && self.pending.is_some_and(|p| kernel_entry(p.kind).is_some());
                    let pending = self.pending.is_some() || self.pending_block.is_some();
                    if self.reader.started() && !self.reader.ended() && pending && !in_syscall {
                        return Err(self.error(
                            at,
                            ErrorKind::Truncated,
                            "the program was killed outside a system call: QEMU gives the plugin no \
                             chance to send what it ran last, so the trace's end is unknown and nothing \
                             is written (a program killed inside a system call, or that exits or \
                             execs, is traced to its end; a fault the program has a handler for is \
                             traced to the faulting instruction, QE21)",
                        ));
                    }
                    if let Some(s) = self.suspended.as_ref().filter(|s| !s.confirmed) {
                        return Err(self.unconfirmed(s, at));
                    }
                    self.finish(out);
                    self.done = true;
                    let mut side = self.side.lock().expect("not poisoned");
                    side.loaded = self.reader.started();
                    side.code = self.written.take_versions();
                    drop(side);
                    if let Some(mut sp) = self.spool.take() {
                        sp.flush();
                        if let Err(e) = sp.file.flush() {
                            sp.error.get_or_insert(e);
                        }
                        if let Some(e) = sp.error {
                            let why = format!("writing the other threads' records aside: {e}");
                            return Err(self.error(at, ErrorKind::Write(e), why));
                        }
                    }
                    return Ok(out.len() > from);
                }
                Some(Record::Block {
                    vaddr,
                    first_id,
                    offsets,
                    code,
                }) => {
                    self.counts.blocks += 1;
                    debug_assert_eq!(first_id as usize, self.table.len());
                    let Ok(first) = u32::try_from(first_id) else {
                        return Err(self.error(
                            at,
                            ErrorKind::Inconsistent,
                            format!("a block whose first instruction is the {first_id}th translated: more than 4 G instructions"),
                        ));
                    };
                    // The record borrows the reader: copied to buffers that are reused.
                    let mut scratch = std::mem::take(&mut self.scratch);
                    let mut starts = std::mem::take(&mut self.starts);
                    scratch.clear();
                    scratch.extend_from_slice(code);
                    starts.clear();
                    starts.extend_from_slice(offsets);
                    for (k, &off) in starts.iter().enumerate() {
                        let off = off as usize;
                        let ip = vaddr.wrapping_add(off as u64);
                        let insn = classify(ip, &scratch[off..])
                            .map_err(|m| self.error(at, ErrorKind::BadField, m))?;
                        let len = usize::from(insn.len);
                        let next = starts.get(k + 1).map_or(scratch.len(), |&n| n as usize);
                        if off + len > scratch.len() || (k + 1 < starts.len() && off + len != next) {
                            return Err(self.error(
                                at,
                                ErrorKind::BadField,
                                format!(
                                    "the instruction at {ip:#x} is {len} bytes long, QEMU's next one \
                                     starts {} bytes after it",
                                    next - off
                                ),
                            ));
                        }
                        let version = self.check_bytes(ip, &scratch[off..off + len], at)?;
                        self.version.push(version);
                        self.position.push(k.min(usize::from(u16::MAX)) as u16);
                        let crosses = (ip ^ (ip + len as u64 - 1)) >> 12 != 0;
                        let undone = k > 0 && k + 1 == starts.len() && crosses;
                        self.table.push(if undone {
                            Insn {
                                kind: Kind::Undone,
                                ..insn
                            }
                        } else {
                            insn
                        });
                        self.retire.push(Event::Retire { ip, len: insn.len });
                    }
                    // How many plain instructions each one of the block starts.
                    let block = self.stretch.len()..self.table.len();
                    self.stretch.resize(self.table.len(), 0);
                    let mut after = 0u32;
                    for i in block.rev() {
                        after = if self.table[i].kind == Kind::Plain {
                            after + 1
                        } else {
                            0
                        };
                        self.stretch[i] = after;
                    }
                    self.scratch = scratch;
                    self.starts = starts;
                    let index = self.translated.len() as u32;
                    let t = self.describe_block(first, index, out);
                    self.translated.push(t);
                }
                // The traced thread's are taken first, the others' passed over above.
                Some(Record::Exec { .. }) => unreachable!("taken above"),
                Some(Record::Thread { .. }) => unreachable!("taken above"),
                Some(Record::Map(m)) => self.add_map(m, at)?,
                Some(Record::Registers(_)) => {
                    return Err(self.error(
                        at,
                        ErrorKind::Inconsistent,
                        "a registers record, which only QEMU's system emulator sends, in a user-mode stream",
                    ))
                }
                Some(Record::Note {
                    kind: NoteKind::Fault,
                    value,
                    text,
                }) => self.fault(value, &text, out),
                Some(Record::Note {
                    kind: kind @ (NoteKind::Killed | NoteKind::Stopped),
                    value,
                    text,
                }) => self.died(kind == NoteKind::Killed, value, &text, out, at)?,
                Some(Record::Note { kind, value, text }) => self.note(kind, value, text, at)?,
                Some(Record::End { executed }) => {
                    let mut side = self.side.lock().expect("not poisoned");
                    side.ended = true;
                    side.executed = Some(executed);
                    drop(side);
                    if let (Some(tid), false) = (self.mine, self.thread_ended) {
                        return Err(self.error(
                            at,
                            ErrorKind::Inconsistent,
                            format!(
                                "the plugin sent no count of thread {tid}'s executions before its end record"
                            ),
                        ));
                    }
                    if self.mine.is_none() && executed != self.executions {
                        return Err(self.error(
                            at,
                            ErrorKind::Inconsistent,
                            format!(
                                "the plugin counted {executed} executions, the stream holds {}",
                                self.executions
                            ),
                        ));
                    }
                }
            }
        }
        Ok(true)
    }

    fn start_state_of(&self) -> StartState {
        StartState {
            mode: ExecMode::Bits64,
            cpl: 3,
            cr3: QEMU_CR3,
        }
    }

    fn stats_of(&self) -> SourceStats {
        let c = self.counts;
        SourceStats {
            format: "qemu",
            records: self.executions,
            skipped: 0,
            counts: vec![
                ("instructions", self.instructions),
                ("translated_blocks", c.blocks),
                ("translated_instructions", self.table.len() as u64),
                ("conditional_branches", c.conditional + c.ends[END_CONDITIONAL as usize]),
                ("direct_branches", c.direct + c.ends[END_DIRECT as usize]),
                ("indirect_branches", c.indirect + c.ends[END_INDIRECT as usize]),
                ("returns", c.returns + c.ends[END_RETURN as usize]),
                ("system_calls", c.syscalls),
                ("rep_string_instructions", c.rep),
                ("signals_delivered", c.signals),
                ("sigreturns", c.sigreturns),
                ("signals_whose_handler_never_returned", c.unreturned),
            ],
            approximations: vec![
                "system calls: the kernel is not traced (User=1, OS=0): a disable at the SYSCALL and an enable at the instruction after it (QE6)",
            ],
        }
    }
}

/// QE5, QE19: the file a mapping names, as the process mapped it, to check the code against.
/// The path is first opened as a path only (`O_PATH | O_NOFOLLOW`: no symbolic link followed,
/// no device's or FIFO's open run, nothing that can block), and read only if that is a regular
/// file with the inode the process map gave (the device is not compared: overlayfs shows its
/// lower filesystem's in the map). Run as root, only a file every user may read is read: a
/// traced process that dropped its privileges keeps its stream and could name a file it cannot
/// read. Anything else, or a file removed or replaced since, is not read at all: the check is
/// skipped (perf cannot read it either, and says so), and nothing of what the path holds, nor
/// whether it matched, reaches an output.
fn mapped_file(m: &FileMap) -> Option<memmap2::Mmap> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(&m.path)
        .ok()?;
    let meta = handle.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !meta.file_type().is_file() || meta.ino() != m.inode || (root && meta.mode() & 0o004 == 0) {
        return None;
    }
    // The very file checked above, opened for reading through its handle.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
        .ok()?;
    // SAFETY: a read-only private map of a file; if another process truncates it, reads past
    // the new end fault, as with any mapped file (the same trade as `Input`).
    unsafe { memmap2::Mmap::map(&f) }.ok()
}
