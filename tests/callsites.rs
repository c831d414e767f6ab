//! Call sites (`evenflush run --callsites`, `evenflush report --callsites`) on real `mpirun` jobs
//! under Open MPI and MPICH: every site must resolve to a source line that calls that very MPI
//! function, and the per-site calls must add up to the trace's calls.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{Mpi, mpi_lock, read_trace, run_traced, scratch};
use format::{Event, NO_SITE};

fn report_sites(dir: &Path) -> serde_json::Value {
    let out = Command::new(common::evenflush_bin())
        .args(["report", "--json", "--callsites"])
        .arg(dir)
        .output()
        .expect("run evenflush report");
    assert!(
        out.status.success(),
        "report --callsites failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    json["callsites"].clone()
}

/// The line `file:line` names, read from the source.
fn source_line(place: &str) -> String {
    let (file, line) = place.rsplit_once(':').expect("file:line");
    let line: usize = line.parse().expect("a line number");
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines()
        .nth(line - 1)
        .unwrap_or_else(|| panic!("{place}: no such line"))
        .to_string()
}

/// Every site of `program` resolves to a line of its source that calls the site's function, and
/// the sites account for every call the trace holds a site for.
fn check_program(mpi: Mpi, program: &str, source: &str, ranks: u32, args: &[&str]) {
    let out = scratch(&format!("callsites-{program}-{}", mpi.name()));
    run_traced(mpi, ranks, program, args, &out, &["--callsites"]);
    let sites = report_sites(&out);
    let list = sites["sites"].as_array().expect("sites");
    assert!(!list.is_empty(), "{program}: no call sites");
    let mut per_function: HashMap<String, u64> = HashMap::new();
    for s in list {
        let function = s["function"].as_str().unwrap();
        let place = s["line"]
            .as_str()
            .unwrap_or_else(|| panic!("{program}: {function} site not resolved: {s}"));
        assert!(
            place.contains(source),
            "{program}: {function} resolved into {place}, not {source}"
        );
        // Fortran spells MPI_Send as mpi_send, MPI_SEND or MPI_Send.
        let line = source_line(place).to_ascii_lowercase();
        assert!(
            line.contains(&function.to_ascii_lowercase()),
            "{program} ({}): the {function} site is {place}, whose line is {line:?}",
            mpi.name()
        );
        *per_function.entry(function.to_string()).or_default() += s["calls"].as_u64().unwrap();
    }
    // Against the trace itself: the calls that carry a site, per function.
    let mut in_trace: HashMap<String, u64> = HashMap::new();
    let mut without = 0u64;
    for r in read_trace(&out) {
        for e in r.all() {
            if let Event::Call(c) = e {
                if c.site == NO_SITE {
                    without += 1;
                } else {
                    *in_trace.entry(r.name(c.func).to_string()).or_default() += 1;
                }
            }
        }
    }
    assert_eq!(per_function, in_trace, "{program} ({})", mpi.name());
    assert_eq!(
        sites["calls_with_site"].as_u64().unwrap(),
        in_trace.values().sum::<u64>()
    );
    // MPI_Init and MPI_Finalize have no site; polls folded into runs neither.
    assert!(
        sites["calls_without_site"].as_u64().unwrap() >= without,
        "{program}: {sites}"
    );
}

fn callsites(mpi: Mpi) {
    let _guard = mpi_lock();
    check_program(mpi, "collectives", "collectives.c", 4, &["--rounds", "3"]);
    check_program(mpi, "halo", "halo.c", 4, &["--iterations", "50"]);
    check_program(mpi, "fortran_ring", "fortran_ring.f90", 2, &[]);
    check_program(mpi, "fortran_f08", "fortran_f08.f90", 2, &[]);

    // Off by default: a trace recorded without the setting has no site at all.
    let out = scratch(&format!("callsites-off-{}", mpi.name()));
    run_traced(mpi, 2, "ring", &[], &out, &[]);
    let sites = report_sites(&out);
    assert_eq!(sites["calls_with_site"].as_u64(), Some(0), "{sites}");
    assert!(sites["calls_without_site"].as_u64().unwrap() > 0);
}

for_both_mpis!(callsites);
