//! The body of the `chunk_reader` fuzz target (`fuzz/`), here so that the workspace builds it and
//! ordinary tests run it: over the committed seed corpus (`fuzz/corpus/chunk_reader`, made by
//! [`seed_corpus`]) in `format/tests/fuzz_corpus.rs`, and as a bounded stable-toolchain fuzzing
//! run ([`mutate`] on the corpus for a fixed time) in `scripts/test.sh`.
//!
//! [`check`] feeds arbitrary bytes to every reader of the format: the chunk reader (as a chunk
//! area), the rank-file reader and the group-file scanner with its members' chunk readers. None
//! may panic or allocate without bound; whatever a chunk decodes to must survive a re-encode
//! unchanged, so a reader never hands out data the format cannot express.

use std::path::Path;

use crate::body::{KIND_CALL, KIND_COMPLETION, max_kind, max_marker};
use crate::chunk::{ChunkEncoder, EncodedChunk};
use crate::framing::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, CHUNK_VERSION, CODEC_ZSTD, ChunkHeader, FILE_MAGIC, FileHeader,
    encode_file_header,
};
use crate::group::{GROUP_HEADER_FIXED_LEN, GROUP_MAGIC, GroupHeader, encode_group_header};
use crate::model::*;
use crate::raw::RawBuf;
use crate::reader::{ChunkReader, RankFile};
use crate::synthetic::{self, HaloConfig, Rng};
use crate::writer::RankFileWriter;

/// Everything the fuzz target does with one input: the bytes as they are, then with every
/// chunk-shaped region's and the group header's checksums made valid, so mutations reach the
/// decoders instead of stopping at a checksum mismatch. Returns how many chunks the readers
/// accepted and decoded (a fuzzing run that decodes none tests nothing).
pub fn check(data: &[u8]) -> u64 {
    let mut fixed = data.to_vec();
    fix_checksums(&mut fixed);
    check_once(data) + check_once(&fixed)
}

/// Recomputes the checksums of every chunk header found in `data` (wherever `EVFC` starts one)
/// and of a group header at its start.
pub fn fix_checksums(data: &mut [u8]) {
    if data.starts_with(&GROUP_MAGIC) && data.len() >= GROUP_HEADER_FIXED_LEN {
        let total = u32::from_le_bytes(data[12..16].try_into().unwrap_or_default()) as usize;
        if (GROUP_HEADER_FIXED_LEN + 4..=data.len()).contains(&total) {
            let crc = crc32c::crc32c(&data[..total - 4]);
            data[total - 4..total].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let mut at = 0usize;
    while at + CHUNK_HEADER_LEN <= data.len() {
        if data[at..at + 4] != CHUNK_MAGIC {
            at += 1;
            continue;
        }
        let stored_len = u64::from_le_bytes(data[at + 32..at + 40].try_into().unwrap_or_default());
        let available = (data.len() - at - CHUNK_HEADER_LEN) as u64;
        let end = at + CHUNK_HEADER_LEN + stored_len.min(available) as usize;
        let payload_crc = crc32c::crc32c(&data[at + CHUNK_HEADER_LEN..end]);
        data[at + 64..at + 68].copy_from_slice(&payload_crc.to_le_bytes());
        let header_crc = crc32c::crc32c(&data[at..at + 68]);
        data[at + 68..at + 72].copy_from_slice(&header_crc.to_le_bytes());
        at = end.max(at + 1);
    }
}

fn check_once(data: &[u8]) -> u64 {
    let path = Path::new("fuzz");
    let mut chunks = ChunkReader::new(data, 0, path);
    let mut decoded = check_chunks(&mut chunks);
    if let Some(tail) = chunks.tail() {
        assert!(tail.offset <= data.len() as u64);
    }
    if let Ok(file) = RankFile::from_bytes(data.to_vec(), "fuzz.evf") {
        decoded += check_chunks(&mut file.chunks());
        for event in file.events() {
            let _ = event;
        }
    }
    if let Ok(index) = crate::group::scan_group(data, path) {
        for member in &index.members {
            for s in &member.segments {
                assert!(s.start <= s.end && s.end <= data.len() as u64, "{s:?}");
            }
            decoded += check_chunks(&mut ChunkReader::over_segments(
                data,
                &member.segments,
                path,
            ));
        }
        for d in &index.damage {
            assert!(d.offset <= data.len() as u64);
        }
    }
    decoded
}

/// Every chunk a reader accepts decodes to as many events as its header says, and they survive a
/// re-encode unchanged.
fn check_chunks(chunks: &mut ChunkReader<'_>) -> u64 {
    let mut encoder = ChunkEncoder::uncompressed();
    let mut decoded = 0;
    for chunk in chunks.by_ref() {
        let Ok(chunk) = chunk else { continue };
        decoded += 1;
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
    decoded
}

/// One event of every kind (and every marker), beside a short synthetic halo run.
pub fn every_kind() -> Vec<Event> {
    let mut events = synthetic::events(&HaloConfig {
        iterations: 2,
        ..HaloConfig::default()
    });
    let mut call = match events.iter().find(|e| matches!(e, Event::Call(_))) {
        Some(Event::Call(c)) => *c,
        _ => MpiCall::default(),
    };
    call.recv_bytes = 4096;
    call.site = 1;
    events.extend([
        Event::CallSite(CallSite {
            id: 1,
            address: 0x40_1234,
            base: 0x40_0000,
            file: "/bin/app".into(),
        }),
        Event::Call(call),
        Event::Completion(Completion {
            request: 3,
            cancelled: true,
            ..Completion::default()
        }),
        Event::User(UserRecord {
            time: 1,
            name: 2,
            payload: b"payload".to_vec(),
        }),
        Event::Region(Region {
            time: 2,
            name: 3,
            begin: true,
        }),
        Event::Suspension(Box::new(Suspension {
            seq: 1,
            start: 5,
            end: 9,
            z_ns: 4,
            ..Suspension::default()
        })),
        Event::CommDef {
            id: 5,
            members: vec![0, 2, 4],
        },
        Event::Clock(ClockSample {
            local: 7,
            offset_ns: -3.5,
            rtt_ns: 900.0,
            when: SampleKind::Suspension,
        }),
        Event::StringDef {
            id: 2,
            text: "solver".into(),
        },
        Event::FunctionDef {
            id: 9,
            name: "MPI_Send".into(),
        },
        Event::RankInfo(Box::new(RankInfo {
            rank: 1,
            world_size: 4,
            pid: 77,
            host: "node1".into(),
            mpi_library: "MPICH Version: 4.0.2".into(),
            run_id: "run".into(),
        })),
        Event::Writer(WriterUsed {
            requested: WriterId::Uring,
            used: WriterId::Posix,
            change: WriterChange::Fallback,
            part: 0,
            reason: "io_uring setup failed".into(),
        }),
        Event::RemoteGroup {
            id: 6,
            members: vec![1, NOT_IN_WORLD],
        },
        Event::WinDef { id: 7, comm: 5 },
        Event::Memory(MemorySample {
            time: 3,
            rss_bytes: 1 << 20,
            recorder_bytes: 1 << 16,
            node_available: 1 << 30,
            ..MemorySample::default()
        }),
        Event::Threshold(ThresholdChoice {
            time: 4,
            bytes: 64 << 20,
            ..ThresholdChoice::default()
        }),
        Event::Polls(PollRun {
            func: 9,
            count: 12,
            ..PollRun::default()
        }),
        Event::EpochGroup {
            win: 7,
            members: vec![0, 1],
        },
        Event::CommOrigin {
            id: 5,
            origin: CommOrigin::Parent {
                parent: 0,
                index: 2,
            },
        },
        Event::CommOrigin {
            id: 6,
            origin: CommOrigin::Group {
                parent: 5,
                tag: -7,
                index: 0,
            },
        },
        Event::CommOrigin {
            id: 8,
            origin: CommOrigin::Tagged {
                tag: "org.example.tag".into(),
                index: 1,
            },
        },
    ]);
    events.extend(
        [
            Marker::LocalFlush { time: 1, bytes: 2 },
            Marker::RecordingStopped { time: 2 },
            Marker::Lost { time: 3, events: 4 },
            Marker::AbnormalEnd {
                time: 4,
                signal: 15,
            },
            Marker::InitDone { time: 5 },
            Marker::FinalizeStart { time: 6 },
            Marker::Stuck {
                time: 11,
                func: 42,
                elapsed_ns: 1_000_000,
                comm: 0,
                peer: 1,
                tag: 7,
            },
            Marker::Compressed {
                time: 12,
                raw_bytes: 100,
                stored_bytes: 40,
            },
            Marker::MemoryLow {
                time: 13,
                available: 1 << 20,
                needed: 1 << 24,
            },
        ]
        .map(Event::Marker),
    );
    events
}

/// Whether a chunk of `version` can hold `e` (its kind, and a marker's kind, exist there).
pub fn in_version(e: &Event, version: u16) -> bool {
    let kind = match e {
        Event::Call(_) => KIND_CALL,
        Event::Completion(_) => KIND_COMPLETION,
        _ => crate::body::put_misc_body(&mut Vec::new(), e),
    };
    let marker_ok = match e {
        Event::Marker(m) => crate::body::marker_kind(m) <= max_marker(version),
        _ => true,
    };
    max_kind(version).is_some_and(|max| kind <= max) && marker_ok
}

fn encoded(events: &[Event], level: Option<i32>) -> EncodedChunk {
    let mut raw = RawBuf::new();
    for e in events {
        raw.push_event(e);
    }
    let mut encoder = match level {
        Some(l) => ChunkEncoder::new(l),
        None => ChunkEncoder::uncompressed(),
    };
    encoder.encode(3, 1, 0, &raw)
}

/// Rewrites the header of the chunk at the start of `bytes` with `edit` and fixes its checksums.
fn edit_header(mut bytes: Vec<u8>, edit: impl FnOnce(&mut ChunkHeader)) -> Vec<u8> {
    let mut h = ChunkHeader::from_bytes(bytes[..CHUNK_HEADER_LEN].try_into().unwrap());
    edit(&mut h);
    bytes[..CHUNK_HEADER_LEN].copy_from_slice(&h.to_bytes());
    bytes
}

/// Replaces the payload of an uncompressed chunk and fixes its length and checksums.
fn with_payload(bytes: &[u8], payload: Vec<u8>) -> Vec<u8> {
    let mut h = ChunkHeader::from_bytes(bytes[..CHUNK_HEADER_LEN].try_into().unwrap());
    h.raw_len = payload.len() as u64;
    h.stored_len = payload.len() as u64;
    h.payload_crc = crc32c::crc32c(&payload);
    let mut out = h.to_bytes().to_vec();
    out.extend(payload);
    out
}

fn file_header(rank: u32) -> FileHeader {
    FileHeader::nanoseconds(rank, 4, "fuzz seeds")
}

/// The seed corpus, by file name: `valid-*` inputs every reader must accept in full (a chunk of
/// every version 1 to [`CHUNK_VERSION`] holding every event kind of that version, compressed
/// and not, a rank file and a group file), and `malformed-*` inputs whose checksums are all valid
/// but whose content a reader must refuse. `format/tests/fuzz_corpus.rs` checks both, and that
/// the committed corpus is this one.
pub fn seed_corpus() -> Vec<(String, Vec<u8>)> {
    let all = every_kind();
    let mut seeds = Vec::new();
    for version in 1..=CHUNK_VERSION {
        let events: Vec<Event> = all
            .iter()
            .filter(|e| in_version(e, version))
            .cloned()
            .collect();
        let chunk = encoded(&events, Some(3))
            .as_version(version)
            .expect("every version can be written");
        seeds.push((format!("valid-chunk-v{version}.bin"), chunk.bytes));
    }
    let latest = encoded(&all, Some(3));
    let stored = encoded(&all, None);
    let mut two = latest.bytes.clone();
    two.extend(encoded(&[], Some(1)).bytes);
    seeds.push(("valid-chunks-zstd.bin".into(), two));
    seeds.push(("valid-chunk-stored.bin".into(), stored.bytes.clone()));
    // Many small blocks, one of them stored as is among compressed ones when zstd cannot shrink it.
    let blocks = ChunkEncoder::new(3)
        .with_block_events(7)
        .encode(0, 0, 0, &raw_of(&all));
    seeds.push(("valid-chunk-blocks.bin".into(), blocks.bytes));

    // A rank file: header, then two chunks.
    let mut w = RankFileWriter::new(Vec::new(), &file_header(3)).unwrap();
    w.write_chunk(&latest).unwrap();
    w.write_chunk(&encoded(&all[..10], None)).unwrap();
    seeds.push(("valid-rank-file.bin".into(), w.into_inner()));

    // A group file of two members: group header, each member's rank header and chunks,
    // interleaved (FORMAT.md "Group files").
    let mut group = encode_group_header(&GroupHeader {
        world_size: 4,
        group_size: 2,
        leader: 2,
        created_unix_ns: 0,
        producer: "fuzz seeds".into(),
    });
    let mut enc = ChunkEncoder::new(1);
    for round in 0..2u64 {
        for rank in [2u32, 3] {
            if round == 0 {
                group.extend(encode_file_header(&file_header(rank)));
            }
            let mut raw = RawBuf::new();
            for e in all.iter().skip(round as usize * 5).take(20) {
                raw.push_event(e);
            }
            group.extend(enc.encode(rank, 0, round, &raw).bytes);
        }
    }
    seeds.push(("valid-group-file.bin".into(), group));

    // Malformed, with valid checksums: what only the decoder can catch.
    let v1 = encoded(&all, None).as_version(1).unwrap().bytes;
    seeds.push(("malformed-newer-kinds-in-v1.bin".into(), v1));
    let v3 = encoded(&all, None).as_version(3).unwrap().bytes;
    seeds.push(("malformed-newer-kinds-in-v3.bin".into(), v3));
    seeds.push((
        "malformed-event-count.bin".into(),
        edit_header(stored.bytes.clone(), |h| h.events += 1),
    ));
    seeds.push((
        "malformed-fewer-events.bin".into(),
        edit_header(stored.bytes.clone(), |h| h.events -= 1),
    ));
    seeds.push((
        "malformed-version-next.bin".into(),
        edit_header(stored.bytes.clone(), |h| h.version = CHUNK_VERSION + 1),
    ));
    seeds.push((
        "malformed-version-0.bin".into(),
        edit_header(stored.bytes.clone(), |h| h.version = 0),
    ));
    seeds.push((
        "malformed-codec.bin".into(),
        edit_header(stored.bytes.clone(), |h| h.codec = 9),
    ));
    seeds.push((
        "malformed-encoding.bin".into(),
        edit_header(stored.bytes.clone(), |h| h.encoding = 0),
    ));
    seeds.push((
        "malformed-raw-len.bin".into(),
        edit_header(latest.bytes.clone(), |h| h.raw_len = h.raw_len * 2 + 1),
    ));
    seeds.push((
        "malformed-huge-raw-len.bin".into(),
        edit_header(latest.bytes.clone(), |h| h.raw_len = u64::MAX),
    ));
    let payload = stored.bytes[CHUNK_HEADER_LEN..].to_vec();
    // The one block's columns payload starts after the block directory.
    let block = block_start(&payload);
    seeds.push((
        "malformed-column-count.bin".into(),
        with_payload(&stored.bytes, {
            let mut p = payload.clone();
            p[block] = p[block].wrapping_add(1);
            p
        }),
    ));
    seeds.push((
        "malformed-block-events.bin".into(),
        with_payload(&stored.bytes, {
            // One event moved from the block to a second, empty-handed block entry.
            let mut p = vec![2];
            let mut pos = 1;
            let events = crate::varint::get_u64(&payload, &mut pos).unwrap_or(0);
            crate::varint::put_u64(&mut p, events - 1);
            p.extend_from_slice(&payload[pos..block]);
            p.extend([1, 0, 0]);
            p.extend_from_slice(&payload[block..]);
            p
        }),
    ));
    seeds.push((
        "malformed-payload-cut.bin".into(),
        with_payload(&stored.bytes, payload[..payload.len() / 2].to_vec()),
    ));
    seeds.push((
        "malformed-payload-extra.bin".into(),
        with_payload(&stored.bytes, {
            let mut p = payload.clone();
            p.extend([0xAB; 17]);
            p
        }),
    ));
    seeds.push((
        "malformed-zstd-garbage.bin".into(),
        edit_header(
            // One block of 1 event, 40 bytes raw, 8 stored: a zstd magic and garbage.
            with_payload(
                &stored.bytes,
                vec![1, 1, 40, 8, 0x28, 0xB5, 0x2F, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF],
            ),
            |h| {
                h.codec = CODEC_ZSTD;
                h.events = 1;
                h.raw_len = 4 + 40;
            },
        ),
    ));
    // An unknown event kind where the first kind byte is: the kind column starts right after the
    // column directory.
    seeds.push((
        "malformed-unknown-kind.bin".into(),
        with_payload(&stored.bytes, {
            let mut p = payload.clone();
            let at = block + kind_column_start(&p[block..]);
            p[at] = 0xEE;
            p
        }),
    ));
    seeds
}

/// Where the first block of a version 9+ stored payload starts: after the block directory.
fn block_start(payload: &[u8]) -> usize {
    let mut pos = 0;
    let blocks = crate::varint::get_u64(payload, &mut pos).unwrap_or(0);
    for _ in 0..blocks * 3 {
        crate::varint::get_u64(payload, &mut pos);
    }
    pos
}

/// A buffer holding `events`.
fn raw_of(events: &[Event]) -> RawBuf {
    let mut raw = RawBuf::new();
    for e in events {
        raw.push_event(e);
    }
    raw
}

/// Where the kind column of a version 6+ payload starts: after its column count and directory.
fn kind_column_start(payload: &[u8]) -> usize {
    let count = payload[0] as usize;
    let mut pos = 1;
    for _ in 0..count {
        while payload[pos] & 0x80 != 0 {
            pos += 1;
        }
        pos += 1;
    }
    pos
}

/// Whether every reader accepts `data` in full: no error, no cut or damaged range, and as many
/// events as the chunk headers say (for a group file, its members').
pub fn read_in_full(data: &[u8]) -> Result<u64, String> {
    let path = Path::new("seed");
    let mut events = 0;
    let mut read = |chunks: &mut ChunkReader<'_>| -> Result<(), String> {
        for chunk in chunks.by_ref() {
            let chunk = chunk.map_err(|e| e.to_string())?;
            let n = chunk.events().count() as u64;
            if n != chunk.event_count() {
                return Err(format!("{n} events, header says {}", chunk.event_count()));
            }
            events += n;
        }
        if let Some(t) = chunks.tail() {
            return Err(format!("tail: {t:?}"));
        }
        if !chunks.skipped().is_empty() {
            return Err(format!("skipped: {:?}", chunks.skipped()));
        }
        Ok(())
    };
    if data.starts_with(&GROUP_MAGIC) {
        let index = crate::group::scan_group(data, path).map_err(|e| e.to_string())?;
        if !index.damage.is_empty() {
            return Err(format!("damage: {:?}", index.damage));
        }
        for m in &index.members {
            read(&mut ChunkReader::over_segments(data, &m.segments, path))?;
        }
    } else if data.starts_with(&FILE_MAGIC) {
        let file = RankFile::from_bytes(data.to_vec(), "seed.evf").map_err(|e| e.to_string())?;
        read(&mut file.chunks())?;
    } else {
        read(&mut ChunkReader::new(data, 0, path))?;
    }
    Ok(events)
}

/// A random mutation of `input` (as libFuzzer's basic ones: flip, set, insert, erase, duplicate,
/// splice with another corpus entry), for the stable-toolchain fuzzing run.
pub fn mutate(input: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    let steps = 1 + rng.next_u64() % 4;
    for _ in 0..steps {
        let len = out.len().max(1);
        let at = (rng.next_u64() as usize) % len;
        match rng.next_u64() % 7 {
            0 if !out.is_empty() => out[at] ^= 1 << (rng.next_u64() % 8),
            1 if !out.is_empty() => out[at] = rng.next_u64() as u8,
            2 => {
                let b = rng.next_u64() as u8;
                out.insert(at.min(out.len()), b);
            }
            3 if !out.is_empty() => {
                let n = 1 + (rng.next_u64() as usize) % 16;
                out.drain(at..(at + n).min(out.len()));
            }
            4 if !out.is_empty() => {
                // An interesting value over 1, 2, 4 or 8 bytes.
                let width = 1usize << (rng.next_u64() % 4);
                let v: u64 =
                    [0, 1, u64::MAX, 0x80, 0x7F, 0xFFFF, 1 << 32][rng.next_u64() as usize % 7];
                for (i, b) in v.to_le_bytes().iter().take(width).enumerate() {
                    if let Some(slot) = out.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            5 if !out.is_empty() => {
                let n = 1 + (rng.next_u64() as usize) % 64;
                let piece = out[at..(at + n).min(out.len())].to_vec();
                let to = (rng.next_u64() as usize) % out.len();
                out.splice(to..to, piece);
            }
            _ if !other.is_empty() => {
                let from = (rng.next_u64() as usize) % other.len();
                let n = 1 + (rng.next_u64() as usize) % 256;
                let piece = &other[from..(from + n).min(other.len())];
                let to = at.min(out.len());
                let end = (to + piece.len()).min(out.len());
                out.splice(to..end, piece.iter().copied());
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::body::{KIND_USER, marker_kind};

    /// The seed corpus holds every kind only if [`every_kind`] has one of each: a kind or marker
    /// added to the format without a sample there fails here.
    #[test]
    fn every_kind_holds_every_misc_kind_and_marker() {
        let all = every_kind();
        let kinds: BTreeSet<u8> = all
            .iter()
            .filter(|e| !matches!(e, Event::Call(_) | Event::Completion(_)))
            .map(|e| crate::body::put_misc_body(&mut Vec::new(), e))
            .collect();
        let latest = max_kind(CHUNK_VERSION).expect("this crate reads its own version");
        assert_eq!(kinds, (KIND_USER..=latest).collect());
        let markers: BTreeSet<u8> = all
            .iter()
            .filter_map(|e| match e {
                Event::Marker(m) => Some(marker_kind(m)),
                _ => None,
            })
            .collect();
        assert_eq!(markers, (1..=max_marker(CHUNK_VERSION)).collect());
    }
}
