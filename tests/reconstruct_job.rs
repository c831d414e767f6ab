//! `mpirun -np N evenflush reconstruct`: the reconstruction as an MPI job, under each MPI's own
//! launcher, writes the same bytes and prints the same summary as one process, with each model
//! and with the repair; and a trace that cannot be read fails the job with an error, never a hang.

#[macro_use]
mod common;
// The trace writer is the reconstruct tests'.
#[path = "../reconstruct/tests/common/mod.rs"]
mod traces;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn reconstruct(
    mpi: Mpi,
    processes: Option<u32>,
    trace: &Path,
    out: &Path,
    extra: &[&str],
) -> Output {
    let mut argv: Vec<String> = match processes {
        Some(n) => mpi.launch(n),
        None => Vec::new(),
    };
    argv.push(evenflush_bin().display().to_string());
    argv.extend(["reconstruct".into(), trace.display().to_string()]);
    argv.extend(["--out".into(), out.display().to_string()]);
    argv.extend(["--remove", "both", "--json", "--threads", "1"].map(String::from));
    argv.extend(extra.iter().map(|s| s.to_string()));
    output_with_timeout(
        mpi_env(Command::new(&argv[0]).args(&argv[1..])),
        LIMIT,
        &argv.join(" "),
    )
}

fn job_writes_what_one_process_writes(mpi: Mpi) {
    let _lock = mpi_lock();
    let dir = scratch(&format!("reconstruct-job-{}", mpi.name()));
    // Several suspensions (a small S) and a program whose messages take every matching path the
    // bundled programs have (wildcards, persistent, probes, large counts), on 5 ranks; and a
    // rank with two threads, which no split follows, so process 0 matches for every process
    // (and with the repair writes every file).
    for (program, ranks, args) in [
        ("halo", 5u32, vec![]),
        ("matching", 4, vec![]),
        ("threads", 2, vec![]),
    ] {
        let trace = dir.join(program);
        run_traced(
            mpi,
            ranks,
            program,
            &args,
            &trace,
            &["--threshold", "64KiB"],
        );
        // The default (subtract), the repair and the replay: each split with no central matcher
        // (each process repairs or replays its own ranks), but on `threads`.
        let variants: [(&str, &[&str]); 3] = [
            ("subtract", &[]),
            ("hb", &["--hb"]),
            ("replay", &["--model", "replay"]),
        ];
        for (variant, extra) in variants {
            let one = dir.join(format!("{program}-one-{variant}"));
            let single = check(
                reconstruct(mpi, None, &trace, &one, extra),
                "one-process reconstruct",
            );
            let expected = reconstruct_summary(&single, "one process");
            assert!(
                expected["events"].as_u64().unwrap() > 500,
                "{program}: {expected}"
            );
            // 3 processes for 5 (4) ranks: uneven blocks; 7: some processes own nothing.
            for processes in [3u32, 7] {
                let job_out = dir.join(format!("{program}-job{processes}-{variant}"));
                let what = format!("{program} on {processes} processes, {variant}");
                let job = check(
                    reconstruct(mpi, Some(processes), &trace, &job_out, extra),
                    &what,
                );
                assert!(
                    rank_files(&job_out) == rank_files(&one),
                    "{what}: other bytes than one process"
                );
                assert_eq!(rank_files(&job_out).len(), ranks as usize, "{what}");
                assert_eq!(reconstruct_summary(&job, &what), expected, "{what}");
            }
        }
    }
}

for_both_mpis!(
    job_writes_what_one_process_writes,
    a_job_on_more_processes_than_cores_is_not_starved_by_its_waits
);

#[test]
fn a_missing_trace_fails_the_job_with_its_name() {
    let _lock = mpi_lock();
    let dir = scratch("reconstruct-job-missing");
    for mpi in [Mpi::OpenMpi, Mpi::Mpich] {
        let missing = dir.join("no-such-trace");
        let out = reconstruct(mpi, Some(3), &missing, &dir.join("out"), &[]);
        assert!(!out.status.success(), "{}: succeeded", mpi.name());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("no-such-trace"), "{}: {stderr}", mpi.name());
    }
}

/// A split replay on more processes than cores. Every collective holds the processes in
/// lock-step, so each waits for the others about once per collective, and a process that waits
/// must leave the core to the one it waits for. MPICH's blocking probe polls without yielding:
/// waiting there, 4 processes on 2 cores took 98 s on this trace, against 0.8-1.3 s for one
/// process; waiting polled and yielding, 1.3-1.8 s. (Open MPI yields when oversubscribed: 1.7 s
/// either way.)
fn a_job_on_more_processes_than_cores_is_not_starved_by_its_waits(mpi: Mpi) {
    let _lock = mpi_lock();
    let dir = scratch(&format!("reconstruct-job-oversubscribed-{}", mpi.name()));
    let trace = dir.join("halo");
    std::fs::create_dir_all(&trace).unwrap();
    let world = 8;
    // About 2 M events in all: one process replays them in about a second.
    let ranks = traces::matched_halo(world, 12_000);
    traces::write_trace(&trace, world, &ranks, 1 << 16);
    drop(ranks);
    let replay: &[&str] = &["--model", "replay"];
    let one = dir.join("one");
    let started = Instant::now();
    check(
        reconstruct(mpi, None, &trace, &one, replay),
        "one-process replay",
    );
    let alone = started.elapsed();
    let job_out = dir.join("job4");
    let started = Instant::now();
    check(
        reconstruct(mpi, Some(4), &trace, &job_out, replay),
        "4-process replay",
    );
    let job = started.elapsed();
    assert!(
        rank_files(&job_out) == rank_files(&one),
        "4 processes wrote other bytes than one"
    );
    // Each process replays a quarter of the ranks, two to a core: about one process's time
    // when nothing starves (1.3-1.8 times, with the launch); 3 times plus the launch is far
    // beyond it. Checked: with every wait's loop spinning instead, the job took 100 s (one
    // process 1.2 s); yielding only in the engine's first 200 µs of a wait, 6.8 s (0.9 s).
    let bound = alone * 3 + Duration::from_secs(2);
    assert!(
        job < bound,
        "4 processes on {} cores took {job:?}, one process {alone:?}: more than {bound:?}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    std::fs::remove_dir_all(&dir).ok();
}
