//! Reading a .ptt file: its lines, the `@pt` / `@sb` directive in a line's comment, and the yasm
//! statement in front of the comment (labels, `org`, `bits`, `section`, `ALIGN`, `times`, data and
//! instructions; the instructions themselves are read by [`super::asm`]).

use super::asm::{self, Insn};
use super::ctext::is_c_space;

/// The largest `ALIGN` taken (a page of 64 KiB; yasm's own tests go no higher).
const MAX_ALIGN: u64 = 0x1_0000;

/// The lines of a file as pttc splits them: at `\n` or `\r\n`; a final line ending ends the last
/// line rather than starting an empty one.
pub fn split_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') {
        lines.pop();
    }
    for line in &mut lines {
        if let Some(l) = line.strip_suffix('\r') {
            *line = l;
        }
    }
    lines
}

/// Which marker a directive came with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// `@pt`: a trace packet, a label, or `.exp`.
    Pt,
    /// `@sb`: sideband.
    Sb,
}

/// A directive as pttc cuts it out of a comment: the line is lower-cased, the name runs from the
/// marker to the first `(` (leading white space dropped, nothing else trimmed) and the payload
/// from there to the first `)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directive {
    /// `@pt` or `@sb`.
    pub marker: Marker,
    /// `[label:] name`, as written (lower case).
    pub name: String,
    /// Between the parentheses (lower case).
    pub payload: String,
}

/// The directive in `line`'s comment, if any: `Ok(None)` for a line without a `;` comment that
/// holds `@pt ` or `@sb `; an error when the marker is there but the parentheses are not.
pub fn find_directive(line: &str) -> Result<Option<Directive>, String> {
    let lower = line.to_ascii_lowercase();
    let Some(semi) = lower.find(';') else {
        return Ok(None);
    };
    let comment = &lower[semi + 1..];
    let (marker, rest) = match comment.find("@pt ") {
        Some(at) => (Marker::Pt, &comment[at + 4..]),
        None => match comment.find("@sb ") {
            Some(at) => (Marker::Sb, &comment[at + 4..]),
            None => return Ok(None),
        },
    };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
    let Some(open) = rest.find('(') else {
        return Err("invalid syntax: missing '('".into());
    };
    let Some(close) = rest[open..].find(')') else {
        return Err("invalid syntax: missing ')'".into());
    };
    Ok(Some(Directive {
        marker,
        name: rest[..open].to_string(),
        payload: rest[open + 1..open + close].to_string(),
    }))
}

/// One line's yasm statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// A `name:` label in front of the statement, as yasm reads it.
    pub label: Option<String>,
    /// What the line does.
    pub kind: StmtKind,
    /// The line as yasm's listing shows it: the comment gone, white space collapsed (leading
    /// white space to one space), and the directives in their bracketed form (`[org 0x1000]`,
    /// `[section text vstart=...]`).
    pub listing: String,
}

/// What a statement does.
#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// Nothing (an empty line, a comment, a label alone).
    Empty,
    /// `org ADDR`.
    Org(u64),
    /// `bits 16|32|64`.
    Bits(u32),
    /// `section NAME [vstart=ADDR] [start=ADDR]`.
    Section {
        /// The section's name.
        name: String,
        /// Its virtual address.
        vstart: Option<u64>,
        /// Its load address (file offset plus org).
        start: Option<u64>,
    },
    /// `ALIGN N`: pad with NOPs to a multiple of N.
    Align(u64),
    /// `[times N] item`.
    Emit {
        /// The repeat count of `times N`; `None` without `times`.
        times: Option<u64>,
        /// Data or an instruction.
        item: Item,
    },
}

/// What a line emits.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// An instruction.
    Insn(Insn),
    /// `db` / `dw` / `dd` / `dq` values, `size` bytes each.
    Data {
        /// Bytes per value.
        size: u8,
        /// The values, little-endian, `size` bytes each (what the line emits once).
        bytes: Vec<u8>,
    },
}

/// Whether `s` is a yasm identifier (a label name).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '.')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '#' | '@' | '~' | '?'))
}

/// A yasm number: `0x1F`, `1Fh`, `0b101`, `42`, optionally negated.
pub fn parse_number(s: &str) -> Option<u64> {
    let s = s.trim();
    // One leading minus (a second one is no number): the value negated modulo 2^64, as yasm's.
    if let Some(rest) = s.strip_prefix('-') {
        return match rest.trim_start().starts_with('-') {
            true => None,
            false => parse_number(rest).map(u64::wrapping_neg),
        };
    }
    let lower = s.to_ascii_lowercase();
    let (digits, radix) = if let Some(h) = lower.strip_prefix("0x") {
        (h, 16)
    } else if let Some(h) = lower.strip_prefix("0b") {
        (h, 2)
    } else if let Some(h) = lower.strip_suffix('h') {
        if !h.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        (h, 16)
    } else {
        (lower.as_str(), 10)
    };
    if digits.is_empty() {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The part of a line in front of its comment.
pub fn code_part(line: &str) -> &str {
    match line.find(';') {
        Some(at) => &line[..at],
        None => line,
    }
}

/// Reads one line's statement. Anything outside the subset is an error naming what.
pub fn parse_stmt(line: &str) -> Result<Stmt, String> {
    let raw = code_part(line);
    let code = raw.trim();
    // yasm's listing collapses white space; leading white space shows as one space.
    let mut listing = code.split_whitespace().collect::<Vec<_>>().join(" ");
    if !code.is_empty() && raw.starts_with(char::is_whitespace) {
        listing.insert(0, ' ');
    }
    let (label, rest) = split_label(code);
    let rest = rest.trim();
    let mut stmt = Stmt {
        label: label.map(str::to_string),
        kind: StmtKind::Empty,
        listing,
    };
    if rest.is_empty() {
        return Ok(stmt);
    }
    // `[org 0x1000]` is the same as `org 0x1000`.
    let bare = match rest.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .ok_or_else(|| format!("missing ']' in '{rest}'"))?
            .trim(),
        None => rest,
    };
    let (word, args) = match bare.find(|c: char| c.is_whitespace()) {
        Some(at) => (&bare[..at], bare[at..].trim()),
        None => (bare, ""),
    };
    let keyword = word.to_ascii_lowercase();
    let bracketed = |k: &str| format!("[{k} {}]", args.split_whitespace().collect::<Vec<_>>().join(" "));
    match keyword.as_str() {
        "org" => {
            let v = parse_number(args).ok_or_else(|| format!("org: bad address '{args}'"))?;
            stmt.kind = StmtKind::Org(v);
            stmt.listing = bracketed("org");
        }
        "bits" => {
            let v = match parse_number(args) {
                Some(v @ (16 | 32 | 64)) => v as u32,
                _ => return Err(format!("bits: expected 16, 32 or 64, got '{args}'")),
            };
            stmt.kind = StmtKind::Bits(v);
            stmt.listing = bracketed("bits");
        }
        "section" | "segment" => {
            let mut words = args.split_whitespace();
            let name = words.next().ok_or("section: no name")?.to_string();
            let (mut vstart, mut start) = (None, None);
            for attr in words {
                let (key, value) = attr
                    .split_once('=')
                    .ok_or_else(|| format!("section: unsupported attribute '{attr}'"))?;
                let v = parse_number(value)
                    .ok_or_else(|| format!("section: bad address '{value}' in '{attr}'"))?;
                match key.to_ascii_lowercase().as_str() {
                    "vstart" => vstart = Some(v),
                    "start" => start = Some(v),
                    _ => return Err(format!("section: unsupported attribute '{attr}'")),
                }
            }
            stmt.kind = StmtKind::Section { name, vstart, start };
            stmt.listing = bracketed("section");
        }
        "align" => {
            let v = parse_number(args).ok_or_else(|| format!("ALIGN: bad alignment '{args}'"))?;
            if v == 0 || !v.is_power_of_two() {
                return Err(format!("ALIGN: {args} is not a power of two"));
            }
            if v > MAX_ALIGN {
                return Err(format!("ALIGN: {args} is over {MAX_ALIGN:#x}"));
            }
            stmt.kind = StmtKind::Align(v);
            stmt.listing = bracketed("align");
        }
        "times" => {
            let (count, item) = match args.find(|c: char| c.is_whitespace()) {
                Some(at) => (&args[..at], args[at..].trim()),
                None => return Err("times: no instruction".into()),
            };
            let times = parse_number(count).ok_or_else(|| format!("times: bad count '{count}'"))?;
            stmt.kind = StmtKind::Emit {
                times: Some(times),
                item: parse_item(item)?,
            };
        }
        _ => {
            stmt.kind = StmtKind::Emit {
                times: None,
                item: parse_item(rest)?,
            }
        }
    }
    Ok(stmt)
}

/// `name:` at the start of `code`, and what follows it.
fn split_label(code: &str) -> (Option<&str>, &str) {
    let end = code
        .find(|c: char| c.is_whitespace() || c == ':' || c == ',' || c == '[')
        .unwrap_or(code.len());
    if code[end..].starts_with(':') && is_identifier(&code[..end]) {
        (Some(&code[..end]), &code[end + 1..])
    } else {
        (None, code)
    }
}

/// Data (`db`, `dw`, `dd`, `dq`) or an instruction.
fn parse_item(text: &str) -> Result<Item, String> {
    let (word, args) = match text.find(|c: char| c.is_whitespace()) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, ""),
    };
    let size = match word.to_ascii_lowercase().as_str() {
        "db" => 1,
        "dw" => 2,
        "dd" => 4,
        "dq" => 8,
        _ => return asm::parse_insn(text).map(Item::Insn),
    };
    // The bytes, not the values: a `db` line of a million values costs a megabyte.
    let mut bytes = Vec::new();
    for v in args.split(',') {
        let n = parse_number(v).ok_or_else(|| format!("{word}: bad value '{}'", v.trim()))?;
        let signed = n as i64;
        let fits = size == 8 || n >> (size * 8) == 0 || (signed < 0 && signed >= -(1i64 << (size * 8 - 1)));
        if !fits {
            return Err(format!("{word}: value '{}' does not fit", v.trim()));
        }
        bytes.extend_from_slice(&n.to_le_bytes()[..size as usize]);
    }
    Ok(Item::Data { size, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_pttc_splits_them() {
        assert_eq!(split_lines("a\r\nb\nc\n"), vec!["a", "b", "c"]);
        assert_eq!(split_lines("a\n\nb"), vec!["a", "", "b"]);
        assert!(split_lines("").is_empty() || split_lines("") == vec![""]);
    }

    #[test]
    fn directives_are_cut_out_of_comments() {
        let d = find_directive("l1: nop ; @pt P1: FUP(3: %L1)").unwrap().unwrap();
        assert_eq!(d.marker, Marker::Pt);
        assert_eq!(d.name, "p1: fup");
        assert_eq!(d.payload, "3: %l1");
        let d = find_directive(";; @sb primary(pevent)").unwrap().unwrap();
        assert_eq!(d.marker, Marker::Sb);
        assert_eq!(d.name, "primary");
        assert_eq!(find_directive("nop").unwrap(), None);
        assert_eq!(find_directive("; @ptx psb()").unwrap(), None);
        assert!(find_directive("; @pt psb").is_err());
        assert!(find_directive("; @pt psb(").is_err());
        // The name is not trimmed at its end.
        assert_eq!(find_directive("; @pt psb ()").unwrap().unwrap().name, "psb ");
    }

    #[test]
    fn statements() {
        let s = parse_stmt("l1:     call l4 ; comment").unwrap();
        assert_eq!(s.label.as_deref(), Some("l1"));
        assert_eq!(s.listing, "l1: call l4");
        assert!(matches!(
            s.kind,
            StmtKind::Emit {
                times: None,
                item: Item::Insn(_)
            }
        ));
        let s = parse_stmt("org 0x100000").unwrap();
        assert_eq!(s.kind, StmtKind::Org(0x100000));
        assert_eq!(s.listing, "[org 0x100000]");
        let s = parse_stmt("section text vstart=0xa000 start=0x1000").unwrap();
        assert_eq!(
            s.kind,
            StmtKind::Section {
                name: "text".into(),
                vstart: Some(0xa000),
                start: Some(0x1000)
            }
        );
        assert_eq!(s.listing, "[section text vstart=0xa000 start=0x1000]");
        let s = parse_stmt("l0: times 5 nop").unwrap();
        assert!(matches!(s.kind, StmtKind::Emit { times: Some(5), .. }));
        let s = parse_stmt("l1: db 0x0f, 0x34 ").unwrap();
        assert_eq!(
            s.kind,
            StmtKind::Emit {
                times: None,
                item: Item::Data {
                    size: 1,
                    bytes: vec![0x0f, 0x34]
                }
            }
        );
        assert_eq!(parse_stmt("ALIGN 0x100").unwrap().kind, StmtKind::Align(0x100));
        assert_eq!(parse_stmt("l5:hlt").unwrap().label.as_deref(), Some("l5"));
        assert_eq!(parse_stmt("l5:").unwrap().kind, StmtKind::Empty);
        assert!(parse_stmt("bits 8").is_err());
        assert!(parse_stmt("db 0x100").is_err());
        assert!(parse_stmt("frobnicate rax").is_err());
    }
}
