//! What the tracer tells the ground truth (`spec/truth.md`, TR rules): which instructions it
//! traced, and for each one the packet in the stream that lets a decoder reach it (its
//! *carrier*), or that no packet does because back-pressure or a STOP lost it.
//!
//! A decoder reaches an instruction by following the outcome of the branch before it: a TNT bit,
//! a TIP, or a sync packet (TIP.PGE, the FUP after OVF). The carrier of an instruction is that
//! packet. A TNT bit goes out later than its branch, so an instruction after a conditional branch
//! waits in a small queue until the TNT that holds the bit is emitted (TR2).
//!
//! Offsets are positions in the generated stream: bytes the tracer handed to the output unit,
//! before any loss downstream of it.

use super::block::Block;
use super::event::{Event, FarKind};
pub use super::wait::Drained;
use super::wait::Wait;
use crate::packet::{IpPayload, Packet};

/// Why no packet carries an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Back-pressure dropped the packets (OVF1): the instruction ran while the buffer overflowed.
    Overflow,
    /// Output stopped (ToPA STOP, TraceStop, an operational error) before the packet went out.
    Stopped,
}

/// The packet that lets a decoder reach an instruction, or why there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// The packet occupies `start..end` of the generated stream.
    Packet {
        /// First byte.
        start: u64,
        /// One past its last byte.
        end: u64,
    },
    /// No packet: lost.
    Lost(Loss),
}

/// Which timing packet a [`Fact::Time`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// TSC: the whole time.
    Tsc,
    /// MTC: an ART boundary.
    Mtc,
    /// CYC: core cycles since the CYC before it.
    Cyc,
}

/// What a branch did (the branch fields of an instruction fact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchFact {
    /// `cond`, `jump`, `call`, `ind-jump`, `ind-call`, `ret` or `far`.
    pub kind: &'static str,
    /// Where it went (the fall-through for a conditional branch not taken).
    pub to: u64,
    /// Taken (always, but for a conditional branch not taken).
    pub taken: bool,
}

/// One fact of the run, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fact {
    /// A traced instruction (PacketEn when it retired).
    Insn {
        /// Its IP.
        ip: u64,
        /// The generated-stream offset when it executed: every packet before it (PSB+ included).
        exec: u64,
        /// The packet that lets a decoder reach it.
        carrier: Carrier,
        /// The branch it is, if it is one.
        branch: Option<BranchFact>,
    },
    /// TIP.PGE: packets enabled at `ip`.
    Enable {
        /// The first traced IP.
        ip: u64,
        /// The packet.
        start: u64,
        /// One past it.
        end: u64,
    },
    /// TIP.PGD: packets disabled.
    Disable {
        /// The packet.
        start: u64,
        /// One past it.
        end: u64,
    },
    /// An asynchronous transfer (interrupt, exception, VM exit): FUP(from) + TIP(to).
    Async {
        /// Where the flow was interrupted.
        from: u64,
        /// Where it went.
        to: u64,
        /// The TIP.
        start: u64,
        /// One past it.
        end: u64,
    },
    /// OVF: an internal buffer overflow ended here.
    Overflow {
        /// The OVF packet.
        start: u64,
        /// One past it.
        end: u64,
    },
    /// A whole execution of a block on the one-step path (spec/truth.md TR14, BLK4): its
    /// instructions, in order, are the [`Fact::Insn`]s [`Fact::expand`] gives, every one reached
    /// through `carrier` and executed with the stream at `exec` (a block's instructions but the
    /// last send nothing, so they share both with the last one).
    Exec {
        /// The block: its index in [`Probe::blocks`] (not the caller's id).
        block: u32,
        /// Where the code went after it.
        next: u64,
        /// The generated-stream offset when it executed.
        exec: u64,
        /// The packet that lets a decoder reach its instructions.
        carrier: Carrier,
    },
    /// A PSB, where a decoder can synchronize.
    Psb {
        /// Its first byte.
        start: u64,
    },
    /// A packet a decoder reports as an event of its own (`spec/truth.md`, TR11): MODE.Exec,
    /// MODE.TSX, PIP, VMCS, TraceStop, CBR, PTW, MWAIT, PWRE, PWRX, EXSTOP, CFE, EVD.
    Mark {
        /// The packet.
        packet: Packet,
        /// Inside PSB+: it restates the state (libipt's status update; a decoder may report it).
        status: bool,
        /// The IP it is bound to: the FUP after a PTW, EXSTOP or CFE that has one, the IP packet
        /// after a MODE.Exec.
        ip: Option<u64>,
        /// Its first byte.
        start: u64,
        /// One past it.
        end: u64,
    },
    /// A timing packet (TSC, MTC, CYC): the time it stands for (`spec/truth.md`, TR13).
    Time {
        /// The TSC it stands for: a TSC packet's, an MTC's ART boundary, a CYC's cycle count
        /// as TSC.
        tsc: u64,
        /// How much later a decoder may make it: a CYC counts cycles since the CYC before it,
        /// so the first CYC after an MTC or TSC may be added whole to that packet's time, and
        /// every CYC until the next MTC or TSC carries the same excess (TR13).
        slack: u64,
        /// Which timing packet.
        kind: Timing,
        /// Its first byte.
        start: u64,
    },
}

/// Whether a decoder reports `p` as an event of its own when it is not inside PSB+ (TR11).
pub fn is_mark(p: &Packet) -> bool {
    matches!(
        p,
        Packet::ModeExec { .. }
            | Packet::ModeTsx { .. }
            | Packet::Pip { .. }
            | Packet::Vmcs { .. }
            | Packet::TraceStop
            | Packet::Cbr { .. }
            | Packet::Ptw { .. }
            | Packet::Mwait { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. }
            | Packet::Exstop { .. }
            | Packet::Cfe { .. }
            | Packet::Evd { .. }
    )
}

/// Whether the IP packet after `p` gives the IP `p`'s event is bound to.
fn mark_wants_ip(p: &Packet) -> bool {
    match *p {
        Packet::Ptw { ip, .. } | Packet::Exstop { ip } | Packet::Cfe { ip, .. } => ip,
        Packet::ModeExec { .. } => true,
        _ => false,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Packet { start: u64, end: u64 },
    Bit(u64),
    Lost(Loss),
}

#[derive(Clone, Copy, Debug)]
enum Note {
    Tnt {
        bits: u64,
        start: u64,
        end: u64,
    },
    Flow {
        packet: Packet,
        ip: Option<u64>,
        start: u64,
        end: u64,
    },
    Psb {
        start: u64,
    },
    PsbEnd,
    Mark {
        packet: Packet,
        status: bool,
        ip: Option<u64>,
        start: u64,
        end: u64,
    },
    Cleared {
        total_bits: u64,
        why: Loss,
    },
    Time {
        tsc: u64,
        slack: u64,
        kind: Timing,
        start: u64,
    },
}

#[derive(Debug, Default)]
struct Current {
    notes: Vec<Note>,
    /// Notes before the instruction's own packets, and the instruction.
    insn: Option<(usize, u64, u64, Option<BranchFact>)>,
    far: Option<(FarKind, u64, u64)>,
}

/// Collects [`Fact`]s from the tracer; [`Probe::drain`] takes the finished ones.
#[derive(Debug)]
pub struct Probe {
    /// The facts, in order, some waiting for the TNT of a pending bit.
    wait: Wait,
    chain: Key,
    /// TNT bits added and emitted (or discarded) so far.
    added: u64,
    emitted: u64,
    /// The last TNT packet: the bits it resolved end at `.0`.
    last_tnt: (u64, u64, u64),
    in_psb: bool,
    current: Option<Current>,
    /// A mark waiting for the IP packet that binds it.
    unbound: Option<Fact>,
    /// The last MTC's or TSC's time, and the excess a decoder may add to the CYCs after it.
    time_base: Option<(u64, Option<u64>)>,
    /// The blocks [`Fact::Exec`]s name ([`Probe::blocks`]).
    blocks: Vec<Block>,
    /// For each caller's block id seen, the block it names and its index in `blocks`.
    ids: Vec<Named>,
}

/// What a caller's block id names (TR14): the block's index in [`Probe::blocks`] and what
/// [`Probe::intern`] compares, beside it (one cache line an id, not one in each table).
#[derive(Clone, Copy, Debug)]
struct Named {
    /// The index (`u32::MAX`: none).
    k: u32,
    instructions: u32,
    start: u64,
    last_ip: u64,
    end: super::block::BlockEnd,
}

impl Named {
    const NONE: Named = Named {
        k: u32::MAX,
        instructions: 0,
        start: 0,
        last_ip: 0,
        end: super::block::BlockEnd::FallThrough,
    };

    /// Whether it is `b` (its start, last instruction, end and size).
    #[inline]
    fn is(&self, b: &Block) -> bool {
        self.k != u32::MAX
            && self.start == b.start()
            && self.last_ip == b.last_ip()
            && self.end == b.end()
            && self.instructions as usize == b.instructions()
    }
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            wait: Wait::default(),
            chain: Key::Lost(Loss::Stopped),
            added: 0,
            emitted: 0,
            last_tnt: (0, 0, 0),
            in_psb: false,
            current: None,
            unbound: None,
            time_base: None,
            blocks: Vec::new(),
            ids: Vec::new(),
        }
    }
}

fn branch_of(ev: &Event) -> Option<BranchFact> {
    let b = |kind, to| {
        Some(BranchFact {
            kind,
            to,
            taken: true,
        })
    };
    match *ev {
        Event::CondBranch {
            ip,
            len,
            target,
            taken,
        } => Some(BranchFact {
            kind: "cond",
            to: if taken {
                target
            } else {
                ip.wrapping_add(u64::from(len))
            },
            taken,
        }),
        Event::Jump { target, .. } => b("jump", target),
        Event::Call { target, .. } => b("call", target),
        Event::IndirectJump { target, .. } => b("ind-jump", target),
        Event::IndirectCall { target, .. } => b("ind-call", target),
        Event::Return { target, .. } => b("ret", target),
        Event::Far { kind, to, .. } if !kind.is_async() => b("far", to),
        _ => None,
    }
}

impl Fact {
    /// TR14: the instruction facts an [`Fact::Exec`] of `block` stands for, in order, given to
    /// `f`: every instruction of the block at its IP, reached through the execution's carrier,
    /// the last one with its branch toward `next`; any other fact is given as it is.
    pub fn expand(&self, blocks: &[Block], mut f: impl FnMut(Fact)) {
        let Fact::Exec {
            block,
            next,
            exec,
            carrier,
        } = *self
        else {
            return f(*self);
        };
        let Some(b) = blocks.get(block as usize) else {
            return;
        };
        let mut ip = b.start();
        let lens = b.lengths();
        for &len in &lens[..lens.len() - 1] {
            f(Fact::Insn {
                ip,
                exec,
                carrier,
                branch: None,
            });
            ip = ip.wrapping_add(u64::from(len));
        }
        f(Fact::Insn {
            ip,
            exec,
            carrier,
            branch: branch_of(&b.last_event(next)),
        });
    }
}

/// A packet the one-step path sent for an execution ([`Probe::block_exec`]): a TNT of `bits`
/// bits or, with `bits` = [`FastPacket::TIP`], a TIP; its stream offsets.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FastPacket {
    pub(super) bits: u8,
    pub(super) start: u64,
    pub(super) end: u64,
}

impl FastPacket {
    /// The `bits` of a TIP.
    pub(super) const TIP: u8 = u8::MAX;
}

impl Probe {
    /// Every block an [`Fact::Exec`] names, at the index it names it by: a block is added the
    /// first time it is executed on the one-step path, and again if the caller's id comes to
    /// name another block (TR14). Only ever grows, so a consumer writes the blocks past those
    /// it has seen before the facts it drains.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The index in [`Probe::blocks`] of the caller's block `id`, which is `b`: added when it is
    /// new or `id` named another block before (its start, last instruction, end or size
    /// changed).
    #[inline]
    fn intern(&mut self, id: u32, b: &Block) -> u32 {
        match self.ids.get(id as usize) {
            Some(named) if named.is(b) => named.k,
            _ => self.intern_new(id, b),
        }
    }

    #[inline(never)]
    fn intern_new(&mut self, id: u32, b: &Block) -> u32 {
        let k = self.blocks.len() as u32;
        self.blocks.push(b.clone());
        let i = id as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, Named::NONE);
        }
        self.ids[i] = Named {
            k,
            instructions: b.instructions() as u32,
            start: b.start(),
            last_ip: b.last_ip(),
            end: b.end(),
        };
        k
    }

    /// TR14: a whole execution of block `id` (`b`) on the one-step path, which went on at
    /// `next`, executed with the stream at `exec`, its last instruction having sent `packets`
    /// (a TNT and a TIP at most), with `total_bits` TNT bits added so far: what
    /// [`Probe::begin`], [`Probe::instruction`] and [`Probe::end`] make of its instructions one
    /// by one, as one fact (no back-pressure on that path: its packets are kept).
    #[inline]
    pub(super) fn block_exec(
        &mut self,
        id: u32,
        b: &Block,
        next: u64,
        exec: u64,
        packets: &[FastPacket],
        total_bits: u64,
    ) {
        let block = self.intern(id, b);
        let before = self.added;
        let bit = match self.chain {
            Key::Bit(b) => Some(b),
            _ => None,
        };
        self.push(
            Fact::Exec {
                block,
                next,
                exec,
                carrier: carrier_of(self.chain),
            },
            bit,
        );
        self.fast_packets(packets, next, before, total_bits);
    }

    /// TR16: the instruction of event `ev` on the fast path (PacketEn, none of the rules the
    /// fast path leaves out), executed with the stream at `exec`, having sent `packets` (a TNT
    /// and a TIP at most), with `total_bits` TNT bits added so far: what [`Probe::begin`],
    /// [`Probe::instruction`] and [`Probe::end`] make of it on the general path, where such an
    /// event sends nothing before its instruction retires.
    #[inline]
    pub(super) fn fast_insn(&mut self, ev: &Event, exec: u64, packets: &[FastPacket], total_bits: u64) {
        let Some(ip) = ev.ip() else { return };
        let before = self.added;
        self.insn(ip, exec, branch_of(ev), self.chain);
        self.fast_packets(packets, ev.next_ip(ip), before, total_bits);
    }

    /// The packets the fast path sent for an instruction that went on at `next` (a TIP's
    /// IP), `before` TNT bits added before it and `total_bits` after.
    #[inline]
    fn fast_packets(&mut self, packets: &[FastPacket], next: u64, before: u64, total_bits: u64) {
        for p in packets {
            let note = if p.bits == FastPacket::TIP {
                Note::Flow {
                    packet: Packet::Tip(IpPayload::SUPPRESSED),
                    ip: Some(next),
                    start: p.start,
                    end: p.end,
                }
            } else {
                Note::Tnt {
                    bits: u64::from(p.bits),
                    start: p.start,
                    end: p.end,
                }
            };
            self.apply(note);
        }
        self.after_bits(before, total_bits);
    }

    /// The end of an event whose packets were kept: `total_bits` TNT bits added so far,
    /// `before` of them before the event. The next instruction waits for the last bit if it is
    /// still pending, else is carried by the TNT that held it, when that TNT is later than the
    /// carrier so far.
    fn after_bits(&mut self, before: u64, total_bits: u64) {
        self.added = self.added.max(total_bits);
        if self.added > before {
            let last = self.added - 1;
            if self.emitted <= last {
                self.chain = Key::Bit(last);
            } else if self.last_tnt.2 > self.end_of(self.chain) {
                self.chain = Key::Packet {
                    start: self.last_tnt.1,
                    end: self.last_tnt.2,
                };
            }
        }
    }

    /// Takes the facts whose carriers are known, in order.
    pub fn drain(&mut self) -> Drained<'_> {
        self.wait.drain()
    }

    /// [`Probe::blocks`] and [`Probe::drain`] at once, taking the facts whose carriers are
    /// known as long as `take` holds for them (the others stay, to be taken later): the table
    /// the facts name, and the facts.
    pub fn blocks_and_drain_while(&mut self, take: impl FnMut(&Fact) -> bool) -> (&[Block], Drained<'_>) {
        (&self.blocks, self.wait.drain_while(take))
    }

    /// Everything still waiting for a TNT that will never come (the end of the run): lost.
    pub fn finish(&mut self) {
        self.bind(None);
        self.clear(self.added, Loss::Stopped);
    }

    /// An event starts (its packets are kept or dropped as a whole at [`Probe::end`]).
    pub(super) fn begin(&mut self) {
        self.current = Some(Current::default());
    }

    /// The event's instruction retires now, traced, with the stream at `exec`.
    pub(super) fn instruction(&mut self, ev: &Event, exec: u64) {
        let Some(ip) = ev.ip() else { return };
        if let Some(c) = self.current.as_mut() {
            // An asynchronous transfer happens before the instruction at its FUP IP, which does
            // not retire (a decoder does not give it); the transfer is an `async` fact.
            let interrupted = matches!(ev, Event::Far { kind, .. } if kind.is_async());
            if ev.is_instruction() && !interrupted {
                c.insn = Some((c.notes.len(), ip, exec, branch_of(ev)));
            }
            if let Event::Far { kind, from, to, .. } = *ev {
                c.far = kind.is_async().then_some((kind, from, to));
            }
        }
    }

    /// A packet went into the stream at `start..end`; `ip`: the full IP of an IP packet.
    pub(super) fn packet(&mut self, p: &Packet, ip: Option<u64>, start: u64, end: u64) {
        let note = match *p {
            Packet::Tnt8(t) | Packet::Tnt64(t) => Note::Tnt {
                bits: u64::from(t.count),
                start,
                end,
            },
            Packet::Tip(_) | Packet::TipPge(_) | Packet::TipPgd(_) | Packet::Ovf => Note::Flow {
                packet: *p,
                ip,
                start,
                end,
            },
            Packet::Fup(_) if !self.in_psb_after(self.current.as_ref()) => Note::Flow {
                packet: *p,
                ip,
                start,
                end,
            },
            Packet::Psb => Note::Psb { start: end - 16 },
            Packet::PsbEnd => Note::PsbEnd,
            _ if is_mark(p) => Note::Mark {
                packet: *p,
                status: self.in_psb_after(self.current.as_ref()),
                ip: self.event_ip(p),
                start,
                end,
            },
            _ => return,
        };
        self.note(note);
    }

    /// The timing packet of `kind` at `start` stands for TSC `tsc` (TR13); `cyc_ticks`: a CYC's
    /// cycles as TSC ticks.
    pub(super) fn time(&mut self, tsc: u64, kind: Timing, cyc_ticks: u64, start: u64) {
        let slack = match kind {
            Timing::Tsc | Timing::Mtc => {
                self.time_base = Some((tsc, None));
                0
            }
            Timing::Cyc => match self.time_base {
                Some((base, None)) => {
                    let excess = base.wrapping_add(cyc_ticks).saturating_sub(tsc);
                    self.time_base = Some((base, Some(excess)));
                    excess
                }
                Some((_, Some(excess))) => excess,
                None => 0,
            },
        };
        self.note(Note::Time {
            tsc,
            slack,
            kind,
            start,
        });
    }

    /// Pending TNT bits were discarded (OVF, a STOP); `total_bits`: the tracer's count of bits
    /// added so far.
    pub(super) fn cleared(&mut self, total_bits: u64, why: Loss) {
        self.note(Note::Cleared { total_bits, why });
    }

    /// The event ends: its packets were `kept`, or dropped by back-pressure. `total_bits`: the
    /// tracer's count of TNT bits added so far.
    pub(super) fn end(&mut self, kept: bool, total_bits: u64) {
        let Some(c) = self.current.take() else { return };
        let before = self.added;
        if kept {
            let split = c.insn.map_or(c.notes.len(), |i| i.0);
            for n in &c.notes[..split] {
                self.apply(*n);
            }
            if let Some((_, ip, exec, branch)) = c.insn {
                self.insn(ip, exec, branch, self.chain);
            }
            let notes_after = &c.notes[split..];
            for n in notes_after {
                self.apply(*n);
            }
            self.after_bits(before, total_bits);
            if let Some((_, from, to)) = c.far {
                if let Key::Packet { start, end } = self.chain {
                    self.push(Fact::Async { from, to, start, end }, None);
                }
            }
        } else {
            // Dropped by back-pressure (OVF1). Straight-line code stays reachable; a branch
            // whose outcome was dropped is where the flow is lost, until the OVF.
            if let Some((_, ip, exec, branch)) = c.insn {
                self.insn(ip, exec, branch, self.chain);
            }
            let flow = c
                .notes
                .iter()
                .any(|n| matches!(n, Note::Tnt { .. } | Note::Flow { .. }));
            if flow || total_bits > before {
                self.chain = Key::Lost(Loss::Overflow);
            }
        }
    }

    /// The IP a CFE without a FUP is bound to: where an asynchronous transfer interrupted the
    /// flow, else the instruction it reports (an IRET).
    fn event_ip(&self, p: &Packet) -> Option<u64> {
        let c = self.current.as_ref()?;
        match p {
            Packet::Cfe { ip: false, .. } => c.far.map(|f| f.1).or(c.insn.map(|i| i.1)),
            _ => None,
        }
    }

    fn in_psb_after(&self, c: Option<&Current>) -> bool {
        let mut psb = self.in_psb;
        for n in c.map_or(&[][..], |c| &c.notes) {
            match n {
                Note::Psb { .. } => psb = true,
                Note::PsbEnd => psb = false,
                _ => {}
            }
        }
        psb
    }

    fn end_of(&self, k: Key) -> u64 {
        match k {
            Key::Packet { end, .. } => end,
            _ => 0,
        }
    }

    fn note(&mut self, n: Note) {
        match self.current.as_mut() {
            Some(c) => c.notes.push(n),
            None => self.apply(n),
        }
    }

    /// Pushes the mark waiting for an IP, bound to `ip`.
    fn bind(&mut self, ip: Option<u64>) {
        if let Some(mut fact) = self.unbound.take() {
            if let Fact::Mark { ip: bound, .. } = &mut fact {
                *bound = ip;
            }
            self.push(fact, None);
        }
    }

    fn apply(&mut self, n: Note) {
        let ip = match n {
            Note::Flow { packet, ip, .. } if !matches!(packet, Packet::Ovf) => ip,
            _ => None,
        };
        // A timing packet between a PTW (or EXSTOP, CFE) and its FUP does not end the wait.
        if !matches!(n, Note::Time { .. }) {
            self.bind(ip);
        }
        match n {
            Note::Tnt { bits, start, end } => {
                let (from, to) = (self.emitted, self.emitted + bits);
                self.emitted = to;
                self.added = self.added.max(to);
                self.last_tnt = (to, start, end);
                self.resolve(from, to, Key::Packet { start, end });
            }
            Note::Flow {
                packet,
                ip,
                start,
                end,
            } => {
                self.chain = Key::Packet { start, end };
                let fact = match packet {
                    Packet::TipPge(_) => ip.map(|ip| Fact::Enable { ip, start, end }),
                    Packet::TipPgd(_) => Some(Fact::Disable { start, end }),
                    Packet::Ovf => Some(Fact::Overflow { start, end }),
                    _ => None,
                };
                if let Some(f) = fact {
                    self.push(f, None);
                }
            }
            Note::Psb { start } => {
                self.in_psb = true;
                self.push(Fact::Psb { start }, None);
            }
            Note::PsbEnd => self.in_psb = false,
            Note::Mark {
                packet,
                status,
                ip,
                start,
                end,
            } => {
                let fact = Fact::Mark {
                    packet,
                    status,
                    ip,
                    start,
                    end,
                };
                if !status && mark_wants_ip(&packet) {
                    self.unbound = Some(fact);
                } else {
                    self.push(fact, None);
                }
            }
            Note::Cleared { total_bits, why } => self.clear(total_bits, why),
            Note::Time {
                tsc,
                slack,
                kind,
                start,
            } => self.push(
                Fact::Time {
                    tsc,
                    slack,
                    kind,
                    start,
                },
                None,
            ),
        }
    }

    /// Bits up to `total_bits` will never be emitted: whatever waits for them is lost.
    fn clear(&mut self, total_bits: u64, why: Loss) {
        let to = total_bits.max(self.emitted);
        self.resolve(self.emitted, to, Key::Lost(why));
        self.emitted = to;
        self.added = self.added.max(to);
        self.chain = Key::Lost(why);
    }

    /// Bits `from..to` are carried by `key`: facts waiting for them are finished.
    fn resolve(&mut self, from: u64, to: u64, key: Key) {
        if let Key::Bit(b) = self.chain {
            if (from..to).contains(&b) {
                self.chain = key;
            }
        }
        self.wait.resolve(from, to, carrier_of(key));
    }

    #[inline]
    fn insn(&mut self, ip: u64, exec: u64, branch: Option<BranchFact>, key: Key) {
        let fact = Fact::Insn {
            ip,
            exec,
            carrier: carrier_of(key),
            branch,
        };
        let bit = match key {
            Key::Bit(b) => Some(b),
            _ => None,
        };
        self.push(fact, bit);
    }

    #[inline]
    fn push(&mut self, fact: Fact, bit: Option<u64>) {
        self.wait.push(fact, bit);
    }
}

fn carrier_of(key: Key) -> Carrier {
    match key {
        Key::Packet { start, end } => Carrier::Packet { start, end },
        Key::Lost(l) => Carrier::Lost(l),
        // Replaced when the bit's TNT goes out (or is lost).
        Key::Bit(_) => Carrier::Lost(Loss::Stopped),
    }
}
