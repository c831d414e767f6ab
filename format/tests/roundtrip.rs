mod common;

use common::*;
use format::framing::TailKind;
use format::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Reconstruction's buffer of decoded events fills the columns its own way (a block's values
    /// at once); the recorder's visits its records one by one. Any events, any block size: the
    /// same bytes, which read back as the events.
    #[test]
    fn both_buffers_encode_any_events_to_the_same_bytes(
        events in proptest::collection::vec(arb_event(), 0..300),
        block in prop_oneof![1usize..20, 20usize..400],
    ) {
        let raw = raw_of(&events);
        let mut typed = EventBuf::new();
        for e in &events {
            typed.push(e);
        }
        let a = ChunkEncoder::uncompressed().with_block_events(block).encode(2, 1, 5, &raw);
        let b = ChunkEncoder::uncompressed().with_block_events(block).encode_events(2, 1, 5, &typed);
        prop_assert_eq!(&a.bytes, &b.bytes);
        prop_assert_eq!((a.first_ts, a.last_ts, a.events), (b.first_ts, b.last_ts, b.events));
        let c = ChunkEncoder::new(1).with_block_events(block).encode_events(2, 1, 5, &typed);
        let back: Result<Vec<Vec<Event>>, FormatError> =
            format::reader::ChunkReader::new(&c.bytes, 0, "mem".as_ref())
                .map(|chunk| chunk.map(|c| c.events().collect()))
                .collect();
        let back = back.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.concat(), events);
    }

    #[test]
    fn raw_buffer_gives_back_what_was_pushed(
        events in proptest::collection::vec(arb_event(), 0..200),
        block in 70usize..2048,
    ) {
        let mut buf = RawBuf::with_block_size(block);
        for e in &events {
            buf.push_event(e);
        }
        prop_assert_eq!(buf.events(), events.len() as u64);
        prop_assert_eq!(buf.is_empty(), events.is_empty());
        prop_assert!(buf.capacity_bytes() >= buf.bytes());
        let block_bytes: usize = buf.blocks().map(<[u8]>::len).sum();
        prop_assert_eq!(block_bytes, buf.bytes());
        let back: Vec<Event> = buf.iter().collect();
        prop_assert_eq!(&back, &events);
        buf.clear();
        prop_assert!(buf.is_empty());
        prop_assert_eq!(buf.bytes(), 0);
        prop_assert_eq!(buf.iter().count(), 0);
    }

    #[test]
    fn splitting_a_buffer_into_pieces_keeps_every_event_in_order(
        events in proptest::collection::vec(arb_event(), 0..300),
        block in 70usize..1024,
        piece in 0usize..4096,
    ) {
        let mut buf = RawBuf::with_block_size(block);
        for e in &events {
            buf.push_event(e);
        }
        let total_bytes = buf.bytes();
        let mut back = Vec::new();
        let mut pieces_bytes = 0;
        while !buf.is_empty() {
            let before = (buf.events(), buf.bytes());
            let front = buf.split_front(piece);
            prop_assert!(!front.is_empty(), "every split makes progress");
            prop_assert_eq!(front.events() + buf.events(), before.0);
            prop_assert_eq!(front.bytes() + buf.bytes(), before.1);
            // A piece exceeds the limit only when it is a single block.
            prop_assert!(front.bytes() <= piece || front.blocks().count() == 1);
            prop_assert_eq!(front.iter().count() as u64, front.events());
            pieces_bytes += front.bytes();
            back.extend(front.iter());
        }
        prop_assert_eq!(pieces_bytes, total_bytes);
        prop_assert_eq!(&back, &events);
        buf.push_event(&Event::Marker(Marker::InitDone { time: 1 }));
        prop_assert_eq!(buf.events(), 1);
    }

    #[test]
    fn file_gives_back_every_chunk_and_event(
        groups in proptest::collection::vec(proptest::collection::vec(arb_event(), 0..120), 0..6),
        compressed in any::<bool>(),
    ) {
        let (bytes, ends) = write_file(&groups, compressed.then_some(3));
        let file = RankFile::from_bytes(bytes.clone(), "roundtrip.evf").unwrap();
        prop_assert_eq!(file.header(), &header(7));
        let mut chunks = file.chunks();
        let mut seen = 0usize;
        for (i, c) in chunks.by_ref().enumerate() {
            let c = c.unwrap();
            prop_assert_eq!(c.seq(), i as u64);
            prop_assert_eq!(c.stream(), (i % 3) as u32);
            prop_assert_eq!(c.rank(), 7);
            prop_assert_eq!(c.event_count(), groups[i].len() as u64);
            let events: Vec<Event> = c.events().collect();
            prop_assert_eq!(&events, &groups[i]);
            seen += 1;
        }
        prop_assert_eq!(seen, groups.len());
        prop_assert!(chunks.tail().is_none());
        prop_assert_eq!(chunks.offset() as usize, *ends.last().unwrap_or(&(bytes.len())));
        let flat: Vec<Event> = file.events().map(Result::unwrap).collect();
        let expected: Vec<Event> = groups.concat();
        prop_assert_eq!(flat, expected);
    }
}

#[test]
fn huge_user_payloads_survive_buffer_and_file() {
    let mut payload = vec![0u8; 5 << 20];
    let mut x = 0x1234_5678u32;
    for (i, b) in payload.iter_mut().enumerate() {
        // Half noise, half runs: exercises both stored-raw and compressed paths inside zstd.
        if i % 2 == 0 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
    }
    let call = MpiCall {
        func: 3,
        start: 10,
        end: 20,
        ..MpiCall::default()
    };
    let events = vec![
        Event::Call(call),
        Event::User(UserRecord {
            time: 15,
            name: 2,
            payload: payload.clone(),
        }),
        Event::User(UserRecord {
            time: 16,
            name: 3,
            payload: Vec::new(),
        }),
        Event::Call(MpiCall {
            start: 30,
            end: 40,
            ..call
        }),
    ];
    let buf = raw_of(&events);
    assert!(buf.bytes() > payload.len());
    assert_eq!(buf.iter().collect::<Vec<_>>(), events);
    for level in [None, Some(1)] {
        let (bytes, _) = write_file(std::slice::from_ref(&events), level);
        let file = RankFile::from_bytes(bytes, "huge.evf").unwrap();
        let (chunks, tail, err) = read_everything(&file);
        assert!(err.is_none() && tail.is_none(), "{err:?} {tail:?}");
        assert_eq!(chunks, vec![events.clone()]);
    }
}

#[test]
fn empty_buffer_makes_a_valid_empty_chunk() {
    let mut enc = ChunkEncoder::new(3);
    let chunk = enc.encode(1, 2, 3, &RawBuf::new());
    assert_eq!(chunk.events, 0);
    assert_eq!((chunk.first_ts, chunk.last_ts), (0, 0));
    let mut w = RankFileWriter::new(Vec::new(), &header(1)).unwrap();
    w.write_chunk(&chunk).unwrap();
    let file = RankFile::from_bytes(w.into_inner(), "empty.evf").unwrap();
    let chunks: Vec<_> = file.chunks().map(Result::unwrap).collect();
    assert_eq!(chunks.len(), 1);
    assert_eq!(
        (chunks[0].stream(), chunks[0].seq(), chunks[0].event_count()),
        (2, 3, 0)
    );
    assert_eq!(chunks[0].events().count(), 0);
}

#[test]
fn chunk_metadata_matches_its_events() {
    let cfg = synthetic::HaloConfig {
        iterations: 50,
        ..Default::default()
    };
    let events = synthetic::events(&cfg);
    let buf = raw_of(&events);
    let mut encoder = ChunkEncoder::new(3);
    let chunk = encoder.encode(5, 0, 0, &buf);
    assert!(encoder.scratch_bytes() >= chunk.raw_len as usize);
    encoder.release_scratch();
    assert_eq!(encoder.scratch_bytes(), 0);
    assert_eq!(
        encoder.encode(5, 0, 0, &buf).bytes,
        chunk.bytes,
        "encoding is deterministic"
    );
    assert_eq!(chunk.events, events.len() as u64);
    let times: Vec<u64> = events
        .iter()
        .flat_map(|e| match e {
            Event::Call(c) => vec![c.start, c.end],
            Event::Marker(Marker::InitDone { time } | Marker::FinalizeStart { time }) => {
                vec![*time]
            }
            _ => vec![],
        })
        .collect();
    assert_eq!(chunk.first_ts, *times.iter().min().unwrap());
    assert_eq!(chunk.last_ts, *times.iter().max().unwrap());
    assert_eq!(
        chunk.stored_len as usize + format::framing::CHUNK_HEADER_LEN,
        chunk.bytes.len()
    );
}

#[test]
fn synthetic_stream_compresses_below_four_and_a_half_bytes_per_call() {
    let cfg = synthetic::HaloConfig {
        iterations: 5_000,
        ..Default::default()
    };
    let events = synthetic::events(&cfg);
    let calls = events
        .iter()
        .filter(|e| matches!(e, Event::Call(_)))
        .count();
    let buf = raw_of(&events);
    let chunk = ChunkEncoder::new(format::chunk::DEFAULT_LEVEL).encode(5, 0, 0, &buf);
    let per_call = chunk.stored_len as f64 / calls as f64;
    // Chunk version 9 compresses each block of 4096 events on its own, which costs this very
    // repetitive stream about a quarter more bytes than one frame per chunk (4.04 against ~3.2;
    // paper-notes/reconstruct-speed.md, "Blocks").
    assert!(per_call <= 4.5, "{per_call:.2} stored bytes per call");
    let file = RankFile::from_bytes(
        write_file(std::slice::from_ref(&events), Some(3)).0,
        "syn.evf",
    )
    .unwrap();
    assert_eq!(
        file.events().map(Result::unwrap).collect::<Vec<_>>(),
        events
    );
}

#[test]
fn buffer_growth_never_moves_recorded_blocks() {
    let mut buf = RawBuf::with_block_size(4096);
    let call = MpiCall {
        func: 1,
        start: 5,
        end: 6,
        ..MpiCall::default()
    };
    buf.push_call(&call);
    let first_block = buf.blocks().next().unwrap().as_ptr();
    for i in 0..10_000u64 {
        buf.push_call(&MpiCall { start: i, ..call });
        buf.push_completion(&Completion {
            request: i,
            ..Completion::default()
        });
    }
    assert_eq!(buf.blocks().next().unwrap().as_ptr(), first_block);
    assert!(buf.blocks().count() > 20);
    assert!(buf.blocks().all(|b| b.len() <= 4096));
    assert_eq!(buf.bytes(), buf.blocks().map(<[u8]>::len).sum::<usize>());
    assert_eq!(buf.iter().count(), 20_001);
    buf.clear();
    assert_eq!(buf.capacity_bytes(), 4096, "clear keeps exactly one block");
    buf.push_call(&call);
    assert_eq!(buf.iter().collect::<Vec<_>>(), vec![Event::Call(call)]);
}

/// The in-memory size sets how often a program pauses to flush: the target is 16 bytes
/// per MPI event (calls and completions) on a realistic stream, against 55 for the old layout.
#[test]
fn mpi_events_take_at_most_16_bytes_in_memory() {
    let events = synthetic::events(&synthetic::HaloConfig {
        iterations: 200,
        ..Default::default()
    });
    let mut buf = RawBuf::new();
    let mut mpi_events = 0usize;
    for e in &events {
        if matches!(e, Event::Call(_) | Event::Completion(_)) {
            buf.push_event(e);
            mpi_events += 1;
        }
    }
    assert!(mpi_events > 1000);
    let per_event = buf.bytes() as f64 / mpi_events as f64;
    assert!(per_event <= 16.0, "{per_event:.1} bytes per MPI event");
    let back: Vec<Event> = buf.iter().collect();
    let want: Vec<Event> = events
        .into_iter()
        .filter(|e| matches!(e, Event::Call(_) | Event::Completion(_)))
        .collect();
    assert_eq!(back, want);
}

#[test]
fn rank_files_on_disk_are_found_and_read() {
    let dir = std::env::temp_dir().join(format!("evf-format-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let events = synthetic::events(&synthetic::HaloConfig {
        iterations: 20,
        ..Default::default()
    });
    let (bytes, _) = write_file(std::slice::from_ref(&events), Some(3));
    for name in [
        "rank-00002.evf",
        "rank-00001.p2.evf",
        "rank-00001.evf",
        "rank-00001.p1.evf",
        "notes.txt",
        "rank-1.evf",
    ] {
        std::fs::write(dir.join(name), &bytes).unwrap();
    }
    std::fs::write(dir.join("rank-00003.evf"), b"").unwrap();
    let found: Vec<(u32, u32)> = open_dir(&dir)
        .unwrap()
        .iter()
        .map(|e| (e.rank, e.part))
        .collect();
    assert_eq!(found, vec![(1, 0), (1, 1), (1, 2), (2, 0), (3, 0)]);
    let file = RankFile::open(dir.join("rank-00001.p1.evf")).unwrap();
    assert_eq!(
        file.events().map(Result::unwrap).collect::<Vec<_>>(),
        events
    );
    let empty = RankFile::open(dir.join("rank-00003.evf")).unwrap_err();
    assert!(
        matches!(empty, FormatError::Truncated { offset: 0, .. }),
        "{empty}"
    );
    assert!(empty.to_string().contains("rank-00003.evf"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(rank_file_name(7, 0), "rank-00007.evf");
    assert_eq!(rank_file_name(123_456, 3), "rank-123456.p3.evf");
    assert_eq!(
        reader::parse_rank_file_name("rank-123456.p3.evf"),
        Some((123_456, 3))
    );
    assert_eq!(reader::parse_rank_file_name("rank-00007.p0.evf"), None);
}

#[test]
fn zero_filled_tail_is_reported_and_chunks_kept() {
    let groups: Vec<Vec<Event>> = (0..3)
        .map(|i| {
            synthetic::events(&synthetic::HaloConfig {
                iterations: 5,
                seed: i,
                ..Default::default()
            })
        })
        .collect();
    let (mut bytes, ends) = write_file(&groups, Some(3));
    bytes.extend(std::iter::repeat_n(0u8, 4096));
    let file = RankFile::from_bytes(bytes, "zeros.evf").unwrap();
    let (chunks, tail, err) = read_everything(&file);
    assert!(err.is_none());
    assert_eq!(chunks, groups);
    let tail = tail.unwrap();
    assert_eq!(tail.kind, TailKind::ZeroFilled);
    assert_eq!(tail.offset as usize, *ends.last().unwrap());
}

/// What folding a sequence of calls should give: consecutive idle polls that continue each other
/// become one run, everything else stays as it was.
fn folded(calls: &[(MpiCall, bool)]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    let mut open = false;
    for (c, idle) in calls {
        if *idle {
            if let (true, Some(Event::Polls(run))) = (open, out.last_mut())
                && run.continued_by(c)
            {
                run.end = c.end;
                run.count += 1;
                run.busy += c.end.saturating_sub(c.start);
                run.inner_cost += u64::from(run.cost);
                run.cost = c.cost;
                continue;
            }
            out.push(Event::Polls(PollRun::of(c)));
            open = true;
        } else {
            out.push(Event::Call(*c));
            open = false;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Block size large enough that no block boundary splits a run (a boundary starts a new run,
    /// which is still correct but not what `folded` predicts).
    #[test]
    fn idle_polls_fold_into_runs(
        steps in proptest::collection::vec((0u16..3, 0u32..2, any::<bool>(), 1u64..500, 0u32..90), 0..300),
    ) {
        let mut buf = RawBuf::with_block_size(1 << 20);
        let mut t = 1_000u64;
        let mut calls = Vec::new();
        for (func, comm, idle, len, cost) in steps {
            let c = MpiCall { func, comm, start: t, end: t + len, cost, peer: 1, tag: 2, ..MpiCall::default() };
            t += len + 100;
            calls.push((c, idle));
            if idle {
                buf.push_idle_poll(&c);
            } else {
                buf.push_call(&c);
            }
        }
        let want = folded(&calls);
        prop_assert_eq!(buf.events(), want.len() as u64);
        prop_assert_eq!(buf.iter().collect::<Vec<_>>(), want);
    }
}

#[test]
fn a_poll_run_ends_at_a_block_boundary_and_at_any_other_record() {
    let mut buf = RawBuf::with_block_size(200);
    let poll = |i: u64| MpiCall {
        func: 9,
        start: 100 * i,
        end: 100 * i + 10,
        cost: 3,
        ..MpiCall::default()
    };
    assert!(buf.push_idle_poll(&poll(0)));
    assert!(!buf.push_idle_poll(&poll(1)));
    buf.push_event(&Event::Marker(Marker::InitDone { time: 250 }));
    assert!(buf.push_idle_poll(&poll(3)), "a marker closes the run");
    for i in 4..40 {
        buf.push_call(&MpiCall { func: 1, ..poll(i) });
    }
    assert!(buf.push_idle_poll(&poll(40)));
    let runs: Vec<PollRun> = buf
        .iter()
        .filter_map(|e| match e {
            Event::Polls(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(runs.len(), 3);
    assert_eq!(
        (
            runs[0].count,
            runs[0].start,
            runs[0].end,
            runs[0].busy,
            runs[0].inner_cost
        ),
        (2, 0, 110, 20, 3)
    );
    assert_eq!((runs[1].count, runs[2].count), (1, 1));
    assert!(buf.blocks().count() > 2);
}
