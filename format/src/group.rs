//! Group files: the aggregated layout (`--layout node|shared`), where the ranks of a group (one
//! node, or the whole job) write one file together instead of one file each. At 10^4–10^5 ranks,
//! a file per rank is a metadata storm on a parallel file system; a group file is created once per
//! group and grows by one collective write per flush.
//!
//! A group file holds, after its own header, the records of its members' rank files exactly as
//! they would be in separate files: each member's rank file header (once, before its first
//! chunk), then its chunks, interleaved between members flush by flush. Zero bytes between
//! records are padding. [`scan_group`] indexes a group file by reading record headers only, so a
//! reader then visits one member's chunks without decoding the others'.

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::FormatError;
use crate::framing::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, CHUNK_MIN_VERSION, CHUNK_VERSION, ChunkHeader, FILE_MAGIC,
    FileHeader, HeaderLayout, TailKind, Truncation, begin_header, finish_header, parse_file_header,
    producer_cut, verify_header,
};

/// Magic at the start of every group file.
pub const GROUP_MAGIC: [u8; 8] = *b"EVFGROUP";
/// Version of the group header layout this crate writes and reads.
pub const GROUP_VERSION: u16 = 1;
/// Bytes of the group header before the producer string.
pub const GROUP_HEADER_FIXED_LEN: usize = 44;
/// Room each member keeps after the last collective write for what it records after
/// `MPI_Finalize` (when collective I/O is no longer possible): written there with a plain `pwrite`,
/// so that a normal end creates no further file per rank. Larger tails go to a part file.
pub const TAIL_SLOT_BYTES: u64 = 4096;

/// What a group file says about itself, at its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupHeader {
    pub world_size: u32,
    /// Number of ranks writing this file.
    pub group_size: u32,
    /// The lowest world rank of the group; it names the file.
    pub leader: u32,
    pub created_unix_ns: u64,
    pub producer: String,
}

/// `group-00000.evf`: the group file of the group whose lowest world rank is `leader`.
pub fn group_file_name(leader: u32) -> String {
    format!("group-{leader:05}.evf")
}

/// Parses `group-NNNNN.evf` into the leader's rank.
pub fn parse_group_file_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("group-")?.strip_suffix(".evf")?;
    if digits.len() < 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

const GROUP_LAYOUT: HeaderLayout = HeaderLayout {
    magic: GROUP_MAGIC,
    version: GROUP_VERSION,
    fixed_len: GROUP_HEADER_FIXED_LEN,
    producer_len_at: 40,
    what: "group file",
    header_what: "group file header",
    length_what: "group header length",
    flags_reason: "unknown group file flags",
};

/// The bytes of a group header (FORMAT.md "Group files").
pub fn encode_group_header(h: &GroupHeader) -> Vec<u8> {
    let producer = producer_cut(&h.producer);
    let mut out = begin_header(&GROUP_LAYOUT, producer);
    out.extend_from_slice(&h.world_size.to_le_bytes());
    out.extend_from_slice(&h.group_size.to_le_bytes());
    out.extend_from_slice(&h.leader.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&h.created_unix_ns.to_le_bytes());
    out.extend_from_slice(&(producer.len() as u32).to_le_bytes());
    finish_header(&GROUP_LAYOUT, out, producer)
}

/// Parses and verifies a group header; returns it and its length in bytes.
pub fn parse_group_header(bytes: &[u8], path: &Path) -> Result<(GroupHeader, usize), FormatError> {
    let (total, producer) = verify_header(bytes, path, &GROUP_LAYOUT)?;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or_default());
    let producer = producer.to_owned();
    let header = GroupHeader {
        world_size: u32_at(16),
        group_size: u32_at(20),
        leader: u32_at(24),
        created_unix_ns: u64::from_le_bytes(bytes[32..40].try_into().unwrap_or_default()),
        producer,
    };
    Ok((header, total))
}

/// One rank's share of a group file.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupMember {
    /// The member's rank file header, as it would start its own rank file.
    pub header: FileHeader,
    /// Where that header starts in the group file.
    pub header_offset: u64,
    /// The byte ranges holding the member's chunks, in file order; each holds whole chunks (the
    /// last may be cut off by the end of the file, which its reader then reports).
    pub segments: Vec<Range<u64>>,
    /// Chunks indexed (headers verified; payloads are verified when read).
    pub chunks: u64,
}

/// The index of a group file: its header, its members by rank, and what could not be attributed
/// to any member.
#[derive(Clone, Debug)]
pub struct GroupIndex {
    pub path: PathBuf,
    pub header: GroupHeader,
    pub members: Vec<GroupMember>,
    /// Damaged or cut ranges that belong to no known member, in file order.
    pub damage: Vec<Truncation>,
}

/// Whether `w` (at least [`CHUNK_HEADER_LEN`] bytes) starts with an intact chunk header.
fn is_chunk_header(w: &[u8]) -> bool {
    w.len() >= CHUNK_HEADER_LEN
        && w[..4] == CHUNK_MAGIC
        && u32::from_le_bytes([w[68], w[69], w[70], w[71]]) == crc32c::crc32c(&w[..68])
        && (CHUNK_MIN_VERSION..=CHUNK_VERSION).contains(&u16::from_le_bytes([w[4], w[5]]))
}

fn is_rank_header(bytes: &[u8], path: &Path) -> bool {
    bytes.starts_with(&FILE_MAGIC) && parse_file_header(bytes, path).is_ok()
}

/// Indexes a group file held in `bytes`: reads its header, then walks its records, verifying
/// each record header but no payload. A record that is neither an intact rank header nor an
/// intact chunk header is damage: the walk resumes at the next intact record and the skipped
/// range is reported in [`GroupIndex::damage`], never passed over silently. A member's chunks
/// that follow a gap are still its own, since each chunk names its rank.
pub fn scan_group(bytes: &[u8], path: &Path) -> Result<GroupIndex, FormatError> {
    let (header, header_len) = parse_group_header(bytes, path)?;
    let mut members: Vec<GroupMember> = Vec::new();
    let mut slot_of_rank = std::collections::HashMap::new();
    let mut damage = Vec::new();
    let mut pos = header_len;
    let len = bytes.len();
    while pos < len {
        let rest = &bytes[pos..];
        if rest[0] == 0 {
            pos += rest.iter().position(|&b| b != 0).unwrap_or(rest.len());
            continue;
        }
        let problem: String;
        if rest.starts_with(&FILE_MAGIC) {
            match parse_file_header(rest, path) {
                Ok((h, h_len)) => {
                    let seen = slot_of_rank.len();
                    if h.part != 0 || h.world_size != header.world_size {
                        problem = format!(
                            "a header for rank {} with part {} of a world of {} (the group file \
                             holds part 0 of a world of {})",
                            h.rank, h.part, h.world_size, header.world_size
                        );
                    } else if *slot_of_rank.entry(h.rank).or_insert(seen) != seen {
                        problem = format!("a second header for rank {}", h.rank);
                    } else {
                        members.push(GroupMember {
                            header: h,
                            header_offset: pos as u64,
                            segments: Vec::new(),
                            chunks: 0,
                        });
                        pos += h_len;
                        continue;
                    }
                }
                Err(FormatError::Truncated { .. }) => {
                    damage.push(Truncation {
                        offset: pos as u64,
                        kind: TailKind::Cut,
                        reason: format!("file ends {} bytes into a rank header", rest.len()),
                    });
                    break;
                }
                Err(e) => problem = e.to_string(),
            }
        } else if rest.starts_with(&CHUNK_MAGIC) || CHUNK_MAGIC.starts_with(rest) {
            if rest.len() < CHUNK_HEADER_LEN {
                damage.push(Truncation {
                    offset: pos as u64,
                    kind: TailKind::Cut,
                    reason: format!("file ends {} bytes into a chunk header", rest.len()),
                });
                break;
            }
            if !is_chunk_header(rest) {
                problem = "a chunk header that fails its checksum or version check".into();
            } else {
                let h = ChunkHeader::from_bytes(
                    rest[..CHUNK_HEADER_LEN]
                        .try_into()
                        .unwrap_or(&[0; CHUNK_HEADER_LEN]),
                );
                match slot_of_rank.get(&h.rank) {
                    None => {
                        problem = format!("a chunk of rank {} before that rank's header", h.rank)
                    }
                    Some(&slot) => {
                        // A cut payload still belongs to the member: its reader reports the cut.
                        let end = (pos as u64)
                            .saturating_add(CHUNK_HEADER_LEN as u64)
                            .saturating_add(h.stored_len)
                            .min(len as u64);
                        let m = &mut members[slot];
                        match m.segments.last_mut() {
                            Some(last) if last.end == pos as u64 => last.end = end,
                            _ => m.segments.push(pos as u64..end),
                        }
                        m.chunks += 1;
                        pos = end as usize;
                        continue;
                    }
                }
            }
        } else {
            problem = format!("byte {:#04x} where a record should start", rest[0]);
        }
        // Damage: resume at the next intact record.
        let next = (pos + 1..len).find(|&i| {
            let w = &bytes[i..];
            (w[0] == CHUNK_MAGIC[0] && is_chunk_header(w))
                || (w[0] == FILE_MAGIC[0] && is_rank_header(w, path))
        });
        let end = next.unwrap_or(len);
        damage.push(Truncation {
            offset: pos as u64,
            kind: TailKind::Damaged,
            reason: format!(
                "{problem}: bytes {pos}..{end} belong to no readable record and were skipped"
            ),
        });
        pos = end;
    }
    Ok(GroupIndex {
        path: path.to_path_buf(),
        header,
        members,
        damage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkEncoder;
    use crate::framing::encode_file_header;
    use crate::model::{ClockCalibration, Event, Marker};
    use crate::raw::RawBuf;

    fn rank_header(rank: u32, world: u32) -> Vec<u8> {
        encode_file_header(&FileHeader {
            rank,
            world_size: world,
            part: 0,
            clock: ClockCalibration::default(),
            created_unix_ns: 1,
            producer: "test".into(),
        })
    }

    fn chunk(rank: u32, seq: u64, n: u64) -> Vec<u8> {
        let mut buf = RawBuf::new();
        for i in 0..n {
            buf.push_event(&Event::Marker(Marker::LocalFlush {
                time: seq * 100 + i,
                bytes: i,
            }));
        }
        ChunkEncoder::new(1).encode(rank, 0, seq, &buf).bytes
    }

    fn group(world: u32) -> Vec<u8> {
        encode_group_header(&GroupHeader {
            world_size: world,
            group_size: world,
            leader: 0,
            created_unix_ns: 7,
            producer: "test".into(),
        })
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let h = GroupHeader {
            world_size: 9,
            group_size: 4,
            leader: 4,
            created_unix_ns: 123,
            producer: "p".into(),
        };
        let bytes = encode_group_header(&h);
        let (back, len) = parse_group_header(&bytes, Path::new("g")).unwrap();
        assert_eq!((back, len), (h, bytes.len()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(
                parse_group_header(&bad, Path::new("g")).is_err(),
                "byte {i}"
            );
        }
        assert!(parse_group_header(&bytes[..bytes.len() - 1], Path::new("g")).is_err());
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(group_file_name(3), "group-00003.evf");
        assert_eq!(parse_group_file_name("group-00003.evf"), Some(3));
        assert_eq!(parse_group_file_name("group-123456.evf"), Some(123456));
        assert_eq!(parse_group_file_name("group-3.evf"), None);
        assert_eq!(parse_group_file_name("rank-00003.evf"), None);
    }

    #[test]
    fn members_interleaved_over_flushes_are_separated() {
        let mut file = group(2);
        // Flush 1: both headers and a chunk each; flush 2: one chunk each, with padding between.
        let a1 = chunk(0, 0, 3);
        let b1 = chunk(1, 0, 4);
        file.extend(rank_header(0, 2));
        let a1_at = file.len() as u64;
        file.extend(&a1);
        file.extend(rank_header(1, 2));
        let b1_at = file.len() as u64;
        file.extend(&b1);
        let a2 = chunk(0, 1, 2);
        let a2_at = file.len() as u64;
        file.extend(&a2);
        file.extend([0u8; 100]);
        let b2 = chunk(1, 1, 2);
        let b2_at = file.len() as u64;
        file.extend(&b2);
        file.extend([0u8; 4096]);
        let index = scan_group(&file, Path::new("g")).unwrap();
        assert!(index.damage.is_empty(), "{:?}", index.damage);
        assert_eq!(index.members.len(), 2);
        let a = &index.members[0];
        assert_eq!(a.header.rank, 0);
        assert_eq!(
            a.segments,
            vec![
                a1_at..a1_at + a1.len() as u64,
                a2_at..a2_at + a2.len() as u64
            ]
        );
        let b = &index.members[1];
        assert_eq!(
            b.segments,
            vec![
                b1_at..b1_at + b1.len() as u64,
                b2_at..b2_at + b2.len() as u64
            ]
        );
        assert_eq!((a.chunks, b.chunks), (2, 2));
    }

    #[test]
    fn damage_is_reported_with_its_range_and_later_records_still_found() {
        let mut file = group(2);
        file.extend(rank_header(0, 2));
        file.extend(rank_header(1, 2));
        let a1 = chunk(0, 0, 3);
        let spoiled_at = file.len();
        file.extend(&a1);
        let b1 = chunk(1, 0, 3);
        let b1_at = file.len() as u64;
        file.extend(&b1);
        file[spoiled_at + 10] ^= 0xff; // a1's header checksum fails
        let index = scan_group(&file, Path::new("g")).unwrap();
        assert_eq!(index.damage.len(), 1);
        assert_eq!(index.damage[0].offset, spoiled_at as u64);
        assert_eq!(index.damage[0].kind, TailKind::Damaged);
        assert!(
            index.damage[0]
                .reason
                .contains(&format!("{spoiled_at}..{b1_at}"))
        );
        assert_eq!(index.members[0].chunks, 0);
        assert_eq!(
            index.members[1].segments,
            vec![b1_at..b1_at + b1.len() as u64]
        );
    }

    #[test]
    fn a_chunk_before_its_header_and_a_cut_end_are_reported() {
        let mut file = group(2);
        file.extend(chunk(1, 0, 2)); // rank 1 has no header yet
        file.extend(rank_header(0, 2));
        let a1 = chunk(0, 0, 5);
        let a1_at = file.len() as u64;
        file.extend(&a1[..a1.len() - 3]);
        let index = scan_group(&file, Path::new("g")).unwrap();
        assert_eq!(index.damage.len(), 1, "{:?}", index.damage);
        assert!(index.damage[0].reason.contains("before that rank's header"));
        // The cut chunk stays the member's, for its reader to report as cut.
        assert_eq!(index.members[0].segments, vec![a1_at..file.len() as u64]);
        let mut cut_header = group(1);
        cut_header.extend(&rank_header(0, 1)[..20]);
        let index = scan_group(&cut_header, Path::new("g")).unwrap();
        assert_eq!(index.damage[0].kind, TailKind::Cut);
    }
}
