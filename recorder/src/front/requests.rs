//! MPI request handles -> unique request ids. A handle value is reused by MPI once its request is
//! freed, so ids come from a counter, and completion of a non-persistent request forgets the
//! handle. Persistent requests keep their id across `MPI_Start`s until `MPI_Request_free`.
//!
//! Two live requests can share one handle value: MPICH hands out a single pre-completed
//! "lightweight" request for small sends that finished at once, so two `MPI_Isend`s of a halo
//! exchange may both return it. Such duplicates queue behind the first, in creation order, and
//! complete in that order (the order a `Waitall` over them reports them in).
//!
//! Only such preallocated handles are ever shared (the C layer tells them apart). Any other handle
//! names one live request at a time, so an entry found under it when a new request is created is
//! stale: its request ended where the recorder did not see it complete (a `Waitall` that failed
//! with `MPI_ERR_IN_STATUS`, a free inside a callback). The stale entry is dropped rather than
//! queued in front of the new request, which would hand the new request's completion to it.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use format::NO_REQUEST;

/// What the request does (decides which status fields mean something at completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqKind {
    Send,
    Recv,
    Other,
}

#[derive(Clone, Copy, Debug)]
struct ReqInfo {
    id: u64,
    kind: ReqKind,
    bytes: u64,
    persistent: bool,
    active: bool,
}

/// What a completion resolved to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub id: u64,
    pub kind: ReqKind,
    /// Bytes given when the request was created (what a send sends).
    pub bytes: u64,
}

/// Request handles are pointers (Open MPI) or small tagged integers (MPICH), not attacker input:
/// one multiply spreads them well enough and costs far less than SipHash on this hot-ish path.
#[derive(Default)]
struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type HandleMap<V> = HashMap<u64, V, BuildHasherDefault<HandleHasher>>;

#[derive(Default)]
struct Table {
    map: HandleMap<ReqInfo>,
    /// Further live requests holding a handle already in `map` (see the module comment). Kept
    /// apart so the common path never allocates a queue. A queue stays when it empties: the few
    /// shared handles (one per MPI library) fill it again at once, and dropping it cost a
    /// deallocation, a fresh allocation and two more hash operations per such request.
    shared: HandleMap<std::collections::VecDeque<ReqInfo>>,
}

/// Whether the table is shared by threads that may call MPI at once (`MPI_THREAD_MULTIPLE`, or a
/// level not known), so every access takes its shard's lock and ids come from an atomic counter.
/// Below `MPI_THREAD_MULTIPLE` at most one thread is in MPI at a time, and the program orders its
/// threads' MPI calls itself (SERIALIZED) or makes them all on one thread (SINGLE, FUNNELED), so
/// the table needs no lock of its own: the locks and the counter's read-modify-write were three of
/// the locked instructions (~8 ns each here) of every request. Starts locked, the safe choice,
/// until the world model's thread level is known; a session (whose thread level is its own) locks
/// it for good.
static LOCKING: AtomicBool = AtomicBool::new(true);
/// Set once a session was seen: no later thread level may unlock the table.
static PINNED_LOCKING: AtomicBool = AtomicBool::new(false);

/// `MPI_THREAD_MULTIPLE` in both MPI ABIs this library is built for.
const MPI_THREAD_MULTIPLE: i32 = 3;

/// The thread level MPI provided to the world model (`MPI_Init_thread`'s, or
/// `MPI_Query_thread`'s after `MPI_Init`); negative when unknown. Called on the thread that
/// initialised MPI, before any request exists.
pub fn set_thread_level(level: i32) {
    let serial = (0..MPI_THREAD_MULTIPLE).contains(&level);
    if !PINNED_LOCKING.load(Ordering::Relaxed) {
        LOCKING.store(!serial, Ordering::Release);
    }
}

/// Whether the table takes its locks (reported with `EVENFLUSH_VERBOSE`, so a test sees the
/// choice).
pub fn locking() -> bool {
    LOCKING.load(Ordering::Relaxed)
}

/// A session was initialised: its thread level is its own, so threads may use it at once.
pub fn lock_for_sessions() {
    PINNED_LOCKING.store(true, Ordering::Relaxed);
    LOCKING.store(true, Ordering::Release);
}

/// The table is split by handle into shards, each behind its own lock: under
/// `MPI_THREAD_MULTIPLE` one lock for every `Isend`, `Irecv` and completion serialised the
/// application's threads on it. A request may complete on another thread than the one that made
/// it, so the shards are shared, not per thread; everything about one handle lives in one shard.
///
/// The lock is a spin lock taken with one compare-exchange and released with a plain store:
/// `std::sync::Mutex` takes a read-modify-write to lock and another to unlock (to look for
/// waiters), and every request pays both twice (creation, completion), ~8 ns each on the
/// development VM. A shard is held for a hash-map operation only, and 64 shards make contention
/// rare; a waiter yields its core after a few spins.
const SHARDS: usize = 64;

struct Shard {
    locked: AtomicBool,
    table: UnsafeCell<Option<Table>>,
}

// SAFETY: `table` is only touched by the thread that set `locked` (Acquire) until it clears it
// (Release), see `with_table`.
unsafe impl Sync for Shard {}

static TABLES: [Shard; SHARDS] = [const {
    Shard {
        locked: AtomicBool::new(false),
        table: UnsafeCell::new(None),
    }
}; SHARDS];
/// Ids are unique in the process (a completion on any thread must find its request's). Threads
/// take them in blocks of [`ID_BLOCK`] ([`IdBlock`]): a read-modify-write of this shared counter
/// per request was ~6 ns of every `Isend`/`Irecv`. A single-threaded program still numbers its
/// requests 1, 2, 3, ..., the small serials the trace encodes in one byte.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
const ID_BLOCK: u64 = 4096;

/// A thread's reserved run of request ids, kept in its [`crate::front::buffers::ThreadBuf`] (which
/// the C layer passes in, so no thread-local lookup). Only the owning thread touches it; the
/// atomics are plain loads and stores, there only because the buffer is shared with takers.
#[derive(Debug, Default)]
pub struct IdBlock {
    next: AtomicU64,
    end: AtomicU64,
}

impl IdBlock {
    /// A fresh id unique in the process. Must be called by the owning thread only.
    #[inline]
    pub fn take(&self) -> u64 {
        let id = self.next.load(Ordering::Relaxed);
        if id < self.end.load(Ordering::Relaxed) {
            self.next.store(id + 1, Ordering::Relaxed);
            return id;
        }
        let first = NEXT_ID.fetch_add(ID_BLOCK, Ordering::Relaxed);
        self.next.store(first + 1, Ordering::Relaxed);
        self.end.store(first + ID_BLOCK, Ordering::Relaxed);
        first
    }
}

/// Releases a shard's lock when dropped.
struct ShardGuard<'a>(&'a AtomicBool);

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Runs `f` on the table of `handle`'s shard.
#[inline]
fn with_table<R>(handle: u64, f: impl FnOnce(&mut Table) -> R) -> R {
    let index = ((handle ^ (handle >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize;
    let shard = &TABLES[index % SHARDS];
    if !LOCKING.load(Ordering::Acquire) {
        // SAFETY: below MPI_THREAD_MULTIPLE only one thread is in an MPI call at a time, and the
        // program's own synchronisation orders one thread's calls before the next one's, so no
        // two threads touch a shard at once (see `LOCKING`); `f` does not reenter the table.
        let table = unsafe { &mut *shard.table.get() }.get_or_insert_with(Table::default);
        return f(table);
    }
    let mut spins = 0u32;
    while shard
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    let _guard = ShardGuard(&shard.locked);
    // SAFETY: the shard's lock is ours (taken above, released by the guard after `f`), so no
    // other thread touches its table meanwhile; `f` does not reenter the request table.
    let table = unsafe { &mut *shard.table.get() }.get_or_insert_with(Table::default);
    f(table)
}

/// A request was created (`Isend`, `Irecv`, `Send_init`, ...) on the thread owning `ids`.
/// Returns its new id.
pub fn create(ids: &IdBlock, handle: u64, kind: ReqKind, bytes: u64, persistent: bool) -> u64 {
    create_with(ids.take(), handle, kind, bytes, persistent, |h| {
        crate::mpi_link::link().is_none_or(|l| l.request_shared(h))
    })
}

/// [`create`] with the id and the test for shared handles given (the C layer's, or a test's).
fn create_with(
    id: u64,
    handle: u64,
    kind: ReqKind,
    bytes: u64,
    persistent: bool,
    shared: impl FnOnce(u64) -> bool,
) -> u64 {
    with_table(handle, |t| {
        let info = ReqInfo {
            id,
            kind,
            bytes,
            persistent,
            active: !persistent,
        };
        match t.map.entry(handle) {
            Entry::Occupied(live) if !live.get().persistent && !persistent && shared(handle) => {
                t.shared.entry(handle).or_default().push_back(info);
            }
            Entry::Occupied(mut stale) => {
                // Whatever was under this handle is over: never let it take this request's place.
                stale.insert(info);
                forget_queued(t, handle);
            }
            Entry::Vacant(free) => {
                free.insert(info);
                forget_queued(t, handle);
            }
        }
        id
    })
}

/// A persistent request was started; returns its id (or [`NO_REQUEST`] if the handle is unknown).
pub fn start(handle: u64) -> u64 {
    with_table(handle, |t| match t.map.get_mut(&handle) {
        Some(info) => {
            info.active = true;
            info.id
        }
        None => NO_REQUEST,
    })
}

/// A call that works on a live request without starting, completing or freeing it (`MPI_Pready`,
/// `MPI_Parrived`): its id, or [`NO_REQUEST`] if the handle is unknown (made before recording).
pub fn lookup(handle: u64) -> u64 {
    with_table(handle, |t| t.map.get(&handle).map_or(NO_REQUEST, |i| i.id))
}

/// `MPI_Request_free`: forgets the handle; returns the id it had. Of several live requests
/// sharing the handle the oldest goes (they are indistinguishable to MPI as well), and the next
/// one takes its place, as at a completion.
pub fn free(handle: u64) -> u64 {
    with_table(handle, |t| {
        let freed = t.map.remove(&handle).map_or(NO_REQUEST, |i| i.id);
        promote_shared(t, handle);
        freed
    })
}

fn promote_shared(t: &mut Table, handle: u64) {
    // Queues exist only for the preallocated handles: most tables never hold one.
    if t.shared.is_empty() {
        return;
    }
    if let Some(next) = t.shared.get_mut(&handle).and_then(|q| q.pop_front()) {
        t.map.insert(handle, next);
    }
}

/// Drops the requests queued behind `handle`: they are over (see the module comment).
fn forget_queued(t: &mut Table, handle: u64) {
    if t.shared.is_empty() {
        return;
    }
    if let Some(queue) = t.shared.get_mut(&handle) {
        queue.clear();
    }
}

/// A request completed. `None` when the handle names an inactive persistent request (MPI then
/// returns an empty status, nothing happened). Unknown handles (created before recording began)
/// resolve to [`NO_REQUEST`] of unknown kind.
pub fn complete(handle: u64) -> Option<Resolved> {
    with_table(handle, |t| {
        let Entry::Occupied(mut entry) = t.map.entry(handle) else {
            return Some(Resolved {
                id: NO_REQUEST,
                kind: ReqKind::Other,
                bytes: 0,
            });
        };
        let info = if entry.get().persistent {
            let info = entry.get_mut();
            if !info.active {
                return None;
            }
            info.active = false;
            *info
        } else {
            let info = entry.remove();
            promote_shared(t, handle);
            info
        };
        Some(Resolved {
            id: info.id,
            kind: info.kind,
            bytes: info.bytes,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static IDS: IdBlock = IdBlock::default();
    }

    fn create(handle: u64, kind: ReqKind, bytes: u64, persistent: bool) -> u64 {
        IDS.with(|ids| super::create(ids, handle, kind, bytes, persistent))
    }

    fn create_with(
        handle: u64,
        kind: ReqKind,
        bytes: u64,
        persistent: bool,
        shared: impl FnOnce(u64) -> bool,
    ) -> u64 {
        IDS.with(|ids| super::create_with(ids.take(), handle, kind, bytes, persistent, shared))
    }

    /// Ids from per-thread blocks: consecutive on one thread (small deltas in the trace), never
    /// repeated across threads, also once a block is used up.
    #[test]
    fn id_blocks_are_consecutive_per_thread_and_unique_across_threads() {
        let per_thread = 3 * ID_BLOCK as usize + 5;
        let taken: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(move || {
                        let ids = IdBlock::default();
                        (0..per_thread).map(|_| ids.take()).collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for ids in &taken {
            let steps = ids.windows(2).filter(|w| w[1] == w[0] + 1).count();
            assert!(steps >= per_thread - 1 - 3, "ids jump only between blocks");
        }
        let mut all: Vec<u64> = taken.into_iter().flatten().collect();
        assert!(all.iter().all(|&id| id != NO_REQUEST));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4 * per_thread);
    }

    /// A shared handle's queue outlives its requests (kept for the next round): rounds after it
    /// complete in order, and a stale entry replaced by a unique request leaves nothing queued.
    #[test]
    fn a_kept_queue_serves_later_rounds_and_never_outlives_a_stale_entry() {
        let h = 0x6000_0006;
        for _ in 0..3 {
            let made: Vec<u64> = (0..5)
                .map(|i| create_with(h, ReqKind::Send, i, false, |_| true))
                .collect();
            let done: Vec<u64> = (0..5).map(|_| complete(h).unwrap().id).collect();
            assert_eq!(done, made);
            assert_eq!(complete(h).map(|r| r.id), Some(NO_REQUEST));
        }
        let _a = create_with(h, ReqKind::Send, 1, false, |_| true);
        let _b = create_with(h, ReqKind::Send, 2, false, |_| true);
        // The handle now names one live request only: the two above ended unseen.
        let c = create_with(h, ReqKind::Recv, 3, false, |_| false);
        assert_eq!(complete(h).map(|r| r.id), Some(c));
        assert_eq!(complete(h).map(|r| r.id), Some(NO_REQUEST));
    }

    // Handles are picked far apart per test because the table is process-wide.
    #[test]
    fn nonpersistent_requests_get_fresh_ids_when_handles_are_reused() {
        let h = 0x1000_0001;
        let a = create(h, ReqKind::Send, 64, false);
        assert_eq!(
            complete(h),
            Some(Resolved {
                id: a,
                kind: ReqKind::Send,
                bytes: 64
            })
        );
        let b = create(h, ReqKind::Recv, 8, false);
        assert_ne!(a, b);
        assert_eq!(complete(h).map(|r| r.id), Some(b));
        assert_eq!(
            complete(h).map(|r| r.id),
            Some(NO_REQUEST),
            "a forgotten handle is unknown"
        );
    }

    #[test]
    fn requests_sharing_a_handle_complete_in_creation_order() {
        let h = 0x3000_0003;
        let a = create(h, ReqKind::Send, 8, false);
        let b = create(h, ReqKind::Send, 16, false);
        let c = create(h, ReqKind::Send, 24, false);
        let done: Vec<_> = (0..3).map(|_| complete(h).unwrap()).collect();
        assert_eq!(done.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a, b, c]);
        assert_eq!(
            done.iter().map(|r| r.bytes).collect::<Vec<_>>(),
            vec![8, 16, 24]
        );
        assert_eq!(
            complete(h).map(|r| r.id),
            Some(NO_REQUEST),
            "all three were completed"
        );
    }

    #[test]
    fn a_stale_entry_never_takes_a_new_requests_completion() {
        // A request whose completion the recorder never saw (MPI_ERR_IN_STATUS) leaves its entry;
        // MPI then reuses the handle, which names one live request only.
        let h = 0x4000_0004;
        let unique = |_| false;
        let stale = create_with(h, ReqKind::Send, 8, false, unique);
        let fresh = create_with(h, ReqKind::Recv, 16, false, unique);
        assert_ne!(stale, fresh);
        let done = complete(h).unwrap();
        assert_eq!((done.id, done.bytes), (fresh, 16));
        assert_eq!(complete(h).map(|r| r.id), Some(NO_REQUEST));
    }

    #[test]
    fn freeing_a_shared_handle_keeps_the_others_in_order() {
        let h = 0x5000_0005;
        let shared = |_| true;
        let a = create_with(h, ReqKind::Send, 1, false, shared);
        let b = create_with(h, ReqKind::Send, 2, false, shared);
        let c = create_with(h, ReqKind::Send, 3, false, shared);
        assert_eq!(free(h), a);
        assert_eq!(complete(h).map(|r| r.id), Some(b));
        assert_eq!(complete(h).map(|r| r.id), Some(c));
        // Nothing left behind to be handed the next request's completion.
        let d = create_with(h, ReqKind::Send, 4, false, shared);
        assert_eq!(complete(h).map(|r| r.id), Some(d));
    }

    #[test]
    fn persistent_requests_keep_their_id_until_freed() {
        let h = 0x2000_0002;
        let id = create(h, ReqKind::Recv, 16, true);
        assert_eq!(complete(h), None, "not started yet: nothing completes");
        for _ in 0..3 {
            assert_eq!(start(h), id);
            assert_eq!(lookup(h), id, "a Pready names the started request");
            assert_eq!(complete(h).map(|r| r.id), Some(id));
        }
        assert_eq!(free(h), id);
        assert_eq!(start(h), NO_REQUEST);
    }

    /// Threads making and completing requests at once, one completing what another made: every
    /// completion finds its own request, ids stay unique.
    #[test]
    fn threads_share_the_table_without_losing_requests() {
        let made: Vec<Vec<(u64, u64)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    scope.spawn(move || {
                        (0..2000u64)
                            .map(|i| {
                                let h = 0x7000_0000 + t * 0x10_0000 + i * 8;
                                (h, create_with(h, ReqKind::Send, i, false, |_| false))
                            })
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut ids: Vec<u64> = made.iter().flatten().map(|&(_, id)| id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 4 * 2000);
        // Completed on other threads than the ones that made them.
        std::thread::scope(|scope| {
            for batch in made.iter().rev() {
                scope.spawn(move || {
                    for &(h, id) in batch {
                        assert_eq!(complete(h).map(|r| r.id), Some(id));
                    }
                });
            }
        });
    }
}
