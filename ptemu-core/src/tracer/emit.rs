//! Putting packets out: each one encoded into the tracer's buffer and counted by kind, timing
//! packets (CYC) as the clock moves, an event's packets committed or dropped whole under
//! back-pressure, and the buffer drained into the output unit.

use super::*;

impl Tracer {
    /// An IP packet of `kind` for `ip`, its IP field in the form the CPU's style chooses (TIP4;
    /// HW6, HW7).
    #[inline]
    pub(super) fn put_ip(&mut self, kind: IpKind, ip: u64) {
        let payload = self.hot.ip_payload(kind, ip);
        self.put_noted(kind.packet(payload), Some(ip));
    }

    #[inline]
    pub(super) fn put(&mut self, p: Packet) {
        self.put_noted(p, None);
    }

    /// A packet an erratum adds and a decoder's workaround drops (APL11, APL12): in the stream,
    /// but not in the truth's events.
    pub(super) fn put_unrecorded(&mut self, p: Packet) {
        if self.hot.emit(&p, &mut self.buf).is_some() {
            self.count_kind(&p);
        }
    }

    /// CP3, CP6 (policy): an erratum's IP packet that decoders' workarounds skip without taking
    /// its IP (libipt's BDM70 and APL12 handling) leaves no last IP, as an OVF or PSB does, so
    /// the next IP packet is not compressed against an IP the decoder never saw.
    pub(super) fn skipped_by_workarounds(&mut self) {
        self.hot.enc.forget_last_ip();
    }

    /// [`Tracer::put`]; `ip`: the whole IP an IP packet stands for, for the truth recorder.
    #[inline]
    pub(super) fn put_noted(&mut self, p: Packet, ip: Option<u64>) {
        let Some(len) = self.hot.emit(&p, &mut self.buf) else {
            return;
        };
        if let Some(probe) = self.probe.as_deref_mut() {
            let end = self.stats.bytes + self.hot.len as u64;
            probe.packet(&p, ip, end - len as u64, end);
            // TR13: the time a timing packet stands for.
            let time = match p {
                Packet::Tsc { .. } => Some((self.clock.tsc(), Timing::Tsc, 0)),
                Packet::Cyc { value } => {
                    Some((self.clock.tsc(), Timing::Cyc, self.clock.cycles_to_tsc(value)))
                }
                Packet::Mtc { .. } => Some((
                    self.clock.art_boundary_tsc(u32::from(self.ctl.mtc_freq())),
                    Timing::Mtc,
                    0,
                )),
                _ => None,
            };
            if let Some((tsc, kind, ticks)) = time {
                probe.time(tsc, kind, ticks, end - len as u64);
            }
        }
        self.count_kind(&p);
    }

    /// Counts `p` by kind: at once, or with its event under back-pressure (OVF1).
    #[inline]
    fn count_kind(&mut self, p: &Packet) {
        match self.kinds.get_mut(self.nkinds) {
            Some(k) if self.overflow.is_some() => {
                *k = p.kind_index() as u8;
                self.nkinds += 1;
            }
            _ => self.stats.packets[p.kind_index()] += 1,
        }
    }

    #[inline]
    pub(super) fn mark(&mut self) -> Mark {
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

    pub(super) fn commit_kinds(&mut self) {
        for &k in &self.kinds[..self.nkinds] {
            self.stats.packets[usize::from(k)] += 1;
        }
        self.nkinds = 0;
    }

    /// OVF1: keeps the event's packets if they fit the back-pressure budget; else drops them.
    #[inline]
    pub(super) fn end_event(&mut self, mark: Mark) {
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

    /// Hands the buffered bytes to the output unit; a STOP or error there ends generation (OUT2).
    pub(super) fn drain<M: PhysMemory>(&mut self, mem: &mut M) -> Result<(), MemError> {
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

    /// TIM3: CYC before an eligible packet.
    #[inline]
    pub(super) fn cyc(&mut self) {
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
    pub(super) fn tick(&mut self, n: u64) {
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
}
