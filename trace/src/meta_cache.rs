//! The first pass ([`crate::scan`]) kept beside the trace, for the windowed views: the first pass
//! decodes every chunk of the trace, so a window could never read less without it.
//!
//! What is kept is not the metadata but the events the metadata took (`RankMeta::see` returned
//! true: `scan_rank_keeping`), in order with their threads, written as an ordinary rank file;
//! reading them back through `RankMeta::see` gives the same metadata by construction, as an MPI
//! job's processes rebuild each other's (`reconstruct::job`). Beside it, a stamp: per source file
//! its length, modification time and a checksum of its last 4 KiB, and what the pass counted
//! (events, threads, what it skipped). A stamp that does not match the files now, a kept file
//! that does not read back whole, or one of another version is rebuilt from the trace, never
//! used. Both live in `.evenflush-meta/` in the trace's directory (FORMAT.md "Chunk header");
//! where that cannot be written (a read-only copy) every windowed view makes the full first pass.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use format::{ChunkEncoder, ChunkWalk, Event, FileHeader, RankFile, RankFileWriter, RawBuf};

use crate::clock::align_clocks;
use crate::definitions::RankMeta;
use crate::error::{Skipped, TraceError};
use crate::files::RankFiles;
use crate::open::Trace;
use crate::parallel::{map_indexed, threads};
use crate::scan::scan_rank_keeping;

/// The directory, in the trace's, that holds the kept first passes.
pub const CACHE_DIR: &str = ".evenflush-meta";
/// Changes whenever what is kept or how it is read back changes: older stamps are rebuilt.
/// 3: the kept file's header carries the clock's read cost (`ClockCalibration::read_ticks`).
/// 4: the first `AbnormalEnd` is kept (a killed rank's span ends there).
const VERSION: u32 = 4;
/// Bytes at the end of each source file whose checksum the stamp holds.
const TAIL: u64 = 4096;

/// What a stamp says of one source file: an index kept beside the trace is used only while every
/// file it was made from still matches its [`Source`] (the one staleness rule of every kept
/// index: this first pass, `reconstruct::match_index`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Source {
    path: PathBuf,
    len: u64,
    mtime_ns: u64,
    tail_crc: u32,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Stamp {
    version: u32,
    rank: u32,
    sources: Vec<Source>,
    events: u64,
    streams: Vec<u32>,
    skipped: Vec<Skipped>,
    /// Length of the kept file, written before the stamp.
    kept_len: u64,
}

/// [`crate::scan::scan`], through the kept first pass of each rank where it matches the trace's
/// files, making and keeping it where it does not.
pub fn scan_cached(trace: &Trace) -> Result<Vec<RankMeta>, TraceError> {
    let dir = trace.dir.join(CACHE_DIR);
    let mut metas = map_indexed(trace.ranks.len(), threads(0), |i| {
        rank_cached(&dir, &trace.ranks[i])
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    align_clocks(&mut metas);
    Ok(metas)
}

/// The first pass of a view: kept and reused for a windowed one (which would otherwise decode
/// every chunk for it), made afresh for one of the whole run, which reads every chunk anyway and
/// leaves the trace's directory as it found it.
pub fn scan_for(trace: &Trace, windowed: bool) -> Result<Vec<RankMeta>, TraceError> {
    if windowed {
        scan_cached(trace)
    } else {
        crate::scan::scan(trace)
    }
}

fn paths(dir: &Path, rank: u32) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("meta-{rank:05}.kept")),
        dir.join(format!("meta-{rank:05}.json")),
    )
}

fn rank_cached(dir: &Path, files: &RankFiles) -> Result<RankMeta, TraceError> {
    let sources = sources(files)?;
    let (kept_path, stamp_path) = paths(dir, files.rank);
    if let Some(meta) = read_kept(&kept_path, &stamp_path, &sources, files.rank) {
        return Ok(meta);
    }
    let mut kept: Vec<(u32, Event)> = Vec::new();
    let meta = scan_rank_keeping(files, |stream, e| kept.push((stream, e.clone())))?;
    let world_size = files
        .parts
        .first()
        .map(|p| p.open().map(|f| f.header().world_size))
        .transpose()?
        .unwrap_or(0);
    // A cache that cannot be written costs the next windowed view a full first pass, nothing
    // else: the metadata returned comes from the trace either way.
    let _ = write_kept(dir, &meta, world_size, &kept, sources);
    Ok(meta)
}

/// The directory of `trace`'s kept indexes.
pub fn cache_dir(trace: &Trace) -> PathBuf {
    trace.dir.join(CACHE_DIR)
}

/// What a stamp says of every file of every rank of `trace`, as the files are now.
pub fn trace_sources(trace: &Trace) -> Result<Vec<Source>, TraceError> {
    let mut all = Vec::new();
    for files in &trace.ranks {
        all.extend(sources(files)?);
    }
    Ok(all)
}

/// Writes `bytes` to `path` under a name of this process's and renames it, so a reader never
/// sees half a file.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// What the stamp says of each file the rank reads from, as the files are now.
fn sources(files: &RankFiles) -> Result<Vec<Source>, TraceError> {
    files
        .parts
        .iter()
        .map(|part| {
            let path = part.path().to_path_buf();
            let io = |e: std::io::Error| TraceError::Io {
                path: path.clone(),
                what: e.to_string(),
            };
            let mut f = std::fs::File::open(&path).map_err(io)?;
            let m = f.metadata().map_err(io)?;
            let mtime_ns = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            let len = m.len();
            f.seek(SeekFrom::Start(len.saturating_sub(TAIL)))
                .map_err(io)?;
            let mut tail = Vec::with_capacity(TAIL as usize);
            f.read_to_end(&mut tail).map_err(io)?;
            Ok(Source {
                path,
                len,
                mtime_ns,
                tail_crc: crc32c::crc32c(&tail),
            })
        })
        .collect()
}

/// The rank's metadata from its kept first pass, if that is whole and matches `sources`.
fn read_kept(
    kept_path: &Path,
    stamp_path: &Path,
    sources: &[Source],
    rank: u32,
) -> Option<RankMeta> {
    let stamp: Stamp = serde_json::from_slice(&std::fs::read(stamp_path).ok()?).ok()?;
    if stamp.version != VERSION || stamp.rank != rank || stamp.sources != sources {
        return None;
    }
    let file = RankFile::open(kept_path).ok()?;
    if file.len() != stamp.kept_len || file.header().rank != rank {
        return None;
    }
    let mut meta = RankMeta {
        rank,
        clock: file.header().clock,
        ..Default::default()
    };
    let files = [file];
    let mut walk = ChunkWalk::new(&files);
    for chunk in walk.by_ref() {
        for e in chunk.events() {
            if !meta.see(chunk.stream(), &e) {
                return None;
            }
        }
    }
    if !walk.issues().is_empty() {
        return None;
    }
    meta.streams = stamp.streams.into_iter().collect::<BTreeSet<u32>>();
    meta.events = stamp.events;
    meta.skipped = stamp.skipped;
    Some(meta)
}

fn write_kept(
    dir: &Path,
    meta: &RankMeta,
    world_size: u32,
    kept: &[(u32, Event)],
    sources: Vec<Source>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (kept_path, stamp_path) = paths(dir, meta.rank);
    // Written under a name of this process's and renamed, so a reader never sees half a file.
    let tmp = |p: &Path| p.with_extension(format!("tmp-{}", std::process::id()));
    let header = FileHeader {
        rank: meta.rank,
        world_size,
        part: 0,
        clock: meta.clock,
        created_unix_ns: 0,
        producer: format!("evenflush {} first-pass cache", env!("CARGO_PKG_VERSION")),
    };
    let mut w = RankFileWriter::new(std::fs::File::create(tmp(&kept_path))?, &header)?;
    let mut encoder = ChunkEncoder::new(3);
    let mut seqs = std::collections::HashMap::<u32, u64>::new();
    // One chunk per run of one thread's events, so the order across threads is kept.
    for run in kept.chunk_by(|a, b| a.0 == b.0) {
        let stream = run[0].0;
        let mut buf = RawBuf::new();
        for (_, e) in run {
            buf.push_event(e);
        }
        let seq = seqs.entry(stream).or_default();
        w.write_chunk(&encoder.encode(meta.rank, stream, *seq, &buf))?;
        *seq += 1;
    }
    w.flush()?;
    let kept_len = w.bytes_written();
    drop(w);
    std::fs::rename(tmp(&kept_path), &kept_path)?;
    let stamp = Stamp {
        version: VERSION,
        rank: meta.rank,
        sources,
        events: meta.events,
        streams: meta.streams.iter().copied().collect(),
        skipped: meta.skipped.clone(),
        kept_len,
    };
    write_whole(&stamp_path, &serde_json::to_vec(&stamp)?)
}
