//! `evenflush collect`: one run from several directories.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use trace::collect;

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    evenflush collect /scratch/run1/*            # report: hosts, ranks, what is missing\n  \
    evenflush collect nodeA/t nodeB/t --into t   # then `evenflush reconstruct t`, `report t`, ...\n\n\
    Exit code 3 when ranks are missing (their numbers are printed) or the files are inconsistent.")]
pub struct CollectArgs {
    /// Directories holding rank files of one run (each node's `--out` with %h, copies, ...).
    #[arg(required = true, num_args = 1..)]
    dirs: Vec<PathBuf>,
    /// Put every rank file (hard-linked, or copied across file systems) into this new or empty
    /// directory, with collect.json describing where each came from; refused if ranks are missing.
    #[arg(long, value_name = "DIR")]
    into: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &CollectArgs) -> Result<ExitCode> {
    let c = collect::collect(&args.dirs)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", collect::render(&c));
    }
    if !c.missing.is_empty() {
        // The report above names the missing ranks; the error repeats it on stderr.
        return Err(trace::TraceError::MissingRanks {
            dir: args.dirs[0].clone(),
            missing: c.missing.clone(),
            world_size: c.world_size,
            found: c.ranks.len(),
        }
        .into());
    }
    if let Some(into) = &args.into {
        let trace = c.gather_into(into)?;
        if !args.json {
            println!(
                "gathered {} rank(s) into {}",
                trace.ranks.len(),
                into.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
