//! What counts as a causality violation: a receive that completes before its send started; a
//! rank leaving a collective before a rank it must wait for (by the collective's shape) entered.
//!
//! Both are judged in the clock the two ranks share. Ranks of one host read one clock, so any
//! violation between them is real (a matching error, or a trace that is not what ran). Between
//! hosts the clocks are related by measured offsets, each known within its round trip: a
//! violation smaller than the two offsets' uncertainties together may be measurement noise and
//! is not counted (it is still repaired: the output must be consistent either way).

use super::collective_instance::{CollInst, CollRef, InterRole};
use super::{HbContext, OutputBound, Shared};
use trace::funcs::CollShape;

impl HbContext {
    /// How far apart two ranks' clocks may be without it being measurable, ns.
    pub(super) fn tolerance(&self, a: usize, b: usize) -> u64 {
        match (self.ranks.get(a), self.ranks.get(b)) {
            (Some(x), Some(y)) if x.clock_group != y.clock_group => x
                .clock_uncertainty_ns
                .saturating_add(y.clock_uncertainty_ns),
            _ => 0,
        }
    }
}

/// Positions in the communicator whose entry this exit waits for.
pub(super) fn waited_for(r: &CollRef, n: usize) -> std::ops::Range<usize> {
    let me = r.me as usize;
    let root = r.root as usize;
    if let Some(inter) = r.inter {
        let remote = inter.remote.0 as usize..inter.remote.1 as usize;
        let range = match (r.shape, inter.role) {
            (_, InterRole::RelayedByRemoteRoot) => remote.start..remote.start.saturating_add(1),
            // Data flows between the groups only: a rank waits for the other group, not its own
            // (MPI 4.0, 6.3: even a barrier "may return before all processes in its own group
            // have entered").
            (Some(CollShape::AllToAll), _) => remote,
            (Some(CollShape::OneToAll), InterRole::Member) => root..root.saturating_add(1),
            (Some(CollShape::AllToOne), InterRole::Root) => remote,
            // The root of a one-to-all kind, the ranks passing MPI_PROC_NULL, the senders of an
            // all-to-one kind; scans are not defined on intercommunicators.
            _ => 0..0,
        };
        return range.start.min(n)..range.end.min(n);
    }
    let range = match r.shape {
        None => 0..0,
        Some(CollShape::AllToAll) => 0..n,
        // Bcast, Scatter: the root sends, so only the others wait for it; it may leave at once.
        Some(CollShape::OneToAll) if me != root => root..root + 1,
        // Reduce, Gather: the root receives from everybody; the others may leave before it or
        // anybody else entered (their contribution can be buffered).
        Some(CollShape::AllToOne) if me == root => 0..n,
        Some(CollShape::OneToAll | CollShape::AllToOne) => 0..0,
        Some(CollShape::Prefix) => 0..me + 1,
        Some(CollShape::ExclusivePrefix) => 0..me,
    };
    // A root outside the communicator (a damaged record) waits for nobody.
    range.start.min(n)..range.end.min(n)
}

/// Whether every entry this exit waits for is known, or will never be (its rank has nothing
/// left).
pub(super) fn entries_known(shared: &Shared<'_>, r: &CollRef, inst: &CollInst) -> bool {
    let range = waited_for(r, inst.starts.len());
    // Checked at every turn of a waiting lane: the common cases without a walk over the members.
    if inst.entered == inst.starts.len() || range.is_empty() {
        return true;
    }
    if let Some(slot) = inst.summary_slot(&range) {
        if inst.entered_in(slot) == range.len() {
            return true;
        }
        if shared.absent_ranks == 0 {
            return false;
        }
    }
    inst.starts[range.clone()]
        .iter()
        .zip(&inst.members[range])
        .all(|(s, &m)| s.is_some() || shared.absent(m))
}

impl Shared<'_> {
    /// Counts a message (or PSCW epoch edge, `epoch`) whose receive ended at `end` (given times)
    /// and `recorded_end`, against its send's start; `sender` and `receiver` are rank indices.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn count_message(
        &mut self,
        epoch: bool,
        sender: usize,
        receiver: usize,
        send_raw: u64,
        send_recorded: u64,
        end: u64,
        recorded_end: u64,
    ) {
        let tol = self.ctx.tolerance(sender, receiver);
        let raw = u64::from(end.saturating_add(tol) < send_raw);
        let recorded = u64::from(recorded_end.saturating_add(tol) < send_recorded);
        let r = &mut self.report;
        if epoch {
            r.rma_epochs += 1;
            r.epoch_violations += raw;
            r.recorded_epoch_violations += recorded;
        } else {
            r.messages += 1;
            r.message_violations += raw;
            r.recorded_message_violations += recorded;
        }
    }

    /// Counts one exit of a collective instance at `end` (given times) and `recorded_end`.
    pub(super) fn count_exit(
        &mut self,
        me_idx: usize,
        r: &CollRef,
        inst: &CollInst,
        end: u64,
        recorded_end: u64,
    ) {
        self.report.collective_exits += 1;
        let mut raw = false;
        let mut recorded = false;
        let range = waited_for(r, inst.starts.len());
        if let Some(summary) = inst
            .summary_slot(&range)
            .and_then(|slot| inst.summaries[slot].as_deref())
        {
            (raw, recorded) = match self.ctx.ranks.get(me_idx) {
                Some(x) => {
                    summary.violated(x.clock_group, x.clock_uncertainty_ns, end, recorded_end)
                }
                // A rank without context is judged with no tolerance at all.
                None => summary.violated_anywhere(end, recorded_end),
            };
        } else {
            for k in range {
                let Some(other) = self.ctx.index_of(inst.members[k]) else {
                    continue;
                };
                let tol = self.ctx.tolerance(me_idx, other);
                if let Some(s) = inst.raw_starts[k] {
                    raw |= end.saturating_add(tol) < s;
                }
                if let Some(s) = inst.recorded_starts[k] {
                    recorded |= recorded_end.saturating_add(tol) < s;
                }
            }
        }
        self.report.collective_violations += u64::from(raw);
        self.report.recorded_collective_violations += u64::from(recorded);
    }

    /// The end before which this exit violates in the repaired times (what the output holds):
    /// [`Self::count_exit`]'s test on the repaired entries, as one bound.
    pub(super) fn exit_output_bound(&self, me_idx: usize, r: &CollRef, inst: &CollInst) -> i128 {
        let range = waited_for(r, inst.starts.len());
        if let Some(summary) = inst
            .summary_slot(&range)
            .and_then(|slot| inst.summaries[slot].as_deref())
        {
            return match self.ctx.ranks.get(me_idx) {
                Some(x) => summary.repaired_bound(x.clock_group, x.clock_uncertainty_ns),
                None => summary.repaired_bound_anywhere(),
            };
        }
        range
            .filter_map(|k| {
                let other = self.ctx.index_of(inst.members[k])?;
                let start = inst.starts[k]?;
                Some(i128::from(start) - i128::from(self.ctx.tolerance(me_idx, other)))
            })
            .max()
            .unwrap_or(i128::MIN)
    }

    /// Counts what [`Self::output_bounds`] holds against the end the held call goes out with.
    pub(super) fn count_output(&mut self, end: u64) {
        let Some(o) = self.output.as_mut() else {
            self.output_bounds.clear();
            return;
        };
        for (what, bound) in self.output_bounds.drain(..) {
            let violated = u64::from(i128::from(end) < bound);
            match what {
                OutputBound::Message => o.messages += violated,
                OutputBound::Epoch => o.epochs += violated,
                OutputBound::Exit => o.collectives += violated,
            }
        }
    }
}
