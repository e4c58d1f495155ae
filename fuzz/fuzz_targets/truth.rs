//! Fuzz target: any truth file and any decoder output through `ptemu verify`'s reader and matcher
//! never panic (the input is split at its first 0xff byte: truth before, decoder output after).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let cut = data.iter().position(|&b| b == 0xff).unwrap_or(data.len());
    let (truth, output) = data.split_at(cut);
    if let Ok(p) = ptemu::truth::verify::Pattern::read("fuzz.jsonl", truth) {
        let _ = ptemu::truth::verify::check(&p, output.get(1..).unwrap_or_default());
    }
});
