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
//! decimals. Events are written as the ranks are streamed, so memory holds one chunk per rank plus
//! the matched-message list (one entry per message).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::Path;

use format::raw::{CALL_RECORD_LEN, COMPLETION_RECORD_LEN};
use format::{Event, Marker, RawBuf};

use super::{CallKind, CommTable, End, Endpoints, ExportError, function_table};
use crate::clock::{MapCursor, TimeMap};
use crate::funcs::FuncClass;
use crate::rebuild::{matched_messages, scan};
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
    let (messages, report) = matched_messages(trace)?;
    let endpoints = Endpoints::new(&messages);
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let file = std::fs::File::create(out).map_err(|e| ExportError::io(out, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut summary = PerfettoSummary {
        messages_matched: report.messages,
        ..Default::default()
    };
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
        let mut index: HashMap<u32, u64> = HashMap::new();
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
                let idx = {
                    let i = index.entry(stream).or_default();
                    *i += 1;
                    *i - 1
                };
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
                        let mid = start + (end - start) / 2;
                        for &(m, end_kind) in endpoints.at(rank, stream, idx) {
                            let _ = match end_kind {
                                End::Send => write!(
                                    line,
                                    ",\n{{\"ph\":\"s\",\"id\":{m},\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"name\":\"message\",\"cat\":\"message\"}}",
                                    us(mid)
                                ),
                                End::Recv => write!(
                                    line,
                                    ",\n{{\"ph\":\"f\",\"bp\":\"e\",\"id\":{m},\"pid\":{rank},\"tid\":{stream},\"ts\":{},\"name\":\"message\",\"cat\":\"message\"}}",
                                    us(mid)
                                ),
                            };
                            summary.flows += 1;
                        }
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
