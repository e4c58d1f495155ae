//! The body of the `capi` fuzz target (`fuzz/fuzz_targets/capi.rs`, `cargo xtask fuzz`), also run
//! by `tests/call_sequences.rs`: any sequence of C API calls on a unit and a tracer over guest
//! memory whose callbacks fail as the input says never panics, and no call loses bytes silently.

use crate::*;
use std::cell::{Cell, RefCell};
use std::ptr::null_mut;

/// The guest: 64 KiB, its callbacks failing as `plan` says.
struct Guest {
    bytes: RefCell<Vec<u8>>,
    plan: Cell<Plan>,
    /// Accesses since the plan was set.
    calls: Cell<u32>,
}

/// Which accesses the callbacks refuse.
#[derive(Clone, Copy, Debug)]
enum Plan {
    None,
    /// Reads of the ToPA tables (below 0x4000).
    TableReads,
    Writes,
    All,
    /// The access with this number.
    Nth(u32),
}

const GUEST: usize = 0x1_0000;
const TABLES: [u64; 2] = [0x1000, 0x2000];
const MSRS: [u32; 7] = [
    PTEMU_IA32_RTIT_CTL,
    PTEMU_IA32_RTIT_STATUS,
    PTEMU_IA32_RTIT_OUTPUT_BASE,
    PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS,
    PTEMU_IA32_RTIT_CR3_MATCH,
    PTEMU_IA32_PERF_GLOBAL_STATUS_RESET,
    0x10,
];
const PROFILES: [&std::ffi::CStr; 4] = [c"skylake", c"icelake", c"broadwell", c"generic-max"];

impl Guest {
    fn refused(&self, pa: u64, write: bool) -> bool {
        let n = self.calls.get();
        self.calls.set(n.wrapping_add(1));
        match self.plan.get() {
            Plan::None => false,
            Plan::TableReads => !write && pa < 0x4000,
            Plan::Writes => write,
            Plan::All => true,
            Plan::Nth(k) => n == k,
        }
    }
}

unsafe extern "C" fn read(ctx: *mut c_void, pa: u64, buf: *mut u8, len: usize) -> i32 {
    // SAFETY: ctx is the sequence's Guest, alive for the whole run; buf holds len bytes.
    let g = unsafe { &*(ctx as *const Guest) };
    let bytes = g.bytes.borrow();
    let end = pa.checked_add(len as u64);
    if g.refused(pa, false) || end.is_none_or(|e| e > GUEST as u64) {
        return -1;
    }
    // SAFETY: inside the guest, checked above.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().add(pa as usize), buf, len) };
    0
}

unsafe extern "C" fn write(ctx: *mut c_void, pa: u64, data: *const u8, len: usize) -> i32 {
    // SAFETY: as for read.
    let g = unsafe { &*(ctx as *const Guest) };
    let mut bytes = g.bytes.borrow_mut();
    let end = pa.checked_add(len as u64);
    if g.refused(pa, true) || end.is_none_or(|e| e > GUEST as u64) {
        return -1;
    }
    // SAFETY: inside the guest, checked above.
    unsafe { std::ptr::copy_nonoverlapping(data, bytes.as_mut_ptr().add(pa as usize), len) };
    0
}

/// The input, read a byte at a time (0 once it runs out).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn word(&mut self) -> u64 {
        (0..8).fold(0, |w, _| w << 8 | u64::from(self.byte()))
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[usize::from(self.byte()) % from.len()]
    }

    /// An MSR value: mostly one that makes sense for some MSR, sometimes any 64 bits.
    fn value(&mut self) -> u64 {
        match self.byte() % 8 {
            0 => self.word(),
            1 => self.pick(&[0x1000, 0x2000, 0x8000, 0x8001]),
            2 => self.pick(&[0x7f, 0xfff, 0x7f | 1 << 7, 0x7f | 0x20 << 32]),
            _ => {
                let bits = [
                    PTEMU_CTL_TRACE_EN,
                    PTEMU_CTL_TOPA,
                    PTEMU_CTL_BRANCH_EN,
                    PTEMU_CTL_USER,
                    PTEMU_CTL_OS,
                ];
                let mask = self.byte();
                let ctl = bits
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask >> i & 1 == 1)
                    .fold(0, |c, (_, b)| c | b);
                ctl | if mask >> 5 == 7 { self.word() } else { 0 }
            }
        }
    }

    fn event(&mut self) -> ptemu_event {
        let ips = [0x40_1000, 0x40_1010, 0x60_0000, 0xffff_ffff_8100_0000];
        ptemu_event {
            kind: u32::from(self.byte() % 18),
            far_kind: u32::from(self.byte() % 11),
            ip: self.pick(&ips),
            target: self.pick(&ips),
            value: self.word() % 4096,
            extra: 0,
            len: self.pick(&[2, 2, 5, 1, 15, 0, 16, 255]),
            flags: self.byte(),
            cpl: self.pick(&[0, 3, 3, 4]),
            mode: self.pick(&[64, 64, 32, 16, 0]),
            vector: self.byte(),
            a: self.byte(),
            b: self.byte(),
            c: self.byte(),
        }
    }
}

/// The MSRs the output unit behind `rd` reads back (None where RDMSR fails).
fn msrs(rd: impl Fn(u32, &mut u64) -> ptemu_status) -> [Option<u64>; 5] {
    std::array::from_fn(|i| {
        let mut v = 0;
        (rd(MSRS[i], &mut v) == PTEMU_OK).then_some(v)
    })
}

/// Runs the call sequence `data` describes and checks every call. Panics (a failed check) are the
/// findings.
#[doc(hidden)]
pub fn call_sequence(data: &[u8]) {
    let mut input = Input(data);
    let guest = Guest {
        bytes: RefCell::new(vec![0; GUEST]),
        plan: Cell::new(Plan::None),
        calls: Cell::new(0),
    };
    {
        // ToPA tables: mostly regions of 4 KiB from 0x4000 on, then END back.
        let mut bytes = guest.bytes.borrow_mut();
        for t in TABLES {
            let n = u64::from(input.byte() % 6);
            for i in 0..=n {
                let e = match input.byte() % 8 {
                    _ if i == n => t | PTEMU_TOPA_END,
                    0 => input.word(),
                    k => (0x4000 + u64::from(k) * 0x1000) | u64::from(input.byte() & 0x14),
                };
                let at = (t + 8 * i) as usize;
                bytes[at..at + 8].copy_from_slice(&e.to_le_bytes());
            }
        }
    }
    let profile = input.pick(&PROFILES);
    let (mut mem, mut unit, mut t) = (null_mut(), null_mut(), null_mut());
    let ctx = &guest as *const Guest as *mut c_void;
    // SAFETY: valid pointers; the guest outlives the memory object (freed at the end).
    unsafe {
        assert_eq!(
            ptemu_memory_new_callbacks(ctx, Some(read), Some(write), &mut mem),
            PTEMU_OK
        );
        assert_eq!(ptemu_unit_new(profile.as_ptr(), &mut unit), PTEMU_OK);
        assert_eq!(ptemu_tracer_new(profile.as_ptr(), &mut t), PTEMU_OK);
    }
    // SAFETY: live objects until the end, writable values.
    let unit_msrs = || msrs(|m, v| unsafe { ptemu_unit_rdmsr(unit, m, v) });
    // SAFETY: as above.
    let tracer_msrs = || msrs(|m, v| unsafe { ptemu_tracer_rdmsr(t, m, v) });
    let stats = || {
        let mut s = ptemu_stats::default();
        // SAFETY: live tracer, writable stats.
        assert_eq!(unsafe { ptemu_tracer_stats(t, &mut s) }, PTEMU_OK);
        s
    };
    for _ in 0..64 {
        if input.0.is_empty() {
            break;
        }
        let op = input.byte();
        guest.plan.set(match input.byte() % 8 {
            0 => Plan::TableReads,
            1 => Plan::Writes,
            2 => Plan::All,
            3 => Plan::Nth(u32::from(input.byte() % 8)),
            _ => Plan::None,
        });
        guest.calls.set(0);
        let plan = guest.plan.get();
        let (before_unit, before_tracer, before) = (unit_msrs(), tracer_msrs(), stats());
        // SAFETY: every pointer is live or a valid out pointer.
        let status = unsafe {
            match op % 10 {
                0 => {
                    let s = ptemu_unit_wrmsr(unit, mem, input.pick(&MSRS), input.value());
                    if s != PTEMU_OK {
                        assert_eq!(
                            unit_msrs(),
                            before_unit,
                            "a failed WRMSR ({s:?}) changed the MSRs"
                        );
                    }
                    s
                }
                1 => {
                    let mut v = 0;
                    ptemu_unit_rdmsr(unit, input.pick(&MSRS), &mut v)
                }
                2 => {
                    let len = usize::from(input.byte()) * 40;
                    let bytes = vec![0x55u8; len];
                    ptemu_unit_write(unit, mem, bytes.as_ptr(), len)
                }
                3 => {
                    let (msr, value, len) = (input.pick(&MSRS), input.value(), input.pick(&[2, 0, 15, 16]));
                    let s = ptemu_tracer_wrmsr(t, mem, msr, value, 0x40_1000, len);
                    let after = stats();
                    let unchanged = tracer_msrs() == before_tracer;
                    match s {
                        PTEMU_OK => {}
                        PTEMU_ERR_MEMORY => assert!(
                            unchanged || after.bytes_lost > before.bytes_lost,
                            "a WRMSR failed in memory ({plan:?}), took effect and lost nothing"
                        ),
                        _ => {
                            assert!(unchanged, "a refused WRMSR ({s:?}) changed the MSRs");
                            assert_eq!(after.bytes, before.bytes, "a refused WRMSR generated bytes");
                        }
                    }
                    let on = |m: [Option<u64>; 5]| m[0].unwrap_or(0) & 1 == 1;
                    let trigger = tracer_msrs()[1].unwrap_or(0) & 1 << 2 != 0;
                    if !on(before_tracer) && on(tracer_msrs()) && trigger {
                        assert!(
                            after.bytes > before.bytes,
                            "an enable with TriggerEn sent no packets"
                        );
                    }
                    s
                }
                4 | 5 => {
                    let n = usize::from(input.byte() % 100);
                    let evs: Vec<ptemu_event> = (0..n).map(|_| input.event()).collect();
                    let mut fed = usize::MAX;
                    let s = ptemu_tracer_events(t, mem, evs.as_ptr(), n, &mut fed);
                    let handled = stats().events - before.events;
                    assert_eq!(handled, fed as u64, "{s:?}: fed {fed} of {n}, handled {handled}");
                    match s {
                        PTEMU_OK => assert_eq!(fed, n),
                        PTEMU_ERR_MEMORY => assert!(fed >= 1 && fed <= n, "fed {fed} of {n}"),
                        _ => assert_eq!(fed, 0, "{s:?}"),
                    }
                    s
                }
                6 => {
                    let e = input.event();
                    let s = ptemu_tracer_event(t, mem, &e);
                    let fed = matches!(s, PTEMU_OK | PTEMU_ERR_MEMORY);
                    assert_eq!(stats().events - before.events, u64::from(fed), "{s:?}");
                    s
                }
                7 => {
                    let s = ptemu_tracer_flush(t, mem);
                    let after = stats();
                    assert_eq!(
                        after.bytes,
                        after.bytes_written + after.bytes_lost,
                        "after a flush ({s:?})"
                    );
                    s
                }
                8 => {
                    let (cpl, mode) = (input.pick(&[0, 3, 5]), input.pick(&[64, 32, 7]));
                    let s = ptemu_tracer_set_state(t, 0x40_1000, cpl, 0, mode);
                    let tracing = before_tracer[0].unwrap_or(0) & 1 == 1;
                    let bad = tracing || cpl > 3 || mode == 7;
                    assert_eq!(s, if bad { PTEMU_ERR_ARGUMENT } else { PTEMU_OK });
                    s
                }
                _ => {
                    let (mut e, mut got) = (ptemu_output_event::default(), true);
                    while got {
                        assert_eq!(ptemu_unit_poll_event(unit, &mut e, &mut got), PTEMU_OK);
                    }
                    got = true;
                    while got {
                        assert_eq!(ptemu_tracer_poll_event(t, &mut e, &mut got), PTEMU_OK);
                    }
                    PTEMU_OK
                }
            }
        };
        assert_ne!(status, PTEMU_ERR_PANIC, "op {op}: a panic inside ptemu");
        assert_ne!(status, PTEMU_ERR_NULL);
        // SAFETY: live objects.
        let (u, tr) = unsafe { (&(*unit).unit, (*t).tracer.unit()) };
        for (who, out) in [("unit", u), ("tracer's unit", tr)] {
            let (regs, s) = (out.registers(), out.stats());
            assert_eq!(
                regs.status.trigger_en(),
                out.output_enabled(),
                "{who}: TriggerEn says output is on or off, and it is (op {op}, {plan:?})"
            );
            assert!(
                !regs.status.trigger_en() || regs.ctl.trace_en(),
                "{who}: TriggerEn without TraceEn"
            );
            assert_eq!(
                s.bytes_in,
                s.bytes_written + s.bytes_lost,
                "{who}: every byte stored or lost"
            );
        }
    }
    // The end: memory back, a disable and a flush leave every generated byte stored or lost.
    guest.plan.set(Plan::None);
    // SAFETY: live objects.
    unsafe {
        let ctl = tracer_msrs()[0].unwrap_or(0);
        let s = ptemu_tracer_wrmsr(
            t,
            mem,
            PTEMU_IA32_RTIT_CTL,
            ctl & !PTEMU_CTL_TRACE_EN,
            0x40_1000,
            2,
        );
        assert!(matches!(s, PTEMU_OK | PTEMU_GP), "{s:?}");
        assert_eq!(ptemu_tracer_flush(t, mem), PTEMU_OK);
        let s = stats();
        assert_eq!(s.bytes, s.bytes_written + s.bytes_lost, "{s:?}");
        ptemu_tracer_free(t);
        ptemu_unit_free(unit);
        ptemu_memory_free(mem);
    }
}
