//! The back-pressure model (OVF1, OVF2): a byte level that packets fill and cycles drain.

use super::config::Backpressure;
use super::fast::IpKind;
use super::{Loss, Tracer};
use crate::packet::{Packet, Tnt};
use crate::regs::{Errata, PacketStyle};

/// Events lost to one overflow: `lost_from..resumed_at` (event indices, counting from 1 as
/// [`super::TracerStats::events`] does). The OVF is sent while handling event `resumed_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OverflowSpan {
    /// The first event whose packets were lost (including TNT bits still pending then).
    pub lost_from: u64,
    /// The event at which OVF was sent (u64::MAX while the overflow lasts); one past the last
    /// event when it was sent at the WRMSR that cleared TraceEn.
    pub resumed_at: u64,
    /// The overflow still lasted when TraceEn was cleared: its OVF stands alone, with no FUP or
    /// TIP.PGE after it (OVF2). False when the buffer had drained by then, even if the OVF went
    /// out at that WRMSR (then with its FUP, before the disable's FUP, TIP.PGD).
    pub ended_by_disable: bool,
    /// The OVF went out at a WRMSR that cleared TraceEn, after event `resumed_at - 1` (whether
    /// the overflow still lasted, [`OverflowSpan::ended_by_disable`], or had drained), not at
    /// event `resumed_at`: a disable in mid-run is told from an OVF at the next event.
    pub at_disable: bool,
}

#[derive(Debug)]
pub(super) struct Overflow {
    cfg: Backpressure,
    /// Buffer level in bytes, scaled by `per_cycles` so the drain stays exact.
    level: u64,
    pub active: bool,
    pub spans: Vec<OverflowSpan>,
}

impl Overflow {
    pub fn new(cfg: Backpressure) -> Self {
        Overflow {
            cfg: Backpressure {
                buffer_bytes: cfg.buffer_bytes.max(256),
                per_cycles: cfg.per_cycles.max(1),
                ..cfg
            },
            level: 0,
            active: false,
            spans: Vec::new(),
        }
    }

    pub fn drain(&mut self, cycles: u64) {
        let d = cycles.saturating_mul(u64::from(self.cfg.drain_bytes));
        self.level = self.level.saturating_sub(d);
    }

    /// Whether an event's `n` bytes fit; starts an overflow (recording `first_lost`) if not.
    pub fn admit(&mut self, n: u64, first_lost: u64) -> bool {
        let scaled = n * u64::from(self.cfg.per_cycles);
        let cap = u64::from(self.cfg.buffer_bytes) * u64::from(self.cfg.per_cycles);
        if !self.active && self.level + scaled <= cap {
            self.level += scaled;
            return true;
        }
        if !self.active {
            self.active = true;
            self.spans.push(OverflowSpan {
                lost_from: first_lost,
                resumed_at: u64::MAX,
                ended_by_disable: false,
                at_disable: false,
            });
        }
        false
    }

    /// The buffer is full now (the `ovf` fault): an overflow starts, losing from `first_lost`.
    pub fn force(&mut self, first_lost: u64) {
        self.level = u64::from(self.cfg.buffer_bytes) * u64::from(self.cfg.per_cycles);
        if !self.active {
            self.active = true;
            self.spans.push(OverflowSpan {
                lost_from: first_lost,
                resumed_at: u64::MAX,
                ended_by_disable: false,
                at_disable: false,
            });
        }
    }

    /// The overflow clears once the buffer is empty.
    pub fn ready(&self) -> bool {
        self.active && self.level == 0
    }

    /// The overflow ends at `event` (OVF sent); `at_disable`: at a WRMSR that cleared TraceEn;
    /// `by_disable`: because it did so while the overflow lasted.
    pub fn finish(&mut self, event: u64, at_disable: bool, by_disable: bool) {
        self.active = false;
        if let Some(s) = self.spans.last_mut() {
            s.resumed_at = event;
            s.at_disable = at_disable;
            s.ended_by_disable = by_disable;
        }
    }
}

impl Tracer {
    /// FLT2: the buffer is full at the instructions `overflow_at` names.
    pub(super) fn force_overflow(&mut self, first_lost: u64) {
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

    /// OVF2, OVF3: at the first event after the buffer drained (event `at`, counting from 1;
    /// one past the last, with `at_disable`, for the WRMSR that clears TraceEn), OVF [CYC]
    /// [FUP(IP)].
    pub(super) fn resolve_overflow(&mut self, at: u64, at_disable: bool) {
        let Some(o) = self.overflow.as_mut() else {
            return;
        };
        if !o.ready() {
            return;
        }
        o.finish(at, at_disable, false);
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
        } else if self.unit.cpu().has(Errata::APL12) {
            // APL12 (CP6): the FUP comes even when the overflow resolves with PacketEn=0 (in the
            // SDM's OVF form: the Skylake form, HW10, sends no FUP after OVF). A decoder's
            // workaround drops it: not in the truth, and no last IP.
            let payload = self.hot.ip_payload(IpKind::Fup, self.hot.ip);
            self.put_unrecorded(IpKind::Fup.packet(payload));
            self.skipped_by_workarounds();
        }
    }

    /// TriggerEn went to 0 (STOP, error): nothing more is generated until the next enable.
    pub(super) fn lose_output(&mut self) {
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
