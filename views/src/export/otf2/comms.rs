//! The communicator, group and RMA window definitions of the OTF2 export, in the form Scalasca and
//! Score-P's own archives use (OTF2 3.0, `OTF2_Definitions.h`):
//! - one `Group` of type `COMM_LOCATIONS` listing every rank's first location in `MPI_COMM_WORLD`
//!   order (id 0), one of type `COMM_SELF` (id 1) shared by every single-process communicator, and
//!   one `COMM_GROUP` per distinct member list, whose members are world ranks, i.e. indices into
//!   the `COMM_LOCATIONS` group;
//! - `MPI_COMM_WORLD` (comm 0, all ranks), `MPI_COMM_SELF` (comm 1, the `COMM_SELF` group); every
//!   further single-process communicator of a rank is the k-th self-like communicator, shared by
//!   the ranks as Score-P unifies them;
//! - the other intracommunicators, identified across ranks as the happened-before matching does
//!   (`trace::comm_identity`: by parent and creation index where the trace records them, else by
//!   members and which communicator with those members it is on each rank), with the communicator
//!   their creating call was made on as parent;
//! - intercommunicators as `InterComm` definitions over the `COMM_GROUP`s of their two sides (the
//!   trace's `RemoteGroup` record), identified by the unordered pair of sides;
//! - RMA windows as `RmaWin` definitions over the communicator they were created on.
//!
//! Communicators with members outside `MPI_COMM_WORLD` (spawned or connected processes) have no
//! place in the `COMM_LOCATIONS` group: they get no definition, and records on them are not written.

use std::collections::HashMap;

use format::NO_COMM;

use super::ffi::{self, GlobalDefWriter, check};
use crate::export::ExportError;
use trace::definitions::RankMeta;
use trace::members::ListIds;
use trace::members::Members;
use trace::members::identity;

/// The `COMM_LOCATIONS` group and the `COMM_SELF` group.
const LOCATIONS_GROUP: u32 = 0;
const SELF_GROUP: u32 = 1;

/// What an OTF2 communicator is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// A `Comm` over a `COMM_GROUP` (its group id).
    Intra(u32),
    /// A `Comm` over the `COMM_SELF` group.
    SelfLike,
    /// An `InterComm` between two `COMM_GROUP`s.
    Inter(u32, u32),
}

pub(super) struct GlobalComm {
    pub name: String,
    pub shape: Shape,
    pub parent: Option<u32>,
}

pub(super) struct GlobalWin {
    pub name: String,
    /// The communicator it was created over; `None` until a rank that recorded the creation says.
    pub comm: Option<u32>,
    members: Members,
    /// Whether every rank of the window recorded its creation: only then are `RmaWinCreate` and
    /// `RmaWinDestroy` written, and the definition says so.
    pub create_destroy: bool,
}

/// One rank's local ids mapped to the global definitions.
#[derive(Default)]
pub(super) struct RankIds {
    pub comms: HashMap<u32, u32>,
    pub wins: HashMap<u32, u32>,
}

#[derive(Default)]
pub(super) struct CommDefs {
    /// Member lists of the `COMM_GROUP`s, group id 2 onwards.
    groups: Vec<Members>,
    pub comms: Vec<GlobalComm>,
    pub wins: Vec<GlobalWin>,
    pub ranks: Vec<RankIds>,
}

/// Which occurrence of a key a rank is at: the k-th communicator with the same members is the same
/// communicator on every rank that has it.
#[derive(Default)]
struct Occurrences(HashMap<(u32, u32), u32>);

impl Occurrences {
    fn next(&mut self, key: (u32, u32)) -> u32 {
        let n = self.0.entry(key).or_default();
        *n += 1;
        *n - 1
    }
}

impl CommDefs {
    pub fn new(metas: &[RankMeta], world: u32) -> CommDefs {
        let mut defs = CommDefs::default();
        let world_members = identity(world);
        let mut lists = ListIds::default();
        let mut group_of_list: HashMap<u32, u32> = HashMap::new();
        let mut identities = trace::comm_identity::CommIdentities::default();
        let mut intra: HashMap<u32, u32> = HashMap::new();
        let mut inter: HashMap<(u32, u32, u32), u32> = HashMap::new();
        let mut wins: HashMap<u32, u32> = HashMap::new();
        let mut selves: Vec<u32> = Vec::new();
        let world_group = defs.group(&mut lists, &mut group_of_list, &world_members);
        defs.comms.push(GlobalComm {
            name: "MPI_COMM_WORLD".into(),
            shape: Shape::Intra(world_group),
            parent: None,
        });
        for meta in metas {
            let mut ids = RankIds::default();
            let win_comm: HashMap<u32, u32> = meta.wins.iter().copied().collect();
            let remote: HashMap<u32, &Members> =
                meta.remote_groups.iter().map(|(id, m)| (*id, m)).collect();
            let mut identity: HashMap<u32, u32> = HashMap::new();
            for (id, _, g) in identities.of_rank(meta, &world_members) {
                identity.entry(id).or_insert(g);
            }
            let mut seen_inter = Occurrences::default();
            // Self-like communicators after MPI_COMM_SELF, in the order the rank defined them.
            let mut self_count = 1usize;
            ids.comms.insert(0, 0);
            ids.comms.insert(1, defs.self_like(&mut selves, 0));
            let in_world = |m: &Members| m.iter().all(|&r| r < world);
            // (local window id, global window, its comm's local id)
            let mut rank_wins: Vec<(u32, u32, u32)> = Vec::new();
            for (id, members) in &meta.comms {
                let (id, members) = (*id, members);
                if id <= 1 {
                    continue;
                }
                if let Some(&comm) = win_comm.get(&id) {
                    let key = identity[&id];
                    let global = *wins.entry(key).or_insert_with(|| {
                        defs.wins.push(GlobalWin {
                            name: format!("window {} ({} ranks)", defs.wins.len(), members.len()),
                            comm: None,
                            members: members.clone(),
                            create_destroy: true,
                        });
                        defs.wins.len() as u32 - 1
                    });
                    rank_wins.push((id, global, comm));
                    continue;
                }
                if let Some(far) = remote.get(&id) {
                    if !in_world(members) || !in_world(far) {
                        continue;
                    }
                    let (a, b) = (lists.id(members), lists.id(far));
                    let (lo, hi) = if members[..] <= far[..] {
                        ((a, members), (b, *far))
                    } else {
                        ((b, *far), (a, members))
                    };
                    let key = (lo.0, hi.0, seen_inter.next((lo.0, hi.0)));
                    let global = match inter.get(&key) {
                        Some(&g) => g,
                        None => {
                            let ga = defs.group(&mut lists, &mut group_of_list, lo.1);
                            let gb = defs.group(&mut lists, &mut group_of_list, hi.1);
                            let g = defs.comms.len() as u32;
                            defs.comms.push(GlobalComm {
                                name: format!(
                                    "intercommunicator {g} ({} + {} ranks)",
                                    lo.1.len(),
                                    hi.1.len()
                                ),
                                shape: Shape::Inter(ga, gb),
                                parent: None,
                            });
                            inter.insert(key, g);
                            g
                        }
                    };
                    ids.comms.insert(id, global);
                    continue;
                }
                if !in_world(members) {
                    continue;
                }
                if members.len() == 1 {
                    ids.comms
                        .insert(id, defs.self_like(&mut selves, self_count));
                    self_count += 1;
                    continue;
                }
                let key = identity[&id];
                let global = match intra.get(&key) {
                    Some(&g) => g,
                    None => {
                        let group = defs.group(&mut lists, &mut group_of_list, members);
                        let g = defs.comms.len() as u32;
                        defs.comms.push(GlobalComm {
                            name: format!("communicator {g} ({} ranks)", members.len()),
                            shape: Shape::Intra(group),
                            parent: None,
                        });
                        intra.insert(key, g);
                        g
                    }
                };
                ids.comms.insert(id, global);
            }
            for (id, global, comm) in rank_wins {
                let w = &mut defs.wins[global as usize];
                match ids.comms.get(&comm) {
                    Some(&c) if comm != NO_COMM => {
                        w.comm.get_or_insert(c);
                    }
                    _ => w.create_destroy = false,
                }
                ids.wins.insert(id, global);
            }
            defs.ranks.push(ids);
        }
        // A window no rank saw created (it predates recording, or its communicator has no
        // definition): its own group stands for the communicator, as an RmaWin needs one.
        for w in 0..defs.wins.len() {
            if defs.wins[w].comm.is_some() {
                continue;
            }
            let members = defs.wins[w].members.clone();
            let comm = if members.len() == 1 {
                defs.self_like(&mut selves, 0)
            } else if members.iter().all(|&r| r < world) {
                let group = defs.group(&mut lists, &mut group_of_list, &members);
                defs.comms.push(GlobalComm {
                    name: format!("group of window {w}"),
                    shape: Shape::Intra(group),
                    parent: None,
                });
                defs.comms.len() as u32 - 1
            } else {
                // Outside the world: no communicator can describe it; its records are dropped.
                continue;
            };
            defs.wins[w].comm = Some(comm);
        }
        defs
    }

    /// The global window of local window `id` on the rank at `slot`, if it can be written.
    pub fn win(&self, slot: usize, id: u32) -> Option<u32> {
        let w = *self.ranks.get(slot)?.wins.get(&id)?;
        self.wins[w as usize].comm.map(|_| w)
    }

    /// The group of `members`: one per distinct list.
    fn group(
        &mut self,
        lists: &mut ListIds,
        group_of_list: &mut HashMap<u32, u32>,
        members: &Members,
    ) -> u32 {
        let list = lists.id(members);
        *group_of_list.entry(list).or_insert_with(|| {
            self.groups.push(members.clone());
            self.groups.len() as u32 + 1
        })
    }

    /// The global id of self-like communicator `k` (0 is `MPI_COMM_SELF`).
    fn self_like(&mut self, selves: &mut Vec<u32>, k: usize) -> u32 {
        while selves.len() <= k {
            let g = self.comms.len() as u32;
            let name = if selves.is_empty() {
                "MPI_COMM_SELF".to_string()
            } else {
                format!("self-like communicator {}", selves.len())
            };
            self.comms.push(GlobalComm {
                name,
                shape: Shape::SelfLike,
                parent: None,
            });
            selves.push(g);
        }
        selves[k]
    }

    /// Notes that `child` was created by a call on `parent` (global ids). Only intracommunicators
    /// have a parent in OTF2, and the first creating call seen decides.
    pub fn set_parent(&mut self, child: u32, parent: u32) {
        let parent_is_intra = self
            .comms
            .get(parent as usize)
            .is_some_and(|c| !matches!(c.shape, Shape::Inter(..)));
        if let Some(c) = self.comms.get_mut(child as usize)
            && child != parent
            && parent_is_intra
            && !matches!(c.shape, Shape::Inter(..))
            && c.parent.is_none()
            && child > 1
        {
            c.parent = Some(parent);
        }
    }

    /// Every name the definitions use, to be interned before the strings are written.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.comms
            .iter()
            .map(|c| c.name.as_str())
            .chain(self.wins.iter().map(|w| w.name.as_str()))
    }

    /// Writes the groups, communicators and windows. `by_rank[r]` is world rank r's location;
    /// `name` gives the string id of every name of [`CommDefs::names`] and of "".
    pub fn write(
        &self,
        gw: &GlobalDefWriter,
        by_rank: &[u64],
        name: &dyn Fn(&str) -> u32,
    ) -> Result<(), ExportError> {
        let empty = name("");
        {
            check(
                gw.write_group(
                    LOCATIONS_GROUP,
                    empty,
                    ffi::OTF2_GROUP_TYPE_COMM_LOCATIONS,
                    ffi::OTF2_PARADIGM_MPI,
                    ffi::OTF2_GROUP_FLAG_NONE,
                    by_rank,
                ),
                "WriteGroup (locations)",
            )?;
            check(
                gw.write_group(
                    SELF_GROUP,
                    empty,
                    ffi::OTF2_GROUP_TYPE_COMM_SELF,
                    ffi::OTF2_PARADIGM_MPI,
                    ffi::OTF2_GROUP_FLAG_NONE,
                    &[],
                ),
                "WriteGroup (self)",
            )?;
        }
        for (i, members) in self.groups.iter().enumerate() {
            let members: Vec<u64> = members.iter().map(|&m| u64::from(m)).collect();
            check(
                gw.write_group(
                    i as u32 + 2,
                    empty,
                    ffi::OTF2_GROUP_TYPE_COMM_GROUP,
                    ffi::OTF2_PARADIGM_MPI,
                    ffi::OTF2_GROUP_FLAG_NONE,
                    &members,
                ),
                "WriteGroup (communicator)",
            )?;
        }
        // In id order, as OTF2 wants Comm and InterComm definitions. A parent precedes its child
        // there too: it was in use (so defined) before the call that created the child.
        for (c, comm) in self.comms.iter().enumerate() {
            let code = match comm.shape {
                Shape::Intra(_) | Shape::SelfLike => gw.write_comm(
                    c as u32,
                    name(&comm.name),
                    group_id(&comm.shape),
                    comm.parent.unwrap_or(ffi::OTF2_UNDEFINED_COMM),
                    ffi::OTF2_COMM_FLAG_NONE,
                ),
                // The peer communicator Intercomm_create used is not in the trace, so there is no
                // common communicator to name.
                Shape::Inter(a, b) => gw.write_inter_comm(
                    c as u32,
                    name(&comm.name),
                    a,
                    b,
                    ffi::OTF2_UNDEFINED_COMM,
                    ffi::OTF2_COMM_FLAG_NONE,
                ),
            };
            check(code, "WriteComm")?;
        }
        for (w, win) in self.wins.iter().enumerate() {
            let Some(comm) = win.comm else { continue };
            let flags = if win.create_destroy {
                ffi::OTF2_RMA_WIN_FLAG_CREATE_DESTROY_EVENTS
            } else {
                ffi::OTF2_RMA_WIN_FLAG_NONE
            };
            check(
                gw.write_rma_win(w as u32, name(&win.name), comm, flags),
                "WriteRmaWin",
            )?;
        }
        Ok(())
    }
}

fn group_id(shape: &Shape) -> u32 {
    match *shape {
        Shape::Intra(g) => g,
        Shape::SelfLike => SELF_GROUP,
        Shape::Inter(a, _) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::members::intern;

    /// Rank `r` of 4: world, self, its half, a window over the world, an intercommunicator
    /// between the halves, and one more single-process communicator.
    fn meta(r: u32) -> RankMeta {
        let half: Vec<u32> = (0..4).filter(|x| x % 2 == r % 2).collect();
        let other: Vec<u32> = (0..4).filter(|x| x % 2 != r % 2).collect();
        RankMeta {
            rank: r,
            comms: vec![
                (0, intern(&[0, 1, 2, 3])),
                (1, intern(&[r])),
                (2, intern(&half)),
                (3, intern(&[0, 1, 2, 3])),
                (4, intern(&half)),
                (5, intern(&[r])),
            ],
            wins: vec![(3, 0)],
            remote_groups: vec![(4, intern(&other))],
            ..Default::default()
        }
    }

    #[test]
    fn ranks_agree_on_communicators_windows_and_intercommunicators() {
        let metas: Vec<RankMeta> = (0..4).map(meta).collect();
        let defs = CommDefs::new(&metas, 4);
        let id = |r: usize, local: u32| defs.ranks[r].comms[&local];
        for r in 0..4 {
            assert_eq!(id(r, 0), 0);
            assert_eq!(defs.comms[id(r, 1) as usize].name, "MPI_COMM_SELF");
            assert_eq!(defs.comms[id(r, 1) as usize].shape, Shape::SelfLike);
            assert_eq!(defs.comms[id(r, 5) as usize].shape, Shape::SelfLike);
            assert_ne!(id(r, 5), id(r, 1));
            // Windows are not communicators.
            assert!(!defs.ranks[r].comms.contains_key(&3));
            assert_eq!(defs.win(r, 3), Some(0));
        }
        assert_eq!(id(0, 2), id(2, 2));
        assert_eq!(id(1, 2), id(3, 2));
        assert_ne!(id(0, 2), id(1, 2));
        // One intercommunicator, the same from both sides, between the halves' groups.
        assert!((1..4).all(|r| id(r, 4) == id(0, 4)));
        let Shape::Inter(a, b) = defs.comms[id(0, 4) as usize].shape else {
            panic!("not an intercommunicator");
        };
        let group_of = |c: u32| match defs.comms[c as usize].shape {
            Shape::Intra(g) => g,
            _ => panic!("not an intracommunicator"),
        };
        let mut sides = [a, b];
        sides.sort();
        let mut halves = [group_of(id(0, 2)), group_of(id(1, 2))];
        halves.sort();
        assert_eq!(sides, halves);
        assert_eq!(defs.wins.len(), 1);
        assert_eq!(defs.wins[0].comm, Some(0));
        assert!(defs.wins[0].create_destroy);
        // world, self, self-like, two halves, the intercommunicator
        assert_eq!(defs.comms.len(), 6);
    }

    #[test]
    fn parents_only_between_intracommunicators() {
        let metas: Vec<RankMeta> = (0..4).map(meta).collect();
        let mut defs = CommDefs::new(&metas, 4);
        let half = defs.ranks[0].comms[&2];
        let inter = defs.ranks[0].comms[&4];
        defs.set_parent(half, 0);
        defs.set_parent(inter, 0);
        defs.set_parent(half, inter);
        assert_eq!(defs.comms[half as usize].parent, Some(0));
        assert_eq!(defs.comms[inter as usize].parent, None);
        assert_eq!(defs.comms[0].parent, None);
    }

    #[test]
    fn windows_that_predate_recording_get_their_own_group() {
        let metas: Vec<RankMeta> = (0..2)
            .map(|r| RankMeta {
                rank: r,
                comms: vec![(7, intern(&[1, 0]))],
                wins: vec![(7, NO_COMM)],
                ..Default::default()
            })
            .collect();
        let defs = CommDefs::new(&metas, 2);
        let w = &defs.wins[0];
        assert!(!w.create_destroy);
        let comm = &defs.comms[w.comm.unwrap() as usize];
        let Shape::Intra(g) = comm.shape else {
            panic!("not an intracommunicator")
        };
        assert_eq!(&*defs.groups[g as usize - 2], &[1, 0]);
    }
}
