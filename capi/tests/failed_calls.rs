//! Calls that fail half-way through the C API (spec/output.md, "Memory errors"): a WRMSR whose
//! enable cannot read the ToPA table did not happen, a batch that meets a refused store tells how
//! many events it fed, and what the SDM cannot produce (instruction lengths of 0 or above 15,
//! set_state while tracing) is refused with PTEMU_ERR_ARGUMENT. No call loses bytes silently.

use ptemu_capi::*;
use std::cell::{Cell, RefCell};
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

const TABLE: u64 = 0x1000;
const RING: u64 = 0x10_0000;
const CTL: u64 = PTEMU_CTL_TRACE_EN | PTEMU_CTL_TOPA | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;
const IP: u64 = 0x40_1000;

fn last_error() -> String {
    // SAFETY: NUL-terminated, valid until the next failing call on this thread.
    unsafe { CStr::from_ptr(ptemu_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A 2 MiB guest behind callbacks that refuse reads of the ToPA table, or stores into the ring,
/// while told to. A ToPA ring of two 4 KiB regions at RING, END back to TABLE.
struct Guest {
    bytes: RefCell<Vec<u8>>,
    refuse_table: Cell<bool>,
    refuse_ring: Cell<bool>,
}

impl Guest {
    fn new() -> Guest {
        let mut bytes = vec![0u8; 2 << 20];
        let mut put = |pa: u64, v: u64| bytes[pa as usize..pa as usize + 8].copy_from_slice(&v.to_le_bytes());
        put(TABLE, RING);
        put(TABLE + 8, RING + 0x1000);
        put(TABLE + 16, TABLE | PTEMU_TOPA_END);
        Guest {
            bytes: RefCell::new(bytes),
            refuse_table: Cell::new(false),
            refuse_ring: Cell::new(false),
        }
    }

    fn refused(&self, pa: u64, len: usize) -> bool {
        let hits = |from: u64, size: u64| pa < from + size && pa + len as u64 > from;
        (self.refuse_table.get() && hits(TABLE, 0x1000)) || (self.refuse_ring.get() && hits(RING, 0x2000))
    }

    /// The memory object over this guest; free it with ptemu_memory_free.
    fn memory(&self) -> *mut ptemu_memory {
        let mut mem = null_mut();
        let ctx = self as *const Guest as *mut c_void;
        // SAFETY: the guest outlives the memory object in every test.
        let s = unsafe { ptemu_memory_new_callbacks(ctx, Some(read), Some(write), &mut mem) };
        assert_eq!(s, PTEMU_OK);
        mem
    }
}

unsafe extern "C" fn read(ctx: *mut c_void, pa: u64, buf: *mut u8, len: usize) -> i32 {
    // SAFETY: ctx is the test's Guest; buf holds len bytes.
    let g = unsafe { &*(ctx as *const Guest) };
    let bytes = g.bytes.borrow();
    if g.refused(pa, len) || pa as usize + len > bytes.len() {
        return -1;
    }
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().add(pa as usize), buf, len) };
    0
}

unsafe extern "C" fn write(ctx: *mut c_void, pa: u64, data: *const u8, len: usize) -> i32 {
    // SAFETY: ctx is the test's Guest; data holds len bytes.
    let g = unsafe { &*(ctx as *const Guest) };
    let mut bytes = g.bytes.borrow_mut();
    if g.refused(pa, len) || pa as usize + len > bytes.len() {
        return -1;
    }
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(data, bytes.as_mut_ptr().add(pa as usize), len) };
    0
}

/// A taken conditional branch and an indirect jump back, `n` times over.
fn branches(n: usize) -> Vec<ptemu_event> {
    (0..n)
        .flat_map(|i| {
            [
                ptemu_event {
                    kind: PTEMU_EV_COND_BRANCH,
                    ip: IP,
                    len: 2,
                    target: IP + 0x10,
                    flags: if i % 3 == 0 { PTEMU_EVF_TAKEN } else { 0 },
                    ..Default::default()
                },
                ptemu_event {
                    kind: PTEMU_EV_INDIRECT_JUMP,
                    ip: IP + 0x10,
                    target: IP,
                    ..Default::default()
                },
            ]
        })
        .collect()
}

/// A tracer with the ToPA MSRs programmed (TraceEn still 0).
///
/// # Safety
/// `mem` must be live.
unsafe fn tracer(mem: *mut ptemu_memory) -> *mut ptemu_tracer {
    let mut t = null_mut();
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(ptemu_tracer_new(c"skylake".as_ptr(), &mut t), PTEMU_OK);
        assert_eq!(ptemu_tracer_set_state(t, IP, 3, 0, PTEMU_MODE_64), PTEMU_OK);
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE, IP, 2),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f, IP, 2),
            PTEMU_OK
        );
    }
    t
}

fn stats(t: *mut ptemu_tracer) -> ptemu_stats {
    let mut s = ptemu_stats::default();
    // SAFETY: t is live in every caller.
    assert_eq!(unsafe { ptemu_tracer_stats(t, &mut s) }, PTEMU_OK);
    s
}

#[test]
fn a_failed_enable_did_not_happen_for_the_unit() {
    let g = Guest::new();
    let mem = g.memory();
    let mut unit = null_mut();
    let mut v = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(ptemu_unit_new(c"skylake".as_ptr(), &mut unit), PTEMU_OK);
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f),
            PTEMU_OK
        );
        g.refuse_table.set(true);
        assert_eq!(
            ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, CTL),
            PTEMU_ERR_MEMORY
        );
        assert!(last_error().contains("0x1000"), "{}", last_error());
        assert_eq!(ptemu_unit_rdmsr(unit, PTEMU_IA32_RTIT_CTL, &mut v), PTEMU_OK);
        assert_eq!(v, 0, "CTL as before: the WRMSR did not happen");
        assert_eq!(ptemu_unit_rdmsr(unit, PTEMU_IA32_RTIT_STATUS, &mut v), PTEMU_OK);
        assert_eq!(v & 1 << 2, 0, "TriggerEn");
        // The same WRMSR once the table reads: tracing, and the bytes land.
        g.refuse_table.set(false);
        assert_eq!(ptemu_unit_wrmsr(unit, mem, PTEMU_IA32_RTIT_CTL, CTL), PTEMU_OK);
        let data = [0x02u8, 0x82, 0x02, 0x82];
        assert_eq!(ptemu_unit_write(unit, mem, data.as_ptr(), data.len()), PTEMU_OK);
        assert_eq!(&g.bytes.borrow()[RING as usize..RING as usize + 4], &data);
        ptemu_unit_free(unit);
        ptemu_memory_free(mem);
    }
}

#[test]
fn a_failed_enable_did_not_happen_for_the_tracer_and_events_then_are_untraced() {
    let g = Guest::new();
    let mem = g.memory();
    let evs = branches(100);
    let mut v = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        let t = tracer(mem);
        g.refuse_table.set(true);
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, CTL, IP, 2),
            PTEMU_ERR_MEMORY
        );
        assert_eq!(ptemu_tracer_rdmsr(t, PTEMU_IA32_RTIT_CTL, &mut v), PTEMU_OK);
        assert_eq!(v, 0, "the WRMSR did not happen");
        let mut fed = 0;
        assert_eq!(
            ptemu_tracer_events(t, mem, evs.as_ptr(), evs.len(), &mut fed),
            PTEMU_OK
        );
        let s = stats(t);
        assert_eq!((fed, s.events), (evs.len(), evs.len() as u64));
        assert_eq!(
            (s.bytes, s.bytes_lost),
            (0, 0),
            "untraced, as CTL says: nothing to lose"
        );
        g.refuse_table.set(false);
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, CTL, IP, 2),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_tracer_events(t, mem, evs.as_ptr(), evs.len(), &mut fed),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, 0, IP, 2),
            PTEMU_OK
        );
        let s = stats(t);
        assert!(s.bytes > 100, "traced: {s:?}");
        assert_eq!((s.bytes_written, s.bytes_lost), (s.bytes, 0));
        ptemu_tracer_free(t);
        ptemu_memory_free(mem);
    }
}

#[test]
fn ptemu_tracer_events_tells_how_many_events_a_failed_batch_fed() {
    let g = Guest::new();
    let mem = g.memory();
    let evs = branches(5_000);
    // SAFETY: valid pointers throughout.
    unsafe {
        let t = tracer(mem);
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, CTL, IP, 2),
            PTEMU_OK
        );
        g.refuse_ring.set(true);
        let mut fed = usize::MAX;
        assert_eq!(
            ptemu_tracer_events(t, mem, evs.as_ptr(), evs.len(), &mut fed),
            PTEMU_ERR_MEMORY
        );
        assert!(fed > 0 && fed < evs.len(), "{fed}");
        assert!(
            last_error().contains(&format!("event {}", fed - 1)),
            "{}",
            last_error()
        );
        let s = stats(t);
        assert_eq!(s.events, fed as u64, "fed = handled");
        assert!(s.bytes_lost > 0, "{s:?}");
        // One event whose bytes wait in the buffer: fed; the flush's store fails, and the
        // bytes count as lost.
        let lost = s.bytes_lost;
        assert_eq!(ptemu_tracer_event(t, mem, &evs[1]), PTEMU_OK);
        assert_eq!(ptemu_tracer_flush(t, mem), PTEMU_ERR_MEMORY);
        assert!(stats(t).bytes_lost > lost);
        // The rest, once the ring takes stores again.
        g.refuse_ring.set(false);
        let rest = &evs[fed..];
        let mut fed2 = 0;
        assert_eq!(
            ptemu_tracer_events(t, mem, rest.as_ptr(), rest.len(), &mut fed2),
            PTEMU_OK
        );
        assert_eq!(fed2, rest.len());
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, 0, IP, 2),
            PTEMU_OK
        );
        let s = stats(t);
        assert_eq!(s.events, evs.len() as u64 + 1);
        assert_eq!(
            s.bytes,
            s.bytes_written + s.bytes_lost,
            "nothing lost silently: {s:?}"
        );
        ptemu_tracer_free(t);
        ptemu_memory_free(mem);
    }
}

#[test]
fn what_the_sdm_cannot_produce_is_an_argument_error() {
    let g = Guest::new();
    let mem = g.memory();
    let mut v = 0;
    // SAFETY: valid pointers throughout.
    unsafe {
        let t = tracer(mem);
        for kind in [
            PTEMU_EV_RETIRE,
            PTEMU_EV_COND_BRANCH,
            PTEMU_EV_CALL,
            PTEMU_EV_INDIRECT_CALL,
            PTEMU_EV_SET_IF,
            PTEMU_EV_CR3_WRITE,
            PTEMU_EV_PTWRITE,
            PTEMU_EV_MWAIT,
        ] {
            for len in [0, 16, 255] {
                let e = ptemu_event {
                    kind,
                    ip: IP,
                    len,
                    target: IP + 0x20,
                    ..Default::default()
                };
                let batch = [branches(1)[1], e];
                let mut fed = usize::MAX;
                let s = ptemu_tracer_events(t, mem, batch.as_ptr(), 2, &mut fed);
                assert_eq!(s, PTEMU_ERR_ARGUMENT, "kind {kind} len {len}");
                assert_eq!(fed, 0);
                let msg = last_error();
                assert!(
                    msg.contains("event 1") && msg.contains(&format!("len {len}")),
                    "{msg}"
                );
                assert_eq!(
                    ptemu_tracer_event(t, mem, &ptemu_event { len: 15, ..e }),
                    PTEMU_OK
                );
            }
        }
        // Kinds that do not name `len` ignore it.
        let jump = ptemu_event {
            kind: PTEMU_EV_JUMP,
            ip: IP,
            target: IP,
            ..Default::default()
        };
        assert_eq!(ptemu_tracer_event(t, mem, &jump), PTEMU_OK);
        // A WRMSR longer than 15 bytes: refused, nothing happens.
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, CTL, IP, 16),
            PTEMU_ERR_ARGUMENT
        );
        assert!(last_error().contains("len 16"), "{}", last_error());
        assert_eq!(ptemu_tracer_rdmsr(t, PTEMU_IA32_RTIT_CTL, &mut v), PTEMU_OK);
        assert_eq!(v, 0);
        // set_state while tracing: refused; before and after, fine.
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, CTL, IP, 15),
            PTEMU_OK
        );
        assert_eq!(
            ptemu_tracer_set_state(t, IP, 3, 0, PTEMU_MODE_64),
            PTEMU_ERR_ARGUMENT
        );
        assert!(last_error().contains("tracing"), "{}", last_error());
        assert_eq!(
            ptemu_tracer_wrmsr(t, mem, PTEMU_IA32_RTIT_CTL, 0, IP, 0),
            PTEMU_OK
        );
        assert_eq!(ptemu_tracer_set_state(t, IP, 3, 0, PTEMU_MODE_64), PTEMU_OK);
        ptemu_tracer_free(t);
        ptemu_memory_free(mem);
    }
}
