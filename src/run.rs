//! `evenflush run`: launch an MPI job with the recorder preloaded into its ranks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::mpi::{self, Mpi};

/// Everything `run` needs, already resolved from flags and environment.
pub struct RunRequest {
    /// Output directories (the first holds meta.json; the recorder moves on when a disk fills).
    pub out: Vec<PathBuf>,
    /// `EVENFLUSH_*` variables to hand to the ranks, from flags or the environment.
    pub settings: BTreeMap<String, String>,
    /// `mpirun ... program args`.
    pub command: Vec<String>,
    /// Overrides the MPI detection.
    pub mpi: Option<Mpi>,
}

#[derive(Serialize)]
struct Meta<'a> {
    evenflush_version: &'a str,
    command: &'a [String],
    program: &'a str,
    mpi: &'a str,
    library: String,
    ranks_requested: Option<u32>,
    host: String,
    /// Cores this host gives the job (the launcher's affinity and quota): more ranks than this
    /// on `host` is oversubscription, which `reconstruct` and `validate` warn of.
    host_cpus: usize,
    settings: &'a BTreeMap<String, String>,
    start_unix_s: f64,
    end_unix_s: Option<f64>,
    wall_s: Option<f64>,
    exit_code: Option<i32>,
    /// The S rank 0 used from start-up and where it came from (its `Threshold` record), after
    /// the run.
    threshold: Option<ThresholdJson>,
}

#[derive(Serialize)]
struct ThresholdJson {
    bytes: u64,
    /// `fixed` (--threshold SIZE), `cgroup` or `node` (--threshold auto, from that free memory),
    /// `unknown` (auto with nothing readable: the fallback).
    basis: &'static str,
    available_bytes: u64,
    ranks_on_node: u32,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Where the preload libraries live: next to the `evenflush` binary (cargo puts them there), unless
/// EVENFLUSH_LIB_DIR says otherwise.
pub fn library_path(mpi: Mpi) -> Result<PathBuf> {
    let dir = match std::env::var_os("EVENFLUSH_LIB_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .context("cannot locate the evenflush binary")?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    let lib = dir.join(mpi.library_file());
    if !lib.is_file() {
        bail!(
            "the recorder library for {} is not built: {} does not exist.\n\
             Build it with `cargo build --release` on a machine with {} installed \
             (scripts/setup.sh installs it), or set EVENFLUSH_LIB_DIR.",
            mpi.name(),
            lib.display(),
            mpi.name()
        );
    }
    Ok(lib)
}

pub(crate) fn detect_mpi(command: &[String]) -> Result<(Mpi, String)> {
    let line = mpi::parse_launch_line(command).with_context(|| {
        format!(
            "cannot find the program in `{}`: expected `mpirun [options] program [args]`",
            command.join(" ")
        )
    })?;
    let program = command[line.program_index].clone();
    if let Some(path) = mpi::resolve_executable(&program)
        && let Some(found) = mpi::linked_mpi(&path)
    {
        return Ok((found, program));
    }
    let launcher = mpi::resolve_executable(&line.launcher)
        .with_context(|| format!("launcher `{}` not found on PATH", line.launcher))?;
    match mpi::launcher_mpi(&launcher) {
        Some(found) => Ok((found, program)),
        None => bail!(
            "cannot tell which MPI `{program}` uses: it links no MPI library and `{}` is neither \
             Open MPI's nor MPICH's launcher. Pass --mpi openmpi|mpich.",
            line.launcher
        ),
    }
}

pub fn run(req: RunRequest) -> Result<i32> {
    if req.command.is_empty() {
        bail!(
            "nothing to run: give the launch command after `--`, e.g. `evenflush run --out t -- mpirun -np 4 ./app`"
        );
    }
    let (mpi, program) = match req.mpi {
        Some(m) => (m, String::new()),
        None => detect_mpi(&req.command)?,
    };
    let lib = library_path(mpi)?;
    // With `%h` every rank writes to its own node's directory; the launcher can only prepare (and
    // put meta.json into) the one of its own host. Readers need no meta.json: every rank file
    // carries its rank's identity (`evenflush collect` puts node-local directories together).
    let host = hostname();
    let local_out: Vec<PathBuf> = req
        .out
        .iter()
        .map(|d| offload::config::expand_out(d, &host))
        .collect();
    let first_out = local_out
        .first()
        .context("--out needs at least one directory")?;
    for dir in &local_out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create output directory {}", dir.display()))?;
        let holds_trace = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().ends_with(".evf"));
        if holds_trace {
            bail!(
                "{} already holds a trace (rank-*.evf): choose another --out or remove it first",
                dir.display()
            );
        }
    }

    let mut env: BTreeMap<String, String> = req.settings.clone();
    // One name for this run on every rank (RankInfo.run_id), so that putting node-local
    // directories back together can refuse files of another run.
    let run_id = std::env::var("EVENFLUSH_RUN_ID")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let ns = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("{host}-{}-{ns}", std::process::id())
        });
    env.insert("EVENFLUSH_RUN_ID".into(), run_id.clone());
    env.insert(
        "EVENFLUSH_OUT".into(),
        req.out
            .iter()
            .map(|p| {
                std::path::absolute(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join(","),
    );

    let line = mpi::parse_launch_line(&req.command);
    let mut meta = Meta {
        evenflush_version: env!("CARGO_PKG_VERSION"),
        command: &req.command,
        program: &program,
        mpi: mpi.name(),
        library: lib.display().to_string(),
        ranks_requested: line.as_ref().and_then(|l| l.ranks),
        host: host.clone(),
        host_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        settings: &env,
        start_unix_s: unix_now(),
        end_unix_s: None,
        wall_s: None,
        exit_code: None,
        threshold: None,
    };
    let meta_path = first_out.join("meta.json");
    write_meta(&meta_path, &meta)?;

    // The library goes to the ranks only (through the launcher's own option), so mpirun itself
    // never loads it; the environment of mpirun gets it too as a fallback for launchers that do not
    // forward options, since the library is inert in processes that never call MPI_Init.
    let mut rank_env = env.clone();
    rank_env.insert("LD_PRELOAD".into(), lib.display().to_string());
    let argv = with_rank_env(mpi, &req.command, &rank_env);

    let started = Instant::now();
    let status = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(&env)
        .status()
        .with_context(|| format!("cannot start `{}`", argv[0]))?;
    let code = status.code().unwrap_or(128 + signal_of(&status));
    remove_memory_pages(&run_id);
    meta.end_unix_s = Some(unix_now());
    meta.wall_s = Some(started.elapsed().as_secs_f64());
    meta.exit_code = Some(code);
    meta.threshold = trace::open::initial_threshold(first_out).map(|t| ThresholdJson {
        bytes: t.bytes,
        basis: t.basis.name(),
        available_bytes: t.available,
        ranks_on_node: t.ranks_on_node,
    });
    write_meta(&meta_path, &meta)?;
    Ok(code)
}

/// The launch command with `env` handed to every rank through the launcher's own option (`-x` or
/// `-genv`), inserted after the launcher and, for Open MPI's MPMD lines, after each `:` (a `-x`
/// before the first program reaches only that program's ranks). A command that is not a known
/// launch line is returned as is.
pub fn with_rank_env(mpi: Mpi, command: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    let line = mpi::parse_launch_line(command);
    let env_args: Vec<String> = env.iter().flat_map(|(k, v)| mpi.env_args(k, v)).collect();
    let mut argv: Vec<String> = vec![command[0].clone()];
    if line.is_some() {
        argv.extend(env_args.iter().cloned());
    }
    for word in &command[1..] {
        argv.push(word.clone());
        if line.is_some() && mpi == Mpi::OpenMpi && word == ":" {
            argv.extend(env_args.iter().cloned());
        }
    }
    argv
}

pub(crate) fn signal_of(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0)
}

fn write_meta(path: &Path, meta: &Meta) -> Result<()> {
    let text = serde_json::to_string_pretty(meta)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

fn hostname() -> String {
    offload::config::hostname()
}

/// The ranks unlink their node's shared memory page once all of them mapped it, or when they
/// finish; ranks killed before that leave it behind on this host: removed here.
fn remove_memory_pages(run_id: &str) {
    let prefix = offload::config::memory_page_prefix(run_id);
    let Some((dir, start)) = prefix.rsplit_once('/') else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(start) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
