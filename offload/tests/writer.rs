//! Writers: file layout, durability path, and rotation over directories when a disk fills.
//!
//! The out-of-space tests mount tiny tmpfs file systems (needs root); where mounting is refused, or
//! io_uring is blocked, they fail unless the skip is allowed (`tests/common/skip.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use format::chunk::{ChunkEncoder, EncodedChunk};
use format::framing::{FILE_MAGIC, FileHeader, encode_file_header};
use format::synthetic::{HaloConfig, raw_buf};
use format::{ClockCalibration, ClockSource};
#[path = "../../tests/common/skip.rs"]
mod skip;

use offload::writer::{
    OutputPlan, PosixWriter, UringWriter, WriteError, Writer, WriterKind, open_writer,
};

fn header(rank: u32) -> FileHeader {
    FileHeader {
        rank,
        world_size: 4,
        part: 0,
        clock: ClockCalibration {
            ticks_per_sec: 1e9,
            tick_at_epoch: 0,
            realtime_ns: 0,
            source: ClockSource::Monotonic,
            read_ticks: 0,
        },
        created_unix_ns: 1,
        producer: "offload tests".into(),
    }
}

/// A chunk whose bytes say which chunk it is (the writer never looks inside).
fn fake_chunk(index: u32, len: usize) -> EncodedChunk {
    let mut bytes = vec![(index % 251) as u8; len];
    bytes[..4].copy_from_slice(&index.to_le_bytes());
    EncodedChunk {
        bytes,
        raw_len: 2 * len as u64,
        stored_len: len as u64,
        events: 10,
        first_ts: 0,
        last_ts: 0,
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("offload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The chunk indices stored in a part file, after checking its header.
fn chunks_in(path: &Path, part: u32, chunk_len: usize) -> Vec<u32> {
    let data = std::fs::read(path).unwrap();
    let expected_header = encode_file_header(&FileHeader { part, ..header(3) });
    assert_eq!(&data[..8], &FILE_MAGIC);
    assert_eq!(&data[..expected_header.len()], &expected_header[..]);
    let body = &data[expected_header.len()..];
    assert_eq!(
        body.len() % chunk_len,
        0,
        "{path:?} ends in a partial chunk"
    );
    body.chunks(chunk_len)
        .map(|c| {
            let index = u32::from_le_bytes(c[..4].try_into().unwrap());
            assert_eq!(
                c,
                &fake_chunk(index, chunk_len).bytes[..],
                "chunk {index} damaged"
            );
            index
        })
        .collect()
}

fn writer_of(kind: WriterKind, plan: OutputPlan) -> Box<dyn Writer> {
    match kind {
        WriterKind::Posix => Box::new(PosixWriter::new(plan)),
        WriterKind::Uring => Box::new(UringWriter::new(plan).expect("io_uring available")),
        WriterKind::MpiIo => unreachable!(),
    }
}

/// Whether io_uring can be used here; when it cannot, the calling test fails unless the skip
/// `io_uring` is allowed.
fn uring_works() -> bool {
    match io_uring_probe() {
        Ok(()) => true,
        Err(e) => {
            skip::skip_or_fail("io_uring", &format!("io_uring unavailable: {e}"));
            false
        }
    }
}

fn io_uring_probe() -> Result<(), String> {
    let dir = temp_dir("probe");
    let plan = OutputPlan {
        dirs: vec![dir.clone()],
        header: header(3),
    };
    let probed = UringWriter::new(plan)
        .map(|_| ())
        .map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(dir);
    probed
}

#[test]
fn writes_header_then_chunks_in_order_across_calls() {
    let mut kinds = vec![WriterKind::Posix];
    if uring_works() {
        kinds.push(WriterKind::Uring);
    }
    for kind in kinds {
        let dir = temp_dir(&format!("plain-{kind:?}"));
        let plan = OutputPlan {
            dirs: vec![dir.clone()],
            header: header(3),
        };
        let mut writer = writer_of(kind, plan);
        let first = writer
            .write_chunks(&mut (0..5).map(|i| fake_chunk(i, 1000)))
            .unwrap();
        let second = writer
            .write_chunks(&mut (5..8).map(|i| fake_chunk(i, 1000)))
            .unwrap();
        assert_eq!((first.chunks, second.chunks), (5, 3));
        assert_eq!(first.bytes_raw, 5 * 2000);
        assert_eq!(first.events, 50);
        let header_len = encode_file_header(&header(3)).len() as u64;
        assert_eq!(first.bytes_stored, header_len + 5 * 1000);
        assert_eq!(second.bytes_stored, 3 * 1000);
        assert_eq!(writer.files(), &[dir.join("rank-00003.evf")]);
        assert_eq!(
            chunks_in(&dir.join("rank-00003.evf"), 0, 1000),
            (0..8).collect::<Vec<_>>()
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn uring_overlaps_real_encoding_and_matches_posix_bytes() {
    if !uring_works() {
        return;
    }
    let buffers: Vec<_> = (0..4)
        .map(|seed| {
            raw_buf(&HaloConfig {
                iterations: 2000,
                seed,
                ..HaloConfig::default()
            })
        })
        .collect();
    let mut outputs = Vec::new();
    for kind in [WriterKind::Posix, WriterKind::Uring] {
        let dir = temp_dir(&format!("encode-{kind:?}"));
        let mut writer = open_writer(
            kind,
            OutputPlan {
                dirs: vec![dir.clone()],
                header: header(3),
            },
        )
        .unwrap();
        let mut encoder = ChunkEncoder::new(3);
        let mut lazily_encoded = buffers
            .iter()
            .enumerate()
            .map(|(seq, raw)| encoder.encode(3, 0, seq as u64, raw));
        let stats = writer.write_chunks(&mut lazily_encoded).unwrap();
        assert_eq!(stats.chunks, 4);
        assert!(
            stats.bytes_stored < stats.bytes_raw,
            "zstd should shrink a halo trace"
        );
        outputs.push(std::fs::read(dir.join("rank-00003.evf")).unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn mpiio_is_left_to_the_recorder() {
    let dir = temp_dir("mpiio");
    let plan = OutputPlan {
        dirs: vec![dir.clone()],
        header: header(3),
    };
    let opened = open_writer(WriterKind::MpiIo, plan);
    let _ = std::fs::remove_dir_all(dir);
    assert!(matches!(opened, Err(WriteError::Unavailable(_))));
}

/// A tmpfs mount that is unmounted (and its mount point removed) on drop.
struct TinyDisk {
    path: PathBuf,
}

impl TinyDisk {
    fn mount(name: &str, size: &str) -> Result<TinyDisk, String> {
        let path = temp_dir(&format!("tmpfs-{name}"));
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&path);
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(TinyDisk { path })
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

fn out_of_space_rotation(kind: WriterKind) {
    let disks = match (
        TinyDisk::mount(&format!("a-{kind:?}"), "64k"),
        TinyDisk::mount(&format!("b-{kind:?}"), "128k"),
    ) {
        (Ok(a), Ok(b)) => [a, b],
        (Err(e), _) | (_, Err(e)) => {
            skip::skip_or_fail(
                "tmpfs",
                &format!("ENOSPC rotation: cannot mount tmpfs ({e})"),
            );
            return;
        }
    };
    let chunk_len = 10_000;
    let plan = OutputPlan {
        dirs: disks.iter().map(|d| d.path.clone()).collect(),
        header: header(3),
    };
    let mut writer = writer_of(kind, plan);
    let mut written = Vec::new();
    let mut next = 0u32;
    let stop = loop {
        // Four chunks per flush, as a suspension would write them.
        let batch: Vec<u32> = (next..next + 4).collect();
        next += 4;
        match writer.write_chunks(&mut batch.iter().map(|&i| fake_chunk(i, chunk_len))) {
            Ok(stats) => {
                assert_eq!(stats.chunks, 4);
                written.extend(batch);
            }
            Err(e) => break e,
        }
        assert!(next < 1000, "two tiny disks never filled up");
    };
    let WriteError::OutOfSpace {
        written: partial, ..
    } = stop
    else {
        panic!("expected OutOfSpace, got {stop}");
    };
    written.extend((next - 4..).take(partial.chunks as usize));
    assert!(writer.stopped());
    assert!(matches!(
        writer.write_chunks(&mut std::iter::once(fake_chunk(9999, 10))),
        Err(WriteError::Stopped)
    ));
    let files = writer.files().to_vec();
    assert_eq!(
        files,
        vec![
            disks[0].path.join("rank-00003.evf"),
            disks[1].path.join("rank-00003.p1.evf"),
        ]
    );
    // Every chunk reported written is on disk exactly once, in order, and nothing else is.
    let mut on_disk = chunks_in(&files[0], 0, chunk_len);
    let first_part = on_disk.len();
    on_disk.extend(chunks_in(&files[1], 1, chunk_len));
    println!(
        "{kind:?}: {first_part} chunks in part 0, {} in part 1, stopped after chunk {}",
        on_disk.len() - first_part,
        written.len()
    );
    assert!(first_part >= 3 && on_disk.len() > first_part);
    assert_eq!(on_disk, written);
}

#[test]
fn posix_rotates_to_the_next_directory_on_enospc_then_stops() {
    out_of_space_rotation(WriterKind::Posix);
}

#[test]
fn uring_rotates_to_the_next_directory_on_enospc_then_stops() {
    if uring_works() {
        out_of_space_rotation(WriterKind::Uring);
    }
}

/// Flush throughput of both backends with real zstd encoding (includes fdatasync + DONTNEED).
#[test]
#[ignore = "measurement: run with --release --ignored --nocapture"]
fn measure_flush_throughput() {
    let buffers: Vec<_> = (0..16)
        .map(|seed| {
            raw_buf(&HaloConfig {
                iterations: 20_000,
                seed,
                ..HaloConfig::default()
            })
        })
        .collect();
    let mut kinds = vec![WriterKind::Posix];
    if uring_works() {
        kinds.push(WriterKind::Uring);
    }
    for kind in kinds {
        let dir = temp_dir(&format!("throughput-{kind:?}"));
        let mut writer = open_writer(
            kind,
            OutputPlan {
                dirs: vec![dir.clone()],
                header: header(3),
            },
        )
        .unwrap();
        let mut encoder = ChunkEncoder::new(3);
        let started = std::time::Instant::now();
        let stats = writer
            .write_chunks(
                &mut buffers
                    .iter()
                    .enumerate()
                    .map(|(seq, raw)| encoder.encode(3, 0, seq as u64, raw)),
            )
            .unwrap();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{kind:?}: {} chunks, {:.1} MB raw -> {:.1} MB stored in {:.3} s ({:.0} MB/s raw)",
            stats.chunks,
            stats.bytes_raw as f64 / 1e6,
            stats.bytes_stored as f64 / 1e6,
            secs,
            stats.bytes_raw as f64 / 1e6 / secs
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
