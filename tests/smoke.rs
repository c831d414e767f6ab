//! The recorder's smoke programs on real jobs under Open MPI and MPICH (formerly
//! `recorder/smoke/run.sh`): any/some completions, persistent requests and Startall, probes, RMA,
//! MPI-IO, neighbourhood collectives on a Cartesian communicator, MPI_IN_PLACE, Fortran `use mpi`
//! and `use mpi_f08`, abnormal ends, the hard memory limit and five threads recording at once.
//! Every expected figure is worked out from the program's source (tests/programs/smoke.c,
//! coverage.c, abnormal.c, smoke_f77.f90, smoke_f08.f90), not from what the recorder wrote.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{JOB_TIMEOUT, Mpi, mpi_lock, output_with_timeout, read_trace, scratch};
use format::{Event, Marker};

/// What one rank's trace holds, in the terms the expectations are written in.
#[derive(Debug, Default)]
struct Counts {
    /// Per function: calls and the sum of their `bytes`.
    calls: BTreeMap<String, (u64, u64)>,
    /// Completion events and the sum of their `bytes`.
    completions: (u64, u64),
    markers: BTreeMap<&'static str, u64>,
    /// Member lists (world ranks) of every communicator definition, in trace order.
    comms: Vec<Vec<u32>>,
    /// `WinDef`s: (window id, communicator id).
    windows: Vec<(u32, u32)>,
    /// User records plus region begins and ends.
    user: u64,
    streams: usize,
}

impl Counts {
    fn call(&self, name: &str) -> (u64, u64) {
        self.calls.get(name).copied().unwrap_or((0, 0))
    }
    fn marker(&self, name: &str) -> u64 {
        self.markers.get(name).copied().unwrap_or(0)
    }
}

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

/// Per rank (index = rank), what the trace in `dir` holds.
fn counts(dir: &Path) -> Vec<Counts> {
    let trace = read_trace(dir);
    let mut out: Vec<Counts> = Vec::new();
    for r in &trace {
        assert_eq!(r.rank as usize, out.len(), "rank files 0..P in order");
        let mut c = Counts {
            streams: r.streams.len(),
            ..Counts::default()
        };
        for e in r.all() {
            match e {
                Event::Call(call) => {
                    let entry = c.calls.entry(r.name(call.func).to_string()).or_default();
                    entry.0 += 1;
                    entry.1 += call.bytes;
                }
                Event::Completion(done) => {
                    c.completions.0 += 1;
                    c.completions.1 += done.bytes;
                }
                Event::Marker(m) => *c.markers.entry(marker_name(m)).or_default() += 1,
                Event::CommDef { members, .. } => c.comms.push(members.clone()),
                Event::WinDef { id, comm } => c.windows.push((*id, *comm)),
                Event::User(_) | Event::Region(_) => c.user += 1,
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// `evenflush run --out <scratch> <flags> -- mpirun -np <ranks> <program> <args>`, with a time
/// limit; returns the job's output (not checked: abnormal ends fail on purpose) and the trace.
fn traced(
    mpi: Mpi,
    ranks: u32,
    program: &str,
    args: &[&str],
    name: &str,
    flags: &[&str],
) -> (Output, PathBuf) {
    let out = scratch(&format!("smoke-{name}-{}", mpi.name()));
    // MPI-IO in coverage.c writes its file under TMPDIR.
    let tmp = scratch(&format!("smoke-{name}-{}-tmp", mpi.name()));
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run").arg("--out").arg(&out).args(flags).arg("--");
    cmd.args(mpi.launch(ranks));
    cmd.arg(common::programs(mpi).join(program)).args(args);
    cmd.env("TMPDIR", &tmp);
    let output = output_with_timeout(
        common::mpi_env(&mut cmd),
        JOB_TIMEOUT,
        &format!("{name} ({})", mpi.name()),
    );
    (output, out)
}

fn succeeded(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// smoke.c on 2 ranks: 100 iterations of (rank 0 Send 10 ints to rank 1, which receives with
/// ANY_SOURCE/ANY_TAG into 64 ints; Irecv + Isend of 3 + rank ints to the other rank; Waitall;
/// Allreduce IN_PLACE of one double), a Barrier, 10 rounds of Startall on a persistent Send_init
/// (5 ints) and Recv_init pair + Waitall, Comm_split/Bcast/free, Comm_dup/Barrier/free, then one
/// user record and (around the loop) one region.
fn smoke(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "smoke", &[], "smoke", &["--mode", "off"]);
    succeeded(&output, "smoke");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "smoke done (recorder present)\n",
        "the recorder's user-record entry points are found through dlsym"
    );
    let c = counts(&dir);
    assert_eq!(c.len(), 2);
    let label = mpi.name();
    assert_eq!(c[0].call("MPI_Send"), (100, 100 * 40), "{label}");
    assert_eq!(c[1].call("MPI_Send"), (0, 0), "{label}");
    // The posted receive size: 64 ints.
    assert_eq!(c[1].call("MPI_Recv"), (100, 100 * 256), "{label}");
    for (r, counts) in c.iter().enumerate() {
        let r = r as u64;
        assert_eq!(counts.call("MPI_Init_thread").0, 1, "{label}");
        assert_eq!(counts.call("MPI_Irecv"), (100, 100 * 256), "{label}");
        assert_eq!(
            counts.call("MPI_Isend"),
            (100, 100 * 4 * (3 + r)),
            "{label}"
        );
        assert_eq!(counts.call("MPI_Waitall").0, 110, "{label}");
        assert_eq!(counts.call("MPI_Allreduce"), (100, 100 * 8), "{label}");
        assert_eq!(counts.call("MPI_Barrier").0, 2, "{label}");
        assert_eq!(counts.call("MPI_Send_init"), (1, 20), "{label}");
        assert_eq!(counts.call("MPI_Recv_init"), (1, 256), "{label}");
        // One record per started request: 10 Startall calls of 2 requests each.
        assert_eq!(counts.call("MPI_Startall").0, 20, "{label}");
        assert_eq!(counts.call("MPI_Request_free").0, 2, "{label}");
        assert_eq!(counts.call("MPI_Comm_split").0, 1, "{label}");
        assert_eq!(counts.call("MPI_Bcast"), (1, 8), "{label}");
        assert_eq!(counts.call("MPI_Comm_dup").0, 1, "{label}");
        assert_eq!(counts.call("MPI_Comm_free").0, 2, "{label}");
        assert_eq!(counts.call("MPI_Finalize").0, 1, "{label}");
        assert_eq!(counts.marker("InitDone"), 1, "{label}");
        assert_eq!(counts.marker("FinalizeStart"), 1, "{label}");
        assert_eq!(counts.marker("AbnormalEnd"), 0, "{label}");
        // Region begin and end around the loop, and the "answer" record.
        assert_eq!(counts.user, 3, "{label}");
        // WORLD, SELF, the split (key -rank: reversed) and the dup (a new id after the free).
        let mut comms = counts.comms.clone();
        comms.sort();
        let mut want = vec![vec![0, 1], vec![0, 1], vec![1, 0], vec![r as u32]];
        want.sort();
        assert_eq!(comms, want, "{label}: rank {r}");
    }
    // Completions with the sizes actually moved: per iteration the Irecv gets 3 + other ints and
    // the Isend sends 3 + rank; 10 persistent rounds move 5 ints each way; rank 1 also has the
    // status of each of its 100 blocking receives of 10 ints.
    assert_eq!(c[0].completions, (220, 100 * (16 + 12) + 10 * (20 + 20)));
    assert_eq!(
        c[1].completions,
        (320, 100 * 40 + 100 * (12 + 16) + 10 * (20 + 20))
    );
}

/// coverage.c on 2 ranks: each less common family once (see the tally in its source).
fn coverage(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "coverage", &[], "coverage", &["--mode", "off"]);
    succeeded(&output, "coverage");
    let c = counts(&dir);
    let label = mpi.name();
    assert_eq!(c.len(), 2);
    // Sendrecv, Sendrecv_replace, one Recv (tag 3 or 4), Waitany x2, Waitsome, Test, Testall,
    // Testany, Testsome (2 each), Ibarrier + Iallreduce, File_iread_at + Wait: 18 completions.
    // Bytes: Sendrecv receives 4 ints, Sendrecv_replace 2, the tag-3/4 message 3 (rank 1) or 1
    // (rank 0) ints, then each Isend/Irecv pair of tags 5..10 moves `tag` ints both ways (their
    // sends complete with their own size), the Iallreduce of 4 ints completes with its size (the
    // recorder reads no IN_PLACE for it), and the File_iread_at reads 16 ints.
    let pairs: u64 = (5..=10).map(|tag| 2 * 4 * tag).sum();
    assert_eq!(
        c[0].completions,
        (18, 16 + 8 + 4 + pairs + 16 + 64),
        "{label}"
    );
    assert_eq!(
        c[1].completions,
        (18, 16 + 8 + 12 + pairs + 16 + 64),
        "{label}"
    );
    for (r, counts) in c.iter().enumerate() {
        for (name, n) in [
            ("MPI_Sendrecv", 1),
            ("MPI_Sendrecv_replace", 1),
            ("MPI_Waitany", 2),
            ("MPI_Irecv", 6),
            ("MPI_Isend", 6),
            ("MPI_Ibarrier", 1),
            ("MPI_Iallreduce", 1),
            ("MPI_Waitall", 1),
            ("MPI_Gather", 1),
            ("MPI_Alltoallv", 1),
            ("MPI_Allgather", 1),
            ("MPI_Reduce_scatter_block", 1),
            ("MPI_Scan", 1),
            ("MPI_Cart_create", 1),
            ("MPI_Neighbor_allgather", 1),
            ("MPI_Comm_free", 1),
            ("MPI_Win_create", 1),
            ("MPI_Win_fence", 2),
            ("MPI_Put", 1),
            ("MPI_Win_lock", 1),
            ("MPI_Get", 1),
            ("MPI_Win_unlock", 1),
            ("MPI_Win_free", 1),
            ("MPI_File_open", 1),
            ("MPI_File_write_at_all", 1),
            ("MPI_File_iread_at", 1),
            ("MPI_Wait", 1),
            ("MPI_File_close", 1),
        ] {
            assert_eq!(counts.call(name).0, n, "{label}: rank {r} {name}");
        }
        // Polling loops run at least once; their exact number depends on timing.
        for name in [
            "MPI_Waitsome",
            "MPI_Test",
            "MPI_Testall",
            "MPI_Testany",
            "MPI_Testsome",
        ] {
            assert!(counts.call(name).0 >= 1, "{label}: rank {r} {name}");
        }
        // IN_PLACE counts no bytes; Alltoallv sums its send counts (3 + 3 ints).
        assert_eq!(counts.call("MPI_Allgather").1, 0, "{label}");
        assert_eq!(counts.call("MPI_Alltoallv").1, 24, "{label}");
        assert_eq!(counts.call("MPI_Put"), (1, 8), "{label}");
        assert_eq!(counts.call("MPI_Get"), (1, 8), "{label}");
        assert_eq!(counts.call("MPI_File_write_at_all"), (1, 64), "{label}");
        // WORLD, SELF, the Cartesian communicator (not reordered: world order) and the RMA
        // window over MPI_COMM_WORLD, whose id its WinDef names.
        assert_eq!(counts.windows.len(), 1, "{label}: rank {r} WinDef");
        assert_eq!(
            counts.windows[0].1, 0,
            "{label}: window over MPI_COMM_WORLD"
        );
        let mut comms = counts.comms.clone();
        comms.sort();
        let mut want = vec![vec![0, 1], vec![0, 1], vec![0, 1], vec![r as u32]];
        want.sort();
        assert_eq!(comms, want, "{label}: rank {r}");
    }
    // Rank 0 gathers IN_PLACE (no bytes of its own), rank 1 sends 4 ints.
    assert_eq!(c[0].call("MPI_Gather"), (1, 0), "{label}");
    assert_eq!(c[1].call("MPI_Gather"), (1, 16), "{label}");
    // Only rank 1 probes, for the tag-3 message of rank 0.
    assert_eq!(c[1].call("MPI_Probe").0, 1, "{label}");
    assert!(c[1].call("MPI_Iprobe").0 >= 1, "{label}");
    assert_eq!(c[0].call("MPI_Probe").0 + c[0].call("MPI_Iprobe").0, 0);

    // The neighbourhood collective runs on the Cartesian communicator, which names both ranks.
    for r in read_trace(&dir) {
        let calls = r.calls("MPI_Neighbor_allgather");
        assert_eq!(calls.len(), 1);
        let comm = calls[0].comm;
        assert_ne!(comm, 0, "not on MPI_COMM_WORLD");
        assert_eq!(r.comms.get(&comm), Some(&vec![0, 1]), "{label}");
        let put = r.calls("MPI_Put")[0];
        assert_eq!(r.world(0, put.peer), 1 - r.rank, "{label}: Put target");
    }
}

/// smoke_f77.f90 (`use mpi`) and smoke_f08.f90 (`use mpi_f08`): 50 iterations of Irecv (10
/// integers, ANY_SOURCE) + Isend (4 integers) + Waitall(STATUSES_IGNORE), rank 0 Send of 2
/// integers to rank 1's Recv (10 integers, with a status), Allreduce IN_PLACE of one double.
fn fortran(mpi: Mpi, program: &str) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, program, &[], program, &["--mode", "off"]);
    succeeded(&output, program);
    let c = counts(&dir);
    let label = format!("{program} ({})", mpi.name());
    for counts in &c {
        // Recorded once, under the C name, although MPICH's Fortran layer calls the C symbol.
        assert_eq!(counts.call("MPI_Init").0, 1, "{label}");
        assert_eq!(counts.call("MPI_Irecv"), (50, 50 * 40), "{label}");
        assert_eq!(counts.call("MPI_Isend"), (50, 50 * 16), "{label}");
        assert_eq!(counts.call("MPI_Waitall").0, 50, "{label}");
        assert_eq!(counts.call("MPI_Allreduce"), (50, 50 * 8), "{label}");
        assert_eq!(counts.call("MPI_Barrier").0, 1, "{label}");
        assert_eq!(counts.call("MPI_Finalize").0, 1, "{label}");
    }
    assert_eq!(c[0].call("MPI_Send"), (50, 50 * 8), "{label}");
    assert_eq!(c[1].call("MPI_Recv"), (50, 50 * 40), "{label}");
    // MPI_STATUSES_IGNORE substituted: every request still completes with its real size.
    assert_eq!(c[0].completions, (100, 50 * (16 + 16)), "{label}");
    assert_eq!(c[1].completions, (150, 50 * (8 + 16 + 16)), "{label}");
}

fn fortran_use_mpi(mpi: Mpi) {
    fortran(mpi, "smoke_f77");
}

fn fortran_use_mpi_f08(mpi: Mpi) {
    fortran(mpi, "smoke_f08");
}

/// abnormal.c: 1000 Barriers on MPI_COMM_SELF, then the job ends without MPI_Finalize.
fn abnormal_end(mpi: Mpi, mode: &str) {
    let _guard = mpi_lock();
    let (output, dir) = traced(
        mpi,
        2,
        "abnormal",
        &[mode, "1000"],
        &format!("abnormal-{mode}"),
        &["--mode", "off"],
    );
    let c = counts(&dir);
    let label = format!("{mode} ({})", mpi.name());
    assert!(!c.is_empty(), "{label}: no trace written");
    assert_eq!(c[0].call("MPI_Barrier").0, 1000, "{label}");
    assert_eq!(c[0].call("MPI_Finalize").0, 0, "{label}");
    assert_eq!(c[0].marker("AbnormalEnd"), 1, "{label}");
    // A thread that raised SIGTERM on itself must not run on while its trace is written: it would
    // run code the program never ran (MPI_Finalize, cut in half by the re-raise).
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("ran on after raise"), "{label}: {stderr}");
}

fn abnormal_abort(mpi: Mpi) {
    abnormal_end(mpi, "abort");
}

fn abnormal_exit(mpi: Mpi) {
    abnormal_end(mpi, "exit");
}

fn abnormal_sigterm(mpi: Mpi) {
    abnormal_end(mpi, "term");
}

/// abnormal.c threads: 5 threads per rank (main + 4) each call Comm_rank 20000 times.
fn five_thread_streams(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(
        mpi,
        2,
        "abnormal",
        &["threads", "20000"],
        "threads",
        &["--mode", "off"],
    );
    succeeded(&output, "abnormal threads");
    for (r, c) in counts(&dir).iter().enumerate() {
        // Plus the one Comm_rank of main() before the threads start.
        assert_eq!(c.call("MPI_Comm_rank").0, 5 * 20_000 + 1, "rank {r}");
        assert_eq!(c.streams, 5, "rank {r}: one stream per thread");
        assert_eq!(c.call("MPI_Barrier").0, 1, "rank {r}");
    }
}

/// The hard limit: 1.5 M Barriers on COMM_SELF need ~12 MiB of records (about 8 bytes each); with the trace kept in
/// memory (`--mode off`: on one rank a Barrier on COMM_SELF spans the world, so the offload modes
/// would flush there and never reach the limit), a 4 MiB limit forces local flushes that lose
/// nothing and are marked, with a warning on stderr.
fn hard_limit(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(
        mpi,
        1,
        "abnormal",
        &["limit", "1500000"],
        "limit",
        &["--mode", "off", "--limit", "4MiB", "--threshold", "1MiB"],
    );
    succeeded(&output, "abnormal limit");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reached the limit"),
        "no warning on stderr: {stderr}"
    );
    let c = counts(&dir);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].call("MPI_Barrier").0, 1_500_000, "nothing lost");
    assert!(c[0].marker("LocalFlush") >= 1, "{:?}", c[0].markers);
    assert_eq!(c[0].marker("Lost"), 0);
    assert_eq!(common::info_json(&dir)["lost_events"], 0);
}

/// The preload library does nothing in a process that never initialises MPI.
fn inert_outside_mpi(mpi: Mpi) {
    let lib = common::evenflush_bin()
        .parent()
        .expect("target directory")
        .join(format!("libevenflush_{}.so", mpi.name()));
    assert!(lib.is_file(), "{} not built", lib.display());
    let out = output_with_timeout(
        Command::new("bash")
            .args(["-c", "echo hi"])
            .env("LD_PRELOAD", &lib),
        JOB_TIMEOUT,
        "bash under LD_PRELOAD",
    );
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// The calls of `name` in `rank`'s trace.
fn calls_of(rank: &common::RankEvents, name: &str) -> Vec<format::MpiCall> {
    rank.calls(name)
}

/// The one call of `name` in `rank`'s trace.
fn one(rank: &common::RankEvents, name: &str) -> format::MpiCall {
    let calls = calls_of(rank, name);
    assert_eq!(calls.len(), 1, "rank {}: calls of {name}", rank.rank);
    calls[0]
}

/// The members of communicator (or window) `id` and where its definition is in the event order.
fn comm_def(rank: &common::RankEvents, id: u32) -> (usize, Vec<u32>) {
    rank.all()
        .enumerate()
        .find_map(|(i, e)| match e {
            Event::CommDef { id: d, members } if *d == id => Some((i, members.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("rank {}: no CommDef for id {id}", rank.rank))
}

/// mpi4.c on 2 ranks: one representative of each class the MPI-4 coverage added, where the MPI
/// has it (MPICH 4.0: all; Open MPI 4.1: the MPIX_ persistent collective). Figures from mpi4.c.
fn mpi4(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "mpi4", &[], "mpi4", &["--mode", "off"]);
    succeeded(&output, "mpi4");
    assert!(String::from_utf8_lossy(&output.stdout).contains("mpi4 ok"));
    let trace = read_trace(&dir);
    assert_eq!(trace.len(), 2);
    let label = mpi.name();
    for (r, rank) in trace.iter().enumerate() {
        let other = 1 - r as i32;
        if mpi == Mpi::Mpich {
            let c = one(rank, "MPI_Isendrecv");
            assert_eq!(
                (c.comm, c.peer, c.tag, c.bytes),
                (0, other, 1, 16),
                "{label} rank {r}"
            );
            assert_ne!(c.request, format::NO_REQUEST);
            let c = one(rank, "MPI_Isendrecv_replace");
            assert_eq!((c.comm, c.peer, c.bytes), (0, other, 8), "{label} rank {r}");
            let (name, peer) = if r == 0 {
                ("MPI_Send_c", 1)
            } else {
                ("MPI_Recv_c", 0)
            };
            let c = one(rank, name);
            assert_eq!(
                (c.comm, c.peer, c.bytes),
                (0, peer, 32),
                "{label} rank {r} {name}"
            );
            let c = one(rank, "MPI_Allreduce_c");
            assert_eq!((c.comm, c.bytes), (0, 16), "{label} rank {r}");
            // Partitioned: 2 partitions x 4 ints, started once, two Pready on the sender.
            let (name, peer) = if r == 0 {
                ("MPI_Psend_init", 1)
            } else {
                ("MPI_Precv_init", 0)
            };
            let c = one(rank, name);
            assert_eq!(
                (c.comm, c.peer, c.tag, c.bytes),
                (0, peer, 5, 32),
                "{label} rank {r}"
            );
            assert_ne!(c.request, format::NO_REQUEST);
            if r == 0 {
                assert_eq!(calls_of(rank, "MPI_Pready").len(), 2, "{label}");
            } else {
                assert!(!calls_of(rank, "MPI_Parrived").is_empty(), "{label}");
            }
        } else {
            assert!(calls_of(rank, "MPI_Isendrecv").is_empty());
        }
        // The persistent collective, started twice: the two Starts name its request.
        let init = if mpi == Mpi::Mpich {
            "MPI_Allreduce_init"
        } else {
            "MPIX_Allreduce_init"
        };
        let c = one(rank, init);
        assert_eq!((c.comm, c.bytes), (0, 4), "{label} rank {r} {init}");
        let starts = calls_of(rank, "MPI_Start")
            .iter()
            .filter(|s| s.request == c.request)
            .count();
        assert_eq!(starts, 2, "{label} rank {r}: Starts of {init}");

        // Mrecv gets the Mprobe's communicator, the duplicate.
        if r == 1 {
            let probe = one(rank, "MPI_Mprobe");
            let recv = one(rank, "MPI_Mrecv");
            assert!(probe.comm > 1 && probe.comm != format::NO_COMM, "{label}");
            assert_eq!(recv.comm, probe.comm, "{label}: Mrecv's communicator");
            assert_eq!(recv.bytes, 12, "{label}");
        }
        // Comm_idup's communicator is defined at the call, before its request completes.
        let barrier = one(rank, "MPI_Barrier");
        let (def_at, members) = comm_def(rank, barrier.comm);
        assert_eq!(members, vec![0, 1], "{label}");
        let idup_at = rank
            .all()
            .position(|e| matches!(e, Event::Call(c) if rank.name(c.func) == "MPI_Comm_idup"))
            .expect("MPI_Comm_idup recorded");
        assert!(
            def_at < idup_at,
            "{label} rank {r}: CommDef after MPI_Comm_idup"
        );
        // The intercommunicator: local group this rank, remote group the other.
        let p2p = calls_of(rank, if r == 0 { "MPI_Send" } else { "MPI_Recv" })
            .into_iter()
            .find(|c| c.tag == 8)
            .expect("Send/Recv on the intercommunicator");
        assert_eq!(p2p.peer, 0, "{label}: rank 0 of the remote group");
        assert_eq!(comm_def(rank, p2p.comm).1, vec![r as u32], "{label}");
        let remote: Vec<Vec<u32>> = rank
            .all()
            .filter_map(|e| match e {
                Event::RemoteGroup { id, members } if *id == p2p.comm => Some(members.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            remote,
            vec![vec![other as u32]],
            "{label} rank {r}: RemoteGroup"
        );
        // One-sided calls name their window, whose group translates the target rank.
        let windows: Vec<(u32, u32)> = rank
            .all()
            .filter_map(|e| match e {
                Event::WinDef { id, comm } => Some((*id, *comm)),
                _ => None,
            })
            .collect();
        assert_eq!(
            windows.len(),
            3,
            "{label}: allocate, allocate_shared, create_dynamic"
        );
        assert!(windows.iter().all(|&(_, comm)| comm == 0), "{label}");
        for name in ["MPI_Raccumulate", "MPI_Rget_accumulate"] {
            let c = one(rank, name);
            assert_eq!(c.comm, windows[0].0, "{label} rank {r} {name}: window id");
            assert_eq!((c.peer, c.bytes), (other, 8), "{label} rank {r} {name}");
            assert_ne!(c.request, format::NO_REQUEST);
        }
        assert_eq!(comm_def(rank, windows[0].0).1, vec![0, 1], "{label}");
        assert_eq!(one(rank, "MPI_Win_flush_local_all").comm, windows[0].0);
        assert_eq!(one(rank, "MPI_Win_fence").comm, windows[1].0);
        // Nonblocking and split-collective MPI-IO.
        let c = one(rank, "MPI_File_iwrite_at_all");
        assert_eq!(c.bytes, 16, "{label}");
        assert_ne!(c.request, format::NO_REQUEST);
        assert_eq!(
            one(rank, "MPI_File_write_at_all_begin").bytes,
            16,
            "{label}"
        );
        one(rank, "MPI_File_write_at_all_end");
        assert_eq!(calls_of(rank, "MPI_File_delete").len(), usize::from(r == 0));
        assert_eq!(one(rank, "MPI_Pcontrol").tag, 2, "{label}: Pcontrol level");
    }
}

/// sessions.c: a program that never calls MPI_Init is traced from its MPI_Session_init to its
/// MPI_Session_finalize (MPICH 4.0; Open MPI 4.1 has no sessions, and the program says so).
fn sessions(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 2, "sessions", &[], "sessions", &["--mode", "off"]);
    succeeded(&output, "sessions");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if mpi == Mpi::OpenMpi {
        // Open MPI 4.1 has no MPI Sessions: the program says so and the traced run still ends
        // cleanly, but the sessions calls are not exercised: a listed skip, not a silent pass.
        assert!(stdout.contains("no sessions"), "{stdout}");
        common::skip_or_fail(
            "openmpi-sessions",
            "this Open MPI has no MPI Sessions (MPI 4.0): the sessions calls were not traced",
        );
        return;
    }
    assert!(stdout.contains("sessions ok 2"), "{stdout}");
    let trace = read_trace(&dir);
    assert_eq!(trace.len(), 2, "a rank file per process");
    let counts = counts(&dir);
    for (r, rank) in trace.iter().enumerate() {
        one(rank, "MPI_Session_init");
        one(rank, "MPI_Session_finalize");
        one(rank, "MPI_Comm_create_from_group");
        let c = one(rank, "MPI_Allreduce");
        assert_eq!(c.bytes, 4, "rank {r}");
        assert_eq!(comm_def(rank, c.comm).1, vec![0, 1], "rank {r}");
        assert_eq!(counts[r].marker("InitDone"), 1, "rank {r}");
        assert_eq!(counts[r].marker("FinalizeStart"), 1, "rank {r}");
    }

    // The MPI-IO writer opens its files on MPI_COMM_SELF, which a sessions-only program does not
    // have: the recorder must fall back to posix files, said and recorded, not lose the trace.
    let (output, dir) = traced(
        mpi,
        2,
        "sessions",
        &[],
        "sessions-mpiio",
        &["--writer", "mpiio", "--threshold", "256KiB"],
    );
    succeeded(&output, "sessions --writer mpiio");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("writer mpiio unavailable"), "{stderr}");
    assert!(!stderr.contains("RECORDING STOPPED"), "{stderr}");
    let info = common::info_json(&dir);
    assert_eq!(info["lost_events"], 0);
    for rank in info["per_rank"].as_array().unwrap() {
        assert_eq!(rank["writers"][0]["used"], "posix", "{rank}");
        assert_eq!(rank["writers"][0]["change"], "fallback", "{rank}");
    }
    assert_eq!(read_trace(&dir).len(), 2);
}

/// partitioned.c on 2 ranks (MPI-4 partitioned point-to-point, MPICH 4.0 has it, Open MPI 4.1
/// does not): every `Pready` form and each successful `Parrived` names the request of its
/// `Psend_init`/`Precv_init`, as do its two `Start`s, its two completions and its free; and the
/// trace reconstructs. Figures from partitioned.c.
fn partitioned(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(
        mpi,
        2,
        "partitioned",
        &[],
        "partitioned",
        &["--mode", "off"],
    );
    succeeded(&output, "partitioned");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if mpi == Mpi::OpenMpi {
        // Open MPI 4.1 declares no partitioned calls: its preload has no wrappers for them (rows
        // an MPI's mpi.h lacks are left out of its build) and the program cannot call them.
        assert!(stdout.contains("no partitioned"), "{stdout}");
        common::skip_or_fail(
            "openmpi-partitioned",
            "this Open MPI has no partitioned communication (MPI 4.0): Pready/Parrived not traced",
        );
        return;
    }
    // The receiver's last partition holds round 1 + index 31.
    assert!(stdout.contains("partitioned ok 32"), "{stdout}");
    let trace = read_trace(&dir);
    assert_eq!(trace.len(), 2);
    for (r, rank) in trace.iter().enumerate() {
        let (init, users) = if r == 0 {
            (
                "MPI_Psend_init",
                &["MPI_Pready", "MPI_Pready_range", "MPI_Pready_list"][..],
            )
        } else {
            ("MPI_Precv_init", &["MPI_Parrived"][..])
        };
        let c = one(rank, init);
        // 4 partitions x 8 ints.
        assert_eq!((c.peer, c.tag, c.bytes), (1 - r as i32, 7, 128), "rank {r}");
        let req = c.request;
        assert_ne!(req, format::NO_REQUEST, "rank {r}");
        for name in users {
            // One per round (the Parrived polls that found nothing are folded, without request).
            let calls = calls_of(rank, name);
            assert_eq!(calls.len(), 2, "rank {r} {name}");
            for call in &calls {
                assert_eq!(call.request, req, "rank {r}: {name} names its {init}");
            }
        }
        let starts: Vec<_> = calls_of(rank, "MPI_Start");
        assert_eq!(starts.len(), 2, "rank {r}");
        assert!(starts.iter().all(|s| s.request == req), "rank {r}");
        let done = rank
            .all()
            .filter(|e| matches!(e, Event::Completion(d) if d.request == req))
            .count();
        assert_eq!(done, 2, "rank {r}: completions of the partitioned request");
        assert_eq!(one(rank, "MPI_Request_free").request, req, "rank {r}");
    }
    let output = Command::new(common::evenflush_bin())
        .arg("reconstruct")
        .arg(&dir)
        .args(["--hb", "--json", "--out"])
        .arg(dir.join("reconstructed"))
        .output()
        .unwrap();
    let summary = common::reconstruct_summary(&common::check(output, "reconstruct"), "partitioned");
    let before = &summary["hb"]["before"];
    assert_eq!(before["unmatched_sends"], 0, "{summary}");
    assert_eq!(before["unmatched_receives"], 0, "{summary}");
}

/// sessions_edge.c (MPICH; Open MPI 4.1 has no sessions). `overlap`: the world model joins a
/// recording a session started and outlives the session: MPI_Init, the Barrier after
/// MPI_Session_finalize and MPI_Finalize are recorded, and the recording ends at MPI_Finalize.
/// `world-first`: MPI_Finalize first; the session's later calls are recorded and its end is the
/// recording's. `uneven`: rank r opens r+1 sessions; every rank's trace has all of them, one start, one end.
fn sessions_edge(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(
        mpi,
        2,
        "sessions_edge",
        &["overlap"],
        "sessions-overlap",
        &["--mode", "off"],
    );
    succeeded(&output, "sessions_edge overlap");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if mpi == Mpi::OpenMpi {
        assert!(stdout.contains("no sessions"), "{stdout}");
        common::skip_or_fail(
            "openmpi-sessions",
            "this Open MPI has no MPI Sessions (MPI 4.0): the sessions edge cases were not traced",
        );
        return;
    }
    assert!(stdout.contains("sessions overlap ok 2 2"), "{stdout}");
    let trace = read_trace(&dir);
    let overlap_counts = counts(&dir);
    assert_eq!(trace.len(), 2);
    for (r, rank) in trace.iter().enumerate() {
        for name in [
            "MPI_Session_init",
            "MPI_Init",
            "MPI_Session_finalize",
            "MPI_Barrier",
            "MPI_Finalize",
        ] {
            one(rank, name);
        }
        // One on the session's communicator, one on MPI_COMM_WORLD (id 0, the world process set).
        let allreduce = calls_of(rank, "MPI_Allreduce");
        assert_eq!(allreduce.len(), 2, "rank {r}");
        assert_eq!(allreduce[1].comm, 0, "rank {r}");
        assert_eq!(overlap_counts[r].marker("InitDone"), 1, "rank {r}");
        assert_eq!(overlap_counts[r].marker("FinalizeStart"), 1, "rank {r}");
        // The end is MPI_Finalize's: after the session's end and the Barrier that follows it.
        let position = |want: &dyn Fn(&Event) -> bool| rank.all().position(want).unwrap();
        let named = |name: &'static str| move |e: &Event| matches!(e, Event::Call(c) if rank.name(c.func) == name);
        let end = position(&|e| matches!(e, Event::Marker(Marker::FinalizeStart { .. })));
        assert!(position(&named("MPI_Session_finalize")) < end, "rank {r}");
        assert!(position(&named("MPI_Barrier")) < end, "rank {r}");
        assert!(end < position(&named("MPI_Finalize")), "rank {r}");
    }

    // The other order: MPI_Finalize first, the session goes on and its end is the recording's.
    let (output, dir) = traced(
        mpi,
        2,
        "sessions_edge",
        &["world-first"],
        "sessions-world-first",
        &["--mode", "off"],
    );
    succeeded(&output, "sessions_edge world-first");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("sessions world-first ok 2 2"), "{stdout}");
    for (r, rank) in read_trace(&dir).iter().enumerate() {
        for name in [
            "MPI_Session_init",
            "MPI_Init",
            "MPI_Finalize",
            "MPI_Session_finalize",
        ] {
            one(rank, name);
        }
        assert_eq!(calls_of(rank, "MPI_Allreduce").len(), 2, "rank {r}");
        let position = |want: &dyn Fn(&Event) -> bool| rank.all().position(want).unwrap();
        let end = position(&|e| matches!(e, Event::Marker(Marker::FinalizeStart { .. })));
        let finalize =
            position(&|e| matches!(e, Event::Call(c) if rank.name(c.func) == "MPI_Finalize"));
        let last_allreduce = rank
            .all()
            .enumerate()
            .filter(|(_, e)| matches!(e, Event::Call(c) if rank.name(c.func) == "MPI_Allreduce"))
            .map(|(i, _)| i)
            .last()
            .unwrap();
        assert!(
            finalize < last_allreduce && last_allreduce < end,
            "rank {r}"
        );
    }

    let (output, dir) = traced(
        mpi,
        3,
        "sessions_edge",
        &["uneven"],
        "sessions-uneven",
        &["--mode", "off"],
    );
    succeeded(&output, "sessions_edge uneven");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("sessions uneven ok 3"), "{stdout}");
    let uneven = counts(&dir);
    assert_eq!(uneven.len(), 3);
    for (r, c) in uneven.iter().enumerate() {
        let n = r as u64 + 1;
        assert_eq!(c.call("MPI_Session_init").0, n, "rank {r}");
        assert_eq!(c.call("MPI_Session_finalize").0, n, "rank {r}");
        assert_eq!(c.call("MPI_Allreduce"), (1, 4), "rank {r}");
        assert_eq!(c.marker("InitDone"), 1, "rank {r}");
        assert_eq!(c.marker("FinalizeStart"), 1, "rank {r}");
    }
    let info = common::info_json(&dir);
    assert_eq!(info["lost_events"], 0);
}

for_both_mpis!(
    smoke,
    coverage,
    mpi4,
    partitioned,
    sessions,
    sessions_edge,
    fortran_use_mpi,
    fortran_use_mpi_f08,
    abnormal_abort,
    abnormal_exit,
    abnormal_sigterm,
    five_thread_streams,
    hard_limit,
    inert_outside_mpi,
    cancel
);

/// A cancelled receive's completion says so, and no other does: completions ask MPI only once
/// the program has called `MPI_Cancel` (see `evf_note_cancel`), so both sides of that switch are
/// checked, in the order cancel.c runs them.
fn cancel(mpi: Mpi) {
    let _guard = mpi_lock();
    let (output, dir) = traced(mpi, 1, "cancel", &[], "cancel", &["--mode", "off"]);
    succeeded(&output, "cancel");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("cancel ok"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let trace = read_trace(&dir);
    let rank = &trace[0];
    let irecvs = calls_of(rank, "MPI_Irecv");
    assert_eq!(irecvs.len(), 3);
    let cancelled_id = irecvs[1].request;
    let completions: Vec<format::Completion> = rank
        .all()
        .filter_map(|e| match e {
            Event::Completion(c) => Some(*c),
            _ => None,
        })
        .collect();
    assert_eq!(completions.len(), 5, "{completions:?}");
    for c in &completions {
        assert_eq!(
            c.cancelled,
            c.request == cancelled_id,
            "request {} ({}): {completions:?}",
            c.request,
            mpi.name()
        );
    }
}

/// The skip helper itself: a skip nobody allowed is a failure.
#[test]
#[should_panic(expected = "not allowed")]
fn an_unallowed_skip_fails() {
    assert!(!common::skip_allowed("evenflush-no-such-skip"));
    common::skip_or_fail("evenflush-no-such-skip", "always refused");
}
