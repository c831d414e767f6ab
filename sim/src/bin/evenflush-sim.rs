//! The simulator without the rest of the CLI: same flags as `evenflush simulate`.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    sim::cli::simulate(sim::cli::Args::parse())
}
