//! Perfetto's native trace format: a `Trace` message, i.e. a stream of `TracePacket`s (field 1),
//! as ui.perfetto.dev and trace_processor read it. Hand-encoded: the few messages written here do
//! not justify a protobuf code generator.
//!
//! - one process track per rank (`pid` = world rank + 1: pid 0 is the idle task to Perfetto),
//!   one thread track per recording thread (stream), and a counter track `buffer fill` per rank;
//! - every MPI call a slice (`TYPE_SLICE_BEGIN`/`END`) on its thread, named after the function,
//!   with debug annotations peer (world rank), tag, bytes, comm and, for collectives, root;
//!   user regions (`evenflush_region_begin`/`_end`) slices too; suspensions slices named
//!   `suspension` with a nested `flush` over the write when the rank flushed; markers instants;
//! - every matched message a flow: its id in `flow_ids` on the send call's begin, in
//!   `terminating_flow_ids` on the end of the call that completed the receive (the end, not the
//!   begin: a receive is often posted before the send starts, and Perfetto links flow ends in
//!   time order);
//! - the buffer fill counter as in the JSON view ([`super::chrome_json`]).
//!
//! Size: every lane (rank, stream) is one packet sequence (`trusted_packet_sequence_id`), whose
//! first packet clears its incremental state and sets the defaults every later packet leans on:
//! the sequence's own thread track, and a sequence-scoped incremental clock (id 64, nanoseconds)
//! so that each timestamp is the delta to the previous one. Event and annotation names are
//! interned per sequence (`InternedData`). A time earlier than the sequence's last one (a call
//! enclosing a suspension is recorded after it) is written absolute on the boot clock instead,
//! which does not move the incremental clock. The packets are then deflated in chunks into
//! `compressed_packets`, as Perfetto's own tracing service does, on a thread beside the walk
//! ([`super::chunk_deflater`]).
//!
//! Streaming: everything is written by the walk as it shows each event ([`super::exporter`]);
//! memory is the matching's in-flight state plus a few chunks (the one filling, and those the
//! deflate thread holds).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use format::{Event, FunctionId, Marker, StringId};

use super::chunk_deflater::ChunkDeflater;
use super::exporter::{self, BufferFill, EdgeMark, Exporter, FILL_SAMPLE_EVERY, Walk, Walked};
use super::flows::{CallFlows, LooseEnd};
use super::{CallKind, CommTable, End, ExportError};
use trace::Skipped;
use trace::Trace;
use trace::funcs::FuncClass;
use trace::window::Window;

/// What the export wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProtoSummary {
    pub events_read: u64,
    /// Slices begun (calls, regions, suspensions, flushes).
    pub slices: u64,
    /// Flow ends written: on slices and, where a call could not carry one, on an instant.
    pub flow_ends: u64,
    pub counters: u64,
    pub messages_matched: u64,
    pub packets: u64,
    /// Size of the packets before compression, and of the file.
    pub bytes_packets: u64,
    pub bytes_written: u64,
    /// Matched messages with one end in the window and the other outside it (in time or rank),
    /// each drawn as a flow to or from an edge mark on the `outside window` track.
    pub messages_crossing: u64,
    pub edge_marks: u64,
    /// What the window was ([`Window`]'s description).
    pub window: String,
    pub skipped: Vec<Skipped>,
}

/// How the packets are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoOptions {
    /// Deflate the packets in chunks (`TracePacket.compressed_packets`).
    pub compress: bool,
}

impl Default for ProtoOptions {
    fn default() -> Self {
        ProtoOptions { compress: true }
    }
}

/// Uncompressed bytes per `compressed_packets` chunk: large enough for deflate to find the
/// repetition, small next to any trace worth exporting.
const CHUNK: usize = 1 << 20;

// Field numbers, from Perfetto's protos/perfetto/trace (trace.proto, trace_packet.proto,
// track_event/*.proto, interned_data/interned_data.proto, clock_snapshot.proto).
const TRACE_PACKET: u32 = 1;
const TP_CLOCK_SNAPSHOT: u32 = 6;
const TP_TIMESTAMP: u32 = 8;
const TP_SEQUENCE_ID: u32 = 10;
const TP_TRACK_EVENT: u32 = 11;
const TP_INTERNED_DATA: u32 = 12;
const TP_SEQUENCE_FLAGS: u32 = 13;
const TP_COMPRESSED_PACKETS: u32 = 50;
const TP_TIMESTAMP_CLOCK_ID: u32 = 58;
const TP_DEFAULTS: u32 = 59;
const TP_TRACK_DESCRIPTOR: u32 = 60;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;

const CLOCK_ID: u32 = 1;
const CLOCK_TIMESTAMP: u32 = 2;
const CLOCK_IS_INCREMENTAL: u32 = 3;
const SNAPSHOT_CLOCKS: u32 = 1;
const BOOTTIME: u64 = 6;
/// The first sequence-scoped clock id (64..=127 are the producer's own, per sequence).
const SEQ_CLOCK: u64 = 64;

const DEFAULTS_CLOCK_ID: u32 = 58;
const DEFAULTS_TRACK_EVENT: u32 = 11;
const TE_DEFAULTS_TRACK_UUID: u32 = 11;

const TD_UUID: u32 = 1;
const TD_NAME: u32 = 2;
const TD_PROCESS: u32 = 3;
const TD_THREAD: u32 = 4;
const TD_PARENT_UUID: u32 = 5;
const TD_COUNTER: u32 = 8;
const PD_PID: u32 = 1;
const PD_NAME: u32 = 6;
const THD_PID: u32 = 1;
const THD_TID: u32 = 2;
const THD_NAME: u32 = 5;
const CD_UNIT: u32 = 3;
const UNIT_SIZE_BYTES: u64 = 3;

const TE_DEBUG_ANNOTATIONS: u32 = 4;
const TE_TYPE: u32 = 9;
const TE_NAME_IID: u32 = 10;
const TE_NAME: u32 = 23;
const TE_TRACK_UUID: u32 = 11;
const TE_COUNTER_VALUE: u32 = 30;
const TE_FLOW_IDS: u32 = 47;
const TE_TERMINATING_FLOW_IDS: u32 = 48;
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;

const DA_NAME_IID: u32 = 1;
const DA_BOOL: u32 = 2;
const DA_INT: u32 = 4;

const ID_EVENT_NAMES: u32 = 2;
const ID_DEBUG_ANNOTATION_NAMES: u32 = 3;
const INTERNED_IID: u32 = 1;
const INTERNED_NAME: u32 = 2;

/// Debug annotation names, interned once per sequence as iid = position + 1.
const ANNOTATIONS: [&str; 9] = [
    "peer",
    "tag",
    "bytes",
    "comm",
    "root",
    "seq",
    "flushed",
    "bytes_raw",
    "write_ns",
];
const A_PEER: u64 = 1;
const A_TAG: u64 = 2;
const A_BYTES: u64 = 3;
const A_COMM: u64 = 4;
const A_ROOT: u64 = 5;
const A_SEQ: u64 = 6;
const A_FLUSHED: u64 = 7;
const A_BYTES_RAW: u64 = 8;
const A_WRITE_NS: u64 = 9;

/// A protobuf message being written.
#[derive(Default)]
struct Pb {
    buf: Vec<u8>,
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Pb {
    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.buf, (u64::from(field) << 3) | u64::from(wire));
    }

    fn uint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        put_varint(&mut self.buf, v);
    }

    /// An int32/int64 field: negative values are ten bytes, as protobuf encodes them.
    fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, 1);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        put_varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    /// A nested message: written in place, then its length is put in front of it (messages here
    /// are small, so the shift costs less than a second buffer).
    fn msg(&mut self, field: u32, f: impl FnOnce(&mut Pb)) {
        self.key(field, 2);
        let start = self.buf.len();
        f(self);
        let mut len = Vec::with_capacity(5);
        put_varint(&mut len, (self.buf.len() - start) as u64);
        self.buf.splice(start..start, len);
    }

    fn annotation(&mut self, iid: u64, v: i64) {
        self.msg(TE_DEBUG_ANNOTATIONS, |d| {
            d.uint(DA_NAME_IID, iid);
            d.int(DA_INT, v);
        });
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum NameKey {
    Func(FunctionId),
    Str(StringId),
    Fixed(&'static str),
}

/// One packet sequence: one lane.
struct Seq {
    id: u64,
    /// Value of the incremental clock: the last time written through it.
    last: u64,
    iids: HashMap<NameKey, u64>,
    rank: usize,
}

struct RankState {
    names: HashMap<FunctionId, (String, CallKind)>,
    strings: HashMap<StringId, String>,
    comms: CommTable,
    counter_uuid: u64,
}

fn process_uuid(rank: u32) -> u64 {
    (2 << 40) | u64::from(rank)
}

fn counter_uuid(rank: u32) -> u64 {
    (3 << 40) | u64::from(rank)
}

/// The track of the edge marks: messages crossing the window's edge.
const EDGE_PROCESS_UUID: u64 = 4 << 40;
const EDGE_THREAD_UUID: u64 = (4 << 40) | 1;

fn thread_uuid(lane: usize) -> u64 {
    (1 << 40) | lane as u64
}

/// Tids are global to Perfetto: lanes get their own, clear of the pids.
fn thread_tid(lane: usize) -> i64 {
    (1 << 24) + lane as i64
}

/// Where the chunks go: straight to the file, or deflated on a thread of its own (when the
/// thread cannot be started, deflated here).
enum Sink<W> {
    Plain(W),
    Deflated(W),
    Deflating(ChunkDeflater<W>),
}

struct Writer<W> {
    sink: Option<Sink<W>>,
    chunk: Pb,
    packet: Pb,
    summary: ProtoSummary,
    failed: Option<std::io::Error>,
}

/// One chunk as `compressed_packets`: deflated (zlib, as Perfetto reads it), in a packet of its
/// own. Returns the bytes written.
fn write_deflated<W: Write>(chunk: &[u8], out: &mut W) -> std::io::Result<u64> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(chunk)?;
    let deflated = z.finish()?;
    let mut wrapper = Pb::default();
    wrapper.msg(TRACE_PACKET, |p| p.bytes(TP_COMPRESSED_PACKETS, &deflated));
    out.write_all(&wrapper.buf)?;
    Ok(wrapper.buf.len() as u64)
}

impl<W: Write + Send + 'static> Writer<W> {
    fn new(out: W, compress: bool) -> Writer<W> {
        let sink = if compress {
            match ChunkDeflater::start(out, write_deflated::<W>) {
                Ok(d) => Sink::Deflating(d),
                Err(out) => Sink::Deflated(out),
            }
        } else {
            Sink::Plain(out)
        };
        Writer {
            sink: Some(sink),
            chunk: Pb::default(),
            packet: Pb::default(),
            summary: ProtoSummary::default(),
            failed: None,
        }
    }

    /// Appends the packet built in `self.packet` to the chunk.
    fn end_packet(&mut self) {
        self.chunk.bytes(TRACE_PACKET, &self.packet.buf);
        self.packet.buf.clear();
        self.summary.packets += 1;
        if self.chunk.buf.len() >= CHUNK {
            self.flush_chunk();
        }
    }

    fn flush_chunk(&mut self) {
        if self.chunk.buf.is_empty() || self.failed.is_some() {
            self.chunk.buf.clear();
            return;
        }
        self.summary.bytes_packets += self.chunk.buf.len() as u64;
        let result = match self.sink.as_mut() {
            Some(Sink::Plain(out)) => out
                .write_all(&self.chunk.buf)
                .map(|()| self.chunk.buf.len() as u64),
            Some(Sink::Deflated(out)) => write_deflated(&self.chunk.buf, out),
            Some(Sink::Deflating(d)) => {
                let chunk = std::mem::replace(&mut self.chunk.buf, d.buffer());
                if !d.send(chunk) {
                    // The thread is gone: what it failed on comes out of `finish`.
                    self.sink_failed();
                }
                Ok(0)
            }
            None => Ok(0),
        };
        match result {
            Ok(n) => self.summary.bytes_written += n,
            Err(e) => self.failed = Some(e),
        }
        self.chunk.buf.clear();
    }

    fn sink_failed(&mut self) {
        if let Some(Sink::Deflating(d)) = self.sink.take() {
            self.failed = Some(match d.finish() {
                Err(e) => e,
                Ok(_) => std::io::Error::other("the export's deflate thread stopped early"),
            });
        }
    }

    /// Writes the last chunk and everything handed to the deflate thread, and flushes.
    fn finish(&mut self) -> std::io::Result<()> {
        self.flush_chunk();
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut out = match self.sink.take() {
            Some(Sink::Plain(out) | Sink::Deflated(out)) => out,
            Some(Sink::Deflating(d)) => {
                let written = d.finish()?;
                self.summary.bytes_written += written.bytes;
                written.out
            }
            None => return Err(std::io::Error::other("the export's output is gone")),
        };
        out.flush()
    }
}

/// The Perfetto protobuf export: [`Exporter`] callbacks writing packets.
struct PerfettoProto {
    path: PathBuf,
    w: Writer<BufWriter<File>>,
    seqs: Vec<Seq>,
    ranks: Vec<RankState>,
    /// Per lane: the user regions open, and whether each one's begin was written.
    regions: Vec<Vec<bool>>,
    /// The sequence of the edge marks (after the lanes'), when the window cuts anything.
    edge_seq: Option<usize>,
}

impl PerfettoProto {
    /// Starts an event packet of sequence `li` at time `t`: the delta on the sequence's
    /// incremental clock, or the absolute boot-clock time when `t` is earlier than its last.
    fn start_event(&mut self, li: usize, t: u64) {
        let seq = &mut self.seqs[li];
        let p = &mut self.w.packet;
        if t >= seq.last {
            p.uint(TP_TIMESTAMP, t - seq.last);
            seq.last = t;
        } else {
            p.uint(TP_TIMESTAMP_CLOCK_ID, BOOTTIME);
            p.uint(TP_TIMESTAMP, t);
        }
        p.uint(TP_SEQUENCE_ID, seq.id);
        p.uint(TP_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
    }

    /// The iid of `key` on sequence `li`, interning it in the current packet on first use.
    fn name_iid(&mut self, li: usize, key: NameKey) -> u64 {
        let seq = &mut self.seqs[li];
        if let Some(&iid) = seq.iids.get(&key) {
            return iid;
        }
        let iid = seq.iids.len() as u64 + 1;
        seq.iids.insert(key, iid);
        let rank = &self.ranks[seq.rank];
        let name = match key {
            NameKey::Func(f) => rank
                .names
                .get(&f)
                .map_or_else(|| format!("function#{f}"), |(n, _)| n.clone()),
            NameKey::Str(s) => rank
                .strings
                .get(&s)
                .cloned()
                .unwrap_or_else(|| format!("region#{s}")),
            NameKey::Fixed(n) => n.to_string(),
        };
        self.w.packet.msg(TP_INTERNED_DATA, |d| {
            d.msg(ID_EVENT_NAMES, |n| {
                n.uint(INTERNED_IID, iid);
                n.bytes(INTERNED_NAME, name.as_bytes());
            })
        });
        iid
    }

    /// A slice begin; `fill` adds the annotations and flow ids to the TrackEvent.
    fn begin(&mut self, li: usize, t: u64, key: NameKey, fill: impl FnOnce(&mut Pb)) {
        self.start_event(li, t);
        let iid = self.name_iid(li, key);
        self.w.packet.msg(TP_TRACK_EVENT, |te| {
            te.uint(TE_TYPE, TYPE_SLICE_BEGIN);
            te.uint(TE_NAME_IID, iid);
            fill(te);
        });
        self.w.end_packet();
        self.w.summary.slices += 1;
    }

    fn end(&mut self, li: usize, t: u64, fill: impl FnOnce(&mut Pb)) {
        self.start_event(li, t);
        self.w.packet.msg(TP_TRACK_EVENT, |te| {
            te.uint(TE_TYPE, TYPE_SLICE_END);
            fill(te);
        });
        self.w.end_packet();
    }

    fn instant(&mut self, li: usize, t: u64, key: NameKey, fill: impl FnOnce(&mut Pb)) {
        self.start_event(li, t);
        let iid = self.name_iid(li, key);
        self.w.packet.msg(TP_TRACK_EVENT, |te| {
            te.uint(TE_TYPE, TYPE_INSTANT);
            te.uint(TE_NAME_IID, iid);
            fill(te);
        });
        self.w.end_packet();
    }

    /// A sample of the buffer fill counter of the rank of sequence `li`.
    fn counter(&mut self, li: usize, t: u64, value: u64) {
        let uuid = self.ranks[self.seqs[li].rank].counter_uuid;
        self.start_event(li, t);
        self.w.packet.msg(TP_TRACK_EVENT, |te| {
            te.uint(TE_TYPE, TYPE_COUNTER);
            te.uint(TE_TRACK_UUID, uuid);
            te.int(TE_COUNTER_VALUE, value as i64);
        });
        self.w.end_packet();
        self.w.summary.counters += 1;
    }

    /// The fill counter's sample, where due and inside the window.
    fn sample(&mut self, walk: &Walk, li: usize, fill: &mut BufferFill, reset: bool, now: u64) {
        fill.since_sample += 1;
        if reset || fill.since_sample >= FILL_SAMPLE_EVERY {
            fill.since_sample = 0;
            if walk.window.contains(now) {
                self.counter(li, now, fill.bytes);
            }
        }
    }

    /// Per lane: the packet that starts its sequence (incremental state cleared, defaults,
    /// clock, annotation names) and its thread track; per rank, on its first lane, the process
    /// and counter tracks.
    fn start_sequences(&mut self, walk: &Walk) {
        let mut li = 0;
        for meta in walk.metas {
            let rank = meta.rank;
            let kept = walk.window.has_rank(rank);
            for (k, &stream) in meta.streams.iter().enumerate() {
                if !kept {
                    li += 1;
                    continue;
                }
                let seq = self.seqs[li].id;
                self.sequence_start(seq, thread_uuid(li), true);
                let pid = i64::from(rank) + 1;
                if k == 0 {
                    self.process_track(
                        seq,
                        process_uuid(rank),
                        pid,
                        format!("rank {rank}").as_bytes(),
                    );
                    let p = &mut self.w.packet;
                    p.uint(TP_SEQUENCE_ID, seq);
                    p.msg(TP_TRACK_DESCRIPTOR, |t| {
                        t.uint(TD_UUID, counter_uuid(rank));
                        t.uint(TD_PARENT_UUID, process_uuid(rank));
                        t.bytes(TD_NAME, b"buffer fill");
                        t.msg(TD_COUNTER, |c| c.uint(CD_UNIT, UNIT_SIZE_BYTES));
                    });
                    self.w.end_packet();
                }
                let thread = ThreadTrack {
                    uuid: thread_uuid(li),
                    parent: process_uuid(rank),
                    pid,
                    tid: thread_tid(li),
                };
                self.thread_track(seq, &thread, format!("thread {stream}").as_bytes());
                li += 1;
            }
        }
        if let Some(edge) = self.edge_seq {
            let seq = self.seqs[edge].id;
            self.sequence_start(seq, EDGE_THREAD_UUID, false);
            // Its own pid, after every rank's (rank + 1).
            let pid = i64::from(walk.window.world_size()) + 1;
            self.process_track(seq, EDGE_PROCESS_UUID, pid, b"outside window");
            let thread = ThreadTrack {
                uuid: EDGE_THREAD_UUID,
                parent: EDGE_PROCESS_UUID,
                pid,
                tid: thread_tid(edge),
            };
            self.thread_track(seq, &thread, b"messages crossing the window's edge");
        }
    }

    /// The packet that starts sequence `seq`: incremental state cleared, `track` as the default
    /// track, the debug annotations' names interned when `annotations`, and the incremental clock
    /// starting at 0 = boot-clock 0 (the first delta is the absolute time, paid once per
    /// sequence).
    fn sequence_start(&mut self, seq: u64, track: u64, annotations: bool) {
        let p = &mut self.w.packet;
        p.uint(TP_SEQUENCE_ID, seq);
        p.uint(TP_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
        p.msg(TP_DEFAULTS, |d| {
            d.uint(DEFAULTS_CLOCK_ID, SEQ_CLOCK);
            d.msg(DEFAULTS_TRACK_EVENT, |t| {
                t.uint(TE_DEFAULTS_TRACK_UUID, track)
            });
        });
        if annotations {
            p.msg(TP_INTERNED_DATA, |d| {
                for (i, name) in ANNOTATIONS.iter().enumerate() {
                    d.msg(ID_DEBUG_ANNOTATION_NAMES, |n| {
                        n.uint(INTERNED_IID, i as u64 + 1);
                        n.bytes(INTERNED_NAME, name.as_bytes());
                    });
                }
            });
        }
        p.msg(TP_CLOCK_SNAPSHOT, |c| {
            c.msg(SNAPSHOT_CLOCKS, |k| {
                k.uint(CLOCK_ID, SEQ_CLOCK);
                k.uint(CLOCK_TIMESTAMP, 0);
                k.uint(CLOCK_IS_INCREMENTAL, 1);
            });
            c.msg(SNAPSHOT_CLOCKS, |k| {
                k.uint(CLOCK_ID, BOOTTIME);
                k.uint(CLOCK_TIMESTAMP, 0);
            });
        });
        self.w.end_packet();
    }

    fn process_track(&mut self, seq: u64, uuid: u64, pid: i64, name: &[u8]) {
        let p = &mut self.w.packet;
        p.uint(TP_SEQUENCE_ID, seq);
        p.msg(TP_TRACK_DESCRIPTOR, |t| {
            t.uint(TD_UUID, uuid);
            t.msg(TD_PROCESS, |pd| {
                pd.int(PD_PID, pid);
                pd.bytes(PD_NAME, name);
            });
        });
        self.w.end_packet();
    }

    fn thread_track(&mut self, seq: u64, thread: &ThreadTrack, name: &[u8]) {
        let p = &mut self.w.packet;
        p.uint(TP_SEQUENCE_ID, seq);
        p.msg(TP_TRACK_DESCRIPTOR, |t| {
            t.uint(TD_UUID, thread.uuid);
            t.uint(TD_PARENT_UUID, thread.parent);
            t.msg(TD_THREAD, |th| {
                th.int(THD_PID, thread.pid);
                th.int(THD_TID, thread.tid);
                th.bytes(THD_NAME, name);
            });
        });
        self.w.end_packet();
    }
}

/// A thread track's identity: its uuid, its process's, and the pid/tid Perfetto shows.
struct ThreadTrack {
    uuid: u64,
    parent: u64,
    pid: i64,
    tid: i64,
}

impl Exporter for PerfettoProto {
    type Summary = ProtoSummary;
    type Options = (PathBuf, ProtoOptions);

    fn begin(walk: &Walk, (path, options): (PathBuf, ProtoOptions)) -> Result<Self, ExportError> {
        let file = File::create(&path).map_err(|e| ExportError::io(&path, e))?;
        let mut seqs: Vec<Seq> = walk
            .lane_rank
            .iter()
            .enumerate()
            .map(|(li, &ri)| Seq {
                id: li as u64 + 1,
                last: 0,
                iids: HashMap::new(),
                rank: ri,
            })
            .collect();
        let ranks = walk
            .metas
            .iter()
            .map(|meta| RankState {
                names: meta
                    .functions
                    .iter()
                    .map(|(id, name)| (*id, (name.clone(), CallKind::of(FuncClass::of(name)))))
                    .collect(),
                strings: HashMap::new(),
                comms: CommTable::default(),
                counter_uuid: counter_uuid(meta.rank),
            })
            .collect();
        let lanes = seqs.len();
        let edge_seq = (!walk.window.is_everything()).then(|| {
            seqs.push(Seq {
                id: lanes as u64 + 1,
                last: 0,
                iids: HashMap::new(),
                rank: 0,
            });
            lanes
        });
        let mut proto = PerfettoProto {
            path,
            w: Writer::new(BufWriter::with_capacity(1 << 20, file), options.compress),
            seqs,
            ranks,
            regions: vec![Vec::new(); lanes],
            edge_seq,
        };
        proto.start_sequences(walk);
        Ok(proto)
    }

    fn record(
        &mut self,
        walk: &Walk,
        li: usize,
        e: &Event,
        flows: &mut CallFlows,
        fill: &mut BufferFill,
    ) {
        let ri = self.seqs[li].rank;
        if !walk.kept[li] {
            return;
        }
        let mut reset = false;
        let mut now = self.seqs[li].last;
        let win = walk.window;
        match e {
            Event::Call(c) => {
                let (start, end) = (c.start, c.end.max(c.start));
                let rank = &self.ranks[ri];
                let kind = rank.names.get(&c.func).map_or(CallKind::Other, |n| n.1);
                let world = |r: i32| {
                    rank.comms
                        .world_rank(c.comm, r)
                        .map_or(i64::from(r), i64::from)
                };
                let peer = (c.peer >= 0).then(|| world(c.peer));
                let root = (kind == CallKind::Collective && c.root >= 0).then(|| world(c.root));
                if !win.overlaps(start, end) {
                    return;
                }
                // Cut to the window; a flow end whose instant lies outside it is an edge mark.
                let (start, end) = win.clip(start, end);
                let out = flows.out.filter(|_| win.contains(c.start));
                let ins_kept = win.contains(c.end);
                if !ins_kept {
                    flows.ins.clear();
                }
                self.begin(li, start, NameKey::Func(c.func), |te| {
                    if let Some(peer) = peer {
                        te.annotation(A_PEER, peer);
                        te.annotation(A_TAG, i64::from(c.tag));
                    }
                    if c.bytes > 0 {
                        te.annotation(A_BYTES, c.bytes as i64);
                    }
                    if c.comm != u32::MAX {
                        te.annotation(A_COMM, i64::from(c.comm));
                    }
                    if let Some(root) = root {
                        te.annotation(A_ROOT, root);
                    }
                    if let Some(id) = out {
                        te.fixed64(TE_FLOW_IDS, id);
                    }
                });
                self.end(li, end, |te| {
                    for &(id, _) in &flows.ins {
                        te.fixed64(TE_TERMINATING_FLOW_IDS, id);
                    }
                });
                self.w.summary.flow_ends += u64::from(out.is_some()) + flows.ins.len() as u64;
                now = end;
            }
            Event::Region(r) => {
                // Regions begun before the window are left out; one open at its end closes there.
                if r.begin {
                    let shown = win.contains(r.time);
                    self.regions[li].push(shown);
                    if shown {
                        self.begin(li, r.time, NameKey::Str(r.name), |_| {});
                    }
                } else if self.regions[li].pop().unwrap_or(win.is_everything()) {
                    self.end(li, r.time.min(win.to), |_| {});
                }
                now = r.time;
            }
            Event::Suspension(s) => {
                let (start, end) = (s.start, s.end.max(s.start));
                if !win.overlaps(start, end) {
                    let flushed = s.flushed && s.bytes_raw > 0;
                    if flushed {
                        fill.bytes = 0;
                    }
                    self.sample(walk, li, fill, flushed, start);
                    return;
                }
                let (start, end) = win.clip(start, end);
                self.begin(li, start, NameKey::Fixed("suspension"), |te| {
                    te.annotation(A_SEQ, s.seq as i64);
                    te.msg(TE_DEBUG_ANNOTATIONS, |d| {
                        d.uint(DA_NAME_IID, A_FLUSHED);
                        d.uint(DA_BOOL, u64::from(s.flushed));
                    });
                });
                if s.flushed && s.bytes_raw > 0 {
                    // Before the flush's slice, so that the sequence's times keep increasing.
                    self.counter(li, start, fill.bytes);
                    fill.bytes = 0;
                    reset = true;
                    // The write comes first in a suspension; the rest waits for Z.
                    let write_end = start.saturating_add(s.write_ns).min(end);
                    self.begin(li, start, NameKey::Fixed("flush"), |te| {
                        te.annotation(A_BYTES_RAW, s.bytes_raw as i64);
                        te.annotation(A_WRITE_NS, s.write_ns as i64);
                    });
                    self.end(li, write_end, |_| {});
                }
                self.end(li, end, |_| {});
                now = end;
            }
            Event::Marker(m) => {
                let (time, what) = (m.time(), m.label());
                if win.contains(time) {
                    self.instant(li, time, NameKey::Fixed(what), |_| {});
                }
                if let Marker::LocalFlush { .. } | Marker::Compressed { .. } = m {
                    if win.contains(time) {
                        self.counter(li, time, fill.bytes);
                    }
                    fill.bytes = 0;
                    reset = true;
                }
                now = time;
            }
            Event::CommDef { id, members } => self.ranks[ri].comms.define(*id, members),
            Event::StringDef { id, text } => {
                self.ranks[ri].strings.insert(*id, text.clone());
            }
            _ => {}
        }
        self.sample(walk, li, fill, reset, now);
    }

    /// A flow end no call carries: an instant of its own on the lane, at the match's time.
    fn loose_end(&mut self, _walk: &Walk, li: usize, l: &LooseEnd) {
        let field = match l.end {
            End::Send => TE_FLOW_IDS,
            End::Recv => TE_TERMINATING_FLOW_IDS,
        };
        self.instant(li, l.ts.max(0) as u64, NameKey::Fixed("message"), |te| {
            te.fixed64(field, l.id)
        });
        self.w.summary.flow_ends += 1;
    }

    /// A mark on the edge track, at the window's edge (or at its own time, for a rank outside
    /// the subset).
    fn edge_mark(&mut self, walk: &Walk, mark: &EdgeMark) {
        let Some(edge) = self.edge_seq else {
            return;
        };
        let window = walk.window;
        let (rank, t, id, leaving) = (mark.rank, mark.t, mark.id, mark.leaving());
        let field = if leaving {
            TE_TERMINATING_FLOW_IDS
        } else {
            TE_FLOW_IDS
        };
        let label = window.outside_label(leaving, rank, t);
        self.start_event(edge, window.clamp(t));
        self.w.packet.msg(TP_TRACK_EVENT, |te| {
            te.uint(TE_TYPE, TYPE_INSTANT);
            te.bytes(TE_NAME, label.as_bytes());
            te.fixed64(field, id);
        });
        self.w.end_packet();
        self.w.summary.edge_marks += 1;
        self.w.summary.flow_ends += 1;
    }

    fn finish(self, walk: &Walk, walked: Walked) -> Result<ProtoSummary, ExportError> {
        let mut w = self.w;
        w.finish().map_err(|e| ExportError::io(&self.path, e))?;
        let mut summary = w.summary;
        summary.events_read = walked.events_read;
        summary.messages_matched = walked.messages_matched;
        summary.messages_crossing = walked.messages_crossing;
        summary.window = walk.window.describe();
        summary.skipped = walked.skipped;
        Ok(summary)
    }
}

/// Writes `trace` as a Perfetto protobuf trace to `out`. `progress(done, total)` in events.
pub fn export(
    trace: &Trace,
    out: &Path,
    options: ProtoOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ProtoSummary, ExportError> {
    let window = Window::everything(trace.world_size);
    export_window(trace, out, options, &window, progress)
}

/// [`export`] of what lies in `window`: the slices that overlap it, cut to its edges; instants
/// and counter samples inside it; user regions begun inside it. Lanes of ranks outside it are
/// read (their messages are matched) but not written.
pub fn export_window(
    trace: &Trace,
    out: &Path,
    options: ProtoOptions,
    window: &Window,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ProtoSummary, ExportError> {
    exporter::run::<PerfettoProto>(trace, window, (out.to_path_buf(), options), progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_nested_lengths_are_protobuf_wire_format() {
        let mut p = Pb::default();
        p.uint(1, 300);
        assert_eq!(p.buf, [0x08, 0xac, 0x02]);
        p.buf.clear();
        p.int(4, -1);
        assert_eq!(p.buf.len(), 1 + 10, "negative int64 takes ten bytes");
        p.buf.clear();
        p.fixed64(47, 1);
        assert_eq!(p.buf, [0xf9, 0x02, 1, 0, 0, 0, 0, 0, 0, 0]);
        // A nested message longer than 127 bytes: its length takes two bytes, put in front.
        p.buf.clear();
        p.msg(2, |m| m.bytes(1, &[7; 200]));
        assert_eq!(&p.buf[..5], &[0x12, 0xcb, 0x01, 0x0a, 0xc8]);
        assert_eq!(p.buf.len(), 3 + 3 + 200);
    }
}
