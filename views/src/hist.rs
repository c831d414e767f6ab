//! A fixed-size log histogram of non-negative values (nanoseconds): quantiles of any number of
//! values in constant memory, exact below 128 and within 1/64 (1.6 %) above.

use crate::info::Quantiles;

const EXACT: usize = 128;
const SUB_BITS: u32 = 6;
const BUCKETS: usize = EXACT + (64 - 7) * (1 << SUB_BITS);

#[derive(Clone, Debug)]
pub struct LogHistogram {
    counts: Vec<u64>,
    n: u64,
    min: u64,
    max: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            counts: vec![0; BUCKETS],
            n: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < EXACT as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let sub = ((v >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1)) as usize;
    EXACT + (e as usize - 7) * (1 << SUB_BITS) + sub
}

/// The middle of a bucket's value range.
fn value(b: usize) -> f64 {
    if b < EXACT {
        return b as f64;
    }
    let e = (b - EXACT) / (1 << SUB_BITS) + 7;
    let sub = (b - EXACT) % (1 << SUB_BITS);
    let width = 1u64 << (e - SUB_BITS as usize);
    let low = ((1u64 << SUB_BITS) + sub as u64) * width;
    low as f64 + (width as f64 - 1.0) / 2.0
}

impl LogHistogram {
    pub fn add(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// Nearest-rank quantile `q` in [0, 1]; 0 when empty. The top quantile is the exact maximum.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        self.at_rank(((q * self.n as f64).ceil() as u64).clamp(1, self.n))
    }

    /// The `rank`-th smallest value (1-based, clamped to the sample); 0 when empty.
    pub fn at_rank(&self, rank: u64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = rank.clamp(1, self.n);
        if rank == self.n {
            return self.max as f64;
        }
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // Clamped to the extremes, so that a sample of one repeated value is exact.
                return value(b).clamp(self.min as f64, self.max as f64);
            }
        }
        self.max as f64
    }

    /// p50, p99 and max, scaled by `scale` (e.g. 1e-3 for ns → µs).
    pub fn quantiles(&self, scale: f64) -> Quantiles {
        Quantiles {
            p50: self.quantile(0.5) * scale,
            p99: self.quantile(0.99) * scale,
            max: self.max as f64 * scale,
        }
    }
}

/// Values of either sign (ns, rounded to whole ns) in constant memory: negative magnitudes and
/// the rest each in a [`LogHistogram`], with the exact sum for the mean. Needed where a bias
/// must keep its direction (RUN's calls longer or shorter than REF's), which magnitudes lose.
#[derive(Clone, Debug, Default)]
pub struct SignedHistogram {
    negative: LogHistogram,
    positive: LogHistogram,
    sum: f64,
}

impl SignedHistogram {
    pub fn add(&mut self, v: f64) {
        let r = v.round();
        if r < 0.0 {
            self.negative.add((-r) as u64);
        } else {
            self.positive.add(r as u64);
        }
        self.sum += v;
    }

    pub fn len(&self) -> u64 {
        self.negative.len() + self.positive.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The exact mean; 0 when empty.
    pub fn mean(&self) -> f64 {
        let n = self.len();
        if n == 0 { 0.0 } else { self.sum / n as f64 }
    }

    /// Nearest-rank quantile `q` in [0, 1]; 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        let n = self.len();
        if n == 0 {
            return 0.0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let below = self.negative.len();
        if rank <= below {
            // The smallest values are the largest negative magnitudes.
            -self.negative.at_rank(below - rank + 1)
        } else {
            self.positive.at_rank(rank - below)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_exact_for_small_values_and_close_for_large() {
        let mut h = LogHistogram::default();
        for v in 1..=100 {
            h.add(v);
        }
        assert_eq!(h.quantile(0.5), 50.0);
        assert_eq!(h.quantile(0.99), 99.0);
        assert_eq!(h.quantile(1.0), 100.0);
        let mut h = LogHistogram::default();
        for v in 1..=10_000u64 {
            h.add(v * 1_000);
        }
        let p50 = h.quantile(0.5);
        assert!((p50 - 5_000_000.0).abs() / 5_000_000.0 < 0.016, "{p50}");
        assert_eq!(h.quantile(1.0), 10_000_000.0);
        for v in [128u64, 129, 1 << 20, u64::MAX] {
            let b = bucket(v);
            assert!(b < BUCKETS);
            let mid = value(b);
            assert!((mid - v as f64).abs() / (v as f64) < 0.016, "{v} -> {mid}");
        }
    }

    #[test]
    fn signed_quantiles_keep_the_direction() {
        let mut h = SignedHistogram::default();
        for v in [-30.0, -20.0, -10.0, 5.0, 7.0] {
            h.add(v);
        }
        assert_eq!(h.quantile(0.0), -30.0);
        assert_eq!(h.quantile(0.4), -20.0);
        assert_eq!(h.quantile(0.5), -10.0);
        assert_eq!(h.quantile(0.8), 5.0);
        assert_eq!(h.quantile(1.0), 7.0);
        assert!((h.mean() - (-48.0 / 5.0)).abs() < 1e-12);
        let mut h = SignedHistogram::default();
        for _ in 0..10 {
            h.add(-12_000.0);
        }
        let m = h.quantile(0.5);
        assert!((m + 12_000.0).abs() / 12_000.0 < 0.016, "{m}");
        assert_eq!(SignedHistogram::default().quantile(0.5), 0.0);
    }
}
