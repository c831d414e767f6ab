//! The equalised suspension (paper Fig. 3 and Fig. 5), one implementation for every transport.
//!
//! # The decision
//! Called on every rank right after a blocking collective over all ranks. Whether the ranks flush
//! is an OR over "my buffer holds more than S". Two ways to take it ([`Decision`]):
//! - **split** (default): a nonblocking OR-reduction is started at one decision point and
//!   completed at the next one, so a collective that does not flush costs a counter increment, or
//!   at a decision point one `MPI_Wait` on a reduction that has long finished plus one
//!   `MPI_Iallreduce` start. Only when the completed reduction says "flush" do all ranks enter the
//!   equalised suspension, at the same collective. Decision points are every `stride`-th eligible
//!   collective; rank 0 proposes the stride in the same reduction (its bits are the high half of
//!   the word, the others contribute zeros there) so that decision points fall about
//!   [`Settings::decision_interval_ns`] apart, and every rank learns the same stride.
//! - **blocking** (the paper's): the reduction completes at the collective that started it, and
//!   every decision point is a suspension, with a short Z when nothing is flushed.
//!
//! # The suspension
//! ```text
//! t := the rank's time when it reached the decision point
//! if flushing: flush                           (every rank writes its trace)
//! offsets, m, d := ping-pong (dynamic) | those measured at init (noremeasure)
//! reduce-min of (t + own offset − error bound) to rank 0; w := now − that; Z := w + m·⌈log2 P⌉ + d
//! broadcast Z from rank 0 over a binomial tree of point-to-point messages
//! wait until t + Z (sleep, then spin); overshoot := how far past t + Z we resumed
//! ```
//! `⌈log2 P⌉` is the depth of the binomial tree, which is what the broadcast term stands for. Every
//! step is O(log P) messages deep: each rank corrects its own start into rank 0's clock (both
//! clock schemes tell each rank its own offset), so rank 0 needs the minimum, not every start.
//! With the tree scheme the start is moved earlier by the rank's error bound, so that w is never
//! underestimated.
//!
//! With [`Settings::clock_scheme`] = [`ClockScheme::Tree`] the offsets are measured along that same
//! tree (O(log P) instead of O(P) at rank 0).
//!
//! # Agreement and errors
//! A rank whose protocol step failed does not drop out on its own (the others would wait for it
//! in the next reduction forever): it sets [`WANT_DISABLE`] in its next decision word, and every
//! rank turns the protocol off at the same decision point ([`Suspender::disabled`]).
//!
//! Every entry point has a blocking form (`suspend`, `init`, over a [`Transport`]) and an async form
//! (`suspend_async`, `init_async`, over an [`AsyncTransport`]); the blocking one drives the async one
//! with [`block_on`], so there is one implementation.
//!
//! Record fields: every rank fills its [`format::Suspension`] with its own start, end, overshoot,
//! write time, bytes, offset and the Z, m, d it received. Only rank 0 computes w, so `w_ns` is set on
//! rank 0 and 0 elsewhere (sending it too would lengthen the broadcast Z depends on).
//! Clock samples of a re-measurement are returned with the record for the trace.
//!
//! # Clock offsets
//! In split mode they are measured at init, at flushing suspensions and at finalize, never at a
//! collective that does not flush; the reader interpolates between samples (linear drift).
//!
//! # The post-write lateness remedy
//! The paper found that right after a disk write messages are slower than the m it measured, so Z
//! reached some ranks after their own `t + Z` had passed and their suspension came out longer. In the
//! faithful variant the offsets, m and d are measured before the write. [`Remedy`] offers two fixes:
//! measure them after the write (so m sees the slow network), and add a margin learnt from how late
//! ranks resumed in the previous flushing suspensions (fed back to rank 0 by one extra max-reduction
//! in flushing suspensions only).

use format::{ClockSample, SampleKind, Suspension};

use crate::clock::{ClockSync, measure_offsets_async};
use crate::config::ClockScheme;
use crate::flush::FlushReport;
use crate::transport::{AsyncTransport, Blocking, ReduceOp, Transport, TransportError, block_on};
use crate::tree::{tree_broadcast_async, tree_depth};

/// How trace offloading is coordinated (the run setting). `Profile` keeps no event trace, so the
/// protocol treats it like `Off`.
pub use crate::config::{Decision, Mode};

/// Bit of the decision word: this rank holds more than S.
pub const WANT_FLUSH: u64 = 1;
/// Bit of the decision word: this rank's protocol failed; every rank turns it off here.
pub const WANT_DISABLE: u64 = 2;
/// Rank 0's proposed stride sits in the high half of the decision word.
const STRIDE_SHIFT: u32 = 32;
/// Ping-pong tries per edge in a suspension's clock measurement, at most. Each try is two
/// dependent messages per tree level inside the pause, so on a network with millisecond message
/// times (measured on emulated nodes over TCP: about 2 ms) ten tries made a flush's pause about
/// 100 ms, three about 45 ms. Init and finalize, outside any pause, keep the full `clock_tries`.
pub const SUSPENSION_CLOCK_TRIES: usize = 3;

/// Largest stride between decision points: enough for sub-microsecond collectives at any sane
/// interval, and it fits the high half of the word.
pub const MAX_STRIDE: u64 = 1 << 24;

/// Fixes for Z arriving late right after a write. [`Remedy::FAITHFUL`] is the paper's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Remedy {
    /// Measure offsets, m and d after the write rather than before it (flushing suspensions only).
    pub measure_after_write: bool,
    /// Add to Z of a flushing suspension a margin learnt from how late Z arrived in the previous one.
    pub lateness_margin: bool,
}

impl Remedy {
    pub const FAITHFUL: Remedy = Remedy {
        measure_after_write: false,
        lateness_margin: false,
    };
}

impl Remedy {
    /// Names for a run setting: `faithful`, `after-write`, `margin`, `both`.
    pub fn from_name(name: &str) -> Option<Remedy> {
        let (measure_after_write, lateness_margin) = match name {
            "faithful" => (false, false),
            "after-write" => (true, false),
            "margin" => (false, true),
            "both" => (true, true),
            _ => return None,
        };
        Some(Remedy {
            measure_after_write,
            lateness_margin,
        })
    }
}

impl Default for Remedy {
    fn default() -> Self {
        Remedy {
            measure_after_write: true,
            lateness_margin: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub mode: Mode,
    /// Run the protocol at only every n-th eligible collective (1 = every one).
    pub every: u64,
    pub static_short_ns: u64,
    pub static_long_ns: u64,
    /// Ping-pong exchanges per rank and measurement (the one with the smallest round trip is kept).
    pub clock_tries: usize,
    pub remedy: Remedy,
    /// How clock offsets are measured (the paper's sequential ping-pong, or the scalable tree).
    pub clock_scheme: ClockScheme,
    /// Split (nonblocking) or the paper's blocking decision.
    pub decision: Decision,
    /// Split decision: the time rank 0 aims for between decision points (0: every eligible
    /// collective is one).
    pub decision_interval_ns: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Dynamic,
            every: 1,
            static_short_ns: 20_000_000,
            static_long_ns: 40_000_000_000,
            clock_tries: 3,
            remedy: Remedy::default(),
            clock_scheme: ClockScheme::Tree,
            decision: Decision::Split,
            decision_interval_ns: 100_000_000,
        }
    }
}

impl Settings {
    /// The protocol's part of the run settings (the remedy is not a run setting yet: default).
    pub fn from_config(config: &crate::config::Config) -> Self {
        Settings {
            mode: config.mode,
            every: config.suspend_every.max(1),
            static_short_ns: config.static_short.as_nanos() as u64,
            static_long_ns: config.static_long.as_nanos() as u64,
            clock_tries: config.clock_samples.max(1) as usize,
            remedy: Remedy::default(),
            clock_scheme: config.clock_scheme,
            decision: config.decision,
            decision_interval_ns: config.decision_interval.as_nanos() as u64,
        }
    }
}

/// What a rank holds in memory at a decision point, and its threshold S. S is not a setting of
/// the suspender: whoever owns it (the recorder's `back::threshold`, which `--threshold auto`
/// re-evaluates as memory changes; the simulator's configuration) passes it with every step, so
/// there is no copy to keep in step. S only shapes this rank's own vote, so ranks may differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub bytes: u64,
    pub threshold: u64,
}

impl Held {
    /// The rank asks for a flush.
    pub fn over(self) -> bool {
        self.bytes > self.threshold
    }
}

/// One finished suspension on this rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspended {
    pub record: Suspension,
    /// A new clock measurement taken during the suspension, to store in the trace.
    pub clock_sample: Option<ClockSample>,
    /// Local time this rank spent in the clock measurement of this suspension (0 without one).
    pub clock_sync_ns: u64,
}

/// The per-rank state of the protocol across suspensions.
#[derive(Clone, Debug)]
pub struct Suspender {
    settings: Settings,
    /// Eligible collectives seen so far (for `every`).
    eligible: u64,
    /// Suspensions run so far (the next `seq`).
    seq: u64,
    init_sync: Option<ClockSync>,
    /// How much later than its own `t + Z` this rank received Z in the latest flushing suspension
    /// (negative: that much early); NaN before the first. Reported to rank 0 at the next one.
    last_flush_z_lateness_ns: f64,
    /// On rank 0: margin added to Z of the latest flushing suspension.
    flush_margin_ns: f64,
    /// Split decision: eligible collectives considered so far (those `every` lets through).
    considered: u64,
    /// Split decision: the `considered` count at which the next decision point falls.
    next_decision_at: u64,
    /// Split decision: collectives between the previous decision point and the next.
    stride: u64,
    /// A decision reduction was started and not yet completed.
    decision_pending: bool,
    /// Rank 0: its clock when the previous decision interval began (sets the next stride).
    interval_began_ns: Option<u64>,
    /// A protocol step failed here: ask every rank to turn the protocol off.
    disable_requested: bool,
    /// Every rank agreed to turn the protocol off; it does nothing from here on.
    disabled: bool,
}

impl Suspender {
    pub fn new(settings: Settings) -> Self {
        Suspender {
            settings: Settings {
                every: settings.every.max(1),
                ..settings
            },
            eligible: 0,
            seq: 0,
            init_sync: None,
            last_flush_z_lateness_ns: f64::NEG_INFINITY,
            flush_margin_ns: 0.0,
            considered: 0,
            next_decision_at: 1,
            stride: 1,
            decision_pending: false,
            interval_began_ns: None,
            disable_requested: false,
            disabled: false,
        }
    }

    /// Every rank turned the protocol off together (one of them had asked for it).
    pub fn disabled(&self) -> bool {
        self.disabled
    }

    /// A protocol step failed on this rank: its next decision word asks every rank to stop.
    pub fn request_disable(&mut self) {
        self.disable_requested = true;
    }

    /// Whether the next [`Suspender::suspend`] call may do more than count: lets the caller time
    /// only the calls that can cost something (reading a clock twice at every collective would
    /// double the recorder's cost of a cheap collective).
    pub fn next_call_may_act(&self) -> bool {
        if self.disabled || matches!(self.settings.mode, Mode::Off | Mode::Profile) {
            return false;
        }
        if !(self.eligible + 1).is_multiple_of(self.settings.every) {
            return false;
        }
        match (self.settings.mode, self.settings.decision) {
            (Mode::Dynamic | Mode::Static | Mode::NoRemeasure, Decision::Split) => {
                self.considered + 1 >= self.next_decision_at
            }
            _ => true,
        }
    }

    /// How many of the next [`Suspender::suspend`] calls will only count (each would find
    /// [`Suspender::next_call_may_act`] false): the recorder lets that many collectives pass
    /// without its lock and credits them all at once with [`Suspender::pass_quietly`].
    /// `u64::MAX` when no call will ever act (mode off or profile, protocol disabled).
    pub fn quiet_calls(&self) -> u64 {
        if self.disabled || matches!(self.settings.mode, Mode::Off | Mode::Profile) {
            return u64::MAX;
        }
        let every = self.settings.every.max(1);
        // The m-th call from here that `every` lets through is the first that may act.
        let m = match (self.settings.mode, self.settings.decision) {
            (Mode::Dynamic | Mode::Static | Mode::NoRemeasure, Decision::Split) => {
                self.next_decision_at.saturating_sub(self.considered).max(1)
            }
            _ => 1,
        };
        let first = every - self.eligible % every;
        first
            .saturating_add((m - 1).saturating_mul(every))
            .saturating_sub(1)
    }

    /// Counts `n` calls of [`Suspender::suspend`] that would only have counted (at most
    /// [`Suspender::quiet_calls`]), as if each had been made.
    pub fn pass_quietly(&mut self, n: u64) {
        if self.disabled || matches!(self.settings.mode, Mode::Off | Mode::Profile) {
            return;
        }
        let every = self.settings.every.max(1);
        let before = self.eligible;
        self.eligible += n;
        if let (Mode::Dynamic | Mode::Static | Mode::NoRemeasure, Decision::Split) =
            (self.settings.mode, self.settings.decision)
        {
            self.considered += self.eligible / every - before / every;
        }
    }

    /// The stride agreed for the current decision interval (split decision).
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// Completes an outstanding decision reduction. Collective: every rank calls it before the
    /// transport goes away (at `MPI_Finalize`), so no reduction is left half-done.
    pub fn close<T: Transport + ?Sized>(
        &mut self,
        transport: &mut T,
    ) -> Result<(), TransportError> {
        block_on(self.close_async(&mut Blocking(transport)))
    }

    /// [`Suspender::close`] over any [`AsyncTransport`].
    pub async fn close_async<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
    ) -> Result<(), TransportError> {
        if std::mem::take(&mut self.decision_pending) {
            transport.decision_finish().await?;
        }
        Ok(())
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The measurement taken by [`Suspender::init`], if any.
    pub fn init_sync(&self) -> Option<&ClockSync> {
        self.init_sync.as_ref()
    }

    /// Measures the clock offsets once at start-up. Collective over all ranks in every mode but
    /// `Off`, `Profile` and `Local`, where it does nothing (call [`measure_offsets`] yourself for the trace).
    pub fn init<T: Transport + ?Sized>(
        &mut self,
        transport: &mut T,
    ) -> Result<Option<ClockSample>, TransportError> {
        block_on(self.init_async(&mut Blocking(transport)))
    }

    /// [`Suspender::init`] over any [`AsyncTransport`].
    pub async fn init_async<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
    ) -> Result<Option<ClockSample>, TransportError> {
        match self.settings.mode {
            Mode::Off | Mode::Profile | Mode::Local => Ok(None),
            Mode::Dynamic | Mode::Static | Mode::NoRemeasure => {
                let sync = measure_offsets_async(
                    transport,
                    self.settings.clock_scheme,
                    self.settings.clock_tries,
                    SampleKind::Init,
                )
                .await?;
                let sample = sync.own;
                self.init_sync = Some(sync);
                Ok(Some(sample))
            }
        }
    }

    /// Runs the protocol after a collective. `held` is what this rank holds in memory, and its S;
    /// `flush` writes it all and says how much it wrote. Returns the suspension when there was one,
    /// `None` when nothing paused this rank (mode `Off`, not a decision point, a split decision
    /// without a flush, `Local` below the threshold, or the protocol turned off).
    ///
    /// Every rank must call this at the same collectives; in `Local` mode it is not collective.
    pub fn suspend<T: Transport + ?Sized>(
        &mut self,
        transport: &mut T,
        held: Held,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Option<Suspended>, TransportError> {
        block_on(self.suspend_async(&mut Blocking(transport), held, flush))
    }

    /// [`Suspender::suspend`] over any [`AsyncTransport`] (the simulator's entry point).
    pub async fn suspend_async<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        held: Held,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Option<Suspended>, TransportError> {
        if self.disabled || matches!(self.settings.mode, Mode::Off | Mode::Profile) {
            return Ok(None);
        }
        self.eligible += 1;
        if !self.eligible.is_multiple_of(self.settings.every) {
            return Ok(None);
        }
        match (self.settings.mode, self.settings.decision) {
            (Mode::Off | Mode::Profile, _) => Ok(None),
            (Mode::Local, _) => Ok(self.local_flush(transport, held, flush).await),
            (_, Decision::Blocking) => self.blocking_decision(transport, held, flush).await,
            (_, Decision::Split) => self.split_decision(transport, held, flush).await,
        }
    }

    fn decision_word(&self, held: Held) -> u64 {
        let mut word = 0;
        if held.over() {
            word |= WANT_FLUSH;
        }
        if self.disable_requested {
            word |= WANT_DISABLE;
        }
        word
    }

    /// The paper's decision: the reduction completes at the collective that started it, and every
    /// decision point is an equalised suspension (short when nothing is flushed).
    async fn blocking_decision<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        held: Held,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Option<Suspended>, TransportError> {
        let start = transport.now();
        transport.decision_start(self.decision_word(held)).await?;
        let verdict = transport.decision_finish().await?;
        if verdict & WANT_DISABLE != 0 {
            self.disabled = true;
            return Ok(None);
        }
        let flushing = verdict & WANT_FLUSH != 0;
        self.equalised(transport, start, flushing, flush)
            .await
            .map(Some)
    }

    /// The split decision (see the module docs): complete the reduction started at the previous
    /// decision point, suspend if it says so, start the next one.
    async fn split_decision<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        held: Held,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Option<Suspended>, TransportError> {
        self.considered += 1;
        if self.considered < self.next_decision_at {
            return Ok(None);
        }
        let start = transport.now();
        let verdict = if std::mem::take(&mut self.decision_pending) {
            transport.decision_finish().await?
        } else {
            0
        };
        if verdict & WANT_DISABLE != 0 {
            self.disabled = true;
            return Ok(None);
        }
        // Rank 0 times the interval that ends here, before the verdict's stride replaces it.
        let agreed = (verdict >> STRIDE_SHIFT).clamp(1, MAX_STRIDE);
        let proposal = if transport.rank() == 0 {
            self.propose_stride(start, agreed)
        } else {
            0
        };
        self.stride = agreed;
        let suspended = if verdict & WANT_FLUSH != 0 {
            // After a failed suspension this rank still starts the next decision, so that it
            // stays in step with the others and can ask them all to stop.
            match self.equalised(transport, start, true, flush).await {
                Ok(done) => Ok(Some(done)),
                Err(e) => {
                    self.disable_requested = true;
                    Err(e)
                }
            }
        } else {
            Ok(None)
        };
        let flushed = matches!(suspended, Ok(Some(_)));
        let held = if flushed {
            Held { bytes: 0, ..held }
        } else {
            held
        };
        if transport.rank() == 0 {
            // The suspension is not part of the application's interval.
            self.interval_began_ns = Some(transport.now());
        }
        let word = self.decision_word(held) | (proposal << STRIDE_SHIFT);
        transport.decision_start(word).await?;
        self.decision_pending = true;
        self.next_decision_at = self.considered + self.stride;
        suspended
    }

    /// Rank 0's proposal for the stride after next: the current stride scaled so that decision
    /// points fall [`Settings::decision_interval_ns`] apart, growing at most twofold per decision
    /// (a burst of fast collectives must not push the next decision far into a slow phase).
    /// The stride to propose for the interval after the next one, from how long the interval
    /// that ends now took with the current stride. It takes over from `agreed` (the stride just
    /// agreed, which the next interval uses), so growth is capped against that one: capped
    /// against the current stride, a proposal could double a stride that had meanwhile shrunk.
    fn propose_stride(&mut self, now: u64, agreed: u64) -> u64 {
        let target = self.settings.decision_interval_ns;
        match self.interval_began_ns {
            Some(began) if target > 0 => {
                let elapsed = now.saturating_sub(began).max(1);
                let ideal = self.stride as f64 * target as f64 / elapsed as f64;
                (ideal as u64).clamp(1, (agreed * 2).min(MAX_STRIDE))
            }
            _ => 1,
        }
    }

    /// The equalised suspension of the run's mode, at a decision point every rank reached.
    async fn equalised<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        start: u64,
        flushing: bool,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Suspended, TransportError> {
        if self.settings.mode == Mode::Static {
            return Ok(self
                .static_suspension(transport, start, flushing, flush)
                .await);
        }
        // The paper re-measures at every suspension; the split decision only suspends to flush.
        let remeasure = self.settings.mode == Mode::Dynamic;
        self.dynamic_suspension(transport, start, flushing, remeasure, flush)
            .await
    }

    fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }

    async fn timed_flush<A: AsyncTransport>(
        transport: &mut A,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> (FlushReport, u64) {
        let before = transport.now();
        let report = transport.write_trace(flush).await;
        (report, transport.now().saturating_sub(before))
    }

    async fn local_flush<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        held: Held,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Option<Suspended> {
        if !held.over() {
            return None;
        }
        let start = transport.now();
        let (report, write_ns) = Self::timed_flush(transport, flush).await;
        let end = transport.now();
        // No equalisation: Z is 0, and the pause is simply end − start.
        Some(Suspended {
            record: Suspension {
                seq: self.next_seq(),
                start: transport.to_tick(start),
                z_ns: 0,
                end: transport.to_tick(end),
                flushed: true,
                bytes_raw: report.bytes_raw,
                bytes_stored: report.bytes_stored,
                write_ns,
                ..Suspension::default()
            },
            clock_sample: None,
            clock_sync_ns: 0,
        })
    }

    async fn static_suspension<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        start: u64,
        flushing: bool,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Suspended {
        let (report, write_ns) = if flushing {
            Self::timed_flush(transport, flush).await
        } else {
            (FlushReport::default(), 0)
        };
        let z_ns = if flushing {
            self.settings.static_long_ns
        } else {
            self.settings.static_short_ns
        };
        let deadline = start + z_ns;
        transport.wait_until(deadline).await;
        let end = transport.now();
        let (m_ns, d_ns, offset_ns) = self
            .init_sync
            .as_ref()
            .map_or((0.0, 0.0, 0.0), |s| (s.m_ns, s.d_ns, s.own.offset_ns));
        Suspended {
            record: Suspension {
                seq: self.next_seq(),
                start: transport.to_tick(start),
                z_ns,
                end: transport.to_tick(end),
                flushed: flushing,
                bytes_raw: report.bytes_raw,
                bytes_stored: report.bytes_stored,
                write_ns,
                overshoot_ns: end.saturating_sub(deadline),
                w_ns: 0,
                m_ns,
                d_ns,
                offset_ns,
            },
            clock_sample: None,
            clock_sync_ns: 0,
        }
    }

    async fn measure_now<A: AsyncTransport>(
        &self,
        transport: &mut A,
    ) -> Result<(ClockSync, u64), TransportError> {
        let before = transport.now();
        let sync = measure_offsets_async(
            transport,
            self.settings.clock_scheme,
            self.settings.clock_tries.min(SUSPENSION_CLOCK_TRIES),
            SampleKind::Suspension,
        )
        .await?;
        Ok((sync, transport.now().saturating_sub(before)))
    }

    async fn dynamic_suspension<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        start: u64,
        flushing: bool,
        remeasure: bool,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Suspended, TransportError> {
        let measure_late = flushing && self.settings.remedy.measure_after_write;

        let mut fresh = None;
        let mut clock_sync_ns = 0;
        if remeasure && !measure_late {
            let (sync, took) = self.measure_now(transport).await?;
            fresh = Some(sync);
            clock_sync_ns = took;
        }
        let (report, write_ns) = if flushing {
            Self::timed_flush(transport, flush).await
        } else {
            (FlushReport::default(), 0)
        };
        if remeasure && measure_late {
            let (sync, took) = self.measure_now(transport).await?;
            fresh = Some(sync);
            clock_sync_ns = took;
        }
        let size = transport.size();
        let rank = transport.rank();
        let sync = match (&fresh, &self.init_sync) {
            (Some(s), _) | (None, Some(s)) => s.clone(),
            (None, None) => ClockSync::unmeasured(size, rank),
        };

        if flushing && self.settings.remedy.lateness_margin {
            let worst = transport
                .reduce_f64(self.last_flush_z_lateness_ns, ReduceOp::Max)
                .await?;
            // −∞ everywhere: no rank has flushed before.
            if let Some(worst) = worst.filter(|w| w.is_finite()) {
                // The margin that would have made the latest rank just in time; it shrinks again
                // when Z arrived early everywhere.
                self.flush_margin_ns = (self.flush_margin_ns + worst).max(0.0);
            }
        }

        // Each rank sends its start already in rank 0's clock; rank 0 needs only the earliest. The
        // tree scheme's offsets compound an error over ⌈log2 P⌉ hops, so there the start moves
        // earlier by the rank's bound and w is never underestimated; the sequential scheme keeps
        // the paper's midpoint estimate.
        let bound = match self.settings.clock_scheme {
            ClockScheme::Tree => sync.error_bound_ns,
            ClockScheme::Sequential => 0.0,
        };
        let corrected_start = start as f64 + sync.own.offset_ns - bound;
        let earliest = transport.reduce_f64(corrected_start, ReduceOp::Min).await?;
        let mut w_ns = 0u64;
        let z_ns = match earliest {
            Some(earliest) => {
                w_ns = (transport.now() as f64 - earliest).max(0.0) as u64;
                let margin = if flushing && self.settings.remedy.lateness_margin {
                    self.flush_margin_ns
                } else {
                    0.0
                };
                let z = w_ns as f64 + sync.m_ns * tree_depth(size) as f64 + sync.d_ns + margin;
                z.ceil() as u64
            }
            None => 0,
        };
        let z_ns = tree_broadcast_async(transport, z_ns).await?;
        let z_received = transport.now();

        let deadline = start + z_ns;
        transport.wait_until(deadline).await;
        let end = transport.now();
        let overshoot_ns = end.saturating_sub(deadline);
        if flushing {
            self.last_flush_z_lateness_ns = z_received as f64 - deadline as f64;
        }
        Ok(Suspended {
            record: Suspension {
                seq: self.next_seq(),
                start: transport.to_tick(start),
                z_ns,
                end: transport.to_tick(end),
                flushed: flushing,
                bytes_raw: report.bytes_raw,
                bytes_stored: report.bytes_stored,
                write_ns,
                overshoot_ns,
                w_ns,
                m_ns: sync.m_ns,
                d_ns: sync.d_ns,
                offset_ns: sync.own.offset_ns,
            },
            clock_sample: fresh.map(|s| s.own),
            clock_sync_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `quiet_calls` is exactly the number of calls before the next one that may act, and
    /// `pass_quietly` over them leaves the suspender as the calls themselves would have.
    #[test]
    fn quiet_calls_pass_without_the_suspender() {
        for (mode, decision, every) in [
            (Mode::Dynamic, Decision::Split, 1),
            (Mode::Dynamic, Decision::Split, 3),
            (Mode::Static, Decision::Split, 2),
            (Mode::Dynamic, Decision::Blocking, 1),
            (Mode::Dynamic, Decision::Blocking, 4),
            (Mode::Local, Decision::Split, 2),
            (Mode::Off, Decision::Split, 1),
        ] {
            let settings = Settings {
                mode,
                decision,
                every,
                // Strides grow as fast as the protocol lets them.
                decision_interval_ns: 1 << 40,
                static_short_ns: 0,
                static_long_ns: 0,
                ..Settings::default()
            };
            crate::inproc::run(&crate::inproc::InProcConfig::new(1), |t| {
                let mut s = Suspender::new(settings);
                let mut flush = || FlushReport::default();
                for _ in 0..12 {
                    let quiet = s.quiet_calls();
                    if quiet == u64::MAX {
                        assert!(!s.next_call_may_act());
                        return;
                    }
                    let mut passed = s.clone();
                    passed.pass_quietly(quiet);
                    for _ in 0..quiet {
                        assert!(!s.next_call_may_act(), "{mode:?} {decision:?} {every}");
                        assert!(s.suspend(t, Held::default(), &mut flush).unwrap().is_none());
                    }
                    assert_eq!(
                        (passed.eligible, passed.considered),
                        (s.eligible, s.considered),
                        "{mode:?} {decision:?} {every}"
                    );
                    assert!(s.next_call_may_act(), "{mode:?} {decision:?} {every}");
                    let _ = s.suspend(t, Held::default(), &mut flush).unwrap();
                }
            });
        }
    }
}
