//! Fuzz target: any text through the layout parser never panics, and a layout it accepts is
//! checked by `layout check` and written through the output unit as `ptemu write` does: every
//! #GP and operational error the write meets, the check found too
//! (`ptemu::layout::recheck`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(layout) = ptemu::layout::Layout::parse(std::path::Path::new("fuzz.toml"), &text) {
        if let Err(m) = ptemu::layout::recheck(&layout) {
            panic!("{m}");
        }
    }
});
