//! Page-granular sparse physical memory: pages are allocated on first write.

use super::{check_span, MemError, PhysMemory};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Page size of [`SparseMemory`].
pub const PAGE_SIZE: usize = 4096;
const PAGE_SHIFT: u32 = 12;

type Page = Box<[u8; PAGE_SIZE]>;

/// Sparse physical memory covering the whole 64-bit space; unwritten bytes read as zero.
///
/// Memory use is proportional to the number of distinct 4 KiB pages written.
#[derive(Default, Clone)]
pub struct SparseMemory {
    pages: HashMap<u64, Page, BuildHasherDefault<PageHasher>>,
}

impl SparseMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pages allocated.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Whether any byte of the page holding `pa` was ever written.
    pub fn is_page_allocated(&self, pa: u64) -> bool {
        self.pages.contains_key(&(pa >> PAGE_SHIFT))
    }
}

impl std::fmt::Debug for SparseMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseMemory")
            .field("pages", &self.pages.len())
            .finish()
    }
}

impl PhysMemory for SparseMemory {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        check_span(pa, data.len())?;
        let mut pa = pa;
        let mut rest = data;
        while !rest.is_empty() {
            let off = (pa as usize) & (PAGE_SIZE - 1);
            let n = rest.len().min(PAGE_SIZE - off);
            let page = self
                .pages
                .entry(pa >> PAGE_SHIFT)
                .or_insert_with(|| Box::new([0u8; PAGE_SIZE]));
            page[off..off + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            pa = pa.wrapping_add(n as u64);
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
            match self.pages.get(&(pa >> PAGE_SHIFT)) {
                Some(page) => dst.copy_from_slice(&page[off..off + n]),
                None => dst.fill(0),
            }
            done += n;
            pa = pa.wrapping_add(n as u64);
        }
        Ok(())
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
    fn access_past_the_top_of_the_address_space_fails() {
        let mut m = SparseMemory::new();
        assert!(m.write(u64::MAX - 2, &[0; 8]).is_err());
        m.write(u64::MAX - 7, &[1; 8]).unwrap();
        assert_eq!(m.read_u64(u64::MAX - 7).unwrap(), 0x0101_0101_0101_0101);
    }
}
