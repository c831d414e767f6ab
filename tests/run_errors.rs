//! `evenflush run` refuses what it cannot do before it launches anything: a bad flag, a bad
//! `EVENFLUSH_*` variable, an `--out` it cannot create. Each must end quickly with a non-zero exit
//! and a message naming the problem, and the job must not have started.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::Mpi;

/// A refused run ends at once; a minute means it hung.
const LIMIT: Duration = Duration::from_secs(60);

/// `evenflush run ARGS -- mpirun -np 1 JOB` with `env`, where JOB is a script that leaves a mark:
/// the output, and whether the job ran.
fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, bool) {
    let dir = common::scratch(&format!("run-errors-{name}"));
    let marker = dir.join("job-ran");
    let job = dir.join("job.sh");
    std::fs::write(&job, format!("#!/bin/sh\ntouch '{}'\n", marker.display())).unwrap();
    std::fs::set_permissions(&job, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run").args(args).arg("--");
    cmd.args(Mpi::OpenMpi.launch(1)).arg(&job);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = common::output_with_timeout(
        common::mpi_env(&mut cmd),
        LIMIT,
        &format!("evenflush run ({name})"),
    );
    (out, marker.exists())
}

fn refused(name: &str, args: &[&str], env: &[(&str, &str)], says: &[&str]) {
    let (out, ran) = run(name, args, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{name}: {args:?} succeeded: {stderr}"
    );
    assert!(
        !ran,
        "{name}: the job was launched although the run was refused"
    );
    for s in says {
        assert!(stderr.contains(s), "{name}: want {s:?} in:\n{stderr}");
    }
    assert!(
        stderr.lines().count() <= 12,
        "{name}: a short, clear message, not a dump:\n{stderr}"
    );
}

fn out_dir(name: &str) -> String {
    common::scratch(&format!("run-errors-{name}-out"))
        .display()
        .to_string()
}

#[test]
fn bad_flags_are_refused_before_launch() {
    let out = out_dir("flags");
    refused(
        "unknown-flag",
        &["--out", &out, "--frobnicate"],
        &[],
        &["--frobnicate"],
    );
    refused(
        "bad-mode",
        &["--out", &out, "--mode", "bogus"],
        &[],
        &["bogus", "--mode", "dynamic"],
    );
    refused(
        "bad-threshold",
        &["--out", &out, "--threshold", "lots"],
        &[],
        &["lots", "--threshold", "not a size"],
    );
    refused(
        "bad-writer",
        &["--out", &out, "--writer", "floppy"],
        &[],
        &["floppy", "--writer"],
    );
    refused(
        "bad-variable",
        &["--out", &out],
        &[("EVENFLUSH_MODE", "bogus")],
        &["bogus", "EVENFLUSH_MODE"],
    );
}

#[test]
fn unwritable_out_is_refused_before_launch() {
    // As root, permissions do not stop a write: a path under a regular file, and one in /proc,
    // cannot be created by anyone.
    let base = common::scratch("run-errors-unwritable");
    let file = base.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let under_file = file.join("trace");
    refused(
        "out-under-file",
        &["--out", under_file.to_str().unwrap()],
        &[],
        &[under_file.to_str().unwrap(), "Not a directory"],
    );
    let in_proc = Path::new("/proc/evenflush-cannot-be-here");
    refused(
        "out-in-proc",
        &["--out", in_proc.to_str().unwrap()],
        &[],
        &[in_proc.to_str().unwrap()],
    );
    // The second of several output directories is checked too.
    let first = common::scratch("run-errors-unwritable-first");
    let dirs = format!("{},{}", first.display(), under_file.display());
    refused(
        "second-out-under-file",
        &["--out", &dirs],
        &[],
        &[under_file.to_str().unwrap()],
    );
}
