//! Where the tracer's events come from, and how they reach it: batches of whole records, read on
//! the tracer's own thread or, with two threads or more, on a reader thread that runs ahead
//! through a bounded queue (SIM18). Both ways hand the tracer the same batches, in the same
//! order, so a run's outputs are the same bytes whatever the thread count.

use super::{SimError, PROGRESS_EVERY};
use crate::image::ImageBuilder;
use crate::sources::penn::PennEvents;
use crate::sources::steps::Steps;
use crate::sources::EventSource;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread;

/// Events handed to the tracer per call (whole records, so a few more).
pub(super) const BATCH: usize = 256;
/// Batches per message from the reader thread: a message costs a channel hand-off (and often a
/// thread wake-up), a batch a tracer call.
const BATCHES_PER_CHUNK: usize = 64;
/// Messages queued between the reader thread and the tracer: memory stays bounded (about
/// `CHUNKS_QUEUED * BATCHES_PER_CHUNK * BATCH` events) however far ahead reading could run.
const CHUNKS_QUEUED: usize = 4;

/// Where the events come from: Penn keeps its macro-ops for the code image.
pub(super) enum Feed {
    /// A Penn trace, and the code image its macro-ops build.
    Penn(Box<PennEvents>, Option<ImageBuilder>),
    /// Any other format.
    Other(Box<dyn EventSource + Send>),
}

impl Feed {
    /// The next record's events; an image past its bounds ends the run at once (SIM9), not after
    /// the whole input.
    fn next(&mut self, out: &mut Steps, name: &str) -> Result<bool, SimError> {
        match self {
            Feed::Penn(src, image) => match src.push_macro_op(out.events_mut())? {
                None => Ok(false),
                Some(op) => {
                    if let Some(b) = image {
                        b.add_shape(op.line, op.pc, op.shape());
                        if b.is_refused() {
                            let refused = std::mem::take(b);
                            return Err(SimError::Image {
                                name: name.to_owned(),
                                errors: refused.build().expect_err("a refused image does not build"),
                            });
                        }
                    }
                    Ok(true)
                }
            },
            Feed::Other(src) => Ok(src.next_steps(out)?),
        }
    }

    /// The reader, for its start state and counts.
    pub(super) fn source(&self) -> &dyn EventSource {
        match self {
            Feed::Penn(src, _) => src.as_ref(),
            Feed::Other(src) => src.as_ref(),
        }
    }

    /// Appends the next batch: whole records' steps until there are [`BATCH`] or more, or the
    /// input ends (false).
    fn fill(&mut self, out: &mut Steps, name: &str) -> Result<bool, SimError> {
        let from = out.len();
        while out.len() - from < BATCH {
            if !self.next(out, name)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Hands every batch of events to `batch`, in order, with `threads` threads (1: this one);
    /// `progress` gets the records read so far every [`PROGRESS_EVERY`] events or so. Returns the
    /// feed, for its counts and code image, or the first error of reading or of `batch`.
    pub(super) fn drive(
        self,
        name: &str,
        threads: usize,
        batch: &mut dyn FnMut(&Steps) -> Result<(), SimError>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Feed, SimError> {
        if threads >= 2 {
            self.drive_pipelined(name, batch, progress)
        } else {
            self.drive_here(name, batch, progress)
        }
    }

    fn drive_here(
        mut self,
        name: &str,
        batch: &mut dyn FnMut(&Steps) -> Result<(), SimError>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Feed, SimError> {
        let mut steps = Steps::default();
        let (mut count, mut next_report) = (0u64, PROGRESS_EVERY);
        let mut more = true;
        while more {
            more = self.fill(&mut steps, name)?;
            batch(&steps)?;
            count += steps.len() as u64;
            steps.clear();
            if count >= next_report {
                next_report = count + PROGRESS_EVERY;
                progress(self.source().stats().records);
            }
        }
        Ok(self)
    }

    /// Reading and mapping on a reader thread, the tracer on this one. The reader stops at its
    /// first error (sent last, after the whole batches before it) or when this side stops
    /// (an error of `batch`: the stop flag, and its next send fails). On success the reader is
    /// joined and the feed comes back; on an error of this side it is left to end on its own,
    /// so a stalled input (a pipe whose writer waits) cannot hold the error back. Without a
    /// thread to be had, everything runs here.
    fn drive_pipelined(
        self,
        name: &str,
        batch: &mut dyn FnMut(&Steps) -> Result<(), SimError>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Feed, SimError> {
        let (full_tx, full_rx) = sync_channel::<Result<Chunk, SimError>>(CHUNKS_QUEUED);
        let (spent_tx, spent_rx) = sync_channel::<Chunk>(CHUNKS_QUEUED + 2);
        // The feed goes over once the thread runs, so it is still here if none can be started.
        let (feed_tx, feed_rx) = sync_channel::<Feed>(1);
        let stop = Arc::new(AtomicBool::new(false));
        let (reader_name, reader_stop) = (name.to_owned(), stop.clone());
        let spawned = thread::Builder::new().name("ptemu-reader".into()).spawn(move || {
            let feed = feed_rx.recv().ok()?;
            Some(feed.read_ahead(&reader_name, &reader_stop, full_tx, spent_rx))
        });
        let Ok(reader) = spawned else {
            return self.drive_here(name, batch, progress);
        };
        feed_tx
            .send(self)
            .map_err(|_| SimError::Thread(std::io::Error::other("the reader thread ended")))?;
        match trace_chunks(full_rx, spent_tx, batch, progress) {
            Ok(()) => reader
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
                .ok_or_else(|| SimError::Thread(std::io::Error::other("the reader thread ended"))),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The reader thread: fills chunks (recycling spent ones) and sends them, then returns the
    /// feed. A chunk goes when it is full (sending each batch as soon as the tracer waits made
    /// twice the hand-offs and cost a third of the gain: measured). On an error, the whole
    /// batches already read go first, then the error.
    fn read_ahead(
        mut self,
        name: &str,
        stop: &AtomicBool,
        full: SyncSender<Result<Chunk, SimError>>,
        spent: Receiver<Chunk>,
    ) -> Feed {
        let (mut count, mut next_report) = (0u64, PROGRESS_EVERY);
        let mut more = true;
        while more && !stop.load(Ordering::Relaxed) {
            let mut chunk = spent.try_recv().unwrap_or_default();
            chunk.used = 0;
            chunk.records = None;
            while more && chunk.used < BATCHES_PER_CHUNK {
                if chunk.batches.len() == chunk.used {
                    chunk.batches.push(Steps::default());
                }
                let steps = &mut chunk.batches[chunk.used];
                steps.clear();
                match self.fill(steps, name) {
                    Ok(m) => more = m,
                    Err(e) => {
                        // As on one thread: the batches before the error are traced, the
                        // partial one is not.
                        if chunk.used > 0 && full.send(Ok(chunk)).is_err() {
                            return self;
                        }
                        let _ = full.send(Err(e));
                        return self;
                    }
                }
                count += steps.len() as u64;
                chunk.used += 1;
            }
            if count >= next_report {
                next_report = count + PROGRESS_EVERY;
                chunk.records = Some(self.source().stats().records);
            }
            if full.send(Ok(chunk)).is_err() {
                break;
            }
        }
        self
    }
}

/// Batches from the reader thread, in one message.
#[derive(Default)]
struct Chunk {
    /// The batches, the first `used` of them filled (the rest are buffers kept for reuse).
    batches: Vec<Steps>,
    used: usize,
    /// Records read so far, when a progress report is due.
    records: Option<u64>,
}

/// The tracer's side: every batch of every chunk to `batch`, in order; spent chunks go back.
/// Takes the receiver, so it is dropped (and the reader released) when this returns.
fn trace_chunks(
    full: Receiver<Result<Chunk, SimError>>,
    spent: SyncSender<Chunk>,
    batch: &mut dyn FnMut(&Steps) -> Result<(), SimError>,
    progress: &mut dyn FnMut(u64),
) -> Result<(), SimError> {
    for chunk in full {
        let chunk = chunk?;
        for steps in &chunk.batches[..chunk.used] {
            batch(steps)?;
        }
        if let Some(records) = chunk.records {
            progress(records);
        }
        let _ = spent.try_send(chunk);
    }
    Ok(())
}
