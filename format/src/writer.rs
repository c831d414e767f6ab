//! Rank file header and the appending writer.

use std::io::{self, Write};

use crate::chunk::EncodedChunk;
use crate::model::{ClockCalibration, ClockSource};

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

/// The bytes of a file header (FORMAT.md "File header").
pub fn encode_file_header(h: &FileHeader) -> Vec<u8> {
    let producer = producer_cut(&h.producer);
    let total = FILE_HEADER_FIXED_LEN + producer.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&FILE_MAGIC);
    out.extend_from_slice(&FILE_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&h.rank.to_le_bytes());
    out.extend_from_slice(&h.world_size.to_le_bytes());
    out.extend_from_slice(&h.part.to_le_bytes());
    out.push(h.clock.source as u8);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&h.clock.ticks_per_sec.to_bits().to_le_bytes());
    out.extend_from_slice(&h.clock.tick_at_epoch.to_le_bytes());
    out.extend_from_slice(&h.clock.realtime_ns.to_le_bytes());
    out.extend_from_slice(&h.created_unix_ns.to_le_bytes());
    out.extend_from_slice(&(producer.len() as u32).to_le_bytes());
    debug_assert_eq!(out.len(), FILE_HEADER_FIXED_LEN);
    out.extend_from_slice(producer.as_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
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

/// Appends chunks to a rank file. Chunks are written whole with one `write_all` each, so a crash
/// can only leave the last chunk incomplete, which readers report as a truncated tail.
pub struct RankFileWriter<W: Write> {
    inner: W,
    bytes_written: u64,
    chunks_written: u64,
}

impl<W: Write> RankFileWriter<W> {
    /// Writes the file header and returns the writer.
    pub fn new(mut inner: W, header: &FileHeader) -> io::Result<Self> {
        let bytes = encode_file_header(header);
        inner.write_all(&bytes)?;
        Ok(RankFileWriter {
            inner,
            bytes_written: bytes.len() as u64,
            chunks_written: 0,
        })
    }

    /// Continues a file whose header (and maybe chunks) are already written, e.g. after reopening
    /// it in append mode. `bytes_already` is its current length.
    pub fn resume(inner: W, bytes_already: u64) -> Self {
        RankFileWriter {
            inner,
            bytes_written: bytes_already,
            chunks_written: 0,
        }
    }

    pub fn write_chunk(&mut self, chunk: &EncodedChunk) -> io::Result<()> {
        self.inner.write_all(&chunk.bytes)?;
        self.bytes_written += chunk.bytes.len() as u64;
        self.chunks_written += 1;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// Bytes written to the file so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    pub fn chunks_written(&self) -> u64 {
        self.chunks_written
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// The file name of part `part` of `rank`'s trace: `rank-00007.evf`, then `rank-00007.p1.evf`, ...
pub fn rank_file_name(rank: u32, part: u32) -> String {
    if part == 0 {
        format!("rank-{rank:05}.evf")
    } else {
        format!("rank-{rank:05}.p{part}.evf")
    }
}
