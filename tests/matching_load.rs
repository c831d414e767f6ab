//! Matching must not depend on the machine's load. A message-heavy program is traced on a quiet
//! machine and again while CPU hogs (as many spinning threads as cores, plus one) compete with
//! its ranks, under both MPIs; both traces must pair exactly the same messages, every family to
//! the partner the program meant, with nothing unmatched and no violation as recorded.
//!
//! Under load, ranks are descheduled inside MPI calls and inside the recorder, so recorded times
//! stretch and interleave differently; a matcher that leaned on timestamps beyond MPI's ordering
//! rules (non-overtaking per sender, communicator and tag) would pair differently or leave
//! messages unmatched here.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Mpi, check, mpi_lock, run_traced_output, scratch};

const ITERATIONS: &str = "20";

/// Spinning threads that stop (and are joined) when dropped, also when the test fails.
struct CpuHog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl CpuHog {
    fn start() -> CpuHog {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // Bounded even if the drop never came: no hog outlives a few minutes.
        let deadline = Instant::now() + Duration::from_secs(300);
        let threads = (0..=cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut spins = 0u64;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        for _ in 0..10_000 {
                            spins = std::hint::black_box(spins.wrapping_add(1));
                        }
                    }
                    spins
                })
            })
            .collect();
        CpuHog { stop, threads }
    }

    /// How much the hogs spun: proof that they ran alongside.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.drain(..).map(|t| t.join().unwrap()).sum()
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Messages matched in one trace of `matching`, per (source, dest, tag), and the report.
fn matched(
    mpi: Mpi,
    label: &str,
) -> (
    BTreeMap<(u32, u32, i32), u64>,
    reconstruct::hb::HbReport,
    bool,
) {
    let dir = scratch(&format!("load-matching-{label}-{}", mpi.name()));
    let output = run_traced_output(
        mpi,
        4,
        "matching",
        &["--iterations", ITERATIONS],
        &dir,
        &["--mode", "off"],
    );
    let output = check(output, &format!("matching ({label}, {})", mpi.name()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let large = stdout.contains("large=1");
    assert!(large || stdout.contains("large=0"), "{stdout}");
    let trace = trace::Trace::open(&dir).unwrap();
    let (matches, report) = reconstruct::matches::matched_messages(&trace).unwrap();
    let mut pairs = BTreeMap::new();
    for m in &matches {
        *pairs.entry((m.source, m.dest, m.tag)).or_insert(0u64) += 1;
    }
    (pairs, report, large)
}

fn matching_does_not_depend_on_the_load(mpi: Mpi) {
    let _guard = mpi_lock();
    let (quiet, quiet_report, large) = matched(mpi, "quiet");
    let hog = CpuHog::start();
    let began = Instant::now();
    let (loaded, loaded_report, _) = matched(mpi, "loaded");
    let took = began.elapsed();
    let spins = hog.stop();
    assert!(spins > 0, "the CPU hogs did not run");
    let iterations: u64 = ITERATIONS.parse().unwrap();
    let families = if large { 11 } else { 9 };
    for (label, report) in [("quiet", &quiet_report), ("loaded", &loaded_report)] {
        assert_eq!(
            report.messages,
            families * 4 * iterations,
            "{label}: {report:?}"
        );
        assert_eq!(
            report.unmatched_sends + report.unmatched_receives,
            0,
            "{label}: {report:?}"
        );
        assert_eq!(report.recorded_violations(), 0, "{label}: {report:?}");
        assert_eq!(report.waits_on_absent_ranks, 0, "{label}: {report:?}");
        assert_eq!(
            report.collective_exits,
            10 * 4 * iterations + 4,
            "{label}: {report:?}"
        );
    }
    assert_eq!(
        quiet,
        loaded,
        "{}: pairs per (source, dest, tag) differ between a quiet and a loaded run (loaded run took {took:?})",
        mpi.name()
    );
}

for_both_mpis!(matching_does_not_depend_on_the_load);
