//! The labels pttc knows, found as pttc finds them: not from the assembler's symbol table but by
//! reading yasm's listing (`yasm -L nasm`). This module rebuilds the listing lines from
//! [`super::image`] and applies pttc's reading to them, quirks included:
//!
//! - a label counts only as the first word of a line's text and only when it ends in `:`
//!   (`l5:hlt` or `label hlt` are labels to yasm but not to pttc);
//! - a label alone on its line takes the address of the next listing line that has one, and the
//!   lines skipped on the way (that one included) are not read for labels or section switches;
//!   and its name is not its own: pttc reads the name from its line buffer after the buffer
//!   was refilled with that next line, so the label is named by that line's text from the
//!   label's column on (`l1:` over `nop` defines a label `nop`, not `l1`);
//! - addresses are section offsets plus `org`, or plus the section's `vstart` after a
//!   `[section ...]` line, whose `start=`/`vstart=` values are read as hex digits;
//! - `section_<name>_length` sums, over the listing lines after the section directive, the
//!   significant bytes of each line's hex column when that column is a hex number as a whole
//!   (so `times` lines, marked `<rept>`, and the first lines of wrapped long ones add nothing);
//! - `org`, `section_<name>_start` and `section_<name>_vstart` are labels too; every name must
//!   be unique.

use super::ctext::{scan_hex, to_u64, Strtok};
use super::image::ListingLine;
use super::PttcError;
use std::collections::hash_map::{Entry, HashMap};

/// Longest label name pttc accepts, plus one.
pub const LABEL_MAX: usize = 256;

/// The listing bytes yasm puts on one line, and its marks.
const BYTES_PER_LINE: usize = 9;

/// One source line's part of the rebuilt listing: a listing line, or one per 9 bytes it shows.
/// Nothing is kept per listing line: [`Line`] makes a line's words when they are read, so a
/// data line of megabytes costs its bytes, not a listing line of strings per 9 of them.
#[derive(Clone, Copy, Debug)]
struct Src<'a> {
    /// The source line (1-based), for messages.
    source: usize,
    /// The listing number of its first listing line.
    number: usize,
    /// Its text column.
    text: &'a str,
    /// The offset and the bytes it shows, when it has bytes.
    bytes: Option<(u64, &'a [u8])>,
    /// A `times` line (its last listing line is marked `<rept>`).
    repeated: bool,
}

impl Src<'_> {
    /// How many listing lines it takes.
    fn count(&self) -> usize {
        match self.bytes {
            None => 1,
            Some((_, b)) => b.len().div_ceil(BYTES_PER_LINE),
        }
    }
}

/// One line of the rebuilt listing: its words are its number, then the address and the hex
/// column when it has bytes, then (on the first of a source line's lines) its text's words.
#[derive(Clone, Copy, Debug)]
struct Line<'a> {
    srcs: &'a [Src<'a>],
    s: usize,
    chunk: usize,
}

impl<'a> Line<'a> {
    fn src(&self) -> &'a Src<'a> {
        &self.srcs[self.s]
    }

    /// The first line of `srcs`.
    fn first(srcs: &'a [Src<'a>]) -> Option<Line<'a>> {
        (!srcs.is_empty()).then_some(Line { srcs, s: 0, chunk: 0 })
    }

    /// The line after this one.
    fn next(self) -> Option<Line<'a>> {
        if self.chunk + 1 < self.src().count() {
            return Some(Line {
                chunk: self.chunk + 1,
                ..self
            });
        }
        (self.s + 1 < self.srcs.len()).then_some(Line {
            s: self.s + 1,
            chunk: 0,
            ..self
        })
    }

    /// The source line it comes from (1-based).
    fn source(&self) -> usize {
        self.src().source
    }

    /// The text column (empty on a continuation line).
    fn text(&self) -> &'a str {
        match self.chunk {
            0 => self.src().text,
            _ => "",
        }
    }

    /// The words of the text column.
    fn text_words(&self) -> impl Iterator<Item = &'a str> {
        self.text().split(' ').filter(|w| !w.is_empty())
    }

    /// Word `k` of the line.
    fn token(&self, k: usize) -> Option<String> {
        let src = self.src();
        if k == 0 {
            return Some((src.number + self.chunk).to_string());
        }
        let Some((offset, bytes)) = src.bytes else {
            return self.text_words().nth(k - 1).map(str::to_string);
        };
        match k {
            1 => Some(format!("{offset:08X}")),
            2 => {
                let from = self.chunk * BYTES_PER_LINE;
                let chunk = &bytes[from..bytes.len().min(from + BYTES_PER_LINE)];
                let mut hex: String = chunk.iter().map(|b| format!("{b:02X}")).collect();
                if self.chunk + 1 < src.count() {
                    hex.push('-');
                } else if src.repeated {
                    hex.push_str("<rept>");
                }
                Some(hex)
            }
            _ => self.text_words().nth(k - 3).map(str::to_string),
        }
    }

    /// What follows `pattern` in the line's words joined by blanks, if it is there. `pattern`
    /// starts with `[`, which only the text column can hold.
    fn after(&self, pattern: &str) -> Option<String> {
        if !self.text().contains(pattern) {
            return None;
        }
        let joined = self.text_words().collect::<Vec<_>>().join(" ");
        let at = joined.find(pattern)?;
        Some(joined[at + pattern.len()..].to_string())
    }
}

/// Rebuilds the listing: a line per source line (none for a vanished one) plus a continuation
/// line per further 9 bytes. Returns the source lines' parts and how many listing lines there
/// are in all, counting yasm's leading `%line` line.
fn rebuild(lines: &[ListingLine]) -> (Vec<Src<'_>>, usize) {
    let mut out = Vec::with_capacity(lines.len());
    let mut number = 1usize;
    for (i, l) in lines.iter().enumerate() {
        if l.vanished {
            continue;
        }
        let src = Src {
            source: i + 1,
            number: number + 1,
            text: &l.text,
            bytes: l.offset.map(|o| (o, &l.shown[..])),
            repeated: l.repeated,
        };
        let count = src.count();
        if count > 0 {
            number += count;
            out.push(src);
        }
    }
    (out, number)
}

/// The labels pttc reads from the listing: names to addresses, looked up in constant time (a
/// file of 100,000 labels used to take seconds in a list searched from the front).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    entries: HashMap<String, u64>,
}

impl Labels {
    /// A label's address.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.entries.get(name).copied()
    }

    /// Adds a label; names are unique and shorter than [`LABEL_MAX`].
    pub fn add(&mut self, name: &str, addr: u64) -> Result<(), String> {
        if name.len() >= LABEL_MAX {
            return Err(format!("label name '{name}' is too long"));
        }
        match self.entries.entry(name.to_string()) {
            Entry::Occupied(_) => Err(format!("label '{name}' is not unique")),
            Entry::Vacant(v) => {
                v.insert(addr);
                Ok(())
            }
        }
    }

    fn set(&mut self, name: &str, addr: u64) {
        if let Some(a) = self.entries.get_mut(name) {
            *a = addr;
        }
    }
}

/// The labels of an assembled file and how many of its source lines pttc goes through (yasm's
/// listing decides: a `times 0` line is missing from it, a long line takes several).
#[derive(Clone, Debug)]
pub struct Reading {
    /// The labels.
    pub labels: Labels,
    /// pttc reads source lines 1 to this one.
    pub lines_read: usize,
}

fn section_label(name: &str, attribute: &str) -> String {
    format!("section_{name}_{attribute}")
}

/// Reads the labels as pttc does.
pub fn read(lines: &[ListingLine]) -> Result<Reading, PttcError> {
    let (lst, count) = rebuild(lines);
    let mut labels = Labels::default();
    let mut org: Option<u64> = None;
    let mut length: Option<String> = None;

    // Pass 1: org, the section labels and their lengths.
    let mut next = Line::first(&lst);
    while let Some(l) = next {
        next = l.next();
        let err = |m: String| PttcError::new(l.source(), m);
        if let Some(rest) = l.after("[section") {
            let mut t = Strtok::new(&rest);
            let name = t
                .next(" ")
                .ok_or_else(|| err("section without a name".into()))?
                .to_string();
            let len_label = section_label(&name, "length");
            labels.add(&len_label, 0).map_err(err)?;
            length = Some(len_label);
            while let Some(attr) = t.next(" =]") {
                if attr != "start" && attr != "vstart" {
                    return Err(err(format!("section {name}: unknown attribute '{attr}'")));
                }
                let value = t
                    .next(" ]")
                    .ok_or_else(|| err(format!("section {name}: {attr} has no value")))?;
                let v =
                    scan_hex(value).ok_or_else(|| err(format!("section {name}: bad {attr} '{value}'")))?;
                labels.add(&section_label(&name, attr), v).map_err(err)?;
            }
            continue;
        }
        if let Some(rest) = l.after("[org") {
            let end = rest.find(']').ok_or_else(|| err("no org directive".into()))?;
            let v = to_u64(&rest[..end], 0).map_err(|e| err(format!("org: {e}")))?;
            labels.add("org", v).map_err(err)?;
            org = Some(v);
            continue;
        }
        if let Some(name) = &length {
            let (Some(number), Some(addr), Some(hex)) = (l.token(0), l.token(1), l.token(2)) else {
                continue;
            };
            if to_u64(&number, 10).is_err() || to_u64(&addr, 16).is_err() {
                continue;
            }
            let Ok(mut v) = to_u64(&hex, 16) else { continue };
            let mut size = 0;
            while v != 0 {
                size += 1;
                v >>= 8;
            }
            let total = labels.get(name).unwrap_or(0) + size;
            labels.set(name, total);
        }
    }
    let Some(mut base) = org else {
        return Err(PttcError::new(0, "no org directive"));
    };

    // Pass 2: the labels.
    let mut next = Line::first(&lst);
    while let Some(l) = next {
        next = l.next();
        let err = |m: String| PttcError::new(l.source(), m);
        if let Some(rest) = l.after("[section") {
            let mut t = Strtok::new(&rest);
            let name = t.next(" ").unwrap_or("");
            base = labels
                .get(&section_label(name, "vstart"))
                .ok_or_else(|| err(format!("section {name} has no vstart")))?;
            continue;
        }
        let Some(second) = l.token(1) else {
            continue;
        };
        if let Some(label) = second.strip_suffix(':') {
            // A label alone: the next line with an address gives it.
            let mut j = l.next();
            let mut found = None;
            while let Some(m) = j {
                if let Some(a) = m.token(1).and_then(|t| scan_hex(&t)) {
                    found = Some((a, m));
                    break;
                }
                j = m.next();
            }
            let (addr, m) = found.ok_or_else(|| err(format!("label '{label}' has no address")))?;
            let laddr = addr
                .checked_add(base)
                .ok_or_else(|| err(format!("label '{label}': address overflows")))?;
            // The name as pttc ends up with it: the found line's text from the label's column.
            let text = l.text();
            let column = text.len() - text.trim_start_matches(' ').len();
            let name = m.text().get(column..).unwrap_or("");
            labels.add(name, laddr).map_err(|m| err(format!("{m} (label '{label}' alone on its line takes the name '{name}' from the next line with an address, as in pttc)")))?;
            next = m.next();
            continue;
        }
        let Some(addr) = scan_hex(&second) else { continue };
        let Some(label) = l.token(3) else {
            continue;
        };
        let Some(label) = label.strip_suffix(':') else {
            continue;
        };
        if l.token(2).is_none() {
            continue;
        }
        let laddr = addr
            .checked_add(base)
            .ok_or_else(|| err(format!("label '{label}': address overflows")))?;
        labels.add(label, laddr).map_err(err)?;
    }

    Ok(Reading {
        labels,
        lines_read: (count - 1).min(lines.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{image, parse};
    use super::*;

    fn reading(src: &str) -> Result<Reading, PttcError> {
        let img = image::assemble(&parse::split_lines(src)).unwrap();
        read(&img.lines)
    }

    #[test]
    fn labels_with_org_and_sections() {
        let r = reading(
            "org 0x1000\nbits 64\nl0: nop\nl1:\n\n  hlt\nsection text vstart=0xa000 start=0x1010\nl2: jmp rax\nl3: hlt\n",
        )
        .unwrap();
        let l = &r.labels;
        assert_eq!(l.get("org"), Some(0x1000));
        assert_eq!(l.get("l0"), Some(0x1000));
        assert_eq!(l.get("l1"), None);
        assert_eq!(l.get(" hlt"), Some(0x1001));
        assert_eq!(l.get("l2"), Some(0xa000));
        assert_eq!(l.get("l3"), Some(0xa002));
        assert_eq!(l.get("section_text_start"), Some(0x1010));
        assert_eq!(l.get("section_text_vstart"), Some(0xa000));
        assert_eq!(l.get("section_text_length"), Some(3));
        assert_eq!(r.lines_read, 9);
    }

    #[test]
    fn pttc_quirks() {
        // A lone label is named by the next line with an address, whose own label is not read;
        // `l5:hlt` is no label to pttc.
        let r = reading("org 0\nbits 64\nl1:\nl2: nop\nl5:hlt\nl6: hlt\n").unwrap();
        assert_eq!(r.labels.get("l1"), None);
        assert_eq!(r.labels.get("l2: nop"), Some(0));
        assert_eq!(r.labels.get("l2"), None);
        assert_eq!(r.labels.get("l5"), None);
        assert_eq!(r.labels.get("l6"), Some(2));
        // A long line takes two listing lines; a `times 0` line none.
        let r = reading("org 0\nbits 64\ndb 1,2,3,4,5,6,7,8,9,10\ntimes 0 nop\n; x\n; y\n").unwrap();
        assert_eq!(r.lines_read, 6);
        let r = reading("org 0\nbits 64\ntimes 0 nop\n; x\n").unwrap();
        assert_eq!(r.lines_read, 3);
        // Two lone labels over the same text: not unique, as pttc finds.
        assert!(reading("org 0\nl1:\nnop\nl2:\nnop\n").is_err());
        // No org: an error.
        assert!(reading("bits 64\nnop\n").is_err());
    }

    #[test]
    fn section_length_counts_what_pttc_counts() {
        // `times` lines (<rept>) count nothing; the tail of a wrapped line counts; leading zero
        // bytes of a hex column count nothing.
        let r = reading(
            "org 0\nbits 64\nsection s vstart=0 start=0\ntimes 3 nop\ndb 1,2,3,4,5,6,7,8,9,10,11\ndb 0,1\nhlt\n",
        )
        .unwrap();
        assert_eq!(r.labels.get("section_s_length"), Some(2 + 1 + 1));
    }
}
