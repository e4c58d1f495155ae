//! A run's output directory, its case: written all or nothing through a staging directory
//! ([`RunDir`], spec/simulate.md SIM7), with what an interrupted run removes ([`cleanup`]).

pub mod cleanup;
mod dir;

pub use dir::RunDir;
