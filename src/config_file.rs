//! Reading a configuration file (a layout, a tracer config): bounded in size, read rather than
//! sized by its metadata (so a FIFO or a device reads as what it yields, and `/dev/zero` is
//! refused at the bound instead of filling memory), and UTF-8.

use crate::tracer::TracerConfig;
use std::io::Read;
use std::path::Path;

/// The largest configuration file read: 8 MiB, room for a layout listing about 200,000 ToPA
/// entries (some 41 bytes each), far more than any driver builds. Parsing takes about 50 bytes
/// of memory a byte of layout (the TOML document, then the entries): 8 MiB peaks near 420 MB,
/// which a small CI machine holds (64 MiB took 5.2 GB: measured, issue 39).
pub const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// Why a configuration file's text cannot be had (the message does not repeat the path).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Opening or reading it failed.
    #[error("cannot read: {0}")]
    Io(#[source] std::io::Error),
    /// It holds more than [`MAX_CONFIG_BYTES`].
    #[error("larger than {} MiB, the most a configuration file may hold", MAX_CONFIG_BYTES >> 20)]
    TooLarge,
    /// It is not UTF-8; the first bad byte is at `offset`.
    #[error("not UTF-8 text (byte offset {offset})")]
    NotUtf8 {
        /// Byte offset of the first byte that is not UTF-8.
        offset: usize,
    },
}

/// A tracer config file that cannot be used: `PATH[:LINE]: MESSAGE`.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", .path.display(), .line.map(|l| format!(":{l}")).unwrap_or_default())]
#[non_exhaustive]
pub struct ConfigError {
    /// The file.
    pub path: std::path::PathBuf,
    /// The 1-based line at fault, when the TOML parser gives one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// The text of the configuration file `path`, or why it cannot be had.
pub fn read_config(path: &Path) -> Result<String, ReadError> {
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 {
        offset: e.utf8_error().valid_up_to(),
    })
}

/// Reads a tracer config file (TOML, at most [`MAX_CONFIG_BYTES`]) and checks it
/// ([`TracerConfig::validate`]); the error names the file and the line or field.
pub fn load_tracer_config(path: &Path) -> Result<TracerConfig, ConfigError> {
    let err = |line, message: String| ConfigError {
        path: path.into(),
        line,
        message,
    };
    let text = read_config(path).map_err(|e| err(None, e.to_string()))?;
    let cfg: TracerConfig = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        err(line, e.message().to_string())
    })?;
    cfg.validate().map_err(|e| err(None, e.to_string()))?;
    Ok(cfg)
}
