//! `include/ptemu.h` is what cbindgen makes of `src/` with `cbindgen.toml`: a stale header fails
//! here. Regenerate it with `PTEMU_UPDATE_HEADER=1 cargo test -p ptemu-capi --test header`.

use std::path::Path;

#[test]
fn the_checked_in_header_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen runs on capi/src")
        .write(&mut generated);
    let header = dir.join("include/ptemu.h");
    if std::env::var_os("PTEMU_UPDATE_HEADER").is_some() {
        std::fs::write(&header, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read(&header).unwrap_or_default();
    assert!(
        checked_in == generated,
        "capi/include/ptemu.h is stale: run `PTEMU_UPDATE_HEADER=1 cargo test -p ptemu-capi --test header`"
    );
}
