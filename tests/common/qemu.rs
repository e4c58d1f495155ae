//! What the `ptemu run` tests share: the plugin, the environment, gcc.

use super::cli::text;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const PATH: &str = "/usr/bin:/bin";

/// The plugin, built next to the ptemu binary by `cargo build -p ptemu-qemu` (which `cargo xtask
/// test` runs before the tests: `cargo test` builds no cdylib).
pub fn plugin() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_ptemu"))
        .parent()
        .unwrap()
        .join("libptemu_qemu.so");
    assert!(
        p.is_file(),
        "{} is missing: the workspace build makes it (cargo build -p ptemu-qemu)",
        p.display()
    );
    p
}

/// The same environment for every run, native or not: the stack QEMU lays out (and so the
/// alignment of the strings a program compares) depends on it.
pub fn env(cmd: &mut Command) -> &mut Command {
    cmd.env_clear().env("PATH", PATH).env("LC_ALL", "C")
}

pub fn which(program: &str) -> PathBuf {
    PATH.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not installed"))
}

/// Compiles `source` (C) with gcc into `dir`.
pub fn c_program(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    gcc(&src, &dir.join(name), &[])
}

/// `gcc -O1 -pthread EXTRA -o EXE SRC`.
pub fn gcc(src: &Path, exe: &Path, extra: &[&str]) -> PathBuf {
    let o = Command::new("gcc")
        .args(["-O1", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(exe)
        .arg(src)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "{}", text(&o.stderr));
    exe.to_path_buf()
}

/// tests/data/qemu/NAME.c compiled into `dir` with gcc's `extra` options.
pub fn data_program(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/qemu/{name}.c"));
    gcc(&src, &dir.join(name), extra)
}

/// A QEMU plugin stream's source as events only (the default `next_steps`): the
/// per-instruction reference of the block tests.
pub struct EventsOnly(pub ptemu::sources::qemu::QemuEvents<std::io::Cursor<Vec<u8>>>);

impl ptemu::sources::EventSource for EventsOnly {
    fn next_events(&mut self, out: &mut Vec<ptemu::Event>) -> ptemu::sources::error::Result<bool> {
        self.0.next_events(out)
    }
    fn start_state(&self) -> ptemu::sources::StartState {
        self.0.start_state()
    }
    fn stats(&self) -> ptemu::sources::SourceStats {
        self.0.stats()
    }
}

/// libipt's instruction decoder over `case` (examples/libipt_decode.rs) gives no error, and
/// `ptemu verify` accepts its lines: the lines, for more checks.
pub fn check_libipt(case: &Path) -> String {
    let libipt = super::harness::decode_case(case);
    let error = libipt.lines().find(|l| l.contains("error"));
    assert!(error.is_none(), "{}: libipt: {error:?}", case.display());
    let v = super::cli::ptemu_stdin(
        &["verify", case.to_str().unwrap(), "--ips", "-"],
        libipt.as_bytes(),
    );
    assert!(
        v.status.success(),
        "{}: verify of libipt: {}{}",
        case.display(),
        text(&v.stdout),
        text(&v.stderr)
    );
    libipt
}
