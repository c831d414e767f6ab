//! Chunk version 9's block size: stored bytes per event and decoding speed of the synthetic halo
//! stream for several block sizes, beside version 8 (one zstd frame per chunk, what the writer
//! wrote before blocks). Chunks of 2^16 events, as the writers cut them.
//!
//! `cargo run --release -p format --example block_size [iterations]`

use std::path::Path;
use std::time::Instant;

use format::chunk::DEFAULT_LEVEL;
use format::framing::{CHUNK_HEADER_LEN, CODEC_ZSTD, ChunkHeader};
use format::synthetic::{HaloConfig, events};
use format::{ChunkEncoder, ChunkReader, EncodedChunk, EventBuf};

const CHUNK_EVENTS: usize = 1 << 16;

/// `chunk` as version 8 wrote it: one payload, compressed as one zstd frame.
fn as_v8(chunk: &EncodedChunk) -> Vec<u8> {
    let old = chunk.as_version(8).expect("version 8 exists");
    let payload = &old.bytes[CHUNK_HEADER_LEN..];
    let stored = zstd::bulk::compress(payload, DEFAULT_LEVEL).expect("zstd");
    let mut h = ChunkHeader::from_bytes(old.bytes[..CHUNK_HEADER_LEN].try_into().unwrap());
    h.codec = CODEC_ZSTD;
    h.stored_len = stored.len() as u64;
    h.payload_crc = crc32c::crc32c(&stored);
    let mut out = h.to_bytes().to_vec();
    out.extend(stored);
    out
}

/// Events decoded per second over `bytes` (a chunk sequence), best of 5.
fn decode_rate(bytes: &[u8], events: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0usize;
        for c in ChunkReader::new(bytes, 0, Path::new("mem")) {
            n += c.expect("valid").events().count();
        }
        assert_eq!(n, events);
        best = best.min(t.elapsed().as_secs_f64());
    }
    events as f64 / best
}

fn main() {
    let iterations = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let all = events(&HaloConfig {
        iterations,
        ..HaloConfig::default()
    });
    let bufs: Vec<EventBuf> = all
        .chunks(CHUNK_EVENTS)
        .map(|part| {
            let mut b = EventBuf::new();
            part.iter().for_each(|e| b.push(e));
            b
        })
        .collect();
    println!("{} events in {} chunks", all.len(), bufs.len());
    let encode = |enc: &mut ChunkEncoder| -> Vec<EncodedChunk> {
        bufs.iter()
            .enumerate()
            .map(|(i, b)| enc.encode_events(0, 0, i as u64, b))
            .collect()
    };
    let v8: Vec<u8> = encode(&mut ChunkEncoder::new(DEFAULT_LEVEL))
        .iter()
        .flat_map(as_v8)
        .collect();
    let report = |name: &str, bytes: &[u8], raw: Option<usize>| {
        println!(
            "{name:>12}: {:.3} B/event stored{}, decode {:.1} M events/s",
            bytes.len() as f64 / all.len() as f64,
            raw.map_or(String::new(), |r| format!(
                ", raw block {:.0} KiB",
                r as f64 / 1024.0
            )),
            decode_rate(bytes, all.len()) / 1e6
        );
    };
    report("v8", &v8, None);
    for block in [512, 1024, 2048, 4096, 8192, 16384, CHUNK_EVENTS] {
        let chunks = encode(&mut ChunkEncoder::new(DEFAULT_LEVEL).with_block_events(block));
        let raw = chunks.iter().map(|c| c.raw_len as usize).sum::<usize>() / all.len() * block;
        let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.bytes.clone()).collect();
        report(&format!("v9 B={block}"), &bytes, Some(raw));
    }
}
