//! `ptemu dump` and `ptemu asm`.

use super::output::{is_std, stdout_is_open, write_failure, write_output};
use super::Failure;
use ptemu::packet::text::{parse_line, push_hex16, push_text, ParseState};
use ptemu::packet::PacketDecoder;
use ptemu::sources::input::WholeFile;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The bytes of `path` (`-` = stdin): see [`WholeFile`].
pub(super) fn open(path: &Path) -> Result<WholeFile, Failure> {
    let name = if is_std(path) {
        "stdin".into()
    } else {
        path.display().to_string()
    };
    WholeFile::open(path).map_err(|e| Failure::input(format!("{name}: cannot read: {e}")))
}

/// A file that changed under its map is an error naming it.
pub(super) fn unchanged(input: &WholeFile, path: &Path) -> Result<(), Failure> {
    input
        .changed()
        .map_err(|e| Failure::input(format!("{}: {e}", path.display())))
}

/// Text `dump` gathers before writing it out.
const TEXT_FLUSH: usize = 64 << 10;

/// `ptemu dump`.
pub fn dump(path: &Path, json: bool, lastip: bool, no_sync: bool) -> Result<(), Failure> {
    stdout_is_open()?;
    let input = open(path)?;
    let data = input.bytes();
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let io_err = |e: io::Error| write_failure("stdout", e);
    let mut d = PacketDecoder::new(data, 0);
    let mut errors = 0u64;
    let mut text = String::with_capacity(TEXT_FLUSH + 256);
    if !no_sync && !d.sync_forward() {
        if json {
            let note = serde_json::json!({"offset": 0, "skipped": data.len(), "note": "no PSB; use --no-sync to decode from byte 0"});
            writeln!(out, "{note}")
        } else {
            writeln!(
                out,
                "[no PSB in {} bytes; use --no-sync to decode from byte 0]",
                data.len()
            )
        }
        .map_err(io_err)?;
        out.flush().map_err(io_err)?;
        unchanged(&input, path)?;
        // Bytes that hold no PSB decoded to nothing: a failure (exit 1), as bad bytes are. An
        // empty file is an empty trace.
        if data.is_empty() {
            return Ok(());
        }
        return Err(Failure::found(format!(
            "{}: no PSB in {} bytes, nothing decoded (--no-sync decodes from byte 0)",
            path.display(),
            data.len()
        )));
    }
    if !no_sync && d.offset() > 0 {
        if json {
            let note =
                serde_json::json!({"offset": 0, "skipped": d.offset(), "note": "bytes before the first PSB"});
            writeln!(out, "{note}")
        } else {
            writeln!(out, "[{} bytes before the first PSB skipped]", d.offset())
        }
        .map_err(io_err)?;
    }
    while let Some(r) = d.next_packet() {
        match r {
            Ok((offset, p)) => {
                let ip = if lastip && p.ip_payload().is_some_and(|i| i.ipc as u8 != 0) {
                    Some(d.last_ip().get())
                } else {
                    None
                };
                if json {
                    let mut v = serde_json::to_value(p).expect("packets serialize");
                    let obj = v.as_object_mut().expect("packets serialize as objects");
                    obj.insert("offset".into(), offset.into());
                    if let Some(ip) = ip {
                        obj.insert("ip".into(), ip.into());
                    }
                    writeln!(out, "{v}").map_err(io_err)?;
                } else {
                    // By hand into one reused buffer: the formatting machinery and a String per
                    // line cost more than decoding (issue 29).
                    push_hex16(&mut text, offset);
                    text.push_str("  ");
                    push_text(&p, &mut text);
                    if let Some(ip) = ip {
                        text.push_str("  # ip 0x");
                        push_hex16(&mut text, ip);
                    }
                    text.push('\n');
                    if text.len() >= TEXT_FLUSH {
                        out.write_all(text.as_bytes()).map_err(io_err)?;
                        text.clear();
                    }
                }
            }
            Err(e) => {
                errors += 1;
                out.write_all(text.as_bytes()).map_err(io_err)?;
                text.clear();
                if json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({"offset": e.offset, "error": e.to_string()})
                    )
                    .map_err(io_err)?;
                } else {
                    writeln!(out, "{:016x}  [error {e}]", e.offset).map_err(io_err)?;
                }
                if !d.resync() {
                    break;
                }
                if !json {
                    writeln!(out, "[resynced at {:016x}]", d.offset()).map_err(io_err)?;
                }
            }
        }
    }
    out.write_all(text.as_bytes()).map_err(io_err)?;
    out.flush().map_err(io_err)?;
    unchanged(&input, path)?;
    if errors > 0 {
        return Err(Failure::found(format!(
            "{}: {errors} decode error(s)",
            path.display()
        )));
    }
    Ok(())
}

/// `ptemu asm`.
pub fn asm(path: &Path, output: &Path) -> Result<(), Failure> {
    if is_std(output) {
        stdout_is_open()?;
    }
    let input = open(path)?;
    let text = std::str::from_utf8(input.bytes()).map_err(|e| {
        Failure::input(format!(
            "{}: not UTF-8 text at byte {}",
            path.display(),
            e.valid_up_to()
        ))
    })?;
    let mut bytes = Vec::new();
    let mut st = ParseState::default();
    for (i, line) in text.lines().enumerate() {
        match parse_line(line, &mut st) {
            Ok(Some(p)) => {
                p.encode_to_vec(&mut bytes)
                    .map_err(|e| Failure::input(format!("{}:{}: {e}", path.display(), i + 1)))?;
            }
            Ok(None) => {}
            Err(e) => return Err(Failure::input(format!("{}:{}: {e}", path.display(), i + 1))),
        }
    }
    unchanged(&input, path)?;
    write_output(output, |w| w.write_all(&bytes))
}
