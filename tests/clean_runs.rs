//! Clean runs have no causality violations. Ranks of one host read one clock, so a trace of a
//! correct program recorded on one node cannot show a receive ending before its send started or a
//! rank leaving a collective before a rank it waits for entered: every violation found there is a
//! matching error or clock noise of the reader's making. Each bundled program is recorded on one
//! node under both MPIs, and `evenflush reconstruct` must find every message matched and no
//! violation, before any repair. (The synthetic tests in reconstruct/tests inject skew and check
//! that violations are then found and repaired.)

#[macro_use]
mod common;

use std::path::Path;
use std::process::Command;

use common::{Mpi, check, evenflush_bin, mpi_lock, run_traced_output, scratch};

/// Every bundled program that ends by itself: name, ranks, arguments.
const PROGRAMS: &[(&str, u32, &[&str])] = &[
    ("ring", 3, &[]),
    ("halo", 4, &[]),
    ("collectives", 4, &[]),
    ("split", 4, &[]),
    ("anysource", 4, &[]),
    ("threads", 2, &[]),
    ("user_records", 2, &[]),
    ("sigterm", 2, &["--iterations", "20"]),
    ("fortran_ring", 2, &[]),
    ("fortran_f08", 2, &[]),
    ("smoke", 2, &[]),
    ("coverage", 2, &[]),
    ("smoke_f77", 2, &[]),
    ("smoke_f08", 2, &[]),
    ("worker_barrier", 2, &["--iterations", "50"]),
    ("matching", 4, &[]),
];

fn reconstruct_json(dir: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let output = Command::new(evenflush_bin())
        .arg("reconstruct")
        .arg(dir)
        .arg("--out")
        .arg(out)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let output = check(output, "evenflush reconstruct");
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn record(mpi: Mpi, program: &str, ranks: u32, args: &[&str]) -> std::path::PathBuf {
    record_output(mpi, program, ranks, args).0
}

/// The trace and the program's standard output.
fn record_output(
    mpi: Mpi,
    program: &str,
    ranks: u32,
    args: &[&str],
) -> (std::path::PathBuf, String) {
    let dir = scratch(&format!("clean-{program}-{}", mpi.name()));
    let output = run_traced_output(mpi, ranks, program, args, &dir, &["--mode", "off"]);
    let output = check(output, &format!("traced run of {program} ({})", mpi.name()));
    (dir, String::from_utf8_lossy(&output.stdout).into_owned())
}

fn bundled_programs_have_no_violations(mpi: Mpi) {
    let _guard = mpi_lock();
    let mut failures = Vec::new();
    let (mut split, mut unsplit) = (0, Vec::new());
    for &(program, ranks, args) in PROGRAMS {
        let dir = record(mpi, program, ranks, args);
        let s = reconstruct_json(&dir, &dir.with_extension("out"), &[]);
        let hb = &s["hb"];
        let before = &hb["before"];
        let n = |v: &serde_json::Value| v.as_u64().unwrap();
        let unmatched = n(&before["unmatched_sends"]) + n(&before["unmatched_receives"]);
        let collective_recorded = n(&before["recorded_collective_violations"]);
        let message_recorded = n(&before["recorded_message_violations"]);
        if collective_recorded != 0
            || message_recorded != 0
            || n(&hb["violations_before"]) != 0
            || unmatched != 0
        {
            failures.push(format!("{program}: {hb}"));
        }
        // The replay moves every wait: its output must still be causal, match as the input did,
        // and be no longer than the run as measured plus what it learned could not shrink.
        let r = reconstruct_json(&dir, &dir.with_extension("replay"), &["--model", "replay"]);
        let rhb = &r["hb"];
        let after = &rhb["after"];
        let unmatched_after = n(&after["unmatched_sends"]) + n(&after["unmatched_receives"]);
        let span = r["reconstructed_s"].as_f64().unwrap();
        if n(&rhb["violations_after"]) != 0
            || unmatched_after != unmatched
            || n(&after["messages"]) != n(&before["messages"])
            || span.is_nan()
            || span <= 0.0
        {
            failures.push(format!("{program} replayed (span {span} s): {rhb}"));
        }
        match split_matching_differs(&dir) {
            Ok(Some(why)) => failures.push(format!("{program} split over processes: {why}")),
            Ok(None) => split += 1,
            Err(reason) => unsplit.push(format!("{program} ({reason})")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Those not split say why; the rest must be most of the programs.
    eprintln!("matching not split: {}", unsplit.join(", "));
    assert!(split >= 10, "only {split} programs split: {unsplit:?}");
}

/// Matching a recorded trace split over 2 and 3 processes against one pass over every lane
/// (`reconstruct::hb::split_differs`): what differs, if anything; `Err` when the trace cannot be
/// split, with the reason.
fn split_matching_differs(dir: &Path) -> Result<Option<String>, String> {
    use reconstruct::hb::{self, HbContext};
    use trace::lanes::{LaneId, LaneReader, OpenRank};
    let trace = trace::Trace::open(dir).unwrap();
    let metas = trace::scan::scan(&trace).unwrap();
    if let Some(why) = HbContext::unsplittable(&metas) {
        return Err(why);
    }
    let world = metas.iter().map(|m| m.rank + 1).max().unwrap_or(0);
    let ctx = HbContext::new(&metas, world);
    let mut lanes = Vec::new();
    for (files, meta) in trace.ranks.iter().zip(&metas) {
        let open = OpenRank::open(files).unwrap();
        for &stream in &meta.streams {
            let id = LaneId {
                rank: meta.rank,
                stream,
            };
            lanes.push((id, LaneReader::new(&open, stream).collect::<Vec<_>>()));
        }
    }
    Ok([2, 3]
        .into_iter()
        .find_map(|processes| hb::split_differs(&ctx, &lanes, processes)))
}

/// tests/programs/matching.c on 4 ranks, 20 iterations: (9 + 2L)·P·N messages (L = 1 where the
/// MPI has the large-count functions), every family matched to the send the program meant, the
/// intercommunicator's and its copy's to the counterpart in the other half; and 10·P·N + P
/// collective exits, 6·P·N of them on the intercommunicators.
fn every_matching_family_pairs_as_the_program_says(mpi: Mpi) {
    let _guard = mpi_lock();
    let (dir, stdout) = record_output(mpi, "matching", 4, &["--iterations", "20"]);
    let large = stdout.contains("large=1");
    assert!(large || stdout.contains("large=0"), "{stdout}");
    let trace = trace::Trace::open(&dir).unwrap();
    let (matches, report) = reconstruct::matches::matched_messages(&trace).unwrap();
    let families = if large { 11 } else { 9 };
    assert_eq!(report.messages, families * 4 * 20, "{report:?}");
    assert_eq!(report.unmatched_sends + report.unmatched_receives, 0);
    assert_eq!(report.violations(), 0, "{report:?}");
    assert_eq!(report.recorded_violations(), 0, "{report:?}");
    assert_eq!(report.collective_exits, 10 * 4 * 20 + 4, "{report:?}");
    assert_eq!(report.waits_on_absent_ranks, 0, "{report:?}");
    let ring = |m: &reconstruct::hb::MessageMatch, step: u32| m.dest == (m.source + step) % 4;
    for m in &matches {
        let ok = match m.tag {
            // To the right neighbour (persistent, Mprobe, Ssend, Bsend, Rsend, Send_c).
            11 | 12 | 14 | 15 | 16 | 19 => ring(m, 1),
            // Isend to the left, taken by Improbe + Imrecv; Isend_c to the left.
            13 | 20 => ring(m, 3),
            // Even world rank 2k with odd 2k + 1, both ways, on the intercommunicator and on
            // its copy.
            17 | 18 => m.dest == m.source ^ 1,
            _ => false,
        };
        assert!(ok, "{m:?}");
    }
    for tag in [11, 12, 13, 14, 15, 16, 17, 18, 19, 20] {
        let count = matches.iter().filter(|m| m.tag == tag).count();
        let per_iteration = match tag {
            11 => 8,
            19 | 20 if !large => 0,
            _ => 4,
        };
        assert_eq!(count, per_iteration * 20, "tag {tag}");
    }
}

/// The demo's workload (scripts/demo.sh): an offload run that suspends and flushes. As recorded
/// it has no violation; a suspension one rank left late (its overshoot) can make some once the
/// suspensions are removed, and `--hb` must leave none.
fn demo_workload_is_consistent(mpi: Mpi) {
    let _guard = mpi_lock();
    let dir = scratch(&format!("clean-demo-{}", mpi.name()));
    let mut cmd = Command::new(evenflush_bin());
    cmd.arg("run")
        .arg("--out")
        .arg(&dir)
        .args(["--mode", "dynamic", "--threshold", "1MiB", "--"]);
    cmd.args(mpi.launch(2))
        .arg(common::apps(mpi).join("iterative"));
    cmd.args([
        "--iterations",
        "300",
        "--work-units",
        "320000",
        "--mem",
        "0",
        "--record-bytes",
        "131072",
    ]);
    let output = common::output_with_timeout(
        common::mpi_env(&mut cmd),
        common::JOB_TIMEOUT,
        "demo workload",
    );
    check(output, "demo workload");
    let s = reconstruct_json(&dir, &dir.with_extension("out"), &["--hb"]);
    let hb = &s["hb"];
    assert!(s["suspensions"]["flushes"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(hb["violations_recorded"], 0, "{hb}");
    assert_eq!(hb["violations_after"], 0, "{hb}");
    assert_eq!(hb["before"]["collective_exits"], 2 * 303, "{hb}");
}

/// tests/programs/pscw.c on 4 ranks, 10 iterations: 3·P·N = 120 epoch pairs (a target's
/// `Win_wait` with one origin of its post group's `Win_complete`), every one matched, none
/// violated as recorded; the program's own Barriers and Reduces are its only collectives.
fn every_pscw_epoch_pairs_with_its_origins(mpi: Mpi) {
    let _guard = mpi_lock();
    let (dir, stdout) = record_output(mpi, "pscw", 4, &["--iterations", "10"]);
    assert!(stdout.contains("errors=0"), "{stdout}");
    let s = reconstruct_json(&dir, &dir.with_extension("out"), &[]);
    let hb = &s["hb"];
    let before = &hb["before"];
    assert_eq!(before["rma_epochs"], 3 * 4 * 10, "{hb}");
    assert_eq!(before["recorded_epoch_violations"], 0, "{hb}");
    assert_eq!(hb["violations_recorded"], 0, "{hb}");
    assert_eq!(hb["violations_before"], 0, "{hb}");
    assert_eq!(before["unmatched_sends"], 0, "{hb}");
    assert_eq!(before["unmatched_receives"], 0, "{hb}");
    assert_eq!(before["waits_on_absent_ranks"], 0, "{hb}");
    assert_eq!(before["messages"], 0, "epochs are no messages: {hb}");
}

/// tests/programs/commorder.c on 4 ranks, 10 iterations: communicators with the same members made
/// in orders that differ across ranks (Comm_idup on three parents, opposite orders on even and odd
/// ranks), a split returning MPI_COMM_NULL on one rank before a dup of the same parent, and
/// Comm_create_group on each half, the halves of one split. Identified by parent and creation
/// index, every one of the 7·P·N messages pairs and the 9·P·N + P collective exits match with no
/// violation; by members and creation order (traces before chunk version 8) the idups cross.
fn communicators_made_in_different_orders_match(mpi: Mpi) {
    let _guard = mpi_lock();
    let (dir, stdout) = record_output(mpi, "commorder", 4, &["--iterations", "10"]);
    assert!(stdout.contains("commorder: errors=0"), "{stdout}");
    let s = reconstruct_json(&dir, &dir.with_extension("out"), &["--hb"]);
    let hb = &s["hb"];
    let before = &hb["before"];
    assert_eq!(before["messages"], 7 * 4 * 10, "{hb}");
    assert_eq!(before["collective_exits"], 9 * 4 * 10 + 4, "{hb}");
    assert_eq!(before["unmatched_sends"], 0, "{hb}");
    assert_eq!(before["unmatched_receives"], 0, "{hb}");
    assert_eq!(before["recorded_collective_violations"], 0, "{hb}");
    assert_eq!(before["recorded_message_violations"], 0, "{hb}");
    assert_eq!(hb["violations_before"], 0, "{hb}");
    assert_eq!(hb["violations_after"], 0, "{hb}");
}

for_both_mpis!(
    bundled_programs_have_no_violations,
    communicators_made_in_different_orders_match,
    every_matching_family_pairs_as_the_program_says,
    demo_workload_is_consistent,
    every_pscw_epoch_pairs_with_its_origins
);
