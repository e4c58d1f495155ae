//! Command-line front end: argument parsing and the subcommands.

/// `println!` into the `String` a command's console output is gathered in (see [`output::print`]).
macro_rules! outln {
    ($o:expr) => {
        $o.push('\n')
    };
    ($o:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        // Formatting into a String cannot fail.
        let _ = writeln!($o, $($arg)*);
    }};
}

mod boot_cmd;
mod cleanup;
mod corpus_cmd;
mod layout_cmd;
mod output;
mod packet_cmd;
mod pttc_cmd;
mod repack_cmd;
mod run_cmd;
mod sideband_args;
mod simulate_cmd;
mod source_cmd;
mod summary;
mod truth_cmd;
mod verify_cmd;
mod write_cmd;

use clap::{Parser, Subcommand};
use ptemu::sources::Format;
use std::path::PathBuf;
use std::process::ExitCode;

/// A hardware-accurate Intel Processor Trace output emulator.
#[derive(Parser)]
#[command(name = "ptemu", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a trace: reader -> tracer -> packets -> output unit -> memory. Writes DIR/trace.pt
    /// (every byte the output unit accepted), DIR/regions/, DIR/report.json and, for Penn input,
    /// DIR/image.bin and DIR/image.json with the ptxed command that replays the trace.
    #[command(override_usage = "ptemu simulate [OPTIONS] --out <OUT> [<INPUT> --format <FORMAT>]")]
    Simulate(simulate_cmd::Args),
    /// Run a real x86-64 program under QEMU (qemu-x86_64) with ptemu's plugin and trace it as
    /// `simulate` traces a file: DIR receives the same outputs, and with --perf-data a perf.data
    /// that names the files the program mapped (spec/qemu.md). Exits with the program's status.
    #[command(override_usage = "ptemu run [OPTIONS] --out <OUT> -- <PROGRAM> [ARGS]...")]
    Run(run_cmd::Args),
    /// Boot a whole x86-64 machine under QEMU's system emulator (qemu-system-x86_64) with
    /// ptemu's plugin and trace every vCPU, kernel and user code, as a logical processor of its
    /// own: DIR/cpu<N>/ each a case as `simulate` writes one, DIR/code/ the code they ran, by
    /// address space, and DIR/machine.json (spec/qemu.md QE27-QE30). The guest's console is
    /// passed through. Exits 0 when the guest powers off, 3 when its kernel panicked, 4 past
    /// --timeout.
    #[command(override_usage = "ptemu boot [OPTIONS] --out <OUT> --kernel <FILE> [-- QEMU ARGS]")]
    Boot(boot_cmd::Args),
    /// Program the MSRs from a layout, write a byte stream through the output unit, disable tracing,
    /// and write DIR/report.json and DIR/regions/.
    Write {
        /// Layout file (TOML).
        #[arg(long)]
        layout: PathBuf,
        /// The byte stream to write ("-" for stdin).
        #[arg(long)]
        stream: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Write into an OUT that holds files ptemu did not write: same-named ones are
        /// replaced, nothing else is touched (spec/simulate.md SIM22).
        #[arg(long)]
        force: bool,
        /// Print nothing on success.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Print the packets of a trace, one per line: offset, name, fields. Exits 1 if bytes fail to
    /// decode (each error is shown with its offset, then decoding resyncs at the next PSB).
    /// `--format ptdump` prints what libipt's ptdump prints, with ptdump's options, perf_event
    /// sideband (`--pevent:*`, `--sb:*`) included.
    Dump(packet_cmd::DumpArgs),
    /// Assemble the text form back into bytes.
    Asm {
        /// Text file (as `ptemu dump` writes it; "-" for stdin).
        file: PathBuf,
        /// Output trace file ("-" for stdout).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Lay a trace's packets out as a CPU's output would (spec/hardware.md): every PAD dropped,
    /// the same packets written with the PADs the CPU puts between them. With --compare, write
    /// nothing and print how many of the trace's own PAD runs that layout predicts.
    Repack(repack_cmd::Args),
    /// Write a synthetic trace in one of the input formats (same seed, same bytes).
    Gen(source_cmd::GenArgs),
    /// Compile a libipt .ptt test (yasm assembly with `@pt`/`@sb` directives and `.exp`
    /// sections) into the files libipt's pttc writes: FILE.bin, FILE.pt, FILE-<tool>.exp and
    /// the sideband .sb files (spec/pttc.md). Exits 2 with the file and line on bad input.
    Pttc(pttc_cmd::Args),
    /// Read a trace through its mapping to PT events and print the counts (records, branches by
    /// kind, loads, stores, ...). Exits 2 with the file and position on bad input.
    Stats {
        /// Trace file ("-" for stdin; gzip is detected by magic).
        input: PathBuf,
        /// Format: byu, byu-p2, penn, kaplan, gem5.
        #[arg(long, value_enum)]
        format: Format,
        /// gem5 only: the instruction-fetch trace that goes with an elastic data trace.
        #[arg(long)]
        fetch_trace: Option<PathBuf>,
        /// Skip bad records and count them instead of stopping at the first.
        #[arg(long)]
        lenient: bool,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a decoder test suite (spec/truth.md): DIR/<case>/ with trace.pt, image.bin,
    /// image.json, truth.jsonl and case.json for clean runs over CTL settings, packet styles and
    /// inputs that make every packet kind an input can, every fault kind under every packet
    /// style, and DIR/manifest.json with each case's packets and events. Same seed, same bytes.
    Corpus(corpus_cmd::Args),
    /// Check a decoder's instruction output against a case's truth.jsonl (spec/truth.md): exit 0
    /// when it gave every recoverable instruction in order and nothing else, 1 with the first
    /// divergence, 2 on bad files.
    Verify(verify_cmd::Args),
    /// Truth files (spec/truth.md).
    Truth {
        #[command(subcommand)]
        command: truth_cmd::Command,
    },
    /// Layout files.
    Layout {
        #[command(subcommand)]
        command: LayoutCommand,
    },
}

#[derive(Subcommand)]
enum LayoutCommand {
    /// Validate a layout against its CPU profile; report violations with rule IDs.
    Check {
        /// Layout file (TOML).
        layout: PathBuf,
    },
    /// Print the layout `ptemu simulate` uses without --layout (with --cpu P: on that CPU,
    /// whose ToPA may take a single output region, SIM2).
    Default {
        /// The CPU profile (broadwell, skylake, ...).
        #[arg(long)]
        cpu: Option<String>,
    },
    /// Draw a layout as SVG (spec/picture.md): its tables and entries in walk order, END hops,
    /// the regions to scale with INT and STOP, operational errors with their rule IDs.
    Draw {
        /// Layout file (TOML).
        layout: PathBuf,
        /// The SVG file to write ("-" for stdout).
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// A failure the user must see: the message, and the exit code.
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    /// The reader of our stdout went away (a closed pipe): stop, say nothing, exit 0.
    pub fn reader_gone() -> Self {
        Failure {
            message: String::new(),
            code: 0,
        }
    }

    /// Bad input or an I/O failure: exit code 2.
    pub fn input(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }

    /// Writing the outputs failed (a full disk, say): exit code 2, and a run that meets it
    /// anywhere writes nothing.
    pub fn output(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }

    /// What it says.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Exit with `code` (a traced program's status), saying nothing.
    pub fn status(code: u8) -> Self {
        Failure {
            message: String::new(),
            code,
        }
    }

    /// Exit with `code` and a message (a program that cannot run: 126, 127).
    pub fn with_code(code: u8, message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code,
        }
    }

    /// The check ran and found problems: exit code 1.
    pub fn found(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }
}

/// Logs through `tracing` to stderr: RUST_LOG when set, else warnings, or more with `-v`.
fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let from_env = tracing_subscriber::EnvFilter::try_from_default_env().ok();
    // Without -v or RUST_LOG a warning reads as ptemu's other messages do ("ptemu: warning:
    // ..."), not as a log line with a time and a module.
    let plain = verbose == 0 && from_env.is_none();
    let filter = from_env.unwrap_or_else(|| tracing_subscriber::EnvFilter::new(level));
    // Colour escapes only on a terminal: a log file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // A warning that cannot be written (stderr a closed pipe) is dropped: the subscriber's
        // own report of the failure would go through `eprintln!`, which panics there.
        .log_internal_errors(false);
    let _ = if plain {
        builder.event_format(PlainMessage).try_init()
    } else {
        builder.try_init()
    };
}

/// A log event as one of ptemu's messages: "ptemu: warning: MESSAGE" (the message field only;
/// the other fields are for -v).
struct PlainMessage;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for PlainMessage
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        /// The message, then the other fields as `(name=value, ...)`.
        struct Message(String, Vec<String>);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                } else {
                    self.1.push(format!("{}={v:?}", f.name()));
                }
            }
        }
        let word = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        let mut message = Message(String::new(), Vec::new());
        event.record(&mut message);
        let fields = if message.1.is_empty() {
            String::new()
        } else {
            format!(" ({})", message.1.join(", "))
        };
        writeln!(w, "ptemu: {word}: {}{fields}", message.0)
    }
}

/// Which of descriptors 0, 1 and 2 were closed when the process started (bit k: descriptor k),
/// looked at before Rust's runtime opens `/dev/null` on them (it does so before `main`).
static CLOSED_AT_START: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Runs from `.init_array`, before Rust's runtime and `main`: notes the standard descriptors
/// that are closed, so that `ptemu run` passes them on closed (QE11).
extern "C" fn note_closed_descriptors() {
    let mut bits = 0u8;
    for k in 0..3 {
        // SAFETY: fcntl on a descriptor number; a closed one fails with EBADF.
        if unsafe { libc::fcntl(k, libc::F_GETFD) } < 0 {
            bits |= 1 << k;
        }
    }
    CLOSED_AT_START.store(bits, std::sync::atomic::Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_DESCRIPTORS: extern "C" fn() = note_closed_descriptors;

/// Which of descriptors 0, 1 and 2 were closed when ptemu started (bit k: descriptor k).
pub fn closed_at_start() -> u8 {
    CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed)
}

/// `e` with a tip where `ptemu run`'s program came without the `--` before it (`ptemu run --out
/// r2 ls`): clap says only "unexpected argument 'ls'".
fn with_program_tip(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    // The words as the OS gave them: one that is not UTF-8 is not `run`.
    let is_run = std::env::args_os()
        .skip(1)
        .find(|w| !w.as_encoded_bytes().starts_with(b"-"))
        .is_some_and(|w| w == "run");
    if !is_run || arg.starts_with('-') {
        return e;
    }
    let tip =
        format!("the program and its arguments come after `--`: ptemu run [OPTIONS] --out DIR -- {arg} ...");
    e.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip.into()]));
    e
}

/// Parses the arguments, runs the command, and maps failures to exit codes.
pub fn run() -> ExitCode {
    // First of all: SIGINT, SIGTERM and SIGHUP end the process with 128 + N from here on, even
    // when it was started with them ignored (a shell's `cmd &`), and clean up what a command
    // registers later (cleanup.rs).
    cleanup::install();
    let cli = Cli::try_parse().unwrap_or_else(|e| with_program_tip(e).exit());
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Simulate(args) => simulate_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Boot(args) => boot_cmd::run(args),
        Command::Layout {
            command: LayoutCommand::Default { cpu },
        } => layout_cmd::default(cpu.as_deref()),
        Command::Write {
            layout,
            stream,
            out,
            force,
            quiet,
        } => write_cmd::run(&layout, &stream, &out, force, quiet),
        Command::Layout {
            command: LayoutCommand::Check { layout },
        } => layout_cmd::check(&layout),
        Command::Layout {
            command: LayoutCommand::Draw { layout, output },
        } => layout_cmd::draw(&layout, &output),
        Command::Dump(args) => packet_cmd::dump_command(&args),
        Command::Asm { file, output } => packet_cmd::asm(&file, &output),
        Command::Repack(args) => repack_cmd::run(&args),
        Command::Verify(args) => verify_cmd::run(&args),
        Command::Truth { command } => truth_cmd::run(&command),
        Command::Corpus(args) => corpus_cmd::run(&args),
        Command::Gen(args) => source_cmd::gen(&args),
        Command::Pttc(args) => pttc_cmd::run(&args),
        Command::Stats {
            input,
            format,
            fetch_trace,
            lenient,
            json,
        } => source_cmd::stats(format, &input, fetch_trace.as_deref(), lenient, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) if f.code == 0 => ExitCode::SUCCESS,
        Err(f) if f.message.is_empty() => ExitCode::from(f.code),
        Err(f) => {
            output::eprint_text(&format!("ptemu: error: {}\n", f.message));
            ExitCode::from(f.code)
        }
    }
}
