//! Why a recording failed: the kinds the CLI maps to its exit codes.

use crate::case::CaseError;

/// Why [`super::record`] could not record the program. Each carries the message the user sees,
/// naming the file, option or limit concerned; nothing is written to DIR in any of them (an
/// earlier run's outputs stay).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// What the run was given cannot be used, before the program starts: an option (`--ctl
    /// OS=1`, QE6), QEMU or the plugin missing (the message says how to get them), the sockets
    /// the plugin needs. `ptemu run` exits 2.
    #[error("{0}")]
    Input(String),
    /// PROGRAM is not on the PATH or does not exist (QE11): `ptemu run` exits 127, as a shell
    /// does.
    #[error("{0}")]
    NotFound(String),
    /// PROGRAM, or a `#!` script's interpreter, exists but cannot be run: a directory, not
    /// executable, not ELF, interpreters nested too deep (QE11): `ptemu run` exits 126.
    #[error("{0}")]
    NotExecutable(String),
    /// The program was started but its run could not be traced: QEMU did not load the plugin or
    /// could not run the program, the stream was refused or malformed (QE1, QE7, QE10, QE16,
    /// QE17, QE19: the message names the byte or the rule), a limit on children was passed.
    /// The program runs to its end untraced; `ptemu run` exits 2.
    #[error("{0}")]
    Refused(String),
    /// Writing the outputs failed (a full disk, say): a run that meets it anywhere, in a
    /// thread's or a child's case too, writes nothing. `ptemu run` exits 2.
    #[error("{0}")]
    Output(String),
}

impl RecordError {
    /// Whether writing the outputs failed ([`RecordError::Output`]).
    pub fn is_output(&self) -> bool {
        matches!(self, RecordError::Output(_))
    }
}

impl From<CaseError> for RecordError {
    fn from(e: CaseError) -> Self {
        match e {
            CaseError::Output(m) => RecordError::Output(m),
            // The simulation's input is the program's stream.
            CaseError::Input(m) => RecordError::Refused(m),
        }
    }
}
