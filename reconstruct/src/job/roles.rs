//! The processes of an MPI job (`mpirun -np N evenflush reconstruct`, [`crate::job`] carries their
//! messages): process 0 gathers every rank's metadata from the owners and passes it on; every
//! other process reads the metadata of the ranks it owns, then steps them as process 0 asks. Both
//! create the output files they write.

use std::path::Path;

use trace::Trace;
use trace::clock::align_clocks;
use trace::definitions::RankMeta;

use crate::job::{self, Transport};
use crate::options::{Options, RebuildError};
use crate::output::RankOutput;
use crate::pipeline::{self, PassConfig, WorkerOutput};

/// The output files this process writes (the others' as handles only): those of the ranks it
/// steps, or with the repair on, every one on process 0, since the output times come out of its
/// matcher.
pub(crate) fn create_outputs(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    me: usize,
    processes: usize,
    split: bool,
) -> Result<Vec<RankOutput>, RebuildError> {
    let writes_rank = |i: usize| {
        if opts.moves_waits() {
            me == 0
        } else if split {
            job::split::split_owner_of(i, trace.ranks.len(), processes) == me
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

/// The process that reads rank `rank_idx`'s metadata: the one that will step the rank if the
/// pass splits, as it does unless the metadata shows something the split cannot follow. Split
/// passes own equal blocks, and a process then re-reads only chunks it has already checked once
/// (`format::reader::verified`); a trace that runs centrally (whose process 0 steps a smaller
/// block) is still read correctly with the split's blocks.
fn scan_owner_of(rank_idx: usize, ranks: usize, processes: usize) -> usize {
    job::split::split_owner_of(rank_idx, ranks, processes)
}

/// Process 0's side of the metadata exchange: every rank's metadata in trace order, and the
/// `ALL_METAS` message that carries it. An owner's failure is reported by its number.
pub(crate) fn gather_metas(
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
                        Some(slot) if scan_owner_of(idx, ranks, job.size()) == p => {
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
        .filter(|&i| scan_owner_of(i, ranks, job.size()) == job.rank())
        .collect();
    job::scan_ranks(trace, &own, opts.threads).map_err(|e| pipeline::remote::error_text(&e))
}

/// An owner's side: reads the metadata of its own ranks and sends it to process 0.
fn send_own_metas(trace: &Trace, opts: &Options, job: &dyn Transport) -> Result<(), String> {
    let scanned = scan_own(trace, opts, job)?;
    job.send(
        0,
        job::TAG_METAS,
        &job::encode_metas(&job::meta_records(&scanned)),
    )
}

/// A process other than 0: reads its ranks' metadata, waits for everyone's (which also says the
/// output directory is prepared), then steps its ranks as asked (see [`pipeline::remote::serve`]).
pub(crate) fn serve_as_owner(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    job: &dyn Transport,
) -> Result<(), RebuildError> {
    if let Err(reason) = send_own_metas(trace, opts, job) {
        job.send(0, job::TAG_FAILED, reason.as_bytes())
            .map_err(RebuildError::Job)?;
        return pipeline::remote::serve_failed(job, &reason, true);
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
    let split = match &metas {
        Ok(metas) => job::split::splits(metas, Some(job)),
        Err(_) => false,
    };
    let prepared = metas.map_err(RebuildError::Job).map(|metas| {
        let outputs = create_outputs(trace, out, opts, job.rank(), job.size(), split);
        (metas, outputs)
    });
    let (metas, outputs) = match prepared {
        Ok((metas, outputs)) if split => {
            // The split pass has no process 0 to ask: one that cannot write takes part as failed.
            let ids = pipeline::lane_ids(&metas);
            let cfg = match &outputs {
                Ok(outputs) => Ok(PassConfig {
                    metas: &metas,
                    remove: Some(opts.remove),
                    repair: opts.repair(),
                    threads: opts.threads,
                    output: Some(WorkerOutput::new(outputs, opts, ids.len())),
                    job: None,
                    estimates: None,
                    encode: None,
                }),
                Err(e) => Err(format!(
                    "process {}: {}",
                    job.rank(),
                    pipeline::remote::error_text(e)
                )),
            };
            return job::split::run_process(trace, &metas, cfg, opts, out, job, &mut |_| {})
                .map(|_| ());
        }
        Ok((metas, Ok(outputs))) => (metas, outputs),
        Ok((_, Err(e))) | Err(e) => {
            return pipeline::remote::serve_failed(job, &pipeline::remote::error_text(&e), false);
        }
    };
    let ids = pipeline::lane_ids(&metas);
    pipeline::remote::serve(
        trace,
        PassConfig {
            metas: &metas,
            remove: Some(opts.remove),
            repair: opts.repair(),
            threads: opts.threads,
            output: (!opts.moves_waits()).then(|| WorkerOutput::new(&outputs, opts, ids.len())),
            job: Some(job),
            // Owners only step their ranks; process 0's matcher replays.
            estimates: None,
            encode: None,
        },
        job,
    )
}
