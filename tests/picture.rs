//! `ptemu layout draw` (spec/picture.md): the SVG is well-formed XML for every generated layout,
//! every listed entry and region appears with its address as text, operational errors carry
//! their rule ID, and the picture renders (resvg) to pixels, so a broken SVG fails here.

mod common;

use common::cli::{hex, ptemu, s, text};
use common::layouts::layout_toml;
use proptest::prelude::*;
use ptemu::layout::{self, Layout};
use ptemu::output::TopaEntry;
use ptemu::picture::layout_svg;
use std::path::Path;

/// Every text node of the SVG, in order.
fn texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}\n{svg}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").to_string())
        .collect()
}

/// Renders `svg` and returns how many pixels are not white.
fn inked_pixels(svg: &str) -> usize {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).expect("usvg parses it");
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).expect("a pixmap");
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let png = pixmap.encode_png().expect("PNG encoding");
    assert!(png.starts_with(b"\x89PNG"));
    pixmap
        .pixels()
        .iter()
        .filter(|p| (p.red(), p.green(), p.blue()) != (255, 255, 255))
        .count()
}

/// Checks the picture of `src` against the layout: XML, entries, regions, errors.
fn check_picture(src: &str) -> Result<(), TestCaseError> {
    let layout = match Layout::parse(Path::new("gen.toml"), src) {
        Ok(l) => l,
        Err(_) => return Ok(()),
    };
    let report = layout::check(&layout);
    let svg = layout_svg(&layout, &report);
    let all = texts(&svg).join("\n");
    for t in &layout.tables {
        prop_assert!(
            all.contains(&format!("ToPA table {:#x}", t.base)),
            "table {:#x} missing",
            t.base
        );
        for (i, e) in t.entries.iter().enumerate() {
            let index = format!("[{:#x}]", t.first_index + i as u32);
            let e = TopaEntry::from(e.raw);
            let row = all
                .lines()
                .find(|l| l.contains(&index) && l.contains(&format!("{:#x}", e.base())));
            prop_assert!(
                row.is_some(),
                "entry {index} of table {:#x} ({:#x}) missing",
                t.base,
                e.bits()
            );
            if !e.end() {
                let region = format!("{:#x}  {}", e.base(), ptemu::picture::size_text(e.region_size()));
                prop_assert!(all.contains(&region), "region {region} missing");
            }
        }
    }
    for v in &report.violations {
        prop_assert!(
            all.contains(v.rule.id()),
            "rule {} of an error missing",
            v.rule.id()
        );
    }
    prop_assert!(inked_pixels(&svg) > 1_000, "renders");
    Ok(())
}

/// Writes `len` bytes of 0xFF through `layout` with the output unit itself and checks that each
/// region's `filled` count in the run's picture is the number of 0xFF bytes the region holds.
fn check_fills(src: &str, len: usize) -> Result<(), TestCaseError> {
    use ptemu::output::OutputUnit;
    use ptemu::picture::{fills, Run};
    use ptemu::report::Report;
    use ptemu::{PhysMemory, SparseMemory};
    // Layouts that do not qualify are rejected, not passed: every case counted reaches the
    // assertions (issue 39).
    let layout = Layout::parse(Path::new("gen.toml"), src);
    prop_assume!(layout.is_ok());
    let layout = layout.expect("assumed");
    let report = layout::check(&layout);
    // Trace bytes that land on a table make the unit read 0xFF entries.
    prop_assume!(!report.warnings.iter().any(|w| w.contains("overwrite")));
    let mut mem = SparseMemory::new();
    let mut unit = OutputUnit::new(layout.cpu.clone());
    prop_assume!(layout.apply(&mut unit, &mut mem).is_ok());
    let _ = unit.write(&mut mem, &vec![0xffu8; len]);
    let run = Run::of(&Report::of(&unit));
    for ((table, index), filled) in fills(&layout, &run) {
        let e = TopaEntry::from(mem.read_u64(table + 8 * u64::from(index)).unwrap());
        let mut region = vec![0u8; e.region_size() as usize];
        mem.read(e.base(), &mut region).unwrap();
        let ff = region.iter().filter(|&&b| b == 0xff).count() as u64;
        prop_assert_eq!(filled, ff, "{:#x}[{:#x}] region {:#x}", table, index, e.base());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn pic5_the_fill_of_every_region_is_what_the_output_unit_stored_there(src in layout_toml(), len in 0usize..40_000) {
        check_fills(&src, len)?;
    }

    #[test]
    fn pic1_pic2_pic3_pic6_every_generated_layout_draws_as_well_formed_svg_with_every_entry(src in layout_toml()) {
        check_picture(&src)?;
    }
}

#[test]
fn pic3_pic6_the_demo_layout_renders_with_its_tables_walk_and_stop() {
    let layout = Layout::load(Path::new("examples/demo-layout.toml")).unwrap();
    let svg = layout_svg(&layout, &layout::check(&layout));
    let all = texts(&svg).join("\n");
    for want in [
        "ToPA table 0x20000",
        "ToPA table 0x10000",
        "END -> 0x10000",
        "64K at 0x120000 INT STOP",
        "walk (6 entries",
    ] {
        assert!(all.contains(want), "{want:?} missing from:\n{all}");
    }
    let inked = inked_pixels(&svg);
    assert!(inked > 5_000, "the picture rendered almost blank: {inked} pixels");
}

#[test]
fn pic4_pic6_a_single_range_layout_shows_its_range_and_mask() {
    let src = "cpu = \"skylake\"\n[output]\nscheme = \"single-range\"\nbase = 0x100000\nmask_ptrs = 0x3fff\n";
    let layout = Layout::parse(Path::new("r.toml"), src).unwrap();
    let svg = layout_svg(&layout, &layout::check(&layout));
    let all = texts(&svg).join("\n");
    assert!(
        all.contains("single range at 0x100000, mask 0x3fff, 16384 bytes"),
        "{all}"
    );
    assert!(inked_pixels(&svg) > 1_000);
}

#[test]
fn pic6_layout_draw_writes_the_file_and_refuses_a_bad_layout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo.svg");
    let o = ptemu(&["layout", "draw", "examples/demo-layout.toml", "-o", s(&out)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(texts(&svg).iter().any(|t| t.contains("0x104000")));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "cpu = \"skylake\"\n[output]\nscheme = \"nope\"\n").unwrap();
    let o = ptemu(&["layout", "draw", s(&bad), "-o", s(&dir.path().join("bad.svg"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("bad.toml"));
    assert!(
        !dir.path().join("bad.svg").exists(),
        "nothing written for a bad layout"
    );
}

/// Every `filled X/Y` of a picture, as (X, Y).
fn filled(texts: &[String]) -> Vec<(u64, u64)> {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    texts
        .iter()
        .filter_map(|t| t.split("filled ").nth(1))
        .map(|f| {
            let f = f.split_whitespace().next().unwrap();
            let (a, b) = f.split_once('/').unwrap();
            (hex(a), hex(b))
        })
        .collect()
}

/// `ptemu write` of `len` bytes through `layout`: its report.json and the texts of layout.svg.
fn write_run(layout: &str, len: usize) -> (serde_json::Value, Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let (layout_file, stream, out) = (
        dir.path().join("l.toml"),
        dir.path().join("s.bin"),
        dir.path().join("out"),
    );
    std::fs::write(&layout_file, layout).unwrap();
    std::fs::write(&stream, vec![0u8; len]).unwrap();
    let o = ptemu(&[
        "write",
        "--layout",
        s(&layout_file),
        "--stream",
        s(&stream),
        "--out",
        s(&out),
        "-q",
    ]);
    assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o.stderr));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let svg = std::fs::read_to_string(out.join("layout.svg")).unwrap();
    (report, texts(&svg), svg)
}

#[test]
fn pic5_s1_p1_a_runs_picture_shows_the_fill_levels_and_position_the_report_gives() {
    let demo = std::fs::read_to_string("examples/demo-layout.toml").unwrap();
    let (report, texts, svg) = write_run(&demo, 100 * 1024);
    let written = report["stats"]["bytes_written"].as_u64().unwrap();
    let fills = filled(&texts);
    assert_eq!(fills.len(), 5, "every region entry has its fill: {texts:?}");
    // The walk ends at the STOP region, no lap: the fills add up to the bytes written.
    assert_eq!(fills.iter().map(|f| f.0).sum::<u64>(), written);
    let ptrs = hex(&report["msr"]["output_mask_ptrs"]);
    let all = texts.join("\n");
    assert!(all.contains(&format!("<- output at {:#x}", ptrs >> 32)), "{all}");
    let lost = report["stats"]["bytes_lost"].as_u64().unwrap();
    assert!(all.contains(&format!("{written} written, {lost} lost")), "{all}");
    assert!(
        all.contains("event: stopped after 98304 bytes at 0x10000[0x1] (S1)"),
        "{all}"
    );
    // The events also stand at their entries, and the walk marks the wrap to entry 0 (W5).
    let last = texts
        .iter()
        .find(|t| t.contains("[0x1] 64K at 0x120000"))
        .unwrap();
    assert!(last.ends_with("[stopped, PMI]  <- output at 0x10000"), "{last}");
    assert!(
        all.contains("0x20000[0x1ffffff] -> (wrap, W5) -> 0x20000[0x0]"),
        "{all}"
    );
    assert!(inked_pixels(&svg) > 5_000);
}

#[test]
fn pic5_w4_a_lapped_ring_is_drawn_full_and_an_unfilled_one_partly() {
    let ring = "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x1000\nmask_ptrs = 0x7f\n\
                [[table]]\nbase = 0x1000\nentries = [\n  { region = 0x10000, size = \"4K\" },\n  \
                { region = 0x20000, size = \"4K\", int = true },\n  { end = 0x1000 },\n]\n";
    let (_, texts, _) = write_run(ring, 40_000);
    assert_eq!(filled(&texts), [(0x1000, 0x1000), (0x1000, 0x1000)], "{texts:?}");
    let (report, texts, _) = write_run(ring, 5_000);
    assert_eq!(report["stats"]["bytes_written"].as_u64(), Some(5_000));
    assert_eq!(filled(&texts), [(0x1000, 0x1000), (5_000 - 0x1000, 0x1000)]);
}

#[test]
fn pic5_the_readmes_picture_is_what_ptemu_write_draws_today() {
    let demo = std::fs::read_to_string("examples/demo-layout.toml").unwrap();
    let (_, _, svg) = write_run(&demo, 100 * 1024);
    let committed = std::fs::read_to_string("examples/demo-run.svg").unwrap();
    assert!(
        svg == committed,
        "examples/demo-run.svg is stale: ptemu write --layout examples/demo-layout.toml (100 KiB) draws another picture"
    );
}

#[test]
fn pic5_simulate_draws_no_picture_when_ctl_contradicts_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (good, odd) = (dir.path().join("good"), dir.path().join("odd"));
    let o = ptemu(&["simulate", "--out", s(&good), "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(good.join("layout.svg").exists());
    // The default layout is ToPA; ToPA=0 makes the unit read the MSRs as a single range (SIM5).
    let o = ptemu(&["simulate", "--out", s(&odd), "--ctl", "ToPA=0", "-q"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(odd.join("report.json").exists());
    assert!(
        !odd.join("layout.svg").exists(),
        "a picture of the wrong output was drawn"
    );
}
