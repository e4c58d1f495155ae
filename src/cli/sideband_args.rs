//! `ptemu dump --format ptdump`'s sideband options, named as ptdump names them. ptdump reads
//! them in order: `--pevent:sample-type` and the other `--pevent:*` values apply to the files
//! named after them, and the last of `--sb:compact` / `--sb:verbose` wins. clap's derive does
//! not keep that order, so these options are read by hand with their positions.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use ptemu::ptdump::sideband::{PeventConfig, PrintFlags};
use std::path::PathBuf;

const HEADING: &str = "ptdump sideband";

/// The value options: (id, long name, value name, help).
const VALUES: [(&str, &str, &str, &str); 14] = [
    (
        "pevent",
        "pevent",
        "FILE",
        "ptdump: a perf_event sideband file (as --pevent:primary).",
    ),
    (
        "pevent:primary",
        "pevent:primary",
        "FILE",
        "ptdump: a primary perf_event sideband file, with the --pevent options given before it.",
    ),
    (
        "pevent:secondary",
        "pevent:secondary",
        "FILE",
        "ptdump: a secondary perf_event sideband file (another CPU's).",
    ),
    (
        "pevent:sample-type",
        "pevent:sample-type",
        "N",
        "ptdump: perf_event_attr.sample_type of the files named after it (default 0).",
    ),
    (
        "pevent:time-zero",
        "pevent:time-zero",
        "N",
        "ptdump: perf_event_mmap_page.time_zero (default 0).",
    ),
    (
        "pevent:time-shift",
        "pevent:time-shift",
        "N",
        "ptdump: perf_event_mmap_page.time_shift (default 0).",
    ),
    (
        "pevent:time-mult",
        "pevent:time-mult",
        "N",
        "ptdump: perf_event_mmap_page.time_mult (default 1).",
    ),
    (
        "pevent:tsc-offset",
        "pevent:tsc-offset",
        "N",
        "ptdump: show the records N TSC ticks earlier.",
    ),
    (
        "pevent:kernel-start",
        "pevent:kernel-start",
        "N",
        "ptdump: the kernel's start address (read, no effect on the dump).",
    ),
    ("pevent:sysroot", "pevent:sysroot", "PATH", "ptdump: ignored."),
    ("pevent:kcore", "pevent:kcore", "FILE", "ptdump: ignored."),
    ("pevent:vdso-x64", "pevent:vdso-x64", "FILE", "ptdump: ignored."),
    ("pevent:vdso-x32", "pevent:vdso-x32", "FILE", "ptdump: ignored."),
    ("pevent:vdso-ia32", "pevent:vdso-ia32", "FILE", "ptdump: ignored."),
];

/// The flags: (id, long name, help).
const FLAGS: [(&str, &str, &str); 7] = [
    (
        "sb",
        "sb",
        "ptdump: sideband records in compact format (as --sb:compact).",
    ),
    (
        "sb:compact",
        "sb:compact",
        "ptdump: sideband records in compact format.",
    ),
    (
        "sb:verbose",
        "sb:verbose",
        "ptdump: sideband records in verbose format.",
    ),
    (
        "sb:filename",
        "sb:filename",
        "ptdump: the file name in front of sideband records.",
    ),
    (
        "sb:offset",
        "sb:offset",
        "ptdump: the file offset in front of sideband records.",
    ),
    (
        "sb:time",
        "sb:time",
        "ptdump: the time in front of sideband records.",
    ),
    (
        "sb:warn",
        "sb:warn",
        "ptdump: show sideband warnings (ptdump has none to show).",
    ),
];

/// One sideband file to load, with the configuration in force where it was named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidebandFile {
    /// The file.
    pub path: PathBuf,
    /// `--pevent:secondary` (else primary).
    pub secondary: bool,
    /// Its perf configuration.
    pub config: PeventConfig,
}

/// The sideband options, in ptdump's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidebandArgs {
    /// The files, in command-line order.
    pub files: Vec<SidebandFile>,
    /// How records are printed.
    pub flags: PrintFlags,
    /// Any sideband option was given (they need `--format ptdump`).
    pub any: bool,
}

fn number(id: &str, s: &str) -> Result<u64, clap::Error> {
    super::packet_cmd::c_number(s)
        .map_err(|e| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("--{id}: {e}\n")))
}

impl FromArgMatches for SidebandArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut s = SidebandArgs::default();
        s.update_from_arg_matches(m)?;
        Ok(s)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        // Every occurrence with its position, then replayed in order.
        let mut seen: Vec<(usize, &str, Option<String>)> = Vec::new();
        for (id, ..) in VALUES {
            if let (Some(ix), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) {
                seen.extend(ix.zip(vals).map(|(i, v)| (i, id, Some(v.clone()))));
            }
        }
        for (id, ..) in FLAGS {
            if m.get_count(id) > 0 {
                if let Some(ix) = m.indices_of(id) {
                    seen.extend(ix.map(|i| (i, id, None)));
                }
            }
        }
        seen.sort_by_key(|e| e.0);
        let mut config = PeventConfig::default();
        for (_, id, v) in seen {
            self.any = true;
            let v = v.unwrap_or_default();
            let too_big = |what: &str| {
                clap::Error::raw(
                    clap::error::ErrorKind::ValueValidation,
                    format!("--{id}: value too big for {what}: '{v}'\n"),
                )
            };
            match id {
                "pevent" | "pevent:primary" | "pevent:secondary" => self.files.push(SidebandFile {
                    path: PathBuf::from(&v),
                    secondary: id == "pevent:secondary",
                    config,
                }),
                "pevent:sample-type" => config.sample_type = number(id, &v)?,
                "pevent:time-zero" => config.time_zero = number(id, &v)?,
                "pevent:time-shift" => {
                    config.time_shift = u16::try_from(number(id, &v)?).map_err(|_| too_big("16 bits"))?
                }
                "pevent:time-mult" => {
                    config.time_mult = u32::try_from(number(id, &v)?).map_err(|_| too_big("32 bits"))?
                }
                "pevent:tsc-offset" => config.tsc_offset = number(id, &v)?,
                "pevent:kernel-start" => {
                    number(id, &v)?;
                }
                "sb" | "sb:compact" => {
                    self.flags.compact = true;
                    self.flags.verbose = false;
                }
                "sb:verbose" => {
                    self.flags.verbose = true;
                    self.flags.compact = false;
                }
                "sb:filename" => self.flags.filename = true,
                "sb:offset" => self.flags.offset = true,
                "sb:time" => self.flags.time = true,
                // sysroot, kcore, vdso-*, sb:warn: read, nothing to do in a dump.
                _ => {}
            }
        }
        Ok(())
    }
}

impl Args for SidebandArgs {
    fn augment_args(cmd: Command) -> Command {
        let mut cmd = cmd;
        for (id, long, value, help) in VALUES {
            cmd = cmd.arg(
                Arg::new(id)
                    .long(long)
                    .value_name(value)
                    .help(help)
                    .action(ArgAction::Append)
                    .help_heading(HEADING),
            );
        }
        for (id, long, help) in FLAGS {
            cmd = cmd.arg(
                Arg::new(id)
                    .long(long)
                    .help(help)
                    .action(ArgAction::Count)
                    .help_heading(HEADING),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}
