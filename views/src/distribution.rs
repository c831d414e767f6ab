//! Comparing two runs' duration *distributions* of one function (the paper's Figure 8: the
//! `MPI_Barrier` durations of the original run against those of the offload run).
//!
//! Call-by-call deltas (`compare`'s `duration_delta_us`) mix two things: how well reconstruction
//! removed the perturbation, and the run-to-run jitter of each individual call, which no tool can
//! remove. Comparing the sorted durations (a Q–Q pairing: the i-th shortest barrier of one run
//! against the i-th shortest of the other) keeps the first and drops most of the second.
//!
//! Durations are kept as counts per 100 ns step, so memory grows with the number of distinct
//! durations (bounded by the spread of the values, not by the number of calls) and the 10 µs
//! criterion is judged to within 0.1 µs.

use std::collections::BTreeMap;

/// Resolution of the kept durations.
pub const STEP_NS: u64 = 100;

#[derive(Clone, Debug, Default)]
pub struct Durations {
    counts: BTreeMap<u64, u64>,
    n: u64,
}

impl Durations {
    pub fn add(&mut self, ns: u64) {
        *self.counts.entry(ns / STEP_NS).or_insert(0) += 1;
        self.n += 1;
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// Share (0..1) of Q–Q pairs of `a` and `b` whose durations differ by at most `limit_ns`.
/// With different counts, the shorter sample is stretched over the longer one's ranks (each of
/// its values then stands for several of the other's); `None` when either side is empty.
pub fn qq_share_within(a: &Durations, b: &Durations, limit_ns: u64) -> Option<f64> {
    qq_share_within_by(a, b, |_| limit_ns)
}

/// As [`qq_share_within`], with a limit that depends on `a`'s duration of each pair (ns), for a
/// tolerance relative to the reference.
pub fn qq_share_within_by(
    a: &Durations,
    b: &Durations,
    limit_ns: impl Fn(u64) -> u64,
) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    // Walk both sorted multisets in steps of the finer of the two quantile grids: the i-th of
    // `n = max` positions maps to rank floor(i * len / n) of each side.
    let n = a.n.max(b.n);
    let mut ia = a.counts.iter().map(|(&k, &c)| (k, c));
    let mut ib = b.counts.iter().map(|(&k, &c)| (k, c));
    let (mut va, mut ca_end) = ia.next().unwrap_or_default();
    let (mut vb, mut cb_end) = ib.next().unwrap_or_default();
    let mut within = 0u64;
    for i in 0..n {
        let ra = i * a.n / n;
        let rb = i * b.n / n;
        while ra >= ca_end {
            let (k, c) = ia.next().unwrap_or((va, u64::MAX));
            va = k;
            ca_end = ca_end.saturating_add(c);
        }
        while rb >= cb_end {
            let (k, c) = ib.next().unwrap_or((vb, u64::MAX));
            vb = k;
            cb_end = cb_end.saturating_add(c);
        }
        if va.abs_diff(vb) * STEP_NS <= limit_ns(va * STEP_NS) {
            within += 1;
        }
    }
    Some(within as f64 / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(values: impl IntoIterator<Item = u64>) -> Durations {
        let mut d = Durations::default();
        for v in values {
            d.add(v);
        }
        d
    }

    #[test]
    fn identical_distributions_in_any_order_match_fully() {
        let a = of((0..1000).map(|i| i * 7_919 % 50_000_000));
        let b = of((0..1000).rev().map(|i| i * 7_919 % 50_000_000));
        assert_eq!(qq_share_within(&a, &b, 0), Some(1.0));
    }

    #[test]
    fn a_shift_counts_only_where_it_exceeds_the_limit() {
        // Half the values shifted by 5 µs, half by 50 µs: with a 10 µs limit, half are within.
        let base: Vec<u64> = (0..1000).map(|i| 1_000_000 + i * 1_000_000).collect();
        let a = of(base.iter().copied());
        let b = of(base
            .iter()
            .enumerate()
            .map(|(i, v)| if i < 500 { v + 5_000 } else { v + 50_000 }));
        assert_eq!(qq_share_within(&a, &b, 10_000), Some(0.5));
        assert_eq!(qq_share_within(&a, &b, 50_000), Some(1.0));
        assert_eq!(qq_share_within(&a, &b, 4_000), Some(0.0));
    }

    #[test]
    fn unequal_counts_are_compared_quantile_by_quantile() {
        let a = of([10_000, 20_000]);
        let b = of([10_000, 10_000, 20_000, 20_000]);
        assert_eq!(qq_share_within(&a, &b, 0), Some(1.0));
        let c = of([10_000, 10_000, 10_000, 20_000]);
        assert_eq!(qq_share_within(&a, &c, 0), Some(0.75));
        assert_eq!(qq_share_within(&a, &Durations::default(), 0), None);
    }

    #[test]
    fn a_relative_limit_follows_the_reference_duration() {
        // 10 % of 100 µs is 10 µs, of 1 ms 100 µs: a 20 µs shift is outside for the first only.
        let a = of([100_000, 1_000_000]);
        let b = of([120_000, 1_020_000]);
        assert_eq!(qq_share_within_by(&a, &b, |ns| ns / 10), Some(0.5));
    }
}
