//! `evenflush reconstruct`: from a recorded trace (G') to the original timing (G+ without the
//! suspensions DP', G also without the recorder's own cost DP), written as a trace of the same
//! format, with a summary of what was removed.
//!
//! Two streaming passes: the first keeps per-rank metadata ([`crate::clock::RankMeta`]), the
//! second maps every timestamp and writes it. Memory is bounded by ranks × streams × one chunk in
//! and one chunk out, plus what happened-before matching holds in flight.
//!
//! The output's clock is the global one in nanoseconds: every rank file says 1e9 ticks per second,
//! its clock samples say offset 0, suspensions are zero-length markers, and with DP removed every
//! call's cost is 0, so reconstructing an output again changes nothing.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use format::{ChunkEncoder, Event, EventBuf, FileHeader, Marker, RankFileWriter, rank_file_name};
use serde::Serialize;

use crate::clock::{MapCursor, RankMeta, TimeMap, align_clocks, scan_rank};
use crate::hb::{self, HbContext, HbReport, MessageMatch, Repair};
use crate::lanes::{LaneId, LaneReader, OpenRank};
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

#[derive(Clone, Debug)]
pub struct Options {
    pub remove: Remove,
    /// Repair happened-before violations (otherwise they are only counted).
    pub hb: bool,
    /// Events per output chunk and stream.
    pub chunk_events: usize,
    pub zstd_level: i32,
    /// With `hb`: no message arrives sooner than this after its send started (ns).
    pub min_latency_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            remove: Remove::DpPrime,
            hb: false,
            chunk_events: 1 << 16,
            zstd_level: 1,
            min_latency_ns: hb::DEFAULT_MIN_LATENCY_NS,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{}: {source}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    BadOutput { path: PathBuf, what: String },
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

/// The first pass over every rank.
pub fn scan(trace: &Trace) -> Result<Vec<RankMeta>, TraceError> {
    let mut metas = trace
        .ranks
        .iter()
        .map(scan_rank)
        .collect::<Result<Vec<_>, _>>()?;
    align_clocks(&mut metas);
    Ok(metas)
}

#[derive(Clone, Copy, Debug, Default)]
struct Mark {
    global: f64,
    collapsed: f64,
    dp_ns: f64,
    /// The marker's time as mapped, before the repair, and how far the repair moved it.
    mapped: u64,
    shift_ns: f64,
}

#[derive(Clone, Copy, Debug, Default)]
struct LaneMarks {
    init: Option<Mark>,
    finalize: Option<Mark>,
}

/// One lane's events with every time mapped to the output clock.
struct Mapped<'a> {
    reader: LaneReader<'a>,
    map: &'a TimeMap,
    cur: MapCursor,
    remove_dp_prime: bool,
    remove_dp: bool,
    dp_ticks: u64,
    marks: Rc<RefCell<LaneMarks>>,
    /// Time removed at the last event returned (ns).
    removed: u64,
}

impl hb::LaneSource for Mapped<'_> {
    fn removed_ns(&self) -> u64 {
        self.removed
    }
}

impl Iterator for Mapped<'_> {
    type Item = Event;

    #[inline]
    fn next(&mut self) -> Option<Event> {
        // Changed in place and returned as read: the event is not copied again on the way (a
        // copy right after the decoder's field-wise writes costs a store-forwarding stall).
        let mut out = self.reader.next();
        if let Some(e) = &mut out {
            self.map_event(e);
        }
        out
    }
}

impl Mapped<'_> {
    #[inline]
    fn map_event(&mut self, e: &mut Event) {
        let npt = self.map.ns_per_tick();
        let (map, cur, collapse) = (self.map, &mut self.cur, self.remove_dp_prime);
        let removed_dp = if self.remove_dp {
            self.dp_ticks as f64 * npt
        } else {
            0.0
        };
        let to_out = |t: u64, cur: &mut MapCursor| {
            let g = if collapse {
                map.collapsed_ns(t, cur)
            } else {
                map.global_ns(t, cur)
            };
            map.absolute(g - removed_dp)
        };
        // Calls and completions are nearly every event: handled here without the generic walk.
        match e {
            Event::Call(c) => {
                if collapse || self.remove_dp {
                    // What the mapping took out here, so that the matcher can also judge the
                    // times as recorded.
                    let g = map.global_ns(c.end, cur);
                    let out = if collapse {
                        map.collapsed_ns(c.end, cur)
                    } else {
                        g
                    };
                    self.removed = (g - out + removed_dp).max(0.0).round() as u64;
                }
                c.start = to_out(c.start, cur);
                c.end = to_out(c.end, cur);
                // The cost of an event is spent after its end, so it delays the next events only.
                self.dp_ticks = self.dp_ticks.saturating_add(u64::from(c.cost));
                c.cost = if self.remove_dp {
                    0
                } else {
                    (f64::from(c.cost) * npt).round() as u32
                };
                return;
            }
            Event::Completion(_) => return,
            _ => {}
        }
        let dp_ns = self.dp_ticks as f64 * npt;
        if let Event::Marker(Marker::InitDone { time } | Marker::FinalizeStart { time }) = *e {
            let mark = Mark {
                global: map.global_ns(time, cur),
                collapsed: map.collapsed_ns(time, cur),
                dp_ns,
                mapped: to_out(time, cur),
                shift_ns: 0.0,
            };
            let mut marks = self.marks.borrow_mut();
            if matches!(e, Event::Marker(Marker::InitDone { .. })) {
                marks.init.get_or_insert(mark);
            } else {
                marks.finalize.get_or_insert(mark);
            }
        }
        crate::times::for_each_time(e, |t| *t = to_out(*t, cur));
        if let Event::Clock(s) = e {
            s.offset_ns = 0.0;
        }
    }
}

/// The lanes of a trace in processing order: ranks in trace order, streams ascending.
fn lane_ids(metas: &[RankMeta]) -> Vec<LaneId> {
    metas
        .iter()
        .flat_map(|m| {
            m.streams.iter().map(|&stream| LaneId {
                rank: m.rank,
                stream,
            })
        })
        .collect()
}

struct PassResult {
    report: HbReport,
    marks: Vec<LaneMarks>,
}

/// The second pass: maps every lane's times and runs happened-before matching over them.
fn run_pass(
    trace: &Trace,
    metas: &[RankMeta],
    remove: Option<Remove>,
    repair: Repair,
    mut on_event: impl FnMut(usize, &Event),
    on_match: impl FnMut(&MessageMatch),
) -> Result<PassResult, TraceError> {
    let open: Vec<OpenRank> = trace
        .ranks
        .iter()
        .map(OpenRank::open)
        .collect::<Result<_, _>>()?;
    let ids = lane_ids(metas);
    let rank_index = |id: &LaneId| metas.iter().position(|m| m.rank == id.rank).unwrap_or(0);
    // One map per lane: a suspension pauses only the thread that ran it.
    let maps: Vec<TimeMap> = ids
        .iter()
        .map(|id| TimeMap::for_stream(&metas[rank_index(id)], id.stream))
        .collect();
    let marks: Vec<Rc<RefCell<LaneMarks>>> = ids.iter().map(|_| Rc::default()).collect();
    let lanes = ids
        .iter()
        .zip(&marks)
        .zip(&maps)
        .map(|((id, marks), map)| {
            let r = rank_index(id);
            let mapped = Mapped {
                reader: LaneReader::new(&open[r], id.stream),
                map,
                cur: MapCursor::default(),
                remove_dp_prime: remove.is_some_and(Remove::dp_prime),
                remove_dp: remove.is_some_and(Remove::dp),
                dp_ticks: 0,
                marks: Rc::clone(marks),
                removed: 0,
            };
            (*id, mapped)
        })
        .collect();
    let ctx = HbContext::new(metas, trace.world_size);
    // The spans must describe the output written, so the repair's move of each marker counts.
    let on_event = |li: usize, e: &Event| {
        if let Event::Marker(m @ (Marker::InitDone { time } | Marker::FinalizeStart { time })) = e {
            let mut lane = marks[li].borrow_mut();
            let mark = if matches!(m, Marker::InitDone { .. }) {
                lane.init.as_mut()
            } else {
                lane.finalize.as_mut()
            };
            if let Some(mark) = mark
                && mark.shift_ns == 0.0
            {
                mark.shift_ns = time.saturating_sub(mark.mapped) as f64;
            }
        }
        on_event(li, e);
    };
    let report = hb::run(&ctx, lanes, repair, on_event, on_match);
    Ok(PassResult {
        report,
        marks: marks.iter().map(|m| *m.borrow()).collect(),
    })
}

/// Every matched message of a trace, in its global clock (suspensions kept): for timelines that
/// draw message arrows. Also returns the matching report.
pub fn matched_messages(trace: &Trace) -> Result<(Vec<MessageMatch>, HbReport), TraceError> {
    let metas = scan(trace)?;
    let mut out = Vec::new();
    let pass = run_pass(
        trace,
        &metas,
        None,
        Repair::OFF,
        |_, _| {},
        |m| out.push(*m),
    )?;
    Ok((out, pass.report))
}

/// Counts happened-before violations of a trace as it is (global clock, nothing removed).
pub fn check_happened_before(trace: &Trace) -> Result<HbReport, TraceError> {
    let metas = scan(trace)?;
    Ok(run_pass(trace, &metas, None, Repair::OFF, |_, _| {}, |_| {})?.report)
}

struct LaneOut {
    rank_slot: usize,
    stream: u32,
    buf: EventBuf,
    events: usize,
    seq: u64,
}

/// Reconstructs `trace` into `out`. `progress(done, total)` is called as events are written.
pub fn reconstruct(
    trace: &Trace,
    out: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, RebuildError> {
    let metas = scan(trace)?;
    prepare_out_dir(trace, out)?;

    let mut writers = Vec::with_capacity(trace.ranks.len());
    for files in &trace.ranks {
        let first = files.parts[0].open().map_err(TraceError::from)?;
        let original = first.header();
        let header = FileHeader {
            part: 0,
            clock: format::ClockCalibration {
                ticks_per_sec: 1e9,
                ..original.clock
            },
            producer: format!(
                "{} | reconstructed by evenflush {} (remove {})",
                original.producer,
                env!("CARGO_PKG_VERSION"),
                opts.remove.name()
            ),
            ..original.clone()
        };
        let path = out.join(rank_file_name(files.rank, 0));
        let file = std::fs::File::create(&path).map_err(|source| output_error(&path, source))?;
        let writer = RankFileWriter::new(BufWriter::with_capacity(1 << 20, file), &header)
            .map_err(|source| output_error(&path, source))?;
        writers.push(RankOut {
            rank: files.rank,
            path,
            writer,
        });
    }
    let ids = lane_ids(&metas);
    let mut lanes: Vec<LaneOut> = ids
        .iter()
        .map(|id| LaneOut {
            rank_slot: trace
                .ranks
                .iter()
                .position(|r| r.rank == id.rank)
                .unwrap_or(0),
            stream: id.stream,
            buf: EventBuf::new(),
            events: 0,
            seq: 0,
        })
        .collect();
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let mut encoder = ChunkEncoder::new(opts.zstd_level);
    let mut write_error: Option<RebuildError> = None;
    let mut done = 0u64;
    let chunk_events = opts.chunk_events.max(1);
    progress(0, total);
    let pass = run_pass(
        trace,
        &metas,
        Some(opts.remove),
        Repair {
            enabled: opts.hb,
            min_latency_ns: opts.min_latency_ns,
        },
        |li, e| {
            let lane = &mut lanes[li];
            lane.buf.push(e);
            lane.events += 1;
            done += 1;
            if lane.events >= chunk_events && write_error.is_none() {
                if let Err(err) = lane.emit(&mut encoder, &mut writers) {
                    write_error = Some(err);
                }
                progress(done, total);
            }
        },
        |_| {},
    )?;
    if let Some(err) = write_error {
        return Err(err);
    }
    for lane in &mut lanes {
        if lane.events > 0 {
            lane.emit(&mut encoder, &mut writers)?;
        }
    }
    for w in &mut writers {
        w.writer
            .flush()
            .map_err(|source| output_error(&w.path, source))?;
    }
    drop(writers);
    progress(total, total);
    write_meta(trace, out, opts)?;

    let mut summary = summarize(trace, out, opts, &metas, &ids, &pass);
    if opts.hb {
        let written = Trace::open(out)?;
        let after = check_happened_before(&written)?;
        summary.hb.violations_after = after.violations();
        summary.hb.after = Some(after);
    }
    Ok(summary)
}

fn output_error(path: &Path, source: std::io::Error) -> RebuildError {
    RebuildError::Output {
        path: path.to_path_buf(),
        source,
    }
}

struct RankOut {
    rank: u32,
    path: PathBuf,
    writer: RankFileWriter<BufWriter<std::fs::File>>,
}

impl LaneOut {
    /// Writes the lane's buffered events as one chunk.
    fn emit(
        &mut self,
        encoder: &mut ChunkEncoder,
        writers: &mut [RankOut],
    ) -> Result<(), RebuildError> {
        let out = &mut writers[self.rank_slot];
        let chunk = encoder.encode_events(out.rank, self.stream, self.seq, &self.buf);
        self.seq += 1;
        self.buf.clear();
        self.events = 0;
        out.writer
            .write_chunk(&chunk)
            .map_err(|source| output_error(&out.path, source))
    }
}

fn prepare_out_dir(trace: &Trace, out: &Path) -> Result<(), RebuildError> {
    let err = |source| RebuildError::Output {
        path: out.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(out).map_err(err)?;
    if let (Ok(a), Ok(b)) = (out.canonicalize(), trace.dir.canonicalize())
        && a == b
    {
        return Err(RebuildError::BadOutput {
            path: out.to_path_buf(),
            what: "is the trace directory itself; choose another --out".into(),
        });
    }
    // Rank files of an earlier reconstruction would mix with ours; nothing else is touched.
    for entry in format::open_dir(out).map_err(TraceError::from)? {
        std::fs::remove_file(&entry.path).map_err(|source| RebuildError::Output {
            path: entry.path,
            source,
        })?;
    }
    Ok(())
}

fn write_meta(trace: &Trace, out: &Path, opts: &Options) -> Result<(), RebuildError> {
    let mut meta = trace.meta.clone().unwrap_or_else(|| serde_json::json!({}));
    if let Some(obj) = meta.as_object_mut() {
        // Every part now lives in `out`: a pointer to the original output directories would make
        // readers pick up the unreconstructed files too.
        if let Some(settings) = obj.get_mut("settings").and_then(|s| s.as_object_mut()) {
            settings.remove("EVENFLUSH_OUT");
        }
        obj.insert(
            "reconstructed".into(),
            serde_json::json!({
                "from": trace.dir.display().to_string(),
                "remove": opts.remove.name(),
                "hb_repaired": opts.hb,
                "clock": "global, ns",
            }),
        );
    }
    let path = out.join("meta.json");
    let text = serde_json::to_string_pretty(&meta).unwrap_or_else(|_| "{}".into());
    std::fs::write(&path, text).map_err(|source| RebuildError::Output { path, source })
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
            r.dp_prime_s = measured - plus;
            r.dp_s = dp;
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
    s.suspensions = SuspensionSummary {
        count: by_seq.len() as u64,
        flushes: by_seq.values().filter(|v| v.1).count() as u64,
        z_total_s: by_seq.values().map(|v| v.0 as f64).sum::<f64>() / 1e9,
        overshoot_total_s: overshoot_ns as f64 / 1e9,
    };
    s.hb = HbSummary {
        repaired: opts.hb,
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
    let _ = writeln!(o, "written to     {} (removed: {})", s.out, s.remove);
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
        "without DP' and DP  T(G)", s.reconstructed_s
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
        "happened-before  {} messages, {} collective exits; violations {} as recorded, {} before \
         repair, {} after{}",
        hb.before.messages,
        hb.before.collective_exits,
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
