//! `evenflush reconstruct`'s output on the command line, on synthetic traces (no MPI): the same
//! bytes for any `--threads`, and a full disk under `--out` reported as an error naming the file,
//! never a hang or a partial success.

mod common;
// The trace writer is the reconstruct tests'.
#[path = "../reconstruct/tests/common/mod.rs"]
mod traces;

use std::path::Path;
use std::process::Command;

use common::rank_files;
use traces::{RankTrace, shifted_program, temp_dir, write_trace};

fn reconstruct(trace: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_evenflush"))
        .arg("reconstruct")
        .arg(trace)
        .arg("--out")
        .arg(out)
        .args(["--remove", "both", "--json"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn any_number_of_threads_writes_the_same_bytes() {
    let trace = temp_dir("cli-threads");
    write_trace(&trace, 5, &shifted_program(5, 300, |_, _| 0, |_| 0), 37);
    let mut first = None;
    for threads in ["1", "2", "4"] {
        let out = trace.with_extension(format!("out{threads}"));
        let run = reconstruct(&trace, &out, &["--threads", threads]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let files = rank_files(&out);
        assert_eq!(files.len(), 5);
        match &first {
            None => first = Some(files),
            Some(f) => assert!(files == *f, "--threads {threads} wrote other bytes"),
        }
        std::fs::remove_dir_all(out).unwrap();
    }
    std::fs::remove_dir_all(trace).unwrap();
}

#[test]
fn a_full_disk_under_out_is_an_error_naming_the_file() {
    let trace = temp_dir("cli-full");
    // The halo generator's jittered times: ~360 000 events, far more output than the 32 KiB the
    // tmpfs holds.
    let ranks: Vec<RankTrace> = (0..4)
        .map(|rank| RankTrace {
            rank,
            ticks_per_sec: 1e9,
            streams: vec![(
                0,
                format::synthetic::events(&format::synthetic::HaloConfig {
                    world_size: 4,
                    rank,
                    iterations: 5_000,
                    ticks_per_sec: 1e9,
                    ..Default::default()
                }),
            )],
        })
        .collect();
    write_trace(&trace, 4, &ranks, 4_000);
    let mount = trace.with_extension("tmpfs");
    std::fs::create_dir_all(&mount).unwrap();
    if !common::mount_small_tmpfs(&mount, "a_full_disk_under_out") {
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    let _unmount = Unmount(&mount);
    for extra in [&["--threads", "2"][..], &["--hb"][..]] {
        let out = mount.join("out");
        let run = reconstruct(&trace, &out, extra);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("writing ")
                && stderr.contains("rank-0000")
                && stderr.contains("No space left"),
            "{extra:?}: {stderr}"
        );
        assert!(run.stdout.is_empty(), "no summary after a failed write");
        let _ = std::fs::remove_dir_all(&out);
    }
    std::fs::remove_dir_all(trace).unwrap();
}
