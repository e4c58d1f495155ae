//! `cargo xtask bench` (dump): `ptemu dump`'s text output against libipt's packet decoder
//! printing the same fields the C way, on one 16 MiB trace, in one process. Issue 29's target:
//! decode + format at least 1.5x faster than libipt's `pt_pkt_next` + `snprintf`.
//!
//! Both sides decode the whole trace from its first PSB and format every packet as a `dump` line
//! (16-digit offset, the name padded to 10 columns, its fields) into a 64 KiB buffer that is
//! handed to `io::sink()` when full: what writing costs apart from the kernel. ptemu's side is
//! `PacketDecoder` with `push_hex16` and `push_text` (what `ptemu dump` runs); libipt's formats
//! the fields `dump` shows for the packets of the trace (TNT bits, IP compression and IP, TSC,
//! CBR, MTC, CYC, TMA, MODE.Exec bits, PTW size and payload; the name alone for the rest) with one
//! `snprintf` per packet, plus a loop for TNT bits.
//!
//! The trace: `ptemu simulate` of 1.5M generated Penn micro-ops with CYC, MTC and PTWRITE on
//! (Alder Lake: hardware packet layout, PADs included; about 2.7 MB), made once in
//! target/bench-data/, decoded in passes that add up to 16 MiB. Real hardware traces are not part
//! of the project; when `../shared/hw-traces/mruby.pt` exists it is measured the same way.
//! Each side runs 7 interleaved rounds; each side's time is its fastest round.
#![allow(non_upper_case_globals)]

use libipt_sys::*;
use ptemu::packet::text::{push_hex16, push_text};
use ptemu::packet::PacketDecoder;
use std::ffi::{c_char, c_int};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Issue 29: dump at least this much faster than libipt + snprintf.
const TARGET: f64 = 1.5;
/// Text gathered before it is written.
const FLUSH: usize = 64 << 10;

extern "C" {
    fn snprintf(buf: *mut c_char, n: usize, fmt: *const c_char, ...) -> c_int;
}

fn data_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A simulated, packet-rich trace of `records` Penn micro-ops, made once.
fn trace(records: u64) -> Vec<u8> {
    let path = data_dir().join(format!("dump-{records}.pt"));
    if !path.exists() {
        let ptemu = env!("CARGO_BIN_EXE_ptemu");
        let dir = data_dir();
        let input = dir.join("dump-input.trace");
        let records = records.to_string();
        eprintln!("generating {} ...", path.display());
        let ok = Command::new(ptemu)
            .args(["gen", "--format", "penn", "-q", "--records", &records, "-o"])
            .arg(&input)
            .status()
            .unwrap()
            .success();
        assert!(ok, "ptemu gen");
        let out = dir.join("dump-sim");
        let ok = Command::new(ptemu)
            .args(["simulate", "--format", "penn", "-q", "--no-truth", "--no-image"])
            .args([
                "--ctl", "CYCEn=1", "--ctl", "MTCEn=1", "--ctl", "PTWEn=1", "--out",
            ])
            .arg(&out)
            .arg(&input)
            .status()
            .unwrap()
            .success();
        assert!(ok, "ptemu simulate");
        std::fs::rename(out.join("trace.pt"), &path).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        let _ = std::fs::remove_file(&input);
    }
    std::fs::read(path).unwrap()
}

/// ptemu: what `ptemu dump` does per packet. Returns the time and the lines written.
#[inline(never)]
fn ptemu_dump(bytes: &[u8], passes: usize) -> (Duration, usize) {
    let start = Instant::now();
    let mut text = String::with_capacity(FLUSH + 256);
    let mut sink = std::io::sink();
    let mut lines = 0;
    for _ in 0..passes {
        let mut d = PacketDecoder::new(bytes, 0);
        d.sync_forward();
        while let Some(r) = d.next_packet() {
            match r {
                Ok((offset, p)) => {
                    push_hex16(&mut text, offset);
                    text.push_str("  ");
                    push_text(&p, &mut text);
                    text.push('\n');
                }
                Err(_) => {
                    if !d.resync() {
                        break;
                    }
                }
            }
            lines += 1;
            if text.len() >= FLUSH {
                sink.write_all(black_box(text.as_bytes())).unwrap();
                text.clear();
            }
        }
    }
    sink.write_all(black_box(text.as_bytes())).unwrap();
    (start.elapsed(), lines)
}

/// The C way: `pt_pkt_next` and one `snprintf` per packet into the same kind of buffer.
#[inline(never)]
fn libipt_dump(bytes: &mut [u8], passes: usize) -> (Duration, usize) {
    let len = bytes.len();
    // SAFETY: zero is pt_config's initial state (what pt_config_init does, plus `size`).
    let mut c: pt_config = unsafe { std::mem::zeroed() };
    c.size = std::mem::size_of::<pt_config>();
    c.begin = bytes.as_mut_ptr();
    // SAFETY: `len` is within `bytes`.
    c.end = unsafe { bytes.as_mut_ptr().add(len) };
    let mut text: Vec<u8> = Vec::with_capacity(FLUSH + 512);
    let mut sink = std::io::sink();
    let mut lines = 0;
    // SAFETY: `bytes` outlives the decoder; every snprintf writes within the 512 bytes reserved.
    unsafe {
        let dec = pt_pkt_alloc_decoder(&c);
        let mut pkt: pt_packet = std::mem::zeroed();
        // Every pass from the first PSB, as ptemu's `sync_forward` from byte 0 (libipt's
        // sync_forward from a PSB would go on to the next one).
        let mut first_psb = 0u64;
        if pt_pkt_sync_forward(dec) >= 0 {
            pt_pkt_get_sync_offset(dec, &mut first_psb);
        }
        let start = Instant::now();
        for _ in 0..passes {
            if pt_pkt_sync_set(dec, first_psb) < 0 {
                break;
            }
            loop {
                let mut offset = 0u64;
                pt_pkt_get_offset(dec, &mut offset);
                let rc = pt_pkt_next(dec, &mut pkt, std::mem::size_of::<pt_packet>());
                if rc == -(pt_error_code_pte_eos as i32) {
                    break;
                }
                if rc < 0 {
                    if pt_pkt_sync_forward(dec) < 0 {
                        break;
                    }
                    lines += 1;
                    continue;
                }
                format_c(&mut text, offset, &pkt);
                lines += 1;
                if text.len() >= FLUSH {
                    sink.write_all(black_box(&text)).unwrap();
                    text.clear();
                }
            }
        }
        let t = start.elapsed();
        pt_pkt_free_decoder(dec);
        sink.write_all(black_box(&text)).unwrap();
        (t, lines)
    }
}

/// One dump line of `pkt` at `offset`, formatted with `snprintf`, appended to `text`.
///
/// # Safety
/// `text` has 512 bytes of spare capacity.
unsafe fn format_c(text: &mut Vec<u8>, offset: u64, pkt: &pt_packet) {
    // SAFETY: the caller's contract; the union members read are those of `pkt.type_`.
    unsafe {
        let at = text.len();
        let buf = text.as_mut_ptr().add(at).cast::<c_char>();
        let room = text.capacity() - at;
        let (name, n): (&[u8], c_int) = match pkt.type_ {
            pt_packet_type_ppt_tnt_8 | pt_packet_type_ppt_tnt_64 => {
                let name: &[u8] = if pkt.type_ == pt_packet_type_ppt_tnt_8 {
                    b"tnt.8\0"
                } else {
                    b"tnt.64\0"
                };
                let mut n = snprintf(buf, room, c"%016llx  %-10s ".as_ptr(), offset, name.as_ptr());
                let t = pkt.payload.tnt;
                for i in (0..t.bit_size).rev() {
                    *buf.add(n as usize) = if t.payload >> i & 1 == 1 { b'!' } else { b'.' } as c_char;
                    n += 1;
                }
                (name, n)
            }
            pt_packet_type_ppt_tip
            | pt_packet_type_ppt_fup
            | pt_packet_type_ppt_tip_pge
            | pt_packet_type_ppt_tip_pgd => {
                let name: &[u8] = match pkt.type_ {
                    pt_packet_type_ppt_tip => b"tip\0",
                    pt_packet_type_ppt_fup => b"fup\0",
                    pt_packet_type_ppt_tip_pge => b"tip.pge\0",
                    _ => b"tip.pgd\0",
                };
                let ip = pkt.payload.ip;
                let n = if ip.ipc == 0 {
                    snprintf(buf, room, c"%016llx  %-10s 0".as_ptr(), offset, name.as_ptr())
                } else {
                    snprintf(
                        buf,
                        room,
                        c"%016llx  %-10s %u: 0x%llx".as_ptr(),
                        offset,
                        name.as_ptr(),
                        ip.ipc,
                        ip.ip,
                    )
                };
                (name, n)
            }
            pt_packet_type_ppt_tsc => num(buf, room, offset, b"tsc\0", pkt.payload.tsc.tsc),
            pt_packet_type_ppt_cbr => num(buf, room, offset, b"cbr\0", u64::from(pkt.payload.cbr.ratio)),
            pt_packet_type_ppt_mtc => num(buf, room, offset, b"mtc\0", u64::from(pkt.payload.mtc.ctc)),
            pt_packet_type_ppt_cyc => num(buf, room, offset, b"cyc\0", pkt.payload.cyc.value),
            pt_packet_type_ppt_tma => {
                let t = pkt.payload.tma;
                let n = snprintf(
                    buf,
                    room,
                    c"%016llx  %-10s 0x%x, 0x%x".as_ptr(),
                    offset,
                    c"tma".as_ptr(),
                    c_int::from(t.ctc),
                    c_int::from(t.fc),
                );
                (b"tma\0", n)
            }
            pt_packet_type_ppt_ptw => {
                let p = pkt.payload.ptw;
                let n = snprintf(
                    buf,
                    room,
                    c"%016llx  %-10s %d: 0x%llx".as_ptr(),
                    offset,
                    c"ptw".as_ptr(),
                    if p.plc == 0 { 4 } else { 8 },
                    p.payload,
                );
                (b"ptw\0", n)
            }
            pt_packet_type_ppt_mode => {
                let m = pkt.payload.mode;
                let n = if m.leaf == pt_mode_leaf_pt_mol_exec {
                    let e = m.bits.exec;
                    snprintf(
                        buf,
                        room,
                        c"%016llx  %-10s %s%s".as_ptr(),
                        offset,
                        c"mode.exec".as_ptr(),
                        if e.csl() != 0 {
                            c"cs.l".as_ptr()
                        } else {
                            c"".as_ptr()
                        },
                        if e.csd() != 0 {
                            c", cs.d".as_ptr()
                        } else {
                            c"".as_ptr()
                        },
                    )
                } else {
                    snprintf(
                        buf,
                        room,
                        c"%016llx  %-10s".as_ptr(),
                        offset,
                        c"mode.tsx".as_ptr(),
                    )
                };
                (b"mode\0", n)
            }
            t => {
                let name: &[u8] = match t {
                    pt_packet_type_ppt_pad => b"pad\0",
                    pt_packet_type_ppt_psb => b"psb\0",
                    pt_packet_type_ppt_psbend => b"psbend\0",
                    pt_packet_type_ppt_ovf => b"ovf\0",
                    _ => b"other\0",
                };
                (
                    name,
                    snprintf(buf, room, c"%016llx  %s".as_ptr(), offset, name.as_ptr()),
                )
            }
        };
        black_box(name);
        assert!(n >= 0, "snprintf failed");
        let mut n = n as usize;
        *buf.add(n) = b'\n' as c_char;
        n += 1;
        text.set_len(at + n);
    }
}

/// A line with one hex number.
///
/// # Safety
/// `buf` has `room` writable bytes; `name` ends with a NUL.
unsafe fn num(
    buf: *mut c_char,
    room: usize,
    offset: u64,
    name: &'static [u8],
    v: u64,
) -> (&'static [u8], c_int) {
    // SAFETY: the caller's contract.
    (name, unsafe {
        snprintf(
            buf,
            room,
            c"%016llx  %-10s 0x%llx".as_ptr(),
            offset,
            name.as_ptr(),
            v,
        )
    })
}

/// The fastest of `rounds` interleaved rounds of each side.
fn fastest(
    rounds: usize,
    ours: &mut dyn FnMut() -> (Duration, usize),
    theirs: &mut dyn FnMut() -> (Duration, usize),
) -> ((Duration, usize), (Duration, usize)) {
    let (mut a, mut b) = ((Duration::MAX, 0), (Duration::MAX, 0));
    for _ in 0..rounds {
        let x = ours();
        if x.0 < a.0 {
            a = x;
        }
        let y = theirs();
        if y.0 < b.0 {
            b = y;
        }
    }
    (a, b)
}

fn measure(what: &str, mut bytes: Vec<u8>, passes: usize, rounds: usize, bench: bool) -> serde_json::Value {
    let mb = (bytes.len() * passes) as f64 / 1e6;
    let ours_bytes = bytes.clone();
    let ((to, lo), (tl, ll)) = fastest(rounds, &mut || ptemu_dump(&ours_bytes, passes), &mut || {
        libipt_dump(&mut bytes, passes)
    });
    assert_eq!(lo, ll, "both sides decode the same packets");
    let ratio = tl.as_secs_f64() / to.as_secs_f64();
    let verdict = match (bench, ratio >= TARGET) {
        (false, _) => "not judged in a smoke run",
        (true, true) => "met",
        (true, false) => "NOT met",
    };
    println!(
        "  {what}: {mb:.1} MB, ptemu {:.1} MB/s ({lo} lines), libipt + snprintf {:.1} MB/s ({ll} lines): {ratio:.2}x (target >= {TARGET}x: {verdict})",
        mb / to.as_secs_f64(),
        mb / tl.as_secs_f64()
    );
    serde_json::json!({"trace": what, "mb": mb, "ptemu_mb_s": mb / to.as_secs_f64(),
        "libipt_mb_s": mb / tl.as_secs_f64(), "ratio": ratio, "target": TARGET})
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (size, rounds, records) = if bench {
        (16 << 20, 7, 1_500_000)
    } else {
        (1 << 20, 1, 50_000)
    };
    println!("ptemu dump bench: decode + format every packet, {rounds} interleaved rounds, fastest of each");
    let simulated = trace(records);
    let passes = (size / simulated.len().max(1)).max(1);
    let mut rows = vec![measure(
        "simulated Penn, CYC+MTC+PTW",
        simulated,
        passes,
        rounds,
        bench,
    )];
    let hw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/hw-traces/mruby.pt");
    if let Ok(real) = std::fs::read(&hw) {
        let passes = (size / real.len().max(1)).max(1);
        rows.push(measure(
            "real Skylake mruby.pt (outside the project)",
            real,
            passes,
            rounds,
            bench,
        ));
    }
    if bench {
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-dump.json");
        std::fs::write(&out, serde_json::to_string_pretty(&rows).unwrap()).unwrap();
        println!("  results: {}", out.display());
    }
}
