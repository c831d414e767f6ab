//! Matching split over processes, with no process seeing every lane: each process owns some
//! ranks and runs the engine over their lanes, plus one *proxy lane* per rank of another process,
//! holding only what its own ranks depend on (Scalasca's parallel replay splits the same way).
//!
//! A message is named by (channel, sequence number) on both sides, so the sender's calls on the
//! channels towards this process's ranks, in the sender's order, number them exactly as the whole
//! lane would; a collective instance is named by (communicator, call count), so a member's
//! collective calls on the communicators that include one of this process's ranks fill in every
//! entry this process's exits are judged against. What a rank receives, and every exit, is
//! matched and counted by the rank's owner only, so the owners' reports add up to one process's
//! report and each matched message is shown by exactly one owner.
//!
//! Not split: intercommunicators (their pairing follows the definitions in both sides' lanes),
//! one-sided epochs and fences (their windows' definitions likewise), and ranks with several
//! threads (the threads' calls are matched in the order they were made across the threads, which a
//! proxy's subset of them cannot keep). [`HbContext::unsplittable`] names what stands in the way.

use format::{CommId, Event};

use super::matcher::Class;
use super::{Estimates, FastMap, HbContext, HbReport, LaneSource, MessageMatch, Repair};
use trace::definitions::RankMeta;
use trace::funcs::Deferred;
use trace::lanes::LaneId;

impl HbContext {
    /// Why this trace's matching cannot be split over processes, if it cannot.
    pub fn unsplittable(metas: &[RankMeta]) -> Option<String> {
        metas.iter().find_map(|m| {
            if m.streams.len() > 1 {
                Some(format!("rank {} has {} threads", m.rank, m.streams.len()))
            } else if !m.remote_groups.is_empty() {
                Some(format!("rank {} has intercommunicators", m.rank))
            } else if !m.wins.is_empty() {
                Some(format!("rank {} has one-sided windows", m.rank))
            } else {
                None
            }
        })
    }
}

/// Picks, from a rank's events, what goes into its proxy lane at one other process: the calls
/// that send to that process's ranks, the persistent sends to them, and the collective calls on
/// communicators with a member there. One filter per (process, lane), fed the lane in order.
pub struct ProxyFilter<'c> {
    ctx: &'c HbContext,
    rank_idx: usize,
    /// World ranks the receiving process owns.
    local: &'c [bool],
    /// Persistent send requests towards the process's ranks (their `Start`s go too).
    persistent_towards: FastMap<u64, ()>,
    /// Per communicator: whether a member is the process's.
    comm_has_local: FastMap<CommId, bool>,
}

impl<'c> ProxyFilter<'c> {
    /// `local[w]`: whether world rank `w` is the receiving process's.
    pub fn new(ctx: &'c HbContext, rank_idx: usize, local: &'c [bool]) -> ProxyFilter<'c> {
        ProxyFilter {
            ctx,
            rank_idx,
            local,
            persistent_towards: FastMap::default(),
            comm_has_local: FastMap::default(),
        }
    }

    fn is_local(&self, world: u32) -> bool {
        self.local.get(world as usize).copied().unwrap_or(false)
    }

    /// The world rank a call on `comm` names as `peer`, if any.
    fn peer_world(&self, comm: CommId, peer: i32) -> Option<u32> {
        let c = self.ctx.ranks.get(self.rank_idx)?.comms.get(&comm)?;
        usize::try_from(peer)
            .ok()
            .and_then(|p| c.members.get(p).copied())
    }

    pub fn wants(&mut self, event: &Event) -> bool {
        let Event::Call(c) = event else {
            return false;
        };
        let Some(rank) = self.ctx.ranks.get(self.rank_idx) else {
            return false;
        };
        let class = rank
            .classes
            .get(usize::from(c.func))
            .copied()
            .unwrap_or(Class::Other);
        match class {
            Class::Send | Class::Isend | Class::SendRecv => self
                .peer_world(c.comm, c.peer)
                .is_some_and(|w| self.is_local(w)),
            Class::Deferred(d @ (Deferred::SendInit | Deferred::RecvInit)) => {
                let towards = d == Deferred::SendInit
                    && self
                        .peer_world(c.comm, c.peer)
                        .is_some_and(|w| self.is_local(w));
                if towards {
                    self.persistent_towards.insert(c.request, ());
                } else {
                    // A request id freed and made again now names another request.
                    self.persistent_towards.remove(&c.request);
                }
                towards
            }
            Class::Deferred(Deferred::Start) => self.persistent_towards.contains_key(&c.request),
            Class::Collective(_) | Class::Icollective(_) | Class::RelayedIbarrier => {
                let (ctx, rank_idx, local) = (self.ctx, self.rank_idx, self.local);
                *self.comm_has_local.entry(c.comm).or_insert_with(|| {
                    ctx.ranks[rank_idx].comms.get(&c.comm).is_some_and(|comm| {
                        comm.members
                            .iter()
                            .any(|&w| local.get(w as usize).copied().unwrap_or(false))
                    })
                })
            }
            _ => false,
        }
    }
}

/// What a process of a split pass does, after every lane it runs waits, to go on.
pub enum Unstuck {
    /// Something arrived (or may have): try the lanes again.
    Moved,
    /// The whole job waits, and this process holds the wait that began first: force it, as one
    /// process forces it when every lane waits.
    Force,
    /// The pass cannot go on (another process failed); what was found so far is discarded.
    Stop,
}

/// The exchange between the processes of a split pass whose proxies stream while it runs.
pub trait Pump {
    /// Between lane turns: sends what is ready and takes what arrived, without waiting.
    fn poll(&mut self);
    /// Every lane here waits (`first_wait`: among the own lanes still open, the one whose wait
    /// began first, as (recorded start of the call it waits at, position in the pass's lanes)).
    /// Returns once something arrived, or the job decided who forces.
    fn stuck(&mut self, first_wait: Option<(u64, usize)>) -> Unstuck;
    /// A streamed replay: an own lane (by position) takes this call, as recorded, with the
    /// replay's move of the lane at that point; what other processes need of it goes to their
    /// proxies, so they see it as replayed here.
    fn own_call(&mut self, _lane: usize, _index: u64, _removed: u64, _shift: i64, _call: &Event) {}
    /// A streamed replay: an own lane ended.
    fn own_lane_ended(&mut self, _lane: usize) {}
}

/// A proxy lane as it arrives: each event with its index in the rank's whole lane and the time
/// the mapping removed before it (so that the sends and entries it carries are named and timed
/// as in the whole lane).
pub struct ProxyLane<I> {
    events: I,
    index: u64,
    removed: u64,
}

impl<I: Iterator<Item = (u64, u64, Event)>> ProxyLane<I> {
    pub fn new(events: I) -> ProxyLane<I> {
        ProxyLane {
            events,
            index: 0,
            removed: 0,
        }
    }
}

impl<I: Iterator<Item = (u64, u64, Event)>> Iterator for ProxyLane<I> {
    type Item = Event;
    fn next(&mut self) -> Option<Event> {
        let (index, removed, event) = self.events.next()?;
        self.index = index;
        self.removed = removed;
        Some(event)
    }
}

impl<I: Iterator<Item = (u64, u64, Event)>> super::LaneSource for ProxyLane<I> {
    fn removed_ns(&self) -> u64 {
        self.removed
    }
    fn source_index(&self) -> Option<u64> {
        Some(self.index)
    }
}

/// What a split pass found, over all its processes.
#[derive(Debug, Default)]
pub struct SplitPass {
    pub report: super::HbReport,
    pub estimates: super::Estimates,
    /// Each matched message once, shown by the owner of its receiver.
    pub matches: Vec<super::MessageMatch>,
}

/// Runs every process's part of a split pass in turn, in this process, from lanes held in
/// memory: the whole of what an MPI job's processes would do in parallel, each process building
/// its proxies with a [`ProxyFilter`] per other rank. `owner(world_rank)` names the process of a
/// rank. The reference the job is checked against; learns with `repair.learn`.
pub fn run_split_in_turn(
    ctx: &HbContext,
    lanes: &[(trace::lanes::LaneId, Vec<Event>)],
    processes: usize,
    owner: impl Fn(u32) -> usize,
    repair: super::Repair,
) -> SplitPass {
    let world = lanes
        .iter()
        .map(|(id, _)| id.rank as usize + 1)
        .max()
        .unwrap_or(0);
    let mut pass = SplitPass::default();
    for p in 0..processes {
        let local: Vec<bool> = (0..world).map(|w| owner(w as u32) == p).collect();
        let (mut own, mut proxies) = (Vec::new(), Vec::new());
        for (id, events) in lanes {
            if local[id.rank as usize] {
                own.push((*id, super::Plain(events.clone().into_iter())));
                continue;
            }
            let Some(rank_idx) = ctx.index_of(id.rank) else {
                continue;
            };
            let mut filter = ProxyFilter::new(ctx, rank_idx, &local);
            let wanted: Vec<(u64, u64, Event)> = (0u64..)
                .zip(events)
                .filter(|(_, e)| filter.wants(e))
                .map(|(k, e)| (k, 0, e.clone()))
                .collect();
            proxies.push((*id, ProxyLane::new(wanted.into_iter())));
        }
        let (report, estimates) = run_streamed(
            ctx,
            own,
            proxies,
            repair,
            |_, _| {},
            |m| pass.matches.push(*m),
            None,
        );
        pass.report = merge_reports(&pass.report, &report);
        pass.estimates.merge(&estimates);
    }
    pass
}

/// What differs between matching split over `processes` processes (ranks owned round-robin, so
/// that most messages cross) and one pass over every lane: the matched messages (event refs and
/// times), the report, or the estimates learned; `None` when nothing does. The check a split is
/// held to, on any trace that [`HbContext::unsplittable`] lets through.
pub fn split_differs(
    ctx: &HbContext,
    lanes: &[(trace::lanes::LaneId, Vec<Event>)],
    processes: usize,
) -> Option<String> {
    let key = |m: &super::MessageMatch| {
        let at = |e: super::EventRef| (e.rank, e.stream, e.index);
        (
            at(m.send),
            at(m.recv_post),
            at(m.recv_done),
            m.send_start,
            m.recv_end,
        )
    };
    let mut whole = Vec::new();
    let (report, estimates) = super::run_learning(
        ctx,
        lanes
            .iter()
            .map(|(id, events)| (*id, super::Plain(events.clone().into_iter())))
            .collect(),
        super::Repair::learning(),
        |_, _| {},
        |m| whole.push(key(m)),
    );
    whole.sort_unstable();
    let owner = |w: u32| w as usize % processes;
    let split = run_split_in_turn(ctx, lanes, processes, owner, super::Repair::learning());
    let mut matches: Vec<_> = split.matches.iter().map(key).collect();
    matches.sort_unstable();
    if matches != whole {
        let only_whole = whole.iter().filter(|m| !matches.contains(m)).count();
        return Some(format!(
            "{processes} processes: {} messages matched against {} ({only_whole} missing)",
            matches.len(),
            whole.len()
        ));
    }
    if split.report != report {
        return Some(format!(
            "{processes} processes: {:?} against {report:?}",
            split.report
        ));
    }
    if split.estimates.intrinsic != estimates.intrinsic
        || split.estimates.transfer != estimates.transfer
        || split.estimates.exit != estimates.exit
    {
        return Some(format!("{processes} processes: other estimates"));
    }
    None
}

/// One process's part of a matching pass split over processes: `lanes` are
/// the lanes of the ranks it owns, `proxies` what each rank of the others sends it (each made by
/// a [`ProxyFilter`] from that rank's lane). The report counts what the owned ranks received and
/// exited, so the processes' reports add up to the report of [`run_learning`] over every lane;
/// `on_event` sees the owned lanes only (indexed as in `lanes`), `on_match` each message received
/// by an owned rank.
///
/// With a `pump`, the proxies arrive while the pass runs: a proxy whose source has nothing yet
/// ([`LaneSource::more_later`]) is waited for, and the pump exchanges with the other processes
/// between lane turns and decides, when every lane here waits, whether this process forces one
/// ([`Pump::stuck`]). Without one, every proxy is whole from the start.
pub fn run_streamed<I: LaneSource, P: LaneSource>(
    ctx: &HbContext,
    lanes: Vec<(LaneId, I)>,
    proxies: Vec<(LaneId, P)>,
    repair: Repair,
    on_event: impl FnMut(usize, &Event),
    on_match: impl FnMut(&MessageMatch),
    pump: Option<&mut dyn Pump>,
) -> (HbReport, Estimates) {
    // The repair moves a wait to what its partners allow, which a split sees only with the
    // partners' replayed times: the replay, with proxies made as the owners replay (see
    // `Pump::own_call`).
    debug_assert!(
        !repair.enabled || repair.replay && pump.is_some(),
        "a split pass moves time only as a streamed replay"
    );
    let all = lanes
        .into_iter()
        .map(|(id, src)| (id, OwnOrProxy::Own(src), false))
        .chain(
            proxies
                .into_iter()
                .map(|(id, src)| (id, OwnOrProxy::Proxy(src), true)),
        )
        .collect();
    super::run_lanes(ctx, all, repair, on_event, on_match, pump)
}

/// The two kinds of lane of a split pass, without a virtual call per event.
enum OwnOrProxy<I, P> {
    Own(I),
    Proxy(P),
}

impl<I: LaneSource, P: LaneSource> Iterator for OwnOrProxy<I, P> {
    type Item = Event;
    #[inline]
    fn next(&mut self) -> Option<Event> {
        match self {
            OwnOrProxy::Own(s) => s.next(),
            OwnOrProxy::Proxy(s) => s.next(),
        }
    }
}

impl<I: LaneSource, P: LaneSource> LaneSource for OwnOrProxy<I, P> {
    fn removed_ns(&self) -> u64 {
        match self {
            OwnOrProxy::Own(s) => s.removed_ns(),
            OwnOrProxy::Proxy(s) => s.removed_ns(),
        }
    }
    fn source_index(&self) -> Option<u64> {
        match self {
            OwnOrProxy::Own(s) => s.source_index(),
            OwnOrProxy::Proxy(s) => s.source_index(),
        }
    }
    fn more_later(&self) -> bool {
        match self {
            OwnOrProxy::Own(s) => s.more_later(),
            OwnOrProxy::Proxy(s) => s.more_later(),
        }
    }
    fn shift_ns(&self) -> i64 {
        match self {
            OwnOrProxy::Own(s) => s.shift_ns(),
            OwnOrProxy::Proxy(s) => s.shift_ns(),
        }
    }
}

/// Adds up the reports of the processes of a split pass.
pub fn merge_reports(a: &HbReport, b: &HbReport) -> HbReport {
    HbReport {
        messages: a.messages + b.messages,
        rma_epochs: a.rma_epochs + b.rma_epochs,
        collective_exits: a.collective_exits + b.collective_exits,
        message_violations: a.message_violations + b.message_violations,
        collective_violations: a.collective_violations + b.collective_violations,
        epoch_violations: a.epoch_violations + b.epoch_violations,
        recorded_message_violations: a.recorded_message_violations + b.recorded_message_violations,
        recorded_collective_violations: a.recorded_collective_violations
            + b.recorded_collective_violations,
        recorded_epoch_violations: a.recorded_epoch_violations + b.recorded_epoch_violations,
        unmatched_sends: a.unmatched_sends + b.unmatched_sends,
        unmatched_receives: a.unmatched_receives + b.unmatched_receives,
        ambiguous_receives: a.ambiguous_receives + b.ambiguous_receives,
        waits_on_absent_ranks: a.waits_on_absent_ranks + b.waits_on_absent_ranks,
        max_shift: a.max_shift.max(b.max_shift),
        lanes_shifted: a.lanes_shifted + b.lanes_shifted,
        output: super::OutputViolations::merge(a.output, b.output),
    }
}
