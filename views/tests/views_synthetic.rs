//! The views (report, Perfetto protobuf and JSON, OTF2, timeline) on a small trace written with the format
//! crate's own writer, where every expected figure is known from what the test wrote.

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;
#[path = "../../tests/common/skip.rs"]
mod skip;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use format::{Completion, Event, Marker, Suspension};
use reconstruct::matches::matched_messages;
use trace::Trace;
use trace::window::WindowSpec;
use views::export::{chrome_json, otf2, perfetto_proto, timeline};
use views::report::{Report, profile_trace, size_bin};

const ROUNDS: u64 = 5;

fn completion(request: u64, source: i32, tag: i32, bytes: u64) -> Event {
    Event::Completion(Completion {
        request,
        source,
        tag,
        bytes,
        cancelled: false,
    })
}

/// Two ranks, `ROUNDS` rounds of: a blocking send 0 → 1 of 8·(round+1) bytes, a nonblocking
/// exchange 1 → 0 (Isend/Irecv + Wait), a barrier, and on round 2 a suspension with a flush.
fn write_pair(dir: &Path) {
    let mut ranks = Vec::new();
    for rank in 0..2u32 {
        let mut ev = function_defs();
        ev.push(Event::Marker(Marker::InitDone { time: 1_000 }));
        let mut t = 10_000u64;
        for round in 0..ROUNDS {
            let bytes = 8 * (round + 1);
            if rank == 0 {
                let mut s = call(SEND, t, t + 500, 1, 3);
                s.bytes = bytes;
                ev.push(Event::Call(s));
                let mut r = call(IRECV, t + 600, t + 700, 1, 4);
                r.request = 100 + round;
                ev.push(Event::Call(r));
                ev.push(Event::Call(call(WAIT, t + 800, t + 3_000, -1, -1)));
                ev.push(completion(100 + round, 1, 4, 16));
            } else {
                let mut r = call(RECV, t + 100, t + 900, 0, 3);
                r.bytes = 1024;
                ev.push(Event::Call(r));
                ev.push(completion(0, 0, 3, bytes));
                let mut s = call(ISEND, t + 1_000, t + 1_100, 0, 4);
                s.request = 200 + round;
                s.bytes = 16;
                ev.push(Event::Call(s));
                ev.push(Event::Call(call(WAIT, t + 1_200, t + 1_300, -1, -1)));
                ev.push(completion(200 + round, -1, -1, 16));
            }
            ev.push(Event::Call(barrier(t + 4_000, t + 5_000)));
            t += 10_000;
            if round == 2 {
                ev.push(Event::Suspension(Box::new(Suspension {
                    seq: 0,
                    start: t - 4_000,
                    end: t + 20_000,
                    z_ns: 24_000,
                    flushed: true,
                    bytes_raw: 4_000,
                    bytes_stored: 1_000,
                    write_ns: 10_000,
                    ..Default::default()
                })));
                t += 30_000;
            }
        }
        ev.push(Event::Marker(Marker::FinalizeStart { time: t }));
        ranks.push(RankTrace {
            rank,
            ticks_per_sec: 1e9,
            streams: vec![(0, ev)],
        });
    }
    write_trace(dir, 2, &ranks, 7);
}

#[test]
fn report_counts_sizes_partners_and_spans() {
    let dir = temp_dir("views-report");
    write_pair(&dir);
    let trace = Trace::open(&dir).unwrap();
    let (profiles, skipped) = profile_trace(&trace, &mut |_, _| {}).unwrap();
    assert!(skipped.is_empty());
    let report = Report::build("pair", &profiles);
    let f: HashMap<&str, &views::report::FunctionRow> = report
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f))
        .collect();
    assert_eq!(f["MPI_Send"].count, ROUNDS);
    assert_eq!(f["MPI_Recv"].count, ROUNDS);
    assert_eq!(f["MPI_Wait"].count, 2 * ROUNDS);
    assert_eq!(f["MPI_Barrier"].count, 2 * ROUNDS);
    assert_eq!(f["MPI_Send"].bytes_min, 8);
    assert_eq!(f["MPI_Send"].bytes_max, 8 * ROUNDS);
    assert_eq!(f["MPI_Send"].bytes_total, 8 * ROUNDS * (ROUNDS + 1) / 2);
    assert!((f["MPI_Send"].mean_s - 500e-9).abs() < 1e-12);
    // The receive's own size is its buffer (1024 B); what arrived is binned separately.
    assert_eq!(f["MPI_Recv"].histogram[size_bin(1024)], ROUNDS);
    let mut arrived = [0u64; 24];
    for round in 0..ROUNDS {
        arrived[size_bin(8 * (round + 1))] += 1;
    }
    assert_eq!(f["MPI_Recv"].recv_histogram, Some(arrived));
    // Waits on rank 0 completed receives of 16 bytes; rank 1's completed sends (not binned).
    assert_eq!(f["MPI_Wait"].recv_histogram.unwrap()[size_bin(16)], ROUNDS);
    let pairs: Vec<(u32, u32, u64)> = report
        .partners
        .pairs
        .iter()
        .map(|p| (p.source, p.dest, p.messages))
        .collect();
    assert_eq!(pairs, [(0, 1, ROUNDS), (1, 0, ROUNDS)]);
    assert_eq!(report.partners.get(1, 0).bytes, 16 * ROUNDS);
    assert_eq!(report.partners.get(1, 1).messages, 0);
    assert_eq!(report.suspensions.len(), 1);
    assert_eq!(report.suspensions[0].bytes_raw, 8_000);
    for r in &report.ranks_table {
        let span = r.span_s.unwrap();
        assert!(r.mpi_s > 0.0 && r.mpi_s < span, "rank {}: {r:?}", r.rank);
    }
    // A profile file read back gives the same report.
    let pdir = temp_dir("views-profiles");
    for p in &profiles {
        std::fs::write(
            pdir.join(views::report::profile_file_name(p.rank)),
            p.to_json(),
        )
        .unwrap();
    }
    assert!(views::report::is_profile_dir(&pdir));
    let back = views::report::read_profiles(&pdir).unwrap();
    let again = Report::build("pair", &back);
    assert_eq!(
        serde_json::to_string(&again.functions).unwrap(),
        serde_json::to_string(&report.functions).unwrap()
    );
    assert_eq!(again.partners.pairs, report.partners.pairs);
}

/// Checks the structure of a Chrome JSON file against the trace: one slice per call, one flow per
/// matched message bound to slices (`bind_id`, `flow_out` then `flow_in` in time order, as
/// Perfetto links them), slices properly nested.
pub fn check_perfetto(json: &serde_json::Value, calls: u64, messages: u64) {
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let mut slices: HashMap<(u64, u64), Vec<(f64, f64)>> = HashMap::new();
    let mut outs = HashMap::new();
    let mut ins = HashMap::new();
    let mut call_slices = 0;
    for e in events {
        let pid = e["pid"].as_u64().unwrap();
        let ph = e["ph"].as_str().unwrap();
        assert!(ph != "s" && ph != "f", "separate flow event {e}");
        if ph != "X" {
            continue;
        }
        let ts = e["ts"].as_f64().unwrap();
        let dur = e["dur"].as_f64().unwrap();
        assert!(dur >= 0.0);
        slices
            .entry((pid, e["tid"].as_u64().unwrap()))
            .or_default()
            .push((ts, ts + dur));
        if e["cat"] != "evenflush" && e["cat"] != "message" {
            call_slices += 1;
        }
        if let Some(id) = e["bind_id"].as_u64() {
            let ends = if e["flow_out"] == true {
                &mut outs
            } else {
                assert_eq!(e["flow_in"], true, "{e}");
                &mut ins
            };
            assert!(ends.insert(id, ts).is_none(), "flow end {id} twice");
        }
    }
    assert_eq!(call_slices, calls);
    assert_eq!(ins.len() as u64, messages);
    for (id, t_in) in &ins {
        let t_out = outs
            .get(id)
            .unwrap_or_else(|| panic!("flow {id} has no flow out"));
        assert!(
            t_out < t_in,
            "flow {id} binds at {t_in} before it starts at {t_out}"
        );
    }
    for (key, list) in &mut slices {
        list.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for &(a, b) in list.iter() {
            while open.last().is_some_and(|&end| end <= a) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(
                    b <= end,
                    "{key:?}: slice {a}..{b} overlaps one ending at {end}"
                );
            }
            open.push(b);
        }
    }
}

#[test]
fn perfetto_has_one_flow_per_message() {
    let dir = temp_dir("views-perfetto");
    write_pair(&dir);
    let trace = Trace::open(&dir).unwrap();
    let out = dir.join("out.json");
    let summary = chrome_json::export(&trace, &out, &mut |_, _| {}).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let (messages, _) = matched_messages(&trace).unwrap();
    assert_eq!(messages.len() as u64, 2 * ROUNDS);
    let calls_written: u64 = (0..2)
        .map(|r| calls(&read_lane(&dir, r, 0)).len() as u64)
        .sum();
    check_perfetto(&json, calls_written, messages.len() as u64);
    assert_eq!(summary.flows, messages.len() as u64);
    let events = json["traceEvents"].as_array().unwrap();
    // The suspension and its flush are slices; the buffer counter drops to 0 at the flush.
    let flush = events.iter().filter(|e| e["name"] == "flush").count();
    assert_eq!(flush, 2);
    let fills: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["pid"] == 0)
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .collect();
    assert!(fills.contains(&0), "{fills:?}");
    assert!(fills.iter().any(|&b| b > 0), "{fills:?}");
}

/// A full disk under the Perfetto export's output is an error naming the file, plain and deflated
/// (the chunks deflated and written on a thread of their own: its failure must come back, not be
/// lost with the thread).
#[test]
fn a_perfetto_export_to_a_full_disk_fails_naming_the_file() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        skip::skip_or_fail("dev-full", "/dev/full is missing");
        return;
    }
    let dir = temp_dir("views-perfetto-full");
    write_pair(&dir);
    let trace = Trace::open(&dir).unwrap();
    for compress in [false, true] {
        let options = perfetto_proto::ProtoOptions { compress };
        let err = perfetto_proto::export(&trace, full, options, &mut |_, _| {})
            .err()
            .unwrap_or_else(|| panic!("compress {compress}: an export to /dev/full succeeded"));
        let text = err.to_string();
        assert!(
            text.contains("/dev/full") && text.contains("No space left"),
            "compress {compress}: {text}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The protobuf export, plain and deflated, decoded by Perfetto's own Python classes
/// (tests/perfetto_decode.py, which replays sequences, interning and the incremental clock).
#[test]
fn perfetto_proto_decodes_with_perfettos_classes() {
    let dir = temp_dir("views-perfetto-proto");
    write_pair(&dir);
    let trace = Trace::open(&dir).unwrap();
    let (messages, _) = matched_messages(&trace).unwrap();
    let messages = messages.len() as u64;
    let calls_written: u64 = (0..2)
        .map(|r| calls(&read_lane(&dir, r, 0)).len() as u64)
        .sum();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/perfetto_decode.py");
    for compress in [false, true] {
        let out = dir.join(format!("out-{compress}.pftrace"));
        let options = perfetto_proto::ProtoOptions { compress };
        let s = perfetto_proto::export(&trace, &out, options, &mut |_, _| {}).unwrap();
        assert_eq!(s.messages_matched, messages);
        assert_eq!(s.flow_ends, 2 * messages);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), s.bytes_written);
        if !compress {
            assert_eq!(s.bytes_written, s.bytes_packets);
        }
        let py = match std::process::Command::new("/usr/bin/python3")
            .arg(&script)
            .arg(&out)
            .output()
        {
            Ok(py) if py.status.success() => py,
            Ok(py)
                if String::from_utf8_lossy(&py.stderr).contains("No module named 'perfetto'") =>
            {
                skip::skip_or_fail(
                    "perfetto-python",
                    "the perfetto Python package is not installed (scripts/setup.sh installs it)",
                );
                return;
            }
            Ok(py) => panic!("decoding failed: {}", String::from_utf8_lossy(&py.stderr)),
            Err(e) => {
                skip::skip_or_fail("perfetto-python", &format!("/usr/bin/python3: {e}"));
                return;
            }
        };
        let got: serde_json::Value = serde_json::from_slice(&py.stdout).unwrap();
        assert_eq!(got["packets"], s.packets, "{got}");
        assert_eq!(got["processes"], 2, "{got}");
        assert_eq!(got["threads"], 2, "{got}");
        assert_eq!(got["counter_tracks"], 2, "{got}");
        // No function names given: every call slice counts as a region.
        assert_eq!(got["regions"], calls_written, "{got}");
        assert_eq!(got["suspensions"], 2, "{got}");
        assert_eq!(got["flushes"], 2, "{got}");
        assert_eq!(got["flows"], messages, "{got}");
        assert_eq!(got["flow_ends_repeated"], 0, "{got}");
        assert_eq!(got["flows_without_start"], 0, "{got}");
        assert_eq!(got["flows_backwards"], 0, "{got}");
        assert_eq!(got["counters"], s.counters, "{got}");
    }
}

#[test]
fn otf2_export_is_accepted_by_otf2_print() {
    if !otf2::AVAILABLE {
        skip::skip_or_fail("otf2", "reconstruct was built without OTF2");
        return;
    }
    let dir = temp_dir("views-otf2");
    write_pair(&dir);
    let trace = Trace::open(&dir).unwrap();
    let out = dir.join("otf2");
    let s = otf2::export(&trace, &out, &mut |_, _| {}).unwrap();
    assert_eq!(s.sends, 2 * ROUNDS);
    assert_eq!(s.receives, 2 * ROUNDS);
    assert_eq!(s.collectives, 2 * ROUNDS);
    // A second export into the same directory replaces the archive.
    otf2::export(&trace, &out, &mut |_, _| {}).unwrap();
    let Ok(printed) = std::process::Command::new("otf2-print")
        .arg("-Werror")
        .arg(out.join("traces.otf2"))
        .output()
    else {
        skip::skip_or_fail(
            "otf2",
            "otf2-print is not installed: the archive is not checked",
        );
        return;
    };
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(
        printed.status.success(),
        "otf2-print -Werror: {}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let count = |kind: &str| {
        text.lines()
            .filter(|l| l.split_whitespace().next() == Some(kind))
            .count() as u64
    };
    assert_eq!(count("MPI_SEND") + count("MPI_ISEND"), 2 * ROUNDS);
    assert_eq!(count("MPI_RECV") + count("MPI_IRECV"), 2 * ROUNDS);
    assert_eq!(count("MPI_ISEND_COMPLETE"), ROUNDS);
    assert_eq!(count("MEASUREMENT_ON_OFF"), 4);
    assert_eq!(count("ENTER"), count("LEAVE"));
}

#[test]
fn timeline_png_has_the_requested_size() {
    let dir = temp_dir("views-timeline");
    write_pair(&dir);
    let trace = Trace::open(&dir).unwrap();
    let out = dir.join("t.png");
    let opts = timeline::TimelineOptions {
        width: 900,
        ..Default::default()
    };
    let s = timeline::render(&trace, &out, &opts, &mut |_, _| {}).unwrap();
    let png = std::fs::read(&out).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((w, h), (900, s.height));
    assert!(h > 150 && h < 2000);
    assert_eq!(s.arrows_drawn, 2 * ROUNDS);
    assert_eq!(s.calls_in_window, 2 * (4 * ROUNDS));
    // A window and a rank subset: rank 1 alone draws no arrows.
    let opts = timeline::TimelineOptions {
        window: WindowSpec::parse(Some("0"), Some("0.00002"), Some("1")).unwrap(),
        ..Default::default()
    };
    let s = timeline::render(&trace, &out, &opts, &mut |_, _| {}).unwrap();
    assert_eq!(s.arrows_drawn, 0);
    assert!(s.calls_in_window > 0 && s.calls_in_window < 4 * ROUNDS);
    let bad = timeline::TimelineOptions {
        window: WindowSpec::parse(None, None, Some("5")).unwrap(),
        ..Default::default()
    };
    assert!(timeline::render(&trace, &out, &bad, &mut |_, _| {}).is_err());
    // The format comes from the name: another one is refused up front, plainly; an upper-case
    // extension is still a PNG.
    let other = dir.join("t.picture");
    let err = timeline::render(&trace, &other, &Default::default(), &mut |_, _| {})
        .expect_err("a name without .png is refused");
    assert!(err.to_string().contains("must end in .png"), "{err}");
    assert!(!other.exists());
    let upper = dir.join("T.PNG");
    timeline::render(&trace, &upper, &Default::default(), &mut |_, _| {}).unwrap();
    assert_eq!(&std::fs::read(&upper).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
}
