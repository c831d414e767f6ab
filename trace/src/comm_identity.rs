//! Which communicators of different ranks are the same one: the one rule every consumer of
//! communicator ids across ranks follows (the happened-before matching, the OTF2 export).
//!
//! A communicator with a usable `CommOrigin` (format chunk version 8) is identified by how it was
//! made: (its parent's identity, the how-many-th constructor on that parent, its members: the
//! parts of one `MPI_Comm_split` share the first two), or for
//! `MPI_Comm_create_group` and `MPI_Comm_create_from_group` by their tag and members as well,
//! which every member computes alike (FORMAT.md, `CommOrigin`). The others (the predefined ones,
//! intercommunicators made between two groups, everything in older traces) and those whose parent
//! is an intercommunicator (whose identity is not the same on its two sides) are identified by
//! their members and which communicator with those members they are on the rank, among the
//! communicators identified that way.

use std::collections::HashMap;

use format::{CommId, CommOrigin};

use crate::definitions::RankMeta;
use crate::members::{ListIds, Members};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Members {
        list: u32,
        occurrence: u32,
    },
    /// With the members: one `MPI_Comm_split` (or `MPI_Comm_create` with disjoint groups) makes
    /// several communicators at the same index.
    Parent {
        parent: u32,
        index: u32,
        list: u32,
    },
    Group {
        parent: u32,
        tag: i32,
        list: u32,
        index: u32,
    },
    Tagged {
        tag: String,
        list: u32,
        index: u32,
    },
    /// A definition that cannot be placed (its parents form a cycle: a malformed trace).
    Unique(u32),
}

/// Global communicator identities, built rank by rank: equal numbers are the same communicator.
#[derive(Default)]
pub struct CommIdentities {
    lists: ListIds,
    keys: HashMap<Key, u32>,
    unique: u32,
}

enum State {
    Open,
    Visiting,
    Done(u32),
}

impl CommIdentities {
    /// The global identity of each of one rank's definitions `defs` (in the order the rank
    /// defined them, the predefined communicators included), given the rank's `origins` and
    /// which of its ids are intercommunicators.
    pub fn rank(
        &mut self,
        defs: &[(CommId, Members)],
        origins: &[(CommId, CommOrigin)],
        is_inter: impl Fn(CommId) -> bool,
    ) -> Vec<u32> {
        let mut first: HashMap<CommId, usize> = HashMap::new();
        for (i, (id, _)) in defs.iter().enumerate() {
            first.entry(*id).or_insert(i);
        }
        let origin_of: HashMap<CommId, &CommOrigin> =
            origins.iter().map(|(id, o)| (*id, o)).collect();
        // The parent whose identity a definition's depends on, if its origin is usable: it
        // depends on nothing but this rank's definitions, so every member decides alike.
        let usable = |i: usize| -> Option<(Option<usize>, &CommOrigin)> {
            let origin = *origin_of.get(&defs[i].0)?;
            match origin {
                CommOrigin::Tagged { .. } => Some((None, origin)),
                CommOrigin::Parent { parent, .. } | CommOrigin::Group { parent, .. } => {
                    let p = *first.get(parent)?;
                    (!is_inter(*parent)).then_some((Some(p), origin))
                }
            }
        };
        let mut occurrences: HashMap<u32, u32> = HashMap::new();
        let mut state: Vec<State> = defs.iter().map(|_| State::Open).collect();
        for (i, (_, members)) in defs.iter().enumerate() {
            if usable(i).is_none() {
                let list = self.lists.id(members);
                let n = occurrences.entry(list).or_default();
                let key = Key::Members {
                    list,
                    occurrence: *n,
                };
                *n += 1;
                state[i] = State::Done(self.global(key));
            }
        }
        // The rest, each after its parent (a rank's definitions of different threads need not
        // come parent first): an explicit stack, as chains of duplicates can be long.
        for start in 0..defs.len() {
            let mut stack = vec![start];
            while let Some(&i) = stack.last() {
                match state[i] {
                    State::Done(_) => {
                        stack.pop();
                        continue;
                    }
                    State::Visiting => {}
                    State::Open => {
                        state[i] = State::Visiting;
                        if let Some((Some(p), _)) = usable(i)
                            && matches!(state[p], State::Open)
                        {
                            stack.push(p);
                            continue;
                        }
                    }
                }
                let (parent, origin) = usable(i).expect("only usable origins are left open");
                let parent = match parent.map(|p| &state[p]) {
                    Some(State::Done(g)) => Some(*g),
                    None => None,
                    // The parent is being resolved below this one: a cycle.
                    Some(_) => {
                        self.unique += 1;
                        state[i] = State::Done(self.global(Key::Unique(self.unique)));
                        stack.pop();
                        continue;
                    }
                };
                let key = match origin {
                    CommOrigin::Parent { index, .. } => Key::Parent {
                        parent: parent.unwrap_or(u32::MAX),
                        index: *index,
                        list: self.lists.id(&defs[i].1),
                    },
                    CommOrigin::Group { tag, index, .. } => Key::Group {
                        parent: parent.unwrap_or(u32::MAX),
                        tag: *tag,
                        list: self.lists.id(&defs[i].1),
                        index: *index,
                    },
                    CommOrigin::Tagged { tag, index } => Key::Tagged {
                        tag: tag.clone(),
                        list: self.lists.id(&defs[i].1),
                        index: *index,
                    },
                };
                state[i] = State::Done(self.global(key));
                stack.pop();
            }
        }
        state
            .into_iter()
            .map(|s| match s {
                State::Done(g) => g,
                _ => unreachable!("every definition is resolved"),
            })
            .collect()
    }

    /// One rank's communicators and windows with their global identities, in definition order,
    /// `MPI_COMM_WORLD` (members `world`) and `MPI_COMM_SELF` first where the rank's trace does
    /// not define them.
    pub fn of_rank(&mut self, meta: &RankMeta, world: &Members) -> Vec<(CommId, Members, u32)> {
        let mut defs: Vec<(CommId, Members)> = Vec::with_capacity(meta.comms.len() + 2);
        if !meta.comms.iter().any(|(id, _)| *id == 0) {
            defs.push((0, world.clone()));
        }
        if !meta.comms.iter().any(|(id, _)| *id == 1) {
            defs.push((1, Members::from([meta.rank])));
        }
        defs.extend(meta.comms.iter().cloned());
        let inter: std::collections::HashSet<CommId> =
            meta.remote_groups.iter().map(|(id, _)| *id).collect();
        let globals = self.rank(&defs, &meta.origins, |id| inter.contains(&id));
        defs.into_iter()
            .zip(globals)
            .map(|((id, members), g)| (id, members, g))
            .collect()
    }

    fn global(&mut self, key: Key) -> u32 {
        let n = self.keys.len() as u32;
        *self.keys.entry(key).or_insert(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: &[u32]) -> Members {
        v.into()
    }

    fn parent(parent: CommId, index: u32) -> CommOrigin {
        CommOrigin::Parent { parent, index }
    }

    /// Two duplicates of the world made in opposite orders on two ranks (legal: each is ordered
    /// on its own parent) are told apart by origin, not crossed as by members and order.
    #[test]
    fn creation_order_across_parents_does_not_matter() {
        let world = m(&[0, 1]);
        let mut ids = CommIdentities::default();
        // Rank 0: A = dup(world) [index 0], then B = dup(A) [index 0 on A].
        let r0 = ids.rank(
            &[(0, world.clone()), (5, world.clone()), (6, world.clone())],
            &[(5, parent(0, 0)), (6, parent(5, 0))],
            |_| false,
        );
        // Rank 1 defines the same, B's definition first (another thread's chunk came first).
        let r1 = ids.rank(
            &[(0, world.clone()), (9, world.clone()), (8, world.clone())],
            &[(8, parent(0, 0)), (9, parent(8, 0))],
            |_| false,
        );
        assert_eq!(r0[0], r1[0]);
        assert_eq!(r0[1], r1[2], "A");
        assert_eq!(r0[2], r1[1], "B");
        assert_ne!(r0[1], r0[2]);
        // Without origins the same lists cross: the old rule, kept for older traces.
        let mut old = CommIdentities::default();
        let o0 = old.rank(&[(5, world.clone()), (6, world.clone())], &[], |_| false);
        let o1 = old.rank(&[(9, world.clone()), (8, world.clone())], &[], |_| false);
        assert_eq!(o0[0], o1[0]);
    }

    #[test]
    fn the_parts_of_one_split_differ() {
        let mut ids = CommIdentities::default();
        let world = m(&[0, 1, 2, 3]);
        let a = ids.rank(
            &[(0, world.clone()), (5, m(&[0, 2]))],
            &[(5, parent(0, 0))],
            |_| false,
        );
        let b = ids.rank(
            &[(0, world.clone()), (5, m(&[1, 3]))],
            &[(5, parent(0, 0))],
            |_| false,
        );
        let c = ids.rank(
            &[(0, world.clone()), (7, m(&[0, 2]))],
            &[(7, parent(0, 0))],
            |_| false,
        );
        assert_ne!(a[1], b[1]);
        assert_eq!(a[1], c[1]);
    }

    #[test]
    fn group_and_tagged_origins_include_members_and_inter_parents_fall_back() {
        let mut ids = CommIdentities::default();
        let group = CommOrigin::Group {
            parent: 0,
            tag: 3,
            index: 0,
        };
        let a = ids.rank(
            &[(0, m(&[0, 1, 2])), (4, m(&[0, 1])), (5, m(&[0, 2]))],
            &[(4, group.clone()), (5, group.clone())],
            |_| false,
        );
        assert_ne!(a[1], a[2], "same tag and index, other members");
        let tagged = CommOrigin::Tagged {
            tag: "t".into(),
            index: 0,
        };
        let b = ids.rank(&[(7, m(&[0, 1]))], &[(7, tagged.clone())], |_| false);
        let c = ids.rank(&[(3, m(&[0, 1]))], &[(3, tagged)], |_| false);
        assert_eq!(b, c);
        // A child of an intercommunicator: by members, as on the other side.
        let d = ids.rank(
            &[(2, m(&[0])), (3, m(&[0, 1]))],
            &[(3, parent(2, 0))],
            |id| id == 2,
        );
        let e = ids.rank(&[(2, m(&[1])), (3, m(&[0, 1]))], &[], |_| false);
        assert_eq!(d[1], e[1]);
    }

    #[test]
    fn cycles_and_missing_parents_do_not_hang() {
        let mut ids = CommIdentities::default();
        let r = ids.rank(
            &[(5, m(&[0])), (6, m(&[0])), (7, m(&[0]))],
            &[(5, parent(6, 0)), (6, parent(5, 0)), (7, parent(99, 0))],
            |_| false,
        );
        assert_eq!(r.len(), 3);
        assert_ne!(r[0], r[1]);
    }
}
