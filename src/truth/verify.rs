//! `ptemu verify`: checks a decoder's instruction output against a case's `truth.jsonl`
//! (`spec/truth.md`, TR8).
//!
//! The truth becomes a pattern: required IPs, runs of optional IPs a decoder may stop inside
//! (TR3), lost spans where it may only report errors (TR4; at least one for a `corrupt` span,
//! TR6), undefined spans where anything goes (TR5). The decoder's lines are matched against it by
//! following every way the pattern allows at once (a set of positions), so an undefined span
//! never makes the check guess where the decoder came back.

use std::collections::BTreeSet;
use std::fmt;
use std::io::BufRead;

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
    let first = line.split_whitespace().next()?;
    if first.eq_ignore_ascii_case("error") || first.eq_ignore_ascii_case("error:") {
        return Some(Token::Error);
    }
    if first.starts_with('[') {
        return line.contains(": error").then_some(Token::Error);
    }
    // perf script's `--itrace=e` lines: " instruction trace error type 1 ...".
    if first == "instruction" && line.contains("instruction trace error") {
        return Some(Token::Error);
    }
    let digits = first
        .strip_prefix("0x")
        .or_else(|| first.strip_prefix("0X"))
        .unwrap_or(first);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok().map(Token::Ip)
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
struct Line {
    k: Option<String>,
    truth: Option<u32>,
    i: Option<u64>,
    ip: Option<String>,
    off: Option<u64>,
    opt: Option<bool>,
    lost: Option<String>,
    undefined: Option<String>,
    class: Option<String>,
    cause: Option<String>,
    error: Option<String>,
    first: Option<u64>,
    truncated: Option<bool>,
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

impl Pattern {
    /// Reads `truth.jsonl` (named `file` in messages).
    pub fn read(file: &str, r: impl BufRead) -> Result<Self, TruthError> {
        let err = |line: usize, msg: String| TruthError {
            file: file.to_owned(),
            line,
            msg,
        };
        let mut items = Vec::new();
        let mut truncated = false;
        let mut instructions = 0;
        let mut header = false;
        for (n, text) in r.lines().enumerate() {
            let n = n + 1;
            let text = text.map_err(|e| err(n, e.to_string()))?;
            if text.trim().is_empty() {
                continue;
            }
            let l: Line = serde_json::from_str(&text).map_err(|e| err(n, e.to_string()))?;
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
                header = true;
                continue;
            }
            match l.k.as_deref() {
                Some("insn") => {
                    if l.lost.is_some() || l.undefined.is_some() {
                        continue;
                    }
                    let ip =
                        l.ip.as_deref()
                            .and_then(parse_hex)
                            .ok_or_else(|| err(n, "insn without a 0x-hex \"ip\"".into()))?;
                    instructions += 1;
                    let optional = l.opt == Some(true);
                    items.push(Item::Ip {
                        ip,
                        index: l.i.unwrap_or(0),
                        off: l.off,
                        run_end: optional.then_some(0),
                    });
                }
                Some("span") => items.push(Item::Gap {
                    undefined: l.class.as_deref() == Some("undefined"),
                    error_required: l.error.as_deref() == Some("required"),
                    cause: l.cause.unwrap_or_default(),
                    first: l.first.unwrap_or(0),
                }),
                Some(_) => {}
                None => return Err(err(n, "a line without \"k\"".into())),
            }
        }
        if !header {
            return Err(err(1, "empty: no header".into()));
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
            instructions,
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
pub struct Verdict {
    /// Instruction lines read.
    pub ips: u64,
    /// Error lines read.
    pub errors: u64,
    /// The first divergence, if any.
    pub divergence: Option<Divergence>,
}

type State = (usize, bool);

impl Pattern {
    fn closure(&self, states: &mut BTreeSet<State>) {
        let mut work: Vec<State> = states.iter().copied().collect();
        while let Some((s, e)) = work.pop() {
            let next = match self.items.get(s) {
                Some(Item::Ip {
                    run_end: Some(end), ..
                }) => Some((*end, false)),
                Some(Item::Gap { error_required, .. }) if !error_required || e => Some((s + 1, false)),
                _ => None,
            };
            if let Some(n) = next {
                if states.insert(n) {
                    work.push(n);
                }
            }
        }
    }

    /// The states after `t`; `dead`: the furthest position that could not take `t`.
    fn step(&self, states: &BTreeSet<State>, t: Token, dead: &mut Option<usize>) -> BTreeSet<State> {
        let mut out = BTreeSet::new();
        for &(s, e) in states {
            let next = match (self.items.get(s), t) {
                (Some(Item::Ip { ip, .. }), Token::Ip(x)) if *ip == x => Some((s + 1, false)),
                (Some(Item::Gap { undefined: true, .. }), _) => Some((s, e || t == Token::Error)),
                (Some(Item::Gap { .. }), Token::Error) => Some((s, true)),
                (None, Token::Error) if self.truncated => Some((s, e)),
                _ => None,
            };
            if next.is_none() && s < self.items.len() {
                *dead = Some(dead.map_or(s, |d| d.max(s)));
            }
            out.extend(next);
        }
        self.closure(&mut out);
        out
    }

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

/// Matches a decoder's output lines against `pattern` (TR8).
pub fn check(pattern: &Pattern, output: impl BufRead) -> std::io::Result<Verdict> {
    let mut states = BTreeSet::from([(0usize, false)]);
    pattern.closure(&mut states);
    let mut v = Verdict {
        ips: 0,
        errors: 0,
        divergence: None,
    };
    // The furthest place the decoder's output left the truth, reported if no way through the
    // pattern is found: after an undefined span the failure may show only at the end.
    let mut furthest: Option<(usize, Divergence)> = None;
    let given = |t: Token| match t {
        Token::Ip(ip) => format!("{ip:#x}"),
        Token::Error => "an error".into(),
    };
    for (n, line) in output.lines().enumerate() {
        let line = line?;
        let Some(t) = token(&line) else { continue };
        match t {
            Token::Ip(_) => v.ips += 1,
            Token::Error => v.errors += 1,
        }
        let mut dead = None;
        let next = pattern.step(&states, t, &mut dead);
        let here = |s: usize| Divergence {
            line: n as u64 + 1,
            expected: pattern.expected(s),
            given: given(t),
        };
        if next.is_empty() {
            // Where the furthest way through died now (or past the end of the truth).
            v.divergence = Some(here(dead.unwrap_or(pattern.items.len())));
            return Ok(v);
        }
        if let Some(d) = dead {
            if furthest.as_ref().is_none_or(|f| d > f.0) {
                furthest = Some((d, here(d)));
            }
        }
        states = next;
    }
    let end = pattern.items.len();
    if !states.iter().any(|s| s.0 == end) {
        let far = states.iter().map(|s| s.0).max().unwrap_or(0);
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

    fn pattern(lines: &[&str]) -> Pattern {
        let mut text = String::from("{\"truth\":1,\"truncated\":false}\n");
        for l in lines {
            text += l;
            text.push('\n');
        }
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
        let t = Pattern::read(
            "t",
            format!("{{\"truth\":1,\"truncated\":true}}\n{A}\n{D}\n").as_bytes(),
        )
        .unwrap();
        assert_eq!(verdict(&t, "10\n14\nerror\n"), None);
    }

    #[test]
    fn a_wrong_version_or_a_broken_line_names_the_line() {
        let e = Pattern::read("t.jsonl", "{\"truth\":99}\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 1);
        let e = Pattern::read("t.jsonl", format!("{{\"truth\":1}}\n{A}\nnot json\n").as_bytes()).unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("t.jsonl", 3));
    }
}
