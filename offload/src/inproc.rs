//! A [`Transport`] whose ranks are threads of one process, for deterministic tests of the protocol.
//!
//! All ranks share one true clock (an `Instant` taken at start). Each rank sees it through its own
//! local clock, `local = EPOCH + skew + true·(1 + drift)`, so tests can inject offsets and drift and
//! then check that the protocol recovers them, and can measure resume instants on the shared true
//! clock. Messages travel over crossbeam channels and are held back until their delivery instant, so
//! a fixed latency, and extra latency for messages a rank sends shortly after it wrote to disk (the
//! paper's unexplained slowdown), can be injected.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam::channel::{Receiver, Sender, TryRecvError, unbounded};

use crate::transport::{ReduceOp, Tag, Transport, TransportError, sleep_then_spin};

/// Added to every local clock so that negative injected skews never make a reading negative.
const LOCAL_EPOCH_NS: f64 = 1.0e12;

/// How long a receive polls before it blocks.
const RECV_POLL_NS: u64 = 50_000;

/// Tags of the collectives this transport builds from point-to-point messages; above any tag the
/// protocol uses.
const TAG_ALLREDUCE_UP: Tag = u32::MAX - 4;
const TAG_ALLREDUCE_DOWN: Tag = u32::MAX - 3;
const TAG_REDUCE: Tag = u32::MAX - 2;
const TAG_DECISION_UP: Tag = u32::MAX - 1;
const TAG_DECISION_DOWN: Tag = u32::MAX;

/// Extra latency for messages sent by a rank within `window_ns` after it last wrote to disk.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SlowAfterWrite {
    pub extra_ns: u64,
    pub window_ns: u64,
}

/// How the simulated ranks and their network behave.
#[derive(Clone, Debug, Default)]
pub struct InProcConfig {
    pub ranks: usize,
    /// Per-rank constant clock offset in ns (missing entries mean 0).
    pub skew_ns: Vec<i64>,
    /// Per-rank clock drift in parts per million (missing entries mean 0).
    pub drift_ppm: Vec<f64>,
    /// One-way latency added to every message, in ns.
    pub latency_ns: u64,
    pub slow_after_write: Option<SlowAfterWrite>,
}

impl InProcConfig {
    pub fn new(ranks: usize) -> Self {
        Self {
            ranks,
            ..Self::default()
        }
    }
}

struct Shared {
    start: Instant,
    /// Per rank: true instant (ns) until which its outgoing messages are slow.
    slow_until: Vec<AtomicU64>,
    slow: Option<SlowAfterWrite>,
}

impl Shared {
    fn true_now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

struct Message {
    tag: Tag,
    value: u64,
    deliver_at: u64,
}

/// One rank's end of the in-process world.
pub struct InProcRank {
    rank: usize,
    size: usize,
    skew_ns: f64,
    rate: f64,
    latency_ns: u64,
    shared: Arc<Shared>,
    to: Vec<Sender<Message>>,
    from: Vec<Receiver<Message>>,
    unmatched: Vec<VecDeque<Message>>,
    last_wake_true_ns: u64,
    /// True instant the last `wait_until` aimed at: what the protocol chose, before the OS's
    /// wake-up latency (milliseconds on a loaded 2-core machine) is added.
    last_wait_target_true_ns: u64,
    /// Rank 0's own word of the outstanding decision (the others' are in flight to it).
    decision_word: Option<u64>,
}

/// Lets a flush callback tell the transport that this rank just finished a disk write, which starts
/// its slow-message window (when one is configured).
#[derive(Clone)]
pub struct WriteSignal {
    rank: usize,
    shared: Arc<Shared>,
}

impl WriteSignal {
    pub fn write_done(&self) {
        if let Some(slow) = self.shared.slow {
            let until = self.shared.true_now() + slow.window_ns;
            self.shared.slow_until[self.rank].store(until, Ordering::Relaxed);
        }
    }
}

/// Runs `body` on `config.ranks` threads, one per rank, and returns their results in rank order.
pub fn run<R: Send>(config: &InProcConfig, body: impl Fn(&mut InProcRank) -> R + Sync) -> Vec<R> {
    let mut ranks = world(config);
    std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .iter_mut()
            .map(|rank| {
                let body = &body;
                scope.spawn(move || body(rank))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Builds the ranks without starting threads (for callers that drive them their own way).
pub fn world(config: &InProcConfig) -> Vec<InProcRank> {
    let size = config.ranks;
    assert!(size > 0, "a world needs at least one rank");
    let shared = Arc::new(Shared {
        start: Instant::now(),
        slow_until: (0..size).map(|_| AtomicU64::new(0)).collect(),
        slow: config.slow_after_write,
    });
    // channels[src][dst]
    let mut senders: Vec<Vec<Sender<Message>>> = vec![Vec::with_capacity(size); size];
    let mut receivers: Vec<Vec<Receiver<Message>>> = vec![Vec::with_capacity(size); size];
    for sender_row in senders.iter_mut() {
        for receiver_row in receivers.iter_mut() {
            let (tx, rx) = unbounded();
            sender_row.push(tx);
            receiver_row.push(rx);
        }
    }
    senders
        .into_iter()
        .zip(receivers)
        .enumerate()
        .map(|(rank, (to, from))| InProcRank {
            rank,
            size,
            skew_ns: config.skew_ns.get(rank).copied().unwrap_or(0) as f64,
            rate: 1.0 + config.drift_ppm.get(rank).copied().unwrap_or(0.0) * 1e-6,
            latency_ns: config.latency_ns,
            shared: Arc::clone(&shared),
            to,
            from,
            unmatched: (0..size).map(|_| VecDeque::new()).collect(),
            last_wake_true_ns: 0,
            last_wait_target_true_ns: 0,
            decision_word: None,
        })
        .collect()
}

impl InProcRank {
    /// The shared true clock, in ns since the world was built.
    pub fn true_now(&self) -> u64 {
        self.shared.true_now()
    }

    /// This rank's local reading at true instant `true_ns`.
    pub fn local_at(&self, true_ns: u64) -> u64 {
        (LOCAL_EPOCH_NS + self.skew_ns + true_ns as f64 * self.rate) as u64
    }

    /// The true instant at which this rank's clock reads `local_ns`.
    pub fn true_at(&self, local_ns: u64) -> u64 {
        let t = (local_ns as f64 - LOCAL_EPOCH_NS - self.skew_ns) / self.rate;
        t.max(0.0) as u64
    }

    /// True instant at which the last [`Transport::wait_until`] returned.
    pub fn last_wake_true_ns(&self) -> u64 {
        self.last_wake_true_ns
    }

    /// True instant the last [`Transport::wait_until`] aimed at (it returns at or after it).
    pub fn last_wait_target_true_ns(&self) -> u64 {
        self.last_wait_target_true_ns
    }

    pub fn write_signal(&self) -> WriteSignal {
        WriteSignal {
            rank: self.rank,
            shared: Arc::clone(&self.shared),
        }
    }

    fn wait_true(&self, true_deadline: u64) {
        sleep_then_spin(true_deadline, || self.shared.true_now());
    }

    /// Polls like an MPI progress loop for a short while (a parked thread takes tens of µs to wake
    /// on a loaded node), then blocks so that idle ranks leave the cores to the others.
    fn poll_then_block(&self, src: usize) -> Result<Message, TransportError> {
        let channel = &self.from[src];
        let give_up = self.shared.true_now() + RECV_POLL_NS;
        loop {
            match channel.try_recv() {
                Ok(message) => return Ok(message),
                Err(TryRecvError::Disconnected) => return Err(TransportError::Disconnected(src)),
                Err(TryRecvError::Empty) if self.shared.true_now() < give_up => {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
                Err(TryRecvError::Empty) => {
                    return channel
                        .recv()
                        .map_err(|_| TransportError::Disconnected(src));
                }
            }
        }
    }

    fn check_rank(&self, other: usize) -> Result<(), TransportError> {
        if other < self.size {
            Ok(())
        } else {
            Err(TransportError::BadRank(other, self.size))
        }
    }
}

/// The offset rank 0's clock minus rank `rank`'s clock at true instant `true_ns`, as injected by
/// `config`: what the clock measurement should recover.
pub fn injected_offset_ns(config: &InProcConfig, rank: usize, true_ns: u64) -> f64 {
    let skew = |r: usize| config.skew_ns.get(r).copied().unwrap_or(0) as f64;
    let rate = |r: usize| 1.0 + config.drift_ppm.get(r).copied().unwrap_or(0.0) * 1e-6;
    (skew(0) - skew(rank)) + true_ns as f64 * (rate(0) - rate(rank))
}

impl Transport for InProcRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn now(&self) -> u64 {
        self.local_at(self.shared.true_now())
    }

    fn barrier(&mut self) -> Result<(), TransportError> {
        self.allreduce_or(false).map(|_| ())
    }

    fn allreduce_or(&mut self, flag: bool) -> Result<bool, TransportError> {
        if self.rank == 0 {
            let mut any = flag;
            for src in 1..self.size {
                any |= self.recv_u64(src, TAG_ALLREDUCE_UP)? != 0;
            }
            for dst in 1..self.size {
                self.send_u64(dst, TAG_ALLREDUCE_DOWN, any as u64)?;
            }
            Ok(any)
        } else {
            self.send_u64(0, TAG_ALLREDUCE_UP, flag as u64)?;
            Ok(self.recv_u64(0, TAG_ALLREDUCE_DOWN)? != 0)
        }
    }

    fn reduce_f64(&mut self, value: f64, op: ReduceOp) -> Result<Option<f64>, TransportError> {
        if self.rank == 0 {
            let mut result = value;
            for src in 1..self.size {
                result = op.apply(result, self.recv_f64(src, TAG_REDUCE)?);
            }
            Ok(Some(result))
        } else {
            self.send_f64(0, TAG_REDUCE, value)?;
            Ok(None)
        }
    }

    // Nonblocking in the way that matters to the protocol: starting never waits for another rank
    // (the words travel as queued messages); only finishing does.
    fn decision_start(&mut self, word: u64) -> Result<(), TransportError> {
        if self.rank == 0 {
            self.decision_word = Some(word);
            Ok(())
        } else {
            self.send_u64(0, TAG_DECISION_UP, word)
        }
    }

    fn decision_finish(&mut self) -> Result<u64, TransportError> {
        if self.rank == 0 {
            let mut word = self.decision_word.take().ok_or_else(|| {
                TransportError::Failed("decision finished without being started".into())
            })?;
            for src in 1..self.size {
                word |= self.recv_u64(src, TAG_DECISION_UP)?;
            }
            for dst in 1..self.size {
                self.send_u64(dst, TAG_DECISION_DOWN, word)?;
            }
            Ok(word)
        } else {
            self.recv_u64(0, TAG_DECISION_DOWN)
        }
    }

    fn send_u64(&mut self, dest: usize, tag: Tag, value: u64) -> Result<(), TransportError> {
        self.check_rank(dest)?;
        let now = self.shared.true_now();
        let mut deliver_at = now + self.latency_ns;
        if let Some(slow) = self.shared.slow
            && now < self.shared.slow_until[self.rank].load(Ordering::Relaxed)
        {
            deliver_at += slow.extra_ns;
        }
        self.to[dest]
            .send(Message {
                tag,
                value,
                deliver_at,
            })
            .map_err(|_| TransportError::Disconnected(dest))
    }

    fn recv_u64(&mut self, src: usize, tag: Tag) -> Result<u64, TransportError> {
        self.check_rank(src)?;
        let queued = self.unmatched[src].iter().position(|m| m.tag == tag);
        let message = match queued {
            Some(index) => self.unmatched[src].remove(index).expect("index just found"),
            None => loop {
                let message = self.poll_then_block(src)?;
                if message.tag == tag {
                    break message;
                }
                self.unmatched[src].push_back(message);
            },
        };
        self.wait_true(message.deliver_at);
        Ok(message.value)
    }

    fn wait_until(&mut self, deadline: u64) {
        self.last_wait_target_true_ns = self.true_at(deadline);
        self.wait_true(self.last_wait_target_true_ns);
        // Rounding in the local→true conversion can leave us a few ns short of the local deadline.
        sleep_then_spin(deadline, || self.now());
        self.last_wake_true_ns = self.shared.true_now();
    }
}
