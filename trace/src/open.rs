//! A trace on disk: `meta.json` plus one or more rank files per rank (further parts when a disk
//! filled and the recorder moved to the next output directory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use format::framing::ChunkHeader;
use format::{ChunkWalk, ClockCalibration, Event, RankPart};

use crate::error::{Skipped, TraceError};
use crate::files::{RankFiles, find_rank_files, read_meta};

/// An opened trace: every rank present, with its files.
#[derive(Debug)]
pub struct Trace {
    pub dir: PathBuf,
    pub world_size: u32,
    pub ranks: Vec<RankFiles>,
    pub meta: Option<serde_json::Value>,
}

impl Trace {
    /// Finds every rank's files in `dir` and in the other output directories named by its
    /// `meta.json`, and checks that every rank of the world is present.
    pub fn open(dir: impl AsRef<Path>) -> Result<Trace, TraceError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(TraceError::NoDirectory(dir));
        }
        let meta = read_meta(&dir)?;
        let (dirs, not_found) = recorded_dirs(&dir, meta.as_ref());
        let found = match find_rank_files(&dirs, false) {
            Err(TraceError::Empty(_)) => return Err(TraceError::Empty(dir)),
            other => other?,
        };
        let by_rank: BTreeMap<u32, Vec<RankPart>> =
            found.ranks.into_iter().map(|r| (r.rank, r.parts)).collect();
        let mut world_size = None;
        for parts in by_rank.values() {
            let ws = parts[0].open()?.header().world_size;
            match world_size {
                None => world_size = Some(ws),
                Some(a) if a != ws => {
                    return Err(TraceError::WorldSizeMismatch { dir, a, b: ws });
                }
                _ => {}
            }
        }
        let world_size = world_size.unwrap_or(0);
        let missing: Vec<u32> = (0..world_size)
            .filter(|r| !by_rank.contains_key(r))
            .collect();
        if !missing.is_empty() {
            if !not_found.is_empty() {
                return Err(TraceError::RecordedDirsNotFound {
                    dir,
                    missing,
                    world_size,
                    not_found,
                });
            }
            return Err(TraceError::MissingRanks {
                dir,
                missing,
                world_size,
                found: by_rank.len(),
            });
        }
        let ranks = by_rank
            .into_iter()
            .map(|(rank, parts)| RankFiles { rank, parts })
            .collect();
        Ok(Trace {
            dir,
            world_size,
            ranks,
            meta,
        })
    }
}

/// The directories a trace read from `dir` consists of: `dir` itself, and the further output
/// directories its `meta.json` names (a full disk moved the recorder on), resolved relative to
/// `dir`: a copied or moved trace must never reach back into the directories it was copied from.
/// Returns the directories found and, as `(recorded, looked at)`, those that were not.
fn recorded_dirs(
    dir: &Path,
    meta: Option<&serde_json::Value>,
) -> (Vec<PathBuf>, Vec<(PathBuf, PathBuf)>) {
    let mut dirs = vec![dir.to_path_buf()];
    let mut not_found = Vec::new();
    let Some(listed) = meta
        .and_then(|m| m.pointer("/settings/EVENFLUSH_OUT"))
        .and_then(|v| v.as_str())
    else {
        return (dirs, not_found);
    };
    // The launcher wrote meta.json into its own host's directory, so `%h` there means the
    // launcher's host; other hosts' directories are brought in by `collect`.
    let host = meta
        .and_then(|m| m.get("host"))
        .and_then(|h| h.as_str())
        .unwrap_or_default();
    let listed: Vec<PathBuf> = listed
        .split(',')
        .map(|d| format::naming::expand_out(Path::new(d), host))
        .collect();
    let Some(first) = listed.first() else {
        return (dirs, not_found);
    };
    for recorded in &listed[1..] {
        let Some(resolved) = relative_to(first, recorded).map(|rel| lexical(&dir.join(rel))) else {
            continue;
        };
        if resolved.is_dir() {
            if !dirs.iter().any(|known| same_dir(known, &resolved)) {
                dirs.push(resolved);
            }
        } else {
            not_found.push((recorded.clone(), resolved));
        }
    }
    (dirs, not_found)
}

/// `path` with `.` and `..` resolved without touching the file system (for messages that name
/// where a directory was looked for).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `target` as a path relative to `base` (both as recorded, absolute), e.g. `../disk2/trace`.
fn relative_to(base: &Path, target: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let base: Vec<Component> = base.components().collect();
    let target: Vec<Component> = target.components().collect();
    let common = base.iter().zip(&target).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return None;
    }
    let mut rel = PathBuf::new();
    for _ in common..base.len() {
        rel.push("..");
    }
    for c in &target[common..] {
        rel.push(c.as_os_str());
    }
    Some(rel)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Per chunk, what the chunk header says (sizes and counts), for summaries that need no decoding.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChunkStats {
    pub stream: u32,
    /// The index in its stream of the chunk's first event (`ChunkWalk::first_index`).
    pub first_index: u64,
    pub events: u64,
    pub raw_len: u64,
    pub stored_len: u64,
}

/// Streams every event of one rank, file after file, calling `on_event` with the event and the
/// stream (thread) it belongs to. Damage ends the reading of that file: it is reported in the
/// returned list, never silently passed over, and never turned into made-up events.
pub fn for_each_event(
    files: &RankFiles,
    on_chunk: impl FnMut(&ChunkStats),
    on_event: impl FnMut(u32, &Event),
) -> Result<(ClockCalibration, Vec<Skipped>), TraceError> {
    walk_events(files, Read::All, on_chunk, on_event).map(|(c, s, _)| (c, s))
}

/// Like [`for_each_event`], but hands out only the misc events (everything except calls and
/// completions), which skips decoding the numeric columns: for passes that want metadata.
pub fn for_each_misc_event(
    files: &RankFiles,
    on_chunk: impl FnMut(&ChunkStats),
    on_event: impl FnMut(u32, &Event),
) -> Result<(ClockCalibration, Vec<Skipped>), TraceError> {
    walk_events(files, Read::Misc, on_chunk, on_event).map(|(c, s, _)| (c, s))
}

/// What [`walk_events`] decodes.
#[derive(Clone, Copy)]
pub(crate) enum Read<'w> {
    /// Every event of every chunk.
    All,
    /// The misc events of every chunk.
    Misc,
    /// Every event of the chunks the function wants by their header; the others are checked and
    /// passed over (counted in the third value [`walk_events`] returns).
    Wanted(&'w (dyn Fn(&ChunkHeader) -> bool + Sync)),
}

/// Walks one rank's chunks, decoding what `read` says.
pub(crate) fn walk_events(
    files: &RankFiles,
    read: Read,
    mut on_chunk: impl FnMut(&ChunkStats),
    mut on_event: impl FnMut(u32, &Event),
) -> Result<(ClockCalibration, Vec<Skipped>, u64), TraceError> {
    let opened = files.open()?;
    let clock = opened.first().map(|f| f.header().clock).unwrap_or_default();
    let mut walk = match read {
        Read::Wanted(want) => ChunkWalk::wanting(&opened, want),
        Read::All | Read::Misc => ChunkWalk::new(&opened),
    };
    while let Some(chunk) = walk.next() {
        let stats = ChunkStats {
            stream: chunk.stream(),
            first_index: walk.first_index(),
            events: chunk.event_count(),
            raw_len: chunk.header.raw_len,
            stored_len: chunk.header.stored_len,
        };
        on_chunk(&stats);
        if let Read::Wanted(_) = read {
            // A windowed read trusts the header's range for the chunks it passes over; where it
            // can check it, it does, so a header that lies is an error, not a silent loss.
            let (first, last) = (chunk.header.first_ts, chunk.header.last_ts);
            for mut e in chunk.events() {
                let mut outside = None;
                crate::times::for_each_time(&mut e, |t| {
                    if !(first..=last).contains(t) {
                        outside = Some(*t);
                    }
                });
                if let Some(t) = outside {
                    return Err(TraceError::ChunkRange {
                        rank: files.rank,
                        stream: stats.stream,
                        seq: chunk.header.seq,
                        offset: chunk.offset,
                        first,
                        last,
                        t,
                    });
                }
                on_event(stats.stream, &e);
            }
        } else if let Read::Misc = read {
            for e in chunk.misc_events() {
                on_event(stats.stream, &e);
            }
        } else {
            for e in chunk.events() {
                on_event(stats.stream, &e);
            }
        }
    }
    let passed = walk.passed();
    let skipped = walk
        .into_issues()
        .into_iter()
        .map(|i| Skipped {
            file: i.file,
            offset: i.offset,
            what: format!("rank {}: {}", files.rank, i.what),
        })
        .collect();
    Ok((clock, skipped, passed))
}

/// Converts a tick count of a rank's clock into seconds.
pub fn ticks_to_s(clock: &ClockCalibration, ticks: u64) -> f64 {
    if clock.ticks_per_sec > 0.0 {
        ticks as f64 / clock.ticks_per_sec
    } else {
        0.0
    }
}

/// The S rank 0 chose at start-up and why (its first `Threshold` record, in its first chunks, so
/// only those are read): what `evenflush run` puts into meta.json and the swap experiment into
/// its rows. `None` for traces without one (older versions, or rank 0 missing).
pub fn initial_threshold(dir: &Path) -> Option<format::ThresholdChoice> {
    let trace = Trace::open(dir).ok()?;
    let files = trace.ranks.iter().find(|r| r.rank == 0)?.open().ok()?;
    files.iter().find_map(|file| {
        file.events().find_map(|e| match e {
            Ok(Event::Threshold(t)) => Some(Some(t)),
            Ok(_) => None,
            Err(_) => Some(None),
        })?
    })
}
