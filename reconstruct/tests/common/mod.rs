//! Helpers shared by the reconstruct and views tests (`views/tests` include this file by path):
//! writing traces with the format crate's own writer and reading lanes back.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use format::{
    ChunkEncoder, ClockCalibration, ClockSource, Event, FileHeader, FunctionId, MpiCall, NO_RANK,
    NO_REQUEST, NO_TAG, RankFile, RankFileWriter, RawBuf, rank_file_name,
};

pub const SEND: FunctionId = 1;
pub const RECV: FunctionId = 2;
pub const BARRIER: FunctionId = 3;
pub const ISEND: FunctionId = 4;
pub const IRECV: FunctionId = 5;
pub const WAIT: FunctionId = 6;
pub const SSEND: FunctionId = 7;

/// The completion a blocking receive of 8 bytes from `source` with `tag` records after its call.
pub fn received(source: i32, tag: i32) -> Event {
    Event::Completion(format::Completion {
        request: NO_REQUEST,
        source,
        tag,
        bytes: 8,
        cancelled: false,
    })
}

pub fn function_defs() -> Vec<Event> {
    function_defs_with(&[])
}

/// [`function_defs`] and the definitions of the functions in `more`, which a test's program uses
/// beside the usual ones.
pub fn function_defs_with(more: &[(FunctionId, &str)]) -> Vec<Event> {
    [
        (SEND, "MPI_Send"),
        (RECV, "MPI_Recv"),
        (BARRIER, "MPI_Barrier"),
        (ISEND, "MPI_Isend"),
        (IRECV, "MPI_Irecv"),
        (WAIT, "MPI_Wait"),
        (SSEND, "MPI_Ssend"),
    ]
    .into_iter()
    .chain(more.iter().copied())
    .map(|(id, name)| Event::FunctionDef {
        id,
        name: name.into(),
    })
    .collect()
}

pub fn call(func: FunctionId, start: u64, end: u64, peer: i32, tag: i32) -> MpiCall {
    MpiCall {
        func,
        start,
        end,
        comm: 0,
        peer,
        tag,
        bytes: 8,
        root: NO_RANK,
        request: NO_REQUEST,
        cost: 0,
        recv_bytes: 0,
        site: format::NO_SITE,
    }
}

pub fn barrier(start: u64, end: u64) -> MpiCall {
    call(BARRIER, start, end, NO_RANK, NO_TAG)
}

/// A scratch directory of one test, removed when the test ends (passing or not), so that runs do
/// not pile up directories in the system's temporary directory.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("evenflush-rec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// One rank's events per stream, written in chunks of `chunk_events` (streams interleaved).
pub struct RankTrace {
    pub rank: u32,
    pub ticks_per_sec: f64,
    pub streams: Vec<(u32, Vec<Event>)>,
}

/// The format crate's synthetic halo on `world` ranks, one stream each, with every message
/// matched: the generator tags a message by the face it leaves through, and a receive here names
/// the face it arrives at (left <-> right, down <-> up).
pub fn matched_halo(world: u32, iterations: u64) -> Vec<RankTrace> {
    use format::synthetic::{FUNC_IRECV, HaloConfig};
    (0..world)
        .map(|rank| {
            let mut events = format::synthetic::events(&HaloConfig {
                world_size: world,
                rank,
                iterations,
                ..HaloConfig::default()
            });
            for e in &mut events {
                match e {
                    Event::Call(c) if c.func == FUNC_IRECV => c.tag ^= 1,
                    Event::Completion(c) if c.source >= 0 => c.tag ^= 1,
                    _ => {}
                }
            }
            RankTrace {
                rank,
                ticks_per_sec: 2e9,
                streams: vec![(0, events)],
            }
        })
        .collect()
}

pub fn write_trace(dir: &Path, world_size: u32, ranks: &[RankTrace], chunk_events: usize) {
    write_trace_reading(dir, world_size, ranks, chunk_events, 0);
}

/// [`write_trace`] with every file header saying one clock read costs `read_ticks`.
pub fn write_trace_reading(
    dir: &Path,
    world_size: u32,
    ranks: &[RankTrace],
    chunk_events: usize,
    read_ticks: u16,
) {
    let mut encoder = ChunkEncoder::new(1);
    for r in ranks {
        let header = FileHeader {
            rank: r.rank,
            world_size,
            part: 0,
            clock: ClockCalibration {
                ticks_per_sec: r.ticks_per_sec,
                tick_at_epoch: 0,
                realtime_ns: 0,
                source: ClockSource::Tsc,
                read_ticks,
            },
            created_unix_ns: 0,
            producer: "reconstruct test".into(),
        };
        let file = std::fs::File::create(dir.join(rank_file_name(r.rank, 0))).unwrap();
        let mut w = RankFileWriter::new(file, &header).unwrap();
        let mut cursors = vec![0usize; r.streams.len()];
        let mut seqs = vec![0u64; r.streams.len()];
        loop {
            let mut wrote = false;
            for (i, (stream, events)) in r.streams.iter().enumerate() {
                let from = cursors[i];
                if from >= events.len() {
                    continue;
                }
                let to = (from + chunk_events).min(events.len());
                let mut buf = RawBuf::new();
                for e in &events[from..to] {
                    buf.push_event(e);
                }
                w.write_chunk(&encoder.encode(r.rank, *stream, seqs[i], &buf))
                    .unwrap();
                seqs[i] += 1;
                cursors[i] = to;
                wrote = true;
            }
            if !wrote {
                break;
            }
        }
    }
}

/// Every event of one stream of one rank, in order.
pub fn read_lane(dir: &Path, rank: u32, stream: u32) -> Vec<Event> {
    let file = RankFile::open(dir.join(rank_file_name(rank, 0))).unwrap();
    let mut out = Vec::new();
    for chunk in file.chunks() {
        let chunk = chunk.unwrap();
        if chunk.stream() == stream {
            out.extend(chunk.events());
        }
    }
    out
}

pub fn calls(events: &[Event]) -> Vec<MpiCall> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Call(c) => Some(*c),
            _ => None,
        })
        .collect()
}

/// Reference duration of each `MPI_Send` and each `MPI_Barrier` of [`shifted_program`], ns.
pub const SHIFTED_SEND_NS: u64 = 100_000;
pub const SHIFTED_BARRIER_NS: u64 = 10_000;
/// Time from the start of one iteration to the next, ns (longer than any shifted call).
pub const SHIFTED_STEP_NS: u64 = 300_000;
/// The end of `MPI_Init` and the first call's start.
pub const SHIFTED_INIT_NS: u64 = 1_000;
pub const SHIFTED_FIRST_NS: u64 = 2_000;

/// Every rank runs `iterations` × (`MPI_Send`, `MPI_Barrier`), each call starting at the same
/// time in every variant; `shift(rank, function)` ns are added to every call's duration and
/// `late(rank)` ns to the rank's start of `MPI_Finalize`. Variants of one program with known
/// signed differences, for `compare`.
pub fn shifted_program(
    ranks: u32,
    iterations: u64,
    shift: impl Fn(u32, FunctionId) -> i64,
    late: impl Fn(u32) -> u64,
) -> Vec<RankTrace> {
    (0..ranks)
        .map(|r| {
            let mut events = function_defs();
            events.push(Event::Marker(format::Marker::InitDone {
                time: SHIFTED_INIT_NS,
            }));
            let mut t = SHIFTED_FIRST_NS;
            let peer = ((r + 1) % ranks) as i32;
            for i in 0..iterations {
                let send_end = (t + SHIFTED_SEND_NS).saturating_add_signed(shift(r, SEND));
                events.push(Event::Call(call(SEND, t, send_end, peer, i as i32)));
                let b = t + SHIFTED_STEP_NS / 2;
                let barrier_end = (b + SHIFTED_BARRIER_NS).saturating_add_signed(shift(r, BARRIER));
                events.push(Event::Call(barrier(b, barrier_end)));
                t += SHIFTED_STEP_NS;
            }
            events.push(Event::Marker(format::Marker::FinalizeStart {
                time: t + late(r),
            }));
            RankTrace {
                rank: r,
                ticks_per_sec: 1e9,
                streams: vec![(0, events)],
            }
        })
        .collect()
}

/// The reference span (end of `MPI_Init` to start of `MPI_Finalize`) of [`shifted_program`]
/// without lateness, ns.
pub fn shifted_span_ns(iterations: u64) -> u64 {
    SHIFTED_FIRST_NS + iterations * SHIFTED_STEP_NS - SHIFTED_INIT_NS
}
