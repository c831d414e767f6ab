//! The models the simulated ranks run in: random numbers, clocks, network, disk, application and
//! memory. Every default comes from the paper (paper-digest.md) or is marked as an assumption.

use serde::Serialize;

/// SplitMix64: small, fast, and good enough for simulation noise. Deterministic per seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in [0, 1) that depends only on its keys, so that runs of different modes see the
/// same application (common random numbers): the untraced run and the traced one compute alike.
pub fn keyed_uniform(seed: u64, a: u64, b: u64, stream: u64) -> f64 {
    let h = mix(seed ^ mix(a.wrapping_mul(0x1000_0000_01B3) ^ mix(b ^ (stream << 56))));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// Clocks: each rank's offset and drift against true time, and the noise of one reading.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ClockModel {
    /// Standard deviation of the initial offsets, ns.
    pub offset_sd_ns: f64,
    /// Standard deviation of the drift, parts per million. Assumption: 100 ppm makes Table 1's
    /// no-re-measurement penalty (~4 s over 520 suspensions) appear.
    pub drift_sd_ppm: f64,
    /// A reading is off by up to this much either way (the paper: MPI_Wtime error ≈ 2 µs).
    pub read_jitter_ns: f64,
}

impl Default for ClockModel {
    fn default() -> Self {
        ClockModel {
            offset_sd_ns: 1.0e6,
            drift_sd_ppm: 100.0,
            read_jitter_ns: 1_000.0,
        }
    }
}

/// Network: one-way time of a small message, and the slowdown right after a disk write.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct NetModel {
    /// Fixed part of a one-way message time (also the per-hop cost of trees and collectives), ns.
    pub latency_ns: f64,
    /// Mean of the exponential extra delay on top, ns.
    pub jitter_ns: f64,
    /// Messages a rank sends within this long after its disk write ended may be slow (the paper's
    /// unexplained post-write slowdown). 0 disables.
    pub post_write_window_ns: u64,
    /// Probability that such a message is slow.
    pub post_write_probability: f64,
    /// A slow message takes up to this much longer (uniform), ns. The paper saw up to 20 ms.
    pub post_write_extra_ns: f64,
    /// Processor time of starting or completing a nonblocking collective (the split decision's
    /// `MPI_Iallreduce` and `MPI_Wait`), ns; independent of P, since the reduction's messages
    /// progress in the background.
    pub nonblocking_call_ns: f64,
}

impl Default for NetModel {
    fn default() -> Self {
        NetModel {
            latency_ns: 15_000.0,
            jitter_ns: 2_000.0,
            post_write_window_ns: 1_000_000_000,
            post_write_probability: 0.2,
            post_write_extra_ns: 10_000_000.0,
            nonblocking_call_ns: 1_000.0,
        }
    }
}

impl NetModel {
    pub fn sample_latency(&self, rng: &mut Rng, after_write: bool) -> u64 {
        let mut t = self.latency_ns;
        if self.jitter_ns > 0.0 {
            t += rng.exponential(self.jitter_ns);
        }
        if after_write && rng.uniform() < self.post_write_probability {
            t += rng.uniform() * self.post_write_extra_ns;
        }
        t.round().max(0.0) as u64
    }
}

/// Disks: per-rank bandwidth with run-to-run variability, optionally capped by a shared file system.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct DiskModel {
    /// Nominal bandwidth of each rank's disk, MiB/s (the paper: 33 MB/s IDE disks).
    pub mbps: f64,
    /// Each suspension's writes achieve a uniformly drawn fraction of the nominal bandwidth. The
    /// defaults make 512 MiB take 25–36 s on a 33 MiB/s disk, as the paper measured.
    pub efficiency_lo: f64,
    pub efficiency_hi: f64,
    /// Ranks of one suspension differ by up to this fraction around its common efficiency
    /// (assumption: 5 %).
    pub rank_variation: f64,
    /// Cap on the aggregate bandwidth of all ranks (shared file system), MiB/s; `None`: local disks.
    pub shared_mbps: Option<f64>,
}

impl Default for DiskModel {
    fn default() -> Self {
        DiskModel {
            mbps: 33.0,
            efficiency_lo: 512.0 / (33.0 * 36.0),
            efficiency_hi: 512.0 / (33.0 * 25.0),
            rank_variation: 0.05,
            shared_mbps: None,
        }
    }
}

/// The application: compute per iteration with imbalance, one barrier per iteration, trace bytes
/// per iteration and their recording cost.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AppModel {
    pub iterations: u64,
    /// Untraced run time; each iteration's slowest rank computes `untraced_s / iterations`.
    pub untraced_s: f64,
    /// Ranks compute up to this fraction less than the slowest (uniform), per iteration.
    pub imbalance: f64,
    /// Ranks leave a barrier up to this much after the first one (uniform), ns.
    pub barrier_exit_spread_ns: f64,
    /// Trace bytes each rank records over the whole run (the paper's M).
    pub trace_bytes: u64,
    /// Framing on top of `trace_bytes`. Assumption: Table 1 shows a flush at M = S = 512 MB, so the
    /// stored trace must slightly exceed M.
    pub trace_overhead: f64,
    /// Recording speed (the direct perturbation DP), MiB/s. Calibrated on Table 1: T grows by about
    /// 0.9 s per 256 MB of trace without swap.
    pub append_mbps: f64,
}

impl Default for AppModel {
    fn default() -> Self {
        AppModel {
            iterations: 520,
            untraced_s: 58.0,
            imbalance: 0.05,
            barrier_exit_spread_ns: 5_000.0,
            trace_bytes: 256 << 20,
            trace_overhead: 0.02,
            append_mbps: 285.0,
        }
    }
}

impl AppModel {
    pub fn bytes_per_iteration(&self) -> u64 {
        ((self.trace_bytes as f64 * (1.0 + self.trace_overhead)) / self.iterations.max(1) as f64)
            .round() as u64
    }
}

/// Memory and swap: when program + trace exceed the usable RAM, every iteration pages the excess
/// back in (a fraction `touch` of it) at the swap disk's speed.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemoryModel {
    /// Usable RAM per rank, MiB (2 GB nodes minus what the OS keeps: an assumption, 150 MiB).
    pub ram_mb: f64,
    /// Program memory without the trace, MiB (the paper: 680 MB plus ~130 MB of tracer buffers).
    pub program_mb: f64,
    pub swap_mbps: f64,
    /// Share of the swapped-out memory touched per iteration (calibrated on Table 1's T column).
    pub touch: f64,
    /// The penalty of each rank and iteration is scaled by a uniform draw in [1 − v, 1 + v]:
    /// swap hits ranks at different moments (the indirect perturbation the paper is about).
    pub variability: f64,
}

impl Default for MemoryModel {
    fn default() -> Self {
        MemoryModel {
            ram_mb: 2048.0 - 150.0,
            program_mb: 680.0 + 130.0,
            swap_mbps: 33.0,
            touch: 0.11,
            variability: 0.5,
        }
    }
}

impl MemoryModel {
    /// Extra time of one iteration for a rank holding `buffer_bytes` of trace, before noise, ns.
    pub fn penalty_ns(&self, buffer_bytes: u64) -> f64 {
        let resident_mb = self.program_mb + buffer_bytes as f64 / (1u64 << 20) as f64;
        let excess_mb = (resident_mb - self.ram_mb).max(0.0);
        excess_mb * self.touch / self.swap_mbps * 1e9
    }
}
