//! The back-pressure model (OVF1, OVF2): a byte level that packets fill and cycles drain.

use super::config::Backpressure;

/// Events lost to one overflow: `lost_from..resumed_at` (event indices, counting from 1 as
/// [`super::TracerStats::events`] does). The OVF is sent while handling event `resumed_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OverflowSpan {
    /// The first event whose packets were lost (including TNT bits still pending then).
    pub lost_from: u64,
    /// The event at which OVF was sent (u64::MAX while the overflow lasts).
    pub resumed_at: u64,
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
            });
        }
    }

    /// The overflow clears once the buffer is empty.
    pub fn ready(&self) -> bool {
        self.active && self.level == 0
    }

    pub fn finish(&mut self, event: u64) {
        self.active = false;
        if let Some(s) = self.spans.last_mut() {
            s.resumed_at = event;
        }
    }
}
