//! BLK1-BLK4 on real programs (spec/generation.md, spec/qemu.md QE13): `ptemu run` gives the
//! tracer whole executions of QEMU's blocks, and the per-instruction path stays the reference.
//! The plugin's stream of a real program (QEMU run here, the stream read off its socket) is
//! traced twice through `simulate::run_source`: once as blocks, once as the events they stand
//! for (the source wrapped so that it gives events only), under CTL settings, filters, layouts
//! and truth on and off; the trace bytes, the truth, the output unit's registers and the
//! tracer's counts must be the same.

mod common;

use common::qemu::{env, plugin, which, EventsOnly};
use ptemu::simulate::{self, Options};
use ptemu::sources::qemu::{QemuEvents, Sideband};
use ptemu::sources::steps::{Piece, Steps};
use ptemu::sources::{EventSource, Format};
use ptemu::truth::{Context, Delivery};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// The plugin's stream of `program args` run under qemu-x86_64: its socket is one end of a
/// pair this process reads.
fn record(program: &str, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let fd = theirs.as_raw_fd();
    // SAFETY: clearing close-on-exec on a descriptor this process owns.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    let mut cmd = Command::new(which("qemu-x86_64"));
    env(&mut cmd)
        .arg("-plugin")
        .arg(format!("{},fd={fd}", plugin().display()))
        .arg(which(program))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    drop(theirs);
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let data = data.to_vec();
        std::thread::spawn(move || std::io::Write::write_all(&mut pipe, &data));
    }
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let mut ours = ours;
        ours.read_to_end(&mut v).unwrap();
        v
    });
    assert!(child.wait().unwrap().success(), "{program} failed under QEMU");
    reader.join().unwrap()
}

/// What a run left: trace bytes, the truth (`truth.jsonl`), registers, tracer counts, source counts.
type Left = (Vec<u8>, Vec<u8>, String, String, String);

fn trace(stream: &[u8], opts: &Options, truth: bool, blocks: bool) -> Left {
    let side = Arc::new(Mutex::new(Sideband::default()));
    let src = QemuEvents::new("prog", std::io::Cursor::new(stream.to_vec()), side);
    let source: Box<dyn EventSource + Send> = if blocks {
        Box::new(src)
    } else {
        Box::new(EventsOnly(src))
    };
    let mut facts = Vec::new();
    let (outcome, bytes) = simulate::run_source(
        opts,
        "prog",
        source,
        Vec::new(),
        truth.then_some(&mut facts as &mut dyn std::io::Write),
        ptemu::event_log::EventLog::new(16),
        &mut |_| {},
    )
    .unwrap();
    // The truth as `truth.jsonl` lines (the spools differ: one is per instruction, the other
    // holds the blocks and their executions, TR14).
    let mut json = Vec::new();
    if truth {
        let stored = outcome.tracer.bytes;
        let ctx = Context {
            stored,
            damage: Vec::new(),
            delivery: Delivery::whole(stored),
            psbs: outcome.psbs.clone(),
            truncated: outcome.truncated,
            run: serde_json::json!({}),
        };
        ptemu::truth::write(&facts[..], &ctx, &mut json).unwrap();
        assert!(json.len() > 1000);
    }
    (
        bytes,
        json,
        format!("{:?}", outcome.unit.registers()),
        format!("{:?} {:?}", outcome.tracer, outcome.pmis),
        format!("{:?}", outcome.source),
    )
}

/// A one-table ToPA layout of `entries` (then END back to the table).
fn topa(entries: &str) -> ptemu::layout::Layout {
    let src = format!(
        "cpu = \"alderlake\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\nmask_ptrs = 0x7f\n\
         [[table]]\nbase = 0x10000\nentries = [ {entries} {{ end = 0x10000 }} ]\n"
    );
    ptemu::layout::Layout::parse(std::path::Path::new("<test layout>"), &src).unwrap()
}

/// The settings both paths are run under.
fn settings(code: (u64, u64)) -> Vec<(&'static str, Options)> {
    let base = Options::new(Format::Qemu, simulate::default_layout());
    let ctl = base.ctl;
    let small =
        topa(r#"{ region = 0x100000, size = "4K", int = true }, { region = 0x200000, size = "8K" },"#);
    let stop = topa(r#"{ region = 0x100000, size = "16K", stop = true },"#);
    let mut wrapped = Options::new(Format::Qemu, small);
    wrapped.ctl = ctl;
    let mut stopped = Options::new(Format::Qemu, stop);
    stopped.ctl = ctl;
    vec![
        ("default", base.clone()),
        ("DisRETC", base.clone().with_ctl(ctl.with_dis_retc(true))),
        ("PSBFreq=0", base.clone().with_ctl(ctl.with_psb_freq(0))),
        (
            "MTC, CYC",
            base.clone().with_ctl(
                ctl.with_mtc_en(true)
                    .with_mtc_freq(3)
                    .with_cyc_en(true)
                    .with_psb_freq(1),
            ),
        ),
        (
            // ADDR0 as a filter around part of the program's code (IA32_RTIT_ADDR0_A/B).
            "ADDR0 filter",
            base.clone()
                .with_ctl(ctl.with_addr0_cfg(1))
                .with_msrs(vec![(0x580, code.0), (0x581, code.1)]),
        ),
        ("8 KiB + 4 KiB ring with a PMI", wrapped),
        ("16 KiB then STOP", stopped),
    ]
}

#[test]
fn qe13_blk3_real_programs_traced_as_blocks_give_the_per_instruction_paths_bytes() {
    let input: Vec<u8> = (0..4_000u32)
        .flat_map(|i| format!("{} {}\n", i * 7919 % 10007, i).into_bytes())
        .collect();
    let runs = [
        ("gzip", record("gzip", &["-c"], Some(&input))),
        ("ls", record("ls", &["-l", "/etc"], None)),
    ];
    for (name, stream) in &runs {
        // The filter: the first 16 KiB of the first file code ran from.
        let side = Arc::new(Mutex::new(Sideband::default()));
        let mut probe = QemuEvents::new("prog", std::io::Cursor::new(stream.clone()), side.clone());
        // Most of what the source gives is executions of blocks (BLK1).
        let (mut events, mut execs) = (0, 0);
        let mut steps = Steps::default();
        while probe.next_steps(&mut steps).unwrap() {
            for p in steps.pieces() {
                match p {
                    Piece::Events(e) => events += e.len(),
                    Piece::Blocks { ids, .. } => execs += ids.len(),
                }
            }
            steps.clear();
        }
        assert!(
            execs > 20_000 && execs > 10 * events,
            "{name}: {execs} executions of blocks, {events} events"
        );
        let first = side.lock().unwrap().maps[0].start;
        for (what, opts) in settings((first, first + 0x4000)) {
            for truth in [false, true] {
                let by_blocks = trace(stream, &opts, truth, true);
                let by_events = trace(stream, &opts, truth, false);
                assert!(by_blocks.0.len() > 64, "{name}, {what}: a trace");
                assert!(
                    by_blocks == by_events,
                    "{name}, {what}, truth {truth}: blocks and events differ: {:?} vs {:?} \
                     bytes, first difference at {:?}; {} / {}; {} / {}",
                    by_blocks.0.len(),
                    by_events.0.len(),
                    by_blocks.0.iter().zip(&by_events.0).position(|(a, b)| a != b),
                    by_blocks.3,
                    by_events.3,
                    by_blocks.4,
                    by_events.4,
                );
            }
        }
    }
}
