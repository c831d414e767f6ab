//! Regression guard of the recorder's cost per call, under Open MPI and MPICH: the cheap-calls
//! program of `benches/recorder_cost/` runs untraced and traced on one rank, and each call kind's
//! added cost per call must stay within [`LIMIT`] times its recorded baseline; and the cost the
//! recorder stores must match the cost measured from outside ([`DRIFT_CHEAP`], [`DRIFT_POOLED`],
//! [`DRIFT`]).
//!
//! A 2-core machine shared with builds is far too noisy for absolute nanoseconds, so every figure
//! is a ratio of two costs measured in the same runs, where the machine's speed cancels: each
//! kind's added cost against the added cost of the cheapest call (Comm_rank), and that one against
//! the untraced Isend/Irecv/Wait round trip (library work the recorder cannot change). Within a
//! run the kinds take turns and report their fastest round (preemptions and trace-block page
//! faults land in single rounds); across runs the median ratio counts. Baselines were measured on
//! the development VM with the machine busy (load ~5 on 2 cores): the medians of seven runs
//! varied by about ±25 %, single runs by up to 2x, so a real doubling (2x the baseline) fails
//! while the noise (1.3x at most in the median) passes.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Mpi, mpi_lock, output_with_timeout, scratch};

/// A ratio fails when its median exceeds this multiple of its baseline.
const LIMIT: f64 = 1.7;
/// The cost the recorder stores per call (`MpiCall::cost`, what reconstruction removes as DP) must
/// be the cost it adds as measured from outside (fastest round traced minus untraced, same runs).
/// Two pooled checks (the sums of both per run, median over the runs), and one per kind:
/// - the cheap kinds, `Comm_rank` and the barrier on `MPI_COMM_SELF`, within [`DRIFT_CHEAP`]
///   either way. Their MPI call is a few instructions, so the sampled window holds the recorder's
///   work and little else, and the ratio moves little between VMs (1.06-1.14 on the development
///   VM, both MPIs; 1.16 on the CI VM, Open MPI; 1.13 on an AMD EPYC VM, both MPIs, where it was
///   0.71-0.76 while the recorder took a clock read's cost from two back-to-back reads, 1 tick
///   there against ~25 for a read). With every estimate charged 1.5x on purpose it was 1.65
///   (Open MPI) and 1.69 (MPICH) on the development VM, and fails;
/// - all kinds together within [`DRIFT_POOLED`]. Looser, because the window of a call with real
///   MPI work (`Isend`/`Irecv`/`Wait`, `Waitall`, the sub-communicator `Allreduce`) also holds
///   some of that work's tail, by an amount that depends on the host: pooled 0.93-1.12 on the
///   development VM, 1.28-1.37 in every run on the CI VM of 2026-11-27 (whose stored figures
///   matched the development VM's within 5 %; its outside costs of those kinds were 20-30 %
///   lower). The sampler that always sampled the same call of a 4-call loop stored 1.8-2.0x,
///   and the 1.5x estimates above gave 1.51-1.58;
/// - each kind on its own within [`DRIFT`]: looser again, because the sub-communicator
///   `Allreduce` is stored 1.06-1.44x of its measured cost on the development VM (the wrapper's
///   work overlaps with the tail of the MPI call, which the sampled window counts and the program
///   does not pay; paper-notes/recorder.md), but a kind that the sampler gets badly wrong still
///   fails (charging 1.5x the estimates put the `Allreduce` kind at 1.9-2.0).
const DRIFT_POOLED: f64 = 1.5;
/// See [`DRIFT_POOLED`].
const DRIFT_CHEAP: f64 = 1.3;
/// The kinds [`DRIFT_CHEAP`] pools.
const CHEAP_KINDS: [&str; 2] = ["rank", "barrier"];
/// See [`DRIFT_POOLED`].
const DRIFT: f64 = 1.6;
/// The call kinds of the cheap-calls program.
const KINDS: [&str; 5] = ["rank", "barrier", "isend", "waitall", "subcomm"];
/// Runs of each configuration; the median ratio counts.
const RUNS: usize = 7;
/// MPI calls of each kind per run (10 rounds): about 0.1 s of traced calls per kind.
const CALLS: &str = "200000";

/// Baseline ratios (see the module doc): added cost of a kind / added cost of Comm_rank, and
/// Comm_rank's added cost / untraced Isend+Irecv+Wait per call.
fn baseline(mpi: Mpi) -> BTreeMap<&'static str, f64> {
    let v = match mpi {
        Mpi::OpenMpi => [2.9, 2.5, 4.2, 3.1, 1.0],
        Mpi::Mpich => [3.0, 2.4, 4.25, 3.3, 1.66],
    };
    ["barrier", "isend", "waitall", "subcomm", "rank/bare isend"]
        .into_iter()
        .zip(v)
        .collect()
}

fn build(mpi: Mpi) -> PathBuf {
    let dir = scratch(&format!("recorder-cost-{}", mpi.name()));
    let exe = dir.join("cheap_calls");
    let cc = match mpi {
        Mpi::OpenMpi => "mpicc",
        Mpi::Mpich => "mpicc.mpich",
    };
    let out = Command::new(cc)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(common::repo_root().join("benches/recorder_cost/cheap_calls.c"))
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// One run of `cheap_calls all`: each kind's ns per call in its fastest round, and that round's
/// index.
struct Run {
    per_call: BTreeMap<String, f64>,
    fastest_round: BTreeMap<String, usize>,
}

/// One run, traced into `trace` or untraced. A traced run must have recorded every call the
/// program made (see [`assert_recorded`]): without the preload library, the ratios would compare
/// noise with noise.
fn run(mpi: Mpi, exe: &Path, trace: Option<&Path>) -> Run {
    let mut cmd = Command::new(exe);
    cmd.args([CALLS, "all"]);
    if let Some(dir) = trace {
        let _ = std::fs::remove_dir_all(dir);
        let lib = common::evenflush_bin()
            .parent()
            .unwrap()
            .join(format!("libevenflush_{}.so", mpi.name()));
        cmd.env("LD_PRELOAD", lib)
            .env("EVENFLUSH_OUT", dir)
            .env("EVENFLUSH_MODE", "off");
    }
    let out = output_with_timeout(
        common::mpi_env(&mut cmd),
        Duration::from_secs(60),
        "cheap_calls",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let column = |i: usize| -> BTreeMap<String, &str> {
        text.lines()
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(w.len(), 4, "{text}");
                (w[0].to_string(), w[i])
            })
            .collect()
    };
    let per_call: BTreeMap<String, f64> = column(2)
        .into_iter()
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    let fastest_round: BTreeMap<String, usize> = column(3)
        .into_iter()
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    assert_eq!(per_call.len(), 5, "{text}");
    if let Some(dir) = trace {
        let made: BTreeMap<String, u64> = text
            .lines()
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w[0].to_string(), w[1].parse().unwrap())
            })
            .collect();
        assert_recorded(mpi, dir, &made);
    }
    Run {
        per_call,
        fastest_round,
    }
}

/// The trace of a traced run holds exactly the calls `cheap_calls all` made (`made`: calls per
/// kind, as it printed them), so the preload library was loaded and recorded every one.
fn assert_recorded(mpi: Mpi, dir: &Path, made: &BTreeMap<String, u64>) {
    let info = common::info_json(dir);
    let what = format!("{} traced run ({})", mpi.name(), dir.display());
    assert_eq!(info["ranks"], 1, "{what}: no trace of the one rank: {info}");
    assert_eq!(info["lost_events"], 0, "{what}");
    // cheap_calls.c: `isend` is Irecv + Isend + 2 Wait, `waitall` 13 Irecv + 13 Isend + Waitall;
    // besides the timed calls: 1 + 1000 (warm-up) Comm_rank, Init, Comm_split, Comm_free, Finalize.
    let (isend, waitall) = (made["isend"] / 4, made["waitall"] / 27);
    let want = [
        ("MPI_Init", 1),
        ("MPI_Comm_rank", made["rank"] + 1001),
        ("MPI_Comm_split", 1),
        ("MPI_Barrier", made["barrier"]),
        ("MPI_Irecv", isend + 13 * waitall),
        ("MPI_Isend", isend + 13 * waitall),
        ("MPI_Wait", 2 * isend),
        ("MPI_Waitall", waitall),
        ("MPI_Allreduce", made["subcomm"]),
        ("MPI_Comm_free", 1),
        ("MPI_Finalize", 1),
    ];
    let got = info["functions"].as_object().expect("info: functions");
    for (name, n) in want {
        assert_eq!(
            got.get(name).and_then(|v| v.as_u64()),
            Some(n),
            "{what}: {name}"
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: other calls recorded: {got:?}"
    );
}

/// The cost per call (ns) that the recorder stored for each kind of the cheap-calls program
/// (`MpiCall::cost`, the DP that reconstruction removes): the mean over the round the program
/// timed fastest for that kind (`fastest_round`), the one its outside cost comes from. The
/// machine's speed changes within a run: untraced `Comm_rank` took 3.4 ns in some runs and 5.4 in
/// others, and the stored cost of one traced run sat near 160 ticks in one stretch and 80 in
/// another. Comparing the median round's stored cost with the fastest round's outside cost put
/// the two in different states of the machine (a fresh VM failed the test that way, at 1.7-1.8x,
/// with the recorder unchanged). The point-to-point calls of the `isend` and `waitall` kinds are
/// told apart by the completion call that follows them.
fn stored_cost(
    trace: &Path,
    fastest_round: &BTreeMap<String, usize>,
) -> BTreeMap<&'static str, f64> {
    let parts = format::list_dir(trace).unwrap().parts();
    let part = parts.first().expect("a rank file");
    let ns_per_tick = 1e9 / part.open().unwrap().header().clock.ticks_per_sec;
    let ranks = common::read_trace(trace);
    let rank = &ranks[0];
    // (kind, total ns, calls) of each run of calls of one kind, in order.
    let mut rounds: Vec<(&'static str, f64, u64)> = Vec::new();
    let mut pending = (0.0, 0u64);
    for event in rank.all() {
        let format::Event::Call(c) = event else {
            continue;
        };
        let cost = f64::from(c.cost) * ns_per_tick;
        let (kind, total, calls) = match rank.name(c.func) {
            "MPI_Comm_rank" => ("rank", cost, 1),
            "MPI_Barrier" => ("barrier", cost, 1),
            "MPI_Allreduce" => ("subcomm", cost, 1),
            "MPI_Isend" | "MPI_Irecv" => {
                pending.0 += cost;
                pending.1 += 1;
                continue;
            }
            k @ ("MPI_Wait" | "MPI_Waitall") => {
                let kind = if k == "MPI_Wait" { "isend" } else { "waitall" };
                let (t, n) = std::mem::take(&mut pending);
                (kind, t + cost, n + 1)
            }
            _ => continue,
        };
        match rounds.last_mut() {
            Some(last) if last.0 == kind => {
                last.1 += total;
                last.2 += calls;
            }
            _ => rounds.push((kind, total, calls)),
        }
    }
    KINDS
        .into_iter()
        .map(|kind| {
            let means: Vec<f64> = rounds
                .iter()
                // The warm-up calls before the rounds are a short run of their own.
                .filter(|r| r.0 == kind && r.2 >= 1000)
                .map(|r| r.1 / r.2 as f64)
                .collect();
            let round = fastest_round[kind];
            assert!(
                means.len() > round,
                "{kind}: {} rounds in the trace, the program's fastest was round {round}",
                means.len()
            );
            (kind, means[round])
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn recorder_cost(mpi: Mpi) {
    if cfg!(debug_assertions) {
        common::skip_or_fail(
            "recorder-cost",
            "debug build: the baselines are those of the release recorder",
        );
        return;
    }
    let _guard = mpi_lock();
    let exe = build(mpi);
    let trace = scratch(&format!("recorder-cost-{}-trace", mpi.name()));
    let mut ratios: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut drift: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut pooled = Vec::new();
    let mut pooled_cheap = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let bare = run(mpi, &exe, None).per_call;
        let traced = run(mpi, &exe, Some(&trace));
        let stored = stored_cost(&trace, &traced.fastest_round);
        let traced = traced.per_call;
        let added = |kind: &str| traced[kind] - bare[kind];
        // A floor of 1 ns keeps a reference lost in noise from dividing by ~0.
        let reference = added("rank").max(1.0);
        for kind in ["barrier", "isend", "waitall", "subcomm"] {
            ratios
                .entry(kind)
                .or_default()
                .push(added(kind) / reference);
        }
        ratios
            .entry("rank/bare isend")
            .or_default()
            .push(reference / bare["isend"]);
        runs.push((bare, traced, stored));
    }
    // The stored cost against the cost added, both from the traced run's fastest round: the
    // untraced cost it is added to is the fastest untraced run's, since a whole process can run
    // in the machine's slower state (untraced `Isend`+`Irecv`+`Wait` took 27 ns per call in some
    // runs and 51 in others), and a slow untraced run beside a fast traced round hid half the
    // recorder's cost.
    let fastest_bare = |kind: &str| {
        runs.iter()
            .map(|(bare, _, _)| bare[kind])
            .fold(f64::INFINITY, f64::min)
    };
    for (_, traced, stored) in &runs {
        let (mut stored_sum, mut added_sum) = (0.0, 0.0);
        let (mut stored_cheap, mut added_cheap) = (0.0, 0.0);
        for kind in KINDS {
            // A floor of 1 ns, as above, for a cost lost in noise.
            let added = (traced[kind] - fastest_bare(kind)).max(1.0);
            eprintln!(
                "{} {kind}: stored {:.1} ns, added {added:.1} ns per call",
                mpi.name(),
                stored[kind]
            );
            drift.entry(kind).or_default().push(stored[kind] / added);
            stored_sum += stored[kind];
            added_sum += added;
            if CHEAP_KINDS.contains(&kind) {
                stored_cheap += stored[kind];
                added_cheap += added;
            }
        }
        pooled.push(stored_sum / added_sum);
        pooled_cheap.push(stored_cheap / added_cheap);
    }
    let mut failures = Vec::new();
    for (kind, base) in baseline(mpi) {
        let got = median(ratios[kind].clone());
        eprintln!(
            "{} {kind}: median ratio {got:.2} (baseline {base}, runs {:?})",
            mpi.name(),
            ratios[kind]
        );
        if got > LIMIT * base {
            failures.push(format!("{kind}: {got:.2} > {LIMIT} x {base}"));
        }
    }
    for (what, runs, bound) in [
        ("all kinds", &pooled, DRIFT_POOLED),
        ("the cheap kinds", &pooled_cheap, DRIFT_CHEAP),
    ] {
        let got = median(runs.clone());
        eprintln!(
            "{} {what}: stored cost / measured added cost, median {got:.2} (runs {runs:?})",
            mpi.name()
        );
        if !(1.0 / bound..=bound).contains(&got) {
            failures.push(format!(
                "{what}: the stored cost is {got:.2} x the measured added cost (allowed 1/{bound} .. {bound})"
            ));
        }
    }
    for kind in KINDS {
        let got = median(drift[kind].clone());
        eprintln!(
            "{} {kind}: stored cost / measured added cost, median {got:.2} (runs {:?})",
            mpi.name(),
            drift[kind]
        );
        if !(1.0 / DRIFT..=DRIFT).contains(&got) {
            failures.push(format!(
                "{kind}: the stored cost is {got:.2} x the measured added cost (allowed 1/{DRIFT} .. {DRIFT})"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}: recorder cost regressed: {failures:?}",
        mpi.name()
    );
}

for_both_mpis!(recorder_cost);
