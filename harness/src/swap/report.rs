//! Results: one row per run, the CSV, the Table-1-shaped Markdown and the verdict.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::plan::{Cell, Config};

/// Everything measured for one run. Optional fields are empty when the run did not produce them
/// (an untraced run has no trace; a failed run has no program time).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub config: Option<Config>,
    pub trace_bytes: u64,
    pub threshold: Option<u64>,
    pub rep: u32,
    pub wall_s: f64,
    /// The workload's own `total_s` (its loop, from MPI_Wtime).
    pub program_s: Option<f64>,
    /// Trace span (first to last event, slowest rank).
    pub span_s: Option<f64>,
    pub reconstructed_plus_s: Option<f64>,
    pub reconstructed_s: Option<f64>,
    /// The loop time in the trace with DP' and DP removed (comparable to untraced `total_s`).
    pub reconstructed_loop_s: Option<f64>,
    pub dp_prime_s: Option<f64>,
    pub suspensions: Option<u64>,
    pub flushes: Option<u64>,
    pub local_flushes: Option<u64>,
    pub spread_p50_us: Option<f64>,
    pub spread_max_us: Option<f64>,
    pub overshoot_max_us: Option<f64>,
    pub z_max_us: Option<f64>,
    pub lost_events: Option<u64>,
    pub swap_in_pages: u64,
    pub swap_out_pages: u64,
    pub major_faults: Option<u64>,
    pub peak_mem_bytes: Option<u64>,
    pub peak_mem_swap_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub note: String,
}

impl Row {
    pub fn for_cell(cell: &Cell) -> Row {
        Row {
            config: Some(cell.config),
            trace_bytes: cell.trace_bytes,
            threshold: cell.threshold,
            rep: cell.rep,
            ..Row::default()
        }
    }

    pub fn ok(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// Whether the run's numbers may be used: it exited normally, or its loop finished and only
    /// the end (writing a swapped-out trace at finalisation) hit the time cap or failed. Fields a
    /// failed run lacks (reconstruction) stay empty, so they never enter a median.
    pub fn usable(&self) -> bool {
        self.ok() || self.program_s.is_some()
    }

    fn label(&self) -> String {
        self.config.map(|c| c.label()).unwrap_or_default()
    }
}

/// The reference for reconstruction errors: median untraced program time at each M (the untraced
/// run does not depend on M, so all of them are pooled when one M has none).
pub fn untraced_reference(rows: &[Row]) -> BTreeMap<u64, f64> {
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.config == Some(Config::Untraced) && r.ok())
    {
        if let Some(t) = r.program_s {
            by_size.entry(r.trace_bytes).or_default().push(t);
            all.push(t);
        }
    }
    let pooled = median(&all);
    let mut out: BTreeMap<u64, f64> = by_size
        .into_iter()
        .filter_map(|(m, v)| Some((m, median(&v)?)))
        .collect();
    if let Some(pooled) = pooled {
        for r in rows {
            out.entry(r.trace_bytes).or_insert(pooled);
        }
    }
    out
}

/// Signed reconstruction error in percent against the untraced reference at the row's M.
pub fn error_pct(row: &Row, reference: &BTreeMap<u64, f64>) -> Option<f64> {
    let r = row.reconstructed_loop_s?;
    let t = *reference.get(&row.trace_bytes)?;
    (t > 0.0).then(|| (r - t) / t * 100.0)
}

/// The run's loop time over the untraced run of the same repetition and size: the runs of one
/// repetition and size follow each other, so on a shared machine whose load drifts this pairing is
/// steadier than comparing medians taken over different periods.
pub fn paired_slowdown(rows: &[Row], row: &Row) -> Option<f64> {
    let own = row.program_s?;
    let untraced = rows.iter().find(|r| {
        r.config == Some(Config::Untraced)
            && r.rep == row.rep
            && r.trace_bytes == row.trace_bytes
            && r.ok()
    })?;
    let base = untraced.program_s?;
    (base > 0.0).then(|| own / base)
}

/// Reconstruction error in percent against the untraced run of the same repetition and size.
pub fn paired_error_pct(rows: &[Row], row: &Row) -> Option<f64> {
    let r = row.reconstructed_loop_s?;
    let slowdown = paired_slowdown(rows, row)?;
    let own = row.program_s?;
    let base = own / slowdown;
    Some((r - base) / base * 100.0)
}

/// Reads a CSV written by [`to_csv`] back (columns are found by name, so files written before a
/// column was added still load; derived columns are recomputed, not read).
pub fn from_csv(text: &str) -> anyhow::Result<Vec<Row>> {
    let mut lines = text.lines();
    let header: Vec<String> = split_csv_line(lines.next().unwrap_or_default());
    let col = |name: &str| header.iter().position(|h| h == name);
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields = split_csv_line(line);
        let get = |name: &str| -> Option<&str> {
            col(name)
                .and_then(|i| fields.get(i))
                .map(|s| s.as_str())
                .filter(|s| !s.is_empty())
        };
        let f = |name: &str| get(name).and_then(|v| v.parse::<f64>().ok());
        let u = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
        let bytes = |name: &str| f(name).map(|mib| (mib * (1u64 << 20) as f64).round() as u64);
        let label = get("config").unwrap_or_default();
        let config = Config::from_label(label)
            .ok_or_else(|| anyhow::anyhow!("line {}: unknown config {label:?}", n + 2))?;
        rows.push(Row {
            config: Some(config),
            trace_bytes: bytes("trace_mib").unwrap_or(0),
            threshold: bytes("threshold_mib"),
            rep: u("rep").unwrap_or(0) as u32,
            wall_s: f("wall_s").unwrap_or(f64::NAN),
            program_s: f("program_s"),
            span_s: f("span_s"),
            reconstructed_plus_s: f("reconstructed_plus_s"),
            reconstructed_s: f("reconstructed_s"),
            reconstructed_loop_s: f("reconstructed_loop_s"),
            dp_prime_s: f("dp_prime_s"),
            suspensions: u("suspensions"),
            flushes: u("flushes"),
            local_flushes: u("local_flushes"),
            spread_p50_us: f("spread_p50_us"),
            spread_max_us: f("spread_max_us"),
            overshoot_max_us: f("overshoot_max_us"),
            z_max_us: f("z_max_us"),
            lost_events: u("lost_events"),
            swap_in_pages: u("swap_in_pages").unwrap_or(0),
            swap_out_pages: u("swap_out_pages").unwrap_or(0),
            major_faults: u("major_faults"),
            peak_mem_bytes: bytes("peak_mem_mib"),
            peak_mem_swap_bytes: bytes("peak_mem_swap_mib"),
            oom_kills: u("oom_kills"),
            exit_code: get("exit_code").and_then(|v| v.parse().ok()),
            timed_out: get("timed_out") == Some("true"),
            note: get("note").unwrap_or_default().to_string(),
        });
    }
    Ok(rows)
}

fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut current)),
            (c, _) => current.push(c),
        }
    }
    fields.push(current);
    fields
}

pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median, min and max.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

pub fn summarise(values: &[f64]) -> Option<Summary> {
    let median = median(values)?;
    let finite = values.iter().copied().filter(|x| x.is_finite());
    Some(Summary {
        median,
        min: finite.clone().fold(f64::INFINITY, f64::min),
        max: finite.fold(f64::NEG_INFINITY, f64::max),
        n: values.len(),
    })
}

pub const CSV_HEADER: &str = "config,paper_column,mode,trace_mib,threshold_mib,rep,wall_s,program_s,\
span_s,reconstructed_plus_s,reconstructed_s,reconstructed_loop_s,error_pct,error_paired_pct,x_untraced_same_rep,dp_prime_s,suspensions,\
flushes,local_flushes,spread_p50_us,spread_max_us,overshoot_max_us,z_max_us,lost_events,\
swap_in_pages,swap_out_pages,major_faults,peak_mem_mib,peak_mem_swap_mib,oom_kills,exit_code,\
timed_out,note";

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn opt_f(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_default()
}

fn mib(v: u64) -> String {
    format!("{:.1}", v as f64 / (1u64 << 20) as f64)
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The raw CSV, one line per run, with the error against the untraced reference filled in.
pub fn to_csv(rows: &[Row]) -> String {
    let reference = untraced_reference(rows);
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for r in rows {
        let config = r.config;
        let fields = [
            r.label(),
            config.map(|c| c.paper_column()).unwrap_or_default(),
            config
                .and_then(|c| c.recorder_mode())
                .unwrap_or("none")
                .to_string(),
            mib(r.trace_bytes),
            r.threshold.map(mib).unwrap_or_default(),
            r.rep.to_string(),
            format!("{:.4}", r.wall_s),
            opt_f(r.program_s, 4),
            opt_f(r.span_s, 4),
            opt_f(r.reconstructed_plus_s, 4),
            opt_f(r.reconstructed_s, 4),
            opt_f(r.reconstructed_loop_s, 4),
            opt_f(error_pct(r, &reference), 3),
            opt_f(paired_error_pct(rows, r), 3),
            opt_f(paired_slowdown(rows, r), 3),
            opt_f(r.dp_prime_s, 4),
            opt(r.suspensions),
            opt(r.flushes),
            opt(r.local_flushes),
            opt_f(r.spread_p50_us, 1),
            opt_f(r.spread_max_us, 1),
            opt_f(r.overshoot_max_us, 1),
            opt_f(r.z_max_us, 1),
            opt(r.lost_events),
            r.swap_in_pages.to_string(),
            r.swap_out_pages.to_string(),
            opt(r.major_faults),
            r.peak_mem_bytes.map(mib).unwrap_or_default(),
            r.peak_mem_swap_bytes.map(mib).unwrap_or_default(),
            opt(r.oom_kills),
            opt(r.exit_code),
            r.timed_out.to_string(),
            csv_field(&r.note),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// Values of one configuration at one M over the successful repetitions.
fn values(rows: &[Row], config: Config, m: u64, f: impl Fn(&Row) -> Option<f64>) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.config == Some(config) && r.trace_bytes == m && r.usable())
        .filter_map(f)
        .collect()
}

fn cell_text(s: Option<Summary>) -> String {
    match s {
        None => String::new(),
        Some(s) if s.n > 1 => format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max),
        Some(s) => format!("{:.2}", s.median),
    }
}

fn configs_and_sizes(rows: &[Row]) -> (Vec<Config>, Vec<u64>) {
    let mut configs: Vec<Config> = rows.iter().filter_map(|r| r.config).collect();
    configs.sort();
    configs.dedup();
    let mut sizes: Vec<u64> = rows.iter().map(|r| r.trace_bytes).collect();
    sizes.sort();
    sizes.dedup();
    (configs, sizes)
}

/// Facts about the setup, printed above the tables.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    pub mpi: String,
    /// How the workload computes (memory-streaming or register work with page touches).
    pub work: String,
    pub ranks: u32,
    pub mem_limit: u64,
    pub swap: u64,
    pub program_mib_per_rank: u64,
    pub iterations: u32,
    pub thresholds: Vec<u64>,
    pub static_long_s: f64,
}

/// The Markdown report: a table shaped like the paper's Table 1 (program time T(x) and the
/// reconstructed time R(x), median with min–max over the repetitions), then the diagnostics.
pub fn to_markdown(rows: &[Row], setup: &Setup, verdict: &Verdict) -> String {
    let (configs, sizes) = configs_and_sizes(rows);
    let reference = untraced_reference(rows);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Swap versus offload (Table 1 of the paper, on this machine)\n"
    );
    let thresholds: Vec<String> = setup
        .thresholds
        .iter()
        .enumerate()
        .map(|(i, t)| format!("S{} = {} MiB", i + 1, t >> 20))
        .collect();
    let _ = writeln!(
        md,
        "{} ranks ({}); {}; job memory limit {} MiB (cgroup), swap {} MiB; program memory {} MiB per rank; \
         {} iterations; thresholds per rank {}; static and noremeasure and local use S1; static Z \
         when flushing = {:.2} s. Times in seconds: the workload's loop time (`total_s`), median \
         (min–max) over the repetitions whose loop finished (a run whose end hit the time cap \
         still has its loop time; see the last column of the diagnostics). R(x) = loop time in the trace after \
         `evenflush reconstruct --remove both`.\n",
        setup.ranks,
        setup.mpi,
        setup.work,
        setup.mem_limit >> 20,
        setup.swap >> 20,
        setup.program_mib_per_rank,
        setup.iterations,
        thresholds.join(", "),
        setup.static_long_s,
    );
    let mut header = String::from("| M (MiB) | mem (MiB) |");
    let mut rule = String::from("|---|---|");
    for c in &configs {
        let _ = write!(header, " {} |", c.paper_column());
        rule.push_str("---|");
        if c.offloads() {
            let _ = write!(header, " R({}) |", c.paper_column());
            rule.push_str("---|");
        }
    }
    let _ = writeln!(md, "{header}\n{rule}");
    for &m in &sizes {
        let program_mem = u64::from(setup.ranks) * setup.program_mib_per_rank;
        let _ = write!(md, "| {} | {} |", m >> 20, program_mem + (m >> 20));
        for &c in &configs {
            let _ = write!(
                md,
                " {} |",
                cell_text(summarise(&values(rows, c, m, |r| r.program_s)))
            );
            if c.offloads() {
                let _ = write!(
                    md,
                    " {} |",
                    cell_text(summarise(&values(rows, c, m, |r| r.reconstructed_loop_s)))
                );
            }
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "\n## Diagnostics (medians over repetitions)\n\n\
         | M (MiB) | config | x untraced (same rep) | wall s | error % | error % (same rep) | flushes | spread max µs | overshoot max µs | swap-out MiB | major faults | failed/timed out |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for &m in &sizes {
        for &c in &configs {
            let all: Vec<&Row> = rows
                .iter()
                .filter(|r| r.config == Some(c) && r.trace_bytes == m)
                .collect();
            if all.is_empty() {
                continue;
            }
            let failed = all.iter().filter(|r| !r.ok()).count();
            let timed_out = all.iter().filter(|r| r.timed_out).count();
            let med = |f: &dyn Fn(&Row) -> Option<f64>| median(&values(rows, c, m, f));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
                m >> 20,
                c.label(),
                opt_f(med(&|r| paired_slowdown(rows, r)), 2),
                opt_f(med(&|r| Some(r.wall_s)), 2),
                opt_f(med(&|r| error_pct(r, &reference)), 2),
                opt_f(med(&|r| paired_error_pct(rows, r)), 2),
                opt_f(med(&|r| r.flushes.map(|v| v as f64)), 0),
                opt_f(med(&|r| r.spread_max_us), 0),
                opt_f(med(&|r| r.overshoot_max_us), 0),
                opt_f(
                    med(&|r| Some(r.swap_out_pages as f64 * 4096.0 / (1u64 << 20) as f64)),
                    1
                ),
                opt_f(med(&|r| r.major_faults.map(|v| v as f64)), 0),
                failed,
                timed_out,
            );
        }
    }
    let _ = writeln!(
        md,
        "\n## Verdict (computed from the rows above)\n\n{}",
        verdict.text
    );
    md
}

/// The conclusions drawn from the rows, as numbers and as text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Smallest M from which the best dynamic configuration beats the swap baseline at every
    /// larger M.
    pub offload_pays_from: Option<u64>,
    pub largest_m: Option<u64>,
    /// Median off time / median best-dynamic time at the largest M.
    pub swap_over_offload: Option<f64>,
    /// Median best-dynamic time / median untraced time at the largest M.
    pub offload_over_untraced: Option<f64>,
    /// The same two ratios from runs paired within a repetition (median over repetitions).
    pub swap_over_offload_paired: Option<f64>,
    pub offload_over_untraced_paired: Option<f64>,
    /// Median |error| over every dynamic run (all sizes), in percent.
    pub dynamic_abs_error_pct: Option<f64>,
    /// The same with each run's error taken against the untraced run of its own repetition.
    pub dynamic_abs_error_paired_pct: Option<f64>,
    pub local_abs_error_paired_pct: Option<f64>,
    pub local_abs_error_pct: Option<f64>,
    pub dynamic_spread_us: Option<f64>,
    pub local_spread_us: Option<f64>,
    pub text: String,
}

fn median_of(rows: &[Row], config: Config, m: u64, f: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    median(&values(rows, config, m, f))
}

pub fn verdict(rows: &[Row]) -> Verdict {
    let (configs, sizes) = configs_and_sizes(rows);
    let reference = untraced_reference(rows);
    let dynamics: Vec<Config> = configs
        .iter()
        .copied()
        .filter(|c| matches!(c, Config::Dynamic(_)))
        .collect();
    let best_dynamic = |m: u64| -> Option<f64> {
        dynamics
            .iter()
            .filter_map(|&c| median_of(rows, c, m, |r| r.program_s))
            .min_by(f64::total_cmp)
    };
    let off = |m: u64| median_of(rows, Config::Off, m, |r| r.program_s);
    let mut v = Verdict::default();
    let traced_sizes: Vec<u64> = sizes.iter().copied().filter(|&m| m > 0).collect();
    // Scan from the top down: offload pays from the lowest M of the unbroken winning run.
    for &m in traced_sizes.iter().rev() {
        // A swap baseline that did not finish (timed out, killed) counts as lost to offload.
        let off_lost = off(m).is_none()
            && rows
                .iter()
                .any(|r| r.config == Some(Config::Off) && r.trace_bytes == m && !r.usable());
        let wins = match (best_dynamic(m), off(m)) {
            (Some(d), Some(o)) => d < o,
            (Some(_), None) => off_lost,
            _ => false,
        };
        if wins {
            v.offload_pays_from = Some(m);
        } else {
            break;
        }
    }
    v.largest_m = traced_sizes.last().copied();
    if let Some(m) = v.largest_m {
        if let (Some(d), Some(o)) = (best_dynamic(m), off(m)) {
            v.swap_over_offload = Some(o / d);
        }
        if let (Some(d), Some(&u)) = (best_dynamic(m), reference.get(&m)) {
            v.offload_over_untraced = Some(d / u);
        }
        let best = dynamics
            .iter()
            .copied()
            .filter_map(|c| Some((c, median_of(rows, c, m, |r| r.program_s)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, _)| c);
        if let Some(best) = best {
            let at = |config: Config, rep: u32| {
                rows.iter()
                    .find(|r| {
                        r.config == Some(config) && r.trace_bytes == m && r.rep == rep && r.usable()
                    })
                    .and_then(|r| r.program_s)
            };
            let reps: Vec<u32> = rows.iter().map(|r| r.rep).collect();
            let mut swap_ratios = Vec::new();
            let mut slow_ratios = Vec::new();
            for rep in reps
                .iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>()
            {
                if let (Some(o), Some(d)) = (at(Config::Off, rep), at(best, rep)) {
                    swap_ratios.push(o / d);
                }
                if let (Some(d), Some(u)) = (at(best, rep), at(Config::Untraced, rep)) {
                    slow_ratios.push(d / u);
                }
            }
            v.swap_over_offload_paired = median(&swap_ratios);
            v.offload_over_untraced_paired = median(&slow_ratios);
        }
    }
    let pooled = |filter: &dyn Fn(Config) -> bool, f: &dyn Fn(&Row) -> Option<f64>| {
        let all: Vec<f64> = rows
            .iter()
            .filter(|r| r.config.is_some_and(filter) && r.ok() && r.trace_bytes > 0)
            .filter_map(f)
            .collect();
        median(&all)
    };
    let is_dynamic = |c: Config| matches!(c, Config::Dynamic(_));
    let is_local = |c: Config| c == Config::Local;
    v.dynamic_abs_error_pct = pooled(&is_dynamic, &|r| error_pct(r, &reference).map(f64::abs));
    v.local_abs_error_pct = pooled(&is_local, &|r| error_pct(r, &reference).map(f64::abs));
    v.dynamic_abs_error_paired_pct =
        pooled(&is_dynamic, &|r| paired_error_pct(rows, r).map(f64::abs));
    v.local_abs_error_paired_pct = pooled(&is_local, &|r| paired_error_pct(rows, r).map(f64::abs));
    v.dynamic_spread_us = pooled(&is_dynamic, &|r| r.spread_max_us);
    v.local_spread_us = pooled(&is_local, &|r| r.spread_max_us);
    v.text = verdict_text(&v);
    v
}

fn verdict_text(v: &Verdict) -> String {
    let mut lines = Vec::new();
    match (v.offload_pays_from, v.largest_m) {
        (Some(m), _) => lines.push(format!(
            "- Offload (best dynamic threshold) is faster than keeping the trace in memory (swap) \
             from M = {} MiB upwards.",
            m >> 20
        )),
        (None, Some(m)) => lines.push(format!(
            "- Offload is not faster than the swap baseline at the largest M ({} MiB).",
            m >> 20
        )),
        (None, None) => lines.push("- No traced sizes ran.".into()),
    }
    if let (Some(r), Some(m)) = (v.swap_over_offload, v.largest_m) {
        lines.push(format!(
            "- At M = {} MiB swap takes {r:.2}x the time of offload (paper at its largest M: \
             459.5/149.6 = 3.07x). Target >= 3x: {}.",
            m >> 20,
            if r >= 3.0 { "met" } else { "not met" }
        ));
    }
    if let Some(r) = v.offload_over_untraced {
        lines.push(format!(
            "- Offload at the largest M takes {r:.2}x the untraced time (paper: 149.6/58.4 = \
             2.56x). Target <= 1.3x: {}.",
            if r <= 1.3 { "met" } else { "not met" }
        ));
    }
    if let (Some(s), Some(u)) = (v.swap_over_offload_paired, v.offload_over_untraced_paired) {
        lines.push(format!(
            "- Paired within each repetition (steadier on a machine whose load drifts): swap / \
             offload = {s:.2}x, offload / untraced = {u:.2}x at the largest M."
        ));
    }
    if let Some(e) = v.dynamic_abs_error_pct {
        lines.push(format!(
            "- Median |reconstruction error| of dynamic runs: {e:.2} % (paper: 1.2 % on average). \
             Target <= 0.5 %: {}.",
            if e <= 0.5 { "met" } else { "not met" }
        ));
    }
    if let (Some(d), Some(l)) = (v.dynamic_abs_error_paired_pct, v.local_abs_error_paired_pct) {
        lines.push(format!(
            "- Against the untraced run of the same repetition: median |error| dynamic {d:.2} %, \
             local {l:.2} %."
        ));
    }
    match (v.local_abs_error_pct, v.dynamic_abs_error_pct) {
        (Some(l), Some(d)) => lines.push(format!(
            "- Local flushing: median |error| {l:.2} % against {d:.2} % for dynamic ({}).",
            if l > d {
                "higher, as expected"
            } else {
                "not higher"
            }
        )),
        (Some(l), None) => lines.push(format!("- Local flushing: median |error| {l:.2} %.")),
        _ => {}
    }
    if let (Some(l), Some(d)) = (v.local_spread_us, v.dynamic_spread_us) {
        lines.push(format!(
            "- Resume spread (median of per-run max): local {l:.0} µs, dynamic {d:.0} µs."
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn row(config: Config, m: u64, rep: u32, program: f64, recon: Option<f64>) -> Row {
        Row {
            config: Some(config),
            trace_bytes: m * MIB,
            rep,
            wall_s: program + 0.5,
            program_s: Some(program),
            reconstructed_loop_s: recon,
            exit_code: Some(0),
            ..Row::default()
        }
    }

    /// A small synthetic experiment shaped like the paper: swap explodes at the top, offload
    /// grows slowly, local reconstructs worse.
    fn synthetic() -> Vec<Row> {
        let mut rows = Vec::new();
        for rep in 0..3 {
            let jitter = rep as f64 * 0.01;
            for m in [0, 100, 200, 400] {
                rows.push(row(Config::Untraced, m, rep, 10.0 + jitter, None));
                let off = match m {
                    0 | 100 => 10.2,
                    200 => 14.0,
                    _ => 40.0,
                };
                rows.push(row(Config::Off, m, rep, off + jitter, None));
                if m > 0 {
                    let dynamic = 10.5 + m as f64 / 100.0;
                    rows.push(row(
                        Config::Dynamic(0),
                        m,
                        rep,
                        dynamic,
                        Some(10.02 + jitter),
                    ));
                    rows.push(row(Config::Dynamic(1), m, rep, dynamic + 1.0, Some(10.03)));
                    rows.push(row(Config::Local, m, rep, dynamic, Some(10.6)));
                }
            }
        }
        rows
    }

    #[test]
    fn medians_and_summaries() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let s = summarise(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 3));
    }

    #[test]
    fn verdict_finds_where_offload_pays_and_the_ratios() {
        let rows = synthetic();
        let v = verdict(&rows);
        // At 100 MiB swap (10.2) still beats offload (11.5); from 200 MiB on offload wins.
        assert_eq!(v.offload_pays_from, Some(200 * MIB));
        assert_eq!(v.largest_m, Some(400 * MIB));
        let ratio = v.swap_over_offload.unwrap();
        assert!((ratio - 40.01 / 14.5).abs() < 1e-9, "{ratio}");
        let slow = v.offload_over_untraced.unwrap();
        assert!((slow - 14.5 / 10.01).abs() < 1e-9, "{slow}");
        let dyn_err = v.dynamic_abs_error_pct.unwrap();
        let local_err = v.local_abs_error_pct.unwrap();
        assert!(dyn_err < 0.5 && local_err > 5.0, "{dyn_err} {local_err}");
        assert!(v.text.contains("from M = 200 MiB"), "{}", v.text);
        assert!(
            v.text.contains("not met"),
            "ratio 2.76 < 3 must fail: {}",
            v.text
        );
    }

    #[test]
    fn a_timed_out_swap_run_counts_as_lost() {
        let mut rows = synthetic();
        for r in rows.iter_mut() {
            if r.config == Some(Config::Off) && r.trace_bytes == 400 * MIB {
                r.timed_out = true;
                r.exit_code = None;
                r.program_s = None;
            }
        }
        let v = verdict(&rows);
        assert_eq!(v.offload_pays_from, Some(200 * MIB));
        assert_eq!(v.swap_over_offload, None);
    }

    #[test]
    fn a_loop_that_finished_before_the_cap_still_counts() {
        let mut rows = synthetic();
        for r in rows.iter_mut() {
            if r.config == Some(Config::Off) && r.trace_bytes == 400 * MIB {
                // The loop printed its time; writing the swapped-out trace at the end hit the cap.
                r.timed_out = true;
                r.exit_code = None;
            }
        }
        let v = verdict(&rows);
        let ratio = v.swap_over_offload.unwrap();
        assert!((ratio - 40.01 / 14.5).abs() < 1e-9, "{ratio}");
        let md = to_markdown(&rows, &Setup::default(), &v);
        let line = md.lines().find(|l| l.starts_with("| 400 | off |")).unwrap();
        assert!(line.ends_with("| 3/3 |"), "{line}");
    }

    #[test]
    fn csv_has_one_line_per_run_with_errors_filled_in() {
        let mut rows = synthetic();
        rows[0].note = "said \"hi\", twice".into();
        let csv = to_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), rows.len() + 1);
        let columns = CSV_HEADER.split(',').count();
        let error_col = CSV_HEADER
            .split(',')
            .position(|c| c == "error_pct")
            .unwrap();
        let dynamic_line = lines
            .iter()
            .find(|l| l.starts_with("dynamic-S1,T1,dynamic,100.0,"))
            .unwrap();
        let fields: Vec<&str> = dynamic_line.split(',').collect();
        assert_eq!(fields.len(), columns);
        let err: f64 = fields[error_col].parse().unwrap();
        // Untraced median at 100 MiB is 10.01; rep 0 reconstructs to 10.02.
        assert!(
            (err - (10.02 - 10.01) / 10.01 * 100.0).abs() < 1e-3,
            "{err}"
        );
        assert!(
            lines[1].ends_with("\"said \"\"hi\"\", twice\""),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn csv_reads_back_and_pairs_within_a_repetition() {
        let mut rows = synthetic();
        rows[3].note = "killed, \"oom\"".into();
        rows[3].timed_out = true;
        let back = from_csv(&to_csv(&rows)).unwrap();
        assert_eq!(back.len(), rows.len());
        for (a, b) in rows.iter().zip(&back) {
            assert_eq!(a.config, b.config);
            assert_eq!(a.trace_bytes, b.trace_bytes);
            assert_eq!(a.rep, b.rep);
            // Times are written with four decimals.
            let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
                (Some(x), Some(y)) => (x - y).abs() < 1e-4,
                (x, y) => x == y,
            };
            assert!(close(a.program_s, b.program_s), "{a:?} {b:?}");
            assert!(close(a.reconstructed_loop_s, b.reconstructed_loop_s));
            assert_eq!(a.timed_out, b.timed_out);
            assert_eq!(a.note, b.note);
        }
        // Rep 2 off at 400 MiB: 40.02 over its own untraced 10.02.
        let off = back
            .iter()
            .find(|r| r.config == Some(Config::Off) && r.rep == 2 && r.trace_bytes == 400 * MIB)
            .unwrap();
        let x = paired_slowdown(&back, off).unwrap();
        assert!((x - 40.02 / 10.02).abs() < 1e-9, "{x}");
        let local = back
            .iter()
            .find(|r| r.config == Some(Config::Local) && r.rep == 1 && r.trace_bytes == 200 * MIB)
            .unwrap();
        let e = paired_error_pct(&back, local).unwrap();
        assert!((e - (10.6 - 10.01) / 10.01 * 100.0).abs() < 1e-6, "{e}");
        let v = verdict(&back);
        let paired = v.swap_over_offload_paired.unwrap();
        assert!((paired - 40.01 / 14.5).abs() < 1e-9, "{paired}");
        assert!(from_csv("config\nnonsense\n").is_err());
    }

    #[test]
    fn markdown_table_is_shaped_like_table_1() {
        let rows = synthetic();
        let setup = Setup {
            mpi: "openmpi".into(),
            work: "register work".into(),
            ranks: 2,
            mem_limit: 300 * MIB,
            swap: 1024 * MIB,
            program_mib_per_rank: 50,
            iterations: 100,
            thresholds: vec![40 * MIB, 20 * MIB],
            static_long_s: 0.5,
        };
        let md = to_markdown(&rows, &setup, &verdict(&rows));
        assert!(md.contains("| M (MiB) | mem (MiB) | untraced | T | T1 | R(T1) | T2 | R(T2) | local | R(local) |"), "{md}");
        let top = md.lines().find(|l| l.starts_with("| 400 | 500 |")).unwrap();
        // Off at 400 MiB: 40.00..40.02 over three reps.
        assert!(top.contains("40.01 (40.00–40.02)"), "{top}");
        assert!(md.contains("## Verdict"));
    }
}
