//! What QEMU runs for PROGRAM: an ELF file itself, or for a `#!` script what the kernel runs
//! (QE11): its interpreter, read as Linux's binfmt_script reads the line.

use super::find::{is_executable, plain};
use super::RecordError;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// What QEMU must run for `program` (found from `arg0`): an ELF file itself (`argv[0]` as
/// given), or for a `#!` script what the kernel runs (QE11): its interpreter with the line's
/// optional argument and the script, and when the interpreter is a script itself, its own
/// interpreter in turn (at most 5 deep, as Linux's exec); anything else: 126, as a shell says.
pub(super) fn interpreter(
    arg0: &OsStr,
    program: &Path,
) -> Result<(PathBuf, OsString, Vec<OsString>), RecordError> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let shown = arg0.to_string_lossy();
    let mut file = program.to_path_buf();
    let mut argv0 = arg0.to_owned();
    let mut before: Vec<OsString> = Vec::new();
    for depth in 0..=5 {
        let mut head = [0u8; SHEBANG_BUF];
        let mut n = 0;
        std::fs::File::open(&file)
            .and_then(|mut f| {
                // What the kernel reads: the first 256 bytes, or all of a shorter file.
                while n < head.len() {
                    match f.read(&mut head[n..])? {
                        0 => break,
                        k => n += k,
                    }
                }
                Ok(())
            })
            .map_err(|e| {
                let e = plain(&e);
                if depth == 0 {
                    RecordError::NotExecutable(format!("{shown}: {e}"))
                } else {
                    RecordError::NotExecutable(format!("{shown}: {}: bad interpreter: {e}", file.display()))
                }
            })?;
        if head[..n].starts_with(b"\x7fELF") {
            return Ok((file, argv0, before));
        }
        let not_exec = || {
            if depth == 0 {
                RecordError::NotExecutable(format!("{shown}: cannot execute binary file: Exec format error"))
            } else {
                RecordError::NotExecutable(format!(
                    "{shown}: {}: bad interpreter: Exec format error",
                    file.display()
                ))
            }
        };
        let (interp, arg) = shebang(&head).ok_or_else(not_exec)?;
        let interp = PathBuf::from(OsStr::from_bytes(&interp));
        if let Err(e) = std::fs::metadata(&interp) {
            return Err(RecordError::NotExecutable(format!(
                "{shown}: {}: bad interpreter: {}",
                interp.display(),
                plain(&e)
            )));
        }
        if !is_executable(&interp) {
            return Err(RecordError::NotExecutable(format!(
                "{shown}: {}: bad interpreter: Permission denied",
                interp.display()
            )));
        }
        // The kernel's new arguments: the interpreter, its argument, the script, and what
        // came after the script.
        let mut args: Vec<OsString> = arg
            .map(|a| OsStr::from_bytes(&a).to_owned())
            .into_iter()
            .collect();
        args.push(file.into_os_string());
        args.append(&mut before);
        before = args;
        argv0 = interp.clone().into_os_string();
        file = interp;
    }
    Err(RecordError::NotExecutable(format!(
        "{shown}: Too many levels of symbolic links"
    )))
}

/// The bytes of a file's start that Linux's exec reads for a `#!` line.
const SHEBANG_BUF: usize = 256;

/// The interpreter and optional argument of a `#!` line in `buf` (a file's first
/// [`SHEBANG_BUF`] bytes, zero past its end), as Linux's binfmt_script parses them: the line
/// ends at the first newline, or where the buffer does if the interpreter's name ends inside
/// it; only spaces and tabs separate (a carriage return is part of the name); the name ends at
/// a space, tab or NUL; the argument is the rest, without the spaces and tabs around it, up to
/// a NUL. `None` where the kernel refuses the file (ENOEXEC).
fn shebang(buf: &[u8; SHEBANG_BUF]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    if !buf.starts_with(b"#!") {
        return None;
    }
    let spacetab = |c: u8| c == b' ' || c == b'\t';
    let last = SHEBANG_BUF - 1;
    let non_spacetab = |from: usize, to: usize| (from..=to).find(|&k| !spacetab(buf[k]));
    let terminator = |from: usize, to: usize| (from..=to).find(|&k| spacetab(buf[k]) || buf[k] == 0);
    let mut end = match buf.iter().position(|&c| c == b'\n') {
        Some(k) => k,
        None => {
            let first = non_spacetab(2, last)?;
            // No later space, tab or NUL: the interpreter's name would be cut.
            terminator(first, last)?;
            last
        }
    };
    while end > 2 && spacetab(buf[end - 1]) {
        end -= 1;
    }
    let name = non_spacetab(2, end).filter(|&k| k != end)?;
    let sep = terminator(name, end);
    let arg = sep.filter(|&k| buf[k] != 0).and_then(|k| non_spacetab(k, end));
    // The kernel puts a NUL at `end` and at the separator: each string stops at its first NUL.
    let cut = |from: usize, to: usize| {
        let s = &buf[from..to];
        s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())].to_vec()
    };
    let name_bytes = cut(name, sep.unwrap_or(end));
    let arg = arg.filter(|&k| k < end).map(|k| cut(k, end));
    Some((name_bytes, arg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &[u8]) -> Option<(String, Option<String>)> {
        let mut buf = [0u8; SHEBANG_BUF];
        let n = text.len().min(SHEBANG_BUF);
        buf[..n].copy_from_slice(&text[..n]);
        shebang(&buf).map(|(i, a)| {
            (
                String::from_utf8(i).unwrap(),
                a.map(|a| String::from_utf8(a).unwrap()),
            )
        })
    }

    /// QE11: a `#!` line as Linux's binfmt_script reads it.
    #[test]
    fn qe11_a_shebang_line_is_parsed_as_the_kernel_parses_it() {
        let s = |i: &str, a: Option<&str>| Some((i.to_owned(), a.map(str::to_owned)));
        assert_eq!(line(b"#!/bin/sh\necho\n"), s("/bin/sh", None));
        assert_eq!(line(b"#!/bin/sh -x\n"), s("/bin/sh", Some("-x")));
        assert_eq!(line(b"#! \t/bin/sh  -a b \t\n"), s("/bin/sh", Some("-a b")));
        // No newline at all: the line is the file.
        assert_eq!(line(b"#!/bin/sh"), s("/bin/sh", None));
        assert_eq!(line(b"#!/bin/sh -e"), s("/bin/sh", Some("-e")));
        // A carriage return is part of the name (the kernel then finds no such file).
        assert_eq!(line(b"#!/bin/echo\r\n"), s("/bin/echo\r", None));
        // A NUL ends the name, and there is no argument.
        assert_eq!(line(b"#!/bin/sh\0 -x\n"), s("/bin/sh", None));
        // No name: refused.
        assert_eq!(line(b"#!\n"), None);
        assert_eq!(line(b"#!   \n"), None);
        assert_eq!(line(b"echo\n"), None);
        // A name that does not end inside the 256 bytes the kernel reads would be cut: refused;
        // one that does keeps its argument up to there.
        let long = [b"#!/".as_slice(), &[b'a'; 300]].concat();
        assert_eq!(line(&long), None);
        let cut = [b"#!/bin/sh ".as_slice(), &[b'b'; 300]].concat();
        assert_eq!(line(&cut), s("/bin/sh", Some(&"b".repeat(SHEBANG_BUF - 11))));
    }
}
