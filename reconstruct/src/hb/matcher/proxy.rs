//! A proxy lane: what another process's rank does that this process's ranks depend on (see
//! [`crate::hb::partition`]). Its sends number their channels and its collective entries fill
//! their instances exactly as the rank's own lane would, but nothing of it is held, judged or
//! counted here: its receives and exits belong to the process that owns the rank.

use format::MpiCall;

use super::Class;
use crate::hb::{Lane, Shared};
use trace::funcs::Deferred;

impl Shared<'_> {
    /// Takes one call of a proxy lane.
    pub(in crate::hb) fn feed_proxy<I>(
        &mut self,
        lane: &Lane<I>,
        index: u64,
        removed: u64,
        c: &MpiCall,
    ) {
        match self.class(lane.rank_idx, c.func) {
            Class::Send | Class::Isend | Class::SendRecv => {
                self.record_send(lane, index, removed, c);
            }
            Class::Deferred(d @ (Deferred::SendInit | Deferred::RecvInit)) => {
                self.ranks[lane.rank_idx]
                    .persistent
                    .init(d == Deferred::SendInit, c);
            }
            Class::Deferred(Deferred::Start) => {
                if let Some(p) = self.ranks[lane.rank_idx].persistent.started(c)
                    && p.send
                {
                    self.record_send(lane, index, removed, &p.call);
                }
            }
            Class::Collective(_) | Class::Icollective(_) | Class::RelayedIbarrier => {
                let c = *c;
                let entered = self.comm(lane.rank_idx, c.comm).cloned().and_then(|comm| {
                    let n = comm.members.len();
                    self.enter_collective(lane, removed, &comm, n, 0, &c, None)
                });
                // The member's exit is its owner's to judge: here it only stops keeping the
                // instance alive.
                if let Some(r) = entered
                    && let Some(inst) = self.colls.get_mut(&r.key)
                {
                    inst.exits_left = inst.exits_left.saturating_sub(1);
                    if inst.exits_left == 0 {
                        self.colls.remove(&r.key);
                    }
                }
            }
            _ => {}
        }
    }
}
