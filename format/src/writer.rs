//! The appending writer of rank files (their header is [`crate::framing`]'s) and their names.

use std::io::{self, Write};

use crate::chunk::EncodedChunk;
use crate::framing::{FileHeader, encode_file_header};

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
