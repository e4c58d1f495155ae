//! Memory that follows what is written, not the input's size (issue 50 §3), measured, not
//! timed: `ptemu pttc`'s on data directives (proportional to the bytes, not token structures
//! per value), counted by a global allocator of this test binary (one test, so nothing else
//! allocates meanwhile; `ptemu asm`'s is tests/asm_memory.rs).

use ptemu::pttc::{compile, Options};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator as given; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes live at once while `text` compiles, above what was live before.
fn peak_of_compile(text: &str) -> (usize, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let files = compile("mem.ptt", text, &Options::default()).expect("the file compiles");
    let bin = files.files[0].bytes.len();
    drop(files);
    (PEAK.load(Ordering::Relaxed) - before, bin)
}

/// A .ptt of `values` `dN` values, `per_line` to a line.
fn data_ptt(directive: &str, size: u32, values: usize, per_line: usize) -> String {
    let mut s = String::from("org 0x1000\nbits 64\n");
    let mask = if size == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * size)) - 1
    };
    let mut i = 0;
    while i < values {
        let k = per_line.min(values - i);
        s.push_str(directive);
        s.push(' ');
        let line: Vec<String> = (i..i + k)
            .map(|v| format!("{:#x}", (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) & mask))
            .collect();
        s.push_str(&line.join(","));
        s.push('\n');
        i += k;
    }
    s
}

/// `db` and `dq` lines, short and one of all the values: the compile's peak stays within four
/// times the text (its own listing copy of the text, the bytes a few times over). It used to be
/// about 40 bytes a `db` value and 255 a `dq` value (2 MB of `dq`: 260 MB).
#[test]
fn data_directives_cost_their_bytes_not_structures_per_value() {
    for (directive, size, values, per_line) in [
        ("dq", 8, 1 << 19, 1000),
        ("dq", 8, 1 << 19, 1 << 19),
        ("db", 1, 1 << 20, 1000),
        ("db", 1, 1 << 20, 1 << 20),
    ] {
        let text = data_ptt(directive, size, values, per_line);
        let (peak, bin) = peak_of_compile(&text);
        assert_eq!(bin, values * size as usize, "{directive}: the .bin's bytes");
        assert!(
            peak <= 4 * text.len(),
            "{directive} x{values}, {per_line} a line: {peak} bytes at the peak for a text of {} bytes ({} per value)",
            text.len(),
            peak / values
        );
    }
}
