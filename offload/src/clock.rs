//! Clock offsets to rank 0 by ping-pong (paper, section on clock offsets), with the paper's sequential
//! scheme described here and a scalable tree scheme ([`ClockScheme::Tree`]).
//!
//! Rank 0 exchanges `tries` ping-pongs with every other rank in turn. For one exchange, rank 0 sends
//! at u1 (its clock), rank i receives and answers at u2 (rank i's clock), rank 0 receives at u3; taking
//! the midpoint of u1 and u3 as simultaneous with u2 gives the offset `C_i = (u1 + u3)/2 − u2` (rank
//! 0's clock minus rank i's), wrong by at most half the round trip. The exchange with the smallest
//! round trip is kept.
//!
//! m and d follow the paper: with the kept offsets, every message of the measurement gets a one-way
//! time (forward `u2 + C_i − u1`, backward `u3 − u2 − C_i`); m is their mean and d the largest
//! deviation of one of them from m.

use format::{ClockSample, SampleKind};

use crate::config::ClockScheme;
use crate::protocol_tags::{
    CLOCK_BOUND, CLOCK_M_D, CLOCK_OFFSET, CLOCK_PING, CLOCK_PONG, CLOCK_RTT_INDEX,
};
use crate::transport::{AsyncTransport, Blocking, Transport, TransportError, block_on};
use crate::tree::{tree_children, tree_parent};

/// The result of one measurement, as known on one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockSync {
    /// This rank's sample (rank 0's is offset 0, round trip 0).
    pub own: ClockSample,
    /// Every rank's offset to rank 0 in ns (rank 0's clock minus theirs), in rank order. Filled on
    /// rank 0 only, and only by [`ClockScheme::Sequential`]; other ranks know their own offset
    /// through `own`.
    pub offsets_ns: Vec<f64>,
    /// Every rank's kept sample, on rank 0 only (`local` is in that rank's clock).
    pub samples: Vec<ClockSample>,
    /// Mean one-way message time of the measurement, ns.
    pub m_ns: f64,
    /// Largest deviation of a message time from `m_ns`, ns.
    pub d_ns: f64,
    /// Bound on the error of `own.offset_ns`: half the kept round trip (sequential), the sum of
    /// those on the path to rank 0 (tree).
    pub error_bound_ns: f64,
}

impl ClockSync {
    /// The state before any measurement: all clocks assumed equal, no message-time knowledge.
    pub fn unmeasured(size: usize, rank: usize) -> Self {
        Self {
            own: ClockSample::default(),
            offsets_ns: if rank == 0 {
                vec![0.0; size]
            } else {
                Vec::new()
            },
            samples: Vec::new(),
            m_ns: 0.0,
            d_ns: 0.0,
            error_bound_ns: 0.0,
        }
    }
}

fn pack_f32_pair(a: f64, b: f64) -> u64 {
    ((a as f32).to_bits() as u64) << 32 | (b as f32).to_bits() as u64
}

fn unpack_f32_pair(v: u64) -> (f64, f64) {
    (
        f32::from_bits((v >> 32) as u32) as f64,
        f32::from_bits(v as u32) as f64,
    )
}

fn pack_rtt_index(rtt_ns: f64, kept: usize) -> u64 {
    ((rtt_ns as f32).to_bits() as u64) << 32 | kept as u64
}

fn unpack_rtt_index(v: u64, tries: usize) -> (f64, usize) {
    (
        f32::from_bits((v >> 32) as u32) as f64,
        (v as u32 as usize).min(tries - 1),
    )
}

/// Measures every rank's clock offset to rank 0 with the paper's sequential scheme. Collective:
/// every rank must call it, with the same `tries` (at least 1).
pub fn measure_offsets<T: Transport + ?Sized>(
    transport: &mut T,
    tries: usize,
    when: SampleKind,
) -> Result<ClockSync, TransportError> {
    measure_offsets_blocking(transport, ClockScheme::Sequential, tries, when)
}

/// [`measure_offsets_async`] over a blocking [`Transport`].
pub fn measure_offsets_blocking<T: Transport + ?Sized>(
    transport: &mut T,
    scheme: ClockScheme,
    tries: usize,
    when: SampleKind,
) -> Result<ClockSync, TransportError> {
    block_on(measure_offsets_async(
        &mut Blocking(transport),
        scheme,
        tries,
        when,
    ))
}

/// [`measure_offsets`] with a choice of scheme, over any [`AsyncTransport`]. Collective: every rank
/// must call it with the same `scheme` and `tries`.
pub async fn measure_offsets_async<A: AsyncTransport>(
    transport: &mut A,
    scheme: ClockScheme,
    tries: usize,
    when: SampleKind,
) -> Result<ClockSync, TransportError> {
    let tries = tries.max(1);
    match scheme {
        ClockScheme::Sequential if transport.rank() == 0 => {
            measure_as_root(transport, tries, when).await
        }
        ClockScheme::Sequential => {
            let answered_at = answer_pings(transport, 0, tries).await?;
            let offset_ns = transport.recv_f64(0, CLOCK_OFFSET).await?;
            let rtt_index = transport.recv_u64(0, CLOCK_RTT_INDEX).await?;
            let (m_ns, d_ns) = unpack_f32_pair(transport.recv_u64(0, CLOCK_M_D).await?);
            let (rtt_ns, kept) = unpack_rtt_index(rtt_index, tries);
            let own = ClockSample {
                local: transport.to_tick(answered_at[kept]),
                offset_ns,
                rtt_ns,
                when,
            };
            Ok(ClockSync {
                own,
                offsets_ns: Vec::new(),
                samples: Vec::new(),
                m_ns,
                d_ns,
                error_bound_ns: rtt_ns / 2.0,
            })
        }
        ClockScheme::Tree => measure_tree(transport, tries, when).await,
    }
}

/// The peer's side of `tries` ping-pongs: answers each ping with its local time.
async fn answer_pings<A: AsyncTransport>(
    transport: &mut A,
    from: usize,
    tries: usize,
) -> Result<Vec<u64>, TransportError> {
    let mut answered_at = Vec::with_capacity(tries);
    for _ in 0..tries {
        transport.recv_u64(from, CLOCK_PING).await?;
        let u2 = transport.now();
        transport.send_u64(from, CLOCK_PONG, u2).await?;
        answered_at.push(u2);
    }
    Ok(answered_at)
}

struct Exchange {
    sent: u64,
    answered: u64,
    received: u64,
}

impl Exchange {
    fn rtt(&self) -> u64 {
        self.received.saturating_sub(self.sent)
    }
    fn offset(&self) -> f64 {
        (self.sent as f64 + self.received as f64) / 2.0 - self.answered as f64
    }
}

/// The measuring side of `tries` ping-pongs with `peer`. Returns the kept exchange's index, its
/// offset (our clock minus the peer's) and round trip, and appends every message's one-way time
/// (as seen with the kept offset) to `message_times`.
async fn ping_pong<A: AsyncTransport>(
    transport: &mut A,
    peer: usize,
    tries: usize,
    message_times: &mut Vec<f64>,
) -> Result<(usize, f64, Exchange), TransportError> {
    let mut exchanges = Vec::with_capacity(tries);
    for _ in 0..tries {
        let sent = transport.now();
        transport.send_u64(peer, CLOCK_PING, sent).await?;
        let answered = transport.recv_u64(peer, CLOCK_PONG).await?;
        let received = transport.now();
        exchanges.push(Exchange {
            sent,
            answered,
            received,
        });
    }
    let best = exchanges
        .iter()
        .enumerate()
        .min_by_key(|(_, e)| e.rtt())
        .map(|(i, _)| i)
        .expect("at least one try");
    let offset = exchanges[best].offset();
    for e in &exchanges {
        let answered_in_our_clock = e.answered as f64 + offset;
        message_times.push((answered_in_our_clock - e.sent as f64).max(0.0));
        message_times.push((e.received as f64 - answered_in_our_clock).max(0.0));
    }
    let kept = exchanges.swap_remove(best);
    Ok((best, offset, kept))
}

async fn measure_as_root<A: AsyncTransport>(
    transport: &mut A,
    tries: usize,
    when: SampleKind,
) -> Result<ClockSync, TransportError> {
    let size = transport.size();
    let now0 = transport.now();
    let mut samples = vec![
        ClockSample {
            local: transport.to_tick(now0),
            offset_ns: 0.0,
            rtt_ns: 0.0,
            when,
        };
        size
    ];
    let mut offsets_ns = vec![0.0; size];
    let mut kept_index = vec![0usize; size];
    let mut message_times = Vec::with_capacity(2 * tries * size.saturating_sub(1));
    for peer in 1..size {
        let (best, offset, kept) = ping_pong(transport, peer, tries, &mut message_times).await?;
        offsets_ns[peer] = offset;
        kept_index[peer] = best;
        samples[peer] = ClockSample {
            local: kept.answered,
            offset_ns: offset,
            rtt_ns: kept.rtt() as f64,
            when,
        };
    }
    let (m_ns, d_ns) = mean_and_max_deviation(&message_times);
    for peer in 1..size {
        transport
            .send_f64(peer, CLOCK_OFFSET, offsets_ns[peer])
            .await?;
        let rtt_index = pack_rtt_index(samples[peer].rtt_ns, kept_index[peer]);
        transport.send_u64(peer, CLOCK_RTT_INDEX, rtt_index).await?;
        transport
            .send_u64(peer, CLOCK_M_D, pack_f32_pair(m_ns, d_ns))
            .await?;
    }
    // Samples of other ranks carry their local time as a raw reading of their clock; only the
    // owning rank can turn it into its tick, so the root keeps what it saw.
    Ok(ClockSync {
        own: samples[0],
        offsets_ns,
        samples,
        m_ns,
        d_ns,
        error_bound_ns: 0.0,
    })
}

/// [`ClockScheme::Tree`]. Order on every rank: answer the parent's pings, measure the children
/// (largest subtree first, so the measurement spreads like a broadcast), then receive the own
/// offset, bound and m, d from the parent and hand the composed values to the children.
async fn measure_tree<A: AsyncTransport>(
    transport: &mut A,
    tries: usize,
    when: SampleKind,
) -> Result<ClockSync, TransportError> {
    let rank = transport.rank();
    let size = transport.size();
    let parent = tree_parent(rank);
    let answered_at = match parent {
        Some(parent) => answer_pings(transport, parent, tries).await?,
        None => Vec::new(),
    };
    let children = tree_children(rank, size);
    let mut edges = Vec::with_capacity(children.len());
    let mut message_times = Vec::with_capacity(2 * tries * children.len());
    for &child in &children {
        let (best, offset, kept) = ping_pong(transport, child, tries, &mut message_times).await?;
        edges.push((best, offset, kept.rtt() as f64));
    }
    let (own, error_bound_ns, m_ns, d_ns) = match parent {
        None => {
            let (m_ns, d_ns) = mean_and_max_deviation(&message_times);
            let now = transport.now();
            let own = ClockSample {
                local: transport.to_tick(now),
                offset_ns: 0.0,
                rtt_ns: 0.0,
                when,
            };
            (own, 0.0, m_ns, d_ns)
        }
        Some(parent) => {
            let offset_ns = transport.recv_f64(parent, CLOCK_OFFSET).await?;
            let bound = transport.recv_f64(parent, CLOCK_BOUND).await?;
            let rtt_index = transport.recv_u64(parent, CLOCK_RTT_INDEX).await?;
            let (m_ns, d_ns) = unpack_f32_pair(transport.recv_u64(parent, CLOCK_M_D).await?);
            let (rtt_ns, kept) = unpack_rtt_index(rtt_index, tries);
            let own = ClockSample {
                local: transport.to_tick(answered_at[kept]),
                offset_ns,
                rtt_ns,
                when,
            };
            (own, bound, m_ns, d_ns)
        }
    };
    for (&child, &(best, edge_offset, rtt)) in children.iter().zip(&edges) {
        // Offsets add along the path: (root − us) + (us − child) = root − child.
        transport
            .send_f64(child, CLOCK_OFFSET, own.offset_ns + edge_offset)
            .await?;
        transport
            .send_f64(child, CLOCK_BOUND, error_bound_ns + rtt / 2.0)
            .await?;
        transport
            .send_u64(child, CLOCK_RTT_INDEX, pack_rtt_index(rtt, best))
            .await?;
        transport
            .send_u64(child, CLOCK_M_D, pack_f32_pair(m_ns, d_ns))
            .await?;
    }
    Ok(ClockSync {
        own,
        offsets_ns: Vec::new(),
        samples: Vec::new(),
        m_ns,
        d_ns,
        error_bound_ns,
    })
}

/// Mean of `times` and the largest absolute deviation of one of them from it; (0, 0) when empty.
pub fn mean_and_max_deviation(times: &[f64]) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let deviation = times.iter().map(|t| (t - mean).abs()).fold(0.0, f64::max);
    (mean, deviation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_packing_round_trips_within_f32_precision() {
        let (a, b) = unpack_f32_pair(pack_f32_pair(12_345.5, 0.25));
        assert_eq!(a, 12_345.5);
        assert_eq!(b, 0.25);
    }

    #[test]
    fn deviation_is_the_largest_distance_from_the_mean() {
        let (m, d) = mean_and_max_deviation(&[1.0, 2.0, 6.0]);
        assert_eq!(m, 3.0);
        assert_eq!(d, 3.0);
        assert_eq!(mean_and_max_deviation(&[]), (0.0, 0.0));
    }
}
