//! `evenflush experiment swap-vs-offload`: the paper's Table 1 on a real machine.
//!
//! The whole job (mpirun and its ranks) runs inside a memory cgroup limited to `--mem-limit`, with
//! swap available, so a trace kept in memory (mode `off`) pushes the job into swap once program +
//! trace exceed the limit, while the offloading modes keep the trace small by writing it out in
//! suspensions. Every configuration runs at every trace size M, `--reps` times; traced runs are
//! reconstructed and compared with the untraced time.
//!
//! Modules: [`plan`] (the matrix), [`system`] (swap, cgroup, signals, restore), [`job`] (one run),
//! [`report`] (CSV, Markdown, verdict), [`plots`] (PNG).

pub mod args;
pub mod job;
pub mod plan;
pub mod plots;
pub mod report;
pub mod system;

use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::mpi::MpiImpl;
use plan::{Cell, Config};
use report::{Row, Setup};
use system::{JobCgroup, Machine};

/// Everything the experiment needs, with defaults already resolved by [`args`].
#[derive(Clone, Debug)]
pub struct Options {
    pub mem_limit: u64,
    pub swap: u64,
    pub ranks: u32,
    pub sizes: Vec<u64>,
    pub configs: Vec<Config>,
    pub thresholds: Vec<u64>,
    pub reps: u32,
    pub out: PathBuf,
    pub iterations: u32,
    pub compute_us: u64,
    pub program_mib: u64,
    /// Records per iteration per rank.
    pub records: u32,
    /// Size of the random payload pool per rank (0: compressible constant payload).
    pub random_payload_mib: u64,
    /// Per-run time cap; `None`: derived from the calibration run.
    pub time_cap: Option<Duration>,
    /// Static mode's suspension time when flushing; `None`: measured.
    pub static_long: Option<Duration>,
    pub evenflush: PathBuf,
    /// The workload binary; `None`: built from workloads/ into the output directory.
    pub app: Option<PathBuf>,
    pub mpi: MpiImpl,
    /// Memory-streaming work instead of register work plus page touches.
    pub memory_bound_work: bool,
    pub mpirun: String,
    pub swap_file: PathBuf,
    pub keep_traces: bool,
    /// Only rebuild table.md and the plots from an existing OUT/results.csv.
    pub report_only: bool,
}

/// What [`run`] produced.
#[derive(Debug)]
pub struct Outcome {
    pub rows: Vec<Row>,
    pub verdict: report::Verdict,
    pub out: PathBuf,
}

fn info_f(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

fn info_u(v: &Value, pointer: &str) -> Option<u64> {
    v.pointer(pointer).and_then(Value::as_u64)
}

struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: usize,
    done: usize,
    started: Instant,
}

impl Progress {
    fn new(total: usize) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} ETA {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        Progress {
            bar,
            total,
            done: 0,
            started: Instant::now(),
        }
    }

    fn start(&self, cell: &Cell) {
        match &self.bar {
            Some(bar) => bar.set_message(cell.id()),
            None => eprintln!("[{}/{}] {} ...", self.done + 1, self.total, cell.id()),
        }
    }

    fn finish(&mut self, row: &Row) {
        self.done += 1;
        let summary = format!(
            "{} M={}MiB rep {}: {} in {:.1}s wall",
            row.config.map(|c| c.label()).unwrap_or_default(),
            row.trace_bytes >> 20,
            row.rep,
            if row.timed_out {
                "TIMED OUT".to_string()
            } else {
                match (row.exit_code, row.program_s) {
                    (Some(0), Some(t)) => format!("total_s={t:.3}"),
                    (code, _) => format!("exit {code:?}"),
                }
            },
            row.wall_s
        );
        match &self.bar {
            Some(bar) => {
                bar.println(summary);
                bar.inc(1);
            }
            None => {
                let elapsed = self.started.elapsed().as_secs_f64();
                let eta = elapsed / self.done as f64 * (self.total - self.done) as f64;
                eprintln!("  {summary}; ETA {eta:.0}s");
            }
        }
    }

    fn end(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The setup line of the report: the options, with the swap actually available and static mode's
/// suspension time as measured (or given).
fn setup_of(opts: &Options, swap: u64, static_long_s: f64) -> Setup {
    Setup {
        mpi: opts.mpi.name().to_owned(),
        work: work_description(opts),
        ranks: opts.ranks,
        mem_limit: opts.mem_limit,
        swap,
        program_mib_per_rank: opts.program_mib,
        iterations: opts.iterations,
        thresholds: opts.thresholds.clone(),
        static_long_s,
    }
}

fn work_description(opts: &Options) -> String {
    if opts.memory_bound_work {
        "compute streams through the program memory".into()
    } else {
        "compute on registers, every page of the program memory written once per iteration".into()
    }
}

fn build_app(out: &Path, mpi: MpiImpl) -> Result<PathBuf> {
    // The workloads are the workspace's, beside this crate.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness crate is inside the workspace");
    let script = workspace.join("workloads/build.sh");
    let dir = out.join("apps");
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(mpi.name())
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(dir.join("iterative"))
}

/// Rebuilds table.md and the plots from OUT/results.csv (after a change to the analysis, or for a
/// run that was interrupted before it wrote them). The setup line uses the options as given.
pub fn report_only(opts: &Options) -> Result<Outcome> {
    let csv_path = opts.out.join("results.csv");
    let text =
        fs::read_to_string(&csv_path).with_context(|| format!("reading {}", csv_path.display()))?;
    let rows = report::from_csv(&text)?;
    let setup = setup_of(
        opts,
        opts.swap,
        opts.static_long.map_or(f64::NAN, |d| d.as_secs_f64()),
    );
    write_reports(&rows, &setup, &opts.out)
}

fn write_reports(rows: &[Row], setup: &Setup, out: &Path) -> Result<Outcome> {
    let verdict = report::verdict(rows);
    fs::write(out.join("results.csv"), report::to_csv(rows))?;
    fs::write(
        out.join("table.md"),
        report::to_markdown(rows, setup, &verdict),
    )?;
    if let Err(e) = plots::write_all(rows, out) {
        eprintln!("evenflush experiment: plots not written: {e:#}");
    }
    Ok(Outcome {
        rows: rows.to_vec(),
        verdict,
        out: out.to_path_buf(),
    })
}

/// Runs the whole experiment: prepare the machine, run the matrix, restore, write the results.
pub fn run(opts: &Options) -> Result<Outcome> {
    if opts.report_only {
        return report_only(opts);
    }
    let ready = system::check_readiness();
    if !ready.problems.is_empty() {
        bail!(
            "this machine cannot run the swap-versus-offload experiment:\n  - {}",
            ready.problems.join("\n  - ")
        );
    }
    if !opts.evenflush.is_file() {
        bail!(
            "the evenflush binary {} does not exist (build it with cargo build --release)",
            opts.evenflush.display()
        );
    }
    fs::create_dir_all(opts.out.join("runs"))
        .with_context(|| format!("creating {}", opts.out.display()))?;
    let app = match &opts.app {
        Some(app) => app.clone(),
        None => build_app(&opts.out, opts.mpi)?,
    };

    let machine = Machine::prepare(&ready, &opts.swap_file, opts.swap)?;
    if machine.swap_bytes < opts.mem_limit {
        eprintln!(
            "evenflush experiment: warning: only {} of swap is active; the largest sizes may be \
             killed by the memory limit instead of swapping",
            plan::human_bytes(machine.swap_bytes)
        );
    }
    let mut runner = Runner {
        opts,
        machine: &machine,
        app,
        work_units: 0,
        cap: opts.time_cap.unwrap_or(Duration::from_secs(600)),
        static_long: Duration::ZERO,
        counter: 0,
    };
    runner.calibrate()?;
    runner.static_long = match opts.static_long {
        Some(d) => d,
        None => measure_static_long(&opts.out, opts.thresholds[0])?,
    };
    let setup = setup_of(opts, machine.swap_bytes, runner.static_long.as_secs_f64());

    let cells = plan::build_matrix(&opts.sizes, &opts.configs, &opts.thresholds, opts.reps);
    let mut progress = Progress::new(cells.len());
    let mut rows = Vec::new();
    let csv_path = opts.out.join("results.csv");
    let mut failure = None;
    for cell in &cells {
        progress.start(cell);
        match runner.run_cell(cell) {
            Ok(row) => {
                progress.finish(&row);
                rows.push(row);
                fs::write(&csv_path, report::to_csv(&rows))?;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    progress.end();
    // Put the machine back before the (slow-ish) reporting.
    drop(machine);
    let outcome = write_reports(&rows, &setup, &opts.out)?;
    if let Some(e) = failure {
        return Err(e.context(format!(
            "the experiment stopped after {} of {} runs; partial results are in {}",
            rows.len(),
            cells.len(),
            opts.out.display()
        )));
    }
    Ok(outcome)
}

/// The fixed suspension time of mode static, decided before the runs as in the paper (which
/// allowed 40 s for a ~35 s write of 512 MB): twice the time to write one threshold's worth of
/// incompressible bytes here, plus 100 ms for compression and the protocol.
fn measure_static_long(out: &Path, threshold: u64) -> Result<Duration> {
    use std::io::Write;
    let path = out.join("write-probe.tmp");
    let mut block = vec![0u8; 1 << 20];
    let mut x: u64 = 0x2545F4914F6CDD1D;
    for b in block.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
    }
    let start = Instant::now();
    {
        let mut file = fs::File::create(&path)?;
        let mut left = threshold;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            file.write_all(&block[..n])?;
            left -= n as u64;
        }
        file.sync_all()?;
    }
    let took = start.elapsed();
    let _ = fs::remove_file(&path);
    Ok(took * 2 + Duration::from_millis(100))
}

struct Runner<'a> {
    opts: &'a Options,
    machine: &'a Machine,
    app: PathBuf,
    work_units: u64,
    cap: Duration,
    static_long: Duration,
    counter: u32,
}

impl Runner<'_> {
    fn mpi_env(&self) -> Vec<(String, String)> {
        vec![
            ("OMPI_ALLOW_RUN_AS_ROOT".into(), "1".into()),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".into(), "1".into()),
        ]
    }

    fn app_argv(&self, record_bytes: u64, work_units: Option<u64>) -> Vec<String> {
        let o = self.opts;
        let mut argv = vec![o.mpirun.clone(), "-np".into(), o.ranks.to_string()];
        argv.extend(o.mpi.launcher_flags().iter().map(|f| (*f).to_owned()));
        argv.extend([
            self.app.display().to_string(),
            "--mem".into(),
            o.program_mib.to_string(),
            "--iterations".into(),
            o.iterations.to_string(),
            "--compute-us".into(),
            o.compute_us.to_string(),
            "--record-bytes".into(),
            record_bytes.to_string(),
            "--records".into(),
            o.records.to_string(),
            "--random-payload".into(),
            o.random_payload_mib.to_string(),
        ]);
        if !o.memory_bound_work {
            argv.extend(["--touch-pages".into(), "1".into()]);
        }
        if let Some(units) = work_units {
            argv.push("--work-units".into());
            argv.push(units.to_string());
        }
        argv
    }

    fn new_cgroup(&mut self) -> Result<JobCgroup> {
        self.counter += 1;
        let name = format!("evenflush-swap-{}-{}", std::process::id(), self.counter);
        self.machine
            .create_cgroup(&name, self.opts.mem_limit, self.machine.swap_bytes)
    }

    /// One untraced run that fixes the work per iteration for all later runs (so swap and
    /// offload runs do the same work) and derives the time cap.
    fn calibrate(&mut self) -> Result<()> {
        let dir = self.opts.out.join("runs/calibration");
        fs::create_dir_all(&dir)?;
        let cgroup = self.new_cgroup()?;
        let argv = self.app_argv(0, None);
        let outcome = job::run_in_cgroup(&argv, &self.mpi_env(), &cgroup, self.cap, &dir);
        cgroup.remove()?;
        let outcome = outcome?;
        if outcome.exit_code != Some(0) {
            bail!(
                "the calibration run failed (exit {:?}, timed out {}): {}",
                outcome.exit_code,
                outcome.timed_out,
                outcome.stderr.trim()
            );
        }
        self.work_units = job::stdout_value(&outcome.stdout, "units_per_iteration")
            .and_then(|v| v.parse().ok())
            .context("the workload printed no units_per_iteration")?;
        if self.opts.time_cap.is_none() {
            // Generous: the paper's swap runs took 8x the untraced time; leave room for 20x.
            self.cap = Duration::from_secs_f64((outcome.wall_s * 20.0).max(60.0));
        }
        eprintln!(
            "calibration: {} work units per iteration, untraced wall {:.2}s, time cap {:.0}s",
            self.work_units,
            outcome.wall_s,
            self.cap.as_secs_f64()
        );
        Ok(())
    }

    fn run_cell(&mut self, cell: &Cell) -> Result<Row> {
        let o = self.opts;
        let dir = o.out.join("runs").join(cell.id());
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        let trace_dir = dir.join("trace");
        let record_bytes =
            plan::record_bytes_per_iteration(cell.trace_bytes, o.ranks, o.iterations);
        let per_rank_trace = record_bytes * u64::from(o.iterations);
        let mut argv = Vec::new();
        if let Some(mode) = cell.config.recorder_mode() {
            let threshold = cell.threshold.unwrap_or(o.thresholds[0]);
            // The hard limit must never trigger: it would turn `off` into a local flush.
            let limit = (per_rank_trace * 2 + (256 << 20)).max(threshold);
            argv.extend([
                o.evenflush.display().to_string(),
                "run".into(),
                "--out".into(),
                trace_dir.display().to_string(),
                "--mode".into(),
                mode.into(),
                "--threshold".into(),
                cell.config.threshold_arg(threshold),
                "--limit".into(),
                limit.to_string(),
                "--static-long".into(),
                format!("{}ms", self.static_long.as_millis().max(1)),
                "--".into(),
            ]);
        }
        argv.extend(self.app_argv(record_bytes, Some(self.work_units)));

        let mut row = Row::for_cell(cell);
        let cgroup = self.new_cgroup()?;
        let (in_before, out_before) = system::swap_counters();
        let outcome = job::run_in_cgroup(&argv, &self.mpi_env(), &cgroup, self.cap, &dir);
        let (in_after, out_after) = system::swap_counters();
        let stats = cgroup.stats();
        cgroup.remove()?;
        let outcome = outcome?;
        row.wall_s = outcome.wall_s;
        row.exit_code = outcome.exit_code;
        row.timed_out = outcome.timed_out;
        row.program_s = job::stdout_value(&outcome.stdout, "total_s").and_then(|v| v.parse().ok());
        row.swap_in_pages = in_after.saturating_sub(in_before);
        row.swap_out_pages = out_after.saturating_sub(out_before);
        row.major_faults = stats.pgmajfault;
        row.peak_mem_bytes = stats.peak_bytes;
        row.peak_mem_swap_bytes = stats.peak_with_swap_bytes;
        row.oom_kills = stats.oom_kills;
        if !row.ok() {
            row.note = outcome
                .stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
        }
        if cell.config.is_traced()
            && row.ok()
            && let Err(e) = self.analyse(&trace_dir, &dir, &mut row)
        {
            row.note = format!("analysis failed: {e:#}");
        }
        if !o.keep_traces {
            let _ = fs::remove_dir_all(&trace_dir);
        }
        Ok(row)
    }

    fn analyse(&self, trace_dir: &Path, dir: &Path, row: &mut Row) -> Result<()> {
        let bin = self.opts.evenflush.display().to_string();
        let trace = trace_dir.display().to_string();
        let info_text =
            job::capture(&[bin.clone(), "info".into(), trace.clone(), "--json".into()])?;
        fs::write(dir.join("info.json"), &info_text)?;
        let info: Value = serde_json::from_str(&info_text).context("parsing info --json")?;
        row.span_s = info_f(&info, "/span_s");
        row.suspensions = info_u(&info, "/suspension/count");
        row.flushes = info_u(&info, "/suspension/flushes");
        row.spread_p50_us = info_f(&info, "/suspension/spread_us/p50");
        row.spread_max_us = info_f(&info, "/suspension/spread_us/max");
        row.overshoot_max_us = info_f(&info, "/suspension/overshoot_us/max");
        row.z_max_us = info_f(&info, "/suspension/z_us/max");
        row.lost_events = info_u(&info, "/lost_events");
        row.local_flushes = info_u(&info, "/local_flushes");
        if row.threshold.is_none() {
            row.threshold = trace::open::initial_threshold(trace_dir).map(|t| t.bytes);
        }

        let rebuilt = dir.join("reconstructed");
        let text = job::capture(&[
            bin,
            "reconstruct".into(),
            trace,
            "--remove".into(),
            "both".into(),
            "--json".into(),
            "--out".into(),
            rebuilt.display().to_string(),
        ])?;
        fs::write(dir.join("reconstruct.json"), &text)?;
        let rec: Value = serde_json::from_str(&text).context("parsing reconstruct --json")?;
        row.reconstructed_plus_s = info_f(&rec, "/reconstructed_plus_s");
        row.reconstructed_s = info_f(&rec, "/reconstructed_s");
        row.dp_prime_s = info_f(&rec, "/dp_prime_s");
        let looped = job::loop_time_s(&rebuilt);
        let _ = fs::remove_dir_all(&rebuilt);
        row.reconstructed_loop_s = Some(looped?);
        Ok(())
    }
}
