//! Blocks checked once per process. Reading a chunk of version 9 checks every block of it
//! (decompressed and split into columns), and reading its events decompresses each block again.
//! Reconstruct reads each chunk two or three times (the first pass for the metadata, then each
//! pass of the pipeline), so a block was decompressed up to five times for one use.
//!
//! A chunk read again from the same file, at the same offset, with the same header and payload
//! checksums as a chunk this process checked whole, holds the same bytes: its blocks are then
//! decompressed only as their events are read, and the check they passed is not repeated. The
//! checksums are still verified on every read, so a file changed since is caught there; should
//! a block still fail to decode on the later read, it is counted ([`blocks_lost`]) and the
//! command that read it fails rather than lose its events silently.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which file a chunk is in: the same device, inode and last status change (a file deleted and
/// another made in its place gets the inode again, but not the change time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

impl FileIdentity {
    pub(super) fn of(metadata: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: metadata.dev(),
            ino: metadata.ino(),
            ctime: metadata.ctime(),
            ctime_nsec: metadata.ctime_nsec(),
        }
    }
}

/// A chunk, by its file, offset, and header and payload checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct ChunkIdentity {
    pub(super) file: FileIdentity,
    pub(super) offset: u64,
    pub(super) header_crc: u32,
    pub(super) payload_crc: u32,
}

/// Chunks whose blocks this process checked whole. Bounded: past this many (a trace of about
/// 7 × 10^10 events in chunks of 2^16; the set then takes about 100 MiB, 48-byte entries in a
/// table of 2^21), further chunks are checked on every read.
const REMEMBERED: usize = 1 << 20;

static CHECKED: Mutex<Option<HashSet<ChunkIdentity>>> = Mutex::new(None);

static BLOCKS_LOST: AtomicU64 = AtomicU64::new(0);

pub(super) fn was_checked(chunk: &ChunkIdentity) -> bool {
    CHECKED
        .lock()
        .map(|set| set.as_ref().is_some_and(|s| s.contains(chunk)))
        .unwrap_or(false)
}

pub(super) fn remember_checked(chunk: ChunkIdentity) {
    if let Ok(mut set) = CHECKED.lock() {
        let set = set.get_or_insert_with(HashSet::new);
        if set.len() < REMEMBERED {
            set.insert(chunk);
        }
    }
}

/// A block that passed its checks when its chunk was read, or an earlier read of the same bytes,
/// and failed to decode when its events were read.
pub(super) fn block_lost() {
    BLOCKS_LOST.fetch_add(1, Ordering::Relaxed);
}

/// Blocks this process could not decode after their chunk was verified: their events were not
/// handed out. Nonzero only if a file changed under the reader (the checksums matched the bytes
/// read, which then decoded otherwise); a command that reads a trace checks it before it ends.
pub fn blocks_lost() -> u64 {
    BLOCKS_LOST.load(Ordering::Relaxed)
}
