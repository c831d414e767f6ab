//! A call's completions follow its record with nothing between them (FORMAT.md), even when
//! storing the call or a completion takes a new block and the back end writes records of its own
//! then (a memory sample here). Readers take a blocking receive's status from the completion
//! right after it: a sample in between once left MPICH's `threads/pt2pt/ibsend` with a receive
//! of unknown source and a send the check called unmatched. Its own process: the recorder's state
//! is process-wide.

mod common;

use format::{Event, MemoryWhen, RankFile};
use recorder::back::memory::NODE_ELECTED;
use recorder::ffi;
use recorder::front::record::{CallRecord, KIND_RECV, REQ_NEW};
use recorder::functions::id_of;
use std::sync::atomic::Ordering;

fn call(func: &str, peer: i32, tag: i32) -> CallRecord {
    let start = recorder::clock::now();
    CallRecord {
        start,
        end: recorder::clock::now(),
        bytes: 8,
        comm: 0,
        peer,
        tag,
        root: -1,
        func: id_of(func).unwrap(),
        ..CallRecord::default()
    }
}

/// Blocking receives and waits on three receives, enough of them to fill several blocks, with a
/// back-end record asked for at every growth.
fn record_groups(groups: u64) {
    let tb = ffi::evf_rust_thread_buf();
    for i in 0..groups {
        // The next growth, wherever it falls, makes the back end record a sample.
        NODE_ELECTED.store(true, Ordering::Relaxed);
        // SAFETY: pointers to live locals; `tb` is this thread's own buffer.
        unsafe {
            ffi::evf_rec_call(&call("MPI_Recv", -2, -2));
            ffi::evf_rec_completion(tb, 0, 1, 5, 8, 0);
            for r in 0..3 {
                let mut irecv = call("MPI_Irecv", 1, 5);
                irecv.req_handle = 0x1000 + (i * 3 + r) % 64;
                irecv.req_op = REQ_NEW;
                irecv.req_kind = KIND_RECV;
                ffi::evf_rec_call(&irecv);
            }
            ffi::evf_rec_call(&call("MPI_Waitall", -1, -1));
            for r in 0..3 {
                ffi::evf_rec_completion(tb, 0x1000 + (i * 3 + r) % 64, 1, 5, 8, 0);
            }
        }
    }
}

#[test]
fn nothing_comes_between_a_call_and_its_completions() {
    let dir = common::start_session("call-groups", 0, 2);
    ffi::evf_rust_init_done();
    // A thread of its own: its first record, a call, always takes the stream's first block.
    const GROUPS: u64 = 60_000;
    std::thread::spawn(|| record_groups(GROUPS)).join().unwrap();
    ffi::evf_rust_finalize_begin();
    ffi::evf_rust_finalize_end();

    let file = RankFile::open(dir.join("rank-00000.evf")).expect("rank file");
    let mut streams = std::collections::HashMap::new();
    for chunk in file.chunks() {
        let chunk = chunk.expect("valid chunk");
        let stream = streams.entry(chunk.stream()).or_insert_with(Vec::new);
        stream.extend(chunk.events());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let worker = streams
        .values()
        .find(|events| {
            events
                .iter()
                .filter(|e| matches!(e, Event::Call(_)))
                .count()
                > 1000
        })
        .expect("the worker thread's stream");
    let samples = worker
        .iter()
        .filter(|e| matches!(e, Event::Memory(m) if m.when == MemoryWhen::NodeWatcher))
        .count();
    let completions = worker
        .iter()
        .filter(|e| matches!(e, Event::Completion(_)))
        .count();
    assert_eq!(completions as u64, 4 * GROUPS, "completions lost");
    // Otherwise nothing tried to come between: the test would show nothing.
    assert!(
        samples >= 2,
        "only {samples} samples at growths: the blocks did not fill"
    );
    let mut last: Option<&Event> = None;
    for (i, e) in worker.iter().enumerate() {
        if matches!(e, Event::Completion(_)) {
            assert!(
                matches!(last, Some(Event::Call(_) | Event::Completion(_))),
                "event {i}, a completion, follows {last:?}, not its call"
            );
        }
        last = Some(e);
    }
}
