//! `ptemu boot`: a whole machine under `qemu-system-x86_64` with ptemu's plugin, every vCPU
//! traced into a case of its own (spec/qemu.md QE27-QE30). The arguments are parsed here, the
//! run is [`ptemu::machine::trace`], and its summary printed from the [`MachineRecording`].

use super::output::eprint_text;
use super::simulate_cmd::{case_options, run_options, RunArgs};
use super::Failure;
use ptemu::machine::{BootOptions, MachineError, MachineOptions, MachineRecording, TraceStart};
use ptemu::sources::Format;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The exit status when the guest's kernel panicked (QE30).
pub const EXIT_PANIC: u8 = 3;
/// The exit status when the guest ran past `--timeout` (QE30).
pub const EXIT_TIMEOUT: u8 = 4;

/// The arguments of `ptemu boot`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// QEMU's system emulator. Default: qemu-system-x86_64 on the PATH (QEMU 8.0 or later,
    /// which loads plugins; Debian bookworm-backports' qemu-system-x86).
    #[arg(long, value_name = "PATH")]
    qemu: Option<PathBuf>,
    /// ptemu's QEMU plugin. Default: $PTEMU_QEMU_PLUGIN, else libptemu_qemu.so next to the
    /// ptemu executable or in ../lib/ptemu/ from it.
    #[arg(long, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// The guest's kernel (a bzImage, or an ELF kernel with a PVH entry).
    #[arg(long, value_name = "FILE")]
    kernel: PathBuf,
    /// The guest's initial RAM disk.
    #[arg(long, value_name = "FILE")]
    initrd: Option<PathBuf>,
    /// The kernel's command line.
    #[arg(long, value_name = "TEXT", default_value = "console=ttyS0 panic=-1")]
    append: String,
    /// vCPUs: each is a logical processor traced into DIR/cpu<N>/.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    smp: u32,
    /// Guest memory in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 512, value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
    memory: u32,
    /// The longest the guest may run, in seconds; then QEMU is killed and ptemu exits 4.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    timeout: Option<u64>,
    /// Where each vCPU's tracing starts (QE29): `long-mode`, its first block in long mode
    /// (the firmware before it is not traced), or `user`, its first user-mode block (the
    /// kernel's boot left out).
    #[arg(long, value_name = "WHERE", default_value = "long-mode")]
    trace_from: TraceStart,
    /// More arguments for QEMU (after `--`), after ptemu's own.
    #[arg(last = true, value_name = "QEMU ARGS")]
    extra: Vec<OsString>,
}

pub fn run(mut a: Args) -> Result<(), Failure> {
    // QE27: a whole machine is traced at every CPL: OS=1 before the user's own --ctl.
    a.run.ctl.insert(0, "OS=1".into());
    let opts = run_options(Format::Qemu, &a.run)?;
    let case = case_options(&a.run);
    let boot = BootOptions::found(a.qemu.clone(), a.plugin.clone(), a.kernel.clone())
        .map_err(|e| Failure::with_code(127, e.to_string()))?
        .with_initrd(a.initrd.clone())
        .with_append(a.append.clone())
        .with_smp(a.smp)
        .with_memory_mib(a.memory)
        .with_extra(a.extra.clone())
        .with_timeout(a.timeout.map(Duration::from_secs));
    let options = MachineOptions::new(boot, opts, case).with_start(a.trace_from);
    let r = ptemu::machine::trace(&options).map_err(|e| match e {
        MachineError::TimedOut { .. } => Failure::with_code(EXIT_TIMEOUT, e.to_string()),
        MachineError::Output(m) => Failure::output(m),
        e => Failure::input(e.to_string()),
    })?;
    if !a.run.quiet {
        eprint_text(&summary(&r, &a.run.out));
    }
    if r.flow.panicked {
        return Err(Failure::with_code(
            EXIT_PANIC,
            "the guest's kernel panicked (its console said \"Kernel panic - not syncing\"); the \
             trace up to there is in DIR",
        ));
    }
    match r.flow.status.and_then(|s| s.code()) {
        Some(0) => Ok(()),
        Some(n) => Err(Failure::with_code(
            1,
            format!("QEMU exited with status {n}; the trace up to there is in DIR"),
        )),
        None => Err(Failure::with_code(1, "QEMU was killed by a signal")),
    }
}

fn summary(r: &MachineRecording, out: &std::path::Path) -> String {
    let mut o = String::new();
    outln!(
        o,
        "ptemu boot: {} vCPU(s), {} instructions run since tracing started, {} code file(s) in {} address space(s) in {}/code/",
        r.vcpus.len(),
        r.instructions(),
        r.code.len(),
        r.spaces,
        out.display()
    );
    for c in &r.vcpus {
        let e = &c.events;
        outln!(
            o,
            "  {}/{}: {} instructions, {} trace bytes; since the start: {} exceptions and interrupts, {} far transfers ({} SYSCALLs), {} MOVs to CR3; before its tracing started (--trace-from): {} instructions",
            out.display(),
            c.dir,
            c.instructions,
            c.trace_bytes,
            e.asynchronous,
            e.far,
            e.syscalls,
            e.cr3_writes,
            c.untraced_instructions
        );
    }
    if r.code_conflicts > 0 {
        outln!(
            o,
            "  note: {} code byte(s) were executed with two values at one address of one address space \
             (code patched or an address space reused): DIR/code/ holds the newer (QE28)",
            r.code_conflicts
        );
    }
    o
}
