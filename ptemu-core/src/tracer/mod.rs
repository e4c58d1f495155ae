//! The trace unit: architectural [`Event`]s become PT packets the way hardware emits them, and the
//! bytes go through the [`OutputUnit`] into memory (pt-packets.md §5; rules in
//! `spec/generation.md`, IDs in [`GenRule`]).
//!
//! The tracer owns the output unit; the caller keeps its memory and passes it to each call (like
//! the unit itself). MSR writes go through [`Tracer::wrmsr`] so that TraceEn edges produce their
//! packets (PSB+, TIP.PGE, FUP + TIP.PGD) around the unit's own enable and flush.

mod clock;
mod config;
mod event;
mod fast;
#[cfg(test)]
mod fast_tests;
mod overflow;
mod probe;
mod retstack;
mod rules;
mod stats;

pub use clock::{Clock, ClockConfig};
pub use config::{Backpressure, TracerConfig};
pub use event::{Event, ExecMode, FarKind, StartState};
pub use overflow::OverflowSpan;
pub use probe::{BranchFact, Carrier, Fact, Loss, Probe};
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
use crate::regs::{Msr, PacketStyle, RtitCtl};
use fast::{Hot, IpKind};
use overflow::Overflow;

/// How a control transfer is reported while tracing stays on, and how it leaves tracing.
#[derive(Clone, Copy, Debug)]
enum Cofi {
    /// Straight-line flow (or a non-branch that changes context): only PGE/PGD.
    Linear,
    /// Jcc: a TNT bit.
    Cond(bool),
    /// Direct JMP/CALL: nothing; a call pushes its return address (RET1).
    Direct { push: Option<u64> },
    /// Indirect JMP/CALL: TIP (TIP1).
    Indirect { push: Option<u64> },
    /// RET: TNT 1 when compressible, else TIP (RET2).
    Return,
    /// Far transfer (TIP2, TIP3).
    Far {
        kind: FarKind,
        from: u64,
        cr3_changed: bool,
    },
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
    cpl: u8,
    cr3: u64,
    mode: ExecMode,
    if_flag: bool,
    vmcs: Option<u64>,
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
    /// Off in the tests that check the fast path against the general one.
    fast_path: bool,
    /// Output stopped or failed while TraceEn stayed 1 (TriggerEn went to 0, OUT2).
    output_lost: bool,
    /// Forced overflows (`cfg.overflow_at`) already started.
    forced: usize,
    /// The ground-truth recorder ([`Tracer::record_truth`]).
    probe: Option<Box<Probe>>,
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
                fast_packets: [0; 3],
                pack: Repacker::new(cfg.packing_on(unit.cpu())),
                style: cfg.style_on(unit.cpu()),
                ip_fresh: true,
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
            cpl: 3,
            cr3: 0,
            mode: ExecMode::Bits64,
            if_flag: true,
            vmcs: None,
            triggered: false,
            packet_en: false,
            mode_sent: None,
            stop_pending: false,
            kinds: [0; 64],
            nkinds: 0,
            fast: false,
            fast_path: true,
            probe: None,
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
    /// packet that carries it. Events then take the general path only.
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
        self.cpl = cpl;
        self.cr3 = cr3;
        self.mode = mode;
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
            if ctl_write && was_on && value & 1 == 0 {
                // A write that faults (M2) changes nothing: check it before any disable packet.
                check_write(self.unit.cpu(), &self.unit.registers(), Msr::Ctl, value)?;
                self.hot.ip = ip;
                if self.triggered {
                    self.disable_packets();
                    self.hot.pack_disable(&mut self.buf);
                }
                self.drain(mem)?;
                self.triggered = false;
                self.packet_en = false;
                self.output_lost = false;
            }
            self.unit.wrmsr(mem, msr, value)?;
            if ctl_write && !was_on && value & 1 == 1 {
                self.hot.ip = ip.wrapping_add(u64::from(len));
                self.on_enable();
                self.drain(mem)?;
            }
            Ok(())
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
    /// that failed are not handled.
    #[inline]
    pub fn events<M: PhysMemory>(&mut self, mem: &mut M, evs: &[Event]) -> Result<(), MemError> {
        let mut rest = evs;
        while let Some(ev) = rest.first() {
            if self.fast {
                let done = self.fast_run(rest, evs.len() > 1);
                if done > 0 {
                    rest = &rest[done..];
                    if self.hot.psb_bytes >= self.psb_interval() {
                        self.psb_plus(self.packet_en); // PSB2
                    }
                    if self.hot.len >= self.cfg.flush_bytes {
                        self.drain_and_refresh(mem)?;
                    }
                    continue;
                }
            }
            let r = self.general_event(mem, ev);
            self.refresh_fast();
            r?;
            rest = &rest[1..];
        }
        Ok(())
    }

    /// Whether an event may take the fast path: tracing with PacketEn, and none of the features
    /// whose rules the fast path leaves out (back-pressure, ADDRn ranges, TraceStop, CYC, MTC,
    /// DisTNT). Everything else stays as [`Tracer::general_event`] would leave it.
    fn fast_allowed(&self) -> bool {
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
            && self.probe.is_none()
    }

    #[inline(never)]
    fn drain_and_refresh<M: PhysMemory>(&mut self, mem: &mut M) -> Result<(), MemError> {
        let r = self.drain(mem);
        self.refresh_fast();
        r
    }

    fn refresh_fast(&mut self) {
        self.fast = self.fast_allowed();
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
            self.resolve_overflow();
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
            self.drain(mem)?;
            self.unit.trace_stop(); // FLT3
            self.lose_output();
            // A TraceStop ends tracing by design: what runs after it is untraced, not lost.
            self.output_lost = false;
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
                self.cpl = cpl;
                self.mode = mode;
                self.cr3 = cr3.unwrap_or(self.cr3);
                if let FarKind::VmEntry { vmcs } = kind {
                    self.vmcs = Some(vmcs);
                }
            }
            Event::Cr3Write { cr3, .. } => self.cr3 = cr3,
            Event::SetIf { value, .. } => self.if_flag = value,
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
                let cr3_changed = cr3.is_some_and(|c| c != self.cr3);
                self.cpl = cpl;
                self.mode = mode;
                self.cr3 = cr3.unwrap_or(self.cr3);
                if let FarKind::VmEntry { vmcs } = kind {
                    self.vmcs = Some(vmcs);
                }
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
                self.if_flag = value;
                self.linear(ip, len);
            }
            Event::Cr3Write { ip, len, cr3 } => {
                let context_before = self.context_en();
                self.cr3 = cr3;
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
                if self.ctl.ptw_en() && self.context_en() && self.filter_en(ip) {
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

    /// Straight-line flow past the instruction at `ip`: FilterEn and TraceStop are checked at the
    /// next IP when ranges are set (FLT2, FLT3).
    #[inline]
    fn linear(&mut self, ip: u64, len: u8) {
        self.hot.ip = ip.wrapping_add(u64::from(len));
        if !self.filter_ranges.is_empty() || !self.stop_ranges.is_empty() {
            self.transfer(self.hot.ip, Cofi::Linear);
        }
    }

    /// The common path of every control transfer: PacketEn before and after, and the packets of
    /// each combination (TIP1–TIP3, RET2, PGE1, PGD1, PGD2, FLT3).
    #[inline]
    fn transfer(&mut self, to: u64, cofi: Cofi) {
        let pe0 = self.packet_en;
        self.hot.ip = to;
        let stop = !self.stop_ranges.is_empty() && self.context_en() && in_any(&self.stop_ranges, to);
        let pe1 = !stop && self.packet_en_at(to);
        let compress = matches!(cofi, Cofi::Return)
            && !self.ctl.dis_retc()
            && !self.ctl.dis_tnt()
            && self.ret.peek() == Some(to);
        match (pe0, pe1) {
            (true, true) => match cofi {
                Cofi::Linear => {}
                Cofi::Cond(taken) => self.tnt_bit(taken),
                Cofi::Direct { push } => self.push(push),
                Cofi::Indirect { push } => {
                    self.push(push);
                    self.flush_tnt();
                    self.cyc();
                    self.put_ip(IpKind::Tip, to);
                }
                Cofi::Return if compress => {
                    self.ret.pop();
                    self.hot.compressed_returns += 1;
                    self.tnt_bit(true);
                }
                Cofi::Return => {
                    self.flush_tnt();
                    self.cyc();
                    self.put_ip(IpKind::Tip, to);
                }
                Cofi::Far {
                    kind,
                    from,
                    cr3_changed,
                } => {
                    self.flush_tnt();
                    self.event_trace(kind);
                    self.cyc();
                    if kind.is_async() {
                        self.put_ip(IpKind::Fup, from);
                    }
                    if cr3_changed && self.ctl.os() {
                        self.put_pip();
                    }
                    if let (FarKind::VmEntry { .. }, Some(base)) = (kind, self.vmcs) {
                        self.put(Packet::Vmcs {
                            base: base & VMCS_BASE_MASK,
                        });
                    }
                    self.mode_exec_if_changed(); // MODE1
                    self.put_ip(IpKind::Tip, to);
                }
            },
            (true, false) => {
                // PGD1 / PGD2: the IP is suppressed when the context is left, or after a TNT bit.
                let mut with_ip = self.context_en();
                match cofi {
                    Cofi::Cond(taken) => {
                        self.tnt_bit(taken);
                        with_ip = false;
                    }
                    Cofi::Return if compress => {
                        self.ret.pop();
                        self.hot.compressed_returns += 1;
                        self.tnt_bit(true);
                        with_ip = false;
                    }
                    _ => {}
                }
                self.flush_tnt();
                if let Cofi::Far { kind, from, .. } = cofi {
                    self.event_trace(kind);
                    self.cyc();
                    if kind.is_async() {
                        self.put_ip(IpKind::Fup, from);
                    }
                } else {
                    self.cyc();
                }
                if with_ip || stop {
                    self.put_ip(IpKind::TipPgd, to);
                } else {
                    self.put(Packet::TipPgd(IpPayload::SUPPRESSED));
                }
                self.ret.clear(); // RET3: the decoder may or may not have pushed a leaving call
            }
            (false, true) => {
                if let Cofi::Far {
                    cr3_changed: true, ..
                } = cofi
                {
                    if self.ctl.os() {
                        self.put_pip();
                    }
                }
                self.enable_packets(to);
            }
            (false, false) => {
                // PIP1: a far transfer that changes CR3 sends PIP with TriggerEn, ContextEn and
                // OS = 1 even outside the filter ranges (SDM cases 10f-13f).
                if let Cofi::Far {
                    cr3_changed: true, ..
                } = cofi
                {
                    if self.triggered && self.ctl.os() && self.context_en() {
                        self.put_pip();
                    }
                }
            }
        }
        self.packet_en = pe1;
        if stop {
            self.flush_tnt();
            self.put(Packet::TraceStop);
            self.stop_pending = true;
        }
    }

    /// PGE1, PGE2: [MODE.Exec] TIP.PGE(ip).
    fn enable_packets(&mut self, ip: u64) {
        self.cyc();
        let now = (self.mode, self.if_flag && self.ctl.event_en());
        if self.mode_sent != Some(now) {
            self.put_mode_exec();
        }
        self.put_ip(IpKind::TipPge, ip);
    }

    /// PGD3: FUP(CLIP), TIP.PGD() while PacketEn, for a WRMSR that clears TraceEn.
    fn disable_packets(&mut self) {
        self.resolve_overflow();
        if self.overflow.as_ref().is_some_and(|o| o.active) {
            // The overflow ends with the disable: OVF alone tells the decoder tracing stopped.
            // The TNT bits still pending were lost with it.
            self.hot.tnt = Tnt { bits: 0, count: 0 };
            if let Some(p) = self.probe.as_deref_mut() {
                p.cleared(self.hot.tnt_bits, Loss::Overflow);
            }
            self.put(Packet::Ovf);
            if let Some(o) = self.overflow.as_mut() {
                o.finish(self.hot.events + 1);
            }
            self.stats.overflows += 1;
        } else if self.packet_en {
            self.flush_tnt();
            self.cyc();
            self.put_ip(IpKind::Fup, self.hot.ip);
            self.put(Packet::TipPgd(IpPayload::SUPPRESSED));
        } else {
            self.flush_tnt();
        }
        self.commit_kinds();
    }

    /// TraceEn 0->1 with TriggerEn: PSB+ or TSC/TMA/CBR (PSB3, TIM1, TIM4), then PGE1.
    fn on_enable(&mut self) {
        self.output_lost = false;
        let regs = self.unit.registers();
        self.ctl = regs.ctl;
        self.filter_ranges.clear();
        self.stop_ranges.clear();
        for n in 0..self.unit.cpu().range_count().min(4) {
            let range = (regs.addr[n][0], regs.addr[n][1]);
            match self.ctl.addr_cfg(n) {
                1 => self.filter_ranges.push(range),
                2 => self.stop_ranges.push(range),
                _ => {}
            }
        }
        self.cr3_match = u64::from(regs.cr3_match) & !0x1f;
        self.triggered = regs.status.trigger_en();
        self.packet_en = false;
        if !self.triggered {
            return;
        }
        self.hot.tnt = Tnt { bits: 0, count: 0 };
        if let Some(p) = self.probe.as_deref_mut() {
            p.cleared(self.hot.tnt_bits, Loss::Stopped);
        }
        self.ret.clear();
        self.mode_sent = None; // Table 36-50 case 2d: MODE.Exec with every enable's TIP.PGE
        self.clock.last_cyc = self.clock.cycles();
        self.clock.last_mtc = self.clock.art() >> self.ctl.mtc_freq();
        let enabled_at_ip = self.packet_en_at(self.hot.ip);
        if self.unit.psb_due_on_enable() {
            // HW8: Skylake sends the enable's PSB+ with MODE.Exec and FUP(IP) in it, then
            // TIP.PGE(IP), which libipt's instruction decoder refuses (-pte_bad_context): only
            // with `enable_with_fup`; else the PSB+ first, then MODE.Exec and TIP.PGE.
            self.psb_plus(enabled_at_ip && self.cfg.enable_with_fup);
        } else {
            self.hot.psb_bytes = u64::from(regs.status.packet_byte_cnt());
            if self.ctl.tsc_en() {
                self.put_tsc();
            }
            self.put(Packet::Cbr {
                ratio: self.clock.core_ratio(),
            });
        }
        if enabled_at_ip {
            self.packet_en = true;
            self.enable_packets(self.hot.ip);
        }
        self.commit_kinds();
    }

    /// PSB1, PSB4: the PSB+ for the current settings and state, in the order of the CPU's style
    /// (HW9 for the hardware styles); `ip`: with MODE.Exec and FUP(IP) (PacketEn, or the
    /// Skylake enable shape, HW8).
    fn psb_plus(&mut self, ip: bool) {
        self.flush_tnt();
        self.hot.psb_bytes = 0;
        self.put(Packet::Psb);
        self.hot.ip_fresh = true;
        self.ret.clear();
        self.mode_sent = None;
        self.stats.psbs += 1;
        if self.ctl.tsc_en() {
            self.put_tsc();
        }
        if self.hot.style == PacketStyle::Sdm {
            self.psb_cbr();
            self.psb_context();
            self.psb_tsx();
            self.psb_ip(ip);
        } else {
            self.psb_tsx();
            self.psb_ip(ip);
            self.psb_context();
            self.psb_cbr();
        }
        self.put(Packet::PsbEnd);
    }

    fn psb_cbr(&mut self) {
        self.put(Packet::Cbr {
            ratio: self.clock.core_ratio(),
        });
    }

    /// PIP (ContextEn and OS) and VMCS (in VMX non-root).
    fn psb_context(&mut self) {
        if self.context_en() && self.ctl.os() {
            self.put_pip();
            if let Some(base) = self.vmcs {
                self.put(Packet::Vmcs {
                    base: base & VMCS_BASE_MASK,
                });
            }
        }
    }

    /// MODE.TSX (ContextEn and BranchEn, on a CPU with TSX).
    fn psb_tsx(&mut self) {
        if self.context_en() && self.ctl.branch_en() && self.cfg.tsx {
            self.put(Packet::ModeTsx {
                intx: false,
                abrt: false,
            });
        }
    }

    /// MODE.Exec and FUP(IP), when `ip`.
    fn psb_ip(&mut self, ip: bool) {
        if ip {
            self.put_mode_exec();
            self.put_ip(IpKind::Fup, self.hot.ip);
        }
    }

    fn put_mode_exec(&mut self) {
        let if_ = self.if_flag && self.ctl.event_en();
        let (csl, csd) = self.mode.csl_csd();
        self.put(Packet::ModeExec { csl, csd, if_ });
        self.mode_sent = Some((self.mode, if_));
    }

    fn mode_exec_if_changed(&mut self) {
        if self.mode_sent != Some((self.mode, self.if_flag && self.ctl.event_en())) {
            self.put_mode_exec();
        }
    }

    fn put_pip(&mut self) {
        self.put(Packet::Pip {
            cr3: self.cr3 & PIP_CR3_MASK,
            nr: false,
        });
    }

    /// TSC, and TMA right after it with MTCEn (TIM1).
    fn put_tsc(&mut self) {
        self.put(Packet::Tsc {
            tsc: self.clock.tsc() & TSC_MASK,
        });
        if self.ctl.mtc_en() {
            let (ctc, fc) = self.clock.tma();
            self.put(Packet::Tma {
                ctc,
                fc: fc & TMA_FC_MASK,
            });
        }
    }

    /// EVT1: EVD(CR2) and CFE before the FUP of an interrupt or exception; CFE(IRET).
    fn event_trace(&mut self, kind: FarKind) {
        if !self.ctl.event_en() {
            return;
        }
        let (ty, vector) = match kind {
            FarKind::Exception { vector, cr2 } => {
                if let (PF_VECTOR, Some(addr)) = (vector, cr2) {
                    self.put(Packet::Evd {
                        ty: EVD_CR2,
                        payload: addr,
                    });
                }
                (CFE_INTR, vector)
            }
            FarKind::Interrupt { vector } | FarKind::SoftwareInterrupt { vector } => (CFE_INTR, vector),
            FarKind::Iret => (CFE_IRET, 0),
            _ => return,
        };
        self.put(Packet::Cfe {
            ty,
            vector,
            ip: false,
        });
    }

    fn push(&mut self, push: Option<u64>) {
        if let Some(ret) = push {
            self.ret.push(ret);
        }
    }

    /// TNT1, TNT2, TNT4.
    #[inline(always)]
    fn tnt_bit(&mut self, taken: bool) {
        if !self.ctl.dis_tnt() && self.hot.add_tnt_bit(taken) == self.tnt_full() {
            self.flush_tnt();
        }
    }

    /// Packet bytes between PSBs (PSB2): 2 KiB << PSBFreq; 15/16 of that under a hardware style
    /// (HW11: about 1,920 bytes with PSBFreq = 0 on Skylake).
    #[inline]
    fn psb_interval(&self) -> u64 {
        let period = 1u64 << (self.ctl.psb_freq() + 11);
        match self.hot.style {
            PacketStyle::Sdm => period,
            PacketStyle::Skylake | PacketStyle::IceLake => period - period / 16,
        }
    }

    /// Bits that fill a TNT (TNT4): 6, or 47 with long TNT.
    fn tnt_full(&self) -> u8 {
        if self.cfg.long_tnt {
            47
        } else {
            6
        }
    }

    /// TNT3: the partial TNT goes out (CYC first: the CYC before a TNT times its first branch).
    #[inline]
    fn flush_tnt(&mut self) {
        if let Some(p) = self.hot.take_tnt() {
            self.cyc();
            self.put(p);
        }
    }

    /// TIM3: CYC before an eligible packet.
    #[inline]
    fn cyc(&mut self) {
        if !self.ctl.cyc_en() {
            return;
        }
        let elapsed = self.clock.cycles().wrapping_sub(self.clock.last_cyc);
        let thresh = match self.ctl.cyc_thresh() {
            0 => 1,
            n => 1u64 << (n - 1),
        };
        if elapsed >= thresh {
            self.clock.last_cyc = self.clock.cycles();
            self.put(Packet::Cyc { value: elapsed });
        }
    }

    /// Advances the clock; MTC when ART[N+7:N] changed (TIM2); back-pressure drains (OVF1).
    #[inline]
    fn tick(&mut self, n: u64) {
        self.clock.advance(n);
        if let Some(o) = self.overflow.as_mut() {
            o.drain(n);
        }
        if self.ctl.mtc_en() {
            let v = self.clock.art() >> self.ctl.mtc_freq();
            if v != self.clock.last_mtc {
                self.clock.last_mtc = v;
                self.put(Packet::Mtc { ctc: v as u8 });
            }
        }
    }

    #[inline]
    fn context_en(&self) -> bool {
        let level = if self.cpl == 0 {
            self.ctl.os()
        } else {
            self.ctl.user()
        };
        level && (!self.ctl.cr3_filter() || self.cr3 & !0x1f == self.cr3_match)
    }

    #[inline]
    fn filter_en(&self, ip: u64) -> bool {
        self.filter_ranges.is_empty() || in_any(&self.filter_ranges, ip)
    }

    /// PacketEn at `ip` in the current context (FLT1, FLT2).
    #[inline]
    fn packet_en_at(&self, ip: u64) -> bool {
        self.triggered && self.ctl.branch_en() && self.context_en() && self.filter_en(ip)
    }

    /// An IP packet of `kind` for `ip`, its IP field in the form the CPU's style chooses (TIP4;
    /// HW6, HW7).
    #[inline]
    fn put_ip(&mut self, kind: IpKind, ip: u64) {
        let payload = self.hot.ip_payload(kind, ip);
        self.put_noted(kind.packet(payload), Some(ip));
    }

    #[inline]
    fn put(&mut self, p: Packet) {
        self.put_noted(p, None);
    }

    /// [`Tracer::put`]; `ip`: the whole IP an IP packet stands for, for the truth recorder.
    #[inline]
    fn put_noted(&mut self, p: Packet, ip: Option<u64>) {
        let Some(len) = self.hot.emit(&p, &mut self.buf) else {
            return;
        };
        if let Some(probe) = self.probe.as_deref_mut() {
            let end = self.stats.bytes + self.hot.len as u64;
            probe.packet(&p, ip, end - len as u64, end);
        }
        match self.kinds.get_mut(self.nkinds) {
            Some(k) if self.overflow.is_some() => {
                *k = p.kind_index() as u8;
                self.nkinds += 1;
            }
            _ => self.stats.packets[p.kind_index()] += 1,
        }
    }

    fn mark(&mut self) -> Mark {
        self.commit_kinds();
        Mark {
            len: self.hot.len,
            psb_bytes: self.hot.psb_bytes,
            last_cyc: self.clock.last_cyc,
            mode_sent: self.mode_sent,
            pack: self.hot.pack,
            kinds: self.nkinds,
            first_lost: if self.hot.tnt.count > 0 {
                self.hot.tnt_first_event
            } else {
                self.hot.events
            },
        }
    }

    fn commit_kinds(&mut self) {
        for &k in &self.kinds[..self.nkinds] {
            self.stats.packets[usize::from(k)] += 1;
        }
        self.nkinds = 0;
    }

    /// OVF1: keeps the event's packets if they fit the back-pressure budget; else drops them.
    fn end_event(&mut self, mark: Mark) {
        let Some(o) = self.overflow.as_mut() else {
            return self.commit_kinds();
        };
        let n = (self.hot.len - mark.len) as u64;
        if o.admit(n, mark.first_lost) {
            return self.commit_kinds();
        }
        self.stats.dropped_events += 1;
        self.stats.bytes_dropped += n;
        self.hot.len = mark.len;
        self.hot.psb_bytes = mark.psb_bytes;
        self.clock.last_cyc = mark.last_cyc;
        self.mode_sent = mark.mode_sent;
        self.hot.pack = mark.pack;
        self.nkinds = mark.kinds;
    }

    /// FLT2: the buffer is full at the instructions `overflow_at` names.
    fn force_overflow(&mut self, first_lost: u64) {
        // An instruction passed while nothing was traced forces the overflow at the next traced
        // event; several due at once make one overflow.
        let mut due = false;
        while self
            .cfg
            .overflow_at
            .get(self.forced)
            .is_some_and(|&n| n <= self.hot.instructions)
        {
            self.forced += 1;
            due = true;
        }
        if due {
            if let Some(o) = self.overflow.as_mut() {
                o.force(first_lost);
            }
        }
    }

    /// The first instruction of `TracerConfig::overflow_at` not forced yet (FLT2): after a run,
    /// one the run never traced.
    pub fn unforced_overflow(&self) -> Option<u64> {
        self.cfg.overflow_at.get(self.forced).copied()
    }

    /// OVF2, OVF3: at the first event after the buffer drained, OVF [CYC] [FUP(IP)].
    fn resolve_overflow(&mut self) {
        let Some(o) = self.overflow.as_mut() else {
            return;
        };
        if !o.ready() {
            return;
        }
        o.finish(self.hot.events);
        self.stats.overflows += 1;
        self.hot.tnt = Tnt { bits: 0, count: 0 };
        if let Some(p) = self.probe.as_deref_mut() {
            p.cleared(self.hot.tnt_bits, Loss::Overflow);
        }
        self.ret.clear();
        self.put(Packet::Ovf);
        if self.ctl.cyc_en() {
            let elapsed = self.clock.cycles().wrapping_sub(self.clock.last_cyc);
            self.clock.last_cyc = self.clock.cycles();
            self.put(Packet::Cyc { value: elapsed });
        }
        if self.hot.style != PacketStyle::Sdm {
            // HW10: OVF, a PSB+ without FUP, then MODE.Exec and TIP.PGE(IP) while PacketEn.
            self.psb_plus(false);
            if self.packet_en {
                self.enable_packets(self.hot.ip);
            }
        } else if self.packet_en {
            self.put_ip(IpKind::Fup, self.hot.ip);
        }
    }

    /// Hands the buffered bytes to the output unit; a STOP or error there ends generation (OUT2).
    fn drain<M: PhysMemory>(&mut self, mem: &mut M) -> Result<(), MemError> {
        if self.hot.len == 0 {
            return Ok(());
        }
        let n = self.hot.len;
        self.hot.len = 0;
        self.stats.bytes += n as u64;
        let r = self.unit.write(mem, &self.buf[..n]);
        if self.triggered && !self.unit.output_enabled() {
            self.lose_output();
        }
        r
    }

    /// TriggerEn went to 0 (STOP, error): nothing more is generated until the next enable.
    fn lose_output(&mut self) {
        self.triggered = false;
        self.output_lost = true;
        self.packet_en = false;
        self.hot.len = 0;
        self.hot.tnt = Tnt { bits: 0, count: 0 };
        self.hot.pack.drop_pending();
        if let Some(p) = self.probe.as_deref_mut() {
            p.cleared(self.hot.tnt_bits, Loss::Stopped);
        }
    }
}

fn in_any(ranges: &[(u64, u64)], ip: u64) -> bool {
    ranges.iter().any(|&(a, b)| a <= ip && ip <= b)
}
