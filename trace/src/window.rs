//! A window of a run: a time range and a subset of ranks, the cut every view can make
//! (`--from`, `--to`, `--ranks` of `export`, `report`, `compare` and `timeline`).
//!
//! Specs are parsed without the trace ([`WindowSpec::parse`]) and resolved against it
//! ([`WindowSpec::resolve`]): seconds count from the run's start, the earliest end of `MPI_Init`
//! over its ranks in the global clock (the start of [`crate::span`]); `suspension:N` is the
//! suspension with sequence number N, numbered from 0 as the trace numbers them (the `seq` every
//! view shows). `--from suspension:N` starts the window where suspension N ended on its last
//! rank, `--to suspension:N` ends it where suspension N began on its first rank, so that a window
//! between two suspensions holds the program's work and none of either pause.
//!
//! Times of a resolved [`Window`] are absolute global nanoseconds, as the exports write them
//! (`TimeMap::absolute`).

use std::collections::BTreeSet;
use std::fmt;

use format::framing::ChunkHeader;
use format::{ClockCalibration, Event};

use crate::clock::{MapCursor, TimeMap};
use crate::definitions::RankMeta;
use crate::error::TraceError;
use crate::files::RankFiles;
use crate::open::{ChunkStats, Read, walk_events};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("{0}")]
    Bad(String),
}

fn bad(s: impl Into<String>) -> WindowError {
    WindowError::Bad(s.into())
}

/// One edge of a window as the user wrote it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Edge {
    /// Seconds since the run's start.
    Seconds(f64),
    /// Suspension N (its sequence number, from 0).
    Suspension(u64),
}

impl Edge {
    /// `1.25` or `suspension:3`.
    pub fn parse(flag: &str, text: &str) -> Result<Edge, WindowError> {
        let t = text.trim();
        if let Some(n) = t.strip_prefix("suspension:") {
            return n.trim().parse().map(Edge::Suspension).map_err(|_| {
                bad(format!(
                    "{flag} {t:?}: the suspension number must be a whole number from 0, e.g. suspension:3"
                ))
            });
        }
        let s: f64 = t.parse().map_err(|_| {
            bad(format!(
                "{flag} {t:?} is neither seconds since the start (e.g. 1.5) nor suspension:N"
            ))
        })?;
        if !s.is_finite() || s < 0.0 {
            return Err(bad(format!("{flag} {t:?}: seconds must be 0 or more")));
        }
        Ok(Edge::Seconds(s))
    }
}

/// Parses `0-3,6,8-9` into ranks, in the order given.
pub fn parse_ranks(list: &str) -> Result<Vec<u32>, WindowError> {
    let mut out = Vec::new();
    let rank = |s: &str, part: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| bad(format!("--ranks: bad rank '{part}' (e.g. 0-15,32)")))
    };
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (rank(a, part)?, rank(b, part)?);
                if b < a {
                    return Err(bad(format!(
                        "--ranks: bad rank range '{part}': end before start"
                    )));
                }
                out.extend(a..=b);
            }
            None => out.push(rank(part, part)?),
        }
    }
    if out.is_empty() {
        return Err(bad("--ranks names no rank"));
    }
    Ok(out)
}

/// `--from`, `--to`, `--ranks` as given, before the trace is known.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowSpec {
    pub from: Option<Edge>,
    pub to: Option<Edge>,
    /// World ranks, in the order given (the timeline draws them in that order).
    pub ranks: Option<Vec<u32>>,
}

impl WindowSpec {
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        ranks: Option<&str>,
    ) -> Result<WindowSpec, WindowError> {
        let spec = WindowSpec {
            from: from.map(|t| Edge::parse("--from", t)).transpose()?,
            to: to.map(|t| Edge::parse("--to", t)).transpose()?,
            ranks: ranks.map(parse_ranks).transpose()?,
        };
        if let (Some(Edge::Seconds(a)), Some(Edge::Seconds(b))) = (spec.from, spec.to)
            && b <= a
        {
            return Err(bad(format!(
                "empty window: --from {a} is not before --to {b}"
            )));
        }
        Ok(spec)
    }

    /// Whether the spec cuts nothing in time.
    pub fn whole_time(&self) -> bool {
        self.from.is_none() && self.to.is_none()
    }

    pub fn is_everything(&self) -> bool {
        self.whole_time() && self.ranks.is_none()
    }

    /// The window in `metas`' trace (of `world_size` ranks), on the global clock.
    pub fn resolve(&self, metas: &[RankMeta], world_size: u32) -> Result<Window, WindowError> {
        self.resolve_on(metas, world_size, |map, t, cur| map.global_ns(t, cur))
    }

    /// [`Self::resolve`] on another axis of the maps' times (the timeline's collapsed one).
    pub fn resolve_on(
        &self,
        metas: &[RankMeta],
        world_size: u32,
        axis: impl Fn(&TimeMap, u64, &mut MapCursor) -> f64,
    ) -> Result<Window, WindowError> {
        let ranks = match &self.ranks {
            Some(list) => {
                if let Some(r) = list.iter().find(|r| **r >= world_size) {
                    return Err(bad(format!(
                        "--ranks: rank {r} is not in this trace (ranks 0-{})",
                        world_size.saturating_sub(1)
                    )));
                }
                let mut seen = BTreeSet::new();
                Some(
                    list.iter()
                        .copied()
                        .filter(|r| seen.insert(*r))
                        .collect::<Vec<_>>(),
                )
            }
            None => None,
        };
        let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
        let epoch = maps.first().map_or(0, TimeMap::epoch_ns);
        let mut start = f64::INFINITY;
        let mut end = f64::NEG_INFINITY;
        // Per suspension seq: earliest begin and latest end over ranks.
        let mut sus: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
        for (meta, map) in metas.iter().zip(&maps) {
            let mut cur = MapCursor::default();
            if let Some(t) = meta.init_done {
                start = start.min(axis(map, t, &mut cur));
            }
            if let Some(t) = meta.span_end() {
                end = end.max(axis(map, t, &mut cur));
            }
            let mut cur = MapCursor::default();
            let mut list: Vec<_> = meta.suspensions.iter().collect();
            list.sort_by_key(|s| s.start);
            for s in list {
                let a = axis(map, s.start, &mut cur);
                let b = axis(map, s.end.max(s.start), &mut cur);
                let e = sus.entry(s.seq).or_insert((a, b));
                e.0 = e.0.min(a);
                e.1 = e.1.max(b);
            }
        }
        let has_start = start.is_finite();
        let abs = |t: f64| -> u64 {
            let r = (t + 0.5).floor();
            if r >= 0.0 {
                epoch.saturating_add(r as u64)
            } else {
                epoch.saturating_sub((-r) as u64)
            }
        };
        let origin = if has_start { abs(start) } else { epoch };
        let suspension = |n: u64, flag: &str| -> Result<(f64, f64), WindowError> {
            sus.get(&n).copied().ok_or_else(|| {
                let count = sus.len();
                if count == 0 {
                    bad(format!(
                        "{flag} suspension:{n}: this trace has no suspensions"
                    ))
                } else {
                    let last = sus.keys().next_back().copied().unwrap_or(0);
                    bad(format!(
                        "{flag} suspension:{n}: this trace has {count} suspensions, numbered 0-{last}"
                    ))
                }
            })
        };
        let need_start = |flag: &str| {
            if has_start {
                Ok(())
            } else {
                Err(bad(format!(
                    "{flag} in seconds needs the end of MPI_Init to count from, and no rank of this trace recorded it"
                )))
            }
        };
        let (from, from_edge) = match self.from {
            None if self.whole_time() => (0, None),
            None => (origin, Some(Edge::Seconds(0.0))),
            Some(Edge::Seconds(s)) => {
                need_start("--from")?;
                (origin.saturating_add((s * 1e9).round() as u64), self.from)
            }
            Some(Edge::Suspension(n)) => (abs(suspension(n, "--from")?.1), self.from),
        };
        let (to, to_edge) = match self.to {
            None if self.whole_time() => (u64::MAX, None),
            // The end of the span where there is one, else the end of the trace.
            None if end.is_finite() => (abs(end), None),
            None => (u64::MAX, None),
            Some(Edge::Seconds(s)) => {
                need_start("--to")?;
                (origin.saturating_add((s * 1e9).round() as u64), self.to)
            }
            Some(Edge::Suspension(n)) => (abs(suspension(n, "--to")?.0), self.to),
        };
        if to <= from {
            let secs = |t: u64| t as f64 / 1e9 - origin as f64 / 1e9;
            return Err(bad(format!(
                "empty window: --from ({:.6} s) is not before --to ({:.6} s)",
                secs(from),
                secs(to)
            )));
        }
        Ok(Window {
            origin,
            from,
            to,
            from_edge,
            to_edge,
            ranks,
            world_size,
            span_end: end.is_finite().then(|| abs(end)),
        })
    }
}

/// A resolved window: absolute global ns `[from, to]` and a set of world ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The run's start (earliest end of `MPI_Init`), absolute global ns: what seconds count from.
    pub origin: u64,
    pub from: u64,
    pub to: u64,
    from_edge: Option<Edge>,
    to_edge: Option<Edge>,
    /// `None`: every rank.
    ranks: Option<Vec<u32>>,
    world_size: u32,
    /// The latest start of `MPI_Finalize`, where known.
    pub span_end: Option<u64>,
}

impl Window {
    /// Everything: every rank, all time.
    pub fn everything(world_size: u32) -> Window {
        Window {
            origin: 0,
            from: 0,
            to: u64::MAX,
            from_edge: None,
            to_edge: None,
            ranks: None,
            world_size,
            span_end: None,
        }
    }

    pub fn is_everything(&self) -> bool {
        self.cuts_nothing_in_time() && self.ranks.is_none()
    }

    pub fn cuts_nothing_in_time(&self) -> bool {
        self.from == 0 && self.to == u64::MAX
    }

    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    pub fn has_rank(&self, rank: u32) -> bool {
        self.ranks.as_ref().is_none_or(|r| r.contains(&rank))
    }

    /// The ranks kept, in the order given (all ranks ascending without `--ranks`).
    pub fn ranks(&self) -> Vec<u32> {
        self.ranks
            .clone()
            .unwrap_or_else(|| (0..self.world_size).collect())
    }

    /// Whether instant `t` (absolute ns) lies in the window's time: `from <= t <= to`.
    pub fn contains(&self, t: u64) -> bool {
        self.from <= t && t <= self.to
    }

    /// Whether an interval `[a, b]` has some part in the window's time.
    pub fn overlaps(&self, a: u64, b: u64) -> bool {
        a <= self.to && b.max(a) >= self.from
    }

    /// `[a, b]` cut to the window's time (an interval that overlaps it, see [`Self::overlaps`]).
    pub fn clip(&self, a: u64, b: u64) -> (u64, u64) {
        let a2 = a.clamp(self.from, self.to);
        (a2, b.max(a).clamp(a2, self.to))
    }

    /// `t` moved into the window's time: where a mark for something outside it goes.
    pub fn clamp(&self, t: u64) -> u64 {
        t.clamp(self.from, self.to)
    }

    /// Absolute ns as seconds since the start.
    pub fn seconds(&self, t: u64) -> f64 {
        (t as f64 - self.origin as f64) / 1e9
    }

    /// The same window moved to another run whose start is `origin`: the same seconds since the
    /// start (`compare` applies the run's window to its references).
    pub fn rebased(&self, origin: u64) -> Window {
        let shift = |t: u64, open: u64| {
            if t == open {
                t
            } else {
                origin.saturating_add(t.saturating_sub(self.origin))
            }
        };
        Window {
            origin,
            from: shift(self.from, 0),
            to: shift(self.to, u64::MAX),
            ..self.clone()
        }
    }

    /// What the summary lines say: `window 1.200000-2.500000 s (suspension:3 to suspension:5),
    /// ranks 0-3 (4 of 16)`.
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cuts_nothing_in_time() {
            write!(f, "window: whole run")?;
        } else {
            let to = if self.to == u64::MAX {
                "end".to_string()
            } else {
                format!("{:.6}", self.seconds(self.to))
            };
            write!(f, "window {:.6}-{to} s", self.seconds(self.from))?;
            let name = |e: Option<Edge>| match e {
                Some(Edge::Suspension(n)) => Some(format!("suspension:{n}")),
                _ => None,
            };
            match (name(self.from_edge), name(self.to_edge)) {
                (None, None) => {}
                (Some(a), Some(b)) => write!(f, " ({a} to {b})")?,
                (Some(a), None) => write!(f, " (from {a})")?,
                (None, Some(b)) => write!(f, " (to {b})")?,
            }
        }
        match &self.ranks {
            None => write!(f, ", all {} ranks", self.world_size),
            Some(r) => write!(
                f,
                ", ranks {} ({} of {})",
                crate::collect::rank_list(r),
                r.len(),
                self.world_size
            ),
        }
    }
}

impl Window {
    /// Whether a chunk of `rank` (its header `h`, its rank's map `map`) can hold an event with a
    /// time in the window: a chunk's `first_ts..=last_ts` holds every tick of every event in it
    /// (a call's start and end, a suspension's start and end, ...; FORMAT.md "Chunk header"), so
    /// an event that overlaps the window, however long before it began, lies in a chunk that
    /// meets it. A chunk with no timed event (0, 0) is always read; the range is widened by a
    /// nanosecond each side against rounding.
    pub fn meets_chunk(&self, rank: u32, map: &TimeMap, h: &ChunkHeader) -> bool {
        if !self.has_rank(rank) {
            return false;
        }
        if self.cuts_nothing_in_time() || (h.first_ts == 0 && h.last_ts == 0) {
            return true;
        }
        let (lo, hi) = map.global_range(h.first_ts, h.last_ts);
        let (lo, hi) = (
            map.absolute(lo).saturating_sub(1),
            map.absolute(hi).saturating_add(1),
        );
        self.overlaps(lo, hi)
    }
}

/// What [`for_each_event_in`] read of one rank.
#[derive(Debug, Default)]
pub struct WindowRead {
    pub clock: ClockCalibration,
    pub skipped: Vec<crate::Skipped>,
    /// Chunks decoded (they meet the window) and passed over (checked, not decoded).
    pub decoded: u64,
    pub passed: u64,
}

/// The events of `files` (one rank, `map` its [`TimeMap`]) in the chunks that meet `window`
/// ([`Window::meets_chunk`]), in order: every event with a time in the window is among them, with
/// the events around it in its chunk, so callers still cut each event to the window themselves.
/// Events without a time (definitions, completions) come only from those chunks: what a view
/// needs of them from outside the window it takes from the first pass ([`crate::scan`]). A
/// decoded chunk whose header range misses one of its events is an error
/// ([`TraceError::ChunkRange`]).
/// `on_chunk` sees each decoded chunk's header figures before its events.
pub fn for_each_event_in(
    files: &RankFiles,
    map: &TimeMap,
    window: &Window,
    mut on_chunk: impl FnMut(&ChunkStats),
    mut on_event: impl FnMut(u32, &Event),
) -> Result<WindowRead, TraceError> {
    let want = |h: &ChunkHeader| window.meets_chunk(files.rank, map, h);
    let mut decoded = 0u64;
    let (clock, skipped, passed) = walk_events(
        files,
        Read::Wanted(&want),
        |c| {
            decoded += 1;
            on_chunk(c);
        },
        &mut on_event,
    )?;
    Ok(WindowRead {
        clock,
        skipped,
        decoded,
        passed,
    })
}

/// Which ends of a matched message lie in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ends {
    Both,
    Neither,
    /// The send is in the window, the receive outside it (in time or rank): the message leaves.
    SendOnly,
    /// The receive is in the window, the send outside it: the message comes in.
    RecvOnly,
}

impl Ends {
    /// For a message crossing the window's edge, whether it leaves the window (its send is the
    /// end inside); `None` for one wholly inside or outside.
    pub fn leaving(self) -> Option<bool> {
        match self {
            Ends::Both | Ends::Neither => None,
            Ends::SendOnly => Some(true),
            Ends::RecvOnly => Some(false),
        }
    }
}

impl Window {
    /// A message's ends: the send at `send_t` on rank `source` (the start of the send call, where
    /// its arrow leaves), the receive at `recv_t` on `dest` (the end of the call that completed
    /// it, where its arrow lands), absolute ns.
    pub fn ends(&self, source: u32, send_t: u64, dest: u32, recv_t: u64) -> Ends {
        let send = self.has_rank(source) && self.contains(send_t);
        let recv = self.has_rank(dest) && self.contains(recv_t);
        match (send, recv) {
            (true, true) => Ends::Both,
            (false, false) => Ends::Neither,
            (true, false) => Ends::SendOnly,
            (false, true) => Ends::RecvOnly,
        }
    }

    /// The label of the mark that stands for a message's end outside the window:
    /// `→ rank 7 at 12.345678 s (outside window)`.
    pub fn outside_label(&self, leaving: bool, rank: u32, t: u64) -> String {
        format!(
            "{} rank {rank} at {:.6} s (outside window)",
            if leaving { "→" } else { "←" },
            self.seconds(t)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::Suspension;

    #[test]
    fn ranks_parse_as_lists_and_ranges() {
        assert_eq!(parse_ranks("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_ranks(" 2 , 1 ").unwrap(), vec![2, 1]);
        assert!(
            parse_ranks("3-1")
                .unwrap_err()
                .to_string()
                .contains("end before start")
        );
        assert!(
            parse_ranks("a")
                .unwrap_err()
                .to_string()
                .contains("bad rank 'a'")
        );
        assert!(parse_ranks(",").is_err());
        assert!(parse_ranks("-1").is_err());
    }

    #[test]
    fn edges_parse_seconds_and_suspensions() {
        assert_eq!(Edge::parse("--from", "1.5"), Ok(Edge::Seconds(1.5)));
        assert_eq!(Edge::parse("--to", "suspension:3"), Ok(Edge::Suspension(3)));
        let e = Edge::parse("--from", "soon").unwrap_err().to_string();
        assert!(
            e.contains("--from \"soon\"") && e.contains("suspension:N"),
            "{e}"
        );
        assert!(Edge::parse("--from", "-1").is_err());
        assert!(Edge::parse("--from", "NaN").is_err());
        assert!(Edge::parse("--to", "suspension:x").is_err());
        let e = WindowSpec::parse(Some("2"), Some("1"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not before"), "{e}");
    }

    /// Two ranks on one clock (1 ns per tick, no samples): InitDone at 100 and 110, two
    /// suspensions.
    fn metas() -> Vec<RankMeta> {
        let sus = |seq, start, end| Suspension {
            seq,
            start,
            end,
            ..Default::default()
        };
        (0..2u32)
            .map(|r| {
                let mut m = RankMeta {
                    rank: r,
                    init_done: Some(100 + 10 * u64::from(r)),
                    finalize_start: Some(10_000 + u64::from(r)),
                    ..Default::default()
                };
                m.clock.ticks_per_sec = 1e9;
                m.suspensions = vec![
                    sus(0, 1000 + u64::from(r), 1500 + 2 * u64::from(r)),
                    sus(1, 3000 + u64::from(r), 3500),
                ];
                m
            })
            .collect()
    }

    #[test]
    fn windows_resolve_against_the_trace() {
        let metas = metas();
        let everything = WindowSpec::default().resolve(&metas, 2).unwrap();
        assert!(everything.is_everything());
        assert!(everything.contains(0) && everything.contains(u64::MAX));

        let w = WindowSpec::parse(Some("suspension:0"), Some("suspension:1"), Some("1"))
            .unwrap()
            .resolve(&metas, 2)
            .unwrap();
        let o = w.origin;
        // Suspension 0 ends at 1502 on its last rank; suspension 1 begins at 3000 on its first.
        assert_eq!((w.from - o, w.to - o), (1402, 2900));
        assert!(w.has_rank(1) && !w.has_rank(0));
        assert!(w.overlaps(o + 1000, o + 1402) && !w.overlaps(o, o + 1401));
        assert_eq!(w.clip(o + 1000, o + 5000), (w.from, w.to));
        let text = w.to_string();
        assert!(
            text.contains("suspension:0 to suspension:1") && text.contains("ranks 1 (1 of 2)"),
            "{text}"
        );

        let w = WindowSpec::parse(Some("0.000001"), None, None)
            .unwrap()
            .resolve(&metas, 2)
            .unwrap();
        // --to defaults to the latest start of MPI_Finalize.
        assert_eq!((w.from - w.origin, w.to - w.origin), (1000, 10_001 - 100));

        let e = |from: &str, to: Option<&str>, ranks: Option<&str>| {
            WindowSpec::parse(Some(from), to, ranks)
                .unwrap()
                .resolve(&metas, 2)
                .unwrap_err()
                .to_string()
        };
        let unknown = e("suspension:2", None, None);
        assert!(
            unknown.contains("has 2 suspensions, numbered 0-1"),
            "{unknown}"
        );
        let not_in = e("0", None, Some("0,2"));
        assert!(not_in.contains("rank 2 is not in this trace"), "{not_in}");
        let empty = e("suspension:1", Some("suspension:0"), None);
        assert!(empty.contains("empty window"), "{empty}");
    }

    #[test]
    fn rebasing_keeps_the_seconds() {
        let w = WindowSpec::parse(Some("0.000001"), Some("0.000002"), None)
            .unwrap()
            .resolve(&metas(), 2)
            .unwrap();
        let r = w.rebased(5_000);
        assert_eq!((r.from, r.to), (6_000, 7_000));
        let all = Window::everything(2).rebased(5_000);
        assert!(all.is_everything());
    }
}
