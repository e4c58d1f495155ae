//! Fuzz target: arbitrary bytes through the QEMU plugin stream's reader and the classification
//! of every instruction it carries (`sources::qemu::wire::read_arbitrary`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ptemu::sources::qemu::wire::read_arbitrary(data));
