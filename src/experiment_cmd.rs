//! `evenflush experiment`: experiments on the real machine (the harness crate does the work;
//! this is the CLI glue, like `simulate_cmd`).

pub use harness::swap::args::{ExperimentArgs, run};
