//! Pictures of a layout (`ptemu layout draw`, `spec/picture.md`): an SVG of the ToPA tables with
//! their entries (index, kind, size, flags), the walk order, END hops, the regions to scale
//! (log scale) with INT and STOP marked, and entries that are operational errors with their rule
//! ID; or the single range with its mask. Every label is real SVG text.
//!
//! Written as plain strings through [`Svg`] (escaping in one place, tested): the pictures use a
//! handful of elements (rect, line, text, path), which a drawing crate would not make simpler.

mod svg;

pub use svg::{escape, Svg};

use crate::layout::{CheckReport, Layout, Scheme};
use crate::output::{EventCounts, EventKind, OutputEvent, OutputStats, TopaEntry};
use crate::regs::MaskPtrs;
use crate::report::{MsrSnapshot, Report};
use std::collections::BTreeMap;

/// Width of the picture in pixels.
const WIDTH: f64 = 1160.0;
/// Height of one table row.
const ROW: f64 = 22.0;
/// Width of a table column.
const TABLE_W: f64 = 650.0;
/// Left edge of the region bars.
const BARS_X: f64 = 700.0;
/// The widest region bar.
const BAR_MAX: f64 = 300.0;

/// Fill colours, chosen to differ in lightness too (readable in greyscale): regions light blue,
/// END entries grey, errors red with a double outline, STOP a thick black bar, INT a dashed one.
mod colour {
    pub const REGION: &str = "#cfe3f7";
    pub const END: &str = "#a8a8a8";
    pub const ERROR: &str = "#f4a6a6";
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
            "IA32_RTIT_OUTPUT_BASE {:#x}   IA32_RTIT_OUTPUT_MASK_PTRS {:#x}",
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

fn topa_svg(layout: &Layout, report: &CheckReport, run: Option<&Run>) -> String {
    let rows = rows(layout, report);
    let filled = run.map(|r| fills(layout, r)).unwrap_or_default();
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
    // Table boxes one under the other, each a header and its rows.
    let mut y = 80.0;
    let mut header_y: BTreeMap<u64, f64> = BTreeMap::new();
    let mut row_y: Vec<f64> = Vec::new();
    let mut body = Svg::new();
    // At most MAX_ROWS entry rows: a layout listing thousands of entries is summarised.
    let mut drawn: Vec<&Row> = Vec::new();
    let mut next = 0;
    for t in &layout.tables {
        header_y.entry(t.base).or_insert(y);
        body.rect(16.0, y, TABLE_W, ROW, "#ffffff", colour::INK, 1.5, None);
        let label = if t.first_index == 0 {
            format!("ToPA table {:#x}", t.base)
        } else {
            format!("ToPA table {:#x} (from entry {:#x})", t.base, t.first_index)
        };
        body.text(24.0, y + 15.0, 12.0, "bold", colour::INK, &label);
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
            body.walk_arrow(16.0, ya + ROW / 2.0, x, yb + ROW / 2.0, colour::FAINT);
        }
    }
    for (r, &ry) in drawn.iter().zip(&row_y) {
        let (fill, stroke, width) = match (r.error, r.entry.end()) {
            (Some(_), _) => (colour::ERROR, colour::INK, 2.5),
            (None, true) => (colour::END, colour::INK, 1.0),
            (None, false) => (colour::REGION, colour::INK, 1.0),
        };
        let dash = (r.entry.int() && !r.entry.end()).then_some("5,3");
        body.rect(16.0, ry, TABLE_W, ROW, fill, stroke, width, dash);
        if r.entry.stop() && !r.entry.end() {
            body.rect(16.0, ry, 6.0, ROW, colour::INK, colour::INK, 1.0, None);
        }
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
        let err = r.error.map_or(String::new(), |id| format!("  error {id}"));
        let mut err = err;
        if let (Some(_), false) = (run, r.entry.end()) {
            // The fill: a darker band in the row's lower part, and its numbers as text.
            let size = r.entry.region_size();
            let f = filled.get(&(r.table, r.index)).copied().unwrap_or(0);
            let w = TABLE_W * f as f64 / size as f64;
            body.rect(16.0, ry + ROW - 5.0, w, 4.0, colour::INK, colour::INK, 0.5, None);
            err.push_str(&format!("  filled {f:#x}/{size:#x}"));
        }
        if let Some(kinds) = at_entry.get(&(r.table, r.index)) {
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
            err.push_str(&format!("  [{}]", shown.join(", ")));
        }
        if let Some((base, ptrs)) = here {
            if base == r.table && ptrs.mask_or_table_offset() == r.index {
                err.push_str(&format!("  <- output at {:#x}", ptrs.output_offset()));
                body.rect(16.0, ry, TABLE_W, ROW, "none", colour::INK, 3.0, None);
            }
        }
        body.text(
            28.0,
            ry + 15.0,
            11.0,
            "normal",
            colour::INK,
            &format!("{step:>4} [{:#x}] {what}{err}", r.index),
        );
        // END hops: an arrow from the entry to its target table's header, in the margin.
        if r.entry.end() {
            if let Some(&ty) = header_y.get(&r.entry.base()) {
                let x = 16.0 + TABLE_W + 8.0;
                body.arrow(x - 6.0, ry + ROW / 2.0, x + 22.0, ty + ROW / 2.0, colour::FAINT);
            }
        }
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
        BARS_X,
        ry + 15.0,
        12.0,
        "bold",
        colour::INK,
        "regions (bar length: log2 of the size)",
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
        body.rect(
            BARS_X,
            ry,
            w,
            ROW - 4.0,
            fill,
            colour::INK,
            1.0,
            int.then_some("5,3"),
        );
        if *stop {
            body.rect(
                BARS_X + w - 6.0,
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
        body.text(BARS_X + w + 8.0, ry + 13.0, 11.0, "normal", colour::INK, &label);
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
        "walk ({} entries, {} tables): {}",
        report.walk.len(),
        tables.len(),
        walk.join(" -> ")
    )];
    if report.walk.len() > MAX_WALK {
        lines.push(format!(
            "... the walk goes on for {} more entries",
            report.walk.len() - MAX_WALK
        ));
    }
    if rows.len() > drawn.len() {
        lines.push(format!(
            "{} more listed entries are not drawn",
            rows.len() - drawn.len()
        ));
    }
    lines.extend(report.violations.iter().map(|v| format!("error: {v}")));
    lines.extend(report.faults.iter().map(|f| format!("#GP: {f}")));
    lines.extend(report.warnings.iter().map(|w| format!("warning: {w}")));
    if let Some(run) = run {
        lines.extend(run_lines(run));
    }
    if lines.len() > MAX_LINES {
        let more = lines.len() - MAX_LINES;
        lines.truncate(MAX_LINES);
        lines.push(format!(
            "... {more} more lines (layout check and events.jsonl have them all)"
        ));
    }
    for l in &lines {
        for chunk in wrap(l, 140) {
            body.text(16.0, y + 12.0, 11.0, "normal", colour::INK, &chunk);
            y += 16.0;
        }
    }
    let mut svg = Svg::start(WIDTH, y + 16.0);
    title(
        &mut svg,
        layout,
        if run.is_some() {
            "ToPA output after the run"
        } else {
            "ToPA output"
        },
    );
    svg.append(body);
    svg.finish()
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
    let mut lines = vec![
        format!(
            "run: {} bytes in, {} written, {} lost; {} PMI, {} wrap, {} stopped, {} error",
            run.stats.bytes_in,
            run.stats.bytes_written,
            run.stats.bytes_lost,
            c.pmi,
            c.wrap,
            c.stopped,
            c.error
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
        lines.push(format!("event: {kind} after {} bytes{at}{rule}", e.stream_offset));
    }
    let total = c.total();
    if total > EVENTS_LISTED as u64 {
        lines.push(format!(
            "... {} more events (events.jsonl lists them all)",
            total - EVENTS_LISTED as u64
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
    body.rect(16.0, y, BAR_MAX, 28.0, fill, colour::INK, 1.5, None);
    let pos = 16.0 + BAR_MAX * (offset.min(size) as f64 / size as f64);
    body.line(pos, y - 6.0, pos, y + 34.0, colour::INK, 2.0);
    body.text(
        24.0,
        y + 19.0,
        12.0,
        "normal",
        colour::INK,
        &format!(
            "{:#x} .. {:#x} ({})",
            layout.base,
            layout.base + size,
            size_text(size)
        ),
    );
    let mut ly = y + 56.0;
    let mut lines = vec![
        format!(
            "single range at {:#x}, mask {mask:#x}, {} bytes, output offset {offset:#x}",
            layout.base, size
        ),
        "output wraps to the start of the range when it fills (R3)".to_string(),
    ];
    if let Some(run) = run {
        let filled = covered(&stored_spans(layout, run.stats.bytes_in), layout.base, size);
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
        for chunk in wrap(l, 140) {
            body.text(16.0, ly, 11.0, "normal", colour::INK, &chunk);
            ly += 16.0;
        }
    }
    let mut svg = Svg::start(WIDTH, ly + 16.0);
    title(&mut svg, layout, "Single-range output");
    svg.append(body);
    svg.finish()
}

/// `s` cut into lines of at most `width` characters, at spaces where it can.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
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
