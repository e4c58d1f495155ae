//! Kaplan.
