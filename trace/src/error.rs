//! What reading a trace can fail with, and what it skips instead of failing.

use std::path::PathBuf;

use format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: no such trace directory", .0.display())]
    NoDirectory(PathBuf),
    #[error("{}: no trace files (rank-NNNNN.evf or group-NNNNN.evf) here: not an evenflush trace, or the run wrote nothing", .0.display())]
    Empty(PathBuf),
    #[error("{}: rank file(s) missing for rank(s) {missing:?} of {world_size} (found {found} rank(s))", dir.display())]
    MissingRanks {
        dir: PathBuf,
        missing: Vec<u32>,
        world_size: u32,
        found: usize,
    },
    #[error("{}: ranks disagree on the world size ({a} vs {b})", dir.display())]
    WorldSizeMismatch { dir: PathBuf, a: u32, b: u32 },
    #[error("{}: {what}", path.display())]
    BadMeta { path: PathBuf, what: String },
    #[error("no trace directory given")]
    NoDirectories,
    #[error("{}: holds no trace files (rank-NNNNN.evf, group-NNNNN.evf) and no meta.json: not a trace directory", .0.display())]
    NotATrace(PathBuf),
    #[error("rank {rank} part {part} is in both {} and {}, and they differ: files of two runs, or an incomplete copy", a.display(), b.display())]
    ConflictingCopies {
        rank: u32,
        part: u32,
        a: PathBuf,
        b: PathBuf,
    },
    #[error("{}: rank {rank_b} belongs to run {run_b:?}, rank {rank_a} to run {run_a:?}: these directories mix two runs", file_b.display())]
    MixedRuns {
        rank_a: u32,
        run_a: String,
        rank_b: u32,
        run_b: String,
        file_b: PathBuf,
    },
    #[error("{}: rank {rank} is outside the world of {world_size} ranks", file.display())]
    RankBeyondWorld {
        file: PathBuf,
        rank: u32,
        world_size: u32,
    },
    #[error("{}: {what}", path.display())]
    Io { path: PathBuf, what: String },
    #[error("{}: rank(s) {missing:?} of {world_size} missing; the run's meta.json names further output directories that are not where they should be relative to this one: {}", dir.display(), not_found.iter().map(|(r, l)| format!("{} (looked for {})", r.display(), l.display())).collect::<Vec<_>>().join(", "))]
    RecordedDirsNotFound {
        dir: PathBuf,
        missing: Vec<u32>,
        world_size: u32,
        not_found: Vec<(PathBuf, PathBuf)>,
    },
    #[error(
        "rank {rank}: chunk {seq} of thread stream {stream} (byte {offset}) says its events lie in ticks {first}..={last}, but one is at tick {t}: a windowed read, which passes over chunks by that range, cannot trust this trace; read it without --from/--to"
    )]
    ChunkRange {
        rank: u32,
        stream: u32,
        seq: u64,
        offset: u64,
        first: u64,
        last: u64,
        t: u64,
    },
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// Something the reader skipped or could not read, reported instead of failing the whole trace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Skipped {
    pub file: PathBuf,
    pub offset: u64,
    pub what: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: byte {}: {}",
            self.file.display(),
            self.offset,
            self.what
        )
    }
}
