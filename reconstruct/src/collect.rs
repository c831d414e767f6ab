//! Putting a run back together from several directories: node-local output (`--out` with `%h`),
//! copies gathered by hand, or the output directories a full disk made the recorder rotate
//! through. Every rank file is found once, each rank is named with the host and process it came
//! from (its `RankInfo` record), and the ranks the world size calls for but no directory holds are
//! listed.
//!
//! The same file reached twice (a directory given twice, a symlink, a hard link) is read once; a
//! second file for the same rank and part is accepted only as a byte-identical copy, and then read
//! once too. Files of another run (a different `run_id`) or a different world size are refused.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use format::{Event, RankFile};
use serde::Serialize;

use crate::trace::{RankFiles, Trace, TraceError};

/// One directory given, and what it held.
#[derive(Clone, Debug, Serialize)]
pub struct DirSummary {
    pub dir: PathBuf,
    /// Rank files found here, including ignored duplicates.
    pub rank_files: usize,
    /// Ranks whose files (some part of them) are read from here.
    pub ranks: Vec<u32>,
    /// The launcher's `meta.json` is here (the launcher's own host's directory with `%h`).
    pub meta: bool,
}

/// Where one rank came from.
#[derive(Clone, Debug, Serialize)]
pub struct RankOrigin {
    pub rank: u32,
    /// From the rank's `RankInfo` record; `None` for traces written before it existed (chunk
    /// version 1) or when the record is missing.
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub mpi_library: Option<String>,
    /// The rank's files, in part order.
    pub files: Vec<PathBuf>,
}

/// A rank file that was not read because the same data is read from another path.
#[derive(Clone, Debug, Serialize)]
pub struct Ignored {
    pub file: PathBuf,
    /// The path whose data is read instead.
    pub same_as: PathBuf,
    /// `"same file"` (same inode: directory given twice, symlink, hard link) or `"identical copy"`.
    pub why: &'static str,
}

/// Everything known about a run spread over several directories.
#[derive(Clone, Debug, Serialize)]
pub struct Collection {
    pub dirs: Vec<DirSummary>,
    /// `MPI_COMM_WORLD`'s size, from the `RankInfo` records (the file headers where none exist).
    pub world_size: u32,
    /// The run every rank file belongs to, when the ranks carry one (`evenflush run` sets it).
    pub run_id: Option<String>,
    /// Ranks present, in rank order.
    pub ranks: Vec<RankOrigin>,
    /// Host name to the ranks that ran there (ranks without a `RankInfo` record are left out).
    pub hosts: BTreeMap<String, Vec<u32>>,
    /// Ranks of the world with no file in any directory given.
    pub missing: Vec<u32>,
    pub ignored: Vec<Ignored>,
    /// The `meta.json` read, if any directory held one.
    #[serde(skip)]
    pub meta: Option<serde_json::Value>,
}

/// Scans `dirs` for one run's rank files and identifies every rank. Missing ranks are reported in
/// [`Collection::missing`], not as an error; [`Collection::trace`] refuses an incomplete run.
pub fn collect(dirs: &[PathBuf]) -> Result<Collection, TraceError> {
    if dirs.is_empty() {
        return Err(TraceError::NoDirectories);
    }
    let found = find_rank_files(dirs, true)?;
    let mut world_size = None;
    let mut run: Option<(String, u32)> = None;
    let mut ranks = Vec::new();
    let mut hosts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for files in &found.ranks {
        let first = RankFile::open(&files.parts[0])?;
        let header_ws = first.header().world_size;
        let info = rank_info(&first);
        let ws = info.as_ref().map_or(header_ws, |i| i.world_size);
        match world_size {
            None => world_size = Some((ws, files.rank)),
            Some((a, _)) if a != ws => {
                return Err(TraceError::WorldSizeMismatch {
                    dir: files.parts[0].clone(),
                    a,
                    b: ws,
                });
            }
            _ => {}
        }
        if let Some(info) = &info
            && !info.run_id.is_empty()
        {
            match &run {
                None => run = Some((info.run_id.clone(), files.rank)),
                Some((id, first_rank)) if *id != info.run_id => {
                    return Err(TraceError::MixedRuns {
                        rank_a: *first_rank,
                        run_a: id.clone(),
                        rank_b: files.rank,
                        run_b: info.run_id.clone(),
                        file_b: files.parts[0].clone(),
                    });
                }
                _ => {}
            }
        }
        if let Some(info) = &info {
            hosts.entry(info.host.clone()).or_default().push(files.rank);
        }
        ranks.push(RankOrigin {
            rank: files.rank,
            host: info.as_ref().map(|i| i.host.clone()),
            pid: info.as_ref().map(|i| i.pid),
            mpi_library: info.as_ref().map(|i| i.mpi_library.clone()),
            files: files.parts.clone(),
        });
    }
    let world_size = world_size.map_or(0, |(ws, _)| ws);
    let present: std::collections::BTreeSet<u32> = ranks.iter().map(|r| r.rank).collect();
    let missing = (0..world_size).filter(|r| !present.contains(r)).collect();
    if let Some(beyond) = ranks.iter().find(|r| r.rank >= world_size) {
        return Err(TraceError::RankBeyondWorld {
            file: beyond.files[0].clone(),
            rank: beyond.rank,
            world_size,
        });
    }
    Ok(Collection {
        dirs: found.dirs,
        world_size,
        run_id: run.map(|(id, _)| id),
        ranks,
        hosts,
        missing,
        ignored: found.ignored,
        meta: found.meta,
    })
}

impl Collection {
    /// The run as one trace, if no rank is missing.
    pub fn trace(&self) -> Result<Trace, TraceError> {
        let dir = self.dirs.first().map(|d| d.dir.clone()).unwrap_or_default();
        if !self.missing.is_empty() {
            return Err(TraceError::MissingRanks {
                dir,
                missing: self.missing.clone(),
                world_size: self.world_size,
                found: self.ranks.len(),
            });
        }
        Ok(Trace {
            dir,
            world_size: self.world_size,
            ranks: self
                .ranks
                .iter()
                .map(|r| RankFiles {
                    rank: r.rank,
                    parts: r.files.clone(),
                })
                .collect(),
            meta: self.meta.clone(),
        })
    }

    /// Puts every rank file into `into` (a new or empty directory), hard-linked where the file
    /// system allows and copied otherwise, with `collect.json` (this collection) and the launcher's
    /// `meta.json` (pointing at `into` alone, so reading `into` never reaches back into the
    /// directories it was collected from). Refuses an incomplete run.
    pub fn gather_into(&self, into: &Path) -> Result<Trace, TraceError> {
        self.trace()?;
        let io = |path: &Path, e: std::io::Error| TraceError::Io {
            path: path.to_path_buf(),
            what: e.to_string(),
        };
        std::fs::create_dir_all(into).map_err(|e| io(into, e))?;
        let occupied = std::fs::read_dir(into)
            .map_err(|e| io(into, e))?
            .next()
            .is_some();
        if occupied {
            return Err(TraceError::Io {
                path: into.to_path_buf(),
                what: "is not empty: collect needs a new or empty directory".into(),
            });
        }
        let mut gathered = self.clone();
        for rank in &mut gathered.ranks {
            for file in &mut rank.files {
                let name = file.file_name().ok_or_else(|| TraceError::Io {
                    path: file.clone(),
                    what: "has no file name".into(),
                })?;
                let target = into.join(name);
                if std::fs::hard_link(&*file, &target).is_err() {
                    std::fs::copy(&*file, &target).map_err(|e| io(&target, e))?;
                }
                *file = target;
            }
        }
        let report = serde_json::to_string_pretty(self).map_err(|e| TraceError::Io {
            path: into.join("collect.json"),
            what: e.to_string(),
        })?;
        std::fs::write(into.join("collect.json"), report + "\n")
            .map_err(|e| io(&into.join("collect.json"), e))?;
        if let Some(mut meta) = self.meta.clone() {
            if let Some(settings) = meta.get_mut("settings").and_then(|s| s.as_object_mut()) {
                let here = std::path::absolute(into).unwrap_or_else(|_| into.to_path_buf());
                settings.insert(
                    "EVENFLUSH_OUT".into(),
                    serde_json::Value::String(here.display().to_string()),
                );
            }
            let text = serde_json::to_string_pretty(&meta).unwrap_or_default();
            std::fs::write(into.join("meta.json"), text + "\n")
                .map_err(|e| io(&into.join("meta.json"), e))?;
        }
        gathered.dirs = vec![DirSummary {
            dir: into.to_path_buf(),
            rank_files: gathered.ranks.iter().map(|r| r.files.len()).sum(),
            ranks: gathered.ranks.iter().map(|r| r.rank).collect(),
            meta: self.meta.is_some(),
        }];
        gathered.trace()
    }
}

/// The rank's `RankInfo` record: recorded at `MPI_Init` in the first thread's stream, so it is in
/// the first chunks of part 0; the search stops at the first one.
fn rank_info(file: &RankFile) -> Option<format::RankInfo> {
    for chunk in file.chunks() {
        let Ok(chunk) = chunk else { return None };
        for e in chunk.misc_events() {
            if let Event::RankInfo(info) = e {
                return Some(info);
            }
        }
    }
    None
}

/// Rank files found in a set of directories, each (rank, part) once.
pub(crate) struct Found {
    pub dirs: Vec<DirSummary>,
    pub ranks: Vec<RankFiles>,
    pub ignored: Vec<Ignored>,
    pub meta: Option<serde_json::Value>,
}

/// Finds every rank file in `dirs`. A directory that does not exist is an error; with `strict`, so
/// is one that holds neither rank files nor a `meta.json` (a mistyped path), and finding no rank
/// file at all. A second path to the same (rank, part) is ignored if it is the same file or a
/// byte-identical copy, and an error otherwise.
pub(crate) fn find_rank_files(dirs: &[PathBuf], strict: bool) -> Result<Found, TraceError> {
    let mut summaries: Vec<DirSummary> = Vec::new();
    let mut by_key: BTreeMap<(u32, u32), (PathBuf, usize)> = BTreeMap::new();
    let mut ignored = Vec::new();
    let mut meta = None;
    for dir in dirs {
        if !dir.is_dir() {
            return Err(TraceError::NoDirectory(dir.clone()));
        }
        let entries = format::open_dir(dir)?;
        let has_meta = dir.join("meta.json").is_file();
        if has_meta && meta.is_none() {
            meta = crate::trace::read_meta(dir)?;
        }
        if strict && entries.is_empty() && !has_meta {
            return Err(TraceError::NotATrace(dir.clone()));
        }
        let index = summaries.len();
        summaries.push(DirSummary {
            dir: dir.clone(),
            rank_files: entries.len(),
            ranks: Vec::new(),
            meta: has_meta,
        });
        for entry in entries {
            let key = (entry.rank, entry.part);
            match by_key.get(&key) {
                None => {
                    by_key.insert(key, (entry.path, index));
                }
                Some((kept, _)) => {
                    let why = same_data(kept, &entry.path).map_err(|e| TraceError::Io {
                        path: entry.path.clone(),
                        what: e.to_string(),
                    })?;
                    match why {
                        Some(why) => ignored.push(Ignored {
                            file: entry.path,
                            same_as: kept.clone(),
                            why,
                        }),
                        None => {
                            return Err(TraceError::ConflictingCopies {
                                rank: entry.rank,
                                part: entry.part,
                                a: kept.clone(),
                                b: entry.path,
                            });
                        }
                    }
                }
            }
        }
    }
    if by_key.is_empty() {
        return Err(TraceError::Empty(dirs[0].clone()));
    }
    let mut ranks: Vec<RankFiles> = Vec::new();
    for ((rank, _part), (path, dir_index)) in by_key {
        let ranks_here = &mut summaries[dir_index].ranks;
        if ranks_here.last() != Some(&rank) {
            ranks_here.push(rank);
        }
        match ranks.last_mut() {
            Some(r) if r.rank == rank => r.parts.push(path),
            _ => ranks.push(RankFiles {
                rank,
                parts: vec![path],
            }),
        }
    }
    Ok(Found {
        dirs: summaries,
        ranks,
        ignored,
        meta,
    })
}

/// Whether two paths hold the same data: `Some("same file")` for one inode reached twice,
/// `Some("identical copy")` for equal bytes, `None` otherwise.
fn same_data(a: &Path, b: &Path) -> std::io::Result<Option<&'static str>> {
    use std::os::unix::fs::MetadataExt;
    let (ma, mb) = (std::fs::metadata(a)?, std::fs::metadata(b)?);
    if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
        return Ok(Some("same file"));
    }
    if ma.len() != mb.len() {
        return Ok(None);
    }
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut fa, &mut ba)?;
        let m = read_full(&mut fb, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(None);
        }
        if n == 0 {
            return Ok(Some("identical copy"));
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The human-readable form of a [`Collection`].
pub fn render(c: &Collection) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let Some(id) = &c.run_id {
        let _ = writeln!(s, "run          {id}");
    }
    let _ = writeln!(
        s,
        "world        {} ranks: {} present, {} missing",
        c.world_size,
        c.ranks.len(),
        c.missing.len()
    );
    for (host, ranks) in &c.hosts {
        let _ = writeln!(s, "host {host:<12} ranks {}", rank_list(ranks));
    }
    let unnamed: Vec<u32> = c
        .ranks
        .iter()
        .filter(|r| r.host.is_none())
        .map(|r| r.rank)
        .collect();
    if !unnamed.is_empty() {
        let _ = writeln!(
            s,
            "no RankInfo   ranks {} (trace written before per-rank records existed)",
            rank_list(&unnamed)
        );
    }
    let _ = writeln!(s, "\n{:>6} {:<16} {:>8}  files", "rank", "host", "pid");
    for r in &c.ranks {
        let files: Vec<String> = r.files.iter().map(|f| f.display().to_string()).collect();
        let _ = writeln!(
            s,
            "{:>6} {:<16} {:>8}  {}",
            r.rank,
            r.host.as_deref().unwrap_or("?"),
            r.pid.map_or("?".to_string(), |p| p.to_string()),
            files.join(", ")
        );
    }
    let _ = writeln!(s);
    for d in &c.dirs {
        let _ = writeln!(
            s,
            "dir {}: {} rank file(s), ranks {}{}",
            d.dir.display(),
            d.rank_files,
            if d.ranks.is_empty() {
                "none".to_string()
            } else {
                rank_list(&d.ranks)
            },
            if d.meta { ", meta.json" } else { "" }
        );
    }
    for i in &c.ignored {
        let relation = if i.why == "same file" {
            "the same file as"
        } else {
            "an identical copy of"
        };
        let _ = writeln!(
            s,
            "ignored {}: {relation} {}",
            i.file.display(),
            i.same_as.display()
        );
    }
    if !c.missing.is_empty() {
        let _ = writeln!(
            s,
            "MISSING      ranks {} of {}: no rank file for them in any directory given",
            rank_list(&c.missing),
            c.world_size
        );
    }
    s
}

/// `0-3, 6, 8-9`.
pub fn rank_list(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::rank_list;

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(rank_list(&[3, 0, 1, 2, 6, 8, 9]), "0-3, 6, 8-9");
        assert_eq!(rank_list(&[]), "");
        assert_eq!(rank_list(&[5, 5]), "5");
    }
}
