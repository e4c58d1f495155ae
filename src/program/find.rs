//! Finding what a recording runs: QEMU (`--qemu` or `qemu-x86_64` on the PATH), ptemu's plugin
//! (`--plugin`, `$PTEMU_QEMU_PLUGIN`, or next to the executable) and PROGRAM, as a shell finds
//! it (QE11).

use super::RecordError;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The plugin's file name, as Cargo builds it (`cargo build -p ptemu-qemu`).
pub const PLUGIN_FILE: &str = "libptemu_qemu.so";

/// `--qemu`, or qemu-x86_64 on the PATH; missing: exit 2 with the command that installs it.
pub(super) fn qemu(given: Option<&Path>) -> Result<PathBuf, RecordError> {
    if let Some(p) = given {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(RecordError::Input(format!(
                "--qemu {}: no such executable",
                p.display()
            )))
        };
    }
    on_path(OsStr::new("qemu-x86_64")).ok_or_else(|| {
        RecordError::Input(
            "qemu-x86_64 is not on the PATH: install QEMU's user-mode emulators with \
             `apt-get install qemu-user` (Debian, Ubuntu), or name one with --qemu PATH"
                .into(),
        )
    })
}

/// `--plugin`, `$PTEMU_QEMU_PLUGIN`, or next to this executable; missing: exit 2 with the
/// command that builds it.
pub(crate) fn plugin(given: Option<&Path>) -> Result<PathBuf, RecordError> {
    let exists = |p: &Path| p.is_file();
    if let Some(p) = given {
        return if exists(p) {
            Ok(p.to_path_buf())
        } else {
            Err(RecordError::Input(format!(
                "--plugin {}: no such file",
                p.display()
            )))
        };
    }
    if let Some(p) = std::env::var_os("PTEMU_QEMU_PLUGIN") {
        let p = PathBuf::from(p);
        return if exists(&p) {
            Ok(p)
        } else {
            Err(RecordError::Input(format!(
                "PTEMU_QEMU_PLUGIN={}: no such file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().ok().and_then(|e| e.canonicalize().ok());
    let dir = exe.as_deref().and_then(Path::parent);
    let candidates: Vec<PathBuf> = dir
        .map(|d| vec![d.join(PLUGIN_FILE), d.join("../lib/ptemu").join(PLUGIN_FILE)])
        .unwrap_or_default();
    if let Some(p) = candidates.iter().find(|p| exists(p)) {
        return Ok(p.clone());
    }
    let place = dir.map_or_else(
        || "the ptemu executable's folder".into(),
        |d| d.display().to_string(),
    );
    Err(RecordError::Input(format!(
        "ptemu's QEMU plugin ({PLUGIN_FILE}) is not installed: build it with \
         `cargo build --release -p ptemu-qemu --manifest-path {}/Cargo.toml` and copy \
         target/release/{PLUGIN_FILE} to {place} (or give --plugin PATH)",
        env!("CARGO_MANIFEST_DIR")
    )))
}

/// PROGRAM as a shell finds it: a name with a slash as it is, else the first match on the PATH;
/// not found: 127, found but not runnable: 126, with the shell's words.
pub(super) fn program(arg0: &OsStr) -> Result<PathBuf, RecordError> {
    let shown = arg0.to_string_lossy();
    let path = if arg0.as_encoded_bytes().contains(&b'/') {
        PathBuf::from(arg0)
    } else {
        on_path(arg0).ok_or_else(|| RecordError::NotFound(format!("{shown}: command not found")))?
    };
    let meta = std::fs::metadata(&path).map_err(|e| {
        let message = format!("{shown}: {}", plain(&e));
        if e.kind() == std::io::ErrorKind::NotFound {
            RecordError::NotFound(message)
        } else {
            RecordError::NotExecutable(message)
        }
    })?;
    if meta.is_dir() {
        return Err(RecordError::NotExecutable(format!("{shown}: Is a directory")));
    }
    if !is_executable(&path) {
        return Err(RecordError::NotExecutable(format!("{shown}: Permission denied")));
    }
    Ok(path)
}

/// An I/O error's text without Rust's "(os error N)".
pub(super) fn plain(e: &std::io::Error) -> String {
    let t = e.to_string();
    t.split(" (os error").next().unwrap_or(&t).to_owned()
}

pub(super) fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub(crate) fn on_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}
