//! The pass of an MPI job split over its processes with no central matcher (the matching side is
//! [`crate::hb::partition`], the messages [`crate::job::split`]). Every process steps and writes
//! its own ranks, as the workers of one process do, and matches them against one proxy lane per
//! rank of the others. The proxies are made first, by a pass over the own ranks that decodes and
//! maps them without writing, and exchanged whole: they hold only what crosses between processes
//! (messages between their ranks, collectives on communicators they share).

use std::cell::RefCell;

use format::{ChunkEncoder, Event};

use super::{
    Inputs, MatcherLocal, PassConfig, PassResult, QueueSource, lock, map_indexed, threads,
};
use crate::hb::{self, ProxyFilter, ProxyLane};
use crate::mapping::LaneMarks;
use crate::options::RebuildError;
use trace::Trace;

/// A proxy lane's events: (index in the whole lane, time the mapping removed, event).
pub(crate) type ProxyEvents = Vec<(u64, u64, Event)>;

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

/// What this process's ranks show each other process: per process (empty for this one), a
/// proxy lane for every lane of this process's ranks, by lane number (`lane_ids` order).
pub(crate) fn make_proxies(
    trace: &Trace,
    cfg: PassConfig<'_>,
    owners: &Owners<'_>,
) -> Result<Vec<Vec<(usize, ProxyEvents)>>, RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let inputs = Inputs::open(trace, metas, threads)?;
    let remote: Vec<bool> = owners.by_rank_idx.iter().map(|&o| o != owners.me).collect();
    let own: Vec<usize> = (0..metas.len()).filter(|&r| !remote[r]).collect();
    let masks = owners.local_masks(metas, trace.world_size.max(1));
    let shared = inputs.shared(metas, cfg, remote, threads);
    let per_rank = map_indexed(own.len(), threads, |k| {
        let r = own[k];
        let mut encoder = ChunkEncoder::new(1);
        // Per lane of the rank, per other process: its filter and what it took.
        let lanes: Vec<usize> = lock(&shared.work[r])
            .lanes
            .iter()
            .map(|l| l.global)
            .collect();
        let mut filters: Vec<Vec<Option<(ProxyFilter<'_>, ProxyEvents)>>> = lanes
            .iter()
            .map(|_| {
                (0..owners.processes)
                    .map(|q| {
                        (q != owners.me)
                            .then(|| (ProxyFilter::new(shared.ctx, r, &masks[q]), Vec::new()))
                    })
                    .collect()
            })
            .collect();
        loop {
            let produced = shared.step(r, &mut encoder)?;
            if produced.is_empty() {
                break;
            }
            for (lane, items, _) in produced {
                let Some(k) = lanes.iter().position(|&g| g == lane) else {
                    continue;
                };
                for item in items {
                    for (filter, taken) in filters[k].iter_mut().flatten() {
                        if filter.wants(&item.event) {
                            taken.push((item.index, item.removed, item.event.clone()));
                        }
                    }
                }
            }
        }
        Ok::<_, RebuildError>(
            lanes
                .into_iter()
                .zip(filters)
                .map(|(lane, per_process)| {
                    let taken: Vec<Option<ProxyEvents>> = per_process
                        .into_iter()
                        .map(|f| f.map(|(_, taken)| taken))
                        .collect();
                    (lane, taken)
                })
                .collect::<Vec<_>>(),
        )
    });
    let mut out: Vec<Vec<(usize, ProxyEvents)>> = vec![Vec::new(); owners.processes];
    for rank in per_rank {
        for (lane, per_process) in rank? {
            for (q, taken) in per_process.into_iter().enumerate() {
                if let Some(events) = taken {
                    out[q].push((lane, events));
                }
            }
        }
    }
    Ok(out)
}

/// This process's part of the split pass: its ranks stepped (and written, with `cfg.output`) on
/// `cfg.threads` threads and matched against `proxies` (lane number, events) of every other
/// rank. The marks are those of its own lanes; the others' stay empty.
pub(crate) fn run_split(
    trace: &Trace,
    cfg: PassConfig<'_>,
    owners: &Owners<'_>,
    proxies: Vec<(usize, ProxyEvents)>,
    progress: &mut dyn FnMut(u64),
) -> Result<PassResult, RebuildError> {
    let metas = cfg.metas;
    let threads = threads(cfg.threads);
    let repair = cfg.repair;
    let inputs = Inputs::open(trace, metas, threads)?;
    let ids = inputs.ids.clone();
    let remote: Vec<bool> = owners.by_rank_idx.iter().map(|&o| o != owners.me).collect();
    let shared = inputs.shared(metas, cfg, remote.clone(), threads);
    let zstd_level = shared.output.as_ref().map_or(1, |o| o.zstd_level);
    let local = MatcherLocal {
        encoder: RefCell::new(ChunkEncoder::new(zstd_level)),
        progress: RefCell::new(progress),
        job: None,
    };
    let lane_is_own: Vec<bool> = ids
        .iter()
        .map(|id| !remote[super::rank_slot(metas, id.rank)])
        .collect();
    let own_lanes: Vec<usize> = (0..ids.len()).filter(|&lane| lane_is_own[lane]).collect();
    let (report, estimates) = std::thread::scope(|scope| {
        let workers: Vec<_> = (1..threads)
            .map(|_| scope.spawn(|| shared.worker(zstd_level)))
            .collect();
        let lanes = own_lanes
            .iter()
            .map(|&lane| (ids[lane], QueueSource::new(&shared, &local, lane)))
            .collect();
        let proxies = proxies
            .into_iter()
            .filter_map(|(lane, events)| {
                Some((*ids.get(lane)?, ProxyLane::new(events.into_iter())))
            })
            .collect();
        let result = hb::run_with_proxies(shared.ctx, lanes, proxies, repair, |_, _| {}, |_| {});
        shared.stop_workers(workers);
        result
    });
    let st = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = st.error {
        return Err(e);
    }
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
