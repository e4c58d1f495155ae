//! Events the output unit reports, each stamped with the number of stream bytes written so far.

use crate::rules::Rule;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum EventKind {
    /// A ToPA PMI: IA32_PERF_GLOBAL_STATUS\[55\] was set.
    Pmi,
    /// Output stopped: ToPA STOP (S1) or an IP TraceStop (S6).
    Stopped,
    /// An operational error (E3).
    Error,
    /// The walk wrapped: ToPA index 2^25-1 to 0 (W5) or the single range's offset back to 0 (R3).
    Wrap,
    /// A profile erratum that changes the output applies from now on (TGL052).
    Erratum,
}

/// One event of the output unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OutputEvent {
    /// What happened.
    pub kind: EventKind,
    /// Stream bytes written to memory when it happened.
    pub stream_offset: u64,
    /// ToPA table base concerned (None for single range); serialized as `"0x..."`.
    #[cfg_attr(feature = "serde", serde(serialize_with = "crate::serde_hex::option"))]
    pub table: Option<u64>,
    /// ToPA entry index concerned (None for single range).
    pub index: Option<u32>,
    /// The rule that produced the event.
    #[cfg_attr(feature = "serde", serde(serialize_with = "rule_id"))]
    pub rule: Option<Rule>,
}

#[cfg(feature = "serde")]
fn rule_id<S: serde::Serializer>(rule: &Option<Rule>, s: S) -> Result<S::Ok, S::Error> {
    match rule {
        Some(r) => s.serialize_str(r.id()),
        None => s.serialize_none(),
    }
}

/// Counts of output events by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct EventCounts {
    /// ToPA PMIs.
    pub pmi: u64,
    /// Stops (ToPA STOP, TraceStop).
    pub stopped: u64,
    /// Operational errors.
    pub error: u64,
    /// Wraps of the walk or the range.
    pub wrap: u64,
    /// Errata that apply.
    pub erratum: u64,
}

impl EventCounts {
    /// The count of `kind`.
    pub fn of(&self, kind: EventKind) -> u64 {
        match kind {
            EventKind::Pmi => self.pmi,
            EventKind::Stopped => self.stopped,
            EventKind::Error => self.error,
            EventKind::Wrap => self.wrap,
            EventKind::Erratum => self.erratum,
        }
    }

    /// Counts one event of `kind`.
    pub fn add(&mut self, kind: EventKind) {
        let n = match kind {
            EventKind::Pmi => &mut self.pmi,
            EventKind::Stopped => &mut self.stopped,
            EventKind::Error => &mut self.error,
            EventKind::Wrap => &mut self.wrap,
            EventKind::Erratum => &mut self.erratum,
        };
        *n += 1;
    }

    /// All events.
    pub fn total(&self) -> u64 {
        self.pmi + self.stopped + self.error + self.wrap + self.erratum
    }
}
