//! Streaming reader of rank files: verifies every checksum, decodes one chunk at a time, and
//! reports where and why it stopped instead of panicking or guessing.

use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::chunk::decode::{ColumnCursor, Columns, Cursor, MiscCursor, split_columns};
use crate::error::FormatError;
use crate::framing::{
    CHUNK_BLOCKS_VERSION, CHUNK_HEADER_LEN, CHUNK_MAGIC, CHUNK_MIN_VERSION, CHUNK_VERSION,
    CODEC_NONE, CODEC_ZSTD, ChunkHeader, ENCODING_COLUMNS_V1, FileHeader, MAX_RAW_LEN, TailKind,
    Truncation, parse_file_header,
};
use crate::model::Event;
use crate::varint::get_u64;

/// Payloads up to this size are decompressed into a buffer allocated up front; bigger claimed
/// sizes grow the buffer only as real bytes arrive, so a lying length cannot reserve memory.
const PREALLOCATE_LIMIT: u64 = 64 << 20;

/// Chunk payloads decoded (decompressed and split into columns) by this process, over every
/// reader: what a windowed view saves is measured in these, not in wall time, which other load
/// on the machine blurs. Relaxed: a statistic, read after the readers finished.
static CHUNKS_DECODED: AtomicU64 = AtomicU64::new(0);

/// How many chunk payloads this process decoded so far (see [`ChunkReader::next_wanted`] for the
/// chunks a reader passes over without decoding).
pub fn chunks_decoded() -> u64 {
    CHUNKS_DECODED.load(Ordering::Relaxed)
}

/// Zstd frames (a block, or a whole chunk of version 8 and older) this process decompressed:
/// what reading a chunk again without checking it again saves is counted in these.
static FRAMES_DECOMPRESSED: AtomicU64 = AtomicU64::new(0);

/// How many zstd frames this process decompressed so far.
pub fn frames_decompressed() -> u64 {
    FRAMES_DECOMPRESSED.load(Ordering::Relaxed)
}

/// A chunk as [`ChunkReader::next_wanted`] reached it.
#[derive(Debug)]
pub enum Reached<'a> {
    /// Wanted: verified and decoded.
    Read(Box<Chunk<'a>>),
    /// Not wanted: its header and payload checksums were verified, its payload not decoded.
    Passed { offset: u64, header: ChunkHeader },
}

mod release;
mod verified;

pub use verified::blocks_lost;
use verified::{ChunkIdentity, FileIdentity};

enum Data {
    Map(memmap2::Mmap),
    /// A group file's map, shared by the members read from it.
    Shared(std::sync::Arc<memmap2::Mmap>),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Map(m) => m,
            Data::Shared(m) => m,
            Data::Owned(v) => v,
        }
    }
}

/// One rank file, memory-mapped; or one rank's share of a group file (see [`crate::group`]),
/// read through the same interface.
pub struct RankFile {
    path: PathBuf,
    data: Data,
    header: FileHeader,
    header_len: usize,
    /// For a group member: where its chunks are in the group file.
    segments: Option<Vec<Range<u64>>>,
    /// The file mapped, for a file mapped for itself: a chunk read again from it is not checked
    /// block by block again (see [`verified`]).
    identity: Option<FileIdentity>,
}

impl std::fmt::Debug for RankFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl RankFile {
    /// Maps the file and checks its header. Chunks are checked as they are iterated.
    pub fn open(path: impl AsRef<Path>) -> Result<RankFile, FormatError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| FormatError::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::File::open(&path).map_err(io)?;
        let metadata = file.metadata().map_err(io)?;
        let len = metadata.len();
        let data = if len == 0 {
            Data::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only; evenflush writers only append, so bytes already mapped
            // never change. A file truncated underneath us by another process could fault, which
            // is the documented hazard of reading files that are being deleted.
            Data::Map(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        let mut rank_file = Self::from_data(path, data)?;
        rank_file.identity = Some(FileIdentity::of(&metadata));
        Ok(rank_file)
    }

    /// Reads a file held in memory; `name` is used in error messages.
    pub fn from_bytes(bytes: Vec<u8>, name: impl Into<PathBuf>) -> Result<RankFile, FormatError> {
        Self::from_data(name.into(), Data::Owned(bytes))
    }

    fn from_data(path: PathBuf, data: Data) -> Result<RankFile, FormatError> {
        let (header, header_len) = parse_file_header(data.bytes(), &path)?;
        Ok(RankFile {
            path,
            data,
            header,
            header_len,
            segments: None,
            identity: None,
        })
    }

    /// One member of a group file whose map is `map`, as indexed by [`crate::group::scan_group`].
    pub fn group_member(
        path: impl Into<PathBuf>,
        map: std::sync::Arc<memmap2::Mmap>,
        member: &crate::group::GroupMember,
    ) -> RankFile {
        RankFile {
            path: path.into(),
            data: Data::Shared(map),
            header: member.header.clone(),
            header_len: 0,
            segments: Some(member.segments.clone()),
            identity: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// File length in bytes.
    pub fn len(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.data.bytes().is_empty()
    }

    /// The chunks in file order, each verified and decompressed when reached.
    pub fn chunks(&self) -> ChunkReader<'_> {
        let bytes = self.data.bytes();
        match &self.segments {
            Some(segments) => ChunkReader::over_segments(bytes, segments, &self.path),
            None => ChunkReader {
                identity: self.identity,
                ..ChunkReader::new(
                    &bytes[self.header_len..],
                    self.header_len as u64,
                    &self.path,
                )
            },
        }
    }

    /// Every event of every chunk, in file order.
    pub fn events(&self) -> Events<'_> {
        Events {
            chunks: self.chunks(),
            current: None,
        }
    }
}

/// A verified chunk. Its events are decoded lazily by [`Chunk::events`]: a chunk of version 9 on
/// holds its stored payload (borrowed from the file) and decompresses one block at a time while
/// its events are read, an older one holds its whole decompressed payload.
#[derive(Debug)]
pub struct Chunk<'a> {
    /// Byte offset of the chunk header in the file.
    pub offset: u64,
    pub header: ChunkHeader,
    body: Body<'a>,
}

#[derive(Debug)]
enum Body<'a> {
    /// Chunk versions 1 to 8: one payload for the whole chunk.
    Whole {
        payload: Vec<u8>,
        columns: Box<Columns>,
    },
    /// The stored payload (FORMAT.md "Payload: blocks") and its blocks, each checked when the
    /// chunk was read.
    Blocks {
        stored: &'a [u8],
        blocks: Vec<BlockEntry>,
        /// Block 0 decompressed when it was checked, kept for its events (read next, nearly
        /// always) rather than decompressed again; empty if block 0 is stored as is or was not
        /// checked now.
        first: Vec<u8>,
        /// The chunk's version, which a block's columns are split by.
        version: u16,
        /// The file the stored bytes are mapped from, when a releasing walk handed the chunk
        /// out ([`Chunk::release_as_read`]): each block's pages go once it is done with.
        release: Option<release::Release<'a>>,
    },
}

#[derive(Debug)]
struct BlockEntry {
    /// Where its stored bytes are in the stored payload; stored as is when as long as `raw_len`.
    stored: Range<usize>,
    raw_len: usize,
    events: u64,
    /// Split when the chunk was read and the block checked; `None` for a block whose bytes
    /// this process checked on an earlier read (see [`verified`]): split when loaded.
    columns: Option<Columns>,
}

impl Body<'_> {
    fn blocks(&self) -> usize {
        match self {
            Body::Whole { .. } => 1,
            Body::Blocks { blocks, .. } => blocks.len(),
        }
    }

    /// Block `block`'s columns, if split when the chunk was read.
    fn columns(&self, block: usize) -> Option<&Columns> {
        match self {
            Body::Whole { columns, .. } => Some(columns),
            Body::Blocks { blocks, .. } => blocks[block].columns.as_ref(),
        }
    }

    /// Splits a loaded block whose columns were not split when its chunk was read.
    fn split(&self, block: usize, buf: &[u8]) -> Option<Columns> {
        let Body::Blocks {
            blocks, version, ..
        } = self
        else {
            return None;
        };
        split_columns(self.payload(block, buf), blocks[block].events, *version).ok()
    }

    /// Makes block `block`'s payload readable through [`Body::payload`]: a compressed block is
    /// decompressed into `buf`. False if it cannot be: only for bytes that passed every check
    /// (when this chunk was read, or an earlier read of the same bytes) and fail now, which
    /// decoding, being deterministic, does only if the file changed (see [`verified`]).
    fn load(&self, block: usize, buf: &mut Vec<u8>) -> bool {
        match self {
            Body::Whole { .. } => true,
            Body::Blocks {
                stored,
                blocks,
                first,
                ..
            } => {
                let b = &blocks[block];
                if b.stored.len() == b.raw_len {
                    return true;
                }
                if block == 0 && !first.is_empty() {
                    buf.clear();
                    buf.extend_from_slice(first);
                    return true;
                }
                decompress_into(&stored[b.stored.clone()], b.raw_len as u64, buf).is_ok()
            }
        }
    }

    /// Block `block`'s payload, once loaded into `buf`.
    #[inline]
    fn payload<'s>(&'s self, block: usize, buf: &'s [u8]) -> &'s [u8] {
        match self {
            Body::Whole { payload, .. } => payload,
            Body::Blocks { stored, blocks, .. } => {
                let b = &blocks[block];
                if b.stored.len() == b.raw_len {
                    &stored[b.stored.clone()]
                } else {
                    buf
                }
            }
        }
    }
}

/// Where a walk over a chunk's events stands: the block being read (decompressed into `buf`
/// unless stored as is) and the cursor in it. Only that block's bytes are held.
struct Stepper<C> {
    block: usize,
    loaded: bool,
    buf: Vec<u8>,
    /// `buf` holds block 0 already.
    preloaded: bool,
    /// The columns of the block being read, when its chunk's read did not split them.
    split: Option<Columns>,
    cursor: Option<C>,
}

impl<C: Cursor> Stepper<C> {
    fn new() -> Self {
        Stepper {
            block: 0,
            loaded: false,
            buf: Vec::new(),
            preloaded: false,
            split: None,
            cursor: None,
        }
    }

    #[inline]
    fn next(&mut self, body: &Body<'_>) -> Option<Event> {
        loop {
            if self.loaded {
                let columns = match body.columns(self.block) {
                    Some(columns) => columns,
                    None => self.split.as_ref()?,
                };
                let payload = body.payload(self.block, &self.buf);
                if let Some(e) = self.cursor.as_mut()?.next_event(payload, columns) {
                    return Some(e);
                }
                self.loaded = false;
                body.release(self.block, true);
                self.block += 1;
            }
            if self.block >= body.blocks() {
                // Done: the block's bytes go now, not when the iterator is dropped.
                self.buf = Vec::new();
                return None;
            }
            if body.columns(self.block).is_some_and(|c| !C::wants(c)) {
                self.block += 1;
                continue;
            }
            let preloaded = self.block == 0 && std::mem::take(&mut self.preloaded);
            if !preloaded && !body.load(self.block, &mut self.buf) {
                verified::block_lost();
                return None;
            }
            self.split = None;
            let columns = match body.columns(self.block) {
                Some(columns) => columns,
                None => {
                    let Some(split) = body.split(self.block, &self.buf) else {
                        verified::block_lost();
                        return None;
                    };
                    &*self.split.insert(split)
                }
            };
            body.release(self.block, false);
            if !C::wants(columns) {
                body.release(self.block, true);
                self.block += 1;
                continue;
            }
            match &mut self.cursor {
                Some(c) => c.restart(columns),
                None => self.cursor = Some(C::start(columns)),
            }
            self.loaded = true;
        }
    }
}

impl<'a> Chunk<'a> {
    pub fn rank(&self) -> u32 {
        self.header.rank
    }
    pub fn stream(&self) -> u32 {
        self.header.stream
    }
    pub fn seq(&self) -> u64 {
        self.header.seq
    }
    pub fn event_count(&self) -> u64 {
        self.header.events
    }

    /// The chunk's events in order.
    pub fn events(&self) -> ChunkEvents<'_, 'a> {
        ChunkEvents {
            chunk: self,
            stepper: Stepper::new(),
        }
    }

    /// Only the chunk's misc events (everything but calls and completions), in order: far
    /// cheaper than [`Chunk::events`] for readers that want metadata, as no numeric column is
    /// decoded (and no block without misc events is decompressed).
    pub fn misc_events(&self) -> MiscEvents<'_, 'a> {
        MiscEvents {
            chunk: self,
            stepper: Stepper::new(),
        }
    }

    /// The chunk's events, owning the chunk.
    pub fn into_events(mut self) -> ChunkIntoEvents<'a> {
        let mut stepper = Stepper::new();
        // Block 0's bytes move to the walk, which holds them while they are read and no longer.
        if let Body::Blocks { first, .. } = &mut self.body {
            stepper.buf = std::mem::take(first);
            stepper.preloaded = !stepper.buf.is_empty();
        }
        ChunkIntoEvents {
            chunk: self,
            stepper,
        }
    }
}

/// Events of a borrowed chunk. The chunk was fully validated when read, so this cannot fail.
pub struct ChunkEvents<'c, 'a> {
    chunk: &'c Chunk<'a>,
    stepper: Stepper<ColumnCursor>,
}

impl Iterator for ChunkEvents<'_, '_> {
    type Item = Event;
    #[inline]
    fn next(&mut self) -> Option<Event> {
        self.stepper.next(&self.chunk.body)
    }
}

/// The misc events of a borrowed chunk (see [`Chunk::misc_events`]).
pub struct MiscEvents<'c, 'a> {
    chunk: &'c Chunk<'a>,
    stepper: Stepper<MiscCursor>,
}

impl Iterator for MiscEvents<'_, '_> {
    type Item = Event;
    fn next(&mut self) -> Option<Event> {
        self.stepper.next(&self.chunk.body)
    }
}

/// Events of an owned chunk: holds the chunk (its stored payload is the file's) and the block
/// being read.
pub struct ChunkIntoEvents<'a> {
    chunk: Chunk<'a>,
    stepper: Stepper<ColumnCursor>,
}

impl Iterator for ChunkIntoEvents<'_> {
    type Item = Event;
    #[inline]
    fn next(&mut self) -> Option<Event> {
        self.stepper.next(&self.chunk.body)
    }
}

/// Iterates the chunks of a byte range holding a chunk sequence (the part of a rank file after
/// its header). Yields each valid chunk; a damaged one yields one error and ends the iteration.
/// [`ChunkReader::tail`] then says where and why reading stopped.
pub struct ChunkReader<'a> {
    bytes: &'a [u8],
    base: u64,
    pos: usize,
    /// End of the bytes read now: the end of `bytes`, or of the current segment.
    end: usize,
    /// Further byte ranges to read after this one (a group member's later flushes).
    segments: &'a [Range<u64>],
    path: &'a Path,
    done: bool,
    tail: Option<Truncation>,
    skipped: Vec<Truncation>,
    /// The file read, if known: its chunks checked whole once are not checked again.
    identity: Option<FileIdentity>,
}

impl<'a> ChunkReader<'a> {
    /// `bytes` starts at file offset `base`; `path` is used in errors.
    pub fn new(bytes: &'a [u8], base: u64, path: &'a Path) -> Self {
        ChunkReader {
            bytes,
            base,
            pos: 0,
            end: bytes.len(),
            segments: &[],
            path,
            done: false,
            tail: None,
            skipped: Vec::new(),
            identity: None,
        }
    }

    /// Reads the chunks in `segments` of `file` (a whole file's bytes), one range after the
    /// other, as if they were one sequence. A stop inside a range is resumed from by
    /// [`ChunkReader::resync`], which also moves on to the next range.
    pub fn over_segments(file: &'a [u8], segments: &'a [Range<u64>], path: &'a Path) -> Self {
        let mut reader = ChunkReader {
            bytes: file,
            base: 0,
            pos: 0,
            end: 0,
            segments,
            path,
            done: false,
            tail: None,
            skipped: Vec::new(),
            identity: None,
        };
        reader.next_segment();
        reader
    }

    /// Moves to the next segment; false when there is none.
    fn next_segment(&mut self) -> bool {
        let Some((first, rest)) = self.segments.split_first() else {
            return false;
        };
        self.segments = rest;
        let clamp = |v: u64| {
            usize::try_from(v)
                .unwrap_or(usize::MAX)
                .min(self.bytes.len())
        };
        self.pos = clamp(first.start);
        self.end = clamp(first.end).max(self.pos);
        true
    }

    /// Set once iteration ended somewhere other than exactly at the end of the bytes.
    pub fn tail(&self) -> Option<&Truncation> {
        self.tail.as_ref()
    }

    /// Where reading stopped and later resumed through [`ChunkReader::resync`], oldest first.
    pub fn skipped(&self) -> &[Truncation] {
        &self.skipped
    }

    /// After the iteration stopped at damage, looks for the next intact chunk header past the
    /// stopping point and resumes there, so one damaged chunk does not hide the rest of a file.
    /// A candidate must carry the chunk magic, a matching header checksum and the known version;
    /// its payload is then verified as usual. Returns the offset reading resumes at, or `None`
    /// (and stays stopped) if there is no stop to recover from or no further chunk.
    pub fn resync(&mut self) -> Option<u64> {
        let stop = self.tail.as_ref()?;
        let from = usize::try_from(stop.offset - self.base)
            .ok()?
            .checked_add(1)?;
        let found = self.bytes.get(from..self.end).and_then(|rest| {
            rest.windows(CHUNK_HEADER_LEN).position(|w| {
                w[..4] == CHUNK_MAGIC
                    && u32::from_le_bytes([w[68], w[69], w[70], w[71]]) == crc32c::crc32c(&w[..68])
                    && (CHUNK_MIN_VERSION..=CHUNK_VERSION)
                        .contains(&u16::from_le_bytes([w[4], w[5]]))
            })
        });
        match found {
            Some(found) => self.pos = from + found,
            None if self.next_segment() => {}
            None => return None,
        }
        if let Some(t) = self.tail.take() {
            self.skipped.push(t);
        }
        self.done = false;
        Some(self.offset())
    }

    /// File offset of the next chunk to read (after the end, the end of the valid chunks).
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn stop(&mut self, kind: TailKind, reason: String) {
        self.done = true;
        self.tail = Some(Truncation {
            offset: self.offset(),
            kind,
            reason,
        });
    }

    fn fail<T>(&mut self, e: FormatError) -> Option<Result<T, FormatError>> {
        self.stop(TailKind::Damaged, e.reason());
        Some(Err(e))
    }

    /// The next chunk, decoded only when `want` says so from its header: a reader that needs a
    /// few chunks (a window of the run) passes over the rest at the cost of a checksum. Both kinds
    /// go through every check up to the payload checksum, so damage stops the reader at the same
    /// place whichever chunks are wanted, except a payload that passes its checksum and still
    /// fails to decompress, which only a decoding reader finds.
    pub fn next_wanted(
        &mut self,
        want: impl FnOnce(&ChunkHeader) -> bool,
    ) -> Option<Result<Reached<'a>, FormatError>> {
        if self.done {
            return None;
        }
        self.read_next(want)
    }

    fn read_next(
        &mut self,
        want: impl FnOnce(&ChunkHeader) -> bool,
    ) -> Option<Result<Reached<'a>, FormatError>> {
        while self.pos >= self.end {
            if !self.next_segment() {
                self.done = true;
                return None;
            }
        }
        let bytes: &'a [u8] = self.bytes;
        let rest = &bytes[self.pos..self.end];
        let offset = self.offset();
        let path = || self.path.to_path_buf();
        if rest.iter().all(|&b| b == 0) {
            self.stop(
                TailKind::ZeroFilled,
                format!("{} zero bytes after the last chunk", rest.len()),
            );
            return None;
        }
        let prefix = rest.len().min(CHUNK_MAGIC.len());
        if rest[..prefix] != CHUNK_MAGIC[..prefix] {
            let found = rest[..prefix].to_vec();
            return self.fail(FormatError::BadMagic {
                path: path(),
                offset,
                what: "chunk",
                found,
            });
        }
        let Some(header_bytes) = rest.get(..CHUNK_HEADER_LEN) else {
            self.stop(
                TailKind::Cut,
                format!("file ends {} bytes into a chunk header", rest.len()),
            );
            return None;
        };
        let header_bytes: &[u8; CHUNK_HEADER_LEN] = header_bytes.try_into().ok()?;
        let stored = u32::from_le_bytes(header_bytes[68..72].try_into().ok()?);
        let computed = crc32c::crc32c(&header_bytes[..68]);
        if stored != computed {
            return self.fail(FormatError::ChecksumMismatch {
                path: path(),
                offset,
                what: "chunk header",
                stored,
                computed,
            });
        }
        let h = ChunkHeader::from_bytes(header_bytes);
        if !(CHUNK_MIN_VERSION..=CHUNK_VERSION).contains(&h.version) {
            return self.fail(FormatError::UnsupportedVersion {
                path: path(),
                offset,
                what: "chunk",
                version: h.version,
                supported: CHUNK_VERSION,
            });
        }
        if h.codec != CODEC_NONE && h.codec != CODEC_ZSTD {
            return self.fail(FormatError::UnknownCodec {
                path: path(),
                offset,
                what: "codec",
                value: h.codec,
            });
        }
        if h.encoding != ENCODING_COLUMNS_V1 {
            return self.fail(FormatError::UnknownCodec {
                path: path(),
                offset,
                what: "payload encoding",
                value: h.encoding,
            });
        }
        let available = (rest.len() - CHUNK_HEADER_LEN) as u64;
        if h.stored_len > available {
            // The header is intact, so its length is trusted: the file was cut inside this chunk.
            self.stop(
                TailKind::Cut,
                format!(
                    "file ends inside the chunk payload ({available} of {} bytes present)",
                    h.stored_len
                ),
            );
            return None;
        }
        let bad_len = |what, value, reason| FormatError::BadLength {
            path: path(),
            offset,
            what,
            value,
            reason,
        };
        if h.raw_len > MAX_RAW_LEN {
            return self.fail(bad_len(
                "raw length",
                h.raw_len,
                "larger than any writer produces",
            ));
        }
        if h.codec == CODEC_NONE && h.raw_len != h.stored_len {
            return self.fail(bad_len(
                "raw length",
                h.raw_len,
                "differs from the stored length of an uncompressed chunk",
            ));
        }
        // Both bounded by the checks above.
        if h.events > h.raw_len {
            return self.fail(bad_len(
                "event count",
                h.events,
                "more events than payload bytes",
            ));
        }
        let stored_len = h.stored_len as usize;
        let stored_payload = &rest[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + stored_len];
        let computed = crc32c::crc32c(stored_payload);
        if computed != h.payload_crc {
            return self.fail(FormatError::ChecksumMismatch {
                path: path(),
                offset,
                what: "chunk payload",
                stored: h.payload_crc,
                computed,
            });
        }
        if !want(&h) {
            self.pos += CHUNK_HEADER_LEN + stored_len;
            return Some(Ok(Reached::Passed { offset, header: h }));
        }
        let bad_payload = |reason: String| FormatError::BadPayload {
            path: path(),
            offset,
            reason,
        };
        let body = if h.version >= CHUNK_BLOCKS_VERSION {
            let identity = self.identity.map(|file| ChunkIdentity {
                file,
                offset,
                header_crc: stored,
                payload_crc: h.payload_crc,
            });
            let checked_before = identity.as_ref().is_some_and(verified::was_checked);
            match read_blocks(stored_payload, &h, !checked_before) {
                Ok((blocks, first)) => {
                    if let Some(identity) = identity.filter(|_| !checked_before) {
                        verified::remember_checked(identity);
                    }
                    Body::Blocks {
                        stored: stored_payload,
                        blocks,
                        first,
                        version: h.version,
                        release: None,
                    }
                }
                Err(reason) => return self.fail(bad_payload(reason)),
            }
        } else {
            let payload = if h.codec == CODEC_ZSTD {
                let mut out = Vec::new();
                match decompress_into(stored_payload, h.raw_len, &mut out) {
                    Ok(()) => out,
                    Err(reason) => return self.fail(bad_payload(reason)),
                }
            } else {
                stored_payload.to_vec()
            };
            match split_columns(&payload, h.events, h.version) {
                Ok(columns) => Body::Whole {
                    payload,
                    columns: Box::new(columns),
                },
                Err(reason) => return self.fail(bad_payload(reason)),
            }
        };
        self.pos += CHUNK_HEADER_LEN + stored_len;
        CHUNKS_DECODED.fetch_add(1, Ordering::Relaxed);
        Some(Ok(Reached::Read(Box::new(Chunk {
            offset,
            header: h,
            body,
        }))))
    }
}

/// Reads and checks a version 9 stored payload (FORMAT.md "Payload: blocks"): the directory
/// against the header's lengths and event count, then every block, decompressed one at a time
/// into one buffer and checked as a columns v1 payload. Nothing but the directory and each
/// block's column offsets is kept: the events are decoded again, block by block, when read.
fn read_blocks(
    stored: &[u8],
    h: &ChunkHeader,
    check_blocks: bool,
) -> Result<(Vec<BlockEntry>, Vec<u8>), String> {
    let mut pos = 0;
    let count = get_u64(stored, &mut pos).ok_or("bad block directory")?;
    if count > h.events {
        return Err("more blocks than events".into());
    }
    // (events, raw_len, stored_len) of each block; an entry takes at least 3 bytes, so the
    // vector grows only with bytes actually present.
    let mut directory = Vec::new();
    for _ in 0..count {
        let mut field = || get_u64(stored, &mut pos).ok_or("bad block directory");
        directory.push((field()?, field()?, field()?));
    }
    let (mut events, mut raw, mut at) = (0u64, pos as u64, pos as u64);
    for &(e, r, s) in &directory {
        if e == 0 {
            return Err("empty block".into());
        }
        if h.codec == CODEC_NONE && r != s {
            return Err("compressed block in a chunk stored as is".into());
        }
        events = events.checked_add(e).ok_or("block event counts overflow")?;
        raw = raw.checked_add(r).ok_or("block lengths overflow")?;
        at = at.checked_add(s).ok_or("block lengths overflow")?;
    }
    if events != h.events {
        return Err(format!(
            "blocks hold {events} events, header says {}",
            h.events
        ));
    }
    if raw != h.raw_len {
        return Err(format!(
            "blocks hold {raw} raw bytes, header says {}",
            h.raw_len
        ));
    }
    if at != stored.len() as u64 {
        return Err("block lengths do not add up to the stored payload".into());
    }
    // Every length is now bounded by the payload's (stored) or by `raw_len` (checked against
    // MAX_RAW_LEN by the caller), so the conversions below are exact.
    let mut blocks = Vec::with_capacity(directory.len());
    let mut scratch = Vec::new();
    let mut first = Vec::new();
    for (k, &(e, r, s)) in directory.iter().enumerate() {
        let range = pos..pos + s as usize;
        pos = range.end;
        if !check_blocks {
            blocks.push(BlockEntry {
                stored: range,
                raw_len: r as usize,
                events: e,
                columns: None,
            });
            continue;
        }
        let bytes = &stored[range.clone()];
        let payload = if r == s {
            bytes
        } else {
            let into = if k == 0 { &mut first } else { &mut scratch };
            decompress_into(bytes, r, into).map_err(|m| format!("block {k}: {m}"))?;
            &into[..]
        };
        let columns =
            split_columns(payload, e, h.version).map_err(|m| format!("block {k}: {m}"))?;
        blocks.push(BlockEntry {
            stored: range,
            raw_len: r as usize,
            events: e,
            columns: Some(columns),
        });
    }
    Ok((blocks, first))
}

/// Decompresses one zstd frame of `raw_len` bytes into `out` (replacing what it held).
fn decompress_into(stored: &[u8], raw_len: u64, out: &mut Vec<u8>) -> Result<(), String> {
    FRAMES_DECOMPRESSED.fetch_add(1, Ordering::Relaxed);
    if raw_len <= PREALLOCATE_LIMIT {
        return decompress_reusing_context(stored, raw_len as usize, out);
    }
    *out = decompress(stored, raw_len)?;
    Ok(())
}

/// A frame claiming more than [`PREALLOCATE_LIMIT`]: the buffer grows only as bytes arrive.
fn decompress(stored: &[u8], raw_len: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(raw_len.min(PREALLOCATE_LIMIT) as usize);
    let decoder =
        zstd::stream::read::Decoder::with_buffer(stored).map_err(|e| format!("zstd: {e}"))?;
    // One byte more than promised, to notice a frame that decodes to more than the header says.
    decoder
        .single_frame()
        .take(raw_len + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("zstd: {e}"))?;
    if out.len() as u64 != raw_len {
        return Err(format!(
            "decompressed to {} bytes, header says {raw_len}",
            out.len()
        ));
    }
    Ok(out)
}

/// One chunk into a buffer of exactly `raw_len`, with this thread's decompression context.
/// Creating a context costs as much as decoding a small chunk (a trace of thousands of ranks has
/// as many small chunks), so each reading thread keeps one. A frame that decodes to more than
/// `raw_len` does not fit the buffer and fails.
fn decompress_reusing_context(
    stored: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    thread_local! {
        static CONTEXT: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    out.clear();
    out.reserve(raw_len);
    CONTEXT.with(|cell| {
        let mut context = cell.borrow_mut();
        if context.is_none() {
            *context = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let Some(decompressor) = context.as_mut() else {
            return Err("zstd: no decompression context".to_string());
        };
        decompressor
            .decompress_to_buffer(stored, out)
            .map_err(|e| format!("zstd: {e}"))
    })?;
    if out.len() != raw_len {
        return Err(format!(
            "decompressed to {} bytes, header says {raw_len}",
            out.len()
        ));
    }
    Ok(())
}

impl<'a> Iterator for ChunkReader<'a> {
    type Item = Result<Chunk<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_wanted(|_| true)? {
            Ok(Reached::Read(chunk)) => Some(Ok(*chunk)),
            Ok(Reached::Passed { .. }) => unreachable!("every chunk is wanted"),
            Err(e) => Some(Err(e)),
        }
    }
}

/// Every event of a file, chunk after chunk. Holds one decoded chunk at a time.
pub struct Events<'a> {
    chunks: ChunkReader<'a>,
    current: Option<ChunkIntoEvents<'a>>,
}

impl Events<'_> {
    /// See [`ChunkReader::tail`].
    pub fn tail(&self) -> Option<&Truncation> {
        self.chunks.tail()
    }
}

impl Iterator for Events<'_> {
    type Item = Result<Event, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.current.as_mut().and_then(Iterator::next) {
                return Some(Ok(e));
            }
            match self.chunks.next()? {
                Ok(chunk) => self.current = Some(chunk.into_events()),
                Err(e) => {
                    self.current = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One rank file found by [`open_dir`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RankFileEntry {
    pub rank: u32,
    pub part: u32,
    pub path: PathBuf,
}

/// Parses `rank-NNNNN.evf` / `rank-NNNNN.pK.evf` into (rank, part).
pub fn parse_rank_file_name(name: &str) -> Option<(u32, u32)> {
    let stem = name.strip_prefix("rank-")?.strip_suffix(".evf")?;
    let (rank, part) = match stem.split_once(".p") {
        Some((r, p)) => (r, p.parse::<u32>().ok().filter(|&p| p > 0)?),
        None => (stem, 0),
    };
    if rank.len() < 5 || !rank.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((rank.parse().ok()?, part))
}

/// The rank files in `dir`, sorted by rank then part.
pub fn open_dir(dir: impl AsRef<Path>) -> Result<Vec<RankFileEntry>, FormatError> {
    let dir = dir.as_ref();
    let io = |source| FormatError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if let Some((rank, part)) = name.to_str().and_then(parse_rank_file_name) {
            out.push(RankFileEntry {
                rank,
                part,
                path: entry.path(),
            });
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkEncoder;
    use crate::chunk::decode::BLOCK;
    use crate::framing::{FileHeader, encode_file_header};
    use crate::model::ClockCalibration;
    use crate::raw::RawBuf;
    use crate::synthetic::{HaloConfig, generate};

    fn halo_events(iterations: u64) -> Vec<Event> {
        let cfg = HaloConfig {
            world_size: 4,
            rank: 1,
            iterations,
            ..HaloConfig::default()
        };
        let mut out = Vec::new();
        generate(&cfg, |e| out.push(e.clone()));
        out
    }

    #[test]
    fn block_decoding_crosses_block_boundaries_and_reads_misc_events_alone() {
        // Several blocks of calls and completions, with a partial last block.
        let events = halo_events(3 * BLOCK as u64 + 17);
        let mut raw = RawBuf::new();
        for e in &events {
            raw.push_event(e);
        }
        let chunk = ChunkEncoder::new(1).encode(0, 0, 0, &raw);
        let mut file = encode_file_header(&FileHeader {
            rank: 0,
            world_size: 4,
            part: 0,
            clock: ClockCalibration::default(),
            created_unix_ns: 0,
            producer: "test".into(),
        });
        file.extend_from_slice(&chunk.bytes);
        let file = RankFile::from_bytes(file, "blocks.evf").unwrap();
        let chunks: Vec<_> = file.chunks().map(Result::unwrap).collect();
        assert_eq!(chunks.len(), 1);
        let decoded: Vec<Event> = chunks[0].events().collect();
        assert_eq!(decoded, events);
        let misc: Vec<Event> = chunks[0].misc_events().collect();
        let want: Vec<Event> = events
            .iter()
            .filter(|e| !matches!(e, Event::Call(_) | Event::Completion(_)))
            .cloned()
            .collect();
        assert!(!want.is_empty());
        assert_eq!(misc, want);
    }

    #[test]
    fn a_block_trusted_from_an_earlier_check_that_fails_is_counted_lost() {
        // Bytes that a check would refuse, read as if an earlier read had checked them (a file
        // changed under the reader with its checksums intact): the events stop at the bad block
        // and the loss is counted, for the command to fail on.
        let events = halo_events(60);
        let mut raw = RawBuf::new();
        events.iter().for_each(|e| raw.push_event(e));
        let chunk = ChunkEncoder::uncompressed()
            .with_block_events(100)
            .encode(0, 0, 0, &raw);
        let header: &[u8; CHUNK_HEADER_LEN] = chunk.bytes[..CHUNK_HEADER_LEN].try_into().unwrap();
        let h = ChunkHeader::from_bytes(header);
        let mut stored = chunk.bytes[CHUNK_HEADER_LEN..].to_vec();
        let (blocks, _) = read_blocks(&stored, &h, true).unwrap();
        assert!(blocks.len() >= 3);
        // The first kind of block 1: after its column count and 18 column lengths.
        let mut kinds = blocks[1].stored.start + 1;
        for _ in 0..18 {
            while stored[kinds] & 0x80 != 0 {
                kinds += 1;
            }
            kinds += 1;
        }
        stored[kinds] = 0xEE;
        assert!(
            read_blocks(&stored, &h, true).is_err(),
            "a check refuses it"
        );
        let (blocks, first) = read_blocks(&stored, &h, false).unwrap();
        let version = h.version;
        let chunk = Chunk {
            offset: 0,
            header: h,
            body: Body::Blocks {
                stored: &stored,
                blocks,
                first,
                version,
                release: None,
            },
        };
        let lost = blocks_lost();
        let read: Vec<Event> = chunk.events().collect();
        assert_eq!(read, events[..100]);
        assert_eq!(blocks_lost(), lost + 1);
    }
}
