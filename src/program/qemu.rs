//! The QEMU process and the plugin's channel: `qemu-x86_64 -0 ARGV0 -plugin PATH,fd=N,forks=M
//! EXE ARGS`, with the plugin's ends of the sockets inherited (QE19), the parent-death signal
//! (QE20) and the standard descriptors closed that were closed for ptemu (QE11); the program's
//! end as a shell reports it.

use super::RecordError;
use crate::simulate;
use crate::sources::SourceError;
use std::ffi::{OsStr, OsString};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};

/// What QEMU is started with.
pub(super) struct Launch<'a> {
    /// QEMU itself.
    pub qemu: &'a Path,
    /// ptemu's plugin.
    pub plugin: &'a Path,
    /// The plugin's end of its stream's socket (`fd=N`).
    pub fd: i32,
    /// The plugin's end of the fork descriptor (`forks=M`, QE18).
    pub forks: i32,
    /// The ELF file QEMU runs (the program, or a script's interpreter).
    pub exe: &'a Path,
    /// The program's `argv[0]`.
    pub argv0: &'a OsStr,
    /// The interpreter's arguments before the program's own (a `#!` line's argument, the
    /// script).
    pub before: &'a [OsString],
    /// The program's arguments.
    pub args: &'a [OsString],
    /// The standard descriptors to close for the program (bit k: descriptor k, QE11).
    pub closed: u8,
}

/// The command that starts QEMU on the program with the plugin.
pub(super) fn command(l: &Launch<'_>) -> Result<Command, RecordError> {
    let (fd, forks, closed) = (l.fd, l.forks, l.closed);
    // SAFETY: getpid has no preconditions.
    let ptemu_pid = unsafe { libc::getpid() };
    let mut cmd = Command::new(l.qemu);
    cmd.arg("-0").arg(l.argv0);
    cmd.arg("-plugin").arg(plugin_arg(l.plugin, fd, forks)?);
    cmd.arg(l.exe).args(l.before).args(l.args);
    // SAFETY: only fcntl, prctl, getppid, getrlimit, setrlimit and close, async-signal-safe,
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The plugin's ends of the sockets stay open in QEMU (both are made close-on-exec).
            for f in [fd, forks] {
                if libc::fcntl(f, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // QE20: QEMU ends with ptemu, even when ptemu is killed without a chance to say so.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // ptemu ended before the death signal was set: QEMU would run on, unwatched.
            if libc::getppid() != ptemu_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // QE22: no core file: QEMU 7.2 writes its guest's into the program's directory
            // (opened without O_EXCL, over a file of that name) and the kernel QEMU's own (156 MB
            // for a small program) where core_pattern says. The plugin tells where a fault
            // stopped the program.
            let mut core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_CORE, &mut core) == 0 && core.rlim_cur != 0 {
                core.rlim_cur = 0;
                if libc::setrlimit(libc::RLIMIT_CORE, &core) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // QE11: a standard descriptor closed when ptemu started is closed for the program.
            for k in 0..3 {
                if closed & (1 << k) != 0 {
                    libc::close(k);
                }
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// A refusal or failure of the run, as a source error naming QEMU.
pub(super) fn refusal(qemu: &Path, message: &str) -> simulate::SimError {
    simulate::SimError::Source(SourceError::io(
        &qemu.display().to_string(),
        None,
        std::io::Error::other(message.to_owned()),
    ))
}

/// The exit status a shell gives for the program's end: its code, or 128 + the signal.
pub fn exit_code(s: ExitStatus) -> u8 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}

/// The program's end in words: "exited with status N" or "was killed by signal N".
pub fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".into(),
    }
}

/// `-plugin PATH,fd=N,forks=M` (QEMU splits the option at commas).
fn plugin_arg(plugin: &Path, fd: i32, forks: i32) -> Result<OsString, RecordError> {
    if plugin.as_os_str().as_encoded_bytes().contains(&b',') {
        return Err(RecordError::Input(format!(
            "{}: QEMU reads -plugin options up to a comma: the plugin's path must have none",
            plugin.display()
        )));
    }
    let mut s = plugin.as_os_str().to_owned();
    s.push(format!(",fd={fd},forks={forks}"));
    Ok(s)
}

/// The first line of `QEMU --version`, for the message of a QEMU that did not load the plugin.
pub(super) fn qemu_version(qemu: &Path) -> String {
    Command::new(qemu)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "version unknown".into())
}
