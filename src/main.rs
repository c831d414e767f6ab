//! The `evenflush` command line: one subcommand per task, each a thin layer over a workspace crate.

mod collect_cmd;
mod compare_cmd;
mod dump;
mod experiment_cmd;
mod export_cmd;
mod generate_cmd;
mod info;
mod mpi;
mod mpi_job;
mod reconstruct_cmd;
mod report_cmd;
mod run;
mod simulate_cmd;
mod timeline_cmd;
mod validate_cmd;
mod window_args;
mod wrap;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes, documented in `--help`.
const EXIT_USAGE: u8 = 2;
const EXIT_BAD_TRACE: u8 = 3;

#[derive(Parser)]
#[command(
    name = "evenflush",
    version,
    about = "Record full MPI traces of long runs, offload them in equalised suspensions, recover the original timing",
    after_help = "Exit codes: 0 success; 1 error; 2 bad usage; 3 damaged or missing trace. \
                  `evenflush run` returns the MPI job's own exit code."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run an MPI job with the recorder preloaded into every rank.
    #[command(
        after_help = "Example:\n  evenflush run --out trace --threshold 64MiB -- mpirun -np 4 ./app arg1\n\n\
        Every flag can also be given as its EVENFLUSH_* environment variable (shown with each flag)."
    )]
    Run(run_args::RunArgs),
    /// Run one rank of a job whose launcher starts the ranks itself (Slurm's srun) with the
    /// recorder preloaded; takes `run`'s flags.
    #[command(
        after_help = "Example (in an sbatch script):\n  srun -n 64 evenflush wrap --out trace -- ./app arg1\n\n        `evenflush run --out trace -- srun -n 64 ./app` does the same and also times the job.         Task 0 of the Slurm step records the job and step in the trace's meta.json."
    )]
    Wrap(wrap::WrapArgs),
    /// Prove the reconstruction on your own program: K untraced and K traced runs, interleaved;
    /// each traced run reconstructed; the error of T(G) against the untraced time, with its
    /// confidence interval and the untraced noise floor.
    #[command(
        after_help = "Example:\n  evenflush validate --reps 7 --threshold 8MiB -- mpirun -np 4 ./app\n\n\
        Time compared on both sides: end of MPI_Init to start of MPI_Finalize, the longest over \
        ranks (untraced runs measure it with a clock-only preload built with the MPI's mpicc; \
        the program must call MPI_Init/MPI_Finalize from C or C++). Every recorder flag of \
        `run` applies to the traced runs."
    )]
    Validate(validate_cmd::ValidateArgs),
    /// Summarise a trace: ranks, hosts, writers, events, calls per function, user events, span, suspensions.
    #[command(
        after_help = "Example:\n  evenflush info trace --json\n  evenflush info out/nodeA out/nodeB   # node-local directories of one run (see `collect`)"
    )]
    Info {
        /// Trace directory (holds rank-*.evf); several directories are put together as by `collect`.
        #[arg(required = true, num_args = 1..)]
        dirs: Vec<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Bring a run back together from several directories (node-local `--out` with %h): which rank
    /// came from which host, which ranks are missing; optionally gather the files into one directory.
    Collect(collect_cmd::CollectArgs),
    /// Recover the original timing: remove the suspensions (DP') and optionally the recorder cost (DP).
    Reconstruct(reconstruct_cmd::ReconstructArgs),
    /// Compare runs of the same program call by call: signed bias, share within a relative
    /// tolerance, per function and per rank; with several references, their noise floor.
    Compare(compare_cmd::CompareArgs),
    /// Profile a run (MPIPROF style): per-function times and sizes, size histograms, partners, imbalance.
    Report(report_cmd::ReportArgs),
    /// Export a trace for other viewers: Perfetto / chrome://tracing JSON, or OTF2.
    Export(export_cmd::ExportArgs),
    /// Draw a Gantt picture (PNG) of a trace: ranks, MPI calls by kind, messages, suspensions.
    Timeline(timeline_cmd::TimelineArgs),
    /// Experiments on this machine (needs root): `experiment swap-vs-offload` reproduces the paper's Table 1.
    Experiment(experiment_cmd::ExperimentArgs),
    /// Simulate the suspension protocol over virtual ranks (up to millions).
    Simulate(simulate_cmd::Args),
    /// Print every event of a trace as text, one per line: `[thread] rank event fields`.
    #[command(after_help = "Example:\n  evenflush dump trace --rank 0 | less")]
    Dump {
        /// Trace directory (holds rank-*.evf).
        dir: PathBuf,
        /// Only this rank.
        #[arg(long)]
        rank: Option<u32>,
    },
    /// Write man pages or shell completions into a directory (used by scripts/install.sh).
    #[command(hide = true)]
    Generate(generate_cmd::GenerateArgs),
}

mod run_args;

/// A panic ends the process, as it did when the workspace built with `panic = "abort"` (it unwinds
/// now, for the tests; Cargo.toml). Reconstruction's worker threads wait on each other's lanes, and
/// a split job's processes on each other: a worker that unwound alone would leave the rest
/// waiting, where a crash at least ends the job and says why (the default hook prints first).
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

fn main() -> ExitCode {
    // A reader that stops early (`evenflush dump t | head`) closes the pipe: end quietly, as
    // other command-line tools do, instead of panicking inside print!.
    // SAFETY: first thing in main, before any thread exists; only restores the default action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    abort_on_panic();
    let cli = match run_args::parse_cli() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Cmd::Run(args) => args
            .into_request()
            .and_then(run::run)
            .map(|code| ExitCode::from(code.clamp(0, 255) as u8)),
        Cmd::Wrap(args) => wrap::wrap(args).map(|()| ExitCode::FAILURE),
        Cmd::Validate(args) => validate_cmd::validate(args).map(|()| ExitCode::SUCCESS),
        Cmd::Info { dirs, json } => info::info(&dirs, json).map(|()| ExitCode::SUCCESS),
        Cmd::Collect(a) => collect_cmd::run(&a),
        Cmd::Reconstruct(a) => reconstruct_cmd::run(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Compare(a) => compare_cmd::run(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Report(a) => report_cmd::run(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Export(a) => export_cmd::run(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Timeline(a) => timeline_cmd::run(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Experiment(a) => experiment_cmd::run(a).map(|()| ExitCode::SUCCESS),
        Cmd::Simulate(args) => simulate_cmd::simulate(args).map(|()| ExitCode::SUCCESS),
        Cmd::Dump { dir, rank } => dump::dump(&dir, rank).map(|()| ExitCode::SUCCESS),
        Cmd::Generate(a) => generate_cmd::run(&a).map(|()| ExitCode::SUCCESS),
    };
    // A block that decoded when its chunk was checked and not when its events were read means
    // the file changed underneath: whatever the command made of the trace misses its events.
    let lost = format::blocks_lost();
    if lost > 0 {
        if let Err(e) = &result {
            eprintln!("evenflush: {e:#}");
        }
        eprintln!(
            "evenflush: {lost} block(s) of the trace decoded when first checked and failed when \
             read again: a file changed while it was read, and their events are missing from \
             what was made of it"
        );
        return ExitCode::from(EXIT_BAD_TRACE);
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("evenflush: {e:#}");
            if e.downcast_ref::<format::FormatError>().is_some()
                || e.downcast_ref::<trace::TraceError>().is_some()
            {
                ExitCode::from(EXIT_BAD_TRACE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
