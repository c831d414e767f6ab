//! `evenflush reconstruct`: from a recorded trace (G') to the original timing (G+ without the
//! suspensions DP', G also without the recorder's own cost DP), written as a trace of the same
//! format, with a summary of what was removed.
//!
//! Two streaming passes, both on every core: the first keeps per-rank metadata
//! ([`trace::definitions::RankMeta`], [`trace::scan`]), the second ([`crate::pipeline`]) maps
//! every timestamp ([`crate::mapping`]), matches communication, and writes ([`crate::output`]).
//! Memory is bounded by lanes × one decoded chunk, plus what happened-before matching holds in
//! flight; it does not grow with the length of the trace.
//!
//! Here are the entry points; their options are in [`crate::options`], the summary they return in
//! [`crate::summary`], what the processes of an MPI job do in `job::roles`.
//!
//! The output's clock is the global one in nanoseconds: every rank file says 1e9 ticks per second,
//! its clock samples say offset 0, suspensions are zero-length markers, and with DP removed every
//! call's cost is 0, so reconstructing an output again changes nothing.

use std::path::Path;

use trace::Trace;
use trace::clock::align_clocks;
use trace::definitions::RankMeta;
use trace::scan::scan_with;

use crate::hb::Estimates;
use crate::job::roles::{create_outputs, gather_metas, serve_as_owner};
use crate::job::{self, Transport};
use crate::matches::check_happened_before_with;
pub use crate::options::{Model, Options, RebuildError, Remove};
use crate::output::{RankOutput, prepare_out_dir, write_meta};
use crate::pipeline::{self, EncodeQueue, EngineWriter, PassConfig, WorkerOutput};
use crate::summary::summarize;
pub use crate::summary::{
    AfterCountedBy, EstimateSummary, HbSummary, RankSummary, Summary, SuspensionSummary,
    render_table,
};

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
            pipeline::remote::finish_job(Some(j), &mut Vec::new()).ok();
        }
        e
    };
    let Some(j) = job.filter(|j| j.size() > 1) else {
        let metas = scan_with(trace, opts.threads)?;
        prepare_out_dir(trace, out)?;
        let outputs = create_outputs(trace, out, opts, 0, 1, false)?;
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
    let split = crate::job::split::splits(&metas, Some(j));
    let outputs = match create_outputs(trace, out, opts, 0, j.size(), split) {
        Ok(outputs) => outputs,
        Err(e) if split => {
            // Everyone is already in the split pass: take part as failed, then report.
            let reason = format!("process 0: {}", pipeline::remote::error_text(&e));
            crate::job::split::run_process(trace, &metas, Err(reason), opts, out, j, &mut |_| {})?;
            return Err(e);
        }
        Err(e) => return Err(stop_others(e)),
    };
    reconstruct_rank_zero(trace, out, opts, job, &metas, &outputs, progress).map(Some)
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
        PassConfig::learning(metas, threads),
        |_, _| {},
        |_| {},
        &mut |_| {},
    )?;
    Ok(pass.estimates)
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
    let output = WorkerOutput::new(outputs, opts, ids.len());
    progress(0, total);
    let repair = opts.repair();
    // A job whose trace can be split needs no central matcher: every process matches its own
    // ranks (and, with the replay, learns from them first).
    let split = job.filter(|&j| crate::job::split::splits(metas, Some(j)));
    // Otherwise the replay learns from the whole trace first (process 0 reads every rank for it:
    // the estimates are a few classes, but their instances are everywhere).
    let estimates = if repair.replay && split.is_none() {
        Some(learn_estimates(trace, metas, opts.threads)?)
    } else {
        None
    };
    // With the repair on, the output times come from the matcher, so this thread cuts the
    // chunks (and the workers encode them); otherwise the workers write it all.
    let queue = opts
        .moves_waits()
        .then(|| EncodeQueue::new(output, pipeline::threads(opts.threads) - 1));
    let mut writer = queue
        .as_ref()
        .map(|queue| EngineWriter::new(queue, metas, &ids));
    let cfg = PassConfig {
        metas,
        remove: Some(opts.remove),
        repair,
        threads: opts.threads,
        output: (!opts.moves_waits()).then_some(output),
        job,
        estimates: estimates.as_ref(),
        encode: queue.as_ref(),
    };
    let pass = if let Some(j) = split {
        // A split pass writes the own ranks in every model (the replay from its engine).
        let cfg = PassConfig {
            job: None,
            output: Some(output),
            ..cfg
        };
        crate::job::split::run_process(trace, metas, Ok(cfg), opts, out, j, &mut |done| {
            progress(done.min(total), total)
        })?
        .ok_or_else(|| RebuildError::Job("process 0 got no result of the split pass".into()))?
    } else {
        let pass = pipeline::run(
            trace,
            cfg,
            |li, e| {
                if let Some(w) = writer.as_mut() {
                    w.take(li, e);
                }
            },
            |_| {},
            &mut |done| progress(done.min(total), total),
        )?;
        if let Some(w) = writer.as_mut() {
            w.finish()?;
        }
        pass
    };
    let estimates = match (estimates, split) {
        (None, Some(_)) if repair.replay => Some(pass.estimates.clone()),
        (estimates, _) => estimates,
    };
    finish_summary(
        trace,
        out,
        opts,
        metas,
        &ids,
        &pass,
        estimates.as_ref(),
        progress,
    )
}

/// After the pass: the output's metadata, the summary, and the check after the repair.
#[allow(clippy::too_many_arguments)]
fn finish_summary(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    metas: &[RankMeta],
    ids: &[trace::lanes::LaneId],
    pass: &pipeline::PassResult,
    estimates: Option<&Estimates>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, RebuildError> {
    let total: u64 = metas.iter().map(|m| m.events).sum();
    progress(total, total);
    write_meta(trace, out, opts)?;

    let mut summary = summarize(trace, out, opts, metas, ids, pass);
    if let Some(e) = estimates {
        summary.estimates = EstimateSummary::of(e);
    }
    if opts.moves_waits() {
        let counted = pass.report.output.filter(|c| c.exact);
        let (after, by) = match (&pass.after, counted) {
            (Some(after), _) if pass.after_by_pass => (*after, AfterCountedBy::Pass),
            (Some(after), _) => (*after, AfterCountedBy::ReadingTheOutput),
            (None, Some(counted)) if !opts.verify => {
                (counted.as_report(&pass.report), AfterCountedBy::Pass)
            }
            (None, counted) => {
                let read = check_happened_before_with(&Trace::open(out)?, opts.threads)?;
                if let Some(counted) = counted.map(|c| c.as_report(&pass.report))
                    && counted != read
                {
                    return Err(RebuildError::BadOutput {
                        path: out.to_path_buf(),
                        what: format!(
                            "the pass counted other happened-before violations in its output \
                             ({counted:?}) than the output holds ({read:?})"
                        ),
                    });
                }
                (read, AfterCountedBy::ReadingTheOutput)
            }
        };
        summary.hb.after_counted_by = Some(by);
        summary.hb.violations_after = after.violations();
        summary.hb.after = Some(after);
    }
    Ok(summary)
}
