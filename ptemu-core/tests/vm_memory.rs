//! Feature `vm-memory`: rust-vmm guest memory is PhysMemory. The same trace through a
//! `GuestMemoryMmap`, through `VmMemory` and through `SparseMemory` leaves the same bytes and the
//! same output position; an access to a hole in the guest's memory is `MemError::Unmapped`.

#[allow(dead_code)] // the example's `main`
#[path = "../examples/vm_memory.rs"]
mod example;

use ptemu_core::memory::{MemError, PhysMemory, SparseMemory, VmMemory};
use vm_memory::{GuestAddress, GuestMemoryMmap};

fn guest() -> GuestMemoryMmap<()> {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
}

/// The ToPA table and both regions, as bytes.
fn image<M: PhysMemory>(mem: &M) -> Vec<u8> {
    let mut v = vec![0u8; 0x2000 + 24];
    mem.read(example::REGION, &mut v[..0x2000]).unwrap();
    mem.read(example::TABLE, &mut v[0x2000..]).unwrap();
    v
}

#[test]
fn w4_p1_a_trace_through_guest_memory_mmap_equals_one_through_sparse_memory() {
    let mut sparse = SparseMemory::new();
    let want = example::trace_into(&mut sparse, 2_000).unwrap();
    assert!(want.0 > 0x2000, "the ring wrapped: {} bytes", want.0);

    let mut mmap = guest();
    assert_eq!(example::trace_into(&mut mmap, 2_000).unwrap(), want);
    assert_eq!(image(&mmap), image(&sparse));

    let other = guest();
    let mut view = VmMemory(&other);
    assert_eq!(example::trace_into(&mut view, 2_000).unwrap(), want);
    assert_eq!(image(&view), image(&sparse));
}

#[test]
fn an_access_outside_the_guests_ram_is_unmapped() {
    // RAM at 0..1 MiB and 2..3 MiB: a hole between.
    let mut mem =
        GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20), (GuestAddress(2 << 20), 1 << 20)])
            .unwrap();
    let unmapped = |pa, len| Err(MemError::Unmapped { pa, len });
    assert_eq!(
        PhysMemory::write(&mut mem, 0x10_0000, &[1, 2, 3]),
        unmapped(0x10_0000, 3)
    );
    PhysMemory::write(&mut mem, 0xf_fff0, &[7; 16]).unwrap();
    assert_eq!(
        PhysMemory::write(&mut mem, 0xf_fffe, &[1, 2, 3]),
        unmapped(0xf_fffe, 3),
        "runs into the hole"
    );
    let mut tail = [0u8; 2];
    PhysMemory::read(&mem, 0xf_fffe, &mut tail).unwrap();
    assert_eq!(
        tail,
        [7, 7],
        "a refused store writes nothing, not the bytes before the hole"
    );
    let mut b = [0u8; 4];
    assert_eq!(PhysMemory::read(&mem, 0x40_0000, &mut b), unmapped(0x40_0000, 4));
    assert_eq!(PhysMemory::write(&mut mem, 0x20_0000, &[9]), Ok(()));
    assert_eq!(VmMemory(&mem).read(0x20_0000, &mut b[..1]), Ok(()));
    assert_eq!(b[0], 9);
}
