//! `info` on traces written by the format crate's own writer: exact counts, spans, suspension
//! figures, and clear errors on missing or damaged rank files.

use std::path::Path;

use format::{
    ChunkEncoder, ClockCalibration, ClockSource, Event, FileHeader, Marker, MpiCall,
    RankFileWriter, RawBuf, Suspension, UserRecord, rank_file_name,
};
use trace::{Trace, TraceError};
use views::info::summarize;

const TICKS_PER_SEC: f64 = 1e9;

fn header(rank: u32, world_size: u32) -> FileHeader {
    FileHeader {
        rank,
        world_size,
        part: 0,
        clock: ClockCalibration {
            ticks_per_sec: TICKS_PER_SEC,
            tick_at_epoch: 0,
            realtime_ns: 0,
            source: ClockSource::Tsc,
            // Ranks whose reads cost 9, 10, 11 ns: `info` shows the range.
            read_ticks: 9 + rank as u16,
        },
        created_unix_ns: 0,
        producer: "test".into(),
    }
}

/// Rank `rank` makes `sends` MPI_Send calls and two user records, spans 1 s + rank ms, and takes
/// part in two suspensions resuming at 10 ms / 20 ms (plus rank µs, so the spread is known).
fn write_rank(dir: &Path, rank: u32, world_size: u32, sends: u64) {
    write_rank_ending(dir, rank, world_size, sends, false);
}

/// [`write_rank`], whose rank is killed (`AbnormalEnd`) where it would have called `MPI_Finalize`.
fn write_rank_ending(dir: &Path, rank: u32, world_size: u32, sends: u64, killed: bool) {
    let mut buf = RawBuf::new();
    buf.push_event(&Event::FunctionDef {
        id: 7,
        name: "MPI_Send".into(),
    });
    buf.push_event(&Event::StringDef {
        id: 1,
        text: "pixels".into(),
    });
    buf.push_event(&Event::Marker(Marker::InitDone { time: 1_000 }));
    for i in 0..sends {
        buf.push_call(&MpiCall {
            func: 7,
            start: 2_000 + i * 100,
            end: 2_050 + i * 100,
            peer: 1,
            bytes: 8,
            ..Default::default()
        });
    }
    for _ in 0..2 {
        buf.push_event(&Event::User(UserRecord {
            time: 5_000,
            name: 1,
            payload: vec![1, 2, 3],
        }));
    }
    for seq in 0..2u64 {
        let end = (seq + 1) * 10_000_000 + u64::from(rank) * 1_000;
        buf.push_event(&Event::Suspension(Box::new(Suspension {
            seq,
            start: end - 500_000,
            z_ns: 500_000,
            end,
            flushed: seq == 1,
            overshoot_ns: 2_000,
            ..Default::default()
        })));
    }
    let end = 1_000 + 1_000_000_000 + u64::from(rank) * 1_000_000;
    buf.push_event(&Event::Marker(if killed {
        Marker::AbnormalEnd {
            time: end,
            signal: 15,
        }
    } else {
        Marker::FinalizeStart { time: end }
    }));
    let chunk = ChunkEncoder::new(3).encode(rank, 0, 0, &buf);
    let file = std::fs::File::create(dir.join(rank_file_name(rank, 0))).unwrap();
    let mut w = RankFileWriter::new(file, &header(rank, world_size)).unwrap();
    w.write_chunk(&chunk).unwrap();
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("evenflush-info-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn counts_spans_and_suspensions_are_exact() {
    let dir = temp_dir("exact");
    for rank in 0..3 {
        write_rank(&dir, rank, 3, 10 + u64::from(rank));
    }
    let info = summarize(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(info.ranks, 3);
    assert_eq!(info.functions["MPI_Send"], 10 + 11 + 12);
    assert_eq!(info.user_events["pixels"], 6);
    assert_eq!(info.lost_events, 0);
    assert!((info.span_s - 1.002).abs() < 1e-9, "span {}", info.span_s);
    assert_eq!(info.suspension.count, 2);
    assert_eq!(info.suspension.flushes, 1);
    assert!(
        (info.suspension.spread_us.max - 2.0).abs() < 1e-6,
        "{:?}",
        info.suspension.spread_us
    );
    assert!((info.suspension.overshoot_us.p50 - 2.0).abs() < 1e-9);
    assert_eq!(info.per_rank.iter().map(|r| r.mpi_calls).sum::<u64>(), 33);
    assert_eq!(info.clock_read_ns, Some((9.0, 11.0)));
    assert!(
        views::info::render_table(&info).contains("clock read   9.0-11.0 ns over the ranks"),
        "{}",
        views::info::render_table(&info)
    );
    assert!(info.skipped.is_empty());
    assert!(info.unended_ranks.is_empty());
    assert!(!views::info::render_table(&info).contains("CUT SHORT"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_killed_rank_s_span_ends_where_recording_stopped() {
    let dir = temp_dir("killed");
    write_rank(&dir, 0, 2, 3);
    write_rank_ending(&dir, 1, 2, 3, true);
    let info = summarize(&Trace::open(&dir).unwrap()).unwrap();
    let spans: Vec<Option<f64>> = info.per_rank.iter().map(|r| r.span_s).collect();
    assert_eq!(spans, [Some(1.0), Some(1.001)]);
    assert!((info.span_s - 1.001).abs() < 1e-9, "span {}", info.span_s);
    assert!(info.per_rank[1].abnormal_end && info.per_rank[1].ended);
    assert!(info.unended_ranks.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_rank_is_named() {
    let dir = temp_dir("missing");
    write_rank(&dir, 0, 3, 1);
    write_rank(&dir, 2, 3, 1);
    match Trace::open(&dir) {
        Err(TraceError::MissingRanks {
            missing,
            world_size,
            ..
        }) => {
            assert_eq!(missing, vec![1]);
            assert_eq!(world_size, 3);
        }
        other => panic!("expected MissingRanks, got {other:?}"),
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_cut_file_is_reported_not_fatal_and_damage_names_the_file() {
    let dir = temp_dir("cut");
    write_rank(&dir, 0, 2, 5);
    write_rank(&dir, 1, 2, 5);
    let victim = dir.join(rank_file_name(1, 0));
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() - 3]).unwrap();
    let info = summarize(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(
        info.functions["MPI_Send"], 5,
        "only rank 0's complete chunk is counted"
    );
    assert_eq!(info.skipped.len(), 1);
    assert_eq!(info.skipped[0].file, victim);
    // Its only chunk, with its `MPI_Finalize` marker, is gone: the rank's trace has no end.
    assert_eq!(info.unended_ranks, vec![1]);
    let table = views::info::render_table(&info);
    assert!(table.contains("CUT SHORT    rank(s) 1:"), "{table}");

    // A flipped byte in the payload is damage, not a cut: reported with the file, never read as data.
    let mut bytes = bytes.clone();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x55;
    std::fs::write(&victim, &bytes).unwrap();
    let info = summarize(&Trace::open(&dir).unwrap()).unwrap();
    assert_eq!(info.functions["MPI_Send"], 5);
    assert_eq!(info.skipped.len(), 1);
    assert!(
        info.skipped[0].what.contains("checksum"),
        "{}",
        info.skipped[0].what
    );

    // A damaged file header is an error that names the file.
    bytes[0] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();
    let err = Trace::open(&dir).and_then(|t| summarize(&t)).unwrap_err();
    assert!(err.to_string().contains("rank-00001.evf"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
