//! Polls that find nothing are folded (format::PollRun): a polling loop must cost the trace a
//! handful of records, yet every call the program made must still be counted, by the trace, by
//! `info` and by `report`, before and after reconstruction. workloads/polling.c counts its
//! own polls (MPI_Test, MPI_Iprobe, MPI_Testsome), under both MPIs.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{Mpi, check, evenflush_bin, info_json, mpi_lock, read_trace, run_traced, scratch};
use format::Event;

const ROUNDS: u64 = 10;
const POLLS: [&str; 3] = ["MPI_Test", "MPI_Iprobe", "MPI_Testsome"];

/// The program's own counts: rank -> function -> polls.
fn counted(stdout: &str) -> BTreeMap<u32, BTreeMap<&'static str, u64>> {
    let mut out = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.starts_with("rank ")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.len(), 8, "{line}");
        let rank: u32 = w[1].parse().unwrap();
        let n = |i: usize| -> u64 { w[i].parse().unwrap() };
        out.insert(
            rank,
            BTreeMap::from([
                ("MPI_Test", n(3)),
                ("MPI_Iprobe", n(5)),
                ("MPI_Testsome", n(7)),
            ]),
        );
    }
    out
}

fn evenflush_json(args: &[&str], dir: &Path) -> serde_json::Value {
    let out = check(
        Command::new(evenflush_bin())
            .args(args)
            .arg(dir)
            .output()
            .unwrap(),
        &format!("evenflush {args:?}"),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every poll is in the trace, as a call or inside a run, and the runs hold most of them.
fn check_trace(dir: &Path, want: &BTreeMap<u32, BTreeMap<&'static str, u64>>, what: &str) {
    let trace = read_trace(dir);
    assert_eq!(trace.len(), want.len(), "{what}");
    for r in &trace {
        let mut runs = 0u64;
        let mut folded = 0u64;
        for e in r.all() {
            if let Event::Polls(p) = e {
                runs += 1;
                folded += p.count;
                assert!(
                    p.count >= 1 && p.start <= p.end,
                    "{what}: rank {}: {p:?}",
                    r.rank
                );
                assert!(
                    p.busy <= p.end - p.start + p.busy / p.count.max(1) + 1,
                    "{what}: rank {}: time in MPI exceeds the run: {p:?}",
                    r.rank
                );
            }
        }
        for name in POLLS {
            let calls = r.calls(name).len() as u64;
            // Each loop ends with the one poll that found something: only that one is a call.
            assert_eq!(calls, ROUNDS, "{what}: rank {} {name}", r.rank);
            assert_eq!(
                calls + r.idle_polls(name),
                want[&r.rank][name],
                "{what}: rank {} {name}: {calls} calls + {} folded",
                r.rank,
                r.idle_polls(name)
            );
        }
        // Each of the 3 loops of a round folds into one run (a buffer block boundary may start
        // another; this trace fills a few blocks at most).
        assert!(
            runs <= 3 * ROUNDS + 4,
            "{what}: rank {}: {folded} polls in {runs} runs",
            r.rank
        );
    }
}

fn polling_loops_are_folded_and_counted(mpi: Mpi) {
    let _guard = mpi_lock();
    let dir = scratch(&format!("polling-{}", mpi.name()));
    let stdout = run_traced(
        mpi,
        2,
        "polling",
        &["--rounds", &ROUNDS.to_string(), "--spin", "2000"],
        &dir,
        &[],
    );
    let want = counted(&stdout);
    assert_eq!(want.len(), 2, "{stdout}");
    let total: u64 = want.values().flat_map(|m| m.values()).sum();
    assert!(
        total > 1000,
        "the loops must poll in vain many times: {stdout}"
    );
    check_trace(&dir, &want, "recorded");

    let info = info_json(&dir);
    let report = evenflush_json(&["report", "--json"], &dir);
    for name in POLLS {
        let sum: u64 = want.values().map(|m| m[name]).sum();
        assert_eq!(info["functions"][name].as_u64(), Some(sum), "info {name}");
        let row = report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("report has no {name}"));
        assert_eq!(row["count"].as_u64(), Some(sum), "report {name}");
        assert!(row["total_s"].as_f64().unwrap() > 0.0, "report {name}");
    }
    assert!(info["folded_polls_total"].as_u64().unwrap() > 1000);

    let rebuilt = dir.with_file_name(format!("polling-{}-rebuilt", mpi.name()));
    let _ = std::fs::remove_dir_all(&rebuilt);
    check(
        Command::new(evenflush_bin())
            .args(["reconstruct", "--hb", "--out"])
            .arg(&rebuilt)
            .arg(&dir)
            .output()
            .unwrap(),
        "reconstruct",
    );
    check_trace(&rebuilt, &want, "reconstructed");
}

for_both_mpis!(polling_loops_are_folded_and_counted);
