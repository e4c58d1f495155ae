//! Opening a trace: a file or stdin (`-`), gzip detected by its magic bytes (`1f 8b`), never by
//! the file name. Compressed input is inflated on a second thread so parsing and decompression
//! overlap; the reader sees plain bytes either way.
//!
//! This is the one reading path of every format, and it makes errors impossible to lose: a read
//! or inflate error (a bad CRC or size, a cut-off trailer, bytes after the last member) is
//! returned again by every later read, never followed by a clean end of input, so a reader that
//! retries after an error (or ignores one on a fast path) still stops with it. A mapped file that
//! shrinks while it is read is an error too, not a SIGBUS (`map_guard`).

use super::error::{Result, SourceError};
use super::map_guard::Guard;
use flate2::read::MultiGzDecoder;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread;

/// Bytes per read from the file and per inflated chunk.
const CHUNK: usize = 1 << 20;
/// Inflated chunks in flight between the inflating thread and the parser.
const CHUNKS_IN_FLIGHT: usize = 4;
/// The gzip magic (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A trace input: plain bytes, whatever the file holds on disk.
pub struct Input {
    name: String,
    gzip: bool,
    inner: Box<dyn BufRead + Send>,
    progress: InputProgress,
}

/// How far the reading of an [`Input`] has got, for a progress display on another thread: the
/// bytes taken from the file as it is on disk (compressed bytes for gzip), and the file's size
/// when it is a regular file. Updated every few MiB, so it is near, not exact.
#[derive(Clone, Debug, Default)]
pub struct InputProgress {
    consumed: Arc<AtomicU64>,
    total: Option<u64>,
}

impl InputProgress {
    /// Bytes of the file read so far.
    pub fn consumed(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }

    /// The file's size, when known (not for stdin or a pipe).
    pub fn total(&self) -> Option<u64> {
        self.total
    }
}

/// A reader that counts the bytes it hands out into an [`InputProgress`].
struct Counted<R> {
    inner: R,
    consumed: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("gzip", &self.gzip)
            .finish()
    }
}

impl Input {
    /// Opens `path`, or stdin when `path` is `-`.
    pub fn open(path: &Path) -> Result<Input> {
        let name = path.display().to_string();
        if path.as_os_str() == "-" {
            return Input::from_reader(name, io::stdin());
        }
        let file = File::open(path).map_err(|e| SourceError::io(&name, None, e))?;
        let size = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        let regular = size.is_some_and(|n| n > 0);
        if regular {
            // SAFETY: the map is read-only and private to this reader. A file another process
            // shrinks meanwhile would fault on pages past its new end: the guard turns that into
            // an error (`Mapped::fill_buf`), and without a guard the file is read, not mapped.
            if let Ok(map) = unsafe { memmap2::MmapOptions::new().map(&file) } {
                if map[..map.len().min(2)] != GZIP_MAGIC {
                    if let Some(guard) = Guard::new(&name, map.as_ptr(), map.len()) {
                        let _ = map.advise(memmap2::Advice::Sequential);
                        let progress = InputProgress {
                            consumed: Arc::default(),
                            total: size,
                        };
                        let mut mapped = Mapped {
                            guard,
                            map,
                            file,
                            pos: 0,
                            released: 0,
                            populated: 0,
                            consumed: progress.consumed.clone(),
                        };
                        mapped.slide_window();
                        return Ok(Input {
                            name,
                            gzip: false,
                            inner: Box::new(mapped),
                            progress,
                        });
                    }
                }
            }
        }
        let mut input = Input::from_reader(name, file)?;
        input.progress.total = size;
        Ok(input)
    }

    /// Wraps any byte source; `name` is what errors call it.
    pub fn from_reader(name: impl Into<String>, reader: impl Read + Send + 'static) -> Result<Input> {
        let name = name.into();
        let progress = InputProgress::default();
        let mut reader = Counted {
            inner: reader,
            consumed: progress.consumed.clone(),
        };
        let mut head = [0u8; 2];
        let mut got = 0;
        while got < head.len() {
            match reader.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SourceError::io(&name, None, e)),
            }
        }
        let whole = Sticky::new(io::Cursor::new(head[..got].to_vec()).chain(reader));
        let gzip = head[..got] == GZIP_MAGIC;
        let inner: Box<dyn BufRead + Send> = if gzip {
            Box::new(Inflater::spawn(whole))
        } else {
            Box::new(BufReader::with_capacity(CHUNK, whole))
        };
        Ok(Input {
            name,
            gzip,
            inner,
            progress,
        })
    }

    /// Wraps bytes already in memory (tests, fuzzing).
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<Input> {
        Input::from_reader(name, io::Cursor::new(bytes))
    }

    /// The name errors use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the file was gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        self.gzip
    }

    /// A handle on how far reading has got, to show progress from elsewhere.
    pub fn progress(&self) -> InputProgress {
        self.progress.clone()
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl BufRead for Input {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.inner.consume(amt)
    }
}

/// An error kept to be returned again: its kind and its text.
#[derive(Clone, Debug)]
struct Failed {
    kind: io::ErrorKind,
    message: String,
}

impl Failed {
    fn of(e: &io::Error) -> Failed {
        Failed {
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    fn again(&self) -> io::Error {
        io::Error::new(self.kind, self.message.clone())
    }
}

/// A byte source whose first error is its last word: every read after it fails the same way
/// (a plain `Read` may report an error once and then a clean end of file).
struct Sticky<R> {
    inner: R,
    failed: Option<Failed>,
}

impl<R> Sticky<R> {
    fn new(inner: R) -> Sticky<R> {
        Sticky { inner, failed: None }
    }
}

impl<R: Read> Read for Sticky<R> {
    /// Reads again after an interrupted read (EINTR), so that no reader above sees one: every
    /// reader treats the input alike.
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if let Some(f) = &self.failed {
            return Err(f.again());
        }
        loop {
            match self.inner.read(out) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed = Some(Failed::of(&e));
                    return Err(e);
                }
                r => return r,
            }
        }
    }
}

/// The window of a mapped file kept resident: pages are faulted in a window ahead of the read
/// position and dropped from the process a window behind it, so the resident set stays about
/// two windows whatever the file size.
const WINDOW: usize = 8 << 20;

/// A plain file read through a memory map: no copy into a buffer.
struct Mapped {
    /// Declared before `map`, so it is dropped (unwatched) before the map is unmapped.
    guard: Guard,
    map: memmap2::Mmap,
    /// The mapped file, to compare its size with the map's at the end.
    file: File,
    pos: usize,
    /// Everything below this was dropped from the resident set.
    released: usize,
    /// Everything below this was faulted in ahead of use.
    populated: usize,
    /// `pos`, published for progress displays as the window slides.
    consumed: Arc<AtomicU64>,
}

impl Mapped {
    /// Faults in the next window when the read position nears it, and drops the pages more than a
    /// window behind. Advice failures (old kernels) only cost speed or memory, never data.
    fn slide_window(&mut self) {
        self.consumed.store(self.pos as u64, Ordering::Relaxed);
        let len = self.map.len();
        if self.populated < len && self.pos + WINDOW / 2 >= self.populated {
            let n = WINDOW.min(len - self.populated);
            let _ = self
                .map
                .advise_range(memmap2::Advice::PopulateRead, self.populated, n);
            self.populated += n;
        }
        let behind = (self.pos / WINDOW).saturating_sub(1) * WINDOW;
        if behind > self.released {
            // SAFETY: nothing below `pos` is borrowed (`fill_buf` slices end at the next
            // `consume`), and this read-only file mapping refaults from the file if touched again.
            let _ = unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.released,
                    behind - self.released,
                )
            };
            self.released = behind;
        }
    }
}

impl Mapped {
    /// The error for a file that changed size under the map, if it did: a fault past its new end
    /// was taken, or (checked at the end of input) its size is no longer the map's.
    fn changed(&self, at_end: bool) -> io::Result<()> {
        let now = if self.guard.hit() {
            self.file.metadata().map(|m| m.len()).ok()
        } else if at_end {
            match self.file.metadata() {
                Ok(m) if m.len() == self.map.len() as u64 => return Ok(()),
                Ok(m) => Some(m.len()),
                Err(_) => return Ok(()),
            }
        } else {
            return Ok(());
        };
        let now = now.map_or_else(|| "unknown".into(), |n| format!("{n}"));
        Err(io::Error::other(format!(
            "the file changed size while it was read ({} bytes when opened, {now} now): another \
             process truncated or rewrote it",
            self.map.len()
        )))
    }
}

impl Read for Mapped {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.fill_buf()?.read(out)?;
        self.pos += n;
        self.slide_window();
        Ok(n)
    }
}

impl BufRead for Mapped {
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.guard.hit() || self.pos == self.map.len() {
            self.changed(self.pos == self.map.len())?;
        }
        Ok(&self.map[self.pos..])
    }
    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.map.len());
        if self.pos + WINDOW / 2 >= self.populated || self.pos >= self.released + 2 * WINDOW {
            self.slide_window();
        }
    }
}

/// Reads inflated chunks produced by a background thread; spent buffers go back to it.
/// Dropping it stops and joins the thread, so no thread outlives its reader.
struct Inflater {
    chunks: Option<Receiver<io::Result<Vec<u8>>>>,
    worker: Option<thread::JoinHandle<()>>,
    spent: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    done: bool,
    /// The inflate or read error that ended the input, returned by every later read.
    failed: Option<Failed>,
}

impl Inflater {
    fn spawn(raw: impl Read + Send + 'static) -> Inflater {
        let (chunk_tx, chunks) = sync_channel::<io::Result<Vec<u8>>>(CHUNKS_IN_FLIGHT);
        let (spent, spent_rx) = sync_channel::<Vec<u8>>(CHUNKS_IN_FLIGHT + 2);
        let worker = thread::spawn(move || {
            let mut gz = MultiGzDecoder::new(BufReader::with_capacity(CHUNK, raw));
            loop {
                let mut buf = spent_rx.try_recv().unwrap_or_else(|_| Vec::with_capacity(CHUNK));
                buf.resize(CHUNK, 0);
                let mut filled = 0;
                let result = loop {
                    if filled == buf.len() {
                        break Ok(());
                    }
                    match gz.read(&mut buf[filled..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                buf.truncate(filled);
                let last = filled == 0 || result.is_err();
                if filled > 0 && chunk_tx.send(Ok(buf)).is_err() {
                    return;
                }
                if let Err(e) = result {
                    let _ = chunk_tx.send(Err(e));
                }
                if last {
                    return;
                }
            }
        });
        Inflater {
            chunks: Some(chunks),
            worker: Some(worker),
            spent,
            current: Vec::new(),
            pos: 0,
            done: false,
            failed: None,
        }
    }
}

impl Drop for Inflater {
    fn drop(&mut self) {
        // Closing the channel makes the thread's next send fail, and it returns.
        self.chunks = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Read for Inflater {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Inflater {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.current.len() && !self.done {
            if let Some(f) = &self.failed {
                return Err(f.again());
            }
            let Some(chunks) = &self.chunks else {
                break;
            };
            match chunks.recv() {
                Ok(Ok(next)) => {
                    let old = std::mem::replace(&mut self.current, next);
                    self.pos = 0;
                    let _ = self.spent.try_send(old);
                }
                Ok(Err(e)) => {
                    self.failed = Some(Failed::of(&e));
                    return Err(e);
                }
                Err(_) => self.done = true,
            }
        }
        Ok(&self.current[self.pos..])
    }
    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.current.len());
    }
}

/// A whole file as bytes, for tools that need it all at once (`ptemu dump`, `ptemu asm`): a
/// non-empty regular file is mapped (no copy) under the SIGBUS guard; anything else (a FIFO, a
/// device, an empty file) is read, never sized by its metadata.
pub struct WholeFile {
    inner: Whole,
}

enum Whole {
    /// Declared guard first: dropped (unwatched) before the map is unmapped.
    Mapped(Guard, memmap2::Mmap, File),
    Read(Vec<u8>),
}

impl std::fmt::Debug for WholeFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeFile")
            .field("len", &self.bytes().len())
            .finish()
    }
}

impl WholeFile {
    /// Opens `path` (`-` is stdin, read to its end).
    pub fn open(path: &Path) -> io::Result<WholeFile> {
        if path.as_os_str() == "-" {
            let mut v = Vec::new();
            io::stdin().read_to_end(&mut v)?;
            return Ok(WholeFile {
                inner: Whole::Read(v),
            });
        }
        let mut file = File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_file() && meta.len() > 0 {
            // SAFETY: read-only and private; a file another process shrinks meanwhile reads as
            // zeros past its new end under the guard, and `changed` then reports it.
            if let Ok(map) = unsafe { memmap2::Mmap::map(&file) } {
                if let Some(guard) = Guard::new(&path.display().to_string(), map.as_ptr(), map.len()) {
                    return Ok(WholeFile {
                        inner: Whole::Mapped(guard, map, file),
                    });
                }
            }
        }
        let mut v = Vec::new();
        file.read_to_end(&mut v)?;
        Ok(WholeFile {
            inner: Whole::Read(v),
        })
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.inner {
            Whole::Mapped(_, map, _) => map,
            Whole::Read(v) => v,
        }
    }

    /// An error if the mapped file changed size since it was opened (what was read past its new
    /// end was zeros, not the file): check after using the bytes.
    pub fn changed(&self) -> io::Result<()> {
        let Whole::Mapped(guard, map, file) = &self.inner else {
            return Ok(());
        };
        let now = file.metadata().map(|m| m.len()).unwrap_or(0);
        if guard.hit() || now != map.len() as u64 {
            return Err(io::Error::other(format!(
                "the file changed size while it was read ({} bytes when opened, {now} now): \
                 another process truncated or rewrote it",
                map.len()
            )));
        }
        Ok(())
    }
}
