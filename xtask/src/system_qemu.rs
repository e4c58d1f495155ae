//! What `ptemu boot` (spec/qemu.md, issue 52) needs on the machine: QEMU 10's system emulator,
//! which loads plugins, from Debian's `bookworm-backports` suite of the registry the machine
//! already uses, with bookworm's `qemu-user` 7.2 kept (backports' `qemu-user` is a static build
//! without `-plugin`, which `ptemu run` needs); and, for the tests, a Debian kernel and
//! `busybox-static`, downloaded as packages and unpacked under `target/boot-cache/` (no root
//! needed, nothing installed).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The backports source ptemu adds, beside the machine's own.
const SOURCE_FILE: &str = "/etc/apt/sources.list.d/ptemu-bookworm-backports.sources";
/// Keeps `qemu-user` (and its binfmt package) at bookworm's dynamic build.
const PIN_FILE: &str = "/etc/apt/preferences.d/ptemu-qemu-user";

/// Whether the system QEMU is 10 or later and the user-mode one still takes `-plugin`.
fn system_qemu_ready() -> bool {
    let major = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| qemu_major(&String::from_utf8_lossy(&o.stdout)));
    major.is_some_and(|m| m >= 10) && user_qemu_takes_plugins()
}

fn user_qemu_takes_plugins() -> bool {
    Command::new("qemu-x86_64")
        .arg("-h")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("-plugin"))
}

/// The major version in `qemu-system-x86_64 --version`'s first line ("QEMU emulator version
/// 10.0.2 (Debian ...)").
fn qemu_major(version: &str) -> Option<u32> {
    let rest = version.lines().next()?.split("version ").nth(1)?;
    rest.split('.').next()?.trim().parse().ok()
}

/// The URIs and keyring of the machine's Debian source for `bookworm` (deb822 `.sources`, or a
/// one-line `sources.list` entry), from `text`.
fn bookworm_source(text: &str) -> Option<(String, Option<String>)> {
    // deb822 stanzas, separated by blank lines.
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
        };
        let suites = field("Suites:").unwrap_or_default();
        if suites.split_whitespace().any(|s| s == "bookworm") {
            if let Some(uris) = field("URIs:") {
                return Some((uris, field("Signed-By:")));
            }
        }
    }
    // One-line form: `deb [options] URI bookworm main ...`.
    text.lines().find_map(|l| {
        let words: Vec<&str> = l.split_whitespace().filter(|w| !w.starts_with('[')).collect();
        match words.as_slice() {
            ["deb", uri, "bookworm", ..] => Some((uri.to_string(), None)),
            _ => None,
        }
    })
}

/// The backports stanza for the machine's `bookworm` source.
fn backports_stanza(uris: &str, signed_by: Option<&str>) -> String {
    let mut s = format!("Types: deb\nURIs: {uris}\nSuites: bookworm-backports\nComponents: main\n");
    if let Some(k) = signed_by {
        s.push_str(&format!("Signed-By: {k}\n"));
    }
    s
}

/// The pin that keeps bookworm's `qemu-user` whatever suite an install targets.
const PIN: &str = "Package: qemu-user qemu-user-binfmt\nPin: release n=bookworm\nPin-Priority: 1001\n";

/// Installs QEMU 10's system emulator from `bookworm-backports` (root and apt-get), keeping
/// `qemu-user` 7.2; or prints what to run and fails.
pub fn ensure_system_qemu() -> Result<(), String> {
    if system_qemu_ready() {
        return Ok(());
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if !is_root {
        return Err(format!(
            "QEMU 10's qemu-system-x86_64 is missing; run as root: add Debian's bookworm-backports \
             suite (as {SOURCE_FILE}), pin qemu-user to bookworm ({PIN_FILE}), then apt-get update \
             && apt-get install -y -t bookworm-backports qemu-system-x86"
        ));
    }
    if !Path::new(SOURCE_FILE).exists() {
        let mut text = String::new();
        for f in ["/etc/apt/sources.list"].into_iter().map(PathBuf::from).chain(
            fs::read_dir("/etc/apt/sources.list.d")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sources" || x == "list")),
        ) {
            if let Ok(t) = fs::read_to_string(&f) {
                text.push_str(&t);
                text.push_str("\n\n");
            }
        }
        let (uris, key) = bookworm_source(&text)
            .ok_or("no Debian bookworm source in /etc/apt to take bookworm-backports from")?;
        fs::write(SOURCE_FILE, backports_stanza(&uris, key.as_deref()))
            .map_err(|e| format!("{SOURCE_FILE}: {e}"))?;
    }
    fs::write(PIN_FILE, PIN).map_err(|e| format!("{PIN_FILE}: {e}"))?;
    let mut update = Command::new("apt-get");
    update.arg("update");
    super::run(update)?;
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "--no-install-recommends", "--allow-downgrades"])
        .args(["-t", "bookworm-backports"])
        .args(["qemu-system-x86", "qemu-user"])
        .env("DEBIAN_FRONTEND", "noninteractive");
    super::run(install)?;
    if !system_qemu_ready() {
        return Err(
            "after the install, qemu-system-x86_64 is not QEMU 10 or qemu-x86_64 lost -plugin".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bookworm_source_is_found_in_either_form() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
                      Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            bookworm_source(deb822),
            Some((
                "http://deb.debian.org/debian".into(),
                Some("/usr/share/keyrings/debian-archive-keyring.gpg".into())
            ))
        );
        let list = "deb http://security.debian.org bookworm-security main\ndeb [arch=amd64] http://mirror/debian bookworm main\n";
        assert_eq!(bookworm_source(list), Some(("http://mirror/debian".into(), None)));
        assert_eq!(bookworm_source("deb http://x trixie main\n"), None);
    }

    #[test]
    fn qemus_major_version_is_read_from_its_banner() {
        assert_eq!(
            qemu_major("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2~bpo12+1)\nCopyright"),
            Some(10)
        );
        assert_eq!(
            qemu_major("QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7)\n"),
            Some(7)
        );
        assert_eq!(qemu_major("something else"), None);
    }
}
