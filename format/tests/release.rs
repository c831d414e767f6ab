//! A walk that releases the bytes behind it (`ChunkWalk::releasing`) reads the same events as one
//! that does not, and does not keep the mapped file resident: reconstruct walks every rank file
//! of a trace at once, and a mapped file's pages otherwise stay in its resident set to the end
//! (about 3 bytes per event, 2.7 GiB at 10^9 events).

mod common;

use common::*;
use format::*;

/// KiB of `path`'s mappings in this process whose pages are present (`/proc/self/pagemap`): exact
/// per page, where `RssFile` in `/proc/self/status` is a counter that can lag what is mapped.
fn resident_kib(path: &std::path::Path) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let name = path.to_str().expect("path");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").expect("/proc/self/pagemap");
    let mut kib = 0;
    for line in maps.lines().filter(|l| l.ends_with(name)) {
        let range = line.split_whitespace().next().expect("range");
        let (a, b) = range.split_once('-').expect("range");
        let a = u64::from_str_radix(a, 16).expect("hex");
        let b = u64::from_str_radix(b, 16).expect("hex");
        let mut entries = vec![0u8; ((b - a) / 4096 * 8) as usize];
        pagemap.seek(SeekFrom::Start(a / 4096 * 8)).expect("seek");
        pagemap.read_exact(&mut entries).expect("pagemap");
        let present = entries
            .chunks_exact(8)
            .filter(|e| u64::from_le_bytes((*e).try_into().expect("8 bytes")) >> 63 == 1)
            .count();
        kib += present as u64 * 4;
    }
    kib
}

fn walk_all(file: &RankFile, stream: u32, releasing: bool) -> Vec<Event> {
    let files = std::slice::from_ref(file);
    let walk = ChunkWalk::stream(files, stream);
    let walk = if releasing { walk.releasing() } else { walk };
    let mut events = Vec::new();
    for chunk in walk {
        events.extend(chunk.events());
    }
    events
}

#[test]
fn a_releasing_walk_reads_the_same_and_leaves_the_file_unmapped() {
    // Uncompressed chunks, so that the file is large (tens of MiB) and its pages count.
    let iterations = 2_000;
    let groups: Vec<Vec<Event>> = (0..120)
        .map(|_| {
            synthetic::events(&synthetic::HaloConfig {
                iterations,
                ..Default::default()
            })
        })
        .collect();
    let (bytes, _) = write_file(&groups, None);
    let path = std::env::temp_dir().join(format!("evf-release-{}.evf", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let size_kib = bytes.len() as u64 / 1024;
    assert!(size_kib > 20 * 1024, "{size_kib} KiB: too small to see");

    let resident_after = |releasing: bool| {
        let file = RankFile::open(&path).unwrap();
        let events: Vec<Vec<Event>> = (0..3).map(|s| walk_all(&file, s, releasing)).collect();
        (events, resident_kib(&path))
    };
    let (released, released_kib) = resident_after(true);
    let (kept, kept_kib) = resident_after(false);
    std::fs::remove_file(&path).unwrap();

    assert_eq!(released, kept, "a releasing walk read other events");
    assert_eq!(
        released.iter().map(Vec::len).sum::<usize>(),
        groups.iter().map(Vec::len).sum::<usize>()
    );
    // Without releasing, the walks leave most of the file resident: the check can fail.
    assert!(
        kept_kib > size_kib / 2,
        "a plain walk left {kept_kib} of {size_kib} KiB resident"
    );
    assert!(
        released_kib < size_kib / 8,
        "a releasing walk left {released_kib} of {size_kib} KiB resident"
    );
}

/// Reconstruct holds every lane's current chunk open at once; what it keeps mapped must be about
/// the block being read, not the chunk nor what a fault maps around it (fault-around, a large
/// folio): else the whole trace stays resident when each rank's file is one chunk or a few.
#[test]
fn a_chunk_being_read_keeps_only_its_current_block_resident() {
    let events = synthetic::events(&synthetic::HaloConfig {
        iterations: 60_000,
        ..Default::default()
    });
    // Compressed, as traces are: each block is faulted in, decompressed, and done with.
    let (bytes, _) = write_file(std::slice::from_ref(&events), Some(1));
    let path = std::env::temp_dir().join(format!("evf-release-one-{}.evf", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let size_kib = bytes.len() as u64 / 1024;
    assert!(size_kib > 1024, "{size_kib} KiB: too small to see");

    // Most resident at any eighth of the way through the chunk.
    let most_resident = |releasing: bool| {
        let file = RankFile::open(&path).unwrap();
        let files = std::slice::from_ref(&file);
        let walk = ChunkWalk::stream(files, 0);
        let mut walk = if releasing { walk.releasing() } else { walk };
        let chunk = walk.next().expect("one chunk");
        assert_eq!(chunk.event_count() as usize, events.len(), "one chunk");
        let mut most = resident_kib(&path);
        let mut reading = chunk.into_events();
        let mut read = Vec::new();
        for _ in 0..8 {
            read.extend(reading.by_ref().take(events.len().div_ceil(8)));
            most = most.max(resident_kib(&path));
        }
        read.extend(reading);
        (read, most)
    };
    let (released, released_most) = most_resident(true);
    let (kept, kept_most) = most_resident(false);
    std::fs::remove_file(&path).unwrap();

    assert_eq!(released, events, "a releasing walk read other events");
    assert_eq!(kept, events);
    // Checking the chunk on reading it touches all its pages: a walk that does not release
    // keeps them, so the check below can fail.
    assert!(
        kept_most > size_kib / 2,
        "a plain walk left {kept_most} of {size_kib} KiB resident"
    );
    assert!(
        released_most < 64,
        "reading its chunk, a releasing walk left up to {released_most} of {size_kib} KiB resident"
    );
}
