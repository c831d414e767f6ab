//! Views of a trace for other tools: Perfetto's protobuf trace ([`perfetto_proto`]), Chrome trace
//! JSON ([`chrome_json`]), OTF2 archives ([`otf2`], when built against the OTF2 library) and a
//! Gantt picture ([`timeline`]). The first two are formats of one walk ([`exporter`]) that puts a
//! message's arrow on its calls' own slices ([`flows`]).
//!
//! All of them stream the trace rank by rank ([`trace::open::for_each_event`]) after the first
//! metadata pass ([`trace::scan`]), mapping every time to the global clock through
//! [`trace::clock::TimeMap`]. Message arrows come from one happened-before pass over every lane
//! ([`reconstruct::matches::for_each_match`]), handed over as they are matched: a view writes or
//! samples them then, so no list of every message is kept. A windowed Perfetto or JSON export
//! takes them from the kept match index instead and reads only the window's chunks
//! ([`exporter`]). OTF2 has no arrows (its readers match
//! the messages themselves) and writes one rank at a time, as its library's per-location buffers
//! want.

pub mod chrome_json;
mod chunk_deflater;
pub mod exporter;
pub mod flows;
pub mod otf2;
pub mod perfetto_proto;
pub mod timeline;

use std::collections::HashMap;

use format::{CommId, Event, FunctionId};

use trace::definitions::RankMeta;
use trace::funcs::FuncClass;

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

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// The cause is part of the message, not a source in the chain (as `FormatError::Io`): a
    /// chain printed whole would say it twice.
    #[error("{}: {cause}", path.display())]
    Io {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl ExportError {
    pub fn io(path: &std::path::Path, cause: std::io::Error) -> ExportError {
        ExportError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }
}
