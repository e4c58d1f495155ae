//! `ptemu verify`: checks a decoder's instruction output against a case's `truth.jsonl`
//! (`spec/truth.md`, TR8).
//!
//! The truth becomes a pattern: required IPs, runs of optional IPs a decoder may stop inside
//! (TR3), lost spans where it may only report errors (TR4; at least one for a `corrupt` span,
//! TR6), undefined spans where anything goes (TR5). The decoder's lines are matched against it by
//! following every way the pattern allows at once (a set of positions), so an undefined span
//! never makes the check guess where the decoder came back.
//!
//! Cost: a way that reached an undefined span stays there for every line after (anything goes
//! there), so it makes every way before it redundant: whatever output they accept, it accepts
//! too. The check drops them, so at most one undefined span is carried at a time and the work
//! is linear in the lines, but for ways that keep matching what follows that span from many
//! starting lines (a loop repeated right after it), each followed until it fails.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, BufRead, Read};

/// The longest line `verify` reads, in the truth or in the decoder's output (TR8): a longer one
/// is bad input (exit 2 with its line), so a file with no newline (`/dev/zero`) cannot take all
/// memory.
pub const MAX_LINE: usize = 1 << 20;

/// Reads the next line into `buf`, without its `\n` (or `\r\n`); `false` at the end of `r`.
/// A line longer than [`MAX_LINE`] is an `InvalidData` error.
fn next_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
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

/// One line of a decoder's output that matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// An instruction at this IP.
    Ip(u64),
    /// The decoder reported an error.
    Error,
}

/// Reads one line of decoder output (TR8): a first whitespace-separated token that is a hex
/// number (with or without `0x`) is an instruction IP; a first token `error`, or a ptxed error
/// line (`[offset, ip: error: ...]`), an error; anything else is ignored.
pub fn token(line: &str) -> Option<Token> {
    token_bytes(line.as_bytes())
}

/// [`token`] over raw bytes: a line need not be UTF-8 (a symbol name in another encoding); only
/// its ASCII words are looked at.
pub fn token_bytes(line: &[u8]) -> Option<Token> {
    let contains = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
    let first = line.split(|b| b.is_ascii_whitespace()).find(|w| !w.is_empty())?;
    if first.eq_ignore_ascii_case(b"error") || first.eq_ignore_ascii_case(b"error:") {
        return Some(Token::Error);
    }
    if first.starts_with(b"[") {
        return contains(b": error").then_some(Token::Error);
    }
    // perf script's `--itrace=e` lines: " instruction trace error type 1 ...".
    if first == b"instruction" && contains(b"instruction trace error") {
        return Some(Token::Error);
    }
    let digits = first
        .strip_prefix(b"0x")
        .or_else(|| first.strip_prefix(b"0X"))
        .unwrap_or(first);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    digits
        .iter()
        .try_fold(0u64, |v, &b| Some(v << 4 | u64::from((b as char).to_digit(16)?)))
        .map(Token::Ip)
}

#[derive(Clone, Debug)]
enum Item {
    Ip {
        ip: u64,
        index: u64,
        off: Option<u64>,
        /// Where the optional run it belongs to ends (the item after it), if optional.
        run_end: Option<usize>,
    },
    Gap {
        undefined: bool,
        error_required: bool,
        cause: String,
        first: u64,
    },
}

/// A case's truth as a pattern for [`check`].
#[derive(Clone, Debug)]
pub struct Pattern {
    items: Vec<Item>,
    truncated: bool,
    /// Instructions a decoder must or may give.
    pub instructions: u64,
}

/// Why a truth file cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{file}: line {line}: {msg}")]
#[non_exhaustive]
pub struct TruthError {
    /// The file.
    pub file: String,
    /// The line (1-based).
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    k: Option<Cow<'a, str>>,
    truth: Option<u32>,
    i: Option<u64>,
    #[serde(borrow)]
    ip: Option<Cow<'a, str>>,
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
    truncated: Option<bool>,
    counts: Option<super::Counts>,
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

impl Pattern {
    /// Reads `truth.jsonl` (named `file` in messages): the header on line 1, the facts, and the
    /// `end` record last, whose counts must be those of the lines (TR1), so a file cut short is
    /// refused rather than judged on its first part.
    pub fn read(file: &str, mut r: impl BufRead) -> Result<Self, TruthError> {
        let err = |line: usize, msg: String| TruthError {
            file: file.to_owned(),
            line,
            msg,
        };
        let mut items = Vec::new();
        let mut truncated = false;
        let mut seen = super::Counts::default();
        let mut end = None;
        let mut buf = Vec::with_capacity(256);
        let mut n = 0;
        loop {
            n += 1;
            if !next_line(&mut r, &mut buf).map_err(|e| err(n, e.to_string()))? {
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
            let l: Line = serde_json::from_slice(&buf).map_err(|e| err(n, e.to_string()))?;
            if n == 1 {
                match l.truth {
                    Some(super::VERSION) => {}
                    Some(v) => {
                        return Err(err(
                            n,
                            format!("truth format {v}; this ptemu reads {}", super::VERSION),
                        ))
                    }
                    None => return Err(err(n, "not a truth file: no {\"truth\": version} header".into())),
                }
                truncated = l.truncated.unwrap_or(false);
                continue;
            }
            match l.k.as_deref() {
                Some("insn") => {
                    seen.instructions += 1;
                    if l.undefined.is_some() {
                        seen.undefined += 1;
                        continue;
                    }
                    if l.lost.is_some() {
                        seen.lost += 1;
                        continue;
                    }
                    let ip =
                        l.ip.as_deref()
                            .and_then(parse_hex)
                            .ok_or_else(|| err(n, "insn without a 0x-hex \"ip\"".into()))?;
                    let optional = l.opt == Some(true);
                    if optional {
                        seen.optional += 1;
                    } else {
                        seen.required += 1;
                    }
                    items.push(Item::Ip {
                        ip,
                        index: l.i.unwrap_or(0),
                        off: l.off,
                        run_end: optional.then_some(0),
                    });
                }
                Some("span") => {
                    seen.spans += 1;
                    items.push(Item::Gap {
                        undefined: l.class.as_deref() == Some("undefined"),
                        error_required: l.error.as_deref() == Some("required"),
                        cause: l.cause.map(Cow::into_owned).unwrap_or_default(),
                        first: l.first.unwrap_or(0),
                    })
                }
                Some("end") => {
                    let c = l
                        .counts
                        .ok_or_else(|| err(n, "an end record without \"counts\"".into()))?;
                    let pairs = [
                        ("instruction", c.instructions, seen.instructions),
                        ("required instruction", c.required, seen.required),
                        ("optional instruction", c.optional, seen.optional),
                        ("lost instruction", c.lost, seen.lost),
                        ("undefined instruction", c.undefined, seen.undefined),
                        ("span", c.spans, seen.spans),
                    ];
                    if let Some((what, said, has)) = pairs.iter().find(|p| p.1 != p.2) {
                        return Err(err(
                            n,
                            format!("the end record counts {said} {what}(s), the lines before it have {has}"),
                        ));
                    }
                    end = Some(n);
                }
                Some(_) => {}
                None => return Err(err(n, "a line without \"k\"".into())),
            }
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
        // Each optional IP may skip to the end of its run.
        let mut end = items.len();
        for s in (0..items.len()).rev() {
            match &mut items[s] {
                Item::Ip { run_end: Some(e), .. } => *e = end,
                _ => end = s,
            }
        }
        Ok(Pattern {
            items,
            truncated,
            instructions: seen.required + seen.optional,
        })
    }
}

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
            write!(f, "the decoder's output ended; expected {}", self.expected)
        } else {
            write!(
                f,
                "line {}: expected {}; the decoder gave {}",
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
    /// The first divergence, if any.
    pub divergence: Option<Divergence>,
    /// The matcher's work: every position of the truth it followed, once for each line (the
    /// cost of the check, linear in the lines when no output repeats what follows an undefined
    /// span; tests count it rather than time it).
    pub work: u64,
}

/// A way through the pattern: the item it is at, and whether it has given an error there.
type State = (usize, bool);

/// The set of ways after each line, kept in two vectors and a stamp per state (no allocation per
/// line).
struct Matcher<'p> {
    p: &'p Pattern,
    states: Vec<State>,
    next: Vec<State>,
    /// The round in which each state (`2·item + error`) was last added to `next`.
    stamp: Vec<u64>,
    round: u64,
    /// The furthest undefined span a way has reached: that way accepts anything and stays, so
    /// every way before it is redundant and dropped (an undefined span that a later one has
    /// followed is not carried on).
    floor: usize,
    work: u64,
}

impl<'p> Matcher<'p> {
    fn new(p: &'p Pattern) -> Self {
        let mut m = Matcher {
            p,
            states: Vec::new(),
            next: Vec::new(),
            stamp: vec![0; 2 * (p.items.len() + 1)],
            round: 1,
            floor: 0,
            work: 0,
        };
        m.add((0, false));
        m.close();
        m
    }

    fn add(&mut self, s: State) {
        let k = 2 * s.0 + usize::from(s.1);
        if self.stamp[k] != self.round {
            self.stamp[k] = self.round;
            self.next.push(s);
            if matches!(self.p.items.get(s.0), Some(Item::Gap { undefined: true, .. })) {
                self.floor = self.floor.max(s.0);
            }
        }
    }

    /// Adds to `next` what its ways reach without a line, drops the redundant ones and makes it
    /// the current set.
    fn close(&mut self) {
        let mut i = 0;
        while let Some(&(s, e)) = self.next.get(i) {
            i += 1;
            self.work += 1;
            match self.p.items.get(s) {
                Some(Item::Ip {
                    run_end: Some(end), ..
                }) => self.add((*end, false)),
                Some(Item::Gap { error_required, .. }) if !error_required || e => self.add((s + 1, false)),
                _ => {}
            }
        }
        let floor = self.floor;
        self.next.retain(|s| s.0 >= floor);
        std::mem::swap(&mut self.states, &mut self.next);
        self.next.clear();
    }

    /// Moves every way past `t`; returns the furthest position that could not take it.
    fn step(&mut self, t: Token) -> Option<usize> {
        self.round += 1;
        let states = std::mem::take(&mut self.states);
        let mut dead = None;
        for &(s, e) in &states {
            let next = match (self.p.items.get(s), t) {
                (Some(Item::Ip { ip, .. }), Token::Ip(x)) if *ip == x => Some((s + 1, false)),
                (Some(Item::Gap { undefined: true, .. }), _) => Some((s, e || t == Token::Error)),
                (Some(Item::Gap { .. }), Token::Error) => Some((s, true)),
                (None, Token::Error) if self.p.truncated => Some((s, e)),
                _ => None,
            };
            match next {
                Some(n) => self.add(n),
                None if s < self.p.items.len() => dead = Some(dead.map_or(s, |d: usize| d.max(s))),
                None => {}
            }
        }
        self.states = states;
        self.close();
        dead
    }
}

impl Pattern {
    fn expected(&self, s: usize) -> String {
        match self.items.get(s) {
            Some(Item::Ip { ip, index, off, .. }) => format!(
                "instruction {index} at {ip:#x} (stream offset {})",
                off.map_or("unknown".into(), |o| o.to_string())
            ),
            Some(Item::Gap {
                cause,
                first,
                error_required,
                ..
            }) => {
                if *error_required {
                    format!("an error for the {cause} damage before instruction {first}")
                } else {
                    format!("nothing for the {cause} span from instruction {first}")
                }
            }
            None => "no more instructions".into(),
        }
    }
}

/// Matches a decoder's output lines against `pattern` (TR8). A line need not be UTF-8; a line
/// longer than [`MAX_LINE`], or a read error, is an error naming the line.
pub fn check(pattern: &Pattern, mut output: impl BufRead) -> io::Result<Verdict> {
    let mut m = Matcher::new(pattern);
    let mut v = Verdict {
        ips: 0,
        errors: 0,
        divergence: None,
        work: 0,
    };
    // The furthest place the decoder's output left the truth, reported if no way through the
    // pattern is found: after an undefined span the failure may show only at the end.
    let mut furthest: Option<(usize, Divergence)> = None;
    let given = |t: Token| match t {
        Token::Ip(ip) => format!("{ip:#x}"),
        Token::Error => "an error".into(),
    };
    let mut buf = Vec::with_capacity(256);
    let mut n = 0u64;
    loop {
        n += 1;
        let more = next_line(&mut output, &mut buf)
            .map_err(|e| io::Error::new(e.kind(), format!("line {n}: {e}")))?;
        if !more {
            break;
        }
        let Some(t) = token_bytes(&buf) else { continue };
        match t {
            Token::Ip(_) => v.ips += 1,
            Token::Error => v.errors += 1,
        }
        let dead = m.step(t);
        let here = |s: usize| Divergence {
            line: n,
            expected: pattern.expected(s),
            given: given(t),
        };
        if m.states.is_empty() {
            // Where the furthest way through died now (or past the end of the truth).
            v.divergence = Some(here(dead.unwrap_or(pattern.items.len())));
            v.work = m.work;
            return Ok(v);
        }
        if let Some(d) = dead {
            if furthest.as_ref().is_none_or(|f| d > f.0) {
                furthest = Some((d, here(d)));
            }
        }
    }
    v.work = m.work;
    let end = pattern.items.len();
    if !m.states.iter().any(|s| s.0 == end) {
        let far = m.states.iter().map(|s| s.0).max().unwrap_or(0);
        v.divergence = Some(match furthest {
            Some((d, div)) if d >= far => div,
            _ => Divergence {
                line: 0,
                expected: pattern.expected(far),
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

    #[test]
    fn tokens_are_hex_ips_errors_or_ignored() {
        assert_eq!(token("0x401000"), Some(Token::Ip(0x401000)));
        assert_eq!(token("  401000  mov eax, 1"), Some(Token::Ip(0x401000)));
        assert_eq!(token("error: bad packet"), Some(Token::Error));
        assert_eq!(token("[1a0, 401000: error: bad opcode]"), Some(Token::Error));
        assert_eq!(token("[enabled]"), None);
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

    #[test]
    fn tr3_tr6_optional_prefix_then_a_required_error_then_the_resumption() {
        let p = pattern(&[A, B, C, LOST, L3, D]);
        assert_eq!(verdict(&p, "10\n11\n12\nerror\n14\n"), None);
        assert_eq!(verdict(&p, "10\n11\nerror\n14\n"), None);
        assert_eq!(verdict(&p, "10\nerror\nerror\n14\n"), None);
        // No error where the stream cannot decode.
        assert!(verdict(&p, "10\n11\n12\n14\n").is_some());
        // A lost instruction given.
        assert!(verdict(&p, "10\n11\n12\nerror\n13\n14\n").is_some());
        // Optional ones out of order: 12 without 11.
        assert!(verdict(&p, "10\n12\nerror\n14\n").is_some());
        // Missing the required end.
        let d = verdict(&p, "10\nerror\n").unwrap();
        assert_eq!(d.line, 0);
        assert!(d.expected.contains("0x14"), "{d}");
    }

    #[test]
    fn tr5_anything_goes_in_an_undefined_span_and_the_rest_must_match() {
        let u = r#"{"k":"span","class":"undefined","cause":"gap","first":1,"error":"allowed","resume":5}"#;
        let p = pattern(&[A, u, r#"{"k":"insn","i":1,"ip":"0x20","undefined":"gap"}"#, D]);
        assert_eq!(verdict(&p, "10\n99\n14\n77\nerror\n14\n"), None);
        assert_eq!(verdict(&p, "10\n14\n"), None);
        assert!(verdict(&p, "10\n99\n").is_some());
        let d = verdict(&p, "11\n").unwrap();
        assert_eq!(d.line, 1);
        assert!(d.expected.contains("instruction 0 at 0x10"), "{d}");
    }

    #[test]
    fn errors_anywhere_else_are_divergences_unless_the_stream_is_truncated() {
        let p = pattern(&[A, D]);
        assert!(verdict(&p, "10\nerror\n14\n").is_some());
        assert!(verdict(&p, "10\n14\nerror\n").is_some());
        let t = truth("{\"truth\":1,\"truncated\":true}", &[A, D]);
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
}
