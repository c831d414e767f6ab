//! A synthetic event stream shaped like a real MPI trace, for tests, benchmarks and demos.
//!
//! It models one rank of a 2-D periodic halo exchange: every iteration computes for a few
//! microseconds (with jitter), posts one `Irecv` and one `Isend` per neighbour, waits for all of
//! them, and ends with an 8-byte `Allreduce`. Timestamps are ticks of a ~2 GHz clock, call
//! durations and the recorder's own cost vary the way measured ones do, and request handles are
//! recycled LIFO like an MPI library's free list. Deterministic for a given seed.

use crate::model::*;
use crate::raw::RawBuf;

/// Function ids used by the generator (the recorder's table may number them differently; the
/// trace carries the names in [`Event::FunctionDef`]).
pub const FUNC_IRECV: FunctionId = 41;
pub const FUNC_ISEND: FunctionId = 42;
pub const FUNC_WAITALL: FunctionId = 77;
pub const FUNC_ALLREDUCE: FunctionId = 3;

/// Parameters of the synthetic halo exchange.
#[derive(Clone, Debug)]
pub struct HaloConfig {
    pub world_size: u32,
    pub rank: u32,
    pub iterations: u64,
    /// Ticks per second of the simulated clock.
    pub ticks_per_sec: f64,
    /// Mean compute time between exchanges, and its standard deviation, in ns.
    pub compute_ns: f64,
    pub compute_jitter_ns: f64,
    /// Halo message sizes along x and y, in bytes.
    pub halo_bytes: [u64; 2],
    pub seed: u64,
}

impl Default for HaloConfig {
    fn default() -> Self {
        HaloConfig {
            world_size: 16,
            rank: 5,
            iterations: 10_000,
            ticks_per_sec: 2.0e9,
            compute_ns: 5_000.0,
            compute_jitter_ns: 600.0,
            halo_bytes: [8 * 256, 8 * 512],
            seed: 0x5eed,
        }
    }
}

/// A small deterministic generator (splitmix64); a dependency would be overkill for test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Approximately normal (sum of four uniforms), mean 0, standard deviation 1.
    pub fn normalish(&mut self) -> f64 {
        let s: f64 = (0..4).map(|_| self.unit()).sum();
        (s - 2.0) * 3.0f64.sqrt()
    }
    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

struct Clock {
    now: u64,
    ticks_per_ns: f64,
}

impl Clock {
    fn advance_ns(&mut self, ns: f64) -> u64 {
        self.now += (ns.max(0.0) * self.ticks_per_ns).round() as u64;
        self.now
    }
}

/// Generates the stream and hands every event to `sink`, in order.
pub fn generate(cfg: &HaloConfig, mut sink: impl FnMut(&Event)) {
    let mut rng = Rng::new(cfg.seed ^ (cfg.rank as u64).wrapping_mul(0x1000_0001));
    let side = (cfg.world_size as f64).sqrt().floor().max(1.0) as u32;
    let (x, y) = (cfg.rank % side, cfg.rank / side);
    let rows = cfg.world_size.div_ceil(side).max(1);
    let at = |xx: u32, yy: u32| ((yy % rows) * side + (xx % side)).min(cfg.world_size - 1) as i32;
    // left, right, down, up; the tag says which face the message is for.
    let neighbours = [
        (at(x + side - 1, y), 0, cfg.halo_bytes[0]),
        (at(x + 1, y), 1, cfg.halo_bytes[0]),
        (at(x, y + rows - 1), 2, cfg.halo_bytes[1]),
        (at(x, y + 1), 3, cfg.halo_bytes[1]),
    ];
    let mut clock = Clock {
        now: 1_734_000_000_000 + (rng.next_u64() % 1_000_000),
        ticks_per_ns: cfg.ticks_per_sec / 1e9,
    };
    for (id, name) in [
        (FUNC_IRECV, "MPI_Irecv"),
        (FUNC_ISEND, "MPI_Isend"),
        (FUNC_WAITALL, "MPI_Waitall"),
        (FUNC_ALLREDUCE, "MPI_Allreduce"),
    ] {
        sink(&Event::FunctionDef {
            id,
            name: name.to_owned(),
        });
    }
    sink(&Event::CommDef {
        id: 0,
        members: (0..cfg.world_size).collect(),
    });
    sink(&Event::Marker(Marker::InitDone { time: clock.now }));

    // Request handles look like pointers into the library's request pool, reused LIFO.
    let mut free_list: Vec<u64> = (0..16u64)
        .rev()
        .map(|i| 0x55d4_c3a0_1000 + i * 0x180)
        .collect();
    let mut outstanding: Vec<(u64, i32, i32, u64, bool)> = Vec::with_capacity(8);
    // The recorder's own cost per event: two clock reads and the append, ~50-70 ns.
    let cost =
        |rng: &mut Rng, clock: &Clock| ((55.0 + 6.0 * rng.normalish()) * clock.ticks_per_ns) as u32;
    let gap = |rng: &mut Rng| 40.0 + 8.0 * rng.normalish().abs();

    for _ in 0..cfg.iterations {
        clock.advance_ns(
            cfg.compute_ns + cfg.compute_jitter_ns * rng.normalish() + rng.exponential(150.0),
        );
        for (send, func) in [(false, FUNC_IRECV), (true, FUNC_ISEND)] {
            for &(peer, tag, bytes) in &neighbours {
                let start = clock.now;
                let dur = if send {
                    250.0 + bytes as f64 / 12.0
                } else {
                    120.0
                } + 25.0 * rng.normalish().abs();
                let end = clock.advance_ns(dur);
                let request = free_list.pop().unwrap_or(0x55d4_c3a0_0000);
                outstanding.push((request, peer, tag, bytes, send));
                sink(&Event::Call(MpiCall {
                    func,
                    start,
                    end,
                    comm: 0,
                    peer,
                    tag,
                    bytes,
                    root: NO_RANK,
                    request,
                    cost: cost(&mut rng, &clock),
                    recv_bytes: 0,
                    site: NO_SITE,
                }));
                clock.advance_ns(gap(&mut rng));
            }
        }
        let start = clock.now;
        let end = clock.advance_ns(800.0 + rng.exponential(2_500.0));
        sink(&Event::Call(MpiCall {
            func: FUNC_WAITALL,
            start,
            end,
            comm: 0,
            peer: NO_RANK,
            tag: NO_TAG,
            bytes: 0,
            root: NO_RANK,
            request: NO_REQUEST,
            cost: cost(&mut rng, &clock) + outstanding.len() as u32 * 20,
            recv_bytes: 0,
            site: NO_SITE,
        }));
        for (request, peer, tag, bytes, send) in outstanding.drain(..) {
            sink(&Event::Completion(Completion {
                request,
                source: if send { NO_RANK } else { peer },
                tag: if send { NO_TAG } else { tag },
                bytes,
                cancelled: false,
            }));
            free_list.push(request);
        }
        clock.advance_ns(gap(&mut rng));
        let start = clock.now;
        let end = clock.advance_ns(2_500.0 + rng.exponential(1_500.0));
        sink(&Event::Call(MpiCall {
            func: FUNC_ALLREDUCE,
            start,
            end,
            comm: 0,
            peer: NO_RANK,
            tag: NO_TAG,
            bytes: 8,
            root: NO_RANK,
            request: NO_REQUEST,
            cost: cost(&mut rng, &clock),
            recv_bytes: 8,
            site: NO_SITE,
        }));
    }
    sink(&Event::Marker(Marker::FinalizeStart {
        time: clock.advance_ns(100.0),
    }));
}

/// The stream appended to a fresh [`RawBuf`].
pub fn raw_buf(cfg: &HaloConfig) -> RawBuf {
    let mut buf = RawBuf::new();
    generate(cfg, |e| buf.push_event(e));
    buf
}

/// Rank 1 of a 4-rank halo, `iterations` long: the crate's unit tests' usual stream.
#[cfg(test)]
pub(crate) fn rank_of_four(iterations: u64) -> Vec<Event> {
    events(&HaloConfig {
        world_size: 4,
        rank: 1,
        iterations,
        ..HaloConfig::default()
    })
}

/// The stream as events.
pub fn events(cfg: &HaloConfig) -> Vec<Event> {
    let mut out = Vec::new();
    generate(cfg, |e| out.push(e.clone()));
    out
}
