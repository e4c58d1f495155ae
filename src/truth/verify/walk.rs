//! The block walk of `verify` (issue 51 §5, spec/truth.md TR8, TR15): while one way through the
//! truth is at a required instruction, the decoder's lines are compared with the IPs of the run
//! (a whole execution of a block) it is in, in a tight loop over the bytes the output's reader
//! holds: an IP parsed in place, compared with the next instruction's, the IP moved on by the
//! instruction's length. Only a line it cannot take leaves the loop (another form of line, an
//! IP that is not the next one, a record after a run that is not a required instruction, a mark
//! due, a line cut by the end of the reader's buffer), and [`super::check_with`]'s per-line
//! steps take that line, from the same place: the walk takes exactly the lines
//! [`super::Matcher::step_one`] would, and leaves the matcher as those steps leave it.

use super::{after_insn, format_error, next_item, At, Before, Ctx, Item, Marks, Matcher, Way, MAX_LINE};
use crate::tracer::{Block, BlockEnd};
use crate::truth::compact::{Decoder, Unit, POS_SHIFT};
use crate::truth::record::{Class, Record};
use std::io::{self, BufRead};

/// The value of each hex digit, 0xff for other bytes.
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => 0xff,
        };
        b += 1;
    }
    t
};

/// The IP of an instruction line that starts `bytes`, and where its first word ends, when the
/// line is in one of the forms [`super::token_bytes`] reads as an instruction and the word ends
/// at a whitespace byte within `bytes` (TR8): spaces only before the word, then `0x` or `0X` and
/// 1–16 hex digits, or 1–16 hex digits that are 16, hold a decimal digit or end at column 16 or
/// later after at least one space (perf's `%16`). `None` for any other line: the caller asks
/// [`super::token_bytes`], which reads every form.
#[inline]
pub(super) fn plain_ip(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut p = 0;
    while bytes.get(p) == Some(&b' ') {
        p += 1;
    }
    let indent = p;
    let prefixed = bytes.get(p) == Some(&b'0') && bytes.get(p + 1).is_some_and(|&x| x | 0x20 == b'x');
    if prefixed {
        p += 2;
    }
    let digits = p;
    let mut v = 0u64;
    let mut decimal = false;
    loop {
        let b = *bytes.get(p)?;
        let d = HEX[usize::from(b)];
        if d == 0xff {
            if !b.is_ascii_whitespace() {
                return None;
            }
            break;
        }
        decimal |= d < 10;
        v = v << 4 | u64::from(d);
        p += 1;
        if p - digits > 16 {
            return None;
        }
    }
    let len = p - digits;
    let is_ip = len > 0 && (prefixed || len == 16 || decimal || indent > 0 && p >= 16);
    // A count at the start of one of perf's summary lines (`3 instruction trace errors`) is
    // not an IP: only a short word that is not indented can be one.
    if is_ip && indent == 0 && !prefixed && len < 16 && bytes[p] == b' ' && super::perf_summary(bytes) {
        return None;
    }
    is_ip.then_some((v, p))
}

/// [`plain_ip`], eight bytes of a line at a time in the common form (no indent, `0x` or `0X`, 1
/// to 16 hex digits, then a whitespace byte) when the line holds 19 bytes; any other line, or
/// one it cannot tell at once, goes to [`plain_ip`]. The same result on every line: a
/// whitespace byte after at most 16 digits is [`plain_ip`]'s end of the word, and a `0x` word
/// is an IP whatever its digits.
#[inline]
fn line_ip(line: &[u8]) -> Option<(u64, usize)> {
    if let Some(&[b'0', x, ref w1 @ .., _]) = line.get(..19) {
        if x | 0x20 == b'x' {
            let w1 = u64::from_le_bytes(w1[..8].try_into().expect("8 bytes"));
            let n1 = hex_prefix(w1);
            let (v, len) = if n1 < 8 {
                (digits_value(w1) >> (4 * (8 - n1)), n1)
            } else {
                let w2 = u64::from_le_bytes(line[10..18].try_into().expect("8 bytes"));
                let n2 = hex_prefix(w2);
                let low = if n2 == 0 {
                    0
                } else {
                    digits_value(w2) >> (4 * (8 - n2))
                };
                ((digits_value(w1) << (4 * n2)) | low, 8 + n2)
            };
            let end = 2 + len as usize;
            if len > 0 && line[end].is_ascii_whitespace() {
                return Some((v, end));
            }
        }
    }
    plain_ip(line)
}

/// One byte each in a word of eight bytes.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The high bit of each byte.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// How many of the eight bytes of `w` (the first in its low byte) are hex digits before the
/// first that is not (8 when all are).
#[inline]
fn hex_prefix(w: u64) -> u32 {
    // Each byte below 0x80 is compared by adding 0x80 - bound: its high bit is then set when
    // the byte is at least the bound, with no carry into the next byte.
    let ascii = !w & HIGH;
    let x = w & !HIGH;
    let at_least = |v: u64, bound: u8| v + ONES * u64::from(0x80 - bound);
    let digit = at_least(x, b'0') & !at_least(x, b'9' + 1);
    let lower = x | (ONES * 0x20);
    let letter = at_least(lower, b'a') & !at_least(lower, b'f' + 1);
    let other = !((digit | letter) & ascii) & HIGH;
    other.trailing_zeros() / 8
}

/// The value of the eight hex digits of `w`, the first (in its low byte) the most significant;
/// the bytes that are not hex digits give nibbles of no meaning (the caller shifts them out).
#[inline]
fn digits_value(w: u64) -> u64 {
    // '0'-'9' have bit 6 clear and their value in the low nibble; 'a'-'f' and 'A'-'F' have it
    // set and their value less 9 there.
    let t = (w & (ONES * 0x0f)) + ((w >> 6) & ONES) * 9;
    let t = ((t << 4) | (t >> 8)) & 0x00ff_00ff_00ff_00ff;
    let t = ((t << 8) | (t >> 16)) & 0x0000_ffff_0000_ffff;
    ((t << 16) | (t >> 32)) & 0xffff_ffff
}

/// What the walk needs of [`super::check_with`]'s loop: the lines read, the instruction lines
/// among them, and where the truth's pages may be let go (called every 4,096 lines with the
/// position before which nothing is read again).
pub(super) struct Lines<'l> {
    /// Lines read (the number of the last one).
    pub n: u64,
    /// Instruction lines read.
    pub ips: u64,
    /// Lets the truth's bytes before a position go.
    pub release: &'l mut dyn FnMut(usize),
}

/// The lengths of a unit of one instruction (an instruction's own record): never stepped.
const ONE: &[u8] = &[0];

/// Where the walk is: the instruction the next line must give, the `k`-th of a unit (a run, or
/// an instruction's own record) of `lens.len()` instructions, and how to make the matcher's
/// place there (a [`super::At`]) exactly as the steps one line at a time make it: from the
/// place the walk started at (unit 0), or as the first item after the records that follow the
/// unit before (the decoder after it, in `bases`, and the context after its last instruction).
struct Here<'a> {
    /// The IP the next line must give.
    expect: u64,
    k: usize,
    /// The unit's instruction lengths ([`ONE`] for an instruction's own record).
    lens: &'a [u8],
    /// The truth index of the unit's first instruction.
    first: u64,
    /// What the instruction after the unit comes after (a RET at its end).
    end_before: After,
    /// The truth's records after the unit.
    after: Decoder<'a>,
    /// The position of the unit's record (the truth before it is read for good).
    pos: usize,
    /// Units walked into since the start.
    unit: u64,
    /// The place the walk started at, and its instruction's index in its unit.
    start: At<'a>,
    start_k: usize,
    /// The decoder after the unit before, and the context after it, for an even and an odd
    /// `unit` (two, so that the next unit's is written while this one's is kept).
    bases: [(Decoder<'a>, u64, After); 2],
}

/// What the instruction after a unit comes after: known, or that of a run of a block (looked
/// up only when the matcher's place is made).
#[derive(Clone, Copy)]
enum After {
    Known(Before),
    Block(u32),
}

impl<'a> Here<'a> {
    /// The place of the entry way, at a required instruction.
    fn start(at: At<'a>) -> Option<Self> {
        let Item::Ip {
            ip,
            index,
            optional: false,
            ..
        } = at.item
        else {
            return None;
        };
        if at.ctx.follow {
            return None;
        }
        let mut after = at.next;
        let (lens, k, end_before) = match after.run_block() {
            // Inside a run: the instruction before the next one it gives.
            Some((b, next)) => (b.lengths(), next - 1, After::Known(ret_before(b))),
            // A run's last instruction or one of its own: the context is that after it.
            None => (ONE, 0, After::Known(at.ctx.before)),
        };
        after.pass_run();
        Some(Here {
            expect: ip,
            k,
            lens,
            first: index - k as u64,
            end_before,
            after,
            pos: at.pos & !((1 << POS_SHIFT) - 1),
            unit: 0,
            start: at,
            start_k: k,
            bases: [(after, 0, After::Known(Before::Nothing)); 2],
        })
    }

    /// The matcher's place at the walk's instruction.
    fn place(&self) -> io::Result<At<'a>> {
        if self.unit == 0 {
            return settle(self.start, self.k - self.start_k);
        }
        let (d, count, after) = self.bases[(self.unit & 1) as usize];
        let before = match after {
            After::Known(b) => b,
            After::Block(k) => d.block(k).map_or(Before::Nothing, ret_before),
        };
        let ctx = Ctx {
            count,
            before,
            ..self.start.ctx
        };
        settle(next_item(d, ctx)?, self.k)
    }

    /// Walks into the next unit, when it is a required run or instruction with only records
    /// between that are not items (times, marks; flow events when they are not checked or not
    /// delivered): where a decoder's next line goes on in the walk. `false` (the place is the
    /// same) when it is not.
    fn next_unit(&mut self) -> io::Result<bool> {
        let slot = ((self.unit + 1) & 1) as usize;
        self.bases[slot] = (self.after, self.first + self.lens.len() as u64, self.end_before);
        let d = &mut self.after;
        loop {
            let Some((pos, u)) = d.next_unit().map_err(format_error)? else {
                self.after = self.bases[slot].0;
                return Ok(false);
            };
            let (expect, lens, first, end_before) = match u {
                Unit::Run(run) if run.class == Class::Required => {
                    let Some((start, lens)) = d.block_lens(run.block) else {
                        return Ok(false);
                    };
                    (start, lens, run.i, After::Block(run.block))
                }
                Unit::Record(Record::Insn {
                    i,
                    ip,
                    branch,
                    class: Class::Required,
                    ..
                }) => (ip, ONE, i, After::Known(after_insn(ip, branch))),
                Unit::Record(Record::Time { .. } | Record::Mark { .. }) => continue,
                Unit::Record(
                    Record::Enable { off, .. }
                    | Record::Disable { off }
                    | Record::Async { off, .. }
                    | Record::Overflow { off },
                ) if !self.start.ctx.events || off.is_none() => continue,
                _ => {
                    self.after = self.bases[slot].0;
                    return Ok(false);
                }
            };
            (self.expect, self.k, self.lens, self.first) = (expect, 0, lens, first);
            (self.end_before, self.pos) = (end_before, pos);
            self.unit += 1;
            return Ok(true);
        }
    }
}

/// What the instruction after a run of `b` comes after: the RET at its end, if it ends in one.
fn ret_before(b: &Block) -> Before {
    match b.end() {
        BlockEnd::Return => Before::Ret(b.last_ip()),
        _ => Before::Nothing,
    }
}

/// Takes the lines of `out` that the single way of `m` matches at required instructions, each
/// followed by another required instruction, as [`Matcher::step_one`] takes them (the same
/// work counted, the way left where those steps leave it); with `marks` (`--events`), a line
/// is left to the caller where a mark is due before its instruction (TR11: at the first
/// instruction of a record, the only place one can fall due).
pub(super) fn walk<'a>(
    m: &mut Matcher<'a>,
    out: &mut impl BufRead,
    mut marks: Option<&mut Marks<'a>>,
    lines: &mut Lines<'_>,
) -> io::Result<()> {
    let [w] = m.ways.as_slice() else {
        return Ok(());
    };
    // At the first line, and at the first instruction of each record walked into: the only
    // places a mark can fall due (its window ends between records), and the first because the
    // lines before it may have been checked with other ways behind.
    let mut mark_check = marks.is_some();
    let Some(mut h) = Here::start(w.at) else {
        return Ok(());
    };
    let mut took = 0u64;
    let mut done = false;
    while !done {
        let Ok(buf) = out.fill_buf() else { break };
        if buf.is_empty() {
            break;
        }
        let mut used = 0;
        loop {
            let line = &buf[used..];
            let Some((x, word_end)) = line_ip(line) else {
                done = true;
                break;
            };
            let end = match line[word_end] {
                b'\n' => word_end,
                _ => match memchr::memchr(b'\n', &line[word_end..]) {
                    Some(k) if word_end + k <= MAX_LINE => word_end + k,
                    _ => {
                        done = true;
                        break;
                    }
                },
            };
            // An instruction line: a mark due before the instruction is checked as the per-line
            // steps check it (not before: a mark line may come first, and take it).
            if mark_check {
                if let Some(mk) = marks.as_deref_mut() {
                    if mk.overdue(h.first + h.k as u64 + 1)?.is_some() {
                        done = true;
                        break;
                    }
                }
                mark_check = false;
            }
            if x != h.expect {
                done = true;
                break;
            }
            if h.k + 1 < h.lens.len() {
                h.expect = h.expect.wrapping_add(u64::from(h.lens[h.k]));
                h.k += 1;
            } else {
                // The unit's last instruction: the item after it must be a required
                // instruction too, or the line is the caller's.
                if !h.next_unit()? {
                    done = true;
                    break;
                }
                mark_check = marks.is_some();
            }
            used += end + 1;
            took += 1;
            lines.n += 1;
            lines.ips += 1;
            if lines.n.is_multiple_of(4096) {
                let low = marks.as_deref().map_or(h.pos, |mk| mk.next.pos().min(h.pos));
                (lines.release)(low);
            }
        }
        out.consume(used);
    }
    if took > 0 {
        m.work += took;
        m.ways[0] = Way {
            at: h.place()?,
            err: false,
            run_end: None,
        };
    }
    Ok(())
}

/// The place `passed` instructions after `at` within its run, as that many steps reach it.
fn settle(mut at: At<'_>, passed: usize) -> io::Result<At<'_>> {
    if passed == 0 {
        return Ok(at);
    }
    let skipped = at.next.skip_in_run(passed - 1);
    debug_assert!(skipped, "the walk passes instructions of the run only");
    next_item(at.next, at.ctx)
}

#[cfg(test)]
mod tests {
    use super::{line_ip, plain_ip};

    /// TR8: the eight-byte read of a line gives [`plain_ip`]'s result on every line: lines of
    /// every length made of the bytes that decide it (digits, hex letters of both cases, `0x`
    /// and `0X`, whitespace of each kind, a byte above 0x7f, other letters), followed by more.
    #[test]
    fn tr8_a_line_read_eight_bytes_at_a_time_is_read_as_plain_ip_reads_it() {
        const BYTES: &[u8] = b"0123456789abcdefABCDEFxXgG \t\r\n\x0b\x0c\x80\xff";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ips = 0;
        for _ in 0..200_000 {
            let len = (next() % 24) as usize;
            let mut line: Vec<u8> = (0..len)
                .map(|_| BYTES[(next() % BYTES.len() as u64) as usize])
                .collect();
            // Most lines a `0x` word of 1 to 17 digits, as decoders print them.
            if next() % 4 != 0 {
                let digits = 1 + (next() % 17) as usize;
                let mut word = b"0x".to_vec();
                word[1] = if next() % 2 == 0 { b'x' } else { b'X' };
                word.extend((0..digits).map(|_| BYTES[(next() % 22) as usize]));
                word.extend_from_slice(&line);
                line = word;
            }
            let fast = line_ip(&line);
            assert_eq!(fast, plain_ip(&line), "{:?}", String::from_utf8_lossy(&line));
            ips += usize::from(fast.is_some());
        }
        assert!(ips > 50_000, "{ips} lines were IPs");
    }
}
