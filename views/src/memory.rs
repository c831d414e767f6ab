//! What a trace says about memory (FORMAT.md `Memory`, `Threshold`, `Compressed`, `MemoryLow`),
//! per rank and for the job: computed here once, shown by `info`, `report` and `timeline`.
//!
//! Users of memory tools expect the current, lowest and highest figure per process and where the
//! time went (the DMATP-MPI seed): here the peak resident set, the recorder's part of it, the least
//! memory the node or cgroup had left, and how much the node swapped out while the job ran.

use std::collections::BTreeMap;

use format::{ClockCalibration, Event, Marker, MemorySample, UNKNOWN_BYTES};
use serde::Serialize;

use trace::open::ticks_to_s;

/// One `Threshold` record.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ThresholdInfo {
    /// Ticks of the rank's clock.
    #[serde(skip)]
    pub time: u64,
    pub bytes: u64,
    /// `fixed`, `cgroup`, `node` or `unknown`.
    pub basis: String,
    pub available_bytes: u64,
    pub ranks_on_node: u32,
}

/// One memory sample on a time axis in seconds (see [`RankMemory::points`]).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct MemoryPoint {
    pub t_s: f64,
    pub rss_bytes: Option<u64>,
    pub recorder_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
}

/// One rank's memory over the run.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RankMemory {
    /// From the rank's `RankInfo` record, to group ranks by node.
    pub host: Option<String>,
    pub samples: u64,
    pub peak_rss_bytes: Option<u64>,
    pub peak_recorder_bytes: u64,
    /// The recorder's bytes over the resident set, in the sample where the resident set peaked.
    pub recorder_share_at_peak: Option<f64>,
    /// The largest recorder share of the resident set in any sample.
    pub max_recorder_share: Option<f64>,
    /// The least memory the node or the cgroup had left (only ranks that read node figures).
    pub min_available_bytes: Option<u64>,
    /// Pages the node swapped out between this rank's first and last sample that read them.
    pub swap_out_pages: Option<u64>,
    pub thresholds: Vec<ThresholdInfo>,
    pub in_memory_compressions: u64,
    pub compressed_raw_bytes: u64,
    pub compressed_stored_bytes: u64,
    pub memory_low: bool,
    /// Every sample, in order, when made by [`RankMemory::with_series`] (not in JSON output).
    #[serde(skip)]
    pub series: Vec<MemorySample>,
    #[serde(skip)]
    keep_series: bool,
    #[serde(skip)]
    first_swap: Option<u64>,
}

fn known(bytes: u64) -> Option<u64> {
    (bytes != UNKNOWN_BYTES).then_some(bytes)
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl RankMemory {
    /// Also keeps every sample: a summary of thousands of ranks must not hold their series.
    pub fn with_series() -> RankMemory {
        RankMemory {
            keep_series: true,
            ..Default::default()
        }
    }

    /// Takes in one event of the rank (every other kind is ignored).
    pub fn see(&mut self, event: &Event) {
        match event {
            Event::Memory(m) => self.sample(m),
            Event::Threshold(t) => self.thresholds.push(ThresholdInfo {
                time: t.time,
                bytes: t.bytes,
                basis: t.basis.name().into(),
                available_bytes: t.available,
                ranks_on_node: t.ranks_on_node,
            }),
            Event::Marker(Marker::Compressed {
                raw_bytes,
                stored_bytes,
                ..
            }) => {
                self.in_memory_compressions += 1;
                self.compressed_raw_bytes = self.compressed_raw_bytes.saturating_add(*raw_bytes);
                self.compressed_stored_bytes =
                    self.compressed_stored_bytes.saturating_add(*stored_bytes);
            }
            Event::Marker(Marker::MemoryLow { .. }) => self.memory_low = true,
            Event::RankInfo(r) => self.host = Some(r.host.clone()),
            _ => {}
        }
    }

    fn sample(&mut self, m: &MemorySample) {
        self.samples += 1;
        let rss = known(m.rss_bytes);
        let recorder = known(m.recorder_bytes);
        let share = match (rss, recorder) {
            (Some(rss), Some(recorder)) if rss > 0 => Some(recorder as f64 / rss as f64),
            _ => None,
        };
        if let Some(rss) = rss
            && self.peak_rss_bytes.is_none_or(|p| rss > p)
        {
            self.peak_rss_bytes = Some(rss);
            self.recorder_share_at_peak = share;
        }
        if let Some(s) = share {
            self.max_recorder_share = Some(self.max_recorder_share.map_or(s, |m| m.max(s)));
        }
        self.peak_recorder_bytes = self.peak_recorder_bytes.max(recorder.unwrap_or(0));
        self.min_available_bytes = min_some(self.min_available_bytes, m.available());
        if let Some(pages) = known(m.swap_out_pages) {
            let first = *self.first_swap.get_or_insert(pages);
            self.swap_out_pages = Some(pages.saturating_sub(first));
        }
        if self.keep_series {
            self.series.push(*m);
        }
    }

    pub fn has_any(&self) -> bool {
        self.samples > 0
            || !self.thresholds.is_empty()
            || self.in_memory_compressions > 0
            || self.memory_low
    }

    /// The S the rank ended with (its last `Threshold` record).
    pub fn threshold_in_use(&self) -> Option<&ThresholdInfo> {
        self.thresholds.last()
    }

    /// The kept series with times in seconds since `origin_ticks` of the rank's clock.
    pub fn points(&self, clock: &ClockCalibration, origin_ticks: u64) -> Vec<MemoryPoint> {
        let origin_s = ticks_to_s(clock, origin_ticks);
        self.series
            .iter()
            .map(|m| MemoryPoint {
                t_s: ticks_to_s(clock, m.time) - origin_s,
                rss_bytes: known(m.rss_bytes),
                recorder_bytes: known(m.recorder_bytes),
                available_bytes: m.available(),
            })
            .collect()
    }
}

/// One rank as the text outputs show it (the worst ranks of a large job).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RankMemoryLine {
    pub rank: u32,
    pub host: Option<String>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_recorder_bytes: u64,
    pub recorder_share_at_peak: Option<f64>,
    pub max_recorder_share: Option<f64>,
    pub min_available_bytes: Option<u64>,
    pub swap_out_pages: Option<u64>,
    /// The S in use at the end, and where it came from.
    pub threshold_bytes: Option<u64>,
    pub threshold_basis: Option<String>,
    pub in_memory_compressions: u64,
    pub memory_low: bool,
}

impl RankMemoryLine {
    fn of(rank: u32, m: &RankMemory) -> RankMemoryLine {
        let threshold = m.threshold_in_use();
        RankMemoryLine {
            rank,
            host: m.host.clone(),
            peak_rss_bytes: m.peak_rss_bytes,
            peak_recorder_bytes: m.peak_recorder_bytes,
            recorder_share_at_peak: m.recorder_share_at_peak,
            max_recorder_share: m.max_recorder_share,
            min_available_bytes: m.min_available_bytes,
            swap_out_pages: m.swap_out_pages,
            threshold_bytes: threshold.map(|t| t.bytes),
            threshold_basis: threshold.map(|t| t.basis.clone()),
            in_memory_compressions: m.in_memory_compressions,
            memory_low: m.memory_low,
        }
    }
}

/// The ranks of one node.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HostMemory {
    pub host: String,
    pub ranks: u32,
    pub peak_rss_bytes: u64,
    /// The sum of its ranks' recorder peaks: an upper bound on what the recorder held on the node
    /// at one time (the ranks peak at about the same time, just before a flush).
    pub recorder_peak_sum_bytes: u64,
    pub min_available_bytes: Option<u64>,
    /// Swap-outs are node-wide: the most any of its ranks saw, not their sum.
    pub swap_out_pages: Option<u64>,
}

/// Ranks listed one by one in the text outputs; larger jobs get the worst [`WORST_RANKS`].
const ALL_RANKS_UP_TO: usize = 8;
const WORST_RANKS: usize = 4;

/// The job's memory, over its ranks.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct JobMemory {
    /// Ranks with at least one memory sample.
    pub ranks_sampled: u32,
    /// The largest peak resident set of any rank, and that rank.
    pub peak_rss_bytes: u64,
    pub peak_rss_rank: u32,
    /// The median over ranks of their peak resident set.
    pub median_peak_rss_bytes: u64,
    pub peak_recorder_bytes: u64,
    pub peak_recorder_rank: u32,
    /// The largest recorder share of a rank's resident set at that rank's peak.
    pub max_recorder_share_at_peak: f64,
    /// The largest recorder share of a rank's resident set in any sample.
    pub max_recorder_share: f64,
    pub max_recorder_share_rank: u32,
    pub min_available_bytes: Option<u64>,
    /// Pages swapped out during the run, summed over nodes (ranks without a host count as nodes).
    pub swap_out_pages: Option<u64>,
    /// The lowest rank's S at start-up, and the range S took on any rank.
    pub initial_threshold: Option<ThresholdInfo>,
    pub threshold_min_bytes: Option<u64>,
    pub threshold_max_bytes: Option<u64>,
    pub threshold_changes: u64,
    pub in_memory_compressions: u64,
    pub compressed_raw_bytes: u64,
    pub compressed_stored_bytes: u64,
    pub memory_low_ranks: Vec<u32>,
    /// Per node, when the ranks name their hosts.
    pub hosts: Vec<HostMemory>,
    /// Every rank for a small job; for a large one the highest peaks and the largest share.
    pub worst_ranks: Vec<RankMemoryLine>,
}

impl JobMemory {
    /// `None` when no rank has memory records (traces older than chunk version 4).
    pub fn of(ranks: &[(u32, &RankMemory)]) -> Option<JobMemory> {
        if !ranks.iter().any(|(_, m)| m.has_any()) {
            return None;
        }
        let mut ranks: Vec<(u32, &RankMemory)> = ranks.to_vec();
        ranks.sort_by_key(|(rank, _)| *rank);
        let mut job = JobMemory::default();
        let mut peaks = Vec::new();
        let mut hosts: BTreeMap<&str, HostMemory> = BTreeMap::new();
        let mut swap_without_host: Option<u64> = None;
        for &(rank, m) in &ranks {
            if m.samples > 0 {
                job.ranks_sampled += 1;
            }
            if let Some(p) = m.peak_rss_bytes {
                peaks.push(p);
                if p > job.peak_rss_bytes {
                    (job.peak_rss_bytes, job.peak_rss_rank) = (p, rank);
                }
            }
            if m.peak_recorder_bytes > job.peak_recorder_bytes {
                (job.peak_recorder_bytes, job.peak_recorder_rank) = (m.peak_recorder_bytes, rank);
            }
            job.max_recorder_share_at_peak = job
                .max_recorder_share_at_peak
                .max(m.recorder_share_at_peak.unwrap_or(0.0));
            if let Some(s) = m.max_recorder_share
                && s > job.max_recorder_share
            {
                (job.max_recorder_share, job.max_recorder_share_rank) = (s, rank);
            }
            job.min_available_bytes = min_some(job.min_available_bytes, m.min_available_bytes);
            match &m.host {
                Some(host) => {
                    let h = hosts.entry(host).or_insert_with(|| HostMemory {
                        host: host.clone(),
                        ..Default::default()
                    });
                    h.ranks += 1;
                    h.peak_rss_bytes = h.peak_rss_bytes.max(m.peak_rss_bytes.unwrap_or(0));
                    h.recorder_peak_sum_bytes = h
                        .recorder_peak_sum_bytes
                        .saturating_add(m.peak_recorder_bytes);
                    h.min_available_bytes = min_some(h.min_available_bytes, m.min_available_bytes);
                    if let Some(s) = m.swap_out_pages {
                        h.swap_out_pages = Some(h.swap_out_pages.map_or(s, |v| v.max(s)));
                    }
                }
                None => {
                    if let Some(s) = m.swap_out_pages {
                        swap_without_host = Some(swap_without_host.unwrap_or(0).saturating_add(s));
                    }
                }
            }
            if job.initial_threshold.is_none() {
                job.initial_threshold = m.thresholds.first().cloned();
            }
            for t in &m.thresholds {
                job.threshold_min_bytes =
                    Some(job.threshold_min_bytes.map_or(t.bytes, |v| v.min(t.bytes)));
                job.threshold_max_bytes =
                    Some(job.threshold_max_bytes.map_or(t.bytes, |v| v.max(t.bytes)));
            }
            job.threshold_changes += m.thresholds.len().saturating_sub(1) as u64;
            job.in_memory_compressions += m.in_memory_compressions;
            job.compressed_raw_bytes = job
                .compressed_raw_bytes
                .saturating_add(m.compressed_raw_bytes);
            job.compressed_stored_bytes = job
                .compressed_stored_bytes
                .saturating_add(m.compressed_stored_bytes);
            if m.memory_low {
                job.memory_low_ranks.push(rank);
            }
        }
        job.swap_out_pages = hosts
            .values()
            .filter_map(|h| h.swap_out_pages)
            .chain(swap_without_host)
            .reduce(u64::saturating_add);
        job.hosts = hosts.into_values().collect();
        peaks.sort_unstable();
        // Nearest rank, as `info`'s other quantiles.
        job.median_peak_rss_bytes = peaks
            .get(peaks.len().div_ceil(2).saturating_sub(1))
            .copied()
            .unwrap_or(0);
        job.worst_ranks = worst_ranks(&ranks, job.max_recorder_share_rank);
        Some(job)
    }

    /// A few lines for the text outputs of `info` and `report`.
    pub fn render(&self) -> String {
        let mut out = format!(
            "memory       peak RSS {} (rank {}), median over {} sampled ranks {}; recorder peak {} \
             (rank {}), up to {:.0} % of a rank's RSS at its peak, {:.0} % at most (rank {})\n",
            mib(self.peak_rss_bytes),
            self.peak_rss_rank,
            self.ranks_sampled,
            mib(self.median_peak_rss_bytes),
            mib(self.peak_recorder_bytes),
            self.peak_recorder_rank,
            self.max_recorder_share_at_peak * 100.0,
            self.max_recorder_share * 100.0,
            self.max_recorder_share_rank
        );
        out += &format!(
            "             least memory left on a node or cgroup: {}; swapped out during the run: {}\n",
            self.min_available_bytes.map_or("not read".into(), mib),
            swap_text(self.swap_out_pages)
        );
        if let Some(t) = &self.initial_threshold {
            let why = match t.basis.as_str() {
                "fixed" => "given".to_string(),
                "unknown" => "auto, no memory figure readable: the fallback".to_string(),
                basis => format!(
                    "auto, from {} free in the {basis} for {} rank(s)",
                    mib(t.available_bytes),
                    t.ranks_on_node
                ),
            };
            out += &format!("             S at start-up {} ({why})", mib(t.bytes));
            if self.threshold_changes > 0 {
                out += &format!(
                    "; re-evaluated {} times, {} to {}",
                    self.threshold_changes,
                    mib(self.threshold_min_bytes.unwrap_or(0)),
                    mib(self.threshold_max_bytes.unwrap_or(0))
                );
            }
            out += "\n";
        }
        if self.in_memory_compressions > 0 {
            out += &format!(
                "             compressed in memory between collectives: {} times, {} -> {}\n",
                self.in_memory_compressions,
                mib(self.compressed_raw_bytes),
                mib(self.compressed_stored_bytes)
            );
        }
        if !self.memory_low_ranks.is_empty() {
            out += &format!(
                "             memory-low warnings on ranks {}: the next flush did not fit\n",
                trace::collect::rank_list(&self.memory_low_ranks)
            );
        }
        if self.hosts.len() > 1 {
            // The node closest to swapping says more than a line per node.
            if let Some(h) = self
                .hosts
                .iter()
                .min_by_key(|h| h.min_available_bytes.unwrap_or(u64::MAX))
            {
                out += &format!(
                    "             {} nodes; tightest {} ({} ranks): least left {}, recorder peaks sum {}, \
                     swapped out {}\n",
                    self.hosts.len(),
                    h.host,
                    h.ranks,
                    h.min_available_bytes.map_or("not read".into(), mib),
                    mib(h.recorder_peak_sum_bytes),
                    swap_text(h.swap_out_pages)
                );
            }
        }
        if !self.worst_ranks.is_empty() {
            out += &format!(
                "             {:>6} {:>12} {:>12} {:>7} {:>7} {:>12} {:>10} {:>18} {:>6}\n",
                "rank",
                "peak RSS",
                "recorder",
                "at peak",
                "max",
                "least left",
                "swap-outs",
                "S in use",
                "compr"
            );
            for r in &self.worst_ranks {
                let percent =
                    |s: Option<f64>| s.map_or("-".into(), |s| format!("{:.1}%", s * 100.0));
                let threshold = match (r.threshold_bytes, &r.threshold_basis) {
                    (Some(b), Some(basis)) => format!("{} {basis}", mib(b)),
                    _ => "-".into(),
                };
                out += &format!(
                    "             {:>6} {:>12} {:>12} {:>7} {:>7} {:>12} {:>10} {:>18} {:>6}{}\n",
                    r.rank,
                    r.peak_rss_bytes.map_or("-".into(), mib),
                    mib(r.peak_recorder_bytes),
                    percent(r.recorder_share_at_peak),
                    percent(r.max_recorder_share),
                    r.min_available_bytes.map_or("-".into(), mib),
                    r.swap_out_pages.map_or("-".into(), |p| p.to_string()),
                    threshold,
                    r.in_memory_compressions,
                    if r.memory_low { "  memory low" } else { "" }
                );
            }
        }
        out
    }
}

/// Every rank of a small job; else the highest peaks and the rank with the largest share.
fn worst_ranks(ranks: &[(u32, &RankMemory)], max_share_rank: u32) -> Vec<RankMemoryLine> {
    let with_memory: Vec<&(u32, &RankMemory)> = ranks.iter().filter(|(_, m)| m.has_any()).collect();
    if with_memory.len() <= ALL_RANKS_UP_TO {
        return with_memory
            .iter()
            .map(|(rank, m)| RankMemoryLine::of(*rank, m))
            .collect();
    }
    let mut by_peak = with_memory.clone();
    by_peak.sort_by_key(|(rank, m)| (std::cmp::Reverse(m.peak_rss_bytes), *rank));
    let mut shown: Vec<&(u32, &RankMemory)> = by_peak.into_iter().take(WORST_RANKS).collect();
    if !shown.iter().any(|(rank, _)| *rank == max_share_rank)
        && let Some(r) = with_memory.iter().find(|(rank, _)| *rank == max_share_rank)
    {
        shown.push(r);
    }
    shown
        .iter()
        .map(|(rank, m)| RankMemoryLine::of(*rank, m))
        .collect()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn swap_text(pages: Option<u64>) -> String {
    // The kernel counts swap-outs in pages of 4 KiB on the machines evenflush targets.
    pages.map_or("not read".into(), |p| {
        format!("{p} pages ({})", mib(p.saturating_mul(4096)))
    })
}

/// Each rank's memory, by world rank.
pub type RanksMemory = Vec<(u32, RankMemory)>;

/// Every rank's memory, reading only the misc events of the trace (calls and completions are not
/// decoded).
pub fn of_trace(
    trace: &trace::Trace,
) -> Result<(RanksMemory, Vec<trace::Skipped>), trace::TraceError> {
    let mut ranks = Vec::with_capacity(trace.ranks.len());
    let mut skipped_all = Vec::new();
    for files in &trace.ranks {
        let mut memory = RankMemory::default();
        let (_, skipped) = trace::open::for_each_misc_event(files, |_| {}, |_, e| memory.see(e))?;
        skipped_all.extend(skipped);
        ranks.push((files.rank, memory));
    }
    Ok((ranks, skipped_all))
}

/// The job's memory from [`of_trace`]'s ranks.
pub fn job_of(ranks: &[(u32, RankMemory)]) -> Option<JobMemory> {
    let refs: Vec<(u32, &RankMemory)> = ranks.iter().map(|(r, m)| (*r, m)).collect();
    JobMemory::of(&refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::{MemoryWhen, ThresholdBasis, ThresholdChoice};

    fn sample(rss: u64, recorder: u64, available: u64, swap: u64) -> Event {
        Event::Memory(MemorySample {
            time: 1,
            rss_bytes: rss,
            recorder_bytes: recorder,
            compressed_bytes: 0,
            node_available: available,
            cgroup_limit: UNKNOWN_BYTES,
            cgroup_usage: UNKNOWN_BYTES,
            swap_out_pages: swap,
            when: MemoryWhen::Periodic,
        })
    }

    #[test]
    fn peaks_shares_minimum_and_swap_delta() {
        let mut m = RankMemory::default();
        m.see(&Event::Threshold(ThresholdChoice {
            time: 0,
            bytes: 64,
            basis: ThresholdBasis::Node,
            available: 1000,
            ranks_on_node: 2,
        }));
        m.see(&sample(100, 10, 900, 5));
        m.see(&sample(400, 100, 500, 7));
        m.see(&sample(300, 200, 700, 12));
        m.see(&Event::Marker(Marker::Compressed {
            time: 2,
            raw_bytes: 80,
            stored_bytes: 4,
        }));
        assert_eq!(m.peak_rss_bytes, Some(400));
        assert_eq!(m.recorder_share_at_peak, Some(0.25));
        assert_eq!(m.max_recorder_share, Some(200.0 / 300.0));
        assert_eq!(m.peak_recorder_bytes, 200);
        assert_eq!(m.min_available_bytes, Some(500));
        assert_eq!(m.swap_out_pages, Some(7));
        assert_eq!(m.in_memory_compressions, 1);
        assert!(m.series.is_empty(), "series only on request");
        let other = RankMemory {
            peak_rss_bytes: Some(900),
            memory_low: true,
            samples: 1,
            ..Default::default()
        };
        let job = JobMemory::of(&[(1, &other), (0, &m)]).unwrap();
        assert_eq!((job.peak_rss_bytes, job.peak_rss_rank), (900, 1));
        assert_eq!(job.median_peak_rss_bytes, 400);
        assert_eq!(job.memory_low_ranks, vec![1]);
        assert_eq!(job.initial_threshold.unwrap().basis, "node");
        assert_eq!(job.worst_ranks.len(), 2);
        assert!(JobMemory::of(&[(0, &RankMemory::default())]).is_none());
    }

    #[test]
    fn unknown_fields_are_left_out_not_taken_as_huge() {
        let mut m = RankMemory::with_series();
        m.see(&sample(
            UNKNOWN_BYTES,
            UNKNOWN_BYTES,
            UNKNOWN_BYTES,
            UNKNOWN_BYTES,
        ));
        m.see(&sample(100, 50, UNKNOWN_BYTES, UNKNOWN_BYTES));
        assert_eq!(m.peak_rss_bytes, Some(100));
        assert_eq!(m.peak_recorder_bytes, 50);
        assert_eq!(m.min_available_bytes, None);
        assert_eq!(m.swap_out_pages, None);
        assert_eq!(m.series.len(), 2);
        let job = JobMemory::of(&[(0, &m)]).unwrap();
        assert!(job.render().contains("not read"), "{}", job.render());
    }

    #[test]
    fn swap_outs_count_once_per_node_and_large_jobs_list_the_worst_ranks() {
        let ranks: Vec<RankMemory> = (0..20u64)
            .map(|i| {
                let mut m = RankMemory::default();
                m.see(&Event::RankInfo(Box::new(format::RankInfo {
                    host: format!("node{}", i / 10),
                    ..Default::default()
                })));
                // Both ranks 0 and 1 of a node read the node's counter: 10 pages each.
                let swap = if i % 10 < 2 { 1000 } else { UNKNOWN_BYTES };
                m.see(&sample(100 + i, 10, 5000 - i, swap));
                m.see(&sample(100 + i, 10, 5000, swap.saturating_add(10)));
                m
            })
            .collect();
        let refs: Vec<(u32, &RankMemory)> = ranks
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u32, m))
            .collect();
        let job = JobMemory::of(&refs).unwrap();
        assert_eq!(job.swap_out_pages, Some(20), "two nodes, 10 pages each");
        assert_eq!(job.hosts.len(), 2);
        assert_eq!(job.hosts[1].recorder_peak_sum_bytes, 100);
        assert_eq!(job.hosts[1].min_available_bytes, Some(4981));
        let shown: Vec<u32> = job.worst_ranks.iter().map(|r| r.rank).collect();
        assert_eq!(
            shown,
            vec![19, 18, 17, 16, 0],
            "highest peaks, then the largest share"
        );
    }
}
