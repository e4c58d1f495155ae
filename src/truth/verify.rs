//! `ptemu verify`: checks a decoder's instruction output against a case's `truth.jsonl`
//! (`spec/truth.md`, TR8).
//!
//! The truth becomes a pattern: required IPs, runs of optional IPs a decoder may stop inside
//! (TR3), lost spans where it may only report errors (TR4; at least one for a `corrupt` span,
//! TR6), undefined spans where anything goes (TR5). The decoder's lines are matched against it by
//! following every way the pattern allows at once (a set of positions), so an undefined span
//! never makes the check guess where the decoder came back. With `--events` ([`Options`]) the
//! truth's enables, disables, asynchronous transfers and overflows are items too, matched by
//! ptxed's event lines (TR10).
//!
//! Cost: a way that reached an undefined span stays there for every line after (anything goes
//! there), so it makes every way before it redundant: whatever output they accept, it accepts
//! too. The check drops them, so at most one undefined span is carried at a time and the work
//! is linear in the lines, but for ways that keep matching what follows that span from many
//! starting lines (a loop repeated right after it), each followed until it fails.

use super::compact::{self, Bytes, Decoder};
use super::mark::{pwre_words, pwrx_words, Text};
use super::record::{Class, Record};
use super::Cause;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use super::json::next_line;
pub use super::json::MAX_LINE;

mod walk;

/// One line of a decoder's output that matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// An instruction at this IP.
    Ip(u64),
    /// The decoder reported an error.
    Error,
    /// The decoder reported an event (TR10; matched only with `--events`).
    Event(Event),
    /// The decoder reported an event of a packet that does not move the flow (TR11: `[ptwrite:
    /// …]`, `[exec mode: …]`, …; matched only with `--events`, by [`mark_line`]).
    Mark,
}

/// What kind of event a decoder reported, in ptxed's words (TR10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `[enabled]` or `[resumed]`: tracing (re)starts (TIP.PGE).
    Enabled,
    /// `[disabled]`: tracing stops (TIP.PGD; ptxed prints libipt's asynchronous disable the same).
    Disabled,
    /// `[interrupt]`: an asynchronous branch (FUP + TIP: an interrupt, exception or VM exit).
    Interrupt,
    /// `[overflow]`: the trace unit overflowed (OVF).
    Overflow,
}

impl EventKind {
    /// Its word in a decoder's output (ptxed's).
    pub fn word(self) -> &'static str {
        match self {
            EventKind::Enabled => "enabled",
            EventKind::Disabled => "disabled",
            EventKind::Interrupt => "interrupt",
            EventKind::Overflow => "overflow",
        }
    }
}

/// An event line (TR10): its kind and the IPs it carries, if any (ptxed's `--event:ip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// `ip:` of `[enabled]`, `from:` of `[interrupt]`; `None` when not printed (the IPs of
    /// `[disabled]` and `[overflow]` are not checked: the truth does not hold them).
    pub ip: Option<u64>,
    /// `to:` of `[interrupt]`, if printed.
    pub to: Option<u64>,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}", self.kind.word())?;
        let first = if self.kind == EventKind::Interrupt {
            "from"
        } else {
            "ip"
        };
        if let Some(ip) = self.ip {
            write!(f, ", {first}: {ip:#x}")?;
        }
        if let Some(to) = self.to {
            write!(f, ", to: {to:#x}")?;
        }
        write!(f, "]")
    }
}

/// An event line of ptxed's (TR10): `[` then, optionally, 16-digit hex words (ptxed's
/// `--offset` and `--event:time` columns), the event's word (`enabled`, `resumed`, `disabled`,
/// `interrupt`, `overflow`), then `, key: hex` fields (`ip`, `from`, `to`, `at`) and `]`. Any other
/// bracketed line (`[end of trace]`, `[paging, …]`, `[exec mode: …]`) is not an event here.
fn event_line(rest: &[u8]) -> Option<Event> {
    let inner = rest.strip_prefix(b"[")?;
    let inner = &inner[..inner.iter().position(|&b| b == b']')?];
    let inner = std::str::from_utf8(inner).ok()?;
    let mut parts = inner.split(',');
    let mut words = parts.next()?.split_ascii_whitespace().rev();
    let kind = match words.next()? {
        "enabled" | "resumed" => EventKind::Enabled,
        "disabled" => EventKind::Disabled,
        "interrupt" => EventKind::Interrupt,
        "overflow" => EventKind::Overflow,
        _ => return None,
    };
    if !words.all(|w| w.len() == 16 && w.bytes().all(|b| b.is_ascii_hexdigit())) {
        return None;
    }
    let mut ev = Event {
        kind,
        ip: None,
        to: None,
    };
    for part in parts {
        let (key, value) = part.split_once(':')?;
        let value = value.trim();
        let value = value.strip_prefix("0x").unwrap_or(value);
        let value = u64::from_str_radix(value, 16).ok()?;
        match (kind, key.trim()) {
            (EventKind::Enabled, "ip") | (EventKind::Interrupt, "from") => ev.ip = Some(value),
            (EventKind::Interrupt, "to") => ev.to = Some(value),
            _ => {}
        }
    }
    Some(ev)
}

/// Lines in ptxed's brackets that are not events: the end of its output.
const NOT_MARKS: [&str; 1] = ["end of trace"];

/// A mark line of ptxed's (TR11): `[`, optionally 16-digit hex columns (`--offset`,
/// `--event:time`), the event's words, optionally `, ip: hex` (also `at`, `from`, `to`), `]`.
/// Returns the words (the fields but the IP ones, joined by `, `, into a borrowed slice when
/// there is no IP field in the middle) and the IP.
pub fn mark_line(rest: &[u8]) -> Option<(std::borrow::Cow<'_, str>, Option<u64>)> {
    let inner = rest.strip_prefix(b"[")?;
    let inner = &inner[..inner.iter().position(|&b| b == b']')?];
    let mut inner = std::str::from_utf8(inner).ok()?.trim();
    // ptxed's optional hex columns before the words.
    while let Some((w, tail)) = inner.split_once(' ') {
        if w.len() == 16 && w.bytes().all(|b| b.is_ascii_hexdigit()) {
            inner = tail.trim_start();
        } else {
            break;
        }
    }
    if inner.is_empty() || NOT_MARKS.contains(&inner) {
        return None;
    }
    let mut ip = None;
    let mut words: Option<std::borrow::Cow<'_, str>> = None;
    for part in inner.split(", ") {
        let as_ip = part.split_once(": ").and_then(|(k, v)| {
            matches!(k, "ip" | "at" | "from" | "to")
                .then(|| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())?
        });
        match as_ip {
            Some(v) => ip = ip.or(Some(v)),
            None => {
                words = Some(match words {
                    None => std::borrow::Cow::Borrowed(part),
                    Some(w) => std::borrow::Cow::Owned(format!("{w}, {part}")),
                })
            }
        }
    }
    Some((words?, ip))
}

/// Reads one line of decoder output (TR8): a first whitespace-separated word that is an IP is
/// an instruction; a first word `error`, or a ptxed error line (`[offset, ip: error: ...]`), an
/// error; a ptxed event line (`[enabled, ip: …]`, `[interrupt]`, …: [`EventKind`]) an event
/// (TR10); anything else is ignored. The first word is an IP when it is
///
/// 1. `0x` or `0X` and 1 to 16 hex digits (what users write; `examples/libipt_decode.rs`
///    prints `{:#x}`); or, without `0x`, 1 to 16 hex digits that are
/// 2. exactly 16 digits (ptxed's zero-padded `%016` form, and any 64-bit address in full); or
/// 3. any length with at least one decimal digit `0`–`9` (`401000`); or
/// 4. right-aligned in perf script's 16-column field: only spaces before it, at least one, and
///    the word ends at column 16 or later (`"          abcdef"`, `-F ip`'s `%16` form).
///
/// So a bare English word made of the letters a–f (`bad`, `add`, `face`, `deadbeef`) at the
/// start of a line is not an instruction: an address made only of those letters is written
/// with `0x`, zero-padded to 16 digits, or right-aligned as perf prints it.
pub fn token(line: &str) -> Option<Token> {
    token_bytes(line.as_bytes())
}

/// [`token`] over raw bytes: a line need not be UTF-8 (a symbol name in another encoding); only
/// its ASCII words are looked at.
pub fn token_bytes(line: &[u8]) -> Option<Token> {
    token_after_time(line, true)
}

/// A line's first word (up to whitespace), if it has one.
fn first_word(line: &[u8]) -> Option<&[u8]> {
    let rest = line.trim_ascii_start();
    let end = rest
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// [`token_bytes`]; `time`: a perf time column may come first (skipped once, not again).
fn token_after_time(line: &[u8], time: bool) -> Option<Token> {
    let contains = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
    let rest = line.trim_ascii_start();
    let first = first_word(rest)?;
    if first.eq_ignore_ascii_case(b"error") || first.eq_ignore_ascii_case(b"error:") {
        return Some(Token::Error);
    }
    // perf script's time column (`-F time,ip`: `1.789569706:`) before the rest of the line:
    // the rest is read (once: a second time word is not skipped).
    if time && perf_time_ns(first).is_some() {
        return token_after_time(&rest[first.len()..], false);
    }
    // ptxed's `? ` before a speculative instruction (TSX): the IP follows.
    if first == b"?" {
        let rest = &rest[1..];
        let word = first_word(rest)?;
        return ip_word(b"", word).map(Token::Ip);
    }
    if first.starts_with(b"[") {
        // `[offset, ip: error: …]`, and ptxed's `sync error`, `resync error`, … .
        if contains(b": error") || contains(b" error: ") {
            return Some(Token::Error);
        }
        return event_line(rest)
            .map(Token::Event)
            .or_else(|| mark_line(rest).map(|_| Token::Mark));
    }
    // perf script's `--itrace=e` lines: " instruction trace error type 1 ...".
    if first == b"instruction" && contains(b"instruction trace error") {
        return Some(Token::Error);
    }
    if perf_summary(line) {
        return None;
    }
    // perf script with `-F event,…`: the event's name first (`instructions:u:`), then the IP;
    // a synthesized event of a mark (`ptwrite:`, `pwre:`, …, TR11).
    if let Some(name) = perf_event_name(first) {
        if name == "instructions" {
            return first_word(&rest[first.len()..]).and_then(hex_word).map(Token::Ip);
        }
        return perf_mark(rest).map(|_| Token::Mark);
    }
    ip_word(&line[..line.len() - rest.len()], first).map(Token::Ip)
}

/// The name of a perf script event field (`instructions:u:` is `instructions`), if `word` is
/// one: letters, `-` and `_`, then modifiers, ending with `:`.
fn perf_event_name(word: &[u8]) -> Option<&str> {
    let w = std::str::from_utf8(word.strip_suffix(b":")?).ok()?;
    let name = w.split(':').next()?;
    (!name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'-' || b == b'_'))
    .then_some(name)
}

/// 1 to 16 hex digits, with or without `0x`.
fn hex_word(word: &[u8]) -> Option<u64> {
    let digits = word.strip_prefix(b"0x").unwrap_or(word);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// The marks perf script synthesizes (`--itrace=pw`, TR11): their event names.
pub const PERF_MARKS: [&str; 6] = ["ptwrite", "pwre", "pwrx", "exstop", "mwait", "cbr"];

/// A perf script line of a synthesized event (`-F event,ip,synth`) as a mark: its words as
/// ptxed's (TR11) and the sample's IP (the last word). `ptwrite:  IP: 0 payload: 0x1002  c0100000`
/// is `ptwrite: 1002`; `pwre:  hw: 0 cstate: 1 sub-cstate: 0` is `pwre c1.0`; `pwrx:  deepest
/// cstate: 0 last cstate: 1 wake reason: 0x1` is `pwrx int: c1 (c0)`; `exstop:  IP: 1` is
/// `exstop`; `mwait:  hints: 0x50 extensions: 0x1` is `mwait 50 1`; `cbr:  cbr: 36 freq: …` is
/// `cbr: 24` (perf prints the ratio in decimal).
pub fn perf_mark(rest: &[u8]) -> Option<(std::borrow::Cow<'static, str>, Option<u64>)> {
    let text = std::str::from_utf8(rest).ok()?;
    let mut words = text.split_ascii_whitespace();
    let name = perf_event_name(words.next()?.as_bytes())?;
    let words: Vec<&str> = words.collect();
    let after = |key: &str| -> Option<&str> {
        let keys: Vec<&str> = key.split(' ').collect();
        let at = words.windows(keys.len()).position(|w| w == keys.as_slice())?;
        words.get(at + keys.len()).copied()
    };
    let dec = |key: &str| after(key)?.parse::<u64>().ok();
    let hex = |key: &str| hex_word(after(key)?.as_bytes());
    let ip = words.last().and_then(|w| hex_word(w.as_bytes()));
    let m = match name {
        "ptwrite" => format!("ptwrite: {:x}", hex("payload:")?),
        "pwre" => pwre_words(dec("cstate:")?, dec("sub-cstate:")?, dec("hw:")? != 0),
        "pwrx" => pwrx_words(
            dec("last cstate:")?,
            dec("deepest cstate:")?,
            hex("wake reason:")?,
        ),
        "exstop" => "exstop".into(),
        "mwait" => format!("mwait {:x} {:x}", hex("hints:")?, hex("extensions:")?),
        "cbr" => format!("cbr: {:x}", dec("cbr:")?),
        _ => return None,
    };
    Some((std::borrow::Cow::Owned(m), ip))
}

/// The width of perf script's IP field (`%16` hex, space-padded on the left).
const PERF_IP_WIDTH: usize = 16;

/// The IP a line's first word stands for, by the grammar of [`token`] (TR8); `indent` is what
/// comes before the word on the line.
fn ip_word(indent: &[u8], word: &[u8]) -> Option<u64> {
    let prefixed = word.strip_prefix(b"0x").or_else(|| word.strip_prefix(b"0X"));
    let digits = prefixed.unwrap_or(word);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let value = digits
        .iter()
        .try_fold(0u64, |v, &b| Some(v << 4 | u64::from((b as char).to_digit(16)?)))?;
    let perf_aligned =
        !indent.is_empty() && indent.iter().all(|&b| b == b' ') && indent.len() + word.len() >= PERF_IP_WIDTH;
    let is_ip =
        prefixed.is_some() || digits.len() == 16 || digits.iter().any(u8::is_ascii_digit) || perf_aligned;
    is_ip.then_some(value)
}

/// What came just before an instruction that explains it, for a divergence's message (issue 43
/// §7): a decoder goes wrong most often right after these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Before {
    #[default]
    Nothing,
    /// The first instruction a decoder recovers after a span: where it resumes.
    Span(Cause),
    /// The first instruction after an overflow (OVF).
    Overflow,
    /// The return target of the RET at this IP, the instruction before (a compressed RET's target
    /// is the decoder's own: its return stack's).
    Ret(u64),
}

impl fmt::Display for Before {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Before::Nothing => Ok(()),
            Before::Span(c) => write!(
                f,
                ", where a decoder resumes after the {} span (at the next PSB)",
                c.name()
            ),
            Before::Overflow => f.write_str(", the first after the overflow (OVF)"),
            Before::Ret(ip) => write!(
                f,
                ", where the RET at {ip:#x} returns (a compressed RET's target is the decoder's return stack's)"
            ),
        }
    }
}

/// A `verify` step over the truth: an instruction a decoder must (or, optional, may) give, a span
/// (lost or undefined), or the end.
#[derive(Clone, Copy, Debug)]
enum Item {
    Ip {
        ip: u64,
        index: u64,
        off: Option<u64>,
        optional: bool,
        /// What came just before it.
        before: Before,
    },
    Gap {
        cause: Cause,
        first: u64,
    },
    /// An event a decoder must (or, optional, may) report (with `--events`, TR10).
    Event {
        kind: EventKind,
        ip: Option<u64>,
        to: Option<u64>,
        off: Option<u64>,
        optional: bool,
    },
    End,
}

/// What [`next_item`] needs to know of the records before: whether events are items, the span
/// the records are in (events inside a lost or undefined span are not items, TR10, but for the
/// overflow that ends an `ovf` span), and whether the last instruction was optional.
#[derive(Clone, Copy, Debug)]
struct Ctx {
    events: bool,
    /// Instructions before this place (every record's, whatever its class).
    count: u64,
    truncated: bool,
    span: Option<Cause>,
    after_optional: bool,
    /// Following the lost instructions of a `corrupt` span, where a decoder that went on after
    /// the damage came back to the flow (TR12): they are items until the span ends.
    follow: bool,
    /// What the next instruction comes after.
    before: Before,
}

/// A case's truth as a pattern for [`check`], read whole first (TR1) and then followed as
/// `truth.bin` records, so its memory is that of the ways being followed, not of the truth.
#[derive(Debug)]
pub struct Pattern {
    bytes: Bytes,
    start: usize,
    /// Where the records end, and the blocks their runs name (TR15).
    end: usize,
    table: compact::Table,
    truncated: bool,
    /// The TSC's frequency (the header's `run.tsc_hz`), to read perf's times (TR13).
    tsc_hz: Option<u64>,
    /// Instructions a decoder must or may give.
    pub instructions: u64,
}

pub use super::TruthError;

impl Pattern {
    /// Reads a truth (named `file` in messages) from `r`: `truth.bin` (told by its magic) or
    /// `truth.jsonl`, whole (TR1: the end record last, its counts those of the records), so a
    /// file cut short is refused rather than judged on its first part. A `truth.jsonl` is turned
    /// into `truth.bin`'s form in memory.
    pub fn read(file: &str, mut r: impl BufRead) -> Result<Self, TruthError> {
        let io = |e: io::Error| TruthError {
            file: file.to_owned(),
            line: 1,
            byte: None,
            msg: e.to_string(),
        };
        let head = r.fill_buf().map_err(io)?;
        if head.first() == Some(&compact::MAGIC[0]) && head.len() < compact::MAGIC.len()
            || head.starts_with(compact::MAGIC)
        {
            let mut bytes = Vec::new();
            r.read_to_end(&mut bytes).map_err(io)?;
            return Self::from_compact(file, Bytes::Owned(bytes));
        }
        let mut enc = compact::Encoder::new(Vec::new());
        super::json::read(file, r, &mut enc)?;
        Self::from_compact(file, Bytes::Owned(enc.into_inner()))
    }

    /// Opens the truth file at `path` ([`Pattern::read`]); a `truth.bin` is mapped, not read.
    pub fn open(path: &Path) -> Result<Self, TruthError> {
        let file = path.display().to_string();
        if let Some(bytes) = map_truth(path, &file)? {
            return Self::from_compact(&file, bytes);
        }
        let f = File::open(path).map_err(|e| io_error(&file, e))?;
        Self::read(&file, BufReader::with_capacity(1 << 16, f))
    }

    fn from_compact(file: &str, bytes: Bytes) -> Result<Self, TruthError> {
        let mut p = Self::unchecked(file, bytes)?;
        p.instructions = p.check_records(file)?;
        Ok(p)
    }

    /// The pattern of a `truth.bin`'s bytes with its header and block table read, its records
    /// not yet checked ([`Pattern::check_records`]; `instructions` is 0 until they are).
    fn unchecked(file: &str, bytes: Bytes) -> Result<Self, TruthError> {
        let (header, start, table, end) =
            compact::read_prelude(bytes.get()).map_err(|e| format_failure(file, e))?;
        Ok(Pattern {
            truncated: header
                .get("truncated")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            tsc_hz: header.pointer("/run/tsc_hz").and_then(serde_json::Value::as_u64),
            bytes,
            start,
            end,
            table,
            instructions: 0,
        })
    }

    /// Checks the records whole (TR1): the instructions a decoder must or may give.
    fn check_records(&self, file: &str) -> Result<u64, TruthError> {
        let counts = self
            .bytes
            .check_records(self.start, self.end, &self.table)
            .map_err(|e| format_failure(file, e))?;
        Ok(counts.required + counts.optional)
    }
}

/// A truth file's error reading it (`line` 0: the file, not a line of it).
fn io_error(file: &str, e: io::Error) -> TruthError {
    TruthError {
        file: file.to_owned(),
        line: 0,
        byte: None,
        msg: e.to_string(),
    }
}

/// A `truth.bin`'s format error, at its byte.
fn format_failure(file: &str, e: compact::FormatError) -> TruthError {
    TruthError {
        file: file.to_owned(),
        line: 0,
        byte: Some(e.at),
        msg: e.msg,
    }
}

/// The truth file at `path` (named `file`) mapped when it is a `truth.bin`.
fn map_truth(path: &Path, file: &str) -> Result<Option<Bytes>, TruthError> {
    Bytes::map_if_compact(path).map_err(|e| io_error(file, e))
}

/// A mapped `truth.bin` whose header and block table are read, and whose records
/// [`Unchecked::check`] checks whole (TR1) while [`Unchecked::spawn_match`] matches a decoder's
/// output against them on another thread: `verify` on the two cores at once (issue 51 §5). The
/// check's error comes first, as [`Pattern::open`]'s comes before any matching: a verdict counts
/// only once the check passed, and then it is [`check_with`]'s.
#[derive(Debug)]
pub struct Unchecked {
    pattern: std::sync::Arc<Pattern>,
    file: String,
}

impl Unchecked {
    /// Opens the truth file at `path` when it is a `truth.bin` (mapped; an error in its header
    /// or block table is [`Pattern::open`]'s); `None` when it is not (a `truth.jsonl`, read whole
    /// by [`Pattern::open`]).
    pub fn open(path: &Path) -> Result<Option<Self>, TruthError> {
        let file = path.display().to_string();
        let Some(bytes) = map_truth(path, &file)? else {
            return Ok(None);
        };
        let pattern = std::sync::Arc::new(Pattern::unchecked(&file, bytes)?);
        Ok(Some(Unchecked { pattern, file }))
    }

    /// [`check_with`] of `output` against the truth on a thread of its own; the thread gives
    /// back the verdict and the output. It reads records the check may yet refuse: its verdict
    /// is the answer only when [`Unchecked::check`] passes.
    pub fn spawn_match<R: BufRead + Send + 'static>(
        &self,
        mut output: R,
        options: Options,
    ) -> std::thread::JoinHandle<(io::Result<Verdict>, R)> {
        let pattern = std::sync::Arc::clone(&self.pattern);
        std::thread::spawn(move || (check_with(&pattern, &mut output, options), output))
    }

    /// Checks the records whole (TR1), as [`Pattern::open`] does, with its error: the
    /// instructions a decoder must or may give ([`Pattern::instructions`]).
    pub fn check(&self) -> Result<u64, TruthError> {
        self.pattern.check_records(&self.file)
    }
}

/// A place in the pattern: the item whose record starts at `pos`, and the records after it.
#[derive(Clone, Copy, Debug)]
struct At<'a> {
    pos: usize,
    item: Item,
    next: Decoder<'a>,
    ctx: Ctx,
}

fn format_error(e: compact::FormatError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the truth: {e}"))
}

fn read_record(next: &mut Decoder<'_>) -> io::Result<(usize, Record)> {
    next.next_record().map_err(format_error)?.ok_or_else(|| {
        format_error(compact::FormatError {
            at: compact::byte_of(next.pos()),
            msg: "no end record".into(),
        })
    })
}

/// Whether an event before the records of `next` may be left out (TR10): when the next
/// instruction is optional, or a span or the end of a truncated stream comes first (a decoder
/// may stop before it, TR3).
fn event_optional(mut next: Decoder<'_>, truncated: bool) -> io::Result<bool> {
    loop {
        match read_record(&mut next)?.1 {
            Record::Insn { class, .. } => return Ok(class != Class::Required),
            Record::Span { .. } => return Ok(true),
            Record::End { .. } => return Ok(truncated),
            _ => {}
        }
    }
}

/// What the instruction after one at `ip` that is `branch` comes after.
fn after_insn(ip: u64, branch: Option<super::record::Branch>) -> Before {
    match branch {
        Some(b) if b.kind == super::record::BranchKind::Ret => Before::Ret(ip),
        _ => Before::Nothing,
    }
}

/// The item after `next` (lost and undefined instructions are not items: a span before them
/// stands for them; nor are events without `--events`, events inside a span, or events whose
/// packet was not delivered).
fn next_item(mut next: Decoder<'_>, mut ctx: Ctx) -> io::Result<At<'_>> {
    loop {
        let (pos, r) = read_record(&mut next)?;
        let (kind, ip, to, off) = match r {
            Record::Insn {
                i,
                ip,
                off,
                branch,
                class: class @ (Class::Required | Class::Optional),
            } => {
                ctx.count = i + 1;
                let optional = class == Class::Optional;
                ctx.span = None;
                ctx.follow = false;
                ctx.after_optional = optional;
                let item = Item::Ip {
                    ip,
                    index: i,
                    off,
                    optional,
                    before: std::mem::replace(&mut ctx.before, after_insn(ip, branch)),
                };
                return Ok(At { pos, item, next, ctx });
            }
            Record::Span { cause, first, .. } => {
                ctx.before = Before::Span(cause);
                ctx.span = Some(cause);
                ctx.follow = false;
                ctx.after_optional = false;
                let item = Item::Gap { cause, first };
                return Ok(At { pos, item, next, ctx });
            }
            Record::End { .. } => {
                return Ok(At {
                    pos,
                    item: Item::End,
                    next,
                    ctx,
                })
            }
            Record::Enable { ip, off } => (EventKind::Enabled, Some(ip), None, off),
            Record::Disable { off } => (EventKind::Disabled, None, None, off),
            Record::Async { from, to, off } => (EventKind::Interrupt, Some(from), Some(to), off),
            Record::Overflow { off } => {
                if ctx.span.is_none() || ctx.span == Some(Cause::Ovf) {
                    ctx.before = Before::Overflow;
                }
                (EventKind::Overflow, None, None, off)
            }
            Record::Insn {
                i,
                ip,
                off,
                branch,
                class: Class::Lost(_),
            } if ctx.follow => {
                ctx.count = i + 1;
                let item = Item::Ip {
                    ip,
                    index: i,
                    off,
                    optional: false,
                    before: std::mem::replace(&mut ctx.before, after_insn(ip, branch)),
                };
                return Ok(At { pos, item, next, ctx });
            }
            Record::Insn { i, .. } => {
                ctx.count = i + 1;
                continue;
            }
            Record::Mark { .. } | Record::Time { .. } => continue,
        };
        if !ctx.events || off.is_none() {
            continue;
        }
        match ctx.span {
            // The OVF of an overflow's own span is delivered: a decoder reports it, and what
            // follows it is recovered.
            Some(Cause::Ovf) if kind == EventKind::Overflow => ctx.span = None,
            Some(_) => continue,
            None => {}
        }
        let optional = ctx.after_optional || event_optional(next, ctx.truncated)?;
        let item = Item::Event {
            kind,
            ip,
            to,
            off,
            optional,
        };
        return Ok(At { pos, item, next, ctx });
    }
}

impl<'a> At<'a> {
    fn advance(&self) -> io::Result<At<'a>> {
        next_item(self.next, self.ctx)
    }

    fn optional(&self) -> bool {
        matches!(
            self.item,
            Item::Ip { optional: true, .. } | Item::Event { optional: true, .. }
        )
    }

    fn undefined(&self) -> bool {
        matches!(self.item, Item::Gap { cause, .. } if cause.undefined())
    }

    /// How many of the truth's instructions a decoder has given (or skipped) at this place.
    fn position(&self) -> u64 {
        match self.item {
            Item::Ip { index, .. } => index,
            Item::Gap { first, .. } => first,
            Item::Event { .. } | Item::End => self.ctx.count,
        }
    }
}

/// A way through the pattern: where it is, whether it has given an error there, and where it
/// may go without a line once known: the item after its run of optional instructions (a decoder
/// may stop inside it), or after its span (the lost and undefined instructions under a span are
/// read once, not at every line a way spends there).
#[derive(Clone, Copy, Debug)]
struct Way<'a> {
    at: At<'a>,
    err: bool,
    run_end: Option<At<'a>>,
}

/// The set of ways after each line, kept in two vectors (no allocation per line once they grew).
struct Matcher<'a> {
    truncated: bool,
    ways: Vec<Way<'a>>,
    next: Vec<Way<'a>>,
    seen: std::collections::HashSet<(usize, bool)>,
    /// The furthest undefined span a way has reached: that way accepts anything and stays, so
    /// every way before it is redundant and dropped (an undefined span that a later one has
    /// followed is not carried on).
    floor: usize,
    work: u64,
}

impl<'a> Matcher<'a> {
    fn new(p: &'a Pattern, o: Options) -> io::Result<Self> {
        let mut m = Matcher {
            truncated: p.truncated,
            ways: Vec::new(),
            next: Vec::new(),
            seen: Default::default(),
            floor: 0,
            work: 0,
        };
        let ctx = Ctx {
            events: o.events && !o.perf,
            count: 0,
            truncated: p.truncated,
            span: None,
            after_optional: false,
            follow: false,
            before: Before::Nothing,
        };
        let first = next_item(Decoder::with_table(p.bytes.get(), p.start, p.end, &p.table), ctx)?;
        m.add(Way {
            at: first,
            err: false,
            run_end: None,
        });
        m.close()?;
        Ok(m)
    }

    fn add(&mut self, w: Way<'a>) {
        let key = (w.at.pos, w.err);
        let fresh = if self.next.len() < 8 {
            !self.next.iter().any(|x| (x.at.pos, x.err) == key)
        } else {
            if self.seen.is_empty() {
                self.seen.extend(self.next.iter().map(|x| (x.at.pos, x.err)));
            }
            self.seen.insert(key)
        };
        if fresh {
            if w.at.undefined() {
                self.floor = self.floor.max(w.at.pos);
            }
            self.next.push(w);
        }
    }

    /// The item after the run of optional instructions `at` is in.
    fn run_end(at: &At<'a>) -> io::Result<At<'a>> {
        let mut x = at.advance()?;
        while x.optional() {
            x = x.advance()?;
        }
        Ok(x)
    }

    /// Adds to `next` what its ways reach without a line, drops the redundant ones and makes it
    /// the current set.
    fn close(&mut self) -> io::Result<()> {
        let mut i = 0;
        while let Some(&w) = self.next.get(i) {
            i += 1;
            self.work += 1;
            match w.at.item {
                Item::Ip { optional: true, .. } | Item::Event { optional: true, .. } => {
                    let end = match w.run_end {
                        Some(e) => e,
                        None => {
                            let e = Self::run_end(&w.at)?;
                            self.next[i - 1].run_end = Some(e);
                            e
                        }
                    };
                    self.add(Way {
                        at: end,
                        err: false,
                        run_end: None,
                    });
                }
                Item::Gap { cause, .. } if !cause.error_required() || w.err => {
                    let after = match w.run_end {
                        Some(a) => a,
                        None => {
                            let a = w.at.advance()?;
                            self.next[i - 1].run_end = Some(a);
                            a
                        }
                    };
                    self.add(Way {
                        at: after,
                        err: false,
                        run_end: None,
                    });
                }
                _ => {}
            }
        }
        let floor = self.floor;
        self.next.retain(|w| w.at.pos >= floor);
        std::mem::swap(&mut self.ways, &mut self.next);
        self.next.clear();
        self.seen.clear();
        Ok(())
    }

    /// The common case, in place: one way, at a required instruction `t` is, with a required
    /// instruction next (nothing for [`Matcher::close`] to add, no floor to move). `false` when
    /// that is not the case, and nothing changed.
    #[inline]
    fn step_one(&mut self, t: Token) -> io::Result<bool> {
        let [w] = self.ways.as_mut_slice() else {
            return Ok(false);
        };
        match (w.at.item, t) {
            (
                Item::Ip {
                    ip, optional: false, ..
                },
                Token::Ip(x),
            ) if ip == x => {
                let at = w.at.advance()?;
                if !matches!(at.item, Item::Ip { optional: false, .. }) {
                    return Ok(false);
                }
                *w = Way {
                    at,
                    err: false,
                    run_end: None,
                };
                self.work += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// TR12: the ways of a decoder that came back to the flow at instruction `ip` inside the
    /// corrupt span `w` is at (after its error): one after each of the span's lost instructions
    /// at `ip`. Whether there was one.
    fn resume(&mut self, w: &Way<'a>, ip: u64) -> io::Result<bool> {
        let mut next = w.at.next;
        let mut found = false;
        loop {
            let (_, r) = read_record(&mut next)?;
            self.work += 1;
            match r {
                Record::Insn {
                    i,
                    ip: at,
                    class: Class::Lost(_),
                    ..
                } if at == ip => {
                    let ctx = Ctx {
                        follow: true,
                        count: i + 1,
                        ..w.at.ctx
                    };
                    let at = next_item(next, ctx)?;
                    self.add(Way {
                        at,
                        err: false,
                        run_end: None,
                    });
                    found = true;
                }
                Record::Insn {
                    class: Class::Lost(_),
                    ..
                } => {}
                Record::Insn { .. } | Record::Span { .. } | Record::End { .. } => return Ok(found),
                _ => {}
            }
        }
    }

    /// Moves every way past `t`; returns the furthest place that could not take it.
    fn step(&mut self, t: Token) -> io::Result<Option<At<'a>>> {
        let ways = std::mem::take(&mut self.ways);
        let mut dead: Option<At<'a>> = None;
        for w in &ways {
            // TR12: after the error a corrupt span requires, a decoder that goes on may come back
            // to the flow at any of the span's instructions, and must follow it from there.
            if let (
                Item::Gap {
                    cause: Cause::Corrupt,
                    ..
                },
                Token::Ip(x),
                true,
            ) = (w.at.item, t, w.err)
            {
                if !self.resume(w, x)?
                    && !matches!(w.at.item, Item::End)
                    && dead.is_none_or(|d| w.at.pos > d.pos)
                {
                    dead = Some(w.at);
                }
                continue;
            }
            let next = match (w.at.item, t) {
                (Item::Ip { ip, .. }, Token::Ip(x)) if ip == x => {
                    let at = w.at.advance()?;
                    // Still in the same run of optional instructions: the same end.
                    let run_end = if at.optional() { w.run_end } else { None };
                    Some(Way {
                        at,
                        err: false,
                        run_end,
                    })
                }
                (Item::Gap { cause, .. }, _) if cause.undefined() => Some(Way {
                    err: w.err || t == Token::Error,
                    ..*w
                }),
                (Item::Gap { .. }, Token::Error) => Some(Way { err: true, ..*w }),
                // TR12: an error while following a corrupt span's instructions: lost again, from
                // here on.
                // It may come back at this very instruction, or at one further on.
                (Item::Ip { index, .. }, Token::Error) if w.at.ctx.follow => {
                    self.add(*w);
                    Some(Way {
                        at: At {
                            item: Item::Gap {
                                cause: Cause::Corrupt,
                                first: index,
                            },
                            ctx: Ctx {
                                follow: false,
                                ..w.at.ctx
                            },
                            ..w.at
                        },
                        err: true,
                        run_end: None,
                    })
                }
                (Item::Ip { .. }, Token::Event(_)) if w.at.ctx.follow => Some(*w),
                // Events a decoder meets inside a lost span may be reported or not (TR10).
                (Item::Gap { .. }, Token::Event(_)) => Some(*w),
                (Item::Event { kind, ip, to, .. }, Token::Event(e))
                    if e.kind == kind
                        && (e.ip.is_none() || ip.is_none() || e.ip == ip)
                        && (e.to.is_none() || to.is_none() || e.to == to) =>
                {
                    let at = w.at.advance()?;
                    let run_end = if at.optional() { w.run_end } else { None };
                    Some(Way {
                        at,
                        err: false,
                        run_end,
                    })
                }
                (Item::End, Token::Error) if self.truncated => Some(*w),
                _ => None,
            };
            match next {
                Some(n) => self.add(n),
                None if !matches!(w.at.item, Item::End) && dead.is_none_or(|d| w.at.pos > d.pos) => {
                    dead = Some(w.at);
                }
                None => {}
            }
        }
        self.ways = ways;
        self.close()?;
        Ok(dead)
    }
}

/// A mark of the truth a decoder must (or, optional, may) report between instructions `lo` and
/// `hi` (TR11): after giving `lo` of them and before giving instruction `hi`.
#[derive(Clone, Copy, Debug)]
struct Due {
    text: Text,
    ip: Option<u64>,
    off: Option<u64>,
    lo: u64,
    hi: u64,
    optional: bool,
}

impl fmt::Display for Due {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the event [{}", self.text)?;
        if let Some(ip) = self.ip {
            write!(f, ", ip: {ip:#x}")?;
        }
        write!(
            f,
            "] (stream offset {}) ",
            self.off.map_or("unknown".into(), |o| o.to_string())
        )?;
        match self.lo {
            0 => write!(f, "before truth instruction {}", self.hi),
            lo => write!(
                f,
                "after truth instruction {} and before truth instruction {}",
                lo - 1,
                self.hi
            ),
        }
    }
}

/// The truth's marks, read by a cursor of their own as the decoder's output goes (TR11): a
/// queue of those whose window is open.
struct Marks<'a> {
    next: Decoder<'a>,
    truncated: bool,
    /// Only the marks perf synthesizes are due.
    perf: bool,
    count: u64,
    /// One past the last instruction a decoder need not give (lost, undefined, optional).
    not_required: u64,
    queue: std::collections::VecDeque<Due>,
    done: bool,
}

impl<'a> Marks<'a> {
    fn new(p: &'a Pattern, perf: bool) -> Self {
        Marks {
            next: Decoder::with_table(p.bytes.get(), p.start, p.end, &p.table),
            truncated: p.truncated,
            perf,
            count: 0,
            not_required: 0,
            queue: Default::default(),
            done: false,
        }
    }

    /// Reads on to the next delivered mark (queued); `false` at the end record.
    fn read_one(&mut self) -> io::Result<bool> {
        loop {
            match read_record(&mut self.next)?.1 {
                Record::Insn { i, class, .. } => {
                    self.count = i + 1;
                    if class != Class::Required {
                        self.not_required = i + 1;
                    }
                }
                Record::Mark {
                    text,
                    ip,
                    off: off @ Some(_),
                    early,
                    restated,
                } => {
                    let word = text.as_str().split([':', ' ']).next().unwrap_or_default();
                    if self.perf && !PERF_MARKS.contains(&word) {
                        continue;
                    }
                    let (lo, hi) = (self.count.saturating_sub(early), self.count);
                    // Optional where a decoder need not give an instruction of its window, or
                    // may stop before the next one (TR3, TR10's policy).
                    let optional = restated
                        || self.not_required > lo.saturating_sub(1) && self.not_required > 0
                        || event_optional(self.next, self.truncated)?;
                    self.queue.push_back(Due {
                        text,
                        ip,
                        off,
                        lo,
                        hi,
                        optional,
                    });
                    return Ok(true);
                }
                Record::End { .. } => {
                    self.done = true;
                    return Ok(false);
                }
                _ => {}
            }
        }
    }

    /// Queues every mark whose window opens at or before `pos`.
    fn fill_to(&mut self, pos: u64) -> io::Result<()> {
        while !self.done && self.queue.back().is_none_or(|d| d.lo <= pos) {
            self.read_one()?;
        }
        Ok(())
    }

    /// The first required mark a decoder at `pmin` has gone past without reporting; drops the
    /// optional ones it has gone past.
    fn overdue(&mut self, pmin: u64) -> io::Result<Option<Due>> {
        self.fill_to(pmin)?;
        while let Some(d) = self.queue.front().copied() {
            if d.hi >= pmin {
                break;
            }
            if !d.optional {
                return Ok(Some(d));
            }
            self.queue.pop_front();
        }
        Ok(None)
    }

    /// Takes the mark `words`/`ip` a decoder reported somewhere in `pmin..=pmax`: `Ok(true)`
    /// when it is the next one due (optional ones before it may be skipped), `Ok(false)` when
    /// there is none, `Err(due)` when a required mark had to come first.
    fn take(&mut self, words: &str, ip: Option<u64>, pmin: u64, pmax: u64) -> io::Result<Result<bool, Due>> {
        self.fill_to(pmax)?;
        let mut k = 0;
        while let Some(d) = self.queue.get(k).copied() {
            if d.lo > pmax {
                break;
            }
            let fits =
                d.hi >= pmin && d.text.as_str() == words && (ip.is_none() || d.ip.is_none() || ip == d.ip);
            if fits {
                self.queue.drain(..=k);
                return Ok(Ok(true));
            }
            if !d.optional && d.hi >= pmin {
                return Ok(Err(d));
            }
            k += 1;
        }
        Ok(Ok(false))
    }
}

/// The truth's time records, read by a cursor of their own as the decoder's instructions go
/// (TR13).
struct Times<'a> {
    next: Decoder<'a>,
    count: u64,
    /// The last time (and the latest a decoder may make it) whose record stands before the
    /// instruction asked about.
    prev: Option<(u64, u64)>,
    /// The first position after it that has time records, and the latest time there.
    upcoming: Option<(u64, (u64, u64))>,
    /// The last runs passed, for a question about an earlier instruction (ways that are not in
    /// step: the cursor only moves forward).
    passed: std::collections::VecDeque<(u64, (u64, u64))>,
    done: bool,
}

/// How many passed runs [`Times`] keeps for questions about earlier instructions.
const TIMES_KEPT: usize = 256;

impl<'a> Times<'a> {
    fn new(p: &'a Pattern) -> Self {
        Times {
            next: Decoder::with_table(p.bytes.get(), p.start, p.end, &p.table),
            count: 0,
            prev: None,
            upcoming: None,
            passed: Default::default(),
            done: false,
        }
    }

    /// Reads the next run of time records with no instruction between them into `upcoming`.
    fn read_run(&mut self) -> io::Result<()> {
        loop {
            match read_record(&mut self.next)?.1 {
                Record::Insn { i, .. } => {
                    self.count = i + 1;
                    if self.upcoming.is_some() {
                        return Ok(());
                    }
                }
                Record::Time { tsc, slack, .. } => {
                    let late = tsc.saturating_add(slack);
                    let run_late = self.upcoming.map_or(0, |u| u.1 .1);
                    self.upcoming = Some((self.count, (tsc, late.max(run_late))));
                }
                Record::End { .. } => {
                    self.done = true;
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    /// The times a decoder may give instruction `i`: from the last timing packet before its
    /// carrier (its time and latest) to the last of those right after it (before the next
    /// carrier that has any).
    #[allow(clippy::type_complexity)]
    fn bounds(&mut self, i: u64) -> io::Result<(Option<(u64, u64)>, Option<(u64, u64)>)> {
        loop {
            match self.upcoming {
                Some((pos, tsc)) if pos <= i => {
                    self.prev = Some(tsc);
                    if self.passed.len() == TIMES_KEPT {
                        self.passed.pop_front();
                    }
                    self.passed.push_back((pos, tsc));
                    self.upcoming = None;
                }
                None if !self.done => self.read_run()?,
                _ => break,
            }
        }
        // A question about an instruction before the runs already passed.
        if self.passed.back().is_some_and(|&(pos, _)| pos > i) {
            let k = self.passed.iter().rposition(|&(pos, _)| pos <= i);
            let prev = k.map(|k| self.passed[k].1);
            let next = self.passed.get(k.map_or(0, |k| k + 1)).map(|r| r.1);
            return Ok((prev, next));
        }
        Ok((self.prev, self.upcoming.map(|u| u.1)))
    }
}

/// perf script's time word (`SECONDS.FRACTION:`, microseconds or with `--ns` nanoseconds) in
/// nanoseconds.
pub fn perf_time_ns(word: &[u8]) -> Option<u128> {
    let w = std::str::from_utf8(word.strip_suffix(b":")?).ok()?;
    let (s, f) = w.split_once('.')?;
    if s.is_empty()
        || s.len() > 20
        || f.is_empty()
        || f.len() > 9
        || !(s.bytes().chain(f.bytes()).all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let frac: u128 = f.parse().ok()?;
    s.parse::<u128>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(frac * 10u128.pow(9 - f.len() as u32))
}

/// `line` without perf script's time column in front (`1.789569706:`), if it has one.
fn strip_perf_time(line: &[u8]) -> &[u8] {
    let rest = line.trim_ascii_start();
    let first = &rest[..rest
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(rest.len())];
    if perf_time_ns(first).is_some() {
        &rest[first.len()..]
    } else {
        line
    }
}

/// The time of an instruction line as TSC (TR13): the hex number after `tsc:` or `tsc=`, or
/// perf's time column converted at `tsc_hz`. A line that names a time that does not read (`tsc:
/// zz`, past 64 bits) is an error: checking nothing would pass every line.
fn any_line_time(line: &[u8], tsc_hz: Option<u64>) -> Result<Option<u64>, String> {
    if let Some(t) = line_time_checked(line)? {
        return Ok(Some(t));
    }
    let Some(ns) = first_word(line).and_then(perf_time_ns) else {
        return Ok(None);
    };
    let Some(hz) = tsc_hz else { return Ok(None) };
    match ns
        .checked_mul(u128::from(hz))
        .and_then(|t| u64::try_from(t / 1_000_000_000).ok())
    {
        Some(t) => Ok(Some(t)),
        None => Err(format!(
            "the time {} is past 64 bits of TSC at {hz} Hz",
            String::from_utf8_lossy(first_word(line).unwrap_or_default())
        )),
    }
}

/// The time an instruction line carries (TR13): the hex number after `tsc:` or `tsc=`; `None`
/// also when what follows is not one (`verify --time` then fails, naming the line).
pub fn line_time(line: &[u8]) -> Option<u64> {
    line_time_checked(line).ok().flatten()
}

/// [`line_time`], with an error when `tsc:` or `tsc=` is followed by no hex number (`tsc: zz`)
/// or by one past 64 bits.
fn line_time_checked(line: &[u8]) -> Result<Option<u64>, String> {
    let Some(at) = line.windows(4).position(|w| w == b"tsc:" || w == b"tsc=") else {
        return Ok(None);
    };
    let rest = line[at + 4..].trim_ascii_start();
    let rest = rest.strip_prefix(b"0x").unwrap_or(rest);
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(rest.len());
    match hex_word(&rest[..end]) {
        Some(t) => Ok(Some(t)),
        None => {
            let word = &rest[..rest
                .iter()
                .position(u8::is_ascii_whitespace)
                .unwrap_or(rest.len())
                .min(40)];
            let what = &line[at..at + 4];
            Err(format!(
                "the time after `{}` is not a hex number of at most 64 bits: '{}'",
                String::from_utf8_lossy(what),
                String::from_utf8_lossy(word)
            ))
        }
    }
}

fn expected(at: Option<&At>) -> String {
    match at.map(|a| a.item) {
        Some(Item::Ip {
            ip,
            index,
            off,
            before,
            ..
        }) => format!(
            "truth instruction {index} at {ip:#x} (stream offset {}){before}",
            off.map_or("unknown".into(), |o| o.to_string())
        ),
        Some(Item::Gap { cause, first }) => {
            if cause.error_required() {
                format!(
                    "an error for the {} damage before truth instruction {first}",
                    cause.name()
                )
            } else {
                format!(
                    "nothing for the {} span from truth instruction {first}",
                    cause.name()
                )
            }
        }
        Some(Item::Event {
            kind, ip, to, off, ..
        }) => format!(
            "the event {} (stream offset {})",
            Event { kind, ip, to },
            off.map_or("unknown".into(), |o| o.to_string())
        ),
        Some(Item::End) | None => "no more instructions".into(),
    }
}

/// TR13: whether the time `given` for an instruction at `ip` lies within `tol` of the times the
/// instruction may have: from the earliest to the latest bound over the ways that take it.
fn check_time(
    m: &Matcher<'_>,
    times: &mut Times<'_>,
    ip: u64,
    given: u64,
    tol: u64,
) -> io::Result<Option<Divergence>> {
    // Instructions followed after a corrupt packet (TR12) have no time to check: the decoder
    // came back to the flow by its own means.
    let (lo, hi) = m.ways.iter().fold((u64::MAX, 0), |(lo, hi), w| match w.at.item {
        Item::Ip { ip: x, index, .. } if x == ip && !w.at.ctx.follow => (lo.min(index), hi.max(index)),
        _ => (lo, hi),
    });
    if lo > hi || m.ways.iter().any(|w| w.at.undefined()) {
        // No way takes it (the instruction's own divergence says so), or a way in an undefined
        // span takes anything (TR5): the line may be the decoder's guess.
        return Ok(None);
    }
    let (early, _) = times.bounds(lo)?;
    let (before, after) = times.bounds(hi)?;
    let Some((early, _)) = early else {
        return Ok(None); // No timing packet yet: a decoder cannot know the time.
    };
    let late = after.map_or(u64::MAX, |a| a.1).max(before.map_or(early, |b| b.1));
    if given.saturating_add(tol) >= early && given <= late.saturating_add(tol) {
        return Ok(None);
    }
    let late = if late == u64::MAX {
        "on".to_string()
    } else {
        format!("{late:#x}")
    };
    Ok(Some(Divergence {
        line: 0,
        expected: format!(
            "truth instruction {lo} at {ip:#x} at a time from {early:#x} to {late} (tolerance {tol})"
        ),
        given: format!("time {given:#x}"),
    }))
}

/// The least and the most instructions the ways have given (TR11: where a mark line stands).
fn positions(m: &Matcher<'_>) -> (u64, u64) {
    m.ways.iter().fold((u64::MAX, 0), |(lo, hi), w| {
        let p = w.at.position();
        (lo.min(p), hi.max(p))
    })
}

/// A line of decoder output as a divergence quotes it: trimmed, at most 100 characters.
fn quoted(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line.trim_ascii());
    match text.char_indices().nth(100) {
        Some((cut, _)) => format!("the line \"{}…\"", &text[..cut]),
        None => format!("the line \"{text}\""),
    }
}

/// perf's own chatter that is not decoder output (TR8): its `Warning:` line and the summary
/// lines after it (`3 instruction trace errors`, `5 out of order events recorded.`, ...),
/// which `perf script … 2>&1` mixes into the instructions. A summary line starts with a count.
pub fn perf_summary(line: &[u8]) -> bool {
    if line.trim_ascii_start().starts_with(b"Warning:") {
        return true;
    }
    // The count at column 0, as perf prints it (an indented number is perf's IP column, and
    // the block walk reads only such a line as a count: the two paths agree).
    let digits = line.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits >= 16 || line.get(digits) != Some(&b' ') {
        return false;
    }
    let rest = &line[digits + 1..];
    PERF_SUMMARIES.iter().any(|p| rest.starts_with(p.as_bytes()))
}

/// How perf's summary lines go on after their count (tools/perf/util/session.c's warnings).
const PERF_SUMMARIES: [&str; 8] = [
    "instruction trace error",
    "out of ",
    "map information files",
    "lost samples",
    "unprocessable samples",
    "samples with id not",
    "unknown events",
    "unknown SAMPLE events",
];

/// Where a decoder's output left the truth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The line of the decoder's output (1-based; 0 when its output ended too early).
    pub line: u64,
    /// What the truth expected there.
    pub expected: String,
    /// What the decoder gave.
    pub given: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(
                f,
                "the decoder's output ended before the truth did: expected {}",
                self.expected
            )
        } else {
            write!(
                f,
                "decoder output line {}: expected {}; the decoder gave {}",
                self.line, self.expected, self.given
            )
        }
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// Instruction lines read.
    pub ips: u64,
    /// Error lines read.
    pub errors: u64,
    /// Event lines read and matched (with `--events`, TR10).
    pub events: u64,
    /// Instruction lines whose time was checked (with `--time`, TR13).
    pub times: u64,
    /// Instruction lines read where a way lay in an undefined span (TR5), where any line agrees:
    /// why more lines can agree than the truth has instructions a decoder must or may give.
    pub in_undefined: u64,
    /// The first divergence, if any.
    pub divergence: Option<Divergence>,
    /// The matcher's work: every position of the truth it followed, once for each line (the
    /// cost of the check, linear in the lines when no output repeats what follows an undefined
    /// span; tests count it rather than time it).
    pub work: u64,
}

/// How [`check_with`] matches.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Match the decoder's event lines against the truth's enables, disables, asynchronous
    /// transfers and overflows (`verify --events`, TR10) and its marks (TR11); without it event
    /// lines are ignored.
    pub events: bool,
    /// The events are perf script's (`--events perf`, TR11): only the marks perf synthesizes
    /// ([`PERF_MARKS`]) are expected, and no flow events (perf prints none of ptxed's).
    pub perf: bool,
    /// Check the time on instruction lines (`verify --time TOLERANCE`, TR13): within this many
    /// TSC ticks of the times of the timing packets around the instruction's carrier.
    pub time: Option<u64>,
}

impl Options {
    /// With events checked or not (ptxed's).
    pub fn events(events: bool) -> Self {
        Options {
            events,
            perf: false,
            time: None,
        }
    }

    /// With perf script's events checked (TR11).
    pub fn perf_events() -> Self {
        Options {
            events: true,
            perf: true,
            time: None,
        }
    }

    /// These options with instruction times checked to within `tolerance` TSC ticks (TR13).
    pub fn with_time(self, tolerance: u64) -> Self {
        Options {
            time: Some(tolerance),
            ..self
        }
    }
}

/// Matches a decoder's output lines against `pattern` (TR8), event lines ignored. A line need
/// not be UTF-8; a line longer than [`MAX_LINE`], or a read error, is an error naming the line.
pub fn check(pattern: &Pattern, output: impl BufRead) -> io::Result<Verdict> {
    check_with(pattern, output, Options::default())
}

/// [`check`] with `options` (TR10: `events` matches event lines too). Where one way is at a
/// required instruction, the lines that follow it through its run are compared in a tight loop
/// (the block walk, issue 51 §5); the verdict is [`check_per_instruction`]'s.
pub fn check_with(pattern: &Pattern, output: impl BufRead, options: Options) -> io::Result<Verdict> {
    check_lines(pattern, output, options, true)
}

/// [`check_with`] one step a line, without the block walk: the reference the walk is tested
/// against (the same verdict, divergence and work on every output), kept for that and for
/// measuring it.
pub fn check_per_instruction(
    pattern: &Pattern,
    output: impl BufRead,
    options: Options,
) -> io::Result<Verdict> {
    check_lines(pattern, output, options, false)
}

/// [`check_with`]; `block_walk`: whether lines inside runs go through [`walk::walk`].
fn check_lines(
    pattern: &Pattern,
    mut output: impl BufRead,
    options: Options,
    block_walk: bool,
) -> io::Result<Verdict> {
    // The walk leaves every line with a time to the per-line steps (TR13).
    let block_walk = block_walk && options.time.is_none();
    let mut m = Matcher::new(pattern, options)?;
    let mut v = Verdict {
        ips: 0,
        errors: 0,
        events: 0,
        times: 0,
        in_undefined: 0,
        divergence: None,
        work: 0,
    };
    // The furthest place the decoder's output left the truth, reported if no way through the
    // pattern is found: after an undefined span the failure may show only at the end.
    let mut furthest: Option<(usize, Divergence)> = None;
    // What the decoder gave, and the line it came from (quoted: a line verify read otherwise
    // than its writer meant shows itself).
    let given = |t: Token, line: &[u8]| {
        let what = match t {
            Token::Ip(ip) => format!("{ip:#x}"),
            Token::Error => "an error".into(),
            Token::Event(e) => format!("the event {e}"),
            Token::Mark => "an event".into(),
        };
        format!("{what} ({})", quoted(line))
    };
    let mut marks = Marks::new(pattern, options.perf);
    let mut times = Times::new(pattern);
    let mut buf = Vec::with_capacity(256);
    let mut n = 0u64;
    let mut released = pattern.start;
    loop {
        if block_walk {
            let mut release = |pos| {
                let low = compact::byte_of(pos);
                pattern.bytes.release(released, low);
                released = released.max(low);
            };
            let mut lines = walk::Lines {
                n,
                ips: v.ips,
                release: &mut release,
            };
            walk::walk(
                &mut m,
                &mut output,
                options.events.then_some(&mut marks),
                &mut lines,
            )?;
            (n, v.ips) = (lines.n, lines.ips);
        }
        n += 1;
        let more = next_line(&mut output, &mut buf)
            .map_err(|e| io::Error::new(e.kind(), format!("line {n}: {e}")))?;
        if !more {
            break;
        }
        // The ways only move forward: what lies before the first one is read for good.
        if n.is_multiple_of(4096) {
            let mut low = m.ways.iter().map(|w| w.at.pos).min().unwrap_or(0);
            if options.events {
                low = low.min(marks.next.pos());
            }
            let low = compact::byte_of(low);
            pattern.bytes.release(released, low);
            released = released.max(low);
        }
        let Some(t) = token_bytes(&buf) else { continue };
        match t {
            Token::Ip(_) => {
                v.ips += 1;
                if m.ways.iter().any(|w| w.at.undefined()) {
                    v.in_undefined += 1;
                }
            }
            Token::Error => v.errors += 1,
            Token::Event(_) | Token::Mark if !options.events => continue,
            // perf prints none of ptxed's flow events; a bracketed line there is not perf's.
            Token::Event(_) if options.perf => continue,
            Token::Event(_) => v.events += 1,
            Token::Mark => {
                v.events += 1;
                let line = strip_perf_time(&buf).trim_ascii_start();
                let (words, ip) = if line.starts_with(b"[") {
                    mark_line(line).unwrap_or_default()
                } else {
                    perf_mark(line).unwrap_or_default()
                };
                let (pmin, pmax) = positions(&m);
                let in_gap = m.ways.iter().any(|w| matches!(w.at.item, Item::Gap { .. }));
                let div = match marks.take(&words, ip, pmin, pmax)? {
                    Ok(true) => None,
                    Ok(false) if in_gap => None,
                    Ok(false) => Some(match marks.queue.front() {
                        Some(d) if d.lo <= pmax => d.to_string(),
                        _ => format!("no event (truth instruction {pmin} next)"),
                    }),
                    Err(d) => Some(d.to_string()),
                };
                if let Some(expected) = div {
                    v.divergence = Some(Divergence {
                        line: n,
                        expected,
                        given: format!(
                            "the event [{words}{}]",
                            ip.map_or(String::new(), |ip| format!(", ip: {ip:#x}"))
                        ),
                    });
                    v.work = m.work;
                    return Ok(v);
                }
                continue;
            }
        }
        if options.events {
            // An instruction at `pmin` or later given now: a mark due before it was missed.
            let (pmin, _) = positions(&m);
            let given_now = u64::from(matches!(t, Token::Ip(_)));
            if let Some(d) = marks.overdue(pmin.saturating_add(given_now))? {
                v.divergence = Some(Divergence {
                    line: n,
                    expected: d.to_string(),
                    given: given(t, &buf),
                });
                v.work = m.work;
                return Ok(v);
            }
        }
        if let (Some(tol), Token::Ip(x)) = (options.time, t) {
            let time = any_line_time(&buf, pattern.tsc_hz)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("line {n}: {e}")))?;
            if let Some(given) = time {
                if let Some(d) = check_time(&m, &mut times, x, given, tol)? {
                    v.divergence = Some(Divergence { line: n, ..d });
                    v.work = m.work;
                    return Ok(v);
                }
                v.times += 1;
            }
        }
        if m.step_one(t)? {
            continue;
        }
        let dead = m.step(t)?;
        let here = |at: Option<&At>| Divergence {
            line: n,
            expected: expected(at),
            given: given(t, &buf),
        };
        if m.ways.is_empty() {
            // Where the furthest way through died now (or past the end of the truth).
            v.divergence = Some(here(dead.as_ref()));
            v.work = m.work;
            return Ok(v);
        }
        if let Some(d) = dead {
            if furthest.as_ref().is_none_or(|f| d.pos > f.0) {
                furthest = Some((d.pos, here(Some(&d))));
            }
        }
    }
    v.work = m.work;
    if options.events && m.ways.iter().any(|w| matches!(w.at.item, Item::End)) {
        if let Some(d) = marks.overdue(u64::MAX)? {
            v.divergence = Some(Divergence {
                line: 0,
                expected: d.to_string(),
                given: String::new(),
            });
            return Ok(v);
        }
    }
    if !m.ways.iter().any(|w| matches!(w.at.item, Item::End)) {
        let far = m.ways.iter().max_by_key(|w| w.at.pos).map(|w| w.at);
        let far_pos = far.map_or(0, |a| a.pos);
        v.divergence = Some(match furthest {
            Some((d, div)) if d >= far_pos => div,
            _ => Divergence {
                line: 0,
                expected: expected(far.as_ref()),
                given: String::new(),
            },
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lines` under `header`, with the end record counting them.
    fn truth(header: &str, lines: &[&str]) -> String {
        let mut c = crate::truth::Counts::default();
        let mut text = format!("{header}\n");
        for l in lines {
            if l.contains("\"k\":\"insn\"") {
                c.instructions += 1;
                if l.contains("\"undefined\":") {
                    c.undefined += 1;
                } else if l.contains("\"lost\":") {
                    c.lost += 1;
                } else if l.contains("\"opt\":true") {
                    c.optional += 1;
                } else {
                    c.required += 1;
                }
            } else if l.contains("\"k\":\"span\"") {
                c.spans += 1;
            }
            text += l;
            text.push('\n');
        }
        text + &format!(
            "{{\"k\":\"end\",\"counts\":{}}}\n",
            serde_json::to_string(&c).unwrap()
        )
    }

    fn pattern(lines: &[&str]) -> Pattern {
        let text = truth("{\"truth\":1,\"truncated\":false}", lines);
        Pattern::read("t", text.as_bytes()).unwrap()
    }

    fn verdict(p: &Pattern, out: &str) -> Option<Divergence> {
        check(p, out.as_bytes()).unwrap().divergence
    }

    const A: &str = r#"{"k":"insn","i":0,"ip":"0x10","off":0}"#;
    const B: &str = r#"{"k":"insn","i":1,"ip":"0x11","off":1,"opt":true}"#;
    const C: &str = r#"{"k":"insn","i":2,"ip":"0x12","off":1,"opt":true}"#;
    const LOST: &str =
        r#"{"k":"span","class":"lost","cause":"corrupt","first":3,"error":"required","resume":9}"#;
    const L3: &str = r#"{"k":"insn","i":3,"ip":"0x13","lost":"corrupt"}"#;
    const D: &str = r#"{"k":"insn","i":4,"ip":"0x14","off":9}"#;
    /// D as the second and the third instruction (TR1: `i` counts every instruction).
    const D1: &str = r#"{"k":"insn","i":1,"ip":"0x14","off":9}"#;
    const D2: &str = r#"{"k":"insn","i":2,"ip":"0x14","off":9}"#;

    #[test]
    fn tokens_are_hex_ips_errors_or_ignored() {
        assert_eq!(token("0x401000"), Some(Token::Ip(0x401000)));
        assert_eq!(token("  401000  mov eax, 1"), Some(Token::Ip(0x401000)));
        assert_eq!(token("error: bad packet"), Some(Token::Error));
        assert_eq!(token("[1a0, 401000: error: bad opcode]"), Some(Token::Error));
        assert_eq!(
            token("[enabled]"),
            Some(Token::Event(Event {
                kind: EventKind::Enabled,
                ip: None,
                to: None
            }))
        );
        assert_eq!(
            token(" instruction trace error type 1 time 0 cpu 0 pid 1 tid 1 ip 0x40 code 6: x"),
            Some(Token::Error)
        );
        assert_eq!(token("instruction count 5"), None);
        assert_eq!(token(""), None);
        assert_eq!(token("0x"), None);
        assert_eq!(token("0x10000000000000000"), None);
        assert_eq!(token_bytes(b"401000 <caf\xe9>"), Some(Token::Ip(0x401000)));
        assert_eq!(token_bytes(b"\xff\xfe 401000"), None);
    }

    /// TR8 (issue 40): a line whose first word is an English word made of hex letters is not
    /// read as an instruction at that address (`bad` was 0xbad).
    #[test]
    fn tr8_english_words_that_look_hex_are_not_instructions() {
        for line in [
            "bad packet at 0x1234",
            "add rax, 1",
            "face",
            "deaf",
            "cafe",
            "Bad",
            "ADD",
            // Eight letters, no decimal digit, not padded: not an IP (write 0xdeadbeef).
            "deadbeef",
            "  bad packet",
            "\tfeed",
            // 15 columns: short of perf's 16-column field.
            "           cafe",
            "decade of bytes",
        ] {
            assert_eq!(token(line), None, "{line:?}");
        }
    }

    /// TR8 (issue 40): every form a decoder prints an IP in is read: `0x` (users, the libipt
    /// harness), ptxed's 16 zero-padded digits, perf script's space-padded `%16` field, and a
    /// bare number with a decimal digit.
    #[test]
    fn tr8_every_decoder_form_of_an_ip_is_an_instruction() {
        assert_eq!(token("0xbad"), Some(Token::Ip(0xbad)));
        assert_eq!(token("0XBAD  x"), Some(Token::Ip(0xbad)));
        assert_eq!(token("0xdeadbeef"), Some(Token::Ip(0xdead_beef)));
        assert_eq!(token("0000000000000bad"), Some(Token::Ip(0xbad)));
        assert_eq!(token("0000000000401000  mov eax, 1"), Some(Token::Ip(0x401000)));
        assert_eq!(token("          401000"), Some(Token::Ip(0x401000)));
        assert_eq!(token("ffffffffffffffff"), Some(Token::Ip(u64::MAX)));
        assert_eq!(token("ffffffff81000000"), Some(Token::Ip(0xffff_ffff_8100_0000)));
        assert_eq!(token("401000"), Some(Token::Ip(0x401000)));
        assert_eq!(token("a1"), Some(Token::Ip(0xa1)));
        assert_eq!(token("          abcdef"), Some(Token::Ip(0xabcdef)));
        assert_eq!(token("00000000000000000bad"), None, "more than 16 digits");
        // ptxed's speculative instructions, and its error lines of every kind.
        assert_eq!(token("? 0000000000001000"), Some(Token::Ip(0x1000)));
        assert_eq!(token("? bad"), None);
        assert_eq!(token("[0, 0: sync error: no sync]"), Some(Token::Error));
        assert_eq!(token("[1a, 1002: error: no memory mapped]"), Some(Token::Error));
        // Each printer's own format, for addresses with and without a decimal digit.
        for ip in [
            0u64,
            0xa,
            0xbad,
            0xabcdef,
            0x400000,
            0xffff_ffff_8100_0000,
            u64::MAX,
        ] {
            for line in [
                format!("{ip:#x}"),         // examples/libipt_decode.rs, users
                format!("{ip:016x}  nop"),  // ptxed: %016 PRIx64
                format!(" {ip:16x}"),       // perf script -F ip: ' ' then %16 PRIx64
                format!("{ip:16x} _start"), // the field alone
            ] {
                assert_eq!(token(&line), Some(Token::Ip(ip)), "{line:?}");
            }
        }
    }

    /// TR8 (issue 54 §7): perf's `Warning:` line and its summary (`3 instruction trace
    /// errors`, which `perf script … 2>&1` mixes in) are not instructions, on the line-by-line
    /// path and the block walk's alike; a bare number before other words still is one.
    #[test]
    fn tr8_perfs_warning_and_summary_lines_are_not_instructions() {
        for line in [
            "Warning:",
            "  Warning: something",
            "3 instruction trace errors",
            "1 instruction trace error",
            "12 out of order events recorded.",
            "3 out of 5 events were discarded for this reason.",
            "7 lost samples",
        ] {
            assert_eq!(token(line), None, "{line:?}");
            let bytes = format!("{line}\n");
            assert_eq!(walk::plain_ip(bytes.as_bytes()), None, "{line:?}");
        }
        assert_eq!(token("3 instructions here"), Some(Token::Ip(3)));
        // Indented, a number is an IP column on both paths.
        let indented = "  3 instruction trace errors\n";
        assert_eq!(token(indented), Some(Token::Ip(3)));
        assert_eq!(walk::plain_ip(indented.as_bytes()).map(|x| x.0), Some(3));
        assert_eq!(token("401000 main+0x0"), Some(Token::Ip(0x401000)));
        let p = pattern(&[A, B, C]);
        assert_eq!(
            verdict(&p, "10\nWarning:\n3 instruction trace errors\n11\n12\n"),
            None
        );
        // A divergence quotes the line it came from.
        let d = verdict(&p, "10\n11\n  13  main+0x3\n").unwrap();
        assert_eq!(d.line, 3);
        assert!(d.given.contains(r#"0x13 (the line "13  main+0x3")"#), "{d}");
    }

    #[test]
    fn tr3_tr6_optional_prefix_then_a_required_error_then_the_resumption() {
        let p = pattern(&[A, B, C, LOST, L3, D]);
        assert_eq!(verdict(&p, "10\n11\n12\nerror\n14\n"), None);
        assert_eq!(verdict(&p, "10\n11\nerror\n14\n"), None);
        assert_eq!(verdict(&p, "10\nerror\nerror\n14\n"), None);
        // No error where the stream cannot decode.
        assert!(verdict(&p, "10\n11\n12\n14\n").is_some());
        // A lost instruction given before the error (after it, TR12 accepts it).
        assert!(verdict(&p, "10\n11\n12\n13\nerror\n14\n").is_some());
        assert!(verdict(&p, "10\n11\n12\n13\n14\n").is_some());
        // Optional ones out of order: 12 without 11.
        assert!(verdict(&p, "10\n12\nerror\n14\n").is_some());
        // Missing the required end.
        let d = verdict(&p, "10\nerror\n").unwrap();
        assert_eq!(d.line, 0);
        assert!(d.expected.contains("0x14"), "{d}");
    }

    /// TR12: after the error a corrupt span requires, a decoder may come back at any of the
    /// span's instructions and must then follow the flow; a wrong instruction, a skipped one,
    /// or one before the error diverges; another error loses it again.
    #[test]
    fn tr12_a_decoder_may_come_back_inside_a_corrupt_span_with_the_true_flow() {
        let l =
            |i: u64, ip: u64| format!(r#"{{"k":"insn","i":{i},"ip":"{ip:#x}","off":5,"lost":"corrupt"}}"#);
        let (l1, l2, l3, l4) = (l(1, 0x20), l(2, 0x21), l(3, 0x22), l(4, 0x20));
        let end = r#"{"k":"insn","i":5,"ip":"0x30","off":9}"#;
        let span = r#"{"k":"span","class":"lost","cause":"corrupt","first":1,"error":"required","resume":8}"#;
        let p = pattern(&[A, span, &l1, &l2, &l3, &l4, end]);
        let ok = |out: &str| verdict(&p, out).is_none();
        assert!(ok("10\nerror\n30\n"));
        assert!(ok("10\nerror\n21\n22\n20\n30\n"));
        assert!(ok("10\nerror\n22\n20\n30\n"));
        // 0x20 is instruction 1 and 4: either.
        assert!(ok("10\nerror\n20\n30\n"));
        assert!(ok("10\nerror\n20\n21\n22\n20\n30\n"));
        // Lost again, and back: further on, or at the instruction it failed at.
        assert!(ok("10\nerror\n20\nerror\n22\n20\n30\n"));
        assert!(ok("10\nerror\n20\nerror\n21\n22\n20\n30\n"));
        assert!(ok("10\nerror\n21\nerror\n30\n"));
        // Skipped without an error, wrong, backwards, before the error.
        assert!(!ok("10\nerror\n21\n20\n30\n"));
        assert!(!ok("10\nerror\n99\n30\n"));
        assert!(!ok("10\nerror\n22\n21\n30\n"));
        assert!(!ok("10\n21\nerror\n30\n"));
        // Not in other lost spans: an overflow's instructions have no packets.
        let ovf = r#"{"k":"span","class":"lost","cause":"ovf","first":1,"error":"allowed","resume":null}"#;
        let o = |i: u64, ip: u64| format!(r#"{{"k":"insn","i":{i},"ip":"{ip:#x}","lost":"ovf"}}"#);
        let (o1, o2) = (o(1, 0x20), o(2, 0x21));
        let end2 = r#"{"k":"insn","i":3,"ip":"0x30","off":9}"#;
        let p = pattern(&[A, ovf, &o1, &o2, end2]);
        assert!(verdict(&p, "10\nerror\n21\n30\n").is_some());
    }

    #[test]
    fn tr5_anything_goes_in_an_undefined_span_and_the_rest_must_match() {
        let u = r#"{"k":"span","class":"undefined","cause":"gap","first":1,"error":"allowed","resume":5}"#;
        let p = pattern(&[A, u, r#"{"k":"insn","i":1,"ip":"0x20","undefined":"gap"}"#, D2]);
        assert_eq!(verdict(&p, "10\n99\n14\n77\nerror\n14\n"), None);
        // Issue 54 §10: the lines an undefined span took are counted (99, 14, 77 and the last
        // 14, read while a way lay in the span), so a summary can say why more lines agree
        // than the truth has instructions a decoder must or may give (2: 0x10 and 0x14).
        let v = check(&p, "10\n99\n14\n77\nerror\n14\n".as_bytes()).unwrap();
        assert_eq!((v.ips, v.in_undefined, p.instructions), (5, 4, 2));
        assert_eq!(check(&p, "10\n14\n".as_bytes()).unwrap().in_undefined, 1);
        assert_eq!(verdict(&p, "10\n14\n"), None);
        assert!(verdict(&p, "10\n99\n").is_some());
        let d = verdict(&p, "11\n").unwrap();
        assert_eq!(d.line, 1);
        assert!(d.expected.contains("instruction 0 at 0x10"), "{d}");
    }

    #[test]
    fn errors_anywhere_else_are_divergences_unless_the_stream_is_truncated() {
        let p = pattern(&[A, D1]);
        assert!(verdict(&p, "10\nerror\n14\n").is_some());
        assert!(verdict(&p, "10\n14\nerror\n").is_some());
        let t = truth("{\"truth\":1,\"truncated\":true}", &[A, D1]);
        let t = Pattern::read("t", t.as_bytes()).unwrap();
        assert_eq!(verdict(&t, "10\n14\nerror\n"), None);
    }

    #[test]
    fn a_wrong_version_or_a_broken_line_names_the_line() {
        let e = Pattern::read("t.jsonl", "{\"truth\":99}\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 1);
        let e = Pattern::read("t.jsonl", format!("{{\"truth\":1}}\n{A}\nnot json\n").as_bytes()).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("t.jsonl", 3));
    }

    /// An undefined span with one instruction, then `after` required ones from IP `ip`.
    fn undefined_then(i: u64, after: u64) -> Vec<String> {
        let mut v = vec![
            format!("{{\"k\":\"span\",\"class\":\"undefined\",\"cause\":\"gap\",\"first\":{i},\"error\":\"allowed\",\"resume\":null}}"),
            format!("{{\"k\":\"insn\",\"i\":{i},\"ip\":\"0x1\",\"undefined\":\"gap\"}}"),
        ];
        for k in 1..=after {
            v.push(format!(
                "{{\"k\":\"insn\",\"i\":{},\"ip\":\"{:#x}\",\"off\":0}}",
                i + k,
                0x1000 + i + k
            ));
        }
        v
    }

    #[test]
    fn tr5_tr8_the_work_is_linear_in_undefined_spans() {
        // Issue 39: every undefined span passed was carried on to the end, so each line cost
        // one step per span: quadratic. Now a span a later one has reached is dropped.
        let work = |spans: u64| {
            let lines: Vec<String> = (0..spans).flat_map(|s| undefined_then(s * 4, 3)).collect();
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            let p = pattern(&refs);
            let mut out = String::new();
            for s in 0..spans {
                // Two wrong lines inside the span, then the three it must give.
                out += &format!(
                    "0x99\nerror\n{:#x}\n{:#x}\n{:#x}\n",
                    0x1001 + s * 4,
                    0x1002 + s * 4,
                    0x1003 + s * 4
                );
            }
            let v = check(&p, out.as_bytes()).unwrap();
            assert_eq!(v.divergence, None);
            (v.work, 5 * spans + lines.len() as u64)
        };
        for spans in [100, 1000, 4000] {
            let (w, size) = work(spans);
            assert!(
                w <= 4 * size,
                "{spans} spans: {w} steps for {size} lines and items"
            );
        }
    }

    #[test]
    fn tr5_tr8_a_later_undefined_span_drops_earlier_ways_but_not_what_lies_between() {
        let mut lines = undefined_then(0, 2);
        lines.extend(undefined_then(3, 1));
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let p = pattern(&refs);
        // 0x1001 0x1002 are required between the spans; 0x1004 after the second.
        assert_eq!(verdict(&p, "77\n1001\n1002\n55\n66\n1004\n"), None);
        assert_eq!(verdict(&p, "1001\n1002\n1004\n"), None);
        assert_eq!(verdict(&p, "77\n1001\n1001\n1002\n1004\n1004\n"), None);
        let d = verdict(&p, "77\n1001\n1004\n").unwrap();
        assert_eq!(d.line, 3, "{d}");
        assert!(d.expected.contains("0x1002"), "{d}");
        assert!(verdict(&p, "77\n1002\n1004\n").is_some());
        assert!(verdict(&p, "1001\n1002\n").is_some());
    }

    #[test]
    fn tr1_tr8_a_truth_must_end_with_its_counted_end_record() {
        let full = truth("{\"truth\":1}", &[A, B, C, LOST, L3, D]);
        assert!(Pattern::read("t.jsonl", full.as_bytes()).is_ok());
        let all: Vec<&str> = full.lines().collect();
        for cut in 1..all.len() {
            let text = all[..cut].join("\n");
            let e = Pattern::read("t.jsonl", text.as_bytes()).unwrap_err();
            assert_eq!(e.line, cut, "cut after {cut}: {e}");
        }
        let e = Pattern::read("t.jsonl", full.replace("\"lost\":1", "\"lost\":2").as_bytes()).unwrap_err();
        assert_eq!(e.line, all.len());
        assert!(e.msg.contains("2 lost instruction(s)"), "{e}");
        let e = Pattern::read("t.jsonl", format!("\n{full}").as_bytes()).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        let e = Pattern::read("t.jsonl", "".as_bytes()).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }

    fn with_events(p: &Pattern, out: &str) -> Option<Divergence> {
        check_with(p, out.as_bytes(), Options::events(true))
            .unwrap()
            .divergence
    }

    const EN: &str = r#"{"k":"enable","ip":"0x10","off":0}"#;
    const INT: &str = r#"{"k":"async","from":"0x11","to":"0x20","off":3}"#;
    const AFTER_INT: &str = r#"{"k":"insn","i":1,"ip":"0x20","off":3}"#;
    const DIS: &str = r#"{"k":"disable","off":5}"#;

    /// TR10: ptxed's event lines, with and without `--event:ip`, `--offset` and `--event:time`
    /// columns; other bracketed lines are not events.
    #[test]
    fn tr10_event_lines_are_ptxeds_words() {
        let ev = |kind, ip, to| Some(Token::Event(Event { kind, ip, to }));
        assert_eq!(token("[enabled]"), ev(EventKind::Enabled, None, None));
        assert_eq!(
            token("[enabled, ip: 0000000000401000]"),
            ev(EventKind::Enabled, Some(0x401000), None)
        );
        assert_eq!(
            token("[resumed, ip: 10]"),
            ev(EventKind::Enabled, Some(0x10), None)
        );
        assert_eq!(token("[disabled]"), ev(EventKind::Disabled, None, None));
        assert_eq!(
            token("[disabled, at: 0000000000405c0a, ip: 0000000000405c0f]"),
            ev(EventKind::Disabled, None, None)
        );
        assert_eq!(
            token("[interrupt, from: 000000000040480a, to: 000000000040480f]"),
            ev(EventKind::Interrupt, Some(0x40480a), Some(0x40480f))
        );
        assert_eq!(token("[overflow]"), ev(EventKind::Overflow, None, None));
        assert_eq!(
            token("[0000000000001a2b  0000000000000040  overflow, ip: 0000000000401000]"),
            ev(EventKind::Overflow, None, None)
        );
        for line in ["[end of trace]", "[enabled", "[]"] {
            assert_eq!(token(line), None, "{line:?}");
        }
        // Other bracketed words are marks (TR11), not these events.
        for line in [
            "[paging, cr3: 0000000000001000]",
            "[exec mode: 64-bit]",
            "[tick]",
            "[bad words enabled]",
            "[enabled, ip: xyz]",
        ] {
            assert_eq!(token(line), Some(Token::Mark), "{line:?}");
        }
        assert_eq!(token("[1a0, 401000: error: bad opcode]"), Some(Token::Error));
    }

    /// TR11: a mark is due inside its window (after the instructions a decoder reaches through
    /// the packets before it, before the first it reaches only past it), with its words and
    /// IP; a missing, late, extra or changed mark diverges; a restated one may be left out.
    #[test]
    fn tr11_marks_must_come_in_their_window() {
        const B: &str = r#"{"k":"insn","i":1,"ip":"0x11","off":4}"#;
        const M: &str = r#"{"k":"mark","event":"ptwrite: 5","ip":"0x10","off":2,"early":1}"#;
        let p = pattern(&[EN, A, M, B, DIS]);
        let ok = |out: &str| with_events(&p, out).is_none();
        assert!(ok("[enabled]\n[ptwrite: 5]\n10\n11\n[disabled]\n"));
        assert!(ok(
            "[enabled]\n10\n[ptwrite: 5, ip: 0000000000000010]\n11\n[disabled]\n"
        ));
        assert!(ok(
            "[enabled]\n10\n[0000000000000002  ptwrite: 5]\n11\n[disabled]\n"
        ));
        // Late, missing, changed, with another IP, twice.
        assert!(!ok("[enabled]\n10\n11\n[ptwrite: 5]\n[disabled]\n"));
        assert!(!ok("[enabled]\n10\n11\n[disabled]\n"));
        assert!(!ok("[enabled]\n10\n[ptwrite: 6]\n11\n[disabled]\n"));
        assert!(!ok(
            "[enabled]\n10\n[ptwrite: 5, ip: 0000000000000011]\n11\n[disabled]\n"
        ));
        assert!(!ok("[enabled]\n10\n[ptwrite: 5]\n[ptwrite: 5]\n11\n[disabled]\n"));
        // An event the truth does not have.
        assert!(!ok("[enabled]\n10\n[ptwrite: 5]\n[cbr: 1f]\n11\n[disabled]\n"));
        // Without --events marks are not looked at.
        assert_eq!(verdict(&p, "10\n11\n"), None);
        let d = with_events(&p, "[enabled]\n10\n11\n[disabled]\n").unwrap();
        assert!(
            d.expected.contains("[ptwrite: 5, ip: 0x10]") && d.line == 3,
            "{d:?}"
        );
        // A restated mode may be left out, or given.
        let r = r#"{"k":"mark","event":"exec mode: 64-bit","off":2,"early":1,"opt":true}"#;
        let p = pattern(&[EN, A, r, B, DIS]);
        assert_eq!(with_events(&p, "[enabled]\n10\n11\n[disabled]\n"), None);
        assert_eq!(
            with_events(&p, "[enabled]\n10\n[exec mode: 64-bit]\n11\n[disabled]\n"),
            None
        );
    }

    /// TR11, TR8: perf script's `-F event,ip,synth` lines: `instructions:u:` with its IP is an
    /// instruction, a synthesized event is a mark in ptxed's words, other events are ignored.
    #[test]
    fn tr11_perf_lines_are_instructions_and_marks() {
        assert_eq!(
            token("     instructions:u:            400000"),
            Some(Token::Ip(0x400000))
        );
        assert_eq!(
            token("  instructions:ku:          abcdef"),
            Some(Token::Ip(0xabcdef))
        );
        assert_eq!(token("                 psb:  psb offs: 0      0"), None);
        let m = |l: &str| perf_mark(l.trim_start().as_bytes()).map(|(w, ip)| (w.into_owned(), ip));
        assert_eq!(
            m("             ptwrite:  IP: 1 payload: 0x6025c8                     400000"),
            Some(("ptwrite: 6025c8".into(), Some(0x400000)))
        );
        assert_eq!(
            m("                pwre:  hw: 1 cstate: 2 sub-cstate: 0                 1000"),
            Some(("pwre c2.0 hw".into(), Some(0x1000)))
        );
        assert_eq!(
            m("                pwrx:  deepest cstate: 0 last cstate: 1 wake reason: 0x1              1008"),
            Some(("pwrx int: c1 (c0)".into(), Some(0x1008)))
        );
        assert_eq!(
            m("   exstop:  IP: 1        1008"),
            Some(("exstop".into(), Some(0x1008)))
        );
        assert_eq!(
            m("   mwait:  hints: 0x50 extensions: 0x1    1000"),
            Some(("mwait 50 1".into(), Some(0x1000)))
        );
        assert_eq!(
            m("                 cbr:  cbr: 24 freq: 2400 MHz (100%)                    0"),
            Some(("cbr: 18".into(), Some(0)))
        );
        assert_eq!(
            token("             ptwrite:  IP: 1 payload: 0x6025c8   400000"),
            Some(Token::Mark)
        );
    }

    /// TR11: with perf's events only the marks perf synthesizes are due, and no flow event.
    #[test]
    fn tr11_perf_style_expects_only_perfs_marks() {
        const B: &str = r#"{"k":"insn","i":1,"ip":"0x11","off":4}"#;
        const P: &str = r#"{"k":"mark","event":"ptwrite: 5","ip":"0x10","off":2,"early":1}"#;
        const X: &str = r#"{"k":"mark","event":"exec mode: 64-bit","ip":"0x10","off":1,"early":0}"#;
        let p = pattern(&[X, EN, A, P, B, DIS]);
        let perf = |out: &str| {
            check_with(&p, out.as_bytes(), Options::perf_events())
                .unwrap()
                .divergence
        };
        assert_eq!(
            perf("instructions:u: 10\nptwrite:  IP: 1 payload: 0x5  10\ninstructions:u: 11\n"),
            None
        );
        assert!(perf("instructions:u: 10\ninstructions:u: 11\n").is_some());
        // With perf's time column in front.
        assert_eq!(
            perf("1.0: instructions:u: 10\n1.0: ptwrite:  IP: 1 payload: 0x5  10\n1.0: instructions:u: 11\n"),
            None
        );
        // ptxed's style wants the exec mode and the flow events.
        assert!(with_events(&p, "10\n[ptwrite: 5]\n11\n").is_some());
    }

    /// TR13: an instruction's time must lie from the time of the last timing packet before its
    /// carrier to the latest of those right after it (with their slack), within the tolerance;
    /// lines without a time, instructions before any timing packet and times a damage left
    /// unknown are not checked.
    #[test]
    fn tr13_times_lie_between_the_timing_packets_around_the_carrier() {
        const T0: &str = r#"{"k":"time","tsc":"0x1000","off":0}"#;
        const B: &str = r#"{"k":"insn","i":1,"ip":"0x11","off":4}"#;
        const T1: &str = r#"{"k":"time","tsc":"0x1010","slack":4,"off":6}"#;
        const C: &str = r#"{"k":"insn","i":2,"ip":"0x12","off":8}"#;
        let p = pattern(&[A, T0, B, T1, C]);
        let timed =
            |out: &str, tol| check_with(&p, out.as_bytes(), Options::default().with_time(tol)).unwrap();
        let ok = |out: &str, tol| timed(out, tol).divergence.is_none();
        // Before any timing packet: anything.
        assert!(ok("10 tsc: 5\n11 tsc: 1000\n12 tsc: 1010\n", 0));
        // Instruction 1 may have 0x1000 up to 0x1014 (0x1010 and its slack).
        assert!(ok("10\n11  tsc: 1014\n12 tsc=0x1010\n", 0));
        assert!(!ok("10\n11  tsc: 1015\n12\n", 0));
        assert!(ok("10\n11  tsc: 1015\n12\n", 1));
        assert!(!ok("10\n11  tsc: fff\n12\n", 0));
        // Instruction 2 at 0x1010 or later.
        let v = timed("10\n11\n12 tsc: 100f\n", 0);
        assert_eq!(v.divergence.map(|d| d.line), Some(3));
        assert_eq!(timed("10\n11 tsc: 1000\n12 tsc: 1010\n", 0).times, 2);
        // Without --time times are not looked at.
        assert_eq!(verdict(&p, "10\n11  tsc: 1\n12\n"), None);
        // A time a damage left unknown: anything.
        let u = r#"{"k":"time","tsc":"0x0","slack":18446744073709551615,"off":6}"#;
        let p = pattern(&[A, T0, B, u, C]);
        assert!(check_with(
            &p,
            "10\n11 tsc: 5000\n12 tsc: 99999999\n".as_bytes(),
            Options::default().with_time(0)
        )
        .unwrap()
        .divergence
        .is_none());
        assert_eq!(line_time(b"0x401000  tsc: 1000012b2"), Some(0x1000012b2));
        assert_eq!(line_time(b"0x401000"), None);
    }

    /// TR13: with `--time`, an instruction line whose time does not read (no hex digits, past
    /// 64 bits) is an error naming its line, not a line without a time: otherwise a decoder
    /// whose every time is garbage passes.
    #[test]
    fn tr13_a_time_that_does_not_read_is_an_error_naming_its_line() {
        const T0: &str = r#"{"k":"time","tsc":"0x1000","off":0}"#;
        const B: &str = r#"{"k":"insn","i":1,"ip":"0x11","off":4}"#;
        let p = pattern(&[A, T0, B]);
        for (out, line, words) in [
            ("10\n11 tsc: zz\n", 2, "'zz'"),
            (
                "10 tsc: 1\n11 tsc=0x10000000000000000\n",
                2,
                "'10000000000000000'",
            ),
            ("10 tsc:\n11\n", 1, "not a hex number"),
        ] {
            let e = check_with(&p, out.as_bytes(), Options::default().with_time(0)).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("line {line}: the time after `tsc")) && msg.contains(words),
                "{out:?}: {msg}"
            );
        }
        // Without --time times are not read, good or bad.
        assert_eq!(verdict(&p, "10\n11 tsc: zz\n"), None);
    }

    /// TR11: the words of a mark line are its fields but the IP ones, after ptxed's columns.
    #[test]
    fn tr11_mark_lines_are_words_and_an_ip() {
        let m = |l: &str| mark_line(l.as_bytes()).map(|(w, ip)| (w.into_owned(), ip));
        assert_eq!(m("[cbr: 1f]"), Some(("cbr: 1f".into(), None)));
        assert_eq!(
            m("[interrupt 14, cr2: 0000000000002000, ip: 0000000008048000]"),
            Some(("interrupt 14, cr2: 0000000000002000".into(), Some(0x8048000)))
        );
        assert_eq!(
            m("[000000000000002a  exstop, ip: 0000000000001008]"),
            Some(("exstop".into(), Some(0x1008)))
        );
        assert_eq!(m("[end of trace]"), None);
    }

    /// TR10: with `--events` every delivered event is required in its place; a missing, an extra,
    /// a misplaced event or one with another IP diverges; without it event lines are ignored.
    #[test]
    fn tr10_events_must_come_in_their_place() {
        let p = pattern(&[EN, A, INT, AFTER_INT, DIS]);
        let good = "[enabled, ip: 0000000000000010]\n10\n[interrupt, from: 0000000000000011, to: 0000000000000020]\n20\n[disabled]\n";
        assert_eq!(with_events(&p, good), None);
        let v = check_with(&p, good.as_bytes(), Options::events(true)).unwrap();
        assert_eq!((v.ips, v.events), (2, 3));
        // Kinds only, as plain ptxed prints them.
        assert_eq!(
            with_events(&p, "[enabled]\n10\n[interrupt]\n20\n[disabled]\n"),
            None
        );
        // Missing: the interrupt.
        let d = with_events(&p, "[enabled]\n10\n20\n[disabled]\n").unwrap();
        assert_eq!(d.line, 3, "{d}");
        assert!(d.expected.contains("[interrupt, from: 0x11, to: 0x20]"), "{d}");
        // Missing at the end: the disable.
        let d = with_events(&p, "[enabled]\n10\n[interrupt]\n20\n").unwrap();
        assert_eq!(d.line, 0, "{d}");
        assert!(d.expected.contains("[disabled]"), "{d}");
        // Extra: a second enable, an overflow.
        assert!(with_events(&p, "[enabled]\n[enabled]\n10\n[interrupt]\n20\n[disabled]\n").is_some());
        assert!(with_events(&p, "[enabled]\n10\n[overflow]\n[interrupt]\n20\n[disabled]\n").is_some());
        // Wrong order: the interrupt after the instruction it leads to.
        let d = with_events(&p, "[enabled]\n10\n20\n[interrupt]\n[disabled]\n").unwrap();
        assert_eq!(d.line, 3, "{d}");
        assert!(with_events(&p, "10\n[enabled]\n[interrupt]\n20\n[disabled]\n").is_some());
        // Another IP.
        assert!(with_events(
            &p,
            "[enabled, ip: 0000000000000011]\n10\n[interrupt]\n20\n[disabled]\n"
        )
        .is_some());
        assert!(with_events(
            &p,
            "[enabled]\n10\n[interrupt, from: 0000000000000011, to: 0000000000000021]\n20\n[disabled]\n"
        )
        .is_some());
        // Without --events: event lines ignored, present, missing or wrong.
        for out in [good, "10\n20\n", "[overflow]\n10\n[enabled]\n[enabled]\n20\n"] {
            assert_eq!(verdict(&p, out), None, "{out:?}");
        }
        assert!(with_events(&p, "10\n20\n").is_some());
    }

    /// TR10: events inside a lost span may be reported or not, but the overflow of an `ovf` span
    /// and what follows it are required; an event next to an optional run is optional; an event
    /// whose packet was not delivered is not expected.
    #[test]
    fn tr10_events_in_spans_and_optional_runs() {
        let ovf = [
            A,
            r#"{"k":"async","from":"0x10","to":"0x11","off":1}"#,
            B,
            r#"{"k":"span","class":"lost","cause":"ovf","first":2,"error":"allowed","resume":null}"#,
            r#"{"k":"insn","i":2,"ip":"0x12","lost":"ovf"}"#,
            r#"{"k":"async","from":"0x12","to":"0x13","off":null}"#,
            r#"{"k":"overflow","off":7}"#,
            r#"{"k":"enable","ip":"0x14","off":8}"#,
            r#"{"k":"insn","i":3,"ip":"0x14","off":8}"#,
        ];
        let p = pattern(&ovf);
        assert_eq!(
            with_events(&p, "10\n[interrupt]\n11\n[overflow]\n[enabled]\n14\n"),
            None
        );
        // The optional run, its interrupt included, may stop anywhere.
        assert_eq!(
            with_events(&p, "10\n[interrupt]\n[overflow]\n[enabled]\n14\n"),
            None
        );
        assert_eq!(with_events(&p, "10\n[overflow]\n[enabled]\n14\n"), None);
        // But not skip the interrupt and give what follows it.
        assert!(with_events(&p, "10\n11\n[overflow]\n[enabled]\n14\n").is_some());
        // The overflow and the enable after it are required.
        assert!(with_events(&p, "10\n[enabled]\n14\n").is_some());
        assert!(with_events(&p, "10\n[overflow]\n14\n").is_some());
        // Inside the span (before its overflow) events may come or not.
        assert_eq!(
            with_events(&p, "10\nerror\n[interrupt]\n[overflow]\n[enabled]\n14\n"),
            None
        );
        // In a corrupt span every event is optional, the enable of the PSB it resumes at too.
        let corrupt = [A, B, C, LOST, L3, r#"{"k":"enable","ip":"0x14","off":9}"#, D];
        let p = pattern(&corrupt);
        assert_eq!(with_events(&p, "10\nerror\n14\n"), None);
        assert_eq!(with_events(&p, "10\nerror\n[enabled]\n14\n"), None);
        assert!(
            with_events(&p, "10\n[enabled]\n14\n").is_some(),
            "the error is still required"
        );
    }
}
