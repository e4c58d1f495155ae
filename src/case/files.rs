//! The files of a case besides the stream and the truth: the code image, regions/,
//! report.json, layout.svg; and the commit that moves every output into place at once.

use super::{CaseError, RunDir, TruthFormat};
use crate::picture::Run;
use crate::report::{write_atomic, write_outputs_with};
use crate::simulate::{Options, Outcome, RunInfo, SimReport, TruthSummary};
use std::path::Path;

/// Writes the image files, regions/ and report.json into the staging directory; returns the
/// report and the outputs staged.
pub(super) fn finish(
    dir: RunDir,
    opts: &Options,
    outcome: &Outcome,
    (run_info, layout): (RunInfo, String),
    truth: Option<&TruthSummary>,
    perf: Option<&str>,
    program: Option<serde_json::Value>,
) -> std::io::Result<(SimReport, Staged)> {
    let mut outputs = vec!["trace.pt", "events.jsonl"];
    let mut stale = vec![];
    if perf.is_some() {
        outputs.push("perf.data");
        if outcome.image.is_some() {
            outputs.push("image.elf");
        } else {
            stale.push("image.elf");
        }
    } else {
        stale.extend(["perf.data", "image.elf"]);
    }
    let ptxed = match &outcome.image {
        Some(img) => {
            write_atomic(&dir.staged("image.bin"), |w| w.write_all(&img.bytes))?;
            write_atomic(&dir.staged("image.json"), |w| {
                serde_json::to_writer(
                    &mut *w,
                    &serde_json::json!({ "base": format!("{:#x}", img.base) }),
                )?;
                w.write_all(b"\n")
            })?;
            outputs.extend(["image.bin", "image.json"]);
            Some(img.ptxed_command(
                &dir.final_path("trace.pt").display().to_string(),
                &dir.final_path("image.bin").display().to_string(),
                &opts.ptxed_config(),
            ))
        }
        // No stale image from an earlier run next to a trace it does not belong to.
        None => {
            stale.extend(["image.bin", "image.json"]);
            None
        }
    };
    let mut report = SimReport::new(outcome, opts, ptxed);
    report.run = Some(run_info);
    report.layout = Some(layout);
    if let Some(t) = truth {
        report.stats.trace_bytes = t.delivered;
    }
    report.truth = truth.map(TruthSummary::to_json);
    report.perf = perf.map(str::to_owned);
    report.program = program;
    for f in [TruthFormat::Bin, TruthFormat::Jsonl] {
        match truth {
            Some(t) if t.file == f.file() => outputs.push(f.file()),
            _ => stale.push(f.file()),
        }
    }
    write_outputs_with(dir.staging(), &outcome.unit, &outcome.mem, &report)?;
    outputs.extend(["regions", "report.json"]);
    // Code a real program wrote at run time, a file a version (`ptemu run`, QE17).
    if dir.staged("code").is_dir() {
        outputs.push("code");
    }
    // The picture replays the layout as its file programs it: not drawn when --ctl ToPA= says
    // otherwise (SIM5), rather than drawn wrong (spec/picture.md).
    if opts.ctl.topa() == (opts.layout.scheme == crate::layout::Scheme::Topa) {
        let run = Run::new(
            report.msr,
            outcome.unit.stats(),
            report.event_counts,
            report.events.clone(),
        );
        let picture = crate::picture::run_svg(&opts.layout, &crate::layout::check(&opts.layout), &run);
        write_atomic(&dir.staged("layout.svg"), |w| w.write_all(picture.as_bytes()))?;
        outputs.push("layout.svg");
    } else {
        stale.push("layout.svg");
    }
    Ok((report, Staged { dir, outputs, stale }))
}

/// Every output of a run, complete in the staging directory, waiting to be moved into place:
/// after the summary went out, so that a summary that cannot be written (a full stdout) leaves
/// DIR as it was (SIM7).
#[derive(Debug)]
pub struct Staged {
    dir: RunDir,
    outputs: Vec<&'static str>,
    stale: Vec<&'static str>,
}

impl Staged {
    /// The staging directory, where more outputs may be written before the commit.
    pub fn staging(&self) -> &Path {
        self.dir.staging()
    }

    /// What the commit will replace and remove in DIR (SIM22), for the summary.
    pub fn replacing(&self) -> super::Replacing {
        self.dir.replacing(&self.outputs, &self.stale, &self.stale_dirs())
    }

    /// The directories only some runs write (`ptemu run`): an earlier run's go.
    fn stale_dirs(&self) -> Vec<&'static str> {
        ["threads", "processes", "code"]
            .into_iter()
            .filter(|d| !self.outputs.contains(d))
            .collect()
    }

    /// One more output (a file or directory written into [`Staged::staging`]) to move into
    /// place.
    pub fn add_output(&mut self, name: &'static str) {
        self.outputs.push(name);
    }

    /// Moves every output into place (dropped instead, everything the run made is removed);
    /// `out` is DIR, as the error names it.
    pub fn commit(self, out: &Path) -> Result<(), CaseError> {
        let stale_dirs = self.stale_dirs();
        self.dir
            .commit_with_dirs(&self.outputs, &self.stale, &stale_dirs)
            .map_err(|e| CaseError::Input(format!("{}: writing outputs: {e}", out.display())))
    }
}
