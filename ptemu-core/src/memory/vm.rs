//! [`PhysMemory`] over rust-vmm's guest memory (feature `vm-memory`): a VMM built on
//! [`vm_memory`] hands its `GuestMemoryMmap` (or any region collection) to the output unit as it
//! is, or any other [`vm_memory::GuestMemory`] through [`VmMemory`].

use super::{MemError, PhysMemory};
use vm_memory::{Bytes, GuestAddress, GuestMemory, GuestMemoryRegion, GuestRegionCollection, Permissions};

/// Any [`GuestMemory`] (an IOMMU view, a `GuestMemoryAtomic` snapshot, ...) as [`PhysMemory`].
/// (`PhysMemory` cannot be implemented for every `GuestMemory` at once: it already is for
/// `&mut M`, which vm-memory could make a `GuestMemory` one day.)
#[derive(Debug)]
pub struct VmMemory<'a, G: ?Sized>(pub &'a G);

/// Stores `data` whole or not at all: vm-memory's `write_slice` writes up to a hole and then
/// fails, so the range is checked first.
fn store<G: GuestMemory + ?Sized>(mem: &G, pa: u64, data: &[u8]) -> Result<(), MemError> {
    let unmapped = MemError::Unmapped { pa, len: data.len() };
    if !mem.check_range(GuestAddress(pa), data.len(), Permissions::Write) {
        return Err(unmapped);
    }
    mem.write_slice(data, GuestAddress(pa)).map_err(|_| unmapped)
}

fn load<G: GuestMemory + ?Sized>(mem: &G, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
    let len = buf.len();
    mem.read_slice(buf, GuestAddress(pa))
        .map_err(|_| MemError::Unmapped { pa, len })
}

impl<G: GuestMemory + ?Sized> PhysMemory for VmMemory<'_, G> {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        store(self.0, pa, data)
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        load(self.0, pa, buf)
    }
}

/// A region collection, `vm_memory::GuestMemoryMmap` among them, is physical memory as it is:
/// accesses outside its regions (or across a hole between two) are [`MemError::Unmapped`].
impl<R: GuestMemoryRegion> PhysMemory for GuestRegionCollection<R> {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        store(self, pa, data)
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        load(self, pa, buf)
    }
}
