//! Gathering a profile: from the profile files of `--mode profile`, or by streaming a trace rank
//! by rank (optionally only what lies in a window) into one [`ProfileStats`] per rank.

use std::collections::HashMap;
use std::path::Path;

use super::*;
use crate::memory::{RankMemory, RanksMemory};
use trace::Skipped;
use trace::Trace;
use trace::clock::MapCursor;
use trace::clock::TimeMap;
use trace::definitions::RankMeta;
use trace::open::for_each_event;
use trace::window::Window;

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
                let b = f.map.absolute(f.map.global_ns(m.span_end()?, &mut cur));
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
