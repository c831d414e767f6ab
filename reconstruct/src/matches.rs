//! Messages matched as recorded: the happened-before matching ([`crate::hb`]) over a trace's
//! times as they are (nothing removed, nothing repaired, nothing written), for the views that
//! draw message arrows or count the messages crossing a window's edge, and for checking a trace.
//! This is what `views` uses of `reconstruct`.

use std::collections::HashMap;
use std::path::PathBuf;

use format::Event;
use trace::clock::{MapCursor, TimeMap};
use trace::definitions::RankMeta;
use trace::lanes::{LaneId, LaneReader, OpenRank};
use trace::scan::scan_with;
use trace::window::{Ends, Window};
use trace::{Trace, TraceError};

use crate::hb::{self, HbContext, LaneSource, Repair};
pub use crate::hb::{HbReport, MessageMatch};
use crate::options::RebuildError;
use crate::pipeline::{self, PassConfig};

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

pub(crate) fn check_happened_before_with(
    trace: &Trace,
    threads: usize,
) -> Result<HbReport, TraceError> {
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
        PassConfig::as_recorded(&metas, threads),
        |_, _| {},
        on_match,
        &mut |_| {},
    )
    .map_err(read_error)?;
    Ok(pass.report)
}

/// One lane's events with every time moved onto a view's axis (absolute ns).
struct AxisLane<'a, F> {
    reader: LaneReader<'a>,
    map: &'a TimeMap,
    cur: MapCursor,
    axis: &'a F,
}

impl<F: Fn(&TimeMap, u64, &mut MapCursor) -> u64> Iterator for AxisLane<'_, F> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        let mut e = self.reader.next()?;
        let (map, cur, axis) = (self.map, &mut self.cur, self.axis);
        trace::times::for_each_time(&mut e, |t| *t = axis(map, *t, cur));
        Some(e)
    }
}

impl<F: Fn(&TimeMap, u64, &mut MapCursor) -> u64> LaneSource for AxisLane<'_, F> {}

/// Runs the happened-before matching over every lane of `trace`, its times mapped by `axis`
/// (ticks of a rank → absolute ns, through `maps[i]` for `metas[i]`). `on_event` sees every event
/// of every lane once, in lane order, with the lane's id; `on_match` every matched message as it
/// is found, in those times. Memory is what the matching holds in flight, whatever the number of
/// messages.
pub fn for_each_match<F>(
    trace: &Trace,
    metas: &[RankMeta],
    maps: &[TimeMap],
    axis: F,
    mut on_event: impl FnMut(LaneId, &Event),
    on_match: impl FnMut(&MessageMatch),
) -> Result<HbReport, TraceError>
where
    F: Fn(&TimeMap, u64, &mut MapCursor) -> u64,
{
    let open: Vec<OpenRank> = trace
        .ranks
        .iter()
        .map(OpenRank::open)
        .collect::<Result<_, _>>()?;
    let slot: HashMap<u32, usize> = metas.iter().enumerate().map(|(i, m)| (m.rank, i)).collect();
    let mut ids = Vec::new();
    let mut lanes = Vec::new();
    for (files, open_rank) in trace.ranks.iter().zip(&open) {
        let Some(&i) = slot.get(&files.rank) else {
            continue;
        };
        for &stream in &metas[i].streams {
            let id = LaneId {
                rank: files.rank,
                stream,
            };
            ids.push(id);
            let lane = AxisLane {
                reader: LaneReader::new(open_rank, stream),
                map: &maps[i],
                cur: MapCursor::default(),
                axis: &axis,
            };
            lanes.push((id, lane));
        }
    }
    let ctx = HbContext::new(metas, trace.world_size);
    Ok(hb::run(
        &ctx,
        lanes,
        Repair::OFF,
        |li, e| on_event(ids[li], e),
        on_match,
    ))
}

/// Every matched message of `trace` in absolute global time (the exports' and windows' axis), as
/// the matching finds them.
pub fn for_each_global_match(
    trace: &Trace,
    metas: &[RankMeta],
    mut on_match: impl FnMut(&MessageMatch),
) -> Result<HbReport, TraceError> {
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    for_each_match(
        trace,
        metas,
        &maps,
        |map, t, cur| map.absolute(map.global_ns(t, cur)),
        |_, _| {},
        &mut on_match,
    )
}

/// How many matched messages of `trace` cross `window`'s edge (one end in it, the other not),
/// for the views that do not match messages themselves (`report`, `compare`): one
/// happened-before pass over every lane, in the memory the matching holds in flight.
pub fn crossing_messages(
    trace: &Trace,
    metas: &[RankMeta],
    window: &Window,
) -> Result<u64, TraceError> {
    let mut crossing = 0u64;
    for_each_global_match(trace, metas, |m| crossing += u64::from(crosses(window, m)))?;
    Ok(crossing)
}

/// Whether `m` has one end in `window` and the other outside it (in time or rank).
pub(crate) fn crosses(window: &Window, m: &MessageMatch) -> bool {
    matches!(
        window.ends(m.source, m.send_start, m.dest, m.recv_end),
        Ends::SendOnly | Ends::RecvOnly
    )
}
