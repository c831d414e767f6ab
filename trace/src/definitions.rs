//! The definitions table of one rank: what the first pass learns about it before a single
//! timestamp can be mapped (clock samples, suspensions, the first `InitDone`, `FinalizeStart`
//! and `AbnormalEnd`, function names, communicators, remote groups and RMA windows, host and MPI
//! library), and where [`crate::clock::align_clocks`] placed its clock among the others.
//!
//! This is the one communicator table of the `trace` crate. Four others are still built from it
//! elsewhere: the happened-before context (`reconstruct::hb`), `views::export::CommTable`, the
//! OTF2 exporter's `CommDefs` and the report's `ProfileStats.comms`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use format::{
    ClockCalibration, ClockSample, CommId, CommOrigin, Event, FunctionId, Marker, Suspension,
};

use crate::error::Skipped;
use crate::members::{Members, intern};

/// What the first pass learns about one rank. Small: it grows with the number of suspensions,
/// clock samples, functions and communicators, not with the number of events.
#[derive(Clone, Debug, Default)]
pub struct RankMeta {
    pub rank: u32,
    pub clock: ClockCalibration,
    pub samples: Vec<ClockSample>,
    pub suspensions: Vec<Suspension>,
    /// The stream (thread) that recorded each suspension: the one it paused.
    pub suspension_streams: Vec<u32>,
    pub init_done: Option<u64>,
    pub finalize_start: Option<u64>,
    /// The first `AbnormalEnd`: where recording stopped in a rank that did not finish through
    /// `MPI_Finalize` (killed, crashed, `exit` without it, `MPI_Abort`).
    pub abnormal_end: Option<u64>,
    pub functions: HashMap<FunctionId, String>,
    /// Communicator definitions in the order they appear. The lists are interned
    /// ([`crate::members::intern`]): ranks defining the same communicator share one list, so the
    /// world's members cost O(R) over all ranks, not O(R²).
    pub comms: Vec<(CommId, Members)>,
    /// How communicators and windows were made (`Event::CommOrigin`), in the order they appear:
    /// what identifies them across ranks ([`crate::comm_identity`]).
    pub origins: Vec<(CommId, CommOrigin)>,
    /// Intercommunicators' remote groups (`Event::RemoteGroup`), in the order they appear; the
    /// `comms` entry of the same id is the local group.
    pub remote_groups: Vec<(CommId, Members)>,
    /// RMA windows (`Event::WinDef`): window id (whose `comms` entry is its group) and the
    /// communicator it was created over (`format::NO_COMM` when it predates recording).
    pub wins: Vec<(CommId, CommId)>,
    /// String definitions (`Event::StringDef`: region names), in the order they appear: a view
    /// that reads only a window's chunks names the regions in it from these.
    pub strings: Vec<(format::StringId, String)>,
    pub streams: BTreeSet<u32>,
    pub events: u64,
    pub skipped: Vec<Skipped>,
    /// The host name of the rank's `RankInfo` record.
    pub host: Option<String>,
    /// The MPI library's version string from the same record (how it synchronises can differ
    /// from what the standard promises: see `hb::matcher::InterRole::RelayedByRemoteRoot`).
    pub mpi_library: Option<String>,
    /// The rank's clock as [`crate::clock::align_clocks`] placed it among the others; without it
    /// (metadata built by hand), the rank's own calibration and samples.
    pub aligned: Option<AlignedClock>,
}

/// How one rank's ticks become global nanoseconds: `epoch_ns + base_ns + (t − base_tick) ·
/// ns_per_tick + offset(t)`, the offset piecewise linear through `knots`, the first term added in
/// integers by whoever writes absolute times. Absolute TSC values pass 2^53 after a month of
/// uptime and nanoseconds since boot after three, where an f64 no longer holds every tick or
/// nanosecond: so the base tick is subtracted in integers and the floating-point part stays small.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AlignedClock {
    /// The same for every rank of a trace.
    pub epoch_ns: u64,
    pub ns_per_tick: f64,
    pub base_tick: u64,
    pub base_ns: f64,
    /// (tick, offset ns), ticks strictly increasing.
    pub knots: Vec<(u64, f64)>,
    /// Offset change per tick before the first knot and after the last: the drift fitted over all
    /// knots (the longest baseline, so the least noisy).
    pub drift: f64,
    /// Ranks with the same group read the same clock: between them no offset is applied and
    /// none is uncertain.
    pub group: u32,
    /// Bound on the error of this clock's offset to rank 0's, in ns (0 on rank 0's host).
    pub uncertainty_ns: f64,
}

impl RankMeta {
    /// Where the rank's span ends ([`format::span_end`]: `crate::span` reads this, so it is not
    /// imported from there).
    pub fn span_end(&self) -> Option<u64> {
        format::span_end(self.finalize_start, self.abnormal_end)
    }

    /// Takes what the metadata needs from one event of the rank (in stream order): clock
    /// samples, suspensions, the first `InitDone`, `FinalizeStart` and `AbnormalEnd` (the span,
    /// `crate::span`),
    /// definitions and identity. Every pass that builds a `RankMeta` goes through here, so they
    /// agree on which marker counts.
    ///
    /// Returns whether the event said anything the metadata keeps (an MPI job's processes send
    /// each other exactly those, `reconstruct::job`, and rebuild the metadata through here).
    pub fn see(&mut self, stream: u32, event: &Event) -> bool {
        match event {
            Event::Clock(s) => self.samples.push(*s),
            Event::Suspension(s) => {
                self.suspensions.push(s.as_ref().clone());
                self.suspension_streams.push(stream);
            }
            Event::Marker(Marker::InitDone { time }) => {
                self.init_done.get_or_insert(*time);
            }
            Event::Marker(Marker::FinalizeStart { time }) => {
                self.finalize_start.get_or_insert(*time);
            }
            Event::Marker(Marker::AbnormalEnd { time, .. }) => {
                self.abnormal_end.get_or_insert(*time);
            }
            Event::FunctionDef { id, name } => {
                self.functions.insert(*id, name.clone());
            }
            Event::CommDef { id, members } => self.comms.push((*id, intern(members))),
            Event::RemoteGroup { id, members } => {
                self.remote_groups.push((*id, intern(members)));
            }
            Event::WinDef { id, comm } => self.wins.push((*id, *comm)),
            Event::StringDef { id, text } => self.strings.push((*id, text.clone())),
            Event::CommOrigin { id, origin } => self.origins.push((*id, origin.clone())),
            Event::RankInfo(info) => {
                if self.host.is_none() && !info.host.is_empty() {
                    self.host = Some(info.host.clone());
                }
                if self.mpi_library.is_none() && !info.mpi_library.is_empty() {
                    self.mpi_library = Some(info.mpi_library.clone());
                }
            }
            _ => return false,
        }
        true
    }
}

/// Which ranks ran on each host (each rank's `RankInfo`; a rank without one is left out): what
/// `info` lists and what the oversubscription check counts.
pub fn ranks_by_host(metas: &[RankMeta]) -> BTreeMap<String, Vec<u32>> {
    let mut hosts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for meta in metas {
        if let Some(h) = &meta.host {
            hosts.entry(h.clone()).or_default().push(meta.rank);
        }
    }
    hosts
}
