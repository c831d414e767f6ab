//! The simulator runs the offload crate's protocol; these tests check it against the protocol's
//! own guarantees and against closed-form expectations on small worlds.

use offload::{ClockScheme, Decision, Mode, Remedy};
use sim::{SimConfig, simulate, tree_depth};

/// A small world with every source of noise switched off.
fn quiet(ranks: usize, iterations: u64) -> SimConfig {
    let mut c = SimConfig {
        ranks,
        keep_root_records: true,
        swap: false,
        ..SimConfig::default()
    };
    c.app.iterations = iterations;
    c.app.untraced_s = 0.1 * iterations as f64;
    c.app.trace_bytes = 0;
    c.app.barrier_exit_spread_ns = 0.0;
    c.clock.drift_sd_ppm = 0.0;
    c.clock.read_jitter_ns = 0.0;
    c.net.jitter_ns = 0.0;
    c.net.post_write_window_ns = 0;
    // The closed forms below count message latencies only.
    c.net.nonblocking_call_ns = 0.0;
    c
}

#[test]
fn z_always_covers_wait_broadcast_and_error() {
    // Noisy worlds of many sizes, both clock schemes, with and without writes.
    for (i, ranks) in [1usize, 2, 3, 5, 8, 13, 32, 100, 257]
        .into_iter()
        .enumerate()
    {
        for scheme in [ClockScheme::Sequential, ClockScheme::Tree] {
            let mut c = SimConfig {
                ranks,
                keep_root_records: true,
                seed: 7 + i as u64,
                ..SimConfig::default()
            };
            c.app.iterations = 12;
            c.app.trace_bytes = 40 << 20;
            c.threshold_bytes = 8 << 20;
            c.settings.clock_scheme = scheme;
            c.disk.mbps = 2000.0;
            let r = simulate(&c).unwrap();
            assert_eq!(r.root_records.len(), 12);
            assert!(r.flushes >= 3, "P={ranks}: flushes {}", r.flushes);
            let depth = tree_depth(ranks) as f64;
            for rec in &r.root_records {
                let bound = rec.w_ns as f64 + rec.m_ns * depth + rec.d_ns;
                assert!(
                    rec.z_ns as f64 + 1.0 >= bound,
                    "P={ranks} {scheme:?}: Z {} < w {} + m {} · {depth} + d {}",
                    rec.z_ns,
                    rec.w_ns,
                    rec.m_ns,
                    rec.d_ns
                );
                if ranks > 1 {
                    assert!(rec.m_ns > 0.0, "m is measured");
                }
            }
        }
    }
}

#[test]
fn equal_suspensions_without_jitter_have_no_spread() {
    for scheme in [ClockScheme::Sequential, ClockScheme::Tree] {
        let mut c = quiet(16, 20);
        c.settings.clock_scheme = scheme;
        let r = simulate(&c).unwrap();
        assert_eq!(r.suspensions, 20);
        assert!(
            r.duration_spread_us.max <= 0.002,
            "{scheme:?}: spread {:?}",
            r.duration_spread_us
        );
        assert_eq!(r.late_share, 0.0);
        // Reconstruction then recovers the untraced time up to clock rounding.
        assert!(r.reconstruction_error < 1e-6, "{}", r.reconstruction_error);

        // The same world with drifting clocks: durations, equal in local time, now differ.
        c.clock.drift_sd_ppm = 50.0;
        let drifting = simulate(&c).unwrap();
        assert!(drifting.duration_spread_us.max > 0.0);
    }
}

#[test]
fn two_ranks_match_the_closed_form() {
    // P = 2, one exchange, latency L, no noise. On rank 0: allreduce 2L, ping-pong 2L; rank 1 gets
    // its offset L later, so the gather (cost L) ends at 6L after the start; w = 6L, m = L, d = 0,
    // Z = w + m·1 + d = 7L. Rank 1 receives Z at 7L: exactly on time.
    let latency = 20_000.0;
    let iterations = 10;
    let mut c = quiet(2, iterations);
    c.net.latency_ns = latency;
    c.settings.clock_tries = 1;
    let r = simulate(&c).unwrap();
    for rec in &r.root_records {
        assert!(
            (rec.z_ns as f64 - 7.0 * latency).abs() <= 2.0,
            "Z {} expected {}",
            rec.z_ns,
            7.0 * latency
        );
        assert!((rec.m_ns - latency).abs() < 1.0);
        assert!(rec.d_ns < 1.0);
    }
    // Init: one ping-pong and the offset message (3L). Then every iteration adds Z.
    let expected = r.untraced_s + (3.0 * latency + iterations as f64 * 7.0 * latency) / 1e9;
    assert!(
        (r.total_s - expected).abs() < 1e-6,
        "total {} expected {expected}",
        r.total_s
    );
    assert!(r.clock_sync_share > 0.0 && r.clock_sync_share < 1.0);
}

#[test]
fn sequential_sync_grows_linearly_and_tree_logarithmically() {
    // Closed form without noise: the sequential scheme costs rank 0 (P − 1) round trips of 2L.
    let latency = 10_000.0;
    let mut overheads = Vec::new();
    for ranks in [8usize, 64, 512] {
        for scheme in [ClockScheme::Sequential, ClockScheme::Tree] {
            let mut c = quiet(ranks, 3);
            c.net.latency_ns = latency;
            c.settings.clock_scheme = scheme;
            let r = simulate(&c).unwrap();
            overheads.push((ranks, scheme, r.z_mean_no_flush_us * 1e3));
        }
    }
    for &(ranks, scheme, z) in &overheads {
        let sync = 2.0 * latency * (ranks - 1) as f64;
        if scheme == ClockScheme::Sequential {
            assert!(
                z >= sync,
                "P={ranks}: Z {z} below the ping-pong time {sync}"
            );
            assert!(
                z <= sync + 20.0 * latency * tree_depth(ranks) as f64,
                "P={ranks}: Z {z}"
            );
        } else {
            // Every level measures one child at a time: at most depth² round trips plus hops.
            let depth = tree_depth(ranks) as f64;
            assert!(
                z <= (2.0 * depth * depth + 12.0 * depth) * latency,
                "P={ranks}: Z {z}"
            );
        }
    }
    let tree_512 = overheads[5].2;
    let sequential_512 = overheads[4].2;
    assert!(tree_512 * 10.0 < sequential_512);
}

#[test]
fn modes_behave_as_the_paper_describes() {
    let mut c = SimConfig {
        ranks: 8,
        ..SimConfig::default()
    };
    c.app.iterations = 60;
    c.app.untraced_s = 6.0;
    c.app.trace_bytes = 300 << 20;
    c.threshold_bytes = 100 << 20;
    c.disk.mbps = 400.0;
    let run = |mode: Mode| {
        let mut c = c.clone();
        c.settings.mode = mode;
        simulate(&c).unwrap()
    };
    let off = run(Mode::Off);
    let dynamic = run(Mode::Dynamic);
    let local = run(Mode::Local);
    assert_eq!(off.suspensions, 0);
    assert_eq!(dynamic.suspensions, 60);
    assert!(dynamic.flushes >= 2);
    assert!(dynamic.total_s > off.total_s);
    // Equalised suspensions keep the reconstruction close; lone local flushes do not.
    assert!(
        dynamic.reconstruction_error < 0.01,
        "{}",
        dynamic.reconstruction_error
    );
    assert!(local.reconstruction_error > dynamic.reconstruction_error * 3.0);
    // Remedies: measuring after the write must not make overshoots worse in a slow-after-write net.
    let mut faithful = c.clone();
    faithful.net.post_write_probability = 1.0;
    faithful.settings.remedy = Remedy::FAITHFUL;
    let mut remedied = faithful.clone();
    remedied.settings.remedy = Remedy::default();
    let f = simulate(&faithful).unwrap();
    let r = simulate(&remedied).unwrap();
    assert!(f.overshoot_us.max > 0.0);
    assert!(r.overshoot_us.p99 <= f.overshoot_us.p99 + 1.0);
}

#[test]
fn cli_runs_the_named_modes_and_studies_plot() {
    use clap::Parser;
    let args = sim::cli::Args::try_parse_from([
        "simulate",
        "--ranks",
        "4",
        "--iterations",
        "30",
        "--trace-bytes",
        "64MiB",
        "--threshold",
        "16MiB",
        "--mode",
        "untraced,dynamic,off",
        "--disk-mbps",
        "500",
    ])
    .unwrap();
    let config = args.config().unwrap();
    assert_eq!(config.threshold_bytes, 16 << 20);
    let results = sim::cli::run_modes(&config, &args.modes().unwrap()).unwrap();
    let names: Vec<&str> = results.iter().map(|r| r.mode.as_str()).collect();
    assert_eq!(names, ["untraced", "dynamic", "off"]);
    assert!(results[1].flushes >= 3);
    let table = sim::cli::render_runs(&results);
    assert!(table.contains("dynamic") && table.contains("untraced"));
    assert!(
        sim::cli::Args::try_parse_from(["simulate", "--mode", "fast"])
            .unwrap()
            .modes()
            .is_err()
    );

    let points = sim::studies::scale_study(
        &config,
        5..=6,
        &[
            (Decision::Blocking, ClockScheme::Sequential),
            (Decision::Blocking, ClockScheme::Tree),
        ],
        2,
        |_| {},
    )
    .unwrap();
    assert_eq!(points.len(), 4);
    let png = std::env::temp_dir().join(format!("evenflush-scale-{}.png", std::process::id()));
    sim::studies::plot_scale(&points, &png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    std::fs::remove_file(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(bytes.len() > 10_000, "a plot with text and lines");
}

#[test]
fn args_work_as_a_subcommand_of_the_cli() {
    use clap::{CommandFactory, Parser, Subcommand};
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }
    #[derive(Subcommand)]
    enum Cmd {
        Simulate(sim::cli::Args),
    }
    Cli::command().debug_assert();
    let cli = Cli::try_parse_from(["evenflush", "simulate", "--ranks", "65536", "--json"]).unwrap();
    let Cmd::Simulate(args) = cli.command;
    assert_eq!(args.ranks, 65536);
    assert!(args.json);
    assert_eq!(args.iterations, 520);
}

#[test]
fn split_decision_cost_without_a_flush_does_not_grow_with_p() {
    // The target, on the protocol code itself: at a collective that does not flush, the
    // split decision costs no more at 2^16 ranks than twice what it costs at 32 (the test stops
    // at 2^16 to stay fast; paper-notes/scale.md has the study up to 2^20). The blocking decision
    // at the same P is there to show the measure can tell them apart.
    let config = SimConfig::default();
    let points = sim::studies::scale_study(
        &config,
        5..=16,
        &[
            (Decision::Split, ClockScheme::Tree),
            (Decision::Blocking, ClockScheme::Tree),
        ],
        4,
        |_| {},
    )
    .unwrap();
    let split: Vec<_> = points.iter().filter(|p| p.decision == "split").collect();
    let (small, large) = (split.first().unwrap(), split.last().unwrap());
    assert_eq!((small.ranks, large.ranks), (32, 65536));
    assert!(
        small.overhead_us > 0.0,
        "the decision's own calls cost something"
    );
    assert!(
        large.overhead_us <= 2.0 * small.overhead_us,
        "{} µs at 2^16 against {} µs at 32",
        large.overhead_us,
        small.overhead_us
    );
    let blocking_large = points
        .iter()
        .find(|p| p.decision == "blocking" && p.ranks == 65536)
        .unwrap();
    assert!(blocking_large.overhead_us > 100.0 * large.overhead_us);
}
