//! Fuzz target: arbitrary bytes through the packet decoder; every packet it accepts must re-encode
//! to the bytes it came from and assemble back from its text line (`packet::recheck`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(m) = ptemu::packet::recheck(data) {
        panic!("{m}");
    }
});
