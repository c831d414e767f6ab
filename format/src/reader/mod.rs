//! Streaming reader of rank files: verifies every checksum, decodes one chunk at a time, and
//! reports where and why it stopped instead of panicking or guessing.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::chunk::decode::{ColumnCursor, MiscCursor, split_columns};
use crate::error::FormatError;
use crate::framing::{
    CHUNK_BLOCKS_VERSION, CHUNK_HEADER_LEN, CHUNK_MAGIC, CHUNK_MIN_VERSION, CHUNK_VERSION,
    CODEC_NONE, CODEC_ZSTD, ChunkHeader, ENCODING_COLUMNS_V1, FileHeader, MAX_RAW_LEN, TailKind,
    Truncation, parse_file_header,
};
use crate::model::Event;

/// Chunk payloads decoded (decompressed and split into columns) by this process, over every
/// reader: what a windowed view saves is measured in these, not in wall time, which other load
/// on the machine blurs. Relaxed: a statistic, read after the readers finished.
static CHUNKS_DECODED: AtomicU64 = AtomicU64::new(0);

/// How many chunk payloads this process decoded so far (see [`ChunkReader::next_wanted`] for the
/// chunks a reader passes over without decoding).
pub fn chunks_decoded() -> u64 {
    CHUNKS_DECODED.load(Ordering::Relaxed)
}

/// A chunk as [`ChunkReader::next_wanted`] reached it.
#[derive(Debug)]
pub enum Reached<'a> {
    /// Wanted: verified and decoded.
    Read(Box<Chunk<'a>>),
    /// Not wanted: its header and payload checksums were verified, its payload not decoded.
    Passed { offset: u64, header: ChunkHeader },
}

mod blocks;
mod release;
mod verified;

pub use blocks::frames_decompressed;
use blocks::{Body, Stepper, decompress_into, read_blocks};

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
        let io = |cause| FormatError::Io {
            path: path.clone(),
            cause,
        };
        let (file, metadata) = open_to_map(&path).map_err(io)?;
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

/// Events of a borrowed chunk. The chunk was validated when read (or the same bytes on an
/// earlier read), so this ends early only if its file changed since, and then counts the block
/// lost ([`blocks_lost`]).
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

/// Opens a file that is about to be mapped, with its metadata. A directory is refused here:
/// mapping one fails with "No such device", which names nothing the user did.
pub(crate) fn open_to_map(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        return Err(std::io::ErrorKind::IsADirectory.into());
    }
    Ok((file, metadata))
}

/// The rank files in `dir`, sorted by rank then part.
pub fn open_dir(dir: impl AsRef<Path>) -> Result<Vec<RankFileEntry>, FormatError> {
    let dir = dir.as_ref();
    let io = |cause| FormatError::Io {
        path: dir.to_path_buf(),
        cause,
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
    use crate::synthetic;

    #[test]
    fn block_decoding_crosses_block_boundaries_and_reads_misc_events_alone() {
        // Several blocks of calls and completions, with a partial last block.
        let events = synthetic::rank_of_four(3 * BLOCK as u64 + 17);
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
}
