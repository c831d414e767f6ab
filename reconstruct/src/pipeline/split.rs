//! The pass of an MPI job split over its processes with no central matcher (the matching side is
//! [`crate::hb::partition`], the messages [`crate::job::split`]). Every process steps and writes
//! its own ranks, as the workers of one process do, and matches them against one proxy lane per
//! rank of the others. The steps that write a rank also pick its proxies (only what crosses
//! between processes: messages between their ranks, collectives on communicators they share),
//! which stream to the other processes while the pass runs ([`super::proxy_stream`]).

use std::cell::RefCell;

use format::{ChunkEncoder, Event};

use super::proxy_stream::{Inbox, ProxyPump, ReplayedProxies, StreamedProxy};
use super::{
    EncodeQueue, EngineWriter, Inputs, MatcherLocal, PassConfig, PassResult, QueueSource, threads,
};
use crate::hb::{self, ProxyFilter};
use crate::job::Mailbox;
use crate::mapping::{LaneMarks, SpanSeen};
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

/// This process's part of the split pass: its ranks stepped on `cfg.threads` threads and
/// matched against the proxies of every other rank as they arrive over `job`, and written (with
/// `cfg.output`): by the steps, or with the replay (`cfg.repair`) by this thread as the engine
/// hands the events out, moved. The marks are those of its own lanes; the others' stay empty.
pub(crate) fn run_split(
    trace: &Trace,
    mut cfg: PassConfig<'_>,
    owners: &Owners<'_>,
    mail: &Mailbox<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<PassResult, RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let repair = cfg.repair;
    let mut inputs = match Inputs::open(trace, metas, threads) {
        Ok(inputs) => inputs,
        Err(e) => {
            take_part_failed(mail, super::remote::error_text(&e));
            return Err(e);
        }
    };
    inputs.ctx.set_estimates(cfg.estimates.cloned());
    let ids = inputs.ids.clone();
    let remote: Vec<bool> = owners.by_rank_idx.iter().map(|&o| o != owners.me).collect();
    let local = owners.local_masks(metas, trace.world_size.max(1));
    // With the repair on, the output times come out of the engine, so this thread writes them.
    let matcher_output = if repair.enabled {
        cfg.output.take()
    } else {
        None
    };
    // The engine's chunks, encoded on the workers and by the engine while it waits for another
    // process (declared first: the workers' state refers to it).
    let queue = matcher_output.map(|output| EncodeQueue::new(output, threads));
    let cfg = PassConfig {
        encode: queue.as_ref(),
        ..cfg
    };
    let mut shared = inputs.shared(metas, cfg, remote.clone(), threads);
    if !repair.enabled {
        shared.stream_proxies(&local, owners.me);
    }
    let zstd_level = shared
        .output
        .as_ref()
        .or(matcher_output.as_ref())
        .map_or(1, |o| o.zstd_level);
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
    let mut pump = ProxyPump::new(
        Some(&shared),
        mail,
        &inbox,
        lane_of,
        threads > 1,
        zstd_level,
    );
    if repair.enabled {
        let filters = own_lanes
            .iter()
            .map(|&lane| {
                let rank_idx = super::rank_slot(metas, ids[lane].rank);
                let per_process = (0..owners.processes)
                    .filter(|&q| q != owners.me)
                    .map(|q| (q, ProxyFilter::new(shared.ctx, rank_idx, &local[q])))
                    .collect();
                (lane, per_process)
            })
            .collect();
        pump = pump.with_replayed(ReplayedProxies::new(filters, owners.processes));
    }
    let own_ids: Vec<_> = own_lanes.iter().map(|&lane| ids[lane]).collect();
    let mut writer = queue.as_ref().map(|queue| ReplayWriter {
        out: EngineWriter::new(queue, metas, &own_ids),
        seen: vec![SpanSeen::default(); own_lanes.len()],
    });
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
            |k, e| {
                if let Some(w) = writer.as_mut() {
                    w.take(k, e);
                }
            },
            |_| {},
            Some(&mut pump),
        );
        shared.stop_workers(workers);
        result
    });
    let mut seen = Vec::new();
    if let Some(mut w) = writer {
        let written = w.out.finish();
        if let Err(e) = written {
            // Every other process must hear of it before it is returned.
            pump.fail(super::remote::error_text(&e));
        }
        seen = w.seen;
    }
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
    // The replay moves a lane either way: its marks move with it.
    for (k, seen) in seen.iter().enumerate() {
        seen.shift(&mut marks[own_lanes[k]]);
    }
    Ok(PassResult {
        report,
        estimates,
        marks,
        after: None,
        after_by_pass: false,
    })
}

/// A split replay's output: the events the engine hands out for the own lanes (by position),
/// cut into chunks as one process cuts them, and the times of each lane's span markers as handed
/// out.
struct ReplayWriter<'q, 'o> {
    out: EngineWriter<'q, 'o>,
    seen: Vec<SpanSeen>,
}

impl ReplayWriter<'_, '_> {
    fn take(&mut self, k: usize, e: &Event) {
        self.seen[k].see(e);
        self.out.take(k, e);
    }
}

/// A process that cannot run its part still takes part in the exchange, as failed, so that no
/// other process waits for it.
pub(crate) fn take_part_failed(mail: &Mailbox<'_>, reason: String) {
    let inbox = RefCell::new(Inbox::new(0));
    let mut pump = ProxyPump::new(None, mail, &inbox, Vec::new(), false, 1);
    pump.fail(reason);
    // The reason is already the pass's.
    pump.finish().ok();
}
