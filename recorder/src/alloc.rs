//! Global allocator of the preload libraries: trace blocks (2 MiB and up) come from their own
//! 2 MiB-aligned mappings, and released blocks of the standard size are kept for the next buffer;
//! everything else comes from the system allocator.
//!
//! Why pool: every flush frees the buffer, and putting the next events into freshly mapped memory
//! cost the program time right after each suspension that reconstruction cannot remove (the
//! indirect perturbation HP'): the iteration after a flush ran ~270-300 µs slower (median) than in
//! the reference; with the pool, +10-40 µs. The blocks a flush frees are the ones the next events go
//! into, already mapped and warm. The pool is sized from S (a buffer's blocks are kept from one
//! flush to the next), and `MPI_Init` fills it with the blocks of the first fill ([`prefill`]):
//! a block mapped on one rank in the middle of the run delays that rank alone, and its partners
//! wait for it at their next collective, a wait that removing DP from the rank that mapped cannot
//! give back to the others.
//!
//! Why each block is faulted in completely when it is mapped: faulted in lazily, a growing buffer
//! takes its faults inside the program's time, unmeasured (it made in-memory reference runs ~2 %
//! slower than reconstructed offload runs); faulted at allocation, they are part of the
//! allocation the recorder measures and charges as its cost (DP). Blocks ask for transparent huge
//! pages, so that is one fault per 2 MiB where the kernel has one to give: with plain pages, 512
//! faults per block cost ~55 ns per recorded event on this VM (recorder cost 64-152 ns per event
//! against 26-45 ns). With the kernel's default `defrag=madvise` a huge-page fault may compact
//! memory synchronously (~4 ms, at unpredictable moments); that time now lands in the measured
//! allocation too. Blocks are touched with plain writes rather than populated with
//! `MADV_POPULATE_WRITE`, which, in a memory cgroup at its limit with swap available, got the job
//! OOM-killed where faulted pages were swapped out (the swap-versus-offload experiment at
//! M = 1 GiB, 512 MiB limit).
//! Only the Rust code of the preload library allocates through this; the application's `malloc`
//! is untouched.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations at least this large get their own huge-page mapping.
pub const HUGE_MIN: usize = 2 << 20;
const HUGE_ALIGN: usize = 2 << 20;

pub struct HugeBlockAlloc;

fn is_huge(layout: &Layout) -> bool {
    layout.size() >= HUGE_MIN && layout.align() <= HUGE_ALIGN
}

fn mapped_len(size: usize) -> usize {
    size.div_ceil(HUGE_ALIGN) * HUGE_ALIGN
}

unsafe fn map_huge(size: usize) -> *mut u8 {
    FRESH_MAPS.fetch_add(1, Ordering::Relaxed);
    let len = mapped_len(size);
    let Some(total) = len.checked_add(HUGE_ALIGN) else {
        return std::ptr::null_mut();
    };
    // SAFETY: an anonymous private mapping; nothing else refers to the range until we return it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        let start = p as usize;
        let aligned = start.div_ceil(HUGE_ALIGN) * HUGE_ALIGN;
        let head = aligned - start;
        if head > 0 {
            libc::munmap(p, head);
        }
        let tail = total - head - len;
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Huge pages where the kernel has them: one fault maps the whole block. Then fault every
        // page in now (a no-op after a huge-page fault), while the recorder measures this
        // allocation as its own cost (a slow path charged to DP), rather than one page every ~75
        // events later, inside the program's time and unmeasured. Plain writes, not
        // MADV_POPULATE_WRITE: see the module documentation.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        let mut page = 0;
        while page < len {
            std::ptr::write_volatile((aligned as *mut u8).add(page), 0);
            page += 4096;
        }
        aligned as *mut u8
    }
}

/// Released standard-size blocks kept for reuse, as a stack. The buffer refills to the flush
/// threshold before the next flush anyway, so keeping what it had does not raise the peak; the
/// pool keeps up to [`POOL_KEEP`] blocks (set from S, see [`size_for_threshold`]) and unmaps the
/// rest. Slots for 1 GiB of blocks: beyond that a fresh mapping per flush cycle costs little
/// against the time the flush of such a buffer takes.
const POOL_SLOTS: usize = 512;
struct Pool {
    blocks: [usize; POOL_SLOTS],
    len: usize,
}
static POOL: Mutex<Pool> = Mutex::new(Pool {
    blocks: [0; POOL_SLOTS],
    len: 0,
});
/// How many released blocks the pool keeps (64 MiB until the recorder knows S).
static POOL_KEEP: AtomicUsize = AtomicUsize::new(32);

fn is_standard(size: usize) -> bool {
    mapped_len(size) == HUGE_ALIGN
}

fn pool_take() -> Option<*mut u8> {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len == 0 {
        return None;
    }
    pool.len -= 1;
    let len = pool.len;
    Some(std::mem::take(&mut pool.blocks[len]) as *mut u8)
}

fn pool_keep(ptr: *mut u8) -> bool {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len >= POOL_KEEP.load(Ordering::Relaxed).min(POOL_SLOTS) {
        return false;
    }
    let len = pool.len;
    pool.blocks[len] = ptr as usize;
    pool.len += 1;
    true
}

/// Blocks a buffer of threshold `s` bytes comes to hold before its flush: it passes S by what the
/// program records until the next decision (the decision interval, the split decision's second
/// collective), measured at 2.4 S for the iterative workload at S = 8 MiB; three times S covers
/// that.
pub fn blocks_for_threshold(s: u64) -> usize {
    usize::try_from(s.saturating_mul(3).div_ceil(HUGE_ALIGN as u64)).unwrap_or(usize::MAX)
}

/// Keeps the blocks of a buffer of threshold `s` from one flush to the next (never fewer than the
/// 64 MiB default, at most the pool's slots).
pub fn size_for_threshold(s: u64) {
    let keep = blocks_for_threshold(s).clamp(32, POOL_SLOTS);
    POOL_KEEP.store(keep, Ordering::Relaxed);
}

/// Maps and faults in `blocks` trace blocks now, into the pool, so that the buffer's first fill
/// takes warm blocks instead of mapping fresh ones inside the program's time. A fresh block costs
/// 0.3-5 ms here (a huge-page fault may compact memory), on one rank at a time: reconstruction
/// removes it from that rank (it is measured, DP), but not the wait it causes in a partner's next
/// collective, which made most of the +1.8 % residue at S = 8 MiB. Through the global allocator:
/// in the preload libraries that is [`HugeBlockAlloc`], and elsewhere (the recorder's own tests)
/// the blocks go straight back to the system instead of being mapped for nothing.
pub fn prefill(blocks: usize) {
    struct Global;
    // SAFETY: forwards to the process's global allocator, under the same contract.
    unsafe impl GlobalAlloc for Global {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded contract.
            unsafe { std::alloc::alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded contract.
            unsafe { std::alloc::dealloc(ptr, layout) }
        }
    }
    fill_pool(&Global, blocks);
}

/// Takes `blocks` standard blocks from `alloc` and gives them back: with [`HugeBlockAlloc`], that
/// leaves them mapped, faulted in and pooled.
fn fill_pool(alloc: &impl GlobalAlloc, blocks: usize) {
    let Ok(layout) = Layout::from_size_align(HUGE_MIN, 8) else {
        return;
    };
    let blocks = blocks.min(POOL_SLOTS);
    let mut got = Vec::with_capacity(blocks);
    for _ in 0..blocks {
        // SAFETY: a non-zero-sized layout; released below with the same layout.
        let p = unsafe { alloc.alloc(layout) };
        if p.is_null() {
            break;
        }
        got.push(p);
    }
    for p in got {
        // SAFETY: allocated above by the same allocator with `layout`, and not used since.
        unsafe { alloc.dealloc(p, layout) };
    }
}

/// Blocks mapped so far (not taken from the pool).
static FRESH_MAPS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: huge allocations are whole private mappings released with the same length they were
// made with (derived from the layout the caller must pass back); the rest is the system allocator.
unsafe impl GlobalAlloc for HugeBlockAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_huge(&layout) {
            if is_standard(layout.size())
                && let Some(block) = pool_take()
            {
                return block;
            }
            // SAFETY: size is non-zero (>= HUGE_MIN).
            unsafe { map_huge(layout.size()) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(&layout) {
            // SAFETY: fresh anonymous mappings are zero-filled (pooled blocks are not, so they
            // are not used here).
            unsafe { map_huge(layout.size()) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_huge(&layout) {
            if is_standard(layout.size()) && pool_keep(ptr) {
                return;
            }
            // SAFETY: `ptr` came from `map_huge` with this size, so this is exactly its mapping.
            unsafe { libc::munmap(ptr as *mut libc::c_void, mapped_len(layout.size())) };
        } else {
            // SAFETY: forwarded contract.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        if !is_huge(&layout) && !is_huge(&new_layout) {
            // SAFETY: forwarded contract; both sides belong to the system allocator.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if is_huge(&layout)
            && is_huge(&new_layout)
            && mapped_len(layout.size()) == mapped_len(new_size)
        {
            return ptr;
        }
        // SAFETY: a new block of the new layout, the common prefix copied, the old one released.
        unsafe {
            let fresh = self.alloc(new_layout);
            if !fresh.is_null() {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            fresh
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is process-wide: tests that count what it holds take turns.
    static POOL_TESTS: Mutex<()> = Mutex::new(());

    #[test]
    fn a_prefilled_pool_serves_a_whole_first_fill_without_mapping() {
        let _turn = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugeBlockAlloc;
        let block = Layout::from_size_align(HUGE_MIN, 8).unwrap();
        // S = 16 MiB: a buffer comes to hold 24 blocks; the pool keeps the default 32.
        size_for_threshold(16 << 20);
        assert_eq!(blocks_for_threshold(16 << 20), 24);
        // Start from an empty pool, whatever the other tests left in it.
        while let Some(p) = pool_take() {
            // SAFETY: a pooled standard block, mapped by `map_huge` with the standard length.
            unsafe { libc::munmap(p as *mut libc::c_void, HUGE_ALIGN) };
        }
        fill_pool(&HugeBlockAlloc, 24);
        let mapped = FRESH_MAPS.load(Ordering::Relaxed);
        // SAFETY: matching alloc/dealloc pairs with the same layout.
        unsafe {
            let got: Vec<_> = (0..24).map(|_| a.alloc(block)).collect();
            assert!(got.iter().all(|p| !p.is_null()));
            assert_eq!(
                FRESH_MAPS.load(Ordering::Relaxed),
                mapped,
                "the first fill mapped fresh blocks"
            );
            // One more than prefilled is mapped fresh: the counter sees it.
            let extra = a.alloc(block);
            assert_eq!(FRESH_MAPS.load(Ordering::Relaxed), mapped + 1);
            a.dealloc(extra, block);
            for p in got {
                a.dealloc(p, block);
            }
        }
        // A large S keeps its whole buffer from one flush to the next.
        size_for_threshold(100 << 20);
        assert_eq!(POOL_KEEP.load(Ordering::Relaxed), 150);
        size_for_threshold(1 << 40);
        assert_eq!(POOL_KEEP.load(Ordering::Relaxed), POOL_SLOTS);
        size_for_threshold(0);
        assert_eq!(POOL_KEEP.load(Ordering::Relaxed), 32);
    }

    #[test]
    fn huge_blocks_are_aligned_usable_and_reallocatable() {
        let _turn = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugeBlockAlloc;
        let layout = Layout::from_size_align(HUGE_MIN + 100, 8).unwrap();
        // SAFETY: matching alloc/realloc/dealloc with the layouts used to allocate.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE_ALIGN, 0);
            p.write_bytes(0xab, layout.size());
            let q = a.realloc(p, layout, 3 * HUGE_MIN);
            assert!(!q.is_null());
            assert_eq!(*q.add(HUGE_MIN + 99), 0xab);
            let shrunk = a.realloc(q, Layout::from_size_align(3 * HUGE_MIN, 8).unwrap(), 64);
            assert_eq!(*shrunk.add(63), 0xab);
            a.dealloc(shrunk, Layout::from_size_align(64, 8).unwrap());
        }
    }

    #[test]
    fn released_standard_blocks_are_reused_and_zeroed_requests_are_fresh() {
        let _turn = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugeBlockAlloc;
        let block = Layout::from_size_align(HUGE_MIN, 8).unwrap();
        // SAFETY: matching alloc/dealloc pairs with the same layout.
        unsafe {
            let p = a.alloc(block);
            assert!(!p.is_null());
            p.write_bytes(0xcd, HUGE_MIN);
            a.dealloc(p, block);
            // Other tests may take the pooled block first; allocate until it comes back or the
            // pool is clearly not handing it out.
            let mut got = Vec::new();
            let mut reused = false;
            for _ in 0..=32 {
                let q = a.alloc(block);
                assert!(!q.is_null());
                got.push(q);
                if q == p {
                    reused = true;
                    break;
                }
            }
            assert!(reused, "a released block is handed out again");
            let z = a.alloc_zeroed(block);
            assert!(!z.is_null() && z != p);
            assert!(
                std::slice::from_raw_parts(z, HUGE_MIN)
                    .iter()
                    .all(|&b| b == 0)
            );
            a.dealloc(z, block);
            for q in got {
                a.dealloc(q, block);
            }
        }
    }
}
