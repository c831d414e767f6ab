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
//! With the repair on, the output times come out of the matcher: workers then decode and map,
//! every event goes through the queue, and the caller cuts what the matcher hands out into
//! chunks, which the workers encode and append between their steps ([`encode_queue`]).
//! Without it, only communication calls, their completions (but those of sends: [`open_sends`])
//! and communicator definitions go to the matcher: the rest changes nothing it counts.
//!
//! The output does not depend on the number of threads: each rank's file is written by one step
//! at a time, lane by lane, in the lanes' order.
//!
//! Here: the pass's configuration, its inputs and [`run`], with the matcher's side of the queues;
//! [`steps`]: what one step of a rank does, and the workers that take them; [`engine_writer`] and
//! [`encode_queue`]: the output the matcher hands out, cut and encoded; [`remote`]: the ranks
//! another process of an MPI job steps, from both sides; [`split`]: a job's pass where every
//! process matches its own ranks (no central matcher).

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard};

use format::{ChunkEncoder, Event};

use crate::hb::{self, HbContext, HbReport, MessageMatch, Repair};
use crate::job::{self, Transport};
use crate::mapping::{LaneMarks, SpanSeen};
use crate::options::{Options, RebuildError, Remove};
use crate::output::RankOutput;
use trace::Trace;
use trace::clock::TimeMap;
use trace::definitions::RankMeta;
use trace::lanes::{LaneId, OpenRank};

mod encode_queue;
mod engine_writer;
mod open_sends;
mod proxy_stream;
pub(crate) mod remote;
pub(crate) mod split;
mod steps;

pub(crate) use encode_queue::EncodeQueue;
pub(crate) use engine_writer::EngineWriter;
use remote::{JobLocal, finish_job};
use steps::Shared;

/// The threads of a pass, and `f(0..n)` on them: the first pass's, one definition.
pub(crate) use trace::parallel::map_indexed;
pub use trace::parallel::threads;

/// A poisoned lock means a worker panicked; the scope re-raises that panic, so the data is not
/// used in a half-updated state beyond reporting.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The workers write the output themselves (only when nothing is repaired).
#[derive(Clone, Copy)]
pub(crate) struct WorkerOutput<'a> {
    /// One per rank of the trace, in its order.
    pub ranks: &'a [RankOutput],
    pub chunk_events: usize,
    /// See [`crate::output::Held`].
    pub bytes_per_write: usize,
    pub zstd_level: i32,
}

impl<'a> WorkerOutput<'a> {
    /// The output of a pass over `lanes` lanes, as `opts` asks for it.
    pub(crate) fn new(ranks: &'a [RankOutput], opts: &Options, lanes: usize) -> Self {
        WorkerOutput {
            ranks,
            chunk_events: crate::options::output_chunk_events(opts, lanes),
            bytes_per_write: crate::options::output_bytes_per_write(ranks.len()),
            zstd_level: opts.zstd_level,
        }
    }
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
    /// Where the engine's output chunks wait for the workers to encode them (the repair and the
    /// replay: see [`EngineWriter`]).
    pub encode: Option<&'a EncodeQueue<'a>>,
}

impl<'a> PassConfig<'a> {
    /// The replay's learning pass: the times as recorded with DP' and DP removed, nothing
    /// moved, nothing written.
    pub(crate) fn learning(metas: &'a [RankMeta], threads: usize) -> Self {
        PassConfig {
            metas,
            remove: Some(Remove::Both),
            repair: Repair::learning(),
            threads,
            output: None,
            job: None,
            estimates: None,
            encode: None,
        }
    }

    /// Matching over the times as recorded: nothing removed, moved or written.
    pub(crate) fn as_recorded(metas: &'a [RankMeta], threads: usize) -> Self {
        PassConfig {
            remove: None,
            repair: Repair::OFF,
            ..PassConfig::learning(metas, threads)
        }
    }
}

pub(crate) struct PassResult {
    pub report: HbReport,
    /// What the pass learned with [`Repair::learn`].
    pub estimates: hb::Estimates,
    /// Per lane, in [`lane_ids`] order.
    pub marks: Vec<LaneMarks>,
    /// The matching of the written output, when the pass's processes made it between them (a
    /// split replay); otherwise whoever needs it matches the output.
    pub after: Option<HbReport>,
    /// `after` is what the processes' passes counted as they wrote (every count exact), not a
    /// match of the output.
    pub after_by_pass: bool,
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

/// What only the matching thread touches.
struct MatcherLocal<'p> {
    encoder: RefCell<ChunkEncoder>,
    progress: RefCell<&'p mut dyn FnMut(u64)>,
    /// Only this thread talks to the other processes (MPI is initialised for one thread).
    job: Option<JobLocal<'p>>,
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

impl<'s, 'a, 'p> QueueSource<'s, 'a, 'p> {
    fn new(shared: &'s Shared<'a>, local: &'s MatcherLocal<'p>, lane: usize) -> Self {
        QueueSource {
            shared,
            local,
            lane,
            current: Vec::new().into_iter(),
            index: 0,
            removed: 0,
        }
    }
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

impl Shared<'_> {
    /// After the matcher returned: joins the workers, waking them first if an error ended the
    /// matcher early, so that they see it and stop.
    fn stop_workers(&self, workers: Vec<std::thread::ScopedJoinHandle<'_, ()>>) {
        {
            let mut st = lock(&self.state);
            if st.error.is_some() {
                st.remaining_ranks = 0;
            }
        }
        self.work_ready.notify_all();
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
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
    // The times the matcher handed out for each lane's span markers: with the repair on, they
    // include its shifts.
    let mut seen: Vec<SpanSeen> = vec![SpanSeen::default(); ids.len()];
    let report = std::thread::scope(|scope| {
        let workers: Vec<_> = (1..threads)
            .map(|_| scope.spawn(|| shared.worker(zstd_level)))
            .collect();
        let lanes = ids
            .iter()
            .enumerate()
            .map(|(lane, id)| (*id, QueueSource::new(&shared, &local, lane)))
            .collect();
        let (report, estimates) = hb::run_learning(
            shared.ctx,
            lanes,
            repair,
            |li, e| {
                seen[li].see(e);
                on_event(li, e);
            },
            on_match,
        );
        shared.stop_workers(workers);
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
    for (m, seen) in marks.iter_mut().zip(&seen) {
        // The replay moves a lane either way.
        seen.shift(m);
    }
    Ok(PassResult {
        report,
        estimates,
        marks,
        after: None,
        after_by_pass: false,
    })
}
