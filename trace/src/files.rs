//! Finding a trace's files: every rank's files in a set of directories, each (rank, part) once,
//! and the launcher's `meta.json`. [`crate::open`] opens one trace directory through here,
//! [`crate::collect`] a run spread over several.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use format::RankPart;
use serde::Serialize;

use crate::error::TraceError;

/// One rank's files, in part order (part 0 may be its share of a group file).
#[derive(Clone, Debug)]
pub struct RankFiles {
    pub rank: u32,
    pub parts: Vec<RankPart>,
}

impl RankFiles {
    /// Opens every part (maps the files).
    pub fn open(&self) -> Result<Vec<format::RankFile>, TraceError> {
        self.parts
            .iter()
            .map(|p| p.open().map_err(TraceError::from))
            .collect()
    }

    /// The file holding the first part.
    pub fn first_path(&self) -> PathBuf {
        self.parts
            .first()
            .map(|p| p.path().to_path_buf())
            .unwrap_or_default()
    }
}

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

/// A rank file that was not read because the same data is read from another path.
#[derive(Clone, Debug, Serialize)]
pub struct Ignored {
    pub file: PathBuf,
    /// The path whose data is read instead.
    pub same_as: PathBuf,
    /// `"same file"` (same inode: directory given twice, symlink, hard link) or `"identical copy"`.
    pub why: &'static str,
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
    let mut by_key: BTreeMap<(u32, u32), (RankPart, usize)> = BTreeMap::new();
    let mut groups_seen: BTreeMap<std::ffi::OsString, PathBuf> = BTreeMap::new();
    let mut ignored = Vec::new();
    let mut meta = None;
    let same = |kept: &Path, other: &Path| {
        same_data(kept, other).map_err(|e| TraceError::Io {
            path: other.to_path_buf(),
            what: e.to_string(),
        })
    };
    for dir in dirs {
        if !dir.is_dir() {
            return Err(TraceError::NoDirectory(dir.clone()));
        }
        let listing = format::list_dir(dir)?;
        let has_meta = dir.join("meta.json").is_file();
        if has_meta && meta.is_none() {
            meta = read_meta(dir)?;
        }
        if strict && listing.is_empty() && !has_meta {
            return Err(TraceError::NotATrace(dir.clone()));
        }
        let index = summaries.len();
        summaries.push(DirSummary {
            dir: dir.clone(),
            rank_files: listing.files.len() + listing.groups.len(),
            ranks: Vec::new(),
            meta: has_meta,
        });
        // A group file seen under the same name in an earlier directory: the same file or an
        // identical copy is read once; a different one falls through to the per-rank check.
        let mut copies = std::collections::HashSet::new();
        for group in &listing.groups {
            let name = group.path().file_name().unwrap_or_default().to_os_string();
            match groups_seen.get(&name) {
                None => {
                    groups_seen.insert(name, group.path().to_path_buf());
                }
                Some(kept) => {
                    if let Some(why) = same(kept, group.path())? {
                        ignored.push(Ignored {
                            file: group.path().to_path_buf(),
                            same_as: kept.clone(),
                            why,
                        });
                        copies.insert(group.path().to_path_buf());
                    }
                }
            }
        }
        for part in listing.parts() {
            if copies.contains(part.path()) {
                continue;
            }
            let key = (part.rank(), part.part());
            match by_key.get(&key) {
                None => {
                    by_key.insert(key, (part, index));
                }
                Some((kept, _)) => {
                    let kept_path = kept.path().to_path_buf();
                    let why = match (kept, &part) {
                        (RankPart::File { .. }, RankPart::File { .. }) => {
                            same(&kept_path, part.path())?
                        }
                        // A rank in a group file and in a file of its own: two runs, or two
                        // layouts mixed.
                        _ => None,
                    };
                    match why {
                        Some(why) => ignored.push(Ignored {
                            file: part.path().to_path_buf(),
                            same_as: kept_path,
                            why,
                        }),
                        None => {
                            return Err(TraceError::ConflictingCopies {
                                rank: key.0,
                                part: key.1,
                                a: kept_path,
                                b: part.path().to_path_buf(),
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
    for ((rank, _part), (part, dir_index)) in by_key {
        let ranks_here = &mut summaries[dir_index].ranks;
        if ranks_here.last() != Some(&rank) {
            ranks_here.push(rank);
        }
        match ranks.last_mut() {
            Some(r) if r.rank == rank => r.parts.push(part),
            _ => ranks.push(RankFiles {
                rank,
                parts: vec![part],
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

pub(crate) fn read_meta(dir: &Path) -> Result<Option<serde_json::Value>, TraceError> {
    let path = dir.join("meta.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| TraceError::BadMeta {
                path,
                what: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TraceError::BadMeta {
            path,
            what: e.to_string(),
        }),
    }
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
