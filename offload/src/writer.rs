//! Trace writers: append encoded chunks to this rank's part files, rotating over output directories.
//!
//! Output goes to `rank-NNNNN.evf` in the first directory. When a write fails with `ENOSPC` or
//! `EDQUOT` (a full disk or a full quota: either way this directory takes no more), the partly
//! written chunk is cut off again, the file is closed, and writing continues in the next
//! directory in a new part file `rank-NNNNN.pK.evf` that starts with its own file header. When no
//! directory is left, the writer stops for good and says so with [`WriteError::OutOfSpace`], so the
//! recorder can add `Marker::RecordingStopped` and warn.
//!
//! A chunk counts as written only once `fdatasync` succeeded after it. Network and parallel file
//! systems (NFS, Lustre) often report a full disk, a full quota or an I/O error only there, for
//! data `pwrite` had accepted. So the chunks written since the last successful sync are kept until
//! the next one succeeds; when it fails, the file is cut back to what was synced and those chunks
//! are written again: in the next directory after `ENOSPC`/`EDQUOT`, in a new part file in the same
//! directory after `EIO` (once per call: a second failure gives them up as
//! [`WriteError::SyncLost`], and the writer goes on with the next call). Chunks synced before are
//! never counted as lost.
//!
//! Every backend makes the data durable before returning (`fdatasync`) and then drops it from the
//! page cache (`posix_fadvise(DONTNEED)`): a write inside a suspension must not leave delayed
//! writeback behind that would disturb the program after it resumed.
//!
//! Backends: [`PosixWriter`] and [`UringWriter`] (overlaps encoding of the next chunk with the write
//! of the previous one). **Extension point for MPI-IO:** the recorder implements [`Writer`] itself
//! over its `MPI_File_*` C functions ([`WriterKind::MpiIo`]); it can reuse [`OutputPlan`] for naming
//! and headers.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use format::chunk::EncodedChunk;
use format::framing::{FileHeader, encode_file_header};
use format::writer::rank_file_name;
use thiserror::Error;

/// What one call to [`Writer::write_chunks`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub chunks: u64,
    pub events: u64,
    /// Payload bytes before compression.
    pub bytes_raw: u64,
    /// Bytes that went to disk (chunk framing and file headers included).
    pub bytes_stored: u64,
}

impl WriteStats {
    pub fn add_chunk(&mut self, chunk: &EncodedChunk) {
        self.chunks += 1;
        self.events += chunk.events;
        self.bytes_raw += chunk.raw_len;
        self.bytes_stored += chunk.bytes.len() as u64;
    }
}

#[derive(Debug, Error)]
pub enum WriteError {
    /// Every output directory is full: recording must stop. `written` is what this call still
    /// managed to write before; the chunk that did not fit and every later one are lost.
    #[error("no space left in any output directory (last: {last_dir}); recording stopped")]
    OutOfSpace {
        last_dir: PathBuf,
        written: WriteStats,
    },
    /// The writer stopped earlier (out of space) and writes nothing any more.
    #[error("the writer has stopped after running out of space")]
    Stopped,
    /// `fdatasync` failed with an I/O error twice in one call, the second time on chunks written
    /// again in a new part file: those chunks may not be on disk and are given up. `written` is
    /// what this call wrote durably; the writer itself goes on with the next call.
    #[error(
        "{path}: syncing failed twice ({source}); the chunks written since the last successful sync may be lost"
    )]
    SyncLost {
        path: PathBuf,
        written: WriteStats,
        source: io::Error,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("writer backend unavailable: {0}")]
    Unavailable(String),
}

/// A backend that appends encoded chunks to this rank's trace.
pub trait Writer: Send {
    /// Writes every chunk `chunks` yields, in order, and makes them durable before returning. The
    /// iterator may encode lazily: a backend that can overlap encoding with writing pulls the next
    /// chunk while the previous one is being written.
    fn write_chunks(
        &mut self,
        chunks: &mut dyn Iterator<Item = EncodedChunk>,
    ) -> Result<WriteStats, WriteError>;

    /// True once the writer has run out of space everywhere.
    fn stopped(&self) -> bool;

    /// Part files created so far, in order.
    fn files(&self) -> &[PathBuf];
}

/// Which backend to use (the run setting). `MpiIo` is implemented by the recorder, so
/// [`open_writer`] refuses it.
pub use crate::config::Writer as WriterKind;

/// Opens a writer of `kind`. `Uring` fails with [`WriteError::Unavailable`] where the kernel refuses
/// io_uring, so the caller can fall back to `Posix`.
pub fn open_writer(kind: WriterKind, plan: OutputPlan) -> Result<Box<dyn Writer>, WriteError> {
    match kind {
        WriterKind::Posix => Ok(Box::new(PosixWriter::new(plan))),
        WriterKind::Uring => Ok(Box::new(UringWriter::new(plan)?)),
        WriterKind::MpiIo => Err(WriteError::Unavailable(
            "the MPI-IO writer is provided by the recorder".into(),
        )),
    }
}

/// Where a rank's trace goes: output directories in order of use, and the header every part file
/// starts with (its `part` field is set per file).
#[derive(Clone, Debug)]
pub struct OutputPlan {
    pub dirs: Vec<PathBuf>,
    pub header: FileHeader,
}

impl OutputPlan {
    pub fn path_of(&self, dir_index: usize, part: u32) -> PathBuf {
        self.dirs[dir_index].join(rank_file_name(self.header.rank, part))
    }

    pub fn header_bytes(&self, part: u32) -> Vec<u8> {
        encode_file_header(&FileHeader {
            part,
            ..self.header.clone()
        })
    }
}

/// The directory takes no more: a full disk, or a full quota.
fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// What a failed sync leaves to do.
enum SyncFailure {
    /// The unsynced chunks are queued again for a new part file: write them, sync again.
    Retry,
    Fatal(WriteError),
}

/// The rotation state shared by the backends: the open part file and what comes after it.
struct Parts {
    plan: OutputPlan,
    dir_index: usize,
    part: u32,
    file: Option<File>,
    /// Where the next chunk goes in the open file.
    offset: u64,
    files: Vec<PathBuf>,
    stopped: bool,
    /// Where the open file is known durable (the last successful sync, or its header).
    synced: u64,
    /// Chunks written to the open file after `synced`, kept until a sync confirms them.
    unsynced: Vec<EncodedChunk>,
    /// Chunks to write before any new one: the unsynced chunks of a file whose sync failed.
    replay: std::collections::VecDeque<EncodedChunk>,
    /// Retries after an I/O error at sync in the current call.
    eio_retries: u32,
}

impl Parts {
    fn new(plan: OutputPlan) -> Self {
        Parts {
            plan,
            dir_index: 0,
            part: 0,
            file: None,
            offset: 0,
            files: Vec::new(),
            stopped: false,
            synced: 0,
            unsynced: Vec::new(),
            replay: std::collections::VecDeque::new(),
            eio_retries: 0,
        }
    }

    /// A chunk the kernel accepted at the end of the open file.
    fn wrote(&mut self, chunk: EncodedChunk) {
        self.offset += chunk.bytes.len() as u64;
        self.unsynced.push(chunk);
    }

    /// A sync succeeded: the chunks written since the previous one are on disk.
    fn commit(&mut self, stats: &mut WriteStats) {
        for chunk in self.unsynced.drain(..) {
            stats.add_chunk(&chunk);
        }
        self.synced = self.offset;
    }

    /// The open file's sync failed: cuts it back to what was synced, closes it, and queues the
    /// unsynced chunks to be written again, in front of anything queued already.
    fn requeue_unsynced(&mut self) {
        if let Some(file) = self.file.take() {
            // Not synced: a reader stops at a torn tail anyway, and another failing sync here
            // would only delay the retry.
            let _ = file.set_len(self.synced);
        }
        for chunk in self.unsynced.drain(..).rev() {
            self.replay.push_front(chunk);
        }
    }

    /// The next chunk to write: queued ones first.
    fn next_chunk(
        &mut self,
        chunks: &mut dyn Iterator<Item = EncodedChunk>,
    ) -> Option<EncodedChunk> {
        self.replay.pop_front().or_else(|| chunks.next())
    }

    fn current_path(&self) -> PathBuf {
        self.plan.path_of(
            self.dir_index.min(self.plan.dirs.len().saturating_sub(1)),
            self.part,
        )
    }

    fn io_error(&self, source: io::Error) -> WriteError {
        WriteError::Io {
            path: self.current_path(),
            source,
        }
    }

    fn out_of_space(&mut self, written: WriteStats) -> WriteError {
        self.stopped = true;
        self.file = None;
        // Nowhere left to write them: they are lost, as `written` says.
        self.replay.clear();
        self.unsynced.clear();
        WriteError::OutOfSpace {
            last_dir: self.plan.dirs.last().cloned().unwrap_or_default(),
            written,
        }
    }

    /// Makes sure a part file is open, moving on to further directories while headers do not fit.
    /// Returns the header bytes written (they count as stored bytes).
    fn ensure_open(&mut self, written: WriteStats) -> Result<u64, WriteError> {
        if self.stopped {
            return Err(WriteError::Stopped);
        }
        if self.file.is_some() {
            return Ok(0);
        }
        loop {
            if self.dir_index >= self.plan.dirs.len() {
                return Err(self.out_of_space(written));
            }
            let path = self.plan.path_of(self.dir_index, self.part);
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&path);
            let file = match file {
                Ok(f) => f,
                Err(e) if is_out_of_space(&e) => {
                    self.dir_index += 1;
                    continue;
                }
                Err(source) => return Err(WriteError::Io { path, source }),
            };
            let header = self.plan.header_bytes(self.part);
            match file.write_all_at(&header, 0) {
                Ok(()) => {
                    self.files.push(path);
                    self.file = Some(file);
                    self.offset = header.len() as u64;
                    // A header that never syncs fails with the first chunk's sync, which writes
                    // both again elsewhere.
                    self.synced = self.offset;
                    return Ok(header.len() as u64);
                }
                Err(e) if is_out_of_space(&e) => {
                    drop(file);
                    let _ = std::fs::remove_file(&path);
                    self.dir_index += 1;
                }
                Err(source) => return Err(WriteError::Io { path, source }),
            }
        }
    }

    /// After `ENOSPC`/`EDQUOT` at a chunk starting at `chunk_start`: cuts the partial chunk off,
    /// syncs what came before it (or queues it again if that fails too), retires the file, and
    /// selects the next directory with the next part number.
    fn rotate(&mut self, chunk_start: u64, stats: &mut WriteStats) -> Result<(), WriteError> {
        if let Some(file) = self.file.take() {
            file.set_len(chunk_start).map_err(|e| self.io_error(e))?;
            self.offset = chunk_start;
            match settle(&file) {
                Ok(()) => self.commit(stats),
                Err(_) => {
                    self.file = Some(file);
                    self.requeue_unsynced();
                }
            }
        }
        self.dir_index += 1;
        self.part += 1;
        Ok(())
    }

    /// Makes the open file durable. After a failure, the unsynced chunks are queued for a new part
    /// file ([`SyncFailure::Retry`]): in the next directory when this one is full, in the same one
    /// after the first I/O error of the call.
    fn settle_open(&mut self, stats: &mut WriteStats) -> Result<(), SyncFailure> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let e = match settle(file) {
            Ok(()) => {
                self.commit(stats);
                return Ok(());
            }
            Err(e) => e,
        };
        let path = self.current_path();
        let out_of_space = is_out_of_space(&e);
        if !out_of_space && e.raw_os_error() != Some(libc::EIO) {
            return Err(SyncFailure::Fatal(WriteError::Io { path, source: e }));
        }
        if !out_of_space && self.eio_retries > 0 {
            // The same chunks failed twice: say they may be lost rather than loop.
            self.unsynced.clear();
            if let Some(file) = self.file.take() {
                let _ = file.set_len(self.synced);
            }
            self.part += 1;
            return Err(SyncFailure::Fatal(WriteError::SyncLost {
                path,
                written: *stats,
                source: e,
            }));
        }
        self.requeue_unsynced();
        if out_of_space {
            self.dir_index += 1;
        } else {
            self.eio_retries += 1;
        }
        self.part += 1;
        Err(SyncFailure::Retry)
    }

    /// Best effort after an error that ends the call: sync what can be synced.
    fn settle_quietly(&mut self, stats: &mut WriteStats) {
        if let Some(file) = &self.file
            && settle(file).is_ok()
        {
            self.commit(stats);
        }
    }
}

/// Forces the file's data to disk and drops it from the page cache, so no writeback happens later.
fn settle(file: &File) -> io::Result<()> {
    file.sync_data()?;
    // Only a hint: the data is on disk whatever it answers.
    // SAFETY: plain syscall on a descriptor we own for the duration of the call; no memory passed.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    Ok(())
}

/// An error of a call that ends early, with what the call wrote durably where the error says so.
fn with_written(e: WriteError, stats: WriteStats) -> WriteError {
    match e {
        WriteError::OutOfSpace { last_dir, .. } => WriteError::OutOfSpace {
            last_dir,
            written: stats,
        },
        WriteError::SyncLost { path, source, .. } => WriteError::SyncLost {
            path,
            written: stats,
            source,
        },
        other => other,
    }
}

/// Plain `pwrite` per chunk, then `fdatasync` + `posix_fadvise(DONTNEED)`.
pub struct PosixWriter {
    parts: Parts,
}

impl PosixWriter {
    pub fn new(plan: OutputPlan) -> Self {
        PosixWriter {
            parts: Parts::new(plan),
        }
    }

    /// A writer that starts a new part file `part` in directory `dir_index` of the plan: for a
    /// trace another backend began (MPI-IO cannot write after `MPI_Finalize`).
    pub fn continuing(plan: OutputPlan, dir_index: usize, part: u32) -> Self {
        let mut parts = Parts::new(plan);
        parts.dir_index = dir_index;
        parts.part = part;
        PosixWriter { parts }
    }

    fn write_one(&mut self, chunk: EncodedChunk, stats: &mut WriteStats) -> Result<(), WriteError> {
        loop {
            stats.bytes_stored += self.parts.ensure_open(*stats)?;
            let file = self.parts.file.as_ref().expect("opened above");
            let start = self.parts.offset;
            match file.write_all_at(&chunk.bytes, start) {
                Ok(()) => {
                    self.parts.wrote(chunk);
                    return Ok(());
                }
                Err(e) if is_out_of_space(&e) => {
                    let queued = self.parts.replay.len();
                    self.parts.rotate(start, stats)?;
                    // The chunks a failed sync queued again were written before this one: they
                    // go first, this one right after them, then whatever was queued already.
                    let requeued = self.parts.replay.len() - queued;
                    if requeued > 0 {
                        self.parts.replay.insert(requeued, chunk);
                        return Ok(());
                    }
                }
                Err(e) => return Err(self.parts.io_error(e)),
            }
        }
    }
}

impl Writer for PosixWriter {
    fn write_chunks(
        &mut self,
        chunks: &mut dyn Iterator<Item = EncodedChunk>,
    ) -> Result<WriteStats, WriteError> {
        let mut stats = WriteStats::default();
        self.parts.eio_retries = 0;
        loop {
            while let Some(chunk) = self.parts.next_chunk(chunks) {
                if let Err(e) = self.write_one(chunk, &mut stats) {
                    self.parts.settle_quietly(&mut stats);
                    return Err(with_written(e, stats));
                }
            }
            match self.parts.settle_open(&mut stats) {
                Ok(()) => return Ok(stats),
                Err(SyncFailure::Retry) => continue,
                Err(SyncFailure::Fatal(e)) => return Err(with_written(e, stats)),
            }
        }
    }

    fn stopped(&self) -> bool {
        self.parts.stopped
    }

    fn files(&self) -> &[PathBuf] {
        &self.parts.files
    }
}

/// A chunk handed to the kernel: the buffer must stay where it is until its completion is reaped.
struct InFlight {
    chunk: EncodedChunk,
    /// File offset where the chunk starts.
    start: u64,
    /// Bytes of the chunk the kernel has confirmed so far.
    done: usize,
}

/// io_uring backend: while the kernel writes chunk k, the iterator encodes chunk k+1.
pub struct UringWriter {
    parts: Parts,
    ring: io_uring::IoUring,
    in_flight: Option<InFlight>,
    /// True while a submission for `in_flight` has no completion reaped yet.
    submitted: bool,
}

impl UringWriter {
    pub fn new(plan: OutputPlan) -> Result<Self, WriteError> {
        let ring = io_uring::IoUring::new(4)
            .map_err(|e| WriteError::Unavailable(format!("io_uring setup failed: {e}")))?;
        Ok(UringWriter {
            parts: Parts::new(plan),
            ring,
            in_flight: None,
            submitted: false,
        })
    }

    /// Queues the unwritten rest of `in_flight` at its place in the open file.
    fn submit(&mut self) -> Result<(), WriteError> {
        let fd = self.parts.file.as_ref().expect("file open").as_raw_fd();
        let pending = self.in_flight.as_ref().expect("a chunk to submit");
        let rest = &pending.chunk.bytes[pending.done..];
        let entry =
            io_uring::opcode::Write::new(io_uring::types::Fd(fd), rest.as_ptr(), rest.len() as u32)
                .offset(pending.start + pending.done as u64)
                .build();
        // SAFETY: the buffer belongs to `self.in_flight`, which is neither dropped nor modified until
        // the completion is reaped in `reap` (Drop reaps too); the fd stays open for as long.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .map_err(|_| WriteError::Unavailable("io_uring queue full".into()))?;
        }
        self.ring.submit().map_err(|e| self.parts.io_error(e))?;
        self.submitted = true;
        Ok(())
    }

    /// Waits for the submitted write and returns its result (bytes written or `-errno`).
    fn reap(&mut self) -> Result<i32, WriteError> {
        loop {
            if let Some(cqe) = self.ring.completion().next() {
                self.submitted = false;
                return Ok(cqe.result());
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.parts.io_error(e)),
            }
        }
    }

    /// Drives the in-flight chunk to completion: resubmits short writes, rotates on
    /// `ENOSPC`/`EDQUOT`. Returns how many chunks it queued again at the front of the replay queue
    /// (unsynced chunks of the file it left, then the in-flight one) instead of writing them.
    fn finish_in_flight(&mut self, stats: &mut WriteStats) -> Result<usize, WriteError> {
        if self.in_flight.is_none() {
            return Ok(0);
        }
        loop {
            if !self.submitted {
                stats.bytes_stored += self.parts.ensure_open(*stats)?;
                self.submit()?;
            }
            let result = self.reap()?;
            let pending = self.in_flight.as_mut().expect("in flight");
            if result == -libc::ENOSPC || result == -libc::EDQUOT {
                let start = pending.start;
                let queued = self.parts.replay.len();
                self.parts.rotate(start, stats)?;
                let requeued = self.parts.replay.len() - queued;
                if requeued > 0 {
                    let chunk = self.in_flight.take().expect("in flight").chunk;
                    self.parts.replay.insert(requeued, chunk);
                    return Ok(requeued + 1);
                }
                // The new part's header goes first; the chunk is rewritten whole after it.
                stats.bytes_stored += self.parts.ensure_open(*stats)?;
                let pending = self.in_flight.as_mut().expect("in flight");
                pending.start = self.parts.offset;
                pending.done = 0;
            } else if result < 0 {
                return Err(self.parts.io_error(io::Error::from_raw_os_error(-result)));
            } else if result == 0 {
                return Err(self.parts.io_error(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "io_uring wrote nothing",
                )));
            } else {
                pending.done += result as usize;
                if pending.done == pending.chunk.bytes.len() {
                    let done = self.in_flight.take().expect("in flight");
                    self.parts.offset = done.start + done.chunk.bytes.len() as u64;
                    self.parts.unsynced.push(done.chunk);
                    return Ok(0);
                }
            }
        }
    }

    fn start(&mut self, chunk: EncodedChunk, stats: &mut WriteStats) -> Result<(), WriteError> {
        stats.bytes_stored += self.parts.ensure_open(*stats)?;
        self.in_flight = Some(InFlight {
            chunk,
            start: self.parts.offset,
            done: 0,
        });
        // Reserve the chunk's place now so that nothing else is placed there meanwhile.
        self.parts.offset += self.in_flight.as_ref().expect("set").chunk.bytes.len() as u64;
        self.submit()
    }

    fn write_all(
        &mut self,
        chunks: &mut dyn Iterator<Item = EncodedChunk>,
        stats: &mut WriteStats,
    ) -> Result<(), WriteError> {
        loop {
            // Encoding the next chunk overlaps with the kernel writing the previous one.
            let next = self.parts.next_chunk(chunks);
            let requeued = self.finish_in_flight(stats)?;
            match next {
                // What the rotation queued again was written before `next`: it goes after them.
                Some(chunk) if requeued > 0 => self.parts.replay.insert(requeued, chunk),
                Some(chunk) => self.start(chunk, stats)?,
                None if !self.parts.replay.is_empty() => {}
                None => return Ok(()),
            }
        }
    }
}

impl Writer for UringWriter {
    fn write_chunks(
        &mut self,
        chunks: &mut dyn Iterator<Item = EncodedChunk>,
    ) -> Result<WriteStats, WriteError> {
        let mut stats = WriteStats::default();
        self.parts.eio_retries = 0;
        loop {
            if let Err(e) = self.write_all(chunks, &mut stats) {
                self.abandon_in_flight();
                self.parts.settle_quietly(&mut stats);
                return Err(with_written(e, stats));
            }
            match self.parts.settle_open(&mut stats) {
                Ok(()) => return Ok(stats),
                Err(SyncFailure::Retry) => continue,
                Err(SyncFailure::Fatal(e)) => return Err(with_written(e, stats)),
            }
        }
    }

    fn stopped(&self) -> bool {
        self.parts.stopped
    }

    fn files(&self) -> &[PathBuf] {
        &self.parts.files
    }
}

impl UringWriter {
    /// Waits out a submitted write whose result no longer matters, so its buffer can be freed.
    fn abandon_in_flight(&mut self) {
        if self.submitted {
            let _ = self.reap();
        }
        self.in_flight = None;
    }
}

impl Drop for UringWriter {
    fn drop(&mut self) {
        self.abandon_in_flight();
    }
}

/// Checks that `dir` exists and is a directory we can create files in.
pub fn check_output_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".evenflush-probe-{}", std::process::id()));
    File::create(&probe)?;
    std::fs::remove_file(probe)
}
