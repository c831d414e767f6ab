//! Property: every rank of a suspension pauses for the same Z, whatever the ranks' clocks (skew,
//! drift), the network's latency, when each rank arrives, which ranks want to flush, how long a
//! flush takes, and the protocol's settings. Ranks are threads of the in-process transport; each
//! case is a few real suspensions, so the cases are few and small.

use std::collections::BTreeMap;

use offload::inproc::{self, InProcConfig};
use offload::{ClockScheme, Decision, FlushReport, Held, Mode, Settings, Suspender, Transport};
use proptest::prelude::*;

const US: u64 = 1_000;

/// One generated job: per rank its clock and, per round, its lateness (µs) and buffer bytes.
#[derive(Clone, Debug)]
struct Case {
    skew_ns: Vec<i64>,
    drift_ppm: Vec<f64>,
    latency_ns: u64,
    late_us: Vec<Vec<u64>>,
    bytes: Vec<Vec<u64>>,
    flush_us: u64,
    mode: Mode,
    decision: Decision,
    clock_scheme: ClockScheme,
}

const ROUNDS: usize = 4;

fn arb_case() -> impl Strategy<Value = Case> {
    (1usize..=7).prop_flat_map(|ranks| {
        (
            prop::collection::vec(-5_000_000i64..5_000_000, ranks),
            prop::collection::vec(-100.0f64..100.0, ranks),
            0u64..50_000,
            prop::collection::vec(prop::collection::vec(0u64..800, ROUNDS), ranks),
            prop::collection::vec(
                prop::collection::vec(prop_oneof![3 => Just(0u64), 1 => 0u64..5000], ROUNDS),
                ranks,
            ),
            0u64..2_000,
            prop_oneof![
                Just(Mode::Dynamic),
                Just(Mode::NoRemeasure),
                Just(Mode::Static)
            ],
            prop_oneof![Just(Decision::Blocking), Just(Decision::Split)],
            prop_oneof![Just(ClockScheme::Sequential), Just(ClockScheme::Tree)],
        )
            .prop_map(
                |(
                    skew_ns,
                    drift_ppm,
                    latency_ns,
                    late_us,
                    bytes,
                    flush_us,
                    mode,
                    decision,
                    clock_scheme,
                )| Case {
                    skew_ns,
                    drift_ppm,
                    latency_ns,
                    late_us,
                    bytes,
                    flush_us,
                    mode,
                    decision,
                    clock_scheme,
                },
            )
    })
}

/// Every rank's suspensions of the case: seq → Z.
fn run(case: &Case) -> Vec<BTreeMap<u64, u64>> {
    let config = InProcConfig {
        ranks: case.skew_ns.len(),
        skew_ns: case.skew_ns.clone(),
        drift_ppm: case.drift_ppm.clone(),
        latency_ns: case.latency_ns,
        slow_after_write: None,
    };
    inproc::run(&config, |rank| {
        let mut suspender = Suspender::new(Settings {
            mode: case.mode,
            decision: case.decision,
            decision_interval_ns: 0,
            clock_scheme: case.clock_scheme,
            static_short_ns: 300 * US,
            static_long_ns: 3_000 * US,
            ..Settings::default()
        });
        suspender.init(rank).unwrap();
        let me = rank.rank();
        let mut zs = BTreeMap::new();
        for round in 0..ROUNDS {
            rank.barrier().unwrap();
            let arrive = rank.now() + case.late_us[me][round] * US;
            rank.wait_until(arrive);
            let bytes = case.bytes[me][round];
            let mut flush = || {
                std::thread::sleep(std::time::Duration::from_micros(case.flush_us));
                FlushReport {
                    bytes_raw: bytes,
                    bytes_stored: bytes,
                }
            };
            if let Some(done) = suspender
                .suspend(
                    rank,
                    Held {
                        bytes,
                        threshold: 1000,
                    },
                    &mut flush,
                )
                .unwrap()
            {
                assert!(
                    done.record.end >= done.record.start + done.record.z_ns,
                    "rank {me}: paused less than Z: {:?}",
                    done.record
                );
                zs.insert(done.record.seq, done.record.z_ns);
            }
        }
        zs
    })
}

proptest! {
    // Each case runs real threads for a few milliseconds; a handful of cases covers the settings.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn z_is_equal_on_every_rank(case in arb_case()) {
        let per_rank = run(&case);
        let root = &per_rank[0];
        for (r, zs) in per_rank.iter().enumerate() {
            prop_assert_eq!(zs, root, "rank {} against rank 0", r);
        }
    }
}
