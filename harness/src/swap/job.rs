//! Running one job inside its cgroup with a time cap, and reading what it left behind.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use format::Event;
use trace::Trace;
use trace::open::{for_each_event, ticks_to_s};

use super::system::{self, JobCgroup};

/// How a job ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOutcome {
    /// Exit code, or 128 + signal when killed by one; `None` when timed out or interrupted.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub wall_s: f64,
    pub stdout: String,
    pub stderr: String,
}

/// Starts `argv` through a shell that first moves itself into `cgroup`, so mpirun and every rank
/// it forks are limited from their first page on. The job gets its own process group, so a time
/// out (or Ctrl-C) can kill all of it; the terminal's Ctrl-C does not reach it directly, this
/// process decides.
pub fn run_in_cgroup(
    argv: &[String],
    envs: &[(String, String)],
    cgroup: &JobCgroup,
    cap: Duration,
    log_dir: &Path,
) -> Result<JobOutcome> {
    let stdout_path = log_dir.join("stdout.txt");
    let stderr_path = log_dir.join("stderr.txt");
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"echo $$ > "$0" || exit 125; exec "$@""#)
        .arg(cgroup.procs_file())
        .args(argv)
        .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path)?)
        .stderr(File::create(&stderr_path)?)
        .process_group(0);
    let start = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", argv.join(" ")))?;
    let pgid = child.id() as i32;
    system::set_job_pgid(Some(pgid));
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if system::interrupted().is_some() {
            system::kill_group(pgid);
            let _ = child.wait();
            system::set_job_pgid(None);
            bail!("interrupted");
        }
        if start.elapsed() > cap {
            timed_out = true;
            system::kill_group(pgid);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall_s = start.elapsed().as_secs_f64();
    // Ranks that left the process group (daemons) are still in the cgroup: end them too.
    for pid in cgroup.pids() {
        // SAFETY: kill has no memory effects; a stale pid only yields ESRCH.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    system::set_job_pgid(None);
    let exit_code = status.map(|s| {
        use std::os::unix::process::ExitStatusExt;
        s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
    });
    Ok(JobOutcome {
        exit_code,
        timed_out,
        wall_s,
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
    })
}

/// Runs a short helper command (info, reconstruct) and returns its stdout.
pub fn capture(argv: &[String]) -> Result<String> {
    let output = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {}", argv[0]))?;
    if !output.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `key=value` from the workload's stdout (`total_s=`, `units_per_iteration=`).
pub fn stdout_value(stdout: &str, key: &str) -> Option<String> {
    stdout.split_whitespace().find_map(|word| {
        word.strip_prefix(key)?
            .strip_prefix('=')
            .map(str::to_string)
    })
}

/// The workload's own loop time, measured the way `iterative` measures it: from the exit of its
/// second `MPI_Barrier` on world (the start line) to the exit of the last one, on rank 0.
/// Comparing this between a reconstructed trace and an untraced run leaves out start-up and
/// finalisation, which the untraced run does not report.
pub fn loop_time_s(trace_dir: &Path) -> Result<f64> {
    let trace = Trace::open(trace_dir)?;
    let rank0 = trace
        .ranks
        .iter()
        .find(|r| r.rank == 0)
        .context("trace has no rank 0")?;
    let mut barrier_id = None;
    let mut barrier_ends = Vec::new();
    let (clock, _) = for_each_event(
        rank0,
        |_| {},
        |_, event| match event {
            Event::FunctionDef { id, name, .. } if name == "MPI_Barrier" => {
                barrier_id = Some(*id);
            }
            Event::Call(call) if Some(call.func) == barrier_id && call.comm == 0 => {
                barrier_ends.push(call.end);
            }
            _ => {}
        },
    )?;
    if barrier_ends.len() < 3 {
        bail!(
            "rank 0 has {} barriers on world; the workload makes iterations + 2",
            barrier_ends.len()
        );
    }
    let first = barrier_ends[1];
    let last = *barrier_ends.last().expect("checked length");
    Ok(ticks_to_s(&clock, last.saturating_sub(first)))
}
