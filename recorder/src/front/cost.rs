//! What the recorder charges each event for its own time (the front end's cost accounting).
//!
//! Cost accounting (the direct perturbation `cost` of each call record): the C wrapper reads the
//! clock right before (t0) and right after (t1) the PMPI call; everything the wrapper does after
//! t1 (communicator lookup, type size, request bookkeeping, storing the record, and for a
//! blocking collective the protocol's hook) plus one clock read is its cost. Reading the clock a
//! third time for every event would itself cost several ns, so:
//! - fast path, sampled per function: every [`SAMPLE_EVERY`]-th call of each function on a
//!   thread, and its first [`WARMUP_SAMPLES`] calls, are sampled: the wrapper reads the clock once its
//!   work for the call is done (t2, [`sample_end`]; after the collective hook, before completion
//!   processing, which is measured on its own), and `t2 - t1 + one clock read` updates that
//!   function's estimate on this thread (the fastest warm-up sample, then a moving average;
//!   samples above [`OUTLIER_NS`] are preemptions or page faults, not the recorder, and are
//!   dropped; others are clipped to 4x the estimate). Every call is charged its function's estimate: a barrier's hook, an `Isend`'s
//!   request table and a `Comm_rank`'s bare append each cost what they cost, where one estimate
//!   for all calls charged each kind the mix's average. A decision point of the protocol is not
//!   sampled (it is measured and charged on its own);
//! - slow paths, exact: when storing the record allocated a new block, the hard limit forced a
//!   local flush, or a Wait/Test/receive produced completions (processed after the call's record
//!   was stored), the whole extra time is measured and charged to the thread's next event (that
//!   time passes between this event's end and the next one's start, so that is where it perturbs).
//!   Slow-path measurements are wall time, so a preemption that hits one is included;
//! - user records and regions (`evenflush_record`, `evenflush_region_*`) have no cost field: their
//!   whole time in the recorder is charged the same way to the thread's next call.
//!
//! The clock read cost is measured at init: a run of reads timed by the clock itself, per read
//! ([`crate::clock::read_cost_ticks`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock;
use crate::front::buffers;

/// One call of each function in this many takes a third clock read to measure the recorder's cost.
pub const SAMPLE_EVERY: u16 = 32;
/// The first calls of each function on a thread are all sampled, so its estimate settles quickly.
pub const WARMUP_SAMPLES: u16 = 8;
/// A fast-path sample longer than this is an interruption, not recorder work.
pub const OUTLIER_NS: f64 = 20_000.0;

static READ_COST: AtomicU64 = AtomicU64::new(0);
static OUTLIER_TICKS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Arms the cost accounting for a session: the cost of one clock read, and the bound past which
/// a fast-path sample is an interruption.
pub fn arm(read_cost: u64, ticks_per_sec: f64) {
    READ_COST.store(read_cost, Ordering::Relaxed);
    OUTLIER_TICKS.store(
        (OUTLIER_NS * 1e-9 * ticks_per_sec) as u64,
        Ordering::Relaxed,
    );
}

/// The cost of one clock read, in ticks (measured at init).
#[inline(always)]
pub(crate) fn read_cost() -> u64 {
    READ_COST.load(Ordering::Relaxed)
}

fn clip_u32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

/// What one call is charged: the estimate for its function, never less than one clock read,
/// plus the measured slow-path time carried over to it.
///
/// The floor holds for every call, because by definition (module doc) a call's cost includes the
/// clock read that closes its record. In practice it only acts before a sample has set the
/// estimate: every sample includes that read, so a settled estimate is never below it; but the
/// warm-up samples can all be interrupted and dropped, and a call charged 0 then would claim the
/// recorder cost nothing (a fresh-clone CI run caught exactly that).
#[inline]
pub(crate) fn charged_cost(estimate: u64, read_cost: u64, carry: u64) -> u32 {
    clip_u32(estimate.max(read_cost).saturating_add(carry))
}

/// The cost estimate charged to a call of `func`, and whether this call is sampled: every
/// [`SAMPLE_EVERY`]-th call of each function on the thread, and every call of a function in its
/// first [`WARMUP_SAMPLES`] samples.
#[inline(always)]
pub(crate) fn estimate_and_sampling(
    l: &mut buffers::Local,
    func: format::FunctionId,
) -> (u64, bool) {
    let Some(f) = l.cost.get_mut(usize::from(func)) else {
        return (u64::from(l.cost_any), false);
    };
    let estimate = if f.estimate == 0 {
        l.cost_any
    } else {
        f.estimate
    };
    if f.countdown == 0 {
        f.countdown = if f.samples < WARMUP_SAMPLES {
            0
        } else {
            SAMPLE_EVERY - 1
        };
        return (u64::from(estimate), true);
    }
    f.countdown -= 1;
    (u64::from(estimate), false)
}

/// Storing the record allocated a block: the whole time since the call ended is measured, and
/// what exceeds the estimate already charged goes to the next event.
#[cold]
#[inline(never)]
pub(crate) fn charge_growth(l: &mut buffers::Local, call_end: u64, estimate: u64, read_cost: u64) {
    let measured = clock::now().wrapping_sub(call_end).wrapping_add(read_cost);
    l.cost_carry += measured.saturating_sub(estimate.max(read_cost));
}

/// Ends the cost sample of a call of `func` that ended at tick `call_end` (the C wrapper calls
/// it when its work for a sampled call is done): `now - call_end + one clock read` is what the
/// recorder added to this call after `PMPI_*` returned, including the read that opened the
/// call's record. It updates the function's estimate (a moving average; samples above
/// [`OUTLIER_NS`] are preemptions or page faults, not the recorder, and are dropped; others are
/// clipped to 4x the estimate).
pub fn sample_end(tb: &buffers::ThreadBuf, func: format::FunctionId, call_end: u64) {
    let now = clock::now();
    let read_cost = READ_COST.load(Ordering::Relaxed);
    let measured = now.wrapping_sub(call_end).wrapping_add(read_cost);
    if measured > OUTLIER_TICKS.load(Ordering::Relaxed) {
        return; // preempted or faulted: says nothing about the recorder's cost
    }
    let measured = clip_u32(measured);
    buffers::with_buf_hot(tb, |l| {
        if let Some(f) = l.cost.get_mut(usize::from(func)) {
            let e = u64::from(f.estimate);
            f.estimate = if f.samples < WARMUP_SAMPLES {
                // Warm-up: the first calls of a function run cold (page faults, first
                // allocations of its tables); the fastest of them is the best start.
                if e == 0 {
                    measured
                } else {
                    measured.min(f.estimate)
                }
            } else {
                ((3 * e + u64::from(measured).min(4 * e)) / 4) as u32
            };
            f.samples = f.samples.saturating_add(1);
        }
        l.cost_any = measured;
        ((), false)
    });
}

/// What a call that is not recorded (filtered, or paused by `MPI_Pcontrol`) costs the recorder
/// after the MPI call returned: estimated from every 32nd such call and charged to the next
/// recorded event, so that reconstruction removes it like any other recorder time. Without it, a
/// polling loop left out of the trace still slowed the program by its wrapper's work (Debian's
/// hpcc: +22 % after reconstruction).
pub(crate) fn charge_unrecorded(tb: &buffers::ThreadBuf, call_end: u64) {
    static ESTIMATE: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    let read_cost = READ_COST.load(Ordering::Relaxed);
    let k = CALLS.with(|c| {
        let k = c.get();
        c.set(k.wrapping_add(1));
        k
    });
    let estimate = ESTIMATE.load(Ordering::Relaxed);
    let ((), _) = buffers::with_buf(tb, |l| l.cost_carry += estimate.saturating_add(read_cost));
    if k < 8 || k.is_multiple_of(32) {
        let measured = clock::now().wrapping_sub(call_end);
        if estimate == 0 || measured < 8 * estimate {
            let new = if estimate == 0 {
                measured
            } else {
                (3 * estimate + measured.min(4 * estimate)) / 4
            };
            ESTIMATE.store(new, Ordering::Relaxed);
        }
    }
}

/// Charges `ticks` of measured recorder work (plus one clock read) to this thread's next event.
pub fn charge(ticks: u64) {
    charge_on(buffers::mine(), ticks);
}

/// [`charge`] on `tb`, which must be this thread's buffer.
pub fn charge_on(tb: &buffers::ThreadBuf, ticks: u64) {
    let read_cost = READ_COST.load(Ordering::Relaxed);
    buffers::with_buf_hot(tb, |l| {
        l.cost_carry += ticks.saturating_add(read_cost);
        ((), false)
    });
}

/// Adds `ticks` of measured recorder work, as is, to this thread's next event (the hard limit's
/// compression or local flush, measured around it).
pub fn carry(ticks: u64) {
    buffers::with_mine(|l| l.cost_carry += ticks);
}

#[cfg(test)]
mod tests {
    use super::charged_cost;

    #[test]
    fn every_call_is_charged_at_least_one_clock_read() {
        // No settled estimate yet (all warm-up samples dropped): the read alone.
        assert_eq!(charged_cost(0, 25, 0), 25);
        // An estimate below one read cannot come from a sample, but is floored all the same.
        assert_eq!(charged_cost(10, 25, 0), 25);
        // A settled estimate is charged as is, plus the carried slow-path time.
        assert_eq!(charged_cost(40, 25, 0), 40);
        assert_eq!(charged_cost(40, 25, 1_000), 1_040);
        assert_eq!(charged_cost(0, 25, 7), 32);
        // The record's field is 32 bits: clipped, never wrapped.
        assert_eq!(charged_cost(40, 25, u64::MAX), u32::MAX);
    }
}
