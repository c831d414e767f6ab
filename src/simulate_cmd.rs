//! `evenflush simulate`: the virtual-time simulation of the suspension protocol (the sim
//! crate does the work; this is the CLI glue).

pub use sim::cli::{Args, simulate};
