//! `evenflush compare`: the command-line layer over `reconstruct::compare`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use reconstruct::Trace;
use reconstruct::compare::{self, CompareError};

#[derive(Args, Debug)]
#[command(after_help = concat!(
    "Example:\n  evenflush compare reference-run offload-run.reconstructed --json\n\n",
    "Exit codes: 0 success; 1 error (including two runs that are not the same program); 2 bad usage; ",
    "3 damaged or missing trace."
))]
pub struct CompareArgs {
    /// The reference trace (e.g. a run without offload, or the original).
    pub reference: PathBuf,
    /// The run to judge (e.g. a reconstructed offload run).
    pub run: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &CompareArgs) -> Result<()> {
    compare(&args.reference, &args.run, args.json)
}

pub fn compare(reference: &Path, run: &Path, json: bool) -> Result<()> {
    let reference = Trace::open(reference)?;
    let run = Trace::open(run)?;
    let report = compare::compare(&reference, &run).map_err(|e| match e {
        CompareError::Trace(t) => anyhow::Error::new(t),
        other => anyhow::Error::new(other),
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", compare::render_table(&report));
    }
    for k in &report.skipped {
        eprintln!("evenflush: warning: {k}");
    }
    Ok(())
}
