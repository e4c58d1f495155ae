//! A minimal emulator loop embedding ptemu: the guest's driver programs a ToPA buffer with WRMSR,
//! a user-mode loop runs, the emulator feeds each retired instruction to a [`Tracer`], and every
//! ToPA PMI is delivered to the guest's handler, which follows the SDM algorithm (P7): clear
//! TraceEn, read where output stopped, consume the filled regions, re-arm, restore IA32_RTIT_CTL.
//! (PMI preservation, CTL[56] and P6, is off: this is the handler the SDM gives for that case.)
//!
//! Run with `cargo run --example embed`; it exits non-zero if a check fails. `tests/embed_example.rs`
//! runs [`run`] too.

use ptemu::output::TopaEntry;
use ptemu::packet::PacketDecoder;
use ptemu::regs::msr::*;
use ptemu::regs::{GlobalStatus, RtitCtl, RtitStatus};
use ptemu::tracer::{ExecMode, FarKind};
use ptemu::{CpuProfile, Event, EventKind, OutputUnit, PhysMemory, SparseMemory, Tracer, TracerConfig};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The ring: three 4 KiB regions, INT on the last one (P1), then END to the skid table. No STOP.
const TABLE: u64 = 0x5000;
const REGIONS: u64 = 0x10_0000;
/// The PMI is imprecise (P2): bytes written after the INT region fills, before the handler runs,
/// land here instead of overwriting region 0 of the ring. END leads back to the ring (W4).
const SKID_TABLE: u64 = 0x6000;
const SKID: u64 = 0x20_0000;
/// Guest code: a user loop, a function it calls, the targets of its indirect jump, the kernel.
const LOOP: u64 = 0x40_1000;
const FUNC: u64 = 0x40_2000;
const CASES: u64 = 0x40_3000;
const KERNEL: u64 = 0xffff_ffff_8100_0000;
const PMI_HANDLER: u64 = KERNEL + 0x1000;
const PMI_VECTOR: u8 = 0xfe;
const CR3: u64 = 0x1234_5000;
/// IA32_PERF_GLOBAL_STATUS[55], Trace_ToPA_PMI.
const TOPA_PMI: u64 = GlobalStatus::TRACE_TOPA_PMI.bits();

/// What a run did.
#[derive(Debug)]
pub struct Summary {
    /// Events fed to the tracer.
    pub events: u64,
    /// PMIs the guest handler took.
    pub pmis_handled: u64,
    /// `pmi` events the output unit reported (P1).
    pub pmi_events: usize,
    /// The trace as the guest's consumer collected it, in stream order.
    pub collected: Vec<u8>,
    /// Bytes the tracer handed to the output unit.
    pub produced: u64,
    /// The output unit's byte counts at the end (the ring wraps: overwrites and laps).
    pub output: ptemu::output::OutputStats,
    /// (name, value) of the PT MSRs at the end.
    pub final_msrs: Vec<(&'static str, u64)>,
}

/// The guest's user code, iteration `i`: Jcc, CALL, Jcc, RET, indirect JMP, JMP back.
fn guest_iteration(i: u64) -> Vec<Event> {
    let (skip, even, case) = (
        i.is_multiple_of(3),
        i.is_multiple_of(2),
        CASES + 0x40 * (i * 7 % 5),
    );
    let mut v = vec![Event::CondBranch {
        ip: LOOP,
        len: 2,
        target: LOOP + 0x10,
        taken: skip,
    }];
    if !skip {
        v.push(Event::Retire {
            ip: LOOP + 2,
            len: 14,
        });
    }
    v.push(Event::Call {
        ip: LOOP + 0x10,
        len: 5,
        target: FUNC,
    });
    v.push(Event::CondBranch {
        ip: FUNC,
        len: 2,
        target: FUNC + 8,
        taken: even,
    });
    if !even {
        v.push(Event::Retire { ip: FUNC + 2, len: 6 });
    }
    v.push(Event::Return {
        ip: FUNC + 8,
        target: LOOP + 0x15,
    }); // compressed to a TNT bit
    v.push(Event::IndirectJump {
        ip: LOOP + 0x15,
        target: case,
    }); // TIP
    v.push(Event::Jump {
        ip: case,
        target: LOOP,
    });
    v
}

/// A far transfer between user and kernel (interrupt, IRET, SYSCALL).
fn far(kind: FarKind, from: u64, to: u64, cpl: u8) -> Event {
    Event::far(kind, from, to, cpl, ExecMode::Bits64)
}

/// Guest kernel code: WRMSR is `0f 30`, 2 bytes; `ip` says which instruction of the handler.
fn wrmsr(t: &mut Tracer, mem: &mut SparseMemory, msr: u32, value: u64, ip: u64) -> Res<()> {
    Ok(t.wrmsr(mem, msr, value, ip, 2)?)
}

/// Copies the stream from the ring's start up to the position the output MSRs hold, following the
/// table the way the processor walked it (W3, W4): regions before it are full (P7), the current
/// one holds OutputOffset bytes. The MSRs are exact because TraceEn is 0 (EN3, M7).
fn consume(t: &Tracer, mem: &SparseMemory, out: &mut Vec<u8>) -> Res<()> {
    let base = t.rdmsr(IA32_RTIT_OUTPUT_BASE)?;
    let ptrs = t.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS)?;
    let (index, offset) = ((ptrs >> 7) & 0x1ff_ffff, ptrs >> 32);
    if RtitStatus::from(t.rdmsr(IA32_RTIT_STATUS)?).error() {
        let why = t.unit().last_violation().map(|v| v.to_string());
        return Err(format!("operational error (E3): {}", why.unwrap_or_default()).into());
    }
    let (mut table, mut i) = (TABLE, 0);
    for _ in 0..8 {
        let e = TopaEntry::from(mem.read_u64(table + 8 * i)?);
        if e.end() {
            (table, i) = (e.base(), 0);
            continue;
        }
        let here = (table, i) == (base, index);
        let len = if here { offset } else { e.region_size() };
        let start = out.len();
        out.resize(start + len as usize, 0);
        mem.read(e.base(), &mut out[start..])?;
        if here {
            return Ok(());
        }
        i += 1;
    }
    Err(format!("output position {base:#x}[{index}] is not on the ring: the trace wrapped").into())
}

/// Re-arms the buffer: output from the ring's start, Stopped and Error cleared (EN1) but
/// PacketByteCnt kept, the PMI bit cleared through IA32_PERF_GLOBAL_STATUS_RESET (P1).
fn rearm(t: &mut Tracer, mem: &mut SparseMemory, ip: u64) -> Res<()> {
    wrmsr(t, mem, IA32_RTIT_OUTPUT_BASE, TABLE, ip)?;
    wrmsr(t, mem, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f, ip + 2)?; // entry 0, offset 0
    let status = RtitStatus::from(t.rdmsr(IA32_RTIT_STATUS)?)
        .with_stopped(false)
        .with_error(false);
    wrmsr(t, mem, IA32_RTIT_STATUS, status.bits(), ip + 4)?;
    wrmsr(t, mem, IA32_PERF_GLOBAL_STATUS_RESET, TOPA_PMI, ip + 6)
}

/// Boots the guest, runs `iterations` of its loop, and collects the trace.
pub fn run(iterations: u64) -> Res<Summary> {
    let mut mem = SparseMemory::new();
    let region = |k: u64| TopaEntry::region(REGIONS + 0x1000 * k, 0); // 4 KiB
    mem.write_u64(TABLE, region(0).bits())?;
    mem.write_u64(TABLE + 8, region(1).bits())?;
    mem.write_u64(TABLE + 16, region(2).with_int(true).bits())?;
    mem.write_u64(TABLE + 24, TopaEntry::end_to(SKID_TABLE).bits())?;
    mem.write_u64(SKID_TABLE, TopaEntry::region(SKID, 0).bits())?;
    mem.write_u64(SKID_TABLE + 8, TopaEntry::end_to(TABLE).bits())?;

    // The driver, at CPL 0: the output MSRs, then IA32_RTIT_CTL last (EN1); then SYSRET to user.
    let cpu = CpuProfile::named("icelake")?;
    let mut t = Tracer::new(OutputUnit::new(cpu), TracerConfig::default());
    t.set_state(KERNEL, 0, CR3, ExecMode::Bits64);
    rearm(&mut t, &mut mem, KERNEL)?;
    let ctl = RtitCtl::new()
        .with_trace_en(true)
        .with_topa(true)
        .with_branch_en(true)
        .with_user(true);
    wrmsr(&mut t, &mut mem, IA32_RTIT_CTL, ctl.bits(), KERNEL + 8)?;
    let mut ip = LOOP;
    t.event(&mut mem, &far(FarKind::Sysret, KERNEL + 10, ip, 3))?;

    let (mut collected, mut pmis_handled) = (Vec::new(), 0);
    for ev in (0..iterations).flat_map(guest_iteration) {
        t.event(&mut mem, &ev)?;
        ip = ev.next_ip(ip);
        // The LVT delivers the ToPA PMI at the next instruction boundary, after the bytes already
        // written (P2). The emulator polls the status bit the unit sets (P1, P5).
        if t.rdmsr(IA32_PERF_GLOBAL_STATUS)? & TOPA_PMI == 0 {
            continue;
        }
        pmis_handled += 1;
        let (h, vector) = (PMI_HANDLER, PMI_VECTOR);
        t.event(&mut mem, &far(FarKind::Interrupt { vector }, ip, h, 0))?;
        // P7: clear TraceEn (the disable flushes, EN3), consume, re-arm, restore CTL, IRET.
        let ctl = t.rdmsr(IA32_RTIT_CTL)?;
        wrmsr(&mut t, &mut mem, IA32_RTIT_CTL, ctl & !1, h)?;
        consume(&t, &mem, &mut collected)?;
        rearm(&mut t, &mut mem, h + 2)?;
        wrmsr(&mut t, &mut mem, IA32_RTIT_CTL, ctl, h + 10)?;
        t.event(&mut mem, &far(FarKind::Iret, h + 12, ip, 3))?;
    }

    // The guest ends the session: SYSCALL into the driver, which disables and collects the tail.
    t.event(&mut mem, &far(FarKind::Syscall, ip, KERNEL, 0))?;
    let off = ctl.with_trace_en(false).bits();
    wrmsr(&mut t, &mut mem, IA32_RTIT_CTL, off, KERNEL)?;
    consume(&t, &mem, &mut collected)?;

    let unit = t.unit();
    let msrs = [
        ("IA32_RTIT_CTL", IA32_RTIT_CTL),
        ("IA32_RTIT_STATUS", IA32_RTIT_STATUS),
        ("IA32_RTIT_OUTPUT_BASE", IA32_RTIT_OUTPUT_BASE),
        ("IA32_RTIT_OUTPUT_MASK_PTRS", IA32_RTIT_OUTPUT_MASK_PTRS),
        ("IA32_PERF_GLOBAL_STATUS", IA32_PERF_GLOBAL_STATUS),
    ];
    Ok(Summary {
        events: t.stats().events,
        pmis_handled,
        pmi_events: unit.events().iter().filter(|e| e.kind == EventKind::Pmi).count(),
        collected,
        produced: t.stats().bytes,
        output: unit.stats(),
        final_msrs: msrs
            .iter()
            .map(|&(n, m)| Ok((n, t.rdmsr(m)?)))
            .collect::<Res<_>>()?,
    })
}

/// The line that reports the output unit's byte counts (the C example prints the same).
pub fn output_line(o: &ptemu::output::OutputStats) -> String {
    format!(
        "output unit:     {} bytes in, {} written, {} lost, {} overwritten, {} laps",
        o.bytes_in, o.bytes_written, o.bytes_lost, o.bytes_overwritten, o.laps
    )
}

/// Decodes the collected trace with ptemu's packet decoder: (packets, errors).
pub fn decode(trace: &[u8]) -> (u64, u64) {
    let mut dec = PacketDecoder::new(trace, 0);
    let (mut packets, mut errors) = (0, 0);
    while let Some(r) = dec.next_packet() {
        match r {
            Ok(_) => packets += 1,
            Err(e) => {
                eprintln!("decode error: {e:?}");
                errors += 1;
                dec.resync();
            }
        }
    }
    (packets, errors)
}

fn main() -> Res<()> {
    let s = run(20_000)?;
    let (packets, errors) = decode(&s.collected);
    let collected = s.collected.len() as u64;
    println!("events fed:      {}", s.events);
    println!(
        "PMIs handled:    {} (the unit raised {})",
        s.pmis_handled, s.pmi_events
    );
    println!(
        "bytes collected: {collected} (the tracer produced {})",
        s.produced
    );
    println!("{}", output_line(&s.output));
    println!("packets decoded: {packets} ({errors} errors)");
    for (name, value) in &s.final_msrs {
        println!("{name:<27} = {value:#018x}");
    }
    let checks = [
        ("every collected byte decodes", errors == 0),
        ("collected bytes == produced bytes", collected == s.produced),
        (
            "one handler run per PMI",
            s.pmis_handled > 0 && s.pmis_handled == s.pmi_events as u64,
        ),
    ];
    for (what, ok) in checks {
        println!("check: {what}: {}", if ok { "ok" } else { "FAILED" });
    }
    match checks.iter().all(|&(_, ok)| ok) {
        true => Ok(()),
        false => Err("a check failed".into()),
    }
}
