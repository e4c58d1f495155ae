//! Errors from the trace readers: every one names the file and the position in it.

use std::fmt;
use std::io;

/// Where in an input file a problem sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Position {
    /// A 1-based line of a text format.
    Line(u64),
    /// A 1-based record of a binary format, and the byte offset it starts at.
    Record {
        /// 1-based record number.
        index: u64,
        /// Byte offset of the record's first byte (after decompression).
        offset: u64,
    },
    /// A byte offset (after decompression).
    Byte(u64),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Position::Line(n) => write!(f, "line {n}"),
            Position::Record { index, offset } => write!(f, "record {index} (byte offset {offset})"),
            Position::Byte(n) => write!(f, "byte offset {n}"),
        }
    }
}

/// What went wrong: the class of a [`SourceError`], and its `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading the file failed.
    #[error(transparent)]
    Io(io::Error),
    /// Writing what the source puts aside for a later pass failed (one of the run's own files,
    /// not the input: a full disk, say). The run fails as when an output cannot be written.
    #[error(transparent)]
    Write(io::Error),
    /// The file ends inside a record.
    #[error("truncated record")]
    Truncated,
    /// A field does not parse or holds a value the format does not allow.
    #[error("bad field")]
    BadField,
    /// The file does not start with the format's magic or header.
    #[error("bad magic or header")]
    BadMagic,
    /// A text line is longer than the format allows.
    #[error("line too long")]
    LineTooLong,
    /// Records contradict each other (e.g. a branch that does not go where the next record is).
    #[error("inconsistent records")]
    Inconsistent,
    /// A record's framing is broken (a bad tag or length), so the next record cannot be found and
    /// the rest of the file cannot be read, even with `--lenient`.
    #[error("lost framing")]
    LostFraming,
}

/// A trace-reading error: the file, the position and what is wrong there (`FILE: POSITION:
/// MESSAGE`); its `source()` is the [`ErrorKind`] (for I/O, the `io::Error` beneath).
#[derive(Debug, thiserror::Error)]
#[error("{file}: {}{message}", at(.position))]
#[non_exhaustive]
pub struct SourceError {
    /// The file name as the user gave it ("-" for stdin).
    pub file: String,
    /// Where; `None` when the file could not be opened at all.
    pub position: Option<Position>,
    /// The class of error.
    #[source]
    pub kind: ErrorKind,
    /// A sentence for a human: which field, what was found, what was expected.
    pub message: String,
}

impl SourceError {
    /// An error at `position`. When the file shrank under its map while it was read, the bytes
    /// the reader found wrong may be the zeros that replaced the lost pages: the error then says
    /// what happened instead (an I/O error, which `--lenient` does not skip).
    pub fn at(file: &str, position: Position, kind: ErrorKind, message: impl Into<String>) -> Self {
        if super::map_guard::shrunk_while_read(file) {
            let why = io::Error::other(format!(
                "the file changed size while it was read (the bytes here were lost: another process \
                 truncated or rewrote it); the reader found: {}",
                message.into()
            ));
            return SourceError::io(file, Some(position), why);
        }
        SourceError {
            file: file.to_owned(),
            position: Some(position),
            kind,
            message: message.into(),
        }
    }

    /// An I/O error, with the position reached when it happened if known.
    pub fn io(file: &str, position: Option<Position>, err: io::Error) -> Self {
        SourceError {
            file: file.to_owned(),
            position,
            message: err.to_string(),
            kind: ErrorKind::Io(err),
        }
    }

    /// Whether `--lenient` may skip the record and go on (the stream itself is still readable).
    pub fn is_skippable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::BadField | ErrorKind::LineTooLong | ErrorKind::Inconsistent
        )
    }
}

/// `POSITION: `, or nothing.
fn at(position: &Option<Position>) -> String {
    position.map(|p| format!("{p}: ")).unwrap_or_default()
}

/// Result of a reader call.
pub type Result<T> = std::result::Result<T, SourceError>;
