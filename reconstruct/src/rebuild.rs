//! `evenflush reconstruct`: from a recorded trace (G') to the original timing (G+ without the
//! suspensions DP', G also without the recorder's own cost DP), written as a trace of the same
//! format, with a summary of what was removed.
//!
//! Two streaming passes, both on every core: the first keeps per-rank metadata
//! ([`crate::clock::RankMeta`]), the second ([`crate::pipeline`]) maps every timestamp
//! ([`crate::mapping`]), matches communication, and writes ([`crate::output`]). Memory is bounded
//! by lanes × one decoded chunk, plus what happened-before matching holds in flight; it does not
//! grow with the length of the trace.
//!
//! The output's clock is the global one in nanoseconds: every rank file says 1e9 ticks per second,
//! its clock samples say offset 0, suspensions are zero-length markers, and with DP removed every
//! call's cost is 0, so reconstructing an output again changes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use format::ChunkEncoder;
use serde::Serialize;

use crate::clock::{RankMeta, align_clocks, scan_rank};
use crate::hb::{self, Estimates, HbReport, MessageMatch, Repair};
use crate::job::{self, Transport};
use crate::lanes::LaneId;
use crate::mapping::LaneMarks;
use crate::output::{LaneOut, RankOutput, prepare_out_dir, write_meta};
use crate::pipeline::{self, PassConfig, PassResult, WorkerOutput};
use crate::trace::{Skipped, Trace, TraceError};

/// Which perturbation to take out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Remove {
    /// The suspensions (DP'): recovers G+.
    DpPrime,
    /// The recorder's per-event cost (DP) only.
    Dp,
    /// Both: recovers G.
    Both,
}

impl Remove {
    pub fn dp_prime(self) -> bool {
        matches!(self, Remove::DpPrime | Remove::Both)
    }
    pub fn dp(self) -> bool {
        matches!(self, Remove::Dp | Remove::Both)
    }
    pub fn name(self) -> &'static str {
        match self {
            Remove::DpPrime => "dpprime",
            Remove::Dp => "dp",
            Remove::Both => "both",
        }
    }
}

/// How waits are reconstructed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// The paper's: DP' and DP are subtracted rank by rank, waits kept as recorded (and with
    /// `hb`, lengthened where they would end before what they wait for).
    #[default]
    Subtract,
    /// Every wait recomputed from its partners in the reconstructed run (`hb::repair`), with
    /// intrinsic costs and transfer times learned from the run itself. Removes DP' and DP.
    Replay,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Subtract => "subtract",
            Model::Replay => "replay",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub remove: Remove,
    pub model: Model,
    /// Repair happened-before violations (otherwise they are only counted).
    pub hb: bool,
    /// Events per output chunk and stream.
    pub chunk_events: usize,
    pub zstd_level: i32,
    /// With `hb`: no message arrives sooner than this after its send started (ns).
    pub min_latency_ns: u64,
    /// Threads to read, map and write on (0: every core). The output does not depend on it.
    pub threads: usize,
}

impl Options {
    /// Whether the output times come out of the matcher (every event passes through it).
    pub fn moves_waits(&self) -> bool {
        self.hb || self.model == Model::Replay
    }

    fn repair(&self) -> Repair {
        Repair {
            enabled: self.moves_waits(),
            min_latency_ns: self.min_latency_ns,
            replay: self.model == Model::Replay,
            learn: false,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            remove: Remove::DpPrime,
            model: Model::Subtract,
            hb: false,
            chunk_events: 1 << 16,
            zstd_level: 1,
            min_latency_ns: hb::DEFAULT_MIN_LATENCY_NS,
            threads: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("writing {}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    BadOutput { path: PathBuf, what: String },
    /// Between the processes of an MPI job (`mpirun -np N evenflush reconstruct`).
    #[error("MPI job: {0}")]
    Job(String),
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RankSummary {
    pub rank: u32,
    pub events: u64,
    pub suspensions: u64,
    /// End of `MPI_Init` to start of `MPI_Finalize` on this rank, global clock (None if a marker
    /// is missing).
    pub measured_s: Option<f64>,
    pub dp_prime_s: f64,
    pub dp_s: f64,
    pub reconstructed_plus_s: Option<f64>,
    pub reconstructed_s: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SuspensionSummary {
    /// Distinct suspensions (by sequence number).
    pub count: u64,
    /// Suspensions in which some rank wrote its trace.
    pub flushes: u64,
    /// Sum of Z over the suspensions.
    pub z_total_s: f64,
    /// Sum over ranks and suspensions of how late a rank resumed past its deadline.
    pub overshoot_total_s: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct HbSummary {
    pub repaired: bool,
    /// In the trace as recorded (global clock, nothing removed): a clean trace of one host has
    /// none.
    pub violations_recorded: u64,
    /// In the times with DP' (and DP) removed, before the repair: more than recorded when a
    /// suspension was not equal on every rank (an overshoot), which the repair undoes.
    pub violations_before: u64,
    /// Counted again on the written output when repaired; equal to `violations_before` otherwise.
    pub violations_after: u64,
    pub before: HbReport,
    pub after: Option<HbReport>,
    /// Largest forward shift the repair applied to a lane, seconds.
    pub max_shift_s: f64,
}

/// What `reconstruct` did. Spans are "end of MPI_Init to start of MPI_Finalize", max over ranks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub trace: String,
    pub out: String,
    pub remove: String,
    pub model: Model,
    /// What the replay learned (empty with `subtract`).
    pub estimates: EstimateSummary,
    /// Hosts that ran more ranks than they had cores (see [`crate::oversubscription`]).
    pub oversubscribed: Vec<crate::oversubscription::Crowding>,
    /// Why T(G) may not be a reliable estimate of the untraced run (also in `warnings`).
    pub unreliable: Vec<String>,
    pub ranks: u32,
    pub events: u64,
    /// T(G'): as measured, global clock.
    pub measured_s: f64,
    /// DP' and DP on the rank that sets `measured_s` (the critical rank).
    pub critical_rank: u32,
    pub dp_prime_s: f64,
    pub dp_s: f64,
    /// T(G+): DP' removed.
    pub reconstructed_plus_s: f64,
    /// T(G): DP' and DP removed.
    pub reconstructed_s: f64,
    pub per_rank: Vec<RankSummary>,
    pub suspensions: SuspensionSummary,
    pub hb: HbSummary,
    pub warnings: Vec<String>,
    pub skipped: Vec<Skipped>,
}

/// How much the replay's estimates rest on: classes learned and instances seen, per table.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EstimateSummary {
    pub intrinsic_classes: usize,
    pub transfer_classes: usize,
    pub exit_classes: usize,
    pub calls_seen: u64,
    pub messages_seen: u64,
    pub exits_seen: u64,
}

impl EstimateSummary {
    fn of(e: &Estimates) -> EstimateSummary {
        EstimateSummary {
            intrinsic_classes: e.intrinsic.len(),
            transfer_classes: e.transfer.len(),
            exit_classes: e.exit.len(),
            calls_seen: e.samples[0],
            messages_seen: e.samples[1],
            exits_seen: e.samples[2],
        }
    }
}

/// The replay's [`Estimates`], learned from the trace as recorded: a matching pass over every
/// rank that moves nothing and writes nothing.
pub fn learn_estimates(
    trace: &Trace,
    metas: &[RankMeta],
    threads: usize,
) -> Result<Estimates, RebuildError> {
    let pass = pipeline::run(
        trace,
        PassConfig {
            metas,
            remove: Some(Remove::Both),
            repair: Repair::learning(),
            threads,
            output: None,
            job: None,
            estimates: None,
        },
        |_, _| {},
        |_| {},
        &mut |_| {},
    )?;
    Ok(pass.estimates)
}

/// The first pass over every rank, on every core.
pub fn scan(trace: &Trace) -> Result<Vec<RankMeta>, TraceError> {
    scan_with(trace, 0)
}

/// [`scan`] on `threads` threads (0: every core).
pub fn scan_with(trace: &Trace, threads: usize) -> Result<Vec<RankMeta>, TraceError> {
    let mut metas = pipeline::map_indexed(trace.ranks.len(), pipeline::threads(threads), |i| {
        scan_rank(&trace.ranks[i])
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    align_clocks(&mut metas);
    Ok(metas)
}

/// A pass that writes nothing can only fail reading.
fn read_error(e: RebuildError) -> TraceError {
    match e {
        RebuildError::Trace(t) => t,
        RebuildError::Output { path, source } => TraceError::Io {
            path,
            what: source.to_string(),
        },
        RebuildError::BadOutput { path, what } => TraceError::Io { path, what },
        RebuildError::Job(what) => TraceError::Io {
            path: PathBuf::new(),
            what,
        },
    }
}

/// Every matched message of a trace, in its global clock (suspensions kept): for timelines that
/// draw message arrows. Also returns the matching report.
pub fn matched_messages(trace: &Trace) -> Result<(Vec<MessageMatch>, HbReport), TraceError> {
    let mut out = Vec::new();
    let report = match_as_recorded(trace, 0, |m| out.push(*m))?;
    Ok((out, report))
}

/// Counts happened-before violations of a trace as it is (global clock, nothing removed).
pub fn check_happened_before(trace: &Trace) -> Result<HbReport, TraceError> {
    check_happened_before_with(trace, 0)
}

fn check_happened_before_with(trace: &Trace, threads: usize) -> Result<HbReport, TraceError> {
    match_as_recorded(trace, threads, |_| {})
}

/// Matching over the times as recorded (nothing removed, nothing repaired, nothing written).
fn match_as_recorded(
    trace: &Trace,
    threads: usize,
    on_match: impl FnMut(&MessageMatch),
) -> Result<HbReport, TraceError> {
    let metas = scan_with(trace, threads)?;
    let pass = pipeline::run(
        trace,
        PassConfig {
            metas: &metas,
            remove: None,
            repair: Repair::OFF,
            threads,
            output: None,
            job: None,
            estimates: None,
        },
        |_, _| {},
        on_match,
        &mut |_| {},
    )
    .map_err(read_error)?;
    Ok(pass.report)
}

/// Output events buffered over all lanes, at most (a few tens of MiB in their typed columns).
const OUTPUT_EVENTS_BUFFERED: usize = 1 << 20;
/// Output chunks are not made smaller than this to save memory: chunk headers and compression
/// would start to cost.
const MIN_CHUNK_EVENTS: usize = 256;

/// Reconstructs `trace` into `out`. `progress(done, total)` is called as events are read.
pub fn reconstruct(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, RebuildError> {
    let summary = reconstruct_in_job(trace, out, opts, None, progress)?;
    summary.ok_or_else(|| RebuildError::Job("process 0 has no summary".into()))
}

/// [`reconstruct`] as one process of an MPI job ([`crate::job`]); the output is the same as one
/// process's. Process 0 returns the summary, the others `None` (process 0 reports their errors).
pub fn reconstruct_in_job(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    job: Option<&dyn Transport>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<Summary>, RebuildError> {
    if let Some(j) = job
        && j.rank() != 0
    {
        return serve_as_owner(trace, out, opts, j).map(|()| None);
    }
    // Whatever fails here, the other processes are told to stop.
    let stop_others = |e: RebuildError| {
        if let Some(j) = job {
            pipeline::finish_job(Some(j), &mut Vec::new()).ok();
        }
        e
    };
    let Some(j) = job.filter(|j| j.size() > 1) else {
        let metas = scan_with(trace, opts.threads)?;
        prepare_out_dir(trace, out)?;
        let outputs = create_outputs(trace, out, opts, 0, 1)?;
        return reconstruct_rank_zero(trace, out, opts, None, &metas, &outputs, progress).map(Some);
    };
    // Each owner reads its own ranks' metadata; process 0 gathers it and passes every rank's to
    // everyone (clock alignment and matching need all of it).
    let (mut metas, all) = gather_metas(trace, opts, j).map_err(stop_others)?;
    align_clocks(&mut metas);
    prepare_out_dir(trace, out).map_err(stop_others)?;
    // Only now may the others create their files: preparing removed earlier ones.
    for p in 1..j.size() {
        j.send(p, job::TAG_ALL_METAS, &all)
            .map_err(|e| stop_others(RebuildError::Job(e)))?;
    }
    let outputs = create_outputs(trace, out, opts, 0, j.size()).map_err(stop_others)?;
    reconstruct_rank_zero(trace, out, opts, job, &metas, &outputs, progress).map(Some)
}

/// The output files this process writes (the others' as handles only): those of the ranks it
/// steps, or with the repair on, every one on process 0, since the output times come out of its
/// matcher.
fn create_outputs(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    me: usize,
    processes: usize,
) -> Result<Vec<RankOutput>, RebuildError> {
    let writes_rank = |i: usize| {
        if opts.moves_waits() {
            me == 0
        } else {
            job::owner_of(i, trace.ranks.len(), processes) == me
        }
    };
    pipeline::map_indexed(trace.ranks.len(), pipeline::threads(opts.threads), |i| {
        if writes_rank(i) {
            RankOutput::create(&trace.ranks[i], out, opts)
        } else {
            Ok(RankOutput::elsewhere(&trace.ranks[i], out))
        }
    })
    .into_iter()
    .collect()
}

/// Process 0's side of the metadata exchange: every rank's metadata in trace order, and the
/// `ALL_METAS` message that carries it. An owner's failure is reported by its number.
fn gather_metas(
    trace: &Trace,
    opts: &Options,
    job: &dyn Transport,
) -> Result<(Vec<RankMeta>, Vec<u8>), RebuildError> {
    let ranks = trace.ranks.len();
    let mut slots: Vec<Option<(RankMeta, job::KeptEvents)>> = vec![None; ranks];
    let mut failure = None;
    match scan_own(trace, opts, job) {
        Ok(scanned) => {
            for (idx, meta, kept) in scanned {
                slots[idx] = Some((meta, kept));
            }
        }
        Err(e) => failure = Some(RebuildError::Job(format!("process 0: {e}"))),
    }
    for p in 1..job.size() {
        let (_, tag, bytes) = job.recv(Some(p)).map_err(RebuildError::Job)?;
        match tag {
            job::TAG_METAS => {
                let decoded = job::decode_metas(&bytes)
                    .map_err(|e| RebuildError::Job(format!("process {p}: {e}")))?;
                for (idx, meta, kept) in decoded {
                    match slots.get_mut(idx) {
                        Some(slot) if job::owner_of(idx, ranks, job.size()) == p => {
                            *slot = Some((meta, kept));
                        }
                        _ => {
                            return Err(RebuildError::Job(format!(
                                "process {p} sent rank index {idx}, which it does not own"
                            )));
                        }
                    }
                }
            }
            job::TAG_FAILED => {
                failure.get_or_insert(RebuildError::Job(format!(
                    "process {p}: {}",
                    String::from_utf8_lossy(&bytes)
                )));
            }
            other => {
                return Err(RebuildError::Job(format!(
                    "process {p} sent an unexpected message (tag {other})"
                )));
            }
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let mut metas = Vec::with_capacity(ranks);
    let mut kept = Vec::with_capacity(ranks);
    for (idx, slot) in slots.into_iter().enumerate() {
        let (meta, events) = slot.ok_or_else(|| {
            RebuildError::Job(format!("nobody sent the metadata of rank index {idx}"))
        })?;
        metas.push(meta);
        kept.push(events);
    }
    let records: Vec<job::MetaRecord<'_>> = metas
        .iter()
        .zip(&kept)
        .enumerate()
        .map(|(rank_idx, (meta, kept))| job::MetaRecord {
            rank_idx,
            meta,
            kept,
        })
        .collect();
    let all = job::encode_metas(&records);
    Ok((metas, all))
}

/// The metadata of the ranks this process owns, by rank index, with the events it was built
/// from (what travels to the others).
fn scan_own(
    trace: &Trace,
    opts: &Options,
    job: &dyn Transport,
) -> Result<Vec<(usize, RankMeta, job::KeptEvents)>, String> {
    let ranks = trace.ranks.len();
    let own: Vec<usize> = (0..ranks)
        .filter(|&i| job::owner_of(i, ranks, job.size()) == job.rank())
        .collect();
    pipeline::map_indexed(own.len(), pipeline::threads(opts.threads), |k| {
        let mut kept = Vec::new();
        crate::clock::scan_rank_keeping(&trace.ranks[own[k]], |stream, e| {
            kept.push((stream, e.clone()));
        })
        .map(|meta| (own[k], meta, kept))
        .map_err(|e| pipeline::error_text(&e))
    })
    .into_iter()
    .collect()
}

fn meta_records(scanned: &[(usize, RankMeta, job::KeptEvents)]) -> Vec<job::MetaRecord<'_>> {
    scanned
        .iter()
        .map(|(rank_idx, meta, kept)| job::MetaRecord {
            rank_idx: *rank_idx,
            meta,
            kept,
        })
        .collect()
}

/// An owner's side: reads the metadata of its own ranks and sends it to process 0.
fn send_own_metas(trace: &Trace, opts: &Options, job: &dyn Transport) -> Result<(), String> {
    let scanned = scan_own(trace, opts, job)?;
    job.send(
        0,
        job::TAG_METAS,
        &job::encode_metas(&meta_records(&scanned)),
    )
}

/// A process other than 0: reads its ranks' metadata, waits for everyone's (which also says the
/// output directory is prepared), then steps its ranks as asked (see [`pipeline::serve`]).
fn serve_as_owner(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    job: &dyn Transport,
) -> Result<(), RebuildError> {
    if let Err(reason) = send_own_metas(trace, opts, job) {
        job.send(0, job::TAG_FAILED, reason.as_bytes())
            .map_err(RebuildError::Job)?;
        return pipeline::serve_failed(job, &reason, true);
    }
    let (_, tag, bytes) = job.recv(Some(0)).map_err(RebuildError::Job)?;
    let metas = match tag {
        job::TAG_ALL_METAS => job::decode_metas(&bytes).map(|all| {
            let mut metas: Vec<RankMeta> = all.into_iter().map(|(_, m, _)| m).collect();
            align_clocks(&mut metas);
            metas
        }),
        job::TAG_FINISH => {
            // Process 0 failed before the pass began (and says why).
            return job
                .send(0, job::TAG_MARKS, &job::encode_marks(&[]))
                .map_err(RebuildError::Job);
        }
        other => {
            return Err(RebuildError::Job(format!(
                "process 0 sent an unexpected message (tag {other})"
            )));
        }
    };
    let prepared = metas.map_err(RebuildError::Job).and_then(|metas| {
        let outputs = create_outputs(trace, out, opts, job.rank(), job.size())?;
        Ok((metas, outputs))
    });
    let (metas, outputs) = match prepared {
        Ok(p) => p,
        Err(e) => return pipeline::serve_failed(job, &pipeline::error_text(&e), false),
    };
    let ids = pipeline::lane_ids(&metas);
    pipeline::serve(
        trace,
        PassConfig {
            metas: &metas,
            remove: Some(opts.remove),
            repair: opts.repair(),
            threads: opts.threads,
            output: (!opts.moves_waits()).then_some(WorkerOutput {
                ranks: &outputs,
                chunk_events: output_chunk_events(opts, ids.len()),
                zstd_level: opts.zstd_level,
            }),
            job: Some(job),
            // Owners only step their ranks; process 0's matcher replays.
            estimates: None,
        },
        job,
    )
}

/// Every lane buffers one output chunk: with many lanes, smaller chunks keep that bounded.
fn output_chunk_events(opts: &Options, lanes: usize) -> usize {
    opts.chunk_events
        .min((OUTPUT_EVENTS_BUFFERED / lanes.max(1)).max(MIN_CHUNK_EVENTS))
        .max(1)
}

/// Process 0's part (the whole work without a job): the pass, the summary, the check after the
/// repair.
fn reconstruct_rank_zero(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    job: Option<&dyn Transport>,
    metas: &[RankMeta],
    outputs: &[RankOutput],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, RebuildError> {
    let ids = pipeline::lane_ids(metas);
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let chunk_events = output_chunk_events(opts, ids.len());
    progress(0, total);
    let repair = opts.repair();
    // The replay learns from the whole trace first (process 0 reads every rank for it: the
    // estimates are a few classes, but their instances are everywhere).
    let estimates = if repair.replay {
        Some(learn_estimates(trace, metas, opts.threads)?)
    } else {
        None
    };
    // With the repair on, the output times come from the matcher, so this thread writes them;
    // otherwise the workers do.
    let mut lanes: Vec<LaneOut> = ids.iter().map(|id| LaneOut::new(id.stream)).collect();
    let lane_rank: Vec<usize> = ids
        .iter()
        .map(|id| metas.iter().position(|m| m.rank == id.rank).unwrap_or(0))
        .collect();
    let mut encoder = ChunkEncoder::new(opts.zstd_level);
    let mut write_error: Option<RebuildError> = None;
    let pass = pipeline::run(
        trace,
        PassConfig {
            metas,
            remove: Some(opts.remove),
            repair,
            threads: opts.threads,
            output: (!opts.moves_waits()).then_some(WorkerOutput {
                ranks: outputs,
                chunk_events,
                zstd_level: opts.zstd_level,
            }),
            job,
            estimates: estimates.as_ref(),
        },
        |li, e| {
            if !opts.moves_waits() || write_error.is_some() {
                return;
            }
            let lane = &mut lanes[li];
            if lane.push(e, chunk_events) {
                let target = &outputs[lane_rank[li]];
                let chunk = lane.take_chunk(&mut encoder, target.rank);
                if let Err(err) = target.append(&[chunk]) {
                    write_error = Some(err);
                }
            }
        },
        |_| {},
        &mut |done| progress(done.min(total), total),
    )?;
    if let Some(err) = write_error {
        return Err(err);
    }
    for (li, lane) in lanes.iter_mut().enumerate() {
        if !lane.is_empty() {
            let target = &outputs[lane_rank[li]];
            let chunk = lane.take_chunk(&mut encoder, target.rank);
            target.append(&[chunk])?;
        }
    }
    progress(total, total);
    write_meta(trace, out, opts)?;

    let mut summary = summarize(trace, out, opts, metas, &ids, &pass);
    if let Some(e) = &estimates {
        summary.estimates = EstimateSummary::of(e);
    }
    if opts.moves_waits() {
        let written = Trace::open(out)?;
        let after = check_happened_before_with(&written, opts.threads)?;
        summary.hb.violations_after = after.violations();
        summary.hb.after = Some(after);
    }
    Ok(summary)
}

fn summarize(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    metas: &[RankMeta],
    ids: &[LaneId],
    pass: &PassResult,
) -> Summary {
    let mut s = Summary {
        trace: trace.dir.display().to_string(),
        out: out.display().to_string(),
        remove: opts.remove.name().into(),
        model: opts.model,
        ranks: trace.world_size,
        events: metas.iter().map(|m| m.events).sum(),
        ..Default::default()
    };
    let mut by_seq: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    let mut overshoot_ns = 0u64;
    let mut critical_span = f64::NEG_INFINITY;
    for meta in metas {
        let marks = ids
            .iter()
            .zip(&pass.marks)
            .filter(|(id, _)| id.rank == meta.rank)
            .map(|(_, m)| *m)
            .find(|m| m.init.is_some() && m.finalize.is_some());
        let mut r = RankSummary {
            rank: meta.rank,
            events: meta.events,
            suspensions: meta.suspensions.len() as u64,
            ..Default::default()
        };
        if let Some(LaneMarks {
            init: Some(i),
            finalize: Some(f),
        }) = marks
        {
            let measured = (f.global - i.global) / 1e9;
            let plus = (f.collapsed + f.shift_ns - i.collapsed - i.shift_ns) / 1e9;
            let dp = (f.dp_ns - i.dp_ns) / 1e9;
            r.measured_s = Some(measured);
            r.reconstructed_plus_s = Some(plus);
            r.reconstructed_s = Some(plus - dp);
            // The replay's shifts are its waits, not suspensions.
            r.dp_prime_s = if opts.model == Model::Replay {
                measured - (f.collapsed - i.collapsed) / 1e9
            } else {
                measured - plus
            };
            r.dp_s = dp;
            if let Some(w) = crate::oversubscription::dp_warning(meta.rank, dp, measured) {
                s.unreliable.push(w);
            }
            s.reconstructed_plus_s = s.reconstructed_plus_s.max(plus);
            s.reconstructed_s = s.reconstructed_s.max(plus - dp);
            if measured > critical_span {
                critical_span = measured;
                s.measured_s = measured;
                s.critical_rank = meta.rank;
                s.dp_prime_s = r.dp_prime_s;
                s.dp_s = dp;
            }
        } else {
            s.warnings.push(format!(
                "rank {}: no InitDone/FinalizeStart marker pair: its span is not counted",
                meta.rank
            ));
        }
        if meta.rank != 0 && trace.world_size > 1 && meta.samples.is_empty() {
            s.warnings.push(format!(
                "rank {}: no clock samples: its clock is taken as equal to rank 0's",
                meta.rank
            ));
        }
        for sus in &meta.suspensions {
            let e = by_seq.entry(sus.seq).or_default();
            e.0 = e.0.max(sus.z_ns);
            e.1 |= sus.flushed;
            overshoot_ns += sus.overshoot_ns;
        }
        s.skipped.extend(meta.skipped.iter().cloned());
        s.per_rank.push(r);
    }
    let mut hosts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for meta in metas {
        if let Some(h) = &meta.host {
            hosts.entry(h.clone()).or_default().push(meta.rank);
        }
    }
    s.oversubscribed = crate::oversubscription::crowded_hosts(trace.meta.as_ref(), &hosts);
    s.unreliable
        .extend(crate::oversubscription::warnings(&s.oversubscribed));
    s.warnings.extend(s.unreliable.iter().cloned());
    s.suspensions = SuspensionSummary {
        count: by_seq.len() as u64,
        flushes: by_seq.values().filter(|v| v.1).count() as u64,
        z_total_s: by_seq.values().map(|v| v.0 as f64).sum::<f64>() / 1e9,
        overshoot_total_s: overshoot_ns as f64 / 1e9,
    };
    s.hb = HbSummary {
        repaired: opts.moves_waits(),
        violations_recorded: pass.report.recorded_violations(),
        violations_before: pass.report.violations(),
        violations_after: pass.report.violations(),
        before: pass.report,
        after: None,
        max_shift_s: pass.report.max_shift as f64 / 1e9,
    };
    s
}

/// The human-readable form of a [`Summary`].
pub fn render_table(s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let pct = |x: f64| {
        if s.measured_s > 0.0 {
            100.0 * x / s.measured_s
        } else {
            0.0
        }
    };
    let _ = writeln!(o, "trace          {}", s.trace);
    let _ = writeln!(
        o,
        "written to     {} (removed: {}; model: {})",
        s.out,
        s.remove,
        s.model.name()
    );
    if s.model == Model::Replay {
        let e = &s.estimates;
        let _ = writeln!(
            o,
            "replay learned {} call, {} transfer and {} exit classes from {} calls, {} messages, \
             {} collective exits",
            e.intrinsic_classes,
            e.transfer_classes,
            e.exit_classes,
            e.calls_seen,
            e.messages_seen,
            e.exits_seen
        );
    }
    let _ = writeln!(o, "ranks          {}   events {}", s.ranks, s.events);
    let _ = writeln!(o, "\n{:<34} {:>14}", "span (max over ranks)", "seconds");
    let _ = writeln!(
        o,
        "{:<34} {:>14.6}",
        "measured            T(G')", s.measured_s
    );
    let _ = writeln!(
        o,
        "{:<34} {:>14.6}  ({:.2} % of T(G'), rank {})",
        "suspensions         DP'",
        s.dp_prime_s,
        pct(s.dp_prime_s),
        s.critical_rank
    );
    let _ = writeln!(
        o,
        "{:<34} {:>14.6}  ({:.2} %)",
        "recorder cost       DP",
        s.dp_s,
        pct(s.dp_s)
    );
    let _ = writeln!(
        o,
        "{:<34} {:>14.6}",
        "without DP'         T(G+)", s.reconstructed_plus_s
    );
    let _ = writeln!(
        o,
        "{:<34} {:>14.6}",
        if s.model == Model::Replay {
            "replayed            T(G)"
        } else {
            "without DP' and DP  T(G)"
        },
        s.reconstructed_s
    );
    let sus = &s.suspensions;
    let _ = writeln!(
        o,
        "\nsuspensions    {} ({} with a flush), Z total {:.6} s, overshoot total {:.6} s",
        sus.count, sus.flushes, sus.z_total_s, sus.overshoot_total_s
    );
    let hb = &s.hb;
    let _ = writeln!(
        o,
        "happened-before  {} messages, {} collective exits{}; violations {} as recorded, {} before \
         repair, {} after{}",
        hb.before.messages,
        hb.before.collective_exits,
        match hb.before.rma_epochs {
            0 => String::new(),
            n => format!(", {n} PSCW epochs"),
        },
        hb.violations_recorded,
        hb.violations_before,
        hb.violations_after,
        if hb.repaired {
            format!(" repair (max shift {:.3} µs)", hb.max_shift_s * 1e6)
        } else if hb.violations_before > 0 {
            " (use --hb to repair)".to_string()
        } else {
            String::new()
        }
    );
    if hb.before.unmatched_sends + hb.before.unmatched_receives > 0 {
        let _ = writeln!(
            o,
            "                 unmatched: {} sends, {} receives",
            hb.before.unmatched_sends, hb.before.unmatched_receives
        );
    }
    let _ = writeln!(
        o,
        "\n{:>6} {:>12} {:>6} {:>14} {:>12} {:>12} {:>14} {:>14}",
        "rank", "events", "susp", "measured s", "DP' s", "DP s", "T(G+) s", "T(G) s"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
    for r in &s.per_rank {
        let _ = writeln!(
            o,
            "{:>6} {:>12} {:>6} {:>14} {:>12.6} {:>12.6} {:>14} {:>14}",
            r.rank,
            r.events,
            r.suspensions,
            opt(r.measured_s),
            r.dp_prime_s,
            r.dp_s,
            opt(r.reconstructed_plus_s),
            opt(r.reconstructed_s)
        );
    }
    for w in &s.warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    // Skipped data is reported once, on stderr, by the command (see `Skipped`'s Display).
    o
}
