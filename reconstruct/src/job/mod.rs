//! `mpirun -np N evenflush reconstruct`: the reconstruction split over the processes of an MPI
//! job. When the trace allows it (whatever the model and repair), no process matches for the
//! others: every process matches its own ranks against proxy lanes of the others' ([`split`]).
//! Otherwise (`HbContext::unsplittable`: threads, windows, intercommunicators), as follows.
//! Each process owns a contiguous block of the trace's ranks ([`owner_of`]), reads their
//! metadata, and does for them what a worker thread does in one process (decode every chunk once,
//! map its times, encode and write the rank's output). Process 0 also runs the matcher and writes
//! the summary; what matching needs of a rank it does not own (its communication calls, or every
//! event with the repair on) comes to it as the owner's step results, asked for a few steps ahead
//! of need so that owners work while it matches, and sent without waiting for it to receive them.
//!
//! The protocol, all messages to or from process 0:
//! - `METAS` (owner → 0): the metadata of the ranks it owns ([`encode_metas`]), read by the
//!   owner alone, so no process reads more of the trace than its own ranks;
//! - `ALL_METAS` (0 → owner): every rank's, in trace order; it also says the output directory is
//!   prepared, so owners may create their files;
//! - `NEED r` (0 → owner): take the next step of rank `r` and send it;
//! - `STEP` (owner → 0): the batches of one step of one rank, per lane (see [`StepMessage`]);
//! - `FINISH` (0 → owner): nothing more will be asked; reply with `MARKS` and stop;
//! - `MARKS` (owner → 0): the first `InitDone`/`FinalizeStart`/`AbnormalEnd` marks of the owner's lanes;
//! - `FAILED` (owner → 0): the owner cannot go on, with the reason; it then waits for `FINISH`.
//!
//! The output is byte-identical to a one-process run: a rank's file is written by one process,
//! step by step in lane order, and output chunks are cut by event counts alone; the matcher sees
//! the same events per lane in the same order. Process 0 always sends `FINISH` before it returns,
//! even after an error, so no owner waits forever.

use std::path::PathBuf;

use format::{ClockCalibration, ClockSource, Event, RawBuf};

use crate::mapping::{LaneMarks, Mark};
use trace::Skipped;
use trace::definitions::RankMeta;

pub(crate) mod roles;

/// Byte messages between the processes of the job. The binary implements it over MPI (the crate
/// links no MPI), tests over channels between threads.
pub trait Transport {
    /// This process's number, 0..size.
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn send(&self, dest: usize, tag: u32, bytes: &[u8]) -> Result<(), String>;
    /// A send that may complete later, so the sender goes on working while the receiver is
    /// busy; it keeps `bytes` until then. Ordered with every other send to `dest`.
    fn send_later(&self, dest: usize, tag: u32, bytes: Vec<u8>) -> Result<(), String> {
        self.send(dest, tag, &bytes)
    }
    /// Sends of [`Transport::send_later`] not complete yet, after retiring those that are,
    /// without waiting. A caller that keeps it small never waits in `send_later`.
    fn sends_pending(&self) -> Result<usize, String> {
        Ok(0)
    }
    /// Waits until every [`Transport::send_later`] completed.
    fn complete_sends(&self) -> Result<(), String> {
        Ok(())
    }
    /// The next message from `source` (`None`: from anyone), whatever its tag: (sender, tag,
    /// bytes). Messages from one sender arrive in the order it sent them.
    fn recv(&self, source: Option<usize>) -> Result<(usize, u32, Vec<u8>), String>;
    /// The next message from anyone if one has arrived, without waiting.
    fn try_recv(&self) -> Result<Option<(usize, u32, Vec<u8>)>, String>;
}

/// A message as received: (sender, tag, bytes).
pub(crate) type Message = (usize, u32, Vec<u8>);

/// A transport whose messages are taken by phase: a process still finishing one phase (a split
/// pass) hears from one already in the next, and keeps those messages for when it gets there.
/// What a phase wants of one sender must stay wanted until it wants nothing more of it, so each
/// sender's messages are still taken in the order sent.
pub(crate) struct Mailbox<'t> {
    pub job: &'t dyn Transport,
    early: std::cell::RefCell<std::collections::VecDeque<Message>>,
}

impl<'t> Mailbox<'t> {
    pub(crate) fn new(job: &'t dyn Transport) -> Self {
        Mailbox {
            job,
            early: Default::default(),
        }
    }

    fn kept(&self, wanted: &impl Fn(usize, u32) -> bool) -> Option<Message> {
        let mut early = self.early.borrow_mut();
        let at = early.iter().position(|m| wanted(m.0, m.1))?;
        early.remove(at)
    }

    /// The next message `wanted(sender, tag)` accepts, waiting for it.
    pub(crate) fn recv(&self, wanted: impl Fn(usize, u32) -> bool) -> Result<Message, String> {
        if let Some(m) = self.kept(&wanted) {
            return Ok(m);
        }
        loop {
            let m = self.job.recv(None)?;
            if wanted(m.0, m.1) {
                return Ok(m);
            }
            self.early.borrow_mut().push_back(m);
        }
    }

    /// The next message `wanted` accepts, if one has arrived.
    pub(crate) fn try_recv(
        &self,
        wanted: impl Fn(usize, u32) -> bool,
    ) -> Result<Option<Message>, String> {
        if let Some(m) = self.kept(&wanted) {
            return Ok(Some(m));
        }
        while let Some(m) = self.job.try_recv()? {
            if wanted(m.0, m.1) {
                return Ok(Some(m));
            }
            self.early.borrow_mut().push_back(m);
        }
        Ok(None)
    }
}

pub(crate) const TAG_NEED: u32 = 1;
pub(crate) const TAG_STEP: u32 = 2;
pub(crate) const TAG_FINISH: u32 = 3;
pub(crate) const TAG_MARKS: u32 = 4;
pub(crate) const TAG_FAILED: u32 = 5;
pub(crate) const TAG_METAS: u32 = 6;
pub(crate) const TAG_ALL_METAS: u32 = 7;
/// A pass without a central matcher ([`split`]): batches of proxy lanes for the receiver, then
/// each process's result for process 0.
pub const TAG_PROXIES: u32 = 8;
pub(crate) const TAG_SPLIT_DONE: u32 = 9;
/// A split pass: every lane of the sender waits ([`StuckReport`], to process 0)...
pub(crate) const TAG_STUCK: u32 = 10;
/// ...process 0 found the whole job waiting, and the receiver forces its first open lane...
pub(crate) const TAG_FORCE: u32 = 11;
/// ...and the sender sends nothing more in this pass.
pub(crate) const TAG_END: u32 = 12;

/// A split replay: what each process learned of the trace, to every other (they merge by a
/// minimum, so every process replays with the tables one process would learn).
pub(crate) const TAG_ESTIMATES: u32 = 13;
/// A split pass that moved waits: the metadata of the sender's ranks of the written output, to
/// every other process, for the check of the output (each reads only its own ranks' files).
pub(crate) const TAG_OUTPUT_METAS: u32 = 14;
/// A split pass that moved waits: whether the sender's count of the violations in its output
/// is exact (one byte, 1 or 0). Only when every process's is does the job skip the check.
pub(crate) const TAG_OUTPUT_COUNTED: u32 = 15;

pub(crate) fn encode_estimates(e: &crate::hb::Estimates) -> Vec<u8> {
    let mut w = Wire(Vec::new());
    w.u64(e.intrinsic.len() as u64);
    for (&(func, size), &v) in &e.intrinsic {
        w.u32(func);
        w.u8(size);
        w.u64(v);
    }
    w.u64(e.transfer.len() as u64);
    for (&(from, to, size), &v) in &e.transfer {
        w.u32(from);
        w.u32(to);
        w.u8(size);
        w.u64(v as u64);
    }
    w.u64(e.exit.len() as u64);
    for (&(func, size, members, mine, last), &v) in &e.exit {
        w.u32(func);
        w.u8(size);
        w.u8(members);
        w.u32(mine);
        w.u32(last);
        w.u64(v as u64);
    }
    for s in e.samples {
        w.u64(s);
    }
    w.0
}

pub(crate) fn decode_estimates(bytes: &[u8]) -> Result<crate::hb::Estimates, String> {
    let mut c = Cursor { bytes, pos: 0 };
    let mut e = crate::hb::Estimates::default();
    for _ in 0..c.len()? {
        let class = (c.u32()?, c.u8()?);
        e.intrinsic.insert(class, c.u64()?);
    }
    for _ in 0..c.len()? {
        let class = (c.u32()?, c.u32()?, c.u8()?);
        e.transfer.insert(class, c.u64()? as i64);
    }
    for _ in 0..c.len()? {
        let class = (c.u32()?, c.u8()?, c.u8()?, c.u32()?, c.u32()?);
        e.exit.insert(class, c.u64()? as i64);
    }
    for s in &mut e.samples {
        *s = c.u64()?;
    }
    c.end()?;
    Ok(e)
}

/// What a process of a split pass tells process 0 when every lane it runs waits: how many proxy
/// messages it sent to and received from each process, and its own wait that began first. When
/// every process waits and each count sent equals the count its receiver took, no message is in
/// flight that could move anyone: only then is a lane forced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StuckReport {
    /// (recorded start of the call it waits at, lane number).
    pub first_wait: Option<(u64, u64)>,
    /// Its pass ended: it waits for nothing.
    pub done: bool,
    pub sent: Vec<u64>,
    pub received: Vec<u64>,
}

impl StuckReport {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Wire(Vec::new());
        w.u8(u8::from(self.first_wait.is_some()));
        let (since, lane) = self.first_wait.unwrap_or_default();
        w.u64(since);
        w.u64(lane);
        w.u8(u8::from(self.done));
        w.u64(self.sent.len() as u64);
        for (&s, &r) in self.sent.iter().zip(&self.received) {
            w.u64(s);
            w.u64(r);
        }
        w.0
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<StuckReport, String> {
        let mut c = Cursor { bytes, pos: 0 };
        let waits = c.u8()? != 0;
        let first = (c.u64()?, c.u64()?);
        let done = c.u8()? != 0;
        let n = c.len()?;
        let (mut sent, mut received) = (Vec::new(), Vec::new());
        for _ in 0..n {
            sent.push(c.u64()?);
            received.push(c.u64()?);
        }
        c.end()?;
        Ok(StuckReport {
            first_wait: waits.then_some(first),
            done,
            sent,
            received,
        })
    }
}

pub(crate) mod split;

/// The process that owns the rank at `rank_idx` of `ranks`: contiguous blocks, so neighbours (who
/// talk most) share a process and each process's output files are next to each other. Process 0
/// also runs the matcher, which takes about a third of the work of a rank's events in one
/// process, so its block is a third of the others' (with 2 processes, a quarter of the ranks).
pub fn owner_of(rank_idx: usize, ranks: usize, processes: usize) -> usize {
    if ranks == 0 || processes <= 1 {
        return 0;
    }
    // Weights: 1 for process 0, 3 for each other; the rank's place on the weighted line.
    let total = 1 + 3 * (processes - 1);
    let at = rank_idx * total / ranks;
    if at < 1 {
        0
    } else {
        (1 + (at - 1) / 3).min(processes - 1)
    }
}

/// One lane's part of a step: the events the matcher needs, each with its index in the lane and
/// the time the mapping removed before it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct LaneBatch {
    pub lane: u32,
    pub finished: bool,
    pub indices: Vec<u64>,
    pub removed: Vec<u64>,
    /// A streamed replay's proxies: the replay's move of the lane at each event (empty: none).
    pub shifts: Vec<i64>,
    pub events: Vec<Event>,
}

/// A step of one rank as it travels from its owner to process 0.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct StepMessage {
    pub rank_idx: u32,
    /// Events the step read (all of them, not only those sent), for the progress bar.
    pub events_read: u64,
    pub lanes: Vec<LaneBatch>,
}

/// A little-endian writer and reader: the messages are between processes of one job, built from
/// one binary, so nothing beyond checked lengths is needed.
struct Wire(Vec<u8>);

impl Wire {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("message truncated at byte {}", self.pos))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn len(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "length out of range".to_string())
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.len()?;
        self.take(n)
    }
    fn end(&self) -> Result<(), String> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(format!(
                "{} bytes left over in a message",
                self.bytes.len() - self.pos
            ))
        }
    }
}

impl StepMessage {
    /// Events travel in the recorder's own buffer encoding ([`RawBuf`]), a few bytes each.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Wire(Vec::new());
        w.u32(self.rank_idx);
        w.u64(self.events_read);
        w.u32(self.lanes.len() as u32);
        for lane in &self.lanes {
            w.u32(lane.lane);
            w.u8(u8::from(lane.finished));
            w.u64(lane.events.len() as u64);
            for (&i, &r) in lane.indices.iter().zip(&lane.removed) {
                w.u64(i);
                w.u64(r);
            }
            w.u64(lane.shifts.len() as u64);
            for &s in &lane.shifts {
                w.u64(s as u64);
            }
            put_events(&mut w, &lane.events);
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<StepMessage, String> {
        let mut c = Cursor { bytes, pos: 0 };
        let rank_idx = c.u32()?;
        let events_read = c.u64()?;
        let n = c.u32()? as usize;
        let mut lanes = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let lane = c.u32()?;
            let finished = c.u8()? != 0;
            let count = c.len()?;
            let mut indices = Vec::with_capacity(count.min(1 << 20));
            let mut removed = Vec::with_capacity(count.min(1 << 20));
            for _ in 0..count {
                indices.push(c.u64()?);
                removed.push(c.u64()?);
            }
            let shift_count = c.len()?;
            if shift_count != 0 && shift_count != count {
                return Err(format!(
                    "lane {lane}: {shift_count} shifts for {count} events"
                ));
            }
            let shifts = (0..shift_count)
                .map(|_| c.u64().map(|v| v as i64))
                .collect::<Result<Vec<i64>, String>>()?;
            let events = get_events(&mut c).map_err(|e| format!("lane {lane}: {e}"))?;
            if events.len() != count {
                return Err(format!(
                    "lane {lane}: {} events for {count} indices",
                    events.len()
                ));
            }
            lanes.push(LaneBatch {
                lane,
                finished,
                indices,
                removed,
                shifts,
                events,
            });
        }
        c.end()?;
        Ok(StepMessage {
            rank_idx,
            events_read,
            lanes,
        })
    }
}

/// One rank's metadata as it travels: what the first pass read from the rank's files (header
/// clock, chunk counts, damage) and the events [`RankMeta::see`] took, which the receiver feeds
/// through the same function, so every process builds the same metadata as a one-process scan.
pub(crate) struct MetaRecord<'a> {
    pub rank_idx: usize,
    pub meta: &'a RankMeta,
    /// (stream, event), in the order the scan saw them.
    pub kept: &'a [(u32, Event)],
}

/// Events in the recorder's own buffer encoding ([`RawBuf`]), a few bytes each.
fn put_events<'e>(w: &mut Wire, events: impl IntoIterator<Item = &'e Event>) {
    let mut raw = RawBuf::new();
    for e in events {
        raw.push_event(e);
    }
    let blocks: Vec<&[u8]> = raw.blocks().collect();
    w.u64(raw.events());
    w.u64(blocks.len() as u64);
    for b in blocks {
        w.bytes(b);
    }
}

fn get_events(c: &mut Cursor<'_>) -> Result<Vec<Event>, String> {
    let count = c.len()?;
    let blocks = c.len()?;
    let mut events = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..blocks {
        events.extend(RawBuf::decode_block(c.bytes()?).ok_or("events do not decode")?);
    }
    if events.len() != count {
        return Err(format!("{} events where {count} were sent", events.len()));
    }
    Ok(events)
}

/// The body of a `METAS` or `ALL_METAS` message.
pub(crate) fn encode_metas(records: &[MetaRecord<'_>]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut w = Wire(Vec::new());
    w.u64(records.len() as u64);
    for r in records {
        let m = r.meta;
        w.u64(r.rank_idx as u64);
        w.u32(m.rank);
        w.u64(m.clock.ticks_per_sec.to_bits());
        w.u64(m.clock.tick_at_epoch);
        w.u64(m.clock.realtime_ns);
        w.u8(m.clock.source as u8);
        w.u32(u32::from(m.clock.read_ticks));
        w.u64(m.events);
        w.u64(m.streams.len() as u64);
        for &s in &m.streams {
            w.u32(s);
        }
        w.u64(m.skipped.len() as u64);
        for k in &m.skipped {
            w.bytes(k.file.as_os_str().as_bytes());
            w.u64(k.offset);
            w.bytes(k.what.as_bytes());
        }
        w.u64(r.kept.len() as u64);
        for (stream, _) in r.kept {
            w.u32(*stream);
        }
        put_events(&mut w, r.kept.iter().map(|(_, e)| e));
    }
    w.0
}

/// The events a rank's metadata was built from, each with its stream.
pub(crate) type KeptEvents = Vec<(u32, Event)>;

/// The metadata of the ranks `ranks` (indices into `trace.ranks`), read on `threads` threads,
/// each with the events it was built from (what travels to the other processes).
pub(crate) fn scan_ranks(
    trace: &trace::Trace,
    ranks: &[usize],
    threads: usize,
) -> Result<Vec<DecodedMeta>, trace::TraceError> {
    trace::parallel::map_indexed(ranks.len(), trace::parallel::threads(threads), |k| {
        let mut kept = Vec::new();
        trace::scan::scan_rank_keeping(&trace.ranks[ranks[k]], |stream, e| {
            kept.push((stream, e.clone()));
        })
        .map(|meta| (ranks[k], meta, kept))
    })
    .into_iter()
    .collect()
}

/// What [`encode_metas`] takes of ranks' scanned metadata.
pub(crate) fn meta_records(scanned: &[DecodedMeta]) -> Vec<MetaRecord<'_>> {
    scanned
        .iter()
        .map(|(rank_idx, meta, kept)| MetaRecord {
            rank_idx: *rank_idx,
            meta,
            kept,
        })
        .collect()
}

/// A rank's metadata as received: (rank index, metadata, the events it was built from, which
/// process 0 passes on).
pub(crate) type DecodedMeta = (usize, RankMeta, KeptEvents);

/// Rebuilds the metadata of [`encode_metas`].
pub(crate) fn decode_metas(bytes: &[u8]) -> Result<Vec<DecodedMeta>, String> {
    use std::os::unix::ffi::OsStringExt;
    let mut c = Cursor { bytes, pos: 0 };
    let n = c.len()?;
    let mut out = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let rank_idx = c.len()?;
        let mut meta = RankMeta {
            rank: c.u32()?,
            ..RankMeta::default()
        };
        meta.clock = ClockCalibration {
            ticks_per_sec: f64::from_bits(c.u64()?),
            tick_at_epoch: c.u64()?,
            realtime_ns: c.u64()?,
            source: match c.u8()? {
                0 => ClockSource::Tsc,
                1 => ClockSource::Monotonic,
                2 => ClockSource::Virtual,
                other => return Err(format!("clock source {other}")),
            },
            read_ticks: u16::try_from(c.u32()?).map_err(|_| "clock read cost past u16")?,
        };
        meta.events = c.u64()?;
        for _ in 0..c.len()? {
            meta.streams.insert(c.u32()?);
        }
        for _ in 0..c.len()? {
            let file = PathBuf::from(std::ffi::OsString::from_vec(c.bytes()?.to_vec()));
            let offset = c.u64()?;
            let what = String::from_utf8_lossy(c.bytes()?).into_owned();
            meta.skipped.push(Skipped { file, offset, what });
        }
        let kept_count = c.len()?;
        let mut streams = Vec::with_capacity(kept_count.min(1 << 20));
        for _ in 0..kept_count {
            streams.push(c.u32()?);
        }
        let events = get_events(&mut c)?;
        if events.len() != kept_count {
            return Err(format!(
                "rank {}: {} events for {kept_count} streams",
                meta.rank,
                events.len()
            ));
        }
        let kept: Vec<(u32, Event)> = streams.into_iter().zip(events).collect();
        for (stream, e) in &kept {
            meta.see(*stream, e);
        }
        out.push((rank_idx, meta, kept));
    }
    c.end()?;
    Ok(out)
}

pub(crate) fn encode_need(rank_idx: usize) -> Vec<u8> {
    (rank_idx as u32).to_le_bytes().to_vec()
}

pub(crate) fn decode_need(bytes: &[u8]) -> Result<usize, String> {
    let mut c = Cursor { bytes, pos: 0 };
    let r = c.u32()? as usize;
    c.end()?;
    Ok(r)
}

fn put_mark(w: &mut Wire, m: &Option<Mark>) {
    match m {
        None => w.u8(0),
        Some(m) => {
            w.u8(1);
            w.u64(m.global.to_bits());
            w.u64(m.collapsed.to_bits());
            w.u64(m.dp_ns.to_bits());
            w.u64(m.polls_dp_ns.to_bits());
            w.u64(m.reads_ns.to_bits());
            w.u64(m.mapped);
            w.u64(m.shift_ns.to_bits());
        }
    }
}

fn get_mark(c: &mut Cursor<'_>) -> Result<Option<Mark>, String> {
    if c.u8()? == 0 {
        return Ok(None);
    }
    Ok(Some(Mark {
        global: f64::from_bits(c.u64()?),
        collapsed: f64::from_bits(c.u64()?),
        dp_ns: f64::from_bits(c.u64()?),
        polls_dp_ns: f64::from_bits(c.u64()?),
        reads_ns: f64::from_bits(c.u64()?),
        mapped: c.u64()?,
        shift_ns: f64::from_bits(c.u64()?),
    }))
}

/// The marks of an owner's lanes, by global lane number; floats travel as their bits, so the
/// summary is the same as one process's.
pub(crate) fn encode_marks(marks: &[(u32, LaneMarks)]) -> Vec<u8> {
    let mut w = Wire(Vec::new());
    w.u64(marks.len() as u64);
    for (lane, m) in marks {
        w.u32(*lane);
        put_mark(&mut w, &m.init);
        put_mark(&mut w, &m.finalize);
        put_mark(&mut w, &m.abnormal);
    }
    w.0
}

pub(crate) fn decode_marks(bytes: &[u8]) -> Result<Vec<(u32, LaneMarks)>, String> {
    let mut c = Cursor { bytes, pos: 0 };
    let n = c.len()?;
    let mut out = Vec::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let lane = c.u32()?;
        let init = get_mark(&mut c)?;
        let finalize = get_mark(&mut c)?;
        let abnormal = get_mark(&mut c)?;
        out.push((
            lane,
            LaneMarks {
                init,
                finalize,
                abnormal,
            },
        ));
    }
    c.end()?;
    Ok(out)
}

/// A process's part of a split pass, for process 0: its lanes' marks and its report.
pub(crate) fn encode_split_done(
    marks: &[(u32, LaneMarks)],
    report: &crate::hb::HbReport,
    after: Option<&crate::hb::HbReport>,
) -> Vec<u8> {
    let mut w = Wire(Vec::new());
    w.bytes(&encode_marks(marks));
    w.bytes(&serde_json::to_vec(report).unwrap_or_default());
    w.bytes(&serde_json::to_vec(&after).unwrap_or_default());
    w.0
}

/// A process's result of a split pass: its lanes' marks, its report, and its part of the check
/// of the written output, if made.
pub(crate) type SplitDone = (
    Vec<(u32, LaneMarks)>,
    crate::hb::HbReport,
    Option<crate::hb::HbReport>,
);

pub(crate) fn decode_split_done(bytes: &[u8]) -> Result<SplitDone, String> {
    let mut c = Cursor { bytes, pos: 0 };
    let marks = decode_marks(c.bytes()?)?;
    let report = serde_json::from_slice(c.bytes()?).map_err(|e| format!("report: {e}"))?;
    let after = serde_json::from_slice(c.bytes()?).map_err(|e| format!("check: {e}"))?;
    c.end()?;
    Ok((marks, report, after))
}

/// A [`Transport`] between threads of one process, one per simulated process: lets tests run the
/// protocol (and check the output is the same as one process's) without MPI.
pub mod threads {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::sync::mpsc::{Receiver, Sender, channel};

    type Message = (usize, u32, Vec<u8>);

    pub struct ChannelTransport {
        rank: usize,
        peers: Vec<Sender<Message>>,
        inbox: Receiver<Message>,
        /// Messages taken while looking for one from a given sender.
        early: RefCell<VecDeque<Message>>,
    }

    /// `size` connected transports, one per simulated process.
    pub fn connected(size: usize) -> Vec<ChannelTransport> {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..size).map(|_| channel()).unzip();
        receivers
            .into_iter()
            .enumerate()
            .map(|(rank, inbox)| ChannelTransport {
                rank,
                peers: senders.clone(),
                inbox,
                early: RefCell::new(VecDeque::new()),
            })
            .collect()
    }

    impl super::Transport for ChannelTransport {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            self.peers.len()
        }
        fn send(&self, dest: usize, tag: u32, bytes: &[u8]) -> Result<(), String> {
            self.peers
                .get(dest)
                .ok_or_else(|| format!("no process {dest}"))?
                .send((self.rank, tag, bytes.to_vec()))
                .map_err(|_| format!("process {dest} has gone"))
        }
        fn try_recv(&self) -> Result<Option<Message>, String> {
            if let Some(m) = self.early.borrow_mut().pop_front() {
                return Ok(Some(m));
            }
            match self.inbox.try_recv() {
                Ok(m) => Ok(Some(m)),
                Err(std::sync::mpsc::TryRecvError::Empty) => Ok(None),
                Err(_) => Err("every other process has gone".into()),
            }
        }
        fn recv(&self, source: Option<usize>) -> Result<Message, String> {
            let mut early = self.early.borrow_mut();
            if let Some(pos) = early.iter().position(|m| source.is_none_or(|s| s == m.0)) {
                return Ok(early.remove(pos).unwrap_or_default());
            }
            loop {
                let m = self
                    .inbox
                    .recv()
                    .map_err(|_| "every other process has gone".to_string())?;
                if source.is_none_or(|s| s == m.0) {
                    return Ok(m);
                }
                early.push_back(m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_split_in_contiguous_blocks_process_zero_s_a_third() {
        let owners: Vec<usize> = (0..8).map(|r| owner_of(r, 8, 2)).collect();
        assert_eq!(owners, [0, 0, 1, 1, 1, 1, 1, 1]);
        let owners: Vec<usize> = (0..10).map(|r| owner_of(r, 10, 3)).collect();
        assert_eq!(owners, [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
        for (ranks, processes) in [(5, 8), (4096, 7), (3, 2), (1, 4)] {
            let owners: Vec<usize> = (0..ranks).map(|r| owner_of(r, ranks, processes)).collect();
            assert!(owners.windows(2).all(|w| w[0] <= w[1]), "{owners:?}");
            assert!(owners.iter().all(|&p| p < processes));
        }
        assert_eq!(owner_of(3, 4, 1), 0);
    }

    #[test]
    fn a_step_message_round_trips_its_events() {
        let mut trace = format::synthetic::events(&format::synthetic::HaloConfig {
            iterations: 50,
            ..Default::default()
        });
        trace.push(Event::CommDef {
            id: 9,
            members: (0..5000).collect(),
        });
        let n = trace.len() as u64;
        let msg = StepMessage {
            rank_idx: 3,
            events_read: 999,
            lanes: vec![
                LaneBatch {
                    lane: 7,
                    finished: false,
                    indices: (0..n).map(|i| i * 3).collect(),
                    removed: (0..n).map(|i| i * 1000 + 1).collect(),
                    shifts: (0..n).map(|i| i as i64 * 7 - 300).collect(),
                    events: trace,
                },
                LaneBatch {
                    lane: 8,
                    finished: true,
                    ..LaneBatch::default()
                },
            ],
        };
        let bytes = msg.encode();
        assert_eq!(StepMessage::decode(&bytes).unwrap(), msg);
        // A cut message is refused, not half read.
        assert!(StepMessage::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn estimates_round_trip() {
        let mut e = crate::hb::Estimates::default();
        e.learn_intrinsic((3, 7), 120);
        e.learn_transfer((0, 1, 9), -40);
        e.learn_exit((2, 1, 3, 0, 4), 77);
        let bytes = encode_estimates(&e);
        assert_eq!(decode_estimates(&bytes).unwrap(), e);
        assert!(decode_estimates(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn a_rank_s_clock_travels_whole() {
        let meta = RankMeta {
            rank: 3,
            clock: ClockCalibration {
                ticks_per_sec: 2.6e9,
                tick_at_epoch: 17,
                realtime_ns: 1_700_000_000,
                source: ClockSource::Monotonic,
                read_ticks: 25,
            },
            ..RankMeta::default()
        };
        let sent = [MetaRecord {
            rank_idx: 1,
            meta: &meta,
            kept: &[],
        }];
        let back = decode_metas(&encode_metas(&sent)).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].0, 1);
        assert_eq!(back[0].1.clock, meta.clock);
    }

    #[test]
    fn marks_keep_every_bit() {
        let m = Mark {
            global: 0.1 + 0.2,
            collapsed: f64::MIN_POSITIVE,
            dp_ns: 1e300,
            polls_dp_ns: -1e-300,
            reads_ns: 3.25e-7,
            mapped: u64::MAX,
            shift_ns: -0.0,
        };
        let marks = vec![
            (
                2,
                LaneMarks {
                    init: Some(m),
                    finalize: None,
                    abnormal: Some(Mark { mapped: 7, ..m }),
                },
            ),
            (5, LaneMarks::default()),
        ];
        let back = decode_marks(&encode_marks(&marks)).unwrap();
        assert_eq!(back.len(), 2);
        let (lane, got) = &back[0];
        assert_eq!(*lane, 2);
        let g = got.init.unwrap();
        assert_eq!(g.global.to_bits(), m.global.to_bits());
        assert_eq!(g.shift_ns.to_bits(), m.shift_ns.to_bits());
        assert_eq!(g.reads_ns.to_bits(), m.reads_ns.to_bits());
        assert_eq!(g.mapped, m.mapped);
        assert!(got.finalize.is_none() && back[1].1.init.is_none());
        assert_eq!(got.abnormal.unwrap().mapped, 7);
        assert!(back[1].1.abnormal.is_none());
    }
}
