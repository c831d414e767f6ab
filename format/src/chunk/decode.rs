//! Chunk decoding: splitting a decompressed payload into its columns and checking all of it up
//! front ([`split_columns`]), then handing out its events ([`ColumnCursor`], block by block) or
//! only its misc events ([`MiscCursor`]).

use super::columns::*;
use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED, KIND_USER};
use crate::model::*;
use crate::varint::{get_u64, unzigzag};

/// A decoded payload split into its columns, with the counts and plane widths checked against
/// the column lengths. Reading a value at an index below the count cannot fail after this.
#[derive(Debug)]
pub(crate) struct Columns {
    ranges: [(usize, usize); NUM_COLUMNS],
    widths: [usize; NUM_COLUMNS],
    calls: usize,
    completions: usize,
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

impl Columns {
    /// Misc events of the payload (neither calls nor completions).
    pub(crate) fn misc_count(&self) -> usize {
        let (start, end) = self.ranges[COL_KIND];
        end - start - self.calls - self.completions
    }
}

/// A walk over the events of one validated payload that can start over on another payload:
/// readers of a chunk in blocks keep one cursor (and its buffers) for all the blocks.
pub(crate) trait Cursor {
    fn start(columns: &Columns) -> Self;
    /// Starts over at the first event of another payload.
    fn restart(&mut self, columns: &Columns);
    /// Whether a payload with these columns has any event this cursor hands out.
    fn wants(columns: &Columns) -> bool;
    fn next_event(&mut self, p: &[u8], c: &Columns) -> Option<Event>;
}

impl Cursor for MiscCursor {
    fn start(columns: &Columns) -> Self {
        MiscCursor::new(columns)
    }
    fn restart(&mut self, columns: &Columns) {
        *self = MiscCursor::new(columns);
    }
    fn wants(columns: &Columns) -> bool {
        columns.misc_count() > 0
    }
    fn next_event(&mut self, p: &[u8], c: &Columns) -> Option<Event> {
        MiscCursor::next_event(self, p, c)
    }
}

impl Cursor for ColumnCursor {
    fn start(columns: &Columns) -> Self {
        ColumnCursor::new(columns)
    }
    fn restart(&mut self, columns: &Columns) {
        // Field by field: the decoded values' block stays allocated for the next payload.
        self.kind_pos = columns.ranges[COL_KIND].0;
        self.misc_pos = columns.ranges[COL_MISC].0;
        self.call = 0;
        self.call_block_start = 0;
        self.call_block_end = 0;
        self.completion = 0;
        self.completion_block_start = 0;
        self.completion_block_end = 0;
        self.prev_end = 0;
    }
    fn wants(_: &Columns) -> bool {
        true
    }
    #[inline]
    fn next_event(&mut self, p: &[u8], c: &Columns) -> Option<Event> {
        ColumnCursor::next_event(self, p, c)
    }
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
pub(crate) const BLOCK: usize = 256;

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
