//! The walk every arrow-drawing export shares. For the whole run it is one happened-before pass
//! over every lane ([`for_each_match`]) that hands each format ([`Exporter`]) the definitions, each
//! record as drawn with the flow ends its call carries ([`super::flows`]) and the flow ends no call
//! carries; for a window, the same callbacks from the window's chunks and the kept match index,
//! with the marks of messages crossing the window's edge (`run_windowed`). The formats
//! ([`super::chrome_json`], [`super::perfetto_proto`]) only say how each of these is written.

use std::cell::RefCell;
use std::collections::HashMap;

use format::raw::{CallContext, call_record_len, completion_record_len};
use format::{Event, RawBuf};

use super::flows::{CallFlows, FlowBinder, LooseEnd, flow_id};
use super::{End, ExportError};
use reconstruct::hb::EventRef;
use reconstruct::match_index;
use reconstruct::matches::{MessageMatch, for_each_match};
use trace::Skipped;
use trace::Trace;
use trace::clock::{MapCursor, TimeMap};
use trace::definitions::RankMeta;
use trace::lanes::LaneId;
use trace::meta_cache::scan_for;
use trace::window::{Ends, Window, for_each_event_in};

/// What a format is told of the trace before any event, and consults while writing.
pub struct Walk<'t> {
    /// Every rank's first-pass metadata, in lane order.
    pub metas: &'t [RankMeta],
    pub window: &'t Window,
    /// Per lane (numbered rank by rank, streams ascending: [`FlowBinder::lane_index`]): its id,
    /// its rank's position in `metas`, and whether its rank is in the window.
    pub lanes: Vec<LaneId>,
    pub lane_rank: Vec<usize>,
    pub kept: Vec<bool>,
}

/// A matched message with one end inside the window and the other outside it: its outside end,
/// to be drawn as a mark at the window's edge (or at its own time, for a rank outside the window).
pub struct EdgeMark {
    /// The flow id of the message (that of its send).
    pub id: u64,
    /// The outside end: the receive when the message leaves the window, else the send.
    pub end: End,
    /// The rank and global time of the outside end.
    pub rank: u32,
    pub t: u64,
}

impl EdgeMark {
    pub fn leaving(&self) -> bool {
        self.end == End::Recv
    }
}

/// What the walk counted, for the format's summary.
pub struct Walked {
    pub events_read: u64,
    pub messages_matched: u64,
    pub messages_crossing: u64,
    pub skipped: Vec<Skipped>,
}

/// One output format of the walk. Callbacks come in trace order per lane, lanes interleaved.
pub trait Exporter: Sized {
    type Summary;
    /// Where and how to write.
    type Options;

    /// Opens the output and writes what precedes the events: the ranks' and lanes' definitions
    /// (only those of ranks in the window) and, when the window cuts, the edge marks' track.
    fn begin(walk: &Walk, options: Self::Options) -> Result<Self, ExportError>;

    /// One record of lane `li` as drawn (a call, suspension, marker, definition, ...), with the
    /// flow ends its call carries and its rank's buffer fill, already counting this record.
    fn record(
        &mut self,
        walk: &Walk,
        li: usize,
        e: &Event,
        flows: &mut CallFlows,
        fill: &mut BufferFill,
    );

    /// A flow end no call carries, on lane `li`, inside the window.
    fn loose_end(&mut self, walk: &Walk, li: usize, end: &LooseEnd);

    /// The outside end of a message crossing the window's edge.
    fn edge_mark(&mut self, walk: &Walk, mark: &EdgeMark);

    /// Ends the output; `walked` is what the walk counted.
    fn finish(self, walk: &Walk, walked: Walked) -> Result<Self::Summary, ExportError>;
}

/// Records between two samples of the buffer fill.
pub const FILL_SAMPLE_EVERY: u64 = 64;

/// The recorder's in-memory buffer size as a rank's events stream by: each event's raw record
/// size (`format::raw`: a call 55 bytes, a completion 25, any other event 9 + its body), for the
/// formats' `buffer fill` counter, which also resets it and decides when to sample it.
#[derive(Default)]
pub struct BufferFill {
    pub bytes: u64,
    /// The previous call as the recorder's buffer encoded it (kept per rank, not per thread,
    /// which misjudges a few bytes per thread switch).
    call_ctx: CallContext,
    /// Records since the last sample.
    pub since_sample: u64,
}

impl BufferFill {
    /// Empties the buffer when `flushed`: the rank wrote it out.
    pub fn empty_if(&mut self, flushed: bool) {
        if flushed {
            self.bytes = 0;
        }
    }

    /// Adds `e`'s record; `scratch` measures a non-call event with the reference buffer itself.
    fn add(&mut self, e: &Event, scratch: &mut RawBuf) {
        self.bytes += match e {
            Event::Call(c) => {
                let len = call_record_len(c, &self.call_ctx) as u64;
                self.call_ctx = CallContext {
                    prev_end: c.end,
                    prev_comm: c.comm,
                };
                len
            }
            Event::Completion(c) => completion_record_len(c) as u64,
            _ => {
                scratch.clear();
                scratch.push_event(e);
                scratch.bytes() as u64
            }
        };
    }
}

struct Driver<'t, E> {
    exporter: E,
    walk: Walk<'t>,
    binder: FlowBinder,
    flows: CallFlows,
    fills: Vec<BufferFill>,
    scratch: RawBuf,
    done: u64,
    total: u64,
}

impl<E: Exporter> Driver<'_, E> {
    fn on_event(&mut self, lane: LaneId, e: &Event, progress: &mut dyn FnMut(u64, u64)) {
        let drawn = super::as_drawn(e, |e| self.on_record(lane, e, progress));
        // One record, however many slices it gives.
        self.done -= drawn.saturating_sub(1);
    }

    fn on_record(&mut self, lane: LaneId, e: &Event, progress: &mut dyn FnMut(u64, u64)) {
        self.done += 1;
        if self.done.is_multiple_of(1 << 16) {
            progress(self.done, self.total);
        }
        let mut flows = std::mem::take(&mut self.flows);
        self.binder.on_event(lane, e, &mut flows);
        let Some(li) = self.binder.lane_index(lane) else {
            self.flows = flows;
            return;
        };
        let fill = &mut self.fills[self.walk.lane_rank[li]];
        fill.add(e, &mut self.scratch);
        self.exporter.record(&self.walk, li, e, &mut flows, fill);
        self.flows = flows;
        self.loose_ends();
    }

    fn loose_ends(&mut self) {
        let loose: Vec<LooseEnd> = self.binder.take_loose().collect();
        for l in loose {
            self.loose_end(l);
        }
    }

    /// A flow end no call carries; one outside the window has its edge mark instead.
    fn loose_end(&mut self, l: LooseEnd) {
        let Some(li) = self.binder.lane_index(l.lane) else {
            return;
        };
        if self.walk.kept[li] && self.walk.window.contains(l.ts.max(0) as u64) {
            self.exporter.loose_end(&self.walk, li, &l);
        }
    }

    fn on_match(&mut self, m: &MessageMatch) {
        self.binder.on_match(m);
    }
}

/// Walks `trace` through `exporter`: what lies in `window` is written; ranks outside it are not
/// written (their messages with an end in the window are edge marks). `progress(done, total)` in events.
pub fn run<E: Exporter>(
    trace: &Trace,
    window: &Window,
    options: E::Options,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<E::Summary, ExportError> {
    if !window.is_everything() {
        return run_windowed::<E>(trace, window, options, progress);
    }
    let metas = scan_for(trace, false)?;
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let binder = FlowBinder::new(&metas);
    let walk = walk_of(&metas, window, &binder);
    let exporter = E::begin(&walk, options)?;
    let driver = RefCell::new(Driver {
        exporter,
        walk,
        binder,
        flows: CallFlows::default(),
        fills: metas.iter().map(|_| BufferFill::default()).collect(),
        scratch: RawBuf::with_block_size(4096),
        done: 0,
        total,
    });
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    let report = for_each_match(
        trace,
        &metas,
        &maps,
        |map, t, cur| map.absolute(map.global_ns(t, cur)),
        |lane, e| driver.borrow_mut().on_event(lane, e, progress),
        |m| {
            let mut d = driver.borrow_mut();
            d.on_match(m);
            d.loose_ends();
        },
    )?;
    let mut driver = driver.into_inner();
    let binder = std::mem::replace(&mut driver.binder, FlowBinder::new(&[]));
    for l in binder.finish() {
        driver.loose_end(l);
    }
    let walked = Walked {
        events_read: driver.done,
        messages_matched: report.messages,
        // The whole run has no edge.
        messages_crossing: 0,
        skipped: metas.iter().flat_map(|m| m.skipped.clone()).collect(),
    };
    let summary = driver.exporter.finish(&driver.walk, walked)?;
    progress(total, total);
    Ok(summary)
}

/// The lanes of `metas` in the binder's numbering ([`FlowBinder::lane_index`]).
fn walk_of<'t>(metas: &'t [RankMeta], window: &'t Window, binder: &FlowBinder) -> Walk<'t> {
    let mut walk = Walk {
        metas,
        window,
        lanes: Vec::with_capacity(binder.lanes()),
        lane_rank: Vec::with_capacity(binder.lanes()),
        kept: Vec::with_capacity(binder.lanes()),
    };
    for (ri, meta) in metas.iter().enumerate() {
        let keep = window.has_rank(meta.rank);
        for &stream in &meta.streams {
            let lane = LaneId {
                rank: meta.rank,
                stream,
            };
            debug_assert_eq!(binder.lane_index(lane), Some(walk.lanes.len()));
            walk.lanes.push(lane);
            walk.lane_rank.push(ri);
            walk.kept.push(keep);
        }
    }
    walk
}

/// The flow ends of the messages meeting a window, by the event that carries them, from the kept
/// match index.
#[derive(Default)]
struct KeptFlows {
    /// A send's flow id, by its send event.
    outs: HashMap<EventRef, (u64, i64)>,
    /// The messages a call completed: flow id, receive end and send start, by completing event.
    ins: HashMap<EventRef, Vec<(u64, i64, i64)>>,
}

/// A windowed export: only the chunks meeting the window are decoded
/// ([`for_each_event_in`]), and the arrows and edge marks come from the kept match index
/// ([`match_index::for_each_match_meeting`]) instead of a matching pass over every lane. So
/// that nothing before the window is needed, a flow id is that of the message's send event as
/// the index names it ([`flow_id`] of its lane and `EventRef::index`, the index counted from
/// the chunk headers), a call carries an outgoing id only when a message it sent is matched,
/// lanes are written rank by rank in file order (not the matcher's schedule), communicators are
/// those of the kept first pass, and the buffer-fill counter starts empty at the window's first
/// chunk: paper-notes/views.md, "The windowed export without a matching pass".
fn run_windowed<E: Exporter>(
    trace: &Trace,
    window: &Window,
    options: E::Options,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<E::Summary, ExportError> {
    let metas = scan_for(trace, true)?;
    let total: u64 = metas.iter().map(|m| m.events).sum();
    let binder = FlowBinder::new(&metas);
    let walk = walk_of(&metas, window, &binder);
    let mut kept = KeptFlows::default();
    let mut marks = Vec::new();
    let read = match_index::for_each_match_meeting(trace, &metas, window, |m| {
        let Some(sli) = binder.lane_index(LaneId {
            rank: m.send.rank,
            stream: m.send.stream,
        }) else {
            return;
        };
        let id = flow_id(sli, m.send.index);
        let ends = window.ends(m.source, m.send_start, m.dest, m.recv_end);
        if matches!(ends, Ends::Both | Ends::SendOnly) {
            kept.outs.insert(m.send, (id, m.send_start as i64));
        }
        if matches!(ends, Ends::Both | Ends::RecvOnly) {
            kept.ins.entry(m.recv_done).or_default().push((
                id,
                m.recv_end as i64,
                m.send_start as i64,
            ));
        }
        if let Some(leaving) = ends.leaving() {
            let (end, rank, t) = if leaving {
                (End::Recv, m.dest, m.recv_end)
            } else {
                (End::Send, m.source, m.send_start)
            };
            marks.push(EdgeMark { id, end, rank, t });
        }
    })?;
    let mut exporter = E::begin(&walk, options)?;
    for mark in &marks {
        exporter.edge_mark(&walk, mark);
    }
    let mut flows = CallFlows::default();
    let mut scratch = RawBuf::with_block_size(4096);
    let mut done = 0u64;
    let mut skipped: Vec<Skipped> = metas.iter().flat_map(|m| m.skipped.clone()).collect();
    let mut loose = Vec::new();
    for meta in &metas {
        let Some(files) = trace.ranks.iter().find(|f| f.rank == meta.rank) else {
            continue;
        };
        if !window.has_rank(meta.rank) {
            continue;
        }
        let Some(first) = meta.streams.first().and_then(|&stream| {
            binder.lane_index(LaneId {
                rank: meta.rank,
                stream,
            })
        }) else {
            continue;
        };
        // The communicators and strings defined before the window, from the kept first pass
        // (its last definition of an id; those in the window's chunks redefine as they come).
        let comms = meta.comms.iter().map(|(id, members)| Event::CommDef {
            id: *id,
            members: members.to_vec(),
        });
        let strings = meta.strings.iter().map(|(id, text)| Event::StringDef {
            id: *id,
            text: text.clone(),
        });
        for def in comms.chain(strings) {
            exporter.record(&walk, first, &def, &mut flows, &mut BufferFill::default());
        }
        let map = TimeMap::new(meta);
        let mut fill = BufferFill::default();
        // Per stream: the next event's index (as the match index counts them) and clock cursor.
        let lanes: RefCell<HashMap<u32, (u64, MapCursor)>> = RefCell::default();
        let read = for_each_event_in(
            files,
            &map,
            window,
            |c| lanes.borrow_mut().entry(c.stream).or_default().0 = c.first_index,
            |stream, e| {
                let mut lanes = lanes.borrow_mut();
                let (next, cur) = lanes.entry(stream).or_default();
                let at = EventRef {
                    rank: meta.rank,
                    stream,
                    index: *next,
                };
                *next += 1;
                done += 1;
                if done.is_multiple_of(1 << 16) {
                    progress(done, total);
                }
                let lane = LaneId {
                    rank: meta.rank,
                    stream,
                };
                let Some(li) = binder.lane_index(lane) else {
                    return;
                };
                let mut e = e.clone();
                trace::times::for_each_time(&mut e, |t| *t = map.absolute(map.global_ns(*t, cur)));
                let out = kept.outs.remove(&at);
                let ins = kept.ins.remove(&at).unwrap_or_default();
                // A folded poll run completes at its last poll: its ends sit there.
                let mut left = super::as_drawn(&e, |_| {});
                let mut ends = Some((out, ins));
                super::as_drawn(&e, |d| {
                    left -= 1;
                    flows.out = None;
                    flows.ins.clear();
                    if left == 0
                        && let Some((out, ins)) = ends.take()
                    {
                        if matches!(d, Event::Call(_)) {
                            flows.out = out.map(|(id, _)| id);
                            flows
                                .ins
                                .extend(ins.iter().map(|&(id, _, send)| (id, send)));
                        } else {
                            // Flows bind to calls only; an end elsewhere keeps the match's time.
                            loose.extend(out.map(|(id, ts)| {
                                let end = End::Send;
                                (li, LooseEnd { id, end, lane, ts })
                            }));
                            loose.extend(ins.iter().map(|&(id, ts, _)| {
                                let end = End::Recv;
                                (li, LooseEnd { id, end, lane, ts })
                            }));
                        }
                    }
                    fill.add(d, &mut scratch);
                    exporter.record(&walk, li, d, &mut flows, &mut fill);
                });
            },
        )?;
        skipped.extend(read.skipped);
    }
    // Ends whose event was not among the window's chunks (not expected: an event with a time in
    // the window lies in a chunk meeting it) are placed on their own at the match's time.
    for (at, (id, ts)) in kept.outs {
        loose.extend(lane_at(&binder, at).map(|(li, lane)| {
            (
                li,
                LooseEnd {
                    id,
                    end: End::Send,
                    lane,
                    ts,
                },
            )
        }));
    }
    for (at, ins) in kept.ins {
        for (id, ts, _) in ins {
            loose.extend(lane_at(&binder, at).map(|(li, lane)| {
                (
                    li,
                    LooseEnd {
                        id,
                        end: End::Recv,
                        lane,
                        ts,
                    },
                )
            }));
        }
    }
    loose.sort_by_key(|(_, l)| (l.id, l.end == End::Recv));
    for (li, l) in loose {
        if walk.kept[li] && window.contains(l.ts.max(0) as u64) {
            exporter.loose_end(&walk, li, &l);
        }
    }
    let walked = Walked {
        events_read: done,
        messages_matched: read.messages,
        messages_crossing: marks.len() as u64,
        skipped,
    };
    let summary = exporter.finish(&walk, walked)?;
    progress(total, total);
    Ok(summary)
}

fn lane_at(binder: &FlowBinder, at: EventRef) -> Option<(usize, LaneId)> {
    let lane = LaneId {
        rank: at.rank,
        stream: at.stream,
    };
    binder.lane_index(lane).map(|li| (li, lane))
}
