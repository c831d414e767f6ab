//! A chunk read again from the same file is not checked block by block again (reconstruct reads
//! every chunk two or three times); a file changed in between is checked again, and a block that
//! then fails is never handed out as if the chunk were whole.
//!
//! A test binary of its own: it counts the decompressions of the whole process.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use format::*;

fn halo(iterations: u64) -> Vec<Event> {
    synthetic::events(&synthetic::HaloConfig {
        iterations,
        ..Default::default()
    })
}

fn file_of(chunk: &EncodedChunk) -> Vec<u8> {
    let mut w = RankFileWriter::new(Vec::new(), &header(7)).unwrap();
    w.write_chunk(chunk).unwrap();
    w.into_inner()
}

/// Every event of the file at `path`, and the zstd frames reading them decompressed.
fn read_file(path: &Path) -> (Result<Vec<Event>, FormatError>, u64) {
    let before = frames_decompressed();
    let file = RankFile::open(path).unwrap();
    let events = file
        .chunks()
        .map(|c| c.map(|c| c.events().collect::<Vec<_>>()))
        .collect::<Result<Vec<_>, _>>()
        .map(|chunks| chunks.concat());
    (events, frames_decompressed() - before)
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_chunk_read_again_decompresses_each_block_once_and_a_changed_file_is_checked_again() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("evf-checked-once-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let events = halo(200);

    // Compressed blocks: the first read checks each (one decompression each) and decompresses
    // each again as its events are read, but block 0, kept from the check; a second read of the
    // same file decompresses each once.
    let chunk = ChunkEncoder::new(1)
        .with_block_events(100)
        .encode(7, 0, 0, &raw_of(&events));
    let path = dir.0.join("rank-00007.evf");
    std::fs::write(&path, file_of(&chunk)).unwrap();
    let (first, checked) = read_file(&path);
    assert_eq!(first.unwrap(), events);
    assert!(
        checked > 5,
        "{checked} frames: the chunk should hold many compressed blocks"
    );
    let (again, once) = read_file(&path);
    assert_eq!(again.unwrap(), events);
    assert_eq!(
        checked.div_ceil(2),
        once,
        "read again: {once} frames decompressed, against {checked} on the first read"
    );

    // A file rewritten in place with a damaged block (checksums valid): the same path and
    // inode, but the chunk's checksums differ from those checked, so it is checked again and the
    // damage is an error, not a block lost on reading.
    let plain =
        ChunkEncoder::uncompressed()
            .with_block_events(100)
            .encode(7, 0, 0, &raw_of(&events));
    let path = dir.0.join("rank-00008.evf");
    let good = file_of(&plain);
    std::fs::write(&path, &good).unwrap();
    assert_eq!(read_file(&path).0.unwrap(), events);
    let mut bad = good.clone();
    damage_first_kind_of_last_block(&mut bad, &plain);
    format::fuzzing::fix_checksums(&mut bad);
    std::fs::write(&path, &bad).unwrap();
    let lost_before = blocks_lost();
    let err = read_file(&path).0.unwrap_err();
    assert!(
        matches!(&err, FormatError::BadPayload { reason, .. } if reason.contains("unknown event kind")),
        "{err}"
    );
    assert_eq!(blocks_lost(), lost_before);
}

/// Writes an unknown event kind over the first kind of the last block of the only chunk of a
/// file holding `chunk` (stored as is).
fn damage_first_kind_of_last_block(file: &mut [u8], chunk: &EncodedChunk) {
    use format::framing::CHUNK_HEADER_LEN;
    let chunk_at = file.len() - chunk.bytes.len();
    let payload = chunk_at + CHUNK_HEADER_LEN;
    let mut pos = payload;
    let mut varint = |file: &[u8]| {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = file[pos];
            pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return v;
            }
        }
    };
    let blocks = varint(file);
    let directory: Vec<[u64; 3]> = (0..blocks)
        .map(|_| [varint(file), varint(file), varint(file)])
        .collect();
    let before_last: u64 = directory[..directory.len() - 1].iter().map(|d| d[2]).sum();
    // The last block's column count and 18 column lengths, then its kind column.
    let mut kinds = pos + before_last as usize + 1;
    for _ in 0..18 {
        while file[kinds] & 0x80 != 0 {
            kinds += 1;
        }
        kinds += 1;
    }
    file[kinds] = 0xEE;
}
