//! `evenflush info`: what a trace holds, computed by streaming every rank's events once.

use std::collections::{BTreeMap, HashMap};

use format::{Event, Marker};
use serde::Serialize;

use crate::memory::{JobMemory, RankMemory};
use trace::Skipped;
use trace::Trace;
use trace::TraceError;
use trace::clock::align_clocks;
use trace::definitions::RankMeta;
use trace::open::for_each_event;
use trace::open::ticks_to_s;
use trace::span;

#[derive(Debug, Default, Serialize)]
pub struct RankInfo {
    pub rank: u32,
    /// Records of every kind held by this rank's chunks.
    pub events: u64,
    /// MPI calls, each folded poll counted (`Polls` records hold many).
    pub mpi_calls: u64,
    /// `Polls` records, and the polls folded into them.
    pub poll_runs: u64,
    pub folded_polls: u64,
    pub bytes_raw: u64,
    pub bytes_stored: u64,
    pub threads: u32,
    /// From the end of `MPI_Init` to the start of `MPI_Finalize`, seconds (None if either is missing).
    pub span_s: Option<f64>,
    pub lost_events: u64,
    /// The trace was written by a signal handler or exit hook, not a clean finalize.
    pub abnormal_end: bool,
    /// The trace says how recording ended: at `MPI_Finalize` or at an abnormal end. Without
    /// either, the process was killed outright (SIGKILL, out of memory) while it ran or wrote.
    pub ended: bool,
    /// Where the rank ran, from its `RankInfo` record (`None` in traces older than that record).
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// First line of the MPI library's version string.
    pub mpi_library: Option<String>,
    /// Every writer that wrote this rank's files, in order (`Writer` records).
    pub writers: Vec<WriterInfo>,
    /// Times the hard limit made this rank compress its buffers in memory (`Marker::Compressed`;
    /// the same as `memory.in_memory_compressions`, kept for scripts that read it here).
    pub in_memory_compressions: u64,
    /// The rank warned that its node ran low on memory (`Marker::MemoryLow`).
    pub memory_low: bool,
    /// Its memory samples and thresholds, summarised (empty in traces without them).
    pub memory: RankMemory,
}

/// One `Writer` record of a rank: which backend wrote its files from part `part` on.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WriterInfo {
    /// `posix`, `uring` or `mpiio`.
    pub requested: String,
    pub used: String,
    /// `opened` (the requested writer), `fallback` (the requested one was unavailable) or
    /// `finalize-handover` (MPI-IO handing the end of the trace to posix at `MPI_Finalize`).
    pub change: String,
    pub part: u32,
    /// Why, for a fallback or a handover.
    pub reason: String,
}

#[derive(Debug, Default, Serialize, Clone, Copy, PartialEq)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    /// Nearest-rank quantiles; zeros for an empty sample.
    pub fn of(values: &mut [f64]) -> Quantiles {
        if values.is_empty() {
            return Quantiles::default();
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let at =
            |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Quantiles {
            p50: at(0.5),
            p99: at(0.99),
            max: values[values.len() - 1],
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct SuspensionInfo {
    pub count: u64,
    pub flushes: u64,
    pub z_us: Quantiles,
    pub overshoot_us: Quantiles,
    /// Per suspension: latest minus earliest resume instant over ranks, in rank 0's clock.
    pub spread_us: Quantiles,
    /// Per suspension: longest minus shortest pause (end − start) over ranks. Equalisation makes
    /// this zero whatever the ranks' start skew, which `spread_us` includes.
    pub pause_diff_us: Quantiles,
    /// How long a suspension that wrote nothing kept a rank away from its program (end − start):
    /// the protocol's own cost.
    pub noflush_pause_us: Quantiles,
    /// Raw trace bytes written per second of write time, over all flushes of all ranks.
    pub flush_raw_mb_per_s: f64,
    /// The same for the compressed bytes that reached the disk.
    pub flush_stored_mb_per_s: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Info {
    pub dir: String,
    pub ranks: u32,
    /// The run every rank belongs to (`RankInfo.run_id`), when they carry one.
    pub run_id: Option<String>,
    /// Host name to the ranks that ran there, from the ranks' `RankInfo` records.
    pub hosts: BTreeMap<String, Vec<u32>>,
    /// The Slurm job step the ranks ran in (`meta.json`), if any.
    pub slurm: Option<trace::slurm::SlurmStep>,
    /// Hosts that ran more ranks than they had cores for the job.
    pub oversubscribed: Vec<trace::oversubscription::Crowding>,
    /// Ranks whose writer fell back from the requested one (see `per_rank[].writers`).
    pub writer_fallbacks: Vec<u32>,
    /// Records of every kind, all ranks.
    pub events_total: u64,
    pub mpi_calls_total: u64,
    /// Polls that found nothing, folded into `poll_runs_total` records.
    pub folded_polls_total: u64,
    pub poll_runs_total: u64,
    pub functions: BTreeMap<String, u64>,
    pub user_events: BTreeMap<String, u64>,
    pub regions: BTreeMap<String, u64>,
    pub per_rank: Vec<RankInfo>,
    pub lost_events: u64,
    pub local_flushes: u64,
    pub recording_stopped: bool,
    /// Ranks whose trace has no end ([`RankInfo::ended`]): their last events are missing.
    pub unended_ranks: Vec<u32>,
    /// Max over ranks of the span from the end of `MPI_Init` to the start of `MPI_Finalize`.
    pub span_s: f64,
    /// What one clock read costs, ns, fastest and slowest over the ranks that record it
    /// (`read_ticks` of the file header; `None` when none does): the recorder charges two per
    /// call, and `reconstruct` reports their share of DP.
    pub clock_read_ns: Option<(f64, f64)>,
    pub suspension: SuspensionInfo,
    /// The job's memory (`None` for traces without memory records).
    pub memory: Option<JobMemory>,
    /// What could not be read, file by file.
    pub skipped: Vec<Skipped>,
}

pub fn summarize(trace: &Trace) -> Result<Info, TraceError> {
    let mut info = Info {
        dir: trace.dir.display().to_string(),
        ranks: trace.world_size,
        ..Default::default()
    };
    let mut z_us = Vec::new();
    let mut overshoot_us = Vec::new();
    let mut noflush_pause_us = Vec::new();
    let (mut flushed_raw, mut flushed_stored, mut flush_ns) = (0u64, 0u64, 0u64);
    // Resume instants in rank 0's clock, per suspension sequence number.
    let mut resumes: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut pauses: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut run_ids = std::collections::BTreeSet::new();
    let mut metas: Vec<RankMeta> = Vec::with_capacity(trace.ranks.len());

    for files in &trace.ranks {
        let mut rank = RankInfo {
            rank: files.rank,
            ..Default::default()
        };
        let mut function_names: HashMap<u16, String> = HashMap::new();
        let mut strings: HashMap<u32, String> = HashMap::new();
        let mut calls_by_id: HashMap<u16, u64> = HashMap::new();
        let mut user_by_id: HashMap<u32, u64> = HashMap::new();
        let mut regions_by_id: HashMap<u32, u64> = HashMap::new();
        // The span's markers, clock samples and suspensions, gathered as every pass does.
        let mut meta = RankMeta {
            rank: files.rank,
            ..Default::default()
        };
        let mut streams = std::collections::BTreeSet::new();
        let mut suspensions = Vec::new();

        let (clock, skipped) = for_each_event(
            files,
            |chunk| {
                rank.events += chunk.events;
                rank.bytes_raw += chunk.raw_len;
                rank.bytes_stored += chunk.stored_len;
                streams.insert(chunk.stream);
            },
            |stream, event| {
                meta.see(stream, event);
                rank.memory.see(event);
                match event {
                    Event::Call(c) => {
                        *calls_by_id.entry(c.func).or_default() += 1;
                    }
                    Event::Polls(p) => {
                        *calls_by_id.entry(p.func).or_default() += p.count;
                        rank.poll_runs += 1;
                        rank.folded_polls += p.count;
                    }
                    Event::User(u) => *user_by_id.entry(u.name).or_default() += 1,
                    Event::Region(r) if r.begin => *regions_by_id.entry(r.name).or_default() += 1,
                    Event::FunctionDef { id, name } => {
                        function_names.insert(*id, name.clone());
                    }
                    Event::StringDef { id, text } => {
                        strings.insert(*id, text.clone());
                    }
                    Event::Suspension(s) => suspensions.push(s.clone()),
                    Event::RankInfo(r) => {
                        rank.host = Some(r.host.clone());
                        rank.pid = Some(r.pid);
                        rank.mpi_library = Some(r.mpi_library.clone());
                        if !r.run_id.is_empty() {
                            run_ids.insert(r.run_id.clone());
                        }
                    }
                    Event::Writer(w) => rank.writers.push(WriterInfo {
                        requested: w.requested.name().into(),
                        used: w.used.name().into(),
                        change: w.change.name().into(),
                        part: w.part,
                        reason: w.reason.clone(),
                    }),
                    Event::Marker(m) => match *m {
                        Marker::InitDone { .. } | Marker::FinalizeStart { .. } => {}
                        Marker::Lost { events, .. } => rank.lost_events += events,
                        Marker::LocalFlush { .. } => info.local_flushes += 1,
                        Marker::RecordingStopped { .. } => info.recording_stopped = true,
                        Marker::AbnormalEnd { .. } => rank.abnormal_end = true,
                        Marker::Stuck { .. } => {}
                        Marker::Compressed { .. } | Marker::MemoryLow { .. } => {}
                    },
                    _ => {}
                }
            },
        )?;
        meta.clock = clock;
        info.skipped.extend(skipped);
        rank.in_memory_compressions = rank.memory.in_memory_compressions;
        rank.memory_low = rank.memory.memory_low;
        rank.threads = streams.len() as u32;
        for (id, n) in calls_by_id {
            let name = function_names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("function#{id}"));
            *info.functions.entry(name).or_default() += n;
            rank.mpi_calls += n;
        }
        for (id, n) in user_by_id {
            let name = strings
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("string#{id}"));
            *info.user_events.entry(name).or_default() += n;
        }
        for (id, n) in regions_by_id {
            let name = strings
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("string#{id}"));
            *info.regions.entry(name).or_default() += n;
        }
        for s in &suspensions {
            info.suspension.count = info.suspension.count.max(s.seq + 1);
            if files.rank == 0 {
                z_us.push(s.z_ns as f64 / 1e3);
                info.suspension.flushes += s.flushed as u64;
            }
            overshoot_us.push(s.overshoot_ns as f64 / 1e3);
            if s.flushed {
                flushed_raw += s.bytes_raw;
                flushed_stored += s.bytes_stored;
                flush_ns += s.write_ns;
            } else {
                noflush_pause_us.push(ticks_to_s(&clock, s.end.saturating_sub(s.start)) * 1e6);
            }
            let resume_ns = ticks_to_s(&clock, s.end) * 1e9 + s.offset_ns;
            resumes.entry(s.seq).or_default().push(resume_ns);
            pauses
                .entry(s.seq)
                .or_default()
                .push(ticks_to_s(&clock, s.end.saturating_sub(s.start)) * 1e9);
        }
        if rank.writers.iter().any(|w| w.change == "fallback") {
            info.writer_fallbacks.push(files.rank);
        }
        info.events_total += rank.events;
        info.poll_runs_total += rank.poll_runs;
        info.folded_polls_total += rank.folded_polls;
        info.mpi_calls_total += rank.mpi_calls;
        info.lost_events += rank.lost_events;
        rank.ended = meta.span_end().is_some();
        if !rank.ended {
            info.unended_ranks.push(rank.rank);
        }
        info.per_rank.push(rank);
        metas.push(meta);
    }
    // Spans in the global clock, once every rank's clock is placed among the others.
    align_clocks(&mut metas);
    for (rank, meta) in info.per_rank.iter_mut().zip(&metas) {
        rank.span_s = span::global_s(meta);
    }
    info.span_s = span::longest_s(&metas);
    info.clock_read_ns = metas
        .iter()
        .filter(|m| m.clock.read_ticks > 0)
        .map(|m| trace::clock::read_ns(&m.clock))
        .fold(None, |range, ns| match range {
            None => Some((ns, ns)),
            Some((lo, hi)) => Some((f64::min(lo, ns), f64::max(hi, ns))),
        });
    // `collect` refuses to mix runs; a single directory holding two runs' files is reported here.
    info.run_id = match run_ids.len() {
        0 => None,
        1 => run_ids.into_iter().next(),
        _ => Some(run_ids.into_iter().collect::<Vec<_>>().join(" + ")),
    };
    info.hosts = trace::definitions::ranks_by_host(&metas);
    info.slurm = trace::slurm::SlurmStep::from_meta(trace.meta.as_ref());
    info.oversubscribed = trace::oversubscription::crowded_hosts(trace.meta.as_ref(), &info.hosts);
    info.suspension.count = resumes.len() as u64;
    info.suspension.z_us = Quantiles::of(&mut z_us);
    info.suspension.overshoot_us = Quantiles::of(&mut overshoot_us);
    info.suspension.noflush_pause_us = Quantiles::of(&mut noflush_pause_us);
    if flush_ns > 0 {
        let seconds = flush_ns as f64 * 1e-9;
        info.suspension.flush_raw_mb_per_s = flushed_raw as f64 / 1e6 / seconds;
        info.suspension.flush_stored_mb_per_s = flushed_stored as f64 / 1e6 / seconds;
    }
    let mut spreads: Vec<f64> = resumes
        .values()
        .filter(|v| v.len() == trace.world_size as usize)
        .map(|v| {
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            (hi - lo) / 1e3
        })
        .collect();
    info.suspension.spread_us = Quantiles::of(&mut spreads);
    let mut pause_diffs: Vec<f64> = pauses
        .values()
        .filter(|v| v.len() == trace.world_size as usize)
        .map(|v| {
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            (hi - lo) / 1e3
        })
        .collect();
    info.suspension.pause_diff_us = Quantiles::of(&mut pause_diffs);
    let memories: Vec<(u32, &RankMemory)> =
        info.per_rank.iter().map(|r| (r.rank, &r.memory)).collect();
    info.memory = JobMemory::of(&memories);
    Ok(info)
}

/// `uring`, `mpiio>posix@p1` (handover at part 1), `uring!posix` (fallback), `?` when unrecorded.
fn writers_text(writers: &[WriterInfo]) -> String {
    if writers.is_empty() {
        return "?".into();
    }
    writers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let used = if w.change == "fallback" {
                format!("{}!{}", w.requested, w.used)
            } else {
                w.used.clone()
            };
            match i {
                0 if w.part == 0 => used,
                _ => format!("{used}@p{}", w.part),
            }
        })
        .collect::<Vec<_>>()
        .join(">")
}

/// The human-readable form of [`Info`].
pub fn render_table(info: &Info) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "trace        {}", info.dir);
    let _ = writeln!(s, "ranks        {}", info.ranks);
    if let Some(run) = &info.run_id {
        let _ = writeln!(s, "run          {run}");
    }
    if let Some(step) = &info.slurm {
        let _ = writeln!(s, "slurm        {}", step.describe());
    }
    let _ = writeln!(
        s,
        "events       {} ({} MPI calls)",
        info.events_total, info.mpi_calls_total
    );
    if info.poll_runs_total > 0 {
        let _ = writeln!(
            s,
            "polls        {} that found nothing, folded into {} records",
            info.folded_polls_total, info.poll_runs_total
        );
    }
    let _ = writeln!(
        s,
        "span         {:.6} s (end of MPI_Init to start of MPI_Finalize, or to an abnormal end; max over ranks)",
        info.span_s
    );
    let _ = writeln!(s, "lost events  {}", info.lost_events);
    match info.clock_read_ns {
        Some((lo, hi)) if hi - lo < 0.05 => {
            let _ = writeln!(
                s,
                "clock read   {lo:.1} ns (two per call in the recorder's cost)"
            );
        }
        Some((lo, hi)) => {
            let _ = writeln!(
                s,
                "clock read   {lo:.1}-{hi:.1} ns over the ranks (two per call in the recorder's cost)"
            );
        }
        None => {}
    }
    if info.local_flushes > 0 {
        let _ = writeln!(
            s,
            "local flushes {} (hard limit reached: timing around them is perturbed)",
            info.local_flushes
        );
    }
    if info.recording_stopped {
        let _ = writeln!(
            s,
            "RECORDING STOPPED before the end of the run (see the markers in the trace)"
        );
    }
    if !info.unended_ranks.is_empty() {
        let _ = writeln!(
            s,
            "CUT SHORT    rank(s) {}: the trace has no end (neither MPI_Finalize nor an abnormal \
             end): the process was killed outright (SIGKILL, out of memory, a launcher's clean-up) \
             while it ran or wrote its trace, and its last events are missing",
            trace::collect::rank_list(&info.unended_ranks)
        );
    }
    let _ = writeln!(s, "\n{:<28} {:>12}", "MPI function", "calls");
    let mut functions: Vec<_> = info.functions.iter().collect();
    functions.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (name, n) in functions {
        let _ = writeln!(s, "{name:<28} {n:>12}");
    }
    if !info.user_events.is_empty() {
        let _ = writeln!(s, "\n{:<28} {:>12}", "user record", "count");
        for (name, n) in &info.user_events {
            let _ = writeln!(s, "{name:<28} {n:>12}");
        }
    }
    let _ = writeln!(
        s,
        "\n{:>6} {:>12} {:>10} {:>14} {:>14} {:>8}  {:<16} {:>8}  writer",
        "rank", "events", "calls", "bytes raw", "bytes stored", "threads", "host", "pid"
    );
    for r in &info.per_rank {
        let _ = writeln!(
            s,
            "{:>6} {:>12} {:>10} {:>14} {:>14} {:>8}  {:<16} {:>8}  {}",
            r.rank,
            r.events,
            r.mpi_calls,
            r.bytes_raw,
            r.bytes_stored,
            r.threads,
            r.host.as_deref().unwrap_or("?"),
            r.pid.map_or("?".to_string(), |p| p.to_string()),
            writers_text(&r.writers)
        );
    }
    if !info.hosts.is_empty() {
        let _ = writeln!(s);
        for (host, ranks) in &info.hosts {
            let _ = writeln!(
                s,
                "host {host:<16} ranks {}",
                trace::collect::rank_list(ranks)
            );
        }
        for w in trace::oversubscription::warnings(&info.oversubscribed) {
            let _ = writeln!(s, "OVERSUBSCRIBED {w}");
        }
    }
    for r in &info.per_rank {
        for w in r.writers.iter().filter(|w| w.change == "fallback") {
            let _ = writeln!(
                s,
                "WRITER FALLBACK rank {}: {} asked, {} used from part {}: {}",
                r.rank, w.requested, w.used, w.part, w.reason
            );
        }
    }
    let sus = &info.suspension;
    let _ = writeln!(
        s,
        "\nsuspensions  {} ({} with a flush); Z p50 {:.1} µs, max {:.1} µs; overshoot p50/p99/max {:.1}/{:.1}/{:.1} µs; resume spread p50/p99/max {:.1}/{:.1}/{:.1} µs",
        sus.count,
        sus.flushes,
        sus.z_us.p50,
        sus.z_us.max,
        sus.overshoot_us.p50,
        sus.overshoot_us.p99,
        sus.overshoot_us.max,
        sus.spread_us.p50,
        sus.spread_us.p99,
        sus.spread_us.max
    );
    if sus.count > 0 {
        let _ = writeln!(
            s,
            "             pause inequality (longest − shortest pause) p50/p99/max {:.1}/{:.1}/{:.1} µs",
            sus.pause_diff_us.p50, sus.pause_diff_us.p99, sus.pause_diff_us.max
        );
    }
    if sus.count > sus.flushes {
        let _ = writeln!(
            s,
            "             pause without a flush p50/p99/max {:.1}/{:.1}/{:.1} µs",
            sus.noflush_pause_us.p50, sus.noflush_pause_us.p99, sus.noflush_pause_us.max
        );
    }
    if sus.flushes > 0 {
        let _ = writeln!(
            s,
            "             flush throughput {:.0} MB/s of raw trace ({:.0} MB/s compressed to disk)",
            sus.flush_raw_mb_per_s, sus.flush_stored_mb_per_s
        );
    }
    match &info.memory {
        Some(m) => s.push_str(&m.render()),
        None => s.push_str(
            "memory       no memory samples (recorders before chunk version 4 wrote none)\n",
        ),
    }
    // Skipped data is reported once, on stderr, by the command (see `Skipped`'s Display).
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let q = Quantiles::of(&mut v);
        assert_eq!(
            q,
            Quantiles {
                p50: 50.0,
                p99: 99.0,
                max: 100.0
            }
        );
        assert_eq!(Quantiles::of(&mut []), Quantiles::default());
        let mut one = vec![7.0];
        assert_eq!(
            Quantiles::of(&mut one),
            Quantiles {
                p50: 7.0,
                p99: 7.0,
                max: 7.0
            }
        );
    }
}
