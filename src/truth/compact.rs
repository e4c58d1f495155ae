//! `truth.bin`, the compact truth (TR1, TR9): the records of [`super::record`] in about a byte an
//! instruction. `ptemu truth dump` prints it as `truth.jsonl`'s lines.
//!
//! Layout: the magic [`MAGIC`], the version (a varint, [`VERSION`]), the header's length (a
//! varint) and the header (JSON, `truth.jsonl`'s first line without `"truth"`), then the
//! records, the last one [`Record::End`]. Integers are base-128 varints; signed ones zigzag.
//!
//! An instruction is one tag byte below [`FIRST_OTHER`]: `kind << 4 | new_off << 3 | d`, where
//! `kind` is 0 (not a branch), 1 (a conditional branch not taken), 2 (taken) or 3 + the
//! [`BranchKind`] code of any other branch; `d` (0–6) is its IP less the predicted one (7: the
//! difference follows as a signed varint). The predicted IP is the previous instruction's `to`
//! after a branch, the previous IP otherwise (so `d` is that instruction's length), the IP an
//! enable or an asynchronous transfer went to after those. `new_off` says its carrier's offset
//! differs from the previous instruction's (it follows, as an offset: see below); a branch's
//! `to` follows last, a signed varint from its IP. The class of the instructions that follow
//! changes with a class record, so a run of required instructions costs nothing for it.
//!
//! An offset is 0 for "not delivered", else 1 + the zigzag of its difference from the
//! last offset written.
//!
//! Version 4 (TR15) adds runs: a whole execution of a block, one tag byte [`RUN`] `| flags`
//! (`NEW_OFF`, `TAKEN`, `NEXT`, `BLOCK`), then the block's index when it is not the one
//! predicted (the first block of the table that starts at the predicted IP), the carrier's
//! offset when it changed, the successor (a signed varint from the block's fall-through) when
//! the block's end does not give it. The blocks are a table after the end record, which the
//! file's last 8 bytes point to (little-endian). A decoder gives a run as its instructions, each
//! at a position of its own ([`Decoder::pos`]: `byte << POS_SHIFT | k`).

use super::mark::Text;
use super::record::{Branch, BranchKind, Class, Record, Run, Sink};
use super::{Cause, Counts};
use crate::tracer::{Block, BlockEnd};
use prost::encoding::encode_varint;
use std::io::{self, Write};

/// The first bytes of `truth.bin`.
pub const MAGIC: &[u8; 8] = b"PTEMUTRU";
/// The version of `truth.bin` (TR1): it changes when a field changes meaning.
pub const VERSION: u64 = 4;
/// The oldest version this ptemu still reads (version 2 has no mark records, TR11).
pub const OLDEST: u64 = 2;

/// The first tag byte that is not an instruction.
pub const FIRST_OTHER: u8 = 144;
const SPAN: u8 = 144;
const ENABLE: u8 = 145;
const DISABLE: u8 = 146;
const ASYNC: u8 = 147;
const OVERFLOW: u8 = 148;
const CLASS_REQUIRED: u8 = 149;
const CLASS_OPTIONAL: u8 = 150;
const CLASS_LOST: u8 = 151;
const CLASS_UNDEFINED: u8 = 152;
const END: u8 = 153;
const MARK: u8 = 154;
const TIME: u8 = 155;
/// A run (TR15): `RUN | flags`, 160 to 175.
pub const RUN: u8 = 160;
const NEW_OFF: u8 = 1;
const TAKEN: u8 = 2;
const NEXT: u8 = 4;
const BLOCK: u8 = 8;

/// Positions ([`Decoder::pos`]) are the byte a record starts at, shifted by this, plus the
/// index of an instruction within a run.
pub const POS_SHIFT: u32 = 12;
/// The most instructions a block of the table may have.
const MAX_BLOCK: usize = 1 << POS_SHIFT;

/// The byte offset of a position ([`Decoder::pos`]).
pub fn byte_of(pos: usize) -> usize {
    pos >> POS_SHIFT
}

/// The blocks a truth's runs name (TR15), and the first of them at each start (a run's block
/// is predicted from where the flow goes).
#[derive(Clone, Debug, Default)]
pub struct Table {
    blocks: Vec<Block>,
    first_at: rustc_hash::FxHashMap<u64, u32>,
    /// What [`Decoder`] reads of each block, side by side (filled in by [`Table::seal`]).
    shapes: Vec<Shape>,
    /// Every block's instruction lengths, one after another.
    lens: Vec<u8>,
}

/// What a run's record needs of its block, in a few bytes beside the others' (a walk through a
/// truth jumps among the blocks: one cache line a block, not three).
#[derive(Clone, Copy, Debug)]
struct Shape {
    start: u64,
    /// The direct target (0 when it has none: see `end`).
    target: u64,
    /// Where its lengths are in [`Table`]'s `lens`, and how many.
    lens_at: u32,
    n: u32,
    /// Its length in bytes (the fall-through is `start` + `bytes`).
    bytes: u32,
    /// Its end, as the table's code ([`end_code`]).
    end: u8,
    /// The block predicted at its direct target and at its fall-through ([`NO_BLOCK`] for none):
    /// what [`Decoder`] predicts after a run of it without a look-up.
    after: [u32; 2],
}

impl Shape {
    fn fall_through(&self) -> u64 {
        self.start.wrapping_add(u64::from(self.bytes))
    }

    /// [`implied_next`] of the block.
    fn implied_next(&self, taken: bool) -> Option<u64> {
        match self.end {
            1 if taken => Some(self.target),
            2 | 3 => Some(self.target),
            4..=6 => None,
            _ => Some(self.fall_through()),
        }
    }

    /// The block predicted after a run of it that went on at `next`, when [`Shape::after`] has it.
    fn after(&self, next: u64) -> u32 {
        if next == self.fall_through() {
            self.after[1]
        } else if (1..=3).contains(&self.end) && next == self.target {
            self.after[0]
        } else {
            NO_BLOCK
        }
    }
}

/// No block (in [`Table`]'s predictions).
const NO_BLOCK: u32 = u32::MAX;

/// The direct target a block ends with, if any.
fn direct_target(b: &Block) -> Option<u64> {
    match b.end() {
        BlockEnd::Conditional { target } | BlockEnd::Jump { target } | BlockEnd::Call { target } => {
            Some(target)
        }
        _ => None,
    }
}

impl Table {
    /// Fills in the blocks' shapes and the predictions after each, once every block is in.
    fn seal(&mut self) {
        let at = |ip: Option<u64>| ip.and_then(|ip| self.predict(ip)).unwrap_or(NO_BLOCK);
        let mut lens = Vec::with_capacity(self.blocks.iter().map(Block::instructions).sum());
        let shapes = self
            .blocks
            .iter()
            .map(|b| {
                let (end, target) = end_code(b.end());
                let lens_at = lens.len() as u32;
                lens.extend_from_slice(b.lengths());
                Shape {
                    start: b.start(),
                    target: target.unwrap_or(0),
                    lens_at,
                    n: b.instructions() as u32,
                    bytes: b.fall_through().wrapping_sub(b.start()) as u32,
                    end,
                    after: [at(direct_target(b)), at(Some(b.fall_through()))],
                }
            })
            .collect();
        self.shapes = shapes;
        self.lens = lens;
    }

    /// The instruction lengths of a block of [`Table::seal`]'s shapes.
    fn lens_of(&self, s: &Shape) -> &[u8] {
        &self.lens[s.lens_at as usize..(s.lens_at + s.n) as usize]
    }

    fn push(&mut self, b: Block) {
        self.first_at.entry(b.start()).or_insert(self.blocks.len() as u32);
        self.blocks.push(b);
    }

    /// The block predicted to run at `ip`.
    fn predict(&self, ip: u64) -> Option<u32> {
        self.first_at.get(&ip).copied()
    }

    /// How many blocks it has.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

use super::spool::{end_code, end_from_code, implied_next};
use crate::sources::varint::{unzigzag, zigzag};

/// What the encoder and the decoder both keep: each record is written relative to it.
#[derive(Clone, Copy, Debug)]
struct Track {
    /// The IP the next instruction is predicted at.
    next_ip: u64,
    /// The last offset written (the base of the next one).
    off: u64,
    /// The previous instruction's carrier offset.
    insn_off: Option<u64>,
    /// The next instruction's index.
    i: u64,
    /// The class of the instructions that follow.
    class: Class,
    /// The last time record's TSC (TR13).
    tsc: u64,
}

impl Default for Track {
    fn default() -> Self {
        Track {
            next_ip: 0,
            off: 0,
            insn_off: None,
            i: 0,
            class: Class::Required,
            tsc: 0,
        }
    }
}

/// An instruction's kind (0: not a branch; 1, 2: a conditional branch not taken, taken; 3 + the
/// index in [`BranchKind::ALL`] less one for the others).
#[inline]
fn kind_code(b: &Option<Branch>) -> u8 {
    let Some(b) = b else { return 0 };
    match b.kind {
        BranchKind::Cond => 1 + u8::from(b.taken),
        BranchKind::Jump => 3,
        BranchKind::Call => 4,
        BranchKind::IndJump => 5,
        BranchKind::IndCall => 6,
        BranchKind::Ret => 7,
        BranchKind::Far => 8,
    }
}

fn cause_code(c: Cause) -> u8 {
    Cause::ALL.iter().position(|&x| x == c).unwrap_or(0) as u8
}

/// Writes records as `truth.bin`.
#[derive(Debug)]
pub struct Encoder<W: Write> {
    out: W,
    buf: Vec<u8>,
    t: Track,
    /// The blocks given ([`Sink::block`]), written after the end record.
    table: Table,
    /// What a run's record needs of each block of `table`, side by side ([`RunShape`]).
    runs: Vec<RunShape>,
    /// Bytes passed on to `out`.
    written: u64,
}

/// What [`Encoder`] needs of a block to write a run of it (TR15), in a few bytes beside the
/// other blocks' (a run's flags are then a few compares, without reading the block).
#[derive(Clone, Copy, Debug)]
struct RunShape {
    start: u64,
    fall_through: u64,
    /// The direct target (of a Jcc, JMP or CALL; 0 for none).
    target: u64,
    /// It ends in a direct branch: a run to `target` is implied.
    direct: bool,
    /// It ends in a conditional branch: a run to `target` is taken.
    cond: bool,
    /// A run to the fall-through is implied (no branch, or a conditional one).
    falls: bool,
    /// It is the first block of the table at its start (the one predicted there).
    first: bool,
}

impl RunShape {
    fn of(b: &Block, first: bool) -> Self {
        let (code, target) = end_code(b.end());
        RunShape {
            start: b.start(),
            fall_through: b.fall_through(),
            target: target.unwrap_or(0),
            direct: target.is_some(),
            cond: code == 1,
            falls: implied_next(b, false) == Some(b.fall_through()),
            first,
        }
    }
}

impl<W: Write> Encoder<W> {
    /// An encoder writing to `out` (buffer it: records are written a few bytes at a time).
    pub fn new(out: W) -> Self {
        Encoder {
            out,
            buf: Vec::with_capacity(1 << 16),
            t: Track::default(),
            table: Table::default(),
            runs: Vec::new(),
            written: 0,
        }
    }

    /// The writer, once finished.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn off(&mut self, off: Option<u64>) {
        match off {
            None => encode_varint(0, &mut self.buf),
            Some(o) => {
                encode_varint(1 + zigzag(o.wrapping_sub(self.t.off) as i64), &mut self.buf);
                self.t.off = o;
            }
        }
    }

    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= 1 << 15 {
            self.out.write_all(&self.buf)?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// A class record when the instructions that follow have another class.
    #[inline]
    fn class(&mut self, class: Class) {
        if class != self.t.class {
            self.new_class(class);
        }
    }

    #[inline(never)]
    fn new_class(&mut self, class: Class) {
        match class {
            Class::Required => self.buf.push(CLASS_REQUIRED),
            Class::Optional => self.buf.push(CLASS_OPTIONAL),
            Class::Lost(c) => self.buf.extend_from_slice(&[CLASS_LOST, cause_code(c)]),
            Class::Undefined(c) => self.buf.extend_from_slice(&[CLASS_UNDEFINED, cause_code(c)]),
        }
        self.t.class = class;
    }

    /// TR15: the block table and the 8 bytes that point to it.
    fn table(&mut self) {
        let at = self.written + self.buf.len() as u64;
        encode_varint(self.table.blocks.len() as u64, &mut self.buf);
        let mut last = 0u64;
        for b in &self.table.blocks {
            encode_varint(zigzag(b.start().wrapping_sub(last) as i64), &mut self.buf);
            last = b.start();
            encode_varint(b.instructions() as u64, &mut self.buf);
            self.buf.extend_from_slice(b.lengths());
            let (code, target) = end_code(b.end());
            self.buf.push(code);
            if let Some(t) = target {
                encode_varint(zigzag(t.wrapping_sub(b.start()) as i64), &mut self.buf);
            }
        }
        self.buf.extend_from_slice(&at.to_le_bytes());
    }
}

/// The bytes `truth.bin` starts with: the magic, the version, the header (`truth.jsonl`'s
/// first line without `"truth"`) and its length. A truth whose records were written before its
/// header was known (`simulate`'s streamed truth, [`super::stream`]) is these bytes, then its
/// records.
pub fn header_bytes(header: &serde_json::Value) -> io::Result<Vec<u8>> {
    let mut h = header.clone();
    if let Some(o) = h.as_object_mut() {
        o.remove("truth");
    }
    let json = serde_json::to_vec(&h).map_err(io::Error::other)?;
    let mut buf = Vec::with_capacity(json.len() + 20);
    buf.extend_from_slice(MAGIC);
    encode_varint(VERSION, &mut buf);
    encode_varint(json.len() as u64, &mut buf);
    buf.extend_from_slice(&json);
    Ok(buf)
}

impl<W: Write> Sink for Encoder<W> {
    fn header(&mut self, header: &serde_json::Value) -> io::Result<()> {
        let bytes = header_bytes(header)?;
        self.buf.extend_from_slice(&bytes);
        self.spill()
    }

    fn record(&mut self, r: &Record) -> io::Result<()> {
        match *r {
            Record::Insn {
                ip,
                branch,
                off,
                class,
                ..
            } => {
                self.class(class);
                let d = ip.wrapping_sub(self.t.next_ip);
                let new_off = off != self.t.insn_off;
                let dcode = if d < 7 { d as u8 } else { 7 };
                self.buf
                    .push(kind_code(&branch) << 4 | u8::from(new_off) << 3 | dcode);
                if dcode == 7 {
                    encode_varint(zigzag(d as i64), &mut self.buf);
                }
                if new_off {
                    self.off(off);
                    self.t.insn_off = off;
                }
                match branch {
                    Some(b) => {
                        encode_varint(zigzag(b.to.wrapping_sub(ip) as i64), &mut self.buf);
                        self.t.next_ip = b.to;
                    }
                    None => self.t.next_ip = ip,
                }
                self.t.i += 1;
            }
            Record::Span { cause, first, resume } => {
                self.buf.extend_from_slice(&[SPAN, cause_code(cause)]);
                encode_varint(first, &mut self.buf);
                encode_varint(resume.map_or(0, |r| r + 1), &mut self.buf);
            }
            Record::Enable { ip, off } => {
                self.buf.push(ENABLE);
                encode_varint(ip, &mut self.buf);
                self.off(off);
                self.t.next_ip = ip;
            }
            Record::Disable { off } => {
                self.buf.push(DISABLE);
                self.off(off);
            }
            Record::Async { from, to, off } => {
                self.buf.push(ASYNC);
                encode_varint(from, &mut self.buf);
                encode_varint(to, &mut self.buf);
                self.off(off);
                self.t.next_ip = to;
            }
            Record::Overflow { off } => {
                self.buf.push(OVERFLOW);
                self.off(off);
            }
            Record::Mark {
                text,
                ip,
                off,
                early,
                restated,
            } => {
                self.buf.push(MARK);
                let words = text.as_str().as_bytes();
                encode_varint(words.len() as u64, &mut self.buf);
                self.buf.extend_from_slice(words);
                self.buf.push(u8::from(ip.is_some()) | u8::from(restated) << 1);
                if let Some(ip) = ip {
                    encode_varint(ip, &mut self.buf);
                }
                self.off(off);
                encode_varint(early, &mut self.buf);
            }
            Record::Time { tsc, slack, off } => {
                self.buf.push(TIME);
                encode_varint(zigzag(tsc.wrapping_sub(self.t.tsc) as i64), &mut self.buf);
                self.t.tsc = tsc;
                encode_varint(slack, &mut self.buf);
                self.off(off);
            }
            Record::End { counts } => {
                self.buf.push(END);

                for v in [
                    counts.instructions,
                    counts.required,
                    counts.optional,
                    counts.lost,
                    counts.undefined,
                    counts.spans,
                ] {
                    encode_varint(v, &mut self.buf);
                }
            }
        }
        self.spill()
    }

    fn block(&mut self, b: &Block) -> io::Result<()> {
        if b.instructions() > MAX_BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a block of {} instructions (at most {MAX_BLOCK})",
                    b.instructions()
                ),
            ));
        }
        let k = self.table.blocks.len() as u32;
        self.table.push(b.clone());
        self.runs
            .push(RunShape::of(b, self.table.predict(b.start()) == Some(k)));
        Ok(())
    }

    fn run(&mut self, r: &Run) -> io::Result<()> {
        let Some(&s) = self.runs.get(r.block as usize) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("an execution of block {}, not given before it", r.block),
            ));
        };
        let to_target = s.direct && r.next == s.target;
        let taken = s.cond && to_target;
        let implied = to_target || (s.falls && r.next == s.fall_through);
        // The table's prediction at the next IP is this block exactly when it starts there
        // and is the first block that does.
        let predicted = s.start == self.t.next_ip && s.first;
        let new_off = r.off != self.t.insn_off;
        self.class(r.class);
        let mut tag = RUN;
        tag |= if new_off { NEW_OFF } else { 0 };
        tag |= if taken { TAKEN } else { 0 };
        tag |= if implied { 0 } else { NEXT };
        tag |= if predicted { 0 } else { BLOCK };
        self.buf.push(tag);
        if !predicted {
            encode_varint(u64::from(r.block), &mut self.buf);
        }
        if new_off {
            self.off(r.off);
            self.t.insn_off = r.off;
        }
        if !implied {
            encode_varint(zigzag(r.next.wrapping_sub(s.fall_through) as i64), &mut self.buf);
        }
        self.t.next_ip = r.next;
        self.t.i += u64::from(r.n);
        self.spill()
    }

    fn finish(&mut self) -> io::Result<()> {
        self.table();
        self.out.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        self.out.flush()
    }
}

/// Why `truth.bin` bytes cannot be read: what is wrong, and the byte offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte {at}: {msg}")]
#[non_exhaustive]
pub struct FormatError {
    /// The byte offset in the file.
    pub at: usize,
    /// What is wrong.
    pub msg: String,
}

fn bad(at: usize, msg: impl Into<String>) -> FormatError {
    FormatError { at, msg: msg.into() }
}

/// The header of a `truth.bin`: its JSON, and where the records start.
pub fn read_header(bytes: &[u8]) -> Result<(serde_json::Value, usize), FormatError> {
    read_versioned(bytes).map(|(h, start, _)| (h, start))
}

/// The block table of a version 4 `truth.bin` (TR15) and where the records end (the table's
/// offset); an empty table and the end of the bytes for earlier versions.
pub fn read_table(bytes: &[u8], version: u64, start: usize) -> Result<(Table, usize), FormatError> {
    let mut table = Table::default();
    if version < 4 {
        return Ok((table, bytes.len()));
    }
    let Some(tail) = bytes.len().checked_sub(8).filter(|&t| t >= start) else {
        return Err(bad(
            bytes.len(),
            "cut short: no block table (version 4 ends with one)",
        ));
    };
    let at = u64::from_le_bytes(bytes[tail..].try_into().expect("8 bytes"));
    let at = usize::try_from(at)
        .ok()
        .filter(|&a| (start..tail).contains(&a))
        .ok_or_else(|| {
            bad(
                tail,
                format!("the block table's offset {at} is not within the records"),
            )
        })?;
    let mut pos = at;
    let varint = |pos: &mut usize| -> Result<u64, FormatError> {
        let (v, next) = crate::sources::varint::read(&bytes[..tail], *pos, 10)
            .ok_or_else(|| bad(*pos, "the block table cut short"))?;
        *pos = next;
        Ok(v)
    };
    let n = varint(&mut pos)?;
    let mut last = 0u64;
    for k in 0..n {
        let from = pos;
        let start = last.wrapping_add(unzigzag(varint(&mut pos)?) as u64);
        last = start;
        let count = varint(&mut pos)?;
        let lens = usize::try_from(count)
            .ok()
            .filter(|&c| c <= MAX_BLOCK)
            .and_then(|c| bytes[..tail].get(pos..pos + c))
            .ok_or_else(|| {
                bad(
                    pos,
                    format!("block {k}: {count} instructions (at most {MAX_BLOCK}) or cut short"),
                )
            })?;
        pos += lens.len();
        let code = *bytes[..tail]
            .get(pos)
            .ok_or_else(|| bad(pos, "the block table cut short"))?;
        pos += 1;
        let end = end_from_code(code, || -> Result<u64, FormatError> {
            Ok(start.wrapping_add(unzigzag(varint(&mut pos)?) as u64))
        })?
        .ok_or_else(|| bad(pos - 1, format!("block {k}: end {code} (0 to 6 are defined)")))?;
        let b = Block::new(start, lens, end).map_err(|e| bad(from, format!("block {k}: {e}")))?;
        table.push(b);
    }
    if pos != tail {
        return Err(bad(pos, "bytes after the block table"));
    }
    table.seal();
    Ok((table, at))
}

/// [`read_header`], and the version.
fn read_versioned(bytes: &[u8]) -> Result<(serde_json::Value, usize, u64), FormatError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad(0, "not a truth.bin file: no PTEMUTRU magic"));
    }
    let at = MAGIC.len();
    let (v, at) =
        crate::sources::varint::read(bytes, at, 10).ok_or_else(|| bad(at, "cut short in the version"))?;
    if !(OLDEST..=VERSION).contains(&v) {
        return Err(bad(
            MAGIC.len(),
            format!("truth.bin format {v}; this ptemu reads {OLDEST} to {VERSION}"),
        ));
    }
    let (len, at) = crate::sources::varint::read(bytes, at, 10)
        .ok_or_else(|| bad(at, "cut short in the header's length"))?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            bad(
                at,
                format!("a header of {len} bytes runs past the end of the file"),
            )
        })?;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[at..end]).map_err(|e| bad(at, format!("the header: {e}")))?;
    if !header.is_object() {
        return Err(bad(at, "the header is not a JSON object"));
    }
    Ok((header, end, v))
}

/// Reads the records of a `truth.bin` from any record boundary: a copy of it is a cursor a
/// matcher can keep (`verify` follows several ways through a truth at once).
#[derive(Clone, Copy, Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    t: Track,
    /// The blocks runs name (TR15).
    table: Option<&'a Table>,
    /// The run being given back, instruction by instruction.
    run: Option<RunAt<'a>>,
    /// The block predicted at an IP after the last run ([`Table`]'s `after`): the IP and the
    /// block, which [`Table::predict`] gives for that IP too.
    hint: (u64, u32),
}

/// A run being given back: where its record starts, its block and the block's instruction
/// lengths, the next instruction's index in it and IP, where the run goes after it.
#[derive(Clone, Copy, Debug)]
struct RunAt<'a> {
    at: usize,
    block: u32,
    lens: &'a [u8],
    k: u32,
    ip: u64,
    next: u64,
}

/// A record, or a whole execution of a block given as one ([`Decoder::next_unit`], TR15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A record ([`Decoder::next_record`]'s).
    Record(Record),
    /// A whole run: its instructions, counted and not given one by one.
    Run(Run),
}

impl<'a> Decoder<'a> {
    /// A decoder at the first record, which starts at `start` (from [`read_header`]).
    pub fn new(bytes: &'a [u8], start: usize) -> Self {
        Decoder {
            bytes,
            pos: start,
            t: Track::default(),
            table: None,
            run: None,
            hint: (0, NO_BLOCK),
        }
    }

    /// A decoder at the first record of a version 4 truth (TR15), whose records are
    /// `bytes[start..end]` (from [`read_table`]) and name the blocks of `table`.
    pub fn with_table(bytes: &'a [u8], start: usize, end: usize, table: &'a Table) -> Self {
        Decoder {
            bytes: &bytes[..end.min(bytes.len())],
            pos: start,
            t: Track::default(),
            table: Some(table),
            run: None,
            hint: (0, NO_BLOCK),
        }
    }

    /// The position of the next record, or of the next instruction of a run: the byte it
    /// starts at ([`byte_of`]) shifted by [`POS_SHIFT`], plus the instruction's index in its run.
    pub fn pos(&self) -> usize {
        match self.run {
            Some(r) => r.at << POS_SHIFT | r.k as usize,
            None => self.pos << POS_SHIFT,
        }
    }

    /// The next instruction of the run being given back.
    #[inline]
    fn run_insn(&mut self, mut r: RunAt<'a>) -> (usize, Record) {
        let k = r.k as usize;
        let last = k + 1 >= r.lens.len();
        let ip = r.ip;
        let pos = r.at << POS_SHIFT | k;
        let branch = match self.table.and_then(|t| t.blocks.get(r.block as usize)) {
            Some(b) if last => super::record::branch_of(b, r.next),
            _ => None,
        };
        if last {
            self.run = None;
            self.t.next_ip = r.next;
        } else {
            r.k += 1;
            r.ip = ip.wrapping_add(u64::from(r.lens[k]));
            self.run = Some(r);
        }
        let i = self.t.i;
        self.t.i += 1;
        (
            pos,
            Record::Insn {
                i,
                ip,
                branch,
                off: self.t.insn_off,
                class: self.t.class,
            },
        )
    }

    /// The run being given back, whole: its instructions counted, none given one by one.
    fn whole_run(&mut self, r: RunAt<'a>) -> Run {
        let n = r.lens.len() as u32;
        let run = Run {
            i: self.t.i,
            block: r.block,
            n,
            next: r.next,
            off: self.t.insn_off,
            class: self.t.class,
        };
        self.t.i += u64::from(n);
        self.t.next_ip = r.next;
        run
    }

    /// The first IP and the instruction lengths of the block at `index` of the table runs name
    /// (TR15), as the table keeps them side by side for the decoder.
    #[inline]
    pub fn block_lens(&self, index: u32) -> Option<(u64, &'a [u8])> {
        let t = self.table?;
        let s = t.shapes.get(index as usize)?;
        Some((s.start, t.lens_of(s)))
    }

    /// The block at `index` of the table runs name (TR15).
    #[inline]
    pub fn block(&self, index: u32) -> Option<&'a Block> {
        self.table?.blocks.get(index as usize)
    }

    /// The run being given back (TR15): its block, and the index in it of the next instruction
    /// [`Decoder::next_record`] gives (at least 1: the first is given with the run's record);
    /// `None` outside a run.
    #[inline]
    pub fn run_block(&self) -> Option<(&'a Block, usize)> {
        let r = self.run?;
        Some((self.table?.blocks.get(r.block as usize)?, r.k as usize))
    }

    /// Passes over the rest of the run being given back, as the calls of
    /// [`Decoder::next_record`] that give its instructions would (nothing outside a run).
    pub fn pass_run(&mut self) {
        if let Some(r) = self.run.take() {
            self.t.i += (r.lens.len() - r.k as usize) as u64;
            self.t.next_ip = r.next;
        }
    }

    /// Passes over the next `m` instructions of the run being given back, as `m` calls of
    /// [`Decoder::next_record`] would, when more than `m` are left (the run's last instruction,
    /// with its branch and where the run goes, is [`Decoder::next_record`]'s to give). Returns
    /// whether it could.
    pub fn skip_in_run(&mut self, m: usize) -> bool {
        let Some(mut r) = self.run else {
            return m == 0;
        };
        let k = r.k as usize;
        let Some(passed) = r.lens.get(k..k + m).filter(|_| k + m < r.lens.len()) else {
            return false;
        };
        r.ip = passed
            .iter()
            .fold(r.ip, |ip, &len| ip.wrapping_add(u64::from(len)));
        r.k += m as u32;
        self.t.i += m as u64;
        self.run = Some(r);
        true
    }

    /// A run's record (its tag read, at `at`): the run set up.
    fn run_record(&mut self, at: usize, tag: u8) -> Result<RunAt<'a>, FormatError> {
        let table = self.table.ok_or_else(|| {
            bad(
                at,
                "a run in a truth.bin without a block table (version 4 has one)",
            )
        })?;
        let block = if tag & BLOCK != 0 {
            let v = self.varint()?;
            u32::try_from(v).map_err(|_| bad(at, format!("a run of block {v}")))?
        } else if self.hint.0 == self.t.next_ip && self.hint.1 != NO_BLOCK {
            self.hint.1
        } else {
            table.predict(self.t.next_ip).ok_or_else(|| {
                bad(
                    at,
                    format!(
                        "a run of the block predicted at {:#x}: none starts there",
                        self.t.next_ip
                    ),
                )
            })?
        };
        let Some(b) = table.shapes.get(block as usize) else {
            return Err(bad(
                at,
                format!(
                    "a run of block {block}, not among the {} of the table",
                    table.len()
                ),
            ));
        };
        if tag & NEW_OFF != 0 {
            self.t.insn_off = self.off()?;
        }
        let next = match (tag & NEXT != 0, b.implied_next(tag & TAKEN != 0)) {
            (false, Some(n)) => n,
            _ => b.fall_through().wrapping_add(unzigzag(self.varint()?) as u64),
        };
        self.hint = (next, b.after(next));
        self.prefetch_next(table);
        Ok(RunAt {
            at,
            block,
            lens: table.lens_of(b),
            k: 0,
            ip: b.start,
            next,
        })
    }

    /// Brings in the shape of the block the next run is likely of, while this run's lines are
    /// matched: the block the next record names, when it is a run that names one, else the one
    /// predicted after this run. A walk through a truth jumps among the blocks, and the first
    /// read of a shape was a cache miss a run (issue 51 §5).
    #[inline]
    fn prefetch_next(&self, table: &Table) {
        let named = match self.bytes.get(self.pos) {
            Some(&tag) if tag & !15 == RUN && tag & BLOCK != 0 => {
                crate::sources::varint::read(self.bytes, self.pos + 1, 10).map(|(v, _)| v as usize)
            }
            _ => None,
        };
        let k = named.unwrap_or(self.hint.1 as usize);
        if let Some(s) = table.shapes.get(k) {
            crate::tracer::prefetch(s);
            // A shape may end in the next cache line.
            if let Some(s) = table.shapes.get(k + 1) {
                crate::tracer::prefetch(s);
            }
        }
    }

    fn varint(&mut self) -> Result<u64, FormatError> {
        let (v, next) = crate::sources::varint::read(self.bytes, self.pos, 10)
            .ok_or_else(|| bad(self.pos, "a record cut short (or a varint longer than 10 bytes)"))?;
        self.pos = next;
        Ok(v)
    }

    fn byte(&mut self) -> Result<u8, FormatError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| bad(self.pos, "a record cut short"))?;
        self.pos += 1;
        Ok(b)
    }

    fn cause(&mut self) -> Result<Cause, FormatError> {
        let at = self.pos;
        let c = self.byte()?;
        Cause::ALL.get(usize::from(c)).copied().ok_or_else(|| {
            bad(
                at,
                format!("cause {c} (0 to {} are defined)", Cause::ALL.len() - 1),
            )
        })
    }

    fn off(&mut self) -> Result<Option<u64>, FormatError> {
        match self.varint()? {
            0 => Ok(None),
            v => {
                let o = self.t.off.wrapping_add(unzigzag(v - 1) as u64);
                self.t.off = o;
                Ok(Some(o))
            }
        }
    }

    /// A class record (its tag read): the class of the instructions that follow.
    fn class_record(&mut self, tag: u8) -> Result<(), FormatError> {
        self.t.class = match tag {
            CLASS_REQUIRED => Class::Required,
            CLASS_OPTIONAL => Class::Optional,
            CLASS_LOST => Class::Lost(self.cause()?),
            _ => Class::Undefined(self.cause()?),
        };
        Ok(())
    }

    /// The next record, or the next run whole ([`Unit::Run`]: its instructions counted, not
    /// given one by one), and the position it starts at; `None` at the end of the bytes. Inside a
    /// run given by [`Decoder::next_record`], that run's next instruction. What it accepts and
    /// refuses is [`Decoder::next_record`]'s, byte for byte (a run's bytes are all read at its
    /// record).
    #[inline]
    pub fn next_unit(&mut self) -> Result<Option<(usize, Unit)>, FormatError> {
        if self.run.is_none() {
            while let Some(&tag) = self.bytes.get(self.pos) {
                let at = self.pos;
                if tag & !15 == RUN {
                    self.pos += 1;
                    let r = self.run_record(at, tag)?;
                    return Ok(Some((at << POS_SHIFT, Unit::Run(self.whole_run(r)))));
                }
                if !(CLASS_REQUIRED..=CLASS_UNDEFINED).contains(&tag) {
                    break;
                }
                self.pos += 1;
                self.class_record(tag)?;
            }
        }
        Ok(self.next_record()?.map(|(at, r)| (at, Unit::Record(r))))
    }

    /// The next record and the offset it starts at; `None` at the end of the bytes.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<(usize, Record)>, FormatError> {
        if let Some(r) = self.run {
            return Ok(Some(self.run_insn(r)));
        }
        loop {
            let at = self.pos;
            let Some(&tag) = self.bytes.get(at) else {
                return Ok(None);
            };
            self.pos += 1;
            let r = match tag {
                t if t & !15 == RUN => {
                    let r = self.run_record(at, t)?;
                    return Ok(Some(self.run_insn(r)));
                }
                t if t < FIRST_OTHER => {
                    let kind = t >> 4;
                    let mut ip = self.t.next_ip.wrapping_add(u64::from(t & 7));
                    if t & 7 == 7 {
                        ip = self.t.next_ip.wrapping_add(unzigzag(self.varint()?) as u64);
                    }
                    if t & 8 != 0 {
                        self.t.insn_off = self.off()?;
                    }
                    let branch = match kind {
                        0 => None,
                        k => {
                            let to = ip.wrapping_add(unzigzag(self.varint()?) as u64);
                            let (kind, taken) = match k {
                                1 => (BranchKind::Cond, false),
                                2 => (BranchKind::Cond, true),
                                k => (BranchKind::ALL[usize::from(k - 3) + 1], true),
                            };
                            Some(Branch { kind, to, taken })
                        }
                    };
                    self.t.next_ip = branch.map_or(ip, |b| b.to);
                    let i = self.t.i;
                    self.t.i += 1;
                    Record::Insn {
                        i,
                        ip,
                        branch,
                        off: self.t.insn_off,
                        class: self.t.class,
                    }
                }
                SPAN => Record::Span {
                    cause: self.cause()?,
                    first: self.varint()?,
                    resume: self.varint()?.checked_sub(1),
                },
                ENABLE => {
                    let ip = self.varint()?;
                    self.t.next_ip = ip;
                    Record::Enable { ip, off: self.off()? }
                }
                DISABLE => Record::Disable { off: self.off()? },
                ASYNC => {
                    let from = self.varint()?;
                    let to = self.varint()?;
                    self.t.next_ip = to;
                    Record::Async {
                        from,
                        to,
                        off: self.off()?,
                    }
                }
                OVERFLOW => Record::Overflow { off: self.off()? },
                MARK => {
                    let n = self.varint()?;
                    let from = self.pos;
                    let words = usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= Text::MAX)
                        .and_then(|n| self.bytes.get(from..from + n))
                        .ok_or_else(|| bad(from, format!("a mark of {n} bytes (at most {})", Text::MAX)))?;
                    let text = std::str::from_utf8(words)
                        .ok()
                        .and_then(Text::new)
                        .ok_or_else(|| bad(from, "a mark's words are not text"))?;
                    self.pos = from + words.len();
                    let flags = self.byte()?;
                    if flags > 3 {
                        return Err(bad(self.pos - 1, format!("a mark's flags {flags} (0 to 3)")));
                    }
                    let ip = if flags & 1 != 0 {
                        Some(self.varint()?)
                    } else {
                        None
                    };
                    Record::Mark {
                        text,
                        ip,
                        off: self.off()?,
                        early: self.varint()?,
                        restated: flags & 2 != 0,
                    }
                }
                TIME => {
                    self.t.tsc = self.t.tsc.wrapping_add(unzigzag(self.varint()?) as u64);
                    Record::Time {
                        tsc: self.t.tsc,
                        slack: self.varint()?,
                        off: self.off()?,
                    }
                }
                CLASS_REQUIRED | CLASS_OPTIONAL | CLASS_LOST | CLASS_UNDEFINED => {
                    self.class_record(tag)?;
                    continue;
                }
                END => {
                    let mut v = [0u64; 6];
                    for x in &mut v {
                        *x = self.varint()?;
                    }
                    Record::End {
                        counts: Counts {
                            instructions: v[0],
                            required: v[1],
                            optional: v[2],
                            lost: v[3],
                            undefined: v[4],
                            spans: v[5],
                        },
                    }
                }
                t => return Err(bad(at, format!("unknown record tag {t}"))),
            };
            return Ok(Some((at << POS_SHIFT, r)));
        }
    }
}

/// Checks a whole `truth.bin` (TR1): the header, every record, the end record last and its counts
/// those of the records before it. Returns the header, where the records start, and the counts.
pub fn validate(
    bytes: &[u8],
    progress: impl FnMut(usize),
) -> Result<(serde_json::Value, usize, Counts), FormatError> {
    let (header, start, table, end) = read_prelude(bytes)?;
    let counts = validate_records(bytes, start, end, &table, progress)?;
    Ok((header, start, counts))
}

/// What a `truth.bin` holds before its records are read (TR1, TR15): the header, where the
/// records start, the block table and where the records end. [`validate`] checks these first,
/// then [`validate_records`] the records.
pub fn read_prelude(bytes: &[u8]) -> Result<(serde_json::Value, usize, Table, usize), FormatError> {
    let (header, start, version) = read_versioned(bytes)?;
    let (table, end) = read_table(bytes, version, start)?;
    Ok((header, start, table, end))
}

/// Checks the records `bytes[start..end]` of a `truth.bin` whose blocks are `table` (from
/// [`read_prelude`]): every record, the end record last and its counts those of the records
/// before it (TR1). Returns the counts; `progress` is told where it is every 2^20 records.
pub fn validate_records(
    bytes: &[u8],
    start: usize,
    end: usize,
    table: &Table,
    mut progress: impl FnMut(usize),
) -> Result<Counts, FormatError> {
    let mut d = Decoder::with_table(bytes, start, end, table);
    let mut seen = Counts::default();
    let mut n = 0u32;
    // A run is counted whole (TR15): its instructions are not given one by one.
    while let Some((at, u)) = d.next_unit()? {
        n = n.wrapping_add(1);
        if n.is_multiple_of(1 << 20) {
            progress(d.pos);
        }
        let r = match u {
            Unit::Run(run) => {
                seen.add_run(&run);
                continue;
            }
            Unit::Record(r) => r,
        };
        if let Record::End { counts } = r {
            if let Some((what, said, has)) = counts.first_difference(&seen) {
                return Err(bad(
                    byte_of(at),
                    format!("the end record counts {said} {what}(s), the records before it have {has}"),
                ));
            }
            if d.pos != end {
                return Err(bad(d.pos, "bytes after the end record"));
            }
            return Ok(seen);
        }
        seen.add(&r);
    }
    Err(bad(end, "the file ends without its end record: cut short?"))
}

/// A truth's bytes in `truth.bin`'s form: a mapped file, or bytes in memory (a `truth.jsonl`
/// turned into this form, stdin).
pub enum Bytes {
    /// A `truth.bin` file, mapped.
    Mapped(memmap2::Mmap),
    /// Bytes in memory.
    Owned(Vec<u8>),
}

impl Bytes {
    /// The file at `path` mapped when it starts with [`MAGIC`] (a file too short to tell counts
    /// as one, so it is refused as a cut `truth.bin`); `None` when it does not (a `truth.jsonl`).
    pub fn map_if_compact(path: &std::path::Path) -> io::Result<Option<Self>> {
        use std::io::Read;
        let f = std::fs::File::open(path)?;
        let mut magic = [0u8; 8];
        let n = (&f).take(8).read(&mut magic)?;
        if n == 0 || magic[..n] != MAGIC[..n] {
            return Ok(None);
        }
        // SAFETY: the file is only read; one changed meanwhile gives wrong records or a format
        // error, never undefined behaviour in the safe code reading the bytes.
        Ok(Some(Bytes::Mapped(unsafe { memmap2::Mmap::map(&f) }?)))
    }

    /// The bytes.
    pub fn get(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }

    /// Lets the pages of `from..to` go: they were read, and a mapped truth is read once from
    /// front to back (with `verify`'s ways close together), so the resident memory stays flat
    /// however long the file is (TR8, TR9).
    pub fn release(&self, from: usize, to: usize) {
        const PAGE: usize = 4096;
        let (from, to) = (from.next_multiple_of(PAGE), to / PAGE * PAGE);
        if let (Bytes::Mapped(m), true) = (self, to > from) {
            // SAFETY: a read-only mapping of a file: pages dropped are read again from the file if
            // touched, so no byte any slice of the mapping sees changes.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from) };
        }
    }
}

/// What [`Bytes::check`] found in a whole, well-formed `truth.bin`.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The header.
    pub header: serde_json::Value,
    /// Where the records start.
    pub start: usize,
    /// The counts of the records (those of the end record).
    pub counts: Counts,
    /// Where the records end (the block table's offset in version 4, TR15).
    pub end: usize,
    /// The blocks runs name (TR15).
    pub table: Table,
}

impl Checked {
    /// A decoder at the first record of `bytes`, the truth checked.
    pub fn decoder<'a>(&'a self, bytes: &'a [u8]) -> Decoder<'a> {
        Decoder::with_table(bytes, self.start, self.end, &self.table)
    }
}

impl Bytes {
    /// [`validate`]s the whole truth (TR1), letting the pages go as they are read (a mapped file
    /// is read whole before anything is judged or printed, in flat memory).
    pub fn check(&self) -> Result<Checked, FormatError> {
        let (header, start, table, end) = read_prelude(self.get())?;
        let counts = self.check_records(start, end, &table)?;
        Ok(Checked {
            header,
            start,
            counts,
            end,
            table,
        })
    }

    /// [`validate_records`] over these bytes, letting the pages go as they are read.
    pub fn check_records(&self, start: usize, end: usize, table: &Table) -> Result<Counts, FormatError> {
        let mut released = 0;
        let counts = validate_records(self.get(), start, end, table, |pos| {
            self.release(released, pos);
            released = pos;
        })?;
        self.release(released, self.get().len());
        Ok(counts)
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes of truth.bin", self.get().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<Record> {
        let b = |kind, to, taken| Some(Branch { kind, to, taken });
        let insn = |i, ip, branch, off, class| Record::Insn {
            i,
            ip,
            branch,
            off,
            class,
        };
        let mut v = vec![
            Record::Enable {
                ip: 0x40_1000,
                off: Some(40),
            },
            insn(0, 0x40_1000, None, Some(40), Class::Required),
            insn(
                1,
                0x40_1003,
                b(BranchKind::Cond, 0x40_1005, false),
                Some(44),
                Class::Required,
            ),
            insn(
                2,
                0x40_1005,
                b(BranchKind::Cond, 0x40_0ff0, true),
                Some(44),
                Class::Required,
            ),
            insn(
                3,
                0x40_0ff0,
                b(BranchKind::Call, 0x7fff_ffff_0000, true),
                Some(50),
                Class::Optional,
            ),
            insn(4, 0x7fff_ffff_0000, None, Some(50), Class::Optional),
            Record::Span {
                cause: Cause::Corrupt,
                first: 5,
                resume: Some(4096),
            },
            insn(
                5,
                0x7fff_ffff_0020,
                b(BranchKind::Ret, 0x40_0ff5, true),
                None,
                Class::Lost(Cause::Corrupt),
            ),
            Record::Overflow { off: Some(60) },
            Record::Mark {
                text: Text::new("ptwrite: 6025c8").unwrap(),
                ip: Some(0x400000),
                off: Some(62),
                early: 3,
                restated: false,
            },
            Record::Time {
                tsc: 0x1_0000_2000,
                slack: 0,
                off: Some(64),
            },
            Record::Time {
                tsc: 0x1_0000_1000,
                slack: 9,
                off: None,
            },
            Record::Mark {
                text: Text::new("exec mode: 64-bit").unwrap(),
                ip: None,
                off: None,
                early: 0,
                restated: true,
            },
            insn(
                6,
                0x40_0ff5,
                b(BranchKind::Far, 0x10, true),
                Some(4000),
                Class::Undefined(Cause::Gap),
            ),
            Record::Async {
                from: 0x10,
                to: 0xffff_ffff_8000_0000,
                off: Some(30),
            },
            insn(
                7,
                0xffff_ffff_8000_0000,
                b(BranchKind::IndJump, 1, true),
                Some(30),
                Class::Required,
            ),
            insn(8, 1, b(BranchKind::IndCall, 2, true), Some(31), Class::Required),
            insn(9, 2, b(BranchKind::Jump, 2, true), Some(31), Class::Required),
            Record::Disable { off: None },
        ];
        let mut c = Counts::default();
        v.iter().for_each(|r| c.add(r));
        v.push(Record::End { counts: c });
        v
    }

    fn encode(rs: &[Record]) -> Vec<u8> {
        let mut e = Encoder::new(Vec::new());
        e.header(&serde_json::json!({"truth": 1, "truncated": true}))
            .unwrap();
        for r in rs {
            e.record(r).unwrap();
        }
        e.finish().unwrap();
        e.into_inner()
    }

    /// Blocks, runs of them (predicted and not, taken and not, with and without a successor,
    /// a carrier change, a class change) between other records, written as `truth.bin`; and
    /// the records a decoder must give back.
    fn with_runs() -> (Vec<u8>, Vec<Record>) {
        let blocks = [
            Block::new(0x1000, &[2, 3], BlockEnd::Conditional { target: 0x2000 }).unwrap(),
            Block::new(0x2000, &[4], BlockEnd::Return).unwrap(),
            Block::new(0x1005, &[1, 1, 1], BlockEnd::Jump { target: 0x1000 }).unwrap(),
            Block::new(0x1000, &[5], BlockEnd::IndirectCall).unwrap(),
        ];
        let run = |i, block, next, off, class| Run {
            i,
            block,
            n: blocks[block as usize].instructions() as u32,
            next,
            off,
            class,
        };
        let runs = [
            run(1, 0, 0x2000, Some(7), Class::Required),
            run(3, 1, 0x1005, Some(7), Class::Required),
            run(4, 2, 0x1000, Some(9), Class::Optional),
            run(7, 0, 0x1005, None, Class::Lost(Cause::Wrap)),
            run(9, 3, 0x9999_0000, None, Class::Lost(Cause::Wrap)),
        ];
        let mut e = Encoder::new(Vec::new());
        e.header(&serde_json::json!({})).unwrap();
        for b in &blocks {
            e.block(b).unwrap();
        }
        let first = Record::Insn {
            i: 0,
            ip: 0xfff,
            branch: None,
            off: Some(5),
            class: Class::Required,
        };
        e.record(&first).unwrap();
        let mut want = vec![first];
        let mut counts = Counts::default();
        counts.add(&first);
        for (k, r) in runs.iter().enumerate() {
            if k == 2 {
                let m = Record::Time {
                    tsc: 77,
                    slack: 0,
                    off: Some(8),
                };
                e.record(&m).unwrap();
                want.push(m);
            }
            e.run(r).unwrap();
            counts.add_run(r);
            r.each_insn(&blocks[r.block as usize], |i| want.push(i));
        }
        let end = Record::End { counts };
        e.record(&end).unwrap();
        want.push(end);
        e.finish().unwrap();
        (e.into_inner(), want)
    }

    /// TR15: runs come back as their instructions, each at a position of its own, around the
    /// other records; the file is version 4 with its table.
    #[test]
    fn tr15_runs_round_trip() {
        let (bytes, want) = with_runs();
        assert_eq!(bytes[8], 4);
        let checked = Bytes::Owned(bytes.clone()).check().unwrap();
        assert_eq!((checked.table.len(), checked.counts.instructions), (4, 10));
        let mut d = checked.decoder(&bytes);
        let (mut back, mut pos) = (Vec::new(), Vec::new());
        while let Some((at, r)) = d.next_record().unwrap() {
            back.push(r);
            pos.push(at);
        }
        assert_eq!(back, want);
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
    }

    /// TR1, TR15: a version 4 file cut anywhere (its table, its pointer) or with any byte
    /// changed is an error naming a byte within it, or reads; never a panic.
    #[test]
    fn tr1_tr15_a_cut_or_damaged_table_is_an_error_with_its_byte() {
        let (bytes, _) = with_runs();
        for n in 0..bytes.len() {
            let e = Bytes::Owned(bytes[..n].to_vec()).check().unwrap_err();
            assert!(e.at <= n, "{n}: {e}");
        }
        for k in 0..bytes.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff, 160, 175] {
                let mut b = bytes.clone();
                b[k] = v;
                if let Err(e) = Bytes::Owned(b).check() {
                    assert!(e.at <= bytes.len(), "{k}: {e}");
                }
            }
        }
    }

    /// The whole-file check with every run given instruction by instruction (as it was before
    /// runs were counted whole): the reference [`validate`] is tested against.
    fn validate_per_instruction(bytes: &[u8]) -> Result<(serde_json::Value, usize, Counts), FormatError> {
        let (header, start, version) = read_versioned(bytes)?;
        let (table, end) = read_table(bytes, version, start)?;
        let mut d = Decoder::with_table(bytes, start, end, &table);
        let mut seen = Counts::default();
        while let Some((at, r)) = d.next_record()? {
            if let Record::End { counts } = r {
                if let Some((what, said, has)) = counts.first_difference(&seen) {
                    return Err(bad(
                        byte_of(at),
                        format!("the end record counts {said} {what}(s), the records before it have {has}"),
                    ));
                }
                if d.pos != end {
                    return Err(bad(d.pos, "bytes after the end record"));
                }
                return Ok((header, start, seen));
            }
            seen.add(&r);
        }
        Err(bad(end, "the file ends without its end record: cut short?"))
    }

    /// TR1, TR15: a run counted whole is accepted or refused as its instructions given one by
    /// one are, with the same byte and message: the file whole, cut anywhere, any byte changed.
    #[test]
    fn tr1_tr15_runs_counted_whole_check_as_their_instructions_do() {
        let (bytes, _) = with_runs();
        let same = |b: &[u8], what: &str| {
            assert_eq!(validate(b, |_| {}), validate_per_instruction(b), "{what}");
        };
        same(&bytes, "whole");
        for n in 0..bytes.len() {
            same(&bytes[..n], &format!("cut at {n}"));
        }
        for k in 0..bytes.len() {
            for v in [
                0u8, 1, 2, 7, 8, 0x7f, 0x80, 0xff, 149, 150, 153, 160, 162, 164, 168, 175,
            ] {
                let mut b = bytes.clone();
                b[k] = v;
                same(&b, &format!("byte {k} = {v}"));
            }
        }
    }

    /// TR15: the decoder's prediction after a run (its hint) is the table's: the same records
    /// with and without it, the hint cleared before every run.
    #[test]
    fn tr15_the_hint_after_a_run_is_the_tables_prediction() {
        let (bytes, want) = with_runs();
        let checked = Bytes::Owned(bytes.clone()).check().unwrap();
        let mut d = checked.decoder(&bytes);
        let mut back = Vec::new();
        loop {
            d.hint = (0, NO_BLOCK);
            match d.next_record().unwrap() {
                Some((_, r)) => back.push(r),
                None => break,
            }
        }
        assert_eq!(back, want);
    }

    /// TR9: every kind of record, class and offset comes back as it went in.
    #[test]
    fn tr9_records_round_trip() {
        let rs = records();
        let bytes = encode(&rs);
        let (h, start, counts) = validate(&bytes, |_| {}).unwrap();
        assert_eq!(h, serde_json::json!({"truncated": true}));
        assert_eq!(counts.instructions, 10);
        let checked = Bytes::Owned(bytes.clone()).check().unwrap();
        assert_eq!(checked.start, start);
        let mut d = checked.decoder(&bytes);
        let mut back = Vec::new();
        while let Some((_, r)) = d.next_record().unwrap() {
            back.push(r);
        }
        assert_eq!(back, rs);
    }

    /// TR1, TR9: a file cut anywhere, miscounted or with a bad tag is an error naming a byte,
    /// never a panic.
    #[test]
    fn tr1_tr9_a_cut_or_damaged_file_is_an_error_with_its_byte() {
        let bytes = encode(&records());
        for n in 0..bytes.len() {
            let e = validate(&bytes[..n], |_| {}).unwrap_err();
            assert!(e.at <= n, "{n}: {e}");
        }
        for k in 0..bytes.len() {
            for v in [0u8, 0x7f, 0x80, 0xff, 200] {
                let mut b = bytes.clone();
                b[k] = v;
                let _ = validate(&b, |_| {});
            }
        }
        // A byte between the end record and the block table (the pointer moved past it), and
        // one after the pointer.
        let n = bytes.len();
        let table = u64::from_le_bytes(bytes[n - 8..].try_into().unwrap()) as usize;
        let mut more = bytes[..table].to_vec();
        more.push(0);
        more.extend_from_slice(&bytes[table..n - 8]);
        more.extend_from_slice(&(table as u64 + 1).to_le_bytes());
        assert!(validate(&more, |_| {})
            .unwrap_err()
            .msg
            .contains("after the end record"));
        let mut more = bytes.clone();
        more.push(0);
        assert!(validate(&more, |_| {}).is_err());
    }
}
