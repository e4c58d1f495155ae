//! A recording's forked children (spec/qemu.md QE18, QE19): each child's plugin makes a socket
//! for its stream and hands one end to `ptemu run` over the fork descriptor, a datagram socket
//! that only the run's own QEMU process and the processes it forks hold (it has no name, and
//! nothing outside the process tree can open it). Each stream is spooled into the staging
//! directory as it arrives, within the run's limits, and traced once the program has ended.

use super::RecordError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the children of one run may cost (QE19): streams open at once, bytes a stream, and how
/// long the run waits for them once the program has ended.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Children's streams open at the same time (each is a descriptor, a thread and a file).
    pub open: usize,
    /// Bytes one child's stream may spool.
    pub bytes: u64,
    /// How long the run waits, after the program ended, for children that run on.
    pub wait: Duration,
}

impl Default for Limits {
    /// `ptemu run`'s defaults: 256 streams, 64 GiB a stream, 60 s of waiting.
    fn default() -> Self {
        Limits {
            open: 256,
            bytes: 64 << 30,
            wait: Duration::from_secs(60),
        }
    }
}

/// One child's stream, as spooled.
struct Stream {
    path: PathBuf,
    /// The process that handed it over, as the kernel names it.
    pid: u32,
    /// Its socket, kept to cut it off when the run stops.
    conn: Option<UnixStream>,
    /// The child closed it (it exited or exec'd), or the run cut it off.
    done: bool,
    /// Handed to the caller already.
    taken: bool,
    /// Writing the spool failed (a full disk): the run fails, nothing is written.
    error: Option<String>,
}

#[derive(Default)]
struct State {
    streams: Vec<Stream>,
    /// No process holds the plugin's end any more: no child can come.
    closed: bool,
    /// Hand-overs refused at once: the sender's pid and why (the first [`MAX_REFUSED`]).
    refused: Vec<(u32, String)>,
    /// Hand-overs refused past those.
    refused_more: usize,
    /// The first limit a child's stream passed, or a resource the run ran out of: the run
    /// fails with it.
    limit: Option<String>,
    copiers: Vec<std::thread::JoinHandle<()>>,
}

/// Refused hand-overs kept with their reasons; the rest are counted.
const MAX_REFUSED: usize = 64;

/// The fork descriptor and the streams that came through it.
pub struct Children {
    /// Ours, until the receiver takes it: it closes with the receiver, however that ends, so
    /// that no child ever blocks on a channel nobody reads.
    channel: Mutex<Option<OwnedFd>>,
    /// The plugin's end (`forks=M`), until QEMU has started with it.
    plugin_end: Mutex<Option<OwnedFd>>,
    limits: Limits,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    receiver: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A stream that ended, for the caller to trace.
pub struct Ended {
    pub path: PathBuf,
    /// The process that sent it, as the kernel said.
    pub sender: u32,
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

impl Children {
    /// A new fork descriptor pair: ours receives with the sender's credentials.
    pub fn new(limits: Limits) -> std::io::Result<Children> {
        let mut pair = [0 as RawFd; 2];
        // SAFETY: socketpair writes two descriptors into the array it is given.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        } < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just made and are owned here.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let on: libc::c_int = 1;
        // SAFETY: an int option of the size given.
        if unsafe {
            libc::setsockopt(
                ours.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // The plugin cannot make us block on a full queue: our end never sends.
        Ok(Children {
            channel: Mutex::new(Some(ours)),
            plugin_end: Mutex::new(Some(theirs)),
            limits,
            state: Arc::new(Mutex::new(State::default())),
            stop: Arc::new(AtomicBool::new(false)),
            receiver: Mutex::new(None),
        })
    }

    /// The plugin's end, for QEMU to inherit (`forks=M`); -1 once QEMU has it.
    pub fn plugin_fd(&self) -> RawFd {
        self.plugin_end
            .lock()
            .expect("not poisoned")
            .as_ref()
            .map_or(-1, AsRawFd::as_raw_fd)
    }

    /// QEMU started (or could not): our copy of the plugin's end goes, so that the channel
    /// ends once QEMU and every process it forked have closed theirs.
    pub fn started(&self) {
        self.plugin_end.lock().expect("not poisoned").take();
    }

    /// Receives hand-overs from now on, each stream copied into `dir/process-K.stream`.
    pub fn accept_into(&self, dir: &Path) {
        let Some(channel) = self.channel.lock().expect("not poisoned").take() else {
            return;
        };
        let (state, stop, dir, limits) = (
            self.state.clone(),
            self.stop.clone(),
            dir.to_path_buf(),
            self.limits,
        );
        let receiver = std::thread::Builder::new()
            .name("ptemu-children".into())
            .spawn(move || {
                // `channel` is this thread's: dropped (closed) when the loop ends, or if it
                // panics, so that a child's hand-over fails instead of waiting.
                let fd = channel.as_raw_fd();
                while !stop.load(Ordering::Relaxed) {
                    match receive(fd) {
                        Received::Nothing => {}
                        Received::Closed => {
                            lock(&state).closed = true;
                            break;
                        }
                        Received::Failed(e) => {
                            let mut s = lock(&state);
                            s.limit.get_or_insert_with(|| {
                                format!("receiving forked children's streams: {e}: nothing written (QE19)")
                            });
                            s.closed = true;
                            break;
                        }
                        Received::Refused(pid, why) => {
                            let mut s = lock(&state);
                            if s.refused.len() < MAX_REFUSED {
                                s.refused.push((pid, why));
                            } else {
                                s.refused_more += 1;
                            }
                        }
                        Received::Stream(pid, conn) => admit(&state, &dir, limits, pid, conn),
                    }
                }
                drop(channel);
            });
        match receiver {
            Ok(h) => *self.receiver.lock().expect("not poisoned") = Some(h),
            Err(e) => {
                let mut s = lock(&self.state);
                s.limit = Some(format!(
                    "a thread for forked children's streams: {e}: nothing written (QE19)"
                ));
                s.closed = true;
            }
        }
    }

    /// The streams that ended and were not handed out yet; waits until every stream received
    /// so far has ended, at most until `deadline`. A limit passed, a spool that could not be
    /// written, or children still running at the deadline fail the run (QE19).
    pub fn ended(&self, deadline: Instant) -> Result<Vec<Ended>, RecordError> {
        loop {
            {
                let mut s = lock(&self.state);
                if let Some(l) = &s.limit {
                    return Err(RecordError::Refused(l.clone()));
                }
                if let Some(e) = s.streams.iter().find_map(|c| c.error.clone()) {
                    return Err(RecordError::Output(e));
                }
                if s.streams.iter().all(|c| c.done) {
                    return Ok(s
                        .streams
                        .iter_mut()
                        .filter(|c| !c.taken)
                        .map(|c| {
                            c.taken = true;
                            Ended {
                                path: c.path.clone(),
                                sender: c.pid,
                            }
                        })
                        .collect());
                }
                if Instant::now() >= deadline {
                    let pids: Vec<String> = s
                        .streams
                        .iter()
                        .filter(|c| !c.done)
                        .map(|c| c.pid.to_string())
                        .collect();
                    return Err(RecordError::Refused(format!(
                        "forked child process(es) {} still ran {} s after the program ended: not \
                         traced, nothing written (QE19; --wait-children SECONDS waits longer)",
                        pids.join(", "),
                        self.limits.wait.as_secs()
                    )));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Streams received so far.
    pub fn count(&self) -> usize {
        lock(&self.state).streams.len()
    }

    /// No process holds the plugin's end any more: no child can come.
    pub fn closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// The hand-overs refused at once: the sender's pid and why (the first 64), and how many
    /// more were refused.
    pub fn refused(&self) -> (Vec<(u32, String)>, usize) {
        let s = lock(&self.state);
        (s.refused.clone(), s.refused_more)
    }

    /// Receives no more, cuts off every stream still open and waits for the copies to end, so
    /// that nothing writes into the staging directory after this. A child still sending gets
    /// EPIPE and runs on untraced.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.receiver.lock().expect("not poisoned").take() {
            let _ = h.join();
        }
        // Hand-overs still queued are closed with the channel.
        self.channel.lock().expect("not poisoned").take();
        self.plugin_end.lock().expect("not poisoned").take();
        let copiers = {
            let mut s = lock(&self.state);
            for c in &mut s.streams {
                if let Some(conn) = c.conn.take() {
                    let _ = conn.shutdown(std::net::Shutdown::Both);
                }
            }
            std::mem::take(&mut s.copiers)
        };
        for c in copiers {
            let _ = c.join();
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What one look at the fork descriptor found.
enum Received {
    Nothing,
    /// Every process holding the plugin's end closed it.
    Closed,
    Refused(u32, String),
    Stream(u32, UnixStream),
    /// The channel failed (no memory for the message, say).
    Failed(std::io::Error),
}

/// One hand-over from the fork descriptor, waiting at most 50 ms: a stream socket from a
/// process of our own uid, or why it was refused (its descriptors closed at once).
fn receive(fd: RawFd) -> Received {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    let ready = unsafe { libc::poll(&mut poll, 1, 50) };
    if ready <= 0 {
        return Received::Nothing;
    }
    let mut data = [0u8; 16];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // Room for the credentials and a few descriptors: more are closed by the kernel.
    const FDS: usize = 4;
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe {
        libc::CMSG_SPACE(std::mem::size_of::<libc::ucred>() as u32)
            + libc::CMSG_SPACE((FDS * std::mem::size_of::<RawFd>()) as u32)
    } as usize;
    // u64s: the control buffer must be aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the buffers above, of the sizes given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Received::Nothing,
            _ => Received::Failed(e),
        };
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut creds: Option<libc::ucred> = None;
    // SAFETY: walking the control messages the kernel wrote, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let body = libc::CMSG_DATA(c);
            let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    for k in 0..len / std::mem::size_of::<RawFd>() {
                        let raw = std::ptr::read_unaligned(body.cast::<RawFd>().add(k));
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if len >= std::mem::size_of::<libc::ucred>() => {
                    creds = Some(std::ptr::read_unaligned(body.cast::<libc::ucred>()));
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 && fds.is_empty() && poll.revents & libc::POLLHUP != 0 {
        return Received::Closed;
    }
    let pid = creds.map_or(0, |c| c.pid as u32);
    // SAFETY: getuid and geteuid have no preconditions.
    let (ours, effective) = unsafe { (libc::getuid(), libc::geteuid()) };
    match creds {
        Some(c) if c.uid == ours || c.uid == effective => {}
        Some(c) => {
            return Received::Refused(
                pid,
                format!("a hand-over from uid {} (the run's is {ours}): refused", c.uid),
            )
        }
        None => return Received::Refused(pid, "a hand-over without credentials: refused".into()),
    }
    if fds.len() != 1 || msg.msg_flags & libc::MSG_CTRUNC != 0 || n != 1 {
        return Received::Refused(
            pid,
            format!(
                "a hand-over of {} descriptor(s) and {n} byte(s), not one socket: refused",
                fds.len()
            ),
        );
    }
    let fd = fds.pop().expect("one");
    if socket_type(&fd) != Some((libc::AF_UNIX, libc::SOCK_STREAM)) {
        return Received::Refused(
            pid,
            "a hand-over of something not a Unix stream socket: refused".into(),
        );
    }
    Received::Stream(pid, UnixStream::from(fd))
}

/// A socket's domain and type; `None` for anything else.
fn socket_type(fd: &OwnedFd) -> Option<(libc::c_int, libc::c_int)> {
    let get = |opt| {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: an int option of the size given.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw mut v).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    Some((get(libc::SO_DOMAIN)?, get(libc::SO_TYPE)?))
}

/// A child's stream, taken within the limits: spooled by a thread of its own; past the open
/// streams' limit it is cut off at once and the run fails with the limit (QE19).
fn admit(state: &Arc<Mutex<State>>, dir: &Path, limits: Limits, pid: u32, conn: UnixStream) {
    let mut s = lock(state);
    let open = s.streams.iter().filter(|c| !c.done).count();
    if open >= limits.open {
        s.limit.get_or_insert_with(|| {
            format!(
                "more than {} forked child processes were traced at once (pid {pid} was one too \
                 many): not traced, nothing written (QE19; --max-children N allows more)",
                limits.open
            )
        });
        return;
    }
    if s.streams.iter().any(|c| !c.done && c.pid == pid) {
        s.refused.push((
            pid,
            "a second stream from a process that has one open: refused".into(),
        ));
        return;
    }
    // Threads of streams that ended are joined as others come (each keeps its stack until).
    let (ended, running): (Vec<_>, Vec<_>) = std::mem::take(&mut s.copiers)
        .into_iter()
        .partition(|h| h.is_finished());
    s.copiers = running;
    for h in ended {
        let _ = h.join();
    }
    let failed = |s: &mut State, what: String| {
        s.limit
            .get_or_insert_with(|| format!("forked child {pid}: {what}: not traced, nothing written (QE19)"));
    };
    // A stream that could not be cut off when the run stops would keep it waiting: refused.
    let Ok(clone) = conn.try_clone() else {
        return failed(
            &mut s,
            format!("its stream's socket: {}", std::io::Error::last_os_error()),
        );
    };
    let k = s.streams.len();
    let path = dir.join(format!("process-{k}.stream"));
    s.streams.push(Stream {
        path: path.clone(),
        pid,
        conn: Some(clone),
        done: false,
        taken: false,
        error: None,
    });
    let st = state.clone();
    let copier = std::thread::Builder::new().spawn(move || {
        let outcome = spool(conn, &path, limits.bytes);
        let mut s = lock(&st);
        match outcome {
            Ok(()) => {}
            Err(Spool::Write(e)) => {
                s.streams[k].error = Some(format!(
                    "{}: spooling forked child {pid}'s stream: {e}",
                    path.display()
                ))
            }
            Err(Spool::TooLong) => {
                s.limit.get_or_insert_with(|| {
                    format!(
                        "forked child {pid}'s stream passed {} bytes: not traced, nothing written \
                         (QE19; --max-stream-bytes SIZE allows more)",
                        limits.bytes
                    )
                });
            }
        }
        let c = &mut s.streams[k];
        c.done = true;
        c.conn = None;
    });
    match copier {
        Ok(h) => s.copiers.push(h),
        Err(e) => {
            let c = &mut s.streams[k];
            c.done = true;
            if let Some(conn) = c.conn.take() {
                let _ = conn.shutdown(std::net::Shutdown::Both);
            }
            failed(&mut s, format!("a thread for its stream: {e}"));
        }
    }
}

enum Spool {
    Write(std::io::Error),
    TooLong,
}

/// Copies `conn` into the new file `path` until the child closes it, at most `limit` bytes.
fn spool(mut conn: UnixStream, path: &Path, limit: u64) -> Result<(), Spool> {
    use std::io::{Read, Write};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(Spool::Write)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A reset or a cut-off: the stream ends here (the reader finds it cut short).
            Err(_) => break,
        };
        total += n as u64;
        if total > limit {
            return Err(Spool::TooLong);
        }
        out.write_all(&buf[..n]).map_err(Spool::Write)?;
    }
    out.flush().map_err(Spool::Write)
}
