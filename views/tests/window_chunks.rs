//! Windowed reads pass over the chunks outside the window and still hand out every event that
//! overlaps it (`trace::window::for_each_event_in`): the same events as reading every chunk and
//! filtering, for a narrow window, one at the very start, one spanning a suspension and one
//! inside a call that began long before it. One test in this file, so the process-wide count of
//! decoded chunks (`format::chunks_decoded`) is this test's alone.

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;

use common::*;
use format::synthetic::{HaloConfig, events};
use format::{ClockSample, Event, Suspension};
use trace::Trace;
use trace::clock::{MapCursor, TimeMap};
use trace::open::for_each_event;
use trace::scan::scan;
use trace::window::{Edge, Window, WindowSpec, for_each_event_in};
use views::export::timeline::{self, TimelineOptions};

const RANKS: u32 = 4;
const ITERATIONS: u64 = 3_000;
/// Small chunks, so a trace of a few hundred thousand events has thousands of them.
const CHUNK_EVENTS: usize = 40;

/// Each rank: the synthetic halo exchange on stream 0 with a suspension a third of the way
/// through and a clock sample now and then (so the rank's map is not one straight line), and a
/// second stream holding one call that lasts from just after the start to near the end.
fn write(dir: &std::path::Path, pause: bool) {
    let ranks: Vec<RankTrace> = (0..RANKS)
        .map(|rank| {
            let cfg = HaloConfig {
                world_size: RANKS,
                rank,
                iterations: ITERATIONS,
                ..Default::default()
            };
            let ev = events(&cfg);
            let times: Vec<u64> = ev
                .iter()
                .filter_map(|e| match e {
                    Event::Call(c) => Some(c.end),
                    _ => None,
                })
                .collect();
            let (first, last) = (times[0], *times.last().unwrap());
            let mut out = Vec::with_capacity(ev.len() + 64);
            let mut calls = 0usize;
            let mut shift = 0u64;
            for mut e in ev {
                if let Event::Call(c) = &mut e {
                    c.start += shift;
                    c.end += shift;
                    calls += 1;
                    if pause && calls == times.len() / 3 {
                        // A pause of a millisecond, after which the rank's clock runs on.
                        let pause = 2_000_000;
                        let end = c.end;
                        out.push(e);
                        out.push(Event::Suspension(Box::new(Suspension {
                            seq: 0,
                            start: end + 10,
                            end: end + 10 + pause,
                            z_ns: pause / 2,
                            ..Default::default()
                        })));
                        shift += pause + 20;
                        continue;
                    }
                    if calls.is_multiple_of(5_000) {
                        out.push(Event::Clock(ClockSample {
                            local: c.end,
                            offset_ns: 300.0 * f64::from(rank) + calls as f64 / 1_000.0,
                            rtt_ns: 1_000.0,
                            ..Default::default()
                        }));
                    }
                }
                if let Event::Marker(format::Marker::FinalizeStart { time }) = &mut e {
                    *time += shift;
                }
                out.push(e);
            }
            let long = call(SEND, first + 1_000, last + shift - 1_000, 0, 99);
            RankTrace {
                rank,
                ticks_per_sec: 2.0e9,
                streams: vec![(0, out), (1, vec![Event::Call(long)])],
            }
        })
        .collect();
    write_trace(dir, RANKS, &ranks, CHUNK_EVENTS);
}

/// An event's times on the global axis (absolute ns), lowest and highest; `None` for one without
/// a time.
fn span(map: &TimeMap, e: &Event) -> Option<(u64, u64)> {
    let mut e = e.clone();
    let mut cur = MapCursor::default();
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    trace::times::for_each_time(&mut e, |t| {
        let g = map.absolute(map.global_ns(*t, &mut cur));
        lo = lo.min(g);
        hi = hi.max(g);
    });
    (lo <= hi).then_some((lo, hi))
}

type Kept = Vec<(u32, u32, Event)>;

/// Metadata as text, its function table in id order (a hash map's order is not its content).
fn canonical(metas: &[trace::definitions::RankMeta]) -> String {
    metas
        .iter()
        .map(|m| {
            let functions: std::collections::BTreeMap<_, _> = m.functions.iter().collect();
            let mut m = m.clone();
            m.functions.clear();
            format!("{m:?} {functions:?}\n")
        })
        .collect()
}

/// `f`'s result and the chunks it decoded.
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = format::chunks_decoded();
    let out = f();
    (out, format::chunks_decoded() - before)
}

fn overlapping(map: &TimeMap, w: &Window, rank: u32, stream: u32, e: &Event, out: &mut Kept) {
    if let Some((a, b)) = span(map, e)
        && w.has_rank(rank)
        && w.overlaps(a, b)
    {
        out.push((rank, stream, e.clone()));
    }
}

#[test]
fn windowed_reads_skip_chunks_and_keep_every_overlapping_event() {
    let dir = temp_dir("window-chunks");
    write(&dir, true);
    let trace = Trace::open(&*dir).unwrap();
    let metas = scan(&trace).unwrap();
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    let everything = Window::everything(RANKS);
    let whole = WindowSpec::default().resolve(&metas, RANKS).unwrap();
    assert!(whole.is_everything());
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
    // Where rank 0's suspension began, in seconds since the start.
    let sus = &metas[0].suspensions[0];
    let sus_at = maps[0].absolute(maps[0].global_ns(sus.start, &mut MapCursor::default()));
    let sus_s = at(0.0, span_s, None).seconds(sus_at);
    let windows = [
        (
            "1 % in the middle",
            at(0.6 * span_s, 0.61 * span_s, None),
            true,
        ),
        ("1 % at the very start", at(0.0, 0.01 * span_s, None), true),
        (
            "across the suspension",
            at(sus_s - 0.005 * span_s, sus_s + 0.02 * span_s, None),
            false,
        ),
        (
            "1 % of two ranks",
            at(0.2 * span_s, 0.21 * span_s, Some("1,3")),
            true,
        ),
    ];
    assert!(windows[2].1.contains(sus_at), "{}", windows[2].1);

    let mut total_chunks = 0u64;
    let mut full: Vec<Kept> = vec![Vec::new(); windows.len()];
    for (files, map) in trace.ranks.iter().zip(&maps) {
        let rank = files.rank;
        for_each_event(
            files,
            |_| total_chunks += 1,
            |stream, e| {
                for (k, (_, w, _)) in windows.iter().enumerate() {
                    overlapping(map, w, rank, stream, e, &mut full[k]);
                }
            },
        )
        .unwrap();
    }
    assert!(total_chunks > 1_000, "{total_chunks} chunks");

    for (k, (name, w, narrow)) in windows.iter().enumerate() {
        let before = format::chunks_decoded();
        let mut kept = Vec::new();
        let (mut decoded, mut passed) = (0u64, 0u64);
        for (files, map) in trace.ranks.iter().zip(&maps) {
            let read = for_each_event_in(
                files,
                map,
                w,
                |_| {},
                |stream, e| overlapping(map, w, files.rank, stream, e, &mut kept),
            )
            .unwrap();
            assert!(read.skipped.is_empty());
            decoded += read.decoded;
            passed += read.passed;
        }
        assert_eq!(format::chunks_decoded() - before, decoded, "{name}");
        assert_eq!(decoded + passed, total_chunks, "{name}");
        assert!(!full[k].is_empty(), "{name}: nothing in the window");
        assert_eq!(kept, full[k], "{name}: {w}");
        // Every rank's long call on stream 1 began long before the window and overlaps it.
        let long = kept.iter().filter(|(_, s, _)| *s == 1).count();
        assert_eq!(long, w.ranks().len(), "{name}");
        let fraction = decoded as f64 / total_chunks as f64;
        eprintln!("{name}: {decoded} of {total_chunks} chunks decoded ({fraction:.4})");
        if *narrow {
            assert!(fraction <= 0.05, "{name}: {decoded} of {total_chunks}");
        }
    }

    // The timeline draws from the chunks that meet its window (on the global axis) and matches
    // messages over all of them. Without suspensions its reconstructed axis is the same axis,
    // drawn from every chunk: the two must count the same.
    let calm = temp_dir("window-chunks-calm");
    write(&calm, false);
    let calm_trace = Trace::open(&*calm).unwrap();
    let calm_metas = scan(&calm_trace).unwrap();
    let calm_span = {
        let w = WindowSpec::parse(Some("0"), None, None)
            .unwrap()
            .resolve(&calm_metas, RANKS)
            .unwrap();
        w.seconds(w.to)
    };
    let png = calm.join("timeline.png");
    let draw = |reconstructed: bool| {
        let from = format!("{}", 0.4 * calm_span);
        let to = format!("{}", 0.41 * calm_span);
        let opts = TimelineOptions {
            window: WindowSpec::parse(Some(&from), Some(&to), Some("0-2")).unwrap(),
            reconstructed,
            width: 800,
            max_arrows: 0,
        };
        let before = format::chunks_decoded();
        let s = timeline::render(&calm_trace, &png, &opts, &mut |_, _| {}).unwrap();
        (
            serde_json::to_string(&s).unwrap(),
            format::chunks_decoded() - before,
        )
    };
    // The first draw also makes and keeps the first pass; the second reads it back.
    let (whole, whole_chunks) = draw(true);
    let (windowed, windowed_chunks) = draw(false);
    assert_eq!(windowed, whole);
    assert!(windowed.contains("\"calls_in_window\":"), "{windowed}");
    assert!(!windowed.contains("\"calls_in_window\":0,"), "{windowed}");
    eprintln!(
        "timeline of 1 %: {windowed_chunks} chunks decoded, {whole_chunks} when drawing from all"
    );
    assert!(windowed_chunks < whole_chunks);

    // The first pass, kept: made once, then read back for a few chunks per rank, the same
    // metadata; a rank file that changed has its pass made again.
    let fresh = canonical(&scan(&trace).unwrap());
    let (first, made) = counted(|| trace::meta_cache::scan_cached(&trace).unwrap());
    let (again, reused) = counted(|| trace::meta_cache::scan_cached(&trace).unwrap());
    assert_eq!(canonical(&first), fresh);
    assert_eq!(canonical(&again), fresh);
    assert!(made >= total_chunks, "{made} of {total_chunks}");
    assert!(
        reused <= 4 * u64::from(RANKS),
        "{reused} chunks to read the kept pass"
    );
    eprintln!("first pass: {made} chunks to make and keep, {reused} to read back");
    let rank2 = dir.join(format::rank_file_name(2, 0));
    let mut bytes = std::fs::read(&rank2).unwrap();
    bytes.extend_from_slice(&[0u8; 100]);
    std::fs::write(&rank2, bytes).unwrap();
    let trace = Trace::open(&*dir).unwrap();
    let fresh = canonical(&scan(&trace).unwrap());
    assert!(
        fresh.contains("zero bytes"),
        "the changed file's tail is reported"
    );
    let (changed, remade) = counted(|| trace::meta_cache::scan_cached(&trace).unwrap());
    assert_eq!(canonical(&changed), fresh);
    assert!(remade > total_chunks / u64::from(RANKS), "{remade}");

    // The whole run reads every chunk.
    let mut decoded = 0;
    for (files, map) in trace.ranks.iter().zip(&maps) {
        decoded += for_each_event_in(files, map, &everything, |_| {}, |_, _| {})
            .unwrap()
            .decoded;
    }
    assert_eq!(decoded, total_chunks);
}
