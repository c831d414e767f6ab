//! The pieces a rank's trace is stored in: its own rank files (`rank-NNNNN.evf`, further parts
//! `rank-NNNNN.pK.evf`), or its share of a group file (`group-NNNNN.evf`, the aggregated layout),
//! which stands for part 0. [`list_dir`] finds both kinds in a directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::FormatError;
use crate::group::{GroupIndex, GroupMember, parse_group_file_name, scan_group};
use crate::reader::{RankFile, RankFileEntry, open_to_map, parse_rank_file_name};

/// A group file, mapped once and indexed (see [`scan_group`]); its members share the map.
#[derive(Debug)]
pub struct GroupFile {
    pub index: GroupIndex,
    map: Arc<memmap2::Mmap>,
}

impl GroupFile {
    /// Maps and indexes a group file.
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<GroupFile>, FormatError> {
        let path = path.as_ref();
        let io = |cause| FormatError::Io {
            path: path.to_path_buf(),
            cause,
        };
        let (file, _) = open_to_map(path).map_err(io)?;
        // SAFETY: read-only map; writers only append to a group file (or fill zero padding that
        // no member's segment covers), so mapped bytes inside indexed segments never change.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let index = scan_group(&map, path)?;
        Ok(Arc::new(GroupFile {
            index,
            map: Arc::new(map),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.index.path
    }

    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// One part of one rank's trace.
#[derive(Clone, Debug)]
pub enum RankPart {
    /// A rank file of its own.
    File { rank: u32, part: u32, path: PathBuf },
    /// The rank's share of a group file (its part 0).
    Member {
        group: Arc<GroupFile>,
        member: usize,
    },
}

impl RankPart {
    pub fn rank(&self) -> u32 {
        match self {
            RankPart::File { rank, .. } => *rank,
            RankPart::Member { group, member } => group.index.members[*member].header.rank,
        }
    }

    pub fn part(&self) -> u32 {
        match self {
            RankPart::File { part, .. } => *part,
            RankPart::Member { .. } => 0,
        }
    }

    /// The file holding it (shared by every member of a group file).
    pub fn path(&self) -> &Path {
        match self {
            RankPart::File { path, .. } => path,
            RankPart::Member { group, .. } => group.path(),
        }
    }

    pub fn member(&self) -> Option<&GroupMember> {
        match self {
            RankPart::File { .. } => None,
            RankPart::Member { group, member } => Some(&group.index.members[*member]),
        }
    }

    /// Opens it for reading.
    pub fn open(&self) -> Result<RankFile, FormatError> {
        match self {
            RankPart::File { path, .. } => RankFile::open(path),
            RankPart::Member { group, member } => Ok(RankFile::group_member(
                group.path(),
                group.map.clone(),
                &group.index.members[*member],
            )),
        }
    }
}

/// What a directory holds: rank files and group files.
#[derive(Debug, Default)]
pub struct DirListing {
    /// Rank files, sorted by rank then part.
    pub files: Vec<RankFileEntry>,
    /// Group files, indexed, sorted by name.
    pub groups: Vec<Arc<GroupFile>>,
}

impl DirListing {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.groups.is_empty()
    }

    /// Every part found, rank files first, then each group's members.
    pub fn parts(&self) -> Vec<RankPart> {
        let mut out: Vec<RankPart> = self
            .files
            .iter()
            .map(|e| RankPart::File {
                rank: e.rank,
                part: e.part,
                path: e.path.clone(),
            })
            .collect();
        for group in &self.groups {
            out.extend(
                (0..group.index.members.len()).map(|member| RankPart::Member {
                    group: group.clone(),
                    member,
                }),
            );
        }
        out
    }
}

/// Finds the rank files and group files in `dir`; group files are indexed here (their record
/// headers are read, no payload).
pub fn list_dir(dir: impl AsRef<Path>) -> Result<DirListing, FormatError> {
    let dir = dir.as_ref();
    let io = |cause| FormatError::Io {
        path: dir.to_path_buf(),
        cause,
    };
    let mut listing = DirListing::default();
    let mut group_paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((rank, part)) = parse_rank_file_name(name) {
            listing.files.push(RankFileEntry {
                rank,
                part,
                path: entry.path(),
            });
        } else if parse_group_file_name(name).is_some() {
            group_paths.push(entry.path());
        }
    }
    listing.files.sort();
    group_paths.sort();
    for path in group_paths {
        listing.groups.push(GroupFile::open(&path)?);
    }
    Ok(listing)
}
