//! Appends taken buffers to this rank's trace through the offload writer backends: one chunk per
//! piece of at most [`PIECE_BYTES`] of a buffer, with a sequence number per stream (thread), rotating to the next output directory when a
//! disk fills. Nothing is lost silently: what cannot be written is counted, said on stderr, and
//! marked in the trace where the disk still takes the few bytes of a marker.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use format::{ChunkEncoder, Event, FileHeader, Marker, RawBuf, WriterChange, WriterId, WriterUsed};
use offload::writer::{OutputPlan, PosixWriter, WriteError, Writer, WriterKind, open_writer};

use crate::buffers::Taken;

/// Raw bytes of one buffer encoded into one chunk. Encoding a whole flush at once would hold the
/// column payload and the compressed copy of the entire buffer beside it (about three times the
/// buffer at the peak, which is what pushed memory-limited jobs into swap); piece by piece, each
/// piece's raw blocks are freed as soon as it is encoded, so a flush needs a few pieces of
/// headroom instead. Big enough that zstd still finds the repetition across iterations.
pub const PIECE_BYTES: usize = 4 << 20;

struct Sink {
    plan: OutputPlan,
    /// What the settings asked for, kept for the `Writer` records.
    requested: WriterKind,
    /// The writer to open next (posix once MPI-IO handed over at `MPI_Finalize`).
    kind: WriterKind,
    /// The `Writer` record still to be written, as the first chunk through the writer it names.
    note: Option<WriterUsed>,
    /// Why the next writer opened is not simply the requested one.
    next_change: Option<(WriterChange, String)>,
    writer: Option<Backend>,
    encoder: ChunkEncoder,
    seq: HashMap<u32, u64>,
    /// Set once nothing more can be written (every directory full, or an I/O error).
    stopped: Option<String>,
    /// A few preallocated kilobytes on the last output disk, given back when every disk is full so
    /// the marker saying where recording stopped still fits.
    reserve: Option<PathBuf>,
    stats: SinkStats,
    /// Events a failed sync gave up, to be marked (`Marker::Lost`) by the next write.
    pending_lost: u64,
    /// Set while writing that marker right after the failure.
    marking_lost: bool,
}

/// Totals over the life of the trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub events_written: u64,
    pub bytes_raw: u64,
    pub bytes_stored: u64,
    pub chunks: u64,
    /// Events that could not be written (every disk full, or the write failed).
    pub events_lost: u64,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// The writer in use. MPI-IO is kept by its own type because it must hand over to another
/// backend at `MPI_Finalize`.
enum Backend {
    Generic(Box<dyn Writer>),
    MpiIo(crate::mpiio::MpiIoWriter),
}

impl Backend {
    fn get(&mut self) -> &mut dyn Writer {
        match self {
            Backend::Generic(w) => w.as_mut(),
            Backend::MpiIo(w) => w,
        }
    }
}

/// Where the trace goes; nothing is opened before the first write.
pub fn configure(dirs: Vec<PathBuf>, header: FileHeader, zstd_level: i32, kind: WriterKind) {
    let reserve = dirs
        .last()
        .map(|d| d.join(format!(".rank-{:05}.reserve", header.rank)))
        .filter(|p| make_reserve(p).is_ok());
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    *guard = Some(Sink {
        reserve,
        plan: OutputPlan { dirs, header },
        requested: kind,
        kind,
        note: None,
        next_change: None,
        writer: None,
        encoder: ChunkEncoder::new(zstd_level),
        seq: HashMap::new(),
        stopped: None,
        stats: SinkStats::default(),
        pending_lost: 0,
        marking_lost: false,
    });
}

const RESERVE_BYTES: i64 = 8 << 10;

fn make_reserve(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::create(path)?;
    // SAFETY: plain syscall on a descriptor we own for the duration of the call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, RESERVE_BYTES) };
    if rc != 0 {
        let _ = std::fs::remove_file(path);
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Gives the reserve back (end of the run); the trace is complete without it. Nothing is
/// written after this: after a signal the process may die any moment, and a thread still
/// recording must not start a write that would be cut off mid-chunk.
pub fn close() {
    if let Some(sink) = SINK.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        if let Some(path) = sink.reserve.take() {
            let _ = std::fs::remove_file(path);
        }
        sink.stopped
            .get_or_insert_with(|| "the trace was closed".into());
    }
}

/// The first part file of this rank's trace.
pub fn path() -> Option<PathBuf> {
    SINK.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.plan.path_of(0, 0))
}

fn writer_id(kind: WriterKind) -> WriterId {
    match kind {
        WriterKind::Posix => WriterId::Posix,
        WriterKind::Uring => WriterId::Uring,
        WriterKind::MpiIo => WriterId::MpiIo,
    }
}

impl Sink {
    fn writer(&mut self) -> Result<&mut dyn Writer, WriteError> {
        if self.writer.is_none() {
            let rank = self.plan.header.rank;
            let (mut change, mut reason) = self
                .next_change
                .take()
                .unwrap_or((WriterChange::Opened, String::new()));
            let unavailable = match (self.kind, crate::mpi_link::link()) {
                (WriterKind::MpiIo, Some(link)) => {
                    self.writer = Some(Backend::MpiIo(crate::mpiio::MpiIoWriter::new(
                        link,
                        self.plan.clone(),
                    )));
                    None
                }
                (WriterKind::MpiIo, None) => Some(
                    "MPI-IO needs the recorder's private MPI communicator, which is not set up"
                        .to_string(),
                ),
                (kind, _) => match open_writer(kind, self.plan.clone()) {
                    Ok(w) => {
                        self.writer = Some(Backend::Generic(w));
                        None
                    }
                    Err(WriteError::Unavailable(why)) => Some(why),
                    Err(e) => return Err(e),
                },
            };
            let mut used = self.kind;
            if let Some(why) = unavailable {
                // Loud on stderr for the user, and recorded in the trace so a reader (and the
                // tests) can tell which writer really wrote each rank's files.
                eprintln!(
                    "evenflush: rank {rank}: writer {} unavailable ({why}); using posix",
                    writer_id(self.kind).name()
                );
                self.writer = Some(Backend::Generic(open_writer(
                    WriterKind::Posix,
                    self.plan.clone(),
                )?));
                used = WriterKind::Posix;
                change = WriterChange::Fallback;
                reason = why;
            }
            self.note = Some(WriterUsed {
                requested: writer_id(self.requested),
                used: writer_id(used),
                change,
                part: 0,
                reason,
            });
        }
        Ok(self.writer.as_mut().expect("opened above").get())
    }

    fn write(&mut self, mut taken: Vec<Taken>) {
        if self.pending_lost > 0 {
            let mut marker = RawBuf::new();
            marker.push_event(&Event::Marker(Marker::Lost {
                time: crate::clock::now(),
                events: std::mem::take(&mut self.pending_lost),
            }));
            taken.insert(
                0,
                Taken {
                    stream: 0,
                    buf: marker,
                    profile: None,
                },
            );
        }
        let events: u64 = taken.iter().map(|t| t.buf.events()).sum();
        if events == 0 {
            return;
        }
        if self.stopped.is_some() {
            self.stats.events_lost += events;
            return;
        }
        let rank = self.plan.header.rank;
        let mut events = events;
        let result = match self.writer() {
            Err(e) => Err(e),
            Ok(_) => {
                let Sink {
                    encoder,
                    seq,
                    writer,
                    note,
                    ..
                } = self;
                // The writer's own record goes first, through that writer, into the part it names.
                let note = note.take().map(|w| {
                    let mut buf = RawBuf::new();
                    buf.push_event(&Event::Writer(w));
                    let n = seq.entry(0).or_insert(0);
                    let chunk = encoder.encode(rank, 0, *n, &buf);
                    *n += 1;
                    chunk
                });
                events += note.as_ref().map_or(0, |c| c.events);
                // Chunks are encoded as the writer pulls them, so a backend that overlaps
                // compression with writing (io_uring) can; each piece's blocks are dropped right
                // after it is encoded.
                let mut pending = taken.iter_mut();
                let mut current = pending.next();
                let mut chunks = std::iter::from_fn(|| {
                    loop {
                        let t = current.as_mut()?;
                        if t.buf.is_empty() {
                            current = pending.next();
                            continue;
                        }
                        let piece = t.buf.split_front(PIECE_BYTES);
                        let n = seq.entry(t.stream).or_insert(0);
                        let chunk = encoder.encode(rank, t.stream, *n, &piece);
                        *n += 1;
                        return Some(chunk);
                    }
                });
                let mut chunks = note.into_iter().chain(&mut chunks);
                writer
                    .as_mut()
                    .expect("opened above")
                    .get()
                    .write_chunks(&mut chunks)
            }
        };
        match result {
            Ok(w) => self.account(&w),
            Err(WriteError::OutOfSpace { last_dir, written }) => {
                self.account(&written);
                let lost = events.saturating_sub(written.events);
                self.stats.events_lost += lost;
                self.stop(
                    format!(
                        "no space left in any output directory (last: {})",
                        last_dir.display()
                    ),
                    lost,
                );
            }
            Err(WriteError::SyncLost {
                path,
                written,
                source,
            }) => {
                // Recording goes on (the next write starts a new part file); these events are
                // counted, and marked in the trace by a write of the marker alone right below
                // (or, if that fails too, by the next write).
                self.account(&written);
                let lost = events.saturating_sub(written.events);
                self.stats.events_lost += lost;
                self.pending_lost += lost;
                eprintln!(
                    "evenflush: rank {rank}: {}: syncing failed twice ({source}); up to {lost} events \
                     written since the last successful sync may be lost; recording continues",
                    path.display()
                );
                // Say so in the trace now (this may be its last write); once, not in a loop.
                if !self.marking_lost {
                    self.marking_lost = true;
                    self.write(Vec::new());
                    self.marking_lost = false;
                }
            }
            Err(e) => {
                self.stats.events_lost += events;
                self.stop(e.to_string(), events);
            }
        }
    }

    fn account(&mut self, w: &offload::writer::WriteStats) {
        self.stats.events_written += w.events;
        self.stats.bytes_raw += w.bytes_raw;
        self.stats.bytes_stored += w.bytes_stored;
        self.stats.chunks += w.chunks;
    }

    /// Stops writing for good: warns loudly, and appends a last small chunk saying where recording
    /// stopped to the last complete part file (the writer cut the failed chunk off, so the few
    /// bytes of the marker usually fit where it was).
    fn stop(&mut self, why: String, lost: u64) {
        let rank = self.plan.header.rank;
        eprintln!(
            "evenflush: rank {rank}: RECORDING STOPPED: {why}. {lost} events lost; the application \
             keeps running, later events are counted but not kept."
        );
        let last = self
            .writer
            .as_mut()
            .and_then(|w| w.get().files().last().cloned());
        if let Some(reserve) = self.reserve.take() {
            let _ = std::fs::remove_file(reserve);
        }
        if let Some(path) = last {
            let mut tail = RawBuf::new();
            let time = crate::clock::now();
            tail.push_event(&Event::Marker(Marker::RecordingStopped { time }));
            tail.push_event(&Event::Marker(Marker::Lost { time, events: lost }));
            let n = self.seq.entry(0).or_insert(0);
            let chunk = self.encoder.encode(rank, 0, *n, &tail);
            *n += 1;
            let written = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|mut f| {
                    let complete = f.metadata()?.len();
                    let result = f.write_all(&chunk.bytes).and_then(|()| f.sync_data());
                    if result.is_err() {
                        // Never leave half a chunk behind: the file must end on a chunk boundary.
                        let _ = f.set_len(complete);
                    }
                    result
                });
            if let Err(e) = written {
                eprintln!(
                    "evenflush: rank {rank}: could not mark the stop in {}: {e}; the trace ends with its last complete chunk",
                    path.display()
                );
            }
        }
        self.stopped = Some(why);
    }
}

/// Entry of `MPI_Finalize`: MPI-IO is about to become unusable. With the `mpiio` writer, write
/// what is held now through it, close its file, and continue the trace in a further part file with
/// the posix writer. Other writers need nothing.
pub fn before_mpi_finalize(taken: Vec<Taken>) {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else { return };
    if sink.kind != WriterKind::MpiIo {
        drop(guard);
        write(taken);
        return;
    }
    sink.write(taken);
    let reason = "MPI-IO cannot be used after MPI_Finalize; the rest of the trace continues in a \
                  further part file"
        .to_string();
    match sink.writer.take() {
        Some(Backend::MpiIo(mut mpiio)) => {
            let (dir, part) = mpiio.position();
            mpiio.close();
            sink.writer = Some(Backend::Generic(Box::new(PosixWriter::continuing(
                sink.plan.clone(),
                dir,
                part,
            ))));
            sink.note = Some(WriterUsed {
                requested: WriterId::MpiIo,
                used: WriterId::Posix,
                change: WriterChange::FinalizeHandover,
                part,
                reason,
            });
        }
        // Nothing was written yet: the first writer opened will be posix, for the same reason.
        None => sink.next_change = Some((WriterChange::FinalizeHandover, reason)),
        // Already fell back to posix: nothing changes.
        generic => sink.writer = generic,
    }
    sink.kind = WriterKind::Posix;
}

/// The trace is about to be written from a thread of the recorder's own (signal helper,
/// `MPI_Abort`), where MPI-IO must not be called: with the `mpiio` writer, the rest of the trace
/// continues in a further posix part file. What MPI-IO wrote is complete (it syncs after every
/// write); its file is left to the MPI library, which is ending anyway.
pub fn leave_mpiio() {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else { return };
    if sink.kind != WriterKind::MpiIo {
        return;
    }
    let reason = "the trace was ended from a signal or MPI_Abort, where MPI-IO cannot be used; \
                  the rest continues in a further part file"
        .to_string();
    match sink.writer.take() {
        Some(Backend::MpiIo(mpiio)) => {
            let (dir, part) = mpiio.position();
            sink.writer = Some(Backend::Generic(Box::new(PosixWriter::continuing(
                sink.plan.clone(),
                dir,
                part,
            ))));
            sink.note = Some(WriterUsed {
                requested: WriterId::MpiIo,
                used: WriterId::Posix,
                change: WriterChange::FinalizeHandover,
                part,
                reason,
            });
        }
        None => sink.next_change = Some((WriterChange::FinalizeHandover, reason)),
        generic => sink.writer = generic,
    }
    sink.kind = WriterKind::Posix;
}

/// Writes every taken buffer (in pieces, see [`PIECE_BYTES`]) and makes them durable, freeing
/// the buffers as it goes. Returns the totals so far.
pub fn write(taken: Vec<Taken>) -> SinkStats {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else {
        return SinkStats {
            events_lost: taken.iter().map(|t| t.buf.events()).sum(),
            ..SinkStats::default()
        };
    };
    sink.write(taken);
    sink.stats
}

/// Totals so far.
pub fn stats() -> SinkStats {
    SINK.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.stats)
        .unwrap_or_default()
}
