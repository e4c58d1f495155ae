//! `examples/embed.rs` under test: its emulator loop handles the ToPA PMIs and its consumer collects
//! a trace that libipt's packet decoder reads without an error, byte for byte.

mod common;

#[allow(dead_code)] // the example's `main` and helpers the test does not call
#[path = "../examples/embed.rs"]
mod embed;

use ptemu::packet::Packet;
use ptemu::regs::RtitStatus;

fn final_msr(s: &embed::Summary, name: &str) -> u64 {
    let found = s.final_msrs.iter().find(|(n, _)| *n == name);
    found
        .unwrap_or_else(|| panic!("{name} missing from the summary"))
        .1
}

#[test]
fn p1_p7_embed_example_handles_every_topa_pmi_and_collects_the_whole_trace() {
    let s = embed::run(20_000).expect("the example's loop runs");

    // Several passes over the ring, each ended by a PMI the handler took (P1, P7).
    assert!(s.pmis_handled >= 3, "only {} PMIs handled", s.pmis_handled);
    assert_eq!(s.pmis_handled, s.pmi_events as u64, "PMIs handled vs raised");

    // Nothing lost or duplicated between the tracer and the consumer.
    assert_eq!(
        s.collected.len() as u64,
        s.produced,
        "collected vs produced bytes"
    );

    // libipt reads every collected byte as packets.
    let packets = common::libipt::decode(&s.collected)
        .unwrap_or_else(|e| panic!("libipt: error {} at byte {}", e.code, e.offset));
    let decoded: usize = packets.iter().map(|&(_, n)| n).sum();
    assert_eq!(decoded, s.collected.len());
    assert_eq!(
        packets.first().map(|p| p.0),
        Some(Packet::Psb),
        "the stream starts with a PSB"
    );

    // Each handler run shows in the stream: the PMI leaves user mode (TIP.PGD) and IRET returns to
    // it (TIP.PGE); plus the first SYSRET into the loop and the final SYSCALL.
    let count = |f: fn(&Packet) -> bool| packets.iter().filter(|(p, _)| f(p)).count() as u64;
    assert_eq!(count(|p| matches!(p, Packet::TipPge(_))), s.pmis_handled + 1);
    assert_eq!(count(|p| matches!(p, Packet::TipPgd(_))), s.pmis_handled + 1);

    // The handler left the unit clean: no Error, no Stopped, the PMI bit cleared, tracing off.
    let status = RtitStatus::from(final_msr(&s, "IA32_RTIT_STATUS"));
    assert!(!status.error() && !status.stopped(), "final STATUS {status:?}");
    assert_eq!(final_msr(&s, "IA32_PERF_GLOBAL_STATUS") & 1 << 55, 0);
    assert_eq!(final_msr(&s, "IA32_RTIT_CTL") & 1, 0, "TraceEn");
}
