//! Happened-before: matching sends to receives and the ranks of each collective, finding where a
//! trace's times contradict causality, and repairing it.
//!
//! Matching follows MPI's rules, not timestamps:
//! - point-to-point: per (communicator, source, destination, tag) messages are non-overtaking, so
//!   the k-th send on a key matches the k-th receive on that key at the destination. A specific
//!   receive takes its number when posted; a wildcard one (`ANY_SOURCE`/`ANY_TAG`) when the
//!   completion tells its real source and tag. The send is the call that starts it (`Send`,
//!   `Isend`, the send half of `Sendrecv`); the receive ends at the call that completes it (`Recv`,
//!   the receive half of `Sendrecv`, or the `Wait*`/`Test*` whose completion names its request).
//! - collectives: the k-th collective a rank makes on a communicator is the k-th of every member.
//!
//! Communicators are recorder-local ids; two ranks' communicators are the same when they have the
//! same members and are the same-numbered communicator with those members on both ranks.
//!
//! Violations: a receive that completes before its send started; a rank leaving a collective
//! before a rank it must wait for (by the collective's shape) entered.
//!
//! Repair is a forward pass in the spirit of the controlled logical clock: each lane carries a
//! shift that only grows; when a receive (or collective exit) would end before what it depends on,
//! the shift grows just enough, and every later event of the lane moves by it. Local durations and
//! gaps are kept except the one wait that absorbed the shift.
//!
//! The engine processes all lanes together, each as far as it can, holding only what is in flight
//! (unmatched sends, open collectives, one held call per lane), so memory does not grow with the
//! length of the trace.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use format::{
    ANY_SOURCE, ANY_TAG, CommId, Completion, Event, FunctionId, MpiCall, NO_REQUEST, PROC_NULL,
};

use crate::clock::RankMeta;
use crate::funcs::{CollShape, FuncClass};
use crate::lanes::LaneId;

/// A multiply-rotate hash for the small integer keys of the hot maps: the default SipHash
/// costs more than the rest of matching an event.
#[derive(Default, Clone, Copy)]
struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    fn write_i32(&mut self, v: i32) {
        self.add(v as u32 as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        // Spread the low bits' entropy into the high bits the table's control bytes use.
        self.0 ^ (self.0 >> 29)
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

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
    /// The send (or send half of a `Sendrecv`).
    pub send: EventRef,
    /// Where the receive was posted (`Irecv`), or the receive call itself.
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HbReport {
    pub messages: u64,
    /// Collective exits checked (one per rank per collective).
    pub collective_exits: u64,
    pub message_violations: u64,
    pub collective_violations: u64,
    pub unmatched_sends: u64,
    pub unmatched_receives: u64,
    /// Receives numbered while an earlier wildcard receive that could have taken their message
    /// was still open (its completion came later); their match assumes it did not.
    pub ambiguous_receives: u64,
    /// Largest forward shift the repair gave a lane, ns of the lane's time unit.
    pub max_shift: u64,
    pub lanes_shifted: u64,
}

impl HbReport {
    pub fn violations(&self) -> u64 {
        self.message_violations + self.collective_violations
    }
}

/// Per rank: function classes and the global identity of each communicator.
pub struct HbContext {
    ranks: Vec<RankCtx>,
}

struct RankCtx {
    world_rank: u32,
    /// Indexed by function id; ids without a definition are `Other`.
    classes: Vec<FuncClass>,
    comms: FastMap<CommId, Comm>,
}

#[derive(Clone)]
struct Comm {
    global: u32,
    members: std::sync::Arc<[u32]>,
    /// Our position in `members`.
    me: Option<u32>,
}

impl HbContext {
    /// `metas` in rank order, one per rank of the world.
    pub fn new(metas: &[RankMeta], world_size: u32) -> HbContext {
        let mut interned: HashMap<(Vec<u32>, u32), u32> = HashMap::new();
        let mut ranks = Vec::with_capacity(metas.len());
        for meta in metas {
            let mut seen: HashMap<Vec<u32>, u32> = HashMap::new();
            let mut comms = FastMap::default();
            let mut define = |id: CommId, members: Vec<u32>, comms: &mut FastMap<CommId, Comm>| {
                let occurrence = seen.entry(members.clone()).or_default();
                let key = (members.clone(), *occurrence);
                *occurrence += 1;
                let n = interned.len() as u32;
                let global = *interned.entry(key).or_insert(n);
                let me = members
                    .iter()
                    .position(|&m| m == meta.rank)
                    .map(|p| p as u32);
                comms.insert(
                    id,
                    Comm {
                        global,
                        members: members.into(),
                        me,
                    },
                );
            };
            if !meta.comms.iter().any(|(id, _)| *id == 0) {
                define(0, (0..world_size).collect(), &mut comms);
            }
            if !meta.comms.iter().any(|(id, _)| *id == 1) {
                define(1, vec![meta.rank], &mut comms);
            }
            for (id, members) in &meta.comms {
                define(*id, members.clone(), &mut comms);
            }
            let len = meta
                .functions
                .keys()
                .map(|&id| usize::from(id) + 1)
                .max()
                .unwrap_or(0);
            let mut classes = vec![FuncClass::Other; len];
            for (id, name) in &meta.functions {
                classes[usize::from(*id)] = FuncClass::of(name);
            }
            ranks.push(RankCtx {
                world_rank: meta.rank,
                classes,
                comms,
            });
        }
        HbContext { ranks }
    }
}

type Key = (u32, u32, u32, i32);

struct SendRec {
    raw_start: u64,
    start: u64,
    at: EventRef,
    bytes: u64,
}

/// A posted nonblocking receive, in posting order, until it is numbered and completed.
struct Slot {
    request: u64,
    comm: CommId,
    global: u32,
    /// `None` for `ANY_SOURCE` / `ANY_TAG`.
    source: Option<u32>,
    tag: Option<i32>,
    key: Option<Key>,
    seq: Option<u64>,
    at: EventRef,
}

impl Slot {
    /// Whether this receive, while its real source and tag are unknown, could take a message of `key`.
    fn could_take(&self, key: Key) -> bool {
        self.key.is_none()
            && self.global == key.0
            && self.source.is_none_or(|s| s == key.1)
            && self.tag.is_none_or(|t| t == key.3)
    }
}

#[derive(Clone, Copy)]
struct CollRef {
    global: u32,
    instance: u64,
    shape: CollShape,
    root: u32,
    me: u32,
}

struct CollInst {
    raw_starts: Vec<Option<u64>>,
    starts: Vec<Option<u64>>,
    exits_left: usize,
}

enum Need {
    Msg { key: Key, seq: u64, post: EventRef },
    Coll(CollRef),
}

#[derive(Default)]
struct RankState {
    posts: Vec<Slot>,
    icolls: FastMap<u64, CollRef>,
    coll_counter: FastMap<u32, u64>,
}

struct Lane<I> {
    id: LaneId,
    /// Index into the context's ranks.
    rank_idx: usize,
    src: I,
    next_index: u64,
    peeked: Option<(u64, Event)>,
    shift: u64,
    /// A call whose end depends on others, with the completions that follow it.
    held: Vec<Event>,
    held_index: u64,
    held_coll: Option<CollRef>,
    needs: Option<Vec<Need>>,
    /// An emptied needs list kept for the next held call, so holding a call allocates nothing.
    spare_needs: Vec<Need>,
    done: bool,
}

/// What to do with an event that is not part of a held call.
enum Action {
    Emit,
    /// Hold it: its end depends on others (with the collective it exits, if any).
    Hold(Option<CollRef>),
}

struct Shared<'c> {
    ctx: &'c HbContext,
    repair: bool,
    ranks: Vec<RankState>,
    sends: FastMap<(Key, u64), SendRec>,
    send_counter: FastMap<Key, u64>,
    recv_counter: FastMap<Key, u64>,
    colls: FastMap<(u32, u64), CollInst>,
    report: HbReport,
    /// Per lane: no later call of the lane starts before this (its last time seen, the end of
    /// the call it holds, or the start of the call it waits to process).
    frontier: Vec<u64>,
    /// Per lane: the other lanes of its rank (empty for single-threaded ranks, the usual case).
    siblings: Vec<Vec<usize>>,
}

/// How many events a lane may process before the next lane gets its turn; bounds how far one
/// lane runs ahead, and so how many unmatched sends are held.
const TURN: usize = 4096;

/// Runs the matching (and, with `repair`, the repair) over `lanes`, each yielding its events in
/// order. `on_event` is shown every event of every lane exactly once, in lane order, with its
/// times moved by the repair; `on_match` every matched message.
pub fn run<I: Iterator<Item = Event>>(
    ctx: &HbContext,
    lanes: Vec<(LaneId, I)>,
    repair: bool,
    mut on_event: impl FnMut(usize, &Event),
    mut on_match: impl FnMut(&MessageMatch),
) -> HbReport {
    let mut shared = Shared {
        ctx,
        repair,
        ranks: ctx.ranks.iter().map(|_| RankState::default()).collect(),
        sends: FastMap::default(),
        send_counter: FastMap::default(),
        recv_counter: FastMap::default(),
        colls: FastMap::default(),
        report: HbReport::default(),
        frontier: vec![0; lanes.len()],
        siblings: lanes
            .iter()
            .enumerate()
            .map(|(i, (id, _))| {
                lanes
                    .iter()
                    .enumerate()
                    .filter(|(j, (other, _))| *j != i && other.rank == id.rank)
                    .map(|(j, _)| j)
                    .collect()
            })
            .collect(),
    };
    let mut lanes: Vec<Lane<I>> = lanes
        .into_iter()
        .map(|(id, src)| Lane {
            id,
            rank_idx: ctx
                .ranks
                .iter()
                .position(|r| r.world_rank == id.rank)
                .unwrap_or(0),
            src,
            next_index: 0,
            peeked: None,
            shift: 0,
            held: Vec::new(),
            held_index: 0,
            held_coll: None,
            needs: None,
            spare_needs: Vec::new(),
            done: false,
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
            progressed |= shared.step(li, lane, false, &mut on_event, &mut on_match);
        }
        if !open {
            break;
        }
        if !progressed {
            // Every open lane waits for something no lane will provide (a send lost to damage, a
            // rank that left early): let the first one go on without it.
            if let Some((li, lane)) = lanes.iter_mut().enumerate().find(|(_, l)| !l.done) {
                shared.step(li, lane, true, &mut on_event, &mut on_match);
            }
        }
    }
    shared.report.unmatched_sends += shared.sends.len() as u64;
    shared.report.lanes_shifted = lanes.iter().filter(|l| l.shift > 0).count() as u64;
    shared.report.max_shift = lanes.iter().map(|l| l.shift).max().unwrap_or(0);
    shared.report
}

fn shift_times(e: &mut Event, by: u64) {
    if by == 0 {
        return;
    }
    crate::times::for_each_time(e, |t| *t = t.saturating_add(by));
}

impl Shared<'_> {
    /// Advances one lane until it blocks, ends, or used its turn. Returns whether it moved.
    fn step<I: Iterator<Item = Event>>(
        &mut self,
        li: usize,
        lane: &mut Lane<I>,
        mut force: bool,
        on_event: &mut impl FnMut(usize, &Event),
        on_match: &mut impl FnMut(&MessageMatch),
    ) -> bool {
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
                let shift = lane.shift;
                for mut e in lane.held.drain(..) {
                    // The call's start moved with the shift it had before; its end was set by resolve.
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
            let (index, next) = match lane.peeked.take() {
                Some((index, event)) => (index, Some(event)),
                None => {
                    let event = lane.src.next();
                    let index = lane.next_index;
                    lane.next_index += u64::from(event.is_some());
                    (index, event)
                }
            };
            let Some(mut event) = next else {
                if !lane.held.is_empty() {
                    lane.needs = Some(self.needs_of(lane));
                    continue;
                }
                lane.done = true;
                self.frontier[li] = u64::MAX;
                return true;
            };
            if !lane.held.is_empty() {
                if matches!(event, Event::Completion(_)) {
                    lane.held.push(event);
                    continue;
                }
                lane.peeked = Some((index, event));
                lane.needs = Some(self.needs_of(lane));
                continue;
            }
            if let Event::Call(c) = &event {
                // The threads of one rank share its sends, receives and collectives: MPI orders
                // them as the program made them, in time, so a call waits until no other lane
                // of its rank can still make an earlier one.
                let gated = !gate_off
                    && self.siblings[li]
                        .iter()
                        .any(|&other| self.frontier[other] < c.start);
                gate_off = false;
                self.frontier[li] = self.frontier[li].max(c.start);
                if gated {
                    lane.peeked = Some((index, event));
                    return moved;
                }
            }
            budget -= 1;
            moved = true;
            match self.process(lane, index, &event) {
                Action::Emit => {
                    shift_times(&mut event, lane.shift);
                    on_event(li, &event);
                }
                Action::Hold(coll) => {
                    if let Event::Call(c) = &event {
                        self.frontier[li] = self.frontier[li].max(c.end);
                    }
                    lane.held.push(event);
                    lane.held_index = index;
                    lane.held_coll = coll;
                }
            }
        }
    }

    fn class(&self, lane_rank: usize, func: FunctionId) -> FuncClass {
        self.ctx
            .ranks
            .get(lane_rank)
            .and_then(|r| r.classes.get(usize::from(func)).copied())
            .unwrap_or(FuncClass::Other)
    }

    fn comm(&self, lane_rank: usize, comm: CommId) -> Option<&Comm> {
        self.ctx.ranks.get(lane_rank)?.comms.get(&comm)
    }

    fn at<I>(lane: &Lane<I>, index: u64) -> EventRef {
        EventRef {
            rank: lane.id.rank,
            stream: lane.id.stream,
            index,
        }
    }

    fn record_send<I>(&mut self, lane: &Lane<I>, index: u64, c: &MpiCall) {
        if c.peer < 0 {
            return;
        }
        let Some(comm) = self.comm(lane.rank_idx, c.comm) else {
            return;
        };
        let Some(&dest) = comm.members.get(c.peer as usize) else {
            return;
        };
        let key = (comm.global, lane.id.rank, dest, c.tag);
        let counter = self.send_counter.entry(key).or_default();
        let seq = *counter;
        *counter += 1;
        let rec = SendRec {
            raw_start: c.start,
            start: c.start.saturating_add(lane.shift),
            at: Self::at(lane, index),
            bytes: c.bytes,
        };
        self.sends.insert((key, seq), rec);
    }

    /// Numbers, in posting order, every open receive whose key is known and that no earlier
    /// open wildcard receive could still take a message from.
    fn number_posts(&mut self, rank_idx: usize) {
        let posts = &mut self.ranks[rank_idx].posts;
        for i in 0..posts.len() {
            if posts[i].seq.is_some() {
                continue;
            }
            let Some(key) = posts[i].key else { continue };
            if posts[..i].iter().any(|p| p.could_take(key)) {
                continue;
            }
            let counter = self.recv_counter.entry(key).or_default();
            posts[i].seq = Some(*counter);
            *counter += 1;
        }
    }

    fn number_receive(&mut self, key: Key) -> u64 {
        let counter = self.recv_counter.entry(key).or_default();
        *counter += 1;
        *counter - 1
    }

    fn enter_collective<I>(
        &mut self,
        lane: &Lane<I>,
        c: &MpiCall,
        shape: CollShape,
    ) -> Option<CollRef> {
        let comm = self.comm(lane.rank_idx, c.comm)?.clone();
        let me = comm.me?;
        let counter = self.ranks[lane.rank_idx]
            .coll_counter
            .entry(comm.global)
            .or_default();
        let instance = *counter;
        *counter += 1;
        let n = comm.members.len();
        let inst = self
            .colls
            .entry((comm.global, instance))
            .or_insert_with(|| CollInst {
                raw_starts: vec![None; n],
                starts: vec![None; n],
                exits_left: n,
            });
        if let Some(slot) = inst.starts.get_mut(me as usize) {
            *slot = Some(c.start.saturating_add(lane.shift));
            inst.raw_starts[me as usize] = Some(c.start);
        }
        let root = if c.root >= 0 { c.root as u32 } else { 0 };
        Some(CollRef {
            global: comm.global,
            instance,
            shape,
            root,
            me,
        })
    }

    /// Handles one event not part of a held call: says whether it can be emitted now or must
    /// be held until what its end depends on is known. Borrows the event, so the hot path moves
    /// each event once.
    #[inline]
    fn process<I>(&mut self, lane: &Lane<I>, index: u64, event: &Event) -> Action {
        let Event::Call(c) = event else {
            return Action::Emit;
        };
        match self.class(lane.rank_idx, c.func) {
            FuncClass::Send | FuncClass::Isend => {
                self.record_send(lane, index, c);
                Action::Emit
            }
            FuncClass::Irecv => {
                if c.peer != PROC_NULL
                    && c.request != NO_REQUEST
                    && let Some(comm) = self.comm(lane.rank_idx, c.comm)
                {
                    let source = if c.peer >= 0 {
                        comm.members.get(c.peer as usize).copied()
                    } else {
                        None
                    };
                    let tag = (c.tag != ANY_TAG).then_some(c.tag);
                    let key = match (source, tag) {
                        (Some(s), Some(t)) => Some((comm.global, s, lane.id.rank, t)),
                        _ => None,
                    };
                    let slot = Slot {
                        request: c.request,
                        comm: c.comm,
                        global: comm.global,
                        source,
                        tag,
                        key,
                        seq: None,
                        at: Self::at(lane, index),
                    };
                    self.ranks[lane.rank_idx].posts.push(slot);
                    self.number_posts(lane.rank_idx);
                }
                Action::Emit
            }
            FuncClass::Icollective(shape) => {
                let c = *c;
                if let Some(r) = self.enter_collective(lane, &c, shape)
                    && c.request != NO_REQUEST
                {
                    self.ranks[lane.rank_idx].icolls.insert(c.request, r);
                }
                Action::Emit
            }
            FuncClass::SendRecv => {
                self.record_send(lane, index, c);
                Action::Hold(None)
            }
            FuncClass::Recv | FuncClass::Completion => Action::Hold(None),
            FuncClass::Collective(shape) => {
                let c = *c;
                let r = self.enter_collective(lane, &c, shape);
                Action::Hold(r)
            }
            FuncClass::Other => Action::Emit,
        }
    }

    /// What the held call's end depends on, now that its completions are known.
    fn needs_of<I>(&mut self, lane: &mut Lane<I>) -> Vec<Need> {
        let mut needs = std::mem::take(&mut lane.spare_needs);
        needs.clear();
        let Some(Event::Call(call)) = lane.held.first() else {
            return needs;
        };
        let call = *call;
        let here = Self::at(lane, lane.held_index);
        let completions = lane.held[1..].iter().filter_map(|e| match e {
            Event::Completion(c) => Some(*c),
            _ => None,
        });
        let blocking_status: Option<Completion> =
            completions.clone().find(|c| c.request == NO_REQUEST);
        match self.class(lane.rank_idx, call.func) {
            FuncClass::Recv | FuncClass::SendRecv => {
                let is_recv = matches!(self.class(lane.rank_idx, call.func), FuncClass::Recv);
                // Sendrecv's peer and tag name the send half; its receive half is known only from
                // the status.
                let (peer, tag) = match (blocking_status, is_recv) {
                    (Some(s), _) if s.source >= 0 && s.tag >= 0 => (s.source, s.tag),
                    (_, true) if call.peer >= 0 && call.tag >= 0 => (call.peer, call.tag),
                    _ => (ANY_SOURCE, ANY_TAG),
                };
                if peer >= 0
                    && let Some(comm) = self.comm(lane.rank_idx, call.comm)
                    && let Some(&src) = comm.members.get(peer as usize)
                {
                    let key = (comm.global, src, lane.id.rank, tag);
                    if self.ranks[lane.rank_idx]
                        .posts
                        .iter()
                        .any(|p| p.seq.is_none() && (p.could_take(key) || p.key == Some(key)))
                    {
                        self.report.ambiguous_receives += 1;
                    }
                    let seq = self.number_receive(key);
                    needs.push(Need::Msg {
                        key,
                        seq,
                        post: here,
                    });
                } else if !(is_recv && call.peer == PROC_NULL) && blocking_status.is_some() {
                    self.report.unmatched_receives += 1;
                }
            }
            FuncClass::Completion => {
                for c in completions {
                    if c.request == NO_REQUEST {
                        continue;
                    }
                    let rank_idx = lane.rank_idx;
                    if let Some(pos) = self.ranks[rank_idx]
                        .posts
                        .iter()
                        .position(|p| p.request == c.request)
                    {
                        if c.cancelled {
                            self.ranks[rank_idx].posts.remove(pos);
                            self.number_posts(rank_idx);
                            continue;
                        }
                        if self.ranks[rank_idx].posts[pos].key.is_none() {
                            let slot = &self.ranks[rank_idx].posts[pos];
                            let resolved = (|| {
                                let comm = self.ctx.ranks.get(rank_idx)?.comms.get(&slot.comm)?;
                                let src = *comm.members.get(usize::try_from(c.source).ok()?)?;
                                (c.tag >= 0).then_some((comm.global, src, lane.id.rank, c.tag))
                            })();
                            self.ranks[rank_idx].posts[pos].key = resolved;
                            self.number_posts(rank_idx);
                        }
                        let slot = self.ranks[rank_idx].posts.remove(pos);
                        let Some(key) = slot.key else {
                            self.report.unmatched_receives += 1;
                            continue;
                        };
                        let seq = match slot.seq {
                            Some(seq) => seq,
                            None => {
                                // An earlier wildcard receive, still open, could have taken a message
                                // of this key; its completion comes later, so assume it did not.
                                self.report.ambiguous_receives += 1;
                                self.number_receive(key)
                            }
                        };
                        needs.push(Need::Msg {
                            key,
                            seq,
                            post: slot.at,
                        });
                        self.number_posts(rank_idx);
                        continue;
                    }
                    if let Some(r) = self.ranks[rank_idx].icolls.remove(&c.request) {
                        needs.push(Need::Coll(r));
                    }
                }
            }
            FuncClass::Collective(_) => {
                if let Some(r) = lane.held_coll {
                    needs.push(Need::Coll(r));
                }
            }
            _ => {}
        }
        needs
    }

    /// Ranks (positions in the communicator) whose entry this exit waits for.
    fn waited_for(r: &CollRef, n: usize) -> std::ops::Range<usize> {
        let me = r.me as usize;
        let root = r.root as usize;
        let range = match r.shape {
            CollShape::AllToAll => 0..n,
            CollShape::OneToAll if me != root => root..root + 1,
            CollShape::AllToOne if me == root => 0..n,
            CollShape::OneToAll | CollShape::AllToOne => 0..0,
            CollShape::Prefix => 0..me + 1,
            CollShape::ExclusivePrefix => 0..me,
        };
        // A root outside the communicator (a damaged record) waits for nobody.
        range.start.min(n)..range.end.min(n)
    }

    /// Tries to settle the held call's end. Without `force`, waits until everything it depends
    /// on is known; with it, goes on with what is known (the rest is counted unmatched).
    fn resolve<I>(
        &mut self,
        lane: &mut Lane<I>,
        force: bool,
        on_match: &mut impl FnMut(&MessageMatch),
    ) -> bool {
        let needs = lane.needs.take().unwrap_or_default();
        if !force {
            let ready = needs.iter().all(|n| match n {
                Need::Msg { key, seq, .. } => self.sends.contains_key(&(*key, *seq)),
                Need::Coll(r) => self.colls.get(&(r.global, r.instance)).is_none_or(|inst| {
                    let range = Self::waited_for(r, inst.starts.len());
                    inst.starts
                        .get(range)
                        .is_none_or(|s| s.iter().all(Option::is_some))
                }),
            });
            if !ready {
                lane.needs = Some(needs);
                return false;
            }
        }
        let Some(Event::Call(call)) = lane.held.first().cloned() else {
            return true;
        };
        let raw_end = call.end;
        let done = Self::at(lane, lane.held_index);
        let mut required = 0u64;
        let mut msg_violations = 0;
        let mut coll_violations = 0;
        for need in &needs {
            match need {
                Need::Msg { key, seq, post } => {
                    let Some(send) = self.sends.remove(&(*key, *seq)) else {
                        self.report.unmatched_receives += 1;
                        continue;
                    };
                    self.report.messages += 1;
                    msg_violations += u64::from(raw_end < send.raw_start);
                    required = required.max(send.start);
                    let recv_end = raw_end.saturating_add(lane.shift).max(if self.repair {
                        send.start
                    } else {
                        0
                    });
                    on_match(&MessageMatch {
                        send: send.at,
                        recv_post: *post,
                        recv_done: done,
                        source: key.1,
                        dest: key.2,
                        tag: key.3,
                        bytes: send.bytes,
                        send_start: send.start,
                        recv_end,
                    });
                }
                Need::Coll(r) => {
                    let Some(inst) = self.colls.get_mut(&(r.global, r.instance)) else {
                        continue;
                    };
                    self.report.collective_exits += 1;
                    let range = Self::waited_for(r, inst.starts.len());
                    let raw = inst.raw_starts[range.clone()]
                        .iter()
                        .flatten()
                        .copied()
                        .max()
                        .unwrap_or(0);
                    let shifted = inst.starts[range]
                        .iter()
                        .flatten()
                        .copied()
                        .max()
                        .unwrap_or(0);
                    coll_violations += u64::from(raw_end < raw);
                    required = required.max(shifted);
                    inst.exits_left = inst.exits_left.saturating_sub(1);
                    if inst.exits_left == 0 {
                        self.colls.remove(&(r.global, r.instance));
                    }
                }
            }
        }
        self.report.message_violations += msg_violations;
        self.report.collective_violations += coll_violations;
        let start = call.start.saturating_add(lane.shift);
        let mut end = raw_end.saturating_add(lane.shift);
        if self.repair && end < required {
            lane.shift += required - end;
            end = required;
        }
        if let Some(Event::Call(c)) = lane.held.first_mut() {
            c.start = start;
            c.end = end;
        }
        lane.spare_needs = needs;
        true
    }
}
