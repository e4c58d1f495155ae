//! Random sequences of C API calls over guest memory whose callbacks fail (the `capi` fuzz
//! target's body, `ptemu_capi::fuzz::call_sequence`): no panic, no silent loss of bytes, a failed
//! WRMSR changes nothing, and a failed batch tells how many events it fed.

use proptest::prelude::*;
use ptemu_capi::fuzz::call_sequence;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_call_sequences_with_failing_memory_lose_nothing_silently(
        data in proptest::collection::vec(any::<u8>(), 0..1500),
    ) {
        call_sequence(&data);
    }
}

/// The sequence of issue 39: the ToPA table cannot be read at the enable, then bytes and events.
#[test]
fn a_failed_enable_then_writes_and_events() {
    // Each table: entry 0 a 4K region at 0x5000, entry 1 END back; the profile skylake.
    let mut data = vec![1, 1, 0, 0, 1, 1, 0, 0, 0];
    // Unit: OUTPUT_BASE = 0x1000, then CTL = TraceEn | ToPA | BranchEn | User with table reads
    // refused, then a write of 400 bytes.
    data.extend([0, 4, 2, 1, 0]); // op 0, no failure, MSR index 2 (OUTPUT_BASE), value 0x1000
    data.extend([0, 0, 0, 3, 0b0_1111]); // op 0, table reads fail, CTL, a CTL value
    data.extend([2, 4, 10]); // op 2, no failure, 400 bytes
                             // Tracer: the same enable, then events.
    data.extend([3, 4, 2, 1, 0, 0]); // op 3, OUTPUT_BASE = 0x1000, len 2
    data.extend([3, 0, 0, 3, 0b0_1111, 0]); // op 3, table reads fail, CTL
    data.extend([4, 4, 20]); // op 4, no failure, 20 events (zeros: kind 0, refused)
    call_sequence(&data);
}
