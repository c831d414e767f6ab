//! Appends taken buffers to this rank's trace through the offload writer backends: one chunk per
//! piece of at most [`PIECE_BYTES`] of a buffer, with a sequence number per stream (thread), rotating to the next output directory when a
//! disk fills. Nothing is lost silently: what cannot be written is counted, said on stderr, and
//! marked in the trace where the disk still takes the few bytes of a marker.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use format::{
    ChunkEncoder, EncodedChunk, Event, FileHeader, Marker, RawBuf, WriterChange, WriterId,
    WriterUsed,
};
use offload::config::Layout;
use offload::writer::{OutputPlan, PosixWriter, WriteError, Writer, WriterKind, open_writer};

use crate::back::group_file::{GroupFile, GroupOutcome};
use crate::back::mpiio::MpiIoWriter;
use crate::front::Taken;

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
    /// The aggregated layout's group file (`None` with a file per rank).
    group: Option<GroupFile>,
    /// With a group file: this rank's own part files (from part 1 on) take its data from now on,
    /// after a write that could not be collective or a failed collective one. The rank still
    /// takes part in the group's collective writes, with nothing.
    diverted: bool,
    /// Where this rank's own part files start: the next directory once a disk filled.
    own_dir: usize,
    stats: SinkStats,
    /// Events a failed sync gave up, to be marked (`Marker::Lost`) by the next write.
    pending_lost: u64,
    /// Set while writing that marker right after the failure.
    marking_lost: bool,
    /// Chunks compressed in memory when the hard limit was reached between flushing suspensions
    /// (`compress_in_memory`), written first by the next write: their sequence numbers are older.
    held: Vec<EncodedChunk>,
}

/// Bytes of [`Sink::held`] chunks, readable without the sink's lock (memory samples, decisions).
static HELD_COMPRESSED: AtomicU64 = AtomicU64::new(0);

/// Compressed bytes waiting in memory for the next flush.
pub fn held_compressed() -> u64 {
    HELD_COMPRESSED.load(Ordering::Relaxed)
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
    MpiIo(Box<MpiIoWriter>),
}

impl Backend {
    fn get(&mut self) -> &mut dyn Writer {
        match self {
            Backend::Generic(w) => w.as_mut(),
            Backend::MpiIo(w) => w.as_mut(),
        }
    }
}

/// Where the trace goes; nothing is opened before the first write.
pub fn configure(
    dirs: Vec<PathBuf>,
    header: FileHeader,
    zstd_level: i32,
    kind: WriterKind,
    layout: Layout,
) {
    // A reserve file per rank is one more create per rank at start-up: exactly what the
    // aggregated layout avoids. Its ranks have none (a stop marker may then not fit).
    let reserve = dirs
        .last()
        .filter(|_| layout == Layout::Rank)
        .map(|d| d.join(format!(".rank-{:05}.reserve", header.rank)))
        .filter(|p| make_reserve(p).is_ok());
    let group = match layout {
        Layout::Rank => None,
        Layout::Node => Some(GroupFile::new(true)),
        Layout::Shared => Some(GroupFile::new(false)),
    };
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    *guard = Some(Sink {
        reserve,
        plan: OutputPlan { dirs, header },
        requested: kind,
        kind: if group.is_some() {
            WriterKind::Posix
        } else {
            kind
        },
        note: None,
        next_change: None,
        writer: None,
        encoder: ChunkEncoder::new(zstd_level),
        seq: HashMap::new(),
        stopped: None,
        group,
        diverted: false,
        own_dir: 0,
        stats: SinkStats::default(),
        pending_lost: 0,
        marking_lost: false,
        held: Vec::new(),
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
    // With a group file, `kind` is only what writes this rank's own part files.
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
                    let mut w = MpiIoWriter::new(link, self.plan.clone());
                    match w.open_first() {
                        Err(WriteError::Io { source, .. }) => {
                            Some(format!("MPI-IO cannot open the trace file: {source}"))
                        }
                        // Full disks are the writer's to report at its first write, as before.
                        _ => {
                            self.writer = Some(Backend::MpiIo(Box::new(w)));
                            None
                        }
                    }
                }
                (WriterKind::MpiIo, None) => Some(
                    "MPI-IO needs the recorder's private MPI communicator, which is not set up"
                        .to_string(),
                ),
                // Beside a group file (part 0), a rank's own files start at part 1.
                (WriterKind::Posix, _) if self.group.is_some() => {
                    self.writer = Some(Backend::Generic(Box::new(PosixWriter::continuing(
                        self.plan.clone(),
                        self.own_dir,
                        1,
                    ))));
                    None
                }
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
                say!(
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
                requested: self.requested_id(),
                used: writer_id(used),
                change,
                part: if self.group.is_some() { 1 } else { 0 },
                reason,
            });
        }
        Ok(self.writer.as_mut().expect("opened above").get())
    }

    fn requested_id(&self) -> WriterId {
        if self.group.is_some() {
            WriterId::Group
        } else {
            writer_id(self.requested)
        }
    }

    /// Encodes every taken buffer, piece by piece (see [`PIECE_BYTES`]), freeing each piece's raw
    /// blocks as it goes.
    fn encode_all(&mut self, mut taken: Vec<Taken>) -> Vec<EncodedChunk> {
        let rank = self.plan.header.rank;
        let mut out = Vec::new();
        for t in &mut taken {
            while !t.buf.is_empty() {
                let piece = t.buf.split_front(PIECE_BYTES);
                let n = self.seq.entry(t.stream).or_insert(0);
                out.push(self.encoder.encode(rank, t.stream, *n, &piece));
                *n += 1;
            }
        }
        out
    }

    /// The chunks compressed in memory so far, handed to a write (they go before anything newer).
    fn take_held(&mut self) -> Vec<EncodedChunk> {
        HELD_COMPRESSED.store(0, Ordering::Relaxed);
        std::mem::take(&mut self.held)
    }

    fn encode_note(&mut self, note: WriterUsed) -> EncodedChunk {
        let mut buf = RawBuf::new();
        buf.push_event(&Event::Writer(note));
        let n = self.seq.entry(0).or_insert(0);
        let chunk = self.encoder.encode(self.plan.header.rank, 0, *n, &buf);
        *n += 1;
        chunk
    }

    /// A flush made by every rank together (a suspension, or the start of `MPI_Finalize`): with a
    /// group file, one collective write of every member's chunks; otherwise as [`Sink::write`].
    fn write_collective(&mut self, taken: Vec<Taken>) {
        let Some(group) = self.group.as_mut() else {
            return self.write(taken);
        };
        if !group.is_collective() {
            return self.write(taken);
        }
        let own_data = self.stopped.is_none() && !self.diverted;
        let chunks = if own_data {
            let mut chunks = self.take_held();
            if let Some(group) = &self.group
                && !group.noted()
            {
                let note = WriterUsed {
                    requested: WriterId::Group,
                    used: WriterId::Group,
                    change: WriterChange::Opened,
                    part: 0,
                    reason: String::new(),
                };
                chunks.push(self.encode_note(note));
            }
            chunks.extend(self.encode_all(taken));
            chunks
        } else {
            // Taking part with nothing; the data goes to this rank's own files (or is counted).
            self.write(taken);
            Vec::new()
        };
        let group = self.group.as_mut().expect("checked above");
        match group.write_round(&self.plan, &chunks) {
            GroupOutcome::Written => {
                self.account_chunks(&chunks);
            }
            GroupOutcome::Failed {
                reason,
                out_of_space,
            } => {
                say!(
                    "evenflush: rank {}: writing the group file failed ({reason}); every rank \
                     writes files of its own from here on",
                    self.plan.header.rank
                );
                if out_of_space {
                    self.own_dir = 1;
                }
                self.diverted = true;
                self.next_change = Some((WriterChange::Fallback, reason));
                if !chunks.is_empty() {
                    self.write_encoded(chunks);
                }
            }
        }
    }

    /// Writes chunks encoded earlier (a failed group write's) through this rank's own writer. The
    /// writer's record follows them here: its sequence number is newer than theirs.
    fn write_encoded(&mut self, chunks: Vec<EncodedChunk>) {
        let mut held = self.take_held();
        held.extend(chunks);
        let chunks = held;
        let events: u64 = chunks.iter().map(|c| c.events).sum();
        if self.stopped.is_some() {
            self.stats.events_lost += events;
            return;
        }
        let result = self.writer().map(|_| ()).and_then(|()| {
            let note = self.note.take().map(|n| self.encode_note(n));
            let mut all = chunks.into_iter().chain(note);
            self.writer
                .as_mut()
                .expect("opened above")
                .get()
                .write_chunks(&mut all)
        });
        self.settle(result, events);
    }

    /// A write made by this rank alone (a local flush, an abnormal end, after `MPI_Finalize`).
    fn write(&mut self, taken: Vec<Taken>) {
        if let Some(group) = self.group.as_mut()
            && !self.diverted
            && self.stopped.is_none()
        {
            // After MPI_Finalize, the slot kept in the group file takes a small remainder.
            if group.has_tail_slot() {
                let mut chunks = self.take_held();
                chunks.extend(self.encode_all(taken));
                let group = self.group.as_mut().expect("checked above");
                match group.write_tail(&chunks) {
                    Ok(()) => {
                        self.account_chunks(&chunks);
                        return;
                    }
                    Err(why) => {
                        self.diverted = true;
                        self.next_change = Some((WriterChange::FinalizeHandover, why));
                        self.write_encoded(chunks);
                        return;
                    }
                }
            }
            if taken.iter().any(|t| !t.buf.is_empty()) || !self.held.is_empty() {
                self.diverted = true;
                self.next_change = Some((
                    WriterChange::Fallback,
                    "a flush this rank made alone cannot go into the group file, which its \
                     ranks write together"
                        .into(),
                ));
            }
        }
        self.write_taken(taken);
    }

    fn write_taken(&mut self, mut taken: Vec<Taken>) {
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
        let held = self.take_held();
        let events: u64 = taken.iter().map(|t| t.buf.events()).sum::<u64>()
            + held.iter().map(|c| c.events).sum::<u64>();
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
                // The writer's own record goes first, through that writer, into the part it names.
                let note = self.note.take().map(|n| self.encode_note(n));
                let Sink {
                    encoder,
                    seq,
                    writer,
                    ..
                } = self;
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
                let mut chunks = held.into_iter().chain(note).chain(&mut chunks);
                writer
                    .as_mut()
                    .expect("opened above")
                    .get()
                    .write_chunks(&mut chunks)
            }
        };
        self.settle(result, events);
    }

    fn settle(&mut self, result: Result<offload::writer::WriteStats, WriteError>, events: u64) {
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
                let rank = self.plan.header.rank;
                say!(
                    "evenflush: rank {rank}: {}: syncing failed twice ({source}); up to {lost} events \
                     written since the last successful sync may be lost; recording continues",
                    path.display()
                );
                // Say so in the trace now (this may be its last write); once, not in a loop.
                if !self.marking_lost {
                    self.marking_lost = true;
                    self.write_taken(Vec::new());
                    self.marking_lost = false;
                }
            }
            Err(e) => {
                self.stats.events_lost += events;
                self.stop(e.to_string(), events);
            }
        }
    }

    /// Counts chunks that a group write (or a tail slot) took whole.
    fn account_chunks(&mut self, chunks: &[EncodedChunk]) {
        let mut w = offload::writer::WriteStats::default();
        for c in chunks {
            w.add_chunk(c);
        }
        self.account(&w);
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
        say!(
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
                say!(
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
    if sink.group.is_some() {
        // Every rank is here: the last collective write, then the collective close, keeping a
        // slot for what is recorded after MPI_Finalize.
        sink.write_collective(taken);
        if let Some(group) = sink.group.as_mut() {
            group.close();
        }
        return;
    }
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

/// Like [`write`], for a flush that every rank makes at the same point (a suspension): with the
/// aggregated layout, this is one collective write of the group file.
pub fn write_collective(taken: Vec<Taken>) -> SinkStats {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else {
        return SinkStats {
            events_lost: taken.iter().map(|t| t.buf.events()).sum(),
            ..SinkStats::default()
        };
    };
    sink.write_collective(taken);
    sink.stats
}

/// Compresses every taken buffer into chunks kept in memory until the next write (the hard limit
/// reached between flushing suspensions, FORMAT.md `Compressed`). Returns the bytes the records
/// took in memory and their compressed size. Once recording stopped, the events are counted as lost instead.
pub fn compress_in_memory(taken: Vec<Taken>) -> (u64, u64) {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else {
        return (0, 0);
    };
    if sink.stopped.is_some() {
        sink.stats.events_lost += taken.iter().map(|t| t.buf.events()).sum::<u64>();
        return (0, 0);
    }
    let raw: u64 = taken.iter().map(|t| t.buf.bytes() as u64).sum();
    let chunks = sink.encode_all(taken);
    let stored: u64 = chunks.iter().map(|c| c.bytes.len() as u64).sum();
    sink.held.extend(chunks);
    let held: u64 = sink.held.iter().map(|c| c.bytes.len() as u64).sum();
    HELD_COMPRESSED.store(held, Ordering::Relaxed);
    (raw, stored)
}

/// Whether flushes must go through [`before_mpi_finalize`] at the start of `MPI_Finalize`.
pub fn needs_finalize_write() -> bool {
    SINK.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.group.is_some() || s.kind == WriterKind::MpiIo)
}

/// Totals so far.
pub fn stats() -> SinkStats {
    SINK.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|s| s.stats)
        .unwrap_or_default()
}
