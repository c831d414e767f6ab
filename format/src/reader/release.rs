//! Letting go of a mapped rank file's pages once they are read. Reconstruct walks every rank file
//! of a trace at once; a mapped file's pages otherwise stay in the process's resident set to the
//! end (about 3 bytes per event, 2.7 GiB at 10^9 events), and so does what each page fault maps
//! around the page it reads.

use std::ops::Range;

use super::blocks::{Body, Release};
use super::{Chunk, Data, RankFile};

/// The unit a mapping's pages are released in (the smallest page size; a larger one only
/// leaves more resident).
const PAGE: u64 = 4096;

/// What one page fault on a mapped file may map at most: a page table's span (a large folio is
/// mapped whole, but only within it).
const FAULT_SPAN: u64 = 2 << 20;

impl RankFile {
    /// Tells the kernel that the bytes in `range` are not needed for now: a mapped file's pages
    /// there leave this process's resident set. Reading them again faults them back in from the
    /// file, unchanged. Only whole pages inside `range` go, and only of a file mapped for itself
    /// (a group file's pages also hold other ranks' chunks).
    pub fn release(&self, range: Range<u64>) {
        let Data::Map(map) = &self.data else {
            return;
        };
        let start = range.start.div_ceil(PAGE) * PAGE;
        let end = (range.end.min(map.len() as u64) / PAGE) * PAGE;
        if start >= end {
            return;
        }
        // SAFETY: the map is a shared, read-only map of a file that is only ever appended to:
        // MADV_DONTNEED drops its pages from this process's resident set, and any later read of
        // them (a slice still borrowed included) faults the same bytes back in from the file, so
        // no byte anyone can see changes. Failure only leaves the pages resident.
        let _ = unsafe {
            map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start as usize,
                (end - start) as usize,
            )
        };
    }

    /// [`RankFile::release`] of `range` and of whatever a fault reading it may have mapped
    /// around it: a fault maps more than the page it reads (the pages around it, fault-around's
    /// 64 KiB, or the whole large folio holding it), anywhere in the 2 MiB its page table
    /// covers. Left mapped, those pages would stay resident until their own bytes were read,
    /// and be mapped again by the next fault.
    pub(super) fn release_fault_span(&self, range: Range<u64>) {
        self.release(
            range.start / FAULT_SPAN * FAULT_SPAN..range.end.div_ceil(FAULT_SPAN) * FAULT_SPAN,
        );
    }
}

impl<'a> Chunk<'a> {
    /// For a chunk read from `file` by a walk that releases what it has read
    /// ([`crate::ChunkWalk::releasing`]): the stored payload's pages leave the resident set now
    /// (checking the chunk read them all, and block 0 is kept decompressed), and each block's
    /// again once it is done with. A block read later faults its pages back in from the file.
    /// Without this, every lane of a wide trace kept its whole current chunk resident (about
    /// 0.9 GiB at 10^9 events over 4 096 ranks).
    pub(crate) fn release_as_read(&mut self, file: &'a RankFile) {
        let Body::Blocks {
            stored, release, ..
        } = &mut self.body
        else {
            return;
        };
        let base = file.data.bytes().as_ptr() as usize;
        let at = stored.as_ptr() as usize;
        if at < base || at + stored.len() > base + file.data.bytes().len() {
            return; // not this file's bytes: nothing to release through it
        }
        let stored_at = (at - base) as u64;
        file.release_fault_span(stored_at..stored_at + stored.len() as u64);
        *release = Some(Release { file, stored_at });
    }
}
