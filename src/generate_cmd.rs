//! `evenflush generate` (hidden): man pages and shell completions written from the command line's
//! own definition, so the installed binary is their one source (`scripts/install.sh` calls it).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use clap_complete::Shell;

#[derive(Clone, Copy, ValueEnum)]
pub enum What {
    /// `evenflush.1` and one `evenflush-SUBCOMMAND.1` per subcommand.
    Man,
    /// `evenflush.bash`, `_evenflush` (zsh) and `evenflush.fish`.
    Completions,
}

#[derive(Args)]
pub struct GenerateArgs {
    what: What,
    /// Directory to write into (created if missing).
    dir: PathBuf,
}

pub fn run(args: &GenerateArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let cmd = crate::run_args::cli_command();
    match args.what {
        What::Man => clap_mangen::generate_to(cmd, &args.dir)
            .with_context(|| format!("cannot write man pages into {}", args.dir.display())),
        What::Completions => completions(cmd, &args.dir),
    }
}

fn completions(cmd: clap::Command, dir: &Path) -> Result<()> {
    // clap_complete offers hidden subcommands too (this one among them): completions are written
    // from a copy of the command line that has only the visible ones.
    let mut cmd = clap::Command::new(cmd.get_name().to_string())
        .version(cmd.get_version().unwrap_or_default().to_string())
        .args(cmd.get_arguments().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "evenflush", dir).with_context(|| {
            format!("cannot write the {shell} completion into {}", dir.display())
        })?;
    }
    Ok(())
}
