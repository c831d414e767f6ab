//! Which slice each end of a matched message binds to, decided while the happened-before pass
//! streams the lanes ([`reconstruct::matches::for_each_match`]), so that a view can write a call's flow ends on
//! the call's own slice as it writes the slice.
//!
//! A message's flow id is derived from its send event (lane and event index), so a send's slice
//! can carry the id before the receive is known: when a call that may send is shown, it gets its
//! own id whatever happens later. An unmatched send leaves a flow that nothing terminates, which
//! the viewers ignore. The receive end is known before the call that completed the receive is
//! shown, because the matching holds that completion until its message is matched.
//!
//! Ends that cannot sit on their call (the call was shown before the match said it sends, or its
//! lane ended first) come out as [`LooseEnd`]s at the time the match gave, for the view to place
//! on their own.

use std::collections::{HashMap, HashSet};

use format::requests::PersistentRequests;
use format::{Event, FunctionId};

use super::End;
use reconstruct::matches::MessageMatch;
use trace::definitions::RankMeta;
use trace::funcs::Deferred;
use trace::funcs::FuncClass;
use trace::lanes::LaneId;

/// What a call can be to the flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// It may be the send end of a message.
    Send,
    /// It creates a persistent send request (whose `Start`s send) or a receive one.
    SendInit,
    RecvInit,
    Start,
    Other,
}

impl Role {
    fn of(name: &str) -> Role {
        if matches!(
            FuncClass::of(name),
            FuncClass::Send | FuncClass::Isend | FuncClass::SendRecv
        ) {
            return Role::Send;
        }
        match Deferred::of(name) {
            Some(Deferred::SendInit) => Role::SendInit,
            Some(Deferred::RecvInit) => Role::RecvInit,
            Some(Deferred::Start) => Role::Start,
            _ => Role::Other,
        }
    }
}

/// A flow end that does not sit on a call's slice: flow id, which end, lane and time (absolute
/// ns on the view's axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LooseEnd {
    pub id: u64,
    pub end: End,
    pub lane: LaneId,
    pub ts: i64,
}

/// The flow ends of one call.
#[derive(Clone, Debug, Default)]
pub struct CallFlows {
    /// The call's own flow id, when it may send (every message it sends carries this id).
    pub out: Option<u64>,
    /// Ids of the messages whose receive this call completed, with the start of their send call
    /// (absolute ns on the view's axis).
    pub ins: Vec<(u64, i64)>,
}

#[derive(Default)]
struct LaneFlows {
    /// Events of the lane shown so far: the index of the next one.
    shown: u64,
    /// Receive ends matched before their call was shown, by event index: id, the match's time
    /// of the receive's end and of the send's start.
    pending_in: HashMap<u64, Vec<(u64, i64, i64)>>,
    /// Sends matched before their call was shown, by event index, with the match's time.
    pending_out: HashMap<u64, i64>,
    /// Shown calls that carry their own id and are not matched yet: what the matching itself
    /// holds as unmatched sends.
    open_sends: HashSet<u64>,
}

pub struct FlowBinder {
    lanes: Vec<LaneFlows>,
    lane_of: HashMap<LaneId, usize>,
    /// Per rank (by world rank): the role of each function id, and its persistent requests.
    roles: HashMap<u32, (HashMap<FunctionId, Role>, PersistentRequests)>,
    loose: Vec<LooseEnd>,
    /// Messages whose both ends were handed out (on calls or loose).
    pub messages: u64,
}

/// The id of the flow of a message sent by event `index` of lane number `lane` (the lane's
/// position in [`FlowBinder::lane_index`]): unique per send, and known before the receive.
pub fn flow_id(lane: usize, index: u64) -> u64 {
    ((lane as u64 + 1) << 40) | index
}

impl FlowBinder {
    pub fn new(metas: &[RankMeta]) -> FlowBinder {
        let mut lane_of = HashMap::new();
        for m in metas {
            for &stream in &m.streams {
                let n = lane_of.len();
                lane_of.insert(
                    LaneId {
                        rank: m.rank,
                        stream,
                    },
                    n,
                );
            }
        }
        let roles = metas
            .iter()
            .map(|m| {
                let roles = m
                    .functions
                    .iter()
                    .map(|(id, name)| (*id, Role::of(name)))
                    .collect();
                (m.rank, (roles, PersistentRequests::default()))
            })
            .collect();
        FlowBinder {
            lanes: (0..lane_of.len()).map(|_| LaneFlows::default()).collect(),
            lane_of,
            roles,
            loose: Vec::new(),
            messages: 0,
        }
    }

    /// The lane's number: lanes are numbered rank by rank in `metas` order, streams ascending.
    pub fn lane_index(&self, lane: LaneId) -> Option<usize> {
        self.lane_of.get(&lane).copied()
    }

    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Ends that became loose since the last call, to be written by the view.
    pub fn take_loose(&mut self) -> std::vec::Drain<'_, LooseEnd> {
        self.loose.drain(..)
    }

    pub fn on_match(&mut self, m: &MessageMatch) {
        self.messages += 1;
        let send_lane = LaneId {
            rank: m.send.rank,
            stream: m.send.stream,
        };
        let Some(sli) = self.lane_index(send_lane) else {
            // Without a lane there is no id scheme to follow: any id unused by sends will do.
            let id = u64::MAX - self.messages;
            self.loose_pair(id, send_lane, m);
            return;
        };
        let id = flow_id(sli, m.send.index);
        let send_start = m.send_start as i64;
        let lane = &mut self.lanes[sli];
        if m.send.index >= lane.shown {
            lane.pending_out.insert(m.send.index, send_start);
        } else if !lane.open_sends.remove(&m.send.index) {
            self.loose.push(LooseEnd {
                id,
                end: End::Send,
                lane: send_lane,
                ts: send_start,
            });
        }
        self.recv_end(id, m);
    }

    fn loose_pair(&mut self, id: u64, send_lane: LaneId, m: &MessageMatch) {
        self.loose.push(LooseEnd {
            id,
            end: End::Send,
            lane: send_lane,
            ts: m.send_start as i64,
        });
        self.recv_end(id, m);
    }

    fn recv_end(&mut self, id: u64, m: &MessageMatch) {
        let lane = LaneId {
            rank: m.recv_done.rank,
            stream: m.recv_done.stream,
        };
        let ts = m.recv_end as i64;
        match self.lane_index(lane) {
            Some(li) if m.recv_done.index >= self.lanes[li].shown => self.lanes[li]
                .pending_in
                .entry(m.recv_done.index)
                .or_default()
                .push((id, ts, m.send_start as i64)),
            // Shown already (not expected: the matching holds a completion until it is
            // matched) or on no lane: at the time the match gave, the end of that call.
            _ => self.loose.push(LooseEnd {
                id,
                end: End::Recv,
                lane,
                ts,
            }),
        }
    }

    /// Every event of a lane, in lane order, as the matching shows it. For a call, the flow ends
    /// that sit on its slice are written to `flows` (cleared first).
    pub fn on_event(&mut self, lane_id: LaneId, e: &Event, flows: &mut CallFlows) {
        flows.out = None;
        flows.ins.clear();
        let Some(li) = self.lane_index(lane_id) else {
            return;
        };
        let lane = &mut self.lanes[li];
        let index = lane.shown;
        lane.shown += 1;
        let Event::Call(c) = e else {
            // Flows bind to calls only; an end pointing elsewhere keeps the match's time.
            if let Some(ends) = lane.pending_in.remove(&index) {
                for (id, ts, _) in ends {
                    self.loose.push(LooseEnd {
                        id,
                        end: End::Recv,
                        lane: lane_id,
                        ts,
                    });
                }
            }
            if let Some(ts) = lane.pending_out.remove(&index) {
                self.loose.push(LooseEnd {
                    id: flow_id(li, index),
                    end: End::Send,
                    lane: lane_id,
                    ts,
                });
            }
            return;
        };
        if let Some(ends) = lane.pending_in.remove(&index) {
            flows
                .ins
                .extend(ends.into_iter().map(|(id, _, send)| (id, send)));
        }
        let matched = lane.pending_out.remove(&index).is_some();
        let may_send = match self.roles.get_mut(&lane_id.rank) {
            Some((roles, persistent)) => match roles.get(&c.func).copied().unwrap_or(Role::Other) {
                Role::Send => true,
                Role::Start => persistent.started(c).is_some_and(|p| p.send),
                role @ (Role::SendInit | Role::RecvInit) => {
                    persistent.init(role == Role::SendInit, c);
                    false
                }
                Role::Other => false,
            },
            None => false,
        };
        if matched || may_send {
            flows.out = Some(flow_id(li, index));
        }
        // A call sends one message at most: matched already, it is not remembered.
        if may_send && !matched {
            self.lanes[li].open_sends.insert(index);
        }
    }

    /// Receive and send ends whose event never came (a lane cut short), in flow id order.
    pub fn finish(mut self) -> Vec<LooseEnd> {
        let mut left: Vec<LooseEnd> = std::mem::take(&mut self.loose);
        for (&lane, &li) in &self.lane_of {
            let l = &self.lanes[li];
            for (&index, &ts) in &l.pending_out {
                left.push(LooseEnd {
                    id: flow_id(li, index),
                    end: End::Send,
                    lane,
                    ts,
                });
            }
            for ends in l.pending_in.values() {
                for &(id, ts, _) in ends {
                    left.push(LooseEnd {
                        id,
                        end: End::Recv,
                        lane,
                        ts,
                    });
                }
            }
        }
        left.sort_by_key(|l| (l.id, l.end == End::Recv));
        left
    }
}
