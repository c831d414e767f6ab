//! What a trace says about memory (FORMAT.md `Memory`, `Threshold`, `Compressed`, `MemoryLow`),
//! per rank and for the job: computed here once, shown by `info`, `report` and `timeline`.
//!
//! Users of memory tools expect the current, lowest and highest figure per process and where the
//! time went (the DMATP-MPI seed): here the peak resident set, the recorder's part of it, the least
//! memory the node or cgroup had left, and how much the node swapped out while the job ran.

use format::{Event, Marker, MemorySample, UNKNOWN_BYTES};
use serde::Serialize;

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

/// One rank's memory over the run.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RankMemory {
    pub samples: u64,
    pub peak_rss_bytes: Option<u64>,
    pub peak_recorder_bytes: u64,
    /// The recorder's bytes over the resident set, in the sample where the resident set peaked.
    pub recorder_share_at_peak: Option<f64>,
    /// The least memory the node or the cgroup had left (only ranks that read node figures).
    pub min_available_bytes: Option<u64>,
    /// Pages the node swapped out between this rank's first and last sample that read them.
    pub swap_out_pages: Option<u64>,
    pub thresholds: Vec<ThresholdInfo>,
    pub in_memory_compressions: u64,
    pub compressed_raw_bytes: u64,
    pub compressed_stored_bytes: u64,
    pub memory_low: bool,
    /// Every sample, in order (for the timeline; not in JSON output).
    #[serde(skip)]
    pub series: Vec<MemorySample>,
    #[serde(skip)]
    first_swap: Option<u64>,
    #[serde(skip)]
    last_swap: Option<u64>,
}

impl RankMemory {
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
                self.compressed_raw_bytes += raw_bytes;
                self.compressed_stored_bytes += stored_bytes;
            }
            Event::Marker(Marker::MemoryLow { .. }) => self.memory_low = true,
            _ => {}
        }
    }

    fn sample(&mut self, m: &MemorySample) {
        self.samples += 1;
        if m.rss_bytes != UNKNOWN_BYTES && self.peak_rss_bytes.is_none_or(|p| m.rss_bytes > p) {
            self.peak_rss_bytes = Some(m.rss_bytes);
            self.recorder_share_at_peak =
                (m.rss_bytes > 0).then(|| m.recorder_bytes as f64 / m.rss_bytes as f64);
        }
        self.peak_recorder_bytes = self.peak_recorder_bytes.max(m.recorder_bytes);
        if let Some(a) = m.available() {
            self.min_available_bytes = Some(self.min_available_bytes.map_or(a, |v| v.min(a)));
        }
        if m.swap_out_pages != UNKNOWN_BYTES {
            self.first_swap.get_or_insert(m.swap_out_pages);
            self.last_swap = Some(m.swap_out_pages);
            self.swap_out_pages = Some(
                self.last_swap
                    .unwrap_or(0)
                    .saturating_sub(self.first_swap.unwrap_or(0)),
            );
        }
        self.series.push(*m);
    }

    pub fn has_any(&self) -> bool {
        self.samples > 0 || !self.thresholds.is_empty() || self.in_memory_compressions > 0
    }
}

/// The job's memory, over its ranks.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct JobMemory {
    /// The largest peak resident set of any rank, and that rank.
    pub peak_rss_bytes: u64,
    pub peak_rss_rank: u32,
    /// The median over ranks of their peak resident set.
    pub median_peak_rss_bytes: u64,
    pub peak_recorder_bytes: u64,
    pub peak_recorder_rank: u32,
    /// The largest recorder share of a rank's resident set at its peak.
    pub max_recorder_share: f64,
    pub min_available_bytes: Option<u64>,
    /// Pages swapped out during the run, summed over the ranks that read node figures (one per
    /// node).
    pub swap_out_pages: Option<u64>,
    /// Rank 0's S at start-up, and the range S took on any rank.
    pub initial_threshold: Option<ThresholdInfo>,
    pub threshold_min_bytes: Option<u64>,
    pub threshold_max_bytes: Option<u64>,
    pub threshold_changes: u64,
    pub in_memory_compressions: u64,
    pub compressed_raw_bytes: u64,
    pub compressed_stored_bytes: u64,
    pub memory_low_ranks: Vec<u32>,
}

impl JobMemory {
    /// `None` when no rank has memory records (traces older than chunk version 4).
    pub fn of(ranks: &[(u32, &RankMemory)]) -> Option<JobMemory> {
        if !ranks.iter().any(|(_, m)| m.has_any()) {
            return None;
        }
        let mut job = JobMemory::default();
        let mut peaks = Vec::new();
        for &(rank, m) in ranks {
            if let Some(p) = m.peak_rss_bytes {
                peaks.push(p);
                if p > job.peak_rss_bytes {
                    (job.peak_rss_bytes, job.peak_rss_rank) = (p, rank);
                }
            }
            if m.peak_recorder_bytes > job.peak_recorder_bytes {
                (job.peak_recorder_bytes, job.peak_recorder_rank) = (m.peak_recorder_bytes, rank);
            }
            job.max_recorder_share = job
                .max_recorder_share
                .max(m.recorder_share_at_peak.unwrap_or(0.0));
            if let Some(a) = m.min_available_bytes {
                job.min_available_bytes = Some(job.min_available_bytes.map_or(a, |v| v.min(a)));
            }
            if let Some(s) = m.swap_out_pages {
                job.swap_out_pages = Some(job.swap_out_pages.unwrap_or(0) + s);
            }
            if rank == 0 {
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
            job.compressed_raw_bytes += m.compressed_raw_bytes;
            job.compressed_stored_bytes += m.compressed_stored_bytes;
            if m.memory_low {
                job.memory_low_ranks.push(rank);
            }
        }
        peaks.sort_unstable();
        job.median_peak_rss_bytes = peaks.get(peaks.len() / 2).copied().unwrap_or(0);
        Some(job)
    }

    /// A few lines for the text outputs of `info` and `report`.
    pub fn render(&self) -> String {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
        let mut out = format!(
            "memory       peak RSS {} (rank {}), median over ranks {}; recorder peak {} (rank {}), \
             at most {:.0} % of a rank's RSS at its peak\n",
            mib(self.peak_rss_bytes),
            self.peak_rss_rank,
            mib(self.median_peak_rss_bytes),
            mib(self.peak_recorder_bytes),
            self.peak_recorder_rank,
            self.max_recorder_share * 100.0
        );
        out += &format!(
            "             least memory left on a node or cgroup: {}; swapped out during the run: {}\n",
            self.min_available_bytes.map_or("not read".into(), mib),
            self.swap_out_pages.map_or("not read".into(), |p| format!(
                "{p} pages ({})",
                mib(p * 4096)
            ))
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
                "             memory-low warnings on ranks {:?}: the next flush did not fit\n",
                self.memory_low_ranks
            );
        }
        out
    }
}

/// Each rank's memory, by world rank.
pub type RanksMemory = Vec<(u32, RankMemory)>;

/// Every rank's memory, reading only the misc events of the trace (calls and completions are not
/// decoded): what `report` adds to its profile.
pub fn of_trace(
    trace: &crate::trace::Trace,
) -> Result<(RanksMemory, Vec<crate::trace::Skipped>), crate::trace::TraceError> {
    let mut ranks = Vec::with_capacity(trace.ranks.len());
    let mut skipped_all = Vec::new();
    for files in &trace.ranks {
        let mut memory = RankMemory::default();
        let (_, skipped) = crate::trace::for_each_misc_event(files, |_| {}, |_, e| memory.see(e))?;
        // The series is only for pictures; a report keeps the summary.
        memory.series = Vec::new();
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
        assert_eq!(m.peak_recorder_bytes, 200);
        assert_eq!(m.min_available_bytes, Some(500));
        assert_eq!(m.swap_out_pages, Some(7));
        assert_eq!(m.in_memory_compressions, 1);
        let other = RankMemory {
            peak_rss_bytes: Some(900),
            memory_low: true,
            samples: 1,
            ..Default::default()
        };
        let job = JobMemory::of(&[(0, &m), (1, &other)]).unwrap();
        assert_eq!((job.peak_rss_bytes, job.peak_rss_rank), (900, 1));
        assert_eq!(job.memory_low_ranks, vec![1]);
        assert_eq!(job.initial_threshold.unwrap().basis, "node");
        assert!(JobMemory::of(&[(0, &RankMemory::default())]).is_none());
    }
}
