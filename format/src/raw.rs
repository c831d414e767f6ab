//! The per-thread in-memory trace buffer the recorder appends to on its hot path.
//!
//! Records are fixed-layout little-endian bytes appended to blocks of [`DEFAULT_BLOCK_SIZE`] bytes.
//! A record never straddles two blocks, and a full block is never moved or copied: growing the
//! buffer allocates one new block, so the cost of an append does not depend on how much is held
//! (a `Vec` doubling would copy the whole trace at unpredictable moments and perturb the timing
//! the recorder is trying to preserve).
//!
//! Records are compact because the buffer's size is what sets how often the program pauses to
//! flush (threshold S): the fixed 55-byte layout of earlier versions made a cheap call cost 3-4×
//! the memory it needs. Layouts (varint = unsigned LEB128, zz = zigzag then varint):
//! - call: kind=1, a presence byte (bit 0 comm, 1 peer, 2 tag, 3 bytes, 4 root, 5 request,
//!   6 receive bytes, 7 call site), then varint func, [varint comm], zz(start - end of the block's
//!   previous call), zz(end - start), varint cost, [zz peer], [zz tag], [varint bytes], [zz root],
//!   [varint request], [varint receive bytes], [varint site]. A field whose bit is clear takes its
//!   usual value: the previous call's comm in this block, [`NO_RANK`], [`NO_TAG`], 0 bytes,
//!   [`NO_RANK`], [`NO_REQUEST`], 0 bytes, [`NO_SITE`]. Times are deltas within a block only, so
//!   every block decodes on its own (a buffer is split and flushed block by block).
//! - completion: kind=2 (3 if cancelled), varint request, zz source, zz tag, varint bytes.
//! - anything else: kind u8, body length u64, body (the misc body of FORMAT.md).

use crate::body::{self, KIND_CALL, KIND_COMPLETION, KIND_COMPLETION_CANCELLED};
use crate::model::*;

/// The most bytes one [`MpiCall`] can take in a [`RawBuf`] (every field present and at its widest).
pub const MAX_CALL_RECORD_LEN: usize = 2 + 3 + 5 + 10 + 10 + 5 + 5 + 5 + 10 + 5 + 10 + 10 + 5;
/// The most bytes one [`Completion`] can take in a [`RawBuf`].
pub const MAX_COMPLETION_RECORD_LEN: usize = 1 + 10 + 5 + 5 + 10;
/// Bytes of the header in front of a misc record's body in a [`RawBuf`].
pub const MISC_RECORD_HEADER_LEN: usize = 9;
/// Size of one block of a [`RawBuf`]. Records bigger than this get a block of their own.
pub const DEFAULT_BLOCK_SIZE: usize = 1 << 20;

const HAS_COMM: u8 = 1;
const HAS_PEER: u8 = 1 << 1;
const HAS_TAG: u8 = 1 << 2;
const HAS_BYTES: u8 = 1 << 3;
const HAS_ROOT: u8 = 1 << 4;
const HAS_REQUEST: u8 = 1 << 5;
const HAS_RECV_BYTES: u8 = 1 << 6;
const HAS_SITE: u8 = 1 << 7;

/// What a call record is encoded against: the previous call of the same block (a block's first
/// call: end 0, communicator 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallContext {
    pub prev_end: u64,
    pub prev_comm: CommId,
}

#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline(always)]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline(always)]
fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes `v` as LEB128 at `p`, returning the bytes written (at most 10).
///
/// # Safety
/// `p` must be valid for writing `varint_len(v)` bytes.
#[inline(always)]
unsafe fn put_varint(p: *mut u8, mut v: u64) -> usize {
    if v < 0x80 {
        // SAFETY: one byte, within the room the caller guaranteed.
        unsafe { p.write(v as u8) };
        return 1;
    }
    if v < 0x4000 {
        // Two bytes in one store (time deltas of calls a few µs apart, most byte counts).
        let two = (v as u16 & 0x7f | 0x80) | ((v >> 7) as u16) << 8;
        // SAFETY: two bytes, within the room the caller guaranteed (varint_len(v) == 2).
        unsafe { p.cast::<[u8; 2]>().write_unaligned(two.to_le_bytes()) };
        return 2;
    }
    let mut i = 0;
    while v >= 0x80 {
        // SAFETY: i < varint_len(v) <= the room the caller guaranteed.
        unsafe { p.add(i).write((v as u8) | 0x80) };
        v >>= 7;
        i += 1;
    }
    // SAFETY: as above, this is the last of the varint's bytes.
    unsafe { p.add(i).write(v as u8) };
    i + 1
}

/// Writes the optional fields of a call record whose bits `present` has, in record order;
/// returns the bytes written.
///
/// # Safety
/// `p` must be valid for writing the varints of all of them (at most 47 bytes).
#[inline(always)]
unsafe fn put_optional_fields(p: *mut u8, present: u8, c: &MpiCall) -> usize {
    let mut n = 0;
    // SAFETY (every write below): the caller guarantees room for all optional fields.
    unsafe {
        if present & HAS_PEER != 0 {
            n += put_varint(p.add(n), zigzag(i64::from(c.peer)));
        }
        if present & HAS_TAG != 0 {
            n += put_varint(p.add(n), zigzag(i64::from(c.tag)));
        }
        if present & HAS_BYTES != 0 {
            n += put_varint(p.add(n), c.bytes);
        }
        if present & HAS_ROOT != 0 {
            n += put_varint(p.add(n), zigzag(i64::from(c.root)));
        }
        if present & HAS_REQUEST != 0 {
            n += put_varint(p.add(n), c.request);
        }
        if present & HAS_RECV_BYTES != 0 {
            n += put_varint(p.add(n), c.recv_bytes);
        }
        if present & HAS_SITE != 0 {
            n += put_varint(p.add(n), u64::from(c.site));
        }
    }
    n
}

/// The presence byte of `c` and the values of its fields in record order.
#[inline(always)]
fn call_fields(c: &MpiCall, ctx: &CallContext) -> (u8, [u64; 12]) {
    let mut present = 0u8;
    if c.comm != ctx.prev_comm {
        present |= HAS_COMM;
    }
    if c.peer != NO_RANK {
        present |= HAS_PEER;
    }
    if c.tag != NO_TAG {
        present |= HAS_TAG;
    }
    if c.bytes != 0 {
        present |= HAS_BYTES;
    }
    if c.root != NO_RANK {
        present |= HAS_ROOT;
    }
    if c.request != NO_REQUEST {
        present |= HAS_REQUEST;
    }
    if c.recv_bytes != 0 {
        present |= HAS_RECV_BYTES;
    }
    if c.site != NO_SITE {
        present |= HAS_SITE;
    }
    let fields = [
        u64::from(c.func),
        u64::from(c.comm),
        zigzag(c.start.wrapping_sub(ctx.prev_end) as i64),
        zigzag(c.end.wrapping_sub(c.start) as i64),
        u64::from(c.cost),
        zigzag(i64::from(c.peer)),
        zigzag(i64::from(c.tag)),
        c.bytes,
        zigzag(i64::from(c.root)),
        c.request,
        c.recv_bytes,
        u64::from(c.site),
    ];
    (present, fields)
}

/// Which of the fields of [`call_fields`] are written, by presence byte.
#[inline(always)]
fn call_field_written(present: u8, index: usize) -> bool {
    match index {
        1 => present & HAS_COMM != 0,
        5 => present & HAS_PEER != 0,
        6 => present & HAS_TAG != 0,
        7 => present & HAS_BYTES != 0,
        8 => present & HAS_ROOT != 0,
        9 => present & HAS_REQUEST != 0,
        10 => present & HAS_RECV_BYTES != 0,
        11 => present & HAS_SITE != 0,
        _ => true,
    }
}

/// Bytes `c` takes in a buffer after a call described by `ctx` (exports that draw the recorder's
/// buffer fill use it; it ignores that each block starts afresh, a few bytes per MiB).
pub fn call_record_len(c: &MpiCall, ctx: &CallContext) -> usize {
    let (present, fields) = call_fields(c, ctx);
    2 + fields
        .iter()
        .enumerate()
        .filter(|(i, _)| call_field_written(present, *i))
        .map(|(_, v)| varint_len(*v))
        .sum::<usize>()
}

/// Bytes `c` takes in a buffer.
pub fn completion_record_len(c: &Completion) -> usize {
    1 + varint_len(c.request)
        + varint_len(zigzag(i64::from(c.source)))
        + varint_len(zigzag(i64::from(c.tag)))
        + varint_len(c.bytes)
}

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
    /// What the next call in `current` is encoded against.
    ctx: CallContext,
    /// The last record when it is a `Polls` run that the next idle poll may extend in place: where
    /// its body starts in `current`, and the run as written there.
    open_poll: Option<(usize, PollRun)>,
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
            block_size: block_size.max(MAX_CALL_RECORD_LEN),
            ctx: CallContext::default(),
            open_poll: None,
        }
    }

    /// Appends one MPI call: one capacity check and a few byte stores in the common case.
    #[inline]
    pub fn push_call(&mut self, c: &MpiCall) {
        self.append_call(c);
    }

    /// [`RawBuf::push_call`], saying whether it allocated a block (the recorder measures that
    /// time).
    ///
    /// The record is written straight into the block: the kind, the presence byte, the four
    /// fields every call has, and then, only when the presence byte says some optional field is
    /// there (most calls have none or one or two), the optional ones.
    #[inline]
    pub fn append_call(&mut self, c: &MpiCall) -> bool {
        let grew = self.current.capacity() - self.current.len() < MAX_CALL_RECORD_LEN;
        if grew {
            self.make_room(MAX_CALL_RECORD_LEN);
        }
        self.open_poll = None;
        let ctx = self.ctx;
        let comm_differs = c.comm != ctx.prev_comm;
        let optional = ((c.peer != NO_RANK) as u8) << 1
            | ((c.tag != NO_TAG) as u8) << 2
            | ((c.bytes != 0) as u8) << 3
            | ((c.root != NO_RANK) as u8) << 4
            | ((c.request != NO_REQUEST) as u8) << 5
            | ((c.recv_bytes != 0) as u8) << 6
            | ((c.site != NO_SITE) as u8) << 7;
        let present = optional | comm_differs as u8;
        let len = self.current.len();
        let rec = &mut self.current.spare_capacity_mut()[..MAX_CALL_RECORD_LEN];
        let p = rec.as_mut_ptr().cast::<u8>();
        // SAFETY: `rec` is MAX_CALL_RECORD_LEN bytes of this block's spare capacity (checked just
        // above, and the slice index panics otherwise); the kind, the presence byte and at most
        // twelve varints of at most their field's width add up to no more than that; `set_len`
        // covers exactly the bytes just written. This is the recorder's hot path: stores straight
        // into the block avoid building the record on the stack and copying it.
        unsafe {
            p.write(KIND_CALL);
            p.add(1).write(present);
            let mut n = 2;
            n += put_varint(p.add(n), u64::from(c.func));
            if comm_differs {
                n += put_varint(p.add(n), u64::from(c.comm));
            }
            n += put_varint(p.add(n), zigzag(c.start.wrapping_sub(ctx.prev_end) as i64));
            n += put_varint(p.add(n), zigzag(c.end.wrapping_sub(c.start) as i64));
            n += put_varint(p.add(n), u64::from(c.cost));
            if optional != 0 {
                n += put_optional_fields(p.add(n), present, c);
            }
            self.current.set_len(len + n);
        }
        self.ctx = CallContext {
            prev_end: c.end,
            prev_comm: c.comm,
        };
        self.events += 1;
        grew
    }

    /// Appends one completion of a request.
    #[inline]
    pub fn push_completion(&mut self, c: &Completion) {
        if self.current.capacity() - self.current.len() < MAX_COMPLETION_RECORD_LEN {
            self.make_room(MAX_COMPLETION_RECORD_LEN);
        }
        self.open_poll = None;
        let len = self.current.len();
        let rec = &mut self.current.spare_capacity_mut()[..MAX_COMPLETION_RECORD_LEN];
        let p = rec.as_mut_ptr().cast::<u8>();
        // SAFETY: as in `push_call`: the kind and four varints fit in the checked spare capacity.
        unsafe {
            p.write(if c.cancelled {
                KIND_COMPLETION_CANCELLED
            } else {
                KIND_COMPLETION
            });
            let mut n = 1;
            n += put_varint(p.add(n), c.request);
            n += put_varint(p.add(n), zigzag(i64::from(c.source)));
            n += put_varint(p.add(n), zigzag(i64::from(c.tag)));
            n += put_varint(p.add(n), c.bytes);
            self.current.set_len(len + n);
        }
        self.events += 1;
    }

    /// Records a poll that found nothing: extends the run that the last record holds when this
    /// poll continues it ([`PollRun::continued_by`]), otherwise starts a run. Returns whether a new
    /// record was written (an extension adds no event and no byte).
    #[inline]
    pub fn push_idle_poll(&mut self, c: &MpiCall) -> bool {
        use body::polls_at as at;
        if let Some((b, run)) = self.open_poll.as_mut()
            && run.continued_by(c)
        {
            run.extend(c);
            let body = &mut self.current[*b..*b + at::LEN];
            for (off, v) in [
                (at::END, run.end),
                (at::COUNT, run.count),
                (at::BUSY, run.busy),
                (at::INNER_COST, run.inner_cost),
            ] {
                body[off..off + 8].copy_from_slice(&v.to_le_bytes());
            }
            body[at::COST..at::COST + 4].copy_from_slice(&run.cost.to_le_bytes());
            return false;
        }
        self.push_event(&Event::Polls(PollRun::of(c)));
        true
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
                self.make_room(MISC_RECORD_HEADER_LEN + body::misc_body_len(other));
                let start = self.current.len();
                self.open_poll = match other {
                    Event::Polls(run) => Some((start + MISC_RECORD_HEADER_LEN, *run)),
                    _ => None,
                };
                self.current.resize(start + MISC_RECORD_HEADER_LEN, 0);
                let kind = body::put_misc_body(&mut self.current, other);
                let body_len = (self.current.len() - start - MISC_RECORD_HEADER_LEN) as u64;
                self.current[start] = kind;
                self.current[start + 1..start + MISC_RECORD_HEADER_LEN]
                    .copy_from_slice(&body_len.to_le_bytes());
                debug_assert_eq!(
                    body_len as usize,
                    body::misc_body_len(other),
                    "size hint out of date"
                );
                self.events += 1;
            }
        }
    }

    /// Ensures `current` has `need` spare bytes without ever reallocating a block that holds records.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, need: usize) {
        if self.current.capacity() - self.current.len() >= need {
            return;
        }
        // Every block decodes on its own: the first call in it is encoded against nothing.
        self.ctx = CallContext::default();
        self.open_poll = None;
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
        self.ctx = CallContext::default();
        self.open_poll = None;
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
            .flat_map(|block| BlockRecords::new(block))
    }

    /// Calls `f` on every record in order. Internal iteration: the encoder's loop body is inlined
    /// into the record decoding, which a chained, flattened iterator prevents.
    #[inline]
    pub(crate) fn for_each_record(&self, mut f: impl FnMut(RawRecord<'_>)) {
        for block in self.full.iter().chain(std::iter::once(&self.current)) {
            for r in BlockRecords::new(block) {
                f(r);
            }
        }
    }

    /// Decodes one block of [`RawBuf::blocks`] on its own (each block is encoded against nothing
    /// before it). `None` when the bytes are not whole records: a block that came from elsewhere
    /// (another process) is checked, not trusted.
    pub fn decode_block(block: &[u8]) -> Option<Vec<Event>> {
        let mut records = BlockRecords::new(block);
        let mut events = Vec::new();
        while records.pos < block.len() {
            events.push(match records.next()? {
                RawRecord::Call(c) => Event::Call(c),
                RawRecord::Completion(c) => Event::Completion(c),
                RawRecord::Misc { kind, body } => body::decode_misc_body(kind, body).ok()?,
            });
        }
        Some(events)
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

struct BlockRecords<'a> {
    block: &'a [u8],
    pos: usize,
    ctx: CallContext,
}

impl<'a> BlockRecords<'a> {
    fn new(block: &'a [u8]) -> Self {
        BlockRecords {
            block,
            pos: 0,
            ctx: CallContext::default(),
        }
    }

    #[inline]
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.block.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    #[inline]
    fn varint_if(&mut self, present: bool, absent: u64) -> Option<u64> {
        if present { self.varint() } else { Some(absent) }
    }

    #[inline]
    fn signed_if(&mut self, present: bool, absent: i32) -> Option<i32> {
        if present {
            i32::try_from(unzigzag(self.varint()?)).ok()
        } else {
            Some(absent)
        }
    }

    fn call(&mut self) -> Option<MpiCall> {
        let present = *self.block.get(self.pos)?;
        self.pos += 1;
        let func = u16::try_from(self.varint()?).ok()?;
        let comm = if present & HAS_COMM != 0 {
            u32::try_from(self.varint()?).ok()?
        } else {
            self.ctx.prev_comm
        };
        let start = self
            .ctx
            .prev_end
            .wrapping_add(unzigzag(self.varint()?) as u64);
        let end = start.wrapping_add(unzigzag(self.varint()?) as u64);
        let cost = u32::try_from(self.varint()?).ok()?;
        let peer = self.signed_if(present & HAS_PEER != 0, NO_RANK)?;
        let tag = self.signed_if(present & HAS_TAG != 0, NO_TAG)?;
        let bytes = self.varint_if(present & HAS_BYTES != 0, 0)?;
        let root = self.signed_if(present & HAS_ROOT != 0, NO_RANK)?;
        let request = self.varint_if(present & HAS_REQUEST != 0, NO_REQUEST)?;
        let recv_bytes = self.varint_if(present & HAS_RECV_BYTES != 0, 0)?;
        let site = u32::try_from(self.varint_if(present & HAS_SITE != 0, 0)?).ok()?;
        self.ctx = CallContext {
            prev_end: end,
            prev_comm: comm,
        };
        Some(MpiCall {
            func,
            start,
            end,
            comm,
            peer,
            tag,
            bytes,
            root,
            request,
            cost,
            recv_bytes,
            site,
        })
    }

    fn completion(&mut self, cancelled: bool) -> Option<Completion> {
        Some(Completion {
            request: self.varint()?,
            source: i32::try_from(unzigzag(self.varint()?)).ok()?,
            tag: i32::try_from(unzigzag(self.varint()?)).ok()?,
            bytes: self.varint()?,
            cancelled,
        })
    }
}

#[inline]
fn le_u64(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or_default())
}

impl<'a> Iterator for BlockRecords<'a> {
    type Item = RawRecord<'a>;

    #[inline]
    fn next(&mut self) -> Option<RawRecord<'a>> {
        let kind = *self.block.get(self.pos)?;
        match kind {
            KIND_CALL => {
                self.pos += 1;
                self.call().map(RawRecord::Call)
            }
            KIND_COMPLETION | KIND_COMPLETION_CANCELLED => {
                self.pos += 1;
                self.completion(kind == KIND_COMPLETION_CANCELLED)
                    .map(RawRecord::Completion)
            }
            _ => {
                let rest = &self.block[self.pos..];
                let len = usize::try_from(le_u64(rest.get(..MISC_RECORD_HEADER_LEN)?, 1)).ok()?;
                let body =
                    rest.get(MISC_RECORD_HEADER_LEN..MISC_RECORD_HEADER_LEN.checked_add(len)?)?;
                self.pos += MISC_RECORD_HEADER_LEN + len;
                Some(RawRecord::Misc { kind, body })
            }
        }
    }
}
