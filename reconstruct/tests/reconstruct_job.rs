//! The output does not depend on how the work is spread: over threads, or over the processes of
//! an MPI job (standing in as threads whose messages go over channels), and a job that fails
//! does so without a hang.

mod common;
mod known_run;

use common::*;
use format::{Event, Marker};
use known_run::*;
use reconstruct::rebuild::{self, AfterCountedBy, Model, Options, Remove, Summary};
use trace::Trace;

/// A 6-rank ring of 200 rounds, rank 2 with a second thread that sends, written in chunks of 13
/// events; returns the world size.
fn ring_with_a_worker_thread(dir: &std::path::Path) -> u32 {
    let mut program = ring_program(6, 200, 11);
    let worker: Vec<Event> = (0..150u64)
        .map(|i| {
            Event::Call(call(
                SEND,
                10_000_000_000 + i * 5_000,
                10_000_000_000 + i * 5_000 + 40,
                1,
                900,
            ))
        })
        .collect();
    program.measured[2].streams.push((1, worker));
    write_trace(dir, program.world, &program.measured, 13);
    program.world
}

#[test]
fn the_output_does_not_depend_on_the_number_of_threads() {
    // Ranks of one and of two threads, small input and output chunks so that every lane takes
    // many steps: any thread count must write the same bytes and report the same summary, with
    // and without the repair and with the replay (whose output comes from the matcher instead of
    // the workers, its chunks encoded by whichever worker is free, in any order).
    let dir = temp_dir("threads");
    let world = ring_with_a_worker_thread(&dir);
    let trace = Trace::open(&dir).unwrap();
    for (hb, model) in [
        (false, Model::Subtract),
        (true, Model::Subtract),
        (false, Model::Replay),
    ] {
        let mut first: Option<(Vec<Vec<u8>>, String)> = None;
        for threads in [1, 2, 3, 7] {
            let out = dir.with_extension(format!("out-{hb}-{model:?}-{threads}"));
            let opts = Options {
                remove: Remove::Both,
                hb,
                model,
                chunk_events: 29,
                threads,
                ..Options::default()
            };
            let mut summary = rebuild::reconstruct(&trace, &out, &opts, &mut |_, _| {}).unwrap();
            summary.out.clear();
            let files: Vec<Vec<u8>> = (0..world)
                .map(|r| std::fs::read(out.join(format::rank_file_name(r, 0))).unwrap())
                .collect();
            let json = serde_json::to_string(&summary).unwrap();
            assert!(summary.events > 3_000, "{}", summary.events);
            match &first {
                None => first = Some((files, json)),
                Some((f, j)) => {
                    assert!(
                        files == *f,
                        "hb {hb}, {model:?}: {threads} threads wrote other bytes"
                    );
                    assert_eq!(json, *j, "hb {hb}, {model:?}: {threads} threads");
                }
            }
            std::fs::remove_dir_all(out).unwrap();
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs `reconstruct_in_job` on `processes` threads standing in for the processes of an MPI job
/// (the job's messages go over channels); process `p` writes to `outs[p]`. Returns each
/// process's result, process 0's first.
fn run_as_job(
    trace: &Trace,
    outs: &[std::path::PathBuf],
    opts: &Options,
) -> Vec<Result<Option<Summary>, rebuild::RebuildError>> {
    let transports = reconstruct::job::threads::connected(outs.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = transports
            .into_iter()
            .zip(outs)
            .map(|(t, out)| {
                scope.spawn(move || {
                    rebuild::reconstruct_in_job(trace, out, opts, Some(&t), &mut |_, _| {})
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn an_mpi_job_writes_what_one_process_writes() {
    // Ranks of one and of two threads, small chunks so that every lane takes many steps, split
    // over 2, 3 and 8 processes (8 > ranks: one owns nothing): the files and the summary must
    // be those of one process, with and without the repair (where process 0 writes every file).
    let dir = temp_dir("job");
    let world = ring_with_a_worker_thread(&dir);
    let trace = Trace::open(&dir).unwrap();
    let read_files = |out: &std::path::Path| -> Vec<Vec<u8>> {
        (0..world)
            .map(|r| std::fs::read(out.join(format::rank_file_name(r, 0))).unwrap())
            .collect()
    };
    // The replay learns from every rank first (on process 0) and then replays as the repair does.
    for (hb, model) in [
        (false, Model::Subtract),
        (true, Model::Subtract),
        (false, Model::Replay),
    ] {
        let opts = Options {
            remove: Remove::Both,
            hb,
            model,
            chunk_events: 29,
            threads: 1,
            ..Options::default()
        };
        let single = dir.with_extension(format!("single-{hb}-{}", model.name()));
        // One process matches its output again, so the job's own count is checked against it.
        let verified = Options {
            verify: true,
            ..opts.clone()
        };
        let mut expected =
            rebuild::reconstruct(&trace, &single, &verified, &mut |_, _| {}).unwrap();
        expected.out.clear();
        let repaired = expected.hb.after_counted_by.take().is_some();
        let expected_files = read_files(&single);
        for processes in [2usize, 3, 8] {
            let out = dir.with_extension(format!("job-{hb}-{}-{processes}", model.name()));
            let outs = vec![out.clone(); processes];
            let mut results = run_as_job(&trace, &outs, &opts).into_iter();
            let mut summary = results
                .next()
                .unwrap()
                .unwrap()
                .expect("process 0's summary");
            for (p, r) in results.enumerate() {
                assert!(
                    matches!(r, Ok(None)),
                    "process {}: {:?}",
                    p + 1,
                    r.map(|_| ())
                );
            }
            summary.out.clear();
            assert!(
                read_files(&out) == expected_files,
                "hb {hb}, {model:?}: {processes} processes wrote other bytes"
            );
            assert_eq!(
                summary.hb.after_counted_by.take(),
                repaired.then_some(AfterCountedBy::Pass),
                "hb {hb}, {model:?}: {processes} processes"
            );
            assert_eq!(
                serde_json::to_string(&summary).unwrap(),
                serde_json::to_string(&expected).unwrap(),
                "hb {hb}, {model:?}: {processes} processes"
            );
            std::fs::remove_dir_all(out).unwrap();
        }
        std::fs::remove_dir_all(single).unwrap();
    }
}

/// A transport that counts the proxy lanes' messages it delivers.
struct Counting<'c> {
    inner: reconstruct::job::threads::ChannelTransport,
    proxies: &'c std::sync::atomic::AtomicUsize,
}

impl reconstruct::job::Transport for Counting<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn send(&self, dest: usize, tag: u32, bytes: &[u8]) -> Result<(), String> {
        self.inner.send(dest, tag, bytes)
    }
    fn recv(&self, source: Option<usize>) -> Result<(usize, u32, Vec<u8>), String> {
        let m = self.inner.recv(source)?;
        if m.1 == reconstruct::job::TAG_PROXIES {
            self.proxies
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(m)
    }
    fn try_recv(&self) -> Result<Option<(usize, u32, Vec<u8>)>, String> {
        let m = self.inner.try_recv()?;
        if m.as_ref()
            .is_some_and(|m| m.1 == reconstruct::job::TAG_PROXIES)
        {
            self.proxies
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(m)
    }
}

/// Runs `program` as one process and as split jobs of each of `process_counts` (no central
/// matcher: single-threaded ranks, nothing repaired), and checks that every job wrote the same
/// files and summary, counting the proxy messages so that a pass that did not split fails.
/// Returns the one-process summary.
fn split_jobs_write_what_one_process_writes(
    name: &str,
    program: &Program,
    model: Model,
    hb: bool,
    process_counts: &[usize],
    mask: fn(&mut Summary),
) -> Summary {
    let dir = temp_dir(name);
    write_trace(&dir, program.world, &program.measured, 13);
    let trace = Trace::open(&dir).unwrap();
    let opts = Options {
        remove: Remove::Both,
        model,
        hb,
        chunk_events: 29,
        threads: 2,
        ..Options::default()
    };
    let single = dir.with_extension("single");
    // One process matches its output again, so the job's own count is checked against it.
    let verified = Options {
        verify: true,
        ..opts.clone()
    };
    let mut expected = rebuild::reconstruct(&trace, &single, &verified, &mut |_, _| {}).unwrap();
    expected.out.clear();
    let repaired = expected.hb.after_counted_by.take().is_some();
    let unmasked = expected.clone();
    mask(&mut expected);
    // One thread a process as well as two: with one, the engine alone encodes the replay's
    // output, partly while it waits for the others.
    // And once with the output matched again, which fails where a process's own count differs.
    let jobs = process_counts
        .iter()
        .flat_map(|&processes| [(processes, 1, false), (processes, 2, false)])
        .chain([(process_counts[0], 1, true)]);
    for (processes, threads, verify) in jobs {
        let opts = Options {
            threads,
            verify,
            ..opts.clone()
        };
        let out = dir.with_extension(format!("split-{processes}"));
        let proxies = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = reconstruct::job::threads::connected(processes)
                .into_iter()
                .map(|inner| {
                    let (out, opts, trace, proxies) = (&out, &opts, &trace, &proxies);
                    scope.spawn(move || {
                        let t = Counting { inner, proxies };
                        rebuild::reconstruct_in_job(trace, out, opts, Some(&t), &mut |_, _| {})
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Every process with ranks sends each other process at least the batch that ends its
        // lanes' proxies (more, as they stream).
        let with_ranks = processes.min(program.world as usize);
        let sent = proxies.into_inner();
        assert!(
            sent >= with_ranks * (processes - 1),
            "{processes} processes of {threads} threads: {sent} proxy messages: the pass did not split"
        );
        let mut results = results.into_iter();
        let mut summary = results
            .next()
            .unwrap()
            .unwrap()
            .expect("process 0's summary");
        assert!(results.all(|r| matches!(r, Ok(None))));
        summary.out.clear();
        let by = if verify {
            AfterCountedBy::ReadingTheOutput
        } else {
            AfterCountedBy::Pass
        };
        assert_eq!(
            summary.hb.after_counted_by.take(),
            repaired.then_some(by),
            "{processes} processes of {threads} threads, verify {verify}"
        );
        mask(&mut summary);
        for r in 0..program.world {
            let name = format::rank_file_name(r, 0);
            assert!(
                std::fs::read(out.join(&name)).unwrap()
                    == std::fs::read(single.join(&name)).unwrap(),
                "{processes} processes of {threads} threads: {name}"
            );
        }
        assert_eq!(
            serde_json::to_string(&summary).unwrap(),
            serde_json::to_string(&expected).unwrap(),
            "{processes} processes of {threads} threads"
        );
        std::fs::remove_dir_all(out).unwrap();
    }
    std::fs::remove_dir_all(single).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    unmasked
}

#[test]
fn a_job_with_no_central_matcher_writes_what_one_process_writes() {
    // Every process matches its own ranks against proxies of the others', streamed while the
    // pass runs; 8 processes for 6 ranks leaves some with none.
    let program = ring_program(6, 200, 11);
    let expected = split_jobs_write_what_one_process_writes(
        "job-split",
        &program,
        Model::Subtract,
        false,
        &[2, 3, 8],
        |_| {},
    );
    assert!(
        expected.hb.before.messages > 1_000,
        "{:?}",
        expected.hb.before
    );
}

#[test]
fn a_replay_with_no_central_matcher_writes_what_one_process_writes() {
    // The replay split: every process learns from its own ranks, the tables are merged, and each
    // replays its own ranks against proxies that carry the others' replayed times. The output
    // (moved by the replay) and the summary must be one process's.
    let program = ring_program(6, 200, 11);
    let expected = split_jobs_write_what_one_process_writes(
        "job-replay",
        &program,
        Model::Replay,
        false,
        &[2, 3, 8],
        |_| {},
    );
    assert!(
        expected.hb.before.messages > 1_000 && expected.hb.before.lanes_shifted > 0,
        "{:?}",
        expected.hb.before
    );
}

/// A pipeline over `world` ranks: each iteration rank 0 sends, and every other rank receives
/// from the one before it and forwards at once. Each receive ends 60 ns after its send began,
/// under the repair's minimum latency (100 ns), so `--hb` delays every receive, and with it the
/// forward, 40 ns more at each hop: a rank's repaired times depend on its sender's repair.
fn pipeline_program(world: u32, iterations: u64) -> Program {
    let measured = (0..world)
        .map(|r| {
            let mut events = function_defs();
            events.push(Event::Marker(Marker::InitDone { time: 1_000 }));
            for i in 0..iterations {
                let t = 10_000 + i * 10_000;
                let tag = i as i32;
                let send_start = t + 70 * u64::from(r);
                if r > 0 {
                    let prev = (r - 1) as i32;
                    events.push(Event::Call(call(RECV, t, send_start - 10, prev, tag)));
                    events.push(received(prev, tag));
                }
                if r + 1 < world {
                    let next = (r + 1) as i32;
                    events.push(Event::Call(call(
                        SEND,
                        send_start,
                        send_start + 50,
                        next,
                        tag,
                    )));
                }
            }
            events.push(Event::Marker(Marker::FinalizeStart {
                time: 20_000 + iterations * 10_000,
            }));
            RankTrace {
                rank: r,
                ticks_per_sec: 1e9,
                streams: vec![(0, events)],
            }
        })
        .collect();
    Program {
        world,
        measured,
        original: Vec::new(),
        cost_before: Vec::new(),
        span: Vec::new(),
        suspended: Vec::new(),
        cost: Vec::new(),
    }
}

#[test]
fn a_repair_with_no_central_matcher_writes_what_one_process_writes() {
    // `--hb` split: each process repairs its own ranks against proxies that carry the others'
    // repaired times. In the pipeline, the hops that cross processes need the sender's delay
    // (a proxy without it leaves the receiver 40 ns short per hop before it); the output, moved
    // by the repair, and the summary must be one process's.
    let program = pipeline_program(6, 300);
    let expected = split_jobs_write_what_one_process_writes(
        "job-repair",
        &program,
        Model::Subtract,
        true,
        &[2, 3, 8],
        |_| {},
    );
    assert!(
        expected.hb.before.messages == 5 * 300
            && expected.hb.before.lanes_shifted == 5
            && expected.hb.before.max_shift >= 5 * 40,
        "{:?}",
        expected.hb
    );
}

#[test]
fn a_job_with_no_central_matcher_forces_what_one_process_forces() {
    // Sends missing from two ranks' traces: their receivers wait for messages that never come,
    // every lane ends up waiting, and one process forces its first open lane. Split, no process
    // sees every lane: the job must find that the whole of it waits, with nothing in flight,
    // before one process forces, and then find what one process finds.
    let mut program = ring_program(6, 200, 11);
    for (rank, tag) in [(3usize, 50i32), (1, 120)] {
        let events = &mut program.measured[rank].streams[0].1;
        let at = events
            .iter()
            .position(|e| matches!(e, Event::Call(c) if c.func == SEND && c.tag == tag))
            .unwrap();
        events.remove(at);
    }
    // Whether a forced wait's partner had already ended when it was forced depends on when
    // each process saw that partner's lane end, so that one count is left out.
    let expected = split_jobs_write_what_one_process_writes(
        "job-force",
        &program,
        Model::Subtract,
        false,
        &[2, 3, 8],
        |s| s.hb.before.waits_on_absent_ranks = 0,
    );
    // The wait that began first is forced: exactly the two receives whose sends are missing
    // stay unmatched (forcing the first open lane instead left 151 receives and 149 sends).
    assert_eq!(
        (
            expected.hb.before.unmatched_receives,
            expected.hb.before.unmatched_sends
        ),
        (2, 0),
        "{:?}",
        expected.hb.before
    );
}

#[test]
fn a_damaged_trace_reads_the_same_in_a_job_as_in_one_process() {
    // A flipped byte in rank 4's file: the owner that reads it must report the same skipped range
    // and write the same output as one process (the skipped list travels with the metadata).
    let dir = temp_dir("job-damage");
    let world = ring_with_a_worker_thread(&dir);
    let victim = dir.join(format::rank_file_name(4, 0));
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&victim, bytes).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let opts = Options {
        remove: Remove::Both,
        chunk_events: 29,
        threads: 1,
        ..Options::default()
    };
    let single = dir.with_extension("single");
    let mut expected = rebuild::reconstruct(&trace, &single, &opts, &mut |_, _| {}).unwrap();
    expected.out.clear();
    assert!(
        !expected.skipped.is_empty(),
        "the flipped byte was not noticed"
    );
    let job = dir.with_extension("job");
    let mut results = run_as_job(&trace, &vec![job.clone(); 3], &opts).into_iter();
    let mut summary = results.next().unwrap().unwrap().unwrap();
    summary.out.clear();
    assert_eq!(
        serde_json::to_string(&summary).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
    for r in 0..world {
        let name = format::rank_file_name(r, 0);
        assert!(
            std::fs::read(job.join(&name)).unwrap() == std::fs::read(single.join(&name)).unwrap(),
            "{name}"
        );
    }
    std::fs::remove_dir_all(job).unwrap();
    std::fs::remove_dir_all(single).unwrap();
}

#[test]
fn a_process_that_cannot_write_fails_the_job_without_a_hang() {
    // Process 2 of 3 is given an output directory it cannot create (a path under a file): it
    // must tell process 0, which reports it by number and cause, and every process returns.
    let dir = temp_dir("job-fail");
    let program = ring_program(6, 50, 3);
    write_trace(&dir, program.world, &program.measured, 13);
    let trace = Trace::open(&dir).unwrap();
    let good = dir.with_extension("out");
    let blocker = dir.with_extension("file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let outs = vec![good.clone(), good.clone(), blocker.join("out")];
    let opts = Options {
        threads: 1,
        ..Options::default()
    };
    let results = run_as_job(&trace, &outs, &opts);
    let Err(err) = &results[0] else {
        panic!("process 0 reports the failure");
    };
    let text = err.to_string();
    assert!(
        text.contains("process 2") && text.contains(&blocker.display().to_string()),
        "{text}"
    );
    assert!(matches!(results[1], Ok(None)), "process 1");
    assert!(
        matches!(results[2], Ok(None)),
        "process 2 reported to process 0"
    );
    std::fs::remove_file(&blocker).unwrap();
    let _ = std::fs::remove_dir_all(&good);
}
