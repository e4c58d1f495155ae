//! After a run: what the consumer reads (`trace.pt`, faults applied) and the ground truth
//! (`truth.jsonl`) that says what a decoder must recover from it (`spec/truth.md`).

use super::fault::{Fault, FaultError, Plan};
use super::{Options, Outcome, SimError};
use crate::layout::Scheme;
use crate::regs::ctl_text::CtlDisplay;
use crate::truth::{self, Context, Counts, Delivery};
use std::fs;
use std::io::{self, BufWriter};
use std::path::Path;

/// What [`finish_truth`] wrote.
#[derive(Clone, Debug)]
pub struct TruthSummary {
    /// The truth's counts.
    pub counts: Counts,
    /// Each fault with the position it took: the instruction (`ovf`), the buffer size (`wrap`,
    /// `stop`), the PMI (`gap`), the stream offset (`corrupt*`).
    pub applied: Vec<(Fault, u64)>,
    /// Bytes in `trace.pt`.
    pub delivered: u64,
    /// The truth file's name (`truth.bin` or `truth.jsonl`).
    pub file: String,
}

impl TruthSummary {
    /// Each fault with the position it took, as `KIND@WHERE`.
    pub fn faults(&self) -> Vec<String> {
        self.applied
            .iter()
            .map(|(f, at)| format!("{}@{at}", f.kind.name()))
            .collect()
    }

    /// The report's `truth` object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            // The written file's own format version (TR1, TR9).
            "file": self.file,
            "version": if self.file.ends_with(".bin") {
                truth::compact::VERSION
            } else {
                u64::from(truth::json::VERSION)
            },
            "counts": self.counts,
            "faults": self.applied.iter().map(|(f, at)| serde_json::json!({
                "kind": f.kind.name(),
                "at": at,
            })).collect::<Vec<_>>(),
            "delivered_bytes": self.delivered,
        })
    }
}

impl Options {
    /// What was done, for the truth's header and `case.json`: input, format, CPU, CTL, MSRs,
    /// faults, seed.
    pub fn describe(&self, plan: &Plan, input: &str) -> serde_json::Value {
        serde_json::json!({
            "input": input,
            "format": self.format.to_string(),
            "cpu": self.layout.cpu.name,
            // CP1: the part, for a decoder's errata workarounds.
            "cpu_signature": self.layout.cpu.signature,
            // CP2: the errata the stream shows.
            "errata": self.layout.cpu.errata.ids(),
            "ctl": format!("{:#x}", self.ctl.bits()),
            "ctl_fields": CtlDisplay(self.ctl).to_string(),
            "msrs": self.msrs_json(),
            "faults": plan.faults.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
            "seed": plan.seed,
            // The TSC's frequency: a decoder's perf time converts back to TSC with it (TR13).
            "tsc_hz": u64::from(self.tracer.clock.nominal_ratio) * 100_000_000,
        })
    }

    /// Applies the simulation side of `plan` (FLT2–FLT4): the `wrap` or `stop` layout (ToPA on in
    /// CTL), the forced overflows. Refused with a `layout` of the user's own: a wrap or stop
    /// fault brings its own.
    pub fn apply_faults(&mut self, plan: &Plan, own_layout: bool) -> Result<(), FaultError> {
        plan.validate()?;
        if let Some(layout) = plan.layout(&self.layout.cpu)? {
            if own_layout {
                return Err(FaultError::OwnLayout);
            }
            self.layout = layout;
            self.ctl = self.ctl.with_topa(self.layout.scheme == Scheme::Topa);
        }
        self.tracer.overflow_at.extend(plan.overflows());
        Ok(())
    }
}

/// Writes `trace_out` (the stream `full` holds, with the consumer-side faults of `plan` applied)
/// and `truth_out` (from the facts spooled in `spool`); removes `full` (unless it is
/// `trace_out`) and `spool`. A fault that cannot apply (a gap in a run without PMIs, a wrap the
/// stream never filled) is [`SimError::Fault`].
pub fn finish_truth(
    full: &Path,
    trace_out: &Path,
    spool: &Path,
    truth_out: &Path,
    outcome: &Outcome,
    plan: &Plan,
    run: serde_json::Value,
) -> Result<TruthSummary, SimError> {
    let (delivery, damage, mut applied) = if plan.changes_delivery() {
        let bytes = fs::read(full).map_err(SimError::Truth)?;
        let d = plan.deliver(&bytes, &outcome.pmis)?;
        fs::write(trace_out, &d.bytes).map_err(SimError::Truth)?;
        if full != trace_out {
            fs::remove_file(full).map_err(SimError::Truth)?;
        }
        (d.delivery, d.damage, d.applied)
    } else {
        if full != trace_out {
            fs::rename(full, trace_out).map_err(SimError::Truth)?;
        }
        (Delivery::whole(outcome.trace_bytes), Vec::new(), Vec::new())
    };
    for f in &plan.faults {
        match f.kind {
            truth::Cause::Ovf => {}
            truth::Cause::Stop => applied.push((*f, f.at.unwrap_or(super::fault::MIN_REGION))),
            _ => continue,
        }
    }
    let mut ovfs = plan.overflows().into_iter();
    for f in plan.faults.iter().filter(|f| f.kind == truth::Cause::Ovf) {
        applied.push((*f, ovfs.next().unwrap_or(0)));
    }
    if plan.faults.iter().any(|f| f.kind == truth::Cause::Stop) && !outcome.truncated {
        return Err(SimError::Fault(FaultError::StopNotFilled(outcome.trace_bytes)));
    }
    let ctx = Context {
        stored: outcome.trace_bytes,
        damage,
        delivery,
        psbs: outcome.psbs.clone(),
        truncated: outcome.truncated,
        run,
    };
    let counts = (|| -> io::Result<Counts> {
        if let Some(counts) = outcome.streamed_truth {
            // TR16: the records were classified as the run went; the header goes before them.
            if !ctx.damage.is_empty() || truth_out.extension().is_none_or(|e| e != "bin") {
                return Err(io::Error::other(
                    "a truth classified as the run went is truth.bin of a run without consumer-side damage",
                ));
            }
            truth::stream::assemble(spool, &ctx, truth_out)?;
            fs::remove_file(spool)?;
            return Ok(counts);
        }
        let spooled = fs::File::open(spool)?;
        let out = BufWriter::with_capacity(1 << 20, fs::File::create(truth_out)?);
        // TR9: `.bin` is the compact form, anything else JSON lines.
        let counts = if truth_out.extension().is_some_and(|e| e == "bin") {
            truth::write_compact(spooled, &ctx, out)?
        } else {
            truth::write(spooled, &ctx, out)?
        };
        fs::remove_file(spool)?;
        Ok(counts)
    })()
    .map_err(SimError::Truth)?;
    Ok(TruthSummary {
        counts,
        applied,
        delivered: ctx.delivery.len(),
        file: truth_out
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
    })
}
