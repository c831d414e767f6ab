//! Reconstruct throughput on one core and on two, and its memory at two trace lengths.
//!
//! Writes a synthetic multi-rank trace (the format crate's halo-exchange generator, with an
//! equalised suspension injected after every 200th Allreduce and clock samples at init, each
//! suspension and finalize), then measures, each in a child process so peak RSS is its own:
//! - `zstd decompress`, `zstd compress`: the zstd work alone, every block decompressed once, and
//!   compressed again at the output's level 1 (`EVF_BENCH_ZSTD_LEVEL` for another): the floor of
//!   any reconstruction that reads this format and writes it with zstd, whatever its engine;
//! - `columnar map`: a measurement of a columnar design, not a reconstruction: each block's call
//!   times decoded into arrays, mapped, encoded again, the other columns copied, the block
//!   compressed (see `columnar_map`); no matching;
//! - `decode`: reading every lane's events (the floor this reader pays);
//! - `reconstruct Nt`: the whole `evenflush reconstruct` on N threads (both passes, DP' and DP
//!   removed, happened-before matching, zstd level 1 writing); `hb Nt` the same with the repair;
//!   `replay Nt` with `--model replay` (its learning pass, then the replay).
//!   And in-process: `map+match`, the time mapping and happened-before engine alone over events
//!   already in memory (no decoding, no encoding).
//!
//! - `job 2p <mpi>`: `mpirun -np 2 evenflush reconstruct --threads 1` (an MPI job of two
//!   processes, one thread each) under each MPI found, timed from outside (launch included), its
//!   rank files compared with those of `reconstruct 1t` (and with `--model replay`, of
//!   `replay 1t`); in EVF_BENCH_PAIRS (3) interleaved rounds with the one-thread run, and judged
//!   by the median ratio. Beside it, what the launch alone costs (the same job on a trace of a
//!   few hundred events, median of 3) and the ratio a perfect split would reach with that launch.
//!
//! Each trace's figures end with issue 31's targets beside them.
//!
//! `cargo bench --bench reconstruct_throughput` (env: EVF_BENCH_RANKS, EVF_BENCH_EVENTS = events
//! per rank of the shorter trace; the longer one has 4×).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use format::{ClockCalibration, Event};
use harness::swap::report::median;
use reconstruct::rebuild::{self, Model, Options, Remove};
use trace::Trace;
use trace::clock::{MapCursor, TimeMap};

#[path = "reconstruct/halo_trace.rs"]
mod halo_trace;
use halo_trace::{rank_events, write_trace};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmHWM:"), field("RssAnon:"))
}

/// Child mode: one measurement, printed as `events seconds vmhwm_mib peak_rssanon_mib`.
/// VmHWM counts the file pages the reader has mapped (they are page cache, reclaimable); the
/// anonymous peak is what the process itself allocated, sampled every 5 ms.
fn child(what: &str, dir: &Path) {
    let peak_anon = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let peak_anon = std::sync::Arc::clone(&peak_anon);
        std::thread::spawn(move || {
            loop {
                let anon = (peak_rss_mib().1 * 1024.0) as u64;
                peak_anon.fetch_max(anon, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    drop(sampler);
    let trace = Trace::open(dir).expect("trace");
    let start = Instant::now();
    let events = match what {
        "decode" => {
            let mut n = 0u64;
            for files in &trace.ranks {
                let open = trace::lanes::OpenRank::open(files).expect("open");
                n += trace::lanes::LaneReader::new(&open, 0).count() as u64;
            }
            n
        }
        "zstd decompress" | "zstd compress" => zstd_floor(&trace, what == "zstd compress"),
        "columnar map" => columnar_map(&trace),
        _ => {
            let out = dir.with_extension("out");
            let threads = what
                .split_whitespace()
                .nth(1)
                .and_then(|t| t.trim_end_matches('t').parse().ok())
                .unwrap_or(1);
            let opts = Options {
                remove: Remove::Both,
                hb: what.starts_with("hb"),
                model: if what.starts_with("replay") {
                    Model::Replay
                } else {
                    Model::Subtract
                },
                threads,
                ..Options::default()
            };
            rebuild::reconstruct(&trace, &out, &opts, &mut |_, _| {})
                .expect("reconstruct")
                .events
        }
    };
    let secs = match what {
        "zstd decompress" | "zstd compress" | "columnar map" => ZSTD_SECS.with(|s| s.get()),
        _ => start.elapsed().as_secs_f64(),
    };
    let (hwm, anon) = peak_rss_mib();
    let anon = anon.max(peak_anon.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0);
    println!("{events} {secs} {hwm} {anon}");
}

thread_local! {
    /// The seconds [`zstd_floor`] spent in the step it times.
    static ZSTD_SECS: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

/// A LEB128 varint of a block directory (FORMAT.md "Varints").
fn varint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = bytes[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

/// The zstd work alone, the floor of any reconstruction that reads and writes this format with
/// zstd: every block of every chunk decompressed (timed without `compress`), or decompressed
/// untimed and compressed again at the output's level 1 (timed with `compress`). One core.
/// Returns the events of the trace; the seconds of the timed step go to [`ZSTD_SECS`].
fn zstd_floor(trace: &Trace, compress: bool) -> u64 {
    let mut events = 0u64;
    let mut timed = std::time::Duration::ZERO;
    let mut raw = Vec::new();
    // The output's level by default (`reconstruct`'s `Options::zstd_level`); negative levels are
    // zstd's faster ones.
    let level = std::env::var("EVF_BENCH_ZSTD_LEVEL")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(1);
    let mut compressor = zstd::bulk::Compressor::new(level).expect("compressor");
    let mut stored_out = 0u64;
    let mut decompressor = zstd::bulk::Decompressor::new().expect("decompressor");
    for files in &trace.ranks {
        events += each_block(files, |raw_len, block| {
            if raw_len == block.len() as u64 {
                return;
            }
            raw.clear();
            raw.reserve(raw_len as usize);
            let t = Instant::now();
            decompressor
                .decompress_to_buffer(block, &mut raw)
                .expect("decompress");
            if compress {
                let t = Instant::now();
                let out = compressor.compress(&raw).expect("compress");
                timed += t.elapsed();
                stored_out += out.len() as u64;
            } else {
                timed += t.elapsed();
            }
        });
    }
    if compress {
        eprintln!("zstd level {level}: {stored_out} bytes compressed");
    }
    ZSTD_SECS.with(|s| s.set(timed.as_secs_f64()));
    events
}

/// Every block of one rank's chunks (version 9 on, FORMAT.md "Payload: blocks") as stored:
/// `f(raw_len, stored bytes)`, in file order. Returns the rank's events.
fn each_block(files: &trace::RankFiles, mut f: impl FnMut(u64, &[u8])) -> u64 {
    let mut events = 0u64;
    for part in &files.parts {
        let format::RankPart::File { path, .. } = part else {
            panic!("the bench writes a rank file per rank, not group files");
        };
        let bytes = std::fs::read(path).expect("rank file");
        let file = format::RankFile::open(path).expect("rank file");
        for chunk in file.chunks() {
            let chunk = chunk.expect("chunk");
            assert!(chunk.header.version >= 9, "a chunk of version 9 or later");
            events += chunk.header.events;
            let at = chunk.offset as usize + 72;
            let stored = &bytes[at..at + chunk.header.stored_len as usize];
            let mut pos = 0;
            let n = varint(stored, &mut pos);
            let dir: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let _events = varint(stored, &mut pos);
                    (varint(stored, &mut pos), varint(stored, &mut pos))
                })
                .collect();
            for (raw_len, stored_len) in dir {
                f(raw_len, &stored[pos..pos + stored_len as usize]);
                pos += stored_len as usize;
            }
        }
    }
    events
}

/// A numeric column of a block (FORMAT.md "Payload: columns v1"): its values.
fn read_planes(col: &[u8], out: &mut Vec<u64>) {
    out.clear();
    let w = usize::from(col[0]);
    if w == 0 {
        return;
    }
    let n = (col.len() - 1) / w;
    out.resize(n, 0);
    for p in 0..w {
        let plane = &col[1 + p * n..1 + (p + 1) * n];
        for (v, &b) in out.iter_mut().zip(plane) {
            *v |= u64::from(b) << (8 * p);
        }
    }
}

/// `values` as a numeric column, appended to `out`.
fn write_planes(values: &[u64], out: &mut Vec<u8>) {
    let max = values.iter().fold(0, |m, &v| m | v);
    let w = (64 - max.leading_zeros() as usize).div_ceil(8);
    out.push(w as u8);
    for p in 0..w {
        out.extend(values.iter().map(|&v| (v >> (8 * p)) as u8));
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// What a columnar reconstruction would pay per event, without matching: every block
/// decompressed, its calls' start and duration columns decoded into arrays, both ends mapped to
/// the global clock with the suspensions removed (`TimeMap::collapsed_ns`, as the pipeline maps
/// them), the cost column zeroed (DP removed), the two time columns encoded again, every other
/// column copied as it is, and the block compressed at level 1. A measurement of the design, not
/// a reconstruction: misc events keep their times, and DP is not moved into the gaps. The first
/// pass (metadata) is not timed. One core.
fn columnar_map(trace: &Trace) -> u64 {
    let metas = trace::scan::scan(trace).expect("first pass");
    let mut events = 0u64;
    let mut calls = 0u64;
    let mut timed = std::time::Duration::ZERO;
    let mut raw = Vec::new();
    let mut payload = Vec::new();
    let (mut starts, mut durations) = (Vec::new(), Vec::new());
    let mut compressor = zstd::bulk::Compressor::new(1).expect("compressor");
    let mut decompressor = zstd::bulk::Decompressor::new().expect("decompressor");
    for (files, meta) in trace.ranks.iter().zip(&metas) {
        let map = TimeMap::new(meta);
        let mut cur = MapCursor::default();
        events += each_block(files, |raw_len, block| {
            let t = Instant::now();
            raw.clear();
            if raw_len == block.len() as u64 {
                raw.extend_from_slice(block);
            } else {
                raw.reserve(raw_len as usize);
                decompressor
                    .decompress_to_buffer(block, &mut raw)
                    .expect("decompress");
            }
            assert_eq!(raw[0], 18, "a columns v1 block of 18 columns");
            let mut p = 1;
            let lens: Vec<usize> = (0..raw[0]).map(|_| varint(&raw, &mut p) as usize).collect();
            let mut cols = Vec::with_capacity(lens.len());
            for len in &lens {
                cols.push(&raw[p..p + len]);
                p += len;
            }
            read_planes(cols[2], &mut starts);
            read_planes(cols[3], &mut durations);
            durations.resize(starts.len(), 0);
            calls += starts.len() as u64;
            let mut prev_end = 0u64;
            let mut new_prev_end = 0u64;
            for (s, d) in starts.iter_mut().zip(durations.iter_mut()) {
                let start = prev_end.wrapping_add(unzigzag(*s) as u64);
                let end = start.wrapping_add(unzigzag(*d) as u64);
                prev_end = end;
                let new_start = map.collapsed_ns(start, &mut cur).max(0.0) as u64;
                let new_end = (map.collapsed_ns(end, &mut cur).max(0.0) as u64).max(new_start);
                *s = zigzag(new_start.wrapping_sub(new_prev_end) as i64);
                *d = zigzag((new_end - new_start) as i64);
                new_prev_end = new_end;
            }
            payload.clear();
            payload.push(raw[0]);
            let mut rebuilt: Vec<Vec<u8>> = Vec::with_capacity(cols.len());
            for (k, col) in cols.iter().enumerate() {
                let mut c = Vec::new();
                match k {
                    2 => write_planes(&starts, &mut c),
                    3 => write_planes(&durations, &mut c),
                    10 => c.push(0),
                    _ => c.extend_from_slice(col),
                }
                rebuilt.push(c);
            }
            for c in &rebuilt {
                let mut v = c.len() as u64;
                loop {
                    let b = (v & 0x7f) as u8;
                    v >>= 7;
                    payload.push(if v == 0 { b } else { b | 0x80 });
                    if v == 0 {
                        break;
                    }
                }
            }
            for c in &rebuilt {
                payload.extend_from_slice(c);
            }
            let out = compressor.compress(&payload).expect("compress");
            timed += t.elapsed();
            std::hint::black_box(out);
        });
    }
    // Untimed: the calls as the reader decodes them, so a column misread cannot go unseen.
    let recorded: u64 = trace
        .ranks
        .iter()
        .map(|files| {
            let open = trace::lanes::OpenRank::open(files).expect("open");
            trace::lanes::LaneReader::new(&open, 0)
                .filter(|e| matches!(e, Event::Call(_)))
                .count() as u64
        })
        .sum();
    assert_eq!(calls, recorded, "every call's times mapped");
    ZSTD_SECS.with(|s| s.set(timed.as_secs_f64()));
    events
}

fn run_child(what: &str, dir: &Path) -> (f64, f64, f64, f64) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .env("EVF_BENCH_CHILD", what)
        .env("EVF_BENCH_DIR", dir)
        .output()
        .expect("child");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(
        v.len(),
        4,
        "child output: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (v[0], v[1], v[2], v[3])
}

/// `mpirun -np 2 evenflush reconstruct` on `dir` with `launcher` (`None`: not installed):
/// seconds, and whether every rank file equals `reference`'s (true without one).
fn mpi_job(
    launcher: &[&str],
    dir: &Path,
    reference: Option<&Path>,
    model: &str,
) -> Option<(f64, bool)> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {}", launcher[0])])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        return None;
    }
    let out = dir.with_extension("job");
    let start = Instant::now();
    let status = Command::new(launcher[0])
        .args(&launcher[1..])
        .args(["-np", "2", env!("CARGO_BIN_EXE_evenflush"), "reconstruct"])
        .arg(dir)
        .arg("--out")
        .arg(&out)
        .args([
            "--remove",
            "both",
            "--model",
            model,
            "--threads",
            "1",
            "--json",
        ])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the MPI job");
    let secs = start.elapsed().as_secs_f64();
    assert!(status.success(), "{} job failed", launcher[0]);
    let files = |d: &Path| -> Vec<(std::ffi::OsString, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .expect("output")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "evf"))
            .map(|e| (e.file_name(), std::fs::read(e.path()).expect("read")))
            .collect();
        v.sort();
        v
    };
    let same = reference.is_none_or(|r| files(&out) == files(r));
    let _ = std::fs::remove_dir_all(&out);
    Some((secs, same))
}

/// What starting and ending a 2-process job costs under each MPI found: the median of 3 jobs on
/// `tiny` (a trace of a few hundred events), by MPI name.
fn launch_floors(tiny: &Path) -> Vec<(&'static str, f64)> {
    LAUNCHERS
        .iter()
        .filter_map(|(name, launcher)| {
            let secs: Vec<f64> = (0..3)
                .filter_map(|_| mpi_job(launcher, tiny, None, "subtract").map(|(s, _)| s))
                .collect();
            median(&secs).map(|m| (*name, m))
        })
        .collect()
}

/// The MPIs whose jobs the bench runs, by name and launcher.
const LAUNCHERS: [(&str, &[&str]); 2] = [
    ("openmpi", &["mpirun.openmpi", "--oversubscribe"]),
    ("mpich", &["mpirun.mpich"]),
];

/// 2 processes against 1, in `pairs` interleaved rounds (one process on one thread, then the
/// job under each MPI found): one pair alone once showed a met target that paired runs did not
/// confirm (paper-notes/reconstruct-issue31.md), so the figure judged is the median ratio.
/// `first_secs` is the one-thread run the caller already made, round 1's. Returns each MPI's
/// ratios (one-thread seconds over the job's, launch included). `floors`: each MPI's launch
/// alone ([`launch_floors`]), to print the best ratio a perfect split could reach with it.
fn job_pairs(
    one_thread: &str,
    model: &str,
    dir: &Path,
    (first_secs, events): (f64, f64),
    pairs: usize,
    floors: &[(&str, f64)],
) -> Vec<(&'static str, Vec<f64>)> {
    /// One MPI's jobs over the rounds.
    struct Jobs {
        secs: Vec<f64>,
        ratios: Vec<f64>,
        all_same: bool,
    }
    let reference = dir.with_extension("out");
    // By launcher; `None` while that MPI is not found.
    let mut jobs: Vec<Option<Jobs>> = LAUNCHERS.iter().map(|_| None).collect();
    let mut alones = Vec::new();
    for round in 0..pairs {
        let alone = if round == 0 {
            first_secs
        } else {
            run_child(one_thread, dir).1
        };
        alones.push(alone);
        for ((_, launcher), slot) in LAUNCHERS.iter().zip(&mut jobs) {
            let Some((secs, same)) = mpi_job(launcher, dir, Some(&reference), model) else {
                continue;
            };
            let j = slot.get_or_insert_with(|| Jobs {
                secs: Vec::new(),
                ratios: Vec::new(),
                all_same: true,
            });
            j.all_same &= same;
            j.secs.push(secs);
            j.ratios.push(alone / secs);
        }
    }
    let mut ratios = Vec::new();
    for ((name, _), j) in LAUNCHERS.iter().zip(jobs) {
        let Some(j) = j else { continue };
        let secs = median(&j.secs).unwrap_or(f64::NAN);
        let (lo, hi) = j
            .ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        println!(
            "  job 2p {name:<8} {:>8.2} M events/s  (median of {} jobs, {secs:.3} s, --model {model}, launch included)  {:.2}x of 1 thread, median of {} interleaved pairs ({lo:.2}-{hi:.2}); output {}",
            events / secs / 1e6,
            j.secs.len(),
            median(&j.ratios).unwrap_or(f64::NAN),
            j.ratios.len(),
            if j.all_same { "identical" } else { "DIFFERENT" }
        );
        if let (Some(alone), Some((_, floor))) =
            (median(&alones), floors.iter().find(|(n, _)| n == name))
        {
            println!(
                "           launch alone {floor:.3} s: a perfect split of this run would reach {:.2}x",
                alone / (alone / 2.0 + floor)
            );
        }
        ratios.push((*name, j.ratios));
    }
    ratios
}

/// Issue 31's targets beside what this run measured (the machine's cores named, as the issue
/// asks): reconstruct per core on one thread, and 2 processes against one.
fn print_targets(rates: &[(String, f64)]) {
    let rate = |what: &str| rates.iter().find(|(w, _)| w == what).map(|r| r.1);
    let job = |model: &str, mpi: &str| rate(&format!("job {model} {mpi}"));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let show =
        |v: Option<f64>, unit: &str| v.map_or("not run".to_string(), |v| format!("{v:.2}{unit}"));
    println!("  against issue 31's targets ({cores} cores):");
    for (what, got, target) in [
        (
            "subtract, 1 thread",
            show(rate("reconstruct 1t"), " M events/s"),
            "50 M events/s per core",
        ),
        (
            "replay, 1 thread",
            show(rate("replay 1t"), " M events/s"),
            "20 M events/s per core",
        ),
        (
            "2 processes against 1, subtract",
            format!(
                "{} Open MPI, {} MPICH",
                show(job("subtract", "openmpi"), "x"),
                show(job("subtract", "mpich"), "x")
            ),
            "1.8x (medians of interleaved pairs)",
        ),
        (
            "2 processes against 1, replay",
            format!(
                "{} Open MPI, {} MPICH",
                show(job("replay", "openmpi"), "x"),
                show(job("replay", "mpich"), "x")
            ),
            "1.8x (medians of interleaved pairs)",
        ),
    ] {
        println!("    {what:<33} {got:>16}   target {target}");
    }
}

/// The time mapping and the happened-before engine over events already in memory.
fn map_and_match(world: u32, events: u64) -> (u64, f64) {
    let mut lanes_events = Vec::new();
    let mut metas = Vec::new();
    for rank in 0..world {
        let mut v = Vec::new();
        rank_events(world, rank, events, |e| v.push(e.clone()));
        let mut meta = trace::definitions::RankMeta {
            rank,
            clock: ClockCalibration {
                ticks_per_sec: 2e9,
                ..Default::default()
            },
            ..Default::default()
        };
        for e in &v {
            match e {
                Event::Clock(s) => meta.samples.push(*s),
                Event::Suspension(s) => meta.suspensions.push(s.as_ref().clone()),
                Event::FunctionDef { id, name } => {
                    meta.functions.insert(*id, name.clone());
                }
                _ => {}
            }
        }
        meta.streams.insert(0);
        lanes_events.push(v);
        metas.push(meta);
    }
    let maps: Vec<TimeMap> = metas.iter().map(TimeMap::new).collect();
    let ctx = reconstruct::hb::HbContext::new(&metas, world);
    let total: u64 = lanes_events.iter().map(|v| v.len() as u64).sum();
    let start = Instant::now();
    let lanes = lanes_events
        .into_iter()
        .enumerate()
        .map(|(r, v)| {
            let map = &maps[r];
            let mut cur = MapCursor::default();
            let iter = v.into_iter().map(move |mut e| {
                trace::times::for_each_time(&mut e, |t| *t = map.collapsed_ns(*t, &mut cur) as u64);
                e
            });
            (
                trace::lanes::LaneId {
                    rank: r as u32,
                    stream: 0,
                },
                reconstruct::hb::Plain(iter),
            )
        })
        .collect();
    let mut seen = 0u64;
    let report = reconstruct::hb::run(
        &ctx,
        lanes,
        reconstruct::hb::Repair::OFF,
        |_, _| seen += 1,
        |_| {},
    );
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(seen, total);
    assert!(
        report.messages > 0 && report.unmatched_receives == 0,
        "{report:?}"
    );
    (total, secs)
}

fn main() {
    if let (Ok(what), Ok(dir)) = (
        std::env::var("EVF_BENCH_CHILD"),
        std::env::var("EVF_BENCH_DIR"),
    ) {
        child(&what, &PathBuf::from(dir));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // Only the trace, for profiles of one stage at a time (`benches/reconstruct/stages.sh`).
    if let Ok(dir) = std::env::var("EVF_BENCH_WRITE_ONLY") {
        let world = env_u64("EVF_BENCH_RANKS", 8) as u32;
        let total = write_trace(Path::new(&dir), world, env_u64("EVF_BENCH_EVENTS", 500_000));
        println!("trace: {total} events in {dir}");
        return;
    }
    let world = env_u64("EVF_BENCH_RANKS", 8) as u32;
    let short = env_u64("EVF_BENCH_EVENTS", 500_000);
    let pairs = env_u64("EVF_BENCH_PAIRS", 3).max(1) as usize;
    let base = std::env::temp_dir().join(format!(
        "evenflush-bench-reconstruct-{}",
        std::process::id()
    ));
    println!("reconstruct throughput, {world} ranks, on 1 and 2 threads");
    let tiny = base.join("trace-launch");
    write_trace(&tiny, world, 50);
    let floors = launch_floors(&tiny);
    for (name, floor) in &floors {
        println!(
            "launch of a 2-process job alone, {name}: {floor:.3} s (median of 3, a {world}-rank trace of 50 events a rank)"
        );
    }
    for per_rank in [short, 4 * short] {
        let dir = base.join(format!("trace-{per_rank}"));
        let total = write_trace(&dir, world, per_rank);
        let bytes: u64 = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        println!(
            "trace: {total} events, {:.1} MiB on disk",
            bytes as f64 / (1 << 20) as f64
        );
        let mut one_thread = 0.0;
        // (what, M events/s) of every run, and per model and MPI the median 2-process job against 1.
        let mut rates: Vec<(String, f64)> = Vec::new();
        for what in [
            "zstd decompress",
            "zstd compress",
            "columnar map",
            "decode",
            "reconstruct 1t",
            "reconstruct 2t",
            "hb 1t",
            "hb 2t",
            "replay 1t",
            "replay 2t",
        ] {
            let (events, secs, hwm, anon) = run_child(what, &dir);
            let rate = events / secs / 1e6;
            let speedup = if what.ends_with("1t") {
                one_thread = rate;
                String::new()
            } else if what.ends_with("2t") && one_thread > 0.0 {
                format!("  {:.2}x of 1 thread", rate / one_thread)
            } else {
                String::new()
            };
            println!(
                "  {what:<15} {rate:>8.2} M events/s  ({events} events in {secs:.3} s)  peak RSS {hwm:.1} MiB (anonymous {anon:.1} MiB){speedup}"
            );
            rates.push((what.to_string(), rate));
            let model = match what {
                "reconstruct 1t" => "subtract",
                "replay 1t" => "replay",
                _ => continue,
            };
            for (name, ratios) in job_pairs(what, model, &dir, (secs, events), pairs, &floors) {
                rates.push((
                    format!("job {model} {name}"),
                    median(&ratios).unwrap_or(f64::NAN),
                ));
            }
        }
        print_targets(&rates);
        if std::env::var_os("EVF_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
            let _ = std::fs::remove_dir_all(dir.with_extension("out"));
        }
    }
    let (events, secs) = map_and_match(world, short);
    println!(
        "  map+match    {:>8.2} M events/s  (in memory, {events} events in {secs:.3} s)",
        events as f64 / secs / 1e6
    );
    if std::env::var_os("EVF_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&base);
    }
}
