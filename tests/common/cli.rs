//! Running the `ptemu` binary from the integration tests.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `ptemu ARGS` and waits for it.
pub fn ptemu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptemu"))
        .args(args)
        .output()
        .unwrap()
}

/// Output bytes as text, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A path as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
