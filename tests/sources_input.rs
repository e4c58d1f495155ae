//! The one reading path of every format (`ptemu::sources::Input`): an input file that another
//! process shrinks while ptemu reads it through a memory map is an error naming what happened,
//! never a SIGBUS that kills the process, and never a short trace taken for the whole one.

mod common;

use common::cli::{ptemu, s, text};
use ptemu::sources::Input;
use std::fs::OpenOptions;
use std::io::{BufRead, Read};

/// Reads `input` to its end: the bytes read and the error that ended it, if any.
fn read_to_end(input: &mut Input) -> (usize, Option<std::io::Error>) {
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match input.read(&mut buf) {
            Ok(0) => return (total, None),
            Ok(n) => total += n,
            Err(e) => return (total, Some(e)),
        }
    }
}

/// Cuts the file at `path` to `len` bytes, as another writer would.
fn cut(path: &std::path::Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_mapped_file_cut_short_while_read_is_an_error_not_a_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    std::fs::write(&path, vec![0x5au8; 32 << 20]).unwrap();
    let mut input = Input::open(&path).unwrap();
    let mut head = vec![0u8; 1 << 20];
    input.read_exact(&mut head).unwrap();
    // Another writer cuts the file to one page: every mapped page past it is gone.
    cut(&path, 4096);
    let (_, err) = read_to_end(&mut input);
    let err = err.expect("reading past the new end is an error").to_string();
    assert!(err.contains("changed size") && err.contains("4096 now"), "{err}");
    // The error stays: no clean end of input after it.
    assert!(input.fill_buf().is_err());
}

#[test]
fn a_mapped_file_cut_inside_its_last_page_is_an_error_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.bin");
    std::fs::write(&path, vec![1u8; 10_000]).unwrap();
    let mut input = Input::open(&path).unwrap();
    let mut head = [0u8; 100];
    input.read_exact(&mut head).unwrap();
    cut(&path, 9_000);
    let (_, err) = read_to_end(&mut input);
    let err = err.expect("a size change is reported at the end").to_string();
    assert!(err.contains("10000 bytes when opened, 9000 now"), "{err}");
}

/// Through the CLI, with the cut made while `ptemu stats` reads a large BYU trace: exit 2 and a
/// message naming the file, never death by SIGBUS (exit 135). Whether the cut lands before the
/// reader finishes depends on timing, so a clean finish is accepted only with the whole count.
#[test]
fn stats_on_a_file_cut_while_read_exits_2_or_counts_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.byu");
    let records = 4_000_000u64;
    let o = ptemu(&[
        "gen",
        "--format",
        "byu",
        "--records",
        &records.to_string(),
        "-o",
        s(&path),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(["stats", s(&path), "--format", "byu", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    cut(&path, 4096);
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    match o.status.code() {
        // Cut while read: "changed size"; cut before it was opened (a loaded machine starts the
        // child late): the 4096 bytes it then has end inside a record.
        Some(2) => assert!(
            err.contains("big.byu")
                && (err.contains("changed size") || err.contains("ends inside the record")),
            "{err}"
        ),
        Some(0) => {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["records"].as_u64(), Some(records), "a clean finish read it all");
        }
        other => panic!("exit {other:?} ({:?}): {err}", o.status),
    }
}

/// Bytes in reads of 5, each after an interrupted read (EINTR).
struct Interrupts {
    bytes: std::io::Cursor<Vec<u8>>,
    interrupt: bool,
}

impl Read for Interrupts {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.interrupt = !self.interrupt;
        if self.interrupt {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let n = out.len().min(5);
        self.bytes.read(&mut out[..n])
    }
}

/// An interrupted read is read again by the input itself, plain or gzip'd, through `Read` and
/// `BufRead`: no reader above it sees one (the readers of every format rely on it and do not
/// retry themselves).
#[test]
fn interrupted_reads_are_read_again_by_the_input() {
    let bytes: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &bytes).unwrap();
    let gz = gz.finish().unwrap();
    for body in [bytes.clone(), gz] {
        let open = || {
            let r = Interrupts {
                bytes: std::io::Cursor::new(body.clone()),
                interrupt: false,
            };
            Input::from_reader("pipe", r).unwrap()
        };
        let mut read = Vec::new();
        open().read_to_end(&mut read).unwrap();
        assert_eq!(read, bytes);
        let mut input = open();
        let mut buffered = Vec::new();
        loop {
            let buf = input.fill_buf().unwrap();
            if buf.is_empty() {
                break;
            }
            buffered.extend_from_slice(buf);
            let n = buf.len();
            input.consume(n);
        }
        assert_eq!(buffered, bytes);
    }
}
