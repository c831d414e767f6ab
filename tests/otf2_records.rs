//! The OTF2 export's one-sided, MPI-IO and communicator records on real `mpirun` jobs under Open MPI
//! and MPICH: tests/programs/rma_io.c (windows, puts, gets, atomics, fences, locks, request-based
//! operations, MPI-IO of every blocking kind, split communicators, a duplicate and an
//! intercommunicator) is traced, exported, checked by `otf2-print -Werror`, and read back with the
//! OTF2 project's Python reader (tests/otf2_records.py). Record counts must equal the calls in the
//! trace; the definitions must have the structure Scalasca reads (see
//! reconstruct/src/export/otf2_comms.rs).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Mpi, check, mpi_env, mpi_lock, output_with_timeout, programs, read_trace, scratch};
use format::Event;

/// Calls per function name in the trace, and point-to-point sends with a real peer.
/// The calls per function (one-sided ones to no process apart), the point-to-point sends, the
/// ranks doing MPI-IO, and the bytes blocking collectives received (`MpiCall::recv_bytes`).
fn trace_calls(dir: &Path) -> (BTreeMap<String, u64>, u64, BTreeSet<u32>, u64) {
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut sends = 0;
    let mut collective_received = 0;
    let mut io_ranks = BTreeSet::new();
    for r in read_trace(dir) {
        for e in r.all() {
            if let Event::Call(c) = e {
                let name = r.name(c.func).trim_end_matches("_c").to_string();
                let to_peer = c.peer >= 0;
                if to_peer
                    && matches!(
                        name.as_str(),
                        "MPI_Send" | "MPI_Isend" | "MPI_Sendrecv" | "MPI_Ssend"
                    )
                {
                    sends += 1;
                }
                if name == "MPI_File_open" {
                    io_ranks.insert(r.rank);
                }
                // Only collectives record received bytes; the nonblocking and persistent ones
                // are regions only in OTF2.
                if !name.starts_with("MPI_I") && !name.ends_with("_init") {
                    collective_received += c.recv_bytes;
                }
                // One-sided operations to MPI_PROC_NULL move nothing and get no record.
                let key = if !to_peer
                    && matches!(
                        name.as_str(),
                        "MPI_Put" | "MPI_Rput" | "MPI_Get" | "MPI_Rget" | "MPI_Accumulate"
                    ) {
                    format!("{name} to no process")
                } else {
                    name
                };
                *calls.entry(key).or_default() += 1;
            }
        }
    }
    (calls, sends, io_ranks, collective_received)
}

fn sum(calls: &BTreeMap<String, u64>, names: &[&str]) -> u64 {
    names
        .iter()
        .map(|n| calls.get(*n).copied().unwrap_or(0))
        .sum()
}

fn records(mpi: Mpi) {
    let _guard = mpi_lock();
    let trace = scratch(&format!("otf2-records-{}", mpi.name()));
    let work = scratch(&format!("otf2-records-{}-out", mpi.name()));
    // The program's files go to a scratch directory, removed with it. (Not through TMPDIR: Open
    // MPI puts its shared-memory files there, and a long path breaks them.)
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run").arg("--out").arg(&trace).arg("--");
    cmd.args(mpi.launch(4));
    cmd.arg(programs(mpi).join("rma_io"))
        .arg("--dir")
        .arg(&work);
    let out = output_with_timeout(
        mpi_env(&mut cmd),
        Duration::from_secs(120),
        &format!("traced rma_io ({})", mpi.name()),
    );
    let out = check(out, &format!("traced rma_io ({})", mpi.name()));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rma_io ranks=4"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let archive = work.join("otf2");
    if !common::export_otf2(&trace, &archive) {
        return;
    }
    let anchor = archive.join("traces.otf2");

    let Ok(printed) = Command::new("otf2-print")
        .arg("-Werror")
        .arg(&anchor)
        .output()
    else {
        common::skip_or_fail("otf2", "otf2-print is not installed");
        return;
    };
    let printed = check(printed, "otf2-print -Werror");
    let text = String::from_utf8_lossy(&printed.stdout);
    let printed_count = |kind: &str| {
        text.lines()
            .filter(|l| l.split_whitespace().next() == Some(kind))
            .count() as u64
    };

    let py = match Command::new("/usr/bin/python3")
        .arg(common::repo_root().join("tests/otf2_records.py"))
        .arg(&anchor)
        .output()
    {
        Ok(py) => py,
        Err(e) => {
            common::skip_or_fail("otf2", &format!("/usr/bin/python3: {e}"));
            return;
        }
    };
    if !py.status.success()
        && String::from_utf8_lossy(&py.stderr).contains("No module named 'otf2'")
    {
        common::skip_or_fail("otf2", "python3-otf2 is not installed");
        return;
    }
    let py = check(py, "tests/otf2_records.py");
    let read: serde_json::Value = serde_json::from_slice(&py.stdout).expect("JSON from the reader");
    let events = |kind: &str| read["events"][kind].as_u64().unwrap_or(0);

    let (calls, sends, io_ranks, collective_received) = trace_calls(&trace);
    // The rooted MPI_Reduce delivers to its root: the size received is in the archive.
    assert!(collective_received > 0, "the trace records received bytes");
    assert_eq!(
        read["collective_received"].as_u64(),
        Some(collective_received),
        "MpiCollectiveEnd sizes received against the trace's"
    );
    let puts = sum(&calls, &["MPI_Put", "MPI_Rput"]);
    let gets = sum(&calls, &["MPI_Get", "MPI_Rget"]);
    let atomics = sum(
        &calls,
        &[
            "MPI_Accumulate",
            "MPI_Raccumulate",
            "MPI_Get_accumulate",
            "MPI_Rget_accumulate",
            "MPI_Fetch_and_op",
            "MPI_Compare_and_swap",
        ],
    );
    let creates = sum(
        &calls,
        &[
            "MPI_Win_create",
            "MPI_Win_allocate",
            "MPI_Win_allocate_shared",
            "MPI_Win_create_dynamic",
        ],
    );
    let frees = sum(&calls, &["MPI_Win_free"]);
    let fences = sum(&calls, &["MPI_Win_fence"]);
    let locks = sum(&calls, &["MPI_Win_lock", "MPI_Win_lock_all"]);
    let unlocks = sum(&calls, &["MPI_Win_unlock", "MPI_Win_unlock_all"]);
    let io_calls: u64 = calls
        .iter()
        .filter(|(n, _)| {
            let op = n
                .strip_prefix("MPI_File_")
                .is_some_and(|b| b.contains("read") || b.contains("write"));
            (op && !n.ends_with("_end")) || *n == "MPI_File_sync"
        })
        .map(|(_, c)| c)
        .sum();
    let io_issued: u64 = calls
        .iter()
        .filter(|(n, _)| n.starts_with("MPI_File_i") || n.ends_with("_begin"))
        .map(|(_, c)| c)
        .sum();
    let deletes = sum(&calls, &["MPI_File_delete"]);
    // The program makes every kind: a count of 0 would make the comparisons below vacuous.
    for (what, n) in [
        ("puts", puts),
        ("gets", gets),
        ("atomics", atomics),
        ("window creations", creates),
        ("fences", fences),
        ("locks", locks),
        ("I/O operations", io_calls),
        ("nonblocking I/O operations", io_issued),
        ("file deletions", deletes),
        ("sends", sends),
    ] {
        assert!(n > 0, "the trace has no {what}: {calls:?}");
    }

    let expect = [
        ("RmaPut", "RMA_PUT", puts),
        ("RmaGet", "RMA_GET", gets),
        ("RmaAtomic", "RMA_ATOMIC", atomics),
        (
            "RmaOpCompleteNonBlocking",
            "RMA_OP_COMPLETE_NON_BLOCKING",
            puts + gets + atomics,
        ),
        (
            "RmaOpCompleteRemote",
            "RMA_OP_COMPLETE_REMOTE",
            puts + gets + atomics,
        ),
        ("RmaWinCreate", "RMA_WIN_CREATE", creates),
        ("RmaWinDestroy", "RMA_WIN_DESTROY", frees),
        (
            "RmaCollectiveBegin",
            "RMA_COLLECTIVE_BEGIN",
            creates + frees + fences,
        ),
        (
            "RmaCollectiveEnd",
            "RMA_COLLECTIVE_END",
            creates + frees + fences,
        ),
        ("RmaRequestLock", "RMA_REQUEST_LOCK", locks),
        ("RmaReleaseLock", "RMA_RELEASE_LOCK", unlocks),
        ("IoOperationBegin", "IO_OPERATION_BEGIN", io_calls),
        ("IoOperationComplete", "IO_OPERATION_COMPLETE", io_calls),
        ("IoOperationIssued", "IO_OPERATION_ISSUED", io_issued),
        ("IoCreateHandle", "IO_CREATE_HANDLE", io_ranks.len() as u64),
        (
            "IoDestroyHandle",
            "IO_DESTROY_HANDLE",
            io_ranks.len() as u64,
        ),
        ("IoDeleteFile", "IO_DELETE_FILE", deletes),
        ("MpiSend", "MPI_SEND", sends),
    ];
    for (python, printed, want) in expect {
        assert_eq!(events(python), want, "{python} records (python reader)");
        assert_eq!(
            printed_count(printed),
            want,
            "{printed} records (otf2-print)"
        );
    }
    assert_eq!(
        read["rma_incomplete"], 0,
        "RMA operations without exactly one local and one remote completion"
    );
    assert_eq!(
        read["io_incomplete"], 0,
        "I/O operations without their completion"
    );

    check_definitions(&read);
}

/// The communicator, group, window and I/O handle definitions (see otf2_comms.rs).
fn check_definitions(read: &serde_json::Value) {
    let groups = read["groups"].as_array().unwrap();
    let of_type = |t: &str| groups.iter().filter(|g| g["type"] == t).collect::<Vec<_>>();
    let locations = of_type("COMM_LOCATIONS");
    assert_eq!(locations.len(), 1, "one COMM_LOCATIONS group: {groups:?}");
    // Member i is world rank i's location, and that location belongs to location group i.
    let members = locations[0]["locations"].as_array().unwrap();
    assert_eq!(members.len(), 4);
    for (rank, loc) in members.iter().enumerate() {
        assert_eq!(
            read["locations"][loc.as_u64().unwrap().to_string()],
            rank as u64,
            "COMM_LOCATIONS member {rank}"
        );
    }
    let selves = of_type("COMM_SELF");
    assert_eq!(selves.len(), 1, "one COMM_SELF group");
    let group = |id: &serde_json::Value| groups.iter().find(|g| g["id"] == *id).unwrap();
    let ranks = |id: &serde_json::Value| -> Vec<u64> {
        group(id)["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap())
            .collect()
    };

    let comms = read["comms"].as_array().unwrap();
    for c in comms {
        let t = &group(&c["group"])["type"];
        assert!(
            t == "COMM_GROUP" || t == "COMM_SELF",
            "{c}: group of type {t}"
        );
    }
    let named = |n: &str| {
        comms
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    let world = named("MPI_COMM_WORLD");
    assert_eq!(ranks(&world["group"]), vec![0, 1, 2, 3]);
    assert!(world["parent"].is_null());
    assert_eq!(named("MPI_COMM_SELF")["group"], selves[0]["id"]);
    // The halves of MPI_Comm_split and the MPI_Comm_dup, each with MPI_COMM_WORLD as parent.
    let mut derived: Vec<Vec<u64>> = comms
        .iter()
        .filter(|c| c["id"] != world["id"] && group(&c["group"])["type"] == "COMM_GROUP")
        .inspect(|c| assert_eq!(c["parent"], world["id"], "parent of {c}"))
        .map(|c| ranks(&c["group"]))
        .collect();
    derived.sort();
    assert_eq!(derived, vec![vec![0, 1, 2, 3], vec![0, 2], vec![1, 3]]);

    let inter = read["inter_comms"].as_array().unwrap();
    assert_eq!(inter.len(), 1, "one intercommunicator: {inter:?}");
    let mut sides = vec![ranks(&inter[0]["group_a"]), ranks(&inter[0]["group_b"])];
    sides.sort();
    assert_eq!(sides, vec![vec![0, 2], vec![1, 3]]);

    // The world's window and one per half, each over the communicator it was created on.
    let wins = read["rma_wins"].as_array().unwrap();
    let mut win_ranks: Vec<Vec<u64>> = wins
        .iter()
        .inspect(|w| {
            assert!(
                w["flags"]
                    .as_str()
                    .unwrap()
                    .contains("CREATE_DESTROY_EVENTS")
            )
        })
        .map(|w| {
            let comm = comms.iter().find(|c| c["id"] == w["comm"]).unwrap();
            ranks(&comm["group"])
        })
        .collect();
    win_ranks.sort();
    assert_eq!(win_ranks, vec![vec![0, 1, 2, 3], vec![0, 2], vec![1, 3]]);

    let handles = read["io_handles"].as_array().unwrap();
    assert_eq!(handles.len(), 4, "one I/O handle per rank");
    for h in handles {
        assert_eq!(h["comm"], named("MPI_COMM_SELF")["id"], "{h}");
    }

    let paradigms = read["paradigms"].as_array().unwrap();
    assert!(
        paradigms
            .iter()
            .any(|p| p["paradigm"] == "Paradigm.MPI" && p["class"] == "ParadigmClass.PROCESS"),
        "{paradigms:?}"
    );
    let properties: BTreeSet<&str> = read["paradigm_properties"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["paradigm"] == "Paradigm.MPI")
        .map(|p| p["property"].as_str().unwrap())
        .collect();
    assert!(
        properties.contains("ParadigmProperty.COMM_NAME_TEMPLATE")
            && properties.contains("ParadigmProperty.RMA_WIN_NAME_TEMPLATE"),
        "{properties:?}"
    );
}

#[test]
fn records_openmpi() {
    records(Mpi::OpenMpi);
}

#[test]
fn records_mpich() {
    records(Mpi::Mpich);
}
