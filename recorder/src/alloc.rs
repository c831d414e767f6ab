//! Global allocator of the preload libraries: trace blocks (2 MiB and up) come from their own
//! 2 MiB-aligned mappings, and released blocks of the standard size are kept for the next buffer;
//! everything else comes from the system allocator.
//!
//! Why pool: every flush frees the buffer, and putting the next events into freshly mapped memory
//! cost the program time right after each suspension that reconstruction cannot remove (the
//! indirect perturbation HP'): the iteration after a flush ran ~270-300 µs slower (median) than in
//! the reference; with the pool, +10-40 µs. The blocks a flush frees are the ones the next events go
//! into, already mapped and warm.
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

/// Released standard-size blocks kept for reuse (addresses; 0 = empty slot). At most 64 MiB: the
/// buffer refills to the flush threshold before the next flush anyway, so keeping what it had
/// does not raise the peak; blocks beyond this are unmapped.
const POOL_SLOTS: usize = 32;
static POOL: Mutex<[usize; POOL_SLOTS]> = Mutex::new([0; POOL_SLOTS]);

fn is_standard(size: usize) -> bool {
    mapped_len(size) == HUGE_ALIGN
}

fn pool_take() -> Option<*mut u8> {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    pool.iter_mut()
        .find(|slot| **slot != 0)
        .map(|slot| std::mem::take(slot) as *mut u8)
}

fn pool_keep(ptr: *mut u8) -> bool {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    match pool.iter_mut().find(|slot| **slot == 0) {
        Some(slot) => {
            *slot = ptr as usize;
            true
        }
        None => false,
    }
}

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

    #[test]
    fn huge_blocks_are_aligned_usable_and_reallocatable() {
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
            for _ in 0..=POOL_SLOTS {
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
