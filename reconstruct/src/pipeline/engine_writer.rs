//! The output of lanes whose events come out of the matching engine one at a time, moved (the
//! repair or the replay set their times there, so no worker can write them): per lane the chunk
//! being filled; each full chunk goes to the [`EncodeQueue`], numbered in its rank file's order,
//! for a worker to encode and append (or is encoded here when the workers have enough). The
//! central pass and a split pass's engine write through it alike.

use format::{ChunkEncoder, Event};

use super::encode_queue::{EncodeJob, EncodeQueue};
use super::rank_slot;
use crate::options::RebuildError;
use crate::output::LaneOut;
use trace::definitions::RankMeta;
use trace::lanes::LaneId;

pub(crate) struct EngineWriter<'q, 'o> {
    queue: &'q EncodeQueue<'o>,
    lanes: Vec<LaneOut>,
    /// Per lane, its rank's slot in the output's ranks.
    targets: Vec<usize>,
    /// Per slot: the chunks cut for that file so far.
    cut: Vec<u64>,
    encoder: ChunkEncoder,
    /// A write failed: nothing more is cut (the error comes out of [`EngineWriter::finish`]).
    failed: bool,
}

impl<'q, 'o> EngineWriter<'q, 'o> {
    /// A writer for `lanes`, in the order the engine numbers them, of the ranks of `metas`.
    pub(crate) fn new(queue: &'q EncodeQueue<'o>, metas: &[RankMeta], lanes: &[LaneId]) -> Self {
        let output = queue.output();
        EngineWriter {
            queue,
            lanes: lanes.iter().map(|id| LaneOut::new(id.stream)).collect(),
            targets: lanes.iter().map(|id| rank_slot(metas, id.rank)).collect(),
            cut: vec![0; output.ranks.len()],
            encoder: ChunkEncoder::new(output.zstd_level),
            failed: false,
        }
    }

    /// Writes `e`, the next event of lane `k`; after a failed write, nothing more.
    pub(crate) fn take(&mut self, k: usize, e: &Event) {
        if !self.failed && self.lanes[k].push(e, self.queue.output().chunk_events) {
            self.cut_chunk(k);
        }
    }

    fn cut_chunk(&mut self, k: usize) {
        let slot = self.targets[k];
        let (seq, events) = self.lanes[k].take_events(self.queue.spare());
        let job = EncodeJob {
            slot,
            order: self.cut[slot],
            stream: self.lanes[k].stream,
            seq,
            events,
        };
        self.cut[slot] += 1;
        if let Some(job) = self.queue.offer(job) {
            self.failed |= !self.queue.run_here(job, &mut self.encoder);
        }
    }

    /// Writes what the lanes still hold, or returns the first write that failed.
    pub(crate) fn finish(&mut self) -> Result<(), RebuildError> {
        for k in 0..self.lanes.len() {
            if !self.failed && !self.lanes[k].is_empty() {
                self.cut_chunk(k);
            }
        }
        self.queue.finish(&mut self.encoder)
    }
}
