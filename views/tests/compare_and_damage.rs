//! `compare` on runs of the same and of different programs, and reconstruct/compare on damaged
//! or incomplete traces: a clear error or a warning naming what was skipped, never a panic.

#[path = "../../reconstruct/tests/common/mod.rs"]
mod common;

use common::*;
use format::{Event, Marker, RankFile, rank_file_name};
use reconstruct::rebuild::{self, Options, RebuildError};
use trace::{Trace, TraceError};
use views::compare::{CompareError, compare};

/// Two ranks: a ping-pong per iteration, `jitter` ns added to every call's duration on rank 1.
fn pingpong(iterations: u64, jitter: u64, rank1_send: format::FunctionId) -> Vec<RankTrace> {
    (0..2u32)
        .map(|r| {
            let mut events = function_defs();
            events.push(Event::Marker(Marker::InitDone { time: 1_000 }));
            let mut t = 2_000u64;
            for i in 0..iterations {
                let tag = i as i32;
                let extra = if r == 1 { jitter * (i % 3) } else { 0 };
                let (first, second) = if r == 0 {
                    (SEND, RECV)
                } else {
                    (RECV, rank1_send)
                };
                events.push(Event::Call(call(
                    first,
                    t,
                    t + 500 + extra,
                    1 - r as i32,
                    tag,
                )));
                events.push(Event::Call(call(
                    second,
                    t + 1_000,
                    t + 1_500 + extra,
                    1 - r as i32,
                    tag,
                )));
                t += 3_000;
            }
            events.push(Event::Marker(Marker::FinalizeStart {
                time: t + 1_000 * u64::from(r),
            }));
            RankTrace {
                rank: r,
                ticks_per_sec: 1e9,
                streams: vec![(0, events)],
            }
        })
        .collect()
}

#[test]
fn compare_reports_deltas_of_the_same_program() {
    let a = temp_dir("cmp-a");
    let b = temp_dir("cmp-b");
    write_trace(&a, 2, &pingpong(100, 0, SEND), 40);
    write_trace(&b, 2, &pingpong(100, 20_000, SEND), 40);
    let same = compare(&Trace::open(&a).unwrap(), &Trace::open(&a).unwrap()).unwrap();
    assert_eq!(same.calls, 400);
    assert_eq!(same.total_error_pct, 0.0);
    assert_eq!(same.duration_delta_us.max, 0.0);
    assert_eq!(same.within_10us.duration, 1.0);

    let r = compare(&Trace::open(&a).unwrap(), &Trace::open(&b).unwrap()).unwrap();
    assert_eq!(r.calls, 400);
    // Rank 1's calls are 0, 20 or 40 µs longer in a third of the iterations each.
    assert_eq!(r.duration_delta_us.max, 40.0);
    assert_eq!(r.per_function["MPI_Send"].calls, 200);
    let exact_share = (200.0 + 2.0 * 34.0) / 400.0; // rank 0's calls and rank 1's i % 3 == 0
    assert!(
        (r.within_10us.duration - exact_share).abs() < 1e-12,
        "{}",
        r.within_10us.duration
    );
    assert_eq!(r.within_1ms.duration, 1.0);
    assert_eq!(r.start_shift_us.max, 0.0, "starts were not moved");
    for d in [a, b] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn compare_refuses_different_programs_naming_the_first_difference() {
    let a = temp_dir("cmp-diff-a");
    let b = temp_dir("cmp-diff-b");
    write_trace(&a, 2, &pingpong(10, 0, SEND), 7);
    write_trace(&b, 2, &pingpong(10, 0, SSEND), 7);
    match compare(&Trace::open(&a).unwrap(), &Trace::open(&b).unwrap()) {
        Err(CompareError::Different(what)) => {
            assert!(
                what.contains("rank 1") && what.contains("call #1"),
                "{what}"
            );
            assert!(
                what.contains("MPI_Send") && what.contains("MPI_Ssend"),
                "{what}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let shorter = temp_dir("cmp-diff-c");
    write_trace(&shorter, 2, &pingpong(9, 0, SEND), 7);
    match compare(&Trace::open(&a).unwrap(), &Trace::open(&shorter).unwrap()) {
        Err(CompareError::Different(what)) => {
            assert!(what.contains("RUN ends after 18 calls"), "{what}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    for d in [a, b, shorter] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

fn reconstruct_dir(dir: &std::path::Path) -> Result<rebuild::Summary, RebuildError> {
    let trace = Trace::open(dir).map_err(RebuildError::Trace)?;
    rebuild::reconstruct(
        &trace,
        &dir.with_extension("out"),
        &Options::default(),
        &mut |_, _| {},
    )
}

#[test]
fn a_cut_or_flipped_file_is_reconstructed_up_to_the_damage_with_a_warning() {
    for (name, damage) in [("cut", 0usize), ("flip", 1)] {
        let dir = temp_dir(&format!("dmg-{name}"));
        write_trace(&dir, 2, &pingpong(50, 0, SEND), 20);
        let victim = dir.join(rank_file_name(1, 0));
        let mut bytes = std::fs::read(&victim).unwrap();
        if damage == 0 {
            bytes.truncate(bytes.len() - 5);
        } else {
            let at = bytes.len() - 40;
            bytes[at] ^= 0x40;
        }
        std::fs::write(&victim, &bytes).unwrap();
        let s = reconstruct_dir(&dir).unwrap();
        assert_eq!(s.skipped.len(), 1, "{name}: {:?}", s.skipped);
        assert_eq!(s.skipped[0].file, victim);
        // Rank 1 lost its last chunk (20 events), rank 0 nothing; everything readable was written.
        let out = dir.with_extension("out");
        let written: usize = (0..2).map(|r| read_lane(&out, r, 0).len()).sum();
        assert_eq!(written as u64, s.events);
        assert_eq!(read_lane(&out, 0, 0).len(), read_lane(&dir, 0, 0).len());
        assert!(
            s.hb.before.unmatched_sends > 0,
            "rank 0's sends to the lost part stay unmatched"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(out).unwrap();
    }
}

#[test]
fn missing_ranks_wrong_versions_and_empty_directories_are_clear_errors() {
    let dir = temp_dir("dmg-missing");
    write_trace(&dir, 3, &pingpong(3, 0, SEND), 10);
    match reconstruct_dir(&dir) {
        Err(RebuildError::Trace(TraceError::MissingRanks { missing, .. })) => {
            assert_eq!(missing, vec![2])
        }
        other => panic!("expected MissingRanks, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = temp_dir("dmg-version");
    write_trace(&dir, 2, &pingpong(3, 0, SEND), 10);
    let victim = dir.join(rank_file_name(0, 0));
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[8] = 99; // the file header's version field
    std::fs::write(&victim, &bytes).unwrap();
    assert!(RankFile::open(&victim).is_err());
    match reconstruct_dir(&dir) {
        Err(RebuildError::Trace(TraceError::Format(e))) => {
            assert!(
                e.to_string().contains("version") || e.to_string().contains("checksum"),
                "{e}"
            );
            assert_eq!(e.path(), victim.as_path());
        }
        other => panic!("expected a format error, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = temp_dir("dmg-empty");
    assert!(matches!(
        reconstruct_dir(&dir),
        Err(RebuildError::Trace(TraceError::Empty(_)))
    ));
    std::fs::remove_dir_all(&dir).unwrap();

    let gone = dir.join("nowhere");
    assert!(matches!(
        reconstruct_dir(&gone),
        Err(RebuildError::Trace(TraceError::NoDirectory(_)))
    ));
}

#[test]
fn the_output_directory_cannot_be_the_trace_itself() {
    let dir = temp_dir("dmg-self");
    write_trace(&dir, 2, &pingpong(3, 0, SEND), 10);
    let trace = Trace::open(&dir).unwrap();
    let err = rebuild::reconstruct(&trace, &dir, &Options::default(), &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, RebuildError::BadOutput { .. }), "{err}");
    assert_eq!(
        read_lane(&dir, 0, 0).len(),
        7 + 2 + 6,
        "the trace is untouched"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flipping_any_byte_never_panics() {
    let dir = temp_dir("dmg-any");
    write_trace(&dir, 2, &pingpong(20, 0, SEND), 9);
    let victim = dir.join(rank_file_name(1, 0));
    let pristine = std::fs::read(&victim).unwrap();
    let step = (pristine.len() / 60).max(1);
    let mut failures = 0;
    for at in (0..pristine.len()).step_by(step) {
        let mut bytes = pristine.clone();
        bytes[at] ^= 0xA5;
        std::fs::write(&victim, &bytes).unwrap();
        match reconstruct_dir(&dir) {
            // Damage in a chunk: that file's rest is skipped and said so.
            Ok(s) => assert!(!s.skipped.is_empty(), "byte {at}: damage went unnoticed"),
            // Damage in the file header: the file is refused, naming it.
            Err(RebuildError::Trace(TraceError::Format(e))) => {
                assert_eq!(e.path(), victim.as_path());
                failures += 1;
            }
            Err(other) => panic!("byte {at}: unexpected error {other}"),
        }
    }
    assert!(failures > 0, "some flips hit the file header");
    std::fs::remove_dir_all(&dir).unwrap();
    let _ = std::fs::remove_dir_all(dir.with_extension("out"));
}

/// One flipped byte in a rank's first chunk costs that chunk only: the reader resumes at the next
/// chunk and says exactly which bytes it skipped, once.
#[test]
fn a_damaged_first_chunk_does_not_lose_the_rest_of_the_rank() {
    let dir = temp_dir("dmg-first");
    write_trace(&dir, 2, &pingpong(50, 0, SEND), 20);
    let victim = dir.join(rank_file_name(1, 0));
    let intact = read_lane(&dir, 1, 0).len();
    let mut bytes = std::fs::read(&victim).unwrap();
    let file = RankFile::open(&victim).unwrap();
    let first_chunk = file.chunks().next().unwrap().unwrap();
    let (start, len) = (
        first_chunk.offset as usize,
        72 + first_chunk.header.stored_len as usize,
    );
    let lost_events = first_chunk.event_count() as usize;
    bytes[start + len - 3] ^= 0x10;
    std::fs::write(&victim, &bytes).unwrap();
    let s = reconstruct_dir(&dir).unwrap();
    let out = dir.with_extension("out");
    assert_eq!(read_lane(&out, 1, 0).len(), intact - lost_events);
    // The checksum failure with its byte range, then the sequence gap it leaves: each once.
    assert_eq!(s.skipped.len(), 2, "{:?}", s.skipped);
    assert_eq!(s.skipped[0].offset, start as u64);
    assert!(
        s.skipped[0]
            .what
            .contains(&format!("bytes {start}..{} skipped", start + len)),
        "{:?}",
        s.skipped
    );
    assert!(
        s.skipped[1]
            .what
            .contains("chunk 0 of thread stream 0 missing")
    );
    // The location is said once, by the report itself, not again inside its text.
    assert!(!s.skipped[0].what.contains(&victim.display().to_string()));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(out).unwrap();
}

/// A copied trace is read from the copy only, with the further output directories its meta.json
/// names resolved relative to the copy; a directory that did not come along is named.
#[test]
fn a_copied_trace_never_reads_the_original() {
    let root = temp_dir("copied");
    let (orig_a, orig_b) = (root.join("orig/disk1/t"), root.join("orig/disk2/t"));
    std::fs::create_dir_all(&orig_a).unwrap();
    std::fs::create_dir_all(&orig_b).unwrap();
    let ranks = pingpong(30, 0, SEND);
    write_trace(&orig_a, 2, &ranks[..1], 20);
    write_trace(&orig_b, 2, &ranks[1..], 20);
    let meta = serde_json::json!({
        "host": "h",
        "settings": {"EVENFLUSH_OUT": format!("{},{}", orig_a.display(), orig_b.display())}
    });
    std::fs::write(orig_a.join("meta.json"), meta.to_string()).unwrap();
    let trace = Trace::open(&orig_a).unwrap();
    assert_eq!(trace.ranks.len(), 2);

    // Both directories copied side by side: the copy is complete on its own.
    let (copy_a, copy_b) = (root.join("copy/disk1/t"), root.join("copy/disk2/t"));
    for (from, to) in [(&orig_a, &copy_a), (&orig_b, &copy_b)] {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    let trace = Trace::open(&copy_a).unwrap();
    let paths: Vec<_> = trace
        .ranks
        .iter()
        .flat_map(|r| r.parts.iter().map(|p| p.path().to_path_buf()))
        .collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths.iter().all(|p| p.starts_with(root.join("copy"))),
        "{paths:?}"
    );
    let events = views::info::summarize(&trace).unwrap().events_total;
    assert_eq!(
        events,
        views::info::summarize(&Trace::open(&orig_a).unwrap())
            .unwrap()
            .events_total
    );

    // Only the first directory copied: rank 1 is missing, and the error says where it looked.
    std::fs::remove_dir_all(root.join("copy/disk2")).unwrap();
    let err = Trace::open(&copy_a).unwrap_err().to_string();
    assert!(err.contains("[1]"), "{err}");
    assert!(err.contains(&orig_b.display().to_string()), "{err}");
    assert!(err.contains(&copy_b.display().to_string()), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}
