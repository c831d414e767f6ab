//! The replay model on synthetic programs whose untraced timing is known exactly.
//!
//! A small simulator runs each program twice with the same rules of the machine: untraced, and
//! traced, where the recorder spends a cost after every call (DP) that delays the rank's next
//! step. A call that waits ends at the later of its own start plus its intrinsic cost and the
//! moment its dependency is there (a matched send's start plus the transfer time, the last other
//! entrant of a barrier plus the exit time). The traced run's waits are therefore what the
//! partners' costs made them, as in a real run. `reconstruct --model replay` must give back the
//! untraced run to the nanosecond; `--model subtract` cannot where a wait's end is set by
//! another rank.

mod common;
mod synthetic_program;

use std::collections::{HashMap, VecDeque};

use common::*;
use format::{Event, Marker};
use reconstruct::matches::check_happened_before;
use reconstruct::rebuild::{self, AfterCountedBy, Model, Options, Remove, Summary};
use synthetic_program::*;
use trace::Trace;

/// Reconstructs with the output matched again, which fails if the violations the pass counted
/// in its own output are not the ones the output holds.
fn reconstruct(dir: &std::path::Path, out: &std::path::Path, model: Model) -> Summary {
    reconstruct_verified(dir, out, model, true)
}

fn reconstruct_verified(
    dir: &std::path::Path,
    out: &std::path::Path,
    model: Model,
    verify: bool,
) -> Summary {
    let opts = Options {
        remove: Remove::Both,
        model,
        verify,
        ..Options::default()
    };
    rebuild::reconstruct(&Trace::open(dir).unwrap(), out, &opts, &mut |_, _| {}).unwrap()
}

/// Writes `runs` as a trace named after `case`, replays it without `verify`, and checks that the
/// pass counted its output's violations the way `want` says and that the count is the output's.
/// The trace's directory and the pass's summary.
fn replay_counted(runs: &[Run], case: &str, want: AfterCountedBy) -> (TempDir, Summary) {
    let dir = temp_dir(&format!("replay-{case}"));
    write(&dir, runs);
    let out = temp_dir(&format!("replay-{case}-out"));
    let counted = reconstruct_verified(&dir, &out, Model::Replay, false);
    assert_eq!(counted.hb.after_counted_by, Some(want), "{case}");
    let read = check_happened_before(&Trace::open(&out).unwrap()).unwrap();
    assert_eq!(counted.hb.after, Some(read), "{case}");
    (dir, counted)
}

/// Output calls of every rank, as (start, end) relative to the rank's `MPI_Init` end.
fn replayed_calls(out: &std::path::Path, ranks: usize) -> Vec<Vec<(u64, u64)>> {
    (0..ranks as u32)
        .map(|r| {
            let events = read_lane(out, r, 0);
            let init = events
                .iter()
                .find_map(|e| match e {
                    Event::Marker(Marker::InitDone { time }) => Some(*time),
                    _ => None,
                })
                .expect("InitDone");
            calls(&events)
                .iter()
                .map(|c| (c.start - init, c.end - init))
                .collect()
        })
        .collect()
}

fn untraced_calls(runs: &[Run]) -> Vec<Vec<(u64, u64)>> {
    runs.iter()
        .map(|run| {
            run.calls
                .iter()
                .map(|c| (c.start - INIT_NS, c.end - INIT_NS))
                .collect()
        })
        .collect()
}

fn untraced_span(runs: &[Run]) -> u64 {
    runs.iter().map(|r| r.finalize - INIT_NS).max().unwrap()
}

/// Simulates `ops` untraced and traced, reconstructs the traced trace with both models, and
/// checks that the replay gives back every call of the untraced run and its span exactly.
/// Returns subtract's span error (ns), so that a case can also say what subtract gets wrong, and
/// the replay's summary.
fn check_exact(name: &str, ops: &[Vec<Op>]) -> (i64, Summary) {
    check_exact_reading(name, ops, 0)
}

/// [`check_exact`], where each traced call's record also holds one clock read of `read_ns`.
fn check_exact_reading(name: &str, ops: &[Vec<Op>], read_ns: u16) -> (i64, Summary) {
    let untraced = simulate(ops, |_, _| 0);
    let traced = simulate_reading(ops, recorder_cost, u64::from(read_ns));
    assert_ne!(
        untraced, traced,
        "{name}: the recorder's cost changed nothing"
    );
    let dir = temp_dir(&format!("replay-{name}"));
    let replay_out = temp_dir(&format!("replay-{name}-out"));
    let subtract_out = temp_dir(&format!("replay-{name}-sub"));
    write_reading(&dir, &traced, read_ns);
    let replay = reconstruct(&dir, &replay_out, Model::Replay);
    let subtract = reconstruct(&dir, &subtract_out, Model::Subtract);
    let want = untraced_calls(&untraced);
    let got = replayed_calls(&replay_out, ops.len());
    for (r, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w.len(), g.len(), "{name}: rank {r} call count");
        for (k, (wc, gc)) in w.iter().zip(g).enumerate() {
            assert_eq!(
                wc, gc,
                "{name}: rank {r} call {k} (start, end) untraced vs replayed"
            );
        }
    }
    let span = untraced_span(&untraced) as f64 / 1e9;
    assert!(
        (replay.reconstructed_s - span).abs() < 0.5e-9,
        "{name}: replayed span {} s, untraced {} s",
        replay.reconstructed_s,
        span
    );
    assert_eq!(replay.hb.violations_after, 0, "{name}: {:?}", replay.hb);
    let report = &replay.hb.before;
    assert_eq!(
        report.unmatched_sends + report.unmatched_receives,
        0,
        "{name}: {report:?}"
    );
    (
        ((subtract.reconstructed_s - span) * 1e9).round() as i64,
        replay,
    )
}

/// Each case mixes waits of both kinds, so that the estimates have instances where the
/// dependency came late and where it did not (as a real run does).
fn alternating_p2p(iterations: usize, late: u64) -> Vec<Vec<Op>> {
    let mut r0 = Vec::new();
    let mut r1 = Vec::new();
    for i in 0..iterations {
        if i % 2 == 0 {
            // Late sender: rank 1 waits in its receive.
            r0.extend([Op::Compute(late), Op::Send(1)]);
            r1.extend([Op::Recv(0)]);
        } else {
            // Late receiver: the message is there when rank 1 asks.
            r0.extend([Op::Send(1)]);
            r1.extend([Op::Compute(late), Op::Recv(0)]);
        }
        // Both meet, so that the case is repeatable.
        r0.push(Op::Barrier);
        r1.push(Op::Barrier);
    }
    vec![r0, r1]
}

#[test]
fn a_late_sender_and_a_late_receiver_come_back_exactly() {
    let (error, _) = check_exact("p2p", &alternating_p2p(20, 5_000));
    // Subtract removes each rank's own cost; the receiver's waits stay as long as the sender's
    // cost made them, so its span is off.
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
}

#[test]
fn the_clock_read_inside_each_call_comes_off_the_call_not_the_program_s_work() {
    // The read that closes a call's record runs between the two instants the record keeps, so
    // the recorded call is one read longer than the program's, and the call's cost, spent after
    // it, counts that read too. Taken whole from the gap after the call, a burst of calls with
    // no work between them overdraws its gaps, and the rest comes out of the program's work
    // further on (3 M `MPI_Comm_rank` in a row took 21 ms out of the sleeps after them, and
    // the replay, whose waits then moved, came out 5 % slow).
    let read_ns = 25;
    let mut burst = vec![Vec::new(), Vec::new()];
    burst[0].extend(std::iter::repeat_n(Op::Send(1), 100));
    burst[1].extend(std::iter::repeat_n(Op::Recv(0), 100));
    for _ in 0..10 {
        for rank_ops in &mut burst {
            rank_ops.extend([Op::Compute(10_000), Op::Barrier]);
        }
    }
    let (error, _) = check_exact_reading("read-burst", &burst, read_ns);
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
    check_exact_reading("read-p2p", &alternating_p2p(20, 5_000), read_ns);
}

#[test]
fn a_collective_with_one_late_entrant_comes_back_exactly() {
    let n = 3;
    let mut ops = vec![Vec::new(); n];
    for i in 0..15 {
        for (r, rank_ops) in ops.iter_mut().enumerate() {
            // A different rank is late each time, by a different amount.
            let work = if r == i % n {
                4_000 + 100 * i as u64
            } else {
                500
            };
            rank_ops.extend([Op::Compute(work), Op::Barrier]);
        }
    }
    let (error, _) = check_exact("barrier", &ops);
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
}

#[test]
fn a_chain_of_waits_across_three_ranks_comes_back_exactly() {
    // Rank 0 feeds rank 1, which forwards to rank 2: rank 2's wait is set by rank 0's costs
    // through rank 1.
    let mut ops = vec![Vec::new(); 3];
    for i in 0..12 {
        let late = 2_000 + 300 * (i % 3) as u64;
        if i % 2 == 0 {
            ops[0].extend([Op::Compute(late), Op::Send(1)]);
            ops[1].extend([Op::Recv(0), Op::Send(2)]);
            ops[2].extend([Op::Recv(1)]);
        } else {
            ops[0].extend([Op::Send(1)]);
            ops[1].extend([Op::Compute(late), Op::Recv(0), Op::Send(2)]);
            ops[2].extend([Op::Compute(2 * late), Op::Recv(1)]);
        }
        for rank_ops in &mut ops {
            rank_ops.push(Op::Barrier);
        }
    }
    let (error, _) = check_exact("chain", &ops);
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
}

#[test]
fn nonblocking_receives_complete_at_their_wait() {
    let mut r0 = Vec::new();
    let mut r1 = Vec::new();
    for i in 0..16u64 {
        let late = 3_000 + 200 * (i % 4);
        if i % 2 == 0 {
            r0.extend([Op::Compute(late), Op::Isend(1, 1), Op::Wait(1)]);
            r1.extend([Op::Irecv(0, 2), Op::Compute(100), Op::Wait(2)]);
        } else {
            r0.extend([Op::Isend(1, 1), Op::Wait(1)]);
            r1.extend([Op::Irecv(0, 2), Op::Compute(late), Op::Wait(2)]);
        }
        r0.push(Op::Barrier);
        r1.push(Op::Barrier);
    }
    let (error, _) = check_exact("nonblocking", &[r0, r1]);
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
}

#[test]
fn a_polling_loop_is_one_wait_that_ends_when_its_message_arrives() {
    // Rank 1 polls for its message with MPI_Test; half the time the sender is late (the loop
    // runs, and its length is set by the sender's recorder cost), half the time the message is
    // already there (one test). Every poll of the loop costs the recorder, which must not
    // lengthen the loop: it ends when the message arrives.
    let mut r0 = Vec::new();
    let mut r1 = Vec::new();
    for i in 0..16u64 {
        let late = 3_000 + 150 * (i % 5);
        if i % 2 == 0 {
            r0.extend([Op::Compute(late), Op::Send(1)]);
            r1.extend([Op::Irecv(0, 9), Op::PollWait(9)]);
        } else {
            r0.extend([Op::Send(1)]);
            r1.extend([Op::Irecv(0, 9), Op::Compute(late), Op::PollWait(9)]);
        }
        r0.push(Op::Barrier);
        r1.push(Op::Barrier);
    }
    // Receives that waited in a plain Recv as well, so that the transfer time is learned where
    // nothing polled.
    r0.extend([Op::Compute(4_000), Op::Send(1), Op::Barrier]);
    r1.extend([Op::Recv(0), Op::Barrier]);
    let (error, replay) = check_exact("polling", &[r0, r1]);
    assert_eq!(replay.hb.before.messages, 17, "{:?}", replay.hb);
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
}

#[test]
fn an_rma_epoch_ends_when_its_origin_completes() {
    // Rank 0 exposes its window to rank 1, which accesses it; the target's Win_wait ends only
    // after the origin's Win_complete. Half the time the origin is late.
    let mut r0 = Vec::new();
    let mut r1 = Vec::new();
    for i in 0..14u64 {
        let late = 2_500 + 100 * (i % 3);
        r0.push(Op::Post(1));
        r1.push(Op::Start(0));
        if i % 2 == 0 {
            r0.push(Op::WinWait(1));
            r1.extend([Op::Compute(late), Op::Complete(0)]);
        } else {
            r0.extend([Op::Compute(late), Op::WinWait(1)]);
            r1.push(Op::Complete(0));
        }
        r0.push(Op::Barrier);
        r1.push(Op::Barrier);
    }
    let (error, replay) = check_exact("pscw", &[r0, r1]);
    assert_eq!(replay.hb.before.rma_epochs, 14, "{:?}", replay.hb);
    assert_ne!(error, 0, "subtract was exact: the case tests nothing");
}

/// The replay counts the violations left in its output as it writes it, instead of matching the
/// output again, only while every send start and collective entry it stored for the partners
/// goes out at the time it was stored with. A send made inside a polling loop is stored before
/// the loop is placed (with the wait that ends it): its count then cannot be trusted, and the
/// output is read.
#[test]
fn the_output_is_read_again_only_where_a_stored_call_moved_after_it_was_stored() {
    let program = |sending: bool| {
        let mut r0 = Vec::new();
        let mut r1 = Vec::new();
        for i in 0..8u64 {
            let (recv, send) = (2 * i + 1, 2 * i + 2);
            r0.extend([
                Op::Compute(3_000 + 170 * i),
                Op::Send(1),
                Op::Recv(1),
                Op::Barrier,
            ]);
            r1.push(Op::Irecv(0, recv));
            r1.push(if sending {
                Op::PollWaitSending { recv, to: 0, send }
            } else {
                Op::PollWait(recv)
            });
            if !sending {
                r1.push(Op::Isend(0, send));
            }
            r1.extend([Op::Wait(send), Op::Barrier]);
        }
        vec![r0, r1]
    };
    for (sending, want) in [
        (false, AfterCountedBy::Pass),
        (true, AfterCountedBy::ReadingTheOutput),
    ] {
        let traced = simulate(&program(sending), recorder_cost);
        assert!(
            traced[1]
                .events
                .iter()
                .any(|e| matches!(e, Event::Polls(_))),
            "nothing polled: the case tests nothing"
        );
        let (dir, counted) = replay_counted(&traced, &format!("stored-{sending}"), want);
        assert_eq!(counted.hb.before.messages, 16, "{:?}", counted.hb);
        // The same with the output read again: the pass's count, where it is used, must agree.
        let out = temp_dir(&format!("replay-stored-{sending}-verified"));
        let verified = reconstruct_verified(&dir, &out, Model::Replay, true);
        assert_eq!(
            verified.hb.after_counted_by,
            Some(AfterCountedBy::ReadingTheOutput)
        );
        assert_eq!(verified.hb.after, counted.hb.after, "sending {sending}");
    }
}

/// The same for a call that is itself stored and held (a barrier's entry, which waits): after a
/// run of polls, the replay places the run with the barrier's wait, which can move its start.
#[test]
fn the_output_is_read_again_where_a_held_entry_moved_with_the_polls_before_it() {
    let program = |polls: bool| {
        let mut r0 = Vec::new();
        let mut r1 = Vec::new();
        for i in 0..8u64 {
            let recv = i + 1;
            r0.extend([Op::Compute(3_000 + 170 * i), Op::Barrier, Op::Send(1)]);
            r1.push(Op::Irecv(0, recv));
            if polls {
                r1.push(Op::FailedPolls(600));
            }
            r1.extend([Op::Barrier, Op::Wait(recv)]);
        }
        vec![r0, r1]
    };
    for (polls, want) in [
        (false, AfterCountedBy::Pass),
        (true, AfterCountedBy::ReadingTheOutput),
    ] {
        let traced = simulate(&program(polls), recorder_cost);
        let (_dir, counted) = replay_counted(&traced, &format!("held-{polls}"), want);
        assert_eq!(counted.hb.before.collective_exits, 16, "{:?}", counted.hb);
    }
}

/// Where the replay leaves violations in its output (the format's synthetic halo, whose times
/// are not a run's: half its receives end before their sends started), the count the pass made
/// as it wrote must be what matching the output finds, kind by kind.
///
/// Its collectives as they are (`Allreduce`: an exit waits for every member, judged through the
/// instance's summary), and made `Bcast`s from rank 2 (an exit waits for the root alone, judged
/// member by member).
#[test]
fn the_pass_counts_the_violations_its_output_holds() {
    use format::synthetic::FUNC_ALLREDUCE;
    let bcast = |mut ranks: Vec<RankTrace>| {
        for e in ranks.iter_mut().flat_map(|r| r.streams[0].1.iter_mut()) {
            match e {
                Event::FunctionDef { id, name } if *id == FUNC_ALLREDUCE => {
                    *name = "MPI_Bcast".into()
                }
                Event::Call(c) if c.func == FUNC_ALLREDUCE => c.root = 2,
                _ => {}
            }
        }
        ranks
    };
    for (shape, ranks) in [
        ("allreduce", matched_halo(6, 400)),
        ("bcast", bcast(matched_halo(6, 400))),
    ] {
        let dir = temp_dir(&format!("halo-counted-{shape}"));
        write_trace(&dir, 6, &ranks, 97);
        count_against_the_output(&dir, shape);
    }
}

fn count_against_the_output(dir: &std::path::Path, shape: &str) {
    for (model, hb) in [(Model::Replay, false), (Model::Subtract, true)] {
        let out = temp_dir(&format!("halo-counted-{shape}-{model:?}"));
        let opts = Options {
            remove: Remove::Both,
            model,
            hb,
            ..Options::default()
        };
        let trace = Trace::open(dir).unwrap();
        let counted = rebuild::reconstruct(&trace, &out, &opts, &mut |_, _| {}).unwrap();
        assert_eq!(
            counted.hb.after_counted_by,
            Some(AfterCountedBy::Pass),
            "{shape}, {model:?}"
        );
        let read = check_happened_before(&Trace::open(&out).unwrap()).unwrap();
        assert_eq!(counted.hb.after, Some(read), "{shape}, {model:?}");
        if model == Model::Replay {
            assert!(
                read.message_violations > 0 && read.collective_violations > 0,
                "{shape}: nothing left to count: the case tests nothing: {read:?}"
            );
        }
    }
}

#[test]
fn without_waits_the_replay_equals_subtract() {
    // Every receive finds its message there and nobody waits in a collective: the rank-by-rank
    // subtraction is then right, and the replay must not move anything further.
    let mut r0 = Vec::new();
    let mut r1 = Vec::new();
    for _ in 0..10 {
        r0.extend([Op::Send(1), Op::Compute(3_000)]);
        r1.extend([Op::Compute(6_000), Op::Recv(0)]);
    }
    let ops = vec![r0, r1];
    let (error, _) = check_exact("no-waits", &ops);
    assert_eq!(error, 0, "subtract must be exact here too");
    // The written calls agree one by one.
    let traced = simulate(&ops, recorder_cost);
    let dir = temp_dir("replay-equal");
    let a = temp_dir("replay-equal-replay");
    let b = temp_dir("replay-equal-subtract");
    write(&dir, &traced);
    reconstruct(&dir, &a, Model::Replay);
    reconstruct(&dir, &b, Model::Subtract);
    assert_eq!(replayed_calls(&a, 2), replayed_calls(&b, 2));
}

// Properties over random programs: any deadlock-free schedule of messages (blocking,
// nonblocking, polled) and barriers over 2–6 ranks, with any work between the calls and any
// recorder cost.

use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Delivery {
    Blocking,
    Nonblocking,
    Polled,
}

#[derive(Clone, Debug)]
enum Step {
    /// `from` sends one message to `to`; each side works `before`/`after` ns first.
    Message {
        from: u32,
        to: u32,
        delivery: Delivery,
        before: u64,
        after: u64,
    },
    /// Every rank works its own time, then all meet.
    Barrier(Vec<u64>),
    /// Every rank works its own time, then the root broadcasts.
    Bcast(u32, Vec<u64>),
}

/// Every rank's calls in global step order. Sends never block in the simulator, so each step
/// can run once every earlier step has: the schedule cannot deadlock.
fn program(ranks: usize, steps: &[Step]) -> Vec<Vec<Op>> {
    let mut ops = vec![Vec::new(); ranks];
    for (k, step) in steps.iter().enumerate() {
        let request = k as u64 + 1;
        match step {
            Step::Message {
                from,
                to,
                delivery,
                before,
                after,
            } => {
                let (s, r) = (*from as usize, *to as usize);
                ops[s].push(Op::Compute(*before));
                ops[r].push(Op::Compute(*after));
                match delivery {
                    Delivery::Blocking => {
                        ops[s].push(Op::Send(*to));
                        ops[r].push(Op::Recv(*from));
                    }
                    Delivery::Nonblocking => {
                        ops[s].extend([Op::Isend(*to, request), Op::Wait(request)]);
                        ops[r].extend([
                            Op::Irecv(*from, request),
                            Op::Compute(*after / 2),
                            Op::Wait(request),
                        ]);
                    }
                    Delivery::Polled => {
                        ops[s].push(Op::Send(*to));
                        ops[r].extend([Op::Irecv(*from, request), Op::PollWait(request)]);
                    }
                }
            }
            Step::Bcast(root, work) => {
                for (rank_ops, w) in ops.iter_mut().zip(work) {
                    rank_ops.extend([Op::Compute(*w), Op::Bcast(*root)]);
                }
            }
            Step::Barrier(work) => {
                for (rank_ops, w) in ops.iter_mut().zip(work) {
                    rank_ops.extend([Op::Compute(*w), Op::Barrier]);
                }
            }
        }
    }
    ops
}

fn schedule() -> impl Strategy<Value = (usize, Vec<Step>)> {
    (2usize..=6).prop_flat_map(|ranks| {
        let message = (
            0..ranks as u32,
            1..ranks as u32,
            prop_oneof![
                Just(Delivery::Blocking),
                Just(Delivery::Nonblocking),
                Just(Delivery::Polled)
            ],
            0u64..6_000,
            0u64..6_000,
        )
            .prop_map(move |(from, hop, delivery, before, after)| Step::Message {
                from,
                to: (from + hop) % ranks as u32,
                delivery,
                before,
                after,
            });
        let barrier = proptest::collection::vec(0u64..6_000, ranks).prop_map(Step::Barrier);
        let bcast = (
            0..ranks as u32,
            proptest::collection::vec(0u64..6_000, ranks),
        )
            .prop_map(|(root, work)| Step::Bcast(root, work));
        let step = prop_oneof![4 => message, 1 => barrier, 1 => bcast];
        (Just(ranks), proptest::collection::vec(step, 1..30))
    })
}

/// Each message of a run as (source, destination, send start, end of the call that completed
/// the receive), in the run's own times: the pairs the program made, whatever the timing.
fn program_messages(runs: &[Run]) -> Vec<(u32, u32, u64, u64)> {
    let mut sends: HashMap<(u32, u32), VecDeque<u64>> = HashMap::new();
    let mut receives: Vec<(u32, u32, u64)> = Vec::new();
    for (r, run) in runs.iter().enumerate() {
        let rank = r as u32;
        let mut last_end = 0;
        for e in &run.events {
            match e {
                Event::Call(c) => {
                    last_end = c.end;
                    if (c.func == SEND || c.func == ISEND) && c.peer >= 0 {
                        sends
                            .entry((rank, c.peer as u32))
                            .or_default()
                            .push_back(c.start);
                    }
                }
                Event::Completion(done) if done.source >= 0 => {
                    receives.push((done.source as u32, rank, last_end));
                }
                _ => {}
            }
        }
    }
    let mut pairs: Vec<_> = receives
        .into_iter()
        .map(|(from, to, end)| {
            let start = sends.get_mut(&(from, to)).unwrap().pop_front().unwrap();
            (from, to, start, end)
        })
        .collect();
    pairs.sort_unstable();
    pairs
}

/// The matcher's pairs in the same form (times back in the run's own clock).
fn matched_pairs(
    dir: &std::path::Path,
) -> (Vec<(u32, u32, u64, u64)>, reconstruct::matches::HbReport) {
    let trace = Trace::open(dir).unwrap();
    let (matches, report) = reconstruct::matches::matched_messages(&trace).unwrap();
    let mut pairs: Vec<_> = matches
        .iter()
        .map(|m| (m.source, m.dest, m.send_start, m.recv_end))
        .collect();
    pairs.sort_unstable();
    (pairs, report)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The matcher pairs every message of the program, and the same ones whatever the recorded
    /// times: without any recorder cost, with the usual one, and with a cost drawn at random.
    #[test]
    fn matching_pairs_what_the_program_sent_whatever_the_timing(
        (ranks, steps) in schedule(),
        seed in 0u64..1_000,
    ) {
        let ops = program(ranks, &steps);
        let random_cost = |rank: u32, k: usize| {
            (u64::from(rank) * 7_919 + k as u64 * 104_729 + seed * 31) % 5_000
        };
        let timings: [(&str, Vec<Run>); 3] = [
            ("untraced", simulate(&ops, |_, _| 0)),
            ("usual", simulate(&ops, recorder_cost)),
            ("random", simulate(&ops, random_cost)),
        ];
        for (name, runs) in &timings {
            let dir = temp_dir(&format!("prop-match-{name}"));
            write(&dir, runs);
            let (got, report) = matched_pairs(&dir);
            let want = program_messages(runs);
            // Matched times are in the trace's global clock; move them back to the run's.
            let shift = got.first().zip(want.first()).map(|(g, w)| g.2 as i64 - w.2 as i64);
            let got: Vec<_> = got
                .iter()
                .map(|&(f, t, s, e)| {
                    let d = shift.unwrap_or(0);
                    (f, t, (s as i64 - d) as u64, (e as i64 - d) as u64)
                })
                .collect();
            prop_assert_eq!(&got, &want, "{} timing: matched pairs differ from the program's", name);
            prop_assert_eq!(report.unmatched_sends + report.unmatched_receives, 0, "{}: {:?}", name, report);
            prop_assert_eq!(
                report.recorded_message_violations + report.recorded_collective_violations,
                0,
                "{}: {:?}", name, report
            );
        }
    }

    /// Both models write calls that do not run backwards, do not overlap on a rank, and keep
    /// every message's receive after its send; the written trace matches like the input did.
    /// Subtract keeps causality only with the happened-before repair (`--hb`): removing one
    /// rank's cost can let a barrier's exit pass its partner's entry, which it then counts.
    #[test]
    fn both_models_keep_causality_and_the_matching(
        (ranks, steps) in schedule(),
    ) {
        let ops = program(ranks, &steps);
        let traced = simulate(&ops, recorder_cost);
        let dir = temp_dir("prop-model");
        write(&dir, &traced);
        let (_, before) = matched_pairs(&dir);
        for (model, hb) in [(Model::Subtract, true), (Model::Replay, false)] {
            let out = temp_dir(&format!("prop-model-{model:?}"));
            let opts = Options { remove: Remove::Both, model, hb, verify: true, ..Options::default() };
            let summary =
                rebuild::reconstruct(&Trace::open(&dir).unwrap(), &out, &opts, &mut |_, _| {}).unwrap();
            prop_assert_eq!(summary.hb.violations_after, 0, "{:?}: {:?}", model, summary.hb);
            for (r, calls) in replayed_calls(&out, ranks).iter().enumerate() {
                for (k, &(start, end)) in calls.iter().enumerate() {
                    prop_assert!(start <= end, "{:?}: rank {} call {} runs backwards", model, r, k);
                    if k > 0 {
                        prop_assert!(calls[k - 1].1 <= start, "{:?}: rank {} call {} overlaps", model, r, k);
                    }
                }
            }
            let (pairs, after) = matched_pairs(&out);
            prop_assert_eq!(after.messages, before.messages, "{:?}", model);
            prop_assert_eq!(after.unmatched_sends + after.unmatched_receives, 0, "{:?}: {:?}", model, after);
            prop_assert_eq!(
                after.recorded_message_violations + after.recorded_collective_violations,
                0,
                "{:?}: {:?}", model, after
            );
            for (from, to, send_start, recv_end) in pairs {
                prop_assert!(send_start <= recv_end, "{:?}: {}→{} received before sent", model, from, to);
            }
        }
    }
}
proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The replay's estimates are each an upper bound of the true value, so it never makes the
    /// program faster than it ran untraced, and never slower than it ran traced. One exception
    /// is allowed for: an `MPI_Test` that found its message as it started in the traced run (no
    /// run of polls before it), but whose message the replay moves later, ends at the arrival,
    /// where the untraced program polled once more and its successful test ended one test
    /// later. A loop the recorder's cost made overrun its arrival gets no allowance.
    #[test]
    fn the_replay_lies_between_untraced_and_traced((ranks, steps) in schedule()) {
        let ops = program(ranks, &steps);
        let untraced = simulate(&ops, |_, _| 0);
        let traced = simulate(&ops, recorder_cost);
        let dir = temp_dir("prop-bounds");
        let out = temp_dir("prop-bounds-out");
        write(&dir, &traced);
        let replay = reconstruct(&dir, &out, Model::Replay);
        // Polled receives whose traced test found the message at once (no run of polls).
        let polled = steps
            .iter()
            .filter(|s| matches!(s, Step::Message { delivery: Delivery::Polled, .. }))
            .count();
        let loops = traced
            .iter()
            .flat_map(|run| &run.events)
            .filter(|e| matches!(e, Event::Polls(_)))
            .count();
        let found_at_once = (polled - loops) as u64;
        let fastest = (untraced_span(&untraced) - found_at_once * TEST_NS) as f64 / 1e9;
        let slowest = untraced_span(&traced) as f64 / 1e9;
        prop_assert!(
            replay.reconstructed_s >= fastest - 0.5e-9,
            "replayed {} s, untraced {} s", replay.reconstructed_s, untraced_span(&untraced) as f64 / 1e9
        );
        prop_assert!(
            replay.reconstructed_s <= slowest + 0.5e-9,
            "replayed {} s, traced {} s", replay.reconstructed_s, slowest
        );
    }
}

/// Matching split over 2 and 3 processes against one pass over every lane
/// (`hb::split_differs`): the same matched messages, reports adding up to the same report, the
/// learned estimates merging into the same estimates.
fn check_split_matching(dir: &std::path::Path, processes: usize) -> Result<(), TestCaseError> {
    use reconstruct::hb::{self, HbContext};
    use trace::lanes::LaneId;
    let trace = Trace::open(dir).unwrap();
    let metas = trace::scan::scan(&trace).unwrap();
    prop_assert_eq!(HbContext::unsplittable(&metas), None);
    let world = metas.iter().map(|m| m.rank + 1).max().unwrap_or(0);
    let ctx = HbContext::new(&metas, world);
    let lanes: Vec<(LaneId, Vec<Event>)> = metas
        .iter()
        .map(|m| {
            (
                LaneId {
                    rank: m.rank,
                    stream: 0,
                },
                read_lane(dir, m.rank, 0),
            )
        })
        .collect();
    prop_assert_eq!(hb::split_differs(&ctx, &lanes, processes), None);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Matching needs no process that sees every lane: split over 2 and 3 processes, each owning
    /// some ranks and seeing of the others only what its ranks depend on, it finds what one pass
    /// over every lane finds.
    #[test]
    fn matching_split_over_processes_finds_what_one_pass_finds(
        (ranks, steps) in schedule(),
        seed in 0u64..1_000,
    ) {
        let ops = program(ranks, &steps);
        let random_cost = |rank: u32, k: usize| {
            (u64::from(rank) * 7_919 + k as u64 * 104_729 + seed * 31) % 5_000
        };
        let dir = temp_dir("prop-split");
        write(&dir, &simulate(&ops, random_cost));
        for processes in [2, 3] {
            check_split_matching(&dir, processes)?;
        }
    }
}
