//! Views of a trace for other tools: Chrome/Perfetto trace JSON ([`perfetto`]), OTF2 archives
//! ([`otf2`], when built against the OTF2 library) and a Gantt picture ([`timeline`]).
//!
//! All of them stream the trace rank by rank ([`crate::trace::for_each_event`]) after the first
//! metadata pass ([`crate::clock::scan_rank`]), mapping every time to the global clock through
//! [`crate::clock::TimeMap`]. Message arrows come from [`crate::rebuild::matched_messages`]; that
//! list is held in memory (a few dozen bytes per message), everything else is streamed.

pub mod otf2;
#[cfg(have_otf2)]
mod otf2_ffi;
pub mod perfetto;
pub mod timeline;

use std::collections::HashMap;

use format::{CommId, FunctionId};

use crate::clock::RankMeta;
use crate::funcs::FuncClass;
use crate::hb::{EventRef, MessageMatch};

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

/// Per event reference, the messages that start or end at it (a `Sendrecv` can be both).
pub struct Endpoints(HashMap<EventRef, Vec<(usize, End)>>);

impl Endpoints {
    pub fn new(messages: &[MessageMatch]) -> Endpoints {
        let mut map: HashMap<EventRef, Vec<(usize, End)>> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            map.entry(m.send).or_default().push((i, End::Send));
            map.entry(m.recv_done).or_default().push((i, End::Recv));
        }
        Endpoints(map)
    }

    pub fn at(&self, rank: u32, stream: u32, index: u64) -> &[(usize, End)] {
        self.0
            .get(&EventRef {
                rank,
                stream,
                index,
            })
            .map_or(&[], Vec::as_slice)
    }
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
