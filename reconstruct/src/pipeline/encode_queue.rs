//! Output chunks encoded on the workers when the engine hands the events out one at a time (the
//! repair or the replay moved them there, see [`super::EngineWriter`]). Encoding and compressing
//! a chunk cost about as much as matching its events, and the engine runs on one thread: done
//! there, they bounded a replay on two cores (16 M events: the pass took 2.1 s with them, 1.3 s
//! with the output thrown away; `paper-notes/reconstruct-issue31.md`).
//!
//! The engine cuts the chunks and numbers them per rank file in the order one thread would append
//! them; whoever encodes a chunk appends it, and every chunk of that file that was waiting for it,
//! once all before it are appended. So the files are the same bytes for any number of threads.
//! Chunks wait here only while earlier ones of their file are being encoded, and at most
//! [`EncodeQueue::limit`] wait to be encoded (beyond it the engine encodes itself), so memory stays
//! bounded by the workers, not by the trace.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Condvar, Mutex};

use format::{ChunkEncoder, EncodedChunk, EventBuf};

use super::{WorkerOutput, lock};
use crate::options::RebuildError;
use crate::output::Held;

/// One chunk to encode: where it goes and what it holds.
pub(crate) struct EncodeJob {
    /// The rank file's slot in [`WorkerOutput::ranks`].
    pub slot: usize,
    /// Its place among the chunks appended to that file.
    pub order: u64,
    pub stream: u32,
    /// The chunk's number within its stream.
    pub seq: u64,
    pub events: EventBuf,
}

/// A rank file's chunks encoded ahead of one still being encoded.
#[derive(Default)]
struct FileTail {
    next: u64,
    early: BTreeMap<u64, EncodedChunk>,
    held: Held,
}

#[derive(Default)]
struct Jobs {
    waiting: VecDeque<EncodeJob>,
    /// Taken and not yet appended.
    running: usize,
    error: Option<RebuildError>,
}

pub(crate) struct EncodeQueue<'o> {
    output: WorkerOutput<'o>,
    jobs: Mutex<Jobs>,
    /// Signalled when the last running job is appended.
    idle: Condvar,
    files: Vec<Mutex<FileTail>>,
    limit: usize,
    /// Buffers of encoded chunks, cleared, for the engine's next ones: a chunk's buffer is a few
    /// MiB, and a fresh one for each chunk cost more in page faults than its encoding saved.
    spare: Mutex<Vec<EventBuf>>,
}

impl<'o> EncodeQueue<'o> {
    /// A queue for the files of `output`, fed by one engine and drained by `workers` threads (a
    /// split pass counts its engine too, which drains it while it waits for another process).
    pub(crate) fn new(output: WorkerOutput<'o>, workers: usize) -> Self {
        EncodeQueue {
            files: output.ranks.iter().map(|_| Mutex::default()).collect(),
            output,
            jobs: Mutex::default(),
            idle: Condvar::new(),
            // Two per worker: one being encoded, one ready for when it is done.
            limit: 2 * workers,
            spare: Mutex::default(),
        }
    }

    pub(crate) fn output(&self) -> WorkerOutput<'o> {
        self.output
    }

    /// Queues `job` for a worker, or gives it back when enough are waiting already (or the
    /// output failed): then the caller encodes it with [`EncodeQueue::run_here`].
    pub(crate) fn offer(&self, job: EncodeJob) -> Option<EncodeJob> {
        let mut jobs = lock(&self.jobs);
        if jobs.waiting.len() >= self.limit || jobs.error.is_some() {
            return Some(job);
        }
        jobs.waiting.push_back(job);
        None
    }

    /// A job for a worker, if one waits.
    pub(crate) fn take(&self) -> Option<EncodeJob> {
        let mut jobs = lock(&self.jobs);
        let job = jobs.waiting.pop_front()?;
        jobs.running += 1;
        Some(job)
    }

    /// Encodes a job from [`EncodeQueue::take`] and appends what it completes.
    pub(crate) fn run(&self, job: EncodeJob, encoder: &mut ChunkEncoder) {
        let result = self.encode_and_append(job, encoder);
        let mut jobs = lock(&self.jobs);
        jobs.running -= 1;
        if let Err(e) = result {
            jobs.error.get_or_insert(e);
        }
        if jobs.running == 0 {
            self.idle.notify_all();
        }
    }

    /// Encodes a job the caller kept (given back by [`EncodeQueue::offer`]); false once any
    /// job failed (its error comes out of [`EncodeQueue::finish`]).
    pub(crate) fn run_here(&self, job: EncodeJob, encoder: &mut ChunkEncoder) -> bool {
        let result = self.encode_and_append(job, encoder);
        let mut jobs = lock(&self.jobs);
        if let Err(e) = result {
            jobs.error.get_or_insert(e);
        }
        jobs.error.is_none()
    }

    /// A cleared buffer for the engine's next chunk.
    pub(crate) fn spare(&self) -> EventBuf {
        lock(&self.spare).pop().unwrap_or_default()
    }

    fn encode_and_append(
        &self,
        mut job: EncodeJob,
        encoder: &mut ChunkEncoder,
    ) -> Result<(), RebuildError> {
        let target = &self.output.ranks[job.slot];
        let chunk = encoder.encode_events(target.rank, job.stream, job.seq, &job.events);
        job.events.clear();
        {
            // As many as can be in use at once: one per job, waiting or encoded.
            let mut spare = lock(&self.spare);
            if spare.len() <= self.limit {
                spare.push(job.events);
            }
        }
        let mut file = lock(&self.files[job.slot]);
        let file = &mut *file;
        file.early.insert(job.order, chunk);
        while let Some(chunk) = file.early.remove(&file.next) {
            file.next += 1;
            file.held.add(target, chunk, self.output.bytes_per_write)?;
        }
        Ok(())
    }

    /// After the engine's last chunk: encodes what still waits here, waits for the workers' jobs,
    /// and appends what every file holds. The first error of any job, if one failed.
    pub(crate) fn finish(&self, encoder: &mut ChunkEncoder) -> Result<(), RebuildError> {
        while let Some(job) = self.take() {
            self.run(job, encoder);
        }
        let mut jobs = lock(&self.jobs);
        while jobs.running > 0 {
            jobs = self.idle.wait(jobs).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(e) = jobs.error.take() {
            return Err(e);
        }
        drop(jobs);
        for (file, target) in self.files.iter().zip(self.output.ranks) {
            let mut file = lock(file);
            // Every job was appended in order, so none can be left: this guards the numbering.
            if !file.early.is_empty() {
                return Err(RebuildError::BadOutput {
                    path: target.path.clone(),
                    what: format!(
                        "{} encoded chunks wait for one that never came (a bug: please report)",
                        file.early.len()
                    ),
                });
            }
            file.held.flush(target)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::RankOutput;

    fn events(iterations: u64, skip: usize) -> EventBuf {
        let mut buf = EventBuf::new();
        let all = format::synthetic::events(&format::synthetic::HaloConfig {
            iterations,
            ..Default::default()
        });
        for e in all.iter().skip(skip) {
            buf.push(e);
        }
        buf
    }

    #[test]
    fn chunks_encoded_out_of_order_are_appended_in_the_order_they_were_cut() {
        let dir = std::env::temp_dir().join(format!("evf-encode-queue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = |name: &str| RankOutput {
            rank: 3,
            path: dir.join(name),
        };
        let ranks = [target("queued.evf")];
        let output = WorkerOutput {
            ranks: &ranks,
            chunk_events: 1 << 16,
            // Every chunk is appended as soon as its turn comes.
            bytes_per_write: 1,
            zstd_level: 1,
        };
        std::fs::write(&ranks[0].path, b"H").unwrap();
        let bufs: Vec<EventBuf> = (0..3).map(|k| events(20 + 7 * k, k as usize)).collect();
        // What one thread writes: each chunk encoded and appended as it is cut.
        let serial = target("serial.evf");
        std::fs::write(&serial.path, b"H").unwrap();
        let mut encoder = ChunkEncoder::new(1);
        for (k, buf) in bufs.iter().enumerate() {
            let chunk = encoder.encode_events(3, 0, k as u64, buf);
            serial.append(&[chunk]).unwrap();
        }

        let queue = EncodeQueue::new(output, 2);
        for (k, buf) in bufs.iter().enumerate() {
            let job = EncodeJob {
                slot: 0,
                order: k as u64,
                stream: 0,
                seq: k as u64,
                events: buf.clone(),
            };
            assert!(queue.offer(job).is_none(), "2 workers take 4 waiting jobs");
        }
        let jobs: Vec<EncodeJob> = std::iter::from_fn(|| queue.take()).collect();
        assert_eq!(jobs.len(), 3);
        let mut jobs = jobs.into_iter();
        let (first, second, third) = (jobs.next(), jobs.next(), jobs.next());
        // The last chunk is encoded first, the first last: nothing may go out before chunk 0.
        queue.run(third.unwrap(), &mut encoder);
        queue.run(second.unwrap(), &mut encoder);
        assert_eq!(std::fs::read(&ranks[0].path).unwrap(), b"H");
        queue.run(first.unwrap(), &mut encoder);
        queue.finish(&mut encoder).unwrap();
        assert!(
            std::fs::read(&ranks[0].path).unwrap() == std::fs::read(&serial.path).unwrap(),
            "the queued file is not the one one thread writes"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn with_no_worker_the_engine_encodes_every_chunk_itself() {
        let ranks: [RankOutput; 0] = [];
        let output = WorkerOutput {
            ranks: &ranks,
            chunk_events: 1,
            bytes_per_write: 1,
            zstd_level: 1,
        };
        let queue = EncodeQueue::new(output, 0);
        let job = EncodeJob {
            slot: 0,
            order: 0,
            stream: 0,
            seq: 0,
            events: EventBuf::new(),
        };
        assert!(
            queue.offer(job).is_some(),
            "a job queued with no worker would wait until the end"
        );
    }
}
