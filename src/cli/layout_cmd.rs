//! `ptemu layout check` and `ptemu layout draw`.

use super::output::{print, write_output};
use super::Failure;
use ptemu::layout::{self, Layout};
use std::path::Path;

pub fn check(path: &Path) -> Result<(), Failure> {
    let layout = Layout::load(path).map_err(|e| Failure::input(e.to_string()))?;
    let report = layout::check(&layout);
    let name = path.display();
    let mut text = String::new();
    let o = &mut text;
    for f in &report.faults {
        outln!(o, "{name}: {f}");
    }
    for v in &report.violations {
        outln!(o, "{name}: operational error when reached: {v}");
    }
    for w in &report.warnings {
        outln!(o, "{name}: warning: {w}");
    }
    if report.is_ok() {
        outln!(
            o,
            "{name}: ok ({}, cpu {}, walk of {} entries from the start)",
            match layout.scheme {
                ptemu::layout::Scheme::Topa => "ToPA",
                ptemu::layout::Scheme::SingleRange => "single range",
            },
            layout.cpu,
            report.walk.len()
        );
        print(&text)
    } else {
        print(&text)?;
        Err(Failure::found(format!(
            "{name}: {} #GP fault(s), {} operational error(s)",
            report.faults.len(),
            report.violations.len()
        )))
    }
}

/// Writes the SVG of the layout at `path` (with what `layout check` finds marked) to `output`.
/// A layout with #GP faults or operational errors is drawn too: the picture shows them.
pub fn draw(path: &Path, output: &Path) -> Result<(), Failure> {
    let layout = Layout::load(path).map_err(|e| Failure::input(e.to_string()))?;
    let report = layout::check(&layout);
    let svg = ptemu::picture::layout_svg(&layout, &report);
    write_output(output, |w| w.write_all(svg.as_bytes()))
}
