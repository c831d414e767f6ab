//! The `run` subcommand's flags come from the settings table (`offload::config`), so every flag and
//! its `EVENFLUSH_*` variable are one fact written once.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::{Arg, ArgAction, ArgMatches, Args, CommandFactory, FromArgMatches};
use offload::config::{Config, settings};

use crate::mpi::Mpi;
use crate::run::RunRequest;
use crate::{Cli, Cmd};

#[derive(Args)]
pub struct RunArgs {
    /// Preload the library built for this MPI instead of detecting it from the program.
    #[arg(long, value_parser = ["openmpi", "mpich"])]
    mpi: Option<String>,
    /// The launch command: `mpirun [options] program [args]`.
    #[arg(last = true, required = true, value_name = "MPIRUN ...")]
    command: Vec<String>,
    /// Filled from the settings table's flags after parsing.
    #[arg(skip)]
    settings: BTreeMap<String, String>,
}

fn is_switch(default: &str) -> bool {
    matches!(default, "true" | "false")
}

fn with_setting_flags(mut cmd: clap::Command) -> clap::Command {
    for s in settings() {
        let mut arg = Arg::new(s.flag)
            .long(s.flag)
            .value_name(s.flag.to_uppercase().replace('-', "_"))
            .env(s.env)
            .help(format!("{} [default: {}]", s.help, s.default))
            .action(ArgAction::Set);
        if is_switch(s.default) {
            arg = arg.num_args(0..=1).default_missing_value("true");
        }
        cmd = cmd.arg(arg);
    }
    cmd
}

fn settings_from(matches: &ArgMatches) -> BTreeMap<String, String> {
    settings()
        .iter()
        .filter_map(|s| {
            matches
                .get_one::<String>(s.flag)
                .map(|v| (s.env.to_string(), v.clone()))
        })
        .collect()
}

/// The whole command line, settings flags included: what is parsed, and what man pages and
/// completions are generated from.
pub fn cli_command() -> clap::Command {
    Cli::command()
        .mut_subcommand("run", with_setting_flags)
        .mut_subcommand("validate", with_setting_flags)
        .mut_subcommand("wrap", with_setting_flags)
}

pub fn parse_cli() -> Result<Cli, clap::Error> {
    let matches = cli_command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    match (&mut cli.command, matches.subcommand()) {
        (Cmd::Run(args), Some(("run", sub))) => args.settings = settings_from(sub),
        (Cmd::Validate(args), Some(("validate", sub))) => args.settings = settings_from(sub),
        (Cmd::Wrap(args), Some(("wrap", sub))) => args.settings = settings_from(sub),
        _ => {}
    }
    Ok(cli)
}

impl RunArgs {
    /// Validates every setting with the same parser the recorder uses, so a typo fails here and
    /// not inside every rank.
    pub fn into_request(self) -> Result<RunRequest> {
        let config = Config::from_lookup(|name| self.settings.get(name).cloned())
            .map_err(|e| anyhow!("{e}"))?;
        let out: Vec<PathBuf> = config.out.clone();
        let mpi = self.mpi.as_deref().map(|m| match m {
            "mpich" => Mpi::Mpich,
            _ => Mpi::OpenMpi,
        });
        Ok(RunRequest {
            out,
            settings: self.settings,
            command: self.command,
            mpi,
        })
    }
}
