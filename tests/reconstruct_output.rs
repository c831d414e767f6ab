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
                && stderr.matches("No space left").count() == 1,
            "{extra:?}: {stderr}"
        );
        assert!(run.stdout.is_empty(), "no summary after a failed write");
        let _ = std::fs::remove_dir_all(&out);
    }
    std::fs::remove_dir_all(trace).unwrap();
}

fn evenflush(args: &[&str], trace: &Path) -> (Option<i32>, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_evenflush"))
        .args(args)
        .arg(trace)
        .output()
        .unwrap();
    (
        run.status.code(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

/// A rank file that cannot be read fails every command naming the file and its cause, once: the
/// cause was printed twice (the message ended with it, and the chain added it again), and a rank
/// file that is a directory read "No such device" (what mapping one returns).
#[test]
fn an_unreadable_rank_file_is_named_with_its_cause_once() {
    let trace = temp_dir("cli-unreadable");
    write_trace(&trace, 3, &shifted_program(3, 20, |_, _| 0, |_| 0), 37);
    let victim = trace.join(format::rank_file_name(1, 0));
    std::fs::remove_file(&victim).unwrap();
    std::fs::create_dir(&victim).unwrap();
    let out = trace.with_extension("out");
    let out_arg = out.to_str().unwrap();
    for args in [
        &["info"][..],
        &["report"][..],
        &["reconstruct", "--out", out_arg][..],
        &["export", "--format", "perfetto", "--out", "/dev/null"][..],
    ] {
        let (code, stderr) = evenflush(args, &trace);
        assert_ne!(code, Some(0), "{args:?}: {stderr}");
        let said = format!("{}: is a directory", victim.display());
        assert_eq!(stderr.matches(&said).count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("No such device"), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&out);
    std::fs::remove_dir(&victim).unwrap();

    // A write's cause, once too (the export's own I/O error).
    if Path::new("/dev/full").exists() {
        write_trace(&trace, 3, &shifted_program(3, 20, |_, _| 0, |_| 0), 37);
        let (code, stderr) = evenflush(
            &["export", "--format", "perfetto", "--out", "/dev/full"],
            &trace,
        );
        assert_ne!(code, Some(0), "{stderr}");
        assert_eq!(stderr.matches("No space left").count(), 1, "{stderr}");
    }
    std::fs::remove_dir_all(trace).unwrap();
}
