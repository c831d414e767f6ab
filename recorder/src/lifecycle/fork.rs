//! A process forked from a recording one: it must never write (or flush into) the parent's
//! trace, and it tells itself apart by its pid.

use std::sync::atomic::{AtomicI32, Ordering};

/// The process that started recording; any other pid reading it is a forked child.
static INIT_PID: AtomicI32 = AtomicI32::new(0);

/// Called once at `MPI_Init` by the process that records.
pub fn remember_recording_process() {
    // SAFETY: getpid has no preconditions.
    INIT_PID.store(unsafe { libc::getpid() }, Ordering::Release);
}

/// Whether this process is a fork of the one that records (which must not touch its trace).
pub fn forked_child() -> bool {
    let pid = INIT_PID.load(Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    pid != 0 && pid != unsafe { libc::getpid() }
}
