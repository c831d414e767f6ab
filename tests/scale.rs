//! The protocol at scale on one machine, on both MPIs: 64 oversubscribed ranks, and 128 and 256
//! on demand (nothing lost, no hang, and reconstruct, report and export work on the result), a
//! world barrier made from a worker thread under `MPI_THREAD_MULTIPLE`, and ranks started with
//! different settings.
//!
//! Every job runs with a time limit (`common::output_with_timeout` kills it whole): a protocol that
//! leaves a rank waiting fails the test instead of hanging the suite. Oversubscribed runs are a
//! stress test of the protocol's messages, not a model of a cluster, so no timing is asserted
//! beyond generous sanity bounds.

#[macro_use]
mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// Runs `evenflush run --out OUT FLAGS -- <launch…> PROGRAM ARGS`, killed whole past `limit_s`.
fn traced(out: &Path, flags: &[&str], launch: &[String], limit_s: u64) -> Output {
    let mut cmd = Command::new(evenflush_bin());
    cmd.arg("run")
        .arg("--out")
        .arg(out)
        .args(flags)
        .arg("--")
        .args(launch);
    let what = format!("evenflush run {flags:?} -- {launch:?}");
    check(
        output_with_timeout(
            mpi_env(&mut cmd),
            std::time::Duration::from_secs(limit_s),
            &what,
        ),
        &what,
    )
}

fn evenflush_ok(args: &[&str], dir: &Path) -> String {
    let out = Command::new(evenflush_bin())
        .args(args)
        .arg(dir)
        .output()
        .expect("run evenflush");
    assert!(
        out.status.success(),
        "evenflush {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `iterative` on `ranks` oversubscribed ranks, with enough user data per iteration that the
/// ranks flush several times; checks the trace is complete and the tools read it.
fn many_ranks(mpi: Mpi, ranks: u32, iterations: u32, min_flushes: u64, layout: &str) {
    let _guard = mpi_lock();
    let out = scratch(&format!("scale-{ranks}-{layout}-{}", mpi.name()));
    let mut launch = mpi.launch(ranks);
    launch.push(apps(mpi).join("iterative").display().to_string());
    launch.extend(
        [
            "--iterations",
            &iterations.to_string(),
            "--work-units",
            "100",
            "--mem",
            "0",
            "--record-bytes",
            "65536",
            "--records",
            "1",
        ]
        .map(String::from),
    );
    // A decision at every barrier: the run is short, and the test is about the protocol's
    // messages at this P, not about the interval.
    traced(
        &out,
        &[
            "--threshold",
            "256KiB",
            "--decision-interval",
            "0",
            "--layout",
            layout,
        ],
        &launch,
        600,
    );
    let files = std::fs::read_dir(&out)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            name.ends_with(".evf") || name.ends_with(".reserve")
        })
        .count();
    // The point of the aggregated layout: one file for the job instead of one per rank.
    let expected_files = if layout == "shared" {
        1
    } else {
        ranks as usize
    };
    assert_eq!(files, expected_files, "{layout} layout");
    let info = info_json(&out);
    assert_eq!(info["ranks"], ranks, "{info}");
    assert_eq!(info["lost_events"], 0);
    let flushes = info["suspension"]["flushes"].as_u64().unwrap();
    assert!(flushes >= min_flushes, "{flushes} flushes");
    // Exactly the program's calls (iterative.c's header): N + 2 barriers per rank.
    assert_eq!(
        info["functions"]["MPI_Barrier"],
        u64::from(ranks) * (u64::from(iterations) + 2),
        "{}",
        info["functions"]
    );
    let rebuilt = scratch(&format!("scale-{ranks}-{layout}-{}-g", mpi.name()));
    let text = evenflush_ok(
        &["reconstruct", "--out", rebuilt.to_str().unwrap(), "--json"],
        &out,
    );
    let summary: serde_json::Value = serde_json::from_str(&text).expect("reconstruct --json");
    assert_eq!(summary["suspensions"]["flushes"], flushes, "{summary}");
    evenflush_ok(&["report", "--json"], &out);
    let pftrace = out.join("trace.pftrace");
    evenflush_ok(
        &[
            "export",
            "--format",
            "perfetto",
            "--out",
            pftrace.to_str().unwrap(),
        ],
        &out,
    );
    assert!(std::fs::metadata(&pftrace).unwrap().len() > 1000);
}

/// Oversubscribed MPICH ranks spin in every wait (ch4:ucx has no yield), so each barrier costs it
/// far more than Open MPI on these 2 cores: fewer iterations keep CI's time in bounds while the
/// flushes, the protocol's messages at this P, and the checks stay the same (64 ranks: 84 s -> 47 s).
fn iterations(mpi: Mpi, open_mpi: u32, mpich: u32) -> u32 {
    match mpi {
        Mpi::OpenMpi => open_mpi,
        Mpi::Mpich => mpich,
    }
}

fn ranks_64(mpi: Mpi) {
    many_ranks(mpi, 64, iterations(mpi, 40, 16), 3, "rank");
}

/// 128 and 256 ranks: the launchers' own start-up dominates here (Open MPI untraced: 65 s for a
/// 1 s program at 256; MPICH's ranks spin while they start). On this 2-core machine the 256-rank
/// pair took 500 of CI's 1 700 test seconds, the 128-rank pair 111 s, which CI's 30 minutes no
/// longer hold beside the rest. Both kept, and run on demand:
/// `cargo test --release --test scale -- --ignored` (alone: Open MPI 75 s, MPICH 272 s at 256).
fn ranks_128(mpi: Mpi) {
    many_ranks(mpi, 128, 12, 1, "rank");
}

fn ranks_256(mpi: Mpi) {
    // MPICH's time here is its 256 spinning ranks' start-up and the protocol's messages, not
    // the iterations (6 instead of 12 saved nothing): both MPIs run the same program.
    many_ranks(mpi, 256, 12, 1, "rank");
}

/// Ranks writing one file together at each flush: 64 on Open MPI, 32 on MPICH, whose spinning
/// ranks made the 64-rank run take 82 s here against 9 s on Open MPI (32 ranks: 30 s); `ranks_64`
/// keeps MPICH at 64 with one file per rank. (256 ranks pass too, in about 3 minutes per MPI
/// here.)
fn one_file(mpi: Mpi) {
    let ranks = match mpi {
        Mpi::OpenMpi => 64,
        Mpi::Mpich => 32,
    };
    many_ranks(mpi, ranks, 20, 3, "shared");
}

/// Rank 0 makes every world barrier from a freshly created thread; the others from their main
/// thread. The protocol must take part from whichever thread makes the collective.
fn barrier_from_a_worker_thread(mpi: Mpi) {
    let _guard = mpi_lock();
    let out = scratch(&format!("scale-worker-barrier-{}", mpi.name()));
    let iterations = 300u64;
    let mut launch = mpi.launch(4);
    launch.push(programs(mpi).join("worker_barrier").display().to_string());
    launch.extend(["--iterations".to_string(), iterations.to_string()]);
    let run = traced(&out, &["--threshold", "1MiB"], &launch, 180);
    assert!(
        String::from_utf8_lossy(&run.stdout).contains(&format!("sum={}", 4 * iterations)),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let info = info_json(&out);
    assert_eq!(info["lost_events"], 0);
    assert_eq!(info["functions"]["MPI_Barrier"], 4 * iterations);
    // 300 × 64 KiB of records per rank against S = 1 MiB.
    let flushes = info["suspension"]["flushes"].as_u64().unwrap();
    assert!(flushes >= 3, "{flushes} flushes: {}", info["suspension"]);
}

/// Ranks started with different protocol settings must not hang waiting for each other: every
/// rank refuses to record, and says why.
fn different_settings_are_refused(mpi: Mpi) {
    let _guard = mpi_lock();
    let out = scratch(&format!("scale-mismatch-{}", mpi.name()));
    let program = programs(mpi).join("ring").display().to_string();
    // MPMD: the second rank gets a different decision mode.
    let launch: Vec<String> = match mpi {
        Mpi::OpenMpi => [
            "mpirun.openmpi",
            "--oversubscribe",
            "-np",
            "1",
            &program,
            ":",
            "-np",
            "1",
            "-x",
            "EVENFLUSH_DECISION=blocking",
            &program,
        ]
        .map(String::from)
        .to_vec(),
        Mpi::Mpich => [
            "mpirun.mpich",
            "-np",
            "1",
            &program,
            ":",
            "-np",
            "1",
            "-env",
            "EVENFLUSH_DECISION",
            "blocking",
            &program,
        ]
        .map(String::from)
        .to_vec(),
    };
    let run = traced(&out, &[], &launch, 120);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("different evenflush settings"),
        "a clear refusal: {stderr}"
    );
    // The program's own output is unchanged.
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        run_plain(mpi, 2, "ring", &[])
    );
}

for_both_mpis!(
    ranks_64,
    one_file,
    barrier_from_a_worker_thread,
    different_settings_are_refused
);
for_both_mpis!(ignored beyond_64, "1 to 5 minutes per MPI on 2 cores: run with --ignored": ranks_128, ranks_256);
