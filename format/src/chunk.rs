//! Chunk encoding and framing: turns a [`RawBuf`] into one self-describing, checksummed chunk.
//!
//! The payload is columnar (see FORMAT.md "Chunk payload"): one column per field, call start
//! times as zigzag varint deltas from the previous call's end, durations as varints, everything
//! else as varints, then zstd over the whole payload. FORMAT.md's "Design choices" section has the
//! measurements this layout was chosen by.

use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED};
use crate::model::*;
use crate::raw::{RawBuf, RawRecord};
use crate::varint::{encode_u64, get_u64, put_u64, unzigzag, zigzag};

/// Magic at the start of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"EVFC";
/// Version of the chunk header and payload layout this crate writes and reads.
pub const CHUNK_VERSION: u16 = 1;
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

/// Default zstd level. Flushes run inside the equalised suspension, where compression dominates
/// the time spent (the stored bytes are ~26x fewer than the raw ones), so the faster level wins:
/// level 3 would save 1.4 % of the bytes for ~20 % more time (FORMAT.md, "Design choices").
pub const DEFAULT_LEVEL: i32 = 1;

pub(crate) const COL_KIND: usize = 0;
pub(crate) const COL_FUNC: usize = 1;
pub(crate) const COL_START: usize = 2;
pub(crate) const COL_DURATION: usize = 3;
pub(crate) const COL_COMM: usize = 4;
pub(crate) const COL_PEER: usize = 5;
pub(crate) const COL_TAG: usize = 6;
pub(crate) const COL_BYTES: usize = 7;
pub(crate) const COL_ROOT: usize = 8;
pub(crate) const COL_REQUEST: usize = 9;
pub(crate) const COL_COST: usize = 10;
pub(crate) const COL_C_REQUEST: usize = 11;
pub(crate) const COL_C_SOURCE: usize = 12;
pub(crate) const COL_C_TAG: usize = 13;
pub(crate) const COL_C_BYTES: usize = 14;
pub(crate) const COL_MISC: usize = 15;
pub(crate) const NUM_COLUMNS: usize = 16;
const NUM_VALUE_COLUMNS: usize = COL_MISC - COL_FUNC;

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
    pub(crate) fn from_bytes(h: &[u8; CHUNK_HEADER_LEN]) -> ChunkHeader {
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

/// Encodes buffers into chunks. Keeps its payload buffer and zstd context between chunks, so a
/// steady stream of flushes allocates only the returned chunk bytes.
pub struct ChunkEncoder {
    level: Option<i32>,
    compressor: Option<zstd::bulk::Compressor<'static>>,
    payload: Vec<u8>,
    compressed: Vec<u8>,
    /// Allocated on first use (~60 KB), kept for later chunks.
    batches: Option<Box<Batches>>,
}

/// What a first pass over a buffer learns: enough to lay the payload out exactly.
#[derive(Default)]
struct Survey {
    events: u64,
    calls: usize,
    completions: usize,
    misc_len: usize,
    /// Bitwise OR of every value of each numeric column: gives the plane width.
    or: [u64; NUM_VALUE_COLUMNS],
    first_ts: u64,
    last_ts: u64,
}

/// The numeric column values of a call, in column order (columns 1..=10).
#[inline]
fn call_values(c: &MpiCall, prev_end: u64) -> [u64; 10] {
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
    ]
}

/// The numeric column values of a completion (columns 11..=14).
#[inline]
fn completion_values(c: &Completion) -> [u64; 4] {
    [
        c.request,
        zigzag(c.source as i64),
        zigzag(c.tag as i64),
        c.bytes,
    ]
}

fn varint_len(v: u64) -> usize {
    encode_u64(v).1
}

impl ChunkEncoder {
    /// An encoder compressing with zstd at `level` (any level zstd accepts, negative ones too).
    pub fn new(level: i32) -> Self {
        ChunkEncoder {
            level: Some(level),
            compressor: None,
            payload: Vec::new(),
            compressed: Vec::new(),
            batches: None,
        }
    }

    /// An encoder that stores payloads uncompressed (for debugging and tests).
    pub fn uncompressed() -> Self {
        ChunkEncoder {
            level: None,
            ..Self::new(0)
        }
    }

    /// Bytes the encoder keeps allocated between chunks (its payload and compression buffers,
    /// about half the raw size of the largest chunk encoded so far; zstd's own context excluded).
    pub fn scratch_bytes(&self) -> usize {
        self.payload.capacity() + self.compressed.capacity()
    }

    /// Frees the buffers kept between chunks (e.g. under memory pressure); the next encode
    /// allocates them again.
    pub fn release_scratch(&mut self) {
        self.payload = Vec::new();
        self.compressed = Vec::new();
        self.batches = None;
    }

    /// Encodes everything in `raw` as chunk `seq` of thread `stream` of `rank`.
    pub fn encode(&mut self, rank: u32, stream: u32, seq: u64, raw: &RawBuf) -> EncodedChunk {
        let survey = survey(raw);
        self.build_payload(raw, &survey);
        let raw_len = self.payload.len() as u64;
        let mut codec = CODEC_NONE;
        if let Some(level) = self.level {
            if self.compressor.is_none() {
                // Without a zstd context (out of memory) the chunk is stored uncompressed.
                self.compressor = zstd::bulk::Compressor::new(level)
                    .or_else(|_| zstd::bulk::Compressor::new(DEFAULT_LEVEL))
                    .ok();
            }
            if let Some(compressor) = &mut self.compressor {
                self.compressed.clear();
                self.compressed
                    .reserve(zstd::zstd_safe::compress_bound(self.payload.len()));
                if let Ok(n) = compressor.compress_to_buffer(&self.payload, &mut self.compressed)
                    && n < self.payload.len()
                {
                    codec = CODEC_ZSTD;
                }
            }
        }
        let stored: &[u8] = if codec == CODEC_ZSTD {
            &self.compressed
        } else {
            &self.payload
        };
        let mut out = Vec::with_capacity(CHUNK_HEADER_LEN + stored.len());
        let header = ChunkHeader {
            version: CHUNK_VERSION,
            codec,
            encoding: ENCODING_COLUMNS_V1,
            rank,
            stream,
            seq,
            raw_len,
            stored_len: stored.len() as u64,
            events: survey.events,
            first_ts: survey.first_ts,
            last_ts: survey.last_ts,
            payload_crc: crc32c::crc32c(stored),
        };
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(stored);
        EncodedChunk {
            bytes: out,
            raw_len,
            stored_len: header.stored_len,
            events: survey.events,
            first_ts: survey.first_ts,
            last_ts: survey.last_ts,
        }
    }

    /// Writes the payload in place: every column's offset is known from the survey, so values
    /// go straight to their byte planes with no intermediate per-column storage.
    fn build_payload(&mut self, raw: &RawBuf, s: &Survey) {
        let mut widths = [0usize; NUM_VALUE_COLUMNS];
        for (w, &or) in widths.iter_mut().zip(&s.or) {
            *w = 8 - or.leading_zeros() as usize / 8;
        }
        let mut lens = [0usize; NUM_COLUMNS];
        lens[COL_KIND] = s.events as usize;
        for (i, &w) in widths.iter().enumerate() {
            let n = if COL_FUNC + i < COL_C_REQUEST {
                s.calls
            } else {
                s.completions
            };
            lens[COL_FUNC + i] = 1 + w * n;
        }
        lens[COL_MISC] = s.misc_len;

        let payload = &mut self.payload;
        payload.clear();
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
        // `planes[i]` = offset of plane 0 of numeric column i; plane p is `p * n` further on.
        let mut planes = [0usize; NUM_VALUE_COLUMNS];
        for (i, p) in planes.iter_mut().enumerate() {
            payload[starts[COL_FUNC + i]] = widths[i] as u8;
            *p = starts[COL_FUNC + i] + 1;
        }
        let mut kind_at = starts[COL_KIND];
        let mut misc_at = starts[COL_MISC];
        let mut prev_end = 0u64;
        // Values are gathered in small batches and split into planes a batch at a time: the
        // per-plane loops over a batch vectorise, per-value plane loops do not.
        let batches = self
            .batches
            .get_or_insert_with(|| Box::new(Batches::default()));
        batches.calls.reset(
            &planes[..COMPLETION_FIRST],
            &widths[..COMPLETION_FIRST],
            s.calls,
        );
        batches.completions.reset(
            &planes[COMPLETION_FIRST..],
            &widths[COMPLETION_FIRST..],
            s.completions,
        );
        raw.for_each_record(|rec| {
            match rec {
                RawRecord::Call(c) => {
                    payload[kind_at] = KIND_CALL;
                    batches.calls.push(payload, &call_values(&c, prev_end));
                    prev_end = c.end;
                }
                RawRecord::Completion(c) => {
                    payload[kind_at] = if c.cancelled {
                        KIND_COMPLETION_CANCELLED
                    } else {
                        KIND_COMPLETION
                    };
                    batches.completions.push(payload, &completion_values(&c));
                }
                RawRecord::Misc { kind, body } => {
                    payload[kind_at] = kind;
                    let (len, used) = encode_u64(body.len() as u64);
                    payload[misc_at..misc_at + used].copy_from_slice(&len[..used]);
                    misc_at += used;
                    payload[misc_at..misc_at + body.len()].copy_from_slice(body);
                    misc_at += body.len();
                }
            }
            kind_at += 1;
        });
        batches.calls.flush(payload);
        batches.completions.flush(payload);
    }
}

/// Index of the first completion column among the numeric columns.
const COMPLETION_FIRST: usize = COL_C_REQUEST - COL_FUNC;
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

#[derive(Default)]
struct Batches {
    calls: Batch<COMPLETION_FIRST>,
    completions: Batch<{ NUM_VALUE_COLUMNS - COMPLETION_FIRST }>,
}

fn survey(raw: &RawBuf) -> Survey {
    let mut s = Survey {
        first_ts: u64::MAX,
        ..Survey::default()
    };
    let mut prev_end = 0u64;
    let note = |s: &mut Survey, lo: u64, hi: u64| {
        s.first_ts = s.first_ts.min(lo);
        s.last_ts = s.last_ts.max(hi);
    };
    raw.for_each_record(|rec| {
        s.events += 1;
        match rec {
            RawRecord::Call(c) => {
                for (or, v) in s.or[..10].iter_mut().zip(call_values(&c, prev_end)) {
                    *or |= v;
                }
                prev_end = c.end;
                s.calls += 1;
                note(&mut s, c.start.min(c.end), c.start.max(c.end));
            }
            RawRecord::Completion(c) => {
                for (or, v) in s.or[10..].iter_mut().zip(completion_values(&c)) {
                    *or |= v;
                }
                s.completions += 1;
            }
            RawRecord::Misc { kind, body: b } => {
                s.misc_len += varint_len(b.len() as u64) + b.len();
                if let Some((lo, hi)) = body::misc_body_times(kind, b) {
                    note(&mut s, lo, hi);
                }
            }
        }
    });
    if s.first_ts == u64::MAX {
        s.first_ts = 0;
    }
    s
}

/// A decoded payload split into its columns, with the counts and plane widths checked against
/// the column lengths. Reading a value at an index below the count cannot fail after this.
#[derive(Debug)]
pub(crate) struct Columns {
    ranges: [(usize, usize); NUM_COLUMNS],
    widths: [usize; NUM_COLUMNS],
    calls: usize,
    completions: usize,
}

/// Splits a payload into columns, checking the directory against the payload length and each
/// numeric column's length against its width and the number of events that use it.
pub(crate) fn split_columns(payload: &[u8]) -> Result<Columns, &'static str> {
    let count = *payload.first().ok_or("empty payload")? as usize;
    if count != NUM_COLUMNS {
        return Err("unexpected number of columns");
    }
    let mut pos = 1;
    let mut lens = [0u64; NUM_COLUMNS];
    for l in &mut lens {
        *l = get_u64(payload, &mut pos).ok_or("bad column directory")?;
    }
    let mut ranges = [(0usize, 0usize); NUM_COLUMNS];
    for (r, &l) in ranges.iter_mut().zip(&lens) {
        let len = usize::try_from(l).map_err(|_| "column length overflows")?;
        let end = pos.checked_add(len).ok_or("column length overflows")?;
        if end > payload.len() {
            return Err("column extends past the payload");
        }
        *r = (pos, end);
        pos = end;
    }
    if pos != payload.len() {
        return Err("payload has bytes after the last column");
    }
    let kinds = &payload[ranges[COL_KIND].0..ranges[COL_KIND].1];
    let calls = kinds.iter().filter(|&&k| k == KIND_CALL).count();
    let completions = kinds
        .iter()
        .filter(|&&k| k == KIND_COMPLETION || k == KIND_COMPLETION_CANCELLED)
        .count();
    let mut widths = [0usize; NUM_COLUMNS];
    for (col, width_slot) in widths.iter_mut().enumerate().take(COL_MISC).skip(COL_FUNC) {
        let (start, end) = ranges[col];
        let n = if col < COL_C_REQUEST {
            calls
        } else {
            completions
        };
        if end == start {
            return Err("numeric column lacks its width byte");
        }
        let width = payload[start] as usize;
        if width > 8 {
            return Err("numeric column wider than 8 bytes");
        }
        if (end - start - 1) as u128 != width as u128 * n as u128 {
            return Err("numeric column length does not match its width and value count");
        }
        *width_slot = width;
    }
    Ok(Columns {
        ranges,
        widths,
        calls,
        completions,
    })
}

/// Where decoding of a payload's columns stands. Holds no borrow, so an iterator can own the
/// payload it walks.
#[derive(Debug, Clone, Default)]
pub(crate) struct ColumnCursor {
    kind_pos: usize,
    call: usize,
    completion: usize,
    misc_pos: usize,
    prev_end: u64,
}

impl ColumnCursor {
    pub(crate) fn new(columns: &Columns) -> Self {
        ColumnCursor {
            kind_pos: columns.ranges[COL_KIND].0,
            misc_pos: columns.ranges[COL_MISC].0,
            ..Default::default()
        }
    }

    /// Value `idx` of numeric column `col` (which holds `n` values), gathered from its planes.
    #[inline]
    fn value(p: &[u8], c: &Columns, col: usize, idx: usize, n: usize) -> u64 {
        let base = c.ranges[col].0 + 1 + idx;
        let mut v = 0u64;
        for plane in 0..c.widths[col] {
            v |= (p.get(base + plane * n).copied().unwrap_or(0) as u64) << (8 * plane);
        }
        v
    }

    /// The next event, `Ok(None)` at the end of the kind column.
    pub(crate) fn next_event(
        &mut self,
        p: &[u8],
        c: &Columns,
    ) -> Result<Option<Event>, &'static str> {
        if self.kind_pos >= c.ranges[COL_KIND].1 {
            return Ok(None);
        }
        let kind = *p.get(self.kind_pos).ok_or("kind column past the payload")?;
        self.kind_pos += 1;
        let i32_of = |v: u64| i32::try_from(unzigzag(v)).map_err(|_| "32-bit field out of range");
        let u32_of = |v: u64| u32::try_from(v).map_err(|_| "32-bit field out of range");
        let event = match kind {
            KIND_CALL => {
                let (i, n) = (self.call, c.calls);
                if i >= n {
                    return Err("more calls than the columns hold");
                }
                self.call += 1;
                let f = |col| Self::value(p, c, col, i, n);
                let func = u16::try_from(f(COL_FUNC)).map_err(|_| "function id out of range")?;
                let start = self.prev_end.wrapping_add(unzigzag(f(COL_START)) as u64);
                let end = start.wrapping_add(unzigzag(f(COL_DURATION)) as u64);
                self.prev_end = end;
                Event::Call(MpiCall {
                    func,
                    start,
                    end,
                    comm: u32_of(f(COL_COMM))?,
                    peer: i32_of(f(COL_PEER))?,
                    tag: i32_of(f(COL_TAG))?,
                    bytes: f(COL_BYTES),
                    root: i32_of(f(COL_ROOT))?,
                    request: f(COL_REQUEST),
                    cost: u32_of(f(COL_COST))?,
                })
            }
            KIND_COMPLETION | KIND_COMPLETION_CANCELLED => {
                let (i, n) = (self.completion, c.completions);
                if i >= n {
                    return Err("more completions than the columns hold");
                }
                self.completion += 1;
                let f = |col| Self::value(p, c, col, i, n);
                Event::Completion(Completion {
                    request: f(COL_C_REQUEST),
                    source: i32_of(f(COL_C_SOURCE))?,
                    tag: i32_of(f(COL_C_TAG))?,
                    bytes: f(COL_C_BYTES),
                    cancelled: kind == KIND_COMPLETION_CANCELLED,
                })
            }
            k if body::is_misc_kind(k) => {
                let misc_end = c.ranges[COL_MISC].1;
                let column = p.get(..misc_end).ok_or("misc column past the payload")?;
                let len = get_u64(column, &mut self.misc_pos).ok_or("bad misc body length")?;
                let len = usize::try_from(len).map_err(|_| "misc length overflows")?;
                let start = self.misc_pos;
                let end = start.checked_add(len).ok_or("misc length overflows")?;
                let body = column
                    .get(start..end)
                    .ok_or("misc body extends past its column")?;
                self.misc_pos = end;
                body::decode_misc_body(k, body)?
            }
            _ => return Err("unknown event kind"),
        };
        Ok(Some(event))
    }

    /// True when every column has been consumed exactly.
    pub(crate) fn fully_consumed(&self, c: &Columns) -> bool {
        self.kind_pos == c.ranges[COL_KIND].1
            && self.call == c.calls
            && self.completion == c.completions
            && self.misc_pos == c.ranges[COL_MISC].1
    }
}
