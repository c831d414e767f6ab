//! `info`, `report` and `timeline` on a synthetic two-rank trace with memory records whose figures
//! are known exactly, and on the same trace without them, written as chunk version 3 (before
//! memory records existed).

mod common;

use std::path::Path;
use std::process::Command;

use common::{check, evenflush_bin, info_json, scratch};
use format::{
    ChunkEncoder, ClockCalibration, ClockSource, Event, FileHeader, Marker, MemorySample,
    MemoryWhen, MpiCall, NO_RANK, RankFileWriter, RankInfo, RawBuf, ThresholdBasis,
    ThresholdChoice, UNKNOWN_BYTES, rank_file_name,
};
use views::memory::{RankMemory, job_of, of_trace};

const MIB: u64 = 1 << 20;
const TICKS_PER_SEC: f64 = 1e9;
const BARRIER: u16 = 3;

fn sample(
    time: u64,
    rss: u64,
    recorder: u64,
    node_available: u64,
    cgroup: Option<(u64, u64)>,
    swap: u64,
) -> Event {
    let (cgroup_limit, cgroup_usage) = cgroup.unwrap_or((UNKNOWN_BYTES, UNKNOWN_BYTES));
    Event::Memory(MemorySample {
        time,
        rss_bytes: rss,
        recorder_bytes: recorder,
        compressed_bytes: 0,
        node_available,
        cgroup_limit,
        cgroup_usage,
        swap_out_pages: swap,
        when: MemoryWhen::Periodic,
    })
}

fn threshold(time: u64, bytes: u64) -> Event {
    Event::Threshold(ThresholdChoice {
        time,
        bytes,
        basis: ThresholdBasis::Node,
        available: 2048 * MIB,
        ranks_on_node: 2,
    })
}

/// Rank 0 reads the node's figures (the least left is the cgroup's 900 MiB at 0.5 s, 100 pages
/// swapped out), peaks at 400 MiB with the recorder at 100 MiB and warns that memory is low;
/// rank 1 reads none, re-evaluates S from 64 to 32 MiB and compresses twice in memory.
fn rank_events(rank: u32, with_memory: bool) -> Vec<Event> {
    let mut events = vec![
        Event::FunctionDef {
            id: BARRIER,
            name: "MPI_Barrier".into(),
        },
        Event::RankInfo(Box::new(RankInfo {
            rank,
            world_size: 2,
            pid: 100 + rank,
            host: "nodeA".into(),
            mpi_library: "test MPI".into(),
            run_id: "memory-views".into(),
        })),
        Event::Marker(Marker::InitDone { time: 1_000_000 }),
    ];
    let memory: Vec<Event> = if rank == 0 {
        vec![
            threshold(1_000_000, 64 * MIB),
            sample(
                1_000_000,
                100 * MIB,
                10 * MIB,
                3000 * MIB,
                Some((4000 * MIB, 500 * MIB)),
                1000,
            ),
            sample(
                500_000_000,
                400 * MIB,
                100 * MIB,
                1200 * MIB,
                Some((4000 * MIB, 3100 * MIB)),
                1030,
            ),
            Event::Marker(Marker::MemoryLow {
                time: 600_000_000,
                available: 900 * MIB,
                needed: 1000 * MIB,
            }),
            sample(900_000_000, 300 * MIB, 150 * MIB, 2000 * MIB, None, 1100),
        ]
    } else {
        let compressed = |time| {
            Event::Marker(Marker::Compressed {
                time,
                raw_bytes: 8 * MIB,
                stored_bytes: MIB,
            })
        };
        vec![
            threshold(1_000_000, 64 * MIB),
            sample(
                2_000_000,
                200 * MIB,
                20 * MIB,
                UNKNOWN_BYTES,
                None,
                UNKNOWN_BYTES,
            ),
            compressed(300_000_000),
            threshold(400_000_000, 32 * MIB),
            sample(
                700_000_000,
                250 * MIB,
                50 * MIB,
                UNKNOWN_BYTES,
                None,
                UNKNOWN_BYTES,
            ),
            compressed(800_000_000),
        ]
    };
    if with_memory {
        events.extend(memory);
    }
    events.push(Event::Call(MpiCall {
        func: BARRIER,
        start: 950_000_000,
        end: 960_000_000,
        peer: NO_RANK,
        root: NO_RANK,
        ..Default::default()
    }));
    events.push(Event::Marker(Marker::FinalizeStart {
        time: 1_001_000_000,
    }));
    events
}

/// The same chunk framed as `version` (its payload is valid for any version that knows its kinds).
fn write_trace(dir: &Path, with_memory: bool) {
    for rank in 0..2 {
        let mut buf = RawBuf::new();
        for e in rank_events(rank, with_memory) {
            buf.push_event(&e);
        }
        let mut chunk = ChunkEncoder::new(1).encode(rank, 0, 0, &buf);
        if !with_memory {
            chunk = chunk.as_version(3).unwrap();
        }
        let header = FileHeader {
            rank,
            world_size: 2,
            part: 0,
            clock: ClockCalibration {
                ticks_per_sec: TICKS_PER_SEC,
                tick_at_epoch: 0,
                realtime_ns: 0,
                source: ClockSource::Tsc,
                read_ticks: 0,
            },
            created_unix_ns: 0,
            producer: "memory_views test".into(),
        };
        let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).unwrap();
        let mut w = RankFileWriter::new(file, &header).unwrap();
        w.write_chunk(&chunk).unwrap();
        w.flush().unwrap();
    }
}

fn evenflush(args: &[&str], dir: &Path) -> std::process::Output {
    let out = Command::new(evenflush_bin())
        .args(args)
        .arg(dir)
        .output()
        .expect("run evenflush");
    check(out, &format!("evenflush {}", args.join(" ")))
}

#[test]
fn summary_figures_are_exact() {
    let dir = scratch("memory-views-summary");
    write_trace(&dir, true);
    let trace = trace::Trace::open(&dir).unwrap();
    let (ranks, skipped) = of_trace(&trace).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    let (r0, r1) = (&ranks[0].1, &ranks[1].1);
    assert_eq!(r0.peak_rss_bytes, Some(400 * MIB));
    assert_eq!(r0.peak_recorder_bytes, 150 * MIB);
    assert_eq!(r0.recorder_share_at_peak, Some(0.25));
    assert_eq!(r0.max_recorder_share, Some(0.5));
    assert_eq!(
        r0.min_available_bytes,
        Some(900 * MIB),
        "cgroup 4000 - 3100"
    );
    assert_eq!(r0.swap_out_pages, Some(100));
    assert!(r0.memory_low);
    assert_eq!(r1.min_available_bytes, None);
    assert_eq!(r1.swap_out_pages, None);
    assert_eq!(r1.in_memory_compressions, 2);
    assert_eq!(r1.threshold_in_use().unwrap().bytes, 32 * MIB);

    let job = job_of(&ranks).unwrap();
    assert_eq!(job.ranks_sampled, 2);
    assert_eq!((job.peak_rss_bytes, job.peak_rss_rank), (400 * MIB, 0));
    assert_eq!(job.median_peak_rss_bytes, 250 * MIB);
    assert_eq!(
        (job.peak_recorder_bytes, job.peak_recorder_rank),
        (150 * MIB, 0)
    );
    assert_eq!(job.max_recorder_share_at_peak, 0.25);
    assert_eq!(job.max_recorder_share, 0.5);
    assert_eq!(job.min_available_bytes, Some(900 * MIB));
    assert_eq!(job.swap_out_pages, Some(100));
    let initial = job.initial_threshold.as_ref().unwrap();
    assert_eq!((initial.bytes, initial.basis.as_str()), (64 * MIB, "node"));
    assert_eq!(job.threshold_changes, 1);
    assert_eq!(
        (job.threshold_min_bytes, job.threshold_max_bytes),
        (Some(32 * MIB), Some(64 * MIB))
    );
    assert_eq!(
        (
            job.in_memory_compressions,
            job.compressed_raw_bytes,
            job.compressed_stored_bytes
        ),
        (2, 16 * MIB, 2 * MIB)
    );
    assert_eq!(job.memory_low_ranks, vec![0]);
    assert_eq!(job.hosts.len(), 1);
    assert_eq!(job.hosts[0].recorder_peak_sum_bytes, 200 * MIB);
    assert_eq!(job.worst_ranks.len(), 2);

    // The series, in seconds since rank 0's `MPI_Init` end.
    let mut series = RankMemory::with_series();
    for e in rank_events(0, true) {
        series.see(&e);
    }
    let clock = ClockCalibration {
        ticks_per_sec: TICKS_PER_SEC,
        ..Default::default()
    };
    let points = series.points(&clock, 1_000_000);
    let times: Vec<f64> = points.iter().map(|p| p.t_s).collect();
    assert!(
        times
            .iter()
            .zip([0.0, 0.499, 0.899])
            .all(|(t, want)| (t - want).abs() < 1e-12)
            && times.len() == 3,
        "{times:?}"
    );
    assert_eq!(points[2].available_bytes, Some(2000 * MIB));
}

#[test]
fn info_report_and_timeline_show_memory() {
    let dir = scratch("memory-views-tools");
    write_trace(&dir, true);
    let info = info_json(&dir);
    let memory = &info["memory"];
    assert_eq!(memory["peak_rss_bytes"], 400 * MIB, "{memory}");
    assert_eq!(memory["max_recorder_share"], 0.5, "{memory}");
    assert_eq!(memory["min_available_bytes"], 900 * MIB, "{memory}");
    assert_eq!(memory["swap_out_pages"], 100, "{memory}");
    assert_eq!(memory["initial_threshold"]["basis"], "node", "{memory}");
    assert_eq!(memory["in_memory_compressions"], 2, "{memory}");
    assert_eq!(
        memory["memory_low_ranks"],
        serde_json::json!([0]),
        "{memory}"
    );
    let rank1 = &info["per_rank"][1];
    assert_eq!(rank1["memory"]["peak_rss_bytes"], 250 * MIB, "{rank1}");
    assert_eq!(rank1["in_memory_compressions"], 2, "{rank1}");
    assert_eq!(info["per_rank"][0]["memory_low"], true);

    let text = String::from_utf8_lossy(&evenflush(&["info"], &dir).stdout).to_string();
    for expected in [
        "memory       peak RSS 400.0 MiB (rank 0), median over 2 sampled ranks 250.0 MiB",
        "least memory left on a node or cgroup: 900.0 MiB; swapped out during the run: 100 pages",
        "S at start-up 64.0 MiB (auto, from 2048.0 MiB free in the node for 2 rank(s)); \
         re-evaluated 1 times, 32.0 MiB to 64.0 MiB",
        "compressed in memory between collectives: 2 times, 16.0 MiB -> 2.0 MiB",
        "memory-low warnings on ranks 0:",
        "32.0 MiB node",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }

    let report: serde_json::Value =
        serde_json::from_slice(&evenflush(&["report", "--json"], &dir).stdout).unwrap();
    assert_eq!(report["memory"], *memory, "report and info agree");
    let report_text = String::from_utf8_lossy(&evenflush(&["report"], &dir).stdout).to_string();
    assert!(
        report_text.contains("memory       peak RSS 400.0 MiB (rank 0)"),
        "{report_text}"
    );

    let png = dir.join("timeline.png");
    let out = evenflush(&["timeline", "--png", png.to_str().unwrap()], &dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("5 memory samples, 1 memory-low warnings"),
        "{stderr}"
    );
    assert!(png.exists());
}

#[test]
fn a_trace_without_memory_records_still_works() {
    let dir = scratch("memory-views-none");
    write_trace(&dir, false);
    let trace = trace::Trace::open(&dir).unwrap();
    let (ranks, _) = of_trace(&trace).unwrap();
    assert!(job_of(&ranks).is_none());

    let info = info_json(&dir);
    assert!(info["memory"].is_null(), "{}", info["memory"]);
    assert_eq!(info["mpi_calls_total"], 2, "the version 3 chunks were read");
    let text = String::from_utf8_lossy(&evenflush(&["info"], &dir).stdout).to_string();
    assert!(text.contains("no memory samples"), "{text}");
    let report: serde_json::Value =
        serde_json::from_slice(&evenflush(&["report", "--json"], &dir).stdout).unwrap();
    assert!(report["memory"].is_null());
    let report_text = String::from_utf8_lossy(&evenflush(&["report"], &dir).stdout).to_string();
    assert!(!report_text.contains("peak RSS"), "{report_text}");
    let png = dir.join("timeline.png");
    let out = evenflush(&["timeline", "--png", png.to_str().unwrap()], &dir);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("memory samples"));
    assert!(png.exists());
}
