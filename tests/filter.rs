//! What is recorded: `MPI_Pcontrol` levels, and `--include` / `--exclude` (recorder/src/front/filter.rs),
//! on tests/programs/pcontrol.c under both MPIs. Recording paused by the program leaves out
//! exactly the calls made while paused; a filtered call takes its completions with it, so no
//! completion is read as another call's; a rule that names no function stops recording with a
//! message instead of recording everything.

#[macro_use]
mod common;

use common::{Mpi, mpi_lock, read_trace, run_traced_output, scratch};
use format::Event;

const ITERATIONS: usize = 10;

fn record(mpi: Mpi, name: &str, flags: &[&str]) -> (std::path::PathBuf, std::process::Output) {
    let _guard = mpi_lock();
    let dir = scratch(&format!("filter-{name}-{}", mpi.name()));
    let out = run_traced_output(mpi, 2, "pcontrol", &["--iterations", "10"], &dir, flags);
    (dir, out)
}

fn completions(rank: &common::RankEvents) -> usize {
    rank.all()
        .filter(|e| matches!(e, Event::Completion(_)))
        .count()
}

fn pcontrol_pauses_and_filters_leave_calls_out(mpi: Mpi) {
    // As the program says: the barriers made while paused are not there.
    let (dir, out) = record(mpi, "default", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in read_trace(&dir) {
        assert_eq!(
            r.calls("MPI_Barrier").len(),
            2 * ITERATIONS + 1,
            "rank {}",
            r.rank
        );
        let levels: Vec<i32> = r.calls("MPI_Pcontrol").iter().map(|c| c.tag).collect();
        assert_eq!(levels, [0, 1], "rank {}", r.rank);
        // The polls that found nothing are folded; the last one completes the receive.
        assert!(
            r.calls("MPI_Test").len() as u64 + r.idle_polls("MPI_Test") >= 2,
            "rank {}",
            r.rank
        );
        assert_eq!(r.calls("MPI_Test").len(), 1, "rank {}", r.rank);
        assert_eq!(r.calls("MPI_Wait").len(), 1);
        // The receive's (by the last Test) and the send's (by the Wait).
        assert_eq!(completions(&r), 2, "rank {}", r.rank);
    }

    // Excluding the polls drops them and the receive's completion with them.
    let (dir, out) = record(mpi, "exclude", &["--exclude", "MPI_Test"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in read_trace(&dir) {
        assert!(r.calls("MPI_Test").is_empty(), "rank {}", r.rank);
        assert_eq!(r.idle_polls("MPI_Test"), 0, "rank {}", r.rank);
        assert_eq!(r.calls("MPI_Irecv").len(), 1);
        assert_eq!(r.calls("MPI_Barrier").len(), 2 * ITERATIONS + 1);
        assert_eq!(completions(&r), 1, "rank {}", r.rank);
        // The one completion left follows the Wait that made it.
        let events: Vec<&Event> = r.all().collect();
        let at = events
            .iter()
            .position(|e| matches!(e, Event::Completion(_)))
            .unwrap();
        match events[at - 1] {
            Event::Call(c) => assert_eq!(r.name(c.func), "MPI_Wait"),
            other => panic!("rank {}: completion after {other:?}", r.rank),
        }
    }

    // Only the blocking collectives, and always Init, Finalize and Pcontrol.
    let (dir, out) = record(mpi, "include", &["--include", "class:collective-blocking"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in read_trace(&dir) {
        let mut names: Vec<&str> = r
            .all()
            .filter_map(|e| match e {
                Event::Call(c) => Some(r.name(c.func)),
                _ => None,
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names,
            ["MPI_Barrier", "MPI_Finalize", "MPI_Init", "MPI_Pcontrol"],
            "rank {}",
            r.rank
        );
        assert_eq!(completions(&r), 0);
    }

    // A misspelt rule: said, and nothing recorded, rather than everything.
    let (_, out) = record(mpi, "misspelt", &["--exclude", "MPI_Tset"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("matches no wrapped MPI function"),
        "{stderr}"
    );
}

for_both_mpis!(pcontrol_pauses_and_filters_leave_calls_out);
