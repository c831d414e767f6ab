//! The synthetic programs of the replay tests: a small simulator that runs each program with the
//! same rules of the machine untraced and traced (the recorder spending a cost after every call),
//! and writes a run as a trace.

use std::collections::{HashMap, VecDeque};

use crate::common::*;
use format::{Completion, Event, Marker, MpiCall, NO_RANK, NO_REQUEST, NO_TAG};

/// What the machine does, the same untraced and traced.
pub const SEND_NS: u64 = 150;
pub const RECV_NS: u64 = 120;
pub const ISEND_NS: u64 = 80;
pub const IRECV_NS: u64 = 70;
pub const WAIT_NS: u64 = 90;
pub const BARRIER_NS: u64 = 300;
/// From a send's start to the end of the receive that waited for it.
pub const TRANSFER_NS: u64 = 1_000;
/// From the last other entrant's start to an exit that waited for it (below `BARRIER_NS`, so
/// the last entrant itself leaves after its own cost).
pub const BARRIER_EXIT_NS: u64 = 200;

pub const TEST_NS: u64 = 40;
/// A broadcast's own time, and from the root's entry to the end of a member's that waited for it.
pub const BCAST_NS: u64 = 250;
pub const BCAST_EXIT_NS: u64 = 180;
/// Polls folded into each run that found nothing.
pub const POLLS_PER_RUN: u64 = 25;

/// General active target synchronisation (PSCW) on one window over ranks 0 and 1.
pub const WIN_POST_NS: u64 = 60;
pub const WIN_START_NS: u64 = 60;
pub const WIN_COMPLETE_NS: u64 = 110;
pub const WIN_WAIT_NS: u64 = 70;
/// From an origin's `Win_complete` start to the end of the target's `Win_wait` that waited.
pub const EPOCH_NS: u64 = 700;

pub const INIT_NS: u64 = 1_000_000;
pub const TEST: format::FunctionId = 8;
pub const BCAST: format::FunctionId = 9;
pub const WIN_POST: format::FunctionId = 40;
pub const WIN_START: format::FunctionId = 41;
pub const WIN_COMPLETE: format::FunctionId = 42;
pub const WIN_WAIT: format::FunctionId = 43;
pub const WIN: format::CommId = 5;

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Compute(u64),
    Send(u32),
    Recv(u32),
    Isend(u32, u64),
    Irecv(u32, u64),
    /// Waits for one request posted by `Isend`/`Irecv` with this id.
    Wait(u64),
    /// Polls the receive request with this id (`MPI_Test`) until its message is there. The
    /// polls are back to back and fine enough that the one that succeeds starts when the message
    /// arrives; the recorder folds those that failed into one run and spends its cost after
    /// each of them.
    PollWait(u64),
    /// `PollWait(recv)`, but the loop also starts a send (`Isend` to `to`, request `send`) once
    /// its polls found nothing, before the test that finds the message.
    PollWaitSending {
        recv: u64,
        to: u32,
        send: u64,
    },
    /// Polls for this long (`MPI_Test` on a request still open), finding nothing, and goes on.
    FailedPolls(u64),
    /// Exposes the window to this origin (`Win_post`), and waits for its epoch to end
    /// (`Win_wait`).
    Post(u32),
    WinWait(u32),
    /// Accesses this target's window (`Win_start`) and ends the epoch (`Win_complete`).
    Start(u32),
    Complete(u32),
    Barrier,
    /// `MPI_Bcast` from this root over every rank: the others wait for the root's entry, the
    /// root for nobody.
    Bcast(u32),
}

/// One rank's recorded (or untraced) run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    pub events: Vec<Event>,
    pub calls: Vec<MpiCall>,
    pub finalize: u64,
}

/// Runs every rank's `ops`; `cost(rank, call index)` is the recorder's cost after that call.
pub fn simulate(ops: &[Vec<Op>], cost: impl Fn(u32, usize) -> u64) -> Vec<Run> {
    simulate_reading(ops, cost, 0)
}

/// [`simulate`], where each call's record also holds one clock read of `read_ns` (the read that
/// closes it runs after the call returned and before the end it samples), charged in its cost.
pub fn simulate_reading(
    ops: &[Vec<Op>],
    cost: impl Fn(u32, usize) -> u64,
    read_ns: u64,
) -> Vec<Run> {
    let n = ops.len();
    let mut clock = vec![INIT_NS; n];
    let mut pc = vec![0usize; n];
    let mut runs: Vec<Run> = vec![Run::default(); n];
    let calls_made: Vec<std::cell::Cell<usize>> = vec![std::cell::Cell::new(0); n];
    // (from, to) → starts of sends not yet received, in order.
    let mut in_flight: HashMap<(u32, u32), VecDeque<u64>> = HashMap::new();
    // Per rank: request id → (peer, is_receive).
    let mut requests: Vec<HashMap<u64, (u32, bool)>> = vec![HashMap::new(); n];
    // Barrier instance → entries.
    let mut barriers: HashMap<usize, Vec<Option<u64>>> = HashMap::new();
    // (origin, target) → starts of `Win_complete` not yet waited for.
    let mut completes: HashMap<(u32, u32), VecDeque<u64>> = HashMap::new();
    let mut barrier_count = vec![0usize; n];
    let mut bcasts: HashMap<usize, Vec<Option<u64>>> = HashMap::new();
    let mut bcast_count = vec![0usize; n];
    // The recorder's cost after each poll of a run that found nothing, as it counts calls.
    let poll_costs = |r: usize, rank: u32| -> Vec<u64> {
        let k = calls_made[r].get();
        calls_made[r].set(k + POLLS_PER_RUN as usize);
        (0..POLLS_PER_RUN as usize)
            .map(|i| cost(rank, k + i))
            .collect()
    };
    loop {
        let mut progressed = false;
        for r in 0..n {
            while pc[r] < ops[r].len() {
                let t = clock[r];
                let rank = r as u32;
                let record = |func, start, end: u64, peer: i32, request, runs: &mut Vec<Run>| {
                    let end = end + read_ns;
                    let mut c = call(func, start, end, peer, if peer >= 0 { 0 } else { NO_TAG });
                    c.request = request;
                    if [WIN_POST, WIN_START, WIN_COMPLETE, WIN_WAIT].contains(&func) {
                        c.comm = WIN;
                        c.bytes = 0;
                    }
                    let k = calls_made[r].get();
                    calls_made[r].set(k + 1);
                    let spent = cost(rank, k);
                    c.cost = (spent + read_ns) as u32;
                    runs[r].events.push(Event::Call(c));
                    runs[r].calls.push(c);
                    end + spent
                };
                let next = match ops[r][pc[r]] {
                    Op::Compute(d) => Some(t + d),
                    Op::Send(to) => {
                        in_flight.entry((rank, to)).or_default().push_back(t);
                        Some(record(
                            SEND,
                            t,
                            t + SEND_NS,
                            to as i32,
                            NO_REQUEST,
                            &mut runs,
                        ))
                    }
                    Op::Isend(to, req) => {
                        in_flight.entry((rank, to)).or_default().push_back(t);
                        requests[r].insert(req, (to, false));
                        Some(record(ISEND, t, t + ISEND_NS, to as i32, req, &mut runs))
                    }
                    Op::Irecv(from, req) => {
                        requests[r].insert(req, (from, true));
                        Some(record(IRECV, t, t + IRECV_NS, from as i32, req, &mut runs))
                    }
                    Op::Recv(from) => {
                        match in_flight.get_mut(&(from, rank)).and_then(|q| q.pop_front()) {
                            Some(sent) => {
                                let end = (t + RECV_NS).max(sent + TRANSFER_NS);
                                let after =
                                    record(RECV, t, end, from as i32, NO_REQUEST, &mut runs);
                                runs[r].events.push(done(NO_REQUEST, from as i32));
                                Some(after)
                            }
                            None => None,
                        }
                    }
                    Op::Wait(req) => {
                        let (peer, receive) = requests[r][&req];
                        let arrival = if receive {
                            in_flight
                                .get_mut(&(peer, rank))
                                .and_then(|q| q.pop_front())
                                .map(|s| s + TRANSFER_NS)
                        } else {
                            Some(0)
                        };
                        arrival.map(|arrival| {
                            let end = (t + WAIT_NS).max(arrival);
                            let after = record(WAIT, t, end, NO_RANK, NO_REQUEST, &mut runs);
                            let source = if receive { peer as i32 } else { NO_RANK };
                            runs[r].events.push(if receive {
                                done(req, source)
                            } else {
                                Event::Completion(Completion {
                                    request: req,
                                    source: NO_RANK,
                                    tag: NO_TAG,
                                    bytes: 0,
                                    cancelled: false,
                                })
                            });
                            after
                        })
                    }
                    Op::FailedPolls(d) => {
                        let (run, after) = failed_polls(t, t + d, &poll_costs(r, rank));
                        runs[r].events.push(run);
                        Some(after)
                    }
                    op @ (Op::PollWait(_) | Op::PollWaitSending { .. }) => {
                        let (req, sending) = match op {
                            Op::PollWaitSending { recv, to, send } => (recv, Some((to, send))),
                            Op::PollWait(req) => (req, None),
                            _ => unreachable!(),
                        };
                        let (peer, _) = requests[r][&req];
                        in_flight
                            .get_mut(&(peer, rank))
                            .and_then(|q| q.pop_front())
                            .map(|sent| {
                                let arrival = sent + TRANSFER_NS;
                                let mut t = t;
                                if arrival > t {
                                    let (run, after) =
                                        failed_polls(t, arrival, &poll_costs(r, rank));
                                    runs[r].events.push(run);
                                    t = after;
                                }
                                if let Some((to, send)) = sending {
                                    in_flight.entry((rank, to)).or_default().push_back(t);
                                    requests[r].insert(send, (to, false));
                                    t = record(ISEND, t, t + ISEND_NS, to as i32, send, &mut runs);
                                }
                                let after =
                                    record(TEST, t, t + TEST_NS, NO_RANK, NO_REQUEST, &mut runs);
                                runs[r].events.push(done(req, peer as i32));
                                after
                            })
                    }
                    Op::Post(origin) | Op::Start(origin) => {
                        runs[r].events.push(Event::EpochGroup {
                            win: WIN,
                            members: vec![origin],
                        });
                        let (func, ns) = match ops[r][pc[r]] {
                            Op::Post(_) => (WIN_POST, WIN_POST_NS),
                            _ => (WIN_START, WIN_START_NS),
                        };
                        Some(record(func, t, t + ns, NO_RANK, NO_REQUEST, &mut runs))
                    }
                    Op::Complete(target) => {
                        completes.entry((rank, target)).or_default().push_back(t);
                        Some(record(
                            WIN_COMPLETE,
                            t,
                            t + WIN_COMPLETE_NS,
                            NO_RANK,
                            NO_REQUEST,
                            &mut runs,
                        ))
                    }
                    Op::WinWait(origin) => completes
                        .get_mut(&(origin, rank))
                        .and_then(|q| q.pop_front())
                        .map(|c| {
                            let end = (t + WIN_WAIT_NS).max(c + EPOCH_NS);
                            record(WIN_WAIT, t, end, NO_RANK, NO_REQUEST, &mut runs)
                        }),
                    Op::Bcast(root) => {
                        let instance = bcast_count[r];
                        let entries = bcasts.entry(instance).or_insert_with(|| vec![None; n]);
                        entries[r].get_or_insert(t);
                        let end = if rank == root {
                            Some(t + BCAST_NS)
                        } else {
                            entries[root as usize].map(|s| (t + BCAST_NS).max(s + BCAST_EXIT_NS))
                        };
                        end.map(|end| {
                            bcast_count[r] += 1;
                            let after = record(BCAST, t, end, NO_RANK, NO_REQUEST, &mut runs);
                            if let Some(Event::Call(c)) = runs[r].events.last_mut() {
                                c.root = root as i32;
                            }
                            if let Some(c) = runs[r].calls.last_mut() {
                                c.root = root as i32;
                            }
                            after
                        })
                    }
                    Op::Barrier => {
                        let instance = barrier_count[r];
                        let entries = barriers.entry(instance).or_insert_with(|| vec![None; n]);
                        entries[r].get_or_insert(t);
                        if entries.iter().all(Option::is_some) {
                            let last_other = entries
                                .iter()
                                .enumerate()
                                .filter(|&(k, _)| k != r)
                                .filter_map(|(_, s)| *s)
                                .max()
                                .unwrap_or(0);
                            let end = (t + BARRIER_NS).max(last_other + BARRIER_EXIT_NS);
                            barrier_count[r] += 1;
                            Some(record(BARRIER, t, end, NO_RANK, NO_REQUEST, &mut runs))
                        } else {
                            None
                        }
                    }
                };
                match next {
                    Some(t) => {
                        clock[r] = t;
                        pc[r] += 1;
                        progressed = true;
                    }
                    None => break,
                }
            }
        }
        if pc.iter().zip(ops).all(|(&p, o)| p == o.len()) {
            break;
        }
        assert!(progressed, "the synthetic program deadlocks");
    }
    for (r, run) in runs.iter_mut().enumerate() {
        run.finalize = clock[r];
    }
    runs
}

/// A run of [`POLLS_PER_RUN`] polls that found nothing, from `start` until `until` at the
/// earliest, with the recorder's `costs` after each poll (the last one spent after the run). The
/// cost inside the loop is spent inside it: a loop shorter than that cost ends late. Returns the
/// run and when the rank goes on.
pub fn failed_polls(start: u64, until: u64, costs: &[u64]) -> (Event, u64) {
    let (last, inside) = costs.split_last().expect("a run has polls");
    let inner: u64 = inside.iter().sum();
    let end = until.max(start + inner);
    let run = Event::Polls(format::PollRun {
        func: TEST,
        comm: 0,
        peer: NO_RANK,
        tag: NO_TAG,
        start,
        end,
        count: POLLS_PER_RUN,
        busy: (end - start) - inner,
        inner_cost: inner,
        cost: *last as u32,
    });
    (run, end + last)
}

pub fn done(request: u64, source: i32) -> Event {
    Event::Completion(Completion {
        request,
        source,
        tag: 0,
        bytes: 8,
        cancelled: false,
    })
}

/// A recorder cost that differs by rank and call, as a real one does (20–83 ns).
pub fn recorder_cost(rank: u32, k: usize) -> u64 {
    20 + (u64::from(rank) * 37 + k as u64 * 13) % 64
}

pub fn write(dir: &std::path::Path, runs: &[Run]) {
    write_reading(dir, runs, 0);
}

/// [`write`], with every file header saying one clock read costs `read_ns` (1 tick a ns).
pub fn write_reading(dir: &std::path::Path, runs: &[Run], read_ns: u16) {
    // A window is defined only for a program that uses it, as a recorder would.
    let uses_window = runs.iter().flat_map(|run| &run.events).any(|e| {
        matches!(e, Event::Call(c) if [WIN_POST, WIN_START, WIN_COMPLETE, WIN_WAIT].contains(&c.func))
    });
    let ranks: Vec<RankTrace> = runs
        .iter()
        .enumerate()
        .map(|(r, run)| {
            let mut events = function_defs_with(&[
                (TEST, "MPI_Test"),
                (BCAST, "MPI_Bcast"),
                (WIN_POST, "MPI_Win_post"),
                (WIN_START, "MPI_Win_start"),
                (WIN_COMPLETE, "MPI_Win_complete"),
                (WIN_WAIT, "MPI_Win_wait"),
            ]);
            // One host: the ranks read one clock.
            events.push(Event::RankInfo(Box::new(format::RankInfo {
                rank: r as u32,
                world_size: runs.len() as u32,
                pid: 100 + r as u32,
                host: "node".into(),
                mpi_library: "synthetic".into(),
                run_id: "replay".into(),
            })));
            events.push(Event::Marker(Marker::InitDone { time: INIT_NS }));
            if uses_window && runs.len() >= 2 && r < 2 {
                events.push(Event::CommDef {
                    id: WIN,
                    members: vec![0, 1],
                });
                events.push(Event::WinDef { id: WIN, comm: 0 });
            }
            events.extend(run.events.iter().cloned());
            events.push(Event::Marker(Marker::FinalizeStart { time: run.finalize }));
            RankTrace {
                rank: r as u32,
                ticks_per_sec: 1e9,
                streams: vec![(0, events)],
            }
        })
        .collect();
    write_trace_reading(dir, runs.len() as u32, &ranks, 7, read_ns);
}
