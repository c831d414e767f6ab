//! The per-rank facts reconstruction needs before it can map a single timestamp (clock samples,
//! suspensions, names, communicators), gathered in a first streaming pass, and the time map built
//! from them: local ticks → rank 0's clock (piecewise-linear through every offset sample, so drift
//! between samples is followed) → with every suspension collapsed to an instant (DP' removed).
//!
//! Convention: a rank's "local nanoseconds" are `ticks · 1e9 / ticks_per_sec` (no epoch), and
//! `ClockSample::offset_ns` is rank 0's local nanoseconds minus ours at tick `local`.

use std::collections::{BTreeSet, HashMap};

use format::{ClockCalibration, ClockSample, CommId, Event, FunctionId, Marker, Suspension};

use crate::trace::{RankFiles, Skipped, TraceError, for_each_misc_event};

/// What the first pass learns about one rank. Small: it grows with the number of suspensions,
/// clock samples, functions and communicators, not with the number of events.
#[derive(Clone, Debug, Default)]
pub struct RankMeta {
    pub rank: u32,
    pub clock: ClockCalibration,
    pub samples: Vec<ClockSample>,
    pub suspensions: Vec<Suspension>,
    /// The stream (thread) that recorded each suspension: the one it paused.
    pub suspension_streams: Vec<u32>,
    pub init_done: Option<u64>,
    pub finalize_start: Option<u64>,
    pub functions: HashMap<FunctionId, String>,
    /// Communicator definitions in the order they appear.
    pub comms: Vec<(CommId, Vec<u32>)>,
    pub streams: BTreeSet<u32>,
    pub events: u64,
    pub skipped: Vec<Skipped>,
}

/// The first pass over one rank: reads every chunk once, keeps only the metadata (so it decodes
/// only the misc events).
pub fn scan_rank(files: &RankFiles) -> Result<RankMeta, TraceError> {
    let mut meta = RankMeta {
        rank: files.rank,
        ..Default::default()
    };
    let mut streams = BTreeSet::new();
    let mut events = 0u64;
    let (clock, skipped) = for_each_misc_event(
        files,
        |chunk| {
            streams.insert(chunk.stream);
            events += chunk.events;
        },
        |stream, event| match event {
            Event::Clock(s) => meta.samples.push(*s),
            Event::Suspension(s) => {
                meta.suspensions.push(s.clone());
                meta.suspension_streams.push(stream);
            }
            Event::Marker(Marker::InitDone { time }) => {
                meta.init_done.get_or_insert(*time);
            }
            Event::Marker(Marker::FinalizeStart { time }) => {
                meta.finalize_start.get_or_insert(*time);
            }
            Event::FunctionDef { id, name } => {
                meta.functions.insert(*id, name.clone());
            }
            Event::CommDef { id, members } => meta.comms.push((*id, members.clone())),
            _ => {}
        },
    )?;
    meta.clock = clock;
    meta.skipped = skipped;
    meta.streams = streams;
    meta.events = events;
    Ok(meta)
}

/// Nanoseconds per tick of a calibration; 1 when the calibration is missing or nonsensical, so a
/// damaged header cannot turn every time into infinity.
pub fn ns_per_tick(clock: &ClockCalibration) -> f64 {
    if clock.ticks_per_sec.is_finite() && clock.ticks_per_sec > 0.0 {
        1e9 / clock.ticks_per_sec
    } else {
        1.0
    }
}

/// Maps one rank's ticks to the global clock, with or without its suspensions.
#[derive(Clone, Debug)]
pub struct TimeMap {
    ns_per_tick: f64,
    sample_at: Vec<u64>,
    sample_off: Vec<f64>,
    /// Offset change per tick between sample k and k+1.
    slope: Vec<f64>,
    sus_start: Vec<u64>,
    sus_end: Vec<u64>,
    /// Global time of each suspension's start.
    sus_g_start: Vec<f64>,
    /// Suspension time removed before suspension j, and up to and including it (global ns).
    removed_before: Vec<f64>,
    removed_after: Vec<f64>,
}

/// Where the last lookup landed; lookups in nearly increasing order then cost O(1).
#[derive(Clone, Copy, Debug, Default)]
pub struct MapCursor {
    samples_at_or_before: usize,
    suspensions_started: usize,
}

impl TimeMap {
    /// The rank's map with every suspension of the rank collapsed.
    pub fn new(meta: &RankMeta) -> TimeMap {
        Self::with_suspensions(meta, |_| true)
    }

    /// The map of one stream (thread) of the rank: only the suspensions that paused that thread
    /// are collapsed. Under `MPI_THREAD_MULTIPLE` the other threads kept running through them.
    pub fn for_stream(meta: &RankMeta, stream: u32) -> TimeMap {
        // Traces without stream information for suspensions (none recorded) keep the rank's map.
        Self::with_suspensions(meta, |k| {
            meta.suspension_streams.get(k).is_none_or(|&s| s == stream)
        })
    }

    fn with_suspensions(meta: &RankMeta, pauses_lane: impl Fn(usize) -> bool) -> TimeMap {
        let ns_per_tick = ns_per_tick(&meta.clock);
        let mut samples: Vec<(u64, f64)> = meta
            .samples
            .iter()
            .filter(|s| s.offset_ns.is_finite())
            .map(|s| (s.local, s.offset_ns))
            .collect();
        samples.sort_by_key(|s| s.0);
        // Two samples at one tick would make an infinite slope: the later measurement wins.
        samples.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 = later.1;
                true
            } else {
                false
            }
        });
        let slope = samples
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0) as f64)
            .collect();
        let mut map = TimeMap {
            ns_per_tick,
            sample_at: samples.iter().map(|s| s.0).collect(),
            sample_off: samples.iter().map(|s| s.1).collect(),
            slope,
            sus_start: Vec::new(),
            sus_end: Vec::new(),
            sus_g_start: Vec::new(),
            removed_before: Vec::new(),
            removed_after: Vec::new(),
        };
        let mut sus: Vec<(u64, u64)> = meta
            .suspensions
            .iter()
            .enumerate()
            .filter(|&(k, _)| pauses_lane(k))
            .map(|(_, s)| (s.start, s.end.max(s.start)))
            .collect();
        sus.sort();
        let mut cur = MapCursor::default();
        let mut removed = 0.0;
        let mut last_end = 0u64;
        for (start, end) in sus {
            // Overlapping records (damaged or odd traces) must not remove the same time twice.
            let start = start.max(last_end);
            let end = end.max(start);
            last_end = end;
            let g_start = map.global_ns(start, &mut cur);
            let g_end = map.global_ns(end, &mut cur);
            map.sus_start.push(start);
            map.sus_end.push(end);
            map.sus_g_start.push(g_start);
            map.removed_before.push(removed);
            removed += (g_end - g_start).max(0.0);
            map.removed_after.push(removed);
        }
        map
    }

    pub fn ns_per_tick(&self) -> f64 {
        self.ns_per_tick
    }

    /// Rank 0's clock minus ours at tick `t`, in ns.
    fn offset_ns(&self, t: u64, cur: &mut MapCursor) -> f64 {
        let n = self.sample_at.len();
        if n == 0 {
            return 0.0;
        }
        let k = &mut cur.samples_at_or_before;
        while *k < n && self.sample_at[*k] <= t {
            *k += 1;
        }
        while *k > 0 && self.sample_at[*k - 1] > t {
            *k -= 1;
        }
        match *k {
            0 => self.sample_off[0],
            k if k == n => self.sample_off[n - 1],
            k => self.sample_off[k - 1] + self.slope[k - 1] * (t - self.sample_at[k - 1]) as f64,
        }
    }

    /// Tick `t` in the global clock (rank 0's local nanoseconds).
    pub fn global_ns(&self, t: u64, cur: &mut MapCursor) -> f64 {
        t as f64 * self.ns_per_tick + self.offset_ns(t, cur)
    }

    /// Tick `t` in the global clock with every suspension before it removed; a tick inside a
    /// suspension maps to the suspension's start.
    pub fn collapsed_ns(&self, t: u64, cur: &mut MapCursor) -> f64 {
        let n = self.sus_start.len();
        let j = &mut cur.suspensions_started;
        while *j < n && self.sus_start[*j] <= t {
            *j += 1;
        }
        while *j > 0 && self.sus_start[*j - 1] > t {
            *j -= 1;
        }
        if *j == 0 {
            return self.global_ns(t, cur);
        }
        let last = cur.suspensions_started - 1;
        if t < self.sus_end[last] {
            self.sus_g_start[last] - self.removed_before[last]
        } else {
            self.global_ns(t, cur) - self.removed_after[last]
        }
    }

    /// Suspension time (global ns) removed between ticks `a` and `b`.
    pub fn removed_between(&self, a: u64, b: u64) -> f64 {
        let mut ca = MapCursor::default();
        let mut cb = MapCursor::default();
        (self.global_ns(b, &mut cb) - self.collapsed_ns(b, &mut cb))
            - (self.global_ns(a, &mut ca) - self.collapsed_ns(a, &mut ca))
    }

    /// Whether tick `t` lies strictly inside a suspension (after its start, before its end).
    pub fn inside_suspension(&self, t: u64) -> bool {
        let j = self.sus_start.partition_point(|&s| s < t);
        j > 0 && t < self.sus_end[j - 1]
    }

    pub fn has_samples(&self) -> bool {
        !self.sample_at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::SampleKind;

    fn meta(samples: &[(u64, f64)], sus: &[(u64, u64)]) -> RankMeta {
        RankMeta {
            clock: ClockCalibration {
                ticks_per_sec: 1e9,
                ..Default::default()
            },
            samples: samples
                .iter()
                .map(|&(local, offset_ns)| ClockSample {
                    local,
                    offset_ns,
                    rtt_ns: 0.0,
                    when: SampleKind::Init,
                })
                .collect(),
            suspensions: sus
                .iter()
                .map(|&(start, end)| Suspension {
                    start,
                    end,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn offsets_interpolate_between_samples_and_hold_outside() {
        let m = TimeMap::new(&meta(&[(1000, 10.0), (2000, 30.0)], &[]));
        let mut c = MapCursor::default();
        assert_eq!(m.global_ns(500, &mut c), 510.0);
        assert_eq!(m.global_ns(1500, &mut c), 1520.0);
        assert_eq!(m.global_ns(3000, &mut c), 3030.0);
        // Going back in time must give the same answers as going forward.
        assert_eq!(m.global_ns(1500, &mut c), 1520.0);
    }

    #[test]
    fn suspensions_collapse_to_their_start() {
        let m = TimeMap::new(&meta(&[], &[(100, 150), (300, 310)]));
        let mut c = MapCursor::default();
        assert_eq!(m.collapsed_ns(99, &mut c), 99.0);
        assert_eq!(m.collapsed_ns(120, &mut c), 100.0);
        assert_eq!(m.collapsed_ns(150, &mut c), 100.0);
        assert_eq!(m.collapsed_ns(200, &mut c), 150.0);
        assert_eq!(m.collapsed_ns(400, &mut c), 340.0);
        assert_eq!(m.removed_between(0, 400), 60.0);
        assert_eq!(m.removed_between(200, 400), 10.0);
        assert!(m.inside_suspension(120));
        assert!(!m.inside_suspension(150));
    }

    #[test]
    fn a_suspension_collapses_only_the_stream_it_paused() {
        let mut m = meta(&[], &[(100, 150)]);
        m.suspension_streams = vec![0];
        let paused = TimeMap::for_stream(&m, 0);
        let running = TimeMap::for_stream(&m, 1);
        let mut c = MapCursor::default();
        assert_eq!(paused.collapsed_ns(200, &mut c), 150.0);
        let mut c = MapCursor::default();
        assert_eq!(running.collapsed_ns(200, &mut c), 200.0);
        assert!(!running.inside_suspension(120));
        // The rank-wide map (span, compare) still sees it.
        assert_eq!(TimeMap::new(&m).removed_between(0, 200), 50.0);
    }
}
