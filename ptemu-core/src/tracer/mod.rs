//! The trace unit: architectural [`Event`]s become PT packets the way hardware emits them, and the
//! bytes go through the [`OutputUnit`] into memory (pt-packets.md §5; rules in
//! `spec/generation.md`, IDs in [`GenRule`]).
//!
//! The tracer owns the output unit; the caller keeps its memory and passes it to each call (like
//! the unit itself). MSR writes go through [`Tracer::wrmsr`] so that TraceEn edges produce their
//! packets (PSB+, TIP.PGE, FUP + TIP.PGD) around the unit's own enable and flush.

mod arch;
mod block;
mod clock;
mod config;
mod emit;
mod enable;
mod event;
mod fast;
#[cfg(test)]
mod fast_tests;
mod filter;
mod overflow;
mod probe;
mod psb;
mod retstack;
mod rules;
mod stats;
mod transfer;
mod wait;

pub use block::{Block, BlockEnd, BlockError, BlockExec};
pub use clock::{Clock, ClockConfig};
pub use config::{Backpressure, SettingError, TracerConfig};
pub use event::{Event, ExecMode, FarKind, StartState};
pub use fast::prefetch;
pub use overflow::OverflowSpan;
pub use probe::{is_mark, BranchFact, Carrier, Drained, Fact, Loss, Probe, Timing};
pub use retstack::{RetStack, RET_STACK_DEPTH};
pub use rules::GenRule;
pub use stats::TracerStats;

use crate::memory::{MemError, PhysMemory};
use crate::output::{MsrError, OutputUnit};
use crate::packet::opcode::{
    C_STATE_MASK, PIP_CR3_MASK, PWRX_WAKE_MASK, TMA_FC_MASK, TSC_MASK, VMCS_BASE_MASK,
};
use crate::packet::{IpPayload, Packet, PacketEncoder, Tnt};
use crate::packing::Repacker;
use crate::regs::check::check_write;
use crate::regs::{Errata, Msr, PacketStyle, RtitCtl};
use arch::ArchState;
use fast::{Hot, IpKind};
use overflow::Overflow;
use transfer::Cofi;

/// A batch of events that stopped part-way ([`Tracer::feed`]): host memory refused a store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("after {fed} events: {error}")]
#[non_exhaustive]
pub struct FeedError {
    /// Events handled, the one whose bytes could not be stored included.
    pub fed: usize,
    /// The store that failed.
    pub error: MemError,
}

/// Snapshot at an event's start, to drop the event whole under back-pressure (OVF1).
struct Mark {
    len: usize,
    psb_bytes: u64,
    last_cyc: u64,
    mode_sent: Option<(ExecMode, bool)>,
    pack: Repacker,
    kinds: usize,
    /// The first event whose packets are lost if this one is dropped: the oldest with a TNT bit
    /// still pending, else this one.
    first_lost: u64,
}

/// The tracer: packet generation for one logical processor, feeding its output unit.
#[derive(Debug)]
pub struct Tracer {
    /// What the fast path reads and writes (see [`Hot`]).
    hot: Hot,
    /// Counters, but for those [`Hot`] keeps (see [`Tracer::stats`]).
    stats: TracerStats,
    clock: Clock,
    unit: OutputUnit,
    cfg: TracerConfig,
    ctl: RtitCtl,
    /// ADDRn ranges with CFG = 1 (filter) and 2 (TraceStop), inclusive.
    filter_ranges: Vec<(u64, u64)>,
    stop_ranges: Vec<(u64, u64)>,
    cr3_match: u64,
    buf: Box<[u8]>,
    ret: RetStack,
    /// CPL, CR3, mode, IF and VMCS as the events left them.
    arch: ArchState,
    triggered: bool,
    packet_en: bool,
    /// The MODE.Exec (mode, IF) sent since the last PSB.
    mode_sent: Option<(ExecMode, bool)>,
    overflow: Option<Overflow>,
    stop_pending: bool,
    /// Kind indices of the packets of the current event, committed to the stats at its end.
    kinds: [u8; 64],
    nkinds: usize,
    /// Whether the next event may take the fast path ([`Tracer::fast_run`]); kept by [`Tracer::refresh_fast`]
    /// after everything that can change what it depends on.
    fast: bool,
    /// Whether a block execution may take the one-step path ([`Tracer::fast_blocks_allowed`]),
    /// kept with `fast`.
    fast_blocks: bool,
    /// Off in the tests that check the fast path against the general one.
    fast_path: bool,
    /// Output stopped or failed while TraceEn stayed 1 (TriggerEn went to 0, OUT2).
    output_lost: bool,
    /// Forced overflows (`cfg.overflow_at`) already started.
    forced: usize,
    /// The ground-truth recorder ([`Tracer::record_truth`]).
    probe: Option<Box<Probe>>,
    /// The events of a block execution that takes the per-instruction path (kept, so that
    /// [`Tracer::feed_blocks`] allocates once).
    block_events: Vec<Event>,
}

const CFE_INTR: u8 = 1;
const CFE_IRET: u8 = 2;
const EVD_CR2: u8 = 0;
const PF_VECTOR: u8 = 14;

impl Tracer {
    /// A tracer around `unit` (whose MSRs the caller programs through [`Tracer::wrmsr`]).
    pub fn new(unit: OutputUnit, mut cfg: TracerConfig) -> Self {
        cfg.overflow_at.sort_unstable();
        cfg.overflow_at.dedup();
        let cap = cfg.flush_bytes.max(64) + 4096;
        Tracer {
            hot: Hot {
                enc: PacketEncoder::new(),
                ip: 0,
                tnt: Tnt { bits: 0, count: 0 },
                tnt_first_event: 0,
                len: 0,
                psb_bytes: 0,
                events: 0,
                instructions: 0,
                tnt_bits: 0,
                compressed_returns: 0,
                packets_lost: 0,
                ptwrites_off: 0,
                fast_packets: [0; 3],
                pack: Repacker::new(cfg.packing_on(unit.cpu())),
                style: cfg.style_on(unit.cpu()),
                ip_fresh: true,
                sent_log: [(0, 0, 0); 2],
                sent: 0,
            },
            stats: TracerStats::default(),
            clock: Clock::new(cfg.clock),
            overflow: cfg
                .overflow
                .or((!cfg.overflow_at.is_empty()).then_some(Backpressure::FORCED))
                .map(Overflow::new),
            forced: 0,
            output_lost: false,
            unit,
            ctl: RtitCtl::default(),
            filter_ranges: Vec::new(),
            stop_ranges: Vec::new(),
            cr3_match: 0,
            buf: vec![0; cap].into_boxed_slice(),
            ret: RetStack::default(),
            arch: ArchState::default(),
            triggered: false,
            packet_en: false,
            mode_sent: None,
            stop_pending: false,
            kinds: [0; 64],
            nkinds: 0,
            fast: false,
            fast_blocks: false,
            fast_path: true,
            probe: None,
            block_events: Vec::new(),
            cfg,
        }
    }

    /// The output unit (registers, events, statistics).
    pub fn unit(&self) -> &OutputUnit {
        &self.unit
    }

    /// Removes the output unit's pending events ([`OutputUnit::drain_events`]).
    pub fn drain_output_events(&mut self) -> std::vec::Drain<'_, crate::output::OutputEvent> {
        self.unit.drain_events()
    }

    /// Takes the output unit back, after a [`Tracer::flush`].
    pub fn into_unit(self) -> OutputUnit {
        self.unit
    }

    /// Generation statistics.
    pub fn stats(&self) -> TracerStats {
        self.hot.merge_into(self.stats.clone())
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Overflows so far, as spans of event indices (OVF1, OVF2).
    pub fn overflows(&self) -> &[OverflowSpan] {
        self.overflow.as_ref().map_or(&[], |o| o.spans.as_slice())
    }

    /// Records the ground truth from now on (`spec/truth.md`): every traced instruction with the
    /// packet that carries it. Events still take the fast path where it applies, each
    /// instruction one fact (TR16), and block executions ([`Tracer::feed_blocks`]) the one-step
    /// path, each execution one fact (TR14).
    pub fn record_truth(&mut self) {
        self.probe.get_or_insert_with(Box::default);
        self.refresh_fast();
    }

    /// The truth recorder, when [`Tracer::record_truth`] turned it on: drain its facts as the
    /// run goes, [`Probe::finish`] it at the end.
    pub fn probe_mut(&mut self) -> Option<&mut Probe> {
        self.probe.as_deref_mut()
    }

    /// Whether packets are generated for control flow now (PacketEn).
    pub fn packet_en(&self) -> bool {
        self.packet_en
    }

    /// Sets the architectural state before tracing starts: IP, CPL, CR3, mode.
    pub fn set_state(&mut self, ip: u64, cpl: u8, cr3: u64, mode: ExecMode) {
        self.hot.ip = ip;
        self.arch.cpl = cpl;
        self.arch.cr3 = cr3;
        self.arch.mode = mode;
        self.refresh_fast();
    }

    /// RDMSR, through the unit.
    pub fn rdmsr(&self, msr: u32) -> Result<u64, MsrError> {
        self.unit.rdmsr(msr)
    }

    /// WRMSR by the instruction at `ip` (length `len`). A CTL write that sets TraceEn enables the
    /// unit, then sends PSB+ (PSB3) or TSC/TMA/CBR, then MODE.Exec and TIP.PGE(next IP) when
    /// PacketEn (PGE1); one that clears it sends FUP(ip), TIP.PGD() while PacketEn (PGD3) and
    /// flushes every buffered byte before the unit writes its state back (OUT1).
    ///
    /// An `Err` from the unit (a #GP, an MSR it does not model, a ToPA table it cannot read at
    /// enable) means the WRMSR did not happen: nothing changed. An `Err` from storing the packet
    /// bytes (the enable's PSB+, the disable's flush) comes after the WRMSR took effect: the bytes
    /// not stored count as lost ([`crate::output::OutputStats::bytes_lost`]).
    pub fn wrmsr<M: PhysMemory>(
        &mut self,
        mem: &mut M,
        msr: u32,
        value: u64,
        ip: u64,
        len: u8,
    ) -> Result<(), MsrError> {
        // Whatever path the write takes (a #GP, a failed drain), the fast-path flag follows.
        let r = (|| {
            let was_on = self.unit.registers().ctl.trace_en();
            let ctl_write = Msr::from_address(msr) == Some(Msr::Ctl);
            let mut stored = Ok(());
            if ctl_write && was_on && value & 1 == 0 {
                // A write that faults (M2) changes nothing: check it before any disable packet.
                check_write(self.unit.cpu(), &self.unit.registers(), Msr::Ctl, value)?;
                self.hot.ip = ip;
                if self.triggered {
                    self.disable_packets();
                    self.hot.pack_disable(&mut self.buf);
                }
                // A failed store loses bytes (counted), not the disable: it goes on.
                stored = self.drain(mem);
                self.triggered = false;
                self.packet_en = false;
                self.output_lost = false;
            }
            self.unit.wrmsr(mem, msr, value)?;
            if ctl_write && !was_on && value & 1 == 1 {
                self.hot.ip = ip.wrapping_add(u64::from(len));
                self.on_enable();
                stored = self.drain(mem);
            }
            Ok(stored?)
        })();
        self.refresh_fast();
        r
    }

    /// Writes every buffered packet byte to the output unit now (OUT1).
    pub fn flush<M: PhysMemory>(&mut self, mem: &mut M) -> Result<(), MemError> {
        self.flush_tnt();
        let r = self.drain(mem);
        self.refresh_fast();
        r
    }

    /// Handles one event: updates the architectural state and generates its packets.
    #[inline]
    pub fn event<M: PhysMemory>(&mut self, mem: &mut M, ev: &Event) -> Result<(), MemError> {
        self.events(mem, std::slice::from_ref(ev))
    }

    /// Handles `evs` in order, as [`Tracer::event`] would one by one, but faster: runs of common
    /// events keep the tracer's hot state in registers. On an error, the events after the one
    /// that failed are not handled ([`Tracer::feed`] tells how many were).
    #[inline]
    pub fn events<M: PhysMemory>(&mut self, mem: &mut M, evs: &[Event]) -> Result<(), MemError> {
        self.feed(mem, evs).map_err(|e| e.error)
    }

    /// [`Tracer::events`], telling how many events it handled when a store fails part-way: the
    /// events before [`FeedError::fed`] were handled (the last of them is the one whose bytes
    /// could not all be stored; those count as lost), the others were not, so the caller can feed
    /// them again.
    #[inline]
    pub fn feed<M: PhysMemory>(&mut self, mem: &mut M, evs: &[Event]) -> Result<(), FeedError> {
        let mut rest = evs;
        let failed = |rest: &[Event], error| FeedError {
            fed: evs.len() - rest.len(),
            error,
        };
        while let Some(ev) = rest.first() {
            if self.fast {
                let done = self.fast_run(rest, evs.len() > 1);
                if done > 0 {
                    rest = &rest[done..];
                    self.after_fast_run(mem).map_err(|e| failed(rest, e))?;
                    continue;
                }
            }
            let r = self.general_event(mem, ev);
            self.refresh_fast();
            rest = &rest[1..];
            r.map_err(|e| failed(rest, e))?;
        }
        Ok(())
    }

    /// Whether an event may take the fast path: tracing with PacketEn, and none of the features
    /// whose rules the fast path leaves out (back-pressure, ADDRn ranges, TraceStop, CYC, MTC,
    /// DisTNT). Everything else stays as [`Tracer::general_event`] would leave it.
    fn fast_allowed(&self) -> bool {
        self.fast_blocks_allowed()
    }

    /// Whether a block execution may take the one-step path (BLK4): the fast path's settings,
    /// the truth recorder on or off (TR14: it takes a whole execution as one fact).
    fn fast_blocks_allowed(&self) -> bool {
        self.fast_path
            && self.triggered
            && self.packet_en
            && self.overflow.is_none()
            && self.filter_ranges.is_empty()
            && self.stop_ranges.is_empty()
            && !self.stop_pending
            && !self.ctl.cyc_en()
            && !self.ctl.mtc_en()
            && !self.ctl.dis_tnt()
    }

    /// After a run on the fast path: the PSB+ it made due (PSB2), and the hand-off to the output
    /// unit when the buffer reached its size.
    #[inline]
    fn after_fast_run<M: PhysMemory>(&mut self, mem: &mut M) -> Result<(), MemError> {
        if self.hot.psb_bytes >= self.psb_interval() {
            self.psb_plus(self.packet_en); // PSB2
        }
        if self.hot.len >= self.cfg.flush_bytes {
            self.drain_and_refresh(mem)?;
        }
        Ok(())
    }

    #[inline(never)]
    fn drain_and_refresh<M: PhysMemory>(&mut self, mem: &mut M) -> Result<(), MemError> {
        let r = self.drain(mem);
        self.refresh_fast();
        r
    }

    #[inline]
    fn refresh_fast(&mut self) {
        self.fast_blocks = self.fast_blocks_allowed();
        // TR16: the truth recorder takes the fast path's instructions one fact each.
        self.fast = self.fast_blocks;
    }

    /// [`Tracer::event`] with every rule (out of line, so that the fast path inlines into the
    /// caller's loop).
    #[inline(never)]
    fn general_event<M: PhysMemory>(&mut self, mem: &mut M, ev: &Event) -> Result<(), MemError> {
        self.hot.events += 1;
        let cycles = if ev.is_instruction() {
            self.hot.instructions += 1;
            u64::from(self.cfg.cycles_per_instruction)
        } else {
            0
        };
        if !self.triggered {
            // TR4: what would have been traced after output stopped is lost to the STOP.
            let would_trace = self.output_lost
                && self.ctl.branch_en()
                && self.context_en()
                && ev.ip().is_some_and(|ip| self.filter_en(ip));
            if would_trace {
                if let Some(p) = self.probe.as_deref_mut() {
                    p.begin();
                    p.instruction(ev, self.stats.bytes + self.hot.len as u64);
                    p.end(true, self.hot.tnt_bits);
                }
            }
            // Time passes and the state moves on while nothing is generated.
            self.clock.advance(cycles);
            self.track_only(ev);
            return Ok(());
        }
        // Without back-pressure nothing is ever dropped: no snapshot, packets count at once.
        let mark = self.overflow.is_some().then(|| {
            let m = self.mark();
            self.force_overflow(m.first_lost);
            self.resolve_overflow(self.hot.events, false);
            m
        });
        if let Some(p) = self.probe.as_deref_mut() {
            p.begin();
        }
        let dropped = self.stats.dropped_events;
        if cycles > 0 {
            self.tick(cycles);
        }
        if self.packet_en {
            if let Some(p) = self.probe.as_deref_mut() {
                p.instruction(ev, self.stats.bytes + self.hot.len as u64);
            }
        }
        self.generate(ev);
        if self.hot.psb_bytes >= self.psb_interval() {
            self.psb_plus(self.packet_en); // PSB2
        }
        if let Some(mark) = mark {
            self.end_event(mark);
        }
        if let Some(p) = self.probe.as_deref_mut() {
            p.end(self.stats.dropped_events == dropped, self.hot.tnt_bits);
        }
        if self.stop_pending {
            self.stop_pending = false;
            // A failed store loses bytes (counted), not the stop: it goes on.
            let stored = self.drain(mem);
            self.unit.trace_stop(); // FLT3
            self.lose_output();
            // A TraceStop ends tracing by design: what runs after it is untraced, not lost.
            self.output_lost = false;
            stored?;
        } else if self.hot.len >= self.cfg.flush_bytes {
            self.drain(mem)?;
        }
        Ok(())
    }

    /// The architectural effect of an event while TriggerEn = 0.
    fn track_only(&mut self, ev: &Event) {
        self.hot.ip = ev.next_ip(self.hot.ip);
        match *ev {
            Event::Far {
                kind, cpl, mode, cr3, ..
            } => {
                self.arch.far(kind, cpl, mode, cr3);
            }
            Event::Cr3Write { cr3, .. } => self.arch.cr3 = cr3,
            Event::SetIf { value, .. } => self.arch.if_flag = value,
            Event::Wake { cycles, .. } | Event::Cycles(cycles) => self.clock.advance(cycles),
            Event::CoreRatio(r) => self.clock.set_core_ratio(r),
            _ => {}
        }
    }

    #[inline]
    fn generate(&mut self, ev: &Event) {
        match *ev {
            Event::Retire { ip, len } => self.linear(ip, len),
            Event::CondBranch { taken, .. } => self.transfer(ev.next_ip(self.hot.ip), Cofi::Cond(taken)),
            Event::Jump { target, .. } => self.transfer(target, Cofi::Direct { push: None }),
            Event::Call { ip, len, target } => {
                let next = ip.wrapping_add(u64::from(len));
                let push = (target != next).then_some(next); // RET1: zero-length calls
                self.transfer(target, Cofi::Direct { push });
            }
            Event::IndirectJump { target, .. } => self.transfer(target, Cofi::Indirect { push: None }),
            Event::IndirectCall { ip, len, target } => {
                let push = Some(ip.wrapping_add(u64::from(len)));
                self.transfer(target, Cofi::Indirect { push });
            }
            Event::Return { target, .. } => self.transfer(target, Cofi::Return),
            Event::Far {
                kind,
                from,
                to,
                cpl,
                mode,
                cr3,
            } => {
                let cr3_changed = self.arch.far(kind, cpl, mode, cr3);
                self.transfer(
                    to,
                    Cofi::Far {
                        kind,
                        from,
                        cr3_changed,
                    },
                );
            }
            Event::SetIf { ip, len, value } => {
                self.arch.if_flag = value;
                self.linear(ip, len);
            }
            Event::Cr3Write { ip, len, cr3 } => {
                let context_before = self.context_en();
                self.arch.cr3 = cr3;
                let next = ip.wrapping_add(u64::from(len));
                // PIP1: with TriggerEn and OS = 1 in a traced context (before or after the write,
                // for CR3 filtering), whether or not PacketEn is 1 (SDM cases 5d and 5f).
                if self.triggered && self.ctl.os() && (context_before || self.context_en()) {
                    self.flush_tnt();
                    self.put_pip();
                }
                self.transfer(next, Cofi::Linear);
            }
            Event::Ptwrite {
                ip,
                len,
                payload,
                size,
            } => {
                if !self.ctl.ptw_en() {
                    // Counted where PTWEn=1 would have sent a packet: traced code only.
                    if self.context_en() && self.filter_en(ip) {
                        self.hot.ptwrites_off += 1;
                    }
                } else if self.context_en() && self.filter_en(ip) {
                    let fup = self.ctl.fup_on_ptw(); // PTW1
                    self.flush_tnt();
                    self.cyc();
                    let payload = match size {
                        crate::packet::PtwSize::Four => payload & 0xffff_ffff,
                        crate::packet::PtwSize::Eight => payload,
                    };
                    self.put(Packet::Ptw {
                        size,
                        payload,
                        ip: fup,
                    });
                    if fup {
                        self.put_ip(IpKind::Fup, ip);
                    }
                }
                self.linear(ip, len);
            }
            Event::Mwait { ip, len, hints, ext } => {
                if self.ctl.pwr_evt_en() && self.context_en() {
                    self.flush_tnt();
                    self.cyc();
                    self.put(Packet::Mwait {
                        hints: u32::from(hints),
                        ext: u32::from(ext & 3),
                    });
                }
                self.linear(ip, len);
            }
            Event::Sleep {
                ip,
                state,
                sub_state,
                hw,
            } => {
                self.hot.ip = ip;
                if self.ctl.pwr_evt_en() && self.context_en() {
                    self.flush_tnt();
                    self.cyc();
                    self.put(Packet::Pwre {
                        state: state & C_STATE_MASK,
                        sub_state: sub_state & C_STATE_MASK,
                        hw,
                    });
                    let with_ip = self.packet_en;
                    self.put(Packet::Exstop { ip: with_ip });
                    if with_ip {
                        self.put_ip(IpKind::Fup, ip);
                    }
                }
            }
            Event::Wake {
                last,
                deepest,
                wake,
                cycles,
            } => {
                // The core clock stops while asleep: no CYC counts these cycles.
                self.tick(cycles);
                self.clock.last_cyc = self.clock.last_cyc.wrapping_add(cycles);
                if self.ctl.pwr_evt_en() && self.context_en() {
                    self.flush_tnt();
                    self.put(Packet::Pwrx {
                        last: last & C_STATE_MASK,
                        deepest: deepest & C_STATE_MASK,
                        wake: wake & PWRX_WAKE_MASK,
                    });
                }
                if self.ctl.tsc_en() {
                    self.put_tsc(); // TIM5
                }
            }
            Event::Cycles(n) => self.tick(n),
            Event::CoreRatio(r) => {
                if r != 0 && r != self.clock.core_ratio() {
                    self.clock.set_core_ratio(r);
                    self.put(Packet::Cbr { ratio: r }); // TIM4
                }
            }
        }
    }
}
