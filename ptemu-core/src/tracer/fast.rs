//! The fast path: the common events (retired instructions, PTWRITEs while PTWEn = 0, branches
//! that keep the context, and cycles passing) under the settings where few rules apply
//! ([`Tracer::fast_allowed`]).
//!
//! Everything it reads and writes sits in one [`Hot`] inside the tracer. One event
//! ([`Tracer::event`]) works on it in place; a batch ([`Tracer::events`]) works on a local copy
//! and writes it back at the end of each run of fast events, so that the compiler keeps the state
//! in registers instead of reading and writing the tracer once per event.

use super::probe::FastPacket;
use super::{Clock, Event, RetStack, Tracer, TracerStats};
use crate::packet::opcode::PAD;
use crate::packet::{IpPayload, Ipc, Packet, PacketEncoder, Tnt, MAX_PACKET_LEN};
use crate::packing::{Packing, Repacker, Shape, SliceWriter, UNIT};
use crate::regs::PacketStyle;

/// The tracer state the fast path touches (the general path uses it too). Small, so that a batch
/// copies it cheaply; the counters here are the only copy of theirs ([`Tracer::stats`] merges
/// them in), but for the packets the fast path counts apart from the general path's.
#[derive(Clone, Debug)]
pub(super) struct Hot {
    pub(super) enc: PacketEncoder,
    /// The IP of the next instruction.
    pub(super) ip: u64,
    /// TNT bits not yet sent.
    pub(super) tnt: Tnt,
    /// `events` at the first of them.
    pub(super) tnt_first_event: u64,
    /// Bytes in the hand-off buffer.
    pub(super) len: usize,
    /// Bytes since the last PSB (PSB2).
    pub(super) psb_bytes: u64,
    /// [`TracerStats::events`].
    pub(super) events: u64,
    /// [`TracerStats::instructions`].
    pub(super) instructions: u64,
    /// [`TracerStats::tnt_bits`].
    pub(super) tnt_bits: u64,
    /// [`TracerStats::compressed_returns`].
    pub(super) compressed_returns: u64,
    /// [`TracerStats::packets_lost`].
    pub(super) packets_lost: u64,
    /// [`TracerStats::ptwrites_off`].
    pub(super) ptwrites_off: u64,
    /// TNT-8, TNT-64 and TIP packets sent on the fast path.
    pub(super) fast_packets: [u64; 3],
    /// Where packets go in the stream: the CPU's layout (spec/hardware.md).
    pub(super) pack: Repacker,
    /// The CPU's packet choices (spec/hardware.md HW6-HW10).
    pub(super) style: PacketStyle,
    /// No TIP, TIP.PGE or TIP.PGD since the last PSB: with a hardware style the next TIP is not
    /// compressed (HW6).
    pub(super) ip_fresh: bool,
    /// The last packets the fast path sent (TNT bits or TIP, encoded length, the buffer's
    /// length after), for the truth recorder on the one-step path (TR14): `sent` counts them,
    /// wrapping; an event sends two at most.
    pub(super) sent_log: [(u8, u8, usize); 2],
    pub(super) sent: u8,
}

/// The packets that carry an IP, for choosing its form ([`Hot::ip_payload`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IpKind {
    Tip,
    TipPge,
    TipPgd,
    Fup,
}

impl IpKind {
    /// The packet of this kind carrying `ip`.
    pub(super) fn packet(self, ip: IpPayload) -> Packet {
        match self {
            IpKind::Tip => Packet::Tip(ip),
            IpKind::TipPge => Packet::TipPge(ip),
            IpKind::TipPgd => Packet::TipPgd(ip),
            IpKind::Fup => Packet::Fup(ip),
        }
    }
}

/// What the fast path reads but never changes.
#[derive(Clone, Copy)]
struct Fixed {
    /// Bits that fill a TNT (TNT4): 6, or 47 with long TNT.
    tnt_full: u8,
    /// RET compression on (DisRETC = 0).
    retc: bool,
    /// PTWEn.
    ptw_en: bool,
    cycles_per_instruction: u64,
    /// Bytes since the last PSB that make the next one due (PSB2).
    psb_due: u64,
    /// Buffered bytes that make a hand-off to the output unit due.
    flush_bytes: usize,
}

/// The fast path's packets: their index in [`Hot::fast_packets`] and their kind.
const TNT8: usize = 0;
const TNT64: usize = 1;
const TIP: usize = 2;
const FAST_KINDS: [usize; 3] = {
    let none = Tnt { bits: 0, count: 0 };
    [
        Packet::Tnt8(none).kind_index(),
        Packet::Tnt64(none).kind_index(),
        Packet::Tip(IpPayload::SUPPRESSED).kind_index(),
    ]
};

impl Hot {
    /// `stats` with this state's counters in.
    pub(super) fn merge_into(&self, mut stats: TracerStats) -> TracerStats {
        stats.events = self.events;
        stats.instructions = self.instructions;
        stats.tnt_bits = self.tnt_bits;
        stats.compressed_returns = self.compressed_returns;
        stats.packets_lost = self.packets_lost;
        stats.ptwrites_off = self.ptwrites_off;
        for (kind, n) in FAST_KINDS.into_iter().zip(self.fast_packets) {
            stats.packets[kind] += n;
        }
        stats
    }

    /// [`Tracer::fast_run`] on this state.
    #[inline(always)]
    fn run(
        &mut self,
        evs: &[Event],
        buf: &mut [u8],
        ret: &mut RetStack,
        clock: &mut Clock,
        fixed: Fixed,
    ) -> usize {
        let mut done = 0;
        for ev in evs {
            if !self.step(ev, buf, ret, clock, fixed) {
                break;
            }
            done += 1;
            if self.psb_bytes >= fixed.psb_due || self.len >= fixed.flush_bytes {
                break;
            }
        }
        done
    }

    /// One event with the fast path's rules; false, having changed nothing, for an event it does
    /// not take. The packets, state and statistics are those of [`Tracer::general_event`] (a test
    /// runs both on the same streams).
    #[inline(always)]
    fn step(
        &mut self,
        ev: &Event,
        buf: &mut [u8],
        ret: &mut RetStack,
        clock: &mut Clock,
        fixed: Fixed,
    ) -> bool {
        let after = |ip: u64, len: u8| ip.wrapping_add(u64::from(len));
        // Counted first, as the general path does (a TNT run remembers its first event).
        self.events += 1;
        match *ev {
            Event::Retire { ip, len } => self.ip = after(ip, len),
            // With PTWEn = 0 a PTWRITE is any other instruction (PTW1).
            Event::Ptwrite { ip, len, .. } if !fixed.ptw_en => {
                self.ptwrites_off += 1;
                self.ip = after(ip, len);
            }
            Event::CondBranch { taken, .. } => {
                self.ip = ev.next_ip(self.ip);
                self.tnt_bit(taken, buf, fixed);
            }
            Event::Jump { target, .. } => self.ip = target,
            Event::Call { ip, len, target } => {
                let next = after(ip, len);
                if target != next {
                    ret.push(next); // RET1
                }
                self.ip = target;
            }
            Event::IndirectJump { target, .. } => self.tip(target, buf),
            Event::IndirectCall { ip, len, target } => {
                ret.push(after(ip, len));
                self.tip(target, buf);
            }
            Event::Return { target, .. } => self.ret(target, buf, ret, fixed),
            // Time passes; with no CYC, MTC or back-pressure on the fast path (see
            // `fast_allowed`) only the clock moves, as `Tracer::tick` would move it.
            Event::Cycles(n) => {
                clock.advance(n);
                return true;
            }
            _ => {
                self.events -= 1;
                return false;
            }
        }
        self.instructions += 1;
        clock.advance(fixed.cycles_per_instruction);
        true
    }

    /// BLK2, BLK4: one execution of `b` that goes on at `next`, in one step: its instructions
    /// but the last retire as a count, and the last one's packets and state as [`Hot::step`]
    /// gives its event ([`super::Block::last_event`]); false, having changed nothing, where the
    /// block cannot go on at `next`. One look at the block's end, not two (the event built and
    /// then taken apart).
    #[inline(always)]
    fn block_step(
        &mut self,
        b: &super::Block,
        next: u64,
        buf: &mut [u8],
        ret: &mut RetStack,
        fixed: Fixed,
    ) -> bool {
        use super::BlockEnd;
        let fall = b.fall_through();
        let n = b.instructions() as u64;
        match b.end() {
            BlockEnd::FallThrough if next == fall => {}
            BlockEnd::Conditional { target } if next == target || next == fall => {
                self.events += n;
                self.ip = next;
                self.tnt_bit(next == target, buf, fixed);
                self.instructions += n;
                return true;
            }
            BlockEnd::Jump { target } if next == target => {}
            BlockEnd::Call { target } if next == target => {
                if target != fall {
                    ret.push(fall); // RET1
                }
            }
            BlockEnd::IndirectJump => {
                self.events += n;
                self.tip(next, buf);
                self.instructions += n;
                return true;
            }
            BlockEnd::IndirectCall => {
                self.events += n;
                ret.push(fall);
                self.tip(next, buf);
                self.instructions += n;
                return true;
            }
            BlockEnd::Return => {
                self.events += n;
                self.ret(next, buf, ret, fixed);
                self.instructions += n;
                return true;
            }
            _ => return false,
        }
        self.events += n;
        self.instructions += n;
        self.ip = next;
        true
    }

    /// The packets sent since the count of packets sent was `sent` (at most the two the log
    /// keeps), with their offsets in the stream (`base`: the stream's bytes before the buffer),
    /// for the truth recorder; and how many.
    #[inline(always)]
    fn sent_since(&self, sent: u8, base: u64) -> ([FastPacket; 2], usize) {
        let n = usize::from(self.sent.wrapping_sub(sent));
        let mut packets = [FastPacket::default(); 2];
        for (j, slot) in packets.iter_mut().enumerate().take(n) {
            let (bits, len, after) = self.sent_log[usize::from(sent.wrapping_add(j as u8) & 1)];
            let end = base + after as u64;
            *slot = FastPacket {
                bits,
                start: end - u64::from(len),
                end,
            };
        }
        (packets, n)
    }

    /// RET1, RET2: a RET to `target`, a taken TNT bit when the return stack predicts it (RET
    /// compression on), else TIP(target).
    #[inline(always)]
    fn ret(&mut self, target: u64, buf: &mut [u8], ret: &mut RetStack, fixed: Fixed) {
        if fixed.retc && ret.peek() == Some(target) {
            self.ip = target;
            ret.pop();
            self.compressed_returns += 1;
            self.tnt_bit(true, buf, fixed);
        } else {
            self.tip(target, buf);
        }
    }

    /// TIP1: the pending TNT, then TIP(target).
    #[inline(always)]
    fn tip(&mut self, target: u64, buf: &mut [u8]) {
        self.ip = target;
        self.flush_tnt(buf);
        let payload = self.ip_payload(IpKind::Tip, target);
        self.put(Packet::Tip(payload), TIP, buf);
    }

    /// The IP field of an IP packet of `kind` to `ip`. The SDM style takes the shortest form
    /// (TIP4). The hardware styles (HW6, HW7) never use update-48 and compress only a TIP, and
    /// not the first TIP after a PSB: until a TIP, TIP.PGE or TIP.PGD has gone out since the
    /// PSB (the PSB+ FUP does not count), a TIP is sent whole. Ice Lake sends FUP and TIP.PGE
    /// with all 64 bits.
    #[inline(always)]
    pub(super) fn ip_payload(&mut self, kind: IpKind, ip: u64) -> IpPayload {
        if self.style == PacketStyle::Sdm {
            return self.enc.compress(Some(ip));
        }
        let fresh = kind != IpKind::Fup && std::mem::replace(&mut self.ip_fresh, false);
        match (self.style, kind) {
            (PacketStyle::IceLake, IpKind::Fup | IpKind::TipPge) => IpPayload::new(Ipc::Full, ip),
            (_, IpKind::Tip) if !fresh => self.enc.compress_without_update48(ip),
            _ => IpPayload::uncompressed(ip),
        }
    }

    /// TNT1, TNT2, TNT4 (DisTNT and CYC are off on the fast path).
    #[inline(always)]
    fn tnt_bit(&mut self, taken: bool, buf: &mut [u8], fixed: Fixed) {
        if self.add_tnt_bit(taken) == fixed.tnt_full {
            self.flush_tnt(buf);
        }
    }

    /// TNT1, TNT2: one more bit in the pending TNT; returns how many are pending.
    #[inline(always)]
    pub(super) fn add_tnt_bit(&mut self, taken: bool) -> u8 {
        if self.tnt.count == 0 {
            self.tnt_first_event = self.events;
        }
        self.tnt.bits = self.tnt.bits << 1 | taken as u64;
        self.tnt.count += 1;
        self.tnt_bits += 1;
        self.tnt.count
    }

    /// TNT3 without CYC: the pending TNT goes out.
    #[inline(always)]
    fn flush_tnt(&mut self, buf: &mut [u8]) {
        if let Some(p) = self.take_tnt() {
            let kind = if matches!(p, Packet::Tnt8(_)) { TNT8 } else { TNT64 };
            self.put(p, kind, buf);
        }
    }

    /// The pending TNT as a packet (TNT-8 up to 6 bits, else TNT-64), if any bit is pending.
    #[inline(always)]
    pub(super) fn take_tnt(&mut self) -> Option<Packet> {
        if self.tnt.count == 0 {
            return None;
        }
        let t = std::mem::replace(&mut self.tnt, Tnt { bits: 0, count: 0 });
        Some(if t.count <= 6 {
            Packet::Tnt8(t)
        } else {
            Packet::Tnt64(t)
        })
    }

    /// Encodes `p` at the end of the buffer: its encoded length (the bytes just before the new
    /// end; PADs or a held MODE the layout writes come before them), or `None` (and counted
    /// lost) if it cannot be.
    #[inline(always)]
    pub(super) fn emit(&mut self, p: &Packet, buf: &mut [u8]) -> Option<usize> {
        if self.pack.packing() != Packing::None {
            return self.emit_packed(p, buf);
        }
        let Some(room) = buf.get_mut(self.len..self.len + MAX_PACKET_LEN) else {
            // Unreachable with the headroom `Tracer::new` reserves; never panic on it.
            self.packets_lost += 1;
            return None;
        };
        match self.enc.encode(p, room) {
            Ok(n) => {
                self.len += n;
                self.psb_bytes += n as u64;
                Some(n)
            }
            Err(_) => {
                self.packets_lost += 1;
                None
            }
        }
    }

    /// [`Hot::emit`] with PADs where the CPU puts them (HW1-HW5): the packet is encoded aside,
    /// then laid out by the packing stage.
    #[inline(never)]
    fn emit_packed(&mut self, p: &Packet, buf: &mut [u8]) -> Option<usize> {
        let mut tmp = [0u8; MAX_PACKET_LEN];
        let Ok(n) = self.enc.encode(p, &mut tmp) else {
            self.packets_lost += 1;
            return None;
        };
        // The common case (a TNT after a TNT): the PADs before it and its bytes written here,
        // where the general layout would write them, when there is room for both.
        // The PADs are stored as a whole unit (one store; what lies past the new end is
        // scratch), the packet's first byte alone (a TNT-8 is one byte: a wider load of the
        // bytes the encoder just stored one at a time would wait for them), then the rest.
        let at = self.len;
        let room = UNIT as usize + MAX_PACKET_LEN;
        if Shape::of(p) == Shape::Plain && at + room <= buf.len() {
            if let Some(pads) = self.pack.place_plain(n, matches!(p, Packet::PsbEnd)) {
                let pads = pads as usize;
                buf[at..at + UNIT as usize].copy_from_slice(&[PAD; UNIT as usize]);
                buf[at + pads] = tmp[0];
                if n > 1 {
                    buf[at + pads + 1..at + pads + n].copy_from_slice(&tmp[1..n]);
                }
                self.len = at + pads + n;
                self.psb_bytes += (pads + n) as u64;
                return Some(n);
            }
        }
        self.lay_out(buf, |pack, w| pack.push(w, p, &tmp[..n]))
            .then_some(n)
    }

    /// The PADs a disable ends the data with, and anything the layout still holds (HW4).
    pub(super) fn pack_disable(&mut self, buf: &mut [u8]) {
        self.lay_out(buf, |pack, w| pack.finish(w));
    }

    /// Runs `f` on the repacker, writing at the end of the buffer; the bytes it writes, PADs
    /// included, count toward the PSB distance (PSB2). False, with nothing written and the
    /// packet counted lost, if the buffer is full (unreachable with the headroom `Tracer::new`
    /// reserves; never panic on it).
    fn lay_out(
        &mut self,
        buf: &mut [u8],
        f: impl FnOnce(&mut Repacker, &mut SliceWriter) -> std::io::Result<()>,
    ) -> bool {
        let start = self.len;
        let mut w = SliceWriter {
            buf,
            len: &mut self.len,
        };
        if f(&mut self.pack, &mut w).is_err() {
            self.len = start;
            self.packets_lost += 1;
            return false;
        }
        self.psb_bytes += (self.len - start) as u64;
        true
    }

    /// [`Tracer::put`] without back-pressure: the packet counts at once (`kind` is its
    /// [`Packet::kind_index`], a constant here).
    #[inline(always)]
    fn put(&mut self, p: Packet, kind: usize, buf: &mut [u8]) {
        debug_assert_eq!(FAST_KINDS[kind], p.kind_index());
        if let Some(n) = self.emit(&p, buf) {
            self.fast_packets[kind] += 1;
            let bits = match p {
                Packet::Tnt8(t) | Packet::Tnt64(t) => t.count,
                _ => FastPacket::TIP,
            };
            self.sent_log[usize::from(self.sent & 1)] = (bits, n as u8, self.len);
            self.sent = self.sent.wrapping_add(1);
        }
    }
}

/// A hint that `value` is about to be read (nothing where the target has no prefetch): its
/// cache line is brought in while other work goes on.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

impl Tracer {
    /// What the fast path reads but never changes, as the settings are now.
    #[inline(always)]
    fn fixed(&self) -> Fixed {
        Fixed {
            psb_due: self.psb_interval(),
            flush_bytes: self.cfg.flush_bytes,
            tnt_full: self.tnt_full(),
            retc: !self.ctl.dis_retc(),
            ptw_en: self.ctl.ptw_en(),
            cycles_per_instruction: u64::from(self.cfg.cycles_per_instruction),
        }
    }

    /// BLK4: the longest prefix of `execs` that the fast path takes, each execution checked
    /// (BLK2; `index` is the first one's in its batch) and taken in one step: its instructions
    /// but the last retire as a count (they send nothing and move only the IP, the counters
    /// and the clock), then its last instruction's event as [`Tracer::fast_run`] takes it.
    /// Stops after an execution that makes a PSB+ due or fills the buffer to its hand-off size,
    /// as [`Tracer::fast_run`] does, or before one that cannot be traced (returned with how
    /// many were taken). Works on a local copy of the state. Call only when `self.fast` holds.
    #[inline]
    pub(super) fn fast_blocks(
        &mut self,
        blocks: &[super::Block],
        execs: &[super::BlockExec],
        index: usize,
    ) -> (usize, Option<super::BlockError>) {
        debug_assert!(self.fast_blocks_allowed());
        let fixed = self.fixed();
        let (mut hot, mut clock) = (self.hot.clone(), self.clock.clone());
        // TR14: with the truth recorder, each execution is one fact, at the stream offset it
        // ran at (nothing is handed to the output unit inside this loop).
        let mut probe = self.probe.as_deref_mut();
        let base = self.stats.bytes;
        let mut done = 0;
        let mut bad = None;
        for (k, x) in execs.iter().enumerate() {
            // The block a few executions ahead is fetched into the cache while this one runs:
            // the table is reached at random, and each step waits on its block's record.
            if let Some(ahead) = execs.get(k + 8).and_then(|a| blocks.get(a.block as usize)) {
                prefetch(ahead);
            }
            let b = match super::block::checked(blocks, x, index + done) {
                Ok(b) => b,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            };
            let plain = b.instructions() as u64 - 1;
            hot.events += plain;
            hot.instructions += plain;
            clock.advance(plain * fixed.cycles_per_instruction);
            hot.ip = b.last_ip();
            let (exec, sent) = (base + hot.len as u64, hot.sent);
            let taken = hot.step(
                &b.last_event(x.next),
                &mut self.buf,
                &mut self.ret,
                &mut clock,
                fixed,
            );
            debug_assert!(taken, "every block end is an event the fast path takes");
            if let Some(p) = probe.as_deref_mut() {
                let (packets, n) = hot.sent_since(sent, base);
                p.block_exec(x.block, b, x.next, exec, &packets[..n], hot.tnt_bits);
            }
            done += 1;
            if hot.psb_bytes >= fixed.psb_due || hot.len >= fixed.flush_bytes {
                break;
            }
        }
        (self.hot, self.clock) = (hot, clock);
        (done, bad)
    }

    /// BLK5: [`Tracer::fast_blocks`] on a chain ([`Tracer::feed_chain`]: execution `k` of block
    /// `ids[k]` goes on at the start of block `ids[k + 1]`, the last at `last_next`; every id
    /// is in `blocks`), without the truth recorder. Each block is looked at once: its start is
    /// the successor of the execution before it. Stops where [`Tracer::fast_blocks`] stops.
    #[inline]
    pub(super) fn fast_chain(
        &mut self,
        blocks: &[super::Block],
        ids: &[u32],
        last_next: u64,
        index: usize,
    ) -> (usize, Option<super::BlockError>) {
        debug_assert!(self.fast_blocks_allowed() && self.probe.is_none());
        let fixed = self.fixed();
        let (mut hot, mut clock) = (self.hot.clone(), self.clock.clone());
        let mut done = 0;
        let mut bad = None;
        let Some(&first) = ids.first() else {
            return (0, None);
        };
        let mut b = &blocks[first as usize];
        for k in 0..ids.len() {
            if let Some(&ahead) = ids.get(k + 8) {
                prefetch(&blocks[ahead as usize]);
            }
            let (after, next) = match ids.get(k + 1) {
                Some(&a) => {
                    let a = &blocks[a as usize];
                    (a, a.start())
                }
                None => (b, last_next),
            };
            let n = b.instructions() as u64;
            if !hot.block_step(b, next, &mut self.buf, &mut self.ret, fixed) {
                bad = Some(super::BlockError::Successor {
                    index: index + k,
                    start: b.start(),
                    next,
                    end: b.end(),
                });
                break;
            }
            clock.advance(n * fixed.cycles_per_instruction);
            done += 1;
            if hot.psb_bytes >= fixed.psb_due || hot.len >= fixed.flush_bytes {
                break;
            }
            b = after;
        }
        (self.hot, self.clock) = (hot, clock);
        (done, bad)
    }

    /// [`Tracer::fast_run`] with the truth recorder (TR16): each instruction is one fact, at
    /// the stream offset it ran at, with the packets it sent, as [`Tracer::fast_blocks`] gives
    /// a block execution's.
    #[inline(never)]
    fn fast_run_probed(&mut self, evs: &[Event], fixed: Fixed) -> usize {
        let (mut hot, mut clock) = (self.hot.clone(), self.clock.clone());
        let Some(probe) = self.probe.as_deref_mut() else {
            return 0;
        };
        let base = self.stats.bytes;
        let mut done = 0;
        for ev in evs {
            let (exec, sent) = (base + hot.len as u64, hot.sent);
            if !hot.step(ev, &mut self.buf, &mut self.ret, &mut clock, fixed) {
                break;
            }
            if ev.is_instruction() {
                let (packets, n) = hot.sent_since(sent, base);
                probe.fast_insn(ev, exec, &packets[..n], hot.tnt_bits);
            }
            done += 1;
            if hot.psb_bytes >= fixed.psb_due || hot.len >= fixed.flush_bytes {
                break;
            }
        }
        (self.hot, self.clock) = (hot, clock);
        done
    }

    /// Runs the longest prefix of `evs` that the fast path takes, stopping after an event that
    /// makes a PSB+ due (PSB2) or fills the buffer to its hand-off size; returns how many events
    /// it handled. Call only when `self.fast` holds. `batch`: work on a local copy of the state
    /// (worth it for more than a few events).
    #[inline(always)]
    pub(super) fn fast_run(&mut self, evs: &[Event], batch: bool) -> usize {
        debug_assert!(self.fast_allowed());
        let fixed = self.fixed();
        if self.probe.is_some() {
            return self.fast_run_probed(evs, fixed);
        }
        // Two copies of the loop: a pointer that may be either would keep the copy in memory.
        if batch {
            let (mut hot, mut clock) = (self.hot.clone(), self.clock.clone());
            let done = hot.run(evs, &mut self.buf, &mut self.ret, &mut clock, fixed);
            (self.hot, self.clock) = (hot, clock);
            done
        } else {
            self.hot
                .run(evs, &mut self.buf, &mut self.ret, &mut self.clock, fixed)
        }
    }
}
