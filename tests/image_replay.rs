//! Code-image synthesis (`spec/image.md`): the encodings, the conflicts, and the full replay of
//! Penn traces through ptemu's tracer and libipt's instruction-flow decoder over the image.

mod common;

use common::insn::{self, expected_pcs, macro_ops, Flow, IEvent};
use common::query::Timing;
use common::trace::{TraceRig, CTL, MASK_PTRS, OUTPUT_BASE, SIZE, WRMSR_LEN};
use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic};
use proptest::prelude::*;
use ptemu::image::encode::{self, Shape};
use ptemu::image::{CodeImage, ImageBuilder, ImageError, PtxedConfig, PtxedTiming, GAP_BYTE};
use ptemu::packet::Packet;
use ptemu::sources::penn::{self, BranchKind, MacroOp, PennEvents};
use ptemu::sources::{EventSource, Input, ReadOptions};
use ptemu::{Event, RtitCtl, TracerConfig};

const SJENG: &str = "tests/data/penn/sjeng-1K.trace";
const GCC: &str = "tests/data/penn/gcc-1K.trace";

// ---------------------------------------------------------------------------------------------
// Encodings

fn decode_one(bytes: &[u8], pc: u64) -> iced_x86::Instruction {
    Decoder::with_ip(64, bytes, pc, DecoderOptions::NONE).decode()
}

#[test]
fn nops_of_every_length_decode_back() {
    for len in 1..=15u8 {
        let b = encode::nop(len).unwrap();
        let i = decode_one(&b, 0);
        assert_eq!(
            (b.len(), i.len()),
            (usize::from(len), usize::from(len)),
            "{b:02x?}"
        );
        assert_eq!(i.mnemonic(), Mnemonic::Nop, "{b:02x?}");
    }
    assert!(encode::nop(0).is_err());
    assert!(encode::nop(16).is_err());
}

#[test]
fn ptwrites_of_every_length_decode_back() {
    for len in 5..=15u8 {
        let b = encode::ptwrite(len).unwrap();
        let i = decode_one(&b, 0);
        assert_eq!(i.len(), usize::from(len), "{b:02x?}");
        assert_eq!(i.code(), iced_x86::Code::Ptwrite_rm64, "{b:02x?}");
        assert!(
            !b.contains(&0x66),
            "libipt's ILD refuses PTWRITE with 66: {b:02x?}"
        );
    }
    for len in [0, 1, 4, 16] {
        assert!(encode::ptwrite(len).is_err(), "{len}");
    }
}

#[test]
fn direct_branches_of_every_length_reach_their_target() {
    let pc = 0x40_1000;
    for len in 2..=15u8 {
        for target in [pc + 0x40, pc - 0x30, pc + u64::from(len)] {
            let b = encode::jcc(pc, len, target).unwrap();
            let i = decode_one(&b, pc);
            assert_eq!(i.len(), usize::from(len));
            assert_eq!(i.flow_control(), FlowControl::ConditionalBranch);
            assert_eq!(i.near_branch_target(), target, "jcc {len} {b:02x?}");
            let b = encode::jmp(pc, len, target).unwrap();
            let i = decode_one(&b, pc);
            assert_eq!(i.len(), usize::from(len));
            assert_eq!(i.flow_control(), FlowControl::UnconditionalBranch);
            assert_eq!(i.near_branch_target(), target, "jmp {len} {b:02x?}");
        }
        // Far targets need rel32.
        let far = pc + 0x10_0000;
        assert_eq!(encode::jcc(pc, len, far).is_ok(), len >= 6, "jcc {len}");
        assert_eq!(encode::jmp(pc, len, far).is_ok(), len >= 5, "jmp {len}");
        let call = encode::call(pc, len, far);
        assert_eq!(call.is_ok(), len >= 5, "call {len}");
        if let Ok(b) = call {
            let i = decode_one(&b, pc);
            assert_eq!((i.len(), i.flow_control()), (usize::from(len), FlowControl::Call));
            assert_eq!(i.near_branch_target(), far);
        }
    }
    // Out of rel32 reach.
    assert!(matches!(
        encode::jmp(0x1000, 5, 0x2_0000_0000),
        Err(encode::ShapeError::Reach { disp_bytes: 4, .. })
    ));
    assert!(matches!(
        encode::jcc(0x1000, 3, 0x1000 + 3 + 128),
        Err(encode::ShapeError::Reach { disp_bytes: 1, .. })
    ));
    encode::jcc(0x1000, 3, 0x1000 + 3 + 127).unwrap();
}

#[test]
fn indirect_branches_and_returns_of_every_length_decode_back() {
    for len in 1..=16u8 {
        for (b, flow) in [
            (encode::indirect_jump(len), FlowControl::IndirectBranch),
            (encode::indirect_call(len), FlowControl::IndirectCall),
            (encode::ret(len), FlowControl::Return),
        ] {
            let supported = match flow {
                FlowControl::Return => (1..=15).contains(&len),
                _ => (2..=15).contains(&len),
            };
            assert_eq!(b.is_ok(), supported, "{flow:?} {len}");
            if let Ok(b) = b {
                let i = decode_one(&b, 0);
                assert_eq!((i.len(), i.flow_control()), (usize::from(len), flow), "{b:02x?}");
            }
        }
    }
    assert_eq!(encode::ret(1).unwrap(), [0xc3]);
    assert_eq!(encode::indirect_call(2).unwrap(), [0xff, 0xd0]);
    assert_eq!(encode::indirect_jump(2).unwrap(), [0xff, 0xe0]);
}

#[test]
fn verify_rejects_bytes_of_another_shape() {
    let nop3 = encode::nop(3).unwrap();
    assert!(encode::verify(Shape::Nop { len: 3 }, 0, &nop3).is_ok());
    assert!(encode::verify(Shape::Nop { len: 2 }, 0, &nop3[..2]).is_err());
    assert!(encode::verify(Shape::IndirectJump { len: 3 }, 0, &nop3).is_err());
    let j = encode::jmp(0x100, 2, 0x120).unwrap();
    assert!(encode::verify(
        Shape::Jump {
            len: 2,
            target: 0x121
        },
        0x100,
        &j
    )
    .is_err());
}

// ---------------------------------------------------------------------------------------------
// Building and conflicts

#[test]
fn image_spans_the_code_with_gaps_of_int3() {
    let mut b = ImageBuilder::new();
    b.add_shape(1, 0x1000, Shape::Nop { len: 3 });
    b.add_shape(
        2,
        0x1003,
        Shape::Jump {
            len: 2,
            target: 0x1010,
        },
    );
    b.add_shape(3, 0x1010, Shape::Return { len: 1 });
    b.add_shape(4, 0x1000, Shape::Nop { len: 3 });
    let img = b.build().unwrap();
    assert_eq!((img.base, img.end()), (0x1000, 0x1011));
    assert_eq!(img.at(0x1003, 2).unwrap(), [0xeb, 0x0b]);
    assert!(img.bytes[5..16].iter().all(|&b| b == GAP_BYTE));
    assert_eq!(img.at(0x1010, 1).unwrap(), [0xc3]);
}

#[test]
fn a_nop_and_a_ptwrite_at_one_pc_make_a_ptwrite() {
    let mut b = ImageBuilder::new();
    b.add_shape(1, 0x1000, Shape::Nop { len: 6 });
    b.add_shape(9, 0x1000, Shape::Ptwrite { len: 6 });
    let img = b.build().unwrap();
    assert_eq!(
        decode_one(&img.bytes, 0x1000).code(),
        iced_x86::Code::Ptwrite_rm64
    );
}

#[test]
fn conflicts_name_their_lines() {
    let mut b = ImageBuilder::new();
    b.add_shape(
        10,
        0x1000,
        Shape::Cond {
            len: 2,
            target: 0x1020,
        },
    );
    b.add_shape(
        25,
        0x1000,
        Shape::Cond {
            len: 2,
            target: 0x1030,
        },
    );
    b.add_shape(31, 0x1000, Shape::Nop { len: 2 });
    let e = b.build().unwrap_err();
    assert_eq!(e.total, 2);
    let text = e.to_string();
    assert!(text.contains("line 25: PC 1000 is a Jcc of 2 bytes to 0x1030, but line 10 made it a Jcc"));
    assert!(
        text.contains("line 31: PC 1000 is a NOP of 2 bytes, but line 10"),
        "{text}"
    );
    assert!(matches!(
        e.errors[0],
        ImageError::Conflict {
            first_line: 10,
            line: 25,
            ..
        }
    ));
}

#[test]
fn overlaps_and_unreachable_targets_name_their_lines() {
    let mut b = ImageBuilder::new();
    b.add_shape(3, 0x1000, Shape::Nop { len: 4 });
    b.add_shape(7, 0x1002, Shape::Nop { len: 1 });
    let e = b.build().unwrap_err();
    assert_eq!(
        e.errors[0].to_string(),
        "line 7: PC 1002 is inside the 4-byte instruction at 1000 (line 3)"
    );

    let mut b = ImageBuilder::new();
    b.add_shape(
        4,
        0x1000,
        Shape::Jump {
            len: 2,
            target: 0x2000,
        },
    );
    b.add_shape(
        5,
        0x2000,
        Shape::Call {
            len: 3,
            target: 0x1000,
        },
    );
    let e = b.build().unwrap_err();
    assert_eq!(e.total, 2);
    assert!(e.errors[0]
        .to_string()
        .starts_with("line 4: PC 1000: JMP of 2 bytes to 0x2000"));
    assert!(e.errors[1]
        .to_string()
        .contains("no CALL of 3 bytes to 0x1000 encoding: lengths 5..=15"));
}

#[test]
fn absurd_spans_and_empty_traces_are_refused() {
    let mut b = ImageBuilder::with_limit(0x1000);
    b.add_shape(1, 0x1000, Shape::Nop { len: 1 });
    b.add_shape(2, 0x2000, Shape::Nop { len: 1 });
    let e = b.build().unwrap_err();
    assert!(
        matches!(e.errors[0], ImageError::TooLarge { lines: (1, 2), .. }),
        "{e}"
    );
    assert!(e.to_string().contains("over the limit"));
    let mut b = ImageBuilder::new();
    b.add_shape(1, 0x1000, Shape::Nop { len: 1 });
    b.add_shape(2, 0x1000 + (300 << 20), Shape::Nop { len: 1 });
    assert!(matches!(
        b.build().unwrap_err().errors[0],
        ImageError::TooLarge { .. }
    ));
    assert_eq!(
        ImageBuilder::new().build().unwrap_err().errors,
        [ImageError::Empty]
    );
}

/// The bounds are checked as the image grows: the builder is refused at the first instruction
/// past either (span, distinct instructions) and keeps nothing more, so memory stays bounded and a
/// caller stops at once instead of after the whole trace.
#[test]
fn the_span_and_the_instruction_count_are_bounded_as_they_grow() {
    let mut b = ImageBuilder::with_limit(0x1000);
    b.add_shape(1, 0x1000, Shape::Nop { len: 1 });
    assert!(!b.is_refused());
    b.add_shape(2, 0x1800, Shape::Nop { len: 1 });
    assert!(!b.is_refused());
    b.add_shape(3, 0x2001, Shape::Nop { len: 1 });
    assert!(b.is_refused(), "refused at the line that passed the limit");
    assert_eq!(b.len(), 0, "a refused builder keeps nothing");
    for line in 4..1000 {
        b.add_shape(line, 0x1000 + line, Shape::Nop { len: 1 });
    }
    assert_eq!(b.len(), 0);
    let e = b.build().unwrap_err();
    assert_eq!(e.total, 1);
    assert!(
        matches!(
            e.errors[0],
            ImageError::TooLarge {
                lines: (1, 3),
                low: 0x1000,
                high: 0x2002,
                ..
            }
        ),
        "{e}"
    );
    // 0x1000 bytes of span allow 0x1000 / SPAN_PER_SITE distinct instructions.
    let most = 0x1000 / ptemu::image::SPAN_PER_SITE;
    let mut b = ImageBuilder::with_limit(0x1000);
    for i in 0..most {
        b.add_shape(i + 1, 0x1000 + i, Shape::Nop { len: 1 });
        b.add_shape(i + 1, 0x1000 + i, Shape::Nop { len: 1 });
    }
    assert!(!b.is_refused());
    b.add_shape(most + 1, 0x1000 + most, Shape::Nop { len: 1 });
    assert!(b.is_refused());
    let e = b.build().unwrap_err();
    assert_eq!(
        e.errors,
        [ImageError::TooMany {
            limit: most,
            line: most + 1
        }]
    );
}

/// SIM9: a Penn trace whose code spans more than the image limit stops at the line that passes it,
/// with exit 2, before the rest of the input is read (a bad line after it is never reached).
#[test]
fn sim9_simulate_stops_at_the_line_that_makes_the_image_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("far.trace");
    // A NOP, a JMP 512 MiB up (past the 256 MiB limit), two NOPs there (line 3 passes the
    // limit), a bad line never reached.
    let lines = [
        "1 400620 -1 -1 -1 - - -         0            0       400623            0 NOP        NOP",
        "1 400623 -1 -1 -1 R T -       -96            0       400625     20400620 J        JMP_IMM",
        "1 20400620 -1 -1 -1 - - -         0            0     20400623            0 NOP        NOP",
        "1 20400623 -1 -1 -1 - - -         0            0     20400626            0 NOP        NOP",
        "not a penn line",
    ];
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("out");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(["simulate", trace.to_str().unwrap(), "--format", "penn", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("over the limit") && err.contains("to 20400623, line 3"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn the_ptxed_command_loads_the_image_at_its_base() {
    let img = CodeImage {
        base: 0x40_1000,
        bytes: vec![0xc3],
    };
    assert_eq!(
        img.ptxed_command("trace.pt", "image.bin", &PtxedConfig::default()),
        "ptxed --insn-decoder --pt trace.pt --raw image.bin:0x401000"
    );
    let t = PtxedTiming {
        mtc_freq: 3,
        nom_freq: 40,
        cpuid_0x15_eax: 1,
        cpuid_0x15_ebx: 2,
    };
    let config = PtxedConfig {
        timing: Some(t),
        ..PtxedConfig::default()
    };
    assert_eq!(
        img.ptxed_command("my trace.pt", "image.bin", &config),
        "ptxed --insn-decoder --mtc-freq 3 --nom-freq 40 --cpuid-0x15.eax 1 --cpuid-0x15.ebx 2 \
         --pt 'my trace.pt' --raw image.bin:0x401000"
    );
    // CP1, CP4: the CPU (for its errata workarounds) and the address filter (SKL014).
    let config = PtxedConfig {
        cpu: Some(ptemu::regs::CpuSignature {
            family: 6,
            model: 0x5e,
            stepping: 3,
        }),
        filter_cfg: 0x1,
        filter_addr: [0x40_1000, 0x40_1fff, 0, 0, 0, 0, 0, 0],
        ..PtxedConfig::default()
    };
    assert_eq!(
        img.ptxed_command("trace.pt", "image.bin", &config),
        "ptxed --insn-decoder --cpu 6/94/3 --filter:addr0_cfg 1 --filter:addr0_a 0x401000 \
         --filter:addr0_b 0x401fff --pt trace.pt --raw image.bin:0x401000"
    );
}

// ---------------------------------------------------------------------------------------------
// Replay through libipt's instruction-flow decoder

fn timing() -> Timing {
    let clock = TracerConfig::default().clock;
    Timing {
        mtc_freq: 3,
        nom_freq: clock.nominal_ratio,
        art_eax: 1,
        art_ebx: clock.tsc_per_art,
    }
}

/// A trace of `text` with `ctl` (plus TraceEn, enabled by a WRMSR just before the first PC,
/// disabled by one at the IP after the last instruction), and its events.
fn trace(text: &[u8], ctl: RtitCtl) -> (Vec<u8>, Vec<Event>) {
    trace_with(text, ctl, TracerConfig::default())
}

fn trace_with(text: &[u8], ctl: RtitCtl, cfg: TracerConfig) -> (Vec<u8>, Vec<Event>) {
    let mut ev = PennEvents::new(
        Input::from_bytes("t", text.to_vec()).unwrap(),
        ReadOptions::default(),
    );
    let start = ev.start_state();
    let mut r = TraceRig::new(cfg);
    r.wrmsr(OUTPUT_BASE, common::trace::BASE);
    r.wrmsr(MASK_PTRS, SIZE - 1);
    let mut events = Vec::new();
    let mut last_ip = 0;
    while let Some((op, before, event)) = ev.next_macro_op().unwrap() {
        assert!(before.is_none());
        if events.is_empty() {
            let at = op.pc - u64::from(WRMSR_LEN);
            r.tracer.set_state(at, start.cpl, start.cr3, start.mode);
            r.ctl = ctl.with_trace_en(true);
            r.tracer
                .wrmsr(&mut r.mem, CTL, r.ctl.bits(), at, WRMSR_LEN)
                .unwrap();
        }
        r.ev(event);
        last_ip = event.next_ip(op.pc);
        events.push(event);
    }
    r.stop_at(last_ip);
    (r.bytes(), events)
}

fn image_of(ops: &[MacroOp]) -> CodeImage {
    let mut b = ImageBuilder::new();
    for op in ops {
        b.add_shape(op.line, op.pc, op.shape());
    }
    b.build().unwrap_or_else(|e| panic!("{e}"))
}

fn decode(trace: &[u8], img: &CodeImage) -> Flow {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &img.bytes).unwrap();
    insn::decode(trace, file.path(), img.base, timing())
}

/// The ptwrites the decoder must report: (instruction index, IP, payload).
fn expected_ptwrites(events: &[Event]) -> Vec<(usize, u64, u64)> {
    let mut v = Vec::new();
    for (n, e) in events.iter().enumerate() {
        if let Event::Ptwrite { ip, payload, .. } = *e {
            v.push((n, ip, payload));
        }
    }
    v
}

/// The ptwrite events the decoder reported: (index of the instruction they bound to, IP,
/// payload).
fn decoded_ptwrites(flow: &Flow) -> Vec<(usize, u64, u64)> {
    let mut v = Vec::new();
    for &(at, e) in &flow.events {
        if let IEvent::Ptwrite { ip, payload } = e {
            // Bound to the PTWRITE just decoded: indicated after it.
            let n = at.checked_sub(1).expect("a ptwrite before any instruction");
            assert_eq!(ip, Some(flow.ips[n]), "ptwrite event IP = its instruction's IP");
            v.push((n, flow.ips[n], payload));
        }
    }
    v
}

/// What a replay went through.
#[derive(Debug)]
struct Replay {
    /// Instructions decoded (= traced).
    insns: usize,
    /// PTWRITEs traced and decoded.
    ptwrites: usize,
    /// Trace bytes, PSBs, TNT bits and TIPs in them (libipt's packet decoder).
    bytes: usize,
    psbs: usize,
    tnt_bits: usize,
    tips: usize,
}

/// Checks libipt's instruction flow over `img` against the trace: the decoded IPs must be `pcs`,
/// the PTWRITEs (with PTWEn) the traced `events`' ones.
fn check(
    pcs: &[u64],
    img: &CodeImage,
    bytes: &[u8],
    events: &[Event],
    ctl: RtitCtl,
) -> Result<Replay, String> {
    let flow = decode(bytes, img);
    if let Some(n) = (0..pcs.len().min(flow.ips.len())).find(|&n| pcs[n] != flow.ips[n]) {
        return Err(format!(
            "instruction {n}: decoded {:x}, traced {:x}",
            flow.ips[n], pcs[n]
        ));
    }
    if let Some(code) = flow.error {
        return Err(format!(
            "libipt error {code} after {} instructions",
            flow.ips.len()
        ));
    }
    if flow.ips.len() != pcs.len() {
        return Err(format!(
            "{} instructions decoded, {} traced",
            flow.ips.len(),
            pcs.len()
        ));
    }
    // (Syncing on the enable's PSB+, which has no FUP, libipt first reports tracing disabled.)
    let enabled = flow
        .events
        .iter()
        .find(|(_, e)| matches!(e, IEvent::Enabled { .. }));
    if enabled != Some(&(0, IEvent::Enabled { ip: pcs[0] })) {
        return Err(format!("first enable {enabled:?}"));
    }
    let last = match events.last() {
        Some(e) => e.next_ip(0),
        None => return Err("no events".into()),
    };
    if !flow
        .events
        .contains(&(pcs.len(), IEvent::AsyncDisabled { at: last }))
    {
        return Err(format!("not disabled at {last:x}: {:?}", flow.events.last()));
    }
    let ptw = expected_ptwrites(events);
    let got = decoded_ptwrites(&flow);
    if ctl.ptw_en() && got != ptw || !ctl.ptw_en() && !got.is_empty() {
        return Err(format!(
            "{} ptwrites decoded, {} traced, first difference {:?}",
            got.len(),
            ptw.len(),
            got.iter().zip(&ptw).find(|(a, b)| a != b)
        ));
    }
    let packets = common::libipt::decode(bytes).map_err(|e| format!("{e:?}"))?;
    let count = |f: &dyn Fn(&Packet) -> usize| packets.iter().map(|(p, _)| f(p)).sum::<usize>();
    Ok(Replay {
        insns: flow.ips.len(),
        ptwrites: got.len(),
        bytes: bytes.len(),
        psbs: count(&|p| usize::from(*p == Packet::Psb)),
        tnt_bits: count(&|p| match p {
            Packet::Tnt8(t) | Packet::Tnt64(t) => usize::from(t.count),
            _ => 0,
        }),
        tips: count(&|p| usize::from(matches!(p, Packet::Tip(_)))),
    })
}

/// Traces `text` with `ctl`, synthesizes its image and checks the replay; panics on a mismatch.
fn replay(text: &[u8], ctl: RtitCtl) -> Replay {
    replay_with(text, ctl, TracerConfig::default())
}

fn replay_with(text: &[u8], ctl: RtitCtl, cfg: TracerConfig) -> Replay {
    let ops = macro_ops(text);
    let pcs = expected_pcs(&ops);
    let img = image_of(&ops);
    let (bytes, events) = trace_with(text, ctl, cfg);
    assert_eq!(events.len(), pcs.len());
    check(&pcs, &img, &bytes, &events, ctl).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_replay_check_catches_a_flipped_tnt_bit_a_missing_instruction_and_a_wrong_target() {
    let text = sample(SJENG);
    let ops = macro_ops(&text);
    let pcs = expected_pcs(&ops);
    let img = image_of(&ops);
    let ctl = base_ctl().with_ptw_en(true);
    let (bytes, events) = trace(&text, ctl);
    check(&pcs, &img, &bytes, &events, ctl).unwrap();

    // The last outcome of the first TNT-8 packet flipped (bit 1 sits just below the stop bit
    // of a one-bit TNT, and is the last outcome of longer ones).
    let mut offset = 0;
    let mut flipped = bytes.clone();
    for (p, size) in common::libipt::decode(&bytes).unwrap() {
        if matches!(p, Packet::Tnt8(t) if t.count >= 1) {
            flipped[offset] ^= 0x02;
            break;
        }
        offset += size;
    }
    assert_ne!(flipped, bytes);
    let e = check(&pcs, &img, &flipped, &events, ctl).unwrap_err();
    assert!(e.contains("instruction") || e.contains("libipt error"), "{e}");

    // One instruction missing from the expectation.
    let mut fewer = pcs.clone();
    fewer.remove(pcs.len() / 2);
    assert!(check(&fewer, &img, &bytes, &events, ctl)
        .unwrap_err()
        .contains("instruction"));

    // One PTWRITE payload changed.
    let mut other = events.clone();
    let n = other
        .iter()
        .position(|e| matches!(e, Event::Ptwrite { .. }))
        .unwrap();
    if let Event::Ptwrite { payload, .. } = &mut other[n] {
        *payload ^= 8;
    }
    assert!(check(&pcs, &img, &bytes, &other, ctl)
        .unwrap_err()
        .contains("ptwrites"));

    // A conditional branch's target moved in the image (the taken path goes elsewhere).
    let op = ops
        .iter()
        .find(|o| o.kind == BranchKind::Conditional && o.taken)
        .unwrap();
    let mut b = ImageBuilder::new();
    for o in &ops {
        let mut o = *o;
        if o.pc == op.pc {
            o.target = op.fallthrough;
        }
        b.add_shape(o.line, o.pc, o.shape());
    }
    let wrong = b.build().unwrap();
    assert!(check(&pcs, &wrong, &bytes, &events, ctl).is_err());
}

fn base_ctl() -> RtitCtl {
    RtitCtl::new()
        .with_branch_en(true)
        .with_user(true)
        .with_psb_freq(3)
}

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn samples_replay_with_ret_compression() {
    // sjeng: 750 macro-ops, gcc: 754; neither has REP repeats.
    let (sjeng, gcc) = (
        replay(&sample(SJENG), base_ctl()),
        replay(&sample(GCC), base_ctl()),
    );
    assert_eq!((sjeng.insns, gcc.insns), (750, 754));
    // Some returns are compressed: fewer TIPs than indirect branches + returns (sjeng 2 + 8,
    // gcc 1 + 9), one TNT bit per conditional branch (148, 157) plus one per compressed RET.
    assert!(sjeng.tips < 10 && sjeng.tnt_bits > 148, "{sjeng:?}");
    assert!(gcc.tips < 10 && gcc.tnt_bits > 157, "{gcc:?}");
}

#[test]
fn samples_replay_without_ret_compression() {
    let sjeng = replay(&sample(SJENG), base_ctl().with_dis_retc(true));
    let gcc = replay(&sample(GCC), base_ctl().with_dis_retc(true));
    assert_eq!((sjeng.tips, sjeng.tnt_bits), (10, 148), "{sjeng:?}");
    assert_eq!((gcc.tips, gcc.tnt_bits), (10, 157), "{gcc:?}");
}

#[test]
fn samples_and_a_generated_trace_replay_with_psb_every_2k() {
    // The samples' branch traces are ~100 bytes; with PTWRITEs and timing at 20 cycles per
    // instruction (MTCs) they pass 2 KiB.
    let cfg = TracerConfig::default().with_cycles_per_instruction(20);
    for s in [SJENG, GCC] {
        let ctl = timing_ctl()
            .with_psb_freq(0)
            .with_ptw_en(true)
            .with_fup_on_ptw(true);
        let r = replay_with(&sample(s), ctl, cfg.clone());
        assert!(r.bytes > 2048 && r.psbs >= 2, "{r:?}");
    }
    let r = replay(
        &generated(30_000, 5),
        base_ctl().with_psb_freq(0).with_dis_retc(true),
    );
    assert!(r.bytes > 2 * 2048 && r.psbs > r.bytes / 2048, "{r:?}");
}

/// HW1-HW5 (spec/hardware.md): with the hardware layout, libipt's instruction flow over the
/// samples and a generated trace is still the input's, with timing packets and PSBs every 2 KiB,
/// and the PADs are there.
#[test]
fn hw1_hw5_samples_and_a_generated_trace_replay_with_the_hardware_layout() {
    use ptemu::packing::Packing;
    let packed = TracerConfig::default()
        .with_cycles_per_instruction(20)
        .with_packing(Some(Packing::Hardware));
    let plain = packed.clone().with_packing(Some(Packing::None));
    for s in [SJENG, GCC] {
        let ctl = timing_ctl().with_psb_freq(0).with_ptw_en(true);
        let with = replay_with(&sample(s), ctl, packed.clone());
        let without = replay_with(&sample(s), ctl, plain.clone());
        // The PSBs fall elsewhere (PADs count toward PSBFreq), and a PSB empties the return
        // stack, so TIPs and TNT bits may differ; the instructions may not.
        assert_eq!(with.insns, without.insns);
        assert!(with.bytes > without.bytes, "{with:?} {without:?}");
    }
    let r = replay_with(&generated(30_000, 5), base_ctl().with_psb_freq(0), packed);
    assert!(r.psbs > r.bytes / 2048, "{r:?}");
}

fn timing_ctl() -> RtitCtl {
    base_ctl()
        .with_tsc_en(true)
        .with_mtc_en(true)
        .with_mtc_freq(3)
        .with_cyc_en(true)
}

#[test]
fn samples_replay_with_timing_packets() {
    for s in [SJENG, GCC] {
        replay(&sample(s), timing_ctl());
    }
}

#[test]
fn samples_replay_with_ptwrite() {
    let ctl = base_ctl().with_ptw_en(true).with_fup_on_ptw(true);
    let sjeng = replay(&sample(SJENG), ctl).ptwrites;
    let gcc = replay(&sample(GCC), ctl).ptwrites;
    assert!(sjeng > 50 && gcc > 50, "{sjeng} {gcc}");
    // Without FUPonPTW the decoder binds each PTW to the PTWRITE it reaches.
    replay(&sample(SJENG), base_ctl().with_ptw_en(true));
}

/// A generated trace of about `uops` micro-ops (the generator ends on an instruction boundary).
fn generated(uops: u64, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    penn::generate(uops, seed, &mut out).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    #[test]
    fn generated_traces_replay(seed in any::<u64>(), uops in 20_000u64..40_000, variant in 0usize..5) {
        let text = generated(uops, seed);
        let ctl = match variant {
            0 => base_ctl(),
            1 => base_ctl().with_dis_retc(true),
            2 => base_ctl().with_psb_freq(0),
            3 => timing_ctl(),
            _ => base_ctl().with_ptw_en(true).with_fup_on_ptw(true),
        };
        let r = replay(&text, ctl);
        prop_assert!(r.insns > 5_000);
        if variant == 2 {
            prop_assert!(r.psbs > r.bytes / 2048 / 2, "{:?}", r);
        }
    }
}

#[test]
fn generated_trace_replays_deep_recursion_in_every_mode() {
    let text = generated(40_000, 7);
    let ops = macro_ops(&text);
    // The recursion nests beyond the 64-entry return stack.
    let (mut depth, mut deepest) = (0i64, 0i64);
    for op in &ops {
        match op.kind {
            BranchKind::Call | BranchKind::IndirectCall => depth += 1,
            BranchKind::Return => depth -= 1,
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    assert!(deepest > 64, "deepest {deepest}");
    for ctl in [
        base_ctl(),
        base_ctl().with_dis_retc(true),
        timing_ctl().with_psb_freq(0),
        base_ctl().with_ptw_en(true).with_fup_on_ptw(true),
    ] {
        replay(&text, ctl);
    }
}
