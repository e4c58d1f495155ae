//! `ptemu gen` (synthetic traces) and `ptemu stats` (read a trace through its mapping, count).

use super::output::{is_std, print, write_output};
use super::Failure;
use flate2::{write::GzEncoder, Compression};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ptemu::sources::{self, EventSource, Format, Input, ReadOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The arguments of `ptemu gen`.
#[derive(clap::Args)]
pub struct GenArgs {
    /// Format: byu, byu-p2, penn, kaplan, gem5.
    #[arg(long, value_enum)]
    format: Format,
    /// Records to write: micro-op lines for penn (the last instruction is finished, so a Penn
    /// trace may end a few lines past N), dep records for gem5.
    #[arg(long)]
    records: u64,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file ("-" for stdout).
    #[arg(short, long)]
    output: PathBuf,
    /// gzip the output.
    #[arg(long)]
    gzip: bool,
    /// gem5 only: also write the matching instruction-fetch trace here.
    #[arg(long)]
    fetch_trace: Option<PathBuf>,
    /// Print nothing: no progress, no summary line.
    #[arg(long, short)]
    quiet: bool,
}

/// Writes a synthetic trace (and a gem5 fetch trace) through temporary files and renames, or the
/// trace to stdout for `-o -`; shows the bytes written on a terminal meanwhile, then one summary
/// line (on stderr when the trace goes to stdout).
pub fn gen(a: &GenArgs) -> Result<(), Failure> {
    let (format, output) = (a.format, a.output.as_path());
    if a.fetch_trace.is_some() && format != Format::Gem5 {
        return Err(Failure::input(format!(
            "--fetch-trace goes with --format gem5 only, not {format}"
        )));
    }
    if a.fetch_trace.as_deref().is_some_and(is_std) {
        return Err(Failure::input(
            "--fetch-trace -: the fetch trace goes to a file (stdout can carry one trace: use -o -)",
        ));
    }
    let bar = gen_bar(a.quiet);
    // For a gem5 pair the fetch trace is generated into memory first (it is small: one record per
    // fetch block), so both files come from one run of the generator.
    let mut fetch_bytes = Vec::new();
    let mut counts = Counts::default();
    write_output(output, |out| {
        let fetch = a.fetch_trace.as_ref().map(|_| &mut fetch_bytes as &mut dyn Write);
        // The generators write a record at a time: a buffer in front of the counting (and of the
        // encoder, which works per write call) makes both see 64 KiB pieces.
        if a.gzip {
            let mut gz = GzEncoder::new(out, Compression::default());
            let counted = Counted {
                inner: &mut gz,
                counts: &mut counts,
                bar: &bar,
            };
            let mut buffered = BufWriter::with_capacity(1 << 16, counted);
            sources::generate(format, a.records, a.seed, &mut buffered, fetch)?;
            buffered.flush()?;
            drop(buffered);
            gz.finish()?;
            Ok(())
        } else {
            let counted = Counted {
                inner: out,
                counts: &mut counts,
                bar: &bar,
            };
            let mut buffered = BufWriter::with_capacity(1 << 16, counted);
            sources::generate(format, a.records, a.seed, &mut buffered, fetch)?;
            buffered.flush()
        }
    })?;
    bar.finish_and_clear();
    if let Some(path) = &a.fetch_trace {
        write_output(path, |out| {
            if a.gzip {
                let mut gz = GzEncoder::new(out, Compression::default());
                gz.write_all(&fetch_bytes)?;
                gz.finish()?;
                Ok(())
            } else {
                out.write_all(&fetch_bytes)
            }
        })?;
    }
    if a.quiet {
        return Ok(());
    }
    // Penn lines are counted as written; the other formats write exactly N records.
    let records = if format == Format::Penn {
        counts.lines
    } else {
        a.records
    };
    let on_disk = match std::fs::metadata(output) {
        Ok(m) if a.gzip && !is_std(output) => format!(", {} gzipped", m.len()),
        _ => String::new(),
    };
    let fetch = a.fetch_trace.as_ref().map_or(String::new(), |p| {
        format!(
            ", and its fetch trace to {} ({} bytes)",
            p.display(),
            fetch_bytes.len()
        )
    });
    let to = if is_std(output) {
        "stdout".to_string()
    } else {
        output.display().to_string()
    };
    let line = format!(
        "ptemu gen: {records} {format} records (seed {}), {} bytes{on_disk}, to {to}{fetch}\n",
        a.seed, counts.bytes
    );
    if is_std(output) {
        super::output::eprint_text(&line);
        Ok(())
    } else {
        print(&line)
    }
}

/// What `gen` wrote: bytes, and lines (the records of a Penn trace).
#[derive(Default)]
struct Counts {
    bytes: u64,
    lines: u64,
}

/// A writer that counts what goes through it and shows the bytes on the progress bar.
struct Counted<'a, W: Write + ?Sized> {
    inner: &'a mut W,
    counts: &'a mut Counts,
    bar: &'a ProgressBar,
}

impl<W: Write + ?Sized> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.counts.bytes += n as u64;
        self.counts.lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        if !self.bar.is_hidden() {
            self.bar.set_position(self.counts.bytes);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Bytes written and the rate, on stderr when it is a terminal (indicatif hides it otherwise).
fn gen_bar(quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} generating: {binary_bytes} written ({binary_bytes_per_sec}), {elapsed}",
        )
        .expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Reads `input` through the format's mapping and prints what it counted.
pub fn stats(
    format: Format,
    input: &Path,
    fetch_trace: Option<&Path>,
    lenient: bool,
    json: bool,
) -> Result<(), Failure> {
    let err = |e: sources::SourceError| Failure::input(e.to_string());
    let main = Input::open(input).map_err(err)?;
    let fetch = fetch_trace.map(Input::open).transpose().map_err(err)?;
    let mut src = sources::open_events(format, main, fetch, ReadOptions { lenient }).map_err(err)?;
    let total = src.for_each_event(&mut |_| {}).map_err(err)?;
    print(&stats_text(src.as_ref(), total, json))
}

/// What `ptemu stats` prints: text, or one JSON object.
fn stats_text(src: &dyn EventSource, events: u64, json: bool) -> String {
    let mut text = String::new();
    let o = &mut text;
    let s = src.stats();
    if json {
        let counts: serde_json::Map<String, serde_json::Value> = s
            .counts
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        let doc = serde_json::json!({
            "format": s.format,
            "records": s.records,
            "skipped": s.skipped,
            "events": events,
            "counts": counts,
            "approximations": s.approximations,
        });
        outln!(o, "{doc}");
        return text;
    }
    outln!(o, "format   {}", s.format);
    outln!(o, "records  {}", s.records);
    outln!(o, "skipped  {}", s.skipped);
    outln!(o, "events   {events}");
    for (k, v) in &s.counts {
        outln!(o, "{k:<16} {v}");
    }
    for a in &s.approximations {
        outln!(o, "approximate: {a}");
    }
    text
}
