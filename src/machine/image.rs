//! The code a machine's vCPUs executed, by address space (QE28): every traced block's bytes,
//! as QEMU translated them, placed at the address the block really ran at. Kernel code (the
//! upper half) is one space that every CR3 shares; user code is kept per CR3, as the PIP
//! packets name it (CR3 bits 51:5), which is how libipt's per-CR3 images (`pt_asid.cr3`)
//! select it. Where a byte is placed again with another value (the kernel patching its own
//! text, a CR3 used again by another process), the newer bytes stay and the conflict is
//! counted: a decoder given one version of such code cannot follow the executions of the other.

use rustc_hash::FxHashMap;
use std::io::Write;
use std::path::Path;

/// The bits of CR3 a PIP packet carries (51:5): the key of a user address space.
pub const PIP_CR3_MASK: u64 = 0x000f_ffff_ffff_ffe0;

/// The byte between executed code: `INT3`, so a decoder that strays off it stops.
const GAP: u8 = 0xcc;
const PAGE: u64 = 4096;

/// The address space a block at `at` runs in under `cr3`: `None` for the kernel's half,
/// shared by every CR3; else CR3's PIP bits.
pub fn space_of(at: u64, cr3: u64) -> Option<u64> {
    (at >> 63 == 0).then_some(cr3 & PIP_CR3_MASK)
}

#[derive(Clone)]
struct Page {
    bytes: [u8; PAGE as usize],
    valid: [u64; (PAGE / 64) as usize],
}

/// Every address space's executed code.
#[derive(Default)]
pub struct CodeSpaces {
    spaces: FxHashMap<Option<u64>, FxHashMap<u64, Box<Page>>>,
    /// Bytes placed again with another value.
    pub conflicts: u64,
    /// Where that happened first (at most four): the space and the address.
    pub first_conflicts: Vec<(Option<u64>, u64)>,
}

/// One file of a machine's code: `size` bytes of `path` from `offset`, at `start` in the
/// space of `cr3` (`None`: every space, the kernel's half).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeFile {
    /// The file, relative to the machine's DIR.
    pub path: String,
    /// Its offset of `start`.
    pub offset: u64,
    /// Where it is mapped.
    pub start: u64,
    /// How many bytes.
    pub size: u64,
    /// The CR3 (PIP bits) of its space; `None`: the kernel's, every CR3's.
    pub cr3: Option<u64>,
}

impl CodeSpaces {
    /// `code`, the bytes of a block, placed at `at` in `space`: a page looked up once for the
    /// bytes that fall in it.
    pub fn place(&mut self, space: Option<u64>, at: u64, code: &[u8]) {
        let pages = self.spaces.entry(space).or_default();
        let mut rest = code;
        let mut a = at;
        while !rest.is_empty() {
            let o = (a % PAGE) as usize;
            let n = rest.len().min(PAGE as usize - o);
            let page = pages.entry(a / PAGE).or_insert_with(|| {
                Box::new(Page {
                    bytes: [GAP; PAGE as usize],
                    valid: [0; (PAGE / 64) as usize],
                })
            });
            for (k, &b) in rest[..n].iter().enumerate() {
                let o = o + k;
                let bit = 1u64 << (o % 64);
                if page.valid[o / 64] & bit == 0 {
                    page.valid[o / 64] |= bit;
                } else if page.bytes[o] != b {
                    self.conflicts += 1;
                    if self.first_conflicts.len() < 4 {
                        self.first_conflicts.push((space, a.wrapping_add(k as u64)));
                    }
                }
                page.bytes[o] = b;
            }
            rest = &rest[n..];
            a = a.wrapping_add(n as u64);
        }
    }

    /// How many address spaces hold code.
    pub fn spaces(&self) -> usize {
        self.spaces.len()
    }

    /// Writes each space's code into `dir/code/` (one file a space, its runs of consecutive
    /// pages one after another) and lists the files, the kernel's first.
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<CodeFile>> {
        let code = dir.join("code");
        std::fs::create_dir_all(&code)?;
        let mut keys: Vec<Option<u64>> = self.spaces.keys().copied().collect();
        keys.sort();
        let mut files = Vec::new();
        for key in keys {
            let name = match key {
                None => "code/kernel.bin".to_string(),
                Some(cr3) => format!("code/cr3-{cr3:x}.bin"),
            };
            let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join(&name))?);
            let pages = &self.spaces[&key];
            let mut numbers: Vec<u64> = pages.keys().copied().collect();
            numbers.sort_unstable();
            let mut offset = 0u64;
            let mut k = 0;
            while k < numbers.len() {
                let first = numbers[k];
                let mut n = 1;
                while k + n < numbers.len() && numbers[k + n] == first + n as u64 {
                    n += 1;
                }
                for p in &numbers[k..k + n] {
                    out.write_all(&pages[p].bytes)?;
                }
                files.push(CodeFile {
                    path: name.clone(),
                    offset,
                    start: first * PAGE,
                    size: n as u64 * PAGE,
                    cr3: key,
                });
                offset += n as u64 * PAGE;
                k += n;
            }
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QE28: kernel code is one space for every CR3, user code one per CR3's PIP bits; bytes
    /// placed again with another value are counted, the newer kept; the files hold each run
    /// of pages at its address.
    #[test]
    fn qe28_code_is_kept_by_address_space() {
        assert_eq!(space_of(0xffff_ffff_8100_0000, 0x1234_5000), None);
        assert_eq!(space_of(0x40_1000, 0x1234_5fff), Some(0x1234_5fe0));
        let mut c = CodeSpaces::default();
        c.place(None, 0xffff_ffff_8100_0ffe, &[0x90, 0x90, 0xc3]);
        c.place(Some(0x5000), 0x40_1000, &[0xc3]);
        c.place(Some(0x6000), 0x40_1000, &[0x90]);
        assert_eq!(c.conflicts, 0);
        c.place(Some(0x6000), 0x40_1000, &[0xcc]);
        assert_eq!(c.conflicts, 1);
        assert_eq!(c.first_conflicts, [(Some(0x6000), 0x40_1000)]);
        assert_eq!(c.spaces(), 3);
        let dir = tempfile::tempdir().unwrap();
        let files = c.write(dir.path()).unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].cr3, None);
        assert_eq!((files[0].start, files[0].size), (0xffff_ffff_8100_0000, 8192));
        let k = std::fs::read(dir.path().join(&files[0].path)).unwrap();
        assert_eq!(&k[0xffe..0x1001], &[0x90, 0x90, 0xc3]);
        assert_eq!(k[0], GAP);
        let u = std::fs::read(dir.path().join(&files[2].path)).unwrap();
        assert_eq!((files[2].cr3, u[0]), (Some(0x6000), 0xcc));
    }
}
