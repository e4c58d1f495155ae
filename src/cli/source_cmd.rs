//! `ptemu gen` (synthetic traces) and `ptemu stats` (read a trace through its mapping, count).

use super::output::{is_std, print, write_output};
use super::Failure;
use flate2::{write::GzEncoder, Compression};
use ptemu::sources::{self, EventSource, Format, Input, ReadOptions};
use std::io::Write;
use std::path::Path;

/// Writes a synthetic trace (and a gem5 fetch trace) through temporary files and renames, or the
/// trace to stdout for `-o -`.
pub fn gen(
    format: Format,
    records: u64,
    seed: u64,
    output: &Path,
    gzip: bool,
    fetch_trace: Option<&Path>,
) -> Result<(), Failure> {
    if fetch_trace.is_some() && format != Format::Gem5 {
        return Err(Failure::input(format!(
            "--fetch-trace goes with --format gem5 only, not {format}"
        )));
    }
    if fetch_trace.is_some_and(is_std) {
        return Err(Failure::input(
            "--fetch-trace -: the fetch trace goes to a file (stdout can carry one trace: use -o -)",
        ));
    }
    // For a gem5 pair the fetch trace is generated into memory first (it is small: one record per
    // fetch block), so both files come from one run of the generator.
    let mut fetch_bytes = Vec::new();
    write_output(output, |out| {
        let fetch = fetch_trace.map(|_| &mut fetch_bytes as &mut dyn Write);
        if gzip {
            let mut gz = GzEncoder::new(out, Compression::default());
            sources::generate(format, records, seed, &mut gz, fetch)?;
            gz.finish()?;
            Ok(())
        } else {
            sources::generate(format, records, seed, out, fetch)
        }
    })?;
    if let Some(path) = fetch_trace {
        write_output(path, |out| {
            if gzip {
                let mut gz = GzEncoder::new(out, Compression::default());
                gz.write_all(&fetch_bytes)?;
                gz.finish()?;
                Ok(())
            } else {
                out.write_all(&fetch_bytes)
            }
        })?;
    }
    Ok(())
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
