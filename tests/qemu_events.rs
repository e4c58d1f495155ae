//! The QEMU plugin's stream mapped to tracer events (spec/qemu.md QE1-QE7, QE10), on streams
//! written here with the plugin's own writer: every class of instruction, REP strings, system
//! calls, the end of a run, and the streams that must be refused.

mod common;

use common::qemu::EventsOnly;
use ptemu::sources::qemu::wire::{DeathCause, DeathNote, FaultNote, FileMap, HandlerNote, NoteKind, Writer};
use ptemu::sources::qemu::{QemuEvents, Sideband, SYSCALL_ENTRY, SYSRET_FROM};
use ptemu::sources::EventSource;
use ptemu::tracer::{Event, ExecMode, FarKind};
use std::path::Path;
use std::sync::{Arc, Mutex};

const BASE: u64 = 0x40_0000;

/// A file holding `code` at offset 0, mapped at [`BASE`].
fn code_file(dir: &Path, code: &[u8]) -> FileMap {
    let path = dir.join("code.bin");
    std::fs::write(&path, code).unwrap();
    FileMap {
        start: BASE,
        end: BASE + 0x1000,
        offset: 0,
        major: 0,
        minor: 0,
        // QE5: the check reads the file only as the process mapped it (its inode).
        inode: std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap()),
        path: path.to_str().unwrap().into(),
    }
}

/// What a stream gave: its events, the sideband, and the instructions the source counted.
type Given = (Vec<Event>, Sideband, u64);

/// The events of a stream, or its error's text.
fn events(bytes: Vec<u8>) -> Result<Given, String> {
    let side = Arc::new(Mutex::new(Sideband::default()));
    let mut src = QemuEvents::new("prog", std::io::Cursor::new(bytes), side.clone());
    let mut out = Vec::new();
    loop {
        match src.next_events(&mut out) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(e.to_string()),
        }
    }
    let s = side.lock().unwrap().clone();
    Ok((out, s, src.stats().count("instructions")))
}

fn finish(w: &mut Writer, end: bool) -> Vec<u8> {
    if end {
        w.end();
    }
    let mut out = Vec::new();
    w.take(&mut |b| out.extend_from_slice(b));
    out
}

/// One block of instructions (each given as its bytes) at `BASE + at`, ids from `first`.
fn block(w: &mut Writer, at: u64, insns: &[&[u8]]) -> u64 {
    let mut distances = Vec::new();
    let mut code = Vec::new();
    for (k, i) in insns.iter().enumerate() {
        if k > 0 {
            distances.push(insns[k - 1].len() as u64);
        }
        code.extend_from_slice(i);
    }
    w.block(BASE + at, &distances, &code)
}

// The program the tests run, at BASE (offsets in comments):
//   0x00 mov rbx, rax          48 89 c3
//   0x03 je  0x10              74 0b
//   0x05 call 0x20             e8 16 00 00 00
//   0x0a jmp rax               ff e0
//   0x0c nop x4
//   0x10 syscall               0f 05
//   0x12 rep movsb             f3 a4
//   0x14 jmp 0x05              eb ef
//   0x16 nop x10
//   0x20 ret                   c3
//   0x21 call rax              ff d0
//   0x23 int 0x80              cd 80
//   0x25 syscall               0f 05
const PROGRAM: [u8; 0x27] = [
    0x48, 0x89, 0xc3, 0x74, 0x0b, 0xe8, 0x16, 0, 0, 0, 0xff, 0xe0, 0x90, 0x90, 0x90, 0x90, 0x0f, 0x05, 0xf3,
    0xa4, 0xeb, 0xef, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3, 0xff, 0xd0, 0xcd,
    0x80, 0x0f, 0x05,
];

/// Blocks as QEMU would cut the program: ids 0-3 (0x00..0x0a), 4-6 (0x10, 0x12, 0x14),
/// 7 (0x20), 8-9 (0x21, 0x23), 10 (0x05 on its own, reached by the jmp) and 11 (0x25).
fn translate(w: &mut Writer, map: &FileMap) {
    w.map(map);
    let p = &PROGRAM;
    assert_eq!(block(w, 0x00, &[&p[0..3], &p[3..5], &p[5..10], &p[10..12]]), 0);
    assert_eq!(
        block(w, 0x10, &[&p[0x10..0x12], &p[0x12..0x14], &p[0x14..0x16]]),
        4
    );
    assert_eq!(block(w, 0x20, &[&p[0x20..0x21]]), 7);
    assert_eq!(block(w, 0x21, &[&p[0x21..0x23], &p[0x23..0x25]]), 8);
    assert_eq!(block(w, 0x05, &[&p[5..10]]), 10);
    assert_eq!(block(w, 0x25, &[&p[0x25..0x27]]), 11);
}

/// The translated program, `ids` executed, the end record when `end`.
fn run(dir: &Path, ids: &[u64], end: bool) -> Result<Given, String> {
    let map = code_file(dir, &PROGRAM);
    let mut w = Writer::new();
    translate(&mut w, &map);
    for &id in ids {
        w.exec(id);
    }
    events(finish(&mut w, end))
}

fn far(kind: FarKind, from: u64, to: u64, cpl: u8) -> Event {
    Event::far(kind, from, to, cpl, ExecMode::Bits64)
}

fn a(o: u64) -> u64 {
    BASE + o
}

#[test]
fn qe2_qe3_every_class_of_instruction_becomes_its_event() {
    let dir = tempfile::tempdir().unwrap();
    // mov, je (taken), syscall, rep movsb (3 iterations), jmp 0x05, call 0x20, ret to 0x0a,
    // jmp rax to 0x21, call rax to 0x00, mov, je (not taken), call 0x20, ret to 0x23,
    // int 0x80, syscall (the last: exit).
    let ids = [0, 1, 4, 5, 5, 5, 6, 10, 7, 3, 8, 0, 1, 2, 7, 9, 11];
    let (ev, side, instructions) = run(dir.path(), &ids, true).unwrap();
    let want = vec![
        Event::Retire { ip: a(0), len: 3 },
        Event::CondBranch {
            ip: a(3),
            len: 2,
            target: a(0x10),
            taken: true,
        },
        far(FarKind::Syscall, a(0x10), SYSCALL_ENTRY, 0),
        far(FarKind::Sysret, SYSRET_FROM, a(0x12), 3),
        Event::Retire { ip: a(0x12), len: 2 },
        Event::Jump {
            ip: a(0x14),
            target: a(5),
        },
        Event::Call {
            ip: a(5),
            len: 5,
            target: a(0x20),
        },
        Event::Return {
            ip: a(0x20),
            target: a(0x0a),
        },
        Event::IndirectJump {
            ip: a(0x0a),
            target: a(0x21),
        },
        Event::IndirectCall {
            ip: a(0x21),
            len: 2,
            target: a(0),
        },
        Event::Retire { ip: a(0), len: 3 },
        Event::CondBranch {
            ip: a(3),
            len: 2,
            target: a(0x10),
            taken: false,
        },
        Event::Call {
            ip: a(5),
            len: 5,
            target: a(0x20),
        },
        Event::Return {
            ip: a(0x20),
            target: a(0x23),
        },
        far(
            FarKind::SoftwareInterrupt { vector: 0x80 },
            a(0x23),
            SYSCALL_ENTRY,
            0,
        ),
        far(FarKind::Iret, SYSRET_FROM, a(0x25), 3),
        far(FarKind::Syscall, a(0x25), SYSCALL_ENTRY, 0),
    ];
    assert_eq!(ev, want);
    assert!(side.ended);
    assert_eq!(side.executed, Some(ids.len() as u64));
    assert_eq!(instructions, 15, "17 executions, 3 of them one REP movsb");
    assert_eq!(side.maps.len(), 1);
}

/// The program mapped and translated with each instruction a block of its own (as
/// `qemu-x86_64 -singlestep` cuts it): indices 0-11 start at 0x00, 0x03, 0x05, 0x0a, 0x10, 0x12,
/// 0x14, 0x20, 0x21, 0x23, 0x05 (again, reached by the jmp) and 0x25.
fn one_block_each(w: &mut Writer, map: &FileMap) {
    let p = &PROGRAM;
    let starts = [
        0x00, 0x03, 0x05, 0x0a, 0x10, 0x12, 0x14, 0x20, 0x21, 0x23, 0x05, 0x25,
    ];
    let ends = [
        0x03, 0x05, 0x0a, 0x0c, 0x12, 0x14, 0x16, 0x21, 0x23, 0x25, 0x0a, 0x27,
    ];
    w.map(map);
    for (k, (&s, &e)) in starts.iter().zip(&ends).enumerate() {
        assert_eq!(block(w, s, &[&p[s as usize..e as usize]]), k as u64);
    }
}

/// QE1, QE13: the plugin sends executions as batches of block indices; read back they are the
/// executions the same blocks give as execution and run records, event for event. Each
/// instruction of the program is a block of its own here (as `qemu-x86_64 -singlestep` cuts
/// them), so the flow of `qe2_qe3_every_class_of_instruction_becomes_its_event` is a list of
/// whole blocks, and blocks translated one after another fold as runs do.
#[test]
fn qe13_batches_of_block_indices_give_the_events_runs_give() {
    let dir = tempfile::tempdir().unwrap();
    let map = code_file(dir.path(), &PROGRAM);
    let translated = |w: &mut Writer| one_block_each(w, &map);
    let ids = [0u32, 1, 4, 5, 5, 5, 6, 10, 7, 3, 8, 0, 1, 2, 7, 9, 11];
    let mut w = Writer::new();
    translated(&mut w);
    for &id in &ids[..3] {
        w.exec(id.into());
    }
    w.note(NoteKind::Syscall, 1, "");
    for &id in &ids[3..] {
        w.exec(id.into());
    }
    let runs = events(finish(&mut w, true)).unwrap();
    let mut w = Writer::new();
    translated(&mut w);
    w.exec_blocks(&ids[..3]);
    w.note(NoteKind::Syscall, 1, "");
    // The rest in two batches, the second of one block.
    w.exec_blocks(&ids[3..16]);
    w.exec_blocks(&ids[16..]);
    w.end_with(ids.len() as u64);
    let batches = events(finish(&mut w, false)).unwrap();
    assert_eq!(batches.0, runs.0);
    assert_eq!(batches.1.executed, Some(17));
    assert_eq!(format!("{:?}", batches.1), format!("{:?}", runs.1));
    assert_eq!((batches.2, runs.2), (15, 15));
    // An index no block had yet is refused at its own byte (QE1).
    let mut w = Writer::new();
    translated(&mut w);
    w.exec_blocks(&[0, 12]);
    let bytes = finish(&mut w, false);
    let at = bytes.len() - 4;
    let e = events(bytes).unwrap_err();
    assert!(
        e.contains(&format!("byte offset {at}")) && e.contains("block 12 executed before it was translated"),
        "{e}"
    );
    // The offset is named as the plugin's stream's, not the program file's (issue 54 §10).
    assert!(
        e.starts_with(&format!(
            "prog (the plugin's stream of its run): byte offset {at}:"
        )),
        "{e}"
    );
}

#[test]
fn qe4_a_rep_string_instruction_is_one_instruction() {
    let dir = tempfile::tempdir().unwrap();
    for iterations in [1, 2, 50] {
        let mut ids = vec![4];
        ids.extend(std::iter::repeat_n(5, iterations));
        ids.push(6);
        ids.push(10);
        let (ev, ..) = run(dir.path(), &ids, true).unwrap();
        let reps = ev
            .iter()
            .filter(|e| matches!(e, Event::Retire { ip, .. } if *ip == a(0x12)))
            .count();
        assert_eq!(reps, 1, "{iterations} iterations: {ev:?}");
    }
}

#[test]
fn qe6_a_system_call_leaves_and_re_enters_tracing() {
    let dir = tempfile::tempdir().unwrap();
    let (ev, ..) = run(dir.path(), &[4, 5, 6], true).unwrap();
    assert_eq!(
        &ev[..2],
        &[
            far(FarKind::Syscall, a(0x10), SYSCALL_ENTRY, 0),
            far(FarKind::Sysret, SYSRET_FROM, a(0x12), 3)
        ]
    );
    // A system call that does not come back to the next instruction is not explained.
    let e = run(dir.path(), &[4, 7], true).unwrap_err();
    assert!(
        e.contains("does not go") && e.contains("no signal handler"),
        "{e}"
    );
}

#[test]
fn qe7_qe13_the_last_instruction_is_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    // Ends after a SYSCALL began: exit (or execve): the transfer into the kernel, counted.
    let (ev, _, instructions) = run(dir.path(), &[0, 1, 4], true).unwrap();
    assert_eq!(ev.last(), Some(&far(FarKind::Syscall, a(0x10), SYSCALL_ENTRY, 0)));
    assert_eq!(instructions, 3);
    // Killed inside a SYSCALL (no end record, the plugin said the call began, no return
    // after it): traced to its end.
    let map = code_file(dir.path(), &PROGRAM);
    let mut w = Writer::new();
    translate(&mut w, &map);
    for id in [0, 1, 4] {
        w.exec(id);
    }
    w.note(NoteKind::Syscall, 62, "");
    let (ev, side, _) = events(finish(&mut w, false)).unwrap();
    assert_eq!(ev.last(), Some(&far(FarKind::Syscall, a(0x10), SYSCALL_ENTRY, 0)));
    assert!(!side.ended);
    // QE13: the block ending at the SYSCALL was told when it began, and no call began: a fault
    // earlier in the block killed the program, so what ran last is unknown: refused.
    let e = run(dir.path(), &[0, 1, 4], false).unwrap_err();
    assert!(e.contains("killed outside a system call"), "{e}");
    // Killed elsewhere: what it ran last may not have reached the stream: refused.
    let e = run(dir.path(), &[0, 1, 4, 5, 6, 10, 7, 3, 8, 0], false).unwrap_err();
    assert!(e.contains("killed outside a system call"), "{e}");
    // The SYSCALL returned, then the stream ended: the program ran on, unseen: refused.
    let map = code_file(dir.path(), &PROGRAM);
    let mut w = Writer::new();
    translate(&mut w, &map);
    for id in [0, 1, 4] {
        w.exec(id);
    }
    w.note(NoteKind::Returned, 1, "");
    let e = events(finish(&mut w, false)).unwrap_err();
    assert!(e.contains("killed outside a system call"), "{e}");
}

#[test]
fn qe1_a_stream_that_breaks_off_or_lies_is_an_error_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let map = code_file(dir.path(), &PROGRAM);
    let mut w = Writer::new();
    translate(&mut w, &map);
    w.exec(0);
    w.exec(1);
    let mut bytes = finish(&mut w, true);
    // The end record's count says 2; make it 3.
    let n = bytes.len();
    bytes[n - 1] = 3;
    let e = events(bytes.clone()).unwrap_err();
    assert!(e.contains("counted 3 executions, the stream holds 2"), "{e}");
    assert!(e.contains("byte offset"), "{e}");
    // Cut inside the end record.
    let e = events(bytes[..n - 1].to_vec()).unwrap_err();
    assert!(
        e.contains("ends inside a record") && e.contains(&format!("byte offset {}", n - 2)),
        "{e}"
    );
    // Not a plugin stream at all.
    let e = events(b"hello, world".to_vec()).unwrap_err();
    assert!(e.contains("byte offset 0") && e.contains("magic"), "{e}");
    assert!(e.starts_with("prog (the plugin's stream of its run): "), "{e}");
}

#[test]
fn qe5_qe17_code_that_is_not_the_files_is_refused_and_code_no_file_holds_is_written_code() {
    let dir = tempfile::tempdir().unwrap();
    let mut map = code_file(dir.path(), &PROGRAM);
    // The file holds the program with one byte changed: what QEMU ran is not the file.
    let mut changed = PROGRAM;
    changed[0x21] = 0x90;
    std::fs::write(&map.path, changed).unwrap();
    let mut w = Writer::new();
    translate(&mut w, &map);
    let e = events(finish(&mut w, true)).unwrap_err();
    assert!(e.contains("is not what") && e.contains("QE17"), "{e}");
    // Code outside every mapping the plugin reported is written code, a version a page: the
    // program rewrote 0x20 (a RET, then a NOP) after running it.
    map.start = BASE + 0x1000;
    map.end = BASE + 0x2000;
    std::fs::write(&map.path, PROGRAM).unwrap();
    let mut w = Writer::new();
    translate(&mut w, &map);
    w.exec_block(0, 2);
    w.exec_block(4, 1);
    w.note(NoteKind::Syscall, 1, "");
    w.exec_block(5, 2);
    w.exec_block(10, 1);
    w.exec_block(7, 1);
    assert_eq!(block(&mut w, 0x20, &[&[0x90], &[0xff, 0xd0]]), 12);
    w.exec_block(12, 2);
    let (_, side, _) = events(finish(&mut w, true)).unwrap();
    let pages: Vec<(u64, u32)> = side.code.iter().map(|c| (c.page, c.version)).collect();
    assert_eq!(pages, [(BASE, 0), (BASE, 1)]);
    assert_eq!(side.code[0].bytes[0x20], 0xc3);
    assert_eq!(side.code[1].bytes[0x20], 0x90);
    // Version 0 last ran before version 1 first did.
    assert!(
        side.code[0].last.unwrap() < side.code[1].first.unwrap(),
        "{side:?}"
    );
    // A plugin before QE17 noted anonymous code: refused as it was.
    let mut w = Writer::new();
    w.note(NoteKind::AnonymousCode, 0x7000_0000, "anonymous memory");
    let e = events(finish(&mut w, true)).unwrap_err();
    assert!(e.contains("0x70000000") && e.contains("no file holds"), "{e}");
}

/// The program with a handler for signal `sig` at 0x20 (its RET goes to the "restorer" at 0x25,
/// whose SYSCALL is an rt_sigreturn: the plugin's note says 15), then `ids` executed, each
/// `(id, Some(n))` followed by the note that system call `n` began.
fn with_handler(dir: &Path, sig: &str, ids: &[(u64, Option<u64>)]) -> Result<Given, String> {
    let map = code_file(dir, &PROGRAM);
    let mut w = Writer::new();
    translate(&mut w, &map);
    w.note(NoteKind::Handler, a(0x20), sig);
    for &(id, call) in ids {
        w.exec(id);
        if let Some(n) = call {
            w.note(NoteKind::Syscall, n, "");
        }
    }
    events(finish(&mut w, true))
}

fn interrupt_at(x: u64) -> Event {
    far(FarKind::Interrupt { vector: 0xfd }, x, SYSCALL_ENTRY, 0)
}

#[test]
fn qe16_a_signal_is_an_interrupt_where_the_thread_was_and_the_handler_is_traced() {
    let dir = tempfile::tempdir().unwrap();
    let enter = far(FarKind::Iret, SYSRET_FROM, a(0x20), 3);
    let sigreturn = [far(FarKind::Syscall, a(0x25), SYSCALL_ENTRY, 0)];
    // After a plain instruction: the interrupt is at the next one, at once.
    let (ev, ..) = with_handler(
        dir.path(),
        "10",
        &[(0, None), (7, None), (11, Some(15)), (1, None)],
    )
    .unwrap();
    assert_eq!(
        ev[..5],
        [
            Event::Retire { ip: a(0), len: 3 },
            interrupt_at(a(3)),
            enter,
            Event::Return {
                ip: a(0x20),
                target: a(0x25)
            },
            sigreturn[0],
        ]
    );
    assert_eq!(ev[5], far(FarKind::Sysret, SYSRET_FROM, a(3), 3));
    // After a conditional branch: where it went is the address rt_sigreturn comes back to; the
    // branch and the interrupt go in before the handler's events.
    let (ev, ..) = with_handler(
        dir.path(),
        "10",
        &[(0, None), (1, None), (7, None), (11, Some(15)), (4, None)],
    )
    .unwrap();
    assert_eq!(
        ev[..5],
        [
            Event::Retire { ip: a(0), len: 3 },
            Event::CondBranch {
                ip: a(3),
                len: 2,
                target: a(0x10),
                taken: true
            },
            interrupt_at(a(0x10)),
            enter,
            Event::Return {
                ip: a(0x20),
                target: a(0x25)
            },
        ]
    );
    // A handler that comes back where the branch cannot go changed the context: refused.
    let e = with_handler(
        dir.path(),
        "10",
        &[(0, None), (1, None), (7, None), (11, Some(15)), (5, None)],
    )
    .unwrap_err();
    assert!(e.contains("changed where the program resumes"), "{e}");
    // A system call whose way out meets the signal: tracing comes back at the handler.
    let (ev, ..) = with_handler(
        dir.path(),
        "10",
        &[(0, None), (1, None), (4, Some(62)), (7, None)],
    )
    .unwrap();
    assert_eq!(ev[3], far(FarKind::Sysret, SYSRET_FROM, a(0x20), 3), "{ev:?}");
    // The handler of a fault: the block may have stopped part-way: refused.
    let e = with_handler(dir.path(), "11", &[(0, None), (7, None)]).unwrap_err();
    assert!(e.contains("an instruction raises"), "{e}");
    // After a RET the handler runs: the signal came after the RET, which went where the
    // handler's rt_sigreturn comes back to (0x0a, after the CALL).
    let (ev, ..) = with_handler(
        dir.path(),
        "10",
        &[
            (0, None),
            (1, None),
            (2, None),
            (7, None),
            (7, None),
            (11, Some(15)),
            (3, None),
        ],
    )
    .unwrap();
    assert_eq!(
        ev[3..6],
        [
            Event::Return {
                ip: a(0x20),
                target: a(0x0a)
            },
            interrupt_at(a(0x0a)),
            enter
        ],
        "{ev:?}"
    );
    // After an indirect JMP, a signal only once the handler returns to its restorer (0x25):
    // a JMP into the handler's function (a PLT stub) looks the same until then.
    let jmp = [
        (10, None),
        (7, None),
        (3, None),
        (7, None),
        (11, Some(15)),
        (4, None),
    ];
    let (ev, ..) = with_handler(dir.path(), &format!("10 {:#x}", a(0x25)), &jmp).unwrap();
    assert_eq!(
        ev[2..5],
        [
            Event::IndirectJump {
                ip: a(0x0a),
                target: a(0x10)
            },
            interrupt_at(a(0x10)),
            enter
        ],
        "{ev:?}"
    );
    let e = with_handler(dir.path(), "10", &jmp).unwrap_err();
    assert!(e.contains("indirect JMP") && e.contains("QE16"), "{e}");
    // A direct CALL to the handler's address is the CALL.
    let (ev, ..) = with_handler(
        dir.path(),
        "10",
        &[(0, None), (1, None), (2, None), (7, None), (8, None)],
    )
    .unwrap();
    assert!(
        ev.contains(&Event::Return {
            ip: a(0x20),
            target: a(0x21)
        }),
        "{ev:?}"
    );
    // The handler of a fault, reached after a RET: refused as after any instruction.
    let e = with_handler(
        dir.path(),
        "11",
        &[(0, None), (1, None), (2, None), (7, None), (7, None)],
    )
    .unwrap_err();
    assert!(e.contains("an instruction raises"), "{e}");
    // A SYSCALL the plugin did not say began (a fault before it in its block) that is followed
    // by a handler: not a signal on its way out.
    let e = with_handler(dir.path(), "10", &[(0, None), (1, None), (4, None), (7, None)]).unwrap_err();
    assert!(e.contains("does not go"), "{e}");
    // A transfer no instruction and no handler explains stays an error.
    let e = run(dir.path(), &[0, 7], true).unwrap_err();
    assert!(e.contains("no signal handler is there"), "{e}");
}

/// A stream of two threads, 100 (the main one) and 101, interleaved in chunks as the plugin
/// sends them: the blocks behind a thread record of 0.
fn two_threads(dir: &Path, count_wrong: bool) -> Vec<u8> {
    let map = code_file(dir, &PROGRAM);
    let mut w = Writer::new();
    w.thread(0);
    translate(&mut w, &map);
    w.thread(100);
    w.exec_block(0, 2);
    w.note(NoteKind::Thread, 101, "");
    w.thread(101);
    w.exec_block(7, 1);
    w.exec_block(8, 1);
    w.thread(100);
    w.exec_block(4, 1);
    w.note(NoteKind::Syscall, 231, "");
    w.note(NoteKind::ThreadEnd, 3, "");
    w.thread(101);
    w.exec_block(11, 1);
    w.note(NoteKind::Syscall, 60, "");
    w.note(NoteKind::ThreadEnd, if count_wrong { 4 } else { 3 }, "");
    w.thread(0);
    w.end_with(6);
    finish(&mut w, false)
}

#[test]
fn qe15_each_thread_is_read_from_its_own_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let stream = two_threads(dir.path(), false);
    // The main thread's source: its own instructions, the other thread listed with its parent,
    // and the other thread's records (and every block) put aside.
    let side = Arc::new(Mutex::new(Sideband::default()));
    let spool = std::sync::Arc::new(Mutex::new(Vec::new()));
    struct Shared(std::sync::Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut src = QemuEvents::new("prog", std::io::Cursor::new(stream.clone()), side.clone())
        .spool_others_to(Box::new(Shared(spool.clone())));
    let mut main = Vec::new();
    while src.next_events(&mut main).unwrap() {}
    let ips: Vec<u64> = main.iter().filter_map(|e| e.ip()).collect();
    assert_eq!(ips, [a(0), a(3), a(0x10)], "{main:?}");
    let s = side.lock().unwrap().clone();
    assert_eq!(s.tid, Some(100));
    assert_eq!(
        s.threads,
        [ptemu::sources::qemu::ThreadSeen {
            tid: 101,
            parent: Some(100)
        }]
    );
    // Thread 101, from the spool and from the whole stream alike.
    let spooled = spool.lock().unwrap().clone();
    assert!(spooled.len() < stream.len());
    for bytes in [spooled, stream] {
        let side = Arc::new(Mutex::new(Sideband::default()));
        let mut src = QemuEvents::for_thread("prog", std::io::Cursor::new(bytes), side, 101);
        let mut ev = Vec::new();
        while src.next_events(&mut ev).unwrap() {}
        let ips: Vec<u64> = ev.iter().filter_map(|e| e.ip()).collect();
        assert_eq!(ips, [a(0x20), a(0x21), a(0x25)], "{ev:?}");
    }
    // A thread's count that is not what its chunks hold is an error.
    let bytes = two_threads(dir.path(), true);
    let side = Arc::new(Mutex::new(Sideband::default()));
    let mut src = QemuEvents::for_thread("prog", std::io::Cursor::new(bytes), side, 101);
    let mut ev = Vec::new();
    let e = loop {
        match src.next_events(&mut ev) {
            Ok(true) => {}
            Ok(false) => panic!("accepted"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(e.contains("4 executions of thread 101"), "{e}");
}

#[test]
fn qe13_qe14_a_block_runs_as_one_and_an_instruction_into_the_next_page_is_the_next_blocks() {
    let dir = tempfile::tempdir().unwrap();
    // 0xff8 mov rbx, rax; 0xffb mov qword [rbp-0x170], 0 (11 bytes, into the next page);
    // 0x1006 syscall. QEMU 7.2 lists the second mov in the first block, but runs it as the first
    // instruction of the next one, and counts it in both blocks' executions.
    let mut code = vec![0x90u8; 0x2000];
    let movs: &[u8] = &[0x48, 0x89, 0xc3];
    let wide: &[u8] = &[0x48, 0xc7, 0x85, 0x90, 0xfe, 0xff, 0xff, 0, 0, 0, 0];
    code[0xff8..0xffb].copy_from_slice(movs);
    code[0xffb..0x1006].copy_from_slice(wide);
    code[0x1006..0x1008].copy_from_slice(&[0x0f, 0x05]);
    let mut map = code_file(dir.path(), &code);
    map.end = BASE + 0x2000;
    let mut w = Writer::new();
    w.map(&map);
    assert_eq!(block(&mut w, 0xff8, &[movs, wide]), 0);
    assert_eq!(block(&mut w, 0xffb, &[wide, &[0x0f, 0x05]]), 2);
    w.exec_block(0, 2);
    w.exec_block(2, 2);
    let (ev, side, instructions) = events(finish(&mut w, true)).unwrap();
    assert_eq!(
        ev[..2],
        [
            Event::Retire { ip: a(0xff8), len: 3 },
            Event::Retire {
                ip: a(0xffb),
                len: 11
            }
        ]
    );
    assert_eq!(
        ev.last(),
        Some(&far(FarKind::Syscall, a(0x1006), SYSCALL_ENTRY, 0))
    );
    assert_eq!(instructions, 3, "{ev:?}");
    assert_eq!(side.executed, Some(4), "the plugin counts the instruction twice");
    // A block's last instruction that stays in its page is its own.
    let mut w = Writer::new();
    w.map(&map);
    assert_eq!(block(&mut w, 0xff8, &[movs]), 0);
    assert_eq!(block(&mut w, 0xffb, &[wide, &[0x0f, 0x05]]), 1);
    w.exec_block(0, 1);
    w.exec_block(1, 2);
    let (_, _, instructions) = events(finish(&mut w, true)).unwrap();
    assert_eq!(instructions, 3);
}

/// QE15: a failure to put the other threads' records aside names the OS's error.
#[test]
fn qe15_writing_the_other_threads_records_aside_names_the_os_error() {
    let dir = tempfile::tempdir().unwrap();
    let stream = two_threads(dir.path(), false);
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
    }
    let side = Arc::new(Mutex::new(Sideband::default()));
    let mut src = QemuEvents::new("prog", std::io::Cursor::new(stream), side).spool_others_to(Box::new(Full));
    let mut ev = Vec::new();
    let e = loop {
        match src.next_events(&mut ev) {
            Ok(true) => {}
            Ok(false) => panic!("a spool that cannot be written was accepted"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        e.contains("records aside") && e.contains("No space left on device"),
        "{e}"
    );
}

/// QE5, QE19: the file a mapping record names is read only as the process mapped it: a
/// regular file with the record's inode (and, run as root, one every user may read), opened
/// without following a symbolic link or blocking. A file of another inode, a symbolic link and a FIFO are not read at all: no
/// comparison is made (the code that differs from them is not refused), and the run never
/// waits on them.
#[test]
fn qe5_qe19_a_mapping_is_read_only_as_a_regular_file_as_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let mut changed = PROGRAM;
    changed[0x21] = 0x90;
    let ran = |map: &FileMap| {
        let mut w = Writer::new();
        translate(&mut w, map);
        let bytes = finish(&mut w, true);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(events(bytes).map(|_| ()));
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the run waited on the file a mapping names")
    };
    // As mapped, a file whose bytes differ is compared and refused (QE5) ...
    let map = code_file(dir.path(), &PROGRAM);
    std::fs::write(&map.path, changed).unwrap();
    assert!(ran(&map).unwrap_err().contains("is not what"));
    // ... but not if its inode is not the one the process mapped.
    let other = FileMap {
        inode: map.inode + 1,
        ..map.clone()
    };
    assert_eq!(ran(&other), Ok(()));
    // A symbolic link is not followed, even to the file the process mapped.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&map.path, &link).unwrap();
    let linked = FileMap {
        path: link.to_str().unwrap().into(),
        ..map.clone()
    };
    assert_eq!(ran(&linked), Ok(()));
    // Run as root, a file not every user may read is not read (a traced process that dropped
    // its privileges could name it).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::set_permissions(&map.path, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
        assert_eq!(ran(&map), Ok(()));
        std::fs::set_permissions(&map.path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert!(ran(&map).unwrap_err().contains("is not what"));
    }
    // A FIFO (no writer: opening it to read would block) is not opened to wait on.
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let piped = FileMap {
        path: fifo.to_str().unwrap().into(),
        inode: std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&fifo).unwrap()),
        ..map.clone()
    };
    assert_eq!(ran(&piped), Ok(()));
}

// QE21's program, at BASE: one block of plain instructions that ends in a JMP back, and a
// handler:
//   0x00 mov rbx, rax          48 89 c3
//   0x03 mov eax, [rbx]        8b 03
//   0x05 add eax, 1            83 c0 01
//   0x08 jmp 0x00              eb f6
//   0x0a nop x6
//   0x10 nop                   90       (the handler)
//   0x11 ret                   c3
const FAULTING: [u8; 0x12] = [
    0x48, 0x89, 0xc3, 0x8b, 0x03, 0x83, 0xc0, 0x01, 0xeb, 0xf6, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
    0xc3,
];

/// A stream of [`FAULTING`] translated: its block (index 0, ids 0-3) and its handler's (index
/// 1, ids 4-5).
fn faulting_program(dir: &Path) -> Writer {
    let map = code_file(dir, &FAULTING);
    let mut w = Writer::new();
    w.map(&map);
    let p = &FAULTING;
    assert_eq!(block(&mut w, 0x00, &[&p[0..3], &p[3..5], &p[5..8], &p[8..10]]), 0);
    assert_eq!(block(&mut w, 0x10, &[&p[0x10..0x11], &p[0x11..0x12]]), 4);
    w
}

/// The events of one run of [`FAULTING`]'s block, to its JMP back.
fn faulting_run() -> [Event; 4] {
    [
        Event::Retire { ip: a(0), len: 3 },
        Event::Retire { ip: a(3), len: 2 },
        Event::Retire { ip: a(5), len: 3 },
        Event::Jump {
            ip: a(8),
            target: a(0),
        },
    ]
}

/// [`FAULTING`]'s block run `loops` times, then a fault's note naming `rip` (with `signal` and
/// `code`: the frame's siginfo, both 0 for a handler without SA_SIGINFO), then its handler.
fn faulted(dir: &Path, loops: usize, rip: u64, signal: u32, code: i32) -> Result<Given, String> {
    let mut w = faulting_program(dir);
    w.note(NoteKind::Handler, a(0x10), "11 0x0");
    for _ in 0..loops {
        w.exec_block(0, 4);
    }
    w.note(
        NoteKind::Fault,
        rip,
        &format!("{signal} {code} 0x0 {:#x} -", a(0x10)),
    );
    w.exec_block(4, 2);
    events(finish(&mut w, true))
}

/// QE21: the faulting instruction does not retire; the fault is an asynchronous transfer
/// from it (TIP3, PGD2: FUP there, then TIP.PGD), the handler the way back in (PGE1).
#[test]
fn qe21_a_handled_fault_stops_its_block_at_the_faulting_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let page_fault = FarKind::Exception {
        vector: 14,
        cr2: Some(0),
    };
    let enter = far(FarKind::Iret, SYSRET_FROM, a(0x10), 3);
    // The load at 0x03 faulted in the block's second run: the instructions before it ran, the
    // ones after it did not; the fault leaves user mode at it (FUP 0x03, TIP.PGD) and tracing
    // comes back at the handler.
    let (ev, _, n) = faulted(dir.path(), 2, a(3), 11, 1).unwrap();
    let first_run = faulting_run();
    let mut want = first_run.to_vec();
    want.extend([
        Event::Retire { ip: a(0), len: 3 },
        far(page_fault, a(3), SYSCALL_ENTRY, 0),
        enter,
        Event::Retire { ip: a(0x10), len: 1 },
        // The stream ends at the handler's RET, which never showed where it went (QE7).
        far(FarKind::Interrupt { vector: 0 }, a(0x11), SYSCALL_ENTRY, 0),
    ]);
    assert_eq!(ev, want);
    assert_eq!(n, 4 + 1 + 1);
    // The block's first instruction and its last (the pending one) can fault too.
    let (ev, ..) = faulted(dir.path(), 1, a(0), 11, 1).unwrap();
    assert_eq!(ev[..2], [far(page_fault, a(0), SYSCALL_ENTRY, 0), enter]);
    let (ev, ..) = faulted(dir.path(), 1, a(8), 11, 1).unwrap();
    assert_eq!(ev[..3], first_run[..3]);
    assert_eq!(ev[3..5], [far(page_fault, a(8), SYSCALL_ENTRY, 0), enter]);
    // SIGSEGV with SI_KERNEL is a general protection fault; SIGFPE a divide error.
    let (ev, ..) = faulted(dir.path(), 1, a(5), 11, 0x80).unwrap();
    let gp = FarKind::Exception {
        vector: 13,
        cr2: None,
    };
    assert_eq!(ev[2], far(gp, a(5), SYSCALL_ENTRY, 0));
    // A handler without SA_SIGINFO: no si_code to tell a fault from a signal another process
    // sent after the block ran to its end; taken as the fault where the block's last
    // instruction could not have gone: the JMP goes to 0x00, so there it is refused.
    let (ev, ..) = faulted(dir.path(), 1, a(3), 0, 0).unwrap();
    assert_eq!(ev[1], far(page_fault, a(3), SYSCALL_ENTRY, 0));
    let e = faulted(dir.path(), 1, a(0), 0, 0).unwrap_err();
    assert!(e.contains("an instruction raises") && e.contains("QE16"), "{e}");
    // A signal another process sent (si_code <= 0), or a frame that names no instruction of the
    // block: QE16 refuses the handler.
    let e = faulted(dir.path(), 1, a(3), 11, 0).unwrap_err();
    assert!(e.contains("an instruction raises"), "{e}");
    let e = faulted(dir.path(), 1, a(0x0a), 11, 1).unwrap_err();
    assert!(e.contains("an instruction raises"), "{e}");
}

/// [`FAULTING`]'s block run once, then the plugin's last note for the thread: `kind`, RIP `rip`
/// and `text` (the signal, the block, the host fault), no end record (the process died, QE22).
fn died(dir: &Path, kind: NoteKind, rip: u64, text: &str) -> Result<Given, String> {
    let mut w = faulting_program(dir);
    w.exec_block(0, 4);
    w.note(kind, rip, text);
    events(finish(&mut w, false))
}

#[test]
fn qe22_the_last_note_ends_the_trace_where_the_thread_was() {
    let dir = tempfile::tempdir().unwrap();
    let once = faulting_run();
    let with = |tail: &[Event]| -> Vec<Event> { once.iter().chain(tail).copied().collect() };
    let pf = |cr2| FarKind::Exception {
        vector: 14,
        cr2: Some(cr2),
    };
    // A load through NULL in the middle of the block, which ran again: the instructions before it
    // retire, it does not, and the #PF (the host fault's address as CR2) leaves user mode at it.
    let (ev, side, n) = died(dir.path(), NoteKind::Killed, a(3), "11 0 1 0x10").unwrap();
    assert_eq!(
        ev,
        with(&[
            Event::Retire { ip: a(0), len: 3 },
            far(pf(0x10), a(3), SYSCALL_ENTRY, 0)
        ])
    );
    assert_eq!((side.killed, n), (Some((11, a(3))), 5));
    // A division by zero at the third: #DE.
    let (ev, ..) = died(dir.path(), NoteKind::Killed, a(5), "8 0 - -").unwrap();
    let de = FarKind::Exception { vector: 0, cr2: None };
    assert_eq!(
        ev,
        with(&[
            Event::Retire { ip: a(0), len: 3 },
            Event::Retire { ip: a(3), len: 2 },
            far(de, a(5), SYSCALL_ENTRY, 0)
        ])
    );
    // A SIGSEGV at the block's first instruction, where its JMP also goes: a host fault in the
    // block says it faulted there; without one a signal another process sent after the block
    // ran looks the same: refused.
    let (ev, ..) = died(dir.path(), NoteKind::Killed, a(0), "11 0 2 0x0").unwrap();
    assert_eq!(ev, with(&[far(pf(0), a(0), SYSCALL_ENTRY, 0)]));
    let e = died(dir.path(), NoteKind::Killed, a(0), "11 0 - -").unwrap_err();
    assert!(e.contains("is not known (QE22)"), "{e}");
    // The same signal noted as sent to the thread (`si_code` <= 0) during the block (0
    // instructions begun since) or as its callback ran (its 4): no fault, the block ran to its
    // end and went there, an interrupt before it.
    for since in ["0", "4"] {
        let (ev, side, _) = died(dir.path(), NoteKind::Killed, a(0), &format!("11 0 sent {since}")).unwrap();
        let mut want = with(&once);
        want.push(far(FarKind::Interrupt { vector: 0xfd }, a(0), SYSCALL_ENTRY, 0));
        assert_eq!(ev, want, "sent {since}");
        assert_eq!(side.killed, Some((11, a(0))));
    }
    // Sent before an earlier block: it tells nothing of this one; refused.
    let e = died(dir.path(), NoteKind::Killed, a(0), "11 0 sent 8").unwrap_err();
    assert!(e.contains("is not known (QE22)"), "{e}");
    // Sent, yet RIP inside the block where only a fault stops it: refused.
    let e = died(dir.path(), NoteKind::Killed, a(5), "11 0 sent 0").unwrap_err();
    assert!(e.contains("where no fault stopped it"), "{e}");
    // A thread stopped by the death, at the block's start: the block ran to its end and went
    // there; an interrupt (vector 0xfd) leaves user mode before it.
    let (ev, side, _) = died(dir.path(), NoteKind::Stopped, a(0), "11 0 - -").unwrap();
    let irq = FarKind::Interrupt { vector: 0xfd };
    let mut want = with(&once);
    want.push(far(irq, a(0), SYSCALL_ENTRY, 0));
    assert_eq!(ev, want);
    assert_eq!(side.killed, None);
    // Stopped inside a block, which only a fault does: refused.
    let e = died(dir.path(), NoteKind::Stopped, a(5), "11 0 - -").unwrap_err();
    assert!(e.contains("where no fault stopped it"), "{e}");
    // A note that names no block, or says nothing readable: refused with its offset.
    let e = died(dir.path(), NoteKind::Killed, a(3), "11 9 - -").unwrap_err();
    assert!(e.contains("block 9, which was never translated"), "{e}");
    let e = died(dir.path(), NoteKind::Killed, a(3), "eleven").unwrap_err();
    assert!(e.contains("byte offset") && e.contains("\"eleven\""), "{e}");
}

/// The trace of `stream` (its bytes and the tracer's counts), read as blocks (`next_steps`:
/// chains of whole executions where the reader may, QE13, BLK5) or as events only.
fn traced(stream: &[u8], blocks: bool) -> Result<(Vec<u8>, String), String> {
    use ptemu::simulate::{self, Options};
    use ptemu::sources::Format;
    let side = Arc::new(Mutex::new(Sideband::default()));
    let src = QemuEvents::new("prog", std::io::Cursor::new(stream.to_vec()), side);
    let source: Box<dyn EventSource + Send> = if blocks {
        Box::new(src)
    } else {
        Box::new(EventsOnly(src))
    };
    let opts = Options::new(Format::Qemu, simulate::default_layout());
    let (outcome, bytes) = simulate::run_source(
        &opts,
        "prog",
        source,
        Vec::new(),
        None,
        ptemu::event_log::EventLog::new(16),
        &mut |_| {},
    )
    .map_err(|e| e.to_string())?;
    Ok((bytes, format!("{:?} {:?}", outcome.tracer, outcome.source)))
}

/// QE13, QE16, BLK5: the reader's chain of whole executions takes an execution only when its
/// successor is one its block can go to, whole address against whole address: a signal's
/// handler entered after a conditional branch, at an address each of whose bits is the bit of
/// the branch's target or of its fall-through (`je` at 0x03 goes to 0x10 or 0x05; the handler
/// is at 0x14), is the signal, as the per-instruction path says, not a step of the chain (the
/// tracer would refuse the step: a successor the block cannot go to).
#[test]
fn qe13_qe16_blk5_a_chain_stops_at_a_successor_its_block_cannot_go_to() {
    let dir = tempfile::tempdir().unwrap();
    let map = code_file(dir.path(), &PROGRAM);
    let mut w = Writer::new();
    one_block_each(&mut w, &map);
    w.note(NoteKind::Handler, a(0x14), "10");
    // mov, je (taken, to 0x10), then signal 10: the handler at 0x14 jumps to 0x05, calls 0x20,
    // returns to 0x0a, jumps (rax) to 0x25, whose rt_sigreturn comes back to 0x10, where the
    // je went; then the syscall there and the rep movsb after it.
    w.exec_blocks(&[0, 1, 6, 10, 7, 3, 11]);
    w.note(NoteKind::Syscall, 15, "");
    w.exec_blocks(&[4]);
    w.note(NoteKind::Syscall, 1, "");
    w.exec_blocks(&[5]);
    w.end_with(9);
    let stream = finish(&mut w, false);
    // The per-instruction path sees the signal after the je, where it went.
    let (ev, ..) = events(stream.clone()).unwrap();
    assert!(ev.contains(&interrupt_at(a(0x10))), "{ev:?}");
    let reference = traced(&stream, false).unwrap();
    let chained = traced(&stream, true).unwrap();
    assert_eq!(chained.1, reference.1, "the tracer's and the source's counts");
    assert!(chained.0 == reference.0, "the trace bytes differ");
}

/// QE22: every death note the plugin writes reads back as itself; a malformed one does not
/// read.
#[test]
fn qe22_death_notes_read_back_as_written() {
    for cause in [
        DeathCause::Fault { code: 1, addr: 0 },
        DeathCause::Fault {
            code: 0x80,
            addr: u64::MAX,
        },
        DeathCause::Sent(0),
        DeathCause::Sent(17),
        DeathCause::Unknown,
    ] {
        let n = DeathNote {
            signo: 11,
            block: 4_000_000_000,
            cause,
        };
        assert_eq!(DeathNote::parse(&n.text()), Some(n), "{}", n.text());
    }
    assert_eq!(
        DeathNote::parse("11 7 - -").map(|n| n.cause),
        Some(DeathCause::Unknown)
    );
    for bad in ["", "11", "11 7", "11 7 -", "x 7 - -", "11 7 sent x", "11 7 1 0xg"] {
        assert_eq!(DeathNote::parse(bad), None, "{bad:?}");
    }
}

/// QE21: a fault note reads back as written, BELOW known or not.
#[test]
fn qe21_fault_notes_read_back_as_written() {
    for below in [None, Some(0), Some(0x7fff_1234)] {
        let n = FaultNote {
            signo: 11,
            code: -6,
            addr: 0x10,
            handler: 0x40_1000,
            below,
        };
        assert_eq!(FaultNote::parse(&n.text()), Some(n), "{}", n.text());
    }
    assert_eq!(FaultNote::parse("11 1 0x10"), None);
    assert_eq!(FaultNote::parse("11 1 0x10 0x20").map(|n| n.below), Some(None));
}

/// QE16: a handler note's words read back; a missing or malformed word is `None`.
#[test]
fn qe16_handler_notes_read_back_as_written() {
    let n = HandlerNote {
        signo: 10,
        restorer: 0x40_2000,
    };
    assert_eq!(HandlerNote::parse(&n.text()), (Some(10), Some(0x40_2000)));
    assert_eq!(HandlerNote::parse("10"), (Some(10), None));
    assert_eq!(HandlerNote::parse("x 0x1"), (None, Some(1)));
}
