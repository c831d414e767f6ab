//! The ranks another process of an MPI job steps ([`crate::job`]): process 0 asks their owners
//! for steps ahead of need and queues the results as they come; an owner ([`serve`]) steps its
//! ranks when asked and sends what the matcher needs; at the end process 0 collects the owners'
//! marks ([`finish_job`]).

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use format::ChunkEncoder;

use super::steps::{Shared, State};
use super::{Inputs, Item, MatcherLocal, PassConfig, lock, remote_ranks, threads};
use crate::job::{self, LaneBatch, StepMessage, Transport};
use crate::mapping::LaneMarks;
use crate::options::RebuildError;
use trace::Trace;

impl Shared<'_> {
    /// After the matcher took a batch of remote rank `r`: queues the step results that arrived
    /// and asks for more, up to [`REMOTE_STEPS_AHEAD`]. A failure is recorded for the pass.
    pub(super) fn keep_asking_ahead(&self, r: usize, local: &MatcherLocal<'_>) {
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
    }

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
    pub(super) fn receive_step(
        &self,
        r: usize,
        local: &MatcherLocal<'_>,
    ) -> Result<(), RebuildError> {
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
    pub(super) fn take_arrived(&self, local: &MatcherLocal<'_>) -> Result<(), RebuildError> {
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
                        ..
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

pub(super) struct JobLocal<'p> {
    pub(super) transport: &'p dyn Transport,
    /// Per rank: steps asked for that have not come yet.
    pub(super) requested: RefCell<Vec<u32>>,
    /// Per rank: the process that owns it.
    pub(super) owners: Vec<usize>,
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
                    shifts: Vec::new(),
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
