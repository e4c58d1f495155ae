//! Fuzz target: arbitrary bytes through the byu_p2 reader and its mapping to events, strict and
//! lenient (the first byte picks). Must never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptemu::sources::{open_events, Format, Input, ReadOptions};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let Ok(input) = Input::from_bytes("fuzz", body.to_vec()) else {
        return;
    };
    let options = ReadOptions { lenient: mode & 1 == 1 };
    let Ok(mut source) = open_events(Format::ByuP2, input, None, options) else {
        return;
    };
    let mut events = Vec::new();
    while let Ok(true) = source.next_events(&mut events) {
        events.clear();
    }
    let _ = source.stats();
});
