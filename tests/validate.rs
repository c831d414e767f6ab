//! `evenflush validate` on a real program under both MPIs: untraced and traced runs interleaved,
//! each traced run reconstructed, the error against the untraced time reported with its noise
//! floor.

#[macro_use]
mod common;

use std::process::Command;

use common::{
    JOB_TIMEOUT, Mpi, apps, evenflush_bin, mpi_env, mpi_lock, output_with_timeout, scratch,
};

/// Fixed work per iteration (register-only), so that every run does the same computation; 256 KiB
/// of user records per iteration and S = 128 KiB make 28 flushes in the 60 iterations, so that the
/// traced run is far from the untraced one and a reconstruction that removed nothing could not
/// pass the bound below. (With 64 KiB, chunk version 9's faster flushes of this constant payload
/// left the traced run only +3 to +4 % off, inside the bound.)
///
/// The ranks are bound to their cores (`launch_bound`), as a batch system places them. Unbound,
/// MPICH's ranks sleep through the pauses, which come out 4-6x longer, and the work after them
/// ran slower in a way neither model sees: at one flush per 14 ms, the reconstruction came out
/// a median +3.0 % slow (CI, 2026-11-28: +7.3 %, interval +1.2 to +8.7 %). Bound, the slowdown is
/// smaller but still there: median +1 %, up to +6.0 % (Open MPI) and +3.5 % (MPICH, a CI
/// rehearsal) on quiet runs; that is what [`MIN_BOUND`] leaves room for (paper-notes/fidelity.md).
/// Bound pauses are short, so this guard catches a reconstruction that keeps the pauses (traced
/// +11 % or more), not one that keeps a fifth of each (+2.6 to +6.4 %): the exact removal is
/// checked by `trace`'s clock tests and `reconstruct_mapping`.
const ITERATIONS: u32 = 60;
const WORK_UNITS: u64 = 400_000;
const REPS: usize = 5;
/// The least error bound (the bound is this or twice the noise floor, whichever is larger): the
/// unseen slowdown after each of the 28 writes, which no model removes, is up to +6 % here.
const MIN_BOUND: f64 = 0.06;

fn validates_a_real_program(mpi: Mpi) {
    let _guard = mpi_lock();
    // The experiment can come out inconclusive on a noisy machine: the traced run itself inside
    // the bound (the pauses add 11-24 % to this run, and 6 % of noise makes the bound 12 %).
    // Then it says nothing about the reconstruction either way, so it is run once more; a
    // second inconclusive run fails, with both attempts' figures.
    let mut inconclusive = Vec::new();
    for _ in 0..2 {
        match validate_once(mpi) {
            Ok(()) => return,
            Err(why) => inconclusive.push(why),
        }
    }
    panic!("{}", inconclusive.join("\n"));
}

/// One `validate` run and its checks; `Err` only when the traced run was too close to the
/// untraced one for the bound to tell a reconstruction from none. Every other failure panics.
fn validate_once(mpi: Mpi) -> Result<(), String> {
    let work = scratch(&format!("validate-{}", mpi.name()));
    let png = work.with_extension("png");
    let _ = std::fs::remove_file(&png);
    let mut cmd = Command::new(evenflush_bin());
    cmd.args(["validate", "--reps", &REPS.to_string(), "--json", "--work"])
        .arg(&work)
        .arg("--png")
        .arg(&png)
        .args(["--threshold", "128KiB", "--decision-interval", "2ms", "--"])
        .args(mpi.launch_bound(2))
        .arg(apps(mpi).join("iterative"))
        .args([
            "--iterations",
            &ITERATIONS.to_string(),
            "--work-units",
            &WORK_UNITS.to_string(),
            "--mem",
            "0",
            "--record-bytes",
            "262144",
            "--records",
            "1",
        ]);
    let v = validate_json(mpi, cmd);
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), REPS);
    // The probe read every rank's affinity: bound, one CPU each.
    assert_eq!(v["cpus_per_rank"].as_u64(), Some(1), "{v}");
    // The untraced span comes from the clock probe, not from the trace: it covers at least the
    // program's fixed work (60 iterations of 1.8 M units, ~2.2 ns each here: ~0.24 s).
    for p in pairs {
        let u = p["untraced_s"].as_f64().unwrap();
        assert!(u > 0.05 && u < 120.0, "untraced span {u} s: {p}");
        assert!(
            p["flushes"].as_u64().unwrap() >= 2,
            "the traced run flushed: {p}"
        );
        // The repair only moves times later, so it can only lengthen T(G).
        let (plain, causal) = (
            p["reconstructed_s"].as_f64().unwrap(),
            p["reconstructed_causal_s"].as_f64().unwrap(),
        );
        assert!(
            causal >= plain - 1e-6,
            "repaired T(G) {causal} < {plain}: {p}"
        );
    }
    // The fidelity guard: both models land within max(MIN_BOUND, twice the noise floor measured in
    // these very runs) of the untraced time, while the traced run itself is beyond that bound,
    // so a reconstruction that lost DP' (the pauses) fails. The noise floor is the untraced runs'
    // spread only; the reconstructed runs have their own, larger one (each traced run also
    // carries the aftermath of its writes, which lands after the pause: paper-notes/fidelity.md,
    // "The MPICH guard's residual"). So an error past the bound still passes when validate's own
    // verdict, the 95 % bootstrap interval over both sets of runs, holds 0, and the error is
    // within twice the bound; a reconstruction that removed too little or too much is off by far
    // more than that. The real figures, with more pairs, are in paper-notes/fidelity.md.
    let noise = v["untraced_spread"].as_f64().unwrap();
    assert!(noise >= 0.0);
    let bound = f64::max(MIN_BOUND, 2.0 * noise);
    let error = |key: &str| v[key]["error"].as_f64().unwrap();
    let interval_holds_zero = |key: &str| v[key]["within_noise"].as_bool().unwrap();
    if error("traced") <= bound {
        return Err(format!(
            "the traced run is only {:+.1} % off the untraced one, within the bound {:.1} %: the \
             test cannot tell a reconstruction from none: {v}",
            100.0 * error("traced"),
            100.0 * bound
        ));
    }
    for model in ["reconstructed", "reconstructed_replay"] {
        let e = error(model).abs();
        assert!(
            e <= bound || (interval_holds_zero(model) && e <= 2.0 * bound),
            "{model}: T(G) {:+.2} % off the untraced time, beyond max({:.0} %, 2 x noise {:.2} %) \
             (or, with its 95 % interval holding 0, beyond twice that): {v}",
            100.0 * error(model),
            100.0 * MIN_BOUND,
            100.0 * noise
        );
    }
    // The picture: a PNG of the size drawn, big enough to hold more than its axes.
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert_eq!(png_size(&bytes), Some((1000, 600)), "{}", png.display());
    assert!(bytes.len() > 10_000, "{} bytes only", bytes.len());
    // The work directory keeps only the probe (no --keep).
    let left: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("traced-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    Ok(())
}

/// Polls per rank in the loop that computes between them: `--rounds` x `--overlap` below.
const OVERLAP_ROUNDS: u64 = 10;
const OVERLAP_POLLS: u64 = 200_000;

/// A loop that computes and polls, whose end no partner sets (`workloads/polling.c --overlap`,
/// hpcc's RandomAccess pattern): the recorder's cost between the polls lengthened it (+29 to
/// +52 % here), and a reconstruction that kept that cost, as every one did before 2026-11-28,
/// came back that much slow. That side is held to max(15 %, 2 x noise).
///
/// The other side is looser, by what the program's own work can hide of the recorder. Each poll
/// is charged its sampled cost, two clock reads included, as if it ran alone; but this loop's work
/// is one dependent chain of multiplies, and the core runs the recorder beside it. Two `rdtsc`
/// that take ~20 ns alone add under 2 ns to an iteration of this work (measured, 2026-11-29):
/// with 2 M polls per rank, that is up to 18 % of the span removed that the program never lost.
/// The replay inherits the rank that stored the most (paper-notes/fidelity.md). Measured since the
/// reads are charged at their own cost (2026-11-28, `cf41ba8`): subtract -4 to -8 %, replay -9 to
/// -12 % here, and -15.7 / -17.4 % in one CI run, which failed the symmetric bound. So a model may
/// come out faster than the untraced run by the bound plus the clock reads' share that
/// `validate` reports (from the read's cost each rank file records), which must agree with the
/// share this test works out itself from a read it times. It still fails a reconstruction that
/// keeps the cost (+44 to +49 %) on both MPIs, and on Open MPI one that removes it twice (-42 %;
/// MPICH's loop then lies within the looser side).
///
/// The slow side is 25 %, not 15 %, since a machine of this kind on which the recorder charges a
/// poll less than it adds (2026-11-29, Open MPI: 57 ns added, 42 ns charged, against 52-69 added
/// and 61-77 charged on the machines before): the models came out +14 to +18 % there, and 5 of 6
/// runs failed a 15 % bound. A reconstruction that keeps the cost still fails the 25 % on both
/// MPIs there (checked; paper-notes/fidelity.md, "a poll charged less than it adds").
fn validates_a_loop_that_polls_while_it_computes(mpi: Mpi) {
    let _guard = mpi_lock();
    let work = scratch(&format!("validate-overlap-{}", mpi.name()));
    let mut cmd = Command::new(evenflush_bin());
    cmd.args(["validate", "--reps", &REPS.to_string(), "--json", "--work"])
        .arg(&work)
        .arg("--")
        .args(mpi.launch(2))
        .arg(apps(mpi).join("polling"))
        .args(["--rounds", &OVERLAP_ROUNDS.to_string(), "--spin", "0"])
        .args([
            "--overlap",
            &OVERLAP_POLLS.to_string(),
            "--overlap-work",
            "60",
        ]);
    let v = validate_json(mpi, cmd);
    // Launched unbound: MPICH's launcher binds nothing, so the probe sees every CPU (and
    // `validate` says so); Open MPI binds 2 ranks to cores by default.
    let cpus = v["cpus_per_rank"].as_u64().unwrap();
    match mpi {
        Mpi::Mpich if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) => {
            assert!(cpus > 1, "{v}")
        }
        Mpi::OpenMpi => assert_eq!(cpus, 1, "{v}"),
        _ => {}
    }
    let noise = v["untraced_spread"].as_f64().unwrap();
    let bound = f64::max(0.15, 2.0 * noise);
    let slow_bound = f64::max(0.25, 2.0 * noise);
    let untraced_s = v["untraced_median_s"].as_f64().unwrap();
    let reads_share = v["reads_share"].as_f64().unwrap();
    let read_s = clock_read_s();
    let expected_share = (2 * OVERLAP_ROUNDS * OVERLAP_POLLS) as f64 * read_s / untraced_s;
    assert!(
        (0.6 * expected_share..=1.6 * expected_share).contains(&reads_share),
        "validate reports the clock reads at {:.2} % of the untraced time; two reads per poll \
         at {:.2} ns each make {:.2} %: {v}",
        100.0 * reads_share,
        1e9 * read_s,
        100.0 * expected_share
    );
    let error = |key: &str| v[key]["error"].as_f64().unwrap();
    assert!(
        error("traced") > slow_bound,
        "the traced run is only {:+.1} % off the untraced one, within the bound {:.1} %: the \
         recorder's cost between polls is too small here to test its removal: {v}",
        100.0 * error("traced"),
        100.0 * slow_bound
    );
    for model in ["reconstructed", "reconstructed_replay"] {
        let e = error(model);
        assert!(
            -(bound + reads_share) <= e && e <= slow_bound,
            "{model}: T(G) {:+.2} % off the untraced time, outside [-{:.1} %, +{:.1} %] (above: \
             max(25 %, 2 x noise {:.2} %); below: max(15 %, 2 x noise) and the clock reads' share \
             of the span, {:.1} %): {v}",
            100.0 * e,
            100.0 * (bound + reads_share),
            100.0 * slow_bound,
            100.0 * noise,
            100.0 * reads_share
        );
    }
}

/// What one read of the recorder's clock takes on its own, in seconds: the fastest of five runs
/// of 10^5 reads. The recorder reads the TSC where it is invariant, as on this kind of machine;
/// where it reads `CLOCK_MONOTONIC` instead, which costs more, this figure is low and the bound
/// it sets only tighter.
fn clock_read_s() -> f64 {
    const READS: u32 = 100_000;
    (0..5)
        .map(|_| {
            let started = std::time::Instant::now();
            for _ in 0..READS {
                std::hint::black_box(read_clock());
            }
            started.elapsed().as_secs_f64() / f64::from(READS)
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(target_arch = "x86_64")]
fn read_clock() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64; it only reads the time-stamp counter, as the
    // recorder's clock does (recorder/src/clock.rs).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// Runs an `evenflush validate --json` command to its end and reads its report.
fn validate_json(mpi: Mpi, mut cmd: Command) -> serde_json::Value {
    let out = output_with_timeout(
        mpi_env(&mut cmd),
        JOB_TIMEOUT * 2,
        &format!("validate ({})", mpi.name()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let signature = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    Some((be(16), be(20)))
}

fn refuses_a_single_rep(mpi: Mpi) {
    let out = Command::new(evenflush_bin())
        .args(["validate", "--reps", "1", "--"])
        .args(mpi.launch(2))
        .arg("true")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

for_both_mpis!(
    validates_a_real_program,
    validates_a_loop_that_polls_while_it_computes,
    refuses_a_single_rep
);
