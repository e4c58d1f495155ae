//! The QEMU command for a machine: `qemu-system-x86_64 -accel tcg -nographic -no-reboot -m MEM
//! -smp N -kernel FILE [-initrd FILE] -append TEXT -plugin PATH,fd=N [EXTRA]`, the plugin's end
//! of a socket pair inherited (no other process can reach it), QEMU killed when ptemu dies.

use super::flow::{follow, MachineFlow};
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
        }
    }
}

ptemu_core::with_setters!(BootOptions {
    with_initrd => initrd: Option<PathBuf>,
    with_append => append: String,
    with_smp => smp: u32,
    with_memory_mib => memory_mib: u32,
    with_extra => extra: Vec<OsString>,
    with_capture_console => capture_console: bool,
});

pub(super) fn run(o: &BootOptions) -> Result<MachineFlow, MachineError> {
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
    cmd.stdin(Stdio::null());
    if o.capture_console {
        cmd.stdout(Stdio::piped());
    }
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
    let console = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = out.read_to_end(&mut b);
            b
        })
    });
    let followed = follow(&mut ours, &o.qemu);
    if followed.is_err() {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| MachineError::Launch(format!("{}: {e}", o.qemu.display())))?;
    let mut flow = followed?;
    flow.status = Some(status);
    flow.console = console.and_then(|t| t.join().ok());
    Ok(flow)
}
