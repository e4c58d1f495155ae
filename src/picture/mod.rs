//! Pictures of a layout (`ptemu layout draw`, `spec/picture.md`): an SVG of the ToPA tables with
//! their entries (index, kind, size, flags), the walk order, END hops, the regions to scale
//! (log scale) with INT and STOP marked, and entries that are operational errors with their rule
//! ID; or the single range with its mask. Every label is real SVG text.
//!
//! Written as plain strings through [`Svg`] (escaping in one place, tested): the pictures use a
//! handful of elements (rect, line, text, path), which a drawing crate would not make simpler.

mod svg;

pub use svg::{escape, text_width, Svg, CHAR_EM};

use crate::layout::{CheckReport, Layout, Scheme};
use crate::output::{EventCounts, EventKind, OutputEvent, OutputStats, TopaEntry};
use crate::regs::MaskPtrs;
use crate::report::{MsrSnapshot, Report};
use std::collections::BTreeMap;

/// Width of the picture in pixels, at least (wider when a text or an END-hop lane needs it).
const WIDTH: f64 = 1160.0;
/// Characters a line of text under the picture holds at most (longer lines are wrapped).
const WRAP: usize = 140;
/// Height of one table row.
const ROW: f64 = 22.0;
/// Width of a table column, at least (wider when a row's text needs it).
const TABLE_W: f64 = 650.0;
/// Left edge of the region bars, at least (further right when the tables or lanes need it).
const BARS_X: f64 = 700.0;
/// The widest region bar.
const BAR_MAX: f64 = 300.0;

/// Fill colours, chosen to differ in lightness too (readable in greyscale): regions light blue,
/// END entries grey, errors red with a double outline, STOP a thick black bar, INT a dashed one.
mod colour {
    pub const REGION: &str = "#cfe3f7";
    pub const END: &str = "#a8a8a8";
    pub const ERROR: &str = "#f4a6a6";
    /// The share of a region a run filled, in its bar: a dark blue.
    pub const FILLED: &str = "#3d6e9e";
    pub const INK: &str = "#111111";
    pub const FAINT: &str = "#666666";
}

/// One listed entry, with what the check said of it.
struct Row {
    table: u64,
    index: u32,
    entry: TopaEntry,
    /// Position in the walk from the starting entry (1-based), if the walk reaches it.
    step: Option<usize>,
    /// The rule of an operational error at this entry.
    error: Option<&'static str>,
}

/// What a run (`ptemu write`, `ptemu simulate`) did through a layout, drawn on top of it: how
/// full each region is, where output stands (the final MSRs), the events and the bytes lost.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Run {
    /// The MSRs at the end (after TraceEn = 0).
    pub msr: MsrSnapshot,
    /// Bytes in, written, lost.
    pub stats: OutputStats,
    /// Every event, counted.
    pub counts: EventCounts,
    /// The first events, in order.
    pub events: Vec<OutputEvent>,
}

impl Run {
    /// A run from its parts.
    pub fn new(msr: MsrSnapshot, stats: OutputStats, counts: EventCounts, events: Vec<OutputEvent>) -> Self {
        Run {
            msr,
            stats,
            counts,
            events,
        }
    }

    /// The run `report.json` describes.
    pub fn of(report: &Report) -> Self {
        Run {
            msr: report.msr,
            stats: report.stats,
            counts: report.event_counts,
            events: report.events.clone(),
        }
    }
}

/// Entry rows drawn at most (the rest are counted under the picture).
const MAX_ROWS: usize = 512;
/// Lines of text under the picture at most.
const MAX_LINES: usize = 200;
/// Walk steps listed at most under the picture.
const MAX_WALK: usize = 64;

/// Events listed one per line in a run's picture (the rest are counted).
const EVENTS_LISTED: usize = 12;

/// The SVG of `layout`, with what `report` (its `layout::check`) found: the walk order and the
/// entries in error.
pub fn layout_svg(layout: &Layout, report: &CheckReport) -> String {
    match layout.scheme {
        Scheme::Topa => topa_svg(layout, report, None),
        Scheme::SingleRange => range_svg(layout, report, None),
    }
}

/// [`layout_svg`] with `run` drawn on top: each region's fill, the output position, events.
pub fn run_svg(layout: &Layout, report: &CheckReport, run: &Run) -> String {
    match layout.scheme {
        Scheme::Topa => topa_svg(layout, report, Some(run)),
        Scheme::SingleRange => range_svg(layout, report, Some(run)),
    }
}

/// What the output unit stored where, found by replaying the run's `bytes_in` stream bytes through
/// `layout` as `ptemu write` does (the unit's walk depends on byte counts only): the merged
/// physical spans it wrote.
fn stored_spans(layout: &Layout, bytes_in: u64) -> BTreeMap<u64, u64> {
    // The tables go straight into the memory (they are not trace bytes); only the unit's own
    // stores go through the recorder.
    let mut rec = Recorder::default();
    let mut unit = crate::output::OutputUnit::new(layout.cpu.clone());
    if layout.apply(&mut unit, &mut rec.mem).is_err() {
        return BTreeMap::new();
    }
    let chunk = vec![0u8; 1 << 16];
    let mut left = bytes_in;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if unit.write(&mut rec, &chunk[..n]).is_err() {
            break;
        }
        // The replay's own events are not kept: memory stays flat however many wraps there are.
        unit.drain_events().for_each(drop);
        left -= n as u64;
        // Past an error or a STOP nothing more is stored: no need to push the rest through.
        if unit.registers().status.error() || unit.registers().status.stopped() {
            break;
        }
    }
    rec.spans
}

/// Memory that remembers which bytes the output unit stored, as merged spans (start -> end).
#[derive(Debug, Default)]
struct Recorder {
    mem: crate::memory::SparseMemory,
    spans: BTreeMap<u64, u64>,
}

impl crate::memory::PhysMemory for Recorder {
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), crate::memory::MemError> {
        self.mem.write(pa, data)?;
        let (mut start, mut end) = (pa, pa.saturating_add(data.len() as u64));
        if let Some((&s, &e)) = self.spans.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let inside: Vec<u64> = self.spans.range(start..=end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(e) = self.spans.remove(&s) {
                end = end.max(e);
            }
        }
        self.spans.insert(start, end);
        Ok(())
    }

    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), crate::memory::MemError> {
        self.mem.read(pa, buf)
    }
}

/// Bytes of `[base, base + size)` covered by `spans`.
fn covered(spans: &BTreeMap<u64, u64>, base: u64, size: u64) -> u64 {
    let end = base.saturating_add(size);
    let mut n = 0;
    let first = spans.range(..=base).next_back().map(|(&s, _)| s).unwrap_or(base);
    for (&s, &e) in spans.range(first..end) {
        let (a, b) = (s.max(base), e.min(end));
        if b > a {
            n += b - a;
        }
    }
    n
}

/// Bytes each listed ToPA entry's region holds after `run`, by (table, index): how much of the
/// region the output unit stored into when the run's stream is replayed through the layout
/// (laps fill a ring; a region two entries share counts for both).
pub fn fills(layout: &Layout, run: &Run) -> BTreeMap<(u64, u32), u64> {
    let spans = stored_spans(layout, run.stats.bytes_in);
    let mut out = BTreeMap::new();
    for t in &layout.tables {
        for (i, e) in t.entries.iter().enumerate() {
            let e = TopaEntry::from(e.raw);
            if !e.end() {
                out.insert(
                    (t.base, t.first_index + i as u32),
                    covered(&spans, e.base(), e.region_size()),
                );
            }
        }
    }
    out
}

fn title(svg: &mut Svg, layout: &Layout, what: &str) {
    svg.text(
        16.0,
        28.0,
        16.0,
        "bold",
        colour::INK,
        &format!("{what}, cpu {}", layout.cpu.name),
    );
    svg.text(
        16.0,
        48.0,
        12.0,
        "normal",
        colour::FAINT,
        &format!(
            "at the start (the layout's): IA32_RTIT_OUTPUT_BASE {:#x}   IA32_RTIT_OUTPUT_MASK_PTRS {:#x}",
            layout.base, layout.mask_ptrs
        ),
    );
}

fn rows(layout: &Layout, report: &CheckReport) -> Vec<Row> {
    let steps: BTreeMap<(u64, u32), usize> = report
        .walk
        .iter()
        .enumerate()
        .rev()
        .map(|(i, &at)| (at, i + 1))
        .collect();
    let errors: BTreeMap<(u64, u32), &'static str> = report
        .violations
        .iter()
        .filter_map(|v| Some(((v.table?, v.index?), v.rule.id())))
        .collect();
    let mut out = Vec::new();
    for t in &layout.tables {
        for (i, e) in t.entries.iter().enumerate() {
            let index = t.first_index + i as u32;
            out.push(Row {
                table: t.base,
                index,
                entry: TopaEntry::from(e.raw),
                step: steps.get(&(t.base, index)).copied(),
                error: errors.get(&(t.base, index)).copied(),
            });
        }
    }
    out
}

/// `4K`, `2M`, ...: a region size.
pub fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b % 1024 == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// `N word` with the word in the plural unless N is 1: `1 table`, `2 tables`, `0 bytes`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Left edge of the table boxes.
const TABLE_X: f64 = 16.0;
/// Where an entry row's text starts.
const ROW_TEXT_X: f64 = 28.0;
/// Font size of an entry row.
const ROW_FONT: f64 = 11.0;
/// Font size of a table header.
const HEAD_FONT: f64 = 12.0;
/// Room between a text and the right edge of its box.
const PAD: f64 = 8.0;
/// Distance between two END-hop lanes, and from the tables to the first.
const LANE: f64 = 8.0;

/// Lanes for arrows whose vertical runs span `spans` (top, bottom): the lane of each, so that
/// two arrows in one lane have vertical runs at least [`LANE`] apart. Shorter runs take the inner
/// lanes (fewer crossings); lane 0 is the innermost.
fn lanes(spans: &[(f64, f64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| {
        let len = |i: usize| spans[i].1 - spans[i].0;
        len(a).total_cmp(&len(b)).then(a.cmp(&b))
    });
    let mut taken: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut out = vec![0; spans.len()];
    for i in order {
        let (top, bottom) = spans[i];
        let free = |lane: &Vec<(f64, f64)>| lane.iter().all(|&(t, b)| bottom + LANE <= t || b + LANE <= top);
        let lane = match taken.iter().position(free) {
            Some(l) => l,
            None => {
                taken.push(Vec::new());
                taken.len() - 1
            }
        };
        taken[lane].push((top, bottom));
        out[i] = lane;
    }
    out
}

/// The share of a region a run filled, as text: `full`, `50%`, `<1%`, `empty`.
fn share_text(filled: u64, size: u64) -> String {
    match (filled, size) {
        (0, _) => "empty".into(),
        (f, s) if f >= s => "full".into(),
        (f, s) => match (u128::from(f) * 100 / u128::from(s)) as u64 {
            0 => "<1%".into(),
            p => format!("{p}%"),
        },
    }
}

fn topa_svg(layout: &Layout, report: &CheckReport, run: Option<&Run>) -> String {
    let rows = rows(layout, report);
    let spans = run.map(|r| stored_spans(layout, r.stats.bytes_in));
    let here = run.map(|r| (r.msr.output_base, MaskPtrs::from(r.msr.output_mask_ptrs)));
    // The listed events at the entries they happened at.
    let mut at_entry: BTreeMap<(u64, u32), Vec<(&'static str, u64)>> = BTreeMap::new();
    for e in run.map_or(&[][..], |r| &r.events[..]) {
        if let (Some(t), Some(i)) = (e.table, e.index) {
            let kinds = at_entry.entry((t, i)).or_default();
            match kinds.iter_mut().find(|(k, _)| *k == kind_name(e.kind)) {
                Some((_, n)) => *n += 1,
                None => kinds.push((kind_name(e.kind), 1)),
            }
        }
    }
    // Distinct tables (a table may be listed in several blocks, not always one after another).
    let tables: std::collections::BTreeSet<u64> = layout.tables.iter().map(|t| t.base).collect();
    // Table boxes one under the other, each a header and its rows: where each goes, and the
    // texts, first, so that the boxes are as wide as their longest text.
    let mut y = 80.0;
    let mut header_y: BTreeMap<u64, f64> = BTreeMap::new();
    let mut headers: Vec<(f64, String)> = Vec::new();
    let mut row_y: Vec<f64> = Vec::new();
    // At most MAX_ROWS entry rows: a layout listing thousands of entries is summarised.
    let mut drawn: Vec<&Row> = Vec::new();
    let mut next = 0;
    for t in &layout.tables {
        header_y.entry(t.base).or_insert(y);
        let label = if t.first_index == 0 {
            format!("ToPA table {:#x}", t.base)
        } else {
            format!("ToPA table {:#x} (from entry {:#x})", t.base, t.first_index)
        };
        headers.push((y, label));
        y += ROW;
        for k in 0..t.entries.len() {
            if drawn.len() < MAX_ROWS {
                drawn.push(&rows[next + k]);
                row_y.push(y);
                y += ROW;
            }
        }
        next += t.entries.len();
        y += 14.0;
    }
    let filled = |r: &Row| {
        spans
            .as_ref()
            .map(|s| covered(s, r.entry.base(), r.entry.region_size()))
    };
    let row_texts: Vec<String> = drawn
        .iter()
        .map(|r| row_text(r, filled(r), at_entry.get(&(r.table, r.index)), here))
        .collect();
    let table_w = row_texts
        .iter()
        .map(|t| ROW_TEXT_X - TABLE_X + text_width(t, ROW_FONT) + PAD)
        .chain(headers.iter().map(|(_, h)| 2.0 * PAD + text_width(h, HEAD_FONT)))
        .fold(TABLE_W, f64::max);
    let table_r = TABLE_X + table_w;
    // END hops, each in its own lane right of the tables: (from y, to y) and the lane.
    let mut hops: Vec<(f64, f64)> = Vec::new();
    for (r, &ry) in drawn.iter().zip(&row_y) {
        if let (true, Some(&ty)) = (r.entry.end(), header_y.get(&r.entry.base())) {
            hops.push((ry + ROW / 2.0, ty));
        }
    }
    // Hops into one table arrive at its header spread over its height, in the order they leave.
    let mut arrive: Vec<f64> = vec![0.0; hops.len()];
    for &ty in header_y.values() {
        let into: Vec<usize> = (0..hops.len()).filter(|&k| hops[k].1 == ty).collect();
        for (j, &k) in into.iter().enumerate() {
            arrive[k] = ty + ROW * (j + 1) as f64 / (into.len() + 1) as f64;
        }
    }
    let hop_spans: Vec<(f64, f64)> = hops
        .iter()
        .zip(&arrive)
        .map(|(&(from, _), &to)| (from.min(to), from.max(to)))
        .collect();
    let hop_lanes = lanes(&hop_spans);
    let lanes_used = hop_lanes.iter().map(|&l| l + 1).max().unwrap_or(0);
    let bars_x = (table_r + LANE * (lanes_used as f64 + 1.0) + 24.0).max(BARS_X);

    let mut body = Svg::new();
    for (hy, label) in &headers {
        body.rect(TABLE_X, *hy, table_w, ROW, "#ffffff", colour::INK, 1.5, None);
        body.text(TABLE_X + PAD, hy + 15.0, HEAD_FONT, "bold", colour::INK, label);
    }
    // Walk-order arrows where the walk does not go on to the row just below (a wrap to entry 0,
    // an END hop, a jump over unlisted entries): in the left margin, from row to row.
    let row_at: BTreeMap<(u64, u32), f64> = drawn
        .iter()
        .zip(&row_y)
        .map(|(r, &y)| ((r.table, r.index), y))
        .collect();
    for (k, pair) in report.walk.windows(2).enumerate().take(MAX_WALK) {
        let (Some(&ya), Some(&yb)) = (row_at.get(&pair[0]), row_at.get(&pair[1])) else {
            continue;
        };
        if (yb - ya - ROW).abs() > 0.5 {
            let x = 12.0 - 3.0 * (k % 3) as f64;
            body.walk_arrow(TABLE_X, ya + ROW / 2.0, x, yb + ROW / 2.0, colour::FAINT);
        }
    }
    for ((r, &ry), text) in drawn.iter().zip(&row_y).zip(&row_texts) {
        let (fill, stroke, width) = match (r.error, r.entry.end()) {
            (Some(_), _) => (colour::ERROR, colour::INK, 2.5),
            (None, true) => (colour::END, colour::INK, 1.0),
            (None, false) => (colour::REGION, colour::INK, 1.0),
        };
        let dash = (r.entry.int() && !r.entry.end()).then_some("5,3");
        body.rect(TABLE_X, ry, table_w, ROW, fill, stroke, width, dash);
        if r.entry.stop() && !r.entry.end() {
            body.rect(TABLE_X, ry, 6.0, ROW, colour::INK, colour::INK, 1.0, None);
        }
        if let (Some(f), false) = (filled(r), r.entry.end()) {
            // The fill to scale: a black band in the row's lower part, as long as the share of
            // the region the run filled.
            let share = f as f64 / r.entry.region_size() as f64;
            if f > 0 {
                body.class("row-fill").rect(
                    TABLE_X,
                    ry + ROW - 5.0,
                    table_w * share,
                    4.0,
                    colour::INK,
                    "none",
                    0.0,
                    None,
                );
            }
        }
        if let Some((base, ptrs)) = here {
            if base == r.table && ptrs.mask_or_table_offset() == r.index {
                body.rect(TABLE_X, ry, table_w, ROW, "none", colour::INK, 3.0, None);
            }
        }
        body.text(ROW_TEXT_X, ry + 15.0, ROW_FONT, "normal", colour::INK, text);
    }
    // END hops: from the row's right edge to its lane, along it, into the target's header.
    for ((&(from, _), &to), &lane) in hops.iter().zip(&arrive).zip(&hop_lanes) {
        let x = table_r + LANE * (lane as f64 + 1.0);
        body.class("end-hop")
            .arrow(table_r, from, x, to, table_r + 2.0, colour::FAINT);
    }
    // The regions, to scale (log2 of the size: 4 KiB is the smallest, 128 MiB the largest).
    let mut regions: Vec<(u64, u64, bool, bool, Option<&'static str>)> = rows
        .iter()
        .filter(|r| !r.entry.end())
        .map(|r| {
            (
                r.entry.base(),
                r.entry.region_size(),
                r.entry.int(),
                r.entry.stop(),
                r.error,
            )
        })
        .collect();
    // Two entries may name the same base with different sizes: each (base, size) has a bar.
    regions.sort_unstable_by_key(|r| (r.0, r.1));
    regions.dedup_by_key(|r| (r.0, r.1));
    let mut ry = 80.0;
    body.text(
        bars_x,
        ry + 15.0,
        HEAD_FONT,
        "bold",
        colour::INK,
        if run.is_some() {
            "regions (length: log2 of the size; dark: filled)"
        } else {
            "regions (bar length: log2 of the size)"
        },
    );
    ry += ROW;
    for (base, size, int, stop, error) in &regions {
        let scale = (size.trailing_zeros().saturating_sub(11)) as f64 / 16.0;
        let w = (BAR_MAX * scale).max(24.0);
        let fill = if error.is_some() {
            colour::ERROR
        } else {
            colour::REGION
        };
        body.class("region-bar").rect(
            bars_x,
            ry,
            w,
            ROW - 4.0,
            fill,
            colour::INK,
            1.0,
            int.then_some("5,3"),
        );
        let f = spans.as_ref().map(|s| covered(s, *base, *size));
        if let Some(f @ 1..) = f {
            // The share filled, to scale, inside the bar's outline.
            let share = (f as f64 / *size as f64).min(1.0);
            body.class("region-fill").rect(
                bars_x,
                ry,
                w * share,
                ROW - 4.0,
                colour::FILLED,
                "none",
                0.0,
                None,
            );
            body.rect(
                bars_x,
                ry,
                w,
                ROW - 4.0,
                "none",
                colour::INK,
                1.0,
                int.then_some("5,3"),
            );
        }
        if *stop {
            body.rect(
                bars_x + w - 6.0,
                ry,
                6.0,
                ROW - 4.0,
                colour::INK,
                colour::INK,
                1.0,
                None,
            );
        }
        let mut label = format!("{base:#x}  {}", size_text(*size));
        if *int {
            label.push_str("  INT");
        }
        if *stop {
            label.push_str("  STOP");
        }
        if let Some(f) = f {
            label.push_str(&format!("  {}", share_text(f, *size)));
        }
        body.text(
            bars_x + w + 8.0,
            ry + 13.0,
            ROW_FONT,
            "normal",
            colour::INK,
            &label,
        );
        ry += ROW;
    }
    let mut walk: Vec<String> = Vec::new();
    for (k, (t, i)) in report.walk.iter().enumerate().take(MAX_WALK) {
        if k > 0 && report.walk[k - 1] == (*t, crate::output::MAX_INDEX) && *i == 0 {
            walk.push("(wrap, W5)".into());
        }
        walk.push(format!("{t:#x}[{i:#x}]"));
    }
    y = y.max(ry) + 10.0;
    let mut lines = vec![format!(
        "walk ({}, {}): {}",
        count(report.walk.len() as u64, "entry", "entries"),
        count(tables.len() as u64, "table", "tables"),
        walk.join(" -> ")
    )];
    if report.walk.len() > MAX_WALK {
        lines.push(format!(
            "... the walk goes on for {}",
            count(
                (report.walk.len() - MAX_WALK) as u64,
                "more entry",
                "more entries"
            )
        ));
    }
    if rows.len() > drawn.len() {
        let more = (rows.len() - drawn.len()) as u64;
        lines.push(format!(
            "{} not drawn",
            count(more, "more listed entry is", "more listed entries are")
        ));
    }
    lines.extend(report.violations.iter().map(|v| format!("error: {v}")));
    lines.extend(report.faults.iter().map(|f| format!("#GP: {f}")));
    lines.extend(report.warnings.iter().map(|w| format!("warning: {w}")));
    if let Some(run) = run {
        lines.extend(run_lines(run));
    }
    if lines.len() > MAX_LINES {
        let more = (lines.len() - MAX_LINES) as u64;
        lines.truncate(MAX_LINES);
        lines.push(format!(
            "... {} (layout check and events.jsonl have them all)",
            count(more, "more line", "more lines")
        ));
    }
    for l in &lines {
        for chunk in wrap(l, WRAP) {
            body.text(16.0, y + 12.0, 11.0, "normal", colour::INK, &chunk);
            y += 16.0;
        }
    }
    let mut head = Svg::new();
    title(
        &mut head,
        layout,
        if run.is_some() {
            "ToPA output after the run"
        } else {
            "ToPA output"
        },
    );
    finish(head, body, y + 16.0)
}

/// The picture: `head` (the title) and `body`, at least [`WIDTH`] wide and wider when a text or
/// mark reaches further.
fn finish(head: Svg, body: Svg, height: f64) -> String {
    let width = (head.right().max(body.right()) + 16.0).max(WIDTH).ceil();
    let mut svg = Svg::start(width, height);
    svg.append(head);
    svg.append(body);
    svg.finish()
}

/// The text of an entry row: `#STEP [INDEX] WHAT`, its error, and after a run its fill, events
/// and the output position.
fn row_text(
    r: &Row,
    filled: Option<u64>,
    events: Option<&Vec<(&'static str, u64)>>,
    here: Option<(u64, MaskPtrs)>,
) -> String {
    let step = r.step.map_or(String::from("   "), |s| format!("#{s}"));
    let what = if r.entry.end() {
        format!("END -> {:#x}", r.entry.base())
    } else {
        let mut flags = String::new();
        if r.entry.int() {
            flags.push_str(" INT");
        }
        if r.entry.stop() {
            flags.push_str(" STOP");
        }
        format!(
            "{} at {:#x}{flags}",
            size_text(r.entry.region_size()),
            r.entry.base()
        )
    };
    let mut more = r.error.map_or(String::new(), |id| format!("  error {id}"));
    if let (Some(f), false) = (filled, r.entry.end()) {
        more.push_str(&format!("  filled {f:#x}/{:#x}", r.entry.region_size()));
    }
    if let Some(kinds) = events {
        let shown: Vec<String> = kinds
            .iter()
            .map(|&(k, n)| {
                if n == 1 {
                    k.to_string()
                } else {
                    format!("{k} x{n}")
                }
            })
            .collect();
        more.push_str(&format!("  [{}]", shown.join(", ")));
    }
    if let Some((base, ptrs)) = here {
        if base == r.table && ptrs.mask_or_table_offset() == r.index {
            more.push_str(&format!("  <- output at {:#x}", ptrs.output_offset()));
        }
    }
    format!("{step:>4} [{:#x}] {what}{more}", r.index)
}

/// How an event kind is written in a picture.
fn kind_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Pmi => "PMI",
        EventKind::Stopped => "stopped",
        EventKind::Error => "error",
        EventKind::Wrap => "wrap",
        _ => "erratum",
    }
}

/// The run's totals and its first events, as lines of text.
fn run_lines(run: &Run) -> Vec<String> {
    let c = &run.counts;
    // A wrap event is the walk's index or the range's offset going back to 0 (W5, R3), rare in
    // a ToPA ring, which comes round by its END entry: named only when there is one, beside the
    // laps (the times output came round onto bytes it wrote before).
    let wraps = match c.wrap {
        0 => String::new(),
        n => format!(
            "{}, ",
            count(n, "wrap to offset 0 (W5, R3)", "wraps to offset 0 (W5, R3)")
        ),
    };
    let mut lines = vec![
        format!(
            "run: {} in, {} written, {} lost; {}, {wraps}{} stopped, {}; came round {}, {} overwritten",
            count(run.stats.bytes_in, "byte", "bytes"),
            run.stats.bytes_written,
            run.stats.bytes_lost,
            count(c.pmi, "PMI", "PMIs"),
            c.stopped,
            count(c.error, "error", "errors"),
            count(run.stats.laps, "time", "times"),
            count(run.stats.bytes_overwritten, "byte", "bytes"),
        ),
        format!(
            "final MSRs: OUTPUT_BASE {:#x}, OUTPUT_MASK_PTRS {:#x}, STATUS {:#x}",
            run.msr.output_base, run.msr.output_mask_ptrs, run.msr.rtit_status
        ),
    ];
    for e in run.events.iter().take(EVENTS_LISTED) {
        let kind = kind_name(e.kind);
        let at = match (e.table, e.index) {
            (Some(t), Some(i)) => format!(" at {t:#x}[{i:#x}]"),
            _ => String::new(),
        };
        let rule = e.rule.map_or(String::new(), |r| format!(" ({})", r.id()));
        lines.push(format!(
            "event: {kind} after {}{at}{rule}",
            count(e.stream_offset, "byte", "bytes")
        ));
    }
    let total = c.total();
    if total > EVENTS_LISTED as u64 {
        lines.push(format!(
            "... {} (events.jsonl lists them all)",
            count(total - EVENTS_LISTED as u64, "more event", "more events")
        ));
    }
    lines
}

fn range_svg(layout: &Layout, report: &CheckReport, run: Option<&Run>) -> String {
    let ptrs = MaskPtrs::from(layout.mask_ptrs | MaskPtrs::LOWER_MASK);
    let mask = u64::from(ptrs.mask_or_table_offset()) << 7 | 0x7f;
    let size = mask + 1;
    let offset = match run {
        Some(r) => u64::from(MaskPtrs::from(r.msr.output_mask_ptrs).output_offset()),
        None => u64::from(ptrs.output_offset()),
    };
    let mut body = Svg::new();
    let y = 80.0;
    let fill = if report.violations.is_empty() {
        colour::REGION
    } else {
        colour::ERROR
    };
    let label = format!(
        "{:#x} .. {:#x} ({})",
        layout.base,
        layout.base.wrapping_add(size),
        size_text(size)
    );
    // The bar holds its label: as wide as that needs, at least BAR_MAX.
    let bar_w = (text_width(&label, 12.0) + 2.0 * PAD).max(BAR_MAX);
    body.rect(16.0, y, bar_w, 28.0, fill, colour::INK, 1.5, None);
    let filled = run.map(|r| covered(&stored_spans(layout, r.stats.bytes_in), layout.base, size));
    if let Some(f @ 1..) = filled {
        // The share filled, to scale: a band at the bar's bottom.
        let share = (f as f64 / size as f64).min(1.0);
        body.class("range-fill")
            .rect(16.0, y + 23.0, bar_w * share, 4.0, colour::INK, "none", 0.0, None);
    }
    let pos = 16.0 + bar_w * (offset.min(size) as f64 / size as f64);
    body.line(pos, y - 6.0, pos, y + 34.0, colour::INK, 2.0);
    body.text(24.0, y + 19.0, 12.0, "normal", colour::INK, &label);
    let mut ly = y + 56.0;
    let mut lines = vec![
        format!(
            "single range at {:#x}, mask {mask:#x}, {}, output offset {offset:#x}",
            layout.base,
            count(size, "byte", "bytes")
        ),
        "output wraps to the start of the range when it fills (R3)".to_string(),
    ];
    if let (Some(run), Some(filled)) = (run, filled) {
        lines.push(format!(
            "filled {filled:#x}/{size:#x}; output offset {:#x} at the start",
            ptrs.output_offset()
        ));
        lines.extend(run_lines(run));
    }
    lines.extend(report.violations.iter().map(|v| format!("error: {v}")));
    lines.extend(report.faults.iter().map(|f| format!("#GP: {f}")));
    lines.extend(report.warnings.iter().map(|w| format!("warning: {w}")));
    for l in &lines {
        for chunk in wrap(l, WRAP) {
            body.text(16.0, ly, 11.0, "normal", colour::INK, &chunk);
            ly += 16.0;
        }
    }
    let mut head = Svg::new();
    title(&mut head, layout, "Single-range output");
    finish(head, body, ly + 16.0)
}

/// `s` cut into lines of at most `width` characters, at spaces where it can (a longer word is
/// cut where it must).
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    let width = width.max(1);
    let mut words: Vec<String> = Vec::new();
    for word in s.split(' ') {
        let chars: Vec<char> = word.chars().collect();
        if chars.is_empty() {
            words.push(String::new());
        }
        words.extend(chars.chunks(width).map(|c| c.iter().collect::<String>()));
    }
    for word in words {
        let word = word.as_str();
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push(line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_keep_overlapping_runs_apart_and_put_short_runs_inside() {
        // A long run overlapping two short ones that are far apart: the short ones share lane 0.
        let spans = [(0.0, 300.0), (10.0, 40.0), (100.0, 130.0)];
        assert_eq!(lanes(&spans), [1, 0, 0]);
        // Runs closer than a lane's gap do not share a lane.
        assert_eq!(lanes(&[(0.0, 10.0), (10.0 + LANE - 1.0, 30.0)]), [0, 1]);
        assert_eq!(lanes(&[(0.0, 10.0), (10.0 + LANE, 30.0)]), [0, 0]);
        assert!(lanes(&[]).is_empty());
    }

    #[test]
    fn a_share_is_rounded_down_and_never_says_full_or_empty_when_it_is_not() {
        assert_eq!(share_text(0, 4096), "empty");
        assert_eq!(share_text(1, 4096), "<1%");
        assert_eq!(share_text(2048, 4096), "50%");
        assert_eq!(share_text(4095, 4096), "99%");
        assert_eq!(share_text(4096, 4096), "full");
        assert_eq!(count(1, "table", "tables"), "1 table");
        assert_eq!(count(0, "table", "tables"), "0 tables");
    }

    #[test]
    fn wrap_cuts_at_spaces_and_cuts_a_word_longer_than_a_line() {
        assert_eq!(wrap("ab cd ef", 5), ["ab cd", "ef"]);
        assert_eq!(wrap("abcdefgh x", 3), ["abc", "def", "gh", "x"]);
        assert_eq!(wrap("", 3), [""]);
    }
}
