//! Per-thread trace buffers without a lock on the hot path.
//!
//! Each thread owns one [`ThreadBuf`], registered once in a global list (which is only locked when
//! a thread registers or when someone takes all buffers). Access goes through a tiny state flag,
//! so a taker (finalize, the hard-limit flush, later the offload suspension) never reads a buffer
//! while it is being appended to, which keeps `MPI_THREAD_MULTIPLE` programs correct:
//! - asymmetric mode (Linux `membarrier`, the normal case): the owner marks its buffer OWNER with a
//!   plain store, then checks a global TAKING flag; a taker sets TAKING, runs
//!   `membarrier(PRIVATE_EXPEDITED)` (a full fence on every thread of the process, which makes each
//!   owner's store visible or makes it see TAKING), waits for owners to finish and swaps the
//!   contents out. The hot path has no locked instruction (a compare-exchange costs ~10 ns here);
//!   the taker pays a few microseconds instead.
//! - fallback (no `membarrier`): owner and taker both compare-exchange IDLE -> OWNER / TAKEN.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, compiler_fence};
use std::sync::{Mutex, Once};

use std::sync::OnceLock;

use format::RawBuf;
use format::profile::ProfileStats;

/// Trace block size: one transparent huge page (see [`crate::alloc`]).
pub const BLOCK_SIZE: usize = crate::alloc::HUGE_MIN;

const IDLE: u8 = 0;
const OWNER: u8 = 1;
const TAKEN: u8 = 2;

/// What the owning thread keeps beside its events; only touched while holding the flag.
pub struct Local {
    pub buf: RawBuf,
    /// Capacity of `buf` last added to [`held_bytes`].
    counted_capacity: usize,
    /// The recorder's cost per call of each function (by id), as sampled on this thread.
    pub cost: [FuncCost; crate::functions::FUNCTIONS.len()],
    /// The latest sample of any function: charged to a function's calls until its own first
    /// sample is in.
    pub cost_any: u32,
    /// Slow-path cost measured after an event was stored, charged to the next event.
    pub cost_carry: u64,
    /// In `--mode profile`, the statistics that stand in for the event trace (constant memory).
    profile: Option<Box<ProfileStats>>,
    /// Call sites this thread has named lately (`--callsites`).
    pub sites: crate::front::callsites::SiteCache,
}

/// One function's cost estimate on one thread (see `crate::front::cost`).
#[derive(Clone, Copy, Debug, Default)]
pub struct FuncCost {
    /// Ticks charged per call; 0 until the first sample.
    pub estimate: u32,
    /// Calls of the function until its next sampled one. Sampling per function: with one
    /// countdown per thread, a loop of 4 calls and a period of 32 sampled the same call of the
    /// loop every time, and the others kept their first, cold, sample.
    pub countdown: u16,
    /// Samples taken so far (saturating).
    pub samples: u16,
}

/// Set once profile mode starts; every thread's statistics start as a copy of it.
static PROFILE_TEMPLATE: OnceLock<ProfileStats> = OnceLock::new();
static PROFILING: AtomicBool = AtomicBool::new(false);

/// Switches the recorder to profile mode: from now on events feed statistics, not buffers.
pub fn enable_profile(template: ProfileStats) {
    if PROFILE_TEMPLATE.set(template).is_ok() {
        PROFILING.store(true, Ordering::Release);
    }
}

/// Whether profile mode is on (events feed statistics instead of buffers).
#[inline(always)]
pub fn profiling() -> bool {
    PROFILING.load(Ordering::Relaxed)
}

impl Local {
    /// The thread's profile statistics in profile mode, `None` when recording a trace.
    #[inline]
    pub fn profile(&mut self) -> Option<&mut ProfileStats> {
        if !PROFILING.load(Ordering::Relaxed) {
            return None;
        }
        if self.profile.is_none() {
            self.profile = Some(Box::new(PROFILE_TEMPLATE.get()?.clone()));
        }
        self.profile.as_deref_mut()
    }
}

pub struct ThreadBuf {
    state: AtomicU8,
    pub stream: u32,
    /// Bytes of records in `local.buf`, published by the owner after every append (a plain
    /// store) so the suspension can compare the trace size with S without taking any buffer.
    used: AtomicU64,
    /// Events in `local.buf`, published like `used`: when a crash leaves this buffer in use, this
    /// is how many events a taker counts as lost without reading the buffer.
    events: AtomicU64,
    /// The thread's last call was not recorded (filter or `MPI_Pcontrol(0)`), so neither are its
    /// completions. Only the owning thread reads or writes it.
    pub skipping: AtomicBool,
    /// Storing a call or one of its completions took a new block: the back end hears of it
    /// before this thread's next record instead of at once, because what it does (a memory
    /// sample, a local flush) writes records, and none may come between a call and its
    /// completions (FORMAT.md). Only the owning thread reads or writes it.
    pub growth_pending: AtomicBool,
    /// This thread's reserved request ids. Only the owning thread uses it.
    pub request_ids: crate::front::requests::IdBlock,
    local: UnsafeCell<Local>,
}

// SAFETY: `local` is only accessed by whoever moved `state` away from IDLE (the owner for an
// append, a taker for a swap); the Acquire/Release pairs on `state` order those accesses.
unsafe impl Sync for ThreadBuf {}

static REGISTRY: Mutex<Vec<&'static ThreadBuf>> = Mutex::new(Vec::new());
static MODE: Once = Once::new();
static ASYMMETRIC: AtomicBool = AtomicBool::new(false);
static TAKING: AtomicBool = AtomicBool::new(false);
static TAKERS: Mutex<()> = Mutex::new(());

const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long) }
}

/// Chooses the synchronisation mode once, before the first buffer exists (modes must not mix).
fn choose_mode() {
    MODE.call_once(|| {
        let disabled = std::env::var_os("EVENFLUSH_NO_MEMBARRIER").is_some();
        let supported = membarrier(MEMBARRIER_CMD_QUERY);
        let usable = !disabled
            && supported > 0
            && supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
        ASYMMETRIC.store(usable, Ordering::Relaxed);
    });
}

/// Whether the lock-free-for-owners (membarrier) mode is in use.
pub fn asymmetric_mode() -> bool {
    ASYMMETRIC.load(Ordering::Relaxed)
}

#[inline(always)]
fn acquire_owner(tb: &ThreadBuf) {
    if ASYMMETRIC.load(Ordering::Relaxed) {
        loop {
            tb.state.store(OWNER, Ordering::Relaxed);
            // Only the compiler must not reorder here; the taker's membarrier supplies the fence.
            compiler_fence(Ordering::SeqCst);
            if !TAKING.load(Ordering::Acquire) {
                return;
            }
            tb.state.store(IDLE, Ordering::Release);
            while TAKING.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
    } else {
        while tb
            .state
            .compare_exchange_weak(IDLE, OWNER, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }
}

#[inline(always)]
fn release_owner(tb: &ThreadBuf) {
    tb.state.store(IDLE, Ordering::Release);
}
static HELD: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MINE: Cell<Option<&'static ThreadBuf>> = const { Cell::new(None) };
}

/// Bytes of buffer memory the recorder holds right now (capacity of all blocks of all threads).
pub fn held_bytes() -> u64 {
    HELD.load(Ordering::Relaxed)
}

/// Bytes of trace records held right now over all threads: the paper's b, compared with S. Each
/// thread's figure is as of its latest append.
pub fn used_bytes() -> u64 {
    let reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    reg.iter().map(|tb| tb.used.load(Ordering::Relaxed)).sum()
}

fn register() -> &'static ThreadBuf {
    choose_mode();
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let tb: &'static ThreadBuf = Box::leak(Box::new(ThreadBuf {
        state: AtomicU8::new(IDLE),
        stream: reg.len() as u32,
        used: AtomicU64::new(0),
        events: AtomicU64::new(0),
        skipping: AtomicBool::new(false),
        growth_pending: AtomicBool::new(false),
        request_ids: Default::default(),
        local: UnsafeCell::new(Local {
            buf: RawBuf::with_block_size(BLOCK_SIZE),
            counted_capacity: 0,
            cost: [FuncCost::default(); crate::functions::FUNCTIONS.len()],
            cost_any: 0,
            cost_carry: 0,
            sites: [(0, 0); crate::front::callsites::CACHE_SLOTS],
            profile: None,
        }),
    }));
    reg.push(tb);
    tb
}

/// This thread's buffer, registering it on first use.
#[inline]
pub fn mine() -> &'static ThreadBuf {
    MINE.with(|m| match m.get() {
        Some(tb) => tb,
        None => {
            let tb = register();
            m.set(Some(tb));
            tb
        }
    })
}

/// Runs `f` on this thread's buffer. Returns the change of held bytes caused by `f` (growth).
#[inline]
pub fn with_mine<R>(f: impl FnOnce(&mut Local) -> R) -> (R, i64) {
    with_buf(mine(), f)
}

/// Like [`with_mine`] on a buffer the caller already looked up with [`mine`] on this thread (the C
/// layer caches it in an initial-exec TLS slot, cheaper than Rust's thread-local in a cdylib).
#[inline]
pub fn with_buf<R>(tb: &ThreadBuf, f: impl FnOnce(&mut Local) -> R) -> (R, i64) {
    acquire_owner(tb);
    // SAFETY: the flag is ours (OWNER, and no taker is active), so nobody else touches `local`
    // until we release it.
    let local = unsafe { &mut *tb.local.get() };
    let r = f(local);
    let delta = account(local);
    tb.used.store(local.buf.bytes() as u64, Ordering::Relaxed);
    tb.events.store(local.buf.events(), Ordering::Relaxed);
    release_owner(tb);
    (r, delta)
}

/// [`with_buf`] for the hot path: `f` says whether the buffer may have grown (a block was
/// allocated), and only then is the held memory recounted.
#[inline(always)]
pub fn with_buf_hot<R>(tb: &ThreadBuf, f: impl FnOnce(&mut Local) -> (R, bool)) -> (R, i64) {
    acquire_owner(tb);
    // SAFETY: as in `with_buf`: the flag is ours until released below.
    let local = unsafe { &mut *tb.local.get() };
    let (r, may_have_grown) = f(local);
    let delta = if may_have_grown { account(local) } else { 0 };
    tb.used.store(local.buf.bytes() as u64, Ordering::Relaxed);
    tb.events.store(local.buf.events(), Ordering::Relaxed);
    release_owner(tb);
    (r, delta)
}

/// Like [`with_mine`], but gives up instead of waiting (signal handlers: the interrupted code may
/// be this very thread, halfway through an append).
pub fn try_with_mine<R>(f: impl FnOnce(&mut Local) -> R) -> Option<R> {
    let tb = mine();
    if ASYMMETRIC.load(Ordering::Relaxed) {
        // Only this thread ever sets its own buffer to OWNER: if it is, we interrupted an append.
        if tb.state.load(Ordering::Relaxed) != IDLE {
            return None;
        }
        tb.state.store(OWNER, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        if TAKING.load(Ordering::Acquire) {
            tb.state.store(IDLE, Ordering::Release);
            return None;
        }
    } else {
        tb.state
            .compare_exchange(IDLE, OWNER, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
    }
    // SAFETY: as in `with_mine`.
    let local = unsafe { &mut *tb.local.get() };
    let r = f(local);
    account(local);
    tb.state.store(IDLE, Ordering::Release);
    Some(r)
}

fn account(local: &mut Local) -> i64 {
    let cap = local.buf.capacity_bytes();
    if cap == local.counted_capacity {
        return 0;
    }
    let delta = cap as i64 - local.counted_capacity as i64;
    local.counted_capacity = cap;
    if delta > 0 {
        HELD.fetch_add(delta as u64, Ordering::Relaxed);
    } else {
        HELD.fetch_sub((-delta) as u64, Ordering::Relaxed);
    }
    delta
}

/// One thread's events, taken out of its buffer.
pub struct Taken {
    pub stream: u32,
    pub buf: RawBuf,
    /// Profile mode: the thread's statistics.
    pub profile: Option<Box<ProfileStats>>,
}

/// What [`take_all`] could not take.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Busy {
    pub streams: Vec<u32>,
    /// Events held in those buffers as of their last completed append, plus one per buffer for
    /// the append in progress: at most this many events are lost with them.
    pub events: u64,
}

/// Takes every thread's buffered events (empty buffers are skipped) and frees their memory.
/// With `patience = None` it waits for each owner to finish its current append; with
/// `Some(spins)` it gives up on a buffer after that many attempts and reports it as busy.
pub fn take_all(patience: Option<u64>) -> (Vec<Taken>, Busy) {
    choose_mode();
    // Another thread holding these locks is usually only passing through (used_bytes takes the
    // registry after every growth): retry for as long as the patience allows before giving up.
    let unknown = || {
        (
            Vec::new(),
            Busy {
                streams: vec![u32::MAX],
                events: 0,
            },
        )
    };
    let reg: Vec<&'static ThreadBuf> = {
        let Some(guard) = lock_with_patience(&REGISTRY, patience) else {
            return unknown();
        };
        guard.clone()
    };
    let Some(_takers) = lock_with_patience(&TAKERS, patience) else {
        return unknown();
    };
    let asymmetric = ASYMMETRIC.load(Ordering::Relaxed);
    if asymmetric {
        TAKING.store(true, Ordering::SeqCst);
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    }
    let mut taken = Vec::new();
    let mut busy = Busy::default();
    for tb in reg {
        let mut tries = 0u64;
        let mut got = true;
        loop {
            let free = if asymmetric {
                tb.state.load(Ordering::Acquire) == IDLE
            } else {
                tb.state
                    .compare_exchange_weak(IDLE, TAKEN, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            };
            if free {
                break;
            }
            tries += 1;
            if patience.is_some_and(|p| tries > p) {
                got = false;
                break;
            }
            if tries.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if !got {
            busy.streams.push(tb.stream);
            busy.events += tb.events.load(Ordering::Relaxed) + 1;
            continue;
        }
        // SAFETY: no owner can be inside its buffer now: in asymmetric mode it is IDLE and any new
        // append waits for TAKING to clear; otherwise the flag is ours (TAKEN).
        let local = unsafe { &mut *tb.local.get() };
        if !local.buf.is_empty() || local.profile.is_some() {
            let buf = std::mem::replace(&mut local.buf, RawBuf::with_block_size(BLOCK_SIZE));
            taken.push(Taken {
                stream: tb.stream,
                buf,
                profile: local.profile.take(),
            });
        }
        account(local);
        tb.used.store(local.buf.bytes() as u64, Ordering::Relaxed);
        tb.events.store(local.buf.events(), Ordering::Relaxed);
        if !asymmetric {
            tb.state.store(IDLE, Ordering::Release);
        }
    }
    if asymmetric {
        TAKING.store(false, Ordering::Release);
    }
    (taken, busy)
}

/// Takes every thread's buffered events, for a writer (offload suspension, finalize).
pub fn take_all_buffers() -> Vec<Taken> {
    take_all(None).0
}

/// Locks `m`, waiting as long as it takes with `patience = None`, or for at most that many
/// attempts.
fn lock_with_patience<T>(
    m: &Mutex<T>,
    patience: Option<u64>,
) -> Option<std::sync::MutexGuard<'_, T>> {
    let Some(spins) = patience else {
        return Some(m.lock().unwrap_or_else(|e| e.into_inner()));
    };
    for attempt in 0..=spins {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                if attempt % 1024 == 1023 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
    None
}

/// Number of threads that ever recorded.
pub fn thread_count() -> usize {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::MpiCall;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};

    /// Tests that take every buffer must not run at the same time (buffers are process-wide).
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn membarrier_mode_is_available_here() {
        choose_mode();
        // This machine's kernel supports it (feasibility.md: Debian 12); the fallback is tested by
        // running the suite with EVENFLUSH_NO_MEMBARRIER=1.
        if std::env::var_os("EVENFLUSH_NO_MEMBARRIER").is_none() {
            assert!(asymmetric_mode());
        } else {
            assert!(!asymmetric_mode());
        }
    }

    #[test]
    fn concurrent_appends_and_takes_lose_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        const THREADS: u64 = 4;
        const PER_THREAD: u64 = 50_000;
        let stop = Arc::new(AtomicBool::new(false));
        let start = Arc::new(Barrier::new(THREADS as usize + 1));
        let mut handles = Vec::new();
        for t in 0..THREADS {
            let start = start.clone();
            handles.push(std::thread::spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    let call = MpiCall {
                        func: 7,
                        start: i,
                        end: i + 1,
                        tag: t as i32,
                        ..Default::default()
                    };
                    with_mine(|l| l.buf.push_call(&call));
                }
                mine().stream
            }));
        }
        let streams_seen = Arc::new(Mutex::new(std::collections::HashMap::<u32, u64>::new()));
        let taker = {
            let stop = stop.clone();
            let seen = streams_seen.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (taken, busy) = take_all(None);
                    assert!(busy.streams.is_empty());
                    let mut seen = seen.lock().unwrap();
                    for t in taken {
                        *seen.entry(t.stream).or_default() += t.buf.events();
                    }
                    std::thread::yield_now();
                }
            })
        };
        start.wait();
        let streams: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        taker.join().unwrap();
        let (rest, _) = take_all(None);
        let mut seen = streams_seen.lock().unwrap();
        for t in rest {
            *seen.entry(t.stream).or_default() += t.buf.events();
        }
        for s in streams {
            assert_eq!(seen.get(&s).copied().unwrap_or(0), PER_THREAD, "stream {s}");
        }
    }

    #[test]
    fn growth_is_reported_and_taking_releases_it() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(|| {
            let ((), grew) = with_mine(|l| l.buf.push_call(&MpiCall::default()));
            let cap = with_mine(|l| l.buf.capacity_bytes()).0;
            assert!(cap > 0);
            assert_eq!(
                grew, cap as i64,
                "the first append allocates the whole capacity"
            );
            let ((), again) = with_mine(|l| l.buf.push_call(&MpiCall::default()));
            assert_eq!(again, 0, "a second small append fits in the block");
            let (taken, _) = take_all(None);
            let mine_taken = taken
                .iter()
                .find(|t| t.stream == mine().stream)
                .expect("own buffer taken");
            assert_eq!(mine_taken.buf.events(), 2);
            assert_eq!(
                with_mine(|l| l.buf.capacity_bytes()).0,
                0,
                "taking frees the memory"
            );
        })
        .join()
        .unwrap();
    }
}
