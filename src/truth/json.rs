//! `truth.jsonl` (TR1, TR2): the truth as JSON lines, written by `simulate --truth-format jsonl`
//! and `ptemu truth dump`, read by `verify`.

use super::record::{Branch, BranchKind, Class, Record, Sink};
use super::{Cause, Counts, TruthError};
use std::borrow::Cow;
use std::io::{self, BufRead, Read, Write};

/// The version of the `truth.jsonl` format (TR1). It changes when a field changes meaning.
pub const VERSION: u32 = 2;
/// The oldest version this ptemu still reads (version 1 has no mark records, TR11).
pub const OLDEST: u32 = 1;

/// Appends `v` in decimal.
fn put_dec(b: &mut Vec<u8>, v: u64) {
    let mut tmp = [0u8; 20];
    let mut n = tmp.len();
    let mut v = v;
    loop {
        n -= 1;
        tmp[n] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    b.extend_from_slice(&tmp[n..]);
}

/// Appends `"0x…"`: `v` in lower-case hex, as a JSON string (IPs exceed what a JSON number
/// holds exactly).
fn put_hex(b: &mut Vec<u8>, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut tmp = [0u8; 16];
    let mut n = tmp.len();
    let mut v = v;
    loop {
        n -= 1;
        tmp[n] = DIGITS[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    b.extend_from_slice(b"\"0x");
    b.extend_from_slice(&tmp[n..]);
    b.push(b'"');
}

fn put_off(b: &mut Vec<u8>, off: Option<u64>) {
    match off {
        Some(o) => put_dec(b, o),
        None => b.extend_from_slice(b"null"),
    }
}

/// Writes records as `truth.jsonl` lines.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    line: Vec<u8>,
    /// The blocks runs name (TR15).
    blocks: Vec<crate::tracer::Block>,
}

impl<W: Write> Writer<W> {
    /// A writer to `out` (buffer it).
    pub fn new(out: W) -> Self {
        Writer {
            out,
            line: Vec::with_capacity(256),
            blocks: Vec::new(),
        }
    }
}

/// Appends `r` as its `truth.jsonl` line (with its newline).
pub fn put_record(b: &mut Vec<u8>, r: &Record) {
    match *r {
        Record::Insn {
            i,
            ip,
            branch,
            off,
            class,
        } => {
            b.extend_from_slice(b"{\"k\":\"insn\",\"i\":");
            put_dec(b, i);
            b.extend_from_slice(b",\"ip\":");
            put_hex(b, ip);
            if let Some(br) = branch {
                b.extend_from_slice(b",\"branch\":\"");
                b.extend_from_slice(br.kind.name().as_bytes());
                b.extend_from_slice(b"\",\"to\":");
                put_hex(b, br.to);
                b.extend_from_slice(if br.taken {
                    b",\"taken\":true"
                } else {
                    b",\"taken\":false"
                });
            }
            b.extend_from_slice(b",\"off\":");
            put_off(b, off);
            let (field, cause) = match class {
                Class::Required => ("", None),
                Class::Optional => (",\"opt\":true", None),
                Class::Lost(c) => (",\"lost\":\"", Some(c)),
                Class::Undefined(c) => (",\"undefined\":\"", Some(c)),
            };
            b.extend_from_slice(field.as_bytes());
            if let Some(c) = cause {
                b.extend_from_slice(c.name().as_bytes());
                b.push(b'"');
            }
        }
        Record::Span { cause, first, resume } => {
            b.extend_from_slice(b"{\"k\":\"span\",\"class\":\"");
            b.extend_from_slice(if cause.undefined() { b"undefined" } else { b"lost" });
            b.extend_from_slice(b"\",\"cause\":\"");
            b.extend_from_slice(cause.name().as_bytes());
            b.extend_from_slice(b"\",\"first\":");
            put_dec(b, first);
            b.extend_from_slice(b",\"error\":\"");
            b.extend_from_slice(if cause.error_required() {
                b"required"
            } else {
                b"allowed"
            });
            b.extend_from_slice(b"\",\"resume\":");
            put_off(b, resume);
        }
        Record::Enable { ip, off } => {
            b.extend_from_slice(b"{\"k\":\"enable\",\"ip\":");
            put_hex(b, ip);
            b.extend_from_slice(b",\"off\":");
            put_off(b, off);
        }
        Record::Disable { off } => {
            b.extend_from_slice(b"{\"k\":\"disable\",\"off\":");
            put_off(b, off);
        }
        Record::Async { from, to, off } => {
            b.extend_from_slice(b"{\"k\":\"async\",\"from\":");
            put_hex(b, from);
            b.extend_from_slice(b",\"to\":");
            put_hex(b, to);
            b.extend_from_slice(b",\"off\":");
            put_off(b, off);
        }
        Record::Overflow { off } => {
            b.extend_from_slice(b"{\"k\":\"overflow\",\"off\":");
            put_off(b, off);
        }
        Record::Mark {
            text,
            ip,
            off,
            early,
            restated,
        } => {
            b.extend_from_slice(b"{\"k\":\"mark\",\"event\":");
            b.extend_from_slice(
                serde_json::to_string(text.as_str())
                    .unwrap_or_default()
                    .as_bytes(),
            );
            if let Some(ip) = ip {
                b.extend_from_slice(b",\"ip\":");
                put_hex(b, ip);
            }
            b.extend_from_slice(b",\"off\":");
            put_off(b, off);
            b.extend_from_slice(b",\"early\":");
            put_dec(b, early);
            if restated {
                b.extend_from_slice(b",\"opt\":true");
            }
        }
        Record::Time { tsc, slack, off } => {
            b.extend_from_slice(b"{\"k\":\"time\",\"tsc\":");
            put_hex(b, tsc);
            if slack != 0 {
                b.extend_from_slice(b",\"slack\":");
                put_dec(b, slack);
            }
            b.extend_from_slice(b",\"off\":");
            put_off(b, off);
        }
        Record::End { counts } => {
            b.extend_from_slice(b"{\"k\":\"end\",\"counts\":");
            b.extend_from_slice(serde_json::to_string(&counts).unwrap_or_default().as_bytes());
        }
    }
    b.extend_from_slice(b"}\n");
}

/// `truth.jsonl`'s first line for `header` (its fields, with `"truth"` set to [`VERSION`]).
pub fn header_line(header: &serde_json::Value) -> String {
    let mut h = header.clone();
    if let Some(o) = h.as_object_mut() {
        o.insert("truth".into(), VERSION.into());
    }
    format!("{h}\n")
}

impl<W: Write> Sink for Writer<W> {
    fn header(&mut self, header: &serde_json::Value) -> io::Result<()> {
        self.out.write_all(header_line(header).as_bytes())
    }

    fn block(&mut self, b: &crate::tracer::Block) -> io::Result<()> {
        self.blocks.push(b.clone());
        Ok(())
    }

    /// A run is its instructions' lines (TR15).
    fn run(&mut self, r: &super::record::Run) -> io::Result<()> {
        let b = self.blocks.get(r.block as usize).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("an execution of block {}, not given before it", r.block),
            )
        })?;
        self.line.clear();
        r.each_insn(b, |i| put_record(&mut self.line, &i));
        self.out.write_all(&self.line)
    }

    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.line.clear();
        put_record(&mut self.line, r);
        self.out.write_all(&self.line)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    k: Option<Cow<'a, str>>,
    i: Option<u64>,
    #[serde(borrow)]
    ip: Option<Cow<'a, str>>,
    #[serde(borrow)]
    from: Option<Cow<'a, str>>,
    #[serde(borrow)]
    to: Option<Cow<'a, str>>,
    #[serde(borrow)]
    branch: Option<Cow<'a, str>>,
    taken: Option<bool>,
    off: Option<u64>,
    opt: Option<bool>,
    #[serde(borrow)]
    lost: Option<Cow<'a, str>>,
    #[serde(borrow)]
    undefined: Option<Cow<'a, str>>,
    #[serde(borrow)]
    class: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cause: Option<Cow<'a, str>>,
    #[serde(borrow)]
    error: Option<Cow<'a, str>>,
    first: Option<u64>,
    resume: Option<u64>,
    counts: Option<Counts>,
    #[serde(borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tsc: Option<Cow<'a, str>>,
    slack: Option<u64>,
    early: Option<u64>,
}

/// The longest line read from a truth or a decoder's output (TR8): a longer one is bad input
/// (exit 2 with its line), so a file with no newline (`/dev/zero`) cannot take all memory.
pub const MAX_LINE: usize = 1 << 20;

/// Reads the next line into `buf`, without its `\n` (or `\r\n`); `false` at the end of `r`.
/// A line longer than [`MAX_LINE`] is an `InvalidData` error.
pub fn next_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    if r.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', buf)? == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    } else if buf.len() > MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line longer than {MAX_LINE} bytes"),
        ));
    }
    Ok(true)
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Reads a whole `truth.jsonl` (named `file` in messages) into `sink` (TR1): the header on line
/// 1, the records, the `end` record last, whose counts must be those of the lines before it, so a
/// file cut short is refused rather than judged on its first part.
pub fn read(file: &str, mut r: impl BufRead, sink: &mut dyn Sink) -> Result<Counts, TruthError> {
    let err = |line: usize, msg: String| TruthError {
        file: file.to_owned(),
        line,
        byte: None,
        msg,
    };
    let io_err = |line: usize, e: io::Error| err(line, e.to_string());
    let mut seen = Counts::default();
    let mut end = None;
    let mut buf = Vec::with_capacity(256);
    let mut n = 0;
    loop {
        n += 1;
        if !next_line(&mut r, &mut buf).map_err(|e| io_err(n, e))? {
            break;
        }
        if buf.trim_ascii().is_empty() {
            if n == 1 {
                return Err(err(
                    n,
                    "not a truth file: a blank line, not the {\"truth\": version} header".into(),
                ));
            }
            continue;
        }
        if let Some(e) = end {
            return Err(err(n, format!("a line after the end record (line {e})")));
        }
        if n == 1 {
            let h: serde_json::Value = serde_json::from_slice(&buf).map_err(|e| err(n, e.to_string()))?;
            match h.get("truth").and_then(serde_json::Value::as_u64) {
                Some(v) if (u64::from(OLDEST)..=u64::from(VERSION)).contains(&v) => {}
                Some(v) => {
                    return Err(err(
                        n,
                        format!("truth format {v}; this ptemu reads {OLDEST} to {VERSION}"),
                    ))
                }
                None => return Err(err(n, "not a truth file: no {\"truth\": version} header".into())),
            }
            sink.header(&h).map_err(|e| io_err(n, e))?;
            continue;
        }
        let l: Line = serde_json::from_slice(&buf).map_err(|e| err(n, e.to_string()))?;
        let hex = |s: &Option<Cow<str>>, what: &str| {
            s.as_deref()
                .and_then(parse_hex)
                .ok_or_else(|| err(n, format!("no 0x-hex \"{what}\"")))
        };
        let cause_of = |s: &str| Cause::from_name(s).ok_or_else(|| err(n, format!("unknown cause {s:?}")));
        let record = match l.k.as_deref() {
            Some("insn") => {
                if l.i.is_some_and(|i| i != seen.instructions) {
                    return Err(err(
                        n,
                        format!(
                            "instruction \"i\" {}, expected {}",
                            l.i.unwrap_or(0),
                            seen.instructions
                        ),
                    ));
                }
                let class = match (l.opt, &l.lost, &l.undefined) {
                    (Some(true), None, None) => Class::Optional,
                    (None | Some(false), None, None) => Class::Required,
                    (None | Some(false), Some(c), None) => Class::Lost(cause_of(c)?),
                    (None | Some(false), None, Some(c)) => Class::Undefined(cause_of(c)?),
                    _ => return Err(err(n, "an instruction in more than one class".into())),
                };
                let branch = match &l.branch {
                    None => None,
                    Some(k) => {
                        let kind = BranchKind::from_name(k)
                            .ok_or_else(|| err(n, format!("unknown branch {k:?}")))?;
                        let taken = l.taken.unwrap_or(true);
                        if !taken && kind != BranchKind::Cond {
                            return Err(err(n, format!("a {k} branch not taken (only cond may be)")));
                        }
                        Some(Branch {
                            kind,
                            to: hex(&l.to, "to")?,
                            taken,
                        })
                    }
                };
                Record::Insn {
                    i: seen.instructions,
                    ip: hex(&l.ip, "ip")?,
                    branch,
                    off: l.off,
                    class,
                }
            }
            Some("span") => {
                let cause = cause_of(l.cause.as_deref().unwrap_or(""))?;
                let class = if cause.undefined() { "undefined" } else { "lost" };
                let error = if cause.error_required() {
                    "required"
                } else {
                    "allowed"
                };
                if l.class.as_deref().is_some_and(|c| c != class)
                    || l.error.as_deref().is_some_and(|e| e != error)
                {
                    return Err(err(
                        n,
                        format!(
                            "a {} span is \"class\":\"{class}\", \"error\":\"{error}\"",
                            cause.name()
                        ),
                    ));
                }
                Record::Span {
                    cause,
                    first: l.first.unwrap_or(seen.instructions),
                    resume: l.resume,
                }
            }
            Some("enable") => Record::Enable {
                ip: hex(&l.ip, "ip")?,
                off: l.off,
            },
            Some("disable") => Record::Disable { off: l.off },
            Some("async") => Record::Async {
                from: hex(&l.from, "from")?,
                to: hex(&l.to, "to")?,
                off: l.off,
            },
            Some("overflow") => Record::Overflow { off: l.off },
            Some("time") => Record::Time {
                tsc: hex(&l.tsc, "tsc")?,
                slack: l.slack.unwrap_or(0),
                off: l.off,
            },
            Some("mark") => Record::Mark {
                text: l
                    .event
                    .as_deref()
                    .and_then(super::mark::Text::new)
                    .ok_or_else(|| {
                        err(
                            n,
                            format!(
                                "a mark without \"event\" words of at most {} bytes",
                                super::mark::Text::MAX
                            ),
                        )
                    })?,
                ip: match &l.ip {
                    None => None,
                    Some(_) => Some(hex(&l.ip, "ip")?),
                },
                off: l.off,
                early: l.early.unwrap_or(0),
                restated: l.opt.unwrap_or(false),
            },
            Some("end") => {
                let c = l
                    .counts
                    .ok_or_else(|| err(n, "an end record without \"counts\"".into()))?;
                if let Some((what, said, has)) = c.first_difference(&seen) {
                    return Err(err(
                        n,
                        format!("the end record counts {said} {what}(s), the lines before it have {has}"),
                    ));
                }
                end = Some(n);
                Record::End { counts: c }
            }
            // Kinds of record a later ptemu may add within the version (TR1): not this one's.
            Some(_) => continue,
            None => return Err(err(n, "a line without \"k\"".into())),
        };
        seen.add(&record);
        sink.record(&record).map_err(|e| io_err(n, e))?;
    }
    if n == 1 {
        return Err(err(1, "empty: no header".into()));
    }
    if end.is_none() {
        return Err(err(
            n - 1,
            "the file ends without its {\"k\":\"end\"} record: cut short?".into(),
        ));
    }
    sink.finish().map_err(|e| io_err(n, e))?;
    Ok(seen)
}

/// Writes a `truth.bin` that [`super::compact::Bytes::check`] found whole (`checked`) as
/// `truth.jsonl` (`ptemu truth dump`), record by record, in bounded memory (a mapped file's pages
/// are let go once read).
pub fn from_compact(
    truth: &super::compact::Bytes,
    checked: &super::compact::Checked,
    out: &mut dyn Write,
) -> io::Result<()> {
    let invalid = |e: super::compact::FormatError| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let mut w = Writer::new(out);
    w.header(&checked.header)?;
    let mut d = checked.decoder(truth.get());
    let mut n = 0u32;
    let mut released = checked.start;
    while let Some((_, r)) = d.next_record().map_err(invalid)? {
        w.record(&r)?;
        n = n.wrapping_add(1);
        if n.is_multiple_of(1 << 20) {
            let pos = super::compact::byte_of(d.pos());
            truth.release(released, pos);
            released = pos;
        }
    }
    w.finish()
}
