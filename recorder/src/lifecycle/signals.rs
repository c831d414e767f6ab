//! Writing the trace when the program does not reach `MPI_Finalize`: at `exit` (atexit hook), on
//! SIGTERM/SIGINT, and, best effort, when it crashes with SIGSEGV, SIGBUS or SIGABRT.
//!
//! Writing a trace takes `malloc`, zstd, locks and perhaps MPI-IO, and none of that may run inside
//! a signal handler: the signal may have interrupted the very thread that holds the allocator's
//! lock, a buffer, or the sink during a suspension flush, and the handler would then wait for
//! itself. So the handler only does async-signal-safe things (atomics, `write(2)` of one byte to a
//! pipe, `poll(2)`, `sigaction(2)`, `raise(3)`), and a helper thread started at `MPI_Init`
//! (`evenflush-signals`) writes the trace.
//!
//! What happens then depends on what the signal would have done without the recorder:
//! - SIGTERM/SIGINT with the default action: the handler returns at once, so the interrupted
//!   thread finishes whatever it held; the helper ends the trace, restores the default action and
//!   re-raises the signal, so the process dies of it as before, only after its trace is written
//!   and after the other ranks writing for the same reason are done (`killed_together`).
//!   A second such signal while that runs ends the process at once (a user pressing Ctrl-C twice).
//!   A signal a thread `raise`s on itself is the exception: that thread holds nothing the helper
//!   needs, and untraced it would never run on, so its handler waits (bounded) for the re-raise.
//! - SIGTERM/SIGINT ignored (`SIG_IGN`, as in a background job): nothing is installed.
//! - SIGTERM/SIGINT caught by the application before `MPI_Init`: the handler has the helper write
//!   what is buffered so far (the trace stays open), waits for that at most
//!   `--abort-flush-limit`, and calls the application's handler. A handler the application
//!   installs after `MPI_Init` replaces the recorder's, and the application keeps full control.
//! - SIGSEGV/SIGBUS/SIGABRT (not ignored): the crashed thread cannot go on, so its handler waits,
//!   at most `--abort-flush-limit`, for the helper to end the trace. Buffers still in use then
//!   (the crashed thread's, for one) cannot be read safely: their events are counted as lost.
//!   The signal then goes to the previous action (Open MPI's backtrace handler, or the default:
//!   core dump), so the crash looks as it would have.
//!
//! A process forked from a recording one inherits these handlers and the pipe: [`after_fork_child`]
//! puts the previous actions back and closes the pipe, and [`forked_child`] keeps the child away
//! from the parent's trace.

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::lifecycle::finish;
use crate::lifecycle::fork::{self, forked_child};
use crate::lifecycle::killed_together;
use crate::lifecycle::session::session;

const SIGNALS: [c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGABRT,
];

/// SIGSEGV, SIGBUS and SIGABRT: the thread that got them cannot continue.
fn is_crash(sig: c_int) -> bool {
    matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGABRT)
}

static INSTALLED: Once = Once::new();
/// Per entry of [`SIGNALS`]: whether our handler is installed and `PREVIOUS_ACTIONS` holds what
/// it replaced.
static ACTIVE_SLOT: [AtomicBool; 5] = [const { AtomicBool::new(false) }; 5];
static mut PREVIOUS_ACTIONS: [MaybeUninit<libc::sigaction>; 5] = [MaybeUninit::uninit(); 5];

/// The helper's pipe: the handler writes one byte per request.
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// The helper writes one byte after each request it served, for handlers that wait.
static DONE_READ: AtomicI32 = AtomicI32::new(-1);
static DONE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// `pthread_self()` of the helper thread (0 until it is started).
static HELPER: AtomicU64 = AtomicU64::new(0);

/// What the helper is asked to do (bits of `PENDING`).
const WANT_CHECKPOINT: u32 = 1;
const WANT_FINAL: u32 = 2;
static PENDING: AtomicU32 = AtomicU32::new(0);
/// The signal the final write is for (the first one that asked).
static FINAL_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Set when the helper must re-raise `FINAL_SIGNAL` itself after the final write (SIGTERM/SIGINT
/// with the default action); a crash's handler re-raises on its own thread.
static RERAISE: AtomicBool = AtomicBool::new(false);
/// Requests made and requests served, so a waiting handler knows when its own one is done.
static REQUESTED: AtomicU64 = AtomicU64::new(0);
static SERVED: AtomicU64 = AtomicU64::new(0);
/// Handlers of the application running on top of ours (`exit` from one must not write inline).
static IN_APP_HANDLER: AtomicU32 = AtomicU32::new(0);
/// The bound on every wait for the helper, in milliseconds (`--abort-flush-limit`).
static WAIT_LIMIT_MS: AtomicU64 = AtomicU64::new(10_000);

extern "C" fn at_exit() {
    if forked_child() || session().is_none() {
        return;
    }
    if IN_APP_HANDLER.load(Ordering::Acquire) > 0 {
        // `exit` called from the application's signal handler: still signal context, so the
        // helper writes and this thread only waits, bounded.
        request(WANT_FINAL, 0, true);
        return;
    }
    finish::finish(Some(0));
}

/// Asks the helper for `what` and, with `wait`, waits until it is served or the limit passes.
/// Async-signal-safe. Returns false when there is no helper to ask.
fn request(what: u32, sig: c_int, wait: bool) -> bool {
    let fd = WAKE_WRITE.load(Ordering::Acquire);
    if fd < 0 || HELPER.load(Ordering::Acquire) == 0 {
        return false;
    }
    if what == WANT_FINAL {
        let _ = FINAL_SIGNAL.compare_exchange(0, sig, Ordering::AcqRel, Ordering::Relaxed);
    }
    // The bit is set before the ticket is taken, so a helper that has seen the ticket also sees
    // the bit (or served it already).
    PENDING.fetch_or(what, Ordering::AcqRel);
    let ticket = REQUESTED.fetch_add(1, Ordering::AcqRel) + 1;
    let byte = 1u8;
    // SAFETY: write(2) of one byte from a local to a descriptor we own; the write end is
    // non-blocking, and a full pipe already holds a wake-up, so a failure loses nothing.
    unsafe { libc::write(fd, (&raw const byte).cast(), 1) };
    if wait {
        wait_served(ticket);
    }
    true
}

/// Monotonic milliseconds, from async-signal-safe `clock_gettime`.
fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the local it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

fn wait_served(ticket: u64) {
    let deadline = now_ms() + WAIT_LIMIT_MS.load(Ordering::Relaxed);
    let fd = DONE_READ.load(Ordering::Acquire);
    while SERVED.load(Ordering::Acquire) < ticket {
        let now = now_ms();
        if now >= deadline || fd < 0 {
            return;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let slice = (deadline - now).min(100) as c_int;
        // SAFETY: poll on one pollfd on our stack; read drains into a local buffer from a
        // non-blocking descriptor we own. Both are async-signal-safe.
        unsafe {
            libc::poll(&mut pfd, 1, slice);
            let mut sink = [0u8; 64];
            libc::read(fd, sink.as_mut_ptr().cast(), sink.len());
        }
    }
}

fn slot(sig: c_int) -> Option<usize> {
    SIGNALS.iter().position(|&s| s == sig)
}

/// The action our handler replaced for `SIGNALS[i]`.
///
/// # Safety
/// `ACTIVE_SLOT[i]` must be set (the slot was written before it was, and is never written again).
unsafe fn previous(i: usize) -> &'static libc::sigaction {
    // SAFETY: per the contract, the slot is initialised and no longer written.
    unsafe { (*std::ptr::addr_of!(PREVIOUS_ACTIONS))[i].assume_init_ref() }
}

/// Hands the signal to what was there before us: the application's (or the MPI library's)
/// handler, or the default action (re-raised: it is blocked while we run, so it takes effect as
/// soon as the handler returns).
///
/// # Safety
/// Signal context with `info`/`ctx` as the kernel passed them; `ACTIVE_SLOT[i]` set.
unsafe fn chain(i: usize, sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: forwarded contract.
    let prev = unsafe { previous(i) };
    let handler = prev.sa_sigaction;
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // SAFETY: sigaction and raise are async-signal-safe; `prev` is a valid action.
        unsafe {
            libc::sigaction(sig, prev, std::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    IN_APP_HANDLER.fetch_add(1, Ordering::AcqRel);
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO the stored address is a three-argument handler, called as the
        // kernel would have called it.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: without SA_SIGINFO the stored address is a one-argument handler.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
    IN_APP_HANDLER.fetch_sub(1, Ordering::AcqRel);
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is thread-local; saved and restored so the interrupted code never sees ours.
    let saved_errno = unsafe { *libc::__errno_location() };
    let Some(i) = slot(sig) else { return };
    if !ACTIVE_SLOT[i].load(Ordering::Acquire) {
        return;
    }
    // SAFETY: pthread_self only reads the thread pointer.
    let on_helper = HELPER.load(Ordering::Acquire) == unsafe { libc::pthread_self() };
    let ours = !forked_child() && !finish::finished() && !on_helper;
    // SAFETY: a previous action of our own process. Applies to each `chain` below.
    let app_handler = unsafe { previous(i) }.sa_sigaction != libc::SIG_DFL;
    if !ours {
        // SAFETY: signal context, slot active.
        unsafe { chain(i, sig, info, ctx) };
    } else if is_crash(sig) {
        if PENDING.load(Ordering::Acquire) & WANT_FINAL != 0
            || FINAL_SIGNAL.load(Ordering::Acquire) != 0
        {
            // A second crash while the first one's trace is being written: wait for that one.
            wait_served(REQUESTED.load(Ordering::Acquire));
        } else {
            request(WANT_FINAL, sig, true);
        }
        // SAFETY: signal context, slot active.
        unsafe { chain(i, sig, info, ctx) };
    } else if app_handler {
        request(WANT_CHECKPOINT, sig, true);
        // SAFETY: signal context, slot active.
        unsafe { chain(i, sig, info, ctx) };
    } else if FINAL_SIGNAL.load(Ordering::Acquire) != 0 || !request_final_and_reraise(sig) {
        // Asked again while the trace is being written, or no helper: end now.
        // SAFETY: signal context, slot active.
        unsafe { chain(i, sig, info, ctx) };
    } else if raised_by_this_thread(info) {
        // `raise` never returns untraced: a thread let go on from it runs code the program never
        // ran (here, typically, `MPI_Finalize`, which the re-raise then cuts in half, and Open
        // MPI's launcher can hang on a process that died inside its finalize handshake). The
        // thread called `raise` from its own code, so it holds no lock the helper needs: it waits
        // for the helper's re-raise, bounded like every wait for the helper.
        wait_served(REQUESTED.load(Ordering::Acquire));
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Whether the signal came from `raise`/`pthread_kill` on this thread: a thread-directed signal
/// (`SI_TKILL`) sent by this process to the thread it interrupted.
fn raised_by_this_thread(info: *const libc::siginfo_t) -> bool {
    if info.is_null() {
        return false;
    }
    // SAFETY: the kernel's siginfo for this delivery; `si_pid` is valid for SI_TKILL, and getpid
    // is async-signal-safe.
    unsafe { (*info).si_code == libc::SI_TKILL && (*info).si_pid() == libc::getpid() }
}

fn request_final_and_reraise(sig: c_int) -> bool {
    RERAISE.store(true, Ordering::Release);
    request(WANT_FINAL, sig, false)
}

/// The helper: serves requests until the process ends.
fn helper_loop() {
    let fd = WAKE_READ.load(Ordering::Acquire);
    loop {
        let mut byte = [0u8; 16];
        // SAFETY: read into a local buffer from the pipe's blocking read end, which we own.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), byte.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return;
        }
        let seen = REQUESTED.load(Ordering::Acquire);
        let what = PENDING.swap(0, Ordering::AcqRel);
        // This thread never makes MPI calls of the application's: with `--writer mpiio`, what it
        // writes goes to a posix part file instead.
        if what != 0 {
            crate::back::sink::leave_mpiio();
        }
        if what & WANT_FINAL != 0 {
            let sig = FINAL_SIGNAL.load(Ordering::Acquire);
            let dies_of_it = RERAISE.load(Ordering::Acquire) && !is_crash(sig);
            // The other ranks were most likely sent the same signal and are writing too.
            let writing = dies_of_it
                .then(|| killed_together::announce(std::time::Instant::now()))
                .flatten();
            finish::finish(Some(sig));
            if dies_of_it {
                if let Some(writing) = writing {
                    writing.wait_for_the_others();
                }
                reraise_default(sig);
            }
        } else if what & WANT_CHECKPOINT != 0 {
            finish::checkpoint();
        }
        SERVED.fetch_max(seen, Ordering::AcqRel);
        let done = DONE_WRITE.load(Ordering::Acquire);
        if done >= 0 {
            let b = 1u8;
            // SAFETY: one byte from a local to the non-blocking write end we own.
            unsafe { libc::write(done, (&raw const b).cast(), 1) };
        }
    }
}

/// After the final write for SIGTERM/SIGINT: dies of the signal as the process would have.
fn reraise_default(sig: c_int) {
    if let Some(i) = slot(sig)
        && ACTIVE_SLOT[i].load(Ordering::Acquire)
    {
        // SAFETY: restores the action we replaced (the default here), unblocks the signal on this
        // thread (the helper blocks it) and sends it to the whole process.
        unsafe {
            libc::sigaction(sig, previous(i), std::ptr::null_mut());
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
        }
    }
}

fn make_pipe(read_nonblocking: bool) -> Option<(c_int, c_int)> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let set_nonblocking = |fd: c_int| {
        // SAFETY: fcntl on a descriptor we just created.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    };
    set_nonblocking(fds[1]);
    if read_nonblocking {
        set_nonblocking(fds[0]);
    }
    Some((fds[0], fds[1]))
}

/// Installs the exit hook, the signal handlers and their helper thread (once, at `MPI_Init`).
pub fn install(wait_limit: Duration) {
    INSTALLED.call_once(|| {
        WAIT_LIMIT_MS.store(wait_limit.as_millis() as u64, Ordering::Relaxed);
        fork::remember_recording_process();
        // SAFETY: registering a plain extern "C" function with no captured state.
        unsafe { libc::atexit(at_exit) };
        let (Some((wake_r, wake_w)), Some((done_r, done_w))) = (make_pipe(false), make_pipe(true))
        else {
            say!("evenflush: cannot create the signal pipe; a signal will end the trace unwritten");
            return;
        };
        WAKE_READ.store(wake_r, Ordering::Release);
        WAKE_WRITE.store(wake_w, Ordering::Release);
        DONE_READ.store(done_r, Ordering::Release);
        DONE_WRITE.store(done_w, Ordering::Release);
        // The helper is born with SIGTERM/SIGINT blocked, so they always reach another thread: a
        // handler that waited for the helper on the helper itself would wait for the full limit.
        // SAFETY: the sigsets are locals, initialised by sigemptyset / written by the kernel.
        let saved_mask = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut saved: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut saved);
            saved
        };
        let started = crate::lifecycle::threads::spawn("evenflush-signals", helper_loop);
        // SAFETY: puts back this thread's own mask, saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &saved_mask, std::ptr::null_mut()) };
        match started {
            Ok(handle) => {
                use std::os::unix::thread::JoinHandleExt;
                // Published here, not by the helper when it first runs: a signal may come first.
                HELPER.store(handle.as_pthread_t(), Ordering::Release);
            }
            Err(e) => {
                say!("evenflush: cannot start the signal thread ({e}); signals are not handled");
                return;
            }
        }
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: sigaction structs are plain data; `old` is written by the kernel before it
            // is read, and the static slot is written once, before ACTIVE_SLOT[i] publishes it.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction == libc::SIG_IGN
                {
                    // An ignored signal stays ignored: the job expects to survive it.
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction =
                    on_signal as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                (*std::ptr::addr_of_mut!(PREVIOUS_ACTIONS))[i].write(old);
                if libc::sigaction(sig, &action, std::ptr::null_mut()) == 0 {
                    ACTIVE_SLOT[i].store(true, Ordering::Release);
                }
            }
        }
    });
}

/// In a child after `fork` (called from the C layer's `pthread_atfork` child hook, so only
/// async-signal-safe calls): the previous actions come back, and the child loses the pipe to the
/// parent's helper thread, which the child does not have anyway.
pub fn after_fork_child() {
    for (i, &sig) in SIGNALS.iter().enumerate() {
        if ACTIVE_SLOT[i].swap(false, Ordering::AcqRel) {
            // SAFETY: the slot was active, so it holds the replaced action; sigaction is
            // async-signal-safe.
            unsafe { libc::sigaction(sig, previous(i), std::ptr::null_mut()) };
        }
    }
    for fd in [&WAKE_READ, &WAKE_WRITE, &DONE_READ, &DONE_WRITE] {
        let fd = fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: closing the child's copy of a descriptor we created; async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }
    HELPER.store(0, Ordering::Release);
}
