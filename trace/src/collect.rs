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
use std::path::{Path, PathBuf};

use format::{Event, RankFile, RankPart};
use serde::Serialize;

use crate::error::TraceError;
pub use crate::files::{DirSummary, Ignored};
use crate::files::{RankFiles, find_rank_files};
use crate::open::Trace;

/// Where one rank came from.
#[derive(Clone, Debug, Serialize)]
pub struct RankOrigin {
    pub rank: u32,
    /// From the rank's `RankInfo` record; `None` for traces written before it existed (chunk
    /// version 1) or when the record is missing.
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub mpi_library: Option<String>,
    /// The rank's files, in part order (a group file for a rank written in the aggregated layout).
    pub files: Vec<PathBuf>,
    #[serde(skip)]
    pub parts: Vec<RankPart>,
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
        let first = files.parts[0].open()?;
        let header_ws = first.header().world_size;
        let info = rank_info(&first);
        let ws = info.as_ref().map_or(header_ws, |i| i.world_size);
        match world_size {
            None => world_size = Some((ws, files.rank)),
            Some((a, _)) if a != ws => {
                return Err(TraceError::WorldSizeMismatch {
                    dir: files.first_path(),
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
                        file_b: files.first_path(),
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
            files: files.parts.iter().map(|p| p.path().to_path_buf()).collect(),
            parts: files.parts.clone(),
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
                    parts: r.parts.clone(),
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
        // A group file holds many ranks: each file is brought over once.
        let mut brought: std::collections::BTreeSet<PathBuf> = Default::default();
        for file in self.ranks.iter().flat_map(|r| &r.files) {
            if !brought.insert(file.clone()) {
                continue;
            }
            let name = file.file_name().ok_or_else(|| TraceError::Io {
                path: file.clone(),
                what: "has no file name".into(),
            })?;
            let target = into.join(name);
            if std::fs::hard_link(file, &target).is_err() {
                std::fs::copy(file, &target).map_err(|e| io(&target, e))?;
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
        Trace::open(into)
    }
}

/// The rank's `RankInfo` record: recorded at `MPI_Init` in the first thread's stream, so it is in
/// the first chunks of part 0; the search stops at the first one.
fn rank_info(file: &RankFile) -> Option<format::RankInfo> {
    for chunk in file.chunks() {
        let Ok(chunk) = chunk else { return None };
        for e in chunk.misc_events() {
            if let Event::RankInfo(info) = e {
                return Some(*info);
            }
        }
    }
    None
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
            "dir {}: {} trace file(s), ranks {}{}",
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
    use super::*;
    use format::{ChunkEncoder, ClockCalibration, FileHeader, RankFileWriter, RawBuf};

    /// A scratch directory that goes when the test ends, passing or not.
    struct Scratch(PathBuf);

    impl std::ops::Deref for Scratch {
        type Target = PathBuf;
        fn deref(&self) -> &PathBuf {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("evf-collect-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A rank file as the recorder writes it: RankInfo (unless `run` is None, as in traces older
    /// than that record) and a marker, in part `part`.
    fn write_rank(dir: &Path, rank: u32, world: u32, host: &str, run: Option<&str>, part: u32) {
        let header = FileHeader {
            rank,
            world_size: world,
            part,
            clock: ClockCalibration {
                ticks_per_sec: 1e9,
                ..Default::default()
            },
            created_unix_ns: 1,
            producer: "collect tests".into(),
        };
        let mut buf = RawBuf::new();
        if let Some(run_id) = run {
            buf.push_event(&Event::RankInfo(Box::new(format::RankInfo {
                rank,
                world_size: world,
                pid: 100 + rank,
                host: host.into(),
                mpi_library: "test MPI".into(),
                run_id: run_id.into(),
            })));
        }
        buf.push_event(&Event::Marker(format::Marker::InitDone { time: 5 }));
        let chunk = ChunkEncoder::new(1).encode(rank, 0, u64::from(part), &buf);
        let path = dir.join(format::rank_file_name(rank, part));
        let mut w = RankFileWriter::new(std::fs::File::create(path).unwrap(), &header).unwrap();
        w.write_chunk(&chunk).unwrap();
    }

    /// Two node directories under one scratch directory (returned too: it holds them).
    fn two_nodes(name: &str) -> (Scratch, PathBuf, PathBuf) {
        let root = scratch(name);
        let (a, b) = (root.join("nodeA"), root.join("nodeB"));
        for (dir, host, ranks) in [(&a, "nodeA", [0, 1]), (&b, "nodeB", [2, 3])] {
            std::fs::create_dir_all(dir).unwrap();
            for r in ranks {
                write_rank(dir, r, 4, host, Some("run-1"), 0);
            }
        }
        (root, a, b)
    }

    #[test]
    fn node_directories_come_back_together_with_their_hosts() {
        let (_root, a, b) = two_nodes("together");
        // nodeB's disk filled: its ranks' second parts went to a third directory.
        let spill = a.parent().unwrap().join("spill");
        std::fs::create_dir_all(&spill).unwrap();
        write_rank(&spill, 3, 4, "nodeB", None, 1);
        let c = collect(&[a.clone(), b.clone(), spill.clone()]).unwrap();
        assert_eq!(c.world_size, 4);
        assert_eq!(c.run_id.as_deref(), Some("run-1"));
        assert!(c.missing.is_empty() && c.ignored.is_empty());
        assert_eq!(c.hosts["nodeA"], vec![0, 1]);
        assert_eq!(c.hosts["nodeB"], vec![2, 3]);
        assert_eq!(c.ranks[3].files.len(), 2, "both parts of rank 3, in order");
        assert_eq!(c.ranks[3].files[1].parent().unwrap(), spill);
        assert_eq!(c.ranks[2].pid, Some(102));
        assert_eq!(c.dirs[2].ranks, vec![3]);
        let trace = c.trace().unwrap();
        assert_eq!(trace.ranks.len(), 4);
        let text = render(&c);
        assert!(text.contains("host nodeB"), "{text}");
        assert!(text.contains("4 present, 0 missing"), "{text}");
    }

    #[test]
    fn missing_ranks_are_named_and_refused_as_a_trace() {
        let (_root, a, _) = two_nodes("missing");
        let c = collect(&[a]).unwrap();
        assert_eq!(c.missing, vec![2, 3]);
        assert!(render(&c).contains("MISSING      ranks 2-3 of 4"));
        let err = c.trace().unwrap_err();
        assert!(
            matches!(err, TraceError::MissingRanks { ref missing, world_size: 4, .. } if *missing == vec![2, 3]),
            "{err}"
        );
    }

    #[test]
    fn the_same_file_twice_or_an_identical_copy_is_read_once() {
        let (_root, a, b) = two_nodes("dupes");
        let copy = a.parent().unwrap().join("copy");
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::copy(b.join("rank-00002.evf"), copy.join("rank-00002.evf")).unwrap();
        let link = a.parent().unwrap().join("link");
        std::os::unix::fs::symlink(&b, &link).unwrap();
        let c = collect(&[a.clone(), b.clone(), a.clone(), copy, link]).unwrap();
        let whys: Vec<&str> = c.ignored.iter().map(|i| i.why).collect();
        assert_eq!(whys.iter().filter(|w| **w == "same file").count(), 4);
        assert_eq!(whys.iter().filter(|w| **w == "identical copy").count(), 1);
        assert_eq!(c.ranks.iter().map(|r| r.files.len()).sum::<usize>(), 4);
        assert_eq!(c.ranks[2].files[0], b.join("rank-00002.evf"));
    }

    #[test]
    fn differing_copies_mixed_runs_and_bad_directories_are_errors() {
        let (_root, a, b) = two_nodes("errors");
        let root = a.parent().unwrap().to_path_buf();
        let other = root.join("other");
        std::fs::create_dir_all(&other).unwrap();
        write_rank(&other, 2, 4, "nodeB", Some("run-2"), 0);
        let err = collect(&[a.clone(), b.clone(), other.clone()]).unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::ConflictingCopies {
                    rank: 2,
                    part: 0,
                    ..
                }
            ),
            "{err}"
        );
        let err = collect(&[a.clone(), other.clone()]).unwrap_err();
        assert!(matches!(err, TraceError::MixedRuns { .. }), "{err}");
        assert!(err.to_string().contains("mix two runs"), "{err}");

        let bigger = root.join("bigger");
        std::fs::create_dir_all(&bigger).unwrap();
        write_rank(&bigger, 5, 8, "nodeC", Some("run-1"), 0);
        let err = collect(&[a.clone(), bigger]).unwrap_err();
        assert!(
            matches!(err, TraceError::WorldSizeMismatch { a: 4, b: 8, .. }),
            "{err}"
        );

        let err = collect(&[a.clone(), root.join("typo")]).unwrap_err();
        assert!(matches!(err, TraceError::NoDirectory(_)), "{err}");
        let empty = root.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let err = collect(&[a.clone(), empty.clone()]).unwrap_err();
        assert!(err.to_string().contains("not a trace directory"), "{err}");
        std::fs::write(empty.join("meta.json"), "{}").unwrap();
        assert!(collect(&[a, b, empty]).is_ok(), "the launcher's directory");
        assert!(matches!(collect(&[]), Err(TraceError::NoDirectories)));
    }

    #[test]
    fn traces_without_rank_info_still_collect_by_their_headers() {
        let root = scratch("v1");
        for r in 0..3 {
            write_rank(&root, r, 3, "", None, 0);
        }
        let c = collect(std::slice::from_ref(&*root)).unwrap();
        assert_eq!(c.world_size, 3);
        assert!(c.hosts.is_empty() && c.run_id.is_none());
        assert!(c.ranks.iter().all(|r| r.host.is_none()));
        assert!(render(&c).contains("no RankInfo"));
    }

    #[test]
    fn gathering_links_every_file_into_one_trace() {
        let (_root, a, b) = two_nodes("gather");
        let root = a.parent().unwrap().to_path_buf();
        std::fs::write(
            a.join("meta.json"),
            r#"{"host":"login","settings":{"EVENFLUSH_OUT":"/somewhere/%h"}}"#,
        )
        .unwrap();
        let c = collect(&[a.clone(), b]).unwrap();
        let into = root.join("merged");
        let trace = c.gather_into(&into).unwrap();
        assert_eq!(trace.ranks.len(), 4);
        assert!(
            trace
                .ranks
                .iter()
                .all(|r| r.parts[0].path().starts_with(&into))
        );
        let reopened = Trace::open(&into).unwrap();
        assert_eq!(reopened.ranks.len(), 4);
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(into.join("meta.json")).unwrap())
                .unwrap();
        let out = meta["settings"]["EVENFLUSH_OUT"].as_str().unwrap();
        assert!(out.ends_with("merged"), "{out}");
        let err = c.gather_into(&into).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        let (_root2, a2, _) = two_nodes("gather-partial");
        let partial = collect(&[a2]).unwrap();
        assert!(partial.gather_into(&root.join("never")).is_err());
        assert!(!root.join("never").exists());
    }

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(rank_list(&[3, 0, 1, 2, 6, 8, 9]), "0-3, 6, 8-9");
        assert_eq!(rank_list(&[]), "");
        assert_eq!(rank_list(&[5, 5]), "5");
    }
}
