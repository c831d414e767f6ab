//! The job's pass with no central matcher (`crate::pipeline::split`, `crate::hb::partition`),
//! used whenever the trace can be split ([`HbContext::unsplittable`]), whatever the model and
//! repair. After the metadata exchange every process, 0 included:
//! 1. steps, writes and matches its own ranks against the proxies of the others', which arrive
//!    in batches (`PROXIES`) while the pass runs, as its own steps make and send theirs
//!    (`crate::pipeline::proxy_stream`: when every lane waits it tells process 0 (`STUCK`), which
//!    tells one process to force a lane (`FORCE`) only when the whole job waits); a process that
//!    fails tells every other (`FAILED`), and each ends with `END` to every other;
//! 2. sends process 0 its lanes' marks and its report (`SPLIT_DONE`), or `FAILED`.
//!
//! Process 0 adds the reports up: the output and the summary are those of one process.
//! No message waits for one that may not come: every process sends `END` to everyone whatever
//! happened to it, and takes every message until it has everyone's.

use crate::hb::{self, Estimates, HbContext};
use crate::job::{self, Mailbox, Transport};
use crate::options::{Options, RebuildError};
use crate::pipeline::split::{Owners, run_split, take_part_failed};
use crate::pipeline::{PassConfig, PassResult, lane_ids};
use std::path::Path;

use trace::Trace;
use trace::definitions::RankMeta;

/// Whether a job's pass runs split: a job of several processes, and nothing in the trace the
/// split cannot follow. Every model and repair splits: when the pass moves waits (`--hb`, the
/// replay), the proxies carry the owner's moved times (`crate::pipeline::proxy_stream`).
pub(crate) fn splits(metas: &[RankMeta], job: Option<&dyn Transport>) -> bool {
    job.is_some_and(|j| j.size() > 1) && HbContext::unsplittable(metas).is_none()
}

/// The process that owns a rank in a split pass: contiguous blocks of equal size (every
/// process matches its own).
pub fn split_owner_of(rank_idx: usize, ranks: usize, processes: usize) -> usize {
    if ranks == 0 || processes <= 1 {
        return 0;
    }
    (rank_idx * processes / ranks).min(processes - 1)
}

/// One process's part (see the module docs). Process 0 returns the pass's result over every
/// process, the others `None`. With the replay (which every process knows from `opts`, failed or
/// not), two passes: one that learns the estimates from the own ranks, whose tables every process
/// sends every other (`ESTIMATES`, or `FAILED`) and merges by their minimum, then the replay.
///
/// A process that failed before the pass (`Err(reason)`) still takes part, as failed, so that
/// nobody waits for it.
pub(crate) fn run_process(
    trace: &Trace,
    metas: &[RankMeta],
    cfg: Result<PassConfig<'_>, String>,
    opts: &Options,
    out: &Path,
    job: &dyn Transport,
    progress: &mut dyn FnMut(u64),
) -> Result<Option<PassResult>, RebuildError> {
    let (me, size) = (job.rank(), job.size());
    let by_rank_idx: Vec<usize> = (0..metas.len())
        .map(|i| split_owner_of(i, metas.len(), size))
        .collect();
    let owners = Owners {
        by_rank_idx: &by_rank_idx,
        me,
        processes: size,
    };
    let replay = opts.repair().replay;
    // Moved waits are checked in the written output, as one process checks them.
    let check = opts.moves_waits().then_some(out);
    let mail = Mailbox::new(job);
    let threads = cfg.as_ref().map(|c| c.threads).map_err(|_| ());
    let failed =
        |e: &RebuildError| format!("process {me}: {}", crate::pipeline::remote::error_text(e));
    let estimates = if replay {
        let learned = match &cfg {
            Ok(cfg) => {
                let learn = PassConfig::learning(metas, cfg.threads);
                run_split(trace, learn, &owners, &mail, &mut |_| {})
                    .map(|pass| pass.estimates)
                    .map_err(|e| failed(&e))
            }
            Err(reason) => {
                take_part_failed(&mail, reason.clone());
                Err(reason.clone())
            }
        };
        Some(exchange_estimates(learned, &mail)?)
    } else {
        None
    };
    let cfg = match (cfg, &estimates) {
        (Ok(_), Some(Err(reason))) => Err(reason.clone()),
        (cfg, _) => cfg,
    };
    let mut mine = match cfg {
        Ok(cfg) => {
            let cfg = PassConfig {
                estimates: estimates.as_ref().and_then(|e| e.as_ref().ok()),
                ..cfg
            };
            run_split(trace, cfg, &owners, &mail, progress).map_err(|e| failed(&e))
        }
        Err(reason) => {
            take_part_failed(&mail, reason.clone());
            Err(reason)
        }
    };
    // Process 0's summary shows the tables the replay used.
    if let (Ok(pass), Some(Ok(e))) = (&mut mine, estimates) {
        pass.estimates = e;
    }
    // The written output's violations: every process knows whether the pass failed (a failure
    // is told to all), so all take part or none.
    if let (Ok(pass), Some(out), Ok(threads)) = (&mut mine, check, &threads) {
        // Unless every process counted the violations of its output exactly as it wrote it.
        let exact = pass.report.output.filter(|c| c.exact);
        let counted = exact.filter(|_| !opts.verify);
        match all_counted(counted.is_some(), &mail)? {
            Ok(true) => {
                if let Some(counted) = counted {
                    pass.after = Some(counted.as_report(&pass.report));
                    pass.after_by_pass = true;
                }
            }
            Ok(false) => match check_output(out, &owners, *threads, &mail)? {
                // Both count the violations at this process's receives and exits (the other
                // counts of a split pass, such as waits on ranks that ended, depend on when
                // each process saw the others' lanes end).
                Ok(read)
                    if exact.is_some_and(|c| {
                        (c.messages, c.collectives, c.epochs)
                            != (
                                read.message_violations,
                                read.collective_violations,
                                read.epoch_violations,
                            )
                    }) =>
                {
                    mine = Err(format!(
                        "process {me}: the pass counted other happened-before violations in its \
                         output ({:?}) than its part of the output holds ({read:?})",
                        exact
                    ));
                }
                Ok(read) => pass.after = Some(read),
                Err(reason) => mine = Err(reason),
            },
            Err(reason) => mine = Err(reason),
        }
    }
    if me != 0 {
        match &mine {
            Ok(pass) => {
                let marks: Vec<(u32, crate::mapping::LaneMarks)> =
                    own_marks(metas, &by_rank_idx, me, pass);
                job.send(
                    0,
                    job::TAG_SPLIT_DONE,
                    &job::encode_split_done(&marks, &pass.report, pass.after.as_ref()),
                )
                .map_err(RebuildError::Job)?;
            }
            Err(reason) => {
                job.send(0, job::TAG_FAILED, reason.as_bytes())
                    .map_err(RebuildError::Job)?;
            }
        }
        return Ok(None);
    }
    // Process 0: everyone's part, whatever its own came to.
    let mut first_error = mine.as_ref().err().cloned();
    let mut all = mine.ok();
    for q in 1..size {
        let (_, tag, bytes) = mail.recv(|from, _| from == q).map_err(RebuildError::Job)?;
        match (tag, all.as_mut()) {
            (job::TAG_SPLIT_DONE, Some(pass)) => match job::decode_split_done(&bytes) {
                Ok((marks, report, after)) => {
                    pass.report = hb::merge_reports(&pass.report, &report);
                    pass.after = match (pass.after.take(), after) {
                        (Some(a), Some(b)) => Some(hb::merge_reports(&a, &b)),
                        (a, b) => a.or(b),
                    };
                    for (lane, m) in marks {
                        if let Some(slot) = pass.marks.get_mut(lane as usize) {
                            *slot = m;
                        }
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(format!("process {q}: {e}"));
                }
            },
            (job::TAG_SPLIT_DONE, None) => {}
            (job::TAG_FAILED, _) => {
                first_error.get_or_insert(String::from_utf8_lossy(&bytes).into_owned());
            }
            (other, _) => {
                first_error.get_or_insert(format!(
                    "process {q} sent an unexpected message (tag {other})"
                ));
            }
        }
    }
    match first_error {
        Some(reason) => Err(RebuildError::Job(reason)),
        None => Ok(all),
    }
}

/// What one process sent in [`exchange_with_all`]: its bytes, or why it has none.
type Sent = Result<Vec<u8>, String>;

/// Sends `mine` (or why this process has nothing) to every other process under `tag`, and takes
/// theirs: per other process, its bytes or its failure. In `size - 1` rounds, each sending to
/// one process and taking from another, so that no two processes wait on each other's sends
/// (large messages complete only when the receiver takes them).
fn exchange_with_all(
    mail: &Mailbox<'_>,
    tag: u32,
    mine: &Sent,
) -> Result<Vec<(usize, Sent)>, RebuildError> {
    let (me, size) = (mail.job.rank(), mail.job.size());
    let (my_tag, my_bytes) = match mine {
        Ok(bytes) => (tag, bytes),
        Err(reason) => (job::TAG_FAILED, &reason.as_bytes().to_vec()),
    };
    let mut theirs = Vec::with_capacity(size.saturating_sub(1));
    for round in 1..size {
        let (to, from) = ((me + round) % size, (me + size - round) % size);
        mail.job
            .send_later(to, my_tag, my_bytes.clone())
            .map_err(RebuildError::Job)?;
        let (_, got, bytes) = mail.recv(|q, _| q == from).map_err(RebuildError::Job)?;
        mail.job.complete_sends().map_err(RebuildError::Job)?;
        theirs.push((
            from,
            match got {
                t if t == tag => Ok(bytes),
                job::TAG_FAILED => Err(String::from_utf8_lossy(&bytes).into_owned()),
                other => Err(format!(
                    "process {from} sent an unexpected message (tag {other})"
                )),
            },
        ));
    }
    Ok(theirs)
}

/// Sends this process's learned tables (or why it has none) to every other process, takes
/// theirs, and merges them: every process ends with the same tables, or the same failure (the
/// tables outgrow MPI's eager sends with many ranks, hence [`exchange_with_all`]).
fn exchange_estimates(
    learned: Result<Estimates, String>,
    mail: &Mailbox<'_>,
) -> Result<Result<Estimates, String>, RebuildError> {
    let mine = learned
        .as_ref()
        .map(job::encode_estimates)
        .map_err(Clone::clone);
    let mut merged = learned;
    for (from, bytes) in exchange_with_all(mail, job::TAG_ESTIMATES, &mine)? {
        let theirs = bytes.and_then(|bytes| {
            job::decode_estimates(&bytes).map_err(|e| format!("process {from}'s estimates: {e}"))
        });
        merged = match (merged, theirs) {
            (Ok(mut mine), Ok(theirs)) => {
                mine.merge(&theirs);
                Ok(mine)
            }
            (Err(reason), _) | (Ok(_), Err(reason)) => Err(reason),
        };
    }
    Ok(merged)
}

/// Whether every process counted the violations of its output exactly (`mine`: this one did).
/// Every process whose pass went well asks, and a failed pass is told to all, so all ask or none.
/// Each process sends every other the same flag, so all come to the same answer (anything but
/// a 1 reads as "not counted", which makes every process check the output).
fn all_counted(mine: bool, mail: &Mailbox<'_>) -> Result<Result<bool, String>, RebuildError> {
    let mut all = Ok(mine);
    for (_, theirs) in exchange_with_all(mail, job::TAG_OUTPUT_COUNTED, &Ok(vec![u8::from(mine)]))?
    {
        all = match (all, theirs) {
            (Err(reason), _) | (Ok(_), Err(reason)) => Err(reason),
            (Ok(all), Ok(flag)) => Ok(all && flag == [1]),
        };
    }
    Ok(all)
}

/// The written output matched, split as well: each process its own ranks, as written.
fn check_output(
    out: &Path,
    owners: &Owners<'_>,
    threads: usize,
    mail: &Mailbox<'_>,
) -> Result<Result<hb::HbReport, String>, RebuildError> {
    let failed = |e: &RebuildError| {
        format!(
            "process {}: {}",
            owners.me,
            crate::pipeline::remote::error_text(e)
        )
    };
    let written = Trace::open(out).map_err(|e| failed(&RebuildError::from(e)));
    Ok(match written_metas(written, owners, threads, mail)? {
        Ok((written, metas)) => {
            let cfg = PassConfig::as_recorded(&metas, threads);
            run_split(&written, cfg, owners, mail, &mut |_| {})
                .map(|check| check.report)
                .map_err(|e| failed(&e))
        }
        // Taking part as failed, so that a process that did start the check (its reading of
        // the others' metadata went well) hears of it rather than waits.
        Err(reason) => {
            take_part_failed(mail, reason.clone());
            Err(reason)
        }
    })
}

/// Every rank's metadata of the written output, each process reading only its own ranks' files
/// and sending their metadata to every other. A process that could not open or read the output
/// still takes part, so every process hears of it.
fn written_metas(
    written: Result<Trace, String>,
    owners: &Owners<'_>,
    threads: usize,
    mail: &Mailbox<'_>,
) -> Result<Result<(Trace, Vec<RankMeta>), String>, RebuildError> {
    let scanned = written.as_ref().map_err(Clone::clone).and_then(|written| {
        let own: Vec<usize> = (0..written.ranks.len())
            .filter(|&i| owners.by_rank_idx.get(i) == Some(&owners.me))
            .collect();
        job::scan_ranks(written, &own, threads).map_err(|e| {
            format!(
                "process {}: {}",
                owners.me,
                crate::pipeline::remote::error_text(&e)
            )
        })
    });
    let mine = scanned
        .as_ref()
        .map(|s| job::encode_metas(&job::meta_records(s)))
        .map_err(Clone::clone);
    let theirs = exchange_with_all(mail, job::TAG_OUTPUT_METAS, &mine)?;
    let (written, scanned) = match (written, scanned) {
        (Ok(written), Ok(scanned)) => (written, scanned),
        (Err(reason), _) | (_, Err(reason)) => return Ok(Err(reason)),
    };
    let mut slots: Vec<Option<RankMeta>> = vec![None; written.ranks.len()];
    for (idx, meta, _) in scanned {
        slots[idx] = Some(meta);
    }
    for (from, bytes) in theirs {
        let decoded = bytes.and_then(|bytes| {
            job::decode_metas(&bytes).map_err(|e| format!("process {from}'s metadata: {e}"))
        });
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(reason) => return Ok(Err(reason)),
        };
        for (idx, meta, _) in decoded {
            match slots.get_mut(idx) {
                Some(slot) if owners.by_rank_idx.get(idx) == Some(&from) => *slot = Some(meta),
                _ => {
                    return Ok(Err(format!(
                        "process {from} sent the metadata of rank index {idx}, which it does not own"
                    )));
                }
            }
        }
    }
    let Some(mut metas) = slots.into_iter().collect::<Option<Vec<RankMeta>>>() else {
        return Ok(Err(
            "no process sent the metadata of every written rank".into()
        ));
    };
    trace::clock::align_clocks(&mut metas);
    Ok(Ok((written, metas)))
}

/// The marks of the lanes of the ranks process `me` owns, by lane number.
fn own_marks(
    metas: &[RankMeta],
    by_rank_idx: &[usize],
    me: usize,
    pass: &PassResult,
) -> Vec<(u32, crate::mapping::LaneMarks)> {
    lane_ids(metas)
        .iter()
        .enumerate()
        .filter(|(_, id)| {
            metas
                .iter()
                .position(|m| m.rank == id.rank)
                .is_some_and(|i| by_rank_idx[i] == me)
        })
        .map(|(lane, _)| (lane as u32, pass.marks[lane]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::{Event, FileHeader, Marker, RankFileWriter, RawBuf, rank_file_name};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A trace of `ranks` ranks, each one chunk holding its `InitDone` marker.
    fn write_small_trace(dir: &Path, ranks: u32) {
        let mut encoder = format::ChunkEncoder::new(1);
        for rank in 0..ranks {
            let header = FileHeader::nanoseconds(rank, ranks, "split test");
            let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).unwrap();
            let mut w = RankFileWriter::new(file, &header).unwrap();
            let mut buf = RawBuf::new();
            buf.push_event(&Event::Marker(Marker::InitDone { time: 1000 }));
            w.write_chunk(&encoder.encode(rank, 0, 0, &buf)).unwrap();
        }
    }

    /// The check of a split pass's output when one process cannot read its own ranks' files:
    /// every process must hear of it and fail, naming that process, and none may wait for it
    /// (a process that left the exchange early would leave the others waiting for ever).
    #[test]
    fn a_process_that_cannot_read_its_output_fails_the_check_everywhere_and_hangs_none() {
        let dir = std::env::temp_dir().join(format!(
            "evenflush-rec-written-metas-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        write_small_trace(&dir, 6);
        let by_rank_idx = [0, 0, 1, 1, 2, 2];
        for broken in [None, Some(1usize)] {
            let transports = job::threads::connected(3);
            let (done_tx, done_rx) = mpsc::channel();
            let opened = std::sync::Arc::new(std::sync::Barrier::new(3));
            let mut handles = Vec::new();
            for transport in transports {
                let (dir, done, opened) = (dir.clone(), done_tx.clone(), opened.clone());
                handles.push(std::thread::spawn(move || {
                    let me = transport.rank();
                    let written = Trace::open(&dir).map_err(|e| e.to_string());
                    opened.wait();
                    // The broken process's files go after the output was opened, as a file
                    // that vanishes or cannot be read between the pass and its check.
                    if broken == Some(me) {
                        for (i, &owner) in by_rank_idx.iter().enumerate() {
                            if owner == me {
                                let name = rank_file_name(i as u32, 0);
                                std::fs::rename(dir.join(&name), dir.join(format!("{name}.gone")))
                                    .unwrap();
                            }
                        }
                    }
                    let owners = Owners {
                        by_rank_idx: &by_rank_idx,
                        me,
                        processes: 3,
                    };
                    let mail = Mailbox::new(&transport);
                    let got = written_metas(written, &owners, 1, &mail)
                        .map(|r| r.map(|(_, metas)| metas.len()));
                    let _ = done.send((me, got));
                }));
            }
            drop(done_tx);
            let mut results = Vec::new();
            for _ in 0..3 {
                match done_rx.recv_timeout(Duration::from_secs(20)) {
                    Ok(r) => results.push(r),
                    Err(_) => panic!("broken {broken:?}: a process still waits after 20 s"),
                }
            }
            for h in handles {
                h.join().unwrap();
            }
            results.sort_by_key(|r| r.0);
            for (me, got) in results {
                match (broken, got) {
                    (None, Ok(Ok(n))) => assert_eq!(n, 6, "process {me}"),
                    (Some(b), Ok(Err(reason))) => assert!(
                        reason.contains(&format!("process {b}")),
                        "process {me}: {reason}"
                    ),
                    (_, other) => panic!(
                        "broken {broken:?}, process {me}: {:?}",
                        other.map_err(|e| crate::pipeline::remote::error_text(&e))
                    ),
                }
            }
            // Put the files back for the next round.
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if let Some(name) = path.to_str().and_then(|p| p.strip_suffix(".gone")) {
                    std::fs::rename(&path, name).unwrap();
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
