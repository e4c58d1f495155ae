//! A ring of workers that read an input in turn and parse what they read side by side (SIM19,
//! SIM20): the parse of a text or binary trace is most of a run's time, so it is split across
//! threads, and its results come back in reading order.
//!
//! Worker `k` of `n` holds the input for blocks `k`, `k + n`, `k + 2n`, ...: it reads a block
//! into its own buffer, hands the input on to worker `k + 1` (the input itself is the token, so
//! the reads stay in order), then parses the block where its bytes are still in its core's cache
//! and queues the result. The reader takes the results back in turn. Bounded: each worker holds
//! one block and at most [`QUEUED`] + 1 parsed ones (with, when a parse stopped at the errors it
//! keeps, a copy of the rest of its block, which the reader parses itself); spent results go
//! back to be reused. A worker
//! ends after the block that ends the input, when the reader is gone (its next send fails), or
//! when a neighbour is gone; a panic on a worker reaches the reader's thread.

use super::SourceError;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread;

/// Parsed blocks queued from each worker (one more waits in its blocked send).
pub(crate) const QUEUED: usize = 2;

/// What a ring reads and how it parses it.
pub(crate) trait Blocks: Send + 'static {
    /// The input and where it stands, passed from worker to worker.
    type Token: Send + 'static;
    /// How a block's read ended, handed from the read to the parse.
    type After: Send + 'static;
    /// A parsed block, as the reader takes it; a spent one is given back to be reused.
    type Parsed: Send + 'static;

    /// Reads the next block from `token` into `bytes` (empty).
    fn read(&mut self, token: &mut Self::Token, bytes: &mut Vec<u8>) -> Self::After;
    /// Whether the input is done after a block read with this ending.
    fn last(after: &Self::After) -> bool;
    /// Parses `bytes`, read with `after`, into `spent` (a result the reader gave back, or `None`).
    /// A parse may stop once it holds as many errors as it keeps ([`errors_kept`]): its result
    /// then tells where, and what follows the rest ([`Blocks::rest`]), and its own ending is
    /// [`Ending::More`]. The rest is parsed next, on the reader's side.
    fn parse(&mut self, bytes: &[u8], after: Self::After, spent: Option<Self::Parsed>) -> Self::Parsed;
    /// Where a parse stopped in its bytes, and what follows the rest, taken out of `parsed`.
    fn rest(parsed: &mut Self::Parsed) -> Option<(usize, Self::After)>;
}

/// The errors a lenient parse keeps per block before it leaves the rest to the reader (a strict
/// one keeps 1: a run stops at its first error). An error costs a few hundred bytes and a block
/// of bad input can hold one every byte or two, so without a bound the blocks in flight could
/// hold gigabytes of them.
pub(crate) const ERRORS_KEPT: usize = 512;

/// How many errors a parse keeps per block (at least 1).
pub(crate) fn errors_kept(lenient: bool) -> usize {
    if lenient {
        ERRORS_KEPT
    } else {
        1
    }
}

/// What follows a block: more blocks, the end of the input, or the error that ended it.
pub(crate) enum Ending<E> {
    More,
    End,
    Error(E),
}

impl<E> Ending<E> {
    /// Whether no block follows.
    pub(crate) fn is_last(&self) -> bool {
        !matches!(self, Ending::More)
    }

    /// Takes it out (leaving the end): `Ok(true)` when more blocks follow, `Ok(false)` at the
    /// end, or the error.
    pub(crate) fn take(&mut self) -> Result<bool, E> {
        match std::mem::replace(self, Ending::End) {
            Ending::More => Ok(true),
            Ending::End => Ok(false),
            Ending::Error(e) => Err(e),
        }
    }
}

/// A worker's parsed block, and the bytes its parse left (with what follows them).
struct Done<B: Blocks> {
    parsed: B::Parsed,
    rest: Option<(Vec<u8>, B::After)>,
}

/// The token and whether the input ended with the last block read.
struct Turn<T> {
    token: T,
    ended: bool,
}

/// The reader's side of a ring.
pub(crate) struct Ring<B: Blocks> {
    /// The workers, joined when one is gone without its last word, to pass its panic on.
    threads: Vec<thread::JoinHandle<()>>,
    /// Parsed blocks from each worker, taken in turn.
    parsed: Vec<Receiver<Done<B>>>,
    /// Spent results back to each worker.
    spent: Vec<SyncSender<B::Parsed>>,
    /// The worker of the next block.
    turn: usize,
    /// Parses on the reader's side what a worker left of a block.
    local: B,
    /// What a worker left of the block last taken: its bytes, how far they are parsed here, and
    /// what follows them.
    pending: Option<(Vec<u8>, usize, B::After)>,
}

impl<B: Blocks> std::fmt::Debug for Ring<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("workers", &self.parsed.len())
            .field("turn", &self.turn)
            .finish()
    }
}

impl<B: Blocks + Clone> Ring<B> {
    /// Starts `workers` threads (at least one) named `name-k` over `token`, or gives `token` back
    /// when no thread can be had.
    pub(crate) fn spawn(blocks: B, token: B::Token, workers: usize, name: &str) -> Result<Self, B::Token> {
        let workers = workers.max(1);
        let (mut turns_tx, mut turns_rx) = (Vec::new(), Vec::new());
        for _ in 0..workers {
            let (tx, rx) = sync_channel::<Turn<B::Token>>(1);
            turns_tx.push(tx);
            turns_rx.push(Some(rx));
        }
        let first = turns_tx[0].clone();
        let mut ring = Ring {
            threads: Vec::new(),
            parsed: Vec::new(),
            spent: Vec::new(),
            turn: 0,
            local: blocks.clone(),
            pending: None,
        };
        for k in 0..workers {
            let (parsed_tx, parsed_rx) = sync_channel(QUEUED);
            let (spent_tx, spent_rx) = sync_channel(QUEUED + 2);
            let turn = turns_rx[k].take().expect("one receiver per worker");
            let next = turns_tx[(k + 1) % workers].clone();
            let mut blocks = blocks.clone();
            let work = move || work(&mut blocks, &turn, &next, &parsed_tx, &spent_rx);
            // A worker that cannot start: the ones started so far end when their turn channels
            // drop, and the token has not moved yet.
            let Ok(handle) = thread::Builder::new().name(format!("{name}-{k}")).spawn(work) else {
                return Err(token);
            };
            ring.threads.push(handle);
            ring.parsed.push(parsed_rx);
            ring.spent.push(spent_tx);
        }
        drop(turns_tx);
        if let Err(back) = first.send(Turn { token, ended: false }) {
            return Err(back.0.token);
        }
        Ok(ring)
    }
}

impl<B: Blocks> Ring<B> {
    /// The next parsed block in reading order; `spent` (the block before, if any) goes back to its
    /// worker. What a worker's parse left of a block is parsed here, into `spent`, in the same
    /// steps. When a worker is gone without its last word, the panic of a worker that is done
    /// goes on here, as it would on one thread; without one, an I/O error on the input `name`.
    /// Not to be called again after the block that ends the input.
    pub(crate) fn next(&mut self, spent: Option<B::Parsed>, name: &str) -> Result<B::Parsed, SourceError> {
        if let Some((bytes, at, after)) = self.pending.take() {
            let mut p = self.local.parse(&bytes[at..], after, spent);
            if let Some((more, after)) = B::rest(&mut p) {
                // A parse that keeps errors stops after one at the least.
                debug_assert!(more > 0, "a parse of the rest made no progress");
                self.pending = Some((bytes, at + more, after));
            }
            return Ok(p);
        }
        if let Some(spent) = spent {
            // The worker of the block before.
            let before = (self.turn + self.parsed.len() - 1) % self.parsed.len();
            let _ = self.spent[before].try_send(spent);
        }
        let Ok(next) = self.parsed[self.turn].recv() else {
            // It panicked, or a neighbour did. This worker is ending (its channel is closed); the
            // others are joined only when done: one may be blocked in a read.
            let mut threads = std::mem::take(&mut self.threads);
            let this = threads.remove(self.turn);
            for t in std::iter::once(this).chain(threads.into_iter().filter(|t| t.is_finished())) {
                if let Err(panic) = t.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            return Err(SourceError::io(
                name,
                None,
                std::io::Error::other("a parsing thread stopped"),
            ));
        };
        self.turn = (self.turn + 1) % self.parsed.len();
        self.pending = next.rest.map(|(bytes, after)| (bytes, 0, after));
        Ok(next.parsed)
    }
}

/// A worker: waits for its turn at the input, reads a block, hands the input on, parses the
/// block and sends it to the reader; until the input ends or the reader or a neighbour is gone.
fn work<B: Blocks>(
    blocks: &mut B,
    turn: &Receiver<Turn<B::Token>>,
    next: &SyncSender<Turn<B::Token>>,
    parsed: &SyncSender<Done<B>>,
    spent: &Receiver<B::Parsed>,
) {
    let mut bytes = Vec::new();
    while let Ok(mut turn_now) = turn.recv() {
        if turn_now.ended {
            // Passed round after the last block: every worker stops.
            let _ = next.send(turn_now);
            return;
        }
        bytes.clear();
        let after = blocks.read(&mut turn_now.token, &mut bytes);
        let last = B::last(&after);
        turn_now.ended = last;
        // The next worker may be gone only when the reader is: the block is parsed anyway.
        let _ = next.send(turn_now);
        let mut p = blocks.parse(&bytes, after, spent.try_recv().ok());
        // Left to the reader: copied, as this buffer takes the next block.
        let rest = B::rest(&mut p).map(|(at, after)| (bytes[at..].to_vec(), after));
        if parsed.send(Done { parsed: p, rest }).is_err() || last {
            return;
        }
    }
}
