//! What `compare` reports on runs that differ by known signed amounts: the bias keeps its sign
//! and size, the relative tolerance and its floor decide which calls match, each rank gets its
//! own figures, and two references give the noise floor.

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;

use common::*;
use trace::Trace;
use views::compare::{Options, Tolerance, compare_runs, compare_with};

/// The log histogram behind the medians is exact to 1/64 above 128 ns.
fn near(got: f64, want: f64) -> bool {
    (got - want).abs() <= want.abs() / 64.0 + 1e-9
}

/// Exact: means are kept as sums.
fn exact(got: f64, want: f64) -> bool {
    (got - want).abs() < 1e-9
}

const ITERATIONS: u64 = 60;

fn write(name: &str, ranks: &[RankTrace]) -> common::TempDir {
    let dir = temp_dir(name);
    write_trace(&dir, ranks.len() as u32, ranks, 25);
    dir
}

#[test]
fn bias_keeps_its_sign_and_size_per_function_and_per_rank() {
    let reference = write("fig-ref", &shifted_program(3, ITERATIONS, |_, _| 0, |_| 0));
    // Sends: +3 µs on rank 0 (3 % of 100 µs, within 5 %), −12 µs on ranks 1 and 2 (outside).
    // Barriers: +0.8 µs everywhere (8 % of 10 µs, but under the 1 µs floor). Rank 2 reaches
    // MPI_Finalize 50 µs later.
    let run = write(
        "fig-run",
        &shifted_program(
            3,
            ITERATIONS,
            |r, f| match (r, f) {
                (_, BARRIER) => 800,
                (0, _) => 3_000,
                _ => -12_000,
            },
            |r| if r == 2 { 50_000 } else { 0 },
        ),
    );
    let (a, b) = (Trace::open(&reference).unwrap(), Trace::open(&run).unwrap());
    let r = compare_with(&a, &b, &Options::default()).unwrap();
    assert_eq!(r.calls, 3 * 2 * ITERATIONS);
    assert!(r.noise_floor.is_none(), "one reference: no noise floor");

    let send = &r.per_function["MPI_Send"];
    assert_eq!(send.calls, 3 * ITERATIONS);
    assert!(send.bias_us.median_us < 0.0, "sends got shorter: {send:?}");
    assert!(near(send.bias_us.median_us, -12.0), "{send:?}");
    assert!(
        exact(send.bias_us.mean_us, (3.0 - 12.0 - 12.0) / 3.0),
        "{send:?}"
    );
    assert!(exact(send.within_tolerance, 1.0 / 3.0), "{send:?}");
    // Absolute |Δ| alone would say 12 µs without saying which way.
    assert!(near(send.duration_delta_us.max, 12.0), "{send:?}");

    let barrier = &r.per_function["MPI_Barrier"];
    assert!(near(barrier.bias_us.median_us, 0.8), "{barrier:?}");
    assert!(exact(barrier.bias_us.mean_us, 0.8), "{barrier:?}");
    assert!(
        exact(barrier.within_tolerance, 1.0),
        "the 1 µs floor: {barrier:?}"
    );

    // Pooled: 120 calls at −12 µs, 180 at +0.8 µs, 60 at +3 µs.
    let pooled_mean = (120.0 * -12.0 + 180.0 * 0.8 + 60.0 * 3.0) / 360.0;
    assert!(exact(r.bias_us.mean_us, pooled_mean), "{:?}", r.bias_us);
    assert!(near(r.bias_us.median_us, 0.8), "{:?}", r.bias_us);
    assert!(
        exact(r.within_tolerance, 240.0 / 360.0),
        "{}",
        r.within_tolerance
    );

    // Per rank: rank 0 runs long, ranks 1 and 2 short; only rank 2 is late.
    assert_eq!(r.per_rank.len(), 3);
    let ranks: Vec<u32> = r.per_rank.iter().map(|d| d.rank).collect();
    assert_eq!(ranks, [0, 1, 2]);
    for d in &r.per_rank {
        assert_eq!(d.calls, 2 * ITERATIONS, "{d:?}");
    }
    let (r0, r1, r2) = (&r.per_rank[0], &r.per_rank[1], &r.per_rank[2]);
    assert!(exact(r0.bias_us.mean_us, (3.0 + 0.8) / 2.0), "{r0:?}");
    assert!(r0.bias_us.median_us > 0.0, "{r0:?}");
    assert!(exact(r0.within_tolerance, 1.0), "{r0:?}");
    for d in [r1, r2] {
        assert!(exact(d.bias_us.mean_us, (-12.0 + 0.8) / 2.0), "{d:?}");
        assert!(near(d.bias_us.median_us, -12.0), "{d:?}");
        assert!(exact(d.within_tolerance, 0.5), "{d:?}");
    }
    assert!(exact(r0.span_delta_s.unwrap(), 0.0), "{r0:?}");
    assert!(exact(r1.span_delta_s.unwrap(), 0.0), "{r1:?}");
    assert!(exact(r2.span_delta_s.unwrap(), 50e-6), "{r2:?}");
    let span = shifted_span_ns(ITERATIONS) as f64;
    assert!(
        exact(r.total_error_pct, 100.0 * 50_000.0 / span),
        "{}",
        r.total_error_pct
    );

    // Without the floor the barriers' 0.8 µs (8 %) is outside; with 15 % every call is inside.
    let strict = Options {
        tolerance: Tolerance {
            relative: 0.05,
            floor_ns: 0,
        },
        ..Default::default()
    };
    let s = compare_with(&a, &b, &strict).unwrap();
    assert!(exact(s.per_function["MPI_Barrier"].within_tolerance, 0.0));
    assert!(
        exact(s.within_tolerance, 60.0 / 360.0),
        "{}",
        s.within_tolerance
    );
    let loose = Options {
        tolerance: Tolerance {
            relative: 0.15,
            floor_ns: 1_000,
        },
        ..Default::default()
    };
    assert!(exact(
        compare_with(&a, &b, &loose).unwrap().within_tolerance,
        1.0
    ));
    for d in [reference, run] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn two_references_give_the_noise_floor() {
    let uniform = |us: i64| move |_: u32, _| us;
    let late = |ns: u64| move |r: u32| if r == 0 { ns } else { 0 };
    // The second reference: every call 1 µs longer, rank 0 20 µs late.
    let ref1 = write(
        "noise-ref1",
        &shifted_program(2, ITERATIONS, uniform(0), late(0)),
    );
    let ref2 = write(
        "noise-ref2",
        &shifted_program(2, ITERATIONS, uniform(1_000), late(20_000)),
    );
    // A run clearly off (+6 µs per call, 200 µs late) and one inside the references' spread.
    let far = write(
        "noise-far",
        &shifted_program(2, ITERATIONS, uniform(6_000), late(200_000)),
    );
    let close = write(
        "noise-close",
        &shifted_program(2, ITERATIONS, uniform(500), late(10_000)),
    );
    let refs = [Trace::open(&ref1).unwrap(), Trace::open(&ref2).unwrap()];
    let opts = Options::default();
    let span = shifted_span_ns(ITERATIONS) as f64;

    let r = compare_runs(&refs, &Trace::open(&far).unwrap(), &opts).unwrap();
    // The detailed figures are against the first reference.
    assert_eq!(r.reference, ref1.display().to_string());
    assert!(exact(r.bias_us.mean_us, 6.0), "{:?}", r.bias_us);
    let n = r
        .noise_floor
        .as_ref()
        .expect("two references give a noise floor");
    assert_eq!(n.references.len(), 2);
    assert_eq!(n.reference_pairs.len(), 1);
    let pair = &n.reference_pairs[0];
    assert_eq!(
        (pair.reference.as_str(), pair.run.as_str()),
        (
            ref1.display().to_string().as_str(),
            ref2.display().to_string().as_str()
        )
    );
    assert!(exact(pair.bias_us.mean_us, 1.0), "{pair:?}");
    assert!(near(pair.bias_us.median_us, 1.0), "{pair:?}");
    assert!(exact(pair.within_tolerance, 1.0), "{pair:?}");
    assert!(
        exact(pair.total_error_pct, 100.0 * 20_000.0 / span),
        "{pair:?}"
    );
    // RUN against each reference: +6 µs against the first, +5 µs against the second.
    assert_eq!(n.run_against.len(), 2);
    assert!(exact(n.bias_mean_us.run, 6.0), "{:?}", n.bias_mean_us);
    assert!(exact(n.bias_mean_us.run_min, 5.0), "{:?}", n.bias_mean_us);
    assert!(exact(n.bias_mean_us.run_max, 6.0), "{:?}", n.bias_mean_us);
    assert!(exact(n.bias_mean_us.floor, 1.0), "{:?}", n.bias_mean_us);
    assert!(near(n.bias_median_us.floor, 1.0), "{:?}", n.bias_median_us);
    assert!(n.bias_mean_us.beyond && n.bias_median_us.beyond, "{n:?}");
    assert!(
        exact(n.total_error_pct.floor, 100.0 * 20_000.0 / span),
        "{:?}",
        n.total_error_pct
    );
    assert!(n.total_error_pct.beyond, "{:?}", n.total_error_pct);
    // Sends 6 % / 4.95 % off, barriers 6 / 5 µs: nothing within against the first reference,
    // the sends against the second; the references agree fully.
    assert!(
        exact(n.within_tolerance.run_min, 0.0),
        "{:?}",
        n.within_tolerance
    );
    assert!(
        exact(n.within_tolerance.run_max, 0.5),
        "{:?}",
        n.within_tolerance
    );
    assert!(
        exact(n.within_tolerance.floor, 1.0),
        "{:?}",
        n.within_tolerance
    );
    assert!(n.within_tolerance.beyond);

    // +0.5 µs per call and 10 µs late: against the references' 1 µs and 20 µs, noise.
    let c = compare_runs(&refs, &Trace::open(&close).unwrap(), &opts).unwrap();
    let n = c.noise_floor.as_ref().unwrap();
    assert!(exact(n.bias_mean_us.run_min, -0.5), "{:?}", n.bias_mean_us);
    assert!(exact(n.bias_mean_us.run_max, 0.5), "{:?}", n.bias_mean_us);
    assert!(!n.bias_mean_us.beyond, "{:?}", n.bias_mean_us);
    assert!(!n.bias_median_us.beyond, "{:?}", n.bias_median_us);
    assert!(!n.total_error_pct.beyond, "{:?}", n.total_error_pct);
    assert!(!n.within_tolerance.beyond, "{:?}", n.within_tolerance);

    // One reference only: the same report, without a noise floor.
    let single = compare_runs(&refs[..1], &Trace::open(&far).unwrap(), &opts).unwrap();
    assert!(single.noise_floor.is_none());
    assert!(exact(single.bias_us.mean_us, 6.0));
    for d in [ref1, ref2, far, close] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
