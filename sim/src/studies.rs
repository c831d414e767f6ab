//! Studies built on the simulator: the paper's Table 1 and the scale study to a million ranks.

use std::path::Path;

use offload::{ClockScheme, Decision, Mode};
use serde::Serialize;

use crate::{SimConfig, SimResult, simulate};

/// Table 1 of the paper, seconds: M (MB), mem (MB), T, T1, R(T1), T2, R(T2), T3, R(T3), Ts, R(Ts),
/// Ta, R(Ta). T = no offload; 1/2/3 = dynamic with S = 512/256/128 MB; s = static (S = 512);
/// a = dynamic without offset re-measurement (S = 512).
pub const PAPER_TABLE1: [[f64; 13]; 6] = [
    [
        256.0, 1067.0, 59.3, 60.7, 59.7, 77.6, 60.0, 72.0, 59.7, 69.3, 58.8, 64.3, 59.6,
    ],
    [
        512.0, 1312.0, 60.0, 91.9, 60.8, 90.8, 61.1, 91.9, 63.2, 110.5, 60.0, 95.4, 60.9,
    ],
    [
        896.0, 1705.0, 61.1, 93.3, 62.2, 105.1, 62.2, 104.4, 64.1, 111.9, 61.5, 98.0, 61.8,
    ],
    [
        1152.0, 2089.0, 69.6, 120.4, 63.3, 118.9, 63.6, 119.5, 65.2, 152.9, 62.5, 126.2, 63.2,
    ],
    [
        1536.0, 2345.0, 239.8, 147.8, 66.2, 143.8, 64.6, 135.1, 66.2, 196.8, 66.4, 153.1, 65.6,
    ],
    [
        1792.0, 2730.0, 459.5, 149.6, 67.0, 147.5, 66.0, 146.1, 67.0, 170.5, 70.2, 155.7, 67.5,
    ],
];

/// The paper's untraced time (M = 0).
pub const PAPER_UNTRACED_S: f64 = 58.4;

/// One simulated row of Table 1.
#[derive(Clone, Debug, Serialize)]
pub struct Table1Row {
    pub trace_mb: f64,
    /// Program + trace memory of the run without offload, MiB.
    pub memory_mb: f64,
    /// No offload (with the swap model).
    pub off: SimResult,
    /// Dynamic with S = 512, 256, 128 MiB.
    pub dynamic: Vec<SimResult>,
    pub static_512: SimResult,
    pub noremeasure_512: SimResult,
}

fn run_variant(
    base: &SimConfig,
    trace_mb: f64,
    mode: Mode,
    threshold_mb: u64,
) -> Result<SimResult, String> {
    let mut config = base.clone();
    config.app.trace_bytes = (trace_mb * (1u64 << 20) as f64) as u64;
    config.settings.mode = mode;
    config.threshold_bytes = threshold_mb << 20;
    simulate(&config)
}

/// Simulates every cell of Table 1 with `base`'s models (P, disks, clocks, ...).
pub fn table1(base: &SimConfig) -> Result<Vec<Table1Row>, String> {
    PAPER_TABLE1
        .iter()
        .map(|paper| {
            let m = paper[0];
            let dynamic = [512, 256, 128]
                .into_iter()
                .map(|s| run_variant(base, m, Mode::Dynamic, s))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Table1Row {
                trace_mb: m,
                memory_mb: base.memory.program_mb + m * (1.0 + base.app.trace_overhead),
                off: run_variant(base, m, Mode::Off, 512)?,
                dynamic,
                static_512: run_variant(base, m, Mode::Static, 512)?,
                noremeasure_512: run_variant(base, m, Mode::NoRemeasure, 512)?,
            })
        })
        .collect()
}

/// Table 1 as markdown, every cell "simulated (paper)".
pub fn table1_markdown(rows: &[Table1Row], untraced: &SimResult) -> String {
    let mut out = String::new();
    out.push_str(
        "| M (MB) | mem (MB) | T | T1 | R(T1) | T2 | R(T2) | T3 | R(T3) | Ts | R(Ts) | Ta | R(Ta) |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    out.push_str(&format!(
        "| 0 | {:.0} | {:.1} ({:.1}) | | | | | | | | | | |\n",
        untraced.trace_mb + 810.0,
        untraced.total_s,
        PAPER_UNTRACED_S
    ));
    for (row, paper) in rows.iter().zip(PAPER_TABLE1.iter()) {
        let cell = |sim: f64, paper: f64| format!("{sim:.1} ({paper:.1})");
        let mut cells = vec![
            format!("{:.0}", row.trace_mb),
            format!("{:.0} ({:.0})", row.memory_mb, paper[1]),
            cell(row.off.total_s, paper[2]),
        ];
        for (i, d) in row.dynamic.iter().enumerate() {
            cells.push(cell(d.total_s, paper[3 + 2 * i]));
            cells.push(cell(d.reconstructed_s, paper[4 + 2 * i]));
        }
        cells.push(cell(row.static_512.total_s, paper[9]));
        cells.push(cell(row.static_512.reconstructed_s, paper[10]));
        cells.push(cell(row.noremeasure_512.total_s, paper[11]));
        cells.push(cell(row.noremeasure_512.reconstructed_s, paper[12]));
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

/// One point of the scale study.
#[derive(Clone, Debug, Serialize)]
pub struct ScalePoint {
    pub ranks: usize,
    pub clock_scheme: String,
    /// `blocking` (the paper's) or `split`.
    pub decision: String,
    /// The protocol's cost at a collective that does not flush (median over the run's
    /// collectives of the longest time a rank spent in the protocol there): Z of a suspension
    /// without a write for the blocking decision, the decision point's wait for the split one.
    pub overhead_us: f64,
    pub clock_sync_share: f64,
    /// Start-up clock measurement.
    pub init_s: f64,
    pub duration_spread_p50_us: f64,
    pub duration_spread_max_us: f64,
    pub resume_spread_max_us: f64,
    pub overshoot_max_us: f64,
    pub events: u64,
    pub wall_s: f64,
}

/// Per-collective overhead and spread for P = 2^lo … 2^hi, for each (decision, clock scheme)
/// variant, over `suspensions` collectives at which nothing is written.
pub fn scale_study(
    base: &SimConfig,
    exponents: std::ops::RangeInclusive<u32>,
    variants: &[(Decision, ClockScheme)],
    suspensions: u64,
    mut progress: impl FnMut(&ScalePoint),
) -> Result<Vec<ScalePoint>, String> {
    let mut points = Vec::new();
    for exponent in exponents {
        for &(decision, scheme) in variants {
            let mut config = base.clone();
            config.ranks = 1usize << exponent;
            config.settings.mode = Mode::Dynamic;
            config.settings.clock_scheme = scheme;
            config.settings.decision = decision;
            config.app.iterations = suspensions;
            // Nothing is written: this isolates the protocol's own cost.
            config.app.trace_bytes = 0;
            let r = simulate(&config)?;
            let point = ScalePoint {
                ranks: r.ranks,
                clock_scheme: r.clock_scheme.clone(),
                decision: decision.name().to_string(),
                overhead_us: r.no_flush_overhead_us.p50,
                clock_sync_share: r.clock_sync_share,
                init_s: r.init_s,
                duration_spread_p50_us: r.duration_spread_us.p50,
                duration_spread_max_us: r.duration_spread_us.max,
                resume_spread_max_us: r.resume_spread_us.max,
                overshoot_max_us: r.overshoot_us.max,
                events: r.events,
                wall_s: r.wall_s,
            };
            progress(&point);
            points.push(point);
        }
    }
    Ok(points)
}

/// The scale study as a markdown table.
pub fn scale_markdown(points: &[ScalePoint]) -> String {
    let mut out = String::from(
        "| P | decision | clock scheme | overhead per collective without a flush (ms) | clock-sync share | duration spread p50 / max (µs) | resume spread max (µs) | sim events | sim wall (s) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in points {
        out.push_str(&format!(
            "| {} | {} | {} | {:.4} | {:.0} % | {:.1} / {:.1} | {:.1} | {} | {:.1} |\n",
            p.ranks,
            p.decision,
            p.clock_scheme,
            p.overhead_us / 1e3,
            p.clock_sync_share * 100.0,
            p.duration_spread_p50_us,
            p.duration_spread_max_us,
            p.resume_spread_max_us,
            p.events,
            p.wall_s
        ));
    }
    out
}

/// Where the plot's font comes from (Debian package fonts-dejavu-core).
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn register_font() -> anyhow::Result<()> {
    use std::sync::OnceLock;
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH)
                .map_err(|e| format!("{FONT_PATH}: {e} (install fonts-dejavu-core)"))?;
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_PATH} is not a usable font"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Log-log plot of the overhead per suspension (and, dashed, the resume spread) against P, one
/// line per clock scheme.
pub fn plot_scale(points: &[ScalePoint], path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let ranks_max = points.iter().map(|p| p.ranks).max().unwrap_or(2) as f64;
    let ranks_min = points.iter().map(|p| p.ranks).min().unwrap_or(1) as f64;
    let y_values = points
        .iter()
        .flat_map(|p| [p.overhead_us / 1e3, p.resume_spread_max_us / 1e3]);
    let y_max = y_values.clone().fold(1e-3, f64::max) * 2.0;
    let y_min = y_values
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min)
        .min(1.0)
        / 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Protocol overhead at a collective without a flush vs ranks (simulated)",
            ("sans-serif", 26),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (ranks_min / 1.5..ranks_max * 1.5).log_scale(),
            (y_min..y_max).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("ranks P")
        .y_desc("ms")
        .x_label_formatter(&|x| format!("2^{:.0}", x.log2()))
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.3}")
            }
        })
        .label_style(("sans-serif", 16))
        .draw()?;
    let series_name = |p: &ScalePoint| format!("{}, {}", p.decision, p.clock_scheme);
    let schemes: Vec<String> = {
        let mut s: Vec<String> = points.iter().map(series_name).collect();
        s.sort();
        s.dedup();
        s
    };
    let colours = [RED, BLUE, GREEN, MAGENTA];
    for (i, scheme) in schemes.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let series: Vec<&ScalePoint> = points
            .iter()
            .filter(|p| &series_name(p) == scheme)
            .collect();
        let overhead: Vec<(f64, f64)> = series
            .iter()
            .map(|p| (p.ranks as f64, p.overhead_us / 1e3))
            .collect();
        chart
            .draw_series(LineSeries::new(overhead.clone(), colour.stroke_width(3)))?
            .label(format!("{scheme}: overhead per collective without a flush"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
        chart.draw_series(
            overhead
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 4, colour.filled())),
        )?;
        let spread: Vec<(f64, f64)> = series
            .iter()
            .filter(|p| p.resume_spread_max_us > 0.0)
            .map(|p| (p.ranks as f64, p.resume_spread_max_us / 1e3))
            .collect();
        chart
            .draw_series(LineSeries::new(spread, colour.mix(0.5).stroke_width(1)))?
            .label(format!("{scheme}: resume spread (max)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.mix(0.5)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
