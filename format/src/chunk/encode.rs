//! Chunk encoding: one path from a buffer of events to a framed, checksummed chunk. Either buffer
//! ([`RawBuf`], the recorder's; [`EventBuf`], for writers holding decoded events) shows its events
//! to the encoder through [`EventSource`]; the encoder surveys them once to lay the payload out
//! exactly, then writes them straight into their columns and compresses the whole.

use super::columns::*;
use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED};
use crate::framing::{
    CHUNK_HEADER_LEN, CHUNK_MIN_VERSION, CHUNK_VERSION, CODEC_NONE, CODEC_ZSTD, ChunkHeader,
    ENCODING_COLUMNS_V1,
};
use crate::model::*;
use crate::raw::{RawBuf, RawRecord};
use crate::varint::{encode_u64, get_u64, put_u64, zigzag};

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
fn completion_kind(c: &Completion) -> u8 {
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

impl EventSource for EventBuf {
    /// Column group by column group: each in its own loop, with no per-event dispatch on the kind.
    #[inline]
    fn visit(&self, visitor: &mut impl EventVisitor) {
        visitor.kinds(&self.kinds);
        for c in &self.calls {
            visitor.call(c);
        }
        for c in &self.completions {
            visitor.completion(c);
        }
        for (body, &kind) in self.misc_bodies().zip(&self.misc_kinds) {
            visitor.misc(kind, body);
        }
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

impl Survey {
    fn of(events: &impl EventSource) -> Survey {
        let mut surveyor = Surveyor {
            survey: Survey::default(),
            prev_end: 0,
            first_ts: u64::MAX,
        };
        events.visit(&mut surveyor);
        let mut s = surveyor.survey;
        s.first_ts = match surveyor.first_ts {
            u64::MAX => 0,
            t => t,
        };
        s
    }
}

/// The survey's pass: the previous call's end (start times are stored against it) and the
/// smallest time so far beside what the survey gathers.
struct Surveyor {
    survey: Survey,
    prev_end: u64,
    first_ts: u64,
}

impl Surveyor {
    #[inline]
    fn note(&mut self, lo: u64, hi: u64) {
        self.first_ts = self.first_ts.min(lo);
        self.survey.last_ts = self.survey.last_ts.max(hi);
    }
}

impl EventVisitor for Surveyor {
    #[inline]
    fn kinds(&mut self, kinds: &[u8]) {
        self.survey.events += kinds.len() as u64;
    }

    #[inline]
    fn call(&mut self, c: &MpiCall) {
        for (or, v) in self.survey.or[..COMPLETION_FIRST]
            .iter_mut()
            .zip(call_values(c, self.prev_end))
        {
            *or |= v;
        }
        self.prev_end = c.end;
        self.survey.calls += 1;
        self.note(c.start.min(c.end), c.start.max(c.end));
    }

    #[inline]
    fn completion(&mut self, c: &Completion) {
        for (or, v) in self.survey.or[COMPLETION_FIRST..]
            .iter_mut()
            .zip(completion_values(c))
        {
            *or |= v;
        }
        self.survey.completions += 1;
    }

    #[inline]
    fn misc(&mut self, kind: u8, body: &[u8]) {
        self.survey.misc_len += varint_len(body.len() as u64) + body.len();
        if let Some((lo, hi)) = body::misc_body_times(kind, body) {
            self.note(lo, hi);
        }
    }
}

/// The writing pass: every column's offset is known from the survey, so values go straight to
/// their byte planes with no intermediate per-column storage.
struct PayloadWriter<'a> {
    payload: &'a mut [u8],
    batches: &'a mut Batches,
    kind_at: usize,
    misc_at: usize,
    prev_end: u64,
}

impl EventVisitor for PayloadWriter<'_> {
    #[inline]
    fn kinds(&mut self, kinds: &[u8]) {
        self.payload[self.kind_at..self.kind_at + kinds.len()].copy_from_slice(kinds);
        self.kind_at += kinds.len();
    }

    #[inline]
    fn call(&mut self, c: &MpiCall) {
        self.batches
            .calls
            .push(self.payload, &call_values(c, self.prev_end));
        self.prev_end = c.end;
    }

    #[inline]
    fn completion(&mut self, c: &Completion) {
        self.batches
            .completions
            .push(self.payload, &completion_values(c));
    }

    #[inline]
    fn misc(&mut self, _kind: u8, body: &[u8]) {
        let (len, used) = encode_u64(body.len() as u64);
        let at = self.misc_at;
        self.payload[at..at + used].copy_from_slice(&len[..used]);
        self.payload[at + used..at + used + body.len()].copy_from_slice(body);
        self.misc_at = at + used + body.len();
    }
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
        self.encode_from(rank, stream, seq, raw)
    }

    /// Encodes the events of `buf`: the same bytes [`ChunkEncoder::encode`] writes for a
    /// [`RawBuf`] holding the same events.
    pub fn encode_events(
        &mut self,
        rank: u32,
        stream: u32,
        seq: u64,
        buf: &EventBuf,
    ) -> EncodedChunk {
        self.encode_from(rank, stream, seq, buf)
    }

    /// The one encode path: survey the events, lay the payload out, write the events into it,
    /// compress and frame.
    fn encode_from(
        &mut self,
        rank: u32,
        stream: u32,
        seq: u64,
        events: &impl EventSource,
    ) -> EncodedChunk {
        let survey = Survey::of(events);
        let (planes, widths, starts) = self.lay_out(&survey);
        let mut writer = PayloadWriter {
            payload: &mut self.payload,
            batches: reset_batches(&mut self.batches, &planes, &widths, &survey),
            kind_at: starts[COL_KIND],
            misc_at: starts[COL_MISC],
            prev_end: 0,
        };
        events.visit(&mut writer);
        writer.batches.calls.flush(writer.payload);
        writer.batches.completions.flush(writer.payload);
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
                self.kinds.push(completion_kind(c));
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
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
