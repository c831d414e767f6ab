//! `info`, `report` and the Perfetto and timeline views on a 4096-rank trace, each in a child
//! process whose open-file limit is 256 (so no step may hold every rank's file open) and whose
//! peak memory is measured (so no step may keep a rank × rank structure: at 4096 ranks one
//! 8-byte matrix is 128 MiB, and every rank's own copy of the world's member list 64 MiB); and
//! the views on a long trace of few ranks, whose memory must not grow with the messages.
//!
//! The traces are the format crate's halo exchange on a torus.

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::temp_dir;
use format::synthetic::{FUNC_IRECV, FUNC_ISEND, HaloConfig};
use format::{
    ChunkEncoder, ClockCalibration, ClockSource, Event, FileHeader, RankFileWriter, RawBuf,
    rank_file_name,
};
use trace::Trace;
use views::export::{chrome_json, perfetto_proto, timeline};

const WORLD: u32 = 4096;
const ITERATIONS: u64 = 3;
/// Point-to-point messages per rank and iteration: one to each of the four neighbours.
const FACES: u64 = 4;
const FD_LIMIT: u32 = 256;
/// Peak anonymous memory allowed to `info` and `report` at 4096 ranks (they need ~3 and ~56 MiB,
/// the latter mostly the JSON tree of 16 384 partner pairs): a dense matrix of rank pairs (2 ×
/// 128 MiB), or every rank's own copy of the world's members (64 MiB), would exceed it.
const MAX_SUMMARY_MIB: f64 = 96.0;
/// The same for the views. Their happened-before pass holds every lane's current chunk, decoded
/// (~46 KiB a lane here, ~190 MiB in all), and the timeline its picture (a row per rank): linear
/// costs that leave no room for a matrix of rank pairs.
const MAX_VIEW_MIB: f64 = 400.0;
/// The long trace: few ranks, many messages.
const LONG_WORLD: u32 = 4;
const LONG_ITERATIONS: u64 = 40_000;
/// Its views' allowance: a list of its 640 000 messages with their endpoints would be over 100
/// MiB.
const MAX_LONG_MIB: f64 = 40.0;
const CHILD_ENV: &str = "EVF_MANY_RANKS_STEP";

/// What was written, to check every step's counts against.
#[derive(Debug, Default)]
struct Written {
    events: u64,
    calls: u64,
    /// Sends, and bytes sent, per (source, destination).
    pairs: std::collections::BTreeMap<(u32, u32), (u64, u64)>,
}

fn halo(world_size: u32, rank: u32, iterations: u64) -> HaloConfig {
    HaloConfig {
        world_size,
        rank,
        iterations,
        ..HaloConfig::default()
    }
}

/// Writes `world` ranks of `iterations` halo exchanges, in chunks of at most 2^16 events.
fn write_trace(dir: &Path, world: u32, iterations: u64) -> Written {
    let mut written = Written::default();
    let mut encoder = ChunkEncoder::new(1);
    for rank in 0..world {
        let cfg = halo(world, rank, iterations);
        let header = FileHeader {
            rank,
            world_size: world,
            part: 0,
            clock: ClockCalibration {
                ticks_per_sec: cfg.ticks_per_sec,
                tick_at_epoch: 0,
                realtime_ns: 0,
                source: ClockSource::Tsc,
                read_ticks: 0,
            },
            created_unix_ns: 0,
            producer: "many ranks test".into(),
        };
        let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).unwrap();
        let mut w = RankFileWriter::new(std::io::BufWriter::new(file), &header).unwrap();
        let mut buf = RawBuf::new();
        let mut seq = 0;
        format::synthetic::generate(&cfg, |e| {
            let mut e = e.clone();
            // The generator tags a message by the face it leaves through; a receive must name
            // the face it arrives at (left ↔ right, down ↔ up) for sends and receives to pair.
            match &mut e {
                Event::Call(c) if c.func == FUNC_IRECV => c.tag ^= 1,
                Event::Completion(c) if c.source >= 0 => c.tag ^= 1,
                _ => {}
            }
            if let Event::Call(c) = &e {
                written.calls += 1;
                if c.func == FUNC_ISEND {
                    let pair = written.pairs.entry((rank, c.peer as u32)).or_default();
                    pair.0 += 1;
                    pair.1 += c.bytes;
                }
            }
            written.events += 1;
            buf.push_event(&e);
            if buf.events() >= 1 << 16 {
                w.write_chunk(&encoder.encode(rank, 0, seq, &buf)).unwrap();
                seq += 1;
                buf.clear();
            }
        });
        if !buf.is_empty() {
            w.write_chunk(&encoder.encode(rank, 0, seq, &buf)).unwrap();
        }
        w.flush().unwrap();
    }
    written
}

/// Peak anonymous memory of this process, sampled, MiB: file pages of the mapped trace are page
/// cache, not the process's own, so VmHWM would mostly measure the trace's size.
fn sample_anon_peak() -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = std::sync::Arc::clone(&peak);
    std::thread::spawn(move || {
        loop {
            sampler.fetch_max(status_kib("RssAnon:"), std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    });
    peak
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn open_files_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// One step, in the child: prints its figures as one JSON line.
fn child(step: &str, dir: &Path) {
    let peak = sample_anon_peak();
    let start = Instant::now();
    let trace = Trace::open(dir).expect("open the trace");
    let figures = match step {
        "info" => {
            let info = views::info::summarize(&trace).expect("info");
            assert!(info.skipped.is_empty(), "{:?}", info.skipped);
            serde_json::json!({
                "ranks": info.ranks,
                "events": info.events_total,
                "calls": info.mpi_calls_total,
                "per_rank": info.per_rank.len(),
                "table_lines": views::info::render_table(&info).lines().count(),
            })
        }
        "report" => {
            let (profiles, skipped) =
                views::report::profile_trace(&trace, &mut |_, _| {}).expect("profile");
            assert!(skipped.is_empty(), "{skipped:?}");
            let report = views::report::Report::build("many", &profiles);
            let json = report.to_json();
            let table = report.render_table();
            serde_json::json!({
                "ranks": report.ranks,
                "calls": report.functions.iter().map(|f| f.count).sum::<u64>(),
                "pairs": json["partners"],
                "top_pairs_listed": table.contains("heaviest by bytes"),
                "table_has_matrix": table.contains("from row rank to column rank"),
            })
        }
        "perfetto" | "perfetto-discarded" => {
            // The long trace's output is large and of no interest here.
            let out = if step == "perfetto-discarded" {
                std::path::PathBuf::from("/dev/null")
            } else {
                dir.with_extension("json")
            };
            let s = chrome_json::export(&trace, &out, &mut |_, _| {}).expect("perfetto");
            let size = std::fs::metadata(&out).map_or(0, |m| m.len());
            if out.is_file() {
                let _ = std::fs::remove_file(&out);
            }
            serde_json::json!({
                "events": s.events_read,
                "slices": s.slices,
                "flows": s.flows,
                "messages": s.messages_matched,
                "bytes": size,
            })
        }
        "perfetto-proto" | "perfetto-proto-discarded" => {
            let out = if step == "perfetto-proto-discarded" {
                std::path::PathBuf::from("/dev/null")
            } else {
                dir.with_extension("pftrace")
            };
            let s = perfetto_proto::export(
                &trace,
                &out,
                perfetto_proto::ProtoOptions::default(),
                &mut |_, _| {},
            )
            .expect("perfetto protobuf");
            if out.is_file() {
                let _ = std::fs::remove_file(&out);
            }
            serde_json::json!({
                "events": s.events_read,
                "slices": s.slices,
                "flow_ends": s.flow_ends,
                "messages": s.messages_matched,
                "bytes": s.bytes_written,
            })
        }
        "timeline" => {
            let out = dir.with_extension("png");
            let opts = timeline::TimelineOptions {
                width: 800,
                ..Default::default()
            };
            let s = timeline::render(&trace, &out, &opts, &mut |_, _| {}).expect("timeline");
            let _ = std::fs::remove_file(&out);
            serde_json::json!({
                "rows": s.ranks.len(),
                "messages": s.messages_in_window,
                "arrows": s.arrows_drawn,
            })
        }
        other => panic!("no step {other}"),
    };
    let seconds = start.elapsed().as_secs_f64();
    let anon_mib = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(status_kib("RssAnon:")) as f64
        / 1024.0;
    let out = serde_json::json!({
        "figures": figures,
        "seconds": seconds,
        "anon_mib": anon_mib,
        "hwm_mib": status_kib("VmHWM:") as f64 / 1024.0,
        "fd_limit": open_files_limit(),
    });
    // On a line of its own: the test harness has printed the test's name without one.
    println!("\nMANY_RANKS {out}");
}

/// Runs one step of `test` in a child under `ulimit -n`; checks the limit held and the step's
/// peak memory stayed under `max_mib`; returns the step's figures.
fn run_step(test: &str, step: &str, dir: &Path, max_mib: f64) -> serde_json::Value {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, step)
        .env("EVF_MANY_RANKS_DIR", dir)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{step} failed under ulimit -n {FD_LIMIT}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("MANY_RANKS ").map(|(_, figures)| figures))
        .unwrap_or_else(|| panic!("{step}: no figures in {stdout}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    eprintln!(
        "{step:>9}: {:.2} s, peak anonymous {:.1} MiB (VmHWM {:.1} MiB)",
        v["seconds"].as_f64().unwrap(),
        v["anon_mib"].as_f64().unwrap(),
        v["hwm_mib"].as_f64().unwrap()
    );
    assert_eq!(v["fd_limit"], FD_LIMIT, "{step}: the limit was not applied");
    assert!(
        v["anon_mib"].as_f64().unwrap() < max_mib,
        "{step}: peak anonymous memory {} MiB, more than {max_mib}",
        v["anon_mib"]
    );
    v["figures"].clone()
}

/// In a child started by [`run_step`]: runs the step and returns true.
fn as_child() -> bool {
    let (Ok(step), Ok(dir)) = (
        std::env::var(CHILD_ENV),
        std::env::var("EVF_MANY_RANKS_DIR"),
    ) else {
        return false;
    };
    child(&step, Path::new(&dir));
    true
}

#[test]
fn info_report_and_views_work_at_4096_ranks_with_few_files_open() {
    if as_child() {
        return;
    }
    let test = "info_report_and_views_work_at_4096_ranks_with_few_files_open";
    let dir = temp_dir("many-ranks");
    let written = write_trace(&dir, WORLD, ITERATIONS);
    let messages = u64::from(WORLD) * ITERATIONS * FACES;
    let sends: u64 = written.pairs.values().map(|p| p.0).sum();
    assert_eq!(sends, messages);
    // Isend, Irecv per face, a Waitall and an Allreduce per iteration.
    assert_eq!(
        written.calls,
        u64::from(WORLD) * ITERATIONS * (2 * FACES + 2)
    );

    let info = run_step(test, "info", &dir, MAX_SUMMARY_MIB);
    assert_eq!(info["ranks"], WORLD);
    assert_eq!(info["per_rank"], WORLD);
    assert_eq!(info["events"], written.events);
    assert_eq!(info["calls"], written.calls);

    let report = run_step(test, "report", &dir, MAX_SUMMARY_MIB);
    assert_eq!(report["ranks"], WORLD);
    assert_eq!(report["calls"], written.calls);
    let pairs: std::collections::BTreeMap<(u32, u32), (u64, u64)> = report["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap();
            (
                (n("source") as u32, n("dest") as u32),
                (n("messages"), n("bytes")),
            )
        })
        .collect();
    assert_eq!(pairs, written.pairs);
    assert_eq!(report["top_pairs_listed"], true);
    assert_eq!(report["table_has_matrix"], false);

    let perfetto = run_step(test, "perfetto", &dir, MAX_VIEW_MIB);
    assert_eq!(perfetto["events"], written.events);
    assert_eq!(perfetto["slices"], written.calls);
    assert_eq!(perfetto["messages"], messages);
    assert_eq!(perfetto["flows"], messages);

    let proto = run_step(test, "perfetto-proto", &dir, MAX_VIEW_MIB);
    assert_eq!(proto["events"], written.events);
    assert_eq!(proto["slices"], written.calls);
    assert_eq!(proto["messages"], messages);
    // Every send call carries its flow id, every receive completion its messages' ids.
    assert_eq!(proto["flow_ends"], 2 * messages);

    let timeline = run_step(test, "timeline", &dir, MAX_VIEW_MIB);
    assert_eq!(timeline["rows"], WORLD);
    assert_eq!(timeline["messages"], messages);
    let arrows = timeline["arrows"].as_u64().unwrap();
    assert!(arrows > 0 && arrows <= 200, "{arrows} arrows drawn");

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn views_keep_no_list_of_the_messages() {
    if as_child() {
        return;
    }
    let test = "views_keep_no_list_of_the_messages";
    let dir = temp_dir("many-messages");
    let written = write_trace(&dir, LONG_WORLD, LONG_ITERATIONS);
    let messages = u64::from(LONG_WORLD) * LONG_ITERATIONS * FACES;
    let perfetto = run_step(test, "perfetto-discarded", &dir, MAX_LONG_MIB);
    assert_eq!(perfetto["events"], written.events);
    assert_eq!(perfetto["messages"], messages);
    assert_eq!(perfetto["flows"], messages);
    let proto = run_step(test, "perfetto-proto-discarded", &dir, MAX_LONG_MIB);
    assert_eq!(proto["events"], written.events);
    assert_eq!(proto["messages"], messages);
    assert_eq!(proto["flow_ends"], 2 * messages);
    let timeline = run_step(test, "timeline", &dir, MAX_LONG_MIB);
    assert_eq!(timeline["messages"], messages);
    let _ = std::fs::remove_dir_all(&dir);
}
