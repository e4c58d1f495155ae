//! Flat physical memory backed by a memory-mapped file (`memmap2`).

use super::{check_span, MemError, PhysMemory};
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// A flat window of physical memory, `[base, base + len)`, stored in a file another process can map.
///
/// Accesses outside the window fail with [`MemError::Unmapped`].
pub struct MmapMemory {
    base: u64,
    map: MmapMut,
    _file: File,
}

impl MmapMemory {
    /// Creates (or truncates) `path` to `len` bytes and maps it as physical memory at `base`.
    pub fn create(path: &Path, base: u64, len: u64) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(len)?;
        Self::map(file, base)
    }

    /// Maps an existing file as physical memory at `base`; its length is the window size.
    pub fn open(path: &Path, base: u64) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Self::map(file, base)
    }

    fn map(file: File, base: u64) -> io::Result<Self> {
        // SAFETY: the mapping is private to this value and lives as long as it does. Another process
        // may map the same file (that is the point of this type); it must not truncate it while we
        // hold the map, or accesses fault with SIGBUS, as with any shared file mapping.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(MmapMemory {
            base,
            map,
            _file: file,
        })
    }

    /// First physical address of the window.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Size of the window in bytes.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Flushes the mapping to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()
    }

    fn range(&self, pa: u64, len: usize) -> Result<std::ops::Range<usize>, MemError> {
        check_span(pa, len)?;
        let size = self.map.len() as u64;
        let start = pa
            .checked_sub(self.base)
            .filter(|&s| s <= size && len as u64 <= size - s);
        let Some(start) = start else {
            return Err(MemError::Unmapped { pa, len });
        };
        let start = start as usize;
        Ok(start..start + len)
    }
}

impl PhysMemory for MmapMemory {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.range(pa, data.len())?;
        self.map[r].copy_from_slice(data);
        Ok(())
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.range(pa, buf.len())?;
        buf.copy_from_slice(&self.map[r]);
        Ok(())
    }
}

impl std::fmt::Debug for MmapMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmapMemory")
            .field("base", &self.base)
            .field("len", &self.map.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_shared_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("phys.bin");
        let mut m = MmapMemory::create(&path, 0x10_0000, 0x2000).unwrap();
        m.write(0x10_1ffc, &[1, 2, 3, 4]).unwrap();
        m.flush().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[0x1ffc..], &[1, 2, 3, 4]);
        let reopened = MmapMemory::open(&path, 0x10_0000).unwrap();
        assert_eq!(reopened.read_u64(0x10_1ff8).unwrap(), 0x0403_0201_0000_0000);
    }

    #[test]
    fn accesses_outside_the_window_fail() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MmapMemory::create(&dir.path().join("p"), 0x1000, 0x1000).unwrap();
        assert_eq!(
            m.write(0xfff, &[0]),
            Err(MemError::Unmapped { pa: 0xfff, len: 1 })
        );
        assert!(m.write(0x1fff, &[0, 0]).is_err());
        assert!(m.write(0x1fff, &[0]).is_ok());
    }
}
