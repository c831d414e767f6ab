//! `evenflush report`: an MPIPROF-style profile of a run, from a trace or from the profile files of
//! `--mode profile`. The statistics themselves ([`ProfileStats`]) belong to the format crate, so the
//! recorder can keep them in constant memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use format::profile::*;
use serde::Serialize;

use std::collections::HashMap;

use crate::memory::{JobMemory, RankMemory, RanksMemory};
use trace::Skipped;
use trace::Trace;
use trace::TraceError;
use trace::clock::MapCursor;
use trace::clock::TimeMap;
use trace::definitions::RankMeta;
use trace::open::for_each_event;
use trace::window::Window;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{}: {what}", path.display())]
    Profile { path: PathBuf, what: String },
}

/// Whether `dir` holds profile files and no rank files.
pub fn is_profile_dir(dir: &Path) -> bool {
    let has = |prefix: &str, suffix: &str| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(prefix) && name.ends_with(suffix)
            })
        })
    };
    has("profile-", ".json") && !has("rank-", ".evf")
}

/// Reads every `profile-NNNNN.json` of `dir`, in rank order.
pub fn read_profiles(dir: &Path) -> Result<Vec<ProfileStats>, ReportError> {
    let err = |path: &Path, what: String| ReportError::Profile {
        path: path.to_path_buf(),
        what,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| err(dir, e.to_string()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("profile-") && n.ends_with(".json")
            })
        })
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| err(&path, e.to_string()))?;
        out.push(ProfileStats::from_json(&text).map_err(|e| err(&path, e.to_string()))?);
    }
    if out.is_empty() {
        return Err(err(dir, "no profile-NNNNN.json files".into()));
    }
    out.sort_by_key(|p| p.rank);
    Ok(out)
}

/// Builds every rank's profile by streaming the trace once. `progress(done, total)` in events.
pub fn profile_trace(
    trace: &Trace,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<ProfileStats>, Vec<Skipped>), TraceError> {
    profile_trace_with_memory(trace, progress).map(|(profiles, _, skipped)| (profiles, skipped))
}

/// [`profile_trace`], and every rank's memory from the same pass (for [`Report::memory`]).
pub fn profile_trace_with_memory(
    trace: &Trace,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<ProfileStats>, RanksMemory, Vec<Skipped>), TraceError> {
    profile_inner(trace, None, progress).map(|(p, m, s, _)| (p, m, s))
}

/// What a window left out of a report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WindowCut {
    /// What the window was ([`Window`]'s description).
    pub window: String,
    /// Point-to-point sends in the window from a kept rank to a rank outside `--ranks`: not in
    /// the partner matrix.
    pub sends_to_ranks_outside: u64,
    /// Matched messages with one end in the window and the other outside it (in time or rank);
    /// filled in by the caller ([`trace::window::crossing_messages`]).
    pub messages_crossing: u64,
}

/// [`profile_trace_with_memory`] over `window` only: the ranks in it; calls (and runs of polls)
/// whose start lies in `[from, to]`, with the completions that follow them; suspensions that
/// overlap it, their time in it counted as suspended; memory samples inside it. Each rank's span
/// becomes the part of its span inside the window, so that MPI and outside time are over the
/// window. Partners are kept ranks' sends to kept ranks.
///
/// `metas`: the trace's first pass ([`trace::scan::scan`]), which the window was resolved on.
pub fn profile_trace_window(
    trace: &Trace,
    window: &Window,
    metas: &[RankMeta],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<ProfileStats>, RanksMemory, Vec<Skipped>, WindowCut), TraceError> {
    profile_inner(trace, Some((window, metas)), progress)
}

/// Which events of one rank a window keeps, decided on the global clock.
struct RankFilter<'a> {
    window: &'a Window,
    map: TimeMap,
    cursors: HashMap<u32, MapCursor>,
    /// Per stream: whether its last call was kept (its completions follow it).
    last_kept: HashMap<u32, bool>,
    suspended_ns: f64,
}

impl RankFilter<'_> {
    fn at(&mut self, stream: u32, t: u64) -> u64 {
        let cur = self.cursors.entry(stream).or_default();
        self.map.absolute(self.map.global_ns(t, cur))
    }

    fn keep(&mut self, stream: u32, e: &format::Event) -> bool {
        use format::{Event, Marker};
        match e {
            Event::Call(c) => {
                let k = self.window.contains(self.at(stream, c.start));
                self.last_kept.insert(stream, k);
                k
            }
            Event::Polls(p) => {
                let k = self.window.contains(self.at(stream, p.start));
                self.last_kept.insert(stream, k);
                k
            }
            Event::Completion(_) => self.last_kept.get(&stream).copied().unwrap_or(false),
            Event::Suspension(s) => {
                let (a, b) = (
                    self.at(stream, s.start),
                    self.at(stream, s.end.max(s.start)),
                );
                let k = self.window.overlaps(a, b);
                if k {
                    let (a, b) = self.window.clip(a, b);
                    self.suspended_ns += (b - a) as f64;
                }
                k
            }
            // The span's markers place the rank's MPI time; it is cut to the window afterwards.
            Event::Marker(Marker::InitDone { .. } | Marker::FinalizeStart { .. }) => true,
            Event::Marker(m) => {
                let t = m.time();
                self.window.contains(self.at(stream, t))
            }
            Event::Memory(m) => {
                let t = m.time;
                self.window.contains(self.at(stream, t))
            }
            _ => true,
        }
    }
}

fn profile_inner(
    trace: &Trace,
    window: Option<(&Window, &[RankMeta])>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Vec<ProfileStats>, RanksMemory, Vec<Skipped>, WindowCut), TraceError> {
    let mut cut = WindowCut::default();
    let mut out = Vec::new();
    let mut memories = Vec::with_capacity(trace.ranks.len());
    let mut skipped_all = Vec::new();
    let mut done = 0u64;
    // The spans, in the global clock as everywhere (`trace::span`), from metadata gathered in
    // the same pass.
    let mut metas = Vec::with_capacity(trace.ranks.len());
    let mut filters = Vec::new();
    for files in &trace.ranks {
        let mut filter = match window {
            Some((w, _)) if !w.has_rank(files.rank) => continue,
            Some((w, scanned)) => {
                let Some(meta) = scanned.iter().find(|m| m.rank == files.rank) else {
                    continue;
                };
                Some(RankFilter {
                    window: w,
                    map: TimeMap::new(meta),
                    cursors: HashMap::new(),
                    last_kept: HashMap::new(),
                    suspended_ns: 0.0,
                })
            }
            None => None,
        };
        let first = files.parts[0].open()?;
        let npt = trace::clock::ns_per_tick(&first.header().clock);
        drop(first);
        let mut p = ProfileStats::new(files.rank, trace.world_size, npt);
        let mut meta = trace::definitions::RankMeta {
            rank: files.rank,
            ..Default::default()
        };
        let mut memory = RankMemory::default();
        let (clock, skipped) = for_each_event(
            files,
            |chunk| {
                done += chunk.events;
                progress(done, 0);
            },
            |stream, e| {
                // Only what places the clock and the markers: definitions would cost O(R) per
                // rank here, kept for the whole report.
                if matches!(
                    e,
                    format::Event::Clock(_)
                        | format::Event::Suspension(_)
                        | format::Event::Marker(_)
                        | format::Event::RankInfo(_)
                ) {
                    meta.see(stream, e);
                }
                if let Some(f) = &mut filter
                    && !f.keep(stream, e)
                {
                    return;
                }
                memory.see(e);
                p.add_event(stream, e);
            },
        )?;
        filters.push(filter);
        meta.clock = clock;
        metas.push(meta);
        // Every rank's profile is kept until the report is built: what is only needed while
        // reading (the member lists, O(R) per rank) must go now.
        p.seal();
        skipped_all.extend(skipped);
        out.push(p);
        memories.push((files.rank, memory));
    }
    trace::clock::align_clocks(&mut metas);
    for (p, meta) in out.iter_mut().zip(&metas) {
        if p.span_ns.is_some() {
            p.span_ns = trace::span::global_s(meta).map(|s| s * 1e9);
        }
    }
    if let Some((w, scanned)) = window {
        cut.window = w.describe();
        for (p, f) in out.iter_mut().zip(filters) {
            let Some(f) = f else { continue };
            p.suspended_ns = f.suspended_ns;
            // The rank's span inside the window, from the first pass's (aligned) metadata.
            p.span_ns = scanned.iter().find(|m| m.rank == p.rank).and_then(|m| {
                let mut cur = MapCursor::default();
                let a = f.map.absolute(f.map.global_ns(m.init_done?, &mut cur));
                let b = f.map.absolute(f.map.global_ns(m.finalize_start?, &mut cur));
                let (a, b) = (a.max(w.from), b.min(w.to));
                Some(b.saturating_sub(a) as f64)
            });
            let before: u64 = p.partners.values().map(|s| s.messages).sum();
            p.partners.retain(|dest, _| w.has_rank(*dest));
            let after: u64 = p.partners.values().map(|s| s.messages).sum();
            cut.sends_to_ranks_outside += before - after;
        }
    }
    Ok((out, memories, skipped_all, cut))
}

/// Worlds up to this size get the full partner matrix in the table; larger ones the heaviest
/// pairs, [`TOP_PAIRS`] of them.
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
                    "rank {}: no InitDone/FinalizeStart marker pair: its MPI/outside split is unknown",
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

    /// The JSON form: `functions`, `partners`, `ranks`, `suspensions` and the rest.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = v.as_object_mut()
            && let Some(ranks) = obj.remove("ranks_table")
        {
            obj.insert("world_size".into(), serde_json::json!(self.ranks));
            obj.insert("ranks".into(), ranks);
        }
        v
    }

    /// The function table as CSV, one line per function with its histogram bins as columns.
    pub fn to_csv(&self) -> String {
        use std::fmt::Write;
        let mut o = String::from(
            "name,count,total_s,min_s,max_s,mean_s,bytes_total,bytes_min,bytes_max,bytes_mean,handle_with_care",
        );
        for label in &self.size_bins {
            let _ = write!(o, ",send_{label}");
        }
        for label in &self.size_bins {
            let _ = write!(o, ",recv_{label}");
        }
        o.push('\n');
        for f in &self.functions {
            let _ = write!(
                o,
                "{},{},{:e},{:e},{:e},{:e},{},{},{},{},{}",
                f.name,
                f.count,
                f.total_s,
                f.min_s,
                f.max_s,
                f.mean_s,
                f.bytes_total,
                f.bytes_min,
                f.bytes_max,
                f.bytes_mean,
                f.handle_with_care
            );
            for c in f.histogram {
                let _ = write!(o, ",{c}");
            }
            let recv = f.recv_histogram.unwrap_or([0; SIZE_BINS]);
            for c in recv {
                let _ = write!(o, ",{c}");
            }
            o.push('\n');
        }
        o
    }

    /// The human-readable tables.
    pub fn render_table(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "profile of    {} ({} ranks)", self.source, self.ranks);
        if let Some(w) = &self.window {
            let _ = writeln!(
                o,
                "{}: calls whose start lies in it; {} messages crossing its edge; {} sends to ranks \
                 outside it not in the partners",
                w.window, w.messages_crossing, w.sends_to_ranks_outside
            );
        }
        let _ = writeln!(
            o,
            "recorder cost {:.3} µs per call typical (median), {:.3} µs mean; '!' marks functions whose mean time is within 3x the typical cost",
            self.recorder_typical_cost_s * 1e6,
            self.recorder_mean_cost_s * 1e6
        );
        let _ = writeln!(
            o,
            "\n{:<26} {:>9} {:>11} {:>10} {:>10} {:>10} {:>13} {:>9} {:>9} {:>10}",
            "function",
            "calls",
            "total s",
            "min µs",
            "mean µs",
            "max µs",
            "bytes",
            "min B",
            "max B",
            "mean B"
        );
        for f in &self.functions {
            let _ = writeln!(
                o,
                "{:<26} {:>9} {:>11.6} {:>10.2} {:>10.2} {:>10.2} {:>13} {:>9} {:>9} {:>10.1}",
                format!("{}{}", if f.handle_with_care { "!" } else { "" }, f.name),
                f.count,
                f.total_s,
                f.min_s * 1e6,
                f.mean_s * 1e6,
                f.max_s * 1e6,
                f.bytes_total,
                f.bytes_min,
                f.bytes_max,
                f.bytes_mean
            );
        }
        let _ = writeln!(
            o,
            "\nmessage sizes (calls per bin; bin 0 = 0-1 B, bin k = [2^k, 2^(k+1)) B, last >= 8 MiB)"
        );
        let used: Vec<usize> = (0..SIZE_BINS)
            .filter(|&k| {
                self.functions
                    .iter()
                    .any(|f| f.histogram[k] > 0 || f.recv_histogram.is_some_and(|h| h[k] > 0))
            })
            .collect();
        let _ = write!(o, "{:<31}", "function");
        for &k in &used {
            let _ = write!(o, " {:>8}", self.size_bins[k]);
        }
        o.push('\n');
        for f in &self.functions {
            if f.histogram.iter().any(|&c| c > 0) {
                let _ = write!(o, "{:<31}", format!("{} (call)", f.name));
                for &k in &used {
                    let _ = write!(o, " {:>8}", f.histogram[k]);
                }
                o.push('\n');
            }
            if let Some(h) = f.recv_histogram {
                let _ = write!(o, "{:<31}", format!("{} (received)", f.name));
                for &k in &used {
                    let _ = write!(o, " {:>8}", h[k]);
                }
                o.push('\n');
            }
        }
        let n = self.ranks as usize;
        if !self.partners.pairs.is_empty() && n <= MATRIX_MAX_RANKS {
            let _ = writeln!(
                o,
                "\npartners: point-to-point messages (bytes) from row rank to column rank"
            );
            let _ = write!(o, "{:>6}", "");
            for j in 0..n {
                let _ = write!(o, " {j:>14}");
            }
            o.push('\n');
            for i in 0..n as u32 {
                let _ = write!(o, "{i:>6}");
                for j in 0..n as u32 {
                    let c = self.partners.get(i, j);
                    let cell = if c.messages == 0 {
                        "-".to_string()
                    } else {
                        format!("{} ({})", c.messages, c.bytes)
                    };
                    let _ = write!(o, " {cell:>14}");
                }
                o.push('\n');
            }
        } else if !self.partners.pairs.is_empty() {
            let _ = writeln!(
                o,
                "\npartners: {n} ranks, {} pairs exchanged point-to-point messages ({} messages); the {} heaviest by bytes (all pairs in --json):",
                self.partners.pairs.len(),
                self.partners.total_messages(),
                TOP_PAIRS.min(self.partners.pairs.len())
            );
            let _ = writeln!(
                o,
                "{:>8} {:>8} {:>12} {:>16}",
                "from", "to", "messages", "bytes"
            );
            for p in self.partners.top(TOP_PAIRS) {
                let _ = writeln!(
                    o,
                    "{:>8} {:>8} {:>12} {:>16}",
                    p.source, p.dest, p.messages, p.bytes
                );
            }
        }
        let _ = writeln!(
            o,
            "\n{:>6} {:>9} {:>12} {:>12} {:>12} {:>7} {:>12}",
            "rank", "calls", "span s", "MPI s", "outside s", "MPI %", "suspended s"
        );
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        for r in &self.ranks_table {
            let _ = writeln!(
                o,
                "{:>6} {:>9} {:>12} {:>12.6} {:>12} {:>7} {:>12.6}",
                r.rank,
                r.calls,
                opt(r.span_s),
                r.mpi_s,
                opt(r.outside_s),
                r.mpi_fraction
                    .map_or("-".to_string(), |f| format!("{:.1}", f * 100.0)),
                r.suspended_s
            );
        }
        if let Some(imb) = self.mpi_imbalance {
            let _ = writeln!(o, "MPI time imbalance (max / mean over ranks): {imb:.3}");
        }
        if !self.suspensions.is_empty() {
            let _ = writeln!(
                o,
                "\n{:>6} {:>10} {:>8} {:>12} {:>12} {:>10} {:>12} {:>11}",
                "susp",
                "Z ms",
                "flushed",
                "raw bytes",
                "stored",
                "write ms",
                "overshoot µs",
                "longest ms"
            );
            for s in &self.suspensions {
                let _ = writeln!(
                    o,
                    "{:>6} {:>10.3} {:>8} {:>12} {:>12} {:>10.3} {:>12.1} {:>11.3}",
                    s.seq,
                    s.z_s * 1e3,
                    if s.flushed {
                        format!("{} rk", s.ranks_flushed)
                    } else {
                        "no".into()
                    },
                    s.bytes_raw,
                    s.bytes_stored,
                    s.max_write_s * 1e3,
                    s.max_overshoot_s * 1e6,
                    s.max_length_s * 1e3
                );
            }
        }
        if let Some(m) = &self.memory {
            o.push('\n');
            o.push_str(&m.render());
        }
        for w in &self.warnings {
            let _ = writeln!(o, "warning: {w}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::{Event, Marker, MpiCall};

    #[test]
    fn size_bins_follow_powers_of_two() {
        assert_eq!(size_bin(0), 0);
        assert_eq!(size_bin(1), 0);
        assert_eq!(size_bin(2), 1);
        assert_eq!(size_bin(3), 1);
        assert_eq!(size_bin(1024), 10);
        assert_eq!(size_bin((4 << 20) - 1), 21);
        assert_eq!(size_bin(4 << 20), 22);
        assert_eq!(size_bin((8 << 20) - 1), 22);
        assert_eq!(size_bin(8 << 20), 23);
        assert_eq!(size_bin(u64::MAX), 23);
        assert_eq!(size_bin_label(22), "4MiB");
        assert_eq!(size_bin_label(23), ">=8MiB");
    }

    fn call(func: u16, start: u64, end: u64, peer: i32, bytes: u64, cost: u32) -> Event {
        Event::Call(MpiCall {
            func,
            start,
            end,
            comm: 0,
            peer,
            tag: 0,
            bytes,
            root: -1,
            request: 0,
            cost,
            recv_bytes: 0,
            site: format::NO_SITE,
        })
    }

    #[test]
    fn stats_accumulate_merge_and_round_trip() {
        let mut p = ProfileStats::new(1, 3, 2.0);
        p.add_event(
            0,
            &Event::FunctionDef {
                id: 4,
                name: "MPI_Send".into(),
            },
        );
        p.add_event(
            0,
            &Event::FunctionDef {
                id: 5,
                name: "MPI_Recv".into(),
            },
        );
        p.add_event(0, &Event::Marker(Marker::InitDone { time: 10 }));
        p.add_event(0, &call(4, 100, 110, 2, 8, 1));
        p.add_event(0, &call(4, 200, 230, 0, 3000, 1));
        p.add_event(0, &call(5, 300, 400, 0, 64, 1));
        p.add_event(
            0,
            &Event::Completion(format::Completion {
                request: 0,
                source: 0,
                tag: 0,
                bytes: 40,
                cancelled: false,
            }),
        );
        p.add_event(0, &Event::Marker(Marker::FinalizeStart { time: 1010 }));
        p.finish();
        let send = &p.functions["MPI_Send"];
        assert_eq!(send.count, 2);
        assert_eq!(send.total_ns, 80.0);
        assert_eq!((send.min_ns, send.max_ns), (20.0, 60.0));
        assert_eq!(
            (send.bytes_min, send.bytes_max, send.bytes_total),
            (8, 3000, 3008)
        );
        assert_eq!(send.histogram[3], 1);
        assert_eq!(send.histogram[11], 1);
        let recv = &p.functions["MPI_Recv"];
        assert_eq!(recv.recv_count, 1);
        assert_eq!(recv.recv_histogram[5], 1);
        assert_eq!(
            p.partners[&2],
            PartnerStats {
                messages: 1,
                bytes: 8
            }
        );
        assert_eq!(
            p.partners[&0],
            PartnerStats {
                messages: 1,
                bytes: 3000
            }
        );
        assert_eq!(p.span_ns, Some(2000.0));
        assert_eq!(p.mpi_in_span_ns, 280.0);
        assert_eq!(p.mean_cost_ns(), 2.0);

        let back = ProfileStats::from_json(&p.to_json()).unwrap();
        assert_eq!(back.functions, p.functions);
        assert_eq!(back.partners, p.partners);
        let mut merged = back.clone();
        merged.merge(&p);
        assert_eq!(merged.functions["MPI_Send"].count, 4);
        assert_eq!(merged.functions["MPI_Send"].min_ns, 20.0);
        assert_eq!(merged.partners[&0].bytes, 6000);

        let report = Report::build("test", &[p]);
        assert_eq!(report.partners.get(1, 2).messages, 1);
        assert_eq!(report.partners.get(1, 0).bytes, 3000);
        assert_eq!(report.partners.get(2, 1), PartnerStats::default());
        assert_eq!(report.functions[0].name, "MPI_Recv");
        // Mean times 40 ns / 200 ns against a typical cost of ~1.4 ns: no warning.
        assert!(report.functions.iter().all(|f| !f.handle_with_care));
        let csv = report.to_csv();
        assert_eq!(csv.lines().count(), 3);
        assert_eq!(
            csv.lines().next().unwrap().split(',').count(),
            11 + 2 * SIZE_BINS
        );
    }

    #[test]
    fn intercommunicator_peers_are_ranks_of_the_remote_group() {
        // Rank 1 of 4 on an intercommunicator between world ranks {0, 1} and {2, 3}: its peer 1
        // is world rank 3, not its own group's rank 1 (itself).
        let mut p = ProfileStats::new(1, 4, 1.0);
        p.add_event(
            0,
            &Event::FunctionDef {
                id: 1,
                name: "MPI_Send".into(),
            },
        );
        p.add_event(
            0,
            &Event::CommDef {
                id: 5,
                members: vec![0, 1],
            },
        );
        p.add_event(
            0,
            &Event::RemoteGroup {
                id: 5,
                members: vec![2, 3],
            },
        );
        let mut send = match call(1, 0, 10, 1, 8, 1) {
            Event::Call(c) => c,
            _ => unreachable!(),
        };
        send.comm = 5;
        p.add_event(0, &Event::Call(send));
        p.finish();
        assert_eq!(p.partners.keys().copied().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn collectives_get_what_arrived() {
        let coll = |func: u16, bytes: u64, root: i32| {
            let mut c = match call(func, 0, 10, -1, bytes, 1) {
                Event::Call(c) => c,
                _ => unreachable!(),
            };
            c.root = root;
            Event::Call(c)
        };
        // Rank 1 of 4; communicator 9 holds world ranks 3 and 1, so rank 1 is its rank 1.
        let mut p = ProfileStats::new(1, 4, 1.0);
        for (id, name) in [
            (1, "MPI_Gather"),
            (2, "MPI_Bcast"),
            (3, "MPI_Allgather"),
            (4, "MPI_Gatherv"),
        ] {
            p.add_event(
                0,
                &Event::FunctionDef {
                    id,
                    name: name.into(),
                },
            );
        }
        p.add_event(
            0,
            &Event::CommDef {
                id: 9,
                members: vec![3, 1],
            },
        );
        p.add_event(0, &coll(1, 16, 1)); // root of a world gather: 4 x 16 arrive
        p.add_event(0, &coll(1, 16, 0)); // not the root: nothing arrives
        p.add_event(0, &coll(2, 8, 0)); // broadcast from another rank: 8 arrive
        p.add_event(0, &coll(2, 8, 1)); // our own broadcast: nothing arrives
        let mut on_comm = match coll(3, 4, -1) {
            Event::Call(c) => c,
            _ => unreachable!(),
        };
        on_comm.comm = 9;
        p.add_event(0, &Event::Call(on_comm)); // allgather on 2 ranks: 2 x 4 arrive
        p.add_event(0, &coll(4, 4, 1)); // gatherv: not derivable
        let mut recorded = match coll(4, 4, 1) {
            Event::Call(c) => c,
            _ => unreachable!(),
        };
        recorded.recv_bytes = 40;
        p.add_event(0, &Event::Call(recorded)); // gatherv recorded since chunk version 6
        p.finish();
        let f = &p.functions;
        assert_eq!(f["MPI_Gather"].recv_count, 1);
        assert_eq!(f["MPI_Gather"].recv_bytes_total, 64);
        assert_eq!(f["MPI_Gather"].recv_histogram[size_bin(64)], 1);
        assert_eq!(
            (f["MPI_Bcast"].recv_count, f["MPI_Bcast"].recv_bytes_total),
            (1, 8)
        );
        assert_eq!(f["MPI_Allgather"].recv_bytes_total, 8);
        assert_eq!(
            (
                f["MPI_Gatherv"].recv_count,
                f["MPI_Gatherv"].recv_bytes_total
            ),
            (1, 40)
        );
        // The call's own size stays in the first histogram.
        assert_eq!(f["MPI_Gather"].histogram[size_bin(16)], 2);
    }

    #[test]
    fn cheap_functions_are_flagged() {
        let mut p = ProfileStats::new(0, 1, 1.0);
        p.add_event(
            0,
            &Event::FunctionDef {
                id: 1,
                name: "MPI_Comm_rank".into(),
            },
        );
        p.add_event(
            0,
            &Event::FunctionDef {
                id: 2,
                name: "MPI_Barrier".into(),
            },
        );
        p.add_event(0, &call(1, 0, 10, -1, 0, 100));
        p.add_event(0, &call(2, 0, 10_000, -1, 0, 100));
        // One very expensive call must not raise the bar for every function.
        p.add_event(0, &call(2, 0, 10_000, -1, 0, 50_000_000));
        let r = Report::build("t", &[p]);
        let care: Vec<&str> = r
            .functions
            .iter()
            .filter(|f| f.handle_with_care)
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(care, ["MPI_Comm_rank"]);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    }
}
