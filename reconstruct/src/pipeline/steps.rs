//! One step of one rank: the next few thousand events of each of its lanes decoded, their times
//! mapped, the output written when nothing is repaired, and what the matcher needs queued for
//! it; the workers that take steps ahead of the matcher within a budget, and the matcher's own
//! fetch of a lane's next batch.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use format::reader::ChunkIntoEvents;
use format::{ChunkEncoder, ChunkWalk, EncodedChunk, Event};

use super::open_sends::OpenSends;
use super::{Inputs, Item, MatcherLocal, PassConfig, WorkerOutput, lock, rank_slot};
use crate::hb::{HbContext, ProxyFilter};
use crate::job::LaneBatch;
use crate::mapping::LaneMapper;
use crate::options::{RebuildError, Remove};
use crate::output::{Held, LaneOut};
use trace::definitions::RankMeta;

/// A worker's view of one lane.
pub(super) struct LaneWork<'a> {
    pub(super) global: usize,
    walk: ChunkWalk<'a>,
    /// The chunk being read: a step takes at most [`STEP_EVENTS`] of its events, so what waits
    /// for the matcher stays small; of the chunk, only the block being read is decompressed
    /// (chunk version 9: every lane steps at once, so this is what bounds the input's memory by
    /// lanes × block rather than lanes × chunk; an older chunk is held whole).
    current: Option<ChunkIntoEvents<'a>>,
    pub(super) mapper: LaneMapper<'a>,
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
    /// Its sends whose completions need not reach the matcher (see [`OpenSends`]).
    open_sends: OpenSends,
    done: bool,
    /// A split pass whose proxies stream: per other process, the filter that picks what it
    /// needs of this lane (see [`crate::hb::ProxyFilter`]).
    pub(super) proxy_filters: Vec<(usize, ProxyFilter<'a>)>,
}

pub(super) struct RankWork<'a> {
    rank_idx: usize,
    rank: u32,
    pub(super) lanes: Vec<LaneWork<'a>>,
    /// Output chunks encoded and not yet appended.
    held: Held,
}

pub(super) struct State {
    pub(super) queues: Vec<VecDeque<Vec<Item>>>,
    pub(super) lane_finished: Vec<bool>,
    busy: Vec<bool>,
    rank_finished: Vec<bool>,
    pub(super) remaining_ranks: usize,
    /// Batches waiting in all queues.
    queued: usize,
    /// Where the round-robin search for the next rank to read ahead starts.
    cursor: usize,
    pub(super) error: Option<RebuildError>,
    /// A split pass whose proxies stream: per process, the proxy batches of the own lanes made
    /// and not yet sent, in lane order (a rank is stepped by one thread at a time, and its
    /// step's batches are queued before the next step starts).
    pub(super) outgoing: Vec<Vec<LaneBatch>>,
}

pub(super) struct Shared<'a> {
    pub(super) ctx: &'a HbContext,
    pub(super) work: Vec<Mutex<RankWork<'a>>>,
    lane_rank: Vec<usize>,
    pub(super) state: Mutex<State>,
    pub(super) work_ready: Condvar,
    data_ready: Condvar,
    /// Everything goes to the matcher (the repair is on).
    feed_all: bool,
    /// Sends' completions stay out of what goes to the matcher (neither the repair nor learning,
    /// and not for ranks with several lanes: see [`OpenSends`]).
    leave_out_sends: bool,
    pub(super) output: Option<WorkerOutput<'a>>,
    /// Per rank: another process of the job steps it.
    remote: Vec<bool>,
    /// Queued batches beyond which workers stop reading ahead.
    budget: usize,
    step_events: usize,
    pub(super) events_done: AtomicU64,
    /// The engine's output chunks to encode, first of what a worker does (see
    /// [`super::EncodeQueue`]).
    encode: Option<&'a super::EncodeQueue<'a>>,
}

/// The encoders of a thread that helps with the steps and the engine's output (a worker, or the
/// engine while it waits: [`Shared::work_while_waiting`]), each made when first needed.
pub(super) struct IdleEncoders {
    steps_level: i32,
    steps: Option<ChunkEncoder>,
    output: Option<ChunkEncoder>,
}

impl IdleEncoders {
    /// `steps_level`: the zstd level of what the steps write.
    pub(super) fn new(steps_level: i32) -> Self {
        IdleEncoders {
            steps_level,
            steps: None,
            output: None,
        }
    }
}

/// One thing a free thread does for the pass ([`Shared::next_unit`]).
enum Unit {
    /// Encode and append one output chunk of the engine's.
    Encode(super::encode_queue::EncodeJob),
    /// Take the next step of this rank (marked busy).
    Step(usize),
}

/// At most this many batches wait in one lane's queue.
const PER_LANE_QUEUE: usize = 1;

/// Events a step reads from one lane: large enough that the locking per step is noise, small
/// enough that a batch is a few hundred KiB...
const STEP_EVENTS: usize = 4096;
/// ...and fewer with many lanes, since each lane may have a batch being matched and one queued:
/// about this many events (of ~120 bytes) over all lanes, each way (about 120 MiB). Smaller
/// steps cost more per event than they save: every step of a lane finds its state cold when
/// thousands of lanes are stepped in turn (4 096 lanes: 2^20 ran 11 % faster than 2^18, for
/// 173 MiB; `paper-notes/reconstruct-issue31-2026-11-27-to-28.md`, 10^9 events).
const BATCHED_EVENTS: usize = 1 << 20;
const MIN_STEP_EVENTS: usize = 64;
/// How long an idle worker waits before it looks for output chunks to encode: short beside the
/// time one takes (a chunk of 8 Ki events: about a ms).
const ENCODE_LOOK: std::time::Duration = std::time::Duration::from_micros(500);

impl<'a> Shared<'a> {
    /// Decodes, maps (and maybe writes) the next chunk of each lane of rank `r`.
    pub(super) fn step(
        &self,
        r: usize,
        encoder: &mut ChunkEncoder,
    ) -> Result<Vec<(usize, Vec<Item>, bool)>, RebuildError> {
        let mut guard = lock(&self.work[r]);
        let work = &mut *guard;
        let mut proxies: Vec<(usize, LaneBatch)> = Vec::new();
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
                } else if keep(
                    self.ctx,
                    work.rank_idx,
                    several,
                    self.leave_out_sends,
                    lane,
                    &e,
                ) {
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
            for (q, filter) in &mut lane.proxy_filters {
                let mut proxy = LaneBatch {
                    lane: lane.global as u32,
                    finished: lane.done,
                    ..LaneBatch::default()
                };
                for item in batch.iter().filter(|item| filter.wants(&item.event)) {
                    proxy.indices.push(item.index);
                    proxy.removed.push(item.removed);
                    proxy.events.push(item.event.clone());
                }
                if proxy.finished || !proxy.events.is_empty() {
                    proxies.push((*q, proxy));
                }
            }
            produced.push((lane.global, batch, lane.done));
        }
        if let Some(out) = &self.output {
            let target = &out.ranks[r];
            for chunk in chunks {
                work.held.add(target, chunk, out.bytes_per_write)?;
            }
            if work.lanes.iter().all(|l| l.done) {
                work.held.flush(target)?;
            }
        }
        // The state's lock is taken after the rank's, never while holding it.
        drop(guard);
        if !proxies.is_empty() {
            let mut st = lock(&self.state);
            for (q, proxy) in proxies {
                st.outgoing[q].push(proxy);
            }
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
        let r = self.pickable(st)?;
        st.cursor = (r + 1) % st.busy.len();
        Some(r)
    }

    fn pickable(&self, st: &State) -> Option<usize> {
        if st.queued >= self.budget {
            return None;
        }
        let n = st.busy.len();
        (0..n).map(|k| (st.cursor + k) % n).find(|&r| {
            !st.busy[r]
                && !st.rank_finished[r]
                && lock(&self.work[r])
                    .lanes
                    .iter()
                    .all(|l| l.done || st.queues[l.global].len() < PER_LANE_QUEUE)
        })
    }

    /// A split pass whose proxies stream: each own lane gets a filter per other process
    /// (`local[q]`: the world ranks process `q` owns).
    pub(super) fn stream_proxies(&mut self, local: &'a [Vec<bool>], me: usize) {
        let ctx = self.ctx;
        for (r, work) in self.work.iter_mut().enumerate() {
            if self.remote[r] {
                continue;
            }
            let work = work.get_mut().unwrap_or_else(|p| p.into_inner());
            for lane in &mut work.lanes {
                lane.proxy_filters = (0..local.len())
                    .filter(|&q| q != me)
                    .map(|q| (q, ProxyFilter::new(ctx, r, &local[q])))
                    .collect();
            }
        }
        self.state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .outgoing = (0..local.len()).map(|_| Vec::new()).collect();
    }

    /// The proxy batches made since the last call, per process, and whether the pass failed.
    pub(super) fn take_outgoing(&self) -> (Vec<Vec<LaneBatch>>, bool) {
        let mut st = lock(&self.state);
        let failed = st.error.is_some();
        if st.outgoing.iter().all(Vec::is_empty) {
            return (Vec::new(), failed);
        }
        let empty = (0..st.outgoing.len()).map(|_| Vec::new()).collect();
        (std::mem::replace(&mut st.outgoing, empty), failed)
    }

    /// Waits until no worker is stepping a rank and none will start one (the queues are full or
    /// every rank is read): after this, nothing more is made until the matcher takes a batch.
    pub(super) fn wait_idle(&self, has_workers: bool) {
        let mut st = lock(&self.state);
        loop {
            let busy = st.busy.iter().any(|&b| b);
            if st.error.is_some() || (!busy && (!has_workers || self.pickable(&st).is_none())) {
                return;
            }
            self.work_ready.notify_all();
            st = self
                .data_ready
                .wait_timeout(st, std::time::Duration::from_millis(2))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Ends the pass with `error` unless it already failed: the workers stop.
    pub(super) fn fail(&self, error: RebuildError) {
        lock(&self.state).error.get_or_insert(error);
        self.work_ready.notify_all();
        self.data_ready.notify_all();
    }

    /// What a thread free to help takes next: an output chunk of the engine's to encode first
    /// (the engine hands them out without waiting, and each holds memory until encoded), else a
    /// rank to read ahead within the budget. Takes the encode job from its queue, or marks the
    /// rank busy.
    fn next_unit(&self, st: &mut State) -> Option<Unit> {
        if let Some(job) = self.encode.and_then(|queue| queue.take()) {
            return Some(Unit::Encode(job));
        }
        let r = self.pick(st)?;
        st.busy[r] = true;
        Some(Unit::Step(r))
    }

    /// Does `unit`, with the state's lock not held, and records a step's result.
    fn run_unit(&self, unit: Unit, encoders: &mut IdleEncoders) {
        match unit {
            Unit::Encode(job) => {
                if let Some(queue) = self.encode {
                    let level = queue.output().zstd_level;
                    let encoder = encoders
                        .output
                        .get_or_insert_with(|| ChunkEncoder::new(level));
                    queue.run(job, encoder);
                }
            }
            Unit::Step(r) => {
                let level = encoders.steps_level;
                let result = self.step(
                    r,
                    encoders
                        .steps
                        .get_or_insert_with(|| ChunkEncoder::new(level)),
                );
                let mut st = lock(&self.state);
                self.finish_step(&mut st, r, result);
            }
        }
    }

    /// One unit of what a worker would do next, done on the caller's thread; whether there was
    /// one. A split pass's engine does this while it waits for another process: the work would
    /// otherwise fall between its own lanes' events, and the other process, in lock-step with it
    /// at every collective, would wait for that in turn.
    pub(super) fn work_while_waiting(&self, encoders: &mut IdleEncoders) -> bool {
        let unit = {
            let mut st = lock(&self.state);
            if st.error.is_some() {
                return false;
            }
            self.next_unit(&mut st)
        };
        let Some(unit) = unit else { return false };
        self.run_unit(unit, encoders);
        true
    }

    /// A worker thread: units until the pass is over or failed.
    pub(super) fn worker(&self, zstd_level: i32) {
        // The engine's output is at its own level, which the steps' (none written) need not be.
        let mut encoders = IdleEncoders::new(zstd_level);
        let mut st = lock(&self.state);
        loop {
            if st.error.is_some() || st.remaining_ranks == 0 {
                return;
            }
            match self.next_unit(&mut st) {
                Some(unit) => {
                    drop(st);
                    self.run_unit(unit, &mut encoders);
                    st = lock(&self.state);
                }
                // The engine queues chunks without waking anyone (it runs at the pace of its
                // events, and a notification per chunk would cost it more than the wait costs
                // here): a worker that may get them looks again soon.
                None if self.encode.is_some() => {
                    st = self
                        .work_ready
                        .wait_timeout(st, ENCODE_LOOK)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                None => st = self.work_ready.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    /// The next batch of `lane` for the matcher; `None` when the lane has no more (or the pass
    /// failed). Takes the rank's step itself when nothing is queued and no worker is on it, and
    /// another rank's while a worker is on it.
    pub(super) fn take(&self, lane: usize, local: &MatcherLocal) -> Option<Vec<Item>> {
        let mut st = lock(&self.state);
        loop {
            if st.error.is_some() {
                return None;
            }
            let mut r = self.lane_rank[lane];
            if let Some(batch) = st.queues[lane].pop_front() {
                if self.remote[r] {
                    drop(st);
                    self.keep_asking_ahead(r, local);
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

/// Whether the matcher needs `e` when nothing is repaired (see the module docs).
#[inline]
fn keep(
    ctx: &HbContext,
    rank_idx: usize,
    several: bool,
    leave_out_sends: bool,
    lane: &mut LaneWork<'_>,
    e: &Event,
) -> bool {
    // A rank with several lanes keeps every call and its completions: the matcher orders its
    // lanes' calls by their starts.
    let leave_out_sends = leave_out_sends && !several;
    match e {
        Event::Call(c) => {
            lane.last_call_kept = several
                || std::mem::take(&mut lane.after_commdef)
                || ctx.is_communication(rank_idx, c.func);
            if leave_out_sends {
                lane.open_sends
                    .call(ctx.is_isend(rank_idx, c.func), c.request);
            }
            lane.last_call_kept
        }
        Event::Completion(c) => {
            let of_send = leave_out_sends && lane.open_sends.completes_send(c.request);
            lane.last_call_kept && !of_send
        }
        Event::CommDef { .. } => {
            lane.after_commdef = true;
            true
        }
        Event::RemoteGroup { .. } | Event::EpochGroup { .. } => true,
        _ => false,
    }
}

impl Inputs {
    /// The pass's shared state; the ranks marked `remote` are stepped by other processes.
    pub(super) fn shared<'a>(
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
        let encode = cfg.encode;
        let mut work: Vec<RankWork<'_>> = metas
            .iter()
            .enumerate()
            .map(|(i, m)| RankWork {
                rank_idx: i,
                rank: m.rank,
                lanes: Vec::new(),
                held: Held::default(),
            })
            .collect();
        let mut lane_rank = Vec::with_capacity(ids.len());
        for (global, id) in ids.iter().enumerate() {
            let r = rank_slot(metas, id.rank);
            lane_rank.push(r);
            work[r].lanes.push(LaneWork {
                global,
                // Each chunk is dropped before the next is asked for.
                walk: ChunkWalk::stream(&self.open[r].files, id.stream).releasing(),
                current: None,
                mapper: LaneMapper::new(
                    &self.maps[global],
                    remove_dp_prime,
                    remove_dp,
                    metas[r].clock.read_ticks,
                ),
                next_index: 0,
                out: (writes && !remote[r]).then(|| LaneOut::new(id.stream)),
                last_call_kept: false,
                after_commdef: false,
                held_poll: None,
                open_sends: OpenSends::default(),
                done: false,
                proxy_filters: Vec::new(),
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
                outgoing: Vec::new(),
            }),
            work_ready: Condvar::new(),
            data_ready: Condvar::new(),
            feed_all: cfg.repair.enabled,
            leave_out_sends: !cfg.repair.enabled && !cfg.repair.learn,
            output: cfg.output,
            remote,
            // Lanes are read in lockstep (every collective holds them together), so their batches
            // run out together: the workers must be able to refill every lane while the matcher
            // works through the current ones.
            budget: ids.len().max(2 * threads),
            step_events: (BATCHED_EVENTS / ids.len().max(1)).clamp(MIN_STEP_EVENTS, STEP_EVENTS),
            events_done: AtomicU64::new(0),
            encode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::PassConfig;
    use format::synthetic::{HaloConfig, raw_buf};
    use format::{FileHeader, RankFileWriter, rank_file_name};

    /// `ranks` ranks of the synthetic halo, one chunk each.
    fn halo_trace(dir: &std::path::Path, ranks: u32, iterations: u64) {
        let mut encoder = ChunkEncoder::new(1);
        for rank in 0..ranks {
            let header = FileHeader::nanoseconds(rank, ranks, "steps test");
            let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).unwrap();
            let mut w = RankFileWriter::new(file, &header).unwrap();
            let buf = raw_buf(&HaloConfig {
                world_size: ranks,
                rank,
                iterations,
                ..HaloConfig::default()
            });
            w.write_chunk(&encoder.encode(rank, 0, 0, &buf)).unwrap();
        }
    }

    /// An engine that waits does what a worker would, within the same bounds: one step per
    /// rank until each lane holds the one batch it may, then nothing until the engine takes one.
    #[test]
    fn an_engine_that_waits_reads_each_rank_ahead_up_to_the_budget() {
        let dir =
            std::env::temp_dir().join(format!("evenflush-rec-steps-ahead-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // About 19 events an iteration: several steps of each rank.
        halo_trace(&dir, 3, 2_000);
        let trace = trace::Trace::open(&dir).unwrap();
        let metas = trace::scan::scan_with(&trace, 1).unwrap();
        let inputs = Inputs::open(&trace, &metas, 1).unwrap();
        let shared = inputs.shared(
            &metas,
            PassConfig::as_recorded(&metas, 1),
            vec![false; 3],
            1,
        );
        let mut idle = IdleEncoders::new(1);
        let mut units = 0;
        while shared.work_while_waiting(&mut idle) {
            units += 1;
            assert!(units <= 3, "read ahead past the budget");
        }
        assert_eq!(units, 3, "one step per rank");
        {
            let mut st = lock(&shared.state);
            let held: Vec<usize> = st.queues.iter().map(VecDeque::len).collect();
            assert_eq!(held, [1, 1, 1]);
            // The engine takes rank 1's batch: room for that rank's next step, and for no other.
            let taken = st.queues[1].pop_front().unwrap();
            st.queued -= 1;
            assert!(
                taken
                    .iter()
                    .all(|item| item.index < shared.step_events as u64)
            );
        }
        assert!(shared.work_while_waiting(&mut idle));
        assert!(!shared.work_while_waiting(&mut idle));
        {
            let st = lock(&shared.state);
            assert_eq!(st.queues[1].len(), 1);
            // The second batch goes on where the first stopped.
            let next = &st.queues[1][0];
            assert!(!next.is_empty());
            assert!(
                next.iter()
                    .all(|item| item.index >= shared.step_events as u64)
            );
        }
        // Nothing more once the pass failed.
        lock(&shared.state).queues[2].clear();
        lock(&shared.state).queued -= 1;
        shared.fail(RebuildError::Job("failed elsewhere".into()));
        assert!(!shared.work_while_waiting(&mut idle));
        drop(shared);
        drop(inputs);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
