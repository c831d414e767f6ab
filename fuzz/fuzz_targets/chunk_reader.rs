//! Feeds arbitrary bytes to the chunk reader (as the chunk area of a file) and to the whole-file
//! reader. Neither may panic or allocate without bound; and whatever a chunk decodes to must
//! survive a re-encode unchanged, so the reader never hands out data the format cannot express.
#![no_main]

use std::path::Path;

use format::chunk::CHUNK_HEADER_LEN;
use format::reader::ChunkReader;
use format::{ChunkEncoder, Event, RankFile, RawBuf};
use libfuzzer_sys::fuzz_target;

/// Recomputes the checksums of every chunk-shaped region so mutations reach the decoder instead
/// of stopping at a checksum mismatch.
fn fix_checksums(data: &mut [u8]) {
    let mut at = 0usize;
    while data.len() >= at + CHUNK_HEADER_LEN && data[at..at + 4] == *b"EVFC" {
        let stored_len = u64::from_le_bytes(data[at + 32..at + 40].try_into().unwrap());
        let available = (data.len() - at - CHUNK_HEADER_LEN) as u64;
        let end = at + CHUNK_HEADER_LEN + stored_len.min(available) as usize;
        let payload_crc = crc32c::crc32c(&data[at + CHUNK_HEADER_LEN..end]);
        data[at + 64..at + 68].copy_from_slice(&payload_crc.to_le_bytes());
        let header_crc = crc32c::crc32c(&data[at..at + 68]);
        data[at + 68..at + 72].copy_from_slice(&header_crc.to_le_bytes());
        at = end;
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut fixed = data.to_vec();
    fix_checksums(&mut fixed);
    check(&fixed);
});

fn check(data: &[u8]) {
    let mut encoder = ChunkEncoder::uncompressed();
    let mut chunks = ChunkReader::new(data, 0, Path::new("fuzz"));
    for chunk in chunks.by_ref() {
        let Ok(chunk) = chunk else { continue };
        let events: Vec<Event> = chunk.events().collect();
        assert_eq!(events.len() as u64, chunk.event_count());
        let mut raw = RawBuf::new();
        for e in &events {
            raw.push_event(e);
        }
        let again = encoder.encode(chunk.rank(), chunk.stream(), chunk.seq(), &raw);
        let reread: Vec<Event> = ChunkReader::new(&again.bytes, 0, Path::new("again"))
            .flat_map(|c| c.expect("re-encoded chunk must read back").into_events())
            .collect();
        // Compared as text: a float field may hold NaN, which is never equal to itself.
        assert_eq!(format!("{reread:?}"), format!("{events:?}"));
    }
    if let Some(tail) = chunks.tail() {
        assert!(tail.offset <= data.len() as u64);
    }
    if let Ok(file) = RankFile::from_bytes(data.to_vec(), "fuzz.evf") {
        for event in file.events() {
            let _ = event;
        }
    }
}
