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

/// `meta.json`: written by `evenflush run` (or, under a bare `srun`, by task 0's `evenflush wrap`).
#[derive(Serialize)]
pub(crate) struct Meta<'a> {
    pub evenflush_version: &'a str,
    pub command: &'a [String],
    pub program: &'a str,
    pub mpi: &'a str,
    pub library: String,
    pub ranks_requested: Option<u32>,
    pub host: String,
    /// Cores this host gives the job (the launcher's affinity and quota): more ranks than this
    /// on `host` is oversubscription, which `reconstruct` and `validate` warn of. Not known to a
    /// task of an srun step (its own affinity is not the node's share of the job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cpus: Option<usize>,
    pub settings: &'a BTreeMap<String, String>,
    pub start_unix_s: f64,
    pub end_unix_s: Option<f64>,
    pub wall_s: Option<f64>,
    pub exit_code: Option<i32>,
    /// The S rank 0 used from start-up and where it came from (its `Threshold` record), after
    /// the run.
    pub threshold: Option<ThresholdJson>,
    /// The Slurm step, when the ranks ran in one (task 0's `evenflush wrap` adds it).
    #[serde(rename = "slurm", skip_serializing_if = "Option::is_none")]
    pub slurm: Option<trace::slurm::SlurmStep>,
}

#[derive(Serialize)]
pub(crate) struct ThresholdJson {
    bytes: u64,
    /// `fixed` (--threshold SIZE), `cgroup` or `node` (--threshold auto, from that free memory),
    /// `unknown` (auto with nothing readable: the fallback).
    basis: &'static str,
    available_bytes: u64,
    ranks_on_node: u32,
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Where the preload libraries are looked for, in order: only EVENFLUSH_LIB_DIR when it is set (an
/// explicit choice must not fall back silently to another build); otherwise next to the `evenflush`
/// binary (cargo's target/release) and in `<bin>/../lib/evenflush` (an installed prefix:
/// `scripts/install.sh`, the Debian package).
fn library_dirs() -> Result<Vec<PathBuf>> {
    if let Some(d) = std::env::var_os("EVENFLUSH_LIB_DIR") {
        return Ok(vec![PathBuf::from(d)]);
    }
    // current_exe resolves symbolic links, so a link to an installed binary finds its prefix.
    let exe = std::env::current_exe().context("cannot locate the evenflush binary")?;
    let bin = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let installed = bin
        .parent()
        .map(|p| p.join("lib").join("evenflush"))
        .unwrap_or_else(|| bin.join("../lib/evenflush"));
    Ok(vec![bin, installed])
}

/// The preload library for `mpi`: the first found in `library_dirs()`.
pub fn library_path(mpi: Mpi) -> Result<PathBuf> {
    let dirs = library_dirs()?;
    if let Some(lib) = dirs
        .iter()
        .map(|d| d.join(mpi.library_file()))
        .find(|l| l.is_file())
    {
        return Ok(lib);
    }
    let looked: Vec<String> = dirs.iter().map(|d| format!("  {}", d.display())).collect();
    bail!(
        "the recorder library for {} ({}) was not found; looked in:\n{}\n\
         Build it with `cargo build --release` on a machine with {} installed \
         (scripts/setup.sh installs it), install it with `scripts/install.sh --prefix DIR`, \
         or set EVENFLUSH_LIB_DIR to the directory that holds it.",
        mpi.name(),
        mpi.library_file(),
        looked.join("\n"),
        mpi.name()
    )
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
        host_cpus: Some(std::thread::available_parallelism().map_or(0, |n| n.get())),
        settings: &env,
        start_unix_s: unix_now(),
        end_unix_s: None,
        wall_s: None,
        exit_code: None,
        threshold: None,
        slurm: None,
    };
    let meta_path = first_out.join("meta.json");
    write_meta(&meta_path, &meta)?;

    // The library goes to the ranks only (through the launcher's own option), so mpirun itself
    // never loads it; the environment of mpirun gets it too as a fallback for launchers that do not
    // forward options, since the library is inert in processes that never call MPI_Init.
    let mut rank_env = env.clone();
    let argv = match &line {
        // srun starts the ranks itself: each goes through `evenflush wrap`, which preloads the
        // library into that rank only and records the Slurm step (task 0).
        Some(l) if mpi::is_srun(&l.launcher) => {
            let exe = std::env::current_exe().context("cannot locate the evenflush binary")?;
            let mut wrapped = req.command[..l.program_index].to_vec();
            wrapped.extend([
                exe.display().to_string(),
                "wrap".into(),
                "--mpi".into(),
                mpi.name().into(),
                "--".into(),
            ]);
            wrapped.extend(req.command[l.program_index..].iter().cloned());
            with_rank_env(mpi, &wrapped, &rank_env)
        }
        _ => {
            rank_env.insert("LD_PRELOAD".into(), lib.display().to_string());
            with_rank_env(mpi, &req.command, &rank_env)
        }
    };

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
    meta.slurm = read_meta(&meta_path).and_then(|m| trace::slurm::SlurmStep::from_meta(Some(&m)));
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
/// before the first program reaches only that program's ranks). srun has no such option that
/// takes any value (`--export` splits at commas), so each rank starts as `env NAME=VALUE ...
/// program`. A command that is not a known launch line is returned as is.
pub fn with_rank_env(mpi: Mpi, command: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    let line = mpi::parse_launch_line(command);
    if let Some(l) = line.as_ref().filter(|l| mpi::is_srun(&l.launcher)) {
        let mut argv = command[..l.program_index].to_vec();
        argv.push("env".into());
        argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(command[l.program_index..].iter().cloned());
        return argv;
    }
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

pub(crate) fn read_meta(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

pub(crate) fn write_meta(path: &Path, meta: &Meta) -> Result<()> {
    let text = serde_json::to_string_pretty(meta)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

pub(crate) fn hostname() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn srun_ranks_get_their_environment_through_env() {
        let env = BTreeMap::from([
            ("A".to_string(), "1,2".to_string()),
            ("B".to_string(), "x y".to_string()),
        ]);
        let argv = with_rank_env(Mpi::Mpich, &words("srun --mpi=pmi2 -n 2 ./app -n 3"), &env);
        let mut want = words("srun --mpi=pmi2 -n 2 env A=1,2");
        want.extend(["B=x y".to_string(), "./app".into(), "-n".into(), "3".into()]);
        assert_eq!(argv, want);
        let argv = with_rank_env(Mpi::OpenMpi, &words("mpirun -np 2 ./app"), &env);
        assert_eq!(argv[..3], words("mpirun -x A=1,2"));
    }
}
