//! `evenflush wrap`: one rank of a job whose launcher starts the ranks itself (Slurm's `srun`):
//! `srun -n 4 evenflush wrap [flags] -- ./app args`. It preloads the recorder into this process
//! only and execs the program, so the launcher never loads the library; its flags are `run`'s
//! (each one an `EVENFLUSH_*` variable, which it hands on). Task 0 of a Slurm step also records
//! the step in `meta.json`.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use offload::config::Config;
use trace::slurm::SlurmStep;

use crate::mpi::{self, Mpi};
use crate::run::{self, Meta};

#[derive(Args)]
pub struct WrapArgs {
    /// Preload the library built for this MPI instead of detecting it from the program.
    #[arg(long, value_parser = ["openmpi", "mpich"])]
    mpi: Option<String>,
    /// The rank's program: `program [args]`.
    #[arg(last = true, required = true, value_name = "PROGRAM ...")]
    command: Vec<String>,
    /// Filled from the settings table's flags after parsing (`run_args::parse_cli`).
    #[arg(skip)]
    pub(crate) settings: BTreeMap<String, String>,
}

/// Returns only if the program could not be started.
pub fn wrap(args: WrapArgs) -> Result<()> {
    let config =
        Config::from_lookup(|name| args.settings.get(name).cloned()).map_err(|e| anyhow!("{e}"))?;
    let program = &args.command[0];
    let mpi = match args.mpi.as_deref() {
        Some("mpich") => Mpi::Mpich,
        Some(_) => Mpi::OpenMpi,
        None => mpi::resolve_executable(program)
            .and_then(|p| mpi::linked_mpi(&p))
            .with_context(|| {
                format!("cannot tell which MPI `{program}` links: pass --mpi openmpi|mpich")
            })?,
    };
    let lib = run::library_path(mpi)?;

    let mut env = args.settings.clone();
    // Every task of the step names the run alike without talking to the others.
    let step = SlurmStep::from_env(|name| std::env::var(name).ok());
    if !env.contains_key("EVENFLUSH_RUN_ID")
        && let Some(id) = std::env::var("EVENFLUSH_RUN_ID")
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| step.as_ref().map(SlurmStep::run_id))
    {
        env.insert("EVENFLUSH_RUN_ID".into(), id);
    }
    // Tasks on other nodes may start elsewhere; the directories are the ones meant here.
    env.insert(
        "EVENFLUSH_OUT".into(),
        config
            .out
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(","),
    );
    if let Some(step) = step.filter(|s| s.procid == Some(0)) {
        record_step(&config.out, &env, &args.command, mpi, &lib, step)?;
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", lib.display()),
        _ => lib.display().to_string(),
    };
    let err = Command::new(program)
        .args(&args.command[1..])
        .envs(&env)
        .env("LD_PRELOAD", preload)
        .exec();
    bail!("cannot start `{program}`: {err}")
}

/// Adds the step to the `meta.json` of `evenflush run` (which keeps it when it rewrites the file
/// after the job), or, under a bare srun, writes one of its own.
fn record_step(
    out: &[PathBuf],
    env: &BTreeMap<String, String>,
    command: &[String],
    mpi: Mpi,
    lib: &std::path::Path,
    step: SlurmStep,
) -> Result<()> {
    let host = run::hostname();
    let dir = offload::config::expand_out(out.first().context("no output directory")?, &host);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    let path = dir.join("meta.json");
    if let Some(mut meta) = run::read_meta(&path).filter(|m| {
        m.pointer("/settings/EVENFLUSH_RUN_ID")
            .and_then(|v| v.as_str())
            == env.get("EVENFLUSH_RUN_ID").map(String::as_str)
    }) {
        meta[trace::slurm::META_KEY] = serde_json::to_value(&step)?;
        let text = serde_json::to_string_pretty(&meta)?;
        return std::fs::write(&path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()));
    }
    let meta = Meta {
        evenflush_version: env!("CARGO_PKG_VERSION"),
        command,
        program: &command[0],
        mpi: mpi.name(),
        library: lib.display().to_string(),
        ranks_requested: step.ntasks,
        host,
        host_cpus: None,
        settings: env,
        start_unix_s: run::unix_now(),
        end_unix_s: None,
        wall_s: None,
        exit_code: None,
        threshold: None,
        slurm: Some(step),
    };
    run::write_meta(&path, &meta)
}
