//! Prints what a trace directory holds, one fact per line, for scripted checks:
//! `rank <r> call <MPI_Name> <count> <bytes>`, `rank <r> completions <n> <bytes>`,
//! `rank <r> marker <Kind> <n>`, `rank <r> commdefs <n>`, `rank <r> user <n>`, `rank <r> streams <n>`,
//! `rank <r> mean_cost_ns <x>`, `rank <r> call_cost_ns <x>` (the mean over calls charged less
//! than 100 µs: without the first call after `MPI_Init`, which carries the recorder's start-up),
//! `rank <r> polls <n> poll_cost_ns <x>` (folded polls that found nothing, and the cost stored per
//! poll: the cost between the polls and after the last one, over the polls).
//!
//! Usage: cargo run -p recorder --example evf_count -- <trace dir>

use std::collections::BTreeMap;

use format::{Event, Marker, RankFile};

fn marker_name(m: &Marker) -> &'static str {
    match m {
        Marker::LocalFlush { .. } => "LocalFlush",
        Marker::RecordingStopped { .. } => "RecordingStopped",
        Marker::Lost { .. } => "Lost",
        Marker::AbnormalEnd { .. } => "AbnormalEnd",
        Marker::InitDone { .. } => "InitDone",
        Marker::FinalizeStart { .. } => "FinalizeStart",
        Marker::Stuck { .. } => "Stuck",
        Marker::Compressed { .. } => "Compressed",
        Marker::MemoryLow { .. } => "MemoryLow",
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: evf_count <trace dir>")?;
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "evf"))
        .collect();
    files.sort();
    for path in files {
        let file = RankFile::open(&path)?;
        let rank = file.header().rank;
        let tps = file.header().clock.ticks_per_sec;
        let mut names = BTreeMap::new();
        let mut calls: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut markers: BTreeMap<&str, u64> = BTreeMap::new();
        let (mut completions, mut completion_bytes, mut commdefs, mut user, mut cost, mut ncost) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let mut streams = std::collections::BTreeSet::new();
        let mut small = (0u64, 0u64);
        let (mut polls, mut poll_cost) = (0u64, 0u64);
        for chunk in file.chunks() {
            let chunk = chunk?;
            streams.insert(chunk.stream());
            for e in chunk.events() {
                match e {
                    Event::FunctionDef { id, name } => {
                        names.insert(id, name);
                    }
                    Event::Call(c) => {
                        let name = names
                            .get(&c.func)
                            .cloned()
                            .unwrap_or_else(|| format!("#{}", c.func));
                        let entry = calls.entry(name).or_default();
                        entry.0 += 1;
                        entry.1 += c.bytes;
                        cost += c.cost as u64;
                        ncost += 1;
                        if (c.cost as f64) < 100e-6 * tps {
                            small.0 += c.cost as u64;
                            small.1 += 1;
                        }
                    }
                    Event::Completion(c) => {
                        completions += 1;
                        completion_bytes += c.bytes;
                    }
                    Event::Polls(p) => {
                        polls += p.count;
                        poll_cost += p.inner_cost + u64::from(p.cost);
                    }
                    Event::Marker(m) => *markers.entry(marker_name(&m)).or_default() += 1,
                    Event::CommDef { .. } => commdefs += 1,
                    Event::User(_) | Event::Region(_) => user += 1,
                    _ => {}
                }
            }
        }
        for (name, (n, bytes)) in &calls {
            println!("rank {rank} call {name} {n} {bytes}");
        }
        println!("rank {rank} completions {completions} {completion_bytes}");
        for (m, n) in &markers {
            println!("rank {rank} marker {m} {n}");
        }
        println!("rank {rank} commdefs {commdefs}");
        println!("rank {rank} user {user}");
        println!("rank {rank} streams {}", streams.len());
        if ncost > 0 {
            println!(
                "rank {rank} mean_cost_ns {:.1}",
                cost as f64 / ncost as f64 / tps * 1e9
            );
        }
        if polls > 0 {
            println!(
                "rank {rank} polls {polls} poll_cost_ns {:.1}",
                poll_cost as f64 / polls as f64 / tps * 1e9
            );
        }
        if small.1 > 0 {
            println!(
                "rank {rank} call_cost_ns {:.1}",
                small.0 as f64 / small.1 as f64 / tps * 1e9
            );
        }
    }
    Ok(())
}
