//! Chrome Trace Event JSON, as opened by ui.perfetto.dev and chrome://tracing.
//!
//! - one process per rank (`pid` = world rank), one thread per stream (`tid` = stream);
//! - every MPI call a complete event (`ph: "X"`) named after the function, category = its kind,
//!   with `args` peer (world rank), tag, bytes, communicator, root and request;
//! - every matched point-to-point message one flow, bound to the slices themselves (`bind_id`
//!   with `flow_out` on the send call, `flow_in` on the call that completed the receive), so that
//!   an arrow cannot land on a neighbouring slice with the same time stamp. A slice carries one
//!   `bind_id`: the further receives of a call (a `Waitall`, the receive half of a `Sendrecv`), and
//!   a receive whose call began before the send's did (Perfetto links flow ends in time order,
//!   and a flow in binds at the slice's begin), get a zero-length child slice `message` (category
//!   `message`, 1 ns long) strictly inside the call, just after the send began;
//! - suspensions as slices in category `evenflush`, and when this rank wrote its trace in one, a
//!   nested `flush` slice over its first `write_ns` (the write happens first, the rest of the
//!   suspension waits for Z); markers as instant events;
//! - a counter `buffer fill` per rank: the recorder's in-memory buffer size, derived by adding each
//!   event's raw record size (`format::raw`: a call 55 bytes, a completion 25, any other event 9 +
//!   its body) and dropping to 0 at every suspension in which the rank flushed and at every local
//!   flush. Sampled every 64 events and at every drop.
//!
//! Times are the global clock (rank 0's, suspensions kept), in microseconds with nanosecond
//! decimals. Everything is written by the walk ([`super::exporter`]) as it shows each event, lanes
//! interleaved (the format does not care about order), so that a call's flow ends are known when
//! its slice is written ([`super::flows`]); no list of the messages is kept. With several
//! recording threads in a rank the buffer fill adds their events in the order the pass shows
//! them, not the order they were recorded.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use format::{Event, FunctionId, Marker};

use super::exporter::{self, BufferFill, EdgeMark, Exporter, FILL_SAMPLE_EVERY, Walk, Walked};
use super::flows::{CallFlows, LooseEnd};
use super::{CallKind, CommTable, End, ExportError, function_table};
use trace::Skipped;
use trace::Trace;
use trace::funcs::FuncClass;
use trace::lanes::LaneId;
use trace::window::Window;

/// What the export wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ChromeJsonSummary {
    pub events_read: u64,
    pub slices: u64,
    /// Message flows written: one per matched message.
    pub flows: u64,
    pub counters: u64,
    pub messages_matched: u64,
    /// Matched messages with one end in the window and the other outside it (in time or rank),
    /// each a flow to or from an edge mark in the `outside window` process.
    pub messages_crossing: u64,
    pub edge_marks: u64,
    /// What the window was ([`Window`]'s description).
    pub window: String,
    pub skipped: Vec<Skipped>,
}

/// Nanoseconds as microseconds with three decimals (exact, no float formatting).
fn us(ns: i64) -> String {
    let ns = ns.max(0);
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

struct Json<W: Write> {
    w: W,
    first: bool,
    line: String,
    failed: Option<std::io::Error>,
    summary: ChromeJsonSummary,
}

impl<W: Write> Json<W> {
    /// Writes `self.line` (one or more events, comma-separated) as the next array elements.
    fn emit(&mut self) {
        if self.line.is_empty() || self.failed.is_some() {
            self.line.clear();
            return;
        }
        let sep: &[u8] = if self.first { b"" } else { b",\n" };
        self.first = false;
        if let Err(e) = self
            .w
            .write_all(sep)
            .and_then(|()| self.w.write_all(self.line.as_bytes()))
        {
            self.failed = Some(e);
        }
        self.line.clear();
    }

    fn sep(&mut self) {
        if !self.line.is_empty() {
            self.line.push_str(",\n");
        }
    }

    /// A zero-length slice carrying one flow end: a call's further flow ends, or an end no call
    /// carries.
    fn flow_slice(&mut self, lane: LaneId, ts: i64, id: u64, end: End) {
        self.sep();
        let dir = match end {
            End::Send => "flow_out",
            End::Recv => "flow_in",
        };
        let _ = write!(
            self.line,
            "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":0,\"name\":\"message\",\"cat\":\"message\",\"bind_id\":{id},\"{dir}\":true}}",
            lane.rank,
            lane.stream,
            us(ts)
        );
        if end == End::Recv {
            self.summary.flows += 1;
        }
    }

    /// A flow in on a child of the call over `span`, near `ts`: 1 ns long and strictly inside
    /// the call where it lasts 3 ns or more. Viewers that turn X events into begin/end pairs
    /// (speedscope) order a zero-length child, or one touching its parent's begin or end,
    /// wrongly against the parent, and then nest every later call inside it.
    fn child_flow_slice(&mut self, lane: LaneId, (start, end): (i64, i64), ts: i64, id: u64) {
        let (ts, dur) = if end - start >= 3 {
            (ts.clamp(start + 1, end - 2), 1)
        } else {
            (start, 0)
        };
        self.sep();
        let _ = write!(
            self.line,
            "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"name\":\"message\",\"cat\":\"message\",\"bind_id\":{id},\"flow_in\":true}}",
            lane.rank,
            lane.stream,
            us(ts),
            us(dur)
        );
        self.summary.flows += 1;
    }

    fn counter(&mut self, rank: u32, ts: i64, fill: u64) {
        self.sep();
        let _ = write!(
            self.line,
            "{{\"ph\":\"C\",\"pid\":{rank},\"ts\":{},\"name\":\"buffer fill\",\"args\":{{\"bytes\":{fill}}}}}",
            us(ts)
        );
        self.summary.counters += 1;
    }
}

/// One rank as the JSON shows it.
struct RankState {
    rank: u32,
    funcs: HashMap<FunctionId, (String, FuncClass)>,
    comms: CommTable,
    /// The end of the last thing written on the rank: where a fill sample goes.
    last_ns: i64,
}

/// The Chrome JSON export: [`Exporter`] callbacks writing trace events.
struct ChromeJson {
    path: PathBuf,
    out: Json<BufWriter<File>>,
    ranks: Vec<RankState>,
}

impl Exporter for ChromeJson {
    type Summary = ChromeJsonSummary;
    type Options = PathBuf;

    fn begin(walk: &Walk, path: PathBuf) -> Result<Self, ExportError> {
        let file = File::create(&path).map_err(|e| ExportError::io(&path, e))?;
        let mut json = Json {
            w: BufWriter::with_capacity(1 << 20, file),
            first: true,
            line: String::with_capacity(512),
            failed: None,
            summary: ChromeJsonSummary::default(),
        };
        json.w
            .write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
            .map_err(|e| ExportError::io(&path, e))?;
        let window = walk.window;
        if !window.is_everything() {
            let pid = window.world_size();
            let _ = write!(
                json.line,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":\"outside window\"}}}},\n\
                 {{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"messages crossing the window's edge\"}}}}"
            );
            json.emit();
        }
        let mut ranks = Vec::with_capacity(walk.metas.len());
        for meta in walk.metas {
            let rank = meta.rank;
            if window.has_rank(rank) {
                let _ = write!(
                    json.line,
                    "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{rank},\"args\":{{\"name\":\"rank {rank}\"}}}},\n\
                     {{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{rank},\"args\":{{\"sort_index\":{rank}}}}}"
                );
                for s in &meta.streams {
                    let _ = write!(
                        json.line,
                        ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{rank},\"tid\":{s},\"args\":{{\"name\":\"thread {s}\"}}}}"
                    );
                }
                json.emit();
            }
            ranks.push(RankState {
                rank,
                funcs: function_table(meta),
                comms: CommTable::default(),
                last_ns: 0,
            });
        }
        Ok(ChromeJson {
            path,
            out: json,
            ranks,
        })
    }

    fn record(
        &mut self,
        walk: &Walk,
        li: usize,
        e: &Event,
        flows: &mut CallFlows,
        fill: &mut BufferFill,
    ) {
        let lane = walk.lanes[li];
        let rs = &mut self.ranks[walk.lane_rank[li]];
        let (rank, stream) = (rs.rank, lane.stream);
        let out = &mut self.out;
        let mut counter_reset = false;
        let win = walk.window;
        // Everything of a rank outside the window, or outside its time, is still counted into
        // the buffer fill, but not written.
        let kept = walk.kept[li];
        match e {
            Event::Call(c) => {
                let (name, class) = rs
                    .funcs
                    .get(&c.func)
                    .cloned()
                    .unwrap_or_else(|| (format!("function#{}", c.func), FuncClass::Other));
                if !kept || !win.overlaps(c.start, c.end) {
                    return;
                }
                // Cut to the window; a flow end whose instant lies outside it is an edge mark.
                let (cs, ce) = win.clip(c.start, c.end);
                if !win.contains(c.start) {
                    flows.out = None;
                }
                if !win.contains(c.end) {
                    flows.ins.clear();
                }
                let start = cs as i64;
                let end = (ce as i64).max(start);
                rs.last_ns = end;
                let kind = CallKind::of(class);
                let peer = rs
                    .comms
                    .world_rank(c.comm, c.peer)
                    .map_or_else(|| c.peer.to_string(), |p| p.to_string());
                let root = rs
                    .comms
                    .world_rank(c.comm, c.root)
                    .map_or_else(|| c.root.to_string(), |p| p.to_string());
                let comm = if c.comm == u32::MAX {
                    "null".to_string()
                } else {
                    c.comm.to_string()
                };
                // One bind_id per slice: the call's own send if any, else its first receive when
                // the call began after the send (a flow in binds at the slice's begin).
                let mut bind = flows.out.map(|id| (id, "flow_out"));
                let mut children = Vec::new();
                for &(id, send_start) in &flows.ins {
                    if bind.is_none() && start > send_start {
                        bind = Some((id, "flow_in"));
                        out.summary.flows += 1;
                    } else {
                        children.push((id, send_start + 1));
                    }
                }
                let bind = bind.map_or_else(String::new, |(id, dir)| {
                    format!(",\"bind_id\":{id},\"{dir}\":true")
                });
                let _ = write!(
                    out.line,
                    "{{\"ph\":\"X\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"dur\":{},\"name\":\"{name}\",\"cat\":\"{}\",\"args\":{{\"peer\":{peer},\"tag\":{},\"bytes\":{},\"comm\":{comm},\"root\":{root},\"request\":{}}}{bind}}}",
                    us(start),
                    us(end - start),
                    kind.label(),
                    c.tag,
                    c.bytes,
                    c.request
                );
                out.summary.slices += 1;
                for (id, ts) in children {
                    out.child_flow_slice(lane, (start, end), ts, id);
                }
            }
            Event::Suspension(s) if !kept || !win.overlaps(s.start, s.end) => {
                fill.empty_if(s.flushed && s.bytes_raw > 0);
            }
            Event::Suspension(s) => {
                let (cs, ce) = win.clip(s.start, s.end);
                let start = cs as i64;
                let end = (ce as i64).max(start);
                rs.last_ns = end;
                let _ = write!(
                    out.line,
                    "{{\"ph\":\"X\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"dur\":{},\"name\":\"suspension {}\",\"cat\":\"evenflush\",\"args\":{{\"z_ns\":{},\"flushed\":{},\"bytes_raw\":{},\"bytes_stored\":{},\"write_ns\":{},\"overshoot_ns\":{}}}}}",
                    us(start),
                    us(end - start),
                    s.seq,
                    s.z_ns,
                    s.flushed,
                    s.bytes_raw,
                    s.bytes_stored,
                    s.write_ns,
                    s.overshoot_ns
                );
                out.summary.slices += 1;
                if s.flushed && s.bytes_raw > 0 {
                    let write = (s.write_ns as i64).min(end - start);
                    let _ = write!(
                        out.line,
                        ",\n{{\"ph\":\"X\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"dur\":{},\"name\":\"flush\",\"cat\":\"evenflush\",\"args\":{{\"bytes_raw\":{},\"bytes_stored\":{}}}}}",
                        us(start),
                        us(write),
                        s.bytes_raw,
                        s.bytes_stored
                    );
                    out.summary.slices += 1;
                    out.counter(rank, start, fill.bytes);
                    fill.bytes = 0;
                    counter_reset = true;
                }
            }
            Event::Marker(m) if !kept || !win.contains(m.time()) => {
                fill.empty_if(matches!(
                    m,
                    Marker::LocalFlush { .. } | Marker::Compressed { .. }
                ));
            }
            Event::Marker(m) => {
                let (time, what) = (m.time(), m.label());
                let t = time as i64;
                rs.last_ns = t;
                let _ = write!(
                    out.line,
                    "{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"name\":\"{what}\",\"cat\":\"evenflush\",\"args\":{{\"marker\":{}}}}}",
                    us(t),
                    serde_json::to_string(&format!("{m:?}")).unwrap_or_default()
                );
                if let Marker::LocalFlush { .. } | Marker::Compressed { .. } = m {
                    out.counter(rank, t, fill.bytes);
                    fill.bytes = 0;
                    counter_reset = true;
                }
            }
            Event::CommDef { id, members } => rs.comms.define(*id, members),
            _ => {}
        }
        fill.since_sample += 1;
        if counter_reset || fill.since_sample >= FILL_SAMPLE_EVERY {
            fill.since_sample = 0;
            if kept && win.contains(rs.last_ns.max(0) as u64) {
                out.counter(rank, rs.last_ns, fill.bytes);
            }
        }
        out.emit();
    }

    fn loose_end(&mut self, _walk: &Walk, _li: usize, l: &LooseEnd) {
        self.out.flow_slice(l.lane, l.ts, l.id, l.end);
        self.out.emit();
    }

    /// A zero-length slice in the `outside window` process, bound to the message's flow.
    fn edge_mark(&mut self, walk: &Walk, mark: &EdgeMark) {
        let window = walk.window;
        let (rank, t, id) = (mark.rank, mark.t, mark.id);
        let leaving = mark.leaving();
        let dir = if leaving { "flow_in" } else { "flow_out" };
        let label =
            serde_json::to_string(&window.outside_label(leaving, rank, t)).unwrap_or_default();
        let out = &mut self.out;
        out.sep();
        let _ = write!(
            out.line,
            "{{\"ph\":\"X\",\"pid\":{},\"tid\":0,\"ts\":{},\"dur\":0,\"name\":{label},\"cat\":\"window edge\",\"args\":{{\"rank\":{rank},\"time_s\":{:.9}}},\"bind_id\":{id},\"{dir}\":true}}",
            window.world_size(),
            us(window.clamp(t) as i64),
            window.seconds(t)
        );
        if leaving {
            out.summary.flows += 1;
        }
        out.summary.edge_marks += 1;
        out.emit();
    }

    fn finish(self, walk: &Walk, walked: Walked) -> Result<ChromeJsonSummary, ExportError> {
        let io = |e| ExportError::io(&self.path, e);
        let mut json = self.out;
        if let Some(e) = json.failed.take() {
            return Err(io(e));
        }
        json.w.write_all(b"\n]}\n").map_err(io)?;
        json.w.flush().map_err(io)?;
        let mut summary = json.summary;
        summary.events_read = walked.events_read;
        summary.messages_matched = walked.messages_matched;
        summary.messages_crossing = walked.messages_crossing;
        summary.window = walk.window.describe();
        summary.skipped = walked.skipped;
        Ok(summary)
    }
}

/// Writes `trace` as Chrome Trace Event JSON to `out`. `progress(done, total)` in events.
pub fn export(
    trace: &Trace,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ChromeJsonSummary, ExportError> {
    let window = Window::everything(trace.world_size);
    export_window(trace, out, &window, progress)
}

/// [`export`] of what lies in `window`: the slices that overlap it, cut to its edges; instants
/// and counter samples inside it. Ranks outside it are read (their messages are matched) but
/// not written.
pub fn export_window(
    trace: &Trace,
    out: &Path,
    window: &Window,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ChromeJsonSummary, ExportError> {
    exporter::run::<ChromeJson>(trace, window, out.to_path_buf(), progress)
}
