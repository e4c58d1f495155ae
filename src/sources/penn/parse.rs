//! One line of text to one [`Uop`]: a byte cursor over whitespace-separated fields, no allocation
//! unless the line is bad.

use super::{BranchOutcome, FlagsUse, MemAccess, Mnemonic, Uop};
use crate::sources::ErrorKind;

/// The longest line accepted, in bytes (real lines are about 90).
pub const MAX_LINE: usize = 1024;

/// The number of fields on a line.
const FIELDS: usize = 14;

/// Field names for messages, by 1-based field number.
const FIELD_NAMES: [&str; FIELDS + 1] = [
    "",
    "uop index",
    "PC",
    "src1",
    "src2",
    "dest",
    "flags",
    "branch",
    "ld/st",
    "immediate",
    "memory address",
    "fallthrough PC",
    "target PC",
    "macro opcode",
    "micro opcode",
];

/// Why a line was rejected.
#[derive(Debug)]
pub(crate) struct LineError {
    pub kind: ErrorKind,
    pub message: String,
}

/// C's `isspace` (the course's parser reads with `fscanf`): space, \t, \n, \v, \f, \r.
#[inline]
fn is_space(b: u8) -> bool {
    b == b' ' || (b'\t'..=b'\r').contains(&b)
}

/// Whether the line holds nothing but whitespace.
pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| is_space(b))
}

/// Hex digit values, 0xff for other bytes.
static HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// A cursor over a line's fields; each field is scanned and converted in one pass.
struct Fields<'a> {
    line: &'a [u8],
    pos: usize,
    field: usize,
}

impl<'a> Fields<'a> {
    /// Skips whitespace and starts the next field; its first byte's position.
    #[inline]
    fn start(&mut self) -> Result<usize, LineError> {
        let line = self.line;
        let mut i = self.pos;
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        self.pos = i;
        self.field += 1;
        if i == line.len() {
            return Err(LineError {
                kind: ErrorKind::BadField,
                message: format!("expected {FIELDS} fields, found {}", self.field - 1),
            });
        }
        Ok(i)
    }

    /// Whether the field ends at the cursor (whitespace or end of line).
    #[inline]
    fn at_end(&self) -> bool {
        self.pos == self.line.len() || is_space(self.line[self.pos])
    }

    fn bad(&self, start: usize, expected: &str) -> LineError {
        let rest = &self.line[start..];
        let token = &rest[..rest.iter().position(|&b| is_space(b)).unwrap_or(rest.len())];
        LineError {
            kind: ErrorKind::BadField,
            message: format!(
                "field {} ({}): expected {expected}, found {:?}",
                self.field,
                FIELD_NAMES[self.field],
                String::from_utf8_lossy(token)
            ),
        }
    }

    #[inline]
    fn hex(&mut self) -> Result<u64, LineError> {
        let start = self.start()?;
        let line = self.line;
        let mut v = 0u64;
        let mut i = start;
        while i < line.len() {
            let d = HEX[usize::from(line[i])];
            if d == 0xff {
                break;
            }
            v = (v << 4) | u64::from(d);
            i += 1;
        }
        self.pos = i;
        if i == start || i - start > 16 || !self.at_end() {
            return Err(self.bad(start, "a hexadecimal number of at most 16 digits"));
        }
        Ok(v)
    }

    #[inline]
    fn signed<T: TryFrom<i64>>(&mut self) -> Result<T, LineError> {
        let start = self.start()?;
        let line = self.line;
        let neg = line[start] == b'-';
        let mut i = start + usize::from(neg || line[start] == b'+');
        let digits = i;
        let mut v: i64 = 0;
        while i < line.len() && line[i].is_ascii_digit() {
            // 18 digits cannot overflow; longer numbers take the checked path.
            v = if i - digits < 18 {
                v * 10 + i64::from(line[i] - b'0')
            } else {
                match v
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(i64::from(line[i] - b'0')))
                {
                    Some(v) => v,
                    None => return Err(self.bad(start, "a signed decimal number in range")),
                }
            };
            i += 1;
        }
        self.pos = i;
        if i == digits || !self.at_end() {
            return Err(self.bad(start, "a signed decimal number"));
        }
        T::try_from(if neg { -v } else { v }).map_err(|_| self.bad(start, "a signed decimal number in range"))
    }

    #[inline]
    fn symbol<T: Copy>(&mut self, table: [(u8, T); 3], expected: &str) -> Result<T, LineError> {
        let start = self.start()?;
        let c = self.line[start];
        self.pos = start + 1;
        if self.at_end() {
            for (k, v) in table {
                if k == c {
                    return Ok(v);
                }
            }
        }
        Err(self.bad(start, expected))
    }

    #[inline]
    fn name(&mut self) -> Result<Mnemonic, LineError> {
        let start = self.start()?;
        let line = self.line;
        let mut i = start;
        while i < line.len() && !is_space(line[i]) {
            i += 1;
        }
        self.pos = i;
        Mnemonic::new(&line[start..i])
            .ok_or_else(|| self.bad(start, "a name of at most 23 printable characters"))
    }

    fn end(&mut self) -> Result<(), LineError> {
        let extra = self.line[self.pos..]
            .split(|&b| is_space(b))
            .filter(|t| !t.is_empty())
            .count();
        if extra == 0 {
            Ok(())
        } else {
            Err(LineError {
                kind: ErrorKind::BadField,
                message: format!("expected {FIELDS} fields, found {}", FIELDS + extra),
            })
        }
    }
}

/// Parses one line (without its newline).
pub(crate) fn parse_line(line: &[u8]) -> Result<Uop, LineError> {
    let mut f = Fields {
        line,
        pos: 0,
        field: 0,
    };
    let index: u32 = f.signed()?;
    if index == 0 {
        let first = line.iter().position(|&b| !is_space(b)).unwrap_or(0);
        return Err(f.bad(first, "a uop index of 1 or more"));
    }
    let pc = f.hex()?;
    let src1 = f.signed()?;
    let src2 = f.signed()?;
    let dest = f.signed()?;
    let flags = f.symbol(
        [
            (b'-', FlagsUse::None),
            (b'R', FlagsUse::Read),
            (b'W', FlagsUse::Write),
        ],
        "R, W or -",
    )?;
    let branch = f.symbol(
        [
            (b'-', BranchOutcome::None),
            (b'T', BranchOutcome::Taken),
            (b'N', BranchOutcome::NotTaken),
        ],
        "T, N or -",
    )?;
    let mem = f.symbol(
        [
            (b'-', MemAccess::None),
            (b'L', MemAccess::Load),
            (b'S', MemAccess::Store),
        ],
        "L, S or -",
    )?;
    let immediate = f.signed()?;
    let mem_addr = f.hex()?;
    let fallthrough = f.hex()?;
    let target = f.hex()?;
    let macro_name = f.name()?;
    let micro_name = f.name()?;
    f.end()?;
    Ok(Uop {
        index,
        pc,
        src1,
        src2,
        dest,
        flags,
        branch,
        mem,
        immediate,
        mem_addr,
        fallthrough,
        target,
        macro_name,
        micro_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example_line() {
        let u = parse_line(
            b"1 48d237 -1 -1 -1 R N -       -25            0       48d239       48d220 J        JMP_IMM",
        )
        .unwrap();
        assert_eq!(u.index, 1);
        assert_eq!(u.pc, 0x48d237);
        assert_eq!((u.src1, u.src2, u.dest), (-1, -1, -1));
        assert_eq!(u.flags, FlagsUse::Read);
        assert_eq!(u.branch, BranchOutcome::NotTaken);
        assert_eq!(u.mem, MemAccess::None);
        assert_eq!(u.immediate, -25);
        assert_eq!((u.fallthrough, u.target), (0x48d239, 0x48d220));
        assert_eq!((u.macro_name.as_str(), u.micro_name.as_str()), ("J", "JMP_IMM"));
    }

    #[test]
    fn tabs_and_crlf_are_whitespace() {
        let u = parse_line(b"2\t48d1de\t-1\t-1\t13\tR\t-\t-\t1\t0\t48d1e2\t0\tSET\tADD_IMM\r").unwrap();
        assert_eq!((u.index, u.pc, u.micro_name.as_str()), (2, 0x48d1de, "ADD_IMM"));
    }

    #[test]
    fn bad_fields_name_the_field_and_token() {
        let e = parse_line(b"1 48d1f0 -1 -1 0 - -9 - 0 0 48d1f3 0 SET ADD").unwrap_err();
        assert!(e.message.contains("field 7 (branch)"), "{}", e.message);
        assert!(e.message.contains("\"-9\""), "{}", e.message);
        let e = parse_line(b"1 48d1f0 -1 -1 0 - - - 0 0 48d1f3 0 SET").unwrap_err();
        assert_eq!(e.message, "expected 14 fields, found 13");
        let e = parse_line(b"1 48d1f0 -1 -1 0 - - - 0 0 48d1f3 0 SET ADD x").unwrap_err();
        assert_eq!(e.message, "expected 14 fields, found 15");
        let e = parse_line(b"1 48g1f0 -1 -1 0 - - - 0 0 48d1f3 0 SET ADD").unwrap_err();
        assert!(e.message.starts_with("field 2 (PC)"), "{}", e.message);
        let e = parse_line(b"1 0 -1 -1 99999999999 - - - 0 0 4 0 SET ADD").unwrap_err();
        assert!(e.message.starts_with("field 5 (dest)"), "{}", e.message);
        let e = parse_line(b"0 0 -1 -1 1 - - - 0 0 4 0 SET ADD").unwrap_err();
        assert!(e.message.starts_with("field 1 (uop index)"), "{}", e.message);
    }

    #[test]
    fn number_edges() {
        let line = |pc: &str, imm: &str| format!("1 {pc} -1 -1 1 - - - {imm} 0 4 0 SET ADD");
        let u = parse_line(line("ffffffffffffffff", "-9223372036854775807").as_bytes()).unwrap();
        assert_eq!((u.pc, u.immediate), (u64::MAX, -9223372036854775807));
        assert!(parse_line(line("1ffffffffffffffff", "0").as_bytes()).is_err());
        assert!(parse_line(line("0", "9223372036854775808").as_bytes()).is_err());
        assert!(parse_line(line("0", "-").as_bytes()).is_err());
        assert!(parse_line(line("0", "12x").as_bytes()).is_err());
        assert!(parse_line(line("0x10", "0").as_bytes()).is_err());
    }
}
