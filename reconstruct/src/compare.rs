//! `evenflush compare REF RUN`: how close one run's timing is to another's, call by call.
//!
//! Calls are aligned by (rank, stream, position among that stream's MPI calls); two runs whose
//! call sequences differ are not the same program run, and are refused with the first difference.
//! Times are in each run's global clock; start times are taken relative to the run's origin, the
//! earliest end of `MPI_Init` over its ranks.

use std::collections::BTreeMap;

use format::{Event, MpiCall};
use serde::Serialize;

use crate::clock::{MapCursor, RankMeta, TimeMap};
use crate::distribution::{Durations, qq_share_within};
use crate::hist::LogHistogram;
use crate::info::Quantiles;
use crate::lanes::{LaneReader, OpenRank};
use crate::rebuild::scan;
use crate::trace::{Skipped, Trace, TraceError};

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("not the same program: {0}")]
    Different(String),
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FunctionDelta {
    pub calls: u64,
    /// |duration in RUN − duration in REF|, µs.
    pub duration_delta_us: Quantiles,
    /// Share of calls whose duration is within 10 µs of the reference's at the same rank in the
    /// sorted durations (Q–Q): how well RUN reproduces REF's distribution (the paper's Fig. 8).
    pub distribution_within_10us: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Shares {
    /// Share (0..1) of calls whose duration differs by at most the limit.
    pub duration: f64,
    /// Share of calls whose start (relative to the run's origin) moved by at most the limit.
    pub start: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CompareReport {
    pub reference: String,
    pub run: String,
    pub ranks: u32,
    pub calls: u64,
    /// End of MPI_Init to start of MPI_Finalize, max over ranks, global clock.
    pub reference_total_s: f64,
    pub run_total_s: f64,
    /// (run − reference) / reference, in %.
    pub total_error_pct: f64,
    pub duration_delta_us: Quantiles,
    pub start_shift_us: Quantiles,
    pub within_10us: Shares,
    pub within_1ms: Shares,
    pub per_function: BTreeMap<String, FunctionDelta>,
    pub skipped: Vec<Skipped>,
}

struct Side<'a> {
    meta: &'a RankMeta,
    map: TimeMap,
    origin: f64,
}

fn origin(metas: &[RankMeta]) -> f64 {
    metas
        .iter()
        .filter_map(|m| {
            m.init_done
                .map(|t| TimeMap::new(m).global_ns(t, &mut MapCursor::default()))
        })
        .fold(f64::INFINITY, f64::min)
}

fn total_s(metas: &[RankMeta]) -> f64 {
    metas
        .iter()
        .filter_map(|m| {
            let map = TimeMap::new(m);
            let mut c = MapCursor::default();
            Some(
                (map.global_ns(m.finalize_start?, &mut c) - map.global_ns(m.init_done?, &mut c))
                    / 1e9,
            )
        })
        .fold(0.0, f64::max)
}

fn name(meta: &RankMeta, c: &MpiCall) -> String {
    meta.functions
        .get(&c.func)
        .cloned()
        .unwrap_or_else(|| format!("function#{}", c.func))
}

fn calls<'a>(reader: LaneReader<'a>) -> impl Iterator<Item = MpiCall> + 'a {
    reader.filter_map(|e| match e {
        Event::Call(c) => Some(c),
        _ => None,
    })
}

pub fn compare(reference: &Trace, run: &Trace) -> Result<CompareReport, CompareError> {
    let differ = |what: String| Err(CompareError::Different(what));
    if reference.world_size != run.world_size {
        return differ(format!(
            "REF has {} ranks, RUN has {}",
            reference.world_size, run.world_size
        ));
    }
    let ref_metas = scan(reference)?;
    let run_metas = scan(run)?;
    let (ref_origin, run_origin) = (origin(&ref_metas), origin(&run_metas));
    let (ref_origin, run_origin) = if ref_origin.is_finite() && run_origin.is_finite() {
        (ref_origin, run_origin)
    } else {
        (0.0, 0.0)
    };
    let mut report = CompareReport {
        reference: reference.dir.display().to_string(),
        run: run.dir.display().to_string(),
        ranks: reference.world_size,
        reference_total_s: total_s(&ref_metas),
        run_total_s: total_s(&run_metas),
        ..Default::default()
    };
    if report.reference_total_s > 0.0 {
        report.total_error_pct =
            100.0 * (report.run_total_s - report.reference_total_s) / report.reference_total_s;
    }
    let mut all_dur = LogHistogram::default();
    let mut all_start = LogHistogram::default();
    // Per function: calls, |duration delta| histogram, and both runs' durations (for the Q–Q share).
    let mut per_function: BTreeMap<String, (u64, LogHistogram, Durations, Durations)> =
        BTreeMap::new();
    let (mut dur_10us, mut dur_1ms, mut start_10us, mut start_1ms) = (0u64, 0u64, 0u64, 0u64);

    for (rf, rn) in reference.ranks.iter().zip(&run.ranks) {
        let (Some(ref_meta), Some(run_meta)) = (
            ref_metas.iter().find(|m| m.rank == rf.rank),
            run_metas.iter().find(|m| m.rank == rn.rank),
        ) else {
            continue;
        };
        if ref_meta.streams != run_meta.streams {
            return differ(format!(
                "rank {}: REF has streams {:?}, RUN has {:?}",
                rf.rank, ref_meta.streams, run_meta.streams
            ));
        }
        let a = Side {
            meta: ref_meta,
            map: TimeMap::new(ref_meta),
            origin: ref_origin,
        };
        let b = Side {
            meta: run_meta,
            map: TimeMap::new(run_meta),
            origin: run_origin,
        };
        let (open_a, open_b) = (OpenRank::open(rf)?, OpenRank::open(rn)?);
        for &stream in &ref_meta.streams {
            let mut ia = calls(LaneReader::new(&open_a, stream));
            let mut ib = calls(LaneReader::new(&open_b, stream));
            let (mut ca, mut cb) = (MapCursor::default(), MapCursor::default());
            let mut position = 0u64;
            loop {
                let (x, y) = match (ia.next(), ib.next()) {
                    (None, None) => break,
                    (Some(x), None) => {
                        return differ(format!(
                            "rank {} stream {stream}: RUN ends after {position} calls; REF goes on with {}",
                            rf.rank,
                            name(a.meta, &x)
                        ));
                    }
                    (None, Some(y)) => {
                        return differ(format!(
                            "rank {} stream {stream}: REF ends after {position} calls; RUN goes on with {}",
                            rf.rank,
                            name(b.meta, &y)
                        ));
                    }
                    (Some(x), Some(y)) => (x, y),
                };
                let (nx, ny) = (name(a.meta, &x), name(b.meta, &y));
                if nx != ny {
                    return differ(format!(
                        "rank {} stream {stream} call #{position}: REF calls {nx}, RUN calls {ny}",
                        rf.rank
                    ));
                }
                position += 1;
                let (xs, xe) = (
                    a.map.global_ns(x.start, &mut ca),
                    a.map.global_ns(x.end, &mut ca),
                );
                let (ys, ye) = (
                    b.map.global_ns(y.start, &mut cb),
                    b.map.global_ns(y.end, &mut cb),
                );
                let dur_delta = ((ye - ys) - (xe - xs)).abs().round() as u64;
                let start_shift = ((ys - b.origin) - (xs - a.origin)).abs().round() as u64;
                all_dur.add(dur_delta);
                all_start.add(start_shift);
                let f = per_function.entry(nx).or_default();
                f.2.add((xe - xs).max(0.0).round() as u64);
                f.3.add((ye - ys).max(0.0).round() as u64);
                f.0 += 1;
                f.1.add(dur_delta);
                dur_10us += u64::from(dur_delta <= 10_000);
                dur_1ms += u64::from(dur_delta <= 1_000_000);
                start_10us += u64::from(start_shift <= 10_000);
                start_1ms += u64::from(start_shift <= 1_000_000);
            }
        }
        report.skipped.extend(ref_meta.skipped.iter().cloned());
        report.skipped.extend(run_meta.skipped.iter().cloned());
    }
    let n = all_dur.len();
    report.calls = n;
    let share = |k: u64| if n > 0 { k as f64 / n as f64 } else { 0.0 };
    report.duration_delta_us = all_dur.quantiles(1e-3);
    report.start_shift_us = all_start.quantiles(1e-3);
    report.within_10us = Shares {
        duration: share(dur_10us),
        start: share(start_10us),
    };
    report.within_1ms = Shares {
        duration: share(dur_1ms),
        start: share(start_1ms),
    };
    report.per_function = per_function
        .into_iter()
        .map(|(name, (calls, h, ref_durations, run_durations))| {
            let distribution_within_10us = qq_share_within(&ref_durations, &run_durations, 10_000);
            (
                name,
                FunctionDelta {
                    calls,
                    duration_delta_us: h.quantiles(1e-3),
                    distribution_within_10us,
                },
            )
        })
        .collect();
    Ok(report)
}

/// The human-readable form of a [`CompareReport`].
pub fn render_table(r: &CompareReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "reference  {}", r.reference);
    let _ = writeln!(o, "run        {}", r.run);
    let _ = writeln!(o, "ranks {}, calls compared {}", r.ranks, r.calls);
    let _ = writeln!(
        o,
        "total time  REF {:.6} s, RUN {:.6} s, error {:+.3} %",
        r.reference_total_s, r.run_total_s, r.total_error_pct
    );
    let q = |q: &Quantiles| format!("{:>12.3} {:>12.3} {:>12.3}", q.p50, q.p99, q.max);
    let _ = writeln!(
        o,
        "\n{:<28} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "µs", "p50", "p99", "max", "calls", "Q-Q ≤10µs"
    );
    let _ = writeln!(
        o,
        "{:<28} {} {:>12}",
        "start shift (all)",
        q(&r.start_shift_us),
        r.calls
    );
    let _ = writeln!(
        o,
        "{:<28} {} {:>12}",
        "duration delta (all)",
        q(&r.duration_delta_us),
        r.calls
    );
    let mut fs: Vec<_> = r.per_function.iter().collect();
    fs.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
    for (name, f) in fs {
        let _ = writeln!(
            o,
            "{:<28} {} {:>12} {:>11.2}%",
            format!("  {name}"),
            q(&f.duration_delta_us),
            f.calls,
            100.0 * f.distribution_within_10us.unwrap_or(0.0)
        );
    }
    let pct = |x: f64| 100.0 * x;
    let _ = writeln!(
        o,
        "\nwithin 10 µs: {:.2} % of durations, {:.2} % of starts; within 1 ms: {:.2} % / {:.2} %",
        pct(r.within_10us.duration),
        pct(r.within_10us.start),
        pct(r.within_1ms.duration),
        pct(r.within_1ms.start)
    );
    // Skipped data is reported once, on stderr, by the command.
    o
}
