//! The C twins of the Rust queries (issue 43 §8; the list is `tests/twins.rs`) answer what the
//! Rust ones answer: a C unit or tracer and a Rust one fed the same calls report the same
//! statistics, violation, output and PacketEn state, CPUID values, clock and written regions,
//! checked after every step of a run that wraps a ToPA ring several times. Bad arguments are
//! status codes.

use ptemu_capi::*;
use ptemu_core::memory::{PhysMemory, SparseMemory};
use ptemu_core::output::OutputUnit;
use ptemu_core::regs::CpuProfile;
use ptemu_core::tracer::{Event, ExecMode, Tracer, TracerConfig};
use std::ffi::CStr;
use std::ptr::{null, null_mut};

const TABLE: u64 = 0x1000;
const RING: u64 = 0x10000;
const GUEST: usize = 1 << 20;
const IP: u64 = 0x40_1000;
const CTL: u64 = PTEMU_CTL_TRACE_EN | PTEMU_CTL_TOPA | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;

/// The ToPA table: two 4 KiB regions at RING (INT on the second), END back to the table; entry
/// `bad` (if any) replaced by one whose address is above MAXPHYADDR.
fn table(bad: Option<usize>) -> Vec<(u64, u64)> {
    let mut t = vec![
        (TABLE, RING),
        (TABLE + 8, (RING + 0x1000) | PTEMU_TOPA_INT),
        (TABLE + 16, TABLE | PTEMU_TOPA_END),
    ];
    if let Some(k) = bad {
        t[k].1 = 1 << 62;
    }
    t
}

/// The same guest twice: a host buffer behind a C memory object, and Rust sparse memory.
struct Guests {
    _buf: Vec<u8>,
    mem: *mut ptemu_memory,
    rust: SparseMemory,
}

impl Guests {
    fn new(bad: Option<usize>) -> Guests {
        let mut buf = vec![0u8; GUEST];
        let mut rust = SparseMemory::new();
        for (pa, v) in table(bad) {
            buf[pa as usize..pa as usize + 8].copy_from_slice(&v.to_le_bytes());
            rust.write(pa, &v.to_le_bytes()).unwrap();
        }
        let mut mem = null_mut();
        // SAFETY: `buf` outlives `mem` (Drop frees mem; the Vec's heap block does not move).
        let s = unsafe { ptemu_memory_new_buffer(0, buf.as_mut_ptr(), buf.len(), &mut mem) };
        assert_eq!(s, PTEMU_OK);
        Guests { _buf: buf, mem, rust }
    }
}

impl Drop for Guests {
    fn drop(&mut self) {
        // SAFETY: from ptemu_memory_new_buffer, freed once.
        unsafe { ptemu_memory_free(self.mem) };
    }
}

/// A C unit and a Rust unit for `cpu`, driven in step.
struct Units {
    c: *mut ptemu_unit,
    rust: OutputUnit,
}

impl Units {
    fn new(cpu: &CStr) -> Units {
        let mut c = null_mut();
        // SAFETY: valid pointers.
        assert_eq!(unsafe { ptemu_unit_new(cpu.as_ptr(), &mut c) }, PTEMU_OK);
        let rust = OutputUnit::new(CpuProfile::named(cpu.to_str().unwrap()).unwrap());
        Units { c, rust }
    }

    fn wrmsr(&mut self, g: &mut Guests, msr: u32, value: u64) {
        // SAFETY: live unit and memory.
        let s = unsafe { ptemu_unit_wrmsr(self.c, g.mem, msr, value) };
        assert_eq!(s, PTEMU_OK, "C wrmsr {msr:#x}");
        self.rust.wrmsr(&mut g.rust, msr, value).unwrap();
    }

    fn write(&mut self, g: &mut Guests, data: &[u8]) {
        // SAFETY: live unit and memory; `data` is readable.
        let s = unsafe { ptemu_unit_write(self.c, g.mem, data.as_ptr(), data.len()) };
        assert_eq!(s, PTEMU_OK);
        self.rust.write(&mut g.rust, data).unwrap();
    }

    fn stats(&self) -> ptemu_output_stats {
        let mut s = ptemu_output_stats::default();
        // SAFETY: live unit, writable out.
        assert_eq!(unsafe { ptemu_unit_stats(self.c, &mut s) }, PTEMU_OK);
        s
    }

    fn flag(&self, f: unsafe extern "C" fn(*mut ptemu_unit, *mut bool) -> ptemu_status) -> bool {
        let mut b = false;
        // SAFETY: live unit, writable out.
        assert_eq!(unsafe { f(self.c, &mut b) }, PTEMU_OK);
        b
    }

    /// Every query of the C unit against the Rust one.
    fn check(&mut self, when: &str) {
        let (c, r) = (self.stats(), self.rust.stats());
        assert_eq!(
            (
                c.bytes_in,
                c.bytes_written,
                c.bytes_lost,
                c.bytes_overwritten,
                c.laps
            ),
            (
                r.bytes_in,
                r.bytes_written,
                r.bytes_lost,
                r.bytes_overwritten,
                r.laps
            ),
            "stats {when}"
        );
        assert_eq!(
            self.flag(ptemu_unit_output_enabled),
            self.rust.output_enabled(),
            "output_enabled {when}"
        );
        assert_eq!(
            self.flag(ptemu_unit_psb_due_on_enable),
            self.rust.psb_due_on_enable(),
            "psb_due {when}"
        );
        let (mut v, mut got) = (ptemu_violation::default(), false);
        // SAFETY: live unit, writable outs.
        let s = unsafe { ptemu_unit_last_violation(self.c, &mut v, &mut got) };
        assert_eq!(s, PTEMU_OK);
        match self.rust.last_violation() {
            None => assert!(!got, "a violation in C only {when}"),
            Some(rv) => {
                assert!(got, "no violation in C {when}");
                // SAFETY: static and per-unit NUL-terminated strings.
                let (rule, msg) = unsafe { (CStr::from_ptr(v.rule), CStr::from_ptr(v.message)) };
                assert_eq!(rule.to_str().unwrap(), rv.rule.id(), "rule {when}");
                assert_eq!(msg.to_str().unwrap(), rv.message, "message {when}");
                assert_eq!(v.has_entry, rv.table.is_some(), "has_entry {when}");
                assert_eq!(
                    (v.table, v.index, v.entry),
                    (
                        rv.table.unwrap_or(0),
                        rv.index.unwrap_or(0),
                        rv.entry.unwrap_or(0)
                    )
                );
            }
        }
        let mut n = usize::MAX;
        // SAFETY: live unit; cap 0 with NULL out; writable n.
        let s = unsafe { ptemu_unit_written_regions(self.c, null_mut(), 0, &mut n) };
        assert_eq!(s, PTEMU_OK);
        let mut regions = vec![ptemu_region::default(); n];
        // SAFETY: `regions` holds n writable regions.
        let s = unsafe { ptemu_unit_written_regions(self.c, regions.as_mut_ptr(), n, &mut n) };
        assert_eq!(s, PTEMU_OK);
        let want: Vec<_> = self
            .rust
            .written_regions()
            .map(|(base, size)| ptemu_region { base, size })
            .collect();
        assert_eq!(regions, want, "written regions {when}");
    }
}

impl Drop for Units {
    fn drop(&mut self) {
        // SAFETY: from ptemu_unit_new, freed once.
        unsafe { ptemu_unit_free(self.c) };
    }
}

/// Packet-like bytes: `n` of them, not all alike.
fn bytes(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|k| (k * 31 + seed) as u8).collect()
}

#[test]
fn ptemu_unit_stats_and_the_other_unit_queries_equal_the_rust_ones_as_a_ring_wraps() {
    let mut g = Guests::new(None);
    let mut u = Units::new(c"icelake");
    // SAFETY: live unit.
    assert_eq!(unsafe { ptemu_unit_track_regions(u.c, true) }, PTEMU_OK);
    u.rust.track_regions(true);
    u.check("at reset");
    u.write(&mut g, &bytes(100, 0)); // output off: lost
    u.check("after a write with output off");
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE);
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f);
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_CTL, CTL);
    u.check("after enable");
    for k in 0..120 {
        u.write(&mut g, &bytes(100 + 37 * (k % 11), k));
        u.check(&format!("after write {k}"));
        if k == 60 {
            // Off and on again: bytes in between are lost, the ring goes on where it was.
            u.wrmsr(&mut g, PTEMU_IA32_RTIT_CTL, CTL & !PTEMU_CTL_TRACE_EN);
            u.write(&mut g, &bytes(50, k));
            u.check("while disabled");
            u.wrmsr(&mut g, PTEMU_IA32_RTIT_CTL, CTL);
        }
    }
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_CTL, CTL & !PTEMU_CTL_TRACE_EN);
    u.check("after disable");
    let s = u.stats();
    // The run did what the test is about: the ring wrapped, several times, and bytes were lost.
    assert!(
        s.laps >= 3 && s.bytes_overwritten > 0 && s.bytes_lost >= 150,
        "{s:?}"
    );
    assert_eq!(s.bytes_in, s.bytes_written + s.bytes_lost);
}

#[test]
fn an_operational_error_is_the_same_violation_in_c_and_in_rust() {
    let mut g = Guests::new(Some(1));
    let mut u = Units::new(c"icelake");
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE);
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f);
    u.wrmsr(&mut g, PTEMU_IA32_RTIT_CTL, CTL);
    for k in 0..3 {
        u.write(&mut g, &bytes(3000, k));
        u.check(&format!("after write {k}"));
    }
    assert!(
        u.rust.last_violation().is_some(),
        "the bad entry made no operational error"
    );
    assert!(
        !u.flag(ptemu_unit_output_enabled),
        "output is off after the error"
    );
}

#[test]
fn ptemu_unit_cpuid_reports_leaf_14h_of_every_profile() {
    for name in CpuProfile::NAMES {
        let cpu = std::ffi::CString::new(*name).unwrap();
        let u = Units::new(&cpu);
        let p = CpuProfile::named(name).unwrap();
        for (sub, want) in [(0, p.leaf14_0), (1, p.leaf14_1)] {
            let mut r = ptemu_cpuid::default();
            // SAFETY: live unit, writable out.
            assert_eq!(unsafe { ptemu_unit_cpuid(u.c, 0x14, sub, &mut r) }, PTEMU_OK);
            assert_eq!(
                (r.eax, r.ebx, r.ecx, r.edx),
                (want.eax, want.ebx, want.ecx, want.edx),
                "{name}.{sub}"
            );
        }
        let mut r = ptemu_cpuid {
            eax: 1,
            ebx: 1,
            ecx: 1,
            edx: 1,
        };
        // SAFETY: as above.
        unsafe {
            assert_eq!(ptemu_unit_cpuid(u.c, 0x14, 2, &mut r), PTEMU_OK);
            assert_eq!(r, ptemu_cpuid::default(), "sub-leaves past the last read as zero");
            assert_eq!(ptemu_unit_cpuid(u.c, 7, 0, &mut r), PTEMU_NOT_MODELLED);
        }
    }
}

/// A conditional branch (taken or not), a call, a return, an indirect jump back, and cycles,
/// as C events and the same Rust events.
fn events(n: usize) -> (Vec<ptemu_event>, Vec<Event>) {
    let (mut c, mut r) = (Vec::new(), Vec::new());
    for i in 0..n {
        let taken = i % 3 != 0;
        let f = IP + 0x100;
        c.extend([
            ptemu_event {
                kind: PTEMU_EV_COND_BRANCH,
                ip: IP,
                len: 2,
                target: IP + 0x10,
                flags: if taken { PTEMU_EVF_TAKEN } else { 0 },
                ..Default::default()
            },
            ptemu_event {
                kind: PTEMU_EV_CALL,
                ip: IP + 0x10,
                len: 5,
                target: f,
                ..Default::default()
            },
            ptemu_event {
                kind: PTEMU_EV_RETURN,
                ip: f,
                target: IP + 0x15,
                ..Default::default()
            },
            ptemu_event {
                kind: PTEMU_EV_INDIRECT_JUMP,
                ip: IP + 0x15,
                target: IP,
                ..Default::default()
            },
            ptemu_event {
                kind: PTEMU_EV_CYCLES,
                value: 7,
                ..Default::default()
            },
        ]);
        r.extend([
            Event::CondBranch {
                ip: IP,
                len: 2,
                target: IP + 0x10,
                taken,
            },
            Event::Call {
                ip: IP + 0x10,
                len: 5,
                target: f,
            },
            Event::Return {
                ip: f,
                target: IP + 0x15,
            },
            Event::IndirectJump {
                ip: IP + 0x15,
                target: IP,
            },
            Event::Cycles(7),
        ]);
    }
    (c, r)
}

/// Every tracer query of the C tracer `t` against the Rust tracer `r`.
fn check_tracer(t: *mut ptemu_tracer, r: &Tracer, when: &str) {
    let (rs, ro) = (r.stats(), r.unit().stats());
    let mut s = ptemu_stats::default();
    let mut o = ptemu_output_stats::default();
    let (mut clock, mut pe, mut on) = (ptemu_clock::default(), false, false);
    // SAFETY: live tracer, writable outs.
    unsafe {
        assert_eq!(ptemu_tracer_stats(t, &mut s), PTEMU_OK);
        assert_eq!(ptemu_tracer_unit_stats(t, &mut o), PTEMU_OK);
        assert_eq!(ptemu_tracer_clock(t, &mut clock), PTEMU_OK);
        assert_eq!(ptemu_tracer_packet_en(t, &mut pe), PTEMU_OK);
        assert_eq!(ptemu_tracer_output_enabled(t, &mut on), PTEMU_OK);
    }
    assert_eq!(
        [
            s.events,
            s.instructions,
            s.bytes,
            s.psbs,
            s.overflows,
            s.tnt_bits,
            s.compressed_returns
        ],
        [
            rs.events,
            rs.instructions,
            rs.bytes,
            rs.psbs,
            rs.overflows,
            rs.tnt_bits,
            rs.compressed_returns
        ],
        "tracer stats {when}"
    );
    assert_eq!(
        [s.dropped_events, s.bytes_dropped, s.packets_lost, s.ptwrites_off],
        [
            rs.dropped_events,
            rs.bytes_dropped,
            rs.packets_lost,
            rs.ptwrites_off
        ],
        "tracer stats {when}"
    );
    let unit = [
        ro.bytes_in,
        ro.bytes_written,
        ro.bytes_lost,
        ro.bytes_overwritten,
        ro.laps,
    ];
    assert_eq!(
        [
            s.bytes_in,
            s.bytes_written,
            s.bytes_lost,
            s.bytes_overwritten,
            s.laps
        ],
        unit,
        "{when}"
    );
    assert_eq!(
        [
            o.bytes_in,
            o.bytes_written,
            o.bytes_lost,
            o.bytes_overwritten,
            o.laps
        ],
        unit,
        "{when}"
    );
    let c = r.clock();
    let (ctc, fc) = c.tma();
    assert_eq!(
        clock,
        ptemu_clock {
            cycles: c.cycles(),
            tsc: c.tsc(),
            art: c.art(),
            tma_ctc: ctc,
            tma_fc: fc,
            core_ratio: c.core_ratio()
        },
        "clock {when}"
    );
    assert_eq!(pe, r.packet_en(), "packet_en {when}");
    assert_eq!(on, r.unit().output_enabled(), "output_enabled {when}");
    let mut total = 0;
    for name in ptemu_core::packet::Packet::KIND_NAMES {
        let cname = std::ffi::CString::new(name).unwrap();
        let mut n = u64::MAX;
        // SAFETY: live tracer, NUL-terminated name, writable out.
        let s = unsafe { ptemu_tracer_packet_count(t, cname.as_ptr(), &mut n) };
        assert_eq!(s, PTEMU_OK);
        assert_eq!(n, rs.count(name), "{name} packets {when}");
        total += n;
    }
    assert_eq!(
        total,
        rs.packets.iter().sum::<u64>(),
        "every packet kind is counted {when}"
    );
    let (mut v, mut got) = (ptemu_violation::default(), true);
    // SAFETY: live tracer, writable outs.
    let s = unsafe { ptemu_tracer_last_violation(t, &mut v, &mut got) };
    assert_eq!(s, PTEMU_OK);
    assert_eq!(got, r.unit().last_violation().is_some(), "violation {when}");
}

#[test]
fn ptemu_tracer_stats_and_the_other_tracer_queries_equal_the_rust_ones() {
    let mut g = Guests::new(None);
    let mut t = null_mut();
    let mut r = Tracer::new(
        OutputUnit::new(CpuProfile::named("icelake").unwrap()),
        TracerConfig::default(),
    );
    // SAFETY: valid pointers, live tracer and memory throughout.
    unsafe {
        assert_eq!(ptemu_tracer_new(c"icelake".as_ptr(), &mut t), PTEMU_OK);
        assert_eq!(ptemu_tracer_set_state(t, IP, 3, 0, PTEMU_MODE_64), PTEMU_OK);
        r.set_state(IP, 3, 0, ExecMode::Bits64);
        check_tracer(t, &r, "at start");
        for (msr, v) in [
            (PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE),
            (PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f),
            (PTEMU_IA32_RTIT_CTL, CTL),
        ] {
            assert_eq!(ptemu_tracer_wrmsr(t, g.mem, msr, v, IP, 2), PTEMU_OK);
            r.wrmsr(&mut g.rust, msr, v, IP, 2).unwrap();
        }
        check_tracer(t, &r, "after enable");
        let (c, rust) = events(6000);
        for (k, (cb, rb)) in c.chunks(250).zip(rust.chunks(250)).enumerate() {
            let mut fed = 0;
            assert_eq!(
                ptemu_tracer_events(t, g.mem, cb.as_ptr(), cb.len(), &mut fed),
                PTEMU_OK
            );
            r.events(&mut g.rust, rb).unwrap();
            check_tracer(t, &r, &format!("after batch {k}"));
        }
        assert_eq!(
            ptemu_tracer_wrmsr(t, g.mem, PTEMU_IA32_RTIT_CTL, CTL & !PTEMU_CTL_TRACE_EN, IP, 2),
            PTEMU_OK
        );
        r.wrmsr(&mut g.rust, PTEMU_IA32_RTIT_CTL, CTL & !PTEMU_CTL_TRACE_EN, IP, 2)
            .unwrap();
        check_tracer(t, &r, "after disable");
        let mut s = ptemu_stats::default();
        assert_eq!(ptemu_tracer_stats(t, &mut s), PTEMU_OK);
        assert!(
            s.laps >= 2 && s.tnt_bits > 0 && s.psbs > 0,
            "the run wrapped its ring: {s:?}"
        );
        let mut n = 0;
        assert_eq!(ptemu_tracer_packet_count(t, c"tip".as_ptr(), &mut n), PTEMU_OK);
        assert!(n > 0, "indirect jumps send TIPs");
        assert_eq!(
            ptemu_tracer_packet_count(t, c"nope".as_ptr(), &mut n),
            PTEMU_ERR_ARGUMENT
        );
        let mut cpu = ptemu_cpuid::default();
        assert_eq!(ptemu_tracer_cpuid(t, 0x14, 0, &mut cpu), PTEMU_OK);
        assert_eq!(cpu.ebx, r.unit().cpu().leaf14_0.ebx);
        ptemu_tracer_free(t);
    }
}

#[test]
fn the_query_twins_refuse_null_pointers() {
    let g = Guests::new(None);
    let u = Units::new(c"skylake");
    let mut t = null_mut();
    let (mut b, mut n) = (false, 0usize);
    let mut v = ptemu_violation::default();
    // SAFETY: every pointer is NULL or valid; the NULLs are the point.
    unsafe {
        assert_eq!(ptemu_tracer_new(c"skylake".as_ptr(), &mut t), PTEMU_OK);
        assert_eq!(
            ptemu_unit_stats(null_mut(), &mut ptemu_output_stats::default()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_unit_stats(u.c, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_unit_last_violation(null_mut(), &mut v, &mut b),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_unit_last_violation(u.c, null_mut(), &mut b), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_last_violation(u.c, &mut v, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_output_enabled(null_mut(), &mut b), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_output_enabled(u.c, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_psb_due_on_enable(null_mut(), &mut b), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_psb_due_on_enable(u.c, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_unit_cpuid(null_mut(), 0x14, 0, &mut ptemu_cpuid::default()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_unit_cpuid(u.c, 0x14, 0, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(ptemu_unit_track_regions(null_mut(), true), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_unit_written_regions(null_mut(), null_mut(), 0, &mut n),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_unit_written_regions(u.c, null_mut(), 0, null_mut()),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_unit_written_regions(u.c, null_mut(), 4, &mut n),
            PTEMU_ERR_NULL
        );
        assert_eq!(
            ptemu_tracer_unit_stats(null_mut(), &mut ptemu_output_stats::default()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_unit_stats(t, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_tracer_last_violation(null_mut(), &mut v, &mut b),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_last_violation(t, &mut v, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(ptemu_tracer_output_enabled(null_mut(), &mut b), PTEMU_ERR_NULL);
        assert_eq!(ptemu_tracer_output_enabled(t, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_tracer_cpuid(null_mut(), 0x14, 0, &mut ptemu_cpuid::default()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_cpuid(t, 0x14, 0, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(ptemu_tracer_packet_en(null_mut(), &mut b), PTEMU_ERR_NULL);
        assert_eq!(ptemu_tracer_packet_en(t, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_tracer_clock(null_mut(), &mut ptemu_clock::default()),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_clock(t, null_mut()), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_tracer_packet_count(null_mut(), c"tip".as_ptr(), &mut 0),
            PTEMU_ERR_NULL
        );
        assert_eq!(ptemu_tracer_packet_count(t, null(), &mut 0), PTEMU_ERR_NULL);
        assert_eq!(
            ptemu_tracer_packet_count(t, c"tip".as_ptr(), null_mut()),
            PTEMU_ERR_NULL
        );
        // The same calls with good pointers succeed: each NULL above is what failed.
        assert_eq!(ptemu_unit_written_regions(u.c, null_mut(), 0, &mut n), PTEMU_OK);
        assert_eq!(ptemu_tracer_packet_count(t, c"tip".as_ptr(), &mut 0), PTEMU_OK);
        assert_eq!(ptemu_unit_last_violation(u.c, &mut v, &mut b), PTEMU_OK);
        ptemu_tracer_free(t);
    }
    drop(g);
}
