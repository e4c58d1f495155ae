//! Synthetic Kaplan traces: an LRU memory of M pages driven by a reference string with locality.

use super::record::{Evicted, Record, PAGE_SIZE};
use crate::sources::rng::GenRng;
use std::io::{self, Write};

/// The memory size (pages) [`generate`] simulates.
pub const GEN_MEMORY_PAGES: usize = 64;
/// Distinct pages the reference string draws from.
const UNIVERSE: u64 = 4096;

/// A reference string with phases of locality: each phase has a working set of 16..96 pages from
/// one region, referenced with a skew towards its first pages, plus 5% references anywhere;
/// 30% of references are writes. Yields (page, write).
#[derive(Debug)]
pub struct References {
    rng: GenRng,
    set: Vec<u16>,
    left: u64,
}

/// The reference string of `seed`.
pub fn references(seed: u64) -> References {
    References {
        rng: GenRng::new(seed),
        set: Vec::with_capacity(96),
        left: 0,
    }
}

impl Iterator for References {
    type Item = (u16, bool);
    fn next(&mut self) -> Option<(u16, bool)> {
        if self.left == 0 {
            self.left = 200 + self.rng.below(1800);
            let base = self.rng.below(UNIVERSE - 256);
            let n = 16 + self.rng.below(81);
            self.set.clear();
            for _ in 0..n {
                self.set.push((base + self.rng.below(256)) as u16);
            }
        }
        self.left -= 1;
        let page = if self.rng.chance(5) {
            self.rng.below(UNIVERSE) as u16
        } else {
            let n = self.set.len() as u64;
            self.set[(self.rng.below(n) * self.rng.below(n) / n) as usize]
        };
        Some((page, self.rng.chance(30)))
    }
}

/// A page image with some structure: a header of page-numbered words, a zero run, a region of
/// small counters and bytes that change with every write (`version`).
pub fn page_image(page: u16, version: u32, buf: &mut [u8; PAGE_SIZE]) {
    buf.fill(0);
    for (i, w) in buf[..256].chunks_exact_mut(4).enumerate() {
        w.copy_from_slice(&(u32::from(page) << 16 | i as u32).to_le_bytes());
    }
    for (i, b) in buf[1024..2048].iter_mut().enumerate() {
        *b = (i as u32 / 8 + version) as u8;
    }
    let v = version.to_le_bytes();
    for i in 0..usize::from(page % 7 + 1) {
        buf[3072 + 16 * i..3072 + 16 * i + 4].copy_from_slice(&v);
    }
}

/// Writes `records` records of an LRU memory of [`GEN_MEMORY_PAGES`] pages; the same seed gives
/// the same bytes.
pub fn generate(records: u64, seed: u64, out: &mut dyn Write) -> io::Result<()> {
    generate_with(records, seed, GEN_MEMORY_PAGES, out)
}

/// Writes `records` records of an LRU memory of `memory_pages` (clamped to 1..=2048, so misses
/// never stop) pages over
/// [`references`]`(seed)`: one record per miss, `C` for a first reference, the LRU page evicted
/// once memory is full (`W` if it was written while resident).
pub fn generate_with(records: u64, seed: u64, memory_pages: usize, out: &mut dyn Write) -> io::Result<()> {
    let memory_pages = memory_pages.clamp(1, UNIVERSE as usize / 2);
    let mut out = io::BufWriter::new(out);
    let mut lru: Vec<(u16, bool)> = Vec::with_capacity(memory_pages); // least recent first
    let mut seen = vec![false; 1 << 16];
    let mut version = vec![0u32; 1 << 16];
    let mut image = Box::new([0u8; PAGE_SIZE]);
    let mut evicted_image = Box::new([0u8; PAGE_SIZE]);
    let mut written = 0;
    for (page, write) in references(seed) {
        if written == records {
            break;
        }
        if let Some(i) = lru.iter().position(|e| e.0 == page) {
            let (_, dirty) = lru.remove(i);
            lru.push((page, dirty || write));
        } else {
            let compulsory = !seen[usize::from(page)];
            seen[usize::from(page)] = true;
            page_image(page, version[usize::from(page)], &mut image);
            let evicted = if lru.len() == memory_pages {
                let (e, dirty) = lru.remove(0);
                page_image(e, version[usize::from(e)], &mut evicted_image);
                Some(Evicted {
                    page: e,
                    dirty,
                    image: &evicted_image,
                })
            } else {
                None
            };
            Record {
                compulsory,
                page,
                image: &image,
                evicted,
            }
            .write_to(&mut out)?;
            written += 1;
            lru.push((page, write));
        }
        if write {
            version[usize::from(page)] += 1;
        }
    }
    out.flush()
}
