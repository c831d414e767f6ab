//! `evenflush reconstruct --hb` on 4096 ranks, with fewer open files allowed than there are ranks
//! (`ulimit -n 256`), on two threads: every event written, every message of a synthetic halo
//! exchange matched, one output file per rank. (`info`, `report` and the exports at this scale:
//! reconstruct/tests/many_ranks.rs.)

// The trace writer is the reconstruct tests'.
#[path = "../reconstruct/tests/common/mod.rs"]
mod traces;

use std::path::Path;
use std::process::Command;

use format::Event;
use format::synthetic::FUNC_ISEND;
use traces::{matched_halo, temp_dir, write_trace};

const RANKS: u32 = 4096;

/// Runs `evenflush args…` under `ulimit -n 256`, returning stdout and stderr.
fn run_few_files(args: &[&str]) -> (String, String) {
    let script = format!(
        "ulimit -n 256 && exec \"$0\" {}",
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_evenflush"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "evenflush {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.contains("no clock samples"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn evenflush_few_files(args: &[&str]) -> String {
    run_few_files(args).0
}

#[test]
fn reconstruct_4096_ranks_with_256_open_files() {
    let dir = temp_dir("4096");
    let ranks = matched_halo(RANKS, 3);
    let total: u64 = ranks.iter().map(|r| r.streams[0].1.len() as u64).sum();
    let sends = ranks
        .iter()
        .flat_map(|r| &r.streams[0].1)
        .filter(|e| matches!(e, Event::Call(c) if c.func == FUNC_ISEND))
        .count() as u64;
    write_trace(&dir, RANKS, &ranks, 1_000);
    drop(ranks);
    let d = dir.to_str().unwrap();

    let out = dir.with_extension("out");
    let summary: serde_json::Value = serde_json::from_str(&evenflush_few_files(&[
        "reconstruct",
        d,
        "--out",
        out.to_str().unwrap(),
        "--hb",
        "--threads",
        "2",
        "--json",
    ]))
    .unwrap();
    assert_eq!(summary["events"].as_u64(), Some(total));
    let hb = &summary["hb"]["before"];
    assert_eq!(hb["messages"].as_u64(), Some(sends), "{hb}");
    assert_eq!(hb["unmatched_receives"].as_u64(), Some(0), "{hb}");
    assert_eq!(hb["unmatched_sends"].as_u64(), Some(0), "{hb}");
    // Every rank exits every Allreduce: 3 iterations.
    assert_eq!(
        hb["collective_exits"].as_u64(),
        Some(3 * u64::from(RANKS)),
        "{hb}"
    );
    assert_eq!(summary["hb"]["violations_after"].as_u64(), Some(0));
    assert_eq!(
        std::fs::read_dir(&out)
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "evf"))
            .count(),
        RANKS as usize
    );

    for p in [&dir, &out] {
        std::fs::remove_dir_all(p).unwrap();
    }
    let _: &Path = &dir;
}
