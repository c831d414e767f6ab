//! Chunk encoding: from a buffer of events to a framed, checksummed chunk. The recorder's
//! [`RawBuf`] shows its events to the encoder through [`EventSource`]; the encoder surveys them
//! once to lay the payload out exactly, then writes them straight into their columns and
//! compresses each block. An [`EventBuf`](super::event_buf::EventBuf) (decoded events) fills the
//! same layout column by column ([`super::event_buf`]); the framing below is shared.

use super::columns::*;
use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED};
use crate::framing::{
    CHUNK_HEADER_LEN, CHUNK_VERSION, CODEC_NONE, CODEC_ZSTD, ChunkHeader, ENCODING_COLUMNS_V1,
};
use crate::model::*;
use crate::raw::{RawBuf, RawRecord};
use crate::varint::{encode_u64, put_u64, zigzag};

/// Default zstd level. Flushes run inside the equalised suspension, where compression dominates
/// the time spent (the stored bytes are ~26x fewer than the raw ones), so the faster level wins:
/// level 3 would save 1.4 % of the bytes for ~20 % more time (FORMAT.md, "Design choices").
pub const DEFAULT_LEVEL: i32 = 1;

/// One encoded chunk, framed and ready to append to a rank file.
#[derive(Clone, Debug)]
pub struct EncodedChunk {
    /// Header followed by the stored payload.
    pub bytes: Vec<u8>,
    /// Payload bytes before compression.
    pub raw_len: u64,
    /// Payload bytes as stored (after compression).
    pub stored_len: u64,
    pub events: u64,
    /// Smallest and largest tick of any timed event in the chunk (0 if none has a time).
    pub first_ts: u64,
    pub last_ts: u64,
}

/// A buffer the encoder reads: it shows every event it holds to an [`EventVisitor`]. Both buffers
/// show the same events the same way, so they encode to the same bytes.
pub(crate) trait EventSource {
    fn visit(&self, visitor: &mut impl EventVisitor);
}

/// What the encoder does with a buffer's events, once to survey them and once to write them.
/// Kinds arrive in event order, and calls, completions and misc bodies each in their own event
/// order; how the three groups interleave is up to the buffer (each has its own columns).
pub(crate) trait EventVisitor {
    /// The kinds of the next events.
    fn kinds(&mut self, kinds: &[u8]);
    fn call(&mut self, c: &MpiCall);
    fn completion(&mut self, c: &Completion);
    /// A misc event's body, as stored (FORMAT.md "Misc bodies").
    fn misc(&mut self, kind: u8, body: &[u8]);
}

/// The kind byte of a completion.
pub(super) fn completion_kind(c: &Completion) -> u8 {
    if c.cancelled {
        KIND_COMPLETION_CANCELLED
    } else {
        KIND_COMPLETION
    }
}

impl EventSource for RawBuf {
    /// Record by record, in buffer order.
    #[inline]
    fn visit(&self, visitor: &mut impl EventVisitor) {
        self.for_each_record(|rec| match rec {
            RawRecord::Call(c) => {
                visitor.kinds(&[KIND_CALL]);
                visitor.call(&c);
            }
            RawRecord::Completion(c) => {
                visitor.kinds(&[completion_kind(&c)]);
                visitor.completion(&c);
            }
            RawRecord::Misc { kind, body } => {
                visitor.kinds(&[kind]);
                visitor.misc(kind, body);
            }
        });
    }
}

/// Encodes buffers into chunks. Keeps its payload buffer and zstd context between chunks, so a
/// steady stream of flushes allocates only the returned chunk bytes.
pub struct ChunkEncoder {
    level: Option<i32>,
    compressor: Option<zstd::bulk::Compressor<'static>>,
    /// Events per block (FORMAT.md "Payload: blocks").
    pub(super) block_events: usize,
    /// Every block's raw payload, back to back.
    pub(super) payload: Vec<u8>,
    /// One block compressed.
    compressed: Vec<u8>,
    /// The stored blocks, back to back.
    stored: Vec<u8>,
    /// Allocated on first use (~60 KB), kept for later chunks.
    batches: Option<Box<Batches>>,
    /// One block's numeric values, column after column, when encoding an
    /// [`EventBuf`](super::event_buf::EventBuf) (~0.5 MB for a block of 4 096 events).
    pub(super) column_values: Vec<u64>,
}

/// Events per block of the payloads this crate writes: small enough that a reader stepping
/// through thousands of lanes at once holds little per lane (a block decompresses to ~31 B per
/// event of the halo trace, ~120 KiB here), large enough that zstd loses little by starting afresh
/// at each block (paper-notes/reconstruct-speed.md, "Blocks", has the measurements).
pub const BLOCK_EVENTS: usize = 4096;

/// What a first pass over a buffer learns about one block: enough to lay its payload out exactly.
#[derive(Default)]
pub(super) struct Survey {
    pub(super) events: usize,
    /// Counted from the kinds, which arrive before the values they announce.
    pub(super) calls: usize,
    pub(super) completions: usize,
    pub(super) misc: usize,
    pub(super) misc_len: usize,
    /// Bitwise OR of every value of each numeric column: gives the plane width.
    pub(super) or: [u64; NUM_VALUE_COLUMNS],
}

/// Which block the next value of one group (calls, completions or misc bodies) belongs to: the
/// groups arrive each in event order but not interleaved with the kinds the same way in every
/// buffer, so each group walks the blocks by the counts the kinds gave. A buffer may show the
/// kinds one at a time just before their values, so a block's count may still grow while its
/// values arrive: a block is left only once a value lies past its count.
#[derive(Default)]
struct GroupCursor {
    /// The current block, `None` before the first value.
    block: Option<usize>,
    /// Values of this group in the blocks before the current one.
    before: usize,
    /// Values of this group seen.
    seen: usize,
    /// `before` plus the current block's count when last looked up: below it, the next value is
    /// in the current block without looking (a count only grows).
    end: usize,
}

impl GroupCursor {
    /// The block of the next value of this group, given each block's count of the group's
    /// values; true when it is another block than the last value's.
    #[inline(always)]
    fn advance(&mut self, count: impl Fn(usize) -> usize) -> (usize, bool) {
        if let Some(b) = self.block
            && self.seen < self.end
        {
            self.seen += 1;
            return (b, false);
        }
        let (mut block, mut moved) = match self.block {
            Some(b) => (b, false),
            None => (0, true),
        };
        while self.seen >= self.before + count(block) {
            self.before += count(block);
            block += 1;
            moved = true;
        }
        self.block = Some(block);
        self.end = self.before + count(block);
        self.seen += 1;
        (block, moved)
    }
}

/// Where the next kind goes: its block and its place in the block. Counted, not divided out of
/// the event index: a buffer may show its kinds one at a time, and a division per event would
/// cost the recorder's flush more than the rest of the kind's handling.
#[derive(Clone, Copy)]
struct KindCursor {
    block_events: usize,
    block: usize,
    filled: usize,
}

impl KindCursor {
    fn new(block_events: usize) -> Self {
        KindCursor {
            block_events,
            block: 0,
            filled: 0,
        }
    }

    /// The block and place of one more kind, if it goes in the current block (not the first
    /// kind of a block).
    #[inline(always)]
    fn one_more(&mut self) -> Option<(usize, usize)> {
        if self.filled == 0 || self.filled == self.block_events {
            return None;
        }
        self.filled += 1;
        Some((self.block, self.filled - 1))
    }

    /// Splits a run of kinds at block boundaries: `f(block, place in the block, kinds)` per part.
    #[inline]
    fn split(&mut self, kinds: &[u8], mut f: impl FnMut(usize, usize, &[u8])) {
        let mut rest = kinds;
        while !rest.is_empty() {
            if self.filled == self.block_events {
                self.block += 1;
                self.filled = 0;
            }
            let take = (self.block_events - self.filled).min(rest.len());
            f(self.block, self.filled, &rest[..take]);
            self.filled += take;
            rest = &rest[take..];
        }
    }
}

/// The survey's pass: one [`Survey`] per block, the previous call's end in the block (start
/// times are stored against it), and the chunk's time range.
struct Surveyor {
    blocks: Vec<Survey>,
    kinds: KindCursor,
    events: usize,
    calls: GroupCursor,
    completions: GroupCursor,
    misc: GroupCursor,
    prev_end: u64,
    first_ts: u64,
    last_ts: u64,
}

impl Surveyor {
    #[inline]
    fn note(&mut self, lo: u64, hi: u64) {
        self.first_ts = self.first_ts.min(lo);
        self.last_ts = self.last_ts.max(hi);
    }
}

impl EventVisitor for Surveyor {
    #[inline(always)]
    fn kinds(&mut self, kinds: &[u8]) {
        // One kind at a time (a `RawBuf`): the common case, without the split's loop.
        if let [kind] = kinds
            && let Some((b, _)) = self.kinds.one_more()
        {
            let s = &mut self.blocks[b];
            s.events += 1;
            match *kind {
                KIND_CALL => s.calls += 1,
                KIND_COMPLETION | KIND_COMPLETION_CANCELLED => s.completions += 1,
                _ => s.misc += 1,
            }
            self.events += 1;
            return;
        }
        let blocks = &mut self.blocks;
        self.kinds.split(kinds, |b, _, part| {
            if b == blocks.len() {
                blocks.push(Survey::default());
            }
            let s = &mut blocks[b];
            // Separate counting loops: each one vectorises, a combined match does not.
            let calls = part.iter().filter(|&&k| k == KIND_CALL).count();
            let completions = part
                .iter()
                .filter(|&&k| k == KIND_COMPLETION || k == KIND_COMPLETION_CANCELLED)
                .count();
            s.events += part.len();
            s.calls += calls;
            s.completions += completions;
            s.misc += part.len() - calls - completions;
        });
        self.events += kinds.len();
    }

    #[inline(always)]
    fn call(&mut self, c: &MpiCall) {
        let blocks = &self.blocks;
        let (b, moved) = self.calls.advance(|b| blocks[b].calls);
        if moved {
            self.prev_end = 0;
        }
        for (or, v) in self.blocks[b].or[..COMPLETION_FIRST]
            .iter_mut()
            .zip(call_values(c, self.prev_end))
        {
            *or |= v;
        }
        self.prev_end = c.end;
        self.note(c.start.min(c.end), c.start.max(c.end));
    }

    #[inline(always)]
    fn completion(&mut self, c: &Completion) {
        let blocks = &self.blocks;
        let (b, _) = self.completions.advance(|b| blocks[b].completions);
        for (or, v) in self.blocks[b].or[COMPLETION_FIRST..]
            .iter_mut()
            .zip(completion_values(c))
        {
            *or |= v;
        }
    }

    #[inline(always)]
    fn misc(&mut self, kind: u8, body: &[u8]) {
        let blocks = &self.blocks;
        let (b, _) = self.misc.advance(|b| blocks[b].misc);
        self.blocks[b].misc_len += varint_len(body.len() as u64) + body.len();
        if let Some((lo, hi)) = body::misc_body_times(kind, body) {
            self.note(lo, hi);
        }
    }
}

/// Where one block's columns lie in the encoder's payload buffer.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    /// Offset of plane 0 of each numeric column (plane p is `p * n` further on), and its width.
    pub(super) planes: [usize; NUM_VALUE_COLUMNS],
    pub(super) widths: [usize; NUM_VALUE_COLUMNS],
    pub(super) starts: [usize; NUM_COLUMNS],
    pub(super) end: usize,
}

/// The writing pass: every column's offset is known from the survey, so values go straight to
/// their byte planes with no intermediate per-column storage.
struct PayloadWriter<'a> {
    payload: &'a mut [u8],
    batches: &'a mut Batches,
    blocks: &'a [Survey],
    layouts: &'a [Layout],
    kinds: KindCursor,
    calls: GroupCursor,
    completions: GroupCursor,
    misc: GroupCursor,
    misc_at: usize,
    prev_end: u64,
}

impl EventVisitor for PayloadWriter<'_> {
    #[inline(always)]
    fn kinds(&mut self, kinds: &[u8]) {
        let (payload, layouts) = (&mut *self.payload, self.layouts);
        if let [kind] = kinds
            && let Some((b, place)) = self.kinds.one_more()
        {
            payload[layouts[b].starts[COL_KIND] + place] = *kind;
            return;
        }
        self.kinds.split(kinds, |b, place, part| {
            let at = layouts[b].starts[COL_KIND] + place;
            payload[at..at + part.len()].copy_from_slice(part);
        });
    }

    #[inline(always)]
    fn call(&mut self, c: &MpiCall) {
        let blocks = self.blocks;
        let (b, moved) = self.calls.advance(|b| blocks[b].calls);
        if moved {
            self.batches.calls.flush(self.payload);
            let l = &self.layouts[b];
            self.batches.calls.reset(
                &l.planes[..COMPLETION_FIRST],
                &l.widths[..COMPLETION_FIRST],
                blocks[b].calls,
            );
            self.prev_end = 0;
        }
        self.batches
            .calls
            .push(self.payload, &call_values(c, self.prev_end));
        self.prev_end = c.end;
    }

    #[inline(always)]
    fn completion(&mut self, c: &Completion) {
        let blocks = self.blocks;
        let (b, moved) = self.completions.advance(|b| blocks[b].completions);
        if moved {
            self.batches.completions.flush(self.payload);
            let l = &self.layouts[b];
            self.batches.completions.reset(
                &l.planes[COMPLETION_FIRST..],
                &l.widths[COMPLETION_FIRST..],
                blocks[b].completions,
            );
        }
        self.batches
            .completions
            .push(self.payload, &completion_values(c));
    }

    #[inline(always)]
    fn misc(&mut self, _kind: u8, body: &[u8]) {
        let blocks = self.blocks;
        let (b, moved) = self.misc.advance(|b| blocks[b].misc);
        if moved {
            self.misc_at = self.layouts[b].starts[COL_MISC];
        }
        let (len, used) = encode_u64(body.len() as u64);
        let at = self.misc_at;
        self.payload[at..at + used].copy_from_slice(&len[..used]);
        self.payload[at + used..at + used + body.len()].copy_from_slice(body);
        self.misc_at = at + used + body.len();
    }
}

/// The numeric column values of a call, in column order (columns 1..=12).
#[inline]
pub(super) fn call_values(c: &MpiCall, prev_end: u64) -> [u64; CALL_COLUMNS] {
    [
        c.func as u64,
        zigzag(c.start.wrapping_sub(prev_end) as i64),
        zigzag(c.end.wrapping_sub(c.start) as i64),
        c.comm as u64,
        zigzag(c.peer as i64),
        zigzag(c.tag as i64),
        c.bytes,
        zigzag(c.root as i64),
        c.request,
        c.cost as u64,
        c.recv_bytes,
        u64::from(c.site),
    ]
}

/// The numeric column values of a completion (columns 13..=16).
#[inline]
pub(super) fn completion_values(c: &Completion) -> [u64; 4] {
    [
        c.request,
        zigzag(c.source as i64),
        zigzag(c.tag as i64),
        c.bytes,
    ]
}

pub(super) fn varint_len(v: u64) -> usize {
    encode_u64(v).1
}

impl ChunkEncoder {
    /// An encoder compressing with zstd at `level` (any level zstd accepts, negative ones too).
    pub fn new(level: i32) -> Self {
        ChunkEncoder {
            level: Some(level),
            compressor: None,
            block_events: BLOCK_EVENTS,
            payload: Vec::new(),
            compressed: Vec::new(),
            stored: Vec::new(),
            batches: None,
            column_values: Vec::new(),
        }
    }

    /// An encoder that stores payloads uncompressed (for debugging and tests).
    pub fn uncompressed() -> Self {
        ChunkEncoder {
            level: None,
            ..Self::new(0)
        }
    }

    /// The same encoder cutting blocks of `events` events (at least 1) instead of
    /// [`BLOCK_EVENTS`]: for measuring the choice, and for tests of many blocks.
    pub fn with_block_events(mut self, events: usize) -> Self {
        self.block_events = events.max(1);
        self
    }

    /// Bytes the encoder keeps allocated between chunks (its payload and compression buffers,
    /// about half the raw size of the largest chunk encoded so far; zstd's own context excluded).
    pub fn scratch_bytes(&self) -> usize {
        self.payload.capacity()
            + self.compressed.capacity()
            + self.stored.capacity()
            + self.column_values.capacity() * size_of::<u64>()
    }

    /// Frees the buffers kept between chunks (e.g. under memory pressure); the next encode
    /// allocates them again.
    pub fn release_scratch(&mut self) {
        self.payload = Vec::new();
        self.compressed = Vec::new();
        self.stored = Vec::new();
        self.batches = None;
        self.column_values = Vec::new();
    }

    /// Encodes everything in `raw` as chunk `seq` of thread `stream` of `rank`.
    pub fn encode(&mut self, rank: u32, stream: u32, seq: u64, raw: &RawBuf) -> EncodedChunk {
        self.encode_from(rank, stream, seq, raw)
    }

    /// The one encode path: survey the events block by block, lay the blocks out, write the
    /// events into them, compress each and frame.
    fn encode_from(
        &mut self,
        rank: u32,
        stream: u32,
        seq: u64,
        events: &impl EventSource,
    ) -> EncodedChunk {
        let mut surveyor = Surveyor {
            blocks: Vec::new(),
            kinds: KindCursor::new(self.block_events),
            events: 0,
            calls: GroupCursor::default(),
            completions: GroupCursor::default(),
            misc: GroupCursor::default(),
            prev_end: 0,
            first_ts: u64::MAX,
            last_ts: 0,
        };
        events.visit(&mut surveyor);
        let first_ts = match surveyor.first_ts {
            u64::MAX => 0,
            t => t,
        };
        let blocks = surveyor.blocks;
        self.payload.clear();
        let layouts: Vec<Layout> = blocks
            .iter()
            .map(|b| lay_out(&mut self.payload, b))
            .collect();
        let mut writer = PayloadWriter {
            payload: &mut self.payload,
            batches: self
                .batches
                .get_or_insert_with(|| Box::new(Batches::default())),
            blocks: &blocks,
            layouts: &layouts,
            kinds: KindCursor::new(self.block_events),
            calls: GroupCursor::default(),
            completions: GroupCursor::default(),
            misc: GroupCursor::default(),
            misc_at: 0,
            prev_end: 0,
        };
        // Nothing to flush until the first call (or completion) sets its block's layout.
        writer
            .batches
            .calls
            .reset(&[0; COMPLETION_FIRST], &[0; COMPLETION_FIRST], 0);
        writer.batches.completions.reset(&[0; 4], &[0; 4], 0);
        events.visit(&mut writer);
        writer.batches.calls.flush(writer.payload);
        writer.batches.completions.flush(writer.payload);
        let total = surveyor.events as u64;
        self.finish(
            rank,
            stream,
            seq,
            &blocks,
            &layouts,
            (total, first_ts, surveyor.last_ts),
        )
    }

    /// Compresses each block built and frames the chunk: block directory, then the blocks.
    pub(super) fn finish(
        &mut self,
        rank: u32,
        stream: u32,
        seq: u64,
        blocks: &[Survey],
        layouts: &[Layout],
        (events, first_ts, last_ts): (u64, u64, u64),
    ) -> EncodedChunk {
        if let Some(level) = self.level
            && self.compressor.is_none()
        {
            // Without a zstd context (out of memory) the chunk is stored uncompressed.
            self.compressor = zstd::bulk::Compressor::new(level)
                .or_else(|_| zstd::bulk::Compressor::new(DEFAULT_LEVEL))
                .ok();
        }
        let compressor = if self.level.is_some() {
            self.compressor.as_mut()
        } else {
            None
        };
        let mut directory = Vec::with_capacity(1 + 12 * blocks.len());
        put_u64(&mut directory, blocks.len() as u64);
        self.stored.clear();
        let mut codec = CODEC_NONE;
        let mut start = 0;
        let mut compressor = compressor;
        for (b, l) in blocks.iter().zip(layouts) {
            let raw = &self.payload[start..l.end];
            start = l.end;
            let mut stored: &[u8] = raw;
            if let Some(c) = compressor.as_deref_mut() {
                self.compressed.clear();
                self.compressed
                    .reserve(zstd::zstd_safe::compress_bound(raw.len()));
                // A block is stored as is unless zstd makes it strictly smaller: readers tell
                // the two apart by the lengths alone.
                if let Ok(n) = c.compress_to_buffer(raw, &mut self.compressed)
                    && n < raw.len()
                {
                    stored = &self.compressed;
                    codec = CODEC_ZSTD;
                }
            }
            put_u64(&mut directory, b.events as u64);
            put_u64(&mut directory, raw.len() as u64);
            put_u64(&mut directory, stored.len() as u64);
            self.stored.extend_from_slice(stored);
        }
        let raw_len = (directory.len() + self.payload.len()) as u64;
        let stored_len = (directory.len() + self.stored.len()) as u64;
        let mut crc = crc32c::crc32c(&directory);
        crc = crc32c::crc32c_append(crc, &self.stored);
        let mut out = Vec::with_capacity(CHUNK_HEADER_LEN + stored_len as usize);
        let header = ChunkHeader {
            version: CHUNK_VERSION,
            codec,
            encoding: ENCODING_COLUMNS_V1,
            rank,
            stream,
            seq,
            raw_len,
            stored_len,
            events,
            first_ts,
            last_ts,
            payload_crc: crc,
        };
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(&directory);
        out.extend_from_slice(&self.stored);
        EncodedChunk {
            bytes: out,
            raw_len,
            stored_len,
            events,
            first_ts,
            last_ts,
        }
    }
}

/// Appends one block's payload, sized for what its survey found, to `payload`, with its column
/// directory and width bytes written; returns where its columns lie.
pub(super) fn lay_out(payload: &mut Vec<u8>, s: &Survey) -> Layout {
    let mut widths = [0usize; NUM_VALUE_COLUMNS];
    for (w, &or) in widths.iter_mut().zip(&s.or) {
        *w = 8 - or.leading_zeros() as usize / 8;
    }
    let mut lens = [0usize; NUM_COLUMNS];
    lens[COL_KIND] = s.events;
    for (i, &w) in widths.iter().enumerate() {
        let n = if COL_FUNC + i < COL_C_REQUEST {
            s.calls
        } else {
            s.completions
        };
        lens[COL_FUNC + i] = 1 + w * n;
    }
    lens[COL_MISC] = s.misc_len;

    payload.push(NUM_COLUMNS as u8);
    for &l in &lens {
        put_u64(payload, l as u64);
    }
    let mut starts = [0usize; NUM_COLUMNS];
    let mut at = payload.len();
    for (start, &l) in starts.iter_mut().zip(&lens) {
        *start = at;
        at += l;
    }
    payload.resize(at, 0);
    let mut planes = [0usize; NUM_VALUE_COLUMNS];
    for (i, p) in planes.iter_mut().enumerate() {
        payload[starts[COL_FUNC + i]] = widths[i] as u8;
        *p = starts[COL_FUNC + i] + 1;
    }
    Layout {
        planes,
        widths,
        starts,
        end: at,
    }
}

/// Index of the first completion column among the numeric columns.
pub(super) const COMPLETION_FIRST: usize = COL_C_REQUEST - COL_FUNC;
const BATCH: usize = 512;

/// Values of up to [`BATCH`] events for a group of numeric columns (the call columns or the
/// completion columns), waiting to be split into byte planes.
struct Batch<const COLS: usize> {
    values: [[u64; BATCH]; COLS],
    len: usize,
    /// Values of this group already written to the payload.
    done: usize,
    /// Total values of this group in the chunk: the plane stride.
    total: usize,
    planes: [usize; COLS],
    widths: [usize; COLS],
}

impl<const COLS: usize> Default for Batch<COLS> {
    fn default() -> Self {
        Batch {
            values: [[0; BATCH]; COLS],
            len: 0,
            done: 0,
            total: 0,
            planes: [0; COLS],
            widths: [0; COLS],
        }
    }
}

impl<const COLS: usize> Batch<COLS> {
    fn reset(&mut self, planes: &[usize], widths: &[usize], total: usize) {
        self.planes.copy_from_slice(planes);
        self.widths.copy_from_slice(widths);
        self.total = total;
        self.len = 0;
        self.done = 0;
    }

    #[inline]
    fn push(&mut self, payload: &mut [u8], values: &[u64; COLS]) {
        // A local copy of the length: stores into `values` would otherwise force a reload of
        // `self.len` after each one (the compiler cannot prove they do not alias).
        let len = self.len.min(BATCH - 1);
        for (col, &v) in self.values.iter_mut().zip(values) {
            col[len] = v;
        }
        self.len = len + 1;
        if self.len == BATCH {
            self.flush(payload);
        }
    }

    fn flush(&mut self, payload: &mut [u8]) {
        let n = self.len;
        for col in 0..COLS {
            let values = &self.values[col][..n];
            for p in 0..self.widths[col] {
                let at = self.planes[col] + p * self.total + self.done;
                let shift = 8 * p;
                for (dst, &v) in payload[at..at + n].iter_mut().zip(values) {
                    *dst = (v >> shift) as u8;
                }
            }
        }
        self.done += n;
        self.len = 0;
    }
}

/// The batch buffers of an encoder. Values are gathered in small batches and split into planes
/// a batch at a time: the per-plane loops over a batch vectorise, per-value plane loops do not.
#[derive(Default)]
struct Batches {
    calls: Batch<COMPLETION_FIRST>,
    completions: Batch<{ NUM_VALUE_COLUMNS - COMPLETION_FIRST }>,
}
