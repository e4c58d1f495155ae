//! `ptemu run`: a real program under `qemu-x86_64` with ptemu's plugin, traced as `simulate`
//! traces a file (spec/qemu.md). The arguments are parsed here, the recording is
//! [`ptemu::program::record_staged`], and its summary printed from the [`Recording`].

use super::output::eprint_text;
use super::simulate_cmd::{case_options, run_options, summary, RunArgs};
use super::summary::{fail_on_operational_error, replacing_line};
use super::Failure;
use ptemu::program::{describe, Limits, Processes, RecordError, RecordOptions, Recording, ThreadCase};
use ptemu::sources::qemu::Sideband;
use ptemu::sources::Format;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The arguments of `ptemu run`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// The QEMU user-mode emulator for x86-64 programs. Default: qemu-x86_64 on the PATH.
    #[arg(long, value_name = "PATH")]
    qemu: Option<PathBuf>,
    /// ptemu's QEMU plugin. Default: $PTEMU_QEMU_PLUGIN, else libptemu_qemu.so next to the
    /// ptemu executable or in ../lib/ptemu/ from it (where the README's install puts it).
    #[arg(long, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// The most forked child processes traced at the same time (QE19); one more is exit 2.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_children: u32,
    /// The most bytes of the plugin's stream one forked child may send (QE19): a number with
    /// an optional K, M or G (binary multiples); more is exit 2.
    #[arg(long, value_name = "SIZE", default_value = "64G", value_parser = parse_size)]
    max_stream_bytes: u64,
    /// How long, after the program ended, to wait for forked children that run on (QE19);
    /// children still running then are exit 2.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    wait_children: u64,
    /// The program to trace and its arguments (after `--`); found on the PATH as a shell finds
    /// it.
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    command: Vec<OsString>,
}

/// Issue 54 §8: on a terminal, a line on stderr that says how far the run is, shown once it
/// has taken a second (a short run shows nothing) and cleared before the summary; only when
/// the program's output goes elsewhere (`ptemu run -- gzip -c x > x.gz`): a line redrawn
/// among the program's own lines on the terminal would garble them.
fn progress_line(quiet: bool) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    (!quiet && std::io::stderr().is_terminal() && !std::io::stdout().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::hidden();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg}, {elapsed}").expect("valid template"),
        );
        bar
    })
}

/// The progress sink that moves `bar`.
fn told(bar: indicatif::ProgressBar, start: Instant) -> ptemu::program::ProgressSink {
    Arc::new(move |n: Option<u64>| match n {
        Some(n) => {
            if bar.is_hidden() && start.elapsed() >= Duration::from_secs(1) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                bar.enable_steady_tick(Duration::from_millis(200));
            }
            bar.set_message(format!("{} block executions traced", indicatif::HumanCount(n)));
        }
        None => bar.finish_and_clear(),
    })
}

pub fn run(a: Args) -> Result<(), Failure> {
    let progress = progress_line(a.run.quiet);
    let opts = run_options(Format::Qemu, &a.run)?;
    let case = case_options(&a.run);
    let options = RecordOptions::new(a.command.clone(), &a.run.out)
        .with_simulate(opts)
        .with_case(case)
        .with_qemu(a.qemu.clone())
        .with_plugin(a.plugin.clone())
        .with_limits(Limits {
            open: a.max_children as usize,
            bytes: a.max_stream_bytes,
            wait: std::time::Duration::from_secs(a.wait_children),
        })
        .with_closed_std(super::closed_at_start())
        .with_on_warning(Some(Arc::new(|w: &str| {
            eprint_text(&format!("ptemu: warning: {w}\n"))
        })))
        .with_on_progress(progress.clone().map(|bar| told(bar, Instant::now())));
    let staged = ptemu::program::record_staged(&options);
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    let staged = staged?;
    let r = staged.recording();
    if !a.run.quiet {
        let mut text = summary(
            "run",
            &r.name,
            &options.case,
            &options.simulate,
            &r.outcome,
            &r.report,
            r.truth.as_ref(),
        );
        program_lines(&mut text, r.exit, &r.sideband, &options.simulate);
        thread_lines(&mut text, &a.run.out, &r.threads);
        process_lines(&mut text, &a.run.out, &r.processes);
        replacing_line(&mut text, &staged.replacing(), &a.run.out);
        // On stderr: stdout is the program's, and `ptemu run -- ls > list` must hold what
        // `ls > list` holds (as `time` and `strace` report on stderr).
        eprint_text(&text);
    }
    let r: Recording = staged.commit()?;
    if let Err(f) = fail_on_operational_error(&r.outcome.unit) {
        // The exit status is the program's (QE11); the output unit's error is said all the same.
        eprint_text(&format!("ptemu: warning: {}\n", f.message()));
    }
    match r.exit_code() {
        0 => Ok(()),
        n => Err(Failure::status(n)),
    }
}

impl From<RecordError> for Failure {
    fn from(e: RecordError) -> Self {
        match e {
            // As a shell says it (QE11).
            RecordError::NotFound(m) => Failure::with_code(127, m),
            RecordError::NotExecutable(m) => Failure::with_code(126, m),
            RecordError::Output(m) => Failure::output(m),
            e => Failure::input(e.to_string()),
        }
    }
}

fn process_lines(o: &mut String, out: &Path, p: &Processes) {
    if !p.traced.is_empty() {
        outln!(
            o,
            "  processes: {} forked child process(es), each a run of its own in {}/processes/<pid>/ (QE18):",
            p.traced.len(),
            out.display()
        );
        for c in &p.traced {
            outln!(
                o,
                "    process {}: {} instructions in its main thread{}",
                c.pid,
                c.instructions,
                if !c.threads.is_empty() {
                    format!(", {} more thread(s)", c.threads.len())
                } else {
                    String::new()
                }
            );
        }
    }
    for (pid, why) in &p.failed {
        outln!(o, "  not traced: forked child {pid}: {why}");
    }
    let never: Vec<String> = p
        .missing
        .iter()
        .filter(|m| !p.failed.iter().any(|f| f.0 == **m))
        .map(u64::to_string)
        .collect();
    if !never.is_empty() {
        outln!(
            o,
            "  not traced: {} forked child process(es) that never ran under the plugin (pids {}): \
             killed or exec'd before their first block, or forked while another thread was sending",
            never.len(),
            never.join(", ")
        );
    }
}

fn thread_lines(o: &mut String, out: &Path, cases: &[ThreadCase]) {
    if cases.is_empty() {
        return;
    }
    outln!(
        o,
        "  threads: {} more, each a case of its own in {}/threads/<tid>/ (QE15):",
        cases.len(),
        out.display()
    );
    for c in cases {
        outln!(
            o,
            "    thread {}: {} instructions, {} trace bytes",
            c.tid,
            c.instructions,
            c.trace_bytes
        );
    }
}

fn program_lines(o: &mut String, exit: ExitStatus, s: &Sideband, opts: &ptemu::simulate::Options) {
    outln!(
        o,
        "  program: {}, {} file mappings ran code (report.json: program.maps)",
        describe(exit),
        s.maps.len()
    );
    if let Some((signal, ip)) = s.killed {
        outln!(
            o,
            "  signal {signal} killed it at {ip:#x}, where the trace ends: that instruction did not \
             complete (QE22; report.json: program.killed)"
        );
    }
    if !s.code.is_empty() {
        let mut pages: Vec<u64> = s.code.iter().map(|c| c.page).collect();
        pages.sort_unstable();
        pages.dedup();
        outln!(
            o,
            "  code written at run time: {} page(s), {} version(s) (at most {}), in code/ (report.json: program.code, QE17)",
            pages.len(),
            s.code.len(),
            ptemu::sources::qemu::written::MAX_VERSIONS
        );
        if s.code.len() > pages.len() && !opts.ctl.cyc_en() {
            outln!(
                o,
                "  note: the program rewrote code it had run: decoders load each version at the time it was \
                 written, which a trace without CYC packets does not tell them finely enough: trace with \
                 --ctl CYCEn=1 for perf and libipt to replay it"
            );
        }
    }
    if !s.ended {
        if let Some(e) = s.execs.last() {
            outln!(
                o,
                "  the program called execve({e}): the trace ends there, the new program ran untraced"
            );
        }
    }
}

/// A byte count: digits with an optional K, M, G or T (binary multiples: 1K = 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((k, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "{text:?}: a size is a number with an optional K, M, G or T"
                    ))
                }
            };
            (&t[..k], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: a size is a number with an optional K, M, G or T"))?;
    n.checked_mul(1u64 << shift)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?}: a size from 1 byte to 2^64 - 1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_multiples() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16k"), Ok(16 << 10));
        assert_eq!(parse_size("64G"), Ok(64 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("").is_err());
    }
}
