//! The swap-versus-offload harness on the real machine: `--quick` end to end. It needs root, swap,
//! a cgroup memory controller, Open MPI and a release evenflush binary; without them it fails
//! unless the skip `swap-experiment` is allowed (`tests/common/skip.rs`).

use std::path::{Path, PathBuf};

#[path = "../../tests/common/skip.rs"]
mod skip;

use clap::Parser;
use harness::swap::args::{Experiment, ExperimentArgs};
use harness::swap::{self, plan::Config, system};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Top,
}

#[derive(clap::Subcommand)]
enum Top {
    Experiment(ExperimentArgs),
}

fn evenflush_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("EVENFLUSH_BIN") {
        return Some(PathBuf::from(p));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .to_path_buf();
    [workspace.join("target/release/evenflush")]
        .into_iter()
        .chain(
            std::env::var_os("CARGO_TARGET_DIR")
                .map(|d| PathBuf::from(d).join("release/evenflush")),
        )
        .find(|p| p.is_file())
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

/// The reason the machine cannot run the experiment, if any.
fn skip_reason() -> Option<String> {
    let ready = system::check_readiness();
    if !ready.problems.is_empty() {
        return Some(ready.problems.join("; "));
    }
    if !on_path("mpirun") || !on_path("mpicc") {
        return Some("Open MPI (mpirun, mpicc) is not installed".into());
    }
    if evenflush_binary().is_none() {
        return Some(
            "no release evenflush binary (cargo build --release, or set EVENFLUSH_BIN)".into(),
        );
    }
    None
}

fn options(extra: &[&str], out: &Path) -> swap::Options {
    let mut argv = vec![
        "evenflush".to_string(),
        "experiment".into(),
        "swap-vs-offload".into(),
        "--out".into(),
        out.display().to_string(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    let Top::Experiment(args) = Cli::try_parse_from(argv).expect("arguments parse").cmd;
    let Experiment::SwapVsOffload(a) = args.which;
    a.into_options(evenflush_binary()).expect("options resolve")
}

fn our_cgroups_left(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("evenflush-swap-{}-", std::process::id())))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn quick_experiment_runs_and_restores_the_machine() {
    if let Some(reason) = skip_reason() {
        skip::skip_or_fail("swap-experiment", &reason);
        return;
    }
    let out = std::env::temp_dir().join(format!("evenflush-swap-quick-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let swaps_before = std::fs::read_to_string("/proc/swaps").unwrap();
    let opts = options(&["--quick"], &out);
    let cells = swap::plan::build_matrix(&opts.sizes, &opts.configs, &opts.thresholds, opts.reps);
    let parent = system::check_readiness().cgroup.unwrap().dir;

    let outcome = swap::run(&opts).expect("quick experiment");

    // The machine is as before: same swap areas, none of our cgroups.
    assert_eq!(
        std::fs::read_to_string("/proc/swaps").unwrap(),
        swaps_before
    );
    assert!(!opts.swap_file.exists(), "swap file left behind");
    assert_eq!(our_cgroups_left(&parent), Vec::<String>::new());

    assert_eq!(outcome.rows.len(), cells.len());
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), cells.len() + 1);
    for png in ["time.png", "error.png", "spread.png"] {
        let len = std::fs::metadata(out.join(png))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 1000, "{png} missing or empty");
    }
    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(
        table.contains("| M (MiB) | mem (MiB) | untraced | T |"),
        "{table}"
    );

    // Untraced runs must work at every size; the in-memory runs must at least finish their loop
    // (writing a swapped-out trace at the end may hit the time cap at the largest size).
    let largest = *opts.sizes.last().unwrap();
    for row in &outcome.rows {
        if row.config == Some(Config::Untraced) {
            assert!(row.ok(), "untraced failed: {}", row.note);
        }
        if matches!(row.config, Some(Config::Untraced) | Some(Config::Off)) {
            assert!(
                row.program_s.is_some_and(|t| t > 0.0),
                "{:?} at {} has no loop time: {}",
                row.config,
                row.trace_bytes,
                row.note
            );
        }
        if let Some(config) = row.config.filter(|c| c.is_traced()) {
            // Every traced run must succeed, but the in-memory one at the largest size, whose end
            // may hit the time cap (its loop time is checked above): a failed run is not skipped.
            assert!(
                row.ok() || (config == Config::Off && row.trace_bytes == largest),
                "{config:?} at {} failed: {}",
                row.trace_bytes,
                row.note
            );
        }
        if row.config.is_some_and(|c| c.is_traced()) && row.ok() {
            let looped = row
                .reconstructed_loop_s
                .expect("traced runs are reconstructed");
            let program = row.program_s.unwrap();
            // Removing time can only shorten the loop (generous: clock noise of 1 %).
            assert!(looped <= program * 1.01, "{looped} > {program}");
        }
    }
    // The largest size exceeds the memory limit: the swap baseline must really have swapped.
    let swapped: u64 = outcome
        .rows
        .iter()
        .filter(|r| r.config == Some(Config::Off) && r.trace_bytes == largest)
        .map(|r| r.swap_out_pages)
        .sum();
    assert!(
        swapped > 0,
        "no swap-out in the swap baseline at M = {largest}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// A full experiment with the arguments in EVENFLUSH_EXPERIMENT_ARGS (space separated), for
/// running the real matrix before `evenflush experiment` is wired into the CLI:
/// `EVENFLUSH_EXPERIMENT_ARGS="--out DIR --reps 2" cargo test --release --test harness_quick -- --ignored`
#[test]
#[ignore = "long: runs the experiment named by EVENFLUSH_EXPERIMENT_ARGS"]
fn experiment_from_environment() {
    if let Some(reason) = skip_reason() {
        skip::skip_or_fail("swap-experiment", &reason);
        return;
    }
    let text = std::env::var("EVENFLUSH_EXPERIMENT_ARGS").unwrap_or_default();
    let mut argv = vec!["evenflush", "experiment", "swap-vs-offload"];
    argv.extend(text.split_whitespace());
    let Top::Experiment(args) = Cli::try_parse_from(argv).expect("arguments parse").cmd;
    let Experiment::SwapVsOffload(a) = args.which;
    let opts = a.into_options(evenflush_binary()).expect("options resolve");
    let outcome = swap::run(&opts).expect("experiment");
    println!("{}", outcome.verdict.text);
}
