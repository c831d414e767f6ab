//! Writing the trace when the program ends without `MPI_Finalize`: at `exit` (atexit hook) and on
//! SIGTERM/SIGINT (best effort: then the previous action is restored and the signal re-raised, so
//! the process still dies as it would have).

use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::core;

static INSTALLED: Once = Once::new();
const SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];
static PREVIOUS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static mut PREVIOUS_ACTIONS: [std::mem::MaybeUninit<libc::sigaction>; 2] = [
    std::mem::MaybeUninit::uninit(),
    std::mem::MaybeUninit::uninit(),
];

extern "C" fn at_exit() {
    if core::session().is_some() {
        core::finish(Some(0));
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    if core::session().is_some() {
        core::finish(Some(sig));
    }
    for (i, &s) in SIGNALS.iter().enumerate() {
        if s == sig && PREVIOUS[i].load(Ordering::Acquire) == 1 {
            // SAFETY: the slot was written before PREVIOUS[i] was set to 1 and is never changed
            // again; sigaction and raise are async-signal-safe.
            unsafe {
                let old = (*std::ptr::addr_of!(PREVIOUS_ACTIONS))[i].as_ptr();
                libc::sigaction(sig, old, std::ptr::null_mut());
                libc::raise(sig);
            }
            return;
        }
    }
    // SAFETY: restoring the default action and re-raising are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

pub fn install() {
    INSTALLED.call_once(|| {
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(at_exit) };
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: sigaction structs are plain data; `old` is written by the kernel before use,
            // and the static slot is written once, before PREVIOUS[i] publishes it.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &action, &mut old) == 0 {
                    (*std::ptr::addr_of_mut!(PREVIOUS_ACTIONS))[i].write(old);
                    PREVIOUS[i].store(1, Ordering::Release);
                }
            }
        }
    });
}
