//! MPICH's own test suite (`test/mpi` of the MPICH source, fetched by `scripts/setup.sh`) run under
//! Open MPI and MPICH, every program once without and once with the recorder.
//!
//! Those programs were written by people who knew MPI's corner cases and nothing of evenflush:
//! attribute callbacks at free time, cancelled and generalized requests, `MPI_BOTTOM` buffers,
//! intercommunicators, windows of every flavour, MPI-IO, threads. Whatever a wrapper gets wrong in
//! arguments, handles or request completion shows up as a program that no longer says `No Errors`.
//! Each program must end the same way in both runs (exit 0, the same lines printed, `No Errors`
//! among them), and the traced run must leave a trace of every rank with nothing lost, whose
//! messages all pair and whose collectives all match with no violation (but the sends the list
//! excuses), which `reconstruct --hb` and `--model replay` write back matching as it did. Every
//! failure is
//! collected and reported together at the end.
//!
//! `tests/mpich-testsuite/list` chooses the programs and says, for each left-out one, why;
//! `scripts/mpich-testsuite.sh` builds them (once per source change).

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Mpi, evenflush_bin, mpi_env, mpi_lock, repo_root, scratch, skip_or_fail};

/// The name under which a missing source may be accepted as a skip (`EVENFLUSH_TEST_ALLOW_SKIP`).
const SKIP_NAME: &str = "mpich-testsuite";

/// The longest any one run may take: the chosen programs end within about a second, but a rank that
/// spins on a 2-core machine shared with a build can be slowed a lot; a hang must still end.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// What every program of the suite prints (rank 0, mostly from `MTest_Finalize`) when it found
/// nothing wrong; a few print it themselves, without MTest's leading space.
const SUCCESS: &str = "No Errors";

for_both_mpis!(mpich_testsuite);

struct Program {
    name: String,
    ranks: u32,
    /// Whether its trace may leave sends unmatched (the list's `unmatched-sends`).
    unmatched_sends: bool,
    args: Vec<String>,
}

fn suite_root() -> PathBuf {
    repo_root().join("target/mpich-testsuite")
}

fn script(action: &str, mpi: Mpi) -> Output {
    Command::new("bash")
        .arg(repo_root().join("scripts/mpich-testsuite.sh"))
        .args([action, mpi.name()])
        .output()
        .expect("run scripts/mpich-testsuite.sh")
}

/// The programs `list` gives this MPI, in the list's order.
fn programs(mpi: Mpi) -> Vec<Program> {
    let out = common::check(script("list", mpi), "mpich-testsuite.sh list");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next().expect("a name").to_string();
            let ranks = fields
                .next()
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("list: {name}: no rank count"));
            let unmatched_sends = match fields.next() {
                Some("all") => false,
                Some("unmatched-sends") => true,
                other => panic!("list: {name}: matching {other:?}"),
            };
            let args = fields.map(String::from).collect();
            Program {
                name,
                ranks,
                unmatched_sends,
                args,
            }
        })
        .collect()
}

/// Runs `cmd` in `dir` with the suite's time limit. A run past the limit is killed (with its ranks)
/// and becomes a failed result instead of ending the whole test.
fn run(mut cmd: Command, dir: &Path, what: &str) -> Result<Output, String> {
    cmd.current_dir(dir);
    mpi_env(&mut cmd);
    let output = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        common::output_with_timeout(&mut cmd, RUN_TIMEOUT, what)
    }))
    .map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| format!("{what}: did not end"))
    })?;
    // Kept beside the run for whoever reads a failure report.
    std::fs::write(dir.join("stdout"), &output.stdout).unwrap();
    std::fs::write(dir.join("stderr"), &output.stderr).unwrap();
    Ok(output)
}

/// The last lines of what a run printed: enough to see MTest's complaint, short enough that a
/// report of many failures stays readable.
fn tail(output: &Output) -> String {
    let mut all = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stderr.trim().is_empty() {
        all.push_str("--- stderr\n");
        all.push_str(&stderr);
    }
    let lines: Vec<&str> = all.lines().collect();
    let keep = lines.len().saturating_sub(25);
    let mut text = String::new();
    if keep > 0 {
        text.push_str(&format!("[{keep} earlier lines]\n"));
    }
    for line in &lines[keep..] {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

fn sorted_lines(bytes: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(bytes)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

fn succeeded(output: &Output) -> bool {
    output.status.success() && String::from_utf8_lossy(&output.stdout).contains(SUCCESS)
}

/// Why the trace of a successful traced run is not whole, if it is not.
fn trace_problems(trace: &Path, program: &Program) -> Vec<String> {
    let ranks = program.ranks;
    let out = Command::new(evenflush_bin())
        .args(["info", "--json"])
        .arg(trace)
        .output()
        .expect("run evenflush info");
    if !out.status.success() {
        return vec![format!(
            "evenflush info cannot read the trace: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )];
    }
    let info: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(info) => info,
        Err(e) => return vec![format!("evenflush info --json printed no JSON: {e}")],
    };
    let mut problems = Vec::new();
    if info["ranks"] != ranks {
        problems.push(format!("trace has {} ranks, not {ranks}", info["ranks"]));
    }
    if info["lost_events"] != 0 {
        problems.push(format!("{} events lost", info["lost_events"]));
    }
    if info["recording_stopped"] != false {
        problems.push("recording stopped".into());
    }
    let abnormal: Vec<String> = info["per_rank"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["abnormal_end"] == true)
        .map(|r| r["rank"].to_string())
        .collect();
    if !abnormal.is_empty() {
        problems.push(format!("abnormal end on rank(s) {}", abnormal.join(", ")));
    }
    if problems.is_empty() {
        problems.extend(matching_problems(trace, program.unmatched_sends));
    }
    problems
}

/// The trace must match completely as recorded: every message paired (but the sends of a program
/// the list marks `unmatched-sends`) and no violation, which on one host, with one clock, only a
/// matching error makes. What the reconstruction writes must match as the trace did: the check
/// after `--hb` and after the replay pairs the same messages and leaves the same ones unmatched as
/// the check before, and `--hb` leaves no violation.
fn matching_problems(trace: &Path, unmatched_sends: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for model in [&["--hb"][..], &["--model", "replay"][..]] {
        let out_dir = trace.with_extension(format!("reconstructed-{}", model.len()));
        let out = Command::new(evenflush_bin())
            .arg("reconstruct")
            .arg(trace)
            .args(["--remove", "both", "--json", "--out"])
            .arg(&out_dir)
            .args(model)
            .output()
            .expect("run evenflush reconstruct");
        let _ = std::fs::remove_dir_all(&out_dir);
        let what = format!("evenflush reconstruct {}", model.join(" "));
        if !out.status.success() {
            problems.push(format!(
                "{what} fails: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        let summary: serde_json::Value = match serde_json::from_slice(&out.stdout) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{what} printed no JSON: {e}"));
                continue;
            }
        };
        let hb = &summary["hb"];
        if model == ["--hb"] {
            let before = &hb["before"];
            let mut must_be_0 = vec![
                (&before["unmatched_receives"], "unmatched receives"),
                (&hb["violations_recorded"], "violations as recorded"),
            ];
            if !unmatched_sends {
                must_be_0.push((&before["unmatched_sends"], "unmatched sends"));
            }
            for (value, what) in must_be_0 {
                if *value != 0 {
                    problems.push(format!("the trace as recorded has {value} {what}: {hb}"));
                }
            }
        }
        for key in [
            "messages",
            "rma_epochs",
            "collective_exits",
            "unmatched_sends",
            "unmatched_receives",
            "waits_on_absent_ranks",
        ] {
            if hb["before"][key] != hb["after"][key] {
                problems.push(format!(
                    "{what}: {key} {} before, {} in what it wrote",
                    hb["before"][key], hb["after"][key]
                ));
            }
        }
        if model == ["--hb"] && hb["violations_after"] != 0 {
            problems.push(format!(
                "{what}: {} violations left after the repair",
                hb["violations_after"]
            ));
        }
    }
    problems
}

/// One program, untraced then traced; the description of everything that differed, if anything.
fn check_program(mpi: Mpi, exe: &Path, program: &Program) -> Result<(), String> {
    let base = scratch(&format!("mpich-testsuite/{}/{}", mpi.name(), program.name));
    // Each run in a directory of its own: the I/O programs create files in the current directory.
    let (plain_dir, traced_dir, trace) =
        (base.join("plain"), base.join("traced"), base.join("trace"));
    for dir in [&plain_dir, &traced_dir] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let launch = mpi.launch(program.ranks);

    let mut plain = Command::new(&launch[0]);
    plain.args(&launch[1..]).arg(exe).args(&program.args);
    let mut traced = Command::new(evenflush_bin());
    traced.arg("run").arg("--out").arg(&trace).arg("--");
    traced.args(&launch).arg(exe).args(&program.args);

    let plain = run(plain, &plain_dir, "untraced run")
        .map_err(|e| format!("fails WITHOUT the recorder: {e}"))?;
    if !succeeded(&plain) {
        // The list promises that this program passes on this MPI without the recorder.
        return Err(format!(
            "fails WITHOUT the recorder ({}); fix the list:\n{}",
            plain.status,
            tail(&plain)
        ));
    }
    let traced = run(traced, &traced_dir, "traced run")
        .map_err(|e| format!("passes untraced, fails TRACED: {e}"))?;

    let mut problems = Vec::new();
    if traced.status.code() != plain.status.code() {
        problems.push(format!(
            "{} traced, {} untraced",
            traced.status, plain.status
        ));
    }
    if !String::from_utf8_lossy(&traced.stdout).contains(SUCCESS) {
        problems.push(format!("traced run does not print '{SUCCESS}'"));
    } else if sorted_lines(&traced.stdout) != sorted_lines(&plain.stdout) {
        // Ranks print in any order, so only the lines are compared, not their order.
        problems.push("traced run prints other lines than the untraced run".into());
    }
    if problems.is_empty() {
        problems.extend(trace_problems(&trace, program));
        if problems.is_empty() {
            return Ok(());
        }
    }
    Err(format!(
        "passes untraced, fails TRACED: {}\n  untraced output:\n{}  traced output:\n{}",
        problems.join("; "),
        tail(&plain),
        tail(&traced)
    ))
}

fn mpich_testsuite(mpi: Mpi) {
    let source = suite_root().join("src/test/mpi/util/mtest.c");
    if !source.exists() {
        skip_or_fail(
            SKIP_NAME,
            &format!(
                "MPICH's test suite is not in {} (scripts/setup.sh fetches it with \
                 `apt-get source mpich`, which needs the network)",
                suite_root().join("src").display()
            ),
        );
        return;
    }
    let started = Instant::now();
    common::check(script("build", mpi), "building MPICH's test suite");
    let built = started.elapsed();

    let programs = programs(mpi);
    assert!(
        !programs.is_empty(),
        "the list gives {} no program",
        mpi.name()
    );
    // Empty, so that nothing left from programs no longer in the list can be mistaken for output.
    scratch(&format!("mpich-testsuite/{}", mpi.name()));
    let mut failures = Vec::new();
    let mut running = Duration::ZERO;
    for program in &programs {
        let exe = suite_root().join(mpi.name()).join(&program.name);
        // Timed from the lock on: the other MPI's test waits here too.
        let guard = mpi_lock();
        let one = Instant::now();
        let result = check_program(mpi, &exe, program);
        running += one.elapsed();
        drop(guard);
        println!(
            "{:<8} {:<44} {} ranks {:>6.2} s {}",
            mpi.name(),
            program.name,
            program.ranks,
            one.elapsed().as_secs_f64(),
            if result.is_ok() { "ok" } else { "FAILED" }
        );
        if let Err(why) = result {
            failures.push(format!("{} ({}): {why}", program.name, mpi.name()));
        }
    }
    println!(
        "{}: {} programs, build {:.1} s, untraced and traced runs {:.1} s, {:.1} s in all",
        mpi.name(),
        programs.len(),
        built.as_secs_f64(),
        running.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} programs of MPICH's test suite failed under {}:\n\n{}",
        failures.len(),
        programs.len(),
        mpi.name(),
        failures.join("\n\n")
    );
}
