//! The threshold S at which a rank asks for a flush: the size the user gave, or with
//! `--threshold auto` one sized from the memory the node (or the job's memory cgroup) has free.
//!
//! Auto: S = [`AUTO_SHARE`] × (free memory / ranks on the node + what this rank's recorder holds
//! now), clamped to [[`AUTO_MIN`], half of `--limit`] (so that the buffers' growth past S before
//! their flush stays below the hard limit, which would compress them in memory at a cost). The free memory excludes what the recorders hold,
//! so their holding is added back (each rank counts its own, assuming its neighbours hold about
//! as much). The other three quarters stay for the program's growth (at `MPI_Init` most programs
//! have not allocated yet), the buffers' growth between the decision that asks for a flush and
//! the suspension that makes it (up to two decision intervals, several MiB at high record rates),
//! and the flush's own working memory. Half was not enough: in the swap-versus-offload harness
//! (512 MiB cgroup, a program of 290 MiB, 50 MB/s of records per rank) the buffers reached the
//! limit before their flush and the job swapped. S is re-evaluated at every decision point (at
//! most every 50 ms) and memory sample, so it follows the program's own allocations.

use std::sync::atomic::{AtomicU64, Ordering};

use format::{ThresholdBasis, ThresholdChoice};

use crate::back::node::{NodeMemory, NodePlace};

/// The part of the free memory per rank that auto gives the recorder.
pub const AUTO_SHARE: f64 = 0.25;
/// Auto never goes below this: smaller flushes only add suspensions.
pub const AUTO_MIN: u64 = 4 << 20;
/// A re-evaluated S replaces the current one only when it differs by more than this fraction
/// (samples fluctuate; every change is a record).
const CHANGE: f64 = 0.1;

static CURRENT: AtomicU64 = AtomicU64::new(64 << 20);
/// The S of the last `Threshold` record.
static RECORDED: AtomicU64 = AtomicU64::new(0);

/// S in bytes, as of now.
#[inline]
pub fn current() -> u64 {
    CURRENT.load(Ordering::Relaxed)
}

/// Whether `bytes` of buffered events pass S: the rank wants a flush (mode `local` flushes at
/// once).
#[inline]
pub fn exceeded(bytes: u64) -> bool {
    bytes > current()
}

/// Auto's S for `available` bytes free (`None`: unknown, the fallback applies) shared by
/// `ranks_on_node`, with the recorder holding `held` bytes now; never above half of `limit`.
pub fn auto_size(
    available: Option<u64>,
    ranks_on_node: u32,
    held: u64,
    limit: u64,
    fallback: u64,
) -> u64 {
    match available {
        None => fallback.min(limit),
        Some(free) => {
            let per_rank = free / u64::from(ranks_on_node.max(1)) + held;
            ((per_rank as f64 * AUTO_SHARE) as u64)
                .max(AUTO_MIN)
                .min(limit / 2)
        }
    }
}

/// Sets S at start-up and says how it was chosen.
pub fn choose(
    now: u64,
    config: &offload::config::Config,
    node: &NodeMemory,
    place: NodePlace,
) -> ThresholdChoice {
    let choice = if config.threshold_auto {
        let (available, basis) = node.available();
        ThresholdChoice {
            time: now,
            bytes: auto_size(
                available,
                place.local_size,
                0,
                config.limit,
                config.threshold,
            ),
            basis,
            available: available.unwrap_or(0),
            ranks_on_node: place.local_size,
        }
    } else {
        ThresholdChoice {
            time: now,
            bytes: config.threshold,
            basis: ThresholdBasis::Fixed,
            available: 0,
            ranks_on_node: place.local_size,
        }
    };
    set_current(choice.bytes);
    RECORDED.store(choice.bytes, Ordering::Relaxed);
    choice
}

/// S in use from now on; the block pool keeps what a buffer of that size holds between flushes.
fn set_current(bytes: u64) {
    CURRENT.store(bytes, Ordering::Relaxed);
    crate::alloc::size_for_threshold(bytes);
}

/// Auto: S again from new figures; the new choice when it moved enough from the last recorded
/// one to be worth a record (it takes effect either way).
pub fn reevaluate(
    now: u64,
    config: &offload::config::Config,
    node: &NodeMemory,
    place: NodePlace,
    held: u64,
) -> Option<ThresholdChoice> {
    if !config.threshold_auto {
        return None;
    }
    let (available, basis) = node.available();
    // A rank that does not read the node's figures keeps the S it has.
    let available = available?;
    let bytes = auto_size(
        Some(available),
        place.local_size,
        held,
        config.limit,
        config.threshold,
    );
    set_current(bytes);
    let recorded = RECORDED.load(Ordering::Relaxed);
    if (bytes as f64 - recorded as f64).abs() <= CHANGE * recorded as f64 {
        return None;
    }
    RECORDED.store(bytes, Ordering::Relaxed);
    Some(ThresholdChoice {
        time: now,
        bytes,
        basis,
        available,
        ranks_on_node: place.local_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn auto_gives_a_quarter_of_the_free_memory_per_rank_within_the_bounds() {
        // 512 MiB free, 4 ranks: a quarter of 128 MiB each.
        let limit = 1 << 30;
        assert_eq!(auto_size(Some(512 * MIB), 4, 0, limit, 64 * MIB), 32 * MIB);
        // What the recorder already holds counts as its own.
        assert_eq!(
            auto_size(Some(512 * MIB), 4, 32 * MIB, limit, 64 * MIB),
            40 * MIB
        );
        // Bounded by half the hard limit, and from below.
        assert_eq!(auto_size(Some(64 << 30), 1, 0, limit, 64 * MIB), 512 * MIB);
        assert_eq!(auto_size(Some(MIB), 8, 0, limit, 64 * MIB), AUTO_MIN);
        // Nothing readable: the fallback, still within the limit.
        assert_eq!(auto_size(None, 8, 0, 32 * MIB, 64 * MIB), 32 * MIB);
    }
}
