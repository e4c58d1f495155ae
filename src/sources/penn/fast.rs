//! The fast path for one Penn line: eight or sixteen bytes per step (SWAR, SSE2), in place in the
//! reader's buffer.
//!
//! [`parse_in`] accepts only what [`parse_line`](super::parse::parse_line) accepts and returns the
//! same [`Uop`]; on anything it does not handle (a bad field, a control byte that is not
//! whitespace, a byte of 0x7f or more, a number of more than 16 digits, a line over 128 bytes) it
//! returns `None` and the reader runs the exact parser, so every error message still comes from
//! one place.
//!
//! How: one pass over the line builds a bitmask of its token bytes (every byte above 0x20); token
//! starts and ends fall out of the mask by shifts; each number is then read as one or two 8-byte
//! words ending at its last digit, checked and converted without a per-digit loop. The bytes after
//! the line (the next lines, in the reader's buffer) are read but masked out.

use super::{BranchOutcome, FlagsUse, MemAccess, Mnemonic, Uop};

/// The longest line the fast path takes (real lines are about 90 bytes).
const MAX_FAST: usize = 128;
/// The bytes from a line's start the fast path may read: the token mask's 16-byte blocks, and a
/// name's fixed-size copy starting anywhere in the line.
const ROOM: usize = MAX_FAST + Mnemonic::CAPACITY;
/// The number of fields.
const FIELDS: u32 = 14;

/// A line at offset 0 and what follows it.
type Room = [u8; ROOM];

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;
const ZEROS: u64 = ONES * b'0' as u64;

/// Per byte of `w`: 0x80 where the byte is >= `lo` (any byte value; `lo` at most 0x80).
#[inline(always)]
fn ge(w: u64, lo: u8) -> u64 {
    (((w & !HIGH) + ONES * u64::from(0x80 - lo)) | w) & HIGH
}

/// Per byte of `w`: 0x80 where the byte is in `lo..=hi`.
#[inline(always)]
fn within(w: u64, lo: u8, hi: u8) -> u64 {
    ge(w, lo) & !ge(w, hi + 1)
}

/// The high bit of each byte of `w` gathered into the low 8 bits (byte 0 -> bit 0).
#[inline(always)]
fn gather(w: u64) -> u8 {
    (((w >> 7) & ONES).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
}

#[inline(always)]
fn word(b: &Room, at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The `n` bytes of `b` ending at `end` as the high bytes of a word, the low ones `'0'`.
#[inline(always)]
fn digits_word(b: &Room, end: usize, n: usize) -> u64 {
    let w = if end >= 8 {
        word(b, end - 8)
    } else {
        // Near the line's start: the first `end` bytes, moved up.
        word(b, 0) << (8 * (8 - end))
    };
    let keep = u64::MAX.checked_shl(8 * (8 - n) as u32).unwrap_or(0);
    (w & keep) | (ZEROS & !keep)
}

/// Eight decimal digits (first digit in byte 0) to their value; `None` if any byte is not a digit.
#[inline(always)]
fn dec8(w: u64) -> Option<u64> {
    if within(w, b'0', b'9') != HIGH {
        return None;
    }
    let t = w - ZEROS;
    let t = (t * 10 + (t >> 8)) & 0x00ff_00ff_00ff_00ff;
    let t = (t * 100 + (t >> 16)) & 0x0000_ffff_0000_ffff;
    Some((t * 10000 + (t >> 32)) & 0xffff_ffff)
}

/// Eight hexadecimal digits (either case; first digit in byte 0) to their value.
#[inline(always)]
fn hex8(w: u64) -> Option<u64> {
    let letters = within(w | (ONES * 0x20), b'a', b'f');
    if (within(w, b'0', b'9') | letters) != HIGH {
        return None;
    }
    // Digits are 0x30..0x39 (bit 6 clear), letters 0x41..0x46 / 0x61..0x66 (bit 6 set, low
    // nibble 1..6): the low nibble plus 9 for letters.
    let t = (w & (ONES * 0x0f)) + ((w >> 6) & ONES) * 9;
    let t = ((t << 4) | (t >> 8)) & 0x00ff_00ff_00ff_00ff;
    let t = ((t << 8) | (t >> 16)) & 0x0000_ffff_0000_ffff;
    Some(((t << 16) | (t >> 32)) & 0xffff_ffff)
}

/// The token bytes of the line `b[..len]` (every byte above 0x20) as a bitmask, bit `i` for byte
/// `i`; `None` if the line holds a byte the exact parser treats differently: 0x7f and above, or
/// a control byte other than C's whitespace (\t \n \v \f \r). Bytes past `len` do not count.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn classify(b: &Room, len: usize) -> Option<u128> {
    // SAFETY: SSE2 is part of the x86-64 baseline; every x86-64 CPU has it.
    unsafe { classify_sse2(b, len) }
}

/// [`classify`] sixteen bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn classify_sse2(b: &Room, len: usize) -> Option<u128> {
    use std::arch::x86_64::*;
    let mut token = 0u128;
    let mut odd = 0;
    for k in 0..len.div_ceil(16) {
        let at = 16 * k;
        let x = _mm_set_epi64x(word(b, at + 8) as i64, word(b, at) as i64);
        // Signed compares: bytes of 0x80 and above are negative and fail every range below.
        let graphic = _mm_and_si128(
            _mm_cmpgt_epi8(x, _mm_set1_epi8(0x20)),
            _mm_cmplt_epi8(x, _mm_set1_epi8(0x7f)),
        );
        let space = _mm_or_si128(
            _mm_cmpeq_epi8(x, _mm_set1_epi8(0x20)),
            _mm_and_si128(
                _mm_cmpgt_epi8(x, _mm_set1_epi8(0x08)),
                _mm_cmplt_epi8(x, _mm_set1_epi8(0x0e)),
            ),
        );
        let inside = u32::MAX
            .checked_shl((len - at) as u32)
            .map_or(0xffff, |m| !m & 0xffff);
        let g = _mm_movemask_epi8(graphic) as u32 & inside;
        odd |= !(g | _mm_movemask_epi8(space) as u32) & inside;
        token |= u128::from(g) << at;
    }
    (odd == 0).then_some(token)
}

/// [`classify`] eight bytes at a time in plain integer arithmetic (other targets, and the tests'
/// cross-check on x86-64).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn classify_swar(b: &Room, len: usize) -> Option<u128> {
    let mut token = 0u128;
    let mut odd = 0u64;
    for k in 0..len.div_ceil(8) {
        let at = 8 * k;
        let w = word(b, at);
        let inside = u64::MAX
            .checked_shl(8 * (len - at) as u32)
            .map_or(HIGH, |m| !m & HIGH);
        let graphic = ge(w, 0x21) & !ge(w, 0x7f) & inside;
        token |= u128::from(gather(graphic)) << at;
        odd |= (ge(w, 0x7f) | (!ge(w, 0x20) & HIGH & !within(w, b'\t', b'\r'))) & inside;
    }
    (odd == 0).then_some(token)
}

#[cfg(not(target_arch = "x86_64"))]
use classify_swar as classify;

/// A line's bytes, its token starts and ends (bitmasks), consumed one token at a time.
struct Tokens<'a> {
    buf: &'a Room,
    starts: u128,
    ends: u128,
}

impl Tokens<'_> {
    /// The next token's byte range.
    #[inline(always)]
    fn next(&mut self) -> (usize, usize) {
        let s = self.starts.trailing_zeros() as usize;
        let e = self.ends.trailing_zeros() as usize + 1;
        self.starts &= self.starts - 1;
        self.ends &= self.ends - 1;
        (s, e)
    }

    #[inline(always)]
    fn hex(&mut self) -> Option<u64> {
        let (s, e) = self.next();
        match e - s {
            n @ 1..=8 => hex8(digits_word(self.buf, e, n)),
            n @ 9..=16 => {
                let hi = hex8(digits_word(self.buf, e - 8, n - 8))?;
                Some(hi << 32 | hex8(digits_word(self.buf, e, 8))?)
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn signed<T: TryFrom<i64>>(&mut self) -> Option<T> {
        let (mut s, e) = self.next();
        let neg = self.buf[s] == b'-';
        s += usize::from(neg || self.buf[s] == b'+');
        let v = match e - s {
            n @ 1..=8 => dec8(digits_word(self.buf, e, n))?,
            n @ 9..=16 => {
                let hi = dec8(digits_word(self.buf, e - 8, n - 8))?;
                hi * 100_000_000 + dec8(digits_word(self.buf, e, 8))?
            }
            _ => return None,
        } as i64;
        T::try_from(if neg { -v } else { v }).ok()
    }

    #[inline(always)]
    fn symbol<T: Copy>(&mut self, table: [(u8, T); 3]) -> Option<T> {
        let (s, e) = self.next();
        if e - s != 1 {
            return None;
        }
        // Unrolled compares: a search through the table was a call per field.
        let b = self.buf[s];
        if b == table[0].0 {
            Some(table[0].1)
        } else if b == table[1].0 {
            Some(table[1].1)
        } else if b == table[2].0 {
            Some(table[2].1)
        } else {
            None
        }
    }

    /// A name: its bytes are printable already (`classify` let no other byte through), so only
    /// the length is checked; a fixed-size copy, then the bytes past the name cleared.
    #[inline(always)]
    fn name(&mut self) -> Option<Mnemonic> {
        let (s, e) = self.next();
        let len = e - s;
        if len > Mnemonic::CAPACITY {
            return None;
        }
        let mut bytes: [u8; Mnemonic::CAPACITY] = self.buf[s..s + Mnemonic::CAPACITY]
            .try_into()
            .expect("in the buffer");
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = if i < len { *b } else { 0 };
        }
        Some(Mnemonic {
            len: len as u8,
            bytes,
        })
    }
}

/// The fast parse of the line `bytes[..len]` (without its newline); the bytes after it are read
/// when they are there (at least 151), which spares a copy. `None` means "ask the exact parser".
#[inline]
pub(crate) fn parse_in(bytes: &[u8], len: usize) -> Option<Uop> {
    if len > MAX_FAST {
        return None;
    }
    match bytes.first_chunk::<ROOM>() {
        Some(room) => parse_room(room, len),
        None => {
            let mut room = [b' '; ROOM];
            room[..len].copy_from_slice(&bytes[..len]);
            parse_room(&room, len)
        }
    }
}

/// [`parse_in`] for a line alone.
#[cfg(test)]
pub(crate) fn parse(line: &[u8]) -> Option<Uop> {
    parse_in(line, line.len())
}

#[inline(always)]
fn parse_room(buf: &Room, len: usize) -> Option<Uop> {
    let token = classify(buf, len)?;
    let mut t = Tokens {
        buf,
        starts: token & !(token << 1),
        ends: token & !(token >> 1),
    };
    if t.starts.count_ones() != FIELDS {
        return None;
    }
    let index: u32 = t.signed()?;
    if index == 0 {
        return None;
    }
    Some(Uop {
        index,
        pc: t.hex()?,
        src1: t.signed()?,
        src2: t.signed()?,
        dest: t.signed()?,
        flags: t.symbol([
            (b'-', FlagsUse::None),
            (b'R', FlagsUse::Read),
            (b'W', FlagsUse::Write),
        ])?,
        branch: t.symbol([
            (b'-', BranchOutcome::None),
            (b'T', BranchOutcome::Taken),
            (b'N', BranchOutcome::NotTaken),
        ])?,
        mem: t.symbol([
            (b'-', MemAccess::None),
            (b'L', MemAccess::Load),
            (b'S', MemAccess::Store),
        ])?,
        immediate: t.signed()?,
        mem_addr: t.hex()?,
        fallthrough: t.hex()?,
        target: t.hex()?,
        macro_name: t.name()?,
        micro_name: t.name()?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse_line;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn both_classifiers_agree_with_the_byte_rules() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..20_000 {
            let mut buf: Room = [0; ROOM];
            let len = round % (MAX_FAST + 1);
            for (i, b) in buf.iter_mut().enumerate() {
                let r = next();
                // The line: mostly printable and spaces, sometimes anything. After it: anything
                // (the next lines), which must not count.
                *b = match r % 16 {
                    _ if i >= len => (r >> 8) as u8,
                    0 => (r >> 8) as u8,
                    1..=4 => b' ',
                    5 => b'\t',
                    _ => 0x21 + (r >> 8) as u8 % 0x5e,
                };
            }
            let line = &buf[..len];
            let odd = line
                .iter()
                .any(|&b| !(b == b' ' || (b'\t'..=b'\r').contains(&b) || (0x21..0x7f).contains(&b)));
            let want = (!odd).then(|| {
                line.iter()
                    .enumerate()
                    .fold(0u128, |m, (i, &b)| m | u128::from(b > 0x20) << i)
            });
            assert_eq!(classify_swar(&buf, len), want, "{line:?}");
            assert_eq!(classify(&buf, len), want, "{line:?}");
        }
    }

    /// In place, with the next lines after it, a line parses as it does alone.
    #[test]
    fn a_line_parses_the_same_in_place_and_alone() {
        let text = include_bytes!("../../../tests/data/penn/sjeng-1K.trace");
        let mut at = 0;
        while let Some(nl) = text[at..].iter().position(|&b| b == b'\n') {
            let alone = parse(&text[at..at + nl]);
            assert!(alone.is_some());
            assert_eq!(parse_in(&text[at..], nl), alone);
            at += nl + 1;
        }
    }

    #[test]
    fn word_helpers_match_their_scalar_meaning() {
        for b in 0..=255u8 {
            let w = u64::from_le_bytes([b, 0x20, 0x7f, 0xff, b, 0, b'5', b]);
            for lo in [0x09u8, 0x20, 0x21, 0x30, 0x7f, 0x80] {
                let want = w
                    .to_le_bytes()
                    .iter()
                    .enumerate()
                    .fold(0u64, |m, (i, &x)| m | u64::from(x >= lo) << (8 * i + 7));
                assert_eq!(ge(w, lo), want, "byte {b:#x} lo {lo:#x}");
            }
        }
        assert_eq!(gather(0x8000_0080_0000_8080), 0b1001_0011);
        assert_eq!(dec8(u64::from_le_bytes(*b"12345678")), Some(12_345_678));
        assert_eq!(dec8(u64::from_le_bytes(*b"1234567a")), None);
        assert_eq!(hex8(u64::from_le_bytes(*b"00aF09fE")), Some(0x00af_09fe));
        assert_eq!(hex8(u64::from_le_bytes(*b"0000000g")), None);
        assert_eq!(hex8(u64::from_le_bytes(*b"0000000:")), None);
    }

    /// A Penn line with every field valid (numbers of every size and case, padding like the
    /// course's files, tabs now and then), then, in most cases, one spoiler: a field replaced by a
    /// junk token, a field left out, or an odd byte in the padding.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        let hex = || {
            prop_oneof![
                any::<u64>().prop_map(|v| format!("{v:x}")),
                (0u64..0x1_0000_0000).prop_map(|v| format!("{v:X}")),
                (0u64..0x100).prop_map(|v| format!("{v:x}")),
            ]
        };
        let reg = || (-1i32..64).prop_map(|v| v.to_string());
        let imm = prop_oneof![
            (-100i64..100).prop_map(|v| v.to_string()),
            any::<i32>().prop_map(|v| v.to_string()),
            (-(10i64.pow(16)) + 1..10i64.pow(16)).prop_map(|v| v.to_string()),
            any::<i64>().prop_map(|v| v.to_string()),
            (0i64..1000).prop_map(|v| format!("+{v}")),
        ];
        let name = || "[A-Z_]{1,23}";
        let valid = (
            ((1u32..4).prop_map(|v| v.to_string()), hex(), reg(), reg(), reg()),
            ("[-RW]", "[-TN]", "[-LS]", imm),
            (hex(), hex(), hex(), name(), name()),
            prop::collection::vec(prop_oneof![8 => " {1,4}", 1 => "[\t\r\x0b\x0c]"], 15),
        );
        let spoiler = (
            0u8..4,
            0usize..14,
            prop_oneof!["[-+]?[0-9a-gA-G:x/]{0,20}", "[!-~]{1,25}", "\\PC{1,3}"],
            "[\x00\x08\x1f\x7f\u{80}]",
        );
        (valid, spoiler).prop_map(
            |(((a, b, c, d, e), (f, g, h, i), (j, k, l, m, n), sp), (how, at, junk, odd))| {
                let mut tokens = vec![a, b, c, d, e, f, g, h, i, j, k, l, m, n];
                let mut sp = sp;
                match how {
                    0 => {}
                    1 => tokens[at] = junk,
                    2 => drop(tokens.remove(at)),
                    _ => sp[at].push_str(&odd),
                }
                let mut s = String::new();
                for (k, tok) in tokens.iter().enumerate() {
                    s += &sp[k];
                    s += tok;
                }
                s += &sp[14];
                s.into_bytes()
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

        /// The fast path never accepts what the exact parser rejects, and never disagrees.
        #[test]
        fn the_fast_path_agrees_with_the_exact_parser(line in line()) {
            let exact = parse_line(&line).ok();
            if let Some(fast) = parse(&line) {
                prop_assert_eq!(Some(fast), exact, "{:?}", String::from_utf8_lossy(&line));
            }
        }
    }

    #[test]
    fn the_fast_path_takes_every_line_of_the_real_samples() {
        for text in [
            &include_bytes!("../../../tests/data/penn/sjeng-1K.trace")[..],
            &include_bytes!("../../../tests/data/penn/gcc-1K.trace")[..],
        ] {
            for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let exact = parse_line(line).unwrap();
                assert_eq!(parse(line), Some(exact), "{}", String::from_utf8_lossy(line));
            }
        }
    }
}
