//! A lane is one stream (thread) of one rank: the unit in which events are ordered. A
//! [`LaneReader`] streams one lane's events out of the rank's files, holding one decoded chunk.
//!
//! Damage is not reported here: the first pass ([`crate::scan::scan_rank`]) walks the same chunks
//! and reports it once; a lane just skips what that pass skipped.

use format::reader::ChunkIntoEvents;
use format::{ChunkWalk, Event, RankFile};

use crate::error::TraceError;
use crate::files::RankFiles;

/// Which lane, and where its events live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct LaneId {
    pub rank: u32,
    pub stream: u32,
}

/// A rank's files, opened (memory-mapped) once and shared by the rank's lanes.
pub struct OpenRank {
    pub rank: u32,
    pub files: Vec<RankFile>,
}

impl OpenRank {
    pub fn open(files: &RankFiles) -> Result<OpenRank, TraceError> {
        let files = files.open()?;
        Ok(OpenRank {
            rank: files.first().map_or(0, |f| f.header().rank),
            files,
        })
    }
}

/// One lane's events. The chunk walk is the same as the first pass's, so both see the same
/// chunks (resumed after damage, each read once).
pub struct LaneReader<'a> {
    chunks: ChunkWalk<'a>,
    current: Option<ChunkIntoEvents<'a>>,
}

impl<'a> LaneReader<'a> {
    pub fn new(rank: &'a OpenRank, stream: u32) -> Self {
        LaneReader {
            chunks: ChunkWalk::stream(&rank.files, stream),
            current: None,
        }
    }
}

impl Iterator for LaneReader<'_> {
    type Item = Event;

    // Inlined so an event goes from the chunk's decoder to its consumer without being copied
    // through every layer; moving to the next chunk is the out-of-line part.
    #[inline]
    fn next(&mut self) -> Option<Event> {
        if let Some(current) = &mut self.current {
            let out = current.next();
            if out.is_some() {
                return out;
            }
        }
        self.next_chunk_event()
    }
}

impl LaneReader<'_> {
    #[inline(never)]
    fn next_chunk_event(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.current.as_mut().and_then(Iterator::next) {
                return Some(e);
            }
            self.current = Some(self.chunks.next()?.into_events());
        }
    }
}
