//! Fuzz target: random sequences of C API calls (units, tracers, WRMSR, writes, events, batches,
//! flushes, polls) over guest memory whose callbacks fail as the input says. No panic, no call
//! that loses bytes silently, a failed WRMSR changes nothing, a failed batch tells how many events
//! it fed (`ptemu_capi::fuzz::call_sequence`, also run by `capi/tests/call_sequences.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ptemu_capi::fuzz::call_sequence(data);
});
