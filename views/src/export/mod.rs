//! Views of a trace for other tools: Perfetto's protobuf trace ([`perfetto_proto`]), Chrome trace
//! JSON ([`perfetto`]), OTF2 archives ([`otf2`], when built against the OTF2 library) and a Gantt
//! picture ([`timeline`]). The first two put a message's arrow on its calls' own slices
//! ([`flows`]).
//!
//! All of them stream the trace rank by rank ([`crate::trace::for_each_event`]) after the first
//! metadata pass ([`crate::clock::scan_rank`]), mapping every time to the global clock through
//! [`crate::clock::TimeMap`]. Message arrows come from one happened-before pass over every lane
//! ([`for_each_match`]), handed over as they are matched: a view writes or samples them then, so
//! no list of every message is kept.

pub mod flows;
pub mod otf2;
#[cfg(have_otf2)]
mod otf2_comms;
#[cfg(have_otf2)]
mod otf2_ffi;
#[cfg(have_otf2)]
mod otf2_io;
#[cfg(have_otf2)]
mod otf2_rma;
pub mod perfetto;
pub mod perfetto_proto;
pub mod timeline;

use std::collections::HashMap;

use format::{CommId, Event, FunctionId};

use crate::clock::{MapCursor, RankMeta, TimeMap};
use crate::funcs::FuncClass;
use crate::hb::{HbContext, HbReport, LaneSource, MessageMatch, Repair};
use crate::lanes::{LaneId, LaneReader, OpenRank};
use crate::trace::{Trace, TraceError};

/// How a call is drawn and grouped in every view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    Send,
    Recv,
    Wait,
    Collective,
    Other,
}

impl CallKind {
    pub fn of(class: FuncClass) -> CallKind {
        match class {
            FuncClass::Send | FuncClass::Isend | FuncClass::SendRecv => CallKind::Send,
            FuncClass::Recv | FuncClass::Irecv => CallKind::Recv,
            FuncClass::Completion => CallKind::Wait,
            FuncClass::Collective(_) | FuncClass::Icollective(_) => CallKind::Collective,
            FuncClass::Other => CallKind::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            CallKind::Send => "p2p send",
            CallKind::Recv => "p2p receive",
            CallKind::Wait => "wait/test",
            CallKind::Collective => "collective",
            CallKind::Other => "other MPI",
        }
    }

    pub const ALL: [CallKind; 5] = [
        CallKind::Send,
        CallKind::Recv,
        CallKind::Wait,
        CallKind::Collective,
        CallKind::Other,
    ];
}

/// Calls `f` on `e` as the views draw it: a folded run of polls (`Polls`) as its first and last
/// poll (`PollRun::as_calls`), any other event as it is. Returns how many events `f` saw.
pub fn as_drawn(e: &Event, mut f: impl FnMut(&Event)) -> u64 {
    match e {
        Event::Polls(run) => run.as_calls().map(|call| f(&Event::Call(call))).count() as u64,
        _ => {
            f(e);
            1
        }
    }
}

/// Names and classes of one rank's functions, from its first-pass metadata.
pub fn function_table(meta: &RankMeta) -> HashMap<FunctionId, (String, FuncClass)> {
    meta.functions
        .iter()
        .map(|(id, name)| (*id, (name.clone(), FuncClass::of(name))))
        .collect()
}

/// Communicator members as world ranks, kept current while a rank's events stream by (an id may
/// be defined again after its communicator was freed).
#[derive(Default)]
pub struct CommTable(HashMap<CommId, Vec<u32>>);

impl CommTable {
    pub fn define(&mut self, id: CommId, members: &[u32]) {
        self.0.insert(id, members.to_vec());
    }

    /// World rank of `peer` (a rank within `comm`); communicator 0 is the world.
    pub fn world_rank(&self, comm: CommId, peer: i32) -> Option<u32> {
        let peer = u32::try_from(peer).ok()?;
        match self.0.get(&comm) {
            Some(m) => m.get(peer as usize).copied(),
            None if comm == 0 => Some(peer),
            None => None,
        }
    }

    pub fn members(&self, comm: CommId) -> Option<&[u32]> {
        self.0.get(&comm).map(Vec::as_slice)
    }
}

/// Which end of a message an event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Send,
    Recv,
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
        crate::times::for_each_time(&mut e, |t| *t = axis(map, *t, cur));
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
    Ok(crate::hb::run(
        &ctx,
        lanes,
        Repair::OFF,
        |li, e| on_event(ids[li], e),
        on_match,
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl ExportError {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> ExportError {
        ExportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
