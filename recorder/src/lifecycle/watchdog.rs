//! The watchdog (`--watchdog SECONDS`), after the hrc debugger's timer thread: a thread that wakes a
//! few times per limit, finds MPI calls that have been running longer than the limit, and says which
//! call on which rank waits for what — on stderr and as a `Stuck` marker in the trace. With
//! `--watchdog-abort` it then writes the trace and ends the job with `MPI_Abort`.
//!
//! Each thread publishes its call in progress in a slot of its own: the C wrapper calls
//! [`evf_rust_watch_begin`] before the PMPI call and [`evf_rust_watch_end`] after it, only when the
//! watchdog runs, so a run without it pays one predictable branch per call.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use format::{Event, Marker};

use crate::front::record_event;
use crate::lifecycle::finish::finish;
use crate::lifecycle::session::{active, session};
use crate::{clock, functions};

#[derive(Default)]
struct Slot {
    /// Start tick of the call in progress; 0 when the thread is not inside an MPI call.
    start: AtomicU64,
    func: AtomicU32,
    comm: AtomicU32,
    peer: AtomicI32,
    tag: AtomicI32,
    /// Start tick of the call last reported, so a stuck call is reported once.
    reported: AtomicU64,
}

static SLOTS: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Cell<Option<&'static Slot>> = const { Cell::new(None) };
}

fn mine() -> &'static Slot {
    MINE.with(|m| match m.get() {
        Some(s) => s,
        None => {
            let s: &'static Slot = Box::leak(Box::default());
            SLOTS.lock().unwrap_or_else(|e| e.into_inner()).push(s);
            m.set(Some(s));
            s
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_watch_begin(func: u16, start: u64, comm: u32, peer: i32, tag: i32) {
    let s = mine();
    s.func.store(u32::from(func), Ordering::Relaxed);
    s.comm.store(comm, Ordering::Relaxed);
    s.peer.store(peer, Ordering::Relaxed);
    s.tag.store(tag, Ordering::Relaxed);
    s.start.store(start.max(1), Ordering::Release);
}

#[unsafe(no_mangle)]
pub extern "C" fn evf_rust_watch_end() {
    mine().start.store(0, Ordering::Release);
}

/// Starts the watchdog thread (once, at the end of `MPI_Init`).
pub fn start(limit: Duration, abort: bool) {
    let Some(session) = session() else {
        return;
    };
    let Some(link) = crate::mpi_link::link() else {
        return;
    };
    let limit_ticks = (limit.as_secs_f64() * session.clock.ticks_per_sec) as u64;
    let rank = session.rank;
    link.set_watching(true);
    let period = (limit / 4).clamp(Duration::from_millis(10), Duration::from_millis(500));
    let spawned = crate::lifecycle::threads::spawn("evenflush-watchdog", move || {
        loop {
            std::thread::sleep(period);
            if !active() {
                return;
            }
            if check(rank, limit_ticks, session.clock.ticks_per_sec) && abort {
                // The other ranks' watchdogs see their own stuck calls within a period or two:
                // aborting at once would kill them before they say what they were waiting for.
                std::thread::sleep(3 * period);
                check(rank, limit_ticks, session.clock.ticks_per_sec);
                say(&format!(
                    "evenflush: rank {rank}: WATCHDOG: writing the trace and aborting the job (--watchdog-abort)"
                ));
                finish(Some(-1));
                link.watchdog_abort(3);
                return;
            }
        }
    });
    if let Err(e) = spawned {
        say!("evenflush: rank {rank}: cannot start the watchdog thread: {e}");
    }
}

/// One line on stderr in one write, so the reports of ranks sharing a terminal or a pipe do not
/// interleave mid-line.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Reports every call stuck past the limit that was not reported yet. Returns whether any was.
fn check(rank: u32, limit_ticks: u64, ticks_per_sec: f64) -> bool {
    let now = clock::now();
    let slots: Vec<&'static Slot> = SLOTS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut found = false;
    for s in slots {
        let start = s.start.load(Ordering::Acquire);
        if start == 0
            || now.saturating_sub(start) <= limit_ticks
            || s.reported.load(Ordering::Relaxed) == start
        {
            continue;
        }
        s.reported.store(start, Ordering::Relaxed);
        let func = s.func.load(Ordering::Relaxed) as u16;
        let (comm, peer, tag) = (
            s.comm.load(Ordering::Relaxed),
            s.peer.load(Ordering::Relaxed),
            s.tag.load(Ordering::Relaxed),
        );
        let elapsed_ns = ((now - start) as f64 / ticks_per_sec * 1e9) as u64;
        let name = functions::FUNCTIONS
            .get(usize::from(func))
            .map_or("?", |(n, _)| *n);
        let comm_text = if comm == u32::MAX {
            "-".to_string()
        } else {
            comm.to_string()
        };
        say(&format!(
            "evenflush: rank {rank}: WATCHDOG: {name} has been running for {:.1} s (communicator {comm_text}, peer {peer}, tag {tag})",
            elapsed_ns as f64 * 1e-9
        ));
        record_event(&Event::Marker(Marker::Stuck {
            time: now,
            func,
            elapsed_ns,
            comm,
            peer,
            tag,
        }));
        found = true;
    }
    found
}
