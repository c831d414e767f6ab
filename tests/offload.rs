//! The offload protocol in real `mpirun` jobs under both MPIs: equalised suspensions that flush the
//! trace many times lose nothing, in every mode and with every writer backend; a full disk stops
//! recording without stopping the application.

#[macro_use]
mod common;

use std::path::Path;
use std::process::Command;

use common::{
    ITERATIONS, Mpi, RECORD_BYTES, RECORDS, assert_writer_used, info_json, mpi_lock, run_iterative,
    scratch,
};
use format::Event;

/// Every user record of every rank is in the trace, with its full payload.
fn assert_all_records_present(dir: &Path) {
    for rank in common::read_trace(dir) {
        let (count, bytes) = rank.all().fold((0u64, 0u64), |(n, b), e| match e {
            Event::User(u) => (n + 1, b + u.payload.len() as u64),
            _ => (n, b),
        });
        assert_eq!(count, u64::from(ITERATIONS * RECORDS), "rank {}", rank.rank);
        assert_eq!(
            bytes,
            u64::from(ITERATIONS * RECORD_BYTES),
            "rank {}",
            rank.rank
        );
    }
}

fn offload_run(mpi: Mpi, name: &str, flags: &[&str], min_flushes: u64) -> serde_json::Value {
    offload_run_app(mpi, name, flags, min_flushes, &[])
}

/// [`offload_run`] with more arguments for the iterative program.
fn offload_run_app(
    mpi: Mpi,
    name: &str,
    flags: &[&str],
    min_flushes: u64,
    app_args: &[&str],
) -> serde_json::Value {
    let _guard = mpi_lock();
    let out = scratch(&format!("offload-{name}-{}", mpi.name()));
    // Decision points about every barrier pair (the run is short; the default interval is for
    // long runs), so that the run flushes often.
    let mut flags = flags.to_vec();
    if !flags.contains(&"--decision-interval") {
        flags.extend(["--decision-interval", "2ms"]);
    }
    // A quarter of the usual work per iteration (about 7 ms here, still above the 2 ms decision
    // interval, so every barrier stays a decision point): what these tests check is set by the
    // records written (S is passed every 4 iterations), not by the compute, and the 28 runs took
    // 173 s of CI at the full amount.
    let output = common::run_iterative_with(mpi, &out, &flags, 450_000, app_args);
    assert!(
        output.status.success(),
        "{name} ({}): {}",
        mpi.name(),
        String::from_utf8_lossy(&output.stderr)
    );
    let info = info_json(&out);
    assert_eq!(info["lost_events"], 0, "{name} ({})", mpi.name());
    assert!(
        info["suspension"]["flushes"].as_u64().unwrap() >= min_flushes,
        "{name} ({}): {} flushes",
        mpi.name(),
        info["suspension"]["flushes"]
    );
    assert_all_records_present(&out);
    info
}

fn dynamic_posix(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "dynamic-posix",
        &[
            "--mode",
            "dynamic",
            "--threshold",
            "1MiB",
            "--writer",
            "posix",
        ],
        10,
    );
    assert_writer_used(&info, "posix");
    // The split decision suspends only to flush: every suspension wrote the trace.
    let s = &info["suspension"];
    assert_eq!(s["count"], s["flushes"], "{s}");
    // Z includes the write, so it is never zero.
    assert!(s["z_us"]["p50"].as_f64().unwrap() > 0.0);
    equal_pauses(
        &scratch_dir(mpi, "dynamic-posix"),
        s["flushes"].as_u64().unwrap(),
    );
}

/// The paper's blocking decision: a suspension after every barrier, on every rank, flushing or not.
fn dynamic_blocking(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "dynamic-blocking",
        &[
            "--mode",
            "dynamic",
            "--decision",
            "blocking",
            "--threshold",
            "1MiB",
        ],
        10,
    );
    let s = &info["suspension"];
    assert!(s["count"].as_u64().unwrap() >= u64::from(ITERATIONS), "{s}");
    assert!(s["count"].as_u64().unwrap() > s["flushes"].as_u64().unwrap());
    assert!(s["z_us"]["p50"].as_f64().unwrap() > 0.0);
    equal_pauses(&scratch_dir(mpi, "dynamic-blocking"), u64::from(ITERATIONS));
}

fn scratch_dir(mpi: Mpi, name: &str) -> std::path::PathBuf {
    common::evenflush_bin()
        .parent()
        .unwrap()
        .join("integration-scratch")
        .join(format!("offload-{name}-{}", mpi.name()))
}

/// The protocol's promise read from the raw suspension records with each rank's own clock (not
/// from `evenflush info`): no rank resumes before its Z has passed, and the ranks of one
/// suspension are paused for the same time (their pauses differ by less than 1 ms in the median
/// suspension: both ranks share this machine, so only scheduling separates them), over at least
/// `at_least` suspensions seen on both ranks.
fn equal_pauses(dir: &Path, at_least: u64) {
    let mut pauses: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for entry in format::open_dir(dir).unwrap() {
        let file = format::RankFile::open(&entry.path).unwrap();
        let ns_per_tick = 1e9 / file.header().clock.ticks_per_sec;
        for e in file.events() {
            if let Event::Suspension(s) = e.unwrap() {
                let pause = (s.end - s.start) as f64 * ns_per_tick;
                // One tick of rounding either way.
                assert!(
                    pause + 2.0 * ns_per_tick >= s.z_ns as f64,
                    "rank {} resumed after {pause} ns of a {} ns suspension",
                    entry.rank,
                    s.z_ns
                );
                pauses.entry(s.seq).or_default().push(pause);
            }
        }
    }
    let mut differences: Vec<f64> = pauses
        .values()
        .filter(|p| p.len() == 2)
        .map(|p| (p[0] - p[1]).abs())
        .collect();
    assert!(
        differences.len() as u64 >= at_least,
        "{} suspensions",
        differences.len()
    );
    differences.sort_by(f64::total_cmp);
    let median = differences[differences.len() / 2];
    assert!(median < 1e6, "median pause difference {median} ns");
}

fn dynamic_uring(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "dynamic-uring",
        &[
            "--mode",
            "dynamic",
            "--threshold",
            "1MiB",
            "--writer",
            "uring",
        ],
        10,
    );
    common::writer_ran(&info, "uring", &format!("dynamic_uring ({})", mpi.name()));
}

fn dynamic_mpiio(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "dynamic-mpiio",
        &[
            "--mode",
            "dynamic",
            "--threshold",
            "1MiB",
            "--writer",
            "mpiio",
        ],
        10,
    );
    assert_writer_used(&info, "mpiio");
}

/// The scalable clock scheme of the scale study, adopted as a run setting.
fn tree_clock(mpi: Mpi) {
    offload_run(
        mpi,
        "tree-clock",
        &[
            "--mode",
            "dynamic",
            "--threshold",
            "1MiB",
            "--clock-scheme",
            "tree",
        ],
        10,
    );
}

fn noremeasure(mpi: Mpi) {
    offload_run(
        mpi,
        "noremeasure",
        &["--mode", "noremeasure", "--threshold", "1MiB"],
        10,
    );
}

fn static_mode(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "static",
        &[
            "--mode",
            "static",
            // Z is static-short only where a blocking decision suspends without a flush.
            "--decision",
            "blocking",
            "--threshold",
            "1MiB",
            "--static-short",
            "200us",
            "--static-long",
            "30ms",
        ],
        10,
    );
    // Static Z is one of the two fixed values.
    let z = &info["suspension"]["z_us"];
    assert!((z["max"].as_f64().unwrap() - 30_000.0).abs() < 1.0, "{z}");
    assert!((z["p50"].as_f64().unwrap() - 200.0).abs() < 1.0, "{z}");
}

fn local(mpi: Mpi) {
    offload_run(
        mpi,
        "local",
        &["--mode", "local", "--threshold", "1MiB"],
        10,
    );
}

fn off(mpi: Mpi) {
    let info = offload_run(mpi, "off", &["--mode", "off"], 0);
    assert_eq!(info["suspension"]["count"], 0);
}

/// A disk that fills up: the program still finishes, the warning is loud, and the trace keeps
/// every complete chunk and says where recording stopped.
fn disk_full(mpi: Mpi) {
    let _guard = mpi_lock();
    let out = scratch(&format!("offload-enospc-{}", mpi.name()));
    if !common::mount_small_tmpfs(&out, &format!("disk_full ({})", mpi.name())) {
        return;
    }
    // A decision at every barrier and a small S, so that flushes come often enough to fill the
    // small disk (the records compress to little).
    let output = run_iterative(
        mpi,
        &out,
        &[
            "--mode",
            "dynamic",
            "--threshold",
            "64KiB",
            "--decision-interval",
            "0",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let info = Command::new(common::evenflush_bin())
        .args(["info", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(&out).status();
    assert!(
        output.status.success(),
        "the application must finish: {stderr}"
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("total_s="));
    assert!(
        stderr.contains("RECORDING STOPPED"),
        "a loud warning: {stderr}"
    );
    assert!(
        info.status.success(),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_writer_used(&info, "posix");
    assert_eq!(
        info["recording_stopped"], true,
        "the trace marks the stop: {info}"
    );
    assert!(
        info["lost_events"].as_u64().unwrap() > 0,
        "lost events are counted"
    );
    assert!(
        info["user_events"]["iteration-data"].as_u64().unwrap_or(0) > 0,
        "what fitted is kept"
    );
}

/// The trace directory's file names, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Each rank's trace ends with its `MPI_Finalize` call, which is recorded after collective I/O
/// is over: in the aggregated layout it is in the rank's slot of the group file.
fn assert_finalize_recorded(dir: &Path) {
    let ranks = common::read_trace(dir);
    assert_eq!(ranks.len(), 2);
    for r in &ranks {
        assert_eq!(r.calls("MPI_Finalize").len(), 1, "rank {}", r.rank);
    }
}

/// The aggregated layout: one file for the job, written by both ranks together at every flush;
/// nothing else is created (no file per rank, no reserve file per rank), and nothing is lost.
fn group_shared(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "group-shared",
        &["--layout", "shared", "--threshold", "1MiB"],
        10,
    );
    assert_writer_used(&info, "group");
    let dir = scratch_dir(mpi, "group-shared");
    assert_eq!(names_in(&dir), ["group-00000.evf", "meta.json"]);
    assert_finalize_recorded(&dir);
    let group = format::GroupFile::open(dir.join("group-00000.evf")).unwrap();
    assert_eq!(group.index.header.group_size, 2);
    assert!(group.index.damage.is_empty(), "{:?}", group.index.damage);
    // Every flush added a region per rank: the index found each rank's chunks in as many places.
    for m in &group.index.members {
        assert!(
            m.segments.len() >= 10,
            "rank {}: {:?}",
            m.header.rank,
            m.segments
        );
    }
}

/// One file per node; both ranks share this machine's node.
fn group_node(mpi: Mpi) {
    let info = offload_run(
        mpi,
        "group-node",
        &["--layout", "node", "--threshold", "1MiB"],
        10,
    );
    assert_writer_used(&info, "group");
    let dir = scratch_dir(mpi, "group-node");
    assert_eq!(names_in(&dir), ["group-00000.evf", "meta.json"]);
    assert_finalize_recorded(&dir);
}

/// A rank that must flush alone cannot write the group file, which is written collectively: it
/// goes on in part files of its own, and the trace stays complete. A rank flushes alone when the
/// hard limit is reached between decision points and compressing in memory is not enough: the
/// records carry random bytes here, which zstd cannot shrink.
fn group_local_flush(mpi: Mpi) {
    let info = offload_run_app(
        mpi,
        "group-local",
        &[
            "--layout",
            "shared",
            "--threshold",
            "256KiB",
            "--limit",
            "300KiB",
            // No decision point in the whole run: the compressed backlog cannot go to disk with
            // the others, so the second full trace block makes the rank write alone.
            "--suspend-every",
            "1000000",
        ],
        0,
        &["--random-payload", "1"],
    );
    let dir = scratch_dir(mpi, "group-local");
    let names = names_in(&dir);
    assert!(names.contains(&"group-00000.evf".to_string()), "{names:?}");
    assert!(
        names.iter().any(|n| n.ends_with(".p1.evf")),
        "a rank's own part file: {names:?}"
    );
    let fallbacks = info["writer_fallbacks"].as_array().unwrap();
    assert!(!fallbacks.is_empty(), "the switch is recorded: {info}");
}

/// A full disk under the group file: the collective write fails on every rank together, and each
/// rank continues in files of its own in the next output directory. Nothing is lost.
fn group_disk_full(mpi: Mpi) {
    let _guard = mpi_lock();
    let out = scratch(&format!("offload-group-enospc-{}", mpi.name()));
    let more = scratch(&format!("offload-group-enospc-more-{}", mpi.name()));
    if !common::mount_small_tmpfs(&out, &format!("group_disk_full ({})", mpi.name())) {
        return;
    }
    let dirs = format!("{},{}", out.display(), more.display());
    let output = run_iterative(
        mpi,
        &out,
        &[
            "--out",
            &dirs,
            "--layout",
            "shared",
            "--threshold",
            "256KiB",
            "--decision-interval",
            "0",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let info = Command::new(common::evenflush_bin())
        .args(["info", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    let group_bytes = std::fs::metadata(out.join("group-00000.evf")).map(|m| m.len());
    let in_more = names_in(&more);
    let _ = Command::new("umount").arg(&out).status();
    assert!(
        output.status.success(),
        "the application must finish: {stderr}"
    );
    assert!(
        stderr.contains("writing the group file failed"),
        "a loud warning: {stderr}"
    );
    assert!(group_bytes.unwrap_or(0) > 0, "the first flushes fitted");
    assert!(
        in_more.iter().filter(|n| n.ends_with(".p1.evf")).count() == 2,
        "both ranks went on in the next directory: {in_more:?}"
    );
    assert!(
        info.status.success(),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["lost_events"], 0, "{info}");
    assert_eq!(
        info["user_events"]["iteration-data"].as_u64(),
        Some(u64::from(ITERATIONS * RECORDS * 2)),
        "every record of both ranks: {info}"
    );
}

for_both_mpis!(
    group_shared,
    group_node,
    group_local_flush,
    group_disk_full,
    dynamic_posix,
    dynamic_blocking,
    dynamic_uring,
    dynamic_mpiio,
    tree_clock,
    noremeasure,
    static_mode,
    local,
    off,
    disk_full
);
