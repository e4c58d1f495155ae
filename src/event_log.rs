//! Output events as a long run keeps them: counts by kind, the first few in memory, and every
//! one streamed to a writer as JSON lines, so memory stays flat however many events there are
//! (a gigabyte through a 128-byte single range wraps 8.4 million times).

use crate::output::{EventCounts, OutputEvent, OutputUnit};
use std::io::{self, Write};

/// Events kept in memory by default (the rest are counted and, with a writer, streamed).
pub const KEPT_EVENTS: usize = 1000;

/// A run's output events: drain the unit into it ([`EventLog::absorb`]) as the run goes.
pub struct EventLog {
    counts: EventCounts,
    first: Vec<OutputEvent>,
    keep: usize,
    out: Option<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog")
            .field("counts", &self.counts)
            .field("first", &self.first.len())
            .field("streamed", &self.out.is_some())
            .finish()
    }
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::new(KEPT_EVENTS)
    }
}

impl EventLog {
    /// Keeps the first `keep` events in memory and counts all of them.
    pub fn new(keep: usize) -> Self {
        EventLog {
            counts: EventCounts::default(),
            first: Vec::new(),
            keep,
            out: None,
        }
    }

    /// Also writes every event to `out`, one JSON object a line (`events.jsonl`).
    pub fn streaming_to(mut self, out: impl Write + Send + 'static) -> Self {
        self.out = Some(Box::new(out));
        self
    }

    /// Records one event.
    pub fn record(&mut self, e: &OutputEvent) -> io::Result<()> {
        self.counts.add(e.kind);
        if self.first.len() < self.keep {
            self.first.push(*e);
        }
        if let Some(out) = &mut self.out {
            serde_json::to_writer(&mut *out, e)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Moves the unit's pending events here (the unit keeps none, so its memory stays flat).
    pub fn absorb(&mut self, unit: &mut OutputUnit) -> io::Result<()> {
        self.extend(unit.drain_events())
    }

    /// Records every event of `events`, in order.
    pub fn extend(&mut self, events: impl IntoIterator<Item = OutputEvent>) -> io::Result<()> {
        for e in events {
            self.record(&e)?;
        }
        Ok(())
    }

    /// Counts by kind.
    pub fn counts(&self) -> EventCounts {
        self.counts
    }

    /// The first events, at most the number kept.
    pub fn first(&self) -> &[OutputEvent] {
        &self.first
    }

    /// Flushes the stream, if any.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}
