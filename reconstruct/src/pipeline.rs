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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use format::reader::ChunkIntoEvents;
use format::{ChunkEncoder, ChunkWalk, EncodedChunk, Event};

use crate::clock::{RankMeta, TimeMap};
use crate::hb::{self, HbContext, HbReport, MessageMatch, Repair};
use crate::lanes::{LaneId, OpenRank};
use crate::mapping::{LaneMapper, LaneMarks};
use crate::output::{LaneOut, RankOutput};
use crate::rebuild::{RebuildError, Remove};
use crate::trace::Trace;

/// The threads to use when `requested` were asked for: 0 means every core the process may run on.
pub fn threads(requested: usize) -> usize {
    if requested == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        requested
    }
}

/// `f(0..n)` on up to `threads` threads, results in index order.
pub(crate) fn map_indexed<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let value = f(i);
                    *lock(&slots[i]) = Some(value);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every index was computed")
        })
        .collect()
}

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
}

pub(crate) struct PassResult {
    pub report: HbReport,
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
            if let Some(batch) = st.queues[lane].pop_front() {
                st.queued -= 1;
                self.work_ready.notify_one();
                drop(st);
                (local.progress.borrow_mut())(self.events_done.load(Ordering::Relaxed));
                return Some(batch);
            }
            if st.lane_finished[lane] {
                return None;
            }
            let mut r = self.lane_rank[lane];
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

/// Runs the second pass (see the module docs). `on_event` sees what the matcher hands out:
/// every event with the repair on (its times moved by the repair), otherwise only what matching
/// needs. `progress` gets the number of events read so far.
pub(crate) fn run(
    trace: &Trace,
    cfg: PassConfig<'_>,
    mut on_event: impl FnMut(usize, &Event),
    on_match: impl FnMut(&MessageMatch),
    progress: &mut dyn FnMut(u64),
) -> Result<PassResult, RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let open: Vec<OpenRank> = map_indexed(trace.ranks.len(), threads, |i| {
        OpenRank::open(&trace.ranks[i])
    })
    .into_iter()
    .collect::<Result<_, _>>()?;
    let ids = lane_ids(metas);
    let rank_slot = |rank: u32| metas.iter().position(|m| m.rank == rank).unwrap_or(0);
    // One map per lane: a suspension pauses only the thread that ran it.
    let maps: Vec<TimeMap> = ids
        .iter()
        .map(|id| TimeMap::for_stream(&metas[rank_slot(id.rank)], id.stream))
        .collect();
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
        let r = rank_slot(id.rank);
        lane_rank.push(r);
        work[r].lanes.push(LaneWork {
            global,
            walk: ChunkWalk::stream(&open[r].files, id.stream),
            current: None,
            mapper: LaneMapper::new(&maps[global], remove_dp_prime, remove_dp),
            next_index: 0,
            out: writes.then(|| LaneOut::new(id.stream)),
            last_call_kept: false,
            after_commdef: false,
            held_poll: None,
            done: false,
        });
    }
    // A rank without lanes (no events at all) has nothing to read.
    let rank_finished: Vec<bool> = work.iter().map(|w| w.lanes.is_empty()).collect();
    let remaining_ranks = rank_finished.iter().filter(|f| !**f).count();
    let ctx = HbContext::new(metas, trace.world_size);
    let zstd_level = cfg.output.as_ref().map_or(1, |o| o.zstd_level);
    let shared = Shared {
        ctx: &ctx,
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
        // Lanes are read in lockstep (every collective holds them together), so their batches
        // run out together: the workers must be able to refill every lane while the matcher
        // works through the current ones.
        budget: ids.len().max(2 * threads),
        step_events: (BATCHED_EVENTS / ids.len().max(1)).clamp(MIN_STEP_EVENTS, STEP_EVENTS),
        events_done: AtomicU64::new(0),
    };
    let local = MatcherLocal {
        encoder: RefCell::new(ChunkEncoder::new(zstd_level)),
        progress: RefCell::new(progress),
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
        let report = hb::run(
            &ctx,
            lanes,
            cfg.repair,
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
        report
    });
    let st = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
    let mut marks = vec![LaneMarks::default(); ids.len()];
    for w in shared.work {
        for lane in w.into_inner().unwrap_or_else(|p| p.into_inner()).lanes {
            let mut m = lane.mapper.marks;
            let (init, fin) = seen[lane.global];
            if let (Some(mark), Some(t)) = (m.init.as_mut(), init) {
                mark.shift_ns = t.saturating_sub(mark.mapped) as f64;
            }
            if let (Some(mark), Some(t)) = (m.finalize.as_mut(), fin) {
                mark.shift_ns = t.saturating_sub(mark.mapped) as f64;
            }
            marks[lane.global] = m;
        }
    }
    Ok(PassResult { report, marks })
}
