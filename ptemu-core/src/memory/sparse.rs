//! Page-granular sparse physical memory: pages are allocated on first write.

use super::{check_span, MemError, PhysMemory};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Page size of [`SparseMemory`].
pub const PAGE_SIZE: usize = 4096;
const PAGE_SHIFT: u32 = 12;
/// Pages per directory: one hash lookup serves 2 MiB of address space.
const DIR_PAGES: usize = 512;
const DIR_SHIFT: u32 = PAGE_SHIFT + 9;

/// One page, aligned like a real page so that copies into it are aligned and it spans one host page.
#[repr(C, align(4096))]
#[derive(Clone)]
struct PageFrame([u8; PAGE_SIZE]);

/// Pages are carved in order from 2 MiB chunks, so pages written one after another are contiguous
/// in host memory (fewer TLB misses, huge-page friendly); at most one chunk is partly used.
const CHUNK_PAGES: usize = 512;

/// The pages of one 2 MiB stretch of physical memory: 0 = never written, else arena page + 1.
type Dir = Box<[u32; DIR_PAGES]>;

/// Sparse physical memory covering the whole 64-bit space; unwritten bytes read as zero.
///
/// Storage is allocated a 4 KiB page at a time, on first write, so memory use is proportional to the
/// number of distinct pages written (plus a 2 KiB directory per 2 MiB stretch touched, and at most
/// one partly used 2 MiB chunk).
#[derive(Default, Clone)]
pub struct SparseMemory {
    dirs: HashMap<u64, Dir, BuildHasherDefault<PageHasher>>,
    arena: Vec<Box<[PageFrame]>>,
    pages: usize,
}

impl SparseMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pages allocated.
    pub fn page_count(&self) -> usize {
        self.pages
    }

    /// Whether any byte of the page holding `pa` was ever written.
    pub fn is_page_allocated(&self, pa: u64) -> bool {
        self.page(pa).is_some()
    }

    fn page(&self, pa: u64) -> Option<&PageFrame> {
        let slot = self.dirs.get(&(pa >> DIR_SHIFT))?[page_index(pa)];
        (slot != 0).then(|| frame(&self.arena, slot))
    }
}

fn page_index(pa: u64) -> usize {
    (pa >> PAGE_SHIFT) as usize & (DIR_PAGES - 1)
}

fn frame(arena: &[Box<[PageFrame]>], slot: u32) -> &PageFrame {
    let n = slot as usize - 1;
    &arena[n / CHUNK_PAGES][n % CHUNK_PAGES]
}

impl std::fmt::Debug for SparseMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseMemory")
            .field("pages", &self.pages)
            .finish()
    }
}

impl PhysMemory for SparseMemory {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        check_span(pa, data.len())?;
        let SparseMemory { dirs, arena, pages } = self;
        let mut pa = pa;
        let mut rest = data;
        while !rest.is_empty() {
            // One directory lookup, then every page of the run inside this 2 MiB stretch.
            let dir = dirs
                .entry(pa >> DIR_SHIFT)
                .or_insert_with(|| Box::new([0; DIR_PAGES]));
            loop {
                let off = (pa as usize) & (PAGE_SIZE - 1);
                let n = rest.len().min(PAGE_SIZE - off);
                let slot = &mut dir[page_index(pa)];
                if *slot == 0 {
                    if *pages % CHUNK_PAGES == 0 {
                        arena.push(vec![PageFrame([0; PAGE_SIZE]); CHUNK_PAGES].into_boxed_slice());
                    }
                    *pages += 1;
                    *slot = u32::try_from(*pages).expect("fewer than 2^32 pages (16 TiB) written");
                }
                let page = *slot as usize - 1;
                arena[page / CHUNK_PAGES][page % CHUNK_PAGES].0[off..off + n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
                pa = pa.wrapping_add(n as u64);
                if rest.is_empty() || page_index(pa) == 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        check_span(pa, buf.len())?;
        let mut pa = pa;
        let mut done = 0;
        while done < buf.len() {
            let off = (pa as usize) & (PAGE_SIZE - 1);
            let n = (buf.len() - done).min(PAGE_SIZE - off);
            let dst = &mut buf[done..done + n];
            match self.page(pa) {
                Some(page) => dst.copy_from_slice(&page.0[off..off + n]),
                None => dst.fill(0),
            }
            done += n;
            pa = pa.wrapping_add(n as u64);
        }
        Ok(())
    }

    /// Whether a page of the range was ever written: the directories of the range are looked
    /// up, or, for a range wider than the memory has directories, the memory's directories
    /// are scanned (a range past 2^64 ends there).
    fn may_hold_data(&self, pa: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        let last = pa.saturating_add(len - 1);
        let (d0, d1) = (pa >> DIR_SHIFT, last >> DIR_SHIFT);
        let holds = |d: u64, dir: &Dir| {
            let lo = if d == d0 { page_index(pa) } else { 0 };
            let hi = if d == d1 { page_index(last) } else { DIR_PAGES - 1 };
            dir[lo..=hi].iter().any(|&slot| slot != 0)
        };
        if d1 - d0 >= self.dirs.len() as u64 {
            self.dirs
                .iter()
                .any(|(&d, dir)| (d0..=d1).contains(&d) && holds(d, dir))
        } else {
            (d0..=d1).any(|d| self.dirs.get(&d).is_some_and(|dir| holds(d, dir)))
        }
    }
}

/// A multiplicative hasher for page numbers: one multiply, good spread for sequential keys.
#[derive(Default)]
pub struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_written_pages_may_hold_data() {
        let mut m = SparseMemory::new();
        assert!(!m.may_hold_data(0, u64::MAX));
        m.write(0x20_1ffe, &[1, 2, 3]).unwrap();
        assert!(m.may_hold_data(0x20_1fff, 1));
        assert!(m.may_hold_data(0x20_2000, 1));
        assert!(m.may_hold_data(0, 0x20_1001));
        assert!(!m.may_hold_data(0, 0x20_1000));
        assert!(!m.may_hold_data(0x20_3000, 1 << 40));
        assert!(!m.may_hold_data(0x20_1000, 0));
        assert!(!m.may_hold_data(u64::MAX - 10, 11));
    }

    #[test]
    fn unwritten_bytes_read_as_zero() {
        let m = SparseMemory::new();
        let mut b = [0xffu8; 16];
        m.read(0xdead_0000, &mut b).unwrap();
        assert_eq!(b, [0; 16]);
        assert_eq!(m.page_count(), 0);
    }

    #[test]
    fn writes_straddle_pages() {
        let mut m = SparseMemory::new();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        m.write(0x1ffe, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        m.read(0x1ffe, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(m.page_count(), 4);
    }

    #[test]
    fn pages_scattered_over_directories_and_arena_chunks_keep_their_bytes() {
        let mut m = SparseMemory::new();
        // 1100 pages: three arena chunks, written out of address order across 2 MiB directories.
        let addr = |i: u64| (i * 7919 % 1100) * 0x3000 + 0x10 * (i % 3);
        for i in 0..1100u64 {
            m.write(addr(i), &i.to_le_bytes()).unwrap();
        }
        assert_eq!(m.page_count(), 1100);
        for i in 0..1100u64 {
            assert_eq!(m.read_u64(addr(i)).unwrap(), i);
            assert!(m.is_page_allocated(addr(i)));
        }
        assert!(!m.is_page_allocated(0x1000));
        let copy = m.clone();
        assert_eq!(copy.read_u64(addr(5)).unwrap(), 5);
    }

    #[test]
    fn access_past_the_top_of_the_address_space_fails() {
        let mut m = SparseMemory::new();
        assert!(m.write(u64::MAX - 2, &[0; 8]).is_err());
        m.write(u64::MAX - 7, &[1; 8]).unwrap();
        assert_eq!(m.read_u64(u64::MAX - 7).unwrap(), 0x0101_0101_0101_0101);
    }
}
