//! `evenflush simulate`: the simulator and its studies from the command line. The CLI binary
//! re-exports [`Args`] and [`simulate`] (src/simulate_cmd.rs).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use offload::config::{Mode, parse_size};
use offload::{ClockScheme, Decision, Remedy};

use crate::studies;
use crate::{SimConfig, SimResult, simulate as run_one};

/// Flags of `evenflush simulate`. The defaults are the paper's first experiment: 32 ranks, 520
/// barriers, 58 s untraced, 33 MB/s disks, M = 896 MB, S = 512 MB.
#[derive(Parser, Debug, Clone)]
#[command(
    after_help = "Examples:\n  evenflush simulate --ranks 65536 --mode dynamic\n  \
    evenflush simulate --study table1\n  evenflush simulate --study scale --plot overhead.png"
)]
pub struct Args {
    /// Number of simulated ranks P.
    #[arg(long, default_value_t = 32)]
    pub ranks: usize,
    /// Iterations of the application (one barrier, then one suspension, each).
    #[arg(long, default_value_t = 520)]
    pub iterations: u64,
    /// Trace bytes each rank records over the run (the paper's M), e.g. 896MiB.
    #[arg(long, default_value = "896MiB")]
    pub trace_bytes: String,
    /// Buffer size S above which ranks flush, e.g. 512MiB.
    #[arg(long, default_value = "512MiB")]
    pub threshold: String,
    /// Modes to run, comma-separated: untraced, off, dynamic, static, noremeasure, local, or all.
    #[arg(long, default_value = "all")]
    pub mode: String,
    /// Clock-offset scheme: sequential (the paper: rank 0 ping-pongs everyone) or tree.
    #[arg(long, default_value = "sequential")]
    pub clock_scheme: String,
    /// How ranks agree to flush: blocking (the paper: an allreduce and a suspension at every
    /// barrier) or split (a nonblocking reduction; only flushes suspend).
    #[arg(long, default_value = "blocking")]
    pub decision: String,
    /// Split decision: time aimed for between decision points, e.g. 10ms.
    #[arg(long, default_value = "10ms")]
    pub decision_interval: String,
    /// Ping-pong exchanges per rank and measurement (the paper: 1).
    #[arg(long, default_value_t = 1)]
    pub clock_tries: usize,
    /// Post-write lateness remedy: faithful (the paper), after-write, margin, both.
    #[arg(long, default_value = "faithful")]
    pub remedy: String,
    /// Nominal per-rank disk bandwidth, MiB/s (each write reaches 43–62 % of it, as in the paper).
    #[arg(long, default_value_t = 33.0)]
    pub disk_mbps: f64,
    /// Fraction of --disk-mbps that a suspension's writes reach, drawn per suspension from LO–HI
    /// (default: the paper's 25–36 s for 512 MB on a 33 MB/s disk, i.e. 0.43–0.62). Give 1 when
    /// --disk-mbps is a bandwidth measured on the same disk, e.g. by dd.
    #[arg(long, value_name = "LO[-HI]")]
    pub disk_efficiency: Option<String>,
    /// Cap on the aggregate write bandwidth of all ranks (shared file system), MiB/s.
    #[arg(long)]
    pub fs_mbps: Option<f64>,
    /// Recording speed of trace bytes into the buffer (the direct perturbation DP), MiB/s
    /// (default: calibrated on the paper's Table 1, 285).
    #[arg(long)]
    pub append_mbps: Option<f64>,
    /// One-way message latency (and per-hop cost of trees and collectives), µs.
    #[arg(long, default_value_t = 15.0)]
    pub latency_us: f64,
    /// Mean extra (exponential) message delay, µs.
    #[arg(long, default_value_t = 2.0)]
    pub jitter_us: f64,
    /// Up to this much extra delay for messages sent within 1 s after a write, ms (0 disables).
    #[arg(long, default_value_t = 10.0)]
    pub post_write_ms: f64,
    /// Standard deviation of clock drift, ppm.
    #[arg(long, default_value_t = 100.0)]
    pub drift_ppm: f64,
    /// Clock reading noise, ± µs.
    #[arg(long, default_value_t = 1.0)]
    pub read_jitter_us: f64,
    /// Untraced run time, s.
    #[arg(long, default_value_t = 58.0)]
    pub untraced_s: f64,
    /// Ranks compute up to this fraction less than the slowest, per iteration.
    #[arg(long, default_value_t = 0.05)]
    pub imbalance: f64,
    /// Disable the swap model (memory is unlimited).
    #[arg(long)]
    pub no_swap: bool,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Instead of one run per mode: `table1` (the paper's Table 1, side by side) or `scale`
    /// (overhead vs P = 2^5 … 2^max-exp for both clock schemes, with a PNG plot).
    #[arg(long)]
    pub study: Option<String>,
    /// Largest exponent of the scale study.
    #[arg(long, default_value_t = 20)]
    pub max_exp: u32,
    /// Suspensions per point of the scale study.
    #[arg(long, default_value_t = 4)]
    pub scale_suspensions: u64,
    /// Where the scale study writes its plot.
    #[arg(long, default_value = "scale-overhead.png")]
    pub plot: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// The simulator configuration these flags describe (mode left at dynamic).
    pub fn config(&self) -> anyhow::Result<SimConfig> {
        let mut config = SimConfig::default();
        if self.ranks == 0 {
            bail!("--ranks must be at least 1");
        }
        config.ranks = self.ranks;
        config.app.iterations = self.iterations;
        config.app.trace_bytes = parse_size(&self.trace_bytes).map_err(anyhow::Error::msg)?;
        config.app.untraced_s = self.untraced_s;
        config.app.imbalance = self.imbalance.clamp(0.0, 1.0);
        config.threshold_bytes = parse_size(&self.threshold).map_err(anyhow::Error::msg)?;
        config.settings.clock_scheme =
            ClockScheme::from_name(&self.clock_scheme).with_context(|| {
                format!("--clock-scheme: expected {}", ClockScheme::NAMES.join(", "))
            })?;
        config.settings.decision = match self.decision.as_str() {
            "blocking" => Decision::Blocking,
            "split" => Decision::Split,
            other => bail!("--decision: expected blocking or split, not {other:?}"),
        };
        config.settings.decision_interval_ns =
            offload::config::parse_duration(&self.decision_interval)
                .map_err(anyhow::Error::msg)?
                .as_nanos() as u64;
        config.settings.clock_tries = self.clock_tries.max(1);
        config.settings.remedy = Remedy::from_name(&self.remedy)
            .context("--remedy: expected faithful, after-write, margin or both")?;
        config.disk.mbps = self.disk_mbps;
        config.disk.shared_mbps = self.fs_mbps;
        if let Some(range) = &self.disk_efficiency {
            let (lo, hi) = parse_fraction_range(range).with_context(|| {
                format!("--disk-efficiency: expected LO or LO-HI in (0, 1], not {range:?}")
            })?;
            config.disk.efficiency_lo = lo;
            config.disk.efficiency_hi = hi;
        }
        if let Some(mbps) = self.append_mbps {
            if mbps.is_nan() || mbps <= 0.0 {
                bail!("--append-mbps must be positive");
            }
            config.app.append_mbps = mbps;
        }
        config.net.latency_ns = self.latency_us * 1e3;
        config.net.jitter_ns = self.jitter_us * 1e3;
        config.net.post_write_extra_ns = self.post_write_ms * 1e6;
        if self.post_write_ms <= 0.0 {
            config.net.post_write_window_ns = 0;
        }
        config.clock.drift_sd_ppm = self.drift_ppm;
        config.clock.read_jitter_ns = self.read_jitter_us * 1e3;
        config.swap = !self.no_swap;
        config.seed = self.seed;
        Ok(config)
    }

    /// The modes named by `--mode`; `None` stands for the untraced program.
    pub fn modes(&self) -> anyhow::Result<Vec<Option<Mode>>> {
        let all = [
            None,
            Some(Mode::Off),
            Some(Mode::Dynamic),
            Some(Mode::Static),
            Some(Mode::NoRemeasure),
            Some(Mode::Local),
        ];
        let mut modes = Vec::new();
        for name in self
            .mode
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            match name {
                "all" => modes.extend(all),
                "untraced" => modes.push(None),
                "off" => modes.push(Some(Mode::Off)),
                "dynamic" => modes.push(Some(Mode::Dynamic)),
                "static" => modes.push(Some(Mode::Static)),
                "noremeasure" => modes.push(Some(Mode::NoRemeasure)),
                "local" => modes.push(Some(Mode::Local)),
                other => bail!(
                    "--mode: unknown mode {other:?} (untraced, off, dynamic, static, noremeasure, local, all)"
                ),
            }
        }
        if modes.is_empty() {
            bail!("--mode: name at least one mode");
        }
        Ok(modes)
    }
}

/// One simulated run per mode, as configured by `config`.
pub fn run_modes(config: &SimConfig, modes: &[Option<Mode>]) -> anyhow::Result<Vec<SimResult>> {
    modes
        .iter()
        .map(|mode| {
            let mut c = config.clone();
            match mode {
                None => c.untraced = true,
                Some(m) => c.settings.mode = *m,
            }
            run_one(&c).map_err(anyhow::Error::msg)
        })
        .collect()
}

/// Human-readable table of runs.
pub fn render_runs(results: &[SimResult]) -> String {
    let mut out = String::new();
    if let Some(first) = results.first() {
        out.push_str(&format!(
            "P = {}, clock scheme {}, M = {:.0} MiB per rank, S = {:.0} MiB; untraced {:.2} s, \
             traced in memory without swap {:.2} s\n\n",
            first.ranks,
            first.clock_scheme,
            results.iter().map(|r| r.trace_mb).fold(0.0, f64::max),
            first.threshold_mb,
            first.untraced_s,
            results.iter().map(|r| r.in_memory_s).fold(0.0, f64::max)
        ));
    }
    out.push_str(&format!(
        "{:<12} {:>9} {:>9} {:>7} {:>6} {:>6} {:>9} {:>11} {:>6} {:>17} {:>12} {:>7} {:>8}\n",
        "mode",
        "total s",
        "R s",
        "R err",
        "susp",
        "flush",
        "ΣZ s",
        "Z nowrite",
        "sync",
        "dur spread p50/max",
        "overshoot",
        "late",
        "wall s"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<12} {:>9.2} {:>9.2} {:>6.2}% {:>6} {:>6} {:>9.2} {:>9.3}ms {:>5.0}% {:>8.1}/{:<8.1} {:>10.1}µs {:>6.2}% {:>8.2}\n",
            r.mode,
            r.total_s,
            r.reconstructed_s,
            r.reconstruction_error * 100.0,
            r.suspensions,
            r.flushes,
            r.z_sum_s,
            r.z_mean_no_flush_us / 1e3,
            r.clock_sync_share * 100.0,
            r.duration_spread_us.p50,
            r.duration_spread_us.max,
            r.overshoot_us.max,
            r.late_share * 100.0,
            r.wall_s
        ));
    }
    out.push_str(
        "\nR = total with each rank's recorded suspensions removed; R err = |R − in-memory| / in-memory. \
         Spreads are per suspension over ranks (µs); overshoot is the worst per suspension (max).\n",
    );
    out
}

/// Runs `evenflush simulate`.
pub fn simulate(args: Args) -> anyhow::Result<()> {
    let config = args.config()?;
    match args.study.as_deref() {
        None => {
            let results = run_modes(&config, &args.modes()?)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&results)?);
            } else {
                print!("{}", render_runs(&results));
            }
        }
        Some("table1") => {
            let rows = studies::table1(&config).map_err(anyhow::Error::msg)?;
            let untraced = run_modes(&config, &[None])?.remove(0);
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "untraced": untraced, "rows": rows
                    }))?
                );
            } else {
                println!("Simulated (paper), seconds:\n");
                print!("{}", studies::table1_markdown(&rows, &untraced));
            }
        }
        Some("scale") => {
            // The paper's protocol with each clock scheme, and the split decision (which measures
            // clocks only when it flushes, so its scheme does not matter here).
            let variants = [
                (Decision::Blocking, ClockScheme::Sequential),
                (Decision::Blocking, ClockScheme::Tree),
                (Decision::Split, ClockScheme::Tree),
            ];
            let points = studies::scale_study(
                &config,
                5..=args.max_exp.max(5),
                &variants,
                args.scale_suspensions.max(1),
                |p| {
                    eprintln!(
                        "P = {:>8} {:<8} {:<10} overhead {:>12.4} ms  ({:.1} s)",
                        p.ranks,
                        p.decision,
                        p.clock_scheme,
                        p.overhead_us / 1e3,
                        p.wall_s
                    )
                },
            )
            .map_err(anyhow::Error::msg)?;
            studies::plot_scale(&points, &args.plot)
                .with_context(|| format!("plotting to {}", args.plot.display()))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&points)?);
            } else {
                print!("{}", studies::scale_markdown(&points));
                println!("\nplot: {}", args.plot.display());
            }
        }
        Some(other) => bail!("--study: unknown study {other:?} (table1, scale)"),
    }
    Ok(())
}

/// "0.5" or "0.4-0.6": fractions in (0, 1], low first.
fn parse_fraction_range(text: &str) -> Option<(f64, f64)> {
    let (lo, hi) = match text.split_once('-') {
        Some((lo, hi)) => (
            lo.trim().parse::<f64>().ok()?,
            hi.trim().parse::<f64>().ok()?,
        ),
        None => {
            let v = text.trim().parse::<f64>().ok()?;
            (v, v)
        }
    };
    let valid = |v: f64| v > 0.0 && v <= 1.0;
    (valid(lo) && valid(hi) && lo <= hi).then_some((lo, hi))
}

#[cfg(test)]
mod fraction_range_tests {
    use super::parse_fraction_range;

    #[test]
    fn accepts_one_value_or_a_range_and_rejects_the_rest() {
        assert_eq!(parse_fraction_range("1"), Some((1.0, 1.0)));
        assert_eq!(parse_fraction_range("0.4-0.6"), Some((0.4, 0.6)));
        assert_eq!(parse_fraction_range("0.6-0.4"), None);
        assert_eq!(parse_fraction_range("0"), None);
        assert_eq!(parse_fraction_range("1.5"), None);
        assert_eq!(parse_fraction_range("fast"), None);
    }
}
