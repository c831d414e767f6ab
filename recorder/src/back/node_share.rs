//! One memory watcher per node under `--threshold auto`: the node's ranks share its figures
//! through a page of shared memory, so one thread per node reads `/proc/meminfo`, `/proc/vmstat`
//! and the cgroup's files (15–35 µs every 50 ms), not one per rank.
//!
//! The page is a file in `/dev/shm` named from the run and the host (a dead job's page is never
//! found by another run). Every local rank maps it; the rank whose attach completes the node
//! unlinks the name at once, so nothing is left behind even if ranks are killed later (a rank
//! that finishes unlinks it too, and `evenflush run` removes its run's names after the job).
//! A zeroed page is a valid state: created with `O_CREAT`, whoever comes first.
//!
//! The watcher is elected by a compare-exchange of its pid into `watcher`. It publishes under a
//! seqlock (writers exclusive by a compare-exchange of the sequence to odd) and stamps a
//! heartbeat. A reader whose page is stale (no publication for [`STALE_NS`]: the watcher's rank
//! finished or died) takes over by compare-exchange from the old pid; whoever loses reads the
//! node itself for that round. So no rank waits on another, and no figure is older than
//! [`STALE_NS`] plus a period.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::back::node::NodeMemory;

/// Without a publication for this long the watcher is taken to be gone.
pub const STALE_NS: u64 = 2_000_000_000;

const PAGE: usize = 4096;

/// The shared page. Only atomics: several processes read and write it at once.
#[repr(C)]
struct Page {
    /// Ranks that mapped the page so far.
    attached: AtomicU32,
    /// Pid of the rank whose thread reads the node; 0 = none yet.
    watcher: AtomicU32,
    /// Seqlock: odd while a writer publishes; 0 = nothing published yet.
    seq: AtomicU64,
    node_available: AtomicU64,
    cgroup_limit: AtomicU64,
    cgroup_usage: AtomicU64,
    swap_out_pages: AtomicU64,
    /// `CLOCK_MONOTONIC` ns of the last publication (or of the election).
    heartbeat: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page>() <= PAGE);

/// This rank's mapping of its node's page.
pub struct NodeShare {
    page: &'static Page,
    pid: u32,
    path: CString,
}

/// What one round of the rank's watcher thread got.
pub struct Round {
    pub node: NodeMemory,
    /// This round's figures were read by this process (as the node's watcher or as a fallback).
    pub read_here: bool,
    /// This process became the node's watcher in this round.
    pub elected: bool,
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, a local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl NodeShare {
    /// Maps the page of `run` on `host`, shared by `local_size` ranks. `None` when it cannot be
    /// made: the rank then reads the node itself, as without sharing.
    pub fn attach(run: &str, host: &str, local_size: u32) -> Option<NodeShare> {
        let path = CString::new(offload::config::memory_page_path(run, host)).ok()?;
        // SAFETY: open with a NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return None;
        }
        // Growing to the page size is idempotent: whoever comes first makes the zeroed page.
        // SAFETY: ftruncate and mmap on the descriptor just opened; the mapping is checked, and
        // the descriptor is not needed once mapped.
        let addr = unsafe {
            let addr = if libc::ftruncate(fd, PAGE as libc::off_t) == 0 {
                libc::mmap(
                    std::ptr::null_mut(),
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            } else {
                libc::MAP_FAILED
            };
            libc::close(fd);
            addr
        };
        if addr == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: a mapping of PAGE bytes, page-aligned, never unmapped (the process keeps it
        // until it exits); `Page` holds only atomics, for which any bit pattern (zero included)
        // is valid, and it fits in the page.
        let page: &'static Page = unsafe { &*(addr as *const Page) };
        let share = NodeShare {
            page,
            pid: std::process::id(),
            path,
        };
        if page.attached.fetch_add(1, Ordering::AcqRel) + 1 >= local_size {
            share.unlink();
        }
        Some(share)
    }

    /// Removes the page's name (the mappings stay). Harmless when already gone.
    pub fn unlink(&self) {
        // SAFETY: unlink of a NUL-terminated path; failure (already removed) is fine.
        unsafe { libc::unlink(self.path.as_ptr()) };
    }

    /// One round of the watcher thread: reads the node with `read` if this process is (or now
    /// becomes) the node's watcher, or if the page is stale and another took over first;
    /// otherwise returns the watcher's figures.
    pub fn round(&self, read: impl FnOnce() -> NodeMemory) -> Round {
        let now = monotonic_ns();
        let p = self.page;
        let mut elected = false;
        let current = p.watcher.load(Ordering::Acquire);
        if current != self.pid {
            let stale = now.saturating_sub(p.heartbeat.load(Ordering::Acquire)) > STALE_NS;
            if (current == 0 || stale)
                && p.watcher
                    .compare_exchange(current, self.pid, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                p.heartbeat.store(now, Ordering::Release);
                elected = true;
            }
        }
        if p.watcher.load(Ordering::Acquire) == self.pid {
            let node = read();
            self.publish(&node, now);
            return Round {
                node,
                read_here: true,
                elected,
            };
        }
        match self.read_page(now) {
            Some(node) => Round {
                node,
                read_here: false,
                elected,
            },
            None => Round {
                node: read(),
                read_here: true,
                elected,
            },
        }
    }

    fn publish(&self, n: &NodeMemory, now: u64) {
        let p = self.page;
        let seq = p.seq.load(Ordering::Relaxed);
        // A taken-over watcher that woke up late must not interleave with the new one.
        if seq % 2 == 1
            || p.seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        std::sync::atomic::fence(Ordering::Release);
        p.node_available.store(n.node_available, Ordering::Relaxed);
        p.cgroup_limit.store(n.cgroup_limit, Ordering::Relaxed);
        p.cgroup_usage.store(n.cgroup_usage, Ordering::Relaxed);
        p.swap_out_pages.store(n.swap_out_pages, Ordering::Relaxed);
        p.heartbeat.store(now, Ordering::Relaxed);
        p.seq.store(seq + 2, Ordering::Release);
    }

    /// The published figures, if there are fresh ones (a few tries against a writer).
    fn read_page(&self, now: u64) -> Option<NodeMemory> {
        let p = self.page;
        for _ in 0..16 {
            let before = p.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let node = NodeMemory {
                node_available: p.node_available.load(Ordering::Relaxed),
                cgroup_limit: p.cgroup_limit.load(Ordering::Relaxed),
                cgroup_usage: p.cgroup_usage.load(Ordering::Relaxed),
                swap_out_pages: p.swap_out_pages.load(Ordering::Relaxed),
            };
            let beat = p.heartbeat.load(Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Acquire);
            if p.seq.load(Ordering::Relaxed) == before {
                return (now.saturating_sub(beat) <= STALE_NS).then_some(node);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(n: u64) -> NodeMemory {
        NodeMemory {
            node_available: n,
            cgroup_limit: n + 1,
            cgroup_usage: n + 2,
            swap_out_pages: n + 3,
        }
    }

    #[test]
    fn one_reader_per_node_and_the_others_see_its_figures() {
        let run = format!("unit-{}", std::process::id());
        let a = NodeShare::attach(&run, "h", 3).expect("map");
        let mut b = NodeShare::attach(&run, "h", 3).expect("map");
        // Two processes in one: tell them apart by pid.
        b.pid = a.pid + 1;
        let first = a.round(|| figures(100));
        assert!(first.elected && first.read_here);
        let second = b.round(|| panic!("the watcher's figures are fresh: no read"));
        assert!(!second.elected && !second.read_here);
        assert_eq!(second.node, figures(100));
        // The watcher went quiet: its heartbeat is old, the other takes over.
        a.page
            .heartbeat
            .store(monotonic_ns() - 2 * STALE_NS, Ordering::Relaxed);
        let over = b.round(|| figures(7));
        assert!(over.elected && over.read_here);
        assert_eq!(a.page.watcher.load(Ordering::Relaxed), b.pid);
        assert_eq!(a.round(|| panic!("not the watcher")).node, figures(7));
        // Both attached of 3: the name is still there until the third.
        let path = offload::config::memory_page_path(&run, "h");
        assert!(std::path::Path::new(&path).exists());
        let _c = NodeShare::attach(&run, "h", 3).expect("map");
        assert!(
            !std::path::Path::new(&path).exists(),
            "unlinked by the last"
        );
    }
}
