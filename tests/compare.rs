//! `evenflush compare` on the command line, on synthetic traces (no MPI): several references,
//! the tolerance flags, and the table and JSON both carrying the bias, the per-rank figures and
//! the noise floor.

// The trace writer and the program variants with known differences are the reconstruct tests'.
#[path = "../reconstruct/tests/common/mod.rs"]
mod traces;

use std::path::Path;
use std::process::Command;

use traces::{RankTrace, shifted_program, temp_dir, write_trace};

fn evenflush(args: &[&str], dirs: &[&Path]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_evenflush"))
        .args(args)
        .args(dirs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "evenflush {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn write(name: &str, ranks: &[RankTrace]) -> traces::TempDir {
    let dir = temp_dir(&format!("cli-{name}"));
    write_trace(&dir, ranks.len() as u32, ranks, 25);
    dir
}

#[test]
fn several_references_a_tolerance_and_both_outputs() {
    // Rank 1's calls 6 µs shorter in the run; the second reference 1 µs longer everywhere.
    let ref1 = write("ref1", &shifted_program(2, 40, |_, _| 0, |_| 0));
    let ref2 = write("ref2", &shifted_program(2, 40, |_, _| 1_000, |_| 0));
    let run = write(
        "run",
        &shifted_program(2, 40, |r, _| if r == 1 { -6_000 } else { 0 }, |_| 0),
    );

    let out = evenflush(
        &[
            "compare",
            "--json",
            "--tolerance",
            "8%",
            "--tolerance-floor",
            "2us",
        ],
        &[&ref1, &ref2, &run],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tolerance"]["relative"].as_f64(), Some(0.08), "{v}");
    assert_eq!(v["tolerance"]["floor_ns"].as_u64(), Some(2_000), "{v}");
    assert_eq!(v["reference"].as_str(), Some(ref1.to_str().unwrap()));
    // Rank 1's sends: 6 µs of 100 µs, within 8 %; its barriers: 6 µs of 10 µs, outside.
    assert_eq!(
        v["per_function"]["MPI_Send"]["within_tolerance"], 1.0,
        "{v}"
    );
    assert_eq!(v["per_function"]["MPI_Barrier"]["within_tolerance"], 0.5);
    let ranks = v["per_rank"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    assert_eq!(ranks[0]["bias_us"]["mean_us"], 0.0, "{v}");
    let r1 = ranks[1]["bias_us"]["mean_us"].as_f64().unwrap();
    assert!((r1 + 6.0).abs() < 1e-9, "{v}");
    assert!((v["bias_us"]["mean_us"].as_f64().unwrap() + 3.0).abs() < 1e-9);
    let noise = &v["noise_floor"];
    assert!((noise["bias_mean_us"]["floor"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    assert_eq!(noise["bias_mean_us"]["beyond"], true, "{noise}");
    assert_eq!(noise["run_against"].as_array().unwrap().len(), 2);

    // The same with the second reference given by flag, as a table.
    let out = evenflush(
        &["compare", "--reference", ref2.to_str().unwrap()],
        &[&ref1, &run],
    );
    let table = String::from_utf8(out.stdout).unwrap();
    for want in [
        "tolerance 5 % of the reference call's duration, at least 1 µs",
        "bias RUN − REF median",
        "per rank",
        "noise floor: 2 references",
        "beyond the noise",
        "fixed limits: within 10 µs",
    ] {
        assert!(table.contains(want), "no {want:?} in\n{table}");
    }
    let rank1 = table
        .lines()
        .find(|l| l.trim_start().starts_with("1 ") && l.contains('%'))
        .unwrap_or_else(|| panic!("no line for rank 1 in\n{table}"));
    assert!(rank1.contains("-6.000"), "{rank1}");

    // A run alone is refused with the usage it needs.
    let lone = Command::new(env!("CARGO_BIN_EXE_evenflush"))
        .arg("compare")
        .arg(&run)
        .output()
        .unwrap();
    assert!(!lone.status.success());
    assert!(
        String::from_utf8_lossy(&lone.stderr).contains("needs a reference"),
        "{}",
        String::from_utf8_lossy(&lone.stderr)
    );
    for d in [ref1, ref2, run] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
