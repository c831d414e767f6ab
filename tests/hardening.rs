//! The recorder must never hang or kill the job it runs in (issue #14): signals (the default
//! action, an application's own handler before or after `MPI_Init`, an inherited `SIG_IGN`, a
//! crash), `fork`, `MPI_Comm_spawn`, full disks and quotas, failing `fdatasync`, and communicators
//! freed inside attribute callbacks. Real jobs under both MPIs; the programs are
//! tests/programs/hardening.c and the fault injector tests/programs/faultfs.c, and every expected
//! figure comes from the program's source, not from what the recorder wrote.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{JOB_TIMEOUT, Mpi, mpi_lock, output_with_timeout, read_trace, scratch};
use format::{Event, Marker};

/// Barriers before and after the event each mode is about (hardening.c's `n` and `m`).
const N: u64 = 100;
const M: u64 = 100;

/// Per rank: calls per function, and the `AbnormalEnd` signals.
#[derive(Debug, Default)]
struct Counts {
    calls: BTreeMap<String, u64>,
    abnormal: Vec<i32>,
    lost: u64,
}

impl Counts {
    fn call(&self, name: &str) -> u64 {
        self.calls.get(name).copied().unwrap_or(0)
    }
}

fn counts(dir: &Path) -> Vec<Counts> {
    read_trace(dir)
        .iter()
        .map(|r| {
            let mut c = Counts::default();
            for e in r.all() {
                match e {
                    Event::Call(call) => {
                        *c.calls.entry(r.name(call.func).to_string()).or_default() += 1
                    }
                    Event::Marker(Marker::AbnormalEnd { signal, .. }) => c.abnormal.push(*signal),
                    Event::Marker(Marker::Lost { events, .. }) => c.lost += events,
                    _ => {}
                }
            }
            c
        })
        .collect()
}

/// `evenflush run --out <scratch> --mode off -- mpirun -np <ranks> hardening <mode> N M`.
fn traced(mpi: Mpi, ranks: u32, mode: &str) -> (Output, PathBuf) {
    let out = scratch(&format!("hardening-{mode}-{}", mpi.name()));
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run")
        .arg("--out")
        .arg(&out)
        .args(["--mode", "off", "--"]);
    cmd.args(mpi.launch(ranks));
    cmd.arg(common::programs(mpi).join("hardening"))
        .args([mode, &N.to_string(), &M.to_string()]);
    let output = output_with_timeout(
        common::mpi_env(&mut cmd),
        JOB_TIMEOUT,
        &format!("hardening {mode} ({})", mpi.name()),
    );
    (output, out)
}

fn text(output: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn succeeded(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}",
        output.status,
        text(output)
    );
}

fn reserves_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".reserve"))
        .collect()
}

/// A run that survived its event recorded every call, once, and ended normally.
fn complete_run(dir: &Path, ranks: usize, what: &str) {
    let c = counts(dir);
    assert_eq!(c.len(), ranks, "{what}: one trace per rank");
    for (r, c) in c.iter().enumerate() {
        assert_eq!(c.call("MPI_Init"), 1, "{what}: rank {r}");
        assert_eq!(
            c.call("MPI_Barrier"),
            N + M,
            "{what}: rank {r}: {:?}",
            c.calls
        );
        assert_eq!(c.call("MPI_Finalize"), 1, "{what}: rank {r}");
        assert!(c.abnormal.is_empty(), "{what}: rank {r}: {:?}", c.abnormal);
        assert_eq!(c.lost, 0, "{what}: rank {r}");
    }
    assert!(
        reserves_left(dir).is_empty(),
        "{what}: {:?}",
        reserves_left(dir)
    );
}

/// SIGTERM with the default action: the trace is written by the recorder's helper thread, then
/// the process dies of the signal as it would have.
fn sigterm_default(mpi: Mpi) {
    let _guard = mpi_lock();
    // One rank: with two, the launcher may kill the second while it is still writing, once the
    // first has died.
    let (output, dir) = traced(mpi, 1, "term-default");
    let what = format!("term-default ({})", mpi.name());
    assert!(!output.status.success(), "{what}: must die of SIGTERM");
    let all = text(&output);
    assert!(
        all.contains("signal 15"),
        "{what}: the launcher reports death by signal 15:\n{all}"
    );
    let c = counts(&dir);
    assert_eq!(c.len(), 1, "{what}: a trace was written");
    assert!(c[0].call("MPI_Barrier") >= N, "{what}: {:?}", c[0].calls);
    assert_eq!(c[0].call("MPI_Finalize"), 0, "{what}");
    assert_eq!(c[0].abnormal, vec![15], "{what}");
    assert_eq!(c[0].lost, 0, "{what}");
    assert_eq!(common::info_json(&dir)["lost_events"], 0, "{what}");
    assert!(
        reserves_left(&dir).is_empty(),
        "{what}: the writer finished: {:?}",
        reserves_left(&dir)
    );
}

/// SIGTERM while the recorder is writing (a tiny `--limit` keeps it flushing nearly all the time,
/// holding its sink's lock): a handler that wrote the trace itself would wait for that lock held
/// by the very thread it interrupted, forever. The job must end, of the signal, with its trace.
fn sigterm_during_flush(mpi: Mpi) {
    let _guard = mpi_lock();
    let out = scratch(&format!("hardening-term-flood-{}", mpi.name()));
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run").arg("--out").arg(&out);
    cmd.args([
        "--mode",
        "off",
        "--threshold",
        "512KiB",
        "--limit",
        "1MiB",
        "--",
    ]);
    cmd.args(mpi.launch(1));
    cmd.arg(common::programs(mpi).join("hardening"))
        .args(["term-flood", "0", "0"]);
    // It ends within seconds; a deadlock must fail well before the suite's job limit.
    let output = output_with_timeout(
        common::mpi_env(&mut cmd),
        std::time::Duration::from_secs(90),
        &format!("term-flood ({})", mpi.name()),
    );
    let what = format!("term-flood ({})", mpi.name());
    assert!(!output.status.success(), "{what}: must die of SIGTERM");
    // read_trace also checks that no write was cut off mid-chunk.
    let c = counts(&out);
    assert_eq!(c.len(), 1, "{what}");
    assert!(
        c[0].call("MPI_Comm_rank") > 1000,
        "{what}: {:?}",
        c[0].calls
    );
    assert_eq!(c[0].abnormal, vec![15], "{what}");
}

/// `MPI_Abort` while the disk hangs (every `fdatasync` of the trace takes two minutes): the job
/// ends after `--abort-flush-limit`, not after the disk.
fn abort_is_bounded(mpi: Mpi) {
    let _guard = mpi_lock();
    let (a, _) = two_dirs(mpi, "abort-hang");
    let started = std::time::Instant::now();
    let output = faulty_mode(
        mpi,
        "abort",
        2,
        "posix",
        &[&a],
        &[
            ("FAULTFS_SYNC_DELAY_MS", "120000"),
            ("EVENFLUSH_ABORT_FLUSH_LIMIT", "1s"),
        ],
    );
    let took = started.elapsed();
    let what = format!("abort with a hanging disk ({})", mpi.name());
    assert!(!output.status.success(), "{what}: MPI_Abort fails the job");
    let all = text(&output);
    assert!(
        all.contains("faultfs: injected delay"),
        "{what}: the disk hung:\n{all}"
    );
    assert!(
        took < std::time::Duration::from_secs(60),
        "{what}: took {took:?}:\n{all}"
    );
    // Not asserted: the recorder's line saying it gave up, which the launcher, tearing the job
    // down, does not always forward.
}

/// An application that traps SIGTERM (to checkpoint before a batch limit) keeps its handler,
/// whether it installed it before or after `MPI_Init`, and the trace goes on after the signal.
fn sigterm_app_handler(mpi: Mpi, mode: &str) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, mode);
    let what = format!("{mode} ({})", mpi.name());
    succeeded(&output, &what);
    let stdout = String::from_utf8_lossy(&output.stdout);
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("rank {r}: handler called")),
            "{what}: the application's handler ran on rank {r}:\n{stdout}"
        );
    }
    complete_run(&dir, 2, &what);
}

fn sigterm_handler_before_init(mpi: Mpi) {
    sigterm_app_handler(mpi, "term-before");
}

fn sigterm_handler_after_init(mpi: Mpi) {
    sigterm_app_handler(mpi, "term-after");
}

/// The application's SIGTERM handler calls `exit` (no `MPI_Finalize`): the recorder's exit hook
/// then runs inside a signal handler, so it has the helper thread write the trace and waits.
fn sigterm_handler_exits(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 1, "term-exit");
    let what = format!("term-exit ({})", mpi.name());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("still running"),
        "{what}: the handler exited:\n{stdout}"
    );
    let c = counts(&dir);
    assert_eq!(
        c.len(),
        1,
        "{what}: a trace was written:\n{}",
        text(&output)
    );
    assert_eq!(c[0].call("MPI_Barrier"), N, "{what}");
    assert_eq!(c[0].call("MPI_Finalize"), 0, "{what}");
    assert_eq!(
        c[0].abnormal,
        vec![0],
        "{what}: an exit without MPI_Finalize"
    );
    assert_eq!(c[0].lost, 0, "{what}");
    assert!(reserves_left(&dir).is_empty(), "{what}");
}

/// SIGINT ignored before `MPI_Init` (as a shell does for a background job) stays ignored: the job
/// survives it and the trace does not end there.
fn sigint_ignored(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "int-ignored");
    let what = format!("int-ignored ({})", mpi.name());
    succeeded(&output, &what);
    let stdout = String::from_utf8_lossy(&output.stdout);
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("rank {r}: survived SIGINT")),
            "{what}:\n{stdout}"
        );
    }
    complete_run(&dir, 2, &what);
}

/// A crash (SIGSEGV): what was recorded before it is written, and the crash goes on to the
/// previous action (both MPIs print a backtrace of their own).
fn segv(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 1, "segv");
    let what = format!("segv ({})", mpi.name());
    assert!(!output.status.success(), "{what}: must crash");
    let c = counts(&dir);
    assert_eq!(
        c.len(),
        1,
        "{what}: a trace was written:\n{}",
        text(&output)
    );
    assert_eq!(c[0].call("MPI_Barrier"), N, "{what}");
    assert_eq!(c[0].abnormal, vec![11], "{what}");
    assert_eq!(c[0].lost, 0, "{what}");
}

/// A forked child that exits (running atexit handlers) writes nothing of its parent's and leaves
/// the parent's files alone: the parent's trace has every call once and ends normally.
fn fork_child_exits(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "fork");
    let what = format!("fork ({})", mpi.name());
    succeeded(&output, &what);
    let stdout = String::from_utf8_lossy(&output.stdout);
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("rank {r}: child exited 0, reserve intact")),
            "{what}: the child left rank {r}'s .reserve file alone:\n{stdout}"
        );
    }
    complete_run(&dir, 2, &what);
}

/// Whether `MPI_Comm_spawn` works in this MPI installation at all (without the recorder).
fn spawn_works(mpi: Mpi) -> Result<(), String> {
    let mut argv = mpi.launch(1);
    argv.push(
        common::programs(mpi)
            .join("hardening")
            .display()
            .to_string(),
    );
    argv.extend(["spawn", "1", "1"].map(String::from));
    let out = output_with_timeout(
        common::mpi_env(Command::new(&argv[0]).args(&argv[1..])),
        JOB_TIMEOUT,
        &format!("plain spawn ({})", mpi.name()),
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(text(&out))
    }
}

/// A world started by `MPI_Comm_spawn` writes its own trace in a `spawn-*` subdirectory, and the
/// parent's `rank-00000.evf` stays the parent's.
fn spawn(mpi: Mpi) {
    let _guard = mpi_lock();
    if let Err(why) = spawn_works(mpi) {
        common::skip_or_fail(
            &format!("{}-spawn", mpi.name()),
            &format!("MPI_Comm_spawn fails here even without the recorder: {why}"),
        );
        return;
    }
    let (output, dir) = traced(mpi, 2, "spawn");
    let what = format!("spawn ({})", mpi.name());
    succeeded(&output, &what);
    complete_run(&dir, 2, &what);
    let spawned: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(spawned.len(), 1, "{what}: one spawned world: {spawned:?}");
    let name = spawned[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("spawn-"), "{what}: {name}");
    let c = counts(&spawned[0]);
    assert_eq!(c.len(), 1, "{what}: the spawned world has one rank");
    assert_eq!(c[0].call("MPI_Init"), 1, "{what}");
    assert_eq!(c[0].call("MPI_Barrier"), N + M, "{what}: {:?}", c[0].calls);
    assert_eq!(c[0].call("MPI_Finalize"), 1, "{what}");
    // The parent's trace still reads as a trace of its own two ranks, and info points to the
    // spawned world's.
    assert_eq!(common::info_json(&dir)["ranks"], 2, "{what}");
    let info = common::check(
        Command::new(common::evenflush_bin())
            .arg("info")
            .arg(&dir)
            .output()
            .unwrap(),
        "evenflush info",
    );
    assert!(
        String::from_utf8_lossy(&info.stderr).contains(&name),
        "{what}: info mentions {name}"
    );
    assert_eq!(common::info_json(&spawned[0])["ranks"], 1, "{what}");
}

/// `MPI_Comm_free` called from an attribute delete callback (inside another `MPI_Comm_free`, where
/// no wrapper records it) still retires the communicator's id: a new communicator that gets the
/// same handle gets a new id and definition.
fn comm_free_in_attribute_callback(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "attr-free");
    let what = format!("attr-free ({})", mpi.name());
    succeeded(&output, &what);
    let stdout = String::from_utf8_lossy(&output.stdout);
    for r in 0..2 {
        assert!(
            stdout.contains(&format!("rank {r}: reused=1")),
            "{what}: the test needs MPI to reuse the freed handle on rank {r}:\n{stdout}"
        );
    }
    for r in read_trace(&dir) {
        let barriers: Vec<u32> = r
            .calls("MPI_Barrier")
            .iter()
            .map(|c| c.comm)
            .filter(|&comm| comm != 1)
            .collect();
        assert_eq!(barriers.len(), 3, "{what}: rank {}: {barriers:?}", r.rank);
        assert_eq!(barriers[1], barriers[2], "{what}: rank {}", r.rank);
        assert_ne!(
            barriers[0], barriers[1],
            "{what}: rank {}: the reused handle inherited the freed communicator's id",
            r.rank
        );
        assert_eq!(
            r.comms.get(&barriers[1]).map(Vec::len),
            Some(2),
            "{what}: rank {}",
            r.rank
        );
    }
}

/// `hardening plain` on one rank with the recorder and the fault injector preloaded (mpirun
/// directly: `evenflush run` sets LD_PRELOAD to the recorder alone). Returns the job's output.
fn faulty(mpi: Mpi, writer: &str, dirs: &[&Path], fault: &[(&str, &str)]) -> Output {
    faulty_mode(mpi, "plain", 1, writer, dirs, fault)
}

/// [`faulty`] with another mode of hardening.c and rank count.
fn faulty_mode(
    mpi: Mpi,
    mode: &str,
    ranks: u32,
    writer: &str,
    dirs: &[&Path],
    fault: &[(&str, &str)],
) -> Output {
    let programs = common::programs(mpi);
    let lib = common::evenflush_bin()
        .parent()
        .expect("target directory")
        .join(format!("libevenflush_{}.so", mpi.name()));
    let out: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut argv = mpi.launch(ranks);
    argv.push(programs.join("hardening").display().to_string());
    argv.extend([mode.to_string(), N.to_string(), M.to_string()]);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env(
            "LD_PRELOAD",
            format!(
                "{} {}",
                programs.join("faultfs.so").display(),
                lib.display()
            ),
        )
        .env("EVENFLUSH_OUT", out.join(","))
        .env("EVENFLUSH_MODE", "off")
        .env("EVENFLUSH_WRITER", writer)
        .env("FAULTFS_DIR", dirs[0]);
    for (k, v) in fault {
        cmd.env(k, v);
    }
    output_with_timeout(
        common::mpi_env(&mut cmd),
        JOB_TIMEOUT,
        &format!("faulty run ({}, {writer})", mpi.name()),
    )
}

fn rank_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".evf"))
        .collect();
    names.sort();
    names
}

/// `evenflush info --json` over the directories holding rank files.
fn info(dirs: &[&Path]) -> serde_json::Value {
    let dirs: Vec<&Path> = dirs
        .iter()
        .copied()
        .filter(|d| !rank_files(d).is_empty())
        .collect();
    let out = Command::new(common::evenflush_bin())
        .args(["info", "--json"])
        .args(&dirs)
        .output()
        .unwrap();
    let out = common::check(out, "evenflush info");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Nothing lost, nothing stopped, every call there once.
fn whole(info: &serde_json::Value, what: &str) {
    assert_eq!(info["lost_events"], 0, "{what}: {info}");
    assert_eq!(info["recording_stopped"], false, "{what}");
    assert_eq!(info["functions"]["MPI_Barrier"], N + M, "{what}");
    assert_eq!(info["functions"]["MPI_Finalize"], 1, "{what}");
}

fn two_dirs(mpi: Mpi, name: &str) -> (PathBuf, PathBuf) {
    let base = scratch(&format!("hardening-{name}-{}", mpi.name()));
    let (a, b) = (base.join("a"), base.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    (a, b)
}

/// A full quota (`EDQUOT` from `pwrite`) moves the trace on to the next directory, as a full disk
/// does; MPI-IO reports it as `MPI_ERR_IO`, which moves on too instead of aborting the job.
fn quota_rotates(mpi: Mpi, writer: &str) {
    let _guard = mpi_lock();
    let (a, b) = two_dirs(mpi, &format!("quota-{writer}"));
    let output = faulty(
        mpi,
        writer,
        &[&a, &b],
        &[
            ("FAULTFS_WRITE_ERRNO", "EDQUOT"),
            ("FAULTFS_WRITE_LIMIT", "300"),
        ],
    );
    let what = format!("quota ({}, {writer})", mpi.name());
    succeeded(&output, &what);
    let info = info(&[&a, &b]);
    if !common::writer_ran(&info, writer, &what) {
        return;
    }
    assert!(
        text(&output).contains("faultfs: injected EDQUOT"),
        "{what}: no fault:\n{}",
        text(&output)
    );
    assert_eq!(rank_files(&a), vec!["rank-00000.evf"], "{what}");
    assert!(
        rank_files(&b)
            .first()
            .is_some_and(|f| f == "rank-00000.p1.evf"),
        "{what}: {:?}",
        rank_files(&b)
    );
    whole(&info, &what);
}

fn quota_rotates_posix(mpi: Mpi) {
    quota_rotates(mpi, "posix");
}

fn quota_rotates_mpiio(mpi: Mpi) {
    quota_rotates(mpi, "mpiio");
}

/// `fdatasync` reports a full disk or quota (NFS, Lustre): the chunks it did not confirm are
/// written again in the next directory, and nothing counts as lost.
fn sync_out_of_space(mpi: Mpi, writer: &str, errno: &str) {
    let _guard = mpi_lock();
    let (a, b) = two_dirs(mpi, &format!("sync-{errno}-{writer}"));
    let output = faulty(
        mpi,
        writer,
        &[&a, &b],
        &[
            ("FAULTFS_SYNC_ERRNO", errno),
            ("FAULTFS_SYNC_FAILURES", "1"),
        ],
    );
    let what = format!("sync {errno} ({}, {writer})", mpi.name());
    succeeded(&output, &what);
    let info = info(&[&a, &b]);
    if !common::writer_ran(&info, writer, &what) {
        return;
    }
    assert!(
        text(&output).contains(&format!("faultfs: injected {errno}")),
        "{what}:\n{}",
        text(&output)
    );
    assert!(
        rank_files(&b)
            .first()
            .is_some_and(|f| f == "rank-00000.p1.evf"),
        "{what}: {:?} / {:?}",
        rank_files(&a),
        rank_files(&b)
    );
    whole(&info, &what);
}

fn sync_enospc_posix(mpi: Mpi) {
    sync_out_of_space(mpi, "posix", "ENOSPC");
}

fn sync_edquot_uring(mpi: Mpi) {
    sync_out_of_space(mpi, "uring", "EDQUOT");
}

/// One `EIO` from `fdatasync`: the unconfirmed chunks go again into a new part file in the same
/// directory (there may be no other), and nothing is lost.
fn sync_eio_once(mpi: Mpi, writer: &str) {
    let _guard = mpi_lock();
    let (a, _) = two_dirs(mpi, &format!("eio-once-{writer}"));
    let output = faulty(
        mpi,
        writer,
        &[&a],
        &[
            ("FAULTFS_SYNC_ERRNO", "EIO"),
            ("FAULTFS_SYNC_FAILURES", "1"),
        ],
    );
    let what = format!("sync EIO once ({}, {writer})", mpi.name());
    succeeded(&output, &what);
    let info = info(&[&a]);
    if !common::writer_ran(&info, writer, &what) {
        return;
    }
    assert!(
        text(&output).contains("faultfs: injected EIO"),
        "{what}:\n{}",
        text(&output)
    );
    assert!(
        rank_files(&a).contains(&"rank-00000.p1.evf".to_string()),
        "{what}: {:?}",
        rank_files(&a)
    );
    whole(&info, &what);
}

fn sync_eio_once_posix(mpi: Mpi) {
    sync_eio_once(mpi, "posix");
}

fn sync_eio_once_mpiio(mpi: Mpi) {
    sync_eio_once(mpi, "mpiio");
}

/// `EIO` again on the retry: those events are given up, counted and marked as lost in the trace,
/// and recording goes on (it did not stop for good).
fn sync_eio_twice(mpi: Mpi) {
    let _guard = mpi_lock();
    let (a, _) = two_dirs(mpi, "eio-twice");
    // Flushes while the program runs (a rank flushing alone at a small threshold), the first
    // one confirmed: it holds the Writer record, which would otherwise be lost with the rest and
    // leave no word of the writer that ran. The two EIOs hit a later flush.
    let output = faulty(
        mpi,
        "posix",
        &[&a],
        &[
            ("EVENFLUSH_MODE", "local"),
            ("EVENFLUSH_THRESHOLD", "4KiB"),
            ("FAULTFS_SYNC_ERRNO", "EIO"),
            ("FAULTFS_SYNC_FAILURES", "2"),
            ("FAULTFS_SYNC_SKIP", "1"),
        ],
    );
    let what = format!("sync EIO twice ({})", mpi.name());
    succeeded(&output, &what);
    let all = text(&output);
    assert_eq!(
        all.matches("faultfs: injected EIO").count(),
        2,
        "{what}:\n{all}"
    );
    assert!(
        all.contains("may be lost"),
        "{what}: said on stderr:\n{all}"
    );
    let info = info(&[&a]);
    common::assert_writer_used(&info, "posix");
    assert!(
        info["lost_events"].as_u64().unwrap() > 0,
        "{what}: counted: {info}"
    );
    assert_eq!(
        info["recording_stopped"], false,
        "{what}: recording goes on"
    );
}

/// A disk that fills up under the MPI-IO writer: the job must finish (MPI-IO errors return,
/// never abort), the warning is loud and the trace keeps what fitted.
fn disk_full_mpiio(mpi: Mpi) {
    let _guard = mpi_lock();
    let out = scratch(&format!("hardening-enospc-mpiio-{}", mpi.name()));
    if !common::mount_small_tmpfs(&out, &format!("disk_full_mpiio ({})", mpi.name())) {
        return;
    }
    let output = common::run_iterative(
        mpi,
        &out,
        &[
            "--mode",
            "dynamic",
            "--writer",
            "mpiio",
            "--threshold",
            "64KiB",
            "--decision-interval",
            "0",
        ],
    );
    let info = Command::new(common::evenflush_bin())
        .args(["info", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(&out).status();
    let what = format!("disk full, mpiio ({})", mpi.name());
    succeeded(&output, &what);
    assert!(
        text(&output).contains("RECORDING STOPPED"),
        "{what}: loud:\n{}",
        text(&output)
    );
    let info: serde_json::Value =
        serde_json::from_slice(&common::check(info, "info").stdout).unwrap();
    common::assert_writer_used(&info, "mpiio");
    assert_eq!(info["recording_stopped"], true, "{what}: {info}");
    assert!(info["lost_events"].as_u64().unwrap() > 0, "{what}");
}

for_both_mpis!(
    sigterm_default,
    sigterm_during_flush,
    abort_is_bounded,
    sigterm_handler_before_init,
    sigterm_handler_after_init,
    sigterm_handler_exits,
    sigint_ignored,
    segv,
    fork_child_exits,
    spawn,
    comm_free_in_attribute_callback,
    quota_rotates_posix,
    quota_rotates_mpiio,
    sync_enospc_posix,
    sync_edquot_uring,
    sync_eio_once_posix,
    sync_eio_once_mpiio,
    sync_eio_twice,
    disk_full_mpiio
);
