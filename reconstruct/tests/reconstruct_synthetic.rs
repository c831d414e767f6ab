//! Reconstruction on synthetic traces whose original timing is known: injected suspensions
//! (with per-rank overshoot), per-event recorder costs, clock offsets and different tick rates
//! must all come out exactly; a failed equalisation must be found and repaired.

mod common;

use common::*;
use format::synthetic::Rng;
use format::{
    ClockSample, Completion, Event, Marker, MpiCall, NO_RANK, NO_REQUEST, NO_TAG, SampleKind,
    Suspension,
};
use reconstruct::matches;
use reconstruct::rebuild::{self, Model, Options, Remove, Summary};
use trace::Trace;

/// A known original run and the trace its recording would have produced.
struct Program {
    world: u32,
    measured: Vec<RankTrace>,
    /// Per rank, the original calls in global ns.
    original: Vec<Vec<MpiCall>>,
    /// Per rank, the recorder cost (ns) spent before each call.
    cost_before: Vec<Vec<u64>>,
    /// Per rank: original span, total suspension time, total cost inside the span (ns).
    span: Vec<u64>,
    suspended: Vec<u64>,
    cost: Vec<u64>,
}

/// Ranks exchange with their ring neighbours and meet in a barrier every iteration; every third
/// barrier is followed by a suspension of Z plus a rank-dependent overshoot. Rank r's clock runs
/// at (1 + r % 2) GHz and is behind rank 0's by r·1.000003 ms.
fn ring_program(world: u32, iterations: u64, seed: u64) -> Program {
    let mut rng = Rng::new(seed);
    let mut p = Program {
        world,
        measured: Vec::new(),
        original: vec![Vec::new(); world as usize],
        cost_before: vec![Vec::new(); world as usize],
        span: vec![0; world as usize],
        suspended: vec![0; world as usize],
        cost: vec![0; world as usize],
    };
    // The common schedule: every rank's timing derives from the iteration start T_i, so the
    // original run respects happened-before.
    let mut starts = Vec::new();
    let mut t = 10_000_000_000u64;
    for _ in 0..iterations {
        starts.push(t);
        t += 6_000 + rng.next_u64() % 3_000;
    }
    let init = 10_000_000_000u64 - 500;
    let finalize = t + 200;
    for r in 0..world {
        let k = 1 + u64::from(r % 2);
        let offset = u64::from(r) * 1_000_003;
        let ticks = |g: u64| (g - offset) * k;
        let (next, prev) = (((r + 1) % world) as i32, ((r + world - 1) % world) as i32);
        let mut events = function_defs();
        let mut extra = 0u64;
        let sample = |g: u64, when| {
            Event::Clock(ClockSample {
                local: ticks(g),
                offset_ns: offset as f64,
                rtt_ns: 100.0,
                when,
            })
        };
        events.push(sample(init, SampleKind::Init));
        events.push(Event::Marker(Marker::InitDone { time: ticks(init) }));
        let rank = r as usize;
        let mut suspended = 0u64;
        let mut push_call = |events: &mut Vec<Event>,
                             c: MpiCall,
                             extra: &mut u64,
                             suspended: u64,
                             rng: &mut Rng| {
            let cost_ns = 20 + rng.next_u64() % 60;
            p.original[rank].push(c);
            p.cost_before[rank].push(*extra - suspended);
            let mut m = c;
            m.start = ticks(c.start + *extra);
            m.end = ticks(c.end + *extra);
            m.cost = (cost_ns * k) as u32;
            events.push(Event::Call(m));
            *extra += cost_ns;
        };
        for (i, &ti) in starts.iter().enumerate() {
            let tag = i as i32;
            let a = ti + rng.next_u64() % 1_000;
            push_call(
                &mut events,
                call(SEND, a, a + 300, next, tag),
                &mut extra,
                suspended,
                &mut rng,
            );
            let b = ti + 1_500 + rng.next_u64() % 300;
            push_call(
                &mut events,
                call(RECV, b, ti + 2_000 + rng.next_u64() % 100, prev, tag),
                &mut extra,
                suspended,
                &mut rng,
            );
            events.push(Event::Completion(Completion {
                request: NO_REQUEST,
                source: prev,
                tag,
                bytes: 8,
                cancelled: false,
            }));
            let c = ti + 3_000 + rng.next_u64() % 1_000;
            push_call(
                &mut events,
                barrier(c, ti + 5_000 + rng.next_u64() % 100),
                &mut extra,
                suspended,
                &mut rng,
            );
            if i % 3 == 2 {
                let z = 50_000 + i as u64 * 10;
                let dur = z + (u64::from(r) * 37 + i as u64) % 200;
                // The suspension starts after the barrier and the recorder's cost for it.
                let start = ti + 5_100 + extra;
                events.push(Event::Suspension(Suspension {
                    seq: (i / 3) as u64,
                    start: ticks(start),
                    z_ns: z,
                    end: ticks(start + dur),
                    flushed: i % 2 == 0,
                    overshoot_ns: dur - z,
                    offset_ns: offset as f64,
                    ..Default::default()
                }));
                events.push(sample(start + dur / 2, SampleKind::Suspension));
                extra += dur;
                suspended += dur;
            }
        }
        events.push(Event::Marker(Marker::FinalizeStart {
            time: ticks(finalize + extra),
        }));
        events.push(sample(finalize + extra + 50, SampleKind::Finalize));
        p.span[rank] = finalize - init;
        p.suspended[rank] = suspended;
        p.cost[rank] = extra - suspended;
        p.measured.push(RankTrace {
            rank: r,
            ticks_per_sec: 1e9 * k as f64,
            streams: vec![(0, events)],
        });
    }
    p
}

fn rebuild(dir: &std::path::Path, out: &std::path::Path, remove: Remove, hb: bool) -> Summary {
    let trace = Trace::open(dir).unwrap();
    let opts = Options {
        remove,
        hb,
        chunk_events: 97,
        ..Options::default()
    };
    rebuild::reconstruct(&trace, out, &opts, &mut |_, _| {}).unwrap()
}

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

/// Rank 0 resumes 500 ns late from a suspension of Z = 1000 ns; rank 1 sends it a message right
/// after resuming, which rank 0 then finds already there; then both meet in a barrier that rank 0
/// leaves early. Removing each rank's actual suspension puts rank 0's receive before the send and
/// its barrier exit before rank 1's entry.
fn failed_equalisation() -> Vec<RankTrace> {
    let mut r0 = function_defs();
    r0.extend([
        Event::Marker(Marker::InitDone { time: 0 }),
        Event::Call(barrier(100, 200)),
        Event::Suspension(Suspension {
            seq: 0,
            start: 200,
            z_ns: 1_000,
            end: 1_700,
            overshoot_ns: 500,
            ..Default::default()
        }),
        Event::Call(call(RECV, 1_795, 1_798, 1, 5)),
        Event::Completion(Completion {
            request: NO_REQUEST,
            source: 1,
            tag: 5,
            bytes: 8,
            cancelled: false,
        }),
        Event::Call(barrier(1_900, 1_905)),
        Event::Marker(Marker::FinalizeStart { time: 2_100 }),
    ]);
    let mut r1 = function_defs();
    r1.extend([
        Event::Marker(Marker::InitDone { time: 0 }),
        Event::Call(barrier(100, 200)),
        Event::Suspension(Suspension {
            seq: 0,
            start: 200,
            z_ns: 1_000,
            end: 1_200,
            ..Default::default()
        }),
        Event::Call(call(SEND, 1_300, 1_310, 0, 5)),
        Event::Call(barrier(1_620, 2_000)),
        Event::Marker(Marker::FinalizeStart { time: 2_100 }),
    ]);
    vec![
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
    ]
}

#[test]
fn failed_equalisation_is_found_and_repaired() {
    let dir = temp_dir("hb");
    write_trace(&dir, 2, &failed_equalisation(), 3);

    let plain = dir.with_extension("plain");
    let s = rebuild(&dir, &plain, Remove::DpPrime, false);
    assert_eq!(s.hb.before.message_violations, 1, "{:?}", s.hb);
    assert_eq!(s.hb.before.collective_violations, 1, "{:?}", s.hb);
    assert_eq!(s.hb.violations_after, 2, "not repaired without --hb");

    let fixed = dir.with_extension("fixed");
    let s = rebuild(&dir, &fixed, Remove::DpPrime, true);
    assert_eq!(s.hb.violations_before, 2);
    // As recorded the trace is consistent: the removal of the unequal suspension made both.
    assert_eq!(s.hb.violations_recorded, 0, "{:?}", s.hb);
    assert_eq!(s.hb.violations_after, 0, "{:?}", s.hb.after);
    // Rank 0: the receive now ends the minimum latency L after the send started (2 + L ns later
    // than before); the barrier's entry moves by as much and its exit waits for rank 1's entry at
    // 620 (plus L); the finalize marker keeps its 195 ns gap after the barrier exit.
    let l = reconstruct::hb::DEFAULT_MIN_LATENCY_NS;
    let r0 = read_lane(&fixed, 0, 0);
    let c = calls(&r0);
    assert_eq!((c[1].start, c[1].end), (295, 300 + l));
    assert_eq!((c[2].start, c[2].end), (402 + l, 620 + l));
    assert!(
        r0.contains(&Event::Marker(Marker::FinalizeStart { time: 815 + l })),
        "{r0:?}"
    );
    // Rank 1 needed nothing: it is exactly the DP'-removed trace.
    assert_eq!(
        calls(&read_lane(&fixed, 1, 0)),
        calls(&read_lane(&plain, 1, 0))
    );
    assert_eq!(s.hb.max_shift_s, (215 + l) as f64 * 1e-9);
    // The summary describes what was written: rank 0's span grew by its shift.
    let plain_span = rebuild(&dir, &plain, Remove::DpPrime, false).per_rank[0]
        .reconstructed_plus_s
        .unwrap();
    let fixed_span = s.per_rank[0].reconstructed_plus_s.unwrap();
    assert!(
        ((fixed_span - plain_span) - (215 + l) as f64 * 1e-9).abs() < 1e-12,
        "{plain_span} -> {fixed_span}"
    );
    for d in [dir.as_path(), plain.as_path(), fixed.as_path()] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn nonblocking_and_wildcard_receives_are_matched_by_mpi_order() {
    // Rank 1 posts two ANY_SOURCE receives and one specific receive; ranks 0 and 2 send. The
    // wildcard completions name the real sources; the pairs must follow them, not timestamps.
    let dir = temp_dir("match");
    let isend = |start, peer, tag, request| {
        let mut c = call(ISEND, start, start + 10, peer, tag);
        c.request = request;
        Event::Call(c)
    };
    let irecv = |start, peer, tag, request| {
        let mut c = call(IRECV, start, start + 10, peer, tag);
        c.request = request;
        Event::Call(c)
    };
    let wait = |start, end| Event::Call(call(WAIT, start, end, NO_RANK, NO_TAG));
    let done = |request, source, tag| {
        Event::Completion(Completion {
            request,
            source,
            tag,
            bytes: 8,
            cancelled: false,
        })
    };
    let mut r0 = function_defs();
    r0.extend([
        isend(100, 1, 7, 1),
        wait(120, 130),
        done(1, NO_RANK, NO_TAG),
        isend(200, 1, 7, 1),
        wait(220, 230),
        done(1, NO_RANK, NO_TAG),
    ]);
    let mut r1 = function_defs();
    r1.extend([
        irecv(50, format::ANY_SOURCE, 7, 10),
        irecv(60, format::ANY_SOURCE, 7, 11),
        irecv(70, 0, 7, 12),
        wait(300, 310),
        done(11, 0, 7),
        wait(320, 330),
        done(10, 2, 7),
        wait(340, 350),
        done(12, 0, 7),
    ]);
    let mut r2 = function_defs();
    r2.extend([
        isend(150, 1, 7, 3),
        wait(160, 170),
        done(3, NO_RANK, NO_TAG),
    ]);
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
        RankTrace {
            rank: 2,
            ticks_per_sec: 1e9,
            streams: vec![(0, r2)],
        },
    ];
    write_trace(&dir, 3, &ranks, 2);
    let (mut matches, report) = matches::matched_messages(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(report.messages, 3);
    assert_eq!(report.violations(), 0);
    assert_eq!(report.unmatched_sends + report.unmatched_receives, 0);
    matches.sort_by_key(|m| m.recv_done.index);
    let pairs: Vec<(u32, u64, u64, u64)> = matches
        .iter()
        .map(|m| {
            (
                m.send.rank,
                m.send.index,
                m.recv_post.index,
                m.recv_done.index,
            )
        })
        .collect();
    // Indices count the 7 function definitions first.
    assert_eq!(pairs, vec![(0, 7, 8, 10), (2, 7, 7, 12), (0, 10, 9, 14)]);
    std::fs::remove_dir_all(dir).unwrap();
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
        Event::Suspension(Suspension {
            seq: 0,
            start: 200,
            z_ns: 1_000,
            end: 1_200,
            ..Default::default()
        }),
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
            Event::Suspension(Suspension {
                seq: 0,
                start: 200,
                z_ns: 1_000,
                end: 1_200,
                ..Default::default()
            }),
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
fn sendrecv_rooted_and_nonblocking_collectives_follow_their_semantics() {
    let dir = temp_dir("shapes");
    let (sendrecv, bcast, ibarrier) = (20, 21, 22);
    let defs = || {
        let mut d = function_defs();
        d.push(Event::FunctionDef {
            id: sendrecv,
            name: "MPI_Sendrecv".into(),
        });
        d.push(Event::FunctionDef {
            id: bcast,
            name: "MPI_Bcast".into(),
        });
        d.push(Event::FunctionDef {
            id: ibarrier,
            name: "MPI_Ibarrier".into(),
        });
        d
    };
    let status = |source| {
        Event::Completion(Completion {
            request: NO_REQUEST,
            source,
            tag: 4,
            bytes: 8,
            cancelled: false,
        })
    };
    let coll = |func, start, end, request| {
        let mut c = call(func, start, end, NO_RANK, NO_TAG);
        c.root = 0;
        c.request = request;
        Event::Call(c)
    };
    let done = |request| {
        Event::Completion(Completion {
            request,
            source: NO_RANK,
            tag: NO_TAG,
            bytes: 0,
            cancelled: false,
        })
    };
    let mut r0 = defs();
    r0.extend([
        Event::Call(call(sendrecv, 100, 300, 1, 4)),
        status(1),
        // The root of a broadcast may leave before the others enter.
        coll(bcast, 400, 410, NO_REQUEST),
        coll(ibarrier, 1_000, 1_010, 9),
        Event::Call(call(WAIT, 1_100, 1_110, NO_RANK, NO_TAG)),
        done(9),
    ]);
    let mut r1 = defs();
    r1.extend([
        Event::Call(call(sendrecv, 150, 250, 0, 4)),
        status(0),
        // A non-root rank may not: it left at 390, before the root entered at 400.
        coll(bcast, 380, 390, NO_REQUEST),
        coll(ibarrier, 1_200, 1_210, 3),
        Event::Call(call(WAIT, 1_220, 1_230, NO_RANK, NO_TAG)),
        done(3),
    ]);
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
    write_trace(&dir, 2, &ranks, 3);
    let report = matches::check_happened_before(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(report.messages, 2);
    assert_eq!(report.message_violations, 0);
    assert_eq!(report.collective_exits, 4);
    // Rank 1's broadcast exit and rank 0's Ibarrier completion (1110, before rank 1 entered at 1200).
    assert_eq!(report.collective_violations, 2, "{report:?}");
    assert_eq!(report.unmatched_sends + report.unmatched_receives, 0);

    let out = dir.with_extension("out");
    let s = rebuild(&dir, &out, Remove::DpPrime, true);
    assert_eq!(s.hb.violations_after, 0, "{:?}", s.hb.after);
    let c0 = calls(&read_lane(&out, 0, 0));
    // Rank 1 was shifted by 10 ns + the minimum latency L at its broadcast exit, so it entered
    // the Ibarrier at 1310 + L; rank 0's Wait ends L after that.
    let l = reconstruct::hb::DEFAULT_MIN_LATENCY_NS;
    assert_eq!(calls(&read_lane(&out, 1, 0))[2].start, 1_210 + l);
    assert_eq!(c0[3].end, 1_210 + 2 * l);
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

/// A clock offset known to be wrong: rank 2's samples claim its clock is 5 µs further behind rank
/// 0's than it is, so after the offsets are applied its events land 5 µs late. Every message it
/// sends to rank 3 then arrives before it was sent (one per iteration, and no other message is
/// affected), and every barrier is left by the others before rank 2 entered it. `--hb` must remove
/// exactly those violations, which exist before it.
#[test]
fn a_known_clock_skew_causes_violations_that_hb_removes() {
    const SKEW_NS: f64 = 5_000.0;
    const ITERATIONS: u64 = 30;
    let dir = temp_dir("skew");
    let mut p = ring_program(4, ITERATIONS, 23);
    for e in &mut p.measured[2].streams[0].1 {
        match e {
            Event::Clock(s) => s.offset_ns += SKEW_NS,
            Event::Suspension(s) => s.offset_ns += SKEW_NS,
            _ => {}
        }
    }
    write_trace(&dir, p.world, &p.measured, 64);

    // The same trace with the true offsets has no violation (see the exact test above).
    let plain = dir.with_extension("plain");
    let s = rebuild(&dir, &plain, Remove::Both, false);
    assert_eq!(s.hb.before.messages, 4 * ITERATIONS);
    assert_eq!(
        s.hb.before.message_violations, ITERATIONS,
        "exactly rank 2's sends to rank 3: {:?}",
        s.hb.before
    );
    assert!(
        s.hb.before.collective_violations >= ITERATIONS,
        "every barrier: {:?}",
        s.hb.before
    );
    assert_eq!(
        s.hb.violations_after, s.hb.violations_before,
        "not repaired"
    );

    let fixed = dir.with_extension("fixed");
    let s = rebuild(&dir, &fixed, Remove::Both, true);
    assert!(s.hb.violations_before >= 2 * ITERATIONS, "{:?}", s.hb);
    assert_eq!(s.hb.violations_after, 0, "{:?}", s.hb.after);
    // The repair only delays: rank 3's receive from rank 2 now ends no earlier than the send began.
    let r2 = calls(&read_lane(&fixed, 2, 0));
    let r3 = calls(&read_lane(&fixed, 3, 0));
    let sends: Vec<_> = r2.iter().filter(|c| c.func == SEND).collect();
    let recvs: Vec<_> = r3.iter().filter(|c| c.func == RECV).collect();
    assert_eq!(
        (sends.len(), recvs.len()),
        (ITERATIONS as usize, ITERATIONS as usize)
    );
    for (s, r) in sends.iter().zip(&recvs) {
        assert!(r.end >= s.start, "send {s:?} received at {r:?}");
    }
    for d in [dir.as_path(), plain.as_path(), fixed.as_path()] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

fn one_stream(rank: u32, events: Vec<Event>) -> RankTrace {
    RankTrace {
        rank,
        ticks_per_sec: 1e9,
        streams: vec![(0, events)],
    }
}

fn recv_status(source: i32, tag: i32) -> Event {
    Event::Completion(Completion {
        request: NO_REQUEST,
        source,
        tag,
        bytes: 8,
        cancelled: false,
    })
}

/// Rank 2 stopped recording before it sent what rank 1 waits for. Rank 1 must go on without it
/// (rank 2 has nothing left), not hold everybody until somebody is forced forward: forcing rank
/// 0's receive first would number it before rank 1's send exists and mispair the channel 1 → 0
/// for the rest of the trace.
#[test]
fn a_rank_that_stopped_is_absent_not_waited_for() {
    let dir = temp_dir("absent");
    let mut r0 = function_defs();
    let mut r1 = function_defs();
    let mut r2 = function_defs();
    for i in 0..3u64 {
        let t = 1_000 + i * 1_000;
        r0.extend([Event::Call(call(RECV, t, t + 400, 1, 5)), recv_status(1, 5)]);
    }
    r1.extend([
        // Waits for rank 2, which never sends.
        Event::Call(call(RECV, 100, 900, 2, 1)),
        recv_status(2, 1),
    ]);
    for i in 0..3u64 {
        let t = 1_100 + i * 1_000;
        r1.push(Event::Call(call(SEND, t, t + 10, 0, 5)));
    }
    r2.push(Event::Marker(Marker::RecordingStopped { time: 50 }));
    write_trace(
        &dir,
        3,
        &[one_stream(0, r0), one_stream(1, r1), one_stream(2, r2)],
        4,
    );
    let (matches, report) = matches::matched_messages(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(report.messages, 3, "{report:?}");
    assert_eq!(report.unmatched_sends, 0, "{report:?}");
    assert_eq!(report.unmatched_receives, 1, "{report:?}");
    assert_eq!(report.waits_on_absent_ranks, 1, "{report:?}");
    assert_eq!(report.violations(), 0, "{report:?}");
    // The k-th send pairs with the k-th receive.
    for m in &matches {
        assert_eq!(m.recv_end - m.send_start, 300, "{m:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Rank 0's receive ends 50 ns before its send started (say, a failed equalisation); the repair
/// moves it, and with it rank 0's next events. Rank 0 then reaches a barrier long before rank 1:
/// it waited there anyway, so the correction is given back in that wait (the exit follows rank
/// 1's entry, not rank 0's shifted exit), and the finalize marker after it moves only as far as
/// rank 1's entry requires.
#[test]
fn a_correction_is_given_back_at_the_next_wait() {
    let dir = temp_dir("amortise");
    let l = reconstruct::hb::DEFAULT_MIN_LATENCY_NS;
    let r0 = {
        let mut e = function_defs();
        e.extend([
            Event::Marker(Marker::InitDone { time: 0 }),
            Event::Call(call(RECV, 500, 550, 1, 3)),
            recv_status(1, 3),
            Event::Call(barrier(1_000, 3_010)),
            Event::Marker(Marker::FinalizeStart { time: 3_100 }),
        ]);
        e
    };
    let r1 = {
        let mut e = function_defs();
        e.extend([
            Event::Marker(Marker::InitDone { time: 0 }),
            Event::Call(call(SEND, 600, 610, 0, 3)),
            Event::Call(barrier(3_000, 3_010)),
            Event::Marker(Marker::FinalizeStart { time: 3_100 }),
        ]);
        e
    };
    write_trace(&dir, 2, &[one_stream(0, r0), one_stream(1, r1)], 3);
    let out = dir.with_extension("out");
    let s = rebuild(&dir, &out, Remove::DpPrime, true);
    assert_eq!(s.hb.violations_before, 1, "{:?}", s.hb);
    assert_eq!(s.hb.violations_after, 0, "{:?}", s.hb.after);
    let r0 = read_lane(&out, 0, 0);
    let c = calls(&r0);
    // The receive ends L after the send started: a shift of 50 + L.
    assert_eq!(c[0].end, 600 + l);
    assert_eq!(c[1].start, 1_000 + 50 + l);
    // Not 3_010 + 50 + L: the barrier's exit waits for rank 1's entry (+ L) only.
    assert_eq!(c[1].end, (3_000 + l).max(3_010));
    let shift_after = (3_000 + l).max(3_010) - 3_010;
    assert!(
        r0.contains(&Event::Marker(Marker::FinalizeStart {
            time: 3_100 + shift_after
        })),
        "{r0:?}"
    );
    // The largest shift is still the one reported.
    assert_eq!(s.hb.max_shift_s, (50 + l) as f64 / 1e9);
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

fn on_host(rank: u32, host: &str, offset: f64, rtt: f64, mut events: Vec<Event>) -> RankTrace {
    let mut head = vec![
        Event::RankInfo(format::RankInfo {
            rank,
            world_size: 2,
            host: host.into(),
            ..Default::default()
        }),
        Event::Clock(ClockSample {
            local: 10,
            offset_ns: offset,
            rtt_ns: rtt,
            when: SampleKind::Init,
        }),
    ];
    head.append(&mut events);
    one_stream(rank, head)
}

/// Two hosts whose clocks are related within ± 500 ns (half the 1 µs round trip of the offset
/// exchange): a receive that ends 300 ns before its send started may be that error and is not a
/// violation; one that ends 800 ns before is. On one host, where there is no offset, 300 ns is.
#[test]
fn across_hosts_a_violation_must_exceed_the_offsets_uncertainty() {
    let trace = |host1: &str, rtt: f64| {
        let dir = temp_dir(&format!("hosts-{host1}-{rtt}"));
        let mut r0 = function_defs();
        r0.extend([
            Event::Call(call(SEND, 1_000, 1_010, 1, 1)),
            Event::Call(call(SEND, 5_000, 5_010, 1, 2)),
        ]);
        let mut r1 = function_defs();
        r1.extend([
            Event::Call(call(RECV, 600, 700, 0, 1)),
            recv_status(0, 1),
            Event::Call(call(RECV, 4_000, 4_200, 0, 2)),
            recv_status(0, 2),
        ]);
        write_trace(
            &dir,
            2,
            &[
                on_host(0, "a", 0.0, 0.0, r0),
                on_host(1, host1, 0.0, rtt, r1),
            ],
            4,
        );
        let report = matches::check_happened_before(&Trace::open(&dir).unwrap()).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        report
    };
    let other_host = trace("b", 1_000.0);
    assert_eq!(other_host.messages, 2);
    assert_eq!(other_host.message_violations, 1, "{other_host:?}");
    assert_eq!(other_host.recorded_message_violations, 1, "{other_host:?}");
    let same_host = trace("a", 1_000.0);
    assert_eq!(same_host.message_violations, 2, "{same_host:?}");
}

/// A 6-rank ring of 200 rounds, rank 2 with a second thread that sends, written in chunks of 13
/// events; returns the world size.
fn ring_with_a_worker_thread(dir: &std::path::Path) -> u32 {
    let mut program = ring_program(6, 200, 11);
    let worker: Vec<Event> = (0..150u64)
        .map(|i| {
            Event::Call(call(
                SEND,
                10_000_000_000 + i * 5_000,
                10_000_000_000 + i * 5_000 + 40,
                1,
                900,
            ))
        })
        .collect();
    program.measured[2].streams.push((1, worker));
    write_trace(dir, program.world, &program.measured, 13);
    program.world
}

#[test]
fn the_output_does_not_depend_on_the_number_of_threads() {
    // Ranks of one and of two threads, small input and output chunks so that every lane takes
    // many steps: any thread count must write the same bytes and report the same summary, with
    // and without the repair (whose output comes from the matcher instead of the workers).
    let dir = temp_dir("threads");
    let world = ring_with_a_worker_thread(&dir);
    let trace = Trace::open(&dir).unwrap();
    for hb in [false, true] {
        let mut first: Option<(Vec<Vec<u8>>, String)> = None;
        for threads in [1, 2, 3, 7] {
            let out = dir.with_extension(format!("out-{hb}-{threads}"));
            let opts = Options {
                remove: Remove::Both,
                hb,
                chunk_events: 29,
                threads,
                ..Options::default()
            };
            let mut summary = rebuild::reconstruct(&trace, &out, &opts, &mut |_, _| {}).unwrap();
            summary.out.clear();
            let files: Vec<Vec<u8>> = (0..world)
                .map(|r| std::fs::read(out.join(format::rank_file_name(r, 0))).unwrap())
                .collect();
            let json = serde_json::to_string(&summary).unwrap();
            assert!(summary.events > 3_000, "{}", summary.events);
            match &first {
                None => first = Some((files, json)),
                Some((f, j)) => {
                    assert!(files == *f, "hb {hb}: {threads} threads wrote other bytes");
                    assert_eq!(json, *j, "hb {hb}: {threads} threads");
                }
            }
            std::fs::remove_dir_all(out).unwrap();
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs `reconstruct_in_job` on `processes` threads standing in for the processes of an MPI job
/// (the job's messages go over channels); process `p` writes to `outs[p]`. Returns each
/// process's result, process 0's first.
fn run_as_job(
    trace: &Trace,
    outs: &[std::path::PathBuf],
    opts: &Options,
) -> Vec<Result<Option<Summary>, rebuild::RebuildError>> {
    let transports = reconstruct::job::threads::connected(outs.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = transports
            .into_iter()
            .zip(outs)
            .map(|(t, out)| {
                scope.spawn(move || {
                    rebuild::reconstruct_in_job(trace, out, opts, Some(&t), &mut |_, _| {})
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn an_mpi_job_writes_what_one_process_writes() {
    // Ranks of one and of two threads, small chunks so that every lane takes many steps, split
    // over 2, 3 and 8 processes (8 > ranks: one owns nothing): the files and the summary must
    // be those of one process, with and without the repair (where process 0 writes every file).
    let dir = temp_dir("job");
    let world = ring_with_a_worker_thread(&dir);
    let trace = Trace::open(&dir).unwrap();
    let read_files = |out: &std::path::Path| -> Vec<Vec<u8>> {
        (0..world)
            .map(|r| std::fs::read(out.join(format::rank_file_name(r, 0))).unwrap())
            .collect()
    };
    // The replay learns from every rank first (on process 0) and then replays as the repair does.
    for (hb, model) in [
        (false, Model::Subtract),
        (true, Model::Subtract),
        (false, Model::Replay),
    ] {
        let opts = Options {
            remove: Remove::Both,
            hb,
            model,
            chunk_events: 29,
            threads: 1,
            ..Options::default()
        };
        let single = dir.with_extension(format!("single-{hb}-{}", model.name()));
        let mut expected = rebuild::reconstruct(&trace, &single, &opts, &mut |_, _| {}).unwrap();
        expected.out.clear();
        let expected_files = read_files(&single);
        for processes in [2usize, 3, 8] {
            let out = dir.with_extension(format!("job-{hb}-{}-{processes}", model.name()));
            let outs = vec![out.clone(); processes];
            let mut results = run_as_job(&trace, &outs, &opts).into_iter();
            let mut summary = results
                .next()
                .unwrap()
                .unwrap()
                .expect("process 0's summary");
            for (p, r) in results.enumerate() {
                assert!(
                    matches!(r, Ok(None)),
                    "process {}: {:?}",
                    p + 1,
                    r.map(|_| ())
                );
            }
            summary.out.clear();
            assert!(
                read_files(&out) == expected_files,
                "hb {hb}, {model:?}: {processes} processes wrote other bytes"
            );
            assert_eq!(
                serde_json::to_string(&summary).unwrap(),
                serde_json::to_string(&expected).unwrap(),
                "hb {hb}, {model:?}: {processes} processes"
            );
            std::fs::remove_dir_all(out).unwrap();
        }
        std::fs::remove_dir_all(single).unwrap();
    }
}

#[test]
fn a_damaged_trace_reads_the_same_in_a_job_as_in_one_process() {
    // A flipped byte in rank 4's file: the owner that reads it must report the same skipped range
    // and write the same output as one process (the skipped list travels with the metadata).
    let dir = temp_dir("job-damage");
    let world = ring_with_a_worker_thread(&dir);
    let victim = dir.join(format::rank_file_name(4, 0));
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&victim, bytes).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let opts = Options {
        remove: Remove::Both,
        chunk_events: 29,
        threads: 1,
        ..Options::default()
    };
    let single = dir.with_extension("single");
    let mut expected = rebuild::reconstruct(&trace, &single, &opts, &mut |_, _| {}).unwrap();
    expected.out.clear();
    assert!(
        !expected.skipped.is_empty(),
        "the flipped byte was not noticed"
    );
    let job = dir.with_extension("job");
    let mut results = run_as_job(&trace, &vec![job.clone(); 3], &opts).into_iter();
    let mut summary = results.next().unwrap().unwrap().unwrap();
    summary.out.clear();
    assert_eq!(
        serde_json::to_string(&summary).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
    for r in 0..world {
        let name = format::rank_file_name(r, 0);
        assert!(
            std::fs::read(job.join(&name)).unwrap() == std::fs::read(single.join(&name)).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn a_process_that_cannot_write_fails_the_job_without_a_hang() {
    // Process 2 of 3 is given an output directory it cannot create (a path under a file): it
    // must tell process 0, which reports it by number and cause, and every process returns.
    let dir = temp_dir("job-fail");
    let program = ring_program(6, 50, 3);
    write_trace(&dir, program.world, &program.measured, 13);
    let trace = Trace::open(&dir).unwrap();
    let good = dir.with_extension("out");
    let blocker = dir.with_extension("file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let outs = vec![good.clone(), good.clone(), blocker.join("out")];
    let opts = Options {
        threads: 1,
        ..Options::default()
    };
    let results = run_as_job(&trace, &outs, &opts);
    let Err(err) = &results[0] else {
        panic!("process 0 reports the failure");
    };
    let text = err.to_string();
    assert!(
        text.contains("process 2") && text.contains(&blocker.display().to_string()),
        "{text}"
    );
    assert!(matches!(results[1], Ok(None)), "process 1");
    assert!(
        matches!(results[2], Ok(None)),
        "process 2 reported to process 0"
    );
    std::fs::remove_file(&blocker).unwrap();
    let _ = std::fs::remove_dir_all(&good);
}

/// Which collective of [`intercomm_program`] has a rank leave too early.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum InterFault {
    None,
    /// Rank 0 (group A) leaves the Barrier before rank 2 (group B) entered.
    Barrier,
    /// Ranks 2 and 3 leave the Bcast before its root, rank 0, entered.
    Bcast,
    /// The Reduce's root, rank 3, leaves before rank 1 (the other group) entered.
    Reduce,
    /// Rank 1 (A's second rank) completes the Ibarrier after B's first rank entered but before
    /// B's second, rank 3, did: what Open MPI's libnbc does (it relays the barrier through the
    /// groups' first ranks), a violation of the standard's barrier under any other library.
    IbarrierRelayed(&'static str),
}

/// 4 ranks, an intercommunicator (id 3) between groups A = {0, 1} and B = {2, 3}, and on it a
/// Barrier, an Allreduce, a Bcast rooted at rank 0 (A's rank 0), an Ibarrier and a Reduce rooted
/// at rank 3 (B's rank 1). The ranks that pass `MPI_PROC_NULL` enter late, and a rank of B leaves
/// the Barrier before the other rank of B entered: neither is a violation, as nobody waits for
/// the former, and an intercommunicator's barrier waits for the other group only.
fn intercomm_program(fault: InterFault) -> Vec<RankTrace> {
    let (create, allreduce, bcast, ibarrier, reduce) = (30, 31, 32, 33, 34);
    let inter = 3;
    (0..4u32)
        .map(|r| {
            let a = r < 2;
            let mut e = function_defs();
            for (id, name) in [
                (create, "MPI_Intercomm_create"),
                (allreduce, "MPI_Allreduce"),
                (bcast, "MPI_Bcast"),
                (ibarrier, "MPI_Ibarrier"),
                (reduce, "MPI_Reduce"),
            ] {
                e.push(Event::FunctionDef {
                    id,
                    name: name.into(),
                });
            }
            let (local, remote) = if a {
                (vec![0, 1], vec![2, 3])
            } else {
                (vec![2, 3], vec![0, 1])
            };
            if let InterFault::IbarrierRelayed(library) = fault {
                e.push(Event::RankInfo(format::RankInfo {
                    rank: r,
                    world_size: 4,
                    pid: 100 + r,
                    host: "node".into(),
                    mpi_library: library.into(),
                    run_id: String::new(),
                }));
            }
            e.push(Event::Marker(Marker::InitDone { time: 0 }));
            e.push(Event::CommDef {
                id: inter,
                members: local,
            });
            e.push(Event::RemoteGroup {
                id: inter,
                members: remote,
            });
            let mut create_call = call(create, 100, 200, NO_RANK, 99);
            create_call.comm = 0;
            e.push(Event::Call(create_call));
            let on = |func, start, end, root: i32, request| {
                let mut c = call(func, start, end, NO_RANK, NO_TAG);
                c.comm = inter;
                c.root = root;
                c.request = request;
                Event::Call(c)
            };
            // Barrier: rank 2 enters last, at 1_300.
            let barrier_in = if r == 2 { 1_300 } else { 1_000 };
            let barrier_out = match r {
                0 if fault == InterFault::Barrier => 1_050,
                // Before rank 2 of its own group entered, after all of A did (and the minimum
                // latency with it).
                3 => 1_150,
                _ => 1_400,
            };
            e.push(on(BARRIER, barrier_in, barrier_out, NO_RANK, NO_REQUEST));
            e.push(on(allreduce, 2_000, 2_100, NO_RANK, NO_REQUEST));
            // Bcast from rank 0: it may leave at once; rank 1 moves no data.
            e.push(match r {
                0 => on(bcast, 3_000, 3_010, format::ROOT, NO_REQUEST),
                1 => on(bcast, 3_500, 3_510, format::PROC_NULL, NO_REQUEST),
                _ if fault == InterFault::Bcast => on(bcast, 2_900, 2_950, 0, NO_REQUEST),
                _ => on(bcast, 2_900, 3_150, 0, NO_REQUEST),
            });
            let request = 40 + u64::from(r);
            let (ibarrier_in, wait_out) = match (r, fault) {
                (1, InterFault::IbarrierRelayed(_)) => (4_001, 4_150),
                (3, InterFault::IbarrierRelayed(_)) => (4_180, 4_200),
                _ => (4_000 + u64::from(r), 4_200),
            };
            e.push(on(
                ibarrier,
                ibarrier_in,
                ibarrier_in + 10,
                NO_RANK,
                request,
            ));
            e.push(Event::Call(call(WAIT, 4_100, wait_out, NO_RANK, NO_TAG)));
            e.push(Event::Completion(Completion {
                request,
                source: NO_RANK,
                tag: NO_TAG,
                bytes: 0,
                cancelled: false,
            }));
            // Reduce to rank 3: it waits for A (rank 1 enters at 5_100); rank 2 moves no data.
            e.push(match r {
                3 if fault == InterFault::Reduce => on(reduce, 5_000, 5_050, format::ROOT, 0),
                3 => on(reduce, 5_000, 5_200, format::ROOT, NO_REQUEST),
                2 => on(reduce, 5_600, 5_610, format::PROC_NULL, NO_REQUEST),
                1 => on(reduce, 5_100, 5_110, 1, NO_REQUEST),
                _ => on(reduce, 5_000, 5_010, 1, NO_REQUEST),
            });
            e.push(Event::Marker(Marker::FinalizeStart { time: 6_000 }));
            one_stream(r, e)
        })
        .collect()
}

#[test]
fn intercommunicator_collectives_wait_for_the_other_group() {
    let l = reconstruct::hb::DEFAULT_MIN_LATENCY_NS;
    for (fault, violations) in [
        (InterFault::None, 0),
        (InterFault::Barrier, 1),
        (InterFault::Bcast, 2),
        (InterFault::Reduce, 1),
        (
            InterFault::IbarrierRelayed("Open MPI v4.1.4, package: Debian OpenMPI"),
            0,
        ),
        (InterFault::IbarrierRelayed("MPICH Version: 4.0.2"), 1),
    ] {
        let name: String = format!("inter-{fault:?}")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let dir = temp_dir(&name);
        write_trace(&dir, 4, &intercomm_program(fault), 5);
        let report = matches::check_happened_before(&Trace::open(&dir).unwrap()).unwrap();
        // Every rank leaves each of the 5 collectives once: both groups share each instance.
        assert_eq!(report.collective_exits, 4 * 5, "{fault:?}: {report:?}");
        assert_eq!(
            report.collective_violations, violations,
            "{fault:?}: {report:?}"
        );
        assert_eq!(report.waits_on_absent_ranks, 0, "{fault:?}: {report:?}");

        let out = dir.with_extension("out");
        let s = rebuild(&dir, &out, Remove::DpPrime, true);
        assert_eq!(s.hb.violations_before, violations, "{fault:?}: {:?}", s.hb);
        assert_eq!(s.hb.violations_after, 0, "{fault:?}: {:?}", s.hb.after);
        let exit = |rank, k: usize| calls(&read_lane(&out, rank, 0))[k].end;
        match fault {
            // Moved to L after rank 2's entry.
            InterFault::Barrier => assert_eq!(exit(0, 1), 1_300 + l),
            InterFault::Bcast => {
                assert_eq!(exit(2, 3), 3_000 + l);
                assert_eq!(exit(3, 3), 3_000 + l);
            }
            InterFault::Reduce => assert_eq!(exit(3, 6), 5_100 + l),
            // Open MPI: rank 1 waited for rank 2 (B's first) only, so nothing moves.
            InterFault::IbarrierRelayed(library) if violations == 0 => {
                assert!(library.starts_with("Open MPI"));
                assert_eq!(exit(1, 5), 4_150);
            }
            // Elsewhere its Wait ends at L after rank 3's entry.
            InterFault::IbarrierRelayed(_) => assert_eq!(exit(1, 5), 4_180 + l),
            // Nothing moved: not rank 3 for leaving the barrier before rank 2 entered, nor
            // anybody for the late ranks that passed MPI_PROC_NULL.
            InterFault::None => {
                assert_eq!(exit(3, 1), 1_150);
                assert_eq!(exit(2, 3), 3_150);
                assert_eq!(exit(3, 6), 5_200);
                assert_eq!(s.hb.max_shift_s, 0.0);
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(out).unwrap();
    }
}

/// An intercommunicator made by another constructor (here `MPI_Comm_dup` of one, which records
/// no `Intercomm_create`) is still paired: its `RemoteGroup` record names the other group. Same
/// program and expectations as above, with the constructor renamed.
#[test]
fn intercommunicators_are_paired_by_their_groups_whatever_made_them() {
    for (fault, violations) in [(InterFault::None, 0), (InterFault::Barrier, 1)] {
        let traces: Vec<RankTrace> = intercomm_program(fault)
            .into_iter()
            .map(|mut t| {
                for (_, events) in t.streams.iter_mut() {
                    for e in events.iter_mut() {
                        if let Event::FunctionDef { name, .. } = e
                            && name == "MPI_Intercomm_create"
                        {
                            *name = "MPI_Comm_dup".into();
                        }
                    }
                }
                t
            })
            .collect();
        let dir = temp_dir(&format!("inter-dup-{violations}"));
        write_trace(&dir, 4, &traces, 5);
        let report = matches::check_happened_before(&Trace::open(&dir).unwrap()).unwrap();
        assert_eq!(report.collective_exits, 4 * 5, "{fault:?}: {report:?}");
        assert_eq!(
            report.collective_violations, violations,
            "{fault:?}: {report:?}"
        );
        assert_eq!(report.waits_on_absent_ranks, 0, "{fault:?}: {report:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// A data collective that moves nothing (HPL broadcasts count 0) returns at once, so leaving it
/// before the root entered is no violation; with data it is, and a barrier waits with none.
#[test]
fn collectives_that_move_no_data_wait_for_nobody_but_barriers_do() {
    let bcast = 30;
    for (bytes, barrier_early, violations) in [(0, false, 0), (8, false, 1), (0, true, 1)] {
        let traces: Vec<RankTrace> = (0..2u32)
            .map(|r| {
                let mut e = function_defs();
                e.push(Event::FunctionDef {
                    id: bcast,
                    name: "MPI_Bcast".into(),
                });
                e.push(Event::Marker(Marker::InitDone { time: 0 }));
                // Rank 1 leaves the Bcast rooted at rank 0 (which enters at 1_500) at 1_010.
                let mut b = if r == 0 {
                    call(bcast, 1_500, 1_510, NO_RANK, NO_TAG)
                } else {
                    call(bcast, 1_000, 1_010, NO_RANK, NO_TAG)
                };
                b.root = 0;
                b.bytes = bytes;
                e.push(Event::Call(b));
                // Rank 1 leaves the barrier before rank 0 entered it only in the third case.
                let (start, end) = match (r, barrier_early) {
                    (0, _) => (2_500, 2_600),
                    (_, true) => (2_000, 2_100),
                    _ => (2_000, 2_600),
                };
                let mut barrier = call(BARRIER, start, end, NO_RANK, NO_TAG);
                barrier.bytes = 0;
                e.push(Event::Call(barrier));
                e.push(Event::Marker(Marker::FinalizeStart { time: 3_000 }));
                one_stream(r, e)
            })
            .collect();
        let dir = temp_dir(&format!("nodata-{bytes}-{barrier_early}"));
        write_trace(&dir, 2, &traces, 5);
        let report = matches::check_happened_before(&Trace::open(&dir).unwrap()).unwrap();
        assert_eq!(report.collective_exits, 4, "{report:?}");
        assert_eq!(
            report.collective_violations, violations,
            "bytes {bytes}, early barrier {barrier_early}: {report:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// General active target on a window over both ranks of a 2-rank world: rank 0 exposes its window
/// to rank 1 (`Win_post` group {1}, `Win_wait`), rank 1 accesses it (`Win_start` group {0},
/// `Win_complete`), twice. The target's `Win_wait` ends only after the origin called
/// `Win_complete`, so with `early` the first wait ending at 1_500, before the complete started at
/// 2_000, is a violation, which `--hb` moves to L after 2_000. Without `groups` (a trace from
/// before chunk version 7) the epochs cannot be paired and nothing is checked.
fn pscw_program(early: bool, groups: bool) -> Vec<RankTrace> {
    let (post, start, complete, wait) = (40, 41, 42, 43);
    let win = 5;
    (0..2u32)
        .map(|r| {
            let mut e = function_defs();
            for (id, name) in [
                (post, "MPI_Win_post"),
                (start, "MPI_Win_start"),
                (complete, "MPI_Win_complete"),
                (wait, "MPI_Win_wait"),
            ] {
                e.push(Event::FunctionDef {
                    id,
                    name: name.into(),
                });
            }
            e.push(Event::Marker(Marker::InitDone { time: 0 }));
            e.push(Event::CommDef {
                id: win,
                members: vec![0, 1],
            });
            e.push(Event::WinDef { id: win, comm: 0 });
            let on = |func, start, end| {
                let mut c = call(func, start, end, NO_RANK, NO_TAG);
                c.comm = win;
                Event::Call(c)
            };
            for k in 0..2u64 {
                let t = k * 10_000;
                if groups {
                    e.push(Event::EpochGroup {
                        win,
                        members: vec![1 - r],
                    });
                }
                if r == 0 {
                    e.push(on(post, t + 1_000, t + 1_010));
                    let end = if early && k == 0 { 1_500 } else { t + 2_100 };
                    e.push(on(wait, t + 1_100, end));
                } else {
                    e.push(on(start, t + 1_000, t + 1_010));
                    e.push(on(complete, t + 2_000, t + 2_050));
                }
            }
            e.push(Event::Marker(Marker::FinalizeStart { time: 30_000 }));
            one_stream(r, e)
        })
        .collect()
}

#[test]
fn pscw_wait_ends_after_every_origin_completed() {
    let l = reconstruct::hb::DEFAULT_MIN_LATENCY_NS;
    for (early, groups, epochs, violations) in
        [(false, true, 2, 0), (true, true, 2, 1), (true, false, 0, 0)]
    {
        let dir = temp_dir(&format!("pscw-{early}-{groups}"));
        write_trace(&dir, 2, &pscw_program(early, groups), 5);
        let report = matches::check_happened_before(&Trace::open(&dir).unwrap()).unwrap();
        let case = format!("early {early}, groups {groups}: {report:?}");
        assert_eq!(report.rma_epochs, epochs, "{case}");
        assert_eq!(report.epoch_violations, violations, "{case}");
        assert_eq!(report.violations(), violations, "{case}");
        assert_eq!(report.recorded_epoch_violations, violations, "{case}");
        assert_eq!(
            report.unmatched_sends + report.unmatched_receives,
            0,
            "{case}"
        );
        assert_eq!(report.messages, 0, "epochs are no messages: {case}");

        let out = dir.with_extension("out");
        let s = rebuild(&dir, &out, Remove::DpPrime, true);
        assert_eq!(s.hb.violations_before, violations, "{case}");
        assert_eq!(s.hb.violations_after, 0, "{:?}", s.hb.after);
        assert_eq!(
            s.hb.after.map(|a| a.rma_epochs),
            Some(epochs),
            "{:?}",
            s.hb.after
        );
        let wait_end = calls(&read_lane(&out, 0, 0))[1].end;
        if early && groups {
            assert_eq!(
                wait_end,
                2_000 + l,
                "moved to L after the origin's Win_complete"
            );
        } else if !early {
            assert_eq!(wait_end, 2_100, "nothing moved");
        }
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(out).unwrap();
    }
}
