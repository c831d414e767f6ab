//! Command-line arguments of `evenflush experiment` (the root crate's `experiment_cmd` re-exports
//! these, so the parsing is tested here).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use offload::config::{parse_duration, parse_size};

use super::{Options, plan};
use crate::mpi::MpiImpl;

#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    pub which: Experiment,
}

#[derive(Subcommand, Debug)]
pub enum Experiment {
    /// The paper's Table 1 on this machine: a memory-limited job with swap, trace kept in memory
    /// (swap) versus offloaded in equalised suspensions. Needs root, swap support and a cgroup
    /// memory controller; restores the machine on exit, error and Ctrl-C.
    #[command(
        after_help = "Example:\n  evenflush experiment swap-vs-offload --quick --out swap-results\n\n\
        Writes OUT/results.csv (one row per run), OUT/table.md (Table 1 shape, diagnostics, verdict) \
        and OUT/time.png, error.png, spread.png."
    )]
    SwapVsOffload(SwapArgs),
}

#[derive(Args, Debug, Clone)]
pub struct SwapArgs {
    /// Memory limit of the whole job (cgroup) [default: 512MiB, --quick 256MiB].
    #[arg(long, value_name = "SIZE")]
    pub mem_limit: Option<String>,
    /// Swap file size when no swap is active [default: 8 x the memory limit: the in-memory mode
    /// needs about 4x its trace transiently when it writes the trace at the end].
    #[arg(long, value_name = "SIZE")]
    pub swap: Option<String>,
    /// Where to create the swap file when none is active [default: OUT/swapfile].
    #[arg(long, value_name = "PATH")]
    pub swap_file: Option<PathBuf>,
    /// MPI ranks.
    #[arg(long, default_value_t = 2)]
    pub ranks: u32,
    /// Trace sizes M of the whole job, comma-separated [default: 0 to 2 x the memory limit].
    #[arg(long, value_name = "LIST")]
    pub sizes: Option<String>,
    /// Configurations, comma-separated: untraced, off, dynamic (all three thresholds), static,
    /// noremeasure, local, auto (dynamic with --threshold auto).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "untraced,off,dynamic,static,noremeasure,local"
    )]
    pub modes: String,
    /// Per-rank thresholds S1,S2,S3 [default: 1/8, 1/16, 1/32 of each rank's share of the limit].
    #[arg(long, value_name = "LIST")]
    pub thresholds: Option<String>,
    /// Repetitions of every configuration [default: 3, --quick 1].
    #[arg(long)]
    pub reps: Option<u32>,
    /// Output directory.
    #[arg(long, default_value = "swap-vs-offload")]
    pub out: PathBuf,
    /// Iterations of the workload (one MPI_Barrier each) [default: 100, --quick 30].
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Compute time per iteration, microseconds (calibrated once, then fixed as work units)
    /// [default: 100000 like the paper's ~110 ms per barrier, --quick 20000].
    #[arg(long)]
    pub compute_us: Option<u64>,
    /// Program memory per rank in MiB [default: a third of the limit over the ranks].
    #[arg(long, value_name = "MIB")]
    pub program_mib: Option<u64>,
    /// Records per iteration per rank.
    #[arg(long, default_value_t = 4)]
    pub records: u32,
    /// Random payload pool per rank in MiB (0 = constant, highly compressible payload).
    #[arg(long, default_value_t = 16)]
    pub random_payload_mib: u64,
    /// Time cap per run (e.g. 300s) [default: 20 x the calibration run, at least 60 s].
    #[arg(long, value_name = "DURATION")]
    pub time_cap: Option<String>,
    /// Mode static's suspension time when flushing [default: measured, 2 x writing S1 + 100 ms].
    #[arg(long, value_name = "DURATION")]
    pub static_long: Option<String>,
    /// The evenflush binary used for the traced runs [default: this executable].
    #[arg(long, value_name = "PATH")]
    pub evenflush: Option<PathBuf>,
    /// The workload binary [default: workloads/iterative.c built for `--mpi` into OUT/apps].
    #[arg(long, value_name = "PATH")]
    pub app: Option<PathBuf>,
    /// The MPI implementation the workload is built and launched with.
    #[arg(long, value_enum, default_value_t = MpiImpl::Openmpi)]
    pub mpi: MpiImpl,
    /// The MPI launcher [default: mpirun for Open MPI, mpirun.mpich for MPICH].
    #[arg(long)]
    pub mpirun: Option<String>,
    /// Compute by streaming through the program memory (memory-bound, like the paper's image
    /// processing) [default: register work plus one write per page of the program memory per
    /// iteration: the memory stays resident and hot, so swap hurts it the same, but run times
    /// vary ~1 % instead of ±10 % on a machine whose memory bandwidth is shared].
    #[arg(long)]
    pub memory_bound_work: bool,
    /// Keep every run's trace (they are deleted after analysis by default).
    #[arg(long)]
    pub keep_traces: bool,
    /// Only rebuild OUT/table.md and the plots from OUT/results.csv (give the same sizing flags as
    /// the run, and --static-long for the setup line).
    #[arg(long)]
    pub report_only: bool,
    /// Reduced matrix that runs in a few minutes.
    #[arg(long)]
    pub quick: bool,
}

fn sizes_list(text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| parse_size(s).map_err(|e| anyhow!("{e}")))
        .collect()
}

impl SwapArgs {
    /// Resolves defaults (which depend on the limit, the rank count and `--quick`).
    pub fn into_options(self, current_exe: Option<PathBuf>) -> Result<Options> {
        let mib = 1u64 << 20;
        let mem_limit = match &self.mem_limit {
            Some(s) => parse_size(s).map_err(|e| anyhow!("--mem-limit: {e}"))?,
            None if self.quick => 256 * mib,
            None => 512 * mib,
        };
        if mem_limit < 32 * mib {
            bail!("--mem-limit must be at least 32MiB (MPI alone needs some)");
        }
        if self.ranks == 0 {
            bail!("--ranks must be at least 1");
        }
        let swap = match &self.swap {
            Some(s) => parse_size(s).map_err(|e| anyhow!("--swap: {e}"))?,
            None => mem_limit * 8,
        };
        let sizes = match &self.sizes {
            Some(s) => {
                let mut v = sizes_list(s).map_err(|e| e.context("--sizes"))?;
                v.sort();
                v.dedup();
                v
            }
            None => plan::default_sizes(mem_limit, self.quick),
        };
        if sizes.is_empty() {
            bail!("--sizes is empty");
        }
        let thresholds = match &self.thresholds {
            Some(s) => sizes_list(s).map_err(|e| e.context("--thresholds"))?,
            None => plan::default_thresholds(mem_limit, self.ranks),
        };
        if thresholds.is_empty() || thresholds.contains(&0) {
            bail!("--thresholds needs at least one non-zero size");
        }
        let names: Vec<String> = self.modes.split(',').map(str::to_string).collect();
        let configs = plan::parse_modes(&names, thresholds.len())?;
        let duration = |flag: &str, v: &Option<String>| -> Result<Option<Duration>> {
            v.as_deref()
                .map(|s| parse_duration(s).map_err(|e| anyhow!("{flag}: {e}")))
                .transpose()
        };
        let evenflush = match self.evenflush.or(current_exe) {
            Some(p) => p,
            None => bail!("cannot tell where the evenflush binary is: pass --evenflush"),
        };
        let swap_file = self.swap_file.unwrap_or_else(|| self.out.join("swapfile"));
        let out = if self.out.is_absolute() {
            self.out
        } else {
            std::env::current_dir()?.join(self.out)
        };
        let swap_file = if swap_file.is_absolute() {
            swap_file
        } else {
            std::env::current_dir()?.join(swap_file)
        };
        Ok(Options {
            mem_limit,
            swap,
            ranks: self.ranks,
            sizes,
            configs,
            thresholds,
            reps: self.reps.unwrap_or(if self.quick { 1 } else { 3 }).max(1),
            out,
            iterations: self
                .iterations
                .unwrap_or(if self.quick { 30 } else { 100 })
                .max(1),
            compute_us: self
                .compute_us
                .unwrap_or(if self.quick { 20_000 } else { 100_000 }),
            program_mib: self
                .program_mib
                .unwrap_or_else(|| plan::default_program_mib(mem_limit, self.ranks)),
            records: self.records.max(1),
            random_payload_mib: self.random_payload_mib,
            time_cap: duration("--time-cap", &self.time_cap)?,
            static_long: duration("--static-long", &self.static_long)?,
            evenflush,
            app: self.app,
            mpirun: self
                .mpirun
                .unwrap_or_else(|| self.mpi.default_launcher().to_owned()),
            mpi: self.mpi,
            memory_bound_work: self.memory_bound_work,
            swap_file,
            keep_traces: self.keep_traces,
            report_only: self.report_only,
        })
    }
}

/// Entry point for `evenflush experiment ...`.
pub fn run(args: ExperimentArgs) -> Result<()> {
    match args.which {
        Experiment::SwapVsOffload(a) => {
            let opts = a.into_options(std::env::current_exe().ok())?;
            let outcome = super::run(&opts)?;
            println!("{}", outcome.verdict.text);
            println!(
                "results: {} ({} runs): results.csv, table.md, *.png",
                outcome.out.display(),
                outcome.rows.len()
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Top,
    }

    #[derive(clap::Subcommand)]
    enum Top {
        Experiment(ExperimentArgs),
    }

    fn parse(extra: &[&str]) -> Options {
        let mut argv = vec!["evenflush", "experiment", "swap-vs-offload"];
        argv.extend_from_slice(extra);
        let Top::Experiment(args) = Cli::try_parse_from(argv).unwrap().cmd;
        let Experiment::SwapVsOffload(a) = args.which;
        a.into_options(Some(PathBuf::from("/bin/evenflush")))
            .unwrap()
    }

    #[test]
    fn quick_defaults_are_small_and_consistent() {
        let o = parse(&["--quick", "--out", "/tmp/x"]);
        assert_eq!(o.mem_limit, 256 << 20);
        assert_eq!(o.reps, 1);
        assert_eq!(*o.sizes.last().unwrap(), 2 * o.mem_limit);
        assert_eq!(o.thresholds.len(), 3);
        assert_eq!(
            o.configs.len(),
            8,
            "untraced, off, 3 dynamic, static, noremeasure, local"
        );
        assert_eq!(o.swap_file, PathBuf::from("/tmp/x/swapfile"));
        assert_eq!(o.swap, 8 * o.mem_limit);
        assert_eq!(o.compute_us, 20_000);
        assert_eq!((o.mpi, o.mpirun.as_str()), (MpiImpl::Openmpi, "mpirun"));
        let o = parse(&["--quick", "--mpi", "mpich"]);
        assert_eq!((o.mpi, o.mpirun.as_str()), (MpiImpl::Mpich, "mpirun.mpich"));
        let o = parse(&["--mpi", "mpich", "--mpirun", "/opt/bin/mpiexec"]);
        assert_eq!(o.mpirun, "/opt/bin/mpiexec");
    }

    #[test]
    fn explicit_lists_are_parsed() {
        let o = parse(&[
            "--mem-limit",
            "512MiB",
            "--sizes",
            "1GiB,0,256MiB",
            "--modes",
            "off,dynamic",
            "--thresholds",
            "64MiB",
            "--time-cap",
            "90s",
        ]);
        assert_eq!(o.sizes, vec![0, 256 << 20, 1 << 30]);
        assert_eq!(o.configs, vec![plan::Config::Off, plan::Config::Dynamic(0)]);
        assert_eq!(o.time_cap, Some(Duration::from_secs(90)));
        assert_eq!(o.program_mib, 85);
        assert_eq!(o.thresholds, vec![64 << 20]);
        assert_eq!(o.compute_us, 100_000);
    }

    #[test]
    fn bad_values_are_refused() {
        let argv = [
            "evenflush",
            "experiment",
            "swap-vs-offload",
            "--mem-limit",
            "1MiB",
        ];
        let Top::Experiment(args) = Cli::try_parse_from(argv).unwrap().cmd;
        let Experiment::SwapVsOffload(a) = args.which;
        assert!(a.into_options(None).is_err());
    }
}
