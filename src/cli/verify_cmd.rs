//! `ptemu verify CASE_DIR --ips FILE`: a decoder's instruction output against the case's truth
//! (`spec/truth.md`, TR8).

use super::output::{is_std, print};
use super::Failure;
use ptemu::truth::verify::{check_with, Options, Pattern, Unchecked, Verdict};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Whose event lines `verify --events` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EventStyle {
    /// ptxed's (and the libipt harness's) bracketed lines.
    Ptxed,
    /// perf script's synthesized events.
    Perf,
}

/// The arguments of `ptemu verify`.
#[derive(clap::Args)]
pub struct Args {
    /// A case directory (its truth.bin, else truth.jsonl), or a truth file (truth.bin or
    /// truth.jsonl; "-" for stdin).
    case: PathBuf,
    /// The decoder's output ("-" for stdin): a line whose first word is an IP is an
    /// instruction, one whose first word is `error` (or a ptxed `[..: error: ..]` line) an
    /// error; other lines are ignored. An IP is 0x and 1-16 hex digits, or hex digits that are
    /// 16 long, hold a decimal digit, or stand right-aligned in perf's 16-column field: a word
    /// like `bad` or `face` is not one (spec/truth.md, TR8).
    #[arg(long)]
    ips: PathBuf,
    /// Check the decoder's event lines too. `ptxed` (the default): ptxed's words, [enabled]
    /// (or [resumed]), [disabled], [interrupt], [overflow], with the IPs ptxed's --event:ip
    /// prints (TR10), and the events of other packets with their payloads: [exec mode:
    /// 64-bit], [ptwrite: …], [pwre c1.0], [interrupt 14, cr2: …], … (TR11). `--events=perf`: perf
    /// script's synthesized events (`--itrace=…pw -F event,ip,synth`: ptwrite, pwre, pwrx,
    /// exstop, mwait, cbr), the only ones it prints. Without it event lines are ignored
    /// (spec/truth.md).
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "ptxed", value_name = "STYLE")]
    events: Option<EventStyle>,
    /// Check the time on instruction lines too, to within TOLERANCE TSC ticks: the hex number
    /// after `tsc:` (or `tsc=`) on the line, as the libipt harness prints with --time, must lie
    /// between the times of the timing packets (TSC, MTC, CYC) around the instruction's carrier
    /// (spec/truth.md, TR13). Lines without a time are not checked.
    #[arg(long, value_name = "TOLERANCE")]
    time: Option<u64>,
    /// Print nothing; the exit code says it (0 pass, 1 divergence, 2 bad files).
    #[arg(long, short)]
    quiet: bool,
}

/// The decoder's output, read on the match's thread.
type Output = Box<dyn BufRead + Send>;

fn open(path: &Path) -> Result<Output, Failure> {
    if is_std(path) {
        return Ok(Box::new(BufReader::new(io::stdin())));
    }
    let f = File::open(path).map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
    Ok(Box::new(BufReader::with_capacity(1 << 16, f)))
}

pub fn run(a: &Args) -> Result<(), Failure> {
    if is_std(&a.case) && is_std(&a.ips) {
        return Err(Failure::input(
            "`-` for both the truth and --ips: both cannot be stdin",
        ));
    }
    let truth = super::truth_cmd::truth_file(&a.case)?;
    let name = truth.display().to_string();
    let truth_failure = |e: ptemu::truth::TruthError| Failure::input(e.to_string());
    let unchecked = if is_std(&truth) {
        None
    } else {
        Unchecked::open(&truth).map_err(truth_failure)?
    };
    let options = match a.events {
        None => Options::events(false),
        Some(EventStyle::Ptxed) => Options::events(true),
        Some(EventStyle::Perf) => Options::perf_events(),
    };
    let options = match a.time {
        Some(tol) => options.with_time(tol),
        None => options,
    };
    let (instructions, verdict, mut ips) = match unchecked {
        // A truth.bin: its records checked whole while the output is matched on the other core
        // (issue 51 §5); the check's error first, as when it ran before the match.
        Some(u) => {
            let ips = match open(&a.ips) {
                Ok(ips) => ips,
                Err(e) => {
                    u.check().map_err(truth_failure)?;
                    return Err(e);
                }
            };
            let matching = u.spawn_match(ips, options);
            let instructions = u.check().map_err(truth_failure)?;
            let (verdict, ips) = matching
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (instructions, verdict, ips)
        }
        None => {
            let pattern = if is_std(&truth) {
                Pattern::read(&name, open(&truth)?)
            } else {
                Pattern::open(&truth)
            }
            .map_err(truth_failure)?;
            let mut ips = open(&a.ips)?;
            let verdict = check_with(&pattern, &mut ips, options);
            (pattern.instructions, verdict, ips)
        }
    };
    let verdict: Verdict = verdict.map_err(|e| Failure::input(format!("{}: {e}", a.ips.display())))?;
    // The rest of a pipe is read, so the decoder writing it is not killed by SIGPIPE.
    let _ = io::copy(&mut ips, &mut io::sink());
    match verdict.divergence {
        None => {
            if !a.quiet {
                let events = if a.events.is_some() {
                    format!(
                        ", {} error line(s) and {} event line(s)",
                        verdict.errors, verdict.events
                    )
                } else {
                    format!(" and {} error line(s)", verdict.errors)
                };
                let times = match a.time {
                    Some(tol) => format!(" ({} with a time within {tol} of the truth's)", verdict.times),
                    None => String::new(),
                };
                let undefined = match verdict.in_undefined {
                    0 => String::new(),
                    n => format!("{n} of them read where an undefined span could take any line, TR5; "),
                };
                print(&format!(
                    "ptemu verify: ok: {} instruction line(s){times}{events} agree with {name} ({undefined}the truth has {} instructions a decoder must or may give)\n",
                    verdict.ips, instructions
                ))?;
            }
            Ok(())
        }
        Some(d) => Err(Failure::found(format!(
            "{}: diverges from {name}: {d}",
            a.ips.display()
        ))),
    }
}
