//! The C twins of the Rust queries an embedder needs (`OutputUnit`, `Tracer`, `Clock`):
//! statistics, the last operational error, whether output and packet generation are on, the
//! CPUID values of the profile, the clock, and the regions output wrote. `tests/twins.rs` lists
//! every public Rust query with its C twin, or the reason it has none.

use crate::status::*;
use crate::{live, ptemu_tracer, ptemu_unit, put};
use ptemu_core::output::{OutputStats, Violation};
use ptemu_core::packet::Packet;
use ptemu_core::regs::CpuProfile;
use std::ffi::{c_char, CStr, CString};

/// Byte counts of the stream an output unit was given (the Rust `OutputStats`; spec/output.md,
/// "Laps and overwrites"). Every byte handed in is written or lost: bytes_in = bytes_written +
/// bytes_lost.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ptemu_output_stats {
    /// Bytes handed in.
    pub bytes_in: u64,
    /// Bytes stored (or sent to the trace transport with FabricEn=1).
    pub bytes_written: u64,
    /// Bytes dropped because output was off (TraceEn=0, Stopped, Error), halted mid-write, or
    /// refused by memory.
    pub bytes_lost: u64,
    /// Stored bytes that landed on memory this unit had already written; bytes_written -
    /// bytes_overwritten addresses hold stream bytes.
    pub bytes_overwritten: u64,
    /// Laps: 1 when output first lands on bytes it wrote before (a circular ToPA or a single
    /// range coming round), plus 1 each time output later enters the region where that happened.
    pub laps: u64,
}

impl From<OutputStats> for ptemu_output_stats {
    fn from(s: OutputStats) -> Self {
        ptemu_output_stats {
            bytes_in: s.bytes_in,
            bytes_written: s.bytes_written,
            bytes_lost: s.bytes_lost,
            bytes_overwritten: s.bytes_overwritten,
            laps: s.laps,
        }
    }
}

/// The last operational error of an output unit (E1-E3: which rule, where, why).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ptemu_violation {
    /// The rule violated (spec/output.md, e.g. "E1c"), a static string.
    pub rule: *const c_char,
    /// Whether `table`, `index` and `entry` name the ToPA entry at fault (false when the output
    /// MSRs themselves are).
    pub has_entry: bool,
    /// The ToPA entry's index.
    pub index: u32,
    /// The base of the ToPA table holding the entry.
    pub table: u64,
    /// The raw entry.
    pub entry: u64,
    /// What is wrong, in words: valid until the next _last_violation call on the same unit or
    /// tracer, or its _free.
    pub message: *const c_char,
}

impl Default for ptemu_violation {
    fn default() -> Self {
        ptemu_violation {
            rule: std::ptr::null(),
            has_entry: false,
            index: 0,
            table: 0,
            entry: 0,
            message: std::ptr::null(),
        }
    }
}

/// The values of one CPUID leaf and sub-leaf.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ptemu_cpuid {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// The tracer's clock now (the time its TSC, TMA, MTC and CYC packets report).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ptemu_clock {
    /// Core cycles so far.
    pub cycles: u64,
    /// The TSC: what RDTSC returns now, and what a TSC packet sent now carries.
    pub tsc: u64,
    /// The always-running timer (ART, the crystal clock MTC and TMA report).
    pub art: u64,
    /// TMA's CTC field for the current TSC: ART[15:0].
    pub tma_ctc: u16,
    /// TMA's FC field: TSC ticks since the ART tick.
    pub tma_fc: u16,
    /// The current core:bus ratio (the CBR payload).
    pub core_ratio: u8,
}

/// An output region that received bytes: `size` bytes at guest physical `base`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ptemu_region {
    /// The region's guest physical base.
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// Fills `out` and `got` from `v`, keeping its message alive in `keep` for the C caller.
///
/// # Safety
/// `out` and `got` must be NULL or writable.
unsafe fn put_violation(
    v: Option<&Violation>,
    keep: &mut CString,
    out: *mut ptemu_violation,
    got: *mut bool,
) -> Result<(), Failure> {
    if out.is_null() || got.is_null() {
        return Err(Failure::null("out or got"));
    }
    let c = match v {
        None => None,
        Some(v) => {
            // A message with a NUL in it is cut there: C reads up to the first NUL anyway.
            *keep = CString::new(v.message.split('\0').next().unwrap_or("")).unwrap_or_default();
            Some(ptemu_violation {
                rule: rule_cstr(v.rule),
                has_entry: v.table.is_some() && v.index.is_some(),
                index: v.index.unwrap_or(0),
                table: v.table.unwrap_or(0),
                entry: v.entry.unwrap_or(0),
                message: keep.as_ptr(),
            })
        }
    };
    // SAFETY: both pointers are non-NULL and, by the caller's contract, writable.
    unsafe {
        *got = c.is_some();
        if let Some(c) = c {
            *out = c;
        }
    }
    Ok(())
}

/// The CPUID values `cpu` reports for `leaf`.`subleaf`: leaf 14H (Intel PT) only.
fn cpuid(cpu: &CpuProfile, leaf: u32, subleaf: u32) -> Result<ptemu_cpuid, Failure> {
    if leaf != 0x14 {
        return Err(Failure::new(
            PTEMU_NOT_MODELLED,
            format!("CPUID leaf {leaf:#x} is not the Intel PT leaf 0x14"),
        ));
    }
    let r = match subleaf {
        0 => cpu.leaf14_0,
        1 => cpu.leaf14_1,
        // Sub-leaves above CPUID.14H.0:EAX (the last valid one) read as zero.
        _ => return Ok(ptemu_cpuid::default()),
    };
    Ok(ptemu_cpuid {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    })
}

// ---- The output unit -------------------------------------------------------------------------

/// The unit's byte counts since it was made (resets keep them) into `*out`.
///
/// # Safety
/// `unit` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_stats(
    unit: *mut ptemu_unit,
    out: *mut ptemu_output_stats,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        // SAFETY: forwarded contract.
        unsafe { put(out, u.unit.stats().into()) }
    })
}

/// The unit's last operational error: `*got` is true and `*out` filled, or `*got` is false when
/// there has been none. Errors are sticky in IA32_RTIT_STATUS.Error; this says which rule and
/// which ToPA entry.
///
/// # Safety
/// `unit` must be NULL or live; `out` and `got` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_last_violation(
    unit: *mut ptemu_unit,
    out: *mut ptemu_violation,
    got: *mut bool,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        // SAFETY: forwarded contract.
        unsafe { put_violation(u.unit.last_violation(), &mut u.message, out, got) }
    })
}

/// Whether output is on now (IA32_RTIT_STATUS.TriggerEn): bytes written now are stored.
///
/// # Safety
/// `unit` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_output_enabled(unit: *mut ptemu_unit, out: *mut bool) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        // SAFETY: forwarded contract.
        unsafe { put(out, u.unit.output_enabled()) }
    })
}

/// Whether a packet generator driving this unit must send PSB+ now that TraceEn went 0->1 (EN2):
/// PacketByteCnt is 0, or the CPU has no configurable PSB frequency.
///
/// # Safety
/// `unit` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_psb_due_on_enable(unit: *mut ptemu_unit, out: *mut bool) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        // SAFETY: forwarded contract.
        unsafe { put(out, u.unit.psb_due_on_enable()) }
    })
}

/// CPUID `leaf`.`subleaf` as the unit's CPU profile reports it, for the guest's CPUID: leaf 0x14
/// (sub-leaves 0 and 1; higher ones read as zero). PTEMU_NOT_MODELLED for another leaf.
///
/// # Safety
/// `unit` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_cpuid(
    unit: *mut ptemu_unit,
    leaf: u32,
    subleaf: u32,
    out: *mut ptemu_cpuid,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        let r = cpuid(u.unit.cpu(), leaf, subleaf)?;
        // SAFETY: forwarded contract.
        unsafe { put(out, r) }
    })
}

/// Starts (`on` true) or stops recording which output regions receive bytes (see
/// ptemu_unit_written_regions). Stopping forgets the regions recorded.
///
/// # Safety
/// `unit` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_track_regions(unit: *mut ptemu_unit, on: bool) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        u.unit.track_regions(on);
        Ok(())
    })
}

/// The output regions that received bytes since ptemu_unit_track_regions turned recording on,
/// in address order: stores the first `cap` of them in `out` (which may be NULL when `cap` is 0)
/// and how many there are in `*n` (call with `cap` 0 to size `out`). None while recording is off.
///
/// # Safety
/// `unit` must be NULL or live; `out` NULL or `cap` writable regions; `n` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_unit_written_regions(
    unit: *mut ptemu_unit,
    out: *mut ptemu_region,
    cap: usize,
    n: *mut usize,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let u = unsafe { live(unit, "unit") }?;
        if n.is_null() {
            return Err(Failure::null("n"));
        }
        if out.is_null() && cap != 0 {
            return Err(Failure::null("out"));
        }
        let mut total = 0;
        for (base, size) in u.unit.written_regions() {
            if total < cap {
                // SAFETY: non-NULL with `cap` writable regions by contract; total < cap.
                unsafe { out.add(total).write(ptemu_region { base, size }) };
            }
            total += 1;
        }
        // SAFETY: non-NULL and writable by contract.
        unsafe { n.write(total) };
        Ok(())
    })
}

// ---- The tracer ------------------------------------------------------------------------------

/// The byte counts of the tracer's output unit (as ptemu_unit_stats) into `*out`.
///
/// # Safety
/// `t` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_unit_stats(
    t: *mut ptemu_tracer,
    out: *mut ptemu_output_stats,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        // SAFETY: forwarded contract.
        unsafe { put(out, t.tracer.unit().stats().into()) }
    })
}

/// The last operational error of the tracer's output unit, as ptemu_unit_last_violation.
///
/// # Safety
/// `t` must be NULL or live; `out` and `got` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_last_violation(
    t: *mut ptemu_tracer,
    out: *mut ptemu_violation,
    got: *mut bool,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        // SAFETY: forwarded contract.
        unsafe { put_violation(t.tracer.unit().last_violation(), &mut t.message, out, got) }
    })
}

/// Whether the tracer's output unit has output on (IA32_RTIT_STATUS.TriggerEn), as
/// ptemu_unit_output_enabled.
///
/// # Safety
/// `t` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_output_enabled(t: *mut ptemu_tracer, out: *mut bool) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        // SAFETY: forwarded contract.
        unsafe { put(out, t.tracer.unit().output_enabled()) }
    })
}

/// CPUID of the tracer's CPU profile, as ptemu_unit_cpuid.
///
/// # Safety
/// `t` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_cpuid(
    t: *mut ptemu_tracer,
    leaf: u32,
    subleaf: u32,
    out: *mut ptemu_cpuid,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        let r = cpuid(t.tracer.unit().cpu(), leaf, subleaf)?;
        // SAFETY: forwarded contract.
        unsafe { put(out, r) }
    })
}

/// Whether packets are generated for control flow now (PacketEn: TriggerEn, ContextEn and
/// FilterEn all 1).
///
/// # Safety
/// `t` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_packet_en(t: *mut ptemu_tracer, out: *mut bool) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        // SAFETY: forwarded contract.
        unsafe { put(out, t.tracer.packet_en()) }
    })
}

/// The tracer's clock now into `*out`: the TSC its packets report is the one the guest's RDTSC
/// should return.
///
/// # Safety
/// `t` must be NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_clock(t: *mut ptemu_tracer, out: *mut ptemu_clock) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        let c = t.tracer.clock();
        let (tma_ctc, tma_fc) = c.tma();
        let clock = ptemu_clock {
            cycles: c.cycles(),
            tsc: c.tsc(),
            art: c.art(),
            tma_ctc,
            tma_fc,
            core_ratio: c.core_ratio(),
        };
        // SAFETY: forwarded contract.
        unsafe { put(out, clock) }
    })
}

/// How many packets of the kind named `name` the tracer generated ("tip", "tnt.8", "psb", ...:
/// the names of `ptemu packets`) into `*out`. PTEMU_ERR_ARGUMENT for a name that is no packet
/// kind (the message lists them).
///
/// # Safety
/// `t` must be NULL or live; `name` NULL or a NUL-terminated string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ptemu_tracer_packet_count(
    t: *mut ptemu_tracer,
    name: *const c_char,
    out: *mut u64,
) -> ptemu_status {
    guard(|| {
        // SAFETY: forwarded contract.
        let t = unsafe { live(t, "tracer") }?;
        if name.is_null() {
            return Err(Failure::null("name"));
        }
        // SAFETY: non-NULL and NUL-terminated by the caller's contract.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        if !Packet::KIND_NAMES.contains(&&*name) {
            return Err(Failure::argument(format!(
                "{name:?} is not a packet kind (one of {})",
                Packet::KIND_NAMES.join(", ")
            )));
        }
        let n = t.tracer.stats().count(&name);
        // SAFETY: forwarded contract.
        unsafe { put(out, n) }
    })
}
