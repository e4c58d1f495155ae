//! `ptemu gen` (synthetic traces) and `ptemu stats` (read a trace through its mapping, count).

use super::Failure;
use flate2::{write::GzEncoder, Compression};
use ptemu::report::write_atomic;
use ptemu::sources::{self, EventSource, Format, Input, ReadOptions};
use std::io::Write;
use std::path::Path;

/// Writes a synthetic trace (and a gem5 fetch trace) through temporary files and renames.
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
    let fail = |path: &Path, e: std::io::Error| Failure::input(format!("{}: {e}", path.display()));
    // For a gem5 pair the fetch trace is generated into memory first (it is small: one record per
    // fetch block), so both files come from one run of the generator.
    let mut fetch_bytes = Vec::new();
    write_atomic(output, |out| {
        let fetch = fetch_trace.map(|_| &mut fetch_bytes as &mut dyn Write);
        if gzip {
            let mut gz = GzEncoder::new(out, Compression::default());
            sources::generate(format, records, seed, &mut gz, fetch)?;
            gz.finish()?;
            Ok(())
        } else {
            sources::generate(format, records, seed, out, fetch)
        }
    })
    .map_err(|e| fail(output, e))?;
    if let Some(path) = fetch_trace {
        write_atomic(path, |out| {
            if gzip {
                let mut gz = GzEncoder::new(out, Compression::default());
                gz.write_all(&fetch_bytes)?;
                gz.finish()?;
                Ok(())
            } else {
                out.write_all(&fetch_bytes)
            }
        })
        .map_err(|e| fail(path, e))?;
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
    print_stats(src.as_ref(), total, json);
    Ok(())
}

fn print_stats(src: &dyn EventSource, events: u64, json: bool) {
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
        println!("{doc}");
        return;
    }
    println!("format   {}", s.format);
    println!("records  {}", s.records);
    println!("skipped  {}", s.skipped);
    println!("events   {events}");
    for (k, v) in &s.counts {
        println!("{k:<16} {v}");
    }
    for a in &s.approximations {
        println!("approximate: {a}");
    }
}
