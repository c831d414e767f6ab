//! The split decision over the in-process transport (threads as ranks, shared true clock): what a
//! collective that does not flush costs, that every rank flushes at the same collective, that the
//! stride between decision points is agreed, and that a failure on one rank turns the protocol off
//! on every rank at the same point instead of leaving the others waiting.
//!
//! Expectations come from the schedule the test itself drives (which rank passes S at which
//! collective) and from the shared true clock, not from the protocol's own records.

use offload::inproc::{self, InProcConfig, InProcRank};
use offload::{ClockScheme, Decision, FlushReport, Held, Mode, Settings, Suspender, Transport};

const MS: u64 = 1_000_000;
const THRESHOLD: u64 = 1000;

fn split(interval_ns: u64, scheme: ClockScheme) -> Settings {
    Settings {
        mode: Mode::Dynamic,
        decision: Decision::Split,
        decision_interval_ns: interval_ns,
        clock_scheme: scheme,
        ..Settings::default()
    }
}

/// What one rank saw at each collective of a run.
#[derive(Debug, Default)]
struct Seen {
    /// Collective index of every suspension.
    suspended_at: Vec<usize>,
    /// Collective index of every flush this rank's callback ran.
    flushed_at: Vec<usize>,
    /// True instants each suspension began and the instant it chose to end (the OS may wake the
    /// thread later; that delay belongs to the machine, not to the protocol).
    true_spans: Vec<(u64, u64)>,
    /// Longest time a collective without a suspension spent in the protocol, true ns.
    worst_unsuspended_ns: u64,
    strides: Vec<u64>,
    /// Calls that `next_call_may_act` announced as possibly doing more than counting: under the
    /// split decision, exactly its decision points.
    announced: Vec<usize>,
}

/// Runs `collectives` protocol calls per rank; `bytes(rank, k, flushes so far)` is what the rank
/// holds at collective k. Between collectives every rank computes for `gap_ns` (true time).
fn drive(
    rank: &mut InProcRank,
    settings: Settings,
    collectives: usize,
    gap_ns: u64,
    bytes: &dyn Fn(usize, usize, usize) -> u64,
) -> Seen {
    let mut suspender = Suspender::new(settings);
    suspender.init(rank).expect("init");
    let me = rank.rank();
    let mut seen = Seen::default();
    for k in 0..collectives {
        let deadline = rank.now() + gap_ns;
        rank.wait_until(deadline);
        let before = rank.true_now();
        let may_act = suspender.next_call_may_act();
        if may_act {
            seen.announced.push(k);
        }
        let stride_before = suspender.stride();
        let mut flushed = false;
        let mut flush = || {
            flushed = true;
            FlushReport {
                bytes_raw: 10,
                bytes_stored: 5,
            }
        };
        let done = suspender
            .suspend(
                rank,
                Held {
                    bytes: bytes(me, k, seen.flushed_at.len()),
                    threshold: THRESHOLD,
                },
                &mut flush,
            )
            .expect("transport works");
        if flushed {
            seen.flushed_at.push(k);
        }
        // A call that was not announced did nothing but count: no suspension, no new decision.
        if !may_act {
            assert!(
                !flushed && done.is_none(),
                "collective {k}: unannounced work"
            );
            assert_eq!(suspender.stride(), stride_before, "collective {k}");
        }
        match done {
            Some(done) => {
                assert!(
                    done.record.flushed,
                    "the split decision only suspends to flush"
                );
                seen.suspended_at.push(k);
                seen.true_spans.push((
                    rank.true_at(done.record.start),
                    rank.last_wait_target_true_ns(),
                ));
            }
            None => {
                let took = rank.true_now() - before;
                seen.worst_unsuspended_ns = seen.worst_unsuspended_ns.max(took);
            }
        }
        seen.strides.push(suspender.stride());
    }
    suspender.close(rank).expect("close");
    seen
}

#[test]
fn every_rank_flushes_at_the_same_collective_one_decision_after_passing_s() {
    for scheme in [ClockScheme::Tree, ClockScheme::Sequential] {
        let config = InProcConfig {
            ranks: 5,
            skew_ns: vec![0, 3_000_000, -2_000_000, -500_000_000, 7],
            latency_ns: 10_000,
            ..InProcConfig::default()
        };
        // Only rank 3 passes S, at collective 4 (and stays above until it flushes). With an
        // interval of 0 every collective is a decision point: rank 3's word goes into the
        // reduction started at collective 4, which completes at collective 5.
        let results = inproc::run(&config, |rank| {
            drive(rank, split(0, scheme), 12, 200_000, &|r, k, flushes| {
                if r == 3 && k >= 4 && flushes == 0 {
                    5000
                } else {
                    10
                }
            })
        });
        for (r, seen) in results.iter().enumerate() {
            assert_eq!(seen.suspended_at, vec![5], "rank {r} ({scheme:?})");
            assert_eq!(seen.flushed_at, vec![5], "rank {r} ({scheme:?})");
        }
        // Equalised: every rank pauses for the same Z, so the ranks keep the spacing they arrived
        // with, and the pause ends after the last rank arrived. The instants compared are the
        // ones each rank's protocol chose to resume at, not when the OS woke its thread: on two
        // loaded cores a wake-up alone can come 5 ms late (a CI run saw it), and the arrivals
        // themselves spread by up to 12 ms under load (measured), so resume instants are not
        // the same across ranks and must not be asserted to be.
        let spans: Vec<(u64, u64)> = results.iter().map(|s| s.true_spans[0]).collect();
        let pauses: Vec<u64> = spans.iter().map(|&(start, end)| end - start).collect();
        let (shortest, longest) = (*pauses.iter().min().unwrap(), *pauses.iter().max().unwrap());
        // No drift is injected, so one Z in local ns is the same length in true ns; 1 µs
        // covers the rounding of the local-to-true conversion.
        assert!(
            longest - shortest <= 1_000,
            "{scheme:?}: pauses differ: {pauses:?} ns"
        );
        let latest_arrival = spans.iter().map(|&(start, _)| start).max().unwrap();
        let first_resume = spans.iter().map(|&(_, end)| end).min().unwrap();
        assert!(
            first_resume >= latest_arrival,
            "a rank chose to resume at {first_resume}, before the last rank arrived at \
             {latest_arrival}"
        );
        // Rank 3's clock is 0.5 s behind rank 0's: with its offset left out, or applied with the
        // wrong sign, it looks 0.5 s (1 s) early, and w, hence every pause, grows by as much.
        // Under load a correct pause measured 25-100 ms here, so 400 ms separates the two.
        assert!(
            longest < 400 * MS,
            "{scheme:?}: pause of {longest} ns after arrivals {} ns apart",
            latest_arrival - spans.iter().map(|&(start, _)| start).min().unwrap()
        );
    }
}

#[test]
fn collectives_that_do_not_flush_never_suspend() {
    let config = InProcConfig {
        ranks: 4,
        latency_ns: 5_000,
        ..InProcConfig::default()
    };
    let results = inproc::run(&config, |rank| {
        drive(
            rank,
            split(0, ClockScheme::Tree),
            40,
            100_000,
            &|_, _, _| 10,
        )
    });
    for (r, seen) in results.iter().enumerate() {
        assert!(seen.suspended_at.is_empty(), "rank {r}: {seen:?}");
        assert!(seen.flushed_at.is_empty(), "rank {r}");
        // A decision point waits at most for a reduction started 100 µs earlier: far below the
        // blocking decision's allreduce + clock measurement + Z (sanity bound, shared cores).
        assert!(
            seen.worst_unsuspended_ns < 20 * MS,
            "rank {r}: {} ns",
            seen.worst_unsuspended_ns
        );
    }
}

#[test]
fn stride_is_agreed_and_grows_when_collectives_are_frequent() {
    let config = InProcConfig {
        ranks: 3,
        latency_ns: 1_000,
        ..InProcConfig::default()
    };
    // Collectives 20 µs apart and a 2 ms interval: rank 0 should ask for strides up to ~100.
    let results = inproc::run(&config, |rank| {
        drive(
            rank,
            split(2 * MS, ClockScheme::Tree),
            400,
            20_000,
            &|_, _, _| 10,
        )
    });
    for seen in &results[1..] {
        assert_eq!(
            seen.strides, results[0].strides,
            "every rank has the same stride"
        );
    }
    let largest = *results[0].strides.iter().max().unwrap();
    assert!(largest >= 8, "strides {:?}", results[0].strides);
    // Only decision points are announced, so the caller times few of the 400 calls.
    assert!(
        results[0].announced.len() < 100,
        "{} announced",
        results[0].announced.len()
    );
    // Growth is at most twofold per decision.
    for w in results[0].strides.windows(2) {
        assert!(w[1] <= 2 * w[0], "{w:?}");
    }
}

#[test]
fn a_flush_request_survives_a_long_stride() {
    let config = InProcConfig {
        ranks: 3,
        latency_ns: 1_000,
        ..InProcConfig::default()
    };
    // Rank 2 passes S at collective 150, after the stride has grown: it must still flush, at the
    // same collective on every rank, within two decision intervals.
    let results = inproc::run(&config, |rank| {
        drive(
            rank,
            split(MS, ClockScheme::Tree),
            400,
            20_000,
            &|r, k, flushes| {
                if r == 2 && k >= 150 && flushes == 0 {
                    5000
                } else {
                    10
                }
            },
        )
    });
    let at = &results[0].suspended_at;
    assert_eq!(at.len(), 1, "{at:?}");
    for seen in &results {
        assert_eq!(&seen.suspended_at, at);
    }
    // Rank 2's word enters the reduction started at the first decision point at or after 150,
    // and that reduction completes at the next one.
    let points = &results[0].announced;
    let mut from_150 = points.iter().filter(|&&k| k >= 150);
    let (first, second) = (from_150.next(), from_150.next());
    assert_eq!(
        Some(&at[0]),
        second,
        "flushed at {}; decision points from 150: {first:?}, {second:?}",
        at[0]
    );
    // The same, bounded from the strides alone: the first point comes within the stride in force
    // at 150, and the stride agreed there can at most double. (CI once saw a flush at 200 with a
    // stride of 19 at 150: beyond the 2-stride bound this test used to assert, within this one.)
    let stride_then = results[0].strides[150] as usize;
    assert!(
        at[0] > 150 && at[0] <= 150 + 3 * stride_then,
        "flushed at {} with stride {stride_then}",
        at[0]
    );
}

#[test]
fn a_failure_on_one_rank_turns_the_protocol_off_everywhere_at_once() {
    let config = InProcConfig {
        ranks: 4,
        latency_ns: 1_000,
        ..InProcConfig::default()
    };
    let results = inproc::run(&config, |rank| {
        let mut suspender = Suspender::new(split(0, ClockScheme::Tree));
        suspender.init(rank).unwrap();
        let mut off_at = None;
        for k in 0..20 {
            if rank.rank() == 2 && k == 6 {
                suspender.request_disable();
            }
            let mut flush = || panic!("nobody is above S");
            suspender
                .suspend(
                    rank,
                    Held {
                        bytes: 0,
                        threshold: THRESHOLD,
                    },
                    &mut flush,
                )
                .unwrap();
            if suspender.disabled() && off_at.is_none() {
                off_at = Some(k);
            }
        }
        suspender.close(rank).unwrap();
        off_at
    });
    // Rank 2's word goes into the reduction started at collective 6, completed at 7.
    assert_eq!(results, vec![Some(7); 4]);
}
