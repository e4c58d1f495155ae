//! What `ptemu write` and `ptemu simulate` leave in DIR: region dumps that hold every byte the
//! output unit wrote, events streamed with flat memory, and, on any failure or signal, nothing
//! half-written and nothing the run made left behind.

mod common;

use common::cli::{ptemu, s, text};
use common::stream;
use std::path::{Path, PathBuf};
use std::process::Output;

fn file(dir: &Path, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn write(layout: &Path, stream: &Path, out: &Path) -> Output {
    ptemu(&[
        "write",
        "--layout",
        s(layout),
        "--stream",
        s(stream),
        "--out",
        s(out),
        "--quiet",
    ])
}

/// Two entries with one region base, 8K then 4K with STOP (rule W1: each byte lands at the
/// current entry's Base plus the offset, within that entry's own size): the region file holds
/// the whole 8K region, whose second half received bytes, not the last entry's 4K.
#[test]
fn w1_a_region_named_twice_is_dumped_at_its_largest_size() {
    let dir = tempfile::tempdir().unwrap();
    let layout = file(
        dir.path(),
        "twice.toml",
        "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x10000\n[[table]]\nbase = 0x10000\n\
         entries = [\n  { region = 0x100000, size = \"8K\" },\n  { region = 0x100000, size = \"4K\", stop = true },\n\
         \x20 { end = 0x10000 },\n]\n",
    );
    let data = stream(0, 10_000);
    let st = file(dir.path(), "s.bin", &data);
    let out = dir.path().join("out");
    let o = write(&layout, &st, &out);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let region = std::fs::read(out.join("regions/0x100000.bin")).unwrap();
    assert_eq!(region.len(), 8192, "the 8K region, whole");
    // 8K through the first entry, then the rest over the start of the same region.
    assert_eq!(region[..10_000 - 8192], data[8192..]);
    assert_eq!(region[10_000 - 8192..], data[10_000 - 8192..8192]);
}
