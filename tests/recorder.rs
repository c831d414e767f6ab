//! The recorder on real `mpirun` jobs, under Open MPI and MPICH: exact call counts, world-rank peers,
//! tags, bytes, matched requests and resolved sources, and unchanged program output.

mod common;

use common::{Mpi, expected, info_json, mpi_lock, read_trace, run_plain, run_traced, scratch};
use format::{ANY_SOURCE, Event};

/// Runs a bundled program plain and traced (`--mode off`), checks identical stdout and the exact
/// per-function call counts of expected.json, and returns the trace directory.
fn traced_with_exact_counts(mpi: Mpi, program: &str) -> std::path::PathBuf {
    let exp = expected(program);
    let ranks = exp["ranks"].as_u64().unwrap() as u32;
    let args: Vec<String> = exp["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _guard = mpi_lock();
    let plain = run_plain(mpi, ranks, program, &args);
    let out = scratch(&format!("{program}-{}", mpi.name()));
    let traced = run_traced(mpi, ranks, program, &args, &out, &["--mode", "off"]);
    assert_eq!(plain, traced, "{program} prints something else under the recorder ({})", mpi.name());

    let info = info_json(&out);
    assert_eq!(info["ranks"], ranks, "{program} {}", mpi.name());
    assert_eq!(info["lost_events"], 0, "{program} {}", mpi.name());
    let calls = exp["calls"].as_object().unwrap();
    let got = info["functions"].as_object().unwrap();
    assert_eq!(got, calls, "{program} ({}): per-function call counts differ", mpi.name());
    out
}

fn ring(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "ring");
    let trace = read_trace(&out);
    let p = trace.len() as u32;
    for r in &trace {
        let sends = r.calls("MPI_Send");
        assert_eq!(sends.len(), 100);
        for s in &sends {
            assert_eq!(r.world(s.comm, s.peer), (r.rank + 1) % p);
            assert_eq!(s.tag, 7);
            assert_eq!(s.bytes, 128);
            assert!(s.end >= s.start);
        }
        for recv in r.calls("MPI_Recv") {
            assert_eq!(r.world(recv.comm, recv.peer), (r.rank + p - 1) % p);
        }
    }
}

fn halo(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "halo");
    let trace = read_trace(&out);
    for r in &trace {
        // Every request created by Isend/Irecv is completed exactly once by a later Waitall.
        let mut open = std::collections::HashSet::new();
        let mut completed = 0;
        for e in r.all() {
            match e {
                Event::Call(c) if matches!(r.name(c.func), "MPI_Isend" | "MPI_Irecv") => {
                    assert_ne!(c.request, 0, "rank {}: {} without a request id", r.rank, r.name(c.func));
                    assert!(open.insert(c.request), "request id {} reused while open", c.request);
                }
                Event::Completion(done) => {
                    assert!(open.remove(&done.request), "rank {}: completion of unknown request {}", r.rank, done.request);
                    completed += 1;
                }
                _ => {}
            }
        }
        assert!(open.is_empty(), "rank {}: {} requests never completed", r.rank, open.len());
        assert_eq!(completed, 40 * 4);
    }
}

fn anysource(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "anysource");
    let trace = read_trace(&out);
    let root = trace.iter().find(|r| r.rank == 0).unwrap();
    // Every receive posted with MPI_ANY_SOURCE has its real source in the trace, in world ranks.
    let mut sources = Vec::new();
    let events: Vec<&Event> = root.all().collect();
    for (i, e) in events.iter().enumerate() {
        if let Event::Call(c) = e {
            if c.peer != ANY_SOURCE {
                continue;
            }
            match root.name(c.func) {
                "MPI_Recv" => match events.get(i + 1) {
                    Some(Event::Completion(done)) => sources.push(root.world(c.comm, done.source)),
                    other => panic!("MPI_Recv(ANY_SOURCE) not followed by its status: {other:?}"),
                },
                "MPI_Irecv" => {}
                name => panic!("unexpected ANY_SOURCE call {name}"),
            }
        }
        if let Event::Completion(done) = e
            && done.source >= 0
            && let Some(Event::Call(w)) = events[..i].iter().rev().find(|e| matches!(e, Event::Call(_)))
            && root.name(w.func) == "MPI_Wait"
        {
            sources.push(root.world(0, done.source));
        }
    }
    sources.sort();
    // Four phases, each receiving once from each of ranks 1..3.
    assert_eq!(sources, vec![1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3], "resolved sources");
}

fn split(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "split");
    let trace = read_trace(&out);
    for r in &trace {
        // Peers on the sub-communicators translate to world ranks of the same parity.
        for e in r.all() {
            if let Event::Call(c) = e
                && c.comm != 0
                && c.peer >= 0
                && r.comms.contains_key(&c.comm)
            {
                let world = r.world(c.comm, c.peer);
                assert_eq!(world % 2, r.rank % 2, "rank {}: {} peer {} on comm {}", r.rank, r.name(c.func), world, c.comm);
            }
        }
        let sub: Vec<_> = r.comms.iter().filter(|(id, m)| **id > 1 && m.len() == 2).collect();
        assert!(!sub.is_empty(), "rank {}: no 2-member communicator defined", r.rank);
    }
}

fn user_records(mpi: Mpi) {
    let out = traced_with_exact_counts(mpi, "user_records");
    let info = info_json(&out);
    let exp = expected("user_records");
    let records: u64 = info["user_events"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(records, exp["user_events"]["evenflush_record"].as_u64().unwrap());
    let regions: u64 = info["regions"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(regions, exp["user_events"]["evenflush_region_begin"].as_u64().unwrap());
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
        assert!(r.streams.len() >= 2, "rank {}: events of both threads expected in separate streams", r.rank);
    }
}

macro_rules! for_both_mpis {
    ($($program:ident),*) => {
        mod openmpi {
            $( #[test] fn $program() { super::$program(super::Mpi::OpenMpi) } )*
        }
        mod mpich {
            $( #[test] fn $program() { super::$program(super::Mpi::Mpich) } )*
        }
    };
}

fn collectives(mpi: Mpi) {
    traced_with_exact_counts(mpi, "collectives");
}

fn fortran_ring(mpi: Mpi) {
    traced_with_exact_counts(mpi, "fortran_ring");
}

fn fortran_f08(mpi: Mpi) {
    traced_with_exact_counts(mpi, "fortran_f08");
}

for_both_mpis!(ring, halo, collectives, split, anysource, threads, user_records, fortran_ring, fortran_f08);
