//! A `Waitall` that returns `MPI_ERR_IN_STATUS` (tests/programs/in_status.c) under both MPIs: the
//! requests its statuses say completed (a truncated receive among them) are recorded as completed
//! by it, one still pending (MPICH stops at the first error) by the `Wait` that finishes it later,
//! and both messages are matched. Before, such a `Waitall` recorded no completion at all.

#[macro_use]
mod common;

use common::{Mpi, mpi_lock, read_trace, run_traced, scratch};
use format::Event;

fn completions_after_err_in_status(mpi: Mpi) {
    let dir = scratch(&format!("in-status-{}", mpi.name()));
    let stdout = {
        let _guard = mpi_lock();
        run_traced(mpi, 2, "in_status", &[], &dir, &[])
    };
    assert!(
        stdout.contains("in_status waitall=ERR_IN_STATUS first=ERR_TRUNCATE"),
        "the program did not see MPI_ERR_IN_STATUS: {stdout}"
    );
    let pending = stdout.contains("second=PENDING");
    let rank1 = read_trace(&dir).into_iter().find(|r| r.rank == 1).unwrap();
    // Completions by the call they follow.
    let mut by_call: Vec<(&str, usize)> = Vec::new();
    for e in rank1.all() {
        match e {
            Event::Call(c) => by_call.push((rank1.name(c.func), 0)),
            Event::Completion(_) => by_call.last_mut().unwrap().1 += 1,
            _ => {}
        }
    }
    let of = |name: &str| {
        by_call
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, k)| *k)
            .sum::<usize>()
    };
    if pending {
        assert_eq!((of("MPI_Waitall"), of("MPI_Wait")), (1, 1), "{by_call:?}");
    } else {
        assert_eq!(of("MPI_Waitall"), 2, "{by_call:?}");
    }
    let trace = trace::Trace::open(&dir).unwrap();
    let (matches, report) = reconstruct::matches::matched_messages(&trace).unwrap();
    assert_eq!(matches.len(), 2, "{report:?}");
    assert_eq!(
        report.unmatched_sends + report.unmatched_receives,
        0,
        "{report:?}"
    );
}

for_both_mpis!(completions_after_err_in_status);
