//! The end of recording: the write at `MPI_Finalize`, at an abnormal end (exit without
//! finalize, `MPI_Abort`, a signal) and the checkpoint before an application's own signal
//! handler; mode profile's statistics file.

use std::sync::atomic::{AtomicBool, Ordering};

use format::profile::ProfileStats;
use format::{Event, Marker};

use crate::back::sink;
use crate::clock;
use crate::front::buffers::{self, Taken};
use crate::lifecycle::fork::forked_child;
use crate::lifecycle::session::{self, active, session};

static FINISHED: AtomicBool = AtomicBool::new(false);
static FINISH_DONE: AtomicBool = AtomicBool::new(false);

/// Profile mode: merges every thread's statistics and writes `profile-NNNNN.json`.
fn write_profile(taken: &mut [Taken]) {
    let Some(s) = session() else { return };
    let mut merged = ProfileStats::new(s.rank, s.size, 1e9 / s.clock.ticks_per_sec);
    let mut any = false;
    for t in taken.iter_mut() {
        if let Some(p) = t.profile.take() {
            // Events stored before profile mode began (none normally) are not lost either.
            let mut p = *p;
            for e in t.buf.iter() {
                p.add_event(t.stream, &e);
            }
            merged.span_ns = merged.span_ns.or(p.span_ns);
            merged.merge(&p);
            any = true;
        }
    }
    if !any {
        return;
    }
    let dir = s.first_out_dir();
    let path = dir.join(format::profile::profile_file_name(s.rank));
    if let Err(e) = std::fs::write(&path, merged.to_json()) {
        say!(
            "evenflush: rank {}: cannot write {}: {e}",
            s.rank,
            path.display()
        );
    }
}

/// Whether [`finish`] has started: nothing recorded after it is written.
pub fn finished() -> bool {
    FINISHED.load(Ordering::Acquire)
}

/// Writes what every thread holds now and keeps recording (before an application's own SIGTERM
/// handler runs: if it ends the process without `exit`, the trace so far is on disk).
pub fn checkpoint() {
    if !active() || finished() || forked_child() {
        return;
    }
    // Not on the thread that makes MPI calls: MPI-IO is not an option here.
    sink::leave_mpiio();
    // The signal's handler waits for this before the application's handler runs: a buffer the
    // signal caught mid-append is left for a later write rather than waited for.
    let (taken, _) = buffers::take_all(Some(1 << 20));
    sink::write(taken);
}

/// [`finish`] for `MPI_Abort`: on a thread of its own, waited for at most `--abort-flush-limit`,
/// so that a hanging disk cannot keep the job from ending.
pub fn finish_bounded(abnormal: i32) {
    let limit = session().map_or(std::time::Duration::from_secs(10), |s| {
        s.config.abort_flush_limit
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let spawned = crate::lifecycle::threads::spawn("evenflush-abort", move || {
        finish(Some(abnormal));
        let _ = done_tx.send(());
    });
    match spawned {
        Ok(_) => {
            if done_rx.recv_timeout(limit).is_err() {
                let rank = session().map_or(0, |s| s.rank);
                say!(
                    "evenflush: rank {rank}: the trace was not written within {limit:?} \
                     (--abort-flush-limit); its end may be missing"
                );
            }
        }
        // No thread to spare: write inline, unbounded rather than not at all.
        Err(_) => finish(Some(abnormal)),
    }
}

/// Ends recording and writes everything held. `abnormal` is `Some(signal)` when not called from
/// `MPI_Finalize` (0 = exit without finalize, -1 = `MPI_Abort`). Runs at most once; a second
/// caller waits (bounded) for the first, so that the process does not end under a writer.
pub fn finish(abnormal: Option<i32>) {
    if forked_child() {
        // A forked child holds a copy of the parent's buffers and sink: never write them.
        return;
    }
    if FINISHED.swap(true, Ordering::AcqRel) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !FINISH_DONE.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        return;
    }
    session::stop_recording();
    let held = buffers::held_bytes();
    if abnormal.is_some_and(|sig| sig != 0) {
        // Signals and MPI_Abort write from a thread of ours, where MPI-IO is not allowed (and an
        // aborting MPI may not serve it).
        sink::leave_mpiio();
    }
    let (mut taken, busy) = match abnormal {
        // A crashed thread may be stuck halfway through an append: never wait for it for long.
        Some(sig) if sig > 0 => buffers::take_all(Some(1 << 20)),
        _ => buffers::take_all(None),
    };
    let rank = session().map_or(0, |s| s.rank);
    if busy.streams == [u32::MAX] {
        // A crashed thread holds the buffer registry: no buffer can be reached or counted.
        say!(
            "evenflush: rank {rank}: the recorder's buffers could not be reached after the signal; \
             the events they held are lost (how many is unknown)"
        );
    } else if !busy.streams.is_empty() {
        say!(
            "evenflush: rank {rank}: {} thread buffer(s) were in use when the signal arrived; up to {} events are lost",
            busy.streams.len(),
            busy.events
        );
    }
    if let Some(signal) = abnormal {
        let mut tail = format::RawBuf::new();
        let time = clock::now();
        if !busy.streams.is_empty() {
            tail.push_event(&Event::Marker(Marker::RecordingStopped { time }));
            if busy.events > 0 {
                tail.push_event(&Event::Marker(Marker::Lost {
                    time,
                    events: busy.events,
                }));
            }
        }
        tail.push_event(&Event::Marker(Marker::AbnormalEnd { time, signal }));
        // Written as the last chunk of the first thread's stream, after everything else.
        taken.push(Taken {
            stream: 0,
            buf: tail,
            profile: None,
        });
    }
    if session().is_some_and(|s| s.config.mode == offload::config::Mode::Profile) {
        write_profile(&mut taken);
        // The profile file is the whole output: no rank file in this mode.
        taken.clear();
    }
    let events: u64 = taken.iter().map(|t| t.buf.events()).sum();
    let used: u64 = taken.iter().map(|t| t.buf.bytes() as u64).sum();
    let t0 = clock::now();
    let stats = sink::write(taken);
    sink::close();
    let t1 = clock::now();
    if stats.events_lost > 0 {
        say!(
            "evenflush: rank {rank}: {} events could not be written",
            stats.events_lost
        );
    }
    if std::env::var_os("EVENFLUSH_VERBOSE").is_some() {
        let tps = session().map_or(1e9, |s| s.clock.ticks_per_sec);
        say!(
            "evenflush: rank {rank}: {events} events in memory, {used} bytes used ({:.1} B/event), {held} bytes held; \
             wrote {} bytes ({} raw) in {:.1} ms to {}; request table {}",
            used as f64 / events.max(1) as f64,
            stats.bytes_stored,
            stats.bytes_raw,
            t1.wrapping_sub(t0) as f64 / tps * 1e3,
            sink::path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            if crate::front::requests::locking() {
                "locked (threads may call MPI at once)"
            } else {
                "unlocked (one thread in MPI at a time)"
            }
        );
    }
    FINISH_DONE.store(true, Ordering::Release);
}
