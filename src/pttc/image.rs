//! Assembling a whole .ptt the way `yasm -f bin` does: sections laid out at their load addresses
//! (`start=`) relative to `org` with zero-filled gaps, labels at their section's virtual address
//! (`vstart=`), branches to labels in the same section relaxed to their short form when the
//! target is in reach, branches elsewhere near. Also what yasm's listing shows per line, which
//! pttc reads its labels from ([`super::listing`]).

use super::asm::{self, BranchKind, Insn, Target};
use super::parse::{self, Item, StmtKind};
use super::PttcError;
use std::collections::HashMap;

/// yasm's default alignment of a bin section.
const SECTION_ALIGN: u64 = 4;
/// The largest section (and flat binary) written: 256 MiB (libipt's largest test writes
/// 100,000 bytes), so that no input makes ptemu allocate more.
const MAX_SIZE: u64 = 1 << 28;
/// The most repeats of a branch (`times N jmp l`): each is laid out on its own.
const MAX_BRANCH_REPEATS: u64 = 1 << 16;

/// What yasm's listing shows for one source line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListingLine {
    /// The statement as the listing prints it (see [`parse::Stmt::listing`]).
    pub text: String,
    /// The section-relative offset of the line's first byte, when it emits bytes.
    pub offset: Option<u64>,
    /// The bytes the listing shows: all of them, or one repetition of a `times` line.
    pub shown: Vec<u8>,
    /// A `times` line (the listing marks it `<rept>`).
    pub repeated: bool,
    /// A `times 0` line: yasm leaves it out of the listing.
    pub vanished: bool,
}

/// A section of the output, encoded.
#[derive(Clone, Debug)]
struct Section {
    /// Its name (`.text` for the default section).
    name: String,
    /// Where it is loaded (the file offset plus org).
    start: u64,
    /// Its bytes.
    bytes: Vec<u8>,
}

/// The assembled file.
#[derive(Clone, Debug)]
pub struct Image {
    /// What `yasm -f bin` writes.
    pub bin: Vec<u8>,
    /// The listing, one entry per source line.
    pub lines: Vec<ListingLine>,
    /// `org`: where the file's first byte is loaded.
    pub org: u64,
}

#[derive(Clone, Debug)]
enum PieceKind {
    Bytes {
        data: Vec<u8>,
        count: u64,
    },
    Branch {
        kind: BranchKind,
        target: Target,
        bits: u32,
        long: bool,
    },
    Align {
        n: u64,
        bits: u32,
    },
}

#[derive(Clone, Debug)]
struct Piece {
    line: usize,
    kind: PieceKind,
    offset: u64,
}

struct Sect {
    name: String,
    vstart: Option<u64>,
    start: Option<u64>,
    pieces: Vec<Piece>,
    size: u64,
}

/// A label's place: a section and the piece it stands in front of.
#[derive(Clone, Copy)]
struct Place {
    section: usize,
    piece: usize,
}

/// Assembles the lines of a .ptt file.
pub fn assemble(lines: &[&str]) -> Result<Image, PttcError> {
    let mut sects = vec![Sect {
        name: ".text".into(),
        vstart: None,
        start: None,
        pieces: Vec::new(),
        size: 0,
    }];
    let mut current = 0usize;
    let mut bits = 16u32;
    let mut org: Option<u64> = None;
    let mut org_line = 0;
    // Each label a branch names, with its line: checked to exist before layout.
    let mut labels_used: Vec<(String, usize)> = Vec::new();
    let mut places: HashMap<String, (Place, usize)> = HashMap::new();
    let mut listing = Vec::with_capacity(lines.len());
    // Per line: the section and first piece it emitted, to fill in the listing after layout.
    let mut emitted: Vec<Option<(usize, usize)>> = Vec::with_capacity(lines.len());

    for (i, text) in lines.iter().enumerate() {
        let n = i + 1;
        let stmt = parse::parse_stmt(text).map_err(|m| PttcError::new(n, m))?;
        let mut entry = ListingLine {
            text: stmt.listing.clone(),
            ..ListingLine::default()
        };
        // A section directive switches before its line's label is placed.
        if let StmtKind::Section { name, vstart, start } = &stmt.kind {
            current = match sects.iter().position(|s| &s.name == name) {
                Some(at) => {
                    if vstart.is_some() || start.is_some() {
                        return Err(PttcError::new(
                            n,
                            format!("section {name}: attributes given twice"),
                        ));
                    }
                    at
                }
                None => {
                    let start = start
                        .ok_or_else(|| PttcError::new(n, format!("section {name}: start= is required")))?;
                    let vstart = vstart.unwrap_or(start);
                    if !vstart.is_multiple_of(SECTION_ALIGN) {
                        return Err(PttcError::new(
                            n,
                            format!("section {name}: vstart {vstart:#x} is not 4-byte aligned"),
                        ));
                    }
                    // yasm warns and rounds an unaligned start up.
                    let start = aligned_address(start).ok_or_else(|| {
                        PttcError::new(n, format!("section {name}: start {start:#x} is past 2^64"))
                    })?;
                    sects.push(Sect {
                        name: name.clone(),
                        vstart: Some(vstart),
                        start: Some(start),
                        pieces: Vec::new(),
                        size: 0,
                    });
                    sects.len() - 1
                }
            };
        }
        if let Some(label) = &stmt.label {
            let place = Place {
                section: current,
                piece: sects[current].pieces.len(),
            };
            if let Some((_, first)) = places.insert(label.clone(), (place, n)) {
                return Err(PttcError::new(
                    n,
                    format!("label '{label}' already defined on line {first}"),
                ));
            }
        }
        let first_piece = sects[current].pieces.len();
        match stmt.kind {
            StmtKind::Empty | StmtKind::Section { .. } => {}
            StmtKind::Org(v) => {
                if org.is_some() {
                    return Err(PttcError::new(n, "org given twice"));
                }
                org = Some(v);
                org_line = n;
            }
            StmtKind::Bits(b) => bits = b,
            StmtKind::Align(a) => sects[current].pieces.push(Piece {
                line: n,
                kind: PieceKind::Align { n: a, bits },
                offset: 0,
            }),
            StmtKind::Emit { times, item } => {
                let count = times.unwrap_or(1);
                entry.repeated = times.is_some();
                entry.vanished = count == 0;
                let pieces = &mut sects[current].pieces;
                match item {
                    Item::Data { size: _, bytes } => {
                        if (bytes.len() as u64)
                            .checked_mul(count)
                            .is_none_or(|n| n > MAX_SIZE)
                        {
                            return Err(PttcError::new(
                                n,
                                format!("times {count}: over {MAX_SIZE:#x} bytes"),
                            ));
                        }
                        pieces.push(Piece {
                            line: n,
                            kind: PieceKind::Bytes { data: bytes, count },
                            offset: 0,
                        });
                    }
                    Item::Insn(Insn::Branch(kind, target)) => {
                        if count > MAX_BRANCH_REPEATS {
                            return Err(PttcError::new(
                                n,
                                format!("times {count}: a branch repeats at most {MAX_BRANCH_REPEATS} times"),
                            ));
                        }
                        if let Target::Label(name) = &target {
                            labels_used.push((name.clone(), n));
                        }
                        let long = kind == BranchKind::Call || matches!(target, Target::Abs(_));
                        for _ in 0..count {
                            pieces.push(Piece {
                                line: n,
                                kind: PieceKind::Branch {
                                    kind,
                                    target: target.clone(),
                                    bits,
                                    long,
                                },
                                offset: 0,
                            });
                        }
                    }
                    Item::Insn(insn) => {
                        let data = asm::encode_fixed(&insn, bits).map_err(|m| PttcError::new(n, m))?;
                        if (data.len() as u64)
                            .checked_mul(count)
                            .is_none_or(|n| n > MAX_SIZE)
                        {
                            return Err(PttcError::new(
                                n,
                                format!("times {count}: over {MAX_SIZE:#x} bytes"),
                            ));
                        }
                        pieces.push(Piece {
                            line: n,
                            kind: PieceKind::Bytes { data, count },
                            offset: 0,
                        });
                    }
                }
            }
        }
        let added = sects[current].pieces.len() - first_piece;
        emitted.push((added > 0).then_some((current, first_piece)));
        listing.push(entry);
    }

    // Every branch target is a label defined somewhere (checked once, before layout).
    if let Some((name, line)) = labels_used.iter().find(|(name, _)| !places.contains_key(name)) {
        return Err(PttcError::new(*line, format!("undefined label '{name}'")));
    }

    // yasm aligns every bin section to 4 bytes: the default one starts at org rounded up.
    let org_addr = org.unwrap_or(0);
    let text_start = aligned_address(org_addr)
        .ok_or_else(|| PttcError::new(org_line, format!("org {org_addr:#x} is past 2^64")))?;
    sects[0].vstart = Some(text_start);
    sects[0].start = Some(text_start);

    // Relaxation: every branch starts short where it can be, and grows until all reach.
    loop {
        for s in &mut sects {
            let mut off = 0u64;
            for p in &mut s.pieces {
                p.offset = off;
                off += piece_size(&p.kind, off);
                if off > MAX_SIZE {
                    return Err(PttcError::new(
                        p.line,
                        format!("section {} is over {MAX_SIZE:#x} bytes", s.name),
                    ));
                }
            }
            s.size = off;
        }
        let mut grow = Vec::new();
        for (si, s) in sects.iter().enumerate() {
            for (pi, p) in s.pieces.iter().enumerate() {
                let PieceKind::Branch {
                    target: Target::Label(name),
                    long: false,
                    ..
                } = &p.kind
                else {
                    continue;
                };
                let (place, _) = places[name];
                let reach = place.section == si && {
                    let to = offset_of(s, place.piece) as i64;
                    let disp = to - (p.offset as i64 + 2);
                    (-128..=127).contains(&disp)
                };
                if !reach {
                    grow.push((si, pi));
                }
            }
        }
        let changed = !grow.is_empty();
        for (si, pi) in grow {
            if let PieceKind::Branch { long, .. } = &mut sects[si].pieces[pi].kind {
                *long = true;
            }
        }
        if !changed {
            break;
        }
    }

    let address = |place: Place, sects: &[Sect]| -> u64 {
        let s = &sects[place.section];
        s.vstart.unwrap_or(0).wrapping_add(offset_of(s, place.piece))
    };
    let labels: HashMap<String, u64> = places
        .iter()
        .map(|(name, &(place, _))| (name.clone(), address(place, &sects)))
        .collect();

    // Encode.
    let mut sections = Vec::with_capacity(sects.len());
    let mut piece_bytes: Vec<Vec<Option<Vec<u8>>>> = Vec::with_capacity(sects.len());
    for s in &sects {
        let vstart = s.vstart.unwrap_or(0);
        let mut bytes = Vec::with_capacity(s.size as usize);
        // The bytes each piece emits once, for the listing; a data piece's are its own (taken
        // below, not copied: a data line of megabytes is not held three times).
        let mut firsts: Vec<Option<Vec<u8>>> = Vec::with_capacity(s.pieces.len());
        for p in &s.pieces {
            let one = match &p.kind {
                PieceKind::Bytes { data, count } => {
                    for _ in 0..*count {
                        bytes.extend_from_slice(data);
                    }
                    None
                }
                PieceKind::Branch {
                    kind,
                    target,
                    bits,
                    long,
                } => {
                    let to = match target {
                        Target::Abs(a) => *a,
                        Target::Label(name) => labels[name],
                    };
                    let ip = vstart.wrapping_add(p.offset);
                    let b = asm::encode_branch(*kind, !long, ip, to, *bits)
                        .map_err(|m| PttcError::new(p.line, m))?;
                    bytes.extend_from_slice(&b);
                    Some(b)
                }
                PieceKind::Align { n, bits } => {
                    let fill = asm::nop_fill(align_pad(p.offset, *n), *bits);
                    bytes.extend_from_slice(&fill);
                    Some(fill)
                }
            };
            firsts.push(one);
        }
        if bytes.len() as u64 != s.size {
            return Err(PttcError::new(
                0,
                format!(
                    "internal: section {} laid out as {} bytes, encoded as {}",
                    s.name,
                    s.size,
                    bytes.len()
                ),
            ));
        }
        piece_bytes.push(firsts);
        sections.push(Section {
            name: s.name.clone(),
            start: s.start.unwrap_or(0),
            bytes,
        });
    }

    for (entry, e) in listing.iter_mut().zip(&emitted) {
        let Some((si, first)) = *e else { continue };
        let p = &mut sects[si].pieces[first];
        let shown = match &mut p.kind {
            PieceKind::Align { .. } => continue,
            PieceKind::Bytes { data, .. } => std::mem::take(data),
            PieceKind::Branch { .. } => piece_bytes[si][first].take().unwrap_or_default(),
        };
        if !shown.is_empty() && !entry.vanished {
            entry.offset = Some(p.offset);
            entry.shown = shown;
        }
    }

    // The flat binary: each section at its load address minus org.
    let mut bin = Vec::new();
    let mut taken: Vec<(u64, u64, &str)> = Vec::new();
    for (s, sect) in sections.into_iter().zip(&sects) {
        if s.bytes.is_empty() {
            continue;
        }
        let line = sect.pieces.first().map_or(0, |p| p.line);
        let at = s.start.checked_sub(org_addr).ok_or_else(|| {
            PttcError::new(
                line,
                format!(
                    "section {} starts at {:#x}, below org {org_addr:#x}",
                    s.name, s.start
                ),
            )
        })?;
        let end = at.saturating_add(s.bytes.len() as u64);
        if let Some(&(_, _, other)) = taken.iter().find(|&&(b, e, _)| at < e && b < end) {
            return Err(PttcError::new(
                line,
                format!("section {} overlaps section {other}", s.name),
            ));
        }
        taken.push((at, end, &sect.name));
        if end > MAX_SIZE {
            return Err(PttcError::new(
                line,
                format!("section {} ends {end:#x} bytes into the file", s.name),
            ));
        }
        // Each section's bytes go once: moved when they make the file alone so far.
        if bin.is_empty() && at == 0 {
            bin = s.bytes;
            continue;
        }
        if bin.len() < end as usize {
            bin.resize(end as usize, 0);
        }
        bin[at as usize..end as usize].copy_from_slice(&s.bytes);
    }

    Ok(Image {
        bin,
        lines: listing,
        org: org_addr,
    })
}

/// `addr` rounded up to a section's alignment; none past 2^64.
fn aligned_address(addr: u64) -> Option<u64> {
    addr.checked_next_multiple_of(SECTION_ALIGN)
}

fn align_pad(off: u64, n: u64) -> u64 {
    (n - off % n) % n
}

fn piece_size(kind: &PieceKind, off: u64) -> u64 {
    match kind {
        PieceKind::Bytes { data, count } => data.len() as u64 * count,
        PieceKind::Branch { kind, long, .. } => {
            if *long {
                asm::near_len(*kind)
            } else {
                2
            }
        }
        PieceKind::Align { n, .. } => align_pad(off, *n),
    }
}

fn offset_of(s: &Sect, piece: usize) -> u64 {
    s.pieces.get(piece).map_or(s.size, |p| p.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(src: &str) -> Vec<u8> {
        assemble(&parse::split_lines(src)).unwrap().bin
    }

    #[test]
    fn short_and_near_branches() {
        assert_eq!(bin("org 0x1000\nbits 64\nl0: jmp l0\n"), [0xeb, 0xfe]);
        // 0x80 bytes ahead does not reach with rel8.
        let b = bin("org 0\nbits 64\njmp l1\ntimes 0x80 nop\nl1: hlt\n");
        assert_eq!(&b[..5], &[0xe9, 0x80, 0, 0, 0]);
        // The default section starts at org rounded up to 4, with zeros before it.
        assert_eq!(bin("org 0x4242\nnop\n"), [0, 0, 0x90]);
        // An absolute target is always near.
        assert_eq!(
            bin("org 0x1000\nbits 64\njmp 0x1000\n"),
            [0xe9, 0xfb, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn sections_land_at_their_start() {
        let img = assemble(&parse::split_lines(
            "org 0x1000\nbits 64\nsection a vstart=0x5000 start=0x1000\nl0: nop\nsection b vstart=0x9000 start=0x1010\nl1: call l0\n",
        ))
        .unwrap();
        assert_eq!(img.bin.len(), 0x15);
        assert_eq!(img.bin[0], 0x90);
        // The call at l1 (0x9000) reaches l0 (0x5000): both labels at their section's vstart.
        let rel = (0x5000i64 - 0x9005) as i32;
        assert_eq!(img.bin[0x10..], [&[0xe8][..], &rel.to_le_bytes()].concat());
        assert_eq!(img.lines[5].offset, Some(0));
    }

    #[test]
    fn bad_lines_are_named() {
        let e = assemble(&parse::split_lines("org 0\nbits 64\njmp nowhere\n")).unwrap_err();
        assert_eq!(e.line, 3);
        let e = assemble(&parse::split_lines("org 0\nbits 64\nfoo bar\n")).unwrap_err();
        assert_eq!(e.line, 3);
    }
}
