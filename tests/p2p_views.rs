//! The views that count point-to-point messages without the happened-before matching see every
//! message tests/programs/matching.c makes, under Open MPI and MPICH: the messages of persistent
//! requests (sent by each `Start`/`Startall`, described by the request's `*_init`), of matched
//! probes (`Mrecv`/`Imrecv`, whose communicator is their probe's) and of the large-count `_c`
//! functions (where the MPI has them) as well as the plain ones.
//! - `evenflush report --json`: the partners' messages and bytes are the program's;
//! - the OTF2 export: as many send records (`MpiSend`, `MpiIsend`) and receive records (`MpiRecv`,
//!   `MpiIrecv`) as messages, read back with the OTF2 project's Python reader
//!   (tests/otf2_records.py), and each (communicator, source, destination, tag) sent as often as
//!   received.

#[macro_use]
mod common;

use std::path::Path;
use std::process::Command;

use common::{Mpi, check, evenflush_bin, mpi_lock, run_traced_output, scratch};

const RANKS: u64 = 4;
const ITERATIONS: u64 = 20;

/// Records matching.c; its messages and their bytes (the formulas of its header comment).
fn record(mpi: Mpi, name: &str) -> (std::path::PathBuf, u64, u64) {
    let dir = scratch(&format!("p2p-{name}-{}", mpi.name()));
    let iterations = ITERATIONS.to_string();
    let output = run_traced_output(
        mpi,
        RANKS as u32,
        "matching",
        &["--iterations", &iterations],
        &dir,
        &["--mode", "off"],
    );
    let output = check(output, &format!("traced matching ({})", mpi.name()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let large = if stdout.contains("large=1") {
        1
    } else {
        assert!(stdout.contains("large=0"), "{stdout}");
        0
    };
    let pn = RANKS * ITERATIONS;
    (dir, (9 + 2 * large) * pn, (72 + 16 * large) * pn)
}

fn report_partners_count_every_message(mpi: Mpi) {
    let _guard = mpi_lock();
    let (dir, messages, bytes) = record(mpi, "report");
    let out = Command::new(evenflush_bin())
        .args(["report", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    let out = check(out, "evenflush report --json");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let pairs = report["partners"].as_array().expect("partners");
    let total = |field: &str| -> u64 { pairs.iter().map(|p| p[field].as_u64().unwrap()).sum() };
    eprintln!(
        "{}: partners {} messages, {} bytes",
        mpi.name(),
        total("messages"),
        total("bytes")
    );
    assert_eq!(total("messages"), messages, "{pairs:?}");
    assert_eq!(total("bytes"), bytes, "{pairs:?}");
}

fn otf2_has_every_message_once_each_side(mpi: Mpi) {
    let _guard = mpi_lock();
    let (dir, messages, _) = record(mpi, "otf2");
    let archive = dir.with_extension("otf2");
    if !common::export_otf2(&dir, &archive) {
        return;
    }
    let Some(read) = read_archive(&archive.join("traces.otf2")) else {
        return;
    };
    let events = |kind: &str| read["events"][kind].as_u64().unwrap_or(0);
    let sends = events("MpiSend") + events("MpiIsend");
    let receives = events("MpiRecv") + events("MpiIrecv");
    eprintln!(
        "{}: {} MpiSend + {} MpiIsend, {} MpiRecv + {} MpiIrecv, {} messages",
        mpi.name(),
        events("MpiSend"),
        events("MpiIsend"),
        events("MpiRecv"),
        events("MpiIrecv"),
        messages
    );
    assert_eq!(sends, messages, "send records: {}", read["events"]);
    assert_eq!(receives, messages, "receive records: {}", read["events"]);
    // Every started send request completes: its MpiIsend has its MpiIsendComplete.
    assert_eq!(
        events("MpiIsendComplete"),
        events("MpiIsend"),
        "{}",
        read["events"]
    );
    assert_eq!(
        events("MpiIrecvRequest"),
        events("MpiIrecv"),
        "{}",
        read["events"]
    );
    let p2p = &read["p2p"];
    assert_eq!(
        p2p["sends"], p2p["receives"],
        "sends and receives per comm:source:dest:tag"
    );
    assert!(
        p2p["sends"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.contains("-1")),
        "a peer outside its communicator: {}",
        p2p["sends"]
    );
}

/// The archive as tests/otf2_records.py reads it (`None`: the reader is not installed, and the
/// test may skip).
fn read_archive(anchor: &Path) -> Option<serde_json::Value> {
    let py = match Command::new("/usr/bin/python3")
        .arg(common::repo_root().join("tests/otf2_records.py"))
        .arg(anchor)
        .output()
    {
        Ok(py) => py,
        Err(e) => {
            common::skip_or_fail("otf2", &format!("/usr/bin/python3: {e}"));
            return None;
        }
    };
    if !py.status.success()
        && String::from_utf8_lossy(&py.stderr).contains("No module named 'otf2'")
    {
        common::skip_or_fail("otf2", "python3-otf2 is not installed");
        return None;
    }
    let py = check(py, "tests/otf2_records.py");
    Some(serde_json::from_slice(&py.stdout).expect("JSON from the reader"))
}

for_both_mpis!(
    report_partners_count_every_message,
    otf2_has_every_message_once_each_side
);
