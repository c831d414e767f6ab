//! Intercommunicators: the two sides of one are paired (by the `RemoteGroup` record that names
//! the other group, or, in older traces, by the tag and occurrence of `Intercomm_create`), then
//! point-to-point calls on it name ranks of the remote group, and a collective on it is one
//! instance shared by both groups, in which a rank waits for the other group, not its own.

use std::sync::Arc;

use format::{CommId, MpiCall, NO_REQUEST, ROOT};

use super::{Class, Comm};
use crate::hb::collective_instance::{CollRef, InterRef, InterRole};
use crate::hb::{Action, Lane, Shared};
use trace::funcs::CollShape;

/// An intercommunicator pair: (tag, occurrence) and the first members of its two groups.
pub(in crate::hb) type InterPair = ((i32, u32), Option<u32>, Option<u32>);

/// Global ids of intercommunicator pairs start here, above any the context interned.
const INTER_GLOBAL: u32 = 1 << 31;

/// The "tag" of pairings made from `RemoteGroup` records (`Intercomm_create`'s tags are ≥ 0).
const GROUP_PAIRED: i32 = i32::MIN;

/// One side of an intercommunicator: its local group, and, once the other side was created too,
/// the communicator its point-to-point calls use (global id of the pair, the remote group as
/// members: a peer rank on an intercommunicator names a rank of the remote group).
pub(super) struct InterSide {
    pairing: (i32, u32),
    local: Arc<[u32]>,
    /// Our position in `local`.
    me: Option<u32>,
    paired: Option<Comm>,
    /// Once paired, the communicator its collectives use: the pair's global id, both groups as
    /// members (the one whose members sort first first, so both sides agree), our position in
    /// them; and where the remote group lies.
    coll: Option<(Comm, (u32, u32))>,
}

impl Shared<'_> {
    /// The communicator point-to-point calls on `comm` use: for an intercommunicator, the pair
    /// (`None` while the other side is not known).
    /// Borrowed: a clone would count a reference on the group, a write to a line of each rank's
    /// own that is cold whenever thousands of ranks are matched in turn.
    pub(super) fn p2p_comm(&self, lane_rank: usize, comm: CommId) -> Option<&Comm> {
        match self.ranks[lane_rank].intercomms.get(&comm) {
            Some(side) => side.paired.as_ref(),
            None => self.comm(lane_rank, comm),
        }
    }

    /// Whether `comm` is an intercommunicator whose other side is not known yet.
    pub(in crate::hb) fn unpaired(&self, lane_rank: usize, comm: CommId) -> bool {
        self.ranks[lane_rank]
            .intercomms
            .get(&comm)
            .is_some_and(|s| s.paired.is_none())
    }

    /// `id` (defined just before `Intercomm_create` with `tag`) is an intercommunicator: pairs it
    /// with the other side's, created with the same tag for the same time, whose local group is
    /// disjoint from ours.
    pub(in crate::hb) fn define_intercomm(&mut self, lane_rank: usize, id: CommId, tag: i32) {
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
    pub(in crate::hb) fn define_intercomm_by_groups(
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

    /// A collective on an intercommunicator (see [`Shared::process`]).
    pub(super) fn process_inter_collective<I>(
        &mut self,
        lane: &Lane<I>,
        removed: u64,
        class: Class,
        c: &MpiCall,
    ) -> Action {
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
}
