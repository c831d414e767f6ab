//! The pass of an MPI job split over its processes with no central matcher (the matching side is
//! [`crate::hb::partition`], the messages [`crate::job::split`]). Every process steps and writes
//! its own ranks, as the workers of one process do, and matches them against one proxy lane per
//! rank of the others. The steps that write a rank also pick its proxies (only what crosses
//! between processes: messages between their ranks, collectives on communicators they share),
//! which stream to the other processes while the pass runs ([`super::proxy_stream`]).

use std::cell::RefCell;

use format::ChunkEncoder;

use super::proxy_stream::{Inbox, ProxyPump, StreamedProxy};
use super::{Inputs, MatcherLocal, PassConfig, PassResult, QueueSource, threads};
use crate::hb;
use crate::job::Transport;
use crate::mapping::LaneMarks;
use crate::options::RebuildError;
use trace::Trace;

/// Who owns what, by rank index (`owners`) and by world rank.
pub(crate) struct Owners<'o> {
    pub by_rank_idx: &'o [usize],
    pub me: usize,
    pub processes: usize,
}

impl Owners<'_> {
    /// Per process, by world rank: whether that process owns the rank.
    fn local_masks(&self, metas: &[trace::definitions::RankMeta], world: u32) -> Vec<Vec<bool>> {
        let mut masks = vec![vec![false; world as usize]; self.processes];
        for (i, m) in metas.iter().enumerate() {
            if let Some(slot) = masks[self.by_rank_idx[i]].get_mut(m.rank as usize) {
                *slot = true;
            }
        }
        masks
    }
}

/// This process's part of the split pass: its ranks stepped (and written, with `cfg.output`) on
/// `cfg.threads` threads and matched against the proxies of every other rank as they arrive over
/// `job`. The marks are those of its own lanes; the others' stay empty.
pub(crate) fn run_split(
    trace: &Trace,
    cfg: PassConfig<'_>,
    owners: &Owners<'_>,
    job: &dyn Transport,
    progress: &mut dyn FnMut(u64),
) -> Result<PassResult, RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let repair = cfg.repair;
    let inputs = match Inputs::open(trace, metas, threads) {
        Ok(inputs) => inputs,
        Err(e) => {
            take_part_failed(job, super::remote::error_text(&e));
            return Err(e);
        }
    };
    let ids = inputs.ids.clone();
    let remote: Vec<bool> = owners.by_rank_idx.iter().map(|&o| o != owners.me).collect();
    let local = owners.local_masks(metas, trace.world_size.max(1));
    let mut shared = inputs.shared(metas, cfg, remote.clone(), threads);
    shared.stream_proxies(&local, owners.me);
    let zstd_level = shared.output.as_ref().map_or(1, |o| o.zstd_level);
    let matcher = MatcherLocal {
        encoder: RefCell::new(ChunkEncoder::new(zstd_level)),
        progress: RefCell::new(progress),
        job: None,
    };
    let lane_is_own: Vec<bool> = ids
        .iter()
        .map(|id| !remote[super::rank_slot(metas, id.rank)])
        .collect();
    let (own_lanes, proxy_lanes): (Vec<usize>, Vec<usize>) =
        (0..ids.len()).partition(|&lane| lane_is_own[lane]);
    let inbox = RefCell::new(Inbox::new(ids.len()));
    let lane_of: Vec<usize> = own_lanes.iter().chain(&proxy_lanes).copied().collect();
    let mut pump = ProxyPump::new(Some(&shared), job, &inbox, lane_of, threads > 1);
    let (report, estimates) = std::thread::scope(|scope| {
        let workers: Vec<_> = (1..threads)
            .map(|_| scope.spawn(|| shared.worker(zstd_level)))
            .collect();
        let lanes = own_lanes
            .iter()
            .map(|&lane| (ids[lane], QueueSource::new(&shared, &matcher, lane)))
            .collect();
        let proxies = proxy_lanes
            .iter()
            .map(|&lane| (ids[lane], StreamedProxy::new(&inbox, lane)))
            .collect();
        let result = hb::run_streamed(
            shared.ctx,
            lanes,
            proxies,
            repair,
            |_, _| {},
            |_| {},
            Some(&mut pump),
        );
        shared.stop_workers(workers);
        result
    });
    let finished = pump.finish();
    let st = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
    finished.map_err(RebuildError::Job)?;
    let mut marks = vec![LaneMarks::default(); ids.len()];
    for w in shared.work {
        for lane in w.into_inner().unwrap_or_else(|p| p.into_inner()).lanes {
            if lane_is_own[lane.global] {
                marks[lane.global] = lane.mapper.marks;
            }
        }
    }
    Ok(PassResult {
        report,
        estimates,
        marks,
    })
}

/// A process that cannot run its part still takes part in the exchange, as failed, so that no
/// other process waits for it.
pub(crate) fn take_part_failed(job: &dyn Transport, reason: String) {
    let inbox = RefCell::new(Inbox::new(0));
    let mut pump = ProxyPump::new(None, job, &inbox, Vec::new(), false);
    pump.fail(reason);
    // The reason is already the pass's.
    pump.finish().ok();
}
