//! Framing: the bytes that delimit and describe everything else. A rank file starts with its file
//! header, then holds a sequence of chunks, each a fixed chunk header before its payload; readers
//! and writers both depend on this module and not on each other (FORMAT.md "File header", "Chunk
//! header", "Crashes and truncation").

use std::path::Path;

use crate::error::FormatError;
use crate::model::{ClockCalibration, ClockSource};

// ---- File header ----

/// Magic at the start of every rank file.
pub const FILE_MAGIC: [u8; 8] = *b"EVFTRACE";
/// Version of the file header layout this crate writes and reads.
pub const FILE_VERSION: u16 = 1;
/// Bytes of the file header before the producer string.
pub const FILE_HEADER_FIXED_LEN: usize = 68;
/// Longest producer string kept; longer ones are cut at a character boundary.
pub const MAX_PRODUCER_LEN: usize = 4096;

/// What a rank file says about itself, once, at its start.
#[derive(Clone, Debug, PartialEq)]
pub struct FileHeader {
    pub rank: u32,
    pub world_size: u32,
    /// 0 for `rank-NNNNN.evf`, K for `rank-NNNNN.pK.evf`.
    pub part: u32,
    pub clock: ClockCalibration,
    pub created_unix_ns: u64,
    /// Free text naming the program that wrote the file (e.g. "evenflush 0.1.0").
    pub producer: String,
}

impl FileHeader {
    /// Part 0 of a synthetic rank (tests, fuzz seeds, benches): its ticks are nanoseconds from
    /// tick 0, created at time 0.
    pub fn nanoseconds(rank: u32, world_size: u32, producer: &str) -> FileHeader {
        FileHeader {
            rank,
            world_size,
            part: 0,
            clock: ClockCalibration {
                ticks_per_sec: 1e9,
                tick_at_epoch: 0,
                realtime_ns: 0,
                source: ClockSource::Tsc,
                read_ticks: 0,
            },
            created_unix_ns: 0,
            producer: producer.into(),
        }
    }
}

/// The bytes of a file header (FORMAT.md "File header").
pub fn encode_file_header(h: &FileHeader) -> Vec<u8> {
    let producer = producer_cut(&h.producer);
    let mut out = begin_header(&FILE_LAYOUT, producer);
    out.extend_from_slice(&h.rank.to_le_bytes());
    out.extend_from_slice(&h.world_size.to_le_bytes());
    out.extend_from_slice(&h.part.to_le_bytes());
    out.push(h.clock.source as u8);
    out.extend_from_slice(&h.clock.read_ticks.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&h.clock.ticks_per_sec.to_bits().to_le_bytes());
    out.extend_from_slice(&h.clock.tick_at_epoch.to_le_bytes());
    out.extend_from_slice(&h.clock.realtime_ns.to_le_bytes());
    out.extend_from_slice(&h.created_unix_ns.to_le_bytes());
    out.extend_from_slice(&(producer.len() as u32).to_le_bytes());
    finish_header(&FILE_LAYOUT, out, producer)
}

/// A producer string as stored: at most [`MAX_PRODUCER_LEN`] bytes, cut at a character boundary.
pub(crate) fn producer_cut(producer: &str) -> &str {
    let mut cut = producer.len().min(MAX_PRODUCER_LEN);
    while !producer.is_char_boundary(cut) {
        cut -= 1;
    }
    &producer[..cut]
}

pub(crate) fn clock_source_from(v: u8) -> Option<ClockSource> {
    match v {
        0 => Some(ClockSource::Tsc),
        1 => Some(ClockSource::Monotonic),
        2 => Some(ClockSource::Virtual),
        _ => None,
    }
}

/// The parts in which the file header and the group header (`group.rs`) differ; the checks are
/// the same and live in [`verify_header`], so both report damage alike.
pub(crate) struct HeaderLayout {
    pub magic: [u8; 8],
    pub version: u16,
    pub fixed_len: usize,
    /// Where the producer string's length is stored.
    pub producer_len_at: usize,
    /// "file", "group file": what a bad magic or version is said of.
    pub what: &'static str,
    pub header_what: &'static str,
    pub length_what: &'static str,
    pub flags_reason: &'static str,
}

pub(crate) const FILE_LAYOUT: HeaderLayout = HeaderLayout {
    magic: FILE_MAGIC,
    version: FILE_VERSION,
    fixed_len: FILE_HEADER_FIXED_LEN,
    producer_len_at: 64,
    what: "file",
    header_what: "file header",
    length_what: "file header length",
    flags_reason: "unknown file flags",
};

/// The common start of a header: magic, version, no flags, total length.
pub(crate) fn begin_header(layout: &HeaderLayout, producer: &str) -> Vec<u8> {
    let total = layout.fixed_len + producer.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&layout.magic);
    out.extend_from_slice(&layout.version.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out
}

/// The common end of a header: the producer string and the checksum of all before it.
pub(crate) fn finish_header(layout: &HeaderLayout, mut out: Vec<u8>, producer: &str) -> Vec<u8> {
    debug_assert_eq!(out.len(), layout.fixed_len);
    out.extend_from_slice(producer.as_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks magic, lengths, checksum, version and flags of a header laid out as `layout`; returns
/// its total length and producer string. A damaged length is told apart from a newer layout by
/// the version, so an old reader names the version it does not know rather than "damage".
pub(crate) fn verify_header<'a>(
    bytes: &'a [u8],
    path: &Path,
    layout: &HeaderLayout,
) -> Result<(usize, &'a str), FormatError> {
    let p = || path.to_path_buf();
    let prefix = bytes.len().min(layout.magic.len());
    if bytes[..prefix] != layout.magic[..prefix] {
        return Err(FormatError::BadMagic {
            path: p(),
            offset: 0,
            what: layout.what,
            found: bytes[..prefix].to_vec(),
        });
    }
    let truncated = |needed: usize| FormatError::Truncated {
        path: p(),
        offset: 0,
        what: layout.header_what,
        needed: needed as u64,
        available: bytes.len() as u64,
    };
    if bytes.len() < layout.fixed_len + 4 {
        return Err(truncated(layout.fixed_len + 4));
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or_default());
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    let unsupported = || FormatError::UnsupportedVersion {
        path: p(),
        offset: 0,
        what: layout.what,
        version,
        supported: layout.version,
    };
    let total = u32_at(12) as usize;
    let producer_len = u32_at(layout.producer_len_at) as usize;
    if producer_len > MAX_PRODUCER_LEN || total != layout.fixed_len + producer_len + 4 {
        if version != layout.version {
            return Err(unsupported());
        }
        return Err(FormatError::BadLength {
            path: p(),
            offset: 12,
            what: layout.length_what,
            value: total as u64,
            reason: "does not match the producer length",
        });
    }
    if bytes.len() < total {
        return Err(truncated(total));
    }
    let stored = u32_at(total - 4);
    let computed = crc32c::crc32c(&bytes[..total - 4]);
    if stored != computed {
        return Err(FormatError::ChecksumMismatch {
            path: p(),
            offset: 0,
            what: layout.header_what,
            stored,
            computed,
        });
    }
    if version != layout.version {
        return Err(unsupported());
    }
    let bad = |reason| FormatError::BadHeader {
        path: p(),
        offset: 0,
        reason,
    };
    if u16::from_le_bytes([bytes[10], bytes[11]]) != 0 {
        return Err(bad(layout.flags_reason));
    }
    let producer = std::str::from_utf8(&bytes[layout.fixed_len..total - 4])
        .map_err(|_| bad("producer is not UTF-8"))?;
    Ok((total, producer))
}

/// Parses and verifies a file header; returns it and its length in bytes.
pub fn parse_file_header(bytes: &[u8], path: &Path) -> Result<(FileHeader, usize), FormatError> {
    let (total, producer) = verify_header(bytes, path, &FILE_LAYOUT)?;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or_default());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or_default());
    let bad = |reason| FormatError::BadHeader {
        path: path.to_path_buf(),
        offset: 0,
        reason,
    };
    let source = clock_source_from(bytes[28]).ok_or_else(|| bad("unknown clock source"))?;
    let producer = producer.to_owned();
    let header = FileHeader {
        rank: u32_at(16),
        world_size: u32_at(20),
        part: u32_at(24),
        clock: ClockCalibration {
            source,
            ticks_per_sec: f64::from_bits(u64_at(32)),
            tick_at_epoch: u64_at(40),
            realtime_ns: u64_at(48),
            read_ticks: u16::from_le_bytes([bytes[29], bytes[30]]),
        },
        created_unix_ns: u64_at(56),
        producer,
    };
    Ok((header, total))
}

// ---- Chunk header ----

/// Magic at the start of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"EVFC";
/// Version of the chunk header and payload layout this crate writes. Version 2 added the event
/// kinds `RankInfo` (12) and `Writer` (13) to version 1's layout, version 3 `RemoteGroup` (14) and
/// `WinDef` (15), version 4 `Memory` (16) and `Threshold` (17), version 5 `Polls` (18), version 6
/// the call columns of receive bytes and call sites and kind 19 (`CallSite`), version 7 kind 20
/// (`EpochGroup`), version 8 kind 21 (`CommOrigin`), version 9 the payload cut into blocks.
pub const CHUNK_VERSION: u16 = 9;
/// The first chunk version whose payload is a sequence of blocks (FORMAT.md "Payload: blocks").
pub const CHUNK_BLOCKS_VERSION: u16 = 9;
/// The oldest chunk version this crate still reads (FORMAT.md "Versioning").
pub const CHUNK_MIN_VERSION: u16 = 1;
/// Bytes of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 72;
/// Payload stored as is.
pub const CODEC_NONE: u8 = 0;
/// Payload stored as one zstd frame.
pub const CODEC_ZSTD: u8 = 1;
/// The columnar payload layout of FORMAT.md.
pub const ENCODING_COLUMNS_V1: u8 = 1;
/// Readers refuse chunks whose uncompressed payload claims more than this.
pub const MAX_RAW_LEN: u64 = 1 << 34;

/// A chunk's header fields (FORMAT.md "Chunk header").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub version: u16,
    pub codec: u8,
    pub encoding: u8,
    pub rank: u32,
    pub stream: u32,
    pub seq: u64,
    pub raw_len: u64,
    pub stored_len: u64,
    pub events: u64,
    pub first_ts: u64,
    pub last_ts: u64,
    pub payload_crc: u32,
}

impl ChunkHeader {
    pub fn to_bytes(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h[0..4].copy_from_slice(&CHUNK_MAGIC);
        h[4..6].copy_from_slice(&self.version.to_le_bytes());
        h[6] = self.codec;
        h[7] = self.encoding;
        h[8..12].copy_from_slice(&self.rank.to_le_bytes());
        h[12..16].copy_from_slice(&self.stream.to_le_bytes());
        h[16..24].copy_from_slice(&self.seq.to_le_bytes());
        h[24..32].copy_from_slice(&self.raw_len.to_le_bytes());
        h[32..40].copy_from_slice(&self.stored_len.to_le_bytes());
        h[40..48].copy_from_slice(&self.events.to_le_bytes());
        h[48..56].copy_from_slice(&self.first_ts.to_le_bytes());
        h[56..64].copy_from_slice(&self.last_ts.to_le_bytes());
        h[64..68].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&h[..68]);
        h[68..72].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Parses the fields of a header whose magic and checksum the caller has verified.
    pub fn from_bytes(h: &[u8; CHUNK_HEADER_LEN]) -> ChunkHeader {
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or_default());
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap_or_default());
        ChunkHeader {
            version: u16::from_le_bytes([h[4], h[5]]),
            codec: h[6],
            encoding: h[7],
            rank: u32_at(8),
            stream: u32_at(12),
            seq: u64_at(16),
            raw_len: u64_at(24),
            stored_len: u64_at(32),
            events: u64_at(40),
            first_ts: u64_at(48),
            last_ts: u64_at(56),
            payload_crc: u32_at(64),
        }
    }
}

// ---- Where a chunk sequence ended ----

/// How the chunk sequence of a file ended, when it did not end exactly at the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Byte offset of the first byte not part of a complete, valid chunk.
    pub offset: u64,
    pub kind: TailKind,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailKind {
    /// The file ends inside a chunk (a crash or a full disk during a write): every chunk before
    /// `offset` is complete and valid.
    Cut,
    /// The rest of the file is zero bytes (space allocated but never written).
    ZeroFilled,
    /// A damaged chunk stopped the reader; the matching error was returned by the iterator.
    Damaged,
}
