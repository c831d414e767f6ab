//! Where the offload protocol (the `offload` crate) runs inside a rank: the initial clock-offset
//! measurement at the end of `MPI_Init`, the decision (and, when it says so, an equalised
//! suspension) after blocking collectives over all ranks, a local flush in mode `local`, and the
//! final offset measurement at `MPI_Finalize`.
//!
//! These hooks run inside the wrapper of an MPI call with the C layer's re-entry guard held, so the
//! protocol's own MPI calls (on the private duplicate of `MPI_COMM_WORLD`) are not recorded. They
//! never panic. An error does not turn the protocol off on this rank alone (the others would wait
//! for it in the next decision): the rank asks, in its next decision word, that every rank turn it
//! off at the same collective.
//!
//! Every rank must run the protocol at the same collectives, whichever thread makes them. With
//! `MPI_THREAD_MULTIPLE` only collectives on `MPI_COMM_WORLD` itself count: the standard makes the
//! application order the collectives of one communicator identically on every rank, but not those
//! of different communicators issued from different threads. Below that level every
//! world-spanning communicator counts, since one thread at a time calls MPI in program order.
//!
//! A suspension pauses the thread that made the collective. Other threads of the rank (only under
//! `MPI_THREAD_MULTIPLE`) keep running; the suspension record is in the pausing thread's stream,
//! and reconstruct removes the pause from that stream only.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use format::{CommId, Event, FunctionId, SampleKind};
use offload::config::{Config, Mode, SuspendAt};
use offload::{FlushReport, Settings, Suspender};

use crate::back::transport::MpiTransport;
use crate::back::{memory_watch, sink, threshold};
use crate::front::{self, record_event};
use crate::lifecycle::session::session;
use crate::{clock, functions};

/// The C layer's id of `MPI_COMM_WORLD` (`evf_define_comm(0, MPI_COMM_WORLD)`).
const WORLD_COMM: CommId = 0;

/// `MPI_THREAD_MULTIPLE` in both MPI ABIs this library is built for.
const MPI_THREAD_MULTIPLE: i32 = 3;

struct Protocol {
    suspender: Suspender,
    transport: MpiTransport,
    barrier_id: Option<FunctionId>,
    suspend_at: SuspendAt,
    clock_tries: usize,
    /// Only collectives on `MPI_COMM_WORLD` itself count (see the module docs).
    world_only: bool,
    /// A protocol step failed here and the rank asked the others to stop with it.
    failed: bool,
    /// The collective turn-off was reported.
    off_announced: bool,
}

impl Protocol {
    /// The suspender's step after a collective (or, in mode `local`, a buffer's growth), voting
    /// with S as [`threshold`], its one owner, has it now.
    fn suspend(
        &mut self,
        used: u64,
    ) -> Result<Option<offload::Suspended>, offload::TransportError> {
        let held = offload::Held {
            bytes: used,
            threshold: threshold::current(),
        };
        self.suspender
            .suspend(&mut self.transport, held, &mut flush_all)
    }
}

static PROTOCOL: Mutex<Option<Protocol>> = Mutex::new(None);

/// Whether the protocol is installed: lets the hook after every collective return without a lock
/// when there is nothing to do.
static RUNNING: AtomicBool = AtomicBool::new(false);

fn rank() -> u32 {
    session().map_or(0, |s| s.rank)
}

/// The settings every rank must share for the protocol to stay collective, as one number. The
/// threshold, limit and output directories may differ between ranks; which collectives suspend,
/// and how, may not.
pub fn settings_fingerprint(config: &Config) -> u64 {
    let shared = format!(
        "{}|{:?}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{}",
        config.mode.name(),
        config.suspend_at,
        config.suspend_every,
        config.static_short,
        config.static_long,
        config.clock_samples,
        config.clock_scheme.name(),
        config.decision.name(),
        config.decision_interval,
        // The group file's writes are collective: every rank must use the same layout.
        config.layout.name(),
    );
    // FNV-1a: stable across processes and builds, unlike the std hasher's random keys.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in shared.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.max(1)
}

/// End of `MPI_Init`: set up the protocol and take the first clock-offset sample (in every mode:
/// reconstruction maps each rank onto rank 0's clock through these samples).
pub fn on_init_done() {
    let Some(session) = session() else {
        return;
    };
    if !session.config.watchdog.is_zero() {
        crate::lifecycle::watchdog::start(session.config.watchdog, session.config.watchdog_abort);
    }
    memory_watch::at_init();
    warm_blocks(&session.config);
    let Some(mut transport) = MpiTransport::new() else {
        return;
    };
    let settings = Settings::from_config(&session.config);
    let mut suspender = Suspender::new(settings);
    let sample = match suspender.init(&mut transport) {
        Ok(Some(sample)) => Ok(sample),
        // Modes that never suspend collectively still need the offsets for the trace.
        Ok(None) => offload::clock::measure_offsets_blocking(
            &mut transport,
            settings.clock_scheme,
            settings.clock_tries,
            SampleKind::Init,
        )
        .map(|sync| sync.own),
        Err(e) => Err(e),
    };
    let failed = match sample {
        Ok(sample) => {
            record_event(&Event::Clock(sample));
            false
        }
        Err(e) => {
            say!(
                "evenflush: rank {}: initial clock measurement failed: {e}; asking every rank to \
                 turn offloading off",
                session.rank
            );
            suspender.request_disable();
            true
        }
    };
    let mut protocol = Protocol {
        suspender,
        transport,
        barrier_id: functions::id_of("MPI_Barrier"),
        suspend_at: session.config.suspend_at,
        clock_tries: settings.clock_tries,
        world_only: session.thread_level >= MPI_THREAD_MULTIPLE,
        failed,
        off_announced: false,
    };
    WORLD_ONLY.store(protocol.world_only, Ordering::Relaxed);
    let barrier_only = match (protocol.suspend_at, protocol.barrier_id) {
        (SuspendAt::Barrier, Some(id)) => u32::from(id),
        // No barrier to suspend at: the locked path finds every collective ineligible.
        (SuspendAt::Barrier, None) => NOT_BARRIER_ONLY - 1,
        _ => NOT_BARRIER_ONLY,
    };
    BARRIER_ONLY.store(barrier_only, Ordering::Relaxed);
    refill_quiet(&mut protocol);
    *PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(protocol);
    RUNNING.store(true, Ordering::Release);
}

/// Most a rank maps ahead at `MPI_Init` (per rank, so 64 ranks on a node take 4 GiB at most).
const WARM_MAX_BYTES: u64 = 64 << 20;

/// Maps the blocks the buffer will fill before its first flush, here: before the initial clock
/// measurement, which every rank leaves together, and in the time charged to the first event. A
/// block mapped later, on one rank, makes its partners wait at their next collective
/// (`crate::alloc::prefill`). At most [`WARM_MAX_BYTES`] and half of `--limit`; nothing in mode
/// profile, which keeps no buffer.
fn warm_blocks(config: &Config) {
    if config.mode == Mode::Profile {
        return;
    }
    let s = threshold::current();
    let bytes = WARM_MAX_BYTES.min(config.limit / 2);
    let most = usize::try_from(bytes / crate::alloc::HUGE_MIN as u64).unwrap_or(usize::MAX);
    let blocks = crate::alloc::blocks_for_threshold(s).min(most);
    crate::alloc::prefill(blocks);
}

/// Writes everything held now; the suspension's flush. Every rank flushes at the same collective
/// (except in mode `local`), so the write may be collective (the aggregated layout's group file).
fn flush_all() -> FlushReport {
    let before = sink::stats();
    let taken = front::take_all_buffers();
    let together = session().is_some_and(|s| s.config.mode != Mode::Local);
    let after = if together {
        sink::write_collective(taken)
    } else {
        sink::write(taken)
    };
    memory_watch::at_suspension();
    FlushReport {
        bytes_raw: after.bytes_raw - before.bytes_raw,
        bytes_stored: after.bytes_stored - before.bytes_stored,
    }
}

/// Called at the end of every blocking collective (and blocking neighbourhood collective), after
/// its record was stored, on whichever thread made it. Returns whether it did more than count (a
/// decision point: its time is measured and charged on its own, so the wrapper's cost sample must
/// not include it).
///
/// Most collectives only count towards the next decision point. Those take no lock and no
/// read-modify-write: whether a collective counts is read from flags set at init and the
/// lock-free "spans the world" bitset, and the suspender hands out in advance how many counting
/// collectives may pass ([`QUIET_LEFT`], a plain load and store: the collectives that count are
/// ordered by the program, one at a time per rank).
#[inline]
pub fn after_blocking_collective(comm: CommId, func: FunctionId) -> bool {
    if !RUNNING.load(Ordering::Acquire) {
        return false;
    }
    let eligible = if WORLD_ONLY.load(Ordering::Relaxed) {
        comm == WORLD_COMM
    } else {
        comm == WORLD_COMM || crate::comm_spans_world(comm)
    };
    let barrier_only = BARRIER_ONLY.load(Ordering::Relaxed);
    if !eligible || (barrier_only != NOT_BARRIER_ONLY && u32::from(func) != barrier_only) {
        return false;
    }
    let left = QUIET_LEFT.load(Ordering::Relaxed);
    if left > 0 {
        if left != u64::MAX {
            QUIET_LEFT.store(left - 1, Ordering::Relaxed);
        }
        return false;
    }
    after_blocking_collective_locked(comm, func)
}

/// Eligible collectives that may pass the hook without the protocol's lock before the next one
/// the suspender must see; already counted by the suspender when handed out
/// ([`offload::Suspender::pass_quietly`]). `u64::MAX`: none will ever act (mode off).
static QUIET_LEFT: AtomicU64 = AtomicU64::new(0);
/// Only collectives on `MPI_COMM_WORLD` itself count (see the module docs); set at init.
static WORLD_ONLY: AtomicBool = AtomicBool::new(false);
/// With `--suspend-at barrier`, the function id of `MPI_Barrier`; else [`NOT_BARRIER_ONLY`].
static BARRIER_ONLY: AtomicU32 = AtomicU32::new(NOT_BARRIER_ONLY);
const NOT_BARRIER_ONLY: u32 = u32::MAX;

/// Hands the suspender's coming counting-only calls to the lock-free gate (under the lock).
fn refill_quiet(p: &mut Protocol) {
    // Mode local also calls the suspender from `after_buffer_growth`, between collectives: no
    // calls are handed out ahead there.
    if p.suspender.settings().mode == Mode::Local {
        QUIET_LEFT.store(0, Ordering::Relaxed);
        return;
    }
    let quiet = p.suspender.quiet_calls();
    if quiet != u64::MAX {
        p.suspender.pass_quietly(quiet);
    }
    QUIET_LEFT.store(quiet, Ordering::Relaxed);
}

/// The hook's work when the gate let nothing pass; says whether it did more than count (a
/// decision, measured and charged on its own).
#[cold]
#[inline(never)]
fn after_blocking_collective_locked(comm: CommId, func: FunctionId) -> bool {
    let mut guard = PROTOCOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = guard.as_mut() else {
        return false;
    };
    let eligible = if p.world_only {
        comm == WORLD_COMM
    } else {
        comm == WORLD_COMM || crate::comm_spans_world(comm)
    };
    if !eligible || (p.suspend_at == SuspendAt::Barrier && Some(func) != p.barrier_id) {
        return false;
    }
    // Most collectives only advance a counter: no clock reads for them, and no sum over the
    // threads' buffers (which takes the registry's lock), since only a decision reads it.
    let may_act = p.suspender.next_call_may_act();
    let entered = may_act.then(clock::now);
    if may_act {
        memory_watch::at_decision();
    }
    // Chunks compressed in memory since the last flush (the hard limit was reached) ask for the
    // next flush whatever S is: they exist because memory ran short.
    let used = match (may_act, sink::held_compressed()) {
        (false, _) => 0,
        (true, 0) => front::used_bytes(),
        (true, _) => u64::MAX,
    };
    let result = p.suspend(used);
    if let (Some(entered), Ok(None)) = (entered, &result) {
        // A decision point without a suspension (or just the counter) is recorder time like any
        // other: charged to this thread's next event as DP, so reconstruct removes it. A
        // suspension's time is in its own record (DP') instead.
        front::charge(clock::now().wrapping_sub(entered));
    }
    match result {
        Ok(Some(done)) => {
            record_event(&Event::Suspension(Box::new(done.record)));
            if let Some(sample) = done.clock_sample {
                record_event(&Event::Clock(sample));
            }
        }
        Ok(None) => {}
        Err(e) => {
            if p.failed {
                // Even asking the others failed: the private communicator is unusable.
                say!(
                    "evenflush: rank {}: the protocol failed again ({e}); offloading is off on \
                     this rank, and other ranks may stop at their next decision",
                    rank()
                );
                *guard = None;
                RUNNING.store(false, Ordering::Release);
                return true;
            }
            say!(
                "evenflush: rank {}: the suspension failed: {e}; asking every rank to turn \
                 offloading off",
                rank()
            );
            p.failed = true;
            p.suspender.request_disable();
        }
    }
    // Keep the transport for the final clock measurement; the suspender does nothing now.
    if p.suspender.disabled()
        && !std::mem::replace(&mut p.off_announced, true)
        && (rank() == 0 || p.failed)
    {
        say!(
            "evenflush: rank {}: offloading is off on every rank from here on (a rank's \
             protocol failed); the rest of the trace stays in memory until MPI_Finalize",
            rank()
        );
    }
    refill_quiet(p);
    may_act
}

/// Mode `local`: a rank flushes alone as soon as its buffers pass S, wherever it is, as common
/// tracers do. Called when a buffer grew by a block; the pause it causes is recorded as a
/// suspension of this rank only (it perturbs the others, which is what this mode demonstrates).
pub fn after_buffer_growth() {
    let Some(session) = session() else {
        return;
    };
    if session.config.mode != Mode::Local {
        return;
    }
    let used = front::used_bytes();
    if !threshold::exceeded(used) {
        return;
    }
    let Ok(mut guard) = PROTOCOL.try_lock() else {
        return;
    };
    let Some(p) = guard.as_mut() else { return };
    match p.suspend(used) {
        Ok(Some(done)) => record_event(&Event::Suspension(Box::new(done.record))),
        Ok(None) => {}
        Err(e) => say!(
            "evenflush: rank {}: the local flush failed: {e}",
            session.rank
        ),
    }
}

/// Entry of `MPI_Finalize` (the transport still works): complete the outstanding decision, take
/// the last clock-offset sample, so the global clock is interpolated up to the end of the run;
/// and the MPI-IO writer's last write.
pub fn on_finalize_start() {
    RUNNING.store(false, Ordering::Release);
    memory_watch::at_finalize();
    {
        let mut guard = PROTOCOL.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = guard.as_mut() {
            finish_protocol(p);
        }
        *guard = None;
    }
    // After the last clock sample, so that it is written with the rest.
    if sink::needs_finalize_write() {
        sink::before_mpi_finalize(front::take_all_buffers());
    }
}

fn finish_protocol(p: &mut Protocol) {
    if let Err(e) = p.suspender.close(&mut p.transport) {
        say!(
            "evenflush: rank {}: completing the last decision failed: {e}",
            rank()
        );
    }
    match offload::clock::measure_offsets_blocking(
        &mut p.transport,
        p.suspender.settings().clock_scheme,
        p.clock_tries,
        SampleKind::Finalize,
    ) {
        Ok(sync) => record_event(&Event::Clock(sync.own)),
        Err(e) => say!(
            "evenflush: rank {}: final clock measurement failed: {e}",
            rank()
        ),
    }
}
