//! The output of lanes whose events come out of the matching engine one at a time, moved (the
//! repair or the replay set their times there, so no worker can write them): per lane the chunk
//! being filled, per rank the encoded chunks not yet appended ([`Held`]). The central pass and
//! a split pass's engine write through it alike.

use format::{ChunkEncoder, Event};

use super::{WorkerOutput, rank_slot};
use crate::options::RebuildError;
use crate::output::{Held, LaneOut};
use trace::definitions::RankMeta;
use trace::lanes::LaneId;

pub(crate) struct EngineWriter<'o> {
    output: WorkerOutput<'o>,
    lanes: Vec<LaneOut>,
    /// Per lane, its rank's slot in `output.ranks`.
    targets: Vec<usize>,
    /// Per slot of `output.ranks`.
    held: Vec<Held>,
    encoder: ChunkEncoder,
    /// The first write that failed: kept until [`EngineWriter::finish`], since the engine's
    /// callback cannot return it.
    error: Option<RebuildError>,
}

impl<'o> EngineWriter<'o> {
    /// A writer for `lanes`, in the order the engine numbers them, of the ranks of `metas`.
    pub(crate) fn new(output: WorkerOutput<'o>, metas: &[RankMeta], lanes: &[LaneId]) -> Self {
        EngineWriter {
            lanes: lanes.iter().map(|id| LaneOut::new(id.stream)).collect(),
            targets: lanes.iter().map(|id| rank_slot(metas, id.rank)).collect(),
            held: output.ranks.iter().map(|_| Held::default()).collect(),
            encoder: ChunkEncoder::new(output.zstd_level),
            error: None,
            output,
        }
    }

    /// Writes `e`, the next event of lane `k`; after a failed write, nothing more.
    pub(crate) fn take(&mut self, k: usize, e: &Event) {
        if self.error.is_some() || !self.lanes[k].push(e, self.output.chunk_events) {
            return;
        }
        let r = self.targets[k];
        let target = &self.output.ranks[r];
        let chunk = self.lanes[k].take_chunk(&mut self.encoder, target.rank);
        if let Err(err) = self.held[r].add(target, chunk, self.output.bytes_per_write) {
            self.error = Some(err);
        }
    }

    /// Writes what the lanes still hold, or returns the first write that failed.
    pub(crate) fn finish(&mut self) -> Result<(), RebuildError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        for (lane, &r) in self.lanes.iter_mut().zip(&self.targets) {
            if !lane.is_empty() {
                let target = &self.output.ranks[r];
                let chunk = lane.take_chunk(&mut self.encoder, target.rank);
                self.held[r].add(target, chunk, self.output.bytes_per_write)?;
            }
        }
        for (held, target) in self.held.iter_mut().zip(self.output.ranks) {
            held.flush(target)?;
        }
        Ok(())
    }
}
