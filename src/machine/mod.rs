//! Whole machines under QEMU's system emulator (issue 52; spec/qemu.md "Whole machines"): the
//! guest boots under `qemu-system-x86_64` with ptemu's plugin, whose stream holds every block
//! each vCPU executed and, where it read the registers, the block's real start, CS, CR3 and the
//! transfer it starts with (QE24, QE25). [`record_flow`] reads that stream and follows every
//! vCPU's blocks again by the plugin's own rules (QE26): each block execution's real start and
//! the instructions of it that ran. The trace of it is the next step.
//!
//! One file a concept: `launch` (the QEMU command and its socket), `flow` (the stream followed).

mod events;
mod flow;
mod image;
mod launch;
mod trace;

pub use events::{BlockCode, VcpuEvents};
pub use flow::{MachineFlow, VcpuFlow};
pub use image::{CodeFile, PIP_CR3_MASK};
pub use launch::BootOptions;
pub use ptemu_wire::system::Transfer;
pub use trace::{trace, MachineOptions, MachineRecording, TraceStart, VcpuCase};

use std::path::PathBuf;

/// Why a machine could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MachineError {
    /// QEMU or the plugin is not where it was looked for (what to do is said).
    #[error("{0}")]
    NotFound(String),
    /// QEMU could not be started, or a file it needs is missing.
    #[error("{0}")]
    Launch(String),
    /// The plugin's stream is malformed or does not follow (its byte offset and what).
    #[error("{path} (the plugin's stream of the machine): {message}")]
    Stream {
        /// What the stream came from, for the message.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// DIR or a file in it could not be written.
    #[error("{0}")]
    Output(String),
    /// The guest ran past the time limit ([`BootOptions::timeout`]): QEMU was killed.
    #[error("the guest was still running after {seconds} s (the time limit): QEMU was killed")]
    TimedOut {
        /// The limit, in seconds.
        seconds: u64,
    },
}

/// Boots the machine of `options` and follows every vCPU's blocks in the plugin's stream; the
/// console goes where [`BootOptions::capture_console`] says.
pub fn record_flow(options: &BootOptions) -> Result<MachineFlow, MachineError> {
    launch::run(options, &mut ())
}

/// A machine's stream of `data` followed (the `qemu` fuzz target's third pass, QE26).
pub(crate) fn follow_bytes(mut data: &[u8]) -> Result<MachineFlow, MachineError> {
    flow::follow(&mut data, std::path::Path::new("(bytes)"), &mut ())
}
