//! The per-thread in-memory trace buffer the recorder appends to on its hot path.
//!
//! Records are fixed-layout little-endian bytes appended to blocks of [`DEFAULT_BLOCK_SIZE`] bytes.
//! A record never straddles two blocks, and a full block is never moved or copied: growing the
//! buffer allocates one new block, so the cost of an append does not depend on how much is held
//! (a `Vec` doubling would copy the whole trace at unpredictable moments and perturb the timing
//! the recorder is trying to preserve).
//!
//! Record layouts (all little-endian, byte offsets):
//! - call, [`CALL_RECORD_LEN`] bytes: kind=1 @0, func u16 @1, comm u32 @3, start u64 @7, end u64 @15,
//!   peer i32 @23, tag i32 @27, bytes u64 @31, root i32 @39, request u64 @43, cost u32 @51.
//! - completion, [`COMPLETION_RECORD_LEN`] bytes: kind=2 (3 if cancelled) @0, request u64 @1,
//!   source i32 @9, tag i32 @13, bytes u64 @17.
//! - anything else: kind u8, body length u64, body (the misc body of FORMAT.md).

use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED};
use crate::model::*;

/// Bytes one [`MpiCall`] occupies in a [`RawBuf`].
pub const CALL_RECORD_LEN: usize = 55;
/// Bytes one [`Completion`] occupies in a [`RawBuf`].
pub const COMPLETION_RECORD_LEN: usize = 25;
/// Bytes of the header in front of a misc record's body in a [`RawBuf`].
pub const MISC_RECORD_HEADER_LEN: usize = 9;
/// Size of one block of a [`RawBuf`]. Records bigger than this get a block of their own.
pub const DEFAULT_BLOCK_SIZE: usize = 1 << 20;

/// A per-thread trace buffer. See the module documentation for the layout.
#[derive(Debug)]
pub struct RawBuf {
    /// Full blocks, oldest first. Never touched by appends.
    full: Vec<Vec<u8>>,
    /// The block appends go to. Its capacity is fixed once allocated.
    current: Vec<u8>,
    /// Record bytes held in `full`.
    full_bytes: usize,
    full_capacity: usize,
    /// Events in each block of `full`, so the buffer can be split at a block boundary without
    /// walking its records.
    full_events: Vec<u64>,
    events: u64,
    block_size: usize,
}

impl Default for RawBuf {
    fn default() -> Self {
        Self::new()
    }
}

/// One record as held in a buffer, without materialising misc events.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RawRecord<'a> {
    Call(MpiCall),
    Completion(Completion),
    Misc { kind: u8, body: &'a [u8] },
}

impl RawBuf {
    /// An empty buffer. Allocates nothing until the first append.
    pub fn new() -> Self {
        Self::with_block_size(DEFAULT_BLOCK_SIZE)
    }

    /// An empty buffer with blocks of `block_size` bytes (at least one call record).
    pub fn with_block_size(block_size: usize) -> Self {
        RawBuf {
            full: Vec::new(),
            current: Vec::new(),
            full_bytes: 0,
            full_capacity: 0,
            full_events: Vec::new(),
            events: 0,
            block_size: block_size.max(CALL_RECORD_LEN),
        }
    }

    /// Appends one MPI call: one capacity check and a few stores in the common case.
    #[inline]
    pub fn push_call(&mut self, c: &MpiCall) {
        if self.current.capacity() - self.current.len() < CALL_RECORD_LEN {
            self.make_room(CALL_RECORD_LEN);
        }
        let len = self.current.len();
        let rec = &mut self.current.spare_capacity_mut()[..CALL_RECORD_LEN];
        let p = rec.as_mut_ptr().cast::<u8>();
        // SAFETY: `rec` is 55 bytes of this block's spare capacity (checked just above, and the
        // slice index panics otherwise), every offset below plus its field size is within those
        // 55 bytes, unaligned writes need no alignment, and `set_len` covers exactly the bytes
        // just initialised. This is the recorder's hot path: stores straight into the block
        // avoid building the record on the stack and copying it.
        unsafe {
            p.write(KIND_CALL);
            p.add(1)
                .cast::<[u8; 2]>()
                .write_unaligned(c.func.to_le_bytes());
            p.add(3)
                .cast::<[u8; 4]>()
                .write_unaligned(c.comm.to_le_bytes());
            p.add(7)
                .cast::<[u8; 8]>()
                .write_unaligned(c.start.to_le_bytes());
            p.add(15)
                .cast::<[u8; 8]>()
                .write_unaligned(c.end.to_le_bytes());
            p.add(23)
                .cast::<[u8; 4]>()
                .write_unaligned(c.peer.to_le_bytes());
            p.add(27)
                .cast::<[u8; 4]>()
                .write_unaligned(c.tag.to_le_bytes());
            p.add(31)
                .cast::<[u8; 8]>()
                .write_unaligned(c.bytes.to_le_bytes());
            p.add(39)
                .cast::<[u8; 4]>()
                .write_unaligned(c.root.to_le_bytes());
            p.add(43)
                .cast::<[u8; 8]>()
                .write_unaligned(c.request.to_le_bytes());
            p.add(51)
                .cast::<[u8; 4]>()
                .write_unaligned(c.cost.to_le_bytes());
            self.current.set_len(len + CALL_RECORD_LEN);
        }
        self.events += 1;
    }

    /// Appends one completion of a request.
    #[inline]
    pub fn push_completion(&mut self, c: &Completion) {
        let mut rec = [0u8; COMPLETION_RECORD_LEN];
        rec[0] = if c.cancelled {
            KIND_COMPLETION_CANCELLED
        } else {
            KIND_COMPLETION
        };
        rec[1..9].copy_from_slice(&c.request.to_le_bytes());
        rec[9..13].copy_from_slice(&c.source.to_le_bytes());
        rec[13..17].copy_from_slice(&c.tag.to_le_bytes());
        rec[17..25].copy_from_slice(&c.bytes.to_le_bytes());
        self.append(&rec);
    }

    /// Appends any event, including user payloads of any size, definitions and markers.
    pub fn push_event(&mut self, e: &Event) {
        match e {
            Event::Call(c) => self.push_call(c),
            Event::Completion(c) => self.push_completion(c),
            other => {
                // The size is only reserved ahead (so the block need not grow); the length
                // field is written from what the encoder actually produced, the one source of
                // truth for a body's layout.
                self.make_room(MISC_RECORD_HEADER_LEN + misc_body_len(other));
                let start = self.current.len();
                self.current.resize(start + MISC_RECORD_HEADER_LEN, 0);
                let kind = body::put_misc_body(&mut self.current, other);
                let body_len = (self.current.len() - start - MISC_RECORD_HEADER_LEN) as u64;
                self.current[start] = kind;
                self.current[start + 1..start + MISC_RECORD_HEADER_LEN]
                    .copy_from_slice(&body_len.to_le_bytes());
                debug_assert_eq!(
                    body_len as usize,
                    misc_body_len(other),
                    "size hint out of date"
                );
                self.events += 1;
            }
        }
    }

    #[inline]
    fn append(&mut self, rec: &[u8]) {
        if self.current.capacity() - self.current.len() < rec.len() {
            self.make_room(rec.len());
        }
        self.current.extend_from_slice(rec);
        self.events += 1;
    }

    /// Ensures `current` has `need` spare bytes without ever reallocating a block that holds records.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, need: usize) {
        if self.current.capacity() - self.current.len() >= need {
            return;
        }
        if self.current.is_empty() {
            // An empty block may simply be replaced; nothing is copied.
            self.current = Vec::with_capacity(need.max(self.block_size));
            return;
        }
        let fresh = Vec::with_capacity(need.max(self.block_size));
        let done = std::mem::replace(&mut self.current, fresh);
        self.full_bytes += done.len();
        self.full_capacity += done.capacity();
        let in_full: u64 = self.full_events.iter().sum();
        self.full_events.push(self.events - in_full);
        self.full.push(done);
    }

    /// Moves the oldest whole blocks, at most `max_bytes` of records (but at least one block),
    /// into a buffer of their own; no record is copied. Taking everything leaves this buffer
    /// empty. A flush encodes a big buffer piece by piece this way, so compressing it never needs
    /// a second copy of the whole buffer.
    pub fn split_front(&mut self, max_bytes: usize) -> RawBuf {
        let mut n = 0;
        let mut bytes = 0;
        while n < self.full.len() && (n == 0 || bytes + self.full[n].len() <= max_bytes) {
            bytes += self.full[n].len();
            n += 1;
        }
        let rest_fits = n == 0 || bytes + self.current.len() <= max_bytes;
        if n == self.full.len() && rest_fits {
            let empty = RawBuf::with_block_size(self.block_size);
            return std::mem::replace(self, empty);
        }
        let blocks: Vec<Vec<u8>> = self.full.drain(..n).collect();
        let counts: Vec<u64> = self.full_events.drain(..n).collect();
        let events: u64 = counts.iter().sum();
        let capacity: usize = blocks.iter().map(Vec::capacity).sum();
        self.full_bytes -= bytes;
        self.full_capacity -= capacity;
        self.events -= events;
        let mut front = RawBuf::with_block_size(self.block_size);
        front.full_events = counts;
        front.full = blocks;
        front.full_bytes = bytes;
        front.full_capacity = capacity;
        front.events = events;
        front
    }

    /// Exact bytes held by records (what the flush threshold S counts).
    #[inline]
    pub fn bytes(&self) -> usize {
        self.full_bytes + self.current.len()
    }

    /// Bytes allocated for records, including the unused tail of the current block.
    pub fn capacity_bytes(&self) -> usize {
        self.full_capacity + self.current.capacity()
    }

    /// Number of events held.
    #[inline]
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Drops every record. Keeps one standard-size block so the next appends do not allocate.
    pub fn clear(&mut self) {
        let keep = if self.current.capacity() == self.block_size {
            Some(std::mem::take(&mut self.current))
        } else {
            self.full
                .drain(..)
                .find(|b| b.capacity() == self.block_size)
        };
        self.full.clear();
        self.full_events.clear();
        self.current = keep.unwrap_or_default();
        self.current.clear();
        self.full_bytes = 0;
        self.full_capacity = 0;
        self.events = 0;
    }

    /// Decodes the held events in order, without copying the buffer.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        // A body this buffer encoded always decodes; stopping (rather than inventing an event)
        // keeps the iterator total without ever yielding wrong data.
        self.records().map_while(|r| match r {
            RawRecord::Call(c) => Some(Event::Call(c)),
            RawRecord::Completion(c) => Some(Event::Completion(c)),
            RawRecord::Misc { kind, body } => body::decode_misc_body(kind, body).ok(),
        })
    }

    /// The held records in order, misc bodies borrowed.
    pub(crate) fn records(&self) -> impl Iterator<Item = RawRecord<'_>> + '_ {
        self.full
            .iter()
            .chain(std::iter::once(&self.current))
            .flat_map(|block| BlockRecords { block, pos: 0 })
    }

    /// Calls `f` on every record in order. Internal iteration: the encoder's loop body is inlined
    /// into the record decoding, which a chained, flattened iterator prevents.
    #[inline]
    pub(crate) fn for_each_record(&self, mut f: impl FnMut(RawRecord<'_>)) {
        for block in self.full.iter().chain(std::iter::once(&self.current)) {
            for r in (BlockRecords { block, pos: 0 }) {
                f(r);
            }
        }
    }

    /// The blocks holding records, in order (each a whole number of records).
    pub fn blocks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.full
            .iter()
            .chain(std::iter::once(&self.current))
            .map(|b| b.as_slice())
            .filter(|b| !b.is_empty())
    }
}

/// The body size the encoder will write, to reserve room ahead (checked in debug builds).
fn misc_body_len(e: &Event) -> usize {
    match e {
        Event::Call(_) | Event::Completion(_) => 0,
        Event::User(u) => 12 + u.payload.len(),
        Event::Region(_) => 13,
        Event::Suspension(_) => 4 * 8 + 1 + 5 * 8 + 3 * 8,
        Event::CommDef { members, .. } => 4 + 4 * members.len(),
        Event::Clock(_) => 25,
        Event::StringDef { text, .. } => 4 + text.len(),
        Event::FunctionDef { name, .. } => 2 + name.len(),
        Event::Marker(m) => match m {
            Marker::LocalFlush { .. } | Marker::Lost { .. } => 17,
            Marker::RecordingStopped { .. }
            | Marker::InitDone { .. }
            | Marker::FinalizeStart { .. } => 9,
            Marker::AbnormalEnd { .. } => 13,
            Marker::Stuck { .. } => 31,
            Marker::Compressed { .. } | Marker::MemoryLow { .. } => 25,
        },
        Event::RankInfo(r) => {
            12 + 2 + body::str16_len(&r.host) + 2 + body::str16_len(&r.mpi_library) + r.run_id.len()
        }
        Event::Writer(w) => 7 + w.reason.len(),
        Event::RemoteGroup { members, .. } => 4 + 4 * members.len(),
        Event::WinDef { .. } => 8,
        Event::Memory(_) => 65,
        Event::Threshold(_) => 29,
    }
}

struct BlockRecords<'a> {
    block: &'a [u8],
    pos: usize,
}

#[inline]
fn le_u64(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or_default())
}

#[inline]
fn le_u32(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or_default())
}

impl<'a> Iterator for BlockRecords<'a> {
    type Item = RawRecord<'a>;

    #[inline]
    fn next(&mut self) -> Option<RawRecord<'a>> {
        let rest = self.block.get(self.pos..)?;
        let kind = *rest.first()?;
        match kind {
            KIND_CALL => {
                let r = rest.get(..CALL_RECORD_LEN)?;
                self.pos += CALL_RECORD_LEN;
                Some(RawRecord::Call(MpiCall {
                    func: u16::from_le_bytes([r[1], r[2]]),
                    comm: le_u32(r, 3),
                    start: le_u64(r, 7),
                    end: le_u64(r, 15),
                    peer: le_u32(r, 23) as i32,
                    tag: le_u32(r, 27) as i32,
                    bytes: le_u64(r, 31),
                    root: le_u32(r, 39) as i32,
                    request: le_u64(r, 43),
                    cost: le_u32(r, 51),
                }))
            }
            KIND_COMPLETION | KIND_COMPLETION_CANCELLED => {
                let r = rest.get(..COMPLETION_RECORD_LEN)?;
                self.pos += COMPLETION_RECORD_LEN;
                Some(RawRecord::Completion(Completion {
                    request: le_u64(r, 1),
                    source: le_u32(r, 9) as i32,
                    tag: le_u32(r, 13) as i32,
                    bytes: le_u64(r, 17),
                    cancelled: kind == KIND_COMPLETION_CANCELLED,
                }))
            }
            _ => {
                let len = usize::try_from(le_u64(rest.get(..MISC_RECORD_HEADER_LEN)?, 1)).ok()?;
                let body =
                    rest.get(MISC_RECORD_HEADER_LEN..MISC_RECORD_HEADER_LEN.checked_add(len)?)?;
                self.pos += MISC_RECORD_HEADER_LEN + len;
                Some(RawRecord::Misc { kind, body })
            }
        }
    }
}
