//! [`EventBuf`]: decoded events waiting to be encoded, for writers that hold [`Event`]s
//! (reconstruction), and its own way into the encoder's columns.
//!
//! The buffer already keeps calls, completions and misc bodies in typed arrays, so a block's calls
//! are one slice. Each block's numeric values are computed once into arrays, one per column; the
//! survey (the plane widths) and the split into byte planes are then loops over those arrays,
//! which vectorise. The recorder's [`RawBuf`](crate::RawBuf) path visits its records one at a
//! time instead ([`super::encode`]); both give the same bytes for the same events (tested below),
//! through the same layout and framing.

use super::columns::*;
use super::encode::{
    COMPLETION_FIRST, ChunkEncoder, EncodedChunk, Layout, Survey, call_values, completion_kind,
    completion_values, lay_out, varint_len,
};
use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED};
use crate::model::*;
use crate::varint::encode_u64;

/// Events waiting to be encoded, for writers that hold decoded [`Event`]s (reconstruction): a
/// push stores a call or completion as it is, with no serialisation, and the encoder reads the
/// typed arrays back. [`RawBuf`](crate::RawBuf) stays the recorder's buffer (compact,
/// allocation-free pushes).
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

    /// Misc body `i`, as stored.
    fn misc_body(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.misc_ends[i - 1] };
        self.misc.get(start..self.misc_ends[i]).unwrap_or_default()
    }
}

/// Where the next block's events begin in the buffer's arrays.
#[derive(Clone, Copy, Default)]
struct Offsets {
    calls: usize,
    completions: usize,
    misc: usize,
}

impl ChunkEncoder {
    /// Encodes the events of `buf` as chunk `seq` of thread `stream` of `rank`: the same bytes
    /// [`ChunkEncoder::encode`] writes for a [`RawBuf`](crate::RawBuf) holding the same events.
    pub fn encode_events(
        &mut self,
        rank: u32,
        stream: u32,
        seq: u64,
        buf: &EventBuf,
    ) -> EncodedChunk {
        self.payload.clear();
        let mut values = std::mem::take(&mut self.column_values);
        let mut blocks = Vec::new();
        let mut layouts = Vec::new();
        let mut at = Offsets::default();
        let (mut first_ts, mut last_ts) = (u64::MAX, 0u64);
        for kinds in buf.kinds.chunks(self.block_events) {
            // Separate counting loops: each one vectorises, a combined match does not.
            let calls = kinds.iter().filter(|&&k| k == KIND_CALL).count();
            let completions = kinds
                .iter()
                .filter(|&&k| k == KIND_COMPLETION || k == KIND_COMPLETION_CANCELLED)
                .count();
            let mut survey = Survey {
                events: kinds.len(),
                calls,
                completions,
                misc: kinds.len() - calls - completions,
                ..Survey::default()
            };
            let misc = survey.misc;
            // Every value is written before it is read, so the scratch is zeroed only as it grows.
            let needed = CALL_COLUMNS * calls + COMPLETION_COLUMNS * completions;
            if values.len() < needed {
                values.resize(needed, 0);
            }
            let (call_values_of_block, completion_values_of_block) =
                values[..needed].split_at_mut(CALL_COLUMNS * calls);
            let call_cols = &buf.calls[at.calls..at.calls + calls];
            // Start times are stored against the previous call's end in the block.
            let mut prev_end = 0;
            fill_columns(call_cols, call_values_of_block, |c| {
                first_ts = first_ts.min(c.start.min(c.end));
                last_ts = last_ts.max(c.start.max(c.end));
                let values = call_values(c, prev_end);
                prev_end = c.end;
                values
            });
            fill_columns(
                &buf.completions[at.completions..at.completions + completions],
                completion_values_of_block,
                completion_values,
            );
            survey_columns(
                call_values_of_block,
                calls,
                &mut survey.or[..COMPLETION_FIRST],
            );
            survey_columns(
                completion_values_of_block,
                completions,
                &mut survey.or[COMPLETION_FIRST..],
            );
            for i in at.misc..at.misc + misc {
                let body = buf.misc_body(i);
                survey.misc_len += varint_len(body.len() as u64) + body.len();
                if let Some((lo, hi)) = body::misc_body_times(buf.misc_kinds[i], body) {
                    first_ts = first_ts.min(lo);
                    last_ts = last_ts.max(hi);
                }
            }

            let layout = lay_out(&mut self.payload, &survey);
            let payload = &mut self.payload[..];
            let kinds_at = layout.starts[COL_KIND];
            payload[kinds_at..kinds_at + kinds.len()].copy_from_slice(kinds);
            write_planes(payload, &layout, 0, call_values_of_block, calls);
            write_planes(
                payload,
                &layout,
                COMPLETION_FIRST,
                completion_values_of_block,
                completions,
            );
            let mut misc_at = layout.starts[COL_MISC];
            for i in at.misc..at.misc + misc {
                let body = buf.misc_body(i);
                let (len, used) = encode_u64(body.len() as u64);
                payload[misc_at..misc_at + used].copy_from_slice(&len[..used]);
                payload[misc_at + used..misc_at + used + body.len()].copy_from_slice(body);
                misc_at += used + body.len();
            }

            at.calls += calls;
            at.completions += completions;
            at.misc += misc;
            blocks.push(survey);
            layouts.push(layout);
        }
        self.column_values = values;
        let first_ts = if first_ts == u64::MAX { 0 } else { first_ts };
        self.finish(
            rank,
            stream,
            seq,
            &blocks,
            &layouts,
            (buf.kinds.len() as u64, first_ts, last_ts),
        )
    }
}

/// Computes the numeric values of `items` (`values_of` each, in order) into `values`, column
/// after column, each `items.len()` long.
fn fill_columns<T, const COLS: usize>(
    items: &[T],
    values: &mut [u64],
    mut values_of: impl FnMut(&T) -> [u64; COLS],
) {
    let n = items.len();
    if n == 0 {
        return;
    }
    let mut columns = values.chunks_exact_mut(n);
    let mut cols: [&mut [u64]; COLS] = std::array::from_fn(|_| columns.next().unwrap_or_default());
    for (i, item) in items.iter().enumerate() {
        for (col, v) in cols.iter_mut().zip(values_of(item)) {
            col[i] = v;
        }
    }
}

/// ORs each column of `values` (`n` values each) into `or`: the survey that gives the widths.
fn survey_columns(values: &[u64], n: usize, or: &mut [u64]) {
    if n == 0 {
        return;
    }
    for (or, col) in or.iter_mut().zip(values.chunks_exact(n)) {
        *or |= col.iter().fold(0, |a, &v| a | v);
    }
}

/// Splits each column of `values` (`n` values each) into the byte planes `layout` gave the
/// block's numeric columns from `first` on.
fn write_planes(payload: &mut [u8], layout: &Layout, first: usize, values: &[u64], n: usize) {
    if n == 0 {
        return;
    }
    for (j, col) in values.chunks_exact(n).enumerate() {
        let plane0 = layout.planes[first + j];
        let width = layout.widths[first + j];
        // Eight values at a time, as an 8×8 byte transpose: a byte at a time per plane does
        // not vectorise (the baseline x86-64 has no narrowing store), and was most of the split.
        let mut done = 0;
        if width >= 2 {
            for (group, eight) in col.chunks_exact(8).enumerate() {
                let planes = byte_planes_of_eight(eight);
                for (p, plane) in planes.iter().take(width).enumerate() {
                    let at = plane0 + p * n + 8 * group;
                    payload[at..at + 8].copy_from_slice(&plane.to_le_bytes());
                }
            }
            done = n - n % 8;
        }
        for p in 0..width {
            let at = plane0 + p * n;
            let shift = 8 * p;
            for (dst, &v) in payload[at + done..at + n].iter_mut().zip(&col[done..]) {
                *dst = (v >> shift) as u8;
            }
        }
    }
}

/// Byte plane `p` of eight values (byte `p` of each, in order) as the little-endian word
/// `planes[p]`.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
fn byte_planes_of_eight(v: &[u64]) -> [u64; 8] {
    use std::arch::x86_64::*;
    let v: [u64; 8] = std::array::from_fn(|i| v[i]);
    // SAFETY: these SSE2 instructions exist wherever this is compiled (the cfg above), and they
    // read and write registers only.
    unsafe {
        let row = |i: usize| _mm_cvtsi64_si128(v[i] as i64);
        // Pairs, then quadruples, then octets of the values' bytes side by side: after the third
        // interleave each 64-bit half holds one plane.
        let pairs = [
            _mm_unpacklo_epi8(row(0), row(1)),
            _mm_unpacklo_epi8(row(2), row(3)),
            _mm_unpacklo_epi8(row(4), row(5)),
            _mm_unpacklo_epi8(row(6), row(7)),
        ];
        let low_quads = _mm_unpacklo_epi16(pairs[0], pairs[1]);
        let high_quads = _mm_unpackhi_epi16(pairs[0], pairs[1]);
        let low_quads2 = _mm_unpacklo_epi16(pairs[2], pairs[3]);
        let high_quads2 = _mm_unpackhi_epi16(pairs[2], pairs[3]);
        let octets = [
            _mm_unpacklo_epi32(low_quads, low_quads2),
            _mm_unpackhi_epi32(low_quads, low_quads2),
            _mm_unpacklo_epi32(high_quads, high_quads2),
            _mm_unpackhi_epi32(high_quads, high_quads2),
        ];
        let low = |x: __m128i| _mm_cvtsi128_si64(x) as u64;
        let high = |x: __m128i| _mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)) as u64;
        [
            low(octets[0]),
            high(octets[0]),
            low(octets[1]),
            high(octets[1]),
            low(octets[2]),
            high(octets[2]),
            low(octets[3]),
            high(octets[3]),
        ]
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
fn byte_planes_of_eight(v: &[u64]) -> [u64; 8] {
    byte_planes_of_eight_portable(v)
}

/// [`byte_planes_of_eight`] without SSE2, a byte at a time.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "sse2", not(test)),
    allow(dead_code)
)]
fn byte_planes_of_eight_portable(v: &[u64]) -> [u64; 8] {
    std::array::from_fn(|p| {
        v.iter()
            .take(8)
            .enumerate()
            .fold(0, |word, (i, &x)| word | ((x >> (8 * p)) & 0xff) << (8 * i))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::RawBuf;
    use crate::synthetic;

    fn both_ways(events: &[Event], encoder: impl Fn() -> ChunkEncoder) -> (Vec<u8>, Vec<u8>) {
        let mut raw = RawBuf::new();
        let mut typed = EventBuf::new();
        for e in events {
            raw.push_event(e);
            typed.push(e);
        }
        assert_eq!(typed.len(), events.len());
        let a = encoder().encode(3, 0, 7, &raw);
        let b = encoder().encode_events(3, 0, 7, &typed);
        (a.bytes, b.bytes)
    }

    #[test]
    fn event_buf_encodes_the_same_bytes_as_raw_buf() {
        let events = synthetic::rank_of_four(300);
        let (a, b) = both_ways(&events, || ChunkEncoder::new(1));
        assert_eq!(a, b);
        let (a, b) = both_ways(&events, ChunkEncoder::uncompressed);
        assert_eq!(a, b);
    }

    /// Blocks that end inside a run of calls, blocks with no calls or no completions, one event
    /// per block, the whole chunk in one block, and an empty buffer.
    #[test]
    fn every_cut_of_blocks_encodes_the_same_bytes_both_ways() {
        let events = synthetic::rank_of_four(40);
        let completions_only: Vec<Event> = events
            .iter()
            .filter(|e| matches!(e, Event::Completion(_)))
            .cloned()
            .collect();
        let no_completions: Vec<Event> = events
            .iter()
            .filter(|e| !matches!(e, Event::Completion(_)))
            .cloned()
            .collect();
        for set in [&events, &completions_only, &no_completions, &Vec::new()] {
            for block in [1, 2, 3, 7, 64, usize::MAX] {
                let (a, b) = both_ways(set, || {
                    ChunkEncoder::uncompressed().with_block_events(block)
                });
                assert_eq!(a, b, "{} events in blocks of {block}", set.len());
            }
        }
    }

    #[test]
    fn eight_values_split_into_their_byte_planes() {
        let values: Vec<u64> = (0..8u64)
            .map(|i| 0x0102_0304_0506_0708u64.wrapping_mul(i + 1) ^ (i << 56))
            .collect();
        for planes in [
            byte_planes_of_eight(&values),
            byte_planes_of_eight_portable(&values),
        ] {
            for (p, plane) in planes.iter().enumerate() {
                let expected: Vec<u8> = values.iter().map(|v| (v >> (8 * p)) as u8).collect();
                assert_eq!(plane.to_le_bytes().to_vec(), expected, "plane {p}");
            }
        }
    }

    #[test]
    fn a_cleared_buffer_keeps_nothing() {
        let mut typed = EventBuf::new();
        for e in &synthetic::rank_of_four(3) {
            typed.push(e);
        }
        typed.clear();
        assert!(typed.is_empty());
        let mut enc = ChunkEncoder::uncompressed();
        assert_eq!(enc.encode_events(0, 0, 0, &typed).events, 0);
    }
}
