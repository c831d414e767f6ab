//! The windowed Perfetto export decodes only the chunks meeting its window (its arrows come from
//! the kept match index, not a matching pass) and shows what the whole run's export shows cut to
//! the window: the same slices, clipped, and every arrow with an end inside it between the same
//! slices (or to the edge track). One test in this file, so the process-wide count of decoded
//! chunks (`format::chunks_decoded`) is this test's alone.

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;

use common::*;
use format::synthetic::{HaloConfig, events};
use format::{Event, Region};
use trace::Trace;
use trace::window::{Edge, Window, WindowSpec};
use views::export::perfetto_proto::{self, ProtoOptions};

const RANKS: u32 = 4;
const ITERATIONS: u64 = 3_000;
/// Small chunks, so a trace of a few hundred thousand events has thousands of them.
const CHUNK_EVENTS: usize = 40;

/// The sequence of the edge marks' track: after every lane's (lane `li` is sequence `li + 1`).
const EDGE: u64 = u64::MAX;

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            break;
        }
    }
    v
}

/// The fields of one protobuf message: (number, varint or fixed value, bytes).
fn fields(b: &[u8]) -> Vec<(u32, u64, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let key = varint(b, &mut at);
        let (num, wire) = ((key >> 3) as u32, key & 7);
        match wire {
            0 => out.push((num, varint(b, &mut at), &b[0..0])),
            1 => {
                out.push((
                    num,
                    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()),
                    &b[0..0],
                ));
                at += 8;
            }
            2 => {
                let len = varint(b, &mut at) as usize;
                out.push((num, 0, &b[at..at + len]));
                at += len;
            }
            5 => {
                out.push((
                    num,
                    u64::from(u32::from_le_bytes(b[at..at + 4].try_into().unwrap())),
                    &b[0..0],
                ));
                at += 4;
            }
            w => panic!("wire type {w}"),
        }
    }
    out
}

/// Every `TracePacket` of a trace file, compressed chunks unpacked.
fn packets(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (num, _, p) in fields(bytes) {
        assert_eq!(num, 1);
        if let Some((_, _, z)) = fields(p).into_iter().find(|f| f.0 == 50) {
            let mut inner = Vec::new();
            flate2::read::ZlibDecoder::new(z)
                .read_to_end(&mut inner)
                .unwrap();
            out.extend(packets(&inner));
        } else {
            out.push(p.to_vec());
        }
    }
    out
}

/// A slice as a viewer shows it: sequence, begin, end, name.
type Slice = (u64, u64, u64, String);

/// What a viewer draws from an export: its slices, and its arrows as (send slice, receive slice)
/// where an edge mark stands for the end outside the window as `(EDGE, 0, 0, label)`.
#[derive(Default, Debug)]
struct Drawn {
    slices: Vec<Slice>,
    arrows: BTreeSet<(Slice, Slice)>,
}

fn drawn(path: &std::path::Path) -> Drawn {
    let bytes = std::fs::read(path).unwrap();
    let mut clock: HashMap<u64, u64> = HashMap::new();
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let mut open: HashMap<u64, Vec<(u64, String, Vec<u64>)>> = HashMap::new();
    let mut sends: HashMap<u64, Slice> = HashMap::new();
    let mut recvs: HashMap<u64, Slice> = HashMap::new();
    let mut out = Drawn::default();
    for p in packets(&bytes) {
        let f = fields(&p);
        let get = |n: u32| f.iter().find(|x| x.0 == n);
        let Some(&(_, seq, _)) = get(10) else {
            continue;
        };
        if let Some((_, _, d)) = get(12) {
            for (num, _, e) in fields(d) {
                if num == 2 {
                    let e = fields(e);
                    let iid = e.iter().find(|x| x.0 == 1).unwrap().1;
                    let name = e.iter().find(|x| x.0 == 2).unwrap().2;
                    names.insert((seq, iid), String::from_utf8(name.to_vec()).unwrap());
                }
            }
        }
        let Some(&(_, delta, _)) = get(8) else {
            continue;
        };
        let t = if get(58).is_some() {
            delta
        } else {
            let c = clock.entry(seq).or_default();
            *c += delta;
            *c
        };
        let Some((_, _, te)) = get(11) else {
            continue;
        };
        let te = fields(te);
        let ty = te.iter().find(|x| x.0 == 9).map_or(0, |x| x.1);
        let ids = |n: u32| {
            te.iter()
                .filter(|x| x.0 == n)
                .map(|x| x.1)
                .collect::<Vec<_>>()
        };
        let name = te
            .iter()
            .find(|x| x.0 == 10)
            .map(|x| names[&(seq, x.1)].clone())
            .or_else(|| {
                te.iter()
                    .find(|x| x.0 == 23)
                    .map(|x| String::from_utf8(x.2.to_vec()).unwrap())
            });
        match ty {
            1 => open
                .entry(seq)
                .or_default()
                .push((t, name.unwrap(), ids(47))),
            2 => {
                let (begin, name, outs) = open.get_mut(&seq).unwrap().pop().unwrap();
                let s = (seq, begin, t, name);
                for id in outs {
                    sends.insert(id, s.clone());
                }
                for id in ids(48) {
                    recvs.insert(id, s.clone());
                }
                out.slices.push(s);
            }
            3 => {
                let name = name.unwrap();
                if name.contains("outside window") {
                    let s = (EDGE, 0, 0, name);
                    for id in ids(47) {
                        sends.insert(id, s.clone());
                    }
                    for id in ids(48) {
                        recvs.insert(id, s.clone());
                    }
                }
            }
            _ => {}
        }
    }
    for (id, s) in sends {
        if let Some(r) = recvs.remove(&id) {
            out.arrows.insert((s, r));
        }
    }
    assert!(recvs.is_empty(), "arrows without a start: {recvs:?}");
    out.slices.sort();
    out
}

/// The whole run's drawing cut to `w`: slices overlapping it, clipped; arrows with an end in it,
/// the end outside replaced by its edge mark.
fn cut(full: &Drawn, w: &Window, rank_of: &BTreeMap<u64, u32>) -> Drawn {
    let inside = |s: &Slice, t: u64| w.has_rank(rank_of[&s.0]) && w.contains(t);
    let mut slices: Vec<Slice> = full
        .slices
        .iter()
        .filter(|s| w.has_rank(rank_of[&s.0]) && w.overlaps(s.1, s.2))
        .map(|s| {
            let (a, b) = w.clip(s.1, s.2);
            (s.0, a, b, s.3.clone())
        })
        .collect();
    slices.sort();
    let mut arrows = BTreeSet::new();
    for (send, recv) in &full.arrows {
        let (si, ri) = (inside(send, send.1), inside(recv, recv.2));
        let mark = |leaving: bool, s: &Slice, t: u64| {
            (EDGE, 0, 0, w.outside_label(leaving, rank_of[&s.0], t))
        };
        let clip = |s: &Slice| {
            let (a, b) = w.clip(s.1, s.2);
            (s.0, a, b, s.3.clone())
        };
        match (si, ri) {
            (true, true) => arrows.insert((clip(send), clip(recv))),
            (true, false) => arrows.insert((clip(send), mark(true, recv, recv.2))),
            (false, true) => arrows.insert((mark(false, send, send.1), clip(recv))),
            (false, false) => false,
        };
    }
    Drawn { slices, arrows }
}

#[test]
fn windowed_perfetto_export_reads_few_chunks_and_draws_the_whole_runs_cut() {
    let dir = temp_dir("window-export");
    // The halo exchange, with a region around every 50th call named by a string defined once at
    // the start (long before most windows).
    let ranks: Vec<RankTrace> = (0..RANKS)
        .map(|rank| {
            let mut out = vec![Event::StringDef {
                id: 7,
                text: "step".into(),
            }];
            let mut calls = 0;
            for e in events(&HaloConfig {
                world_size: RANKS,
                rank,
                iterations: ITERATIONS,
                ..Default::default()
            }) {
                if let Event::Call(c) = &e {
                    calls += 1;
                    if calls % 50 == 0 {
                        let (start, end) = (c.start, c.end);
                        let region = |time, begin| {
                            Event::Region(Region {
                                time,
                                name: 7,
                                begin,
                            })
                        };
                        out.extend([region(start, true), e, region(end, false)]);
                        continue;
                    }
                }
                out.push(e);
            }
            RankTrace {
                rank,
                ticks_per_sec: 2.0e9,
                streams: vec![(0, out)],
            }
        })
        .collect();
    write_trace(&dir, RANKS, &ranks, CHUNK_EVENTS);
    let trace = Trace::open(&*dir).unwrap();
    let metas = trace::scan::scan(&trace).unwrap();
    // One lane per rank: sequence `rank + 1`.
    let rank_of: BTreeMap<u64, u32> = (0..RANKS).map(|r| (u64::from(r) + 1, r)).collect();
    let span_s = {
        let w = WindowSpec::parse(Some("0"), None, None)
            .unwrap()
            .resolve(&metas, RANKS)
            .unwrap();
        w.seconds(w.to)
    };
    let at = |from: f64, to: f64, ranks: Option<&str>| {
        WindowSpec {
            from: Some(Edge::Seconds(from)),
            to: Some(Edge::Seconds(to)),
            ranks: ranks.map(|r| trace::window::parse_ranks(r).unwrap()),
        }
        .resolve(&metas, RANKS)
        .unwrap()
    };
    let export = |w: &Window, name: &str| {
        let out = dir.join(name);
        let before = format::chunks_decoded();
        perfetto_proto::export_window(&trace, &out, ProtoOptions::default(), w, &mut |_, _| {})
            .unwrap();
        (drawn(&out), format::chunks_decoded() - before)
    };
    let mut total = 0u64;
    for files in &trace.ranks {
        trace::open::for_each_event(files, |_| total += 1, |_, _| {}).unwrap();
    }
    assert!(total > 1_000, "{total} chunks");
    let (full, _) = export(&Window::everything(RANKS), "full.pftrace");
    assert!(full.arrows.len() > 1_000, "{} arrows", full.arrows.len());

    let windows = [
        ("1 % in the middle", at(0.6 * span_s, 0.61 * span_s, None)),
        ("1 % at the very start", at(0.0, 0.01 * span_s, None)),
        (
            "1 % of two ranks",
            at(0.2 * span_s, 0.21 * span_s, Some("1,3")),
        ),
    ];
    // The first windowed use makes the kept first pass and match index (a full matching pass).
    let _ = export(&windows[0].1, "first.pftrace");
    for (name, w) in &windows {
        let (win, decoded) = export(w, "window.pftrace");
        let fraction = decoded as f64 / total as f64;
        eprintln!(
            "{name}: {decoded} chunks decoded, of {total} ({fraction:.4}), {} slices, {} arrows",
            win.slices.len(),
            win.arrows.len()
        );
        assert!(fraction <= 0.05, "{name}: {decoded} of {total} chunks");
        let want = cut(&full, w, &rank_of);
        assert!(!want.slices.is_empty() && !want.arrows.is_empty(), "{name}");
        assert!(
            want.slices.iter().any(|s| s.3 == "step"),
            "{name}: no region"
        );
        assert!(
            want.arrows.iter().any(|(s, r)| s.0 == EDGE || r.0 == EDGE),
            "{name}: no arrow crosses the edge"
        );
        assert_eq!(win.slices, want.slices, "{name}: slices");
        let missing: Vec<_> = want.arrows.difference(&win.arrows).take(3).collect();
        let extra: Vec<_> = win.arrows.difference(&want.arrows).take(3).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{name}: arrows missing {missing:?}, extra {extra:?}"
        );
    }
}
