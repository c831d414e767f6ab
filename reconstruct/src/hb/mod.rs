//! Happened-before: matching sends to receives and the ranks of each collective, finding where a
//! trace's times contradict causality, and repairing it. One concept per file:
//!
//! - here: the public types and the scheduler, which runs every lane (thread of a rank) as far
//!   as it can, holding only what is in flight (unmatched sends, open collectives, one held call
//!   per lane), so memory does not grow with the length of the trace;
//! - [`context`]: what the engine knows of the trace before it reads an event (each function's
//!   class, each communicator's global identity, the clocks, the replay's estimates);
//! - [`matcher`]: which send a receive takes and which instance of a collective a call joins,
//!   by MPI's rules, not by timestamps;
//! - [`collective_instance`]: a collective instance, the entries of its members and the summary
//!   of the latest, which the matcher fills in and the two below read;
//! - [`violations`]: what counts as a causality violation (by the collective's shape, and
//!   within the clocks' measured uncertainty);
//! - [`repair`]: the controlled logical clock that moves times so that none remains.

use format::Event;

use trace::lanes::LaneId;

mod collective_instance;
mod context;
mod estimates;
mod fast_map;
mod matcher;
mod output_violations;
mod partition;
mod repair;
mod violations;

pub use context::HbContext;
pub use estimates::Estimates;
pub use output_violations::OutputViolations;
pub use partition::{
    ProxyFilter, ProxyLane, Pump, SplitPass, Unstuck, merge_reports, run_split_in_turn,
    run_streamed, split_differs,
};

use collective_instance::{CollInst, CollKey, CollRef};
use fast_map::{FastHasher, FastMap};
use matcher::{Class, Need, RankState};

/// One event of one lane: `index` counts every event of the lane from 0, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct EventRef {
    pub rank: u32,
    pub stream: u32,
    pub index: u64,
}

/// A matched message, in the times of the lanes the engine was given (after any repair).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MessageMatch {
    /// The send (or send half of a `Sendrecv`, or the `Start` of a persistent send).
    pub send: EventRef,
    /// Where the receive was posted (`Irecv`, `Start`), or the receive call itself.
    pub recv_post: EventRef,
    /// The call that completed the receive.
    pub recv_done: EventRef,
    pub source: u32,
    pub dest: u32,
    pub tag: i32,
    pub bytes: u64,
    pub send_start: u64,
    pub recv_end: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HbReport {
    pub messages: u64,
    /// PSCW epochs paired: one per origin named by a target's `Win_wait` (or true `Win_test`)
    /// matched to that origin's `Win_complete`; those left unpaired count as unmatched sends
    /// (a `Win_complete`'s target) and receives (a wait's origin).
    pub rma_epochs: u64,
    /// Collective exits checked (one per rank per collective).
    pub collective_exits: u64,
    /// Violations in the times the engine was given (after DP' and DP were removed, before any
    /// repair).
    pub message_violations: u64,
    pub collective_violations: u64,
    /// Targets' `Win_wait`s that ended before an origin they waited for started `Win_complete`.
    pub epoch_violations: u64,
    /// The same in the trace as recorded (global clock, nothing removed): on one host a clean
    /// trace has none; any there is a matching error or clock noise. The difference to the
    /// counts above was made by the removal (a suspension that was not equal on every rank).
    pub recorded_message_violations: u64,
    pub recorded_collective_violations: u64,
    pub recorded_epoch_violations: u64,
    pub unmatched_sends: u64,
    pub unmatched_receives: u64,
    /// Receives numbered while an earlier wildcard receive that could have taken their message
    /// was still open (its completion came later); their match assumes it did not.
    pub ambiguous_receives: u64,
    /// Receives, and collective instances, that went on without what they waited for because the
    /// rank that would provide it had no events left (it ended early, stopped recording, or its
    /// file was damaged).
    pub waits_on_absent_ranks: u64,
    /// Largest forward shift the repair gave a lane, ns of the lane's time unit.
    pub max_shift: u64,
    pub lanes_shifted: u64,
    /// With the repair on: the violations in the times this pass handed out, counted as they
    /// were handed out (see [`OutputViolations`]). Not part of the summary: it stands in for
    /// the check that reads the written output again.
    #[serde(skip)]
    pub output: Option<OutputViolations>,
}

impl HbReport {
    pub fn violations(&self) -> u64 {
        self.message_violations + self.collective_violations + self.epoch_violations
    }
    pub fn recorded_violations(&self) -> u64 {
        self.recorded_message_violations
            + self.recorded_collective_violations
            + self.recorded_epoch_violations
    }
}

/// How the repair moves times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repair {
    /// Move times at all (otherwise violations are only counted).
    pub enabled: bool,
    /// No message arrives sooner than this after its send started, nor does anybody leave a
    /// collective sooner than this after the last rank it waits for entered.
    pub min_latency_ns: u64,
    /// With `enabled`: recompute every wait from its partners (see [`repair`]) with the
    /// context's [`Estimates`], instead of only lengthening the waits that ended too early.
    pub replay: bool,
    /// Learn the [`Estimates`] from the times as recorded (returned by [`run_learning`]).
    pub learn: bool,
}

/// A lower bound of one-way latency between two ranks of one node with shared memory (a few
/// hundred ns on current hardware): small enough never to exceed a real one.
pub const DEFAULT_MIN_LATENCY_NS: u64 = 100;

impl Repair {
    pub const OFF: Repair = Repair {
        enabled: false,
        min_latency_ns: 0,
        replay: false,
        learn: false,
    };
    pub fn on() -> Repair {
        Repair {
            enabled: true,
            min_latency_ns: DEFAULT_MIN_LATENCY_NS,
            replay: false,
            learn: false,
        }
    }
    /// The replay (the context must carry [`Estimates`]).
    pub fn replay() -> Repair {
        Repair {
            replay: true,
            ..Repair::on()
        }
    }
    /// Nothing moved; the estimates learned.
    pub fn learning() -> Repair {
        Repair {
            learn: true,
            min_latency_ns: DEFAULT_MIN_LATENCY_NS,
            ..Repair::OFF
        }
    }
}

/// A lane's events, and how much time the mapping took out before each of them.
pub trait LaneSource: Iterator<Item = Event> {
    /// Nanoseconds the mapping removed (DP', DP) at the event last returned: its recorded time in
    /// the global clock is the returned time plus this.
    fn removed_ns(&self) -> u64 {
        0
    }
    /// The lane-wide index of the event last returned, for a source that hands out only some of
    /// a lane's events (those that matter to matching); `None`: every event, counted here.
    fn source_index(&self) -> Option<u64> {
        None
    }
    /// After `next` returned `None`: whether more may still come (a proxy lane streamed from
    /// another process has nothing yet), rather than that the lane ended.
    fn more_later(&self) -> bool {
        false
    }
    /// How far the replay had moved the lane at the event last returned: a proxy of a lane that
    /// another process replays carries it, so its sends and entries are timed as replayed there.
    fn shift_ns(&self) -> i64 {
        0
    }
}

/// A lane whose times are used as they are.
pub struct Plain<I>(pub I);

impl<I: Iterator<Item = Event>> Iterator for Plain<I> {
    type Item = Event;
    #[inline]
    fn next(&mut self) -> Option<Event> {
        self.0.next()
    }
}

impl<I: Iterator<Item = Event>> LaneSource for Plain<I> {}

struct Lane<I> {
    id: LaneId,
    /// Index into the context's ranks.
    rank_idx: usize,
    /// Another process's rank, seen only through what this process depends on (see
    /// [`partition`]).
    proxy: bool,
    src: I,
    next_index: u64,
    /// An event read but not processed yet, with its index and removed time.
    peeked: Option<(u64, Event, u64)>,
    /// How far the lane's times move: only forward with the repair, either way with the replay
    /// (a wait that the recorder's cost had lengthened gets shorter).
    shift: i64,
    /// The largest `shift` had (the repair gives shifts back at later waits).
    max_shift: u64,
    /// A call whose end depends on others, with the completions that follow it.
    held: Vec<Event>,
    held_index: u64,
    held_removed: u64,
    held_coll: Option<CollRef>,
    needs: Option<Vec<Need>>,
    /// An emptied needs list kept for the next held call, so holding a call allocates nothing.
    spare_needs: Vec<Need>,
    done: bool,
    /// The communicator defined by the event just before, if that was a definition: an
    /// `Intercomm_create` right after it created it.
    last_commdef: Option<format::CommId>,
    /// With the replay: a run of polls that found nothing and what followed it, not handed out
    /// yet (unshifted). If a call that waits comes next, the run is part of its wait (see
    /// `repair`); otherwise they go out as they are.
    pending: Vec<Event>,
    /// Time the mapping removed at the run of polls that begins `pending`.
    pending_removed: u64,
    /// Of `pending`, the calls whose times were stored for the partners (a send, an entry),
    /// with the start they were stored with: where one goes out at another, the pass's own
    /// count of the output's violations is not exact.
    pending_stored: Vec<(usize, u64)>,
    /// The held call's times were stored for the partners.
    held_stored: bool,
}

impl<I> Lane<I> {
    /// When, as recorded, the call this lane waits at began: its held call, or the call held
    /// back for its sibling lanes or its intercommunicator (0: it waits at nothing yet).
    fn waiting_since(&self) -> u64 {
        if let Some(Event::Call(c)) = self.held.first() {
            return c.start.saturating_add(self.held_removed);
        }
        if let Some((_, Event::Call(c), removed)) = &self.peeked {
            return c.start.saturating_add(*removed);
        }
        0
    }

    /// Moves the lane's later events by `shift`, keeping the largest forward move for the report.
    fn set_shift(&mut self, shift: i64) {
        self.shift = shift;
        self.max_shift = self.max_shift.max(shift.max(0) as u64);
    }
}

/// Events that may follow a run of polls before the call that waits (the successful poll, its
/// completions, a probe's receive): beyond this the run is taken as not waiting for anything.
const POLL_TAIL: usize = 8;

/// What to do with an event that is not part of a held call.
enum Action {
    Emit,
    /// Hold it: its end depends on others (with the collective it exits, if any).
    Hold(Option<CollRef>),
}

struct Shared<'c> {
    ctx: &'c HbContext,
    repair: Repair,
    ranks: Vec<RankState>,
    colls: FastMap<CollKey, CollInst>,
    report: HbReport,
    /// Per lane: no later call of the lane starts before this (its last time seen, the end of
    /// the call it holds, or the start of the call it waits to process), as recorded.
    frontier: Vec<u64>,
    /// Per lane: the other lanes of its rank (empty for single-threaded ranks, the usual case).
    siblings: Vec<Vec<usize>>,
    /// Per rank with several lanes: the latest start, in the output times, of a call one of its
    /// lanes handed out. Matching takes a rank's calls in the order they were recorded across
    /// its threads; moving the lanes apart must keep that order, or the output would match
    /// otherwise than its input.
    rank_last_start: Vec<u64>,
    /// Per rank: lanes that still have events. A rank with none left provides nothing more, so
    /// nobody waits for it.
    live_lanes: Vec<usize>,
    /// Ranks whose lanes all ended.
    absent_ranks: usize,
    /// Intercommunicator sides seen, by (tag, occurrence): their local groups; and the global
    /// id of each pair.
    inter_groups: FastMap<(i32, u32), Vec<std::sync::Arc<[u32]>>>,
    inter_globals: FastMap<matcher::InterPair, u32>,
    /// Pairings of intercommunicators known by their two groups: (lower group, higher group,
    /// occurrence) → key.
    group_pairings: FastMap<GroupPairing, u32>,
    /// With [`Repair::learn`].
    learned: Option<Estimates>,
    /// Matches of the call being resolved, handed out once its end is known.
    pending_matches: Vec<MessageMatch>,
    /// Per rank: whether another process owns it (a split pass, see [`partition`]).
    remote: Vec<bool>,
    /// The latest time, as recorded, that an own lane reached (its frontier): how far proxies
    /// may go.
    own_frontier: u64,
    /// With the repair: the violations in the times handed out (see [`OutputViolations`]).
    output: Option<OutputViolations>,
    /// Calls whose times were stored for the partners so far (sends, collective entries): tells
    /// whether processing an event stored one.
    stored_calls: u64,
    /// The held call's receives and exits being resolved, each with the end before which it
    /// would be a violation in the times handed out, until that end is known.
    output_bounds: Vec<(OutputBound, i128)>,
}

/// What a bound in [`Shared::output_bounds`] counts.
#[derive(Clone, Copy)]
enum OutputBound {
    Message,
    Epoch,
    Exit,
}

/// Two groups of an intercommunicator (the lower-sorting one first) and the occurrence.
type GroupPairing = (std::sync::Arc<[u32]>, std::sync::Arc<[u32]>, u32);

/// How many events a lane may process before the next lane gets its turn; bounds how far one
/// lane runs ahead, and so how many unmatched sends are held.
const TURN: usize = 4096;

/// Runs the matching (and, with `repair.enabled`, the repair) over `lanes`, each yielding its
/// events in order. `on_event` is shown every event of every lane exactly once, in lane order,
/// with its times moved by the repair; `on_match` every matched message.
pub fn run<I: LaneSource>(
    ctx: &HbContext,
    lanes: Vec<(LaneId, I)>,
    repair: Repair,
    on_event: impl FnMut(usize, &Event),
    on_match: impl FnMut(&MessageMatch),
) -> HbReport {
    run_learning(ctx, lanes, repair, on_event, on_match).0
}

/// [`run`], also returning what it learned with [`Repair::learn`] (empty otherwise).
pub fn run_learning<I: LaneSource>(
    ctx: &HbContext,
    lanes: Vec<(LaneId, I)>,
    repair: Repair,
    on_event: impl FnMut(usize, &Event),
    on_match: impl FnMut(&MessageMatch),
) -> (HbReport, Estimates) {
    let lanes = lanes
        .into_iter()
        .map(|(id, src)| (id, src, false))
        .collect();
    run_lanes(ctx, lanes, repair, on_event, on_match, None)
}

fn run_lanes<I: LaneSource>(
    ctx: &HbContext,
    lanes: Vec<(LaneId, I, bool)>,
    repair: Repair,
    mut on_event: impl FnMut(usize, &Event),
    mut on_match: impl FnMut(&MessageMatch),
    mut pump: Option<&mut dyn Pump>,
) -> (HbReport, Estimates) {
    let rank_of = |id: &LaneId| ctx.index_of(id.rank).unwrap_or(0);
    let mut remote = vec![false; ctx.ranks.len()];
    for (id, _, proxy) in &lanes {
        if *proxy && let Some(r) = remote.get_mut(rank_of(id)) {
            *r = true;
        }
    }
    let mut live_lanes = vec![0usize; ctx.ranks.len()];
    for (id, _, _) in &lanes {
        if let Some(n) = live_lanes.get_mut(rank_of(id)) {
            *n += 1;
        }
    }
    let mut shared = Shared {
        ctx,
        repair,
        ranks: ctx.ranks.iter().map(|_| RankState::default()).collect(),
        colls: FastMap::default(),
        report: HbReport::default(),
        frontier: vec![0; lanes.len()],
        rank_last_start: vec![0; ctx.ranks.len()],
        siblings: siblings(&lanes),
        live_lanes,
        absent_ranks: 0,
        inter_groups: FastMap::default(),
        inter_globals: FastMap::default(),
        group_pairings: FastMap::default(),
        learned: repair.learn.then(Estimates::default),
        pending_matches: Vec::new(),
        remote,
        own_frontier: 0,
        output: repair.enabled.then_some(OutputViolations::ZERO),
        stored_calls: 0,
        output_bounds: Vec::new(),
    };
    let mut lanes: Vec<Lane<I>> = lanes
        .into_iter()
        .map(|(id, src, proxy)| Lane {
            id,
            rank_idx: rank_of(&id),
            proxy,
            src,
            next_index: 0,
            peeked: None,
            shift: 0,
            max_shift: 0,
            held: Vec::new(),
            held_index: 0,
            held_removed: 0,
            held_coll: None,
            needs: None,
            spare_needs: Vec::new(),
            done: false,
            last_commdef: None,
            pending: Vec::new(),
            pending_removed: 0,
            pending_stored: Vec::new(),
            held_stored: false,
        })
        .collect();
    loop {
        let mut progressed = false;
        let mut open = false;
        for (li, lane) in lanes.iter_mut().enumerate() {
            if lane.done {
                continue;
            }
            open = true;
            progressed |= shared.step(
                li,
                lane,
                false,
                &mut on_event,
                &mut on_match,
                reborrow(&mut pump),
            );
            if let Some(p) = pump.as_deref_mut() {
                p.poll();
            }
        }
        if !open {
            break;
        }
        if !progressed {
            // Proxies are held back to the times the own lanes reached; clock error can put what
            // an own lane waits for later than that, so they go on first, before anything is
            // forced.
            let mut released = false;
            for (li, lane) in lanes.iter_mut().enumerate() {
                if lane.proxy && !lane.done {
                    released |= shared.step_proxy(li, lane, false);
                }
            }
            if released {
                continue;
            }
            // Every open lane waits for something no lane will provide before it moves itself (a
            // cycle only contradicting times or a mismatch can make): the wait that began first
            // goes on without it. Nothing that began later can be what it waits for, and the
            // choice does not depend on the order the lanes were stepped in, so a split pass
            // makes the same one.
            let first_wait = lanes
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.done && !l.proxy)
                .map(|(li, l)| (l.waiting_since(), li))
                .min();
            if let Some(p) = pump.as_deref_mut() {
                match p.stuck(first_wait) {
                    Unstuck::Moved => continue,
                    Unstuck::Stop => break,
                    Unstuck::Force => {}
                }
            }
            let forced = first_wait
                .map(|(_, li)| li)
                .or_else(|| lanes.iter().position(|l| !l.done));
            if let Some(li) = forced {
                shared.step(
                    li,
                    &mut lanes[li],
                    true,
                    &mut on_event,
                    &mut on_match,
                    reborrow(&mut pump),
                );
            }
        }
    }
    shared.report.unmatched_sends += shared
        .ranks
        .iter()
        .map(|r| r.sent_here.len() as u64)
        .sum::<u64>();
    shared.report.lanes_shifted = lanes.iter().filter(|l| l.max_shift > 0).count() as u64;
    shared.report.max_shift = lanes.iter().map(|l| l.max_shift).max().unwrap_or(0);
    shared.report.output = shared.output;
    (shared.report, shared.learned.unwrap_or_default())
}

/// A pump lent for one call (its object lifetime shortened, which `as_deref_mut` does not do).
fn reborrow<'b>(pump: &'b mut Option<&mut dyn Pump>) -> Option<&'b mut dyn Pump> {
    match pump {
        Some(p) => Some(&mut **p),
        None => None,
    }
}

/// Per lane, the other lanes of its rank: grouped once, so 10^4 single-threaded ranks cost
/// O(lanes), not O(lanes²).
fn siblings<I>(lanes: &[(LaneId, I, bool)]) -> Vec<Vec<usize>> {
    let mut by_rank: FastMap<u32, Vec<usize>> = FastMap::default();
    for (i, (id, _, _)) in lanes.iter().enumerate() {
        by_rank.entry(id.rank).or_default().push(i);
    }
    lanes
        .iter()
        .enumerate()
        .map(|(i, (id, _, _))| match by_rank.get(&id.rank) {
            Some(group) if group.len() > 1 => group.iter().copied().filter(|&j| j != i).collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn shift_times(e: &mut Event, by: i64) {
    if by == 0 {
        return;
    }
    trace::times::for_each_time(e, |t| *t = t.saturating_add_signed(by));
}

impl Shared<'_> {
    /// Advances one lane until it blocks, ends, or used its turn. Returns whether it moved.
    fn step<I: LaneSource>(
        &mut self,
        li: usize,
        lane: &mut Lane<I>,
        mut force: bool,
        on_event: &mut impl FnMut(usize, &Event),
        on_match: &mut impl FnMut(&MessageMatch),
        mut pump: Option<&mut dyn Pump>,
    ) -> bool {
        if lane.proxy {
            return self.step_proxy(li, lane, !force);
        }
        let mut moved = false;
        let mut budget = TURN;
        // A forced step may also take a call out of time order with its sibling lanes.
        let mut gate_off = force;
        loop {
            if lane.needs.is_some() {
                if !self.resolve(lane, force, on_match) {
                    return moved;
                }
                force = false;
                moved = true;
                // A run of polls before the call was placed by resolve with it.
                self.check_stored_pending(lane, 0);
                for e in lane.pending.drain(..) {
                    on_event(li, &e);
                }
                lane.held_stored = false;
                let shift = lane.shift;
                for mut e in lane.held.drain(..) {
                    // The call's times were set by resolve; what follows it moves with the lane.
                    if !matches!(e, Event::Call(_)) {
                        shift_times(&mut e, shift);
                    }
                    on_event(li, &e);
                }
                lane.needs = None;
                lane.held_coll = None;
            }
            if budget == 0 {
                return moved;
            }
            // Every event passes here, so the usual path (nothing peeked) moves it once, from
            // the source into `event`: the 80-byte moves through `Option`s and tuples were a
            // lead of the matcher's per-event cost
            // (paper-notes/reconstruct-issue31-2026-11-27-to-28.md).
            let (index, mut event, removed) = if let Some(peeked) = lane.peeked.take() {
                peeked
            } else if let Some(event) = lane.src.next() {
                let index = lane.src.source_index().unwrap_or(lane.next_index);
                lane.next_index = index + 1;
                (index, event, lane.src.removed_ns())
            } else {
                if !lane.held.is_empty() {
                    lane.needs = Some(self.needs_of(lane));
                    continue;
                }
                self.flush_pending(li, lane, on_event);
                self.lane_ended(li, lane);
                if let Some(p) = pump {
                    p.own_lane_ended(li);
                }
                return true;
            };
            if !lane.held.is_empty() {
                if matches!(event, Event::Completion(_)) {
                    lane.held.push(event);
                    continue;
                }
                lane.peeked = Some((index, event, removed));
                lane.needs = Some(self.needs_of(lane));
                continue;
            }
            if let Event::CommDef { id, .. } = &event {
                lane.last_commdef = Some(*id);
            }
            if let Event::RemoteGroup { id, members } = &event {
                // The recorder names every intercommunicator's remote group right after its
                // definition, however it was made (create, dup, split, ...): the two groups
                // identify it, so the constructor need not be recognised.
                if lane.last_commdef == Some(*id) {
                    lane.last_commdef = None;
                }
                self.define_intercomm_by_groups(lane.rank_idx, *id, members);
            }
            if let Event::EpochGroup { win, members } = &event {
                self.ranks[lane.rank_idx]
                    .epoch_groups
                    .insert(lane.id.stream, (*win, members.as_slice().into()));
            }
            if let Event::Call(c) = &event {
                if let Some(id) = lane.last_commdef.take()
                    && self.class(lane.rank_idx, c.func) == Class::IntercommCreate
                {
                    self.define_intercomm(lane.rank_idx, id, c.tag);
                }
                // A call on an intercommunicator waits until its other side is known (a forced
                // step gives up on it: its messages and collectives stay unmatched).
                let unpaired = !gate_off && self.unpaired(lane.rank_idx, c.comm);
                // The threads of one rank share its sends, receives and collectives: MPI orders
                // them as the program made them, in time, so a call waits until no other lane
                // of its rank can still make an earlier one.
                // In the times as recorded: the mapping removes each thread's own recorder cost,
                // so two threads' mapped times are not in the order they ran.
                let recorded_start = c.start.saturating_add(removed);
                let place = self.place_among_siblings(li, lane.rank_idx, c, removed);
                let gated = unpaired
                    || !gate_off
                        && self.siblings[li]
                            .iter()
                            .any(|&other| self.frontier[other] < place);
                gate_off = false;
                self.frontier[li] = self.frontier[li].max(place);
                self.own_frontier = self.own_frontier.max(recorded_start);
                if gated {
                    lane.peeked = Some((index, event, removed));
                    return moved;
                }
            }
            budget -= 1;
            moved = true;
            if self.repair.enabled
                && !self.siblings[li].is_empty()
                && let Event::Call(c) = &event
                && let Some(last) = self.rank_last_start.get_mut(lane.rank_idx)
            {
                let start = c.start.saturating_add_signed(lane.shift);
                if start < *last {
                    lane.set_shift(lane.shift + (*last - start) as i64);
                }
                *last = (*last).max(c.start.saturating_add_signed(lane.shift));
            }
            let polls = matches!(event, Event::Polls(_));
            if polls || lane.pending.len() >= POLL_TAIL {
                self.flush_pending(li, lane, on_event);
            }
            if let Some(p) = pump.as_deref_mut()
                && matches!(event, Event::Call(_))
            {
                p.own_call(li, index, removed, lane.shift, &event);
            }
            let stored_before = self.stored_calls;
            let action = self.process(lane, index, removed, &event);
            let stored = self.stored_calls != stored_before;
            match action {
                Action::Emit if polls && self.repair.enabled && self.repair.replay => {
                    lane.pending.push(event);
                    lane.pending_removed = removed;
                }
                Action::Emit if !lane.pending.is_empty() => {
                    if stored && let Event::Call(c) = &event {
                        let start = c.start.saturating_add_signed(lane.shift);
                        lane.pending_stored.push((lane.pending.len(), start));
                    }
                    lane.pending.push(event);
                }
                Action::Emit => {
                    shift_times(&mut event, lane.shift);
                    on_event(li, &event);
                }
                Action::Hold(coll) => {
                    if let Event::Call(c) = &event {
                        let end = c.end.saturating_add(removed);
                        self.frontier[li] = self.frontier[li].max(end);
                        self.own_frontier = self.own_frontier.max(end);
                    }
                    lane.held.push(event);
                    lane.held_index = index;
                    lane.held_removed = removed;
                    lane.held_coll = coll;
                    lane.held_stored = stored;
                }
            }
        }
    }

    fn lane_ended<I>(&mut self, li: usize, lane: &mut Lane<I>) {
        lane.done = true;
        self.frontier[li] = u64::MAX;
        if let Some(n) = self.live_lanes.get_mut(lane.rank_idx) {
            *n = n.saturating_sub(1);
            self.absent_ranks += usize::from(*n == 0);
        }
    }

    /// Advances a proxy lane: its calls go to the matcher's tables, never held, never shown.
    /// `gated`: only up to the latest time an own lane reached (as recorded): a proxy holds a
    /// small part of its rank's events, so left free it would run far ahead of the lanes it
    /// serves, and every send and collective it opens would wait in the tables meanwhile.
    fn step_proxy<I: LaneSource>(&mut self, li: usize, lane: &mut Lane<I>, gated: bool) -> bool {
        let mut moved = false;
        for _ in 0..TURN {
            let (index, event, removed) = match lane.peeked.take() {
                Some(next) => next,
                None => {
                    let Some(event) = lane.src.next() else {
                        if lane.src.more_later() {
                            return moved;
                        }
                        self.lane_ended(li, lane);
                        return true;
                    };
                    let index = lane.src.source_index().unwrap_or(lane.next_index);
                    lane.next_index = index + 1;
                    (index, event, lane.src.removed_ns())
                }
            };
            if let Event::Call(c) = &event {
                if gated && c.start.saturating_add(removed) > self.own_frontier {
                    lane.peeked = Some((index, event, removed));
                    return moved;
                }
                // Not `set_shift`: a proxy's moves are its owner's to report.
                lane.shift = lane.src.shift_ns();
                self.feed_proxy(lane, index, removed, c);
            }
            moved = true;
        }
        moved
    }

    /// Whether the rank with this world rank is another process's (a split pass).
    pub(super) fn is_remote(&self, world_rank: u32) -> bool {
        self.ctx
            .index_of(world_rank)
            .is_some_and(|i| self.remote.get(i).copied().unwrap_or(false))
    }

    /// Hands out a run of polls that no wait took, moved as the lane is.
    fn flush_pending<I>(
        &mut self,
        li: usize,
        lane: &mut Lane<I>,
        on_event: &mut impl FnMut(usize, &Event),
    ) {
        self.check_stored_pending(lane, lane.shift);
        for mut e in lane.pending.drain(..) {
            shift_times(&mut e, lane.shift);
            on_event(li, &e);
        }
    }

    /// Before `pending` goes out, each moved by `moved_by` more: whether its stored calls go
    /// out at the times they were stored with.
    fn check_stored_pending<I>(&mut self, lane: &mut Lane<I>, moved_by: i64) {
        for (k, stored) in lane.pending_stored.drain(..) {
            let Some(Event::Call(c)) = lane.pending.get(k) else {
                continue;
            };
            // `pending` is unshifted until it goes out (`moved_by`: the lane's shift), or placed
            // by the resolve of the call after it (`moved_by`: 0, its times are final).
            if c.start.saturating_add_signed(moved_by) != stored
                && let Some(o) = self.output.as_mut()
            {
                o.exact = false;
            }
        }
    }

    fn at<I>(lane: &Lane<I>, index: u64) -> EventRef {
        EventRef {
            rank: lane.id.rank,
            stream: lane.id.stream,
            index,
        }
    }

    /// Whether the rank with this world rank will provide nothing more: none of its lanes has an
    /// event left, or it is not in the trace at all.
    fn absent(&self, world_rank: u32) -> bool {
        self.ctx
            .index_of(world_rank)
            .is_none_or(|i| self.live_lanes.get(i).is_none_or(|&n| n == 0))
    }
}
