//! Reconstruction on synthetic traces whose original timing is known: injected suspensions
//! (with per-rank overshoot), per-event recorder costs, clock offsets and different tick rates
//! must all come out exactly, and a suspension moves only the stream it paused.

mod common;
mod known_run;

use common::*;
use format::{ClockSample, Event, Marker, SampleKind, Suspension};
use known_run::*;
use reconstruct::rebuild::Remove;

#[test]
fn removing_both_recovers_the_original_timestamps_exactly() {
    let dir = temp_dir("exact");
    let out = dir.with_extension("out");
    let p = ring_program(4, 40, 11);
    write_trace(&dir, p.world, &p.measured, 50);
    let s = rebuild(&dir, &out, Remove::Both, false);
    for r in 0..p.world {
        let got = calls(&read_lane(&out, r, 0));
        let want = &p.original[r as usize];
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!((g.start, g.end), (w.start, w.end), "rank {r} call {i}");
            assert_eq!(g.cost, 0, "DP removed: the cost is spent");
        }
        // Suspensions stay, as zero-length markers; clock samples say the clock is now global.
        for e in read_lane(&out, r, 0) {
            match e {
                Event::Suspension(s) => assert_eq!(s.start, s.end),
                Event::Clock(c) => assert_eq!(c.offset_ns, 0.0),
                _ => {}
            }
        }
        let rs = &s.per_rank[r as usize];
        let close = |a: f64, b: u64| (a - b as f64 / 1e9).abs() < 1e-12;
        assert!(
            close(rs.reconstructed_s.unwrap(), p.span[r as usize]),
            "{rs:?}"
        );
        assert!(close(rs.dp_prime_s, p.suspended[r as usize]), "{rs:?}");
        assert!(close(rs.dp_s, p.cost[r as usize]), "{rs:?}");
        assert!(close(
            rs.measured_s.unwrap(),
            p.span[r as usize] + p.suspended[r as usize] + p.cost[r as usize]
        ));
    }
    assert_eq!(s.suspensions.count, 40 / 3);
    assert_eq!(
        s.suspensions.flushes,
        (0..40).filter(|i| i % 3 == 2 && i % 2 == 0).count() as u64
    );
    assert!(s.measured_s > s.reconstructed_plus_s && s.reconstructed_plus_s > s.reconstructed_s);
    // The original run respects causality, so its exact reconstruction does too; the messages
    // and barriers were all matched.
    assert_eq!(s.hb.violations_before, 0, "{:?}", s.hb);
    assert_eq!(s.hb.before.messages, 4 * 40);
    assert_eq!(s.hb.before.collective_exits, 4 * 40);
    assert_eq!(
        s.hb.before.unmatched_sends + s.hb.before.unmatched_receives,
        0
    );
    assert!(
        s.skipped.is_empty() && s.warnings.is_empty(),
        "{:?} {:?}",
        s.skipped,
        s.warnings
    );

    // Reconstructing a reconstruction removes nothing more.
    let again = dir.with_extension("again");
    let s2 = rebuild(&out, &again, Remove::Both, false);
    for r in 0..p.world {
        assert_eq!(
            calls(&read_lane(&out, r, 0)),
            calls(&read_lane(&again, r, 0))
        );
    }
    assert!((s2.measured_s - s2.reconstructed_s).abs() < 1e-12);
    for d in [dir.as_path(), out.as_path(), again.as_path()] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn removing_only_the_suspensions_keeps_the_recorder_cost() {
    let dir = temp_dir("dpprime");
    let out = dir.with_extension("out");
    let p = ring_program(3, 12, 5);
    write_trace(&dir, p.world, &p.measured, 1_000);
    let s = rebuild(&dir, &out, Remove::DpPrime, false);
    for r in 0..p.world as usize {
        let got = calls(&read_lane(&out, r as u32, 0));
        for (i, g) in got.iter().enumerate() {
            let w = p.original[r][i];
            let before = p.cost_before[r][i];
            assert_eq!(
                (g.start, g.end),
                (w.start + before, w.end + before),
                "rank {r} call {i}"
            );
            // The cost is kept, converted to output ticks (ns): the injected cost of this call
            // is what the next call's accumulated cost grew by.
            let after = p.cost_before[r].get(i + 1).copied().unwrap_or(p.cost[r]);
            assert_eq!(u64::from(g.cost), after - before, "rank {r} call {i}");
        }
        let rs = &s.per_rank[r];
        assert!(
            (rs.reconstructed_plus_s.unwrap() - (p.span[r] + p.cost[r]) as f64 / 1e9).abs() < 1e-12
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn drifting_clocks_are_followed_between_samples() {
    // Rank 1's clock loses 1 µs per ms against rank 0's (1000 ppm), sampled at init, at one
    // suspension and at finalize; events between samples must land on rank 0's clock.
    let dir = temp_dir("drift");
    let out = dir.with_extension("out");
    let base = 1_000_000_000u64;
    let local = |g: u64| ((g as f64 - 5_000.0) / 1.001).round() as u64; // off(g) grows with time
    let off_at = |g: u64| g as f64 - local(g) as f64;
    let mut r0 = function_defs();
    let mut r1 = function_defs();
    let sample = |g: u64, off: f64, when| {
        Event::Clock(ClockSample {
            local: g,
            offset_ns: off,
            rtt_ns: 0.0,
            when,
        })
    };
    r0.push(Event::Marker(Marker::InitDone { time: base }));
    r1.push(sample(local(base), off_at(base), SampleKind::Init));
    r1.push(Event::Marker(Marker::InitDone { time: local(base) }));
    let mut times = Vec::new();
    for i in 0..20u64 {
        let g = base + i * 100_000;
        times.push(g);
        r0.push(Event::Call(barrier(g, g + 1_000)));
        r1.push(Event::Call(barrier(local(g), local(g + 1_000))));
        if i == 10 {
            r1.push(Event::Clock(ClockSample {
                local: local(g + 2_000),
                offset_ns: off_at(g + 2_000),
                rtt_ns: 0.0,
                when: SampleKind::Suspension,
            }));
        }
    }
    let end = base + 2_100_000;
    r0.push(Event::Marker(Marker::FinalizeStart { time: end }));
    r1.push(Event::Marker(Marker::FinalizeStart { time: local(end) }));
    r1.push(sample(local(end), off_at(end), SampleKind::Finalize));
    let ranks = [
        RankTrace {
            rank: 0,
            ticks_per_sec: 1e9,
            streams: vec![(0, r0)],
        },
        RankTrace {
            rank: 1,
            ticks_per_sec: 1e9,
            streams: vec![(0, r1)],
        },
    ];
    write_trace(&dir, 2, &ranks, 8);
    let s = rebuild(&dir, &out, Remove::DpPrime, false);
    let got = calls(&read_lane(&out, 1, 0));
    for (c, g) in got.iter().zip(&times) {
        assert!(
            (c.start as i64 - *g as i64).abs() <= 2,
            "{} vs {g}",
            c.start
        );
    }
    let m1 = s.per_rank[1].measured_s.unwrap();
    assert!(
        (m1 - 2.1e-3).abs() < 3e-9,
        "rank 1's span in the global clock: {m1}"
    );
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn only_the_stream_a_suspension_paused_loses_it() {
    // Rank 0's main thread suspends for 1 µs. Its second thread kept running through the pause
    // (a suspension pauses the thread that ran it, FORMAT.md), so its events keep their times,
    // including the one inside the suspension; the main thread's later events move back by it.
    let dir = temp_dir("streams");
    let out = dir.with_extension("out");
    let mut main = function_defs();
    main.extend([
        Event::Marker(Marker::InitDone { time: 0 }),
        Event::Call(barrier(100, 200)),
        Event::Suspension(Box::new(Suspension {
            seq: 0,
            start: 200,
            z_ns: 1_000,
            end: 1_200,
            ..Default::default()
        })),
        Event::Call(barrier(1_300, 1_400)),
        Event::Marker(Marker::FinalizeStart { time: 1_500 }),
    ]);
    let worker = vec![
        Event::Call(call(SEND, 150, 160, 0, 1)),
        Event::Call(call(SEND, 700, 710, 0, 2)),
        Event::Call(call(SEND, 1_250, 1_260, 0, 3)),
    ];
    let r1: Vec<Event> = function_defs()
        .into_iter()
        .chain([
            Event::Marker(Marker::InitDone { time: 0 }),
            Event::Call(barrier(100, 200)),
            Event::Suspension(Box::new(Suspension {
                seq: 0,
                start: 200,
                z_ns: 1_000,
                end: 1_200,
                ..Default::default()
            })),
            Event::Call(barrier(1_300, 1_400)),
            Event::Marker(Marker::FinalizeStart { time: 1_500 }),
        ])
        .collect();
    let ranks = [
        RankTrace {
            rank: 0,
            ticks_per_sec: 1e9,
            streams: vec![(0, main), (1, worker)],
        },
        RankTrace {
            rank: 1,
            ticks_per_sec: 1e9,
            streams: vec![(0, r1)],
        },
    ];
    write_trace(&dir, 2, &ranks, 2);
    let s = rebuild(&dir, &out, Remove::DpPrime, false);
    let w = calls(&read_lane(&out, 0, 1));
    let got: Vec<(u64, u64)> = w.iter().map(|c| (c.start, c.end)).collect();
    assert_eq!(got, vec![(150, 160), (700, 710), (1_250, 1_260)]);
    assert_eq!(calls(&read_lane(&out, 0, 0))[1].start, 300);
    assert_eq!(s.per_rank[0].events, 7 + 5 + 3);
    assert!(
        (s.reconstructed_plus_s - 500e-9).abs() < 1e-15,
        "{}",
        s.reconstructed_plus_s
    );
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn a_cost_larger_than_the_time_to_the_next_call_is_removed_from_the_gaps_that_follow() {
    // A stored cost is the recorder's estimate plus slow-path time charged to the call; a rank
    // descheduled while it was measured stores one larger than the wall time before its next
    // call (seen: 23 µs against a 1.8 µs gap on 4 MPICH ranks on 2 cores). The cost is spent
    // after the call's end, so no more than that gap can be removed there: the next call may
    // move up to this one's end, never before it, and the rest comes out of the gaps after.
    let dir = temp_dir("cost-over-gap");
    let out = dir.with_extension("out");
    let lane = |costs: [u32; 4]| -> Vec<Event> {
        let mut e = function_defs();
        let mut calls = [
            barrier(100, 200),
            barrier(300, 400),
            barrier(1_000, 1_100),
            barrier(10_000, 10_100),
        ];
        for (c, cost) in calls.iter_mut().zip(costs) {
            c.cost = cost;
        }
        e.push(Event::Marker(Marker::InitDone { time: 0 }));
        e.extend(calls.map(Event::Call));
        e.push(Event::Marker(Marker::FinalizeStart { time: 10_200 }));
        e
    };
    let ranks = [
        RankTrace {
            rank: 0,
            ticks_per_sec: 1e9,
            // A stored cost of 900 with a 100 ns gap after the call; then 50 more, with a
            // 600 ns gap and an 8 900 ns one after.
            streams: vec![(0, lane([900, 50, 0, 0]))],
        },
        RankTrace {
            rank: 1,
            ticks_per_sec: 1e9,
            streams: vec![(0, lane([0, 0, 0, 0]))],
        },
    ];
    write_trace(&dir, 2, &ranks, 3);
    let s = rebuild(&dir, &out, Remove::Both, false);
    let got: Vec<(u64, u64)> = calls(&read_lane(&out, 0, 0))
        .iter()
        .map(|c| (c.start, c.end))
        .collect();
    // 100 of the 950 after the first call, 600 after the second, the last 250 after the third.
    assert_eq!(
        got,
        vec![(100, 200), (200, 300), (300, 400), (9_050, 9_150)]
    );
    let dp = s.per_rank[0].dp_s;
    assert!((dp - 950e-9).abs() < 1e-15, "DP {dp} s, want 950 ns");
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn a_call_s_own_clock_read_comes_off_the_call_and_the_program_s_work_keeps_its_length() {
    // The untraced program: 100 calls of 2 ns, 1 ns apart, 10 000 ns of work, a 100 ns barrier.
    // Traced, at 1 tick a ns with a 10 ns clock read: the read that closes each record runs
    // inside it (12 ns), and the rest of the cost (the other read and 3 ns of recorder work)
    // follows it: 26 ns a call, 23 charged. Only 14 of them lie between two calls, so taking
    // the whole cost from there left 9 ns a call to come out of the program's work after the
    // burst (900 ns of its 10 000).
    let dir = temp_dir("read-inside");
    let out = dir.with_extension("out");
    let mut lane = function_defs();
    lane.push(Event::Marker(Marker::InitDone { time: 0 }));
    let mut want = Vec::new();
    for k in 0..100u64 {
        lane.push(costly(100 + 26 * k, 112 + 26 * k, 23));
        want.push((100 + 3 * k, 102 + 3 * k));
    }
    // The last call's end (2 686), its 13 ns of recorder work, then the program's 10 000 ns.
    lane.push(costly(12_699, 12_809, 20));
    want.push((10_399, 10_499));
    lane.push(Event::Marker(Marker::FinalizeStart { time: 12_819 }));
    write_one_lane_reading(&dir, &lane, 1e9, 64, 10);
    let s = rebuild(&dir, &out, Remove::Both, false);
    let got: Vec<(u64, u64)> = calls(&read_lane(&out, 0, 0))
        .iter()
        .map(|c| (c.start, c.end))
        .collect();
    assert_eq!(got, want);
    let r = &s.per_rank[0];
    assert!(
        (r.dp_s - 2_320e-9).abs() < 1e-15,
        "DP {} s, want 2 320 ns",
        r.dp_s
    );
    let span = r.reconstructed_s.unwrap();
    assert!(
        (span - 10_499e-9).abs() < 1e-15,
        "T(G) {span} s, want 10 499 ns"
    );
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn the_recorder_cost_between_polls_is_removed_from_the_time_outside_mpi() {
    // hpcc's `Testany` loops end when the program's own work is done: the recorder's cost
    // between the polls made each loop longer, and reconstruction that kept it left hpcc ~30 %
    // slow. The cost between the polls comes out of the run, never more than the run spent
    // outside MPI.
    let dir = temp_dir("inner-cost");
    let out = dir.with_extension("out");
    let lane = |runs: bool| -> Vec<Event> {
        let mut e = function_defs_with(&[(TEST, "MPI_Test")]);
        e.push(Event::Marker(Marker::InitDone { time: 0 }));
        e.push(Event::Call(barrier(100, 200)));
        if runs {
            // 2 000 ns, 500 of them inside MPI: the 1 200 between the polls fits outside.
            e.push(polls(300, 2_300, 10, 500, 1_200));
        }
        e.push(Event::Call(barrier(2_400, 2_500)));
        if runs {
            // 1 000 ns, 600 inside MPI: only 400 of the 2 000 stored can have been spent here.
            e.push(polls(3_000, 4_000, 5, 600, 2_000));
        }
        e.push(Event::Call(barrier(4_100, 4_200)));
        e.push(Event::Marker(Marker::FinalizeStart { time: 4_300 }));
        e
    };
    let ranks = [
        RankTrace {
            rank: 0,
            ticks_per_sec: 1e9,
            streams: vec![(0, lane(true))],
        },
        RankTrace {
            rank: 1,
            ticks_per_sec: 1e9,
            streams: vec![(0, lane(false))],
        },
    ];
    write_trace(&dir, 2, &ranks, 3);
    let s = rebuild(&dir, &out, Remove::Both, false);
    let events = read_lane(&out, 0, 0);
    let runs: Vec<(u64, u64, u64, u32)> = poll_runs(&events)
        .map(|p| (p.start, p.end, p.inner_cost, p.cost))
        .collect();
    // Each run starts where it did, less what came before it, and ends earlier by the cost
    // between its polls; the last poll's 30 comes out of the gap after the run.
    assert_eq!(runs, vec![(300, 1_100, 0, 0), (1_770, 2_370, 0, 0)]);
    let got: Vec<(u64, u64)> = calls(&events).iter().map(|c| (c.start, c.end)).collect();
    assert_eq!(got, vec![(100, 200), (1_170, 1_270), (2_440, 2_540)]);
    let dp = s.per_rank[0].dp_s;
    assert!((dp - 1_660e-9).abs() < 1e-15, "DP {dp} s, want 1 660 ns");
    // 39 % of the span, but 1 600 ns of it between polls: no sign of a descheduled rank.
    assert!(s.unreliable.is_empty(), "{:?}", s.unreliable);
    // Keeping DP in the times still counts the same DP, so T(G) = T(G+) - DP agrees.
    std::fs::remove_dir_all(&out).unwrap();
    let kept = rebuild(&dir, &out, Remove::DpPrime, false);
    let dp = kept.per_rank[0].dp_s;
    assert!(
        (dp - 1_660e-9).abs() < 1e-15,
        "DP {dp} s kept, want 1 660 ns"
    );
    let inner: Vec<u64> = poll_runs(&read_lane(&out, 0, 0))
        .map(|p| p.inner_cost)
        .collect();
    assert_eq!(inner, vec![1_200, 2_000]);
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

#[test]
fn the_clock_reads_in_dp_are_two_per_call_and_poll_never_more_than_charged() {
    // A program whose work between calls hides the recorder's clock reads did not save them
    // untraced: the summary says how much of DP they are, as the band T(G) may be low by.
    let dir = temp_dir("read-band");
    let out = dir.with_extension("out");
    let mut lane = function_defs_with(&[(TEST, "MPI_Test")]);
    // Before MPI_Init ends: in no span.
    lane.push(costly(10, 20, 50));
    lane.push(Event::Marker(Marker::InitDone { time: 100 }));
    // At 2 ticks a ns, a read of 8 ticks makes a pair 8 ns. Calls charged 25 and 5 ns: 8 and 5.
    lane.push(costly(200, 300, 50));
    lane.push(costly(400, 500, 10));
    // 10 polls, 615 ns charged: 80 are reads.
    lane.push(polls(600, 2_600, 10, 500, 1_200));
    lane.push(costly(2_700, 2_800, 0));
    // 5 polls whose 500 ns between them fit only 200 outside MPI: 5 x 8 = 40 of the 215 removed.
    lane.push(polls(3_000, 4_000, 5, 600, 2_000));
    lane.push(costly(4_100, 4_200, 0));
    lane.push(Event::Marker(Marker::FinalizeStart { time: 4_300 }));
    write_one_lane_reading(&dir, &lane, 2e9, 4, 8);
    let s = rebuild(&dir, &out, Remove::Both, false);
    let reads = s.per_rank[0].dp_reads_s;
    assert!(
        (reads - 133e-9).abs() < 1e-15,
        "clock reads {reads} s of DP, want 133 ns"
    );
    assert!(s.read_cost_recorded);
    assert_eq!(s.dp_reads_s, reads, "the only rank is the critical one");
    assert!(s.per_rank[0].dp_s >= reads);
    // An output that keeps DP keeps the read's cost, in its own clock's ticks (ns): removing DP
    // from it later finds the same reads.
    std::fs::remove_dir_all(&out).unwrap();
    rebuild(&dir, &out, Remove::DpPrime, false);
    let again = out.with_extension("again");
    let s = rebuild(&out, &again, Remove::Both, false);
    assert!(
        (s.per_rank[0].dp_reads_s - 133e-9).abs() < 1e-15,
        "clock reads {} s of DP from the output that kept it, want 133 ns",
        s.per_rank[0].dp_reads_s
    );
    std::fs::remove_dir_all(&again).unwrap();
    // A trace that does not record the read's cost claims no band.
    std::fs::remove_dir_all(&out).unwrap();
    write_one_lane_reading(&dir, &lane, 2e9, 4, 0);
    let s = rebuild(&dir, &out, Remove::Both, false);
    assert_eq!(s.per_rank[0].dp_reads_s, 0.0);
    assert!(!s.read_cost_recorded);
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

/// A one-rank trace of `lane`, whose file records a clock read of `read_ticks` (0: not recorded).
fn write_one_lane_reading(
    dir: &std::path::Path,
    lane: &[Event],
    ticks_per_sec: f64,
    chunk_events: usize,
    read_ticks: u16,
) {
    let ranks = [RankTrace {
        rank: 0,
        ticks_per_sec,
        streams: vec![(0, lane.to_vec())],
    }];
    write_trace_reading(dir, 1, &ranks, chunk_events, read_ticks);
}

/// A barrier from `start` to `end` charged `cost` by the recorder.
fn costly(start: u64, end: u64, cost: u32) -> Event {
    Event::Call(format::MpiCall {
        cost,
        ..barrier(start, end)
    })
}

/// The function id the poll-run tests define as `MPI_Test`.
const TEST: format::FunctionId = 8;

/// A run of `count` `MPI_Test` polls, `busy` ticks of it inside MPI, `inner_cost` charged between
/// the polls and 30 after the last.
fn polls(start: u64, end: u64, count: u64, busy: u64, inner_cost: u64) -> Event {
    Event::Polls(format::PollRun {
        func: TEST,
        comm: 0,
        peer: format::NO_RANK,
        tag: format::NO_TAG,
        start,
        end,
        count,
        busy,
        inner_cost,
        cost: 30,
    })
}

fn poll_runs(events: &[Event]) -> impl Iterator<Item = format::PollRun> + '_ {
    events.iter().filter_map(|e| match e {
        Event::Polls(p) => Some(*p),
        _ => None,
    })
}
