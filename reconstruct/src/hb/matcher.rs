//! Which send a receive takes and which instance of a collective a call joins, by MPI's rules,
//! not by timestamps:
//! - point-to-point: per (communicator, source, destination, tag) messages are non-overtaking, so
//!   the k-th send on a key matches the k-th receive on that key at the destination. A specific
//!   receive takes its number when posted; a wildcard one (`ANY_SOURCE`/`ANY_TAG`) when the
//!   completion tells its real source and tag. The send is the call that starts it (`Send`,
//!   `Isend`, the send half of `Sendrecv`, the `Start` of a persistent send); the receive ends at
//!   the call that completes it (`Recv`, `Mrecv`, the receive half of `Sendrecv`, or the
//!   `Wait*`/`Test*` whose completion names its request: `Irecv`, `Imrecv`, a started persistent
//!   receive). A matched probe (`Mprobe`, `Improbe`) lends the communicator, which the
//!   `Mrecv`/`Imrecv` record does not carry. (Which init a start takes and which probe a matched
//!   receive takes: `format::requests`, shared with the other views.)
//! - collectives: the k-th collective a rank makes on a communicator is the k-th of every member;
//!   neighbourhood collectives too (the topology is not recorded, so they wait for nobody); the
//!   k-th `Win_fence` of a window is the k-th of every member of the window's communicator. On an
//!   intercommunicator the instance is shared by both groups.
//! - general active target (post/start/complete/wait): the target's `Win_wait` (or a
//!   `Win_test` that returned true) ends only after every origin of its post group called
//!   `Win_complete` (MPI 4.0, 12.5.2), an edge like a message from the origin's `Win_complete`
//!   (its start) to the target's wait (its end). Per (window, origin, target) the epochs keep
//!   their order, so the k-th exposure epoch of a target naming an origin pairs with the k-th
//!   access epoch of that origin naming the target, numbered like messages on a key of their own
//!   ([`EPOCH_TAG`]). The groups come from the `EpochGroup` records before `Win_post` and
//!   `Win_start`; `Win_start` may or may not wait for the post, so it waits for nobody. Passive
//!   target (lock/unlock) defines no order between origins and is not matched.
//! - the calls of one rank's threads are taken in time order (the scheduler sees to it).
//!
//! Communicators are recorder-local ids; two ranks' communicators are the same when they have the
//! same members and are the same-numbered communicator with those members on both ranks.

use std::hash::BuildHasherDefault;
use std::sync::Arc;

use format::requests::{MatchedProbes, PersistentRequests};
use format::{
    ANY_SOURCE, ANY_TAG, CommId, Completion, Event, FunctionId, MpiCall, NO_REQUEST, PROC_NULL,
    ROOT,
};

use super::{Action, EventRef, FastHasher, FastMap, Lane, Shared};
use trace::funcs::{CollShape, Deferred, FuncClass};

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
    /// [`InterRole::RelayedByRemoteRoot`]); elsewhere an ordinary `Icollective(AllToAll)`.
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

pub(super) struct SendRec {
    /// Start in the times given, before the repair moved it, and as recorded.
    pub(super) raw_start: u64,
    pub(super) recorded_start: u64,
    /// Start after the repair moved it.
    pub(super) start: u64,
    pub(super) at: EventRef,
    pub(super) bytes: u64,
}

/// A posted nonblocking receive, in posting order, until it is numbered and completed.
pub(super) struct Slot {
    request: u64,
    global: u32,
    members: Arc<[u32]>,
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

/// A matched probe waiting for the receive of its message, on the communicator its
/// point-to-point calls use.
type Probe = format::requests::Probe<Comm>;

/// An intercommunicator pair: (tag, occurrence) and the first members of its two groups.
pub(super) type InterPair = ((i32, u32), Option<u32>, Option<u32>);

/// Global ids of intercommunicator pairs start here, above any the context interned.
const INTER_GLOBAL: u32 = 1 << 31;

/// The "tag" of pairings made from `RemoteGroup` records (`Intercomm_create`'s tags are ≥ 0).
const GROUP_PAIRED: i32 = i32::MIN;

/// The tag of the keys of PSCW epoch edges: message tags are never negative, so an epoch is
/// never taken for a message, nor a message for an epoch.
pub(super) const EPOCH_TAG: i32 = i32::MIN;

/// Which collective: (communicator, space, instance); space 0 are the communicator's
/// collectives, space 1 + k the fences of its k-th window.
pub(super) type CollKey = (u32, u32, u64);

#[derive(Clone, Copy)]
pub(super) struct CollRef {
    pub(super) key: CollKey,
    /// `None`: waits for nobody (known to be matched, with no order to check).
    pub(super) shape: Option<CollShape>,
    /// Position of the root in the instance's members.
    pub(super) root: u32,
    pub(super) me: u32,
    /// On an intercommunicator: which members are the other group, and this call's part.
    pub(super) inter: Option<InterRef>,
}

/// A call of a collective on an intercommunicator. The instance's members are both groups, one
/// after the other, so that what an exit waits for is still one range of positions.
#[derive(Clone, Copy)]
pub(super) struct InterRef {
    /// Positions of the remote group: `remote.0..remote.1`.
    pub(super) remote: (u32, u32),
    pub(super) role: InterRole,
}

/// What a rank does in a rooted collective on an intercommunicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum InterRole {
    /// Passed `MPI_ROOT`.
    Root,
    /// Passed `MPI_PROC_NULL`: of the root's group, but not the root; moves no data.
    Idle,
    /// Of the other group (names the root by its rank in the remote group), or any rank of a
    /// collective without a root.
    Member,
    /// A rank other than its group's first, in an intercommunicator `MPI_Ibarrier` of Open MPI
    /// (libnbc): the two groups' first ranks collect the *remote* group's arrivals and then
    /// release the remote group's other ranks, so such a rank waits for the remote first rank
    /// only, not for the rest of the remote group, which the standard promises (MPI 4.0, 6.3).
    /// Seen in clean runs: a rank left such a barrier 3 µs before a remote rank entered it.
    RelayedByRemoteRoot,
}

pub(super) struct CollInst {
    /// Per member: world rank, and its entry in the times given, as recorded, and repaired.
    pub(super) members: Arc<[u32]>,
    pub(super) raw_starts: Vec<Option<u64>>,
    pub(super) recorded_starts: Vec<Option<u64>>,
    pub(super) starts: Vec<Option<u64>>,
    pub(super) exits_left: usize,
    /// Members that entered.
    pub(super) entered: usize,
    /// Members of the first group (all of them but on an intercommunicator), and how many of
    /// them entered.
    pub(super) first_len: usize,
    pub(super) entered_first: usize,
    /// Built at the first exit once every entry it waits for is known, for the exits that wait
    /// for everybody ([0]), or, on an intercommunicator, for all of the first ([1]) or second
    /// ([2]) group.
    pub(super) summaries: [Option<Box<super::violations::EntrySummary>>; 3],
}

impl CollInst {
    /// Which of `summaries` serves an exit that waits for `range`, if any.
    pub(super) fn summary_slot(&self, range: &std::ops::Range<usize>) -> Option<usize> {
        let n = self.starts.len();
        if range.is_empty() {
            None
        } else if *range == (0..n) {
            Some(0)
        } else if self.first_len < n && *range == (0..self.first_len) {
            Some(1)
        } else if self.first_len < n && *range == (self.first_len..n) {
            Some(2)
        } else {
            None
        }
    }

    /// How many members of `summaries[slot]`'s range entered.
    pub(super) fn entered_in(&self, slot: usize) -> usize {
        match slot {
            1 => self.entered_first,
            2 => self.entered - self.entered_first,
            _ => self.entered,
        }
    }
}

pub(super) enum Need {
    Msg { key: Key, seq: u64, post: EventRef },
    Coll(CollRef),
}

struct Window {
    comm: Comm,
    ordinal: u32,
    fences: u64,
}

/// One side of an intercommunicator: its local group, and, once the other side was created too,
/// the communicator its point-to-point calls use (global id of the pair, the remote group as
/// members: a peer rank on an intercommunicator names a rank of the remote group).
pub(super) struct InterSide {
    pairing: (i32, u32),
    local: Arc<[u32]>,
    /// Our position in `local`.
    me: Option<u32>,
    pub(super) paired: Option<Comm>,
    /// Once paired, the communicator its collectives use: the pair's global id, both groups as
    /// members (the one whose members sort first first, so both sides agree), our position in
    /// them; and where the remote group lies.
    coll: Option<(Comm, (u32, u32))>,
}

#[derive(Default)]
pub(super) struct RankState {
    /// Intercommunicators by local id. Their `CommDef` names the local group only (what
    /// `MPI_Comm_group` returns); the `RemoteGroup` that follows names the other, and both pair
    /// it. Traces without `RemoteGroup` records (recorders before format version 3) are
    /// recognised by the `Intercomm_create` that follows the definition, and paired with the
    /// other side by tag and occurrence.
    pub(super) intercomms: FastMap<CommId, InterSide>,
    intercomms_made: FastMap<(i32, Arc<[u32]>), u32>,
    posts: Vec<Slot>,
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

    /// The communicator point-to-point calls on `comm` use: for an intercommunicator, the pair
    /// (`None` while the other side is not known).
    pub(super) fn p2p_comm(&self, lane_rank: usize, comm: CommId) -> Option<Comm> {
        match self.ranks[lane_rank].intercomms.get(&comm) {
            Some(side) => side.paired.clone(),
            None => self.comm(lane_rank, comm).cloned(),
        }
    }

    /// Whether `comm` is an intercommunicator whose other side is not known yet.
    pub(super) fn unpaired(&self, lane_rank: usize, comm: CommId) -> bool {
        self.ranks[lane_rank]
            .intercomms
            .get(&comm)
            .is_some_and(|s| s.paired.is_none())
    }

    /// `id` (defined just before `Intercomm_create` with `tag`) is an intercommunicator: pairs it
    /// with the other side's, created with the same tag for the same time, whose local group is
    /// disjoint from ours.
    pub(super) fn define_intercomm(&mut self, lane_rank: usize, id: CommId, tag: i32) {
        let Some((local, me)) = self
            .comm(lane_rank, id)
            .map(|c| (Arc::clone(&c.members), c.me))
        else {
            return;
        };
        let state = &mut self.ranks[lane_rank];
        let n = state
            .intercomms_made
            .entry((tag, Arc::clone(&local)))
            .or_default();
        let pairing = (tag, *n);
        *n += 1;
        state.intercomms.insert(
            id,
            InterSide {
                pairing,
                local: Arc::clone(&local),
                me,
                paired: None,
                coll: None,
            },
        );
        let groups = self.inter_groups.entry(pairing).or_default();
        if !groups.iter().any(|g| **g == *local) {
            groups.push(local);
        }
        self.pair_intercomms(pairing);
    }

    /// `id` is an intercommunicator whose remote group the trace names: both of its groups are
    /// known at once, so it is paired as soon as either side defines it. Its pairing is the
    /// two groups and how many intercommunicators between them this rank made before (the
    /// ranks of both groups make them in the same order: their constructors are collective).
    /// Members outside this world (spawned or connected processes) cannot be matched.
    pub(super) fn define_intercomm_by_groups(
        &mut self,
        lane_rank: usize,
        id: CommId,
        remote: &[u32],
    ) {
        let Some((local, me)) = self
            .comm(lane_rank, id)
            .map(|c| (Arc::clone(&c.members), c.me))
        else {
            return;
        };
        if remote.is_empty() || remote.contains(&format::NOT_IN_WORLD) {
            return;
        }
        let remote: Arc<[u32]> = remote.into();
        let (low, high) = if local[..] <= remote[..] {
            (Arc::clone(&local), Arc::clone(&remote))
        } else {
            (Arc::clone(&remote), Arc::clone(&local))
        };
        // Occurrences count per rank under the pairing's own key space, apart from the tags of
        // `Intercomm_create` (which are never negative).
        let state = &mut self.ranks[lane_rank];
        let n = state
            .intercomms_made
            .entry((GROUP_PAIRED, Arc::clone(&low)))
            .or_default();
        let occurrence = *n;
        *n += 1;
        let next = self.group_pairings.len() as u32;
        let key = *self
            .group_pairings
            .entry((low, Arc::clone(&high), occurrence))
            .or_insert(next);
        let pairing = (GROUP_PAIRED, key);
        self.ranks[lane_rank].intercomms.insert(
            id,
            InterSide {
                pairing,
                local: Arc::clone(&local),
                me,
                paired: None,
                coll: None,
            },
        );
        let groups = self.inter_groups.entry(pairing).or_default();
        for g in [local, remote] {
            if !groups.iter().any(|x| **x == *g) {
                groups.push(g);
            }
        }
        self.pair_intercomms(pairing);
    }

    fn pair_intercomms(&mut self, pairing: (i32, u32)) {
        let Some(groups) = self.inter_groups.get(&pairing).cloned() else {
            return;
        };
        // Only the members of the groups can hold a side of this pairing.
        let holders: Vec<usize> = groups
            .iter()
            .flat_map(|g| g.iter())
            .filter_map(|&m| self.ctx.index_of(m))
            .collect();
        // Both groups in one list, made once per pair, not per member.
        let mut both: Vec<(u32, Arc<[u32]>)> = Vec::new();
        for r in holders {
            let state = &mut self.ranks[r];
            for side in state.intercomms.values_mut() {
                if side.paired.is_some() || side.pairing != pairing {
                    continue;
                }
                let remote = groups
                    .iter()
                    .find(|g| !g.iter().any(|m| side.local.contains(m)));
                if let Some(remote) = remote {
                    let (a, b) = (side.local.first().copied(), remote.first().copied());
                    let pair = (pairing, a.min(b), a.max(b));
                    let n = self.inter_globals.len() as u32;
                    let global = *self.inter_globals.entry(pair).or_insert(INTER_GLOBAL + n);
                    side.paired = Some(Comm {
                        global,
                        members: Arc::clone(remote),
                        me: None,
                    });
                    let local_first = side.local[..] < remote[..];
                    let members = match both.iter().find(|(g, _)| *g == global) {
                        Some((_, m)) => Arc::clone(m),
                        None => {
                            let (x, y) = if local_first {
                                (&side.local, remote)
                            } else {
                                (remote, &side.local)
                            };
                            let m: Arc<[u32]> = x.iter().chain(y.iter()).copied().collect();
                            both.push((global, Arc::clone(&m)));
                            m
                        }
                    };
                    let (nl, nr) = (side.local.len() as u32, remote.len() as u32);
                    let (offset, remote_at) = if local_first { (0, nl) } else { (nr, 0) };
                    side.coll = Some((
                        Comm {
                            global,
                            members,
                            me: side.me.map(|m| m + offset),
                        },
                        (remote_at, remote_at + nr),
                    ));
                }
            }
        }
    }

    fn record_send<I>(&mut self, lane: &Lane<I>, index: u64, removed: u64, c: &MpiCall) {
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

    /// The global id of window `win`'s group (its `CommDef`), which names the window on every
    /// member alike.
    fn window_global(&self, lane_rank: usize, win: CommId) -> Option<u32> {
        self.comm(lane_rank, win).map(|c| c.global)
    }

    fn store_send<I>(&mut self, lane: &Lane<I>, index: u64, removed: u64, c: &MpiCall, key: Key) {
        let counter = self.send_counter.entry(key).or_default();
        let seq = *counter;
        *counter += 1;
        let rec = SendRec {
            raw_start: c.start,
            recorded_start: c.start.saturating_add(removed),
            start: c.start.saturating_add_signed(lane.shift),
            at: Self::at(lane, index),
            bytes: c.bytes,
        };
        self.sends.insert((key, seq), rec);
    }

    /// Posts a nonblocking receive on `comm` from `peer` (communicator rank, or a wildcard) with
    /// `tag`, completed later by the completion that names `request`.
    fn post_receive<I>(
        &mut self,
        lane: &Lane<I>,
        index: u64,
        comm: Comm,
        peer: Option<i32>,
        tag: i32,
        request: u64,
    ) {
        let source = peer
            .filter(|&p| p >= 0)
            .and_then(|p| comm.members.get(p as usize).copied());
        let tag = (tag >= 0).then_some(tag);
        let key = match (source, tag) {
            (Some(s), Some(t)) => Some((comm.global, s, lane.id.rank, t)),
            _ => None,
        };
        let slot = Slot {
            request,
            global: comm.global,
            members: comm.members,
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
        let posts = &mut self.ranks[rank_idx].posts;
        for i in 0..posts.len() {
            if posts[i].seq.is_some() {
                continue;
            }
            let Some(key) = posts[i].key else { continue };
            if posts[..i].iter().any(|p| p.could_take(key)) {
                continue;
            }
            let counter = self.recv_counter.entry(key).or_default();
            posts[i].seq = Some(*counter);
            *counter += 1;
        }
    }

    fn number_receive(&mut self, key: Key) -> u64 {
        let counter = self.recv_counter.entry(key).or_default();
        *counter += 1;
        *counter - 1
    }

    /// Joins the next instance of `space` on `comm` (as entered at `c.start`); of its members
    /// the first `first_len` are one group (all, but on an intercommunicator).
    #[allow(clippy::too_many_arguments)]
    fn enter_collective<I>(
        &mut self,
        lane: &Lane<I>,
        removed: u64,
        comm: &Comm,
        first_len: usize,
        space: u32,
        c: &MpiCall,
        shape: Option<CollShape>,
    ) -> Option<CollRef> {
        let me = comm.me?;
        let counter = self.ranks[lane.rank_idx]
            .coll_counter
            .entry((comm.global, space))
            .or_default();
        let instance = *counter;
        *counter += 1;
        let key = (comm.global, space, instance);
        let n = comm.members.len();
        let inst = self.colls.entry(key).or_insert_with(|| CollInst {
            members: Arc::clone(&comm.members),
            raw_starts: vec![None; n],
            recorded_starts: vec![None; n],
            starts: vec![None; n],
            exits_left: n,
            entered: 0,
            first_len,
            entered_first: 0,
            summaries: [None, None, None],
        });
        if let Some(slot) = inst.starts.get_mut(me as usize) {
            let new = usize::from(slot.is_none());
            inst.entered += new;
            inst.entered_first += new * usize::from((me as usize) < inst.first_len);
            *slot = Some(c.start.saturating_add_signed(lane.shift));
            inst.raw_starts[me as usize] = Some(c.start);
            inst.recorded_starts[me as usize] = Some(c.start.saturating_add(removed));
        }
        let root = if c.root >= 0 { c.root as u32 } else { 0 };
        let shape = shape.filter(|_| self.ctx.collective_waits(lane.rank_idx, c.func, c.bytes));
        Some(CollRef {
            key,
            shape,
            root,
            me,
            inter: None,
        })
    }

    /// Joins the next collective on intercommunicator `c.comm` (`None` while its other side is
    /// not known: a forced step went on without it).
    fn enter_inter_collective<I>(
        &mut self,
        lane: &Lane<I>,
        removed: u64,
        c: &MpiCall,
        shape: Option<CollShape>,
    ) -> Option<CollRef> {
        let (comm, remote) = self.ranks[lane.rank_idx]
            .intercomms
            .get(&c.comm)?
            .coll
            .clone()?;
        let first_len = if remote.0 == 0 {
            remote.1 as usize
        } else {
            remote.0 as usize
        };
        let mut r = self.enter_collective(lane, removed, &comm, first_len, 0, c, shape)?;
        // The root's group passes MPI_ROOT or MPI_PROC_NULL; the other names the root in the
        // remote group. Any other negative root (a trace that recorded MPI's own numbers) reads
        // as MPI_PROC_NULL: such a rank is waited for by nobody and waits for nobody, so a
        // misread root loses checks but invents no violation.
        let role = match c.root {
            ROOT => InterRole::Root,
            v if v < 0 => InterRole::Idle,
            _ => InterRole::Member,
        };
        r.root = match u32::try_from(c.root) {
            Ok(k) if k < remote.1 - remote.0 => remote.0 + k,
            // Out of the remote group (a damaged record): waited for by nobody.
            _ => u32::MAX,
        };
        r.inter = Some(InterRef { remote, role });
        Some(r)
    }

    fn probe_of<I>(&self, lane: &Lane<I>, c: &MpiCall) -> Option<Probe> {
        let comm = self.p2p_comm(lane.rank_idx, c.comm)?;
        Some(Probe::of(c, comm))
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
            Class::Send | Class::Isend => {
                self.record_send(lane, index, removed, c);
                Action::Emit
            }
            Class::Irecv => {
                if c.peer != PROC_NULL
                    && c.request != NO_REQUEST
                    && let Some(comm) = self.p2p_comm(lane.rank_idx, c.comm)
                {
                    self.post_receive(lane, index, comm, Some(c.peer), c.tag, c.request);
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
                        && let Some(comm) = self.p2p_comm(lane.rank_idx, started.comm)
                    {
                        // A receive started again while its previous start is still open would
                        // be erroneous MPI; a stale slot of one never completed is replaced.
                        self.ranks[lane.rank_idx]
                            .posts
                            .retain(|s| s.request != c.request);
                        self.post_receive(
                            lane,
                            index,
                            comm,
                            Some(started.peer),
                            started.tag,
                            c.request,
                        );
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
                    self.post_receive(
                        lane,
                        index,
                        p.comm,
                        Some(p.source.unwrap_or(ANY_SOURCE)),
                        p.tag.unwrap_or(ANY_TAG),
                        c.request,
                    );
                }
                Action::Emit
            }
            class @ (Class::Icollective(_) | Class::Collective(_) | Class::RelayedIbarrier)
                if self.ranks[lane.rank_idx].intercomms.contains_key(&c.comm) =>
            {
                let c = *c;
                let shape = match class {
                    Class::Icollective(shape) | Class::Collective(shape) => shape,
                    _ => Some(CollShape::AllToAll),
                };
                let mut r = self.enter_inter_collective(lane, removed, &c, shape);
                if class == Class::RelayedIbarrier
                    && let Some(r) = r.as_mut()
                    && let Some(inter) = r.inter.as_mut()
                {
                    // The local group's first rank comes right after the remote group when that
                    // group is listed first, else it is the instance's first member.
                    let local_first = if inter.remote.0 == 0 {
                        inter.remote.1
                    } else {
                        0
                    };
                    if r.me != local_first {
                        inter.role = InterRole::RelayedByRemoteRoot;
                    }
                }
                if matches!(class, Class::Collective(_)) {
                    return Action::Hold(r);
                }
                if let Some(r) = r
                    && c.request != NO_REQUEST
                {
                    self.ranks[lane.rank_idx].icolls.insert(c.request, r);
                }
                Action::Emit
            }
            class @ (Class::Icollective(_) | Class::RelayedIbarrier) => {
                let shape = match class {
                    Class::Icollective(shape) => shape,
                    _ => Some(CollShape::AllToAll),
                };
                let c = *c;
                if let Some(comm) = self.comm(lane.rank_idx, c.comm).cloned()
                    && let Some(r) = self.enter_collective(
                        lane,
                        removed,
                        &comm,
                        comm.members.len(),
                        0,
                        &c,
                        shape,
                    )
                    && c.request != NO_REQUEST
                {
                    self.ranks[lane.rank_idx].icolls.insert(c.request, r);
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
            Class::Collective(shape) => {
                let c = *c;
                let r = self.comm(lane.rank_idx, c.comm).cloned().and_then(|comm| {
                    let n = comm.members.len();
                    self.enter_collective(lane, removed, &comm, n, 0, &c, shape)
                });
                Action::Hold(r)
            }
            Class::WinCreate => {
                if let Some(comm) = self.comm(lane.rank_idx, c.comm).cloned() {
                    let state = &mut self.ranks[lane.rank_idx];
                    let n = state.windows_created.entry(comm.global).or_default();
                    let ordinal = *n;
                    *n += 1;
                    state.windows.push(Window {
                        comm,
                        ordinal,
                        fences: 0,
                    });
                }
                Action::Emit
            }
            Class::WinFree => {
                // Which window is not recorded: with one open it is that one; with several the
                // fences are not matched anyway.
                let state = &mut self.ranks[lane.rank_idx];
                if state.windows.len() == 1 {
                    state.windows.clear();
                } else {
                    state.windows.pop();
                }
                Action::Emit
            }
            Class::WinFence => {
                let state = &mut self.ranks[lane.rank_idx];
                if state.windows.len() != 1 {
                    return Action::Emit;
                }
                let w = &mut state.windows[0];
                // A fence that ends an epoch is a barrier (MPI 3.1, 11.5.1); the window's first
                // fence ends none.
                let shape = (w.fences > 0).then_some(CollShape::AllToAll);
                w.fences += 1;
                let (comm, space) = (w.comm.clone(), 1 + w.ordinal);
                let c = *c;
                let n = comm.members.len();
                let r = self.enter_collective(lane, removed, &comm, n, space, &c, shape);
                Action::Hold(r)
            }
            class @ (Class::WinPost | Class::WinStart) => {
                let state = &mut self.ranks[lane.rank_idx];
                if let Some((win, group)) = state.epoch_groups.remove(&lane.id.stream)
                    && win == c.comm
                {
                    let open = if class == Class::WinPost {
                        &mut state.exposures
                    } else {
                        &mut state.accesses
                    };
                    open.insert(win, group);
                }
                Action::Emit
            }
            Class::WinComplete => {
                if let Some(group) = self.ranks[lane.rank_idx].accesses.remove(&c.comm)
                    && let Some(global) = self.window_global(lane.rank_idx, c.comm)
                {
                    let c = *c;
                    for &target in group.iter().filter(|&&t| t != format::NOT_IN_WORLD) {
                        let key = (global, lane.id.rank, target, EPOCH_TAG);
                        self.store_send(lane, index, removed, &c, key);
                    }
                }
                Action::Emit
            }
            Class::WinWait => {
                if let Some(group) = self.ranks[lane.rank_idx].exposures.remove(&c.comm)
                    && let Some(global) = self.window_global(lane.rank_idx, c.comm)
                {
                    let waits = group
                        .iter()
                        .filter(|&&o| o != format::NOT_IN_WORLD)
                        .map(|&origin| {
                            let key = (global, origin, lane.id.rank, EPOCH_TAG);
                            (key, self.number_receive(key))
                        })
                        .collect();
                    self.ranks[lane.rank_idx]
                        .epoch_waits
                        .insert(lane.id.stream, waits);
                }
                Action::Hold(None)
            }
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
                    (self.p2p_comm(lane.rank_idx, call.comm), peer, tag)
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
                    let seq = self.number_receive(key);
                    needs.push(Need::Msg {
                        key,
                        seq,
                        post: here,
                    });
                } else if blocking_status.is_some_and(|s| s.source != PROC_NULL)
                    && !(class != Class::SendRecv && call.peer == PROC_NULL)
                {
                    // A receive from MPI_PROC_NULL (a Recv naming it, an Mrecv of
                    // MPI_MESSAGE_NO_PROC, a Sendrecv whose status says so) takes no message;
                    // any other went unmatched.
                    self.report.unmatched_receives += 1;
                }
            }
            Class::Completion => {
                for c in completions {
                    if c.request == NO_REQUEST {
                        continue;
                    }
                    let rank_idx = lane.rank_idx;
                    if let Some(pos) = self.ranks[rank_idx]
                        .posts
                        .iter()
                        .position(|p| p.request == c.request)
                    {
                        if c.cancelled {
                            self.ranks[rank_idx].posts.remove(pos);
                            self.number_posts(rank_idx);
                            continue;
                        }
                        if self.ranks[rank_idx].posts[pos].key.is_none() {
                            let slot = &self.ranks[rank_idx].posts[pos];
                            let resolved = usize::try_from(c.source)
                                .ok()
                                .and_then(|s| slot.members.get(s).copied())
                                .filter(|_| c.tag >= 0)
                                .map(|src| (slot.global, src, lane.id.rank, c.tag));
                            self.ranks[rank_idx].posts[pos].key = resolved;
                            self.number_posts(rank_idx);
                        }
                        let slot = self.ranks[rank_idx].posts.remove(pos);
                        let Some(key) = slot.key else {
                            self.report.unmatched_receives += 1;
                            continue;
                        };
                        let seq = match slot.seq {
                            Some(seq) => seq,
                            None => {
                                // An earlier wildcard receive, still open, could have taken a message
                                // of this key; its completion comes later, so assume it did not.
                                self.report.ambiguous_receives += 1;
                                self.number_receive(key)
                            }
                        };
                        needs.push(Need::Msg {
                            key,
                            seq,
                            post: slot.at,
                        });
                        self.number_posts(rank_idx);
                        continue;
                    }
                    if let Some(r) = self.ranks[rank_idx].icolls.remove(&c.request) {
                        needs.push(Need::Coll(r));
                    }
                }
            }
            Class::Collective(_) | Class::WinFence => {
                if let Some(r) = lane.held_coll {
                    needs.push(Need::Coll(r));
                }
            }
            Class::WinWait => {
                let waits = self.ranks[lane.rank_idx]
                    .epoch_waits
                    .remove(&lane.id.stream);
                for (key, seq) in waits.into_iter().flatten() {
                    needs.push(Need::Msg {
                        key,
                        seq,
                        post: here,
                    });
                }
            }
            _ => {}
        }
        needs
    }
}
