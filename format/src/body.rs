//! Record kinds and the fixed little-endian bodies of the rare ("misc") events. The same body bytes
//! are used in the raw in-memory buffer and in the chunk payload, so a flush copies them verbatim.

use crate::framing::CHUNK_VERSION;
use crate::model::*;

pub(crate) const KIND_CALL: u8 = 1;
pub(crate) const KIND_COMPLETION: u8 = 2;
pub(crate) const KIND_COMPLETION_CANCELLED: u8 = 3;
pub(crate) const KIND_USER: u8 = 4;
pub(crate) const KIND_REGION: u8 = 5;
pub(crate) const KIND_SUSPENSION: u8 = 6;
pub(crate) const KIND_COMM_DEF: u8 = 7;
pub(crate) const KIND_CLOCK: u8 = 8;
pub(crate) const KIND_STRING_DEF: u8 = 9;
pub(crate) const KIND_FUNCTION_DEF: u8 = 10;
pub(crate) const KIND_MARKER: u8 = 11;
pub(crate) const KIND_RANK_INFO: u8 = 12;
pub(crate) const KIND_WRITER: u8 = 13;
pub(crate) const KIND_REMOTE_GROUP: u8 = 14;
pub(crate) const KIND_WIN_DEF: u8 = 15;
pub(crate) const KIND_MEMORY: u8 = 16;
pub(crate) const KIND_THRESHOLD: u8 = 17;
pub(crate) const KIND_POLLS: u8 = 18;
pub(crate) const KIND_CALL_SITE: u8 = 19;
pub(crate) const KIND_EPOCH_GROUP: u8 = 20;
pub(crate) const KIND_COMM_ORIGIN: u8 = 21;

/// Byte offsets of the fields of a `Polls` body (FORMAT.md) that change while polls keep finding
/// nothing: the recorder's buffer extends the run in place.
pub(crate) mod polls_at {
    pub const START: usize = 0;
    pub const END: usize = 8;
    pub const COUNT: usize = 16;
    pub const BUSY: usize = 24;
    pub const INNER_COST: usize = 32;
    pub const COST: usize = 40;
    pub const LEN: usize = 58;
}

/// The highest event kind each chunk version may hold, version 1 first (FORMAT.md "Event kinds",
/// "Versioning"). A new kind is a new row, which takes a new [`CHUNK_VERSION`]: the length ties the
/// two, so neither compiles without the other.
const MAX_KIND_BY_VERSION: [u8; CHUNK_VERSION as usize] = [
    KIND_MARKER,
    KIND_WRITER,
    KIND_WIN_DEF,
    KIND_THRESHOLD,
    KIND_POLLS,
    KIND_CALL_SITE,
    KIND_EPOCH_GROUP,
    KIND_COMM_ORIGIN,
    // Version 9 cut the payload into blocks and added no kind.
    KIND_COMM_ORIGIN,
];

/// The highest event kind a chunk of `version` may hold; `None` for a version this crate does not
/// read.
pub(crate) fn max_kind(version: u16) -> Option<u8> {
    let row = usize::from(version).checked_sub(1)?;
    MAX_KIND_BY_VERSION.get(row).copied()
}

/// The highest kind of all: the newest version's.
const LATEST_KIND: u8 = MAX_KIND_BY_VERSION[MAX_KIND_BY_VERSION.len() - 1];

/// How a `CommOrigin` body goes on after the id (FORMAT.md "Misc bodies").
const ORIGIN_PARENT: u8 = 0;
const ORIGIN_GROUP: u8 = 1;
const ORIGIN_TAGGED: u8 = 2;

const MARKER_LOCAL_FLUSH: u8 = 1;
const MARKER_RECORDING_STOPPED: u8 = 2;
const MARKER_LOST: u8 = 3;
const MARKER_ABNORMAL_END: u8 = 4;
const MARKER_INIT_DONE: u8 = 5;
const MARKER_FINALIZE_START: u8 = 6;
const MARKER_STUCK: u8 = 7;
const MARKER_COMPRESSED: u8 = 8;
const MARKER_MEMORY_LOW: u8 = 9;

/// The number a marker's kind is written as.
pub(crate) fn marker_kind(m: &Marker) -> u8 {
    match m {
        Marker::LocalFlush { .. } => MARKER_LOCAL_FLUSH,
        Marker::RecordingStopped { .. } => MARKER_RECORDING_STOPPED,
        Marker::Lost { .. } => MARKER_LOST,
        Marker::AbnormalEnd { .. } => MARKER_ABNORMAL_END,
        Marker::InitDone { .. } => MARKER_INIT_DONE,
        Marker::FinalizeStart { .. } => MARKER_FINALIZE_START,
        Marker::Stuck { .. } => MARKER_STUCK,
        Marker::Compressed { .. } => MARKER_COMPRESSED,
        Marker::MemoryLow { .. } => MARKER_MEMORY_LOW,
    }
}

/// The highest marker kind a chunk of `version` may hold.
pub(crate) fn max_marker(version: u16) -> u8 {
    if version >= 4 {
        MARKER_MEMORY_LOW
    } else {
        MARKER_STUCK
    }
}

pub(crate) fn is_misc_kind(kind: u8) -> bool {
    (KIND_USER..=LATEST_KIND).contains(&kind)
}

/// Bytes of `s` a `RankInfo` body keeps: its length field is a `u16`, so a longer string is cut
/// at the last character boundary that fits, and the body stays decodable.
pub(crate) fn str16_len(s: &str) -> usize {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

fn put_str16(out: &mut Vec<u8>, s: &str) {
    let end = str16_len(s);
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

fn writer_id(v: u8) -> Option<WriterId> {
    match v {
        0 => Some(WriterId::Posix),
        1 => Some(WriterId::Uring),
        2 => Some(WriterId::MpiIo),
        3 => Some(WriterId::Group),
        _ => None,
    }
}

/// Appends the body of a misc event and returns its kind. Calls and completions have no misc body.
pub(crate) fn put_misc_body(out: &mut Vec<u8>, e: &Event) -> u8 {
    match e {
        Event::Call(_) | Event::Completion(_) => {
            unreachable!("calls and completions are not misc events")
        }
        Event::User(u) => {
            put64(out, u.time);
            put32(out, u.name);
            out.extend_from_slice(&u.payload);
            KIND_USER
        }
        Event::Region(r) => {
            put64(out, r.time);
            put32(out, r.name);
            out.push(r.begin as u8);
            KIND_REGION
        }
        Event::Suspension(s) => {
            for v in [s.seq, s.start, s.z_ns, s.end] {
                put64(out, v);
            }
            out.push(s.flushed as u8);
            for v in [
                s.bytes_raw,
                s.bytes_stored,
                s.write_ns,
                s.overshoot_ns,
                s.w_ns,
            ] {
                put64(out, v);
            }
            for v in [s.m_ns, s.d_ns, s.offset_ns] {
                put64(out, v.to_bits());
            }
            KIND_SUSPENSION
        }
        Event::CommDef { id, members } => {
            put32(out, *id);
            for m in members {
                put32(out, *m);
            }
            KIND_COMM_DEF
        }
        Event::RemoteGroup { id, members } => {
            put32(out, *id);
            for m in members {
                put32(out, *m);
            }
            KIND_REMOTE_GROUP
        }
        Event::EpochGroup { win, members } => {
            put32(out, *win);
            for m in members {
                put32(out, *m);
            }
            KIND_EPOCH_GROUP
        }
        Event::WinDef { id, comm } => {
            put32(out, *id);
            put32(out, *comm);
            KIND_WIN_DEF
        }
        Event::CommOrigin { id, origin } => {
            put32(out, *id);
            match origin {
                CommOrigin::Parent { parent, index } => {
                    out.push(ORIGIN_PARENT);
                    put32(out, *parent);
                    put32(out, *index);
                }
                CommOrigin::Group { parent, tag, index } => {
                    out.push(ORIGIN_GROUP);
                    put32(out, *parent);
                    put32(out, *tag as u32);
                    put32(out, *index);
                }
                CommOrigin::Tagged { tag, index } => {
                    out.push(ORIGIN_TAGGED);
                    put32(out, *index);
                    out.extend_from_slice(tag.as_bytes());
                }
            }
            KIND_COMM_ORIGIN
        }
        Event::Clock(c) => {
            put64(out, c.local);
            put64(out, c.offset_ns.to_bits());
            put64(out, c.rtt_ns.to_bits());
            out.push(c.when as u8);
            KIND_CLOCK
        }
        Event::StringDef { id, text } => {
            put32(out, *id);
            out.extend_from_slice(text.as_bytes());
            KIND_STRING_DEF
        }
        Event::FunctionDef { id, name } => {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            KIND_FUNCTION_DEF
        }
        Event::Marker(m) => {
            match *m {
                Marker::LocalFlush { time, bytes } => {
                    out.push(MARKER_LOCAL_FLUSH);
                    put64(out, time);
                    put64(out, bytes);
                }
                Marker::RecordingStopped { time } => {
                    out.push(MARKER_RECORDING_STOPPED);
                    put64(out, time);
                }
                Marker::Lost { time, events } => {
                    out.push(MARKER_LOST);
                    put64(out, time);
                    put64(out, events);
                }
                Marker::AbnormalEnd { time, signal } => {
                    out.push(MARKER_ABNORMAL_END);
                    put64(out, time);
                    out.extend_from_slice(&signal.to_le_bytes());
                }
                Marker::InitDone { time } => {
                    out.push(MARKER_INIT_DONE);
                    put64(out, time);
                }
                Marker::FinalizeStart { time } => {
                    out.push(MARKER_FINALIZE_START);
                    put64(out, time);
                }
                Marker::Stuck {
                    time,
                    func,
                    elapsed_ns,
                    comm,
                    peer,
                    tag,
                } => {
                    out.push(MARKER_STUCK);
                    put64(out, time);
                    out.extend_from_slice(&func.to_le_bytes());
                    put64(out, elapsed_ns);
                    put32(out, comm);
                    put32(out, peer as u32);
                    put32(out, tag as u32);
                }
                Marker::Compressed {
                    time,
                    raw_bytes,
                    stored_bytes,
                } => {
                    out.push(MARKER_COMPRESSED);
                    put64(out, time);
                    put64(out, raw_bytes);
                    put64(out, stored_bytes);
                }
                Marker::MemoryLow {
                    time,
                    available,
                    needed,
                } => {
                    out.push(MARKER_MEMORY_LOW);
                    put64(out, time);
                    put64(out, available);
                    put64(out, needed);
                }
            }
            KIND_MARKER
        }
        Event::RankInfo(r) => {
            put32(out, r.rank);
            put32(out, r.world_size);
            put32(out, r.pid);
            put_str16(out, &r.host);
            put_str16(out, &r.mpi_library);
            out.extend_from_slice(r.run_id.as_bytes());
            KIND_RANK_INFO
        }
        Event::Writer(w) => {
            out.push(w.requested as u8);
            out.push(w.used as u8);
            out.push(w.change as u8);
            put32(out, w.part);
            out.extend_from_slice(w.reason.as_bytes());
            KIND_WRITER
        }
        Event::Memory(m) => {
            for v in [
                m.time,
                m.rss_bytes,
                m.recorder_bytes,
                m.compressed_bytes,
                m.node_available,
                m.cgroup_limit,
                m.cgroup_usage,
                m.swap_out_pages,
            ] {
                put64(out, v);
            }
            out.push(m.when as u8);
            KIND_MEMORY
        }
        Event::Threshold(t) => {
            put64(out, t.time);
            put64(out, t.bytes);
            out.push(t.basis as u8);
            put64(out, t.available);
            put32(out, t.ranks_on_node);
            KIND_THRESHOLD
        }
        Event::Polls(p) => {
            for v in [p.start, p.end, p.count, p.busy, p.inner_cost] {
                put64(out, v);
            }
            put32(out, p.cost);
            out.extend_from_slice(&p.func.to_le_bytes());
            put32(out, p.comm);
            put32(out, p.peer as u32);
            put32(out, p.tag as u32);
            KIND_POLLS
        }
        Event::CallSite(s) => {
            put32(out, s.id);
            put64(out, s.address);
            put64(out, s.base);
            out.extend_from_slice(s.file.as_bytes());
            KIND_CALL_SITE
        }
    }
}

/// The bytes [`put_misc_body`] writes for `e`, known before writing (a raw buffer reserves them
/// ahead; debug builds check the two agree).
pub(crate) fn misc_body_len(e: &Event) -> usize {
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
            12 + 2 + str16_len(&r.host) + 2 + str16_len(&r.mpi_library) + r.run_id.len()
        }
        Event::Writer(w) => 7 + w.reason.len(),
        Event::RemoteGroup { members, .. } | Event::EpochGroup { members, .. } => {
            4 + 4 * members.len()
        }
        Event::WinDef { .. } => 8,
        Event::CommOrigin { origin, .. } => match origin {
            CommOrigin::Parent { .. } => 13,
            CommOrigin::Group { .. } => 17,
            CommOrigin::Tagged { tag, .. } => 9 + tag.len(),
        },
        Event::Memory(_) => 65,
        Event::Threshold(_) => 29,
        Event::Polls(_) => polls_at::LEN,
        Event::CallSite(s) => 20 + s.file.len(),
    }
}

#[inline]
fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A bounds-checked little-endian cursor: every read of corrupt input fails instead of panicking.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_le_bytes([s[0], s[1]]))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap_or_default()))
    }
    pub(crate) fn i32(&mut self) -> Option<i32> {
        self.u32().map(|v| v as i32)
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
    }
    pub(crate) fn f64(&mut self) -> Option<f64> {
        self.u64().map(f64::from_bits)
    }
    pub(crate) fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

/// Decodes a misc body. `Err` carries a short reason; the caller adds file and offset.
pub(crate) fn decode_misc_body(kind: u8, body: &[u8]) -> Result<Event, &'static str> {
    let mut c = Cursor::new(body);
    let short = "misc event body too short";
    let event = match kind {
        KIND_USER => {
            let time = c.u64().ok_or(short)?;
            let name = c.u32().ok_or(short)?;
            Event::User(UserRecord {
                time,
                name,
                payload: c.rest().to_vec(),
            })
        }
        KIND_REGION => Event::Region(Region {
            time: c.u64().ok_or(short)?,
            name: c.u32().ok_or(short)?,
            begin: c.bool().ok_or("bad region flag")?,
        }),
        KIND_SUSPENSION => {
            let seq = c.u64().ok_or(short)?;
            let start = c.u64().ok_or(short)?;
            let z_ns = c.u64().ok_or(short)?;
            let end = c.u64().ok_or(short)?;
            let flushed = c.bool().ok_or("bad suspension flag")?;
            Event::Suspension(Box::new(Suspension {
                seq,
                start,
                z_ns,
                end,
                flushed,
                bytes_raw: c.u64().ok_or(short)?,
                bytes_stored: c.u64().ok_or(short)?,
                write_ns: c.u64().ok_or(short)?,
                overshoot_ns: c.u64().ok_or(short)?,
                w_ns: c.u64().ok_or(short)?,
                m_ns: c.f64().ok_or(short)?,
                d_ns: c.f64().ok_or(short)?,
                offset_ns: c.f64().ok_or(short)?,
            }))
        }
        KIND_COMM_DEF | KIND_REMOTE_GROUP | KIND_EPOCH_GROUP => {
            let id = c.u32().ok_or(short)?;
            let words = c.rest().chunks_exact(4);
            if !words.remainder().is_empty() {
                return Err("communicator member list is not a whole number of u32");
            }
            let members = words
                .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
                .collect();
            match kind {
                KIND_COMM_DEF => Event::CommDef { id, members },
                KIND_REMOTE_GROUP => Event::RemoteGroup { id, members },
                _ => Event::EpochGroup { win: id, members },
            }
        }
        KIND_WIN_DEF => Event::WinDef {
            id: c.u32().ok_or(short)?,
            comm: c.u32().ok_or(short)?,
        },
        KIND_COMM_ORIGIN => {
            let id = c.u32().ok_or(short)?;
            let origin = match c.u8().ok_or(short)? {
                ORIGIN_PARENT => CommOrigin::Parent {
                    parent: c.u32().ok_or(short)?,
                    index: c.u32().ok_or(short)?,
                },
                ORIGIN_GROUP => CommOrigin::Group {
                    parent: c.u32().ok_or(short)?,
                    tag: c.u32().ok_or(short)? as i32,
                    index: c.u32().ok_or(short)?,
                },
                ORIGIN_TAGGED => {
                    let index = c.u32().ok_or(short)?;
                    let tag = std::str::from_utf8(c.rest())
                        .map_err(|_| "communicator string tag is not UTF-8")?;
                    CommOrigin::Tagged {
                        tag: tag.to_owned(),
                        index,
                    }
                }
                _ => return Err("unknown communicator origin"),
            };
            Event::CommOrigin { id, origin }
        }
        KIND_CLOCK => Event::Clock(ClockSample {
            local: c.u64().ok_or(short)?,
            offset_ns: c.f64().ok_or(short)?,
            rtt_ns: c.f64().ok_or(short)?,
            when: match c.u8().ok_or(short)? {
                0 => SampleKind::Init,
                1 => SampleKind::Suspension,
                2 => SampleKind::Finalize,
                _ => return Err("unknown clock sample kind"),
            },
        }),
        KIND_CALL_SITE => {
            let id = c.u32().ok_or(short)?;
            let address = c.u64().ok_or(short)?;
            let base = c.u64().ok_or(short)?;
            let file = std::str::from_utf8(c.rest()).map_err(|_| "call site file is not UTF-8")?;
            Event::CallSite(CallSite {
                id,
                address,
                base,
                file: file.to_owned(),
            })
        }
        KIND_STRING_DEF => {
            let id = c.u32().ok_or(short)?;
            let text = std::str::from_utf8(c.rest()).map_err(|_| "string is not UTF-8")?;
            Event::StringDef {
                id,
                text: text.to_owned(),
            }
        }
        KIND_FUNCTION_DEF => {
            let id = c.u16().ok_or(short)?;
            let name = std::str::from_utf8(c.rest()).map_err(|_| "function name is not UTF-8")?;
            Event::FunctionDef {
                id,
                name: name.to_owned(),
            }
        }
        KIND_MARKER => {
            let sub = c.u8().ok_or(short)?;
            let time = c.u64().ok_or(short)?;
            Event::Marker(match sub {
                MARKER_LOCAL_FLUSH => Marker::LocalFlush {
                    time,
                    bytes: c.u64().ok_or(short)?,
                },
                MARKER_RECORDING_STOPPED => Marker::RecordingStopped { time },
                MARKER_LOST => Marker::Lost {
                    time,
                    events: c.u64().ok_or(short)?,
                },
                MARKER_ABNORMAL_END => Marker::AbnormalEnd {
                    time,
                    signal: c.i32().ok_or(short)?,
                },
                MARKER_INIT_DONE => Marker::InitDone { time },
                MARKER_FINALIZE_START => Marker::FinalizeStart { time },
                MARKER_STUCK => Marker::Stuck {
                    time,
                    func: c.u16().ok_or(short)?,
                    elapsed_ns: c.u64().ok_or(short)?,
                    comm: c.u32().ok_or(short)?,
                    peer: c.u32().ok_or(short)? as i32,
                    tag: c.u32().ok_or(short)? as i32,
                },
                MARKER_COMPRESSED => Marker::Compressed {
                    time,
                    raw_bytes: c.u64().ok_or(short)?,
                    stored_bytes: c.u64().ok_or(short)?,
                },
                MARKER_MEMORY_LOW => Marker::MemoryLow {
                    time,
                    available: c.u64().ok_or(short)?,
                    needed: c.u64().ok_or(short)?,
                },
                _ => return Err("unknown marker kind"),
            })
        }
        KIND_MEMORY => {
            let mut v = [0u64; 8];
            for x in &mut v {
                *x = c.u64().ok_or(short)?;
            }
            let when = match c.u8().ok_or(short)? {
                0 => MemoryWhen::Init,
                1 => MemoryWhen::Suspension,
                2 => MemoryWhen::Periodic,
                3 => MemoryWhen::Finalize,
                4 => MemoryWhen::Compressed,
                5 => MemoryWhen::Idle,
                6 => MemoryWhen::NodeWatcher,
                _ => return Err("unknown memory sample kind"),
            };
            Event::Memory(MemorySample {
                time: v[0],
                rss_bytes: v[1],
                recorder_bytes: v[2],
                compressed_bytes: v[3],
                node_available: v[4],
                cgroup_limit: v[5],
                cgroup_usage: v[6],
                swap_out_pages: v[7],
                when,
            })
        }
        KIND_THRESHOLD => {
            let time = c.u64().ok_or(short)?;
            let bytes = c.u64().ok_or(short)?;
            let basis = match c.u8().ok_or(short)? {
                0 => ThresholdBasis::Fixed,
                1 => ThresholdBasis::Cgroup,
                2 => ThresholdBasis::Node,
                3 => ThresholdBasis::Unknown,
                _ => return Err("unknown threshold basis"),
            };
            Event::Threshold(ThresholdChoice {
                time,
                bytes,
                basis,
                available: c.u64().ok_or(short)?,
                ranks_on_node: c.u32().ok_or(short)?,
            })
        }
        KIND_POLLS => {
            let mut v = [0u64; 5];
            for x in &mut v {
                *x = c.u64().ok_or(short)?;
            }
            Event::Polls(PollRun {
                start: v[0],
                end: v[1],
                count: v[2],
                busy: v[3],
                inner_cost: v[4],
                cost: c.u32().ok_or(short)?,
                func: c.u16().ok_or(short)?,
                comm: c.u32().ok_or(short)?,
                peer: c.u32().ok_or(short)? as i32,
                tag: c.u32().ok_or(short)? as i32,
            })
        }
        KIND_RANK_INFO => {
            let rank = c.u32().ok_or(short)?;
            let world_size = c.u32().ok_or(short)?;
            let pid = c.u32().ok_or(short)?;
            let mut text = |what| -> Result<String, &'static str> {
                let len = c.u16().ok_or(short)?;
                let bytes = c.take(len as usize).ok_or(short)?;
                std::str::from_utf8(bytes)
                    .map(str::to_owned)
                    .map_err(|_| what)
            };
            let host = text("host name is not UTF-8")?;
            let mpi_library = text("MPI library name is not UTF-8")?;
            let run_id = std::str::from_utf8(c.rest())
                .map_err(|_| "run id is not UTF-8")?
                .to_owned();
            Event::RankInfo(Box::new(RankInfo {
                rank,
                world_size,
                pid,
                host,
                mpi_library,
                run_id,
            }))
        }
        KIND_WRITER => {
            let requested = writer_id(c.u8().ok_or(short)?).ok_or("unknown writer")?;
            let used = writer_id(c.u8().ok_or(short)?).ok_or("unknown writer")?;
            let change = match c.u8().ok_or(short)? {
                0 => WriterChange::Opened,
                1 => WriterChange::Fallback,
                2 => WriterChange::FinalizeHandover,
                _ => return Err("unknown writer change"),
            };
            let part = c.u32().ok_or(short)?;
            let reason = std::str::from_utf8(c.rest())
                .map_err(|_| "writer reason is not UTF-8")?
                .to_owned();
            Event::Writer(WriterUsed {
                requested,
                used,
                change,
                part,
                reason,
            })
        }
        _ => return Err("unknown event kind"),
    };
    if !c.at_end() {
        return Err("misc event body has trailing bytes");
    }
    Ok(event)
}

/// The ticks (min, max) a misc body's event happened at, for a chunk's first/last timestamp, read
/// straight from the body so encoding never materialises the event. Definitions have none.
pub(crate) fn misc_body_times(kind: u8, body: &[u8]) -> Option<(u64, u64)> {
    let at = |off: usize| {
        body.get(off..off + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
    };
    match kind {
        KIND_USER | KIND_REGION | KIND_CLOCK | KIND_MEMORY | KIND_THRESHOLD => {
            at(0).map(|t| (t, t))
        }
        KIND_MARKER => at(1).map(|t| (t, t)),
        KIND_POLLS => {
            let (start, end) = (at(polls_at::START)?, at(polls_at::END)?);
            Some((start.min(end), start.max(end)))
        }
        KIND_SUSPENSION => {
            let (start, end) = (at(8)?, at(24)?);
            Some((start.min(end), start.max(end)))
        }
        _ => None,
    }
}
