//! RMA epochs. Fences: the k-th `Win_fence` of a window is the k-th of every member of the
//! window's communicator, a collective. General active target (post/start/complete/wait): the
//! target's `Win_wait` (or a `Win_test` that returned true) ends only after every origin of its
//! post group called `Win_complete` (MPI 4.0, 12.5.2), an edge like a message from the origin's
//! `Win_complete` (its start) to the target's wait (its end). Per (window, origin, target) the
//! epochs keep their order, so the k-th exposure epoch of a target naming an origin pairs with the
//! k-th access epoch of that origin naming the target, numbered like messages on a key of their
//! own ([`EPOCH_TAG`]). The groups come from the `EpochGroup` records before `Win_post` and
//! `Win_start`; `Win_start` may or may not wait for the post, so it waits for nobody. Passive
//! target (lock/unlock) defines no order between origins and is not matched.

use format::{CommId, MpiCall};

use super::{Class, Comm, Need};
use crate::hb::{Action, EventRef, Lane, Shared};
use trace::funcs::CollShape;

/// The tag of the keys of PSCW epoch edges: message tags are never negative, so an epoch is
/// never taken for a message, nor a message for an epoch.
pub(in crate::hb) const EPOCH_TAG: i32 = i32::MIN;

/// An open window of a rank, and how many fences it had.
pub(super) struct Window {
    comm: Comm,
    ordinal: u32,
    fences: u64,
}

impl Shared<'_> {
    /// The global id of window `win`'s group (its `CommDef`), which names the window on every
    /// member alike.
    fn window_global(&self, lane_rank: usize, win: CommId) -> Option<u32> {
        self.comm(lane_rank, win).map(|c| c.global)
    }

    /// A window's creation, free, fence or PSCW call (see [`Shared::process`]).
    pub(super) fn process_rma<I>(
        &mut self,
        lane: &Lane<I>,
        index: u64,
        removed: u64,
        class: Class,
        c: &MpiCall,
    ) -> Action {
        match class {
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
                            (key, self.number_receive(lane.rank_idx, key))
                        })
                        .collect();
                    self.ranks[lane.rank_idx]
                        .epoch_waits
                        .insert(lane.id.stream, waits);
                }
                Action::Hold(None)
            }
            // Not a window class: not dispatched here.
            _ => Action::Emit,
        }
    }

    /// What a held `Win_wait` waits for: the `Win_complete` of every origin of its post group.
    pub(super) fn epoch_needs<I>(&mut self, lane: &Lane<I>, here: EventRef, needs: &mut Vec<Need>) {
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
}
