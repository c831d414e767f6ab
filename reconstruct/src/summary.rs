//! What `reconstruct` did, per rank and for the run, and its human-readable table.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use trace::definitions::RankMeta;
use trace::lanes::LaneId;
use trace::{Skipped, Trace};

use crate::hb::{Estimates, HbReport};
use crate::options::{Model, Options};
use crate::pipeline::PassResult;

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
    /// Of `dp_s`, the recorder's clock reads (see [`Summary::dp_reads_s`]).
    pub dp_reads_s: f64,
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
    /// In the written output when repaired (see `after_counted_by`); equal to
    /// `violations_before` otherwise.
    pub violations_after: u64,
    pub before: HbReport,
    pub after: Option<HbReport>,
    /// When repaired: how `after` was counted.
    pub after_counted_by: Option<AfterCountedBy>,
    /// Largest forward shift the repair applied to a lane, seconds.
    pub max_shift_s: f64,
}

/// How the violations left in a repaired output were counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterCountedBy {
    /// By the pass, against the times it wrote (`hb::OutputViolations`).
    Pass,
    /// By matching the written output again: asked for (`--verify`, which also checks the
    /// pass's count against it), or the pass's own count was not exact.
    ReadingTheOutput,
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
    pub(crate) fn of(e: &Estimates) -> EstimateSummary {
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

/// What `reconstruct` did. Spans are "end of MPI_Init to start of MPI_Finalize", max over ranks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub trace: String,
    pub out: String,
    pub remove: String,
    pub model: Model,
    /// What the replay learned (empty with `subtract`).
    pub estimates: EstimateSummary,
    /// Hosts that ran more ranks than they had cores (see [`trace::oversubscription`]).
    pub oversubscribed: Vec<trace::oversubscription::Crowding>,
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
    /// Of `dp_s`, the recorder's clock reads: two per call and per poll, never more than what it
    /// was charged; 0 when the trace does not record what a read costs (`read_ticks` of the
    /// file header, FORMAT.md). A program whose own work between calls overlaps the reads (a
    /// long dependent chain) did not save them untraced, so its T(G) comes out low by up to this
    /// much; one whose calls follow each other is exact (paper-notes/fidelity.md).
    pub dp_reads_s: f64,
    /// Whether every rank's file header records what a clock read costs.
    pub read_cost_recorded: bool,
    /// T(G+): DP' removed.
    pub reconstructed_plus_s: f64,
    /// T(G): DP' and DP removed.
    pub reconstructed_s: f64,
    pub per_rank: Vec<RankSummary>,
    pub suspensions: SuspensionSummary,
    pub hb: HbSummary,
    pub warnings: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// Ranks whose span ends at their `AbnormalEnd` (no `MPI_Finalize`: `trace::span`).
    pub ended_abnormally: Vec<u32>,
}

pub(crate) fn summarize(
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
        read_cost_recorded: !metas.is_empty() && metas.iter().all(|m| m.clock.read_ticks > 0),
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
            .find(|m| m.init.is_some() && m.end().is_some());
        let mut r = RankSummary {
            rank: meta.rank,
            events: meta.events,
            suspensions: meta.suspensions.len() as u64,
            ..Default::default()
        };
        if let Some(m) = marks
            && let (Some(i), Some(f)) = (m.init, m.end())
        {
            if m.finalize.is_none() {
                s.ended_abnormally.push(meta.rank);
            }
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
            r.dp_reads_s = (f.reads_ns - i.reads_ns) / 1e9;
            // The cost between polls is left out: a polling loop's recording cost is as large
            // as its polls' own, with no descheduling involved.
            let polls_dp = (f.polls_dp_ns - i.polls_dp_ns) / 1e9;
            if let Some(w) = trace::oversubscription::dp_warning(meta.rank, dp - polls_dp, measured)
            {
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
                s.dp_reads_s = r.dp_reads_s;
            }
        } else {
            s.warnings.push(format!(
                "rank {}: its trace has no InitDone marker, or neither a FinalizeStart nor an \
                 AbnormalEnd after it: its span is not counted",
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
    let hosts = trace::definitions::ranks_by_host(metas);
    s.oversubscribed = trace::oversubscription::crowded_hosts(trace.meta.as_ref(), &hosts);
    s.unreliable
        .extend(trace::oversubscription::warnings(&s.oversubscribed));
    s.warnings.extend(s.unreliable.iter().cloned());
    if !s.ended_abnormally.is_empty() {
        s.warnings.push(format!(
            "rank(s) {} did not reach MPI_Finalize (killed, crashed, or exit without it): their \
             spans end where recording stopped, so the times above are of the run until then",
            trace::collect::rank_list(&s.ended_abnormally)
        ));
    }
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
        after_counted_by: None,
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
    if s.read_cost_recorded {
        let _ = writeln!(
            o,
            "{:<34} {:>14.6}  ({:.2} % of T(G): where the program's own work hides the reads, \
             T(G) is low by up to this)",
            "  of which clock reads",
            s.dp_reads_s,
            if s.reconstructed_s > 0.0 {
                100.0 * s.dp_reads_s / s.reconstructed_s
            } else {
                0.0
            }
        );
    } else {
        let _ = writeln!(
            o,
            "  of which clock reads: not known (the trace does not record what a read costs: \
             an older recorder, or an output with DP removed)"
        );
    }
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
