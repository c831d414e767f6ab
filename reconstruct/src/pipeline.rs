//! The second pass on every core. Decoding a chunk, mapping its times and encoding the output
//! are independent per rank; only matching needs every lane at once. So worker threads take one
//! step of one rank at a time (the next few thousand events of each of its lanes: each chunk is
//! decoded once, its times mapped and, when nothing is repaired, the output encoded and appended
//! to the rank's file), and hand what matching needs to the one thread that runs it, through a
//! small queue per lane.
//!
//! The matching thread is the caller's. When the lane it reads has nothing queued, it takes that
//! rank's step itself rather than wait, so `threads` threads in all do the work (one means no
//! worker at all). Workers read ahead within a budget of queued batches, a rank at a time in
//! round-robin order, so lanes stay roughly in step and memory stays bounded by the lanes times
//! one decoded chunk and one step's batch each, plus the budget.
//!
//! With the repair on, the output times come out of the matcher: workers then only decode and
//! map, every event goes through the queue, and the caller encodes what the matcher hands out.
//! Without it, only communication calls, their completions and communicator definitions go to
//! the matcher: the rest changes nothing it counts.
//!
//! The output does not depend on the number of threads: each rank's file is written by one step
//! at a time, lane by lane, in the lanes' order.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use format::reader::ChunkIntoEvents;
use format::{ChunkEncoder, ChunkWalk, EncodedChunk, Event};

use crate::hb::{self, HbContext, HbReport, MessageMatch, Repair};
use crate::job::{self, LaneBatch, StepMessage, Transport};
use crate::mapping::{LaneMapper, LaneMarks};
use crate::options::{RebuildError, Remove};
use crate::output::{LaneOut, RankOutput};
use trace::Trace;
use trace::clock::TimeMap;
use trace::definitions::RankMeta;
use trace::lanes::{LaneId, OpenRank};

/// The threads of a pass, and `f(0..n)` on them: the first pass's, one definition.
pub(crate) use trace::parallel::map_indexed;
pub use trace::parallel::threads;

/// A poisoned lock means a worker panicked; the scope re-raises that panic, so the data is not
/// used in a half-updated state beyond reporting.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The workers write the output themselves (only when nothing is repaired).
pub(crate) struct WorkerOutput<'a> {
    /// One per rank of the trace, in its order.
    pub ranks: &'a [RankOutput],
    pub chunk_events: usize,
    pub zstd_level: i32,
}

pub(crate) struct PassConfig<'a> {
    pub metas: &'a [RankMeta],
    pub remove: Option<Remove>,
    pub repair: Repair,
    pub threads: usize,
    pub output: Option<WorkerOutput<'a>>,
    /// The MPI job this process is part of, if any (see [`crate::job`]): then this process steps
    /// only the ranks it owns, and `run` (process 0) asks the owners for the others'.
    pub job: Option<&'a dyn Transport>,
    /// For the replay ([`Repair::replay`]).
    pub estimates: Option<&'a hb::Estimates>,
}

pub(crate) struct PassResult {
    pub report: HbReport,
    /// What the pass learned with [`Repair::learn`].
    pub estimates: hb::Estimates,
    /// Per lane, in [`lane_ids`] order.
    pub marks: Vec<LaneMarks>,
}

/// The lanes of a trace in processing order: ranks in trace order, streams ascending.
pub(crate) fn lane_ids(metas: &[RankMeta]) -> Vec<LaneId> {
    metas
        .iter()
        .flat_map(|m| {
            m.streams.iter().map(|&stream| LaneId {
                rank: m.rank,
                stream,
            })
        })
        .collect()
}

/// One event for the matcher, with its place in the lane and the time the mapping removed.
struct Item {
    index: u64,
    removed: u64,
    event: Event,
}

/// A worker's view of one lane.
struct LaneWork<'a> {
    global: usize,
    walk: ChunkWalk<'a>,
    /// The chunk being read: a step takes at most [`STEP_EVENTS`] of its events, so what waits
    /// for the matcher stays small while the chunk itself stays in its compact decoded form.
    current: Option<ChunkIntoEvents>,
    mapper: LaneMapper<'a>,
    next_index: u64,
    out: Option<LaneOut>,
    /// The last call went to the matcher, so its completions go too.
    last_call_kept: bool,
    /// The last event was a communicator definition: the next call goes to the matcher (an
    /// `Intercomm_create` right after a definition created it).
    after_commdef: bool,
    /// A completion call (`Wait`, `Test`, ...) held back until the next event says whether it
    /// completed anything: polling loops make most of some traces' events (hpcc: 40 M
    /// `Test`/`Testany` calls that completed nothing), and one that completed nothing changes
    /// nothing the matcher counts.
    held_poll: Option<Item>,
    done: bool,
}

struct RankWork<'a> {
    rank_idx: usize,
    rank: u32,
    lanes: Vec<LaneWork<'a>>,
}

struct State {
    queues: Vec<VecDeque<Vec<Item>>>,
    lane_finished: Vec<bool>,
    busy: Vec<bool>,
    rank_finished: Vec<bool>,
    remaining_ranks: usize,
    /// Batches waiting in all queues.
    queued: usize,
    /// Where the round-robin search for the next rank to read ahead starts.
    cursor: usize,
    error: Option<RebuildError>,
}

struct Shared<'a> {
    ctx: &'a HbContext,
    work: Vec<Mutex<RankWork<'a>>>,
    lane_rank: Vec<usize>,
    state: Mutex<State>,
    work_ready: Condvar,
    data_ready: Condvar,
    /// Everything goes to the matcher (the repair is on).
    feed_all: bool,
    output: Option<WorkerOutput<'a>>,
    /// Per rank: another process of the job steps it.
    remote: Vec<bool>,
    /// Queued batches beyond which workers stop reading ahead.
    budget: usize,
    step_events: usize,
    events_done: AtomicU64,
}

/// At most this many batches wait in one lane's queue.
const PER_LANE_QUEUE: usize = 1;

/// Events a step reads from one lane: large enough that the locking per step is noise, small
/// enough that a batch is a few hundred KiB...
const STEP_EVENTS: usize = 4096;
/// ...and fewer with many lanes, since each lane may have a batch being matched and one queued:
/// about this many events (of ~120 bytes) over all lanes, each way.
const BATCHED_EVENTS: usize = 1 << 18;
const MIN_STEP_EVENTS: usize = 64;

impl<'a> Shared<'a> {
    /// Decodes, maps (and maybe writes) the next chunk of each lane of rank `r`.
    fn step(
        &self,
        r: usize,
        encoder: &mut ChunkEncoder,
    ) -> Result<Vec<(usize, Vec<Item>, bool)>, RebuildError> {
        let mut work = lock(&self.work[r]);
        let work = &mut *work;
        let several = work.lanes.len() > 1;
        let mut produced = Vec::with_capacity(work.lanes.len());
        let mut chunks: Vec<EncodedChunk> = Vec::new();
        let chunk_events = self
            .output
            .as_ref()
            .map_or(usize::MAX, |o| o.chunk_events.max(1));
        for lane in &mut work.lanes {
            if lane.done {
                continue;
            }
            let mut batch = Vec::with_capacity(self.step_events);
            let mut taken = 0usize;
            while taken < self.step_events {
                let Some(current) = &mut lane.current else {
                    match lane.walk.next() {
                        Some(chunk) => lane.current = Some(chunk.into_events()),
                        None => {
                            lane.done = true;
                            if let Some(out) = &mut lane.out
                                && !out.is_empty()
                            {
                                chunks.push(out.take_chunk(encoder, work.rank));
                            }
                            break;
                        }
                    }
                    continue;
                };
                let Some(mut e) = current.next() else {
                    lane.current = None;
                    continue;
                };
                taken += 1;
                let index = lane.next_index;
                lane.next_index += 1;
                lane.mapper.map_event(&mut e);
                if let Some(out) = &mut lane.out
                    && out.push(&e, chunk_events)
                {
                    chunks.push(out.take_chunk(encoder, work.rank));
                }
                if self.feed_all {
                    batch.push(Item {
                        index,
                        removed: lane.mapper.removed,
                        event: e,
                    });
                } else if keep(self.ctx, work.rank_idx, several, lane, &e) {
                    let item = Item {
                        index,
                        removed: lane.mapper.removed,
                        event: e,
                    };
                    match &item.event {
                        // A rank with several lanes keeps every call: the matcher orders its
                        // lanes' calls by their starts.
                        Event::Call(c)
                            if !several && self.ctx.is_completion_call(work.rank_idx, c.func) =>
                        {
                            lane.held_poll = Some(item);
                        }
                        Event::Completion(_) => {
                            batch.extend(lane.held_poll.take());
                            batch.push(item);
                        }
                        _ => {
                            lane.held_poll = None;
                            batch.push(item);
                        }
                    }
                } else if !matches!(e, Event::Completion(_)) {
                    lane.held_poll = None;
                }
            }
            self.events_done.fetch_add(taken as u64, Ordering::Relaxed);
            produced.push((lane.global, batch, lane.done));
        }
        if let Some(out) = &self.output {
            out.ranks[r].append(&chunks)?;
        }
        Ok(produced)
    }

    /// Records a finished step of rank `r`.
    fn finish_step(
        &self,
        st: &mut State,
        r: usize,
        result: Result<Vec<(usize, Vec<Item>, bool)>, RebuildError>,
    ) {
        st.busy[r] = false;
        match result {
            Ok(produced) => {
                for (lane, batch, finished) in produced {
                    if !batch.is_empty() {
                        st.queues[lane].push_back(batch);
                        st.queued += 1;
                    }
                    st.lane_finished[lane] |= finished;
                }
                let all_done = lock(&self.work[r]).lanes.iter().all(|l| l.done);
                if all_done && !st.rank_finished[r] {
                    st.rank_finished[r] = true;
                    st.remaining_ranks -= 1;
                }
            }
            Err(e) => {
                st.error.get_or_insert(e);
            }
        }
        self.data_ready.notify_all();
        self.work_ready.notify_all();
    }

    /// A rank to read ahead, if the budget allows one.
    fn pick(&self, st: &mut State) -> Option<usize> {
        if st.queued >= self.budget {
            return None;
        }
        let n = st.busy.len();
        for k in 0..n {
            let r = (st.cursor + k) % n;
            if st.busy[r] || st.rank_finished[r] {
                continue;
            }
            let room = lock(&self.work[r])
                .lanes
                .iter()
                .all(|l| l.done || st.queues[l.global].len() < PER_LANE_QUEUE);
            if room {
                st.cursor = (r + 1) % n;
                return Some(r);
            }
        }
        None
    }

    fn worker(&self, zstd_level: i32) {
        let mut encoder = ChunkEncoder::new(zstd_level);
        let mut st = lock(&self.state);
        loop {
            if st.error.is_some() || st.remaining_ranks == 0 {
                return;
            }
            match self.pick(&mut st) {
                Some(r) => {
                    st.busy[r] = true;
                    drop(st);
                    let result = self.step(r, &mut encoder);
                    st = lock(&self.state);
                    self.finish_step(&mut st, r, result);
                }
                None => st = self.work_ready.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    /// The next batch of `lane` for the matcher; `None` when the lane has no more (or the pass
    /// failed). Takes the rank's step itself when nothing is queued and no worker is on it, and
    /// another rank's while a worker is on it.
    fn take(&self, lane: usize, local: &MatcherLocal) -> Option<Vec<Item>> {
        let mut st = lock(&self.state);
        loop {
            if st.error.is_some() {
                return None;
            }
            let mut r = self.lane_rank[lane];
            if let Some(batch) = st.queues[lane].pop_front() {
                if self.remote[r] {
                    drop(st);
                    if let Err(e) = self.take_arrived(local) {
                        lock(&self.state).error.get_or_insert(e);
                    }
                    let queued = self.queued_steps(&lock(&self.state), r);
                    if let Some(queued) = queued
                        && queued < REMOTE_STEPS_AHEAD
                        && let Err(e) = local.ask_up_to(r, REMOTE_STEPS_AHEAD - queued)
                    {
                        lock(&self.state).error.get_or_insert(e);
                    }
                } else {
                    st.queued -= 1;
                    self.work_ready.notify_one();
                    drop(st);
                }
                (local.progress.borrow_mut())(self.events_done.load(Ordering::Relaxed));
                return Some(batch);
            }
            if st.lane_finished[lane] {
                return None;
            }
            if self.remote[r] {
                drop(st);
                if let Err(e) = self.receive_step(r, local) {
                    lock(&self.state).error.get_or_insert(e);
                }
                st = lock(&self.state);
                continue;
            }
            if st.busy[r] {
                // A worker is on it: read ahead for another lane meanwhile rather than idle.
                match self.pick(&mut st) {
                    Some(other) => r = other,
                    None => {
                        st = self.data_ready.wait(st).unwrap_or_else(|p| p.into_inner());
                        continue;
                    }
                }
            }
            st.busy[r] = true;
            drop(st);
            let result = self.step(r, &mut local.encoder.borrow_mut());
            st = lock(&self.state);
            self.finish_step(&mut st, r, result);
        }
    }
}

impl Shared<'_> {
    /// How many steps of remote rank `r` wait in its lanes' queues (the most of any lane), or
    /// `None` when the rank has nothing left: steps are asked for ahead of need up to a bound,
    /// so its owner works while this process matches.
    fn queued_steps(&self, st: &State, r: usize) -> Option<u32> {
        let work = lock(&self.work[r]);
        let open = work.lanes.iter().filter(|l| !st.lane_finished[l.global]);
        open.map(|l| st.queues[l.global].len() as u32).max()
    }

    /// Waits for the next step result of any owner (asking for rank `r`'s first, unless already
    /// asked) and queues its batches.
    fn receive_step(&self, r: usize, local: &MatcherLocal<'_>) -> Result<(), RebuildError> {
        let Some(job) = &local.job else {
            return Err(RebuildError::Job(
                "a rank of another process without a job".into(),
            ));
        };
        local.ask_up_to(r, 1)?;
        let (from, tag, bytes) = job.transport.recv(None).map_err(RebuildError::Job)?;
        self.handle_message(job, from, tag, &bytes)
    }

    /// Queues every step result that has arrived, without waiting: an owner's send of a large
    /// result does not complete until it is received here, so results asked for ahead are taken
    /// as they come, not only when a lane runs dry.
    fn take_arrived(&self, local: &MatcherLocal<'_>) -> Result<(), RebuildError> {
        let Some(job) = &local.job else {
            return Ok(());
        };
        while let Some((from, tag, bytes)) = job.transport.try_recv().map_err(RebuildError::Job)? {
            self.handle_message(job, from, tag, &bytes)?;
        }
        Ok(())
    }

    fn handle_message(
        &self,
        job: &JobLocal<'_>,
        from: usize,
        tag: u32,
        bytes: &[u8],
    ) -> Result<(), RebuildError> {
        match tag {
            job::TAG_STEP => {
                let msg = StepMessage::decode(bytes)
                    .map_err(|e| RebuildError::Job(format!("process {from}: {e}")))?;
                if let Some(n) = job.requested.borrow_mut().get_mut(msg.rank_idx as usize) {
                    *n = n.saturating_sub(1);
                }
                self.events_done
                    .fetch_add(msg.events_read, Ordering::Relaxed);
                let mut st = lock(&self.state);
                for lane in msg.lanes {
                    let LaneBatch {
                        lane: global,
                        finished,
                        indices,
                        removed,
                        events,
                    } = lane;
                    let global = global as usize;
                    if global >= st.queues.len() {
                        return Err(RebuildError::Job(format!(
                            "process {from} sent lane {global} of a trace with {} lanes",
                            st.queues.len()
                        )));
                    }
                    if !events.is_empty() {
                        let batch = indices
                            .into_iter()
                            .zip(removed)
                            .zip(events)
                            .map(|((index, removed), event)| Item {
                                index,
                                removed,
                                event,
                            })
                            .collect();
                        st.queues[global].push_back(batch);
                    }
                    st.lane_finished[global] |= finished;
                }
                Ok(())
            }
            job::TAG_FAILED => Err(RebuildError::Job(format!(
                "process {from}: {}",
                String::from_utf8_lossy(bytes)
            ))),
            other => Err(RebuildError::Job(format!(
                "process {from} sent an unexpected message (tag {other})"
            ))),
        }
    }
}

/// Whether the matcher needs `e` when nothing is repaired (see the module docs).
#[inline]
fn keep(
    ctx: &HbContext,
    rank_idx: usize,
    several: bool,
    lane: &mut LaneWork<'_>,
    e: &Event,
) -> bool {
    match e {
        Event::Call(c) => {
            lane.last_call_kept = several
                || std::mem::take(&mut lane.after_commdef)
                || ctx.is_communication(rank_idx, c.func);
            lane.last_call_kept
        }
        Event::Completion(_) => lane.last_call_kept,
        Event::CommDef { .. } => {
            lane.after_commdef = true;
            true
        }
        Event::RemoteGroup { .. } | Event::EpochGroup { .. } => true,
        _ => false,
    }
}

/// What only the matching thread touches.
struct MatcherLocal<'p> {
    encoder: RefCell<ChunkEncoder>,
    progress: RefCell<&'p mut dyn FnMut(u64)>,
    /// Only this thread talks to the other processes (MPI is initialised for one thread).
    job: Option<JobLocal<'p>>,
}

struct JobLocal<'p> {
    transport: &'p dyn Transport,
    /// Per rank: steps asked for that have not come yet.
    requested: RefCell<Vec<u32>>,
    /// Per rank: the process that owns it.
    owners: Vec<usize>,
}

/// Steps of one remote rank asked for or queued at most: enough that its owner always has the
/// next one to work on while messages travel both ways.
const REMOTE_STEPS_AHEAD: u32 = 4;

impl MatcherLocal<'_> {
    /// Asks the owner of remote rank `r` for steps until `limit` are asked for.
    fn ask_up_to(&self, r: usize, limit: u32) -> Result<(), RebuildError> {
        let Some(job) = &self.job else {
            return Ok(());
        };
        let mut requested = job.requested.borrow_mut();
        while requested[r] < limit {
            requested[r] += 1;
            job.transport
                .send(job.owners[r], job::TAG_NEED, &job::encode_need(r))
                .map_err(RebuildError::Job)?;
        }
        Ok(())
    }
}

/// The matcher's view of one lane: the batches the workers queued for it.
struct QueueSource<'s, 'a, 'p> {
    shared: &'s Shared<'a>,
    local: &'s MatcherLocal<'p>,
    lane: usize,
    current: std::vec::IntoIter<Item>,
    index: u64,
    removed: u64,
}

impl Iterator for QueueSource<'_, '_, '_> {
    type Item = Event;

    #[inline]
    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(item) = self.current.next() {
                self.index = item.index;
                self.removed = item.removed;
                return Some(item.event);
            }
            self.current = self.shared.take(self.lane, self.local)?.into_iter();
        }
    }
}

impl hb::LaneSource for QueueSource<'_, '_, '_> {
    fn removed_ns(&self) -> u64 {
        self.removed
    }
    fn source_index(&self) -> Option<u64> {
        Some(self.index)
    }
}

/// What a pass reads, opened once: the ranks' files, the lanes, their time maps, and the
/// matcher's context.
struct Inputs {
    open: Vec<OpenRank>,
    ids: Vec<LaneId>,
    maps: Vec<TimeMap>,
    ctx: HbContext,
}

impl Inputs {
    fn open(trace: &Trace, metas: &[RankMeta], threads: usize) -> Result<Inputs, RebuildError> {
        let open: Vec<OpenRank> = map_indexed(trace.ranks.len(), threads, |i| {
            OpenRank::open(&trace.ranks[i])
        })
        .into_iter()
        .collect::<Result<_, _>>()?;
        let ids = lane_ids(metas);
        // One map per lane: a suspension pauses only the thread that ran it.
        let maps: Vec<TimeMap> = ids
            .iter()
            .map(|id| TimeMap::for_stream(&metas[rank_slot(metas, id.rank)], id.stream))
            .collect();
        Ok(Inputs {
            open,
            ids,
            maps,
            ctx: HbContext::new(metas, trace.world_size),
        })
    }

    /// The pass's shared state; the ranks marked `remote` are stepped by other processes.
    fn shared<'a>(
        &'a self,
        metas: &[RankMeta],
        cfg: PassConfig<'a>,
        remote: Vec<bool>,
        threads: usize,
    ) -> Shared<'a> {
        let ids = &self.ids;
        let remove_dp_prime = cfg.remove.is_some_and(Remove::dp_prime);
        let remove_dp = cfg.remove.is_some_and(Remove::dp);
        let writes = cfg.output.is_some();
        let mut work: Vec<RankWork<'_>> = metas
            .iter()
            .enumerate()
            .map(|(i, m)| RankWork {
                rank_idx: i,
                rank: m.rank,
                lanes: Vec::new(),
            })
            .collect();
        let mut lane_rank = Vec::with_capacity(ids.len());
        for (global, id) in ids.iter().enumerate() {
            let r = rank_slot(metas, id.rank);
            lane_rank.push(r);
            work[r].lanes.push(LaneWork {
                global,
                walk: ChunkWalk::stream(&self.open[r].files, id.stream),
                current: None,
                mapper: LaneMapper::new(&self.maps[global], remove_dp_prime, remove_dp),
                next_index: 0,
                out: (writes && !remote[r]).then(|| LaneOut::new(id.stream)),
                last_call_kept: false,
                after_commdef: false,
                held_poll: None,
                done: false,
            });
        }
        // Workers pick neither a rank without lanes (no events at all) nor another process's.
        let rank_finished: Vec<bool> = work
            .iter()
            .zip(&remote)
            .map(|(w, &far)| far || w.lanes.is_empty())
            .collect();
        let remaining_ranks = rank_finished.iter().filter(|f| !**f).count();
        Shared {
            ctx: &self.ctx,
            work: work.into_iter().map(Mutex::new).collect(),
            lane_rank,
            state: Mutex::new(State {
                queues: ids.iter().map(|_| VecDeque::new()).collect(),
                lane_finished: vec![false; ids.len()],
                busy: vec![false; metas.len()],
                rank_finished,
                remaining_ranks,
                queued: 0,
                cursor: 0,
                error: None,
            }),
            work_ready: Condvar::new(),
            data_ready: Condvar::new(),
            feed_all: cfg.repair.enabled,
            output: cfg.output,
            remote,
            // Lanes are read in lockstep (every collective holds them together), so their batches
            // run out together: the workers must be able to refill every lane while the matcher
            // works through the current ones.
            budget: ids.len().max(2 * threads),
            step_events: (BATCHED_EVENTS / ids.len().max(1)).clamp(MIN_STEP_EVENTS, STEP_EVENTS),
            events_done: AtomicU64::new(0),
        }
    }
}

fn rank_slot(metas: &[RankMeta], rank: u32) -> usize {
    metas.iter().position(|m| m.rank == rank).unwrap_or(0)
}

/// Per rank of `metas`: whether a process other than this one owns it.
fn remote_ranks(metas: &[RankMeta], job: Option<&dyn Transport>) -> (Vec<bool>, Vec<usize>) {
    let (me, size) = job.map_or((0, 1), |j| (j.rank(), j.size()));
    let owners: Vec<usize> = (0..metas.len())
        .map(|r| job::owner_of(r, metas.len(), size))
        .collect();
    (owners.iter().map(|&o| o != me).collect(), owners)
}

/// Runs the second pass (see the module docs). `on_event` sees what the matcher hands out:
/// every event with the repair on (its times moved by the repair), otherwise only what matching
/// needs. `progress` gets the number of events read so far. In a job, this is process 0's part.
pub(crate) fn run(
    trace: &Trace,
    cfg: PassConfig<'_>,
    mut on_event: impl FnMut(usize, &Event),
    on_match: impl FnMut(&MessageMatch),
    progress: &mut dyn FnMut(u64),
) -> Result<PassResult, RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let repair = cfg.repair;
    let job = cfg.job;
    if let Some(j) = job
        && j.rank() != 0
    {
        return Err(RebuildError::Job(
            "only process 0 runs the matcher; the others serve steps".into(),
        ));
    }
    let inputs = match Inputs::open(trace, metas, threads) {
        Ok(mut i) => {
            i.ctx.set_estimates(cfg.estimates.cloned());
            i
        }
        Err(e) => {
            finish_job(job, &mut Vec::new()).ok();
            return Err(e);
        }
    };
    let ids = &inputs.ids;
    let (remote, owners) = remote_ranks(metas, job);
    let shared = inputs.shared(metas, cfg, remote, threads);
    let zstd_level = shared.output.as_ref().map_or(1, |o| o.zstd_level);
    let local = MatcherLocal {
        encoder: RefCell::new(ChunkEncoder::new(zstd_level)),
        progress: RefCell::new(progress),
        job: job.map(|transport| JobLocal {
            transport,
            requested: RefCell::new(vec![0; metas.len()]),
            owners,
        }),
    };
    // The times the matcher handed out for each lane's first InitDone and FinalizeStart: with the
    // repair on, they include its shifts.
    let mut seen: Vec<(Option<u64>, Option<u64>)> = vec![(None, None); ids.len()];
    let report = std::thread::scope(|scope| {
        let workers: Vec<_> = (1..threads)
            .map(|_| scope.spawn(|| shared.worker(zstd_level)))
            .collect();
        let lanes = ids
            .iter()
            .enumerate()
            .map(|(lane, id)| {
                (
                    *id,
                    QueueSource {
                        shared: &shared,
                        local: &local,
                        lane,
                        current: Vec::new().into_iter(),
                        index: 0,
                        removed: 0,
                    },
                )
            })
            .collect();
        let (report, estimates) = hb::run_learning(
            shared.ctx,
            lanes,
            repair,
            |li, e| {
                if let Event::Marker(m) = e {
                    match *m {
                        format::Marker::InitDone { time } => {
                            seen[li].0.get_or_insert(time);
                        }
                        format::Marker::FinalizeStart { time } => {
                            seen[li].1.get_or_insert(time);
                        }
                        _ => {}
                    }
                }
                on_event(li, e);
            },
            on_match,
        );
        // An error ends the matcher early; wake the workers so they see it and stop.
        {
            let mut st = lock(&shared.state);
            if st.error.is_some() {
                st.remaining_ranks = 0;
            }
        }
        shared.work_ready.notify_all();
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
        (report, estimates)
    });
    let (report, estimates) = report;
    let mut remote_marks = Vec::new();
    let finished = finish_job(job, &mut remote_marks);
    let st = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
    finished?;
    let mut marks = vec![LaneMarks::default(); ids.len()];
    for w in shared.work {
        for lane in w.into_inner().unwrap_or_else(|p| p.into_inner()).lanes {
            marks[lane.global] = lane.mapper.marks;
        }
    }
    for (lane, m) in remote_marks {
        if let Some(slot) = marks.get_mut(lane as usize) {
            *slot = m;
        }
    }
    for (m, &(init, fin)) in marks.iter_mut().zip(&seen) {
        // The replay moves a lane either way.
        if let (Some(mark), Some(t)) = (m.init.as_mut(), init) {
            mark.shift_ns = t as f64 - mark.mapped as f64;
        }
        if let (Some(mark), Some(t)) = (m.finalize.as_mut(), fin) {
            mark.shift_ns = t as f64 - mark.mapped as f64;
        }
    }
    Ok(PassResult {
        report,
        estimates,
        marks,
    })
}

/// Tells every other process of the job that nothing more will be asked, and collects their
/// lanes' marks. Step results still on their way (asked for ahead of need) are dropped. Called
/// on every way out of process 0's pass, so no owner waits forever.
pub(crate) fn finish_job(
    job: Option<&dyn Transport>,
    marks: &mut Vec<(u32, LaneMarks)>,
) -> Result<(), RebuildError> {
    let Some(job) = job else {
        return Ok(());
    };
    let mut first_error: Option<RebuildError> = None;
    let mut waiting = Vec::new();
    for p in 1..job.size() {
        match job.send(p, job::TAG_FINISH, &[]) {
            Ok(()) => waiting.push(p),
            Err(e) => {
                first_error.get_or_insert(RebuildError::Job(e));
            }
        }
    }
    for p in waiting {
        loop {
            let (_, tag, bytes) = match job.recv(Some(p)) {
                Ok(m) => m,
                Err(e) => {
                    first_error.get_or_insert(RebuildError::Job(e));
                    break;
                }
            };
            match tag {
                job::TAG_MARKS => {
                    match job::decode_marks(&bytes) {
                        Ok(m) => marks.extend(m),
                        Err(e) => {
                            first_error
                                .get_or_insert(RebuildError::Job(format!("process {p}: {e}")));
                        }
                    }
                    break;
                }
                job::TAG_FAILED => {
                    first_error.get_or_insert(RebuildError::Job(format!(
                        "process {p}: {}",
                        String::from_utf8_lossy(&bytes)
                    )));
                }
                _ => {}
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The part of a process other than 0 in a job: steps the ranks it owns when process 0 asks,
/// writing their output (without the repair) and sending what the matcher needs, until told to
/// finish. A failure here is reported to process 0, which reports it for the job.
pub(crate) fn serve(
    trace: &Trace,
    cfg: PassConfig<'_>,
    job: &dyn Transport,
) -> Result<(), RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let zstd_level = cfg.output.as_ref().map_or(1, |o| o.zstd_level);
    let inputs = Inputs::open(trace, metas, threads);
    let (remote, _) = remote_ranks(metas, Some(job));
    let shared = match &inputs {
        Ok(inputs) => Ok(inputs.shared(metas, cfg, remote.clone(), threads)),
        Err(e) => Err(e.to_string()),
    };
    let mut failed = false;
    let mut encoder = ChunkEncoder::new(zstd_level);
    loop {
        let (_, tag, bytes) = job.recv(Some(0)).map_err(RebuildError::Job)?;
        match tag {
            job::TAG_NEED => {
                if failed {
                    continue;
                }
                let step = match &shared {
                    Ok(shared) => job::decode_need(&bytes).and_then(|r| {
                        if remote.get(r) != Some(&false) {
                            return Err(format!("asked for rank index {r}, which it does not own"));
                        }
                        let before = shared.events_done.load(Ordering::Relaxed);
                        let produced = shared.step(r, &mut encoder).map_err(|e| error_text(&e))?;
                        let after = shared.events_done.load(Ordering::Relaxed);
                        Ok(step_message(r, after - before, produced))
                    }),
                    Err(e) => Err(e.clone()),
                };
                match step {
                    Ok(msg) => job
                        .send_later(0, job::TAG_STEP, msg.encode())
                        .map_err(RebuildError::Job)?,
                    Err(e) => {
                        failed = true;
                        job.send(0, job::TAG_FAILED, e.as_bytes())
                            .map_err(RebuildError::Job)?;
                    }
                }
            }
            job::TAG_FINISH => {
                let mut marks = Vec::new();
                if let Ok(shared) = shared {
                    for (w, far) in shared.work.into_iter().zip(&remote) {
                        if *far {
                            continue;
                        }
                        for lane in w.into_inner().unwrap_or_else(|p| p.into_inner()).lanes {
                            marks.push((lane.global as u32, lane.mapper.marks));
                        }
                    }
                }
                job.complete_sends().map_err(RebuildError::Job)?;
                job.send(0, job::TAG_MARKS, &job::encode_marks(&marks))
                    .map_err(RebuildError::Job)?;
                return Ok(());
            }
            other => {
                return Err(RebuildError::Job(format!(
                    "process 0 sent an unexpected message (tag {other})"
                )));
            }
        }
    }
}

/// An owner that cannot take part (it could not read the trace or create its files): answers
/// the first request with `reason` (unless process 0 was `told` already) and the finish with no
/// marks.
pub(crate) fn serve_failed(
    job: &dyn Transport,
    reason: &str,
    mut told: bool,
) -> Result<(), RebuildError> {
    loop {
        let (_, tag, _) = job.recv(Some(0)).map_err(RebuildError::Job)?;
        match tag {
            job::TAG_FINISH => {
                if !told {
                    job.send(0, job::TAG_FAILED, reason.as_bytes())
                        .map_err(RebuildError::Job)?;
                }
                return job
                    .send(0, job::TAG_MARKS, &job::encode_marks(&[]))
                    .map_err(RebuildError::Job);
            }
            _ if !told => {
                told = true;
                job.send(0, job::TAG_FAILED, reason.as_bytes())
                    .map_err(RebuildError::Job)?;
            }
            _ => {}
        }
    }
}

/// An error with its causes, for a message to another process.
pub(crate) fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn step_message(
    r: usize,
    events_read: u64,
    produced: Vec<(usize, Vec<Item>, bool)>,
) -> StepMessage {
    StepMessage {
        rank_idx: r as u32,
        events_read,
        lanes: produced
            .into_iter()
            .map(|(lane, items, finished)| {
                let mut batch = LaneBatch {
                    lane: lane as u32,
                    finished,
                    indices: Vec::with_capacity(items.len()),
                    removed: Vec::with_capacity(items.len()),
                    events: Vec::with_capacity(items.len()),
                };
                for item in items {
                    batch.indices.push(item.index);
                    batch.removed.push(item.removed);
                    batch.events.push(item.event);
                }
                batch
            })
            .collect(),
    }
}
