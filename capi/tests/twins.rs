//! Every Rust query an embedder needs has its C twin (issue 43 §8): the table below lists each
//! public query of the types the C API wraps (`OutputUnit`, `Tracer`, and the `Clock` a tracer
//! exposes) with the C functions that answer it, or the reason C has none. The test reads
//! ptemu-core's source: a new public query without a row fails it, a row whose query is gone
//! fails it, and every C function named must be declared in `include/ptemu.h`. The fields of the
//! Rust statistics must be fields of their C structs, likewise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What answers a Rust query in C.
enum Twin {
    /// These C functions.
    C(&'static [&'static str]),
    /// None, for this reason.
    No(&'static str),
}

use Twin::{No, C};

/// "Type::query" -> its C twin(s), or why there is none.
const QUERIES: &[(&str, Twin)] = &[
    // OutputUnit (ptemu_unit; the tracer's unit through ptemu_tracer_*).
    ("OutputUnit::cpu", C(&["ptemu_unit_cpuid", "ptemu_tracer_cpuid"])),
    ("OutputUnit::rdmsr", C(&["ptemu_unit_rdmsr", "ptemu_tracer_rdmsr"])),
    (
        "OutputUnit::registers",
        No("each register is ptemu_unit_rdmsr (ptemu_tracer_rdmsr) of its MSR, which reads the same live values"),
    ),
    ("OutputUnit::psb_due_on_enable", C(&["ptemu_unit_psb_due_on_enable"])),
    (
        "OutputUnit::output_enabled",
        C(&["ptemu_unit_output_enabled", "ptemu_tracer_output_enabled"]),
    ),
    (
        "OutputUnit::events",
        No("each call moves the output events it caused to the poll queue or the callback: ptemu_unit_poll_event, ptemu_unit_set_event_fn (and ptemu_tracer_*)"),
    ),
    (
        "OutputUnit::stats",
        C(&["ptemu_unit_stats", "ptemu_tracer_unit_stats", "ptemu_tracer_stats"]),
    ),
    (
        "OutputUnit::last_violation",
        C(&["ptemu_unit_last_violation", "ptemu_tracer_last_violation"]),
    ),
    (
        "OutputUnit::written_regions",
        C(&["ptemu_unit_written_regions", "ptemu_unit_track_regions"]),
    ),
    // Tracer (ptemu_tracer).
    (
        "Tracer::unit",
        No("a tracer's unit is not handed out: its queries have ptemu_tracer_* twins (rdmsr, unit_stats, last_violation, output_enabled, cpuid)"),
    ),
    ("Tracer::stats", C(&["ptemu_tracer_stats", "ptemu_tracer_packet_count"])),
    ("Tracer::clock", C(&["ptemu_tracer_clock"])),
    (
        "Tracer::overflows",
        No("tracers made by ptemu_tracer_new have no back-pressure model (TracerConfig::overflow is off), so they have no overflow spans"),
    ),
    ("Tracer::packet_en", C(&["ptemu_tracer_packet_en"])),
    ("Tracer::rdmsr", C(&["ptemu_tracer_rdmsr"])),
    (
        "Tracer::unforced_overflow",
        No("forced overflows (TracerConfig::overflow_at) cannot be set through the C API"),
    ),
    // Clock (ptemu_clock, from ptemu_tracer_clock).
    ("Clock::cycles", C(&["ptemu_tracer_clock"])),
    ("Clock::tsc", C(&["ptemu_tracer_clock"])),
    ("Clock::art", C(&["ptemu_tracer_clock"])),
    ("Clock::tma", C(&["ptemu_tracer_clock"])),
    ("Clock::core_ratio", C(&["ptemu_tracer_clock"])),
    (
        "Clock::art_boundary_tsc",
        No("arithmetic on the clock for MTC packets (the ART tick's TSC), not state: ptemu_clock has the TSC and ART"),
    ),
    (
        "Clock::cycles_to_tsc",
        No("arithmetic a decoder does on CYC payloads, not state: ptemu_clock has cycles, TSC and the core ratio"),
    ),
];

/// (field, where C has it instead, or why not).
type Elsewhere = &'static [(&'static str, &'static str)];

/// (file under ptemu-core/src, Rust struct, its C struct, fields C has elsewhere or not).
const STRUCTS: &[(&str, &str, &str, Elsewhere)] = &[
    ("output/unit.rs", "OutputStats", "ptemu_output_stats", &[]),
    (
        "tracer/stats.rs",
        "TracerStats",
        "ptemu_stats",
        &[(
            "packets",
            "an array by kind index: ptemu_tracer_packet_count by kind name",
        )],
    ),
    // ptemu_stats carries the tracer's unit's byte counts too.
    ("output/unit.rs", "OutputStats", "ptemu_stats", &[]),
];

fn core_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ptemu-core/src")
}

fn header() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/ptemu.h")).unwrap()
}

/// The public queries of `impl TYPE` blocks in `src`: `pub fn`s taking `&self` that return
/// something, as "TYPE::name".
fn queries_in(src: &str, ty: &str) -> Vec<String> {
    let mut out = Vec::new();
    let opening = format!("impl {ty} {{");
    let mut rest = src;
    while let Some(at) = rest.find(&opening) {
        let body = &rest[at + opening.len()..];
        // The block ends at the first `}` in column 0.
        let end = body.find("\n}").unwrap_or(body.len());
        let block = &body[..end];
        for (k, _) in block.match_indices("\n    pub fn ") {
            let sig = &block[k + "\n    pub fn ".len()..];
            let sig = &sig[..sig.find('{').unwrap_or(sig.len())];
            let name: String = sig
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let params = &sig[sig.find('(').unwrap()..];
            if params.contains("&self") && !params.contains("&mut self") && sig.contains("->") {
                out.push(format!("{ty}::{name}"));
            }
        }
        rest = &body[end..];
    }
    out
}

/// Every public query of OutputUnit, Tracer and Clock in ptemu-core.
fn rust_queries() -> BTreeSet<String> {
    let src = core_src();
    let mut found = BTreeSet::new();
    let unit = std::fs::read_to_string(src.join("output/unit.rs")).unwrap();
    found.extend(queries_in(&unit, "OutputUnit"));
    for entry in std::fs::read_dir(src.join("tracer")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            found.extend(queries_in(&text, "Tracer"));
            found.extend(queries_in(&text, "Clock"));
        }
    }
    found
}

/// The `pub` fields of `pub struct NAME` in `src`.
fn rust_fields(src: &str, name: &str) -> Vec<String> {
    let opening = format!("pub struct {name} {{");
    let body = &src[src.find(&opening).unwrap_or_else(|| panic!("no {opening}")) + opening.len()..];
    let body = &body[..body.find("\n}").unwrap()];
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .map(|l| l[..l.find(':').unwrap()].to_string())
        .collect()
}

/// The fields of `typedef struct { ... } NAME;` in the header.
fn c_fields(h: &str, name: &str) -> Vec<String> {
    let closing = format!("}} {name};");
    let end = h
        .find(&closing)
        .unwrap_or_else(|| panic!("no struct {name} in ptemu.h"));
    let start = h[..end].rfind("typedef struct {").unwrap();
    h[start..end]
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.ends_with(';'))
        .map(|l| {
            let decl = l.trim_end_matches(';');
            let last = decl.rsplit([' ', '*']).next().unwrap();
            last.split('[').next().unwrap().to_string()
        })
        .collect()
}

#[test]
fn every_public_rust_query_has_a_c_twin_or_a_reason() {
    let found = rust_queries();
    // The parser sees the queries it must: a broken parser would pass the rest vacuously.
    for known in [
        "OutputUnit::stats",
        "Tracer::stats",
        "Tracer::unforced_overflow",
        "Clock::tsc",
    ] {
        assert!(found.contains(known), "the source scan misses {known}: {found:?}");
    }
    let listed: BTreeSet<String> = QUERIES.iter().map(|(q, _)| q.to_string()).collect();
    assert_eq!(listed.len(), QUERIES.len(), "a query is listed twice");
    let missing: Vec<_> = found.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "public Rust queries without a C twin or a reason in capi/tests/twins.rs: {missing:?}"
    );
    let gone: Vec<_> = listed.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "listed queries ptemu-core no longer has: {gone:?}"
    );
}

#[test]
fn every_c_twin_named_is_declared_in_the_header() {
    let h = header();
    for (query, twin) in QUERIES {
        match twin {
            C(fns) => {
                assert!(!fns.is_empty(), "{query}: no function named");
                for f in *fns {
                    assert!(
                        h.contains(&format!("ptemu_status {f}(")),
                        "{query}: {f} is not declared in ptemu.h"
                    );
                }
            }
            No(why) => assert!(why.len() > 20, "{query}: say why there is no twin"),
        }
    }
}

#[test]
fn every_field_of_the_rust_statistics_is_in_its_c_struct() {
    let h = header();
    for (file, rust, c, elsewhere) in STRUCTS {
        let src = std::fs::read_to_string(core_src().join(file)).unwrap();
        let fields = rust_fields(&src, rust);
        assert!(fields.len() >= 5, "{rust}: the scan found {fields:?}");
        let cf = c_fields(&h, c);
        for f in &fields {
            if let Some((_, why)) = elsewhere.iter().find(|(n, _)| n == f) {
                assert!(!cf.contains(f) && !why.is_empty(), "{rust}.{f}: in {c} after all");
                continue;
            }
            assert!(cf.contains(f), "{rust}.{f} is not a field of {c} ({cf:?})");
        }
        for (n, _) in *elsewhere {
            assert!(fields.iter().any(|f| f == n), "{rust} has no field {n} any more");
        }
    }
}
