//! The plugin's stream (spec/qemu.md QE1): the `ptemu-wire` crate, which the plugin uses
//! without linking ptemu, and the body of the `qemu` fuzz target.

pub use ptemu_wire::*;

/// Reads arbitrary bytes as a plugin stream to the end or its first error, classifying every
/// instruction of every block, then again with executed blocks as batches of indices, each
/// looked up, then as a machine's stream, every vCPU's blocks followed (QE26): the body of the `qemu` fuzz target (`fuzz/`, `cargo xtask fuzz`). Whatever the
/// bytes, this must return, never panic or hang, and allocate in proportion to them.
#[doc(hidden)]
pub fn read_arbitrary(data: &[u8]) {
    let mut r = Reader::new(data);
    while let Ok(Some(rec)) = r.next_record() {
        match rec {
            Record::Block {
                vaddr, offsets, code, ..
            } => {
                for &off in offsets {
                    let off = off as usize;
                    if let Some(bytes) = code.get(off..) {
                        let _ = super::classify(vaddr.wrapping_add(off as u64), bytes);
                    }
                }
            }
            Record::Exec { first, count } => assert!(first + count <= r.ids()),
            _ => {}
        }
    }
    let mut r = Reader::new(data);
    while let Ok(Some(rec)) = r.next_batched() {
        if let Batched::Blocks(b) = rec {
            for ((index, (first, count)), k) in b.indices().zip(b.execs()).zip(0..) {
                assert_eq!(b.index(k), index);
                assert_eq!(b.block(index), Some((first, count)));
            }
        }
    }
    let _ = crate::machine::follow_bytes(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's body on every prefix and every one-byte change of a real stream:
    /// returns, never panics.
    #[test]
    fn arbitrary_bytes_never_panic_the_reader() {
        let mut w = Writer::new();
        w.block(0x1000, &[1, 2], &[0x90, 0x74, 0x00, 0xc3]);
        for id in [0, 1, 2, 0, 1, 2] {
            w.exec(id);
        }
        w.block(0x1004, &[], &[0xc3]);
        w.exec_blocks(&[0, 1, 1, 0]);
        w.note(NoteKind::Exec, 0, "/bin/x");
        w.end();
        let mut bytes = Vec::new();
        w.take(&mut |b| bytes.extend_from_slice(b));
        // A machine's: a vCPU's chunk with registers records, and a fault (QE26).
        let mut m = Writer::new();
        m.block(0x1000, &[3], &[0x48, 0x8b, 0x03, 0xff, 0xe0]);
        m.block(0x9000, &[], &[0x90]);
        m.thread(1);
        m.exec_blocks(&[0]);
        let regs = system::Registers {
            rip: 0x1000,
            cs: 0x10,
            cr3: 0x5000,
            long_mode: true,
            transfer: system::Transfer::Next,
        };
        m.registers(&regs);
        m.exec_blocks(&[1]);
        m.registers(&system::Registers {
            rip: 0x9000,
            transfer: system::Transfer::Async {
                vector: 14,
                from: 0x1000,
                cut: true,
            },
            ..regs
        });
        m.thread(0);
        m.end_with(3);
        let mut machine = Vec::new();
        m.take(&mut |b| machine.extend_from_slice(b));
        let flow = crate::machine::follow_bytes(&machine).unwrap();
        assert_eq!(
            (
                flow.vcpus[0].blocks,
                flow.vcpus[0].instructions,
                flow.vcpus[0].faults
            ),
            (2, 1, 1)
        );
        for bytes in [bytes, machine] {
            for n in 0..=bytes.len() {
                read_arbitrary(&bytes[..n]);
            }
            for i in 0..bytes.len() {
                for v in [0u8, 0x7f, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[i] = v;
                    read_arbitrary(&b);
                }
            }
        }
    }
}
