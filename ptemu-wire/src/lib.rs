//! The byte stream the QEMU plugin (`ptemu-qemu/`) sends to `ptemu run`, both sides: the
//! plugin writes it with [`Writer`], `ptemu run` reads it with [`Reader`] (spec/qemu.md QE1).
//! A crate of its own, with no dependency, so that the plugin QEMU loads links only this (and
//! libc), not ptemu; ptemu re-exports it as `ptemu::sources::qemu::wire`.
//!
//! The stream starts with [`MAGIC`]; then records, each a tag byte and its fields, integers as
//! unsigned LEB128 varints:
//!
//! | tag | record | fields |
//! |---|---|---|
//! | 1 | a translated block | guest address, instruction count N, N - 1 distances from one instruction's start to the next, code length L, L bytes of code from the guest address (the last instruction's up to 15 bytes, as far as they are readable) |
//! | 2 | an executed instruction | its id |
//! | 3 | a run of executed instructions | count: each one's id is the previous id + 1 |
//! | 4 | a file mapping code ran from | start, end, file offset, device major, minor, inode, path length, path |
//! | 5 | a note | kind (1 byte), value, text length, text |
//! | 6 | the end | instructions executed (the plugin's own count, every thread's) |
//! | 7 | whose records follow | a thread's id (its tid), or 0: records of the whole process |
//! | 8 | executed blocks | count N (at least 1), then N block indices, each 4 bytes little-endian (no varint) |
//! | 9 | registers (system mode, QE26) | what the plugin read in the block executed last in its vCPU's chunk: rip, cs, cr3, the transfer's kind, vector and address ([`system::Registers`]) |
//!
//! The records of a program's threads are interleaved in chunks (QE15): each thread gathers its
//! executions and notes, and sends them behind a thread record; blocks, file mappings and the
//! notes about the whole process come behind a thread record of 0. A stream without thread
//! records is one thread's. A run record never follows a thread record: each chunk starts
//! with an execution record.
//!
//! Instruction ids are given in translation order, from 0: the first instruction of the first
//! block is 0, the next one 1, and so on across blocks. Executed instructions mostly follow one
//! another in a block, so a run record stands for most of them: well under a byte an
//! instruction.
//!
//! Blocks are numbered in translation order too, from 0 (a block's index: how many block
//! records came before it). The plugin sends executions as batches of block indices (tag 8,
//! QE13): its callback stores a `u32` and counts, and a batch goes out in one write behind its
//! thread record; the reader takes each index as 4 bytes and looks its block up in a table.
//! [`Reader::next_record`] gives each executed block as [`Record::Exec`] (its first id and
//! instruction count, consecutive blocks folded as runs are), the view the execution and run
//! records give; [`Reader::next_batched`] gives the indices as they are, a [`Batch`] at a time.

use std::io::{self, Read};

pub mod classify;
pub mod flow;
mod notes;
pub mod system;
pub use notes::{DeathCause, DeathNote, FaultNote, HandlerNote};

/// The first bytes of the stream: name and version 3 (version 1 sent one execution an
/// instruction and had no system-call note; version 2 had no batches of block indices).
pub const MAGIC: &[u8; 8] = b"PTEMUQ\x00\x03";

const TAG_BLOCK: u8 = 1;
const TAG_EXEC: u8 = 2;
const TAG_RUN: u8 = 3;
const TAG_MAP: u8 = 4;
const TAG_NOTE: u8 = 5;
const TAG_END: u8 = 6;
const TAG_THREAD: u8 = 7;
const TAG_BLOCKS: u8 = 8;
const TAG_REGISTERS: u8 = 9;

/// The longest head of a record of one varint field: a tag and 10 bytes.
const HEAD: usize = 11;

/// The longest x86 instruction.
pub const MAX_INSN_LEN: usize = 15;

/// What a note says (spec/qemu.md QE7-QE10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoteKind {
    /// The program started a thread (the value: the new thread's tid), in the chunk of the
    /// thread that started it (QE15).
    Thread,
    /// The program forked (the value: the child's pid); the child is not traced.
    Fork,
    /// The program called execve (the text: the path); if it succeeds the new program runs
    /// without the plugin.
    Exec,
    /// Code ran from memory that no file backs (the value: its address; the text: what the
    /// process map says of it).
    AnonymousCode,
    /// The program installed a signal handler (the value: its address).
    Handler,
    /// The plugin could not do its job (the text says why).
    Failure,
    /// A system call returned and the program ran on (the value: its number): sent, at once,
    /// when the next instruction runs, so a stream that ends after it tells that what the
    /// program ran last was lost, and one that ends at a SYSCALL without it, that the program
    /// ended inside the call.
    Returned,
    /// A system call began (the value: its number): the block that ends with its SYSCALL ran
    /// to its end. Sent at once.
    Syscall,
    /// The thread's last record (the value: the instructions it executed, by the plugin's
    /// count): it left by the exit system call, or the process ended (QE15).
    ThreadEnd,
    /// A fault signal's handler was entered (QE21): the value is the interrupted instruction's
    /// address from the signal frame QEMU wrote (`uc_mcontext.rip`); the text is the signal's
    /// number and `si_code` (both 0 when the frame holds no siginfo: a handler without
    /// SA_SIGINFO), the frame's CR2, the handler's address and the word below the interrupted
    /// stack pointer (`-` if unreadable), in hex but the first two. Sent
    /// before the handler block's execution, in the chunk of the thread that faulted.
    Fault,
    /// A signal killed the program from this thread (QE22): the value is the thread's RIP at
    /// its death (the faulting instruction, or the one the signal came before); the text is the
    /// signal's number, the index of the block whose execution began last (which this note
    /// stands for: it is in no batch), and the `si_code` and address of a host fault in that
    /// block (`-` and `-` for none), the address in hex. The thread's last record.
    Killed,
    /// The program died while this thread was stopped (QE22): as [`NoteKind::Killed`], the
    /// value where the thread is (the next instruction it would run) and the text the signal,
    /// the last block's index, `-` and `-`. The thread's last record.
    Stopped,
}

impl NoteKind {
    fn code(self) -> u8 {
        match self {
            NoteKind::Thread => 1,
            NoteKind::Fork => 2,
            NoteKind::Exec => 3,
            NoteKind::AnonymousCode => 4,
            NoteKind::Handler => 5,
            NoteKind::Failure => 6,
            NoteKind::Returned => 7,
            NoteKind::Syscall => 8,
            NoteKind::ThreadEnd => 9,
            NoteKind::Fault => 10,
            NoteKind::Killed => 11,
            NoteKind::Stopped => 12,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => NoteKind::Thread,
            2 => NoteKind::Fork,
            3 => NoteKind::Exec,
            4 => NoteKind::AnonymousCode,
            5 => NoteKind::Handler,
            6 => NoteKind::Failure,
            7 => NoteKind::Returned,
            8 => NoteKind::Syscall,
            9 => NoteKind::ThreadEnd,
            10 => NoteKind::Fault,
            11 => NoteKind::Killed,
            12 => NoteKind::Stopped,
            _ => return None,
        })
    }
}

/// A file mapping that executed code lies in, in guest addresses (an MMAP2 record for perf).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMap {
    /// First guest address.
    pub start: u64,
    /// One past the last guest address.
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode.
    pub inode: u64,
    /// The file's path as the host's process map names it.
    pub path: String,
}

/// Appends records to a buffer; the caller sends the buffer ([`Writer::take`]) when it likes.
/// No allocation once the buffer has grown.
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
    next_id: u64,
    last_exec: u64,
    /// Executions after `last_exec`, each the id after the one before, not yet in `buf`.
    run: u64,
    executed: u64,
    /// Block records written (the next block's index).
    blocks: u64,
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Writer {
    /// A writer whose buffer holds the magic.
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(MAGIC);
        Writer {
            buf,
            next_id: 0,
            last_exec: u64::MAX,
            run: 0,
            executed: 0,
            blocks: 0,
        }
    }

    /// A translated block at `vaddr`: its instructions start at `vaddr` and after each of
    /// `distances` (one fewer than the instructions), and `code` is the guest's bytes from
    /// `vaddr` (through the last instruction). Returns the id of its first instruction (the
    /// others follow).
    pub fn block(&mut self, vaddr: u64, distances: &[u64], code: &[u8]) -> u64 {
        self.close_run();
        let first = self.next_id;
        self.buf.push(TAG_BLOCK);
        put(&mut self.buf, vaddr);
        put(&mut self.buf, distances.len() as u64 + 1);
        for &d in distances {
            put(&mut self.buf, d);
        }
        put(&mut self.buf, code.len() as u64);
        self.buf.extend_from_slice(code);
        self.next_id += distances.len() as u64 + 1;
        self.blocks += 1;
        first
    }

    /// Block records written so far: the index the next block gets (indices count from 0).
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// A batch record: the blocks of `indices` executed, in order (QE13). An empty slice writes
    /// nothing. The writer does not know the blocks' sizes, so [`Writer::executed`] does not
    /// count these: a caller that sends an end record counts them itself ([`Writer::end_with`]).
    pub fn exec_blocks(&mut self, indices: &[u32]) {
        if indices.is_empty() {
            return;
        }
        self.close_run();
        self.buf.push(TAG_BLOCKS);
        put(&mut self.buf, indices.len() as u64);
        for &i in indices {
            self.buf.extend_from_slice(&i.to_le_bytes());
        }
        self.last_exec = u64::MAX;
    }

    /// The instruction `id` executed.
    #[inline]
    pub fn exec(&mut self, id: u64) {
        self.exec_block(id, 1);
    }

    /// The `count` instructions from id `first` on executed, one after another (a block).
    #[inline]
    pub fn exec_block(&mut self, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.executed += count;
        if self.last_exec != u64::MAX && first == self.last_exec + 1 {
            self.run += count;
        } else {
            self.close_run();
            self.buf.push(TAG_EXEC);
            put(&mut self.buf, first);
            self.run = count - 1;
        }
        self.last_exec = first + count - 1;
    }

    /// A file mapping that code ran from.
    pub fn map(&mut self, m: &FileMap) {
        self.close_run();
        self.buf.push(TAG_MAP);
        for v in [m.start, m.end, m.offset, m.major.into(), m.minor.into(), m.inode] {
            put(&mut self.buf, v);
        }
        put(&mut self.buf, m.path.len() as u64);
        self.buf.extend_from_slice(m.path.as_bytes());
    }

    /// A note.
    pub fn note(&mut self, kind: NoteKind, value: u64, text: &str) {
        self.close_run();
        self.buf.push(TAG_NOTE);
        self.buf.push(kind.code());
        put(&mut self.buf, value);
        put(&mut self.buf, text.len() as u64);
        self.buf.extend_from_slice(text.as_bytes());
    }

    /// A registers record (system mode, QE26): what the plugin read in the block whose index
    /// went out last.
    pub fn registers(&mut self, r: &system::Registers) {
        self.close_run();
        self.buf.push(TAG_REGISTERS);
        for v in r.fields() {
            put(&mut self.buf, v);
        }
    }

    /// The end record, with the number of executions seen.
    pub fn end(&mut self) {
        self.end_with(self.executed);
    }

    /// The end record, with `executed`: every thread's executions (QE15).
    pub fn end_with(&mut self, executed: u64) {
        self.close_run();
        self.buf.push(TAG_END);
        put(&mut self.buf, executed);
    }

    /// The records after this are thread `tid`'s (0: the whole process's).
    pub fn thread(&mut self, tid: u64) {
        self.close_run();
        self.buf.push(TAG_THREAD);
        put(&mut self.buf, tid);
        self.last_exec = u64::MAX;
    }

    /// Executions this writer counted.
    pub fn executed(&self) -> u64 {
        self.executed
    }

    /// A writer for a thread's records (no magic: its chunks go into a stream that has one).
    /// Its buffer grows when the first record comes.
    pub const fn chunks() -> Self {
        Writer {
            buf: Vec::new(),
            next_id: 0,
            last_exec: u64::MAX,
            run: 0,
            executed: 0,
            blocks: 0,
        }
    }

    /// [`Writer::take`] behind a thread record for `tid` (0: the whole process): nothing when
    /// nothing is waiting. The next chunk starts afresh (its first execution is not a run).
    pub fn take_chunk(&mut self, tid: u64, send: &mut dyn FnMut(&[u8])) {
        self.close_run();
        if self.buf.is_empty() {
            return;
        }
        let mut head = vec![TAG_THREAD];
        put(&mut head, tid);
        send(&head);
        send(&self.buf);
        self.buf.clear();
        self.last_exec = u64::MAX;
    }

    /// Sends thread `tid`'s chunk (0: the whole process) in one call of `send`, without copying
    /// `indices`: a thread record, the records this writer holds, and then a batch record of
    /// `indices` (the blocks the thread executed after them, in order). `send` gets the slices
    /// to write one after another (a gathering write); it is not called when there is nothing
    /// to send. The buffer is empty afterwards.
    ///
    /// `indices` go out as they lie in memory, which is the stream's little-endian layout on a
    /// little-endian host (a big-endian one swaps them in place first).
    pub fn take_chunk_with(&mut self, tid: u64, indices: &mut [u32], send: &mut dyn FnMut(&[&[u8]])) {
        self.close_run();
        if self.buf.is_empty() && indices.is_empty() {
            return;
        }
        let (mut thread, mut batch) = ([0u8; HEAD], [0u8; HEAD]);
        let thread_len = record_head(TAG_THREAD, tid, &mut thread);
        let batch_len = match indices.len() {
            0 => 0,
            k => record_head(TAG_BLOCKS, k as u64, &mut batch),
        };
        #[cfg(target_endian = "big")]
        for i in indices.iter_mut() {
            *i = i.to_le();
        }
        // SAFETY: a u32 slice viewed as its bytes (u8 has no alignment or validity needs); on a
        // little-endian host those are the stream's layout, on a big-endian one swapped above.
        let ids = unsafe {
            std::slice::from_raw_parts(indices.as_ptr().cast::<u8>(), std::mem::size_of_val(indices))
        };
        send(&[&thread[..thread_len], &self.buf, &batch[..batch_len], ids]);
        self.buf.clear();
        self.last_exec = u64::MAX;
    }

    /// Bytes waiting to be sent.
    pub fn pending(&self) -> usize {
        self.buf.len() + usize::from(self.run > 0)
    }

    /// Everything written so far, for the caller to send; the buffer is empty afterwards.
    pub fn take(&mut self, send: &mut dyn FnMut(&[u8])) {
        self.close_run();
        send(&self.buf);
        self.buf.clear();
    }

    #[inline(always)]
    fn close_run(&mut self) {
        if self.run > 0 {
            self.buf.push(TAG_RUN);
            put(&mut self.buf, self.run);
            self.run = 0;
        }
    }
}

/// Appends `v` as an unsigned LEB128 varint. Written out here, not prost's
/// `encode_varint`, because the plugin calls it once for every block QEMU executes and it must
/// inline into that callback (prost's is not inlined across crates: measured 14% of QEMU's time with the plugin).
#[inline(always)]
fn put(buf: &mut Vec<u8>, v: u64) {
    // A byte at a time: a copy of a slice this short is a call to memmove (measured 25%).
    varint_into(v, &mut |b| buf.push(b));
}

/// A record's tag and one varint field into `out`; its length.
fn record_head(tag: u8, v: u64, out: &mut [u8; HEAD]) -> usize {
    let mut n = 1;
    out[0] = tag;
    varint_into(v, &mut |b| {
        out[n] = b;
        n += 1;
    });
    n
}

/// `v` as an unsigned LEB128 varint, a byte at a time into `push`.
#[inline(always)]
fn varint_into(mut v: u64, push: &mut impl FnMut(u8)) {
    while v >= 0x80 {
        push(v as u8 | 0x80);
        v >>= 7;
    }
    push(v as u8);
}

/// One record, as [`Reader::next_record`] returns it.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A translated block: its address, the id of its first instruction, where each
    /// instruction starts and the code.
    Block {
        /// Guest address of the first instruction.
        vaddr: u64,
        /// Id of the first instruction.
        first_id: u64,
        /// Each instruction's offset from `vaddr` (the first is 0), ascending.
        offsets: &'a [u32],
        /// The guest's bytes from `vaddr`.
        code: &'a [u8],
    },
    /// `count` instructions executed, the first with id `first`, each next one the id after.
    Exec {
        /// Id of the first.
        first: u64,
        /// How many (at least 1).
        count: u64,
    },
    /// A file mapping.
    Map(FileMap),
    /// A note.
    Note {
        /// What kind.
        kind: NoteKind,
        /// Its value.
        value: u64,
        /// Its text.
        text: String,
    },
    /// The records after this are thread `tid`'s (0: the whole process's).
    Thread {
        /// The thread's id.
        tid: u64,
    },
    /// What the plugin read in the block its vCPU executed last (system mode).
    Registers(system::Registers),
    /// The end, with the plugin's count of executions.
    End {
        /// Executions the plugin counted.
        executed: u64,
    },
}

/// Executed blocks, in order, as [`Reader::next_batched`] gives them: part or all of one batch
/// record's indices (as many as the reader's buffer held), each checked to name a block
/// translated before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch<'a> {
    /// The indices, 4 little-endian bytes each.
    bytes: &'a [u8],
    /// The first id of every block so far, and one past the last id (see `Reader::firsts`).
    firsts: &'a [u64],
}

impl<'a> Batch<'a> {
    /// How many executed blocks.
    pub fn len(&self) -> usize {
        self.bytes.len() / 4
    }

    /// Whether there are none (never, for a batch the reader gives).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The index of the `k`-th executed block.
    ///
    /// # Panics
    /// If `k` is not below [`Batch::len`].
    #[inline]
    pub fn index(&self, k: usize) -> u32 {
        le32(&self.bytes[4 * k..4 * k + 4])
    }

    /// The executed blocks' indices, in order.
    pub fn indices(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.bytes.chunks_exact(4).map(le32)
    }

    /// Each executed block as [`Record::Exec`] gives it, one at a time: its first instruction's
    /// id and its instruction count.
    pub fn execs(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + 'a {
        let firsts = self.firsts;
        self.bytes
            .chunks_exact(4)
            .map(move |b| block_span(firsts, le32(b)).expect("checked by the reader"))
    }

    /// Block `index`'s first instruction id and instruction count, if it was translated before
    /// this batch.
    pub fn block(&self, index: u32) -> Option<(u64, u64)> {
        block_span(self.firsts, index)
    }
}

#[inline(always)]
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// A varint that lies whole at the start of `bytes`: its value and its length.
#[inline]
fn buffered_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = Varint::default();
    let k = bytes.iter().take(10).position(|&b| v.push(b))?;
    Some((v.value, k + 1))
}

/// Block `index`'s first id and count from a reader's table of first ids.
#[inline(always)]
fn block_span(firsts: &[u64], index: u32) -> Option<(u64, u64)> {
    let i = index as usize;
    match firsts.get(i..i + 2) {
        Some(&[f, next]) => Some((f, next - f)),
        _ => None,
    }
}

/// A record as [`Reader::next_batched`] gives it: executed blocks as their indices, every other
/// record as [`Reader::next_record`] gives it.
#[derive(Debug, PartialEq, Eq)]
pub enum Batched<'a> {
    /// Executed blocks.
    Blocks(Batch<'a>),
    /// Any other record (an execution or run record among them).
    Record(Record<'a>),
}

/// A malformed stream: the byte offset and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("byte offset {offset}: {message}")]
pub struct WireError {
    /// Where the bad record starts.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
    /// The I/O error beneath, if any.
    #[source]
    pub io: Option<io::Error>,
}

/// Reads records from a stream, with a buffer of its own.
#[derive(Debug)]
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    at: usize,
    filled: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    next_id: u64,
    last_exec: u64,
    started: bool,
    ended: bool,
    offsets: Vec<u32>,
    /// The first instruction id of every block translated so far, by index, then one past the
    /// last id: block `i` is `firsts[i]..firsts[i + 1]`.
    firsts: Vec<u64>,
    /// Indices of the batch record being read still to come.
    batch_left: u64,
}

/// The most instructions a block record may hold (QEMU's blocks hold at most 512).
pub const MAX_BLOCK_INSNS: u64 = 4096;

impl<R: Read> Reader<R> {
    /// A reader of `inner`.
    pub fn new(inner: R) -> Self {
        Reader {
            inner,
            buf: vec![0; 1 << 16],
            at: 0,
            filled: 0,
            base: 0,
            next_id: 0,
            last_exec: u64::MAX,
            started: false,
            ended: false,
            offsets: Vec::new(),
            firsts: vec![0],
            batch_left: 0,
        }
    }

    /// Blocks translated so far (one past the last index a batch may name).
    pub fn blocks(&self) -> u64 {
        self.firsts.len() as u64 - 1
    }

    /// Block `index`'s first instruction id and instruction count, if it was translated.
    pub fn block_ids(&self, index: u32) -> Option<(u64, u64)> {
        block_span(&self.firsts, index)
    }

    /// Bytes read so far (the offset of the next record).
    pub fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    /// Ids given so far (one past the last instruction translated).
    pub fn ids(&self) -> u64 {
        self.next_id
    }

    /// Whether the stream's magic was read (the plugin loaded and spoke).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the end record was read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The next record, or `None` at the end of the stream (with or without an end record:
    /// a process that died never wrote one). Each executed block of a batch record comes as
    /// [`Record::Exec`], folded with the blocks after it in the batch whose ids follow on (a
    /// block that falls through into the block translated after it), as run records fold them.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, WireError> {
        if self.batch_left > 0 {
            return self.exec_from_batch().map(Some);
        }
        match self.next_inner(false)? {
            Some(Batched::Record(r)) => Ok(Some(r)),
            Some(Batched::Blocks(_)) => unreachable!("batches come as executions"),
            None => Ok(None),
        }
    }

    /// As [`Reader::next_record`], but executed blocks come as their indices, as many at once as
    /// the reader's buffer holds of their batch ([`Batch`]): no call a block. Every index is
    /// checked to name a block translated before it.
    pub fn next_batched(&mut self) -> Result<Option<Batched<'_>>, WireError> {
        if self.batch_left > 0 {
            return self.batch().map(|b| Some(Batched::Blocks(b)));
        }
        self.next_inner(true)
    }

    /// The next index of the batch being read (not consumed).
    #[inline(always)]
    fn peek_index(&mut self) -> Result<u32, WireError> {
        if self.filled - self.at < 4 {
            self.need(4, self.offset())?;
        }
        Ok(le32(&self.buf[self.at..self.at + 4]))
    }

    #[cold]
    fn unknown_block(&self, at: u64, index: u32) -> WireError {
        self.error(
            at,
            format!(
                "block {index} executed before it was translated ({} blocks so far)",
                self.blocks()
            ),
        )
    }

    /// The next executed block of the batch being read, with the blocks after it that continue
    /// its ids, as an execution record.
    #[inline]
    fn exec_from_batch(&mut self) -> Result<Record<'_>, WireError> {
        let index = self.peek_index()?;
        let Some((first, count)) = block_span(&self.firsts, index) else {
            return Err(self.unknown_block(self.offset(), index));
        };
        self.at += 4;
        self.batch_left -= 1;
        let end = self.fold_batch(first + count, true)?;
        Ok(Record::Exec {
            first,
            count: end - first,
        })
    }

    /// The batch being read: the whole indices the buffer holds (at least one), checked.
    fn batch(&mut self) -> Result<Batch<'_>, WireError> {
        let at = self.offset();
        self.need(4, at)?;
        let have = ((self.filled - self.at) / 4).min(self.batch_left.min(usize::MAX as u64) as usize);
        let blocks = self.firsts.len() - 1;
        let bytes = &self.buf[self.at..self.at + 4 * have];
        let good = bytes
            .chunks_exact(4)
            .position(|b| le32(b) as usize >= blocks)
            .unwrap_or(have);
        if good == 0 {
            return Err(self.unknown_block(at, le32(bytes)));
        }
        let last = le32(&bytes[4 * (good - 1)..4 * good]);
        self.last_exec = self.firsts[last as usize + 1] - 1;
        let from = self.at;
        self.at += 4 * good;
        self.batch_left -= good as u64;
        Ok(Batch {
            bytes: &self.buf[from..from + 4 * good],
            firsts: &self.firsts,
        })
    }

    fn next_inner(&mut self, batched: bool) -> Result<Option<Batched<'_>>, WireError> {
        if !self.started {
            let mut magic = [0u8; 8];
            for b in &mut magic {
                *b = match self.byte()? {
                    Some(b) => b,
                    None if self.offset() == 0 => return Ok(None),
                    None => return Err(self.error(0, "the stream ends inside its magic")),
                };
            }
            if magic[..7] == MAGIC[..7] && magic[7] != MAGIC[7] {
                return Err(self.error(
                    0,
                    format!(
                        "a ptemu-qemu stream of version {}, this ptemu reads version {} (the \
                         plugin and ptemu come from different builds: build both, cargo build -p \
                         ptemu-qemu)",
                        magic[7], MAGIC[7]
                    ),
                ));
            }
            if &magic != MAGIC {
                return Err(self.error(0, "not a ptemu-qemu stream (bad magic)"));
            }
            self.started = true;
        }
        let start = self.offset();
        let Some(tag) = self.byte()? else {
            return Ok(None);
        };
        if self.ended {
            return Err(self.error(start, "a record after the end record"));
        }
        match tag {
            TAG_BLOCK => {
                let vaddr = self.varint(start)?;
                let n = self.varint(start)?;
                if n == 0 || n > MAX_BLOCK_INSNS {
                    return Err(self.error(start, format!("a block of {n} instructions")));
                }
                self.offsets.clear();
                self.offsets.push(0);
                let mut at = 0u64;
                for _ in 1..n {
                    let d = self.varint(start)?;
                    if d == 0 || d > MAX_INSN_LEN as u64 {
                        return Err(self.error(start, format!("an instruction of {d} bytes")));
                    }
                    at += d;
                    self.offsets.push(at as u32);
                }
                let len = self.varint(start)?;
                if len <= at || len > at + MAX_INSN_LEN as u64 {
                    return Err(self.error(
                        start,
                        format!("{len} bytes of code for instructions up to offset {at}"),
                    ));
                }
                let len = len as usize;
                self.need(len, start)?;
                if self.firsts.len() > u32::MAX as usize {
                    return Err(self.error(start, "more blocks than a 32-bit index names"));
                }
                let first_id = self.next_id;
                self.next_id += n;
                self.firsts.push(self.next_id);
                let from = self.at;
                self.at += len;
                Ok(Some(Batched::Record(Record::Block {
                    vaddr,
                    first_id,
                    offsets: &self.offsets,
                    code: &self.buf[from..from + len],
                })))
            }
            TAG_BLOCKS => {
                let count = self.varint(start)?;
                if count == 0 {
                    return Err(self.error(start, "a batch of no blocks"));
                }
                self.batch_left = count;
                if batched {
                    self.batch().map(|b| Some(Batched::Blocks(b)))
                } else {
                    self.exec_from_batch().map(|r| Some(Batched::Record(r)))
                }
            }
            TAG_EXEC => {
                let id = self.varint(start)?;
                if id >= self.next_id {
                    return Err(self.error(
                        start,
                        format!("instruction {id} executed before it was translated"),
                    ));
                }
                let count = self.with_run_after(id);
                Ok(Some(Batched::Record(Record::Exec { first: id, count })))
            }
            TAG_THREAD => {
                let tid = self.varint(start)?;
                self.last_exec = u64::MAX;
                Ok(Some(Batched::Record(Record::Thread { tid })))
            }
            TAG_RUN => {
                let count = self.varint(start)?;
                if self.last_exec == u64::MAX {
                    return Err(self.error(start, "a run with no execution before it in its chunk"));
                }
                let first = self.last_exec.wrapping_add(1);
                let last = first.checked_add(count.wrapping_sub(1));
                if count == 0 || last.is_none_or(|l| l >= self.next_id) {
                    return Err(self.error(
                        start,
                        format!("a run of {count} instructions past the last translated"),
                    ));
                }
                self.last_exec = first + count - 1;
                Ok(Some(Batched::Record(Record::Exec { first, count })))
            }
            TAG_MAP => {
                let mut v = [0u64; 6];
                for x in &mut v {
                    *x = self.varint(start)?;
                }
                let path = self.text(start)?;
                let [start_addr, end, offset, major, minor, inode] = v;
                if end <= start_addr {
                    return Err(self.error(start, "a mapping that ends before it starts"));
                }
                Ok(Some(Batched::Record(Record::Map(FileMap {
                    start: start_addr,
                    end,
                    offset,
                    major: major as u32,
                    minor: minor as u32,
                    inode,
                    path,
                }))))
            }
            TAG_NOTE => {
                let code = self
                    .byte()?
                    .ok_or_else(|| self.error(start, "the stream ends inside a note"))?;
                let kind = NoteKind::from_code(code)
                    .ok_or_else(|| self.error(start, format!("a note of kind {code}")))?;
                let value = self.varint(start)?;
                let text = self.text(start)?;
                Ok(Some(Batched::Record(Record::Note { kind, value, text })))
            }
            TAG_REGISTERS => {
                let mut f = [0u64; 6];
                for x in &mut f {
                    *x = self.varint(start)?;
                }
                let r = system::Registers::from_fields(f).map_err(|m| self.error(start, m))?;
                Ok(Some(Batched::Record(Record::Registers(r))))
            }
            TAG_END => {
                let executed = self.varint(start)?;
                self.ended = true;
                Ok(Some(Batched::Record(Record::End { executed })))
            }
            t => Err(self.error(start, format!("unknown record tag {t}"))),
        }
    }

    fn error(&self, offset: u64, message: impl Into<String>) -> WireError {
        WireError {
            offset,
            message: message.into(),
            io: None,
        }
    }

    /// Makes `n` unread bytes available in the buffer, or fails at the end of the stream.
    #[inline(never)]
    fn need(&mut self, n: usize, start: u64) -> Result<(), WireError> {
        if self.filled - self.at >= n {
            return Ok(());
        }
        if self.at > 0 {
            self.buf.copy_within(self.at..self.filled, 0);
            self.filled -= self.at;
            self.base += self.at as u64;
            self.at = 0;
        }
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        while self.filled < n {
            match self.inner.read(&mut self.buf[self.filled..]) {
                Ok(0) => return Err(self.error(start, "the stream ends inside a record")),
                Ok(k) => self.filled += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(WireError {
                        offset: start,
                        message: format!("reading the stream: {e}"),
                        io: Some(e),
                    })
                }
            }
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<Option<u8>, WireError> {
        if self.at == self.filled {
            self.base += self.filled as u64;
            self.at = 0;
            self.filled = 0;
            loop {
                match self.inner.read(&mut self.buf) {
                    Ok(0) => return Ok(None),
                    Ok(k) => {
                        self.filled = k;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(WireError {
                            offset: self.base,
                            message: format!("reading the stream: {e}"),
                            io: Some(e),
                        })
                    }
                }
            }
        }
        let b = self.buf[self.at];
        self.at += 1;
        Ok(Some(b))
    }

    /// The next record when it is an execution (with the run after it) that lies whole in what
    /// was read already, or the next executed block of a batch (with the blocks after it whose
    /// ids follow on, as far as they were read): the hot path's way past [`Reader::next_record`]
    /// (the same checks, no [`Record`] made). `None` otherwise, with nothing consumed but maybe
    /// a batch record's head (the batch goes on in `next_record`).
    #[inline]
    pub fn buffered_exec(&mut self) -> Option<(u64, u64)> {
        if !self.started {
            return None;
        }
        if self.batch_left == 0 && !self.ended && self.buf[self.at..self.filled].first() == Some(&TAG_BLOCKS)
        {
            // A batch record's head, when it lies whole in what was read: the batch begins.
            let (count, len) = buffered_varint(&self.buf[self.at + 1..self.filled])?;
            if count == 0 {
                return None;
            }
            self.at += len + 1;
            self.batch_left = count;
        }
        if self.batch_left > 0 {
            return self.buffered_batch_exec();
        }
        let rest = &self.buf[self.at..self.filled];
        if rest.first() != Some(&TAG_EXEC) {
            return None;
        }
        let (id, len) = buffered_varint(&rest[1..]).filter(|&(id, _)| id < self.next_id)?;
        self.at += len + 1;
        Some((id, self.with_run_after(id)))
    }

    /// The hot path's way through a batch record: copies into `dst` the batch's next indices
    /// that lie whole in what was read already and name translated blocks (at most
    /// `dst.len()`), takes them, and returns how many, with the offset of the first. 0, nothing
    /// taken but maybe a batch record's head (as [`Reader::buffered_exec`] takes it), when the
    /// next record is not a batch, its next index is not read yet or names no block
    /// ([`Reader::next_record`] then says where). Unlike `buffered_exec` it does not fold an
    /// execution with the ones whose ids follow on: each index is one block's execution.
    #[inline]
    pub fn take_buffered_indices(&mut self, dst: &mut [u32]) -> (usize, u64) {
        if !self.started {
            return (0, 0);
        }
        if self.batch_left == 0 && !self.ended && self.buf[self.at..self.filled].first() == Some(&TAG_BLOCKS)
        {
            match buffered_varint(&self.buf[self.at + 1..self.filled]) {
                Some((count, len)) if count > 0 => {
                    self.at += len + 1;
                    self.batch_left = count;
                }
                _ => return (0, 0),
            }
        }
        let at = self.offset();
        let have = ((self.filled - self.at) / 4)
            .min(usize::try_from(self.batch_left).unwrap_or(usize::MAX))
            .min(dst.len());
        let blocks = self.firsts.len() - 1;
        let bytes = &self.buf[self.at..self.at + 4 * have];
        let mut n = 0;
        for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(4)) {
            let index = le32(b);
            if index as usize >= blocks {
                break;
            }
            *d = index;
            n += 1;
        }
        if n > 0 {
            self.last_exec = self.firsts[dst[n - 1] as usize + 1] - 1;
            self.at += 4 * n;
            self.batch_left -= n as u64;
        }
        (n, at)
    }

    /// The next executed block of the batch being read, folded with the ones after it whose ids
    /// follow on, as far as what was read already holds them; `None`, nothing consumed, when
    /// its index is not read yet or names no block (`next_record` then says where).
    #[inline]
    fn buffered_batch_exec(&mut self) -> Option<(u64, u64)> {
        if self.filled - self.at < 4 {
            return None;
        }
        let (first, count) = block_span(&self.firsts, le32(&self.buf[self.at..self.at + 4]))?;
        self.at += 4;
        self.batch_left -= 1;
        let end = self.fold_batch(first + count, false).ok()?;
        Some((first, end - first))
    }

    /// The batch's next executed blocks whose ids go on from `end`, taken: one past the last id
    /// they reach. An index that is another block's, or names none (the next call refuses it at
    /// its offset), ends them; so does the end of what was read unless `refill` (which reads on,
    /// so that the records do not depend on how the stream was cut into reads).
    #[inline]
    fn fold_batch(&mut self, mut end: u64, refill: bool) -> Result<u64, WireError> {
        while self.batch_left > 0 {
            if self.filled - self.at < 4 {
                if !refill {
                    break;
                }
                self.need(4, self.offset())?;
            }
            match block_span(&self.firsts, le32(&self.buf[self.at..self.at + 4])) {
                Some((f, n)) if f == end => {
                    self.at += 4;
                    self.batch_left -= 1;
                    end += n;
                }
                _ => break,
            }
        }
        self.last_exec = end - 1;
        Ok(end)
    }

    /// A run record that lies whole in what was read already: its count (at least 1) and its
    /// length in bytes; nothing is consumed.
    #[inline]
    fn buffered_run(&self) -> Option<(u64, usize)> {
        let rest = &self.buf[self.at..self.filled];
        if rest.first() != Some(&TAG_RUN) {
            return None;
        }
        let (count, len) = buffered_varint(&rest[1..])?;
        (count > 0).then_some((count, len + 1))
    }

    /// After an execution record of `id`: the run record right behind it, when it was read
    /// already, taken with it (a block's execution is its first id and the run of the rest:
    /// one record). The instructions both name.
    #[inline]
    fn with_run_after(&mut self, id: u64) -> u64 {
        self.last_exec = id;
        match self.buffered_run() {
            Some((count, len)) if count < self.next_id - id => {
                self.at += len;
                self.last_exec = id + count;
                count + 1
            }
            _ => 1,
        }
    }

    fn varint(&mut self, start: u64) -> Result<u64, WireError> {
        let mut v = Varint::default();
        while v.len < 10 {
            let b = self
                .byte()?
                .ok_or_else(|| self.error(start, "the stream ends inside a record"))?;
            if v.push(b) {
                return Ok(v.value);
            }
        }
        Err(self.error(start, "a varint longer than 64 bits"))
    }

    fn text(&mut self, start: u64) -> Result<String, WireError> {
        let n = self.varint(start)?;
        if n > 4096 {
            return Err(self.error(start, format!("a text of {n} bytes")));
        }
        let n = n as usize;
        self.need(n, start)?;
        let s = String::from_utf8_lossy(&self.buf[self.at..self.at + n]).into_owned();
        self.at += n;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(w: &mut Writer) -> Vec<u8> {
        let mut out = Vec::new();
        w.take(&mut |b| out.extend_from_slice(b));
        out
    }

    #[test]
    fn every_record_reads_back_and_runs_fold_consecutive_ids() {
        let mut w = Writer::new();
        assert_eq!(w.block(0x401000, &[1], &[0x90, 0x48, 0x89, 0xc3]), 0);
        let map = FileMap {
            start: 0x400000,
            end: 0x402000,
            offset: 0,
            major: 8,
            minor: 1,
            inode: 42,
            path: "/bin/x".into(),
        };
        w.map(&map);
        for id in [0, 1, 0, 1, 1] {
            w.exec(id);
        }
        w.note(NoteKind::Fork, 77, "child");
        w.end();
        let bytes = written(&mut w);
        let mut r = Reader::new(&bytes[..]);
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            got.push(format!("{rec:?}"));
        }
        assert_eq!(got.len(), 7, "{got:#?}");
        assert!(got[0].starts_with("Block { vaddr: 4198400, first_id: 0, offsets: [0, 1]"));
        // The first execution is never a run (QE15: each chunk starts with one); an execution
        // record and the run after it read as one record.
        assert_eq!(got[2], "Exec { first: 0, count: 2 }");
        assert_eq!(got[3], "Exec { first: 0, count: 2 }");
        assert_eq!(got[4], "Exec { first: 1, count: 1 }");
        assert!(got[5].contains("Fork"));
        assert_eq!(got[6], "End { executed: 5 }");
        assert!(r.ended());
    }

    #[test]
    fn a_cut_or_bad_stream_names_the_offset() {
        let mut w = Writer::new();
        w.block(0x1000, &[], &[0x90]);
        w.exec(0);
        let bytes = written(&mut w);
        let cut = &bytes[..bytes.len() - 1];
        let mut r = Reader::new(cut);
        assert!(matches!(r.next_record(), Ok(Some(Record::Block { .. }))));
        let e = r.next_record().unwrap_err();
        assert_eq!(e.offset, 8 + 6);
        let mut bad = bytes.clone();
        bad[8 + 6] = 3; // a run with no execution before it
        let mut r = Reader::new(&bad[..]);
        r.next_record().unwrap();
        let e = r.next_record().unwrap_err();
        assert!(e.message.contains("no execution before it"), "{e}");
        let mut bad = bytes.clone();
        bad.extend_from_slice(&[3, 9]); // a run of ids never translated
        let mut r = Reader::new(&bad[..]);
        r.next_record().unwrap();
        r.next_record().unwrap();
        let e = r.next_record().unwrap_err();
        assert!(e.message.contains("past the last translated"), "{e}");
        let mut bad = bytes.clone();
        bad[8 + 6 + 1] = 1; // an exec of id 1, never translated
        let mut r = Reader::new(&bad[..]);
        r.next_record().unwrap();
        let e = r.next_record().unwrap_err();
        assert!(e.message.contains("before it was translated"), "{e}");
        let e = Reader::new(&b"PTEMUQ\x00\x09"[..]).next_record().unwrap_err();
        assert!(e.message.contains("version 9, this ptemu reads version 3"), "{e}");
        let e = Reader::new(&b"PTEMUX\x00\x03"[..]).next_record().unwrap_err();
        assert!(e.message.contains("bad magic"), "{e}");
    }

    /// Two blocks: 0 of two instructions (ids 0, 1) and 1 of one (id 2), then `batch` executed.
    fn two_blocks_then(batch: &[u32]) -> Vec<u8> {
        let mut w = Writer::new();
        assert_eq!(w.blocks(), 0);
        w.block(0x1000, &[1], &[0x90, 0x90]);
        assert_eq!(w.blocks(), 1);
        w.block(0x1002, &[], &[0xc3]);
        w.exec_blocks(batch);
        written(&mut w)
    }

    /// Every record of `bytes` by `next_record`, as text (the first error ends it).
    fn records(r: &mut Reader<impl Read>) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            match r.next_record() {
                Ok(Some(rec)) => got.push(format!("{rec:?}")),
                Ok(None) => return got,
                Err(e) => {
                    got.push(format!("error {e}"));
                    return got;
                }
            }
        }
    }

    /// Every executed block of `bytes` by `next_batched`, and where it stopped.
    fn batched(r: &mut Reader<impl Read>) -> (Vec<u32>, Vec<(u64, u64)>, Option<String>) {
        let (mut ids, mut execs) = (Vec::new(), Vec::new());
        loop {
            match r.next_batched() {
                Ok(Some(Batched::Blocks(b))) => {
                    assert!(!b.is_empty());
                    assert_eq!(b.indices().len(), b.len());
                    for k in 0..b.len() {
                        assert_eq!(b.block(b.index(k)), b.execs().nth(k));
                    }
                    ids.extend(b.indices());
                    execs.extend(b.execs());
                }
                Ok(Some(Batched::Record(_))) => {}
                Ok(None) => return (ids, execs, None),
                Err(e) => return (ids, execs, Some(e.to_string())),
            }
        }
    }

    /// QE1, QE13: a batch record is its tag, a varint count and each block's index in 4
    /// little-endian bytes; behind a thread record when a thread's chunk sends it.
    #[test]
    fn qe13_a_batch_is_a_tag_a_count_and_little_endian_indices() {
        let bytes = two_blocks_then(&[1, 0, 0x0102_0304]);
        // MAGIC, block 0 (tag, address 0x1000, 2 insns, distance 1, 2 bytes), block 1.
        let blocks = [1, 0x80, 0x20, 2, 1, 2, 0x90, 0x90, 1, 0x82, 0x20, 1, 1, 0xc3];
        let batch = [8, 3, 1, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2, 1];
        assert_eq!(bytes, [&MAGIC[..], &blocks, &batch].concat());
        let mut w = Writer::chunks();
        w.note(NoteKind::Syscall, 60, "");
        let mut ids = vec![1u32, 0x0102_0304];
        let mut calls = Vec::new();
        w.take_chunk_with(300, &mut ids, &mut |parts| calls.push(parts.concat()));
        // Thread 300 (a varint: 0xac 0x02), the note the writer held, then the batch.
        let chunk = [7, 0xac, 2, 5, 8, 60, 0, 8, 2, 1, 0, 0, 0, 4, 3, 2, 1];
        assert_eq!(calls, [chunk.to_vec()]);
        assert_eq!(w.pending(), 0);
        w.take_chunk_with(300, &mut [], &mut |_| panic!("nothing to send"));
        // Indices alone, and a note alone.
        w.take_chunk_with(5, &mut [7], &mut |parts| calls.push(parts.concat()));
        w.note(NoteKind::Returned, 0, "");
        w.take_chunk_with(5, &mut [], &mut |parts| calls.push(parts.concat()));
        assert_eq!(calls[1], [7, 5, 8, 1, 7, 0, 0, 0]);
        assert_eq!(calls[2], [7, 5, 5, 7, 0, 0]);
    }

    /// QE13: each index read back is its block's first id and instruction count; blocks whose
    /// ids follow on fold into one execution record, as runs did.
    #[test]
    fn qe13_batch_indices_read_back_as_the_blocks_executions() {
        let bytes = two_blocks_then(&[0, 1, 1, 0, 0]);
        let mut r = Reader::new(&bytes[..]);
        let got = records(&mut r);
        assert_eq!(
            got[2..],
            [
                "Exec { first: 0, count: 3 }",
                "Exec { first: 2, count: 1 }",
                "Exec { first: 0, count: 2 }",
                "Exec { first: 0, count: 2 }",
            ]
        );
        assert_eq!(
            (r.blocks(), r.block_ids(1), r.block_ids(2)),
            (2, Some((2, 1)), None)
        );
        let (ids, execs, end) = batched(&mut Reader::new(&bytes[..]));
        assert_eq!(ids, [0, 1, 1, 0, 0]);
        assert_eq!(execs, [(0, 2), (2, 1), (2, 1), (0, 2), (0, 2)]);
        assert_eq!(end, None);
        // A run record after a batch continues from its last execution (block 0's id 1).
        let mut more = bytes.clone();
        more.extend_from_slice(&[3, 1]);
        assert_eq!(
            records(&mut Reader::new(&more[..])).last().unwrap(),
            "Exec { first: 2, count: 1 }"
        );
    }

    /// QE1: an index no block had when it came is an error naming its own byte offset, in
    /// both views; so is a batch the stream cuts, or one of no blocks.
    #[test]
    fn qe1_an_index_not_yet_translated_is_an_error_at_its_offset() {
        let bytes = two_blocks_then(&[1, 0, 2, 0]);
        let third = (bytes.len() - 8) as u64;
        let got = records(&mut Reader::new(&bytes[..]));
        assert_eq!(
            got[2..4],
            ["Exec { first: 2, count: 1 }", "Exec { first: 0, count: 2 }"]
        );
        assert_eq!(
            got[4],
            format!("error byte offset {third}: block 2 executed before it was translated (2 blocks so far)")
        );
        assert_eq!(got.len(), 5);
        let (ids, _, end) = batched(&mut Reader::new(&bytes[..]));
        assert_eq!(ids, [1, 0]);
        assert!(end.unwrap().starts_with(&format!("byte offset {third}: block 2")));
        // Cut inside the last index: the error names where that index starts.
        let last = (bytes.len() - 4) as u64;
        let mut ok = two_blocks_then(&[1, 0, 1, 0]);
        ok.truncate(ok.len() - 1);
        let got = records(&mut Reader::new(&ok[..]));
        assert_eq!(
            got.last().unwrap(),
            &format!("error byte offset {last}: the stream ends inside a record")
        );
        let (_, _, end) = batched(&mut Reader::new(&ok[..]));
        assert_eq!(
            end.unwrap(),
            format!("byte offset {last}: the stream ends inside a record")
        );
        // A batch of none, at the record's start.
        let mut none = two_blocks_then(&[]);
        let at = none.len() as u64;
        none.extend_from_slice(&[8, 0]);
        let got = records(&mut Reader::new(&none[..]));
        assert_eq!(
            got.last().unwrap(),
            &format!("error byte offset {at}: a batch of no blocks")
        );
    }

    /// The hot path's `buffered_exec` reads a batch as `next_record` does, block for block.
    #[test]
    fn qe13_buffered_exec_reads_batches_as_next_record() {
        let bytes = two_blocks_then(&[0, 1, 1, 0, 0, 1]);
        let mut r = Reader::new(&bytes[..]);
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            if let Record::Exec { first, count } = rec {
                got.push((first, count));
            }
            while let Some(e) = r.buffered_exec() {
                got.push(e);
            }
        }
        assert_eq!(got, [(0, 3), (2, 1), (0, 2), (0, 3)]);
        // An index no block had: not taken by the hot path, refused by next_record.
        let bytes = two_blocks_then(&[0, 5]);
        let mut r = Reader::new(&bytes[..]);
        r.next_record().unwrap();
        r.next_record().unwrap();
        assert_eq!(r.buffered_exec(), Some((0, 2)));
        assert_eq!(r.buffered_exec(), None);
        assert!(r.next_record().unwrap_err().message.contains("block 5"));
    }

    /// [`two_blocks_then`]'s blocks, `pattern` executed, a note, then its first three again,
    /// and the end.
    fn pattern_twice(pattern: &[u32]) -> Vec<u8> {
        let mut w = Writer::new();
        w.block(0x1000, &[1], &[0x90, 0x90]);
        w.block(0x1002, &[], &[0xc3]);
        w.exec_blocks(pattern);
        w.note(NoteKind::Returned, 1, "");
        w.exec_blocks(&pattern[..3]);
        w.end_with(0);
        written(&mut w)
    }

    /// QE13: the hot path's walk of a batch in place gives each executed block's index as
    /// `next_batched` does, whatever pieces the stream comes in and however few indices fit
    /// the caller's buffer, takes a batch's head with its first indices, and leaves an index no
    /// block had to `next_record`, which refuses it at its offset.
    #[test]
    fn qe13_indices_taken_in_place_are_the_batches() {
        let pattern: Vec<u32> = (0..5_000u32).map(|k| (k * 5 + k / 7) % 2).collect();
        let bytes = pattern_twice(&pattern);
        let expect: Vec<u32> = pattern.iter().chain(&pattern[..3]).copied().collect();
        for (step, room) in [(1, 1), (3, 7), (4093, 256), (1 << 20, 256), (5, 1000)] {
            let mut r = Reader::new(Trickle { bytes: &bytes, step });
            let mut got = Vec::new();
            let mut dst = vec![0u32; room];
            loop {
                let (n, at) = r.take_buffered_indices(&mut dst);
                if n > 0 {
                    assert!(at < bytes.len() as u64 && n <= room);
                    // The offset is the first index's: its 4 bytes there.
                    let k = at as usize;
                    assert_eq!(le32(&bytes[k..k + 4]), dst[0]);
                    got.extend_from_slice(&dst[..n]);
                    continue;
                }
                match r.next_record().unwrap() {
                    Some(Record::Exec { first, count }) => {
                        // The batch's next block, folded with those whose ids follow on.
                        let mut left = count;
                        let mut id = first;
                        while left > 0 {
                            let (index, n) = if id == 0 { (0, 2) } else { (1, 1) };
                            got.push(index);
                            id = (id + n) % 3;
                            left -= n;
                        }
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            assert_eq!(got, expect, "{step} bytes a read, room for {room}");
            assert!(r.ended());
        }
        // An index no block had: not taken, refused by next_record at its offset.
        let bytes = two_blocks_then(&[0, 5]);
        let mut r = Reader::new(&bytes[..]);
        r.next_record().unwrap();
        r.next_record().unwrap();
        let mut dst = [0u32; 8];
        let (n, _) = r.take_buffered_indices(&mut dst);
        assert_eq!((n, dst[0]), (1, 0));
        assert_eq!(r.take_buffered_indices(&mut dst).0, 0);
        assert!(r.next_record().unwrap_err().message.contains("block 5"));
    }

    /// Gives its bytes `step` at a time.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// QE13: a batch that reaches the reader in pieces (an index split across reads, a batch
    /// longer than the reader's buffer) reads as the same executions.
    #[test]
    fn qe13_a_batch_split_across_reads_reads_the_same() {
        let pattern: Vec<u32> = (0..40_000u32).map(|k| (k * 7 + k / 3) % 2).collect();
        let bytes = pattern_twice(&pattern);
        assert!(bytes.len() > 1 << 17, "longer than the reader's buffer");
        let whole = records(&mut Reader::new(&bytes[..]));
        let (ids, execs, end) = batched(&mut Reader::new(&bytes[..]));
        assert_eq!(end, None);
        let expect: Vec<u32> = pattern.iter().chain(&pattern[..3]).copied().collect();
        assert_eq!(ids, expect);
        assert_eq!(execs.len(), expect.len());
        for step in [1, 3, 5, 4093] {
            let mut r = Reader::new(Trickle { bytes: &bytes, step });
            assert_eq!(records(&mut r), whole, "{step} bytes a read");
            assert!(r.ended());
            let (got, _, end) = batched(&mut Reader::new(Trickle { bytes: &bytes, step }));
            assert_eq!((got == expect, end), (true, None), "{step} bytes a read");
        }
    }
}

/// A varint taken one byte at a time, for a reader that gets its bytes one by one (the
/// stream's fields, and ptemu's gem5 reader's length prefixes).
#[derive(Clone, Copy, Debug, Default)]
pub struct Varint {
    /// The 7-bit groups so far, least significant first.
    pub value: u64,
    /// Bytes taken.
    pub len: u32,
}

impl Varint {
    /// Takes the next byte; `true` when it is the last one (its continuation bit clear). Groups
    /// past the 64th bit are dropped (the caller bounds the length).
    pub fn push(&mut self, b: u8) -> bool {
        if self.len < 10 {
            self.value |= u64::from(b & 0x7f) << (7 * self.len);
        }
        self.len += 1;
        b < 0x80
    }
}
