//! The QEMU command for a machine: `qemu-system-x86_64 -accel tcg -nographic -no-reboot -m MEM
//! -smp N -kernel FILE [-initrd FILE] -append TEXT -plugin PATH,fd=N [EXTRA]`, the plugin's end
//! of a socket pair inherited (no other process can reach it), QEMU killed when ptemu dies.

use super::flow::{follow, MachineFlow, Watch};
use super::MachineError;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// What to boot, and how.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BootOptions {
    /// QEMU's system emulator.
    pub qemu: PathBuf,
    /// ptemu's plugin.
    pub plugin: PathBuf,
    /// The kernel (`-kernel`).
    pub kernel: PathBuf,
    /// The initial RAM disk, if any.
    pub initrd: Option<PathBuf>,
    /// The kernel's command line.
    pub append: String,
    /// vCPUs (`-smp`).
    pub smp: u32,
    /// Guest memory in MiB (`-m`).
    pub memory_mib: u32,
    /// More QEMU arguments, after ptemu's.
    pub extra: Vec<OsString>,
    /// Keep the serial console's output in [`MachineFlow::console`] instead of passing it to
    /// ptemu's standard output.
    pub capture_console: bool,
    /// The longest the guest may run; past it QEMU is killed and the boot fails
    /// ([`MachineError::TimedOut`]). `None`: no limit.
    pub timeout: Option<std::time::Duration>,
}

impl BootOptions {
    /// `kernel` booted with QEMU and the plugin as named, one vCPU, 512 MiB, the console on
    /// the serial port (`console=ttyS0`, and `panic=-1` so a panic reboots, which `-no-reboot`
    /// turns into QEMU's exit).
    pub fn new(qemu: impl Into<PathBuf>, plugin: impl Into<PathBuf>, kernel: impl Into<PathBuf>) -> Self {
        BootOptions {
            qemu: qemu.into(),
            plugin: plugin.into(),
            kernel: kernel.into(),
            initrd: None,
            append: "console=ttyS0 panic=-1".into(),
            smp: 1,
            memory_mib: 512,
            extra: Vec::new(),
            capture_console: false,
            timeout: None,
        }
    }
}

impl BootOptions {
    /// [`BootOptions::new`] with QEMU and the plugin found where not given: `qemu-system-x86_64`
    /// on the PATH; the plugin as `ptemu run` finds it (`$PTEMU_QEMU_PLUGIN`, or next to the
    /// executable). `Err`: which is missing, and how to get it.
    pub fn found(
        qemu: Option<PathBuf>,
        plugin: Option<PathBuf>,
        kernel: impl Into<PathBuf>,
    ) -> Result<Self, MachineError> {
        let qemu = match qemu {
            Some(q) => q,
            None => crate::program::find::on_path("qemu-system-x86_64".as_ref()).ok_or_else(|| {
                MachineError::NotFound(
                    "qemu-system-x86_64 is not on the PATH: install QEMU's system emulator \
                     (Debian: `apt-get install -t bookworm-backports qemu-system-x86`, which \
                     loads plugins), or name one with --qemu PATH"
                        .into(),
                )
            })?,
        };
        let plugin = crate::program::find::plugin(plugin.as_deref())
            .map_err(|e| MachineError::NotFound(e.to_string()))?;
        Ok(BootOptions::new(qemu, plugin, kernel))
    }
}

ptemu_core::with_setters!(BootOptions {
    with_initrd => initrd: Option<PathBuf>,
    with_append => append: String,
    with_smp => smp: u32,
    with_memory_mib => memory_mib: u32,
    with_extra => extra: Vec<OsString>,
    with_capture_console => capture_console: bool,
    with_timeout => timeout: Option<std::time::Duration>,
});

/// What the kernel prints when it panics (`panic()`), looked for on the console.
pub const PANIC_TEXT: &[u8] = b"Kernel panic - not syncing";

pub(super) fn run(o: &BootOptions, watch: &mut dyn Watch) -> Result<MachineFlow, MachineError> {
    for (what, p) in [("the kernel", &o.kernel), ("the plugin", &o.plugin)] {
        if !p.is_file() {
            return Err(MachineError::Launch(format!(
                "{}: {what} is not a file",
                p.display()
            )));
        }
    }
    if o.plugin.as_os_str().as_encoded_bytes().contains(&b',') {
        return Err(MachineError::Launch(format!(
            "{}: QEMU reads -plugin options up to a comma: the plugin's path must have none",
            o.plugin.display()
        )));
    }
    let (mut ours, theirs) =
        UnixStream::pair().map_err(|e| MachineError::Launch(format!("a socket for the plugin: {e}")))?;
    let fd = theirs.as_raw_fd();
    let mut plugin = o.plugin.clone().into_os_string();
    plugin.push(format!(",fd={fd}"));
    let mut cmd = Command::new(&o.qemu);
    cmd.args(["-accel", "tcg", "-nographic", "-no-reboot"])
        .arg("-m")
        .arg(o.memory_mib.to_string())
        .arg("-smp")
        .arg(o.smp.to_string())
        .arg("-kernel")
        .arg(&o.kernel);
    if let Some(i) = &o.initrd {
        cmd.arg("-initrd").arg(i);
    }
    cmd.arg("-append")
        .arg(&o.append)
        .arg("-plugin")
        .arg(&plugin)
        .args(&o.extra);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped());
    // SAFETY: only fcntl and prctl, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| MachineError::Launch(format!("{}: {e}", o.qemu.display())))?;
    drop(theirs);
    let pid = child.id() as libc::pid_t;
    let capture = o.capture_console;
    let console = child
        .stdout
        .take()
        .map(|out| std::thread::spawn(move || console(out, capture)));
    // The time limit: QEMU killed when it is reached (the stream then ends early).
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let watchdog = o.timeout.map(|limit| {
        std::thread::spawn(move || {
            let fired = matches!(
                stopped.recv_timeout(limit),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            );
            if fired {
                // SAFETY: a signal to our own child, not yet waited for (the wait comes after
                // this thread is joined).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            fired
        })
    });
    let followed = follow(&mut ours, &o.qemu, watch);
    if followed.is_err() {
        let _ = child.kill();
    }
    drop(stop);
    let timed_out = watchdog.is_some_and(|w| w.join().unwrap_or(false));
    let status = child
        .wait()
        .map_err(|e| MachineError::Launch(format!("{}: {e}", o.qemu.display())))?;
    let (text, panicked) = console.and_then(|t| t.join().ok()).unwrap_or_default();
    if timed_out {
        return Err(MachineError::TimedOut {
            seconds: o.timeout.map_or(0, |t| t.as_secs()),
        });
    }
    let mut flow = followed?;
    flow.status = Some(status);
    flow.console = capture.then_some(text);
    flow.panicked = panicked;
    Ok(flow)
}

/// Passes QEMU's console on to ptemu's standard output (or keeps it, `capture`), and tells
/// whether the kernel panicked ([`PANIC_TEXT`], also across two reads).
fn console(mut out: impl Read, capture: bool) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut tail: Vec<u8> = Vec::new();
    let mut panicked = false;
    let mut buf = [0u8; 8192];
    let mut stdout = std::io::stdout();
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let got = &buf[..n];
        if capture {
            kept.extend_from_slice(got);
        } else {
            use std::io::Write;
            let _ = stdout.write_all(got).and_then(|()| stdout.flush());
        }
        tail.extend_from_slice(got);
        panicked |= tail.windows(PANIC_TEXT.len()).any(|w| w == PANIC_TEXT);
        let keep = tail.len().min(PANIC_TEXT.len());
        tail.drain(..tail.len() - keep);
    }
    (kept, panicked)
}
