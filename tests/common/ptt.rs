//! libipt's `.ptt` tests, read from `../shared/reference/libipt-tests` (outside the repository):
//! the folder, skipped with a message where it is absent, and its `.ptt` files in name order.

use std::path::{Path, PathBuf};

/// The folder of libipt's `.ptt` tests, or `None` (saying so on stderr) where it is absent.
pub fn reference_dir() -> Option<PathBuf> {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/reference/libipt-tests"
    ));
    if dir.is_dir() {
        Some(dir.to_path_buf())
    } else {
        eprintln!(
            "skipping: {} is absent (libipt's .ptt tests live outside the repository)",
            dir.display()
        );
        None
    }
}

/// The `.ptt` files of `dir`, in name order.
pub fn ptt_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptt"))
        .collect();
    files.sort();
    files
}
