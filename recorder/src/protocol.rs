//! Where the offload protocol (the `offload` crate) runs inside a rank: the initial clock-offset
//! measurement at the end of `MPI_Init`, an equalised suspension after blocking collectives over all
//! ranks, a local flush in mode `local`, and the final offset measurement at `MPI_Finalize`.
//!
//! These hooks run inside the wrapper of an MPI call with the C layer's re-entry guard held, so the
//! protocol's own MPI calls (on the private duplicate of `MPI_COMM_WORLD`) are not recorded. They
//! never panic, and an error disables the protocol on this rank with a message instead of stopping
//! the application.
//!
//! Suspensions are collective: every rank must run the same number of them. They are taken only
//! on the thread that initialised MPI, because under `MPI_THREAD_MULTIPLE` two threads of a rank
//! could otherwise run the protocol at once, and the collectives of other threads on
//! world-congruent communicators need not be matched in the same order on every rank.

use std::cell::Cell;
use std::sync::Mutex;

use format::{CommId, Event, FunctionId, SampleKind};
use offload::config::{Mode, SuspendAt};
use offload::{FlushReport, Settings, Suspender};

use crate::mpi_link::MpiTransport;
use crate::{buffers, core, functions, sink};

struct Protocol {
    suspender: Suspender,
    transport: MpiTransport,
    barrier_id: Option<FunctionId>,
    suspend_at: SuspendAt,
    clock_tries: usize,
}

static PROTOCOL: Mutex<Option<Protocol>> = Mutex::new(None);

thread_local! {
    static INIT_THREAD: Cell<bool> = const { Cell::new(false) };
}

fn disable(rank: u32, what: &str, e: impl std::fmt::Display) {
    eprintln!(
        "evenflush: rank {rank}: {what} failed: {e}; offloading is off on this rank from here on"
    );
    *PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// End of `MPI_Init`: set up the protocol and take the first clock-offset sample (in every mode:
/// reconstruction maps each rank onto rank 0's clock through these samples).
pub fn on_init_done() {
    let Some(session) = core::session() else {
        return;
    };
    if !session.config.watchdog.is_zero() {
        crate::watchdog::start(session.config.watchdog, session.config.watchdog_abort);
    }
    let Some(mut transport) = MpiTransport::new() else {
        return;
    };
    INIT_THREAD.with(|t| t.set(true));
    let settings = Settings::from_config(&session.config);
    let mut suspender = Suspender::new(settings);
    let sample = match suspender.init(&mut transport) {
        Ok(Some(sample)) => Ok(sample),
        // Modes that never suspend collectively still need the offsets for the trace.
        Ok(None) => {
            offload::clock::measure_offsets(&mut transport, settings.clock_tries, SampleKind::Init)
                .map(|sync| sync.own)
        }
        Err(e) => Err(e),
    };
    match sample {
        Ok(sample) => core::record_event(&Event::Clock(sample)),
        Err(e) => {
            eprintln!(
                "evenflush: rank {}: initial clock measurement failed: {e}",
                session.rank
            );
            return;
        }
    }
    *PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Protocol {
        suspender,
        transport,
        barrier_id: functions::id_of("MPI_Barrier"),
        suspend_at: session.config.suspend_at,
        clock_tries: settings.clock_tries,
    });
}

/// Writes everything held now; the suspension's flush.
fn flush_all() -> FlushReport {
    let before = sink::stats();
    let taken = core::take_all_buffers();
    let after = sink::write(taken);
    FlushReport {
        bytes_raw: after.bytes_raw - before.bytes_raw,
        bytes_stored: after.bytes_stored - before.bytes_stored,
    }
}

/// Called at the end of every blocking collective (and blocking neighbourhood collective), after
/// its record was stored.
pub fn after_blocking_collective(comm: CommId, func: FunctionId) {
    if !INIT_THREAD.with(Cell::get) || !crate::comm_spans_world(comm) {
        return;
    }
    let mut guard = PROTOCOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = guard.as_mut() else { return };
    if p.suspend_at == SuspendAt::Barrier && Some(func) != p.barrier_id {
        return;
    }
    let result = p
        .suspender
        .suspend(&mut p.transport, buffers::used_bytes(), &mut flush_all);
    match result {
        Ok(Some(done)) => {
            core::record_event(&Event::Suspension(done.record));
            if let Some(sample) = done.clock_sample {
                core::record_event(&Event::Clock(sample));
            }
        }
        Ok(None) => {}
        Err(e) => {
            drop(guard);
            disable(core::session().map_or(0, |s| s.rank), "the suspension", e);
        }
    }
}

/// Mode `local`: a rank flushes alone as soon as its buffers pass S, wherever it is, as common
/// tracers do. Called when a buffer grew by a block; the pause it causes is recorded as a
/// suspension of this rank only (it perturbs the others, which is what this mode demonstrates).
pub fn after_buffer_growth() {
    let Some(session) = core::session() else {
        return;
    };
    if session.config.mode != Mode::Local || buffers::used_bytes() <= session.config.threshold {
        return;
    }
    let Ok(mut guard) = PROTOCOL.try_lock() else {
        return;
    };
    let Some(p) = guard.as_mut() else { return };
    match p
        .suspender
        .suspend(&mut p.transport, buffers::used_bytes(), &mut flush_all)
    {
        Ok(Some(done)) => core::record_event(&Event::Suspension(done.record)),
        Ok(None) => {}
        Err(e) => {
            drop(guard);
            disable(session.rank, "the local flush", e);
        }
    }
}

/// Entry of `MPI_Finalize` (the transport still works): the last clock-offset sample, so the
/// global clock is interpolated up to the end of the run; and the MPI-IO writer's last write.
pub fn on_finalize_start() {
    if core::session().is_some_and(|s| s.config.writer == offload::config::Writer::MpiIo) {
        sink::before_mpi_finalize(core::take_all_buffers());
    }
    if !INIT_THREAD.with(Cell::get) {
        return;
    }
    let mut guard = PROTOCOL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = guard.as_mut() else { return };
    match offload::clock::measure_offsets(&mut p.transport, p.clock_tries, SampleKind::Finalize) {
        Ok(sync) => core::record_event(&Event::Clock(sync.own)),
        Err(e) => eprintln!(
            "evenflush: rank {}: final clock measurement failed: {e}",
            core::session().map_or(0, |s| s.rank)
        ),
    }
    *guard = None;
}
