//! Group files and the chunk walk, against traces built here with known contents: every event
//! comes back once, damage costs exactly the damaged chunk, copies are read once, and losses are
//! named.

use std::path::Path;

use format::group::{GroupHeader, encode_group_header};
use format::{
    ChunkEncoder, ChunkWalk, ClockCalibration, Event, FileHeader, GroupFile, Marker, RankFile,
    RankPart, RawBuf, encode_file_header, group_file_name, rank_file_name,
};

/// A fresh directory per test, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("evf-group-walk-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rank_header(rank: u32, part: u32) -> Vec<u8> {
    encode_file_header(&FileHeader {
        rank,
        world_size: 2,
        part,
        clock: ClockCalibration::default(),
        created_unix_ns: 1,
        producer: "test".into(),
    })
}

/// A chunk of `rank` whose events carry (rank, seq, i) in their fields, so each can be
/// recognised when read back.
fn chunk(rank: u32, seq: u64, n: u64) -> Vec<u8> {
    let mut buf = RawBuf::new();
    for i in 0..n {
        buf.push_event(&Event::Marker(Marker::LocalFlush {
            time: u64::from(rank) * 1_000_000 + seq * 1000 + i,
            bytes: seq,
        }));
    }
    ChunkEncoder::new(1).encode(rank, 0, seq, &buf).bytes
}

/// Where a chunk is: its (rank, seq), its offset and its length.
type Placed = ((u32, u64), usize, usize);

/// Two members, three flushes; returns the file and where each (rank, seq) chunk starts.
fn build_group() -> (Vec<u8>, Vec<Placed>) {
    let mut file = encode_group_header(&GroupHeader {
        world_size: 2,
        group_size: 2,
        leader: 0,
        created_unix_ns: 1,
        producer: "test".into(),
    });
    let mut at = Vec::new();
    for seq in 0..3u64 {
        for rank in 0..2u32 {
            if seq == 0 {
                file.extend(rank_header(rank, 0));
            }
            let c = chunk(rank, seq, 5 + seq);
            at.push(((rank, seq), file.len(), c.len()));
            file.extend(c);
        }
    }
    // Rank 1's slot after MPI_Finalize: one chunk, then zeros.
    let c = chunk(1, 3, 2);
    file.extend(vec![0u8; 4096]);
    let slot = file.len();
    at.push(((1, 3), slot, c.len()));
    file.extend(&c);
    file.extend(vec![0u8; 4096 - c.len()]);
    (file, at)
}

fn seqs_read(parts: &[RankPart]) -> (Vec<(u64, u64)>, Vec<String>) {
    let files: Vec<RankFile> = parts.iter().map(|p| p.open().unwrap()).collect();
    let mut walk = ChunkWalk::new(&files);
    let mut got = Vec::new();
    for c in walk.by_ref() {
        got.push((c.seq(), c.event_count()));
    }
    (got, walk.issues().iter().map(|i| i.what.clone()).collect())
}

fn member_parts(dir: &Path) -> Vec<Vec<RankPart>> {
    let listing = format::list_dir(dir).unwrap();
    let mut by_rank: Vec<Vec<RankPart>> = vec![Vec::new(), Vec::new()];
    for p in listing.parts() {
        by_rank[p.rank() as usize].push(p);
    }
    for parts in &mut by_rank {
        parts.sort_by_key(|p| p.part());
    }
    by_rank
}

#[test]
fn every_member_reads_back_its_own_chunks_in_order() {
    let dir = Scratch::new("members");
    let (file, _) = build_group();
    std::fs::write(dir.path().join(group_file_name(0)), &file).unwrap();
    let group = GroupFile::open(dir.path().join(group_file_name(0))).unwrap();
    assert!(group.index.damage.is_empty(), "{:?}", group.index.damage);
    let parts = member_parts(dir.path());
    let (a, issues_a) = seqs_read(&parts[0]);
    let (b, issues_b) = seqs_read(&parts[1]);
    assert_eq!(a, vec![(0, 5), (1, 6), (2, 7)]);
    assert_eq!(b, vec![(0, 5), (1, 6), (2, 7), (3, 2)]);
    assert!(
        issues_a.is_empty() && issues_b.is_empty(),
        "{issues_a:?} {issues_b:?}"
    );
    // The events are the member's own, with their values intact.
    let files: Vec<RankFile> = parts[1].iter().map(|p| p.open().unwrap()).collect();
    let times: Vec<u64> = ChunkWalk::new(&files)
        .flat_map(|c| c.into_events())
        .map(|e| match e {
            Event::Marker(Marker::LocalFlush { time, .. }) => time,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(times.first(), Some(&1_000_000));
    assert_eq!(times.last(), Some(&1_003_001));
    assert_eq!(times.len(), 20);
}

#[test]
fn one_damaged_byte_costs_one_chunk_and_says_which_range() {
    let dir = Scratch::new("damage");
    let (mut file, at) = build_group();
    let &(_, start, len) = at.iter().find(|(k, ..)| *k == (0, 1)).unwrap();
    file[start + len - 5] ^= 0x55; // inside rank 0's chunk 1 payload
    std::fs::write(dir.path().join(group_file_name(0)), &file).unwrap();
    let parts = member_parts(dir.path());
    let (a, issues) = seqs_read(&parts[0]);
    assert_eq!(
        a,
        vec![(0, 5), (2, 7)],
        "chunk 2 is still read after the damage"
    );
    assert_eq!(issues.len(), 2, "{issues:?}");
    assert!(
        issues[0].contains("checksum") && issues[0].contains("skipped"),
        "{issues:?}"
    );
    assert!(
        issues[1].contains("chunk 1 of thread stream 0 missing"),
        "{issues:?}"
    );
    let (b, issues_b) = seqs_read(&parts[1]);
    assert_eq!(b.len(), 4);
    assert!(issues_b.is_empty(), "{issues_b:?}");
}

#[test]
fn a_zero_hole_left_by_a_crash_shows_as_missing_chunks() {
    let dir = Scratch::new("hole");
    let (mut file, at) = build_group();
    let &(_, start, len) = at.iter().find(|(k, ..)| *k == (1, 1)).unwrap();
    file[start..start + len].fill(0);
    std::fs::write(dir.path().join(group_file_name(0)), &file).unwrap();
    let parts = member_parts(dir.path());
    let (b, issues) = seqs_read(&parts[1]);
    assert_eq!(b, vec![(0, 5), (2, 7), (3, 2)]);
    assert_eq!(
        issues,
        vec!["chunk 1 of thread stream 0 missing before this chunk"]
    );
}

#[test]
fn a_chunk_written_twice_is_read_once() {
    let dir = Scratch::new("twice");
    let (file, _) = build_group();
    std::fs::write(dir.path().join(group_file_name(0)), &file).unwrap();
    // Rank 0 went on in a part file of its own, starting with a second copy of its chunk 2.
    let mut own = rank_header(0, 1);
    own.extend(chunk(0, 2, 7));
    own.extend(chunk(0, 3, 4));
    std::fs::write(dir.path().join(rank_file_name(0, 1)), &own).unwrap();
    let parts = member_parts(dir.path());
    assert_eq!(parts[0].len(), 2);
    let (a, issues) = seqs_read(&parts[0]);
    assert_eq!(a, vec![(0, 5), (1, 6), (2, 7), (3, 4)]);
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert!(issues[0].contains("already read"), "{issues:?}");
}

#[test]
fn a_damaged_rank_file_is_read_past_the_damage() {
    let dir = Scratch::new("rankfile");
    let mut own = rank_header(0, 0);
    let first = own.len();
    for seq in 0..4 {
        own.extend(chunk(0, seq, 3));
    }
    own[first + 80] ^= 0x01; // the first chunk's payload
    let path = dir.path().join(rank_file_name(0, 0));
    std::fs::write(&path, &own).unwrap();
    let files = vec![RankFile::open(&path).unwrap()];
    let mut walk = ChunkWalk::new(&files);
    let seqs: Vec<u64> = walk.by_ref().map(|c| c.seq()).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    let issues = walk.into_issues();
    assert_eq!(issues[0].offset, first as u64);
    assert!(
        issues[0].what.contains(&format!("bytes {first}..")),
        "{issues:?}"
    );
    assert!(
        issues[1]
            .what
            .contains("chunk 0 of thread stream 0 missing"),
        "{issues:?}"
    );
}
