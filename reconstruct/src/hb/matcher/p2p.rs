//! Point-to-point: per (communicator, source, destination, tag) messages are non-overtaking, so
//! the k-th send on a key matches the k-th receive on that key at the destination. A specific
//! receive takes its number when posted; a wildcard one (`ANY_SOURCE`/`ANY_TAG`) when the
//! completion tells its real source and tag. The send is the call that starts it (`Send`,
//! `Isend`, the send half of `Sendrecv`, the `Start` of a persistent send); the receive ends at
//! the call that completes it (`Recv`, `Mrecv`, the receive half of `Sendrecv`, or the
//! `Wait*`/`Test*` whose completion names its request: `Irecv`, `Imrecv`, a started persistent
//! receive). A matched probe (`Mprobe`, `Improbe`) lends the communicator, which the
//! `Mrecv`/`Imrecv` record does not carry. (Which init a start takes and which probe a matched
//! receive takes: `format::requests`, shared with the other views.)

use std::sync::Arc;

use format::{ANY_SOURCE, ANY_TAG, Completion, MpiCall, NO_REQUEST, PROC_NULL};

use super::{Class, Comm, Key, Need, RankState};
use crate::hb::{Action, EventRef, Lane, Shared};
use trace::funcs::Deferred;

/// A send waiting for the receive that takes it.
pub(in crate::hb) struct SendRec {
    /// Start in the times given, before the repair moved it, and as recorded.
    pub(in crate::hb) raw_start: u64,
    pub(in crate::hb) recorded_start: u64,
    /// Start after the repair moved it.
    pub(in crate::hb) start: u64,
    pub(in crate::hb) at: EventRef,
    pub(in crate::hb) bytes: u64,
}

/// A posted nonblocking receive, in posting order, until it is numbered and completed.
pub(super) struct Slot {
    request: u64,
    global: u32,
    /// The communicator's members, to resolve a wildcard's source by; `None` for a receive
    /// whose key is known when posted.
    members: Option<Arc<[u32]>>,
    /// `None` for `ANY_SOURCE` / `ANY_TAG`.
    source: Option<u32>,
    tag: Option<i32>,
    key: Option<Key>,
    seq: Option<u64>,
    at: EventRef,
}

impl Slot {
    /// Whether this receive, while its real source and tag are unknown, could take a message of `key`.
    fn could_take(&self, key: Key) -> bool {
        self.key.is_none()
            && self.global == key.0
            && self.source.is_none_or(|s| s == key.1)
            && self.tag.is_none_or(|t| t == key.3)
    }
}

/// A receive being posted: on which communicator, from which source and with which tag, and
/// the members only where a wildcard leaves the source to be resolved at completion (every
/// rank's group is its own, cold line when thousands are matched in turn; a clone writes it).
struct Posted {
    global: u32,
    source: Option<u32>,
    tag: Option<i32>,
    members: Option<Arc<[u32]>>,
}

impl Posted {
    /// On `comm`, from `peer` (communicator rank, or a wildcard), with `tag`.
    fn on(comm: &Comm, peer: Option<i32>, tag: i32) -> Self {
        let source = peer
            .filter(|&p| p >= 0)
            .and_then(|p| comm.members.get(p as usize).copied());
        let tag = (tag >= 0).then_some(tag);
        Posted {
            global: comm.global,
            source,
            tag,
            members: (source.is_none() || tag.is_none()).then(|| Arc::clone(&comm.members)),
        }
    }
}

/// A matched probe waiting for the receive of its message, on the communicator its
/// point-to-point calls use.
type Probe = format::requests::Probe<Comm>;
impl Shared<'_> {
    pub(super) fn record_send<I>(&mut self, lane: &Lane<I>, index: u64, removed: u64, c: &MpiCall) {
        if c.peer < 0 {
            return;
        }
        let Some(comm) = self.p2p_comm(lane.rank_idx, c.comm) else {
            return;
        };
        let Some(&dest) = comm.members.get(c.peer as usize) else {
            return;
        };
        let key = (comm.global, lane.id.rank, dest, c.tag);
        self.store_send(lane, index, removed, c, key);
    }

    pub(super) fn store_send<I>(
        &mut self,
        lane: &Lane<I>,
        index: u64,
        removed: u64,
        c: &MpiCall,
        key: Key,
    ) {
        // Stored here, or by the process that owns the receiver through its proxy of this lane,
        // which carries this lane's shift as it is now.
        self.stored_calls += 1;
        // A send towards another process's rank is that process's to number and match (through
        // its proxy of this rank): kept here, it would wait in the tables to the end.
        if self.is_remote(key.2) {
            return;
        }
        let counter = self.ranks[lane.rank_idx].send_seq.entry(key).or_default();
        let seq = *counter;
        *counter += 1;
        let rec = SendRec {
            raw_start: c.start,
            recorded_start: c.start.saturating_add(removed),
            start: c.start.saturating_add_signed(lane.shift),
            at: Self::at(lane, index),
            bytes: c.bytes,
        };
        match self.ctx.index_of(key.2) {
            Some(dest) => {
                self.ranks[dest].sent_here.insert((key, seq), rec);
            }
            // Nobody in the trace receives it.
            None => self.report.unmatched_sends += 1,
        }
    }

    /// Posts a nonblocking receive, completed later by the completion that names `request`.
    fn post_receive<I>(&mut self, lane: &Lane<I>, index: u64, posted: Posted, request: u64) {
        let Posted {
            global,
            source,
            tag,
            members,
        } = posted;
        let key = match (source, tag) {
            (Some(s), Some(t)) => Some((global, s, lane.id.rank, t)),
            _ => None,
        };
        let slot = Slot {
            request,
            global,
            members,
            source,
            tag,
            key,
            seq: None,
            at: Self::at(lane, index),
        };
        self.ranks[lane.rank_idx].posts.push(slot);
        self.number_posts(lane.rank_idx);
    }

    /// Numbers, in posting order, every open receive whose key is known and that no earlier
    /// open wildcard receive could still take a message from.
    fn number_posts(&mut self, rank_idx: usize) {
        let RankState {
            posts, recv_seq, ..
        } = &mut self.ranks[rank_idx];
        for i in 0..posts.len() {
            if posts[i].seq.is_some() {
                continue;
            }
            let Some(key) = posts[i].key else { continue };
            if posts[..i].iter().any(|p| p.could_take(key)) {
                continue;
            }
            let counter = recv_seq.entry(key).or_default();
            posts[i].seq = Some(*counter);
            *counter += 1;
        }
    }

    /// The next number of a receive of `key` at the receiver, rank `rank_idx`.
    pub(super) fn number_receive(&mut self, rank_idx: usize, key: Key) -> u64 {
        let counter = self.ranks[rank_idx].recv_seq.entry(key).or_default();
        *counter += 1;
        *counter - 1
    }

    fn probe_of<I>(&self, lane: &Lane<I>, c: &MpiCall) -> Option<Probe> {
        let comm = self.p2p_comm(lane.rank_idx, c.comm)?;
        Some(Probe::of(c, comm.clone()))
    }

    /// A point-to-point call (see [`Shared::process`]): records a send, posts a receive, or
    /// holds a call whose end waits for a message.
    #[inline]
    pub(super) fn process_p2p<I>(
        &mut self,
        lane: &Lane<I>,
        index: u64,
        removed: u64,
        class: Class,
        c: &MpiCall,
    ) -> Action {
        match class {
            Class::Send | Class::Isend => {
                self.record_send(lane, index, removed, c);
                Action::Emit
            }
            Class::Irecv => {
                if c.peer != PROC_NULL
                    && c.request != NO_REQUEST
                    && let Some(posted) = self
                        .p2p_comm(lane.rank_idx, c.comm)
                        .map(|comm| Posted::on(comm, Some(c.peer), c.tag))
                {
                    self.post_receive(lane, index, posted, c.request);
                }
                Action::Emit
            }
            Class::Deferred(d @ (Deferred::SendInit | Deferred::RecvInit)) => {
                self.ranks[lane.rank_idx]
                    .persistent
                    .init(d == Deferred::SendInit, c);
                Action::Emit
            }
            Class::Deferred(Deferred::Start) => {
                if let Some(p) = self.ranks[lane.rank_idx].persistent.started(c) {
                    let started = p.call;
                    if p.send {
                        self.record_send(lane, index, removed, &started);
                    } else if started.peer != PROC_NULL
                        && let Some(posted) = self
                            .p2p_comm(lane.rank_idx, started.comm)
                            .map(|comm| Posted::on(comm, Some(started.peer), started.tag))
                    {
                        // A receive started again while its previous start is still open would
                        // be erroneous MPI; a stale slot of one never completed is replaced.
                        self.ranks[lane.rank_idx]
                            .posts
                            .retain(|s| s.request != c.request);
                        self.post_receive(lane, index, posted, c.request);
                    }
                }
                Action::Emit
            }
            Class::Deferred(Deferred::Mprobe) => {
                let p = self.probe_of(lane, c);
                self.ranks[lane.rank_idx].probes.mprobe(p);
                Action::Emit
            }
            Class::Deferred(Deferred::Improbe) => {
                let p = self.probe_of(lane, c);
                self.ranks[lane.rank_idx].probes.improbe(p);
                Action::Emit
            }
            Class::Deferred(Deferred::Imrecv) => {
                let probe = self.ranks[lane.rank_idx].probes.take(None, None);
                // MPI_MESSAGE_NO_PROC (a probe of MPI_PROC_NULL) receives no message.
                if c.request != NO_REQUEST
                    && c.peer != PROC_NULL
                    && let Some(p) = probe
                {
                    let posted = Posted::on(
                        &p.comm,
                        Some(p.source.unwrap_or(ANY_SOURCE)),
                        p.tag.unwrap_or(ANY_TAG),
                    );
                    self.post_receive(lane, index, posted, c.request);
                }
                Action::Emit
            }
            Class::SendRecv => {
                self.record_send(lane, index, removed, c);
                Action::Hold(None)
            }
            Class::Recv | Class::Deferred(Deferred::Mrecv) | Class::Completion => {
                Action::Hold(None)
            }
            // Not a point-to-point class: not dispatched here.
            _ => Action::Emit,
        }
    }

    /// What a blocking receive (`Recv`, the receive half of `Sendrecv`, `Mrecv`) waits for: the
    /// message its status (or its own peer and tag) names.
    pub(super) fn receive_needs<I>(
        &mut self,
        lane: &Lane<I>,
        class: Class,
        call: &MpiCall,
        blocking_status: Option<Completion>,
        here: EventRef,
        needs: &mut Vec<Need>,
    ) {
        // Sendrecv's peer and tag name the send half; its receive half is known only from
        // the status. Mrecv's communicator is its probe's.
        let status = blocking_status.filter(|s| s.source >= 0 && s.tag >= 0);
        let (comm, peer, tag) = if class == Class::Deferred(Deferred::Mrecv) {
            let probe = self.ranks[lane.rank_idx]
                .probes
                .take(status.map(|s| s.source), status.map(|s| s.tag));
            match (probe, status) {
                (Some(p), Some(s)) => (Some(p.comm), s.source, s.tag),
                (Some(p), None) => (
                    Some(p.comm),
                    p.source.unwrap_or(ANY_SOURCE),
                    p.tag.unwrap_or(ANY_TAG),
                ),
                (None, _) => (None, ANY_SOURCE, ANY_TAG),
            }
        } else {
            let (peer, tag) = match (status, class == Class::Recv) {
                (Some(s), _) => (s.source, s.tag),
                (_, true) if call.peer >= 0 && call.tag >= 0 => (call.peer, call.tag),
                _ => (ANY_SOURCE, ANY_TAG),
            };
            (self.p2p_comm(lane.rank_idx, call.comm).cloned(), peer, tag)
        };
        if peer >= 0
            && tag >= 0
            && let Some(comm) = comm
            && let Some(&src) = comm.members.get(peer as usize)
        {
            let key = (comm.global, src, lane.id.rank, tag);
            if self.ranks[lane.rank_idx]
                .posts
                .iter()
                .any(|p| p.seq.is_none() && (p.could_take(key) || p.key == Some(key)))
            {
                self.report.ambiguous_receives += 1;
            }
            let seq = self.number_receive(lane.rank_idx, key);
            needs.push(Need::Msg {
                key,
                seq,
                post: here,
            });
        } else if blocking_status.is_none_or(|s| s.source != PROC_NULL)
            && !(class != Class::SendRecv && call.peer == PROC_NULL)
        {
            // A receive from MPI_PROC_NULL (a Recv naming it, an Mrecv of
            // MPI_MESSAGE_NO_PROC, a Sendrecv whose status says so) takes no message;
            // any other went unmatched, also one whose status is missing (a trace cut
            // between the call and its completion, or damaged): its message is not known.
            self.report.unmatched_receives += 1;
        }
    }

    /// If completion `c` completes a posted receive, the message it waits for (none if it was
    /// cancelled or unmatched); returns whether it did.
    pub(super) fn complete_receive<I>(
        &mut self,
        lane: &Lane<I>,
        c: &Completion,
        needs: &mut Vec<Need>,
    ) -> bool {
        let rank_idx = lane.rank_idx;
        if let Some(pos) = self.ranks[rank_idx]
            .posts
            .iter()
            .position(|p| p.request == c.request)
        {
            if c.cancelled {
                self.ranks[rank_idx].posts.remove(pos);
                self.number_posts(rank_idx);
                return true;
            }
            if self.ranks[rank_idx].posts[pos].key.is_none() {
                let slot = &self.ranks[rank_idx].posts[pos];
                let resolved = usize::try_from(c.source)
                    .ok()
                    .and_then(|s| slot.members.as_ref()?.get(s).copied())
                    .filter(|_| c.tag >= 0)
                    .map(|src| (slot.global, src, lane.id.rank, c.tag));
                self.ranks[rank_idx].posts[pos].key = resolved;
                self.number_posts(rank_idx);
            }
            let slot = self.ranks[rank_idx].posts.remove(pos);
            let Some(key) = slot.key else {
                self.report.unmatched_receives += 1;
                return true;
            };
            let seq = match slot.seq {
                Some(seq) => seq,
                None => {
                    // An earlier wildcard receive, still open, could have taken a message
                    // of this key; its completion comes later, so assume it did not.
                    self.report.ambiguous_receives += 1;
                    self.number_receive(lane.rank_idx, key)
                }
            };
            needs.push(Need::Msg {
                key,
                seq,
                post: slot.at,
            });
            self.number_posts(rank_idx);
            return true;
        }
        false
    }
}
