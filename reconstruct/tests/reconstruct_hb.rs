//! Happened-before on synthetic traces: messages and collectives matched by MPI's rules
//! (wildcards, nonblocking calls, rooted and intercommunicator collectives, PSCW epochs), a failed
//! equalisation or a known clock skew found and repaired, and violations judged within the
//! clocks' uncertainty.

mod common;
mod known_run;

use common::*;
use format::{
    ClockSample, Completion, Event, Marker, NO_RANK, NO_REQUEST, NO_TAG, SampleKind, Suspension,
};
use known_run::*;
use reconstruct::matches;
use reconstruct::rebuild::Remove;
use trace::Trace;

/// Rank 0 resumes 500 ns late from a suspension of Z = 1000 ns; rank 1 sends it a message right
/// after resuming, which rank 0 then finds already there; then both meet in a barrier that rank 0
/// leaves early. Removing each rank's actual suspension puts rank 0's receive before the send and
/// its barrier exit before rank 1's entry.
fn failed_equalisation() -> Vec<RankTrace> {
    let mut r0 = function_defs();
    r0.extend([
        Event::Marker(Marker::InitDone { time: 0 }),
        Event::Call(barrier(100, 200)),
        Event::Suspension(Box::new(Suspension {
            seq: 0,
            start: 200,
            z_ns: 1_000,
            end: 1_700,
            overshoot_ns: 500,
            ..Default::default()
        })),
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
        Event::Suspension(Box::new(Suspension {
            seq: 0,
            start: 200,
            z_ns: 1_000,
            end: 1_200,
            ..Default::default()
        })),
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
fn sendrecv_rooted_and_nonblocking_collectives_follow_their_semantics() {
    let dir = temp_dir("shapes");
    let (sendrecv, bcast, ibarrier) = (20, 21, 22);
    let defs = || {
        function_defs_with(&[
            (sendrecv, "MPI_Sendrecv"),
            (bcast, "MPI_Bcast"),
            (ibarrier, "MPI_Ibarrier"),
        ])
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

/// A blocking wildcard receive whose status is missing (a trace cut or damaged between the call
/// and its completion) names no message: it is counted unmatched, not dropped from every count,
/// and it does not take the message the next receive names.
#[test]
fn a_blocking_receive_without_its_status_is_unmatched() {
    let dir = temp_dir("no-status");
    let mut r0 = function_defs();
    let mut r1 = function_defs();
    r0.extend([
        Event::Call(call(
            RECV,
            1_000,
            1_400,
            format::ANY_SOURCE,
            format::ANY_TAG,
        )),
        Event::Call(call(RECV, 2_000, 2_400, 1, 5)),
        recv_status(1, 5),
    ]);
    r1.push(Event::Call(call(SEND, 2_100, 2_110, 0, 5)));
    write_trace(&dir, 2, &[one_stream(0, r0), one_stream(1, r1)], 4);
    let (matches, report) = matches::matched_messages(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(report.messages, 1, "{report:?}");
    assert_eq!(report.unmatched_sends, 0, "{report:?}");
    assert_eq!(report.unmatched_receives, 1, "{report:?}");
    assert_eq!(matches.len(), 1);
    assert_eq!(
        matches[0].recv_end - matches[0].send_start,
        300,
        "{:?}",
        matches[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
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

/// Two threads of rank 0 receive from rank 1 on one key at once (MPICH's
/// `threads/pt2pt/multisend`). MPI does not order such receives: the one that started second
/// ended first, so it took the first message. Paired in start order, it would have taken a send
/// that started after it ended, a violation in times from one clock.
#[test]
fn concurrent_receives_of_two_threads_are_paired_in_the_order_they_ended() {
    let dir = temp_dir("threads-recv");
    let mut first_to_start = function_defs();
    first_to_start.extend([Event::Call(call(RECV, 100, 1_000, 1, 5)), recv_status(1, 5)]);
    let second_to_start = vec![Event::Call(call(RECV, 200, 500, 1, 5)), recv_status(1, 5)];
    let mut r1 = function_defs();
    r1.extend([
        Event::Call(call(SEND, 300, 310, 0, 5)),
        Event::Call(call(SEND, 700, 710, 0, 5)),
    ]);
    let r0 = RankTrace {
        rank: 0,
        ticks_per_sec: 1e9,
        streams: vec![(0, first_to_start), (1, second_to_start)],
    };
    write_trace(&dir, 2, &[r0, one_stream(1, r1)], 4);
    let (matches, report) = matches::matched_messages(&Trace::open(&dir).unwrap()).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    assert_eq!(report.messages, 2, "{report:?}");
    assert_eq!(report.recorded_message_violations, 0, "{report:?}");
    let mut pairs: Vec<(u64, u64)> = matches.iter().map(|m| (m.send_start, m.recv_end)).collect();
    pairs.sort_unstable();
    assert_eq!(pairs, [(300, 500), (700, 1_000)], "{matches:?}");
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
        Event::RankInfo(Box::new(format::RankInfo {
            rank,
            world_size: 2,
            host: host.into(),
            ..Default::default()
        })),
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
            let mut e = function_defs_with(&[
                (create, "MPI_Intercomm_create"),
                (allreduce, "MPI_Allreduce"),
                (bcast, "MPI_Bcast"),
                (ibarrier, "MPI_Ibarrier"),
                (reduce, "MPI_Reduce"),
            ]);
            let (local, remote) = if a {
                (vec![0, 1], vec![2, 3])
            } else {
                (vec![2, 3], vec![0, 1])
            };
            if let InterFault::IbarrierRelayed(library) = fault {
                e.push(Event::RankInfo(Box::new(format::RankInfo {
                    rank: r,
                    world_size: 4,
                    pid: 100 + r,
                    host: "node".into(),
                    mpi_library: library.into(),
                    run_id: String::new(),
                })));
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
                let mut e = function_defs_with(&[(bcast, "MPI_Bcast")]);
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
            let mut e = function_defs_with(&[
                (post, "MPI_Win_post"),
                (start, "MPI_Win_start"),
                (complete, "MPI_Win_complete"),
                (wait, "MPI_Win_wait"),
            ]);
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
