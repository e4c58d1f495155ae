//! libipt's query decoder over the tracer's output returns exactly the branch outcomes, indirect
//! targets and events that went in: random programs (proptest) with RET compression on and off,
//! PSB+ every 2–16 KiB, timing packets, user/kernel filtering, an IP filter range, PTWRITE, and
//! OVF from a back-pressure model (spec/generation.md: TNT1, RET2, TIP1, TIP3, PGE1, PGD2, OVF2).

mod common;

use common::query::{error_name, QEvent, Query, Timing};
use common::trace::*;
use proptest::prelude::*;
use ptemu::packet::PtwSize;
use ptemu::packing::Packing;
use ptemu::regs::PacketStyle;
use ptemu::regs::RtitCtl;
use ptemu::tracer::{Backpressure, Event, FarKind, TracerConfig};

const USER: u64 = 0x40_0000;
const KERNEL: u64 = 0xffff_ffff_8100_0000;

/// One step of a random program.
#[derive(Clone, Debug)]
enum Op {
    Cond(bool, u16),
    Call(u16),
    Ret,
    /// A return somewhere else than the caller (longjmp-like): never compressible.
    WildRet(u16),
    IndJump(u16),
    IndCall(u16),
    Retire(u8),
    /// Interrupt into the kernel, `n` kernel branches, IRET back.
    Interrupt(u8, u8),
    /// SYSCALL, a CR3 write in the kernel, SYSRET.
    Syscall(u64),
    Ptw(u64),
    /// A call chain `n` deep then all returns (n may exceed 64).
    Deep(u8),
    Cycles(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), 4u16..0x400).prop_map(|(t, d)| Op::Cond(t, d)),
        2 => (0x10u16..0x4000).prop_map(Op::Call),
        2 => Just(Op::Ret),
        1 => (0u16..0x4000).prop_map(Op::WildRet),
        1 => (0u16..0xffff).prop_map(Op::IndJump),
        1 => (0u16..0xffff).prop_map(Op::IndCall),
        2 => (1u8..15).prop_map(Op::Retire),
        1 => (32u8..255, 0u8..6).prop_map(|(v, n)| Op::Interrupt(v, n)),
        1 => (1u64..1 << 20).prop_map(|c| Op::Syscall(c << 12)),
        1 => any::<u64>().prop_map(Op::Ptw),
        1 => (1u8..90).prop_map(Op::Deep),
        1 => (1u16..5000).prop_map(Op::Cycles),
    ]
}

/// Turns ops into a consistent event stream (IPs follow the control flow).
struct Program {
    ip: u64,
    stack: Vec<u64>,
    events: Vec<Event>,
}

impl Program {
    fn build(ops: &[Op]) -> Vec<Event> {
        let mut p = Program {
            ip: WRMSR_IP + u64::from(WRMSR_LEN),
            stack: Vec::new(),
            events: Vec::new(),
        };
        for op in ops {
            p.op(op);
        }
        p.events
    }

    /// The IP after the last event.
    fn end_ip(events: &[Event]) -> u64 {
        events
            .iter()
            .fold(WRMSR_IP + u64::from(WRMSR_LEN), |ip, e| e.next_ip(ip))
    }

    fn push(&mut self, e: Event, next: u64) {
        self.events.push(e);
        self.ip = next;
    }

    fn user_target(&self, d: u16) -> u64 {
        USER + (u64::from(d) << 4)
    }

    fn call(&mut self, d: u16) {
        let ip = self.ip;
        let target = self.user_target(d);
        self.stack.push(ip + 5);
        self.push(Event::Call { ip, len: 5, target }, target);
    }

    fn ret(&mut self) {
        if let Some(target) = self.stack.pop() {
            self.push(Event::Return { ip: self.ip, target }, target);
        }
    }

    /// A 2-byte Jcc at the current IP to IP + `d`.
    fn cond(&mut self, taken: bool, d: u64) {
        let ip = self.ip;
        let e = Event::CondBranch {
            ip,
            len: 2,
            target: ip + d,
            taken,
        };
        self.push(e, e.next_ip(ip));
    }

    fn kernel_branches(&mut self, n: u8) {
        for i in 0..n {
            self.cond(i % 2 == 0, 0x40);
        }
    }

    fn op(&mut self, op: &Op) {
        let ip = self.ip;
        match *op {
            Op::Cond(taken, d) => self.cond(taken, u64::from(d)),
            Op::Call(d) => self.call(d),
            Op::Ret => self.ret(),
            Op::WildRet(d) => {
                let target = self.user_target(d) + 3;
                self.push(Event::Return { ip, target }, target);
            }
            Op::IndJump(d) => {
                let target = self.user_target(d);
                self.push(Event::IndirectJump { ip, target }, target);
            }
            Op::IndCall(d) => {
                let target = self.user_target(d);
                self.stack.push(ip + 3);
                self.push(Event::IndirectCall { ip, len: 3, target }, target);
            }
            Op::Retire(len) => self.push(Event::Retire { ip, len }, ip + u64::from(len)),
            Op::Interrupt(vector, n) => {
                let handler = KERNEL + u64::from(vector) * 0x100;
                self.push(far(FarKind::Interrupt { vector }, ip, handler, 0), handler);
                self.kernel_branches(n);
                let k = self.ip;
                self.push(far(FarKind::Iret, k, ip, 3), ip);
            }
            Op::Syscall(cr3) => {
                let entry = KERNEL + 0x10_0000;
                self.push(far(FarKind::Syscall, ip, entry, 0), entry);
                self.kernel_branches(1);
                let k = self.ip;
                self.push(Event::Cr3Write { ip: k, len: 3, cr3 }, k + 3);
                let k = self.ip;
                self.push(far(FarKind::Sysret, k, ip + 2, 3), ip + 2);
            }
            Op::Ptw(payload) => self.push(
                Event::Ptwrite {
                    ip,
                    len: 5,
                    payload,
                    size: PtwSize::Eight,
                },
                ip + 5,
            ),
            Op::Deep(n) => {
                for i in 0..n {
                    self.call(0x100 + u16::from(i) * 8);
                }
                for _ in 0..n {
                    self.ret();
                }
            }
            Op::Cycles(n) => self.events.push(Event::Cycles(u64::from(n))),
        }
    }
}

/// The test's own model of PacketEn (FLT1, FLT2): CPL against OS/User, and one optional filter range.
struct Model {
    os: bool,
    user: bool,
    filter: Option<(u64, u64)>,
    ptw: bool,
    fup_on_ptw: bool,
}

impl Model {
    /// ContextEn (no CR3 filter here): CPL against OS/User.
    fn level(&self, cpl: u8) -> bool {
        if cpl == 0 {
            self.os
        } else {
            self.user
        }
    }

    fn traced(&self, ip: u64, cpl: u8) -> bool {
        self.level(cpl) && self.filter.is_none_or(|(a, b)| a <= ip && ip <= b)
    }
}

/// Walks the input events against libipt's answers, as an instruction-flow decoder would.
struct Driver {
    q: Query,
    enabled: bool,
    /// libipt's return stack model: every call seen while enabled.
    stack: Vec<u64>,
    ip: u64,
    cpl: u8,
    checked: usize,
}

impl Driver {
    fn fail<T>(&self, what: String) -> Result<T, String> {
        Err(format!("{what} (after {} checks)", self.checked))
    }

    fn event(&mut self) -> Result<Option<QEvent>, String> {
        self.q
            .next_event()
            .map_err(|c| format!("pt_qry_event: {}", error_name(c)))
    }

    fn expect_event(&mut self, want: impl Fn(&QEvent) -> bool, what: &str) -> Result<QEvent, String> {
        match self.event()? {
            Some(e) if want(&e) => {
                self.checked += 1;
                Ok(e)
            }
            other => self.fail(format!("expected {what}, libipt has {other:?}")),
        }
    }

    fn no_event(&mut self, at: &Event) -> Result<(), String> {
        match self.event()? {
            None => Ok(()),
            Some(e) => self.fail(format!("unexpected {e:?} before {at:?}")),
        }
    }

    fn cond(&mut self, taken: bool) -> Result<(), String> {
        match self.q.cond() {
            Ok(t) if t == taken => {
                self.checked += 1;
                Ok(())
            }
            Ok(t) => self.fail(format!("TNT bit {t}, expected {taken}")),
            Err(c) => self.fail(format!("pt_qry_cond_branch: {}", error_name(c))),
        }
    }

    fn indirect(&mut self, to: u64) -> Result<(), String> {
        match self.q.indirect() {
            Ok(Some(ip)) if ip == to => {
                self.checked += 1;
                Ok(())
            }
            other => self.fail(format!("indirect branch {other:?}, expected {to:#x}")),
        }
    }

    fn step(&mut self, m: &Model, e: &Event) -> Result<(), String> {
        let to = e.next_ip(self.ip);
        let cpl = match *e {
            Event::Far { cpl, .. } => cpl,
            _ => self.cpl,
        };
        // PTW1: the PTW (and its FUP) comes before any disable the PTWRITE's own IP step causes.
        if let Event::Ptwrite { ip, payload, .. } = *e {
            if m.ptw && m.traced(ip, self.cpl) {
                let want_ip = m.fup_on_ptw.then_some(ip);
                self.expect_event(
                    |q| *q == QEvent::Ptwrite { ip: want_ip, payload },
                    &format!("ptwrite {payload:#x}"),
                )?;
            }
        }
        let pe0 = self.enabled;
        let pe1 = m.traced(to, cpl);
        match (pe0, pe1) {
            (true, true) => self.traced_step(m, e)?,
            (true, false) => {
                // PGD1/PGD2: a Jcc or compressed RET gives its bit first, then the disable.
                let first = match *e {
                    Event::CondBranch { taken, .. } => {
                        self.no_event(e)?;
                        self.cond(taken)?;
                        None
                    }
                    Event::Return { target, .. } => match self.event()? {
                        Some(ev) => Some(ev),
                        None => {
                            self.cond(true)?;
                            if self.stack.pop() != Some(target) {
                                return self.fail(format!("compressed RET to {target:#x} mismatches"));
                            }
                            None
                        }
                    },
                    _ => None,
                };
                let from = match *e {
                    Event::Far { kind, from, .. } if kind.is_async() => Some(from),
                    _ => None,
                };
                let ev = match first {
                    Some(ev) => ev,
                    None => self.event()?.ok_or_else(|| format!("no disable for {e:x?}"))?,
                };
                let ok = match (ev, from) {
                    (QEvent::AsyncDisabled { at, .. }, Some(f)) => at == f,
                    (QEvent::Disabled { .. }, None) => true,
                    _ => false,
                };
                if !ok {
                    return self.fail(format!("expected a disable for {e:x?}, libipt has {ev:?}"));
                }
                self.checked += 1;
                self.enabled = false;
            }
            (false, true) => {
                self.expect_event(
                    |q| *q == QEvent::Enabled { ip: to },
                    &format!("enabled at {to:#x}"),
                )?;
                self.enabled = true;
            }
            (false, false) => {
                // PIP1: a MOV CR3 in a traced context sends PIP with PacketEn = 0 too (outside the
                // filter range; SDM case 5f).
                if let Event::Cr3Write { cr3, .. } = *e {
                    if m.os && m.level(self.cpl) {
                        self.expect_event(
                            |q| {
                                *q == QEvent::Paging {
                                    cr3: cr3 & 0x000f_ffff_ffff_ffe0,
                                }
                            },
                            &format!("paging {cr3:#x} outside the filter"),
                        )?;
                    }
                }
            }
        }
        self.ip = to;
        self.cpl = cpl;
        Ok(())
    }

    fn traced_step(&mut self, m: &Model, e: &Event) -> Result<(), String> {
        match *e {
            Event::CondBranch { taken, .. } => {
                self.no_event(e)?;
                self.cond(taken)
            }
            Event::Call { ip, len, target } => {
                if target != ip + u64::from(len) {
                    self.stack.push(ip + u64::from(len));
                }
                Ok(())
            }
            Event::IndirectCall { ip, len, target } => {
                self.stack.push(ip + u64::from(len));
                self.no_event(e)?;
                self.indirect(target)
            }
            Event::IndirectJump { target, .. } => {
                self.no_event(e)?;
                self.indirect(target)
            }
            Event::Return { target, .. } => {
                self.no_event(e)?;
                match self.q.cond() {
                    Ok(true) => {
                        self.checked += 1;
                        match self.stack.pop() {
                            Some(t) if t == target => Ok(()),
                            other => {
                                self.fail(format!("compressed RET pops {other:x?}, went to {target:#x}"))
                            }
                        }
                    }
                    Ok(false) => self.fail("a not-taken bit for a RET".into()),
                    Err(_) => self.indirect(target),
                }
            }
            Event::Far { kind, from, to, .. } => {
                if kind.is_async() {
                    self.expect_event(
                        |q| *q == QEvent::AsyncBranch { from, to },
                        &format!("async branch {from:#x} -> {to:#x}"),
                    )?;
                    Ok(())
                } else {
                    self.no_event(e)?;
                    self.indirect(to)
                }
            }
            Event::Cr3Write { cr3, .. } if m.os => {
                self.expect_event(
                    |q| {
                        *q == QEvent::Paging {
                            cr3: cr3 & 0x000f_ffff_ffff_ffe0,
                        }
                    },
                    &format!("paging {cr3:#x}"),
                )?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[derive(Clone, Debug)]
struct Setup {
    os: bool,
    dis_retc: bool,
    psb_freq: u8,
    tsc: bool,
    mtc: bool,
    cyc: bool,
    ptw: bool,
    fup_on_ptw: bool,
    filter: bool,
    overflow: Option<u32>,
    /// The hardware layout (PADs as Skylake puts them, spec/hardware.md) or none.
    packed: bool,
    /// The packet choices (spec/hardware.md HW6-HW11).
    style: PacketStyle,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        any::<[bool; 9]>(),
        0u8..4,
        prop_oneof![3 => Just(None), 1 => (1u32..4).prop_map(Some)],
        prop_oneof![
            Just(PacketStyle::Sdm),
            Just(PacketStyle::Skylake),
            Just(PacketStyle::IceLake)
        ],
    )
        .prop_map(|(b, psb_freq, overflow, style)| Setup {
            os: b[0],
            dis_retc: b[1],
            psb_freq,
            tsc: b[2],
            mtc: b[3],
            cyc: b[4],
            ptw: b[5],
            fup_on_ptw: b[6],
            filter: b[7],
            overflow,
            packed: b[8],
            style,
        })
}

/// HW1-HW5: the tracer's packed stream is what `ptemu repack` makes of its packets, byte for byte.
fn same_as_repacked(bytes: &[u8]) -> Result<(), String> {
    let list = common::packets::decoded(bytes)?;
    let mut out = Vec::new();
    ptemu::packing::repack(Packing::Hardware, bytes, &list, &mut out).unwrap();
    match out.iter().zip(bytes).position(|(a, b)| a != b) {
        None if out.len() == bytes.len() => Ok(()),
        at => {
            let at = at.unwrap_or(out.len().min(bytes.len())) as u64;
            let near = |b: &[u8]| -> String {
                let list = common::packets::decoded(b).unwrap_or_default();
                let shown: Vec<String> = list
                    .iter()
                    .filter(|x| x.0 + 48 >= at && x.0 <= at + 16)
                    .map(|x| format!("{:#x} {}", x.0, ptemu::packet::text::to_text(&x.1)))
                    .collect();
                shown.join("; ")
            };
            Err(format!(
                "repack differs from the tracer's layout at byte {at:#x}:\n tracer {}\n repack {}",
                near(bytes),
                near(&out)
            ))
        }
    }
}

fn run(s: &Setup, ops: &[Op]) -> Result<(usize, u64), String> {
    let events = Program::build(ops);
    let cfg = TracerConfig::default()
        .with_overflow(s.overflow.map(|drain| Backpressure::new(256, drain, 8)))
        .with_packing(Some(if s.packed {
            Packing::Hardware
        } else {
            Packing::None
        }))
        .with_style(Some(s.style));
    let filter = s.filter.then_some((USER, USER + 0x8000));
    let mut r = TraceRig::new(cfg);
    if let Some((a, b)) = filter {
        r.wrmsr(ADDR0_A, a);
        r.wrmsr(ADDR0_B, b);
    }
    let ctl = RtitCtl::new()
        .with_branch_en(true)
        .with_user(true)
        .with_os(s.os)
        .with_dis_retc(s.dis_retc)
        .with_psb_freq(s.psb_freq)
        .with_tsc_en(s.tsc)
        .with_mtc_en(s.mtc)
        .with_mtc_freq(3)
        .with_cyc_en(s.cyc)
        .with_ptw_en(s.ptw)
        .with_fup_on_ptw(s.fup_on_ptw)
        .with_addr0_cfg(if s.filter { 1 } else { 0 });
    r.start(ctl);
    r.evs(&events);
    let end_ip = Program::end_ip(&events);
    r.stop_at(end_ip);
    let spans = r.tracer.overflows().to_vec();
    let bytes = r.bytes();
    if s.packed {
        same_as_repacked(&bytes)?;
    }
    if std::env::var_os("PTEMU_DEBUG").is_some() {
        for (i, e) in events.iter().enumerate() {
            eprintln!("event {}: {e:x?}", i + 1);
        }
        eprintln!("spans {spans:?}");
        for p in r.packets() {
            eprintln!("  {p:x?}");
        }
    }
    let clock = TracerConfig::default().clock;
    let q = Query::new(
        &bytes,
        Timing {
            mtc_freq: 3,
            nom_freq: clock.nominal_ratio,
            art_eax: 1,
            art_ebx: clock.tsc_per_art,
        },
    )
    .map_err(|c| format!("sync: {}", error_name(c)))?;
    let model = Model {
        os: s.os,
        user: true,
        filter,
        ptw: s.ptw,
        fup_on_ptw: s.fup_on_ptw,
    };
    let mut d = Driver {
        q,
        enabled: false,
        stack: Vec::new(),
        ip: WRMSR_IP + 2,
        cpl: 3,
        checked: 0,
    };
    // The enable: TIP.PGE at the instruction after the WRMSR, if traced there.
    if model.traced(d.ip, 3) {
        let ip = d.ip;
        d.expect_event(|q| *q == QEvent::Enabled { ip }, "the first enable")?;
        d.enabled = true;
    }
    for (i, e) in events.iter().enumerate() {
        let index = i as u64 + 1;
        if let Some(span) = spans
            .iter()
            .find(|s| s.lost_from <= index && index < s.resumed_at)
        {
            // Lost to the overflow: only the state moves on.
            let _ = span;
            d.silent_step(e);
            continue;
        }
        if spans.iter().any(|sp| sp.resumed_at == index && !sp.at_disable) {
            d.resume(&model, s.style)?;
        }
        d.step(&model, e)?;
    }
    let past_end = events.len() as u64 + 1;
    match spans.iter().find(|s| s.resumed_at == past_end && s.at_disable) {
        // An overflow that lasted to the end: OVF alone (OVF2).
        Some(sp) if sp.ended_by_disable => {
            d.expect_event(|q| *q == QEvent::Overflow { ip: None }, "the final overflow")?;
            d.enabled = false;
        }
        // The buffer drained by the WRMSR that ends tracing: the OVF goes out there, as at any
        // instruction (OVF2), before that WRMSR's FUP, TIP.PGD (PGD3).
        Some(_) => d.resume(&model, s.style)?,
        None => {}
    }
    // PGD3: the WRMSR that clears TraceEn.
    if d.enabled {
        d.expect_event(
            |q| matches!(q, QEvent::AsyncDisabled { at, ip: None } if *at == end_ip),
            "the final FUP, TIP.PGD()",
        )?;
    }
    Ok((d.checked, bytes.len() as u64))
}

impl Driver {
    fn enabled_model(&self, m: &Model) -> bool {
        m.traced(self.ip, self.cpl)
    }

    /// OVF2 (HW10): the OVF at which an overflow ends, at the current IP, and the packets
    /// that follow it while PacketEn.
    fn resume(&mut self, model: &Model, style: PacketStyle) -> Result<(), String> {
        let want = self.enabled_model(model).then_some(self.ip);
        if style == PacketStyle::Sdm {
            // OVF, then FUP(IP) while PacketEn (OVF2).
            self.expect_event(
                |q| *q == QEvent::Overflow { ip: want },
                &format!("overflow at {want:x?}"),
            )?;
        } else {
            // HW10: OVF, a PSB+ without FUP, then TIP.PGE(IP) while PacketEn.
            self.expect_event(|q| *q == QEvent::Overflow { ip: None }, "overflow")?;
            if let Some(ip) = want {
                self.expect_event(
                    |q| *q == QEvent::Enabled { ip },
                    &format!("enabled at {ip:#x} after the overflow"),
                )?;
            }
        }
        self.enabled = want.is_some();
        self.stack.clear();
        Ok(())
    }

    fn silent_step(&mut self, e: &Event) {
        self.ip = e.next_ip(self.ip);
        if let Event::Far { cpl, .. } = *e {
            self.cpl = cpl;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// TNT1, RET2, TIP1, TIP3, PGE1, PGD2, OVF2 against libipt's query decoder.
    #[test]
    fn tnt1_ret2_tip1_tip3_pge1_pgd2_ovf2_libipt_query_decoder_returns_what_went_in(
        s in setup(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        if let Err(e) = run(&s, &ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}
