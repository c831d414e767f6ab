//! Which send a receive takes and which instance of a collective a call joins, by MPI's rules,
//! not by timestamps:
//! - point-to-point ([`p2p`]): per (communicator, source, destination, tag) messages are
//!   non-overtaking, so the k-th send on a key matches the k-th receive on that key;
//! - collectives ([`collectives`]): the k-th collective a rank makes on a communicator is the k-th
//!   of every member;
//! - intercommunicators ([`inter`]): the two sides are paired, then their messages and
//!   collectives are matched as above;
//! - RMA epochs ([`rma`]): fences are collectives of the window's group, and a general active
//!   target's `Win_wait` waits for every origin's `Win_complete`, like a message;
//! - the calls of one rank's threads are taken in time order (the scheduler sees to it).
//!
//! Communicators are recorder-local ids; which of two ranks' are the same one is
//! `trace::comm_identity`'s rule: by parent and creation index on it where the trace records how
//! each was made (chunk version 8), else by members and which communicator with those members it
//! is on each rank.
//!
//! Here: what each function is for matching ([`Class`]), the state kept per rank, and the
//! dispatch of a call, and of what a held call waits for, to its family.

use std::hash::BuildHasherDefault;
use std::sync::Arc;

use format::requests::{MatchedProbes, PersistentRequests};
use format::{CommId, Completion, Event, FunctionId, NO_REQUEST};

use super::collective_instance::CollRef;
use super::{Action, EventRef, FastHasher, FastMap, Lane, Shared};
use trace::funcs::{CollShape, Deferred, FuncClass};

mod collectives;
mod inter;
mod p2p;
mod proxy;
mod rma;

pub(super) use inter::InterPair;
use inter::InterSide;
pub(super) use p2p::SendRec;
use p2p::Slot;
pub(super) use rma::EPOCH_TAG;
use rma::Window;

/// What a function does for matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    Send,
    Isend,
    Recv,
    Irecv,
    SendRecv,
    Completion,
    Collective(Option<CollShape>),
    Icollective(Option<CollShape>),
    /// `MPI_Ibarrier` of a library whose intercommunicator version releases a rank other than
    /// its group's first once the remote group's first saw this rank's own group enter (see
    /// [`InterRole::RelayedByRemoteRoot`](super::collective_instance::InterRole::RelayedByRemoteRoot));
    /// elsewhere an ordinary `Icollective(AllToAll)`.
    RelayedIbarrier,
    /// A record whose message another record of its rank describes (`format::requests`).
    Deferred(Deferred),
    WinCreate,
    WinFree,
    WinFence,
    WinPost,
    WinStart,
    WinComplete,
    /// `Win_wait`, and `Win_test` (recorded only when it returned true: a false one is a poll
    /// that found nothing, folded).
    WinWait,
    IntercommCreate,
    Other,
}

impl Class {
    pub(super) fn of(name: &str) -> Class {
        match FuncClass::of(name) {
            FuncClass::Send => return Class::Send,
            FuncClass::Isend => return Class::Isend,
            FuncClass::Recv => return Class::Recv,
            FuncClass::Irecv => return Class::Irecv,
            FuncClass::SendRecv => return Class::SendRecv,
            FuncClass::Completion => return Class::Completion,
            FuncClass::Collective(s) => return Class::Collective(Some(s)),
            FuncClass::Icollective(s) => return Class::Icollective(Some(s)),
            FuncClass::Other => {}
        }
        if let Some(d) = Deferred::of(name) {
            return Class::Deferred(d);
        }
        let Some(base) = trace::funcs::mpi_base(name) else {
            return Class::Other;
        };
        match base.as_str() {
            "win_create" | "win_allocate" => Class::WinCreate,
            "win_free" => Class::WinFree,
            "win_fence" => Class::WinFence,
            "win_post" => Class::WinPost,
            "win_start" => Class::WinStart,
            "win_complete" => Class::WinComplete,
            "win_wait" | "win_test" => Class::WinWait,
            "intercomm_create" => Class::IntercommCreate,
            l if l.starts_with("neighbor_") => Class::Collective(None),
            l if l.starts_with("ineighbor_") => Class::Icollective(None),
            _ => Class::Other,
        }
    }
}

/// (communicator, source, destination, tag), world ranks.
pub(super) type Key = (u32, u32, u32, i32);

#[derive(Clone)]
pub(super) struct Comm {
    pub(super) global: u32,
    pub(super) members: Arc<[u32]>,
    /// Our position in `members`.
    pub(super) me: Option<u32>,
}

pub(super) enum Need {
    Msg { key: Key, seq: u64, post: EventRef },
    Coll(CollRef),
}

#[derive(Default)]
pub(super) struct RankState {
    /// Intercommunicators by local id. Their `CommDef` names the local group only (what
    /// `MPI_Comm_group` returns); the `RemoteGroup` that follows names the other, and both pair
    /// it. Traces without `RemoteGroup` records (recorders before format version 3) are
    /// recognised by the `Intercomm_create` that follows the definition, and paired with the
    /// other side by tag and occurrence.
    intercomms: FastMap<CommId, InterSide>,
    intercomms_made: FastMap<(i32, Arc<[u32]>), u32>,
    posts: Vec<Slot>,
    /// The messages numbered so far on each channel this rank sends on, and on each it
    /// receives on: a message is the k-th of its channel at both ends. Kept per rank, not in
    /// one table for all: a lane's few channels stay together, where one table spread them
    /// over a table of every channel of the run, each a cache miss with thousands of ranks.
    send_seq: FastMap<Key, u64>,
    recv_seq: FastMap<Key, u64>,
    /// Sends to this rank, by channel and number, waiting for the receive that takes them:
    /// the receiver's lane looks for them at every visit, so they are kept with its state.
    pub(super) sent_here: FastMap<(Key, u64), SendRec>,
    icolls: FastMap<u64, CollRef>,
    coll_counter: FastMap<(u32, u32), u64>,
    persistent: PersistentRequests<BuildHasherDefault<FastHasher>>,
    probes: MatchedProbes<Comm>,
    windows: Vec<Window>,
    windows_created: FastMap<u32, u32>,
    /// PSCW, by window id: the group of the exposure epoch posted and not yet waited for, and of
    /// the access epoch started and not yet completed (MPI allows one of each per window).
    exposures: FastMap<CommId, Arc<[u32]>>,
    accesses: FastMap<CommId, Arc<[u32]>>,
    /// By stream: the window and group the last `EpochGroup` named, for the `Win_post` or
    /// `Win_start` that follows it.
    pub(super) epoch_groups: FastMap<u32, (CommId, Arc<[u32]>)>,
    /// By stream: the epoch edges (key, number) the held `Win_wait` waits for.
    epoch_waits: FastMap<u32, Vec<(Key, u64)>>,
}

impl Shared<'_> {
    /// Where a call of lane `li` stands among its rank's other threads' calls, as recorded: its
    /// start, but a blocking receive's end. MPI leaves the order of two threads' concurrent
    /// receives undefined; numbered by end, the k-th receive of a key to end gets the k-th send
    /// to start, and k+1 sends had started when it ended (one per receive ended by then), so no
    /// message is paired against time. Numbered by start, a receive that started first but ended
    /// last was paired with a send that started after the other receive had ended.
    pub(super) fn place_among_siblings(
        &self,
        li: usize,
        lane_rank: usize,
        call: &format::MpiCall,
        removed: u64,
    ) -> u64 {
        let at_end =
            !self.siblings[li].is_empty() && self.class(lane_rank, call.func) == Class::Recv;
        if at_end { call.end } else { call.start }.saturating_add(removed)
    }

    pub(super) fn class(&self, lane_rank: usize, func: FunctionId) -> Class {
        self.ctx
            .ranks
            .get(lane_rank)
            .and_then(|r| r.classes.get(usize::from(func)).copied())
            .unwrap_or(Class::Other)
    }

    pub(super) fn comm(&self, lane_rank: usize, comm: CommId) -> Option<&Comm> {
        self.ctx.ranks.get(lane_rank)?.comms.get(&comm)
    }

    /// Handles one event not part of a held call: says whether it can be emitted now or must
    /// be held until what its end depends on is known. Borrows the event, so the hot path moves
    /// each event once.
    #[inline]
    pub(super) fn process<I>(
        &mut self,
        lane: &Lane<I>,
        index: u64,
        removed: u64,
        event: &Event,
    ) -> Action {
        let Event::Call(c) = event else {
            return Action::Emit;
        };
        match self.class(lane.rank_idx, c.func) {
            class @ (Class::Icollective(_) | Class::Collective(_) | Class::RelayedIbarrier)
                if self.ranks[lane.rank_idx].intercomms.contains_key(&c.comm) =>
            {
                self.process_inter_collective(lane, removed, class, c)
            }
            class @ (Class::Icollective(_) | Class::Collective(_) | Class::RelayedIbarrier) => {
                self.process_collective(lane, removed, class, c)
            }
            class @ (Class::Send
            | Class::Isend
            | Class::Recv
            | Class::Irecv
            | Class::SendRecv
            | Class::Completion
            | Class::Deferred(_)) => self.process_p2p(lane, index, removed, class, c),
            class @ (Class::WinCreate
            | Class::WinFree
            | Class::WinFence
            | Class::WinPost
            | Class::WinStart
            | Class::WinComplete
            | Class::WinWait) => self.process_rma(lane, index, removed, class, c),
            Class::IntercommCreate | Class::Other => Action::Emit,
        }
    }

    /// What the held call's end depends on, now that its completions are known.
    pub(super) fn needs_of<I>(&mut self, lane: &mut Lane<I>) -> Vec<Need> {
        let mut needs = std::mem::take(&mut lane.spare_needs);
        needs.clear();
        let Some(Event::Call(call)) = lane.held.first() else {
            return needs;
        };
        let call = *call;
        let here = Self::at(lane, lane.held_index);
        let completions = lane.held[1..].iter().filter_map(|e| match e {
            Event::Completion(c) => Some(*c),
            _ => None,
        });
        let blocking_status: Option<Completion> =
            completions.clone().find(|c| c.request == NO_REQUEST);
        let class = self.class(lane.rank_idx, call.func);
        match class {
            Class::Recv | Class::SendRecv | Class::Deferred(Deferred::Mrecv) => {
                self.receive_needs(lane, class, &call, blocking_status, here, &mut needs);
            }
            Class::Completion => {
                for c in completions {
                    if c.request == NO_REQUEST || self.complete_receive(lane, &c, &mut needs) {
                        continue;
                    }
                    if let Some(r) = self.ranks[lane.rank_idx].icolls.remove(&c.request) {
                        needs.push(Need::Coll(r));
                    }
                }
            }
            Class::Collective(_) | Class::WinFence => {
                if let Some(r) = lane.held_coll {
                    needs.push(Need::Coll(r));
                }
            }
            Class::WinWait => self.epoch_needs(lane, here, &mut needs),
            _ => {}
        }
        needs
    }
}
