//! A real application nobody here wrote: Debian's LAMMPS (`lmp`, built with Open MPI only), a
//! Lennard-Jones melt on 2 ranks, traced with flushes. What `reconstruct --hb` and
//! `reconstruct --model replay` write must match as the trace did: the same messages and
//! collective exits, none unmatched, and no violation left.

#[macro_use]
mod common;

use std::process::Command;

use common::{Mpi, check, evenflush_bin, mpi_env, mpi_lock, output_with_timeout, scratch};

/// A small Lennard-Jones melt (`workloads/melt.lammps`: reduced units, 4000 atoms, 300 steps):
/// neighbour-list rebuilds and atom migration between the two ranks' halves of the box every few
/// steps, thermodynamic reductions every 50. The file has no comment lines: LAMMPS broadcasts
/// every input line, which would add start-up collectives to every run of the file.
const MELT: &str = include_str!("../workloads/melt.lammps");

#[test]
fn lammps_output_matches_as_its_trace_did() {
    let Ok(lmp) = which("lmp") else {
        common::skip_or_fail("lammps", "Debian's `lammps` (lmp) is not installed");
        return;
    };
    let _guard = mpi_lock();
    let dir = scratch("lammps");
    let input = dir.join("in.melt");
    std::fs::write(&input, MELT).unwrap();
    let trace = dir.join("trace");
    let mut cmd = Command::new(evenflush_bin());
    cmd.current_dir(&dir)
        .arg("run")
        .arg("--out")
        .arg(&trace)
        // A decision at every eligible collective: with the default interval (100 ms) whether
        // this short run flushes at all depended on where its decision points fell.
        .args(["--threshold", "16KiB", "--decision-interval", "0", "--"])
        .args(Mpi::OpenMpi.launch(2))
        .arg(&lmp)
        .arg("-in")
        .arg(&input)
        .args(["-log", "none", "-screen", "none"]);
    let output = output_with_timeout(mpi_env(&mut cmd), common::JOB_TIMEOUT, "traced LAMMPS");
    check(output, "traced LAMMPS");
    for model in [&["--hb"][..], &["--model", "replay"][..]] {
        let out = dir.join(format!("out-{}", model.len()));
        let output = Command::new(evenflush_bin())
            .arg("reconstruct")
            .arg(&trace)
            .args(["--remove", "both", "--json", "--out"])
            .arg(&out)
            .args(model)
            .output()
            .unwrap();
        let output = check(output, "evenflush reconstruct");
        let s: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let hb = &s["hb"];
        let (before, after) = (&hb["before"], &hb["after"]);
        assert!(
            s["suspensions"]["flushes"].as_u64().unwrap() > 0,
            "{model:?}: no flush, the case tests less than it says: {s}"
        );
        assert!(
            before["messages"].as_u64().unwrap() > 1000,
            "{model:?}: {hb}"
        );
        for key in [
            "messages",
            "collective_exits",
            "unmatched_sends",
            "unmatched_receives",
            "waits_on_absent_ranks",
        ] {
            assert_eq!(before[key], after[key], "{model:?} {key}: {hb}");
        }
        assert_eq!(before["unmatched_sends"], 0, "{model:?}: {hb}");
        assert_eq!(before["unmatched_receives"], 0, "{model:?}: {hb}");
        assert_eq!(hb["violations_recorded"], 0, "{model:?}: {hb}");
        assert_eq!(hb["violations_after"], 0, "{model:?}: {hb}");
    }
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(program))
                .find(|p| p.is_file())
        })
        .ok_or(())
}
