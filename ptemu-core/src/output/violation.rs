//! An operational-error condition: which rule, where, and why.

use crate::rules::Rule;
use std::fmt;

/// A rule violation found in the output configuration (an operational error once tracing meets it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// The rule violated.
    pub rule: Rule,
    /// Base of the ToPA table holding the offending entry, if a ToPA entry is at fault.
    pub table: Option<u64>,
    /// Index of the offending entry.
    pub index: Option<u32>,
    /// The raw entry, if a ToPA entry is at fault.
    pub entry: Option<u64>,
    /// What is wrong, in words.
    pub message: String,
}

impl Violation {
    /// A violation by the ToPA entry at `table[index]`.
    pub fn at_entry(rule: Rule, table: u64, index: u32, entry: u64, message: String) -> Self {
        Violation {
            rule,
            table: Some(table),
            index: Some(index),
            entry: Some(entry),
            message,
        }
    }

    /// The same violation with another message (e.g. one naming where a layout file lists it).
    pub fn with_message(self, message: String) -> Self {
        Violation { message, ..self }
    }

    /// A violation by the output MSRs themselves.
    pub fn in_msrs(rule: Rule, message: String) -> Self {
        Violation {
            rule,
            table: None,
            index: None,
            entry: None,
            message,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ", self.rule)?;
        if let (Some(t), Some(i)) = (self.table, self.index) {
            write!(f, "table {t:#x} entry {i}")?;
            if let Some(e) = self.entry {
                write!(f, " ({e:#018x})")?;
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.message)
    }
}
