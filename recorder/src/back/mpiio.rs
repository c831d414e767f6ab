//! The `mpiio` trace writer: the paper's choice, `MPI_File_write` on a file opened on
//! `MPI_COMM_SELF`, through the C layer (the Rust core has no MPI types). Same rotation rules as the
//! posix and io_uring backends: on a full disk or quota the partial chunk is cut off and writing
//! moves on to the next output directory with the next part number. MPI-IO reports a full quota as
//! `MPI_ERR_IO`, so a write failing with that class moves on as well. A failed `MPI_File_sync`
//! writes the unsynced chunks again in a new part file, as the offload writers do. The C layer
//! opens the file with `MPI_ERRORS_RETURN`, so none of this can abort the job.
//!
//! MPI-IO cannot be used after `MPI_Finalize`, so at its start the recorder writes what it holds
//! and hands the rest of the trace to a posix writer in a further part file
//! ([`MpiIoWriter::position`]).

use std::path::PathBuf;

use format::EncodedChunk;
use offload::writer::{OutputPlan, WriteError, WriteStats, Writer};

use crate::mpi_link::{Link, LinkError};

pub struct MpiIoWriter {
    link: Link,
    plan: OutputPlan,
    dir_index: usize,
    part: u32,
    open: bool,
    offset: u64,
    files: Vec<PathBuf>,
    stopped: bool,
    /// Durable end of the open file, and the chunks written after it (see offload's writer: a
    /// chunk counts once a sync confirmed it, and is written again elsewhere if the sync fails).
    synced: u64,
    unsynced: Vec<EncodedChunk>,
    /// What [`MpiIoWriter::open_first`] wrote (the file header), reported with the next write.
    opened_stats: WriteStats,
}

enum Outcome {
    Done,
    Full,
}

impl MpiIoWriter {
    pub fn new(link: Link, plan: OutputPlan) -> Self {
        MpiIoWriter {
            link,
            plan,
            dir_index: 0,
            part: 0,
            open: false,
            offset: 0,
            files: Vec::new(),
            stopped: false,
            synced: 0,
            unsynced: Vec::new(),
            opened_stats: WriteStats::default(),
        }
    }

    /// Opens the first part file now rather than at the first write, so that an MPI that cannot
    /// open files here is found while the caller can still choose another writer: a program that
    /// starts MPI only through a session has no `MPI_COMM_SELF` to open the file on, and the
    /// whole trace was lost that way.
    pub fn open_first(&mut self) -> Result<(), WriteError> {
        let mut stats = WriteStats::default();
        let opened = self.ensure_open(&mut stats);
        self.opened_stats = stats;
        opened
    }

    /// Where a writer continuing this trace must start: (directory index, part number). Ask before
    /// [`MpiIoWriter::close`]: an open part file is finished, so the next one is due.
    pub fn position(&self) -> (usize, u32) {
        (self.dir_index, self.part + u32::from(self.open))
    }

    /// Closes the file (before `MPI_Finalize`).
    pub fn close(&mut self) {
        if self.open {
            let _ = self.link.file_close();
            self.open = false;
        }
    }

    fn io_error(&self, e: LinkError) -> WriteError {
        WriteError::Io {
            path: self
                .plan
                .path_of(self.dir_index.min(self.plan.dirs.len() - 1), self.part),
            source: std::io::Error::other(format!("MPI-IO error class {}", e.0)),
        }
    }

    fn classify(&self, r: Result<(), LinkError>) -> Result<Outcome, WriteError> {
        match r {
            Ok(()) => Ok(Outcome::Done),
            Err(e) if self.link.directory_refuses(e) => Ok(Outcome::Full),
            Err(e) => Err(self.io_error(e)),
        }
    }

    fn out_of_space(&mut self, written: WriteStats) -> WriteError {
        self.stopped = true;
        WriteError::OutOfSpace {
            last_dir: self.plan.dirs.last().cloned().unwrap_or_default(),
            written,
        }
    }

    /// Opens the current part file and writes its header, moving on while disks are full.
    fn ensure_open(&mut self, stats: &mut WriteStats) -> Result<(), WriteError> {
        while !self.open {
            if self.dir_index >= self.plan.dirs.len() {
                return Err(self.out_of_space(*stats));
            }
            let path = self.plan.path_of(self.dir_index, self.part);
            let header = self.plan.header_bytes(self.part);
            let opened = self.classify(self.link.file_open(&path))?;
            let wrote = match opened {
                Outcome::Done => self.classify(self.link.file_write_at(0, &header))?,
                Outcome::Full => Outcome::Full,
            };
            match wrote {
                Outcome::Done => {
                    self.open = true;
                    self.offset = header.len() as u64;
                    self.synced = self.offset;
                    stats.bytes_stored += header.len() as u64;
                    self.files.push(path);
                }
                Outcome::Full => {
                    let _ = self.link.file_close();
                    let _ = std::fs::remove_file(&path);
                    self.dir_index += 1;
                }
            }
        }
        Ok(())
    }

    fn write_one(
        &mut self,
        chunk: EncodedChunk,
        stats: &mut WriteStats,
        replay: &mut std::collections::VecDeque<EncodedChunk>,
    ) -> Result<(), WriteError> {
        loop {
            self.ensure_open(stats)?;
            let start = self.offset;
            match self.classify(self.link.file_write_at(start, &chunk.bytes))? {
                Outcome::Done => {
                    self.offset += chunk.bytes.len() as u64;
                    self.unsynced.push(chunk);
                    return Ok(());
                }
                Outcome::Full => {
                    // Cut the partial chunk off so the file ends on a chunk boundary.
                    let _ = self.link.file_set_size(start);
                    self.offset = start;
                    let queued = replay.len();
                    if self.link.file_sync().is_ok() {
                        self.commit(stats);
                    } else {
                        self.requeue(replay);
                    }
                    let _ = self.link.file_close();
                    self.open = false;
                    self.dir_index += 1;
                    self.part += 1;
                    // Chunks queued again were written before this one: they go first.
                    let requeued = replay.len() - queued;
                    if requeued > 0 {
                        replay.insert(requeued, chunk);
                        return Ok(());
                    }
                }
            }
        }
    }

    fn commit(&mut self, stats: &mut WriteStats) {
        for chunk in self.unsynced.drain(..) {
            stats.chunks += 1;
            stats.events += chunk.events;
            stats.bytes_raw += chunk.raw_len;
            stats.bytes_stored += chunk.bytes.len() as u64;
        }
        self.synced = self.offset;
    }

    /// The sync failed: cut the file back to what was synced and queue the rest again.
    fn requeue(&mut self, replay: &mut std::collections::VecDeque<EncodedChunk>) {
        let _ = self.link.file_set_size(self.synced);
        for chunk in self.unsynced.drain(..).rev() {
            replay.push_front(chunk);
        }
    }
}

impl Writer for MpiIoWriter {
    fn write_chunks(
        &mut self,
        chunks: &mut dyn Iterator<Item = EncodedChunk>,
    ) -> Result<WriteStats, WriteError> {
        if self.stopped {
            return Err(WriteError::Stopped);
        }
        let mut stats = std::mem::take(&mut self.opened_stats);
        let mut replay = std::collections::VecDeque::new();
        let mut io_retried = false;
        loop {
            while let Some(chunk) = replay.pop_front().or_else(|| chunks.next()) {
                if let Err(e) = self.write_one(chunk, &mut stats, &mut replay) {
                    return Err(match e {
                        WriteError::OutOfSpace { last_dir, .. } => WriteError::OutOfSpace {
                            last_dir,
                            written: stats,
                        },
                        other => other,
                    });
                }
            }
            if !self.open {
                return Ok(stats);
            }
            let error = match self.link.file_sync() {
                Ok(()) => {
                    self.commit(&mut stats);
                    return Ok(stats);
                }
                Err(e) => e,
            };
            // As in offload's writer: the unsynced chunks go again into a new part file, in the
            // next directory when this one is full, in the same one after a first I/O error.
            let full = self.link.is_out_of_space(error);
            if !full && io_retried {
                let path = self.plan.path_of(self.dir_index, self.part);
                self.unsynced.clear();
                let _ = self.link.file_set_size(self.synced);
                let _ = self.link.file_close();
                self.open = false;
                self.part += 1;
                return Err(WriteError::SyncLost {
                    path,
                    written: stats,
                    source: std::io::Error::other(format!("MPI-IO error class {}", error.0)),
                });
            }
            self.requeue(&mut replay);
            let _ = self.link.file_close();
            self.open = false;
            self.part += 1;
            if full {
                self.dir_index += 1;
            } else {
                io_retried = true;
            }
        }
    }

    fn stopped(&self) -> bool {
        self.stopped
    }

    fn files(&self) -> &[PathBuf] {
        &self.files
    }
}
