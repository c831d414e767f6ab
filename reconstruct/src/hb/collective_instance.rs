//! A collective instance: which call of which communicator it is, the members that joined it
//! with their entries, and the summary of the latest entries that each exit is judged against.
//! The matcher fills instances in; the violation count and the repair read them.

use std::sync::Arc;

use super::HbContext;
use trace::funcs::CollShape;

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
    pub(super) summaries: [Option<Box<EntrySummary>>; 3],
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

/// The latest entries of a collective instance, so that an exit that waits for every member is
/// judged in O(log clock groups), not O(members): a barrier of 10^4 ranks has 10^4 exits, and
/// ranks whose hosts are unknown are a clock group each.
pub(super) struct EntrySummary {
    /// Per clock group, sorted by group: (group, latest entry in the given times, latest as
    /// recorded, latest repaired). An exit is compared with its own group's entries without any
    /// tolerance.
    groups: Vec<(u32, u64, u64, u64)>,
    /// Against other groups an exit at `end` violates when `end + its uncertainty + theirs <
    /// their latest entry`, i.e. `end + its uncertainty < latest − theirs`: the two largest
    /// right-hand sides from distinct groups, in the given times and as recorded, so that the
    /// best one not of the exit's own group is at hand.
    given: Extremes,
    recorded: Extremes,
    /// The same over the repaired entries, which the output holds.
    repaired: Extremes,
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
        let mut groups: Vec<(u32, u64, u64, u64, u64)> = Vec::with_capacity(range.len());
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
            let repaired = inst.starts[k].unwrap_or(0);
            groups.push((
                r.clock_group,
                r.clock_uncertainty_ns,
                raw,
                recorded,
                repaired,
            ));
        }
        // One entry per group with its latest entries: once per instance, O(members · log).
        groups.sort_unstable_by_key(|g| g.0);
        groups.dedup_by(|later, kept| {
            let same = kept.0 == later.0;
            if same {
                kept.2 = kept.2.max(later.2);
                kept.3 = kept.3.max(later.3);
                kept.4 = kept.4.max(later.4);
            }
            same
        });
        let (mut given, mut recorded, mut repaired) =
            (Extremes::NONE, Extremes::NONE, Extremes::NONE);
        for &(group, unc, raw_max, recorded_max, repaired_max) in &groups {
            given.offer(i128::from(raw_max) - i128::from(unc), group);
            recorded.offer(i128::from(recorded_max) - i128::from(unc), group);
            repaired.offer(i128::from(repaired_max) - i128::from(unc), group);
        }
        EntrySummary {
            groups: groups
                .into_iter()
                .map(|(g, _, raw, rec, rep)| (g, raw, rec, rep))
                .collect(),
            given,
            recorded,
            repaired,
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
    pub(super) fn violated(
        &self,
        group: u32,
        unc: u64,
        end: u64,
        recorded_end: u64,
    ) -> (bool, bool) {
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

    /// The end before which an exit of a rank of `group` (uncertain by `unc`) left before a
    /// repaired entry it waited for: [`Self::violated`]'s test, in the repaired times, as one
    /// bound (`end < own` or `end + unc < other` is `end < max(own, other − unc)`).
    pub(super) fn repaired_bound(&self, group: u32, unc: u64) -> i128 {
        let own = self
            .groups
            .binary_search_by_key(&group, |g| g.0)
            .ok()
            .map_or(i128::MIN, |i| i128::from(self.groups[i].3));
        own.max(
            self.repaired
                .other_than(group)
                .saturating_sub(i128::from(unc)),
        )
    }

    /// [`Self::repaired_bound`] for a rank judged with no tolerance at all.
    pub(super) fn repaired_bound_anywhere(&self) -> i128 {
        self.groups
            .iter()
            .map(|g| i128::from(g.3))
            .max()
            .unwrap_or(i128::MIN)
    }

    pub(super) fn violated_anywhere(&self, end: u64, recorded_end: u64) -> (bool, bool) {
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
