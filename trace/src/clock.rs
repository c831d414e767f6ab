//! The clocks of a trace's ranks aligned with each other, and the time map built from a rank's
//! definitions ([`crate::definitions::RankMeta`], gathered by the first pass, [`crate::scan`]):
//! local ticks → rank 0's clock (piecewise-linear through every offset sample, so drift between
//! samples is followed) → with every suspension collapsed to an instant (DP' removed).
//!
//! Convention: a rank's "local nanoseconds" are `ticks · 1e9 / ticks_per_sec` (no epoch), and
//! `ClockSample::offset_ns` is rank 0's local nanoseconds minus ours at tick `local`.
//!
//! Ranks of one host read one clock (an invariant TSC, or `CLOCK_MONOTONIC`), but each calibrates
//! its own `ticks_per_sec` over a few milliseconds. A calibration error of 1e-7 is invisible in a
//! duration, yet times counted from the host's boot (10^13 ns and more) differ by a millisecond
//! between two ranks, and the offsets the recorder measures are mostly that difference plus the
//! exchange's noise (± half its round trip, microseconds). Applying those samples on one host
//! turned the noise into causality violations between ranks that share one clock. So
//! [`align_clocks`] gives every rank of a host its host's calibration (that of its lowest rank)
//! and one offset function, which is exactly zero on rank 0's host; only hosts without rank 0
//! use measured offsets, fitted from all their ranks' samples.

use std::collections::HashMap;

use format::{ClockCalibration, ClockSource};

use crate::definitions::{AlignedClock, RankMeta};

/// Nanoseconds per tick of a calibration; 1 when the calibration is missing or nonsensical, so a
/// damaged header cannot turn every time into infinity.
pub fn ns_per_tick(clock: &ClockCalibration) -> f64 {
    if clock.ticks_per_sec.is_finite() && clock.ticks_per_sec > 0.0 {
        1e9 / clock.ticks_per_sec
    } else {
        1.0
    }
}

/// What one read of the clock costs, ns, as the rank file's header records it (0: not recorded).
pub fn read_ns(clock: &ClockCalibration) -> f64 {
    f64::from(clock.read_ticks) * ns_per_tick(clock)
}

/// Samples taken within this long of each other measure the same offset (drift between hosts is
/// parts per million: under 0.1 µs here) and are combined into one knot.
const KNOT_WINDOW_NS: f64 = 10e6;

/// A sample whose round trip is this many times the median one waited somewhere (a descheduled
/// rank, a busy link): its error bound is loose, and it is dropped when better ones exist.
const RTT_OUTLIER_FACTOR: f64 = 4.0;

/// The host clocks of all ranks: ranks of one host (same host name and clock source; a virtual
/// clock is never shared) get one calibration, one base tick and one offset function. Rank 0's
/// host is the global clock itself, so its offset is exactly 0; other hosts get the offsets their
/// ranks measured, weighted by round trip, outliers rejected, converted to the host's calibration.
pub fn align_clocks(metas: &mut [RankMeta]) {
    // (host and clock source, or none when the clock is the rank's alone; members)
    type Group = (Option<(String, ClockSource)>, Vec<usize>);
    let mut groups: Vec<Group> = Vec::new();
    // By key, not by a search of the groups: one group per rank (no host recorded) made that
    // quadratic in the ranks.
    let mut by_key: HashMap<(String, ClockSource), usize> = HashMap::new();
    for (i, meta) in metas.iter().enumerate() {
        let key = meta
            .host
            .clone()
            .filter(|_| meta.clock.source != ClockSource::Virtual)
            .map(|h| (h, meta.clock.source));
        match key.as_ref().and_then(|k| by_key.get(k)) {
            Some(&g) => groups[g].1.push(i),
            None => {
                if let Some(k) = &key {
                    by_key.insert(k.clone(), groups.len());
                }
                groups.push((key, vec![i]));
            }
        }
    }
    let reference = |members: &[usize]| {
        let r = *members
            .iter()
            .min_by_key(|&&i| metas[i].rank)
            .expect("a group has a member");
        let base_tick = members
            .iter()
            .map(|&i| metas[i].clock.tick_at_epoch)
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(0);
        (ns_per_tick(&metas[r].clock), base_tick, metas[r].rank)
    };
    // The epoch is the global clock at the base of the host that holds rank 0 (or the lowest
    // rank), so that host's times need no floating-point base at all.
    let refs: Vec<(f64, u64, u32)> = groups.iter().map(|(_, m)| reference(m)).collect();
    let Some(epoch_ns) = refs
        .iter()
        .copied()
        .min_by_key(|r| r.2)
        .map(|(npt, base, _)| (base as f64 * npt) as u64)
    else {
        return;
    };
    for (g, (_, members)) in groups.iter().enumerate() {
        let (npt, base_tick, _) = refs[g];
        let mut aligned = AlignedClock {
            epoch_ns,
            ns_per_tick: npt,
            base_tick,
            base_ns: if (base_tick as f64 * npt) as u64 == epoch_ns {
                0.0
            } else {
                base_tick as f64 * npt - epoch_ns as f64
            },
            group: g as u32,
            ..Default::default()
        };
        if !members.iter().any(|&i| metas[i].rank == 0) {
            // Each rank measured rank 0's clock minus its own local ns; in the host's calibration
            // that is the same quantity plus the difference of the two conversions at that tick.
            let samples: Vec<Sample> = members
                .iter()
                .flat_map(|&i| {
                    let own = ns_per_tick(&metas[i].clock);
                    metas[i].samples.iter().map(move |s| Sample {
                        tick: s.local,
                        offset: s.offset_ns + s.local as f64 * (own - npt),
                        rtt: s.rtt_ns,
                    })
                })
                .collect();
            fit_offsets(samples, npt, &mut aligned);
        }
        for &i in members {
            metas[i].aligned = Some(aligned.clone());
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    tick: u64,
    offset: f64,
    rtt: f64,
}

impl Sample {
    /// The true offset lies within this of the measured one.
    fn bound(&self) -> f64 {
        self.rtt.max(0.0) / 2.0
    }
    /// Weight of a measurement with this error bound (inverse variance, a floor so an exchange
    /// reported as instantaneous cannot take all the weight by division by zero).
    fn weight(&self) -> f64 {
        1.0 / self.bound().max(1.0).powi(2)
    }
}

/// Fits `aligned`'s knots, drift and uncertainty to `samples` (one host's, in its calibration).
fn fit_offsets(mut samples: Vec<Sample>, npt: f64, aligned: &mut AlignedClock) {
    samples.retain(|s| s.offset.is_finite() && s.rtt.is_finite());
    if samples.is_empty() {
        return;
    }
    let mut rtts: Vec<f64> = samples.iter().map(|s| s.rtt.max(0.0)).collect();
    rtts.sort_by(f64::total_cmp);
    let median = rtts[rtts.len() / 2];
    if median > 0.0 {
        samples.retain(|s| s.rtt <= RTT_OUTLIER_FACTOR * median);
    }
    samples.sort_by_key(|s| s.tick);
    let window = (KNOT_WINDOW_NS / npt.max(f64::MIN_POSITIVE)) as u64;
    let base = aligned.base_tick;
    let rel = |t: u64| t.wrapping_sub(base) as i64 as f64;
    let mut knots: Vec<(u64, f64, f64, f64)> = Vec::new(); // tick, offset, weight, bound
    let mut i = 0;
    while i < samples.len() {
        let mut j = i + 1;
        while j < samples.len() && samples[j].tick - samples[i].tick <= window {
            j += 1;
        }
        let cluster = &samples[i..j];
        // Every measurement brackets the true offset within its bound: one whose bracket misses
        // the tightest measurement's is wrong, not just imprecise.
        let best = *cluster
            .iter()
            .min_by(|a, b| a.rtt.total_cmp(&b.rtt))
            .expect("a cluster has a sample");
        let consistent = |s: &Sample| (s.offset - best.offset).abs() <= s.bound() + best.bound();
        let kept: Vec<Sample> = cluster.iter().copied().filter(consistent).collect();
        push_knot(&mut knots, &kept, base);
        // As precise as the best yet disagreeing with it: the offset moved (fast drift), a knot
        // of its own. Less precise and disagreeing: an outlier, dropped.
        for s in cluster
            .iter()
            .filter(|s| !consistent(s) && s.bound() <= best.bound())
        {
            push_knot(&mut knots, std::slice::from_ref(s), base);
        }
        i = j;
    }
    knots.sort_by_key(|k| k.0);
    // Rounding may land two knots on one tick: keep the better one.
    knots.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            if later.2 > earlier.2 {
                *earlier = *later;
            }
            true
        } else {
            false
        }
    });
    if knots.len() >= 2 {
        let w: f64 = knots.iter().map(|k| k.2).sum();
        let mx = knots.iter().map(|k| rel(k.0) * k.2).sum::<f64>() / w;
        let my = knots.iter().map(|k| k.1 * k.2).sum::<f64>() / w;
        let sxx: f64 = knots.iter().map(|k| k.2 * (rel(k.0) - mx).powi(2)).sum();
        let sxy: f64 = knots
            .iter()
            .map(|k| k.2 * (rel(k.0) - mx) * (k.1 - my))
            .sum();
        if sxx > 0.0 {
            aligned.drift = sxy / sxx;
        }
    }
    aligned.uncertainty_ns = knots.iter().map(|k| k.3).fold(0.0, f64::max);
    aligned.knots = knots.iter().map(|k| (k.0, k.1)).collect();
}

/// One knot from samples that measured the same offset: their weighted mean.
fn push_knot(knots: &mut Vec<(u64, f64, f64, f64)>, kept: &[Sample], base: u64) {
    let rel = |t: u64| t.wrapping_sub(base) as i64 as f64;
    let w: f64 = kept.iter().map(Sample::weight).sum();
    if kept.is_empty() || w <= 0.0 {
        return;
    }
    let offset = kept.iter().map(|s| s.offset * s.weight()).sum::<f64>() / w;
    let tick_rel = kept.iter().map(|s| rel(s.tick) * s.weight()).sum::<f64>() / w;
    let tick = base.wrapping_add(tick_rel.round() as i64 as u64);
    let bound = kept.iter().map(Sample::bound).fold(f64::INFINITY, f64::min);
    knots.push((tick, offset, w, bound));
}

impl AlignedClock {
    /// A rank on its own: its calibration and its samples as they are.
    pub fn own(meta: &RankMeta) -> AlignedClock {
        let npt = ns_per_tick(&meta.clock);
        let mut aligned = AlignedClock {
            ns_per_tick: npt,
            group: u32::MAX - meta.rank,
            ..Default::default()
        };
        let samples = meta
            .samples
            .iter()
            .map(|s| Sample {
                tick: s.local,
                offset: s.offset_ns,
                rtt: s.rtt_ns,
            })
            .collect();
        fit_offsets(samples, npt, &mut aligned);
        aligned
    }
}

/// Maps one rank's ticks to the global clock, with or without its suspensions.
#[derive(Clone, Debug)]
pub struct TimeMap {
    epoch_ns: u64,
    ns_per_tick: f64,
    base_tick: u64,
    base_ns: f64,
    sample_at: Vec<u64>,
    sample_off: Vec<f64>,
    /// Offset change per tick between sample k and k+1.
    slope: Vec<f64>,
    /// Offset change per tick outside the samples.
    drift: f64,
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

/// `b − a` in ticks, exact in integers, then as f64.
fn tick_diff(b: u64, a: u64) -> f64 {
    b.wrapping_sub(a) as i64 as f64
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
        let aligned = meta
            .aligned
            .clone()
            .unwrap_or_else(|| AlignedClock::own(meta));
        let slope = aligned
            .knots
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / tick_diff(w[1].0, w[0].0))
            .collect();
        let mut map = TimeMap {
            epoch_ns: aligned.epoch_ns,
            ns_per_tick: aligned.ns_per_tick,
            base_tick: aligned.base_tick,
            base_ns: aligned.base_ns,
            sample_at: aligned.knots.iter().map(|s| s.0).collect(),
            sample_off: aligned.knots.iter().map(|s| s.1).collect(),
            slope,
            drift: aligned.drift,
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

    /// What every time this map returns is relative to (the same for all ranks of a trace): an
    /// absolute global time is `epoch_ns() + round(t)`.
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// An absolute global time from one of this map's times (saturating at 0).
    pub fn absolute(&self, t: f64) -> u64 {
        let rounded = floor(t + 0.5);
        if rounded >= 0.0 {
            self.epoch_ns.saturating_add(rounded as u64)
        } else {
            self.epoch_ns.saturating_sub((-rounded) as u64)
        }
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
            0 => self.sample_off[0] + self.drift * tick_diff(t, self.sample_at[0]),
            k if k == n => {
                self.sample_off[n - 1] + self.drift * tick_diff(t, self.sample_at[n - 1])
            }
            k => self.sample_off[k - 1] + self.slope[k - 1] * tick_diff(t, self.sample_at[k - 1]),
        }
    }

    /// Tick `t` in the global clock (rank 0's local nanoseconds), relative to [`Self::epoch_ns`].
    pub fn global_ns(&self, t: u64, cur: &mut MapCursor) -> f64 {
        self.base_ns + tick_diff(t, self.base_tick) * self.ns_per_tick + self.offset_ns(t, cur)
    }

    /// The smallest and largest [`Self::global_ns`] of any tick in `[a, b]`: the map is linear
    /// between clock samples, so they lie at `a`, `b` or a sample between them; however the
    /// offsets drift, a tick inside the range never maps outside these.
    pub fn global_range(&self, a: u64, b: u64) -> (f64, f64) {
        let (a, b) = (a.min(b), a.max(b));
        let mut cur = MapCursor::default();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let first = self.sample_at.partition_point(|&s| s <= a);
        let inner = self.sample_at[first..].iter().take_while(|&&s| s < b);
        for t in [a, b].into_iter().chain(inner.copied()) {
            let g = self.global_ns(t, &mut cur);
            lo = lo.min(g);
            hi = hi.max(g);
        }
        (lo, hi)
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

/// From 2^52 on, every f64 is an integer.
const ALL_INTEGERS_FROM: f64 = 4_503_599_627_370_496.0;

/// Equal to `x.floor()` (a zero's sign aside), without the library call that `f64::floor` is on
/// a target without SSE4.1 (the default x86-64 one): mapping calls it for every time of every
/// event.
#[inline]
pub fn floor(x: f64) -> f64 {
    // Large values are integers already; NaN and the infinities stay as they are.
    if x.abs() >= ALL_INTEGERS_FROM || x.is_nan() {
        return x;
    }
    let truncated = x as i64 as f64;
    if truncated > x {
        truncated - 1.0
    } else {
        truncated
    }
}

/// Equal to `x.round()` (halves away from zero; a zero's sign aside), without the library call
/// (see [`floor`]).
#[inline]
pub fn round(x: f64) -> f64 {
    if x.abs() >= ALL_INTEGERS_FROM || x.is_nan() {
        return x;
    }
    let truncated = x as i64 as f64;
    // Exact: `x` and its integer part share an exponent range where the difference is exact.
    let fraction = x - truncated;
    if fraction >= 0.5 {
        truncated + 1.0
    } else if fraction <= -0.5 {
        truncated - 1.0
    } else {
        truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::{ClockSample, SampleKind, Suspension};

    #[test]
    fn floor_and_round_equal_the_library_ones() {
        let mut special = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4_503_599_627_370_495.5,
            -4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9.3e18,
            -9.3e18,
            1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::EPSILON,
        ];
        // Random values over every magnitude, from a fixed seed.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f64::from_bits(state);
            if x.is_finite() {
                special.push(x);
                special.push((state >> 11) as f64 / 1024.0 - 4e12);
            }
        }
        for x in special {
            assert_eq!(floor(x), x.floor(), "floor({x:e})");
            assert_eq!(round(x), x.round(), "round({x:e})");
        }
        assert!(floor(f64::NAN).is_nan() && round(f64::NAN).is_nan());
    }

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
    fn offsets_interpolate_between_samples_and_follow_the_drift_outside() {
        let m = TimeMap::new(&meta(&[(100_000_000, 10.0), (200_000_000, 30.0)], &[]));
        let mut c = MapCursor::default();
        let near = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(near(m.global_ns(150_000_000, &mut c), 150_000_020.0));
        // Past the last sample the clocks keep drifting apart at the rate measured between them.
        assert!(near(m.global_ns(300_000_000, &mut c), 300_000_050.0));
        assert!(near(m.global_ns(50_000_000, &mut c), 50_000_000.0));
        // Going back in time must give the same answers as going forward.
        assert!(near(m.global_ns(150_000_000, &mut c), 150_000_020.0));
    }

    fn ranked(rank: u32, host: &str, tps: f64, samples: &[(u64, f64, f64)]) -> RankMeta {
        RankMeta {
            rank,
            host: Some(host.into()),
            clock: ClockCalibration {
                ticks_per_sec: tps,
                tick_at_epoch: 30_000_000_000_000,
                ..Default::default()
            },
            samples: samples
                .iter()
                .map(|&(local, offset_ns, rtt_ns)| ClockSample {
                    local,
                    offset_ns,
                    rtt_ns,
                    when: SampleKind::Init,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// As recorded on one host: each rank calibrated its own ticks per second, so converted from
    /// boot their local ns differ by ~0.5 ms, and that is what the exchange measured, ± 2 µs.
    #[test]
    fn ranks_of_one_host_share_its_clock_exactly() {
        let t = 30_000_000_000_000u64;
        let mut metas = vec![
            ranked(0, "a", 3.0e9, &[(t, 0.0, 0.0)]),
            ranked(1, "a", 3.0e9 * (1.0 + 5e-8), &[(t, 500_123.0, 4000.0)]),
            ranked(2, "a", 3.0e9 * (1.0 - 2e-8), &[(t + 9, -200_456.0, 3500.0)]),
        ];
        align_clocks(&mut metas);
        let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
        for tick in [t - 1_000_000, t, t + 3_000_000_000] {
            let g: Vec<u64> = maps
                .iter()
                .map(|m| m.absolute(m.global_ns(tick, &mut MapCursor::default())))
                .collect();
            assert_eq!(g[0], g[1]);
            assert_eq!(g[0], g[2]);
        }
        // Rank 0's clock is the global one.
        let m = &maps[0];
        let g = m.absolute(m.global_ns(t + 3_000_000_000, &mut MapCursor::default()));
        assert_eq!(g, ((t + 3_000_000_000) as f64 / 3.0) as u64);
        assert_eq!(metas[1].aligned.as_ref().unwrap().uncertainty_ns, 0.0);
    }

    /// Another host's offset comes from all its ranks' samples: the long round trip (a rank
    /// descheduled during the exchange) is dropped, the others weighted by their round trips.
    #[test]
    fn another_hosts_offset_is_weighted_by_round_trip_without_outliers() {
        let t = 30_000_000_000_000u64;
        let tps = 1e9;
        let mut metas = vec![
            ranked(0, "a", tps, &[(t, 0.0, 0.0)]),
            ranked(1, "b", tps, &[(t, 1000.0, 2000.0), (t + 5, 1600.0, 8000.0)]),
            ranked(
                2,
                "b",
                tps,
                &[(t + 10, 1100.0, 1000.0), (t + 20, 90_000.0, 400_000.0)],
            ),
        ];
        align_clocks(&mut metas);
        let b = metas[1].aligned.clone().unwrap();
        assert_eq!(metas[2].aligned.as_ref().unwrap(), &b);
        assert_eq!(b.knots.len(), 1);
        // Weights 1/1000² and 1/500² (half the round trips), and the 8 µs sample's error bound
        // covers the best one's, so it stays with weight 1/4000².
        let (w1, w2, w3) = (1.0 / 1e6, 1.0 / 25e4, 1.0 / 16e6);
        let expect = (1000.0 * w1 + 1100.0 * w2 + 1600.0 * w3) / (w1 + w2 + w3);
        assert!((b.knots[0].1 - expect).abs() < 1e-6, "{b:?}");
        assert_eq!(b.uncertainty_ns, 500.0);
        let m = TimeMap::new(&metas[2]);
        let g = m.absolute(m.global_ns(t + 1_000_000, &mut MapCursor::default()));
        assert_eq!(g, t + 1_000_000 + expect.round() as u64);
    }

    /// Ticks past 2^53 (a month of TSC uptime) still map one tick apart.
    #[test]
    fn huge_ticks_keep_their_resolution() {
        let t = (1u64 << 60) + 1;
        let mut metas = vec![
            ranked(0, "a", 1e9, &[(t, 0.0, 0.0)]),
            ranked(1, "a", 1e9, &[]),
        ];
        for m in &mut metas {
            m.clock.tick_at_epoch = t;
        }
        align_clocks(&mut metas);
        let m = TimeMap::new(&metas[1]);
        let mut c = MapCursor::default();
        let a = m.absolute(m.global_ns(t + 1, &mut c));
        let b = m.absolute(m.global_ns(t + 2, &mut c));
        assert_eq!(b - a, 1);
        // The epoch itself is the base in f64: exact to its precision (256 ns at 2^60).
        assert!(a.abs_diff(t + 1) <= 256, "{a} vs {}", t + 1);
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
