//! `evenflush report`: an MPIPROF-style profile of a run, from a trace or from the profile files of
//! `--mode profile`. The statistics themselves ([`ProfileStats`]) belong to the format crate, so the
//! recorder can keep them in constant memory. Gathering them is [`profiling`]; the report built from
//! them is here; its table, JSON and CSV forms are [`render`].

mod profiling;
mod render;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use format::profile::*;
pub use profiling::{
    WindowCut, is_profile_dir, profile_trace, profile_trace_window, profile_trace_with_memory,
    read_profiles,
};
use serde::Serialize;

use crate::memory::JobMemory;
use trace::TraceError;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{}: {what}", path.display())]
    Profile { path: PathBuf, what: String },
}

const MATRIX_MAX_RANKS: usize = 32;
const TOP_PAIRS: usize = 20;

/// One row of the function table.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionRow {
    pub name: String,
    pub count: u64,
    pub total_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub mean_s: f64,
    pub bytes_total: u64,
    pub bytes_min: u64,
    pub bytes_max: u64,
    pub bytes_mean: f64,
    pub histogram: [u64; SIZE_BINS],
    /// Present when the function received bytes too (see [`FuncStats::recv_histogram`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recv_histogram: Option<[u64; SIZE_BINS]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recv_bytes_total: Option<u64>,
    /// Mean time within 3x the recorder's mean per-call cost: the figure is mostly the recorder.
    pub handle_with_care: bool,
}

/// Point-to-point traffic between two world ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PartnerPair {
    pub source: u32,
    pub dest: u32,
    pub messages: u64,
    pub bytes: u64,
}

/// Who sent point-to-point messages to whom: only the pairs that exchanged any, sorted by source
/// then destination. A dense matrix would be R² cells (10^8 at 10^4 ranks) where an application
/// talks to a few neighbours per rank.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(transparent)]
pub struct Partners {
    pub pairs: Vec<PartnerPair>,
}

impl Partners {
    /// Traffic from `source` to `dest` (zero when they exchanged nothing).
    pub fn get(&self, source: u32, dest: u32) -> PartnerStats {
        self.pairs
            .binary_search_by_key(&(source, dest), |p| (p.source, p.dest))
            .map_or(PartnerStats::default(), |i| PartnerStats {
                messages: self.pairs[i].messages,
                bytes: self.pairs[i].bytes,
            })
    }

    pub fn total_messages(&self) -> u64 {
        self.pairs.iter().map(|p| p.messages).sum()
    }

    /// The `n` pairs that moved the most bytes (then messages), heaviest first.
    pub fn top(&self, n: usize) -> Vec<PartnerPair> {
        let mut by_weight: Vec<PartnerPair> = self.pairs.clone();
        by_weight.sort_by(|a, b| {
            (b.bytes, b.messages)
                .cmp(&(a.bytes, a.messages))
                .then((a.source, a.dest).cmp(&(b.source, b.dest)))
        });
        by_weight.truncate(n);
        by_weight
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RankRow {
    pub rank: u32,
    pub calls: u64,
    pub span_s: Option<f64>,
    pub mpi_s: f64,
    /// Span minus MPI time minus suspensions: the program's own work (plus the recorder's
    /// per-call cost). Suspensions are recorded after the collective they follow has returned, so
    /// they are neither MPI nor the program and are counted apart.
    pub outside_s: Option<f64>,
    pub mpi_fraction: Option<f64>,
    pub suspended_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SuspensionReportRow {
    pub seq: u64,
    pub z_s: f64,
    /// Whether some rank wrote its trace in it.
    pub flushed: bool,
    pub ranks_flushed: u32,
    pub bytes_raw: u64,
    pub bytes_stored: u64,
    pub max_write_s: f64,
    pub max_overshoot_s: f64,
    pub max_length_s: f64,
}

/// The whole profile, as printed.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub source: String,
    pub ranks: u32,
    pub size_bins: Vec<String>,
    pub functions: Vec<FunctionRow>,
    pub partners: Partners,
    pub ranks_table: Vec<RankRow>,
    /// Max over ranks of MPI time divided by its mean: 1 is perfectly balanced.
    pub mpi_imbalance: Option<f64>,
    pub suspensions: Vec<SuspensionReportRow>,
    pub recorder_mean_cost_s: f64,
    /// The median cost per call (what the "handle with care" test uses).
    pub recorder_typical_cost_s: f64,
    pub lost_events: u64,
    pub warnings: Vec<String>,
    /// The job's memory, for a trace directory with memory records (profile directories have
    /// none): filled in by the caller from [`profile_trace_with_memory`], not by [`Report::build`].
    pub memory: Option<JobMemory>,
    /// For a windowed report: what the window was and what it left out of the partners; filled
    /// in by the caller from [`profile_trace_window`].
    pub window: Option<WindowCut>,
}

impl Report {
    pub fn build(source: &str, profiles: &[ProfileStats]) -> Report {
        // Copied only when not finished yet: a copy of every rank's profile doubles the memory
        // of a large run's report.
        let profiles: Vec<std::borrow::Cow<'_, ProfileStats>> = profiles
            .iter()
            .map(|p| {
                if p.is_finished() {
                    std::borrow::Cow::Borrowed(p)
                } else {
                    let mut p = p.clone();
                    p.finish();
                    std::borrow::Cow::Owned(p)
                }
            })
            .collect();
        let profiles: Vec<&ProfileStats> = profiles.iter().map(|p| &**p).collect();
        let profiles = profiles.as_slice();
        let world = profiles
            .iter()
            .map(|p| p.world_size.max(p.rank + 1))
            .max()
            .unwrap_or(0);
        let mut all = ProfileStats::default();
        for p in profiles {
            all.merge(p);
        }
        let mean_cost = all.mean_cost_ns();
        let typical_cost = all.typical_cost_ns();
        let mut warnings = Vec::new();
        let mut functions: Vec<FunctionRow> = all
            .functions
            .iter()
            .map(|(name, f)| {
                let mean = f.mean_ns();
                let care = typical_cost > 0.0 && mean < 3.0 * typical_cost;
                if care {
                    warnings.push(format!(
                        "{name}: mean time {:.3} µs is within 3x the recorder's typical cost per call ({:.3} µs): handle with care",
                        mean / 1e3,
                        typical_cost / 1e3
                    ));
                }
                FunctionRow {
                    name: name.clone(),
                    count: f.count,
                    total_s: f.total_ns / 1e9,
                    min_s: if f.count > 0 { f.min_ns / 1e9 } else { 0.0 },
                    max_s: f.max_ns / 1e9,
                    mean_s: mean / 1e9,
                    bytes_total: f.bytes_total,
                    bytes_min: if f.count > 0 { f.bytes_min } else { 0 },
                    bytes_max: f.bytes_max,
                    bytes_mean: if f.count > 0 {
                        f.bytes_total as f64 / f.count as f64
                    } else {
                        0.0
                    },
                    histogram: f.histogram,
                    recv_histogram: (f.recv_count > 0).then_some(f.recv_histogram),
                    recv_bytes_total: (f.recv_count > 0).then_some(f.recv_bytes_total),
                    handle_with_care: care,
                }
            })
            .collect();
        functions.sort_by(|a, b| b.total_s.total_cmp(&a.total_s).then(a.name.cmp(&b.name)));

        let mut partners = Partners::default();
        for p in profiles {
            for (dest, s) in &p.partners {
                if p.rank < world && *dest < world {
                    partners.pairs.push(PartnerPair {
                        source: p.rank,
                        dest: *dest,
                        messages: s.messages,
                        bytes: s.bytes,
                    });
                }
            }
        }
        // Profiles of one rank may come twice (several profile files): their traffic adds up.
        partners.pairs.sort_by_key(|p| (p.source, p.dest));
        partners.pairs.dedup_by(|later, earlier| {
            let same = (later.source, later.dest) == (earlier.source, earlier.dest);
            if same {
                earlier.messages += later.messages;
                earlier.bytes += later.bytes;
            }
            same
        });

        let ranks_table: Vec<RankRow> = profiles
            .iter()
            .map(|p| {
                let span = p.span_ns.map(|s| s / 1e9);
                let mpi = p.mpi_in_span_ns / 1e9;
                RankRow {
                    rank: p.rank,
                    calls: p.functions.values().map(|f| f.count).sum(),
                    span_s: span,
                    mpi_s: mpi,
                    outside_s: span.map(|s| (s - mpi - p.suspended_ns / 1e9).max(0.0)),
                    mpi_fraction: span.filter(|&s| s > 0.0).map(|s| mpi / s),
                    suspended_s: p.suspended_ns / 1e9,
                }
            })
            .collect();
        let mpi_imbalance = if ranks_table.is_empty() {
            None
        } else {
            let mean = ranks_table.iter().map(|r| r.mpi_s).sum::<f64>() / ranks_table.len() as f64;
            let max = ranks_table.iter().map(|r| r.mpi_s).fold(0.0, f64::max);
            (mean > 0.0).then_some(max / mean)
        };
        for p in profiles {
            if p.span_ns.is_none() {
                warnings.push(format!(
                    "rank {}: no InitDone, or no FinalizeStart or AbnormalEnd after it: its MPI/outside split is unknown",
                    p.rank
                ));
            }
        }

        let mut by_seq: BTreeMap<u64, SuspensionReportRow> = BTreeMap::new();
        for s in &all.suspensions {
            let row = by_seq.entry(s.seq).or_insert(SuspensionReportRow {
                seq: s.seq,
                z_s: 0.0,
                flushed: false,
                ranks_flushed: 0,
                bytes_raw: 0,
                bytes_stored: 0,
                max_write_s: 0.0,
                max_overshoot_s: 0.0,
                max_length_s: 0.0,
            });
            row.z_s = row.z_s.max(s.z_ns as f64 / 1e9);
            row.flushed |= s.flushed;
            row.ranks_flushed += u32::from(s.flushed && s.bytes_raw > 0);
            row.bytes_raw += s.bytes_raw;
            row.bytes_stored += s.bytes_stored;
            row.max_write_s = row.max_write_s.max(s.write_ns as f64 / 1e9);
            row.max_overshoot_s = row.max_overshoot_s.max(s.overshoot_ns as f64 / 1e9);
            row.max_length_s = row.max_length_s.max(s.length_ns / 1e9);
        }
        if all.lost_events > 0 {
            warnings.push(format!(
                "{} events were lost: counts are lower bounds",
                all.lost_events
            ));
        }
        Report {
            source: source.to_string(),
            ranks: world,
            size_bins: (0..SIZE_BINS).map(size_bin_label).collect(),
            functions,
            partners,
            ranks_table,
            mpi_imbalance,
            suspensions: by_seq.into_values().collect(),
            recorder_mean_cost_s: mean_cost / 1e9,
            recorder_typical_cost_s: typical_cost / 1e9,
            lost_events: all.lost_events,
            warnings,
            memory: None,
            window: None,
        }
    }
}

#[cfg(test)]
mod tests;
