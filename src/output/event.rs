//! Events the output unit reports, each stamped with the number of stream bytes written so far.

use crate::rules::Rule;
use serde::Serialize;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EventKind {
    /// A ToPA PMI: IA32_PERF_GLOBAL_STATUS[55] was set.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OutputEvent {
    /// What happened.
    pub kind: EventKind,
    /// Stream bytes written to memory when it happened.
    pub stream_offset: u64,
    /// ToPA table base concerned (None for single range).
    pub table: Option<u64>,
    /// ToPA entry index concerned (None for single range).
    pub index: Option<u32>,
    /// The rule that produced the event.
    #[serde(serialize_with = "rule_id")]
    pub rule: Option<Rule>,
}

fn rule_id<S: serde::Serializer>(rule: &Option<Rule>, s: S) -> Result<S::Ok, S::Error> {
    match rule {
        Some(r) => s.serialize_str(r.id()),
        None => s.serialize_none(),
    }
}
