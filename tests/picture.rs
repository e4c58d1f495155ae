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

/// How wide a character is at most, in ems, in the monospace fonts the pictures name (DejaVu Sans
/// Mono and Menlo 0.602, Consolas 0.55, Liberation Mono and Courier 0.6): the test's own bound,
/// not the picture code's.
const CHAR_EM: f64 = 0.62;

/// A `<rect>`: x, y, width, height, and its class.
#[derive(Clone, Debug)]
struct Rect {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    class: String,
}

/// The rects of `svg`, in order.
fn rects(svg: &str) -> Vec<Rect> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let num = |n: &roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("rect"))
        .map(|n| Rect {
            x: num(&n, "x"),
            y: num(&n, "y"),
            w: num(&n, "width"),
            h: num(&n, "height"),
            class: n.attribute("class").unwrap_or("").to_string(),
        })
        .collect()
}

/// PIC8: every `<text>` lies inside its box, the smallest rect holding the start of its first
/// character (a row, a header, the range bar, or else the picture itself), by the width
/// [`CHAR_EM`] bounds and a font's ascent (0.75 em) and descent (0.25 em).
fn check_texts_in_boxes(svg: &str) -> Result<(), TestCaseError> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let boxes = rects(svg);
    let num = |n: &roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    let mut seen = 0;
    for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let (x, y, size) = (num(&t, "x"), num(&t, "y"), num(&t, "font-size"));
        let s = t.text().unwrap_or("");
        let (ax, ay) = (x + 0.5, y - 0.35 * size);
        let b = boxes
            .iter()
            .filter(|r| r.x <= ax && ax <= r.x + r.w && r.y <= ay && ay <= r.y + r.h)
            .min_by(|a, b| (a.w * a.h).total_cmp(&(b.w * b.h)));
        prop_assert!(
            b.is_some(),
            "{s:?} at ({x}, {y}) lies in no rect, not even the picture"
        );
        let b = b.unwrap();
        let right = x + s.chars().count() as f64 * CHAR_EM * size;
        let eps = 0.11;
        prop_assert!(
            right <= b.x + b.w + eps,
            "{s:?} at x {x} reaches {right:.1}, past its box {b:?}"
        );
        prop_assert!(
            y - 0.75 * size >= b.y - eps && y + 0.25 * size <= b.y + b.h + eps,
            "{s:?} at y {y} (size {size}) is not inside its box {b:?} from top to bottom"
        );
        seen += 1;
    }
    prop_assert!(seen > 0, "no text at all");
    Ok(())
}

/// PIC9: a count is followed by its noun in the singular when it is 1 and in the plural else
/// (`1 table`, `2 tables`, `0 bytes`), with or without `more` between.
fn check_count_words(texts: &[String]) -> Result<(), TestCaseError> {
    const NOUNS: [(&str, &str); 10] = [
        ("table", "tables"),
        ("entry", "entries"),
        ("byte", "bytes"),
        ("PMI", "PMIs"),
        ("wrap", "wraps"),
        ("error", "errors"),
        ("lap", "laps"),
        ("event", "events"),
        ("line", "lines"),
        ("time", "times"),
    ];
    for t in texts {
        // Words between spaces; a count may open a bracket (`(6 entries`), a noun may close a
        // clause (`tables)`, `lost;`).
        let words: Vec<&str> = t.split(' ').collect();
        for k in 0..words.len() {
            let n = words[k].trim_start_matches('(');
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let noun = match words.get(k + 1) {
                Some(&"more") => words.get(k + 2),
                w => w,
            };
            let Some(noun) = noun.map(|w| w.trim_end_matches([',', ';', ':', ')'])) else {
                continue;
            };
            let noun = &noun;
            for (one, many) in NOUNS {
                if *noun == one || *noun == many {
                    let want = if n == "1" { one } else { many };
                    prop_assert_eq!(*noun, want, "{:?} in {:?}", n, t);
                }
            }
        }
    }
    Ok(())
}

/// The vertical runs of the END hops: (lane x, top, bottom), and the hops' end points.
fn end_hops(svg: &str) -> Vec<(f64, f64, f64)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("path") && n.attribute("class") == Some("end-hop"))
        .map(|n| {
            let pts: Vec<(f64, f64)> = n
                .attribute("d")
                .unwrap()
                .split(['M', 'L'])
                .filter(|p| !p.trim().is_empty())
                .map(|p| {
                    let (a, b) = p.trim().split_once(',').unwrap();
                    (a.parse().unwrap(), b.parse().unwrap())
                })
                .collect();
            assert_eq!(pts.len(), 4, "an END hop is three segments: {pts:?}");
            assert_eq!(pts[1].0, pts[2].0, "the middle segment is vertical: {pts:?}");
            (pts[1].0, pts[1].1.min(pts[2].1), pts[1].1.max(pts[2].1))
        })
        .collect()
}

/// PIC7: one END hop per END row whose target table is drawn, each vertical run in a lane right
/// of the tables and left of the region bars, and no two hops sharing a stretch of a lane.
fn check_lanes(svg: &str, hops_wanted: usize) -> Result<(), TestCaseError> {
    let hops = end_hops(svg);
    prop_assert_eq!(hops.len(), hops_wanted, "END hops drawn");
    let boxes = rects(svg);
    // The table boxes start at x = 16; the widest is the tables' column.
    let tables_r = boxes
        .iter()
        .filter(|r| r.x == 16.0 && r.h == 22.0)
        .map(|r| r.x + r.w)
        .fold(0.0, f64::max);
    let bars_x = boxes
        .iter()
        .filter(|r| r.class == "region-bar")
        .map(|r| r.x)
        .fold(f64::INFINITY, f64::min);
    for (k, &(x, top, bottom)) in hops.iter().enumerate() {
        prop_assert!(
            x > tables_r && x < bars_x,
            "lane {x} not between the tables ({tables_r}) and the bars ({bars_x})"
        );
        for &(x2, top2, bottom2) in &hops[..k] {
            prop_assert!(
                (x - x2).abs() > 0.5 || bottom < top2 || bottom2 < top,
                "two END hops share lane {x}: {top}..{bottom} and {top2}..{bottom2}"
            );
        }
    }
    Ok(())
}

/// END rows of `layout` whose target table it lists (each has a hop).
fn listed_end_rows(layout: &Layout) -> usize {
    let bases: Vec<u64> = layout.tables.iter().map(|t| t.base).collect();
    layout
        .tables
        .iter()
        .flat_map(|t| &t.entries)
        .map(|e| TopaEntry::from(e.raw))
        .filter(|e| e.end() && bases.contains(&e.base()))
        .count()
}

/// PIC10: each region bar's dark part is the share of the region the run filled (`fills`), to
/// scale, and so is each row's band.
fn check_fill_scale(svg: &str, layout: &Layout, run: &ptemu::picture::Run) -> Result<(), TestCaseError> {
    let fills = ptemu::picture::fills(layout, run);
    let boxes = rects(svg);
    let doc = roxmltree::Document::parse(svg).unwrap();
    let labels: Vec<(f64, String)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            (
                n.attribute("y").unwrap().parse().unwrap(),
                n.text().unwrap_or("").to_string(),
            )
        })
        .collect();
    for bar in boxes.iter().filter(|r| r.class == "region-bar") {
        // The bar's label stands on its row: `BASE  SIZE ...`.
        let label = &labels
            .iter()
            .find(|(y, _)| (y - (bar.y + 13.0)).abs() < 0.01)
            .expect("a label beside the bar")
            .1;
        let mut words = label.split_whitespace();
        let base = u64::from_str_radix(words.next().unwrap().trim_start_matches("0x"), 16).unwrap();
        let size = words.next().unwrap().to_string();
        let (region, filled) = layout
            .tables
            .iter()
            .flat_map(|t| {
                t.entries
                    .iter()
                    .enumerate()
                    .map(move |(i, e)| ((t.base, t.first_index + i as u32), TopaEntry::from(e.raw)))
            })
            .filter(|(_, e)| {
                !e.end() && e.base() == base && ptemu::picture::size_text(e.region_size()) == size
            })
            .map(|(at, e)| (e.region_size(), fills[&at]))
            .next()
            .expect("the bar's entry");
        let dark: f64 = boxes
            .iter()
            .filter(|r| r.class == "region-fill" && (r.y - bar.y).abs() < 0.01)
            .map(|r| r.w)
            .sum();
        let want = bar.w * filled as f64 / region as f64;
        prop_assert!(
            (dark - want).abs() <= 0.1,
            "{label}: dark {dark} of {}, filled {filled:#x} of {region:#x}",
            bar.w
        );
    }
    Ok(())
}

/// A layout of [`layout_toml`] with, sometimes, a third table (0x3000) listed, and END entries
/// into any of the three.
fn three_table_toml() -> impl Strategy<Value = String> {
    let entry = prop_oneof![
        (0u64..8, 0u8..3).prop_map(|(slot, code)| {
            let size = ["4K", "8K", "16K"][code as usize];
            format!(
                "{{ region = {:#x}, size = \"{size}\" }}",
                0x20_0000 + slot * 0x4000
            )
        }),
        prop::sample::select(vec![0x1000u64, 0x2000, 0x3000]).prop_map(|t| format!("{{ end = {t:#x} }}")),
    ];
    (layout_toml(), prop::collection::vec(entry, 0..5)).prop_map(|(src, third)| {
        if third.is_empty() {
            src
        } else {
            format!(
                "{src}[[table]]\nbase = 0x3000\nentries = [\n  {}\n]\n",
                third.join(",\n  ")
            )
        }
    })
}

/// The run picture of `len` bytes of 0xFF written through `src`'s layout by the output unit.
fn run_picture(src: &str, len: usize) -> Option<(Layout, ptemu::picture::Run, String)> {
    use ptemu::output::OutputUnit;
    use ptemu::picture::{run_svg, Run};
    use ptemu::report::Report;
    use ptemu::SparseMemory;
    let layout = Layout::parse(Path::new("gen.toml"), src).ok()?;
    let mut mem = SparseMemory::new();
    let mut unit = OutputUnit::new(layout.cpu.clone());
    layout.apply(&mut unit, &mut mem).ok()?;
    let _ = unit.write(&mut mem, &vec![0xffu8; len]);
    let run = Run::of(&Report::of(&unit));
    let svg = run_svg(&layout, &layout::check(&layout), &run);
    Some((layout, run, svg))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    #[test]
    fn pic7_pic8_pic9_pic10_random_layouts_and_runs_keep_texts_in_boxes_hops_in_lanes(src in three_table_toml(), len in 0usize..40_000) {
        let layout = Layout::parse(Path::new("gen.toml"), &src);
        prop_assume!(layout.is_ok());
        let layout = layout.expect("assumed");
        let svg = layout_svg(&layout, &layout::check(&layout));
        check_texts_in_boxes(&svg)?;
        check_count_words(&texts(&svg))?;
        check_lanes(&svg, listed_end_rows(&layout))?;
        let (layout, run, svg) = run_picture(&src, len).expect("it parsed");
        check_texts_in_boxes(&svg)?;
        check_count_words(&texts(&svg))?;
        check_lanes(&svg, listed_end_rows(&layout))?;
        check_fill_scale(&svg, &layout, &run)?;
    }
}

/// A proptest check run once, as a plain test.
fn must(r: Result<(), TestCaseError>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[test]
fn pic8_the_demo_keeps_every_text_inside_its_box_before_and_after_a_run() {
    let layout = Layout::load(Path::new("examples/demo-layout.toml")).unwrap();
    must(check_texts_in_boxes(&layout_svg(
        &layout,
        &layout::check(&layout),
    )));
    let demo = std::fs::read_to_string("examples/demo-layout.toml").unwrap();
    let (_, texts, svg) = write_run(&demo, 100 * 1024);
    // The row the issue saw run past its box.
    assert!(
        texts.iter().any(|t| t.ends_with("<- output at 0x10000")),
        "{texts:?}"
    );
    must(check_texts_in_boxes(&svg));
    let committed = std::fs::read_to_string("examples/demo-run.svg").unwrap();
    must(check_texts_in_boxes(&committed));
}

#[test]
fn pic8_a_single_range_with_a_long_label_keeps_it_inside_its_bar() {
    let src = "cpu = \"generic-max\"\n[output]\nscheme = \"single-range\"\nbase = 0xfffffff000000\nmask_ptrs = 0x7ffffff\n";
    let layout = Layout::parse(Path::new("r.toml"), src).unwrap();
    must(check_texts_in_boxes(&layout_svg(
        &layout,
        &layout::check(&layout),
    )));
}

#[test]
fn pic7_pic9_three_tables_draw_three_hops_in_their_own_lanes_and_count_in_words() {
    let layout = Layout::load(Path::new("examples/three-tables.toml")).unwrap();
    let svg = layout_svg(&layout, &layout::check(&layout));
    let hops = end_hops(&svg);
    assert_eq!(hops.len(), 3, "{hops:?}");
    // Each table is entered by one hop: the ring's long way back and the two hops down.
    must(check_lanes(&svg, 3));
    let all = texts(&svg).join("\n");
    assert!(all.contains("walk (7 entries, 3 tables)"), "{all}");
    let one = "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x1000\nmask_ptrs = 0x7f\n\
               [[table]]\nbase = 0x1000\nentries = [\n  { region = 0x10000, size = \"4K\", stop = true },\n]\n";
    let layout = Layout::parse(Path::new("one.toml"), one).unwrap();
    let all = texts(&layout_svg(&layout, &layout::check(&layout)));
    assert!(
        all.iter().any(|t| t.starts_with("walk (1 entry, 1 table)")),
        "{all:?}"
    );
    must(check_count_words(&all));
    let (_, texts, _) = write_run(one, 1);
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("run: 1 byte in, 1 written, 0 lost; 0 PMIs, 0 stopped")),
        "{texts:?}"
    );
    must(check_count_words(&texts));
}

/// PIC11 (issue 54 §11): the header names the output MSRs as the layout sets them, at the start;
/// after a run that came round a ring three times, the run line says so and names no wrap (a
/// ToPA ring comes round by its END entry: W5's index wrap did not happen), and the final MSRs
/// are the report's.
#[test]
fn pic11_the_picture_names_the_starting_msrs_and_the_laps_without_wraps() {
    let ring = "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x1000\nmask_ptrs = 0x7f\n\
               [[table]]\nbase = 0x1000\nentries = [\n  { region = 0x10000, size = \"4K\" },\n  { end = 0x1000 },\n]\n";
    let (report, texts, _) = write_run(ring, 3 * 4096 + 100);
    let all = texts.join("\n");
    assert!(
        all.contains(
            "at the start (the layout's): IA32_RTIT_OUTPUT_BASE 0x1000   IA32_RTIT_OUTPUT_MASK_PTRS 0x7f"
        ),
        "{all}"
    );
    let laps = report["stats"]["laps"].as_u64().unwrap();
    assert_eq!(laps, 3, "{report}");
    assert!(all.contains("came round 3 times"), "{all}");
    assert!(!all.contains("wrap"), "no wrap to name: {all}");
    let ptrs = hex(&report["msr"]["output_mask_ptrs"]);
    assert!(
        all.contains(&format!(
            "final MSRs: OUTPUT_BASE 0x1000, OUTPUT_MASK_PTRS {ptrs:#x}"
        )),
        "{all}"
    );
    must(check_count_words(&texts));
}

#[test]
fn pic10_a_region_half_filled_draws_a_fill_half_its_bar_and_row() {
    let ring = "cpu = \"skylake\"\n[output]\nscheme = \"topa\"\nbase = 0x1000\nmask_ptrs = 0x7f\n\
                [[table]]\nbase = 0x1000\nentries = [\n  { region = 0x10000, size = \"8K\" },\n  \
                { region = 0x20000, size = \"4K\", int = true },\n  { end = 0x1000 },\n]\n";
    let (_, texts, svg) = write_run(ring, 0x1000);
    let boxes = rects(&svg);
    let bars: Vec<&Rect> = boxes.iter().filter(|r| r.class == "region-bar").collect();
    let fill: Vec<&Rect> = boxes.iter().filter(|r| r.class == "region-fill").collect();
    assert_eq!((bars.len(), fill.len()), (2, 1), "{svg}");
    assert_eq!(fill[0].y, bars[0].y, "the 8K region is the filled one");
    assert!(
        (fill[0].w - bars[0].w / 2.0).abs() < 0.1,
        "{:?} is not half of {:?}",
        fill[0],
        bars[0]
    );
    // The row's band too: half the row.
    let rows: Vec<&Rect> = boxes.iter().filter(|r| r.x == 16.0 && r.h == 22.0).collect();
    let band: Vec<&Rect> = boxes.iter().filter(|r| r.class == "row-fill").collect();
    assert_eq!(band.len(), 1, "{svg}");
    assert!(
        (band[0].w - rows[0].w / 2.0).abs() < 0.1,
        "{:?} is not half of {:?}",
        band[0],
        rows[0]
    );
    assert!(
        texts.iter().any(|t| t.starts_with("0x10000  8K  50%")),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.starts_with("0x20000  4K  INT  empty")),
        "{texts:?}"
    );
}
