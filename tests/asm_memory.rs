//! `ptemu asm`'s memory on a large text (issue 50 §3): it streams, so its peak RSS stays far
//! below the text's size. A test binary of its own: the kernel counts in a child's peak RSS
//! what the parent held when it spawned the child (the memory is shared until the exec), so
//! the test process must stay small, which tests that allocate beside it would not let it.

use std::process::Command;

/// The largest peak RSS of this process's children that have been waited for, in bytes.
fn children_peak_rss() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid target.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) }, 0);
    u.ru_maxrss as u64 * 1024
}

/// `ptemu asm` on a 64 MB text (libipt's golden packets a thousand times over) stays under a
/// third of it in RSS: it reads a line at a time and writes as it goes (608 MB of text used to
/// take 625 MB). The bytes are those of the text assembled a piece at a time.
#[test]
fn asm_streams_a_large_text_in_bounded_memory() {
    let golden = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/asm/libipt-golden.txt"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.txt");
    std::fs::write(&one, &golden).unwrap();
    let big = dir.path().join("big.txt");
    let copies = (64 << 20) / golden.len() + 1;
    {
        use std::io::Write;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
        for _ in 0..copies {
            w.write_all(&golden).unwrap();
        }
        w.flush().unwrap();
    }
    let asm = |input: &std::path::Path, output: &std::path::Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_ptemu"))
            .args(["asm", input.to_str().unwrap(), "-o", output.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    asm(&one, &dir.path().join("one.pt"));
    asm(&big, &dir.path().join("big.pt"));
    let peak = children_peak_rss();
    let text = (copies * golden.len()) as u64;
    assert!(
        peak < text / 3,
        "asm's peak RSS {peak} bytes for {text} bytes of text"
    );
    let one = std::fs::read(dir.path().join("one.pt")).unwrap();
    let big = std::fs::read(dir.path().join("big.pt")).unwrap();
    assert_eq!(big.len(), one.len() * copies);
    assert!(
        big.chunks(one.len()).all(|c| c == one),
        "each copy assembles to the same bytes"
    );
}
