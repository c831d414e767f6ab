//! Chrome Trace Event JSON, as opened by ui.perfetto.dev and chrome://tracing.
//!
//! - one process per rank (`pid` = world rank), one thread per stream (`tid` = stream);
//! - every MPI call a complete event (`ph: "X"`) named after the function, category = its kind,
//!   with `args` peer (world rank), tag, bytes, communicator, root and request;
//! - every matched point-to-point message one flow pair: `ph: "s"` inside the send call and
//!   `ph: "f"` with `bp: "e"` inside the call that completed the receive, both placed at the middle
//!   of their call so that they bind to that enclosing slice;
//! - suspensions as slices in category `evenflush`, and when this rank wrote its trace in one, a
//!   nested `flush` slice over its first `write_ns` (the write happens first, the rest of the
//!   suspension waits for Z); markers as instant events;
//! - a counter `buffer fill` per rank: the recorder's in-memory buffer size, derived by adding each
//!   event's raw record size (`format::raw`: a call 55 bytes, a completion 25, any other event 9 +
//!   its body) and dropping to 0 at every suspension in which the rank flushed and at every local
//!   flush. Sampled every 64 events and at every drop.
//!
//! Times are the global clock (rank 0's, suspensions kept), in microseconds with nanosecond
//! decimals. The flows are written first, by the happened-before pass as it matches each message
//! (the format does not care about order); then the slices, rank by rank. Neither keeps a list of
//! the messages: the matching holds what is in flight, the flows the few calls a match may still
//! refer to.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::Path;

use format::raw::{CALL_RECORD_LEN, COMPLETION_RECORD_LEN};
use format::{Event, Marker, RawBuf};

use super::{CallKind, CommTable, End, ExportError, for_each_match, function_table};
use crate::clock::{MapCursor, RankMeta, TimeMap};
use crate::funcs::FuncClass;
use crate::hb::MessageMatch;
use crate::lanes::LaneId;
use crate::rebuild::scan;
use crate::trace::{Skipped, Trace, for_each_event};

/// What the export wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PerfettoSummary {
    pub events_read: u64,
    pub slices: u64,
    pub flows: u64,
    pub counters: u64,
    pub messages_matched: u64,
    pub skipped: Vec<Skipped>,
}

const COUNTER_EVERY: u64 = 64;

/// Nanoseconds as microseconds with three decimals (exact, no float formatting).
fn us(ns: i64) -> String {
    let ns = ns.max(0);
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// Writes `trace` as Chrome Trace Event JSON to `out`. `progress(done, total)` in events.
pub fn export(
    trace: &Trace,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PerfettoSummary, ExportError> {
    let metas = scan(trace)?;
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let file = std::fs::File::create(out).map_err(|e| ExportError::io(out, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut summary = PerfettoSummary::default();
    let mut line = String::with_capacity(512);
    let io = |e| ExportError::io(out, e);
    w.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
        .map_err(io)?;
    let mut first = true;
    let mut emit = |w: &mut BufWriter<std::fs::File>, text: &str| -> std::io::Result<()> {
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        w.write_all(text.as_bytes())
    };
    let (flows, report) = write_flows(trace, &metas, out, |text| emit(&mut w, text))?;
    summary.flows = flows;
    summary.messages_matched = report.messages;
    let mut done = 0u64;
    let mut scratch = RawBuf::with_block_size(4096);
    for (files, meta) in trace.ranks.iter().zip(&metas) {
        let rank = files.rank;
        let map = TimeMap::new(meta);
        let funcs = function_table(meta);
        emit(
            &mut w,
            &format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{rank},\"args\":{{\"name\":\"rank {rank}\"}}}}"
            ),
        )
        .map_err(io)?;
        emit(
            &mut w,
            &format!(
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{rank},\"args\":{{\"sort_index\":{rank}}}}}"
            ),
        )
        .map_err(io)?;
        for s in &meta.streams {
            emit(
                &mut w,
                &format!(
                    "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{rank},\"tid\":{s},\"args\":{{\"name\":\"thread {s}\"}}}}"
                ),
            )
            .map_err(io)?;
        }
        let mut cursors: HashMap<u32, MapCursor> = HashMap::new();
        let mut comms = CommTable::default();
        let mut fill: u64 = 0;
        let mut since_counter = 0u64;
        let mut last_ns: i64 = 0;
        let mut failed: Option<std::io::Error> = None;
        let (_, skipped) = for_each_event(
            files,
            |chunk| {
                done += chunk.events;
                progress(done, total);
            },
            |stream, e| {
                if failed.is_some() {
                    return;
                }
                let cur = cursors.entry(stream).or_default();
                let mut g = |t: u64| map.absolute(map.global_ns(t, cur)) as i64;
                line.clear();
                let mut counter_reset = false;
                match e {
                    Event::Call(c) => {
                        fill += CALL_RECORD_LEN as u64;
                        let (name, class) = funcs
                            .get(&c.func)
                            .cloned()
                            .unwrap_or_else(|| (format!("function#{}", c.func), FuncClass::Other));
                        let start = g(c.start);
                        let end = g(c.end).max(start);
                        last_ns = end;
                        let kind = CallKind::of(class);
                        let peer = comms
                            .world_rank(c.comm, c.peer)
                            .map_or_else(|| c.peer.to_string(), |p| p.to_string());
                        let root = comms
                            .world_rank(c.comm, c.root)
                            .map_or_else(|| c.root.to_string(), |p| p.to_string());
                        let comm = if c.comm == u32::MAX {
                            "null".to_string()
                        } else {
                            c.comm.to_string()
                        };
                        let _ = write!(
                            line,
                            "{{\"ph\":\"X\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"dur\":{},\"name\":\"{name}\",\"cat\":\"{}\",\"args\":{{\"peer\":{peer},\"tag\":{},\"bytes\":{},\"comm\":{comm},\"root\":{root},\"request\":{}}}}}",
                            us(start),
                            us(end - start),
                            kind.label(),
                            c.tag,
                            c.bytes,
                            c.request
                        );
                        summary.slices += 1;
                    }
                    Event::Completion(_) => fill += COMPLETION_RECORD_LEN as u64,
                    Event::Suspension(s) => {
                        fill += misc_len(&mut scratch, e);
                        let start = g(s.start);
                        let end = g(s.end).max(start);
                        last_ns = end;
                        let _ = write!(
                            line,
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
                        summary.slices += 1;
                        if s.flushed && s.bytes_raw > 0 {
                            let write = (s.write_ns as i64).min(end - start);
                            let _ = write!(
                                line,
                                ",\n{{\"ph\":\"X\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"dur\":{},\"name\":\"flush\",\"cat\":\"evenflush\",\"args\":{{\"bytes_raw\":{},\"bytes_stored\":{}}}}}",
                                us(start),
                                us(write),
                                s.bytes_raw,
                                s.bytes_stored
                            );
                            summary.slices += 1;
                            let _ = write!(
                                line,
                                ",\n{{\"ph\":\"C\",\"pid\":{rank},\"ts\":{},\"name\":\"buffer fill\",\"args\":{{\"bytes\":{fill}}}}}",
                                us(start)
                            );
                            summary.counters += 1;
                            fill = 0;
                            counter_reset = true;
                        }
                    }
                    Event::Marker(m) => {
                        fill += misc_len(&mut scratch, e);
                        let (time, what) = match *m {
                            Marker::LocalFlush { time, .. } => (time, "local flush"),
                            Marker::RecordingStopped { time } => (time, "recording stopped"),
                            Marker::Lost { time, .. } => (time, "events lost"),
                            Marker::AbnormalEnd { time, .. } => (time, "abnormal end"),
                            Marker::InitDone { time } => (time, "MPI_Init done"),
                            Marker::FinalizeStart { time } => (time, "MPI_Finalize entered"),
                            Marker::Stuck { time, .. } => (time, "stuck call"),
                        };
                        let t = g(time);
                        last_ns = t;
                        let _ = write!(
                            line,
                            "{{\"ph\":\"i\",\"s\":\"t\",\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"name\":\"{what}\",\"cat\":\"evenflush\",\"args\":{{\"marker\":{}}}}}",
                            us(t),
                            serde_json::to_string(&format!("{m:?}")).unwrap_or_default()
                        );
                        if let Marker::LocalFlush { .. } = m {
                            let _ = write!(
                                line,
                                ",\n{{\"ph\":\"C\",\"pid\":{rank},\"ts\":{},\"name\":\"buffer fill\",\"args\":{{\"bytes\":{fill}}}}}",
                                us(t)
                            );
                            summary.counters += 1;
                            fill = 0;
                            counter_reset = true;
                        }
                    }
                    Event::CommDef { id, members } => {
                        fill += misc_len(&mut scratch, e);
                        comms.define(*id, members);
                    }
                    _ => fill += misc_len(&mut scratch, e),
                }
                since_counter += 1;
                if counter_reset || since_counter >= COUNTER_EVERY {
                    since_counter = 0;
                    if !line.is_empty() {
                        line.push_str(",\n");
                    }
                    let _ = write!(
                        line,
                        "{{\"ph\":\"C\",\"pid\":{rank},\"ts\":{},\"name\":\"buffer fill\",\"args\":{{\"bytes\":{fill}}}}}",
                        us(last_ns)
                    );
                    summary.counters += 1;
                }
                if !line.is_empty()
                    && let Err(err) = emit(&mut w, &line)
                {
                    failed = Some(err);
                }
            },
        )?;
        if let Some(err) = failed {
            return Err(io(err));
        }
        summary.skipped.extend(skipped);
    }
    summary.events_read = done;
    w.write_all(b"\n]}\n").map_err(io)?;
    w.flush().map_err(io)?;
    progress(total, total);
    Ok(summary)
}

/// Raw in-memory size of a non-call event, measured by the reference buffer itself.
fn misc_len(scratch: &mut RawBuf, e: &Event) -> u64 {
    scratch.clear();
    scratch.push_event(e);
    scratch.bytes() as u64
}

/// What a call can be to the flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// It may be the send end of a message.
    Send,
    /// It creates a persistent send request (whose `Start`s send) or a receive one.
    SendInit,
    RecvInit,
    Start,
    Other,
}

impl Role {
    fn of(name: &str) -> Role {
        if matches!(
            FuncClass::of(name),
            FuncClass::Send | FuncClass::Isend | FuncClass::SendRecv
        ) {
            return Role::Send;
        }
        let base = name
            .strip_prefix("MPI_")
            .or_else(|| name.strip_prefix("PMPI_"))
            .map(str::to_ascii_lowercase);
        match base.as_deref() {
            Some("send_init" | "bsend_init" | "ssend_init" | "rsend_init") => Role::SendInit,
            Some("recv_init") => Role::RecvInit,
            Some("start" | "startall") => Role::Start,
            _ => Role::Other,
        }
    }
}

/// A flow end waiting for its call to be shown: flow id, which end, and where to put it should
/// the call never come (the time the match gave).
type PendingEnd = (u64, End, i64);

#[derive(Default)]
struct LaneFlows {
    /// Events of the lane shown so far: the index of the next one.
    shown: u64,
    /// Flow ends matched before their call was shown (a receive's completion is held until its
    /// message is matched), by event index.
    pending: HashMap<u64, Vec<PendingEnd>>,
    /// Middles of shown calls that may still be matched as a send, by event index. Sends whose
    /// receive is not seen yet: what the matching itself holds as unmatched sends.
    sends: HashMap<u64, i64>,
}

struct Flows<W> {
    write: W,
    line: String,
    lanes: Vec<LaneFlows>,
    lane_of: HashMap<LaneId, usize>,
    /// Per rank (by world rank): the role of each function id, and the requests of persistent
    /// sends.
    roles: HashMap<u32, (HashMap<format::FunctionId, Role>, HashSet<u64>)>,
    next_id: u64,
    written: u64,
    failed: Option<std::io::Error>,
}

impl<W: FnMut(&str) -> std::io::Result<()>> Flows<W> {
    fn put(&mut self, id: u64, end: End, lane: LaneId, ts: i64) {
        if self.failed.is_some() {
            return;
        }
        self.line.clear();
        let (rank, stream) = (lane.rank, lane.stream);
        let _ = match end {
            End::Send => write!(
                self.line,
                "{{\"ph\":\"s\",\"id\":{id},\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"name\":\"message\",\"cat\":\"message\"}}",
                us(ts)
            ),
            End::Recv => write!(
                self.line,
                "{{\"ph\":\"f\",\"bp\":\"e\",\"id\":{id},\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"name\":\"message\",\"cat\":\"message\"}}",
                us(ts)
            ),
        };
        self.written += 1;
        if let Err(e) = (self.write)(&self.line) {
            self.failed = Some(e);
        }
    }

    fn on_event(&mut self, lane_id: LaneId, e: &Event) {
        let Some(&li) = self.lane_of.get(&lane_id) else {
            return;
        };
        let lane = &mut self.lanes[li];
        let index = lane.shown;
        lane.shown += 1;
        let Event::Call(c) = e else {
            // Flows bind to calls only; an end pointing elsewhere keeps the match's time.
            if let Some(ends) = lane.pending.remove(&index) {
                for (id, end, ts) in ends {
                    self.put(id, end, lane_id, ts);
                }
            }
            return;
        };
        // Placed at the middle of the call, so that the flow binds to its slice.
        let start = c.start as i64;
        let end = (c.end as i64).max(start);
        let mid = start + (end - start) / 2;
        let mut sent = false;
        if let Some(ends) = lane.pending.remove(&index) {
            for (id, end, _) in ends {
                sent |= end == End::Send;
                self.put(id, end, lane_id, mid);
            }
        }
        let Some((roles, send_requests)) = self.roles.get_mut(&lane_id.rank) else {
            return;
        };
        let may_send = match roles.get(&c.func).copied().unwrap_or(Role::Other) {
            Role::Send => true,
            Role::Start => send_requests.contains(&c.request),
            Role::SendInit => {
                send_requests.insert(c.request);
                false
            }
            Role::RecvInit => {
                send_requests.remove(&c.request);
                false
            }
            Role::Other => false,
        };
        // A call sends one message at most: matched already, it is not remembered.
        if may_send && !sent {
            self.lanes[li].sends.insert(index, mid);
        }
    }

    fn on_match(&mut self, m: &MessageMatch) {
        let id = self.next_id;
        self.next_id += 1;
        for (at, end, fallback) in [
            (m.send, End::Send, m.send_start as i64),
            (m.recv_done, End::Recv, m.recv_end as i64),
        ] {
            let lane_id = LaneId {
                rank: at.rank,
                stream: at.stream,
            };
            let Some(&li) = self.lane_of.get(&lane_id) else {
                self.put(id, end, lane_id, fallback);
                continue;
            };
            let lane = &mut self.lanes[li];
            if at.index >= lane.shown {
                lane.pending
                    .entry(at.index)
                    .or_default()
                    .push((id, end, fallback));
                continue;
            }
            // Shown already: a send is remembered; anything else (not expected) keeps the time
            // the match gave, which is an edge of the call.
            let ts = match end {
                End::Send => lane.sends.remove(&at.index).unwrap_or(fallback),
                End::Recv => fallback,
            };
            self.put(id, end, lane_id, ts);
        }
    }
}

/// Writes one flow pair per matched message through `write`, as the matching finds them.
/// Returns the number of flow events written and the matching's report.
fn write_flows(
    trace: &Trace,
    metas: &[RankMeta],
    out: &Path,
    write: impl FnMut(&str) -> std::io::Result<()>,
) -> Result<(u64, crate::hb::HbReport), ExportError> {
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    let mut lane_of = HashMap::new();
    for m in metas {
        for &stream in &m.streams {
            let n = lane_of.len();
            lane_of.insert(
                LaneId {
                    rank: m.rank,
                    stream,
                },
                n,
            );
        }
    }
    let roles = metas
        .iter()
        .map(|m| {
            let roles = m
                .functions
                .iter()
                .map(|(id, name)| (*id, Role::of(name)))
                .collect();
            (m.rank, (roles, HashSet::new()))
        })
        .collect();
    let flows = RefCell::new(Flows {
        write,
        line: String::with_capacity(256),
        lanes: (0..lane_of.len()).map(|_| LaneFlows::default()).collect(),
        lane_of,
        roles,
        next_id: 0,
        written: 0,
        failed: None,
    });
    let report = for_each_match(
        trace,
        metas,
        &maps,
        |map, t, cur| map.absolute(map.global_ns(t, cur)),
        |lane, e| flows.borrow_mut().on_event(lane, e),
        |m| flows.borrow_mut().on_match(m),
    )?;
    let mut flows = flows.into_inner();
    // Ends whose event never came (a lane cut short): at the time the match gave.
    let mut left: Vec<(LaneId, PendingEnd)> = flows
        .lane_of
        .iter()
        .flat_map(|(&lane, &li)| {
            flows.lanes[li]
                .pending
                .values()
                .flatten()
                .map(move |&end| (lane, end))
        })
        .collect();
    left.sort_by_key(|(_, (id, end, _))| (*id, *end == End::Recv));
    for (lane, (id, end, ts)) in left {
        flows.put(id, end, lane, ts);
    }
    if let Some(e) = flows.failed {
        return Err(ExportError::io(out, e));
    }
    Ok((flows.written, report))
}
