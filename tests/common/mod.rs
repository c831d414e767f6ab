//! Shared machinery of the integration tests: build the bundled programs once per MPI, run them with
//! and without the recorder through the real `evenflush` binary and `mpirun`, and read traces back.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use format::{Event, RankFile};

mod skip;
#[allow(unused_imports)] // not every test crate skips
pub use skip::{ALLOW_SKIP_VAR, SKIPPED_PREFIX, skip_allowed, skip_or_fail};

/// One `#[test]` per MPI for each listed `fn name(mpi: Mpi)`, in modules `openmpi` and `mpich`.
/// (Not every test file that includes this module uses it.)
#[allow(unused_macros)]
macro_rules! for_both_mpis {
    // Tests too long for CI, run on demand (`--ignored`): `module::{openmpi,mpich}::test`.
    (ignored $module:ident, $reason:literal: $($test:ident),*) => {
        mod $module {
            mod openmpi {
                $( #[test] #[ignore = $reason] fn $test() { super::super::$test(super::super::Mpi::OpenMpi) } )*
            }
            mod mpich {
                $( #[test] #[ignore = $reason] fn $test() { super::super::$test(super::super::Mpi::Mpich) } )*
            }
        }
    };
    ($($test:ident),*) => {
        mod openmpi {
            $( #[test] fn $test() { super::$test(super::Mpi::OpenMpi) } )*
        }
        mod mpich {
            $( #[test] fn $test() { super::$test(super::Mpi::Mpich) } )*
        }
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    pub fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }
    pub fn mpirun(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "mpirun.openmpi",
            Mpi::Mpich => "mpirun.mpich",
        }
    }
    /// The harness's name for this MPI, whose launcher flags the tests share.
    fn harness(self) -> harness::mpi::MpiImpl {
        match self {
            Mpi::OpenMpi => harness::mpi::MpiImpl::Openmpi,
            Mpi::Mpich => harness::mpi::MpiImpl::Mpich,
        }
    }

    /// `mpirun -np N` with what each launcher needs on a 2-core machine run as root; MPICH's
    /// ranks are left unbound (as a user's plain `mpirun` leaves them).
    pub fn launch(self, ranks: u32) -> Vec<String> {
        let flags: &[&str] = match self {
            Mpi::OpenMpi => self.harness().launcher_flags(),
            Mpi::Mpich => &[],
        };
        self.launch_with(flags, ranks)
    }

    /// [`Self::launch`] with each rank bound to its own core, as a batch system places them, by
    /// the flags the harness's own jobs use.
    pub fn launch_bound(self, ranks: u32) -> Vec<String> {
        self.launch_with(self.harness().launcher_flags(), ranks)
    }

    fn launch_with(self, flags: &[&str], ranks: u32) -> Vec<String> {
        std::iter::once(self.mpirun())
            .chain(flags.iter().copied())
            .map(str::to_string)
            .chain(["-np".to_string(), ranks.to_string()])
            .collect()
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn evenflush_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_evenflush"))
}

/// MPI jobs run one at a time: on 2 cores, concurrent oversubscribed jobs whose ranks spin while
/// waiting would make every timing meaningless and some runs very slow.
pub fn mpi_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn scratch_root() -> PathBuf {
    let dir = evenflush_bin()
        .parent()
        .expect("binary has a directory")
        .join("integration-scratch");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh empty directory for one test's output.
pub fn scratch(name: &str) -> PathBuf {
    let dir = scratch_root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds `tests/programs` and the shared `workloads` (halo, polling, ...) for `mpi` once per test
/// binary and returns the directory of binaries.
pub fn programs(mpi: Mpi) -> PathBuf {
    static BUILT: OnceLock<Mutex<BTreeMap<&'static str, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(dir) = built.get(mpi.name()) {
        return dir.clone();
    }
    let dir = scratch_root().join(format!("programs-{}", mpi.name()));
    for script in ["tests/programs/build.sh", "workloads/build.sh"] {
        let out = Command::new("bash")
            .arg(repo_root().join(script))
            .arg(mpi.name())
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        assert!(
            out.status.success(),
            "building the test programs for {} failed ({script}):\n{}{}",
            mpi.name(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    built.insert(mpi.name(), dir.clone());
    dir
}

/// Environment every MPI job gets: Open MPI refuses root without these.
pub fn mpi_env(cmd: &mut Command) -> &mut Command {
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
}

/// `out` of a command that must have succeeded; otherwise panics with everything it printed.
pub fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Exports `trace` as an OTF2 archive at `archive`; false (with the skip recorded) when this
/// evenflush was built without OTF2, and a panic with its output when the export fails.
pub fn export_otf2(trace: &Path, archive: &Path) -> bool {
    let _ = std::fs::remove_dir_all(archive);
    let exported = Command::new(evenflush_bin())
        .args(["export", "--format", "otf2", "--out"])
        .arg(archive)
        .arg(trace)
        .output()
        .expect("run evenflush export");
    if !exported.status.success()
        && String::from_utf8_lossy(&exported.stderr).contains("without OTF2")
    {
        skip_or_fail("otf2", "this evenflush was built without OTF2 support");
        return false;
    }
    check(exported, "evenflush export --format otf2");
    true
}

/// The time limit of one test job: the slowest bundled job takes a few seconds, but a 2-core
/// machine shared with builds can stretch that a lot; a hang must still end.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// Runs `cmd` (stdin closed, output captured) in a process group of its own and waits at most
/// `limit`; past it, kills the whole group (the launcher and the ranks it forked) and panics with
/// what the job printed, so a hung job fails instead of hanging the suite.
pub fn output_with_timeout(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the job") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let Some(status) = status else {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.wait();
        // Ranks that left the group may keep the pipes open: do not wait for them.
        panic!("{what} did not end within {} s: killed", limit.as_secs());
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Runs `program args` on `ranks` ranks without the recorder; returns stdout.
pub fn run_plain(mpi: Mpi, ranks: u32, program: &str, args: &[&str]) -> String {
    let mut argv = mpi.launch(ranks);
    argv.push(programs(mpi).join(program).display().to_string());
    argv.extend(args.iter().map(|s| s.to_string()));
    let out = output_with_timeout(
        mpi_env(Command::new(&argv[0]).args(&argv[1..])),
        JOB_TIMEOUT,
        &format!("plain run of {program} ({})", mpi.name()),
    );
    String::from_utf8(check(out, &format!("plain run of {program} ({})", mpi.name())).stdout)
        .unwrap()
}

/// Runs `program args` under `evenflush run --out out <flags>`; returns the job's output.
pub fn run_traced_output(
    mpi: Mpi,
    ranks: u32,
    program: &str,
    args: &[&str],
    out: &Path,
    flags: &[&str],
) -> Output {
    let mut cmd = Command::new(evenflush_bin());
    cmd.arg("run");
    // Flags naming several output directories replace the single one.
    if !flags.contains(&"--out") {
        cmd.arg("--out").arg(out);
    }
    cmd.args(flags).arg("--");
    cmd.args(mpi.launch(ranks));
    cmd.arg(programs(mpi).join(program));
    cmd.args(args);
    output_with_timeout(
        mpi_env(&mut cmd),
        JOB_TIMEOUT,
        &format!("traced run of {program} ({})", mpi.name()),
    )
}

pub fn run_traced(
    mpi: Mpi,
    ranks: u32,
    program: &str,
    args: &[&str],
    out: &Path,
    flags: &[&str],
) -> String {
    let output = run_traced_output(mpi, ranks, program, args, out, flags);
    String::from_utf8(check(output, &format!("traced run of {program} ({})", mpi.name())).stdout)
        .unwrap()
}

/// `evenflush info --json DIR`, parsed.
pub fn info_json(dir: &Path) -> serde_json::Value {
    let out = Command::new(evenflush_bin())
        .args(["info", "--json"])
        .arg(dir)
        .output()
        .expect("run evenflush info");
    let out = check(out, "evenflush info");
    serde_json::from_slice(&out.stdout).expect("info --json prints JSON")
}

/// The expected figures of a bundled program (tests/programs/expected.json).
pub fn expected(program: &str) -> serde_json::Value {
    static EXPECTED: OnceLock<serde_json::Value> = OnceLock::new();
    let all = EXPECTED.get_or_init(|| {
        let text =
            std::fs::read_to_string(repo_root().join("tests/programs/expected.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    });
    all.get(program)
        .unwrap_or_else(|| panic!("{program} not in expected.json"))
        .clone()
}

/// The MPI functions the recorder wraps, from its one table (`recorder/mpi_functions.tsv`).
/// Not for expectations: a test that filters what it expects through the table under test cannot
/// notice a function missing from it (expected.json lists what is not recorded instead).
pub fn wrapped_functions() -> std::collections::BTreeSet<String> {
    let table = std::fs::read_to_string(repo_root().join("recorder/mpi_functions.tsv")).unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("MPI_"))
        .filter_map(|l| l.split('\t').next())
        .map(String::from)
        .collect()
}

/// One rank's events in order, per stream, with function names resolved.
pub struct RankEvents {
    pub rank: u32,
    pub streams: BTreeMap<u32, Vec<Event>>,
    pub functions: BTreeMap<u16, String>,
    pub comms: BTreeMap<u32, Vec<u32>>,
}

impl RankEvents {
    pub fn all(&self) -> impl Iterator<Item = &Event> {
        self.streams.values().flatten()
    }
    pub fn name(&self, func: u16) -> &str {
        self.functions.get(&func).map(String::as_str).unwrap_or("?")
    }
    /// Calls of one function, in order (all streams).
    pub fn calls(&self, name: &str) -> Vec<format::MpiCall> {
        self.all()
            .filter_map(|e| match e {
                Event::Call(c) if self.name(c.func) == name => Some(*c),
                _ => None,
            })
            .collect()
    }
    /// Polls of one function that found nothing, folded into `Polls` records (all streams).
    pub fn idle_polls(&self, name: &str) -> u64 {
        self.all()
            .map(|e| match e {
                Event::Polls(p) if self.name(p.func) == name => p.count,
                _ => 0,
            })
            .sum()
    }
    /// World rank of `peer` in communicator `comm`.
    pub fn world(&self, comm: u32, peer: i32) -> u32 {
        let peer = u32::try_from(peer).expect("a real rank");
        match self.comms.get(&comm) {
            Some(members) => members[peer as usize],
            // Communicator 0 is MPI_COMM_WORLD by definition (format/FORMAT.md).
            None if comm == 0 => peer,
            None => panic!("rank {}: communicator {comm} never defined", self.rank),
        }
    }
}

/// Reads every rank of a trace directory (all parts of a rank, in part order: its rank files, or
/// its share of a group file and its own part files), asserting that nothing in it is damaged,
/// cut, missing or duplicated.
pub fn read_trace(dir: &Path) -> Vec<RankEvents> {
    let mut by_rank: BTreeMap<u32, Vec<format::RankPart>> = BTreeMap::new();
    for part in format::list_dir(dir).unwrap().parts() {
        by_rank.entry(part.rank()).or_default().push(part);
    }
    let mut ranks = Vec::new();
    for (rank, mut parts) in by_rank {
        parts.sort_by_key(|p| p.part());
        let mut r = RankEvents {
            rank,
            streams: BTreeMap::new(),
            functions: BTreeMap::new(),
            comms: BTreeMap::new(),
        };
        let files: Vec<RankFile> = parts.iter().map(|p| p.open().unwrap()).collect();
        let mut walk = format::ChunkWalk::new(&files);
        for chunk in walk.by_ref() {
            let stream = chunk.stream();
            for e in chunk.events() {
                match &e {
                    Event::FunctionDef { id, name } => {
                        r.functions.insert(*id, name.clone());
                    }
                    Event::CommDef { id, members } => {
                        r.comms.insert(*id, members.clone());
                    }
                    _ => {}
                }
                r.streams.entry(stream).or_default().push(e);
            }
        }
        assert!(
            walk.issues().is_empty(),
            "{}: rank {rank}: {:?}",
            dir.display(),
            walk.issues()
        );
        ranks.push(r);
    }
    ranks
}

/// The iterative workload of the offload and reconstruct tests (workloads/iterative.c).
pub const ITERATIONS: u32 = 200;
/// User record bytes per rank and iteration: 12.5 MiB per rank over the run.
pub const RECORD_BYTES: u32 = 65536;
pub const RECORDS: u32 = 4;

/// Builds `workloads/` (iterative, halo, ...) alone for `mpi` once per test binary and returns the
/// directory of binaries.
pub fn apps(mpi: Mpi) -> std::path::PathBuf {
    static BUILT: std::sync::Mutex<Vec<(Mpi, std::path::PathBuf)>> =
        std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, dir)) = built.iter().find(|(m, _)| *m == mpi) {
        return dir.clone();
    }
    let dir = scratch(&format!("apps-{}", mpi.name()));
    let out = Command::new("bash")
        .arg(repo_root().join("workloads/build.sh"))
        .arg(mpi.name())
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    built.push((mpi, dir.clone()));
    dir
}

/// Runs the iterative workload (compute, user records, barrier) on 2 ranks with `flags`.
pub fn run_iterative(mpi: Mpi, out: &Path, flags: &[&str]) -> std::process::Output {
    run_iterative_work(mpi, out, flags, 1_800_000)
}

/// [`run_iterative`] with `work_units` of fixed work per iteration (~2.2 ns each here).
pub fn run_iterative_work(
    mpi: Mpi,
    out: &Path,
    flags: &[&str],
    work_units: u64,
) -> std::process::Output {
    run_iterative_with(mpi, out, flags, work_units, &[])
}

/// [`run_iterative_work`] with more arguments for the program (e.g. `--random-payload 1`).
pub fn run_iterative_with(
    mpi: Mpi,
    out: &Path,
    flags: &[&str],
    work_units: u64,
    app_args: &[&str],
) -> std::process::Output {
    let mut cmd = Command::new(evenflush_bin());
    cmd.arg("run");
    // Flags naming several output directories replace the single one.
    if !flags.contains(&"--out") {
        cmd.arg("--out").arg(out);
    }
    cmd.args(flags).arg("--");
    cmd.args(mpi.launch(2)).arg(apps(mpi).join("iterative"));
    cmd.args([
        "--iterations",
        &ITERATIONS.to_string(),
        // A fixed amount of work, not a calibrated time, so that runs compare; register-only
        // work (`--mem 0`), whose speed does not depend on caches shared with other processes
        // (memory-bound work varies by ±10 % between runs here, register work by ~1 %).
        "--work-units",
        &work_units.to_string(),
        "--mem",
        "0",
    ]);
    cmd.args([
        "--record-bytes",
        &RECORD_BYTES.to_string(),
        "--records",
        &RECORDS.to_string(),
    ]);
    cmd.args(app_args);
    output_with_timeout(
        mpi_env(&mut cmd),
        JOB_TIMEOUT,
        &format!("iterative run ({})", mpi.name()),
    )
}

/// Mounts a 32 KiB tmpfs on `dir` (a disk that fills after a few flushes). False, after
/// [`skip_or_fail`] said why, where it cannot be mounted here (needs root).
pub fn mount_small_tmpfs(dir: &Path, test: &str) -> bool {
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32k", "tmpfs"])
        .arg(dir)
        .status();
    if matches!(mount, Ok(s) if s.success()) {
        return true;
    }
    skip_or_fail(
        "tmpfs",
        &format!("{test}: cannot mount a tmpfs here (needs root)"),
    );
    false
}

/// The rank files (`*.evf`) of a trace directory, by name, with their bytes.
pub fn rank_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "evf"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// `reconstruct --json`'s summary from a run's stdout, without the one field that differs between
/// two outputs of the same trace by design (the output's path).
pub fn reconstruct_summary(out: &Output, what: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    if let Some(map) = v.as_object_mut() {
        map.remove("out");
    }
    v
}

/// Whether the writer backend `want` (`posix`, `uring`, `mpiio`, `group`) is the one that wrote
/// every rank of `info` (`evenflush info --json`), as [`assert_writer_used`] checks. False, after
/// [`skip_or_fail`] (`io_uring`) said why, where the kernel refused io_uring and the recorder fell
/// back to posix: a test of the io_uring writer then tested posix, and must not pass as if not.
pub fn writer_ran(info: &serde_json::Value, want: &str, what: &str) -> bool {
    if want == "uring" {
        let refused = info["per_rank"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["writers"].as_array().into_iter().flatten())
            .find(|w| {
                w["requested"] == "uring"
                    && w["change"] == "fallback"
                    && w["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("io_uring setup failed"))
            });
        if let Some(w) = refused {
            skip_or_fail(
                "io_uring",
                &format!("{what}: the kernel refuses io_uring here: {}", w["reason"]),
            );
            return false;
        }
    }
    assert_writer_used(info, want);
    true
}

/// Every rank's trace says it was written by `want` (a fallback to posix is a failure, reported
/// with the recorder's reason; [`writer_ran`] turns a kernel without io_uring into a skip). MPI-IO's
/// hand-over to posix at `MPI_Finalize` for the end of the trace is expected.
pub fn assert_writer_used(info: &serde_json::Value, want: &str) {
    let ranks = info["per_rank"].as_array().expect("per_rank");
    assert_eq!(ranks.len() as u64, info["ranks"].as_u64().unwrap());
    for r in ranks {
        let rank = &r["rank"];
        let writers = r["writers"].as_array().expect("writers");
        assert!(!writers.is_empty(), "rank {rank}: no Writer record: {r}");
        for w in writers {
            assert_ne!(
                w["change"], "fallback",
                "rank {rank}: writer {} fell back to {}: {}",
                w["requested"], w["used"], w["reason"]
            );
        }
        let first = &writers[0];
        assert_eq!(first["requested"], want, "rank {rank}: {writers:?}");
        assert_eq!(first["used"], want, "rank {rank}: {writers:?}");
        assert_eq!(first["change"], "opened", "rank {rank}: {writers:?}");
        assert_eq!(first["part"], 0, "rank {rank}: {writers:?}");
        for later in &writers[1..] {
            assert_eq!(
                (want, &later["change"], &later["used"]),
                ("mpiio", &"finalize-handover".into(), &"posix".into()),
                "rank {rank}: only MPI-IO hands over, to posix, at finalize: {writers:?}"
            );
        }
    }
    assert_eq!(info["writer_fallbacks"], serde_json::json!([]));
}
