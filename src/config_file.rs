//! Reading a configuration file (a layout, a tracer config): bounded in size, read rather than
//! sized by its metadata (so a FIFO or a device reads as what it yields, and `/dev/zero` is
//! refused at the bound instead of filling memory), and UTF-8.

use crate::tracer::TracerConfig;
use std::io::Read;
use std::path::Path;

/// The largest configuration file read: 64 MiB, room for a layout listing about 1.5 million ToPA
/// entries (some 45 bytes each), far more than any driver builds.
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// The text of the configuration file `path`, or why it cannot be had (the message does not
/// repeat the path).
pub fn read_config(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "larger than {} MiB, the most a configuration file may hold",
            MAX_CONFIG_BYTES >> 20
        ));
    }
    String::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 text (byte offset {})", e.utf8_error().valid_up_to()))
}

/// Reads a tracer config file (TOML, at most [`MAX_CONFIG_BYTES`]) and checks it
/// ([`TracerConfig::validate`]); the error names the file and the line or field.
pub fn load_tracer_config(path: &Path) -> Result<TracerConfig, String> {
    let name = path.display();
    let text = read_config(path).map_err(|e| format!("{name}: {e}"))?;
    let cfg: TracerConfig = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        match line {
            Some(l) => format!("{name}:{l}: {}", e.message()),
            None => format!("{name}: {}", e.message()),
        }
    })?;
    cfg.validate().map_err(|e| format!("{name}: {e}"))?;
    Ok(cfg)
}
