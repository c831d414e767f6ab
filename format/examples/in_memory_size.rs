//! Bytes a recorded trace's MPI events take in the recorder's buffer (`RawBuf`), by re-encoding
//! each thread's events as the recorder did: the in-memory figure of paper-notes/format.md.
//! `cargo run --release -p format --example in_memory_size -- DIR`

use std::collections::BTreeMap;

use format::{Event, RankFile, RawBuf};

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: in_memory_size TRACE_DIR");
        std::process::exit(2);
    };
    let listing = match format::list_dir(&dir) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("in_memory_size: {dir}: {e}");
            std::process::exit(1);
        }
    };
    let mut by_rank: BTreeMap<u32, Vec<format::RankPart>> = BTreeMap::new();
    for part in listing.parts() {
        by_rank.entry(part.rank()).or_default().push(part);
    }
    let (mut mpi_events, mut mpi_bytes, mut calls, mut polls, mut folded) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for mut parts in by_rank.into_values() {
        parts.sort_by_key(|p| p.part());
        let files: Vec<RankFile> = parts.iter().filter_map(|p| p.open().ok()).collect();
        // One buffer per thread, as the recorder keeps them; only MPI records are pushed.
        let mut streams: BTreeMap<u32, RawBuf> = BTreeMap::new();
        for chunk in format::ChunkWalk::new(&files) {
            let buf = streams.entry(chunk.stream()).or_default();
            for e in chunk.events() {
                match &e {
                    Event::Call(_) | Event::Completion(_) | Event::Polls(_) => {
                        mpi_events += 1;
                        if let Event::Call(_) = e {
                            calls += 1;
                        }
                        if let Event::Polls(p) = &e {
                            polls += 1;
                            folded += p.count;
                        }
                        buf.push_event(&e);
                    }
                    _ => {}
                }
            }
        }
        mpi_bytes += streams.values().map(|b| b.bytes() as u64).sum::<u64>();
    }
    println!(
        "{dir}: {mpi_events} MPI records ({calls} calls, {polls} poll runs holding {folded} polls); \
         {:.2} bytes per MPI record in memory",
        mpi_bytes as f64 / mpi_events.max(1) as f64
    );
}
