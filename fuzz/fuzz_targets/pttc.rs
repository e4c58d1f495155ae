//! Fuzz target: any text as a `.ptt` file through `ptemu pttc`'s compiler. It never panics and
//! never runs long: bad input is an error on a line within the file, and every output name is a
//! plain file name.
#![no_main]
//! With `--case` too: the truth and case.json from the `.exp(ptxed)` text and the `opt:ptxed`
//! lines, and `ptemu verify` reads the truth whole.
use ptemu::pttc::{case_files, compile, Options};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.lines().count() + 1;
    match compile("fuzz.ptt", text, &Options::default()) {
        Ok(compiled) => {
            for f in &compiled.files {
                assert!(!f.name.contains('/'), "{}", f.name);
            }
            match case_files("fuzz.ptt", text, &compiled, None) {
                Ok((files, _)) => {
                    let truth = files
                        .iter()
                        .find(|f| f.name == "truth.jsonl")
                        .expect("truth.jsonl");
                    let mut sink = ptemu::truth::compact::Encoder::new(Vec::new());
                    ptemu::truth::json::read("truth.jsonl", &truth.bytes[..], &mut sink)
                        .expect("the truth --case writes reads back");
                }
                Err(e) => assert!(e.line <= lines, "{e}"),
            }
        }
        Err(e) => assert!(e.line <= lines, "{e}"),
    }
});
