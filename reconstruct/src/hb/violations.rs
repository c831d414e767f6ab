//! What counts as a causality violation: a receive that completes before its send started; a
//! rank leaving a collective before a rank it must wait for (by the collective's shape) entered.
//!
//! Both are judged in the clock the two ranks share. Ranks of one host read one clock, so any
//! violation between them is real (a matching error, or a trace that is not what ran). Between
//! hosts the clocks are related by measured offsets, each known within its round trip: a
//! violation smaller than the two offsets' uncertainties together may be measurement noise and
//! is not counted (it is still repaired: the output must be consistent either way).

use super::matcher::{CollInst, CollRef, InterRole};
use super::{HbContext, Shared};
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

/// The latest entries of a collective instance, so that an exit that waits for every member is
/// judged in O(log clock groups), not O(members): a barrier of 10^4 ranks has 10^4 exits, and
/// ranks whose hosts are unknown are a clock group each.
pub(super) struct EntrySummary {
    /// Per clock group, sorted by group: (group, latest entry in the given times, latest as
    /// recorded). An exit is compared with its own group's entries without any tolerance.
    groups: Vec<(u32, u64, u64)>,
    /// Against other groups an exit at `end` violates when `end + its uncertainty + theirs <
    /// their latest entry`, i.e. `end + its uncertainty < latest − theirs`: the two largest
    /// right-hand sides from distinct groups, in the given times and as recorded, so that the
    /// best one not of the exit's own group is at hand.
    given: Extremes,
    recorded: Extremes,
    /// The two latest repaired entries with their positions: an exit waits for the others'
    /// (plus the latency), its own only as itself.
    top: [(u64, usize); 2],
    /// The same as recorded (the replay's estimates are learned there).
    top_recorded: [(u64, usize); 2],
}

/// Keeps the two largest values with their positions.
fn offer_top(top: &mut [(u64, usize); 2], value: u64, k: usize) {
    if value > top[0].0 || top[0].1 == usize::MAX {
        top[1] = top[0];
        top[0] = (value, k);
    } else if value > top[1].0 || top[1].1 == usize::MAX {
        top[1] = (value, k);
    }
}

/// An entry and the member's position; the latest of the others, replayed and as recorded.
pub(super) type Entry = (u64, usize);
pub(super) type LatestOthers = (Option<Entry>, Option<Entry>);

/// Of `top`, the latest entry not at `me`, with its position.
fn latest_other(top: &[(u64, usize); 2], me: usize) -> Option<(u64, usize)> {
    top.iter()
        .copied()
        .find(|&(_, k)| k != usize::MAX && k != me)
}

/// The two largest values of distinct groups.
#[derive(Clone, Copy)]
struct Extremes([(i128, u32); 2]);

impl Extremes {
    const NONE: Extremes = Extremes([(i128::MIN, u32::MAX); 2]);

    fn offer(&mut self, value: i128, group: u32) {
        let [first, second] = &mut self.0;
        if value > first.0 {
            if first.1 != group {
                *second = *first;
            }
            *first = (value, group);
        } else if group != first.1 && value > second.0 {
            *second = (value, group);
        }
    }

    /// The largest value of a group other than `group`.
    fn other_than(&self, group: u32) -> i128 {
        let [first, second] = self.0;
        if first.1 != group { first.0 } else { second.0 }
    }
}

impl EntrySummary {
    /// Of the members at positions `range`.
    pub(super) fn of(
        ctx: &HbContext,
        inst: &CollInst,
        range: std::ops::Range<usize>,
    ) -> EntrySummary {
        let mut groups: Vec<(u32, u64, u64, u64)> = Vec::with_capacity(range.len());
        let mut top = [(0u64, usize::MAX); 2];
        let mut top_recorded = [(0u64, usize::MAX); 2];
        for k in range {
            let m = inst.members[k];
            if let Some(s) = inst.starts[k] {
                offer_top(&mut top, s, k);
            }
            if let Some(s) = inst.recorded_starts[k] {
                offer_top(&mut top_recorded, s, k);
            }
            let Some(r) = ctx.index_of(m).and_then(|i| ctx.ranks.get(i)) else {
                continue;
            };
            let raw = inst.raw_starts[k].unwrap_or(0);
            let recorded = inst.recorded_starts[k].unwrap_or(0);
            groups.push((r.clock_group, r.clock_uncertainty_ns, raw, recorded));
        }
        // One entry per group with its latest entries: once per instance, O(members · log).
        groups.sort_unstable_by_key(|g| g.0);
        groups.dedup_by(|later, kept| {
            let same = kept.0 == later.0;
            if same {
                kept.2 = kept.2.max(later.2);
                kept.3 = kept.3.max(later.3);
            }
            same
        });
        let (mut given, mut recorded) = (Extremes::NONE, Extremes::NONE);
        for &(group, unc, raw_max, recorded_max) in &groups {
            given.offer(i128::from(raw_max) - i128::from(unc), group);
            recorded.offer(i128::from(recorded_max) - i128::from(unc), group);
        }
        EntrySummary {
            groups: groups
                .into_iter()
                .map(|(g, _, raw, rec)| (g, raw, rec))
                .collect(),
            given,
            recorded,
            top,
            top_recorded,
        }
    }

    /// The latest entry of another member than `me`, repaired (or replayed) and as recorded,
    /// each with its position.
    pub(super) fn latest_others(&self, me: usize) -> LatestOthers {
        (
            latest_other(&self.top, me),
            latest_other(&self.top_recorded, me),
        )
    }

    /// Whether exits at `end` (given) and `recorded_end` of a rank of `group`, whose offset is
    /// uncertain by `unc`, left before an entry they waited for.
    fn violated(&self, group: u32, unc: u64, end: u64, recorded_end: u64) -> (bool, bool) {
        let own = self
            .groups
            .binary_search_by_key(&group, |g| g.0)
            .ok()
            .map(|i| self.groups[i]);
        let (end_t, rec_t) = (
            i128::from(end) + i128::from(unc),
            i128::from(recorded_end) + i128::from(unc),
        );
        let raw = own.is_some_and(|g| end < g.1) || end_t < self.given.other_than(group);
        let recorded =
            own.is_some_and(|g| recorded_end < g.2) || rec_t < self.recorded.other_than(group);
        (raw, recorded)
    }

    fn violated_anywhere(&self, end: u64, recorded_end: u64) -> (bool, bool) {
        (
            self.groups.iter().any(|g| end < g.1),
            self.groups.iter().any(|g| recorded_end < g.2),
        )
    }

    /// The latest repaired entry of the others plus `latency`, or `me`'s own.
    pub(super) fn required(&self, me: usize, latency: u64) -> u64 {
        let mut required = 0u64;
        for &(s, k) in &self.top {
            if k == usize::MAX {
                continue;
            }
            let gap = if k == me { 0 } else { latency };
            required = required.max(s.saturating_add(gap));
        }
        required
    }
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
}
