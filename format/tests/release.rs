//! A walk that releases the bytes behind it (`ChunkWalk::releasing`) reads the same events as one
//! that does not, and does not keep the mapped file resident: reconstruct walks every rank file
//! of a trace at once, and a mapped file's pages otherwise stay in its resident set to the end
//! (about 3 bytes per event, 2.7 GiB at 10^9 events).

mod common;

use common::*;
use format::*;

/// This process's resident pages that map files, in KiB.
fn rss_file_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("RssFile:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssFile in /proc/self/status")
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
        let before = rss_file_kib();
        let events: Vec<Vec<Event>> = (0..3).map(|s| walk_all(&file, s, releasing)).collect();
        let grown = rss_file_kib().saturating_sub(before);
        (events, grown)
    };
    let (released, released_grown) = resident_after(true);
    let (kept, kept_grown) = resident_after(false);
    std::fs::remove_file(&path).unwrap();

    assert_eq!(released, kept, "a releasing walk read other events");
    assert_eq!(
        released.iter().map(Vec::len).sum::<usize>(),
        groups.iter().map(Vec::len).sum::<usize>()
    );
    // Without releasing, the walks leave most of the file resident: the check can fail.
    assert!(
        kept_grown > size_kib / 2,
        "a plain walk left {kept_grown} of {size_kib} KiB resident"
    );
    assert!(
        released_grown < size_kib / 8,
        "a releasing walk left {released_grown} of {size_kib} KiB resident"
    );
}
