//! Whole machines under QEMU's system emulator (issue 52; spec/qemu.md "Whole machines"): the
//! guest boots under `qemu-system-x86_64` with ptemu's plugin, whose stream holds every block
//! each vCPU executed and, where it read the registers, the block's real start, CS, CR3 and the
//! transfer it starts with (QE24, QE25). [`record_flow`] reads that stream and follows every
//! vCPU's blocks again by the plugin's own rules (QE26): each block execution's real start and
//! the instructions of it that ran. The trace of it is the next step.
//!
//! One file a concept: `launch` (the QEMU command and its socket), `flow` (the stream followed).

mod flow;
mod launch;

pub use flow::{MachineFlow, VcpuFlow};
pub use launch::BootOptions;
pub use ptemu_wire::system::Transfer;

use std::path::PathBuf;

/// Why a machine could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MachineError {
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
}

/// Boots the machine of `options` and follows every vCPU's blocks in the plugin's stream; the
/// console goes where [`BootOptions::capture_console`] says.
pub fn record_flow(options: &BootOptions) -> Result<MachineFlow, MachineError> {
    launch::run(options)
}

/// A machine's stream of `data` followed (the `qemu` fuzz target's third pass, QE26).
pub(crate) fn follow_bytes(mut data: &[u8]) -> Result<MachineFlow, MachineError> {
    flow::follow(&mut data, std::path::Path::new("(bytes)"))
}
