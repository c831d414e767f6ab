//! A chunk's payload once read: one decompressed payload (chunk versions 1 to 8) or, from
//! version 9 on, the stored blocks and their directory (FORMAT.md "Payload: blocks"); how each
//! block is checked, decompressed and stepped through; and the zstd frames that takes.

use std::io::Read;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{RankFile, verified};
use crate::chunk::decode::{Columns, Cursor, split_columns};
use crate::framing::{CODEC_NONE, ChunkHeader};
use crate::model::Event;
use crate::varint::get_u64;

/// Payloads up to this size are decompressed into a buffer allocated up front; bigger claimed
/// sizes grow the buffer only as real bytes arrive, so a lying length cannot reserve memory.
const PREALLOCATE_LIMIT: u64 = 64 << 20;

/// Zstd frames (a block, or a whole chunk of version 8 and older) this process decompressed:
/// what reading a chunk again without checking it again saves is counted in these.
static FRAMES_DECOMPRESSED: AtomicU64 = AtomicU64::new(0);

/// How many zstd frames this process decompressed so far.
pub fn frames_decompressed() -> u64 {
    FRAMES_DECOMPRESSED.load(Ordering::Relaxed)
}

#[derive(Debug)]
pub(super) enum Body<'a> {
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
        /// out ([`super::Chunk::release_as_read`]): each block's pages go once it is done with.
        release: Option<Release<'a>>,
    },
}

#[derive(Debug)]
pub(super) struct BlockEntry {
    /// Where its stored bytes are in the stored payload; stored as is when as long as `raw_len`.
    pub(super) stored: Range<usize>,
    pub(super) raw_len: usize,
    events: u64,
    /// Split when the chunk was read and the block checked; `None` for a block whose bytes
    /// this process checked on an earlier read (see [`super::verified`]): split when loaded.
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
    /// decoding, being deterministic, does only if the file changed (see [`super::verified`]).
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

/// Where a chunk's stored payload sits in the file it was mapped from, for a chunk whose blocks'
/// pages go once each is done with ([`super::Chunk::release_as_read`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Release<'a> {
    pub(super) file: &'a RankFile,
    pub(super) stored_at: u64,
}

impl Body<'_> {
    /// Drops block `block`'s mapped pages (see [`super::Chunk::release_as_read`]) once it is done
    /// with: a compressed block when it is loaded (decompressed), one stored as is (read from
    /// the map) when it is read (`read`).
    fn release(&self, block: usize, read: bool) {
        let Body::Blocks {
            blocks,
            release: Some(r),
            ..
        } = self
        else {
            return;
        };
        let b = &blocks[block];
        if (b.stored.len() == b.raw_len) != read {
            return;
        }
        r.file.release_fault_span(
            r.stored_at + b.stored.start as u64..r.stored_at + b.stored.end as u64,
        );
    }
}

/// Where a walk over a chunk's events stands: the block being read (decompressed into `buf`
/// unless stored as is) and the cursor in it. Only that block's bytes are held.
pub(super) struct Stepper<C> {
    block: usize,
    loaded: bool,
    pub(super) buf: Vec<u8>,
    /// `buf` holds block 0 already.
    pub(super) preloaded: bool,
    /// The columns of the block being read, when its chunk's read did not split them.
    split: Option<Columns>,
    cursor: Option<C>,
}

impl<C: Cursor> Stepper<C> {
    pub(super) fn new() -> Self {
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
    pub(super) fn next(&mut self, body: &Body<'_>) -> Option<Event> {
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

/// Reads and checks a version 9 stored payload (FORMAT.md "Payload: blocks"): the directory
/// against the header's lengths and event count, then (with `check_blocks`) every block,
/// decompressed one at a time into one buffer and checked as a columns v1 payload. Nothing but
/// the directory and each block's column offsets is kept: the events are decoded again, block by
/// block, when read. Without `check_blocks` (bytes this process checked on an earlier read, see
/// [`super::verified`]) only the directory is read and checked.
pub(super) fn read_blocks(
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
pub(super) fn decompress_into(
    stored: &[u8],
    raw_len: u64,
    out: &mut Vec<u8>,
) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkEncoder;
    use crate::framing::CHUNK_HEADER_LEN;
    use crate::raw::RawBuf;
    use crate::reader::{Chunk, blocks_lost};
    use crate::synthetic::HaloConfig;

    #[test]
    fn a_block_trusted_from_an_earlier_check_that_fails_is_counted_lost() {
        // Bytes that a check would refuse, read as if an earlier read had checked them (a file
        // changed under the reader with its checksums intact): the events stop at the bad block
        // and the loss is counted, for the command to fail on.
        let events = crate::synthetic::events(&HaloConfig {
            iterations: 60,
            ..HaloConfig::default()
        });
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
