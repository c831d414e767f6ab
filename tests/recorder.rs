//! The recorder on real `mpirun` jobs, under Open MPI and MPICH: exact call counts, world-rank peers,
//! tags, bytes, matched requests and resolved sources, and unchanged program output.

#[macro_use]
mod common;

use common::{Mpi, expected, info_json, mpi_lock, read_trace, run_plain, run_traced, scratch};
use format::{ANY_SOURCE, Event, NO_RANK};

/// The calls of a program the recorder must record: every call expected.json counts, less the
/// ones it lists as not recorded (written there by hand, not read from the recorder's table).
fn recorded_calls(exp: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let mut calls = exp["calls"].as_object().unwrap().clone();
    if let Some(skipped) = exp.get("not_recorded") {
        for name in skipped.as_object().unwrap().keys() {
            assert!(calls.remove(name).is_some(), "{name} is not called at all");
        }
    }
    calls
}

/// Runs a bundled program plain and traced (`--mode off`), checks identical stdout and the exact
/// per-function call counts of expected.json, and returns the trace directory.
fn traced_with_exact_counts(mpi: Mpi, program: &str) -> std::path::PathBuf {
    let exp = expected(program);
    let ranks = exp["ranks"].as_u64().unwrap() as u32;
    let args: Vec<String> = exp["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _guard = mpi_lock();
    let plain = run_plain(mpi, ranks, program, &args);
    let out = scratch(&format!("{program}-{}", mpi.name()));
    let traced = run_traced(mpi, ranks, program, &args, &out, &["--mode", "off"]);
    assert_eq!(
        plain,
        traced,
        "{program} prints something else under the recorder ({})",
        mpi.name()
    );

    let info = info_json(&out);
    assert_eq!(info["ranks"], ranks, "{program} {}", mpi.name());
    assert_eq!(info["lost_events"], 0, "{program} {}", mpi.name());
    let calls = recorded_calls(&exp);
    let got = info["functions"].as_object().unwrap();
    assert_eq!(
        got,
        &calls,
        "{program} ({}): per-function call counts differ",
        mpi.name()
    );
    out
}

fn ring(mpi: Mpi) {
    let exp = expected("ring");
    let out = traced_with_exact_counts(mpi, "ring");
    let trace = read_trace(&out);
    let p = exp["ranks"].as_u64().unwrap() as u32;
    assert!(p >= 3, "left and right neighbours must differ");
    assert_eq!(trace.len() as u32, p);
    let (laps, tag, bytes) = (
        exp["laps"].as_u64().unwrap() as usize,
        exp["tag"].as_i64().unwrap() as i32,
        exp["bytes"].as_u64().unwrap(),
    );
    for r in &trace {
        let (right, left) = ((r.rank + 1) % p, (r.rank + p - 1) % p);
        let sends = r.calls("MPI_Send");
        assert_eq!(sends.len(), laps);
        for s in &sends {
            assert_eq!(r.world(s.comm, s.peer), right, "rank {} send", r.rank);
            assert_eq!((s.tag, s.bytes), (tag, bytes));
            assert!(s.end >= s.start);
        }
        let recvs = r.calls("MPI_Recv");
        assert_eq!(recvs.len(), laps);
        for recv in &recvs {
            assert_eq!(
                r.world(recv.comm, recv.peer),
                left,
                "rank {} receive",
                r.rank
            );
            assert_eq!((recv.tag, recv.bytes), (tag, bytes));
        }
        // Each blocking receive's status names the left neighbour, even with MPI_STATUS_IGNORE.
        let sources: Vec<(u32, i32, u64)> = r
            .all()
            .filter_map(|e| match e {
                Event::Completion(d) => Some((r.world(0, d.source), d.tag, d.bytes)),
                _ => None,
            })
            .collect();
        assert_eq!(sources, vec![(left, tag, bytes); laps], "rank {}", r.rank);
    }
}

fn halo(mpi: Mpi) {
    let exp = expected("halo");
    let out = traced_with_exact_counts(mpi, "halo");
    let trace = read_trace(&out);
    let p = exp["ranks"].as_u64().unwrap() as u32;
    let iterations = exp["iterations"].as_u64().unwrap();
    assert_eq!(trace.len() as u32, p);
    for r in &trace {
        // Every request created by Isend/Irecv is completed exactly once by a later Waitall.
        let mut open = std::collections::HashSet::new();
        let mut completed = 0;
        for e in r.all() {
            match e {
                Event::Call(c) if matches!(r.name(c.func), "MPI_Isend" | "MPI_Irecv") => {
                    assert_ne!(
                        c.request,
                        0,
                        "rank {}: {} without a request id",
                        r.rank,
                        r.name(c.func)
                    );
                    assert!(
                        open.insert(c.request),
                        "request id {} reused while open",
                        c.request
                    );
                }
                Event::Completion(done) => {
                    assert!(
                        open.remove(&done.request),
                        "rank {}: completion of unknown request {}",
                        r.rank,
                        done.request
                    );
                    completed += 1;
                }
                _ => {}
            }
        }
        assert!(
            open.is_empty(),
            "rank {}: {} requests never completed",
            r.rank,
            open.len()
        );
        assert_eq!(completed, iterations * 4);

        // Every iteration's point-to-point calls, in order, with their world peers and tags.
        let (left, right) = ((r.rank + p - 1) % p, (r.rank + 1) % p);
        assert_ne!(left, right, "P >= 3: the two neighbours differ");
        let mut want = Vec::new();
        for _ in 0..iterations {
            for step in exp["iteration_p2p"].as_array().unwrap() {
                let peer = match step[1].as_str().unwrap() {
                    "left" => left,
                    "right" => right,
                    other => panic!("unknown neighbour {other}"),
                };
                want.push((
                    step[0].as_str().unwrap().to_string(),
                    peer,
                    step[2].as_i64().unwrap() as i32,
                    step[3].as_u64().unwrap(),
                ));
            }
        }
        let got: Vec<(String, u32, i32, u64)> = r
            .all()
            .filter_map(|e| match e {
                Event::Call(c) if matches!(r.name(c.func), "MPI_Isend" | "MPI_Irecv") => Some((
                    r.name(c.func).to_string(),
                    r.world(c.comm, c.peer),
                    c.tag,
                    c.bytes,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(got, want, "rank {}: halo peers and tags", r.rank);
        // The receives' statuses: from the left with tag 1, from the right with tag 2.
        let mut statuses: Vec<(u32, i32)> = r
            .all()
            .filter_map(|e| match e {
                Event::Completion(d) if d.source >= 0 => Some((r.world(0, d.source), d.tag)),
                _ => None,
            })
            .collect();
        statuses.sort();
        let mut want = [
            vec![(left, 1); iterations as usize],
            vec![(right, 2); iterations as usize],
        ]
        .concat();
        want.sort();
        assert_eq!(statuses, want, "rank {}: receive statuses", r.rank);
    }
}

fn anysource(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "anysource");
    let trace = read_trace(&out);
    let root = trace.iter().find(|r| r.rank == 0).unwrap();
    // Every receive posted with MPI_ANY_SOURCE/MPI_ANY_TAG, blocking or not, with or without a
    // status asked for by the program, has its real source, tag and size in the trace.
    let events: Vec<&Event> = root.all().collect();
    let mut pending = std::collections::HashMap::new();
    let mut resolved = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Call(c) if c.peer == ANY_SOURCE && root.name(c.func) == "MPI_Recv" => {
                match events.get(i + 1) {
                    Some(Event::Completion(done)) => {
                        resolved.push((root.world(c.comm, done.source), done.tag, done.bytes))
                    }
                    other => panic!("MPI_Recv(ANY_SOURCE) not followed by its status: {other:?}"),
                }
            }
            Event::Call(c) if c.peer == ANY_SOURCE && root.name(c.func) == "MPI_Irecv" => {
                pending.insert(c.request, c.comm);
            }
            Event::Completion(done) if pending.contains_key(&done.request) => {
                let comm = pending.remove(&done.request).unwrap();
                resolved.push((root.world(comm, done.source), done.tag, done.bytes));
            }
            _ => {}
        }
    }
    assert!(
        pending.is_empty(),
        "ANY_SOURCE requests never completed: {pending:?}"
    );
    resolved.sort();
    // Phase p (0..4) from sender s: tag (p+1)*100 + s, [10,20,30,1][p]*s + [3,5,7,3][p] ints.
    let mut want = Vec::new();
    for s in 1..4u32 {
        for (p, (per, off)) in [(10, 3), (20, 5), (30, 7), (1, 3)].into_iter().enumerate() {
            want.push((
                s,
                ((p as i32) + 1) * 100 + s as i32,
                4 * (per * u64::from(s) + off),
            ));
        }
    }
    want.sort();
    assert_eq!(
        resolved, want,
        "resolved (source, tag, bytes) of the ANY_SOURCE receives"
    );
}

fn split(mpi: Mpi) {
    let exp = expected("split");
    let out = traced_with_exact_counts(mpi, "split");
    let trace = read_trace(&out);
    let world: Vec<u32> = (0..exp["ranks"].as_u64().unwrap() as u32).collect();
    for r in &trace {
        let want = &exp["per_rank"][r.rank as usize];
        let members: Vec<u32> = serde_json::from_value(want["sub_members"].clone()).unwrap();
        // Every communicator a call of this rank used is the world or has exactly the split's
        // members, in sub-rank order (the split and its dup).
        let mut used = std::collections::BTreeSet::new();
        for e in r.all() {
            if let Event::Call(c) = e
                && c.comm != 0
                && c.comm != u32::MAX
            {
                used.insert(c.comm);
            }
        }
        assert!(
            used.len() >= 2,
            "rank {}: split and dup used: {used:?}",
            r.rank
        );
        for comm in &used {
            let got = r
                .comms
                .get(comm)
                .unwrap_or_else(|| panic!("rank {}: communicator {comm} never defined", r.rank));
            assert!(
                *got == members || *got == world,
                "rank {}: communicator {comm} = {got:?}, want {members:?}",
                r.rank
            );
        }
        let p2p: Vec<(String, u32, i32)> = r
            .all()
            .filter_map(|e| match e {
                Event::Call(c) if matches!(r.name(c.func), "MPI_Send" | "MPI_Recv") => {
                    Some((r.name(c.func).to_string(), r.world(c.comm, c.peer), c.tag))
                }
                _ => None,
            })
            .collect();
        let want_p2p: Vec<(String, u32, i32)> =
            serde_json::from_value(want["p2p"].clone()).unwrap();
        assert_eq!(p2p, want_p2p, "rank {}: peers and tags", r.rank);
        let roots: Vec<(String, u32)> = r
            .all()
            .filter_map(|e| match e {
                Event::Call(c) if c.root != NO_RANK => {
                    Some((r.name(c.func).to_string(), r.world(c.comm, c.root)))
                }
                _ => None,
            })
            .collect();
        let want_roots: Vec<(String, u32)> = serde_json::from_value(want["roots"].clone()).unwrap();
        assert_eq!(roots, want_roots, "rank {}: collective roots", r.rank);
    }
}

fn user_records(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "user_records");
    let info = info_json(&out);
    let exp = expected("user_records");
    let records: u64 = info["user_events"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        records,
        exp["user_events"]["evenflush_record"].as_u64().unwrap()
    );
    let regions: u64 = info["regions"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        regions,
        exp["user_events"]["evenflush_region_begin"]
            .as_u64()
            .unwrap()
    );
    let trace = read_trace(&out);
    let payload_bytes: u64 = trace
        .iter()
        .flat_map(|r| r.all())
        .map(|e| match e {
            Event::User(u) => u.payload.len() as u64,
            _ => 0,
        })
        .sum();
    assert_eq!(payload_bytes, exp["user_event_bytes"].as_u64().unwrap());
}

fn threads(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "threads");
    let trace = read_trace(&out);
    for r in &trace {
        assert!(
            r.streams.len() >= 2,
            "rank {}: events of both threads expected in separate streams",
            r.rank
        );
    }
}

/// Every collective call of every rank in program order, with its root (as a world rank), bytes
/// and received bytes, against the program's own sequence in expected.json.
fn collectives(mpi: Mpi) {
    let exp = expected("collectives");
    let out = traced_with_exact_counts(mpi, "collectives");
    let trace = read_trace(&out);
    let p = exp["ranks"].as_u64().unwrap() as u32;
    let rounds = exp["rounds"].as_u64().unwrap() as u32;
    for r in &trace {
        let mut want: Vec<(String, Option<u32>, u64, u64)> = Vec::new();
        let mut expand = |step: &serde_json::Value, round: u32| {
            let root = match &step[1] {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) if s == "round" => Some(round % p),
                v => Some(v.as_u64().expect("a rank") as u32),
            };
            let per_rank = |v: &serde_json::Value| match v {
                serde_json::Value::Array(per_rank) => per_rank[r.rank as usize].as_u64().unwrap(),
                serde_json::Value::Object(by_role) => {
                    let role = if root == Some(r.rank) {
                        "root"
                    } else {
                        "others"
                    };
                    by_role[role].as_u64().unwrap()
                }
                v => v.as_u64().unwrap(),
            };
            want.push((
                step[0].as_str().unwrap().to_string(),
                root,
                per_rank(&step[2]),
                per_rank(&step[3]),
            ));
        };
        for round in 0..rounds {
            for step in exp["round_sequence"].as_array().unwrap() {
                expand(step, round);
            }
        }
        for step in exp["epilogue"].as_array().unwrap() {
            expand(step, 0);
        }
        let setup = ["MPI_Init", "MPI_Comm_rank", "MPI_Comm_size", "MPI_Finalize"];
        let got: Vec<(String, Option<u32>, u64, u64)> = r
            .all()
            .filter_map(|e| match e {
                Event::Call(c) if !setup.contains(&r.name(c.func)) => Some((
                    r.name(c.func).to_string(),
                    (c.root != NO_RANK).then(|| r.world(c.comm, c.root)),
                    c.bytes,
                    c.recv_bytes,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(got, want, "rank {} ({})", r.rank, mpi.name());
    }
}

fn fortran_ring(mpi: Mpi) {
    traced_with_exact_counts(mpi, "fortran_ring");
}

fn fortran_f08(mpi: Mpi) {
    traced_with_exact_counts(mpi, "fortran_f08");
}

/// A job killed by SIGTERM still leaves every rank's trace, with every call that completed before
/// the kill and a marker saying the trace ended abnormally. Rank 0 holds 3 M more calls, so it is
/// still writing when rank 1 dies: MPICH's launcher then SIGKILLs it at once, unless rank 1 waits
/// for it (`recorder::lifecycle::killed_together`).
fn sigterm(mpi: Mpi) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let exp = expected("sigterm");
    let _guard = mpi_lock();
    let out = scratch(&format!("sigterm-{}", mpi.name()));
    let program = common::programs(mpi).join("sigterm");
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run")
        .arg("--out")
        .arg(&out)
        .args(["--mode", "off", "--"]);
    cmd.args(mpi.launch(2))
        .arg(&program)
        .args(["--warm-calls", "3000000"]);
    let mut child = common::mpi_env(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the program prints ready").unwrap();
    assert_eq!(first, "ready");
    std::thread::sleep(std::time::Duration::from_millis(200));
    // By exact process name: the launcher's command lines also contain the program's path.
    let killed = Command::new("pkill")
        .args(["-TERM", "-x", "sigterm"])
        .status()
        .unwrap();
    assert!(killed.success(), "no rank process found to kill");
    // The launcher's own exit status after a killed rank differs between MPIs; only its end matters.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "job did not end after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let info = info_json(&out);
    assert_eq!(info["ranks"], 2);
    assert_eq!(info["lost_events"], 0);
    for (name, n) in exp["calls_through_ready"].as_object().unwrap() {
        let got = info["functions"][name].as_u64().unwrap_or(0);
        assert!(
            got >= n.as_u64().unwrap(),
            "{name}: {got} recorded, {n} had completed before the kill"
        );
    }
    for rank in info["per_rank"].as_array().unwrap() {
        assert_eq!(
            rank["abnormal_end"], true,
            "rank {} has no abnormal-end marker",
            rank["rank"]
        );
    }
    assert_eq!(info["unended_ranks"], serde_json::json!([]));
    let markers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ending-"))
        .collect();
    assert!(markers.is_empty(), "markers left behind: {markers:?}");

    // No rank reached MPI_Finalize, so the spans end where recording stopped: the program ran at
    // least the 200 ms between "ready" and the kill, and that is there to reconstruct.
    let span = info["span_s"].as_f64().unwrap();
    assert!(span >= 0.15, "span {span} s of a run killed after 200 ms");
    let rebuilt = scratch(&format!("sigterm-{}-rebuilt", mpi.name()));
    let done = Command::new(common::evenflush_bin())
        .args(["reconstruct", "--json", "--out"])
        .arg(&rebuilt)
        .arg(&out)
        .output()
        .unwrap();
    let done = common::check(done, "evenflush reconstruct");
    let summary: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    let measured = summary["measured_s"].as_f64().unwrap();
    let reconstructed = summary["reconstructed_s"].as_f64().unwrap();
    assert!(
        (measured - span).abs() < 1e-6,
        "T(G') {measured} s, info's span {span} s"
    );
    assert!(
        reconstructed > 0.5 * measured && reconstructed <= measured,
        "T(G) {reconstructed} s of T(G') {measured} s"
    );
    assert_eq!(summary["ended_abnormally"], serde_json::json!([0, 1]));
    let _ = std::fs::remove_dir_all(&rebuilt);
}

/// A program that loads MPI at run time instead of linking it: Python, where the launcher, not the
/// program's build, says which MPI is used, initialised with MPI_THREAD_MULTIPLE. Under Open MPI it
/// is a real program nobody here wrote, mpi4py. Debian's mpi4py is built against Open MPI only
/// (`libmpi.so.40`; MPICH's ABI differs), so it cannot run under MPICH at all: there the same
/// script is written with `ctypes`, which opens `libmpich.so.12` at run time and calls the C entry
/// points through the process's global symbol scope, as a linked program's calls resolve (the
/// preloaded recorder's come first). Both variants check the same recorded calls.
fn mpi4py(mpi: Mpi) {
    let body = match mpi {
        Mpi::OpenMpi => {
            "from mpi4py import MPI\n\
             comm = MPI.COMM_WORLD\n\
             r = comm.Get_rank()\n\
             total = comm.allreduce(r + 1)\n\
             if r == 0:\n    comm.send(list(range(50)), dest=1, tag=5)\n\
             elif r == 1:\n    assert comm.recv(source=0, tag=5) == list(range(50))\n\
             comm.Barrier()\n\
             if r == 0:\n    print('sum', total)\n"
        }
        Mpi::Mpich => {
            // Handle values from MPICH's mpi.h (integers in its ABI).
            "import ctypes\n\
             ctypes.CDLL('libmpich.so.12', mode=ctypes.RTLD_GLOBAL)\n\
             mpi = ctypes.CDLL(None)\n\
             WORLD, INT, SUM, IGNORE = 0x44000000, 0x4c000405, 0x58000003, ctypes.c_void_p(1)\n\
             provided, rank = ctypes.c_int(), ctypes.c_int()\n\
             assert mpi.MPI_Init_thread(None, None, 3, ctypes.byref(provided)) == 0\n\
             mpi.MPI_Comm_rank(WORLD, ctypes.byref(rank))\n\
             r = rank.value\n\
             mine, total = ctypes.c_int(r + 1), ctypes.c_int()\n\
             mpi.MPI_Allreduce(ctypes.byref(mine), ctypes.byref(total), 1, INT, SUM, WORLD)\n\
             buf = (ctypes.c_int * 50)(*range(50)) if r == 0 else (ctypes.c_int * 50)()\n\
             if r == 0:\n    mpi.MPI_Send(buf, 50, INT, 1, 5, WORLD)\n\
             elif r == 1:\n    mpi.MPI_Recv(buf, 50, INT, 0, 5, WORLD, IGNORE)\n    \
             assert list(buf) == list(range(50))\n\
             mpi.MPI_Barrier(WORLD)\n\
             if r == 0:\n    print('sum', total.value, flush=True)\n\
             mpi.MPI_Finalize()\n"
        }
    };
    let script = common::scratch(&format!("mpi4py-script-{}", mpi.name())).join("allreduce.py");
    std::fs::write(&script, body).unwrap();
    let _guard = mpi_lock();
    let out = scratch(&format!("mpi4py-{}", mpi.name()));
    let mut cmd = std::process::Command::new(common::evenflush_bin());
    cmd.arg("run")
        .arg("--out")
        .arg(&out)
        .args(["--mode", "off", "--"]);
    cmd.args(mpi.launch(2)).arg("/usr/bin/python3").arg(&script);
    let output = common::output_with_timeout(
        common::mpi_env(&mut cmd),
        common::JOB_TIMEOUT,
        &format!("python MPI script ({})", mpi.name()),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "sum 3\n");
    let info = info_json(&out);
    assert_eq!(info["ranks"], 2);
    assert_eq!(info["functions"]["MPI_Init_thread"], 2);
    if mpi == Mpi::Mpich {
        // mpi4py reduces Python objects with pickled point-to-point messages instead.
        assert_eq!(info["functions"]["MPI_Allreduce"], 2);
    }
    assert_eq!(info["functions"]["MPI_Barrier"], 2);
    assert_eq!(info["functions"]["MPI_Finalize"], 2);
    assert_eq!(info["lost_events"], 0);
    let trace = read_trace(&out);
    let sends: Vec<_> = trace[0]
        .calls("MPI_Send")
        .into_iter()
        .filter(|c| c.tag == 5)
        .collect();
    assert_eq!(sends.len(), 1, "the one send with tag 5");
    assert_eq!(trace[0].world(sends[0].comm, sends[0].peer), 1);
    // The receiving side: MPI_Recv from ctypes, MPI_Mprobe (then Mrecv) from mpi4py.
    let recvs: Vec<_> = trace[1]
        .all()
        .filter_map(|e| match e {
            Event::Call(c) if c.tag == 5 && c.peer >= 0 => {
                Some((trace[1].name(c.func), trace[1].world(c.comm, c.peer)))
            }
            _ => None,
        })
        .collect();
    let want = if mpi == Mpi::Mpich {
        "MPI_Recv"
    } else {
        "MPI_Mprobe"
    };
    assert_eq!(recvs, vec![(want, 0)], "the one receive with tag 5");
}

for_both_mpis!(
    ring,
    halo,
    collectives,
    split,
    anysource,
    threads,
    user_records,
    fortran_ring,
    fortran_f08,
    sigterm,
    mpi4py,
    watchdog,
    profile_mode,
    request_table_locks_only_where_threads_may_meet
);

/// Below `MPI_THREAD_MULTIPLE` the request table runs without its locks (three locked
/// instructions less per request, a quarter of an `Isend`'s recorded cost); a program whose
/// threads may call MPI at once keeps them. Each rank reports the choice at the end
/// (`EVENFLUSH_VERBOSE`).
fn request_table_locks_only_where_threads_may_meet(mpi: Mpi) {
    let _guard = mpi_lock();
    for (program, ranks, want) in [("ring", 3, "unlocked"), ("threads", 2, "locked")] {
        let out = scratch(&format!("request-table-{program}-{}", mpi.name()));
        let mut cmd = std::process::Command::new(common::evenflush_bin());
        cmd.args(["run", "--mode", "off", "--out"])
            .arg(&out)
            .arg("--")
            .args(mpi.launch(ranks))
            .arg(common::programs(mpi).join(program))
            .env("EVENFLUSH_VERBOSE", "1");
        let output = common::check(
            common::output_with_timeout(
                common::mpi_env(&mut cmd),
                std::time::Duration::from_secs(120),
                program,
            ),
            program,
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said: Vec<&str> = stderr
            .lines()
            .filter_map(|l| l.split("; request table ").nth(1))
            .map(|rest| rest.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(
            said,
            vec![want; ranks as usize],
            "{program} ({}): every rank's request table should be {want}:\n{stderr}",
            mpi.name()
        );
    }
}

/// A 2-rank deadlock (both ranks receive first) is diagnosed by the watchdog: each rank's stuck
/// MPI_Recv is named with its peer and tag, on stderr and in the trace, and `--watchdog-abort`
/// ends the job instead of letting it hang.
fn watchdog(mpi: Mpi) {
    use std::process::{Command, Stdio};
    let _guard = mpi_lock();
    let out = scratch(&format!("watchdog-{}", mpi.name()));
    let mut cmd = Command::new(common::evenflush_bin());
    cmd.arg("run").arg("--out").arg(&out);
    cmd.args(["--mode", "off", "--watchdog", "1", "--watchdog-abort", "--"]);
    cmd.args(mpi.launch(2))
        .arg(common::programs(mpi).join("deadlock"));
    let mut child = common::mpi_env(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = Command::new("pkill")
                .args(["-KILL", "-x", "deadlock"])
                .status();
            panic!("the watchdog did not end the deadlocked job within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "an aborted job does not succeed");
    for rank in 0..2 {
        let peer = 1 - rank;
        let line = format!("rank {rank}: WATCHDOG: MPI_Recv has been running for");
        assert!(
            stderr.contains(&line),
            "no diagnosis for rank {rank}:\n{stderr}"
        );
        assert!(
            stderr.contains(&format!("peer {peer},")),
            "rank {rank}'s peer not named:\n{stderr}"
        );
    }
    // The trace written before the abort holds the diagnosis (at least of the rank that aborted).
    let stuck: Vec<_> = format::open_dir(&out)
        .unwrap()
        .iter()
        .flat_map(|e| {
            format::RankFile::open(&e.path)
                .unwrap()
                .events()
                .filter_map(Result::ok)
                .collect::<Vec<_>>()
        })
        .filter_map(|e| match e {
            Event::Marker(format::Marker::Stuck {
                peer, elapsed_ns, ..
            }) => Some((peer, elapsed_ns)),
            _ => None,
        })
        .collect();
    assert!(!stuck.is_empty(), "no Stuck marker in the trace");
    assert!(
        stuck
            .iter()
            .all(|&(peer, ns)| (0..2).contains(&peer) && ns >= 1_000_000_000),
        "{stuck:?}"
    );
}

/// `--mode profile` keeps only statistics (no event trace) and writes one profile file per rank;
/// `evenflush report` reads them with the same counts a full trace gives.
fn profile_mode(mpi: Mpi) {
    let exp = expected("halo");
    let _guard = mpi_lock();
    let out = scratch(&format!("profile-{}", mpi.name()));
    run_traced(mpi, 4, "halo", &[], &out, &["--mode", "profile"]);
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with(".evf")),
        "no event trace in profile mode: {names:?}"
    );
    for rank in 0..4 {
        assert!(
            names.contains(&format!("profile-{rank:05}.json")),
            "{names:?}"
        );
    }
    let report = std::process::Command::new(common::evenflush_bin())
        .args(["report", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    for (name, n) in &recorded_calls(&exp) {
        let row = report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} missing from the profile report"));
        assert_eq!(&row["count"], n, "{name} ({})", mpi.name());
    }
}
