//! The fast path for one Penn line: eight bytes per step (SWAR) over a padded copy of the line.
//!
//! [`parse`] accepts only what [`parse_line`](super::parse::parse_line) accepts and returns the same
//! [`Uop`]; on anything it does not handle (a bad field, a control byte that is not whitespace, a
//! byte of 0x7f or more, a number of more than 16 digits, a line over 128 bytes) it returns `None`
//! and the reader runs the exact parser, so every error message still comes from one place.
//!
//! How: one pass over the line's words builds a bitmask of token bytes (every byte above 0x20);
//! token starts and ends fall out of the mask by shifts; each number is then read as one or two
//! 8-byte words ending at its last digit, checked and converted without a per-digit loop.

use super::{BranchOutcome, FlagsUse, MemAccess, Mnemonic, Uop};

/// The longest line the fast path takes (real lines are about 90 bytes).
const MAX_FAST: usize = 128;
/// Bytes of padding before the line, so that the word ending at any token's end is in the buffer.
const PAD: usize = 8;
/// The number of fields.
const FIELDS: u32 = 14;

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

/// The 8 bytes of `b` ending at `end` with all but the last `n` replaced by `'0'`.
#[inline(always)]
fn digits_word(b: &Buf, end: usize, n: usize) -> u64 {
    let w = u64::from_le_bytes(b[end - 8..end].try_into().expect("8 bytes"));
    // The last `n` bytes are the high ones (little-endian).
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

/// The padded line: `PAD` spaces, the line, spaces to the end (room for a name's fixed-size copy).
type Buf = [u8; PAD + MAX_FAST + Mnemonic::CAPACITY];

/// The token bytes of the line in `buf` (every byte above 0x20) as a bitmask, bit `i` for line
/// byte `i`; `None` if the line holds a byte the exact parser treats differently: 0x7f and
/// above, or a control byte other than C's whitespace (\t \n \v \f \r).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn classify(buf: &Buf, len: usize) -> Option<u128> {
    // SAFETY: SSE2 is part of the x86-64 baseline; every x86-64 CPU has it.
    unsafe { classify_sse2(buf, len) }
}

/// [`classify`] sixteen bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
fn classify_sse2(buf: &Buf, len: usize) -> Option<u128> {
    use std::arch::x86_64::*;
    let mut token = 0u128;
    let mut odd = 0;
    for k in 0..len.div_ceil(16) {
        let at = PAD + 16 * k;
        let word = |i: usize| i64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        let x = _mm_set_epi64x(word(at + 8), word(at));
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
        let g = _mm_movemask_epi8(graphic) as u32;
        odd |= !(g | _mm_movemask_epi8(space) as u32) & 0xffff;
        token |= u128::from(g) << (16 * k);
    }
    // Bytes past the line are padding spaces: neither token nor odd.
    (odd == 0).then_some(token)
}

/// [`classify`] eight bytes at a time in plain integer arithmetic (other targets, and the tests'
/// cross-check on x86-64).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn classify_swar(buf: &Buf, len: usize) -> Option<u128> {
    let mut token = 0u128;
    let mut odd = 0u64;
    for k in 0..len.div_ceil(8) {
        let at = PAD + 8 * k;
        let w = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        token |= u128::from(gather(ge(w, 0x21) & !ge(w, 0x7f))) << (8 * k);
        odd |= ge(w, 0x7f) | (!ge(w, 0x20) & HIGH & !within(w, b'\t', b'\r'));
    }
    (odd == 0).then_some(token)
}

#[cfg(not(target_arch = "x86_64"))]
use classify_swar as classify;

/// The line in a buffer padded with spaces on both sides, its token mask and its tokens.
struct Tokens {
    buf: Buf,
    starts: u128,
    ends: u128,
}

impl Tokens {
    /// The next token's byte range in `buf`.
    #[inline(always)]
    fn next(&mut self) -> (usize, usize) {
        let s = self.starts.trailing_zeros() as usize;
        let e = self.ends.trailing_zeros() as usize + 1;
        self.starts &= self.starts - 1;
        self.ends &= self.ends - 1;
        (PAD + s, PAD + e)
    }

    #[inline(always)]
    fn hex(&mut self) -> Option<u64> {
        let (s, e) = self.next();
        match e - s {
            n @ 1..=8 => hex8(digits_word(&self.buf, e, n)),
            n @ 9..=16 => {
                let hi = hex8(digits_word(&self.buf, e - 8, n - 8))?;
                Some(hi << 32 | hex8(digits_word(&self.buf, e, 8))?)
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
            n @ 1..=8 => dec8(digits_word(&self.buf, e, n))?,
            n @ 9..=16 => {
                let hi = dec8(digits_word(&self.buf, e - 8, n - 8))?;
                hi * 100_000_000 + dec8(digits_word(&self.buf, e, 8))?
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
        table.iter().find(|(k, _)| *k == self.buf[s]).map(|&(_, v)| v)
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

/// The fast parse of one line (without its newline); `None` means "ask the exact parser".
#[inline]
pub(crate) fn parse(line: &[u8]) -> Option<Uop> {
    if line.len() > MAX_FAST {
        return None;
    }
    let mut t = Tokens {
        buf: [b' '; PAD + MAX_FAST + Mnemonic::CAPACITY],
        starts: 0,
        ends: 0,
    };
    t.buf[PAD..PAD + line.len()].copy_from_slice(line);
    let token = classify(&t.buf, line.len())?;
    t.starts = token & !(token << 1);
    t.ends = token & !(token >> 1);
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
        for round in 0..20_000 {
            let mut buf: Buf = [b' '; PAD + MAX_FAST + Mnemonic::CAPACITY];
            let len = round % (MAX_FAST + 1);
            for b in &mut buf[PAD..PAD + len] {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Mostly printable and spaces, sometimes anything.
                *b = match rng % 16 {
                    0 => (rng >> 8) as u8,
                    1..=4 => b' ',
                    5 => b'\t',
                    _ => 0x21 + (rng >> 8) as u8 % 0x5e,
                };
            }
            let line = &buf[PAD..PAD + len];
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
