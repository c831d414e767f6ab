//! Chunk encoding and framing: turns a [`RawBuf`] (or an [`EventBuf`]) into one self-describing,
//! checksummed chunk, and the decoding side: splitting and validating a payload's columns, and
//! decoding its events block by block.
//!
//! The payload is columnar (see FORMAT.md "Payload: columns v1"): a kind byte per event, one
//! column per numeric field stored as byte planes (call start times as zigzag deltas from the
//! previous call's end), misc bodies in their own column, then zstd over the whole payload.
//! FORMAT.md's "Design choices" section has the measurements this layout was chosen by.

use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED, KIND_USER};
use crate::model::*;
use crate::raw::{RawBuf, RawRecord};
use crate::varint::{encode_u64, get_u64, put_u64, unzigzag, zigzag};

/// Magic at the start of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"EVFC";
/// Version of the chunk header and payload layout this crate writes. Version 2 added the event
/// kinds `RankInfo` (12) and `Writer` (13) to version 1's layout, version 3 `RemoteGroup` (14) and
/// `WinDef` (15), version 4 `Memory` (16) and `Threshold` (17), version 5 `Polls` (18), version 6
/// the call columns of receive bytes and call sites and kind 19 (`CallSite`), version 7 kind 20
/// (`EpochGroup`).
pub const CHUNK_VERSION: u16 = 7;
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
/// Since version 6; a version 1-5 payload has no such column (its values read as 0).
pub(crate) const COL_RECV_BYTES: usize = 11;
/// Since version 6, like [`COL_RECV_BYTES`].
pub(crate) const COL_SITE: usize = 12;
pub(crate) const COL_C_REQUEST: usize = 13;
pub(crate) const COL_C_SOURCE: usize = 14;
pub(crate) const COL_C_TAG: usize = 15;
pub(crate) const COL_C_BYTES: usize = 16;
pub(crate) const COL_MISC: usize = 17;
pub(crate) const NUM_COLUMNS: usize = 18;
/// Columns of a version 1-5 payload: all but [`COL_RECV_BYTES`] and [`COL_SITE`].
const NUM_COLUMNS_BEFORE_V6: usize = 16;

/// Whether a payload of chunk `version` has column `col`.
fn has_column(version: u16, col: usize) -> bool {
    version >= 6 || !matches!(col, COL_RECV_BYTES | COL_SITE)
}
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

impl EncodedChunk {
    /// This chunk as an older chunk `version` would hold it (1 to [`CHUNK_VERSION`]): the columns
    /// that version lacks are dropped, with their values, and the payload is stored uncompressed.
    /// Misc events of kinds newer than `version` stay, so a reader must refuse the result: tests
    /// of readers against traces of older recorders use this, the recorder never does.
    pub fn as_version(&self, version: u16) -> Result<EncodedChunk, String> {
        let header_bytes: &[u8; CHUNK_HEADER_LEN] = self
            .bytes
            .get(..CHUNK_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or("no chunk header")?;
        let mut h = ChunkHeader::from_bytes(header_bytes);
        if !(CHUNK_MIN_VERSION..=CHUNK_VERSION).contains(&version) {
            return Err(format!("no chunk version {version}"));
        }
        let stored = &self.bytes[CHUNK_HEADER_LEN..];
        let payload = match h.codec {
            CODEC_NONE => stored.to_vec(),
            _ => zstd::bulk::decompress(stored, h.raw_len as usize).map_err(|e| e.to_string())?,
        };
        let count = *payload.first().ok_or("empty payload")? as usize;
        let mut pos = 1;
        let mut lens = Vec::with_capacity(count);
        for _ in 0..count {
            lens.push(get_u64(&payload, &mut pos).ok_or("bad column directory")? as usize);
        }
        // The columns of this payload's own version, in order, with where each starts.
        let cols: Vec<usize> = (0..NUM_COLUMNS)
            .filter(|&c| has_column(h.version, c))
            .collect();
        if cols.len() != count {
            return Err("unexpected number of columns".into());
        }
        let kept: Vec<(usize, usize)> = cols
            .iter()
            .zip(&lens)
            .scan(pos, |at, (&col, &len)| {
                let start = *at;
                *at += len;
                Some((col, start))
            })
            .filter(|&(col, _)| has_column(version, col))
            .collect();
        let len_of = |col: usize| lens[cols.iter().position(|&c| c == col).unwrap_or(0)];
        let mut out = vec![kept.len() as u8];
        for &(col, _) in &kept {
            put_u64(&mut out, len_of(col) as u64);
        }
        for &(col, start) in &kept {
            let end = start + len_of(col);
            out.extend_from_slice(payload.get(start..end).ok_or("column past the payload")?);
        }
        h.version = version;
        h.codec = CODEC_NONE;
        h.raw_len = out.len() as u64;
        h.stored_len = out.len() as u64;
        h.payload_crc = crc32c::crc32c(&out);
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(&out);
        Ok(EncodedChunk {
            bytes,
            raw_len: h.raw_len,
            stored_len: h.stored_len,
            events: self.events,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
        })
    }
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

/// The numeric column values of a call, in column order (columns 1..=12).
#[inline]
fn call_values(c: &MpiCall, prev_end: u64) -> [u64; CALL_COLUMNS] {
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
        self.finish(rank, stream, seq, &survey)
    }

    /// Encodes the events of `buf`: the same bytes [`ChunkEncoder::encode`] writes for a
    /// [`RawBuf`] holding the same events, computed column by column from typed arrays.
    pub fn encode_events(
        &mut self,
        rank: u32,
        stream: u32,
        seq: u64,
        buf: &EventBuf,
    ) -> EncodedChunk {
        let survey = buf.survey();
        self.build_payload_typed(buf, &survey);
        self.finish(rank, stream, seq, &survey)
    }

    /// Compresses the payload built and frames it.
    fn finish(&mut self, rank: u32, stream: u32, seq: u64, survey: &Survey) -> EncodedChunk {
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
        let (planes, widths, starts) = self.lay_out(s);
        let payload = &mut self.payload;
        let mut kind_at = starts[COL_KIND];
        let mut misc_at = starts[COL_MISC];
        let mut prev_end = 0u64;
        let batches = reset_batches(&mut self.batches, &planes, &widths, s);
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

    /// [`ChunkEncoder::build_payload`] for typed arrays: each column group is written in its
    /// own loop, with no per-event dispatch on the kind.
    fn build_payload_typed(&mut self, buf: &EventBuf, s: &Survey) {
        let (planes, widths, starts) = self.lay_out(s);
        let payload = &mut self.payload;
        payload[starts[COL_KIND]..starts[COL_KIND] + buf.kinds.len()].copy_from_slice(&buf.kinds);
        let batches = reset_batches(&mut self.batches, &planes, &widths, s);
        let mut prev_end = 0u64;
        for c in &buf.calls {
            batches.calls.push(payload, &call_values(c, prev_end));
            prev_end = c.end;
        }
        batches.calls.flush(payload);
        for c in &buf.completions {
            batches.completions.push(payload, &completion_values(c));
        }
        batches.completions.flush(payload);
        let mut misc_at = starts[COL_MISC];
        for body in buf.misc_bodies() {
            let (len, used) = encode_u64(body.len() as u64);
            payload[misc_at..misc_at + used].copy_from_slice(&len[..used]);
            misc_at += used;
            payload[misc_at..misc_at + body.len()].copy_from_slice(body);
            misc_at += body.len();
        }
    }

    /// Sizes the payload for what the survey found and writes the column directory and the
    /// width bytes. Returns, per numeric column, where its plane 0 starts and its width, and
    /// where every column starts.
    #[allow(clippy::type_complexity)]
    fn lay_out(
        &mut self,
        s: &Survey,
    ) -> (
        [usize; NUM_VALUE_COLUMNS],
        [usize; NUM_VALUE_COLUMNS],
        [usize; NUM_COLUMNS],
    ) {
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
        (planes, widths, starts)
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

/// The batch buffers of an encoder, made ready for one chunk's call and completion columns.
/// Values are gathered in small batches and split into planes a batch at a time: the per-plane
/// loops over a batch vectorise, per-value plane loops do not.
fn reset_batches<'a>(
    batches: &'a mut Option<Box<Batches>>,
    planes: &[usize],
    widths: &[usize],
    s: &Survey,
) -> &'a mut Batches {
    let batches = batches.get_or_insert_with(|| Box::new(Batches::default()));
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
    batches
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
                for (or, v) in s.or[..COMPLETION_FIRST]
                    .iter_mut()
                    .zip(call_values(&c, prev_end))
                {
                    *or |= v;
                }
                prev_end = c.end;
                s.calls += 1;
                note(&mut s, c.start.min(c.end), c.start.max(c.end));
            }
            RawRecord::Completion(c) => {
                for (or, v) in s.or[COMPLETION_FIRST..]
                    .iter_mut()
                    .zip(completion_values(&c))
                {
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

/// Events waiting to be encoded, for writers that hold decoded [`Event`]s (reconstruction): a
/// push stores a call or completion as it is, with no serialisation, and the encoder reads the
/// typed arrays back. [`RawBuf`] stays the recorder's buffer (compact, allocation-free pushes).
#[derive(Clone, Debug, Default)]
pub struct EventBuf {
    kinds: Vec<u8>,
    calls: Vec<MpiCall>,
    completions: Vec<Completion>,
    /// Misc bodies, back to back; `misc_ends[i]` is where body i ends, `misc_kinds[i]` its kind.
    misc: Vec<u8>,
    misc_ends: Vec<usize>,
    misc_kinds: Vec<u8>,
}

impl EventBuf {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn push(&mut self, e: &Event) {
        match e {
            Event::Call(c) => {
                self.kinds.push(KIND_CALL);
                self.calls.push(*c);
            }
            Event::Completion(c) => {
                self.kinds.push(if c.cancelled {
                    KIND_COMPLETION_CANCELLED
                } else {
                    KIND_COMPLETION
                });
                self.completions.push(*c);
            }
            other => {
                let kind = body::put_misc_body(&mut self.misc, other);
                self.kinds.push(kind);
                self.misc_kinds.push(kind);
                self.misc_ends.push(self.misc.len());
            }
        }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Empties the buffer, keeping its allocations.
    pub fn clear(&mut self) {
        self.kinds.clear();
        self.calls.clear();
        self.completions.clear();
        self.misc.clear();
        self.misc_ends.clear();
        self.misc_kinds.clear();
    }

    /// The misc bodies in order.
    fn misc_bodies(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.misc_ends.iter().copied());
        starts
            .zip(&self.misc_ends)
            .map(|(start, &end)| self.misc.get(start..end).unwrap_or_default())
    }

    /// What [`survey`] learns from a [`RawBuf`], column group by column group.
    fn survey(&self) -> Survey {
        let mut s = Survey {
            events: self.kinds.len() as u64,
            calls: self.calls.len(),
            completions: self.completions.len(),
            ..Survey::default()
        };
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut prev_end = 0u64;
        let mut or = [0u64; COMPLETION_FIRST];
        for c in &self.calls {
            for (or, v) in or.iter_mut().zip(call_values(c, prev_end)) {
                *or |= v;
            }
            prev_end = c.end;
            lo = lo.min(c.start.min(c.end));
            hi = hi.max(c.start.max(c.end));
        }
        s.or[..COMPLETION_FIRST].copy_from_slice(&or);
        for c in &self.completions {
            for (or, v) in s.or[COMPLETION_FIRST..]
                .iter_mut()
                .zip(completion_values(c))
            {
                *or |= v;
            }
        }
        for (body, &kind) in self.misc_bodies().zip(&self.misc_kinds) {
            s.misc_len += varint_len(body.len() as u64) + body.len();
            if let Some((a, b)) = body::misc_body_times(kind, body) {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        (s.first_ts, s.last_ts) = if lo == u64::MAX { (0, 0) } else { (lo, hi) };
        s
    }
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

/// Bytes a numeric column's values may use: 16-bit fields 2, 32-bit ones (and the zigzagged
/// `i32` fields, whose zigzag images are exactly the values below 2^32) 4, 64-bit ones 8.
const fn field_bytes(col: usize) -> usize {
    match col {
        COL_FUNC => 2,
        COL_COMM | COL_PEER | COL_TAG | COL_ROOT | COL_COST | COL_SITE | COL_C_SOURCE
        | COL_C_TAG => 4,
        _ => 8,
    }
}

/// Splits a payload into columns and checks everything FORMAT.md requires of it: the directory
/// against the payload length, the event count against `events`, every kind, each numeric
/// column's length against its width and value count, that values fit their fields, and every
/// misc body (which must use up the misc column exactly). After this, decoding cannot fail.
///
/// The checks work on whole columns rather than event by event: kinds are counted in one pass,
/// a field fits when the planes above its width are all zero, and only misc events are walked.
pub(crate) fn split_columns(payload: &[u8], events: u64, version: u16) -> Result<Columns, String> {
    let max_kind = body::max_kind(version).ok_or("unsupported chunk version")?;
    let count = *payload.first().ok_or("empty payload")? as usize;
    // Before version 6 the receive-bytes and call-site columns did not exist: each is read as an
    // empty column of width 0, whose values decode as 0.
    let expected = if version >= 6 {
        NUM_COLUMNS
    } else {
        NUM_COLUMNS_BEFORE_V6
    };
    if count != expected {
        return Err("unexpected number of columns".into());
    }
    let mut pos = 1;
    let mut lens = [0u64; NUM_COLUMNS];
    for (col, l) in lens.iter_mut().enumerate() {
        if !has_column(version, col) {
            continue;
        }
        *l = get_u64(payload, &mut pos).ok_or("bad column directory")?;
    }
    let mut ranges = [(0usize, 0usize); NUM_COLUMNS];
    for (r, &l) in ranges.iter_mut().zip(&lens) {
        let len = usize::try_from(l).map_err(|_| "column length overflows")?;
        let end = pos.checked_add(len).ok_or("column length overflows")?;
        if end > payload.len() {
            return Err("column extends past the payload".into());
        }
        *r = (pos, end);
        pos = end;
    }
    if pos != payload.len() {
        return Err("payload has bytes after the last column".into());
    }
    let kinds = &payload[ranges[COL_KIND].0..ranges[COL_KIND].1];
    if kinds.len() as u64 != events {
        return Err(format!(
            "payload holds {} events, header says {events}",
            kinds.len()
        ));
    }
    // Separate counting loops: each one vectorises, a combined match does not.
    let calls = kinds.iter().filter(|&&k| k == KIND_CALL).count();
    let completions = kinds
        .iter()
        .filter(|&&k| k == KIND_COMPLETION || k == KIND_COMPLETION_CANCELLED)
        .count();
    let misc = kinds
        .iter()
        .filter(|&&k| (KIND_USER..=max_kind).contains(&k))
        .count();
    if calls + completions + misc != kinds.len() {
        return Err("unknown event kind".into());
    }
    let mut widths = [0usize; NUM_COLUMNS];
    for (col, width_slot) in widths.iter_mut().enumerate().take(COL_MISC).skip(COL_FUNC) {
        let (start, end) = ranges[col];
        let n = if col < COL_C_REQUEST {
            calls
        } else {
            completions
        };
        if !has_column(version, col) {
            continue;
        }
        if end == start {
            return Err("numeric column lacks its width byte".into());
        }
        let width = payload[start] as usize;
        if width > 8 {
            return Err("numeric column wider than 8 bytes".into());
        }
        if (end - start - 1) as u128 != width as u128 * n as u128 {
            return Err("numeric column length does not match its width and value count".into());
        }
        let fits = field_bytes(col);
        if width > fits && payload[start + 1 + fits * n..end].iter().any(|&b| b != 0) {
            return Err(if col == COL_FUNC {
                "function id out of range".into()
            } else {
                "32-bit field out of range".into()
            });
        }
        *width_slot = width;
    }
    let columns = Columns {
        ranges,
        widths,
        calls,
        completions,
    };
    let mut misc_cursor = MiscCursor::new(&columns);
    let max_marker = body::max_marker(version);
    for _ in 0..misc {
        if let Event::Marker(m) = misc_cursor.next_body(payload, &columns)?
            && body::marker_kind(&m) > max_marker
        {
            return Err("marker kind newer than the chunk's version".into());
        }
    }
    if misc_cursor.misc_pos != ranges[COL_MISC].1 {
        return Err("columns hold bytes no event uses".into());
    }
    Ok(columns)
}

/// Walks the misc events of a payload (kind and body), skipping calls and completions.
#[derive(Debug, Clone)]
pub(crate) struct MiscCursor {
    kind_pos: usize,
    misc_pos: usize,
}

impl MiscCursor {
    pub(crate) fn new(columns: &Columns) -> Self {
        MiscCursor {
            kind_pos: columns.ranges[COL_KIND].0,
            misc_pos: columns.ranges[COL_MISC].0,
        }
    }

    /// The next misc body, checked by decoding it; `Err` if the payload holds no further misc
    /// event or its body is damaged.
    fn next_body(&mut self, p: &[u8], c: &Columns) -> Result<Event, String> {
        let kinds = &p[self.kind_pos..c.ranges[COL_KIND].1];
        let skip = kinds
            .iter()
            .position(|&k| body::is_misc_kind(k))
            .ok_or("no misc event left")?;
        let kind = kinds[skip];
        self.kind_pos += skip + 1;
        let (event, end) = misc_body_at(p, c, self.misc_pos, kind)?;
        self.misc_pos = end;
        Ok(event)
    }

    /// The next misc event of a validated payload.
    pub(crate) fn next_event(&mut self, p: &[u8], c: &Columns) -> Option<Event> {
        self.next_body(p, c).ok()
    }
}

/// Decodes the misc body of kind `kind` starting at `pos` (its length varint); returns the event
/// and where the next body starts.
fn misc_body_at(p: &[u8], c: &Columns, pos: usize, kind: u8) -> Result<(Event, usize), String> {
    let column = &p[..c.ranges[COL_MISC].1];
    let mut pos = pos;
    let len = get_u64(column, &mut pos).ok_or("bad misc body length")?;
    let len = usize::try_from(len).map_err(|_| "misc length overflows")?;
    let end = pos.checked_add(len).ok_or("misc length overflows")?;
    let body = column
        .get(pos..end)
        .ok_or("misc body extends past its column")?;
    Ok((body::decode_misc_body(kind, body)?, end))
}

/// Values decoded per refill: big enough for the per-plane loops to run at full vector speed,
/// small enough to stay in L1 (12 call columns × 256 × 8 bytes = 24 KiB).
const BLOCK: usize = 256;
const CALL_COLUMNS: usize = COL_C_REQUEST - COL_FUNC;
const COMPLETION_COLUMNS: usize = COL_MISC - COL_C_REQUEST;

/// Call and completion values of the current block, column by column. Call columns hold the
/// raw column values except start and duration, which hold the call's absolute start and end.
struct Block {
    calls: [[u64; BLOCK]; CALL_COLUMNS],
    completions: [[u64; BLOCK]; COMPLETION_COLUMNS],
}

/// Decodes values `first..first + out.len()` of a numeric column from its byte planes.
#[inline]
fn decode_plane_values(p: &[u8], c: &Columns, col: usize, n: usize, first: usize, out: &mut [u64]) {
    out.fill(0);
    let base = c.ranges[col].0 + 1 + first;
    for plane in 0..c.widths[col] {
        let at = base + plane * n;
        let bytes = &p[at..at + out.len()];
        let shift = 8 * plane;
        for (v, &b) in out.iter_mut().zip(bytes) {
            *v |= u64::from(b) << shift;
        }
    }
}

/// Where decoding of a validated payload's events stands: calls and completions are decoded a
/// block at a time, column by column, and handed out from the block.
pub(crate) struct ColumnCursor {
    kind_pos: usize,
    misc_pos: usize,
    /// Index (among the chunk's calls) of the next call, and of the first call past the block.
    call: usize,
    call_block_start: usize,
    call_block_end: usize,
    completion: usize,
    completion_block_start: usize,
    completion_block_end: usize,
    prev_end: u64,
    block: Box<Block>,
}

impl std::fmt::Debug for ColumnCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnCursor")
            .field("kind_pos", &self.kind_pos)
            .field("call", &self.call)
            .field("completion", &self.completion)
            .finish()
    }
}

impl ColumnCursor {
    pub(crate) fn new(columns: &Columns) -> Self {
        ColumnCursor {
            kind_pos: columns.ranges[COL_KIND].0,
            misc_pos: columns.ranges[COL_MISC].0,
            call: 0,
            call_block_start: 0,
            call_block_end: 0,
            completion: 0,
            completion_block_start: 0,
            completion_block_end: 0,
            prev_end: 0,
            block: Box::new(Block {
                calls: [[0; BLOCK]; CALL_COLUMNS],
                completions: [[0; BLOCK]; COMPLETION_COLUMNS],
            }),
        }
    }

    #[inline(never)]
    fn refill_calls(&mut self, p: &[u8], c: &Columns) {
        let first = self.call;
        let m = (c.calls - first).min(BLOCK);
        for (i, out) in self.block.calls.iter_mut().enumerate() {
            decode_plane_values(p, c, COL_FUNC + i, c.calls, first, &mut out[..m]);
        }
        // Start and end chain through the previous call's end: the one sequential step.
        let [_, starts, ends, ..] = &mut self.block.calls;
        let mut prev_end = self.prev_end;
        for (s, e) in starts[..m].iter_mut().zip(&mut ends[..m]) {
            let start = prev_end.wrapping_add(unzigzag(*s) as u64);
            let end = start.wrapping_add(unzigzag(*e) as u64);
            *s = start;
            *e = end;
            prev_end = end;
        }
        self.prev_end = prev_end;
        self.call_block_start = first;
        self.call_block_end = first + m;
    }

    #[inline(never)]
    fn refill_completions(&mut self, p: &[u8], c: &Columns) {
        let first = self.completion;
        let m = (c.completions - first).min(BLOCK);
        for (i, out) in self.block.completions.iter_mut().enumerate() {
            decode_plane_values(p, c, COL_C_REQUEST + i, c.completions, first, &mut out[..m]);
        }
        self.completion_block_start = first;
        self.completion_block_end = first + m;
    }

    /// The next event, `None` at the end. The payload must have passed [`split_columns`]; on
    /// any other payload this ends early (it never panics or invents values).
    #[inline]
    pub(crate) fn next_event(&mut self, p: &[u8], c: &Columns) -> Option<Event> {
        if self.kind_pos >= c.ranges[COL_KIND].1 {
            return None;
        }
        let kind = p[self.kind_pos];
        self.kind_pos += 1;
        // Validation guarantees every value fits its field, so the narrowing casts are exact.
        let event = match kind {
            KIND_CALL => {
                if self.call >= self.call_block_end {
                    if self.call >= c.calls {
                        return None;
                    }
                    self.refill_calls(p, c);
                }
                let j = self.call - self.call_block_start;
                self.call += 1;
                let v = |col: usize| self.block.calls[col - COL_FUNC][j];
                Event::Call(MpiCall {
                    func: v(COL_FUNC) as u16,
                    start: v(COL_START),
                    end: v(COL_DURATION),
                    comm: v(COL_COMM) as u32,
                    peer: unzigzag(v(COL_PEER)) as i32,
                    tag: unzigzag(v(COL_TAG)) as i32,
                    bytes: v(COL_BYTES),
                    root: unzigzag(v(COL_ROOT)) as i32,
                    request: v(COL_REQUEST),
                    cost: v(COL_COST) as u32,
                    recv_bytes: v(COL_RECV_BYTES),
                    site: v(COL_SITE) as u32,
                })
            }
            KIND_COMPLETION | KIND_COMPLETION_CANCELLED => {
                if self.completion >= self.completion_block_end {
                    if self.completion >= c.completions {
                        return None;
                    }
                    self.refill_completions(p, c);
                }
                let j = self.completion - self.completion_block_start;
                self.completion += 1;
                let v = |col: usize| self.block.completions[col - COL_C_REQUEST][j];
                Event::Completion(Completion {
                    request: v(COL_C_REQUEST),
                    source: unzigzag(v(COL_C_SOURCE)) as i32,
                    tag: unzigzag(v(COL_C_TAG)) as i32,
                    bytes: v(COL_C_BYTES),
                    cancelled: kind == KIND_COMPLETION_CANCELLED,
                })
            }
            k => {
                let (event, end) = misc_body_at(p, c, self.misc_pos, k).ok()?;
                self.misc_pos = end;
                event
            }
        };
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::RankFile;
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
    fn event_buf_encodes_the_same_bytes_as_raw_buf() {
        let events = halo_events(300);
        let mut raw = RawBuf::new();
        let mut typed = EventBuf::new();
        for e in &events {
            raw.push_event(e);
            typed.push(e);
        }
        assert_eq!(typed.len(), events.len());
        let mut enc = ChunkEncoder::new(1);
        let a = enc.encode(3, 0, 7, &raw);
        let b = enc.encode_events(3, 0, 7, &typed);
        assert_eq!(a.bytes, b.bytes);
        typed.clear();
        assert!(typed.is_empty());
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
        let mut file = crate::writer::encode_file_header(&crate::writer::FileHeader {
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
