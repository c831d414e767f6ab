//! The run matrix: which configurations run at which trace size, in which order.

use std::fmt;

use anyhow::{Result, bail};

/// One way of running the workload, as a column of the paper's Table 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Config {
    /// No recorder at all: the reference time.
    Untraced,
    /// Recorder keeps everything in memory until the end (the swap baseline, T).
    Off,
    /// Equalised suspensions with dynamic Z at threshold number `0`, `1`, `2` (T1, T2, T3).
    Dynamic(u8),
    /// Fixed suspension times (Ts).
    Static,
    /// Dynamic Z, clock offsets measured only once (Ta).
    NoRemeasure,
    /// Each rank flushes alone when its buffer is full (what common tracers do).
    Local,
    /// Dynamic Z with `--threshold auto`: S sized by the recorder from the memory it finds free.
    Auto,
}

impl Config {
    /// The recorder mode passed to `evenflush run --mode`, or `None` for the untraced run.
    pub fn recorder_mode(self) -> Option<&'static str> {
        match self {
            Config::Untraced => None,
            Config::Off => Some("off"),
            Config::Dynamic(_) => Some("dynamic"),
            Config::Static => Some("static"),
            Config::NoRemeasure => Some("noremeasure"),
            Config::Local => Some("local"),
            Config::Auto => Some("dynamic"),
        }
    }

    /// The `--threshold` a cell of this configuration passes, given its planned S.
    pub fn threshold_arg(self, planned: u64) -> String {
        match self {
            Config::Auto => "auto".into(),
            _ => planned.to_string(),
        }
    }

    /// Short label used in CSV rows, tables and plot legends.
    pub fn label(self) -> String {
        match self {
            Config::Dynamic(i) => format!("dynamic-S{}", i + 1),
            Config::Auto => "dynamic-auto".into(),
            other => other.recorder_mode().unwrap_or("untraced").to_string(),
        }
    }

    /// The inverse of [`Config::label`].
    pub fn from_label(label: &str) -> Option<Config> {
        Some(match label {
            "untraced" => Config::Untraced,
            "off" => Config::Off,
            "static" => Config::Static,
            "noremeasure" => Config::NoRemeasure,
            "local" => Config::Local,
            "dynamic-auto" => Config::Auto,
            other => {
                let n: u8 = other.strip_prefix("dynamic-S")?.parse().ok()?;
                Config::Dynamic(n.checked_sub(1)?)
            }
        })
    }

    /// The paper's name for the column.
    pub fn paper_column(self) -> String {
        match self {
            Config::Untraced => "untraced".into(),
            Config::Off => "T".into(),
            Config::Dynamic(i) => format!("T{}", i + 1),
            Config::Static => "Ts".into(),
            Config::NoRemeasure => "Ta".into(),
            Config::Local => "local".into(),
            Config::Auto => "Tauto".into(),
        }
    }

    pub fn is_traced(self) -> bool {
        self != Config::Untraced
    }

    /// Whether the configuration offloads during the run (and so has a threshold).
    pub fn offloads(self) -> bool {
        !matches!(self, Config::Untraced | Config::Off)
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The `--modes` names: `dynamic` stands for all three thresholds.
pub const MODE_NAMES: &[&str] = &[
    "untraced",
    "off",
    "dynamic",
    "static",
    "noremeasure",
    "local",
    "auto",
];

/// Expands `--modes` names into configurations, in table order, without duplicates.
pub fn parse_modes(names: &[String], thresholds: usize) -> Result<Vec<Config>> {
    let mut out = Vec::new();
    for name in names {
        let expanded: Vec<Config> = match name.trim().to_ascii_lowercase().as_str() {
            "untraced" => vec![Config::Untraced],
            "off" | "swap" => vec![Config::Off],
            "dynamic" => (0..thresholds as u8).map(Config::Dynamic).collect(),
            "static" => vec![Config::Static],
            "noremeasure" => vec![Config::NoRemeasure],
            "local" => vec![Config::Local],
            "auto" => vec![Config::Auto],
            other => bail!("unknown mode {other:?}; expected {}", MODE_NAMES.join(", ")),
        };
        for c in expanded {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        bail!("--modes names no configuration");
    }
    Ok(out)
}

/// One run of the matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub config: Config,
    /// Trace bytes the whole job records (all ranks together).
    pub trace_bytes: u64,
    /// Per-rank buffer threshold S, for configurations that offload.
    pub threshold: Option<u64>,
    pub rep: u32,
}

impl Cell {
    /// A name that is unique within the matrix, usable as a directory name.
    pub fn id(&self) -> String {
        format!(
            "r{}-M{}-{}",
            self.rep,
            self.trace_bytes >> 20,
            self.config.label()
        )
    }
}

/// Builds the run order: repetition outermost, so a slow phase of the shared machine spreads over
/// every configuration instead of hitting all repetitions of one; within a repetition sizes go
/// up, and at each size every configuration runs once. An offloading configuration whose
/// threshold is not given falls back to the first threshold.
pub fn build_matrix(sizes: &[u64], configs: &[Config], thresholds: &[u64], reps: u32) -> Vec<Cell> {
    let mut cells = Vec::new();
    for rep in 0..reps {
        for &trace_bytes in sizes {
            for &config in configs {
                // At M = 0 the recorder has nothing to offload: every traced mode is the same run.
                if trace_bytes == 0 && !matches!(config, Config::Untraced | Config::Off) {
                    continue;
                }
                let threshold = match config {
                    Config::Dynamic(i) => thresholds.get(i as usize).copied(),
                    // The recorder chooses; the row takes the S it chose from the trace.
                    Config::Auto => None,
                    c if c.offloads() => thresholds.first().copied(),
                    _ => None,
                };
                cells.push(Cell {
                    config,
                    trace_bytes,
                    threshold,
                    rep,
                });
            }
        }
    }
    cells
}

/// The paper's sizes relative to its 2 GB node were 0, 1/8, 1/4, 7/16, 9/16, 3/4 and 7/8 of RAM +
/// swap; here the default spans 0 to twice the memory limit so the top sizes must swap.
pub fn default_sizes(mem_limit: u64, quick: bool) -> Vec<u64> {
    let fractions: &[f64] = if quick {
        &[0.0, 0.5, 2.0]
    } else {
        &[0.0, 0.25, 0.5, 1.0, 1.5, 2.0]
    };
    fractions
        .iter()
        .map(|f| round_mib((mem_limit as f64 * f) as u64))
        .collect()
}

/// Thresholds in halving steps like the paper's 512/256/128 MB, but 1/8, 1/16, 1/32 of each
/// rank's share of the memory limit instead of the paper's 1/4, 1/8, 1/16. A flush now encodes
/// its buffer in 4 MiB pieces (the recorder's sink), so it needs only a few pieces beyond the
/// buffer itself; but the written file pages are charged to the job's cgroup until they are
/// dropped after `fdatasync`, and S = 1/4 of the share (64 MiB per rank at a 512 MiB limit) left
/// too little room beside the program's third of the limit and the MPI libraries. Measured at
/// 1/8 (32 MiB per rank, 2 ranks, 512 MiB, M = 1 GiB): peak 368 MiB in the cgroup, no swap.
pub fn default_thresholds(mem_limit: u64, ranks: u32) -> Vec<u64> {
    let share = mem_limit / u64::from(ranks.max(1));
    [8, 16, 32]
        .iter()
        .map(|d| round_mib(share / d).max(1 << 20))
        .collect()
}

/// Program memory per rank so the whole program takes a third of the limit (680 MB of 2 GB).
pub fn default_program_mib(mem_limit: u64, ranks: u32) -> u64 {
    ((mem_limit / 3 / u64::from(ranks.max(1))) >> 20).max(1)
}

/// Per-iteration, per-rank record bytes giving `trace_bytes` for the whole job.
pub fn record_bytes_per_iteration(trace_bytes: u64, ranks: u32, iterations: u32) -> u64 {
    let per = u64::from(ranks.max(1)) * u64::from(iterations.max(1));
    trace_bytes.div_ceil(per)
}

fn round_mib(bytes: u64) -> u64 {
    (bytes >> 20) << 20
}

/// `1.5GiB`-style rendering for messages and tables.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0}{}", UNITS[unit])
    } else {
        format!("{value:.2}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn dynamic_expands_to_every_threshold_and_order_is_stable() {
        let names: Vec<String> = ["local", "dynamic", "off", "dynamic"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let configs = parse_modes(&names, 3).unwrap();
        assert_eq!(
            configs,
            vec![
                Config::Off,
                Config::Dynamic(0),
                Config::Dynamic(1),
                Config::Dynamic(2),
                Config::Local
            ]
        );
        assert!(parse_modes(&["swapless".to_string()], 3).is_err());
    }

    #[test]
    fn matrix_skips_offload_modes_at_zero_and_assigns_thresholds() {
        let configs = [
            Config::Untraced,
            Config::Off,
            Config::Dynamic(0),
            Config::Dynamic(1),
            Config::Static,
        ];
        let sizes = [0, 100 * MIB];
        let thresholds = [40 * MIB, 20 * MIB];
        let cells = build_matrix(&sizes, &configs, &thresholds, 2);
        // Per rep: 2 runs at M = 0, 5 at M = 100 MiB.
        assert_eq!(cells.len(), 2 * (2 + 5));
        assert!(cells[..7].iter().all(|c| c.rep == 0));
        let at_zero: Vec<Config> = cells
            .iter()
            .filter(|c| c.trace_bytes == 0 && c.rep == 0)
            .map(|c| c.config)
            .collect();
        assert_eq!(at_zero, vec![Config::Untraced, Config::Off]);
        let find = |cfg| cells.iter().find(|c| c.config == cfg).unwrap().threshold;
        assert_eq!(find(Config::Dynamic(1)), Some(20 * MIB));
        assert_eq!(find(Config::Static), Some(40 * MIB));
        assert_eq!(find(Config::Off), None);
        let mut ids: Vec<String> = cells.iter().map(Cell::id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), cells.len(), "cell ids must be unique");
    }

    #[test]
    fn defaults_follow_the_papers_proportions() {
        let limit = 1024 * MIB;
        let sizes = default_sizes(limit, false);
        assert_eq!(sizes.first(), Some(&0));
        assert_eq!(sizes.last(), Some(&(2 * limit)));
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            default_thresholds(limit, 2),
            vec![64 * MIB, 32 * MIB, 16 * MIB]
        );
        // A third of the limit, split over the ranks.
        assert_eq!(default_program_mib(limit, 2), 170);
        assert_eq!(record_bytes_per_iteration(1000, 2, 100), 5);
        assert_eq!(record_bytes_per_iteration(1001, 2, 100), 6);
        assert_eq!(human_bytes(1536 * MIB), "1.50GiB");
        assert_eq!(human_bytes(64 * MIB), "64MiB");
    }
}
