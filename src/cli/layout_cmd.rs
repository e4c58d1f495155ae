//! `ptemu layout check`.

use super::Failure;
use ptemu::layout::{self, Layout};
use std::path::Path;

pub fn check(path: &Path) -> Result<(), Failure> {
    let layout = Layout::load(path).map_err(|e| Failure::input(e.to_string()))?;
    let report = layout::check(&layout);
    let name = path.display();
    for f in &report.faults {
        println!("{name}: {f}");
    }
    for v in &report.violations {
        println!("{name}: operational error when reached: {v}");
    }
    for w in &report.warnings {
        println!("{name}: warning: {w}");
    }
    if report.is_ok() {
        println!(
            "{name}: ok ({}, cpu {}, walk of {} entries from the start)",
            match layout.scheme {
                ptemu::layout::Scheme::Topa => "ToPA",
                ptemu::layout::Scheme::SingleRange => "single range",
            },
            layout.cpu,
            report.walk.len()
        );
        Ok(())
    } else {
        Err(Failure::found(format!(
            "{name}: {} #GP fault(s), {} operational error(s)",
            report.faults.len(),
            report.violations.len()
        )))
    }
}
