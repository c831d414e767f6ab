//! The equalised suspension (paper Fig. 3 and Fig. 5), one implementation for every transport.
//!
//! Called on every rank right after a blocking collective over all ranks:
//! ```text
//! t := now; f := buffer_bytes > S; σ := OR-allreduce(f)
//! if σ: flush                                  (every rank writes its trace)
//! offsets, m, d := ping-pong (dynamic) | those measured at init (noremeasure)
//! gather t to rank 0; there t_i += C_i; w := now − min t_i; Z := w + m·⌈log2 P⌉ + d
//! broadcast Z from rank 0 over a binomial tree of point-to-point messages
//! wait until t + Z (sleep, then spin); overshoot := how far past t + Z we resumed
//! ```
//! `⌈log2 P⌉` is the depth of the binomial tree, which is what the broadcast term stands for.
//!
//! With [`Settings::clock_scheme`] = [`ClockScheme::Tree`] the offsets are measured along that same
//! tree (O(log P) instead of O(P) at rank 0), each rank corrects its own start into rank 0's clock,
//! moved earlier by its accumulated error bound, and rank 0 takes the minimum of what it gathers.
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
//! # The post-write lateness remedy
//! The paper found that right after a disk write messages are slower than the m it measured, so Z
//! reached some ranks after their own `t + Z` had passed and their suspension came out longer. In the
//! faithful variant the offsets, m and d are measured before the write. [`Remedy`] offers two fixes:
//! measure them after the write (so m sees the slow network), and add a margin learnt from how late
//! ranks resumed in the previous flushing suspensions (fed back to rank 0 by one extra gather in
//! flushing suspensions only).

use format::{ClockSample, SampleKind, Suspension};

use crate::clock::{ClockScheme, ClockSync, measure_offsets_async};
use crate::protocol_tags::SUSPENSION_Z;
use crate::transport::{AsyncTransport, Blocking, Transport, TransportError, block_on};

/// How trace offloading is coordinated (the run setting). `Profile` keeps no event trace, so the
/// protocol treats it like `Off`.
pub use crate::config::Mode;

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
    /// Buffer size S in bytes above which a rank asks for a flush.
    pub threshold_bytes: u64,
    /// Run the protocol at only every n-th eligible collective (1 = every one).
    pub every: u64,
    pub static_short_ns: u64,
    pub static_long_ns: u64,
    /// Ping-pong exchanges per rank and measurement (the one with the smallest round trip is kept).
    pub clock_tries: usize,
    pub remedy: Remedy,
    /// How clock offsets are measured (the paper's sequential ping-pong, or the scalable tree).
    pub clock_scheme: ClockScheme,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Dynamic,
            threshold_bytes: 64 << 20,
            every: 1,
            static_short_ns: 20_000_000,
            static_long_ns: 40_000_000_000,
            clock_tries: 3,
            remedy: Remedy::default(),
            clock_scheme: ClockScheme::Sequential,
        }
    }
}

impl Settings {
    /// The protocol's part of the run settings (the remedy is not a run setting yet: default).
    pub fn from_config(config: &crate::config::Config) -> Self {
        Settings {
            mode: config.mode,
            threshold_bytes: config.threshold,
            every: config.suspend_every.max(1),
            static_short_ns: config.static_short.as_nanos() as u64,
            static_long_ns: config.static_long.as_nanos() as u64,
            clock_tries: config.clock_samples.max(1) as usize,
            remedy: Remedy::default(),
            clock_scheme: config.clock_scheme,
        }
    }
}

/// What the caller's flush wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    pub bytes_raw: u64,
    pub bytes_stored: u64,
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
}

fn tree_depth(size: usize) -> u32 {
    if size <= 1 {
        0
    } else {
        usize::BITS - (size - 1).leading_zeros()
    }
}

fn highest_bit(rank: usize) -> usize {
    if rank == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - rank.leading_zeros())
    }
}

/// `rank`'s parent in the binomial tree rooted at rank 0 (`None` for the root).
pub(crate) fn tree_parent(rank: usize) -> Option<usize> {
    (rank != 0).then(|| rank - highest_bit(rank))
}

/// `rank`'s children in the binomial tree of `size` ranks, largest subtree first. Child
/// `rank + b` (for powers of two `b` above `rank`'s highest bit) roots the ranks that share its
/// low bits, so the smallest `b` has the largest subtree.
pub(crate) fn tree_children(rank: usize, size: usize) -> Vec<usize> {
    let mut bit = if rank == 0 { 1 } else { highest_bit(rank) << 1 };
    let mut children = Vec::new();
    while bit != 0 {
        match rank.checked_add(bit) {
            Some(child) if child < size => children.push(child),
            _ => break,
        }
        bit = bit.checked_shl(1).unwrap_or(0);
    }
    children
}

/// Binomial-tree broadcast of one value from rank 0; every rank returns it. The root sends to the
/// child with the largest subtree first, so the tree is ⌈log2 P⌉ messages deep.
pub fn tree_broadcast<T: Transport + ?Sized>(
    transport: &mut T,
    value: u64,
) -> Result<u64, TransportError> {
    block_on(tree_broadcast_async(&mut Blocking(transport), value))
}

/// [`tree_broadcast`] over any [`AsyncTransport`].
pub async fn tree_broadcast_async<A: AsyncTransport>(
    transport: &mut A,
    value: u64,
) -> Result<u64, TransportError> {
    let rank = transport.rank();
    let value = match tree_parent(rank) {
        None => value,
        Some(parent) => transport.recv_u64(parent, SUSPENSION_Z).await?,
    };
    for child in tree_children(rank, transport.size()) {
        transport.send_u64(child, SUSPENSION_Z, value).await?;
    }
    Ok(value)
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
            last_flush_z_lateness_ns: f64::NAN,
            flush_margin_ns: 0.0,
        }
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

    /// Runs one suspension after a collective, if this one is due. `buffer_bytes` is what this rank
    /// holds in memory; `flush` writes it all and says how much it wrote. Returns `None` when nothing
    /// happened (mode `Off`, not the n-th collective, or `Local` below the threshold).
    ///
    /// Every rank must call this at the same collectives; in `Local` mode it is not collective.
    pub fn suspend<T: Transport + ?Sized>(
        &mut self,
        transport: &mut T,
        buffer_bytes: u64,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Option<Suspended>, TransportError> {
        block_on(self.suspend_async(&mut Blocking(transport), buffer_bytes, flush))
    }

    /// [`Suspender::suspend`] over any [`AsyncTransport`] (the simulator's entry point).
    pub async fn suspend_async<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        buffer_bytes: u64,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Option<Suspended>, TransportError> {
        if matches!(self.settings.mode, Mode::Off | Mode::Profile) {
            return Ok(None);
        }
        self.eligible += 1;
        if !self.eligible.is_multiple_of(self.settings.every) {
            return Ok(None);
        }
        match self.settings.mode {
            Mode::Off | Mode::Profile => Ok(None),
            Mode::Local => Ok(self.local_flush(transport, buffer_bytes, flush).await),
            Mode::Static => self
                .static_suspension(transport, buffer_bytes, flush)
                .await
                .map(Some),
            Mode::Dynamic | Mode::NoRemeasure => self
                .dynamic_suspension(transport, buffer_bytes, flush)
                .await
                .map(Some),
        }
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
        buffer_bytes: u64,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Option<Suspended> {
        if buffer_bytes <= self.settings.threshold_bytes {
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
        buffer_bytes: u64,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Suspended, TransportError> {
        let start = transport.now();
        let flushing = transport
            .allreduce_or(buffer_bytes > self.settings.threshold_bytes)
            .await?;
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
                overshoot_ns: end.saturating_sub(deadline),
                w_ns: 0,
                m_ns,
                d_ns,
                offset_ns,
            },
            clock_sample: None,
            clock_sync_ns: 0,
        })
    }

    async fn measure_now<A: AsyncTransport>(
        &self,
        transport: &mut A,
    ) -> Result<(ClockSync, u64), TransportError> {
        let before = transport.now();
        let sync = measure_offsets_async(
            transport,
            self.settings.clock_scheme,
            self.settings.clock_tries,
            SampleKind::Suspension,
        )
        .await?;
        Ok((sync, transport.now().saturating_sub(before)))
    }

    async fn dynamic_suspension<A: AsyncTransport>(
        &mut self,
        transport: &mut A,
        buffer_bytes: u64,
        flush: &mut dyn FnMut() -> FlushReport,
    ) -> Result<Suspended, TransportError> {
        let start = transport.now();
        let flushing = transport
            .allreduce_or(buffer_bytes > self.settings.threshold_bytes)
            .await?;
        let remeasure = self.settings.mode == Mode::Dynamic;
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
            let lateness = transport.gather_f64(self.last_flush_z_lateness_ns).await?;
            if let Some(lateness) = lateness {
                // f64::max skips the NaN of ranks (or runs) without an earlier flush.
                let worst = lateness.into_iter().fold(f64::NAN, f64::max);
                if !worst.is_nan() {
                    // The margin that would have made the latest rank just in time; it shrinks again
                    // when Z arrived early everywhere.
                    self.flush_margin_ns = (self.flush_margin_ns + worst).max(0.0);
                }
            }
        }

        // The paper's scheme corrects the starts at rank 0, which knows every offset; with the tree
        // scheme only each rank knows its own, so it sends its start already in rank 0's clock,
        // moved earlier by its error bound so that w is never underestimated.
        let root_corrects = self.settings.clock_scheme == ClockScheme::Sequential;
        let sent_start = if root_corrects {
            start as f64
        } else {
            start as f64 + sync.own.offset_ns - sync.error_bound_ns
        };
        let starts = transport.gather_f64(sent_start).await?;
        let mut w_ns = 0u64;
        let z_ns = match starts {
            Some(starts) => {
                let earliest = if root_corrects {
                    starts
                        .iter()
                        .zip(&sync.offsets_ns)
                        .map(|(t, c)| t + c)
                        .fold(f64::INFINITY, f64::min)
                } else {
                    starts.iter().copied().fold(f64::INFINITY, f64::min)
                };
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

    #[test]
    fn tree_depth_is_ceil_log2() {
        let depths: Vec<u32> = [1, 2, 3, 4, 5, 8, 9, 16, 17]
            .iter()
            .map(|&p| tree_depth(p))
            .collect();
        assert_eq!(depths, vec![0, 1, 2, 2, 3, 3, 4, 4, 5]);
    }

    #[test]
    fn children_come_largest_subtree_first_and_parents_match() {
        fn subtree(rank: usize, size: usize) -> usize {
            1 + tree_children(rank, size)
                .into_iter()
                .map(|c| subtree(c, size))
                .sum::<usize>()
        }
        for size in 1..70usize {
            assert_eq!(subtree(0, size), size, "every rank is reached once");
            for rank in 0..size {
                let children = tree_children(rank, size);
                for &child in &children {
                    assert_eq!(tree_parent(child), Some(rank));
                }
                let sizes: Vec<usize> = children.iter().map(|&c| subtree(c, size)).collect();
                assert!(
                    sizes.windows(2).all(|w| w[0] >= w[1]),
                    "size {size} rank {rank}: {sizes:?}"
                );
            }
        }
    }

    #[test]
    fn every_rank_but_root_has_exactly_one_parent_within_depth() {
        for size in 1..40usize {
            for rank in 1..size {
                // Walk up to the root; the number of hops is the rank's depth in the tree.
                let mut hops = 0;
                let mut r = rank;
                while r != 0 {
                    r -= highest_bit(r);
                    hops += 1;
                }
                assert!(hops <= tree_depth(size), "size {size} rank {rank}");
            }
        }
    }
}
