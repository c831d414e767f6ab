//! What the suspension protocol needs from the layer that connects the ranks.
//!
//! The protocol code never spawns threads, never sleeps on its own and never reads a clock directly:
//! every blocking step and every time reading goes through a [`Transport`], so the same code runs over
//! MPI (a private duplicate of `MPI_COMM_WORLD`), over threads in one process (tests), and over a
//! virtual-time simulator. The protocol itself is written against [`AsyncTransport`], the same
//! operations as futures: a blocking [`Transport`] takes part through [`Blocking`] and [`block_on`]
//! (its futures are ready at once), while the simulator parks a rank's future until virtual time
//! reaches what it waits for, so a million ranks need no thread each.
//!
//! # Time
//! [`Transport::now`] is this rank's local clock in **nanoseconds** (`u64`). Local clocks are not
//! synchronised: they may be offset and drift against each other; the protocol relates them to rank
//! 0's clock through measured offsets. The on-disk records keep raw ticks, so the transport also says
//! how a local nanosecond reading maps to a tick ([`Transport::to_tick`]).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use thiserror::Error;

use crate::flush::FlushReport;

/// A message tag. The protocol uses tags from [`crate::protocol_tags`]; transports that share a
/// communicator with other traffic should keep their own tags outside that range.
pub type Tag = u32;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TransportError {
    #[error("rank {0} is gone (channel closed)")]
    Disconnected(usize),
    #[error("rank {0} is out of range for a communicator of {1}")]
    BadRank(usize, usize),
    #[error("transport failure: {0}")]
    Failed(String),
}

/// Which reduction [`Transport::reduce_f64`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Min,
    Max,
}

impl ReduceOp {
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

/// The few collective and point-to-point operations the suspension protocol is built from.
///
/// Each of them maps onto one MPI call on a private communicator: `MPI_Allreduce(MPI_INT, MPI_LOR)`,
/// `MPI_Reduce(MPI_DOUBLE, MPI_MIN | MPI_MAX)` to rank 0, `MPI_Iallreduce(MPI_UINT64_T, MPI_BOR)`
/// and `MPI_Wait` for the decision, `MPI_Send`/`MPI_Recv` of one `MPI_UINT64_T`, `MPI_Barrier`.
/// Every collective here is O(log P) messages deep in the MPI libraries' algorithms; nothing
/// gathers P values anywhere.
pub trait Transport {
    /// This rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks taking part.
    fn size(&self) -> usize;
    /// Local time in nanoseconds (see the module docs).
    fn now(&self) -> u64;
    /// The tick value matching a local nanosecond reading, for records that store ticks
    /// ([`format::Suspension::start`], [`format::ClockSample::local`]). Identity when the transport's
    /// clock already counts nanoseconds.
    fn to_tick(&self, local_ns: u64) -> u64 {
        local_ns
    }
    /// Blocks until every rank has entered.
    fn barrier(&mut self) -> Result<(), TransportError>;
    /// Logical OR of `flag` over all ranks, known on every rank.
    fn allreduce_or(&mut self, flag: bool) -> Result<bool, TransportError>;
    /// Reduces one value per rank to rank 0: `Some(result)` on rank 0, `None` elsewhere.
    fn reduce_f64(&mut self, value: f64, op: ReduceOp) -> Result<Option<f64>, TransportError>;
    /// Starts a nonblocking bitwise-OR reduction of `word` over all ranks (the split decision). At
    /// most one is outstanding; [`Transport::decision_finish`] completes it. Every rank starts it at
    /// the same point of its sequence of collectives.
    fn decision_start(&mut self, word: u64) -> Result<(), TransportError>;
    /// Completes the reduction started by [`Transport::decision_start`]; every rank gets the OR.
    fn decision_finish(&mut self) -> Result<u64, TransportError>;
    /// Sends one small value to `dest`. Must not wait for the matching receive longer than an eager
    /// MPI send of 8 bytes would.
    fn send_u64(&mut self, dest: usize, tag: Tag, value: u64) -> Result<(), TransportError>;
    /// Receives one value sent by `src` with `tag` (messages with other tags stay queued).
    fn recv_u64(&mut self, src: usize, tag: Tag) -> Result<u64, TransportError>;
    /// Returns once the local clock has reached `deadline` (local ns); at once if it has already.
    ///
    /// The default sleeps to shortly before the deadline, so oversubscribed ranks leave the core to
    /// others, then spins for precision. A virtual-time transport overrides it to jump the clock.
    fn wait_until(&mut self, deadline: u64) {
        sleep_then_spin(deadline, || self.now());
    }

    fn send_f64(&mut self, dest: usize, tag: Tag, value: f64) -> Result<(), TransportError> {
        self.send_u64(dest, tag, value.to_bits())
    }
    fn recv_f64(&mut self, src: usize, tag: Tag) -> Result<f64, TransportError> {
        self.recv_u64(src, tag).map(f64::from_bits)
    }
}

/// How long before a deadline [`sleep_then_spin`] stops sleeping: the scheduler's wake-up latency
/// on a loaded node is well below this, so the spin phase absorbs it.
pub const SPIN_WINDOW_NS: u64 = 300_000;

/// Waits until `now()` reaches `deadline`: sleeps while more than [`SPIN_WINDOW_NS`] is left, then
/// spins (yielding the core between readings, which costs well under a microsecond when nobody else
/// wants it).
pub fn sleep_then_spin(deadline: u64, now: impl Fn() -> u64) {
    loop {
        let current = now();
        if current >= deadline {
            return;
        }
        let left = deadline - current;
        if left > SPIN_WINDOW_NS {
            std::thread::sleep(std::time::Duration::from_nanos(left - SPIN_WINDOW_NS));
        } else {
            std::hint::spin_loop();
            if left > 20_000 {
                std::thread::yield_now();
            }
        }
    }
}

/// The same operations as [`Transport`], as futures, which is what the protocol is written against.
///
/// Real transports block: wrap them in [`Blocking`], whose futures are ready on their first poll, and
/// drive the protocol with [`block_on`] (that is what the blocking entry points such as
/// [`crate::Suspender::suspend`] do). A discrete-event simulator implements this trait directly and
/// parks a rank's future until virtual time reaches the instant it waits for, so a million ranks
/// need a million small futures rather than a million threads.
pub trait AsyncTransport {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn now(&self) -> u64;
    fn to_tick(&self, local_ns: u64) -> u64 {
        local_ns
    }
    fn barrier(&mut self) -> impl Future<Output = Result<(), TransportError>>;
    fn allreduce_or(&mut self, flag: bool) -> impl Future<Output = Result<bool, TransportError>>;
    fn reduce_f64(
        &mut self,
        value: f64,
        op: ReduceOp,
    ) -> impl Future<Output = Result<Option<f64>, TransportError>>;
    fn decision_start(&mut self, word: u64) -> impl Future<Output = Result<(), TransportError>>;
    fn decision_finish(&mut self) -> impl Future<Output = Result<u64, TransportError>>;
    fn send_u64(
        &mut self,
        dest: usize,
        tag: Tag,
        value: u64,
    ) -> impl Future<Output = Result<(), TransportError>>;
    fn recv_u64(
        &mut self,
        src: usize,
        tag: Tag,
    ) -> impl Future<Output = Result<u64, TransportError>>;
    fn wait_until(&mut self, deadline: u64) -> impl Future<Output = ()>;
    /// Runs the caller's flush. A real transport just calls it (the write takes real time); a
    /// simulator calls it to learn how many bytes were written and then lets the modelled write
    /// time pass.
    fn write_trace(
        &mut self,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> impl Future<Output = FlushReport>;

    fn send_f64(
        &mut self,
        dest: usize,
        tag: Tag,
        value: f64,
    ) -> impl Future<Output = Result<(), TransportError>> {
        self.send_u64(dest, tag, value.to_bits())
    }
    fn recv_f64(
        &mut self,
        src: usize,
        tag: Tag,
    ) -> impl Future<Output = Result<f64, TransportError>> {
        let received = self.recv_u64(src, tag);
        async move { received.await.map(f64::from_bits) }
    }
}

/// A blocking [`Transport`] seen as an [`AsyncTransport`] whose futures complete on their first poll.
pub struct Blocking<'a, T: ?Sized>(pub &'a mut T);

impl<T: Transport + ?Sized> AsyncTransport for Blocking<'_, T> {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn now(&self) -> u64 {
        self.0.now()
    }
    fn to_tick(&self, local_ns: u64) -> u64 {
        self.0.to_tick(local_ns)
    }
    async fn barrier(&mut self) -> Result<(), TransportError> {
        self.0.barrier()
    }
    async fn allreduce_or(&mut self, flag: bool) -> Result<bool, TransportError> {
        self.0.allreduce_or(flag)
    }
    async fn reduce_f64(
        &mut self,
        value: f64,
        op: ReduceOp,
    ) -> Result<Option<f64>, TransportError> {
        self.0.reduce_f64(value, op)
    }
    async fn decision_start(&mut self, word: u64) -> Result<(), TransportError> {
        self.0.decision_start(word)
    }
    async fn decision_finish(&mut self) -> Result<u64, TransportError> {
        self.0.decision_finish()
    }
    async fn send_u64(&mut self, dest: usize, tag: Tag, value: u64) -> Result<(), TransportError> {
        self.0.send_u64(dest, tag, value)
    }
    async fn recv_u64(&mut self, src: usize, tag: Tag) -> Result<u64, TransportError> {
        self.0.recv_u64(src, tag)
    }
    async fn wait_until(&mut self, deadline: u64) {
        self.0.wait_until(deadline)
    }
    async fn write_trace(&mut self, flush: &mut dyn FnMut() -> FlushReport) -> FlushReport {
        flush()
    }
}

/// Drives a future to completion on the calling thread. Meant for futures built on [`Blocking`],
/// which never return `Pending`; anything else is polled again after yielding the core.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}
