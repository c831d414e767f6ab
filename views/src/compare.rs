//! `evenflush compare REF RUN`: how close one run's timing is to another's, call by call.
//!
//! Calls are aligned by (rank, stream, position among that stream's MPI calls); two runs whose
//! call sequences differ are not the same program run, and are refused with the first difference.
//! Times are in each run's global clock; start times are taken relative to the run's origin, the
//! earliest end of `MPI_Init` over its ranks.

use std::collections::BTreeMap;

use format::{Event, MpiCall};
use serde::Serialize;

use crate::distribution::{Durations, qq_share_within, qq_share_within_by};
use crate::hist::{LogHistogram, SignedHistogram};
use crate::info::Quantiles;
use trace::Skipped;
use trace::Trace;
use trace::TraceError;
use trace::clock::MapCursor;
use trace::clock::TimeMap;
use trace::definitions::RankMeta;
use trace::lanes::LaneReader;
use trace::lanes::OpenRank;
use trace::scan::scan;
use trace::span;
use trace::window::Window;

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("not the same program: {0}")]
    Different(String),
}

/// When a call's duration in RUN counts as reproducing REF's.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    /// Allowed |difference| as a share of the reference call's duration (0.05: 5 %).
    pub relative: f64,
    /// The least allowed |difference|, ns: the clock reads around a sub-microsecond call alone
    /// move it by more than a few percent, which says nothing about reconstruction.
    pub floor_ns: u64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            relative: 0.05,
            floor_ns: 1_000,
        }
    }
}

impl Tolerance {
    /// The allowed |difference| (ns) for a call that took `reference_ns` in REF.
    pub fn limit_ns(&self, reference_ns: f64) -> f64 {
        (self.relative * reference_ns.max(0.0)).max(self.floor_ns as f64)
    }

    pub fn allows(&self, reference_ns: f64, delta_ns: f64) -> bool {
        delta_ns.abs() <= self.limit_ns(reference_ns)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub tolerance: Tolerance,
    /// Only the calls whose start in the run judged lies in this window (resolved on that run,
    /// [`trace::window`]), on its ranks; in a pair of references, the window's seconds since the
    /// start apply to the later one. `None`: every call.
    pub window: Option<Window>,
}

/// The signed difference of call durations, RUN − REF, in µs: positive when RUN's calls last
/// longer. Absolute deltas alone cannot tell a reconstruction that removes too much from one that
/// removes too little.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Bias {
    pub median_us: f64,
    pub mean_us: f64,
}

impl Bias {
    fn of(h: &SignedHistogram) -> Bias {
        Bias {
            median_us: h.quantile(0.5) * 1e-3,
            mean_us: h.mean() * 1e-3,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FunctionDelta {
    pub calls: u64,
    pub bias_us: Bias,
    /// Share of calls whose duration is within the tolerance of the reference's.
    pub within_tolerance: f64,
    /// |duration in RUN − duration in REF|, µs.
    pub duration_delta_us: Quantiles,
    /// Share of calls whose duration is within 10 µs of the reference's at the same rank in the
    /// sorted durations (Q–Q): how well RUN reproduces REF's distribution (the paper's Fig. 8).
    pub distribution_within_10us: Option<f64>,
    /// The same Q–Q share with the relative tolerance (durations kept to 0.1 µs).
    pub distribution_within_tolerance: Option<f64>,
}

/// One rank's calls: pooled figures can hide a rank that is off in one direction behind
/// another off in the other.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RankDelta {
    pub rank: u32,
    pub calls: u64,
    pub bias_us: Bias,
    pub within_tolerance: f64,
    /// The rank's span (end of MPI_Init to start of MPI_Finalize) in RUN minus in REF, s; `None`
    /// when either run lacks one of the two markers.
    pub span_delta_s: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Shares {
    /// Share (0..1) of calls whose duration differs by at most the limit.
    pub duration: f64,
    /// Share of calls whose start (relative to the run's origin) moved by at most the limit.
    pub start: f64,
}

/// The figures a pair of runs is judged by, for the noise floor.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PairFigures {
    pub reference: String,
    pub run: String,
    pub total_error_pct: f64,
    pub bias_us: Bias,
    pub within_tolerance: f64,
    pub duration_delta_p50_us: f64,
}

impl PairFigures {
    fn of(r: &CompareReport) -> PairFigures {
        PairFigures {
            reference: r.reference.clone(),
            run: r.run.clone(),
            total_error_pct: r.total_error_pct,
            bias_us: r.bias_us,
            within_tolerance: r.within_tolerance,
            duration_delta_p50_us: r.duration_delta_us.p50,
        }
    }
}

/// One figure of RUN beside the same figure between the references.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct NoiseFigure {
    /// RUN against the first reference (the report's own figure).
    pub run: f64,
    /// RUN against each reference: the lowest and highest value.
    pub run_min: f64,
    pub run_max: f64,
    /// Between the references: the largest magnitude over their pairs; for a share within
    /// tolerance, the lowest share.
    pub floor: f64,
    /// RUN is beyond the floor against every reference: the difference is not run-to-run noise.
    pub beyond: bool,
}

impl NoiseFigure {
    /// For a figure whose ideal is 0.
    fn magnitude(run: &[f64], pairs: &[f64]) -> NoiseFigure {
        let floor = pairs.iter().fold(0.0, |a: f64, x| a.max(x.abs()));
        NoiseFigure {
            run: run[0],
            run_min: run.iter().copied().fold(f64::INFINITY, f64::min),
            run_max: run.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            floor,
            beyond: run.iter().all(|x| x.abs() > floor),
        }
    }

    /// For a share whose ideal is 1.
    fn share(run: &[f64], pairs: &[f64]) -> NoiseFigure {
        let floor = pairs.iter().copied().fold(1.0, f64::min);
        NoiseFigure {
            run: run[0],
            run_min: run.iter().copied().fold(f64::INFINITY, f64::min),
            run_max: run.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            floor,
            beyond: run.iter().all(|&x| x < floor),
        }
    }
}

/// What the same program shows with nothing changed, from several reference runs: each
/// reference against the others. An error of RUN no larger than this cannot be told apart from
/// run-to-run noise.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NoiseFloor {
    pub references: Vec<String>,
    pub total_error_pct: NoiseFigure,
    pub bias_median_us: NoiseFigure,
    pub bias_mean_us: NoiseFigure,
    pub within_tolerance: NoiseFigure,
    pub duration_delta_p50_us: NoiseFigure,
    /// Every reference against each later one.
    pub reference_pairs: Vec<PairFigures>,
    /// RUN against every reference, the first one's being the report's own figures.
    pub run_against: Vec<PairFigures>,
}

impl NoiseFloor {
    fn new(references: Vec<String>, run: Vec<PairFigures>, pairs: Vec<PairFigures>) -> Self {
        let col =
            |v: &[PairFigures], f: fn(&PairFigures) -> f64| v.iter().map(f).collect::<Vec<_>>();
        let magnitude =
            |f: fn(&PairFigures) -> f64| NoiseFigure::magnitude(&col(&run, f), &col(&pairs, f));
        NoiseFloor {
            references,
            total_error_pct: magnitude(|p| p.total_error_pct),
            bias_median_us: magnitude(|p| p.bias_us.median_us),
            bias_mean_us: magnitude(|p| p.bias_us.mean_us),
            within_tolerance: NoiseFigure::share(
                &col(&run, |p| p.within_tolerance),
                &col(&pairs, |p| p.within_tolerance),
            ),
            duration_delta_p50_us: magnitude(|p| p.duration_delta_p50_us),
            reference_pairs: pairs,
            run_against: run,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CompareReport {
    pub reference: String,
    pub run: String,
    pub ranks: u32,
    pub calls: u64,
    pub tolerance: Tolerance,
    /// End of MPI_Init to start of MPI_Finalize, max over ranks, global clock.
    pub reference_total_s: f64,
    pub run_total_s: f64,
    /// (run − reference) / reference, in %.
    pub total_error_pct: f64,
    /// Signed duration difference over all calls.
    pub bias_us: Bias,
    /// Share of calls whose duration is within the tolerance of the reference's: the headline.
    pub within_tolerance: f64,
    pub duration_delta_us: Quantiles,
    pub start_shift_us: Quantiles,
    /// Fixed absolute limits, kept beside the relative tolerance for earlier reports' sake.
    pub within_10us: Shares,
    pub within_1ms: Shares,
    pub per_function: BTreeMap<String, FunctionDelta>,
    pub per_rank: Vec<RankDelta>,
    /// With two or more references only.
    pub noise_floor: Option<NoiseFloor>,
    /// The window compared, when not the whole run: calls are counted when their start in RUN
    /// lies in it; the totals stay the whole runs' spans.
    pub window: Option<String>,
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

/// RUN against REF with the default tolerance.
pub fn compare(reference: &Trace, run: &Trace) -> Result<CompareReport, CompareError> {
    compare_with(reference, run, &Options::default())
}

/// RUN against the first of `references`, in full; with two or more references, also the noise
/// floor: RUN against each reference beside each reference against the others.
pub fn compare_runs(
    references: &[Trace],
    run: &Trace,
    opts: &Options,
) -> Result<CompareReport, CompareError> {
    let Some(first) = references.first() else {
        return Err(CompareError::Different("no reference run given".into()));
    };
    let mut report = compare_with(first, run, opts)?;
    if references.len() < 2 {
        return Ok(report);
    }
    // The same damaged file is met again in every pass that reads its run; warn once.
    let add_skipped = |report: &mut CompareReport, more: Vec<Skipped>| {
        for k in more {
            if !report.skipped.contains(&k) {
                report.skipped.push(k);
            }
        }
    };
    let mut against = vec![PairFigures::of(&report)];
    for r in &references[1..] {
        let other = compare_with(r, run, opts)?;
        against.push(PairFigures::of(&other));
        add_skipped(&mut report, other.skipped);
    }
    let mut pairs = Vec::new();
    for (i, a) in references.iter().enumerate() {
        for b in &references[i + 1..] {
            let pair = compare_with(a, b, opts)?;
            pairs.push(PairFigures::of(&pair));
            add_skipped(&mut report, pair.skipped);
        }
    }
    let names = references
        .iter()
        .map(|r| r.dir.display().to_string())
        .collect();
    report.noise_floor = Some(NoiseFloor::new(names, against, pairs));
    Ok(report)
}

/// Per function: calls, |duration delta|, signed delta, calls within tolerance, and both runs'
/// durations (for the Q–Q shares).
#[derive(Default)]
struct FunctionAcc {
    calls: u64,
    delta: LogHistogram,
    signed: SignedHistogram,
    within: u64,
    reference: Durations,
    run: Durations,
}

pub fn compare_with(
    reference: &Trace,
    run: &Trace,
    opts: &Options,
) -> Result<CompareReport, CompareError> {
    let tol = opts.tolerance;
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
        tolerance: tol,
        reference_total_s: span::longest_s(&ref_metas),
        run_total_s: span::longest_s(&run_metas),
        ..Default::default()
    };
    if report.reference_total_s > 0.0 {
        report.total_error_pct =
            100.0 * (report.run_total_s - report.reference_total_s) / report.reference_total_s;
    }
    // The window on RUN's clock: the same seconds since its start.
    let window = opts.window.as_ref().map(|w| {
        let maps: Vec<TimeMap> = run_metas.iter().map(TimeMap::new).collect();
        let epoch = maps.first().map_or(0, TimeMap::epoch_ns);
        let own = origin(&run_metas);
        let start = if own.is_finite() {
            maps.first().map_or(epoch, |m| m.absolute(own))
        } else {
            w.origin
        };
        w.rebased(start)
    });
    report.window = window.as_ref().map(Window::describe);
    let mut all_dur = LogHistogram::default();
    let mut all_start = LogHistogram::default();
    let mut all_signed = SignedHistogram::default();
    let mut per_function: BTreeMap<String, FunctionAcc> = BTreeMap::new();
    let (mut dur_10us, mut dur_1ms, mut start_10us, mut start_1ms) = (0u64, 0u64, 0u64, 0u64);
    let mut within = 0u64;

    for (rf, rn) in reference.ranks.iter().zip(&run.ranks) {
        let (Some(ref_meta), Some(run_meta)) = (
            ref_metas.iter().find(|m| m.rank == rf.rank),
            run_metas.iter().find(|m| m.rank == rn.rank),
        ) else {
            continue;
        };
        if window.as_ref().is_some_and(|w| !w.has_rank(rf.rank)) {
            continue;
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
        // One rank at a time, so that per-rank figures cost no memory per rank beyond the result.
        let mut rank_signed = SignedHistogram::default();
        let mut rank_within = 0u64;
        let (open_a, open_b) = (OpenRank::open(rf)?, OpenRank::open(rn)?);
        // A stream on one side only must hold no calls (the loop below says so if it does): the
        // recorder's memory watcher writes a stream of samples only when the program took none
        // for a while, which differs between runs of the same program.
        for &stream in ref_meta.streams.union(&run_meta.streams) {
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
                if let Some(w) = &window
                    && !w.contains(b.map.absolute(ys))
                {
                    continue;
                }
                let (ref_dur, run_dur) = (xe - xs, ye - ys);
                let signed = run_dur - ref_dur;
                let dur_delta = signed.abs().round() as u64;
                let start_shift = ((ys - b.origin) - (xs - a.origin)).abs().round() as u64;
                let ok = tol.allows(ref_dur, signed);
                all_dur.add(dur_delta);
                all_start.add(start_shift);
                all_signed.add(signed);
                rank_signed.add(signed);
                let f = per_function.entry(nx).or_default();
                f.reference.add(ref_dur.max(0.0).round() as u64);
                f.run.add(run_dur.max(0.0).round() as u64);
                f.calls += 1;
                f.delta.add(dur_delta);
                f.signed.add(signed);
                f.within += u64::from(ok);
                within += u64::from(ok);
                rank_within += u64::from(ok);
                dur_10us += u64::from(dur_delta <= 10_000);
                dur_1ms += u64::from(dur_delta <= 1_000_000);
                start_10us += u64::from(start_shift <= 10_000);
                start_1ms += u64::from(start_shift <= 1_000_000);
            }
        }
        let n = rank_signed.len();
        report.per_rank.push(RankDelta {
            rank: rf.rank,
            calls: n,
            bias_us: Bias::of(&rank_signed),
            within_tolerance: if n > 0 {
                rank_within as f64 / n as f64
            } else {
                0.0
            },
            span_delta_s: span::global_s(run_meta)
                .zip(span::global_s(ref_meta))
                .map(|(b, a)| b - a),
        });
        report.skipped.extend(ref_meta.skipped.iter().cloned());
        report.skipped.extend(run_meta.skipped.iter().cloned());
    }
    let n = all_dur.len();
    report.calls = n;
    let share = |k: u64| if n > 0 { k as f64 / n as f64 } else { 0.0 };
    report.bias_us = Bias::of(&all_signed);
    report.within_tolerance = share(within);
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
        .map(|(name, f)| {
            let delta = FunctionDelta {
                calls: f.calls,
                bias_us: Bias::of(&f.signed),
                within_tolerance: if f.calls > 0 {
                    f.within as f64 / f.calls as f64
                } else {
                    0.0
                },
                duration_delta_us: f.delta.quantiles(1e-3),
                distribution_within_10us: qq_share_within(&f.reference, &f.run, 10_000),
                distribution_within_tolerance: qq_share_within_by(&f.reference, &f.run, |ns| {
                    tol.limit_ns(ns as f64).round() as u64
                }),
            };
            (name, delta)
        })
        .collect();
    Ok(report)
}

/// Above this many ranks the table lists only the ranks with the largest mean bias (the JSON
/// has them all).
const TABLE_RANKS: usize = 64;
const TABLE_RANKS_SHOWN: usize = 16;

/// The tolerance as people write it: `5 % (at least 1 µs)`.
pub fn describe_tolerance(t: &Tolerance) -> String {
    format!(
        "{} % of the reference call's duration, at least {} µs",
        100.0 * t.relative,
        t.floor_ns as f64 / 1e3
    )
}

/// The human-readable form of a [`CompareReport`].
pub fn render_table(r: &CompareReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let pct = |x: f64| 100.0 * x;
    let _ = writeln!(o, "reference  {}", r.reference);
    let _ = writeln!(o, "run        {}", r.run);
    if let Some(w) = &r.window {
        let _ = writeln!(o, "{w}: calls that start in it in RUN");
    }
    let _ = writeln!(
        o,
        "ranks {}, calls compared {}; tolerance {}",
        r.ranks,
        r.calls,
        describe_tolerance(&r.tolerance)
    );
    let _ = writeln!(
        o,
        "total time  REF {:.6} s, RUN {:.6} s, error {:+.3} %",
        r.reference_total_s, r.run_total_s, r.total_error_pct
    );
    let _ = writeln!(
        o,
        "durations   {:.2} % of calls within tolerance; bias RUN − REF median {:+.3} µs, mean {:+.3} µs",
        pct(r.within_tolerance),
        r.bias_us.median_us,
        r.bias_us.mean_us
    );
    if let Some(n) = &r.noise_floor {
        render_noise(&mut o, n);
    }

    let q = |q: &Quantiles| format!("{:>10.3} {:>10.3} {:>10.3}", q.p50, q.p99, q.max);
    let _ = writeln!(
        o,
        "\n{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8} {:>9}",
        "µs",
        "p50 |Δ|",
        "p99 |Δ|",
        "max |Δ|",
        "bias p50",
        "bias mean",
        "calls",
        "≤ tol",
        "Q-Q ≤10µs"
    );
    let _ = writeln!(o, "{:<24} {}", "start shift (all)", q(&r.start_shift_us));
    let _ = writeln!(
        o,
        "{:<24} {} {:>+10.3} {:>+10.3} {:>9} {:>7.2}%",
        "duration (all)",
        q(&r.duration_delta_us),
        r.bias_us.median_us,
        r.bias_us.mean_us,
        r.calls,
        pct(r.within_tolerance)
    );
    let mut fs: Vec<_> = r.per_function.iter().collect();
    fs.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
    for (name, f) in fs {
        let _ = writeln!(
            o,
            "{:<24} {} {:>+10.3} {:>+10.3} {:>9} {:>7.2}% {:>8.2}%",
            format!("  {name}"),
            q(&f.duration_delta_us),
            f.bias_us.median_us,
            f.bias_us.mean_us,
            f.calls,
            pct(f.within_tolerance),
            pct(f.distribution_within_10us.unwrap_or(0.0))
        );
    }

    let mut ranks: Vec<&RankDelta> = r.per_rank.iter().collect();
    let _ = if ranks.len() > TABLE_RANKS {
        ranks.sort_by(|a, b| b.bias_us.mean_us.abs().total_cmp(&a.bias_us.mean_us.abs()));
        ranks.truncate(TABLE_RANKS_SHOWN);
        ranks.sort_by_key(|d| d.rank);
        writeln!(
            o,
            "\nper rank: the {TABLE_RANKS_SHOWN} of {} with the largest |mean bias| (--json lists all)",
            r.per_rank.len()
        )
    } else {
        writeln!(o, "\nper rank")
    };
    let _ = writeln!(
        o,
        "{:>8} {:>10} {:>14} {:>14} {:>8} {:>18}",
        "rank", "calls", "bias p50 µs", "bias mean µs", "≤ tol", "span RUN − REF µs"
    );
    for d in ranks {
        let span = d
            .span_delta_s
            .map_or("-".to_string(), |s| format!("{:+.3}", s * 1e6));
        let _ = writeln!(
            o,
            "{:>8} {:>10} {:>+14.3} {:>+14.3} {:>7.2}% {:>18}",
            d.rank,
            d.calls,
            d.bias_us.median_us,
            d.bias_us.mean_us,
            pct(d.within_tolerance),
            span
        );
    }
    let _ = writeln!(
        o,
        "\nfixed limits: within 10 µs {:.2} % of durations, {:.2} % of starts; within 1 ms {:.2} % / {:.2} %",
        pct(r.within_10us.duration),
        pct(r.within_10us.start),
        pct(r.within_1ms.duration),
        pct(r.within_1ms.start)
    );
    // Skipped data is reported once, on stderr, by the command.
    o
}

fn render_noise(o: &mut String, n: &NoiseFloor) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "\nnoise floor: {} references, each against the others ({} pair{}); RUN against each",
        n.references.len(),
        n.reference_pairs.len(),
        if n.reference_pairs.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    let _ = writeln!(
        o,
        "{:<26} {:>12} {:>24} {:>14}",
        "", "RUN vs REF1", "RUN vs each reference", "REF vs REF"
    );
    // Signed figures keep their sign; magnitudes and shares have none to show.
    let rows: [(&str, &NoiseFigure, f64, &str); 5] = [
        ("total time error %", &n.total_error_pct, 1.0, "±"),
        ("bias median µs", &n.bias_median_us, 1.0, "±"),
        ("bias mean µs", &n.bias_mean_us, 1.0, "±"),
        ("|Δ| p50 µs", &n.duration_delta_p50_us, 1.0, "≤"),
        ("within tolerance %", &n.within_tolerance, 100.0, "≥"),
    ];
    for (label, f, scale, floor_sign) in rows {
        let v = |x: f64| {
            if floor_sign == "±" {
                format!("{:+.3}", x * scale)
            } else {
                format!("{:.3}", x * scale)
            }
        };
        let _ = writeln!(
            o,
            "{label:<26} {:>12} {:>24} {:>14} {}",
            v(f.run),
            format!("{} .. {}", v(f.run_min), v(f.run_max)),
            format!("{floor_sign}{:.3}", f.floor * scale),
            if f.beyond {
                "beyond the noise"
            } else {
                "within the noise"
            }
        );
    }
}
