//! `evenflush experiment`: experiments on the real machine (the experiments crate does the work;
//! this is the CLI glue, like `simulate_cmd`).

pub use experiments::swap::args::{ExperimentArgs, run};
