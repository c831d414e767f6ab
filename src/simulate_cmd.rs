//! `evenflush simulate`: the virtual-time simulation of the suspension protocol (the experiments
//! crate does the work; this is the CLI glue).

pub use experiments::cli::{Args, simulate};
