//! The hard limit (`--limit`) and everything else a buffer's growth by a block sets off: mode
//! `local`'s flush past S, a memory sample when one is due, and past the limit an in-memory
//! compression or, failing that, a local flush. [`after_buffer_growth`] is what the front end's
//! growth hook ([`crate::buffer_grew`]) calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use format::{Event, Marker};

use crate::back::{memory_watch, protocol, sink};
use crate::clock;
use crate::front::{self, record_event};
use crate::lifecycle::fork::forked_child;
use crate::lifecycle::session::session;

static LOCAL_FLUSHES: AtomicU64 = AtomicU64::new(0);
static IN_MEMORY_COMPRESSIONS: AtomicU64 = AtomicU64::new(0);
static FLUSH_LOCK: Mutex<()> = Mutex::new(());
static LIMIT_WARNING: Once = Once::new();

/// After a buffer grew: mode `local` flushes past S, and a memory sample may be due. Past the
/// hard limit, the recorder first compresses its buffers in memory and keeps the chunks for the
/// next flushing suspension (FORMAT.md `Compressed`): the program keeps its timing, and only the
/// compression's time is recorder cost. Only when the compressed backlog itself takes half the
/// limit (data that does not compress), or in the modes that do not suspend collectively, does
/// the rank write alone (a local flush: timing may be perturbed; the trace says so).
pub fn after_buffer_growth() {
    if forked_child() {
        return;
    }
    protocol::after_buffer_growth();
    memory_watch::maybe_periodic();
    // No session yet: no limit.
    let limit = session().map_or(u64::MAX, |s| s.config.limit);
    let held = || front::held_bytes() + sink::held_compressed();
    if held() <= limit {
        return;
    }
    let Ok(_guard) = FLUSH_LOCK.try_lock() else {
        return; // another thread is flushing right now
    };
    if held() <= limit {
        return;
    }
    // What is held may be mostly the empty part of each thread's current block (a limit below
    // the block size): writing or compressing a few records then frees nothing lasting.
    if front::used_bytes() < limit / 4 {
        return;
    }
    let t0 = clock::now();
    let raw_held = front::held_bytes();
    let taken = front::take_all_buffers();
    let collective = session().is_some_and(|s| {
        matches!(
            s.config.mode,
            offload::config::Mode::Dynamic
                | offload::config::Mode::Static
                | offload::config::Mode::NoRemeasure
        )
    });
    if collective && sink::held_compressed() < limit / 2 {
        let (raw_bytes, stored_bytes) = sink::compress_in_memory(taken);
        IN_MEMORY_COMPRESSIONS.fetch_add(1, Ordering::Relaxed);
        record_event(&Event::Marker(Marker::Compressed {
            time: t0,
            raw_bytes,
            stored_bytes,
        }));
        memory_watch::at_compression();
        let t1 = clock::now();
        front::carry(t1.wrapping_sub(t0));
        return;
    }
    sink::write(taken);
    LOCAL_FLUSHES.fetch_add(1, Ordering::Relaxed);
    LIMIT_WARNING.call_once(|| {
        let rank = session().map_or(0, |s| s.rank);
        let why = if collective {
            "and what it compressed in memory since the last flush takes half of it"
        } else {
            "in a mode without collective flushes"
        };
        say!(
            "evenflush: rank {rank}: recorder memory reached the limit ({raw_held} bytes held) {why}; \
             flushing locally (marked in the trace; raise EVENFLUSH_LIMIT to avoid it)"
        );
    });
    let t1 = clock::now();
    record_event(&Event::Marker(Marker::LocalFlush {
        time: t0,
        bytes: raw_held,
    }));
    front::carry(t1.wrapping_sub(t0));
}

/// How many times the hard limit made this rank compress in memory.
pub fn in_memory_compressions() -> u64 {
    IN_MEMORY_COMPRESSIONS.load(Ordering::Relaxed)
}

/// How many local flushes the hard limit forced so far.
pub fn local_flushes() -> u64 {
    LOCAL_FLUSHES.load(Ordering::Relaxed)
}
