//! Which file the guest's code comes from (spec/qemu.md QE5), read from the host's process map,
//! and reads of guest memory that cannot crash QEMU.

use ptemu_wire::FileMap;

/// What the plugin knows of the guest's address space.
#[derive(Debug, Default)]
pub struct Known {
    /// Host address minus guest address (QEMU user mode's guest base), once a block told it.
    base: Option<u64>,
    /// Guest ranges already reported as file mappings.
    ranges: Vec<(u64, u64)>,
    /// Guest pages no file holds (QE17), already looked up.
    unfiled: std::collections::HashSet<u64>,
}

impl Known {
    /// The file mappings holding guest bytes `vaddr..vaddr + len` (at host address `host`) that
    /// were not reported yet (none where no file holds them: code written at run time, QE17),
    /// or an address the process map does not have and why.
    pub fn locate(&mut self, vaddr: u64, host: usize, len: usize) -> Result<Vec<FileMap>, (u64, String)> {
        let base = (host as u64).wrapping_sub(vaddr);
        match self.base {
            None => self.base = Some(base),
            Some(b) if b != base => {
                return Err((vaddr, format!("QEMU's guest base moved from {b:#x} to {base:#x}")));
            }
            Some(_) => {}
        }
        let mut new = Vec::new();
        let last = vaddr.wrapping_add(len.max(1) as u64 - 1);
        for a in [vaddr, last] {
            if self.ranges.iter().any(|&(s, e)| s <= a && a < e) || self.unfiled.contains(&(a >> 12)) {
                continue;
            }
            match find(a.wrapping_add(base), base)? {
                Some(m) => {
                    self.ranges.push((m.start, m.end));
                    new.push(m);
                }
                None => {
                    self.unfiled.insert(a >> 12);
                }
            }
        }
        Ok(new)
    }

    /// Up to `len` bytes of guest memory from `addr`, as far as they are readable.
    pub fn read_code(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut got = 0;
        while got < len {
            match self.read(addr + got as u64, &mut out[got..]) {
                Some(n) if n > 0 => got += n,
                _ => break,
            }
        }
        out.truncate(got);
        out
    }

    /// Eight bytes of guest memory at `addr`, if readable (across a page boundary too).
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.read_code(addr, 8).try_into().ok()?))
    }

    /// The NUL-terminated string at guest `addr` (at most 4 KiB), if readable.
    pub fn read_str(&self, addr: u64) -> Option<String> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 256];
        while out.len() < 4096 {
            let n = self.read(addr + out.len() as u64, &mut chunk)?;
            if n == 0 {
                return None;
            }
            if let Some(end) = chunk[..n].iter().position(|&c| c == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Some(text(&out));
            }
            out.extend_from_slice(&chunk[..n]);
        }
        Some(text(&out))
    }

    /// Reads guest memory through the kernel (process_vm_readv on this process), so a bad
    /// address is an error, never a crash; reads up to a page boundary at most.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Option<usize> {
        let host = addr.wrapping_add(self.base?);
        let to_page_end = (0x1000 - (host & 0xfff)) as usize;
        let len = buf.len().min(to_page_end);
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: host as usize as *mut libc::c_void,
            iov_len: len,
        };
        // The calling thread's own id, not the process's: once the main thread has called
        // pthread_exit, the process id names a thread without memory, and the read fails.
        // SAFETY: `local` is our buffer of `len` bytes; the kernel checks `remote`.
        let n = unsafe { libc::process_vm_readv(libc::gettid(), &local, 1, &remote, 1, 0) };
        (n >= 0).then_some(n as usize)
    }
}

/// `bytes` as text of at most 1 KiB (a note's text is at most 4 KiB, and a lossy conversion
/// may triple it).
fn text(bytes: &[u8]) -> String {
    let mut s = String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).into_owned();
    while s.len() > 1024 {
        s.pop();
    }
    s
}

/// The line of the process map holding host address `host`, as guest addresses. The map is
/// read as bytes: a path elsewhere in it that is not UTF-8 does not matter. It is the calling
/// thread's view (`/proc/thread-self/maps`): `/proc/self` is the main thread's, whose map reads
/// empty once it has called pthread_exit while other threads run on.
fn find(host: u64, base: u64) -> Result<Option<FileMap>, (u64, String)> {
    let guest = host.wrapping_sub(base);
    let bytes = std::fs::read("/proc/thread-self/maps")
        .map_err(|e| (guest, format!("/proc/thread-self/maps: {e}")))?;
    for raw in bytes.split(|&b| b == b'\n') {
        let line = match std::str::from_utf8(raw) {
            Ok(l) => l,
            Err(_) => {
                // Only a path can be other than ASCII: whether it matters is its range's say.
                let range = raw.split(|&b| b == b' ').next().unwrap_or_default();
                let mut ends = range.split(|&b| b == b'-').map(|h| {
                    std::str::from_utf8(h)
                        .ok()
                        .and_then(|t| u64::from_str_radix(t, 16).ok())
                });
                if let (Some(Some(s)), Some(Some(e))) = (ends.next(), ends.next()) {
                    if s <= host && host < e {
                        return Err((guest, format!("a file whose path is not UTF-8: {}", text(raw))));
                    }
                }
                continue;
            }
        };
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(_perms), Some(offset), Some(dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            continue;
        };
        if !(s <= host && host < e) {
            continue;
        }
        let path = f.collect::<Vec<_>>().join(" ");
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            // Memory no file holds (anonymous, [heap], a file since deleted): code written at
            // run time, whose bytes the block records carry (QE17).
            return Ok(None);
        }
        let (major, minor) = dev.split_once(':').unwrap_or(("0", "0"));
        return Ok(Some(FileMap {
            start: s.wrapping_sub(base),
            end: e.wrapping_sub(base),
            offset: u64::from_str_radix(offset, 16).unwrap_or(0),
            major: u32::from_str_radix(major, 16).unwrap_or(0),
            minor: u32::from_str_radix(minor, 16).unwrap_or(0),
            inode: inode.parse().unwrap_or(0),
            path,
        }));
    }
    Err((guest, "no mapping at all".into()))
}
