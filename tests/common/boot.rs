//! A Linux guest for the system-mode tests (issue 52): Debian's kernel and `busybox-static`,
//! fetched as packages from the machine's Debian registry (`apt-get download`) and unpacked
//! (`dpkg -x`) once under `target/boot-cache/`, and an initramfs built here (newc, the `cpio`
//! crate) whose `/init` runs a script and powers the guest off.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The guest's parts, unpacked.
#[derive(Debug, Clone)]
pub struct Guest {
    /// The kernel (`boot/vmlinuz-*`, a bzImage).
    pub kernel: PathBuf,
    /// busybox, statically linked.
    pub busybox: PathBuf,
}

/// `target/boot-cache/`: kept across test runs, made once by whichever test gets there first.
fn cache_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("boot-cache")
}

/// Runs `cmd`, panicking with its output when it fails.
fn run(mut cmd: Command) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The kernel package `linux-image-amd64` depends on (`linux-image-6.1.0-57-amd64`).
fn kernel_package() -> String {
    let mut cmd = Command::new("apt-cache");
    cmd.args(["depends", "linux-image-amd64"]);
    let deps = String::from_utf8_lossy(&run(cmd).stdout).into_owned();
    deps.lines()
        .find_map(|l| l.trim().strip_prefix("Depends: linux-image-"))
        .map(|v| format!("linux-image-{v}"))
        .unwrap_or_else(|| panic!("no kernel package in apt-cache depends linux-image-amd64:\n{deps}"))
}

/// The guest, fetched and unpacked on first use (under a lock: test binaries run at once).
pub fn guest() -> Guest {
    let dir = cache_dir();
    fs::create_dir_all(&dir).unwrap();
    let lock = fs::File::create(dir.join("lock")).unwrap();
    // SAFETY: flock on an open descriptor; released when `lock` is closed at the return.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock {}", dir.join("lock").display());
    let root = dir.join("root");
    if !root.join("done").is_file() {
        let debs = dir.join("debs");
        let _ = fs::remove_dir_all(&debs);
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&debs).unwrap();
        let mut download = Command::new("apt-get");
        download
            .args(["download", &kernel_package(), "busybox-static"])
            .current_dir(&debs);
        run(download);
        for deb in fs::read_dir(&debs).unwrap() {
            let mut unpack = Command::new("dpkg");
            unpack.arg("-x").arg(deb.unwrap().path()).arg(&root);
            run(unpack);
        }
        fs::write(root.join("done"), "").unwrap();
        let _ = fs::remove_dir_all(&debs);
    }
    let kernel = fs::read_dir(root.join("boot"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .expect("the kernel package holds boot/vmlinuz-*");
    Guest {
        kernel,
        busybox: root.join("bin/busybox"),
    }
}

/// The kernel of `guest` uncompressed (the ELF `vmlinux` inside its bzImage: the xz stream
/// after the setup code, unpacked with `xz`), which QEMU boots by its PVH entry, without the
/// firmware's decompression: made once under `target/boot-cache/`.
pub fn pvh_kernel(guest: &Guest) -> PathBuf {
    let out = cache_dir().join("vmlinux");
    if out.is_file() {
        return out;
    }
    let image = fs::read(&guest.kernel).unwrap();
    let magic = [0xfd, b'7', b'z', b'X', b'Z', 0];
    let at = image
        .windows(magic.len())
        .position(|w| w == magic)
        .expect("the bzImage holds an xz stream");
    let mut xz = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("xz (xz-utils)");
    let mut input = xz.stdin.take().unwrap();
    let payload = image[at..].to_vec();
    let feeder = std::thread::spawn(move || {
        // xz stops reading after its stream: the bytes after it are not wanted.
        let _ = input.write_all(&payload);
    });
    let o = xz.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(o.status.success(), "xz: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        &o.stdout[..4],
        b"\x7fELF",
        "the bzImage's payload is an ELF kernel"
    );
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, &o.stdout).unwrap();
    fs::rename(&tmp, &out).unwrap();
    out
}

/// One entry of an initramfs: a directory, or a file with its bytes and mode.
enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, Vec<u8>, u32),
}

/// Writes `dir/init.cpio`: busybox as `/bin/busybox`, `/init` the shell script `init` (run by
/// busybox's sh), `/proc`, `/sys`, `/dev`, and `files` (name in the guest, file on the host) as
/// executables under `/bin`.
pub fn initramfs(dir: &Path, guest: &Guest, init: &str, files: &[(&str, &Path)]) -> PathBuf {
    let script = format!("#!/bin/busybox sh\n{init}");
    let mut entries = vec![
        Entry::Dir("bin"),
        Entry::Dir("dev"),
        Entry::Dir("proc"),
        Entry::Dir("sys"),
        Entry::File("bin/busybox", fs::read(&guest.busybox).unwrap(), 0o755),
        Entry::File("init", script.into_bytes(), 0o755),
    ];
    let names: Vec<String> = files.iter().map(|(n, _)| format!("bin/{n}")).collect();
    for ((_, path), name) in files.iter().zip(&names) {
        entries.push(Entry::File(name, fs::read(path).unwrap(), 0o755));
    }
    let out = dir.join("init.cpio");
    let mut w = std::io::BufWriter::new(fs::File::create(&out).unwrap());
    for (ino, e) in entries.iter().enumerate() {
        let (name, mode, data): (&str, u32, &[u8]) = match e {
            Entry::Dir(n) => (n, 0o040_755, &[]),
            Entry::File(n, d, m) => (n, 0o100_000 | m, d),
        };
        let mut f = cpio::newc::Builder::new(name)
            .ino(ino as u32 + 1)
            .mode(mode)
            .nlink(if data.is_empty() && mode & 0o040_000 != 0 {
                2
            } else {
                1
            })
            .write(&mut w, data.len() as u32);
        f.write_all(data).unwrap();
        f.finish().unwrap();
    }
    cpio::newc::trailer(&mut w).unwrap();
    w.flush().unwrap();
    out
}

/// Boots `guest` with `initrd` under QEMU 10's `qemu-system-x86_64` (TCG, serial console on
/// stdout, no reboot: a power-off or a panic ends QEMU) with `extra` arguments; its output.
pub fn boot(guest: &Guest, initrd: &Path, extra: &[&str]) -> Output {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-nographic", "-no-reboot", "-m", "512"])
        .arg("-kernel")
        .arg(&guest.kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .args(extra)
        .stdin(Stdio::null());
    cmd.output()
        .expect("qemu-system-x86_64 (cargo xtask test installs QEMU 10)")
}
