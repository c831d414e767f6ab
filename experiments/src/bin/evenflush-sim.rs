//! The simulator without the rest of the CLI: same flags as `evenflush simulate`.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    experiments::cli::simulate(experiments::cli::Args::parse())
}
