//! What a 1 % window costs, in chunks decoded and wall time, on a large synthetic trace: the
//! windowed read itself (`trace::window::for_each_event_in`) against reading every chunk, and the
//! windowed views (timeline, Perfetto export) against the same views of the whole run.
//!
//! `cargo run --release -p views --example window_read -- DIR [RANKS ITERATIONS CHUNK_EVENTS]`
//! writes the trace into DIR unless it holds one (defaults 8 ranks, 100 000 iterations of the
//! halo exchange, ~18 events each, 4 096 events per chunk).

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Instant;

use common::{RankTrace, write_trace};
use format::synthetic::{HaloConfig, events as synthetic_events};
use trace::Trace;
use trace::clock::TimeMap;
use trace::open::for_each_event;
use trace::scan::scan;
use trace::window::{Window, WindowSpec, for_each_event_in};
use views::export::perfetto_proto::{self, ProtoOptions};
use views::export::timeline::{self, TimelineOptions};

fn arg(args: &[String], i: usize, default: u64) -> u64 {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn write(dir: &Path, ranks: u32, iterations: u64, chunk_events: usize) {
    std::fs::create_dir_all(dir).expect("create the trace directory");
    for rank in 0..ranks {
        let cfg = HaloConfig {
            world_size: ranks,
            rank,
            iterations,
            ..Default::default()
        };
        let events = synthetic_events(&cfg);
        // One rank at a time, so memory holds one rank's events.
        let one = [RankTrace {
            rank,
            ticks_per_sec: cfg.ticks_per_sec,
            streams: vec![(0, events)],
        }];
        write_trace(dir, ranks, &one, chunk_events);
    }
}

/// Runs `f`, returning its result, the chunks decoded meanwhile and the seconds it took.
fn measured<T>(f: impl FnOnce() -> T) -> (T, u64, f64) {
    let (before, t0) = (format::chunks_decoded(), Instant::now());
    let out = f();
    (
        out,
        format::chunks_decoded() - before,
        t0.elapsed().as_secs_f64(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(Path::new) else {
        eprintln!("usage: window_read DIR [RANKS ITERATIONS CHUNK_EVENTS]");
        std::process::exit(2);
    };
    if !dir.join(format::rank_file_name(0, 0)).exists() {
        let ranks = arg(&args, 1, 8) as u32;
        let (_, _, s) = measured(|| {
            write(
                dir,
                ranks,
                arg(&args, 2, 100_000),
                arg(&args, 3, 4096) as usize,
            )
        });
        eprintln!("wrote {} in {s:.1} s", dir.display());
    }
    let trace = Trace::open(dir).expect("open the trace");
    let (metas, scan_chunks, scan_s) = measured(|| scan(&trace).expect("scan"));
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    let events: u64 = metas.iter().map(|m| m.events).sum();
    let span = WindowSpec::parse(Some("0"), None, None)
        .and_then(|s| s.resolve(&metas, trace.world_size))
        .expect("the trace has a span");
    let span_s = span.seconds(span.to);
    let (from, to) = (format!("{}", 0.5 * span_s), format!("{}", 0.51 * span_s));
    let spec = WindowSpec::parse(Some(&from), Some(&to), None).expect("window");
    let window = spec
        .resolve(&metas, trace.world_size)
        .expect("resolve the window");
    println!(
        "trace: {} ranks, {events} events, span {span_s:.3} s; window {window}",
        trace.world_size
    );
    println!("scan (first pass, every chunk's misc events): {scan_chunks} chunks, {scan_s:.2} s");

    let read = |w: &Window| {
        let mut kept = 0u64;
        for (files, map) in trace.ranks.iter().zip(&maps) {
            for_each_event_in(files, map, w, |_| {}, |_, _| kept += 1).expect("read");
        }
        kept
    };
    let (_, all_chunks, all_s) = measured(|| {
        let mut n = 0u64;
        for files in &trace.ranks {
            for_each_event(files, |_| {}, |_, _| n += 1).expect("read");
        }
        n
    });
    let (kept, win_chunks, win_s) = measured(|| read(&window));
    println!(
        "read every event: {all_chunks} chunks, {all_s:.2} s; events of the chunks meeting \
         the window: {win_chunks} chunks ({:.2} %), {kept} events, {win_s:.3} s",
        100.0 * win_chunks as f64 / all_chunks as f64
    );

    let png = dir.join("window_read.png");
    // A windowed view keeps the first pass beside the trace on first use (the first windowed
    // timeline below); removed, it is made again.
    let _ = std::fs::remove_dir_all(dir.join(trace::meta_cache::CACHE_DIR));
    for (name, spec) in [
        ("whole run", WindowSpec::default()),
        ("1 % window, first use", spec.clone()),
        ("1 % window, again", spec.clone()),
    ] {
        let opts = TimelineOptions {
            window: spec.clone(),
            ..Default::default()
        };
        let (_, chunks, s) =
            measured(|| timeline::render(&trace, &png, &opts, &mut |_, _| {}).expect("timeline"));
        println!("timeline, {name}: {chunks} chunks, {s:.2} s");
        let w = if spec.is_everything() {
            Window::everything(trace.world_size)
        } else {
            window.clone()
        };
        let out = dir.join("window_read.pftrace");
        let (_, chunks, s) = measured(|| {
            perfetto_proto::export_window(&trace, &out, ProtoOptions::default(), &w, &mut |_, _| {})
                .expect("export")
        });
        println!("export perfetto, {name}: {chunks} chunks, {s:.2} s");
    }

    // The crossing count of a windowed report or compare: a full matching pass, or the kept
    // match index (made on its first use).
    let metas = trace::meta_cache::scan_cached(&trace).expect("scan");
    let (full, chunks, s) = measured(|| {
        reconstruct::matches::crossing_messages(&trace, &metas, &window).expect("matching")
    });
    println!("crossing messages, full matching pass: {full}, {chunks} chunks, {s:.2} s");
    let kept = trace::meta_cache::cache_dir(&trace);
    let _ = std::fs::remove_file(kept.join("matches.json"));
    for name in ["first use", "again"] {
        let (crossing, chunks, s) = measured(|| {
            reconstruct::match_index::crossing_messages_kept(&trace, &metas, &window)
                .expect("match index")
        });
        let read =
            reconstruct::match_index::for_each_match_meeting(&trace, &metas, &window, |_| {})
                .expect("match index")
                .records_read;
        let size = std::fs::metadata(kept.join("matches.bin")).map_or(0, |m| m.len());
        println!(
            "crossing messages, match index, {name}: {crossing}, {chunks} chunks, {s:.2} s \
             ({read} records read again, index {size} bytes)"
        );
    }
}
