//! The per-rank identity records of chunk version 2 (`RankInfo`, `Writer`): their bytes as
//! FORMAT.md specifies them, their round trip through buffers and files, and version-1 chunks
//! (written before these records existed) still being read.

mod common;

use common::{header, raw_of, read_everything, write_file};
use format::chunk::EncodedChunk;
use format::framing::{CHUNK_HEADER_LEN, CHUNK_MIN_VERSION, CHUNK_VERSION, ChunkHeader};
use format::*;

fn rank_info() -> RankInfo {
    RankInfo {
        rank: 3,
        world_size: 4,
        pid: 4242,
        host: "nodeB".into(),
        mpi_library: "Open MPI v4.1.4, package: Debian OpenMPI".into(),
        run_id: "vm-17-1700000000".into(),
    }
}

fn fallback() -> WriterUsed {
    WriterUsed {
        requested: WriterId::Uring,
        used: WriterId::Posix,
        change: WriterChange::Fallback,
        part: 0,
        reason: "io_uring setup failed: Operation not permitted (os error 1)".into(),
    }
}

/// The misc body of the one event of `raw` as laid out in a raw buffer: kind, `u64` length, body.
fn raw_body(event: &Event) -> (u8, Vec<u8>) {
    let buf = raw_of(std::slice::from_ref(event));
    let block = buf.blocks().next().expect("one block").to_vec();
    let len = u64::from_le_bytes(block[1..9].try_into().unwrap()) as usize;
    assert_eq!(block.len(), 9 + len, "one record, nothing after it");
    (block[0], block[9..].to_vec())
}

#[test]
fn rank_info_body_is_the_documented_layout() {
    let info = rank_info();
    let (kind, body) = raw_body(&Event::RankInfo(Box::new(info.clone())));
    assert_eq!(kind, 12);
    // Built by hand from FORMAT.md: rank, world_size, pid (u32 each), host and library with u16
    // lengths, run id to the end.
    let mut want = Vec::new();
    want.extend_from_slice(&3u32.to_le_bytes());
    want.extend_from_slice(&4u32.to_le_bytes());
    want.extend_from_slice(&4242u32.to_le_bytes());
    want.extend_from_slice(&5u16.to_le_bytes());
    want.extend_from_slice(b"nodeB");
    want.extend_from_slice(&(info.mpi_library.len() as u16).to_le_bytes());
    want.extend_from_slice(info.mpi_library.as_bytes());
    want.extend_from_slice(info.run_id.as_bytes());
    assert_eq!(body, want);
}

#[test]
fn writer_body_is_the_documented_layout() {
    let w = fallback();
    let (kind, body) = raw_body(&Event::Writer(w.clone()));
    assert_eq!(kind, 13);
    let mut want = vec![1u8, 0, 1];
    want.extend_from_slice(&0u32.to_le_bytes());
    want.extend_from_slice(w.reason.as_bytes());
    assert_eq!(body, want);
    let handover = WriterUsed {
        requested: WriterId::MpiIo,
        used: WriterId::Posix,
        change: WriterChange::FinalizeHandover,
        part: 7,
        reason: String::new(),
    };
    let (_, body) = raw_body(&Event::Writer(handover));
    assert_eq!(body, [2, 0, 2, 7, 0, 0, 0]);
}

#[test]
fn identity_records_round_trip_through_buffer_and_file() {
    let events = vec![
        Event::FunctionDef {
            id: 0,
            name: "MPI_Init".into(),
        },
        Event::RankInfo(Box::new(rank_info())),
        // Empty strings and a host name outside ASCII are legal.
        Event::RankInfo(Box::new(RankInfo {
            host: "nœud-ß".into(),
            mpi_library: String::new(),
            run_id: String::new(),
            ..rank_info()
        })),
        Event::Writer(fallback()),
        Event::Writer(WriterUsed {
            requested: WriterId::MpiIo,
            used: WriterId::MpiIo,
            change: WriterChange::Opened,
            part: 0,
            reason: String::new(),
        }),
        Event::Marker(Marker::InitDone { time: 99 }),
    ];
    let raw = raw_of(&events);
    assert_eq!(raw.iter().collect::<Vec<_>>(), events);
    let mut typed = EventBuf::new();
    for e in &events {
        typed.push(e);
    }
    let a = ChunkEncoder::new(3).encode(1, 0, 0, &raw);
    let b = ChunkEncoder::new(3).encode_events(1, 0, 0, &typed);
    assert_eq!(a.bytes, b.bytes, "both encoders write the same chunk");
    let (bytes, _) = write_file(std::slice::from_ref(&events), Some(1));
    let file = RankFile::from_bytes(bytes, "identity.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![events.clone()]);
    // The misc-only path (used to find a rank's identity without decoding its calls) sees them.
    let chunk = file.chunks().next().unwrap().unwrap();
    assert_eq!(chunk.header.version, CHUNK_VERSION);
    assert_eq!(chunk.misc_events().collect::<Vec<_>>(), events);
    // Untimed, like definitions: only the marker gives the chunk its time range.
    assert_eq!((chunk.header.first_ts, chunk.header.last_ts), (99, 99));
}

#[test]
fn an_overlong_host_name_is_cut_at_a_character_boundary() {
    let long = "é".repeat(40_000); // 80 000 bytes, more than a u16 length holds
    let info = RankInfo {
        host: long.clone(),
        ..rank_info()
    };
    let back: Vec<Event> = raw_of(&[Event::RankInfo(Box::new(info))]).iter().collect();
    let Event::RankInfo(back) = &back[0] else {
        panic!("{back:?}")
    };
    assert_eq!(
        back.host.len(),
        65_534,
        "the longest whole-character prefix"
    );
    assert!(long.starts_with(&back.host));
    assert_eq!(back.mpi_library, rank_info().mpi_library);
}

/// Re-labels the single chunk at `at` (up to the end of the file) as `version`, laid out as that
/// version writes it (`EncodedChunk::as_version`).
fn relabel(bytes: &mut Vec<u8>, at: usize, version: u16) {
    let h = ChunkHeader::from_bytes(bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
    let end = at + CHUNK_HEADER_LEN + h.stored_len as usize;
    assert_eq!(end, bytes.len(), "one chunk, the last of the file");
    let chunk = EncodedChunk {
        bytes: bytes[at..end].to_vec(),
        raw_len: h.raw_len,
        stored_len: h.stored_len,
        events: h.events,
        first_ts: h.first_ts,
        last_ts: h.last_ts,
    };
    let older = chunk.as_version(version).unwrap();
    bytes.truncate(at);
    bytes.extend_from_slice(&older.bytes);
}

/// `events` as a chunk older than version 6 holds them: no receive bytes, no call sites.
fn without_receive_bytes(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .map(|e| match e {
            Event::Call(c) => Event::Call(MpiCall {
                recv_bytes: 0,
                site: NO_SITE,
                ..*c
            }),
            other => other.clone(),
        })
        .collect()
}

#[test]
fn call_sites_are_version_6_records() {
    let site = CallSite {
        id: 1,
        address: 0x5555_5555_a1b2,
        base: 0x5555_5555_0000,
        file: "/opt/app/bin/solver".into(),
    };
    let call = MpiCall {
        func: 4,
        start: 10,
        end: 20,
        site: 1,
        ..MpiCall::default()
    };
    let events = vec![Event::CallSite(site.clone()), Event::Call(call)];
    let (kind, body) = raw_body(&events[0]);
    assert_eq!(kind, 19);
    let mut want = 1u32.to_le_bytes().to_vec();
    want.extend_from_slice(&site.address.to_le_bytes());
    want.extend_from_slice(&site.base.to_le_bytes());
    want.extend_from_slice(site.file.as_bytes());
    assert_eq!(body, want, "FORMAT.md's layout");
    round_trips_and_is_refused_at(&events, 5);
}

#[test]
fn receive_bytes_are_a_version_6_column() {
    let events = synthetic::events(&synthetic::HaloConfig {
        iterations: 5,
        ..Default::default()
    });
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Call(c) if c.recv_bytes > 0)),
        "the synthetic stream has collectives with receive bytes"
    );
    let (bytes, _) = write_file(std::slice::from_ref(&events), Some(1));
    let file = RankFile::from_bytes(bytes.clone(), "v6.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![events.clone()]);
    // Labelled 5 but keeping the new columns, the payload is refused, not misread.
    let at = first_chunk_offset();
    let mut mislabelled = bytes.clone();
    relabel(&mut mislabelled, at, 8);
    let mut h = ChunkHeader::from_bytes(mislabelled[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
    h.version = 5;
    mislabelled[at..at + CHUNK_HEADER_LEN].copy_from_slice(&h.to_bytes());
    let file = RankFile::from_bytes(mislabelled, "v5-with-17.evf").unwrap();
    let (chunks, _, err) = read_everything(&file);
    assert!(chunks.is_empty());
    assert!(
        err.expect("rejected")
            .to_string()
            .contains("number of columns")
    );
    // Written as version 5 did, it reads back with the receive bytes absent (0).
    let mut older = bytes;
    relabel(&mut older, at, 5);
    let file = RankFile::from_bytes(older, "v5.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![without_receive_bytes(&events)]);
}

/// `events` round-trip in a chunk of the current version, and a chunk labelled `older` that holds
/// them is refused (they are kinds added after `older`).
fn round_trips_and_is_refused_at(events: &[Event], older: u16) {
    let (bytes, _) = write_file(&[events.to_vec()], Some(1));
    let file = RankFile::from_bytes(bytes.clone(), "current.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![events.to_vec()]);
    let mut bytes = bytes;
    relabel(&mut bytes, first_chunk_offset(), older);
    let file = RankFile::from_bytes(bytes, "older.evf").unwrap();
    let (chunks, _, err) = read_everything(&file);
    assert!(
        chunks.is_empty(),
        "{events:?} accepted in a version-{older} chunk"
    );
    assert!(
        err.expect("rejected")
            .to_string()
            .contains("unknown event kind")
    );
}

fn first_chunk_offset() -> usize {
    encode_file_header(&header(7)).len()
}

#[test]
fn version_1_chunks_are_still_read() {
    assert_eq!((CHUNK_MIN_VERSION, CHUNK_VERSION), (1, 9));
    // A version-1 chunk is a version-5 chunk without the newer kinds: same layout otherwise.
    let events = synthetic::events(&synthetic::HaloConfig {
        iterations: 5,
        ..Default::default()
    });
    let (mut bytes, _) = write_file(std::slice::from_ref(&events), Some(1));
    relabel(&mut bytes, first_chunk_offset(), 1);
    let file = RankFile::from_bytes(bytes, "v1.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![without_receive_bytes(&events)]);
    assert_eq!(file.chunks().next().unwrap().unwrap().header.version, 1);
}

#[test]
fn a_version_1_chunk_may_not_hold_the_new_kinds() {
    let events = vec![Event::RankInfo(Box::new(rank_info()))];
    let (mut bytes, _) = write_file(std::slice::from_ref(&events), Some(1));
    relabel(&mut bytes, first_chunk_offset(), 1);
    let file = RankFile::from_bytes(bytes, "v1-new-kind.evf").unwrap();
    let (chunks, _, err) = read_everything(&file);
    assert!(chunks.is_empty());
    let err = err.expect("rejected");
    assert!(err.to_string().contains("unknown event kind"), "{err}");
}

/// Version 3 added the definitions of intercommunicator remote groups and RMA windows; they
/// round-trip, and a version-2 chunk may not hold them.
#[test]
fn remote_groups_and_windows_are_version_3_kinds() {
    let events = vec![
        Event::CommDef {
            id: 5,
            members: vec![1],
        },
        Event::RemoteGroup {
            id: 5,
            members: vec![0, format::NOT_IN_WORLD],
        },
        Event::CommDef {
            id: 6,
            members: vec![0, 1],
        },
        Event::WinDef { id: 6, comm: 0 },
    ];
    round_trips_and_is_refused_at(&events, 2);
}

/// Version 4 added memory samples, threshold choices and two markers; they round-trip, and a
/// version-3 chunk may hold none of them.
#[test]
fn memory_records_are_version_4_kinds() {
    let sample = MemorySample {
        time: 10,
        rss_bytes: 300 << 20,
        recorder_bytes: 64 << 20,
        compressed_bytes: 1 << 20,
        node_available: format::UNKNOWN_BYTES,
        cgroup_limit: 512 << 20,
        cgroup_usage: 400 << 20,
        swap_out_pages: 7,
        when: MemoryWhen::Suspension,
    };
    assert_eq!(sample.available(), Some(112 << 20));
    let newer = [
        Event::Memory(sample),
        Event::Threshold(ThresholdChoice {
            time: 11,
            bytes: 40 << 20,
            basis: ThresholdBasis::Cgroup,
            available: 480 << 20,
            ranks_on_node: 4,
        }),
        Event::Marker(Marker::Compressed {
            time: 12,
            raw_bytes: 1 << 30,
            stored_bytes: 50 << 20,
        }),
        Event::Marker(Marker::MemoryLow {
            time: 13,
            available: 10 << 20,
            needed: 64 << 20,
        }),
    ];
    let (bytes, _) = write_file(&[newer.to_vec()], Some(1));
    let file = RankFile::from_bytes(bytes, "v4.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![newer.to_vec()]);
    for event in newer {
        let (mut bytes, _) = write_file(&[vec![event.clone()]], Some(1));
        relabel(&mut bytes, first_chunk_offset(), 3);
        let file = RankFile::from_bytes(bytes, "v3-new-kind.evf").unwrap();
        let (chunks, _, err) = read_everything(&file);
        assert!(chunks.is_empty(), "{event:?} accepted in a version-3 chunk");
        let err = err.expect("rejected").to_string();
        assert!(
            err.contains("unknown event kind") || err.contains("newer than the chunk's version"),
            "{err}"
        );
    }
}

/// Folded polls are a version-5 kind: a version-4 chunk may not hold them.
#[test]
fn poll_runs_are_a_version_5_kind() {
    let run = Event::Polls(PollRun {
        func: 40,
        comm: 0,
        peer: 3,
        tag: 7,
        start: 1_000,
        end: 90_000,
        count: 812,
        busy: 40_000,
        inner_cost: 30_000,
        cost: 35,
    });
    let (bytes, _) = write_file(&[vec![run.clone()]], Some(1));
    let file = RankFile::from_bytes(bytes.clone(), "v5.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
    assert_eq!(chunks, vec![vec![run]]);
    let mut older = bytes;
    relabel(&mut older, first_chunk_offset(), 4);
    let file = RankFile::from_bytes(older, "v4-polls.evf").unwrap();
    let (chunks, _, err) = read_everything(&file);
    assert!(chunks.is_empty(), "polls accepted in a version-4 chunk");
    let err = err.expect("rejected").to_string();
    assert!(
        err.contains("unknown event kind") || err.contains("newer than the chunk's version"),
        "{err}"
    );
}

#[test]
fn versions_beyond_the_known_ones_are_refused() {
    let (mut bytes, _) = write_file(&[vec![Event::Writer(fallback())]], Some(1));
    // Only the header says 10: no writer knows that layout.
    let at = first_chunk_offset();
    let mut h = ChunkHeader::from_bytes(bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
    h.version = 10;
    bytes[at..at + CHUNK_HEADER_LEN].copy_from_slice(&h.to_bytes());
    let file = RankFile::from_bytes(bytes, "v10.evf").unwrap();
    let (_, _, err) = read_everything(&file);
    let err = err.expect("refused");
    assert!(
        matches!(
            err,
            FormatError::UnsupportedVersion {
                version: 10,
                supported: 9,
                ..
            }
        ),
        "{err}"
    );
}

/// Builds an uncompressed chunk holding one misc event of `kind` with `body`, bypassing the
/// encoder so that bodies it would never write can be tested. Version 8 (one payload, no block
/// directory): the misc bodies are the same in every later version.
fn chunk_with_body(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut payload = vec![18u8];
    let mut columns: Vec<Vec<u8>> = vec![vec![kind]];
    columns.extend((1..17).map(|_| vec![0u8])); // numeric columns: width 0, no values
    let mut misc = Vec::new();
    misc.push(body.len() as u8); // a one-byte varint: the bodies below are short
    misc.extend_from_slice(body);
    columns.push(misc);
    for c in &columns {
        payload.push(c.len() as u8);
    }
    for c in &columns {
        payload.extend_from_slice(c);
    }
    let h = ChunkHeader {
        version: 8,
        codec: format::framing::CODEC_NONE,
        encoding: format::framing::ENCODING_COLUMNS_V1,
        rank: 7,
        stream: 0,
        seq: 0,
        raw_len: payload.len() as u64,
        stored_len: payload.len() as u64,
        events: 1,
        first_ts: 0,
        last_ts: 0,
        payload_crc: crc32c::crc32c(&payload),
    };
    let mut bytes = encode_file_header(&header(7));
    bytes.extend_from_slice(&h.to_bytes());
    bytes.extend_from_slice(&payload);
    bytes
}

#[test]
fn damaged_identity_bodies_are_rejected() {
    // The hand-built chunk itself is valid:
    let good = chunk_with_body(13, &[0, 0, 0, 0, 0, 0, 0]);
    let file = RankFile::from_bytes(good, "good.evf").unwrap();
    let (chunks, _, err) = read_everything(&file);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        chunks,
        vec![vec![Event::Writer(WriterUsed {
            requested: WriterId::Posix,
            used: WriterId::Posix,
            change: WriterChange::Opened,
            part: 0,
            reason: String::new(),
        })]]
    );
    let cases: [(u8, Vec<u8>, &str); 5] = [
        (13, vec![4, 0, 0, 0, 0, 0, 0], "unknown writer"),
        (13, vec![0, 0, 9, 0, 0, 0, 0], "unknown writer change"),
        (13, vec![0, 0, 0, 0, 0], "too short"),
        // host length 10 with only 2 bytes of host
        (
            12,
            [vec![0; 12], vec![10, 0, b'a', b'b']].concat(),
            "too short",
        ),
        // host not UTF-8
        (
            12,
            [vec![0; 12], vec![1, 0, 0xff, 0, 0]].concat(),
            "not UTF-8",
        ),
    ];
    for (kind, body, want) in cases {
        let file = RankFile::from_bytes(chunk_with_body(kind, &body), "bad.evf").unwrap();
        let (chunks, _, err) = read_everything(&file);
        assert!(chunks.is_empty(), "{body:?}");
        let err = err.unwrap_or_else(|| panic!("{body:?} accepted"));
        assert!(err.to_string().contains(want), "{body:?}: {err}");
    }
}

/// Version 7 added the groups of `MPI_Win_post`/`MPI_Win_start`; they round-trip, and a version-6
/// chunk may not hold them.
#[test]
fn epoch_groups_are_version_7_kinds() {
    let events = vec![
        Event::EpochGroup {
            win: 6,
            members: vec![2, format::NOT_IN_WORLD],
        },
        Event::Call(MpiCall {
            func: 4,
            comm: 6,
            start: 10,
            end: 20,
            ..MpiCall::default()
        }),
    ];
    let (kind, body) = raw_body(&events[0]);
    assert_eq!(kind, 20);
    assert_eq!(body.len(), 12);
    round_trips_and_is_refused_at(&events, 6);
}

/// Version 8 added how a communicator was made (`CommOrigin`), its three forms each with exact
/// bytes; they round-trip, and a version-7 chunk may not hold them (a version-7 trace, whose
/// communicators have no origin, still reads: `version_1_chunks_are_still_read`, the corpus).
#[test]
fn comm_origins_are_version_8_kinds() {
    let parent = Event::CommOrigin {
        id: 5,
        origin: CommOrigin::Parent {
            parent: 2,
            index: 3,
        },
    };
    let group = Event::CommOrigin {
        id: 6,
        origin: CommOrigin::Group {
            parent: 0,
            tag: -2,
            index: 1,
        },
    };
    let tagged = Event::CommOrigin {
        id: 7,
        origin: CommOrigin::Tagged {
            tag: "ab".into(),
            index: 4,
        },
    };
    let want: [&[u8]; 3] = [
        &[5, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0],
        &[
            6, 0, 0, 0, 1, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 1, 0, 0, 0,
        ],
        &[7, 0, 0, 0, 2, 4, 0, 0, 0, b'a', b'b'],
    ];
    for (event, want) in [&parent, &group, &tagged].into_iter().zip(want) {
        let (kind, body) = raw_body(event);
        assert_eq!((kind, body.as_slice()), (21, want), "{event:?}");
    }
    let events = vec![
        Event::CommDef {
            id: 5,
            members: vec![1, 0],
        },
        parent,
        group,
        tagged,
    ];
    round_trips_and_is_refused_at(&events, 7);
    // An origin of an unknown form is refused, not guessed.
    let file =
        RankFile::from_bytes(chunk_with_body(21, &[5, 0, 0, 0, 3, 0, 0, 0, 0]), "bad.evf").unwrap();
    let (chunks, _, err) = read_everything(&file);
    assert!(chunks.is_empty());
    assert!(
        err.expect("rejected")
            .to_string()
            .contains("unknown communicator origin")
    );
}
