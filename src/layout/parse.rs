//! Parsing the layout TOML with errors that name the file and line.

use super::{Layout, LAST_INDEX};
use crate::output::TopaEntry;
use crate::regs::CpuProfile;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Output scheme of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// Table of Physical Addresses (CTL.ToPA=1).
    Topa,
    /// Single-range output (CTL.ToPA=0).
    SingleRange,
}

impl std::fmt::Display for Scheme {
    /// The scheme as the SDM names it: "ToPA" or "single-range".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scheme::Topa => "ToPA",
            Scheme::SingleRange => "single-range",
        })
    }
}

/// One ToPA table block: entries from `first_index` on, at `base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSpec {
    /// Table base (physical).
    pub base: u64,
    /// Index of the first listed entry.
    pub first_index: u32,
    /// The entries.
    pub entries: Vec<EntrySpec>,
}

/// One listed entry, resolved to its raw value, with the line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntrySpec {
    /// The raw 64-bit entry.
    pub raw: u64,
    /// 1-based line in the layout file.
    pub line: usize,
}

/// A layout that cannot be used: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct LayoutError {
    /// The layout file.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

/// A u64 written as a TOML integer or as a string (`"0xffff000000000000"`), since TOML integers
/// stop at i64::MAX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct U64(u64);

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = U64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number: a TOML integer, or a string such as \"0xffff000000000000\"")
            }
            fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<U64, E> {
                u64::try_from(i)
                    .map(U64)
                    .map_err(|_| E::custom(format!("{i} is negative")))
            }
            fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<U64, E> {
                Ok(U64(u))
            }
            fn visit_i128<E: serde::de::Error>(self, i: i128) -> Result<U64, E> {
                u64::try_from(i)
                    .map(U64)
                    .map_err(|_| E::custom(format!("{i} does not fit in 64 bits (0..=0xffffffffffffffff)")))
            }
            fn visit_u128<E: serde::de::Error>(self, u: u128) -> Result<U64, E> {
                self.visit_i128(i128::try_from(u).unwrap_or(i128::MAX))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<U64, E> {
                parse_u64(s).map(U64).ok_or_else(|| {
                    E::custom(format!(
                        "`{}` is not a number (decimal digits, or 0x and hex digits)",
                        s.chars().take(40).collect::<String>()
                    ))
                })
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A number written as decimal digits or `0x` and hex digits, `_` allowed between digits; no
/// sign, no other prefix.
fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (s.as_str(), 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayout {
    cpu: Option<Spanned<String>>,
    maxphyaddr: Option<Spanned<u8>>,
    #[serde(default)]
    errata: Vec<Spanned<String>>,
    output: RawOutput,
    #[serde(default)]
    table: Vec<RawTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    scheme: Scheme,
    base: U64,
    mask_ptrs: Option<U64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    base: Spanned<U64>,
    #[serde(default)]
    first_index: u32,
    entries: Vec<Spanned<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    region: Option<U64>,
    size: Option<String>,
    size_code: Option<u8>,
    #[serde(default)]
    int: bool,
    #[serde(default)]
    stop: bool,
    end: Option<U64>,
    raw: Option<U64>,
}

impl RawEntry {
    fn resolve(&self) -> Result<u64, String> {
        let kinds = [self.region.is_some(), self.end.is_some(), self.raw.is_some()];
        if kinds.iter().filter(|&&k| k).count() != 1 {
            return Err("an entry needs exactly one of `region`, `end` or `raw`".into());
        }
        if let Some(U64(raw)) = self.raw {
            if self.size.is_some() || self.size_code.is_some() || self.int || self.stop {
                return Err("`raw` gives the whole entry; drop size/size_code/int/stop".into());
            }
            return Ok(raw);
        }
        if let Some(U64(next)) = self.end {
            if self.size.is_some() || self.size_code.is_some() {
                return Err("an `end` entry has no size".into());
            }
            if next & 0xfff != 0 {
                return Err(format!(
                    "end target {next:#x} is not 4 KiB aligned (use `raw` for such bits)"
                ));
            }
            // INT/STOP on END are legal to write (they are T5 errors when reached).
            return Ok(TopaEntry::end_to(next)
                .with_int(self.int)
                .with_stop(self.stop)
                .bits());
        }
        let U64(region) = self.region.expect("one kind is set");
        if region & 0xfff != 0 {
            return Err(format!(
                "region {region:#x} is not 4 KiB aligned (use `raw` for such bits)"
            ));
        }
        let code = match (&self.size, self.size_code) {
            (Some(_), Some(_)) => return Err("give `size` or `size_code`, not both".into()),
            (None, None) => {
                return Err("a region entry needs `size` (\"4K\"..\"128M\") or `size_code`".into())
            }
            (Some(s), None) => {
                size_code_of(s).ok_or_else(|| format!("size `{s}` is not one of 4K, 8K, 16K, … 64M, 128M"))?
            }
            (None, Some(c)) if c > 15 => return Err(format!("size_code {c} does not fit the 4-bit field")),
            (None, Some(c)) => c,
        };
        Ok(TopaEntry::region(region, code)
            .with_int(self.int)
            .with_stop(self.stop)
            .bits())
    }
}

/// The Size code of "4K" … "128M" (any text: `None` for anything else).
pub fn size_code_of(s: &str) -> Option<u8> {
    let s = s.trim().to_ascii_uppercase();
    let (num, unit) = if let Some(n) = s.strip_suffix('K') {
        (n, 1u64 << 10)
    } else {
        (s.strip_suffix('M')?, 1u64 << 20)
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bytes = num.parse::<u64>().ok()?.checked_mul(unit)?;
    (0..16u8).find(|&c| 4096u64 << c == bytes)
}

/// Line numbers of byte offsets in a text, each found by a binary search over the line starts
/// (counted once), so a layout of N entries is located in O(N log N), not O(N²).
struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    fn new(src: &str) -> Lines {
        let starts = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', src.as_bytes()).map(|i| i + 1))
            .collect();
        Lines { starts }
    }

    /// The 1-based line of the span's start.
    fn of(&self, span: Range<usize>) -> usize {
        self.starts.partition_point(|&s| s <= span.start)
    }
}

impl Layout {
    /// Reads (at most [`crate::config_file::MAX_CONFIG_BYTES`]) and parses a layout file.
    pub fn load(path: &Path) -> Result<Layout, LayoutError> {
        let src = crate::config_file::read_config(path).map_err(|e| LayoutError {
            path: path.into(),
            line: None,
            message: e.to_string(),
        })?;
        Layout::parse(path, &src)
    }

    /// Parses layout text; `path` names it in errors.
    pub fn parse(path: &Path, src: &str) -> Result<Layout, LayoutError> {
        let err = |line, message| LayoutError {
            path: path.into(),
            line,
            message,
        };
        let lines = Lines::new(src);
        let line_of = |_: &str, span: Range<usize>| lines.of(span);
        let raw: RawLayout = toml::from_str(src).map_err(|e| {
            let line = e.span().map(|s| line_of(src, s));
            err(line, e.message().to_string())
        })?;
        let mut cpu = match &raw.cpu {
            Some(name) => CpuProfile::named(name.get_ref())
                .map_err(|e| err(Some(line_of(src, name.span())), e.to_string()))?,
            None => CpuProfile::default(),
        };
        if let Some(m) = &raw.maxphyaddr {
            let v = *m.get_ref();
            if !(36..=52).contains(&v) {
                return Err(err(
                    Some(line_of(src, m.span())),
                    format!("maxphyaddr {v} is outside 36..=52"),
                ));
            }
            cpu.maxphyaddr = v;
        }
        for e in &raw.errata {
            // CP2: `NAME` adds, `-NAME` removes, `none` clears the profile's errata.
            cpu.errata = cpu
                .errata
                .edit(e.get_ref())
                .map_err(|x| err(Some(line_of(src, e.span())), x.to_string()))?;
        }
        let mut tables = Vec::new();
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        for t in &raw.table {
            let tline = line_of(src, t.base.span());
            let base = t.base.get_ref().0;
            if base & 0x7 != 0 {
                return Err(err(
                    Some(tline),
                    format!("table base {base:#x} is not 8-byte aligned"),
                ));
            }
            let last = u64::from(t.first_index) + t.entries.len() as u64;
            if !t.entries.is_empty() && last - 1 > LAST_INDEX {
                return Err(err(
                    Some(tline),
                    format!("entries run past index {LAST_INDEX:#x} (T2)"),
                ));
            }
            if base.checked_add(8 * last).is_none() {
                let msg = format!("table at {base:#x} runs past the top of the address space");
                return Err(err(Some(tline), msg));
            }
            let mut entries = Vec::with_capacity(t.entries.len());
            for (i, e) in t.entries.iter().enumerate() {
                let line = line_of(src, e.span());
                let raw = e.get_ref().resolve().map_err(|m| err(Some(line), m))?;
                let pa = base + 8 * (u64::from(t.first_index) + i as u64);
                if let Some(prev) = seen.insert(pa, line) {
                    return Err(err(
                        Some(line),
                        format!("entry at {pa:#x} is also given on line {prev}"),
                    ));
                }
                entries.push(EntrySpec { raw, line });
            }
            tables.push(TableSpec {
                base,
                first_index: t.first_index,
                entries,
            });
        }
        if raw.output.scheme == Scheme::SingleRange && !tables.is_empty() {
            return Err(err(None, "single-range output takes no [[table]] blocks".into()));
        }
        Ok(Layout {
            cpu,
            scheme: raw.output.scheme,
            base: raw.output.base.0,
            mask_ptrs: raw.output.mask_ptrs.map_or(0x7f, |m| m.0),
            tables,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_names_map_to_codes() {
        assert_eq!(size_code_of("4K"), Some(0));
        assert_eq!(size_code_of("8k"), Some(1));
        assert_eq!(size_code_of("2M"), Some(9));
        assert_eq!(size_code_of("128M"), Some(15));
        assert_eq!(size_code_of("256M"), None);
        assert_eq!(size_code_of("5K"), None);
        assert_eq!(size_code_of("K"), None);
    }
}
