//! The profile's accumulation, merging and round trip, and the report built from it.

use super::*;
use format::{Event, Marker, MpiCall};

#[test]
fn size_bins_follow_powers_of_two() {
    assert_eq!(size_bin(0), 0);
    assert_eq!(size_bin(1), 0);
    assert_eq!(size_bin(2), 1);
    assert_eq!(size_bin(3), 1);
    assert_eq!(size_bin(1024), 10);
    assert_eq!(size_bin((4 << 20) - 1), 21);
    assert_eq!(size_bin(4 << 20), 22);
    assert_eq!(size_bin((8 << 20) - 1), 22);
    assert_eq!(size_bin(8 << 20), 23);
    assert_eq!(size_bin(u64::MAX), 23);
    assert_eq!(size_bin_label(22), "4MiB");
    assert_eq!(size_bin_label(23), ">=8MiB");
}

fn call(func: u16, start: u64, end: u64, peer: i32, bytes: u64, cost: u32) -> Event {
    Event::Call(MpiCall {
        func,
        start,
        end,
        comm: 0,
        peer,
        tag: 0,
        bytes,
        root: -1,
        request: 0,
        cost,
        recv_bytes: 0,
        site: format::NO_SITE,
    })
}

#[test]
fn stats_accumulate_merge_and_round_trip() {
    let mut p = ProfileStats::new(1, 3, 2.0);
    p.add_event(
        0,
        &Event::FunctionDef {
            id: 4,
            name: "MPI_Send".into(),
        },
    );
    p.add_event(
        0,
        &Event::FunctionDef {
            id: 5,
            name: "MPI_Recv".into(),
        },
    );
    p.add_event(0, &Event::Marker(Marker::InitDone { time: 10 }));
    p.add_event(0, &call(4, 100, 110, 2, 8, 1));
    p.add_event(0, &call(4, 200, 230, 0, 3000, 1));
    p.add_event(0, &call(5, 300, 400, 0, 64, 1));
    p.add_event(
        0,
        &Event::Completion(format::Completion {
            request: 0,
            source: 0,
            tag: 0,
            bytes: 40,
            cancelled: false,
        }),
    );
    p.add_event(0, &Event::Marker(Marker::FinalizeStart { time: 1010 }));
    p.finish();
    let send = &p.functions["MPI_Send"];
    assert_eq!(send.count, 2);
    assert_eq!(send.total_ns, 80.0);
    assert_eq!((send.min_ns, send.max_ns), (20.0, 60.0));
    assert_eq!(
        (send.bytes_min, send.bytes_max, send.bytes_total),
        (8, 3000, 3008)
    );
    assert_eq!(send.histogram[3], 1);
    assert_eq!(send.histogram[11], 1);
    let recv = &p.functions["MPI_Recv"];
    assert_eq!(recv.recv_count, 1);
    assert_eq!(recv.recv_histogram[5], 1);
    assert_eq!(
        p.partners[&2],
        PartnerStats {
            messages: 1,
            bytes: 8
        }
    );
    assert_eq!(
        p.partners[&0],
        PartnerStats {
            messages: 1,
            bytes: 3000
        }
    );
    assert_eq!(p.span_ns, Some(2000.0));
    assert_eq!(p.mpi_in_span_ns, 280.0);
    assert_eq!(p.mean_cost_ns(), 2.0);

    let back = ProfileStats::from_json(&p.to_json()).unwrap();
    assert_eq!(back.functions, p.functions);
    assert_eq!(back.partners, p.partners);
    let mut merged = back.clone();
    merged.merge(&p);
    assert_eq!(merged.functions["MPI_Send"].count, 4);
    assert_eq!(merged.functions["MPI_Send"].min_ns, 20.0);
    assert_eq!(merged.partners[&0].bytes, 6000);

    let report = Report::build("test", &[p]);
    assert_eq!(report.partners.get(1, 2).messages, 1);
    assert_eq!(report.partners.get(1, 0).bytes, 3000);
    assert_eq!(report.partners.get(2, 1), PartnerStats::default());
    assert_eq!(report.functions[0].name, "MPI_Recv");
    // Mean times 40 ns / 200 ns against a typical cost of ~1.4 ns: no warning.
    assert!(report.functions.iter().all(|f| !f.handle_with_care));
    let csv = report.to_csv();
    assert_eq!(csv.lines().count(), 3);
    assert_eq!(
        csv.lines().next().unwrap().split(',').count(),
        11 + 2 * SIZE_BINS
    );
}

#[test]
fn intercommunicator_peers_are_ranks_of_the_remote_group() {
    // Rank 1 of 4 on an intercommunicator between world ranks {0, 1} and {2, 3}: its peer 1
    // is world rank 3, not its own group's rank 1 (itself).
    let mut p = ProfileStats::new(1, 4, 1.0);
    p.add_event(
        0,
        &Event::FunctionDef {
            id: 1,
            name: "MPI_Send".into(),
        },
    );
    p.add_event(
        0,
        &Event::CommDef {
            id: 5,
            members: vec![0, 1],
        },
    );
    p.add_event(
        0,
        &Event::RemoteGroup {
            id: 5,
            members: vec![2, 3],
        },
    );
    let mut send = match call(1, 0, 10, 1, 8, 1) {
        Event::Call(c) => c,
        _ => unreachable!(),
    };
    send.comm = 5;
    p.add_event(0, &Event::Call(send));
    p.finish();
    assert_eq!(p.partners.keys().copied().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn collectives_get_what_arrived() {
    let coll = |func: u16, bytes: u64, root: i32| {
        let mut c = match call(func, 0, 10, -1, bytes, 1) {
            Event::Call(c) => c,
            _ => unreachable!(),
        };
        c.root = root;
        Event::Call(c)
    };
    // Rank 1 of 4; communicator 9 holds world ranks 3 and 1, so rank 1 is its rank 1.
    let mut p = ProfileStats::new(1, 4, 1.0);
    for (id, name) in [
        (1, "MPI_Gather"),
        (2, "MPI_Bcast"),
        (3, "MPI_Allgather"),
        (4, "MPI_Gatherv"),
    ] {
        p.add_event(
            0,
            &Event::FunctionDef {
                id,
                name: name.into(),
            },
        );
    }
    p.add_event(
        0,
        &Event::CommDef {
            id: 9,
            members: vec![3, 1],
        },
    );
    p.add_event(0, &coll(1, 16, 1)); // root of a world gather: 4 x 16 arrive
    p.add_event(0, &coll(1, 16, 0)); // not the root: nothing arrives
    p.add_event(0, &coll(2, 8, 0)); // broadcast from another rank: 8 arrive
    p.add_event(0, &coll(2, 8, 1)); // our own broadcast: nothing arrives
    let mut on_comm = match coll(3, 4, -1) {
        Event::Call(c) => c,
        _ => unreachable!(),
    };
    on_comm.comm = 9;
    p.add_event(0, &Event::Call(on_comm)); // allgather on 2 ranks: 2 x 4 arrive
    p.add_event(0, &coll(4, 4, 1)); // gatherv: not derivable
    let mut recorded = match coll(4, 4, 1) {
        Event::Call(c) => c,
        _ => unreachable!(),
    };
    recorded.recv_bytes = 40;
    p.add_event(0, &Event::Call(recorded)); // gatherv recorded since chunk version 6
    p.finish();
    let f = &p.functions;
    assert_eq!(f["MPI_Gather"].recv_count, 1);
    assert_eq!(f["MPI_Gather"].recv_bytes_total, 64);
    assert_eq!(f["MPI_Gather"].recv_histogram[size_bin(64)], 1);
    assert_eq!(
        (f["MPI_Bcast"].recv_count, f["MPI_Bcast"].recv_bytes_total),
        (1, 8)
    );
    assert_eq!(f["MPI_Allgather"].recv_bytes_total, 8);
    assert_eq!(
        (
            f["MPI_Gatherv"].recv_count,
            f["MPI_Gatherv"].recv_bytes_total
        ),
        (1, 40)
    );
    // The call's own size stays in the first histogram.
    assert_eq!(f["MPI_Gather"].histogram[size_bin(16)], 2);
}

#[test]
fn cheap_functions_are_flagged() {
    let mut p = ProfileStats::new(0, 1, 1.0);
    p.add_event(
        0,
        &Event::FunctionDef {
            id: 1,
            name: "MPI_Comm_rank".into(),
        },
    );
    p.add_event(
        0,
        &Event::FunctionDef {
            id: 2,
            name: "MPI_Barrier".into(),
        },
    );
    p.add_event(0, &call(1, 0, 10, -1, 0, 100));
    p.add_event(0, &call(2, 0, 10_000, -1, 0, 100));
    // One very expensive call must not raise the bar for every function.
    p.add_event(0, &call(2, 0, 10_000, -1, 0, 50_000_000));
    let r = Report::build("t", &[p]);
    let care: Vec<&str> = r
        .functions
        .iter()
        .filter(|f| f.handle_with_care)
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(care, ["MPI_Comm_rank"]);
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
}
