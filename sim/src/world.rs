//! The virtual-time world: compact per-rank state, an event queue, and the [`AsyncTransport`] each
//! simulated rank hands to the protocol.
//!
//! Every rank's protocol call is one future, and every rank has its own virtual clock. A rank that
//! waits for something already determined (a message already sent, a deadline, its own disk write)
//! moves its clock to that instant at once. Only when it waits for something not yet sent (a
//! message, the last arrival at a collective) does it record what it waits for and return
//! `Pending`; whoever provides it later puts the rank on the run queue with the instant it may go
//! on at, and the executor ([`World::run`]) sets the rank's clock to that instant and polls its
//! future again. A rank waiting for a ping costs nothing until the ping is sent.
//!
//! The order in which ready ranks are polled does not change any simulated instant: the protocol
//! is deterministic (every receive names its source and tag, there is no wildcard), and instants
//! only combine by `max` (a receive ends at max(own clock, arrival), a collective at the latest
//! arrival plus its cost). So the run queue is a plain FIFO rather than a time-ordered heap, which
//! at a million ranks is several times faster. Only the sequence of random draws depends on it.
//!
//! Collectives (`allreduce_or`, `reduce_f64`, `barrier`, and the split decision's nonblocking
//! OR-reduction) are single modelled operations: they complete when the last rank arrives, plus a
//! log-P cost, so a million-rank reduction is one entry per rank, not a million messages. A
//! nonblocking one does not stop the rank that starts it; the rank that completes it later waits
//! only if the reduction's completion instant is still ahead of it.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use offload::transport::ReduceOp;
use offload::{AsyncTransport, FlushReport, Tag, TransportError};

use crate::model::{NetModel, Rng};

/// Local clocks read `LOCAL_EPOCH_NS + offset + true·rate`, so that negative offsets stay positive.
pub const LOCAL_EPOCH_NS: f64 = 1.0e12;

struct Message {
    src: u32,
    tag: Tag,
    value: u64,
    deliver_at: u64,
}

/// What the simulator keeps per rank between and during protocol calls.
pub struct RankState {
    /// True (simulated) time this rank has reached, ns.
    pub time: u64,
    pub clock_offset_ns: f64,
    pub clock_rate: f64,
    /// True instant the rank's latest disk write ended (0: none yet).
    pub write_end: u64,
    mailbox: Vec<Message>,
    waiting_for: Option<(u32, Tag)>,
    collective_seq: u32,
    /// The split decision's reduction this rank started and has not completed.
    pending_decision: Option<u32>,
}

impl RankState {
    pub fn new(clock_offset_ns: f64, clock_rate: f64) -> Self {
        RankState {
            time: 0,
            clock_offset_ns,
            clock_rate,
            write_end: 0,
            mailbox: Vec::new(),
            waiting_for: None,
            collective_seq: 0,
            pending_decision: None,
        }
    }

    /// The local clock reading at true instant `true_ns`, without read jitter.
    pub fn local_at(&self, true_ns: f64) -> f64 {
        LOCAL_EPOCH_NS + self.clock_offset_ns + true_ns * self.clock_rate
    }

    /// The true instant at which the local clock reads `local_ns`.
    pub fn true_at(&self, local_ns: f64) -> f64 {
        (local_ns - LOCAL_EPOCH_NS - self.clock_offset_ns) / self.clock_rate
    }
}

/// What a rank brings to a collective.
#[derive(Clone, Copy)]
enum Contribution {
    /// Barrier and OR-allreduce: every rank gets the OR of the words.
    Or(u64),
    /// Reduction to rank 0: only rank 0 waits for (and gets) the result.
    Reduce(f64, ReduceOp),
}

#[derive(Default)]
struct Collective {
    arrived: usize,
    latest: u64,
    /// Modelled duration from the last arrival to the result.
    cost: u64,
    word: u64,
    reduced: Option<f64>,
    /// Ranks parked until the last arrival (rank 0 only, for a reduction).
    waiting: Vec<u32>,
    /// Ranks that still have to pick up the result.
    readers_left: usize,
}

/// Disk behaviour, as the world needs it at a write.
#[derive(Clone, Copy, Debug)]
pub struct DiskParams {
    pub bytes_per_ns_nominal: f64,
    pub efficiency_lo: f64,
    pub efficiency_hi: f64,
    /// Each rank's write varies by up to this fraction around the suspension's common efficiency.
    pub rank_variation: f64,
    /// Cap on the sum of all ranks' bandwidths (shared file system), bytes per ns.
    pub shared_bytes_per_ns: Option<f64>,
}

pub struct World {
    pub ranks: Vec<RankState>,
    ready: VecDeque<(u64, u32)>,
    pub rng: Rng,
    pub net: NetModel,
    pub disk: DiskParams,
    pub read_jitter_ns: f64,
    /// Disk efficiency shared by every write of the current suspension (see [`World::new_round`]).
    round_efficiency: f64,
    collectives: HashMap<u32, Collective>,
    /// Wake-ups processed so far (a measure of the simulator's work).
    pub events: u64,
    depth: u32,
}

/// ⌈log2 P⌉: the depth of a binomial tree, the number of rounds of a log-P collective.
pub fn log2_ceil(size: usize) -> u32 {
    if size <= 1 {
        0
    } else {
        usize::BITS - (size - 1).leading_zeros()
    }
}

impl World {
    pub fn new(
        ranks: Vec<RankState>,
        rng: Rng,
        net: NetModel,
        disk: DiskParams,
        read_jitter_ns: f64,
    ) -> Self {
        let depth = log2_ceil(ranks.len());
        World {
            ranks,
            ready: VecDeque::new(),
            rng,
            net,
            disk,
            read_jitter_ns,
            round_efficiency: 1.0,
            collectives: HashMap::new(),
            events: 0,
            depth,
        }
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// Draws the disk efficiency of the next suspension. Run-to-run variability (the paper's 25–36 s
    /// for 512 MB) is mostly common to the writes of one suspension; ranks differ around it by
    /// [`DiskParams::rank_variation`].
    pub fn new_round(&mut self) {
        let disk = self.disk;
        self.round_efficiency =
            disk.efficiency_lo + self.rng.uniform() * (disk.efficiency_hi - disk.efficiency_lo);
    }

    fn schedule(&mut self, rank: u32, at: u64) {
        self.ready.push_back((at, rank));
    }

    fn pop(&mut self) -> Option<u32> {
        let (at, rank) = self.ready.pop_front()?;
        let state = &mut self.ranks[rank as usize];
        state.time = state.time.max(at);
        self.events += 1;
        Some(rank)
    }

    /// Cost of an allreduce or barrier: a reduction up and a broadcast down a tree of mean hops.
    pub fn allreduce_cost(&self) -> u64 {
        (2.0 * self.depth as f64 * self.net.latency_ns).round() as u64
    }

    fn reduce_cost(&self) -> u64 {
        (self.depth as f64 * self.net.latency_ns).round() as u64
    }

    /// Runs one protocol future per rank, rank `r` starting at true instant `starts[r]`, until all
    /// finish; `done(rank, output, world)` is called as each one completes (the rank's `time` is
    /// then its finishing instant).
    pub fn run<'a, T>(
        cell: &RefCell<World>,
        mut futures: Vec<Option<Pin<Box<dyn Future<Output = T> + 'a>>>>,
        starts: &[u64],
        mut done: impl FnMut(usize, T, &World),
    ) -> Result<(), String> {
        {
            let mut world = cell.borrow_mut();
            for (rank, &at) in starts.iter().enumerate() {
                world.schedule(rank as u32, at);
            }
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut left = futures.len();
        loop {
            let Some(rank) = cell.borrow_mut().pop() else {
                break;
            };
            let slot = &mut futures[rank as usize];
            let future = slot
                .as_mut()
                .ok_or_else(|| format!("rank {rank} woken after it finished"))?;
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                *slot = None;
                left -= 1;
                done(rank as usize, output, &cell.borrow());
            }
        }
        if left > 0 {
            let stuck: Vec<usize> = futures
                .iter()
                .enumerate()
                .filter(|(_, f)| f.is_some())
                .map(|(r, _)| r)
                .take(8)
                .collect();
            return Err(format!(
                "deadlock: {left} ranks never finished (first: {stuck:?})"
            ));
        }
        Ok(())
    }
}

/// Returns `Pending` once, after the caller arranged its wake-up.
struct Park(bool);

impl Future for Park {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

fn park() -> Park {
    Park(false)
}

/// One simulated rank's transport.
pub struct SimRank<'w> {
    rank: u32,
    size: usize,
    world: &'w RefCell<World>,
}

impl<'w> SimRank<'w> {
    pub fn new(world: &'w RefCell<World>, rank: usize) -> Self {
        let size = world.borrow().size();
        SimRank {
            rank: rank as u32,
            size,
            world,
        }
    }

    fn check(&self, other: usize) -> Result<(), TransportError> {
        if other < self.size {
            Ok(())
        } else {
            Err(TransportError::BadRank(other, self.size))
        }
    }

    /// Enters the next collective without waiting for it; returns its sequence number.
    fn arrive(&mut self, contribution: Contribution) -> u32 {
        let me = self.rank as usize;
        let mut world = self.world.borrow_mut();
        let size = world.size();
        let state = &mut world.ranks[me];
        let seq = state.collective_seq;
        state.collective_seq += 1;
        let now = state.time;
        let cost = match contribution {
            Contribution::Or(_) => world.allreduce_cost(),
            Contribution::Reduce(..) => world.reduce_cost(),
        };
        let c = world.collectives.entry(seq).or_default();
        if c.arrived == 0 {
            c.cost = cost;
            c.readers_left = match contribution {
                Contribution::Or(_) => size,
                Contribution::Reduce(..) => 1,
            };
        }
        c.arrived += 1;
        c.latest = c.latest.max(now);
        match contribution {
            Contribution::Or(word) => c.word |= word,
            Contribution::Reduce(value, op) => {
                c.reduced = Some(c.reduced.map_or(value, |r| op.apply(r, value)));
            }
        }
        if c.arrived == size {
            let at = c.latest + cost;
            let waiting = std::mem::take(&mut c.waiting);
            for rank in waiting {
                world.schedule(rank, at);
            }
        }
        seq
    }

    /// Waits for collective `seq` to complete and picks up its result (the OR word, and the
    /// reduced value).
    async fn complete(&mut self, seq: u32) -> (u64, Option<f64>) {
        let ready_at = {
            let mut world = self.world.borrow_mut();
            let size = world.size();
            let c = world
                .collectives
                .get_mut(&seq)
                .expect("collective state lives until every reader has been");
            if c.arrived == size {
                // Everyone is in: the result is known, the rank may only have to wait for it.
                Some(c.latest + c.cost)
            } else {
                c.waiting.push(self.rank);
                None
            }
        };
        match ready_at {
            Some(at) => self.advance_to(at),
            None => park().await,
        }
        let mut world = self.world.borrow_mut();
        let c = world
            .collectives
            .get_mut(&seq)
            .expect("collective state lives until every reader has been");
        let result = (c.word, c.reduced);
        c.readers_left -= 1;
        if c.readers_left == 0 {
            world.collectives.remove(&seq);
        }
        result
    }

    /// The rank's own processor time, `ns` of it.
    fn spend(&mut self, ns: f64) {
        let at = self.world.borrow().ranks[self.rank as usize].time + ns.round() as u64;
        self.advance_to(at);
    }

    /// Moves this rank's clock forward to `at` without yielding. Sound because the protocol is
    /// deterministic: a receive names its source and tag, so what a rank does never depends on
    /// the order in which the simulator gets to other ranks, only on the instants carried by
    /// messages and collective arrivals, which are combined with `max`. A rank therefore yields
    /// only when it waits for something not yet sent.
    fn advance_to(&mut self, at: u64) {
        let mut world = self.world.borrow_mut();
        let state = &mut world.ranks[self.rank as usize];
        state.time = state.time.max(at);
    }
}

impl AsyncTransport for SimRank<'_> {
    fn rank(&self) -> usize {
        self.rank as usize
    }

    fn size(&self) -> usize {
        self.size
    }

    fn now(&self) -> u64 {
        let mut world = self.world.borrow_mut();
        let jitter = world.read_jitter_ns;
        let noise = if jitter > 0.0 {
            (world.rng.uniform() * 2.0 - 1.0) * jitter
        } else {
            0.0
        };
        let state = &world.ranks[self.rank as usize];
        (state.local_at(state.time as f64) + noise).max(0.0) as u64
    }

    async fn barrier(&mut self) -> Result<(), TransportError> {
        let seq = self.arrive(Contribution::Or(0));
        self.complete(seq).await;
        Ok(())
    }

    async fn allreduce_or(&mut self, flag: bool) -> Result<bool, TransportError> {
        let seq = self.arrive(Contribution::Or(flag as u64));
        Ok(self.complete(seq).await.0 != 0)
    }

    async fn reduce_f64(
        &mut self,
        value: f64,
        op: ReduceOp,
    ) -> Result<Option<f64>, TransportError> {
        let seq = self.arrive(Contribution::Reduce(value, op));
        if self.rank != 0 {
            // An eager send: the contribution is on its way, the rank goes on.
            return Ok(None);
        }
        Ok(self.complete(seq).await.1)
    }

    async fn decision_start(&mut self, word: u64) -> Result<(), TransportError> {
        let cpu = self.world.borrow().net.nonblocking_call_ns;
        self.spend(cpu);
        let seq = self.arrive(Contribution::Or(word));
        let me = self.rank as usize;
        let mut world = self.world.borrow_mut();
        if world.ranks[me].pending_decision.replace(seq).is_some() {
            return Err(TransportError::Failed(
                "a decision was started while another was outstanding".into(),
            ));
        }
        Ok(())
    }

    async fn decision_finish(&mut self) -> Result<u64, TransportError> {
        let cpu = self.world.borrow().net.nonblocking_call_ns;
        self.spend(cpu);
        let me = self.rank as usize;
        let seq = self.world.borrow_mut().ranks[me]
            .pending_decision
            .take()
            .ok_or_else(|| TransportError::Failed("no decision to finish".into()))?;
        Ok(self.complete(seq).await.0)
    }

    async fn send_u64(&mut self, dest: usize, tag: Tag, value: u64) -> Result<(), TransportError> {
        self.check(dest)?;
        let mut world = self.world.borrow_mut();
        let (now, write_end) = {
            let me = &world.ranks[self.rank as usize];
            (me.time, me.write_end)
        };
        let after_write = write_end > 0 && now < write_end + world.net.post_write_window_ns;
        let latency = {
            let World { net, rng, .. } = &mut *world;
            net.sample_latency(rng, after_write)
        };
        let deliver_at = now + latency;
        let receiver = &mut world.ranks[dest];
        receiver.mailbox.push(Message {
            src: self.rank,
            tag,
            value,
            deliver_at,
        });
        if receiver.waiting_for == Some((self.rank, tag)) {
            receiver.waiting_for = None;
            let at = deliver_at.max(receiver.time);
            world.schedule(dest as u32, at);
        }
        Ok(())
    }

    async fn recv_u64(&mut self, src: usize, tag: Tag) -> Result<u64, TransportError> {
        self.check(src)?;
        loop {
            {
                let mut world = self.world.borrow_mut();
                let me = &mut world.ranks[self.rank as usize];
                match me
                    .mailbox
                    .iter()
                    .position(|m| m.src as usize == src && m.tag == tag)
                {
                    Some(index) => {
                        // Already sent: its arrival instant is known, so the rank's clock can move
                        // there without waiting for the rest of the world (see `advance_to`).
                        let message = me.mailbox.remove(index);
                        me.time = me.time.max(message.deliver_at);
                        return Ok(message.value);
                    }
                    None => me.waiting_for = Some((src as u32, tag)),
                }
            }
            park().await;
        }
    }

    async fn wait_until(&mut self, deadline: u64) {
        let at = {
            let world = self.world.borrow();
            world.ranks[self.rank as usize]
                .true_at(deadline as f64)
                .ceil()
                .max(0.0) as u64
        };
        self.advance_to(at);
    }

    async fn write_trace(&mut self, flush: &mut dyn FnMut() -> FlushReport) -> FlushReport {
        let report = flush();
        let end = {
            let mut world = self.world.borrow_mut();
            let disk = world.disk;
            let efficiency = world.round_efficiency
                * (1.0 + disk.rank_variation * (2.0 * world.rng.uniform() - 1.0));
            let mut bandwidth = disk.bytes_per_ns_nominal * efficiency;
            if let Some(shared) = disk.shared_bytes_per_ns {
                // Every rank writes in the same suspension, so each gets an equal share at most.
                bandwidth = bandwidth.min(shared / world.size() as f64);
            }
            let took = (report.bytes_stored as f64 / bandwidth).ceil() as u64;
            let me = &mut world.ranks[self.rank as usize];
            me.time + took
        };
        self.advance_to(end);
        self.world.borrow_mut().ranks[self.rank as usize].write_end = end;
        report
    }
}
