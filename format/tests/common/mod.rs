#![allow(dead_code)] // each test binary uses a different subset

use format::*;
use proptest::prelude::*;

pub fn header(rank: u32) -> FileHeader {
    FileHeader {
        rank,
        world_size: 64,
        part: 0,
        clock: ClockCalibration {
            ticks_per_sec: 2.1e9,
            tick_at_epoch: 123_456_789,
            realtime_ns: 1_700_000_000_000_000_000,
            source: ClockSource::Tsc,
            // Not 0, so the round trip shows the field is kept.
            read_ticks: 25,
        },
        created_unix_ns: 1_700_000_000_123_456_789,
        producer: "format tests".to_owned(),
    }
}

pub fn raw_of(events: &[Event]) -> RawBuf {
    let mut buf = RawBuf::new();
    for e in events {
        buf.push_event(e);
    }
    buf
}

/// Writes one chunk per group (stream = group index % 3) and returns the file bytes and the
/// offset where each chunk starts, plus the file length after each chunk.
pub fn write_file(groups: &[Vec<Event>], level: Option<i32>) -> (Vec<u8>, Vec<usize>) {
    let mut enc = match level {
        Some(l) => ChunkEncoder::new(l),
        None => ChunkEncoder::uncompressed(),
    };
    let mut w = RankFileWriter::new(Vec::new(), &header(7)).unwrap();
    let mut ends = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let chunk = enc.encode(7, (i % 3) as u32, i as u64, &raw_of(g));
        w.write_chunk(&chunk).unwrap();
        ends.push(w.bytes_written() as usize);
    }
    (w.into_inner(), ends)
}

fn finite() -> impl Strategy<Value = f64> {
    -1e15f64..1e15
}

pub fn arb_call() -> impl Strategy<Value = MpiCall> {
    (
        any::<u16>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<i32>(),
        any::<i32>(),
        any::<u64>(),
        any::<i32>(),
        any::<u64>(),
        any::<u32>(),
        // Mostly absent, as on every non-collective call.
        prop_oneof![3 => Just(0u64), 1 => any::<u64>()],
        prop_oneof![3 => Just(NO_SITE), 1 => any::<u32>()],
    )
        .prop_map(
            |(func, start, end, comm, peer, tag, bytes, root, request, cost, recv_bytes, site)| {
                MpiCall {
                    func,
                    start,
                    end,
                    comm,
                    peer,
                    tag,
                    bytes,
                    root,
                    request,
                    cost,
                    recv_bytes,
                    site,
                }
            },
        )
}

pub fn arb_completion() -> impl Strategy<Value = Completion> {
    (
        any::<u64>(),
        any::<i32>(),
        any::<i32>(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(request, source, tag, bytes, cancelled)| Completion {
            request,
            source,
            tag,
            bytes,
            cancelled,
        })
}

pub fn arb_marker() -> impl Strategy<Value = Marker> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(time, bytes)| Marker::LocalFlush { time, bytes }),
        any::<u64>().prop_map(|time| Marker::RecordingStopped { time }),
        (any::<u64>(), any::<u64>()).prop_map(|(time, events)| Marker::Lost { time, events }),
        (any::<u64>(), any::<i32>())
            .prop_map(|(time, signal)| Marker::AbnormalEnd { time, signal }),
        any::<u64>().prop_map(|time| Marker::InitDone { time }),
        any::<u64>().prop_map(|time| Marker::FinalizeStart { time }),
        (
            any::<u64>(),
            any::<u16>(),
            any::<u64>(),
            any::<u32>(),
            any::<i32>(),
            any::<i32>()
        )
            .prop_map(|(time, func, elapsed_ns, comm, peer, tag)| Marker::Stuck {
                time,
                func,
                elapsed_ns,
                comm,
                peer,
                tag,
            }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(time, raw_bytes, stored_bytes)| {
            Marker::Compressed {
                time,
                raw_bytes,
                stored_bytes,
            }
        }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(time, available, needed)| {
            Marker::MemoryLow {
                time,
                available,
                needed,
            }
        }),
    ]
}

pub fn arb_suspension() -> impl Strategy<Value = Suspension> {
    (
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (finite(), finite(), finite()),
    )
        .prop_map(
            |(
                (seq, start, z_ns, end, flushed),
                (bytes_raw, bytes_stored, write_ns, overshoot_ns, w_ns),
                (m_ns, d_ns, offset_ns),
            )| Suspension {
                seq,
                start,
                z_ns,
                end,
                flushed,
                bytes_raw,
                bytes_stored,
                write_ns,
                overshoot_ns,
                w_ns,
                m_ns,
                d_ns,
                offset_ns,
            },
        )
}

pub fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        8 => arb_call().prop_map(Event::Call),
        5 => arb_completion().prop_map(Event::Completion),
        1 => (any::<u64>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(time, name, payload)| Event::User(UserRecord { time, name, payload })),
        1 => (any::<u64>(), any::<u32>(), any::<bool>())
            .prop_map(|(time, name, begin)| Event::Region(Region { time, name, begin })),
        1 => arb_suspension().prop_map(|s| Event::Suspension(Box::new(s))),
        1 => (any::<u32>(), proptest::collection::vec(any::<u32>(), 0..40))
            .prop_map(|(id, members)| Event::CommDef { id, members }),
        1 => (any::<u64>(), finite(), finite(), 0u8..3).prop_map(|(local, offset_ns, rtt_ns, w)| {
            let when = [SampleKind::Init, SampleKind::Suspension, SampleKind::Finalize][w as usize];
            Event::Clock(ClockSample { local, offset_ns, rtt_ns, when })
        }),
        1 => (any::<u32>(), ".{0,40}").prop_map(|(id, text)| Event::StringDef { id, text }),
        1 => (any::<u16>(), "[A-Za-z_]{0,30}").prop_map(|(id, name)| Event::FunctionDef { id, name }),
        1 => arb_marker().prop_map(Event::Marker),
        1 => arb_rank_info().prop_map(|i| Event::RankInfo(Box::new(i))),
        1 => arb_writer_used().prop_map(Event::Writer),
        1 => arb_memory_sample().prop_map(Event::Memory),
        1 => (any::<u64>(), any::<u64>(), 0usize..4, any::<u64>(), any::<u32>()).prop_map(
            |(time, bytes, basis, available, ranks_on_node)| Event::Threshold(ThresholdChoice {
                time,
                bytes,
                basis: [
                    ThresholdBasis::Fixed,
                    ThresholdBasis::Cgroup,
                    ThresholdBasis::Node,
                    ThresholdBasis::Unknown,
                ][basis],
                available,
                ranks_on_node,
            })
        ),
        1 => arb_poll_run().prop_map(Event::Polls),
        1 => (any::<u32>(), any::<u64>(), any::<u64>(), ".{0,60}").prop_map(
            |(id, address, base, file)| Event::CallSite(CallSite { id, address, base, file })
        ),
        1 => (any::<u32>(), proptest::collection::vec(any::<u32>(), 0..8))
            .prop_map(|(win, members)| Event::EpochGroup { win, members }),
        1 => (any::<u32>(), arb_comm_origin()).prop_map(|(id, origin)| Event::CommOrigin { id, origin }),
    ]
}

pub fn arb_comm_origin() -> impl Strategy<Value = CommOrigin> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(parent, index)| CommOrigin::Parent { parent, index }),
        (any::<u32>(), any::<i32>(), any::<u32>())
            .prop_map(|(parent, tag, index)| CommOrigin::Group { parent, tag, index }),
        (".{0,40}", any::<u32>()).prop_map(|(tag, index)| CommOrigin::Tagged { tag, index }),
    ]
}

pub fn arb_poll_run() -> impl Strategy<Value = PollRun> {
    (
        (any::<u16>(), any::<u32>(), any::<i32>(), any::<i32>()),
        proptest::array::uniform5(any::<u64>()),
        any::<u32>(),
    )
        .prop_map(|((func, comm, peer, tag), v, cost)| PollRun {
            func,
            comm,
            peer,
            tag,
            start: v[0],
            end: v[1],
            count: v[2],
            busy: v[3],
            inner_cost: v[4],
            cost,
        })
}

pub fn arb_memory_sample() -> impl Strategy<Value = MemorySample> {
    (proptest::array::uniform8(any::<u64>()), 0usize..7).prop_map(|(v, when)| MemorySample {
        time: v[0],
        rss_bytes: v[1],
        recorder_bytes: v[2],
        compressed_bytes: v[3],
        node_available: v[4],
        cgroup_limit: v[5],
        cgroup_usage: v[6],
        swap_out_pages: v[7],
        when: [
            MemoryWhen::Init,
            MemoryWhen::Suspension,
            MemoryWhen::Periodic,
            MemoryWhen::Finalize,
            MemoryWhen::Compressed,
            MemoryWhen::Idle,
            MemoryWhen::NodeWatcher,
        ][when],
    })
}

pub fn arb_rank_info() -> impl Strategy<Value = RankInfo> {
    (
        (any::<u32>(), any::<u32>(), any::<u32>()),
        (".{0,40}", ".{0,60}", ".{0,40}"),
    )
        .prop_map(
            |((rank, world_size, pid), (host, mpi_library, run_id))| RankInfo {
                rank,
                world_size,
                pid,
                host,
                mpi_library,
                run_id,
            },
        )
}

pub fn arb_writer_used() -> impl Strategy<Value = WriterUsed> {
    let writers = [WriterId::Posix, WriterId::Uring, WriterId::MpiIo];
    let changes = [
        WriterChange::Opened,
        WriterChange::Fallback,
        WriterChange::FinalizeHandover,
    ];
    (0usize..3, 0usize..3, 0usize..3, any::<u32>(), ".{0,80}").prop_map(
        move |(requested, used, change, part, reason)| WriterUsed {
            requested: writers[requested],
            used: writers[used],
            change: changes[change],
            part,
            reason,
        },
    )
}

/// Every event of a file, with the tail and any error, without ever panicking.
pub fn read_everything(
    file: &RankFile,
) -> (Vec<Vec<Event>>, Option<Truncation>, Option<FormatError>) {
    let mut chunks = file.chunks();
    let mut out = Vec::new();
    let mut error = None;
    for c in chunks.by_ref() {
        match c {
            Ok(c) => out.push(c.events().collect()),
            Err(e) => error = Some(e),
        }
    }
    (out, chunks.tail().cloned(), error)
}
