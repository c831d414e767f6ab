mod common;

use common::*;
use format::framing::TailKind;
use format::framing::{CHUNK_HEADER_LEN, ChunkHeader};
use format::*;

/// A small file with a few chunks mixing every event kind.
fn small_file() -> (Vec<u8>, Vec<usize>, Vec<Vec<Event>>) {
    let mut groups: Vec<Vec<Event>> = (0..3)
        .map(|i| {
            synthetic::events(&synthetic::HaloConfig {
                iterations: 2,
                seed: i,
                ..Default::default()
            })
        })
        .collect();
    groups[1].push(Event::User(UserRecord {
        time: 99,
        name: 1,
        payload: b"user bytes".to_vec(),
    }));
    groups[1].push(Event::StringDef {
        id: 4,
        text: "région".to_owned(),
    });
    groups.push(Vec::new());
    let (bytes, ends) = write_file(&groups, Some(3));
    (bytes, ends, groups)
}

fn header_len() -> usize {
    encode_file_header(&header(7)).len()
}

/// Which chunk a byte offset falls in (None for the file header).
fn chunk_at(offset: usize, ends: &[usize]) -> Option<usize> {
    if offset < header_len() {
        None
    } else {
        ends.iter().position(|&e| offset < e)
    }
}

#[test]
fn truncation_at_every_offset_keeps_all_complete_chunks() {
    let (bytes, ends, groups) = small_file();
    for cut in 0..=bytes.len() {
        let prefix = bytes[..cut].to_vec();
        let file = match RankFile::from_bytes(prefix, "cut.evf") {
            Ok(f) => f,
            Err(e) => {
                assert!(
                    cut < header_len(),
                    "cut at {cut} rejected the whole file: {e}"
                );
                assert!(
                    matches!(e, FormatError::Truncated { offset: 0, .. }),
                    "cut at {cut}: {e}"
                );
                continue;
            }
        };
        assert!(cut >= header_len());
        let (chunks, tail, err) = read_everything(&file);
        assert!(
            err.is_none(),
            "cut at {cut} gave an error instead of a clean tail: {err:?}"
        );
        let complete = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(chunks, groups[..complete], "cut at {cut}");
        let last_end = if complete == 0 {
            header_len()
        } else {
            ends[complete - 1]
        };
        match tail {
            None => assert_eq!(last_end, cut, "cut at {cut} inside a chunk went unreported"),
            Some(t) => {
                assert_eq!(t.kind, TailKind::Cut, "cut at {cut}");
                assert_eq!(t.offset as usize, last_end, "cut at {cut}");
            }
        }
    }
}

#[test]
fn flipping_any_byte_is_detected_and_never_yields_wrong_events() {
    let (bytes, ends, groups) = small_file();
    for offset in 0..bytes.len() {
        for mask in [0xffu8, 0x01, 0x80] {
            let mut damaged = bytes.clone();
            damaged[offset] ^= mask;
            let Some(hit) = chunk_at(offset, &ends) else {
                let err = RankFile::from_bytes(damaged, "flip.evf")
                    .expect_err("damaged file header accepted");
                assert!(
                    err.offset().is_some_and(|o| o < header_len() as u64),
                    "flip at {offset}: {err}"
                );
                continue;
            };
            let file = RankFile::from_bytes(damaged, "flip.evf").unwrap();
            let (chunks, tail, err) = read_everything(&file);
            assert_eq!(chunks, groups[..hit], "flip {mask:#x} at {offset}");
            let chunk_start = if hit == 0 {
                header_len()
            } else {
                ends[hit - 1]
            };
            let tail = tail.unwrap_or_else(|| panic!("flip at {offset} went unnoticed"));
            assert_eq!(tail.offset as usize, chunk_start);
            // A damaged length field can make an intact-looking header claim more bytes than the
            // file has only if its checksum still matched, which a single flip cannot do.
            let err = err
                .unwrap_or_else(|| panic!("flip at {offset} reported as {tail:?}, not as damage"));
            assert_eq!(err.offset(), Some(chunk_start as u64), "{err}");
            assert_eq!(tail.kind, TailKind::Damaged);
        }
    }
}

#[test]
fn wrong_file_magic_and_version_are_named() {
    let (bytes, _, _) = small_file();
    let mut bad = bytes.clone();
    bad[0] = b'X';
    let err = RankFile::from_bytes(bad, "magic.evf").unwrap_err();
    assert!(
        matches!(err, FormatError::BadMagic { offset: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("magic.evf"));

    // A future version with a valid checksum must be refused as unsupported, not as damage.
    let mut future = bytes.clone();
    let hl = header_len();
    future[8..10].copy_from_slice(&2u16.to_le_bytes());
    let crc = crc32c::crc32c(&future[..hl - 4]);
    future[hl - 4..hl].copy_from_slice(&crc.to_le_bytes());
    let err = RankFile::from_bytes(future, "v2.evf").unwrap_err();
    assert!(
        matches!(err, FormatError::UnsupportedVersion { version: 2, .. }),
        "{err}"
    );
}

/// Rewrites the header of the chunk at `at` through `edit`, with a valid header checksum.
fn forge_chunk_header(
    bytes: &mut [u8],
    at: usize,
    edit: impl FnOnce(&mut ChunkHeader, &mut [u8; CHUNK_HEADER_LEN]),
) {
    let raw: [u8; CHUNK_HEADER_LEN] = bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap();
    // Decoded by hand from FORMAT.md, independently of the reader.
    let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().unwrap());
    let mut h = ChunkHeader {
        version: u16::from_le_bytes([raw[4], raw[5]]),
        codec: raw[6],
        encoding: raw[7],
        rank: u32_at(8),
        stream: u32_at(12),
        seq: u64_at(16),
        raw_len: u64_at(24),
        stored_len: u64_at(32),
        events: u64_at(40),
        first_ts: u64_at(48),
        last_ts: u64_at(56),
        payload_crc: u32_at(64),
    };
    let mut out = raw;
    edit(&mut h, &mut out);
    let mut new = h.to_bytes();
    if out[..4] != raw[..4] {
        new[..4].copy_from_slice(&out[..4]);
        let crc = crc32c::crc32c(&new[..68]);
        new[68..].copy_from_slice(&crc.to_le_bytes());
    }
    bytes[at..at + CHUNK_HEADER_LEN].copy_from_slice(&new);
}

#[test]
fn forged_chunk_headers_give_typed_errors_at_the_chunk_offset() {
    let (bytes, ends, groups) = small_file();
    let second = ends[0];
    let check = |edit: &dyn Fn(&mut ChunkHeader, &mut [u8; CHUNK_HEADER_LEN]),
                 want: &dyn Fn(&FormatError) -> bool| {
        let mut b = bytes.clone();
        forge_chunk_header(&mut b, second, edit);
        let file = RankFile::from_bytes(b, "forged.evf").unwrap();
        let (chunks, tail, err) = read_everything(&file);
        assert_eq!(chunks, groups[..1]);
        let err = err.expect("forged header accepted");
        assert!(want(&err), "unexpected error {err}");
        assert_eq!(err.offset(), Some(second as u64));
        assert_eq!(tail.unwrap().kind, TailKind::Damaged);
    };
    check(&|h, _| h.version = 10, &|e| {
        matches!(e, FormatError::UnsupportedVersion { version: 10, .. })
    });
    check(&|_, raw| raw[0] = b'Q', &|e| {
        matches!(e, FormatError::BadMagic { .. })
    });
    check(&|h, _| h.codec = 7, &|e| {
        matches!(e, FormatError::UnknownCodec { value: 7, .. })
    });
    check(&|h, _| h.raw_len = u64::MAX, &|e| {
        matches!(e, FormatError::BadLength { .. })
    });
    // Plausible but wrong sizes: must fail on decoding, without reserving what they claim.
    check(&|h, _| h.raw_len = 1 << 33, &|e| {
        matches!(e, FormatError::BadPayload { .. })
    });
    check(&|h, _| h.raw_len -= 1, &|e| {
        matches!(e, FormatError::BadPayload { .. })
    });
    check(&|h, _| h.events += 1, &|e| {
        matches!(e, FormatError::BadPayload { .. })
    });
    check(&|h, _| h.payload_crc ^= 1, &|e| {
        matches!(e, FormatError::ChecksumMismatch { .. })
    });

    // A stored length past the end of the file with an intact header reads as a cut file.
    let mut b = bytes.clone();
    forge_chunk_header(
        &mut b,
        second,
        |h: &mut ChunkHeader, _: &mut [u8; CHUNK_HEADER_LEN]| h.stored_len = u64::MAX / 2,
    );
    let file = RankFile::from_bytes(b, "long.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none());
    assert_eq!(chunks, groups[..1]);
    let tail = tail.unwrap();
    assert_eq!((tail.offset, tail.kind), (second as u64, TailKind::Cut));
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = synthetic::Rng::new(42);
    let (bytes, _, _) = small_file();
    let hl = header_len();
    for round in 0..2000 {
        let mut b = bytes.clone();
        let n = 1 + (rng.next_u64() % 8) as usize;
        for _ in 0..n {
            let at = hl + (rng.next_u64() as usize) % (b.len() - hl);
            b[at] = rng.next_u64() as u8;
        }
        if round % 3 == 0 {
            let cut = hl + (rng.next_u64() as usize) % (b.len() - hl);
            b.truncate(cut);
        }
        let file = RankFile::from_bytes(b, "garbage.evf").unwrap();
        let _ = read_everything(&file);
    }
}

#[test]
fn resync_skips_a_damaged_chunk_and_reads_the_rest() {
    let (bytes, ends, groups) = small_file();
    // Damage the payload of chunk 1 (of 4).
    let mut damaged = bytes.clone();
    damaged[ends[0] + CHUNK_HEADER_LEN + 3] ^= 0x40;
    let file = RankFile::from_bytes(damaged, "resync.evf").unwrap();
    let mut chunks = file.chunks();
    let mut got = Vec::new();
    let mut errors = 0;
    loop {
        for c in chunks.by_ref() {
            match c {
                Ok(c) => got.push(c.events().collect::<Vec<_>>()),
                Err(e) => {
                    assert_eq!(e.offset(), Some(ends[0] as u64));
                    errors += 1;
                }
            }
        }
        if chunks.resync().is_none() {
            break;
        }
    }
    assert_eq!(errors, 1);
    let mut expected = groups.clone();
    expected.remove(1);
    assert_eq!(got, expected);
    assert_eq!(chunks.skipped().len(), 1);
    assert_eq!(chunks.skipped()[0].offset, ends[0] as u64);
    assert_eq!(chunks.skipped()[0].kind, TailKind::Damaged);
    assert!(
        chunks.tail().is_none(),
        "the rest of the file was read cleanly"
    );

    // A clean file has nothing to resync from.
    let file = RankFile::from_bytes(bytes, "clean.evf").unwrap();
    let mut chunks = file.chunks();
    assert_eq!(chunks.by_ref().count(), groups.len());
    assert_eq!(chunks.resync(), None);
}
