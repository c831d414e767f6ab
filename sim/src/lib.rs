//! A virtual-time simulation of the equalised suspension over up to millions of ranks, running the
//! protocol code of the `offload` crate itself ([`offload::Suspender::suspend_async`]) over
//! [`world::SimRank`] transports.
//!
//! One run simulates `iterations` of: every rank computes (with imbalance), records its trace
//! bytes (direct perturbation, and swap when program + trace exceed RAM), enters a barrier, and then
//! calls the protocol right after it, as the recorder does. The application phase is computed
//! directly (it is arithmetic); the protocol phase runs one future per rank in the event-driven
//! [`world::World`]. Baselines are computed alongside from the same random draws: the untraced run
//! and the traced run that keeps everything in memory without swapping (the paper's G+).
//!
//! Built on it: [`studies`] (the paper's Table 1, the scale study to a million ranks) and [`cli`],
//! `evenflush simulate` and the `evenflush-sim` binary.

pub mod cli;
pub mod model;
pub mod studies;
pub mod world;

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use offload::{FlushReport, Held, Mode, Settings, Suspended, Suspender, TransportError};
use serde::Serialize;
use views::info::Quantiles;

use model::{AppModel, ClockModel, DiskModel, MemoryModel, NetModel, Rng, keyed_uniform};
use world::{DiskParams, RankState, SimRank, World, log2_ceil};

/// Everything one simulated run depends on.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub ranks: usize,
    /// The protocol's settings, exactly as the recorder would use them.
    pub settings: Settings,
    /// Every rank's threshold S, in bytes (the recorder's `back::threshold` owns it in a real
    /// run; here, the configuration does).
    pub threshold_bytes: u64,
    /// Record no trace at all (the untraced program; the protocol is not called).
    pub untraced: bool,
    pub app: AppModel,
    pub clock: ClockModel,
    pub net: NetModel,
    pub disk: DiskModel,
    pub memory: MemoryModel,
    /// Apply the swap model (off: memory is unlimited).
    pub swap: bool,
    pub seed: u64,
    /// Keep rank 0's suspension records in [`SimResult::root_records`] (tests).
    pub keep_root_records: bool,
}

impl Default for SimConfig {
    /// The paper's first experiment: 32 ranks, 520 barriers, 58 s untraced, 33 MB/s disks,
    /// dynamic mode with S = 512 MB and its M = 896 MB case.
    fn default() -> Self {
        SimConfig {
            ranks: 32,
            settings: Settings {
                mode: Mode::Dynamic,
                // The paper's m is the mean of the 2·P messages of one measurement: one exchange
                // per rank.
                clock_tries: 1,
                remedy: offload::Remedy::FAITHFUL,
                // The paper's protocol: a blocking decision and a (short) suspension with a
                // sequential clock measurement at every barrier.
                decision: offload::Decision::Blocking,
                clock_scheme: offload::ClockScheme::Sequential,
                ..Settings::default()
            },
            threshold_bytes: 512 << 20,
            untraced: false,
            app: AppModel {
                trace_bytes: 896 << 20,
                ..AppModel::default()
            },
            clock: ClockModel::default(),
            net: NetModel::default(),
            disk: DiskModel::default(),
            memory: MemoryModel::default(),
            swap: true,
            seed: 1,
            keep_root_records: false,
        }
    }
}

/// What one run measured. Times in seconds unless the name says otherwise.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimResult {
    pub ranks: usize,
    pub mode: String,
    pub clock_scheme: String,
    pub trace_mb: f64,
    pub threshold_mb: f64,
    /// End of the traced run (latest rank).
    pub total_s: f64,
    /// The same program untraced.
    pub untraced_s: f64,
    /// Traced, everything kept in memory, no swap: what the reconstruction should recover (G+).
    pub in_memory_s: f64,
    /// The traced run with each rank's recorded suspension durations removed (local clock).
    pub reconstructed_s: f64,
    /// |reconstructed − in_memory| / in_memory.
    pub reconstruction_error: f64,
    pub suspensions: u64,
    pub flushes: u64,
    /// Sum of Z over all suspensions (rank 0's Z; in `local` mode the longest pause).
    pub z_sum_s: f64,
    pub z_mean_ms: f64,
    /// Mean Z of the suspensions that wrote nothing: the protocol's own overhead per suspension
    /// (blocking decision only; the split decision does not suspend without a flush).
    pub z_mean_no_flush_us: f64,
    /// The protocol's cost at a collective that does not flush, µs: per collective, the longest
    /// time a rank spent in the protocol (a Z without a flush, or a split decision's wait), over
    /// every collective of the run without a flush.
    pub no_flush_overhead_us: Quantiles,
    /// Share of Z spent measuring clock offsets (the slowest rank's measurement time / Z).
    pub clock_sync_share: f64,
    /// Sum of the clock-measurement time at `Suspender::init`, included in `total_s`.
    pub init_s: f64,
    /// Per suspension: rank 0's Z, µs.
    pub z_us: Quantiles,
    /// Per suspension: longest minus shortest suspension (true time) over ranks, µs.
    pub duration_spread_us: Quantiles,
    /// Per suspension: latest minus earliest resume instant over ranks (true time), µs.
    pub resume_spread_us: Quantiles,
    /// Per suspension: the largest overshoot (resumed later than t + Z), µs.
    pub overshoot_us: Quantiles,
    /// Share of (rank, suspension) pairs that overshot by more than 10 µs.
    pub late_share: f64,
    /// Simulator work: wake-ups processed, and the wall-clock time it took.
    pub events: u64,
    pub wall_s: f64,
    /// Rank 0's records, when [`SimConfig::keep_root_records`] is set.
    #[serde(skip)]
    pub root_records: Vec<format::Suspension>,
}

const NS: f64 = 1e9;

/// Per-suspension figures gathered as ranks finish.
struct Round {
    min_end: u64,
    max_end: u64,
    min_duration: u64,
    max_duration: u64,
    max_overshoot: u64,
    late: u64,
    seen: u64,
    z_ns: u64,
    max_z_ns: u64,
    flushed: bool,
    max_clock_sync_ns: u64,
    /// Longest time a rank spent in a protocol call that did not suspend it.
    max_unsuspended_ns: u64,
}

impl Round {
    fn new() -> Self {
        Round {
            min_end: u64::MAX,
            max_end: 0,
            min_duration: u64::MAX,
            max_duration: 0,
            max_overshoot: 0,
            late: 0,
            seen: 0,
            z_ns: 0,
            max_z_ns: 0,
            flushed: false,
            max_clock_sync_ns: 0,
            max_unsuspended_ns: 0,
        }
    }
}

type ProtocolFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TransportError>> + 'a>>;

/// Runs one simulation.
pub fn simulate(config: &SimConfig) -> Result<SimResult, String> {
    let wall = Instant::now();
    let size = config.ranks;
    if size == 0 {
        return Err("at least one rank is needed".into());
    }
    let app = &config.app;
    let mut clock_rng = Rng::new(config.seed ^ 0xC10C);
    let ranks: Vec<RankState> = (0..size)
        .map(|_| {
            let offset = clock_rng.normal() * config.clock.offset_sd_ns;
            let rate = 1.0 + clock_rng.normal() * config.clock.drift_sd_ppm * 1e-6;
            RankState::new(offset, rate)
        })
        .collect();
    let mib = (1u64 << 20) as f64;
    let disk = DiskParams {
        bytes_per_ns_nominal: config.disk.mbps * mib / NS,
        efficiency_lo: config.disk.efficiency_lo,
        efficiency_hi: config.disk.efficiency_hi.max(config.disk.efficiency_lo),
        rank_variation: config.disk.rank_variation.clamp(0.0, 0.9),
        shared_bytes_per_ns: config.disk.shared_mbps.map(|m| m * mib / NS),
    };
    let world = RefCell::new(World::new(
        ranks,
        Rng::new(config.seed ^ 0x5EED),
        config.net,
        disk,
        config.clock.read_jitter_ns,
    ));
    let mut suspenders: Vec<Suspender> =
        (0..size).map(|_| Suspender::new(config.settings)).collect();
    let traced = !config.untraced;

    // MPI_Init: the start-up clock measurement, from an instant 0 for every rank.
    let zero_starts = vec![0u64; size];
    if traced {
        let futures = suspenders
            .iter_mut()
            .enumerate()
            .map(|(rank, suspender)| {
                let world = &world;
                let future: ProtocolFuture<'_, _> = Box::pin(async move {
                    let mut transport = SimRank::new(world, rank);
                    suspender.init_async(&mut transport).await
                });
                Some(future)
            })
            .collect();
        let mut failure = None;
        World::run(&world, futures, &zero_starts, |rank, out, _| {
            if let Err(e) = out {
                failure.get_or_insert(format!("rank {rank}: {e}"));
            }
        })?;
        if let Some(f) = failure {
            return Err(f);
        }
    }
    // MPI_Init ends together on every rank (implementations synchronise there), so the application
    // starts at the same instant everywhere and the start-up cost is exactly `init_end`.
    let init_end = {
        let mut world = world.borrow_mut();
        let end = world.ranks.iter().map(|r| r.time).max().unwrap_or(0);
        for state in &mut world.ranks {
            state.time = end;
        }
        end
    };

    let bytes_per_iteration = if traced { app.bytes_per_iteration() } else { 0 };
    let append_ns = bytes_per_iteration as f64 / (app.append_mbps * mib) * NS;
    let step_ns = app.untraced_s / app.iterations.max(1) as f64 * NS;
    let barrier_cost = world.borrow().allreduce_cost();

    let mut buffers = vec![0u64; size];
    let mut removed_ns = vec![0f64; size];
    let mut untraced_time = vec![0f64; size];
    let mut in_memory_time = vec![0f64; size];
    let mut arrivals = vec![0f64; size];
    let mut starts = vec![0u64; size];

    let mut z_us = Vec::new();
    let mut duration_spread_us = Vec::new();
    let mut resume_spread_us = Vec::new();
    let mut overshoot_us = Vec::new();
    let mut z_no_flush = Vec::new();
    let mut no_flush_overhead_us = Vec::new();
    let mut root_records = Vec::new();
    let (mut z_sum, mut sync_sum, mut flushes, mut late, mut pairs) = (0u64, 0u64, 0, 0u64, 0u64);

    for iteration in 0..app.iterations {
        // The application: compute, record, barrier.
        {
            let world = world.borrow();
            for rank in 0..size {
                let compute = step_ns
                    * (1.0 - app.imbalance * keyed_uniform(config.seed, iteration, rank as u64, 1));
                let mut swap = 0.0;
                if config.swap && traced {
                    let noise = 1.0
                        + config.memory.variability
                            * (2.0 * keyed_uniform(config.seed, iteration, rank as u64, 2) - 1.0);
                    swap = config
                        .memory
                        .penalty_ns(buffers[rank] + bytes_per_iteration)
                        * noise;
                }
                buffers[rank] += bytes_per_iteration;
                arrivals[rank] = world.ranks[rank].time as f64 + compute + append_ns + swap;
                untraced_time[rank] += compute;
                in_memory_time[rank] += compute + append_ns;
            }
        }
        let leave = |times: &mut [f64], spread: &dyn Fn(usize) -> f64| {
            let latest = times.iter().copied().fold(f64::MIN, f64::max);
            for (rank, t) in times.iter_mut().enumerate() {
                *t = latest + barrier_cost as f64 + spread(rank);
            }
        };
        let spread = |rank: usize| {
            app.barrier_exit_spread_ns * keyed_uniform(config.seed, iteration, rank as u64, 3)
        };
        leave(&mut arrivals, &spread);
        leave(&mut untraced_time, &spread);
        leave(&mut in_memory_time, &spread);
        for (start, arrival) in starts.iter_mut().zip(&arrivals) {
            *start = arrival.ceil() as u64;
        }
        if !traced {
            let mut world = world.borrow_mut();
            for (state, &start) in world.ranks.iter_mut().zip(&starts) {
                state.time = start;
            }
            continue;
        }

        // The protocol, right after the barrier, on every rank.
        world.borrow_mut().new_round();
        let futures = suspenders
            .iter_mut()
            .enumerate()
            .map(|(rank, suspender)| {
                let world = &world;
                let bytes = buffers[rank];
                let held = Held {
                    bytes,
                    threshold: config.threshold_bytes,
                };
                let future: ProtocolFuture<'_, Option<Suspended>> = Box::pin(async move {
                    let mut transport = SimRank::new(world, rank);
                    let mut flush = move || FlushReport {
                        bytes_raw: bytes,
                        bytes_stored: bytes,
                    };
                    suspender
                        .suspend_async(&mut transport, held, &mut flush)
                        .await
                });
                Some(future)
            })
            .collect();
        let mut round = Round::new();
        let mut failure = None;
        World::run(&world, futures, &starts, |rank, out, world| {
            let done = match out {
                Ok(Some(done)) => done,
                Ok(None) => {
                    let took = world.ranks[rank].time.saturating_sub(starts[rank]);
                    round.max_unsuspended_ns = round.max_unsuspended_ns.max(took);
                    return;
                }
                Err(e) => {
                    failure.get_or_insert(format!("rank {rank}: {e}"));
                    return;
                }
            };
            let end = world.ranks[rank].time;
            let duration = end.saturating_sub(starts[rank]);
            let record = &done.record;
            round.seen += 1;
            round.min_end = round.min_end.min(end);
            round.max_end = round.max_end.max(end);
            round.min_duration = round.min_duration.min(duration);
            round.max_duration = round.max_duration.max(duration);
            round.max_overshoot = round.max_overshoot.max(record.overshoot_ns);
            round.late += (record.overshoot_ns > 10_000) as u64;
            round.max_clock_sync_ns = round.max_clock_sync_ns.max(done.clock_sync_ns);
            round.max_z_ns = round.max_z_ns.max(record.z_ns.max(duration));
            round.flushed |= record.flushed;
            if rank == 0 {
                round.z_ns = record.z_ns;
                if config.keep_root_records {
                    root_records.push(record.clone());
                }
            }
            if record.flushed {
                buffers[rank] = 0;
            }
            removed_ns[rank] += record.end.saturating_sub(record.start) as f64;
        })?;
        if let Some(f) = failure {
            return Err(f);
        }
        if round.seen == 0 {
            no_flush_overhead_us.push(round.max_unsuspended_ns as f64 / 1e3);
            continue;
        }
        // In local mode there is no common Z: the longest pause stands for it.
        let z = if config.settings.mode == Mode::Local {
            round.max_z_ns
        } else {
            round.z_ns
        };
        z_sum += z;
        sync_sum += round.max_clock_sync_ns;
        pairs += round.seen;
        late += round.late;
        if round.flushed {
            flushes += 1;
        } else {
            z_no_flush.push(z as f64);
            no_flush_overhead_us.push(round.max_duration as f64 / 1e3);
        }
        z_us.push(z as f64 / 1e3);
        duration_spread_us.push((round.max_duration - round.min_duration) as f64 / 1e3);
        resume_spread_us.push((round.max_end - round.min_end) as f64 / 1e3);
        overshoot_us.push(round.max_overshoot as f64 / 1e3);
    }

    let world = world.into_inner();
    let total = world.ranks.iter().map(|r| r.time).max().unwrap_or(0) as f64;
    let reconstructed = world
        .ranks
        .iter()
        .zip(&removed_ns)
        .map(|(r, removed)| r.time as f64 - removed)
        .fold(f64::MIN, f64::max)
        - init_end as f64;
    let untraced = untraced_time.iter().copied().fold(f64::MIN, f64::max);
    let in_memory = if traced {
        in_memory_time.iter().copied().fold(f64::MIN, f64::max)
    } else {
        untraced
    };
    let suspensions = z_us.len() as u64;
    Ok(SimResult {
        ranks: size,
        mode: if traced {
            config.settings.mode.name().to_string()
        } else {
            "untraced".to_string()
        },
        clock_scheme: config.settings.clock_scheme.name().to_string(),
        trace_mb: if traced {
            app.trace_bytes as f64 / mib
        } else {
            0.0
        },
        threshold_mb: config.threshold_bytes as f64 / mib,
        total_s: total / NS,
        untraced_s: untraced / NS,
        in_memory_s: in_memory / NS,
        reconstructed_s: reconstructed / NS,
        reconstruction_error: ((reconstructed - in_memory) / in_memory).abs(),
        suspensions,
        flushes,
        z_sum_s: z_sum as f64 / NS,
        z_mean_ms: if suspensions > 0 {
            z_sum as f64 / suspensions as f64 / 1e6
        } else {
            0.0
        },
        z_mean_no_flush_us: if z_no_flush.is_empty() {
            0.0
        } else {
            z_no_flush.iter().sum::<f64>() / z_no_flush.len() as f64 / 1e3
        },
        clock_sync_share: if z_sum > 0 {
            sync_sum as f64 / z_sum as f64
        } else {
            0.0
        },
        init_s: init_end as f64 / NS,
        no_flush_overhead_us: Quantiles::of(&mut no_flush_overhead_us),
        z_us: Quantiles::of(&mut z_us),
        duration_spread_us: Quantiles::of(&mut duration_spread_us),
        resume_spread_us: Quantiles::of(&mut resume_spread_us),
        overshoot_us: Quantiles::of(&mut overshoot_us),
        late_share: if pairs > 0 {
            late as f64 / pairs as f64
        } else {
            0.0
        },
        events: world.events,
        wall_s: wall.elapsed().as_secs_f64(),
        root_records,
    })
}

/// The depth of the binomial tree over `ranks` (⌈log2 P⌉), as the protocol uses it in Z.
pub fn tree_depth(ranks: usize) -> u32 {
    log2_ceil(ranks)
}
