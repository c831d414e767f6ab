//! Collectives: the k-th collective a rank makes on a communicator is the k-th of every member;
//! neighbourhood collectives too (the topology is not recorded, so they wait for nobody). A
//! blocking one is held until the entries its exit waits for are known; a nonblocking one joins
//! its instance at once and waits at the completion of its request. (Fences: [`super::rma`];
//! collectives on an intercommunicator: [`super::inter`].)

use std::sync::Arc;

use format::{MpiCall, NO_REQUEST};

use super::{Class, Comm};
use crate::hb::collective_instance::{CollInst, CollRef};
use crate::hb::{Action, Lane, Shared};
use trace::funcs::CollShape;

impl Shared<'_> {
    /// Joins the next instance of `space` on `comm` (as entered at `c.start`); of its members
    /// the first `first_len` are one group (all, but on an intercommunicator).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn enter_collective<I>(
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
            self.stored_calls += 1;
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

    /// A collective on an intracommunicator (see [`Shared::process`]).
    pub(super) fn process_collective<I>(
        &mut self,
        lane: &Lane<I>,
        removed: u64,
        class: Class,
        c: &MpiCall,
    ) -> Action {
        match class {
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
            Class::Collective(shape) => {
                let c = *c;
                let r = self.comm(lane.rank_idx, c.comm).cloned().and_then(|comm| {
                    let n = comm.members.len();
                    self.enter_collective(lane, removed, &comm, n, 0, &c, shape)
                });
                Action::Hold(r)
            }
            // Not a collective class: not dispatched here.
            _ => Action::Emit,
        }
    }
}
