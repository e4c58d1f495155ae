//! `ptemu repack`: a trace's packets laid out as a CPU's output would be (spec/hardware.md).

use super::output::{is_std, stdout_is_open, write_output};
use super::packet_cmd::{open, unchanged};
use super::Failure;
use ptemu::packet::{Packet, PacketDecoder};
use ptemu::packing::{AgreementMeter, Packing, Repacker};
use ptemu::regs::CpuProfile;
use std::path::{Path, PathBuf};

/// The command line of `ptemu repack`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace file ("-" for stdin).
    file: PathBuf,
    /// The CPU profile whose layout to use.
    #[arg(long, default_value = "skylake")]
    cpu: String,
    /// Override the profile's layout: none or hardware.
    #[arg(long, value_name = "none|hardware")]
    packing: Option<Packing>,
    /// Output trace file ("-" for stdout).
    #[arg(short, long, required_unless_present = "compare")]
    output: Option<PathBuf>,
    /// Print the agreement of the trace's PADs with the layout instead of writing.
    #[arg(long, conflicts_with = "output")]
    compare: bool,
    /// With --compare: one JSON object.
    #[arg(long, requires = "compare")]
    json: bool,
    /// Decode from byte 0 instead of from the first PSB.
    #[arg(long)]
    no_sync: bool,
}

/// The layout to use: `--packing`, else the profile's.
fn packing_of(args: &Args) -> Result<Packing, Failure> {
    let cpu = CpuProfile::named(&args.cpu).map_err(|e| Failure::input(e.to_string()))?;
    Ok(args.packing.unwrap_or(cpu.packing))
}

/// Visits every packet of `data` with its offset and length, from the first PSB (or byte 0),
/// one at a time (memory stays flat at any length); a byte that does not decode is an error
/// naming the file and offset.
fn each_packet(
    path: &Path,
    data: &[u8],
    no_sync: bool,
    warn: bool,
    f: &mut dyn FnMut(u64, Packet, usize) -> std::io::Result<()>,
) -> Result<std::io::Result<()>, Failure> {
    let mut d = PacketDecoder::new(data, 0);
    if !no_sync && !d.sync_forward() {
        return Err(Failure::input(format!(
            "{}: no PSB in {} bytes (use --no-sync to decode from byte 0)",
            path.display(),
            data.len()
        )));
    }
    if warn && d.offset() > 0 {
        tracing::warn!(
            "{}: {} bytes before the first PSB skipped (use --no-sync to keep them)",
            path.display(),
            d.offset()
        );
    }
    while let Some(r) = d.next_packet() {
        let (offset, p) = r.map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
        if let Err(e) = f(offset, p, (d.offset() - offset) as usize) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

/// `ptemu repack`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let packing = packing_of(args)?;
    if args.output.as_deref().is_some_and(is_std) {
        stdout_is_open()?;
    }
    let input = open(&args.file)?;
    let data = input.bytes();
    // A first pass decodes everything, so that bad bytes write nothing (not even to stdout);
    // the compare pass measures as it goes.
    let mut meter = AgreementMeter::new(packing);
    let compare = args.compare;
    each_packet(&args.file, data, args.no_sync, true, &mut |off, p, len| {
        if compare {
            meter.push(off, p, len);
        }
        Ok(())
    })?
    .map_err(|e| Failure::input(e.to_string()))?;
    unchanged(&input, &args.file)?;
    if args.compare {
        let a = meter.finish();
        let share = if a.packets == 0 {
            100.0
        } else {
            100.0 * a.matched as f64 / a.packets as f64
        };
        let text = if args.json {
            serde_json::json!({
                "file": args.file.display().to_string(),
                "packing": packing.name(),
                "packets": a.packets,
                "matched": a.matched,
                "share": share,
                "missed_by_kind": a.missed_by_kind,
                "first_misses": a.misses.iter().map(|m| serde_json::json!({
                    "offset": m.0, "packet": m.1, "pads": m.2, "predicted": m.3
                })).collect::<Vec<_>>(),
            })
            .to_string()
        } else {
            let mut t = format!(
                "{}: {} of {} packets ({share:.2}%) have the PAD run the {} layout predicts",
                args.file.display(),
                a.matched,
                a.packets,
                packing.name()
            );
            for (kind, n) in &a.missed_by_kind {
                t.push_str(&format!("\n  missed before {kind}: {n}"));
            }
            for (off, kind, seen, want) in &a.misses {
                t.push_str(&format!(
                    "\n  {off:#010x} {kind}: {seen} PAD(s), predicted {want}"
                ));
            }
            t
        };
        return super::output::print(&format!("{text}\n"));
    }
    let output = args
        .output
        .as_deref()
        .expect("clap requires -o without --compare");
    write_output(output, |w| {
        let mut r = Repacker::new(packing);
        let passed = each_packet(&args.file, data, args.no_sync, false, &mut |off, p, len| {
            if p == Packet::Pad {
                return Ok(());
            }
            let at = off as usize;
            r.push(w, &p, &data[at..at + len])
        });
        match passed {
            Ok(result) => result.and_then(|()| r.finish(w)),
            // Decoded once already: the bytes cannot fail now unless the file changed under us.
            Err(f) => Err(std::io::Error::other(f.message().to_owned())),
        }
    })
}
