//! Fuzz target: arbitrary bytes through the byu_p2 reader and its mapping (`sources::read_arbitrary`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ptemu::sources::read_arbitrary(
    ptemu::sources::Format::ByuP2,
    data
));
