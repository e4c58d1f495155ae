//! Simulated physical memory the output unit writes through.
//!
//! The library never owns the user's memory: [`crate::output::OutputUnit`] takes any
//! [`PhysMemory`] per call. Two implementations ship: [`SparseMemory`] (page-granular, unwritten
//! bytes read as zero; the default) and [`MmapMemory`] (a flat file mapped with `memmap2`, for large
//! buffers shared with other processes; feature `mmap`, on by default). With the feature
//! `vm-memory`, rust-vmm's guest memory is `PhysMemory` too (`GuestMemoryMmap` as it is, any
//! other `GuestMemory` through `VmMemory`).

#[cfg(feature = "mmap")]
mod mmap;
mod sparse;
mod tee;
#[cfg(feature = "vm-memory")]
mod vm;

#[cfg(feature = "mmap")]
pub use mmap::MmapMemory;
pub use sparse::SparseMemory;
pub use tee::Tee;
#[cfg(feature = "vm-memory")]
pub use vm::VmMemory;

/// A failed physical memory access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// The access touches addresses the memory does not back.
    #[error("physical range {pa:#x}..{:#x} is not backed by this memory", pa.saturating_add(*len as u64))]
    Unmapped {
        /// First physical address of the access.
        pa: u64,
        /// Length of the access in bytes.
        len: usize,
    },
}

/// Physical memory as the trace-output unit sees it: byte-addressed, little-endian.
pub trait PhysMemory {
    /// Stores `data` at physical address `pa`, all of it or nothing: on an error no byte of
    /// the range has changed (the output unit counts the whole run as lost).
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError>;

    /// Fills `buf` from physical address `pa`.
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError>;

    /// Reads a little-endian 64-bit value (a ToPA entry).
    fn read_u64(&self, pa: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(pa, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian 64-bit value.
    fn write_u64(&mut self, pa: u64, value: u64) -> Result<(), MemError> {
        self.write(pa, &value.to_le_bytes())
    }

    /// Whether a byte of `[pa, pa + len)` may be other than zero: `false` promises that the
    /// range reads as zeros, so a copy of it can be a hole in a sparse file (a region dump
    /// seeks over it). The default, `true`, promises nothing; [`SparseMemory`] answers whether
    /// a page of the range was ever written.
    fn may_hold_data(&self, pa: u64, len: u64) -> bool {
        let _ = (pa, len);
        true
    }
}

impl<M: PhysMemory + ?Sized> PhysMemory for &mut M {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        (**self).write(pa, data)
    }
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        (**self).read(pa, buf)
    }
    fn may_hold_data(&self, pa: u64, len: u64) -> bool {
        (**self).may_hold_data(pa, len)
    }
}

/// Checks that `[pa, pa + len)` fits in the 64-bit address space (it may end exactly at 2^64).
fn check_span(pa: u64, len: usize) -> Result<(), MemError> {
    match len {
        0 => Ok(()),
        _ => pa
            .checked_add(len as u64 - 1)
            .map(|_| ())
            .ok_or(MemError::Unmapped { pa, len }),
    }
}
