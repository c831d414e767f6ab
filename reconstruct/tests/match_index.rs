//! The matched messages kept beside the trace (`reconstruct::match_index`): a window's crossing
//! count from the kept index equals the full matching pass's, the index is made once and then
//! read in part (no chunk decoded, a small share of its records), and a changed trace rebuilds it.
//! One test in this file, so the process-wide count of decoded chunks is this test's alone.

mod common;

use common::*;
use format::synthetic::{HaloConfig, events};
use reconstruct::match_index::{crossing_messages_kept, for_each_match_meeting};
use reconstruct::matches::crossing_messages;
use trace::Trace;
use trace::meta_cache::scan_cached;
use trace::window::{Edge, WindowSpec};

const RANKS: u32 = 4;

fn write(dir: &std::path::Path, iterations: u64) {
    let ranks: Vec<RankTrace> = (0..RANKS)
        .map(|rank| {
            let cfg = HaloConfig {
                world_size: RANKS,
                rank,
                iterations,
                ..Default::default()
            };
            let ev = events(&cfg);
            RankTrace {
                rank,
                ticks_per_sec: 1.0e9,
                streams: vec![(0, ev)],
            }
        })
        .collect();
    write_trace(dir, RANKS, &ranks, 40);
}

#[test]
fn kept_matches_give_the_full_pass_counts_and_read_a_window_only() {
    let dir = temp_dir("match-index");
    write(&dir, 2_000);
    let trace = Trace::open(&*dir).unwrap();
    let metas = scan_cached(&trace).unwrap();
    let span = WindowSpec::parse(Some("0"), None, None)
        .unwrap()
        .resolve(&metas, RANKS)
        .unwrap();
    let span_s = span.seconds(span.to);
    let at = |from: f64, to: f64, ranks: Option<&str>| {
        WindowSpec {
            from: Some(Edge::Seconds(from)),
            to: Some(Edge::Seconds(to)),
            ranks: ranks.map(|r| trace::window::parse_ranks(r).unwrap()),
        }
        .resolve(&metas, RANKS)
        .unwrap()
    };
    let windows = [
        at(0.5 * span_s, 0.51 * span_s, None),
        at(0.0, 0.01 * span_s, None),
        at(0.2 * span_s, 0.4 * span_s, Some("1-2")),
    ];
    // First use: the index is made by one full pass.
    let first = for_each_match_meeting(&trace, &metas, &windows[0], |_| {}).unwrap();
    assert!(first.built && first.messages > 0, "{first:?}");
    for (i, w) in windows.iter().enumerate() {
        let full = crossing_messages(&trace, &metas, w).unwrap();
        let before = format::chunks_decoded();
        let kept = crossing_messages_kept(&trace, &metas, w).unwrap();
        assert_eq!(
            format::chunks_decoded(),
            before,
            "window {i} decoded chunks"
        );
        assert_eq!(kept, full, "window {i}: crossing messages");
        if i < 2 {
            assert!(full > 0, "window {i}: no message crosses its edge");
        }
        // The messages handed out are exactly those with an end in the window.
        let mut got = Vec::new();
        let read = for_each_match_meeting(&trace, &metas, w, |m| got.push(*m)).unwrap();
        assert!(!read.built);
        let (all, _) = reconstruct::matches::matched_messages(&trace).unwrap();
        // Every record, read through the whole run's window, filtered here.
        let mut want: Vec<_> = {
            let mut v = Vec::new();
            for_each_match_meeting(
                &trace,
                &metas,
                &trace::window::Window::everything(RANKS),
                |m| {
                    if w.contains(m.send_start) || w.contains(m.recv_end) {
                        v.push(*m)
                    }
                },
            )
            .unwrap();
            v
        };
        assert_eq!(all.len() as u64, read.messages);
        let key = |m: &reconstruct::hb::MessageMatch| (m.send.rank, m.send.stream, m.send.index);
        got.sort_by_key(key);
        want.sort_by_key(key);
        assert_eq!(got, want, "window {i}: messages meeting it");
        if i < 2 {
            assert!(
                read.records_read * 20 < read.messages,
                "window {i}: read {} of {} records",
                read.records_read,
                read.messages
            );
        }
    }
    // A changed trace: the stale index is rebuilt, never used.
    write(&dir, 1_500);
    let trace = Trace::open(&*dir).unwrap();
    let metas = scan_cached(&trace).unwrap();
    let w = WindowSpec::parse(Some("0"), Some("0.0001"), None)
        .unwrap()
        .resolve(&metas, RANKS)
        .unwrap();
    let again = for_each_match_meeting(&trace, &metas, &w, |_| {}).unwrap();
    assert!(again.built, "{again:?}");
    assert_eq!(
        crossing_messages_kept(&trace, &metas, &w).unwrap(),
        crossing_messages(&trace, &metas, &w).unwrap()
    );
}
