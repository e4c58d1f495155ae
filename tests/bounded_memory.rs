//! Memory that follows what is written, not the input's size (issue 50 §3), measured, not
//! timed: `ptemu pttc`'s on data directives (proportional to the bytes, not token structures
//! per value), and `ptemu verify`'s on a long truth of blocks (flat, issue 51 §5), counted by a
//! global allocator of this test binary (the tests take turns, so nothing else allocates
//! meanwhile; `ptemu asm`'s is tests/asm_memory.rs).

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

/// Held while a test measures, so that the other's allocations do not count.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
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

/// The blocks of [`block_truth`]: 64 blocks of 1 to 10 instructions one after another from
/// 0x40_0000, each ending in a conditional branch taken to the next (the last to the first).
fn cycle_blocks() -> Vec<ptemu::tracer::Block> {
    use ptemu::tracer::{Block, BlockEnd};
    let lens: Vec<Vec<u8>> = (0..64u8)
        .map(|k| (0..1 + k % 10).map(|j| 1 + (j + k) % 7).collect())
        .collect();
    let mut starts = vec![0x40_0000u64];
    for l in &lens {
        starts.push(starts.last().unwrap() + l.iter().map(|&x| u64::from(x)).sum::<u64>());
    }
    (0..64)
        .map(|k| {
            let target = starts[(k + 1) % 64];
            Block::new(starts[k], &lens[k], BlockEnd::Conditional { target }).unwrap()
        })
        .collect()
}

/// A `truth.bin` of `runs` executions of [`cycle_blocks`] in order (a carrier offset every
/// third), all required, written to `path`; its instructions.
fn block_truth(path: &std::path::Path, runs: u64) -> u64 {
    use ptemu::truth::compact::Encoder;
    use ptemu::truth::record::{Class, Record, Run, Sink};
    let blocks = cycle_blocks();
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut enc = Encoder::new(file);
    enc.header(&serde_json::json!({"truncated": false})).unwrap();
    for b in &blocks {
        enc.block(b).unwrap();
    }
    let mut i = 0u64;
    for e in 0..runs {
        let k = (e % 64) as usize;
        let run = Run {
            i,
            block: k as u32,
            n: blocks[k].instructions() as u32,
            next: blocks[(k + 1) % 64].start(),
            off: Some(e / 3),
            class: Class::Required,
        };
        enc.run(&run).unwrap();
        i += u64::from(run.n);
    }
    let counts = ptemu::truth::Counts {
        instructions: i,
        required: i,
        ..Default::default()
    };
    enc.record(&Record::End { counts }).unwrap();
    enc.finish().unwrap();
    i
}

/// A decoder's output of [`block_truth`]'s IPs, `0x…` a line, made as it is read (no buffer of
/// its own beyond a line).
struct BlockLines {
    blocks: Vec<ptemu::tracer::Block>,
    runs: u64,
    run: u64,
    k: usize,
    line: Vec<u8>,
    at: usize,
}

impl std::io::Read for BlockLines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            if self.at == self.line.len() {
                if self.run == self.runs {
                    break;
                }
                let b = &self.blocks[(self.run % 64) as usize];
                let ip = b.start() + b.lengths()[..self.k].iter().map(|&x| u64::from(x)).sum::<u64>();
                self.line.clear();
                std::io::Write::write_fmt(&mut self.line, format_args!("{ip:#x}\n"))?;
                self.at = 0;
                self.k += 1;
                if self.k == b.instructions() {
                    (self.k, self.run) = (0, self.run + 1);
                }
            }
            let take = (self.line.len() - self.at).min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&self.line[self.at..self.at + take]);
            (n, self.at) = (n + take, self.at + take);
        }
        Ok(n)
    }
}

/// The most bytes live at once while `ptemu verify`'s library checks a `truth.bin` of `runs`
/// block executions (mapped, not read) against a decoder output made as it is read, above what
/// was live before; and the instructions matched.
fn peak_of_verify(dir: &std::path::Path, runs: u64) -> (usize, u64) {
    use ptemu::truth::verify::{check_with, Options, Pattern};
    let path = dir.join(format!("truth-{runs}.bin"));
    let insns = block_truth(&path, runs);
    let lines = BlockLines {
        blocks: cycle_blocks(),
        runs,
        run: 0,
        k: 0,
        line: Vec::with_capacity(32),
        at: 0,
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let p = Pattern::open(&path).unwrap();
    let v = check_with(
        &p,
        std::io::BufReader::with_capacity(1 << 16, lines),
        Options::default(),
    )
    .unwrap();
    assert_eq!(v.divergence, None);
    assert_eq!(v.ips, insns);
    drop(p);
    (PEAK.load(Ordering::Relaxed) - before, insns)
}

/// TR8, TR15, issue 51 §5: `verify` on a truth of blocks takes the same memory for 8 times the
/// executions: the truth is mapped and let go as it is read, the decoder's lines are read a
/// buffer at a time, the block walk allocates nothing a line or a run. What it holds is the
/// table of blocks, the header and the reader's buffer.
#[test]
fn tr8_tr15_verify_on_a_long_block_truth_takes_flat_memory() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (short, n_short) = peak_of_verify(dir.path(), 40_000);
    let (long, n_long) = peak_of_verify(dir.path(), 320_000);
    assert!(n_long >= 1_500_000, "{n_long} instructions");
    assert!(
        long <= short + 4096 && long <= 1 << 20,
        "{n_short} instructions: {short} bytes at the peak; {n_long}: {long}"
    );
}
