//! `evenflush validate`: its flags, and the launcher of `evenflush run` lent to the harness, which
//! does the work (`harness::validate`: the interleaved runs, the errors, the plot).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::Args;
use harness::mpi::MpiImpl;
use harness::validate::{self, Launcher, Request};
use offload::config::Config;

use crate::mpi::Mpi;

/// `validate`'s own flags; the recorder's settings flags are added as for `run`.
#[derive(Args)]
pub struct ValidateArgs {
    /// Interleaved pairs of runs (untraced, traced).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Working directory for the runs' traces and the clock probe.
    #[arg(long, default_value = "evenflush-validate")]
    work: PathBuf,
    /// Keep every traced run's trace and reconstruction in the working directory.
    #[arg(long)]
    keep: bool,
    #[arg(long)]
    json: bool,
    /// Also draw every run as a dot (untraced, traced, T(G+), T(G)) against the untraced noise
    /// band into this PNG.
    #[arg(long, value_name = "FILE")]
    png: Option<PathBuf>,
    #[arg(long, value_parser = ["openmpi", "mpich"])]
    mpi: Option<String>,
    #[arg(last = true, required = true, value_name = "MPIRUN ...")]
    command: Vec<String>,
    /// Filled from the settings table's flags after parsing (`run_args::parse_cli`).
    #[arg(skip)]
    pub(crate) settings: BTreeMap<String, String>,
}

/// The untraced runs start the way `evenflush run` starts the traced ones: same MPI detection,
/// same way of reaching the ranks' environment.
struct RunLauncher;

impl Launcher for RunLauncher {
    fn detect_mpi(&self, command: &[String]) -> Result<MpiImpl> {
        Ok(to_harness(crate::run::detect_mpi(command)?.0))
    }

    fn with_rank_env(
        &self,
        mpi: MpiImpl,
        command: &[String],
        env: &BTreeMap<String, String>,
    ) -> Vec<String> {
        crate::run::with_rank_env(from_harness(mpi), command, env)
    }
}

fn to_harness(mpi: Mpi) -> MpiImpl {
    match mpi {
        Mpi::OpenMpi => MpiImpl::Openmpi,
        Mpi::Mpich => MpiImpl::Mpich,
    }
}

fn from_harness(mpi: MpiImpl) -> Mpi {
    match mpi {
        MpiImpl::Openmpi => Mpi::OpenMpi,
        MpiImpl::Mpich => Mpi::Mpich,
    }
}

pub fn validate(args: ValidateArgs) -> Result<()> {
    Config::from_lookup(|name| args.settings.get(name).cloned()).map_err(|e| anyhow!("{e}"))?;
    if args.png.is_some() {
        // A missing font is found before the runs, not after them.
        views::export::timeline::register_font()?;
    }
    let req = Request {
        command: args.command,
        mpi: args.mpi.as_deref().map(|m| match m {
            "mpich" => MpiImpl::Mpich,
            _ => MpiImpl::Openmpi,
        }),
        reps: args.reps,
        work: args.work,
        keep: args.keep,
        settings: args.settings,
    };
    let v = validate::validate(&req, &RunLauncher)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", validate::render(&v));
    }
    if let Some(png) = &args.png {
        validate::plot::draw(&v, png)?;
        eprintln!("evenflush: wrote {}", png.display());
    }
    Ok(())
}
