//! PNG plots of the results (plotters, DejaVu Sans).

use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use super::plan::Config;
use super::report::{Row, error_pct, median, untraced_reference};

const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// Our own family name, so this module does not depend on which other part of the process
/// registered a font first.
const FAMILY: &str = "evenflush-swap-sans";

fn register_font() -> Result<()> {
    use std::sync::OnceLock;
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = std::fs::read(FONT_PATH)
            .map_err(|e| format!("{FONT_PATH}: {e} (install fonts-dejavu-core)"))?;
        // plotters keeps registered fonts for the whole process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
            .map_err(|_| format!("{FONT_PATH} is not a usable font"))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// One line: a label and (M in MiB, value) points.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

fn colour(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(0, 0, 0),
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(23, 190, 207),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(140, 86, 75),
    ];
    PALETTE[i % PALETTE.len()]
}

fn line_chart(path: &Path, title: &str, y_desc: &str, series: &[Series]) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let x_max = xs.fold(1.0, f64::max) * 1.05;
    let y_max = ys.clone().fold(f64::MIN, f64::max);
    let y_min = ys.fold(f64::MAX, f64::min);
    let (y_lo, y_hi) = if y_max.is_finite() && y_min.is_finite() && y_max > y_min {
        let pad = (y_max - y_min) * 0.08;
        // Quantities that cannot be negative keep their axis at zero or above.
        let lo = if y_min >= 0.0 {
            (y_min - pad).max(0.0)
        } else {
            y_min - pad
        };
        (lo, y_max + pad)
    } else {
        (0.0, 1.0)
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, y_lo..y_hi)?;
    chart
        .configure_mesh()
        .x_desc("trace size M of the job (MiB)")
        .y_desc(y_desc)
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i);
        let style = if s.dashed {
            c.stroke_width(2)
        } else {
            c.stroke_width(3)
        };
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(s.points.clone(), 8, 6, style))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        } else {
            chart
                .draw_series(LineSeries::new(s.points.clone(), style))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 15))
        .draw()?;
    root.present()?;
    Ok(())
}

fn configs(rows: &[Row]) -> Vec<Config> {
    let mut c: Vec<Config> = rows.iter().filter_map(|r| r.config).collect();
    c.sort();
    c.dedup();
    c
}

/// Per configuration, the median of `f` at each M over the successful runs.
fn median_series(rows: &[Row], config: Config, f: impl Fn(&Row) -> Option<f64>) -> Vec<(f64, f64)> {
    let mut sizes: Vec<u64> = rows
        .iter()
        .filter(|r| r.config == Some(config))
        .map(|r| r.trace_bytes)
        .collect();
    sizes.sort();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|m| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.config == Some(config) && r.trace_bytes == m && r.usable())
                .filter_map(&f)
                .collect();
            Some(((m >> 20) as f64, median(&v)?))
        })
        .collect()
}

/// Writes time.png, error.png and spread.png into `dir`; returns the file names written.
pub fn write_all(rows: &[Row], dir: &Path) -> Result<Vec<String>> {
    let configs = configs(rows);
    let reference = untraced_reference(rows);
    let mut written = Vec::new();

    let time: Vec<Series> = configs
        .iter()
        .map(|&c| Series {
            label: if c.label() == c.paper_column() {
                c.label()
            } else {
                format!("{} ({})", c.label(), c.paper_column())
            },
            points: median_series(rows, c, |r| r.program_s),
            dashed: c == Config::Untraced,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    line_chart(
        &dir.join("time.png"),
        "Run time vs trace size (median over repetitions)",
        "workload loop time (s)",
        &time,
    )?;
    written.push("time.png".to_string());

    let error: Vec<Series> = configs
        .iter()
        .filter(|c| c.offloads())
        .map(|&c| Series {
            label: c.label(),
            points: median_series(rows, c, |r| error_pct(r, &reference)),
            dashed: false,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if !error.is_empty() {
        line_chart(
            &dir.join("error.png"),
            "Reconstruction error vs untraced (median)",
            "(R - untraced) / untraced (%)",
            &error,
        )?;
        written.push("error.png".to_string());
    }

    let spread: Vec<Series> = configs
        .iter()
        .filter(|c| c.offloads())
        .map(|&c| Series {
            label: c.label(),
            points: median_series(rows, c, |r| r.spread_max_us.map(|us| us / 1000.0)),
            dashed: false,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if !spread.is_empty() {
        line_chart(
            &dir.join("spread.png"),
            "Resume spread across ranks (max per run, median)",
            "ms",
            &spread,
        )?;
        written.push("spread.png".to_string());
    }
    Ok(written)
}
