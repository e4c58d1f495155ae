//! The C library's text conventions that pttc's reading of a line rests on, so that ptemu accepts
//! and rejects the same spellings: `strtoull` number prefixes (base 0: `0x` hex, a leading `0`
//! octal, else decimal; an optional sign; leading white space), whole-token conversions, `strtok`
//! tokenising and `sscanf("%x")`.

/// Why a number did not convert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumError {
    /// Not a number, or characters after it.
    Parse,
    /// The number does not fit.
    TooBig,
}

impl std::fmt::Display for NumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NumError::Parse => "not an unsigned integer",
            NumError::TooBig => "integer too big",
        })
    }
}

/// C's `isspace` in the "C" locale.
pub fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// A number prefix as `strtoull(s, &end, base)` reads it: the value (wrapped by a leading `-`, as
/// C does), the bytes consumed, and whether it overflowed. `None` when no digit was read.
pub fn strtoull(s: &str, base: u32) -> Option<(u64, usize, bool)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && is_c_space(b[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        negative = b[i] == b'-';
        i += 1;
    }
    let hex_prefix = |at: usize| {
        at + 2 < b.len() + 1
            && b.get(at) == Some(&b'0')
            && matches!(b.get(at + 1), Some(b'x') | Some(b'X'))
            && b.get(at + 2).is_some_and(|c| c.is_ascii_hexdigit())
    };
    let radix = match base {
        0 if hex_prefix(i) => {
            i += 2;
            16
        }
        0 if b.get(i) == Some(&b'0') => 8,
        0 => 10,
        16 => {
            if hex_prefix(i) {
                i += 2;
            }
            16
        }
        r => r,
    };
    let start = i;
    let mut value: u64 = 0;
    let mut overflow = false;
    while i < b.len() {
        let Some(d) = (b[i] as char).to_digit(radix) else {
            break;
        };
        match value
            .checked_mul(radix as u64)
            .and_then(|v| v.checked_add(d as u64))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return None;
    }
    if overflow {
        return Some((u64::MAX, i, true));
    }
    Some((if negative { value.wrapping_neg() } else { value }, i, false))
}

/// The whole of `s` as an unsigned number (pttc's `str_to_uint64`): nothing may follow it.
pub fn to_u64(s: &str, base: u32) -> Result<u64, NumError> {
    match strtoull(s, base) {
        None => Err(NumError::Parse),
        Some((_, _, true)) => Err(NumError::TooBig),
        Some((v, n, false)) if n == s.len() => Ok(v),
        Some(_) => Err(NumError::Parse),
    }
}

/// [`to_u64`] limited to `bits` bits.
pub fn to_uint(s: &str, bits: u32) -> Result<u64, NumError> {
    let v = to_u64(s, 0)?;
    if bits < 64 && v >> bits != 0 {
        return Err(NumError::TooBig);
    }
    Ok(v)
}

/// `token` as a number of at most `bits` bits; `what` names it in the error.
pub fn num(token: Option<&str>, bits: u32, what: &str) -> Result<u64, String> {
    let t = token.ok_or_else(|| format!("missing {what}"))?;
    to_uint(t, bits).map_err(|e| format!("bad {what} '{t}': {e}"))
}

/// `parse_uint64` and friends: the first token of " ," as a number; the rest is not looked at.
pub fn first_number(payload: &str, bits: u32, what: &str) -> Result<u64, String> {
    num(Strtok::new(payload).next(" ,"), bits, what)
}

/// The `raw-8`, `raw-16`, `raw-32` and `raw-64` directives (of `@pt` and `@sb` alike): the
/// payload's first number, little-endian, in that many bits; `None` for another name.
pub fn raw_le(name: &str, payload: &str) -> Option<Result<Vec<u8>, String>> {
    let bits = match name {
        "raw-8" => 8,
        "raw-16" => 16,
        "raw-32" => 32,
        "raw-64" => 64,
        _ => return None,
    };
    Some(first_number(payload, bits, "value").map(|v| v.to_le_bytes()[..bits as usize / 8].to_vec()))
}

/// `sscanf(s, "%x")`: a hex number at the start of `s` after white space, with an optional `0x`.
pub fn scan_hex(s: &str) -> Option<u64> {
    strtoull(s, 16).map(|(v, _, _)| v)
}

/// C's `strtok` over one string: each call skips leading delimiters, returns the run up to the
/// next delimiter, and consumes that one delimiter. The delimiters may change between calls.
#[derive(Clone, Debug)]
pub struct Strtok<'a> {
    rest: &'a str,
}

impl<'a> Strtok<'a> {
    /// Tokenises `s`.
    pub fn new(s: &'a str) -> Self {
        Strtok { rest: s }
    }

    /// The next token, or `None` at the end.
    pub fn next(&mut self, delims: &str) -> Option<&'a str> {
        let is_delim = |c: char| delims.contains(c);
        let s = self.rest.trim_start_matches(is_delim);
        if s.is_empty() {
            self.rest = s;
            return None;
        }
        match s.find(is_delim) {
            Some(end) => {
                let delim_len = s[end..].chars().next().map_or(0, char::len_utf8);
                self.rest = &s[end + delim_len..];
                Some(&s[..end])
            }
            None => {
                self.rest = "";
                Some(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_c_reads_them() {
        assert_eq!(to_u64("0x1f", 0), Ok(0x1f));
        assert_eq!(to_u64("010", 0), Ok(8));
        assert_eq!(to_u64("10", 0), Ok(10));
        assert_eq!(to_u64(" 7", 0), Ok(7));
        assert_eq!(to_u64("-1", 0), Ok(u64::MAX));
        assert_eq!(to_u64("7 ", 0), Err(NumError::Parse));
        assert_eq!(to_u64("", 0), Err(NumError::Parse));
        assert_eq!(to_u64("0x", 0), Err(NumError::Parse));
        assert_eq!(to_u64("0x10000000000000000", 0), Err(NumError::TooBig));
        assert_eq!(to_u64("1000", 16), Ok(0x1000));
        assert_eq!(to_uint("256", 8), Err(NumError::TooBig));
        assert_eq!(to_uint("255", 8), Ok(255));
        assert_eq!(scan_hex("00000010 90"), Some(0x10));
        assert_eq!(scan_hex("l1:"), None);
        assert_eq!(scan_hex("a1:"), Some(0xa1));
    }

    #[test]
    fn strtok_skips_and_consumes_delimiters() {
        let mut t = Strtok::new("3: %l1  x");
        assert_eq!(t.next(" :"), Some("3"));
        assert_eq!(t.next(" :"), Some("%l1"));
        assert_eq!(t.next(" "), Some("x"));
        assert_eq!(t.next(" "), None);
        let mut t = Strtok::new(" , ");
        assert_eq!(t.next(" ,"), None);
    }
}
