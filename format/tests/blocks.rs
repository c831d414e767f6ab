//! Chunk version 9's blocks (FORMAT.md "Payload: blocks"): chunks of many blocks round-trip, a
//! damaged block is an error naming it, and version 8 chunks (one payload) still read.

mod common;

use common::*;
use format::framing::{CHUNK_HEADER_LEN, CODEC_ZSTD, ChunkHeader};
use format::*;

fn events(iterations: u64) -> Vec<Event> {
    let mut events = format::fuzzing::every_kind();
    events.extend(synthetic::events(&synthetic::HaloConfig {
        iterations,
        ..Default::default()
    }));
    events
}

fn read(bytes: &[u8]) -> Result<Vec<Vec<Event>>, FormatError> {
    ChunkReader::new(bytes, 0, "mem".as_ref())
        .map(|c| c.map(|c| c.events().collect()))
        .collect()
}

/// The stored payload's block directory: (events, raw_len, stored_len) per block, and where the
/// blocks start.
fn directory(chunk: &[u8]) -> (Vec<[u64; 3]>, usize) {
    let p = &chunk[CHUNK_HEADER_LEN..];
    let mut pos = 0;
    let mut next = || {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = p[pos];
            pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return v;
            }
        }
    };
    let n = next();
    let dir = (0..n).map(|_| [next(), next(), next()]).collect();
    (dir, CHUNK_HEADER_LEN + pos)
}

#[test]
fn chunks_of_many_blocks_round_trip() {
    let events = events(3 * 4096 / 8);
    let raw = raw_of(&events);
    let mut typed = EventBuf::new();
    events.iter().for_each(|e| typed.push(e));
    let whole = ChunkEncoder::new(1)
        .with_block_events(usize::MAX)
        .encode(0, 0, 0, &raw);
    for block in [1, 7, 64, 4096, format::chunk::encode::BLOCK_EVENTS] {
        for level in [Some(1), None] {
            let enc = || {
                level
                    .map_or_else(ChunkEncoder::uncompressed, ChunkEncoder::new)
                    .with_block_events(block)
            };
            let chunk = enc().encode(0, 0, 0, &raw);
            assert_eq!(chunk.bytes, enc().encode_events(0, 0, 0, &typed).bytes);
            let (dir, _) = directory(&chunk.bytes);
            assert_eq!(dir.len(), events.len().div_ceil(block), "block {block}");
            assert!(dir.iter().all(|b| b[0] as usize <= block));
            // The header's range is the whole chunk's, whatever the blocks.
            assert_eq!(
                (chunk.first_ts, chunk.last_ts),
                (whole.first_ts, whole.last_ts)
            );
            let chunks: Vec<_> = ChunkReader::new(&chunk.bytes, 0, "mem".as_ref())
                .map(Result::unwrap)
                .collect();
            assert_eq!(chunks.len(), 1);
            assert_eq!(chunks[0].events().collect::<Vec<_>>(), events);
            let misc: Vec<Event> = events
                .iter()
                .filter(|e| !matches!(e, Event::Call(_) | Event::Completion(_)))
                .cloned()
                .collect();
            assert_eq!(chunks[0].misc_events().collect::<Vec<_>>(), misc);
            let owned: Vec<Event> = chunks.into_iter().flat_map(|c| c.into_events()).collect();
            assert_eq!(owned, events);
        }
    }
    // An empty chunk has no blocks.
    let empty = ChunkEncoder::new(1).encode(0, 0, 0, &RawBuf::new());
    assert!(directory(&empty.bytes).0.is_empty());
    assert_eq!(read(&empty.bytes).unwrap(), vec![vec![]]);
}

/// Makes the checksums of a chunk whose payload was edited valid again.
fn refresh(bytes: &mut [u8]) {
    format::fuzzing::fix_checksums(bytes);
}

#[test]
fn a_damaged_block_is_an_error_naming_it() {
    let events = events(200);
    let chunk =
        ChunkEncoder::uncompressed()
            .with_block_events(100)
            .encode(0, 0, 0, &raw_of(&events));
    let (dir, blocks) = directory(&chunk.bytes);
    assert!(dir.len() > 3);
    // An unknown kind as the first event of block 2 (its kind column follows its directory).
    let block2 = blocks + (dir[0][2] + dir[1][2]) as usize;
    let mut bad = chunk.bytes.clone();
    // After the column count and the 18 column lengths (varints).
    let mut kinds = block2 + 1;
    for _ in 0..18 {
        while bad[kinds] & 0x80 != 0 {
            kinds += 1;
        }
        kinds += 1;
    }
    bad[kinds] = 0xEE;
    refresh(&mut bad);
    let err = read(&bad).unwrap_err();
    assert!(
        matches!(&err, FormatError::BadPayload { reason, .. }
            if reason.contains("block 2") && reason.contains("unknown event kind")),
        "{err}"
    );
    // The events of the blocks before it are not handed out either: the chunk is refused whole.
    let mut reader = ChunkReader::new(&bad, 0, "mem".as_ref());
    assert!(reader.next().unwrap().is_err());
    assert!(reader.next().is_none());

    // A directory whose counts disagree with the header, or with the blocks.
    let mut fewer = chunk.bytes.clone();
    let mut h = ChunkHeader::from_bytes(fewer[..CHUNK_HEADER_LEN].try_into().unwrap());
    h.events -= 1;
    fewer[..CHUNK_HEADER_LEN].copy_from_slice(&h.to_bytes());
    assert!(
        read(&fewer)
            .unwrap_err()
            .to_string()
            .contains("blocks hold")
    );

    // A compressed block that decompresses to fewer bytes than its entry says.
    let chunk = ChunkEncoder::new(1)
        .with_block_events(100)
        .encode(0, 0, 0, &raw_of(&events));
    let (dir, _) = directory(&chunk.bytes);
    assert!(dir[1][2] < dir[1][1], "block 1 is compressed");
    let (mut dir, blocks) = directory(&chunk.bytes);
    dir[1][1] += 1;
    let mut payload = Vec::new();
    let mut put = |v: u64| {
        let mut v = v;
        while v >= 0x80 {
            payload.push(v as u8 | 0x80);
            v >>= 7;
        }
        payload.push(v as u8);
    };
    put(dir.len() as u64);
    dir.iter().flatten().for_each(|&v| put(v));
    let mut h = ChunkHeader::from_bytes(chunk.bytes[..CHUNK_HEADER_LEN].try_into().unwrap());
    assert_eq!(h.codec, CODEC_ZSTD);
    payload.extend_from_slice(&chunk.bytes[blocks..]);
    h.raw_len += 1 + (payload.len() + CHUNK_HEADER_LEN) as u64 - chunk.bytes.len() as u64;
    h.stored_len = payload.len() as u64;
    let mut longer = h.to_bytes().to_vec();
    longer.extend(payload);
    refresh(&mut longer);
    let err = read(&longer).unwrap_err().to_string();
    assert!(
        err.contains("block 1: zstd") || err.contains("block 1: decompressed"),
        "{err}"
    );
}

#[test]
fn every_byte_of_a_chunk_of_blocks_flipped_with_valid_checksums_never_panics() {
    let events = events(3);
    for level in [Some(1), None] {
        let chunk = level
            .map_or_else(ChunkEncoder::uncompressed, ChunkEncoder::new)
            .with_block_events(9)
            .encode(0, 0, 0, &raw_of(&events));
        for at in CHUNK_HEADER_LEN..chunk.bytes.len() {
            for mask in [0xff, 0x01, 0x80] {
                let mut b = chunk.bytes.clone();
                b[at] ^= mask;
                // Fixes the checksums and checks every reader; any chunk it accepts must hold
                // as many events as its header says and survive a re-encode.
                format::fuzzing::check(&b);
            }
        }
    }
}

#[test]
fn version_8_files_still_read() {
    // Written by the version 8 writer (the fuzz seeds of that version): a rank file holding a
    // compressed chunk of every kind and a stored chunk of its first 10 events, and two
    // compressed chunks in a row, the second empty.
    let all = format::fuzzing::every_kind();
    let file =
        RankFile::from_bytes(include_bytes!("data/v8-rank-file.evf").to_vec(), "v8.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![all.clone(), all[..10].to_vec()]);
    let headers: Vec<_> = file.chunks().map(|c| c.unwrap().header).collect();
    assert!(headers.iter().all(|h| h.version == 8));
    assert_eq!(headers[0].codec, CODEC_ZSTD);
    let two = read(include_bytes!("data/v8-chunks-zstd.bin")).unwrap();
    assert_eq!(two, vec![all, vec![]]);
}
