//! Code written at run time (spec/qemu.md QE17): the bytes QEMU translated from memory no file
//! holds, page by page, in versions. A page's version holds every byte of it that a translated
//! block covered; a block whose bytes differ from the page's newest version where both know the
//! byte starts a new version (the program rewrote the code: QEMU throws away the blocks of a page
//! written to, so every instruction that runs after the rewrite is translated again).

use std::collections::HashMap;

/// The size of a page, the unit of a version.
pub const PAGE: u64 = 0x1000;

/// The most versions of written code one thread's trace keeps (QE17): each is a page in memory,
/// a file in `code/`, a mapping in perf.data and report.json. A program that writes more is
/// refused (a decoder given only some of them would fail where they run).
pub const MAX_VERSIONS: usize = 4096;

/// A version past [`MAX_VERSIONS`] would start: of the page at this address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyVersions(pub u64);

/// One version of a page of written code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeVersion {
    /// The page's address.
    pub page: u64,
    /// 0 for the page's first version, then 1, 2, ...
    pub version: u32,
    /// The page as far as translated blocks covered it (zero elsewhere).
    pub bytes: Vec<u8>,
    /// The traced thread's instruction count when it first ran code of this version, if it did.
    pub first: Option<u64>,
    /// ... and when it last did.
    pub last: Option<u64>,
}

/// Every version of every page of written code, in the order they appeared.
#[derive(Debug, Default)]
pub struct Written {
    versions: Vec<CodeVersion>,
    /// Bytes of each version that a block covered, a bit each.
    known: Vec<[u64; (PAGE / 64) as usize]>,
    /// Each page's newest version.
    newest: HashMap<u64, usize>,
    /// For each version, the versions of the next page its instructions reach into: they run
    /// when it does.
    spill: Vec<Vec<usize>>,
}

impl Written {
    /// Code `bytes` at `ip` was translated: returns, for each byte's page in order, the version
    /// it belongs to (one or two pages: an instruction is at most 15 bytes), or the page whose
    /// next version would be one more than [`MAX_VERSIONS`].
    pub fn add(&mut self, ip: u64, bytes: &[u8]) -> Result<usize, TooManyVersions> {
        // A new version for each page whose newest one knows a byte that differs.
        let mut pages: Vec<u64> = Vec::with_capacity(2);
        for (k, &b) in bytes.iter().enumerate() {
            let a = ip.wrapping_add(k as u64);
            let page = a & !(PAGE - 1);
            if !pages.contains(&page) {
                pages.push(page);
            }
            if let Some(&v) = self.newest.get(&page) {
                let off = (a - page) as usize;
                if self.known[v][off / 64] >> (off % 64) & 1 != 0 && self.versions[v].bytes[off] != b {
                    self.start(page)?;
                }
            }
        }
        for &page in &pages {
            if !self.newest.contains_key(&page) {
                self.start(page)?;
            }
        }
        for (k, &b) in bytes.iter().enumerate() {
            let a = ip.wrapping_add(k as u64);
            let page = a & !(PAGE - 1);
            let v = self.newest[&page];
            let off = (a - page) as usize;
            self.versions[v].bytes[off] = b;
            self.known[v][off / 64] |= 1 << (off % 64);
        }
        let first = self.newest[&(ip & !(PAGE - 1))];
        for page in &pages[1..] {
            let v = self.newest[page];
            if !self.spill[first].contains(&v) {
                self.spill[first].push(v);
            }
        }
        Ok(first)
    }

    fn start(&mut self, page: u64) -> Result<(), TooManyVersions> {
        if self.versions.len() == MAX_VERSIONS {
            return Err(TooManyVersions(page));
        }
        let version = self
            .newest
            .get(&page)
            .map_or(0, |&v| self.versions[v].version + 1);
        self.newest.insert(page, self.versions.len());
        self.versions.push(CodeVersion {
            page,
            version,
            bytes: vec![0; PAGE as usize],
            first: None,
            last: None,
        });
        self.known.push([0; (PAGE / 64) as usize]);
        self.spill.push(Vec::new());
        Ok(())
    }

    /// The traced thread ran code of version `v` when it had run `count` instructions.
    #[inline]
    pub fn ran(&mut self, v: usize, count: u64) {
        let c = &mut self.versions[v];
        c.first.get_or_insert(count);
        c.last = Some(count);
        for k in 0..self.spill[v].len() {
            let c = &mut self.versions[self.spill[v][k]];
            c.first.get_or_insert(count);
            c.last = Some(count);
        }
    }

    /// Every version.
    pub fn versions(&self) -> &[CodeVersion] {
        &self.versions
    }

    /// Every version, taken out (the trace is over: no copy of them all is made).
    pub fn take_versions(&mut self) -> Vec<CodeVersion> {
        self.known = Vec::new();
        self.spill = Vec::new();
        self.newest.clear();
        std::mem::take(&mut self.versions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_is_a_new_version_and_the_same_bytes_are_not() {
        let mut w = Written::default();
        assert_eq!(w.add(0x7000, &[0xb8, 1, 0, 0, 0]), Ok(0));
        assert_eq!(w.add(0x7005, &[0xc3]), Ok(0));
        // The same bytes again (a block translated anew): the same version.
        assert_eq!(w.add(0x7000, &[0xb8, 1, 0, 0, 0]), Ok(0));
        // Different bytes where the version knows them: version 1.
        assert_eq!(w.add(0x7000, &[0xb8, 2, 0, 0, 0]), Ok(1));
        assert_eq!(w.versions()[1].version, 1);
        assert_eq!(w.versions()[1].bytes[..5], [0xb8, 2, 0, 0, 0]);
        // Bytes across a page boundary go into both pages' versions.
        let v = w.add(0x7ffe, &[0x90, 0x90, 0xc3]).unwrap();
        assert_eq!(w.versions()[v].page, 0x7000);
        assert_eq!(w.versions().last().unwrap().page, 0x8000);
        assert_eq!(w.versions().last().unwrap().bytes[0], 0xc3);
        // Running the instruction runs both pages' versions.
        w.ran(v, 7);
        assert_eq!(w.versions().last().unwrap().first, Some(7));
    }

    #[test]
    fn versions_stop_at_the_maximum() {
        let mut w = Written::default();
        for k in 0..MAX_VERSIONS {
            assert_eq!(w.add(0x7000, &[k as u8, (k >> 8) as u8]), Ok(k));
        }
        assert_eq!(w.add(0x7000, &[0, 0]), Err(TooManyVersions(0x7000)));
        // Nor a first version of another page.
        assert_eq!(w.add(0x9000, &[0]), Err(TooManyVersions(0x9000)));
        assert_eq!(w.take_versions().len(), MAX_VERSIONS);
    }
}
