//! The recorder's memory awareness, on real jobs under both MPIs (issue: memory awareness):
//! - a collective-free phase that records several times `--limit` stays bounded by compressing
//!   in memory, with no local flush, and the compressed chunks reach the disk at the next
//!   flushing suspension with nothing lost (workloads/collective_free.c);
//! - records that compress poorly fall back to a counted local flush;
//! - `Memory` and `Threshold` records are written, and `--threshold auto` sizes S from what the
//!   node (or the job's memory cgroup) has free;
//! - a job whose S cannot fit in its cgroup is warned, on stderr and in the trace.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    Mpi, evenflush_bin, mpi_env, mpi_lock, programs, read_trace, run_traced_output, scratch,
};
use format::{Event, Marker, MemorySample, MemoryWhen, ThresholdBasis, ThresholdChoice};

const MIB: u64 = 1 << 20;
/// A trace block (one huge page): what a buffer may grow past its limit before the check runs.
const BLOCK: u64 = 2 * MIB;

struct Seen {
    compressed: Vec<(u64, u64)>,
    local_flushes: u64,
    lost: u64,
    samples: Vec<MemorySample>,
    thresholds: Vec<ThresholdChoice>,
    sendrecv: u64,
    /// In-memory bytes of every call and completion of the rank.
    exchange_bytes: u64,
    flushing_suspensions: u64,
    memory_low: u64,
}

fn seen(dir: &Path) -> Vec<Seen> {
    read_trace(dir)
        .iter()
        .map(|r| {
            let mut s = Seen {
                compressed: Vec::new(),
                local_flushes: 0,
                lost: 0,
                samples: Vec::new(),
                thresholds: Vec::new(),
                sendrecv: r.calls("MPI_Sendrecv").len() as u64,
                exchange_bytes: {
                    // What the exchanges took in the recorder's buffer, re-encoded as it held them.
                    let mut buf = format::RawBuf::new();
                    for e in r.all() {
                        if matches!(e, Event::Call(_) | Event::Completion(_)) {
                            buf.push_event(e);
                        }
                    }
                    buf.bytes() as u64
                },
                flushing_suspensions: 0,
                memory_low: 0,
            };
            for e in r.all() {
                match e {
                    Event::Marker(Marker::Compressed {
                        raw_bytes,
                        stored_bytes,
                        ..
                    }) => s.compressed.push((*raw_bytes, *stored_bytes)),
                    Event::Marker(Marker::LocalFlush { .. }) => s.local_flushes += 1,
                    Event::Marker(Marker::Lost { events, .. }) => s.lost += events,
                    Event::Marker(Marker::MemoryLow { .. }) => s.memory_low += 1,
                    Event::Memory(m) => s.samples.push(*m),
                    Event::Threshold(t) => s.thresholds.push(*t),
                    Event::Suspension(x) if x.flushed => s.flushing_suspensions += 1,
                    _ => {}
                }
            }
            s
        })
        .collect()
}

/// One phase of 1.2 M exchanges (a call and a completion record, about 17 bytes in memory, so about
/// 20 MB per rank: more than twice the 8 MiB limit) ends in a barrier. The records compress 9-13×
/// on a quiet machine and down to 6.7× under load (less regular durations), so the compressed
/// backlog stays under the half of the limit that would force a lone write. One phase: the flush that empties the backlog comes at the
/// second collective after the request (the split decision), so back-to-back phases share it.
fn collective_free_phase_stays_in_memory(mpi: Mpi) {
    let dir = scratch(&format!("memory-collective-free-{}", mpi.name()));
    let (n, phases) = (1_200_000u64, 1u64);
    let out = {
        let _guard = mpi_lock();
        run_traced_output(
            mpi,
            2,
            "collective_free",
            &[
                "--iterations",
                &n.to_string(),
                "--phases",
                &phases.to_string(),
            ],
            &dir,
            &[
                "--limit",
                "8MiB",
                "--threshold",
                "4MiB",
                "--decision-interval",
                "0",
            ],
        )
    };
    let out = common::check(out, "collective_free under the recorder");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("flushing locally"), "{stderr}");
    let ranks = seen(&dir);
    assert_eq!(ranks.len(), 2);
    for (rank, s) in ranks.iter().enumerate() {
        assert_eq!(
            s.sendrecv,
            n * phases,
            "rank {rank}: every call is in the trace"
        );
        assert_eq!(s.lost, 0, "rank {rank}");
        assert_eq!(s.local_flushes, 0, "rank {rank}: no local flush");
        // Each phase recorded at least twice the limit, and at least a limit's worth went through
        // in-memory compression (the last buffers of a phase reach the disk at its barrier).
        assert!(
            s.exchange_bytes >= phases * 2 * 8 * MIB,
            "rank {rank}: the phases recorded only {} bytes",
            s.exchange_bytes
        );
        let raw: u64 = s.compressed.iter().map(|c| c.0).sum();
        assert!(
            raw >= phases * 8 * MIB,
            "rank {rank}: only {raw} bytes compressed"
        );
        // The ratio depends on how regular the call durations are: about 9x on a quiet
        // machine, 6.7x seen in CI under load. 4x still tells compressed from raw blocks.
        for &(raw, stored) in &s.compressed {
            assert!(
                stored > 0 && raw >= 4 * stored,
                "rank {rank}: {raw} -> {stored}"
            );
        }
        // The compressed chunks reached the disk at MPI_Finalize (the count above read them).
        // Memory stayed bounded: what the recorder held never passed the limit by more than the
        // block that made it check.
        let peak = s.samples.iter().map(|m| m.recorder_bytes).max().unwrap();
        assert!(
            peak <= 8 * MIB + BLOCK,
            "rank {rank}: recorder held {peak} bytes"
        );
        let whens: Vec<MemoryWhen> = s.samples.iter().map(|m| m.when).collect();
        for when in [
            MemoryWhen::Init,
            MemoryWhen::Compressed,
            MemoryWhen::Finalize,
        ] {
            assert!(
                whens.contains(&when),
                "rank {rank}: no {when:?} sample in {whens:?}"
            );
        }
        assert!(
            s.samples
                .iter()
                .all(|m| m.rss_bytes > MIB && m.rss_bytes < 64 << 30)
        );
        // One rank per node reads the node's figures.
        let node_figures = s
            .samples
            .iter()
            .filter(|m| m.node_available != format::UNKNOWN_BYTES)
            .count();
        assert_eq!(node_figures > 0, rank == 0, "rank {rank}: {node_figures}");
        assert_eq!(
            s.thresholds
                .first()
                .map(|t| (t.bytes, t.basis, t.ranks_on_node)),
            Some((4 * MIB, ThresholdBasis::Fixed, 2)),
            "rank {rank}"
        );
    }
    // What the tools say about it, from the same records.
    let info = common::info_json(&dir);
    let memory = &info["memory"];
    let compressions: u64 = ranks.iter().map(|s| s.compressed.len() as u64).sum();
    assert_eq!(memory["in_memory_compressions"], compressions, "{memory}");
    assert_eq!(memory["initial_threshold"]["basis"], "fixed", "{memory}");
    assert_eq!(memory["initial_threshold"]["bytes"], 4 * MIB, "{memory}");
    let peak_recorder = ranks
        .iter()
        .flat_map(|s| s.samples.iter().map(|m| m.recorder_bytes))
        .max()
        .unwrap();
    assert_eq!(memory["peak_recorder_bytes"], peak_recorder, "{memory}");
    let text = Command::new(evenflush_bin())
        .arg("info")
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("compressed in memory between collectives")
            && text.contains("S at start-up 4.0 MiB (given)"),
        "{text}"
    );
    let report = Command::new(evenflush_bin())
        .args(["report", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["memory"], *memory, "report and info agree");
    let png = dir.join("timeline.png");
    let out = Command::new(evenflush_bin())
        .args(["timeline", "--png"])
        .arg(&png)
        .arg(&dir)
        .output()
        .unwrap();
    let out = common::check(out, "evenflush timeline");
    assert!(png.exists(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Short phases under a small S: every barrier after the first can flush, and each flushing
/// suspension takes a memory sample (what the phase above, with one barrier, never reaches).
fn flushing_suspensions_sample_memory(mpi: Mpi) {
    let dir = scratch(&format!("memory-suspension-{}", mpi.name()));
    let out = {
        let _guard = mpi_lock();
        run_traced_output(
            mpi,
            2,
            "collective_free",
            &["--iterations", "100000", "--phases", "4"],
            &dir,
            &["--threshold", "1MiB", "--decision-interval", "0"],
        )
    };
    common::check(out, "collective_free in short phases");
    for (rank, s) in seen(&dir).iter().enumerate() {
        assert!(s.flushing_suspensions >= 1, "rank {rank}");
        let at_suspensions = s
            .samples
            .iter()
            .filter(|m| m.when == MemoryWhen::Suspension)
            .count() as u64;
        assert!(
            at_suspensions >= s.flushing_suspensions,
            "rank {rank}: {at_suspensions} samples for {} flushing suspensions",
            s.flushing_suspensions
        );
    }
}

/// Pseudo-random tags and sizes compress poorly: with a 4 MiB limit, what was compressed soon
/// takes half of it, and the rank must write alone, counted and said.
fn poorly_compressing_phase_falls_back_to_a_local_flush(mpi: Mpi) {
    let dir = scratch(&format!("memory-fallback-{}", mpi.name()));
    let n = 2_000_000u64;
    let out = {
        let _guard = mpi_lock();
        run_traced_output(
            mpi,
            2,
            "collective_free",
            &["--iterations", &n.to_string(), "--scatter-tags", "1"],
            &dir,
            &["--limit", "4MiB", "--threshold", "2MiB"],
        )
    };
    let out = common::check(out, "collective_free --scatter-tags 1 under the recorder");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("flushing locally"), "{stderr}");
    for (rank, s) in seen(&dir).iter().enumerate() {
        assert_eq!(s.sendrecv, n, "rank {rank}");
        assert_eq!(s.lost, 0, "rank {rank}");
        assert!(s.local_flushes >= 1, "rank {rank}");
        assert!(
            !s.compressed.is_empty(),
            "rank {rank}: compression came first"
        );
    }
}

/// 16 ranks on this one node under `--threshold auto` (every rank used to run a watcher reading
/// the node every 50 ms): exactly one rank becomes the node's memory watcher, and the others read
/// its figures. And in a 2.5 s phase without MPI calls (idle_phase.c) every rank still gets a
/// memory sample, taken by its watcher thread, inside the phase.
fn idle_phase_is_sampled_by_one_node_watcher(mpi: Mpi) {
    let dir = scratch(&format!("memory-idle-{}", mpi.name()));
    let out = {
        let _guard = mpi_lock();
        run_traced_output(
            mpi,
            16,
            "idle_phase",
            &["2500"],
            &dir,
            &["--threshold", "auto"],
        )
    };
    common::check(out, "idle_phase under --threshold auto");
    let trace = read_trace(&dir);
    assert_eq!(trace.len(), 16);
    let mut watchers = Vec::new();
    for r in &trace {
        let samples: Vec<(usize, MemorySample)> = r
            .streams
            .iter()
            .flat_map(|(&stream, events)| {
                events.iter().filter_map(move |e| match e {
                    Event::Memory(m) => Some((stream as usize, *m)),
                    _ => None,
                })
            })
            .collect();
        if samples
            .iter()
            .any(|(_, m)| m.when == MemoryWhen::NodeWatcher)
        {
            watchers.push(r.rank);
        }
        // The phase: from the end of the first Barrier to the start of the second.
        let barriers = r.calls("MPI_Barrier");
        assert_eq!(barriers.len(), 2, "rank {}", r.rank);
        let (from, to) = (barriers[0].end, barriers[1].start);
        let inside: Vec<&(usize, MemorySample)> = samples
            .iter()
            .filter(|(_, m)| m.time > from && m.time < to)
            .collect();
        assert!(
            inside.iter().any(|(stream, m)| m.when == MemoryWhen::Idle
                && *stream != 0
                && m.rss_bytes > MIB
                && m.rss_bytes < 64 << 30),
            "rank {}: no idle sample inside the phase without MPI calls: {samples:?}",
            r.rank
        );
    }
    assert_eq!(watchers.len(), 1, "node watchers: ranks {watchers:?}");
    // The ranks unlinked their shared page, or `evenflush run` removed it.
    let prefix = offload::config::memory_page_prefix(&trace_run_id(&trace));
    let (shm, start) = prefix.rsplit_once('/').unwrap();
    let left: Vec<String> = std::fs::read_dir(shm)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(start))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in {shm}: {left:?}");
}

/// The run id every rank's `RankInfo` carries.
fn trace_run_id(trace: &[common::RankEvents]) -> String {
    trace[0]
        .all()
        .find_map(|e| match e {
            Event::RankInfo(i) => Some(i.run_id.clone()),
            _ => None,
        })
        .expect("RankInfo")
}

for_both_mpis!(
    collective_free_phase_stays_in_memory,
    flushing_suspensions_sample_memory,
    poorly_compressing_phase_falls_back_to_a_local_flush,
    idle_phase_is_sampled_by_one_node_watcher
);

/// A memory cgroup of our own for one job, removed on drop (root only).
struct JobCgroup {
    dir: PathBuf,
}

impl JobCgroup {
    fn create(name: &str, limit: u64) -> Option<JobCgroup> {
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = Path::new("/sys/fs/cgroup");
        let (dir, limit_file) =
            if v1.join("memory.limit_in_bytes").exists() || v1.join("cgroup.procs").exists() {
                (v1.join(name), "memory.limit_in_bytes")
            } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
            {
                let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
                (v2.join(name), "memory.max")
            } else {
                return None;
            };
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).ok()?;
        let cgroup = JobCgroup { dir };
        std::fs::write(cgroup.dir.join(limit_file), limit.to_string()).ok()?;
        Some(cgroup)
    }

    /// `evenflush run FLAGS -- mpirun ... program args`, started inside the cgroup.
    fn run(
        &self,
        mpi: Mpi,
        program: &str,
        args: &[&str],
        out: &Path,
        flags: &[&str],
    ) -> std::process::Output {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(&self.dir)
            .arg(evenflush_bin())
            .arg("run")
            .arg("--out")
            .arg(out)
            .args(flags)
            .arg("--")
            .args(mpi.launch(2))
            .arg(programs(mpi).join(program))
            .args(args);
        common::output_with_timeout(mpi_env(&mut cmd), common::JOB_TIMEOUT, "job in a cgroup")
    }
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        // The job has ended; its processes left the cgroup with it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

fn cgroup_or_skip(name: &str, limit: u64) -> Option<JobCgroup> {
    let cgroup = JobCgroup::create(name, limit);
    if cgroup.is_none() {
        common::skip_or_fail(
            "memory-cgroup",
            "no writable memory cgroup (not root, or no cgroup file system)",
        );
    }
    cgroup
}

/// `--threshold auto` inside a 1 GiB cgroup: S comes from the cgroup's free memory, a quarter of
/// it per rank, and the record says so.
fn auto_threshold_follows_the_cgroup(mpi: Mpi) {
    let Some(cgroup) = cgroup_or_skip(&format!("evenflush-test-auto-{}", mpi.name()), 1 << 30)
    else {
        return;
    };
    let dir = scratch(&format!("memory-auto-{}", mpi.name()));
    let out = {
        let _guard = mpi_lock();
        cgroup.run(
            mpi,
            "ring",
            &["--iterations", "1000"],
            &dir,
            &["--threshold", "auto"],
        )
    };
    common::check(out, "ring with --threshold auto");
    for (rank, s) in seen(&dir).iter().enumerate() {
        let t = s.thresholds.first().expect("a Threshold record");
        assert_eq!(t.basis, ThresholdBasis::Cgroup, "rank {rank}: {t:?}");
        assert_eq!(t.ranks_on_node, 2);
        assert!(t.available > 0 && t.available <= 1 << 30, "{t:?}");
        assert_eq!(
            t.bytes,
            t.available / 2 / 4,
            "rank {rank}: a quarter of the free memory per rank"
        );
    }
}

/// A fixed S of 1 GiB per rank in a 256 MiB cgroup: the job is told, once per rank that sees the
/// cgroup's figures, with the setting that would help, and the trace marks it.
fn an_s_that_cannot_fit_is_warned(mpi: Mpi) {
    let Some(cgroup) = cgroup_or_skip(&format!("evenflush-test-low-{}", mpi.name()), 256 * MIB)
    else {
        return;
    };
    let dir = scratch(&format!("memory-low-{}", mpi.name()));
    let out = {
        let _guard = mpi_lock();
        cgroup.run(
            mpi,
            "ring",
            &["--iterations", "1000"],
            &dir,
            &["--threshold", "1GiB", "--limit", "2GiB"],
        )
    };
    let out = common::check(out, "ring with an oversized threshold");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the job may swap") && stderr.contains("--threshold auto"),
        "{stderr}"
    );
    let ranks = seen(&dir);
    assert_eq!(ranks[0].memory_low, 1, "rank 0 reads the node's figures");
}

mod cgroups {
    use super::*;
    for_both_mpis!(
        auto_threshold_follows_the_cgroup,
        an_s_that_cannot_fit_is_warned
    );
}
