//! Fuzz target: any text as a `.ptt` file through `ptemu pttc`'s compiler. It never panics and
//! never runs long: bad input is an error on a line within the file, and every output name is a
//! plain file name.
#![no_main]
use ptemu::pttc::{run, Options};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match run("fuzz.ptt", text, &Options::default()) {
        Ok(files) => {
            for f in files {
                assert!(!f.name.contains('/'), "{}", f.name);
            }
        }
        Err(e) => assert!(e.line <= text.lines().count() + 1, "{e}"),
    }
});
