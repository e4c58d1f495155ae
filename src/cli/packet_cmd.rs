//! `ptemu dump` and `ptemu asm`.

use super::output::{is_std, stdout_is_open, write_failure, write_output};
use super::sideband_args::SidebandArgs;
use super::Failure;
use ptemu::packet::text::{parse_line, push_hex16, push_text, ParseState};
use ptemu::packet::PacketDecoder;
use ptemu::ptdump::sideband::{Pevent, PrintFlags, Session};
use ptemu::ptdump::{self, time::TimeConfig};
use ptemu::pttc::Cpu;
use ptemu::sources::input::WholeFile;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

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

/// The text `ptemu dump` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpFormat {
    /// ptemu's text form (what `ptemu asm` reads back).
    Text,
    /// JSON lines (as `--json`).
    Json,
    /// What libipt's ptdump prints (spec/pttc.md, "ptdump's text").
    Ptdump,
}

/// A number as ptdump reads its option values (C's `strtoull`, base 0: decimal, `0x` hex, `0`
/// octal).
pub(super) fn c_number(s: &str) -> Result<u64, String> {
    let bad = || format!("not a number: '{s}'");
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    u64::from_str_radix(digits, radix).map_err(|_| format!("value too big: '{s}'"))
}

fn c_u8(s: &str) -> Result<u8, String> {
    u8::try_from(c_number(s)?).map_err(|_| format!("value too big: '{s}'"))
}

fn c_u32(s: &str) -> Result<u32, String> {
    u32::try_from(c_number(s)?).map_err(|_| format!("value too big: '{s}'"))
}

/// `ptemu dump`'s arguments.
#[derive(clap::Args)]
pub struct DumpArgs {
    /// Trace file ("-" for stdin).
    file: PathBuf,
    /// The output: ptemu's text form (default), JSON lines, or libipt's ptdump text.
    #[arg(long, value_enum, default_value_t = DumpFormat::Text)]
    format: DumpFormat,
    /// JSON lines instead of text (same as --format json).
    #[arg(long)]
    json: bool,
    /// Show the IP each TIP/FUP/TIP.PGE/TIP.PGD stands for (last-IP reconstruction).
    #[arg(long)]
    lastip: bool,
    /// Decode from byte 0 instead of from the first PSB.
    #[arg(long)]
    no_sync: bool,
    /// ptdump: no offset column.
    #[arg(long, help_heading = "ptdump format")]
    no_offset: bool,
    /// ptdump: the packet's bytes in hex.
    #[arg(long, help_heading = "ptdump format")]
    raw: bool,
    /// ptdump: the execution mode at MODE.Exec.
    #[arg(long, help_heading = "ptdump format")]
    exec_mode: bool,
    /// ptdump: the estimated TSC at timing packets.
    #[arg(long, help_heading = "ptdump format", conflicts_with = "tcal")]
    time: bool,
    /// ptdump: the CYC calibration at timing packets.
    #[arg(long, help_heading = "ptdump format")]
    tcal: bool,
    /// ptdump: time and calibration as the change since the last one.
    #[arg(long, help_heading = "ptdump format")]
    time_delta: bool,
    /// ptdump: do not calibrate (CYCs then have no time).
    #[arg(long, help_heading = "ptdump format")]
    no_tcal: bool,
    /// ptdump: no error for time before the first TSC; count from 0.
    #[arg(long, help_heading = "ptdump format")]
    no_wall_clock: bool,
    /// ptdump: keep the calibration across an OVF.
    #[arg(long, help_heading = "ptdump format")]
    keep_tcal_on_ovf: bool,
    /// ptdump: hide PADs.
    #[arg(long, help_heading = "ptdump format")]
    no_pad: bool,
    /// ptdump: hide timing packets.
    #[arg(long, help_heading = "ptdump format")]
    no_timing: bool,
    /// ptdump: hide CYCs and leave them out of time.
    #[arg(long, help_heading = "ptdump format")]
    no_cyc: bool,
    /// ptdump: print the diagnostics only.
    #[arg(long, help_heading = "ptdump format")]
    quiet: bool,
    /// ptdump: the CPU as family/model[/stepping], whose errata libipt applies, or `none`.
    #[arg(long, value_name = "f/m[/s]|none", help_heading = "ptdump format")]
    cpu: Option<String>,
    /// ptdump: IA32_RTIT_CTL.MTCFreq.
    #[arg(long, value_name = "N", value_parser = c_u8, help_heading = "ptdump format")]
    mtc_freq: Option<u8>,
    /// ptdump: the nominal frequency ratio (MSR_PLATFORM_INFO[15:8]).
    #[arg(long, value_name = "N", value_parser = c_u8, help_heading = "ptdump format")]
    nom_freq: Option<u8>,
    /// ptdump: CPUID.15H:EAX.
    #[arg(long = "cpuid-0x15.eax", value_name = "N", value_parser = c_u32, help_heading = "ptdump format")]
    cpuid_15_eax: Option<u32>,
    /// ptdump: CPUID.15H:EBX.
    #[arg(long = "cpuid-0x15.ebx", value_name = "N", value_parser = c_u32, help_heading = "ptdump format")]
    cpuid_15_ebx: Option<u32>,
    /// ptdump's sideband options (`--pevent:*`, `--sb:*`).
    #[command(flatten)]
    sb: SidebandArgs,
}

/// `ptemu dump` with its arguments.
pub fn dump_command(a: &DumpArgs) -> Result<(), Failure> {
    if a.format != DumpFormat::Ptdump {
        let ptdump_only = a.no_offset
            || a.raw
            || a.exec_mode
            || a.time
            || a.tcal
            || a.time_delta
            || a.no_tcal
            || a.no_wall_clock
            || a.keep_tcal_on_ovf
            || a.no_pad
            || a.no_timing
            || a.no_cyc
            || a.quiet
            || a.cpu.is_some()
            || a.mtc_freq.is_some()
            || a.nom_freq.is_some()
            || a.cpuid_15_eax.is_some()
            || a.cpuid_15_ebx.is_some()
            || a.sb.any;
        if ptdump_only {
            return Err(Failure::input("this option needs --format ptdump".to_string()));
        }
        return dump(
            &a.file,
            a.json || a.format == DumpFormat::Json,
            a.lastip,
            a.no_sync,
        );
    }
    if a.json {
        return Err(Failure::input(
            "--json and --format ptdump exclude each other".to_string(),
        ));
    }
    let cpu = match a.cpu.as_deref() {
        None | Some("none") => None,
        Some(c) => Some(Cpu::parse(c).map_err(Failure::input)?),
    };
    let o = ptdump::Options {
        show_offset: !a.no_offset,
        raw: a.raw,
        lastip: a.lastip,
        exec_mode: a.exec_mode,
        time: a.time,
        tcal: a.tcal,
        time_delta: a.time_delta,
        no_tcal: a.no_tcal,
        no_wall_clock: a.no_wall_clock,
        keep_tcal_on_ovf: a.keep_tcal_on_ovf,
        no_pad: a.no_pad,
        no_timing: a.no_timing,
        no_cyc: a.no_cyc,
        quiet: a.quiet,
        no_sync: a.no_sync,
        cpu,
        timing: TimeConfig {
            mtc_freq: a.mtc_freq.unwrap_or(0),
            nom_freq: a.nom_freq.unwrap_or(0),
            cpuid_15_eax: a.cpuid_15_eax.unwrap_or(0),
            cpuid_15_ebx: a.cpuid_15_ebx.unwrap_or(0),
            skl168: false,
        },
    };
    let mut sb = sideband(&a.sb, a.quiet)?;
    stdout_is_open()?;
    let input = open(&a.file)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let summary = ptdump::dump_with_sideband(input.bytes(), &o, &mut sb, &mut out)
        .and_then(|s| out.flush().map(|()| s))
        .map_err(|e| write_failure("stdout", e))?;
    unchanged(&input, &a.file)?;
    sb.finish().map_err(|e| Failure::input(e.to_string()))?;
    if summary.decode_errors > 0 {
        return Err(Failure::found(format!(
            "{}: {} decode error(s)",
            a.file.display(),
            summary.decode_errors
        )));
    }
    Ok(())
}

/// The sideband files read, every record checked before anything is printed: a file that cannot
/// be read or holds bytes that are not records is exit 2 naming it (and the byte offset).
/// `--quiet` prints no records (ptdump clears the `--sb` flags given before it; ptemu, which
/// does not keep that order, clears them all). A regular file stays open, its records read
/// again a window at a time as the dump reaches them (so the descriptor limit is raised to
/// hold one per file); stdin and pipes are held in memory.
fn sideband(a: &SidebandArgs, quiet: bool) -> Result<Session, Failure> {
    room_for_descriptors(a.files.len());
    let mut files = Vec::new();
    for f in &a.files {
        let name = f.path.display().to_string();
        let regular = !is_std(&f.path) && std::fs::metadata(&f.path).is_ok_and(|m| m.is_file());
        let p = if regular {
            let file = std::fs::File::open(&f.path)
                .map_err(|e| Failure::input(format!("{name}: cannot read: {e}")))?;
            Pevent::open(&name, file, &f.config)
        } else {
            let input = open(&f.path)?;
            let p = Pevent::read(&name, input.bytes(), &f.config);
            unchanged(&input, &f.path)?;
            p
        };
        files.push(p.map_err(|e| Failure::input(e.to_string()))?);
    }
    let flags = if quiet { PrintFlags::default() } else { a.flags };
    Ok(Session::new(files, flags))
}

/// Raises the soft limit on open descriptors (up to the hard one) so that `files` sideband
/// files can stay open beside the trace and the standard ones; a limit that cannot be raised
/// is left, and opening past it names the file.
fn room_for_descriptors(files: usize) {
    let want = files as u64 + 64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`, which lives across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 || lim.rlim_cur >= want {
        return;
    }
    lim.rlim_cur = want.min(lim.rlim_max);
    // SAFETY: setrlimit reads one rlimit from `lim`; lowering nothing, it changes only this limit.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

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

/// `ptemu asm`: streams, a line at a time, so memory stays bounded whatever the input's size
/// (a 608 MB text used to be held whole). The bytes go to a temporary file beside the output,
/// renamed over it once every line assembled (an error leaves no output file), or to stdout for
/// `-` as they are made.
pub fn asm(path: &Path, output: &Path) -> Result<(), Failure> {
    if is_std(output) {
        stdout_is_open()?;
    }
    let name = if is_std(path) {
        "stdin".into()
    } else {
        path.display().to_string()
    };
    let cannot_read = |e: io::Error| Failure::input(format!("{name}: cannot read: {e}"));
    let mut input: Box<dyn io::BufRead> = if is_std(path) {
        Box::new(io::BufReader::with_capacity(1 << 16, io::stdin().lock()))
    } else {
        Box::new(io::BufReader::with_capacity(
            1 << 16,
            std::fs::File::open(path).map_err(cannot_read)?,
        ))
    };
    // An error in the input, set where assembling stops (the write is then abandoned).
    let mut failed: Option<Failure> = None;
    let written = write_output(output, |w| {
        let mut line = Vec::new();
        let mut bytes = Vec::new();
        let mut st = ParseState::default();
        let mut at = 0usize;
        let mut n = 0usize;
        let mut stop = |f: Failure| {
            failed = Some(f);
            io::Error::other("the input has an error")
        };
        loop {
            line.clear();
            let got = loop {
                match input.read_until(b'\n', &mut line) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            };
            let got = got.map_err(|e| stop(cannot_read(e)))?;
            if got == 0 {
                return Ok(());
            }
            n += 1;
            // Lines as `str::lines` cuts them: at `\n`, a `\r` before it dropped.
            let mut text = &line[..];
            if let Some(t) = text.strip_suffix(b"\n") {
                text = t.strip_suffix(b"\r").unwrap_or(t);
            }
            let text = std::str::from_utf8(text).map_err(|e| {
                stop(Failure::input(format!(
                    "{}: not UTF-8 text at byte {}",
                    path.display(),
                    at + e.valid_up_to()
                )))
            })?;
            at += got;
            let located = |e: &dyn std::fmt::Display| Failure::input(format!("{}:{n}: {e}", path.display()));
            match parse_line(text, &mut st) {
                Ok(Some(p)) => {
                    bytes.clear();
                    p.encode_to_vec(&mut bytes).map_err(|e| stop(located(&e)))?;
                    w.write_all(&bytes)?;
                }
                Ok(None) => {}
                Err(e) => return Err(stop(located(&e))),
            }
        }
    });
    match (written, failed) {
        (_, Some(f)) => Err(f),
        (r, None) => r,
    }
}
