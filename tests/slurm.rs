//! Traced jobs launched by Slurm, on a real one-node cluster this test binary starts itself
//! (`scripts/slurm-cluster.sh`: its own munged, slurmctld and slurmd, everything under a scratch
//! directory, loopback only) and stops whatever happens, under both MPIs: each MPI first runs
//! under srun without evenflush (its own PMI: PMIx for Open MPI, PMI-2 for MPICH), then
//! `evenflush run -- srun ...`, `srun ... evenflush wrap -- ...`, `sbatch --wait` of a script
//! that does the first, and `evenflush validate -- srun ...`. Every rank must be traced, and the
//! Slurm job and step must reach `meta.json` and `evenflush info`, naming a job Slurm knows.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use common::{Mpi, check, evenflush_bin, mpi_env, mpi_lock, programs, repo_root, scratch};
use serde_json::Value;

/// One srun or sbatch job of these tests; a slow start of the cluster's first step included.
const JOB_TIMEOUT: Duration = Duration::from_secs(120);
const RANKS: u32 = 2;

/// The cluster, shared by the tests that run at the same time; the last one to let go stops it.
/// A test binary killed before that leaves nothing either: the script's watcher stops the
/// cluster once this process is gone (`SLURM_CLUSTER_OWNER`).
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    /// The running cluster, started if none is; `Err` says why it could not start.
    fn get() -> Result<Arc<Cluster>, String> {
        static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = shared.upgrade() {
            return Ok(c);
        }
        for tool in ["munged", "slurmctld", "slurmd", "srun", "sbatch"] {
            if common_which(tool).is_none() {
                return Err(format!(
                    "`{tool}` not installed (scripts/setup.sh installs slurm-wlm and munge)"
                ));
            }
        }
        let dir = scratch("slurm-cluster");
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(&dir)
            .env("SLURM_CLUSTER_OWNER", std::process::id().to_string())
            .output()
            .map_err(|e| format!("cannot run scripts/slurm-cluster.sh: {e}"))?;
        if !out.status.success() {
            // Whatever half-started is stopped by the script itself.
            return Err(format!(
                "scripts/slurm-cluster.sh start failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = Arc::new(Cluster {
            conf: dir.join("slurm.conf"),
            dir,
        });
        *shared = Arc::downgrade(&cluster);
        Ok(cluster)
    }

    /// A Slurm client command (`srun`, `sbatch`, `scontrol`) talking to this cluster.
    fn client(&self, tool: &str) -> Command {
        let mut cmd = Command::new(tool);
        cmd.env("SLURM_CONF", &self.conf);
        mpi_env(&mut cmd);
        cmd
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

fn script() -> PathBuf {
    repo_root().join("scripts/slurm-cluster.sh")
}

fn common_which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    })
}

/// The cluster, or `None` after the `slurm` skip.
fn cluster() -> Option<Arc<Cluster>> {
    match Cluster::get() {
        Ok(c) => Some(c),
        Err(why) => {
            common::skip_or_fail("slurm", &format!("no Slurm cluster here: {why}"));
            None
        }
    }
}

/// srun's MPI plugin for each MPI: the PMI each Debian 12 MPI speaks.
fn pmi(mpi: Mpi) -> &'static str {
    match mpi {
        Mpi::OpenMpi => "pmix",
        Mpi::Mpich => "pmi2",
    }
}

fn skip_name(mpi: Mpi) -> String {
    format!("slurm-{}", mpi.name())
}

fn timed(cmd: &mut Command, what: &str) -> Output {
    common::output_with_timeout(cmd, JOB_TIMEOUT, what)
}

fn hostname() -> String {
    let out = check(Command::new("hostname").output().unwrap(), "hostname");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `srun --mpi=PMI -n RANKS` for `mpi`.
fn srun_args(mpi: Mpi) -> Vec<String> {
    vec![
        "srun".into(),
        format!("--mpi={}", pmi(mpi)),
        "-n".into(),
        RANKS.to_string(),
    ]
}

/// Whether `mpi` runs a plain job under srun here; when it cannot, the MPI's own words go into
/// the skip. Also returns the plain run's output, which the traced runs must print too.
fn plain_srun(cluster: &Cluster, mpi: Mpi, ring: &Path) -> Option<String> {
    let plugins = timed(cluster.client("srun").arg("--mpi=list"), "srun --mpi=list");
    let listed = String::from_utf8_lossy(&plugins.stdout).to_string()
        + &String::from_utf8_lossy(&plugins.stderr);
    if !listed.split_whitespace().any(|w| w == pmi(mpi)) {
        common::skip_or_fail(
            &skip_name(mpi),
            &format!("srun has no `{}` MPI plugin: {listed}", pmi(mpi)),
        );
        return None;
    }
    let args = srun_args(mpi);
    let out = timed(
        cluster.client(&args[0]).args(&args[1..]).arg(ring),
        &format!("plain srun of ring ({})", mpi.name()),
    );
    if !out.status.success() {
        common::skip_or_fail(
            &skip_name(mpi),
            &format!(
                "{} does not run under `srun --mpi={}` even without evenflush ({}): {}",
                mpi.name(),
                pmi(mpi),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        );
        return None;
    }
    Some(String::from_utf8(out.stdout).unwrap())
}

/// Every rank traced (with MPI calls, on this host), and the Slurm step recorded in meta.json and
/// shown by info, naming a job Slurm itself knows; returns the step.
fn check_traced(cluster: &Cluster, dir: &Path, what: &str) -> Value {
    let info = common::info_json(dir);
    assert_eq!(info["ranks"], RANKS, "{what}: {info}");
    let per_rank = info["per_rank"].as_array().expect("per_rank");
    assert_eq!(per_rank.len(), RANKS as usize, "{what}");
    for r in per_rank {
        assert!(
            r["mpi_calls"].as_u64().unwrap_or(0) > 0,
            "{what}: a rank without MPI calls: {r}"
        );
    }
    let ranks_here: Vec<u64> = info["hosts"][hostname()]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no rank on this host: {}", info["hosts"]))
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(ranks_here, (0..RANKS as u64).collect::<Vec<_>>(), "{what}");

    let step = info["slurm"].clone();
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["slurm"], step, "{what}: info shows meta.json's step");
    assert_eq!(step["procid"], 0, "{what}: task 0 records the step: {step}");
    assert_eq!(step["ntasks"], RANKS, "{what}: {step}");
    assert_eq!(step["node"], hostname().as_str(), "{what}: {step}");
    let job = step["job_id"].as_str().expect("a job id").to_string();
    // Completed jobs stay known to slurmctld for MinJobAge (slurm-cluster.sh: 10 s).
    let shown = timed(
        cluster.client("scontrol").args(["show", "job", &job]),
        "scontrol show job",
    );
    let shown = String::from_utf8_lossy(&check(shown, "scontrol show job").stdout).to_string();
    assert!(
        shown.contains(&format!("JobId={job} ")) && shown.contains(&format!("NumTasks={RANKS}")),
        "{what}: job {job} is not the {RANKS}-task job Slurm ran: {shown}"
    );
    let table = check(
        Command::new(evenflush_bin())
            .arg("info")
            .arg(dir)
            .output()
            .unwrap(),
        "evenflush info",
    );
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("slurm") && l.contains(&format!("job {job} "))),
        "{what}: info's table names the job:\n{table}"
    );
    step
}

fn traced_under_srun(mpi: Mpi) {
    // The cluster before the lock: a test waiting for the lock keeps it running for the next.
    let Some(cluster) = cluster() else { return };
    let _lock = mpi_lock();
    let ring = programs(mpi).join("ring");
    let Some(plain) = plain_srun(&cluster, mpi, &ring) else {
        return;
    };
    let work = scratch(&format!("slurm-{}", mpi.name()));

    // `evenflush run` in front of srun.
    let by_run = work.join("run");
    let out = timed(
        cluster
            .client(evenflush_bin().to_str().unwrap())
            .arg("run")
            .arg("--out")
            .arg(&by_run)
            .arg("--")
            .args(srun_args(mpi))
            .arg(&ring),
        "evenflush run -- srun",
    );
    let out = check(out, &format!("evenflush run -- srun ({})", mpi.name()));
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain, "same output");
    let step_run = check_traced(&cluster, &by_run, "run -- srun");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(by_run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["exit_code"], 0,
        "run's own fields kept next to the step"
    );

    // The per-rank wrapper under a bare srun: task 0 writes meta.json itself.
    let by_wrap = work.join("wrap");
    let out = timed(
        cluster
            .client("srun")
            .args(&srun_args(mpi)[1..])
            .arg(evenflush_bin())
            .arg("wrap")
            .arg("--out")
            .arg(&by_wrap)
            .arg("--")
            .arg(&ring),
        "srun evenflush wrap",
    );
    let out = check(out, &format!("srun evenflush wrap ({})", mpi.name()));
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain, "same output");
    let step_wrap = check_traced(&cluster, &by_wrap, "srun -- wrap");
    assert_ne!(step_wrap["job_id"], step_run["job_id"], "two jobs");
    let info = common::info_json(&by_wrap);
    assert_eq!(
        info["run_id"].as_str(),
        Some(
            format!(
                "slurm-{}.{}",
                step_wrap["job_id"].as_str().unwrap(),
                step_wrap["step_id"].as_str().unwrap()
            )
            .as_str()
        ),
        "without `run`, the ranks name the run after the step"
    );

    // A batch job whose script does what the README shows.
    let by_batch = work.join("batch");
    let script = work.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH --ntasks={RANKS}\n#SBATCH --output={}\n\
             {} run --out {} -- srun --mpi={} {}\n",
            work.join("batch-%j.out").display(),
            evenflush_bin().display(),
            by_batch.display(),
            pmi(mpi),
            ring.display()
        ),
    )
    .unwrap();
    let out = timed(
        cluster.client("sbatch").arg("--wait").arg(&script),
        "sbatch --wait",
    );
    let out = check(out, &format!("sbatch --wait ({})", mpi.name()));
    let submitted = String::from_utf8_lossy(&out.stdout).to_string();
    let job = submitted
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    let step_batch = check_traced(&cluster, &by_batch, "sbatch");
    assert_eq!(
        step_batch["job_id"].as_str(),
        Some(job.as_str()),
        "the step belongs to the batch job sbatch submitted ({submitted})"
    );
    assert_eq!(step_batch["step_id"], "0", "the script's first srun step");
    let printed = std::fs::read_to_string(work.join(format!("batch-{job}.out"))).unwrap();
    assert_eq!(
        printed, plain,
        "the batch job printed what the plain run did"
    );
}

/// `evenflush validate` takes an srun line as it takes an mpirun one: the untraced runs get the
/// clock probe and the traced ones the recorder, both through srun.
fn validates_under_srun(mpi: Mpi) {
    // The cluster before the lock: a test waiting for the lock keeps it running for the next.
    let Some(cluster) = cluster() else { return };
    let _lock = mpi_lock();
    let apps = programs(mpi);
    let Some(_) = plain_srun(&cluster, mpi, &apps.join("ring")) else {
        return;
    };
    let work = scratch(&format!("slurm-validate-{}", mpi.name()));
    let out = timed(
        cluster
            .client(evenflush_bin().to_str().unwrap())
            .args([
                "validate",
                "--reps",
                "2",
                "--json",
                "--threshold",
                "128KiB",
                "--work",
            ])
            .arg(&work)
            .arg("--")
            .args(srun_args(mpi))
            .arg(apps.join("iterative"))
            .args([
                "--iterations",
                "20",
                "--work-units",
                "100000",
                "--mem",
                "0",
                "--record-bytes",
                "65536",
                "--records",
                "1",
            ]),
        "evenflush validate -- srun",
    );
    let out = check(out, &format!("evenflush validate -- srun ({})", mpi.name()));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["command"][0], "srun", "{v}");
    assert_eq!(v["mpi"], mpi.name(), "{v}");
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{v}");
    for p in pairs {
        let (u, t, g) = (
            p["untraced_s"].as_f64().unwrap(),
            p["traced_s"].as_f64().unwrap(),
            p["reconstructed_s"].as_f64().unwrap(),
        );
        assert!(u > 0.0 && t > 0.0 && g > 0.0, "spans measured: {p}");
        assert!(
            g <= t + 1e-6,
            "T(G) {g} s above the traced run's {t} s: {p}"
        );
        assert!(
            p["flushes"].as_u64().unwrap() >= 1,
            "the traced run flushed: {p}"
        );
    }
}

for_both_mpis!(traced_under_srun, validates_under_srun);
